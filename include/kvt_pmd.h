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
 * This header is the contract alone: the ops, what each may return and
 * on which thread it runs, and the engine services they call.  Helpers a
 * PMD may use but need not (option parsing, descriptor lists, inboxes,
 * target ranges, memfd sharing) are in kvt_pmd_kit.h, which includes
 * this one.  Memory that kvt does not place itself (GPU memory) belongs
 * to the other driver interface, kvt_dev.h, which this header includes.
 * These three headers are all a PMD may include from kvt; lib/ never
 * includes a PMD's headers.
 *
 * Fields marked @internal in the structures below are the engine's: a
 * PMD may not read or write them (they change meaning between releases).
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
#include "kvt_dev.h"

#define KVT_MAX_PORTS 32

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
struct kvt_pmd_env;

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
	void *owner;		/**< @internal its peer or session */
	uint8_t accepted;	/**< @internal the peer opened us */
};

/** What the engine knows of a connection a peer opens (conn_accept). */
struct kvt_accept {
	struct kvt_peer_info info;	/**< the peer */
	uint16_t remote_port;		/**< its port at the far end */
	void *owner;			/**< @internal the session */
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

/**
 * Target side, any thread: did the tail numbered seq act here (taken with
 * kvt_conn_tail_take() and not forgotten)?  Answers an initiator that
 * lost a tail's answer with its link, once nothing can carry that tail
 * here any more, so both ends agree on whether it landed.
 *
 * @return 1 it acted (also for a number too old to tell, which
 *   kvt_conn_tail_take() would act on), 0 it did not, or seq is 0.
 */
int kvt_conn_tail_taken(struct kvt_conn *c, uint32_t seq);

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
 * A block list (kvt_submit_blocks()) as ports read it: blocks
 * first[i] .. first[i + 1] - 1 make request i (one local and one remote
 * region), block k moving len[k] bytes between local[k] and remote[k].
 */
struct kvt_xblocks {
	const uint64_t *local;
	const uint64_t *remote;	/**< in the peer's address space */
	const uint64_t *len;
	const uint32_t *first;	/**< requests + 1 entries */
	uint32_t n;		/**< blocks */
};

/**
 * A whole submission (KVT_DESC_SUB, desc->data points here).  The port
 * carries out every request, then the fence, then the notification, then
 * stores 1 in *done (release; the memory devices registered that memory
 * with host_register, so a device may store it), all in that order.  It
 * reports an error with kvt_subinfo_fail(), before the done store; the
 * descriptor itself is never completed (the done store ends it).
 */
struct kvt_subinfo {
	const uint8_t *req;	/**< first struct kvt_xreq */
	uint32_t n;
	uint32_t stride;	/**< bytes from one kvt_xreq to the next */
	/** Non-NULL: the submission is one page list; req 0 holds the bases
	 *  (local, remote: page 0) and len = n * page_size. */
	const struct kvt_xpages *pages;
	/** Non-NULL: the submission is one block list, request i holding
	 *  the blocks blocks->first[i] .. (its local and remote: block
	 *  first[i]'s; len: their sum). */
	const struct kvt_xblocks *blocks;
	void *cuda_event;	/**< wait for it before reading sources */
	const struct kvt_rmem *fence_rm;	/**< NULL: no fence */
	uint64_t fence_addr;
	uint64_t room;
	const void *notify;
	uint32_t notify_len;	/**< 0: no notification */
	uint64_t *done;
	int32_t *err;		/**< the submission's first error */
};

/** A whole submission failed with err (before its done store; the first
 *  error stays). */
static inline void
kvt_subinfo_fail(const struct kvt_subinfo *si, int err)
{
	int32_t zero = 0;

	__atomic_compare_exchange_n(si->err, &zero, err, false,
				    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

static inline const struct kvt_xreq *
kvt_subinfo_req(const struct kvt_subinfo *si, uint32_t i)
{
	return (const struct kvt_xreq *)(const void *)(si->req +
						       (size_t)i * si->stride);
}

/**
 * One slice of work on a port.  Lives in the engine's mempool.  The first
 * cache line holds what the submitting thread writes for a slice; the
 * second, what the lcore and the PMD write (class, status, links,
 * scratch): each line crosses between the two cpus once per use.
 */
struct kvt_desc {
	uint8_t op;
	uint8_t flags;		/**< @internal */
	uint16_t port;
	uint32_t len;
	struct kvt_conn *conn;
	const struct kvt_lmem *lm;
	const struct kvt_rmem *rm;
	uint8_t *local;
	uint64_t remote;	/**< peer address (data, fence word) */
	void *owner;		/**< @internal */
	union {
		uint64_t value;		/**< FENCE: the word to store */
		const void *data;	/**< NOTIFY: payload; SUB: kvt_subinfo */
	};
	/* Second cache line. */
	uint8_t prio;		/**< enum kvt_prio of its submission */
	/** FENCE, NOTIFY: the tail's number among those sent to this peer
	 *  (from 1; 0: none).  A KVT_PMD_F_ONCE port carries a
	 *  notification's number, and its target acts on each number once
	 *  (kvt_conn_tail_take()). */
	uint32_t seq;
	int32_t status;		/**< set by kvt_desc_complete() */
	uint64_t deadline;	/**< @internal retry limit (TSC) */
	struct kvt_desc *next;	/**< free for whoever holds the desc */
	uint64_t pmd_data[2];	/**< scratch for the PMD */
} __rte_cache_aligned;

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
/** Its work comes with system calls anyway (sockets): in the wait idle
 *  policy an lcore whose ports all say so blocks as soon as a turn finds
 *  nothing to do, without the policy's grace spin.  A wake costs little
 *  beside such work, and spinning would take the cpu from the threads
 *  that do it (the peer's, the application's, the kernel's). */
#define KVT_PMD_F_SYSCALLS	(1u << 4)
/** Its initiators copy into the target's memory themselves (a mapping
 *  of it: shm, nvlink), with nothing at the target to refuse a copy: a
 *  region unregistered there is closed only once they confirm they
 *  stopped (kvt_mem_unregister() waits for that). */
#define KVT_PMD_F_PEER_COPIES	(1u << 5)

/*
 * The driver contract.  Each op has a type below with what it may return.
 * Mandatory: probe, submit, poll, and conn_close for a transport that
 * makes connections (conn_open or conn_accept); kvt_pmd_register()
 * refuses a transport without them.  Every other op may be NULL, which
 * the engine reads as -ENOTSUP: the transport lacks that capability
 * (mem_register: it carries no local memory; conn_open: it opens
 * nothing).  Where -ENOTSUP would make no sense the type says what NULL
 * means (start: nothing to get ready; a void op: nothing to do).  The
 * lcore ops (submit, poll) must not block, lock or allocate; the others
 * run on application or control threads, as each says.
 */

/**
 * Check the engine-wide options this transport interprets (struct
 * kvt_pmd_env, such as --kvt-topo), for every registered transport,
 * enabled or not, before any probe: a malformed option stops kvt_init()
 * on every machine, not only on one with the hardware.
 *
 * @retval 0 the options are fine.
 * @retval -EINVAL malformed; err holds a one-line reason.
 * @retval -ENOENT a file it names cannot be read; err says which.
 */
typedef int (*kvt_pmd_env_check_t)(const struct kvt_pmd_env *env, char *err,
				   size_t errlen);

/**
 * Create ports with kvt_port_create() (kvt_init(), before EAL starts).
 * args: what follows the transport's name in --kvt-pmd.
 *
 * @retval 0 done, with or without ports (no hardware: no port, and the
 *   reason logged).
 * @retval -EINVAL bad args (kvt_init() fails when --kvt-pmd named it).
 * @retval -ENOSPC kvt_port_create() ran out of ports.
 * @retval -ENOMEM out of memory.
 */
typedef int (*kvt_pmd_probe_t)(const struct kvt_pmd *pmd, const char *args);

/**
 * Get a port ready (control thread, before the lcores run).  NULL:
 * nothing to get ready.
 *
 * @retval 0 ready.
 * @retval -errno the port cannot run; kvt_init() fails.
 */
typedef int (*kvt_pmd_start_t)(struct kvt_port *port);

/** After the lcores stopped: settle what the port still holds. */
typedef void (*kvt_pmd_stop_t)(struct kvt_port *port);

/** Release the port's private state (kvt_fini(), or a failed init). */
typedef void (*kvt_pmd_remove_t)(struct kvt_port *port);

/**
 * Lcore: take ownership of n descriptors.  Each one ends, now or on a
 * later poll, in exactly one kvt_desc_complete() (a KVT_DESC_SUB by its
 * done store, an error reported before it with kvt_subinfo_fail()).
 */
typedef void (*kvt_pmd_submit_t)(struct kvt_port *port, struct kvt_desc **d,
				 unsigned int n);

/**
 * Lcore: make progress, and hand back with kvt_desc_complete() what
 * finished.
 *
 * @return how much work it did (0: idle, which lets an idle lcore sleep).
 */
typedef unsigned int (*kvt_pmd_poll_t)(struct kvt_port *port);

/** An idle op's answer: only the descriptor or a submission gives work. */
#define KVT_IDLE_FOREVER UINT64_MAX

/**
 * Lcore, before it blocks in the wait idle policy (all its ports' polls
 * found nothing to do): what can give this port work besides a
 * submission, and how soon its poll must run anyway (its timers).  NULL:
 * the port is polled every 100 us while the lcore waits.
 *
 * @param[out] fd  a descriptor that turns readable when poll has work
 *   (sockets, an epoll set, a completion channel), or -1.  The same for
 *   the port's whole life from start on: the lcore adds it to its epoll
 *   set once.
 * @retval 0 do not block: poll again at once (work the port cannot be
 *   woken for is in flight).
 * @retval KVT_IDLE_FOREVER block until fd or a submission wakes the lcore.
 * @retval us block this many microseconds at most.
 */
typedef uint64_t (*kvt_pmd_idle_t)(struct kvt_port *port, int *fd);

/**
 * Register a local region with this port (application thread); keep the
 * port's key in m->key[port->id].
 *
 * @retval 0 the port carries the region.
 * @retval -ENOTSUP the port cannot reach this memory (another port may).
 * @retval -ENODEV the memory is on a device this port does not see.
 * @retval -EINVAL memory its driver cannot export.
 * @retval -ENOMEM out of memory (or of NIC resources).
 */
typedef int (*kvt_pmd_mem_register_t)(struct kvt_port *port,
				      struct kvt_lmem *m);

/** Undo mem_register (no descriptor on the region is in flight). */
typedef void (*kvt_pmd_mem_unregister_t)(struct kvt_port *port,
					 struct kvt_lmem *m);

/**
 * Append to key what a peer needs to reach exported region m through
 * this port (control thread, for the handshake).
 *
 * @retval 0 key appended (it may be empty).
 * @retval -ENOTSUP peers cannot reach the region through this port.
 * @retval -ENOMEM out of memory.
 */
typedef int (*kvt_pmd_mem_export_t)(struct kvt_port *port,
				    const struct kvt_lmem *m,
				    struct kvt_buf *key);

/**
 * Append this port's endpoint blob for the handshake (control thread).
 * NULL (or -ENOTSUP): an empty endpoint.
 *
 * @retval 0 appended (it may be empty).
 * @retval -ENOMEM out of memory.
 */
typedef int (*kvt_pmd_endpoint_t)(struct kvt_port *port, struct kvt_buf *ep);

/**
 * Initiator (control or application thread): open a connection to the
 * peer's endpoints of this transport; fill req for the peer's
 * conn_accept.
 *
 * @retval 0 *out is the connection (its engine fields set by the engine).
 * @retval -ENOTSUP this port cannot reach the peer (another may).
 * @retval -EHOSTUNREACH no endpoint answered.
 * @retval -ETIMEDOUT dialling took too long.
 * @retval -ENOMEM out of memory.
 */
typedef int (*kvt_pmd_conn_open_t)(struct kvt_port *port,
				   const struct kvt_peer_info *pi,
				   const struct kvt_endpoint *eps,
				   unsigned int neps, struct kvt_buf *req,
				   struct kvt_conn **out);

/**
 * Acceptor (control thread): answer a peer's req with rep.  The new
 * connection's engine fields come from a (kvt_conn_accept_init()), set
 * before the lcore can see the connection.
 *
 * @retval 0 *out is the connection.
 * @retval -EPROTO req is malformed or lies (a wrong size, a pid that is
 *   not the peer's).
 * @retval -ENOTSUP the peer cannot be served through this port.
 * @retval -ENOMEM out of memory.
 */
typedef int (*kvt_pmd_conn_accept_t)(struct kvt_port *port,
				     const struct kvt_accept *a,
				     const uint8_t *req, size_t len,
				     struct kvt_buf *rep,
				     struct kvt_conn **out);

/**
 * Initiator: the acceptor's answer arrived.  NULL: the connection is
 * ready as conn_open made it.
 *
 * @retval 0 the connection can carry descriptors.
 * @retval -EPROTO rep is malformed; the engine closes the connection.
 * @retval -errno setting it up failed; the engine closes it.
 */
typedef int (*kvt_pmd_conn_ready_t)(struct kvt_conn *c, const uint8_t *rep,
				    size_t len);

/**
 * Free a connection.  No descriptor of it is in flight; state the lcore
 * keeps for it must be detached there (kvt_port_call()).
 */
typedef void (*kvt_pmd_conn_close_t)(struct kvt_conn *c);

/**
 * Import a peer's region through a connection (control thread); keep
 * the import in rm->key[c->port->id].
 *
 * @retval 0 imported.
 * @retval -ENOTSUP this connection cannot reach the region (another may).
 * @retval -EPROTO the key is malformed or lies.
 * @retval -ESTALE the key names memory that is gone.
 * @retval -EIO the driver failed to map it.
 * @retval -ENOMEM out of memory.
 */
typedef int (*kvt_pmd_rmem_import_t)(struct kvt_conn *c, struct kvt_rmem *rm,
				     const uint8_t *key, size_t len);

/** Undo rmem_import (no descriptor on the region is in flight). */
typedef void (*kvt_pmd_rmem_release_t)(struct kvt_conn *c,
				       struct kvt_rmem *rm);

/**
 * Control thread: a message the PMD at the other end of c sent with
 * kvt_conn_msg().  A non-empty reply goes back to it the same way.
 * NULL: the message is dropped.
 *
 * @retval 0 handled.
 * @retval -EPROTO malformed; dropped (and logged by the engine).
 */
typedef int (*kvt_pmd_conn_msg_t)(struct kvt_conn *c, const uint8_t *msg,
				  size_t len, struct kvt_buf *reply);

/** Control thread, every few milliseconds: upkeep such as re-probing a
 *  failed link. */
typedef void (*kvt_pmd_ctl_tick_t)(struct kvt_port *port, uint64_t now_us);

/** The operations of a transport. */
struct kvt_pmd_ops {
	uint32_t flags;		/**< KVT_PMD_F_* */
	/** Preference among PMDs that reach the same memory: higher wins. */
	int rank;
	/** Bytes of striped slices one port may hold before new slices go
	 *  to another port or wait for one to drain (0: 8 MiB).  The same
	 *  for every port of the PMD: a cap that followed a port's measured
	 *  rate would feed back into it. */
	uint64_t stripe_cap;

	kvt_pmd_env_check_t env_check;
	kvt_pmd_probe_t probe;			/**< mandatory */
	kvt_pmd_start_t start;
	kvt_pmd_stop_t stop;
	kvt_pmd_remove_t remove;

	kvt_pmd_submit_t submit;		/**< mandatory */
	kvt_pmd_poll_t poll;			/**< mandatory */
	kvt_pmd_idle_t idle;

	kvt_pmd_mem_register_t mem_register;
	kvt_pmd_mem_unregister_t mem_unregister;
	kvt_pmd_mem_export_t mem_export;

	kvt_pmd_endpoint_t endpoint;
	kvt_pmd_conn_open_t conn_open;
	kvt_pmd_conn_accept_t conn_accept;
	kvt_pmd_conn_ready_t conn_ready;
	kvt_pmd_conn_close_t conn_close;	/**< with conn_open/accept */
	kvt_pmd_rmem_import_t rmem_import;
	kvt_pmd_rmem_release_t rmem_release;

	kvt_pmd_conn_msg_t conn_msg;
	kvt_pmd_ctl_tick_t ctl_tick;
};

/** A registered transport. */
struct kvt_pmd {
	const char *name;
	const struct kvt_pmd_ops *ops;
	struct kvt_pmd *next;
};

/**
 * Add a transport to the registry (constructors only).  One that lacks a
 * mandatory op is refused, with a message: it never probes.
 */
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
	/* Striping state (lib/batch/stripe.c). */
	uint64_t inflight_bytes;	/**< @internal striped bytes held */
	uint64_t done_bytes;	/**< @internal settled, not yet taken off */
	uint64_t rate_bpus;	/**< @internal recent rate, bytes/us */
	uint64_t rate_win_bytes;	/**< @internal */
	uint64_t rate_win_start;	/**< @internal TSC */
	uint64_t rate_gap_us;	/**< @internal recent windows' length */
	uint64_t busy_since;	/**< @internal TSC given work while idle */
	/** @internal What the PMD finished (kvt_desc_complete() appends),
	 *  in order, linked through kvt_desc.next; the engine takes it
	 *  after each call.  On a line of its own: only the port's lcore
	 *  writes it. */
	struct kvt_desc *done_head __rte_cache_aligned;
	struct kvt_desc **done_tail;	/**< @internal */
} __rte_cache_aligned;

/**
 * Hand a finished descriptor back (burst out): err is 0 or a negative
 * errno.  The PMD gives up the descriptor: it must not touch it again.
 * The port's lcore takes what its PMD handed back when the submit, poll
 * or port call returns, and settles it there, in order: counters, retries
 * on another port (a retryable error, -ECONNRESET, -EIO, -ETIMEDOUT, on
 * a data slice), tails, done words.  Nothing here calls into the engine.
 *
 * Every descriptor ends here, a DONE included (an ORDERED port hands it
 * back, err 0 even on a dead connection, after everything queued before
 * it on the connection), except a KVT_DESC_SUB (kvt_subinfo).  Call it
 * where the port's work runs: on its lcore, in a kvt_port_call(), or in
 * stop.
 */
static inline void
kvt_desc_complete(struct kvt_port *port, struct kvt_desc *d, int err)
{
	d->status = err;
	d->next = NULL;
	*port->done_tail = d;
	port->done_tail = &d->next;
}

/**
 * Create a port (probe only).
 *
 * @return the port, or NULL with rte_errno ENOSPC (too many ports), EINVAL.
 */
struct kvt_port *kvt_port_create(const struct kvt_pmd *pmd, const char *name,
				 int numa, void *priv);

/**
 * Is urgent work waiting in the ring of the port's lcore?  A poll that
 * may run long (bulk copies over many sockets) ends its turn early when
 * it is, so the lcore hands the urgent work out first.  On the port's
 * lcore.
 *
 * @return 1 or 0.
 */
int kvt_port_urgent_waiting(const struct kvt_port *port);

/**
 * Run fn(port, arg) on the port's lcore and wait for it (control path).
 * When the lcores are not running it runs on the caller.  A call the
 * lcore has not started within timeout_ms is withdrawn: it never runs,
 * so arg may live on the caller's stack.  One it started is waited for.
 * timeout_ms 0 waits as long as it takes (for what must run, such as
 * detaching state before it is freed).
 *
 * @return fn's result, or -ETIMEDOUT when the lcore did not start it
 *   within timeout_ms (fn did not run and never will), -ENOBUFS (too
 *   many calls queued), -ENOMEM.
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

#endif /* KVT_PMD_H */
