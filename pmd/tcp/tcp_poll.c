/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One lcore turn over a tcp port's sockets, and its idle wait.
 *
 * Urgent lanes (the sockets that carry urgent frames, tcp_sock.c) sit in
 * an epoll set of their own and are served first, and again after each
 * data socket that moved bytes, as is the lcore's urgent ring.  The data
 * sockets share a byte budget a turn, each way, taken a share at a time
 * and starting where the last turn stopped.  While urgent frames move, a
 * share is slice_kb (64 KiB), so an urgent frame waits behind one such
 * slice on each end whatever the bulk load; on a port without them it is
 * 1 MiB.
 */
#define _GNU_SOURCE
#include "tcp.h"


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

/* What a data socket moves in one visit, each way. */
static uint32_t
share(const struct tcp_port *tp)
{
	return rte_get_tsc_cycles() < tp->hot_until ? tp->slice : TCP_CHUNK;
}

/* Input on a ready socket; it is closed on error.  @return work, or -1
 * when it was closed. */
static int
sock_in(struct kvt_port *port, struct tcp_sock *s, uint32_t *budget)
{
	int ret;

	/* Before its hello a socket has one deadline, however slowly it
	 * dribbles bytes. */
	if (s->authed)
		s->since = rte_get_tsc_cycles();
	ret = s->authed ? tcp_sock_recv(port, s, budget) : tcp_sock_auth(port, s);
	if (ret < 0) {
		tcp_sock_fail(port, s, ret);
		return -1;
	}
	return ret;
}

/* Output owed on s: the target's answers (then the frames held back
 * while they were owed), the initiator's frames.  @return work, -errno. */
static int
sock_out(struct kvt_port *port, struct tcp_sock *s, uint32_t *budget)
{
	int ret, more;

	if (!s->authed)
		return 0;
	if (!s->server)
		return tcp_sock_send(s, budget);
	ret = tcp_sock_respond(s, budget);
	if (ret < 0 || s->rb_off == s->rb_len)
		return ret;
	more = tcp_sock_recv(port, s, budget);
	return more < 0 ? more : ret + more;
}

unsigned int
tcp_urgent_turn(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	struct epoll_event ev[16];
	struct tcp_sock *s;
	unsigned int work = 0;
	uint32_t budget;
	int n, i, ret;

	n = epoll_wait(tp->uepfd, ev, RTE_DIM(ev), 0);
	for (i = 0; i < n; i++) {
		s = ev[i].data.ptr;
		budget = tp->slice;
		ret = sock_in(port, s, &budget);
		/* Unless closed there, or moved to the data sockets (a
		 * data frame came), the lane answers at once. */
		if (ret < 0 || !s->urgent)
			continue;
		work += (unsigned int)ret;
		budget = tp->slice;
		ret = sock_out(port, s, &budget);
		if (ret < 0)
			tcp_sock_fail(port, s, ret);
		else
			work += (unsigned int)ret;
	}
	return work;
}

/*
 * Between two data sockets: the urgent lanes, and the turn ends (no
 * budget left) when urgent work waits for the lcore.  @return work.
 */
static unsigned int
urgent_between(struct kvt_port *port, uint32_t *budget)
{
	struct tcp_port *tp = port->priv;

	if (kvt_port_urgent_waiting(port))
		*budget = 0;
	return tp->nurgent != 0 ? tcp_urgent_turn(port) : 0;
}

/* Serve a ready data socket from *budget, then the urgent lanes if it
 * moved bytes.  @return work. */
static unsigned int
data_in(struct kvt_port *port, struct tcp_sock *s, uint32_t *budget)
{
	struct tcp_port *tp = port->priv;
	uint32_t b = RTE_MIN(*budget, share(tp)), before = b;
	unsigned int work = 0;
	int ret;

	ret = sock_in(port, s, &b);
	if (ret > 0)
		work = (unsigned int)ret;
	*budget -= before - b;
	if (b != before)
		work += urgent_between(port, budget);
	return work;
}

/*
 * Input: the ready data sockets, from the one after the last served (a
 * level-triggered set lists the still-ready ones in the same order each
 * time), while the budget lasts; then hellos and new sockets.  A hello
 * may close an older socket of its connection (tcp_sock_auth), so the
 * hellos are picked out before anything runs and served last.
 */
static unsigned int
poll_in(struct kvt_port *port, uint32_t *budget)
{
	struct tcp_port *tp = port->priv;
	void *skip = &tp->uepfd;	/* tcp_urgent_turn's */
	struct tcp_sock *hello[64];
	struct epoll_event ev[RTE_DIM(hello)];
	struct tcp_sock *s;
	unsigned int work = 0, served = 0, nh = 0, k;
	int n, i, listener = 0;

	n = epoll_wait(tp->epfd, ev, RTE_DIM(ev), 0);
	for (i = 0; i < n; i++) {
		s = ev[i].data.ptr;
		if (s == NULL)
			listener = 1;
		else if (s != skip && !s->authed)
			hello[nh++] = s;
		else
			continue;
		ev[i].data.ptr = skip;
	}
	for (k = 0; k < (unsigned int)n && *budget > 0; k++) {
		s = ev[(tp->rot + k) % (unsigned int)n].data.ptr;
		if (s == skip)
			continue;
		work += data_in(port, s, budget);
		served++;
	}
	tp->rot += served;
	for (k = 0; k < nh; k++)
		work += (unsigned int)RTE_MAX(sock_in(port, hello[k], budget), 0);
	if (listener)
		accept_all(port);
	return work;
}

