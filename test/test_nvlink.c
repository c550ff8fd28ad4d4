/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The NVLink transport between two processes on two GPUs.  Needs a CUDA
 * build and two GPUs; elsewhere every test skips and says why.  Run on
 * the GPU machine with scripts/gpu-test.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <criterion/criterion.h>
#include <jansson.h>
#include <rte_errno.h>

#include "kvt.h"
#include "kvt_pmd.h"
#include "test_assert.h"
#include "test_common.h"
#ifdef KVT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "test_cuda.h"
#endif

/* Skip unless want GPUs are usable. */
static void
need_gpus(int want)
{
#ifdef KVT_HAVE_CUDA
	char why[256] = "";
	int n = tc_cuda_devices(why, sizeof(why));

	if (n < 0)
		cr_skip_test("no CUDA device: %s", why);
	if (n < want)
		cr_skip_test("needs %d GPUs, found %d", want, n);
#else
	RTE_SET_USED(want);
	cr_skip_test("built without CUDA (meson -Dcuda=enabled)");
#endif
}

static void
need_two_gpus(void)
{
	need_gpus(2);
}

#ifdef KVT_HAVE_CUDA

static uint64_t
peer_sum(struct tc_peer *t, uint64_t off, uint64_t len)
{
	char buf[128];

	cr_assert_eq(tc_peer_cmd(t, buf, sizeof(buf), "sum 0 %" PRIu64 " %" PRIu64,
				 off, len), 0, "%s", buf);
	return strtoull(buf, NULL, 16);
}

/* Our engine on GPU 0, a kvt-testpeer whose buffer is on GPU dev. */
static struct kvt_peer *
setup_on(struct tc_peer *t, uint64_t len, uint8_t **local, uint64_t *remote,
	 int dev)
{
	struct kvt_peer *p;

	cr_assert_geq(tc_engine_init("--kvt-pmd shm --kvt-pmd nvlink"), 0);
	cr_assert_eq(tc_peer_start(t, "--kvt-pmd shm --kvt-pmd nvlink"), 0);
	*local = kvt_mem_alloc(len, "cuda:0");
	cr_assert_not_null(*local, "cuda:0 alloc: %s", rte_strerror(rte_errno));
	cr_assert_not_null(kvt_mem_register(*local, len, "cuda:0", 0));
	*remote = tc_peer_u64(t, 0, "calloc 0 %" PRIu64 " rw %d", len, dev);
	p = kvt_peer_open(t->addr, 10000);
	cr_assert_not_null(p, "open: %s", rte_strerror(rte_errno));
	return p;
}

/* Our engine on GPU 0, a kvt-testpeer whose buffer is on GPU 1. */
static struct kvt_peer *
setup(struct tc_peer *t, uint64_t len, uint8_t **local, uint64_t *remote)
{
	return setup_on(t, len, local, remote, 1);
}

#endif

/* GPU0 -> GPU1 and back, 1 B to 1 GiB, unaligned too. */
Test(nvlink, sizes_both_ways, .timeout = 600)
{
	need_two_gpus();
#ifdef KVT_HAVE_CUDA
	static const uint64_t sizes[] = { 1, 7, 4095, 4096, 65536, 65537, MiB + 3,
					  16 * MiB, 256 * MiB, GiB };
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *local;
	uint64_t remote, seed = 1, off;
	unsigned int i;

	p = setup(&t, GiB + 8192, &local, &remote);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++, seed++) {
		off = sizes[i] < MiB ? 4093 : 0;
		cr_assert_eq(tc_cuda_fill(local + off, sizes[i], seed), 0);
		cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, local + off, remote + off,
				   sizes[i], NULL, 60000000), 0, "write %" PRIu64, sizes[i]);
		cr_assert_eq(peer_sum(&t, off, sizes[i]),
			     tc_cuda_hash(local + off, sizes[i]),
			     "GPU0->GPU1 %" PRIu64 " B damaged", sizes[i]);
		cr_assert_eq(tc_peer_cmd(&t, NULL, 0, "fill 0 %" PRIu64 " %" PRIu64 " %" PRIu64,
					 off, sizes[i], seed + 100), 0);
		cr_assert_eq(tc_xfer1(p, KVT_OP_READ, local + off, remote + off,
				   sizes[i], NULL, 60000000), 0, "read %" PRIu64, sizes[i]);
		cr_assert_eq(tc_cuda_hash(local + off, sizes[i]),
			     peer_sum(&t, off, sizes[i]),
			     "GPU1->GPU0 %" PRIu64 " B damaged", sizes[i]);
	}
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/* Many small pages in one submission (the gather kernel's case): every
 * page lands where it was sent, and the fence only after all of them. */
