/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of lib/'s pure parts, without EAL, an engine or a peer: the
 * range map (rangemap.c), the overlap guard (overlap.c) and the striping
 * choice (stripe.c).  Each is checked against a plain model, exhaustively
 * over small inputs or over many seeded random ones.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "kvt_private.h"
#include "test_common.h"

/* A small deterministic generator (xorshift64*), so a failure repeats. */
static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* ---- range map ---- */

#define U 24			/* addresses 0..U-1 */

/* The model: which range (its base + 1, 0: none) holds each address. */
struct rm_model {
	unsigned int owner[U];
	uint64_t len[U];	/* by base */
};

static void
rm_check(const struct kvt_rangemap *m, const struct rm_model *mo)
{
	uint64_t a, len, base;
	void *v, *want;
	int hit;

	for (a = 0; a < U; a++) {
		for (len = 1; a + len <= U; len++) {
			/* find: the range holding all of [a, a + len). */
			want = NULL;
			if (mo->owner[a] != 0) {
				base = mo->owner[a] - 1;
				if (a + len <= base + mo->len[base])
					want = (void *)(uintptr_t)(base + 1);
			}
			v = kvt_rangemap_find(m, a, len);
			cr_assert_eq(v, want, "find(%" PRIu64 ", %" PRIu64 ")",
				     a, len);
			/* overlaps: any range meets [a, a + len). */
			hit = 0;
			for (base = a; base < a + len; base++)
				hit |= mo->owner[base] != 0;
			cr_assert_eq(!!kvt_rangemap_overlaps(m, a, len), hit,
				     "overlaps(%" PRIu64 ", %" PRIu64 ")", a, len);
		}
	}
}

struct walk_state {
	uint64_t last;
	unsigned int n;
	unsigned int stop_at;
};

static int
walk_fn(void *val, void *arg)
{
	struct walk_state *w = arg;
	uint64_t base = (uint64_t)(uintptr_t)val - 1;

	cr_assert(w->n == 0 || base > w->last, "walk out of order");
	w->last = base;
	return ++w->n == w->stop_at;
}

/* Random inserts and removes over U addresses, each checked against the
 * model for every (address, length) after every change. */
Test(rangemap, random_changes_match_the_model, .timeout = 60)
{
	struct kvt_rangemap m = { 0 };
	struct rm_model mo;
	uint64_t s = 0x9e3779b97f4a7c15ull, base, len, a;
	unsigned int step, ranges = 0, i;
	struct walk_state w;
	void *val;
	int ret, free_span;

	memset(&mo, 0, sizeof(mo));
	for (step = 0; step < 3000; step++) {
		base = rnd(&s) % U;
		if (rnd(&s) % 2 == 0) {
			len = 1 + rnd(&s) % 5;
			if (base + len > U)
				len = U - base;
			free_span = 1;
			for (a = base; a < base + len; a++)
				free_span &= mo.owner[a] == 0;
			ret = kvt_rangemap_insert(&m, base, len,
						  (void *)(uintptr_t)(base + 1));
			cr_assert_eq(ret, free_span ? 0 : -EEXIST,
				     "insert(%" PRIu64 ", %" PRIu64 ")", base, len);
			if (ret == 0) {
				for (a = base; a < base + len; a++)
					mo.owner[a] = (unsigned int)base + 1;
				mo.len[base] = len;
				ranges++;
			}
		} else {
			ret = kvt_rangemap_remove(&m, base, &val);
			if (mo.owner[base] == base + 1) {
				cr_assert_eq(ret, 0);
				cr_assert_eq(val, (void *)(uintptr_t)(base + 1));
				for (a = base; a < base + mo.len[base]; a++)
					mo.owner[a] = 0;
				ranges--;
			} else {
				cr_assert_eq(ret, -ENOENT, "remove(%" PRIu64 ")", base);
			}
		}
		cr_assert_eq(m.n, ranges);
		rm_check(&m, &mo);
		memset(&w, 0, sizeof(w));
		cr_assert_eq(kvt_rangemap_walk(&m, walk_fn, &w), 0);
		cr_assert_eq(w.n, ranges);
	}
	/* A walk stops where its function says so. */
	if (ranges >= 2) {
		memset(&w, 0, sizeof(w));
		w.stop_at = 2;
		cr_assert_eq(kvt_rangemap_walk(&m, walk_fn, &w), 1);
		cr_assert_eq(w.n, 2);
	}
	for (i = 0; i < U; i++)
		if (mo.owner[i] == i + 1)
			cr_assert_eq(kvt_rangemap_remove(&m, i, &val), 0);
	cr_assert_eq(m.n, 0);
	cr_assert_null(kvt_rangemap_find(&m, 0, 1));
	kvt_rangemap_clear(&m);
}

