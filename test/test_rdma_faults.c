/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The RDMA transport when rails fail (verbs TEST DOUBLE, see
 * test_rdma.c): a rail that goes down and comes back, a rail cut under
 * a transfer with tails queued, a lost acknowledgement, one failed
 * request, every rail down, and a peer that dies.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <rte_errno.h>

#include "kvt.h"
#include "kvt_private.h"
#include "../pmd/rdma/rdma.h"
#include "sysfs_tree.h"
#include "test_assert.h"
#include "test_common.h"
#include "verbs_double.h"
#include "rdma_rails.h"


/* A rail goes down mid-transfer: every request completes intact over the
 * other; when it returns it carries bytes again. */
Test(rdma, rail_down_and_back, .timeout = 120, .fini = rdma_rails_fini)
{
	const unsigned int n = 256;
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_port_stats st;
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(n * MiB / 4);
	uint64_t base, before, t0;
	unsigned int i;

	rdma_rails("mlx5_0,mlx5_1");
	vd_rail("mlx5_1")->rate_mbps = 16000;	/* 2 GB/s: long enough to cut */
	vd_rail("mlx5_0")->rate_mbps = 16000;
	base = tc_pair_start(&t, OPTS, src, n * MiB / 4, n * MiB / 4, &p);
	tc_fill(src, n * MiB / 4, 77);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src + i * MiB / 4,
					  .remote = base + i * MiB / 4, .len = MiB / 4 };
	b = kvt_batch_alloc(n);
	cr_assert_geq(kvt_submit(b, p, x, n, NULL), 0);
	rdma_cut_when_busy("mlx5_1", b);
	cr_assert_eq(kvt_wait(b, 30000000), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(kvt_status(b, i), 0, "request %u: %s", i,
			     strerror(-kvt_status(b, i)));
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, n * MiB / 4),
		     tc_hash(src, n * MiB / 4));
	cr_assert_eq(kvt_port_stats((unsigned int)rdma_port_of("rdma:mlx5_1"), &st), 0);
	cr_log_info("mlx5_1: %" PRIu64 " slices, %" PRIu64 " moved away",
		    st.slices, st.retries);
	cr_assert_gt(st.retries, 0, "the cut rail had slices in flight");
	/* Back up: after the pause and the re-arm it carries bytes again. */
	vd_rail("mlx5_1")->down = 0;
	vd_rail("mlx5_1")->rate_mbps = 0;
	vd_rail("mlx5_0")->rate_mbps = 0;
	before = rdma_port_bytes("rdma:mlx5_1");
	t0 = tc_now_us();
	while (rdma_port_bytes("rdma:mlx5_1") == before && tc_now_us() - t0 < 20000000) {
		kvt_batch_reset(b);
		cr_assert_geq(kvt_submit(b, p, x, 64, NULL), 0);
		cr_assert_eq(kvt_wait(b, 30000000), 0);
		for (i = 0; i < 64; i++)
			cr_assert_eq(kvt_status(b, i), 0);
		usleep(20000);
	}
	cr_assert_gt(rdma_port_bytes("rdma:mlx5_1"), before,
		     "the rail did not come back within 20 s");
	cr_log_info("rail back after %" PRIu64 " ms", (tc_now_us() - t0) / 1000);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
	free(x);
}

/* The peer received notifications "<prefix>0" .. "<prefix>n-1", each
 * exactly once. */
static void
notes_once(struct tc_peer *t, char prefix, unsigned int n)
{
	char *notes = malloc(8192), want[16], *q;
	unsigned int i, c;

	/* " TEXT@peer" each, the first without its space. */
	notes[0] = ' ';
	cr_assert_eq(tc_peer_cmd(t, notes + 1, 8191, "notes 10000000 %u", n), 0);
	for (i = 0; i < n; i++) {
		snprintf(want, sizeof(want), " %c%u@", prefix, i);
		for (c = 0, q = notes; (q = strstr(q, want)) != NULL; q++)
			c++;
		cr_assert_eq(c, 1, "notification %c%u delivered %u times", prefix,
			     i, c);
	}
	free(notes);
}

