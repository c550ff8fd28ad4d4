/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The TCP transport on loopback: data, fences and notifications between
 * processes, a hostile peer that holds a valid token yet sends
 * out-of-range and truncated frames, and the target's turn over its
 * sockets (short, the urgent lane first).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <sys/wait.h>

#include <criterion/criterion.h>
#include <rte_errno.h>

#include "kvt.h"
#include "kvt_private.h"
#include "test_assert.h"
#include "test_common.h"
#include "../pmd/tcp/tcp_wire.h"

#define OPTS "--kvt-pmd tcp --kvt-nic lo"

Test(tcp, data_fence_notify, .timeout = 120)
{
	static const uint64_t sizes[] = { 1, 4095, 65536, MiB + 7, 32 * MiB };
	struct kvt_port_info pi;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src;
	uint64_t base, ft;

	cr_assert_geq(tc_engine_init(OPTS), 0);
	cr_assert_eq(kvt_port_count(), 1);
	cr_assert_eq(kvt_port_info(0, &pi), 0);
	cr_assert_str_eq(pi.name, "tcp:lo");
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	src = malloc(32 * MiB + 64);
	cr_assert_not_null(kvt_mem_register(src, 32 * MiB + 64, NULL, 0));
	base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", 32 * MiB + 64);
	ft = tc_peer_u64(&t, 0, "fence 4");
	p = tc_open_peer(&t);
	tc_sizes_both_ways(&t, p, src, base, sizes,
			   sizeof(sizes) / sizeof(sizes[0]), 30000000);
	tc_fence_then_note(&t, p, src, base, MiB, ft);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

/* A peer killed mid-transfer over TCP: the sockets break, no hang. */
Test(tcp, peer_killed, .timeout = 120)
{
	const unsigned int n = 512;
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(MiB);
	uint64_t base, t0;
	unsigned int i, lost = 0;
	int st;

	base = tc_pair_start(&t, OPTS, src, MiB, (uint64_t)n * MiB, &p);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
			.remote = base + (uint64_t)i * MiB, .len = MiB };
	b = kvt_batch_alloc(n);
	cr_assert_eq(kvt_submit(b, p, x, n, NULL), 0);
	kill(t.pid, SIGKILL);
	t0 = tc_now_us();
	cr_assert_eq(kvt_wait(b, 5000000), 0, "hung after the peer died");
	for (i = 0; i < n; i++) {
		st = kvt_status(b, i);
		cr_assert(st == 0 || st == -ECONNRESET || st == -ETIMEDOUT,
			  "xfer %u: %d", i, st);
		lost += st != 0;
	}
	cr_log_info("settled %.2f s after the kill, %u of %u failed",
		    (double)(tc_now_us() - t0) / 1e6, lost, n);
	/* 512 MiB over loopback tcp takes far longer than the kill. */
	cr_assert_gt(lost, 0, "every request to a killed peer succeeded");
	/* The control thread sees the loss too, shortly after the data
	 * sockets broke. */
	while (kvt_peer_state(p) == 0 && tc_now_us() - t0 < 2000000)
		usleep(1000);
	cr_assert_eq(kvt_peer_state(p), -ECONNRESET);
	kvt_batch_free(b);
	kvt_peer_close(p);
	tc_peer_kill(&t);
	kvt_fini();
	free(src);
	free(x);
}

/* ---- a hostile peer speaking the protocols by hand ---- */

