/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt-regbench: the cost of many registered regions, as a serving stack
 * has them (one per layer and tensor).  For each count N it registers N
 * regions side by side, waits until a peer (this engine, opened through
 * its own control port) has imported them all, submits single writes to
 * random regions (twice: first writes, then again), and unregisters them.  It prints the time per region of
 * each step ("imported": from the first register until the peer has them
 * all) and the submit time per write; the last column, a count's time per
 * region (imported + unregister) over the first count's, shows how the
 * cost grows (1.0: linear in N overall).
 *
 *   kvt-regbench [EAL args] -- [--kvt-* options] [-n N[,N...]] [-s SIZE]
 *                [-w WRITES]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include <rte_errno.h>

#include "kvt.h"

#define MAX_COUNTS 8

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct step {
	double reg, import, unreg;	/* seconds per region */
	double first, submit;	/* per submit: first to its region, later */
};

/* Until the peer lists want regions, 60 s at most. */
static int
await_import(struct kvt_peer *p, int want)
{
	double t0 = now_s();

	while (kvt_peer_regions(p, NULL, 0) != want) {
		if (now_s() - t0 > 60)
			return -ETIMEDOUT;
		usleep(100);
	}
	return 0;
}

static unsigned int submits = 20000;

static int
run_count(struct kvt_peer *p, uint8_t *base, size_t size, unsigned int n,
	  uint8_t *srcbuf, struct step *st)
{
	struct kvt_mem **m = calloc(n, sizeof(*m));
	struct kvt_batch *b = kvt_batch_alloc(1);
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = srcbuf, .len = 64 };
	unsigned int i, seed, pass;
	double t0, busy = 0;
	int ret = -ENOMEM;

	if (m == NULL || b == NULL)
		goto out;
	t0 = now_s();
	for (i = 0; i < n; i++) {
		m[i] = kvt_mem_register(base + (size_t)i * size, size, NULL,
					KVT_MEM_REMOTE_WRITE);
		if (m[i] == NULL) {
			fprintf(stderr, "kvt-regbench: register %u: %s\n", i,
				rte_strerror(rte_errno));
			ret = -rte_errno;
			goto unregister;
		}
	}
	st->reg = (now_s() - t0) / n;
	ret = await_import(p, (int)n);
	st->import = (now_s() - t0) / n;
	if (ret < 0) {
		fprintf(stderr, "kvt-regbench: the peer did not import %u regions\n", n);
		goto unregister;
	}
	/* Twice the same random regions: a region's first write also makes
	 * its overlap guard (made on first use: 8 KiB a region adds up). */
	for (pass = 0; pass < 2; pass++) {
		seed = n;
		busy = 0;
		for (i = 0; i < submits; i++) {
			x.remote = (uintptr_t)base +
				(uint64_t)(rand_r(&seed) % n) * size;
			t0 = now_s();
			ret = kvt_submit(b, p, &x, 1, NULL);
			busy += now_s() - t0;
			if (ret < 0 || kvt_wait(b, 5000000) != 0) {
				fprintf(stderr, "kvt-regbench: write %u failed\n", i);
				ret = ret < 0 ? ret : -EIO;
				goto unregister;
			}
			kvt_batch_reset(b);
		}
		*(pass == 0 ? &st->first : &st->submit) =
			submits != 0 ? busy / submits : 0;
	}
	ret = 0;
unregister:
	t0 = now_s();
	for (i = 0; i < n && m[i] != NULL; i++)
		kvt_mem_unregister(m[i]);
	st->unreg = (now_s() - t0) / n;
	if (ret == 0 && await_import(p, 0) < 0)
		ret = -ETIMEDOUT;
out:
	kvt_batch_free(b);
	free(m);
	return ret;
}

static int
parse_counts(char *s, unsigned int *c)
{
	unsigned int k = 0;
	char *tok, *save = NULL;

	for (tok = strtok_r(s, ",", &save); tok != NULL && k < MAX_COUNTS;
	     tok = strtok_r(NULL, ",", &save))
		if ((c[k++] = (unsigned int)strtoul(tok, NULL, 10)) == 0)
			return -1;
	return k;
}

int
main(int argc, char **argv)
{
	static uint8_t srcbuf[4096];
	unsigned int counts[MAX_COUNTS] = { 1000, 10000, 100000 }, max = 0;
	struct step st[MAX_COUNTS];
	int ncounts = 3, ret, opt, i;
	size_t size = 64 << 10;
	struct kvt_peer *p;
	struct kvt_mem *src;
	char addr[64];
	uint8_t *base;

	ret = kvt_init(argc, argv);
	if (ret < 0) {
		fprintf(stderr, "kvt-regbench: kvt_init: %s\n", strerror(-ret));
		return 1;
	}
	argc -= ret;
	argv += ret;
	optind = 0;	/* after the engine's own parsing */
	while ((opt = getopt(argc, argv, "n:s:w:")) != -1) {
		if (opt == 'w')
			submits = (unsigned int)strtoul(optarg, NULL, 10);
		else if (opt == 'n')
			ncounts = parse_counts(optarg, counts);
		else if (opt == 's')
			size = strtoul(optarg, NULL, 0);
		else
			return 2;
	}
	if (ncounts <= 0 || size < 64) {
		fprintf(stderr, "kvt-regbench: -n N[,N...] (N > 0), -s SIZE (>= 64)\n");
		return 2;
	}
	for (i = 0; i < ncounts; i++)
		max = counts[i] > max ? counts[i] : max;
	/* Untouched until a write lands: address space, not memory. */
	base = mmap(NULL, (size_t)max * size, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	src = kvt_mem_register(srcbuf, sizeof(srcbuf), NULL, 0);
	kvt_listen_addr(addr, sizeof(addr));
	p = kvt_peer_open(addr, 5000);
	if (base == MAP_FAILED || src == NULL || p == NULL) {
		fprintf(stderr, "kvt-regbench: set-up failed\n");
		return 1;
	}
	printf("%9s %12s %12s %12s %13s %12s %11s\n", "regions", "register us",
	       "imported us", "unreg us", "1st submit us", "submit us",
	       "vs first N");
	for (i = 0; i < ncounts; i++) {
		ret = run_count(p, base, size, counts[i], srcbuf, &st[i]);
		if (ret < 0)
			return 1;
		printf("%9u %12.2f %12.2f %12.2f %13.3f %12.3f %11.2f\n",
		       counts[i], st[i].reg * 1e6, st[i].import * 1e6,
		       st[i].unreg * 1e6, st[i].first * 1e6, st[i].submit * 1e6,
		       (st[i].import + st[i].unreg) /
		       (st[0].import + st[0].unreg));
		fflush(stdout);
	}
	kvt_peer_close(p);
	kvt_mem_unregister(src);
	kvt_fini();
	return 0;
}
