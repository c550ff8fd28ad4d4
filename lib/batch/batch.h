/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Batches and submissions.  Each file owns a part and calls only down
 * (the route of one submission, top to bottom):
 *   submit.c    validation, overlap claims, the opening and committing
 *               of a submission (the application thread, kvt_submit());
 *   submit_list.c  page and block lists (kvt_submit_pages(),
 *               kvt_submit_blocks()), over submit.c's steps;
 *   batch.c     the batch: poll, wait, status, its life cycle, and the
 *               regions' in-flight counts its submissions hold;
 *   arena.c     the batch's arena, where list copies live until reset;
 *   queue.c     the pump: tails and slices handed to the lcores, the
 *               stash (whoever drives the batch: submit, poll, wait,
 *               reset, free);
 *   cut.c       the slicer both sides call down into: the pump for
 *               striped submissions, the lcore for ORDERED ones;
 *   complete.c  settling what the ports handed back, retries and tails
 *               (the lcores).
 *
 * A submission is either
 *  - ORDERED: every slice goes to one port whose PMD executes a
 *    connection's descriptors in order.  The submitter queues one
 *    KVT_DESC_CUT descriptor for the data, and the port's lcore cuts the
 *    slices from the request array (kvt_cut(), cut.c); the fence, the
 *    notification and a DONE marker are queued right behind it, so the
 *    channel itself orders data before fence (same CUDA stream, same
 *    shm lcore).  Completion is the DONE word the port writes.
 *  - WHOLE: one port takes the whole submission as one descriptor and
 *    orders data, fence, notification and done itself (the GPU path:
 *    one kernel for all pages, then the fence on the same stream).
 *  - STRIPED: slices spread over several ports.  Each slice's completion
 *    adds its bytes to its request's settled word (acq_rel), and the
 *    lcore whose slice settles the last request runs the tail: fence,
 *    then notification, then the submission's done word.  The acq_rel
 *    chain makes every other lcore's data writes happen-before the fence.
 *
 * Completion words live in batch memory: lcores store them with release
 * semantics, kvt_poll() reads them with acquire loads.  Submit and poll
 * never lock and never make a system call.
 *
 * kvt_poll() costs what completed since its last call, not what is
 * pending: it finishes the settled prefix of the submissions in order,
 * and an lcore that settles a submission pushes it on the batch's settled
 * stack (before its done word: once the application has seen every done
 * word, no push is left to come), so one that settles behind a pending
 * one is found there.  The count it returns is kept as submissions are
 * added and finished; the lcores count the requests of striped
 * submissions without tails as each settles.  A whole submission whose
 * done word the device stores (nvlink) is found in order only.
 */
#ifndef KVT_BATCH_H
#define KVT_BATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include <rte_branch_prediction.h>

#include "kvt_private.h"

#define KVT_BATCH_MAGIC 0x6b766274u
#define KVT_BATCH_MAX (1u << 24)
#define SUB_CHUNK 64
#define KVT_MAX_TRIES 3
/* Descriptor flags beside KVT_DF_EMBEDDED: how often a slice moved. */
#define DF_TRIES_SHIFT 4

enum { SUB_STRIPED, SUB_ORDERED, SUB_WHOLE };
#define SUB_F_FENCE 0x1
#define SUB_F_NOTIFY 0x2
/* A block list: its requests settle together, with one status. */
#define SUB_F_LIST 0x4

enum { TAIL_FENCE, TAIL_NOTIFY, TAIL_DONE };

struct kvt_req {
	struct kvt_xreq x;	/* first: what whole-submission ports read */
	uint64_t settled;	/* bytes done or failed; lcores add */
	struct kvt_sub *s;
	int32_t err;		/* first error; lcores CAS */
	uint32_t mask;		/* ports that may carry it */
	uint32_t fallback;	/* ports for when those are down */
};

/* The request's regions: x.lm and x.rm are the first members of the
 * engine's records for them (one pointer each, not two: a submission of
 * many small requests writes every byte of this array). */
static inline struct kvt_mem *
req_mem(const struct kvt_req *r)
{
	return (struct kvt_mem *)(uintptr_t)r->x.lm;
}

static inline struct kvt_rimp *
req_rimp(const struct kvt_req *r)
{
	return (struct kvt_rimp *)(uintptr_t)r->x.rm;
}

