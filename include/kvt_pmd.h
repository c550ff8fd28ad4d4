/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Port driver (PMD) interface.
 *
 * A transport is a folder under pmd/ with one const struct kvt_pmd_ops,
 * registered by KVT_PMD_REGISTER().  At kvt_init() each enabled PMD's probe
 * creates its ports with kvt_port_create().  Every port is owned by one
 * lcore: submit and poll run there, nowhere else, and must not block, lock
 * or allocate.  The control-path callbacks (memory, connections) run on
 * application or control threads; a callback that must touch state the
 * lcore owns uses kvt_port_call().
 *
 * This header is all a PMD may include from kvt; lib/ never includes a
 * PMD's headers.
 */
#ifndef KVT_PMD_H
#define KVT_PMD_H

#include <inttypes.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/socket.h>

#include <rte_common.h>
#include <rte_log.h>

#include "kvt.h"

#define KVT_MAX_PORTS 32

/** Memory location kinds. */
enum kvt_loc_type {
	KVT_LOC_CPU = 0,
	KVT_LOC_CUDA = 1,
};

struct kvt_loc {
	uint16_t type;		/**< enum kvt_loc_type */
	int16_t id;		/**< NUMA node or CUDA device */
};

/** Growable byte buffer for handshake blobs (control path only). */
struct kvt_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

/** Append n bytes; @return 0 or -ENOMEM. */
int kvt_buf_put(struct kvt_buf *b, const void *p, size_t n);
void kvt_buf_free(struct kvt_buf *b);

/** Internal region flag: the region is a fence table. */
#define KVT_MEM_F_FENCE (1u << 16)

/** A region registered here, as transports see it. */
struct kvt_lmem {
	uint8_t *addr;
	uint64_t len;
	uint32_t flags;		/**< KVT_MEM_REMOTE_*, KVT_MEM_F_FENCE */
	struct kvt_loc loc;
	int fd;			/**< memfd backing the range, or -1 */
	uint64_t fd_off;	/**< offset of addr inside fd */
	uint64_t fd_ino;	/**< inode of fd, so importers can check it */
	uint32_t port_mask;	/**< ports that registered it */
	/**
	 * Topology, set by mem_register: ports that should carry this
	 * memory's bytes, and ports to use when none of those reaches a
	 * peer.  A port in neither carries it only when nothing else can.
	 * Ports of transports without a topology set neither.
	 */
	uint32_t pref_mask;
	uint32_t fallback_mask;
	void *key[KVT_MAX_PORTS];	/**< per-port registration */
};

/** A region a peer exports, as imported here. */
struct kvt_rmem {
	uint64_t base;		/**< in the peer's address space */
	uint64_t len;
	uint32_t flags;
	uint32_t fence_slots;
	struct kvt_loc loc;
	uint32_t port_mask;	/**< ports that imported it */
	void *key[KVT_MAX_PORTS];	/**< per-port import */
};

struct kvt_port;
struct kvt_pmd;
struct kvt_peer;

/** Identity of the other engine of a connection. */
struct kvt_peer_info {
	char name[64];
	uint8_t host_id[32];	/**< boot id + network namespace */
	uint32_t pid;
	int same_host;		/**< host_id equals ours */
	struct sockaddr_storage ctl_addr;	/**< its control address */
};

/**
 * State of one (peer, port) pair.  A PMD embeds it as the first member of
 * its own connection structure.
 */
struct kvt_conn {
	struct kvt_port *port;
	/** The other engine's port at the far end; conn_open sets it from
	 *  the endpoint it chose, the engine sets it on the accepting side. */
	uint16_t remote_port;
	struct kvt_peer_info info;
	/** Set (release) by the engine when the peer is lost; the lcore
	 *  reads it (acquire) and fails slices of this connection. */
	uint32_t dead;
	/** Accepting side: the inbox notifications of this peer go to. */
	struct kvt_inbox *inbox;
	/** Set by the PMD (kvt_conn_set_down()) while the link cannot carry
	 *  slices; the engine sends new slices elsewhere. */
	uint32_t down;
	void *owner;		/**< engine-private: its peer or session */
	uint8_t accepted;	/**< engine-private: the peer opened us */
};

