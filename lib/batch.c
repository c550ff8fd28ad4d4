/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Batches and submissions: validation, slicing, queueing to the lcores,
 * and completion.
 *
 * A submission is either
 *  - ORDERED: every slice goes to one port whose PMD executes a
 *    connection's descriptors in order; the fence, the notification and a
 *    DONE marker are queued right behind the data on that port, so the
 *    channel itself orders data before fence (same CUDA stream, same
 *    shm lcore).  Completion is the DONE word the port writes.
 *  - WHOLE: one port takes the whole submission as one descriptor and
 *    orders data, fence, notification and done itself (the GPU path:
 *    one kernel for all pages, then the fence on the same stream).
 *  - STRIPED: slices spread over several ports.  Each slice's completion
 *    adds its bytes to its request's settled word (acq_rel), and the
 *    lcore whose slice settles the last request runs the tail: fence,
 *    then notification, then the submission's done word.  The acq_rel
 *    chain makes every other lcore's data writes happen-before the fence.
 *
 * Completion words live in batch memory: lcores store them with release
 * semantics, kvt_poll() reads them with acquire loads.  Submit and poll
 * never lock and never make a system call.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_pause.h>

#include "kvt_private.h"

#define KVT_BATCH_MAGIC 0x6b766274u
#define KVT_BATCH_MAX (1u << 24)
#define SUB_CHUNK 64
#define KVT_MAX_TRIES 3
/* Descriptor flags beside KVT_DF_EMBEDDED: how often a slice moved. */
#define DF_TRIES_SHIFT 4

enum { SUB_STRIPED, SUB_ORDERED, SUB_WHOLE };
#define SUB_F_FENCE 0x1
#define SUB_F_NOTIFY 0x2

enum { TAIL_FENCE, TAIL_NOTIFY, TAIL_DONE };

struct kvt_req {
	struct kvt_xreq x;	/* first: what whole-submission ports read */
	uint64_t settled;	/* bytes done or failed; lcores add */
	struct kvt_sub *s;
	int32_t err;		/* first error; lcores CAS */
	uint32_t mask;		/* ports that may carry it */
	uint32_t fallback;	/* ports for when those are down */
};

/* The request's regions: x.lm and x.rm are the first members of the
 * engine's records for them (one pointer each, not two: a submission of
 * many small requests writes every byte of this array). */
static inline struct kvt_mem *
req_mem(const struct kvt_req *r)
{
	return (struct kvt_mem *)(uintptr_t)r->x.lm;
}

static inline struct kvt_rimp *
req_rimp(const struct kvt_req *r)
{
	return (struct kvt_rimp *)(uintptr_t)r->x.rm;
}

struct kvt_sub {
	struct kvt_desc tail[3];	/* fence, notify, done */
	struct kvt_desc whole;	/* SUB_WHOLE: the one descriptor */
	struct kvt_subinfo info;	/* SUB_WHOLE: what it points to */
	struct kvt_batch *b;
	struct kvt_peer *peer;
	uint32_t first;
	uint32_t n;
	uint32_t pending;	/* STRIPED: requests not settled */
	int32_t err;		/* first error of any request or tail */
	uint64_t done;		/* 1 once everything, tails too, settled */
	uint8_t mode;
	uint8_t flags;
	uint8_t finished;	/* references released */
	uint8_t tails_queued;
	uint8_t notify_pending;	/* lcore: the notification waits for room */
	uint16_t port;		/* ORDERED: the port */
	uint32_t next_req;	/* queueing cursor */
	uint64_t next_off;
	uint64_t slices_left;	/* slices not queued yet */
	uint64_t wbytes;	/* bytes written / read, for peer stats */
	uint64_t rbytes;
	uint32_t all_mask;	/* ports any request may use */
	uint8_t mixed;		/* requests use more than one region pair */
	struct kvt_mem *m1;	/* otherwise, the one pair */
	struct kvt_rimp *ri1;
	uint32_t claim_first;
	uint32_t nclaims;
	struct kvt_rimp *fence_ri;
	uint32_t fence_mask;
	const struct kvt_xpages *pages;	/* a page list (one request) */
	uint32_t notify_len;
	uint8_t payload[KVT_NOTIFY_MAX];
} __rte_cache_aligned;

struct kvt_batch {
	uint32_t magic;
	uint32_t cap;
	uint32_t used;		/* requests */
	struct kvt_req *req;
	struct kvt_range *ranges;
	struct kvt_range *ranges_tmp;	/* scratch for sorting */
	struct kvt_claim *claims;
	uint32_t nclaims;
	struct kvt_sub **chunk;
	uint32_t nchunks;
	uint32_t nsubs;
	uint32_t reap;		/* submissions [0, reap) finished */
	uint32_t pump;		/* submissions [0, pump) fully queued */
	struct kvt_desc *stash;	/* refused by a full ring, FIFO */
	struct kvt_desc *stash_tail;
	uint64_t seq;
	int claimed;		/* claims published since the last sync */
	int zombie;		/* freed by the application */
	struct kvt_arena *arena;	/* page lists' copies, until reset */
	struct kvt_arena *arena_cur;
	struct kvt_batch *next;
};

/*
 * Memory that page lists keep until the batch is reset: index copies,
 * write ranges.  Chunks never move (lcores and other submitters read
 * them) and are kept across resets.
 */
struct kvt_arena {
	struct kvt_arena *next;
	size_t cap;
	size_t used;
	uint8_t data[];
};

#define ARENA_MIN (1u << 20)

#define SUB_CHUNK_BYTES RTE_ALIGN_CEIL(SUB_CHUNK * sizeof(struct kvt_sub), 4096)

static pthread_mutex_t batch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvt_batch *batches;

static inline struct kvt_sub *
sub_at(const struct kvt_batch *b, uint32_t i)
{
	return &b->chunk[i / SUB_CHUNK][i % SUB_CHUNK];
}

static int
batch_ok(const struct kvt_batch *b)
{
	return b != NULL && b->magic == KVT_BATCH_MAGIC && !b->zombie;
}

