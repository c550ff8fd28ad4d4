/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp: the fallback transport for hosts without RDMA.  One port per
 * allowed network interface, bound to its address (and device); several
 * connections per peer; one lcore drives all of a port's non-blocking
 * sockets.  Socket calls are this transport's nature: it is the one place
 * an lcore makes system calls.
 *
 * One-sided semantics on top of streams: the initiator sends WRITE (with
 * payload), READ, FENCE and NOTIFY frames; the target checks every range
 * against the regions it exports (kvt_target_range) before it touches
 * memory, receives WRITE payload straight into place, and acknowledges
 * each frame in order once it is done.  An acknowledgement therefore
 * means "placed", and the engine sends a submission's fence only after
 * every slice on every port is acknowledged.
 *
 * Data connections authenticate with a 128-bit token the target issued
 * through the control handshake (itself guarded by the shared secret), so
 * nobody who skipped the handshake can write exported memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_kvargs.h>

#include "kvt_pmd.h"
#include "tcp_wire.h"

RTE_LOG_REGISTER(tcp_logtype, kvt.pmd.tcp, NOTICE);
#define TCP_LOG(level, fmt, ...)					\
	rte_log(RTE_LOG_ ## level, tcp_logtype, "kvt.tcp: " fmt "\n",	\
		##__VA_ARGS__)

#define TCP_MAX_PORTS 16
#define TCP_MAX_SOCKS 4096
#define TCP_RESP_RING 256
#define TCP_MAX_INFLIGHT (16u << 20)	/* bytes sent, not acked, per socket */
#define TCP_CHUNK (1u << 20)	/* payload bytes per recv/send call */
#define TCP_HELLO_US (5 * 1000 * 1000)
#define TCP_REDIAL_US (100 * 1000)	/* one dial attempt */
#define TCP_BACKOFF_MIN_MS 250u
#define TCP_BACKOFF_MAX_MS 10000u

struct tcp_conn;

/* A response the target still owes on a socket. */
struct tcp_resp {
	struct tcp_hdr h;
	uint64_t src;		/* READ_DATA: our address */
	uint32_t off;		/* bytes of header + payload sent */
};

struct tcp_sock {
	int fd;
	int server;		/* accepted here */
	int authed;
	struct tcp_conn *conn;
	uint64_t since;		/* TSC: accept time, or last progress */
	/* initiator: to send, then waiting for their acks */
	struct kvt_desc *txq, *txq_tail;
	struct kvt_desc *wq, *wq_tail;
	uint32_t tx_off;
	uint64_t inflight;
	/* both: the frame being received */
	struct tcp_hdr rh;
	uint32_t rh_off;
	uint32_t rx_left;	/* payload bytes still to come */
	uint32_t rx_done;
	int32_t rx_status;	/* target: the frame's outcome so far */
	uint8_t small[KVT_NOTIFY_MAX];	/* NOTIFY payload */
	uint8_t rbuf[4096];	/* headers and small frames */
	uint32_t rb_off, rb_len;
	struct tcp_hello hello;
	uint32_t hello_off;
	/* target: responses owed, in order */
	struct tcp_resp resp[TCP_RESP_RING];
	uint32_t resp_head, resp_tail;
	struct tcp_sock *next;
};

struct tcp_conn {
	struct kvt_conn c;	/* first */
	uint8_t token[16];
	struct tcp_ep ep;	/* initiator: where to dial */
	struct tcp_sock *socks[8];
	unsigned int nsocks;
	unsigned int rr;
	struct kvt_inbox *inbox;	/* acceptor: notifications to us */
	struct tcp_conn *next;	/* acceptor: the port's token list */
	/* Initiator, control thread: dialling lost sockets again. */
	struct tcp_conn *dnext;
	uint64_t redial_at_us;
	uint32_t backoff_ms;
};

struct tcp_port {
	char ifname[IF_NAMESIZE];
	struct sockaddr_in addr;
	uint8_t prefix;
	int lfd;
	int epfd;
	unsigned int conns;	/* sockets per peer */
	struct tcp_sock *socks;	/* every socket of the port */
	unsigned int nsocks;
	struct tcp_conn *accepted;	/* token owners */
	pthread_mutex_t lock;
	struct tcp_conn *dialed;	/* initiator connections */
	uint64_t timeout_tsc;
	uint8_t scratch[65536];	/* discarded payload */
};

/*
 * A connection's socket list belongs to the lcore; the control thread
 * only reads how many sockets it has (to redial), so the count is
 * published with an atomic store.
 */
static void
conn_sock_add(struct tcp_conn *c, struct tcp_sock *s)
{
	c->socks[c->nsocks] = s;
	__atomic_store_n(&c->nsocks, c->nsocks + 1, __ATOMIC_RELEASE);
}

static void
conn_sock_del(struct tcp_conn *c, unsigned int i)
{
	unsigned int n = c->nsocks - 1;

	c->socks[i] = c->socks[n];
	__atomic_store_n(&c->nsocks, n, __ATOMIC_RELEASE);
}

/* Every port of this PMD, for pairing ports with endpoints (probe and
 * remove run on the control path, before and after any pairing). */
static struct tcp_port *tcp_ports[TCP_MAX_PORTS];
static unsigned int tcp_nports;

/* ---- probe: one port per allowed interface ---- */

static int
allowed(const char *ifname, int loopback)
{
	const char *list = kvt_pmd_env()->nic_allow;
	size_t n = strlen(ifname);
	const char *p;

	if (list == NULL)
		return !loopback;
	for (p = list; (p = strstr(p, ifname)) != NULL; p += n)
		if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
			return 1;
	return 0;
}

static int
numa_of(const char *ifname)
{
	char path[128];
	FILE *f;
	int n = -1;

	snprintf(path, sizeof(path), "/sys/class/net/%s/device/numa_node", ifname);
	f = fopen(path, "r");
	if (f != NULL) {
		if (fscanf(f, "%d", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

static int
tcp_probe(const struct kvt_pmd *pmd, const char *args)
{
	static const char *const keys[] = { "conns", NULL };
	struct ifaddrs *ifa, *i;
	struct rte_kvargs *kv;
	struct tcp_port *tp;
	char name[32];
	long conns = 2;
	uint32_t mask;
	int n = 0, ret;

	if (args != NULL && *args != '\0') {
		kv = rte_kvargs_parse(args, keys);
		if (kv == NULL)
			return -EINVAL;
		ret = kvt_kv_long(kv, "conns", 1, 8, &conns);
		rte_kvargs_free(kv);
		if (ret < 0)
			return ret;
	}
	if (getifaddrs(&ifa) != 0)
		return -errno;
	for (i = ifa; i != NULL && n < TCP_MAX_PORTS; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
		    !(i->ifa_flags & IFF_UP) ||
		    !allowed(i->ifa_name, !!(i->ifa_flags & IFF_LOOPBACK)))
			continue;
		tp = calloc(1, sizeof(*tp));
		if (tp == NULL)
			break;
		snprintf(tp->ifname, sizeof(tp->ifname), "%s", i->ifa_name);
		tp->addr = *(struct sockaddr_in *)i->ifa_addr;
		tp->addr.sin_port = 0;
		mask = ntohl(((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr);
		tp->prefix = (uint8_t)__builtin_popcount(mask);
		tp->conns = (unsigned int)conns;
		tp->lfd = tp->epfd = -1;
		pthread_mutex_init(&tp->lock, NULL);
		snprintf(name, sizeof(name), "tcp:%s", i->ifa_name);
		if (kvt_port_create(pmd, name, numa_of(i->ifa_name), tp) == NULL) {
			free(tp);
			break;
		}
		tcp_ports[tcp_nports++] = tp;
		n++;
	}
	freeifaddrs(ifa);
	if (n == 0)
		TCP_LOG(NOTICE, "no allowed interface with an IPv4 address: no tcp port");
	return 0;
}

static void
tune(int fd, const struct tcp_port *tp)
{
	int one = 1, buf = 8 << 20;
	unsigned int uto = kvt_pmd_env()->timeout_ms;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	/* A link that went away fails the connection within the timeout. */
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
	/* Traffic of this port leaves through its own interface. */
	if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, tp->ifname,
		       (socklen_t)strlen(tp->ifname)) != 0)
		TCP_LOG(DEBUG, "SO_BINDTODEVICE %s: %s", tp->ifname, strerror(errno));
}

static int
tcp_start(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	struct epoll_event ev = { .events = EPOLLIN };
	socklen_t sl = sizeof(tp->addr);
	int one = 1;

	tp->timeout_tsc = rte_get_tsc_hz() / 1000 * kvt_pmd_env()->timeout_ms;
	tp->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tp->lfd < 0)
		return -errno;
	setsockopt(tp->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(tp->lfd, (struct sockaddr *)&tp->addr, sizeof(tp->addr)) != 0 ||
	    listen(tp->lfd, 256) != 0 ||
	    getsockname(tp->lfd, (struct sockaddr *)&tp->addr, &sl) != 0) {
		TCP_LOG(ERR, "port %s: cannot listen: %s", port->name, strerror(errno));
		return -errno;
	}
	tp->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (tp->epfd < 0)
		return -errno;
	ev.data.ptr = NULL;	/* NULL: the listening socket */
	epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->lfd, &ev);
	return 0;
}

/* ---- sockets ---- */

static struct tcp_sock *
sock_add(struct tcp_port *tp, int fd, int server)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct tcp_sock *s;

	if (tp->nsocks >= TCP_MAX_SOCKS)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return NULL;
	s->fd = fd;
	s->server = server;
	s->authed = !server;
	s->since = rte_get_tsc_cycles();
	ev.data.ptr = s;
	if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		free(s);
		return NULL;
	}
	s->next = tp->socks;
	tp->socks = s;
	tp->nsocks++;
	return s;
}