/*
 * A rail cut under submissions that each carry a fence and a notification:
 * the tails caught on the cut rail move to the other, so every request
 * succeeds, every fence lands with its room and every notification
 * arrives exactly once.
 */
Test(rdma, rail_cut_moves_tails, .timeout = 120, .fini = rdma_rails_fini)
{
	const unsigned int n = 64;
	const uint64_t len = MiB / 4;
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	struct kvt_port_stats st;
	char note[16];
	struct kvt_xfer x;
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(n * len);
	uint64_t base, ft;
	unsigned int i;

	rdma_rails("mlx5_0,mlx5_1");
	vd_rail("mlx5_1")->rate_mbps = 16000;	/* 2 GB/s: long enough to cut */
	vd_rail("mlx5_0")->rate_mbps = 16000;
	cr_assert_geq(tc_engine_init(OPTS " --kvt-slice 16K"), 0);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	cr_assert_not_null(kvt_mem_register(src, n * len, NULL, 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " w", n * len);
	ft = tc_peer_u64(&t, 0, "fence %u", n);
	for (i = 0; i < n; i++)
		cr_assert_eq(tc_peer_u64(&t, 10, "arm %u %u", i, 1000 + i), 0);
	p = tc_open_peer(&t);
	tc_fill(src, n * len, 5);
	b = kvt_batch_alloc(n);
	for (i = 0; i < n; i++) {
		x = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src + i * len,
				       .remote = base + i * len, .len = len };
		o.fence = (struct kvt_fence_ref){ .table = ft, .slot = i,
						  .room = 1000 + i };
		o.notify_len = (uint32_t)snprintf(note, sizeof(note), "t%u", i);
		o.notify = note;
		cr_assert_geq(kvt_submit(b, p, &x, 1, &o), 0);
	}
	rdma_cut_when_busy("mlx5_1", b);
	cr_assert_eq(kvt_wait(b, 30000000), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(kvt_status(b, i), 0, "request %u: %s", i,
			     strerror(-kvt_status(b, i)));
	cr_assert_eq(kvt_port_stats((unsigned int)rdma_port_of("rdma:mlx5_1"), &st), 0);
	cr_assert_gt(st.retries, 0, "the cut rail had work in flight");
	for (i = 0; i < n; i++)
		cr_assert_eq(tc_peer_u64(&t, 10, "fpoll %u", i), 0,
			     "fence %u did not land with its room", i);
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, n * len),
		     tc_hash(src, n * len));
	notes_once(&t, 't', n);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/*
 * A notification arrives but its acknowledgement is lost (the queue pair
 * breaks): the initiator sends it again on the other rail, and the target
 * drops the copy, so the receiver sees each message once.
 */
