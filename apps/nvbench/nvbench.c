/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt-nvbench: kvt over NVLink between two processes (GPU 0 and GPU 1)
 * beside the raw CUDA copies it competes with, measured in the same run.
 *
 *   kvt-nvbench [EAL args] -- [--kvt-* options] [-t TESTS] [-n ROUNDS]
 *
 * TESTS (comma list): write (1 GiB), pages64k (4096 x 64 KiB scattered),
 * pages4k (65536 x 4 KiB scattered), bidir (both directions at once), lat
 * (4 KiB write + fence, as the receiver's polling thread sees it).
 * The process forks before anything starts: the parent sends from GPU 0,
 * the child receives on GPU 1 (and sends back for bidir).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <rte_errno.h>

#include "kvt.h"

#define GiB (1ull << 30)
#define BUF (2 * GiB)
#define LAT_MAX 100000
#define SLOTS 4096

enum { PH_IDLE, PH_LAT, PH_BIDIR, PH_QUIT };

/* Shared between parent and child (anonymous shared mapping). */
struct shared {
	char child_addr[64];
	char parent_addr[64];
	uint64_t child_buf;
	uint64_t child_ft;
	uint64_t parent_buf;
	volatile int ready;
	volatile int phase;
	volatile int phase_done;
	volatile uint64_t armed;	/* latency: the child armed this room */
	volatile double bidir_gbps;
	uint64_t t0[LAT_MAX];
	uint64_t t1[LAT_MAX];
};

static struct shared *sh;
static double submit_s;	/* time the last kvt_reps spent submitting */

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double
now_s(void)
{
	return (double)now_ns() * 1e-9;
}

static void
die(const char *what)
{
	fprintf(stderr, "kvt-nvbench: %s\n", what);
	exit(1);
}

/* The receiving process; the parent's waits on it end when it exits
 * (it says why) or stays silent for CHILD_WAIT_NS. */
static pid_t child;
#define CHILD_WAIT_NS (120ull * 1000000000ull)

static void
child_check(uint64_t since_ns)
{
	if (waitpid(child, NULL, WNOHANG) == child)
		die("the receiving process exited");
	if (now_ns() - since_ns > CHILD_WAIT_NS)
		die("the receiving process did not answer in 120 s");
}

static void
check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "kvt-nvbench: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * kvt: reps submissions of the same n requests (or of page list pl when
 * it is not NULL), all queued at once and then waited for, as the raw
 * loops queue their copies; the destination is rewritten on purpose,
 * hence ALLOW_OVERLAP.  @return seconds.
 */
static double
kvt_reps(struct kvt_peer *p, struct kvt_xfer *x, unsigned int n,
	 const struct kvt_pages *pl, int reps)
{
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	unsigned int slots = (pl != NULL ? 1 : n) * (unsigned int)reps, i;
	struct kvt_batch *b = kvt_batch_alloc(slots);
	double t0 = 0, el = 0;
	int r, pass;

	if (b == NULL)
		die("kvt_batch_alloc");
	/* Pass 0 is untimed: a batch is reused in steady state, and its
	 * first use would also measure page faults on fresh memory. */
	for (pass = 0; pass < 2; pass++) {
		t0 = now_s();
		for (r = 0; r < reps; r++)
			if ((pl != NULL ? kvt_submit_pages(b, p, pl, &o) :
			     kvt_submit(b, p, x, n, &o)) < 0)
				die("kvt_submit");
		submit_s = now_s() - t0;
		if (kvt_wait(b, 120000000) != 0)
			die("kvt transfer did not complete");
		el = now_s() - t0;
		for (i = 0; i < slots; i++)
			if (kvt_status(b, i) != 0)
				die("kvt transfer failed");
		kvt_batch_reset(b);
	}
	kvt_batch_free(b);
	return el;
}

/* ---- the receiver (child) ---- */

static void
child_bidir(struct kvt_peer *back, uint8_t *src, int rounds)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src,
			      .remote = sh->parent_buf + GiB, .len = GiB };

	sh->bidir_gbps = (double)rounds * GiB / kvt_reps(back, &x, 1, NULL, rounds) /
		1e9;
}

