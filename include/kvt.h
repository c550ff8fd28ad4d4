/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * kvt: kernel-bypass KV-cache transfer engine.
 *
 * One engine per process.  kvt_init() starts it on DPDK's EAL: worker
 * lcores poll the transports (ports) and drain descriptor rings.  The
 * application registers memory, opens peers (other engines), and moves
 * bytes between its memory and the peers' exported memory in batches.
 *
 * Conventions: functions return 0 or a negative errno; constructors return
 * a pointer, or NULL with rte_errno set.  Every refusal is also logged once
 * on the "kvt" log type with the reason.  Every wait takes a finite
 * timeout.  Unless stated otherwise a function may be called from any
 * thread; a batch belongs to one thread at a time.
 */
#ifndef KVT_H
#define KVT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Engine                                                              */
/* ------------------------------------------------------------------ */

/**
 * Start the engine.
 *
 * Arguments: argv[0], EAL arguments, then "--", then kvt's options, all of
 * which begin with "--kvt-"; parsing stops at the first argument that does
 * not, so the caller can parse its own options after them.  With no EAL
 * arguments, kvt picks defaults that run without hugepages and do not clash
 * with another kvt process on the host.  If the application has already
 * initialised EAL, kvt attaches to it and ignores EAL arguments.
 *
 * kvt options: --kvt-name NAME, --kvt-listen IP:PORT, --kvt-secret S,
 * --kvt-pmd NAME[,key=val...] (repeatable; only listed transports start),
 * --kvt-nic LIST, --kvt-idle wait[:US]|spin|pause|sleep:US, --kvt-slice BYTES,
 * --kvt-lcores LIST, --kvt-timeout MS, --kvt-descs N, --kvt-topo FILE,
 * --kvt-meta p2p|etcd://HOST:PORT[,...], --kvt-cluster ID.
 *
 * @return
 *   Like rte_eal_init(), the number of arguments used after argv[0]
 *   (argc -= ret; argv += ret leaves the application's own arguments from
 *   argv[1]), or:
 *   - -EALREADY: the engine is already running in this process.
 *   - -EINVAL: a bad option or option value (the message names it).
 *   - -ENODEV: no usable transport, or no worker lcore for the ports.
 *   - -EADDRINUSE: the --kvt-listen address is taken.
 *   - -ENOMEM: out of memory.
 *   - -EIO: EAL initialisation failed.
 */
int kvt_init(int argc, char **argv);

/**
 * Stop the engine: stop the lcores, fail work still in flight with
 * -ECANCELED, close peers, release memory registrations, and (when kvt
 * initialised EAL) clean EAL up.  Handles obtained before become invalid.
 *
 * @return 0, or -ENODEV when the engine is not running.
 */
int kvt_fini(void);

/**
 * Write the control address peers use to reach this engine ("ip:port").
 *
 * @return length written (excluding the NUL), or -ENODEV, -ENOSPC (buffer
 *   too small).
 */
int kvt_listen_addr(char *buf, size_t size);

/** @return this engine's name, or NULL when the engine is not running. */
const char *kvt_name(void);

/**
 * Change what idle lcores do: "wait" (the default: after 200 us without
 * work, or US with "wait:US", block until a submission, a port call or a
 * port's own descriptor, such as a tcp socket, wakes it; lcores whose
 * ports are all tcp block at once), "spin", "pause" (rte_pause), or
 * "sleep:US" (nanosleep after 200 us without work).  A busy engine makes
 * no system call in any policy.  Takes effect at once.
 *
 * @return 0, -EINVAL (bad policy), -ENODEV.
 */
int kvt_set_idle(const char *policy);

/* ------------------------------------------------------------------ */
/* Memory                                                              */
/* ------------------------------------------------------------------ */

/** Peers may read the region. */
#define KVT_MEM_REMOTE_READ  (1u << 0)
/** Peers may write the region. */
#define KVT_MEM_REMOTE_WRITE (1u << 1)

struct kvt_mem;

/**
 * Register [addr, addr + len) for transfers.
 *
 * @param loc
 *   "cpu:N", "cuda:N", or NULL to detect the location.
 * @param flags
 *   KVT_MEM_REMOTE_READ / KVT_MEM_REMOTE_WRITE export the region to peers;
 *   0 keeps it private (usable only as the local side of a transfer).
 * @return
 *   A handle, or NULL with rte_errno:
 *   - EINVAL: NULL address, zero length, unknown flag or bad location.
 *   - EFAULT: host memory that is not mapped in this process, wholly or
 *     in part.
 *   - EEXIST: the range overlaps a registered region.
 *   - ENODEV: engine not running, or the location's device is absent.
 *   - ENOTSUP: no transport here moves memory of this location.
 *   - ENOMEM: out of memory.
 *   - Any errno a transport returns when it cannot register the range
 *     (logged with the transport's reason).
 */