/*
 * Is the path of a socket broken?  The kernel knows, whatever our own
 * share of the cpu: bytes (or window probes) out that no ACK answered
 * for quiet_ms mean the link carries nothing; an ACK that came means the
 * link works and the peer's application is merely slow to answer, which
 * is its control connection's business (the ping), not this socket's.
 */
static int
path_broken(const struct kvt_port *port, const struct tcp_sock *s,
	    uint32_t quiet_ms)
{
	struct tcp_info ti;
	socklen_t sl = sizeof(ti);

	if (getsockopt(s->fd, IPPROTO_TCP, TCP_INFO, &ti, &sl) != 0)
		return 1;
	if (ti.tcpi_state == TCP_ESTABLISHED &&
	    ((ti.tcpi_unacked == 0 && ti.tcpi_probes == 0) ||
	     ti.tcpi_last_ack_recv <= quiet_ms))
		return 0;
	TCP_LOG(NOTICE, "port %s: socket %d: no ACK for %u ms with %u segments and %u probes out (TCP state %u): its path is broken",
		port->name, s->fd, ti.tcpi_last_ack_recv, ti.tcpi_unacked,
		ti.tcpi_probes, ti.tcpi_state);
	return 1;
}

/*
 * @return 0, or the error that fails what a stuck socket holds.  A
 * socket whose work got no answer for a quarter of the timeout is
 * checked with the kernel (at most four times per such quarter): a
 * broken path fails it then, so its work moves to the live links; a
 * path that carries keeps it, however slow the peer, until the peer
 * answered nothing for four timeouts.
 */
static int
sock_stuck(const struct kvt_port *port, struct tcp_sock *s, uint64_t now)
{
	const struct tcp_port *tp = port->priv;
	uint32_t quiet_ms;

	/* A turn reads the clock once, and the urgent lanes it serves
	 * between two data sockets move the progress marks of sockets
	 * further on past it: such a socket has just made progress (the
	 * difference would wrap to a huge age). */
	if (s->since > now)
		return 0;
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
	if (now - s->since <= tp->stall_tsc || now - s->asked < tp->stall_tsc / 4)
		return 0;
	s->asked = now;
	quiet_ms = (uint32_t)(tp->stall_tsc * 1000 / rte_get_tsc_hz());
	if (path_broken(port, s, quiet_ms))
		return -ETIMEDOUT;
	return now - s->since > 4 * tp->timeout_tsc ? -ETIMEDOUT : 0;
}

/*
 * Output, and the deadlines, for every socket: lanes with a share of
 * their own, data sockets from the budget.  The list then starts at the
 * first data socket the budget did not reach, so the next turn serves it
 * first.
 */
static unsigned int
poll_out(struct kvt_port *port, uint32_t *budget)
{
	struct tcp_port *tp = port->priv;
	struct tcp_sock *s, *next, *prev = NULL, *stop = NULL, *stop_prev = NULL;
	uint64_t now = rte_get_tsc_cycles();
	unsigned int work = 0;
	uint32_t b, before;
	int ret;

	for (s = tp->socks; s != NULL; s = next) {
		b = s->urgent ? tp->slice : RTE_MIN(*budget, share(tp));
		before = b;
		ret = b != 0 ? sock_out(port, s, &b) : 0;
		if (ret >= 0) {
			work += (unsigned int)ret;
			ret = sock_stuck(port, s, now);
		}
		next = s->next;
		if (ret < 0) {
			tcp_sock_fail(port, s, ret);
			continue;
		}
		if (before == 0 && stop == NULL && s->authed) {
			stop = s;
			stop_prev = prev;
		}
		prev = s;
		if (s->urgent || b == before)
			continue;
		*budget -= before - b;
		/* Lanes closed here are unlinked: s stays, and so does
		 * its successor link. */
		work += urgent_between(port, budget);
		next = s->next;
	}
	if (stop != NULL && stop_prev != NULL) {
		prev->next = tp->socks;
		stop_prev->next = NULL;
		tp->socks = stop;
	}
	return work;
}

/*
 * A gap in our own turns longer than a stall is our lack of cpu, not the
 * peers' silence: the clock of every socket waiting for answers restarts,
 * so none is judged on time we did not look.  (With work in flight an
 * idle lcore wakes every eighth of the timeout: only a gap it did not
 * choose exceeds a quarter.)
 */
static void
own_gap(struct tcp_port *tp, uint64_t now)
{
	struct tcp_sock *s;

	if (tp->last_turn != 0 && now - tp->last_turn > tp->stall_tsc)
		for (s = tp->socks; s != NULL; s = s->next)
			if (s->authed && (s->wq != NULL || s->txq != NULL))
				s->since = now;
	tp->last_turn = now;
}

unsigned int
tcp_poll(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	uint32_t in, out;
	unsigned int work;

	if (tp->epfd < 0)
		return 0;
	own_gap(tp, rte_get_tsc_cycles());
	if (tp->retiring != NULL)
		tcp_retire_reap(port);
	work = tp->nurgent != 0 ? tcp_urgent_turn(port) : 0;
	in = out = share(tp) * TCP_TURN_SHARES;
	work += poll_in(port, &in);
	work += poll_out(port, &out);
	if (tp->giving_up != NULL)
		tcp_retire_given_up(port);
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
			if (epoll_ctl(s->urgent ? tp->uepfd : tp->epfd,
				      EPOLL_CTL_MOD, s->fd, &ev) != 0)
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
