/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Transfers between engines in separate processes on one host over the shm
 * transport: data integrity, validation, overlap guard, fences,
 * notifications, peer loss.  The other engines are kvt-testpeer processes.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <rte_errno.h>

#include "kvt.h"
#include "test_assert.h"
#include "test_common.h"

#define WAIT_US (20ull * 1000 * 1000)

struct side {
	uint8_t *p;
	uint64_t len;
	struct kvt_mem *m;
};

static void
local_alloc(struct side *s, uint64_t len, uint32_t flags)
{
	s->len = len;
	s->p = kvt_mem_alloc(len, "cpu:0");
	cr_assert_not_null(s->p);
	s->m = kvt_mem_register(s->p, len, "cpu:0", flags);
	cr_assert_not_null(s->m, "register: %s", rte_strerror(rte_errno));
}

static uint64_t
peer_alloc(struct tc_peer *t, unsigned int id, uint64_t len, const char *how,
	   const char *perms)
{
	char buf[128];

	cr_assert_eq(tc_peer_cmd(t, buf, sizeof(buf), "%s %u %" PRIu64 " %s",
				 how, id, len, perms), 0, "%s", buf);
	return strtoull(buf, NULL, 0);
}

static uint64_t
peer_sum(struct tc_peer *t, unsigned int id, uint64_t off, uint64_t len)
{
	char buf[128];

	cr_assert_eq(tc_peer_cmd(t, buf, sizeof(buf), "sum %u %" PRIu64 " %" PRIu64,
				 id, off, len), 0, "%s", buf);
	return strtoull(buf, NULL, 16);
}

static void
start(struct tc_peer *t, const char *engine_opts, const char *peer_opts)
{
	cr_assert_geq(tc_engine_init(engine_opts), 0);
	cr_assert_eq(tc_peer_start(t, peer_opts), 0, "kvt-testpeer did not start");
}

/* Sizes 1 B .. 64 MiB at unaligned offsets, both directions, both ways of
 * reaching the peer's memory (memfd mapping and cross-memory attach). */
static void
sizes_roundtrip(const char *how)
{
	static const uint64_t sizes[] = { 1, 7, 4095, 4096, 65535, 65536, 65537,
					  MiB + 3, 16 * MiB, 64 * MiB };
	static const uint64_t offs[] = { 0, 1, 4093 };
	const uint64_t cap = 64 * MiB + 16384;
	struct tc_peer t;
	struct side src;
	struct kvt_peer *p;
	uint64_t base, seed = 1, off;
	unsigned int i, j;

	start(&t, "--kvt-pmd shm", "--kvt-pmd shm");
	local_alloc(&src, cap, 0);
	base = peer_alloc(&t, 0, cap, how, "rw");
	p = tc_open_peer(&t);
	for (i = 0; i < DIM(sizes); i++) {
		for (j = 0; j < DIM(offs); j++, seed++) {
			off = offs[j];
			tc_fill(src.p + off, sizes[i], seed);
			cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src.p + off,
					   base + off * 3, sizes[i], NULL, WAIT_US), 0);
			cr_assert_eq(peer_sum(&t, 0, off * 3, sizes[i]),
				     tc_hash(src.p + off, sizes[i]),
				     "write %s %" PRIu64 " B at +%" PRIu64, how,
				     sizes[i], off);
			cr_assert_eq(tc_peer_cmd(&t, NULL, 0, "fill 0 %" PRIu64 " %" PRIu64 " %" PRIu64,
						 off, sizes[i], seed + 1000), 0);
			memset(src.p + off * 2, 0, sizes[i]);
			cr_assert_eq(tc_xfer1(p, KVT_OP_READ, src.p + off * 2,
					   base + off, sizes[i], NULL, WAIT_US), 0);
			cr_assert_eq(tc_hash(src.p + off * 2, sizes[i]),
				     peer_sum(&t, 0, off, sizes[i]),
				     "read %s %" PRIu64 " B at +%" PRIu64, how,
				     sizes[i], off);
		}
	}
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

Test(shm, sizes_memfd, .timeout = 120)
{
	sizes_roundtrip("alloc");
}

Test(shm, sizes_cross_memory_attach, .timeout = 120)
{
	sizes_roundtrip("malloc");
}

