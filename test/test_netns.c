/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Several hosts in network namespaces (scripts/netns-cluster): every
 * prefill host sends its own KV from its own NICs, over both KV
 * interfaces, none over the backend one (and four hosts at once into one
 * decode host over three); a KV link that goes down mid transfer is
 * survived; both down fails in bounded time; striping follows the links,
 * a 10x slower rail included.  Needs root.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "netns_hosts.h"
#include "test_common.h"

#define SHARD (32 * MiB)

static void
snap(struct tc_host *h, const char *dir)
{
	h->kv0 = tc_ns_counter(h->name, "kv0", dir);
	h->kv1 = tc_ns_counter(h->name, "kv1", dir);
	h->kv2 = tc_ns_counter(h->name, "kv2", dir);
	h->be_tx = tc_ns_counter(h->name, "be", dir);
}

static uint64_t
addr_of(struct tc_peer *p, const char *cmd)
{
	char buf[128];

	cr_assert_eq(tc_peer_cmd(p, buf, sizeof(buf), "%s", cmd), 0, "%s: %s",
		     cmd, buf);
	return strtoull(buf, NULL, 0);
}

/* Wait (10 s at most) until the head's interface ifn has sent at least
 * bytes more than its counter's value from; bytes are then in flight. */
static void
wait_moved(const char *ifn, uint64_t from, uint64_t bytes)
{
	uint64_t t0 = tc_now_us();

	while (tc_ns_counter("head", ifn, "tx") - from < bytes &&
	       tc_now_us() - t0 < 10000000)
		usleep(2000);
	cr_assert_geq(tc_ns_counter("head", ifn, "tx") - from, bytes,
		      "%s carried nothing of the transfer", ifn);
}

/* The decode host holds the bytes the prefill host has (first len). */
static void
same_bytes(struct tc_host *dec, struct tc_host *pre, uint64_t len, const char *what)
{
	char theirs[128], mine[128];

	cr_assert_eq(tc_peer_cmd(&dec->p, theirs, sizeof(theirs), "sum 0 0 %" PRIu64,
				 len), 0);
	cr_assert_eq(tc_peer_cmd(&pre->p, mine, sizeof(mine), "sum 0 0 %" PRIu64,
				 len), 0);
	cr_assert_str_eq(theirs, mine, "%s", what);
}

/* Shard i of the decode host's buffer holds what pre sent. */
static void
shard_intact(struct tc_host *dec, struct tc_host *pre, int i)
{
	char buf[128];
	uint64_t sum;

	cr_assert_eq(tc_peer_cmd(&dec->p, buf, sizeof(buf), "sum 0 %" PRIu64 " %" PRIu64,
				 (uint64_t)i * SHARD, SHARD), 0);
	sum = strtoull(buf, NULL, 16);
	cr_assert_eq(tc_peer_cmd(&pre->p, buf, sizeof(buf), "sum 0 0 %" PRIu64,
				 SHARD), 0);
	cr_assert_eq(sum, strtoull(buf, NULL, 16), "%s's shard damaged",
		     pre->name);
}

/* A link that came back on the head: 32 MiB writes until it carries a
 * share of one (20 s bound). */
static void
link_carries_again(struct tc_host *pre, const char *ifn, uint64_t base)
{
	uint64_t t0 = tc_now_us(), before, moved;
	char buf[128];

	do {
		usleep(200000);
		before = tc_ns_counter("head", ifn, "tx");
		cr_assert_eq(tc_peer_cmd(&pre->p, buf, sizeof(buf),
					 "write 0 0 %" PRIx64 " %" PRIu64, base,
					 32 * MiB), 0);
		cr_assert_eq(strtol(buf, NULL, 10), 0, "write after %s returned: %s",
			     ifn, buf);
		moved = tc_ns_counter("head", ifn, "tx") - before;
	} while (moved < 4 * MiB && tc_now_us() - t0 < 20000000);
	cr_log_info("%s back: %.1f MiB of a 32 MiB write after %.1f s", ifn,
		    moved / 1048576.0, (double)(tc_now_us() - t0) / 1e6);
	cr_assert_geq(moved, 4 * MiB, "%s stayed idle after it came back", ifn);
}

