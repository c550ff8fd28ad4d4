/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Overlap guard: two writes in flight to overlapping bytes of one remote
 * region are how transfers get mixed, so the second is refused.
 *
 * Each imported region has a table of claim slots.  A submission publishes
 * its sorted write ranges for the region in a free slot, then (after a
 * full fence) checks every other published claim.  Two racing overlapping
 * submissions cannot both miss each other: each published before it
 * looked.  Both may see each other and both back off with -EBUSY, which
 * only happens when they really overlap.  No lock: a slot is taken with a
 * compare-and-swap, and claims are read inside RCU read sections so the
 * batch memory they point to stays valid (batches synchronise before
 * reusing or freeing it).
 */
#include <errno.h>
#include <stdlib.h>

#include "kvt_private.h"

#define KVT_CLAIM_SLOTS 1024

struct kvt_claims {
	uint32_t hwm;		/* slots ever used: the scan bound */
	const struct kvt_claim *slot[KVT_CLAIM_SLOTS];
};

/* The region's table, made by its first writing submission (most
 * regions of a serving stack are only read, or written by one path, and
 * 8 KiB each adds up over many thousands).  Racing first writers keep
 * one table. */
static struct kvt_claims *
table_of(struct kvt_claims **tp)
{
	struct kvt_claims *t = __atomic_load_n(tp, __ATOMIC_ACQUIRE), *none = NULL;

	if (t != NULL)
		return t;
	t = calloc(1, sizeof(*t));
	if (t != NULL &&
	    !__atomic_compare_exchange_n(tp, &none, t, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		free(t);
		t = none;
	}
	return t;
}

void
kvt_claims_free(struct kvt_claims *t)
{
	free(t);
}

/* Does [lo, hi) overlap any range of the sorted, disjoint r[0..n)? */
static int
hits(const struct kvt_range *r, unsigned int n, uint64_t lo, uint64_t hi)
{
	unsigned int a = 0, b = n, mid;

	/* First range whose end is beyond lo. */
	while (a < b) {
		mid = (a + b) / 2;
		if (r[mid].hi <= lo)
			a = mid + 1;
		else
			b = mid;
	}
	return a < n && r[a].lo < hi;
}

static int
claims_overlap(const struct kvt_claim *x, const struct kvt_claim *y)
{
	const struct kvt_claim *small = x->n <= y->n ? x : y;
	const struct kvt_claim *big = small == x ? y : x;
	unsigned int i;

	if (x->r[0].lo >= y->r[y->n - 1].hi || y->r[0].lo >= x->r[x->n - 1].hi)
		return 0;
	for (i = 0; i < small->n; i++)
		if (hits(big->r, big->n, small->r[i].lo, small->r[i].hi))
			return 1;
	return 0;
}

static void
raise_hwm(struct kvt_claims *t, uint32_t v)
{
	uint32_t cur = __atomic_load_n(&t->hwm, __ATOMIC_RELAXED);

	while (cur < v &&
	       !__atomic_compare_exchange_n(&t->hwm, &cur, v, true,
					    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		;
}

int
kvt_claim_take(struct kvt_claims **tp, struct kvt_claim *c,
	       const struct kvt_range *r, unsigned int n)
{
	struct kvt_claims *t = table_of(tp);
	const struct kvt_claim *o, *none;
	unsigned int i, hwm;
	int slot = -1, clash = 0;

	if (t == NULL)
		return -ENOMEM;
	c->table = t;
	c->r = r;
	c->n = n;
	for (i = 0; i < KVT_CLAIM_SLOTS; i++) {
		none = NULL;
		if (__atomic_load_n(&t->slot[i], __ATOMIC_RELAXED) == NULL &&
		    __atomic_compare_exchange_n(&t->slot[i], &none, c, false,
						__ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED)) {
			slot = (int)i;
			break;
		}
	}
	if (slot < 0) {
		KVT_LOG(ERR, "overlap guard: more than %d writing submissions in flight to region %#" PRIx64,
			KVT_CLAIM_SLOTS, r[0].ri->rm.base);
		c->table = NULL;
		return -EBUSY;
	}
	raise_hwm(t, (uint32_t)slot + 1);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	hwm = __atomic_load_n(&t->hwm, __ATOMIC_SEQ_CST);
	for (i = 0; i < hwm && !clash; i++) {
		if ((int)i == slot)
			continue;
		o = __atomic_load_n(&t->slot[i], __ATOMIC_ACQUIRE);
		clash = o != NULL && claims_overlap(c, o);
	}
	if (clash) {
		__atomic_store_n(&t->slot[slot], NULL, __ATOMIC_RELEASE);
		c->table = NULL;
		return -EBUSY;
	}
	c->slot = slot;
	return 0;
}

void
kvt_claim_drop(struct kvt_claim *c)
{
	if (c->table == NULL)
		return;
	__atomic_store_n(&c->table->slot[c->slot], NULL, __ATOMIC_RELEASE);
	c->table = NULL;
}
