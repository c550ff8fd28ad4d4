/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RDMA verbs transport, shared between its files: rdma.c (devices, ports,
 * memory), rdma_conn.c (queue pairs, the handshake, re-arming a broken
 * link), rdma_xfer.c (the lcore: work requests and completions) and
 * rdma_health.c (link errors and device events pause and resume a port).
 * Calls go down that list, never up.
 */
#ifndef KVT_RDMA_H
#define KVT_RDMA_H

#include <pthread.h>
#include <stdint.h>

#include "rdma_verbs.h"

#include "kvt_pmd_kit.h"
#include "rdma_topo.h"

extern int rd_logtype;
#define RD_LOG(level, fmt, ...)						\
	rte_log(RTE_LOG_ ## level, rd_logtype, "kvt.rdma: " fmt "\n", \
		##__VA_ARGS__)

#define RD_MAX_QPS 8		/* queue pairs per (peer, NIC) */
#define RD_MAX_CONNS 256	/* connections per port (wr_id slot space) */
#define RD_SQ_MAX 4096
#define RD_CHAIN 32		/* work requests per post, one signalled */
#define RD_NOTES 16		/* notification buffers per queue pair */
#define RD_INLINE 64		/* bytes written inline, without a DMA read */
#define RD_CQ_WANT 65536	/* completion queue entries, if the device allows */
#define RD_MSG_PIECES 8		/* work requests one slice may become */
#define RD_PAUSE_ERRORS 3	/* link errors within a second pause a NIC */
#define RD_BACKOFF_MIN_MS 100
#define RD_BACKOFF_MAX_MS 5000

/* Queue pair states; the lcore owns LIVE and BROKEN, the control thread
 * moves BROKEN through REARM back to LIVE. */
enum rd_qp_state {
	RD_QP_LIVE = 1,
	RD_QP_BROKEN,		/* failed; nothing of it outstanding */
	RD_QP_REARM,		/* being reconnected */
};

/* A send queue entry: the descriptor it settles (NULL for a flush READ). */
struct rd_wr {
	struct kvt_desc *d;
	uint64_t posted;	/* TSC */
	uint8_t signalled;
};

struct rd_conn;

struct rd_qp {
	struct ibv_qp *qp;
	struct rd_conn *conn;
	uint32_t state;		/* enum rd_qp_state, atomic */
	uint32_t psn;		/* our send PSN of this incarnation */
	uint32_t remote_qpn;
	uint32_t remote_psn;
	/* Lcore: the send queue in post order; seq counts every post. */
	struct rd_wr *ring;
	uint64_t head;		/* oldest unfinished */
	uint64_t tail;		/* next to post */
	uint8_t dirty;		/* WRITEs posted since the last flush */
	uint32_t notes;		/* notification buffers in use (sender) */
	uint32_t note_next;
	/* Receiver: messages the inbox had no room for, in arrival order. */
	uint8_t held[RD_NOTES];
	uint16_t held_len[RD_NOTES];
	uint32_t held_head;
	uint32_t held_n;
};

/* Wire form of one side's queue pairs (the handshake blobs). */
struct rd_qpinfo {
	uint8_t nqps;
	uint8_t mtu;		/* enum ibv_mtu */
	uint16_t lid;
	uint8_t gid[16];
	uint32_t qpn[RD_MAX_QPS];
	uint32_t psn[RD_MAX_QPS];
	uint64_t flush_addr;	/* 8 bytes the other side may READ */
	uint32_t flush_rkey;
};

/* What a port announces in the handshake. */
struct rd_endpoint {
	char name[32];
	uint8_t link;		/* enum kvt_link */
	uint8_t port_num;
	uint8_t mtu;
	uint16_t lid;
	uint8_t gid[16];
};

struct rd_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[32];
	unsigned int refs;
	/* Limits the device reports (ibv_query_device), capped to what
	 * kvt asks for. */
	uint32_t max_qp_wr;
	uint32_t max_cqe;
	uint32_t max_sge;
	uint64_t max_mr_size;
	uint8_t max_rd_atomic;		/* as a responder (max_qp_rd_atom) */
	uint8_t max_init_rd_atomic;	/* as a requester */
	struct rd_port *port[4];	/* its ports that kvt uses */
	unsigned int nports;
	struct rd_dev *next;
};