/*
 * The idle-worker-NIC failure: with multi-node prefill, only the head
 * node's KV NIC carried traffic while the worker's sat idle.  Here every
 * prefill host sends its own shard from its own KV NICs.
 */
Test(netns, every_host_sends_its_own_kv, .timeout = 180, .fini = tc_cluster_down)
{
	struct tc_host dec = { .name = "decode" };
	struct tc_host pre[2] = { { .name = "head" },
			       { .name = "worker" } };
	char buf[128];
	uint64_t base, dec_rx0, dec_rx;
	int i;

	tc_cluster_up();
	tc_host_start(&dec);
	base = addr_of(&dec.p, "alloc 0 67108864 w");
	for (i = 0; i < 2; i++) {
		tc_host_start(&pre[i]);
		addr_of(&pre[i].p, "alloc 0 33554432 -");
		cr_assert_eq(tc_peer_cmd(&pre[i].p, NULL, 0, "fill 0 0 %" PRIu64 " %d",
					 SHARD, 11 + i), 0);
		cr_assert_eq(tc_peer_cmd(&pre[i].p, buf, sizeof(buf),
					 "open %s:7000", dec.be), 0, "%s", buf);
		snap(&pre[i], "tx");
	}
	snap(&dec, "rx");
	dec_rx0 = dec.kv0 + dec.kv1;
	/* Both prefill hosts write their shard at the same time. */
	for (i = 0; i < 2; i++)
		tc_peer_send(&pre[i].p, "write 0 0 %" PRIx64 " %" PRIu64,
			     base + (uint64_t)i * SHARD, SHARD);
	for (i = 0; i < 2; i++) {
		cr_assert_eq(tc_peer_reply(&pre[i].p, buf, sizeof(buf)), 0);
		cr_assert_eq(strtol(buf, NULL, 10), 0, "%s: write status %s",
			     pre[i].name, buf);
	}
	for (i = 0; i < 2; i++) {
		uint64_t kv0 = pre[i].kv0, kv1 = pre[i].kv1, be = pre[i].be_tx;

		snap(&pre[i], "tx");
		kv0 = pre[i].kv0 - kv0;
		kv1 = pre[i].kv1 - kv1;
		be = pre[i].be_tx - be;
		cr_log_info("%s sent kv0 %" PRIu64 " kv1 %" PRIu64 " be %" PRIu64 " bytes for a %" PRIu64 "-byte shard",
			    pre[i].name, kv0, kv1, be, SHARD);
		/* Its own shard, from its own KV NICs (within 10%). */
		cr_assert_geq(kv0 + kv1, SHARD, "%s sent less than its shard",
			      pre[i].name);
		cr_assert_leq(kv0 + kv1, SHARD + SHARD / 10, "%s sent more than its shard",
			      pre[i].name);
		/* Both KV interfaces carried it. */
		cr_assert_gt(kv0, SHARD / 5, "%s: kv0 idle", pre[i].name);
		cr_assert_gt(kv1, SHARD / 5, "%s: kv1 idle", pre[i].name);
		/* The backend carried the control plane only. */
		cr_assert_lt(be, SHARD / 100, "%s: backend carried %" PRIu64,
			     pre[i].name, be);
		shard_intact(&dec, &pre[i], i);
	}
	snap(&dec, "rx");
	dec_rx = dec.kv0 + dec.kv1 - dec_rx0;
	cr_log_info("decode received %" PRIu64 " bytes on kv0+kv1", dec_rx);
	cr_assert_geq(dec_rx, 2 * SHARD);
	cr_assert_leq(dec_rx, 2 * SHARD + 2 * SHARD / 10);
	for (i = 0; i < 2; i++)
		tc_peer_stop(&pre[i].p);
	tc_peer_stop(&dec.p);
}