static void
child_latency(struct kvt_fence_table *ft, int rounds)
{
	uint64_t room;
	int r, ret;

	for (r = 0; r < rounds; r++) {
		room = (uint64_t)r + 1;
		kvt_fence_arm(ft, (uint32_t)(r % SLOTS), room);
		__atomic_store_n(&sh->armed, room, __ATOMIC_RELEASE);
		/* The receiver's polling thread: spin on the slot. */
		while ((ret = kvt_fence_poll(ft, (uint32_t)(r % SLOTS))) == -EAGAIN)
			;
		sh->t1[r] = now_ns();
		if (ret != 0)
			die("latency: stale fence");
	}
}

static int
child_main(int argc, char **argv, int rounds)
{
	struct kvt_fence_table *ft;
	struct kvt_peer *back = NULL;
	uint8_t *buf, *src;

	if (kvt_init(argc, argv) < 0)
		die("child: kvt_init");
	buf = kvt_mem_alloc(BUF, "cuda:1");
	src = kvt_mem_alloc(GiB, "cuda:1");
	if (buf == NULL || src == NULL ||
	    kvt_mem_register(buf, BUF, "cuda:1",
			     KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE) == NULL ||
	    kvt_mem_register(src, GiB, "cuda:1", 0) == NULL)
		die("child: GPU 1 memory");
	ft = kvt_fence_table_create(SLOTS, NULL);
	if (ft == NULL)
		die("child: fence table");
	kvt_listen_addr(sh->child_addr, sizeof(sh->child_addr));
	sh->child_buf = (uintptr_t)buf;
	sh->child_ft = kvt_fence_table_handle(ft);
	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	for (;;) {
		int ph = __atomic_load_n(&sh->phase, __ATOMIC_ACQUIRE);

		if (ph == PH_QUIT)
			break;
		if (ph == PH_IDLE || sh->phase_done == ph) {
			usleep(100);
			continue;
		}
		if (ph == PH_LAT) {
			child_latency(ft, rounds);
		} else if (ph == PH_BIDIR) {
			if (back == NULL)
				back = kvt_peer_open(sh->parent_addr, 10000);
			if (back == NULL)
				die("child: cannot open the parent");
			/* Start together with the parent. */
			while (__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) != 2)
				;
			child_bidir(back, src, 10);
		}
		__atomic_store_n(&sh->phase_done, ph, __ATOMIC_RELEASE);
	}
	if (back != NULL)
		kvt_peer_close(back);
	kvt_fini();
	return 0;
}

/* ---- the sender (parent) ---- */

struct parent {
	struct kvt_peer *p;
	uint8_t *src;		/* cuda:0, BUF bytes, registered */
	uint8_t *raw_dst;	/* cuda:1, allocated here for raw copies */
	cudaStream_t s0;	/* on GPU 0 */
	cudaStream_t s1;	/* on GPU 1 */
};

static void
run_phase(int ph)
{
	__atomic_store_n(&sh->phase, ph, __ATOMIC_RELEASE);
}

static void
wait_phase(int ph)
{
	uint64_t since = now_ns();

	while (__atomic_load_n(&sh->phase_done, __ATOMIC_ACQUIRE) != ph) {
		child_check(since);
		usleep(100);
	}
}

static void
bench_write(struct parent *pa, int reps)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = pa->src,
			      .remote = sh->child_buf, .len = GiB };
	double t, raw, t0;
	int r;

	kvt_reps(pa->p, &x, 1, NULL, 1);	/* warm up */
	t = kvt_reps(pa->p, &x, 1, NULL, reps);
	cudaSetDevice(0);
	check(cudaMemcpyPeerAsync(pa->raw_dst, 1, pa->src, 0, GiB, pa->s0), "peer copy");
	cudaStreamSynchronize(pa->s0);
	t0 = now_s();
	for (r = 0; r < reps; r++)
		cudaMemcpyPeerAsync(pa->raw_dst, 1, pa->src, 0, GiB, pa->s0);
	check(cudaStreamSynchronize(pa->s0), "peer copy");
	raw = now_s() - t0;
	printf("write 1 GiB GPU0->GPU1: kvt %.1f GB/s, raw cudaMemcpyPeerAsync %.1f GB/s, ratio %.3f\n",
	       reps * GiB / t / 1e9, reps * GiB / raw / 1e9, raw / t);
}

