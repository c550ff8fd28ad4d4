/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The RDMA transport against the verbs TEST DOUBLE (verbs_double.c; no
 * RDMA NIC on these machines): the handshake encoding, bytes between two
 * processes over two rails (a page list and a block list too), fences
 * and notifications, striping by topology and by rate; rail failures are
 * in test_rdma_faults.c.  Real hardware: scripts/rdma-test.
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

Test(rdma, no_device, .fini = rdma_rails_fini)
{
	rdma_rails("");
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
Test(rdma, rxe_limits, .timeout = 120, .fini = rdma_rails_fini)
{
	static const uint64_t sizes[] = { 1, 4097, 8 * MiB, 8 * MiB + 1, 16 * MiB };
	struct vd_rail *r0, *r1;
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base, ft, req0;
	uint8_t *src;

	rdma_rails("rxe0,rxe1");
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
Test(rdma, small_device_limits, .timeout = 120, .fini = rdma_rails_fini)
{
	static const uint64_t sizes[] = { 1, 8, 9, 64, 4096 };
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base, ft;
	uint8_t *src, *big;

	rdma_rails("mlx5_0");
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

Test(rdma, data_fence_notify, .timeout = 120, .fini = rdma_rails_fini)
{
	static const uint64_t sizes[] = { 1, 60, 4095, 65536, MiB + 7, 16 * MiB };
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src;
	uint64_t base, ft, b0, b1;

	rdma_rails("mlx5_0,mlx5_1");
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
	b0 = rdma_port_bytes("rdma:mlx5_0");
	b1 = rdma_port_bytes("rdma:mlx5_1");
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
Test(rdma, unregister_closes, .timeout = 120, .fini = rdma_rails_fini)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t writes;

	rdma_rails("mlx5_0,mlx5_1");
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
Test(rdma, slices_to_work_requests, .timeout = 60, .fini = rdma_rails_fini)
{
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	struct vd_rail *rail;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(MiB);
	uint64_t base, ft, req, bytes, flushes;

	rdma_rails("mlx5_0");
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

/*
 * An engine here (8 KiB slices) and a peer, over two rails; pool bytes
 * registered here (*local) and at the peer, readable and writable by us.
 * @return the peer's region base.
 */
static uint64_t
two_rails_pair(struct tc_peer *t, uint64_t pool, uint8_t **local,
	       struct kvt_peer **p)
{
	uint64_t base;

	rdma_rails("mlx5_0,mlx5_1");
	cr_assert_geq(tc_engine_init(OPTS " --kvt-slice 8K"), 0);
	cr_assert_eq(tc_peer_start(t, OPTS), 0);
	*local = malloc(pool);
	cr_assert_not_null(*local);
	cr_assert_not_null(kvt_mem_register(*local, pool, NULL, 0));
	base = tc_peer_u64(t, 0, "alloc 0 %" PRIu64 " rw", pool);
	*p = tc_open_peer(t);
	return base;
}

/*
 * The batch's first submission, a write, succeeded: the peer's pool
 * bytes are mirror's, and both rails of two_rails_pair carried some.
 */
static void
landed_on_both_rails(struct tc_peer *t, struct kvt_batch *b,
		     const uint8_t *mirror, uint64_t pool)
{
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(tc_peer_u64(t, 16, "sum 0 0 %" PRIu64, pool),
		     tc_hash(mirror, pool));
	cr_assert_gt(rdma_port_bytes("rdma:mlx5_0"), 0);
	cr_assert_gt(rdma_port_bytes("rdma:mlx5_1"), 0);
}

/* A page list is striped over both rails like any request. */
Test(rdma, page_list, .timeout = 60, .fini = rdma_rails_fini)
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

	base = two_rails_pair(&t, pool, &local, &p);
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
	landed_on_both_rails(&t, b, mirror, pool);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(local);
	free(mirror);
}

/* A block list (blocks of mixed sizes at scattered addresses, as a
 * serving stack passes them) is striped over both rails, written and
 * read back into zeroed memory with every byte checked. */
Test(rdma, block_list, .timeout = 60, .fini = rdma_rails_fini)
{
	static const uint64_t sizes[] = { 4096, 1, 5000, 65536 + 7, 16384, 300 };
	const uint64_t slot = 128 << 10, pool = 200 * slot;
	uint64_t loc[200], rem[200], len[200], base;
	uint8_t *local, *mirror = calloc(1, pool);
	struct kvt_blocks bl;
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint32_t k;

	base = two_rails_pair(&t, pool, &local, &p);
	tc_fill(local, pool, 13);
	for (k = 0; k < 200; k++) {
		len[k] = sizes[k % 6];
		loc[k] = (uintptr_t)local + k * slot;
		rem[k] = base + ((k * 37u) % 200) * slot + (slot - len[k]) / 2;
		memcpy(mirror + (rem[k] - base), (void *)(uintptr_t)loc[k],
		       len[k]);
	}
	bl = (struct kvt_blocks){ .op = KVT_OP_WRITE, .n = 200, .local = loc,
				  .remote = rem, .len = len };
	b = kvt_batch_alloc(2);
	cr_assert_eq(kvt_submit_blocks(b, p, &bl, NULL), 0);
	landed_on_both_rails(&t, b, mirror, pool);
	memset(local, 0, pool);
	bl.op = KVT_OP_READ;
	cr_assert_eq(kvt_submit_blocks(b, p, &bl, NULL), 1);
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 1), 0);
	for (k = 0; k < 200; k++)
		cr_assert_eq(memcmp((void *)(uintptr_t)loc[k],
				    mirror + (rem[k] - base), len[k]), 0,
			     "block %u read back", k);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(local);
	free(mirror);
}

/* Notifications arrive after their data and in order: the receiver
 * checks each round's bytes when it reads the round's message. */
Test(rdma, notified_rounds, .timeout = 120, .fini = rdma_rails_fini)
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

	rdma_rails("mlx5_0,mlx5_1");
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
Test(rdma, topology_keeps_bytes_near, .timeout = 120, .fini = rdma_rails_fini)
{
	char root[256], opts[512], nic[128];
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(64 * MiB);
	uint64_t base, b0, b1, b2;
	unsigned int i;

	rdma_rails("mlx5_0,mlx5_1,mlx5_2");
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
	cr_assert_eq(rdma_write_blocks(p, src, base, 32, MiB, 30000000), 0);
	b0 = rdma_port_bytes("rdma:mlx5_0");
	b1 = rdma_port_bytes("rdma:mlx5_1");
	b2 = rdma_port_bytes("rdma:mlx5_2");
	cr_assert_eq(b0 + b1, 32 * MiB);
	cr_assert_eq(b2, 0, "node 1's NIC carried %" PRIu64 " bytes of node 0's memory", b2);
	cr_assert_gt(b0, 8 * MiB, "both node 0 NICs work: %" PRIu64 "/%" PRIu64, b0, b1);
	cr_assert_gt(b1, 8 * MiB, "both node 0 NICs work: %" PRIu64 "/%" PRIu64, b0, b1);
	cr_assert_eq(rdma_write_blocks(p, src + 32 * MiB, base + 32 * MiB, 32, MiB,
				  30000000), 0);
	cr_assert_eq(rdma_port_bytes("rdma:mlx5_2"), 32 * MiB);
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, 64 * MiB),
		     tc_hash(src, 64 * MiB));
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	st_remove(root);
	free(src);
}

/* A slow rail gets fewer slices, but still some. */
Test(rdma, striping_follows_rate, .timeout = 120, .fini = rdma_rails_fini)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(MiB);
	uint64_t base, fast, slow;
	unsigned int r;

	rdma_rails("mlx5_0,mlx5_1");
	vd_rail("mlx5_1")->rate_mbps = 800;	/* 100 MB/s */
	base = tc_pair_start(&t, OPTS, src, MiB, 64 * MiB, &p);
	for (r = 0; r < 40; r++)
		cr_assert_eq(rdma_write_blocks(p, src, base, 1, MiB, 30000000), 0);
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
	fast = rdma_port_bytes("rdma:mlx5_0");
	slow = rdma_port_bytes("rdma:mlx5_1");
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
