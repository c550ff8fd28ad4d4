/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Block lists (kvt_submit_blocks): blocks of mixed sizes over two local
 * and two remote regions, as a serving stack lists a KV cache of two
 * layer tensors, moved between processes over shm (one ordered port,
 * striped over two) and tcp with every byte checked; one status and one
 * slot per run; a fence and a notification after the list; a bad block
 * in the middle refused with nothing moved; overlap refused.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <rte_common.h>

#include "kvt.h"
#include "test_assert.h"
#include "test_common.h"

#define POOL (4 * MiB)
#define NBLK 200
#define WAIT_US (20ull * 1000 * 1000)

/* Two tensors a side, as pools of POOL bytes. */
struct two_pools {
	struct tc_peer t;
	struct kvt_peer *p;
	uint8_t *local[2];
	uint64_t remote[2];
	uint8_t *mirror[2];	/* what the remote pools must hold */
};

/* ft: where to put a fence table's handle (NULL: no table). */
static void
pools_open(struct two_pools *w, const char *opts, const char *perms,
	   uint64_t *ft)
{
	unsigned int i;

	cr_assert_geq(tc_engine_init(opts), 0);
	cr_assert_eq(tc_peer_start(&w->t, opts), 0);
	for (i = 0; i < 2; i++) {
		w->local[i] = kvt_mem_alloc(POOL, "cpu:0");
		cr_assert_not_null(kvt_mem_register(w->local[i], POOL, "cpu:0", 0));
		w->remote[i] = tc_peer_u64(&w->t, 0, "alloc %u %" PRIu64 " %s",
					   i, POOL, perms);
		w->mirror[i] = calloc(1, POOL);
	}
	if (ft != NULL)
		*ft = tc_peer_u64(&w->t, 0, "fence 2");
	w->p = tc_open_peer(&w->t);
}

static void
pools_close(struct two_pools *w)
{
	kvt_peer_close(w->p);
	tc_peer_stop(&w->t);
	kvt_fini();
	free(w->mirror[0]);
	free(w->mirror[1]);
}

static void
pools_check(struct two_pools *w, const char *what)
{
	unsigned int i;

	for (i = 0; i < 2; i++)
		cr_assert_eq(tc_peer_u64(&w->t, 16, "sum %u 0 %" PRIu64, i, POOL),
			     tc_hash(w->mirror[i], POOL), "remote pool %u after %s",
			     i, what);
}

/*
 * NBLK blocks of mixed sizes (1 byte to past a 16 KiB slice), in runs of
 * 1 to 7 blocks over one tensor, alternating between the two: block k
 * at distinct remote offsets of its tensor, scattered.  @return the runs.
 */
static unsigned int
make_list(const struct two_pools *w, uint64_t *loc, uint64_t *rem,
	  uint64_t *len, uint64_t seed)
{
	static const uint64_t sizes[] = { 4096, 1, 5000, 65536 + 7, 16384, 300 };
	unsigned int k, runs = 0, t = 0, left = 0;
	uint64_t slot = POOL / NBLK, off;

	srand48((long)seed);
	for (k = 0; k < NBLK; k++) {
		if (left == 0) {
			t = runs++ % 2;
			left = 1 + (unsigned int)(lrand48() % 7);
		}
		left--;
		len[k] = RTE_MIN(sizes[lrand48() % 6], slot);
		/* Each block has a slot of its own on both sides. */
		off = (uint64_t)((k * 37 + (unsigned int)seed) % NBLK) * slot;
		loc[k] = (uintptr_t)w->local[t] + (uint64_t)k * slot;
		rem[k] = w->remote[t] + off + (slot - len[k]) / 2;
	}
	return runs;
}

/* The tensor (0 or 1) and offset of remote address a. */
static unsigned int
remote_of(const struct two_pools *w, uint64_t a, uint64_t *off)
{
	unsigned int i = a >= w->remote[1] && a < w->remote[1] + POOL;

	*off = a - w->remote[i];
	return i;
}

