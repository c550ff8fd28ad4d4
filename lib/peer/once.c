/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Exactly-once tails.  An initiator numbers the fences and notifications
 * it sends to one peer (kvt_desc.seq, from 1).  A tail whose answer was
 * lost with its connection is sent again, on another socket or port, and
 * may reach us twice; the receiving session remembers which numbers it
 * acted on in a sliding window, so the second copy is answered "done"
 * and acts no more.  Numbers arrive out of order (tails of different
 * submissions leave from different lcores), hence a window, not a
 * high-water mark.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_private.h"

/* Tails of one peer that may be in flight at once, comfortably. */
#define ONCE_BITS 65536u

struct kvt_once {
	rte_spinlock_t lock;
	uint32_t hi;		/* highest number seen */
	uint64_t bits[ONCE_BITS / 64];
};

struct kvt_once *
kvt_once_new(void)
{
	struct kvt_once *o = calloc(1, sizeof(*o));

	if (o != NULL)
		rte_spinlock_init(&o->lock);
	return o;
}

void
kvt_once_free(struct kvt_once *o)
{
	free(o);
}

static void
once_advance(struct kvt_once *o, uint32_t to)
{
	uint32_t k;

	if (to - o->hi >= ONCE_BITS) {
		memset(o->bits, 0, sizeof(o->bits));
	} else {
		for (k = o->hi + 1; k != to + 1; k++)
			o->bits[(k % ONCE_BITS) / 64] &= ~(1ull << (k % 64));
	}
	o->hi = to;
}

int
kvt_once_take(struct kvt_once *o, uint32_t seq)
{
	uint64_t bit = 1ull << (seq % 64);
	uint64_t *w = &o->bits[(seq % ONCE_BITS) / 64];
	int fresh = 1;

	if (seq == 0)
		return 1;	/* not numbered: nothing to compare */
	rte_spinlock_lock(&o->lock);
	if ((int32_t)(seq - o->hi) > 0) {
		once_advance(o, seq);
	} else if (o->hi - seq >= ONCE_BITS) {
		/* Older than the window: we cannot tell, and losing a tail
		 * is worse than acting on a late copy. */
		rte_spinlock_unlock(&o->lock);
		KVT_LOG(WARNING, "tail %u arrived %u behind the newest: acted on",
			seq, o->hi - seq);
		return 1;
	}
	if (*w & bit)
		fresh = 0;
	*w |= bit;
	rte_spinlock_unlock(&o->lock);
	return fresh;
}

int
kvt_once_taken(struct kvt_once *o, uint32_t seq)
{
	int taken;

	if (seq == 0)
		return 0;
	rte_spinlock_lock(&o->lock);
	/* Past the window's top: not seen.  Below its bottom: we cannot
	 * tell, and say taken, as kvt_once_take() acts on such a copy. */
	if ((int32_t)(seq - o->hi) > 0)
		taken = 0;
	else if (o->hi - seq >= ONCE_BITS)
		taken = 1;
	else
		taken = !!(o->bits[(seq % ONCE_BITS) / 64] & (1ull << (seq % 64)));
	rte_spinlock_unlock(&o->lock);
	return taken;
}

void
kvt_once_forget(struct kvt_once *o, uint32_t seq)
{
	if (seq == 0)
		return;
	rte_spinlock_lock(&o->lock);
	if (o->hi - seq < ONCE_BITS)
		o->bits[(seq % ONCE_BITS) / 64] &= ~(1ull << (seq % 64));
	rte_spinlock_unlock(&o->lock);
}

int
kvt_conn_tail_take(struct kvt_conn *c, uint32_t seq)
{
	struct kvt_session *s = c->owner;

	return c->accepted && s != NULL && s->once != NULL ?
		kvt_once_take(s->once, seq) : 1;
}

int
kvt_conn_tail_taken(struct kvt_conn *c, uint32_t seq)
{
	struct kvt_session *s = c->owner;

	return c->accepted && s != NULL && s->once != NULL ?
		kvt_once_taken(s->once, seq) : 0;
}

void
kvt_conn_tail_forget(struct kvt_conn *c, uint32_t seq)
{
	struct kvt_session *s = c->owner;

	if (c->accepted && s != NULL && s->once != NULL)
		kvt_once_forget(s->once, seq);
}