/* How often a port without a completion channel is polled while its
 * lcore waits. */
#define RD_IDLE_POLL_US 100

struct rd_port {
	struct kvt_port *port;
	struct rd_dev *dev;
	struct rd_topo_nic nic;
	int nic_index;		/* in the topology */
	unsigned int ordinal;	/* among this engine's rdma ports */
	struct ibv_cq *cq;
	int cq_size;
	/* Completion events wake a waiting lcore (NULL: it polls). */
	struct ibv_comp_channel *chan;
	int armed;		/* lcore: the CQ asked for an event */
	union ibv_gid gid;
	uint16_t lid;
	uint8_t mtu;		/* active MTU (enum ibv_mtu) */
	uint32_t max_msg;	/* longest message the port sends */
	uint32_t max_inline;	/* inline bytes its queue pairs were granted */
	unsigned int nqps;	/* per connection */
	unsigned int sq;	/* send queue depth */
	uint8_t timeout;	/* local ACK timeout exponent */
	uint64_t watchdog_tsc;	/* a work request older than this is stuck */
	uint64_t next_check;	/* TSC of the next watchdog pass */
	uint32_t cq_used;	/* completions that may still come */
	/* Lcore: connections it serves, by wr_id slot. */
	struct rd_conn *slot[RD_MAX_CONNS];
	uint8_t slot_gen[RD_MAX_CONNS];
	unsigned int nslots;	/* highest slot in use + 1 */
	/* Health: errors counted by the lcore, pause set by it and lifted
	 * by the control thread. */
	uint32_t errors;
	uint64_t err_window;	/* TSC of the window start */
	uint32_t paused;	/* atomic */
	uint64_t resume_us;	/* atomic */
	uint32_t backoff_ms;
	/* Control path: every connection, for re-arming. */
	pthread_mutex_t lock;
	struct rd_conn *conns;
};

struct rd_conn {
	struct kvt_conn c;	/* first */
	struct rd_port *rp;
	unsigned int nqps;
	struct rd_qp qp[RD_MAX_QPS];
	uint16_t slot;
	uint32_t rr;
	/* Lcore: descriptors waiting for send queue room. */
	struct kvt_desc *backlog;
	struct kvt_desc *backlog_tail;
	struct kvt_desc *urgent_tail;	/* the last urgent one, at the head */
	uint8_t failed;		/* lcore: the peer's loss was acted on */
	/* The other side. */
	struct rd_endpoint peer;
	uint64_t flush_addr;
	uint32_t flush_rkey;
	/* Registered scratch: flush words, notification buffers. */
	uint8_t *mem;
	size_t mem_len;
	struct ibv_mr *mr;
	/* Control thread: re-arming. */
	uint64_t rearm_at_us;
	uint64_t rearm_sent_us;
	uint32_t rearm_backoff_ms;
	uint32_t rearm_token;
	struct rd_conn *next;	/* in rd_port.conns */
};

/* Layout of rd_conn.mem. */
#define RD_MEM_FLUSH_SRC 0	/* the word the peer reads */
#define RD_MEM_FLUSH_DST 8	/* where our flush reads land */
#define RD_MEM_NOTES 64
static inline uint8_t *
rd_note_buf(struct rd_conn *c, unsigned int q, unsigned int i, int recv)
{
	return c->mem + RD_MEM_NOTES +
		((size_t)(recv ? c->nqps : 0) + q) * RD_NOTES * KVT_NOTIFY_MAX +
		(size_t)i * KVT_NOTIFY_MAX;
}

