/* SPDX-License-Identifier: BSD-3-Clause */
/* The rdma tests' rails and shared helpers (rdma_rails.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "rdma_rails.h"
#include "test_common.h"
#include "verbs_double.h"

static char dir[64];

/* Every test gets its own double: rails and process tables in dir. */
void
rdma_rails(const char *devs)
{
	snprintf(dir, sizeof(dir), "/tmp/kvt-vd-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	setenv("KVT_VDOUBLE_DIR", dir, 1);
	setenv("KVT_VDOUBLE_DEVS", devs, 1);
}

void
rdma_rails_fini(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (dir[0] != '\0' && system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

/* Write n blocks of len from src to base (block i to base + i * len) as
 * one batch; @return the first failed status or 0. */
int
rdma_write_blocks(struct kvt_peer *p, uint8_t *src, uint64_t base, unsigned int n,
	     uint64_t len, uint64_t timeout_us)
{
	struct kvt_xfer *x = calloc(n, sizeof(*x));
	struct kvt_batch *b = kvt_batch_alloc(n);
	unsigned int i;
	int ret = 0, st;

	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = src + i * len,
					  .remote = base + i * len, .len = len };
	cr_assert_geq(kvt_submit(b, p, x, n, NULL), 0);
	cr_assert_eq(kvt_wait(b, timeout_us), 0, "the batch did not settle");
	for (i = 0; i < n; i++) {
		st = kvt_status(b, i);
		if (st != 0 && ret == 0)
			ret = st;
	}
	kvt_batch_free(b);
	free(x);
	return ret;
}

int
rdma_port_of(const char *name)
{
	struct kvt_port_info pi;
	unsigned int i;

	for (i = 0; i < kvt_port_count(); i++)
		if (kvt_port_info(i, &pi) == 0 && strcmp(pi.name, name) == 0)
			return (int)i;
	cr_assert_fail("no port %s", name);
	return -1;
}

/* Cut rail `nic` once it carried bytes of batch b, which must still be
 * running then (a cut after the work could not test the move). */
void
rdma_cut_when_busy(const char *nic, struct kvt_batch *b)
{
	char port[40];
	struct kvt_port_stats st;
	uint64_t t0 = tc_now_us();

	snprintf(port, sizeof(port), "rdma:%s", nic);
	do {
		cr_assert_eq(kvt_port_stats((unsigned int)rdma_port_of(port), &st), 0);
		cr_assert_lt(tc_now_us() - t0, 10000000, "%s carried nothing", nic);
	} while (st.write_bytes == 0);
	vd_rail(nic)->down = 1;
	cr_assert_gt(kvt_poll(b), 0,
		     "the batch ended before %s was cut: slow the rails", nic);
}

uint64_t
rdma_port_bytes(const char *name)
{
	struct kvt_port_stats st;

	cr_assert_eq(kvt_port_stats((unsigned int)rdma_port_of(name), &st), 0);
	return st.write_bytes + st.read_bytes;
}