/* Fail what a dying socket held, or move its data slices to another
 * connection of the same peer. */
static void
sock_drain(struct tcp_sock *s, int err)
{
	struct tcp_conn *c = s->conn;
	struct kvt_desc *d, *lists[2] = { s->wq, s->txq };
	struct tcp_sock *alt = NULL;
	unsigned int i, k;

	s->wq = s->wq_tail = s->txq = s->txq_tail = NULL;
	s->tx_off = 0;
	s->inflight = 0;
	/* Another live connection to the same peer takes the slices over. */
	for (i = 0; c != NULL && i < c->nsocks && alt == NULL; i++)
		if (c->socks[i] != s && c->socks[i]->fd >= 0)
			alt = c->socks[i];
	for (k = 0; k < 2; k++) {
		while ((d = lists[k]) != NULL) {
			lists[k] = d->next;
			/* Data slices may be sent twice (the same bytes); a
			 * fence or notification carries its number, and the
			 * target acts on it once. */
			if (alt != NULL) {
				d->next = NULL;
				if (alt->txq_tail != NULL)
					alt->txq_tail->next = d;
				else
					alt->txq = d;
				alt->txq_tail = d;
			} else {
				kvt_desc_complete(d, err);
			}
		}
	}
}

static void
sock_close(struct kvt_port *port, struct tcp_sock *s, int err)
{
	struct tcp_port *tp = port->priv;
	struct tcp_sock **pp;
	struct tcp_conn *c = s->conn;
	unsigned int i;

	if (s->fd >= 0) {
		/* Work in flight makes it news; an idle one is not. */
		if (err != -ECANCELED)
			rte_log(s->wq != NULL || s->txq != NULL ? RTE_LOG_NOTICE :
				RTE_LOG_DEBUG, tcp_logtype,
				"kvt.tcp: port %s: %s socket %d closed with work %s: %s\n",
				port->name, s->server ? "target" : "initiator", s->fd,
				s->wq != NULL || s->txq != NULL ? "in flight" : "none",
				strerror(-err));
		epoll_ctl(tp->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		s->fd = -1;
	}
	if (c != NULL) {
		for (i = 0; i < c->nsocks; i++)
			if (c->socks[i] == s)
				conn_sock_del(c, i);
		/* No socket left: new slices go to other links until the
		 * control thread dials this one again. */
		if (c->nsocks == 0 && !c->c.accepted)
			kvt_conn_set_down(&c->c, 1);
	}
	s->conn = c;	/* kept for sock_drain's alternative */
	sock_drain(s, err);
	for (pp = &tp->socks; *pp != NULL; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			tp->nsocks--;
			break;
		}
	free(s);
}

/*
 * Every send goes through here: MSG_NOSIGNAL, so a peer that closed its
 * end yields EPIPE instead of killing this process with SIGPIPE (a
 * library must not touch the application's signal dispositions).
 */
static ssize_t
sock_sendv(int fd, struct iovec *iov, unsigned int n)
{
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = n };

	return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ---- initiator: sending ---- */

static void
frame_of(const struct kvt_desc *d, struct tcp_hdr *h)
{
	memset(h, 0, sizeof(*h));
	switch (d->op) {
	case KVT_DESC_WRITE:
		h->type = F_WRITE;
		h->len = d->len;
		break;
	case KVT_DESC_READ:
		h->type = F_READ;
		h->aux = d->len;
		break;
	case KVT_DESC_FENCE:
		h->type = F_FENCE;
		h->aux = d->value;
		h->seq = d->seq;
		break;
	default:
		h->type = F_NOTIFY;
		h->len = d->len;
		h->seq = d->seq;
		break;
	}
	h->addr = d->remote;
}

static const void *
payload_of(const struct kvt_desc *d)
{
	return d->op == KVT_DESC_NOTIFY ? d->data : d->local;
}

/* @return work done, or a negative errno for a broken socket. */
static int
sock_send(struct kvt_port *port, struct tcp_sock *s)
{
	struct tcp_hdr h;
	struct iovec iov[2];
	struct kvt_desc *d;
	uint32_t plen, total;
	ssize_t n;
	int work = 0;

	while ((d = s->txq) != NULL && s->inflight < TCP_MAX_INFLIGHT) {
		frame_of(d, &h);
		plen = h.type == F_WRITE || h.type == F_NOTIFY ? h.len : 0;
		tcp_hdr_to_wire(&h);
		total = (uint32_t)sizeof(h) + plen;
		if (s->tx_off < sizeof(h)) {
			iov[0].iov_base = (uint8_t *)&h + s->tx_off;
			iov[0].iov_len = sizeof(h) - s->tx_off;
			iov[1].iov_base = (void *)(uintptr_t)payload_of(d);
			iov[1].iov_len = RTE_MIN(plen, TCP_CHUNK);
		} else {
			iov[0].iov_base = (uint8_t *)(uintptr_t)payload_of(d) +
				(s->tx_off - sizeof(h));
			iov[0].iov_len = RTE_MIN(total - s->tx_off, TCP_CHUNK);
			iov[1].iov_len = 0;
		}
		n = sock_sendv(s->fd, iov, iov[1].iov_len != 0 ? 2 : 1);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? work : -errno;
		work++;
		s->tx_off += (uint32_t)n;
		if (s->tx_off < total)
			continue;
		/* Fully sent: it waits for its acknowledgement. */
		s->tx_off = 0;
		s->txq = d->next;
		if (s->txq == NULL)
			s->txq_tail = NULL;
		d->next = NULL;
		if (s->wq_tail != NULL)
			s->wq_tail->next = d;
		else
			s->wq = d;
		s->wq_tail = d;
		s->inflight += d->len;
	}
	RTE_SET_USED(port);
	return work;
}

/* ---- receiving (both sides) ---- */

static int
resp_push(struct tcp_sock *s, uint8_t type, int status, uint64_t src,
	  uint32_t len)
{
	struct tcp_resp *r;

	if (s->resp_tail - s->resp_head == TCP_RESP_RING)
		return -ENOBUFS;
	r = &s->resp[s->resp_tail++ % TCP_RESP_RING];
	memset(r, 0, sizeof(*r));
	r->h.type = type;
	r->h.status = status;
	r->h.len = len;
	r->src = src;
	return 0;
}

/* Target: a whole header arrived; decide where its payload goes. */
static int
serve_header(struct kvt_port *port, struct tcp_sock *s)
{
	struct tcp_hdr *h = &s->rh;
	unsigned int tok;
	int ok;

	tcp_hdr_from_wire(h);
	if (tcp_request_check(h, &s->rx_left) < 0)
		return -EPROTO;	/* not a request, or absurd: hang up */
	s->rx_done = 0;
	s->rx_status = 0;
	if (h->type == F_WRITE) {
		tok = kvt_target_begin();
		ok = kvt_target_range(h->addr, h->len, KVT_MEM_REMOTE_WRITE) != NULL;
		kvt_target_end(tok);
		/* Out of range: the payload is read and dropped, the ack
		 * says why, the connection goes on. */
		s->rx_status = ok ? 0 : -ERANGE;
	}
	RTE_SET_USED(port);
	return 0;
}

/* Target: a request is complete; act and queue its response. */
static int
serve_frame(struct kvt_port *port, struct tcp_sock *s)
{
	struct tcp_hdr *h = &s->rh;
	uint8_t *p;
	unsigned int tok;
	int st = s->rx_status;

	switch (h->type) {
	case F_WRITE:
		if (st == 0)
			kvt_stat_add(&port->st.served_bytes, h->len);
		return resp_push(s, F_WRITE_ACK, st, 0, 0);
	case F_READ:
		tok = kvt_target_begin();
		p = h->aux <= TCP_MAX_FRAME ?
			kvt_target_range(h->addr, h->aux, KVT_MEM_REMOTE_READ) : NULL;
		kvt_target_end(tok);
		if (p == NULL)
			return resp_push(s, F_READ_DATA, -ERANGE, 0, 0);
		kvt_stat_add(&port->st.served_bytes, h->aux);
		return resp_push(s, F_READ_DATA, 0, h->addr, (uint32_t)h->aux);
	case F_FENCE:
		tok = kvt_target_begin();
		p = kvt_target_range(h->addr, 8, KVT_MEM_F_FENCE);
		/* A copy of a fence that already landed must not store
		 * again: the slot may have been armed anew since. */
		if (p != NULL && kvt_conn_tail_take(&s->conn->c, h->seq))
			__atomic_store_n((uint64_t *)p, h->aux, __ATOMIC_RELEASE);
		kvt_target_end(tok);
		return resp_push(s, F_FENCE_ACK, p != NULL ? 0 : -ERANGE, 0, 0);
	case F_NOTIFY:
		if (!kvt_conn_tail_take(&s->conn->c, h->seq))
			return resp_push(s, F_NOTIFY_ACK, 0, 0, 0);
		st = s->conn->inbox != NULL ?
			kvt_inbox_push(s->conn->inbox, s->small, h->len) : -ENOTSUP;
		if (st != 0)
			kvt_conn_tail_forget(&s->conn->c, h->seq);
		return resp_push(s, F_NOTIFY_ACK, st, 0, 0);
	}
	return -EPROTO;
}

/* Initiator: a whole response header arrived. */
static int
took_header(struct tcp_sock *s)
{
	struct kvt_desc *d = s->wq;
	struct tcp_hdr *h = &s->rh;
	static const uint8_t want[] = {
		[KVT_DESC_READ] = F_READ_DATA, [KVT_DESC_WRITE] = F_WRITE_ACK,
		[KVT_DESC_FENCE] = F_FENCE_ACK, [KVT_DESC_NOTIFY] = F_NOTIFY_ACK,
	};

	tcp_hdr_from_wire(h);
	if (d == NULL || d->op >= sizeof(want) ||
	    tcp_answer_check(h, want[d->op], d->len, &s->rx_left) < 0)
		return -EPROTO;	/* not the answer to our oldest request */
	s->rx_done = 0;
	return 0;
}

static void
took_frame(struct kvt_port *port, struct tcp_sock *s)
{
	struct kvt_desc *d = s->wq;

	s->wq = d->next;
	if (s->wq == NULL)
		s->wq_tail = NULL;
	s->inflight -= d->len;
	s->since = rte_get_tsc_cycles();
	RTE_SET_USED(port);
	kvt_desc_complete(d, tcp_wire_status(s->rh.status));
}

/*
 * Where the next payload bytes of the current frame go (target: into
 * place while the range is still exported, else the scratch; initiator:
 * the READ's buffer).  want is capped to what may be written there.
 * Called inside a target section on the target side.
 */
static uint8_t *
payload_dst(struct kvt_port *port, struct tcp_sock *s, uint32_t *want)
{
	struct tcp_port *tp = port->priv;
	struct tcp_hdr *h = &s->rh;
	uint8_t *dst;

	if (!s->server)
		return s->wq->local + s->rx_done;
	if (h->type == F_NOTIFY)
		return s->small + s->rx_done;
	/* Checked again each chunk: the region may have gone meanwhile. */
	dst = s->rx_status == 0 ?
		kvt_target_range(h->addr + s->rx_done, *want, KVT_MEM_REMOTE_WRITE) :
		NULL;
	if (dst != NULL)
		return dst;
	s->rx_status = s->rx_status != 0 ? s->rx_status : -ERANGE;
	*want = RTE_MIN(*want, (uint32_t)sizeof(tp->scratch));
	return tp->scratch;
}

/* Payload bytes n arrived; @return 1 when the frame is complete. */
static int
payload_took(struct tcp_sock *s, uint32_t n)
{
	s->rx_left -= n;
	s->rx_done += n;
	return s->rx_left == 0;
}

static int
frame_done(struct kvt_port *port, struct tcp_sock *s)
{
	int ret = 0;

	if (s->server)
		ret = serve_frame(port, s);
	else
		took_frame(port, s);
	s->rh_off = 0;
	return ret;
}

/* Header bytes are complete: act on it. */
static int
header_done(struct kvt_port *port, struct tcp_sock *s)
{
	int ret = s->server ? serve_header(port, s) : took_header(s);

	if (ret == 0 && s->rx_left == 0)
		ret = frame_done(port, s);
	return ret;
}

/* Take what the receive buffer holds. */
static int
consume(struct kvt_port *port, struct tcp_sock *s)
{
	uint32_t avail, n;
	unsigned int tok = 0;
	uint8_t *dst;
	int ret;

	while (s->rb_off < s->rb_len) {
		/* Target: keep the rest until our answers drain. */
		if (s->server && s->resp_tail - s->resp_head == TCP_RESP_RING)
			return 0;
		avail = s->rb_len - s->rb_off;
		if (s->rh_off < sizeof(s->rh)) {
			n = RTE_MIN(avail, (uint32_t)sizeof(s->rh) - s->rh_off);
			memcpy((uint8_t *)&s->rh + s->rh_off, s->rbuf + s->rb_off, n);
			s->rh_off += n;
			s->rb_off += n;
			if (s->rh_off == sizeof(s->rh)) {
				ret = header_done(port, s);
				if (ret < 0)
					return ret;
			}
			continue;
		}
		n = RTE_MIN(avail, s->rx_left);
		if (s->server)
			tok = kvt_target_begin();
		dst = payload_dst(port, s, &n);
		memcpy(dst, s->rbuf + s->rb_off, n);
		if (s->server)
			kvt_target_end(tok);
		s->rb_off += n;
		if (payload_took(s, n)) {
			ret = frame_done(port, s);
			if (ret < 0)
				return ret;
		}
	}
	return 0;
}

/*
 * Read what is there.  Headers and small frames come through a buffer,
 * so many acknowledgements cost one call; a large payload is received
 * straight into its destination.  @return work done or a negative errno.
 */
static int
sock_recv(struct kvt_port *port, struct tcp_sock *s)
{
	unsigned int tok = 0;
	uint32_t want;
	uint8_t *dst;
	ssize_t n;
	int work = 0, ret;

	for (;;) {
		if (s->rb_off < s->rb_len) {
			ret = consume(port, s);
			if (ret < 0)
				return ret;
		}
		/* Target: do not run ahead of what we can answer. */
		if (s->rb_off < s->rb_len ||
		    (s->server && s->resp_tail - s->resp_head == TCP_RESP_RING))
			return work;
		if (s->rh_off == sizeof(s->rh) && s->rx_left >= sizeof(s->rbuf)) {
			want = RTE_MIN(s->rx_left, TCP_CHUNK);
			if (s->server)
				tok = kvt_target_begin();
			dst = payload_dst(port, s, &want);
			n = recv(s->fd, dst, want, 0);
			if (s->server)
				kvt_target_end(tok);
			if (n > 0 && payload_took(s, (uint32_t)n)) {
				ret = frame_done(port, s);
				if (ret < 0)
					return ret;
			}
		} else {
			/* The target reads a header alone, so the WRITE payload
			 * behind it lands in place without a copy; the
			 * initiator buffers, as its frames are mostly acks. */
			n = recv(s->fd, s->rbuf, s->server && s->rh_off == 0 ?
				 sizeof(s->rh) : sizeof(s->rbuf), 0);
			if (n > 0) {
				s->rb_off = 0;
				s->rb_len = (uint32_t)n;
				ret = consume(port, s);
				if (ret < 0)
					return ret;
			}
		}
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? work : -errno;
		work++;
	}
}

/*
 * Target: answers without payload at the head of the queue go out
 * together, one call for many.  @return bytes sent (0: the head carries
 * data or was half sent), or -1 with errno.
 */
static ssize_t
send_acks(struct tcp_sock *s)
{
	struct tcp_hdr h[32];
	uint32_t i, n = 0, full;
	ssize_t sent;

	while (n < RTE_DIM(h) && s->resp_head + n != s->resp_tail) {
		const struct tcp_resp *r = &s->resp[(s->resp_head + n) % TCP_RESP_RING];

		if ((r->h.len != 0 && r->h.status == 0) || r->off != 0)
			break;
		h[n] = r->h;
		tcp_hdr_to_wire(&h[n]);
		n++;
	}
	if (n == 0)
		return 0;
	sent = send(s->fd, h, n * sizeof(h[0]), MSG_NOSIGNAL | MSG_DONTWAIT);
	if (sent <= 0)
		return sent < 0 ? -1 : 0;
	full = (uint32_t)((size_t)sent / sizeof(h[0]));
	s->resp_head += full;
	/* A header cut short continues through the general path. */
	if ((size_t)sent % sizeof(h[0]) != 0) {
		i = s->resp_head % TCP_RESP_RING;
		s->resp[i].off = (uint32_t)((size_t)sent % sizeof(h[0]));
	}
	return sent;
}

/* Target: send the responses owed, in order. */
static int
sock_respond(struct tcp_sock *s)
{
	struct tcp_resp *r;
	struct tcp_hdr h;
	struct iovec iov[2];
	uint32_t total;
	unsigned int tok;
	uint8_t *p = NULL;
	ssize_t n;
	int work = 0;

	while (s->resp_head != s->resp_tail) {
		n = send_acks(s);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? work : -errno;
		if (n > 0) {
			work++;
			continue;
		}
		r = &s->resp[s->resp_head % TCP_RESP_RING];
		h = r->h;
		total = (uint32_t)sizeof(h) + (r->h.status == 0 ? r->h.len : 0);
		tcp_hdr_to_wire(&h);
		tok = kvt_target_begin();
		if (r->h.len > 0 && r->h.status == 0) {
			p = kvt_target_range(r->src, r->h.len, KVT_MEM_REMOTE_READ);
			if (p == NULL && r->off == 0) {
				/* Gone before we sent it: answer that. */
				r->h.status = -ERANGE;
				r->h.len = 0;
				kvt_target_end(tok);
				continue;
			}
		}
		if (r->off < sizeof(h)) {
			iov[0].iov_base = (uint8_t *)&h + r->off;
			iov[0].iov_len = sizeof(h) - r->off;
			iov[1].iov_base = p;
			iov[1].iov_len = p != NULL ? RTE_MIN(r->h.len, TCP_CHUNK) : 0;
		} else {
			iov[0].iov_base = p != NULL ? p + (r->off - sizeof(h)) : NULL;
			iov[0].iov_len = RTE_MIN(total - r->off, TCP_CHUNK);
			iov[1].iov_len = 0;
		}
		n = p == NULL && r->off >= sizeof(h) ? -1 :
			sock_sendv(s->fd, iov, iov[1].iov_len != 0 ? 2 : 1);
		kvt_target_end(tok);
		if (n < 0)
			return p == NULL && r->off >= sizeof(h) ? -EIO :
				(errno == EAGAIN || errno == EINTR ? work : -errno);
		work++;
		r->off += (uint32_t)n;
		if (r->off == total)
			s->resp_head++;
	}
	return work;
}

/* ---- authentication of accepted sockets ---- */

static int
sock_auth(struct kvt_port *port, struct tcp_sock *s)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c;
	ssize_t n;

	n = recv(s->fd, (uint8_t *)&s->hello + s->hello_off,
		 sizeof(s->hello) - s->hello_off, 0);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	s->hello_off += (uint32_t)n;
	if (s->hello_off < sizeof(s->hello))
		return 1;
	if (rte_le_to_cpu_32(s->hello.magic) != TCP_HELLO_MAGIC)
		return -EPROTO;
	for (c = tp->accepted; c != NULL; c = c->next) {
		if (memcmp(c->token, s->hello.token, sizeof(c->token)) != 0)
			continue;
		/* More sockets than the initiator keeps: it dialled again
		 * after a link loss, and the oldest ones are dead. */
		if (c->nsocks == RTE_DIM(c->socks)) {
			c->socks[0]->conn = NULL;
			sock_close(port, c->socks[0], -ECONNRESET);
			conn_sock_del(c, 0);
		}
		s->conn = c;
		conn_sock_add(c, s);
		s->authed = 1;
		return 1;
	}
	TCP_LOG(WARNING, "port %s: a connection without a valid token refused",
		port->name);
	return -EACCES;
}

