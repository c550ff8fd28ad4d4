/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers for the Criterion tests that drive a kvt-testpeer: each asserts
 * what it needs, so a test reads as its steps.
 */
#ifndef KVT_TEST_ASSERT_H
#define KVT_TEST_ASSERT_H

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <rte_errno.h>

#include "kvt.h"
#include "test_common.h"

/* Open the peer's engine (5 s bound). */
static inline struct kvt_peer *
tc_open_peer(struct tc_peer *t)
{
	struct kvt_peer *p = kvt_peer_open(t->addr, 5000);

	cr_assert_not_null(p, "open %s: %s", t->addr, rte_strerror(rte_errno));
	return p;
}

/* One request, waited for (at most wait_us); @return its status. */
static inline int
tc_xfer1(struct kvt_peer *p, uint32_t op, void *local, uint64_t remote,
	 uint64_t len, const struct kvt_submit_opts *o, uint64_t wait_us)
{
	struct kvt_xfer x = { .op = op, .local = local, .remote = remote,
			      .len = len };
	struct kvt_batch *b = kvt_batch_alloc(1);
	int ret;

	cr_assert_not_null(b);
	ret = kvt_submit(b, p, &x, 1, o);
	if (ret >= 0) {
		cr_assert_eq(kvt_wait(b, wait_us), 0, "the request did not settle");
		ret = kvt_status(b, 0);
	}
	kvt_batch_free(b);
	return ret;
}

/* A peer command that must succeed; its answer's first number in base. */
static inline uint64_t
tc_peer_u64(struct tc_peer *t, int base, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline uint64_t
tc_peer_u64(struct tc_peer *t, int base, const char *fmt, ...)
{
	char cmd[256], buf[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	cr_assert_eq(tc_peer_cmd(t, buf, sizeof(buf), "%s", cmd), 0, "%s: %s",
		     cmd, buf);
	return strtoull(buf, NULL, base);
}

/*
 * The usual start of a case: this engine and a peer process, both with
 * opts; len bytes at src registered here; rlen bytes allocated at the
 * peer as its region 0, writable by this engine; the peer opened into
 * *p.  @return the peer's buffer.
 */
static inline uint64_t
tc_pair_start(struct tc_peer *t, const char *opts, void *src, uint64_t len,
	      uint64_t rlen, struct kvt_peer **p)
{
	uint64_t base;

	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_eq(tc_peer_start(t, opts), 0);
	cr_assert_not_null(kvt_mem_register(src, len, NULL, 0));
	base = tc_peer_u64(t, 0, "alloc 0 %" PRIu64 " w", rlen);
	*p = tc_open_peer(t);
	return base;
}

/*
 * Each size written from src + 3 to the peer's region 0 at base + 5, then
 * read back into src, checked by the peer's hash of its bytes each time.
 */
static inline void
tc_sizes_both_ways(struct tc_peer *t, struct kvt_peer *p, uint8_t *src,
		   uint64_t base, const uint64_t *sizes, unsigned int n,
		   uint64_t wait_us)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		tc_fill(src + 3, sizes[i], i + 1);
		cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src + 3, base + 5, sizes[i],
				      NULL, wait_us), 0);
		cr_assert_eq(tc_peer_u64(t, 16, "sum 0 5 %" PRIu64, sizes[i]),
			     tc_hash(src + 3, sizes[i]), "write %" PRIu64, sizes[i]);
		memset(src, 0, sizes[i]);
		cr_assert_eq(tc_xfer1(p, KVT_OP_READ, src, base + 5, sizes[i], NULL,
				      wait_us), 0);
		cr_assert_eq(tc_peer_u64(t, 16, "sum 0 5 %" PRIu64, sizes[i]),
			     tc_hash(src, sizes[i]), "read %" PRIu64, sizes[i]);
	}
}

/*
 * A write with a fence (slot 2 of the peer's fence table ft, room 31) and
 * the notification "done": the peer sees the fence, then the message.
 */
static inline void
tc_fence_then_note(struct tc_peer *t, struct kvt_peer *p, uint8_t *src,
		   uint64_t base, uint64_t len, uint64_t ft)
{
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE,
				     .notify = "done", .notify_len = 4 };
	char buf[256];

	cr_assert_eq(tc_peer_u64(t, 10, "arm 2 31"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 2, .room = 31 };
	cr_assert_eq(tc_xfer1(p, KVT_OP_WRITE, src, base, len, &o, 30000000), 0);
	cr_assert_eq(tc_peer_u64(t, 10, "fwait 2 5000000"), 0);
	cr_assert_eq(tc_peer_cmd(t, buf, sizeof(buf), "notes 10000000 1"), 0);
	cr_assert(strstr(buf, "done@") != NULL, "notification: '%s'", buf);
}

