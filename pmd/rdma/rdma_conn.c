/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RDMA connections: RC queue pairs to one peer through one NIC, set up by
 * kvt's handshake, and re-armed after a failure.
 *
 * Handshake: the initiator creates its queue pairs (INIT) and sends their
 * numbers and first PSNs, its GID/LID, MTU and flush word (CONN_REQ blob);
 * the acceptor creates as many, takes them to RTS and answers the same
 * (CONN_REP blob); the initiator takes its own to RTS.  The path MTU is
 * the smaller of the two ports' MTUs.
 *
 * Re-arming: a queue pair that failed (rdma_xfer.c) waits a backoff, then
 * the initiator resets it and sends REARM {qp, new PSN} through kvt's
 * control connection; the acceptor resets its end to the new PSN and
 * answers REARMED {its PSN}; the initiator goes to RTS and the queue pair
 * carries slices again.  Lost messages are covered by a timeout, after
 * which the backoff doubles.  Every state change of a queue pair the lcore
 * uses runs on that lcore (kvt_port_call()).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <rte_cycles.h>
#include <rte_random.h>

#include "rdma.h"

#define RD_CALL_MS 5000

/* ---- queue pair transitions ---- */

static uint32_t
new_psn(void)
{
	return (uint32_t)(rte_rand() & 0xffffff);
}

static int
qp_init(struct rd_port *rp, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = rp->nic.port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};

	return rd_ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0 ? -errno : 0;
}

static int
qp_rtr(struct rd_conn *c, struct rd_qp *q)
{
	struct rd_port *rp = c->rp;
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = (enum ibv_mtu)RTE_MIN(rp->mtu, c->peer.mtu),
		.dest_qp_num = q->remote_qpn,
		.rq_psn = q->remote_psn,
		.max_dest_rd_atomic = rp->dev->max_rd_atomic,
		.min_rnr_timer = 12,	/* 0.64 ms */
		.ah_attr = {
			.dlid = c->peer.lid,
			.port_num = rp->nic.port,
		},
	};

	/* RoCE always routes by GID; InfiniBand by LID within a subnet. */
	if (rp->nic.link == KVT_LINK_ETH || c->peer.lid == 0) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.sgid_index = (uint8_t)RTE_MAX(rp->nic.gid_index, 0);
		memcpy(a.ah_attr.grh.dgid.raw, c->peer.gid, 16);
	}
	return rd_ibv.modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV |
				IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				IBV_QP_MAX_DEST_RD_ATOMIC |
				IBV_QP_MIN_RNR_TIMER) != 0 ? -errno : 0;
}

static int
qp_rts(struct rd_conn *c, struct rd_qp *q)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = c->rp->timeout,
		.retry_cnt = 7,
		.rnr_retry = 7,	/* a busy receiver is waited for; the
				 * watchdog bounds the wait */
		.sq_psn = q->psn,
		.max_rd_atomic = c->rp->dev->max_init_rd_atomic,
	};

	return rd_ibv.modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				IBV_QP_MAX_QP_RD_ATOMIC) != 0 ? -errno : 0;
}

static int
qp_reset(struct rd_port *rp, struct rd_qp *q)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	if (rd_ibv.modify_qp(q->qp, &a, IBV_QP_STATE) != 0)
		return -errno;
	q->psn = new_psn();
	return qp_init(rp, q->qp);
}

/* ---- connection objects ---- */

static void
conn_free(struct rd_conn *c)
{
	unsigned int i;

	for (i = 0; i < c->nqps; i++) {
		if (c->qp[i].qp != NULL && rd_ibv.destroy_qp(c->qp[i].qp) != 0)
			RD_LOG(WARNING, "%s: destroying a queue pair: %s",
			       c->rp->nic.name, strerror(errno));
		free(c->qp[i].ring);
	}
	if (c->mr != NULL)
		rd_ibv.dereg_mr(c->mr);
	if (c->mem != NULL)
		munmap(c->mem, c->mem_len);
	free(c);
}

