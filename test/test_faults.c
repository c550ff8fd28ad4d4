/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Faults and hostile peers: a target that lies in its answers, answers
 * lost with their connection, a peer that stops answering, and peers
 * killed at random moments.  Each case names what a user relies on: the
 * process survives, every request settles with its errno within the
 * timeout, a fence or notification acts exactly once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "kvt.h"
#include "kvt_private.h"
#include "fault_proxy.h"
#include "test_assert.h"
#include "test_common.h"
#include "../pmd/tcp/tcp_wire.h"

#define MiB ((uint64_t)1 << 20)
#define TCP "--kvt-pmd tcp --kvt-nic lo --kvt-timeout 1000"
#define SHM "--kvt-pmd shm --kvt-timeout 1000"

/* A target whose answers to WRITE carry a status outside the documented
 * set: each request fails with -EPROTO, none stays pending. */
Test(faults, lying_status_fails_the_request, .timeout = 60)
{
	static const int32_t lies[] = { -EINPROGRESS, 5, INT_MIN, -EAGAIN };
	static uint8_t src[4096];
	struct fp_rules r = { .lie = 1 };
	struct fproxy *fp;
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base, t0;
	unsigned int i;
	int st;

	cr_assert_geq(tc_engine_init(TCP), 0);
	cr_assert_eq(tc_peer_start(&t, TCP), 0);
	base = tc_peer_u64(&t, 0, "alloc 0 65536 w");
	fp = fp_start(t.addr, &r);
	cr_assert_not_null(fp);
	p = kvt_peer_open(fp_addr(fp), 5000);
	cr_assert_not_null(p, "open through the proxy: %s", rte_strerror(rte_errno));
	cr_assert_not_null(kvt_mem_register(src, sizeof(src), NULL, 0));
	for (i = 0; i < RTE_DIM(lies); i++) {
		r.ack_status = lies[i];
		t0 = tc_now_us();
		st = tc_xfer1(p, KVT_OP_WRITE, src, base, sizeof(src), NULL, 3000000);
		cr_assert_eq(st, -EPROTO, "answer %d came back as %d", lies[i], st);
		cr_assert_lt(tc_now_us() - t0, 2000000);
	}
	/* An honest answer again: the connection still works. */
	r.lie = 0;
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, sizeof(src), NULL,
			      3000000), 0);
	kvt_peer_close(p);
	fp_stop(fp);
	tc_peer_stop(&t);
	kvt_fini();
}

static int
count_of(const char *notes, const char *text)
{
	const char *q = notes;
	size_t n = strlen(text);
	int c = 0;

	/* Notes read " TEXT@peer TEXT@peer". */
	while ((q = strstr(q, text)) != NULL) {
		if ((q == notes || q[-1] == ' ') && q[n] == '@')
			c++;
		q += n;
	}
	return c;
}

/*
 * The target acts on a notification (or fence), then its answer is lost
 * with the connection: the tail goes out again on another socket and the
 * target, which knows its number, does not act twice.  The request
 * succeeds and the receiver sees one message.
 */
Test(faults, lost_answer_tail_acts_once, .timeout = 60)
{
	static uint8_t src[65536];
	struct fp_rules r = { 0 };
	struct kvt_submit_opts o = { 0 };
	struct fproxy *fp;
	struct tc_peer t;
	struct kvt_peer *p;
	char notes[4096];
	uint64_t base, ft;

	cr_assert_geq(tc_engine_init(TCP), 0);
	cr_assert_eq(tc_peer_start(&t, TCP), 0);
	base = tc_peer_u64(&t, 0, "alloc 0 65536 w");
	ft = tc_peer_u64(&t, 0, "fence 4");
	fp = fp_start(t.addr, &r);
	cr_assert_not_null(fp);
	p = kvt_peer_open(fp_addr(fp), 5000);
	cr_assert_not_null(p, "open through the proxy: %s", rte_strerror(rte_errno));
	cr_assert_not_null(kvt_mem_register(src, sizeof(src), NULL, 0));

	r.cut_type = F_NOTIFY_ACK;
	o.notify = "once-1";
	o.notify_len = 6;
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, sizeof(src), &o,
			      5000000), 0, "the notification's request failed");
	cr_assert_eq(r.cuts, 1, "the proxy cut nothing");
	cr_assert_eq(tc_peer_cmd(&t, notes, sizeof(notes), "notes 300000"), 0);
	cr_assert_eq(count_of(notes, "once-1"), 1, "delivered: '%s'", notes);

	/* A fence whose answer is lost: the request succeeds and the slot
	 * holds the room. */
	cr_assert_eq(tc_peer_u64(&t, 0, "arm 1 77"), 0);
	r.cut_type = F_FENCE_ACK;
	memset(&o, 0, sizeof(o));
	o.flags = KVT_SUBMIT_FENCE;
	o.fence.table = ft;
	o.fence.slot = 1;
	o.fence.room = 77;
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, sizeof(src), &o,
			      5000000), 0, "the fenced request failed");
	cr_assert_eq(r.cuts, 2, "the proxy cut nothing");
	cr_assert_eq(tc_peer_u64(&t, 0, "fpoll 1"), 0, "the fence did not land");
	kvt_peer_close(p);
	fp_stop(fp);
	tc_peer_stop(&t);
	kvt_fini();
}

