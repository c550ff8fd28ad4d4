/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt-pipebench: descriptors per second through kvt's own pipeline
 * (kvt_submit -> ring -> lcore -> null port -> completion word ->
 * kvt_wait) beside a bare rte_ring carrying pointers between the same two
 * cpus, measured in the same run.  Prints both and the ratio.
 *
 *   kvt-pipebench [EAL args] -- [--kvt-* options] [-s SECONDS] [-b BATCH]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_errno.h>
#include <rte_ring.h>

#include "kvt.h"

#define BURST 32

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct raw {
	struct rte_ring *r;
	volatile int stop;
	unsigned long taken;
};

static void *
raw_consumer(void *arg)
{
	struct raw *w = arg;
	void *objs[BURST];
	cpu_set_t set;
	int c;

	/* The cpu kvt's worker lcore uses: the last one we may run on. */
	sched_getaffinity(0, sizeof(set), &set);
	for (c = CPU_SETSIZE - 1; c >= 0 && !CPU_ISSET(c, &set); c--)
		;
	CPU_ZERO(&set);
	CPU_SET(c, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	while (!w->stop)
		w->taken += rte_ring_sc_dequeue_burst(w->r, objs, BURST, NULL);
	return NULL;
}

/* Bare ring: one producer enqueues bursts, one consumer dequeues them. */
static double
raw_ring_rate(double secs)
{
	size_t sz = (size_t)rte_ring_get_memsize(65536);
	struct raw w = { 0 };
	void *objs[BURST];
	pthread_t th;
	double t0, el;

	w.r = aligned_alloc(64, (sz + 63) & ~(size_t)63);
	if (w.r == NULL || rte_ring_init(w.r, "raw", 65536, RING_F_SC_DEQ) < 0)
		return -1;
	memset(objs, 0, sizeof(objs));
	pthread_create(&th, NULL, raw_consumer, &w);
	t0 = now_s();
	while ((el = now_s() - t0) < secs)
		rte_ring_mp_enqueue_burst(w.r, objs, BURST, NULL);
	w.stop = 1;
	pthread_join(th, NULL);
	free(w.r);
	return (double)w.taken / el;
}

static double
kvt_rate(struct kvt_peer *p, uint8_t *src, uint8_t *dst, unsigned int batch,
	 double secs)
{
	struct kvt_xfer *x = calloc(batch, sizeof(*x));
	struct kvt_batch *b = kvt_batch_alloc(batch);
	unsigned long done = 0;
	unsigned int i;
	double t0, el;

	for (i = 0; i < batch; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
			.remote = (uintptr_t)dst + (uint64_t)i * 64, .len = 64 };
	t0 = now_s();
	while ((el = now_s() - t0) < secs) {
		if (kvt_submit(b, p, x, batch, NULL) < 0 ||
		    kvt_wait(b, 10000000) != 0) {
			fprintf(stderr, "kvt-pipebench: transfer failed\n");
			exit(1);
		}
		kvt_batch_reset(b);
		done += batch;
	}
	kvt_batch_free(b);
	free(x);
	return (double)done / el;
}

int
main(int argc, char **argv)
{
	static uint8_t src[64], dst[64 << 16];
	unsigned int batch = 4096;
	double secs = 2, raw, pipe;
	struct kvt_peer *p;
	char addr[64];
	int ret, opt;

	ret = kvt_init(argc, argv);
	if (ret < 0) {
		fprintf(stderr, "kvt-pipebench: kvt_init: %s\n", strerror(-ret));
		return 1;
	}
	argc -= ret;
	argv += ret;
	optind = 0;	/* after the engine's own parsing */
	while ((opt = getopt(argc, argv, "s:b:")) != -1) {
		if (opt == 's')
			secs = atof(optarg);
		else if (opt == 'b')
			batch = (unsigned int)atoi(optarg);
		else
			return 2;
	}
	if (batch == 0 || batch > 65536 || secs <= 0) {
		fprintf(stderr, "kvt-pipebench: -b 1..65536, -s > 0\n");
		return 2;
	}
	/* Park kvt's lcore while the bare ring owns that cpu. */
	kvt_set_idle("sleep:1000");
	raw = raw_ring_rate(secs);
	kvt_set_idle("spin");
	kvt_mem_register(src, sizeof(src), NULL, 0);
	kvt_mem_register(dst, sizeof(dst), NULL, KVT_MEM_REMOTE_WRITE);
	kvt_listen_addr(addr, sizeof(addr));
	p = kvt_peer_open(addr, 5000);
	if (p == NULL) {
		fprintf(stderr, "kvt-pipebench: open self: %s\n",
			rte_strerror(rte_errno));
		return 1;
	}
	pipe = kvt_rate(p, src, dst, batch, secs);
	printf("raw rte_ring enqueue/dequeue: %.2f M desc/s\n", raw / 1e6);
	printf("kvt submit->lcore->null->completion (batch %u): %.2f M desc/s\n",
	       batch, pipe / 1e6);
	printf("ratio kvt/raw: %.2f\n", pipe / raw);
	kvt_peer_close(p);
	kvt_fini();
	return 0;
}
