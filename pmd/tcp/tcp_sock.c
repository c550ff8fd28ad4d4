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
		d->next = NULL;
		if (s->wq_tail != NULL)
			s->wq_tail->next = d;
		else
			s->wq = d;
		s->wq_tail = d;
		s->inflight += d->len;
	}
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
 * Is the payload to come received straight into its destination?  On the
 * target always: its memory is written by the kernel alone, so a range
 * that was unmapped under its registration fails a request (EFAULT),
 * never the process.  On the initiator (READ answers into our own
 * buffers) when it is large.
 */
static int
straight(const struct tcp_sock *s)
{
	if (s->rh_off != sizeof(s->rh))
		return 0;
	return s->server ? s->rx_left > 0 && s->rh.type == F_WRITE :
		s->rx_left >= sizeof(s->rbuf);
}

/* Target: the bytes of the frame at hand still to come through the
 * buffer: the rest of its header, or of a notification's payload. */
static uint32_t
frame_rest(const struct tcp_sock *s)
{
	return s->rh_off < sizeof(s->rh) ? (uint32_t)sizeof(s->rh) - s->rh_off :
		s->rx_left;
}

/*
 * Read what is there.  Headers and small frames come through a buffer,
 * so many acknowledgements cost one call; a payload into memory is
 * received straight into its destination (straight()).
 */
int
tcp_sock_recv(struct kvt_port *port, struct tcp_sock *s, uint32_t *budget)
{
	unsigned int tok = 0;
	uint32_t want;
	uint8_t *dst;
	ssize_t n;
	int work = 0, ret;

	while (*budget > 0) {
		if (s->rb_off < s->rb_len) {
			ret = consume(port, s);
			if (ret < 0)
				return ret;
		}
		/* Target: do not run ahead of what we can answer. */
		if (s->rb_off < s->rb_len ||
		    (s->server && s->resp_tail - s->resp_head == TCP_RESP_RING))
			return work;
		if (straight(s)) {
			want = RTE_MIN(RTE_MIN(s->rx_left, TCP_CHUNK), *budget);
			if (s->server)
				tok = kvt_target_begin();
			dst = payload_dst(port, s, &want);
			n = recv(s->fd, dst, want, 0);
			if (s->server)
				kvt_target_end(tok);
			/* The range was unmapped under its registration: the
			 * rest goes to the scratch (nothing was taken from
			 * the socket) and the answer says why. */
			if (n < 0 && errno == EFAULT && s->server && s->rx_status == 0) {
				s->rx_status = -EFAULT;
				continue;
			}
			if (n > 0 && payload_took(s, (uint32_t)n)) {
				ret = frame_done(port, s);
				if (ret < 0)
					return ret;
			}
		} else {
			/* The target reads no further than the frame at hand
			 * (a header, a notification), so a WRITE payload is
			 * never in the buffer; the initiator buffers, as its
			 * frames are mostly acks. */
			n = recv(s->fd, s->rbuf, s->server ? frame_rest(s) :
				 sizeof(s->rbuf), 0);
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
		tcp_spend(budget, (size_t)n);
		work++;
	}
	return work;
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
		d[i]->next = NULL;
		if (s->txq_tail != NULL)
			s->txq_tail->next = d[i];
		else
			s->txq = d[i];
		s->txq_tail = d[i];
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