static void
accept_all(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	int fd;

	while ((fd = accept4(tp->lfd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		tune(fd, tp);
		if (sock_add(tp, fd, 1) == NULL)
			close(fd);
	}
}

/* ---- the lcore ---- */

static void
tcp_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n)
{
	struct tcp_conn *c;
	struct tcp_sock *s;
	unsigned int i;

	RTE_SET_USED(port);
	for (i = 0; i < n; i++) {
		c = (struct tcp_conn *)d[i]->conn;
		if (__atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE) || c->nsocks == 0) {
			kvt_desc_complete(d[i], -ECONNRESET);
			continue;
		}
		/* Fences and notifications follow the data on one stream;
		 * data slices go round the connections. */
		s = c->socks[d[i]->op == KVT_DESC_WRITE || d[i]->op == KVT_DESC_READ ?
			     c->rr++ % c->nsocks : 0];
		if (s->txq == NULL)
			s->since = rte_get_tsc_cycles();
		d[i]->next = NULL;
		if (s->txq_tail != NULL)
			s->txq_tail->next = d[i];
		else
			s->txq = d[i];
		s->txq_tail = d[i];
	}
}

/* Did the peer answer on its control connection after TSC time t? */
static int
heard_since(const struct kvt_conn *c, uint64_t t)
{
	uint64_t heard = kvt_conn_heard_us(c);
	uint64_t t_us = (uint64_t)((__uint128_t)t * 1000000 / rte_get_tsc_hz());

	return heard > t_us;
}

