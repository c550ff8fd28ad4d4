/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Range map as a treap (a search tree by base, a heap by random
 * priority: expected depth O(log n)) whose published nodes never change.
 * A change copies the nodes on its path (split and merge visit O(log n)),
 * links the copies into a new tree that shares every other node with the
 * old one, publishes the new root with a release store, waits for the
 * readers of the old tree and frees the nodes it replaced.  A node the
 * change itself made is not visible yet, so the change edits it in place
 * (node.gen tells which); a change that runs out of memory frees what it
 * made and leaves the map as it was.
 */
#include <errno.h>
#include <stdlib.h>

#include <rte_random.h>

#include "kvt_private.h"
#include "rangemap.h"

struct kvt_rnode {
	uint64_t base;
	uint64_t len;
	void *val;
	struct kvt_rnode *left;	/* bases below */
	struct kvt_rnode *right;	/* bases above */
	uint64_t prio;		/* at least its children's */
	uint64_t gen;		/* the change that made it */
};

/* A node list that grows. */
struct nodes {
	struct kvt_rnode **v;
	unsigned int n;
	unsigned int cap;
};

/* One change in progress. */
struct change {
	uint64_t gen;
	struct nodes made;	/* freed if the change fails */
	struct nodes old;	/* replaced: freed after readers */
	int err;
};

static uint64_t rangemap_gens;

