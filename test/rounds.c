/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Rounds: a sender rewrites every block of a region round after round,
 * each write with a fence (slot = block, room = round) and a notification
 * "BLOCK ROUND"; a receiver scans the blocks while they move.  Written
 * against kvt.h alone, as an application would be.
 *
 * What the receiver counts (each must stay 0):
 *   regress      a word of a block held a round older than one it held
 *                before: a completed write replaced by an older copy;
 *   early        a notification taken while its block held an older
 *                round than the one it announced;
 *   fence_early  a fence seen while its block held an older round;
 *   fence_back   a fence slot went back to an older round (a late copy).
 * Its count of notifications must equal the sender's count of writes that
 * succeeded: one for each, none for a write that failed.  (Notifications
 * of one block may be taken out of round order: each link has an inbox.)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvt.h"
#include "test_common.h"
#include "rounds.h"

#define WORD sizeof(uint64_t)

/* The smallest word of block b, read with acquire loads. */
static uint64_t
block_min(const uint8_t *base, uint64_t bs, uint32_t b)
{
	const uint64_t *w = (const uint64_t *)(const void *)(base + b * bs);
	uint64_t i, v, min = UINT64_MAX;

	for (i = 0; i < bs / WORD; i++) {
		v = __atomic_load_n(&w[i], __ATOMIC_ACQUIRE);
		min = v < min ? v : min;
	}
	return min;
}

struct scan {
	uint8_t *base;
	uint32_t nb;
	uint64_t bs;
	volatile uint64_t *fence;
	uint64_t *seen;		/* per word: the newest round it held */
	uint64_t *fseen;	/* per block: the newest fence seen */
	unsigned long scans, regress, early, fence_early, fence_back;
	unsigned long notes;
};

static void scan_notes(struct scan *s);

static void
scan_words(struct scan *s)
{
	const uint64_t *w = (const uint64_t *)(const void *)s->base;
	uint64_t i, v, n = s->nb * s->bs / WORD, per = s->bs / WORD;

	for (i = 0; i < n; i++) {
		/* Notifications taken as we go: a busy scanner must not
		 * leave the inbox full (its writer waits, then fails). */
		if (i % (8 * per) == 0)
			scan_notes(s);
		v = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
		if (v >= s->seen[i]) {
			s->seen[i] = v;
			continue;
		}
		if (s->regress++ < 5)
			fprintf(stderr, "REGRESS data block %" PRIu64 " word %" PRIu64
				": round %" PRIu64 " after round %" PRIu64 "\n",
				i / (s->bs / WORD), i % (s->bs / WORD), v, s->seen[i]);
	}
}

static void
scan_fences(struct scan *s)
{
	uint64_t f;
	uint32_t b;

	for (b = 0; b < s->nb; b++) {
		f = __atomic_load_n(&s->fence[b], __ATOMIC_ACQUIRE);
		if (f == 0)
			continue;
		if (f < s->fseen[b] && s->fence_back++ < 5)
			fprintf(stderr, "FENCE BACK block %u: round %" PRIu64
				" after %" PRIu64 "\n", b, f, s->fseen[b]);
		s->fseen[b] = f > s->fseen[b] ? f : s->fseen[b];
		if (block_min(s->base, s->bs, b) < f && s->fence_early++ < 5)
			fprintf(stderr, "FENCE EARLY block %u: fence of round %" PRIu64
				" before its data\n", b, f);
	}
}

static void
scan_notes(struct scan *s)
{
	struct kvt_notify_msg m[64];
	unsigned int b;
	uint64_t r;
	char text[KVT_NOTIFY_MAX + 1];
	int n, i;

	n = kvt_notify_poll(m, 64);
	for (i = 0; i < n; i++) {
		memcpy(text, m[i].data, m[i].len);
		text[m[i].len] = '\0';
		if (sscanf(text, "%u %" SCNu64, &b, &r) != 2 || b >= s->nb)
			continue;
		s->notes++;
		if (block_min(s->base, s->bs, b) < r && s->early++ < 5)
			fprintf(stderr, "EARLY block %u: notified round %" PRIu64
				" before its data\n", b, r);
	}
}

