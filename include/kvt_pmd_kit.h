/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Port driver (PMD) toolkit: helpers a transport may use, none of which
 * the contract (kvt_pmd.h) requires.  Option parsing, time, sysfs and
 * socket helpers, descriptor lists, notification inboxes, checked target
 * ranges and same-host memory sharing.  It includes kvt_pmd.h, so a PMD
 * includes this header alone.
 */
#ifndef KVT_PMD_KIT_H
#define KVT_PMD_KIT_H

#include <stdint.h>
#include <stddef.h>

#include "kvt_pmd.h"

/* ---- options, time, sysfs, sockets ---- */

struct rte_kvargs;

/**
 * A PMD option that is a whole decimal number: with key absent from kv,
 * *out stays as it is.
 * @return 0, or -EINVAL when the value is not a number in [lo, hi].
 */
int kvt_kv_long(const struct rte_kvargs *kv, const char *key, long lo,
		long hi, long *out);

/**
 * Probe helper for a transport whose only option is ports=N (1..max):
 * creates ports prefix0 .. prefix{N-1}, none of them tied to a NUMA node.
 *
 * @return 0, -EINVAL (args malformed or N out of range), -ENOSPC (no
 *   room for another port).
 */
int kvt_probe_ports(const struct kvt_pmd *pmd, const char *args,
		    const char *prefix, long max);

/** Current TSC in microseconds. */
uint64_t kvt_now_us(void);

/**
 * The whole decimal number a sysfs file holds (numa_node and the like).
 *
 * @return it, or dflt when the file cannot be read or holds no number.
 */
int kvt_sysfs_int(const char *path, int dflt);

/**
 * Wait for a non-blocking connect() that returned EINPROGRESS on fd to
 * finish, until deadline_us (kvt_now_us()); a deadline already past
 * still looks once.  Control path only: it blocks.
 *
 * @return 0 connected, -ETIMEDOUT, or the connect's -errno.
 */
int kvt_connect_wait(int fd, uint64_t deadline_us);

/* ---- descriptor lists ---- */

/**
 * Append d to the list *head .. *tail linked through kvt_desc.next
 * (*head NULL: empty; *tail then does not matter).  Whoever holds the
 * descriptors owns the list: no atomics.
 */
static inline void
kvt_desc_append(struct kvt_desc **head, struct kvt_desc **tail,
		struct kvt_desc *d)
{
	d->next = NULL;
	if (*head == NULL)
		*head = d;
	else
		(*tail)->next = d;
	*tail = d;
}

/* ---- notification inboxes, target ranges, same-host memory ---- */

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

/**
 * Is host memory [addr, addr + len) mapped in this process, every page?
 * One system call.  Registration refuses a range that is not (EFAULT);
 * a target checks again where the application may have unmapped a range
 * under its registration before it reads from it.
 *
 * @return 1 or 0.
 */
int kvt_host_mapped(const void *addr, size_t len);

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

#endif /* KVT_PMD_KIT_H */
