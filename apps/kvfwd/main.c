/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvfwd: test a link before trusting it with serving traffic, and measure
 * it.  kvfwd [EAL args] -- [--kvt-* options] MODE [options]
 *
 *   target     register a buffer, print the address to connect to, serve
 *   initiator  connect to a target and move bytes
 *   loopback   start a target process, then run the initiator against it
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
#include <sys/prctl.h>
#include <sys/wait.h>

#include "kvfwd.h"

#define MAX_ARGS 128

static void
usage(FILE *f)
{
	fprintf(f,
"usage: kvfwd [EAL args] -- [--kvt-* options] MODE [options]\n"
"modes: target | initiator --peer HOST:PORT[,HOST:PORT...] | loopback\n"
"  (several targets: plain runs only; thread i writes to target i mod N)\n"
"  --op read|write        direction of the transfer (write)\n"
"  --block SIZE           bytes per request (64K)\n"
"  --batch N              requests per batch (128)\n"
"  --depth N              batches in flight per thread (1): the next is\n"
"                         submitted while earlier ones move (not with\n"
"                         --fence)\n"
"  --threads N            submitting threads (1)\n"
"  --total SIZE           bytes to move (1G), or\n"
"  --duration SECS        run time instead of a byte count\n"
"  --src-loc LOC          initiator memory: cpu:N or cuda:N (cpu:0)\n"
"  --dst-loc LOC          target memory (cpu:0)\n"
"  --buffer SIZE          target buffer (256M)\n"
"  --transport NAME[,k=v] transport (same as --kvt-pmd)\n"
"  --slice SIZE           slice size (same as --kvt-slice)\n"
"  --nic LIST             NIC allow-list (same as --kvt-nic)\n"
"  --pages                each batch is one page list (kvt_submit_pages) of\n"
"                         --batch pages of --block bytes, scattered over the\n"
"                         target buffer; latency/req is then per list\n"
"  --list                 the same as one block list (kvt_submit_blocks):\n"
"                         addresses and lengths, as serving stacks pass them\n"
"  --fence                every request carries a fence with a room id\n"
"  --priority CLASS       urgent, normal or bulk: the class of every\n"
"                         request (normal)\n"
"  --mixed[=CLASS]        beside the stream above, one thread writes 4 KiB\n"
"                         blocks one at a time, of class CLASS (urgent),\n"
"                         to the last MiB of the target buffer; its latency\n"
"                         is reported apart (plain writes only)\n"
"  --mixed-every US       start a small write every US microseconds at most\n"
"                         (0: back to back)\n"
"  --verify               check every block at the receiver (implies --fence\n"
"                         for writes); exit 1 on any mixed or stale block\n"
"  --baseline             measure the raw copy the transport competes with\n"
"  --baseline-to IP[,IP]  tcp: target addresses the plain socket streams go\n"
"                         to, one stream each (default: the --peer host)\n"
"  --json                 machine-readable result on stdout\n"
"  --initiators N         target: serve up to N initiators at once (1); the\n"
"                         buffer and the fence table are split in N areas,\n"
"                         one per fence or verify session\n"
"  --start-at T           initiator: begin the timed part at T (seconds since\n"
"                         the epoch, CLOCK_REALTIME), so processes start\n"
"                         together; warm-up and hello come before\n"
"  --baseline-only        initiator: measure only the --baseline (from\n"
"                         --start-at), for N streams at once\n");
}

static int
parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v < 0)
		return -1;
	switch (*end) {
	case 'k': case 'K': v *= 1024; end++; break;
	case 'm': case 'M': v *= 1024 * 1024; end++; break;
	case 'g': case 'G': v *= 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': v *= 1024.0 * 1024 * 1024 * 1024; end++; break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	/* nan compares false both ways: reject anything not a finite size
	 * in [1, 2^62] (1e30 bytes would not fit, and would move nothing). */
	if (*end != '\0' || !(v >= 1 && v <= 4611686018427387904.0))
		return -1;
	*out = (uint64_t)v;
	return 0;
}

