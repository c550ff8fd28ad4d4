/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Engine internals shared by the files of lib/.  PMDs never include this.
 */
#ifndef KVT_PRIVATE_H
#define KVT_PRIVATE_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>

#include <rte_log.h>
#include <rte_ring.h>
#include <rte_spinlock.h>
#include <rte_mempool.h>

#include "kvt.h"
#include "kvt_pmd_kit.h"
#include "rangemap.h"

extern int kvt_logtype;
#define KVT_LOG(level, fmt, ...)					\
	rte_log(RTE_LOG_ ## level, kvt_logtype, "kvt: " fmt "\n",	\
		##__VA_ARGS__)

#define KVT_MAX_LCORES 16
#define KVT_MAX_PMD_ARGS 8
#define KVT_BURST 32
/* Bulk descriptors an lcore hands to its ports between two looks at its
 * urgent ring, and the largest bulk slice an lcore cuts (ordered ports):
 * urgent work waits behind one such copy at most (16 KiB over shm, a few
 * microseconds), while bulk pays one more slice per 16 KiB. */
#define KVT_BULK_STEP 1
#define KVT_BULK_SLICE (16u << 10)
#define KVT_PRIO_CLASSES 3
/* How long an lcore stays hot after its last work before its idle policy
 * applies ("wait:US" sets it for the wait policy), and how often a
 * waiting lcore polls a port that cannot wake it (no idle op). */
#define KVT_IDLE_GRACE_US 200
#define KVT_WAIT_POLL_US 100

/* ------------------------------------------------------------------ */
/* Options (options.c)                                                 */
/* ------------------------------------------------------------------ */

enum kvt_idle {
	KVT_IDLE_SPIN,
	KVT_IDLE_PAUSE,
	KVT_IDLE_SLEEP,
	KVT_IDLE_WAIT,	/* block until a submission or a port wakes it */
};

struct kvt_opts {
	char name[64];
	char listen[64];
	char secret[128];
	char *pmd_args[KVT_MAX_PMD_ARGS];
	unsigned int n_pmd_args;
	char *nic;
	enum kvt_idle idle;
	uint32_t idle_us;
	uint32_t slice;
	unsigned int lcores[KVT_MAX_LCORES];
	unsigned int n_lcores;
	uint32_t timeout_ms;
	uint32_t descs;
	char *topo;
	char *meta;
	char cluster[64];
};

/*
 * Parse kvt's options from argv[0..argc).  Stops at the first argument
 * that is not a kvt option.  @return the number consumed, or -EINVAL with
 * the reason in err.
 */
int kvt_opts_parse(struct kvt_opts *o, int argc, char **argv,
		   char *err, size_t errlen);
void kvt_opts_defaults(struct kvt_opts *o);
void kvt_opts_free(struct kvt_opts *o);
/* Parse "64K", "1M", "4096": @return 0 or -EINVAL. */
int kvt_parse_size(const char *s, uint64_t *out);
/* Parse "ip:port" ("host:port" resolves): @return 0 or -EINVAL. */
int kvt_parse_addr(const char *s, struct sockaddr_in *sa);
int kvt_parse_idle(const char *v, enum kvt_idle *idle, uint32_t *us);
void kvt_loc_str(const struct kvt_loc *loc, char *buf, size_t len);

/* ------------------------------------------------------------------ */
/* RCU-style read sections (rcu.c)                                     */
/* ------------------------------------------------------------------ */

/*
 * Readers enter and leave with two atomic operations and never wait;
 * writers publish a new version, then kvt_rcu_synchronize() before they
 * free the old one.
 */
unsigned int kvt_rcu_read_lock(void);
void kvt_rcu_read_unlock(unsigned int token);
void kvt_rcu_synchronize(void);

/* ------------------------------------------------------------------ */
/* Lcores and ports (lcore.c, port.c)                                  */
/* ------------------------------------------------------------------ */

/* Where a submission's next slice starts: its request, the offset in
 * it (in a block list: in block blk), and the slices not cut yet. */
struct kvt_cursor {
	uint64_t off;
	uint64_t left;
	uint32_t req;
	uint32_t blk;
};

struct kvt_lcore {
	unsigned int id;
	/* Descriptors, from any thread: one ring per enum kvt_prio. */
	struct rte_ring *ring[KVT_PRIO_CLASSES];
	struct rte_ring *calls;	/* kvt_port_call()s: control work */
	/* Wait policy: 1 while the lcore blocks (or is about to); whoever
	 * clears it writes evfd.  Read by every submitter, written only
	 * around a sleep: kept off the lines the lcore writes each loop. */
	uint32_t sleeping;
	int evfd;		/* eventfd: a submission or a call wakes it */
	int epfd;		/* evfd and the ports' wake descriptors */
	int no_grace;		/* every port is KVT_PMD_F_SYSCALLS */
	struct kvt_port *ports[KVT_MAX_PORTS];
	unsigned int nports;
	int tid;		/* thread id, for tests and tracing */
	uint32_t stop;
	uint32_t running;
	/* Per class: descriptors taken from its ring, not handed out yet
	 * (a submission being cut into slices holds the rest behind it). */
	struct kvt_held {
		struct kvt_desc *d[KVT_BURST];
		unsigned int pos, n;
		struct kvt_cursor cut;	/* of the cut at d[pos], once begun */
		int cutting;
	} held[KVT_PRIO_CLASSES];
	struct kvt_desc *defer;	/* tail ops to run next iteration, FIFO */
	struct kvt_desc *defer_tail;
	uint64_t loops;
	uint64_t idle_loops;
};

/* Descriptor flags (kvt_desc.flags). */
#define KVT_DF_EMBEDDED 0x01	/* not from the mempool */
#define KVT_DF_RETRY 0x02	/* waiting for room at the peer */
#define KVT_DF_ORDERED 0x04	/* a slice of an ORDERED submission */

/*
 * Engine-private descriptor op, never handed to a PMD: an ORDERED
 * submission whose slices its lcore cuts from the request array itself
 * (kvt_cut()), so slice descriptors never leave the lcore's cache.
 */
#define KVT_DESC_CUT 0x40

/* cut.c, lcore: where the submission behind cut starts (its cursor is
 * then the lcore's own, so its cutting writes no line the submitter or a
 * poll reads). */
void kvt_cut_begin(const struct kvt_desc *cut, struct kvt_cursor *cur);
/* cut.c, lcore: cut up to max slices of the submission behind cut, from
 * cur, into d (descriptors from the engine's pool); @return how many, 0
 * when none are left or the pool is empty; *fin: none left. */
unsigned int kvt_cut(struct kvt_desc *cut, struct kvt_cursor *cur,
		     struct kvt_desc **d, unsigned int max, int *fin);

/*
 * ThreadSanitizer cannot see that an rte_ring hands what a thread wrote
 * before an enqueue to the thread that dequeues (DPDK's ring orders with
 * barriers, not C11 atomics).  The ring is the synchronisation object:
 * producers release on it before they enqueue, its consumer acquires
 * after a dequeue.  Nothing is compiled outside TSan builds.
 */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define KVT_TSAN_RELEASE(p) __tsan_release((void *)(p))
#define KVT_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define KVT_TSAN_RELEASE(p) do { } while (0)
#define KVT_TSAN_ACQUIRE(p) do { } while (0)
#endif

/* Every registered transport checks the options it interprets. */
int kvt_pmds_env_check(const struct kvt_pmd_env *env);
int kvt_ports_probe(void);
int kvt_ports_assign(void);
int kvt_ports_start(void);
/* Memory devices (lib/mem/dev.c): probe them all once per kvt_init. */
void kvt_devs_probe(void);
/* The device addr lives on (*loc set), or NULL: host memory. */
const struct kvt_dev *kvt_dev_locate(const void *addr, struct kvt_loc *loc);
/* Device memory from the first device that owns loc's kind; -ENODEV
 * when none does. */
int kvt_dev_alloc(const struct kvt_loc *loc, size_t len, void **addr,
		  const struct kvt_dev **owner);
int kvt_dev_free(const struct kvt_dev *d, const struct kvt_loc *loc,
		 void *addr, size_t len);
/* The device that copies into device memory (fence tables), or NULL. */
const struct kvt_dev *kvt_dev_copier(void);
int kvt_dev_copy(const struct kvt_dev *d, void *dst, const void *src,
		 size_t len);
int kvt_dev_stream_wait(const struct kvt_dev *d, const uint64_t *word,
			uint64_t room, uint64_t timeout_ns, uint32_t *status,
			void *stream);
/* Batch memory: reachable by every device that may complete into it. */
void kvt_host_register(void *addr, size_t len);
void kvt_host_unregister(void *addr);
void kvt_ports_remove(void);
struct kvt_port *kvt_port_get(unsigned int id);
uint32_t kvt_best_ports(uint32_t mask);
/* http.c: POST body (JSON) to url ("http://host:port/path") before
 * deadline_us; the answer's body (NUL-ended, caller frees, at most max
 * bytes) and HTTP status.  0, or -EINVAL (url), -EHOSTUNREACH, -ETIMEDOUT,
 * -EMSGSIZE, -EPROTO (not HTTP), -ENOMEM, or a socket's -errno. */
int kvt_http_post(const char *url, const char *body, uint64_t deadline_us,
		  size_t max, long *status, char **answer);
int kvt_lcores_start(void);
void kvt_lcores_stop(void);
void kvt_lcores_free(void);
/* Hand descriptors of class prio to their ports' lcore; the lcore writes
 * the class into each as it takes it.  @return how many were taken. */
unsigned int kvt_lcore_enqueue(unsigned int lcore_idx, enum kvt_prio prio,
			       struct kvt_desc **d, unsigned int n);
/* On an lcore: run d on its next turn (FIFO); -ENOENT off an lcore. */
int kvt_lcore_defer(struct kvt_desc *d);
/* After queueing work for lc: wake it if it blocks in the wait policy
 * (a system call then, none while it is awake). */
void kvt_lcore_wake(struct kvt_lcore *lc);
/* Wake lc whatever it said (it must look at its stop flag or policy). */
void kvt_lcore_kick(struct kvt_lcore *lc);
void kvt_lcore_ring_attach(struct kvt_lcore *lc);
void kvt_lcore_ring_detach(struct kvt_lcore *lc);
struct kvt_lcore *kvt_lcore_of_port(const struct kvt_port *p);
void kvt_desc_free(struct kvt_desc *d);
/* Settle what p's PMD handed back (kvt_desc_complete()), in order: on
 * p's lcore after each PMD call, elsewhere after a call the engine made
 * with the lcores stopped. */
void kvt_port_settle(struct kvt_port *p);
/* The engine ends d now (never handed to a PMD, or cancelled). */
void kvt_desc_finish(struct kvt_desc *d, int err);
/* Test hooks: thread id and loop count of kvt's idx-th lcore. */
int kvt_lcore_tid(unsigned int idx);
uint64_t kvt_lcore_loops(unsigned int idx);
/* Test hook: submissions kvt_poll() and kvt_wait() looked at so far. */
struct kvt_batch;
uint64_t kvt_batch_looked_at(const struct kvt_batch *b);

/* ------------------------------------------------------------------ */
/* Memory registry (mem.c)                                             */
/* ------------------------------------------------------------------ */

struct kvt_mem {
	struct kvt_lmem lm;	/* first: transports see this part */
	uint32_t magic;
	uint64_t inflight;	/* local slices in flight */
	uint64_t id;
};

/* Find the region holding [addr, addr+len) inside an RCU read section. */
struct kvt_mem *kvt_mem_find(const void *addr, uint64_t len);
/**
 * An exported region was registered (added 1) or is being unregistered
 * (added 0; m stays valid until fn returns).  Runs on the registering
 * thread, with no registry lock held.
 */
typedef void (*kvt_mem_event_fn)(const struct kvt_mem *m, int added,
				 void *arg);
/** @return 0, -ENOSPC (too many subscribers). */
int kvt_mem_event_subscribe(kvt_mem_event_fn fn, void *arg);
void kvt_mem_event_unsubscribe(kvt_mem_event_fn fn, void *arg);
void kvt_mem_fini(void);
/* Snapshot of exported regions for a handshake (control path). */
int kvt_mem_export_all(struct kvt_buf *out);
int kvt_mem_export_one(const struct kvt_mem *m, struct kvt_buf *out);
struct json_t;
/* Exported regions as a JSON array (for the metadata descriptor). */
struct json_t *kvt_mem_export_json(void);

/* ------------------------------------------------------------------ */
/* Metadata service (meta.c)                                           */
/* ------------------------------------------------------------------ */

/* Publish this engine when --kvt-meta names etcd; @return 0 or -errno. */
int kvt_meta_start(void);
void kvt_meta_stop(void);
int kvt_meta_enabled(void);
/* The control address of the engine published as name, asked of etcd
 * before deadline_us (kvt_now_us()). */
int kvt_meta_resolve(const char *name, char *addr, size_t len,
		     uint64_t deadline_us);
/* The address in an etcd range answer; 0, -ENOENT, -EPROTO. */
int kvt_meta_parse_range(const char *answer, size_t alen, char *addr,
			 size_t len);

/* ------------------------------------------------------------------ */
/* Handshake frames (wire.c)                                           */
/* ------------------------------------------------------------------ */

#define KVT_WIRE_MAGIC 0x4b565448u	/* "KVTH" */
#define KVT_WIRE_VERSION 1
#define KVT_WIRE_HDR 12
#define KVT_WIRE_MAX_PREAUTH (64u << 10)
#define KVT_WIRE_MAX (16u << 20)
/* An inbound session sends only small frames once it is authenticated
 * (CONN_REQ, PING, PORT_MSG of at most 64 KiB, BYE): a larger one is an
 * attempt to make us buffer it. */
#define KVT_WIRE_MAX_SESSION (128u << 10)

enum kvt_wire_type {
	KVT_W_HELLO = 1,
	KVT_W_WELCOME,
	KVT_W_REFUSE,
	KVT_W_CONN_REQ,
	KVT_W_CONN_REP,
	KVT_W_PING,
	KVT_W_PONG,
	KVT_W_REGION_ADD,
	KVT_W_REGION_DEL,
	KVT_W_BYE,
	KVT_W_PORT_MSG,		/* PORT_ID (the receiver's), BLOB */
	KVT_W_REGION_GONE,	/* SEQ: every REGION_DEL up to it is done */
	KVT_W_TYPE_MAX,
};

enum kvt_wire_tag {
	KVT_T_NAME = 1,
	KVT_T_SECRET,
	KVT_T_HOST_ID,
	KVT_T_PID,
	KVT_T_ENDPOINT,		/* nested: PMD, PORT_NAME, PORT_ID, BLOB */
	KVT_T_REGION,		/* nested: REGION fields, KEY* */
	KVT_T_PMD,
	KVT_T_PORT_NAME,
	KVT_T_PORT_ID,
	KVT_T_BLOB,
	KVT_T_BASE,
	KVT_T_LEN,
	KVT_T_FLAGS,
	KVT_T_LOC,
	KVT_T_KEY,		/* nested: PORT_ID (exporter's), BLOB */
	KVT_T_ERRNO,
	KVT_T_REASON,
	KVT_T_SEQ,
	KVT_T_FENCE_SLOTS,
	KVT_T_FROM_PORT,	/* CONN_REQ: the initiator's port */
	KVT_T_TAG_MAX,
};

struct kvt_wire_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;		/* payload bytes */
};