static int
lcores_up(void)
{
	return kvt_eng != NULL &&
		__atomic_load_n(&kvt_eng->lcores_running, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------------ */
/* Completion (lcore context)                                          */
/* ------------------------------------------------------------------ */

static void
set_err(int32_t *w, int err)
{
	int32_t zero = 0;

	__atomic_compare_exchange_n(w, &zero, err, false, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
}

static uint32_t
live_conns(const struct kvt_peer *p)
{
	uint32_t m = 0;
	unsigned int i;

	for (i = 0; i < KVT_MAX_PORTS; i++)
		if (p->conn[i] != NULL &&
		    !__atomic_load_n(&p->conn[i]->dead, __ATOMIC_ACQUIRE))
			m |= 1u << i;
	return m & ~__atomic_load_n(&p->down_mask, __ATOMIC_ACQUIRE);
}

/* The ports a request's next slice may take: its preferred ones that are
 * up, else its fallback ones that are up, else (all down) the preferred
 * ones, where the slice fails and is retried or reported. */
static inline uint32_t
usable_ports(const struct kvt_req *r, const struct kvt_peer *p)
{
	uint32_t down = __atomic_load_n(&p->down_mask, __ATOMIC_ACQUIRE);

	if (likely((r->mask & down) == 0))
		return r->mask;
	if ((r->mask & ~down) != 0)
		return r->mask & ~down;
	if ((r->fallback & ~down) != 0)
		return r->fallback & ~down;
	return r->mask;
}

static void tail_done(struct kvt_desc *d, int err);

/* Send a tail descriptor out, preferably on the port `here`. */
static void
tail_issue(struct kvt_sub *s, struct kvt_desc *d, unsigned int here)
{
	uint32_t mask = (d->op == KVT_DESC_FENCE ? s->fence_mask :
			 s->peer->conn_mask) & live_conns(s->peer);
	unsigned int port;

	if (mask == 0) {
		tail_done(d, -ECONNRESET);
		return;
	}
	port = here < KVT_MAX_PORTS && (mask & (1u << here)) ? here :
		(unsigned int)__builtin_ctz(mask);
	d->port = (uint16_t)port;
	d->conn = s->peer->conn[port];
	if (port == here) {
		if (kvt_lcore_defer(d) < 0)
			tail_done(d, -ECANCELED);
		return;
	}
	if (!lcores_up() ||
	    kvt_lcore_enqueue(kvt_eng->ports[port]->lcore, &d, 1) != 1)
		tail_done(d, -ENOBUFS);
}

static void
sub_settle(struct kvt_sub *s)
{
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
}

/* STRIPED: the last request settled on port `here`. */
static void
tails_start(struct kvt_sub *s, unsigned int here)
{
	if (__atomic_load_n(&s->err, __ATOMIC_ACQUIRE) != 0)
		sub_settle(s);
	else if (s->flags & SUB_F_FENCE)
		tail_issue(s, &s->tail[TAIL_FENCE], here);
	else if (s->flags & SUB_F_NOTIFY)
		tail_issue(s, &s->tail[TAIL_NOTIFY], here);
	else
		sub_settle(s);
}

/*
 * A notification the peer had no room for is tried again until the peer
 * timeout: a receiver that is slow to poll should not lose messages.
 * @return 1 when it will be retried.
 */
static int
notify_retry(struct kvt_desc *d, int err)
{
	uint64_t now = rte_get_tsc_cycles();

	if (d->op != KVT_DESC_NOTIFY || err != -ENOBUFS || !lcores_up() ||
	    rte_lcore_id() == LCORE_ID_ANY)
		return 0;
	if (!(d->flags & KVT_DF_RETRY)) {
		d->flags |= KVT_DF_RETRY;
		d->deadline = now + rte_get_tsc_hz() / 1000 * kvt_eng->o.timeout_ms;
	}
	if (now > d->deadline) {
		((struct kvt_sub *)d->owner)->notify_pending = 0;
		return 0;
	}
	((struct kvt_sub *)d->owner)->notify_pending = 1;
	return kvt_lcore_defer(d) == 0;
}

static int retryable(int err);

/*
 * A fence or notification whose connection failed goes out again on
 * another live port of the peer.
 *  - A notification moves only to a port whose targets act on a numbered
 *    tail once (KVT_PMD_F_ONCE): if the lost copy did arrive, the second
 *    is dropped there, so the receiver sees the message exactly once.
 *  - A fence may move to any port that reaches the fence table: both
 *    copies store the same room id, so no other room can read as
 *    arrived.  The one thing a late second copy can disturb: the first
 *    copy landed, the receiver took the room and armed the slot for a new
 *    one, and the second copy lands after that.  The slot then holds the
 *    old room, which kvt_fence_poll() reports as -ESTALE (an error,
 *    never a success), until the new room's fence overwrites it.  It
 *    needs the first copy to have landed while its queue pair or socket
 *    failed, and the receiver to re-arm and the sender to reuse the slot
 *    in the time it takes to see that failure (a retry timeout);
 *    tcp's targets drop the copy anyway.
 * @return 1 when it was sent again.
 */
static int
tail_move(struct kvt_desc *d, int err)
{
	struct kvt_sub *s = d->owner;
	uint32_t mask, m;
	unsigned int tries = d->flags >> DF_TRIES_SHIFT, to;

	if (!retryable(err) || err == -ENOBUFS || d->seq == 0 ||
	    s->mode != SUB_STRIPED || tries >= KVT_MAX_TRIES || !lcores_up() ||
	    __atomic_load_n(&s->peer->state, __ATOMIC_ACQUIRE) != KVT_PEER_UP)
		return 0;
	mask = (d->op == KVT_DESC_FENCE ? s->fence_mask : s->peer->conn_mask) &
		live_conns(s->peer) & ~(1u << d->port);
	for (m = mask; m != 0 && d->op == KVT_DESC_NOTIFY; m &= m - 1) {
		to = (unsigned int)__builtin_ctz(m);
		if (!(kvt_eng->ports[to]->pmd->ops->flags & KVT_PMD_F_ONCE))
			mask &= ~(1u << to);
	}
	if (mask == 0)
		return 0;
	to = (unsigned int)__builtin_ctz(mask);
	KVT_LOG(DEBUG, "peer %s: %s %u moves from %s to %s (%s)",
		s->peer->info.name, d->op == KVT_DESC_FENCE ? "fence" : "notification",
		d->seq, kvt_eng->ports[d->port]->name, kvt_eng->ports[to]->name,
		strerror(-err));
	kvt_stat_add(&kvt_eng->ports[d->port]->st.retries, 1);
	d->port = (uint16_t)to;
	d->conn = s->peer->conn[to];
	d->next = NULL;
	d->flags = (uint8_t)((d->flags & ((1u << DF_TRIES_SHIFT) - 1)) |
			     ((tries + 1) << DF_TRIES_SHIFT));
	return kvt_lcore_enqueue(kvt_eng->ports[to]->lcore, &d, 1) == 1;
}

static void
tail_done(struct kvt_desc *d, int err)
{
	struct kvt_sub *s = d->owner;

	if (notify_retry(d, err) || tail_move(d, err))
		return;
	s->notify_pending = 0;
	if (err != 0)
		set_err(&s->err, err);
	/* ORDERED: the rest of the tail is already queued behind it. */
	if (s->mode == SUB_ORDERED)
		return;
	if (d->op == KVT_DESC_FENCE && (s->flags & SUB_F_NOTIFY) &&
	    __atomic_load_n(&s->err, __ATOMIC_ACQUIRE) == 0)
		tail_issue(s, &s->tail[TAIL_NOTIFY], d->port);
	else
		sub_settle(s);
}

static int
retryable(int err)
{
	return err == -EIO || err == -ECONNRESET || err == -ETIMEDOUT ||
		err == -ENOBUFS;
}

/* Move a failed slice to another port; @return 1 when it was requeued. */
static int
slice_retry(struct kvt_desc *d, struct kvt_req *r, struct kvt_sub *s)
{
	uint32_t alt;
	unsigned int to;
	unsigned int tries = d->flags >> DF_TRIES_SHIFT;

	if (s->mode != SUB_STRIPED || tries >= KVT_MAX_TRIES ||
	    !lcores_up() ||
	    __atomic_load_n(&s->peer->state, __ATOMIC_ACQUIRE) != KVT_PEER_UP)
		return 0;
	alt = r->mask & ~(1u << d->port) & live_conns(s->peer);
	if (alt == 0)
		alt = r->fallback & ~(1u << d->port) & live_conns(s->peer);
	if (alt == 0)
		return 0;
	/* The batch's pick counter belongs to the submitting thread; a
	 * retry on the lcore turns with the descriptor's own address. */
	to = kvt_stripe_pick(alt, d->len, ((uintptr_t)d >> 7) + tries);
	kvt_stat_add(&kvt_eng->ports[d->port]->st.retries, 1);
	d->port = (uint16_t)to;
	d->conn = s->peer->conn[to];
	d->flags = (uint8_t)((d->flags & ((1u << DF_TRIES_SHIFT) - 1)) |
			     ((tries + 1) << DF_TRIES_SHIFT));
	if (kvt_lcore_enqueue(kvt_eng->ports[to]->lcore, &d, 1) == 1)
		return 1;
	__atomic_fetch_sub(&kvt_eng->ports[to]->inflight_bytes, d->len,
			   __ATOMIC_RELAXED);
	return 0;
}

static void
slice_done(struct kvt_desc *d, int err)
{
	struct kvt_req *r = d->owner;
	struct kvt_port *port = kvt_eng->ports[d->port];
	struct kvt_sub *s = r->s;
	uint32_t len = d->len;
	unsigned int here = d->port;

	kvt_stripe_account(port, len, rte_get_tsc_cycles());
	if (err != 0) {
		if (retryable(err) && slice_retry(d, r, s))
			return;
		kvt_stat_add(&port->st.errors, 1);
		set_err(&r->err, err);
		set_err(&s->err, err);
	} else {
		kvt_stat_add(&port->st.slices, 1);
		if (d->op == KVT_DESC_WRITE)
			kvt_stat_add(&port->st.write_bytes, len);
		else
			kvt_stat_add(&port->st.read_bytes, len);
	}
	kvt_desc_free(d);
	if (s->mode == SUB_ORDERED)
		return;
	if (__atomic_add_fetch(&r->settled, len, __ATOMIC_ACQ_REL) == r->x.len &&
	    __atomic_sub_fetch(&s->pending, 1, __ATOMIC_ACQ_REL) == 0)
		tails_start(s, here);
}

static void
settle_one(struct kvt_desc *d, int err)
{
	switch (d->op) {
	case KVT_DESC_READ:
	case KVT_DESC_WRITE:
		slice_done(d, err);
		break;
	case KVT_DESC_FENCE:
	case KVT_DESC_NOTIFY:
		tail_done(d, err);
		break;
	case KVT_DESC_DONE:
		/* The last touch: the submission may be reused after it. */
		kvt_desc_store_done(d);
		break;
	default:
		break;
	}
}

/*
 * A PMD reports a completion.  On its lcore it is queued and settled when
 * the PMD's call returns, with the others of that call (kvt_desc_settle):
 * counters, rate and frees once per burst.  Elsewhere (a shutdown path)
 * it settles now.  A whole submission's error settles now: the port
 * stores its done word right after.
 */
void
kvt_desc_complete(struct kvt_desc *d, int err)
{
	struct kvt_lcore *lc;

	if (d->op == KVT_DESC_SUB) {
		if (err != 0)
			set_err(&((struct kvt_sub *)d->owner)->err, err);
		return;
	}
	lc = kvt_lcore_of_port(kvt_eng->ports[d->port]);
	if (lc != NULL && lc->ncpl < KVT_CPL_MAX &&
	    __atomic_load_n(&lc->running, __ATOMIC_ACQUIRE) &&
	    pthread_equal(lc->thread, pthread_self())) {
		lc->cpl[lc->ncpl].d = d;
		lc->cpl[lc->ncpl].err = err;
		lc->ncpl++;
		return;
	}
	settle_one(d, err);
}

/* Slices of one port settled in a burst, counted once. */
struct burst_acc {
	struct kvt_port *port;
	uint64_t bytes;
	uint64_t wbytes;
	uint64_t rbytes;
	uint64_t slices;
};

static void
acc_commit(struct burst_acc *a, uint64_t now)
{
	struct kvt_port *p = a->port;

	if (p == NULL || a->slices == 0)
		return;
	kvt_stripe_account_local(p, (uint32_t)RTE_MIN(a->bytes, (uint64_t)UINT32_MAX),
				 now);
	kvt_stat_add(&p->st.slices, a->slices);
	if (a->wbytes != 0)
		kvt_stat_add(&p->st.write_bytes, a->wbytes);
	if (a->rbytes != 0)
		kvt_stat_add(&p->st.read_bytes, a->rbytes);
	*a = (struct burst_acc){ 0 };
}

/* A slice that succeeded, in a burst: what slice_done does, with the
 * counters in a and the descriptor to free in fr. */
static void
slice_ok(struct kvt_desc *d, struct burst_acc *a, uint64_t now,
	 struct kvt_desc **fr, unsigned int *nfr)
{
	struct kvt_req *r = d->owner;
	struct kvt_sub *s = r->s;
	uint32_t len = d->len;
	unsigned int here = d->port;

	if (a->port != kvt_eng->ports[here]) {
		acc_commit(a, now);
		a->port = kvt_eng->ports[here];
	}
	a->bytes += len;
	a->slices++;
	if (d->op == KVT_DESC_WRITE)
		a->wbytes += len;
	else
		a->rbytes += len;
	if (!(d->flags & KVT_DF_EMBEDDED))
		fr[(*nfr)++] = d;
	if (s->mode == SUB_ORDERED)
		return;
	if (__atomic_add_fetch(&r->settled, len, __ATOMIC_ACQ_REL) == r->x.len &&
	    __atomic_sub_fetch(&s->pending, 1, __ATOMIC_ACQ_REL) == 0)
		tails_start(s, here);
}

void
kvt_desc_settle(const struct kvt_cpl *c, unsigned int n)
{
	struct kvt_desc *fr[KVT_CPL_MAX];
	struct burst_acc a = { 0 };
	uint64_t now = rte_get_tsc_cycles();
	unsigned int i, nfr = 0;
	struct kvt_desc *d;

	for (i = 0; i < n; i++) {
		d = c[i].d;
		if ((d->op == KVT_DESC_READ || d->op == KVT_DESC_WRITE) &&
		    c[i].err == 0) {
			slice_ok(d, &a, now, fr, &nfr);
			continue;
		}
		/* Counted before a done word the application may act on. */
		acc_commit(&a, now);
		settle_one(d, c[i].err);
	}
	acc_commit(&a, now);
	if (nfr != 0)
		rte_mempool_put_bulk(kvt_eng->pool, (void **)fr, nfr);
}

int
kvt_desc_gate(struct kvt_desc *d)
{
	struct kvt_sub *s = d->owner;

	if (d->op == KVT_DESC_DONE)
		return s->notify_pending ? KVT_GATE_WAIT : KVT_GATE_GO;
	/* A retried notification already passed the gate once. */
	if (d->flags & KVT_DF_RETRY)
		return KVT_GATE_GO;
	return __atomic_load_n(&s->err, __ATOMIC_ACQUIRE) != 0 ?
		KVT_GATE_CANCEL : KVT_GATE_GO;
}

/* ------------------------------------------------------------------ */
/* Queueing (application thread)                                       */
/* ------------------------------------------------------------------ */

static void
stash_push(struct kvt_batch *b, struct kvt_desc *d)
{
	d->next = NULL;
	if (b->stash_tail != NULL)
		b->stash_tail->next = d;
	else
		b->stash = d;
	b->stash_tail = d;
}

/* @return 1 when the stash is empty afterwards. */
static int
stash_flush(struct kvt_batch *b)
{
	struct kvt_desc *d;

	while ((d = b->stash) != NULL) {
		if (kvt_lcore_enqueue(kvt_eng->ports[d->port]->lcore, &d, 1) != 1)
			return 0;
		b->stash = d->next;
		if (b->stash == NULL)
			b->stash_tail = NULL;
	}
	return 1;
}

/* Queue n descriptors, per lcore; what a ring refuses goes to the stash. */
static int
enqueue(struct kvt_batch *b, struct kvt_desc **d, unsigned int n)
{
	struct kvt_desc *grp[KVT_BURST];
	uint8_t taken[KVT_BURST] = { 0 };
	unsigned int i, j, k, g, lc;

	/* Mostly one lcore serves the whole burst: one enqueue. */
	lc = kvt_eng->ports[d[0]->port]->lcore;
	for (i = 1; i < n && kvt_eng->ports[d[i]->port]->lcore == lc; i++)
		;
	if (i == n) {
		k = kvt_lcore_enqueue(lc, d, n);
		for (; k < n; k++)
			stash_push(b, d[k]);
		return b->stash == NULL;
	}
	for (i = 0; i < n; i++) {
		if (taken[i])
			continue;
		lc = kvt_eng->ports[d[i]->port]->lcore;
		for (g = 0, j = i; j < n; j++) {
			if (!taken[j] && kvt_eng->ports[d[j]->port]->lcore == lc) {
				grp[g++] = d[j];
				taken[j] = 1;
			}
		}
		k = kvt_lcore_enqueue(lc, grp, g);
		for (; k < g; k++)
			stash_push(b, grp[k]);
	}
	return b->stash == NULL;
}

static void
fill_slice(struct kvt_batch *b, struct kvt_sub *s, struct kvt_desc *d)
{
	struct kvt_req *r = &b->req[s->next_req];
	uint64_t left = r->x.len - s->next_off, page, in, ps;
	uint32_t len = (uint32_t)RTE_MIN(left, (uint64_t)kvt_eng->o.slice);

	if (s->pages != NULL) {
		/* A slice never crosses a page: pages are scattered. */
		ps = s->pages->page_size;
		page = s->next_off / ps;
		in = s->next_off % ps;
		len = (uint32_t)RTE_MIN((uint64_t)len, ps - in);
		d->local = r->x.local + (uint64_t)s->pages->local_idx[page] * ps + in;
		d->remote = r->x.remote + (uint64_t)s->pages->remote_idx[page] * ps +
			in;
	} else {
		d->local = r->x.local + s->next_off;
		d->remote = r->x.remote + s->next_off;
	}
	d->op = r->x.op == KVT_OP_READ ? KVT_DESC_READ : KVT_DESC_WRITE;
	d->flags = 0;
	if (s->mode == SUB_ORDERED) {
		/* One port, no choice: in-flight bytes are added per burst. */
		d->port = s->port;
	} else {
		uint32_t mask = usable_ports(r, s->peer), room;

		room = (mask & (mask - 1)) != 0 ? kvt_stripe_room(mask) : mask;
		d->port = (uint16_t)kvt_stripe_pick(room != 0 ? room : mask,
						    len, b->seq++);
	}
	d->len = len;
	d->conn = s->peer->conn[d->port];
	d->lm = r->x.lm;
	d->rm = r->x.rm;
	d->owner = r;
	s->next_off += len;
	if (s->next_off == r->x.len) {
		s->next_req++;
		s->next_off = 0;
	}
}

static void
whole_prepare(struct kvt_sub *s, const struct kvt_submit_opts *o)
{
	struct kvt_subinfo *si = &s->info;
	struct kvt_desc *d = &s->whole;

	memset(si, 0, sizeof(*si));
	si->req = (const uint8_t *)&s->b->req[s->first];
	si->n = s->n;
	si->stride = sizeof(struct kvt_req);
	si->cuda_event = o->cuda_event;
	si->pages = s->pages;
	if (s->flags & SUB_F_FENCE) {
		si->fence_rm = &s->fence_ri->rm;
		si->fence_addr = o->fence.table + (uint64_t)o->fence.slot * 8;
		si->room = o->fence.room;
	}
	if (s->flags & SUB_F_NOTIFY) {
		si->notify = s->payload;
		si->notify_len = s->notify_len;
	}
	si->done = &s->done;
	memset(d, 0, sizeof(*d));
	d->op = KVT_DESC_SUB;
	d->flags = KVT_DF_EMBEDDED;
	d->owner = s;
	d->port = s->port;
	d->conn = s->peer->conn[s->port];
	d->data = si;
	d->len = s->n;
}

/* A tail's number, unique among those sent to the peer and never 0. */
static uint32_t
tail_seq(struct kvt_peer *p)
{
	uint32_t seq;

	do {
		seq = __atomic_add_fetch(&p->tail_seq, 1, __ATOMIC_RELAXED);
	} while (seq == 0);
	return seq;
}

static struct kvt_desc *
tail_init(struct kvt_sub *s, unsigned int i, uint8_t op)
{
	struct kvt_desc *d = &s->tail[i];

	memset(d, 0, sizeof(*d));
	d->op = op;
	d->flags = KVT_DF_EMBEDDED;
	d->owner = s;
	d->port = s->port;
	d->conn = s->peer->conn[s->port];
	return d;
}

/* Write only the descriptors this submission will send: a submit is
 * short, and every cache line written counts in its latency. */
static void
tails_prepare(struct kvt_sub *s, const struct kvt_submit_opts *o)
{
	struct kvt_desc *d;

	if (s->mode == SUB_WHOLE) {
		whole_prepare(s, o);
		return;
	}
	if (s->flags & SUB_F_FENCE) {
		d = tail_init(s, TAIL_FENCE, KVT_DESC_FENCE);
		d->rm = &s->fence_ri->rm;
		d->remote = o->fence.table + (uint64_t)o->fence.slot * 8;
		d->value = o->fence.room;
		d->len = 8;
		d->seq = tail_seq(s->peer);
	}
	if (s->flags & SUB_F_NOTIFY) {
		d = tail_init(s, TAIL_NOTIFY, KVT_DESC_NOTIFY);
		d->data = s->payload;
		d->len = s->notify_len;
		d->seq = tail_seq(s->peer);
	}
	if (s->mode == SUB_ORDERED) {
		d = tail_init(s, TAIL_DONE, KVT_DESC_DONE);
		d->remote = (uintptr_t)&s->done;
		d->value = 1;
		d->len = 8;
	}
}

/* @return 1 when the submission is fully queued. */
static int
pump_sub(struct kvt_batch *b, struct kvt_sub *s)
{
	struct kvt_desc *d[KVT_BURST];
	unsigned int k, i, left;

	if (s->mode == SUB_WHOLE) {
		if (s->tails_queued)
			return 1;
		s->tails_queued = 1;
		d[0] = &s->whole;
		return enqueue(b, d, 1);
	}
	while (s->slices_left > 0) {
		/* Every port that may carry the next slice is full: the
		 * rest waits for whichever drains first (kvt_poll,
		 * kvt_wait). */
		if (s->mode == SUB_STRIPED &&
		    kvt_stripe_room(usable_ports(&b->req[s->next_req], s->peer)) == 0)
			return 0;
		k = (unsigned int)RTE_MIN(s->slices_left, (uint64_t)KVT_BURST);
		if (rte_mempool_get_bulk(kvt_eng->pool, (void **)d, k) != 0) {
			k = 1;
			if (rte_mempool_get_bulk(kvt_eng->pool, (void **)d, 1) != 0)
				return 0;
		}
		for (i = 0, left = 0; i < k; i++) {
			fill_slice(b, s, d[i]);
			left += d[i]->len;
		}
		s->slices_left -= k;
		if (s->mode == SUB_ORDERED)
			__atomic_fetch_add(&kvt_eng->ports[s->port]->inflight_bytes,
					   left, __ATOMIC_RELAXED);
		if (!enqueue(b, d, k))
			return 0;
	}
	if (s->mode == SUB_ORDERED && !s->tails_queued) {
		s->tails_queued = 1;
		k = 0;
		if (s->flags & SUB_F_FENCE)
			d[k++] = &s->tail[TAIL_FENCE];
		if (s->flags & SUB_F_NOTIFY)
			d[k++] = &s->tail[TAIL_NOTIFY];
		d[k++] = &s->tail[TAIL_DONE];
		return enqueue(b, d, k);
	}
	return 1;
}

static void
pump(struct kvt_batch *b)
{
	if (!lcores_up() || !stash_flush(b))
		return;
	while (b->pump < b->nsubs && pump_sub(b, sub_at(b, b->pump)))
		b->pump++;
}

/* ------------------------------------------------------------------ */
/* Submit                                                              */
/* ------------------------------------------------------------------ */

static int
range_cmp(const void *a, const void *b)
{
	const struct kvt_range *x = a, *y = b;

	if (x->ri != y->ri)
		return (uintptr_t)x->ri < (uintptr_t)y->ri ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Highest-ranked ports of mask. */
static uint32_t
best_ports(uint32_t mask)
{
	int best = INT32_MIN, r;
	uint32_t out = 0, m;

	for (m = mask; m != 0; m &= m - 1) {
		r = kvt_eng->ports[__builtin_ctz(m)]->pmd->ops->rank;
		if (r > best) {
			best = r;
			out = 0;
		}
		if (r == best)
			out |= 1u << __builtin_ctz(m);
	}
	return out;
}

/* The regions the previous request used: the next one usually uses the
 * same (pages of one KV pool), and then needs no search. */
struct lookup {
	struct kvt_mem *m;
	struct kvt_rimp *ri;
	uint32_t mask;
	uint32_t fallback;
};

/*
 * Split the ports that reach a request into preferred and fallback ones by
 * the local memory's topology (RDMA NICs near its NUMA node or GPU).
 */
static void
topo_masks(const struct kvt_lmem *lm, uint32_t base, uint32_t *mask,
	   uint32_t *fallback)
{
	uint32_t pref = base & lm->pref_mask, fb = base & lm->fallback_mask;

	*fallback = 0;
	if (pref != 0) {
		*mask = pref;
		*fallback = fb;
	} else {
		*mask = fb != 0 ? fb : base;
	}
}

static inline int
inside(uintptr_t a, uint64_t len, uintptr_t base, uint64_t blen)
{
	return a >= base && a - base < blen && len <= blen - (a - base);
}

/*
 * The regions of a request: local [local, +llen) inside one registered
 * region, remote [remote, +rlen) inside one the peer exports for op, and
 * the ports that reach the peer for them.  what names the request in
 * refusals.
 */
static int
resolve(struct kvt_peer *p, uint32_t op, const void *local, uint64_t llen,
	uint64_t remote, uint64_t rlen, const char *what, struct kvt_req *r)
{
	struct kvt_mem *m;
	struct kvt_rimp *ri;
	uint32_t need;

	m = kvt_mem_find(local, llen);
	if (m == NULL)
		return KVT_REFUSE(EFAULT, "submit: %s: local %p+%" PRIu64 " is not inside one registered region",
				  what, local, llen);
	ri = kvt_peer_find_region(p, remote, rlen);
	if (ri == NULL)
		return KVT_REFUSE(ERANGE, "submit: %s: remote %#" PRIx64 "+%" PRIu64 " is not inside one region peer %s exports",
				  what, remote, rlen, p->info.name);
	need = op == KVT_OP_WRITE ? KVT_MEM_REMOTE_WRITE : KVT_MEM_REMOTE_READ;
	if (!(ri->rm.flags & need) || (ri->rm.flags & KVT_MEM_F_FENCE))
		return KVT_REFUSE(EPERM, "submit: %s: peer %s region %#" PRIx64 "+%" PRIu64 " is not exported for %s",
				  what, p->info.name, ri->rm.base, ri->rm.len,
				  op == KVT_OP_WRITE ? "write" : "read");
	r->x.lm = &m->lm;
	r->x.rm = &ri->rm;
	topo_masks(&m->lm, best_ports(m->lm.port_mask & ri->rm.port_mask &
				      p->conn_mask),
		   &r->mask, &r->fallback);
	if (r->mask == 0)
		return KVT_REFUSE(EHOSTUNREACH, "submit: %s: no port reaches peer %s for this memory",
				  what, p->info.name);
	return 0;
}

static void
req_fill(struct kvt_sub *s, struct kvt_req *r, uint32_t op, void *local,
	 uint64_t remote, uint64_t len)
{
	r->x.op = op;
	if (op == KVT_OP_WRITE)
		s->wbytes += len;
	else
		s->rbytes += len;
	r->x.local = local;
	r->x.remote = remote;
	r->x.len = len;
	r->settled = 0;
	r->err = 0;
	r->s = s;
}

static int
check_xfer(struct kvt_sub *s, struct kvt_peer *p, const struct kvt_xfer *x,
	   unsigned int i, struct kvt_req *r, struct lookup *lk)
{
	int ret;

	if ((x->op != KVT_OP_READ && x->op != KVT_OP_WRITE) || x->rsvd != 0 ||
	    x->len == 0)
		return KVT_REFUSE(EINVAL, "submit: xfer %u: op %u, len %" PRIu64 ": invalid",
				  i, x->op, x->len);
	if (lk->m != NULL && lk->ri != NULL &&
	    inside((uintptr_t)x->local, x->len, (uintptr_t)lk->m->lm.addr,
		   lk->m->lm.len) &&
	    inside(x->remote, x->len, lk->ri->rm.base, lk->ri->rm.len) &&
	    (x->op == KVT_OP_WRITE ? (lk->ri->rm.flags & KVT_MEM_REMOTE_WRITE) :
	     (lk->ri->rm.flags & KVT_MEM_REMOTE_READ))) {
		r->x.lm = &lk->m->lm;
		r->x.rm = &lk->ri->rm;
		r->mask = lk->mask;
		r->fallback = lk->fallback;
	} else {
		char what[24];

		snprintf(what, sizeof(what), "xfer %u", i);
		ret = resolve(p, x->op, x->local, x->len, x->remote, x->len, what, r);
		if (ret < 0)
			return ret;
		lk->m = req_mem(r);
		lk->ri = req_rimp(r);
		lk->mask = r->mask;
		lk->fallback = r->fallback;
	}
	s->slices_left += x->len <= kvt_eng->o.slice ? 1 :
		(x->len + kvt_eng->o.slice - 1) / kvt_eng->o.slice;
	req_fill(s, r, x->op, x->local, x->remote, x->len);
	return 0;
}

static int
check_opts(struct kvt_peer *p, const struct kvt_submit_opts *o,
	   struct kvt_sub *s)
{
	const struct kvt_fence_ref *f = &o->fence;
	struct kvt_rimp *ri;

	if ((o->flags & ~(KVT_SUBMIT_FENCE | KVT_SUBMIT_ALLOW_OVERLAP)) != 0 ||
	    o->notify_len > KVT_NOTIFY_MAX ||
	    (o->notify_len > 0 && o->notify == NULL))
		return KVT_REFUSE(EINVAL, "submit: bad options (flags %#x, notify %u bytes)",
				  o->flags, o->notify_len);
	if (o->notify_len > 0) {
		s->flags |= SUB_F_NOTIFY;
		s->notify_len = o->notify_len;
		memcpy(s->payload, o->notify, o->notify_len);
	}
	if (!(o->flags & KVT_SUBMIT_FENCE))
		return 0;
	if (f->room == 0 || f->rsvd != 0)
		return KVT_REFUSE(EINVAL, "submit: fence room 0 or reserved field set");
	ri = kvt_peer_find_region(p, f->table, 8);
	if (ri == NULL || ri->rm.base != f->table || ri->rm.fence_slots == 0 ||
	    f->slot >= ri->rm.fence_slots)
		return KVT_REFUSE(ENOENT, "submit: peer %s has no fence table %#" PRIx64 " with slot %u",
				  p->info.name, f->table, f->slot);
	s->fence_mask = ri->rm.port_mask & p->conn_mask;
	if (s->fence_mask == 0)
		return KVT_REFUSE(EHOSTUNREACH, "submit: no port reaches peer %s's fence table",
				  p->info.name);
	s->fence_ri = ri;
	s->flags |= SUB_F_FENCE;
	return 0;
}

/*
 * Sort ranges by (region, start).  Scattered KV pages make this the cost
 * of a big submission, so the common case (one region) is an LSD radix
 * sort on the offset, 11 bits a pass; mixed regions use qsort.
 */
static void
sort_ranges(struct kvt_range *r, struct kvt_range *tmp, unsigned int n)
{
	uint32_t count[2048];
	uint64_t lo = UINT64_MAX, hi = 0, bits = 0;
	struct kvt_range *src = r, *dst = tmp, *t;
	unsigned int i, shift;

	for (i = 0; i < n; i++) {
		if (r[i].ri != r[0].ri) {
			qsort(r, n, sizeof(*r), range_cmp);
			return;
		}
		lo = RTE_MIN(lo, r[i].lo);
		hi = RTE_MAX(hi, r[i].lo);
	}
	for (i = 0; i < n; i++)
		bits |= r[i].lo - lo;
	/* Page-aligned starts share their low zero bits: skip them. */
	shift = bits != 0 ? (unsigned int)__builtin_ctzll(bits) : 64;
	for (; shift < 64 && ((hi - lo) >> shift) != 0; shift += 11) {
		memset(count, 0, sizeof(count));
		for (i = 0; i < n; i++)
			count[((src[i].lo - lo) >> shift) & 2047]++;
		for (i = 1; i < 2048; i++)
			count[i] += count[i - 1];
		for (i = n; i-- > 0;)
			dst[--count[((src[i].lo - lo) >> shift) & 2047]] = src[i];
		t = src;
		src = dst;
		dst = t;
	}
	if (src != r)
		memcpy(r, src, (size_t)n * sizeof(*r));
}

/*
 * Claim write ranges r[0..n) (tmp: scratch of n for sorting); they stay
 * referenced until the submission finishes.  @return 0 or -EBUSY.
 */
static int
claim_ranges(struct kvt_batch *b, struct kvt_sub *s, struct kvt_range *r,
	     struct kvt_range *tmp, unsigned int n, int sorted)
{
	unsigned int i, start;
	int ret;

	if (!sorted)
		sort_ranges(r, tmp, n);
	for (i = 1; i < n; i++)
		if (r[i].ri == r[i - 1].ri && r[i].lo < r[i - 1].hi)
			return KVT_REFUSE(EBUSY, "submit: two writes of one submission overlap at %#" PRIx64,
					  r[i].lo);
	s->claim_first = b->nclaims;
	for (start = 0, i = 1; i <= n; i++) {
		if (i < n && r[i].ri == r[start].ri)
			continue;
		/* The table pointer is the one field of an import a
		 * submitter sets (once, atomically). */
		ret = kvt_claim_take(&((struct kvt_rimp *)(uintptr_t)r[start].ri)->claims,
				     &b->claims[b->nclaims], &r[start],
				     i - start);
		if (ret < 0) {
			while (b->nclaims > s->claim_first)
				kvt_claim_drop(&b->claims[--b->nclaims]);
			if (ret == -ENOMEM)
				return KVT_REFUSE(ENOMEM, "submit: no memory for the overlap guard of region %#" PRIx64,
						  r[start].ri->rm.base);
			return KVT_REFUSE(-ret, "submit: a write to %#" PRIx64 "..%#" PRIx64 " overlaps a write in flight",
					  r[start].lo, r[i - 1].hi);
		}
		b->nclaims++;
		b->claimed = 1;
		start = i;
	}
	s->nclaims = b->nclaims - s->claim_first;
	return 0;
}

/* Claim the submission's write ranges; @return 0 or -EBUSY. */
static int
claim_writes(struct kvt_batch *b, struct kvt_sub *s)
{
	struct kvt_range *r = &b->ranges[s->first];
	unsigned int n = 0, i;
	int sorted = 1;

	for (i = 0; i < s->n; i++) {
		const struct kvt_req *q = &b->req[s->first + i];

		if (q->x.op != KVT_OP_WRITE)
			continue;
		r[n].lo = q->x.remote;
		r[n].hi = q->x.remote + q->x.len;
		r[n].ri = req_rimp(q);
		if (n > 0 && range_cmp(&r[n - 1], &r[n]) > 0)
			sorted = 0;
		n++;
	}
	return claim_ranges(b, s, r, b->ranges_tmp, n, sorted);
}

/* ---- the page-list arena ---- */

struct arena_mark {
	struct kvt_arena *chunk;
	size_t used;
};

static void *
arena_alloc(struct kvt_batch *b, size_t len)
{
	struct kvt_arena *c, **pp;
	size_t cap;
	void *p;

	len = RTE_ALIGN_CEIL(len, RTE_CACHE_LINE_SIZE);
	for (c = b->arena_cur; c != NULL; c = c->next) {
		if (c->cap - c->used >= len) {
			p = c->data + c->used;
			c->used += len;
			b->arena_cur = c;
			return p;
		}
	}
	cap = RTE_MAX(len, (size_t)ARENA_MIN);
	c = aligned_alloc(RTE_CACHE_LINE_SIZE,
			  RTE_ALIGN_CEIL(sizeof(*c) + cap, RTE_CACHE_LINE_SIZE));
	if (c == NULL)
		return NULL;
	c->next = NULL;
	c->cap = cap;
	c->used = len;
	for (pp = &b->arena; *pp != NULL; pp = &(*pp)->next)
		;
	*pp = c;
	b->arena_cur = c;
	return c->data;
}

static struct arena_mark
arena_mark(const struct kvt_batch *b)
{
	struct arena_mark m = { b->arena_cur, b->arena_cur ? b->arena_cur->used : 0 };

	return m;
}

/* Give back what was taken since mark (a refused submission). */
static void
arena_release(struct kvt_batch *b, struct arena_mark m)
{
	struct kvt_arena *c;

	for (c = m.chunk != NULL ? m.chunk->next : b->arena; c != NULL;
	     c = c->next)
		c->used = 0;
	if (m.chunk != NULL)
		m.chunk->used = m.used;
	b->arena_cur = m.chunk != NULL ? m.chunk : b->arena;
}

static void
arena_reset(struct kvt_batch *b)
{
	struct kvt_arena *c;

	for (c = b->arena; c != NULL; c = c->next)
		c->used = 0;
	b->arena_cur = b->arena;
}

static void
arena_free(struct kvt_batch *b)
{
	struct kvt_arena *c;

	while ((c = b->arena) != NULL) {
		b->arena = c->next;
		free(c);
	}
	b->arena_cur = NULL;
}

static struct kvt_sub *
sub_new(struct kvt_batch *b)
{
	struct kvt_sub **c;

	if (b->nsubs == b->nchunks * SUB_CHUNK) {
		c = realloc(b->chunk, (b->nchunks + 1) * sizeof(*c));
		if (c == NULL)
			return NULL;
		b->chunk = c;
		/* Whole pages: a GPU may store completion words here. */
		c[b->nchunks] = aligned_alloc(4096, SUB_CHUNK_BYTES);
		if (c[b->nchunks] == NULL)
			return NULL;
		kvt_host_register(c[b->nchunks], SUB_CHUNK_BYTES);
		b->nchunks++;
	}
	return sub_at(b, b->nsubs);
}

/*
 * Add delta to the in-flight counts of the regions a submission uses.
 * Requests usually come in long runs over one region pair, so one atomic
 * per run, not per request.
 */
static void
refs_add(struct kvt_batch *b, struct kvt_sub *s, int64_t delta)
{
	struct kvt_mem *m = NULL;
	struct kvt_rimp *ri = NULL;
	uint64_t mn = 0, rn = 0;
	unsigned int i;

	if (!s->mixed) {
		/* One region pair (or none): no pass over the requests. */
		if (s->m1 != NULL) {
			__atomic_fetch_add(&s->m1->inflight,
					   (uint64_t)s->n * (uint64_t)delta,
					   __ATOMIC_ACQ_REL);
			__atomic_fetch_add(&s->ri1->refs,
					   (uint64_t)s->n * (uint64_t)delta,
					   __ATOMIC_ACQ_REL);
		}
		goto tail;
	}
	for (i = s->first; i <= s->first + s->n; i++) {
		struct kvt_req *r = i < s->first + s->n ? &b->req[i] : NULL;

		if (m != NULL && (r == NULL || req_mem(r) != m)) {
			__atomic_fetch_add(&m->inflight, mn * (uint64_t)delta,
					   __ATOMIC_ACQ_REL);
			mn = 0;
		}
		if (ri != NULL && (r == NULL || req_rimp(r) != ri)) {
			__atomic_fetch_add(&ri->refs, rn * (uint64_t)delta,
					   __ATOMIC_ACQ_REL);
			rn = 0;
		}
		if (r == NULL)
			break;
		m = req_mem(r);
		ri = req_rimp(r);
		mn++;
		rn++;
	}
tail:
	if (s->fence_ri != NULL)
		__atomic_fetch_add(&s->fence_ri->refs, (uint64_t)delta,
				   __ATOMIC_ACQ_REL);
	__atomic_fetch_add(&s->peer->inflight, (uint64_t)delta,
			   __ATOMIC_ACQ_REL);
}

static void
choose_mode(struct kvt_batch *b, struct kvt_sub *s)
{
	uint32_t all = s->all_mask, flags;
	unsigned int port;

	RTE_SET_USED(b);
	s->mode = SUB_STRIPED;
	if (all == 0) {
		/* No data: the tail picks its own port, unless a port that
		 * takes whole submissions is the best way to the peer. */
		all = best_ports(s->flags & SUB_F_FENCE ? s->fence_mask :
				 s->peer->conn_mask);
		port = (unsigned int)__builtin_ctz(all);
		s->port = (uint16_t)port;
		if (kvt_eng->ports[port]->pmd->ops->flags & KVT_PMD_F_WHOLE)
			s->mode = SUB_WHOLE;
		return;
	}
	port = (unsigned int)__builtin_ctz(all);
	s->port = (uint16_t)port;
	flags = kvt_eng->ports[port]->pmd->ops->flags;
	if ((all & (all - 1)) != 0 ||
	    ((s->flags & SUB_F_FENCE) && !(s->fence_mask & all)))
		return;
	if (flags & KVT_PMD_F_WHOLE)
		s->mode = SUB_WHOLE;
	else if (flags & KVT_PMD_F_ORDERED)
		s->mode = SUB_ORDERED;
}

/* Checks every submission passes, then a fresh submission of nslots. */
static int
sub_open(struct kvt_batch *b, struct kvt_peer *p, unsigned int nslots,
	 struct kvt_sub **out)
{
	struct kvt_sub *s;

	if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != KVT_PEER_UP)
		return KVT_REFUSE(ECONNRESET, "submit: peer %s was lost", p->info.name);
	/* A message on its own still takes one slot, for kvt_status(). */
	if (RTE_MAX(nslots, 1u) > b->cap - b->used)
		return KVT_REFUSE(ENOSPC, "submit: batch full (%u of %u used, %u more asked)",
				  b->used, b->cap, RTE_MAX(nslots, 1u));
	s = sub_new(b);
	if (s == NULL)
		return -ENOMEM;
	/* The descriptors are written by tails_prepare(), as needed. */
	memset(&s->b, 0, offsetof(struct kvt_sub, payload) -
	       offsetof(struct kvt_sub, b));
	s->b = b;
	s->peer = p;
	s->first = b->used;
	s->n = nslots;
	s->pending = nslots;
	s->next_req = b->used;
	*out = s;
	return 0;
}

/*
 * Validation is over (ret), inside the RCU section tok: pick the mode,
 * take references, and queue.  @return the first slot, or ret.
 */
static int
sub_commit(struct kvt_batch *b, struct kvt_sub *s,
	   const struct kvt_submit_opts *o, int ret, unsigned int tok)
{
	unsigned int n = s->n;

	if (ret == 0) {
		choose_mode(b, s);
		if (o->cuda_event != NULL && s->mode != SUB_WHOLE) {
			while (b->nclaims > s->claim_first)
				kvt_claim_drop(&b->claims[--b->nclaims]);
			ret = KVT_REFUSE(ENOTSUP, "submit: a CUDA event needs a transport that takes whole submissions (nvlink)");
		}
	}
	if (ret == 0)
		refs_add(b, s, 1);
	kvt_rcu_read_unlock(tok);
	if (ret < 0)
		return ret;

	tails_prepare(s, o);
	if (n == 0) {
		memset(&b->req[b->used], 0, sizeof(b->req[0]));
		b->req[b->used].s = s;
		s->n = 1;
		s->pending = 0;
	}
	b->used += s->n;
	b->nsubs++;
	if (n == 0 && s->mode == SUB_STRIPED) {
		/* Only a fence and/or a notification: they go out now. */
		if (!lcores_up())
			set_err(&s->err, -ECANCELED);
		tails_start(s, KVT_MAX_PORTS);
	}
	pump(b);
	return (int)s->first;
}

int
kvt_submit(struct kvt_batch *b, struct kvt_peer *p, const struct kvt_xfer *xf,
	   unsigned int n, const struct kvt_submit_opts *opts)
{
	static const struct kvt_submit_opts none;
	const struct kvt_submit_opts *o = opts != NULL ? opts : &none;
	struct lookup lk = { NULL, NULL, 0, 0 };
	struct kvt_sub *s;
	unsigned int i, tok;
	int ret;

	if (kvt_eng == NULL)
		return -ENODEV;
	if (!batch_ok(b) || !kvt_peer_valid(p) || (xf == NULL && n > 0))
		return KVT_REFUSE(EINVAL, "submit: bad batch or peer");
	if (n == 0 && (o->notify_len == 0 && !(o->flags & KVT_SUBMIT_FENCE)))
		return KVT_REFUSE(EINVAL, "submit: no request, fence or notification");
	ret = sub_open(b, p, n, &s);
	if (ret < 0)
		return ret;
	tok = kvt_rcu_read_lock();
	ret = check_opts(p, o, s);
	for (i = 0; i < n && ret == 0; i++) {
		struct kvt_req *r = &b->req[b->used + i];

		ret = check_xfer(s, p, &xf[i], i, r, &lk);
		s->all_mask |= r->mask;
		if (i == 0) {
			s->m1 = req_mem(r);
			s->ri1 = req_rimp(r);
		} else if (req_mem(r) != s->m1 || req_rimp(r) != s->ri1) {
			s->mixed = 1;
		}
	}
	if (ret == 0 && !(o->flags & KVT_SUBMIT_ALLOW_OVERLAP))
		ret = claim_writes(b, s);
	return sub_commit(b, s, o, ret, tok);
}

/*
 * The span of page numbers each side uses, as byte offsets from page 0:
 * [*llo, *lhi) and [*rlo, *rhi).  @return 0, or -EINVAL on overflow.
 */
static int
pages_span(const struct kvt_pages *pg, uint64_t *llo, uint64_t *lhi,
	   uint64_t *rlo, uint64_t *rhi)
{
	uint32_t lmin = UINT32_MAX, lmax = 0, rmin = UINT32_MAX, rmax = 0, k;
	uint64_t end;

	for (k = 0; k < pg->n; k++) {
		lmin = RTE_MIN(lmin, pg->local_idx[k]);
		lmax = RTE_MAX(lmax, pg->local_idx[k]);
		rmin = RTE_MIN(rmin, pg->remote_idx[k]);
		rmax = RTE_MAX(rmax, pg->remote_idx[k]);
	}
	if (__builtin_mul_overflow((uint64_t)lmax + 1, pg->page_size, lhi) ||
	    __builtin_mul_overflow((uint64_t)rmax + 1, pg->page_size, rhi) ||
	    __builtin_mul_overflow((uint64_t)pg->n, pg->page_size, &end) ||
	    __builtin_add_overflow((uint64_t)(uintptr_t)pg->local, *lhi, &end) ||
	    __builtin_add_overflow(pg->remote, *rhi, &end))
		return -EINVAL;
	*llo = (uint64_t)lmin * pg->page_size;
	*rlo = (uint64_t)rmin * pg->page_size;
	return 0;
}

/* Write ranges of a page list, one per page, kept in the arena. */
static int
claim_pages(struct kvt_batch *b, struct kvt_sub *s, const struct kvt_req *q)
{
	const struct kvt_xpages *xp = s->pages;
	struct kvt_range *r, *tmp;
	uint32_t k;
	int sorted = 1;

	r = arena_alloc(b, (size_t)xp->n * sizeof(*r));
	tmp = arena_alloc(b, (size_t)xp->n * sizeof(*tmp));
	if (r == NULL || tmp == NULL)
		return -ENOMEM;
	for (k = 0; k < xp->n; k++) {
		r[k].lo = q->x.remote + (uint64_t)xp->remote_idx[k] * xp->page_size;
		r[k].hi = r[k].lo + xp->page_size;
		r[k].ri = req_rimp(q);
		if (k > 0 && r[k - 1].lo > r[k].lo)
			sorted = 0;
	}
	return claim_ranges(b, s, r, tmp, xp->n, sorted);
}

/* The submission's own copy of the page list. */
static struct kvt_xpages *
pages_copy(struct kvt_batch *b, const struct kvt_pages *pg)
{
	size_t idx = (size_t)pg->n * sizeof(uint32_t);
	struct kvt_xpages *xp;
	uint32_t *li, *ri;

	xp = arena_alloc(b, sizeof(*xp));
	li = arena_alloc(b, idx);
	ri = arena_alloc(b, idx);
	if (xp == NULL || li == NULL || ri == NULL)
		return NULL;
	memcpy(li, pg->local_idx, idx);
	memcpy(ri, pg->remote_idx, idx);
	xp->local_idx = li;
	xp->remote_idx = ri;
	xp->n = pg->n;
	xp->page_size = pg->page_size;
	return xp;
}

int
kvt_submit_pages(struct kvt_batch *b, struct kvt_peer *p,
		 const struct kvt_pages *pg, const struct kvt_submit_opts *opts)
{
	static const struct kvt_submit_opts none;
	const struct kvt_submit_opts *o = opts != NULL ? opts : &none;
	uint64_t llo, lhi, rlo, rhi, per_page, slice;
	struct arena_mark mark;
	struct kvt_sub *s;
	struct kvt_req *r;
	unsigned int tok;
	int ret;

	if (kvt_eng == NULL)
		return -ENODEV;
	if (!batch_ok(b) || !kvt_peer_valid(p) || pg == NULL)
		return KVT_REFUSE(EINVAL, "submit: bad batch, peer or page list");
	if ((pg->op != KVT_OP_READ && pg->op != KVT_OP_WRITE) || pg->n == 0 ||
	    pg->page_size == 0 || pg->local_idx == NULL || pg->remote_idx == NULL)
		return KVT_REFUSE(EINVAL, "submit: page list: op %u, %u pages of %" PRIu64 " bytes: invalid",
				  pg->op, pg->n, pg->page_size);
	if (pages_span(pg, &llo, &lhi, &rlo, &rhi) < 0)
		return KVT_REFUSE(EINVAL, "submit: page list: a page address overflows");
	ret = sub_open(b, p, 1, &s);
	if (ret < 0)
		return ret;
	mark = arena_mark(b);
	s->pages = pages_copy(b, pg);
	if (s->pages == NULL) {
		arena_release(b, mark);
		return -ENOMEM;
	}
	r = &b->req[b->used];
	tok = kvt_rcu_read_lock();
	ret = check_opts(p, o, s);
	if (ret == 0)
		ret = resolve(p, pg->op, (uint8_t *)pg->local + llo, lhi - llo,
			      pg->remote + rlo, rhi - rlo, "page list", r);
	if (ret == 0) {
		req_fill(s, r, pg->op, pg->local, pg->remote,
			 (uint64_t)pg->n * pg->page_size);
		slice = kvt_eng->o.slice;
		per_page = (pg->page_size + slice - 1) / slice;
		s->slices_left = (uint64_t)pg->n * per_page;
		s->all_mask = r->mask;
		s->m1 = req_mem(r);
		s->ri1 = req_rimp(r);
		if (pg->op == KVT_OP_WRITE && !(o->flags & KVT_SUBMIT_ALLOW_OVERLAP))
			ret = claim_pages(b, s, r);
	}
	ret = sub_commit(b, s, o, ret, tok);
	if (ret < 0)
		arena_release(b, mark);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Poll, wait, status                                                  */
/* ------------------------------------------------------------------ */

static void
finish(struct kvt_batch *b, struct kvt_sub *s)
{
	unsigned int i;

	if (s->finished)
		return;
	for (i = s->claim_first; i < s->claim_first + s->nclaims; i++)
		kvt_claim_drop(&b->claims[i]);
	refs_add(b, s, -1);
	/* Peer counters move per submission: no shared atomics per slice. */
	if (__atomic_load_n(&s->err, __ATOMIC_ACQUIRE) == 0) {
		__atomic_fetch_add(&s->peer->st.write_bytes, s->wbytes,
				   __ATOMIC_RELAXED);
		__atomic_fetch_add(&s->peer->st.read_bytes, s->rbytes,
				   __ATOMIC_RELAXED);
	} else {
		__atomic_fetch_add(&s->peer->st.errors, 1, __ATOMIC_RELAXED);
	}
	s->finished = 1;
}

static int
sub_done(const struct kvt_sub *s)
{
	return __atomic_load_n(&s->done, __ATOMIC_ACQUIRE) != 0;
}

/* Finish the settled prefix; @return 1 when every submission is. */
static int
reap(struct kvt_batch *b)
{
	struct kvt_sub *s;

	while (b->reap < b->nsubs) {
		s = sub_at(b, b->reap);
		if (!sub_done(s))
			return 0;
		finish(b, s);
		b->reap++;
	}
	return 1;
}

int
kvt_poll(struct kvt_batch *b)
{
	struct kvt_sub *s;
	unsigned int i, pending = 0;

	if (!batch_ok(b))
		return -EINVAL;
	pump(b);
	if (reap(b))
		return 0;
	for (i = b->reap; i < b->nsubs; i++) {
		s = sub_at(b, i);
		if (sub_done(s))
			finish(b, s);
		else if (s->mode == SUB_STRIPED && s->flags == 0)
			pending += __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
		else
			pending += s->n;
	}
	return (int)pending;
}

int
kvt_wait(struct kvt_batch *b, uint64_t timeout_us)
{
	struct timespec nap = { 0, 20000 };
	uint64_t hz_us = rte_get_tsc_hz() / 1000000;
	uint64_t start = rte_get_tsc_cycles(), el;

	if (!batch_ok(b))
		return -EINVAL;
	for (;;) {
		pump(b);
		if (reap(b))
			return 0;
		el = (rte_get_tsc_cycles() - start) / hz_us;
		if (el >= timeout_us)
			return -ETIMEDOUT;
		/* Spin a while for latency; then yield, so lcores that share
		 * the cpu run, and after a long wait, sleep. */
		if (el < 200)
			rte_pause();
		else if (el < 20000)
			sched_yield();
		else
			nanosleep(&nap, NULL);
	}
}

int
kvt_status(struct kvt_batch *b, unsigned int idx)
{
	const struct kvt_req *r;
	const struct kvt_sub *s;
	int err;

	if (!batch_ok(b) || idx >= b->used)
		return -EINVAL;
	r = &b->req[idx];
	s = r->s;
	if (s->mode == SUB_STRIPED && s->flags == 0) {
		/* Requests settle one by one; a cancelled one never fills
		 * its settled word, but its submission is done. */
		if (__atomic_load_n(&r->settled, __ATOMIC_ACQUIRE) < r->x.len &&
		    !sub_done(s))
			return -EINPROGRESS;
		return __atomic_load_n(&r->err, __ATOMIC_ACQUIRE);
	}
	if (!sub_done(s))
		return -EINPROGRESS;
	err = __atomic_load_n(&r->err, __ATOMIC_ACQUIRE);
	if (err == 0 && s->flags != 0)
		err = __atomic_load_n(&s->err, __ATOMIC_ACQUIRE);
	return err;
}

/* ------------------------------------------------------------------ */
/* Batch life cycle                                                    */
/* ------------------------------------------------------------------ */

struct kvt_batch *
kvt_batch_alloc(unsigned int max_xfers)
{
	struct kvt_batch *b;

	if (kvt_eng == NULL) {
		rte_errno = ENODEV;
		return NULL;
	}
	if (max_xfers == 0 || max_xfers > KVT_BATCH_MAX) {
		rte_errno = EINVAL;
		return NULL;
	}
	b = calloc(1, sizeof(*b));
	if (b == NULL)
		goto nomem;
	b->req = calloc(max_xfers, sizeof(*b->req));
	b->ranges = calloc(max_xfers, sizeof(*b->ranges));
	b->ranges_tmp = calloc(max_xfers, sizeof(*b->ranges_tmp));
	b->claims = calloc(max_xfers, sizeof(*b->claims));
	if (b->req == NULL || b->ranges == NULL || b->ranges_tmp == NULL ||
	    b->claims == NULL)
		goto free_arrays;
	b->magic = KVT_BATCH_MAGIC;
	b->cap = max_xfers;
	pthread_mutex_lock(&batch_lock);
	b->next = batches;
	batches = b;
	pthread_mutex_unlock(&batch_lock);
	return b;

free_arrays:
	free(b->req);
	free(b->ranges);
	free(b->ranges_tmp);
	free(b->claims);
	free(b);
nomem:
	rte_errno = ENOMEM;
	return NULL;
}

static void
batch_destroy(struct kvt_batch *b)
{
	uint32_t i;

	/* Concurrent overlap checks may still read our ranges. */
	if (b->claimed)
		kvt_rcu_synchronize();
	for (i = 0; i < b->nchunks; i++) {
		kvt_host_unregister(b->chunk[i]);
		free(b->chunk[i]);
	}
	free(b->chunk);
	arena_free(b);
	free(b->req);
	free(b->ranges);
	free(b->ranges_tmp);
	free(b->claims);
	b->magic = 0;
	free(b);
}

static void
unlink_batch(struct kvt_batch *b)
{
	struct kvt_batch **pp;

	for (pp = &batches; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == b) {
			*pp = b->next;
			return;
		}
	}
}

int
kvt_batch_free(struct kvt_batch *b)
{
	if (!batch_ok(b))
		return -EINVAL;
	pump(b);
	pthread_mutex_lock(&batch_lock);
	if (!reap(b)) {
		/* Lcores still write its completion words: keep it. */
		b->zombie = 1;
		pthread_mutex_unlock(&batch_lock);
		return 0;
	}
	unlink_batch(b);
	pthread_mutex_unlock(&batch_lock);
	batch_destroy(b);
	return 0;
}

void
kvt_batches_reap_zombies(void)
{
	struct kvt_batch *b, *next, *dead = NULL;

	if (pthread_mutex_trylock(&batch_lock) != 0)
		return;
	for (b = batches; b != NULL; b = next) {
		next = b->next;
		if (!b->zombie)
			continue;
		pump(b);
		if (reap(b)) {
			unlink_batch(b);
			b->next = dead;
			dead = b;
		}
	}
	pthread_mutex_unlock(&batch_lock);
	for (b = dead; b != NULL; b = next) {
		next = b->next;
		batch_destroy(b);
	}
}

/*
 * A striped submission without tails reports each request as it settles;
 * the lcore stores the submission's done word right after the last one.
 * Once every request of the batch was seen settled, wait out that store
 * (nanoseconds, unless the lcore was descheduled then) so that a reset
 * right after kvt_status() succeeds.
 * @return 1 when every submission is finished.
 */
static int
reap_settled(struct kvt_batch *b)
{
	uint64_t hz = rte_get_tsc_hz(), t0 = rte_get_tsc_cycles();
	uint64_t deadline = t0 + hz / 1000 * kvt_eng->o.timeout_ms;
	const struct kvt_sub *s;
	uint32_t i;

	if (reap(b))
		return 1;
	for (i = b->reap; i < b->nsubs; i++) {
		s = sub_at(b, i);
		if (!sub_done(s) && (s->mode != SUB_STRIPED || s->flags != 0 ||
				     __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) != 0))
			return 0;
	}
	/* An lcore descheduled at that moment delays the store: yield to
	 * it after a short spin. */
	while (!reap(b)) {
		if (rte_get_tsc_cycles() > deadline)
			return 0;
		if (rte_get_tsc_cycles() - t0 > hz / 10000)
			sched_yield();
		else
			rte_pause();
	}
	return 1;
}

int
kvt_batch_reset(struct kvt_batch *b)
{
	if (!batch_ok(b))
		return -EINVAL;
	pump(b);
	if (!reap_settled(b))
		return -EBUSY;
	if (b->claimed) {
		kvt_rcu_synchronize();
		b->claimed = 0;
	}
	b->used = 0;
	b->nsubs = 0;
	b->reap = 0;
	b->pump = 0;
	b->nclaims = 0;
	arena_reset(b);
	return 0;
}

/* Settle what was never queued, as cancelled. */
static void
cancel_unqueued(struct kvt_batch *b)
{
	struct kvt_desc *d;
	struct kvt_sub *s;
	uint32_t i;

	while ((d = b->stash) != NULL) {
		b->stash = d->next;
		kvt_desc_complete(d, -ECANCELED);
	}
	b->stash_tail = NULL;
	for (i = b->pump; i < b->nsubs; i++) {
		s = sub_at(b, i);
		for (; s->next_req < s->first + s->n; s->next_req++)
			set_err(&b->req[s->next_req].err, -ECANCELED);
		s->slices_left = 0;
		set_err(&s->err, -ECANCELED);
	}
	b->pump = b->nsubs;
	/* Lcores and ports are stopped: nobody else writes done words. */
	for (i = b->reap; i < b->nsubs; i++) {
		s = sub_at(b, i);
		if (!sub_done(s)) {
			set_err(&s->err, -ECANCELED);
			sub_settle(s);
		}
		finish(b, s);
	}
}

void
kvt_batches_cancel_all(void)
{
	struct kvt_batch *b, *next, *dead = NULL;

	pthread_mutex_lock(&batch_lock);
	for (b = batches; b != NULL; b = next) {
		next = b->next;
		cancel_unqueued(b);
		b->reap = b->nsubs;
		if (b->zombie) {
			unlink_batch(b);
			b->next = dead;
			dead = b;
		}
	}
	pthread_mutex_unlock(&batch_lock);
	for (b = dead; b != NULL; b = next) {
		next = b->next;
		batch_destroy(b);
	}
}
