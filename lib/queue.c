/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Queueing: a submission's slices cut from its requests, each given a
 * port (one for an ordered submission, the least loaded for striped
 * ones), and handed to the ports' lcores in bursts; what a full ring
 * refuses waits in the batch's stash for the next pump.
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

static void
stash_push(struct kvt_batch *b, enum kvt_prio prio, struct kvt_desc *d)
{
	d->prio = (uint8_t)prio;
	kvt_desc_append(&b->stash, &b->stash_tail, d);
}

/* @return 1 when the stash is empty afterwards. */
static int
stash_flush(struct kvt_batch *b)
{
	struct kvt_desc *d;

	while ((d = b->stash) != NULL) {
		if (kvt_lcore_enqueue(kvt_eng->ports[d->port]->lcore, d->prio, &d, 1) != 1)
			return 0;
		b->stash = d->next;
		if (b->stash == NULL)
			b->stash_tail = NULL;
	}
	return 1;
}

/* Queue n descriptors of class prio, per lcore; what a ring refuses goes
 * to the stash. */
static int
enqueue(struct kvt_batch *b, enum kvt_prio prio, struct kvt_desc **d,
	unsigned int n)
{
	struct kvt_desc *grp[KVT_BURST];
	uint8_t taken[KVT_BURST] = { 0 };
	unsigned int i, j, k, g, lc;

	/* Mostly one lcore serves the whole burst: one enqueue. */
	lc = kvt_eng->ports[d[0]->port]->lcore;
	for (i = 1; i < n && kvt_eng->ports[d[i]->port]->lcore == lc; i++)
		;
	if (i == n) {
		k = kvt_lcore_enqueue(lc, prio, d, n);
		for (; k < n; k++)
			stash_push(b, prio, d[k]);
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
		k = kvt_lcore_enqueue(lc, prio, grp, g);
		for (; k < g; k++)
			stash_push(b, prio, grp[k]);
	}
	return b->stash == NULL;
}

/* Where the slice at cur (at most *len bytes) starts, and its length:
 * a slice never crosses a page or a block (they are scattered). */
static void
slice_at(const struct kvt_sub *s, const struct kvt_req *r,
	 const struct kvt_cursor *cur, uint32_t *len, struct kvt_desc *d)
{
	const struct kvt_xblocks *xb = s->blocks;
	uint64_t page, in, ps;

	if (xb != NULL) {
		*len = (uint32_t)RTE_MIN((uint64_t)*len,
					 xb->len[cur->blk] - cur->off);
		d->local = (uint8_t *)(uintptr_t)xb->local[cur->blk] + cur->off;
		d->remote = xb->remote[cur->blk] + cur->off;
	} else if (s->pages != NULL) {
		ps = s->pages->page_size;
		page = cur->off / ps;
		in = cur->off % ps;
		*len = (uint32_t)RTE_MIN((uint64_t)*len, ps - in);
		d->local = r->x.local + (uint64_t)s->pages->local_idx[page] * ps + in;
		d->remote = r->x.remote + (uint64_t)s->pages->remote_idx[page] * ps +
			in;
	} else {
		d->local = r->x.local + cur->off;
		d->remote = r->x.remote + cur->off;
	}
}

/* Move cur past a slice of len bytes of request r. */
static void
cursor_step(const struct kvt_sub *s, const struct kvt_req *r,
	    struct kvt_cursor *cur, uint32_t len)
{
	const struct kvt_xblocks *xb = s->blocks;

	cur->left--;
	cur->off += len;
	if (xb != NULL) {
		if (cur->off < xb->len[cur->blk])
			return;
		cur->off = 0;
		cur->blk++;
		if (cur->blk == xb->first[cur->req - s->first + 1])
			cur->req++;
	} else if (cur->off == r->x.len) {
		cur->req++;
		cur->off = 0;
	}
}