/* @return 0, or the error that fails what a stuck socket holds. */
static int
sock_stuck(const struct tcp_port *tp, const struct tcp_sock *s, uint64_t now)
{
	if (!s->authed)
		return now - s->since > rte_get_tsc_hz() / 1000000 * TCP_HELLO_US ?
			-ETIMEDOUT : 0;
	if (s->wq == NULL && s->txq == NULL)
		return 0;
	/* The peer was declared lost (no answer on the control
	 * connection): what waits here fails now, not a timeout later. */
	if (!s->server && s->conn != NULL &&
	    __atomic_load_n(&s->conn->c.dead, __ATOMIC_ACQUIRE))
		return -ECONNRESET;
	/* Waiting for an answer that does not come: the link is gone.  If
	 * the peer still answers on its control connection since this
	 * socket last moved, it is this link, and a quarter of the timeout
	 * is proof enough: its work moves to the live links sooner. */
	if (now - s->since > tp->timeout_tsc / 4 && s->conn != NULL &&
	    !s->server && heard_since(&s->conn->c, s->since))
		return -ETIMEDOUT;
	return now - s->since > tp->timeout_tsc ? -ETIMEDOUT : 0;
}

static unsigned int
tcp_poll(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	struct epoll_event ev[64];
	struct tcp_sock *s, *next;
	uint64_t now;
	unsigned int work = 0;
	int n, i, ret;

	if (tp->epfd < 0)
		return 0;
	n = epoll_wait(tp->epfd, ev, RTE_DIM(ev), 0);
	for (i = 0; i < n; i++) {
		s = ev[i].data.ptr;
		if (s == NULL) {
			accept_all(port);
			continue;
		}
		/* Before its hello a socket has one deadline, however
		 * slowly it dribbles bytes. */
		if (s->authed)
			s->since = rte_get_tsc_cycles();
		ret = s->authed ? sock_recv(port, s) : sock_auth(port, s);
		if (ret < 0)
			sock_close(port, s, ret == -EPROTO ? -EIO : -ECONNRESET);
		else
			work += (unsigned int)ret;
	}
	now = rte_get_tsc_cycles();
	for (s = tp->socks; s != NULL; s = next) {
		next = s->next;
		ret = 0;
		if (s->authed && s->server) {
			ret = sock_respond(s);
			/* Frames held back while answers were owed. */
			if (ret >= 0 && s->rb_off < s->rb_len)
				ret = sock_recv(port, s);
		} else if (s->authed) {
			ret = sock_send(port, s);
		}
		if (ret < 0) {
			sock_close(port, s, -ECONNRESET);
			continue;
		}
		work += (unsigned int)ret;
		ret = sock_stuck(tp, s, now);
		if (ret != 0)
			sock_close(port, s, ret);
	}
	return work;
}