Test(netns, kv_link_loss, .timeout = 180, .fini = tc_cluster_down)
{
	struct tc_host dec = { .name = "decode" };
	struct tc_host pre = { .name = "head" };
	const uint64_t len = 256 * MiB;
	uint64_t base, t0;
	char buf[128];

	tc_cluster_up();
	tc_host_start(&dec);
	base = addr_of(&dec.p, "alloc 0 268435456 w");
	tc_host_start(&pre);
	addr_of(&pre.p, "alloc 0 268435456 -");
	cr_assert_eq(tc_peer_cmd(&pre.p, NULL, 0, "fill 0 0 %" PRIu64 " 5", len), 0);
	cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf), "open %s:7000", dec.be),
		     0, "%s", buf);

	/* One KV link goes down mid transfer (once it has carried 8 MiB of
	 * it): the other finishes it. */
	t0 = tc_ns_counter("head", "kv1", "tx");
	tc_peer_send(&pre.p, "write 0 0 %" PRIx64 " %" PRIu64, base, len);
	wait_moved("kv1", t0, 8 * MiB);
	cr_assert_eq(tc_sh("ip -n %s-head link set kv1 down", tc_ns_prefix), 0);
	cr_assert_eq(tc_peer_reply(&pre.p, buf, sizeof(buf)), 0);
	cr_assert_eq(strtol(buf, NULL, 10), 0, "write with kv1 down mid way: %s", buf);
	same_bytes(&dec, &pre, len, "data damaged after the link loss");

	/* The link comes back: the head dials it again and it carries its
	 * share of new writes (no NIC left idle after a flap). */
	cr_assert_eq(tc_sh("ip -n %s-head link set kv1 up", tc_ns_prefix), 0);
	link_carries_again(&pre, "kv1", base);

	/* Both down: the request fails in bounded time, nothing hangs. */
	cr_assert_eq(tc_sh("ip -n %s-head link set kv1 down", tc_ns_prefix), 0);
	cr_assert_eq(tc_sh("ip -n %s-head link set kv0 down", tc_ns_prefix), 0);
	t0 = tc_now_us();
	cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf), "write 0 0 %" PRIx64 " %" PRIu64,
				 base, 16 * MiB), 0);
	cr_log_info("with both KV links down the write ended with %s after %.1f s",
		    buf, (double)(tc_now_us() - t0) / 1e6);
	cr_assert_neq(strtol(buf, NULL, 10), 0, "a write with no link succeeded");
	cr_assert_lt(tc_now_us() - t0, 8000000, "failure took too long");
	tc_peer_stop(&pre.p);
	tc_peer_stop(&dec.p);
}

/*
 * One KV path is down when the peer is opened: the peer opens over the
 * other (it does not fail as a whole), the write goes over that one, and
 * the lost path is dialled again in the background until it carries
 * bytes.
 */
Test(netns, open_with_one_path_down, .timeout = 180, .fini = tc_cluster_down)
{
	struct tc_host dec = { .name = "decode" };
	struct tc_host pre = { .name = "head" };
	uint64_t base, t0, before;
	char buf[128];

	tc_cluster_up();
	tc_host_start(&dec);
	base = addr_of(&dec.p, "alloc 0 33554432 w");
	tc_host_start(&pre);
	addr_of(&pre.p, "alloc 0 33554432 -");
	cr_assert_eq(tc_peer_cmd(&pre.p, NULL, 0, "fill 0 0 33554432 9"), 0);
	/* The decode host's kv1 is gone before anyone dials it. */
	cr_assert_eq(tc_sh("ip -n %s-decode link set kv1 down", tc_ns_prefix), 0);
	t0 = tc_now_us();
	cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf), "open %s:7000", dec.be),
		     0, "the peer did not open with one path down: %s", buf);
	cr_log_info("opened with kv1 down in %.2f s", (double)(tc_now_us() - t0) / 1e6);
	cr_assert_lt(tc_now_us() - t0, 1000000, "opening took the whole timeout");
	before = tc_ns_counter("head", "kv0", "tx");
	cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf),
				 "write 0 0 %" PRIx64 " 33554432", base), 0);
	cr_assert_eq(strtol(buf, NULL, 10), 0, "write over the path left: %s", buf);
	cr_assert_geq(tc_ns_counter("head", "kv0", "tx") - before, 32 * MiB);
	same_bytes(&dec, &pre, 32 * MiB, "data damaged");
	/* The path comes back: it is dialled and carries its share. */
	cr_assert_eq(tc_sh("ip -n %s-decode link set kv1 up", tc_ns_prefix), 0);
	link_carries_again(&pre, "kv1", base);
	tc_peer_stop(&pre.p);
	tc_peer_stop(&dec.p);
}

