/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Handing descriptors to lcores: each lcore's ring, which any thread
 * enqueues to, and its deferred list, which only the lcore itself uses.
 * Below the lcore loop (lcore.c) and the completion code (batch.c), and
 * calling neither.
 */
#include <errno.h>

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

void
kvt_desc_free(struct kvt_desc *d)
{
	if (!(d->flags & KVT_DF_EMBEDDED))
		rte_mempool_put(kvt_eng->pool, d);
}

unsigned int
kvt_lcore_enqueue(unsigned int lcore_id, struct kvt_desc **d, unsigned int n)
{
	struct kvt_lcore *lc = lcore_by_id[lcore_id];

	KVT_TSAN_RELEASE(lc->ring);
	return rte_ring_mp_enqueue_burst(lc->ring, (void **)d, n, NULL);
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
	d->next = NULL;
	if (lc->defer == NULL)
		lc->defer = d;
	else
		lc->defer_tail->next = d;
	lc->defer_tail = d;
	return 0;
}
