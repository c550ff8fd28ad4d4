/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Closed means closed: once kvt_mem_unregister() returns, no peer write
 * lands in the region on any transport, and memory that is not mapped
 * is neither registered nor, when the application unmaps it under its
 * registration, a way for a peer to crash the process that holds it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <criterion/criterion.h>
#include <rte_common.h>

#include "kvt.h"
#include "test_assert.h"
#include "test_common.h"

#define TCP "--kvt-pmd tcp --kvt-nic lo --kvt-timeout 1000"
#define SHM "--kvt-pmd shm --kvt-timeout 1000"

/* Unregistered means closed (tc_unregister_race), on each transport. */
static void
unregister_closes(const char *opts, const char *alloc)
{
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t writes;

	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_eq(tc_peer_start(&t, opts), 0);
	p = tc_open_peer(&t);
	writes = tc_unregister_race_host(&t, p, alloc, 10);
	cr_log_info("%s: %" PRIu64 " writes landed racing 10 unregisters, none after one returned",
		    opts, writes);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
}

Test(closed, unregister_closes_shm, .timeout = 120)
{
	unregister_closes(SHM, "alloc %u %u w");
}

/* shm over process_vm_writev (memory not from kvt_mem_alloc). */
Test(closed, unregister_closes_shm_cma, .timeout = 120)
{
	unregister_closes(SHM, "malloc %u %u w");
}

Test(closed, unregister_closes_tcp, .timeout = 120)
{
	unregister_closes(TCP, "alloc %u %u w");
}

/*
 * A peer never crashes its target: memory that is not mapped cannot be
 * registered (EFAULT), and a target whose application unmapped a range
 * under its registration fails the requests that reach it (-EFAULT),
 * small and large, writes and reads, and lives on.
 */
Test(closed, unmapped_registration_refused, .timeout = 60)
{
	void *p;

	cr_assert_geq(tc_engine_init(TCP), 0);
	cr_assert_null(kvt_mem_register((void *)0x10000, 1ull << 30, NULL,
					KVT_MEM_REMOTE_WRITE));
	cr_assert_eq(rte_errno, EFAULT, "unmapped memory: %s", rte_strerror(rte_errno));
	p = mmap(NULL, 8 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	/* A hole in the middle. */
	cr_assert_eq(munmap((uint8_t *)p + 4 * MiB, 4096), 0);
	cr_assert_null(kvt_mem_register(p, 8 * MiB, NULL, 0));
	cr_assert_eq(rte_errno, EFAULT);
	cr_assert_not_null(kvt_mem_register(p, 4 * MiB, NULL, 0));
	kvt_fini();
}

static void
unmapped_target(const char *opts, const char *alloc)
{
	static const uint64_t lens[] = { 1000, 4096, 65536, 4 * MiB };
	uint8_t *src = malloc(4 * MiB);
	struct tc_peer t;
	struct kvt_peer *p;
	uint64_t base;
	unsigned int i;
	char buf[64];
	int st;

	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_eq(tc_peer_start(&t, opts), 0);
	cr_assert_not_null(kvt_mem_register(src, 4 * MiB, NULL, 0));
	base = tc_peer_u64(&t, 0, "%s 0 %" PRIu64 " rw", alloc, 8 * MiB);
	p = tc_open_peer(&t);
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, 4 * MiB, NULL, 5000000), 0);
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "unmap 0"), 0);
	cr_assert_eq(strtol(buf, NULL, 10), 0, "munmap: %s", buf);
	for (i = 0; i < RTE_DIM(lens); i++) {
		st = tc_xfer1(p, KVT_OP_WRITE, src, base + 4096, lens[i], NULL,
			      5000000);
		cr_assert_eq(st, -EFAULT, "a %" PRIu64 "-byte write into unmapped memory: %d",
			     lens[i], st);
		st = tc_xfer1(p, KVT_OP_READ, src, base + 4096, lens[i], NULL,
			      5000000);
		cr_assert_eq(st, -EFAULT, "a %" PRIu64 "-byte read of unmapped memory: %d",
			     lens[i], st);
	}
	/* The target lives and serves on (its lcore and command loop). */
	cr_assert_eq(tc_peer_cmd(&t, buf, sizeof(buf), "stall 0 1"), 0,
		     "the target died: %s", buf);
	cr_assert_eq(kvt_peer_state(p), 0);
	kvt_peer_close(p);
	tc_peer_stop(&t);
	kvt_fini();
	free(src);
}

Test(closed, unmapped_target_tcp, .timeout = 60)
{
	unmapped_target(TCP, "alloc");
}

/* Memory shm reaches with process_vm_writev (not from kvt_mem_alloc). */
Test(closed, unmapped_target_shm, .timeout = 60)
{
	unmapped_target(SHM, "malloc");
}