/* Ranges at the top of the address space, and lengths that would wrap,
 * find nothing they do not hold. */
Test(rangemap, edges_of_the_address_space)
{
	struct kvt_rangemap m = { 0 };
	uint64_t top = UINT64_MAX - 4095;
	void *val;

	cr_assert_eq(kvt_rangemap_insert(&m, top, 4095, &m), 0);
	cr_assert_eq(kvt_rangemap_find(&m, top, 4095), &m);
	cr_assert_eq(kvt_rangemap_find(&m, UINT64_MAX - 1, 1), &m);
	cr_assert_null(kvt_rangemap_find(&m, top, 4096));
	cr_assert_null(kvt_rangemap_find(&m, UINT64_MAX - 1, UINT64_MAX));
	cr_assert_null(kvt_rangemap_find(&m, top - 1, 2));
	cr_assert_eq(kvt_rangemap_insert(&m, top - 1, 2, &m), -EEXIST);
	cr_assert_eq(kvt_rangemap_insert(&m, 0, 1, &val), 0);
	cr_assert_eq(kvt_rangemap_find(&m, 0, 1), &val);
	cr_assert_null(kvt_rangemap_find(&m, 1, 1));
	cr_assert_eq(kvt_rangemap_remove(&m, 1, &val), -ENOENT);
	/* No empty range, none that wraps. */
	cr_assert_eq(kvt_rangemap_insert(&m, 4096, 0, &val), -EINVAL);
	cr_assert_eq(kvt_rangemap_insert(&m, UINT64_MAX - 1, 4, &val), -EINVAL);
	cr_assert_eq(m.n, 2);
	kvt_rangemap_clear(&m);
}

/* ---- overlap guard ---- */

/* A claim's ranges: sorted, disjoint, inside 0..9. */
struct claim_set {
	struct kvt_range r[3];
	unsigned int n;
};

static struct kvt_rimp claim_region;	/* named in the guard's log only */

/* Every set of at most two ranges over 0..8 (ranges of length >= 1). */
static unsigned int
claim_sets(struct claim_set *out, unsigned int max)
{
	unsigned int n = 0, a, b, c, d;

	for (a = 0; a < 8; a++) {
		for (b = a + 1; b <= 8; b++) {
			if (n < max)
				out[n++] = (struct claim_set){
					.r = { { a, b, &claim_region } }, .n = 1 };
			for (c = b + 1; c < 8; c++)
				for (d = c + 1; d <= 8; d++)
					if (n < max)
						out[n++] = (struct claim_set){
							.r = { { a, b, &claim_region },
							       { c, d, &claim_region } },
							.n = 2 };
		}
	}
	return n;
}

static int
sets_meet(const struct claim_set *x, const struct claim_set *y)
{
	unsigned int i, j;

	for (i = 0; i < x->n; i++)
		for (j = 0; j < y->n; j++)
			if (x->r[i].lo < y->r[j].hi && y->r[j].lo < x->r[i].hi)
				return 1;
	return 0;
}