/* The receiving end of exactly-once: numbers out of order, copies, and
 * a window that moves on. */
Test(faults, once_window)
{
	struct kvt_once *o = kvt_once_new();
	uint32_t i;

	cr_assert_not_null(o);
	cr_assert_eq(kvt_once_take(o, 0), 1, "unnumbered tails always act");
	cr_assert_eq(kvt_once_take(o, 0), 1);
	cr_assert_eq(kvt_once_take(o, 3), 1);
	cr_assert_eq(kvt_once_take(o, 1), 1);
	cr_assert_eq(kvt_once_take(o, 3), 0, "a copy acted");
	cr_assert_eq(kvt_once_take(o, 2), 1);
	cr_assert_eq(kvt_once_take(o, 1), 0);
	kvt_once_forget(o, 2);
	cr_assert_eq(kvt_once_take(o, 2), 1, "a forgotten number must act again");
	for (i = 4; i < 200000; i++)
		cr_assert_eq(kvt_once_take(o, i), 1, "number %u", i);
	cr_assert_eq(kvt_once_take(o, 199999), 0);
	cr_assert_eq(kvt_once_take(o, 199000), 0);
	kvt_once_free(o);
	/* Numbers wrap: ..., 0xffffffff, then 1 (0 is never given out). */
	o = kvt_once_new();
	for (i = 0xfffffff0u; i != 0; i++)
		cr_assert_eq(kvt_once_take(o, i), 1, "number %#x", i);
	cr_assert_eq(kvt_once_take(o, 1), 1);
	cr_assert_eq(kvt_once_take(o, 0xffffffffu), 0, "a copy across the wrap acted");
	cr_assert_eq(kvt_once_take(o, 0xfffffff8u), 0);
	cr_assert_eq(kvt_once_take(o, 2), 1);
	kvt_once_free(o);
}

/*
 * A peer stops answering (SIGSTOP): what is in flight settles within the
 * peer timeout (1 s here), on each transport.  Over tcp it fails; shm
 * places data in the peer's memory without the peer, so it may finish.
 */
static void
frozen_peer(const char *opts, int must_fail)
{
	const unsigned int n = 64;
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(4 * MiB);
	uint64_t base, t0, took;
	unsigned int i, failed = 0;
	int st;

	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_eq(tc_peer_start(&t, opts), 0);
	cr_assert_not_null(kvt_mem_register(src, 4 * MiB, NULL, 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " w", 4 * MiB);
	p = tc_open_peer(&t);
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, 4 * MiB, NULL,
			      5000000), 0);
	kill(t.pid, SIGSTOP);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
			.remote = base, .len = 4 * MiB };
	b = kvt_batch_alloc(n);
	t0 = tc_now_us();
	/* Overlapping destinations are refused unless asked for. */
	{
		struct kvt_submit_opts o = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };

		cr_assert_geq(kvt_submit(b, p, x, n, &o), 0);
	}
	cr_assert_eq(kvt_wait(b, 5000000), 0, "requests still pending 5 s later");
	took = tc_now_us() - t0;
	for (i = 0; i < n; i++) {
		st = kvt_status(b, i);
		cr_assert(st == 0 || st == -ETIMEDOUT || st == -ECONNRESET,
			  "request %u: %d", i, st);
		failed += st != 0;
	}
	cr_log_info("%s: %u of %u failed %.2f s after the peer froze", opts,
		    failed, n, (double)took / 1e6);
	if (must_fail)
		cr_assert_gt(failed, 0, "a frozen peer took every request");
	cr_assert_lt(took, 1600000, "took %.2f s for a 1 s timeout",
		     (double)took / 1e6);
	kvt_batch_free(b);
	kill(t.pid, SIGCONT);
	kvt_peer_close(p);
	tc_peer_kill(&t);
	kvt_fini();
	free(src);
	free(x);
}

