/* SPDX-License-Identifier: BSD-3-Clause */
/* Rounds of fenced, notified writes and a receiver that scans them
 * (rounds.c), for kvt-testpeer. */
#ifndef KVT_TEST_ROUNDS_H
#define KVT_TEST_ROUNDS_H

#include <stddef.h>
#include <stdint.h>

#include "kvt.h"

/*
 * Receiver: scan nb blocks of bs bytes at base, with fence slot b for
 * block b, for us microseconds or until stop() (may be NULL) says so;
 * out gets "scans=... regress=... early=... fence_early=...
 * fence_back=... notes=...".  @return 0, or -1 on bad arguments.
 */
int tc_rounds_scan(uint8_t *base, uint32_t nb, uint64_t bs,
		   struct kvt_fence_table *ft, uint64_t us, int (*stop)(void),
		   char *out, size_t len);

/*
 * Sender: rewrite the peer's nb blocks at raddr round after round (round
 * r in every word) from src, each write fenced (table fence, slot b,
 * room r) and notified, for us microseconds; out gets "rounds=...
 * writes=... failed=... first=... wait=...".  @return 0, or -1.
 */
int tc_rounds_send(struct kvt_peer *peer, uint8_t *src, uint32_t nb,
		   uint64_t bs, uint64_t raddr, uint64_t fence, uint64_t us,
		   char *out, size_t len);

#endif