struct kvt_mem *kvt_mem_register(void *addr, size_t len, const char *loc,
				 uint32_t flags);

/**
 * Unregister a region.  Peers see it disappear.  Once this returns, no
 * peer's write lands in the region and no peer's read takes from it, on
 * any transport: tcp checks every range at the target, the RDMA NIC's key
 * is gone, and for transports whose initiators copy into this memory
 * themselves (shm, nvlink) this waits until each such peer confirmed that
 * none of its requests uses the region any more (its requests on it
 * finished, which its own kvt_poll() or kvt_wait() reaps).
 *
 * @return 0, or -EINVAL (not a handle), -EBUSY (local transfers using it
 *   are still in flight; it stays registered), -ENODEV, -ETIMEDOUT (a
 *   peer of such a transport did not confirm within --kvt-timeout: its
 *   session was closed, and a copy it had begun before it stopped
 *   answering may yet finish; the region is unregistered all the same).
 */
int kvt_mem_unregister(struct kvt_mem *mem);

/**
 * Allocate memory that every local transport can share with same-host
 * peers: a memfd mapping for "cpu:N" (bound to NUMA node N), fabric/IPC
 * exportable device memory for "cuda:N".  The memory is not registered.
 *
 * @return the address, or NULL with rte_errno EINVAL (bad size or
 *   location), ENODEV (device absent), ENOMEM.
 */
void *kvt_mem_alloc(size_t len, const char *loc);

/**
 * Free memory from kvt_mem_alloc().  It must not be registered.  Works
 * after kvt_fini() too.
 *
 * @return 0, or -EINVAL (not from kvt_mem_alloc), -EBUSY (still
 *   registered).
 */
int kvt_mem_free(void *addr);

/* ------------------------------------------------------------------ */
/* Peers                                                               */
/* ------------------------------------------------------------------ */

struct kvt_peer;

/** One region a peer exports, as reported by kvt_peer_regions(). */
struct kvt_region {
	uint64_t base;		/**< address in the peer's address space */
	uint64_t len;
	uint32_t flags;		/**< KVT_MEM_REMOTE_* */
	uint32_t fence_slots;	/**< > 0 for a fence table */
	char loc[16];		/**< "cpu:N" or "cuda:N" */
};

/**
 * Open a peer: "host:port" (P2P handshake), or a name when --kvt-meta
 * names a metadata service.  Opening an already open, live peer returns
 * the same handle with one more reference.
 *
 * A peer opens when at least one of its data paths connects; the others
 * are marked down and dialled again in the background.
 *
 * @param timeout_ms
 *   Bound on the whole open, a name lookup included; 0 means the
 *   engine's --kvt-timeout.
 * @return
 *   A handle, or NULL with rte_errno:
 *   - EINVAL: malformed address.
 *   - ECONNREFUSED, EHOSTUNREACH, ENETUNREACH: cannot connect.
 *   - ETIMEDOUT: no complete answer in time.
 *   - EACCES: the peer refused our secret, or sent a wrong one.
 *   - EPROTO: malformed or unsupported handshake.
 *   - EHOSTUNREACH also: no transport reaches it, or none of its data
 *     paths connects now.
 *   - ENOENT: the name is not published in the metadata service.
 *   - ESTALE: the engine at the published address carries another name
 *     (a stale entry).
 *   - ENODEV: engine not running.  ENOMEM.
 */
struct kvt_peer *kvt_peer_open(const char *addr, unsigned int timeout_ms);

/**
 * Drop one reference to a peer; the last one closes it.
 *
 * @return 0, or -EINVAL (not a handle), -EBUSY (submissions to it are in
 *   flight), -ENODEV.
 */
int kvt_peer_close(struct kvt_peer *peer);

/**
 * List the regions a peer exports.
 *
 * @return the number of regions (may exceed max; only max are written),
 *   or -EINVAL, -ECONNRESET (peer lost), -ENODEV.
 */
int kvt_peer_regions(struct kvt_peer *peer, struct kvt_region *out,
		     unsigned int max);