/* Every pair of claims of up to two ranges: the second is refused
 * exactly when some byte of it is in the first, and a dropped claim
 * refuses nothing. */
Test(overlap, every_pair_of_small_claims, .timeout = 60)
{
	static struct claim_set sets[1024];
	unsigned int n = claim_sets(sets, DIM(sets)), i, j;
	struct kvt_claims *t = NULL;
	struct kvt_claim a, b;

	cr_assert_eq(n, 162);	/* 36 single ranges, 126 pairs */
	cr_assert_lt(n, DIM(sets));
	for (i = 0; i < n; i++) {
		for (j = 0; j < n; j++) {
			cr_assert_eq(kvt_claim_take(&t, &a, sets[i].r, sets[i].n), 0);
			cr_assert_eq(kvt_claim_take(&t, &b, sets[j].r, sets[j].n),
				     sets_meet(&sets[i], &sets[j]) ? -EBUSY : 0,
				     "sets %u and %u", i, j);
			kvt_claim_drop(&b);	/* a refused claim drops as nothing */
			kvt_claim_drop(&a);
			cr_assert_eq(kvt_claim_take(&t, &b, sets[j].r, sets[j].n), 0);
			kvt_claim_drop(&b);
		}
	}
	kvt_claims_free(t);
}

/* Many claims in flight: a new one is checked against each of them, and
 * the table holds 1024 at most (the 1025th is refused, not lost). */
Test(overlap, many_in_flight_and_the_table_limit)
{
	static struct kvt_range r[1100];
	static struct kvt_claim c[1100];
	struct kvt_claims *t = NULL;
	struct kvt_range mid = { 2 * 500 + 1, 2 * 500 + 2, &claim_region };
	struct kvt_claim x;
	unsigned int i;

	for (i = 0; i < 1024; i++) {
		r[i] = (struct kvt_range){ 2 * i, 2 * i + 1, &claim_region };
		cr_assert_eq(kvt_claim_take(&t, &c[i], &r[i], 1), 0, "claim %u", i);
	}
	/* Between two claims: fits; over one of them: refused. */
	cr_assert_eq(kvt_claim_take(&t, &x, &mid, 1), -EBUSY, "the table is full");
	kvt_claim_drop(&c[7]);
	cr_assert_eq(kvt_claim_take(&t, &x, &mid, 1), 0);
	kvt_claim_drop(&x);
	mid = (struct kvt_range){ 2 * 600, 2 * 600 + 1, &claim_region };
	cr_assert_eq(kvt_claim_take(&t, &x, &mid, 1), -EBUSY);
	for (i = 0; i < 1024; i++)
		kvt_claim_drop(&c[i]);
	cr_assert_eq(kvt_claim_take(&t, &x, &mid, 1), 0);
	kvt_claim_drop(&x);
	kvt_claims_free(t);
}

struct racer {
	struct kvt_claims **t;
	struct kvt_range r;
	pthread_barrier_t *go;
	unsigned int rounds;
	unsigned int won;	/* rounds this thread's claim was taken */
	uint8_t *both;		/* per round: how many won */
};

static void *
racer_main(void *arg)
{
	struct racer *k = arg;
	struct kvt_claim c;
	unsigned int i;

	for (i = 0; i < k->rounds; i++) {
		pthread_barrier_wait(k->go);
		if (kvt_claim_take(k->t, &c, &k->r, 1) == 0) {
			__atomic_fetch_add(&k->both[i], 1, __ATOMIC_RELAXED);
			k->won++;
		}
		pthread_barrier_wait(k->go);	/* both looked */
		kvt_claim_drop(&c);
		pthread_barrier_wait(k->go);	/* both dropped */
	}
	return NULL;
}

/* Two threads claim overlapping ranges at the same moment, many times:
 * never are both taken (both may be refused). */