/* The next slice of s, from cur, at most max bytes, into d. */
static void
fill_slice(struct kvt_batch *b, struct kvt_sub *s, struct kvt_cursor *cur,
	   uint32_t max, struct kvt_desc *d)
{
	struct kvt_req *r = &b->req[cur->req];
	uint32_t len = (uint32_t)RTE_MIN(r->x.len - cur->off, (uint64_t)max);

	slice_at(s, r, cur, &len, d);
	/* Only the descriptor's first cache line is written here: the
	 * class is the lcore's to write (ring_take(), kvt_sub_cut()). */
	d->op = r->x.op == KVT_OP_READ ? KVT_DESC_READ : KVT_DESC_WRITE;
	if (s->mode == SUB_ORDERED) {
		/* One port, no choice, and no count of striped bytes in
		 * flight (the lcore would write it back for each one); the
		 * lcore settles it without reading its request. */
		d->flags = KVT_DF_ORDERED;
		d->port = s->port;
	} else {
		uint32_t mask = usable_ports(r, s->peer), space;

		d->flags = 0;
		space = (mask & (mask - 1)) != 0 ? kvt_stripe_space(mask) : mask;
		d->port = (uint16_t)kvt_stripe_pick(space != 0 ? space : mask,
						    len, b->seq++);
	}
	d->len = len;
	d->conn = s->peer->conn[d->port];
	d->lm = r->x.lm;
	d->rm = r->x.rm;
	d->owner = r;
	cursor_step(s, r, cur, len);
}

/* One of the submission's own descriptors (its tails, or its whole
 * descriptor), on the submission's port. */
static void
sub_desc_init(struct kvt_sub *s, struct kvt_desc *d, uint8_t op)
{
	/* The first cache line only: the second is written where the
	 * descriptor is taken (its class, in ring_take()), completed (status) or
	 * linked (next), on the lcore, and a striped tail's number below. */
	RTE_BUILD_BUG_ON(offsetof(struct kvt_desc, prio) != RTE_CACHE_LINE_SIZE);
	memset(d, 0, offsetof(struct kvt_desc, prio));
	d->op = op;
	d->flags = KVT_DF_EMBEDDED;
	d->owner = s;
	d->port = s->port;
	d->conn = s->peer->conn[s->port];
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
	si->blocks = s->blocks;
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
	si->err = &s->err;
	sub_desc_init(s, d, KVT_DESC_SUB);
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

	sub_desc_init(s, d, op);
	return d;
}

/* Write only the descriptors this submission will send: a submit is
 * short, and every cache line written counts in its latency. */
void
kvt_sub_prepare(struct kvt_sub *s, const struct kvt_submit_opts *o)
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
		/* Numbered for a move to another port (striped only) and for
		 * ports that act on a number once (tcp, rdma: striped). */
		if (s->mode == SUB_STRIPED)
			d->seq = tail_seq(s->peer);
	}
	if (s->flags & SUB_F_NOTIFY) {
		d = tail_init(s, TAIL_NOTIFY, KVT_DESC_NOTIFY);
		d->data = s->payload;
		d->len = s->notify_len;
		if (s->mode == SUB_STRIPED)
			d->seq = tail_seq(s->peer);
	}
	if (s->mode == SUB_ORDERED && s->cur.left > 0) {
		/* Its lcore cuts the slices (kvt_sub_cut()). */
		d = &s->whole;
		sub_desc_init(s, d, KVT_DESC_CUT);
	}
	if (s->mode == SUB_ORDERED)
		(void)tail_init(s, TAIL_DONE, KVT_DESC_DONE);	/* settles s */
}

/* Up to k descriptors from the engine's pool, one if k are not there;
 * @return how many. */
static unsigned int
desc_get(struct kvt_desc **d, unsigned int k)
{
	if (k == 0 || rte_mempool_get_bulk(kvt_eng->pool, (void **)d, k) == 0)
		return k;
	return rte_mempool_get_bulk(kvt_eng->pool, (void **)d, 1) == 0 ? 1 : 0;
}