/**
 * @return 0 while the peer is reachable, -ECONNRESET once it was lost,
 *   -EINVAL for a bad handle.
 */
int kvt_peer_state(struct kvt_peer *peer);

/* ------------------------------------------------------------------ */
/* Transfers                                                           */
/* ------------------------------------------------------------------ */

/** Copy from the peer's remote range into local memory. */
#define KVT_OP_READ  1
/** Copy local memory into the peer's remote range. */
#define KVT_OP_WRITE 2

/** One request: a contiguous copy between local and remote memory. */
struct kvt_xfer {
	uint32_t op;		/**< KVT_OP_READ or KVT_OP_WRITE */
	uint32_t rsvd;		/**< must be 0 */
	void *local;		/**< inside a region registered here */
	uint64_t remote;	/**< inside a region the peer exports */
	uint64_t len;		/**< > 0 */
};

/**
 * Pages of one size picked by index, as a paged KV cache's block table
 * names them: page k moves between local + local_idx[k] * page_size and
 * remote + remote_idx[k] * page_size.
 */
struct kvt_pages {
	uint32_t op;		/**< KVT_OP_READ or KVT_OP_WRITE */
	uint32_t n;		/**< pages, > 0 */
	uint64_t page_size;	/**< bytes, > 0 */
	void *local;		/**< local page 0 */
	uint64_t remote;	/**< remote page 0, in the peer's address space */
	const uint32_t *local_idx;	/**< n local page numbers */
	const uint32_t *remote_idx;	/**< n remote page numbers */
};

/**
 * Blocks of any size at any address, as serving stacks list them (one
 * entry per contiguous run of KV blocks, often over one tensor per
 * layer): block k moves len[k] bytes between local[k] and remote[k].
 * Three arrays, so that Python lists and numpy arrays convert in one
 * pass.
 */
struct kvt_blocks {
	uint32_t op;		/**< KVT_OP_READ or KVT_OP_WRITE */
	uint32_t n;		/**< blocks, > 0 */
	const uint64_t *local;	/**< n local addresses */
	const uint64_t *remote;	/**< n remote addresses, the peer's */
	const uint64_t *len;	/**< n lengths, each > 0 */
};

/** A remote fence slot and the room id to write there. */
struct kvt_fence_ref {
	uint64_t table;		/**< kvt_fence_table_handle() at the peer */
	uint32_t slot;
	uint32_t rsvd;		/**< must be 0 */
	uint64_t room;		/**< != 0 */
};

/** Write opts->fence after all the submission's data is placed. */
#define KVT_SUBMIT_FENCE		(1u << 0)
/** Skip the overlap guard for this submission. */
#define KVT_SUBMIT_ALLOW_OVERLAP	(1u << 1)

/** Largest notification payload. */
#define KVT_NOTIFY_MAX 256

/**
 * Priority classes (kvt_submit_opts.priority).  A higher class overtakes
 * a lower one wherever they share a queue: the lcore takes urgent
 * descriptors first each turn and bulk ones in small bursts after the
 * others; an urgent striped request does not wait for a port below its
 * in-flight cap; tcp sends urgent work on a socket of its own, so it
 * never waits behind a large slice.  Every class is served each turn,
 * so bulk keeps a share however much urgent work comes.
 */
enum kvt_prio {
	KVT_PRIO_NORMAL = 0,	/**< the default */
	KVT_PRIO_URGENT = 1,	/**< latency-critical: small, first layers, fences */
	KVT_PRIO_BULK = 2,	/**< throughput: whole KV streams */
};

/** Options of one submission; all fields may be zero. */
struct kvt_submit_opts {
	uint32_t flags;		/**< KVT_SUBMIT_* */
	uint32_t notify_len;	/**< 0: no notification */
	const void *notify;	/**< delivered to the peer after the data */
	struct kvt_fence_ref fence;
	void *cuda_event;	/**< cudaEvent_t the copy waits on, or NULL */
	uint32_t priority;	/**< enum kvt_prio */
	uint32_t rsvd;		/**< must be 0 */
};

struct kvt_batch;

/**
 * Allocate a batch able to hold max_xfers requests until reset.
 *
 * @return a batch, or NULL with rte_errno EINVAL (0 or too large),
 *   ENODEV, ENOMEM.
 */
struct kvt_batch *kvt_batch_alloc(unsigned int max_xfers);

/**
 * Free a batch.  Requests still in flight keep the batch alive until they
 * settle (bounded by the peer timeout); the handle is invalid at once.
 *
 * @return 0, or -EINVAL.
 */