static struct rd_conn *
conn_new(struct rd_port *rp, unsigned int nqps)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = rp->cq,
		.recv_cq = rp->cq,
		.cap = {
			.max_send_wr = rp->sq,
			.max_recv_wr = RD_NOTES,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = RD_INLINE,
		},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	struct rd_conn *c;
	unsigned int i;

	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	c->rp = rp;
	c->nqps = nqps;
	c->mem_len = RTE_ALIGN_CEIL(RD_MEM_NOTES + 2 * (size_t)nqps * RD_NOTES *
				    KVT_NOTIFY_MAX, 4096);
	c->mem = mmap(NULL, c->mem_len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c->mem == MAP_FAILED) {
		c->mem = NULL;
		goto fail;
	}
	c->mr = rd_ibv.reg_mr(rp->dev->pd, c->mem, c->mem_len,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (c->mr == NULL) {
		RD_LOG(ERR, "%s: cannot register connection buffers: %s",
		       rp->nic.name, strerror(errno));
		goto fail;
	}
	for (i = 0; i < nqps; i++) {
		struct rd_qp *q = &c->qp[i];

		q->conn = c;
		q->ring = calloc(rp->sq, sizeof(q->ring[0]));
		if (q->ring == NULL)
			goto fail;
		q->qp = rd_ibv.create_qp(rp->dev->pd, &ia);
		if (q->qp == NULL && ia.cap.max_inline_data > sizeof(uint64_t)) {
			/* A device with less inline room: fences need 8. */
			RD_LOG(DEBUG, "%s: no queue pair with %u inline bytes (%s): asking for %zu",
			       rp->nic.name, ia.cap.max_inline_data,
			       strerror(errno), sizeof(uint64_t));
			ia.cap.max_inline_data = sizeof(uint64_t);
			q->qp = rd_ibv.create_qp(rp->dev->pd, &ia);
		}
		if (q->qp == NULL) {
			RD_LOG(ERR, "%s: cannot create a queue pair: %s",
			       rp->nic.name, strerror(errno));
			goto fail;
		}
		/* What the device granted (ibv_create_qp writes it back). */
		rp->max_inline = ia.cap.max_inline_data;
		q->psn = new_psn();
		if (qp_init(rp, q->qp) < 0) {
			RD_LOG(ERR, "%s: queue pair to INIT: %s", rp->nic.name,
			       strerror(errno));
			goto fail;
		}
	}
	return c;

fail:
	conn_free(c);
	return NULL;
}

static void
qpinfo_fill(const struct rd_conn *c, struct rd_qpinfo *qi)
{
	const struct rd_port *rp = c->rp;
	unsigned int i;

	memset(qi, 0, sizeof(*qi));
	qi->nqps = (uint8_t)c->nqps;
	qi->mtu = rp->mtu;
	qi->lid = rp->lid;
	memcpy(qi->gid, rp->gid.raw, 16);
	qi->flush_addr = (uint64_t)(uintptr_t)(c->mem + RD_MEM_FLUSH_SRC);
	qi->flush_rkey = c->mr->rkey;
	for (i = 0; i < c->nqps; i++) {
		qi->qpn[i] = c->qp[i].qp->qp_num;
		qi->psn[i] = c->qp[i].psn;
	}
}

static void
peer_take(struct rd_conn *c, const struct rd_qpinfo *qi)
{
	unsigned int i;

	c->peer.mtu = qi->mtu;
	c->peer.lid = qi->lid;
	memcpy(c->peer.gid, qi->gid, 16);
	c->flush_addr = qi->flush_addr;
	c->flush_rkey = qi->flush_rkey;
	for (i = 0; i < c->nqps; i++) {
		c->qp[i].remote_qpn = qi->qpn[i];
		c->qp[i].remote_psn = qi->psn[i];
	}
}

static int
conn_rts(struct rd_conn *c)
{
	unsigned int i;
	int ret = 0;

	for (i = 0; i < c->nqps && ret == 0; i++) {
		ret = qp_rtr(c, &c->qp[i]);
		if (ret == 0)
			ret = qp_rts(c, &c->qp[i]);
	}
	if (ret < 0)
		RD_LOG(ERR, "%s: queue pair to %s: %s", c->rp->nic.name,
		       c->c.info.name, strerror(-ret));
	return ret;
}

/* Lcore: give the connection a wr_id slot; an acceptor posts its
 * notification buffers.  The queue pairs are in RTS already. */