/* A read cursor over a TLV payload; every read is bounds-checked. */
struct kvt_tlv {
	const uint8_t *p;
	size_t left;
};

/* Start a frame of type in b (header patched by kvt_wire_end). */
int kvt_wire_begin(struct kvt_buf *b, uint16_t type);
int kvt_wire_end(struct kvt_buf *b);
int kvt_wire_put(struct kvt_buf *b, uint16_t tag, const void *v, uint32_t len);
int kvt_wire_put_u64(struct kvt_buf *b, uint16_t tag, uint64_t v);
int kvt_wire_put_str(struct kvt_buf *b, uint16_t tag, const char *s);
/* Open a nested TLV: returns the offset to pass to kvt_wire_close. */
int kvt_wire_open(struct kvt_buf *b, uint16_t tag, size_t *mark);
void kvt_wire_close(struct kvt_buf *b, size_t mark);
/*
 * Check a frame header: @return payload length, or -EPROTO (bad magic,
 * version, type) / -EMSGSIZE (longer than max).
 */
int kvt_wire_check_hdr(const uint8_t *buf, uint32_t max, uint16_t *type);
/* Next TLV: @return 1 with tag/val/len set, 0 at end, -EPROTO. */
int kvt_tlv_next(struct kvt_tlv *t, uint16_t *tag, const uint8_t **val,
		 uint32_t *len);