enum {
	O_PEER = 256, O_OP, O_BLOCK, O_BATCH, O_DEPTH, O_THREADS, O_TOTAL, O_DURATION,
	O_SRC, O_DST, O_BUFFER, O_TRANSPORT, O_SLICE, O_NIC, O_FENCE,
	O_VERIFY, O_BASELINE, O_BASELINE_TO, O_JSON, O_FAULT, O_HELP, O_PAGES, O_LIST,
	O_PRIORITY, O_MIXED, O_MIXED_EVERY, O_INITIATORS, O_START_AT,
	O_BASELINE_ONLY,
};

static const struct option long_opts[] = {
	{ "peer", required_argument, NULL, O_PEER },
	{ "op", required_argument, NULL, O_OP },
	{ "block", required_argument, NULL, O_BLOCK },
	{ "batch", required_argument, NULL, O_BATCH },
	{ "depth", required_argument, NULL, O_DEPTH },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "total", required_argument, NULL, O_TOTAL },
	{ "duration", required_argument, NULL, O_DURATION },
	{ "src-loc", required_argument, NULL, O_SRC },
	{ "dst-loc", required_argument, NULL, O_DST },
	{ "buffer", required_argument, NULL, O_BUFFER },
	{ "transport", required_argument, NULL, O_TRANSPORT },
	{ "slice", required_argument, NULL, O_SLICE },
	{ "nic", required_argument, NULL, O_NIC },
	{ "fence", no_argument, NULL, O_FENCE },
	{ "pages", no_argument, NULL, O_PAGES },
	{ "list", no_argument, NULL, O_LIST },
	{ "verify", no_argument, NULL, O_VERIFY },
	{ "baseline", no_argument, NULL, O_BASELINE },
	{ "baseline-to", required_argument, NULL, O_BASELINE_TO },
	{ "json", no_argument, NULL, O_JSON },
	{ "priority", required_argument, NULL, O_PRIORITY },
	{ "mixed", optional_argument, NULL, O_MIXED },
	{ "mixed-every", required_argument, NULL, O_MIXED_EVERY },
	{ "initiators", required_argument, NULL, O_INITIATORS },
	{ "start-at", required_argument, NULL, O_START_AT },
	{ "baseline-only", no_argument, NULL, O_BASELINE_ONLY },
#ifdef KVFWD_FAULT_INJECT
	/* Test-only (-Dfault_inject=true): damage one block's source. */
	{ "x-fault-corrupt-block", required_argument, NULL, O_FAULT },
#endif
	{ "help", no_argument, NULL, O_HELP },
	{ NULL, 0, NULL, 0 },
};

struct args {
	char *eal[MAX_ARGS];
	int n_eal;
	char *kvt[MAX_ARGS];
	int n_kvt;
};

static int
add_kvt(struct args *a, const char *opt, const char *val)
{
	if (a->n_kvt + 2 >= MAX_ARGS)
		return -1;
	a->kvt[a->n_kvt++] = (char *)opt;
	a->kvt[a->n_kvt++] = strdup(val);
	return 0;
}

static int
parse_prio(const char *s, uint32_t *out)
{
	static const char *const names[] = { [KVT_PRIO_NORMAL] = "normal",
		[KVT_PRIO_URGENT] = "urgent", [KVT_PRIO_BULK] = "bulk" };
	uint32_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
	return -1;
}

static int
bad(const char *what, const char *v)
{
	fprintf(stderr, "kvfwd: invalid %s '%s'\n", what, v);
	return -1;
}

