/* SPDX-License-Identifier: BSD-3-Clause */
/* The rdma tests' rails (a verbs double of their own per test) and the
 * helpers both of their files use (rdma_rails.c). */
#ifndef KVT_TEST_RDMA_RAILS_H
#define KVT_TEST_RDMA_RAILS_H

#include <stdint.h>

#include "kvt.h"

#define OPTS "--kvt-pmd rdma --kvt-timeout 1000"

/* Every test gets its own double: rails devs ("mlx5_0,mlx5_1") and
 * process tables in a fresh directory; rdma_rails_fini removes it. */
void rdma_rails(const char *devs);
void rdma_rails_fini(void);
/* Write n blocks of len from src to base (block i to base + i * len) as
 * one batch; @return the first failed status or 0. */
int rdma_write_blocks(struct kvt_peer *p, uint8_t *src, uint64_t base,
		      unsigned int n, uint64_t len, uint64_t timeout_us);
/* The index of port name (the test fails without it). */
int rdma_port_of(const char *name);
/* Cut rail nic once it carried bytes of batch b, which must still be
 * running then (a cut after the work could not test the move). */
void rdma_cut_when_busy(const char *nic, struct kvt_batch *b);
/* Bytes the port called name moved, both ways. */
uint64_t rdma_port_bytes(const char *name);

#endif
