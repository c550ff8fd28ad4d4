/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Device-side helpers for receivers that wait for kvt fences inside their
 * own CUDA kernels.  Include from .cu files.
 */
#ifndef KVT_CUDA_H
#define KVT_CUDA_H

#include <stdint.h>

#ifdef __CUDACC__

/**
 * Check a fence slot (kvt_fence_table_words() + slot) from device code
 * with a system-scope acquire load, so data written before the fence is
 * visible once it returns 1.
 *
 * @return 1 when the slot holds room, 0 while it holds 0, -1 when it
 *   holds another room (stale: never accept the slot).
 */
__device__ static inline int
kvt_fence_check(const uint64_t *word, uint64_t room)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.global.u64 %0, [%1];"
		     : "=l"(v) : "l"(word) : "memory");
	return v == room ? 1 : (v == 0 ? 0 : -1);
}

#endif
#endif