/* Striping over several shm ports moves the same bytes. */
Test(shm, striped_ports, .timeout = 120)
{
	struct kvt_port_stats st;
	struct tc_peer t;
	struct side src;
	struct kvt_peer *p;
	uint64_t base, used = 0;
	unsigned int i;

	start(&t, "--kvt-pmd shm,ports=2", "--kvt-pmd shm,ports=2");
	local_alloc(&src, 32 * MiB, 0);
	base = peer_alloc(&t, 0, 32 * MiB, "alloc", "rw");
	p = tc_open_peer(&t);
	tc_fill(src.p, src.len, 77);
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src.p, base, src.len, NULL, WAIT_US), 0);
	cr_assert_eq(peer_sum(&t, 0, 0, src.len), tc_hash(src.p, src.len));
	for (i = 0; i < kvt_port_count(); i++) {
		cr_assert_eq(kvt_port_stats(i, &st), 0);
		cr_assert_gt(st.write_bytes, 0, "port %u carried nothing", i);
		used += st.write_bytes;
	}
	cr_assert_eq(used, src.len);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

struct thr {
	struct kvt_peer *p;
	uint8_t *src;
	uint64_t remote;
	uint64_t len;
	uint64_t seed;
	int failed;
};

static void *
writer(void *arg)
{
	struct thr *w = arg;
	struct kvt_xfer x[8];
	struct kvt_batch *b = kvt_batch_alloc(8);
	uint64_t chunk = w->len / 8;
	int round, i;

	for (round = 0; round < 40 && !w->failed; round++) {
		tc_fill(w->src, w->len, w->seed + (uint64_t)round);
		for (i = 0; i < 8; i++)
			x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE,
				.local = w->src + i * chunk,
				.remote = w->remote + i * chunk, .len = chunk };
		if (kvt_submit(b, w->p, x, 8, NULL) < 0 ||
		    kvt_wait(b, WAIT_US) != 0)
			w->failed = 1;
		for (i = 0; i < 8; i++)
			w->failed |= kvt_status(b, i) != 0;
		kvt_batch_reset(b);
	}
	kvt_batch_free(b);
	return NULL;
}

