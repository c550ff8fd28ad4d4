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
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <rte_byteorder.h>

#include <criterion/criterion.h>

#include "kvt.h"
#include "kvt_private.h"
#include "fault_proxy.h"
#include "test_assert.h"
#include "test_common.h"
#include "../pmd/tcp/tcp_wire.h"

#define TCP "--kvt-pmd tcp --kvt-nic lo --kvt-timeout 1000"
#define SHM "--kvt-pmd shm --kvt-timeout 1000"

/* The target's engine opened through a fault proxy with rules r. */
static struct kvt_peer *
open_proxied(struct tc_peer *t, struct fp_rules *r, struct fproxy **fp)
{
	struct kvt_peer *p;

	*fp = fp_start(t->addr, r);
	cr_assert_not_null(*fp);
	p = kvt_peer_open(fp_addr(*fp), 5000);
	cr_assert_not_null(p, "open through the proxy: %s", rte_strerror(rte_errno));
	return p;
}

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
	p = open_proxied(&t, &r, &fp);
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
	p = open_proxied(&t, &r, &fp);
	cr_assert_not_null(kvt_mem_register(src, sizeof(src), NULL, 0));

	r.cut_type = F_NOTIFY_ACK;
	o.notify = "once-1";
	o.notify_len = 6;
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, sizeof(src), &o,
			      5000000), 0, "the notification's request failed");
	cr_assert_eq(r.cuts, 1, "the proxy cut nothing");
	cr_assert_eq(tc_peer_cmd(&t, notes, sizeof(notes), "notes 10000000 1"), 0);
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

	base = tc_pair_start(&t, opts, src, 4 * MiB, 4 * MiB, &p);
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

/* ---- hostile control sessions ---- */