static int
attach_conn(struct kvt_port *port, void *arg)
{
	struct rd_port *rp = port->priv;
	struct rd_conn *c = arg;
	unsigned int s, q, i;
	int ret;

	for (s = 0; s < RD_MAX_CONNS && rp->slot[s] != NULL; s++)
		;
	if (s == RD_MAX_CONNS)
		return -ENOSPC;
	/* Every posted receive may complete: room in the completion queue
	 * is kept for them. */
	if (c->c.accepted &&
	    rp->cq_used + c->nqps * RD_NOTES + RD_CHAIN > (uint32_t)rp->cq_size)
		return -ENOSPC;
	c->slot = (uint16_t)s;
	rp->slot_gen[s]++;
	for (q = 0; q < c->nqps; q++) {
		if (c->c.accepted) {
			for (i = 0; i < RD_NOTES; i++) {
				ret = rd_post_recv(c, q, i);
				if (ret < 0)
					return ret;
			}
		}
		__atomic_store_n(&c->qp[q].state, RD_QP_LIVE, __ATOMIC_RELEASE);
	}
	if (c->c.accepted)
		rp->cq_used += c->nqps * RD_NOTES;
	rp->slot[s] = c;
	rp->nslots = RTE_MAX(rp->nslots, s + 1);
	return 0;
}

/* Lcore: forget the connection; fail what it still holds. */
static int
detach_conn(struct kvt_port *port, void *arg)
{
	struct rd_port *rp = port->priv;
	struct rd_conn *c = arg;

	rd_conn_drain(c, -ECANCELED);
	if (rp->slot[c->slot] == c) {
		rp->slot[c->slot] = NULL;
		if (c->c.accepted)
			rp->cq_used -= c->nqps * RD_NOTES;
	}
	while (rp->nslots > 0 && rp->slot[rp->nslots - 1] == NULL)
		rp->nslots--;
	return 0;
}

static void
conn_list_add(struct rd_conn *c)
{
	pthread_mutex_lock(&c->rp->lock);
	c->next = c->rp->conns;
	c->rp->conns = c;
	pthread_mutex_unlock(&c->rp->lock);
}

