/* SPDX-License-Identifier: BSD-3-Clause */
/* kvfwd: point-to-point test and benchmark tool for kvt. */
#ifndef KVFWD_H
#define KVFWD_H

#include <stdint.h>
#include <stdio.h>

#include "kvt.h"

enum kvfwd_mode {
	KVFWD_TARGET,
	KVFWD_INITIATOR,
	KVFWD_LOOPBACK,
};

/* Exit codes. */
#define KVFWD_EXIT_FAIL 1	/* transfers failed or verify found damage */
#define KVFWD_EXIT_USAGE 2	/* bad options or sizes */
#define KVFWD_EXIT_PEER 3	/* peer unreachable or unsuitable */

/* kvfwd_opts.pages: what one list of a batch is. */
#define KVFWD_PAGES 1		/* --pages: kvt_submit_pages() */
#define KVFWD_BLOCKS 2		/* --list: kvt_submit_blocks() */

struct kvfwd_opts {
	enum kvfwd_mode mode;
	char peer[128];
	uint32_t op;
	uint64_t block;
	unsigned int batch;
	unsigned int depth;	/* batches in flight per thread */
	unsigned int threads;
	uint64_t total;
	double duration;
	char src_loc[16];
	char dst_loc[16];
	uint64_t buffer;
	int fence;
	int verify;
	int pages;		/* a batch is one list: KVFWD_PAGES, KVFWD_BLOCKS */
	int baseline;
	int json;
	char transport[64];
	char baseline_to[256];	/* tcp baseline: target addresses */
	long fault_block;	/* hidden: corrupt this block's source */
	uint32_t priority;	/* enum kvt_prio of the stream */
	int mixed;		/* also a stream of 4 KiB writes, one at a time */
	uint32_t mixed_priority;
	uint32_t mixed_every_us;
	unsigned int initiators;	/* target: sessions at once */
	double start_at;	/* initiator: CLOCK_REALTIME start, 0: now */
	int baseline_only;	/* initiator: no kvt transfer */
};

#define KVFWD_MAX_INITIATORS 256

/* What one run measured. */
struct kvfwd_result {
	double secs;
	uint64_t bytes;
	uint64_t requests;
	uint64_t errors;
	double *req_lat;	/* microseconds, sampled */
	size_t n_req_lat;
	double *batch_lat;
	size_t n_batch_lat;
	/* --mixed: the small writes' own stream */
	double *mixed_lat;
	size_t n_mixed_lat;
	uint64_t mixed_requests;
	/* verify, reported by the target */
	uint64_t checked;
	uint64_t mixed;
	uint64_t stale;
	int verified;
	/* port counters when the timed part began */
	uint64_t port_bytes0[64];
	/* --peer A,B,...: bytes each target took in the timed part */
	uint64_t target_bytes[64];
	unsigned int ntargets;
	/* baseline */
	const char *baseline_name;
	double baseline_gbps;
	uint16_t sink_port;	/* the target's plain socket sink */
	char peer_ip[64];
};

/* Room ids and the verify pattern: both sides derive them alike. */
static inline uint64_t
kvfwd_room(uint64_t round, uint32_t slot)
{
	return ((round + 1) << 32) | slot;
}

void kvfwd_pattern(void *p, uint64_t len, uint64_t seed);
/* @return 1 when p holds the pattern of seed. */
int kvfwd_pattern_ok(const void *p, uint64_t len, uint64_t seed);

/* The same for memory that may be on a GPU (dev != 0). */
int kvfwd_is_dev(const char *loc);
int kvfwd_fill(void *dst, uint64_t len, uint64_t seed, int dev, int corrupt);
int kvfwd_check(const void *src, uint64_t len, uint64_t seed, int dev);
/* Raw cudaMemcpyPeerAsync in the run's pattern; GB/s or < 0. */
double kvfwd_gpu_copy_gbps(const struct kvfwd_opts *o);

int kvfwd_target(const struct kvfwd_opts *o, FILE *ready);
int kvfwd_initiator(const struct kvfwd_opts *o, struct kvfwd_result *res);
/* Raw copy the transport competes with; @return GB/s or < 0. */
double kvfwd_baseline(const struct kvfwd_opts *o,
		      const struct kvfwd_result *res, const char **name);
/* Target: a thread that accepts plain TCP streams and drops the bytes;
 * @return its port, 0 on failure. */
uint16_t kvfwd_sink_start(void);
/* Does transport pmd carry the run (named, or the only kind of port)? */
int kvfwd_uses(const struct kvfwd_opts *o, const char *pmd);
void kvfwd_report(const struct kvfwd_opts *o, struct kvfwd_result *res);

/* Notification messages between initiator and target. */
#define KVFWD_MSG_CREDIT 'C'
struct kvfwd_credit {
	uint32_t slot;
	uint32_t rsvd;
	uint64_t room;
};
#define KVFWD_CREDITS_PER_MSG ((KVT_NOTIFY_MAX - 8) / sizeof(struct kvfwd_credit))

double kvfwd_now(void);
/* Sleep until CLOCK_REALTIME t (0: return at once); says so when late. */
void kvfwd_start_at(double t);
void kvfwd_fmt_bytes(char *buf, size_t len, double bytes);

#endif
