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
#include <sys/wait.h>

#include <criterion/criterion.h>

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

	cr_assert_eq(run(KVT_OPTS " loopback --verify --threads 3 --batch 8 --block 16K --buffer 1M --total 64M",
			 out, sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "0 mixed, 0 stale") != NULL, "%s", out);
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

	cr_assert_eq(run(KVT_OPTS " loopback --verify --threads 2 --batch 8 --block 16K --buffer 1M --total 16M --x-fault-corrupt-block 300",
			 out, sizeof(out)), 1, "%s", out);
	cr_assert(strstr(out, "1 mixed") != NULL, "%s", out);
}