static void
write_and_read_back(const char *opts)
{
	uint64_t loc[NBLK], rem[NBLK], len[NBLK], off;
	struct kvt_blocks bl = { .op = KVT_OP_WRITE, .n = NBLK, .local = loc,
				 .remote = rem, .len = len };
	struct kvt_batch *b;
	struct two_pools w;
	unsigned int k, i, runs, round;
	int first;

	pools_open(&w, opts, "rw", NULL);
	b = kvt_batch_alloc(NBLK);
	cr_assert_not_null(b);
	for (round = 0; round < 3; round++) {
		runs = make_list(&w, loc, rem, len, round + 1);
		tc_fill(w.local[0], POOL, 10 + round);
		tc_fill(w.local[1], POOL, 20 + round);
		bl.op = KVT_OP_WRITE;
		first = kvt_submit_blocks(b, w.p, &bl, NULL);
		cr_assert_eq(first, 0, "round %u: %d", round, first);
		/* One slot per run: the next submission starts after them. */
		cr_assert_eq(kvt_wait(b, WAIT_US), 0);
		cr_assert_eq(kvt_status(b, 0), 0);
		for (k = 0; k < NBLK; k++) {
			i = remote_of(&w, rem[k], &off);
			memcpy(w.mirror[i] + off, (void *)(uintptr_t)loc[k], len[k]);
		}
		pools_check(&w, "a list of writes");
		/* Back into zeroed local memory. */
		memset(w.local[0], 0, POOL);
		memset(w.local[1], 0, POOL);
		bl.op = KVT_OP_READ;
		first = kvt_submit_blocks(b, w.p, &bl, NULL);
		cr_assert_eq(first, (int)runs, "the write list took %u slots", runs);
		cr_assert_eq(kvt_wait(b, WAIT_US), 0);
		cr_assert_eq(kvt_status(b, (unsigned int)first), 0);
		for (k = 0; k < NBLK; k++) {
			i = remote_of(&w, rem[k], &off);
			cr_assert_eq(memcmp((void *)(uintptr_t)loc[k],
					    w.mirror[i] + off, len[k]), 0,
				     "round %u: block %u read back", round, k);
		}
		cr_assert_eq(kvt_batch_reset(b), 0);
	}
	kvt_batch_free(b);
	pools_close(&w);
}

Test(blocks, shm_one_ordered_port, .timeout = 120)
{
	write_and_read_back("--kvt-pmd shm --kvt-slice 16K");
}

Test(blocks, shm_striped, .timeout = 120)
{
	write_and_read_back("--kvt-pmd shm,ports=2 --kvt-slice 16K");
}

Test(blocks, tcp, .timeout = 120)
{
	write_and_read_back("--kvt-pmd tcp --kvt-nic lo --kvt-slice 16K");
}

Test(blocks, fence_and_note_after_the_list, .timeout = 120)
{
	uint64_t loc[NBLK], rem[NBLK], len[NBLK], off, ft;
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE,
				     .notify = "blocks", .notify_len = 6 };
	struct kvt_blocks bl = { .op = KVT_OP_WRITE, .n = NBLK, .local = loc,
				 .remote = rem, .len = len };
	struct kvt_batch *b;
	struct two_pools w;
	unsigned int k, i;
	char buf[256];

	pools_open(&w, "--kvt-pmd shm,ports=2", "w", &ft);
	b = kvt_batch_alloc(NBLK);
	make_list(&w, loc, rem, len, 9);
	tc_fill(w.local[0], POOL, 5);
	tc_fill(w.local[1], POOL, 6);
	for (k = 0; k < NBLK; k++) {
		i = remote_of(&w, rem[k], &off);
		memcpy(w.mirror[i] + off, (void *)(uintptr_t)loc[k], len[k]);
	}
	cr_assert_eq(tc_peer_u64(&w.t, 10, "arm 1 78"), 0);
	o.fence = (struct kvt_fence_ref){ .table = ft, .slot = 1, .room = 78 };
	cr_assert_eq(kvt_submit_blocks(b, w.p, &bl, &o), 0);
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(tc_peer_u64(&w.t, 10, "fwait 1 5000000"), 0);
	pools_check(&w, "a fenced list");
	cr_assert_eq(tc_peer_cmd(&w.t, buf, sizeof(buf), "notes 10000000 1"), 0);
	cr_assert(strstr(buf, "blocks@") != NULL, "notification: '%s'", buf);
	kvt_batch_free(b);
	pools_close(&w);
}

/* The list refused with err; the batch took nothing and the peer's
 * pools still hold what they held. */
static void
refused(struct two_pools *w, struct kvt_batch *b, const struct kvt_blocks *bl,
	int err, const char *what)
{
	cr_assert_eq(kvt_submit_blocks(b, w->p, bl, NULL), err, "%s", what);
	cr_assert_eq(kvt_poll(b), 0, "%s: nothing pending", what);
	pools_check(w, what);
}