/* @return 1 when the submission is fully queued. */
static int
pump_sub(struct kvt_batch *b, struct kvt_sub *s)
{
	struct kvt_desc *d[KVT_BURST];
	unsigned int k, i;

	if (s->mode == SUB_WHOLE) {
		if (s->tails_queued)
			return 1;
		s->tails_queued = 1;
		d[0] = &s->whole;
		return enqueue(b, s->prio, d, 1);
	}
	if (s->mode == SUB_ORDERED) {
		/* One descriptor for the data, which the lcore cuts, then
		 * the tails right behind it on the same ring. */
		if (s->tails_queued)
			return 1;
		s->tails_queued = 1;
		k = 0;
		if (s->cur.left > 0)
			d[k++] = &s->whole;
		if (s->flags & SUB_F_FENCE)
			d[k++] = &s->tail[TAIL_FENCE];
		if (s->flags & SUB_F_NOTIFY)
			d[k++] = &s->tail[TAIL_NOTIFY];
		d[k++] = &s->tail[TAIL_DONE];
		return enqueue(b, s->prio, d, k);
	}
	while (s->cur.left > 0) {
		/* Every port that may carry the next slice is full: the
		 * rest waits for whichever drains first (kvt_poll,
		 * kvt_wait).  Urgent work does not wait behind bulk. */
		if (s->mode == SUB_STRIPED && s->prio != KVT_PRIO_URGENT &&
		    kvt_stripe_space(usable_ports(&b->req[s->cur.req], s->peer)) == 0)
			return 0;
		k = desc_get(d, (unsigned int)RTE_MIN(s->cur.left,
						      (uint64_t)KVT_BURST));
		if (k == 0)
			return 0;
		for (i = 0; i < k; i++)
			fill_slice(b, s, &s->cur, kvt_eng->o.slice, d[i]);
		if (!enqueue(b, s->prio, d, k))
			return 0;
	}
	return 1;
}

/* The largest slice the lcore cuts for a submission of class prio. */
static uint32_t
cut_size(uint8_t prio)
{
	return prio == KVT_PRIO_BULK ?
		RTE_MIN(kvt_eng->o.slice, KVT_BULK_SLICE) : kvt_eng->o.slice;
}

void
kvt_sub_cut_begin(const struct kvt_desc *cut, struct kvt_cursor *cur)
{
	const struct kvt_sub *s = cut->owner;
	uint32_t size = cut_size(cut->prio);

	/* left counted slices of --kvt-slice: at most this many of size. */
	*cur = s->cur;
	cur->left *= (kvt_eng->o.slice + size - 1) / size;
}

unsigned int
kvt_sub_cut(struct kvt_desc *cut, struct kvt_cursor *cur, struct kvt_desc **d,
	    unsigned int max, int *fin)
{
	struct kvt_sub *s = cut->owner;
	uint32_t size = cut_size(cut->prio), end = s->first + s->n;
	unsigned int k, i;

	k = desc_get(d, (unsigned int)RTE_MIN(cur->left, (uint64_t)max));
	for (i = 0; i < k && cur->req < end; i++) {
		fill_slice(s->b, s, cur, size, d[i]);
		d[i]->prio = cut->prio;
	}
	/* Smaller slices were counted generously: give back the rest. */
	if (i < k)
		rte_mempool_put_bulk(kvt_eng->pool, (void **)&d[i], k - i);
	*fin = cur->req == end;
	return i;
}

uint64_t
kvt_batch_pump_slack_us(const struct kvt_batch *b)
{
	const struct kvt_sub *s;

	if (b->stash != NULL)
		return 0;
	if (b->pump == b->nsubs)
		return UINT64_MAX;
	/* Held back by the ports' caps: they hold work enough for a
	 * while; the pump is wanted when the first one has half left. */
	s = sub_at(b, b->pump);
	if (s->mode != SUB_STRIPED || s->cur.left == 0)
		return 0;
	return kvt_stripe_drain_us(usable_ports(&b->req[s->cur.req],
						s->peer)) / 2;
}

void
kvt_batch_pump(struct kvt_batch *b)
{
	if (!lcores_up() || !stash_flush(b))
		return;
	while (b->pump < b->nsubs && pump_sub(b, sub_at(b, b->pump)))
		b->pump++;
}
