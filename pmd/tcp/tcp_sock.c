/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp on the lcore: each port's non-blocking sockets, driven by one
 * epoll, and their lanes.  The initiator's frames go out in order and
 * wait for their acknowledgements (tcp_recv.c reads those).  The bottom
 * of the PMD: it calls no other file of it but tcp_wire.c.
 */
#define _GNU_SOURCE
#include "tcp.h"


/*
 * A connection's socket list belongs to the lcore; the control thread
 * only reads how many sockets it has (to redial), so the count is
 * published with an atomic store.
 */
void
tcp_conn_sock_add(struct tcp_conn *c, struct tcp_sock *s)
{
	c->socks[c->nsocks] = s;
	__atomic_store_n(&c->nsocks, c->nsocks + 1, __ATOMIC_RELEASE);
}

void
tcp_conn_sock_del(struct tcp_conn *c, unsigned int i)
{
	unsigned int n = c->nsocks - 1;

	c->socks[i] = c->socks[n];
	__atomic_store_n(&c->nsocks, n, __ATOMIC_RELEASE);
}

/* ---- sockets ---- */

struct tcp_sock *
tcp_sock_add(struct tcp_port *tp, int fd, int server)
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

void
tcp_conn_close_socks(struct kvt_port *port, struct tcp_conn *c, int err)
{
	struct tcp_sock *s;

	while (c->nsocks > 0) {
		s = c->socks[c->nsocks - 1];
		tcp_conn_sock_del(c, c->nsocks - 1);
		s->conn = NULL;
		tcp_sock_close(port, s, err);
	}
}

/* Fail what a dying socket held, or move its data slices to another
 * connection of the same peer. */
static void
sock_drain(struct kvt_port *port, struct tcp_sock *s, int err)
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
				kvt_desc_append(&alt->txq, &alt->txq_tail, d);
			} else {
				kvt_desc_complete(port, d, err);
			}
		}
	}
}

void
tcp_sock_close(struct kvt_port *port, struct tcp_sock *s, int err)
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
		epoll_ctl(s->urgent ? tp->uepfd : tp->epfd, EPOLL_CTL_DEL,
			  s->fd, NULL);
		tp->nurgent -= s->urgent ? 1 : 0;
		s->urgent = 0;
		tcp_fd_abort(s->fd);
		s->fd = -1;
	}
	if (c != NULL) {
		for (i = 0; i < c->nsocks; i++)
			if (c->socks[i] == s)
				tcp_conn_sock_del(c, i);
		/* No socket left: new slices go to other links until the
		 * control thread dials this one again. */
		if (c->nsocks == 0 && !c->c.accepted)
			kvt_conn_set_down(&c->c, 1);
	}
	s->conn = c;	/* kept for sock_drain's alternative */
	sock_drain(port, s, err);
	for (pp = &tp->socks; *pp != NULL; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			tp->nsocks--;
			break;
		}
	free(s);
}

/*
 * Close fd abortively (SO_LINGER 0): the kernel drops what it still
 * queues to send and answers the other end with a reset.  A plain close
 * would deliver those frames whenever the link comes back, after their
 * work has moved elsewhere and newer writes landed.
 */
void
tcp_fd_abort(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

/*
 * Every send goes through here: MSG_NOSIGNAL, so a peer that closed its
 * end yields EPIPE instead of killing this process with SIGPIPE (a
 * library must not touch the application's signal dispositions).
 */
ssize_t
tcp_sock_sendv(int fd, struct iovec *iov, unsigned int n)
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
	h->flags = d->prio == KVT_PRIO_URGENT ? TCP_F_URGENT : 0;
}

static const void *
payload_of(const struct kvt_desc *d)
{
	return d->op == KVT_DESC_NOTIFY ? d->data : d->local;
}

