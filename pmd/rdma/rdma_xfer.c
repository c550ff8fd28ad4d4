/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The lcore side of the RDMA transport: descriptors become work requests,
 * and work completions hand them back (kvt_desc_complete).
 *
 * Each queue pair keeps its send queue as a ring of entries in post order.
 * Descriptors are posted in chains of at most RD_CHAIN work requests and
 * only the last of a chain is signalled; RC completes a send queue in
 * order, so its completion ends every entry up to it.
 *
 * Ordering: why a settled slice's bytes are in place, and why the fence
 * comes after all of them.
 *  - A WRITE's completion at the initiator says the responder acknowledged
 *    it, not that the bytes reached memory where the reader will look
 *    (PCIe writes are posted; GPU memory behind a switch, relaxed ordering).
 *    So a chain holding WRITEs ends in a signalled 8-byte READ on the same
 *    queue pair (the "flush").  The responder executes a queue pair's
 *    requests in order, and its NIC's read of host or GPU memory cannot pass
 *    the posted writes it issued before; the READ's answer therefore leaves
 *    after every earlier WRITE of that queue pair is placed.  Only then
 *    does the chain's completion complete its slices.
 *  - The engine issues a request's fence only when every slice of it, on
 *    every queue pair and NIC, has settled (batch/complete.c: the
 *    acq_rel chain of settled counters).  By the point above, all of its bytes are placed
 *    at the receiver before the fence WRITE is even posted, whichever
 *    queue pair or NIC carries the fence.
 *  - The fence is an 8-byte inline WRITE to an 8-byte aligned word: one
 *    PCIe write, seen whole by the receiver's acquire load.
 *  - A notification is a SEND after the fence settled (the engine chains
 *    it), so a receiver that reads it finds fence and data in place.
 *
 * Tails that move: when a queue pair breaks under a fence or
 * notification, the engine sends the tail again on another port.  A
 * notification carries its number (kvt_desc.seq) as the SEND's immediate
 * and the receiving lcore acts on each number once (kvt_conn_tail_take),
 * so a copy whose first send did arrive is dropped.  A fence is a WRITE
 * of the room id: a second copy stores the same word and cannot make
 * any other room look arrived; see tail_move() in lib/batch/complete.c
 * for the one case it can disturb.
 * READ slices need no flush: the local NIC writes the data before it
 * writes the completion.
 *
 * Failure: an error completion ends the queue pair (RC moves it to the
 * error state).  Entries before the failed one completed (completions
 * are in order) unless the error is a flush, where nothing is known; the
 * rest are failed with -EIO, which the engine retries on another NIC.
 *
 * Why a slice failed here cannot land after its retry (the stale copy
 * tcp must fence off with RETIRE): a requester in the error state sends
 * nothing more, so no packet of the failed pair is retransmitted after
 * the failure is seen; the responder takes only the next PSN in order
 * and acknowledges a duplicate WRITE without placing it again, and the
 * pair is reset at both ends with fresh PSNs before it carries anything
 * (REARM).  What remains is a packet of it still in the fabric while the
 * retry completes and a newer write lands: the retry budget (seven times
 * the local ACK timeout, about --kvt-timeout) is orders of magnitude
 * longer than a packet lives in a switch.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include <rte_branch_prediction.h>
#include <rte_cycles.h>

#include "rdma.h"

#define RD_WC_BURST 32

static inline struct rd_wr *
ring_at(const struct rd_conn *c, struct rd_qp *q, uint64_t seq)
{
	return &q->ring[seq & (c->rp->sq - 1)];
}

static void
backlog_push(struct rd_conn *c, struct kvt_desc *d)
{
	struct kvt_desc **at;

	/* Urgent work goes ahead of the others, in its own order. */
	if (d->prio == KVT_PRIO_URGENT) {
		at = c->urgent_tail != NULL ? &c->urgent_tail->next : &c->backlog;
		d->next = *at;
		*at = d;
		if (d->next == NULL)
			c->backlog_tail = d;
		c->urgent_tail = d;
		return;
	}
	kvt_desc_append(&c->backlog, &c->backlog_tail, d);
}

