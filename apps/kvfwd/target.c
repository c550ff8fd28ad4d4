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
 * Messages (notifications): initiator -> target "hello ADDR BLOCK OP
 * VERIFY [REACH]" (OP: write, read, or sink for a plain-socket baseline
 * alone; REACH: a verified read looks at blocks below it only)
 * and "bye"; target -> initiator "ready SINKPORT", credits, "result
 * CHECKED MIXED STALE", or "busy" to an initiator that comes while
 * another one's session lives: a target serves one initiator at a time.
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

struct target {
	const struct kvfwd_opts *o;
	FILE *out;		/* where sessions are announced */
	uint8_t *buf;
	struct kvt_fence_table *ft;
	uint32_t max_slots;
	/* the current initiator */
	struct kvt_peer *back;
	char back_addr[128];
	uint64_t block;
	uint32_t nslots;
	int verify;
	uint64_t *round;	/* per slot */
	uint64_t checked, mixed, stale;
	uint64_t late;		/* late copies of a slot's previous fence */
	/* credits waiting to go, and those in flight per submission */
	struct kvfwd_credit pend[4096];
	unsigned int npend;
	struct kvt_batch *cb;
	unsigned int cb_used;
	uint16_t sink_port;
	struct {
		unsigned int n;
		struct kvfwd_credit c[KVFWD_CREDITS_PER_MSG];
	} sent[CREDIT_MSGS];
};

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void
credit(struct target *t, uint32_t slot)
{
	uint64_t room = kvfwd_room(t->round[slot], slot);

	kvt_fence_arm(t->ft, slot, room);
	if (t->npend < RTE_DIM(t->pend))
		t->pend[t->npend++] = (struct kvfwd_credit){ .slot = slot,
							     .room = room };
}

/* Requeue credits whose message did not get through; reset when idle. */
static void
reap_credits(struct target *t)
{
	unsigned int i, k;

	if (t->cb_used == 0 || kvt_poll(t->cb) != 0)
		return;
	for (i = 0; i < t->cb_used; i++) {
		if (kvt_status(t->cb, i) == 0)
			continue;
		for (k = 0; k < t->sent[i].n && t->npend < RTE_DIM(t->pend); k++)
			t->pend[t->npend++] = t->sent[i].c[k];
	}
	kvt_batch_reset(t->cb);
	t->cb_used = 0;
}

static void
send_credits(struct target *t)
{
	uint8_t msg[KVT_NOTIFY_MAX];
	struct kvt_submit_opts so = { .notify = msg };
	unsigned int n;

	reap_credits(t);
	while (t->npend > 0 && t->cb_used < CREDIT_MSGS && t->back != NULL) {
		n = RTE_MIN(t->npend, (unsigned int)KVFWD_CREDITS_PER_MSG);
		msg[0] = KVFWD_MSG_CREDIT;
		msg[1] = (uint8_t)n;
		memcpy(msg + 8, &t->pend[t->npend - n], n * sizeof(t->pend[0]));
		so.notify_len = 8 + n * (uint32_t)sizeof(t->pend[0]);
		if (kvt_submit(t->cb, t->back, NULL, 0, &so) < 0)
			return;
		t->sent[t->cb_used].n = n;
		memcpy(t->sent[t->cb_used].c, &t->pend[t->npend - n],
		       n * sizeof(t->pend[0]));
		t->cb_used++;
		t->npend -= n;
	}
}