Test(rdma, lost_ack_notification_once, .timeout = 120, .fini = rdma_rails_fini)
{
	const unsigned int n = 32;
	struct kvt_submit_opts o = { 0 };
	char note[16];
	struct kvt_xfer x;
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(n * 4096);
	uint64_t base;
	unsigned int i;

	rdma_rails("mlx5_0,mlx5_1");
	base = tc_pair_start(&t, OPTS, src, n * 4096, n * 4096, &p);
	vd_rail("mlx5_0")->lose_send_ack = 3;
	vd_rail("mlx5_1")->lose_send_ack = 3;
	b = kvt_batch_alloc(n);
	for (i = 0; i < n; i++) {
		x = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src + i * 4096,
				       .remote = base + i * 4096, .len = 4096 };
		o.notify_len = (uint32_t)snprintf(note, sizeof(note), "m%u", i);
		o.notify = note;
		cr_assert_geq(kvt_submit(b, p, &x, 1, &o), 0);
	}
	cr_assert_eq(kvt_wait(b, 30000000), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(kvt_status(b, i), 0, "request %u: %s", i,
			     strerror(-kvt_status(b, i)));
	cr_assert_eq(vd_rail("mlx5_0")->lose_send_ack +
		     vd_rail("mlx5_1")->lose_send_ack, 0,
		     "a lost acknowledgement was not staged");
	notes_once(&t, 'm', n);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/* One request fails on the wire (the queue pair breaks): its slice moves,
 * nothing is lost, the pair is re-armed. */
Test(rdma, single_error_recovers, .timeout = 120, .fini = rdma_rails_fini)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(32 * MiB);
	uint64_t base;
	unsigned int r;

	rdma_rails("mlx5_0,mlx5_1");
	base = tc_pair_start(&t, OPTS, src, 32 * MiB, 32 * MiB, &p);
	for (r = 0; r < 20; r++) {
		if (r == 2)
			vd_rail("mlx5_0")->fail_after = 7;
		tc_fill(src, 32 * MiB, r);
		cr_assert_eq(rdma_write_blocks(p, src, base, 32, MiB, 30000000), 0,
			     "round %u", r);
		cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, 32 * MiB),
			     tc_hash(src, 32 * MiB), "round %u", r);
	}
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/* Every rail down: requests fail within the timeout, nothing hangs. */
Test(rdma, all_rails_down, .timeout = 120, .fini = rdma_rails_fini)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(8 * MiB);
	uint64_t base, t0, el;
	int ret;

	rdma_rails("mlx5_0,mlx5_1");
	base = tc_pair_start(&t, OPTS, src, 8 * MiB, 8 * MiB, &p);
	cr_assert_eq(rdma_write_blocks(p, src, base, 8, MiB, 30000000), 0);
	vd_rail("mlx5_0")->down = 1;
	vd_rail("mlx5_1")->down = 1;
	t0 = tc_now_us();
	ret = rdma_write_blocks(p, src, base, 8, MiB, 10000000);
	el = tc_now_us() - t0;
	cr_assert(ret == -ETIMEDOUT || ret == -ECONNRESET || ret == -EIO,
		  "status %d (%s)", ret, strerror(-ret));
	cr_assert_lt(el, 3000000, "failed after %" PRIu64 " ms", el / 1000);
	cr_log_info("all rails down: failed in %" PRIu64 " ms (%s)", el / 1000,
		    strerror(-ret));
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/* The peer dies mid-batch: its requests fail within the timeout, and the
 * engine keeps serving a new peer. */
Test(rdma, peer_killed, .timeout = 120, .fini = rdma_rails_fini)
{
	const unsigned int n = 512;
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(MiB);
	uint64_t base, t0;
	unsigned int i, failed = 0;
	int st;

	rdma_rails("mlx5_0,mlx5_1");
	vd_rail("mlx5_0")->rate_mbps = 8000;
	vd_rail("mlx5_1")->rate_mbps = 8000;
	base = tc_pair_start(&t, OPTS, src, MiB, (uint64_t)n * MiB, &p);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
					  .remote = base + (uint64_t)i * MiB,
					  .len = MiB };
	b = kvt_batch_alloc(n);
	cr_assert_geq(kvt_submit(b, p, x, n, NULL), 0);
	usleep(20000);
	t0 = tc_now_us();
	tc_peer_kill(&t);
	cr_assert_eq(kvt_wait(b, 10000000), 0, "the batch hung");
	cr_assert_lt(tc_now_us() - t0, 3000000);
	for (i = 0; i < n; i++) {
		st = kvt_status(b, i);
		cr_assert(st == 0 || st == -ECONNRESET || st == -ETIMEDOUT ||
			  st == -EIO, "request %u: %d", i, st);
		failed += st != 0;
	}
	cr_assert_gt(failed, 0);
	kvt_batch_free(b);
	kvt_peer_close(p);
	vd_rail("mlx5_0")->rate_mbps = 0;
	vd_rail("mlx5_1")->rate_mbps = 0;
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " w", MiB);
	p = tc_open_peer(&t);
	tc_fill(src, MiB, 3);
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, MiB, NULL, 30000000), 0);
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, MiB), tc_hash(src, MiB));
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
	free(x);
}
