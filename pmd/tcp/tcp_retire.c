/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Giving up a connection's sockets without letting anything they carried
 * land later.
 *
 * When the initiator gives up a socket itself (its path stalled, the
 * kernel timed it out, the target broke the protocol), the target may
 * still hold frames of it: in its receive queue while its lcore is
 * starved, or in the network while a link is down.  Sent again on
 * another socket and completed there, such a write could then be
 * overwritten by its own stale copy, after newer writes to the same
 * bytes.  So work never moves straight off a socket we gave up:
 *
 *  1. lcore: every socket of the connection closes abortively (our
 *     kernel sends nothing more of theirs) and their work is held;
 *  2. control thread: RETIRE asks the target to close every socket that
 *     presented the connection's token and to issue a new token (a
 *     socket still in its accept queue then fails its hello), and which
 *     of the held fences and notifications acted there;
 *  3. target, on the lcore that owns those sockets: they close, the
 *     token changes, and RETIRED answers.  Nothing of theirs acts after;
 *  4. control thread, then lcore: held tails that acted complete, the
 *     rest fails over to other ports (the engine's retry) or fails; new
 *     sockets dial with the new token.
 *
 * A socket the peer closed (a reset, end of stream) needs none of this:
 * the target reads nothing more from it.  Without an answer the work
 * stays held until the peer is declared lost, when it fails.  So a
 * request reported done or failed never has bytes land afterwards, and
 * a fence or notification is reported done exactly when it acted.
 */
#define _GNU_SOURCE
#include "tcp.h"


void
tcp_conn_hold(struct tcp_conn *c, struct tcp_sock *s)
{
	struct kvt_desc *lists[2] = { s->wq, s->txq }, *d;
	unsigned int k;

	s->wq = s->wq_tail = s->txq = s->txq_tail = NULL;
	s->tx_off = 0;
	s->inflight = 0;
	for (k = 0; k < 2; k++) {
		while ((d = lists[k]) != NULL) {
			lists[k] = d->next;
			kvt_desc_append(&c->held, &c->held_tail, d);
		}
	}
}

static int
is_tail(const struct kvt_desc *d)
{
	return (d->op == KVT_DESC_FENCE || d->op == KVT_DESC_NOTIFY) &&
		d->seq != 0;
}

/* Did the peer close the socket (so nothing we sent on it can act
 * later)?  A reset or a broken pipe says so; a timeout, an unreachable
 * host or a protocol error is our own verdict. */
static int
peer_closed(int err)
{
	return err == -ECONNRESET || err == -EPIPE;
}

/* The error a socket's work fails with, from the error that ended it:
 * one the engine retries elsewhere. */
static int
work_err(int err)
{
	if (err == -ETIMEDOUT || err == -ECANCELED)
		return err;
	return err == -EPROTO ? -EIO : -ECONNRESET;
}

void
tcp_sock_fail(struct kvt_port *port, struct tcp_sock *s, int err)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c = s->conn;
	unsigned int i;

	if (s->server || c == NULL || (s->wq == NULL && s->txq == NULL) ||
	    peer_closed(err) || err == -ECANCELED ||
	    __atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE)) {
		tcp_sock_close(port, s, work_err(err));
		return;
	}
	/* Given up: s goes now with its work held; its siblings go when the
	 * poll ends (tcp_retire_given_up), as the poll may still hold them
	 * in its lists. */
	for (i = 0; i < c->nsocks; i++)
		if (c->socks[i] == s)
			tcp_conn_sock_del(c, i);
	s->conn = NULL;
	tcp_conn_hold(c, s);
	tcp_sock_close(port, s, work_err(err));
	if (c->giving_up == 0) {
		c->giving_up = work_err(err);
		c->gnext = tp->giving_up;
		tp->giving_up = c;
	}
}