Test(nvlink, scattered_pages_with_fence, .timeout = 300)
{
	need_two_gpus();
#ifdef KVT_HAVE_CUDA
	const unsigned int n = 4096;
	const uint64_t pg = 4096;
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_batch *b = NULL;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *local;
	uint64_t remote, ft;
	unsigned int i;
	char buf[64];

	p = setup(&t, n * pg, &local, &remote);
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "fence 16"), 0);
	ft = strtoull(buf, NULL, 0);
	kvt_peer_close(p);
	p = kvt_peer_open(t.addr, 10000);	/* the fence table is known now */
	cr_assert_eq(tc_cuda_fill(local, n * pg, 42), 0);
	/* Reverse the page order: every page lands somewhere else. */
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE,
			.local = local + (uint64_t)i * pg,
			.remote = remote + (uint64_t)(n - 1 - i) * pg, .len = pg };
	cr_assert_eq(tc_peer_num(&t, "arm 3 77"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 3, .room = 77 };
	b = kvt_batch_alloc(n);
	cr_assert_eq(kvt_submit(b, p, x, n, &o), 0);
	cr_assert_eq(tc_peer_num(&t, "fwait 3 10000000"), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(peer_sum(&t, (uint64_t)(n - 1 - i) * pg, pg),
			     tc_cuda_hash(local + (uint64_t)i * pg, pg),
			     "page %u", i);
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	kvt_batch_free(b);
	free(x);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/* The same as one page list: scattered both sides, fence after. */
Test(nvlink, page_list_with_fence, .timeout = 300)
{
	need_two_gpus();
#ifdef KVT_HAVE_CUDA
	const uint32_t n = 4096;
	const uint64_t pg = 4096;
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	uint32_t *li = malloc(n * 4), *ri = malloc(n * 4), k;
	struct kvt_batch *b;
	struct kvt_pages pl;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *local;
	uint64_t remote, ft;
	char buf[64];

	p = setup(&t, n * pg, &local, &remote);
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "fence 16"), 0);
	ft = strtoull(buf, NULL, 0);
	kvt_peer_close(p);
	p = kvt_peer_open(t.addr, 10000);
	cr_assert_eq(tc_cuda_fill(local, n * pg, 43), 0);
	for (k = 0; k < n; k++) {
		li[k] = (k * 40503u) % n;
		ri[k] = (k * 2654435761u) % n;
	}
	cr_assert_eq(tc_peer_num(&t, "arm 5 78"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 5, .room = 78 };
	pl = (struct kvt_pages){ .op = KVT_OP_WRITE, .n = n, .page_size = pg,
				 .local = local, .remote = remote,
				 .local_idx = li, .remote_idx = ri };
	b = kvt_batch_alloc(1);
	cr_assert_eq(kvt_submit_pages(b, p, &pl, &o), 0);
	cr_assert_eq(tc_peer_num(&t, "fwait 5 10000000"), 0);
	for (k = 0; k < n; k += 97)
		cr_assert_eq(peer_sum(&t, (uint64_t)ri[k] * pg, pg),
			     tc_cuda_hash(local + (uint64_t)li[k] * pg, pg),
			     "page %u", k);
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	/* A list of one page takes the resident kernel: the same promise. */
	kvt_batch_reset(b);
	cr_assert_eq(tc_cuda_fill(local + 3 * pg, pg, 44), 0);
	li[0] = 3;
	ri[0] = n - 2;
	pl.n = 1;
	cr_assert_eq(tc_peer_num(&t, "arm 6 79"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 6, .room = 79 };
	cr_assert_eq(kvt_submit_pages(b, p, &pl, &o), 0);
	cr_assert_eq(tc_peer_num(&t, "fwait 6 10000000"), 0);
	cr_assert_eq(peer_sum(&t, (uint64_t)(n - 2) * pg, pg),
		     tc_cuda_hash(local + 3 * pg, pg), "the single page");
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	kvt_batch_free(b);
	free(li);
	free(ri);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/*
 * A block list over two local tensors (runs of 1 to 5 blocks from each in
 * turn), blocks of 1 byte to 64 KiB scattered over the peer's buffer
 * (GPU 1, or GPU 0 in the other process), a fence after it: the gather
 * kernel takes the list whole.  Every block checked, then read back.
 */
Test(nvlink, block_list_two_tensors, .timeout = 300)
{
	need_gpus(1);
#ifdef KVT_HAVE_CUDA
	static const uint64_t sizes[] = { 4096, 1, 5000, 65536, 300, 16384 };
	const uint32_t n = 2048;
	const uint64_t slot = 65536, len = n * slot;
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	uint64_t *loc = calloc(n, 8), *rem = calloc(n, 8), *ln = calloc(n, 8);
	struct kvt_blocks bl = { .op = KVT_OP_WRITE, .n = n, .local = loc,
				 .remote = rem, .len = ln };
	uint8_t *local[2];
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t remote, ft, h[2048];
	uint32_t k, left = 0, which = 0;
	char buf[64];
	int ndev = tc_cuda_devices(buf, sizeof(buf));

	p = setup_on(&t, len, &local[0], &remote, ndev >= 2 ? 1 : 0);
	local[1] = kvt_mem_alloc(len, "cuda:0");
	cr_assert_not_null(kvt_mem_register(local[1], len, "cuda:0", 0));
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "fence 16"), 0);
	ft = strtoull(buf, NULL, 0);
	kvt_peer_close(p);
	p = kvt_peer_open(t.addr, 10000);
	cr_assert_eq(tc_cuda_fill(local[0], len, 51), 0);
	cr_assert_eq(tc_cuda_fill(local[1], len, 52), 0);
	for (k = 0; k < n; k++) {
		if (left == 0) {
			which ^= 1;
			left = 1 + k % 5;
		}
		left--;
		ln[k] = sizes[k % 6];
		loc[k] = (uintptr_t)local[which] + (uint64_t)k * slot;
		rem[k] = remote + (uint64_t)((k * 40503u) % n) * slot;
		h[k] = tc_cuda_hash((void *)(uintptr_t)loc[k], ln[k]);
	}
	cr_assert_eq(tc_peer_num(&t, "arm 3 79"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 3, .room = 79 };
	b = kvt_batch_alloc(n);
	cr_assert_eq(kvt_submit_blocks(b, p, &bl, &o), 0);
	cr_assert_eq(tc_peer_num(&t, "fwait 3 10000000"), 0);
	for (k = 0; k < n; k++)
		cr_assert_eq(peer_sum(&t, rem[k] - remote, ln[k]), h[k],
			     "block %u", k);
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(kvt_batch_reset(b), 0);
	/* Back into zeroed tensors. */
	cr_assert_eq(cudaMemset(local[0], 0, len), cudaSuccess);
	cr_assert_eq(cudaMemset(local[1], 0, len), cudaSuccess);
	cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
	bl.op = KVT_OP_READ;
	cr_assert_eq(kvt_submit_blocks(b, p, &bl, NULL), 0);
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	for (k = 0; k < n; k++)
		cr_assert_eq(tc_cuda_hash((void *)(uintptr_t)loc[k], ln[k]), h[k],
			     "block %u read back", k);
	kvt_batch_free(b);
	free(loc);
	free(rem);
	free(ln);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/* The source is written by a late kernel on another stream; the submit
 * only carries its event.  The destination must hold the new bytes. */
Test(nvlink, event_guards_the_source, .timeout = 300)
{
	need_two_gpus();
#ifdef KVT_HAVE_CUDA
	const uint64_t len = 8 * MiB;
	struct kvt_submit_opts o = { 0 };
	struct kvt_xfer x;
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	cudaStream_t s;
	cudaEvent_t ev;
	uint8_t *local, *want;
	uint64_t remote, n;
	int round;

	p = setup(&t, len, &local, &remote);
	want = malloc(len);
	cr_assert_eq(cudaSetDevice(0), cudaSuccess);
	cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	cr_assert_eq(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
	b = kvt_batch_alloc(1);
	for (round = 1; round <= 20; round++) {
		/* Odd rounds are small: an event keeps them off the resident
		 * kernel, on the stream that waits for it. */
		n = round % 2 ? 4096 : len;
		cr_assert_eq(tc_cuda_slow_fill(local, n, (uint8_t)round, 2000, s), 0);
		cr_assert_eq(cudaEventRecord(ev, s), cudaSuccess);
		o.cuda_event = ev;
		x = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = local,
				       .remote = remote, .len = n };
		cr_assert_eq(kvt_submit(b, p, &x, 1, &o), 0);
		cr_assert_eq(kvt_wait(b, 10000000), 0);
		cr_assert_eq(kvt_status(b, 0), 0);
		kvt_batch_reset(b);
		memset(want, round, n);
		cr_assert_eq(peer_sum(&t, 0, n), tc_hash(want, n),
			     "round %d: stale source bytes arrived", round);
	}
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/* A fence table in GPU memory, waited on by a kernel. */
Test(nvlink, device_fence_stream_wait, .timeout = 300)
{
	need_two_gpus();
#ifdef KVT_HAVE_CUDA
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *local;
	uint64_t remote, ft;
	char buf[64];
	unsigned int ret, st;

	p = setup(&t, MiB, &local, &remote);
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "fence 8 cuda:1"), 0, "%s", buf);
	ft = strtoull(buf, NULL, 0);
	kvt_peer_close(p);
	p = kvt_peer_open(t.addr, 10000);
	cr_assert_eq(tc_peer_num(&t, "arm 5 1234"), 0);
	cr_assert_eq(tc_cuda_fill(local, MiB, 9), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 5, .room = 1234 };
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, local, remote, MiB, &o, 60000000), 0);
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "fwaitstream 5 5000000"), 0);
	cr_assert_eq(sscanf(buf, "%u %u", &ret, &st), 2);
	cr_assert_eq(ret, 0);
	cr_assert_eq(st, 1, "stream wait status %u", st);
	cr_assert_eq(peer_sum(&t, 0, MiB), tc_cuda_hash(local, MiB));
	cr_assert_eq(tc_peer_num(&t, "fpoll 5"), 0);
	cr_assert_eq(tc_peer_num(&t, "arm 5 99"), 0);
	cr_assert_eq(tc_peer_num(&t, "fpoll 5"), -EAGAIN);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/*
 * Small requests go to a lane's resident kernel, others to its stream:
 * many of each in flight at once, all bytes must land, with fences and
 * notifications on the small ones.
 */
