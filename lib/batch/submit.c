/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Submission, on the application thread: every request checked against
 * the registry and the peer's regions, write ranges claimed against
 * overlap, a mode chosen, references taken, and the submission queued.
 * Nothing is queued unless everything passed.
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

static int
range_cmp(const void *a, const void *b)
{
	const struct kvt_range *x = a, *y = b;

	if (x->ri != y->ri)
		return (uintptr_t)x->ri < (uintptr_t)y->ri ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
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

/*
 * The regions of a request: local [local, +llen) inside one registered
 * region, remote [remote, +rlen) inside one the peer exports for op, and
 * the ports that reach the peer for them.  what names the request in
 * refusals.
 */
int
kvt_sub_resolve(struct kvt_peer *p, uint32_t op, const void *local,
		uint64_t llen, uint64_t remote, uint64_t rlen, const char *what,
		struct kvt_req *r)
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
	topo_masks(&m->lm, kvt_best_ports(m->lm.port_mask & ri->rm.port_mask &
				      p->conn_mask),
		   &r->mask, &r->fallback);
	if (r->mask == 0)
		return KVT_REFUSE(EHOSTUNREACH, "submit: %s: no port reaches peer %s for this memory",
				  what, p->info.name);
	return 0;
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
	    kvt_inside((uintptr_t)x->local, x->len,
		       (uintptr_t)lk->m->lm.addr, lk->m->lm.len) &&
	    kvt_inside(x->remote, x->len, lk->ri->rm.base, lk->ri->rm.len) &&
	    (x->op == KVT_OP_WRITE ? (lk->ri->rm.flags & KVT_MEM_REMOTE_WRITE) :
	     (lk->ri->rm.flags & KVT_MEM_REMOTE_READ))) {
		r->x.lm = &lk->m->lm;
		r->x.rm = &lk->ri->rm;
		r->mask = lk->mask;
		r->fallback = lk->fallback;
	} else {
		char what[24];

		snprintf(what, sizeof(what), "xfer %u", i);
		ret = kvt_sub_resolve(p, x->op, x->local, x->len, x->remote,
				      x->len, what, r);
		if (ret < 0)
			return ret;
		lk->m = req_mem(r);
		lk->ri = req_rimp(r);
		lk->mask = r->mask;
		lk->fallback = r->fallback;
	}
	s->cur.left += kvt_slices_of(x->len);
	kvt_sub_req_fill(s, r, x->op, x->local, x->remote, x->len);
	return 0;
}

int
kvt_sub_check_opts(struct kvt_peer *p, const struct kvt_submit_opts *o,
		   struct kvt_sub *s)
{
	const struct kvt_fence_ref *f = &o->fence;
	struct kvt_rimp *ri;