Test(shm, concurrent_batches_two_threads, .timeout = 120)
{
	struct thr w[2];
	pthread_t th[2];
	struct tc_peer t;
	struct side src;
	struct kvt_peer *p;
	uint64_t base, half = 8 * MiB;
	int i;

	start(&t, "--kvt-pmd shm", "--kvt-pmd shm");
	local_alloc(&src, 2 * half, 0);
	base = peer_alloc(&t, 0, 2 * half, "alloc", "w");
	p = tc_open_peer(&t);
	for (i = 0; i < 2; i++) {
		w[i] = (struct thr){ .p = p, .src = src.p + i * half,
			.remote = base + i * half, .len = half,
			.seed = 100 + 1000 * (uint64_t)i };
		pthread_create(&th[i], NULL, writer, &w[i]);
	}
	for (i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(w[i].failed, 0, "thread %d failed", i);
		cr_assert_eq(peer_sum(&t, 0, i * half, half),
			     tc_hash(src.p + i * half, half));
	}
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

/* Three engines: we write to A and B, and A writes to B. */
Test(shm, three_engines, .timeout = 120)
{
	struct tc_peer a, b;
	struct side src;
	struct kvt_peer *pa, *pb;
	uint64_t ba, bb;
	char buf[64];

	start(&a, "--kvt-pmd shm", "--kvt-pmd shm");
	cr_assert_eq(tc_peer_start(&b, "--kvt-pmd shm"), 0);
	local_alloc(&src, 4 * MiB, 0);
	ba = peer_alloc(&a, 0, 4 * MiB, "alloc", "rw");
	bb = peer_alloc(&b, 0, 8 * MiB, "alloc", "rw");
	pa = tc_open_peer(&a);
	pb = tc_open_peer(&b);
	tc_fill(src.p, src.len, 5);
	cr_assert_eq(tc_xfer1(pa, KVT_OP_WRITE, src.p, ba, src.len, NULL, WAIT_US), 0);
	cr_assert_eq(tc_xfer1(pb, KVT_OP_WRITE, src.p, bb, src.len, NULL, WAIT_US), 0);
	cr_assert_eq(tc_peer_cmd(&a, buf, sizeof(buf), "open %s", b.addr), 0, "%s", buf);
	cr_assert_eq(tc_peer_num(&a, "write 0 0 %" PRIx64 " %" PRIu64,
				 bb + 4 * MiB, 4 * MiB), 0);
	cr_assert_eq(peer_sum(&a, 0, 0, 4 * MiB), tc_hash(src.p, src.len));
	cr_assert_eq(peer_sum(&b, 0, 0, 4 * MiB), tc_hash(src.p, src.len));
	cr_assert_eq(peer_sum(&b, 0, 4 * MiB, 4 * MiB), tc_hash(src.p, src.len));
	kvt_peer_close(pa);
	kvt_peer_close(pb);
	tc_peer_stop(&a);
	tc_peer_stop(&b);
	kvt_fini();
}

static uint64_t
slices_total(void)
{
	struct kvt_port_stats st;
	uint64_t n = 0;
	unsigned int i;

	for (i = 0; i < kvt_port_count(); i++) {
		kvt_port_stats(i, &st);
		n += st.slices;
	}
	return n;
}

static int
submit1(struct kvt_batch *b, struct kvt_peer *p, uint32_t op, void *local,
	uint64_t remote, uint64_t len, const struct kvt_submit_opts *o)
{
	struct kvt_xfer x = { .op = op, .local = local, .remote = remote,
			      .len = len };

	return kvt_submit(b, p, &x, 1, o);
}

/* Each refusal has its own errno, and nothing is queued. */
Test(shm, validation_errors, .timeout = 120)
{
	struct kvt_submit_opts o = { 0 };
	struct kvt_xfer bad = { .op = KVT_OP_WRITE, .rsvd = 1, .len = 1 };
	static uint8_t unreg[4096];
	struct tc_peer t;
	struct side src;
	struct kvt_peer *p;
	struct kvt_batch *b;
	uint64_t rw, ro, wo, ft, before;
	char notebig[KVT_NOTIFY_MAX + 1] = "";
	char buf[64];

	start(&t, "--kvt-pmd shm", "--kvt-pmd shm");
	local_alloc(&src, MiB, 0);
	rw = peer_alloc(&t, 0, MiB, "alloc", "rw");
	ro = peer_alloc(&t, 1, MiB, "alloc", "r");
	wo = peer_alloc(&t, 2, MiB, "alloc", "w");
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "fence 4"), 0);
	ft = strtoull(buf, NULL, 0);
	p = tc_open_peer(&t);
	b = kvt_batch_alloc(2);
	before = slices_total();

	cr_assert_eq(submit1(b, p, 9, src.p, rw, 1, NULL), -EINVAL);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw, 0, NULL), -EINVAL);
	bad.local = src.p;
	bad.remote = rw;
	cr_assert_eq(kvt_submit(b, p, &bad, 1, NULL), -EINVAL);
	cr_assert_eq(kvt_submit(NULL, p, &bad, 1, NULL), -EINVAL);
	cr_assert_eq(kvt_submit(b, NULL, &bad, 1, NULL), -EINVAL);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, unreg, rw, 1, NULL), -EFAULT);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p + MiB - 1, rw, 2, NULL),
		     -EFAULT);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw + MiB, 1, NULL),
		     -ERANGE);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw + MiB - 1, 2, NULL),
		     -ERANGE);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, 0x1000, 1, NULL),
		     -ERANGE);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, ro, 1, NULL), -EPERM);
	cr_assert_eq(submit1(b, p, KVT_OP_READ, src.p, wo, 1, NULL), -EPERM);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, ft, 8, NULL), -EPERM,
		     "a fence table is not a data region");
	o.flags = KVT_SUBMIT_FENCE;
	o.fence = (struct kvt_fence_ref){ .table = rw, .slot = 0, .room = 1 };
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw, 1, &o), -ENOENT);
	o.fence.table = ft;
	o.fence.slot = 4;
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw, 1, &o), -ENOENT);
	o.fence.slot = 0;
	o.fence.room = 0;
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw, 1, &o), -EINVAL);
	o = (struct kvt_submit_opts){ .flags = 0x80 };
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw, 1, &o), -EINVAL);
	o = (struct kvt_submit_opts){ .notify = notebig,
				      .notify_len = sizeof(notebig) };
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw, 1, &o), -EINVAL);
	cr_assert_eq(slices_total(), before, "a refused submit queued work");

	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw, 4096, NULL), 0);
	cr_assert_eq(submit1(b, p, KVT_OP_READ, src.p + 4096, ro, 4096, NULL), 1);
	cr_assert_eq(submit1(b, p, KVT_OP_READ, src.p, ro, 1, NULL), -ENOSPC);
	/* In flight or not yet reaped: the region is in use. */
	cr_assert_eq(kvt_mem_unregister(src.m), -EBUSY);
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(kvt_status(b, 1), 0);
	cr_assert_eq(kvt_status(b, 2), -EINVAL);
	cr_assert_eq(kvt_batch_reset(b), 0);
	cr_assert_eq(kvt_mem_unregister(src.m), 0);
	cr_assert_eq(kvt_mem_unregister(src.m), -EINVAL);
	cr_assert_eq(submit1(b, p, KVT_OP_WRITE, src.p, rw, 1, NULL), -EFAULT);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