/* wr_id: slot (16 bits), generation (8), receive flag (1), sequence (39). */
#define RD_WRID(slot, gen, recv, seq)					\
	(((uint64_t)(slot) << 48) | ((uint64_t)(gen) << 40) |		\
	 ((uint64_t)(recv) << 39) | ((uint64_t)(seq) & ((1ull << 39) - 1)))
#define RD_WRID_SLOT(w) ((unsigned int)((w) >> 48))
#define RD_WRID_GEN(w) ((uint8_t)((w) >> 40))
#define RD_WRID_RECV(w) ((unsigned int)(((w) >> 39) & 1))
#define RD_WRID_SEQ(w) ((w) & ((1ull << 39) - 1))

/* Re-arm messages between the two ends of a connection. */
enum rd_msg_type {
	RD_MSG_REARM = 1,
	RD_MSG_REARMED,
	RD_MSG_REFUSED,
};

struct rd_msg {
	uint8_t type;
	uint8_t qp;
	uint32_t token;
	uint32_t qpn;
	uint32_t psn;
};

/* rdma_wire.c */
int rd_qpinfo_encode(const struct rd_qpinfo *qi, struct kvt_buf *b);
int rd_qpinfo_decode(const uint8_t *p, size_t len, struct rd_qpinfo *qi);
int rd_endpoint_encode(const struct rd_endpoint *e, struct kvt_buf *b);
int rd_endpoint_decode(const uint8_t *p, size_t len,
			     struct rd_endpoint *e);
/* The endpoint of eps that port `self` of this host should pair with. */
int rd_pick_endpoint(const char *self, uint8_t link, unsigned int ordinal,
			   const struct rd_endpoint *eps, unsigned int n);
void rd_msg_put(struct kvt_buf *b, const struct rd_msg *m);
/* @return 0, or -EPROTO. */
int rd_msg_get(const uint8_t *p, size_t len, struct rd_msg *m);

/* rdma_conn.c */
int rd_conn_open(struct kvt_port *port, const struct kvt_peer_info *pi,
		       const struct kvt_endpoint *eps, unsigned int neps,
		       struct kvt_buf *req, struct kvt_conn **out);
int rd_conn_accept(struct kvt_port *port, const struct kvt_accept *a,
			 const uint8_t *req, size_t len, struct kvt_buf *rep,
			 struct kvt_conn **out);
int rd_conn_ready(struct kvt_conn *c, const uint8_t *rep, size_t len);
void rd_conn_close(struct kvt_conn *c);
int rd_conn_msg(struct kvt_conn *c, const uint8_t *msg, size_t len,
		      struct kvt_buf *reply);
void rd_ctl_tick(struct kvt_port *port, uint64_t now_us);

/* rdma_xfer.c */
void rd_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n);
unsigned int rd_poll(struct kvt_port *port);
uint64_t rd_idle(struct kvt_port *port, int *fd);
/* Lcore: post receive buffers i of queue pair q. */
int rd_post_recv(struct rd_conn *c, unsigned int q, unsigned int i);
/* Lcore: a queue pair failed; fail what it holds, mark conn and NIC. */
void rd_qp_broken(struct rd_conn *c, unsigned int q, int err);
/* Lcore: fail every descriptor of c (connection closing or lost). */
void rd_conn_drain(struct rd_conn *c, int err);

/* A registered region's local key on port (its key is the ibv_mr). */
static inline uint32_t
rd_lkey(const struct kvt_lmem *m, const struct kvt_port *port)
{
	return ((const struct ibv_mr *)m->key[port->id])->lkey;
}

/* An imported region's remote key on port (its key is the rkey). */
static inline uint32_t
rd_rkey(const struct kvt_rmem *m, const struct kvt_port *port)
{
	return (uint32_t)(uintptr_t)m->key[port->id];
}

/* rdma_health.c */
/* Lcore: count a link error; enough of them pause the NIC. */
void rd_port_error(struct rd_port *rp);
/* Control thread: act on the device's asynchronous events. */
void rd_async_events(struct rd_port *rp);

#endif /* KVT_RDMA_H */
