/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The handshake under hostile input: random and truncated frames, bad
 * headers, malformed fields, wrong secrets.  Each is refused; the listener
 * keeps serving real peers.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <criterion/criterion.h>
#include <rte_errno.h>

#include "kvt.h"
#include "kvt_private.h"
#include "test_common.h"

static int
dial(const char *addr)
{
	struct sockaddr_in sa;
	int fd;

	cr_assert_eq(kvt_parse_addr(addr, &sa), 0);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/*
 * After sending junk, the server must close the connection (possibly
 * after a REFUSE frame) within its 5 s handshake limit.  @return 1 if
 * it did.
 */
static int
closed_by_server(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t until = tc_now_us() + 8000000;
	char buf[4096];
	ssize_t n;

	while (tc_now_us() < until) {
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return 1;
	}
	return 0;
}

static void
send_all(int fd, const void *p, size_t len)
{
	cr_assert_eq(send(fd, p, len, MSG_NOSIGNAL), (ssize_t)len);
}

static void
hdr(uint8_t *b, uint32_t magic, uint16_t ver, uint16_t type, uint32_t len)
{
	memcpy(b, &magic, 4);
	memcpy(b + 4, &ver, 2);
	memcpy(b + 6, &type, 2);
	memcpy(b + 8, &len, 4);
}

/* A real engine can still open the peer and move bytes. */
static void
still_serves(struct tc_peer *t)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .len = 4096 };
	static uint8_t src[4096];
	struct kvt_batch *b;
	struct kvt_peer *p;
	char buf[64];

	cr_assert_eq(waitpid(t->pid, NULL, WNOHANG), 0, "the peer died");
	cr_assert_eq(tc_peer_cmd(t, buf, sizeof(buf), "alloc 5 4096 w"), 0);
	x.remote = strtoull(buf, NULL, 0);
	x.local = src;
	cr_assert_not_null(kvt_mem_register(src, sizeof(src), NULL, 0));
	p = kvt_peer_open(t->addr, 5000);
	cr_assert_not_null(p, "open after junk: %s", rte_strerror(rte_errno));
	b = kvt_batch_alloc(1);
	tc_fill(src, sizeof(src), 9);
	cr_assert_eq(kvt_submit(b, p, &x, 1, NULL), 0);
	cr_assert_eq(kvt_wait(b, 5000000), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(tc_peer_cmd(t, buf, sizeof(buf), "sum 5 0 4096"), 0);
	cr_assert_eq(strtoull(buf, NULL, 16), tc_hash(src, sizeof(src)));
	kvt_batch_free(b);
	kvt_peer_close(p);
}