static int
dial(const char *ip, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	inet_pton(AF_INET, ip, &sa.sin_addr);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void
xsend(int fd, const void *p, size_t n)
{
	cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static int
xrecv(int fd, void *p, size_t n)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	size_t off = 0;
	ssize_t r;

	while (off < n) {
		if (poll(&pfd, 1, 5000) <= 0)
			return -ETIMEDOUT;
		r = recv(fd, (uint8_t *)p + off, n - off, 0);
		if (r <= 0)
			return -ECONNRESET;
		off += (size_t)r;
	}
	return 0;
}

/*
 * The control handshake by hand: HELLO, WELCOME (find the tcp endpoint),
 * CONN_REQ for it, CONN_REP with the data-connection token.
 */
static void
handshake(const char *ctl, uint8_t token[16], uint16_t *data_port)
{
	struct sockaddr_in sa;
	struct kvt_wire_hello *w = malloc(sizeof(*w));
	struct kvt_buf b = { 0 };
	uint8_t id[32] = { 9 };
	const uint8_t *v;
	struct kvt_tlv t;
	uint32_t l;
	uint16_t tag;
	unsigned int i;
	int fd, ep = -1;

	cr_assert_eq(kvt_parse_addr(ctl, &sa), 0);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	kvt_wire_begin(&b, KVT_W_HELLO);
	kvt_wire_put_str(&b, KVT_T_NAME, "hostile");
	kvt_wire_put(&b, KVT_T_HOST_ID, id, sizeof(id));
	kvt_wire_put_u64(&b, KVT_T_PID, 1);
	kvt_wire_end(&b);
	xsend(fd, b.data, b.len);
	cr_assert_eq(kvt_wire_recv(fd, &b, KVT_WIRE_MAX, kvt_now_us() + 5000000),
		     KVT_W_WELCOME);
	cr_assert_eq(kvt_wire_decode_hello(b.data + KVT_WIRE_HDR,
					   b.len - KVT_WIRE_HDR, w), 0);
	for (i = 0; i < w->neps; i++)
		if (strcmp(w->eps[i].pmd, "tcp") == 0)
			ep = (int)i;
	cr_assert_geq(ep, 0, "no tcp endpoint");
	memcpy(data_port, w->eps[ep].ep.blob + 4, 2);
	*data_port = ntohs(*data_port);
	kvt_wire_begin(&b, KVT_W_CONN_REQ);
	kvt_wire_put_u64(&b, KVT_T_PORT_ID, w->eps[ep].ep.port_id);
	kvt_wire_put(&b, KVT_T_BLOB, NULL, 0);
	kvt_wire_end(&b);
	xsend(fd, b.data, b.len);
	cr_assert_eq(kvt_wire_recv(fd, &b, KVT_WIRE_MAX, kvt_now_us() + 5000000),
		     KVT_W_CONN_REP);
	t.p = b.data + KVT_WIRE_HDR;
	t.left = b.len - KVT_WIRE_HDR;
	while (kvt_tlv_next(&t, &tag, &v, &l) > 0)
		if (tag == KVT_T_BLOB && l == 16)
			memcpy(token, v, 16);
	kvt_buf_free(&b);
	free(w);
	/* The control connection stays open (the session lives with it). */
}

static int
data_conn(uint16_t port, const uint8_t token[16])
{
	struct tcp_hello h = { TCP_HELLO_MAGIC, TCP_HELLO_VERSION, { 0 } };
	int fd = dial("127.0.0.1", port), one = 1;

	/* A frame's payload leaves behind its header at once. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	memcpy(h.token, token, 16);
	xsend(fd, &h, sizeof(h));
	return fd;
}

static int
closed(int fd)
{
	char c;

	return xrecv(fd, &c, 1) == -ECONNRESET;
}

Test(tcp, hostile_frames_refused, .timeout = 120)
{
	uint8_t token[16] = { 0 }, bad[16] = { 1, 2, 3 }, payload[4096] = { 7 };
	struct tcp_hdr f, r;
	struct tc_peer t;
	uint16_t dport;
	uint64_t base;
	int fd;

	cr_assert_geq(tc_engine_init(OPTS), 0);
	cr_assert_eq(tc_peer_start(&t, OPTS), 0);
	base = tc_peer_u64(&t, 0, "alloc 0 65536 rw");
	handshake(t.addr, token, &dport);

	/* A token nobody issued: hung up on. */
	fd = data_conn(dport, bad);
	cr_assert(closed(fd), "a bad token was accepted");
	close(fd);

	fd = data_conn(dport, token);
	/* A write outside every exported region: its payload is read and
	 * dropped, the answer says ERANGE, the connection goes on. */
	memset(&f, 0, sizeof(f));
	f.type = F_WRITE;
	f.addr = base + 65536 - 100;
	f.len = sizeof(payload);
	xsend(fd, &f, sizeof(f));
	xsend(fd, payload, sizeof(payload));
	cr_assert_eq(xrecv(fd, &r, sizeof(r)), 0);
	cr_assert_eq(r.type, F_WRITE_ACK);
	cr_assert_eq(r.status, -ERANGE);
	/* A read of memory nobody exported. */
	memset(&f, 0, sizeof(f));
	f.type = F_READ;
	f.addr = 0x1000;
	f.aux = 4096;
	xsend(fd, &f, sizeof(f));
	cr_assert_eq(xrecv(fd, &r, sizeof(r)), 0);
	cr_assert_eq(r.type, F_READ_DATA);
	cr_assert_eq(r.status, -ERANGE);
	cr_assert_eq(r.len, 0);
	/* A fence into a data region. */
	memset(&f, 0, sizeof(f));
	f.type = F_FENCE;
	f.addr = base;
	f.aux = 5;
	xsend(fd, &f, sizeof(f));
	cr_assert_eq(xrecv(fd, &r, sizeof(r)), 0);
	cr_assert_eq(r.type, F_FENCE_ACK);
	cr_assert_eq(r.status, -ERANGE);
	/* A legitimate write on the same connection still works. */
	memset(&f, 0, sizeof(f));
	f.type = F_WRITE;
	f.addr = base;
	f.len = sizeof(payload);
	xsend(fd, &f, sizeof(f));
	xsend(fd, payload, sizeof(payload));
	cr_assert_eq(xrecv(fd, &r, sizeof(r)), 0);
	cr_assert_eq(r.status, 0);
	cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 4096"), tc_hash(payload, 4096));
	/* Garbage type, then a truncated header: hung up on. */
	memset(&f, 0, sizeof(f));
	f.type = 77;
	xsend(fd, &f, sizeof(f));
	cr_assert(closed(fd), "a frame of unknown type was accepted");
	close(fd);
	fd = data_conn(dport, token);
	xsend(fd, &f, 5);
	close(fd);
	/* The target still serves a real engine. */
	{
		struct kvt_peer *p = tc_open_peer(&t);
		static uint8_t src[4096];

		cr_assert_not_null(kvt_mem_register(src, sizeof(src), NULL, 0));
		tc_fill(src, sizeof(src), 3);
		cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base + 4096, 4096, NULL, 30000000), 0);
		cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 4096 4096"), tc_hash(src, 4096));
		kvt_peer_close(p);
	}
	tc_peer_stop(&t);
	kvt_fini();
}