int kvt_batch_free(struct kvt_batch *batch);

/**
 * Forget all requests of a settled batch so its space can be reused.  A
 * batch whose every request kvt_status() reported settled counts as
 * settled: the engine's last bookkeeping store for it is waited out
 * (bounded by the peer timeout).
 *
 * @return 0, or -EINVAL, -EBUSY (requests still pending).
 */
int kvt_batch_reset(struct kvt_batch *batch);

/**
 * Submit n requests to a peer as one submission.  n may be 0 when the
 * submission carries a fence or a notification (a message on its own).
 *
 * Every request is validated before anything is queued; on error nothing
 * is queued.  The requests are cut into slices (--kvt-slice) spread over
 * every port that reaches the peer for that memory.  A submission larger
 * than the pipeline is queued as space frees up: kvt_poll() and
 * kvt_wait() pump the rest in.  A fence (KVT_SUBMIT_FENCE) and a notification are written
 * only after every request of the submission has completed, and not at
 * all when one failed.
 *
 * @return
 *   Index in the batch of the first request (for kvt_status()), or:
 *   - -EINVAL: bad batch, peer, op, zero length, reserved field set, room
 *     0, notification longer than KVT_NOTIFY_MAX, a priority outside
 *     enum kvt_prio, or nothing to do.
 *   - -EFAULT: a local range is not inside one registered region.
 *   - -ERANGE: a remote range is not inside one region the peer exports.
 *   - -EPERM: the remote region does not allow this op.
 *   - -ENOENT: the fence table or slot does not exist at the peer.
 *   - -EBUSY: a write overlaps another write in flight to the same
 *     remote region (or one in this submission); see
 *     KVT_SUBMIT_ALLOW_OVERLAP.
 *   - -EHOSTUNREACH: no port reaches this peer for this memory.
 *   - -ECONNRESET: the peer was lost.
 *   - -ENOSPC: the batch is full.
 *   - -ENODEV: engine not running.
 */
int kvt_submit(struct kvt_batch *batch, struct kvt_peer *peer,
	       const struct kvt_xfer *xfers, unsigned int n,
	       const struct kvt_submit_opts *opts);

/**
 * Submit a page list (struct kvt_pages) as one request: one batch slot,
 * one status, cheaper than n requests (no per-page request record, one
 * range check for all pages).  Every page must lie in one local region
 * and one remote region (the KV pools); the index arrays are copied.
 * Overlap guard, fence, notification and options as for kvt_submit(),
 * each page being a write range.
 *
 * @return
 *   Index of the request in the batch, or:
 *   - -EINVAL: bad batch, peer, op, n 0, page size 0, index array NULL,
 *     a page address that overflows, bad options.
 *   - -EFAULT: the pages reach outside one registered local region.
 *   - -ERANGE: the pages reach outside one region the peer exports.
 *   - -EPERM, -ENOENT, -EBUSY, -EHOSTUNREACH, -ECONNRESET, -ENOSPC,
 *     -ENOTSUP, -ENODEV: as for kvt_submit().
 *   - -ENOMEM: no memory for the copy of the index arrays.
 */
int kvt_submit_pages(struct kvt_batch *batch, struct kvt_peer *peer,
		     const struct kvt_pages *pages,
		     const struct kvt_submit_opts *opts);

/**
 * Submit a block list (struct kvt_blocks) as one submission with one
 * status: its requests settle together, and kvt_status() of the index
 * returned reports the list: 0 once every block moved, else the first
 * error of any block.  The arrays are copied.
 *
 * Each run of consecutive blocks in one local and one remote region is
 * one request (a batch slot): a list over one KV pool takes one slot, a
 * list over L layer tensors one per change of tensor, and a batch needs
 * room for n slots at worst.
 *
 * Cost model, per block: one bounds test against its run's regions (a
 * region lookup only where a run begins), one write range for the
 * overlap guard, and its slices (--kvt-slice; a block is never merged
 * with the next) as descriptors on shm, tcp and rdma ports; nvlink takes
 * the list as one descriptor into its gather kernel.  Compared with
 * kvt_submit() of n requests it saves the request records, the statuses
 * and their completion counts; compared with kvt_submit_pages() it
 * stores 24 bytes per block instead of 8.
 *
 * Overlap guard, fence, notification and options as for kvt_submit().
 *
 * @return
 *   Index of the list's first request in the batch, or:
 *   - -EINVAL: bad batch, peer, op, n 0, an array NULL, a block of
 *     length 0 or whose end overflows, bad options.
 *   - -EFAULT: block k (named in the log) is not inside one registered
 *     local region.
 *   - -ERANGE: block k is not inside one region the peer exports.
 *   - -ENOSPC: the batch has no slot for the list's next run.
 *   - -EPERM, -ENOENT, -EBUSY, -EHOSTUNREACH, -ECONNRESET, -ENOTSUP,
 *     -ENODEV: as for kvt_submit().
 *   - -ENOMEM: no memory for the copy of the arrays.
 *   On any error nothing is queued.
 */