/*
 * A KV link cut while requests with notifications stream over both: every
 * request completes over the other link, and the receiver gets every
 * notification exactly once (those caught on the cut link move).
 */
Test(netns, link_cut_under_notifications, .timeout = 180, .fini = tc_cluster_down)
{
	struct tc_host dec = { .name = "decode" };
	struct tc_host pre = { .name = "head" };
	const unsigned int n = 50, rounds = 4;
	const uint64_t len = 16 * MiB, payload = (uint64_t)n * rounds * len;
	uint64_t base, kv0_start, kv1_start, kv0, sent;
	char buf[128], notes[8192], want[16];
	unsigned int i;
	int st;

	tc_cluster_up();
	tc_host_start(&dec);
	base = addr_of(&dec.p, "alloc 0 16777216 w");
	tc_host_start(&pre);
	addr_of(&pre.p, "alloc 0 16777216 -");
	cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf), "open %s:7000", dec.be),
		     0, "%s", buf);
	kv0_start = tc_ns_counter("head", "kv0", "tx");
	kv1_start = tc_ns_counter("head", "kv1", "tx");
	tc_peer_send(&pre.p, "burst 0 0 %" PRIx64 " %" PRIu64 " %u %u", base, len,
		     n, rounds);
	/* Cut kv1 once it is seen carrying this stream. */
	wait_moved("kv1", kv1_start, 8 * MiB);
	cr_assert_eq(tc_sh("ip -n %s-head link set kv1 down", tc_ns_prefix), 0);
	/* The stream waits only for what the cut link held, and kvt tells
	 * a dead link from a dead peer (whose pings still come back) well
	 * before the 500 ms peer timeout: kv0 carries on within 400 ms,
	 * unless the whole stream had left before (a loaded box can be
	 * that slow to see kv1 carry it). */
	kv0 = tc_ns_counter("head", "kv0", "tx");
	usleep(400000);
	kv0 = tc_ns_counter("head", "kv0", "tx") - kv0;
	sent = tc_ns_counter("head", "kv0", "tx") - kv0_start +
	       tc_ns_counter("head", "kv1", "tx") - kv1_start;
	cr_log_info("kv0 moved %.1f MiB in the 400 ms after the cut (%.0f of %.0f MiB sent)",
		    kv0 / 1048576.0, sent / 1048576.0, payload / 1048576.0);
	if (sent < payload)
		cr_assert_geq(kv0, 16 * MiB, "kv0 stalled with kv1 (%" PRIu64 " bytes)", kv0);
	cr_assert_eq(tc_peer_reply(&pre.p, buf, sizeof(buf)), 0);
	st = (int)strtol(buf, NULL, 10);
	cr_assert_eq(st, 0, "a request failed with one link left: %s", buf);
	/* " TEXT@peer" each, the first without its space. */
	notes[0] = ' ';
	cr_assert_eq(tc_peer_cmd(&dec.p, notes + 1, sizeof(notes) - 1,
				 "notes 10000000 %u", n * rounds), 0);
	for (i = 0; i < n * rounds; i++) {
		char *q;
		int c = 0;

		snprintf(want, sizeof(want), " n%u@", i);
		for (q = notes; (q = strstr(q, want)) != NULL; q++)
			c++;
		cr_assert_eq(c, 1, "notification n%u delivered %d times", i, c);
	}
	tc_peer_stop(&pre.p);
	tc_peer_stop(&dec.p);
}

