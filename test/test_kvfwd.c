/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvfwd as users run it: option errors, loopback with --verify, the
 * test-only fault that --verify must catch, JSON output.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <time.h>

#include "test_common.h"

static char kvfwd_bin[PATH_MAX];

static void
find_kvfwd(void)
{
	const char *env = getenv("KVT_KVFWD");
	ssize_t n;

	if (env != NULL) {
		snprintf(kvfwd_bin, sizeof(kvfwd_bin), "%s", env);
		return;
	}
	/* build/test/test_kvfwd -> build/apps/kvfwd/kvfwd */
	n = readlink("/proc/self/exe", kvfwd_bin, sizeof(kvfwd_bin) - 32);
	cr_assert_gt(n, 0);
	kvfwd_bin[n] = '\0';
	strcpy(strrchr(kvfwd_bin, '/'), "/../apps/kvfwd/kvfwd");
}

/* Run kvfwd with args (after the binary); capture stdout+stderr. */
static int
run(const char *args, char *out, size_t len)
{
	char cmd[PATH_MAX + 2048];
	FILE *f;
	size_t n = 0;
	int st;

	find_kvfwd();
	snprintf(cmd, sizeof(cmd), "timeout 120 %s %s 2>&1", kvfwd_bin, args);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	while (n + 1 < len && fgets(out + n, (int)(len - n), f) != NULL)
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define KVT_OPTS "-- --kvt-idle sleep:50"

/* The --json line of kvfwd's output, parsed (the caller frees it). */
static json_t *
json_of(const char *out)
{
	const char *p = strstr(out, "{\"op\"");
	json_t *j;

	cr_assert_not_null(p, "no JSON in:\n%s", out);
	j = json_loadb(p, strcspn(p, "\n"), 0, NULL);
	cr_assert_not_null(j, "bad JSON in:\n%s", out);
	return j;
}

/* kvfwd args must succeed; its --json result, parsed (the caller frees
 * it; out holds the whole output). */
static json_t *
run_json(const char *args, char *out, size_t len)
{
	cr_assert_eq(run(args, out, len), 0, "%s", out);
	return json_of(out);
}

static long long
jint(json_t *j, const char *key)
{
	json_t *v = json_object_get(j, key);

	cr_assert(json_is_integer(v), "no integer %s", key);
	return json_integer_value(v);
}

/* Run args (with --json): all of blocks requests went, and every one was
 * checked where it landed, none mixed or stale.  @return the report. */
static json_t *
run_verified(const char *args, long long blocks, char *out, size_t len)
{
	json_t *j = run_json(args, out, len);

	cr_assert_eq(jint(j, "verify_mixed"), 0);
	cr_assert_eq(jint(j, "verify_stale"), 0);
	cr_assert_eq(jint(j, "verify_checked"), blocks);
	cr_assert_eq(jint(j, "requests"), blocks);
	return j;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A kvfwd target in the background; its control address in addr, its
 * stdout (one line per initiator served) in *lines. */
static pid_t
target_start(const char *args, char *addr, size_t len, FILE **lines)
{
	char cmd[PATH_MAX + 512], line[512];
	int fds[2];
	pid_t pid;
	FILE *f;

	find_kvfwd();
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		/* It goes with this test process, even one Criterion kills. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fds[1], 1);
		close(fds[0]);
		snprintf(cmd, sizeof(cmd), "exec %s " KVT_OPTS " --kvt-listen 127.0.0.1:0 target %s",
			 kvfwd_bin, args);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "kvfwd target: listening on %63s", addr) == 1)
			break;
	if (lines != NULL)
		*lines = f;
	else
		fclose(f);
	cr_assert_neq(addr[0], '\0', "the target did not start");
	cr_assert_lt(strlen(addr), len);
	return pid;
}

Test(kvfwd, bad_options_one_clear_line, .timeout = 60)
{
	static const char *const cases[][2] = {
		{ KVT_OPTS " nomode", "unknown mode 'nomode'" },
		{ KVT_OPTS " loopback --block 0", "invalid --block '0'" },
		{ KVT_OPTS " loopback --block 12Q", "invalid --block '12Q'" },
		{ KVT_OPTS " loopback --batch -3", "invalid --batch '-3'" },
		{ KVT_OPTS " loopback --op sideways", "invalid --op 'sideways'" },
		{ KVT_OPTS " loopback --src-loc gpu0", "invalid location 'gpu0'" },
		{ KVT_OPTS " loopback --frobnicate", "unknown option '--frobnicate'" },
		{ KVT_OPTS " initiator", "initiator needs --peer" },
		{ KVT_OPTS " loopback --op read --fence", "--fence goes with --op write" },
		{ KVT_OPTS " loopback --priority high", "invalid --priority" },
		{ KVT_OPTS " loopback --mixed=soon", "invalid --mixed" },
		{ KVT_OPTS " loopback --mixed --verify", "--mixed goes with plain writes" },
		{ KVT_OPTS " loopback --mixed-every -5", "invalid --mixed-every" },
		{ "-- --kvt-idle nap loopback", "invalid value 'nap' for --kvt-idle" },
		{ KVT_OPTS " loopback --total nan", "invalid --total 'nan'" },
		{ KVT_OPTS " loopback --total 1e30", "invalid --total '1e30'" },
		{ KVT_OPTS " loopback --total inf", "invalid --total 'inf'" },
		{ KVT_OPTS " loopback --duration inf", "invalid --duration" },
		{ KVT_OPTS " loopback --duration nan", "invalid --duration" },
		{ KVT_OPTS " loopback --dst-loc cpu:99 --total 1M", "'cpu:99': invalid" },
		{ KVT_OPTS " loopback --src-loc cpu:99 --total 1M", "cpu:99" },
	};
	char out[8192];
	unsigned int i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_assert_neq(run(cases[i][0], out, sizeof(out)), 0, "%s: exit 0",
			      cases[i][0]);
		cr_assert(strstr(out, cases[i][1]) != NULL,
			  "%s: wanted '%s', got:\n%s", cases[i][0], cases[i][1], out);
	}
}

Test(kvfwd, peer_unreachable, .timeout = 60)
{
	char out[8192];

	cr_assert_eq(run(KVT_OPTS " initiator --peer 127.0.0.1:9 --total 1M",
			 out, sizeof(out)), 3, "%s", out);
	cr_assert(strstr(out, "cannot reach target 127.0.0.1:9") != NULL, "%s", out);
}

Test(kvfwd, region_too_small, .timeout = 60)
{
	char out[8192];

	cr_assert_eq(run(KVT_OPTS " loopback --buffer 1M --block 1M --batch 4 --total 4M",
			 out, sizeof(out)), 2, "%s", out);
	cr_assert(strstr(out, "smaller than threads x batch x block") != NULL, "%s", out);
}

Test(kvfwd, loopback_write, .timeout = 120)
{
	char out[16384];

	cr_assert_eq(run(KVT_OPTS " loopback --total 64M --buffer 16M --block 64K --batch 32 --baseline",
			 out, sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "throughput") != NULL, "%s", out);
	cr_assert(strstr(out, "shm0") != NULL, "%s", out);
	cr_assert(strstr(out, "baseline       memcpy") != NULL, "%s", out);
}

/* The stale-completion stress: threads reuse destination slots. */
Test(kvfwd, loopback_verify_threads, .timeout = 120)
{
	char out[16384];
	json_t *j;

	/* Every block sent was checked where it landed: 64M / 16K. */
	j = run_verified(KVT_OPTS " loopback --verify --threads 3 --batch 8 --block 16K --buffer 1M --total 64M --json",
			 4096, out, sizeof(out));
	json_decref(j);
}

/* --mixed: a bulk stream and urgent 4 KiB writes at once, each reported;
 * the bytes of both arrive (every request counted, none failed). */
Test(kvfwd, mixed_streams, .timeout = 120)
{
	char out[16384];
	json_t *j;

	j = run_json(KVT_OPTS " loopback --priority bulk --mixed --block 1M --batch 8 --buffer 64M --total 512M --json",
		     out, sizeof(out));
	cr_assert_eq(jint(j, "errors"), 0);
	cr_assert_eq(jint(j, "requests"), 512);
	cr_assert_gt(jint(j, "mixed_requests"), 0, "no urgent write ran: %s", out);
	cr_assert(json_real_value(json_object_get(j, "mixed_p50_us")) > 0);
	json_decref(j);
}

/* --depth: batches in flight at once, reads each into an area of its
 * own: every block read is checked against what the target holds, and
 * a buffer too small for the batches in flight is refused. */
Test(kvfwd, depth_reads_verified, .timeout = 120)
{
	char out[16384];
	json_t *j;

	j = run_verified(KVT_OPTS " loopback --op read --verify --depth 3 --batch 8 --block 16K --buffer 1M --total 32M --json",
			 2048, out, sizeof(out));
	cr_assert_eq(jint(j, "depth"), 3);
	cr_assert_eq(jint(j, "errors"), 0);
	json_decref(j);
	cr_assert_eq(run(KVT_OPTS " loopback --buffer 1M --block 128K --batch 4 --depth 3 --total 4M",
			 out, sizeof(out)), 2, "%s", out);
	cr_assert(strstr(out, "x depth = 1.50 MiB") != NULL, "%s", out);
	cr_assert_eq(run(KVT_OPTS " loopback --depth 0", out, sizeof(out)), 2,
		     "%s", out);
	cr_assert(strstr(out, "invalid --depth") != NULL, "%s", out);
}

/*
 * Verified reads of page lists (blocks in a shuffled order) and of one-
 * byte blocks from a large buffer: every block checked against the block
 * it came from, none mixed; the target fills only the blocks the run may
 * read (64 Mi one-byte blocks took an emulated guest half a minute).
 */
Test(kvfwd, read_verify_pages_and_bytes, .timeout = 120)
{
	char out[16384];
	json_t *j;

	j = run_verified(KVT_OPTS " loopback --op read --verify --pages --batch 16 --block 4K --buffer 1M --total 4M --depth 2 --json",
			 1024, out, sizeof(out));
	json_decref(j);
	j = run_verified(KVT_OPTS " loopback --op read --verify --batch 16 --block 1 --buffer 64M --total 64 --json",
			 64, out, sizeof(out));
	json_decref(j);
}

Test(kvfwd, loopback_read_verify_json, .timeout = 120)
{
	char out[16384];

	cr_assert_eq(run(KVT_OPTS " loopback --op read --verify --total 32M --buffer 8M --block 128K --batch 16 --json",
			 out, sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "{\"op\":\"read\"") != NULL, "%s", out);
	cr_assert(strstr(out, "\"errors\":0") != NULL, "%s", out);
}

/* The test-only fault damages one block: --verify must say so, exit 1. */
Test(kvfwd, verify_catches_a_mixed_block, .timeout = 120)
{
	char out[16384];

	json_t *j;
	int ret = run(KVT_OPTS " loopback --verify --threads 2 --batch 8 --block 16K --buffer 1M --total 16M --x-fault-corrupt-block 300 --json",
		      out, sizeof(out));

	if (strstr(out, "unknown option '--x-fault-corrupt-block'") != NULL)
		cr_skip_test("kvfwd built without -Dfault_inject=true");
	cr_assert_eq(ret, 1, "%s", out);
	j = json_of(out);
	cr_assert_eq(jint(j, "verify_mixed"), 1, "%s", out);
	cr_assert_eq(jint(j, "verify_stale"), 0);
	json_decref(j);
}

/* A target serves one initiator at a time unless told otherwise
 * (--initiators) and tells a second one so; the first finishes
 * undisturbed. */
Test(kvfwd, second_initiator_refused, .timeout = 120)
{
	char addr[64] = "", cmd[512], out[16384], line[256] = "";
	pid_t tgt, first;
	FILE *lines;
	int st;

	tgt = target_start("--buffer 4M", addr, sizeof(addr), &lines);
	snprintf(cmd, sizeof(cmd), KVT_OPTS " initiator --peer %s --verify --duration 3 --block 16K --batch 8 --json >/dev/null",
		 addr);
	first = fork();
	if (first == 0) {
		char o[8192];

		_exit(run(cmd, o, sizeof(o)));
	}
	/* The first one's session has begun (the target says so). */
	cr_assert_not_null(fgets(line, sizeof(line), lines));
	cr_assert(strstr(line, "serving initiator") != NULL, "%s", line);
	snprintf(cmd, sizeof(cmd), KVT_OPTS " initiator --peer %s --verify --total 1M --block 16K",
		 addr);
	cr_assert_neq(run(cmd, out, sizeof(out)), 0, "a second initiator ran: %s", out);
	cr_assert(strstr(out, "it serves as many initiators as it can") != NULL,
		  "%s", out);
	cr_assert_eq(waitpid(first, &st, 0), first);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the first initiator failed: %d", st);
	kill(tgt, SIGTERM);
	waitpid(tgt, NULL, 0);
	fclose(lines);
}

/*
 * Fan-in: a target with --initiators 4 serves four verified initiators at
 * once, started together (--start-at), each in its own area of the
 * buffer with its own fence slots.  Every block is checked where it
 * landed: areas that overlapped would show as mixed blocks (another
 * initiator's room over a slot), and kvfwd exits 1 on any.
 */
Test(kvfwd, four_initiators_at_once, .timeout = 180)
{
	char addr[64] = "", cmd[512], line[256];
	struct timespec ts;
	pid_t tgt, ini[4];
	unsigned int i, served = 0;
	FILE *lines;
	int st;

	tgt = target_start("--buffer 16M --initiators 4", addr, sizeof(addr),
			   &lines);
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(cmd, sizeof(cmd), KVT_OPTS " initiator --peer %s --verify --total 8M --block 16K --batch 8 --start-at %.3f --json",
		 addr, (double)ts.tv_sec + 6);
	for (i = 0; i < 4; i++) {
		ini[i] = fork();
		if (ini[i] == 0) {
			char o[16384];
			int r = run(cmd, o, sizeof(o));

			if (r != 0)
				fprintf(stderr, "initiator: %s\n", o);
			_exit(r);
		}
	}
	for (i = 0; i < 4; i++) {
		cr_assert_eq(waitpid(ini[i], &st, 0), ini[i]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "initiator %u failed: %d", i, st);
	}
	while (served < 4 && fgets(line, sizeof(line), lines) != NULL)
		served += strstr(line, "serving initiator") != NULL;
	cr_assert_eq(served, 4);
	kill(tgt, SIGTERM);
	waitpid(tgt, NULL, 0);
	fclose(lines);
}

/*
 * The reverse of fan-in: one initiator writes to three targets at once
 * (--peer A,B,C, a thread each) for a while.  Each target took a part
 * and the parts add up to what was moved.  (A byte budget would be
 * shared by the threads: the first one started could spend it all
 * before the others begin, as 24 MiB over shm in 4 ms once did.)
 */
Test(kvfwd, one_initiator_three_targets, .timeout = 180)
{
	char addr[3][64], list[256], cmd[512], out[16384];
	FILE *lines[3];
	pid_t tgt[3];
	json_t *j, *tb;
	long long sum = 0, b;
	size_t i;

	for (i = 0; i < 3; i++)
		tgt[i] = target_start("--buffer 8M", addr[i], sizeof(addr[i]),
				      &lines[i]);
	snprintf(list, sizeof(list), "%s,%s,%s", addr[0], addr[1], addr[2]);
	snprintf(cmd, sizeof(cmd), KVT_OPTS " initiator --peer %s --threads 3 --duration 0.5 --block 64K --batch 8 --json",
		 list);
	j = run_json(cmd, out, sizeof(out));
	cr_assert_gt(jint(j, "bytes"), 0, "%s", out);
	cr_assert_eq(jint(j, "errors"), 0);
	tb = json_object_get(j, "target_bytes");
	cr_assert(json_is_array(tb) && json_array_size(tb) == 3, "%s", out);
	for (i = 0; i < 3; i++) {
		b = json_integer_value(json_array_get(tb, i));
		cr_assert_gt(b, 0, "target %zu took nothing: %s", i, out);
		sum += b;
	}
	cr_assert_eq(sum, jint(j, "bytes"), "the targets took %lld of %lld bytes",
		     sum, (long long)jint(j, "bytes"));
	json_decref(j);
	cr_assert_neq(run(KVT_OPTS " initiator --peer 127.0.0.1:1,127.0.0.1:2 --verify --total 1M",
			  out, sizeof(out)), 0);
	cr_assert(strstr(out, "several targets go with plain runs") != NULL, "%s", out);
	for (i = 0; i < 3; i++) {
		kill(tgt[i], SIGTERM);
		waitpid(tgt[i], NULL, 0);
		fclose(lines[i]);
	}
}

/* The target dies during --verify: the initiator fails fast, not after
 * waiting out its 30 s result timeout.  The kill comes once the target
 * says its session began (a fixed delay from the start killed it before
 * the hello under ThreadSanitizer), and the bound counts from the kill. */
Test(kvfwd, target_killed_during_verify, .timeout = 120)
{
	char addr[64] = "", cmd[512], out[16384], line[512];
	double t0, killed = 0;
	pid_t tgt, killer;
	int ret, fds[2];
	FILE *lines;

	tgt = target_start("--buffer 4M", addr, sizeof(addr), &lines);
	cr_assert_eq(pipe(fds), 0);
	killer = fork();
	if (killer == 0) {
		close(fds[0]);
		if (fgets(line, sizeof(line), lines) == NULL ||
		    strstr(line, "serving initiator") == NULL)
			_exit(1);
		usleep(500000);
		kill(tgt, SIGKILL);
		t0 = now_s();
		_exit(write(fds[1], &t0, sizeof(t0)) == sizeof(t0) ? 0 : 1);
	}
	close(fds[1]);
	snprintf(cmd, sizeof(cmd), "-- --kvt-idle sleep:50 --kvt-timeout 1000 initiator --peer %s --verify --duration 60 --block 16K --batch 8",
		 addr);
	ret = run(cmd, out, sizeof(out));
	t0 = now_s();
	cr_assert_eq(read(fds[0], &killed, sizeof(killed)), (ssize_t)sizeof(killed),
		     "the target never began a session:\n%s", out);
	close(fds[0]);
	cr_log_info("initiator ended %d, %.1f s after the kill", ret, t0 - killed);
	cr_assert_neq(ret, 0, "the run succeeded without its target: %s", out);
	cr_assert_lt(t0 - killed, 10.0, "took %.1f s to give up:\n%s", t0 - killed, out);
	cr_assert(strstr(out, "did not answer our hello") == NULL,
		  "the target died before the run began:\n%s", out);
	waitpid(killer, NULL, 0);
	waitpid(tgt, NULL, 0);
	fclose(lines);
}

/* Small blocks one at a time over a large buffer: the warm-up pass does
 * not take longer than the run (it took 40 s). */
Test(kvfwd, warm_up_is_quick, .timeout = 120)
{
	char out[16384];
	double t0 = now_s();

	if (tc_tsan_peers())
		cr_skip_test("a time bound, and a ThreadSanitizer kvfwd runs many times slower");
	cr_assert_eq(run("-- --kvt-idle sleep:50 --kvt-pmd tcp --kvt-nic lo loopback --block 4K --batch 1 --buffer 256M --total 1M",
			 out, sizeof(out)), 0, "%s", out);
	cr_assert_lt(now_s() - t0, 15.0, "took %.1f s", now_s() - t0);
	cr_assert(strstr(out, "warming up the target buffer (256.00 MiB)") != NULL, "%s", out);
}

/* A tcp baseline uses the target's sink only: no credits armed for
 * nobody, no peer reported lost at the end. */
Test(kvfwd, tcp_baseline_quiet, .timeout = 120)
{
	char out[16384];

	cr_assert_eq(run("-- --kvt-idle sleep:50 --kvt-pmd tcp --kvt-nic lo loopback --block 1M --batch 16 --total 64M --buffer 16M --baseline",
			 out, sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "baseline") != NULL, "%s", out);
	cr_assert(strstr(out, "lost") == NULL, "%s", out);
}