static int
ctl_dial(const char *addr)
{
	struct sockaddr_in sa;
	int fd;

	cr_assert_eq(kvt_parse_addr(addr, &sa), 0);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* HELLO with secret (len bytes, NULs and all; NULL: none); @return the
 * answer's frame type, the answer in b. */
static int
ctl_hello_buf(int fd, const char *secret, uint32_t len, struct kvt_buf *out)
{
	struct kvt_buf b = { 0 };
	uint8_t id[32] = { 7 };
	int ret;

	kvt_wire_begin(&b, KVT_W_HELLO);
	kvt_wire_put_str(&b, KVT_T_NAME, "hostile");
	if (secret != NULL)
		kvt_wire_put(&b, KVT_T_SECRET, secret, len);
	kvt_wire_put(&b, KVT_T_HOST_ID, id, sizeof(id));
	kvt_wire_put_u64(&b, KVT_T_PID, 1);
	kvt_wire_end(&b);
	cr_assert_eq(send(fd, b.data, b.len, MSG_NOSIGNAL), (ssize_t)b.len);
	ret = kvt_wire_recv(fd, out, KVT_WIRE_MAX, kvt_now_us() + 5000000);
	kvt_buf_free(&b);
	return ret;
}

static int
ctl_hello(int fd, const char *secret, uint32_t len)
{
	struct kvt_buf b = { 0 };
	int ret = ctl_hello_buf(fd, secret, len, &b);

	kvt_buf_free(&b);
	return ret;
}

/* Wait (at most us) for the far end to close fd; @return 1 if it did. */
static int
closed_within(int fd, uint64_t us)
{
	uint64_t deadline = tc_now_us() + us;
	char buf[4096];
	ssize_t n;

	while (tc_now_us() < deadline) {
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return 1;
		if (n < 0)
			usleep(10000);
	}
	return 0;
}

static long
rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* A secret with a NUL and junk after it is not the secret. */
Test(faults, secret_compared_whole, .timeout = 60)
{
	struct tc_peer t;
	int fd;

	cr_assert_eq(tc_peer_start(&t, SHM " --kvt-secret s3cret"), 0);
	fd = ctl_dial(t.addr);
	cr_assert_eq(ctl_hello(fd, "s3cret\0junk", 11), KVT_W_REFUSE,
		     "a secret followed by NUL and junk was accepted");
	close(fd);
	fd = ctl_dial(t.addr);
	cr_assert_eq(ctl_hello(fd, "s3cre", 5), KVT_W_REFUSE);
	close(fd);
	fd = ctl_dial(t.addr);
	cr_assert_eq(ctl_hello(fd, "s3cret", 6), KVT_W_WELCOME);
	close(fd);
	tc_peer_stop(&t);
}

/* PINGs by the megabyte, PONGs never read: the target's memory stays. */
Test(faults, pings_never_read, .timeout = 120)
{
	struct kvt_buf b = { 0 }, many = { 0 };
	struct tc_peer t;
	long before, after;
	size_t sent = 0;
	int fd, buf = 4096;

	cr_assert_eq(tc_peer_start(&t, SHM), 0);
	fd = ctl_dial(t.addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	cr_assert_eq(ctl_hello(fd, NULL, 0), KVT_W_WELCOME);
	kvt_wire_begin(&b, KVT_W_PING);
	kvt_wire_end(&b);
	while (many.len < (1u << 20))
		kvt_buf_put(&many, b.data, b.len);
	before = rss_kib(t.pid);
	while (sent < (48u << 20)) {
		cr_assert_eq(send(fd, many.data, many.len, MSG_NOSIGNAL),
			     (ssize_t)many.len, "the target stopped reading");
		sent += many.len;
	}
	usleep(300000);
	after = rss_kib(t.pid);
	cr_log_info("48 MiB of PINGs: target RSS %ld -> %ld KiB", before, after);
	cr_assert_lt(after - before, 16 * 1024, "the target grew by %ld KiB",
		     after - before);
	close(fd);
	kvt_buf_free(&b);
	kvt_buf_free(&many);
	tc_peer_stop(&t);
}

/* After the handshake a session announces a 16 MiB frame: refused at the
 * header, not buffered. */
Test(faults, huge_frame_refused, .timeout = 60)
{
	uint8_t hdr[KVT_WIRE_HDR], junk[65536] = { 0 };
	struct kvt_buf b = { 0 };
	struct tc_peer t;
	int fd;

	cr_assert_eq(tc_peer_start(&t, SHM), 0);
	fd = ctl_dial(t.addr);
	cr_assert_eq(ctl_hello(fd, NULL, 0), KVT_W_WELCOME);
	kvt_wire_begin(&b, KVT_W_PORT_MSG);
	kvt_wire_end(&b);
	memcpy(hdr, b.data, sizeof(hdr));
	{
		uint32_t len = rte_cpu_to_le_32((16u << 20) - 1);

		memcpy(hdr + 8, &len, 4);
	}
	cr_assert_eq(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
	send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
	cr_assert(closed_within(fd, 3000000), "a 16 MiB frame was buffered");
	close(fd);
	kvt_buf_free(&b);
	tc_peer_stop(&t);
}

/* A frame that trickles in a byte at a time: the session goes within
 * about the peer timeout (1 s), though bytes keep coming. */
Test(faults, trickling_session_closed, .timeout = 60)
{
	struct kvt_buf b = { 0 };
	struct tc_peer t;
	uint64_t t0;
	size_t i;
	int fd, gone = 0;

	cr_assert_eq(tc_peer_start(&t, SHM), 0);
	fd = ctl_dial(t.addr);
	cr_assert_eq(ctl_hello(fd, NULL, 0), KVT_W_WELCOME);
	kvt_wire_begin(&b, KVT_W_PORT_MSG);
	kvt_buf_put(&b, NULL, 1000);
	kvt_wire_end(&b);
	t0 = tc_now_us();
	for (i = 0; i < b.len && !gone; i++) {
		/* A send that fails finds the session closed too. */
		if (send(fd, b.data + i, 1, MSG_NOSIGNAL) != 1)
			gone = 1;
		else
			gone = closed_within(fd, 100000);
	}
	cr_assert(gone, "a session trickling one byte per 100 ms stayed %.1f s",
		  (double)(tc_now_us() - t0) / 1e6);
	cr_assert_lt(tc_now_us() - t0, 3500000);
	close(fd);
	kvt_buf_free(&b);
	tc_peer_stop(&t);
}

/* A tcp data connection trickling its hello: gone within the 5 s hello
 * limit, however slowly the bytes come. */
Test(faults, trickling_data_hello_closed, .timeout = 60)
{
	struct tc_peer t;
	struct kvt_buf b = { 0 };
	struct kvt_wire_hello *w = malloc(sizeof(*w));
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct tcp_ep ep;
	uint64_t t0;
	unsigned int i;
	int fd, cfd, gone = 0;

	cr_assert_eq(tc_peer_start(&t, TCP), 0);
	/* The data port, from the WELCOME. */
	cfd = ctl_dial(t.addr);
	cr_assert_eq(ctl_hello_buf(cfd, NULL, 0, &b), KVT_W_WELCOME);
	cr_assert_eq(kvt_wire_decode_hello(b.data + KVT_WIRE_HDR,
					   b.len - KVT_WIRE_HDR, w), 0);
	for (i = 0; i < w->neps; i++)
		if (strcmp(w->eps[i].pmd, "tcp") == 0 && w->eps[i].ep.len == sizeof(ep))
			memcpy(&ep, w->eps[i].ep.blob, sizeof(ep));
	sa.sin_addr.s_addr = ep.ip;
	sa.sin_port = ep.port;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	t0 = tc_now_us();
	for (i = 0; i < sizeof(struct tcp_hello) - 1 && !gone; i++) {
		if (send(fd, "K", 1, MSG_NOSIGNAL) != 1)
			break;
		gone = closed_within(fd, 400000);
	}
	cr_assert(gone || closed_within(fd, 2000000),
		  "a data connection trickling its hello stayed %.1f s",
		  (double)(tc_now_us() - t0) / 1e6);
	cr_assert_lt(tc_now_us() - t0, 7000000);
	close(fd);
	close(cfd);
	kvt_buf_free(&b);
	free(w);
	tc_peer_stop(&t);
}

/* An open /proc stat file of pid's thread named comm (an fd, so it can
 * be read when this process has no descriptor left to open). */
static int
thread_stat_fd(pid_t pid, const char *comm)
{
	char path[320], name[32] = "";
	int tid = -1, fd;
	struct dirent *e;
	FILE *f;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	cr_assert_not_null(d);
	while (tid < 0 && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid,
			 e->d_name);
		f = fopen(path, "r");
		if (f != NULL && fgets(name, sizeof(name), f) != NULL &&
		    strncmp(name, comm, strlen(comm)) == 0)
			tid = atoi(e->d_name);
		if (f != NULL)
			fclose(f);
	}
	closedir(d);
	cr_assert_geq(tid, 0, "no thread %s", comm);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, tid);
	f = fopen(path, "re");
	cr_assert_not_null(f);
	fd = dup(fileno(f));
	fclose(f);
	cr_assert_geq(fd, 0);
	return fd;
}

static double
cpu_secs(int stat_fd)
{
	unsigned long ut = 0, st = 0;
	char buf[1024];
	ssize_t n = pread(stat_fd, buf, sizeof(buf) - 1, 0);
	const char *p;

	cr_assert_gt(n, 0);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	cr_assert_not_null(p);
	cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			    &ut, &st), 2);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Descriptors of pid, through an open /proc/PID/fd directory. */