Test(blocks, a_bad_block_refuses_the_list, .timeout = 120)
{
	uint64_t loc[NBLK], rem[NBLK], len[NBLK], keep, keep_len;
	struct kvt_blocks bl = { .op = KVT_OP_WRITE, .n = NBLK, .local = loc,
				 .remote = rem, .len = len }, q;
	struct kvt_batch *b, *small;
	uint8_t *stray = malloc(MiB);
	unsigned int mid = NBLK / 2;
	struct two_pools w;

	pools_open(&w, "--kvt-pmd shm,ports=2", "rw", NULL);
	b = kvt_batch_alloc(NBLK);
	small = kvt_batch_alloc(2);
	make_list(&w, loc, rem, len, 3);
	tc_fill(w.local[0], POOL, 1);
	tc_fill(w.local[1], POOL, 2);
	/* Unregistered local memory in the middle. */
	keep = loc[mid];
	loc[mid] = (uintptr_t)stray;
	refused(&w, b, &bl, -EFAULT, "an unregistered local block");
	/* A block that runs past its local region. */
	loc[mid] = (uintptr_t)w.local[1] + POOL - 1;
	keep_len = len[mid];
	len[mid] = 2;
	refused(&w, b, &bl, -EFAULT, "a block past its local region");
	loc[mid] = keep;
	len[mid] = keep_len;
	/* A remote block outside every region, then past its region. */
	keep = rem[mid];
	rem[mid] = 16;
	refused(&w, b, &bl, -ERANGE, "a remote block outside the regions");
	rem[mid] = w.remote[0] + POOL - 1;
	len[mid] = 2;
	refused(&w, b, &bl, -ERANGE, "a remote block past its region");
	rem[mid] = keep;
	len[mid] = keep_len;
	/* Zero length, an end that overflows. */
	keep = len[mid];
	len[mid] = 0;
	refused(&w, b, &bl, -EINVAL, "a block of length 0");
	len[mid] = UINT64_MAX - 8;
	refused(&w, b, &bl, -EINVAL, "a block whose end overflows");
	len[mid] = keep;
	/* Bad lists. */
	q = bl;
	q.n = 0;
	refused(&w, b, &q, -EINVAL, "no blocks");
	q = bl;
	q.len = NULL;
	refused(&w, b, &q, -EINVAL, "no length array");
	q = bl;
	q.op = 9;
	refused(&w, b, &q, -EINVAL, "a bad op");
	refused(&w, b, NULL, -EINVAL, "no list");
	/* More runs than the batch has slots. */
	refused(&w, small, &bl, -ENOSPC, "more runs than slots");
	/* Two blocks of the list write the same bytes. */
	keep = rem[mid];
	rem[mid] = rem[mid + 1];
	len[mid] = len[mid + 1];
	refused(&w, b, &bl, -EBUSY, "two blocks overlapping");
	/* The same list once valid moves everything, in slot 0: no refusal
	 * took a slot. */
	make_list(&w, loc, rem, len, 3);
	cr_assert_eq(kvt_submit_blocks(b, w.p, &bl, NULL), 0);
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	kvt_batch_free(b);
	kvt_batch_free(small);
	free(stray);
	pools_close(&w);
}

Test(blocks, overlap_with_a_write_in_flight, .timeout = 120)
{
	struct kvt_submit_opts allow = { .flags = KVT_SUBMIT_ALLOW_OVERLAP };
	uint64_t loc[NBLK], rem[NBLK], len[NBLK], one_l, one_r, one_n = 4096;
	struct kvt_blocks bl = { .op = KVT_OP_WRITE, .n = NBLK, .local = loc,
				 .remote = rem, .len = len };
	struct kvt_batch *b, *b2;
	struct kvt_xfer x;
	struct two_pools w;

	pools_open(&w, "--kvt-pmd shm", "rw", NULL);
	b = kvt_batch_alloc(NBLK);
	b2 = kvt_batch_alloc(NBLK);
	make_list(&w, loc, rem, len, 4);
	/* A plain write to the bytes of block 50, kept in flight (its claim
	 * stays until a poll finishes it). */
	one_l = (uintptr_t)w.local[0] + POOL - one_n;
	one_r = rem[50];
	x = (struct kvt_xfer){ .op = KVT_OP_WRITE, .local = (void *)(uintptr_t)one_l,
			       .remote = one_r, .len = one_n };
	cr_assert_eq(kvt_submit(b2, w.p, &x, 1, NULL), 0);
	cr_assert_eq(kvt_submit_blocks(b, w.p, &bl, NULL), -EBUSY);
	/* And the other way: a list in flight refuses the write. */
	cr_assert_eq(kvt_wait(b2, WAIT_US), 0);
	cr_assert_eq(kvt_batch_reset(b2), 0);
	cr_assert_eq(kvt_submit_blocks(b, w.p, &bl, NULL), 0);
	cr_assert_eq(kvt_submit(b2, w.p, &x, 1, NULL), -EBUSY);
	cr_assert_eq(kvt_submit(b2, w.p, &x, 1, &allow), 0);
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	cr_assert_eq(kvt_wait(b2, WAIT_US), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	cr_assert_eq(kvt_status(b2, 0), 0);
	cr_assert_eq(kvt_batch_reset(b), 0);
	/* Tensor 0, tensor 1, tensor 0 again: the two runs of tensor 0
	 * overlap each other (found across the run between them), then do
	 * not. */
	loc[0] = (uintptr_t)w.local[0];
	loc[1] = (uintptr_t)w.local[1];
	loc[2] = (uintptr_t)w.local[0] + 8192;
	rem[0] = w.remote[0] + 4096;
	rem[1] = w.remote[1];
	rem[2] = w.remote[0];
	len[0] = len[1] = len[2] = 4097;
	bl.n = 3;
	cr_assert_eq(kvt_submit_blocks(b, w.p, &bl, NULL), -EBUSY);
	len[2] = 4096;
	cr_assert_eq(kvt_submit_blocks(b, w.p, &bl, NULL), 0);
	cr_assert_eq(kvt_wait(b, WAIT_US), 0);
	cr_assert_eq(kvt_status(b, 0), 0);
	kvt_batch_free(b);
	kvt_batch_free(b2);
	pools_close(&w);
}
