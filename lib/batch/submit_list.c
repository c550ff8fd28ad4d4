/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * List submissions, on the application thread: a page list
 * (kvt_submit_pages(): one request) and a block list
 * (kvt_submit_blocks(): one request per run of blocks in one region
 * pair, settling together).  Their arrays are copied into the batch's
 * arena, where the slicer and whole-submission ports read them until
 * the batch is reset.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

/* What every list submission checks first. */
static int
list_entry(const struct kvt_batch *b, const struct kvt_peer *p,
	   const void *list, const char *what)
{
	if (kvt_eng == NULL)
		return -ENODEV;
	if (!batch_ok(b) || !kvt_peer_valid(p) || list == NULL)
		return KVT_REFUSE(EINVAL, "submit: bad batch, peer or %s", what);
	return 0;
}

/* ---- page lists ---- */

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

	r = kvt_arena_alloc(b, (size_t)xp->n * sizeof(*r));
	tmp = kvt_arena_alloc(b, (size_t)xp->n * sizeof(*tmp));
	if (r == NULL || tmp == NULL)
		return -ENOMEM;
	for (k = 0; k < xp->n; k++) {
		r[k].lo = q->x.remote + (uint64_t)xp->remote_idx[k] * xp->page_size;
		r[k].hi = r[k].lo + xp->page_size;
		r[k].ri = req_rimp(q);
		if (k > 0 && r[k - 1].lo > r[k].lo)
			sorted = 0;
	}
	return kvt_sub_claim_ranges(b, s, r, tmp, xp->n, sorted);
}

/* The submission's own copy of the page list. */
static struct kvt_xpages *
pages_copy(struct kvt_batch *b, const struct kvt_pages *pg)
{
	size_t idx = (size_t)pg->n * sizeof(uint32_t);
	struct kvt_xpages *xp;
	uint32_t *li, *ri;

	xp = kvt_arena_alloc(b, sizeof(*xp));
	li = kvt_arena_alloc(b, idx);
	ri = kvt_arena_alloc(b, idx);
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
	struct kvt_arena_mark mark;
	struct kvt_sub *s;
	struct kvt_req *r;
	unsigned int tok;
	int ret;

	ret = list_entry(b, p, pg, "page list");
	if (ret < 0)
		return ret;
	if ((pg->op != KVT_OP_READ && pg->op != KVT_OP_WRITE) || pg->n == 0 ||
	    pg->page_size == 0 || pg->local_idx == NULL || pg->remote_idx == NULL)
		return KVT_REFUSE(EINVAL, "submit: page list: op %u, %u pages of %" PRIu64 " bytes: invalid",
				  pg->op, pg->n, pg->page_size);
	if (pages_span(pg, &llo, &lhi, &rlo, &rhi) < 0)
		return KVT_REFUSE(EINVAL, "submit: page list: a page address overflows");
	ret = kvt_sub_open(b, p, 1, &s);
	if (ret < 0)
		return ret;
	mark = kvt_arena_mark(b);
	s->pages = pages_copy(b, pg);
	if (s->pages == NULL) {
		kvt_arena_release(b, mark);
		return -ENOMEM;
	}
	r = &b->req[b->used];
	tok = kvt_rcu_read_lock();
	ret = kvt_sub_check_opts(p, o, s);
	if (ret == 0)
		ret = kvt_sub_resolve(p, pg->op, (uint8_t *)pg->local + llo, lhi - llo,
			      pg->remote + rlo, rhi - rlo, "page list", r);
	if (ret == 0) {
		kvt_sub_req_fill(s, r, pg->op, pg->local, pg->remote,
			 (uint64_t)pg->n * pg->page_size);
		slice = kvt_eng->o.slice;
		per_page = (pg->page_size + slice - 1) / slice;
		s->cur.left = (uint64_t)pg->n * per_page;
		kvt_sub_add_req(s, r, 1);
		ret = kvt_sub_mode(b, s, o);
		if (ret == 0 && pg->op == KVT_OP_WRITE &&
		    !(o->flags & KVT_SUBMIT_ALLOW_OVERLAP))
			ret = claim_pages(b, s, r);
	}
	ret = kvt_sub_commit(b, s, ret, tok);
	if (ret < 0)
		kvt_arena_release(b, mark);
	return ret;
}

/* ---- block lists ---- */

/* Room for the submission's own copy of the block list (blocks_check()
 * fills it), and for the first block of each run (n + 1 at most). */
static struct kvt_xblocks *
blocks_space(struct kvt_batch *b, const struct kvt_blocks *bl)
{
	size_t col = (size_t)bl->n * sizeof(uint64_t);
	struct kvt_xblocks *xb;
	uint64_t *loc, *rem, *len;
	uint32_t *first;

	xb = kvt_arena_alloc(b, sizeof(*xb));
	loc = kvt_arena_alloc(b, col);
	rem = kvt_arena_alloc(b, col);
	len = kvt_arena_alloc(b, col);
	first = kvt_arena_alloc(b, ((size_t)bl->n + 1) * sizeof(*first));
	if (xb == NULL || loc == NULL || rem == NULL || len == NULL ||
	    first == NULL)
		return NULL;
	xb->local = loc;
	xb->remote = rem;
	xb->len = len;
	xb->first = first;
	xb->n = bl->n;
	return xb;
}

/* Block k of xb (copied) starts a run: its regions, in the next request slot.
 * runs: the runs so far.  @return the request, or NULL with *ret set. */