Test(handshake, hostile_frames, .timeout = 120)
{
	uint8_t frame[256], junk[65536];
	struct tc_peer t;
	unsigned int i;
	int fd;

	cr_assert_geq(tc_engine_init("--kvt-pmd shm"), 0);
	cr_assert_eq(tc_peer_start(&t, "--kvt-pmd shm"), 0);
	srand(1234);

	/* Random bytes. */
	for (i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)rand();
	fd = dial(t.addr);
	send_all(fd, junk, sizeof(junk));
	cr_assert(closed_by_server(fd), "random bytes: still open");
	close(fd);

	/* Truncated header, then silence: the handshake timer ends it. */
	fd = dial(t.addr);
	hdr(frame, KVT_WIRE_MAGIC, KVT_WIRE_VERSION, KVT_W_HELLO, 10);
	send_all(fd, frame, 5);
	cr_assert(closed_by_server(fd), "truncated header: still open");
	close(fd);

	/* Wrong version; unknown type; a length beyond the limit. */
	fd = dial(t.addr);
	hdr(frame, KVT_WIRE_MAGIC, 99, KVT_W_HELLO, 0);
	send_all(fd, frame, 12);
	cr_assert(closed_by_server(fd), "bad version: still open");
	close(fd);
	fd = dial(t.addr);
	hdr(frame, KVT_WIRE_MAGIC, KVT_WIRE_VERSION, 77, 0);
	send_all(fd, frame, 12);
	cr_assert(closed_by_server(fd), "bad type: still open");
	close(fd);
	fd = dial(t.addr);
	hdr(frame, KVT_WIRE_MAGIC, KVT_WIRE_VERSION, KVT_W_HELLO, 1u << 30);
	send_all(fd, frame, 12);
	cr_assert(closed_by_server(fd), "huge length: still open");
	close(fd);

	/* A HELLO whose field claims more bytes than the frame holds. */
	fd = dial(t.addr);
	hdr(frame, KVT_WIRE_MAGIC, KVT_WIRE_VERSION, KVT_W_HELLO, 10);
	frame[12] = KVT_T_NAME;
	frame[13] = 0;
	frame[14] = 200;
	memset(frame + 15, 0, 7);
	send_all(fd, frame, 22);
	cr_assert(closed_by_server(fd), "overlong field: still open");
	close(fd);

	/* A well-formed HELLO lacking required fields. */
	fd = dial(t.addr);
	hdr(frame, KVT_WIRE_MAGIC, KVT_WIRE_VERSION, KVT_W_HELLO, 0);
	send_all(fd, frame, 12);
	cr_assert(closed_by_server(fd), "empty HELLO: still open");
	close(fd);

	/* Data-path frames before any HELLO. */
	fd = dial(t.addr);
	hdr(frame, KVT_WIRE_MAGIC, KVT_WIRE_VERSION, KVT_W_CONN_REQ, 0);
	send_all(fd, frame, 12);
	cr_assert(closed_by_server(fd), "CONN_REQ before HELLO: still open");
	close(fd);

	still_serves(&t);
	tc_peer_stop(&t);
	kvt_fini();
}

/* Truncations of a valid HELLO, each cut at every length. */
Test(handshake, every_truncation_refused, .timeout = 120)
{
	struct kvt_wire_hello *h = malloc(sizeof(*h));
	struct kvt_buf b = { 0 };
	uint8_t id[32] = { 1 };
	size_t cut;

	cr_assert_eq(kvt_wire_begin(&b, KVT_W_HELLO), 0);
	kvt_wire_put_str(&b, KVT_T_NAME, "fuzz");
	kvt_wire_put(&b, KVT_T_HOST_ID, id, sizeof(id));
	kvt_wire_put_u64(&b, KVT_T_PID, 42);
	cr_assert_eq(kvt_wire_end(&b), 0);
	cr_assert_eq(kvt_wire_decode_hello(b.data + KVT_WIRE_HDR,
					   b.len - KVT_WIRE_HDR, h), 0);
	cr_assert_str_eq(h->name, "fuzz");
	for (cut = 0; cut < b.len - KVT_WIRE_HDR; cut++)
		cr_assert_lt(kvt_wire_decode_hello(b.data + KVT_WIRE_HDR, cut, h), 0,
			     "accepted a HELLO cut at %zu bytes", cut);
	kvt_buf_free(&b);
	free(h);
}

/* Is [p, p + n) inside [buf, buf + len)? */
static int
inside(const uint8_t *p, size_t n, const uint8_t *buf, size_t len)
{
	return p >= buf && n <= len && (size_t)(p - buf) <= len - n;
}

/*
 * Random payloads: each decoder either refuses (-EPROTO, nothing else)
 * or returns a result whose every string is terminated and every pointer
 * lies inside the input.
 */