	if ((o->flags & ~(KVT_SUBMIT_FENCE | KVT_SUBMIT_ALLOW_OVERLAP)) != 0 ||
	    o->notify_len > KVT_NOTIFY_MAX ||
	    (o->notify_len > 0 && o->notify == NULL))
		return KVT_REFUSE(EINVAL, "submit: bad options (flags %#x, notify %u bytes)",
				  o->flags, o->notify_len);
	if (o->priority > KVT_PRIO_BULK || o->rsvd != 0)
		return KVT_REFUSE(EINVAL, "submit: bad priority %u (or reserved field set)",
				  o->priority);
	s->prio = (uint8_t)o->priority;
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

/* Sort ranges of one region by start: an LSD radix sort on the offset,
 * 11 bits a pass (tmp: scratch of n). */
static void
radix_by_start(struct kvt_range *r, struct kvt_range *tmp, unsigned int n)
{
	uint32_t count[2048];
	uint64_t lo = UINT64_MAX, hi = 0, bits = 0;
	struct kvt_range *src = r, *dst = tmp, *t;
	unsigned int i, shift;

	for (i = 0; i < n; i++) {
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

#define SORT_REGIONS 64

/* The index of region ri in key[0..n), looked up from *last first. */
static unsigned int
region_index(const struct kvt_rimp *const *key, unsigned int n,
	     const struct kvt_rimp *ri, unsigned int *last)
{
	unsigned int g;

	if (key[*last] == ri)
		return *last;
	for (g = 0; g < n && key[g] != ri; g++)
		;
	*last = g;
	return g;
}

/*
 * Sort ranges by (region, start).  Scattered KV pages make this the cost
 * of a big submission.  Ranges of one region (a KV pool) go to the radix
 * sort at once; those of a few regions (a list over layer tensors) are
 * gathered region by region in region order (a counting sort), then each
 * region's are radix-sorted; more than SORT_REGIONS regions use qsort.
 */
static void
sort_ranges(struct kvt_range *r, struct kvt_range *tmp, unsigned int n)
{
	const struct kvt_rimp *key[SORT_REGIONS], *k;
	uint32_t start[SORT_REGIONS + 1];
	unsigned int ng = 0, last = 0, i, g, j;

	for (i = 0; i < n; i++) {
		if (ng > 0 && region_index(key, ng, r[i].ri, &last) < ng)
			continue;
		if (ng == SORT_REGIONS) {
			qsort(r, n, sizeof(*r), range_cmp);
			return;
		}
		key[ng++] = r[i].ri;
	}
	if (ng <= 1) {
		radix_by_start(r, tmp, n);
		return;
	}
	for (i = 1; i < ng; i++) {
		k = key[i];
		for (j = i; j > 0 && (uintptr_t)key[j - 1] > (uintptr_t)k; j--)
			key[j] = key[j - 1];
		key[j] = k;
	}
	memset(start, 0, sizeof(start));
	last = 0;
	for (i = 0; i < n; i++)
		start[region_index(key, ng, r[i].ri, &last) + 1]++;
	for (g = 1; g <= ng; g++)
		start[g] += start[g - 1];
	for (i = 0; i < n; i++)
		tmp[start[region_index(key, ng, r[i].ri, &last)]++] = r[i];
	/* start[g] is now the end of region g's ranges in tmp. */
	for (g = 0, j = 0; g < ng; j = start[g++])
		radix_by_start(tmp + j, r + j, start[g] - j);
	memcpy(r, tmp, (size_t)n * sizeof(*r));
}

/*
 * Claim write ranges r[0..n) (tmp: scratch of n for sorting); they stay
 * referenced until the submission finishes.  @return 0 or -EBUSY.
 */
int
kvt_sub_claim_ranges(struct kvt_batch *b, struct kvt_sub *s,
		     struct kvt_range *r, struct kvt_range *tmp, unsigned int n,
		     int sorted)
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
	return kvt_sub_claim_ranges(b, s, r, b->ranges_tmp, n, sorted);
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
		all = kvt_best_ports(s->flags & SUB_F_FENCE ? s->fence_mask :
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
int
kvt_sub_open(struct kvt_batch *b, struct kvt_peer *p, unsigned int nslots,
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
	/* The descriptors are written by kvt_sub_prepare(), as needed. */
	memset(&s->b, 0, offsetof(struct kvt_sub, info) -
	       offsetof(struct kvt_sub, b));
	s->b = b;
	s->peer = p;
	s->first = b->used;
	s->n = nslots;
	s->pending = nslots;
	s->cur.req = b->used;
	*out = s;
	return 0;
}

/*
 * Requests and options are valid: pick the mode and write the
 * submission's descriptors, before its claims, so that the stores to
 * lines the lcore used last go out together and the first atomic after
 * them waits for all at once.  @return 0, or -ENOTSUP.
 */
int
kvt_sub_mode(struct kvt_batch *b, struct kvt_sub *s,
	     const struct kvt_submit_opts *o)
{
	choose_mode(b, s);
	if (o->cuda_event != NULL && s->mode != SUB_WHOLE)
		return KVT_REFUSE(ENOTSUP, "submit: a CUDA event needs a transport that takes whole submissions (nvlink)");
	kvt_sub_prepare(s, o);
	return 0;
}

/*
 * Validation is over (ret), inside the RCU section tok: take references,
 * and queue.  @return the first slot, or ret.
 */
int
kvt_sub_commit(struct kvt_batch *b, struct kvt_sub *s, int ret,
	       unsigned int tok)
{
	unsigned int n = s->n;

	if (ret == 0)
		kvt_sub_refs_add(b, s, 1);
	kvt_rcu_read_unlock(tok);
	if (ret < 0)
		return ret;

	if (n == 0) {
		memset(&b->req[b->used], 0, sizeof(b->req[0]));
		b->req[b->used].s = s;
		s->n = 1;
		s->pending = 0;
	}
	b->used += s->n;
	b->open_reqs += s->n;
	if (s->mode == SUB_WHOLE)
		b->whole_open++;
	b->nsubs++;
	if (n == 0 && s->mode == SUB_STRIPED) {
		/* Only a fence and/or a notification: they go out now. */
		if (!lcores_up())
			set_err(&s->err, -ECANCELED);
		kvt_sub_tails_start(s, KVT_MAX_PORTS);
	}
	kvt_batch_pump(b);
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
	/* Before the first store: the lock's barrier waits for nothing. */
	tok = kvt_rcu_read_lock();
	ret = kvt_sub_open(b, p, n, &s);
	if (ret < 0) {
		kvt_rcu_read_unlock(tok);
		return ret;
	}
	ret = kvt_sub_check_opts(p, o, s);
	for (i = 0; i < n && ret == 0; i++) {
		struct kvt_req *r = &b->req[b->used + i];

		ret = check_xfer(s, p, &xf[i], i, r, &lk);
		kvt_sub_add_req(s, r, i == 0);
	}
	if (ret == 0)
		ret = kvt_sub_mode(b, s, o);
	if (ret == 0 && !(o->flags & KVT_SUBMIT_ALLOW_OVERLAP))
		ret = claim_writes(b, s);
	return kvt_sub_commit(b, s, ret, tok);
}
