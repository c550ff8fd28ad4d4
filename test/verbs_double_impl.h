/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The verbs double's own structures, shared by its two files:
 * verbs_double.c (devices, memory regions, completion queues, queue
 * pairs, posting) and verbs_double_exec.c (executing posted requests
 * when a completion queue is polled).  Not for tests: they use
 * verbs_double.h.
 */
#ifndef KVT_VERBS_DOUBLE_IMPL_H
#define KVT_VERBS_DOUBLE_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#include "verbs_double.h"

#define VD_MIN(a, b) ((uint64_t)(a) < (uint64_t)(b) ? (uint64_t)(a) : (uint64_t)(b))


#define VD_MAX_DEVS 8
#define VD_MAX_MRS 1024
#define VD_MAX_QPS 1024
#define VD_RQ 64
#define VD_INLINE 256

/* Responder state of one queue pair, in the shared table. */
struct vd_rqp {
	uint32_t used;
	uint32_t state;		/* enum ibv_qp_state */
	uint32_t rq_psn;	/* next PSN it accepts */
	uint32_t rq_head;	/* posted receives: [head, tail) */
	uint32_t rq_tail;
	struct {
		uint64_t wr_id;
		uint64_t addr;
		uint32_t len;
	} rq[VD_RQ];
	uint32_t rc_head;	/* receive completions: [head, tail) */
	uint32_t rc_tail;
	struct {
		uint64_t wr_id;
		uint32_t len;
		uint32_t status;
		uint32_t imm;	/* network order, as the wire has it */
		uint32_t with_imm;
	} rc[VD_RQ];
};

struct vd_rmr {
	uint32_t key;		/* 0: free */
	uint32_t access;
	uint64_t addr;
	uint64_t len;
	uint32_t busy;		/* requesters moving bytes under the key */
};

struct vd_table {
	struct vd_rmr mr[VD_MAX_MRS];
	struct vd_rqp qp[VD_MAX_QPS];
};

struct vd_swr {
	uint64_t wr_id;
	uint32_t opcode;
	uint32_t flags;
	uint64_t local;
	uint32_t len;
	uint64_t remote;
	uint32_t rkey;
	uint32_t imm;
	uint64_t posted_ns;
	uint8_t inl[VD_INLINE];
};

struct vd_cq {
	struct ibv_cq cq;
	struct ibv_wc *wc;
	unsigned int size, head, n;
};

struct vd_dev;

struct vd_qp {
	struct ibv_qp qp;
	struct vd_dev *dev;
	unsigned int idx;
	uint32_t sq_psn;
	uint32_t dest_qpn;
	pid_t peer;
	unsigned int max_send;
	struct vd_swr *sq;
	unsigned int sq_head, sq_n;
	struct vd_qp *next;
};

struct vd_dev {
	struct ibv_device dev;
	struct ibv_context ctx;
	struct vd_rail *rail;
	unsigned int index;
	uint32_t seen_down;
	uint64_t budget_ns;	/* rate limiting: when the rail is free */
	struct vd_qp *qps;
};

/* Device limits: see verbs_double.c. */
struct vd_limits {
	uint64_t cqe, qp_wr, sge, inl, mr, rd_atom, init_rd_atom, msg, mtu;
};
const struct vd_limits *vd_limits(void);

/* This process's table (its memory regions, its queue pairs' responder
 * state). */
extern struct vd_table *vd_mine;

/* Guards the process's devices, queue pairs and table entries. */
extern pthread_mutex_t vd_lock;

uint64_t vd_now_ns(void);
/* The table of process pid (ours included), mapped; NULL when gone. */
struct vd_table *vd_table_of(pid_t pid);
/* Memory region key of table t, checked for [addr, addr + len) and
 * access, marked busy; vd_mr_leave() ends it. */
struct vd_rmr *vd_mr_enter(struct vd_table *t, uint32_t key, uint64_t addr,
			   uint64_t len, unsigned int access);
void vd_mr_leave(struct vd_rmr *m);
/* Add a completion to cq; @return it, for its other fields. */
struct ibv_wc *vd_cq_push(struct ibv_cq *cq, uint64_t wr_id,
			  enum ibv_wc_status st, enum ibv_wc_opcode op,
			  uint32_t len, uint32_t qpn);
struct vd_rqp *vd_rqp_mine(const struct vd_qp *q);
void vd_qp_flush(struct vd_qp *q);
void vd_qp_set_state(struct vd_qp *q, enum ibv_qp_state s);
/* The data path's ops, which verbs_double_exec.c registers from a
 * constructor (so this file never calls up into it); every context
 * opened gets them. */
struct vd_data_ops {
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr,
			 struct ibv_send_wr **bad);
	int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			 struct ibv_recv_wr **bad);
	int (*poll_cq)(struct ibv_cq *cq, int max, struct ibv_wc *wc);
};
extern struct vd_data_ops vd_data_ops;

#endif
