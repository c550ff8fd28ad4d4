/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp on the lcore: received bytes parsed as frames, on both sides.  An
 * initiator's answers complete its oldest request; a target's requests
 * are served in tcp_target.c.  Headers and small frames come through a
 * buffer, payloads into memory straight into place.
 */
#define _GNU_SOURCE
#include "tcp.h"

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
frame_received(struct kvt_port *port, struct tcp_sock *s)
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
header_received(struct kvt_port *port, struct tcp_sock *s)
{
	int ret = s->server ? tcp_serve_header(port, s) : took_header(s);

	if (ret == 0 && s->rx_left == 0)
		ret = frame_received(port, s);
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
				ret = header_received(port, s);
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
			ret = frame_received(port, s);
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
				ret = frame_received(port, s);
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
