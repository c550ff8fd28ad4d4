/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Priority classes between two engines (this process and a kvt-testpeer),
 * over shm and tcp: an urgent request submitted behind 1 GiB of bulk
 * completes first, while the bulk still moves; a request of the same
 * class as the bulk waits its turn (so the first check can fail); bulk
 * keeps moving under a flood of urgent requests; bytes arrive intact.
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
#include "test_assert.h"
#include "test_common.h"

#define MiB ((uint64_t)1 << 20)
#define BULK (1024 * MiB)
#define SMALL 4096
#define FLOOD_BULK (256 * MiB)
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
overtakes(const char *pmd, int control)
{
	struct pair pr;

	pair_up(&pr, pmd, BULK + SMALL);
	cr_assert(small_before_bulk(&pr, KVT_PRIO_URGENT),
		  "%s: an urgent write behind 1 GiB of bulk settled after it", pmd);
	/* The same small write in the bulk's own class waits its turn:
	 * the check above is about the class. */
	if (control)
		cr_assert_not(small_before_bulk(&pr, KVT_PRIO_BULK),
			      "%s: a bulk-class write overtook 1 GiB of bulk", pmd);
	pair_down(&pr);
}

Test(prio, urgent_overtakes_bulk_shm, .timeout = 180)
{
	overtakes("shm", 1);
}

/* Over tcp the urgent write takes a socket of its own: behind the
 * megabytes of bulk in the other sockets' buffers, it would wait. */
Test(prio, urgent_overtakes_bulk_tcp, .timeout = 180)
{
	overtakes("tcp --kvt-nic lo", 0);
}

struct flood {
	struct pair *pr;
	volatile int stop;
	unsigned long done;
	int err;
};

/* Urgent 4 KiB writes, 32 in flight, until told to stop. */
static void *
flood_main(void *arg)
{
	struct flood *f = arg;
	/* The same 128 KiB again and again: the overlap guard would make
	 * each round wait for the last one's claims to be dropped. */
	struct kvt_submit_opts so = { .priority = KVT_PRIO_URGENT,
				      .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	struct kvt_xfer x[32];
	struct kvt_batch *b = kvt_batch_alloc(32);
	unsigned int i;

	for (i = 0; i < 32; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE,
			.local = f->pr->src + FLOOD_BULK + i * SMALL,
			.remote = f->pr->base + FLOOD_BULK + i * SMALL,
			.len = SMALL };
	while (!f->stop && f->err == 0) {
		f->err = kvt_submit(b, f->pr->p, x, 32, &so);
		if (f->err >= 0)
			f->err = kvt_wait(b, WAIT_US);
		if (f->err == 0)
			f->err = kvt_batch_reset(b);
		if (f->err == 0)
			__atomic_store_n(&f->done, f->done + 32, __ATOMIC_RELAXED);
	}
	kvt_batch_free(b);
	return NULL;
}

/* Bulk is never starved: 256 MiB of it finish while urgent writes keep
 * coming, and the urgent ones keep finishing too. */
Test(prio, bulk_moves_under_urgent_flood, .timeout = 180)
{
	struct kvt_submit_opts bo = { .priority = KVT_PRIO_BULK };
	struct kvt_xfer big = { .op = KVT_OP_WRITE };
	struct flood f = { 0 };
	struct kvt_batch *b;
	struct pair pr;
	pthread_t th;
	unsigned long before;

	pair_up(&pr, "shm", FLOOD_BULK + 32 * SMALL);
	f.pr = &pr;
	big.local = pr.src;
	big.remote = pr.base;
	big.len = FLOOD_BULK;
	tc_fill(pr.src, FLOOD_BULK, 3);
	cr_assert_eq(pthread_create(&th, NULL, flood_main, &f), 0);
	while (__atomic_load_n(&f.done, __ATOMIC_RELAXED) < 1000 && f.err == 0)
		usleep(1000);
	b = kvt_batch_alloc(1);
	cr_assert_eq(kvt_submit(b, pr.p, &big, 1, &bo), 0);
	before = __atomic_load_n(&f.done, __ATOMIC_RELAXED);
	cr_assert_eq(kvt_wait(b, 30ull * 1000 * 1000), 0,
		     "256 MiB of bulk did not finish in 30 s under urgent writes");
	cr_assert_eq(kvt_status(b, 0), 0);
	f.stop = 1;
	pthread_join(th, NULL);
	cr_assert_eq(f.err, 0, "an urgent write failed: %s", strerror(-f.err));
	cr_log_info("urgent writes settled while the bulk ran: %lu",
		    f.done - before);
	cr_assert_gt(f.done, before, "the urgent writes stopped while bulk ran");
	arrived(&pr, 0, FLOOD_BULK, "bulk under a flood");
	kvt_batch_free(b);
	pair_down(&pr);
}
