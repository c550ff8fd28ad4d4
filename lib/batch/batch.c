/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Batches: poll, wait and status on the application thread, and the life
 * cycle (alloc, reset, free, the zombies of freed batches with work still
 * in flight).  The structures and the design are in batch.h.
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

/* kvt_wait(): yield this long, then sleep until woken, at most
 * KVT_WAIT_NAP_US at a time. */
#define KVT_WAIT_YIELD_US 200
#define KVT_WAIT_NAP_US 2000
/* Shorter than this: yield instead (a sleep costs a wake-up's latency). */
#define KVT_WAIT_MIN_NAP_US 50

static pthread_mutex_t batch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvt_batch *batches;

static void
finish(struct kvt_batch *b, struct kvt_sub *s)
{
	unsigned int i;

	if (s->finished)
		return;
	for (i = s->claim_first; i < s->claim_first + s->nclaims; i++)
		kvt_claim_drop(&b->claims[i]);
	kvt_sub_refs_add(b, s, -1);
	/* Peer counters move per submission: no shared atomics per slice. */
	if (__atomic_load_n(&s->err, __ATOMIC_ACQUIRE) == 0) {
		__atomic_fetch_add(&s->peer->st.write_bytes, s->wbytes,
				   __ATOMIC_RELAXED);
		__atomic_fetch_add(&s->peer->st.read_bytes, s->rbytes,
				   __ATOMIC_RELAXED);
	} else {
		__atomic_fetch_add(&s->peer->st.errors, 1, __ATOMIC_RELAXED);
	}
	b->open_reqs -= s->n;
	if (s->mode == SUB_WHOLE)
		b->whole_open--;
	/* Its requests the lcores counted as they settled (a cancelled one
	 * was not counted). */
	if (s->mode == SUB_STRIPED && s->flags == 0)
		b->reaped_reqs += s->n -
			__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
	b->nfinished++;
	s->finished = 1;
}

/*
 * Add delta to the in-flight counts of the regions a submission uses.
 * Requests usually come in long runs over one region pair, so one atomic
 * per run, not per request.
 */
void
kvt_sub_refs_add(struct kvt_batch *b, struct kvt_sub *s, int64_t delta)
{
	struct kvt_mem *m = NULL;
	struct kvt_rimp *ri = NULL;
	uint64_t mn = 0, rn = 0;
	unsigned int i;

	if (!s->mixed) {
		/* One region pair (or none): no pass over the requests. */
		if (s->m1 != NULL) {
			__atomic_fetch_add(&s->m1->inflight,
					   (uint64_t)s->n * (uint64_t)delta,
					   __ATOMIC_ACQ_REL);
			__atomic_fetch_add(&s->ri1->refs,
					   (uint64_t)s->n * (uint64_t)delta,
					   __ATOMIC_ACQ_REL);
		}
		goto tail;
	}
	for (i = s->first; i <= s->first + s->n; i++) {
		struct kvt_req *r = i < s->first + s->n ? &b->req[i] : NULL;

		if (m != NULL && (r == NULL || req_mem(r) != m)) {
			__atomic_fetch_add(&m->inflight, mn * (uint64_t)delta,
					   __ATOMIC_ACQ_REL);
			mn = 0;
		}
		if (ri != NULL && (r == NULL || req_rimp(r) != ri)) {
			__atomic_fetch_add(&ri->refs, rn * (uint64_t)delta,
					   __ATOMIC_ACQ_REL);
			rn = 0;
		}
		if (r == NULL)
			break;
		m = req_mem(r);
		ri = req_rimp(r);
		mn++;
		rn++;
	}
tail:
	if (s->fence_ri != NULL)
		__atomic_fetch_add(&s->fence_ri->refs, (uint64_t)delta,
				   __ATOMIC_ACQ_REL);
	__atomic_fetch_add(&s->peer->inflight, (uint64_t)delta,
			   __ATOMIC_ACQ_REL);
}

static int
done_word_set(const struct kvt_sub *s)
{
	return __atomic_load_n(&s->done, __ATOMIC_ACQUIRE) != 0;
}

/* Finish the settled ones of list s (linked by settled_next); @return
 * the others (pushed before their done word was stored) put on wait. */
static struct kvt_sub *
finish_list(struct kvt_batch *b, struct kvt_sub *s, struct kvt_sub *wait)
{
	struct kvt_sub *next;

	for (; s != NULL; s = next) {
		next = s->settled_next;
		b->looked_at++;
		if (s->finished)
			continue;
		if (done_word_set(s)) {
			finish(b, s);
		} else {
			s->settled_next = wait;
			wait = s;
		}
	}
	return wait;
}

