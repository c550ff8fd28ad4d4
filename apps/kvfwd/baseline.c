/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The raw copy each transport competes with, measured in the same run:
 * memcpy for host memory on one host (what the shm port does, on one
 * core), with the run's access pattern: blocks of the same size from a
 * source as large as one thread's batch into a destination as large as
 * the target buffer, for at least as many bytes as the run moved.
 */
#include <stdlib.h>
#include <string.h>

#include "kvfwd.h"

static double
memcpy_gbps(const struct kvfwd_opts *o)
{
	uint64_t sspan = (uint64_t)o->batch * o->block, dspan = o->buffer;
	uint64_t blk = o->block, soff = 0, doff = 0, moved = 0;
	uint8_t *a = malloc(sspan), *b = malloc(dspan);
	double t0, el;

	if (a == NULL || b == NULL || blk > dspan) {
		free(a);
		free(b);
		return -1;
	}
	memset(a, 1, sspan);
	memset(b, 2, dspan);
	/* One untimed pass, as kvfwd warms the transfer path up. */
	for (doff = 0; doff + blk <= dspan; doff += blk)
		memcpy(b + doff, a + (doff / blk % o->batch) * blk, blk);
	doff = 0;
	t0 = kvfwd_now();
	do {
		memcpy(b + doff, a + soff, blk);
		moved += blk;
		soff = soff + 2 * blk > sspan ? 0 : soff + blk;
		doff = doff + 2 * blk > dspan ? 0 : doff + blk;
	} while ((el = kvfwd_now() - t0) < 0.5 || moved < o->total);
	free(a);
	free(b);
	return (double)moved / el / 1e9;
}

double
kvfwd_baseline(const struct kvfwd_opts *o, const char **name)
{
	if (strncmp(o->src_loc, "cpu", 3) == 0 &&
	    strncmp(o->dst_loc, "cpu", 3) == 0) {
		*name = "memcpy";
		return memcpy_gbps(o);
	}
	if (kvfwd_is_dev(o->src_loc) && kvfwd_is_dev(o->dst_loc)) {
		*name = "cudaMemcpyPeerAsync";
		return kvfwd_gpu_copy_gbps(o);
	}
	*name = NULL;
	return -1;
}
