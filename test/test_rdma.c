/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The RDMA transport against the verbs TEST DOUBLE (verbs_double.c; no
 * RDMA NIC on these machines): the handshake encoding, bytes between two
 * processes over two rails, fences and notifications, striping by
 * topology and by rate, a rail that fails and comes back, all rails down,
 * and a peer that dies.  Real hardware: scripts/rdma-test.
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

#define OPTS "--kvt-pmd rdma --kvt-timeout 1000"

static char dir[64];

/* Every test gets its own double: rails and process tables in dir. */
static void
rails(const char *devs)
{
	snprintf(dir, sizeof(dir), "/tmp/kvt-vd-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	setenv("KVT_VDOUBLE_DIR", dir, 1);
	setenv("KVT_VDOUBLE_DEVS", devs, 1);
}

static void
rails_fini(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (dir[0] != '\0' && system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

/* Write n blocks of len from src to base (block i to base + i * len) as
 * one batch; @return the first failed status or 0. */
static int
write_blocks(struct kvt_peer *p, uint8_t *src, uint64_t base, unsigned int n,
	     uint64_t len, uint64_t timeout_us)
{
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_batch *b = kvt_batch_alloc(n);
	unsigned int i;
	int ret = 0, st;

	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src + i * len,
					  .remote = base + i * len, .len = len };
	cr_assert_geq(kvt_submit(b, p, x, n, NULL), 0);
	cr_assert_eq(kvt_wait(b, timeout_us), 0, "the batch did not settle");
	for (i = 0; i < n; i++) {
		st = kvt_status(b, i);
		if (st != 0 && ret == 0)
			ret = st;
	}
	kvt_batch_free(b);
	free(x);
	return ret;
}

static int
port_of(const char *name)
{
	struct kvt_port_info pi;
	unsigned int i;

	for (i = 0; i < kvt_port_count(); i++)
		if (kvt_port_info(i, &pi) == 0 && strcmp(pi.name, name) == 0)
			return (int)i;
	cr_assert_fail("no port %s", name);
	return -1;
}

/* Cut rail `nic` once it carried bytes of batch b, which must still be
 * running then (a cut after the work could not test the move). */
static void
cut_when_busy(const char *nic, struct kvt_batch *b)
{
	char port[40];
	struct kvt_port_stats st;
	uint64_t t0 = tc_now_us();

	snprintf(port, sizeof(port), "rdma:%s", nic);
	do {
		cr_assert_eq(kvt_port_stats((unsigned int)port_of(port), &st), 0);
		cr_assert_lt(tc_now_us() - t0, 10000000, "%s carried nothing", nic);
	} while (st.write_bytes == 0);
	vd_rail(nic)->down = 1;
	cr_assert_gt(kvt_poll(b), 0,
		     "the batch ended before %s was cut: slow the rails", nic);
}

static uint64_t
port_bytes(const char *name)
{
	struct kvt_port_stats st;

	cr_assert_eq(kvt_port_stats((unsigned int)port_of(name), &st), 0);
	return st.write_bytes + st.read_bytes;
}

/* ---- the handshake's encoding ---- */

Test(rdma, qpinfo_encoding)
{
	struct rd_qpinfo a = { .nqps = 3, .mtu = IBV_MTU_4096, .lid = 77,
			       .flush_addr = 0x7f0012345678ull, .flush_rkey = 99 },
		b;
	struct kvt_buf buf = { 0 };
	uint8_t bad[256];
	unsigned int i;

	for (i = 0; i < 16; i++)
		a.gid[i] = (uint8_t)(i * 7);
	for (i = 0; i < 3; i++) {
		a.qpn[i] = 0x100 + i;
		a.psn[i] = 0xfffff0 + i;
	}
	cr_assert_eq(rd_qpinfo_encode(&a, &buf), 0);
	cr_assert_eq(rd_qpinfo_decode(buf.data, buf.len, &b), 0);
	cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0);
	/* Every truncation and every extension is refused. */
	for (i = 0; i < buf.len; i++)
		cr_assert_eq(rd_qpinfo_decode(buf.data, i, &b), -EPROTO);
	memcpy(bad, buf.data, buf.len);
	cr_assert_eq(rd_qpinfo_decode(bad, buf.len + 1, &b), -EPROTO);
	bad[0] = 2;	/* version */
	cr_assert_eq(rd_qpinfo_decode(bad, buf.len, &b), -EPROTO);
	memcpy(bad, buf.data, buf.len);
	bad[1] = 0;	/* no queue pair */
	cr_assert_eq(rd_qpinfo_decode(bad, buf.len, &b), -EPROTO);
	bad[1] = RD_MAX_QPS + 1;
	cr_assert_eq(rd_qpinfo_decode(bad, buf.len, &b), -EPROTO);
	memcpy(bad, buf.data, buf.len);
	bad[2] = 9;	/* MTU */
	cr_assert_eq(rd_qpinfo_decode(bad, buf.len, &b), -EPROTO);
	memcpy(bad, buf.data, buf.len);
	bad[buf.len - 1] = 0x01;	/* a PSN above 24 bits */
	cr_assert_eq(rd_qpinfo_decode(bad, buf.len, &b), -EPROTO);
	a.nqps = 0;
	cr_assert_eq(rd_qpinfo_encode(&a, &buf), -EINVAL);
	kvt_buf_free(&buf);
}

Test(rdma, endpoint_encoding_and_rails)
{
	struct rd_endpoint e[3], d;
	struct kvt_buf buf = { 0 };
	unsigned int i;

	memset(e, 0, sizeof(e));
	for (i = 0; i < 3; i++) {
		snprintf(e[i].name, sizeof(e[i].name), "mlx5_%u", i);
		e[i].link = KVT_LINK_ETH;
		e[i].mtu = IBV_MTU_4096;
		e[i].port_num = 1;
	}
	e[2].link = KVT_LINK_IB;
	e[2].lid = 12;
	cr_assert_eq(rd_endpoint_encode(&e[2], &buf), 0);
	memset(&d, 0, sizeof(d));
	cr_assert_eq(rd_endpoint_decode(buf.data, buf.len, &d), 0);
	cr_assert_eq(memcmp(&d, &e[2], sizeof(d)), 0);
	for (i = 0; i < buf.len; i++)
		cr_assert_eq(rd_endpoint_decode(buf.data, i, &d), -EPROTO);
	memset(buf.data + 1, 'x', 32);	/* a name without its end */
	cr_assert_eq(rd_endpoint_decode(buf.data, buf.len, &d), -EPROTO);
	kvt_buf_free(&buf);
	/* The same rail by name, else by position, never across link layers. */
	cr_assert_eq(rd_pick_endpoint("mlx5_1", KVT_LINK_ETH, 0, e, 3), 1);
	cr_assert_eq(rd_pick_endpoint("mlx5_7", KVT_LINK_ETH, 1, e, 3), 1);
	cr_assert_eq(rd_pick_endpoint("mlx5_7", KVT_LINK_ETH, 2, e, 3), 0);
	cr_assert_eq(rd_pick_endpoint("mlx5_0", KVT_LINK_IB, 0, e, 3), 2);
	cr_assert_eq(rd_pick_endpoint("mlx5_0", KVT_LINK_IB, 0, e, 2), -1);
	cr_assert_eq(RD_WRID_SLOT(RD_WRID(255, 7, 1, 12345)), 255);
	cr_assert_eq(RD_WRID_GEN(RD_WRID(255, 7, 1, 12345)), 7);
	cr_assert_eq(RD_WRID_RECV(RD_WRID(255, 7, 1, 12345)), 1);
	cr_assert_eq(RD_WRID_SEQ(RD_WRID(255, 7, 1, (1ull << 39) + 5)), 5);
}

/* ---- engines ---- */

Test(rdma, no_device, .fini = rails_fini)
{
	rails("");
	/* The other transports run; rdma says why it has no port. */
	cr_assert_geq(tc_engine_init("--kvt-pmd shm"), 0);
	kvt_fini();
	cr_assert_eq(tc_engine_init(OPTS), -ENODEV);
}

/*
 * The double with soft-RoCE's limits (a 32 767-entry CQ at most, 8 MiB
 * messages, 1024-byte MTU): the transport starts on both rails and moves
 * 16 MiB slices, each split into work requests the port accepts.  With
 * the CQ size fixed at 65 536, no port started here.
 */
Test(rdma, rxe_limits, .timeout = 120, .fini = rails_fini)
{
	static const uint64_t sizes[] = { 1, 4097, 8 * MiB, 8 * MiB + 1, 16 * MiB };
	struct vd_rail *r0, *r1;
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base, ft, req0;
	uint8_t *src;

	rails("rxe0,rxe1");
	setenv("KVT_VDOUBLE_PROFILE", "rxe", 1);
	r0 = vd_rail("rxe0");
	r1 = vd_rail("rxe1");
	cr_assert_geq(tc_engine_init(OPTS " --kvt-slice 16M"), 0);
	cr_assert_eq(kvt_port_count(), 2, "rdma ports on rxe: %u",
		     kvt_port_count());
	cr_assert_eq(tc_peer_start(&t, OPTS " --kvt-slice 16M"), 0);
	src = malloc(16 * MiB + 64);
	cr_assert_not_null(kvt_mem_register(src, 16 * MiB + 64, NULL, 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", 16 * MiB + 64);
	ft = tc_peer_u64(&t, 0, "fence 4");
	p = tc_open_peer(&t);
	req0 = r0->requests + r1->requests;
	tc_sizes_both_ways(&t, p, src, base, sizes,
			   sizeof(sizes) / sizeof(sizes[0]), 30000000);
	/* 8 MiB + 1 and 16 MiB slices became two work requests each, both
	 * ways: more requests than slices. */
	cr_assert_gt(r0->requests + r1->requests - req0, 2 * 5 + 2 * 3);
	tc_fence_then_note(&t, p, src, base, 9 * MiB, ft);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
	unsetenv("KVT_VDOUBLE_PROFILE");
}

/*
 * Limits below what kvt asks for: a QP with 8 inline bytes still carries
 * fences and small writes; a region larger than max_mr_size is not
 * carried by that NIC (ENOTSUP, said in the log) and the engine goes on;
 * messages too short for the slice size keep the port from starting,
 * with the reason.
 */
Test(rdma, small_device_limits, .timeout = 120, .fini = rails_fini)
{
	static const uint64_t sizes[] = { 1, 8, 9, 64, 4096 };
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base, ft;
	uint8_t *src, *big;

	rails("mlx5_0");
	setenv("KVT_VDOUBLE_LIMITS", "inline=8,mr=4194304", 1);
	cr_assert_geq(tc_engine_init(OPTS), 0);
	cr_assert_eq(kvt_port_count(), 1);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	src = malloc(MiB);
	big = malloc(8 * MiB);
	cr_assert_not_null(kvt_mem_register(src, MiB, NULL, 0));
	cr_assert_null(kvt_mem_register(big, 8 * MiB, NULL, 0));
	cr_assert_eq(rte_errno, ENOTSUP);
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", MiB);
	ft = tc_peer_u64(&t, 0, "fence 4");
	p = tc_open_peer(&t);
	tc_sizes_both_ways(&t, p, src, base, sizes,
			   sizeof(sizes) / sizeof(sizes[0]), 30000000);
	tc_fence_then_note(&t, p, src, base, 4096, ft);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();

	/* 64 KiB messages, 16 MiB slices: 256 work requests a slice. */
	setenv("KVT_VDOUBLE_LIMITS", "msg=65536", 1);
	cr_assert_eq(tc_engine_init(OPTS " --kvt-slice 16M"), -ENODEV);
	unsetenv("KVT_VDOUBLE_LIMITS");
	free(big);
	free(src);
}

Test(rdma, data_fence_notify, .timeout = 120, .fini = rails_fini)
{
	static const uint64_t sizes[] = { 1, 60, 4095, 65536, MiB + 7, 16 * MiB };
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src;
	uint64_t base, ft, b0, b1;

	rails("mlx5_0,mlx5_1");
	cr_assert_geq(tc_engine_init(OPTS), 0);
	cr_assert_eq(kvt_port_count(), 2);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	src = malloc(16 * MiB + 64);
	cr_assert_not_null(kvt_mem_register(src, 16 * MiB + 64, NULL, 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", 16 * MiB + 64);
	ft = tc_peer_u64(&t, 0, "fence 4");
	p = tc_open_peer(&t);
	tc_sizes_both_ways(&t, p, src, base, sizes,
			   sizeof(sizes) / sizeof(sizes[0]), 30000000);
	/* The 16 MiB requests were striped over both rails.  Striping
	 * follows each rail's completion rate, and the first slices of a
	 * sanitizer-built engine on a busy box can make either rail look
	 * slow for a while: one rail carrying 16 slices or more proves the
	 * stripe, an even split is not promised. */
	b0 = port_bytes("rdma:mlx5_0");
	b1 = port_bytes("rdma:mlx5_1");
	cr_log_info("rail bytes: %" PRIu64 " + %" PRIu64, b0, b1);
	cr_assert_gt(b0, MiB, "mlx5_0 carried %" PRIu64 " of %" PRIu64 " bytes",
		     b0, b0 + b1);
	cr_assert_gt(b1, MiB, "mlx5_1 carried %" PRIu64 " of %" PRIu64 " bytes",
		     b1, b0 + b1);
	tc_fence_then_note(&t, p, src, base, MiB, ft);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/*
 * Unregistered means closed over verbs: deregistering the memory at the
 * target (its NIC's key) ends every access, even from a peer that has
 * not heard of it yet (tc_unregister_race).
 */
Test(rdma, unregister_closes, .timeout = 120, .fini = rails_fini)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t writes;

	rails("mlx5_0,mlx5_1");
	cr_assert_geq(tc_engine_init(OPTS), 0);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	p = tc_open_peer(&t);
	writes = tc_unregister_race_host(&t, p, "alloc %u %u w", 10);
	cr_log_info("%" PRIu64 " writes landed racing 10 unregisters, none after one returned",
		    writes);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

/*
 * Slices become work requests one to one; a chain of WRITEs ends in one
 * 8-byte flush READ, READs need none, a fence is one more 8-byte WRITE.
 * Counted on the double's rail.
 */
Test(rdma, slices_to_work_requests, .timeout = 60, .fini = rails_fini)
{
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	struct vd_rail *rail;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(MiB);
	uint64_t base, ft, req, bytes, flushes;

	rails("mlx5_0");
	rail = vd_rail("mlx5_0");
	cr_assert_geq(tc_engine_init("--kvt-pmd rdma,qps=1 --kvt-slice 64K"), 0);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	cr_assert_not_null(kvt_mem_register(src, MiB, NULL, 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", MiB);
	ft = tc_peer_u64(&t, 0, "fence 1");
	p = tc_open_peer(&t);
	req = rail->requests;
	bytes = rail->bytes;
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, MiB, NULL, 10000000), 0);
	flushes = rail->requests - req - 16;
	cr_assert(flushes >= 1 && flushes <= 16, "%" PRIu64 " requests for 16 slices",
		  rail->requests - req);
	cr_assert_eq(rail->bytes - bytes, MiB + 8 * flushes);
	req = rail->requests;
	bytes = rail->bytes;
	cr_assert_eq(tc_xfer1(p, KVT_OP_READ, src, base, MiB, NULL, 10000000), 0);
	cr_assert_eq(rail->requests - req, 16);
	cr_assert_eq(rail->bytes - bytes, MiB);
	cr_assert_eq(tc_peer_u64(&t, 10, "arm 0 9"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 0, .room = 9 };
	req = rail->requests;
	bytes = rail->bytes;
	cr_assert_eq(tc_xfer1(p, KVT_OP_READ, src, base, 60, &o, 10000000), 0);
	cr_assert_eq(rail->requests - req, 2, "one READ, one fence WRITE");
	cr_assert_eq(rail->bytes - bytes, 68);
	cr_assert_eq(tc_peer_u64(&t, 10, "fpoll 0"), 0);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/* A page list is striped over both rails like any request. */
Test(rdma, page_list, .timeout = 60, .fini = rails_fini)
{
	const uint32_t n = 256, pages = 512;
	const uint64_t ps = 16 << 10, pool = pages * ps;
	uint8_t *local, *mirror = calloc(1, pool);
	uint32_t li[256], ri[256], k;
	struct kvt_pages pg;
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base;

	rails("mlx5_0,mlx5_1");
	cr_assert_geq(tc_engine_init(OPTS " --kvt-slice 8K"), 0);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	local = malloc(pool);
	cr_assert_not_null(kvt_mem_register(local, pool, NULL, 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", pool);
	p = tc_open_peer(&t);
	tc_fill(local, pool, 12);
	for (k = 0; k < n; k++) {
		li[k] = (k * 37u) % pages;
		ri[k] = (k * 101u + 7) % pages;
		memcpy(mirror + ri[k] * ps, local + li[k] * ps, ps);
	}
	pg = (struct kvt_pages){ .op = KVT_OP_WRITE, .n = n, .page_size = ps,
				 .local = local, .remote = base,
				 .local_idx = li, .remote_idx = ri };
	b = kvt_batch_alloc(1);
	cr_assert_eq(kvt_submit_pages(b, p, &pg, NULL), 0);
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, pool),
		     tc_hash(mirror, pool));
	cr_assert_gt(port_bytes("rdma:mlx5_0"), 0);
	cr_assert_gt(port_bytes("rdma:mlx5_1"), 0);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(local);
	free(mirror);
}

/* Notifications arrive after their data and in order: the receiver
 * checks each round's bytes when it reads the round's message. */
Test(rdma, notified_rounds, .timeout = 120, .fini = rails_fini)
{
	const unsigned int rounds = 64, blocks = 4;
	const uint64_t len = 64 << 10, round = blocks * len;
	struct kvt_submit_opts o = { 0 };
	struct kvt_xfer x[4];
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src;
	uint64_t base;
	unsigned int r, i, got, bad;
	char note[64];

	rails("mlx5_0,mlx5_1");
	cr_assert_geq(tc_engine_init(OPTS " --kvt-slice 16K"), 0);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	src = malloc(rounds * round);
	cr_assert_not_null(kvt_mem_register(src, rounds * round, NULL, 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " w", rounds * round);
	p = tc_open_peer(&t);
	b = kvt_batch_alloc(blocks);
	tc_peer_send(&t, "watch %u 0 20000000", rounds);
	for (r = 0; r < rounds; r++) {
		tc_fill(src + r * round, round, r + 1);
		for (i = 0; i < blocks; i++)
			x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE,
						  .local = src + r * round + i * len,
						  .remote = base + r * round + i * len,
						  .len = len };
		snprintf(note, sizeof(note), "%" PRIu64 " %" PRIu64 " %" PRIx64,
			 r * round, round, tc_hash(src + r * round, round));
		o.notify = note;
		o.notify_len = (uint32_t)strlen(note);
		kvt_batch_reset(b);
		cr_assert_geq(kvt_submit(b, p, x, blocks, &o), 0);
		cr_assert_eq(kvt_wait(b, 10000000), 0);
		for (i = 0; i < blocks; i++)
			cr_assert_eq(kvt_status(b, i), 0);
	}
	cr_assert_eq(tc_peer_reply(&t, note, sizeof(note)), 0, "%s", note);
	cr_assert_eq(sscanf(note, "%u %u", &got, &bad), 2, "%s", note);
	cr_assert_eq(got, rounds);
	cr_assert_eq(bad, 0, "%u rounds' bytes were not in place", bad);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/* Host memory on node 0 goes over node 0's NICs only. */
Test(rdma, topology_keeps_bytes_near, .timeout = 120, .fini = rails_fini)
{
	char root[256], opts[512], nic[128];
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(64 * MiB);
	uint64_t base, b0, b1, b2;
	unsigned int i;

	rails("mlx5_0,mlx5_1,mlx5_2");
	cr_assert_eq(st_root(root, sizeof(root)), 0);
	st_node(root, 0);
	st_node(root, 1);
	for (i = 0; i < 3; i++) {
		snprintf(nic, sizeof(nic), "pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0",
			 i * 0x40, i * 0x40, i * 0x40 + 1);
		snprintf(opts, sizeof(opts), "mlx5_%u", i);
		st_nic(root, opts, nic, i < 2 ? 0 : 1, "ACTIVE", "Ethernet");
	}
	snprintf(opts, sizeof(opts), "--kvt-pmd rdma,sysfs=%s --kvt-timeout 1000",
		 root);
	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	cr_assert_not_null(kvt_mem_register(src, 32 * MiB, "cpu:0", 0));
	cr_assert_not_null(kvt_mem_register(src + 32 * MiB, 32 * MiB, "cpu:1", 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " w", 64 * MiB);
	p = tc_open_peer(&t);
	tc_fill(src, 64 * MiB, 5);
	cr_assert_eq(write_blocks(p, src, base, 32, MiB, 30000000), 0);
	b0 = port_bytes("rdma:mlx5_0");
	b1 = port_bytes("rdma:mlx5_1");
	b2 = port_bytes("rdma:mlx5_2");
	cr_assert_eq(b0 + b1, 32 * MiB);
	cr_assert_eq(b2, 0, "node 1's NIC carried %" PRIu64 " bytes of node 0's memory", b2);
	cr_assert_gt(b0, 8 * MiB, "both node 0 NICs work: %" PRIu64 "/%" PRIu64, b0, b1);
	cr_assert_gt(b1, 8 * MiB, "both node 0 NICs work: %" PRIu64 "/%" PRIu64, b0, b1);
	cr_assert_eq(write_blocks(p, src + 32 * MiB, base + 32 * MiB, 32, MiB,
				  30000000), 0);
	cr_assert_eq(port_bytes("rdma:mlx5_2"), 32 * MiB);
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, 64 * MiB),
		     tc_hash(src, 64 * MiB));
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	st_remove(root);
	free(src);
}

/* A slow rail gets fewer slices, but still some. */
Test(rdma, striping_follows_rate, .timeout = 120, .fini = rails_fini)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(MiB);
	uint64_t base, fast, slow;
	unsigned int r;

	rails("mlx5_0,mlx5_1");
	vd_rail("mlx5_1")->rate_mbps = 800;	/* 100 MB/s */
	base = tc_pair_start(&t, OPTS, src, MiB, 64 * MiB, &p);
	for (r = 0; r < 40; r++)
		cr_assert_eq(write_blocks(p, src, base, 1, MiB, 30000000), 0);
	for (r = 0; r < 8; r++) {
		struct kvt_xfer x[64];
		struct kvt_batch *b = kvt_batch_alloc(64);
		unsigned int i;

		for (i = 0; i < 64; i++)
			x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
						  .remote = base + i * MiB, .len = MiB };
		cr_assert_geq(kvt_submit(b, p, x, 64, NULL), 0);
		cr_assert_eq(kvt_wait(b, 30000000), 0);
		kvt_batch_free(b);
	}
	fast = port_bytes("rdma:mlx5_0");
	slow = port_bytes("rdma:mlx5_1");
	cr_log_info("fast rail %" PRIu64 " MiB, slow rail %" PRIu64 " MiB",
		    fast / MiB, slow / MiB);
	cr_assert_gt(slow, 0, "the slow rail is still probed");
	cr_assert_lt(slow * 4, fast, "the slow rail got %" PRIu64 " of %" PRIu64,
		     slow, fast + slow);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/* A rail goes down mid-transfer: every request completes intact over the
 * other; when it returns it carries bytes again. */
Test(rdma, rail_down_and_back, .timeout = 120, .fini = rails_fini)
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

	rails("mlx5_0,mlx5_1");
	vd_rail("mlx5_1")->rate_mbps = 16000;	/* 2 GB/s: long enough to cut */
	vd_rail("mlx5_0")->rate_mbps = 16000;
	base = tc_pair_start(&t, OPTS, src, n * MiB / 4, n * MiB / 4, &p);
	tc_fill(src, n * MiB / 4, 77);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src + i * MiB / 4,
					  .remote = base + i * MiB / 4, .len = MiB / 4 };
	b = kvt_batch_alloc(n);
	cr_assert_geq(kvt_submit(b, p, x, n, NULL), 0);
	cut_when_busy("mlx5_1", b);
	cr_assert_eq(kvt_wait(b, 30000000), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(kvt_status(b, i), 0, "request %u: %s", i,
			     strerror(-kvt_status(b, i)));
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, n * MiB / 4),
		     tc_hash(src, n * MiB / 4));
	cr_assert_eq(kvt_port_stats((unsigned int)port_of("rdma:mlx5_1"), &st), 0);
	cr_log_info("mlx5_1: %" PRIu64 " slices, %" PRIu64 " moved away",
		    st.slices, st.retries);
	cr_assert_gt(st.retries, 0, "the cut rail had slices in flight");
	/* Back up: after the pause and the re-arm it carries bytes again. */
	vd_rail("mlx5_1")->down = 0;
	vd_rail("mlx5_1")->rate_mbps = 0;
	vd_rail("mlx5_0")->rate_mbps = 0;
	before = port_bytes("rdma:mlx5_1");
	t0 = tc_now_us();
	while (port_bytes("rdma:mlx5_1") == before && tc_now_us() - t0 < 20000000) {
		kvt_batch_reset(b);
		cr_assert_geq(kvt_submit(b, p, x, 64, NULL), 0);
		cr_assert_eq(kvt_wait(b, 30000000), 0);
		for (i = 0; i < 64; i++)
			cr_assert_eq(kvt_status(b, i), 0);
		usleep(20000);
	}
	cr_assert_gt(port_bytes("rdma:mlx5_1"), before,
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
	cr_assert_eq(tc_peer_cmd(t, notes + 1, 8191, "notes 300000"), 0);
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
Test(rdma, rail_cut_moves_tails, .timeout = 120, .fini = rails_fini)
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

	rails("mlx5_0,mlx5_1");
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
	cut_when_busy("mlx5_1", b);
	cr_assert_eq(kvt_wait(b, 30000000), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(kvt_status(b, i), 0, "request %u: %s", i,
			     strerror(-kvt_status(b, i)));
	cr_assert_eq(kvt_port_stats((unsigned int)port_of("rdma:mlx5_1"), &st), 0);
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
Test(rdma, lost_ack_notification_once, .timeout = 120, .fini = rails_fini)
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

	rails("mlx5_0,mlx5_1");
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
Test(rdma, single_error_recovers, .timeout = 120, .fini = rails_fini)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(32 * MiB);
	uint64_t base;
	unsigned int r;

	rails("mlx5_0,mlx5_1");
	base = tc_pair_start(&t, OPTS, src, 32 * MiB, 32 * MiB, &p);
	for (r = 0; r < 20; r++) {
		if (r == 2)
			vd_rail("mlx5_0")->fail_after = 7;
		tc_fill(src, 32 * MiB, r);
		cr_assert_eq(write_blocks(p, src, base, 32, MiB, 30000000), 0,
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
Test(rdma, all_rails_down, .timeout = 120, .fini = rails_fini)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(8 * MiB);
	uint64_t base, t0, el;
	int ret;

	rails("mlx5_0,mlx5_1");
	base = tc_pair_start(&t, OPTS, src, 8 * MiB, 8 * MiB, &p);
	cr_assert_eq(write_blocks(p, src, base, 8, MiB, 30000000), 0);
	vd_rail("mlx5_0")->down = 1;
	vd_rail("mlx5_1")->down = 1;
	t0 = tc_now_us();
	ret = write_blocks(p, src, base, 8, MiB, 10000000);
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
Test(rdma, peer_killed, .timeout = 120, .fini = rails_fini)
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

	rails("mlx5_0,mlx5_1");
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