/** What the engine knows of a connection a peer opens (conn_accept). */
struct kvt_accept {
	struct kvt_peer_info info;	/**< the peer */
	uint16_t remote_port;		/**< its port at the far end */
	void *owner;			/**< engine-private: the session */
};

/**
 * Acceptor (control thread): fill the engine's fields of c, a connection
 * conn_accept just made for port.  Call it before anything hands c to
 * the lcore (kvt_port_call()): the lcore reads them.
 */
void kvt_conn_accept_init(struct kvt_conn *c, struct kvt_port *port,
			  const struct kvt_accept *a);

/**
 * Mark a connection unusable (down = 1) or usable again (control path or
 * lcore).  New slices avoid a down connection while another one reaches
 * the peer; the ones already queued to it are the PMD's to fail or finish.
 */
void kvt_conn_set_down(struct kvt_conn *c, int down);

/**
 * Send msg to the PMD at the other end of c, which receives it in its
 * conn_msg callback.  Control thread only (conn_msg, ctl_tick); delivery
 * is best effort, so a PMD's exchange needs its own timeout.
 *
 * @return 0, -EMSGSIZE (over 64 KiB), -ENOTCONN (the control connection
 *   is gone), -ENOMEM.
 */
int kvt_conn_msg(struct kvt_conn *c, const void *msg, size_t len);

/**
 * When the engine at the other end of c last answered on its control
 * connection (kvt_now_us(); 0: not yet).  A link whose work has stalled
 * while the peer still answers is broken, not the peer: a PMD may fail
 * it well before the peer timeout.  Any thread.
 */
uint64_t kvt_conn_heard_us(const struct kvt_conn *c);

/**
 * Target side, lcore: may the tail numbered seq, arriving on accepted
 * connection c, act?  Marks it taken.  A tail sent again after its answer
 * was lost is refused here and should be answered as done.
 *
 * @return 1: act on it (also for seq 0, or a number too old to tell);
 *   0: a copy of a tail that already acted.
 */
int kvt_conn_tail_take(struct kvt_conn *c, uint32_t seq);

/** Target side: the tail taken with kvt_conn_tail_take() could not act
 *  (no room): let a later copy act. */
void kvt_conn_tail_forget(struct kvt_conn *c, uint32_t seq);

/** One endpoint the other engine announced for a PMD. */
struct kvt_endpoint {
	char port_name[32];
	uint16_t port_id;	/**< its port index at the other engine */
	const uint8_t *blob;
	size_t len;
};

/** Descriptor operations. */
enum kvt_desc_op {
	KVT_DESC_READ = 1,	/**< remote -> local */
	KVT_DESC_WRITE = 2,	/**< local -> remote */
	KVT_DESC_FENCE,		/**< store value at remote (release) */
	KVT_DESC_NOTIFY,	/**< deliver data/len to the peer's inbox */
	KVT_DESC_DONE,		/**< ordered ports: everything before is done */
	KVT_DESC_CALL,		/**< run a control function on the lcore */
	KVT_DESC_SUB,		/**< whole submission (KVT_PMD_F_WHOLE) */
};

/** One request as a KVT_PMD_F_WHOLE port reads it. */
struct kvt_xreq {
	uint8_t *local;
	uint64_t remote;	/**< in the peer's address space */
	uint64_t len;
	const struct kvt_lmem *lm;
	const struct kvt_rmem *rm;
	uint32_t op;		/**< KVT_OP_READ or KVT_OP_WRITE */
};

/** A page list (kvt_submit_pages()) as a KVT_PMD_F_WHOLE port reads it. */
struct kvt_xpages {
	const uint32_t *local_idx;
	const uint32_t *remote_idx;
	uint32_t n;
	uint64_t page_size;
};