/* n distinct pages of pg bytes at random places in [0, BUF). */
static void
scatter(uint64_t *off, unsigned int n, uint64_t pg, unsigned int seed)
{
	unsigned int slots = (unsigned int)(BUF / pg), i, j;
	unsigned int *perm = malloc(slots * sizeof(*perm));

	srand(seed);
	for (i = 0; i < slots; i++)
		perm[i] = i;
	for (i = 0; i < n; i++) {
		j = i + (unsigned int)rand() % (slots - i);
		unsigned int t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
		off[i] = (uint64_t)perm[i] * pg;
	}
	free(perm);
}

static void
bench_pages(struct parent *pa, unsigned int n, uint64_t pg, int reps)
{
	uint64_t *so = malloc(n * sizeof(*so)), *dof = malloc(n * sizeof(*dof));
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	void **dsts = malloc(n * sizeof(void *));
	const void **srcs = malloc(n * sizeof(void *));
	size_t *sizes = malloc(n * sizeof(size_t)), fail = 0;
	struct cudaMemcpyAttributes attr;
	struct kvt_pages pl;
	uint32_t *li, *ri;
	double t, ts, tl, tb, tp, t0;
	unsigned int i;
	size_t aidx = 0;
	int r;

	scatter(so, n, pg, 1);
	scatter(dof, n, pg, 2);
	for (i = 0; i < n; i++) {
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = pa->src + so[i],
			.remote = sh->child_buf + dof[i], .len = pg };
		dsts[i] = pa->raw_dst + dof[i];
		srcs[i] = pa->src + so[i];
		sizes[i] = pg;
	}
	kvt_reps(pa->p, x, n, NULL, 1);	/* warm up */
	t = kvt_reps(pa->p, x, n, NULL, reps);
	ts = submit_s;
	/* The same pages as page lists (page numbers of both pools). */
	li = malloc(n * sizeof(*li));
	ri = malloc(n * sizeof(*ri));
	for (i = 0; i < n; i++) {
		li[i] = (uint32_t)(so[i] / pg);
		ri[i] = (uint32_t)(dof[i] / pg);
	}
	pl = (struct kvt_pages){ .op = KVT_OP_WRITE, .n = n, .page_size = pg,
				 .local = pa->src, .remote = sh->child_buf,
				 .local_idx = li, .remote_idx = ri };
	kvt_reps(pa->p, NULL, 0, &pl, 1);
	tl = kvt_reps(pa->p, NULL, 0, &pl, reps);
	/* cudaMemcpyBatchAsync, what today's engines use. */
	memset(&attr, 0, sizeof(attr));
	attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
	cudaSetDevice(0);
	t0 = now_s();
	for (r = 0; r < reps; r++)
		check(cudaMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &aidx, 1,
					   pa->s0), "cudaMemcpyBatchAsync");
	check(cudaStreamSynchronize(pa->s0), "batch");
	tb = now_s() - t0;
	/* One cudaMemcpyAsync per page. */
	t0 = now_s();
	for (r = 0; r < reps; r++)
		for (i = 0; i < n; i++)
			fail += cudaMemcpyAsync(dsts[i], srcs[i], pg,
						cudaMemcpyDefault, pa->s0) != 0;
	check(cudaStreamSynchronize(pa->s0), "per page");
	tp = now_s() - t0;
	printf("%u x %llu KiB scattered GPU0->GPU1: kvt %.1f GB/s (submitting took %.0f%% of it), as page lists %.1f GB/s (%.0f%%), cudaMemcpyBatchAsync %.1f GB/s, per-page cudaMemcpyAsync %.1f GB/s%s\n",
	       n, (unsigned long long)(pg >> 10), reps * (double)n * pg / t / 1e9,
	       100 * ts / t, reps * (double)n * pg / tl / 1e9, 100 * submit_s / tl,
	       reps * (double)n * pg / tb / 1e9, reps * (double)n * pg / tp / 1e9,
	       fail ? " (per-page copies failed)" : "");
	free(so);
	free(dof);
	free(li);
	free(ri);
	free(x);
	free(dsts);
	free(srcs);
	free(sizes);
}