void
tcp_conn_retire(struct kvt_port *port, struct tcp_conn *c, int err)
{
	struct tcp_port *tp = port->priv;
	struct kvt_desc *d;
	unsigned int i, n = 0;

	for (i = 0; i < c->nsocks; i++)
		tcp_conn_hold(c, c->socks[i]);
	tcp_conn_close_socks(port, c, err);
	kvt_conn_set_down(&c->c, 1);
	if (c->held == NULL || c->retire != TCP_R_NONE)
		return;
	c->nrseq = 0;
	for (d = c->held; d != NULL; d = d->next) {
		n++;
		if (is_tail(d) && c->nrseq < TCP_RETIRE_SEQS)
			c->rseq[c->nrseq++] = d->seq;
	}
	TCP_LOG(NOTICE, "port %s: connection to %s given up (%s) with %u frames unanswered: they wait until it closed its end",
		port->name, c->c.info.name, strerror(-err), n);
	c->rnext = tp->retiring;
	tp->retiring = c;
	/* The held list and rseq are the control thread's to read now. */
	__atomic_store_n(&c->retire, TCP_R_HELD, __ATOMIC_RELEASE);
}

void
tcp_retire_given_up(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c;

	while ((c = tp->giving_up) != NULL) {
		tp->giving_up = c->gnext;
		c->gnext = NULL;
		tcp_conn_retire(port, c, c->giving_up);
		c->giving_up = 0;
	}
}

void
tcp_conn_release(struct kvt_port *port, struct tcp_conn *c, uint64_t taken,
		 int err)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn **pp;
	struct kvt_desc *d;
	uint32_t i;
	int st;

	while ((d = c->held) != NULL) {
		c->held = d->next;
		st = err;
		for (i = 0; is_tail(d) && i < c->nrseq; i++)
			if (c->rseq[i] == d->seq && (taken & (1ull << i)))
				st = 0;
		kvt_desc_complete(port, d, st);
	}
	c->held_tail = NULL;
	for (pp = &tp->retiring; *pp != NULL; pp = &(*pp)->rnext)
		if (*pp == c) {
			*pp = c->rnext;
			break;
		}
	c->rnext = NULL;
	__atomic_store_n(&c->retire, TCP_R_NONE, __ATOMIC_RELEASE);
}

void
tcp_retire_reap(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	struct tcp_conn *c, *next;

	for (c = tp->retiring; c != NULL; c = next) {
		next = c->rnext;
		if (__atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE))
			tcp_conn_release(port, c, 0, -ECONNRESET);
	}
}

/* ---- the initiator's control thread ---- */

static void
ask(struct tcp_conn *c, uint64_t now)
{
	struct tcp_retire m = { .type = TCP_M_RETIRE };
	uint32_t i;

	m.nseq = rte_cpu_to_le_32(c->nrseq);
	memcpy(m.token, c->token, sizeof(m.token));
	for (i = 0; i < c->nrseq; i++)
		m.seq[i] = rte_cpu_to_le_32(c->rseq[i]);
	c->asked_us = now;
	/* Lost or refused: asked again after a quarter of the timeout. */
	if (kvt_conn_msg(&c->c, &m, sizeof(m)) < 0)
		TCP_LOG(DEBUG, "port %s: RETIRE to %s not sent", c->c.port->name,
			c->c.info.name);
}

struct release_arg {
	struct tcp_conn *c;
	uint64_t taken;
};

static int
release_call(struct kvt_port *port, void *arg)
{
	struct release_arg *a = arg;

	tcp_conn_release(port, a->c, a->taken, -ECONNRESET);
	return 0;
}