/**
 * A whole submission (KVT_DESC_SUB, desc->data points here).  The port
 * carries out every request, then the fence, then the notification, then
 * stores 1 in *done (release; the memory is host-registered through
 * host_register, so a device may store it), all in that order.  It
 * reports errors with kvt_desc_complete(), before the done store.
 */
struct kvt_subinfo {
	const uint8_t *req;	/**< first struct kvt_xreq */
	uint32_t n;
	uint32_t stride;	/**< bytes from one kvt_xreq to the next */
	/** Non-NULL: the submission is one page list; req 0 holds the bases
	 *  (local, remote: page 0) and len = n * page_size. */
	const struct kvt_xpages *pages;
	void *cuda_event;	/**< wait for it before reading sources */
	const struct kvt_rmem *fence_rm;	/**< NULL: no fence */
	uint64_t fence_addr;
	uint64_t room;
	const void *notify;
	uint32_t notify_len;	/**< 0: no notification */
	uint64_t *done;
};

static inline const struct kvt_xreq *
kvt_subinfo_req(const struct kvt_subinfo *si, uint32_t i)
{
	return (const struct kvt_xreq *)(const void *)(si->req +
						       (size_t)i * si->stride);
}

/** One slice of work on a port.  Lives in the engine's mempool. */
struct kvt_desc {
	uint8_t op;
	uint8_t flags;		/**< engine-private */
	uint16_t port;
	uint32_t len;
	struct kvt_conn *conn;
	const struct kvt_lmem *lm;
	const struct kvt_rmem *rm;
	uint8_t *local;
	uint64_t remote;	/**< peer address (data, fence word) */
	uint64_t value;		/**< FENCE: the room id */
	const void *data;	/**< NOTIFY: payload */
	void *owner;		/**< engine-private */
	uint64_t deadline;	/**< engine-private: retry limit (TSC) */
	struct kvt_desc *next;	/**< free for whoever holds the desc */
	uint64_t pmd_data[2];	/**< scratch for the PMD */
	/** FENCE, NOTIFY: the tail's number among those sent to this peer
	 *  (from 1; 0: none).  A KVT_PMD_F_ONCE port carries a
	 *  notification's number, and its target acts on each number once
	 *  (kvt_conn_tail_take()). */
	uint32_t seq;
} __rte_cache_aligned;

/**
 * Settle a descriptor (lcore context).  err is 0 or a negative errno; a
 * retryable error (-ECONNRESET, -EIO, -ETIMEDOUT on a data slice) moves the
 * slice to another eligible port when there is one.  The descriptor must
 * not be touched afterwards.
 *
 * Every descriptor ends here, a DONE included: an ORDERED port reports
 * it (err 0, even on a dead connection) after everything queued before it
 * on the connection, and the engine stores the done word.  Completions
 * reported during one submit or poll call are settled when the call
 * returns, in the order they were reported.
 */
void kvt_desc_complete(struct kvt_desc *d, int err);

/**
 * Add to one of a port's counters (struct kvt_port.st).  Only the port's
 * lcore writes them; kvt_port_stats() reads them from any thread, so the
 * store is atomic (relaxed: a counter orders nothing).
 */
static inline void
kvt_stat_add(uint64_t *counter, uint64_t v)
{
	__atomic_store_n(counter, *counter + v, __ATOMIC_RELAXED);
}

/** PMD capability flags. */
/** Descriptors of one connection complete in submission order, and data
 *  placed before a later FENCE/NOTIFY/DONE is visible when it lands. */
#define KVT_PMD_F_ORDERED	(1u << 0)
/** Not started unless named by --kvt-pmd. */
#define KVT_PMD_F_EXPLICIT	(1u << 1)
/** Takes a submission whole (one KVT_DESC_SUB) when it alone carries it. */
#define KVT_PMD_F_WHOLE		(1u << 2)
/** Its targets drop a second copy of a numbered notification
 *  (kvt_desc.seq), so one that failed elsewhere may be sent again here.
 *  (A fence may move to any port: its second copy stores the same room
 *  id.  tcp's targets drop fence copies too.) */