int kvt_submit_blocks(struct kvt_batch *batch, struct kvt_peer *peer,
		      const struct kvt_blocks *blocks,
		      const struct kvt_submit_opts *opts);

/**
 * Pump the batch (queue what its submissions still have to send: what a
 * full ring refused, slices held back by the ports' caps), then count the
 * requests not yet settled.  It neither locks nor makes a system call, and costs what settled since the last call,
 * not what is pending: a submission that settles behind a pending one is
 * finished (its overlap claims released) at the next call.  A submission
 * whose done word a GPU stores itself (nvlink) is finished in submission
 * order.
 *
 * @return the number of pending requests (0: all settled), or -EINVAL.
 */
int kvt_poll(struct kvt_batch *batch);

/**
 * Poll until every request settled or timeout_us passed.
 *
 * It spins for 20 us, then yields the cpu; past 200 us it sleeps (a
 * futex) until the lcore that settles one of the batch's submissions
 * wakes it, or until the ports are about to want the slices their caps
 * held back (kvt_wait() feeds them, as kvt_poll() does), 2 ms at most at
 * a time.  While a submission's done word is due from a GPU (nvlink),
 * which wakes no one, it yields instead.  An lcore makes a system call
 * only for a waiter that sleeps.
 *
 * @return 0 when all settled (each may have failed; see kvt_status()),
 *   -ETIMEDOUT, -EINVAL.
 */
int kvt_wait(struct kvt_batch *batch, uint64_t timeout_us);

/**
 * Wait as kvt_wait() does, until request idx settled (or every request
 * did) or timeout_us passed: for an application that notes each request
 * as it settles.  A striped request without a fence or notification
 * settles on its own and wakes a sleeping waiter; the others settle with
 * their submission.
 *
 * @return 0 when it settled (it may have failed; see kvt_status()),
 *   -ETIMEDOUT, -EINVAL (bad batch, idx not submitted).
 */
int kvt_wait_one(struct kvt_batch *batch, unsigned int idx,
		 uint64_t timeout_us);

/**
 * Status of request idx.
 *
 * A request that failed moved none, some or all of its bytes: its
 * destination range holds old bytes, new ones, or a mix, and no byte of
 * it lands after the failure is reported: a link kvt gives up is closed
 * at both ends before its work moves or fails.  (When the peer itself is
 * lost, its sockets are reset at once and only bytes already on the wire
 * may still arrive.)  Its fence and notification were not delivered: the
 * receiver never sees a fence land for a request reported failed, nor
 * its notification, except when the peer was lost while their answer was
 * on its way.  The range is whole again after the next successful write
 * to it.
 *
 * @return 0 done, -EINPROGRESS pending, or the request's error:
 *   -ECONNRESET (peer lost), -ETIMEDOUT, -ECANCELED (engine stopped),
 *   -EIO (transport error), -ERANGE (the peer no longer exports the
 *   range), -ENOBUFS (the peer had no room for the notification for
 *   four timeouts: its application took none), -EPROTO (the peer answered outside the protocol),
 *   -EACCES (the peer's NIC refused the access: its key does not cover
 *   the range, as when the peer unregistered it meanwhile),
 *   -EFAULT (the memory at the range is not mapped any more: an
 *   application unmapped it while it was registered; the process that
 *   holds it is not harmed), -EINVAL (idx out of range).
 */
int kvt_status(struct kvt_batch *batch, unsigned int idx);

/* ------------------------------------------------------------------ */
/* Fences (receiver side)                                              */
/* ------------------------------------------------------------------ */

struct kvt_fence_table;

/**
 * Create a fence table of nslots 64-bit words at loc ("cpu:N" or
 * "cuda:N"; NULL means cpu:0) and export it for remote writes.  A host
 * table serves CPU and GPU waiters alike (it is registered with CUDA when
 * a device is present); a device table is polled from the CPU with a
 * copy, and is meant for kvt_fence_wait_stream() and device code.
 *
 * @return a table, or NULL with rte_errno EINVAL, ENODEV, ENOMEM.
 */