static struct kvt_desc *
backlog_pop(struct rd_conn *c)
{
	struct kvt_desc *d = c->backlog;

	c->backlog = d->next;
	if (c->backlog == NULL)
		c->backlog_tail = NULL;
	if (c->urgent_tail == d)
		c->urgent_tail = NULL;
	return d;
}

static void
backlog_fail(struct rd_conn *c, int err)
{
	while (c->backlog != NULL)
		kvt_desc_complete(c->c.port, backlog_pop(c), err);
}

/* One send queue entry ended: complete its descriptor. */
static void
entry_complete(struct rd_conn *c, struct rd_qp *q, struct rd_wr *e, int err)
{
	struct kvt_desc *d = e->d;

	c->rp->cq_used -= e->signalled;
	e->d = NULL;
	if (d == NULL)
		return;
	if (d->op == KVT_DESC_NOTIFY)
		q->notes--;
	kvt_desc_complete(c->c.port, d, err);
}

static void
qp_to_error(struct rd_qp *q)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	/* Nothing posted may run after its descriptor was given up. */
	rd_ibv.modify_qp(q->qp, &a, IBV_QP_STATE);
}

static void
qp_drain(struct rd_conn *c, struct rd_qp *q, int err)
{
	while (q->head != q->tail)
		entry_complete(c, q, ring_at(c, q, q->head++), err);
	q->dirty = 0;
	q->notes = 0;
	q->note_next = 0;
	q->held_n = 0;
	q->held_head = 0;
}

static int
conn_live_qps(const struct rd_conn *c)
{
	unsigned int i;
	int n = 0;

	for (i = 0; i < c->nqps; i++)
		n += __atomic_load_n(&c->qp[i].state, __ATOMIC_RELAXED) ==
			RD_QP_LIVE;
	return n;
}

void
rd_qp_broken(struct rd_conn *c, unsigned int qi, int err)
{
	struct rd_qp *q = &c->qp[qi];

	if (__atomic_load_n(&q->state, __ATOMIC_RELAXED) != RD_QP_LIVE)
		return;
	RD_LOG(WARNING, "%s: queue pair %u to %s failed (%s): its slices move to other paths",
	       c->rp->nic.name, qi, c->c.info.name, strerror(-err));
	qp_to_error(q);
	__atomic_store_n(&q->state, RD_QP_BROKEN, __ATOMIC_RELEASE);
	qp_drain(c, q, -EIO);
	if (err == -ETIMEDOUT)
		rd_port_error(c->rp);
	if (conn_live_qps(c) == 0)
		kvt_conn_set_down(&c->c, 1);
}

void
rd_conn_drain(struct rd_conn *c, int err)
{
	unsigned int i;

	for (i = 0; i < c->nqps; i++) {
		if (c->qp[i].head != c->qp[i].tail)
			qp_to_error(&c->qp[i]);
		qp_drain(c, &c->qp[i], err);
	}
	backlog_fail(c, err);
}

int
rd_post_recv(struct rd_conn *c, unsigned int q, unsigned int i)
{
	struct ibv_sge sge = {
		.addr = (uint64_t)(uintptr_t)rd_note_buf(c, q, i, 1),
		.length = KVT_NOTIFY_MAX,
		.lkey = c->mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = RD_WRID(c->slot, c->rp->slot_gen[c->slot], 1, i),
		.sg_list = &sge,
		.num_sge = 1,
	}, *bad;

	return ibv_post_recv(c->qp[q].qp, &wr, &bad) != 0 ? -EIO : 0;
}

/* ---- posting ---- */

static int
qp_space(const struct rd_conn *c, const struct rd_qp *q)
{
	return __atomic_load_n(&q->state, __ATOMIC_ACQUIRE) == RD_QP_LIVE &&
		c->rp->sq - (q->tail - q->head) > RD_CHAIN;
}

/* Notifications keep their order: all go on the first live queue pair. */
static struct rd_qp *
note_qp(struct rd_conn *c)
{
	unsigned int i;

	for (i = 0; i < c->nqps; i++)
		if (__atomic_load_n(&c->qp[i].state, __ATOMIC_ACQUIRE) ==
		    RD_QP_LIVE)
			return &c->qp[i];
	return NULL;
}

