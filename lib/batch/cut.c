/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The slicer: a submission's slices cut from its requests (pages and
 * blocks too), each slice a descriptor from the engine's pool with its
 * port chosen (the submission's one port when ordered, the least loaded
 * of those that reach the peer when striped).  Both sides call down
 * into it: the submitter's pump for striped submissions, at the
 * submission's own cursor (kvt_cut_next), and the lcore for ordered
 * ones, at a cursor of its own (kvt_cut_begin, kvt_cut).
 */
#include <rte_common.h>
#include <rte_mempool.h>

#include "batch.h"

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
fill_slice(struct kvt_sub *s, struct kvt_cursor *cur, uint32_t max,
	   struct kvt_desc *d)
{
	struct kvt_batch *b = s->b;
	struct kvt_req *r = &b->req[cur->req];
	uint32_t len = (uint32_t)RTE_MIN(r->x.len - cur->off, (uint64_t)max);

	slice_at(s, r, cur, &len, d);
	/* Only the descriptor's first cache line is written here: the
	 * class is the lcore's to write (ring_take(), kvt_cut()). */
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

/* Up to k descriptors from the engine's pool, one if k are not there;
 * @return how many. */
static unsigned int
desc_get(struct kvt_desc **d, unsigned int k)
{
	if (k == 0 || rte_mempool_get_bulk(kvt_eng->pool, (void **)d, k) == 0)
		return k;
	return rte_mempool_get_bulk(kvt_eng->pool, (void **)d, 1) == 0 ? 1 : 0;
}

unsigned int
kvt_cut_next(struct kvt_sub *s, struct kvt_desc **d, unsigned int max)
{
	unsigned int k, i;

	k = desc_get(d, (unsigned int)RTE_MIN(s->cur.left, (uint64_t)max));
	for (i = 0; i < k; i++)
		fill_slice(s, &s->cur, kvt_eng->o.slice, d[i]);
	return k;
}

/* The largest slice the lcore cuts for a submission of class prio. */
static uint32_t
cut_size(uint8_t prio)
{
	return prio == KVT_PRIO_BULK ?
		RTE_MIN(kvt_eng->o.slice, KVT_BULK_SLICE) : kvt_eng->o.slice;
}

void
kvt_cut_begin(const struct kvt_desc *cut, struct kvt_cursor *cur)
{
	const struct kvt_sub *s = cut->owner;
	uint32_t size = cut_size(cut->prio);

	/* left counted slices of --kvt-slice: at most this many of size. */
	*cur = s->cur;
	cur->left *= (kvt_eng->o.slice + size - 1) / size;
}

unsigned int
kvt_cut(struct kvt_desc *cut, struct kvt_cursor *cur, struct kvt_desc **d,
	unsigned int max, int *fin)
{
	struct kvt_sub *s = cut->owner;
	uint32_t size = cut_size(cut->prio), end = s->first + s->n;
	unsigned int k, i;

	k = desc_get(d, (unsigned int)RTE_MIN(cur->left, (uint64_t)max));
	for (i = 0; i < k && cur->req < end; i++) {
		fill_slice(s, cur, size, d[i]);
		d[i]->prio = cut->prio;
	}
	/* Smaller slices were counted generously: give back the rest. */
	if (i < k)
		rte_mempool_put_bulk(kvt_eng->pool, (void **)&d[i], k - i);
	*fin = cur->req == end;
	return i;
}
