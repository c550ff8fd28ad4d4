/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A fault-injecting proxy between a kvt initiator and a kvt target on
 * loopback, for the tcp transport: it relays the control connection,
 * points the tcp endpoint the target announces at itself, and relays the
 * data connections frame by frame, where it can lie or cut (this kernel
 * has no netem).  Threads of the test process; one tcp endpoint.
 */
#ifndef KVT_TEST_FAULT_PROXY_H
#define KVT_TEST_FAULT_PROXY_H

#include <stdint.h>

struct fp_rules {
	/* Answers to WRITE: replace the status with ack_status. */
	int lie;
	int32_t ack_status;
	/* Swallow the next answer of this frame type (F_*_ACK) and cut its
	 * data connection: the target acted, the initiator never hears. */
	int cut_type;
	/* Counted by the proxy. */
	unsigned int cuts;
	unsigned int data_conns;
};

struct fproxy;

/* Proxy the engine whose control address is target ("ip:port"). */
struct fproxy *fp_start(const char *target, struct fp_rules *rules);
/* The address an initiator opens instead of the target's. */
const char *fp_addr(const struct fproxy *fp);
void fp_stop(struct fproxy *fp);

#endif
