/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Stress tests for the lock-free parts, in the spirit of DPDK's
 * test_ring_stress and test_rcu_qsbr: several threads, millions of
 * operations, and an invariant checked on every one.
 *   rcu      a reader never sees an object its writer freed;
 *   overlap  two claims that overlap are never both held;
 *   inbox    every notification arrives exactly once;
 *   stripe   concurrent picks lose no byte and follow the rates;
 *   rangemap a reader finds every range that stays, never one removed
 *            before it looked, and the map agrees with a plain model.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef KVT_TEST_LITE
#include "lite.h"
#else
#include <criterion/criterion.h>
#endif

#include "kvt.h"
#include "kvt_private.h"
#include "rangemap.h"
#include "test_common.h"

#include <rte_pause.h>

#define THREADS 3

static volatile int stop;

/* Worker threads record the first broken invariant here (Criterion's
 * assertions belong to the test's own thread) and everyone stops. */
static char failure[256];
static int failed;

#define FAIL(...) do {							\
	if (__atomic_exchange_n(&failed, 1, __ATOMIC_ACQ_REL) == 0)	\
		snprintf(failure, sizeof(failure), __VA_ARGS__);	\
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);			\
} while (0)

/* Each case starts its workers with a clean slate: under lite.h every
 * case runs in this one process, after the others stopped theirs. */
