/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the NVLink PMD (C) and its kernels (CUDA) share.
 */
#ifndef KVT_NVLINK_H
#define KVT_NVLINK_H

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