Test(nvlink, small_and_large_in_flight, .timeout = 300)
{
	need_two_gpus();
#ifdef KVT_HAVE_CUDA
	static const uint64_t sizes[] = { 4096, 8 * MiB, 100 << 10, 1, 64 << 10,
					  (64 << 10) + 1 };
	enum { ROUNDS = 16, N = ROUNDS * 6 };
	const uint64_t stride = 8 * MiB + 4096;
	struct kvt_submit_opts o = { .notify = "small", .notify_len = 5 };
	struct kvt_batch *b[N];
	struct kvt_xfer x;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *local;
	uint64_t remote, len, off;
	char buf[64];
	int i;

	p = setup(&t, N * stride, &local, &remote);
	cr_assert_eq(tc_cuda_fill(local, N * stride, 77), 0);
	for (i = 0; i < N; i++) {
		len = sizes[i % 6];
		b[i] = kvt_batch_alloc(1);
		cr_assert_not_null(b[i]);
		x = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = local + i * stride,
				       .remote = remote + i * stride, .len = len };
		cr_assert_eq(kvt_submit(b[i], p, &x, 1, len == 1 ? &o : NULL), 0,
			     "submit %d", i);
	}
	for (i = 0; i < N; i++) {
		cr_assert_eq(kvt_wait(b[i], 30000000), 0, "submission %d", i);
		cr_assert_eq(kvt_status(b[i], 0), 0);
		kvt_batch_free(b[i]);
		off = i * stride;
		len = sizes[i % 6];
		cr_assert_eq(peer_sum(&t, off, len), tc_cuda_hash(local + off, len),
			     "submission %d (%" PRIu64 " B) damaged", i, len);
	}
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "notes 10000000 1"), 0);
	cr_assert(strstr(buf, "small@") != NULL, "notification: '%s'", buf);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/*
 * A fence alone and a notification alone (no request) take the resident
 * kernel of the GPU's own lane; the peer sees each, in order.
 */