/* ---- memory, endpoints, connections (control path) ---- */

static int
tcp_mem_register(struct kvt_port *port, struct kvt_lmem *m)
{
	RTE_SET_USED(port);
	return m->loc.type == KVT_LOC_CPU ? 0 : -ENOTSUP;
}

static int
tcp_mem_export(struct kvt_port *port, const struct kvt_lmem *m,
	       struct kvt_buf *key)
{
	RTE_SET_USED(port);
	RTE_SET_USED(m);
	RTE_SET_USED(key);
	return 0;	/* the target checks addresses itself: no key */
}

static int
tcp_rmem_import(struct kvt_conn *c, struct kvt_rmem *rm, const uint8_t *key,
		size_t len)
{
	RTE_SET_USED(c);
	RTE_SET_USED(key);
	RTE_SET_USED(len);
	return rm->loc.type == KVT_LOC_CPU ? 0 : -ENOTSUP;
}

static int
tcp_endpoint(struct kvt_port *port, struct kvt_buf *ep)
{
	struct tcp_port *tp = port->priv;
	struct tcp_ep e = {
		.ip = tp->addr.sin_addr.s_addr,
		.port = tp->addr.sin_port,
		.prefix = tp->prefix,
	};

	return kvt_buf_put(ep, &e, sizeof(e));
}

