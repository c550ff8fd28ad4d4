/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What every initiator worker does each round, plain or fenced: take its
 * share of the byte budget, wait for its batch while timing each request,
 * empty the batch for the next round.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <rte_common.h>

#include "kvfwd.h"
#include "initiator.h"

void
kvfwd_sample(struct samples *s, double v)
{
	if (s->n < MAX_SAMPLES)
		s->v[s->n++] = v;
}

/* Take up to max blocks' worth of the byte budget; 0 when it is spent. */
unsigned int
kvfwd_take_blocks(struct shared *sh, unsigned int max)
{
	uint64_t want = (uint64_t)max * sh->o->block, left;

	if (sh->deadline > 0)
		return kvfwd_now() < sh->deadline ? max : 0;
	left = __atomic_load_n(&sh->bytes_left, __ATOMIC_RELAXED);
	do {
		if (left == 0)
			return 0;
		want = RTE_MIN(want, left);
	} while (!__atomic_compare_exchange_n(&sh->bytes_left, &left,
					      left - want, true,
					      __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return (unsigned int)((want + sh->o->block - 1) / sh->o->block);
}

/* Note each request's completion as soon as it is seen. */
int
kvfwd_wait_timed(struct worker *w, struct kvt_batch *b, unsigned int n,
		 double t0)
{
	unsigned int cur = 0;
	double deadline = t0 + (double)WAIT_US / 1e6;
	double last = t0, now;
	int st;

	while (cur < n) {
		kvt_poll(b);
		now = kvfwd_now();
		/* Spin briefly while completions come; then wait for the
		 * next request in kvt_wait_one(), which yields, then sleeps
		 * until the lcore that settles it wakes this thread: on a
		 * host running many initiators the waiters leave the cpus
		 * to the lcores. */
		if (now - last > 20e-6)
			kvt_wait_one(b, cur, 2000);
		while (cur < n && (st = kvt_status(b, cur)) != -EINPROGRESS) {
			last = now;
			kvfwd_sample(&w->req, (kvfwd_now() - t0) * 1e6);
			if (st != 0) {
				if (w->errors++ == 0)
					fprintf(stderr, "kvfwd: request failed: %s\n",
						strerror(-st));
			}
			cur++;
		}
		if (kvfwd_now() > deadline)
			return -ETIMEDOUT;
	}
	kvfwd_sample(&w->batch, (kvfwd_now() - t0) * 1e6);
	return 0;
}

/* Empty a settled batch for the next round; @return 0 or -1. */
int
kvfwd_reuse(struct kvt_batch *b)
{
	int ret = kvt_batch_reset(b);

	if (ret != 0 && kvt_wait(b, WAIT_US) == 0)
		ret = kvt_batch_reset(b);
	if (ret != 0)
		fprintf(stderr, "kvfwd: batch not reusable: %s\n", strerror(-ret));
	return ret != 0 ? -1 : 0;
}