/* Options after the mode. */
static int
parse_opts(struct kvfwd_opts *o, struct args *a, int argc, char **argv)
{
	int c, idx;
	long v;
	char *end;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+", long_opts, &idx)) != -1) {
		switch (c) {
		case O_PEER:
			snprintf(o->peer, sizeof(o->peer), "%s", optarg);
			break;
		case O_OP:
			if (strcmp(optarg, "read") == 0)
				o->op = KVT_OP_READ;
			else if (strcmp(optarg, "write") == 0)
				o->op = KVT_OP_WRITE;
			else
				return bad("--op", optarg);
			break;
		case O_BLOCK:
			if (parse_size(optarg, &o->block) < 0 ||
			    o->block > (1ull << 32))
				return bad("--block", optarg);
			break;
		case O_BATCH:
		case O_THREADS:
			v = strtol(optarg, &end, 10);
			if (*end != '\0' || v < 1 || v > (c == O_BATCH ? 1 << 20 : 64))
				return bad(c == O_BATCH ? "--batch" : "--threads", optarg);
			if (c == O_BATCH)
				o->batch = (unsigned int)v;
			else
				o->threads = (unsigned int)v;
			break;
		case O_DEPTH:
			v = strtol(optarg, &end, 10);
			if (*end != '\0' || v < 1 || v > 64)
				return bad("--depth (1..64)", optarg);
			o->depth = (unsigned int)v;
			break;
		case O_TOTAL:
			if (parse_size(optarg, &o->total) < 0)
				return bad("--total", optarg);
			break;
		case O_DURATION:
			o->duration = strtod(optarg, &end);
			if (*end != '\0' || !(o->duration > 0 && o->duration <= 1e7))
				return bad("--duration (seconds, at most 1e7)", optarg);
			break;
		case O_SRC:
		case O_DST:
			if (strncmp(optarg, "cpu:", 4) != 0 &&
			    strncmp(optarg, "cuda:", 5) != 0)
				return bad("location", optarg);
			snprintf(c == O_SRC ? o->src_loc : o->dst_loc,
				 sizeof(o->src_loc), "%s", optarg);
			break;
		case O_BUFFER:
			if (parse_size(optarg, &o->buffer) < 0)
				return bad("--buffer", optarg);
			break;
		case O_TRANSPORT:
			snprintf(o->transport, sizeof(o->transport), "%s", optarg);
			if (add_kvt(a, "--kvt-pmd", optarg) < 0)
				return -1;
			break;
		case O_SLICE:
			if (add_kvt(a, "--kvt-slice", optarg) < 0)
				return -1;
			break;
		case O_NIC:
			if (add_kvt(a, "--kvt-nic", optarg) < 0)
				return -1;
			break;
		case O_FENCE:
			o->fence = 1;
			break;
		case O_PAGES:
			o->pages = KVFWD_PAGES;
			break;
		case O_LIST:
			o->pages = KVFWD_BLOCKS;
			break;
		case O_VERIFY:
			o->verify = 1;
			break;
		case O_BASELINE:
			o->baseline = 1;
			break;
		case O_BASELINE_TO:
			snprintf(o->baseline_to, sizeof(o->baseline_to), "%s",
				 optarg);
			break;
		case O_JSON:
			o->json = 1;
			break;
		case O_PRIORITY:
			if (parse_prio(optarg, &o->priority) < 0)
				return bad("--priority (urgent, normal, bulk)", optarg);
			break;
		case O_MIXED_EVERY:
			v = strtol(optarg, &end, 10);
			if (*end != '\0' || v < 0 || v > 10000000)
				return bad("--mixed-every (microseconds)", optarg);
			o->mixed_every_us = (uint32_t)v;
			break;
		case O_MIXED:
			o->mixed = 1;
			o->mixed_priority = KVT_PRIO_URGENT;
			if (optarg != NULL &&
			    parse_prio(optarg, &o->mixed_priority) < 0)
				return bad("--mixed (urgent, normal, bulk)", optarg);
			break;
		case O_INITIATORS:
			v = strtol(optarg, &end, 10);
			if (*end != '\0' || v < 1 || v > KVFWD_MAX_INITIATORS)
				return bad("--initiators (1..256)", optarg);
			o->initiators = (unsigned int)v;
			break;
		case O_START_AT:
			o->start_at = strtod(optarg, &end);
			if (*end != '\0' || !(o->start_at > 0))
				return bad("--start-at (seconds since the epoch)",
					   optarg);
			break;
		case O_BASELINE_ONLY:
			o->baseline = 1;
			o->baseline_only = 1;
			break;
		case O_FAULT:
			o->fault_block = strtol(optarg, NULL, 10);
			break;
		case O_HELP:
			usage(stdout);
			exit(0);
		default:
			fprintf(stderr, "kvfwd: unknown option '%s'\n",
				argv[optind - 1]);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvfwd: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (o->verify && o->op == KVT_OP_WRITE)
		o->fence = 1;
	if (o->pages && o->fence) {
		fprintf(stderr, "kvfwd: --pages and --list measure plain runs: not with --fence or --verify\n");
		return -1;
	}
	if (o->mixed && (o->fence || o->pages || o->op == KVT_OP_READ)) {
		fprintf(stderr, "kvfwd: --mixed goes with plain writes (not --fence, --verify, --pages, --op read)\n");
		return -1;
	}
	if (o->fence && o->op == KVT_OP_READ) {
		fprintf(stderr, "kvfwd: --fence goes with --op write\n");
		return -1;
	}
	if (o->baseline_only && (o->fence || o->mixed || o->pages)) {
		fprintf(stderr, "kvfwd: --baseline-only moves no kvt bytes: not with --fence, --verify, --mixed, --pages\n");
		return -1;
	}
	if (o->mode == KVFWD_INITIATOR && o->peer[0] == '\0') {
		fprintf(stderr, "kvfwd: initiator needs --peer HOST:PORT\n");
		return -1;
	}
	return 0;
}

static int
parse_all(struct kvfwd_opts *o, struct args *a, int argc, char **argv)
{
	int i = 1, sep = -1, j;
	const char *mode;

	for (j = 1; j < argc; j++)
		if (strcmp(argv[j], "--") == 0) {
			sep = j;
			break;
		}
	a->eal[a->n_eal++] = argv[0];
	if (sep > 0) {
		for (j = 1; j < sep && a->n_eal < MAX_ARGS - 1; j++)
			a->eal[a->n_eal++] = argv[j];
		i = sep + 1;
	}
	/* kvt's options come first, each with its value. */
	while (i < argc && strncmp(argv[i], "--kvt-", 6) == 0 &&
	       a->n_kvt < MAX_ARGS - 2) {
		a->kvt[a->n_kvt++] = argv[i];
		if (strchr(argv[i], '=') == NULL && i + 1 < argc)
			a->kvt[a->n_kvt++] = argv[++i];
		i++;
	}
	if (i >= argc) {
		usage(stderr);
		return -1;
	}
	mode = argv[i];
	if (strcmp(mode, "target") == 0)
		o->mode = KVFWD_TARGET;
	else if (strcmp(mode, "initiator") == 0)
		o->mode = KVFWD_INITIATOR;
	else if (strcmp(mode, "loopback") == 0)
		o->mode = KVFWD_LOOPBACK;
	else if (strcmp(mode, "--help") == 0 || strcmp(mode, "-h") == 0) {
		usage(stdout);
		exit(0);
	} else {
		fprintf(stderr, "kvfwd: unknown mode '%s' (target, initiator, loopback)\n",
			mode);
		return -1;
	}
	return parse_opts(o, a, argc - i, argv + i);
}

static int
start_kvt(struct args *a, int listen_loopback)
{
	char *argv[2 * MAX_ARGS + 5];
	int n = 0, i, ret;

	argv[n++] = a->eal[0];
	/* The loopback target says only what goes wrong: its start-up
	 * notices would repeat the initiator's (an EAL --log-level the
	 * user gives comes later and wins). */
	if (getenv("KVFWD_LOOPBACK_TARGET") != NULL)
		argv[n++] = (char *)"--log-level=kvt*:warning";
	for (i = 1; i < a->n_eal; i++)
		argv[n++] = a->eal[i];
	argv[n++] = (char *)"--";
	for (i = 0; i < a->n_kvt; i++)
		argv[n++] = a->kvt[i];
	if (listen_loopback) {
		argv[n++] = (char *)"--kvt-listen";
		argv[n++] = (char *)"127.0.0.1:0";
	}
	argv[n] = NULL;
	ret = kvt_init(n, argv);
	if (ret < 0) {
		fprintf(stderr, "kvfwd: cannot start kvt: %s\n", strerror(-ret));
		return -1;
	}
	return 0;
}

/* Loopback: run ourselves as the target, read its address, go. */
static pid_t
spawn_target(int argc, char **argv, char *addr, size_t len)
{
	char *args[MAX_ARGS + 4], line[256];
	int pfd[2], i, n = 0, m;
	FILE *f;
	pid_t pid;

	if (pipe(pfd) != 0)
		return -1;
	for (i = 0; i < argc && n < MAX_ARGS; i++) {
		if (strcmp(argv[i], "loopback") == 0 && n > 0 &&
		    strncmp(args[n - 1], "--kvt-", 6) != 0)
			args[n++] = (char *)"target";
		else
			args[n++] = argv[i];
	}
	args[n] = NULL;
	pid = fork();
	if (pid == 0) {
		/* The target must not outlive us, however we end. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		setenv("KVFWD_LOOPBACK_TARGET", "1", 1);
		dup2(pfd[1], 1);
		close(pfd[0]);
		execv("/proc/self/exe", args);
		_exit(127);
	}
	close(pfd[1]);
	f = fdopen(pfd[0], "r");
	m = -1;
	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if ((m = sscanf(line, "kvfwd target: listening on %127s", addr)) == 1)
			break;
	if (f != NULL)
		fclose(f);
	if (m != 1) {
		fprintf(stderr, "kvfwd: the loopback target did not start\n");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	addr[len - 1] = '\0';
	return pid;
}

int
main(int argc, char **argv)
{
	struct kvfwd_opts o = {
		.op = KVT_OP_WRITE, .block = 64 << 10, .batch = 128,
		.depth = 1, .threads = 1, .total = 1ull << 30, .buffer = 256 << 20,
		.src_loc = "cpu:0", .dst_loc = "cpu:0", .fault_block = -1,
		.initiators = 1,
	};
	struct kvfwd_result res;
	struct args a = { .n_eal = 0 };
	pid_t target = 0;
	int ret, st;

	/* kvfwd's own output may go to a pipe whose reader is gone (the
	 * loopback parent reads only the target's first line): a write
	 * error, not a death.  The library never needs this. */
	signal(SIGPIPE, SIG_IGN);
	if (parse_all(&o, &a, argc, argv) < 0)
		return KVFWD_EXIT_USAGE;
	if (o.mode == KVFWD_LOOPBACK) {
		target = spawn_target(argc, argv, o.peer, sizeof(o.peer));
		if (target < 0)
			return KVFWD_EXIT_PEER;
	}
	if (start_kvt(&a, o.mode == KVFWD_LOOPBACK ||
		      getenv("KVFWD_LOOPBACK_TARGET") != NULL) < 0) {
		ret = KVFWD_EXIT_USAGE;
		goto stop_target;
	}
	if (o.mode == KVFWD_TARGET) {
		ret = kvfwd_target(&o, stdout);
		kvt_fini();
		return ret;
	}
	memset(&res, 0, sizeof(res));
	ret = kvfwd_initiator(&o, &res);
	if (ret != KVFWD_EXIT_USAGE && ret != KVFWD_EXIT_PEER) {
		if (o.baseline)
			res.baseline_gbps = kvfwd_baseline(&o, &res,
							   &res.baseline_name);
		kvfwd_report(&o, &res);
	}
	free(res.req_lat);
	free(res.batch_lat);
	free(res.mixed_lat);
	kvt_fini();
stop_target:
	if (target > 0) {
		kill(target, SIGTERM);
		if (waitpid(target, &st, 0) == target && WIFEXITED(st) &&
		    WEXITSTATUS(st) != 0 && ret == 0)
			ret = WEXITSTATUS(st);
	}
	return ret;
}
