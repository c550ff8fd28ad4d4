/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Page lists (kvt_submit_pages): scattered pages of a KV pool moved in one
 * request between processes over shm, on one ordered port and striped
 * over two; pages larger than a slice and of odd sizes; fences and
 * notifications after the pages; and each refusal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <rte_common.h>
#include <rte_errno.h>

#include "kvt.h"
#include "test_assert.h"
#include "test_common.h"

#define POOL (8 * MiB)
#define WAIT_US (20ull * 1000 * 1000)

/* n distinct numbers below range, in random order. */
static void
pick(uint32_t *out, uint32_t n, uint32_t range, uint64_t seed)
{
	uint32_t *all = malloc(range * sizeof(*all)), i, j, t;

	srand48((long)seed);
	for (i = 0; i < range; i++)
		all[i] = i;
	for (i = 0; i < n; i++) {
		j = i + (uint32_t)(lrand48() % (range - i));
		t = all[i];
		all[i] = all[j];
		all[j] = t;
		out[i] = all[i];
	}
	free(all);
}

static int
submit_pages(struct kvt_peer *p, const struct kvt_pages *pg,
	     const struct kvt_submit_opts *o)
{
	struct kvt_batch *b = kvt_batch_alloc(1);
	int ret;

	cr_assert_not_null(b);
	ret = kvt_submit_pages(b, p, pg, o);
	if (ret >= 0) {
		cr_assert_eq(ret, 0);
		cr_assert_eq(kvt_wait(b, WAIT_US), 0);
		ret = kvt_status(b, 0);
	}
	kvt_batch_free(b);
	return ret;
}

/*
 * Write n pages of each size into the peer's pool, keeping a mirror of
 * what the pool must hold, then read them back to other local pages.
 */
static void
scattered(const char *opts)
{
	static const uint64_t sizes[] = { 4096, 5000, 64 << 10, 48 << 10, 1 };
	const uint32_t n = 96;
	uint8_t *local, *mirror = calloc(1, POOL);
	uint32_t li[96], ri[96], k, lpages, rpages;
	struct kvt_pages pg;
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base, ps;
	unsigned int i;

	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_eq(tc_peer_start(&t, opts), 0);
	local = kvt_mem_alloc(POOL, "cpu:0");
	cr_assert_not_null(kvt_mem_register(local, POOL, "cpu:0", 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", POOL);
	p = tc_open_peer(&t);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		ps = sizes[i];
		lpages = (uint32_t)RTE_MIN(POOL / ps, (uint64_t)4096);
		rpages = (uint32_t)RTE_MIN(POOL / ps, (uint64_t)4096);
		pick(li, n, lpages, 2 * i + 1);
		pick(ri, n, rpages, 2 * i + 2);
		tc_fill(local, POOL, i + 10);
		pg = (struct kvt_pages){ .op = KVT_OP_WRITE, .n = n, .page_size = ps,
					 .local = local, .remote = base,
					 .local_idx = li, .remote_idx = ri };
		cr_assert_eq(submit_pages(p, &pg, NULL), 0, "write, pages of %" PRIu64, ps);
		for (k = 0; k < n; k++)
			memcpy(mirror + ri[k] * ps, local + li[k] * ps, ps);
		cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, POOL),
			     tc_hash(mirror, POOL), "pool after pages of %" PRIu64, ps);
		/* Back again, into other local pages. */
		memset(local, 0, POOL);
		pick(li, n, lpages, 2 * i + 3);
		pg.op = KVT_OP_READ;
		cr_assert_eq(submit_pages(p, &pg, NULL), 0, "read, pages of %" PRIu64, ps);
		for (k = 0; k < n; k++)
			cr_assert_eq(memcmp(local + li[k] * ps, mirror + ri[k] * ps, ps),
				     0, "page %u of %" PRIu64 " read back", k, ps);
	}
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(mirror);
}

Test(pages, scattered_one_ordered_port, .timeout = 120)
{
	scattered("--kvt-pmd shm --kvt-slice 16K");
}

Test(pages, scattered_striped, .timeout = 120)
{
	scattered("--kvt-pmd shm,ports=2 --kvt-slice 16K");
}