Test(overlap, racing_claims_never_both_win, .timeout = 60)
{
	const unsigned int rounds = 20000;
	struct kvt_range first = { 0, 1, &claim_region };
	struct kvt_claims *t = NULL;
	pthread_barrier_t go;
	struct kvt_claim c;
	struct racer k[2];
	uint8_t *both = calloc(rounds, 1);
	unsigned int i, some = 0;
	pthread_t th[2];

	pthread_barrier_init(&go, NULL, 2);
	for (i = 0; i < 2; i++) {
		k[i] = (struct racer){ .t = &t, .go = &go, .rounds = rounds,
				       .both = both,
				       .r = { 100 + i, 200 + i, &claim_region } };
	}
	/* The region's table exists before the race. */
	cr_assert_eq(kvt_claim_take(&t, &c, &first, 1), 0);
	kvt_claim_drop(&c);
	for (i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, racer_main, &k[i]), 0);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < rounds; i++) {
		cr_assert_leq(both[i], 1, "round %u: both overlapping claims taken", i);
		some += both[i];
	}
	cr_assert_gt(some, rounds / 2, "most rounds someone wins (%u of %u)",
		     some, rounds);
	cr_log_info("%u rounds: %u won by one, %u by the other, %u by none",
		    rounds, k[0].won, k[1].won, rounds - some);
	pthread_barrier_destroy(&go);
	free(both);
	kvt_claims_free(t);
}

/* ---- striping ---- */

#define NPORTS 4

static struct kvt_engine *saved_eng;
static struct kvt_port sports[NPORTS];
static struct kvt_pmd_ops sops = { .stripe_cap = 64u << 20 };
static struct kvt_pmd spmd = { .name = "unit", .ops = &sops };

static void
stripe_setup(void)
{
	unsigned int i;

	saved_eng = kvt_eng;
	kvt_eng = calloc(1, sizeof(*kvt_eng));
	cr_assert_not_null(kvt_eng);
	kvt_eng->o.slice = 1u << 20;
	for (i = 0; i < NPORTS; i++) {
		memset(&sports[i], 0, sizeof(sports[i]));
		sports[i].id = (uint16_t)i;
		sports[i].pmd = &spmd;
		sports[i].lcore = 1000;	/* not this thread */
		kvt_eng->ports[i] = &sports[i];
	}
	kvt_eng->nports = NPORTS;
}

static void
stripe_teardown(void)
{
	free(kvt_eng);
	kvt_eng = saved_eng;
}

/* What the model says a port may hold (stripe.c's port_cap). */
static uint64_t
model_cap(const struct kvt_port *p)
{
	uint64_t h = 10000, slice2 = 2ull * kvt_eng->o.slice, c;

	if (p->rate_bpus == 0)
		return sops.stripe_cap;
	if (2 * p->rate_gap_us > h)
		h = 2 * p->rate_gap_us;
	c = p->rate_bpus * h;
	if (c < slice2)
		c = slice2;
	return c < sops.stripe_cap ? c : sops.stripe_cap;
}

/* Seeded random port states: the pick is the port where the slice would
 * finish first, ports of unknown rate counting as the fastest; every
 * 64th goes round the mask; space and drain time follow the caps. */
