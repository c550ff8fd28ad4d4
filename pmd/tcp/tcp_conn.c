/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp connections (control path): which of the peer's endpoints a port
 * dials, the sockets of a connection, the tokens accepted connections
 * are known by, and redialling sockets that were lost.
 */
#define _GNU_SOURCE
#include "tcp.h"


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
 * one (spreading our ports over theirs, and engines over the ports of a
 * peer that has several on one interface: many initiators into one
 * target then land on all its lcores); else, on a routed network, one
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
	k = cand[(port->id + (unsigned int)getpid()) % nc];
	memcpy(out, eps[k].blob, sizeof(*out));
	return (int)k;
}

/* Start a non-blocking connect from tp to e: @return the socket (the
 * connect in progress), or -errno. */
static int
dial_begin(const struct tcp_port *tp, const struct tcp_ep *e)
{
	struct sockaddr_in src = tp->addr, dst = { .sin_family = AF_INET };
	int fd, err;

	dst.sin_addr.s_addr = e->ip;
	dst.sin_port = e->port;
	src.sin_port = 0;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	tcp_tune(fd, tp);
	if (bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0 ||
	    (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) != 0 &&
	     errno != EINPROGRESS)) {
		err = errno;
		close(fd);
		return -err;
	}
	return fd;
}

static int
dial(const struct tcp_port *tp, const struct tcp_ep *e, uint64_t deadline)
{
	int fd, ret;

	fd = dial_begin(tp, e);
	if (fd < 0)
		return fd;
	ret = kvt_connect_wait(fd, deadline);
	if (ret == 0)
		return fd;
	close(fd);
	return ret;
}

int
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
	c->dial_fd = -1;
	*out = &c->c;
	return 0;
}

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
		s = tcp_sock_add(tp, a->fds[i], 0);
		if (s == NULL)
			return -ENOMEM;
		s->conn = a->c;
		tcp_conn_sock_add(a->c, s);
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

int
tcp_conn_ready(struct kvt_conn *kc, const uint8_t *rep, size_t len)
{
	struct tcp_conn *c = (struct tcp_conn *)kc;
	struct kvt_port *port = kc->port;
	struct tcp_port *tp = port->priv;
	struct tcp_hello h = { .magic = rte_cpu_to_le_32(TCP_HELLO_MAGIC),
			       .version = rte_cpu_to_le_32(TCP_HELLO_VERSION) };
	uint64_t deadline = kvt_now_us() + dial_budget_us();
	struct attach_arg a = { .c = c };
	int fds[TCP_CONN_SOCKS], ret = 0;
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

static void
redial_later(struct tcp_conn *c)
{
	if (c->dial_fd >= 0)
		close(c->dial_fd);
	c->dial_fd = -1;
	c->backoff_ms = RTE_MIN(RTE_MAX(c->backoff_ms * 2, TCP_BACKOFF_MIN_MS),
				TCP_BACKOFF_MAX_MS);
	c->redial_at_us = kvt_now_us() + c->backoff_ms * 1000ull;
}

/*
 * Control thread: a connection that lost sockets (a link went down) dials
 * again, one socket at a time, with a backoff while the link stays down,
 * so a link that comes back carries its share again.  The connect runs
 * while the thread goes on (it is looked at each tick), and the lcore is
 * given TCP_CALL_MS to adopt the socket: a dead link or a busy lcore
 * never holds up the pings.
 */
static void
redial(struct kvt_port *port, struct tcp_conn *c, uint64_t now)
{
	struct tcp_port *tp = port->priv;
	struct tcp_hello h = { .magic = rte_cpu_to_le_32(TCP_HELLO_MAGIC),
			       .version = rte_cpu_to_le_32(TCP_HELLO_VERSION) };
	struct attach_arg a = { .c = c, .n = 1 };
	int ret;

	if (c->dial_fd < 0) {
		ret = dial_begin(tp, &c->ep);
		if (ret < 0) {
			redial_later(c);
			return;
		}
		c->dial_fd = ret;
		c->dial_until_us = now + dial_budget_us();
	}
	ret = kvt_connect_wait(c->dial_fd, 0);
	if (ret == -ETIMEDOUT && now < c->dial_until_us)
		return;		/* still connecting */
	memcpy(h.token, c->token, sizeof(h.token));
	if (ret == 0)
		ret = send(c->dial_fd, &h, sizeof(h), MSG_NOSIGNAL) == sizeof(h) ?
			0 : -ECONNRESET;
	if (ret == 0) {
		a.fds = &c->dial_fd;	/* -1 once the lcore adopted it */
		ret = kvt_port_call(port, attach_socks, &a, TCP_CALL_MS);
	}
	if (ret != 0) {
		redial_later(c);
		return;
	}
	if (c->backoff_ms != 0)
		TCP_LOG(NOTICE, "port %s: connected to %s again", port->name,
			c->c.info.name);
	c->backoff_ms = 0;
	kvt_conn_set_down(&c->c, 0);
}

void
tcp_ctl_tick(struct kvt_port *port, uint64_t now)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c;

	pthread_mutex_lock(&tp->lock);
	for (c = tp->dialed; c != NULL; c = c->dnext) {
		if (__atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE) ||
		    tcp_retire_tick(port, c, now))
			continue;
		if ((__atomic_load_n(&c->nsocks, __ATOMIC_ACQUIRE) < tp->conns &&
		     now >= c->redial_at_us) || c->dial_fd >= 0)
			redial(port, c, now);
	}
	pthread_mutex_unlock(&tp->lock);
}

/* Lcore: let go of a connection's sockets and of its token. */
static int
detach_conn(struct kvt_port *port, void *arg)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c = arg, **pp;

	tcp_conn_close_socks(port, c, -ECONNRESET);
	if (c->held != NULL || c->rnext != NULL || tp->retiring == c)
		tcp_conn_release(port, c, 0, -ECONNRESET);
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

int
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
	c->server = 1;
	c->dial_fd = -1;
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

void
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
	if (c->dial_fd >= 0)
		close(c->dial_fd);
	kvt_port_call(kc->port, detach_conn, c, 0);
	if (c->inbox != NULL)
		kvt_inbox_retire(c->inbox, free_inbox, c->inbox);
	free(c);
}