static int
same_subnet(uint32_t a, uint32_t b, uint8_t prefix)
{
	uint32_t mask = prefix == 0 ? 0 : htonl(~0u << (32 - prefix));

	return (a & mask) == (b & mask);
}

/* Is ip on the subnet of one of our ports?  Such an endpoint is that
 * port's direct match, and no routed pairing may take it. */
static int
direct_for_some_port(uint32_t ip)
{
	unsigned int i;

	for (i = 0; i < tcp_nports; i++)
		if (tcp_ports[i] != NULL &&
		    same_subnet(ip, tcp_ports[i]->addr.sin_addr.s_addr,
				tcp_ports[i]->prefix))
			return 1;
	return 0;
}

/* Does the kernel's route to ip leave through this port's interface?
 * (The source address it picks for ip is the port's own.)  A socket
 * bound to the port's device can only work then. */
static int
routed_through(const struct tcp_port *tp, uint32_t ip)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(9) };
	struct sockaddr_in src;
	socklen_t sl = sizeof(src);
	int fd, ok = 0;

	dst.sin_addr.s_addr = ip;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	if (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&src, &sl) == 0)
		ok = src.sin_addr.s_addr == tp->addr.sin_addr.s_addr;
	close(fd);
	return ok;
}

/*
 * The peer endpoint this port talks to: one on our subnet when there is
 * one (spreading our ports over theirs); else, on a routed network, one
 * whose route leaves through our interface and that no other port of
 * ours reaches directly; else none (-ENOTSUP: this port does not carry
 * data to that peer).
 */
