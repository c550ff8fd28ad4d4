/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A batch's arena: memory the list submissions keep until the batch is
 * reset (their index and block copies, their write ranges).  Chunks
 * never move, since lcores and whole-submission ports read them, and are
 * kept across resets; the batch frees them.  The application thread that
 * drives the batch is the only one that takes or gives back.
 */
#include <stdlib.h>

#include <rte_common.h>

#include "batch.h"

void *
kvt_arena_alloc(struct kvt_batch *b, size_t len)
{
	struct kvt_arena *c, **pp;
	size_t cap;
	void *p;

	len = RTE_ALIGN_CEIL(len, RTE_CACHE_LINE_SIZE);
	for (c = b->arena_cur; c != NULL; c = c->next) {
		if (c->cap - c->used >= len) {
			p = c->data + c->used;
			c->used += len;
			b->arena_cur = c;
			return p;
		}
	}
	cap = RTE_MAX(len, (size_t)ARENA_MIN);
	c = aligned_alloc(RTE_CACHE_LINE_SIZE,
			  RTE_ALIGN_CEIL(sizeof(*c) + cap, RTE_CACHE_LINE_SIZE));
	if (c == NULL)
		return NULL;
	c->next = NULL;
	c->cap = cap;
	c->used = len;
	for (pp = &b->arena; *pp != NULL; pp = &(*pp)->next)
		;
	*pp = c;
	b->arena_cur = c;
	return c->data;
}

struct kvt_arena_mark
kvt_arena_mark(const struct kvt_batch *b)
{
	struct kvt_arena_mark m = { b->arena_cur, b->arena_cur ? b->arena_cur->used : 0 };

	return m;
}

void
kvt_arena_release(struct kvt_batch *b, struct kvt_arena_mark m)
{
	struct kvt_arena *c;

	for (c = m.chunk != NULL ? m.chunk->next : b->arena; c != NULL;
	     c = c->next)
		c->used = 0;
	if (m.chunk != NULL)
		m.chunk->used = m.used;
	b->arena_cur = m.chunk != NULL ? m.chunk : b->arena;
}

void
kvt_arena_reset(struct kvt_batch *b)
{
	struct kvt_arena *c;

	for (c = b->arena; c != NULL; c = c->next)
		c->used = 0;
	b->arena_cur = b->arena;
}

void
kvt_arena_free(struct kvt_batch *b)
{
	struct kvt_arena *c;

	while ((c = b->arena) != NULL) {
		b->arena = c->next;
		free(c);
	}
	b->arena_cur = NULL;
}
