/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The RDMA transport's topology (rdma_topo.c).  Tests and the fuzz
 * target reach it through the static library.
 */
#ifndef KVT_RDMA_TOPO_H
#define KVT_RDMA_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "kvt_pmd_kit.h"

/*
 * Topology: RDMA NICs, GPUs and NUMA nodes read from sysfs, and for each
 * memory location the NICs that should carry its bytes.  A location's
 * preferred NICs share its NUMA node (cpu:N) or sit nearest its PCI switch
 * (cuda:N); the others are its fallback.  --kvt-nic filters the NICs and
 * --kvt-topo overrides the matrix.
 */
#define RD_TOPO_MAX_NICS KVT_MAX_PORTS
#define RD_TOPO_MAX_GPUS 32
#define RD_TOPO_MAX_NODES 16

enum kvt_link {
	KVT_LINK_UNKNOWN = 0,
	KVT_LINK_IB = 1,
	KVT_LINK_ETH = 2,	/**< RoCE */
};

struct rd_topo_nic {
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

struct rd_topo_gpu {
	char pci[16];
	char path[256];
	int numa;
};

/** NICs for one memory location, as bit masks over rd_topo.nic[]. */
struct rd_topo_pref {
	uint32_t preferred;
	uint32_t fallback;
};

struct rd_topo {
	unsigned int nnics;
	unsigned int ngpus;
	unsigned int nnodes;
	struct rd_topo_nic nic[RD_TOPO_MAX_NICS];
	struct rd_topo_gpu gpu[RD_TOPO_MAX_GPUS];	/**< PCI order */
	struct rd_topo_pref cpu[RD_TOPO_MAX_NODES];
	/** Indexed by this process's CUDA device number. */
	struct rd_topo_pref cuda[RD_TOPO_MAX_GPUS];
	unsigned int ncuda;
	/** cuda:N is gpu[cuda_gpu[N]]. */
	int cuda_gpu[RD_TOPO_MAX_GPUS];
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
int rd_topo_discover(struct rd_topo *t, const char *root, const char *allow,
		      const char *extra, const char *const *cuda_pci,
		      unsigned int ncuda, const char *json, char *err,
		      size_t errlen);

/** The NICs for loc; @return 0, or -ENOENT for a location it does not know. */
int rd_topo_lookup(const struct rd_topo *t, const struct kvt_loc *loc,
		    struct rd_topo_pref *out);

/** Index of the NIC named name, or -1. */
int rd_topo_nic_index(const struct rd_topo *t, const char *name);

/*
 * --kvt-topo: is the file there, JSON, and shaped as documented?  NIC
 * names are checked later, when the NICs are known.
 *
 * @return 0; -ENOENT (cannot be read), -EINVAL (malformed), with a
 *   one-line reason in err.
 */
int rd_topo_check_file(const char *file, char *err, size_t errlen);

#endif /* KVT_RDMA_TOPO_H */