static unsigned int
fd_count(DIR *d)
{
	unsigned int n = 0;
	struct dirent *e;

	rewinddir(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	return n;
}

/* Out of file descriptors (its limit lowered to 40 while it runs): the
 * target waits for them, it does not spin. */
Test(faults, out_of_fds_no_spin, .timeout = 60)
{
	/* Below what strangers from one address may hold (32), so the
	 * descriptors run out before that cap. */
	struct rlimit low = { 40, 40 };
	struct sockaddr_in sa;
	struct tc_peer t;
	char path[64];
	int fds[80], sfd;
	unsigned int i, n;
	double c0, c1;
	DIR *d;

	if (tc_tsan_peers())
		cr_skip_test("a ThreadSanitizer peer needs descriptors of its own (its report files) and stops at this limit");
	cr_assert_eq(tc_peer_start(&t, SHM), 0);
	cr_assert_eq(prlimit(t.pid, RLIMIT_NOFILE, &low, NULL), 0);
	cr_assert_eq(kvt_parse_addr(t.addr, &sa), 0);
	sfd = thread_stat_fd(t.pid, "kvt-ctl");
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)t.pid);
	d = opendir(path);
	cr_assert_not_null(d);
	for (n = 0; n < RTE_DIM(fds); n++) {
		fds[n] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		cr_assert_geq(fds[n], 0);
		cr_assert_eq(connect(fds[n], (struct sockaddr *)&sa, sizeof(sa)), 0);
	}
	usleep(300000);
	/* At its limit (a descriptor numbered past 40 from before the limit
	 * came may leave a hole below it). */
	cr_assert_geq(fd_count(d), 36, "the target has %u descriptors", fd_count(d));
	c0 = cpu_secs(sfd);
	usleep(2000000);
	c1 = cpu_secs(sfd);
	cr_log_info("out of fds: the control thread used %.0f %% of a cpu",
		    (c1 - c0) * 50);
	cr_assert_lt(c1 - c0, 0.2, "the control thread used %.0f %% of a cpu",
		     (c1 - c0) * 50);
	for (i = 0; i < n; i++)
		close(fds[i]);
	closedir(d);
	close(sfd);
	/* It accepts again once descriptors are free. */
	{
		int fd = ctl_dial(t.addr);

		cr_assert_eq(ctl_hello(fd, NULL, 0), KVT_W_WELCOME);
		close(fd);
	}
	tc_peer_stop(&t);
}

