/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The runtime: init/fini, options, attaching to an application's EAL,
 * descriptors through the rings, idle policies, fini with work in flight.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ring.h>

#include "kvt.h"
#include "kvt_private.h"
#include "test_common.h"

/* Open this engine as its own peer (the null port needs no other). */
static struct kvt_peer *
self_peer(void)
{
	char addr[64];
	struct kvt_peer *p;

	cr_assert(kvt_listen_addr(addr, sizeof(addr)) > 0);
	p = kvt_peer_open(addr, 5000);
	cr_assert_not_null(p, "self open: %s", rte_strerror(rte_errno));
	return p;
}

Test(engine, init_fini, .timeout = 30)
{
	char addr[64];

	cr_assert_eq(kvt_fini(), -ENODEV);
	cr_assert_geq(tc_engine_init(NULL), 0);
	cr_assert_eq(tc_engine_init(NULL), -EALREADY);
	cr_assert_not_null(kvt_name());
	cr_assert_gt(kvt_listen_addr(addr, sizeof(addr)), 0);
	cr_assert_eq(strncmp(addr, "127.0.0.1:", 10), 0, "addr %s", addr);
	cr_assert_eq(kvt_listen_addr(addr, 4), -ENOSPC);
	cr_assert_geq(kvt_port_count(), 1);
	cr_assert_eq(kvt_fini(), 0);
	cr_assert_null(kvt_name());
	cr_assert_eq(kvt_port_count(), 0);
	/* EAL stays up: a second engine attaches to it. */
	cr_assert_geq(tc_engine_init(NULL), 0);
	cr_assert_eq(kvt_fini(), 0);
}

Test(engine, return_value_leaves_app_args, .timeout = 30)
{
	char *argv[] = { "app", "--", "--kvt-idle", "sleep:50",
			 "--kvt-listen=127.0.0.1:0", "--app-flag", "x", NULL };
	int ret = kvt_init(7, argv);

	cr_assert_eq(ret, 4, "consumed %d", ret);
	cr_assert_str_eq(argv[ret + 1], "--app-flag");
	kvt_fini();
}

/* Each bad option: -EINVAL, a message naming it, and no engine. */
Test(engine, bad_options, .init = cr_redirect_stderr, .timeout = 30)
{
	static const char *const bad[][2] = {
		{ "--kvt-idle", "nap" },
		{ "--kvt-idle", "sleep:0" },
		{ "--kvt-slice", "12" },
		{ "--kvt-slice", "1T" },
		/* Past 2^64 once scaled: must not wrap to 64K. */
		{ "--kvt-slice", "18014398509482048K" },
		{ "--kvt-listen", "nohostport" },
		{ "--kvt-listen", "127.0.0.1:99999" },
		{ "--kvt-timeout", "-1" },
		{ "--kvt-descs", "10" },
		{ "--kvt-lcores", "3-1" },
		{ "--kvt-meta", "zookeeper://x" },
		{ "--kvt-name", "bad name" },
		{ "--kvt-cluster", "" },
		{ "--kvt-pmd", "nosuchpmd" },
		{ "--kvt-pmd", "null,ports=0" },
		{ "--kvt-pmd", "shm,ports=2x" },
		{ "--kvt-pmd", "tcp,conns=9" },
		{ "--kvt-pmd", "rdma,sq=100" },
		{ "--kvt-pmd", "nvlink,resident=-1" },
		{ "--kvt-pmd", "nvlink,sms=many" },
		{ "--kvt-bogus", "1" },
	};
	char *argv[5], buf[8192];
	FILE *err;
	size_t n;
	unsigned int i;

	for (i = 0; i < RTE_DIM(bad); i++) {
		argv[0] = (char *)"app";
		argv[1] = (char *)"--";
		argv[2] = (char *)bad[i][0];
		argv[3] = (char *)bad[i][1];
		argv[4] = NULL;
		cr_assert_eq(kvt_init(4, argv), -EINVAL, "%s %s accepted",
			     bad[i][0], bad[i][1]);
		cr_assert_null(kvt_name());
	}
	argv[2] = (char *)"--kvt-slice";
	cr_assert_eq(kvt_init(3, argv), -EINVAL, "missing value accepted");
	fflush(stderr);
	err = cr_get_redirected_stderr();
	n = fread(buf, 1, sizeof(buf) - 1, err);
	buf[n] = '\0';
	cr_assert(strstr(buf, "invalid value 'nap' for --kvt-idle") != NULL, "%s", buf);
	cr_assert(strstr(buf, "--kvt-slice") != NULL);
	cr_assert(strstr(buf, "unknown transport in --kvt-pmd nosuchpmd") != NULL);
	cr_assert(strstr(buf, "--kvt-bogus") != NULL);
	cr_assert(strstr(buf, "option conns=9: a number in 1..8") != NULL, "%s", buf);
}