static void
workers_reset(void)
{
	__atomic_store_n(&failed, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
}

static void
check_workers(void)
{
	cr_assert_eq(__atomic_load_n(&failed, __ATOMIC_ACQUIRE), 0, "%s", failure);
}

/* ---- rcu ---- */

struct gen {
	uint64_t alive;		/* 0xa11ce while published or readable */
	uint64_t n;
};

static struct gen *published;
static unsigned int readers_up;

static void *
rcu_reader(void *arg)
{
	uint64_t *reads = arg, last = 0;
	struct gen *g;
	unsigned int tok, k;

	__atomic_fetch_add(&readers_up, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		tok = kvt_rcu_read_lock();
		g = __atomic_load_n(&published, __ATOMIC_ACQUIRE);
		/* Look twice, a moment apart: the window a writer that did not
		 * wait for us would free the object in. */
		if (g->alive != 0xa11ce)
			FAIL("a reader saw object %" PRIu64 " retired", g->n);
		for (k = 0; k < 64; k++)
			rte_pause();
		if (g->alive != 0xa11ce)
			FAIL("object %" PRIu64 " was retired under a reader", g->n);
		if (g->n < last)
			FAIL("generations went back: %" PRIu64 " after %" PRIu64,
				 g->n, last);
		last = g->n;
		kvt_rcu_read_unlock(tok);
		/* Only this thread writes it; the writer watches it. */
		__atomic_store_n(reads, *reads + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static uint64_t
reads_sum(const uint64_t *reads)
{
	uint64_t total = 0;
	unsigned int i;

	for (i = 0; i < THREADS; i++)
		total += __atomic_load_n(&reads[i], __ATOMIC_RELAXED);
	return total;
}

Test(stress, rcu_readers_never_see_freed, .timeout = 120)
{
	pthread_t th[THREADS];
	uint64_t reads[THREADS] = { 0 }, total = 0, t0;
	struct gen *g, *old;
	unsigned int i, n;

	workers_reset();
	published = calloc(1, sizeof(*published));
	published->alive = 0xa11ce;
	for (i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, rcu_reader, &reads[i]);
	while (__atomic_load_n(&readers_up, __ATOMIC_ACQUIRE) < THREADS)
		usleep(1000);
	/* 3000 replacements at least, and on until the readers made 100 000
	 * reads among them (a sanitizer slows them ten times), 60 s at most. */
	t0 = tc_now_us();
	for (i = 1; (i <= 3000 || reads_sum(reads) <= 100000) && !failed &&
	     tc_now_us() - t0 < 60000000; i++) {
		g = malloc(sizeof(*g));
		g->alive = 0xa11ce;
		g->n = i;
		old = __atomic_exchange_n(&published, g, __ATOMIC_ACQ_REL);
		kvt_rcu_synchronize();
		/* No reader may still hold it: poison, then free. */
		old->alive = 0xdead;
		free(old);
	}
	n = i - 1;
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		total += reads[i];
	}
	check_workers();
	cr_log_info("rcu: %u replacements, %" PRIu64 " reads", n, total);
	cr_assert_gt(total, 100000, "the readers hardly ran");
	free(published);
}

/* ---- overlap ---- */

#define CELLS 4096		/* the region, in 64-byte cells */
#define CELL 64

static struct kvt_claims *claims;
static uint8_t owner[CELLS];	/* who holds a cell: 0 free, else thread + 1 */

struct ov_arg {
	unsigned int id;
	uint64_t taken, refused;
};

#define SETS 64

static void *
overlap_worker(void *arg)
{
	struct ov_arg *a = arg;
	unsigned int seed = a->id * 7919 + 1, i, k, n, lo, len;
	/* Other threads may still read a dropped claim and its ranges in
	 * their RCU read sections: like a batch, a worker reuses that
	 * memory only after kvt_rcu_synchronize(), once per SETS claims. */
	struct kvt_range rs[SETS][3], *r;
	struct kvt_claim cs[SETS], *cp;
	uint8_t want;
	unsigned int tok;
	int ret;

	for (i = 0; i < 300000 && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); i++) {
		if (i % SETS == 0)
			kvt_rcu_synchronize();
		r = rs[i % SETS];
		cp = &cs[i % SETS];
		/* One to three sorted, disjoint ranges. */
		n = 1 + rand_r(&seed) % 3;
		lo = rand_r(&seed) % (CELLS / 2);
		for (k = 0; k < n; k++) {
			len = 1 + rand_r(&seed) % 16;
			if (lo + len > CELLS)
				break;
			r[k] = (struct kvt_range){ .lo = (uint64_t)lo * CELL,
						   .hi = (uint64_t)(lo + len) * CELL };
			lo += len + 1 + rand_r(&seed) % 64;
		}
		n = k;
		if (n == 0)
			continue;
		/* Taken inside a read section, as submit does. */
		tok = kvt_rcu_read_lock();
		ret = kvt_claim_take(&claims, cp, r, n);
		kvt_rcu_read_unlock(tok);
		if (ret != 0) {
			a->refused++;
			continue;
		}
		a->taken++;
		/* Held: every cell is ours alone. */
		for (k = 0; k < n; k++)
			for (lo = (unsigned int)(r[k].lo / CELL); lo < r[k].hi / CELL; lo++) {
				want = 0;
				if (!__atomic_compare_exchange_n(&owner[lo], &want,
								 (uint8_t)(a->id + 1), false,
								 __ATOMIC_ACQ_REL,
								 __ATOMIC_ACQUIRE))
					FAIL("cell %u claimed twice (by %u and %u)", lo,
					     want - 1, a->id);
			}
		for (k = 0; k < n; k++)
			for (lo = (unsigned int)(r[k].lo / CELL); lo < r[k].hi / CELL; lo++)
				__atomic_store_n(&owner[lo], 0, __ATOMIC_RELEASE);
		kvt_claim_drop(cp);
	}
	return NULL;
}

Test(stress, overlap_claims_exclusive, .timeout = 120)
{
	struct ov_arg a[THREADS];
	pthread_t th[THREADS];
	struct kvt_range r = { .lo = 0, .hi = CELLS * CELL };
	struct kvt_claim c;
	uint64_t taken = 0, refused = 0;
	unsigned int i;

	workers_reset();
	/* The workers' first claims race to make the table. */
	claims = NULL;
	for (i = 0; i < THREADS; i++) {
		a[i] = (struct ov_arg){ .id = i };
		pthread_create(&th[i], NULL, overlap_worker, &a[i]);
	}
	for (i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		taken += a[i].taken;
		refused += a[i].refused;
	}
	check_workers();
	cr_log_info("overlap: %" PRIu64 " claims held, %" PRIu64 " refused", taken,
		    refused);
	cr_assert_gt(taken, 100000);
	/* Nothing left behind: the whole region can be claimed now. */
	cr_assert_eq(kvt_claim_take(&claims, &c, &r, 1), 0, "a claim was not dropped");
	kvt_claim_drop(&c);
	kvt_claims_free(claims);
	claims = NULL;
}

/* ---- the notification inbox ---- */

#define MSGS 1000000u

struct msg {
	uint32_t producer;
	uint32_t n;
};

static struct kvt_inbox *inbox;
static uint8_t *seen;	/* [producer][n] */

static void *
producer(void *arg)
{
	struct msg m = { .producer = (uint32_t)(uintptr_t)arg };

	for (m.n = 0; m.n < MSGS && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); m.n++)
		while (kvt_inbox_push(inbox, &m, sizeof(m)) == -ENOBUFS &&
		       !__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
			;
	return NULL;
}

static void *
consumer(void *arg)
{
	struct kvt_notify_msg out[16];
	uint64_t *got = arg;
	struct msg m;
	int n, i;

	while (__atomic_load_n(got, __ATOMIC_RELAXED) < 2 * MSGS &&
	       !__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		n = kvt_notify_poll(out, 16);
		for (i = 0; i < n; i++) {
			if (out[i].len != sizeof(m))
				FAIL("a message of %u bytes", out[i].len);
			memcpy(&m, out[i].data, sizeof(m));
			if (m.producer > 1 || m.n >= MSGS ||
			    __atomic_fetch_add(&seen[m.producer * MSGS + m.n], 1,
					       __ATOMIC_RELAXED) != 0)
				FAIL("message %u/%u delivered twice or forged",
					 m.producer, m.n);
		}
		__atomic_fetch_add(got, (uint64_t)n, __ATOMIC_RELAXED);
	}
	return NULL;
}

Test(stress, inbox_exactly_once, .timeout = 300)
{
	pthread_t pr[2], co[2];
	uint64_t got = 0;
	size_t sz = kvt_inbox_size(256);
	unsigned int i;

	workers_reset();
	cr_assert_geq(tc_engine_init("--kvt-pmd null"), 0);
	inbox = aligned_alloc(64, (sz + 63) & ~(size_t)63);
	seen = calloc(2, MSGS);
	kvt_inbox_init(inbox, 256);
	cr_assert_eq(kvt_inbox_attach(inbox, "stress"), 0);
	for (i = 0; i < 2; i++) {
		pthread_create(&co[i], NULL, consumer, &got);
		pthread_create(&pr[i], NULL, producer, (void *)(uintptr_t)i);
	}
	for (i = 0; i < 2; i++)
		pthread_join(pr[i], NULL);
	/* Everything pushed must come out (bounded wait). */
	{
		uint64_t t0 = tc_now_us();

		while (__atomic_load_n(&got, __ATOMIC_RELAXED) < 2 * MSGS &&
		       tc_now_us() - t0 < 30000000)
			usleep(1000);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < 2; i++)
		pthread_join(co[i], NULL);
	check_workers();
	cr_assert_eq(got, 2 * MSGS, "%" PRIu64 " of %u messages arrived", got, 2 * MSGS);
	for (i = 0; i < 2 * MSGS; i++)
		cr_assert_eq(seen[i], 1, "message %u/%u lost", i / MSGS, i % MSGS);
	kvt_inbox_detach(inbox);
	kvt_fini();
	free(seen);
	free(inbox);
}

/* ---- striping ---- */

static void *
picker(void *arg)
{
	uint64_t *bytes = arg;
	unsigned int i;

	for (i = 0; i < 1000000; i++) {
		kvt_stripe_pick(0x7, 4096, i);
		*bytes += 4096;
	}
	return NULL;
}

Test(stress, stripe_picks_follow_rates, .timeout = 120)
{
	static const uint64_t rate[3] = { 100, 200, 400 };
	uint64_t bytes[THREADS] = { 0 }, total = 0, sum = 0;
	pthread_t th[THREADS];
	struct kvt_port *p;
	unsigned int i;
	double share;

	workers_reset();
	cr_assert_geq(tc_engine_init("--kvt-pmd null,ports=3"), 0);
	cr_assert_eq(kvt_port_count(), 3);
	for (i = 0; i < 3; i++) {
		p = kvt_eng->ports[i];
		p->rate_bpus = rate[i];
		p->inflight_bytes = 0;
	}
	for (i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, picker, &bytes[i]);
	for (i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		total += bytes[i];
	}
	for (i = 0; i < 3; i++)
		sum += kvt_eng->ports[i]->inflight_bytes;
	cr_assert_eq(sum, total, "picks lost bytes: %" PRIu64 " of %" PRIu64, sum, total);
	/* Each port's share of the bytes follows its rate (1:2:4), give or
	 * take the 1/64 of picks that probe round-robin. */
	for (i = 0; i < 3; i++) {
		share = (double)kvt_eng->ports[i]->inflight_bytes / (double)total;
		cr_log_info("port %u (rate %" PRIu64 "): %.3f of the bytes", i, rate[i], share);
		cr_assert(share > rate[i] / 700.0 - 0.03 && share < rate[i] / 700.0 + 0.03,
			  "port %u took %.3f, its rate says %.3f", i, share, rate[i] / 700.0);
	}
	/* The lcores may take their settled bytes off meanwhile: none here,
	 * the null port saw no slice. */
	for (i = 0; i < 3; i++)
		kvt_eng->ports[i]->inflight_bytes = 0;
	kvt_fini();
}

/* ---- rangemap ---- */

#define RM_STABLE 512		/* always there: even slots */
#define RM_SLOTS (2 * RM_STABLE)
#define RM_SPAN 4096		/* slot i covers [i * SPAN, i * SPAN + len) */

struct rm_val {
	uint64_t alive;		/* 0xa11ce while the map may hand it out */
	unsigned int slot;
};

static struct kvt_rangemap rmap;
static struct rm_val rm_vals[RM_SLOTS];

static void *
rangemap_reader(void *arg)
{
	uint64_t *reads = arg, addr;
	unsigned int seed = (unsigned int)(uintptr_t)arg, tok, slot, k;
	struct rm_val *v;

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		slot = (unsigned int)rand_r(&seed) % RM_SLOTS;
		addr = (uint64_t)slot * RM_SPAN + (unsigned int)rand_r(&seed) % (1024 - 8);
		tok = kvt_rcu_read_lock();
		v = kvt_rangemap_find(&rmap, addr, 8);
		if (v == NULL && slot % 2 == 0)
			FAIL("stable slot %u not found", slot);
		if (v != NULL && v->slot != slot)
			FAIL("address of slot %u found slot %u", slot, v->slot);
		for (k = 0; v != NULL && k < 32; k++)
			rte_pause();
		if (v != NULL && v->alive != 0xa11ce)
			FAIL("slot %u was removed under a reader", slot);
		kvt_rcu_read_unlock(tok);
		__atomic_store_n(reads, *reads + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

Test(stress, rangemap_readers_see_whole_map, .timeout = 120)
{
	pthread_t th[THREADS];
	uint64_t reads[THREADS] = { 0 }, t0;
	unsigned int i, slot, seed = 7, changes = 0;
	void *v;

	workers_reset();
	for (i = 0; i < RM_SLOTS; i++) {
		rm_vals[i].slot = i;
		if (i % 2 == 0) {
			rm_vals[i].alive = 0xa11ce;
			cr_assert_eq(kvt_rangemap_insert(&rmap, (uint64_t)i * RM_SPAN,
							 1024, &rm_vals[i]), 0);
		}
	}
	for (i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, rangemap_reader, &reads[i]);
	/* Odd slots come and go: 20 000 changes at least, and on until the
	 * readers made 100 000 lookups, 60 s at most. */
	t0 = tc_now_us();
	while ((changes < 20000 || reads_sum(reads) <= 100000) && !failed &&
	       tc_now_us() - t0 < 60000000) {
		slot = ((unsigned int)rand_r(&seed) % RM_STABLE) * 2 + 1;
		if (rm_vals[slot].alive == 0xa11ce) {
			cr_assert_eq(kvt_rangemap_remove(&rmap, (uint64_t)slot * RM_SPAN,
							 &v), 0);
			cr_assert_eq(v, &rm_vals[slot]);
			/* Removal waited for the readers that could see it. */
			rm_vals[slot].alive = 0xdead;
		} else {
			rm_vals[slot].alive = 0xa11ce;
			cr_assert_eq(kvt_rangemap_insert(&rmap, (uint64_t)slot * RM_SPAN,
							 1024, &rm_vals[slot]), 0);
		}
		changes++;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	check_workers();
	cr_log_info("rangemap: %u changes, %" PRIu64 " lookups", changes,
		    reads_sum(reads));
	cr_assert_gt(reads_sum(reads), 100000, "the readers hardly ran");
	kvt_rangemap_clear(&rmap);
}

/* Random inserts and removes of ranges of random size, checked against a
 * byte-per-unit model: overlaps refused, lookups exact at every edge. */
#define MODEL_UNITS 4096

static int
count_one(void *v, void *arg)
{
	RTE_SET_USED(v);
	(*(unsigned int *)arg)++;
	return 0;
}

Test(stress, rangemap_matches_a_model, .timeout = 120)
{
	/* Unit u belongs to the range starting at owner_of[u] - 1 (0: none). */
	static uint16_t owner_of[MODEL_UNITS];
	static uint64_t len_of[MODEL_UNITS];
	struct kvt_rangemap m = { 0 };
	unsigned int seed = 11, op, u, n, live = 0, walked;
	uint64_t b, l, a, want_len;
	void *v;
	int ret, free_span;

	for (op = 0; op < 20000; op++) {
		b = (uint64_t)rand_r(&seed) % MODEL_UNITS;
		if (rand_r(&seed) % 3 != 0 || live == 0) {
			l = 1 + (uint64_t)rand_r(&seed) % 16;
			if (b + l > MODEL_UNITS)
				l = MODEL_UNITS - b;
			for (free_span = 1, u = (unsigned int)b; u < b + l; u++)
				free_span &= owner_of[u] == 0;
			ret = kvt_rangemap_insert(&m, b, l, (void *)(uintptr_t)(b + 1));
			cr_assert_eq(ret, free_span ? 0 : -EEXIST,
				     "insert [%" PRIu64 ", +%" PRIu64 "): %d", b, l, ret);
			if (ret == 0) {
				for (u = (unsigned int)b; u < b + l; u++)
					owner_of[u] = (uint16_t)(b + 1);
				len_of[b] = l;
				live++;
			}
		} else {
			n = owner_of[b];
			ret = kvt_rangemap_remove(&m, b, &v);
			if (n != b + 1) {
				cr_assert_eq(ret, -ENOENT);
				continue;
			}
			cr_assert_eq(ret, 0);
			cr_assert_eq((uintptr_t)v, n);
			for (u = (unsigned int)b; u < b + len_of[b]; u++)
				owner_of[u] = 0;
			live--;
		}
		/* A lookup inside a range, one to its very end, one past it. */
		a = (uint64_t)rand_r(&seed) % MODEL_UNITS;
		n = owner_of[a];
		v = kvt_rangemap_find(&m, a, 1);
		cr_assert_eq((uintptr_t)v, n, "find %" PRIu64 ": %p, model %u", a, v, n);
		if (n != 0) {
			want_len = (n - 1) + len_of[n - 1] - a;
			cr_assert_eq((uintptr_t)kvt_rangemap_find(&m, a, want_len), n);
			cr_assert_eq(kvt_rangemap_find(&m, a, want_len + 1), NULL);
		}
	}
	walked = 0;
	kvt_rangemap_walk(&m, count_one, &walked);
	cr_assert_eq(walked, live);
	cr_assert_eq(m.n, live);
	cr_log_info("rangemap model: %u ranges live at the end", live);
	kvt_rangemap_clear(&m);
}