/* Finish what the lcores pushed on the settled stack since the last
 * look, and what was pushed earlier but had no done word yet. */
static void
reap_settled_stack(struct kvt_batch *b)
{
	struct kvt_sub *wait;

	if (__atomic_load_n(&b->settled, __ATOMIC_RELAXED) == NULL &&
	    b->unsettled == NULL)
		return;
	wait = finish_list(b, b->unsettled, NULL);
	b->unsettled = finish_list(b, __atomic_exchange_n(&b->settled, NULL,
							  __ATOMIC_ACQUIRE),
				   wait);
}

/*
 * Finish what settled since the last call: the settled prefix in order
 * (done words a device stored included), then what the lcores pushed.
 * @return 1 when every submission is finished.
 */
static int
reap(struct kvt_batch *b)
{
	struct kvt_sub *s;

	while (b->reap < b->nsubs) {
		s = sub_at(b, b->reap);
		b->looked_at++;
		if (!s->finished && !done_word_set(s))
			break;
		finish(b, s);
		b->reap++;
	}
	if (b->reap < b->nsubs)
		reap_settled_stack(b);
	return b->nfinished == b->nsubs;
}

/* Requests not settled: those of unfinished submissions, less those of
 * striped ones without tails that the lcores counted as settled. */
static uint64_t
pending_reqs(const struct kvt_batch *b)
{
	return b->open_reqs -
		(__atomic_load_n(&b->settled_reqs, __ATOMIC_RELAXED) -
		 b->reaped_reqs);
}

int
kvt_poll(struct kvt_batch *b)
{
	if (!batch_ok(b))
		return -EINVAL;
	kvt_batch_pump(b);
	if (reap(b))
		return 0;
	return (int)pending_reqs(b);
}

uint64_t
kvt_batch_looked_at(const struct kvt_batch *b)
{
	return b->looked_at;
}

/*
 * How long kvt_wait() may sleep until an lcore wakes it, in us: not at
 * all while a submission's done word is due from a device (it wakes no
 * one) or one was seen settling without its done word yet (it follows
 * at once); else as long as kvt_batch_pump() can wait.
 */
static uint64_t
sleep_budget_us(const struct kvt_batch *b)
{
	if (b->whole_open != 0 || b->unsettled != NULL)
		return 0;
	return kvt_batch_pump_slack_us(b);
}

/* Sleep until an lcore settles a submission or a request of b, at most
 * us; seen: the batch's settled requests before the caller last looked. */
static void
sleep_until_settled(struct kvt_batch *b, uint64_t seen, uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000),
			       (long)(us % 1000000) * 1000 };

	__atomic_store_n(&b->sleeper, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&b->settled, __ATOMIC_SEQ_CST) == NULL &&
	    __atomic_load_n(&b->settled_reqs, __ATOMIC_SEQ_CST) == seen)
		syscall(SYS_futex, &b->sleeper, FUTEX_WAIT_PRIVATE, 1, &ts,
			NULL, 0);
	__atomic_store_n(&b->sleeper, 0, __ATOMIC_RELAXED);
}

/* Is what wait_for() waits for there: every request (idx UINT32_MAX),
 * or request idx? */
static int
waited_for(struct kvt_batch *b, uint32_t idx)
{
	kvt_batch_pump(b);
	if (reap(b))
		return 1;
	return idx != UINT32_MAX && kvt_status(b, idx) != -EINPROGRESS;
}

static int
wait_for(struct kvt_batch *b, uint32_t idx, uint64_t timeout_us)
{
	struct timespec nap = { 0, 20000 };
	uint64_t hz_us = rte_get_tsc_hz() / 1000000;
	uint64_t start = rte_get_tsc_cycles(), el, us = 0, seen;

	for (;;) {
		seen = __atomic_load_n(&b->settled_reqs, __ATOMIC_ACQUIRE);
		if (waited_for(b, idx))
			return 0;
		el = (rte_get_tsc_cycles() - start) / hz_us;
		if (el >= timeout_us)
			return -ETIMEDOUT;
		/* Spin briefly for latency; then yield, so an lcore pinned to
		 * this cpu runs as soon as its work wakes it (a spinning
		 * waiter would hold it off for a time slice); past
		 * KVT_WAIT_YIELD_US sleep until the lcore that settles a
		 * submission wakes this thread, or until the ports may want
		 * more slices: many processes waiting on one host leave the
		 * cpus to the lcores.  A sleep is bounded (KVT_WAIT_NAP_US). */
		if (el >= KVT_WAIT_YIELD_US)
			us = sleep_budget_us(b);
		if (el < 20)
			rte_pause();
		else if (el >= KVT_WAIT_YIELD_US && us >= KVT_WAIT_MIN_NAP_US)
			sleep_until_settled(b, seen,
					    RTE_MIN(RTE_MIN(timeout_us - el, us),
						    (uint64_t)KVT_WAIT_NAP_US));
		else if (el < 20000)
			sched_yield();
		else
			nanosleep(&nap, NULL);
	}
}