/* A topology file that is missing or malformed stops kvt_init, RDMA
 * device or not; so do more EAL arguments than kvt passes on. */
Test(engine, bad_topology_and_eal_args, .init = cr_redirect_stderr, .timeout = 30)
{
	char path[] = "/tmp/kvt-topo-XXXXXX", buf[8192], *argv[80];
	FILE *f, *err;
	size_t n;
	int fd, i;

	argv[0] = (char *)"app";
	argv[1] = (char *)"--";
	argv[2] = (char *)"--kvt-topo";
	argv[3] = (char *)"/nonexistent/topo.json";
	argv[4] = NULL;
	cr_assert_eq(kvt_init(4, argv), -ENOENT, "a missing topology file was accepted");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	fputs("{ \"cpu:0\": { \"preferred\": [ 3 ] } }", f);
	fclose(f);
	argv[3] = path;
	cr_assert_eq(kvt_init(4, argv), -EINVAL, "a malformed topology file was accepted");
	f = fopen(path, "w");
	fputs("{ \"cpu:0\": [", f);
	fclose(f);
	cr_assert_eq(kvt_init(4, argv), -EINVAL, "a file that is not JSON was accepted");
	unlink(path);
	for (i = 1; i < 71; i++)
		argv[i] = (char *)"--log-level=8";
	argv[71] = (char *)"--";
	argv[72] = NULL;
	cr_assert_eq(kvt_init(72, argv), -EINVAL, "70 EAL arguments");
	fflush(stderr);
	err = cr_get_redirected_stderr();
	n = fread(buf, 1, sizeof(buf) - 1, err);
	buf[n] = '\0';
	cr_assert(strstr(buf, "--kvt-topo: topology file /nonexistent/topo.json") != NULL,
		  "%s", buf);
	cr_assert(strstr(buf, "is not an array of NIC names") != NULL ||
		  strstr(buf, "a non-string") != NULL, "%s", buf);
	cr_assert(strstr(buf, "70 EAL arguments: at most") != NULL, "%s", buf);
}

