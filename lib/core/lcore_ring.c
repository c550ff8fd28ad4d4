/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Handing descriptors to lcores: each lcore's ring, which any thread
 * enqueues to, and its deferred list, which only the lcore itself uses.
 * Below the lcore loop (runtime/lcore.c) and settling
 * (batch/complete.c), and calling neither.
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include <rte_atomic.h>
#include <rte_lcore.h>

#include "kvt_private.h"

static struct kvt_lcore *lcore_by_id[RTE_MAX_LCORE];

void
kvt_lcore_ring_attach(struct kvt_lcore *lc)
{
	lcore_by_id[lc->id] = lc;
}

void
kvt_lcore_ring_detach(struct kvt_lcore *lc)
{
	lcore_by_id[lc->id] = NULL;
}

struct kvt_lcore *
kvt_lcore_of_port(const struct kvt_port *p)
{
	return lcore_by_id[p->lcore];
}

int
kvt_port_urgent_waiting(const struct kvt_port *p)
{
	const struct kvt_lcore *lc = lcore_by_id[p->lcore];

	return lc != NULL && !rte_ring_empty(lc->ring[KVT_PRIO_URGENT]);
}

void
kvt_desc_free(struct kvt_desc *d)
{
	if (!(d->flags & KVT_DF_EMBEDDED))
		rte_mempool_put(kvt_eng->pool, d);
}

void
kvt_lcore_kick(struct kvt_lcore *lc)
{
	uint64_t one = 1;

	if (lc->evfd >= 0 && write(lc->evfd, &one, sizeof(one)) < 0)
		return;	/* EAGAIN: the counter is full, a wake is due */
}

/*
 * The lcore says "sleeping", then looks at its rings once more; we put
 * work in a ring, then look at "sleeping".  Each side's store comes
 * before its load (the full barriers), so at least one of the two sees
 * the other's: either the lcore finds the work, or we find it asleep.
 * Whoever clears the flag owes the wake, so it is written once.
 */
void
kvt_lcore_wake(struct kvt_lcore *lc)
{
	rte_atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&lc->sleeping, __ATOMIC_RELAXED) != 0 &&
	    __atomic_exchange_n(&lc->sleeping, 0, __ATOMIC_ACQ_REL) != 0)
		kvt_lcore_kick(lc);
}

unsigned int
kvt_lcore_enqueue(unsigned int lcore_id, enum kvt_prio prio,
		  struct kvt_desc **d, unsigned int n)
{
	struct kvt_lcore *lc = lcore_by_id[lcore_id];
	struct rte_ring *r = lc->ring[prio];
	unsigned int took;

	KVT_TSAN_RELEASE(r);
	took = rte_ring_mp_enqueue_burst(r, (void **)d, n, NULL);
	if (took != 0)
		kvt_lcore_wake(lc);
	return took;
}

int
kvt_lcore_defer(struct kvt_desc *d)
{
	struct kvt_lcore *lc = lcore_by_id[rte_lcore_id() % RTE_MAX_LCORE];

	/* Off an lcore (shutdown paths) there is nobody to run it later. */
	if (rte_lcore_id() == LCORE_ID_ANY || lc == NULL)
		return -ENOENT;
	/* FIFO: a done marker must stay behind the notification it waits
	 * for. */
	kvt_desc_append(&lc->defer, &lc->defer_tail, d);
	return 0;
}