int
tcp_sock_send(struct tcp_sock *s, uint32_t *budget)
{
	struct tcp_hdr h;
	struct iovec iov[2];
	struct kvt_desc *d;
	uint32_t plen, total, cap;
	ssize_t n;
	int work = 0;

	while ((d = s->txq) != NULL && s->inflight < TCP_MAX_INFLIGHT &&
	       *budget > 0) {
		frame_of(d, &h);
		plen = h.type == F_WRITE || h.type == F_NOTIFY ? h.len : 0;
		tcp_hdr_to_wire(&h);
		total = (uint32_t)sizeof(h) + plen;
		cap = RTE_MIN(*budget, TCP_CHUNK);
		if (s->tx_off < sizeof(h)) {
			iov[0].iov_base = (uint8_t *)&h + s->tx_off;
			iov[0].iov_len = sizeof(h) - s->tx_off;
			iov[1].iov_base = (void *)(uintptr_t)payload_of(d);
			iov[1].iov_len = RTE_MIN(plen, cap);
		} else {
			iov[0].iov_base = (uint8_t *)(uintptr_t)payload_of(d) +
				(s->tx_off - sizeof(h));
			iov[0].iov_len = RTE_MIN(total - s->tx_off, cap);
			iov[1].iov_len = 0;
		}
		n = tcp_sock_sendv(s->fd, iov, iov[1].iov_len != 0 ? 2 : 1);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? work : -errno;
		work++;
		tcp_spend(budget, (size_t)n);
		s->tx_off += (uint32_t)n;
		if (s->tx_off < total)
			continue;
		/* Fully sent: it waits for its acknowledgement. */
		s->tx_off = 0;
		s->txq = d->next;
		if (s->txq == NULL)
			s->txq_tail = NULL;
		kvt_desc_append(&s->wq, &s->wq_tail, d);
		s->inflight += d->len;
	}
	return work;
}

/* Socket options for a data socket of tp. */
void
tcp_tune(int fd, const struct tcp_port *tp)
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

void
tcp_port_hot(struct tcp_port *tp)
{
	tp->hot_until = rte_get_tsc_cycles() +
		rte_get_tsc_hz() / 1000000 * TCP_HOT_US;
}

int
tcp_sock_lane(struct tcp_port *tp, struct tcp_sock *s, int on)
{
	struct epoll_event ev = {
		.events = EPOLLIN | (s->want_out ? EPOLLOUT : 0),
		.data.ptr = s,
	};

	if (s->urgent == on || s->fd < 0)
		return 0;
	if (epoll_ctl(on ? tp->uepfd : tp->epfd, EPOLL_CTL_ADD, s->fd, &ev) != 0)
		return -errno;
	epoll_ctl(on ? tp->epfd : tp->uepfd, EPOLL_CTL_DEL, s->fd, NULL);
	s->urgent = on;
	if (on)
		tp->nurgent++;
	else
		tp->nurgent--;
	return 0;
}

/* ---- the lcore ---- */

/*
 * Urgent work goes on the connection's last socket, its urgent lane, which
 * nothing else uses while it has two or more: a large slice in another
 * socket's send buffer (megabytes, in the kernel) cannot hold it up, and
 * the lane is served ahead of the data sockets on both ends (tcp_poll.c).
 * Data slices go round the other sockets; fences and notifications take
 * the first (the engine sends them only after the data they follow
 * completed).
 */
static struct tcp_sock *
pick_sock(struct tcp_port *tp, struct tcp_conn *c, const struct kvt_desc *d)
{
	unsigned int n = c->nsocks > 1 ? c->nsocks - 1 : 1;
	struct tcp_sock *s;

	if (d->prio == KVT_PRIO_URGENT)
		s = c->socks[c->nsocks - 1];
	else if (d->op == KVT_DESC_WRITE || d->op == KVT_DESC_READ)
		s = c->socks[c->rr++ % n];
	else
		s = c->socks[0];
	/* The lane moves when sockets come and go; a failed move only
	 * costs its place in the order. */
	tcp_sock_lane(tp, s, d->prio == KVT_PRIO_URGENT && c->nsocks > 1);
	return s;
}

void
tcp_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n)
{
	struct tcp_conn *c;
	struct tcp_sock *s;
	uint32_t budget;
	unsigned int i;

	for (i = 0; i < n; i++) {
		c = (struct tcp_conn *)d[i]->conn;
		if (__atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE) || c->nsocks == 0) {
			kvt_desc_complete(port, d[i], -ECONNRESET);
			continue;
		}
		s = pick_sock(port->priv, c, d[i]);
		if (s->txq == NULL)
			s->since = rte_get_tsc_cycles();
		kvt_desc_append(&s->txq, &s->txq_tail, d[i]);
		/* An urgent frame leaves now, not at the next poll; a
		 * broken socket is found and closed there. */
		if (d[i]->prio != KVT_PRIO_URGENT)
			continue;
		tcp_port_hot(port->priv);
		budget = ((struct tcp_port *)port->priv)->slice;
		if (s->urgent)
			(void)tcp_sock_send(s, &budget);
	}
}