int
kvt_wait(struct kvt_batch *b, uint64_t timeout_us)
{
	if (!batch_ok(b))
		return -EINVAL;
	return wait_for(b, UINT32_MAX, timeout_us);
}

int
kvt_wait_one(struct kvt_batch *b, unsigned int idx, uint64_t timeout_us)
{
	if (!batch_ok(b) || idx >= b->used)
		return -EINVAL;
	return wait_for(b, idx, timeout_us);
}

int
kvt_status(struct kvt_batch *b, unsigned int idx)
{
	const struct kvt_req *r;
	const struct kvt_sub *s;
	int err;

	if (!batch_ok(b) || idx >= b->used)
		return -EINVAL;
	r = &b->req[idx];
	s = r->s;
	if (s->mode == SUB_STRIPED && s->flags == 0) {
		/* Requests settle one by one; a cancelled one never fills
		 * its settled word, but its submission is done. */
		if (__atomic_load_n(&r->settled, __ATOMIC_ACQUIRE) < r->x.len &&
		    !done_word_set(s))
			return -EINPROGRESS;
		return __atomic_load_n(&r->err, __ATOMIC_ACQUIRE);
	}
	if (!done_word_set(s))
		return -EINPROGRESS;
	err = __atomic_load_n(&r->err, __ATOMIC_ACQUIRE);
	if (err == 0 && s->flags != 0)
		err = __atomic_load_n(&s->err, __ATOMIC_ACQUIRE);
	return err;
}

/* ------------------------------------------------------------------ */
/* Batch life cycle                                                    */
/* ------------------------------------------------------------------ */

struct kvt_batch *
kvt_batch_alloc(unsigned int max_xfers)
{
	struct kvt_batch *b;

	if (kvt_eng == NULL) {
		rte_errno = ENODEV;
		return NULL;
	}
	if (max_xfers == 0 || max_xfers > KVT_BATCH_MAX) {
		rte_errno = EINVAL;
		return NULL;
	}
	/* Its lcore-written line must not share a line with the rest. */
	b = aligned_alloc(RTE_CACHE_LINE_SIZE,
			  RTE_ALIGN_CEIL(sizeof(*b), RTE_CACHE_LINE_SIZE));
	if (b == NULL)
		goto nomem;
	memset(b, 0, sizeof(*b));
	b->req = calloc(max_xfers, sizeof(*b->req));
	b->ranges = calloc(max_xfers, sizeof(*b->ranges));
	b->ranges_tmp = calloc(max_xfers, sizeof(*b->ranges_tmp));
	b->claims = calloc(max_xfers, sizeof(*b->claims));
	if (b->req == NULL || b->ranges == NULL || b->ranges_tmp == NULL ||
	    b->claims == NULL)
		goto free_arrays;
	b->magic = KVT_BATCH_MAGIC;
	b->cap = max_xfers;
	pthread_mutex_lock(&batch_lock);
	b->next = batches;
	batches = b;
	pthread_mutex_unlock(&batch_lock);
	return b;

free_arrays:
	free(b->req);
	free(b->ranges);
	free(b->ranges_tmp);
	free(b->claims);
	free(b);
nomem:
	rte_errno = ENOMEM;
	return NULL;
}

static void
batch_destroy(struct kvt_batch *b)
{
	uint32_t i;

	/* Concurrent overlap checks may still read our ranges. */
	if (b->claimed)
		kvt_rcu_synchronize();
	for (i = 0; i < b->nchunks; i++) {
		kvt_host_unregister(b->chunk[i]);
		free(b->chunk[i]);
	}
	free(b->chunk);
	kvt_arena_free(b);
	free(b->req);
	free(b->ranges);
	free(b->ranges_tmp);
	free(b->claims);
	b->magic = 0;
	free(b);
}

static void
unlink_batch(struct kvt_batch *b)
{
	struct kvt_batch **pp;

	for (pp = &batches; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == b) {
			*pp = b->next;
			return;
		}
	}
}