Test(faults, frozen_peer_tcp, .timeout = 60)
{
	frozen_peer(TCP, 1);
}

Test(faults, frozen_peer_shm, .timeout = 60)
{
	frozen_peer(SHM, 0);
}

/* 0 while p runs or ended by itself, else the signal that killed it. */
static int
death_signal(struct tc_peer *p)
{
	int st;

	if (waitpid(p->pid, &st, WNOHANG) != p->pid)
		return 0;
	p->pid = 0;
	return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void
random_pause(unsigned int *seed)
{
	usleep(1000 + (unsigned int)(rand_r(seed) % 40000));
}

/*
 * One side killed at a random moment of a stream of requests, again and
 * again: the survivor never dies of a signal, never hangs, and fails the
 * stream with the errno of a lost peer within the timeout.
 */
static void
death_loop(const char *opts, const char *op, unsigned int rounds)
{
	const uint64_t len = 4 * MiB;
	struct tc_peer keep, victim;
	unsigned int i, seed = (unsigned int)getpid();
	uint64_t base, t0;
	char buf[128];
	int st, sig;

	for (i = 0; i < rounds; i++) {
		int kill_target = (i % 2) == 0;
		struct tc_peer *ini = kill_target ? &keep : &victim;
		struct tc_peer *tgt = kill_target ? &victim : &keep;

		cr_assert_eq(tc_peer_start(&keep, opts), 0);
		cr_assert_eq(tc_peer_start(&victim, opts), 0);
		base = tc_peer_u64(tgt, 0, "alloc 0 %" PRIu64 " rw", len);
		tc_peer_u64(ini, 0, "alloc 0 %" PRIu64 " rw", len);
		cr_assert_eq(tc_peer_cmd(ini, buf, sizeof(buf), "open %s", tgt->addr),
			     0, "open: %s", buf);
		tc_peer_send(ini, "stream %s 0 0 %" PRIx64 " %" PRIu64 " 100000",
			     op, base, len);
		random_pause(&seed);
		kill(victim.pid, SIGKILL);
		t0 = tc_now_us();
		if (kill_target) {
			if (tc_peer_reply(ini, buf, sizeof(buf)) != 0) {
				usleep(100000);
				cr_assert_fail("round %u: the initiator did not answer (%s; signal %d)",
					       i, buf, death_signal(ini));
			}
			st = (int)strtol(buf, NULL, 10);
			cr_assert(st == -ECONNRESET || st == -ETIMEDOUT,
				  "round %u: the stream ended with %d", i, st);
			cr_assert_lt(tc_now_us() - t0, 2500000,
				     "round %u: %.2f s to notice", i,
				     (double)(tc_now_us() - t0) / 1e6);
		}
		waitpid(victim.pid, NULL, 0);
		victim.pid = 0;
		/* The survivor still serves. */
		cr_assert_eq(tc_peer_cmd(&keep, buf, sizeof(buf), "sum 0 0 4096"), 0,
			     "round %u: the survivor does not answer", i);
		sig = death_signal(&keep);
		cr_assert_eq(sig, 0, "round %u: the survivor died of signal %d", i, sig);
		tc_peer_stop(&keep);
		tc_peer_kill(&victim);
	}
}

Test(faults, peer_death_tcp_write, .timeout = 300)
{
	death_loop(TCP, "write", 26);
}

Test(faults, peer_death_tcp_read, .timeout = 300)
{
	death_loop(TCP, "read", 26);
}

Test(faults, peer_death_shm_write, .timeout = 300)
{
	death_loop(SHM, "write", 24);
}

Test(faults, peer_death_shm_read, .timeout = 300)
{
	death_loop(SHM, "read", 24);
}
