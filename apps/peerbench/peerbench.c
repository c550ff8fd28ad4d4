/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt-peerbench: one engine with many peers open.
 *
 *   kvt-peerbench [EAL args] -- [--kvt-* options] ADDR...
 *
 * ADDR... are running engines that export a writable buffer (kvfwd
 * targets; scripts/bench-peers starts them).  It opens the first, times
 * kvt_submit and kvt_poll of 4 KiB writes to it, opens every other one
 * (the time each open takes), counts what the open peers cost (resident
 * memory, file descriptors), watches the control thread's cpu while the
 * peers sit idle, and times kvt_submit and kvt_poll to the first peer
 * again with all of them open.  One line of JSON on stdout.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_errno.h>

#include "kvt.h"

#define MAX_PEERS 1024
#define ROUNDS 20000

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Resident memory in KiB. */
static long
rss_kib(void)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	if (f != NULL)
		fclose(f);
	return v;
}

static int
open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d != NULL && readdir(d) != NULL)
		n++;
	if (d != NULL)
		closedir(d);
	return n - 3;	/* ".", "..", the directory itself */
}

/* CPU seconds of the thread named name (utime + stime). */
static double
thread_cpu(const char *name)
{
	char path[300], comm[64], stat[1024];
	unsigned long ut = 0, st = 0;
	struct dirent *e;
	DIR *d = opendir("/proc/self/task");
	FILE *f;
	char *p;

	while (d != NULL && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f == NULL || fgets(comm, sizeof(comm), f) == NULL) {
			if (f != NULL)
				fclose(f);
			continue;
		}
		fclose(f);
		comm[strcspn(comm, "\n")] = '\0';
		if (strcmp(comm, name) != 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		f = fopen(path, "r");
		if (f != NULL && fgets(stat, sizeof(stat), f) != NULL) {
			/* Fields 14 and 15, after the ")" that ends the name. */
			p = strrchr(stat, ')');
			if (p != NULL)
				sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
				       &ut, &st);
		}
		if (f != NULL)
			fclose(f);
		break;
	}
	if (d != NULL)
		closedir(d);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The peer's largest writable region. */
static uint64_t
peer_buffer(struct kvt_peer *p)
{
	struct kvt_region r[16];
	double until = now_s() + 5;
	uint64_t base = 0, len = 0;
	int n, i;

	do {
		n = kvt_peer_regions(p, r, 16);
		for (i = 0; i < n && i < 16; i++)
			if (r[i].len > len && (r[i].flags & KVT_MEM_REMOTE_WRITE))
				base = r[i].base, len = r[i].len;
	} while (len < 4096 && now_s() < until && usleep(10000) == 0);
	return len >= 4096 ? base : 0;
}

/*
 * ROUNDS 4 KiB writes to p, one at a time: the time kvt_submit takes
 * (p50, p99, us) and what one kvt_poll costs while the write is in
 * flight (mean ns over every call until it settles).
 */
static int
costs(struct kvt_peer *p, uint8_t *src, uint64_t dst, double *s50,
      double *s99, double *poll_ns)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src, .remote = dst,
			      .len = 4096 };
	struct kvt_batch *b = kvt_batch_alloc(1);
	double *t = calloc(ROUNDS, sizeof(*t)), t0, polls = 0, spent = 0;
	unsigned int i;
	int ret = -ENOMEM;

	if (b == NULL || t == NULL)
		goto out;
	for (i = 0; i < ROUNDS; i++) {
		t0 = now_s();
		ret = kvt_submit(b, p, &x, 1, NULL);
		t[i] = now_s() - t0;
		if (ret < 0)
			goto out;
		t0 = now_s();
		do {
			ret = kvt_poll(b);
			polls++;
		} while (ret > 0 && now_s() - t0 < 10);
		spent += now_s() - t0;
		if (ret != 0 || kvt_status(b, 0) != 0) {
			ret = ret != 0 ? -ETIMEDOUT : kvt_status(b, 0);
			goto out;
		}
		kvt_batch_reset(b);
	}
	qsort(t, ROUNDS, sizeof(*t), cmp_double);
	*s50 = t[ROUNDS / 2] * 1e6;
	*s99 = t[ROUNDS * 99 / 100] * 1e6;
	*poll_ns = spent / polls * 1e9;
	ret = 0;
out:
	kvt_batch_free(b);
	free(t);
	return ret;
}

int
main(int argc, char **argv)
{
	static struct kvt_peer *peers[MAX_PEERS];
	static double open_s[MAX_PEERS];
	static uint8_t src[4096];
	double s50[2], s99[2], poll_ns[2], t0, cpu0, cpu1, idle = 5;
	long rss0, rss1;
	int fds0, fds1, n, i, ret;
	uint64_t dst = 0;

	ret = kvt_init(argc, argv);
	if (ret < 0) {
		fprintf(stderr, "kvt-peerbench: kvt_init: %s\n", strerror(-ret));
		return 1;
	}
	argc -= ret;
	argv += ret;
	n = argc - 1;
	if (n < 1 || n > MAX_PEERS) {
		fprintf(stderr, "usage: kvt-peerbench [EAL args] -- [kvt options] ADDR...\n");
		return 2;
	}
	kvt_mem_register(src, sizeof(src), NULL, 0);
	rss0 = rss_kib();
	fds0 = open_fds();
	for (i = 0; i < n; i++) {
		t0 = now_s();
		peers[i] = kvt_peer_open(argv[i + 1], 10000);
		open_s[i] = now_s() - t0;
		if (peers[i] == NULL) {
			fprintf(stderr, "kvt-peerbench: open %s: %s\n", argv[i + 1],
				rte_strerror(rte_errno));
			return 1;
		}
		if (i > 0)
			continue;
		dst = peer_buffer(peers[0]);
		if (dst == 0 || costs(peers[0], src, dst, &s50[0], &s99[0],
				      &poll_ns[0]) < 0) {
			fprintf(stderr, "kvt-peerbench: writes to %s failed\n",
				argv[1]);
			return 1;
		}
	}
	rss1 = rss_kib();
	fds1 = open_fds();
	cpu0 = thread_cpu("kvt-ctl");
	t0 = now_s();
	sleep((unsigned int)idle);
	cpu1 = thread_cpu("kvt-ctl");
	idle = now_s() - t0;
	if (costs(peers[0], src, dst, &s50[1], &s99[1], &poll_ns[1]) < 0) {
		fprintf(stderr, "kvt-peerbench: writes with %d peers open failed\n", n);
		return 1;
	}
	qsort(open_s + 1, (size_t)(n - 1), sizeof(double), cmp_double);
	printf("{\"peers\":%d,\"open_first_ms\":%.2f,\"open_p50_ms\":%.2f,"
	       "\"open_max_ms\":%.2f,\"rss_kib_per_peer\":%.1f,"
	       "\"fds_per_peer\":%.2f,\"ctl_cpu_idle\":%.4f,"
	       "\"submit_p50_us\":[%.3f,%.3f],\"submit_p99_us\":[%.3f,%.3f],"
	       "\"poll_ns\":[%.1f,%.1f]}\n",
	       n, open_s[0] * 1e3, n > 1 ? open_s[1 + (n - 1) / 2] * 1e3 : 0,
	       n > 1 ? open_s[n - 1] * 1e3 : 0,
	       (double)(rss1 - rss0) / n, (double)(fds1 - fds0) / n,
	       (cpu1 - cpu0) / idle, s50[0], s50[1], s99[0], s99[1],
	       poll_ns[0], poll_ns[1]);
	for (i = 0; i < n; i++)
		kvt_peer_close(peers[i]);
	kvt_fini();
	return 0;
}