/* Urgent work: the live queue pair with room and the fewest requests
 * posted, so it waits behind as little bulk as the NIC still holds. */
static struct rd_qp *
least_loaded_qp(struct rd_conn *c)
{
	struct rd_qp *q, *best = NULL;
	unsigned int i;

	for (i = 0; i < c->nqps; i++) {
		q = &c->qp[i];
		if (qp_space(c, q) &&
		    (best == NULL || q->tail - q->head < best->tail - best->head))
			best = q;
	}
	return best;
}

/* The queue pair for the next chain: round robin over the live ones
 * with room, the notification one when a notification is next, the
 * least loaded one for urgent work. */
static struct rd_qp *
pick_qp(struct rd_conn *c)
{
	unsigned int i, k;
	struct rd_qp *q;

	if (c->backlog->op == KVT_DESC_NOTIFY) {
		q = note_qp(c);
		return q != NULL && qp_space(c, q) ? q : NULL;
	}
	if (c->backlog->prio == KVT_PRIO_URGENT)
		return least_loaded_qp(c);
	for (i = 0; i < c->nqps; i++) {
		k = (c->rr + i) % c->nqps;
		q = &c->qp[k];
		if (qp_space(c, q)) {
			c->rr = k + 1;
			return q;
		}
	}
	return NULL;
}

/* Work requests a descriptor becomes: a WRITE or READ longer than the
 * port's max_msg_sz is split. */
static unsigned int
wr_pieces(const struct rd_conn *c, const struct kvt_desc *d)
{
	if (d->op != KVT_DESC_WRITE && d->op != KVT_DESC_READ)
		return 1;
	return d->len <= c->rp->max_msg ? 1 :
		(d->len + c->rp->max_msg - 1) / c->rp->max_msg;
}

/* Piece i of a split WRITE or READ: bytes [i * max_msg, ...). */
static void
wr_piece(struct rd_conn *c, struct ibv_send_wr *wr, struct ibv_sge *sge,
	 unsigned int i)
{
	uint64_t off = (uint64_t)i * c->rp->max_msg;

	sge->addr += off;
	sge->length = (uint32_t)RTE_MIN((uint64_t)sge->length - off,
					(uint64_t)c->rp->max_msg);
	wr->wr.rdma.remote_addr += off;
}

static void
wr_fill(struct rd_conn *c, struct rd_qp *q, struct kvt_desc *d,
	struct ibv_send_wr *wr, struct ibv_sge *sge)
{
	const struct kvt_port *port = c->c.port;
	uint8_t *note;

	memset(wr, 0, sizeof(*wr));
	wr->sg_list = sge;
	wr->num_sge = 1;
	switch (d->op) {
	case KVT_DESC_WRITE:
	case KVT_DESC_READ:
		wr->opcode = d->op == KVT_DESC_WRITE ? IBV_WR_RDMA_WRITE :
			IBV_WR_RDMA_READ;
		sge->addr = (uint64_t)(uintptr_t)d->local;
		sge->length = d->len;
		sge->lkey = rd_lkey(d->lm, port);
		wr->wr.rdma.remote_addr = d->remote;
		wr->wr.rdma.rkey = rd_rkey(d->rm, port);
		if (d->op == KVT_DESC_WRITE) {
			q->dirty = 1;
			if (d->len <= c->rp->max_inline)
				wr->send_flags = IBV_SEND_INLINE;
		}
		break;
	case KVT_DESC_FENCE:
		wr->opcode = IBV_WR_RDMA_WRITE;
		wr->send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
		sge->addr = (uint64_t)(uintptr_t)&d->value;
		sge->length = sizeof(d->value);
		wr->wr.rdma.remote_addr = d->remote;
		wr->wr.rdma.rkey = rd_rkey(d->rm, port);
		break;
	default:	/* KVT_DESC_NOTIFY */
		note = rd_note_buf(c, (unsigned int)(q - c->qp), q->note_next, 0);
		q->note_next = (q->note_next + 1) % RD_NOTES;
		q->notes++;
		memcpy(note, d->data, d->len);
		/* The immediate carries the tail's number: a copy sent
		 * again after its queue pair broke is acted on once. */
		wr->opcode = IBV_WR_SEND_WITH_IMM;
		wr->imm_data = htobe32(d->seq);
		wr->send_flags = IBV_SEND_SIGNALED;
		sge->addr = (uint64_t)(uintptr_t)note;
		sge->length = d->len;
		sge->lkey = c->mr->lkey;
		break;
	}
}