int kvt_tlv_u64(const uint8_t *val, uint32_t len, uint64_t *out);
int kvt_tlv_str(const uint8_t *val, uint32_t len, char *out, size_t outlen);

/* Decoded handshake messages. */
#define KVT_WIRE_MAX_EPS 64

struct kvt_wire_ep {
	char pmd[16];
	struct kvt_endpoint ep;
};

struct kvt_wire_hello {
	char name[64];
	char secret[128];
	uint32_t secret_len;	/* bytes on the wire (a NUL inside counts) */
	int has_secret;
	uint8_t host_id[32];
	uint32_t pid;
	/* WELCOME only */
	unsigned int neps;
	struct kvt_wire_ep eps[KVT_WIRE_MAX_EPS];
	const uint8_t *regions;	/* raw REGION TLVs, decoded by peer.c */
	size_t regions_len;
};

int kvt_wire_decode_hello(const uint8_t *p, size_t len,
			  struct kvt_wire_hello *h);
/* Does the secret h carries equal want, byte for byte and in length?
 * Constant time in h's secret, so timing does not leak want. */
int kvt_wire_secret_ok(const struct kvt_wire_hello *h, const char *want);
/* Who the other engine says it is (HELLO or WELCOME), against our host. */
void kvt_wire_peer_info(const struct kvt_wire_hello *h, const uint8_t *our_host,
			struct kvt_peer_info *info);