/*
 * The initiator has no allow-list (a port on each interface, the backend
 * too), the target allows its KV NICs only: every port pairs with an
 * endpoint it can reach, the peer opens, and the data crosses the KV
 * links, not the backend (no port dials a subnet its route does not
 * leave through).
 */
Test(netns, no_allow_list_pairs_by_route, .timeout = 180, .fini = tc_cluster_down)
{
	struct tc_host dec = { .name = "decode" };
	struct tc_host pre = { .name = "head" };
	char ns[32], opts[256], buf[128];
	uint64_t base, kv0, kv1, be;

	/* The backend interface listed first (its port comes first). */
	setenv("KVT_NETNS_ORDER", "9 1 2", 1);
	tc_cluster_up();
	tc_host_start(&dec);
	base = addr_of(&dec.p, "alloc 0 33554432 w");
	snprintf(ns, sizeof(ns), "%s-head", tc_ns_prefix);
	tc_ns_addr("head", "be", pre.be, sizeof(pre.be));
	snprintf(opts, sizeof(opts),
		 "--kvt-pmd tcp --kvt-listen %s:7000 --kvt-timeout 500", pre.be);
	cr_assert_eq(tc_peer_start_in(&pre.p, ns, opts), 0);
	addr_of(&pre.p, "alloc 0 33554432 -");
	cr_assert_eq(tc_peer_cmd(&pre.p, NULL, 0, "fill 0 0 33554432 4"), 0);
	cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf), "open %s:7000", dec.be),
		     0, "the peer did not open: %s", buf);
	snap(&pre, "tx");
	kv0 = pre.kv0;
	kv1 = pre.kv1;
	be = pre.be_tx;
	cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf),
				 "write 0 0 %" PRIx64 " 33554432", base), 0);
	cr_assert_eq(strtol(buf, NULL, 10), 0, "write: %s", buf);
	snap(&pre, "tx");
	kv0 = pre.kv0 - kv0;
	kv1 = pre.kv1 - kv1;
	be = pre.be_tx - be;
	cr_log_info("kv0 %" PRIu64 " kv1 %" PRIu64 " be %" PRIu64, kv0, kv1, be);
	cr_assert_geq(kv0 + kv1, 32 * MiB, "the KV links carried %" PRIu64, kv0 + kv1);
	cr_assert_gt(kv0, 4 * MiB, "kv0 idle: a routed port took its pairing");
	cr_assert_gt(kv1, 4 * MiB, "kv1 idle: a routed port took its pairing");
	cr_assert_lt(be, MiB, "the backend carried %" PRIu64 " bytes", be);
	same_bytes(&dec, &pre, 32 * MiB, "data damaged");
	tc_peer_stop(&pre.p);
	tc_peer_stop(&dec.p);
}

static double
write_share(struct tc_host *pre, uint64_t base, uint64_t len, double *kv1_share,
	    double *secs)
{
	char buf[128];
	uint64_t kv0, kv1, t0;

	snap(pre, "tx");
	kv0 = pre->kv0;
	kv1 = pre->kv1;
	t0 = tc_now_us();
	cr_assert_eq(tc_peer_cmd(&pre->p, buf, sizeof(buf),
				 "write 0 0 %" PRIx64 " %" PRIu64, base, len), 0);
	cr_assert_eq(strtol(buf, NULL, 10), 0, "write: %s", buf);
	*secs = (double)(tc_now_us() - t0) / 1e6;
	snap(pre, "tx");
	kv0 = pre->kv0 - kv0;
	kv1 = pre->kv1 - kv1;
	*kv1_share = (double)kv1 / (double)(kv0 + kv1);
	return (double)(kv0 + kv1);
}

