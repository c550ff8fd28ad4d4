/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fabricated sysfs trees for the topology tests: a machine of NUMA nodes,
 * PCI switches, GPUs and RDMA NICs made of directories and symlinks.
 */
#ifndef KVT_SYSFS_TREE_H
#define KVT_SYSFS_TREE_H

/* A fresh empty root under /tmp; the path is written to root. */
int st_root(char *root, size_t len);
/* Declare NUMA node n. */
void st_node(const char *root, int n);
/*
 * A device at PCI path `path` below sys/devices (e.g.
 * "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0") on
 * NUMA node numa.
 */
void st_gpu(const char *root, const char *path, int numa);
/* An RDMA NIC `name` at `path`; state "ACTIVE" or "DOWN"; link
 * "Ethernet" (a RoCE v2 GID with an IPv4 address at index 3) or
 * "InfiniBand". */
void st_nic(const char *root, const char *name, const char *path, int numa,
	    const char *state, const char *link);
/* Remove the tree. */
void st_remove(const char *root);

#endif