struct kvt_wire_region {
	uint64_t base;
	uint64_t len;
	uint32_t flags;
	uint32_t fence_slots;
	struct kvt_loc loc;
	unsigned int nkeys;
	struct {
		uint16_t port_id;
		const uint8_t *blob;
		uint32_t len;
	} keys[KVT_MAX_PORTS];
};

int kvt_wire_decode_region(const uint8_t *p, size_t len,
			   struct kvt_wire_region *r);
int kvt_wire_encode_region(struct kvt_buf *b, const struct kvt_lmem *m,
			   uint64_t fence_slots);

/* Blocking helpers for the initiator with a deadline (control path). */
int kvt_wire_send(int fd, const struct kvt_buf *b, uint64_t deadline_us);
/* Receive one frame into b: @return type, or -ETIMEDOUT, -ECONNRESET,
 * -EPROTO, -EMSGSIZE. */
int kvt_wire_recv(int fd, struct kvt_buf *b, uint32_t max,
		  uint64_t deadline_us);

/* ------------------------------------------------------------------ */
/* Peers, sessions, control thread (peer.c, ctl.c)                     */
/* ------------------------------------------------------------------ */

enum kvt_peer_state {
	KVT_PEER_UP = 1,
	KVT_PEER_DEAD,
	KVT_PEER_CLOSED,
};

