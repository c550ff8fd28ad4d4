/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp on the lcore: each port's non-blocking sockets, driven by one
 * epoll.  The initiator's frames go out in order and wait for their
 * acknowledgements; received bytes are parsed as frames on both sides
 * (the target's are served in tcp_target.c).
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
				d->next = NULL;
				if (alt->txq_tail != NULL)
					alt->txq_tail->next = d;
				else
					alt->txq = d;
				alt->txq_tail = d;
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
		epoll_ctl(tp->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
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
	uint32_t plen, total, sent = 0;
	ssize_t n;
	int work = 0;

	while ((d = s->txq) != NULL && s->inflight < TCP_MAX_INFLIGHT &&
	       sent < TCP_POLL_BUDGET) {
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
		n = tcp_sock_sendv(s->fd, iov, iov[1].iov_len != 0 ? 2 : 1);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? work : -errno;
		work++;
		sent += (uint32_t)n;
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
	kvt_desc_complete(port, d, tcp_wire_status(s->rh.status));
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
		ret = tcp_serve_frame(port, s);
	else
		took_frame(port, s);
	s->rh_off = 0;
	return ret;
}

/* Header bytes are complete: act on it. */
static int
header_done(struct kvt_port *port, struct tcp_sock *s)
{
	int ret = s->server ? tcp_serve_header(port, s) : took_header(s);

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
	uint32_t want, got = 0;
	uint8_t *dst;
	ssize_t n;
	int work = 0, ret;

	for (; got < TCP_POLL_BUDGET; got += (uint32_t)n) {
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
	return work;
}

static void
accept_all(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	int fd;

	while ((fd = accept4(tp->lfd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		tcp_tune(fd, tp);
		if (tcp_sock_add(tp, fd, 1) == NULL)
			close(fd);
	}
}

/* ---- the lcore ---- */

/*
 * Urgent work goes on the connection's last socket, which nothing else
 * uses while it has two or more: a large slice in another socket's send
 * buffer (megabytes, in the kernel) cannot hold it up.  Data slices go
 * round the other sockets; fences and notifications take the first (the
 * engine sends them only after the data they follow completed).
 */
static struct tcp_sock *
pick_sock(struct tcp_conn *c, const struct kvt_desc *d)
{
	unsigned int n = c->nsocks > 1 ? c->nsocks - 1 : 1;

	if (d->prio == KVT_PRIO_URGENT)
		return c->socks[c->nsocks - 1];
	if (d->op == KVT_DESC_WRITE || d->op == KVT_DESC_READ)
		return c->socks[c->rr++ % n];
	return c->socks[0];
}

void
tcp_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n)
{
	struct tcp_conn *c;
	struct tcp_sock *s;
	unsigned int i;

	for (i = 0; i < n; i++) {
		c = (struct tcp_conn *)d[i]->conn;
		if (__atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE) || c->nsocks == 0) {
			kvt_desc_complete(port, d[i], -ECONNRESET);
			continue;
		}
		s = pick_sock(c, d[i]);
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

unsigned int
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
		ret = s->authed ? sock_recv(port, s) : tcp_sock_auth(port, s);
		if (ret < 0)
			tcp_sock_close(port, s, ret == -EPROTO ? -EIO : -ECONNRESET);
		else
			work += (unsigned int)ret;
	}
	now = rte_get_tsc_cycles();
	for (s = tp->socks; s != NULL; s = next) {
		next = s->next;
		ret = 0;
		if (s->authed && s->server) {
			ret = tcp_sock_respond(s);
			/* Frames held back while answers were owed. */
			if (ret >= 0 && s->rb_off < s->rb_len)
				ret = sock_recv(port, s);
		} else if (s->authed) {
			ret = sock_send(port, s);
		}
		if (ret < 0) {
			tcp_sock_close(port, s, -ECONNRESET);
			continue;
		}
		work += (unsigned int)ret;
		ret = sock_stuck(tp, s, now);
		if (ret != 0)
			tcp_sock_close(port, s, ret);
	}
	return work;
}

/* Does s wait for room in its socket buffer (not for acks)? */
static int
sock_blocked(const struct tcp_sock *s)
{
	if (!s->authed)
		return 0;
	if (s->server)
		return s->resp_head != s->resp_tail;
	return s->txq != NULL && s->inflight < TCP_MAX_INFLIGHT;
}

/*
 * The port's epoll set wakes a waiting lcore: frames, answers and new
 * connections come in on it (EPOLLIN); a socket whose sends blocked asks
 * for EPOLLOUT until they went.  Work in flight keeps the timers that
 * sock_stuck() runs.
 */
uint64_t
tcp_idle(struct kvt_port *port, int *fd)
{
	struct tcp_port *tp = port->priv;
	struct epoll_event ev = { 0 };
	uint64_t us = KVT_IDLE_FOREVER;
	uint64_t tick_us = (uint64_t)kvt_pmd_env()->timeout_ms * 1000 / 8;
	struct tcp_sock *s;
	int out;

	*fd = tp->epfd;
	for (s = tp->socks; s != NULL; s = s->next) {
		out = sock_blocked(s);
		if (out != s->want_out) {
			ev.events = EPOLLIN | (out ? EPOLLOUT : 0);
			ev.data.ptr = s;
			if (epoll_ctl(tp->epfd, EPOLL_CTL_MOD, s->fd, &ev) != 0)
				return 0;	/* cannot be woken: keep polling */
			s->want_out = out;
		}
		if (!s->authed)
			us = RTE_MIN(us, (uint64_t)TCP_HELLO_US / 8);
		else if (s->wq != NULL || s->txq != NULL)
			us = RTE_MIN(us, RTE_MAX(tick_us, 1000u));
	}
	return us;
}
