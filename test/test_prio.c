/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Priority classes between two engines (this process and a kvt-testpeer)
 * over shm: an urgent request submitted behind 1 GiB of bulk completes
 * first, while the bulk still moves; a request of the same class as the
 * bulk waits its turn (so the first check can fail); bulk keeps a share
 * of the lcore while urgent work waits; bytes arrive intact.  (Over tcp the
 * striping cap alone bounds what an urgent request waits behind, so an
 * ordering test there passes with one ring: test_tcp's lane test checks
 * the target's order, scripts/bench-priority measures what it buys.)
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <rte_errno.h>

#include "kvt.h"
#include "kvt_private.h"
#include "test_assert.h"
#include "test_common.h"

#define BULK (1024 * MiB)
#define SMALL 4096
#define WAIT_US (60ull * 1000 * 1000)

struct pair {
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src;
	struct kvt_mem *m;
	uint64_t base;		/* the peer's buffer: BULK, then the small ones */
};

static void
pair_up(struct pair *pr, const char *pmd, uint64_t len)
{
	char opts[128], buf[128];

	snprintf(opts, sizeof(opts), "--kvt-pmd %s", pmd);
	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_eq(tc_peer_start(&pr->t, opts), 0, "kvt-testpeer did not start");
	pr->src = kvt_mem_alloc(len, "cpu:0");
	cr_assert_not_null(pr->src);
	pr->m = kvt_mem_register(pr->src, len, "cpu:0", 0);
	cr_assert_not_null(pr->m, "register: %s", rte_strerror(rte_errno));
	cr_assert_eq(tc_peer_cmd(&pr->t, buf, sizeof(buf), "alloc 0 %" PRIu64 " w",
				 len), 0, "%s", buf);
	pr->base = strtoull(buf, NULL, 0);
	pr->p = tc_open_peer(&pr->t);
}

static void
pair_down(struct pair *pr)
{
	kvt_peer_close(pr->p);
	tc_peer_stop(&pr->t);
	kvt_fini();
}

/* The peer holds what we sent at off (len bytes). */
static void
arrived(struct pair *pr, uint64_t off, uint64_t len, const char *what)
{
	char buf[128];

	cr_assert_eq(tc_peer_cmd(&pr->t, buf, sizeof(buf), "sum 0 %" PRIu64 " %" PRIu64,
				 off, len), 0, "%s", buf);
	cr_assert_eq(strtoull(buf, NULL, 16), tc_hash(pr->src + off, len),
		     "%s: the bytes that arrived differ", what);
}

struct bulk_run {
	struct pair *pr;
	struct kvt_batch *b;
	int ret;
};

/* Drive the bulk batch to its end, as the application thread that owns
 * it would (kvt_wait pumps what waits for room). */
static void *
bulk_wait(void *arg)
{
	struct bulk_run *r = arg;

	r->ret = kvt_wait(r->b, WAIT_US);
	return NULL;
}

/*
 * 1 GiB of bulk in flight, then a small write of class prio: @return 1
 * when the small one settled while the bulk was still pending.
 */
static int
small_before_bulk(struct pair *pr, enum kvt_prio prio)
{
	struct kvt_submit_opts bo = { .priority = KVT_PRIO_BULK };
	struct kvt_submit_opts so = { .priority = prio };
	struct kvt_xfer big = { .op = KVT_OP_WRITE, .local = pr->src,
				.remote = pr->base, .len = BULK };
	struct kvt_xfer small = { .op = KVT_OP_WRITE, .local = pr->src + BULK,
				  .remote = pr->base + BULK, .len = SMALL };
	struct bulk_run r = { .pr = pr };
	struct kvt_batch *sb;
	pthread_t th;
	int first;

	r.b = kvt_batch_alloc(1);
	sb = kvt_batch_alloc(1);
	cr_assert(r.b != NULL && sb != NULL);
	tc_fill(pr->src, BULK + SMALL, (uint64_t)prio + 7);
	cr_assert_eq(kvt_submit(r.b, pr->p, &big, 1, &bo), 0);
	cr_assert_eq(pthread_create(&th, NULL, bulk_wait, &r), 0);
	cr_assert_eq(kvt_submit(sb, pr->p, &small, 1, &so), 0);
	cr_assert_eq(kvt_wait(sb, WAIT_US), 0, "the small write did not settle");
	first = kvt_status(r.b, 0) == -EINPROGRESS;
	cr_assert_eq(kvt_status(sb, 0), 0);
	pthread_join(th, NULL);
	cr_assert_eq(r.ret, 0, "the bulk write did not settle");
	cr_assert_eq(kvt_status(r.b, 0), 0);
	arrived(pr, BULK, SMALL, "small write");
	arrived(pr, BULK - 64 * MiB, 64 * MiB, "bulk write (its last 64 MiB)");
	kvt_batch_free(sb);
	kvt_batch_free(r.b);
	return first;
}

static void
overtakes(const char *pmd)
{
	struct pair pr;

	pair_up(&pr, pmd, BULK + SMALL);
	cr_assert(small_before_bulk(&pr, KVT_PRIO_URGENT),
		  "%s: an urgent write behind 1 GiB of bulk settled after it", pmd);
	/* The same small write in the bulk's own class waits its turn:
	 * the check above is about the class. */
	cr_assert_not(small_before_bulk(&pr, KVT_PRIO_BULK),
		      "%s: a bulk-class write overtook 1 GiB of bulk", pmd);
	pair_down(&pr);
}

Test(prio, urgent_overtakes_bulk_shm, .timeout = 180)
{
	overtakes("shm");
}

struct gate {
	uint32_t entered;
	uint32_t release;
};

/* A port call that holds the lcore until the test lets it go. */
static int
hold_lcore(struct kvt_port *port, void *arg)
{
	struct gate *g = arg;

	(void)port;
	__atomic_store_n(&g->entered, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&g->release, __ATOMIC_ACQUIRE))
		usleep(100);
	return 0;
}