Test(handshake, decoders_survive_random_input, .timeout = 60)
{
	struct kvt_wire_hello *h = malloc(sizeof(*h));
	struct kvt_wire_region r;
	uint8_t buf[512];
	unsigned int i, j, k, len, ok_hello = 0, ok_region = 0;
	int ret;

	srand(99);
	for (i = 0; i < 200000; i++) {
		len = (unsigned int)rand() % sizeof(buf);
		for (j = 0; j < len; j++)
			buf[j] = (uint8_t)(rand() % 4 == 0 ? rand() % 24 : rand());
		ret = kvt_wire_decode_hello(buf, len, h);
		cr_assert(ret == 0 || ret == -EPROTO, "hello decoder: %d", ret);
		if (ret == 0) {
			ok_hello++;
			cr_assert_lt(strnlen(h->name, sizeof(h->name)), sizeof(h->name));
			cr_assert_neq(h->name[0], '\0');
			cr_assert_leq(h->neps, KVT_WIRE_MAX_EPS);
			for (k = 0; k < h->neps; k++)
				cr_assert(inside(h->eps[k].ep.blob, h->eps[k].ep.len,
						 buf, len), "endpoint %u outside", k);
			if (h->regions != NULL)
				cr_assert(inside(h->regions, h->regions_len, buf, len));
		}
		ret = kvt_wire_decode_region(buf, len, &r);
		cr_assert(ret == 0 || ret == -EPROTO, "region decoder: %d", ret);
		if (ret == 0) {
			ok_region++;
			cr_assert_leq(r.nkeys, KVT_MAX_PORTS);
			for (k = 0; k < r.nkeys; k++)
				cr_assert(inside(r.keys[k].blob, r.keys[k].len, buf, len),
					  "key %u outside", k);
		}
	}
	cr_log_info("random input: %u HELLOs and %u regions decoded, the rest refused",
		    ok_hello, ok_region);
	free(h);
}

Test(handshake, secret, .timeout = 120)
{
	struct tc_peer good, bad, none;
	struct kvt_peer *p;

	cr_assert_geq(tc_engine_init("--kvt-pmd shm --kvt-secret s3cret"), 0);
	cr_assert_eq(tc_peer_start(&good, "--kvt-pmd shm --kvt-secret s3cret"), 0);
	cr_assert_eq(tc_peer_start(&bad, "--kvt-pmd shm --kvt-secret other"), 0);
	cr_assert_eq(tc_peer_start(&none, "--kvt-pmd shm"), 0);
	p = kvt_peer_open(good.addr, 5000);
	cr_assert_not_null(p);
	kvt_peer_close(p);
	cr_assert_null(kvt_peer_open(bad.addr, 5000));
	cr_assert_eq(rte_errno, EACCES);
	/* A peer that cannot prove the secret is not trusted either. */
	cr_assert_null(kvt_peer_open(none.addr, 5000));
	cr_assert_eq(rte_errno, EACCES);
	/* A refused peer keeps serving the peers that hold the secret. */
	cr_assert_neq(tc_peer_cmd(&bad, NULL, 0, "open %s", good.addr), 0);
	p = kvt_peer_open(good.addr, 5000);
	cr_assert_not_null(p);
	kvt_peer_close(p);
	tc_peer_stop(&good);
	tc_peer_stop(&bad);
	tc_peer_stop(&none);
	kvt_fini();
}