int
tcp_retire_tick(struct kvt_port *port, struct tcp_conn *c, uint64_t now)
{
	struct release_arg a = { .c = c };
	uint32_t st = __atomic_load_n(&c->retire, __ATOMIC_ACQUIRE);
	uint64_t again_us = (uint64_t)kvt_pmd_env()->timeout_ms * 1000 / 4;

	switch (st) {
	case TCP_R_NONE:
		return 0;
	case TCP_R_HELD:
		/* Not if the lcore released it meanwhile (the peer died). */
		if (__atomic_compare_exchange_n(&c->retire, &st, TCP_R_ASKED,
						false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			ask(c, now);
		return 1;
	case TCP_R_ASKED:
		if (now - c->asked_us > again_us)
			ask(c, now);
		return 1;
	default:
		break;
	}
	/* Answered: the sockets are gone at the target.  A later dial
	 * presents the new token; the held work is released on the lcore
	 * (its call done, the state is NONE). */
	a.taken = c->taken;
	if (kvt_port_call(port, release_call, &a, TCP_CALL_MS) < 0)
		return 1;
	memcpy(c->token, c->next_token, sizeof(c->token));
	c->backoff_ms = 0;
	c->redial_at_us = now;
	TCP_LOG(NOTICE, "port %s: %s closed the sockets given up; dialling again",
		port->name, c->c.info.name);
	return 0;
}

static int
retired(struct tcp_conn *c, const struct tcp_retired *rd)
{
	uint32_t st = TCP_R_ASKED;

	if (__atomic_load_n(&c->retire, __ATOMIC_ACQUIRE) != TCP_R_ASKED ||
	    memcmp(rd->token, c->token, sizeof(c->token)) != 0 ||
	    rd->nseq != c->nrseq)
		return 0;	/* late, or for an earlier retire: dropped */
	memcpy(c->next_token, rd->next, sizeof(c->next_token));
	c->taken = rd->taken;
	__atomic_compare_exchange_n(&c->retire, &st, TCP_R_ANSWERED, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	return 0;
}

/* ---- the target ---- */

struct close_arg {
	struct tcp_conn *c;
	uint8_t next[16];
};

/* Lcore: close every socket of c and take the new token. */
static int
close_call(struct kvt_port *port, void *arg)
{
	struct close_arg *a = arg;
	struct tcp_conn *c = a->c;

	tcp_conn_close_socks(port, c, -ECONNRESET);
	memcpy(c->prev_token, c->token, sizeof(c->token));
	memcpy(c->token, a->next, sizeof(c->token));
	return 0;
}

static int
retire_here(struct tcp_conn *c, const struct tcp_retire *rq,
	    struct kvt_buf *reply)
{
	struct tcp_retired rd = { .type = TCP_M_RETIRED };
	struct close_arg a = { .c = c };
	uint64_t taken = 0;
	uint32_t i;
	int ret;

	/* The token now in use: retire it.  The one retired last: our
	 * answer was lost, say it again.  Another: stale, dropped. */
	if (memcmp(rq->token, c->token, sizeof(c->token)) == 0) {
		if (getrandom(a.next, sizeof(a.next), 0) != sizeof(a.next))
			return -EIO;
		/* The initiator asks again if this takes too long. */
		ret = kvt_port_call(c->c.port, close_call, &a, TCP_CALL_MS);
		if (ret < 0)
			return ret;
		TCP_LOG(NOTICE, "port %s: %s gave up its sockets: closed here",
			c->c.port->name, c->c.info.name);
	} else if (memcmp(rq->token, c->prev_token, sizeof(c->token)) != 0) {
		return 0;
	}
	/* Nothing can carry these tails here any more: their fate is
	 * decided. */
	for (i = 0; i < rq->nseq; i++)
		if (kvt_conn_tail_taken(&c->c, rq->seq[i]))
			taken |= 1ull << i;
	rd.nseq = rte_cpu_to_le_32(rq->nseq);
	rd.taken = rte_cpu_to_le_64(taken);
	memcpy(rd.token, rq->token, sizeof(rd.token));
	memcpy(rd.next, c->token, sizeof(rd.next));
	return kvt_buf_put(reply, &rd, sizeof(rd));
}

int
tcp_conn_msg(struct kvt_conn *kc, const uint8_t *msg, size_t len,
	     struct kvt_buf *reply)
{
	struct tcp_conn *c = (struct tcp_conn *)kc;
	struct tcp_retire rq;
	struct tcp_retired rd;
	int type = tcp_msg_parse(msg, len, &rq, &rd);

	if (type == TCP_M_RETIRE && c->server)
		return retire_here(c, &rq, reply);
	if (type == TCP_M_RETIRED && !c->server)
		return retired(c, &rd);
	return -EPROTO;
}