/* A text message; retried while the initiator's inbox is full. */
static void
send_text(struct target *t, const char *text)
{
	struct kvt_submit_opts so = { .notify = text,
				      .notify_len = (uint32_t)strlen(text) };
	struct kvt_batch *b = kvt_batch_alloc(1);
	double until = kvfwd_now() + 10;
	int ret = -1;

	while (b != NULL && t->back != NULL && ret != 0 && kvfwd_now() < until) {
		ret = kvt_submit(b, t->back, NULL, 0, &so);
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
session_end(struct target *t)
{
	if (t->back != NULL) {
		reap_credits(t);
		kvt_wait(t->cb, 5000000);
		kvt_batch_reset(t->cb);
		t->cb_used = 0;
		kvt_peer_close(t->back);
	}
	t->back = NULL;
	t->npend = 0;
	t->nslots = 0;
}

/* A second initiator while the first one's session lives: tell it. */
static void
refuse_busy(struct target *t, const char *addr)
{
	struct kvt_submit_opts so = { .notify = "busy", .notify_len = 4 };
	struct kvt_peer *p = kvt_peer_open(addr, 5000);
	struct kvt_batch *b;

	fprintf(stderr, "kvfwd target: initiator %s refused: serving %s\n", addr,
		t->back_addr);
	if (p == NULL)
		return;
	b = kvt_batch_alloc(1);
	if (b != NULL && kvt_submit(b, p, NULL, 0, &so) >= 0)
		kvt_wait(b, 5000000);
	kvt_batch_free(b);
	kvt_peer_close(p);
}

static unsigned int scan_slots(struct target *t);

static void
on_hello(struct target *t, const char *text)
{
	char addr[128], op[8], answer[32];
	unsigned long long block, reach = ~0ull;
	uint64_t n;
	uint32_t s;

	if (sscanf(text, "hello %127s %llu %7s %d %llu", addr, &block, op,
		   &t->verify, &reach) < 4 || block == 0 || block > t->o->buffer) {
		fprintf(stderr, "kvfwd target: bad hello '%s'\n", text);
		return;
	}
	if (t->back != NULL && strcmp(addr, t->back_addr) != 0 &&
	    kvt_peer_state(t->back) == 0) {
		refuse_busy(t, addr);
		return;
	}
	session_end(t);
	t->block = block;
	t->checked = t->mixed = t->stale = t->late = 0;
	if (strcmp(op, "read") == 0) {
		/* Read verify: every block the initiator may read (the
		 * hello's last field, else all) holds the pattern of its
		 * index. */
		n = RTE_MIN(t->o->buffer / block, (uint64_t)reach);
		for (s = 0; s < n; s++)
			kvfwd_fill(t->buf + (uint64_t)s * block, block, s + 1,
				   kvfwd_is_dev(t->o->dst_loc), 0);
	}
	t->back = kvt_peer_open(addr, 5000);
	if (t->back == NULL) {
		fprintf(stderr, "kvfwd target: cannot reach initiator %s: %s\n",
			addr, rte_strerror(rte_errno));
		return;
	}
	snprintf(t->back_addr, sizeof(t->back_addr), "%s", addr);
	fprintf(t->out, "kvfwd target: serving initiator %s\n", addr);
	fflush(t->out);
	if (strcmp(op, "write") == 0) {
		t->nslots = (uint32_t)RTE_MIN(t->o->buffer / block,
					      (uint64_t)t->max_slots);
		for (s = 0; s < t->nslots; s++)
			credit(t, s);
	}
	snprintf(answer, sizeof(answer), "ready %u", t->sink_port);
	send_text(t, answer);
}

static void
on_message(struct target *t, const struct kvt_notify_msg *m)
{
	char text[KVT_NOTIFY_MAX + 1], res[128];

	memcpy(text, m->data, m->len);
	text[m->len] = '\0';
	if (strncmp(text, "hello ", 6) == 0) {
		on_hello(t, text);
	} else if (strcmp(text, "bye") == 0) {
		/* The initiator saw every fence land before it said bye:
		 * one last look finds the ones not scanned yet. */
		if (t->nslots > 0)
			scan_slots(t);
		snprintf(res, sizeof(res), "result %" PRIu64 " %" PRIu64 " %" PRIu64,
			 t->checked, t->mixed, t->stale);
		if (t->late != 0)
			fprintf(stderr, "kvfwd target: %" PRIu64 " late copies of earlier fences seen (and left to be overwritten)\n",
				t->late);
		t->npend = 0;	/* the run is over: no more credits */
		send_text(t, res);
		session_end(t);
	}
}

/* Look at every armed slot once; @return how many resolved. */
static unsigned int
scan_slots(struct target *t)
{
	unsigned int s, n = 0;
	int ret;

	for (s = 0; s < t->nslots; s++) {
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
			t->late++;
			continue;
		}
		n++;
		if (ret == 0) {
			t->checked++;
			if (t->verify &&
			    !kvfwd_check(t->buf + (uint64_t)s * t->block,
					 t->block, kvfwd_room(t->round[s], s),
					 kvfwd_is_dev(t->o->dst_loc)))
				t->mixed++;
		} else {
			t->stale++;
		}
		t->round[s]++;
		credit(t, s);
	}
	return n;
}

int
kvfwd_target(const struct kvfwd_opts *o, FILE *ready)
{
	struct timespec nap = { 0, 20000 };
	struct kvt_notify_msg msgs[16];
	struct target t = { .o = o, .out = ready };
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
	t.max_slots = (uint32_t)RTE_MIN(o->buffer / FENCE_MIN_BLOCK,
					(uint64_t)(1 << 20));
	t.ft = kvt_fence_table_create(t.max_slots, NULL);
	t.round = calloc(t.max_slots, sizeof(*t.round));
	t.cb = kvt_batch_alloc(CREDIT_MSGS);
	if (t.ft == NULL || t.round == NULL || t.cb == NULL) {
		fprintf(stderr, "kvfwd target: out of memory\n");
		return KVFWD_EXIT_USAGE;
	}
	t.sink_port = kvfwd_sink_start();
	kvt_listen_addr(addr, sizeof(addr));
	fprintf(ready, "kvfwd target: listening on %s buffer %#" PRIxPTR " %" PRIu64 "\n",
		addr, (uintptr_t)t.buf, o->buffer);
	fflush(ready);
	while (!stop) {
		work = 0;
		n = kvt_notify_poll(msgs, RTE_DIM(msgs));
		for (i = 0; i < n; i++)
			on_message(&t, &msgs[i]);
		work += (unsigned int)n;
		if (t.nslots > 0)
			work += scan_slots(&t);
		send_credits(&t);
		if (work == 0)
			nanosleep(&nap, NULL);
	}
	session_end(&t);
	kvt_batch_free(t.cb);
	free(t.round);
	return 0;
}
