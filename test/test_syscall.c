/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An lcore under load makes no system call: count the lcore thread's
 * syscalls with perf_event_open on the raw_syscalls:sys_enter tracepoint
 * while descriptors flow, and require 0.  A control measurement (the
 * same counter on an idle lcore with the sleep policy) must see syscalls,
 * so the counter is known to work.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/mount.h>
#include <sys/syscall.h>

#include <criterion/criterion.h>
#include <rte_errno.h>

#include "kvt.h"
#include "kvt_private.h"
#include "test_common.h"

static const char *const tp_paths[] = {
	"/sys/kernel/tracing/events/raw_syscalls/sys_enter/id",
	"/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id",
};

static int
tracepoint_id(void)
{
	unsigned int i;
	FILE *f;
	int id;

	for (i = 0; i < 2; i++) {
		f = fopen(tp_paths[i], "r");
		if (f == NULL)
			continue;
		if (fscanf(f, "%d", &id) != 1)
			id = -1;
		fclose(f);
		return id;
	}
	/* Root may mount tracefs where it belongs. */
	if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL) == 0)
		return tracepoint_id();
	return -1;
}

static int
count_open(int tid, int id)
{
	struct perf_event_attr pa;

	memset(&pa, 0, sizeof(pa));
	pa.type = PERF_TYPE_TRACEPOINT;
	pa.size = sizeof(pa);
	pa.config = (uint64_t)id;
	return (int)syscall(SYS_perf_event_open, &pa, tid, -1, -1, 0);
}

static uint64_t
count_read(int fd)
{
	uint64_t c = 0;

	cr_assert_eq(read(fd, &c, sizeof(c)), (ssize_t)sizeof(c));
	return c;
}

static volatile int flowing;
static struct kvt_peer *peer;
static uint8_t src[1 << 16], dst[1 << 22];

/* Keep submissions coming so the lcore never runs dry. */
static void *
submitter(void *arg)
{
	struct kvt_xfer x[64];
	struct kvt_batch *b = kvt_batch_alloc(64);
	unsigned int i;

	(void)arg;
	for (i = 0; i < 64; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src,
			.remote = (uintptr_t)dst + i * sizeof(src),
			.len = sizeof(src) };
	while (flowing) {
		if (kvt_submit(b, peer, x, 64, NULL) < 0 ||
		    kvt_wait(b, 5000000) < 0)
			abort();
		kvt_batch_reset(b);
	}
	kvt_batch_free(b);
	return NULL;
}

Test(syscall, lcore_makes_none_under_load, .timeout = 60)
{
	struct kvt_port_stats a, z;
	pthread_t th;
	char addr[64];
	uint64_t n;
	int id, tid, fd;

	id = tracepoint_id();
	if (id < 0)
		cr_skip_test("tracepoint raw_syscalls:sys_enter unavailable (no tracefs and cannot mount it)");
	cr_assert_geq(tc_engine_init("--kvt-pmd null --kvt-slice 4K"), 0);
	tid = kvt_lcore_tid(0);
	cr_assert_gt(tid, 0);
	fd = count_open(tid, id);
	if (fd < 0)
		cr_skip_test("perf_event_open refused (%s); run as root", strerror(errno));

	/* Control: an idle lcore sleeping 100 us at a time does syscalls. */
	cr_assert_eq(kvt_set_idle("sleep:100"), 0);
	usleep(200000);
	n = count_read(fd);
	usleep(100000);
	cr_assert_gt(count_read(fd) - n, 50, "the counter saw no syscalls");

	cr_assert_not_null(kvt_mem_register(src, sizeof(src), NULL, 0));
	cr_assert_not_null(kvt_mem_register(dst, sizeof(dst), NULL,
					    KVT_MEM_REMOTE_WRITE));
	cr_assert(kvt_listen_addr(addr, sizeof(addr)) > 0);
	peer = kvt_peer_open(addr, 5000);
	cr_assert_not_null(peer);
	cr_assert_eq(kvt_set_idle("spin"), 0);
	flowing = 1;
	cr_assert_eq(pthread_create(&th, NULL, submitter, NULL), 0);
	usleep(100000);	/* steady state */
	kvt_port_stats(0, &a);
	n = count_read(fd);
	usleep(500000);
	n = count_read(fd) - n;
	kvt_port_stats(0, &z);
	flowing = 0;
	pthread_join(th, NULL);
	cr_assert_gt(z.slices - a.slices, 10000,
		     "only %lu slices flowed", (unsigned long)(z.slices - a.slices));
	cr_log_info("%lu slices flowed in 0.5 s, lcore syscalls: %lu",
		    (unsigned long)(z.slices - a.slices), (unsigned long)n);
	cr_assert_eq(n, 0, "lcore made %lu syscalls while %lu slices flowed",
		     (unsigned long)n, (unsigned long)(z.slices - a.slices));
	close(fd);
	kvt_peer_close(peer);
	kvt_fini();
}