static struct kvt_req *
run_open(struct kvt_batch *b, struct kvt_sub *s, uint32_t op,
	 const struct kvt_xblocks *xb, uint32_t k, uint32_t runs, int *ret)
{
	struct kvt_req *r;
	char what[24];

	if (b->used + runs == b->cap) {
		*ret = KVT_REFUSE(ENOSPC, "submit: batch full at block %u (%u slots)",
				  k, b->cap);
		return NULL;
	}
	r = &b->req[b->used + runs];
	snprintf(what, sizeof(what), "block %u", k);
	*ret = kvt_sub_resolve(s->peer, op, (void *)(uintptr_t)xb->local[k],
			       xb->len[k], xb->remote[k], xb->len[k], what, r);
	if (*ret < 0)
		return NULL;
	kvt_sub_req_fill(s, r, op, (void *)(uintptr_t)xb->local[k],
			 xb->remote[k], 0);
	kvt_sub_add_req(s, r, runs == 0);
	return r;
}

/* Copy every block of bl into xb as it is checked (one pass), and cut
 * the list into runs, one request each. */
static int
blocks_check(struct kvt_batch *b, struct kvt_sub *s,
	     const struct kvt_blocks *bl, struct kvt_xblocks *xb)
{
	uint32_t *first = (uint32_t *)(uintptr_t)xb->first, runs = 0, k;
	uint64_t *loc = (uint64_t *)(uintptr_t)xb->local;
	uint64_t *rem = (uint64_t *)(uintptr_t)xb->remote;
	uint64_t *ln = (uint64_t *)(uintptr_t)xb->len;
	uint64_t len, end, bytes = 0;
	struct kvt_req *r = NULL;
	uint32_t op = bl->op;
	int ret = 0;

	for (k = 0; k < xb->n; k++) {
		loc[k] = bl->local[k];
		rem[k] = bl->remote[k];
		ln[k] = len = bl->len[k];
		if (len == 0 || __builtin_add_overflow(loc[k], len, &end) ||
		    __builtin_add_overflow(rem[k], len, &end))
			return KVT_REFUSE(EINVAL, "submit: block %u: %" PRIu64 " bytes at %#" PRIx64 " to %#" PRIx64 ": invalid",
					  k, len, loc[k], rem[k]);
		if (r == NULL ||
		    !kvt_inside(loc[k], len, (uintptr_t)r->x.lm->addr,
				r->x.lm->len) ||
		    !kvt_inside(rem[k], len, r->x.rm->base, r->x.rm->len)) {
			r = run_open(b, s, op, xb, k, runs, &ret);
			if (r == NULL)
				return ret;
			first[runs++] = k;
		}
		r->x.len += len;
		bytes += len;
		s->cur.left += kvt_slices_of(len);
	}
	first[runs] = xb->n;
	if (op == KVT_OP_WRITE)
		s->wbytes = bytes;
	else
		s->rbytes = bytes;
	s->n = runs;
	s->pending = runs;
	return 0;
}

/* Write ranges of a block list, one per block, kept in the arena. */
static int
claim_blocks(struct kvt_batch *b, struct kvt_sub *s)
{
	const struct kvt_xblocks *xb = s->blocks;
	struct kvt_range *r, *tmp;
	uint32_t i, k;
	int sorted = 1;

	r = kvt_arena_alloc(b, (size_t)xb->n * sizeof(*r));
	tmp = kvt_arena_alloc(b, (size_t)xb->n * sizeof(*tmp));
	if (r == NULL || tmp == NULL)
		return -ENOMEM;
	for (i = 0; i < s->n; i++) {
		const struct kvt_rimp *ri = req_rimp(&b->req[s->first + i]);

		for (k = xb->first[i]; k < xb->first[i + 1]; k++) {
			r[k].lo = xb->remote[k];
			r[k].hi = r[k].lo + xb->len[k];
			r[k].ri = ri;
			if (k > 0 && (r[k - 1].ri != ri || r[k - 1].lo > r[k].lo))
				sorted = 0;
		}
	}
	return kvt_sub_claim_ranges(b, s, r, tmp, xb->n, sorted);
}

int
kvt_submit_blocks(struct kvt_batch *b, struct kvt_peer *p,
		  const struct kvt_blocks *bl, const struct kvt_submit_opts *opts)
{
	static const struct kvt_submit_opts none;
	const struct kvt_submit_opts *o = opts != NULL ? opts : &none;
	struct kvt_arena_mark mark;
	struct kvt_xblocks *xb;
	struct kvt_sub *s;
	unsigned int tok;
	int ret;

	ret = list_entry(b, p, bl, "block list");
	if (ret < 0)
		return ret;
	if ((bl->op != KVT_OP_READ && bl->op != KVT_OP_WRITE) || bl->n == 0 ||
	    bl->local == NULL || bl->remote == NULL || bl->len == NULL)
		return KVT_REFUSE(EINVAL, "submit: block list: op %u, %u blocks: invalid",
				  bl->op, bl->n);
	ret = kvt_sub_open(b, p, 1, &s);
	if (ret < 0)
		return ret;
	mark = kvt_arena_mark(b);
	xb = blocks_space(b, bl);
	if (xb == NULL) {
		kvt_arena_release(b, mark);
		return -ENOMEM;
	}
	s->blocks = xb;
	tok = kvt_rcu_read_lock();
	ret = kvt_sub_check_opts(p, o, s);
	if (ret == 0)
		ret = blocks_check(b, s, bl, xb);
	if (ret == 0) {
		s->flags |= SUB_F_LIST;
		ret = kvt_sub_mode(b, s, o);
	}
	if (ret == 0 && bl->op == KVT_OP_WRITE &&
	    !(o->flags & KVT_SUBMIT_ALLOW_OVERLAP))
		ret = claim_blocks(b, s);
	ret = kvt_sub_commit(b, s, ret, tok);
	if (ret < 0)
		kvt_arena_release(b, mark);
	return ret;
}
