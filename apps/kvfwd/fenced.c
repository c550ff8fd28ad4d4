/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvfwd initiator, fence mode: the target hands out (slot, room) credits
 * in notifications; worker threads share them and write each block with
 * its fence, so the same destination slots are reused by different
 * threads round after round (the stale-completion stress of --verify).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_common.h>

#include "kvfwd.h"
#include "initiator.h"

/* Pull credit messages out of the notifications. */
void
kvfwd_pump_credits(struct shared *sh)
{
	struct kvt_notify_msg m[8];
	int n, i;
	size_t k;

	n = kvt_notify_poll(m, RTE_DIM(m));
	for (i = 0; i < n; i++) {
		if (m[i].len >= 8 && m[i].data[0] == KVFWD_MSG_CREDIT) {
			k = m[i].data[1];
			if (8 + k * sizeof(struct kvfwd_credit) > m[i].len)
				continue;
			pthread_mutex_lock(&sh->lock);
			if (sh->ncredits + k > sh->cap) {
				sh->cap = (sh->ncredits + k) * 2;
				sh->credits = realloc(sh->credits,
						      sh->cap * sizeof(*sh->credits));
			}
			memcpy(sh->credits + sh->ncredits, m[i].data + 8,
			       k * sizeof(struct kvfwd_credit));
			sh->ncredits += k;
			pthread_mutex_unlock(&sh->lock);
		} else {
			/* "ready" or "result ..." */
			pthread_mutex_lock(&sh->lock);
			snprintf(sh->result, sizeof(sh->result), "%.*s",
				 (int)m[i].len, m[i].data);
			pthread_mutex_unlock(&sh->lock);
		}
	}
}

static unsigned int
take_credits(struct shared *sh, struct kvfwd_credit *out, unsigned int max)
{
	struct timespec nap = { 0, 10000 };
	double until = kvfwd_now() + CREDIT_WAIT_S;
	unsigned int n = 0;

	/* A target that is gone sends no more: stop waiting at once. */
	while (n == 0 && kvfwd_now() < until && !sh->failed &&
	       kvt_peer_state(sh->peer) == 0) {
		kvfwd_pump_credits(sh);
		pthread_mutex_lock(&sh->lock);
		n = (unsigned int)RTE_MIN((size_t)max, sh->ncredits);
		/* Oldest first, so every slot keeps moving. */
		memcpy(out, sh->credits, n * sizeof(*out));
		memmove(sh->credits, sh->credits + n,
			(sh->ncredits - n) * sizeof(*out));
		sh->ncredits -= n;
		pthread_mutex_unlock(&sh->lock);
		if (n == 0)
			nanosleep(&nap, NULL);
	}
	return n;
}

/* Submit one block with its fence; a slot another thread's write still
 * holds (not reaped yet) is retried briefly. */
static int
submit_fenced(struct shared *sh, struct kvt_batch *b, uint8_t *src,
	      const struct kvfwd_credit *c)
{
	const struct kvfwd_opts *o = sh->o;
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src,
			      .remote = sh->rbase +
				      (uint64_t)(c->slot - sh->slot0) * o->block,
			      .len = o->block };
	struct kvt_submit_opts so = { .flags = KVT_SUBMIT_FENCE,
		.fence = { .table = sh->ftable, .slot = c->slot, .room = c->room },
		.priority = o->priority };
	struct timespec nap = { 0, 5000 };
	int ret, tries;

	for (tries = 0; tries < 20000; tries++) {
		ret = kvt_submit(b, sh->peer, &x, 1, &so);
		if (ret != -EBUSY)
			return ret;
		nanosleep(&nap, NULL);
	}
	return ret;
}

void *
kvfwd_fence_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	const struct kvfwd_opts *o = sh->o;
	struct kvfwd_credit *c = calloc(o->batch, sizeof(*c));
	struct kvt_batch *b = kvt_batch_alloc(o->batch);
	unsigned int n, i, want;
	uint8_t *src;
	double t0;

	if (!o->verify)
		kvfwd_fill(w->src, (uint64_t)o->batch * o->block, w->id,
			   kvfwd_is_dev(o->src_loc), 0);
	while (c != NULL && b != NULL && !sh->failed &&
	       (want = kvfwd_take_blocks(sh, o->batch)) > 0) {
		n = take_credits(sh, c, want);
		if (n == 0) {
			fprintf(stderr, "kvfwd: no credits from the target in %.0f s\n",
				CREDIT_WAIT_S);
			sh->failed = 1;
			break;
		}
		if (n < want && sh->deadline == 0)
			__atomic_fetch_add(&sh->bytes_left,
					   (uint64_t)(want - n) * o->block,
					   __ATOMIC_RELAXED);
		t0 = kvfwd_now();
		for (i = 0; i < n; i++) {
			src = w->src + (uint64_t)i * o->block;
			/* Test-only fault: damage one block. */
			if (o->verify &&
			    kvfwd_fill(src, o->block, c[i].room,
				       kvfwd_is_dev(o->src_loc),
				       __atomic_fetch_add(&sh->blocks_sent, 1,
							  __ATOMIC_RELAXED) ==
				       (uint64_t)o->fault_block) < 0) {
				fprintf(stderr, "kvfwd: cannot fill the source\n");
				sh->failed = 1;
				break;
			}
			if (submit_fenced(sh, b, src, &c[i]) < 0) {
				fprintf(stderr, "kvfwd: fenced submit failed\n");
				sh->failed = 1;
				break;
			}
		}
		if (sh->failed || kvfwd_wait_timed(w, b, n, t0) < 0 || kvfwd_reuse(b) < 0) {
			sh->failed = 1;
			break;
		}
		w->requests += n;
		w->bytes += (uint64_t)n * o->block;
		__atomic_fetch_add(&sh->bytes_done, (uint64_t)n * o->block,
				   __ATOMIC_RELAXED);
	}
	kvt_batch_free(b);
	free(c);
	return NULL;
}