static void *
holder(void *arg)
{
	return (void *)(intptr_t)kvt_port_call(kvt_port_get(0), hold_lcore,
					       arg, 20000);
}

/*
 * Bulk keeps a share while urgent work waits: with the lcore held, 1 GiB
 * of urgent writes (16 384 slices) and 4 MiB of bulk (64 slices) are
 * queued; once it runs, the bulk must settle while most of the urgent
 * bytes are still to be copied.  An lcore that served bulk only when no
 * urgent work waited would settle it last.
 */
Test(prio, bulk_keeps_a_share_of_the_lcore, .timeout = 120)
{
	struct kvt_submit_opts uo = { .priority = KVT_PRIO_URGENT };
	struct kvt_submit_opts bo = { .priority = KVT_PRIO_BULK };
	struct kvt_xfer u = { .op = KVT_OP_WRITE, .len = BULK };
	struct kvt_xfer bk = { .op = KVT_OP_WRITE, .len = 4 * MiB };
	struct kvt_batch *ub, *bb;
	struct gate g = { 0 };
	struct pair pr;
	pthread_t th;
	int urgent_left;

	pair_up(&pr, "shm", BULK + 4 * MiB);
	u.local = pr.src;
	u.remote = pr.base;
	bk.local = pr.src + BULK;
	bk.remote = pr.base + BULK;
	tc_fill(pr.src, BULK + 4 * MiB, 5);
	ub = kvt_batch_alloc(1);
	bb = kvt_batch_alloc(1);
	cr_assert_eq(pthread_create(&th, NULL, holder, &g), 0);
	while (!__atomic_load_n(&g.entered, __ATOMIC_ACQUIRE))
		usleep(100);
	cr_assert_eq(kvt_submit(ub, pr.p, &u, 1, &uo), 0);
	cr_assert_eq(kvt_submit(bb, pr.p, &bk, 1, &bo), 0);
	__atomic_store_n(&g.release, 1, __ATOMIC_RELEASE);
	cr_assert_eq(kvt_wait(bb, WAIT_US), 0, "the bulk write did not settle");
	urgent_left = kvt_poll(ub);
	cr_assert_eq(kvt_status(bb, 0), 0);
	cr_assert_eq(kvt_wait(ub, WAIT_US), 0);
	cr_assert_eq(kvt_status(ub, 0), 0);
	pthread_join(th, NULL);
	cr_assert_gt(urgent_left, 0,
		     "4 MiB of bulk waited for 1 GiB of urgent writes");
	arrived(&pr, BULK, 4 * MiB, "bulk write");
	arrived(&pr, BULK - 64 * MiB, 64 * MiB, "urgent write (its last 64 MiB)");
	kvt_batch_free(ub);
	kvt_batch_free(bb);
	pair_down(&pr);
}

