/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the NVLink PMD (C) and its kernels (CUDA) share.
 */
#ifndef KVT_NVLINK_KERNELS_H
#define KVT_NVLINK_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One copy for the gather kernel. */
struct kvt_nv_task {
	uint64_t src;
	uint64_t dst;
	uint64_t len;
};

/*
 * What the last block of a launch writes, in this order, once every
 * block's copies are visible system-wide: fence <- room (if fence), done
 * <- 1 (if done), progress <- ticket.  All are device-accessible
 * addresses (0: skip).
 */
struct kvt_nv_tail {
	uint64_t fence;
	uint64_t room;
	uint64_t done;
	uint64_t progress;
	uint64_t ticket;
	uint64_t counter;	/* unsigned int in device memory, starts 0 */
};

/*
 * A command for a lane's resident kernel: one 64-byte line in pinned,
 * device-mapped host memory, one per ticket slot.  The kernel reads the
 * line in a single warp-wide load (one PCIe round trip) and accepts it
 * when ticket is the one it expects and check matches the other seven
 * words, so a line read while the lcore was still writing it is retried,
 * never used.  len with KVT_NV_CMD_EXIT set tells the kernel to return.
 */
struct kvt_nv_cmd {
	uint64_t ticket;
	uint64_t src;
	uint64_t dst;
	uint64_t len;
	uint64_t fence;		/* 0: none */
	uint64_t room;
	uint64_t done;		/* 0: none */
	uint64_t check;
};

#define KVT_NV_CMD_EXIT (1ull << 63)
#define KVT_NV_CMD_WORDS 7	/* words covered by check */
#define KVT_NV_RES_THREADS 128	/* one block of this many */

#ifdef __CUDACC__
#define KVT_NV_HD __host__ __device__
#else
#define KVT_NV_HD
#endif

/* The check word of a command: a mix of its first seven words. */
static inline KVT_NV_HD uint64_t
kvt_nv_cmd_check(const uint64_t *w)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;
	int i;

	for (i = 0; i < KVT_NV_CMD_WORDS; i++) {
		h = (h ^ w[i]) * 0xff51afd7ed558ccdull;
		h ^= h >> 29;
	}
	return h;
}

/* Up to this many tasks travel inside the launch itself. */
#define KVT_NV_INLINE 8

/*
 * Launch the gather kernel on stream (current device): tasks is a device
 * list, or NULL when the n <= KVT_NV_INLINE tasks are passed in inl (the
 * launch then needs no copy of the list first).  @return 0 or a
 * cudaError_t.
 */
int kvt_nv_gather(const struct kvt_nv_task *tasks, uint32_t n,
		  const struct kvt_nv_task *inl, const struct kvt_nv_tail *tail,
		  unsigned int blocks, void *stream);

/*
 * Launch a lane's resident kernel on stream: one block that takes the
 * commands of tickets first, first + 1, ... from cmds (device view of an
 * array of ncmds) and, for each, copies len bytes src -> dst, then
 * stores (release, system scope) fence <- room, done <- 1 and
 * *progress <- ticket.  It returns after an exit command, whose ticket it
 * also stores in *progress.  @return 0 or a cudaError_t.
 */
int kvt_nv_resident(const struct kvt_nv_cmd *cmds, uint32_t ncmds,
		    uint64_t first, uint64_t progress, void *stream);

/*
 * Launch a one-thread kernel that waits until *word == room (acquire,
 * system scope), gives up on another non-zero value or after timeout_ns,
 * and stores 1 (arrived), 2 (stale) or 3 (timeout) in *status.
 */
int kvt_nv_fence_wait(const uint64_t *word, uint64_t room, uint64_t timeout_ns,
		      uint32_t *status, void *stream);

#ifdef __cplusplus
}
#endif

#endif