Test(engine, option_parser, .timeout = 10)
{
	char *argv[] = { "--kvt-slice", "1M", "--kvt-idle=pause",
			 "--kvt-lcores", "1,3-4", "--kvt-timeout", "250",
			 "rest", NULL };
	struct kvt_opts o;
	char err[128];
	uint64_t v;

	kvt_opts_defaults(&o);
	cr_assert_eq(kvt_opts_parse(&o, 8, argv, err, sizeof(err)), 7);
	cr_assert_eq(o.slice, 1 << 20);
	cr_assert_eq(o.idle, KVT_IDLE_PAUSE);
	cr_assert_eq(o.n_lcores, 3);
	cr_assert_eq(o.lcores[2], 4);
	cr_assert_eq(o.timeout_ms, 250);
	kvt_opts_free(&o);
	cr_assert_eq(kvt_parse_size("64K", &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(kvt_parse_size("2MiB", &v), 0);
	cr_assert_eq(v, 2 << 20);
	cr_assert_eq(kvt_parse_size("k", &v), -EINVAL);
	cr_assert_eq(kvt_parse_size("5X", &v), -EINVAL);
}

/* Submit n_xfers writes of len through the null ports and wait. */
static void
flood(struct kvt_peer *p, uint8_t *src, uint8_t *dst, unsigned int n_xfers,
      uint64_t len)
{
	struct kvt_xfer *x = calloc(n_xfers, sizeof(*x));
	struct kvt_batch *b = kvt_batch_alloc(n_xfers);
	unsigned int i;

	cr_assert_not_null(b);
	for (i = 0; i < n_xfers; i++) {
		x[i].op = KVT_OP_WRITE;
		x[i].local = src;
		x[i].remote = (uintptr_t)dst + (uint64_t)i * len;
		x[i].len = len;
	}
	cr_assert_eq(kvt_submit(b, p, x, n_xfers, NULL), 0);
	cr_assert_eq(kvt_wait(b, 20 * 1000 * 1000), 0);
	cr_assert_eq(kvt_poll(b), 0);
	for (i = 0; i < n_xfers; i++)
		cr_assert_eq(kvt_status(b, i), 0, "xfer %u: %d", i,
			     kvt_status(b, i));
	kvt_batch_free(b);
	free(x);
}

static void
port_totals(uint64_t *slices, uint64_t *bytes)
{
	struct kvt_port_stats st;
	unsigned int i;

	*slices = *bytes = 0;
	for (i = 0; i < kvt_port_count(); i++) {
		cr_assert_eq(kvt_port_stats(i, &st), 0);
		*slices += st.slices;
		*bytes += st.write_bytes;
	}
}

/* More slices than descriptors: the backpressure path must lose none. */
Test(engine, ring_flood_exact_counts, .timeout = 60)
{
	const unsigned int n = 1000;
	const uint64_t len = 1 << 20;
	uint64_t slices, bytes;
	static uint8_t src[1 << 20];
	uint8_t *dst = malloc(n * len);
	struct kvt_peer *p;
	unsigned int i;

	cr_assert_geq(tc_engine_init("--kvt-pmd null,ports=2 --kvt-descs 1024 --kvt-slice 64K"), 0);
	cr_assert_eq(kvt_port_count(), 2);
	cr_assert_not_null(kvt_mem_register(src, sizeof(src), "cpu:0", 0));
	cr_assert_not_null(kvt_mem_register(dst, n * len, "cpu:0",
					    KVT_MEM_REMOTE_WRITE));
	p = self_peer();
	for (i = 0; i < 3; i++)
		flood(p, src, dst, n, len);
	port_totals(&slices, &bytes);
	cr_assert_eq(slices, 3ull * n * (len / 65536));
	cr_assert_eq(bytes, 3ull * n * len);
	cr_assert_eq(kvt_peer_close(p), 0);
	cr_assert_eq(kvt_fini(), 0);
	free(dst);
}

/* The application brought EAL up itself; kvt uses its spare lcore. */
Test(engine, attach_to_running_eal, .timeout = 30)
{
	char prefix[64];
	char *eal[] = { "app", "--no-huge", "--no-pci", "--no-shconf", "-m",
			"128", "-l", "0-1", prefix,
			"--log-level=lib.eal:warning", NULL };
	static uint8_t src[4096], dst[1 << 20];
	uint64_t slices, bytes;
	struct kvt_peer *p;

	snprintf(prefix, sizeof(prefix), "--file-prefix=attach-%d", getpid());
	cr_assert_geq(rte_eal_init(10, eal), 0);
	cr_assert_geq(tc_engine_init("--kvt-pmd null"), 0);
	cr_assert_not_null(kvt_mem_register(src, sizeof(src), NULL, 0));
	cr_assert_not_null(kvt_mem_register(dst, sizeof(dst), NULL,
					    KVT_MEM_REMOTE_WRITE));
	p = self_peer();
	flood(p, src, dst, 256, 4096);
	port_totals(&slices, &bytes);
	cr_assert_eq(slices, 256);
	kvt_peer_close(p);
	cr_assert_eq(kvt_fini(), 0);
	/* EAL is the application's: still there. */
	cr_assert_gt(rte_lcore_count(), 0);
	rte_eal_cleanup();
}

static double
loops_per_sec(void)
{
	uint64_t a = kvt_lcore_loops(0), b;

	usleep(300000);
	b = kvt_lcore_loops(0);
	return (double)(b - a) / 0.3;
}

Test(engine, idle_policy_switches, .timeout = 30)
{
	double sleep_rate, spin_rate, pause_rate, sleep_again;

	cr_assert_geq(tc_engine_init("--kvt-pmd null"), 0);
	cr_assert_eq(kvt_set_idle("nap"), -EINVAL);
	cr_assert_eq(kvt_set_idle("sleep:2000"), 0);
	usleep(50000);
	sleep_rate = loops_per_sec();
	cr_assert_eq(kvt_set_idle("spin"), 0);
	spin_rate = loops_per_sec();
	cr_assert_eq(kvt_set_idle("pause"), 0);
	pause_rate = loops_per_sec();
	/* And back: the switch works both ways. */
	cr_assert_eq(kvt_set_idle("sleep:2000"), 0);
	usleep(50000);
	sleep_again = loops_per_sec();
	/* 2 ms naps allow at most ~500 turns a second. */
	cr_assert_lt(sleep_rate, 1000, "sleep: %.0f loops/s", sleep_rate);
	cr_assert_lt(sleep_again, 1000, "sleep again: %.0f loops/s", sleep_again);
	cr_assert_gt(spin_rate, 100 * sleep_rate, "spin %.0f sleep %.0f",
		     spin_rate, sleep_rate);
	cr_assert_gt(pause_rate, 100 * sleep_rate, "pause %.0f", pause_rate);
	cr_assert_lt(loops_per_sec(), 1000);
	kvt_fini();
}

/* fini with transfers queued: everything settles, nothing hangs. */
Test(engine, fini_with_work_in_flight, .timeout = 60)
{
	const uint64_t len = 64 << 20;
	struct kvt_xfer x[4];
	struct kvt_batch *b;
	struct kvt_peer *p;
	uint8_t *src, *dst;
	int i, st, done = 0, cancelled = 0;

	cr_assert_geq(tc_engine_init("--kvt-pmd shm"), 0);
	src = kvt_mem_alloc(len, "cpu:0");
	dst = kvt_mem_alloc(4 * len, "cpu:0");
	cr_assert_not_null(kvt_mem_register(src, len, NULL, 0));
	cr_assert_not_null(kvt_mem_register(dst, 4 * len, NULL,
					    KVT_MEM_REMOTE_WRITE));
	p = self_peer();
	b = kvt_batch_alloc(4);
	for (i = 0; i < 4; i++) {
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
			.remote = (uintptr_t)dst + i * len, .len = len };
	}
	cr_assert_eq(kvt_submit(b, p, x, 4, NULL), 0);
	cr_assert_eq(kvt_fini(), 0);
	/* The batch outlives the engine; every request has settled. */
	cr_assert_eq(kvt_poll(b), 0);
	for (i = 0; i < 4; i++) {
		st = kvt_status(b, i);
		cr_assert(st == 0 || st == -ECANCELED, "status %d", st);
		done += st == 0;
		cancelled += st == -ECANCELED;
	}
	cr_assert_eq(done + cancelled, 4);
	cr_assert_eq(kvt_batch_free(b), 0);
	cr_assert_eq(kvt_mem_free(src), 0);
}

/* Listening beyond loopback without a secret is said at start-up; on
 * loopback, or with a secret, nothing is said. */
Test(engine, warns_open_listener, .init = cr_redirect_stderr, .timeout = 30)
{
	char buf[16384];
	FILE *err;
	size_t n;

	cr_assert_geq(tc_engine_init("--kvt-pmd null --kvt-listen 0.0.0.0:0"), 0);
	kvt_fini();
	fflush(stderr);
	err = cr_get_redirected_stderr();
	n = fread(buf, 1, sizeof(buf) - 1, err);
	buf[n] = '\0';
	cr_assert(strstr(buf, "listening on 0.0.0.0:0 without --kvt-secret") != NULL,
		  "no warning:\n%s", buf);
	cr_assert_geq(tc_engine_init("--kvt-pmd null --kvt-listen 0.0.0.0:0 --kvt-secret s"), 0);
	kvt_fini();
	cr_assert_geq(tc_engine_init("--kvt-pmd null"), 0);	/* loopback */
	kvt_fini();
	fflush(stderr);
	n = fread(buf, 1, sizeof(buf) - 1, err);
	buf[n] = '\0';
	cr_assert(strstr(buf, "without --kvt-secret") == NULL,
		  "a warning with a secret or on loopback:\n%s", buf);
}

struct call_gate {
	uint32_t entered;
	uint32_t release;
};

/* Holds the lcore until the test releases it. */
static int
hold_lcore(struct kvt_port *port, void *arg)
{
	struct call_gate *g = arg;

	(void)port;
	__atomic_store_n(&g->entered, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&g->release, __ATOMIC_ACQUIRE))
		usleep(100);
	return 0;
}