/*
 * A submission that settles behind a pending one in the same batch is
 * finished at once, not when the one before it is: with 1 GiB of bulk
 * still pending, the urgent write that overtook it no longer counts in
 * kvt_poll() and its claim on the peer's range is gone (a second write to
 * that range is accepted, which the overlap guard refuses while the first
 * is in flight).
 */
Test(prio, settled_behind_pending_is_finished, .timeout = 180)
{
	struct kvt_submit_opts bo = { .priority = KVT_PRIO_BULK };
	struct kvt_submit_opts uo = { .priority = KVT_PRIO_URGENT };
	struct kvt_xfer big = { .op = KVT_OP_WRITE, .len = BULK };
	struct kvt_xfer small = { .op = KVT_OP_WRITE, .len = SMALL };
	struct kvt_batch *b;
	struct pair pr;
	int again, left, i;

	pair_up(&pr, "shm", BULK + SMALL);
	big.local = pr.src;
	big.remote = pr.base;
	small.local = pr.src + BULK;
	small.remote = pr.base + BULK;
	tc_fill(pr.src, BULK + SMALL, 11);
	b = kvt_batch_alloc(3);
	cr_assert_not_null(b);
	cr_assert_eq(kvt_submit(b, pr.p, &big, 1, &bo), 0);
	cr_assert_eq(kvt_submit(b, pr.p, &small, 1, &uo), 1);
	cr_assert_eq(kvt_submit(b, pr.p, &small, 1, &uo), -EBUSY,
		     "a second write to a range in flight was accepted");
	for (i = 0; i < 60 * 100000 && kvt_status(b, 1) == -EINPROGRESS; i++)
		usleep(10);
	cr_assert_eq(kvt_status(b, 1), 0, "the urgent write did not settle");
	cr_assert_eq(kvt_status(b, 0), -EINPROGRESS,
		     "1 GiB of bulk settled before the urgent write behind it");
	left = kvt_poll(b);
	again = kvt_submit(b, pr.p, &small, 1, &uo);
	cr_assert_eq(kvt_status(b, 0), -EINPROGRESS,
		     "the bulk settled before the checks: nothing was shown");
	cr_assert_eq(left, 1, "%d requests pending: the urgent one still counts",
		     left);
	cr_assert_eq(again, 2, "the urgent write's claim outlived it: %s",
		     strerror(-again));
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	for (i = 0; i < 3; i++)
		cr_assert_eq(kvt_status(b, i), 0, "request %d", i);
	arrived(&pr, BULK, SMALL, "small write");
	arrived(&pr, BULK - 64 * MiB, 64 * MiB, "bulk write (its last 64 MiB)");
	kvt_batch_free(b);
	pair_down(&pr);
}

/*
 * Bulk-class writes over shm go past the cache (streaming stores, whole
 * aligned blocks with a head and a tail copied apart): at odd offsets and
 * lengths every byte lands, and the bytes around each write stay as they
 * were.
 */
Test(prio, bulk_streamed_intact, .timeout = 120)
{
	static const struct { uint64_t off, len; } w[] = {
		{ 1, 16384 }, { 40003, 16385 }, { 100001, 65536 + 13 },
		{ 300007, MiB + 63 }, { 1500000, 100 },
	};
	const uint64_t area = 2 * MiB;
	struct kvt_submit_opts bo = { .priority = KVT_PRIO_BULK };
	uint8_t *want = malloc(area);
	char buf[128];
	struct pair pr;
	unsigned int i;

	cr_assert_not_null(want);
	pair_up(&pr, "shm", 2 * area);
	tc_fill(pr.src, 2 * area, 11);
	/* What was there: the first half, written in the normal class. */
	cr_assert_eq(tc_xfer1(pr.p, KVT_OP_WRITE, pr.src, pr.base, area, NULL,
			      WAIT_US), 0);
	memcpy(want, pr.src, area);
	for (i = 0; i < RTE_DIM(w); i++) {
		cr_assert_eq(tc_xfer1(pr.p, KVT_OP_WRITE, pr.src + area + w[i].off,
				      pr.base + w[i].off, w[i].len, &bo, WAIT_US), 0);
		memcpy(want + w[i].off, pr.src + area + w[i].off, w[i].len);
	}
	cr_assert_eq(tc_peer_cmd(&pr.t, buf, sizeof(buf), "sum 0 0 %" PRIu64, area),
		     0, "%s", buf);
	cr_assert_eq(strtoull(buf, NULL, 16), tc_hash(want, area),
		     "the bulk writes or the bytes around them differ");
	free(want);
	pair_down(&pr);
}
