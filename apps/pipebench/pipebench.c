/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt-pipebench: descriptors per second through kvt's own pipeline
 * (kvt_submit -> ring -> lcore -> null port -> completion word ->
 * kvt_wait) beside a bare rte_ring carrying pointers between the same two
 * cpus, measured in the same run.  Prints both and the ratio: with one
 * batch at a time (submit, wait, reset), and with two batches in turn
 * (one fills while the other is in flight, as an application keeps the
 * pipeline busy).  Then the cost of kvt_submit alone for one 4 KiB write
 * with a fence (median and 99th percentile of many), and the cost of
 * kvt_poll while small urgent submissions stream in behind a pending bulk
 * one in the same batch (it should not grow with what is pending).
 *
 *   kvt-pipebench [EAL args] -- [--kvt-* options] [-s SECONDS] [-b BATCH]
 *                 [-p COUNT]
 *
 * -p COUNT times kvt_submit alone, COUNT times, and nothing else: the
 * run to record with perf (perf record -- kvt-pipebench ... -p 2000000).
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

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ring.h>

#include "kvt.h"

#define BURST 32
/* Submissions into one batch before a wait (-p), under the overlap
 * guard's 1024 writing submissions in flight to one region. */
#define BACK_TO_BACK 1000

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

static void
must(int ok)
{
	if (!ok) {
		fprintf(stderr, "kvt-pipebench: transfer failed\n");
		exit(1);
	}
}

/* nbatches batches in turn: submit one, then wait for the oldest.  The
 * two halves of dst keep the batches' writes apart (overlap guard). */
static double
kvt_rate(struct kvt_peer *p, uint8_t *src, uint8_t *dst, unsigned int batch,
	 unsigned int nbatches, double secs)
{
	struct kvt_xfer *x = calloc((size_t)batch * nbatches, sizeof(*x));
	struct kvt_batch *b[2];
	unsigned long done = 0;
	unsigned int i, k, turn = 0;
	double t0, el;

	for (k = 0; k < nbatches; k++) {
		b[k] = kvt_batch_alloc(batch);
		for (i = 0; i < batch; i++)
			x[k * batch + i] = (struct kvt_xfer){ .op = KVT_OP_WRITE,
				.local = src, .len = 64,
				.remote = (uintptr_t)dst +
					((uint64_t)k * batch + i) * 64 };
	}
	for (k = 0; k + 1 < nbatches; k++)
		must(kvt_submit(b[k], p, &x[k * batch], batch, NULL) >= 0);
	t0 = now_s();
	while ((el = now_s() - t0) < secs) {
		k = (turn + nbatches - 1) % nbatches;
		must(kvt_submit(b[k], p, &x[k * batch], batch, NULL) >= 0);
		must(kvt_wait(b[turn], 10000000) == 0);
		kvt_batch_reset(b[turn]);
		done += batch;
		turn = (turn + 1) % nbatches;
	}
	for (k = 0; k < nbatches; k++) {
		kvt_wait(b[k], 10000000);
		kvt_batch_free(b[k]);
	}
	free(x);
	return (double)done / el;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * kvt_submit alone of one 4 KiB write with a fence, n times: its median
 * and 99th percentile in microseconds.  per submissions go into a batch
 * before it is waited for, each to its own 4 KiB of dst and fence slot:
 * 1, or many back to back, which costs what the call costs when the lcore has not just
 * touched the batch's and the ring's lines (the difference is the cache
 * lines that cross cpus).
 */
static void
submit_cost(struct kvt_peer *p, uint8_t *src, uint8_t *dst,
	    struct kvt_fence_table *ft, unsigned int n, unsigned int per,
	    double *p50, double *p99)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src, .len = 4096 };
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	struct kvt_batch *b = kvt_batch_alloc(per);
	uint64_t *t = calloc(n, sizeof(*t)), t0;
	double us = (double)rte_get_tsc_hz() / 1e6;
	unsigned int i;

	must(b != NULL && t != NULL);
	/* The null port carries no bytes: the fence never lands, and the
	 * sender's side is what is timed. */
	o.fence.table = kvt_fence_table_handle(ft);
	for (i = 0; i < n; i++) {
		o.fence.room = i + 1;
		o.fence.slot = i % per;
		x.remote = (uintptr_t)dst + (uint64_t)(i % per) * 4096;
		t0 = rte_get_tsc_cycles();
		must(kvt_submit(b, p, &x, 1, &o) >= 0);
		t[i] = rte_get_tsc_cycles() - t0;
		if (i % per == per - 1 || i == n - 1) {
			must(kvt_wait(b, 10000000) == 0);
			kvt_batch_reset(b);
		}
	}
	qsort(t, n, sizeof(*t), cmp_u64);
	*p50 = (double)t[n / 2] / us;
	*p99 = (double)t[n * 99 / 100] / us;
	kvt_batch_free(b);
	free(t);
}

/* A bulk page list of this many 64-byte pages heads the batch in
 * poll_cost(): long enough to stay pending while the small ones pass. */
#define HEAD_PAGES (16u << 20)

/*
 * kvt_poll's cost, in ns a call, with a bulk submission pending at the
 * head of the batch and n small urgent writes submitted behind it, each
 * followed by a poll (an application polling while it submits).  *held:
 * whether the head was still pending at the end (else the number says
 * less).
 */
