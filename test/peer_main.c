/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt-testpeer: an engine in its own process, driven line by line on
 * stdin by the tests, answering "ok ..." or "err ..." on stdout.
 *
 * Started as: kvt-testpeer [EAL args] -- [--kvt-* options]
 * It first prints "ready <addr> <pid>".  Commands:
 *   alloc ID BYTES PERMS     kvt_mem_alloc + register (PERMS: rw, r, w, -)
 *   calloc ID BYTES PERMS DEV   the same on cuda:DEV (CUDA builds)
 *   malloc ID BYTES PERMS    plain malloc + register
 *   fill ID OFF LEN SEED     write the test pattern
 *   sum ID OFF LEN           xxh64 of the bytes
 *   fence NSLOTS [LOC]       create the fence table -> its handle
 *   fwaitstream SLOT US      wait on a CUDA stream (kvt_fence_wait_stream)
 *   arm SLOT ROOM            arm a slot
 *   fpoll SLOT               kvt_fence_poll result
 *   fwait SLOT US            kvt_fence_wait result
 *   watch N ID US            take N notifications "OFF LEN HASH" and check
 *                            each against region ID when it arrives;
 *                            -> number of mismatches
 *   notes US N               take the notifications that arrive until N
 *                            have and 200 ms more (a late copy shows), or
 *                            for US at most -> texts
 *   open ADDR                open a peer (one at a time)
 *   write ID OFF RADDR LEN   write local region ID to the open peer, wait
 *   stream OP ID OFF RADDR LEN N   N requests of LEN (OP read or write)
 *                            one after another until one fails
 *                            -> its status and the number that succeeded
 *   burst ID OFF RADDR LEN N ROUNDS   ROUNDS times: N submissions of one
 *                            write each, all in flight at once, each with
 *                            the notification "n<k>" (k counts from 0)
 *                            -> the first error and how many failed
 *   forge I BASE             believe the open peer's region I starts at BASE
 *                            (hex): only the NIC can refuse what follows
 *   unreg ID                 kvt_mem_unregister result
 *   unmap ID                 munmap region ID's memory, still registered (an
 *                            application's bug a peer must not turn into
 *                            a crash here)
 *   stall PORT MS            hold port PORT's lcore for MS milliseconds (a
 *                            data thread starved of cpu; the control
 *                            thread and the kernel go on) -> its result
 *   scan ID NB BS US         receiver of rounds (rounds.c): scan region ID
 *                            as NB blocks of BS bytes (fence slot b for
 *                            block b) for US microseconds, or until the
 *                            next command arrives -> its counts
 *   mark                     nothing (ends a scan)
 *   rounds ID NB BS RADDR FENCE US   sender of rounds: rewrite the open
 *                            peer's NB blocks at RADDR (hex) from region
 *                            ID, fenced in table FENCE (hex), for US
 *                            microseconds -> its counts
 *   quit
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <unistd.h>
#include <sys/mman.h>

#include <rte_errno.h>

#include "kvt.h"
#include "kvt_private.h"
#include "test_common.h"
#include "rounds.h"
#ifdef KVT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "test_cuda.h"
#endif

#define MAX_IDS 16

static struct {
	uint8_t *p;
	size_t len;
	struct kvt_mem *m;
	int alloced;
	int dev;		/* CUDA device, or -1 for host memory */
} mem[MAX_IDS];
static struct kvt_fence_table *ft;
static struct kvt_peer *peer;

static uint32_t
perms(const char *s)
{
	uint32_t f = 0;

	if (strchr(s, 'r') != NULL)
		f |= KVT_MEM_REMOTE_READ;
	if (strchr(s, 'w') != NULL)
		f |= KVT_MEM_REMOTE_WRITE;
	return f;
}

static int
id_ok(unsigned int id, size_t off, size_t len)
{
	return id < MAX_IDS && mem[id].p != NULL && off <= mem[id].len &&
		len <= mem[id].len - off;
}

static void
cmd_alloc(unsigned int id, size_t len, const char *pr, int use_malloc, int dev)
{
	char loc[16] = "cpu:0";
	uint8_t *p;

	if (id >= MAX_IDS || mem[id].p != NULL) {
		printf("err id\n");
		return;
	}
	if (dev >= 0)
		snprintf(loc, sizeof(loc), "cuda:%d", dev);
	p = use_malloc ? aligned_alloc(4096, (len + 4095) & ~(size_t)4095) :
		kvt_mem_alloc(len, loc);
	if (p == NULL) {
		printf("err alloc %d\n", rte_errno);
		return;
	}
	mem[id].dev = dev;
	if (dev < 0)
		memset(p, 0, len);
	mem[id].m = kvt_mem_register(p, len, loc, perms(pr));
	if (mem[id].m == NULL) {
		printf("err register %d\n", rte_errno);
		return;
	}
	mem[id].p = p;
	mem[id].len = len;
	mem[id].alloced = !use_malloc;
	printf("ok %#" PRIxPTR "\n", (uintptr_t)p);
}