Test(pages, fence_and_note_after_pages, .timeout = 120)
{
	const uint32_t n = 512;
	uint32_t *li = malloc(n * 4), *ri = malloc(n * 4), k;
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE,
				     .notify = "pages", .notify_len = 5 };
	uint8_t *local, *mirror = calloc(1, POOL);
	struct kvt_pages pg;
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base, ft;
	char buf[256];

	cr_assert_geq(tc_engine_init("--kvt-pmd shm,ports=2"), 0);
	cr_assert_eq(tc_peer_start(&t, "--kvt-pmd shm,ports=2"), 0);
	local = kvt_mem_alloc(POOL, "cpu:0");
	cr_assert_not_null(kvt_mem_register(local, POOL, "cpu:0", 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " w", POOL);
	ft = tc_peer_u64(&t, 0, "fence 2");
	p = tc_open_peer(&t);
	pick(li, n, 2048, 7);
	pick(ri, n, 2048, 8);
	tc_fill(local, POOL, 99);
	for (k = 0; k < n; k++)
		memcpy(mirror + ri[k] * 4096, local + li[k] * 4096, 4096);
	cr_assert_eq(tc_peer_u64(&t, 10, "arm 1 77"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 1, .room = 77 };
	pg = (struct kvt_pages){ .op = KVT_OP_WRITE, .n = n, .page_size = 4096,
				 .local = local, .remote = base,
				 .local_idx = li, .remote_idx = ri };
	cr_assert_eq(submit_pages(p, &pg, &o), 0);
	cr_assert_eq(tc_peer_u64(&t, 10, "fwait 1 5000000"), 0);
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, POOL),
		     tc_hash(mirror, POOL));
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "notes 10000000 1"), 0);
	cr_assert(strstr(buf, "pages@") != NULL, "notification: '%s'", buf);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(mirror);
	free(li);
	free(ri);
}

Test(pages, refusals, .timeout = 120)
{
	struct kvt_submit_opts allow = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	uint32_t li[4] = { 0, 1, 2, 3 }, ri[4] = { 10, 11, 12, 13 }, bad[4];
	struct kvt_batch *b = NULL, *b2;
	struct kvt_pages pg, q;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *local;
	uint64_t base, ro;

	cr_assert_geq(tc_engine_init("--kvt-pmd shm"), 0);
	cr_assert_eq(tc_peer_start(&t, "--kvt-pmd shm"), 0);
	local = kvt_mem_alloc(MiB, "cpu:0");
	cr_assert_not_null(kvt_mem_register(local, MiB, "cpu:0", 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", MiB);
	ro = tc_peer_u64(&t, 0, "alloc 1 %" PRIu64 " r", MiB);
	p = tc_open_peer(&t);
	b = kvt_batch_alloc(4);
	pg = (struct kvt_pages){ .op = KVT_OP_WRITE, .n = 4, .page_size = 4096,
				 .local = local, .remote = base,
				 .local_idx = li, .remote_idx = ri };
	q = pg;
	q.n = 0;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -EINVAL);
	q = pg;
	q.page_size = 0;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -EINVAL);
	q = pg;
	q.remote_idx = NULL;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -EINVAL);
	q = pg;
	q.op = 7;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -EINVAL);
	cr_assert_eq(kvt_submit_pages(b, p, NULL, NULL), -EINVAL);
	/* Page numbers so large that the address overflows. */
	memcpy(bad, ri, sizeof(bad));
	bad[3] = UINT32_MAX;
	q = pg;
	q.page_size = 1ull << 40;
	q.remote_idx = bad;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -EINVAL);
	/* One page past the local region, then past the remote one. */
	memcpy(bad, li, sizeof(bad));
	bad[2] = (uint32_t)(MiB / 4096);
	q = pg;
	q.local_idx = bad;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -EFAULT);
	q = pg;
	q.remote_idx = bad;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -ERANGE);
	/* A read-only region takes no write; reading it is fine. */
	q = pg;
	q.remote = ro;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -EPERM);
	q.op = KVT_OP_READ;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), 0);
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	/* The same remote page twice in one list. */
	memcpy(bad, ri, sizeof(bad));
	bad[3] = bad[0];
	q = pg;
	q.remote_idx = bad;
	cr_assert_eq(kvt_submit_pages(b, p, &q, NULL), -EBUSY);
	/* A list overlapping a write in flight; then with the opt-out. */
	b2 = kvt_batch_alloc(4);
	cr_assert_eq(kvt_submit_pages(b, p, &pg, NULL), 1);
	memcpy(bad, ri, sizeof(bad));
	bad[0] = 40;
	bad[1] = 13;
	q = pg;
	q.remote_idx = bad;
	cr_assert_eq(kvt_submit_pages(b2, p, &q, NULL), -EBUSY);
	cr_assert_eq(kvt_submit_pages(b2, p, &q, &allow), 0);
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	cr_assert_eq(kvt_wait(b2, WAIT_US), 0);
	cr_assert_eq(kvt_status(b, 1), 0);
	cr_assert_eq(kvt_status(b2, 0), 0);
	/* Refusals gave their memory back: the batch still works. */
	cr_assert_eq(kvt_batch_reset(b), 0);
	cr_assert_eq(kvt_submit_pages(b, p, &pg, NULL), 0);
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	kvt_batch_free(b);
	kvt_batch_free(b2);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}
