/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Completion, on the lcores: what a PMD hands back (kvt_desc_complete(),
 * a list in its port) is settled here once its call returns
 * (kvt_port_settle()), in bursts: a slice's bytes count towards its
 * request, a failed slice or tail moves to another port, and the lcore
 * whose slice settles a striped submission's last request sends its tail
 * (fence, notification) and stores its done word.
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

#include "batch.h"

/* Completions settled together: counters and frees once per burst. */
#define KVT_SETTLE_BURST 64

static void settle_tail(struct kvt_desc *d, int err);

/* Send a tail descriptor out, preferably on the port `here`. */
static void
tail_issue(struct kvt_sub *s, struct kvt_desc *d, unsigned int here)
{
	uint32_t mask = (d->op == KVT_DESC_FENCE ? s->fence_mask :
			 s->peer->conn_mask) & live_conns(s->peer);
	unsigned int port;

	if (mask == 0) {
		settle_tail(d, -ECONNRESET);
		return;
	}
	port = here < KVT_MAX_PORTS && (mask & (1u << here)) ? here :
		(unsigned int)__builtin_ctz(mask);
	d->port = (uint16_t)port;
	d->conn = s->peer->conn[port];
	d->prio = s->prio;	/* a deferred tail is never taken from a ring */
	if (port == here) {
		if (kvt_lcore_defer(d) < 0)
			settle_tail(d, -ECANCELED);
		return;
	}
	if (!lcores_up() ||
	    kvt_lcore_enqueue(kvt_eng->ports[port]->lcore, d->prio, &d, 1) != 1)
		settle_tail(d, -ENOBUFS);
}

/* STRIPED: the last request settled on port `here`. */
void
kvt_sub_tails_start(struct kvt_sub *s, unsigned int here)
{
	if (__atomic_load_n(&s->err, __ATOMIC_ACQUIRE) != 0)
		sub_publish(s);
	else if (s->flags & SUB_F_FENCE)
		tail_issue(s, &s->tail[TAIL_FENCE], here);
	else if (s->flags & SUB_F_NOTIFY)
		tail_issue(s, &s->tail[TAIL_NOTIFY], here);
	else
		sub_publish(s);
}

/* Every byte of one of s's requests settled (done or failed) on port
 * `here`.  Counted for kvt_poll() before the submission's done word, and
 * a kvt_wait_one() asleep on the batch woken (the count and the look at
 * the sleeper word are sequentially consistent, as the waiter's). */
static void
req_settled(struct kvt_sub *s, unsigned int here)
{
	struct kvt_batch *b = s->b;

	if (s->flags == 0) {
		__atomic_fetch_add(&b->settled_reqs, 1, __ATOMIC_SEQ_CST);
		if (unlikely(__atomic_load_n(&b->sleeper, __ATOMIC_SEQ_CST) != 0))
			kvt_batch_wake(b);
	}
	if (__atomic_sub_fetch(&s->pending, 1, __ATOMIC_ACQ_REL) == 0)
		kvt_sub_tails_start(s, here);
}

/*
 * A notification the peer had no room for is tried again for four peer
 * timeouts (the bound a tcp link gives a peer whose kernel takes our
 * bytes but whose application answers none): a receiver that is slow to
 * poll, on a busy host, should not lose messages.
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
		d->deadline = now + rte_get_tsc_hz() / 1000 * 4 * kvt_eng->o.timeout_ms;
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
	return kvt_lcore_enqueue(kvt_eng->ports[to]->lcore, d->prio, &d, 1) == 1;
}

static void
settle_tail(struct kvt_desc *d, int err)
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
		sub_publish(s);
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
	if (kvt_lcore_enqueue(kvt_eng->ports[to]->lcore, d->prio, &d, 1) == 1)
		return 1;
	__atomic_fetch_sub(&kvt_eng->ports[to]->inflight_bytes, d->len,
			   __ATOMIC_RELAXED);
	return 0;
}

static void
settle_slice(struct kvt_desc *d, int err)
{
	struct kvt_req *r = d->owner;
	struct kvt_port *port = kvt_eng->ports[d->port];
	struct kvt_sub *s = r->s;
	uint32_t len = d->len;
	unsigned int here = d->port;

	kvt_stripe_account(port, len, s->mode == SUB_ORDERED ? 0 : len,
			   rte_get_tsc_cycles());
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
	if (__atomic_add_fetch(&r->settled, len, __ATOMIC_ACQ_REL) == r->x.len)
		req_settled(s, here);
}

static void
settle_one(struct kvt_desc *d, int err)
{
	switch (d->op) {
	case KVT_DESC_READ:
	case KVT_DESC_WRITE:
		settle_slice(d, err);
		break;
	case KVT_DESC_FENCE:
	case KVT_DESC_NOTIFY:
		settle_tail(d, err);
		break;
	case KVT_DESC_DONE:
		sub_publish(d->owner);
		break;
	default:
		break;
	}
}

/* The engine ends a descriptor itself, now (one it never handed to a
 * PMD, or one it cancels). */
