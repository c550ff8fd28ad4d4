/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the NVLink PMD (C) and its kernels (CUDA) share.
 */
#ifndef KVT_NVLINK_KERNELS_H
#define KVT_NVLINK_KERNELS_H

#include <stddef.h>
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

struct kvt_nv_inline {
	struct kvt_nv_task t[KVT_NV_INLINE];
};

/*
 * The kernels (kernels.cu), launched by name through the driver:
 *
 * kvt_nv_gather(list, n, inl, tail): copy n tasks from the device list
 * list, or from inl when list is 0 (n <= KVT_NV_INLINE: the launch then
 * needs no copy of the list first), on any number of 512-thread blocks;
 * the last block stores the tail.
 *
 * kvt_nv_resident(cmds, ncmds, first, progress): one block of
 * KVT_NV_RES_THREADS that takes the commands of tickets first, first + 1,
 * ... from cmds (device view of an array of ncmds) and, for each, copies
 * len bytes src -> dst, then stores (release, system scope) fence <- room,
 * done <- 1 and *progress <- ticket.  It returns after an exit command,
 * whose ticket it also stores in *progress.
 *
 * kvt_nv_fence_wait(word, room, timeout_ns, status): one thread that
 * waits until *word == room (acquire, system scope), gives up on another
 * non-zero value or after timeout_ns, and stores 1 (arrived), 2 (stale)
 * or 3 (timeout) in *status.
 */

/* One loadable image of the kernels (kernels_image.py writes the table). */
struct kvt_nv_image {
	unsigned int sm;	/* cubin for sm_<sm>; 0: PTX */
	const void *data;	/* PTX ends in a NUL */
	size_t len;
};

extern const struct kvt_nv_image kvt_nv_images[];
extern const unsigned int kvt_nv_nimages;

#ifdef __cplusplus
}
#endif

#endif