static uint64_t
region_hash(unsigned int id, size_t off, size_t len)
{
#ifdef KVT_HAVE_CUDA
	if (mem[id].dev >= 0)
		return tc_cuda_hash(mem[id].p + off, len);
#endif
	return tc_hash(mem[id].p + off, len);
}

static void
region_fill(unsigned int id, size_t off, size_t len, uint64_t seed)
{
#ifdef KVT_HAVE_CUDA
	if (mem[id].dev >= 0) {
		tc_cuda_fill(mem[id].p + off, len, seed);
		return;
	}
#endif
	tc_fill(mem[id].p + off, len, seed);
}

static void
cmd_wait_stream(uint32_t slot, uint64_t us)
{
#ifdef KVT_HAVE_CUDA
	uint32_t *st = NULL, v = 0;
	cudaStream_t s;
	int ret;

	cudaStreamCreate(&s);
	cudaMalloc((void **)&st, sizeof(*st));
	cudaMemset(st, 0, sizeof(*st));
	ret = kvt_fence_wait_stream(ft, slot, s, us, st);
	cudaStreamSynchronize(s);
	cudaMemcpy(&v, st, sizeof(v), cudaMemcpyDeviceToHost);
	cudaFree(st);
	cudaStreamDestroy(s);
	printf("ok %d %u\n", ret, v);
#else
	(void)slot;
	(void)us;
	printf("err no CUDA\n");
#endif
}

/* Wait for n notifications "OFF LEN HASH", checking each on arrival. */
static void
cmd_watch(unsigned int n, unsigned int id, uint64_t us)
{
	struct kvt_notify_msg msg;
	uint64_t deadline = tc_now_us() + us, hash;
	unsigned long long off, len;
	unsigned int got = 0, bad = 0;
	char text[KVT_NOTIFY_MAX + 1];

	while (got < n && tc_now_us() < deadline) {
		if (kvt_notify_poll(&msg, 1) != 1)
			continue;
		got++;
		memcpy(text, msg.data, msg.len);
		text[msg.len] = '\0';
		if (sscanf(text, "%llu %llu %" SCNx64, &off, &len, &hash) != 3 ||
		    !id_ok(id, off, len) ||
		    region_hash(id, off, len) != hash)
			bad++;
	}
	printf("ok %u %u\n", got, bad);
}

static void
cmd_notes(uint64_t us, uint64_t want)
{
	struct kvt_notify_msg msg;
	uint64_t deadline = tc_now_us() + us, got = 0, late;

	printf("ok");
	while (tc_now_us() < deadline) {
		if (kvt_notify_poll(&msg, 1) != 1)
			continue;
		printf(" %.*s@%s", (int)msg.len, msg.data, msg.peer);
		late = tc_now_us() + 200000;
		if (++got == want && late < deadline)
			deadline = late;
	}
	printf("\n");
}

static void
cmd_write(unsigned int id, size_t off, uint64_t raddr, size_t len)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .remote = raddr, .len = len };
	struct kvt_batch *b;
	int ret;

	if (peer == NULL || !id_ok(id, off, len)) {
		printf("err args\n");
		return;
	}
	x.local = mem[id].p + off;
	b = kvt_batch_alloc(1);
	ret = kvt_submit(b, peer, &x, 1, NULL);
	if (ret >= 0)
		ret = kvt_wait(b, 10 * 1000 * 1000);
	if (ret == 0)
		ret = kvt_status(b, 0);
	kvt_batch_free(b);
	printf("ok %d\n", ret);
}

static void
cmd_stream(const char *op, unsigned int id, size_t off, uint64_t raddr,
	   size_t len, unsigned long long n)
{
	struct kvt_xfer x = { .remote = raddr, .len = len };
	struct kvt_batch *b;
	unsigned long long i;
	int ret = 0;

	if (peer == NULL || !id_ok(id, off, len)) {
		printf("err args\n");
		return;
	}
	x.op = strcmp(op, "read") == 0 ? KVT_OP_READ : KVT_OP_WRITE;
	x.local = mem[id].p + off;
	b = kvt_batch_alloc(1);
	for (i = 0; i < n && ret == 0; i++) {
		ret = kvt_submit(b, peer, &x, 1, NULL);
		if (ret >= 0)
			ret = kvt_wait(b, 10 * 1000 * 1000);
		if (ret == 0)
			ret = kvt_status(b, 0);
		if (kvt_batch_reset(b) < 0 && ret == 0)
			ret = -EBUSY;
	}
	kvt_batch_free(b);
	printf("ok %d %llu\n", ret, ret == 0 ? i : i - 1);
}