static void
bench_bidir(struct parent *pa, int reps)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = pa->src,
			      .remote = sh->child_buf, .len = GiB };
	uint8_t *raw_back;
	double kvt_fwd, raw, t0;
	int r;

	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	run_phase(PH_BIDIR);
	usleep(300000);		/* the child opens us */
	__atomic_store_n(&sh->ready, 2, __ATOMIC_RELEASE);
	kvt_fwd = reps * GiB / kvt_reps(pa->p, &x, 1, NULL, reps) / 1e9;
	wait_phase(PH_BIDIR);
	/* Raw: two peer copies at once, one from each GPU. */
	cudaSetDevice(1);
	check(cudaMalloc((void **)&raw_back, GiB), "cudaMalloc");
	cudaSetDevice(0);
	t0 = now_s();
	for (r = 0; r < reps; r++) {
		cudaMemcpyPeerAsync(pa->raw_dst, 1, pa->src, 0, GiB, pa->s0);
		cudaMemcpyPeerAsync(pa->src + GiB, 0, raw_back, 1, GiB, pa->s1);
	}
	check(cudaStreamSynchronize(pa->s0), "bidir");
	check(cudaStreamSynchronize(pa->s1), "bidir");
	raw = 2.0 * reps * GiB / (now_s() - t0) / 1e9;
	printf("both directions at once: kvt %.1f + %.1f = %.1f GB/s, raw two cudaMemcpyPeerAsync %.1f GB/s, ratio %.3f\n",
	       kvt_fwd, sh->bidir_gbps, kvt_fwd + sh->bidir_gbps, raw,
	       (kvt_fwd + sh->bidir_gbps) / raw);
	cudaFree(raw_back);
}

static void
report_lat(const char *what, uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	printf("%s: median %.2f us, p99 %.2f us (%d rounds)\n", what,
	       (double)v[n / 2] / 1000, (double)v[n * 99 / 100] / 1000, n);
}

static void
bench_latency(struct parent *pa, int rounds)
{
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = pa->src,
			      .remote = sh->child_buf, .len = 4096 };
	struct kvt_batch *b = kvt_batch_alloc(1);
	CUresult (*wv)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = NULL;
	enum cudaDriverEntryPointQueryResult q;
	uint64_t *lat = malloc(rounds * sizeof(*lat)), *word, t0, since;
	uint64_t *sub = malloc(rounds * sizeof(*sub));
	unsigned int spin;
	void *dword;
	int r;

	run_phase(PH_LAT);
	for (r = 0; r < rounds; r++) {
		since = now_ns();
		for (spin = 1; __atomic_load_n(&sh->armed, __ATOMIC_ACQUIRE) !=
		     (uint64_t)r + 1; spin++)
			if ((spin & 4095) == 0)
				child_check(since);
		o.fence = (struct kvt_fence_ref){ .table = sh->child_ft,
			.slot = (uint32_t)(r % SLOTS), .room = (uint64_t)r + 1 };
		sh->t0[r] = now_ns();
		if (kvt_submit(b, pa->p, &x, 1, &o) < 0)
			die("latency: submit");
		sub[r] = now_ns() - sh->t0[r];
		if (kvt_wait(b, 10000000) != 0)
			die("latency: transfer");
		kvt_batch_reset(b);
	}
	wait_phase(PH_LAT);
	for (r = 0; r < rounds; r++)
		lat[r] = sh->t1[r] - sh->t0[r];
	report_lat("kvt 4 KiB write + fence, seen by the receiver's polling thread",
		   lat, rounds);
	report_lat("  of which kvt_submit() on the application thread", sub, rounds);
	free(sub);
	/* Raw: cudaMemcpyAsync + cuStreamWriteValue64 to a pinned word that
	 * this thread polls. */
	if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", (void **)&wv,
					     12000, cudaEnableDefault, &q) != 0 ||
	    wv == NULL)
		die("cuStreamWriteValue64 unavailable");
	cudaSetDevice(0);
	check(cudaHostAlloc((void **)&word, 64, cudaHostAllocMapped |
			    cudaHostAllocPortable), "cudaHostAlloc");
	check(cudaHostGetDevicePointer(&dword, word, 0), "device pointer");
	for (r = 0; r < rounds; r++) {
		*(volatile uint64_t *)word = 0;
		t0 = now_ns();
		cudaMemcpyAsync(pa->raw_dst, pa->src, 4096, cudaMemcpyDefault, pa->s0);
		wv(pa->s0, (CUdeviceptr)(uintptr_t)dword, (cuuint64_t)r + 1, 0);
		while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != (uint64_t)r + 1)
			;
		lat[r] = now_ns() - t0;
	}
	report_lat("raw 4 KiB cudaMemcpyAsync + cuStreamWriteValue64, seen by a polling thread",
		   lat, rounds);
	cudaFreeHost(word);
	free(lat);
	kvt_batch_free(b);
}