static void
flush_fill(struct rd_conn *c, struct ibv_send_wr *wr, struct ibv_sge *sge)
{
	memset(wr, 0, sizeof(*wr));
	sge->addr = (uint64_t)(uintptr_t)(c->mem + RD_MEM_FLUSH_DST);
	sge->length = 8;
	sge->lkey = c->mr->lkey;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->opcode = IBV_WR_RDMA_READ;
	wr->send_flags = IBV_SEND_SIGNALED;
	wr->wr.rdma.remote_addr = c->flush_addr;
	wr->wr.rdma.rkey = c->flush_rkey;
}

/* Post one chain from the backlog on q; @return work requests posted. */
static unsigned int
post_chain(struct rd_conn *c, struct rd_qp *q, uint64_t now)
{
	struct ibv_send_wr wr[RD_CHAIN], *bad = NULL;
	struct ibv_sge sge[RD_CHAIN];
	struct rd_port *rp = c->rp;
	struct rd_qp *nq = note_qp(c);
	unsigned int n = 0, i, sig = 0;
	struct kvt_desc *d;
	struct rd_wr *e;

	while (c->backlog != NULL && n < RD_CHAIN - 1) {
		unsigned int k, pieces;

		d = c->backlog;
		if (d->op == KVT_DESC_NOTIFY && (q != nq || q->notes == RD_NOTES))
			break;
		pieces = wr_pieces(c, d);
		if (n + pieces > RD_CHAIN - 1)
			break;
		backlog_pop(c);
		/* Pieces in order; only the last completes the descriptor
		 * (RC completes a queue pair's requests in order). */
		for (k = 0; k < pieces; k++, n++) {
			wr_fill(c, q, d, &wr[n], &sge[n]);
			if (pieces > 1)
				wr_piece(c, &wr[n], &sge[n], k);
			e = ring_at(c, q, q->tail + n);
			e->d = k + 1 == pieces ? d : NULL;
			e->posted = now;
			e->signalled = !!(wr[n].send_flags & IBV_SEND_SIGNALED);
		}
	}
	if (n == 0)
		return 0;
	if (q->dirty) {
		flush_fill(c, &wr[n], &sge[n]);
		e = ring_at(c, q, q->tail + n);
		e->d = NULL;
		e->posted = now;
		e->signalled = 1;
		n++;
		q->dirty = 0;
	} else if (!(wr[n - 1].send_flags & IBV_SEND_SIGNALED)) {
		wr[n - 1].send_flags |= IBV_SEND_SIGNALED;
		ring_at(c, q, q->tail + n - 1)->signalled = 1;
	}
	for (i = 0; i < n; i++) {
		wr[i].wr_id = RD_WRID(c->slot, rp->slot_gen[c->slot], 0, q->tail + i);
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		sig += !!(wr[i].send_flags & IBV_SEND_SIGNALED);
	}
	rp->cq_used += sig;
	q->tail += n;
	if (unlikely(ibv_post_send(q->qp, wr, &bad) != 0)) {
		/* A prefix may be posted without its signalled end: the
		 * queue pair cannot be trusted any more. */
		rd_qp_broken(c, (unsigned int)(q - c->qp), -EIO);
		return 0;
	}
	return n;
}

static unsigned int
pump(struct rd_conn *c, uint64_t now)
{
	struct rd_port *rp = c->rp;
	unsigned int work = 0, n;
	struct rd_qp *q;

	if (unlikely(__atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE))) {
		backlog_fail(c, -ECONNRESET);
		return 1;
	}
	while (c->backlog != NULL && rp->cq_used + RD_CHAIN <= (uint32_t)rp->cq_size) {
		q = pick_qp(c);
		if (q == NULL) {
			/* No queue pair left: let the engine take the slices
			 * to another NIC. */
			if (conn_live_qps(c) == 0)
				backlog_fail(c, -ECONNRESET);
			break;
		}
		n = post_chain(c, q, now);
		if (n == 0)
			break;
		work += n;
	}
	return work;
}

