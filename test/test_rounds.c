/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Rounds of fenced, notified writes between two hosts in network
 * namespaces while one of the head's KV links flaps, goes dark or both
 * do: a receiver scans every block for rounds going backwards (kvt-
 * testpeer's scan and rounds commands, test/rounds.c).  Needs root.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "netns_hosts.h"
#include "test_assert.h"
#include "test_common.h"

/*
 * Rounds over a link that fails: the head rewrites 64 blocks of the
 * decode host's memory round after round, each write fenced and
 * notified, while the decode host scans the blocks every 0.5 ms.  No
 * block may ever go back to an older round (a completed write replaced
 * by a stale copy that a given-up socket delivered late), no fence or
 * notification may come before its data, and the receiver takes one
 * notification for each write that succeeded, none for one that failed.
 */
#define RB_BYTES (64 * 1024)
#define RB_BLOCKS 64u

struct rounds {
	struct tc_host dec, pre;
	uint64_t base, fence;
};

static void
rounds_up(struct rounds *rb)
{
	char buf[128];

	/* Their pace is part of what is tested: a ThreadSanitizer-built
	 * engine cannot keep a 500 ms peer timeout's. */
	if (tc_tsan_peers())
		cr_skip_test("flapping links under a 500 ms timeout need engines at full speed (ThreadSanitizer peers; data races are covered by stress-tsan)");
	rb->dec = (struct tc_host){ .name = "decode" };
	rb->pre = (struct tc_host){ .name = "head" };
	tc_cluster_up();
	tc_host_start(&rb->dec);
	rb->base = tc_peer_u64(&rb->dec.p, 0, "alloc 0 4194304 w");
	rb->fence = tc_peer_u64(&rb->dec.p, 0, "fence 64");
	tc_host_start(&rb->pre);
	tc_peer_u64(&rb->pre.p, 0, "alloc 0 4194304 -");
	cr_assert_eq(tc_peer_cmd(&rb->pre.p, buf, sizeof(buf), "open %s:7000",
				 rb->dec.be), 0, "%s", buf);
}

/* Start both sides: secs seconds of rounds; the receiver scans until it
 * is told the sender is done (rounds_check). */
static void
rounds_start(struct rounds *rb, unsigned int secs)
{
	tc_peer_send(&rb->dec.p, "scan 0 %u %u %llu", RB_BLOCKS, RB_BYTES,
		     (unsigned long long)(secs + 100) * 1000000);
	tc_peer_send(&rb->pre.p, "rounds 0 %u %u %" PRIx64 " %" PRIx64 " %llu",
		     RB_BLOCKS, RB_BYTES, rb->base, rb->fence,
		     (unsigned long long)secs * 1000000);
}

static long
field(const char *s, const char *key)
{
	const char *p = strstr(s, key);

	cr_assert_not_null(p, "no %s in '%s'", key, s);
	return strtol(p + strlen(key), NULL, 10);
}

/* Both sides' counts; the writes must all succeed unless may_fail. */
static void
rounds_check(struct rounds *rb, const char *what, int may_fail)
{
	char sent[256], seen[256];

	sent[0] = seen[0] = '\0';
	cr_assert_eq(tc_peer_reply(&rb->pre.p, sent, sizeof(sent)), 0,
		     "the sender did not answer: '%s'", sent);
	/* Any line ends the scan (then answered itself). */
	tc_peer_send(&rb->dec.p, "mark");
	cr_assert_eq(tc_peer_reply(&rb->dec.p, seen, sizeof(seen)), 0,
		     "the receiver did not answer: '%s'", seen);
	cr_assert_eq(tc_peer_reply(&rb->dec.p, NULL, 0), 0);
	cr_log_info("%s: sender %s; receiver %s", what, sent, seen);
	cr_assert_eq(field(sent, "wait="), 0, "%s: a round hung: %s", what, sent);
	cr_assert_gt(field(sent, "writes="), 0, "%s: nothing was written", what);
	if (!may_fail)
		cr_assert_eq(field(sent, "failed="), 0,
			     "%s: writes failed with a link left: %s", what, sent);
	cr_assert_eq(field(seen, "regress="), 0,
		     "%s: a block went back to an older round: %s", what, seen);
	cr_assert_eq(field(seen, "early="), 0,
		     "%s: a notification came before its data: %s", what, seen);
	cr_assert_eq(field(seen, "fence_early="), 0,
		     "%s: a fence came before its data: %s", what, seen);
	cr_assert_eq(field(seen, "fence_back="), 0,
		     "%s: a fence slot went back to an older round: %s", what, seen);
	cr_assert_eq(field(seen, "notes="),
		     field(sent, "writes=") - field(sent, "failed="),
		     "%s: notifications taken are not the writes that succeeded: %s; %s",
		     what, sent, seen);
}

static void
rounds_down(struct rounds *rb)
{
	tc_peer_stop(&rb->pre.p);
	tc_peer_stop(&rb->dec.p);
}

/* Interface dev in namespace dev_ns ("": the root one) down for down_ms,
 * then up for up_ms, n times. */
static void
flap(const char *dev_ns, const char *dev, unsigned int n, unsigned int down_ms,
     unsigned int up_ms)
{
	char ns[48];
	unsigned int i;

	snprintf(ns, sizeof(ns), "%s%s", dev_ns[0] != '\0' ? "-n " : "", dev_ns);
	for (i = 0; i < n; i++) {
		cr_assert_eq(tc_sh("ip %s link set %s down", ns, dev), 0);
		usleep(down_ms * 1000);
		cr_assert_eq(tc_sh("ip %s link set %s up", ns, dev), 0);
		usleep(up_ms * 1000);
	}
}

/*
 * Rounds for 10 s while the head's kv1 goes down for down_ms and up for
 * up_ms, n times: on the switch side (the head's interface stays up, its
 * packets go nowhere) or on the head's own interface (its kernel sees the
 * link go).  Every write must succeed over kv0 meanwhile.
 */
static void
rounds_flapping(const char *what, int switch_side, unsigned int n,
		unsigned int down_ms, unsigned int up_ms)
{
	struct rounds rb;
	char ns[32] = "", dev[32] = "kv1";

	rounds_up(&rb);		/* the cluster's prefix is known now */
	if (switch_side)
		snprintf(dev, sizeof(dev), "%s-02", tc_ns_prefix);
	else
		snprintf(ns, sizeof(ns), "%s-head", tc_ns_prefix);
	rounds_start(&rb, 10);
	usleep(1000000);
	flap(ns, dev, n, down_ms, up_ms);
	rounds_check(&rb, what, 0);
	rounds_down(&rb);
}

Test(rounds, host_flaps, .timeout = 180, .fini = tc_cluster_down)
{
	rounds_flapping("host-side flaps", 0, 6, 150, 1200);
}

Test(rounds, short_flaps, .timeout = 180, .fini = tc_cluster_down)
{
	rounds_flapping("short switch-side flaps", 1, 6, 150, 1200);
}

Test(rounds, switch_flaps, .timeout = 180, .fini = tc_cluster_down)
{
	rounds_flapping("switch-side flaps", 1, 4, 400, 1500);
}

Test(rounds, second_flaps, .timeout = 180, .fini = tc_cluster_down)
{
	rounds_flapping("1 s flaps", 1, 4, 1000, 1000);
}

/* Both links dark for 3 s: writes may fail then, but nothing older may
 * land after anything newer. */
Test(rounds, blackout, .timeout = 180, .fini = tc_cluster_down)
{
	struct rounds rb;

	rounds_up(&rb);
	rounds_start(&rb, 10);
	usleep(2000000);
	cr_assert_eq(tc_sh("ip -n %s-head link set kv0 down && ip -n %s-head link set kv1 down",
			   tc_ns_prefix, tc_ns_prefix), 0);
	usleep(3000000);
	cr_assert_eq(tc_sh("ip -n %s-head link set kv0 up && ip -n %s-head link set kv1 up",
			   tc_ns_prefix, tc_ns_prefix), 0);
	rounds_check(&rb, "3 s blackout", 1);
	rounds_down(&rb);
}
