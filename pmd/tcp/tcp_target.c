/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp, the target's side: every frame a peer sends is checked against the
 * regions exported here (kvt_target_range()) before any byte of memory is
 * touched, answered in order once done, and a data socket must present
 * the token the control handshake issued before any frame is served.
 */
#define _GNU_SOURCE
#include "tcp.h"


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
int
tcp_serve_header(struct kvt_port *port, struct tcp_sock *s)
{
	struct tcp_hdr *h = &s->rh;
	unsigned int tok;
	int ok;

	tcp_hdr_from_wire(h);
	if (tcp_request_check(h, &s->rx_left) < 0)
		return -EPROTO;	/* not a request, or absurd: hang up */
	/* The initiator's urgent lane: served first from now on (a
	 * failed move only costs its place in the order). */
	tcp_sock_lane(port->priv, s, !!(h->flags & TCP_F_URGENT));
	if (h->flags & TCP_F_URGENT)
		tcp_port_hot(port->priv);
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
	return 0;
}

/* Target: a request is complete; act and queue its response. */
int
tcp_serve_frame(struct kvt_port *port, struct tcp_sock *s)
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
		/* A range unmapped under its registration is answered
		 * so, rather than found half way through the answer. */
		if (!kvt_host_mapped(p, h->aux))
			return resp_push(s, F_READ_DATA, -EFAULT, 0, 0);
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
int
tcp_sock_respond(struct tcp_sock *s, uint32_t *budget)
{
	struct tcp_resp *r;
	struct tcp_hdr h;
	struct iovec iov[2];
	uint32_t total;
	unsigned int tok;
	uint8_t *p = NULL;
	ssize_t n;
	uint32_t cap;
	int work = 0;

	while (s->resp_head != s->resp_tail && *budget > 0) {
		n = send_acks(s);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? work : -errno;
		if (n > 0) {
			tcp_spend(budget, (size_t)n);
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
		cap = RTE_MIN(*budget, TCP_CHUNK);
		if (r->off < sizeof(h)) {
			iov[0].iov_base = (uint8_t *)&h + r->off;
			iov[0].iov_len = sizeof(h) - r->off;
			iov[1].iov_base = p;
			iov[1].iov_len = p != NULL ? RTE_MIN(r->h.len, cap) : 0;
		} else {
			iov[0].iov_base = p != NULL ? p + (r->off - sizeof(h)) : NULL;
			iov[0].iov_len = RTE_MIN(total - r->off, cap);
			iov[1].iov_len = 0;
		}
		n = p == NULL && r->off >= sizeof(h) ? -1 :
			tcp_sock_sendv(s->fd, iov, iov[1].iov_len != 0 ? 2 : 1);
		kvt_target_end(tok);
		if (n < 0)
			return p == NULL && r->off >= sizeof(h) ? -EIO :
				(errno == EAGAIN || errno == EINTR ? work : -errno);
		work++;
		tcp_spend(budget, (size_t)n);
		r->off += (uint32_t)n;
		if (r->off == total)
			s->resp_head++;
	}
	return work;
}

/* ---- authentication of accepted sockets ---- */

int
tcp_sock_auth(struct kvt_port *port, struct tcp_sock *s)
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
			tcp_sock_close(port, c->socks[0], -ECONNRESET);
			tcp_conn_sock_del(c, 0);
		}
		s->conn = c;
		tcp_conn_sock_add(c, s);
		s->authed = 1;
		return 1;
	}
	TCP_LOG(WARNING, "port %s: a connection without a valid token refused",
		port->name);
	return -EACCES;
}