/*
 * The application stops with a peer still busy: the batch is freed in
 * flight, closing the peer is refused, and kvt_fini() tears down the
 * connection after its sockets (the memory checkers watch this one).
 */
Test(tcp, fini_with_peer_in_flight, .timeout = 60)
{
	const unsigned int n = 64;
	struct kvt_xfer x[64];
	struct kvt_batch *b;
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *src = malloc(MiB);
	uint64_t base;
	unsigned int i;

	base = tc_pair_start(&t, OPTS, src, MiB, (uint64_t)n * MiB, &p);
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
					  .remote = base + (uint64_t)i * MiB,
					  .len = MiB };
	b = kvt_batch_alloc(n);
	cr_assert_geq(kvt_submit(b, p, x, n, NULL), 0);
	cr_assert_eq(kvt_batch_free(b), 0);
	cr_assert_eq(kvt_peer_close(p), -EBUSY);
	cr_assert_eq(kvt_fini(), 0);
	tc_peer_stop(&t);
	free(src);
}

/*
 * A target's turn over its sockets is short, and the urgent lane goes
 * first.  This engine is the target (its tcp slices at 16 KiB, so a turn
 * takes 4 x 16 KiB at most from the data sockets); a client by hand fills
 * two data sockets with a 32 MiB write each, and puts a 4 KiB urgent write
 * on its lane, all while the lcore is held.  The lcore then polls until
 * the urgent write has landed: that must take one poll, with no more than
 * a turn of the data in place.  A poll that drains every ready socket
 * (each buffer holds hundreds of KiB here) fails it.
 */
#define LANE_SLICE_KB 16
#define LANE_BIG (32 * MiB)
#define LANE_SMALL 4096

struct lane_probe {
	const volatile uint8_t *urgent_end;	/* the urgent write's last byte */
	const uint8_t *big[2];
	uint32_t entered, go;
	unsigned int polls;
	size_t landed;		/* data bytes in place once it landed */
};

/* On the lcore: wait for the sockets to fill, then poll as the lcore
 * would until the urgent write is in place. */