static int
nodes_push(struct nodes *l, struct kvt_rnode *n)
{
	struct kvt_rnode **v;
	unsigned int cap;

	if (l->n == l->cap) {
		cap = l->cap != 0 ? l->cap * 2 : 64;
		v = realloc(l->v, cap * sizeof(*v));
		if (v == NULL)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = n;
	return 0;
}

static void
change_begin(struct change *c)
{
	*c = (struct change){
		.gen = __atomic_add_fetch(&rangemap_gens, 1, __ATOMIC_RELAXED),
	};
}

static struct kvt_rnode *
node_new(struct change *c)
{
	struct kvt_rnode *k = malloc(sizeof(*k));

	if (k != NULL && nodes_push(&c->made, k) < 0) {
		free(k);
		k = NULL;
	}
	if (k == NULL)
		c->err = -ENOMEM;
	return k;
}

/* n, writable by this change: itself when the change made it, else a
 * copy that replaces it. */
static struct kvt_rnode *
node_mut(struct change *c, struct kvt_rnode *n)
{
	struct kvt_rnode *k;

	if (n->gen == c->gen)
		return n;
	k = node_new(c);
	if (k == NULL)
		return NULL;
	if (nodes_push(&c->old, n) < 0) {
		c->err = -ENOMEM;
		return NULL;
	}
	*k = *n;
	k->gen = c->gen;
	return k;
}

/* t into *l (bases below key) and *r (the rest). */
static int
split(struct change *c, struct kvt_rnode *t, uint64_t key,
      struct kvt_rnode **l, struct kvt_rnode **r)
{
	struct kvt_rnode *k;

	if (t == NULL) {
		*l = NULL;
		*r = NULL;
		return 0;
	}
	k = node_mut(c, t);
	if (k == NULL)
		return -ENOMEM;
	if (k->base < key) {
		*l = k;
		return split(c, k->right, key, &k->right, r);
	}
	*r = k;
	return split(c, k->left, key, l, &k->left);
}

/* One tree of l and r, every base of l below every base of r. */
static struct kvt_rnode *
merge(struct change *c, struct kvt_rnode *l, struct kvt_rnode *r)
{
	struct kvt_rnode *k;

	if (l == NULL || r == NULL)
		return l != NULL ? l : r;
	if (l->prio > r->prio) {
		k = node_mut(c, l);
		if (k != NULL)
			k->right = merge(c, k->right, r);
	} else {
		k = node_mut(c, r);
		if (k != NULL)
			k->left = merge(c, l, k->left);
	}
	return k;
}

/* Publish root and free what it replaced, or undo a failed change. */
static int
change_end(struct kvt_rangemap *m, struct change *c, struct kvt_rnode *root)
{
	unsigned int i;

	if (c->err == 0) {
		__atomic_store_n(&m->root, root, __ATOMIC_RELEASE);
		kvt_rcu_synchronize();
		for (i = 0; i < c->old.n; i++)
			free(c->old.v[i]);
	} else {
		for (i = 0; i < c->made.n; i++)
			free(c->made.v[i]);
	}
	free(c->made.v);
	free(c->old.v);
	return c->err;
}

/* The range with the largest base <= key. */
static const struct kvt_rnode *
floor_node(const struct kvt_rnode *t, uint64_t key)
{
	const struct kvt_rnode *best = NULL;

	while (t != NULL) {
		if (t->base <= key) {
			best = t;
			t = t->right;
		} else {
			t = t->left;
		}
	}
	return best;
}

void *
kvt_rangemap_find(const struct kvt_rangemap *m, uint64_t addr, uint64_t len)
{
	const struct kvt_rnode *f;

	f = floor_node(__atomic_load_n(&m->root, __ATOMIC_ACQUIRE), addr);
	if (f == NULL || addr - f->base >= f->len ||
	    len > f->len - (addr - f->base))
		return NULL;
	return f->val;
}

int
kvt_rangemap_overlaps(const struct kvt_rangemap *m, uint64_t addr,
		      uint64_t len)
{
	const struct kvt_rnode *f = floor_node(m->root, addr + (len - 1));

	return f != NULL && (f->base >= addr || addr - f->base < f->len);
}

int
kvt_rangemap_insert(struct kvt_rangemap *m, uint64_t base, uint64_t len,
		    void *val)
{
	struct kvt_rnode *n, *l, *r;
	struct change c;

	if (len == 0 || base + len < base)
		return -EINVAL;
	if (kvt_rangemap_overlaps(m, base, len))
		return -EEXIST;
	change_begin(&c);
	n = node_new(&c);
	if (n != NULL) {
		*n = (struct kvt_rnode){ .base = base, .len = len, .val = val,
			.prio = rte_rand(), .gen = c.gen };
		if (split(&c, m->root, base, &l, &r) == 0)
			n = merge(&c, merge(&c, l, n), r);
	}
	if (change_end(m, &c, n) < 0)
		return -ENOMEM;
	m->n++;
	return 0;
}

int
kvt_rangemap_remove(struct kvt_rangemap *m, uint64_t base, void **val)
{
	const struct kvt_rnode *f = floor_node(m->root, base);
	struct kvt_rnode *l, *mid = NULL, *r, *root = NULL;
	struct change c;

	if (f == NULL || f->base != base)
		return -ENOENT;
	*val = f->val;
	change_begin(&c);
	if (split(&c, m->root, base, &l, &r) == 0 &&
	    split(&c, r, base + 1, &mid, &r) == 0)
		root = merge(&c, l, r);
	if (change_end(m, &c, root) < 0)
		return -ENOMEM;
	/* The copy of the removed node was never published. */
	free(mid);
	m->n--;
	return 0;
}

static int
walk(const struct kvt_rnode *t, int (*fn)(void *val, void *arg), void *arg)
{
	int ret;

	if (t == NULL)
		return 0;
	ret = walk(t->left, fn, arg);
	if (ret == 0)
		ret = fn(t->val, arg);
	return ret != 0 ? ret : walk(t->right, fn, arg);
}

int
kvt_rangemap_walk(const struct kvt_rangemap *m,
		  int (*fn)(void *val, void *arg), void *arg)
{
	return walk(__atomic_load_n(&m->root, __ATOMIC_ACQUIRE), fn, arg);
}

static void
free_tree(struct kvt_rnode *t)
{
	if (t == NULL)
		return;
	free_tree(t->left);
	free_tree(t->right);
	free(t);
}

void
kvt_rangemap_clear(struct kvt_rangemap *m)
{
	free_tree(m->root);
	m->root = NULL;
	m->n = 0;
}