static void
cmd_burst(unsigned int id, size_t off, uint64_t raddr, size_t len,
	  unsigned int n, unsigned int rounds)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .remote = raddr, .len = len };
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	unsigned int r, i, k = 0, failed = 0;
	struct kvt_batch *b;
	char note[32];
	int ret, first = 0;

	if (peer == NULL || !id_ok(id, off, len) || n == 0) {
		printf("err args\n");
		return;
	}
	x.local = mem[id].p + off;
	b = kvt_batch_alloc(n);
	for (r = 0; r < rounds; r++) {
		for (i = 0; i < n; i++, k++) {
			o.notify_len = (uint32_t)snprintf(note, sizeof(note), "n%u", k);
			o.notify = note;
			ret = kvt_submit(b, peer, &x, 1, &o);
			if (ret < 0 && first == 0)
				first = ret;
		}
		ret = kvt_wait(b, 10 * 1000 * 1000);
		if (ret < 0 && first == 0)
			first = ret;
		for (i = 0; i < n; i++) {
			ret = kvt_status(b, i);
			failed += ret != 0;
			if (ret != 0 && first == 0)
				first = ret;
		}
		kvt_batch_reset(b);
	}
	kvt_batch_free(b);
	printf("ok %d %u\n", first, failed);
}

/*
 * Test only: believe that region i of the open peer starts at base, so
 * that a transfer there passes kvt's own range check and only the NIC
 * (its key checks) stands between the request and the memory.
 */
struct nth {
	unsigned int i;
	struct kvt_rimp *ri;
};

static int
nth_region(void *ri, void *arg)
{
	struct nth *n = arg;

	if (n->i-- != 0)
		return 0;
	n->ri = ri;
	return 1;
}

static void
cmd_forge(unsigned int i, uint64_t base)
{
	struct nth n = { i, NULL };
	void *v;
	int ret;

	if (peer == NULL) {
		printf("err no peer\n");
		return;
	}
	kvt_rangemap_walk(&peer->regions, nth_region, &n);
	if (n.ri == NULL) {
		printf("err index\n");
		return;
	}
	/* Re-keyed in the peer's map, as if the peer had announced it at
	 * base (the control thread does not change the map meanwhile: the
	 * test's peer registers nothing). */
	kvt_rangemap_remove(&peer->regions, n.ri->rm.base, &v);
	n.ri->rm.base = base;
	ret = kvt_rangemap_insert(&peer->regions, base, n.ri->rm.len, n.ri);
	if (ret < 0)
		printf("err %d\n", ret);
	else
		printf("ok\n");
}

/* Is a command waiting on stdin? */
static int
command_waiting(void)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };

	return poll(&pfd, 1, 0) > 0;
}

static void
cmd_scan(unsigned int id, uint32_t nb, uint64_t bs, uint64_t us)
{
	char out[256];

	if (!id_ok(id, 0, nb * bs) || mem[id].dev >= 0 ||
	    tc_rounds_scan(mem[id].p, nb, bs, ft, us, command_waiting, out,
			   sizeof(out)) < 0)
		printf("err args\n");
	else
		printf("ok %s\n", out);
}

static void
cmd_rounds(unsigned int id, uint32_t nb, uint64_t bs, uint64_t raddr,
	   uint64_t fence, uint64_t us)
{
	char out[256];

	if (peer == NULL || !id_ok(id, 0, nb * bs) || mem[id].dev >= 0 ||
	    tc_rounds_send(peer, mem[id].p, nb, bs, raddr, fence, us, out,
			   sizeof(out)) < 0)
		printf("err args\n");
	else
		printf("ok %s\n", out);
}

static int
stall_fn(struct kvt_port *port, void *arg)
{
	RTE_SET_USED(port);
	usleep(*(unsigned int *)arg * 1000u);
	return 0;
}

static void
cmd_stall(unsigned int port, unsigned int ms)
{
	if (port >= kvt_port_count()) {
		printf("err port\n");
		return;
	}
	printf("ok %d\n", kvt_port_call(kvt_port_get(port), stall_fn, &ms,
					ms + 10000));
}

