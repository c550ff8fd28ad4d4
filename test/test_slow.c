/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Slow is not dead: a target whose data lcore gets no cpu for most of
 * the timeout, or that is frozen whole for half of it, loses no request.
 * (scripts/stress-reliability loads every cpu of the host for longer.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "kvt.h"
#include "test_assert.h"
#include "test_common.h"

#define TCP "--kvt-pmd tcp --kvt-nic lo --kvt-timeout 1000"
#define SHM "--kvt-pmd shm --kvt-timeout 1000"

/*
 * A target whose data lcore gets no cpu for 90 % of the timeout (its
 * kernel and control thread go on), or that is frozen whole for half of
 * it: its links carry, its answers are only late.
 */
static void
slow_target(const char *opts, int whole, unsigned int ms)
{
	const unsigned int n = 64;
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(4 * MiB);
	uint64_t base, t0;
	unsigned int i, failed = 0;
	char buf[64];
	int st, first = 0;

	base = tc_pair_start(&t, opts, src, 4 * MiB, 4 * MiB, &p);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
			.remote = base, .len = 4 * MiB };
	b = kvt_batch_alloc(n);
	t0 = tc_now_us();
	if (whole)
		kill(t.pid, SIGSTOP);
	else
		tc_peer_send(&t, "stall 0 %u", ms);
	usleep(20000);
	cr_assert_geq(kvt_submit(b, p, x, n, &o), 0);
	if (whole) {
		usleep(ms * 1000);
		kill(t.pid, SIGCONT);
	} else {
		cr_assert_eq(tc_peer_reply(&t, buf, sizeof(buf)), 0);
		cr_assert_eq(strtol(buf, NULL, 10), 0, "stall: %s", buf);
	}
	cr_assert_eq(kvt_wait(b, 10000000), 0, "requests still pending 10 s later");
	for (i = 0; i < n; i++) {
		st = kvt_status(b, i);
		failed += st != 0;
		first = first != 0 ? first : st;
	}
	cr_log_info("%s, %s for %u ms: %u of %u failed (first %d), all settled %.2f s after",
		    opts, whole ? "frozen" : "lcore starved", ms, failed, n, first,
		    (double)(tc_now_us() - t0) / 1e6);
	cr_assert_eq(failed, 0, "a slow target lost %u requests (%s)", failed,
		     strerror(-first));
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
	free(x);
}

Test(slow, starved_lcore_tcp, .timeout = 60)
{
	slow_target(TCP, 0, 900);
}

Test(slow, starved_lcore_shm, .timeout = 60)
{
	slow_target(SHM, 0, 900);
}

Test(slow, frozen_half_timeout_tcp, .timeout = 60)
{
	slow_target(TCP, 1, 500);
}