Test(shm, overlap_refused, .timeout = 120)
{
	struct kvt_submit_opts allow = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	struct kvt_xfer two[2];
	struct tc_peer t;
	struct side src;
	struct kvt_peer *p;
	struct kvt_batch *b1, *b2;
	uint64_t base;

	start(&t, "--kvt-pmd shm", "--kvt-pmd shm");
	local_alloc(&src, 64 * MiB, 0);
	base = peer_alloc(&t, 0, 128 * MiB, "alloc", "rw");
	p = tc_open_peer(&t);
	b1 = kvt_batch_alloc(8);
	b2 = kvt_batch_alloc(8);
	cr_assert_eq(submit1(b1, p, KVT_OP_WRITE, src.p, base, 64 * MiB, NULL), 0);
	/* Not reaped yet, so in flight: any overlap is refused. */
	cr_assert_eq(submit1(b2, p, KVT_OP_WRITE, src.p, base + 64 * MiB - 1, 2,
			     NULL), -EBUSY);
	cr_assert_eq(submit1(b1, p, KVT_OP_WRITE, src.p, base + 5, 1, NULL),
		     -EBUSY);
	/* Disjoint, a read, or an explicit opt-out: accepted. */
	cr_assert_eq(submit1(b2, p, KVT_OP_WRITE, src.p, base + 64 * MiB, 4096,
			     NULL), 0);
	cr_assert_eq(submit1(b2, p, KVT_OP_READ, src.p, base, 4096, NULL), 1);
	cr_assert_eq(submit1(b2, p, KVT_OP_WRITE, src.p, base, 4096, &allow), 2);
	/* Two writes of one submission that overlap each other. */
	two[0] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src.p,
				    .remote = base + 100 * MiB, .len = 4096 };
	two[1] = two[0];
	two[1].remote += 4095;
	cr_assert_eq(kvt_submit(b2, p, two, 2, NULL), -EBUSY);
	cr_assert_eq(kvt_wait(b1, WAIT_US), 0);
	cr_assert_eq(kvt_wait(b2, WAIT_US), 0);
	cr_assert_eq(submit1(b2, p, KVT_OP_WRITE, src.p, base, 4096, NULL), 3);
	cr_assert_eq(kvt_wait(b2, WAIT_US), 0);
	kvt_batch_free(b1);
	kvt_batch_free(b2);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

/* Poll our view of the peer until a fence table shows up. */
static void
wait_region(struct kvt_peer *p, uint64_t base)
{
	struct kvt_region r[16];
	uint64_t until = tc_now_us() + 5000000;
	int n, i;

	while (tc_now_us() < until) {
		n = kvt_peer_regions(p, r, 16);
		for (i = 0; i < n && i < 16; i++)
			if (r[i].base == base)
				return;
		usleep(1000);
	}
	cr_assert_fail("region %#" PRIx64 " never announced", base);
}

static void
fences(const char *pmd)
{
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	struct tc_peer t;
	struct side src;
	struct kvt_peer *p;
	uint64_t base, ft, room;
	char buf[64];

	start(&t, pmd, pmd);
	local_alloc(&src, 8 * MiB, 0);
	base = peer_alloc(&t, 0, 8 * MiB, "alloc", "rw");
	p = tc_open_peer(&t);
	/* Created after the open: it reaches us as a region update. */
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "fence 4"), 0);
	ft = strtoull(buf, NULL, 0);
	wait_region(p, ft);

	/* Exact match; the data is there once the fence is. */
	tc_fill(src.p, 8 * MiB, 1);
	cr_assert_eq(tc_peer_num(&t, "arm 0 7"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 0, .room = 7 };
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src.p, base, 8 * MiB, &o, WAIT_US), 0);
	cr_assert_eq(tc_peer_num(&t, "fwait 0 5000000"), 0);
	cr_assert_eq(peer_sum(&t, 0, 0, 8 * MiB), tc_hash(src.p, 8 * MiB));

	/* A room the receiver did not arm is stale, never a success. */
	cr_assert_eq(tc_peer_num(&t, "arm 1 8"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 1, .room = 9 };
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src.p, base, 4096, &o, WAIT_US), 0);
	cr_assert_eq(tc_peer_num(&t, "fwait 1 5000000"), -ESTALE);
	cr_assert_eq(tc_peer_num(&t, "fpoll 3"), -EAGAIN);

	/* One slot reused across many rooms. */
	for (room = 100; room < 400; room++) {
		tc_fill(src.p, MiB, room);
		cr_assert_eq(tc_peer_num(&t, "arm 2 %" PRIu64, room), 0);
		o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 2,
						  .room = room };
		cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src.p, base, MiB, &o, WAIT_US), 0);
		cr_assert_eq(tc_peer_num(&t, "fwait 2 5000000"), 0, "room %" PRIu64, room);
		cr_assert_eq(peer_sum(&t, 0, 0, MiB), tc_hash(src.p, MiB),
			     "room %" PRIu64 ": data not there with its fence", room);
	}
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