static int
lane_poll(struct kvt_port *port, void *arg)
{
	struct lane_probe *pr = arg;
	unsigned int i, waited;
	size_t n;

	__atomic_store_n(&pr->entered, 1, __ATOMIC_RELEASE);
	for (waited = 0; !__atomic_load_n(&pr->go, __ATOMIC_ACQUIRE) &&
	     waited < 30000; waited++)
		usleep(1000);
	while (*pr->urgent_end == 0 && pr->polls < 100000) {
		port->pmd->ops->poll(port);
		pr->polls++;
	}
	for (i = 0; i < 2; i++) {
		for (n = 0; n < LANE_BIG && pr->big[i][n] != 0; n++)
			;
		pr->landed += n;
	}
	return 0;
}

static void *
lane_holder(void *arg)
{
	return (void *)(intptr_t)kvt_port_call(kvt_port_get(0), lane_poll, arg,
					       60000);
}

/* A write frame header to addr of len bytes, urgent or not. */
static void
write_hdr(struct tcp_hdr *f, const void *addr, uint32_t len, int urgent)
{
	memset(f, 0, sizeof(*f));
	f->type = F_WRITE;
	f->flags = urgent ? TCP_F_URGENT : 0;
	f->addr = (uint64_t)(uintptr_t)addr;
	f->len = len;
}

/* A whole small write on fd, answered. */
static void
small_write(int fd, uint8_t *dst, const uint8_t *payload, int urgent)
{
	struct tcp_hdr f, r;

	write_hdr(&f, dst, LANE_SMALL, urgent);
	xsend(fd, &f, sizeof(f));
	xsend(fd, payload, LANE_SMALL);
	cr_assert_eq(xrecv(fd, &r, sizeof(r)), 0);
	cr_assert_eq(r.status, 0);
}

/* Until the peer's kernel acknowledged all we sent on fd (at most 5 s). */
static void
acked(int fd)
{
	int left, i;

	for (i = 0; i < 5000; i++) {
		if (ioctl(fd, SIOCOUTQ, &left) != 0 || left == 0)
			break;
		usleep(1000);
	}
}

/* Send on fd, without blocking, until its buffers are full; @return the
 * payload bytes sent. */
