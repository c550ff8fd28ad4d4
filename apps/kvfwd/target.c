/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvfwd target: exports a buffer and a fence table and serves until told
 * to stop.  With fences it is also the receiver of the stale-completion
 * stress: it arms one fence slot per destination block with a room id,
 * hands (slot, room) to the initiator as a credit, and when the slot's
 * fence arrives checks the block against the pattern of that room.  A
 * fence that matches over a wrong block is "mixed"; a fence holding
 * another room is "stale".
 *
 * Sessions: up to --initiators N initiators are served at once, each in
 * a session of its own (named by the initiator engine's name, which its
 * notifications carry) with its own credits, counters, 1/N of the buffer
 * and 1/N of the fence slots.  Plain runs (no fence, no verify, no tcp
 * baseline) need no session: any number write to the whole buffer.
 *
 * Messages (notifications): initiator -> target "hello ADDR BLOCK OP
 * VERIFY [REACH]" (OP: write, read, or sink for a plain-socket baseline
 * alone; REACH: a verified read looks at blocks below it only)
 * and "bye"; target -> initiator "ready SINKPORT OFF LEN SLOT0" (the
 * session's area of the buffer and its first slot), credits, "result
 * CHECKED MIXED STALE", or "busy" to an initiator that comes while N
 * sessions live.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_common.h>
#include <rte_errno.h>

#include "kvfwd.h"

#define FENCE_MIN_BLOCK 4096
#define CREDIT_MSGS 256

static volatile sig_atomic_t stop;

/* One initiator's session. */
struct session {
	char name[sizeof(((struct kvt_notify_msg *)0)->peer)];	/* its engine */
	struct kvt_peer *back;	/* NULL: free */
	char back_addr[128];
	uint64_t off, len;	/* its area of the buffer */
	uint32_t slot0;		/* its first fence slot */
	uint64_t block;
	uint32_t nslots;	/* armed, from slot0 */
	int verify;
	uint64_t checked, mixed, stale;
	uint64_t late;		/* late copies of a slot's previous fence */
	/* credits waiting to go, and those in flight per submission */
	struct kvfwd_credit pend[4096];
	unsigned int npend;
	struct kvt_batch *cb;
	unsigned int cb_used;
	struct {
		unsigned int n;
		struct kvfwd_credit c[KVFWD_CREDITS_PER_MSG];
	} sent[CREDIT_MSGS];
};

struct target {
	const struct kvfwd_opts *o;
	FILE *out;		/* where sessions are announced */
	uint8_t *buf;
	struct kvt_fence_table *ft;
	uint64_t *round;	/* per slot */
	uint16_t sink_port;
	unsigned int nsess;
	uint64_t area;		/* bytes of buffer per session */
	uint32_t area_slots;	/* fence slots per session */
	struct session *sess;
};

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void
credit(struct target *t, struct session *ss, uint32_t slot)
{
	uint64_t room = kvfwd_room(t->round[slot], slot);

	kvt_fence_arm(t->ft, slot, room);
	if (ss->npend < RTE_DIM(ss->pend))
		ss->pend[ss->npend++] = (struct kvfwd_credit){ .slot = slot,
							       .room = room };
}

/* Requeue credits whose message did not get through; reset when idle. */
static void
reap_credits(struct session *ss)
{
	unsigned int i, k;

	if (ss->cb_used == 0 || kvt_poll(ss->cb) != 0)
		return;
	for (i = 0; i < ss->cb_used; i++) {
		if (kvt_status(ss->cb, i) == 0)
			continue;
		for (k = 0; k < ss->sent[i].n && ss->npend < RTE_DIM(ss->pend);
		     k++)
			ss->pend[ss->npend++] = ss->sent[i].c[k];
	}
	kvt_batch_reset(ss->cb);
	ss->cb_used = 0;
}

static void
send_credits(struct session *ss)
{
	uint8_t msg[KVT_NOTIFY_MAX];
	struct kvt_submit_opts so = { .notify = msg };
	unsigned int n;

	reap_credits(ss);
	while (ss->npend > 0 && ss->cb_used < CREDIT_MSGS && ss->back != NULL) {
		n = RTE_MIN(ss->npend, (unsigned int)KVFWD_CREDITS_PER_MSG);
		msg[0] = KVFWD_MSG_CREDIT;
		msg[1] = (uint8_t)n;
		memcpy(msg + 8, &ss->pend[ss->npend - n], n * sizeof(ss->pend[0]));
		so.notify_len = 8 + n * (uint32_t)sizeof(ss->pend[0]);
		if (kvt_submit(ss->cb, ss->back, NULL, 0, &so) < 0)
			return;
		ss->sent[ss->cb_used].n = n;
		memcpy(ss->sent[ss->cb_used].c, &ss->pend[ss->npend - n],
		       n * sizeof(ss->pend[0]));
		ss->cb_used++;
		ss->npend -= n;
	}
}

/* A text message; retried while the initiator's inbox is full. */
static void
send_text(struct kvt_peer *p, const char *text)
{
	struct kvt_submit_opts so = { .notify = text,
				      .notify_len = (uint32_t)strlen(text) };
	struct kvt_batch *b = kvt_batch_alloc(1);
	double until = kvfwd_now() + 10;
	int ret = -1;

	while (b != NULL && p != NULL && ret != 0 && kvfwd_now() < until) {
		ret = kvt_submit(b, p, NULL, 0, &so);
		if (ret >= 0 && kvt_wait(b, 5000000) == 0)
			ret = kvt_status(b, 0);
		kvt_batch_reset(b);
		if (ret != 0)
			usleep(1000);
	}
	if (ret != 0)
		fprintf(stderr, "kvfwd target: could not send '%s'\n", text);
	kvt_batch_free(b);
}

static void
session_end(struct session *ss)
{
	if (ss->back != NULL) {
		reap_credits(ss);
		kvt_wait(ss->cb, 5000000);
		kvt_batch_reset(ss->cb);
		ss->cb_used = 0;
		kvt_peer_close(ss->back);
	}
	ss->back = NULL;
	ss->name[0] = '\0';
	ss->npend = 0;
	ss->nslots = 0;
}

/* The session of initiator name; else a free one (a session whose
 * initiator is gone is free); NULL when every session is taken. */
static struct session *
session_for(struct target *t, const char *name)
{
	struct session *free_ss = NULL, *ss;
	unsigned int i;

	for (i = 0; i < t->nsess; i++) {
		ss = &t->sess[i];
		if (ss->back != NULL && strcmp(ss->name, name) == 0)
			return ss;
		if (free_ss == NULL &&
		    (ss->back == NULL || kvt_peer_state(ss->back) != 0))
			free_ss = ss;
	}
	return free_ss;
}

static struct session *
session_of(struct target *t, const char *name)
{
	unsigned int i;

	for (i = 0; i < t->nsess; i++)
		if (t->sess[i].back != NULL && strcmp(t->sess[i].name, name) == 0)
			return &t->sess[i];
	return NULL;
}

/* An initiator beyond --initiators: tell it. */
static void
refuse_busy(struct target *t, const char *addr)
{
	struct kvt_peer *p = kvt_peer_open(addr, 5000);

	fprintf(stderr, "kvfwd target: initiator %s refused: %u session(s) live (--initiators)\n",
		addr, t->nsess);
	send_text(p, "busy");
	kvt_peer_close(p);
}

static unsigned int scan_slots(struct target *t, struct session *ss);

static void
on_hello(struct target *t, const char *from, const char *text)
{
	char addr[128], op[8], answer[96];
	unsigned long long block, reach = ~0ull;
	struct session *ss;
	int verify;
	uint64_t n;
	uint32_t s;

	if (sscanf(text, "hello %127s %llu %7s %d %llu", addr, &block, op,
		   &verify, &reach) < 4 || block == 0 || block > t->area) {
		fprintf(stderr, "kvfwd target: bad hello '%s'\n", text);
		return;
	}
	ss = session_for(t, from);
	if (ss == NULL) {
		refuse_busy(t, addr);
		return;
	}
	session_end(ss);
	snprintf(ss->name, sizeof(ss->name), "%.*s", (int)sizeof(ss->name) - 1,
		 from);
	ss->block = block;
	ss->verify = verify;
	ss->checked = ss->mixed = ss->stale = ss->late = 0;
	if (strcmp(op, "read") == 0) {
		/* Read verify: every block the initiator may read (the
		 * hello's last field, else all) holds the pattern of its
		 * index in the session's area. */
		n = RTE_MIN(ss->len / block, (uint64_t)reach);
		for (s = 0; s < n; s++)
			kvfwd_fill(t->buf + ss->off + (uint64_t)s * block, block,
				   s + 1, kvfwd_is_dev(t->o->dst_loc), 0);
	}
	ss->back = kvt_peer_open(addr, 5000);
	if (ss->back == NULL) {
		fprintf(stderr, "kvfwd target: cannot reach initiator %s: %s\n",
			addr, rte_strerror(rte_errno));
		ss->name[0] = '\0';
		return;
	}
	snprintf(ss->back_addr, sizeof(ss->back_addr), "%s", addr);
	fprintf(t->out, "kvfwd target: serving initiator %s\n", addr);
	fflush(t->out);
	if (strcmp(op, "write") == 0) {
		ss->nslots = (uint32_t)RTE_MIN(ss->len / block,
					       (uint64_t)t->area_slots);
		for (s = 0; s < ss->nslots; s++)
			credit(t, ss, ss->slot0 + s);
	}
	snprintf(answer, sizeof(answer), "ready %u %" PRIu64 " %" PRIu64 " %u",
		 t->sink_port, ss->off, ss->len, ss->slot0);
	send_text(ss->back, answer);
}

static void
on_bye(struct target *t, struct session *ss)
{
	char res[128];

	/* The initiator saw every fence land before it said bye: one last
	 * look finds the ones not scanned yet. */
	if (ss->nslots > 0)
		scan_slots(t, ss);
	snprintf(res, sizeof(res), "result %" PRIu64 " %" PRIu64 " %" PRIu64,
		 ss->checked, ss->mixed, ss->stale);
	if (ss->late != 0)
		fprintf(stderr, "kvfwd target: %" PRIu64 " late copies of earlier fences seen (and left to be overwritten)\n",
			ss->late);
	ss->npend = 0;	/* the run is over: no more credits */
	send_text(ss->back, res);
	session_end(ss);
}

static void
on_message(struct target *t, const struct kvt_notify_msg *m)
{
	char text[KVT_NOTIFY_MAX + 1];
	struct session *ss;

	memcpy(text, m->data, m->len);
	text[m->len] = '\0';
	if (strncmp(text, "hello ", 6) == 0) {
		on_hello(t, m->peer, text);
	} else if (strcmp(text, "bye") == 0) {
		ss = session_of(t, m->peer);
		if (ss != NULL)
			on_bye(t, ss);
	}
}

/* Look at every armed slot once; @return how many resolved. */
static unsigned int
scan_slots(struct target *t, struct session *ss)
{
	unsigned int s, n = 0;
	int ret;

	for (s = ss->slot0; s < ss->slot0 + ss->nslots; s++) {
		ret = kvt_fence_poll(t->ft, s);
		if (ret == -EAGAIN)
			continue;
		/* The slot's previous room: a second copy of its fence (sent
		 * again over another rail after the first copy's link broke)
		 * that landed after the slot was armed again.  Not this
		 * round's answer: the current room's fence overwrites it. */
		if (ret == -ESTALE && t->round[s] > 0 &&
		    kvt_fence_table_words(t->ft)[s] ==
		    kvfwd_room(t->round[s] - 1, s)) {
			ss->late++;
			continue;
		}
		n++;
		if (ret == 0) {
			ss->checked++;
			if (ss->verify &&
			    !kvfwd_check(t->buf + ss->off +
					 (uint64_t)(s - ss->slot0) * ss->block,
					 ss->block, kvfwd_room(t->round[s], s),
					 kvfwd_is_dev(t->o->dst_loc)))
				ss->mixed++;
		} else {
			ss->stale++;
		}
		t->round[s]++;
		credit(t, ss, s);
	}
	return n;
}

/* Split the buffer and the fence slots in --initiators areas. */
static int
sessions_init(struct target *t, uint32_t max_slots)
{
	unsigned int i;

	t->nsess = t->o->initiators;
	t->area = t->o->buffer / t->nsess / 4096 * 4096;
	t->area_slots = max_slots / t->nsess;
	if (t->nsess == 1)
		t->area = t->o->buffer;
	if (t->area == 0 || t->area_slots == 0) {
		fprintf(stderr, "kvfwd target: a %" PRIu64 "-byte buffer cannot be split in %u areas\n",
			t->o->buffer, t->nsess);
		return -1;
	}
	t->sess = calloc(t->nsess, sizeof(*t->sess));
	if (t->sess == NULL)
		return -1;
	for (i = 0; i < t->nsess; i++) {
		t->sess[i].off = (uint64_t)i * t->area;
		t->sess[i].len = t->area;
		t->sess[i].slot0 = i * t->area_slots;
		t->sess[i].cb = kvt_batch_alloc(CREDIT_MSGS);
		if (t->sess[i].cb == NULL)
			return -1;
	}
	return 0;
}

static void
sessions_fini(struct target *t)
{
	unsigned int i;

	for (i = 0; t->sess != NULL && i < t->nsess; i++) {
		session_end(&t->sess[i]);
		kvt_batch_free(t->sess[i].cb);
	}
	free(t->sess);
}

/* One turn over the live sessions: fences that landed, credits to go. */
static unsigned int
sessions_serve(struct target *t)
{
	unsigned int i, work = 0;

	for (i = 0; i < t->nsess; i++) {
		if (t->sess[i].back == NULL)
			continue;
		if (t->sess[i].nslots > 0)
			work += scan_slots(t, &t->sess[i]);
		send_credits(&t->sess[i]);
	}
	return work;
}

int
kvfwd_target(const struct kvfwd_opts *o, FILE *ready)
{
	struct timespec nap = { 0, 20000 };
	struct kvt_notify_msg msgs[16];
	struct target t = { .o = o, .out = ready };
	uint32_t max_slots;
	char addr[64];
	unsigned int work;
	int i, n;

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	t.buf = kvt_mem_alloc(o->buffer, o->dst_loc);
	if (t.buf == NULL ||
	    kvt_mem_register(t.buf, o->buffer, o->dst_loc,
			     KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE) == NULL) {
		fprintf(stderr, "kvfwd target: cannot register %" PRIu64 " bytes at %s: %s\n",
			o->buffer, o->dst_loc, rte_strerror(rte_errno));
		return KVFWD_EXIT_USAGE;
	}
	max_slots = (uint32_t)RTE_MIN(o->buffer / FENCE_MIN_BLOCK,
				      (uint64_t)(1 << 20));
	t.ft = kvt_fence_table_create(max_slots, NULL);
	t.round = calloc(max_slots, sizeof(*t.round));
	if (t.ft == NULL || t.round == NULL || sessions_init(&t, max_slots) < 0) {
		fprintf(stderr, "kvfwd target: out of memory\n");
		return KVFWD_EXIT_USAGE;
	}
	t.sink_port = kvfwd_sink_start();
	kvt_listen_addr(addr, sizeof(addr));
	fprintf(ready, "kvfwd target: listening on %s buffer %#" PRIxPTR " %" PRIu64 "\n",
		addr, (uintptr_t)t.buf, o->buffer);
	fflush(ready);
	while (!stop) {
		n = kvt_notify_poll(msgs, RTE_DIM(msgs));
		for (i = 0; i < n; i++)
			on_message(&t, &msgs[i]);
		work = (unsigned int)RTE_MAX(n, 0) + sessions_serve(&t);
		if (work == 0)
			nanosleep(&nap, NULL);
	}
	sessions_fini(&t);
	free(t.round);
	return 0;
}
