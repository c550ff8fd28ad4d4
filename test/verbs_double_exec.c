/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * TEST DOUBLE of libibverbs, execution: a requester runs its own send
 * queue when its completion queue is polled (verbs_double.c has the
 * rest and the layout).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>

#include "verbs_double_impl.h"

/* ---- posting ---- */

static int
vd_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct vd_qp *q = (struct vd_qp *)qp;
	struct vd_rmr *lm;
	struct vd_swr *w;
	int ret = 0;

	pthread_mutex_lock(&vd_lock);
	for (; wr != NULL; wr = wr->next) {
		if ((qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) ||
		    q->sq_n == q->max_send || wr->num_sge != 1 ||
		    ((wr->send_flags & IBV_SEND_INLINE) &&
		     wr->sg_list[0].length > VD_MIN(vd_limits()->inl, VD_INLINE)) ||
		    wr->sg_list[0].length > vd_limits()->msg) {
			ret = qp->state != IBV_QPS_RTS ? EINVAL : ENOMEM;
			break;
		}
		if (!(wr->send_flags & IBV_SEND_INLINE)) {
			lm = vd_mr_enter(vd_mine, wr->sg_list[0].lkey,
				      wr->sg_list[0].addr, wr->sg_list[0].length, 0);
			if (lm == NULL) {
				ret = EINVAL;
				break;
			}
			vd_mr_leave(lm);
		}
		w = &q->sq[(q->sq_head + q->sq_n++) % q->max_send];
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->flags = wr->send_flags;
		w->local = wr->sg_list[0].addr;
		w->len = wr->sg_list[0].length;
		w->remote = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		w->imm = wr->imm_data;
		w->posted_ns = vd_now_ns();
		if (wr->send_flags & IBV_SEND_INLINE)
			memcpy(w->inl, (void *)(uintptr_t)w->local, w->len);
		if (qp->state == IBV_QPS_ERR)
			vd_qp_flush(q);
	}
	pthread_mutex_unlock(&vd_lock);
	if (ret != 0)
		*bad = wr;
	return ret;
}

static int
vd_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct vd_qp *q = (struct vd_qp *)qp;
	struct vd_rqp *r;
	int ret = 0;

	pthread_mutex_lock(&vd_lock);
	r = vd_rqp_mine(q);
	for (; wr != NULL; wr = wr->next) {
		if (qp->state == IBV_QPS_RESET || wr->num_sge != 1 ||
		    r->rq_tail - r->rq_head == VD_RQ) {
			ret = EINVAL;
			break;
		}
		r->rq[r->rq_tail % VD_RQ].wr_id = wr->wr_id;
		r->rq[r->rq_tail % VD_RQ].addr = wr->sg_list[0].addr;
		r->rq[r->rq_tail % VD_RQ].len = wr->sg_list[0].length;
		__atomic_store_n(&r->rq_tail, r->rq_tail + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&vd_lock);
	if (ret != 0)
		*bad = wr;
	return ret;
}

/* ---- execution (requester side, when its completion queue is polled) */

/*
 * KVT_VDOUBLE_NOCOPY=1: every request completes as it would, but no byte
 * moves, so what remains is kvt's posting and completion cost (work
 * requests per second per lcore; scripts/bench-requests, transport
 * "vdouble").
 */
static int vd_nocopy;

__attribute__((constructor)) static void
vd_nocopy_read(void)
{
	const char *v = getenv("KVT_VDOUBLE_NOCOPY");

	vd_nocopy = v != NULL && strcmp(v, "1") == 0;
}

enum { DONE, WAIT, FAIL_RETRY, FAIL_ACCESS };

static int
move(pid_t pid, int write, uint64_t local, uint64_t remote, uint32_t len,
     const uint8_t *inl)
{
	struct iovec l = { .iov_base = (void *)(uintptr_t)local, .iov_len = len };
	struct iovec r = { .iov_base = (void *)(uintptr_t)remote, .iov_len = len };
	ssize_t n;

	if (len == 0 || vd_nocopy)
		return 0;
	if (inl != NULL)
		l.iov_base = (void *)(uintptr_t)inl;
	n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) :
		process_vm_readv(pid, &l, 1, &r, 1, 0);
	return n == (ssize_t)len ? 0 : -1;
}

