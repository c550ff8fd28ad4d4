/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The kvfwd initiator's shared state and its workers' helpers, between
 * initiator.c (plain and mixed streams, the run), fenced.c (fence mode:
 * credits from the target, every block written with its fence) and
 * round.c (a worker's round, both modes: initiator.c -> fenced.c ->
 * round.c, never back).
 */
#ifndef KVFWD_INITIATOR_H
#define KVFWD_INITIATOR_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvfwd.h"

#define MAX_SAMPLES (1u << 20)
#define CREDIT_WAIT_S 10.0
#define WAIT_US (30ull * 1000 * 1000)

struct samples {
	double *v;
	size_t n;
};

/* A target plain workers write to (several with --peer A,B,...). */
struct kvfwd_dest {
	struct kvt_peer *peer;
	uint64_t rbase;		/* its buffer */
	uint64_t rlen;
};

#define KVFWD_MAX_DESTS 64

struct shared {
	const struct kvfwd_opts *o;
	struct kvt_peer *peer;
	uint64_t rbase;		/* target buffer */
	uint64_t rlen;
	uint64_t ftable;	/* target fence table */
	uint32_t slot0;		/* first fence slot of our area */
	double t0;
	double deadline;	/* 0: by bytes */
	uint64_t bytes_left;	/* atomic, by-bytes runs */
	uint64_t bytes_done;	/* atomic, for the progress line */
	uint64_t blocks_sent;	/* atomic, for the fault */
	int failed;
	int streams_done;	/* --mixed: the main stream ended */
	struct kvt_submit_opts po;	/* --priority */
	uint64_t mixed_base;	/* --mixed: the small writes' area */
	/* credits */
	pthread_mutex_t lock;
	struct kvfwd_credit *credits;
	size_t ncredits;
	size_t cap;
	char result[128];
	/* plain mode: every target, dest[0] the one above */
	struct kvfwd_dest dest[KVFWD_MAX_DESTS];
	unsigned int ndest;
};

struct worker {
	struct shared *sh;
	unsigned int id;
	const struct kvfwd_dest *dest;	/* plain mode: its target */
	uint8_t *src;
	pthread_t th;
	uint64_t requests;
	uint64_t errors;
	uint64_t bytes;
	uint64_t read_checked;
	uint64_t read_bad;
	struct samples req;
	struct samples batch;
};

/* round.c: keep one latency sample (up to MAX_SAMPLES). */
void kvfwd_sample(struct samples *s, double v);
/* Take up to max blocks' worth of the byte budget; 0 when it is spent. */
unsigned int kvfwd_take_blocks(struct shared *sh, unsigned int max);
/* Wait for n requests of b, sampling each; @return 0 or -ETIMEDOUT. */
int kvfwd_wait_timed(struct worker *w, struct kvt_batch *b, unsigned int n,
		     double t0);
/* Empty a settled batch for the next round; @return 0 or -1. */
int kvfwd_reuse(struct kvt_batch *b);
/* fenced.c: pull credit and text messages out of the notifications. */
void kvfwd_pump_credits(struct shared *sh);
/* fenced.c: a fence-mode worker thread (arg: its struct worker). */
void *kvfwd_fence_worker(void *arg);

#endif /* KVFWD_INITIATOR_H */