static int
pick_ep(const struct kvt_port *port, const struct kvt_endpoint *eps,
	unsigned int neps, struct tcp_ep *out)
{
	const struct tcp_port *tp = port->priv;
	struct tcp_ep e;
	unsigned int i, k, cand[TCP_MAX_PORTS], nc = 0;

	for (i = 0; i < neps; i++) {
		if (eps[i].len != sizeof(e))
			continue;
		memcpy(&e, eps[i].blob, sizeof(e));
		if (same_subnet(e.ip, tp->addr.sin_addr.s_addr, tp->prefix) &&
		    nc < TCP_MAX_PORTS)
			cand[nc++] = i;
	}
	for (i = 0; nc == 0 && i < neps; i++) {
		if (eps[i].len != sizeof(e))
			continue;
		memcpy(&e, eps[i].blob, sizeof(e));
		if (!direct_for_some_port(e.ip) && routed_through(tp, e.ip))
			cand[nc++] = i;
	}
	if (nc == 0)
		return -ENOTSUP;
	k = cand[port->id % nc];
	memcpy(out, eps[k].blob, sizeof(*out));
	return (int)k;
}

static int
dial(const struct tcp_port *tp, const struct tcp_ep *e, uint64_t deadline)
{
	struct sockaddr_in src = tp->addr, dst = { .sin_family = AF_INET };
	struct pollfd pfd;
	socklen_t sl = sizeof(int);
	int fd, err = 0;

	dst.sin_addr.s_addr = e->ip;
	dst.sin_port = e->port;
	src.sin_port = 0;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	tune(fd, tp);
	if (bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0 ||
	    (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) != 0 &&
	     errno != EINPROGRESS)) {
		err = errno;
		goto fail;
	}
	pfd.fd = fd;
	pfd.events = POLLOUT;
	if (poll(&pfd, 1, kvt_now_us() >= deadline ? 0 :
		 (int)((deadline - kvt_now_us()) / 1000) + 1) <= 0) {
		err = ETIMEDOUT;
		goto fail;
	}
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
	if (err != 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -err;
}

static int
tcp_conn_open(struct kvt_port *port, const struct kvt_peer_info *pi,
	      const struct kvt_endpoint *eps, unsigned int neps,
	      struct kvt_buf *req, struct kvt_conn **out)
{
	struct tcp_conn *c;
	struct tcp_ep e;
	int k;

	RTE_SET_USED(pi);
	RTE_SET_USED(req);
	k = pick_ep(port, eps, neps, &e);
	if (k < 0)
		return k;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->c.remote_port = eps[k].port_id;
	c->ep = e;
	*out = &c->c;
	return 0;
}

static int
tcp_conn_accept(struct kvt_port *port, const struct kvt_accept *a,
		const uint8_t *req, size_t len, struct kvt_buf *rep,
		struct kvt_conn **out);

struct attach_arg {
	struct tcp_conn *c;
	int *fds;
	unsigned int n;
};

/* Lcore: adopt the dialled sockets. */
static int
attach_socks(struct kvt_port *port, void *arg)
{
	struct tcp_port *tp = port->priv;
	struct attach_arg *a = arg;
	struct tcp_sock *s;
	unsigned int i;

	for (i = 0; i < a->n; i++) {
		s = sock_add(tp, a->fds[i], 0);
		if (s == NULL)
			return -ENOMEM;
		s->conn = a->c;
		conn_sock_add(a->c, s);
		a->fds[i] = -1;
	}
	return 0;
}

/* The time one data connection may take to dial: a share of the peer
 * timeout, so one dead link cannot eat the whole peer open. */
static uint64_t
dial_budget_us(void)
{
	return RTE_MAX(250ull * kvt_pmd_env()->timeout_ms, 100000ull);
}

static int
tcp_conn_ready(struct kvt_conn *kc, const uint8_t *rep, size_t len)
{
	struct tcp_conn *c = (struct tcp_conn *)kc;
	struct kvt_port *port = kc->port;
	struct tcp_port *tp = port->priv;
	struct tcp_hello h = { .magic = rte_cpu_to_le_32(TCP_HELLO_MAGIC),
			       .version = rte_cpu_to_le_32(TCP_HELLO_VERSION) };
	uint64_t deadline = kvt_now_us() + dial_budget_us();
	struct attach_arg a = { .c = c };
	int fds[8], ret = 0;
	struct tcp_ep e;
	unsigned int i;

	if (len != sizeof(h.token))
		return -EPROTO;
	e = c->ep;
	memcpy(h.token, rep, sizeof(h.token));
	memcpy(c->token, rep, sizeof(c->token));
	for (i = 0; i < tp->conns; i++) {
		fds[i] = dial(tp, &e, deadline);
		if (fds[i] < 0) {
			ret = fds[i];
			break;
		}
		/* 24 bytes on a fresh connection: it goes out at once. */
		if (send(fds[i], &h, sizeof(h), MSG_NOSIGNAL) != sizeof(h)) {
			close(fds[i]);
			ret = -ECONNRESET;
			break;
		}
	}
	a.fds = fds;
	a.n = i;
	if (a.n > 0)
		ret = kvt_port_call(port, attach_socks, &a, 5000);
	for (i = 0; i < a.n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (ret == -ENOMEM)
		return ret;
	if (ret < 0) {
		/* The peer opens all the same when another path reaches it;
		 * this one is down until the control thread dials it. */
		TCP_LOG(WARNING, "port %s: cannot connect to %s:%u (%s): it stays down and is dialled again",
			port->name, inet_ntoa(*(struct in_addr *)&e.ip),
			ntohs(e.port), strerror(-ret));
		c->backoff_ms = TCP_BACKOFF_MIN_MS;
		c->redial_at_us = kvt_now_us() + c->backoff_ms * 1000ull;
	}
	if (__atomic_load_n(&c->nsocks, __ATOMIC_ACQUIRE) == 0)
		kvt_conn_set_down(kc, 1);
	pthread_mutex_lock(&tp->lock);
	c->dnext = tp->dialed;
	tp->dialed = c;
	pthread_mutex_unlock(&tp->lock);
	return 0;
}

/*
 * Control thread: a connection that lost sockets (a link went down) dials
 * again, one socket per tick, with a backoff while the link stays down,
 * so a link that comes back carries its share again.
 */
static void
redial(struct kvt_port *port, struct tcp_conn *c, uint64_t now)
{
	struct tcp_port *tp = port->priv;
	struct tcp_hello h = { .magic = rte_cpu_to_le_32(TCP_HELLO_MAGIC),
			       .version = rte_cpu_to_le_32(TCP_HELLO_VERSION) };
	struct attach_arg a = { .c = c, .n = 1 };
	int fd, ret;

	memcpy(h.token, c->token, sizeof(h.token));
	fd = dial(tp, &c->ep, now + TCP_REDIAL_US);
	ret = fd;
	if (fd >= 0)
		ret = send(fd, &h, sizeof(h), MSG_NOSIGNAL) == sizeof(h) ? 0 :
			-ECONNRESET;
	if (ret == 0) {
		a.fds = &fd;	/* -1 once the lcore adopted it */
		ret = kvt_port_call(port, attach_socks, &a, 5000);
	}
	if (fd >= 0)
		close(fd);
	if (ret < 0) {
		c->backoff_ms = RTE_MIN(RTE_MAX(c->backoff_ms * 2, TCP_BACKOFF_MIN_MS),
					TCP_BACKOFF_MAX_MS);
		c->redial_at_us = kvt_now_us() + c->backoff_ms * 1000ull;
		return;
	}
	if (c->backoff_ms != 0)
		TCP_LOG(NOTICE, "port %s: connected to %s again", port->name,
			c->c.info.name);
	c->backoff_ms = 0;
	kvt_conn_set_down(&c->c, 0);
}

static void
tcp_ctl_tick(struct kvt_port *port, uint64_t now)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c;

	pthread_mutex_lock(&tp->lock);
	for (c = tp->dialed; c != NULL; c = c->dnext)
		if (!__atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE) &&
		    __atomic_load_n(&c->nsocks, __ATOMIC_ACQUIRE) < tp->conns &&
		    now >= c->redial_at_us)
			redial(port, c, now);
	pthread_mutex_unlock(&tp->lock);
}