Test(shm, fences_ordered, .timeout = 120)
{
	fences("--kvt-pmd shm");
}

Test(shm, fences_striped, .timeout = 120)
{
	fences("--kvt-pmd shm,ports=3");
}

/*
 * The receiver checks each notification's data the moment it sees it.
 * Every write has its own block, so a later write cannot make an early
 * notification look right (or wrong).
 */
static void
notify_after_data(const char *pmd)
{
	const unsigned int n = 400, inflight = 8;
	const uint64_t blk = 64 << 10;
	struct kvt_submit_opts o = { 0 };
	struct kvt_batch *b[8];
	struct tc_peer t;
	struct side src;
	struct kvt_peer *p;
	uint64_t base, off;
	unsigned int i, got = 0, bad = 0;
	char msg[KVT_NOTIFY_MAX], buf[64];

	start(&t, pmd, pmd);
	local_alloc(&src, n * blk, 0);
	base = peer_alloc(&t, 0, n * blk, "alloc", "rw");
	p = tc_open_peer(&t);
	for (i = 0; i < inflight; i++)
		b[i] = kvt_batch_alloc(1);
	tc_peer_send(&t, "watch %u 0 30000000", n);
	for (i = 0; i < n; i++) {
		struct kvt_batch *bb = b[i % inflight];

		off = i * blk;
		if (i >= inflight) {
			cr_assert_eq(kvt_wait(bb, WAIT_US), 0);
			cr_assert_eq(kvt_status(bb, 0), 0, "write %u: %s", i - inflight,
				     strerror(-kvt_status(bb, 0)));
			kvt_batch_reset(bb);
		}
		tc_fill(src.p + off, blk, i + 1);
		snprintf(msg, sizeof(msg), "%" PRIu64 " %" PRIu64 " %" PRIx64,
			 off, blk, tc_hash(src.p + off, blk));
		o.notify = msg;
		o.notify_len = (uint32_t)strlen(msg);
		cr_assert_geq(submit1(bb, p, KVT_OP_WRITE, src.p + off,
				      base + off, blk, &o), 0);
	}
	for (i = 0; i < inflight; i++) {
		cr_assert_eq(kvt_wait(b[i], WAIT_US), 0);
		kvt_batch_free(b[i]);
	}
	cr_assert_eq(tc_peer_reply(&t, buf, sizeof(buf)), 0);
	cr_assert_eq(sscanf(buf, "%u %u", &got, &bad), 2);
	cr_assert_eq(got, n, "%u of %u notifications arrived", got, n);
	cr_assert_eq(bad, 0, "%u notifications arrived before their data", bad);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

Test(shm, notify_after_data_ordered, .timeout = 120)
{
	notify_after_data("--kvt-pmd shm");
}

Test(shm, notify_after_data_striped, .timeout = 120)
{
	notify_after_data("--kvt-pmd shm,ports=3");
}

/* A peer killed mid-batch: no hang, the right status, the others carry
 * on, and it can be reopened once restarted. */
Test(shm, peer_killed_mid_batch, .timeout = 120)
{
	const unsigned int n = 8192;
	const uint64_t blk = 64 << 10;
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct tc_peer victim, other;
	struct kvt_peer *pv, *po;
	struct kvt_batch *b;
	struct side src;
	uint64_t base, ob, t0;
	unsigned int i, ok = 0, lost = 0;
	char opts[64], port[16];
	int st;

	start(&victim, "--kvt-pmd shm", "--kvt-pmd shm");
	cr_assert_eq(tc_peer_start(&other, "--kvt-pmd shm"), 0);
	local_alloc(&src, blk, 0);
	base = peer_alloc(&victim, 0, n * blk, "alloc", "w");
	ob = peer_alloc(&other, 0, blk, "alloc", "w");
	pv = tc_open_peer(&victim);
	po = tc_open_peer(&other);
	b = kvt_batch_alloc(n);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src.p,
			.remote = base + i * blk, .len = blk };
	cr_assert_eq(kvt_submit(b, pv, x, n, NULL), 0);
	kill(victim.pid, SIGKILL);
	t0 = tc_now_us();
	cr_assert_eq(kvt_wait(b, 3000000), 0, "batch hung after the peer died");
	cr_assert_lt(tc_now_us() - t0, 2000000);
	for (i = 0; i < n; i++) {
		st = kvt_status(b, i);
		cr_assert(st == 0 || st == -ECONNRESET || st == -ETIMEDOUT,
			  "xfer %u: %d", i, st);
		ok += st == 0;
		lost += st != 0;
	}
	/* shm writes are one-sided, into memory the dead process shared:
	 * requests may land until the loss is seen, however late that is on
	 * a loaded box (so no count is asserted; test_tcp asserts failures,
	 * where a dead peer cannot acknowledge). */
	cr_log_info("before the loss was seen %u requests landed, %u failed", ok, lost);
	/* The control thread sees the loss within a moment (bounded). */
	while (kvt_peer_state(pv) == 0 && tc_now_us() - t0 < 2000000)
		usleep(1000);
	cr_assert_eq(kvt_peer_state(pv), -ECONNRESET);
	cr_assert_eq(kvt_submit(b, pv, x, 1, NULL), -ECONNRESET);
	/* The other peer does not notice. */
	tc_fill(src.p, blk, 3);
	cr_assert_eq(tc_xfer1(po, KVT_OP_WRITE, src.p, ob, blk, NULL, WAIT_US), 0);
	cr_assert_eq(peer_sum(&other, 0, 0, blk), tc_hash(src.p, blk));
	/* Restart on the same address and reopen. */
	tc_peer_kill(&victim);
	strcpy(port, strrchr(victim.addr, ':') + 1);
	snprintf(opts, sizeof(opts), "--kvt-pmd shm --kvt-listen 127.0.0.1:%s", port);
	cr_assert_eq(tc_peer_start(&victim, opts), 0);
	base = peer_alloc(&victim, 0, blk, "alloc", "w");
	cr_assert_eq(kvt_peer_close(pv), 0);
	pv = tc_open_peer(&victim);
	cr_assert_eq(tc_xfer1(pv, KVT_OP_WRITE, src.p, base, blk, NULL, WAIT_US), 0);
	cr_assert_eq(peer_sum(&victim, 0, 0, blk), tc_hash(src.p, blk));
	kvt_batch_free(b);
	kvt_peer_close(pv);
	kvt_peer_close(po);
	tc_peer_stop(&victim);
	tc_peer_stop(&other);
	kvt_fini();
	free(x);
}

