/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Hosts in network namespaces for the Criterion tests (netns_hosts.c):
 * the cluster scripts/netns-cluster builds (head and worker prefill
 * hosts, a decode host; KV links kv0, kv1 and a backend link be each),
 * a kvt-testpeer on a host, and the kernel's byte counters.
 */
#ifndef KVT_TEST_NETNS_HOSTS_H
#define KVT_TEST_NETNS_HOSTS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "test_common.h"

/* The running cluster's name prefix ("" before tc_cluster_up). */
extern char tc_ns_prefix[16];

/* Build the cluster, or skip the test saying why. */
void tc_cluster_up(void);
/* Tear it down (a Criterion .fini; safe to repeat). */
void tc_cluster_down(void);
/* Bytes interface ifn of host moved in direction dir ("tx", "rx"). */
uint64_t tc_ns_counter(const char *host, const char *ifn, const char *dir);
/* Host's address on interface ifn. */
void tc_ns_addr(const char *host, const char *ifn, char *out, size_t len);

struct tc_host {
	const char *name;
	const char *nics;	/* its tcp ports' interfaces; NULL: kv0,kv1 */
	char be[32];		/* backend address: the control plane */
	struct tc_peer p;
	uint64_t kv0, kv1, kv2, be_tx;
};

/* A kvt-testpeer on h, tcp over kv0 and kv1, listening on the backend
 * link, with a 500 ms peer timeout. */
void tc_host_start(struct tc_host *h);

#endif