struct kvt_claims;

/* One imported region, with its overlap claims. */
struct kvt_rimp {
	struct kvt_rmem rm;	/* first */
	struct kvt_claims *claims;
	uint64_t refs;		/* requests in flight using it */
	struct kvt_rimp *retired_next;	/* unpublished while in use */
	uint64_t del_seq;	/* the REGION_DEL that retired it (0: none) */
};

#define KVT_PINGS_OUT 16

struct kvt_peer {
	uint32_t magic;
	char addr[128];		/* as opened */
	struct kvt_peer_info info;
	uint32_t state;		/* enum kvt_peer_state, atomic */
	int err;		/* why it died */
	uint64_t refs;		/* handle references */
	uint64_t inflight;	/* submissions in flight */
	int fd;			/* control connection */
	uint64_t last_pong_us;
	uint64_t last_ping_us;
	/* PINGs not answered yet, oldest first (control thread): the peer
	 * is lost when the oldest waited a timeout, not when we merely sent
	 * none (our own thread was late). */
	uint64_t ping_sent_us[KVT_PINGS_OUT];
	uint32_t ping_head, ping_tail;
	struct kvt_conn *conn[KVT_MAX_PORTS];
	uint32_t conn_mask;
	uint32_t down_mask;	/* conns a PMD marked down, atomic */
	uint32_t tail_seq;	/* the last tail number given out, atomic */
	struct kvt_rangemap regions;	/* base -> struct kvt_rimp */
	/* Regions the peer removed while requests still used them: each is
	 * released once they are done (control thread). */
	struct kvt_rimp *retired;
	uint64_t del_seen;	/* the newest REGION_DEL number taken */
	uint64_t del_acked;	/* the newest REGION_GONE sent */
	struct kvt_buf rx;	/* control thread's receive buffer */
	struct kvt_peer_stats st;
	struct kvt_peer *next;
};