Test(nvlink, fence_and_note_alone, .timeout = 120)
{
	need_gpus(1);
#ifdef KVT_HAVE_CUDA
	struct kvt_submit_opts fo = { .flags = KVT_SUBMIT_FENCE };
	struct kvt_submit_opts no = { .notify = "alone", .notify_len = 5 };
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	char buf[64];
	uint64_t ft;
	int round;

	/* nvlink alone: nothing else may carry them. */
	cr_assert_geq(tc_engine_init("--kvt-pmd nvlink"), 0);
	cr_assert_eq(tc_peer_start(&t, "--kvt-pmd nvlink"), 0);
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "fence 8"), 0);
	ft = strtoull(buf, NULL, 0);
	p = kvt_peer_open(t.addr, 10000);
	cr_assert_not_null(p, "open: %s", rte_strerror(rte_errno));
	b = kvt_batch_alloc(1);
	for (round = 1; round <= 3; round++) {
		cr_assert_eq(tc_peer_num(&t, "arm 3 %d", 40 + round), 0);
		fo.fence = (struct kvt_fence_ref){ .table = ft, .slot = 3,
						   .room = 40 + round };
		cr_assert_eq(kvt_submit(b, p, NULL, 0, &fo), 0);
		cr_assert_eq(tc_peer_num(&t, "fwait 3 10000000"), 0, "round %d", round);
		cr_assert_eq(kvt_wait(b, 10000000), 0);
		cr_assert_eq(kvt_status(b, 0), 0);
		kvt_batch_reset(b);
	}
	cr_assert_eq(kvt_submit(b, p, NULL, 0, &no), 0);
	cr_assert_eq(kvt_wait(b, 10000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "notes 10000000 1"), 0);
	cr_assert(strstr(buf, "alone@") != NULL, "notification: '%s'", buf);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/*
 * The resident kernel returns once the engine is idle, so an application
 * that synchronises its whole device is not held up by the engine; the
 * next small request starts it again.
 */