static size_t
fill(int fd, const uint8_t *payload, size_t max)
{
	size_t off = 0;
	ssize_t n;

	while (off < max) {
		n = send(fd, payload + off, RTE_MIN(max - off, (size_t)65536),
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	return off;
}

Test(tcp, urgent_lane_served_first, .timeout = 120)
{
	struct lane_probe pr = { 0 };
	uint8_t token[16], *dst, *payload;
	size_t len = 2 * LANE_BIG + 2 * LANE_SMALL, sent[2];
	char ctl[64];
	struct tcp_hdr f;
	pthread_t holder;
	uint16_t dport;
	int fd[3], i;
	void *ret;

	cr_assert_geq(tc_engine_init("--kvt-pmd tcp,slice_kb="
				     RTE_STR(LANE_SLICE_KB) " --kvt-nic lo"), 0);
	dst = calloc(1, len);
	payload = malloc(LANE_BIG);
	cr_assert(dst != NULL && payload != NULL);
	memset(payload, 0x5a, LANE_BIG);
	cr_assert_not_null(kvt_mem_register(dst, len, NULL, KVT_MEM_REMOTE_WRITE));
	cr_assert_gt(kvt_listen_addr(ctl, sizeof(ctl)), 0);
	handshake(ctl, token, &dport);
	/* Two data sockets and a lane, each known to the target. */
	for (i = 0; i < 3; i++) {
		fd[i] = data_conn(dport, token);
		small_write(fd[i], dst + 2 * LANE_BIG, payload, i == 2);
	}
	memset(dst + 2 * LANE_BIG, 0, LANE_SMALL);
	pr.urgent_end = dst + 2 * LANE_BIG + LANE_SMALL - 1;
	pr.big[0] = dst;
	pr.big[1] = dst + LANE_BIG;
	cr_assert_eq(pthread_create(&holder, NULL, lane_holder, &pr), 0);
	while (!__atomic_load_n(&pr.entered, __ATOMIC_ACQUIRE))
		usleep(100);
	for (i = 0; i < 2; i++) {
		write_hdr(&f, pr.big[i], LANE_BIG, 0);
		xsend(fd[i], &f, sizeof(f));
		sent[i] = fill(fd[i], payload, LANE_BIG);
	}
	write_hdr(&f, dst + 2 * LANE_BIG, LANE_SMALL, 1);
	xsend(fd[2], &f, sizeof(f));
	xsend(fd[2], payload, LANE_SMALL);
	/* The urgent write waits in the target's socket, not in ours. */
	acked(fd[2]);
	__atomic_store_n(&pr.go, 1, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_join(holder, &ret), 0);
	cr_assert_eq((intptr_t)ret, 0);
	cr_log_info("buffered %zu + %zu bytes of data; the urgent write landed in %u poll(s) with %zu in place",
		    sent[0], sent[1], pr.polls, pr.landed);
	cr_assert_gt(sent[0] + sent[1], 8 * (LANE_SLICE_KB << 10),
		     "the data sockets took only %zu bytes", sent[0] + sent[1]);
	cr_assert_eq(*pr.urgent_end, 0x5a, "the urgent write did not land");
	cr_assert_eq(pr.polls, 1, "the urgent write took %u polls", pr.polls);
	cr_assert_leq(pr.landed, 4 * (LANE_SLICE_KB << 10),
		      "one poll took %zu bytes of data", pr.landed);
	for (i = 0; i < 3; i++)
		close(fd[i]);
	kvt_fini();
	free(payload);
	free(dst);
}

static double
thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * kvt_wait() and kvt_wait_one() leave the cpu to the lcores: on a long
 * transfer, striped over two ports (the waiter feeds the slices the
 * ports' caps held back; each request settles on its own and wakes
 * kvt_wait_one()) and in order over one, the waiting thread sleeps until
 * an lcore wakes it or the ports want more.  It used every cycle the scheduler gave it
 * (sched_yield) for the first 20 ms of every wait; many processes
 * waiting on one host then took the cpus from the lcores.
 */
Test(tcp, waiter_leaves_the_cpu, .timeout = 120)
{
	static const char *const opts[] = {
		"--kvt-pmd tcp,ports=2 --kvt-nic lo", OPTS,
	};
	const uint64_t len = 64 * MiB;
	struct kvt_xfer x[16];
	struct kvt_batch *b;
	struct kvt_peer *p;
	struct tc_peer t;
	double cpu, wall;
	uint8_t *src;
	uint64_t base, t0;
	unsigned int i, k, round;

	for (k = 0; k < 2; k++) {
		cr_assert_geq(tc_engine_init(opts[k]), 0);
		cr_assert_eq(tc_peer_start(&t, opts[k]), 0);
		src = malloc(len);
		cr_assert_not_null(kvt_mem_register(src, len, NULL, 0));
		base = tc_peer_u64(&t, 0, "alloc 0 %" PRIu64 " rw", len);
		p = tc_open_peer(&t);
		b = kvt_batch_alloc(16);
		cpu = wall = 0;
		for (round = 0; round < 4; round++) {
			tc_fill(src, len, round + 1);
			for (i = 0; i < 16; i++)
				x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE,
					.local = src + i * (len / 16),
					.remote = base + i * (len / 16),
					.len = len / 16 };
			t0 = tc_now_us();
			cpu -= thread_cpu_s();
			cr_assert_eq(kvt_submit(b, p, x, 16, NULL), 0);
			/* Half the rounds note each request as it settles. */
			for (i = 0; round % 2 == 1 && i < 16; i++) {
				cr_assert_eq(kvt_wait_one(b, i, 30000000), 0);
				cr_assert_neq(kvt_status(b, i), -EINPROGRESS);
			}
			cr_assert_eq(kvt_wait(b, 30000000), 0);
			cpu += thread_cpu_s();
			wall += (double)(tc_now_us() - t0) / 1e6;
			for (i = 0; i < 16; i++)
				cr_assert_eq(kvt_status(b, i), 0);
			cr_assert_eq(kvt_wait_one(b, 16, 1000), -EINVAL,
				     "a request never submitted");
			cr_assert_eq(kvt_batch_reset(b), 0);
			cr_assert_eq(tc_peer_u64(&t, 16, "sum 0 0 %" PRIu64, len),
				     tc_hash(src, len), "bytes damaged");
		}
		cr_log_info("%s: the waiting thread used %.0f ms of cpu in %.0f ms",
			    opts[k], cpu * 1e3, wall * 1e3);
		cr_assert_lt(cpu, 0.2 * wall, "%s: the waiter used %.0f %% of a cpu",
			     opts[k], 100 * cpu / wall);
		kvt_batch_free(b);
		kvt_peer_close(p);
		tc_peer_stop(&t);
		kvt_fini();
		free(src);
	}
}