Test(handshake, open_errors, .timeout = 60)
{
	int fd;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	char addr[64];

	cr_assert_geq(tc_engine_init("--kvt-pmd shm"), 0);
	cr_assert_null(kvt_peer_open("no-port", 1000));
	cr_assert_eq(rte_errno, EINVAL);
	cr_assert_null(kvt_peer_open(NULL, 1000));
	cr_assert_eq(rte_errno, EINVAL);
	/* A port nobody listens on. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	close(fd);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));
	cr_assert_null(kvt_peer_open(addr, 1000));
	cr_assert_eq(rte_errno, ECONNREFUSED);
	/* Something that accepts but never answers: bounded by the timeout. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	listen(fd, 4);
	cr_assert_null(kvt_peer_open(addr, 300));
	cr_assert_eq(rte_errno, ETIMEDOUT);
	close(fd);
	kvt_fini();
}

/* One frame of type t with no fields, sent; @return 0 or -errno. */
static int
send_bare(int fd, uint16_t t)
{
	struct kvt_buf b = { 0 };
	int ret;

	cr_assert_eq(kvt_wire_begin(&b, t), 0);
	cr_assert_eq(kvt_wire_end(&b), 0);
	ret = kvt_wire_send(fd, &b, kvt_now_us() + 1000000);
	kvt_buf_free(&b);
	return ret;
}

/*
 * An opener sends nothing between its handshake frames and its first
 * PING, which comes only once its open returned: dialling every path may
 * take longer than the silence bound (2 x --kvt-timeout).  Until that
 * PING the session is held to the handshake's bound instead; after it,
 * silence closes the session again.
 */
Test(handshake, opener_not_silent_before_its_first_ping, .timeout = 60)
{
	struct kvt_buf b = { 0 };
	uint8_t id[32] = { 7 };
	char addr[64];
	int fd, type;

	cr_assert_geq(tc_engine_init("--kvt-pmd shm --kvt-timeout 200"), 0);
	cr_assert(kvt_listen_addr(addr, sizeof(addr)) > 0);
	fd = dial(addr);
	cr_assert_eq(kvt_wire_begin(&b, KVT_W_HELLO), 0);
	kvt_wire_put_str(&b, KVT_T_NAME, "slow-opener");
	kvt_wire_put(&b, KVT_T_HOST_ID, id, sizeof(id));
	kvt_wire_put_u64(&b, KVT_T_PID, 42);
	cr_assert_eq(kvt_wire_end(&b), 0);
	cr_assert_eq(kvt_wire_send(fd, &b, kvt_now_us() + 1000000), 0);
	type = kvt_wire_recv(fd, &b, KVT_WIRE_MAX, kvt_now_us() + 2000000);
	cr_assert_eq(type, KVT_W_WELCOME, "no WELCOME: %d", type);
	/* Twice the silence bound (400 ms) inside the open. */
	usleep(800000);
	cr_assert_eq(send_bare(fd, KVT_W_PING), 0);
	type = kvt_wire_recv(fd, &b, KVT_WIRE_MAX, kvt_now_us() + 2000000);
	cr_assert_eq(type, KVT_W_PONG,
		     "the session was closed during the open (%d)", type);
	/* Pinged once: now silence ends it. */
	cr_assert(closed_by_server(fd), "a silent session stayed open");
	close(fd);
	kvt_buf_free(&b);
	kvt_fini();
}

#define FLOOD 4200
#define FLOOD_OPTS "--kvt-pmd tcp --kvt-nic lo --kvt-timeout 1000"

/*
 * Strangers cannot lock peers out: with more than 4 096 connections to
 * its control port that never say a word, a target still lets a peer
 * open within 100 ms.
 */
Test(handshake, preauth_flood, .timeout = 60)
{
	struct rlimit rl = { 8192, 8192 };
	struct sockaddr_in sa;
	struct tc_peer t;
	struct kvt_peer *p;
	int *fds = malloc(FLOOD * sizeof(int));
	unsigned int i, n = 0;
	uint64_t t0, took;

	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "needs root for 8192 fds");
	cr_assert_geq(tc_engine_init(FLOOD_OPTS), 0);
	cr_assert_eq(tc_peer_start(&t, FLOOD_OPTS), 0);
	cr_assert_eq(kvt_parse_addr(t.addr, &sa), 0);
	for (i = 0; i < FLOOD; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		cr_assert_geq(fds[i], 0);
		if (connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) == 0 ||
		    errno == EINPROGRESS)
			n++;
		/* In waves the listen queue holds: all get in. */
		if (i % 64 == 63)
			usleep(5000);
	}
	usleep(300000);
	t0 = tc_now_us();
	p = kvt_peer_open(t.addr, 5000);
	took = tc_now_us() - t0;
	cr_log_info("%u silent connections: the peer opened in %.1f ms", n,
		    (double)took / 1e3);
	cr_assert_not_null(p, "open during the flood: %s", rte_strerror(rte_errno));
	/* A ThreadSanitizer-built target is many times slower: it opens,
	 * the bound is for a real one. */
	if (!tc_tsan_peers())
		cr_assert_lt(took, 100000, "opening took %.1f ms", (double)took / 1e3);
	kvt_peer_close(p);
	for (i = 0; i < FLOOD; i++)
		close(fds[i]);
	free(fds);
	tc_peer_stop(&t);
	kvt_fini();
}