/* Inbound session: a peer that opened us. */
struct kvt_session {
	int fd;
	int authed;
	struct kvt_peer_info info;
	struct kvt_conn *conn[KVT_MAX_PORTS];
	uint64_t opened_us;
	uint64_t last_rx_us;
	int pinged;		/* the opener's open returned: it pings now */
	struct kvt_buf rx;
	struct kvt_buf tx;
	size_t tx_off;
	struct kvt_once *once;	/* numbered tails this peer sent us */
	uint64_t partial_us;	/* since when rx holds part of a frame */
	int overflow;		/* it let its answers pile up: close it */
	uint64_t del_sent;	/* the newest REGION_DEL queued to it */
	uint64_t del_acked;	/* the newest REGION_GONE it sent */
	struct kvt_session *next;
};

/* The tails a session acted on (once.c). */
struct kvt_once *kvt_once_new(void);
void kvt_once_free(struct kvt_once *o);
/* @return 1 when seq is new (now taken), 0 for a copy. */
int kvt_once_take(struct kvt_once *o, uint32_t seq);
void kvt_once_forget(struct kvt_once *o, uint32_t seq);
/* Did the tail numbered seq act?  (Below the window: 1, as take acts.) */
int kvt_once_taken(struct kvt_once *o, uint32_t seq);

int kvt_ctl_start(void);
void kvt_ctl_stop(void);
/* A PORT_MSG arrived for local port `port` of owner's connections. */
int kvt_ctl_port_msg(struct kvt_conn **conns, const uint8_t *p, size_t len);
/* Queue a frame on an inbound session (control thread). */
int kvt_ctl_sess_send(struct kvt_session *s, const struct kvt_buf *frame);
/* Inbound sessions (session.c), all on the control thread: epfd is its
 * epoll set, where sessions and the listener (tag KVT_CTL_TAG_LISTEN)
 * are watched. */
#define KVT_CTL_TAG_LISTEN ((uint64_t)1)
void kvt_sess_init(int epfd);
void kvt_sess_accept(void);
void kvt_sess_accept_resume(uint64_t now);
int kvt_sess_read(struct kvt_session *s);
int kvt_sess_flush(struct kvt_session *s);
int kvt_sess_queue(struct kvt_session *s, const struct kvt_buf *frame);
/* Does s go (a bound it broke, logged)? */
int kvt_sess_expired(const struct kvt_session *s, uint64_t now,
		     uint64_t dead_us);
void kvt_sess_close(struct kvt_session *s);
/* Mark a peer lost: its connections are failed (control path). */
void kvt_peer_lost(struct kvt_peer *p, int err);
/* Apply a REGION_ADD/DEL from the peer (control thread). */
int kvt_peer_region_update(struct kvt_peer *p, int add, const uint8_t *val,
			   size_t len);
/* Control thread: release the regions the peer removed that no request
 * uses any more; @return the newest REGION_DEL number up to which every
 * removal is done (for REGION_GONE). */
uint64_t kvt_peer_regions_release(struct kvt_peer *p);
void kvt_peers_close_all(void);
struct kvt_rimp *kvt_peer_find_region(struct kvt_peer *p, uint64_t addr,
				      uint64_t len);
int kvt_peer_valid(const struct kvt_peer *p);
/* Host identity: boot id and network namespace. */
int kvt_host_id(uint8_t id[32]);
void kvt_conn_set_dead(struct kvt_conn *c);

/* ------------------------------------------------------------------ */
/* Transfers (batch.c, stripe.c, overlap.c)                            */
/* ------------------------------------------------------------------ */

struct kvt_sub;
struct kvt_batch;

/* Overlap guard: a region's claim table, made on its first claim. */
void kvt_claims_free(struct kvt_claims *c);

struct kvt_range {
	uint64_t lo;
	uint64_t hi;		/* exclusive */
	const struct kvt_rimp *ri;
};

struct kvt_claim {
	struct kvt_claims *table;
	int slot;
	const struct kvt_range *r;
	unsigned int n;
};