static int
answer(struct kvt_port *port, void *arg)
{
	(void)port;
	(void)arg;
	return 42;
}

static void *
call_holder(void *arg)
{
	return (void *)(intptr_t)kvt_port_call(kvt_port_get(0), hold_lcore,
					       arg, 20000);
}

static void *
call_answer(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)kvt_port_call(kvt_port_get(0), answer, NULL,
					       20000);
}

/* The engine (opts) as its own peer, src and dst registered. */
static struct kvt_peer *
self_engine(const char *opts, void *src, size_t slen, void *dst, size_t dlen)
{
	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_not_null(kvt_mem_register(src, slen, NULL, 0));
	cr_assert_not_null(kvt_mem_register(dst, dlen, NULL,
					    KVT_MEM_REMOTE_WRITE));
	return self_peer();
}

/* The same, its lcore held in a port call until g->release. */
static struct kvt_peer *
held_engine(const char *opts, void *src, size_t slen, void *dst,
	    size_t dlen, struct call_gate *g, pthread_t *holder)
{
	struct kvt_peer *p = self_engine(opts, src, slen, dst, dlen);

	cr_assert_eq(pthread_create(holder, NULL, call_holder, g), 0);
	while (!__atomic_load_n(&g->entered, __ATOMIC_ACQUIRE))
		usleep(100);
	return p;
}