/* A process that died (or is dying: no memory left to copy to) answers
 * nothing; the requester times out. */
static int
gone(pid_t pid)
{
	return errno == ESRCH || (kill(pid, 0) != 0 && errno == ESRCH);
}

/* Run the oldest request of q; enum above. */
static int
execute(struct vd_qp *q, struct vd_swr *w, uint64_t now)
{
	struct vd_rail *rail = q->dev->rail;
	struct vd_table *t = vd_table_of(q->peer);
	struct vd_rqp *r;
	struct vd_rmr *m;
	uint32_t n, slot;
	int moved;
	int timed_out = now - w->posted_ns > rail->retry_ms * 1000000ull;

	/* No acknowledgement comes: retried until the retry count runs out. */
	r = t != NULL && q->dest_qpn >= 1 ? &t->qp[q->dest_qpn - 1] : NULL;
	if (__atomic_load_n(&rail->down, __ATOMIC_ACQUIRE) || r == NULL ||
	    !r->used || __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) < IBV_QPS_RTR ||
	    __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == IBV_QPS_ERR ||
	    r->rq_psn != q->sq_psn)
		return timed_out ? FAIL_RETRY : WAIT;
	if (rail->fail_after != 0 &&
	    __atomic_sub_fetch(&rail->fail_after, 1, __ATOMIC_ACQ_REL) == 0)
		return FAIL_RETRY;
	if (rail->rate_mbps != 0) {
		if (q->dev->budget_ns > now + 1000000)
			return WAIT;
		q->dev->budget_ns = (q->dev->budget_ns > now ? q->dev->budget_ns : now) +
			(uint64_t)w->len * 8000 / rail->rate_mbps;
	}
	switch (w->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		m = vd_mr_enter(t, w->rkey, w->remote, w->len,
			     w->opcode == IBV_WR_RDMA_WRITE ?
			     IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ);
		moved = m != NULL &&
			move(q->peer, w->opcode == IBV_WR_RDMA_WRITE, w->local,
			     w->remote, w->len,
			     (w->flags & IBV_SEND_INLINE) ? w->inl : NULL) == 0;
		if (m != NULL)
			vd_mr_leave(m);
		if (!moved)
			return gone(q->peer) ? (timed_out ? FAIL_RETRY : WAIT) :
				FAIL_ACCESS;
		break;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		if (r->rq_head == __atomic_load_n(&r->rq_tail, __ATOMIC_ACQUIRE))
			return WAIT;	/* receiver not ready: retried */
		slot = r->rq_head % VD_RQ;
		if (r->rq[slot].len < w->len ||
		    move(q->peer, 1, w->local, r->rq[slot].addr, w->len,
			 (w->flags & IBV_SEND_INLINE) ? w->inl : NULL) < 0)
			return gone(q->peer) ? (timed_out ? FAIL_RETRY : WAIT) :
				FAIL_ACCESS;
		n = r->rc_tail % VD_RQ;
		r->rc[n].wr_id = r->rq[slot].wr_id;
		r->rc[n].len = w->len;
		r->rc[n].status = IBV_WC_SUCCESS;
		r->rc[n].imm = w->imm;
		r->rc[n].with_imm = w->opcode == IBV_WR_SEND_WITH_IMM;
		r->rq_head++;
		__atomic_store_n(&r->rc_tail, r->rc_tail + 1, __ATOMIC_RELEASE);
		if (rail->lose_send_ack != 0 &&
		    __atomic_sub_fetch(&rail->lose_send_ack, 1, __ATOMIC_ACQ_REL) == 0)
			return FAIL_RETRY;
		break;
	default:
		return FAIL_ACCESS;
	}
	r->rq_psn = (r->rq_psn + 1) & 0xffffff;
	q->sq_psn = (q->sq_psn + 1) & 0xffffff;
	__atomic_fetch_add(&rail->bytes, w->len, __ATOMIC_RELAXED);
	__atomic_fetch_add(&rail->requests, 1, __ATOMIC_RELAXED);
	return DONE;
}