static int
has(const char *tests, const char *t)
{
	const char *p = strstr(tests, t);
	size_t n = strlen(t);

	return p != NULL && (p[n] == '\0' || p[n] == ',');
}

static int
parent_main(int argc, char **argv, const char *tests, int rounds)
{
	struct parent pa;
	uint64_t since;
	int ret;

	ret = kvt_init(argc, argv);
	if (ret < 0)
		die("parent: kvt_init");
	pa.src = kvt_mem_alloc(BUF, "cuda:0");
	if (pa.src == NULL ||
	    kvt_mem_register(pa.src, BUF, "cuda:0",
			     KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE) == NULL)
		die("parent: GPU 0 memory");
	sh->parent_buf = (uintptr_t)pa.src;
	kvt_listen_addr(sh->parent_addr, sizeof(sh->parent_addr));
	since = now_ns();
	while (!__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE)) {
		child_check(since);
		usleep(1000);
	}
	pa.p = kvt_peer_open(sh->child_addr, 10000);
	if (pa.p == NULL)
		die("parent: cannot open the child");
	check(cudaSetDevice(1), "cudaSetDevice");
	check(cudaMalloc((void **)&pa.raw_dst, BUF), "cudaMalloc GPU 1");
	check(cudaStreamCreateWithFlags(&pa.s1, cudaStreamNonBlocking), "stream");
	check(cudaSetDevice(0), "cudaSetDevice");
	check(cudaStreamCreateWithFlags(&pa.s0, cudaStreamNonBlocking), "stream");
	if (has(tests, "write"))
		bench_write(&pa, 10);
	if (has(tests, "pages64k"))
		bench_pages(&pa, 4096, 64 << 10, 20);
	if (has(tests, "pages4k"))
		bench_pages(&pa, 65536, 4096, 20);
	if (has(tests, "bidir"))
		bench_bidir(&pa, 10);
	if (has(tests, "lat"))
		bench_latency(&pa, rounds);
	run_phase(PH_QUIT);
	kvt_peer_close(pa.p);
	kvt_fini();
	return 0;
}

int
main(int argc, char **argv)
{
	const char *tests = "write,pages64k,pages4k,bidir,lat";
	int rounds = 10000, i, kargc = argc, st;
	pid_t parent;

	/* Our options come last, after kvt's. */
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
			tests = argv[i + 1];
			kargc = kargc < i ? kargc : i;
		} else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
			rounds = atoi(argv[i + 1]);
			kargc = kargc < i ? kargc : i;
		}
	}
	if (rounds < 100 || rounds > LAT_MAX)
		die("-n: 100 .. 100000 rounds");
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		die("shared memory");
	memset(sh, 0, sizeof(*sh));
	/* Fork before CUDA or EAL exist in this process. */
	parent = getpid();
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		/* A parent that died leaves no receiver spinning. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			return 1;
		return child_main(kargc, argv, rounds);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	parent_main(kargc, argv, tests, rounds);
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		die("the receiving process failed");
	return 0;
}