/* Claim sorted ranges r[0..n) of the region whose table *tp is (NULL
 * until the first claim), inside a read section (the claims it reads
 * point into other batches); @return 0, -EBUSY, -ENOMEM. */
int kvt_claim_take(struct kvt_claims **tp, struct kvt_claim *c,
		   const struct kvt_range *r, unsigned int n);
void kvt_claim_drop(struct kvt_claim *c);

/* Choose a port among mask for len bytes. */
unsigned int kvt_stripe_pick(uint32_t mask, uint32_t len, uint64_t seq);
/* The ports of mask that may take more slices now (below their cap). */
uint32_t kvt_stripe_space(uint32_t mask);
/* Every port of mask at its cap: microseconds until the first finishes
 * what it holds, at its rate; else 0. */
uint64_t kvt_stripe_drain_us(uint32_t mask);
/* len bytes of slices left p, held of them striped (counted in its
 * in-flight bytes; an ORDERED submission's slices are not). */
void kvt_stripe_account(struct kvt_port *p, uint32_t len, uint32_t held,
			uint64_t now_tsc);
/* The same, on p's own lcore. */
void kvt_stripe_account_local(struct kvt_port *p, uint32_t len, uint32_t held,
			      uint64_t now_tsc);

void kvt_batches_cancel_all(void);
/* Free batches the application freed once their work settled. */
void kvt_batches_reap_zombies(void);
/* Lcore: may a tail descriptor run now? */
enum { KVT_GATE_GO, KVT_GATE_CANCEL, KVT_GATE_WAIT };
int kvt_desc_gate(struct kvt_desc *d);

/* ------------------------------------------------------------------ */
/* Notifications, fences, stats                                        */
/* ------------------------------------------------------------------ */

int kvt_notify_init(void);
void kvt_notify_fini(void);
struct kvt_inbox *kvt_inbox_local_new(void);
void kvt_inbox_local_free(struct kvt_inbox *ib);
/* Detach retired inboxes that are empty or too old (all: every one). */
void kvt_inbox_reap_retired(int all);
int kvt_stats_init(void);
void kvt_fence_fini(void);

/* ------------------------------------------------------------------ */
/* The engine (engine.c)                                               */
/* ------------------------------------------------------------------ */

/*
 * How a peer hands its control connection to the control thread and
 * takes it back (under ctl_lock).  ctl.c sets them when it starts: peers
 * use the control thread, which calls into peers, so not the other way
 * round by name.
 */
struct kvt_ctl_hooks {
	int (*adopt_peer)(struct kvt_peer *p);
	void (*forget_peer)(struct kvt_peer *p);
	/* After a region this thread unregistered was announced gone: wait
	 * until every peer that copies into our memory itself confirmed it
	 * stopped; @return 0, or -ETIMEDOUT (those that did not were
	 * disconnected). */
	int (*region_gone_wait)(unsigned int timeout_ms);
};

struct kvt_engine {
	struct kvt_opts o;
	const struct kvt_ctl_hooks *ctl_hooks;	/* while ctl runs */
	struct kvt_pmd_env env;
	int eal_owned;		/* kvt called rte_eal_init */
	char runtime_dir[PATH_MAX];
	struct rte_mempool *pool;

	struct kvt_lcore lcores[KVT_MAX_LCORES];
	unsigned int nlcores;
	struct kvt_port *ports[KVT_MAX_PORTS];
	unsigned int nports;
	uint32_t lcores_running;

	/* control thread */
	pthread_t ctl_thread;
	int ctl_running;
	int listen_fd;
	int ctl_wake[2];	/* pipe to wake the control thread */
	struct sockaddr_in listen_addr;
	char listen_str[64];
	pthread_mutex_t ctl_lock;	/* peers and sessions lists */
	struct kvt_peer *peers;
	struct kvt_session *sessions;
};

extern struct kvt_engine *kvt_eng;

/*
 * Log why a call was refused and return -err.  Refusals come in storms
 * (a retry loop on -EBUSY), so at most a few per second are printed and
 * the rest counted.
 */
int kvt_refuse(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
#define KVT_REFUSE(err, fmt, ...) kvt_refuse(err, fmt, ##__VA_ARGS__)

#endif /* KVT_PRIVATE_H */