void
rd_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n)
{
	struct rd_conn *c, *last = NULL;
	uint64_t now = rte_get_tsc_cycles();
	unsigned int i;

	RTE_SET_USED(port);
	for (i = 0; i < n; i++) {
		c = (struct rd_conn *)d[i]->conn;
		if (last != NULL && c != last)
			pump(last, now);
		backlog_push(c, d[i]);
		last = c;
	}
	if (last != NULL)
		pump(last, now);
}

/* ---- completions ---- */

static int
wc_errno(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_REM_ACCESS_ERR:
		return -EACCES;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ETIMEDOUT;
	default:
		return -EIO;
	}
}

static void
recv_wc(struct rd_conn *c, unsigned int qi, const struct ibv_wc *wc)
{
	unsigned int i = (unsigned int)RD_WRID_SEQ(wc->wr_id);
	struct rd_qp *q = &c->qp[qi];
	uint32_t len;

	if (wc->status != IBV_WC_SUCCESS || i >= RD_NOTES || c->c.inbox == NULL)
		return;
	if ((wc->wc_flags & IBV_WC_WITH_IMM) &&
	    !kvt_conn_tail_take(&c->c, be32toh(wc->imm_data))) {
		rd_post_recv(c, qi, i);	/* a copy: acted on already */
		return;
	}
	len = RTE_MIN(wc->byte_len, (uint32_t)KVT_NOTIFY_MAX);
	if (q->held_n != 0 ||
	    kvt_inbox_push(c->c.inbox, rd_note_buf(c, qi, i, 1), len) == -ENOBUFS) {
		/* The application is behind: keep the buffer (the sender
		 * waits on receiver-not-ready) and push it later, in
		 * order. */
		q->held[(q->held_head + q->held_n) % RD_NOTES] = (uint8_t)i;
		q->held_len[i] = (uint16_t)len;
		q->held_n++;
		return;
	}
	rd_post_recv(c, qi, i);
}

static void
held_retry(struct rd_conn *c)
{
	unsigned int qi, i;
	struct rd_qp *q;

	for (qi = 0; qi < c->nqps; qi++) {
		q = &c->qp[qi];
		while (q->held_n != 0) {
			i = q->held[q->held_head];
			if (kvt_inbox_push(c->c.inbox, rd_note_buf(c, qi, i, 1),
					   q->held_len[i]) == -ENOBUFS)
				return;
			q->held_head = (q->held_head + 1) % RD_NOTES;
			q->held_n--;
			rd_post_recv(c, qi, i);
		}
	}
}

static void
send_wc(struct rd_conn *c, unsigned int qi, const struct ibv_wc *wc)
{
	struct rd_qp *q = &c->qp[qi];
	uint64_t seq, mask = (1ull << 39) - 1;
	int err;

	/* Rebuild the full sequence number; anything outside the ring is a
	 * leftover of a drained incarnation. */
	seq = q->head + ((RD_WRID_SEQ(wc->wr_id) - q->head) & mask);
	if (seq >= q->tail)
		return;
	if (likely(wc->status == IBV_WC_SUCCESS)) {
		while (q->head <= seq)
			entry_complete(c, q, ring_at(c, q, q->head++), 0);
		return;
	}
	/* Before a real error everything completed; a flush says nothing
	 * about the unsignalled entries before it. */
	err = wc->status == IBV_WC_WR_FLUSH_ERR ? -EIO : 0;
	while (q->head < seq)
		entry_complete(c, q, ring_at(c, q, q->head++), err);
	err = wc_errno(wc->status);
	entry_complete(c, q, ring_at(c, q, q->head++), err);
	if (wc->status == IBV_WC_REM_ACCESS_ERR)
		RD_LOG(ERR, "%s: %s refused an access (remote key or range)",
		       c->rp->nic.name, c->c.info.name);
	rd_qp_broken(c, qi, err);
}

