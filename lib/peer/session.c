/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Inbound sessions, on the control thread: peers that opened us.  The
 * handshake (hello, authentication, our endpoints and regions), their
 * connection requests, pings, the messages PMDs send each other through
 * a connection, and every bound a session must keep (handshake time,
 * silence, a frame that trickles, answers it does not read).  ctl.c runs
 * the thread and calls in here; nothing here calls ctl.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "kvt_private.h"

#define KVT_HANDSHAKE_US (5 * 1000 * 1000)
#define KVT_MAX_SESSIONS 4096
/* Answers a session may leave unread: a peer that sends PINGs and never
 * reads the PONGs gets none past the soft mark, and a session whose
 * backlog passes the hard one (region updates it does not read) goes. */
#define KVT_SESS_TX_SOFT (64u << 10)
#define KVT_SESS_TX_MAX (64u << 20)
/* Out of file descriptors: stop accepting for a while, not spin. */
#define KVT_ACCEPT_PAUSE_US (100 * 1000)
/*
 * Connections that have not said a valid hello yet hold little: this
 * many in all, this many from one address, each for KVT_PREAUTH_US at
 * most, and a newcomer over a cap takes the place of the oldest of them,
 * so a flood of silent strangers can neither exhaust our descriptors nor
 * keep a peer out (its hello comes at once; theirs never do).
 */
#define KVT_PREAUTH_MAX 256
#define KVT_PREAUTH_PER_SRC 32
#define KVT_PREAUTH_US (1000 * 1000)
/* Connections accepted per call: the sessions' own frames go between. */
#define KVT_ACCEPT_BURST 32

static int sess_epfd = -1;	/* the control thread's epoll set */
static unsigned int nsessions;
static uint64_t accept_paused_until;	/* 0: the listener is watched */

void
kvt_sess_init(int epfd)
{
	sess_epfd = epfd;
	accept_paused_until = 0;
}

static size_t
sess_backlog(const struct kvt_session *s)
{
	return s->tx.len - s->tx_off;
}

int
kvt_sess_queue(struct kvt_session *s, const struct kvt_buf *frame)
{
	if (sess_backlog(s) + frame->len > KVT_SESS_TX_MAX) {
		s->overflow = 1;
		return -ENOBUFS;
	}
	return kvt_buf_put(&s->tx, frame->data, frame->len);
}

int
kvt_sess_flush(struct kvt_session *s)
{
	struct epoll_event ev = { .data.ptr = s };
	ssize_t n;

	while (s->tx_off < s->tx.len) {
		n = send(s->fd, s->tx.data + s->tx_off, s->tx.len - s->tx_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			s->tx_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EAGAIN)
			break;
		return -ECONNRESET;
	}
	if (s->tx_off == s->tx.len) {
		s->tx.len = 0;
		s->tx_off = 0;
		ev.events = EPOLLIN;
	} else {
		ev.events = EPOLLIN | EPOLLOUT;
	}
	epoll_ctl(sess_epfd, EPOLL_CTL_MOD, s->fd, &ev);
	return 0;
}