/* ---- leave nothing behind ---- */

static int
dir_exists(const char *fmt, long pid)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof(path), fmt, pid);
	return stat(path, &st) == 0;
}

/*
 * An engine's EAL runtime directory goes at exit; directories of kvt
 * processes that died without cleaning up (killed) go when the next
 * engine starts; those of live processes stay.
 */
Test(faults, runtime_dirs_reaped, .timeout = 60)
{
	struct tc_peer t;
	pid_t dead, live;
	char path[128];
	FILE *f;

	if (geteuid() != 0)
		cr_skip_test("EAL's runtime directory is under /var/run only for root");
	dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	live = fork();
	if (live == 0) {
		pause();
		_exit(0);
	}
	mkdir("/var/run/dpdk", 0700);
	snprintf(path, sizeof(path), "/var/run/dpdk/kvt-%d", (int)dead);
	cr_assert_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "/var/run/dpdk/kvt-%d/dpdk_telemetry.v2", (int)dead);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fclose(f);
	snprintf(path, sizeof(path), "/var/run/dpdk/kvt-%d", (int)live);
	cr_assert_eq(mkdir(path, 0700), 0);

	cr_assert_eq(tc_peer_start(&t, SHM), 0);
	cr_assert(dir_exists("/var/run/dpdk/kvt-%ld", t.pid), "no runtime dir for the engine");
	cr_assert_not(dir_exists("/var/run/dpdk/kvt-%ld", dead),
		      "a dead process's runtime dir was left");
	cr_assert(dir_exists("/var/run/dpdk/kvt-%ld", live),
		  "a live process's runtime dir was removed");
	{
		long pid = t.pid;

		tc_peer_stop(&t);
		cr_assert_not(dir_exists("/var/run/dpdk/kvt-%ld", pid),
			      "the engine left its runtime dir at exit");
	}
	rmdir(path);
	kill(live, SIGKILL);
	waitpid(live, NULL, 0);
}