void
kvt_desc_finish(struct kvt_desc *d, int err)
{
	if (d->op == KVT_DESC_SUB || d->op == KVT_DESC_CUT) {
		if (err != 0)
			set_err(&((struct kvt_sub *)d->owner)->err, err);
		return;
	}
	settle_one(d, err);
}

/* Slices of one port settled in a burst, counted once. */
struct burst_acc {
	struct kvt_port *port;
	uint64_t bytes;
	uint64_t held;		/* striped: counted in the port's in flight */
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
				 (uint32_t)RTE_MIN(a->held, (uint64_t)UINT32_MAX),
				 now);
	kvt_stat_add(&p->st.slices, a->slices);
	if (a->wbytes != 0)
		kvt_stat_add(&p->st.write_bytes, a->wbytes);
	if (a->rbytes != 0)
		kvt_stat_add(&p->st.read_bytes, a->rbytes);
	*a = (struct burst_acc){ 0 };
}

/* A slice that succeeded, in a burst: what settle_slice does, with the
 * counters in a and the descriptor to free in fr. */
static void
slice_ok(struct kvt_desc *d, struct burst_acc *a, uint64_t now,
	 struct kvt_desc **fr, unsigned int *nfr)
{
	struct kvt_req *r;
	struct kvt_sub *s;
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
	/* ORDERED: its DONE marker settles the submission; the request's
	 * cache line stays with the submitter. */
	if (d->flags & KVT_DF_ORDERED)
		return;
	r = d->owner;
	s = r->s;
	a->held += len;
	if (__atomic_add_fetch(&r->settled, len, __ATOMIC_ACQ_REL) == r->x.len)
		req_settled(s, here);
}

static void
settle_burst(struct kvt_desc *const *c, unsigned int n)
{
	struct kvt_desc *fr[KVT_SETTLE_BURST];
	struct burst_acc a = { 0 };
	uint64_t now = rte_get_tsc_cycles();
	unsigned int i, nfr = 0;
	struct kvt_desc *d;

	for (i = 0; i < n; i++) {
		d = c[i];
		if ((d->op == KVT_DESC_READ || d->op == KVT_DESC_WRITE) &&
		    d->status == 0) {
			slice_ok(d, &a, now, fr, &nfr);
			continue;
		}
		/* Counted before a done word the application may act on. */
		acc_commit(&a, now);
		settle_one(d, d->status);
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

/*
 * What the port's PMD handed back during its last call (kvt_desc_complete),
 * in order, in bursts: counters, rate and frees once per burst.  Settling
 * hands nothing to a PMD (tails are deferred or go to another lcore's
 * ring), so the list does not grow meanwhile.
 */
void
kvt_port_settle(struct kvt_port *p)
{
	struct kvt_desc *c[KVT_SETTLE_BURST];
	struct kvt_desc *d = p->done_head, *next;
	unsigned int n = 0;

	if (d == NULL)
		return;
	p->done_head = NULL;
	p->done_tail = &p->done_head;
	for (; d != NULL; d = next) {
		next = d->next;
		c[n] = d;
		if (++n == RTE_DIM(c)) {
			settle_burst(c, n);
			n = 0;
		}
	}
	if (n != 0)
		settle_burst(c, n);
}