static void
wc_handle(struct rd_port *rp, const struct ibv_wc *wc)
{
	unsigned int slot = RD_WRID_SLOT(wc->wr_id), qi;
	struct rd_conn *c;

	c = slot < RD_MAX_CONNS ? rp->slot[slot] : NULL;
	if (c == NULL || RD_WRID_GEN(wc->wr_id) != rp->slot_gen[slot])
		return;
	for (qi = 0; qi < c->nqps; qi++)
		if (c->qp[qi].qp->qp_num == wc->qp_num)
			break;
	if (qi == c->nqps)
		return;
	if (RD_WRID_RECV(wc->wr_id))
		recv_wc(c, qi, wc);
	else
		send_wc(c, qi, wc);
}

/* Every millisecond or so: lost peers, stuck queue pairs, held messages. */
static void
upkeep(struct rd_port *rp, uint64_t now)
{
	struct rd_conn *c;
	unsigned int s, qi;
	struct rd_qp *q;

	for (s = 0; s < rp->nslots; s++) {
		c = rp->slot[s];
		if (c == NULL)
			continue;
		if (__atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE)) {
			if (!c->failed)
				rd_conn_drain(c, -ECONNRESET);
			c->failed = 1;
			continue;
		}
		for (qi = 0; qi < c->nqps; qi++) {
			q = &c->qp[qi];
			if (q->head != q->tail &&
			    now - ring_at(c, q, q->head)->posted > rp->watchdog_tsc)
				rd_qp_broken(c, qi, -ETIMEDOUT);
		}
		if (c->c.accepted)
			held_retry(c);
	}
}

unsigned int
rd_poll(struct kvt_port *port)
{
	struct rd_port *rp = port->priv;
	struct ibv_wc wc[RD_WC_BURST];
	uint64_t now;
	unsigned int work = 0, s;
	int n, i;

	n = ibv_poll_cq(rp->cq, RD_WC_BURST, wc);
	for (i = 0; i < n; i++)
		wc_handle(rp, &wc[i]);
	if (n > 0)
		work += (unsigned int)n;
	now = rte_get_tsc_cycles();
	for (s = 0; s < rp->nslots; s++)
		if (rp->slot[s] != NULL && rp->slot[s]->backlog != NULL)
			work += pump(rp->slot[s], now);
	if (now >= rp->next_check) {
		rp->next_check = now + rte_get_tsc_hz() / 1000;
		upkeep(rp, now);
	}
	return work;
}

/* Is anything of rp's in flight or waiting (the watchdog and the held
 * notifications need the upkeep's tick)? */
static int
rd_busy(const struct rd_port *rp)
{
	const struct rd_conn *c;
	unsigned int s, qi;

	for (s = 0; s < rp->nslots; s++) {
		c = rp->slot[s];
		if (c == NULL)
			continue;
		if (c->backlog != NULL)
			return 1;
		for (qi = 0; qi < c->nqps; qi++)
			if (c->qp[qi].head != c->qp[qi].tail || c->qp[qi].held_n != 0)
				return 1;
	}
	return 0;
}

/*
 * A waiting lcore wakes on the completion channel.  Arming asks for one
 * event at the next completion; a completion that came before the arm
 * raises none, so the first answer after arming is 0: poll once more,
 * then wait.  An event is taken (and acknowledged) here, on the idle
 * path, never in poll: a busy port makes no system call.
 */
uint64_t
rd_idle(struct kvt_port *port, int *fd)
{
	struct rd_port *rp = port->priv;
	struct ibv_cq *cq;
	void *ctx;

	*fd = rp->chan != NULL ? rp->chan->fd : -1;
	if (rp->chan == NULL)
		return RD_IDLE_POLL_US;
	if (rp->armed && rd_ibv.get_cq_event(rp->chan, &cq, &ctx) == 0) {
		rd_ibv.ack_cq_events(cq, 1);
		rp->armed = 0;
	}
	if (!rp->armed) {
		if (ibv_req_notify_cq(rp->cq, 0) != 0)
			return RD_IDLE_POLL_US;
		rp->armed = 1;
		return 0;
	}
	/* The upkeep (watchdog, held notifications, lost peers) ticks every
	 * millisecond while there is work, and seldom when there is none. */
	return rd_busy(rp) ? 1000 : 100000;
}