/*
 * Requests of a striped submission settle one by one; once kvt_status()
 * has seen them all, the batch can be reset at once (the lcore's last
 * store is waited out, not reported as -EBUSY).
 */
Test(shm, reset_right_after_status, .timeout = 120)
{
	const unsigned int n = 8, rounds = 3000;
	struct kvt_xfer x[8];
	struct kvt_batch *b;
	struct tc_peer t;
	struct side src;
	struct kvt_peer *p;
	uint64_t base;
	unsigned int r, i;

	start(&t, "--kvt-pmd shm,ports=2 --kvt-idle spin --kvt-slice 4K",
	      "--kvt-pmd shm");
	local_alloc(&src, MiB, 0);
	base = peer_alloc(&t, 0, MiB, "alloc", "w");
	p = tc_open_peer(&t);
	b = kvt_batch_alloc(n);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE,
					  .local = src.p + i * 8192,
					  .remote = base + i * 8192, .len = 8192 };
	for (r = 0; r < rounds; r++) {
		cr_assert_geq(kvt_submit(b, p, x, n, NULL), 0);
		for (i = 0; i < n; i++)
			while (kvt_status(b, i) == -EINPROGRESS)
				kvt_poll(b);
		cr_assert_eq(kvt_batch_reset(b), 0, "round %u", r);
	}
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}