static void
conn_list_del(struct rd_conn *c)
{
	struct rd_conn **pp;

	pthread_mutex_lock(&c->rp->lock);
	for (pp = &c->rp->conns; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	pthread_mutex_unlock(&c->rp->lock);
}

/* ---- the PMD's connection callbacks ---- */

int
rd_conn_open(struct kvt_port *port, const struct kvt_peer_info *pi,
		   const struct kvt_endpoint *eps, unsigned int neps,
		   struct kvt_buf *req, struct kvt_conn **out)
{
	struct rd_endpoint e[64];
	struct rd_port *rp = port->priv;
	struct rd_qpinfo qi;
	struct rd_conn *c;
	unsigned int i, n = 0;
	uint16_t ids[64];
	int k;

	for (i = 0; i < neps && n < RTE_DIM(e); i++) {
		if (rd_endpoint_decode(eps[i].blob, eps[i].len, &e[n]) < 0) {
			RD_LOG(WARNING, "peer %s: malformed rdma endpoint %s",
			       pi->name, eps[i].port_name);
			continue;
		}
		ids[n++] = eps[i].port_id;
	}
	k = rd_pick_endpoint(rp->nic.name, rp->nic.link, rp->ordinal, e, n);
	if (k < 0)
		return -ENOTSUP;
	c = conn_new(rp, rp->nqps);
	if (c == NULL)
		return -ENOMEM;
	c->peer = e[k];
	c->c.remote_port = ids[k];
	qpinfo_fill(c, &qi);
	if (rd_qpinfo_encode(&qi, req) < 0) {
		conn_free(c);
		return -ENOMEM;
	}
	*out = &c->c;
	return 0;
}

int
rd_conn_ready(struct kvt_conn *kc, const uint8_t *rep, size_t len)
{
	struct rd_conn *c = (struct rd_conn *)kc;
	struct rd_qpinfo qi;
	int ret;

	ret = rd_qpinfo_decode(rep, len, &qi);
	if (ret == 0 && qi.nqps != c->nqps)
		ret = -EPROTO;
	if (ret < 0) {
		RD_LOG(ERR, "peer %s: malformed rdma answer", kc->info.name);
		return ret;
	}
	peer_take(c, &qi);
	ret = conn_rts(c);
	if (ret == 0)
		ret = kvt_port_call(kc->port, attach_conn, c, RD_CALL_MS);
	if (ret == 0)
		conn_list_add(c);
	return ret;
}

static void
free_inbox(void *arg)
{
	free(arg);
}

int
rd_conn_accept(struct kvt_port *port, const struct kvt_accept *a,
		     const uint8_t *req, size_t len, struct kvt_buf *rep,
		     struct kvt_conn **out)
{
	struct rd_port *rp = port->priv;
	struct rd_qpinfo qi, mine;
	struct rd_conn *c;
	int ret;

	ret = rd_qpinfo_decode(req, len, &qi);
	if (ret < 0) {
		RD_LOG(WARNING, "peer %s: malformed rdma connection request",
		       a->info.name);
		return ret;
	}
	c = conn_new(rp, qi.nqps);
	if (c == NULL)
		return -ENOMEM;
	kvt_conn_accept_init(&c->c, port, a);
	c->peer.link = rp->nic.link;
	peer_take(c, &qi);
	c->c.inbox = malloc(kvt_inbox_size(256));
	if (c->c.inbox == NULL) {
		ret = -ENOMEM;
		goto free_conn;
	}
	kvt_inbox_init(c->c.inbox, 256);
	ret = kvt_inbox_attach(c->c.inbox, a->info.name);
	if (ret < 0)
		goto free_inbox;
	ret = conn_rts(c);
	if (ret == 0)
		ret = kvt_port_call(port, attach_conn, c, RD_CALL_MS);
	if (ret < 0)
		goto detach_inbox;
	qpinfo_fill(c, &mine);
	mine.mtu = (uint8_t)RTE_MIN(rp->mtu, qi.mtu);
	ret = rd_qpinfo_encode(&mine, rep);
	if (ret < 0) {
		kvt_port_call(port, detach_conn, c, 0);
		goto detach_inbox;
	}
	conn_list_add(c);
	*out = &c->c;
	return 0;

detach_inbox:
	kvt_inbox_detach(c->c.inbox);
free_inbox:
	free(c->c.inbox);
free_conn:
	conn_free(c);
	return ret;
}

void
rd_conn_close(struct kvt_conn *kc)
{
	struct rd_conn *c = (struct rd_conn *)kc;

	conn_list_del(c);
	kvt_port_call(kc->port, detach_conn, c, 0);
	if (kc->inbox != NULL)
		kvt_inbox_retire(kc->inbox, free_inbox, kc->inbox);
	conn_free(c);
}

/* ---- re-arming a failed queue pair ---- */

struct rearm {
	struct rd_conn *c;
	unsigned int q;
	int step;		/* 0: reset (initiator), 1: accept, 2: finish */
};

/* Lcore: the state changes of one queue pair. */
static int
rearm_step(struct kvt_port *port, void *arg)
{
	struct rearm *r = arg;
	struct rd_conn *c = r->c;
	struct rd_qp *q = &c->qp[r->q];
	unsigned int i;
	int ret = 0;

	switch (r->step) {
	case 0:
		if (__atomic_load_n(&q->state, __ATOMIC_ACQUIRE) != RD_QP_BROKEN)
			return -EBUSY;
		ret = qp_reset(c->rp, q);
		if (ret == 0)
			__atomic_store_n(&q->state, RD_QP_REARM, __ATOMIC_RELEASE);
		return ret;
	case 1:
		/* The acceptor's end may look healthy: reset it anyway, the
		 * initiator starts from a new PSN.  Messages already in the
		 * completion queue are taken first: their buffers are
		 * posted again below. */
		rd_poll(port);
		__atomic_store_n(&q->state, RD_QP_REARM, __ATOMIC_RELEASE);
		if (q->held_n != 0)
			RD_LOG(WARNING, "%s: %u notifications from %s dropped: the application did not take them before the link was re-armed",
			       c->rp->nic.name, q->held_n, c->c.info.name);
		q->held_n = 0;
		q->held_head = 0;
		ret = qp_reset(c->rp, q);
		for (i = 0; i < RD_NOTES && ret == 0; i++)
			ret = rd_post_recv(c, r->q, i);
		break;
	default:
		if (__atomic_load_n(&q->state, __ATOMIC_ACQUIRE) != RD_QP_REARM)
			return -ESTALE;
		break;
	}
	if (ret == 0)
		ret = qp_rtr(c, q);
	if (ret == 0)
		ret = qp_rts(c, q);
	__atomic_store_n(&q->state, ret == 0 ? RD_QP_LIVE : RD_QP_BROKEN,
			 __ATOMIC_RELEASE);
	return ret;
}

static int
live_qps(const struct rd_conn *c)
{
	unsigned int i;
	int n = 0;

	for (i = 0; i < c->nqps; i++)
		n += __atomic_load_n(&c->qp[i].state, __ATOMIC_ACQUIRE) ==
			RD_QP_LIVE;
	return n;
}

static void
rearm_start(struct rd_conn *c, unsigned int qi, uint64_t now)
{
	struct rearm r = { c, qi, 0 };
	struct kvt_buf b = { 0 };
	struct rd_msg m;

	c->rearm_backoff_ms = RTE_MIN(RTE_MAX(c->rearm_backoff_ms * 2,
					      (uint32_t)RD_BACKOFF_MIN_MS),
				      (uint32_t)RD_BACKOFF_MAX_MS);
	c->rearm_at_us = now + c->rearm_backoff_ms * 1000ull;
	if (kvt_port_call(c->c.port, rearm_step, &r, RD_CALL_MS) < 0)
		return;
	m.type = RD_MSG_REARM;
	m.qp = (uint8_t)qi;
	m.token = ++c->rearm_token;
	m.qpn = c->qp[qi].qp->qp_num;
	m.psn = c->qp[qi].psn;
	rd_msg_put(&b, &m);
	c->rearm_sent_us = now;
	if (kvt_conn_msg(&c->c, b.data, b.len) < 0)
		__atomic_store_n(&c->qp[qi].state, RD_QP_BROKEN, __ATOMIC_RELEASE);
	kvt_buf_free(&b);
}

/* Control thread: re-probe paused NICs, re-arm failed queue pairs. */
void
rd_ctl_tick(struct kvt_port *port, uint64_t now)
{
	struct rd_port *rp = port->priv;
	uint64_t limit = 1000ull * kvt_pmd_env()->timeout_ms;
	struct rd_conn *c;
	unsigned int i;
	uint32_t st;
	int paused;

	rd_async_events(rp);
	if (__atomic_load_n(&rp->paused, __ATOMIC_ACQUIRE) &&
	    now >= __atomic_load_n(&rp->resume_us, __ATOMIC_ACQUIRE)) {
		RD_LOG(NOTICE, "%s: probing again after a pause", rp->nic.name);
		__atomic_store_n(&rp->paused, 0, __ATOMIC_RELEASE);
	}
	paused = (int)__atomic_load_n(&rp->paused, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&rp->lock);
	for (c = rp->conns; c != NULL; c = c->next) {
		if (c->c.accepted || __atomic_load_n(&c->c.dead, __ATOMIC_ACQUIRE))
			continue;
		for (i = 0; i < c->nqps; i++) {
			st = __atomic_load_n(&c->qp[i].state, __ATOMIC_ACQUIRE);
			if (st == RD_QP_REARM && now - c->rearm_sent_us > limit)
				__atomic_store_n(&c->qp[i].state, RD_QP_BROKEN,
						 __ATOMIC_RELEASE);
			else if (st == RD_QP_BROKEN && !paused &&
				 now >= c->rearm_at_us)
				rearm_start(c, i, now);
		}
		kvt_conn_set_down(&c->c, paused || live_qps(c) == 0);
	}
	pthread_mutex_unlock(&rp->lock);
}

int
rd_conn_msg(struct kvt_conn *kc, const uint8_t *p, size_t len,
		  struct kvt_buf *reply)
{
	struct rd_conn *c = (struct rd_conn *)kc;
	struct rearm r = { c, 0, 1 };
	struct rd_msg m, out;
	struct rd_qp *q;

	if (rd_msg_get(p, len, &m) < 0 || m.qp >= c->nqps)
		return -EPROTO;
	q = &c->qp[m.qp];
	r.q = m.qp;
	if (m.type == RD_MSG_REARM && kc->accepted) {
		if (m.qpn != q->remote_qpn)
			return -EPROTO;
		q->remote_psn = m.psn;
		out = m;
		out.type = kvt_port_call(kc->port, rearm_step, &r, RD_CALL_MS) == 0 ?
			RD_MSG_REARMED : RD_MSG_REFUSED;
		out.qpn = q->qp->qp_num;
		out.psn = q->psn;
		rd_msg_put(reply, &out);
		RD_LOG(INFO, "%s: queue pair %u to %s re-armed: %s", c->rp->nic.name,
		       m.qp, kc->info.name, out.type == RD_MSG_REARMED ? "ok" : "failed");
		return 0;
	}
	if (kc->accepted || m.token != c->rearm_token || m.qpn != q->remote_qpn)
		return 0;	/* stale or foreign: ignore */
	if (m.type == RD_MSG_REARMED) {
		q->remote_psn = m.psn;
		r.step = 2;
		if (kvt_port_call(kc->port, rearm_step, &r, RD_CALL_MS) == 0) {
			RD_LOG(NOTICE, "%s: queue pair %u to %s carries slices again",
			       c->rp->nic.name, m.qp, kc->info.name);
			c->rearm_backoff_ms = 0;
			return 0;
		}
	}
	__atomic_store_n(&q->state, RD_QP_BROKEN, __ATOMIC_RELEASE);
	return 0;
}