#define KVT_PMD_F_ONCE		(1u << 3)

/** The operations of a transport. */
struct kvt_pmd_ops {
	uint32_t flags;
	/** Preference among PMDs that reach the same memory: higher wins. */
	int rank;
	/** Bytes of striped slices one port may hold before new slices go
	 *  to another port or wait for one to drain (0: 8 MiB).  The same
	 *  for every port of the PMD: a cap that followed a port's measured
	 *  rate would feed back into it. */
	uint64_t stripe_cap;

	/** Create ports with kvt_port_create(); args from --kvt-pmd. */
	int (*probe)(const struct kvt_pmd *pmd, const char *args);
	/** Before the lcores run (control thread). */
	int (*start)(struct kvt_port *port);
	/** After the lcores stopped. */
	void (*stop)(struct kvt_port *port);
	/** Release the port's private state. */
	void (*remove)(struct kvt_port *port);

	/** Lcore: take ownership of n descriptors. */
	void (*submit)(struct kvt_port *port, struct kvt_desc **d, unsigned int n);
	/** Lcore: progress; @return amount of work done (0: idle). */
	unsigned int (*poll)(struct kvt_port *port);

	/** Register a local region; -ENOTSUP when this port cannot reach it. */
	int (*mem_register)(struct kvt_port *port, struct kvt_lmem *m);
	void (*mem_unregister)(struct kvt_port *port, struct kvt_lmem *m);
	/** Key peers need to reach an exported region (may be empty). */
	int (*mem_export)(struct kvt_port *port, const struct kvt_lmem *m,
			  struct kvt_buf *key);

	/** This port's endpoint blob for the handshake (may be empty). */
	int (*endpoint)(struct kvt_port *port, struct kvt_buf *ep);
	/**
	 * Initiator: open a connection to the peer's endpoints of this PMD.
	 * Fill req for the peer; -ENOTSUP when this port cannot reach it.
	 */
	int (*conn_open)(struct kvt_port *port, const struct kvt_peer_info *pi,
			 const struct kvt_endpoint *eps, unsigned int neps,
			 struct kvt_buf *req, struct kvt_conn **out);
	/**
	 * Acceptor: answer a peer's req with rep.  The new connection's
	 * engine fields come from a (kvt_conn_accept_init()), set before
	 * the lcore can see the connection.
	 */
	int (*conn_accept)(struct kvt_port *port, const struct kvt_accept *a,
			   const uint8_t *req, size_t len, struct kvt_buf *rep,
			   struct kvt_conn **out);
	/** Initiator: the acceptor's answer arrived. */
	int (*conn_ready)(struct kvt_conn *c, const uint8_t *rep, size_t len);
	/**
	 * Free a connection.  No descriptor of it is in flight; state the
	 * lcore keeps for it must be detached there (kvt_port_call()).
	 */
	void (*conn_close)(struct kvt_conn *c);
	/** Import a peer's region through a connection. */
	int (*rmem_import)(struct kvt_conn *c, struct kvt_rmem *rm,
			   const uint8_t *key, size_t len);
	void (*rmem_release)(struct kvt_conn *c, struct kvt_rmem *rm);

	/** Allocate shareable memory; -ENOTSUP for a location it does not
	 *  own. */
	int (*mem_alloc)(const struct kvt_loc *loc, size_t len, void **addr);
	int (*mem_free)(const struct kvt_loc *loc, void *addr, size_t len);
	/** 0 and *loc set when addr is memory this PMD owns (device memory). */
	int (*mem_locate)(const void *addr, struct kvt_loc *loc);
	/** Make host memory the engine writes completions to reachable by
	 *  the PMD's devices (batch memory). */
	int (*host_register)(void *addr, size_t len);
	void (*host_unregister)(void *addr);
	/** Synchronous copy where one side may be device memory it owns. */
	int (*dev_copy)(void *dst, const void *src, size_t len);
	/** Make a device stream wait for *word == room (see
	 *  kvt_fence_wait_stream()); word is host or device memory. */
	int (*stream_wait)(const uint64_t *word, uint64_t room,
			   uint64_t timeout_ns, uint32_t *status, void *stream);
	/** PCI address of CUDA device dev (PMDs that own CUDA memory). */
	int (*dev_pci)(int dev, char *pci, size_t len);
	/** Number of CUDA devices. */
	int (*dev_count)(void);
	/** A dma-buf fd for device memory it owns (kvt_mem_dmabuf()). */
	int (*mem_dmabuf)(const void *addr, size_t len, int *fd,
			  uint64_t *off);