int
kvt_batch_free(struct kvt_batch *b)
{
	if (!batch_ok(b))
		return -EINVAL;
	kvt_batch_pump(b);
	pthread_mutex_lock(&batch_lock);
	if (!reap(b)) {
		/* Lcores still write its completion words: keep it. */
		b->zombie = 1;
		pthread_mutex_unlock(&batch_lock);
		return 0;
	}
	unlink_batch(b);
	pthread_mutex_unlock(&batch_lock);
	batch_destroy(b);
	return 0;
}

void
kvt_batches_reap_zombies(void)
{
	struct kvt_batch *b, *next, *dead = NULL;

	if (pthread_mutex_trylock(&batch_lock) != 0)
		return;
	for (b = batches; b != NULL; b = next) {
		next = b->next;
		if (!b->zombie)
			continue;
		kvt_batch_pump(b);
		if (reap(b)) {
			unlink_batch(b);
			b->next = dead;
			dead = b;
		}
	}
	pthread_mutex_unlock(&batch_lock);
	for (b = dead; b != NULL; b = next) {
		next = b->next;
		batch_destroy(b);
	}
}

/*
 * A striped submission without tails reports each request as it settles;
 * the lcore stores the submission's done word right after the last one.
 * Once every request of the batch was seen settled, wait out that store
 * (nanoseconds, unless the lcore was descheduled then) so that a reset
 * right after kvt_status() succeeds.
 * @return 1 when every submission is finished.
 */
static int
reap_settled(struct kvt_batch *b)
{
	uint64_t hz = rte_get_tsc_hz(), t0 = rte_get_tsc_cycles();
	uint64_t deadline = t0 + hz / 1000 * kvt_eng->o.timeout_ms;

	if (reap(b))
		return 1;
	if (pending_reqs(b) != 0)
		return 0;
	/* An lcore descheduled at that moment delays the store: yield to
	 * it after a short spin. */
	while (!reap(b)) {
		if (rte_get_tsc_cycles() > deadline)
			return 0;
		if (rte_get_tsc_cycles() - t0 > hz / 10000)
			sched_yield();
		else
			rte_pause();
	}
	return 1;
}

int
kvt_batch_reset(struct kvt_batch *b)
{
	if (!batch_ok(b))
		return -EINVAL;
	kvt_batch_pump(b);
	if (!reap_settled(b))
		return -EBUSY;
	if (b->claimed) {
		kvt_rcu_synchronize();
		b->claimed = 0;
	}
	b->used = 0;
	b->nsubs = 0;
	b->reap = 0;
	b->nfinished = 0;
	b->pump = 0;
	b->nclaims = 0;
	/* Every done word was seen, so every push before it is done. */
	__atomic_store_n(&b->settled, NULL, __ATOMIC_RELAXED);
	b->unsettled = NULL;
	b->open_reqs = 0;
	__atomic_store_n(&b->settled_reqs, 0, __ATOMIC_RELAXED);
	b->reaped_reqs = 0;
	kvt_arena_reset(b);
	return 0;
}

/* Settle what was never queued, as cancelled. */
static void
cancel_unqueued(struct kvt_batch *b)
{
	struct kvt_desc *d;
	struct kvt_sub *s;
	uint32_t i;

	while ((d = b->stash) != NULL) {
		b->stash = d->next;
		kvt_desc_finish(d, -ECANCELED);
	}
	b->stash_tail = NULL;
	for (i = b->pump; i < b->nsubs; i++) {
		s = sub_at(b, i);
		for (; s->cur.req < s->first + s->n; s->cur.req++)
			set_err(&b->req[s->cur.req].err, -ECANCELED);
		s->cur.left = 0;
		set_err(&s->err, -ECANCELED);
	}
	b->pump = b->nsubs;
	/* Lcores and ports are stopped: nobody else writes done words. */
	for (i = b->reap; i < b->nsubs; i++) {
		s = sub_at(b, i);
		if (!done_word_set(s)) {
			set_err(&s->err, -ECANCELED);
			sub_publish(s);
		}
		finish(b, s);
	}
}

void
kvt_batches_cancel_all(void)
{
	struct kvt_batch *b, *next, *dead = NULL;

	pthread_mutex_lock(&batch_lock);
	for (b = batches; b != NULL; b = next) {
		next = b->next;
		cancel_unqueued(b);
		b->reap = b->nsubs;
		if (b->zombie) {
			unlink_batch(b);
			b->next = dead;
			dead = b;
		}
	}
	pthread_mutex_unlock(&batch_lock);
	for (b = dead; b != NULL; b = next) {
		next = b->next;
		batch_destroy(b);
	}
}