int
tc_rounds_scan(uint8_t *base, uint32_t nb, uint64_t bs,
	       struct kvt_fence_table *ft, uint64_t us, int (*stop)(void),
	       char *out, size_t len)
{
	struct scan s = { .base = base, .nb = nb, .bs = bs };
	uint64_t deadline = tc_now_us() + us;

	if (ft == NULL || bs % WORD != 0 || nb == 0)
		return -1;
	s.fence = kvt_fence_table_words(ft);
	s.seen = calloc(nb * bs / WORD, sizeof(uint64_t));
	s.fseen = calloc(nb, sizeof(uint64_t));
	if (s.seen == NULL || s.fseen == NULL) {
		free(s.seen);
		free(s.fseen);
		return -1;
	}
	while (tc_now_us() < deadline && (stop == NULL || !stop())) {
		scan_notes(&s);
		scan_fences(&s);
		scan_words(&s);
		s.scans++;
		usleep(500);
	}
	scan_notes(&s);
	snprintf(out, len, "scans=%lu regress=%lu early=%lu fence_early=%lu fence_back=%lu notes=%lu",
		 s.scans, s.regress, s.early, s.fence_early, s.fence_back,
		 s.notes);
	free(s.seen);
	free(s.fseen);
	return 0;
}

/* Fill block b of src with round r. */
static void
fill_round(uint8_t *src, uint64_t bs, uint32_t b, uint64_t r)
{
	uint64_t *w = (uint64_t *)(void *)(src + b * bs), i;

	for (i = 0; i < bs / WORD; i++)
		w[i] = r;
}

int
tc_rounds_send(struct kvt_peer *peer, uint8_t *src, uint32_t nb, uint64_t bs,
	       uint64_t raddr, uint64_t fence, uint64_t us, char *out,
	       size_t len)
{
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .len = bs };
	struct kvt_submit_opts o = { .flags = KVT_SUBMIT_FENCE };
	uint64_t deadline = tc_now_us() + us, r, writes = 0, failed = 0;
	struct kvt_batch *batch;
	char note[48];
	int ret, first = 0, waitret = 0, *idx;
	uint32_t b;

	batch = kvt_batch_alloc(nb);
	idx = calloc(nb, sizeof(*idx));
	if (batch == NULL || idx == NULL) {
		free(idx);
		return -1;
	}
	o.fence.table = fence;
	for (r = 1; tc_now_us() < deadline && waitret == 0; r++) {
		for (b = 0; b < nb; b++) {
			fill_round(src, bs, b, r);
			x.local = src + b * bs;
			x.remote = raddr + b * bs;
			o.fence.slot = b;
			o.fence.room = r;
			o.notify_len = (uint32_t)snprintf(note, sizeof(note),
							  "%u %" PRIu64, b, r);
			o.notify = note;
			idx[b] = kvt_submit(batch, peer, &x, 1, &o);
			writes++;
			if (idx[b] < 0) {
				failed++;
				first = first != 0 ? first : idx[b];
			}
		}
		/* Finite, but well past any retry: a hang is a failure. */
		waitret = kvt_wait(batch, 60ull * 1000 * 1000);
		for (b = 0; b < nb && waitret == 0; b++) {
			ret = idx[b] >= 0 ? kvt_status(batch, (unsigned int)idx[b]) : 0;
			if (ret != 0) {
				failed++;
				first = first != 0 ? first : ret;
			}
		}
		kvt_batch_reset(batch);
	}
	snprintf(out, len, "rounds=%" PRIu64 " writes=%" PRIu64 " failed=%" PRIu64
		 " first=%d wait=%d", r - 1, writes, failed, first, waitret);
	kvt_batch_free(batch);
	free(idx);
	return 0;
}