	/**
	 * Control thread: a message the PMD at the other end of c sent with
	 * kvt_conn_msg().  A non-empty reply goes back to it the same way.
	 */
	int (*conn_msg)(struct kvt_conn *c, const uint8_t *msg, size_t len,
			struct kvt_buf *reply);
	/** Control thread, every few milliseconds: upkeep such as re-probing
	 *  a failed link. */
	void (*ctl_tick)(struct kvt_port *port, uint64_t now_us);
};

/** A registered transport. */
struct kvt_pmd {
	const char *name;
	const struct kvt_pmd_ops *ops;
	struct kvt_pmd *next;
};

void kvt_pmd_register(struct kvt_pmd *pmd);

/** Register a PMD from a constructor, DPDK style. */
#define KVT_PMD_REGISTER(nm, o)					\
	static struct kvt_pmd kvt_pmd_##nm = {				\
		.name = RTE_STR(nm),					\
		.ops = &(o),						\
	};								\
	RTE_INIT(kvt_pmd_init_##nm)					\
	{								\
		kvt_pmd_register(&kvt_pmd_##nm);			\
	}

/** A port: one transport instance owned by one lcore. */
struct kvt_port {
	uint16_t id;
	char name[32];
	const struct kvt_pmd *pmd;
	int numa;		/**< NUMA node, -1 unknown */
	unsigned int lcore;	/**< set by the engine */
	void *priv;		/**< the PMD's */
	/** Counters, written by the owning lcore only. */
	struct kvt_port_stats st;
	/** Striping state, engine-private. */
	uint64_t inflight_bytes;
	uint64_t done_bytes;	/**< settled on its lcore, not yet taken off */
	uint64_t rate_bpus;	/**< recent rate, bytes per microsecond */
	uint64_t rate_win_bytes;
	uint64_t rate_win_start;	/**< TSC */
};

/**
 * Create a port (probe only).
 *
 * @return the port, or NULL with rte_errno ENOSPC (too many ports), EINVAL.
 */
struct kvt_port *kvt_port_create(const struct kvt_pmd *pmd, const char *name,
				 int numa, void *priv);

/**
 * Run fn(port, arg) on the port's lcore and wait for it (control path).
 * When the lcores are not running it runs on the caller.
 *
 * @return fn's result, or -ETIMEDOUT when the lcore did not run it within
 *   timeout_ms.
 */
int kvt_port_call(struct kvt_port *port, int (*fn)(struct kvt_port *, void *),
		  void *arg, unsigned int timeout_ms);

/** Engine-wide settings a PMD may read. */
struct kvt_pmd_env {
	uint32_t slice;		/**< slice size in bytes */
	uint32_t timeout_ms;	/**< peer timeout */
	const char *nic_allow;	/**< --kvt-nic, or NULL */
	const char *topo_file;	/**< --kvt-topo, or NULL */
	uint8_t host_id[32];
};

const struct kvt_pmd_env *kvt_pmd_env(void);

struct rte_kvargs;

/**
 * A PMD option that is a whole decimal number: with key absent from kv,
 * *out stays as it is.
 * @return 0, or -EINVAL when the value is not a number in [lo, hi].
 */
int kvt_kv_long(const struct rte_kvargs *kv, const char *key, long lo,
		long hi, long *out);

/** Notification inbox: a bounded lock-free queue, possibly shared. */
struct kvt_inbox;

/** Bytes needed for an inbox of n slots (n a power of two). */
size_t kvt_inbox_size(uint32_t n);
/** Initialise an inbox in caller memory (possibly shared memory). */
void kvt_inbox_init(struct kvt_inbox *ib, uint32_t n);
/**
 * Push a message (any thread or process mapping the inbox).
 *
 * @return 0, -ENOBUFS (full), -EMSGSIZE (len > KVT_NOTIFY_MAX).
 */
int kvt_inbox_push(struct kvt_inbox *ib, const void *data, uint32_t len);
/** Attach an inbox to a connection's peer so kvt_notify_poll() reads it. */
int kvt_inbox_attach(struct kvt_inbox *ib, const char *peer);
/** Stop reading an inbox; it may be unmapped on return. */
void kvt_inbox_detach(struct kvt_inbox *ib);
/**
 * Stop reading an inbox once the application has taken the messages left
 * in it (bounded by a grace period), then call release(arg), which may
 * unmap it.  For connections that close with messages still queued.
 */
void kvt_inbox_retire(struct kvt_inbox *ib, void (*release)(void *),
		      void *arg);

/*
 * Target side: transports that carry a peer's request into our memory
 * (tcp) check every range here.  Between kvt_target_begin() and
 * kvt_target_end() the region found cannot be unregistered, so the copy
 * into it is safe; the section is short and lock-free.
 */
unsigned int kvt_target_begin(void);
void kvt_target_end(unsigned int token);
/**
 * The local address of [addr, addr + len) when it lies inside one region
 * exported with perm (KVT_MEM_REMOTE_READ/WRITE), or inside a fence table
 * when perm is KVT_MEM_F_FENCE; NULL otherwise.
 */
uint8_t *kvt_target_range(uint64_t addr, uint64_t len, uint32_t perm);

/*
 * Topology: RDMA NICs, GPUs and NUMA nodes read from sysfs, and for each
 * memory location the NICs that should carry its bytes.  A location's
 * preferred NICs share its NUMA node (cpu:N) or sit nearest its PCI switch
 * (cuda:N); the others are its fallback.  --kvt-nic filters the NICs and
 * --kvt-topo overrides the matrix.
 */
#define KVT_TOPO_MAX_NICS KVT_MAX_PORTS
#define KVT_TOPO_MAX_GPUS 32
#define KVT_TOPO_MAX_NODES 16

enum kvt_link {
	KVT_LINK_UNKNOWN = 0,
	KVT_LINK_IB = 1,
	KVT_LINK_ETH = 2,	/**< RoCE */
};

struct kvt_topo_nic {
	char name[32];		/**< verbs device name (mlx5_0) */
	char pci[16];		/**< PCI address, "" when unknown */
	char path[256];		/**< sysfs device path below the root */
	int numa;		/**< -1 unknown */
	uint8_t port;		/**< verbs port number (1-based) */
	uint8_t active;		/**< port state ACTIVE */
	uint8_t link;		/**< enum kvt_link */
	int gid_index;		/**< RoCE v2 GID to use; -1: none found */
	uint32_t rate_mbps;	/**< link rate; 0 unknown */
};

struct kvt_topo_gpu {
	char pci[16];
	char path[256];
	int numa;
};

/** NICs for one memory location, as bit masks over kvt_topo.nic[]. */
struct kvt_topo_pref {
	uint32_t preferred;
	uint32_t fallback;
};

struct kvt_topo {
	unsigned int nnics;
	unsigned int ngpus;
	unsigned int nnodes;
	struct kvt_topo_nic nic[KVT_TOPO_MAX_NICS];
	struct kvt_topo_gpu gpu[KVT_TOPO_MAX_GPUS];	/**< PCI order */
	struct kvt_topo_pref cpu[KVT_TOPO_MAX_NODES];
	/** Indexed by this process's CUDA device number. */
	struct kvt_topo_pref cuda[KVT_TOPO_MAX_GPUS];
	unsigned int ncuda;
	/** cuda:N is gpu[cuda_gpu[N]]. */
	int cuda_gpu[KVT_TOPO_MAX_GPUS];
};

/**
 * Discover the topology.
 *
 * @param root  directory holding sys/ ("/" for this machine; tests pass a
 *   fabricated tree).
 * @param allow  comma-separated NIC names (--kvt-nic); names that are not
 *   RDMA NICs are ignored here.  NULL: every NIC.
 * @param extra  comma-separated NIC names known to verbs but absent from
 *   sysfs (added with unknown locality), or NULL.
 * @param cuda_pci  PCI address of each CUDA device of this process (it
 *   may see a subset of the GPUs, renumbered), ncuda entries; NULL: the
 *   GPUs in PCI order.
 * @param json  --kvt-topo file, or NULL.
 * @param err  a one-line reason on failure.
 * @return 0; -EINVAL (malformed override, a NIC it names is unknown or not
 *   allowed); -ENOENT (the override file cannot be read).
 */
int kvt_topo_discover(struct kvt_topo *t, const char *root, const char *allow,
		      const char *extra, const char *const *cuda_pci,
		      unsigned int ncuda, const char *json, char *err,
		      size_t errlen);

/** The NICs for loc; @return 0, or -ENOENT for a location it does not know. */
int kvt_topo_lookup(const struct kvt_topo *t, const struct kvt_loc *loc,
		    struct kvt_topo_pref *out);

/** Index of the NIC named name, or -1. */
int kvt_topo_nic_index(const struct kvt_topo *t, const char *name);

/**
 * The PCI address ("0000:3b:00.0") of CUDA device dev, from a PMD that owns
 * CUDA memory.  @return 0, or -ENODEV.
 */
int kvt_cuda_pci(int dev, char *pci, size_t len);
/** Number of CUDA devices this process sees (0 without CUDA). */
int kvt_cuda_count(void);

/**
 * A dma-buf fd for device memory [addr, addr + len) (for NICs that read
 * and write GPU memory directly).  The caller closes *fd.
 *
 * @return 0 with *fd and *off (addr's offset inside the dma-buf);
 *   -ENOTSUP (no PMD owns that memory, or the driver has no dma-buf
 *   export), -errno.
 */
int kvt_mem_dmabuf(const void *addr, size_t len, int *fd, uint64_t *off);

/** How a same-host peer reaches a memfd-backed region. */
struct kvt_memfd_key {
	uint32_t pid;
	int32_t fd;
	uint64_t off;
	uint64_t ino;		/**< checked by the importer */
	uint64_t len;
};

/** A peer's memory mapped here. */
struct kvt_map {
	uint8_t *base;		/**< the peer's region starts here */
	void *map;
	size_t len;
};

/** Key for a local region; -ENOTSUP when it is not memfd memory. */
int kvt_memfd_key(const struct kvt_lmem *m, struct kvt_memfd_key *k);
/**
 * Map a same-host peer's memfd region (prot: PROT_READ[|PROT_WRITE]).
 *
 * @return 0, or -ESTALE (the fd no longer holds that file), -errno.
 */
int kvt_memfd_map(const struct kvt_memfd_key *k, int prot, struct kvt_map *out);
void kvt_map_release(struct kvt_map *m);

/** An inbox in a memfd that a same-host peer pushes into. */
struct kvt_shared_inbox {
	struct kvt_inbox *ib;
	size_t len;
	int fd;
};

/** Acceptor: create and attach an inbox for peer; rep gets its key. */
int kvt_shared_inbox_create(struct kvt_shared_inbox *sb, const char *peer,
			    struct kvt_buf *rep);
/** Acceptor: stop reading once drained (see kvt_inbox_retire()). */
void kvt_shared_inbox_close(struct kvt_shared_inbox *sb);
/** Initiator: map the peer's inbox from its key. */
int kvt_shared_inbox_map(const uint8_t *rep, size_t len, uint32_t pid,
			 struct kvt_map *out);

/** Current TSC in microseconds. */
uint64_t kvt_now_us(void);

#endif /* KVT_PMD_H */