static void
progress(struct vd_qp *q, uint64_t now)
{
	struct vd_rqp *peer;
	struct vd_table *t;
	struct vd_swr *w;
	int st;

	while (q->qp.state == IBV_QPS_RTS && q->sq_n > 0) {
		w = &q->sq[q->sq_head];
		st = execute(q, w, now);
		if (st == WAIT)
			return;
		q->sq_head = (q->sq_head + 1) % q->max_send;
		q->sq_n--;
		if (st == DONE) {
			if (w->flags & IBV_SEND_SIGNALED)
				vd_cq_push(q->qp.send_cq, w->wr_id, IBV_WC_SUCCESS,
					w->opcode == IBV_WR_RDMA_READ ?
					IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE,
					w->len, q->qp.qp_num);
			continue;
		}
		/* An error completes whether signalled or not, and takes
		 * the queue pair (and for an access error its responder)
		 * to the error state. */
		vd_cq_push(q->qp.send_cq, w->wr_id, st == FAIL_RETRY ?
			IBV_WC_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR,
			IBV_WC_SEND, 0, q->qp.qp_num);
		if (st == FAIL_ACCESS && (t = vd_table_of(q->peer)) != NULL) {
			peer = &t->qp[q->dest_qpn - 1];
			__atomic_store_n(&peer->state, IBV_QPS_ERR, __ATOMIC_RELEASE);
		}
		vd_qp_set_state(q, IBV_QPS_ERR);
		vd_qp_flush(q);
	}
}

/* Receive completions the requesters left in our table. */
static void
harvest(struct vd_qp *q)
{
	struct vd_rqp *r = vd_rqp_mine(q);
	struct ibv_wc *w;
	unsigned int n;

	if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == IBV_QPS_ERR &&
	    q->qp.state != IBV_QPS_ERR) {
		/* A requester's access error ended us too. */
		q->qp.state = IBV_QPS_ERR;
		vd_qp_flush(q);
	}
	while (r->rc_head != __atomic_load_n(&r->rc_tail, __ATOMIC_ACQUIRE)) {
		n = r->rc_head % VD_RQ;
		w = vd_cq_push(q->qp.recv_cq, r->rc[n].wr_id, r->rc[n].status,
			    IBV_WC_RECV, r->rc[n].len, q->qp.qp_num);
		if (r->rc[n].with_imm) {
			w->wc_flags = IBV_WC_WITH_IMM;
			w->imm_data = r->rc[n].imm;
		}
		r->rc_head++;
	}
}

static int
vd_poll_cq(struct ibv_cq *cq, int max, struct ibv_wc *wc)
{
	struct vd_cq *c = (struct vd_cq *)cq;
	struct vd_dev *d = (struct vd_dev *)cq->context->device;
	uint64_t now = vd_now_ns();
	struct vd_qp *q;
	int n = 0;

	pthread_mutex_lock(&vd_lock);
	for (q = d->qps; q != NULL; q = q->next) {
		if (q->qp.send_cq == cq)
			progress(q, now);
		if (q->qp.recv_cq == cq)
			harvest(q);
	}
	while (n < max && c->n > 0) {
		wc[n++] = c->wc[c->head];
		c->head = (c->head + 1) % c->size;
		c->n--;
	}
	pthread_mutex_unlock(&vd_lock);
	return n;
}

__attribute__((constructor)) static void
vd_data_ops_register(void)
{
	vd_data_ops = (struct vd_data_ops){
		.post_send = vd_post_send,
		.post_recv = vd_post_recv,
		.poll_cq = vd_poll_cq,
	};
}