/*
 * Striping follows the links: two equal links share a long transfer
 * about evenly (no worse than 2:1 in the middle of three runs); a
 * rate-limited link gets about what it
 * can carry, neither starved nor holding the transfer back.
 */
Test(netns, striping_follows_the_links, .timeout = 300, .fini = tc_cluster_down)
{
	struct tc_host dec = { .name = "decode" };
	struct tc_host pre = { .name = "head" };
	const uint64_t len = 512 * MiB;
	const double limit = 40e6;	/* bytes/s on the limited link */
	double share, secs, secs_fast, bytes, shares[3], mid, mid_lo;
	uint64_t base;
	char buf[128];
	int i;

	tc_cluster_up();
	tc_host_start(&dec);
	base = addr_of(&dec.p, "alloc 0 536870912 w");
	tc_host_start(&pre);
	addr_of(&pre.p, "alloc 0 536870912 -");
	cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf), "open %s:7000", dec.be),
		     0, "%s", buf);
	/* Equal links as configured; but on a shared box the kernel may
	 * serve one veth slower for a while (another process's traffic),
	 * and striping rightly follows.  Engines bound by their cpu
	 * (sanitizer builds, or a box busy with other work) show which
	 * port the lcore serves first: ThreadSanitizer CI saw 39.3, 42.0,
	 * 38.4 % on kv1; AddressSanitizer beside a compile 31.2, 39.6,
	 * 45.2 %.  The striping bug this guards against gave 21-28 %:
	 * each run within 20-80 % (neither link starved), the middle one
	 * of three within a 2:1 split either way. */
	mid_lo = 1.0 / 3;
	for (i = 0; i < 3; i++) {
		bytes = write_share(&pre, base, len, &share, &secs);
		cr_log_info("equal links, run %d: kv1 carried %.1f %% of %.0f MiB in %.2f s",
			    i, share * 100, bytes / 1048576, secs);
		cr_assert(share >= 0.2 && share <= 0.8,
			  "equal links split %.1f / %.1f %%", (1 - share) * 100, share * 100);
		shares[i] = share;
	}
	mid = shares[0] + shares[1] + shares[2] - fmin(shares[0], fmin(shares[1], shares[2])) -
	      fmax(shares[0], fmax(shares[1], shares[2]));
	cr_assert(mid >= mid_lo && mid <= 1 - mid_lo,
		  "equal links: kv1's middle share %.1f %%", mid * 100);
	secs_fast = secs;
	/* kv1 limited to 40 MB/s. */
	cr_assert_eq(tc_sh("ip netns exec %s-head tc qdisc add dev kv1 root tbf rate %.0fbit burst 256kb latency 50ms",
			   tc_ns_prefix, limit * 8), 0);
	bytes = write_share(&pre, base, len, &share, &secs);
	cr_log_info("kv1 at 40 MB/s: it carried %.1f %% (%.1f MB/s) of %.0f MiB in %.2f s (%.2f s unlimited)",
		    share * 100, share * bytes / secs / 1e6, bytes / 1048576, secs,
		    secs_fast);
	/* Neither starved (at least half its rate used) nor holding the
	 * transfer back (no longer than kv0 alone would take, give or take). */
	cr_assert_geq(share * bytes / secs, limit / 2, "the limited link was starved");
	cr_assert_leq(share * bytes / secs, limit * 1.2, "more than the limit?");
	cr_assert_lt(secs, 2 * secs_fast + 1.0, "the limited link held the transfer back");
	tc_peer_stop(&pre.p);
	tc_peer_stop(&dec.p);
}

/* Build the cluster with a third KV link (kv2) and, with prefill = 4,
 * two more prefill hosts. */
