/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Queueing, on the submitter's side: a submission's tails, and its
 * slices (cut.c cuts them) or its one descriptor, handed to the ports'
 * lcores in bursts; what a full ring refuses waits in the batch's stash
 * for the next pump (kvt_batch_pump: a submit, kvt_poll, kvt_wait,
 * kvt_batch_reset and kvt_batch_free each pump first).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_pause.h>

#include "batch.h"

static void
stash_push(struct kvt_batch *b, enum kvt_prio prio, struct kvt_desc *d)
{
	d->prio = (uint8_t)prio;
	kvt_desc_append(&b->stash, &b->stash_tail, d);
}

/* @return 1 when the stash is empty afterwards. */
static int
stash_flush(struct kvt_batch *b)
{
	struct kvt_desc *d;

	while ((d = b->stash) != NULL) {
		if (kvt_lcore_enqueue(kvt_eng->ports[d->port]->lcore, d->prio, &d, 1) != 1)
			return 0;
		b->stash = d->next;
		if (b->stash == NULL)
			b->stash_tail = NULL;
	}
	return 1;
}

/* Queue n descriptors of class prio, per lcore; what a ring refuses goes
 * to the stash. */
static int
enqueue(struct kvt_batch *b, enum kvt_prio prio, struct kvt_desc **d,
	unsigned int n)
{
	struct kvt_desc *grp[KVT_BURST];
	uint8_t taken[KVT_BURST] = { 0 };
	unsigned int i, j, k, g, lc;

	/* Mostly one lcore serves the whole burst: one enqueue. */
	lc = kvt_eng->ports[d[0]->port]->lcore;
	for (i = 1; i < n && kvt_eng->ports[d[i]->port]->lcore == lc; i++)
		;
	if (i == n) {
		k = kvt_lcore_enqueue(lc, prio, d, n);
		for (; k < n; k++)
			stash_push(b, prio, d[k]);
		return b->stash == NULL;
	}
	for (i = 0; i < n; i++) {
		if (taken[i])
			continue;
		lc = kvt_eng->ports[d[i]->port]->lcore;
		for (g = 0, j = i; j < n; j++) {
			if (!taken[j] && kvt_eng->ports[d[j]->port]->lcore == lc) {
				grp[g++] = d[j];
				taken[j] = 1;
			}
		}
		k = kvt_lcore_enqueue(lc, prio, grp, g);
		for (; k < g; k++)
			stash_push(b, prio, grp[k]);
	}
	return b->stash == NULL;
}

/* One of the submission's own descriptors (its tails, or its whole
 * descriptor), on the submission's port. */
static void
sub_desc_init(struct kvt_sub *s, struct kvt_desc *d, uint8_t op)
{
	/* The first cache line only: the second is written where the
	 * descriptor is taken (its class, in ring_take()), completed (status) or
	 * linked (next), on the lcore, and a striped tail's number below. */
	RTE_BUILD_BUG_ON(offsetof(struct kvt_desc, prio) != RTE_CACHE_LINE_SIZE);
	memset(d, 0, offsetof(struct kvt_desc, prio));
	d->op = op;
	d->flags = KVT_DF_EMBEDDED;
	d->owner = s;
	d->port = s->port;
	d->conn = s->peer->conn[s->port];
}

static void
whole_prepare(struct kvt_sub *s, const struct kvt_submit_opts *o)
{
	struct kvt_subinfo *si = &s->info;
	struct kvt_desc *d = &s->whole;

	memset(si, 0, sizeof(*si));
	si->req = (const uint8_t *)&s->b->req[s->first];
	si->n = s->n;
	si->stride = sizeof(struct kvt_req);
	si->cuda_event = o->cuda_event;
	si->pages = s->pages;
	si->blocks = s->blocks;
	if (s->flags & SUB_F_FENCE) {
		si->fence_rm = &s->fence_ri->rm;
		si->fence_addr = o->fence.table + (uint64_t)o->fence.slot * 8;
		si->room = o->fence.room;
	}
	if (s->flags & SUB_F_NOTIFY) {
		si->notify = s->payload;
		si->notify_len = s->notify_len;
	}
	si->done = &s->done;
	si->err = &s->err;
	sub_desc_init(s, d, KVT_DESC_SUB);
	d->data = si;
	d->len = s->n;
}

/* A tail's number, unique among those sent to the peer and never 0. */
static uint32_t
tail_seq(struct kvt_peer *p)
{
	uint32_t seq;

	do {
		seq = __atomic_add_fetch(&p->tail_seq, 1, __ATOMIC_RELAXED);
	} while (seq == 0);
	return seq;
}