static double
poll_cost(struct kvt_peer *p, uint8_t *src, uint8_t *dst, unsigned int n,
	  int *held)
{
	uint32_t *idx = calloc(HEAD_PAGES, sizeof(*idx));
	struct kvt_pages head = { .op = KVT_OP_WRITE, .n = HEAD_PAGES,
		.page_size = 64, .local = src, .remote = (uintptr_t)dst,
		.local_idx = idx, .remote_idx = idx };
	struct kvt_submit_opts bo = { .flags = KVT_SUBMIT_ALLOW_OVERLAP,
				      .priority = KVT_PRIO_BULK };
	struct kvt_submit_opts uo = { .flags = KVT_SUBMIT_ALLOW_OVERLAP,
				      .priority = KVT_PRIO_URGENT };
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src,
		.remote = (uintptr_t)dst, .len = 64 };
	struct kvt_batch *b = kvt_batch_alloc(n + 1);
	uint64_t spent = 0, t0;
	unsigned int i;

	must(idx != NULL && b != NULL);
	must(kvt_submit_pages(b, p, &head, &bo) == 0);
	for (i = 0; i < n; i++) {
		must(kvt_submit(b, p, &x, 1, &uo) >= 0);
		t0 = rte_get_tsc_cycles();
		must(kvt_poll(b) >= 0);
		spent += rte_get_tsc_cycles() - t0;
	}
	*held = kvt_status(b, 0) == -EINPROGRESS;
	must(kvt_wait(b, 60000000) == 0);
	kvt_batch_free(b);
	free(idx);
	return (double)spent * 1e9 / (double)rte_get_tsc_hz() / n;
}

int
main(int argc, char **argv)
{
	static uint8_t src[4096], dst[128 << 16];
	unsigned int batch = 4096, nsub = 0;
	static const unsigned int npoll[] = { 1000, 10000, 30000 };
	double secs = 2, raw, pipe, pipe2, p50, p99, pc[3];
	int held[3];
	unsigned int i;
	struct kvt_fence_table *ft;
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
	while ((opt = getopt(argc, argv, "s:b:p:")) != -1) {
		if (opt == 's')
			secs = atof(optarg);
		else if (opt == 'b')
			batch = (unsigned int)atoi(optarg);
		else if (opt == 'p')
			nsub = (unsigned int)atoi(optarg);
		else
			return 2;
	}
	if (batch == 0 || batch > 65536 || secs <= 0) {
		fprintf(stderr, "kvt-pipebench: -b 1..65536, -s > 0\n");
		return 2;
	}
	/* Park kvt's lcore while the bare ring owns that cpu. */
	kvt_set_idle("sleep:1000");
	raw = nsub == 0 ? raw_ring_rate(secs) : 0;
	kvt_set_idle("spin");
	kvt_mem_register(src, sizeof(src), NULL, 0);
	kvt_mem_register(dst, sizeof(dst), NULL, KVT_MEM_REMOTE_WRITE);
	ft = kvt_fence_table_create(BACK_TO_BACK, NULL);
	kvt_listen_addr(addr, sizeof(addr));
	p = ft != NULL ? kvt_peer_open(addr, 5000) : NULL;
	if (p == NULL) {
		fprintf(stderr, "kvt-pipebench: open self: %s\n",
			rte_strerror(rte_errno));
		return 1;
	}
	if (nsub != 0) {
		submit_cost(p, src, dst, ft, nsub, 1, &p50, &p99);
		printf("kvt_submit of one 4 KiB write with a fence, %u times: p50 %.3f us, p99 %.3f us\n",
		       nsub, p50, p99);
		submit_cost(p, src, dst, ft, nsub, BACK_TO_BACK, &p50, &p99);
		printf("the same, %u back to back into one batch: p50 %.3f us, p99 %.3f us\n",
		       BACK_TO_BACK, p50, p99);
		goto out;
	}
	pipe = kvt_rate(p, src, dst, batch, 1, secs);
	pipe2 = kvt_rate(p, src, dst, batch, 2, secs);
	submit_cost(p, src, dst, ft, 20000, 1, &p50, &p99);
	for (i = 0; i < 3; i++)
		pc[i] = poll_cost(p, src, dst, npoll[i], &held[i]);
	printf("raw rte_ring enqueue/dequeue: %.2f M desc/s (%.1f ns)\n",
	       raw / 1e6, 1e9 / raw);
	printf("kvt submit->lcore->null->completion (batch %u): %.2f M desc/s (%.1f ns)\n",
	       batch, pipe / 1e6, 1e9 / pipe);
	printf("ratio kvt/raw: %.2f\n", pipe / raw);
	printf("kvt, two batches in turn: %.2f M desc/s (%.1f ns), ratio kvt/raw: %.2f\n",
	       pipe2 / 1e6, 1e9 / pipe2, pipe2 / raw);
	printf("kvt_submit of one 4 KiB write with a fence: p50 %.3f us, p99 %.3f us\n",
	       p50, p99);
	for (i = 0; i < 3; i++)
		printf("kvt_poll behind a pending bulk submission, %u small ones streamed in: %.0f ns a call%s\n",
		       npoll[i], pc[i], held[i] ? "" : " (the bulk one settled meanwhile)");
out:
	kvt_peer_close(p);
	kvt_fence_table_destroy(ft);
	kvt_fini();
	return 0;
}