/* Control work has its own way to the lcore: a port call still runs
 * while the lcore's descriptor ring is full, and the data behind it
 * moves once the lcore is free. */
Test(engine, port_call_past_a_full_ring, .timeout = 60)
{
	const unsigned int n = 4096;
	static uint8_t src[4096], dst[4096 * 64];
	struct call_gate g = { 0, 0 };
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src, .len = 64 };
	/* Claims are not what this is about (a region holds 1 024 claimed
	 * writes in flight at most). */
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	struct kvt_batch *b;
	struct kvt_peer *p;
	pthread_t holder, asker;
	void *ret;
	unsigned int i;

	p = held_engine("--kvt-pmd null --kvt-descs 1024", src, sizeof(src),
			dst, sizeof(dst), &g, &holder);
	b = kvt_batch_alloc(n);
	for (i = 0; i < n; i++) {
		x.remote = (uintptr_t)dst + (uint64_t)i * 64;
		ret = (void *)(intptr_t)kvt_submit(b, p, &x, 1, &o);
		cr_assert_geq((intptr_t)ret, 0, "submit %u: %s", i,
			      strerror(-(int)(intptr_t)ret));
	}
	cr_assert(rte_ring_full(kvt_eng->lcores[0].ring[KVT_PRIO_NORMAL]),
		  "%u descriptors left room in the lcore's ring",
		  rte_ring_count(kvt_eng->lcores[0].ring[KVT_PRIO_NORMAL]));
	cr_assert_eq(pthread_create(&asker, NULL, call_answer, NULL), 0);
	usleep(20000);
	__atomic_store_n(&g.release, 1, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_join(holder, &ret), 0);
	cr_assert_eq((intptr_t)ret, 0);
	cr_assert_eq(pthread_join(asker, &ret), 0);
	cr_assert_eq((intptr_t)ret, 42, "the call behind a full ring: %d",
		     (int)(intptr_t)ret);
	cr_assert_eq(kvt_wait(b, 20 * 1000 * 1000), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(kvt_status(b, i), 0);
	kvt_batch_free(b);
	kvt_peer_close(p);
	cr_assert_eq(kvt_fini(), 0);
}

/*
 * An ordered port's submission reaches its lcore as one descriptor for
 * the data and its done marker behind it, whatever its size: the lcore
 * cuts the slices itself, so a submission 64 times the descriptor pool
 * neither fills the ring nor waits for the submitter to slice it, and
 * every request completes.
 */
Test(engine, lcore_cuts_an_ordered_submission, .timeout = 60)
{
	const unsigned int n = 65536;
	static uint8_t src[4096], dst[64 * 65536];
	struct call_gate g = { 0, 0 };
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_batch *b;
	struct kvt_peer *p;
	pthread_t holder;
	void *ret;
	unsigned int i, queued;

	cr_assert_not_null(x);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
			.remote = (uintptr_t)dst + (uint64_t)i * 64, .len = 64 };
	/* The lcore is held, so what the submission queued stays queued. */
	p = held_engine("--kvt-pmd null --kvt-descs 1024", src, sizeof(src),
			dst, sizeof(dst), &g, &holder);
	b = kvt_batch_alloc(n);
	cr_assert_eq(kvt_submit(b, p, x, n, &o), 0);
	queued = rte_ring_count(kvt_eng->lcores[0].ring[KVT_PRIO_NORMAL]);
	__atomic_store_n(&g.release, 1, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_join(holder, &ret), 0);
	cr_assert_eq((intptr_t)ret, 0);
	cr_assert_eq(queued, 2, "%u requests put %u descriptors on the ring",
		     n, queued);
	cr_assert_eq(kvt_wait(b, 20 * 1000 * 1000), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(kvt_status(b, i), 0, "request %u", i);
	kvt_batch_free(b);
	free(x);
	kvt_peer_close(p);
	cr_assert_eq(kvt_fini(), 0);
}