Test(nvlink, idle_engine_holds_no_kernel, .timeout = 120)
{
	need_two_gpus();
#ifdef KVT_HAVE_CUDA
	struct kvt_batch *b;
	struct kvt_xfer x;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *local;
	uint64_t remote, t0, us;
	int round;

	p = setup(&t, 1 * MiB, &local, &remote);
	b = kvt_batch_alloc(1);
	cr_assert_not_null(b);
	x = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = local,
			       .remote = remote, .len = 4096 };
	for (round = 0; round < 3; round++) {
		cr_assert_eq(tc_cuda_fill(local, 4096, 900 + round), 0);
		cr_assert_eq(kvt_submit(b, p, &x, 1, NULL), 0);
		cr_assert_eq(kvt_wait(b, 10000000), 0);
		cr_assert_eq(kvt_status(b, 0), 0);
		kvt_batch_reset(b);
		t0 = tc_now_us();
		cr_assert_eq(cudaSetDevice(0), cudaSuccess);
		cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
		us = tc_now_us() - t0;
		cr_log_info("cudaDeviceSynchronize right after a small write: %" PRIu64 " us",
			    us);
		cr_assert_lt(us, 1000000, "the device stayed busy %" PRIu64 " us", us);
		cr_assert_eq(peer_sum(&t, 0, 4096), tc_cuda_hash(local, 4096),
			     "round %d", round);
	}
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