struct kvt_fence_table *kvt_fence_table_create(uint32_t nslots,
					       const char *loc);

/** Destroy a table.  @return 0, -EINVAL. */
int kvt_fence_table_destroy(struct kvt_fence_table *ft);

/** The value a sender puts in kvt_fence_ref.table. */
uint64_t kvt_fence_table_handle(const struct kvt_fence_table *ft);

/**
 * Address of the table's words (host memory, or device memory for
 * "cuda:N"), for device-side waiting.
 */
volatile uint64_t *kvt_fence_table_words(const struct kvt_fence_table *ft);

/**
 * Arm a slot for a room: clear it, then expect room.
 *
 * @return 0, or -EINVAL (bad slot, room 0).
 */
int kvt_fence_arm(struct kvt_fence_table *ft, uint32_t slot, uint64_t room);

/**
 * Check a slot.  Data written before the fence is visible once this
 * returns 0.
 *
 * @return 0 when the armed room arrived, -EAGAIN while empty, -ESTALE when
 *   the slot holds another non-zero value, -EINVAL.
 */
int kvt_fence_poll(struct kvt_fence_table *ft, uint32_t slot);

/**
 * Poll a slot until it resolves or timeout_us passed.
 *
 * @return as kvt_fence_poll(), or -ETIMEDOUT.
 */
int kvt_fence_wait(struct kvt_fence_table *ft, uint32_t slot,
		   uint64_t timeout_us);

/**
 * Make a CUDA stream wait for a slot without the CPU: a one-thread kernel
 * on stream spins with system-scope acquire loads until the slot holds
 * the armed room (then work queued after it on the stream sees the data),
 * and stores 1 in *status; 2 if the slot held another room; 3 after
 * timeout_us.  status must be device-accessible (cudaMalloc, mapped host
 * memory).  Device code may also test a slot itself: see kvt_cuda.h.
 *
 * @return 0 once queued, or -EINVAL, -ENOTSUP (no CUDA device), -EIO.
 */
int kvt_fence_wait_stream(struct kvt_fence_table *ft, uint32_t slot,
			  void *cuda_stream, uint64_t timeout_us,
			  uint32_t *status);

/* ------------------------------------------------------------------ */
/* Notifications (receiver side)                                       */
/* ------------------------------------------------------------------ */

/** One received notification. */
struct kvt_notify_msg {
	char peer[64];		/**< sender's engine name */
	uint32_t len;
	uint8_t data[KVT_NOTIFY_MAX];
};

/**
 * Take up to max received notifications.  Lock-free, no system call.
 *
 * @return the number taken, or -EINVAL, -ENODEV.
 */
int kvt_notify_poll(struct kvt_notify_msg *out, unsigned int max);

/* ------------------------------------------------------------------ */
/* Ports and statistics                                                */
/* ------------------------------------------------------------------ */

/** What a port is and where it runs. */
struct kvt_port_info {
	char name[32];		/**< e.g. "shm0", "tcp:eth1", "rdma:mlx5_0" */
	char pmd[16];		/**< transport */
	unsigned int lcore;	/**< EAL lcore that owns it */
	int numa;		/**< NUMA node, -1 if unknown */
};

/** Counters of one port since kvt_init(). */
struct kvt_port_stats {
	uint64_t write_bytes;	/**< bytes written to peers */
	uint64_t read_bytes;	/**< bytes read from peers */
	uint64_t served_bytes;	/**< bytes peers moved through this port */
	uint64_t slices;	/**< slices completed */
	uint64_t errors;	/**< slices failed */
	uint64_t retries;	/**< slices moved to another port */
};

/** @return the number of ports (0 when the engine is not running). */
unsigned int kvt_port_count(void);

/** @return 0, -EINVAL (no such port), -ENODEV. */
int kvt_port_info(unsigned int port, struct kvt_port_info *info);

/** @return 0, -EINVAL (no such port), -ENODEV. */
int kvt_port_stats(unsigned int port, struct kvt_port_stats *st);

/** Counters of one peer. */
struct kvt_peer_stats {
	uint64_t write_bytes;
	uint64_t read_bytes;
	uint64_t errors;
};

/** @return 0, -EINVAL. */
int kvt_peer_stats(struct kvt_peer *peer, struct kvt_peer_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* KVT_H */
