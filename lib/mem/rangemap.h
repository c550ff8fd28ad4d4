/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Range map: disjoint address ranges [base, base + len), each with a
 * value, that submit threads search without a lock while one writer at a
 * time adds and removes ranges.  O(log n) per search and per change.
 *
 * Readers search inside kvt_rcu_read_lock(); a change publishes a new
 * root and frees the nodes it replaced after kvt_rcu_synchronize().
 * Writers must serialise among themselves (the owner's lock).
 */
#ifndef KVT_RANGEMAP_H
#define KVT_RANGEMAP_H

#include <stdint.h>

struct kvt_rnode;

struct kvt_rangemap {
	struct kvt_rnode *root;	/* RCU-protected */
	unsigned int n;		/* writer's count */
};

/**
 * Reader: the value of the range holding all of [addr, addr + len), or
 * NULL (none, or addr's range ends before addr + len).  len > 0.
 */
void *kvt_rangemap_find(const struct kvt_rangemap *m, uint64_t addr,
			uint64_t len);

/** Writer: does any range overlap [addr, addr + len)? */
int kvt_rangemap_overlaps(const struct kvt_rangemap *m, uint64_t addr,
			  uint64_t len);

/**
 * Writer: add [base, base + len) -> val.
 * @return 0; -EEXIST (it overlaps a range), -ENOMEM (the map is unchanged).
 */
int kvt_rangemap_insert(struct kvt_rangemap *m, uint64_t base, uint64_t len,
			void *val);

/**
 * Writer: remove the range starting at base; its value in *val.  Readers
 * may still hold the value until the next grace period the caller waits
 * for (this call has waited for one when it returns 0).
 * @return 0; -ENOENT (no range starts at base), -ENOMEM (unchanged).
 */
int kvt_rangemap_remove(struct kvt_rangemap *m, uint64_t base, void **val);

/**
 * Writer, or reader in a read section: fn(val, arg) for each range in
 * address order, until fn returns non-zero.
 * @return what the last fn returned (0: it saw them all).
 */
int kvt_rangemap_walk(const struct kvt_rangemap *m,
		      int (*fn)(void *val, void *arg), void *arg);

/** Writer, when no reader can run: free every node (not the values). */
void kvt_rangemap_clear(struct kvt_rangemap *m);

#endif /* KVT_RANGEMAP_H */
