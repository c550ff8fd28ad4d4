/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A TEST DOUBLE of libibverbs (test/verbs_double.c), for the RDMA
 * transport's tests on machines without an RDMA NIC.  Test programs link
 * it in place of libibverbs; it is never part of libkvt.
 *
 * It keeps RC semantics where the transport relies on them: a queue
 * pair's requests execute and complete in post order; only signalled
 * requests and errors produce completions; an error moves the queue pair
 * to the error state and flushes the rest; the responder checks the
 * remote key, range and permission; PSNs must match (so a re-armed pair
 * works only when both ends agreed on the new PSNs); a request to a dead
 * process or a queue pair not ready times out (retry exceeded); SEND waits
 * for a posted receive.  Bytes move between processes with
 * process_vm_writev/readv.
 *
 * Environment: KVT_VDOUBLE_DIR (directory for the shared state, required)
 * and KVT_VDOUBLE_DEVS (device names, default "mlx5_0,mlx5_1").
 */
#ifndef KVT_VERBS_DOUBLE_H
#define KVT_VERBS_DOUBLE_H

#include <stdint.h>

/* A rail (a device name, both ends), shared by every process. */
struct vd_rail {
	uint32_t down;		/* requests time out; ports report down */
	uint32_t rate_mbps;	/* 0: unlimited */
	uint32_t fail_after;	/* the n-th request from now fails (0: off) */
	uint32_t retry_ms;	/* how long a timed-out request takes (50) */
	uint64_t bytes;		/* bytes moved over the rail */
	uint64_t requests;
	/* the n-th SEND from now arrives, but its acknowledgement is lost:
	 * the requester sees it fail (0: off) */
	uint32_t lose_send_ack;
};

/* Map the rail called name (creating it); NULL on error. */
struct vd_rail *vd_rail(const char *name);

#endif