/*
 * kvt_poll() costs what completed since the last call, not what is
 * pending: with 10 000 one-request submissions held behind a busy lcore,
 * a thousand polls report all of them pending and look at one
 * submission each; once the lcore runs, every submission is looked at a
 * bounded number of times on its way out (a poll that walked every
 * pending submission would look at ten million).
 */
Test(engine, poll_costs_what_completed, .timeout = 60)
{
	const unsigned int n = 10000, polls = 1000;
	static uint8_t src[64], dst[64 * 10000];
	struct call_gate g = { 0, 0 };
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src, .len = 64 };
	uint64_t seen, calls = 0;
	struct kvt_batch *b;
	struct kvt_peer *p;
	pthread_t holder;
	void *ret;
	unsigned int i;
	int left;

	p = held_engine("--kvt-pmd null", src, sizeof(src), dst, sizeof(dst),
			&g, &holder);
	b = kvt_batch_alloc(n);
	for (i = 0; i < n; i++) {
		x.remote = (uintptr_t)dst + (uint64_t)i * 64;
		cr_assert_eq(kvt_submit(b, p, &x, 1, &o), (int)i);
	}
	seen = kvt_batch_looked_at(b);
	for (i = 0; i < polls; i++)
		cr_assert_eq(kvt_poll(b), (int)n);
	seen = kvt_batch_looked_at(b) - seen;
	cr_assert_leq(seen, polls, "%u polls of %u pending submissions looked at %llu",
		      polls, n, (unsigned long long)seen);
	__atomic_store_n(&g.release, 1, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_join(holder, &ret), 0);
	cr_assert_eq((intptr_t)ret, 0);
	seen = kvt_batch_looked_at(b);
	do {
		left = kvt_poll(b);
		cr_assert_geq(left, 0);
		cr_assert_leq(left, (int)n);
		calls++;
		if (left > 0)
			usleep(10);
	} while (left > 0 && calls < 2000000);
	cr_assert_eq(left, 0, "%d requests still pending", left);
	seen = kvt_batch_looked_at(b) - seen;
	cr_assert_leq(seen, 2 * n + calls,
		      "%llu polls looked at %llu submissions to finish %u",
		      (unsigned long long)calls, (unsigned long long)seen, n);
	for (i = 0; i < n; i++)
		cr_assert_eq(kvt_status(b, i), 0, "request %u", i);
	cr_assert_eq(kvt_batch_reset(b), 0);
	kvt_batch_free(b);
	kvt_peer_close(p);
	cr_assert_eq(kvt_fini(), 0);
}

/* Slices of one 1 MiB write of class prio through the null port. */
static uint64_t
slices_of(struct kvt_peer *p, uint8_t *src, uint8_t *dst, enum kvt_prio prio)
{
	struct kvt_submit_opts o = { .priority = prio };
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src,
			      .remote = (uintptr_t)dst, .len = 1 << 20 };
	struct kvt_port_stats before, after;
	struct kvt_batch *b = kvt_batch_alloc(1);

	cr_assert_eq(kvt_port_stats(0, &before), 0);
	cr_assert_eq(kvt_submit(b, p, &x, 1, &o), 0);
	cr_assert_eq(kvt_wait(b, 20 * 1000 * 1000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(kvt_port_stats(0, &after), 0);
	kvt_batch_free(b);
	return after.slices - before.slices;
}

/*
 * The lcore cuts bulk into slices of 16 KiB at most, so urgent work that
 * arrives waits behind one short copy; the other classes keep
 * --kvt-slice (64 KiB): 64 slices against 16 for 1 MiB.
 */
Test(engine, bulk_cut_short, .timeout = 60)
{
	static uint8_t src[1 << 20], dst[1 << 20];
	struct kvt_peer *p;

	p = self_engine("--kvt-pmd null", src, sizeof(src), dst, sizeof(dst));
	cr_assert_eq(slices_of(p, src, dst, KVT_PRIO_NORMAL), 16);
	cr_assert_eq(slices_of(p, src, dst, KVT_PRIO_URGENT), 16);
	cr_assert_eq(slices_of(p, src, dst, KVT_PRIO_BULK), 64);
	kvt_peer_close(p);
	cr_assert_eq(kvt_fini(), 0);
}