static int
dispatch(char *line)
{
	char a[64], b[64];
	unsigned long long x, y, z, w, v;
	unsigned int id;

	if (sscanf(line, "calloc %u %llu %63s %llu", &id, &x, a, &w) == 4) {
		cmd_alloc(id, x, a, 0, (int)w);
	} else if (sscanf(line, "alloc %u %llu %63s", &id, &x, a) == 3) {
		cmd_alloc(id, x, a, 0, -1);
	} else if (sscanf(line, "malloc %u %llu %63s", &id, &x, a) == 3) {
		cmd_alloc(id, x, a, 1, -1);
	} else if (sscanf(line, "fill %u %llu %llu %llu", &id, &x, &y, &z) == 4) {
		if (!id_ok(id, x, y)) {
			printf("err range\n");
			return 0;
		}
		region_fill(id, x, y, z);
		printf("ok\n");
	} else if (sscanf(line, "sum %u %llu %llu", &id, &x, &y) == 3) {
		if (!id_ok(id, x, y))
			printf("err range\n");
		else
			printf("ok %" PRIx64 "\n", region_hash(id, x, y));
	} else if (sscanf(line, "fwaitstream %llu %llu", &x, &y) == 2) {
		cmd_wait_stream((uint32_t)x, y);
	} else if (sscanf(line, "fence %llu", &x) == 1) {
		b[0] = '\0';
		sscanf(line, "fence %*u %63s", b);
		ft = kvt_fence_table_create((uint32_t)x, b[0] ? b : NULL);
		if (ft == NULL)
			printf("err %d\n", rte_errno);
		else
			printf("ok %#" PRIx64 "\n", kvt_fence_table_handle(ft));
	} else if (sscanf(line, "arm %llu %llu", &x, &y) == 2) {
		printf("ok %d\n", kvt_fence_arm(ft, (uint32_t)x, y));
	} else if (sscanf(line, "fpoll %llu", &x) == 1) {
		printf("ok %d\n", kvt_fence_poll(ft, (uint32_t)x));
	} else if (sscanf(line, "fwait %llu %llu", &x, &y) == 2) {
		printf("ok %d\n", kvt_fence_wait(ft, (uint32_t)x, y));
	} else if (sscanf(line, "watch %llu %u %llu", &x, &id, &y) == 3) {
		cmd_watch((unsigned int)x, id, y);
	} else if (sscanf(line, "notes %llu %llu", &x, &y) == 2) {
		cmd_notes(x, y);
	} else if (sscanf(line, "stream %63s %u %llu %llx %llu %llu", a, &id, &x,
			  &w, &y, &z) == 6) {
		cmd_stream(a, id, x, w, y, z);
	} else if (sscanf(line, "burst %u %llu %llx %llu %llu %llu", &id, &x, &w,
			  &y, &z, &v) == 6) {
		cmd_burst(id, x, w, y, (unsigned int)z, (unsigned int)v);
	} else if (sscanf(line, "open %63s", b) == 1) {
		if (peer != NULL)
			kvt_peer_close(peer);
		peer = kvt_peer_open(b, 5000);
		printf(peer != NULL ? "ok\n" : "err %d\n", rte_errno);
	} else if (sscanf(line, "write %u %llu %llx %llu", &id, &x, &w, &y) == 4) {
		cmd_write(id, x, w, y);
	} else if (sscanf(line, "forge %u %llx", &id, &w) == 2) {
		cmd_forge(id, w);
	} else if (sscanf(line, "scan %u %llu %llu %llu", &id, &x, &y, &z) == 4) {
		cmd_scan(id, (uint32_t)x, y, z);
	} else if (sscanf(line, "rounds %u %llu %llu %llx %llx %llu", &id, &x, &y,
			  &w, &v, &z) == 6) {
		cmd_rounds(id, (uint32_t)x, y, w, v, z);
	} else if (sscanf(line, "unmap %u", &id) == 1 && id < MAX_IDS &&
		   mem[id].p != NULL && mem[id].dev < 0) {
		printf("ok %d\n", munmap(mem[id].p, (mem[id].len + 4095) & ~(size_t)4095));
	} else if (sscanf(line, "stall %u %llu", &id, &x) == 2) {
		cmd_stall(id, (unsigned int)x);
	} else if (sscanf(line, "unreg %u", &id) == 1 && id < MAX_IDS) {
		printf("ok %d\n", kvt_mem_unregister(mem[id].m));
	} else if (strncmp(line, "mark", 4) == 0) {
		printf("ok\n");
	} else if (strncmp(line, "quit", 4) == 0) {
		return 1;
	} else {
		printf("err unknown command\n");
	}
	return 0;
}

int
main(int argc, char **argv)
{
	char line[512], addr[64];
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = kvt_init(argc, argv);
	if (ret < 0) {
		printf("err init %d\n", ret);
		return 1;
	}
	kvt_listen_addr(addr, sizeof(addr));
	printf("ready %s %d\n", addr, (int)getpid());
	while (fgets(line, sizeof(line), stdin) != NULL)
		if (dispatch(line))
			break;
	if (peer != NULL)
		kvt_peer_close(peer);
	kvt_fini();
	return 0;
}