#ifdef KVT_HAVE_CUDA
/* kvfwd --verify GPU0 -> GPU1 with batch requests per submission: at
 * least 100 000 rounds checked where they landed, none mixed or stale. */
static void
stale_rounds(const char *dst, unsigned int batch)
{
	char cmd[PATH_MAX + 512], bin[PATH_MAX], out[16384];
	long long checked, mixed, stale, requests;
	const char *env = getenv("KVT_KVFWD");
	json_t *j, *v;
	FILE *f;
	size_t n = 0;
	ssize_t l;
	int st;
	char *line;

	if (env != NULL) {
		snprintf(bin, sizeof(bin), "%s", env);
	} else {
		l = readlink("/proc/self/exe", bin, sizeof(bin) - 32);
		cr_assert_gt(l, 0);
		bin[l] = '\0';
		strcpy(strrchr(bin, '/'), "/../apps/kvfwd/kvfwd");
	}
	snprintf(cmd, sizeof(cmd),
		 "%s -- --kvt-idle sleep:20 --kvt-pmd shm --kvt-pmd nvlink loopback "
		 "--src-loc cuda:0 --dst-loc %s --verify --threads 4 "
		 "--block 4K --batch %u --buffer 1M --total 420M --json 2>&1", bin, dst,
		 batch);
	f = popen(cmd, "r");
	while (n + 1 < sizeof(out) && fgets(out + n, (int)(sizeof(out) - n), f))
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(f);
	line = strstr(out, "{\"op\"");
	cr_assert_not_null(line, "no JSON in:\n%s", out);
	j = json_loadb(line, strcspn(line, "\n"), 0, NULL);
	cr_assert_not_null(j, "%s", out);
	v = json_object_get(j, "verify_checked");
	cr_assert(json_is_integer(v), "%s", out);
	checked = json_integer_value(v);
	mixed = json_integer_value(json_object_get(j, "verify_mixed"));
	stale = json_integer_value(json_object_get(j, "verify_stale"));
	requests = json_integer_value(json_object_get(j, "requests"));
	json_decref(j);
	cr_log_info("cuda:0 -> %s, batch %u: %lld rounds checked at the receiver, %lld mixed, %lld stale",
		    dst, batch, checked, mixed, stale);
	cr_assert_geq(checked, 100000, "%s", out);
	cr_assert_eq(checked, requests, "%s", out);
	cr_assert_eq(mixed, 0);
	cr_assert_eq(stale, 0);
	cr_assert_eq(WEXITSTATUS(st), 0, "%s", out);
}
#endif

/* The stale-completion stress on GPUs (a completion seen before its
 * data, or two transfers mixed in one destination): threads share
 * destination slots, over 100 000 rounds; batches of 32 blocks take the
 * gather kernel, single blocks the resident kernel. */
Test(nvlink, stale_completion_100k_rounds, .timeout = 600)
{
	need_two_gpus();
#ifdef KVT_HAVE_CUDA
	stale_rounds("cuda:1", 32);
	stale_rounds("cuda:1", 1);
#endif
}