struct kvt_sub {
	struct kvt_desc tail[3];	/* fence, notify, done */
	struct kvt_desc whole;	/* SUB_WHOLE: the one descriptor */
	/* Written by the submitter, read by the lcores: two lines. */
	struct kvt_batch *b;
	struct kvt_peer *peer;
	uint32_t first;
	uint32_t n;
	uint8_t mode;
	uint8_t flags;
	uint8_t finished;	/* references released */
	uint8_t prio;		/* enum kvt_prio */
	uint16_t port;		/* ORDERED: the port */
	uint8_t mixed;		/* requests use more than one region pair */
	uint8_t tails_queued;
	uint32_t all_mask;	/* ports any request may use */
	uint64_t wbytes;	/* bytes written / read, for peer stats */
	uint64_t rbytes;
	struct kvt_mem *m1;	/* otherwise, the one pair */
	struct kvt_rimp *ri1;
	uint32_t claim_first;
	uint32_t nclaims;
	struct kvt_rimp *fence_ri;
	uint32_t fence_mask;
	uint32_t notify_len;
	const struct kvt_xpages *pages;	/* a page list (one request) */
	const struct kvt_xblocks *blocks;	/* a block list */
	/* Slices not queued yet (queue.c and cut.c move it; an ORDERED
	 * one's lcore cuts from a copy). */
	struct kvt_cursor cur;
	/* Written by the lcores as it settles (complete.c; set at submit):
	 * a line of its own, so a submit takes one line back, and a poll of the
	 * done word finds it moved only when something settled. */
	uint64_t done __rte_cache_aligned;	/* 1 once everything settled */
	struct kvt_sub *settled_next;	/* on the batch's settled stack */
	int32_t err;		/* first error of any request or tail */
	uint32_t pending;	/* STRIPED: requests not settled */
	uint8_t notify_pending;	/* lcore: the notification waits for room */
	/* Written by the submitter when used. */
	struct kvt_subinfo info __rte_cache_aligned;	/* SUB_WHOLE */
	uint8_t payload[KVT_NOTIFY_MAX];
} __rte_cache_aligned;

struct kvt_batch {
	uint32_t magic;
	uint32_t cap;
	/* submit.c, submit_list.c: the requests, their write ranges and
	 * overlap claims, and the submissions' records. */
	uint32_t used;		/* requests */
	struct kvt_req *req;
	struct kvt_range *ranges;
	struct kvt_range *ranges_tmp;	/* scratch for sorting */
	struct kvt_claim *claims;
	uint32_t nclaims;
	struct kvt_sub **chunk;
	uint32_t nchunks;
	uint32_t nsubs;
	/* batch.c: finishing (reap) and the counts kvt_poll returns. */
	uint32_t reap;		/* submissions [0, reap) finished */
	uint32_t nfinished;	/* submissions finished, in any order */
	uint64_t open_reqs;	/* requests of submissions not finished */
	uint64_t reaped_reqs;	/* of those, counted in settled_reqs */
	struct kvt_sub *unsettled;	/* popped before their done word */
	uint64_t looked_at;	/* submissions reap examined (test hook) */
	/* queue.c: the pump, and the stash it sends first. */
	uint32_t pump;		/* submissions [0, pump) fully queued */
	struct kvt_desc *stash;	/* refused by a full ring, FIFO */
	struct kvt_desc *stash_tail;
	uint64_t seq;		/* cut.c: striping's round-robin seed */
	int claimed;		/* claims published since the last sync */
	/* WHOLE submissions not finished: a device may store their done
	 * word, and that wakes no sleeping kvt_wait(). */
	uint32_t whole_open;
	int zombie;		/* freed by the application */
	/* arena.c: list copies, until reset. */
	struct kvt_arena *arena;
	struct kvt_arena *arena_cur;
	struct kvt_batch *next;
	/* Written by the lcores, read by the application: a line apart. */
	struct kvt_sub *settled __rte_cache_aligned;	/* stack, by lcores */
	uint64_t settled_reqs;	/* striped, no tails: requests settled */
	uint32_t sleeper;	/* futex word: 1 while a kvt_wait*() sleeps */
};