Test(stripe, pick_space_and_drain_match_the_model, .init = stripe_setup,
     .fini = stripe_teardown)
{
	uint64_t s = 12345, best_cost, cost, fastest, seq, inflight_before;
	unsigned int round, i, want, got;
	uint32_t mask, space, len;

	for (round = 0; round < 20000; round++) {
		for (i = 0; i < NPORTS; i++) {
			sports[i].rate_bpus = rnd(&s) % 4 == 0 ? 0 : 1 + rnd(&s) % 50000;
			sports[i].rate_gap_us = rnd(&s) % 30000;
			sports[i].inflight_bytes = rnd(&s) % (96ull << 20);
		}
		mask = (uint32_t)(1 + rnd(&s) % ((1u << NPORTS) - 1));
		len = (uint32_t)(1 + rnd(&s) % (4u << 20));
		seq = rnd(&s) % 1000;
		/* space */
		want = 0;
		for (i = 0; i < NPORTS; i++)
			if ((mask & (1u << i)) &&
			    sports[i].inflight_bytes < model_cap(&sports[i]))
				want |= 1u << i;
		space = kvt_stripe_space(mask);
		cr_assert_eq(space, want, "round %u: space %#x, model %#x", round,
			     space, want);
		/* drain: 0 while a port has space or an unknown rate, else
		 * the soonest a port drains. */
		if (space != 0) {
			cr_assert_eq(kvt_stripe_drain_us(mask), 0);
		} else {
			uint64_t us = UINT64_MAX;

			for (i = 0; i < NPORTS; i++) {
				if (!(mask & (1u << i)))
					continue;
				if (sports[i].rate_bpus == 0) {
					us = 0;
					break;
				}
				cost = sports[i].inflight_bytes / sports[i].rate_bpus;
				us = cost < us ? cost : us;
			}
			cr_assert_eq(kvt_stripe_drain_us(mask), us);
		}
		/* pick */
		if ((mask & (mask - 1)) == 0) {
			want = (unsigned int)__builtin_ctz(mask);
		} else if (seq % 64 == 63) {
			unsigned int k = (unsigned int)((seq / 64) %
				(unsigned int)__builtin_popcount(mask));

			for (want = 0; !(mask & (1u << want)) || k-- > 0; want++)
				;
		} else {
			fastest = 1;
			for (i = 0; i < NPORTS; i++)
				if ((mask & (1u << i)) && sports[i].rate_bpus > fastest)
					fastest = sports[i].rate_bpus;
			best_cost = UINT64_MAX;
			want = 0;
			for (i = 0; i < NPORTS; i++) {
				if (!(mask & (1u << i)))
					continue;
				cost = (sports[i].inflight_bytes + len) * 64 /
					(sports[i].rate_bpus != 0 ?
					 sports[i].rate_bpus : fastest);
				if (cost < best_cost) {
					best_cost = cost;
					want = i;
				}
			}
		}
		inflight_before = sports[want].inflight_bytes;
		got = kvt_stripe_pick(mask, len, seq);
		cr_assert_eq(got, want, "round %u: picked %u, model %u", round,
			     got, want);
		/* The pick counts the slice in flight on its port. */
		cr_assert_eq(sports[got].inflight_bytes, inflight_before + len);
	}
}

/* Slices picked and drained at each port's rate: the bytes split in
 * proportion to the rates (4:2:1:1), within a few percent. */
Test(stripe, split_follows_the_rates, .init = stripe_setup,
     .fini = stripe_teardown)
{
	static const uint64_t rate[NPORTS] = { 4000, 2000, 1000, 1000 };
	uint64_t bytes[NPORTS] = { 0 }, total = 0, seq, d;
	const uint32_t len = 256u << 10;
	unsigned int i, p;
	double share;

	for (i = 0; i < NPORTS; i++)
		sports[i].rate_bpus = rate[i];
	/* Each tick every port finishes rate[i] * 100 us of bytes. */
	for (seq = 0; seq < 200000; seq++) {
		if (kvt_stripe_space(0xf) == 0) {
			for (i = 0; i < NPORTS; i++) {
				d = rate[i] * 100;
				sports[i].inflight_bytes -= d < sports[i].inflight_bytes ?
					d : sports[i].inflight_bytes;
			}
			continue;
		}
		p = kvt_stripe_pick(kvt_stripe_space(0xf), len, seq);
		bytes[p] += len;
		total += len;
	}
	for (i = 0; i < NPORTS; i++) {
		share = (double)bytes[i] / (double)total;
		cr_log_info("port %u: %.3f of the bytes", i, share);
		cr_assert_float_eq(share, (double)rate[i] / 8000.0, 0.03,
				   "port %u: %.3f of the bytes, rate share %.3f",
				   i, share, (double)rate[i] / 8000.0);
	}
}
