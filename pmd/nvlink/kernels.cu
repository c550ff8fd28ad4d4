/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NVLink kernels: the gather/scatter copy for many small pages, which
 * also writes the fence and completion words; a lane's resident kernel,
 * which does the same for small requests it reads from host memory; and
 * the receiver's fence wait.
 *
 * Ordering: every block copies its share, then __threadfence_system() and
 * counts itself done with an atomic; the block that counts last therefore
 * sees every other block's writes ordered before its own, and only then
 * stores the fence (st.release.sys), the done word and the progress word.
 * A receiver that reads the fence with an acquire load sees the data.
 *
 * Built into images (kernels_image.py) and launched by name through the
 * driver (nvlink_cu.c): no host code here.
 */
#include <stdint.h>

#include "kernels.h"

#define WARP 32
#define UNROLL 4

/* One warp copies one task; lanes move 16 bytes each, UNROLL at a time. */
__device__ static void
copy_task(const struct kvt_nv_task *t, unsigned int lane)
{
	const uint8_t *s = (const uint8_t *)t->src;
	uint8_t *d = (uint8_t *)t->dst;
	uint64_t len = t->len, off = 0, i;
	uint4 v[UNROLL];
	int k;

	if (((t->src | t->dst) & 15) == 0) {
		const uint64_t step = WARP * 16 * UNROLL;

		for (; off + step <= len; off += step) {
#pragma unroll
			for (k = 0; k < UNROLL; k++)
				v[k] = *(const uint4 *)(s + off + (k * WARP + lane) * 16);
#pragma unroll
			for (k = 0; k < UNROLL; k++)
				*(uint4 *)(d + off + (k * WARP + lane) * 16) = v[k];
		}
		for (; off + 16 * WARP <= len; off += 16 * WARP)
			*(uint4 *)(d + off + lane * 16) =
				*(const uint4 *)(s + off + lane * 16);
	}
	for (i = off + lane; i < len; i += WARP)
		d[i] = s[i];
}

__device__ static void
store_release_sys(uint64_t addr, uint64_t v)
{
	asm volatile("st.release.sys.global.u64 [%0], %1;"
		     :: "l"(addr), "l"(v) : "memory");
}

/* 4 blocks of 512 per SM: the SM budget counts in whole SMs. */
extern "C" __global__ void __launch_bounds__(512, 4)
kvt_nv_gather(const struct kvt_nv_task *list, uint32_t n,
	      struct kvt_nv_inline inl, struct kvt_nv_tail tail)
{
	const struct kvt_nv_task *tasks = list != NULL ? list : inl.t;
	const unsigned int lane = threadIdx.x % WARP;
	const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / WARP);
	uint64_t w = (uint64_t)blockIdx.x * (blockDim.x / WARP) +
		threadIdx.x / WARP;
	__shared__ unsigned int last;

	for (; w < n; w += warps)
		copy_task(&tasks[w], lane);
	__threadfence_system();
	__syncthreads();
	if (threadIdx.x == 0)
		last = atomicAdd((unsigned int *)tail.counter, 1) ==
			gridDim.x - 1;
	__syncthreads();
	if (!last || threadIdx.x != 0)
		return;
	/* Every block's copies happen-before this point. */
	__threadfence_system();
	*(unsigned int *)tail.counter = 0;	/* reusable by a later launch */
	if (tail.fence)
		store_release_sys(tail.fence, tail.room);
	if (tail.done)
		store_release_sys(tail.done, 1);
	if (tail.progress)
		store_release_sys(tail.progress, tail.ticket);
}

__device__ static uint64_t
min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

__device__ static uint64_t
load_relaxed_sys(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.relaxed.sys.global.u64 %0, [%1];"
		     : "=l"(v) : "l"(p) : "memory");
	return v;
}

/*
 * Warp 0 waits for the command of ticket t: lanes 0-7 load the line's
 * eight words in one instruction, every lane checks the whole line.
 */
__device__ static void
cmd_wait(const struct kvt_nv_cmd *slot, uint64_t t, struct kvt_nv_cmd *out)
{
	const uint64_t *w = (const uint64_t *)slot;
	const unsigned int lane = threadIdx.x;
	uint64_t v, line[8];
	int i;

	for (;;) {
		v = lane < 8 ? load_relaxed_sys(w + lane) : 0;
		for (i = 0; i < 8; i++)
			line[i] = __shfl_sync(0xffffffffu, v, i);
		if (line[0] == t && line[7] == kvt_nv_cmd_check(line))
			break;
	}
	if (lane < 8)
		((uint64_t *)out)[lane] = v;
}

/*
 * A lane's resident kernel (see kernels.h): the copy of a small request
 * starts when the GPU reads its command line, with no launch.  The warps
 * split the copy in 16-byte-aligned chunks.  Every thread fences its own
 * stores system-wide before the barrier (a barrier and thread 0's
 * release store alone let the fence overtake other warps' NVLink stores:
 * the stale-completion test counted mixed blocks that way), so a receiver
 * that acquires the fence sees the data.
 */
extern "C" __global__ void __launch_bounds__(KVT_NV_RES_THREADS)
kvt_nv_resident(const struct kvt_nv_cmd *cmds, uint32_t ncmds, uint64_t first,
		uint64_t progress)
{
	const unsigned int warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
	__shared__ struct kvt_nv_cmd c;
	struct kvt_nv_task part;
	uint64_t t, chunk, off;

	for (t = first;; t++) {
		if (warp == 0)
			cmd_wait(&cmds[t % ncmds], t, &c);
		__syncthreads();
		if (c.len & KVT_NV_CMD_EXIT)
			break;
		chunk = ((c.len + nwarps - 1) / nwarps + 15) & ~15ull;
		off = min_u64(chunk * warp, c.len);
		part.src = c.src + off;
		part.dst = c.dst + off;
		part.len = min_u64(chunk, c.len - off);
		copy_task(&part, threadIdx.x % WARP);
		__threadfence_system();
		__syncthreads();
		if (threadIdx.x == 0) {
			if (c.fence)
				store_release_sys(c.fence, c.room);
			if (c.done)
				store_release_sys(c.done, 1);
			store_release_sys(progress, t);
		}
	}
	if (threadIdx.x == 0)
		store_release_sys(progress, t);
}

__device__ static uint64_t
load_acquire_sys(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.global.u64 %0, [%1];"
		     : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static uint64_t
now_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

extern "C" __global__ void
kvt_nv_fence_wait(const uint64_t *word, uint64_t room, uint64_t timeout_ns,
		  uint32_t *status)
{
	uint64_t start = now_ns(), v;

	for (;;) {
		v = load_acquire_sys(word);
		if (v == room) {
			*(volatile uint32_t *)status = 1;
			break;
		}
		if (v != 0) {
			*(volatile uint32_t *)status = 2;
			break;
		}
		if (now_ns() - start > timeout_ns) {
			*(volatile uint32_t *)status = 3;
			break;
		}
	}
	__threadfence_system();
}