static void
cluster_up_wide(int prefill)
{
	setenv("KVT_NETNS_ORDER", "1 2 3 9", 1);
	if (prefill >= 4)
		setenv("KVT_NETNS_PREFILL", "4", 1);
	tc_cluster_up();
	unsetenv("KVT_NETNS_ORDER");
	unsetenv("KVT_NETNS_PREFILL");
}

/*
 * Many prefill engines into one decode engine: four prefill hosts write
 * their shards at once to one decode host over three KV links each.
 * Every host sends its own shard from its own KV NICs, every link of
 * every host carries part of it, the backend only the control plane, the
 * decode host receives on its KV links what was sent, and every shard
 * arrives intact.
 */
Test(netns, four_hosts_into_one_decode, .timeout = 240, .fini = tc_cluster_down)
{
	static const char *const names[4] = { "head", "worker", "pre3", "pre4" };
	struct tc_host dec = { .name = "decode", .nics = "kv0,kv1,kv2" };
	struct tc_host pre[4];
	uint64_t base, rx0, rx, tx[3], be, sent = 0;
	char buf[128];
	int i;

	cluster_up_wide(4);
	tc_host_start(&dec);
	base = addr_of(&dec.p, "alloc 0 134217728 w");
	for (i = 0; i < 4; i++) {
		pre[i] = (struct tc_host){ .name = names[i], .nics = "kv0,kv1,kv2" };
		tc_host_start(&pre[i]);
		addr_of(&pre[i].p, "alloc 0 33554432 -");
		cr_assert_eq(tc_peer_cmd(&pre[i].p, NULL, 0, "fill 0 0 %" PRIu64 " %d",
					 SHARD, 21 + i), 0);
		cr_assert_eq(tc_peer_cmd(&pre[i].p, buf, sizeof(buf),
					 "open %s:7000", dec.be), 0, "%s", buf);
		snap(&pre[i], "tx");
	}
	snap(&dec, "rx");
	rx0 = dec.kv0 + dec.kv1 + dec.kv2;
	for (i = 0; i < 4; i++)
		tc_peer_send(&pre[i].p, "write 0 0 %" PRIx64 " %" PRIu64,
			     base + (uint64_t)i * SHARD, SHARD);
	for (i = 0; i < 4; i++) {
		cr_assert_eq(tc_peer_reply(&pre[i].p, buf, sizeof(buf)), 0);
		cr_assert_eq(strtol(buf, NULL, 10), 0, "%s: write status %s",
			     pre[i].name, buf);
	}
	for (i = 0; i < 4; i++) {
		tx[0] = pre[i].kv0;
		tx[1] = pre[i].kv1;
		tx[2] = pre[i].kv2;
		be = pre[i].be_tx;
		snap(&pre[i], "tx");
		tx[0] = pre[i].kv0 - tx[0];
		tx[1] = pre[i].kv1 - tx[1];
		tx[2] = pre[i].kv2 - tx[2];
		be = pre[i].be_tx - be;
		sent += tx[0] + tx[1] + tx[2];
		cr_log_info("%s sent kv0 %" PRIu64 " kv1 %" PRIu64 " kv2 %" PRIu64 " be %" PRIu64,
			    pre[i].name, tx[0], tx[1], tx[2], be);
		cr_assert_geq(tx[0] + tx[1] + tx[2], SHARD, "%s sent less than its shard",
			      pre[i].name);
		cr_assert_leq(tx[0] + tx[1] + tx[2], SHARD + SHARD / 10,
			      "%s sent more than its shard", pre[i].name);
		cr_assert_gt(tx[0], SHARD / 10, "%s: kv0 idle", pre[i].name);
		cr_assert_gt(tx[1], SHARD / 10, "%s: kv1 idle", pre[i].name);
		cr_assert_gt(tx[2], SHARD / 10, "%s: kv2 idle", pre[i].name);
		cr_assert_lt(be, SHARD / 100, "%s: backend carried %" PRIu64,
			     pre[i].name, be);
		shard_intact(&dec, &pre[i], i);
	}
	snap(&dec, "rx");
	rx = dec.kv0 + dec.kv1 + dec.kv2 - rx0;
	cr_log_info("decode received %" PRIu64 " bytes on its KV links, %" PRIu64 " sent",
		    rx, sent);
	cr_assert_geq(rx, 4 * SHARD);
	cr_assert_leq(rx, sent + sent / 100, "decode received more than was sent");
	for (i = 0; i < 4; i++)
		tc_peer_stop(&pre[i].p);
	tc_peer_stop(&dec.p);
}