/*
 * Memory that list submissions keep until the batch is reset (arena.c):
 * index and block copies, write ranges.  Chunks never move (lcores and
 * other submitters read them) and are kept across resets.
 */
struct kvt_arena {
	struct kvt_arena *next;
	size_t cap;
	size_t used;
	uint8_t data[];
};

#define ARENA_MIN (1u << 20)

#define SUB_CHUNK_BYTES RTE_ALIGN_CEIL(SUB_CHUNK * sizeof(struct kvt_sub), 4096)


static inline struct kvt_sub *
sub_at(const struct kvt_batch *b, uint32_t i)
{
	return &b->chunk[i / SUB_CHUNK][i % SUB_CHUNK];
}

static inline int
batch_ok(const struct kvt_batch *b)
{
	return b != NULL && b->magic == KVT_BATCH_MAGIC && !b->zombie;
}

static inline int
lcores_up(void)
{
	return kvt_eng != NULL &&
		__atomic_load_n(&kvt_eng->lcores_running, __ATOMIC_ACQUIRE);
}


static inline void
set_err(int32_t *w, int err)
{
	int32_t zero = 0;

	__atomic_compare_exchange_n(w, &zero, err, false, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
}

static inline uint32_t
live_conns(const struct kvt_peer *p)
{
	uint32_t m = 0;
	unsigned int i;

	for (i = 0; i < KVT_MAX_PORTS; i++)
		if (p->conn[i] != NULL &&
		    !__atomic_load_n(&p->conn[i]->dead, __ATOMIC_ACQUIRE))
			m |= 1u << i;
	return m & ~__atomic_load_n(&p->down_mask, __ATOMIC_ACQUIRE);
}

/* The ports a request's next slice may take: its preferred ones that are
 * up, else its fallback ones that are up, else (all down) the preferred
 * ones, where the slice fails and is retried or reported. */
static inline uint32_t
usable_ports(const struct kvt_req *r, const struct kvt_peer *p)
{
	uint32_t down = __atomic_load_n(&p->down_mask, __ATOMIC_ACQUIRE);

	if (likely((r->mask & down) == 0))
		return r->mask;
	if ((r->mask & ~down) != 0)
		return r->mask & ~down;
	if ((r->fallback & ~down) != 0)
		return r->fallback & ~down;
	return r->mask;
}


/* Wake the kvt_wait*() asleep on b (a system call; the lcores call it,
 * the waiter's side is in batch.c). */
static inline void
kvt_batch_wake(struct kvt_batch *b)
{
	if (__atomic_exchange_n(&b->sleeper, 0, __ATOMIC_SEQ_CST) != 0)
		syscall(SYS_futex, &b->sleeper, FUTEX_WAKE_PRIVATE, 1,
			NULL, NULL, 0);
}

/*
 * Everything of s, tails too, settled: on the batch's settled stack, a
 * waiter asleep on the batch woken, then its done word (the last touch:
 * s and its batch may be reused after it).  The push and the look at
 * the sleeper word are sequentially consistent, as kvt_wait()'s store
 * to it and look at the stack: one of the two sees the other.
 */
static inline void
sub_publish(struct kvt_sub *s)
{
	struct kvt_batch *b = s->b;
	struct kvt_sub *top = __atomic_load_n(&b->settled, __ATOMIC_RELAXED);

	do {
		s->settled_next = top;
	} while (!__atomic_compare_exchange_n(&b->settled, &top, s, true,
					      __ATOMIC_SEQ_CST,
					      __ATOMIC_RELAXED));
	if (unlikely(__atomic_load_n(&b->sleeper, __ATOMIC_SEQ_CST) != 0))
		kvt_batch_wake(b);
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
}

/* cut.c, the pump: cut up to max slices of striped submission s at its
 * own cursor (s->cur), ports chosen, into d (descriptors from the
 * engine's pool); @return how many, 0 when none are left or the pool is
 * empty. */
unsigned int kvt_cut_next(struct kvt_sub *s, struct kvt_desc **d,
			  unsigned int max);
/* queue.c: queue what the batch's submissions still have to send. */
void kvt_batch_pump(struct kvt_batch *b);
/* queue.c: how long kvt_batch_pump() may wait without a port running
 * dry, in us (UINT64_MAX: everything is queued; 0: not at all). */
uint64_t kvt_batch_pump_slack_us(const struct kvt_batch *b);
/* queue.c: a submission's tail descriptors (or its whole descriptor). */
void kvt_sub_prepare(struct kvt_sub *s, const struct kvt_submit_opts *o);
/* complete.c: STRIPED: every request settled; the tail goes out from
 * port here (KVT_MAX_PORTS: any). */
void kvt_sub_tails_start(struct kvt_sub *s, unsigned int here);
/* batch.c: add delta to the in-flight counts of what s uses (submit.c
 * takes them, the batch gives them back as it finishes s). */
void kvt_sub_refs_add(struct kvt_batch *b, struct kvt_sub *s, int64_t delta);
/* Submission steps the list submissions share with kvt_submit()
 * (submit.c): open a submission of nslots requests; check the options;
 * find the regions of a request; record a request; choose the mode;
 * claim write ranges; take references and queue (or undo on ret < 0). */
int kvt_sub_open(struct kvt_batch *b, struct kvt_peer *p, unsigned int nslots,
		 struct kvt_sub **out);
int kvt_sub_check_opts(struct kvt_peer *p, const struct kvt_submit_opts *o,
		       struct kvt_sub *s);
int kvt_sub_resolve(struct kvt_peer *p, uint32_t op, const void *local,
		    uint64_t llen, uint64_t remote, uint64_t rlen,
		    const char *what, struct kvt_req *r);
int kvt_sub_mode(struct kvt_batch *b, struct kvt_sub *s,
		 const struct kvt_submit_opts *o);
int kvt_sub_claim_ranges(struct kvt_batch *b, struct kvt_sub *s,
			 struct kvt_range *r, struct kvt_range *tmp,
			 unsigned int n, int sorted);
int kvt_sub_commit(struct kvt_batch *b, struct kvt_sub *s, int ret,
		   unsigned int tok);
/* Record a request (every submission path, per request: inline). */
static inline void
kvt_sub_req_fill(struct kvt_sub *s, struct kvt_req *r, uint32_t op,
		 void *local, uint64_t remote, uint64_t len)
{
	r->x.op = op;
	if (op == KVT_OP_WRITE)
		s->wbytes += len;
	else
		s->rbytes += len;
	r->x.local = local;
	r->x.remote = remote;
	r->x.len = len;
	r->settled = 0;
	r->err = 0;
	r->s = s;
}

/* Request r joins s (first: its first): the ports and the region pairs
 * the submission's requests use. */
static inline void
kvt_sub_add_req(struct kvt_sub *s, const struct kvt_req *r, int first)
{
	s->all_mask |= r->mask;
	if (first) {
		s->m1 = req_mem(r);
		s->ri1 = req_rimp(r);
	} else if (req_mem(r) != s->m1 || req_rimp(r) != s->ri1) {
		s->mixed = 1;
	}
}

/* Is [a, a + len) inside [base, base + blen)? */
static inline int
kvt_inside(uintptr_t a, uint64_t len, uintptr_t base, uint64_t blen)
{
	return a >= base && a - base < blen && len <= blen - (a - base);
}

/* Slices of a request of len bytes at --kvt-slice. */
static inline uint64_t
kvt_slices_of(uint64_t len)
{
	return len <= kvt_eng->o.slice ? 1 :
		(len + kvt_eng->o.slice - 1) / kvt_eng->o.slice;
}

/* arena.c: len bytes (cache-line aligned) kept until the batch is
 * reset; NULL when out of memory. */
void *kvt_arena_alloc(struct kvt_batch *b, size_t len);
/* arena.c: where the arena stands, so a refused submission gives back
 * what it took since (kvt_arena_release()). */
struct kvt_arena_mark {
	struct kvt_arena *chunk;
	size_t used;
};
struct kvt_arena_mark kvt_arena_mark(const struct kvt_batch *b);
void kvt_arena_release(struct kvt_batch *b, struct kvt_arena_mark m);
/* arena.c: empty it (kvt_batch_reset()), free it (kvt_batch_free()). */
void kvt_arena_reset(struct kvt_batch *b);
void kvt_arena_free(struct kvt_batch *b);

#endif /* KVT_BATCH_H */
