/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The application of scripts/route-walk: one 4 KiB write at a time to a
 * kvt-testpeer, through the public API only (so it builds against any
 * revision).
 *   walk PEER_BIN [--kvt-* options]
 * starts the peer with the same options, has it allocate 1 MiB, writes
 * 4 KiB there five times (kvt_submit, then kvt_wait), and writes the
 * last write's window (CLOCK_MONOTONIC ns, from before kvt_submit to
 * after kvt_wait returned) to $KVT_ROUTE_DIR/window.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include "kvt.h"

#define WALK_LEN 4096
#define WALK_WRITES 5

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Start bin with args; its stdin is *to, its stdout *from. */
static pid_t
peer_start(char **args, FILE **to, FILE **from)
{
	int in[2], out[2];
	pid_t pid;

	if (pipe(in) != 0 || pipe(out) != 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execv(args[0], args);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	*to = fdopen(in[1], "w");
	*from = fdopen(out[0], "r");
	setvbuf(*to, NULL, _IOLBF, 0);
	return pid;
}

int
main(int argc, char **argv)
{
	char *pargs[64], *kargs[64], line[256], addr[64], path[4096];
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .len = WALK_LEN };
	const char *dir = getenv("KVT_ROUTE_DIR");
	uint64_t base = 0, t0 = 0, t1 = 0;
	struct kvt_batch *b;
	struct kvt_peer *p;
	FILE *to, *from, *w;
	int i, n = 0, k = 0, st = 1;
	pid_t pid;
	void *src;

	if (argc < 2 || dir == NULL || argc > 40) {
		fprintf(stderr, "usage: KVT_ROUTE_DIR=DIR walk PEER_BIN [--kvt-*]\n");
		return 2;
	}
	pargs[n++] = argv[1];
	kargs[k++] = (char *)"walk";
	pargs[n++] = kargs[k++] = (char *)"--";
	pargs[n++] = kargs[k++] = (char *)"--kvt-listen";
	pargs[n++] = kargs[k++] = (char *)"127.0.0.1:0";
	for (i = 2; i < argc; i++)
		pargs[n++] = kargs[k++] = argv[i];
	pargs[n] = kargs[k] = NULL;
	pid = peer_start(pargs, &to, &from);
	if (pid < 0 || fgets(line, sizeof(line), from) == NULL ||
	    sscanf(line, "ready %63s", addr) != 1) {
		fprintf(stderr, "walk: the peer did not start\n");
		return 1;
	}
	fprintf(to, "alloc 0 1048576 rw\n");
	if (fgets(line, sizeof(line), from) == NULL ||
	    sscanf(line, "ok %" SCNx64, &base) != 1)
		goto peer_stop;
	if (kvt_init(k, kargs) < 0)
		goto peer_stop;
	src = aligned_alloc(4096, WALK_LEN);
	p = kvt_peer_open(addr, 5000);
	b = kvt_batch_alloc(1);
	if (src == NULL || p == NULL || b == NULL ||
	    kvt_mem_register(src, WALK_LEN, NULL, 0) == NULL)
		goto fini;
	memset(src, 7, WALK_LEN);
	x.local = src;
	x.remote = base;
	for (i = 0; i < WALK_WRITES; i++) {
		kvt_batch_reset(b);
		t0 = now_ns();
		if (kvt_submit(b, p, &x, 1, NULL) < 0 ||
		    kvt_wait(b, 5000000) != 0 || kvt_status(b, 0) != 0)
			goto fini;
		t1 = now_ns();
	}
	snprintf(path, sizeof(path), "%s/window", dir);
	w = fopen(path, "w");
	if (w != NULL) {
		fprintf(w, "%d %" PRIu64 " %" PRIu64 "\n", (int)getpid(), t0, t1);
		fclose(w);
		st = 0;
	}
fini:
	kvt_fini();
peer_stop:
	fprintf(to, "quit\n");
	fclose(to);
	waitpid(pid, NULL, 0);
	if (st != 0)
		fprintf(stderr, "walk: a write failed\n");
	return st;
}