/*
 * Unregistered means closed: a thread writes 4 KiB blocks (each with new
 * bytes) into the peer's region id as fast as it can while the peer
 * unregisters it, once 100 have landed; the peer's bytes are hashed when
 * its unregister returned and 200 ms later, and must not have changed.
 * rounds regions in turn (ids 1 to rounds) of 1 MiB, each allocated with
 * the peer command alloc, a format taking the id and the size ("alloc %u
 * %u w").  The writes come from r's src and fill, which the caller sets
 * (src registered here).  @return the writes that landed (all before the
 * unregisters returned).
 */
struct tc_race {
	struct kvt_peer *p;
	uint8_t *src;
	/* New bytes for write k at src (host memory: NULL, a memset). */
	void (*fill)(uint8_t *src, size_t len, uint64_t k);
	uint64_t base;
	uint32_t stop;
	uint64_t writes;	/* submitted */
	uint64_t landed;	/* succeeded */
};

static inline void *
tc_race_writer(void *arg)
{
	struct tc_race *r = arg;
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .len = 4096 };
	struct kvt_batch *b = kvt_batch_alloc(1);
	uint64_t k = 0;

	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		k++;
		if (r->fill != NULL)
			r->fill(r->src, 4096, k);
		else
			memset(r->src, (int)(k & 0xff), 4096);
		x.local = r->src;
		x.remote = r->base + (k % 256) * 4096;
		if (kvt_submit(b, r->p, &x, 1, NULL) >= 0 &&
		    kvt_wait(b, 5000000) == 0 && kvt_status(b, 0) == 0)
			__atomic_fetch_add(&r->landed, 1, __ATOMIC_RELEASE);
		kvt_batch_reset(b);
		__atomic_store_n(&r->writes, k, __ATOMIC_RELEASE);
	}
	kvt_batch_free(b);
	return NULL;
}

/* Does the peer export a region at base, as this engine knows it? */
static inline int
tc_peer_has(struct kvt_peer *p, uint64_t base)
{
	struct kvt_region reg[32];
	int i, n = kvt_peer_regions(p, reg, 32);

	for (i = 0; i < n; i++)
		if (reg[i].base == base)
			return 1;
	return 0;
}

static inline uint64_t
tc_unregister_race(struct tc_peer *t, struct tc_race *rp, const char *alloc,
		   unsigned int rounds)
{
	struct tc_race r = *rp;
	uint64_t h1, h2, writes = 0, before;
	unsigned int id;
	pthread_t th;
	char cmd[128];

	for (id = 1; id <= rounds; id++) {
		snprintf(cmd, sizeof(cmd), alloc, id, 1u << 20);
		r.base = tc_peer_u64(t, 0, "%s", cmd);
		/* The region reaches this engine (a REGION_ADD). */
		while (!tc_peer_has(r.p, r.base))
			usleep(1000);
		r.stop = 0;
		r.writes = r.landed = 0;
		cr_assert_eq(pthread_create(&th, NULL, tc_race_writer, &r), 0);
		while (__atomic_load_n(&r.landed, __ATOMIC_ACQUIRE) < 100)
			usleep(100);
		before = __atomic_load_n(&r.writes, __ATOMIC_ACQUIRE);
		cr_assert_eq(tc_peer_u64(t, 10, "unreg %u", id), 0);
		h1 = tc_peer_u64(t, 16, "sum %u 0 %u", id, 1u << 20);
		usleep(200000);
		h2 = tc_peer_u64(t, 16, "sum %u 0 %u", id, 1u << 20);
		__atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
		pthread_join(th, NULL);
		writes += r.landed;
		cr_assert_eq(h1, h2, "round %u: a write landed after the unregister returned (%" PRIu64 " writes before it, %" PRIu64 " in all)",
			     id, before, r.writes);
	}
	return writes;
}

/* tc_unregister_race from a host buffer of this engine's. */
static inline uint64_t
tc_unregister_race_host(struct tc_peer *t, struct kvt_peer *p,
			const char *alloc, unsigned int rounds)
{
	struct tc_race r = { .p = p, .src = malloc(4096) };
	struct kvt_mem *m = kvt_mem_register(r.src, 4096, NULL, 0);
	uint64_t n;

	cr_assert_not_null(m);
	n = tc_unregister_race(t, &r, alloc, rounds);
	kvt_mem_unregister(m);
	free(r.src);
	return n;
}

#endif