static void
sess_refuse(struct kvt_session *s, int err, const char *reason)
{
	struct kvt_buf b = { 0 };

	KVT_LOG(WARNING, "session from %s refused: %s", s->info.name[0] ?
		s->info.name : "?", reason);
	kvt_wire_begin(&b, KVT_W_REFUSE);
	kvt_wire_put_u64(&b, KVT_T_ERRNO, (uint64_t)err);
	kvt_wire_put_str(&b, KVT_T_REASON, reason);
	if (kvt_wire_end(&b) == 0) {
		/* Best effort: the connection is closed right after. */
		if (send(s->fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			KVT_LOG(DEBUG, "refusal not sent");
	}
	kvt_buf_free(&b);
}

static int
build_endpoints(struct kvt_buf *b)
{
	struct kvt_buf ep = { 0 };
	struct kvt_port *p;
	unsigned int i;
	size_t mark;
	int ret = 0;

	for (i = 0; i < kvt_port_count() && ret == 0; i++) {
		p = kvt_port_get(i);
		ep.len = 0;
		if (p->pmd->ops->endpoint != NULL) {
			ret = p->pmd->ops->endpoint(p, &ep);
			if (ret == -ENOTSUP)
				ep.len = 0;
			else if (ret < 0)
				break;
		}
		ret = kvt_wire_open(b, KVT_T_ENDPOINT, &mark);
		ret |= kvt_wire_put_str(b, KVT_T_PMD, p->pmd->name);
		ret |= kvt_wire_put_str(b, KVT_T_PORT_NAME, p->name);
		ret |= kvt_wire_put_u64(b, KVT_T_PORT_ID, i);
		ret |= kvt_wire_put(b, KVT_T_BLOB, ep.data, (uint32_t)ep.len);
		kvt_wire_close(b, mark);
	}
	kvt_buf_free(&ep);
	return ret != 0 ? -ENOMEM : 0;
}

static int
sess_hello(struct kvt_session *s, const uint8_t *p, size_t len)
{
	struct kvt_engine *e = kvt_eng;
	struct kvt_wire_hello *h;
	struct kvt_buf b = { 0 };
	int ret;

	h = malloc(sizeof(*h));
	if (h == NULL)
		return -ENOMEM;
	ret = kvt_wire_decode_hello(p, len, h);
	if (ret < 0) {
		sess_refuse(s, EPROTO, "malformed HELLO");
		goto out;
	}
	kvt_wire_peer_info(h, e->env.host_id, &s->info);
	if (e->o.secret[0] != '\0' && !kvt_wire_secret_ok(h, e->o.secret)) {
		sess_refuse(s, EACCES, "wrong or missing secret");
		ret = -EACCES;
		goto out;
	}
	s->once = kvt_once_new();
	if (s->once == NULL) {
		ret = -ENOMEM;
		goto out;
	}
	ret = kvt_wire_begin(&b, KVT_W_WELCOME);
	ret |= kvt_wire_put_str(&b, KVT_T_NAME, e->o.name);
	ret |= kvt_wire_put(&b, KVT_T_HOST_ID, e->env.host_id,
			    sizeof(e->env.host_id));
	ret |= kvt_wire_put_u64(&b, KVT_T_PID, (uint64_t)getpid());
	if (e->o.secret[0] != '\0')
		ret |= kvt_wire_put_str(&b, KVT_T_SECRET, e->o.secret);
	ret |= build_endpoints(&b);
	ret |= kvt_mem_export_all(&b);
	ret |= kvt_wire_end(&b);
	if (ret != 0) {
		ret = -ENOMEM;
		goto out;
	}
	ret = kvt_sess_queue(s, &b);
	s->authed = 1;
	KVT_LOG(INFO, "peer %s (pid %u%s) opened us", s->info.name, s->info.pid,
		s->info.same_host ? ", same host" : "");
out:
	kvt_buf_free(&b);
	free(h);
	return ret;
}

static int
conn_req_fields(const uint8_t *p, size_t len, uint64_t *port, uint64_t *from,
		const uint8_t **blob, uint32_t *blen)
{
	struct kvt_tlv t = { p, len };
	const uint8_t *v;
	uint32_t l;
	uint16_t tag;
	int r, have = 0;

	while ((r = kvt_tlv_next(&t, &tag, &v, &l)) > 0) {
		if (tag == KVT_T_PORT_ID && kvt_tlv_u64(v, l, port) == 0) {
			have |= 1;
		} else if (tag == KVT_T_FROM_PORT && from != NULL) {
			if (kvt_tlv_u64(v, l, from) < 0 || *from >= KVT_MAX_PORTS)
				return -EPROTO;
		} else if (tag == KVT_T_BLOB) {
			*blob = v;
			*blen = l;
			have |= 2;
		}
	}
	return r == 0 && have == 3 ? 0 : -EPROTO;
}

void
kvt_conn_accept_init(struct kvt_conn *c, struct kvt_port *port,
		     const struct kvt_accept *a)
{
	c->port = port;
	c->info = a->info;
	c->owner = a->owner;
	c->accepted = 1;
	c->remote_port = a->remote_port;
}

static int
sess_conn_req(struct kvt_session *s, const uint8_t *p, size_t len)
{
	struct kvt_buf rep = { 0 }, b = { 0 };
	const uint8_t *blob = NULL;
	struct kvt_conn *c = NULL;
	struct kvt_port *port;
	uint64_t pid = 0, from = UINT16_MAX;
	struct kvt_accept a = { .info = s->info, .owner = s };
	uint32_t blen = 0;
	int ret;

	ret = conn_req_fields(p, len, &pid, &from, &blob, &blen);
	if (ret < 0)
		return ret;
	a.remote_port = (uint16_t)from;
	port = kvt_port_get((unsigned int)RTE_MIN(pid, (uint64_t)UINT32_MAX));
	if (port == NULL)
		ret = -ENOENT;
	else if (port->pmd->ops->conn_accept == NULL)
		ret = -ENOTSUP;
	else if (s->conn[port->id] != NULL)
		ret = -EEXIST;
	else
		ret = port->pmd->ops->conn_accept(port, &a, blob, blen,
						  &rep, &c);
	if (ret == 0)
		s->conn[port->id] = c;
	kvt_wire_begin(&b, KVT_W_CONN_REP);
	kvt_wire_put_u64(&b, KVT_T_ERRNO, (uint64_t)-ret);
	kvt_wire_put(&b, KVT_T_BLOB, rep.data, (uint32_t)rep.len);
	ret = kvt_wire_end(&b);
	if (ret == 0)
		ret = kvt_sess_queue(s, &b);
	kvt_buf_free(&b);
	kvt_buf_free(&rep);
	return ret;
}

/* Answer a PING.  A PONG is the same few bytes every time: built once,
 * not allocated per PING (a peer may send millions). */
static int
sess_pong(struct kvt_session *s)
{
	static struct kvt_buf pong;	/* the control thread's alone */
	int ret;

	if (pong.len == 0) {
		ret = kvt_wire_begin(&pong, KVT_W_PONG);
		ret |= kvt_wire_end(&pong);
		if (ret != 0) {
			kvt_buf_free(&pong);
			return ret;
		}
	}
	return kvt_sess_queue(s, &pong);
}

/* The peer stopped using every region we removed up to SEQ. */
static int
sess_gone(struct kvt_session *s, const uint8_t *p, size_t len)
{
	struct kvt_tlv t = { p, len };
	const uint8_t *v;
	uint64_t seq;
	uint32_t l;
	uint16_t tag;

	if (kvt_tlv_next(&t, &tag, &v, &l) <= 0 || tag != KVT_T_SEQ ||
	    kvt_tlv_u64(v, l, &seq) < 0 || seq > s->del_sent)
		return -EPROTO;
	s->del_acked = RTE_MAX(s->del_acked, seq);
	return 0;
}

static int
sess_frame(struct kvt_session *s, uint16_t type, const uint8_t *p, size_t len)
{
	if (!s->authed)
		return type == KVT_W_HELLO ? sess_hello(s, p, len) : -EPROTO;
	switch (type) {
	case KVT_W_CONN_REQ:
		return sess_conn_req(s, p, len);
	case KVT_W_PING:
		s->pinged = 1;
		/* Our last answers are still unread: this one adds nothing. */
		if (sess_backlog(s) > KVT_SESS_TX_SOFT)
			return 0;
		return sess_pong(s);
	case KVT_W_BYE:
		return -ECONNRESET;
	case KVT_W_PORT_MSG:
		return kvt_ctl_port_msg(s->conn, p, len);
	case KVT_W_REGION_GONE:
		return sess_gone(s, p, len);
	default:
		return -EPROTO;
	}
}

void
kvt_sess_close(struct kvt_session *s)
{
	struct kvt_session **pp;
	struct kvt_conn *c;
	unsigned int i;

	for (pp = &kvt_eng->sessions; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	epoll_ctl(sess_epfd, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	for (i = 0; i < KVT_MAX_PORTS; i++) {
		c = s->conn[i];
		if (c == NULL)
			continue;
		kvt_conn_set_dead(c);
		c->port->pmd->ops->conn_close(c);
	}
	if (s->authed)
		KVT_LOG(INFO, "peer %s closed its session", s->info.name);
	kvt_once_free(s->once);
	kvt_buf_free(&s->rx);
	kvt_buf_free(&s->tx);
	free(s);
	nsessions--;
}

/* Act on every whole frame in rx; @return 0 or a negative errno. */
static int
sess_parse(struct kvt_session *s)
{
	uint16_t type;
	size_t off = 0;
	int len, ret = 0;

	while (ret == 0 && s->rx.len - off >= KVT_WIRE_HDR) {
		len = kvt_wire_check_hdr(s->rx.data + off, s->authed ?
					 KVT_WIRE_MAX_SESSION : KVT_WIRE_MAX_PREAUTH,
					 &type);
		if (len < 0) {
			sess_refuse(s, EPROTO, "malformed frame header");
			return len;
		}
		if (s->rx.len - off - KVT_WIRE_HDR < (size_t)len)
			break;
		ret = sess_frame(s, type, s->rx.data + off + KVT_WIRE_HDR,
				 (size_t)len);
		off += KVT_WIRE_HDR + (size_t)len;
	}
	memmove(s->rx.data, s->rx.data + off, s->rx.len - off);
	s->rx.len -= off;
	/* A frame that arrives a byte at a time has one timeout in all. */
	if (s->rx.len == 0)
		s->partial_us = 0;
	else if (s->partial_us == 0 || off != 0)
		s->partial_us = kvt_now_us();
	return ret;
}

/* Read what is there, a chunk at a time, acting on whole frames. */
int
kvt_sess_read(struct kvt_session *s)
{
	uint8_t tmp[16384];
	ssize_t n;
	int ret;

	for (;;) {
		n = recv(s->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				return -ECONNRESET;
			break;
		}
		/* Read by the lcores (kvt_conn_heard_us). */
		__atomic_store_n(&s->last_rx_us, kvt_now_us(), __ATOMIC_RELAXED);
		if (kvt_buf_put(&s->rx, tmp, (size_t)n) < 0)
			return -ENOMEM;
		ret = sess_parse(s);
		if (ret < 0)
			return ret;
	}
	return kvt_sess_flush(s);
}

static int
same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return 0;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
			((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return 0;
}

/*
 * Make room for a connection from ss among the unauthenticated ones: the
 * oldest from its address goes when that address has its share, else
 * the oldest of all when they are at their cap.  (The list holds the
 * newest first.)
 */
static void
preauth_space(const struct sockaddr_storage *ss)
{
	struct kvt_session *s, *oldest = NULL, *oldest_src = NULL;
	unsigned int all = 0, src = 0;

	for (s = kvt_eng->sessions; s != NULL; s = s->next) {
		if (s->authed)
			continue;
		all++;
		oldest = s;
		if (same_source(&s->info.ctl_addr, ss)) {
			src++;
			oldest_src = s;
		}
	}
	if (src >= KVT_PREAUTH_PER_SRC)
		kvt_sess_close(oldest_src);
	else if (all >= KVT_PREAUTH_MAX)
		kvt_sess_close(oldest);
}

void
kvt_sess_accept(void)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct kvt_session *s;
	socklen_t sl;
	int fd, one = 1, n;

	for (n = 0; n < KVT_ACCEPT_BURST; n++) {
		struct sockaddr_storage ss;

		sl = sizeof(ss);
		fd = accept4(kvt_eng->listen_fd, (struct sockaddr *)&ss, &sl,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE ||
			       errno == ENOBUFS || errno == ENOMEM)) {
			/* The connection waits in the backlog; watching the
			 * listener now would wake us again at once. */
			if (accept_paused_until == 0)
				KVT_LOG(WARNING, "cannot accept control connections: %s; pausing",
					strerror(errno));
			epoll_ctl(sess_epfd, EPOLL_CTL_DEL, kvt_eng->listen_fd, NULL);
			accept_paused_until = kvt_now_us() + KVT_ACCEPT_PAUSE_US;
			return;
		}
		if (fd < 0)
			return;
		preauth_space(&ss);
		if (nsessions >= KVT_MAX_SESSIONS) {
			close(fd);
			continue;
		}
		s = calloc(1, sizeof(*s));
		if (s == NULL) {
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		s->fd = fd;
		s->info.ctl_addr = ss;
		s->opened_us = kvt_now_us();
		__atomic_store_n(&s->last_rx_us, s->opened_us, __ATOMIC_RELAXED);
		ev.data.ptr = s;
		if (epoll_ctl(sess_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			close(fd);
			free(s);
			continue;
		}
		s->next = kvt_eng->sessions;
		kvt_eng->sessions = s;
		nsessions++;
	}
}

void
kvt_sess_accept_resume(uint64_t now)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = KVT_CTL_TAG_LISTEN };

	if (accept_paused_until == 0 || now < accept_paused_until)
		return;
	accept_paused_until = 0;
	epoll_ctl(sess_epfd, EPOLL_CTL_ADD, kvt_eng->listen_fd, &ev);
}

/* Bytes wait unread: this thread was late, the peer was not silent
 * (a port call can hold the control thread past a peer's timeout). */
static int
sess_has_input(const struct kvt_session *s)
{
	int n = 0;

	return ioctl(s->fd, FIONREAD, &n) == 0 && n > 0;
}

/* Does a session go?  Each phase has its own bound, and why is logged. */
int
kvt_sess_expired(const struct kvt_session *s, uint64_t now, uint64_t dead_us)
{
	const char *why = NULL;
	uint64_t quiet = 2 * dead_us;

	/* The opener pings only once its open returned, and its open may
	 * take the handshake's whole bound (dialling every path). */
	if (!s->pinged)
		quiet = RTE_MAX(quiet, (uint64_t)KVT_HANDSHAKE_US);
	if (!s->authed && now - s->opened_us > KVT_PREAUTH_US &&
	    s->partial_us == 0 && !sess_has_input(s))
		why = "no hello in time";
	else if (now - s->last_rx_us > quiet && !sess_has_input(s))
		why = "silent";
	else if (s->partial_us != 0 && now - s->partial_us > dead_us)
		why = "a frame trickles in";
	else if (s->overflow)
		why = "it does not read what we send";
	/* Unauthenticated strangers could fill the log: debug for them. */
	if (why != NULL && s->authed)
		KVT_LOG(WARNING, "session from %s closed: %s", s->info.name, why);
	else if (why != NULL)
		KVT_LOG(DEBUG, "unauthenticated session closed: %s", why);
	return why != NULL;
}

/* ---- messages between the two ends of a connection ---- */

int
kvt_ctl_sess_send(struct kvt_session *s, const struct kvt_buf *frame)
{
	int ret = kvt_sess_queue(s, frame);

	return ret < 0 ? ret : kvt_sess_flush(s);
}

int
kvt_conn_msg(struct kvt_conn *c, const void *msg, size_t len)
{
	struct kvt_peer *p = c->owner;
	struct kvt_buf b = { 0 };
	int ret;

	if (len > (64u << 10))
		return -EMSGSIZE;
	if (c->remote_port >= KVT_MAX_PORTS ||
	    __atomic_load_n(&c->dead, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	ret = kvt_wire_begin(&b, KVT_W_PORT_MSG);
	ret |= kvt_wire_put_u64(&b, KVT_T_PORT_ID, c->remote_port);
	ret |= kvt_wire_put(&b, KVT_T_BLOB, msg, (uint32_t)len);
	ret |= kvt_wire_end(&b);
	if (ret != 0)
		ret = -ENOMEM;
	else if (c->accepted)
		ret = kvt_ctl_sess_send(c->owner, &b);
	else if (p->fd < 0 ||
		 send(p->fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT) !=
		 (ssize_t)b.len)
		ret = -ENOTCONN;
	kvt_buf_free(&b);
	return ret;
}

/* A PORT_MSG for one of conns: hand it to the PMD, send its reply back. */
int
kvt_ctl_port_msg(struct kvt_conn **conns, const uint8_t *p, size_t len)
{
	struct kvt_buf reply = { 0 };
	const uint8_t *blob = NULL;
	struct kvt_conn *c;
	uint64_t port = 0;
	uint32_t blen = 0;
	int ret;

	ret = conn_req_fields(p, len, &port, NULL, &blob, &blen);
	if (ret < 0)
		return ret;
	c = port < KVT_MAX_PORTS ? conns[port] : NULL;
	/* A message for a connection closed meanwhile is dropped. */
	if (c == NULL || c->port->pmd->ops->conn_msg == NULL)
		return 0;
	ret = c->port->pmd->ops->conn_msg(c, blob, blen, &reply);
	if (ret == 0 && reply.len > 0)
		ret = kvt_conn_msg(c, reply.data, reply.len);
	if (ret < 0)
		KVT_LOG(DEBUG, "port %s: message from %s: %s", c->port->name,
			c->info.name, strerror(-ret));
	kvt_buf_free(&reply);
	return 0;
}