/* Seconds a len-byte write from the head takes; kv2's share in *slow. */
static double
timed_write(struct tc_host *pre, uint64_t base, uint64_t len, double *slow)
{
	uint64_t a, b, c, t0;
	char buf[128];

	snap(pre, "tx");
	a = pre->kv0;
	b = pre->kv1;
	c = pre->kv2;
	t0 = tc_now_us();
	cr_assert_eq(tc_peer_cmd(&pre->p, buf, sizeof(buf),
				 "write 0 0 %" PRIx64 " %" PRIu64, base, len), 0);
	cr_assert_eq(strtol(buf, NULL, 10), 0, "write: %s", buf);
	t0 = tc_now_us() - t0;
	snap(pre, "tx");
	a = pre->kv0 - a;
	b = pre->kv1 - b;
	c = pre->kv2 - c;
	*slow = (double)c / (double)(a + b + c);
	return (double)t0 / 1e6;
}

/*
 * A slow rail does not hold the fast ones back: kv0 and kv1 limited to
 * 40 MB/s, kv2 to 4 MB/s.  A 256 MiB write over all three takes at most
 * 1.1x the time it takes over the two fast ones alone, and the slow
 * rail carries about its share (4/84 = 4.8 %: between 2 and 8 %).  With
 * a cap in bytes in flight alone (before the cap in time) it took 1.28x
 * here, kv2 carrying 6.5 %.
 */
Test(netns, slow_rail_does_not_hold_back, .timeout = 240, .fini = tc_cluster_down)
{
	struct tc_host dec = { .name = "decode", .nics = "kv0,kv1,kv2" };
	struct tc_host pre = { .name = "head", .nics = "kv0,kv1" };
	const uint64_t len = 256 * MiB;
	double fast, all, slow;
	uint64_t base;
	char buf[128];
	int i;

	cluster_up_wide(2);
	for (i = 0; i < 3; i++)
		cr_assert_eq(tc_sh("ip netns exec %s-head tc qdisc add dev kv%d root tbf rate %dmbit burst 256kb latency 50ms",
				   tc_ns_prefix, i, i < 2 ? 320 : 32), 0);
	tc_host_start(&dec);
	base = addr_of(&dec.p, "alloc 0 268435456 w");
	for (i = 0; i < 2; i++) {
		tc_host_start(&pre);
		addr_of(&pre.p, "alloc 0 268435456 -");
		cr_assert_eq(tc_peer_cmd(&pre.p, buf, sizeof(buf), "open %s:7000",
					 dec.be), 0, "%s", buf);
		if (i == 0) {
			fast = timed_write(&pre, base, len, &slow);
			cr_log_info("kv0+kv1: %.2f s", fast);
		} else {
			all = timed_write(&pre, base, len, &slow);
			cr_log_info("kv0+kv1+kv2: %.2f s (%.2fx), kv2 carried %.1f %%",
				    all, all / fast, slow * 100);
		}
		tc_peer_stop(&pre.p);
		pre.nics = "kv0,kv1,kv2";
	}
	cr_assert_leq(all, 1.1 * fast, "the slow rail held the transfer back: %.2f s vs %.2f s",
		      all, fast);
	cr_assert(slow >= 0.02 && slow <= 0.08, "the slow rail carried %.1f %%",
		  slow * 100);
	tc_peer_stop(&dec.p);
}