/* Lcore: let go of a connection's sockets and of its token. */
static int
detach_conn(struct kvt_port *port, void *arg)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c = arg, **pp;
	struct tcp_sock *s;

	while (c->nsocks > 0) {
		s = c->socks[c->nsocks - 1];
		conn_sock_del(c, c->nsocks - 1);
		s->conn = NULL;
		sock_close(port, s, -ECONNRESET);
	}
	for (pp = &tp->accepted; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	return 0;
}

static int
register_token(struct kvt_port *port, void *arg)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c = arg;

	c->next = tp->accepted;
	tp->accepted = c;
	return 0;
}

static int
tcp_conn_accept(struct kvt_port *port, const struct kvt_accept *a,
		const uint8_t *req, size_t len, struct kvt_buf *rep,
		struct kvt_conn **out)
{
	struct tcp_conn *c;
	size_t sz = RTE_ALIGN_CEIL(kvt_inbox_size(256), 64);
	int ret;

	RTE_SET_USED(req);
	RTE_SET_USED(len);
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	kvt_conn_accept_init(&c->c, port, a);
	if (getrandom(c->token, sizeof(c->token), 0) != sizeof(c->token)) {
		free(c);
		return -EIO;
	}
	c->inbox = aligned_alloc(64, sz);
	if (c->inbox == NULL) {
		free(c);
		return -ENOMEM;
	}
	kvt_inbox_init(c->inbox, 256);
	ret = kvt_inbox_attach(c->inbox, a->info.name);
	if (ret == 0)
		ret = kvt_port_call(port, register_token, c, 5000);
	if (ret == 0)
		ret = kvt_buf_put(rep, c->token, sizeof(c->token));
	if (ret < 0) {
		kvt_inbox_detach(c->inbox);
		free(c->inbox);
		free(c);
		return ret;
	}
	*out = &c->c;
	return 0;
}

static void
free_inbox(void *arg)
{
	free(arg);
}

static void
tcp_conn_close(struct kvt_conn *kc)
{
	struct tcp_conn *c = (struct tcp_conn *)kc;
	struct tcp_port *tp = kc->port->priv;
	struct tcp_conn **pp;

	pthread_mutex_lock(&tp->lock);
	for (pp = &tp->dialed; *pp != NULL; pp = &(*pp)->dnext)
		if (*pp == c) {
			*pp = c->dnext;
			break;
		}
	pthread_mutex_unlock(&tp->lock);
	kvt_port_call(kc->port, detach_conn, c, 5000);
	if (c->inbox != NULL)
		kvt_inbox_retire(c->inbox, free_inbox, c->inbox);
	free(c);
}

static void
tcp_stop(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	struct tcp_sock *s;
	struct tcp_conn *c;
	unsigned int i;

	/* Every socket goes: its slices fail here rather than move to a
	 * sibling, and its connection forgets it (a peer closed after the
	 * ports stopped detaches what is left). */
	while ((s = tp->socks) != NULL) {
		c = s->conn;
		for (i = 0; c != NULL && i < c->nsocks; i++)
			if (c->socks[i] == s)
				conn_sock_del(c, i);
		s->conn = NULL;
		sock_close(port, s, -ECANCELED);
	}
}

static void
tcp_remove(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	unsigned int i;

	for (i = 0; i < tcp_nports; i++)
		if (tcp_ports[i] == tp)
			tcp_ports[i] = tcp_ports[--tcp_nports];

	if (tp->lfd >= 0)
		close(tp->lfd);
	if (tp->epfd >= 0)
		close(tp->epfd);
	pthread_mutex_destroy(&tp->lock);
	free(tp);
}

static const struct kvt_pmd_ops tcp_ops = {
	.flags = KVT_PMD_F_ONCE,
	.rank = 10,
	.probe = tcp_probe,
	.start = tcp_start,
	.stop = tcp_stop,
	.remove = tcp_remove,
	.submit = tcp_submit,
	.poll = tcp_poll,
	.mem_register = tcp_mem_register,
	.mem_export = tcp_mem_export,
	.endpoint = tcp_endpoint,
	.ctl_tick = tcp_ctl_tick,
	.conn_open = tcp_conn_open,
	.conn_accept = tcp_conn_accept,
	.conn_ready = tcp_conn_ready,
	.conn_close = tcp_conn_close,
	.rmem_import = tcp_rmem_import,
};

KVT_PMD_REGISTER(tcp, tcp_ops);