/* The same between two processes on one GPU (one lane, both ends). */
Test(nvlink, stale_completion_one_gpu, .timeout = 300)
{
	need_gpus(1);
#ifdef KVT_HAVE_CUDA
	stale_rounds("cuda:0", 1);
#endif
}

#ifdef KVT_HAVE_CUDA
static void
cuda_fill(uint8_t *src, size_t len, uint64_t k)
{
	cr_assert_eq(tc_cuda_fill(src, len, k), 0);
}
#endif

/*
 * Unregistered means closed over nvlink (the initiator copies into the
 * target's GPU memory itself): writes from GPU 0 race the target's
 * unregister of its cuda:0 regions; none lands after it returned
 * (tc_unregister_race).  One GPU is enough.
 */
Test(nvlink, unregister_closes, .timeout = 300)
{
	need_gpus(1);
#ifdef KVT_HAVE_CUDA
	struct tc_race r = { .fill = cuda_fill };
	struct kvt_mem *m;
	struct tc_peer t;
	uint64_t writes;

	cr_assert_geq(tc_engine_init("--kvt-pmd nvlink"), 0);
	cr_assert_eq(tc_peer_start(&t, "--kvt-pmd nvlink"), 0);
	r.src = kvt_mem_alloc(4096, "cuda:0");
	cr_assert_not_null(r.src, "cuda:0 alloc: %s", rte_strerror(rte_errno));
	m = kvt_mem_register(r.src, 4096, "cuda:0", 0);
	cr_assert_not_null(m);
	r.p = tc_open_peer(&t);
	writes = tc_unregister_race(&t, &r, "calloc %u %u w 0", 10);
	cr_log_info("%" PRIu64 " writes landed racing 10 unregisters, none after one returned",
		    writes);
	kvt_peer_close(r.p);
	kvt_mem_unregister(m);
	kvt_mem_free(r.src);
	tc_peer_stop(&t);
	kvt_fini();
#endif
}

/*
 * What the RDMA transport needs from CUDA to put a NIC on GPU memory: each
 * device's PCI address (the topology) and a dma-buf of device memory
 * (ibv_reg_dmabuf_mr).  No NIC is needed to check them.
 */
Test(nvlink, gpu_facts_for_nics, .timeout = 120)
{
#ifdef KVT_HAVE_CUDA
	char pci[32], path[96];
	uint64_t off = 1;
	void *m;
	off_t end;
	int fd = -1, ret;

	need_two_gpus();
	cr_assert_geq(tc_engine_init("--kvt-pmd nvlink"), 0);
	cr_assert_geq(kvt_cuda_count(), 2);
	cr_assert_eq(kvt_cuda_pci(1, pci, sizeof(pci)), 0);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", pci);
	cr_assert_eq(access(path, F_OK), 0, "cuda:1 at %s: not in sysfs", pci);
	m = kvt_mem_alloc(64 * MiB, "cuda:1");
	cr_assert_not_null(m);
	ret = kvt_mem_dmabuf((uint8_t *)m + 4196, 8 * MiB, &fd, &off);
	if (ret == -ENOTSUP) {
		kvt_mem_free(m);
		kvt_fini();
		cr_skip_test("the GPU driver exports no dma-buf here (GPUDirect RDMA would need nvidia_peermem)");
	}
	cr_assert_eq(ret, 0, "%s", strerror(-ret));
	end = lseek(fd, 0, SEEK_END);
	cr_log_info("cuda:1 at %s; dma-buf of 8 MiB: %lld bytes, offset %" PRIu64,
		    pci, (long long)end, off);
	/* Exported by whole host pages: addr lies 100 bytes into the first. */
	cr_assert_eq(off, 100);
	cr_assert_geq(end, (off_t)(8 * MiB + 100));
	close(fd);
	kvt_mem_free(m);
	kvt_fini();
#else
	need_two_gpus();
#endif
}