static struct kvt_desc *
tail_init(struct kvt_sub *s, unsigned int i, uint8_t op)
{
	struct kvt_desc *d = &s->tail[i];

	sub_desc_init(s, d, op);
	return d;
}

/* Write only the descriptors this submission will send: a submit is
 * short, and every cache line written counts in its latency. */
void
kvt_sub_prepare(struct kvt_sub *s, const struct kvt_submit_opts *o)
{
	struct kvt_desc *d;

	if (s->mode == SUB_WHOLE) {
		whole_prepare(s, o);
		return;
	}
	if (s->flags & SUB_F_FENCE) {
		d = tail_init(s, TAIL_FENCE, KVT_DESC_FENCE);
		d->rm = &s->fence_ri->rm;
		d->remote = o->fence.table + (uint64_t)o->fence.slot * 8;
		d->value = o->fence.room;
		d->len = 8;
		/* Numbered for a move to another port (striped only) and for
		 * ports that act on a number once (tcp, rdma: striped). */
		if (s->mode == SUB_STRIPED)
			d->seq = tail_seq(s->peer);
	}
	if (s->flags & SUB_F_NOTIFY) {
		d = tail_init(s, TAIL_NOTIFY, KVT_DESC_NOTIFY);
		d->data = s->payload;
		d->len = s->notify_len;
		if (s->mode == SUB_STRIPED)
			d->seq = tail_seq(s->peer);
	}
	if (s->mode == SUB_ORDERED && s->cur.left > 0) {
		/* Its lcore cuts the slices (kvt_cut(), cut.c). */
		d = &s->whole;
		sub_desc_init(s, d, KVT_DESC_CUT);
	}
	if (s->mode == SUB_ORDERED)
		(void)tail_init(s, TAIL_DONE, KVT_DESC_DONE);	/* settles s */
}

/* @return 1 when the submission is fully queued. */
static int
pump_sub(struct kvt_batch *b, struct kvt_sub *s)
{
	struct kvt_desc *d[KVT_BURST];
	unsigned int k;

	if (s->mode == SUB_WHOLE) {
		if (s->tails_queued)
			return 1;
		s->tails_queued = 1;
		d[0] = &s->whole;
		return enqueue(b, s->prio, d, 1);
	}
	if (s->mode == SUB_ORDERED) {
		/* One descriptor for the data, which the lcore cuts, then
		 * the tails right behind it on the same ring. */
		if (s->tails_queued)
			return 1;
		s->tails_queued = 1;
		k = 0;
		if (s->cur.left > 0)
			d[k++] = &s->whole;
		if (s->flags & SUB_F_FENCE)
			d[k++] = &s->tail[TAIL_FENCE];
		if (s->flags & SUB_F_NOTIFY)
			d[k++] = &s->tail[TAIL_NOTIFY];
		d[k++] = &s->tail[TAIL_DONE];
		return enqueue(b, s->prio, d, k);
	}
	while (s->cur.left > 0) {
		/* Every port that may carry the next slice is full: the
		 * rest waits for whichever drains first (kvt_poll,
		 * kvt_wait).  Urgent work does not wait behind bulk. */
		if (s->mode == SUB_STRIPED && s->prio != KVT_PRIO_URGENT &&
		    kvt_stripe_space(usable_ports(&b->req[s->cur.req], s->peer)) == 0)
			return 0;
		k = kvt_cut_next(s, d, KVT_BURST);
		if (k == 0)
			return 0;
		if (!enqueue(b, s->prio, d, k))
			return 0;
	}
	return 1;
}

uint64_t
kvt_batch_pump_slack_us(const struct kvt_batch *b)
{
	const struct kvt_sub *s;

	if (b->stash != NULL)
		return 0;
	if (b->pump == b->nsubs)
		return UINT64_MAX;
	/* Held back by the ports' caps: they hold work enough for a
	 * while; the pump is wanted when the first one has half left. */
	s = sub_at(b, b->pump);
	if (s->mode != SUB_STRIPED || s->cur.left == 0)
		return 0;
	return kvt_stripe_drain_us(usable_ports(&b->req[s->cur.req],
						s->peer)) / 2;
}

void
kvt_batch_pump(struct kvt_batch *b)
{
	if (!lcores_up() || !stash_flush(b))
		return;
	while (b->pump < b->nsubs && pump_sub(b, sub_at(b, b->pump)))
		b->pump++;
}
