/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Notifications: short messages delivered after a submission's data.
 *
 * An inbox is a bounded queue with a sequence number per slot (the
 * classic array-based multi-producer/multi-consumer design): producers
 * claim a position with a compare-and-swap, fill the slot, then publish
 * its sequence with a release store; consumers do the mirror image.  It
 * works in shared memory between processes, so same-host peers push into
 * our inbox directly.  Only the owner's copy of the size is trusted, and
 * lengths read from shared memory are checked: a broken peer can garble
 * its own messages but not make us read out of bounds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_private.h"

struct kvt_inbox_slot {
	uint64_t seq;
	uint32_t len;
	uint32_t rsvd;
	uint8_t data[KVT_NOTIFY_MAX];
};

struct kvt_inbox {
	uint32_t mask;
	uint32_t rsvd;
	uint64_t head __rte_cache_aligned;	/* next position to fill */
	uint64_t tail __rte_cache_aligned;	/* next position to take */
	struct kvt_inbox_slot slot[] __rte_cache_aligned;
};

/* The inboxes kvt_notify_poll() reads: an RCU-published array. */
struct kvt_inbox_ref {
	struct kvt_inbox *ib;
	uint32_t mask;		/* our own copy */
	char peer[64];
};

struct kvt_inbox_set {
	unsigned int n;
	struct kvt_inbox_ref r[];
};

static struct kvt_inbox_set *inboxes;
static pthread_mutex_t inbox_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int poll_start;

/*
 * Inboxes of connections that closed: kept readable until the
 * application took what is left in them (or the grace period ends), so
 * a message sent just before the peer went away is not lost.
 */
#define KVT_INBOX_GRACE_US (30ull * 1000 * 1000)

struct kvt_inbox_retired {
	struct kvt_inbox *ib;
	void (*release)(void *);
	void *arg;
	uint64_t since_us;
	struct kvt_inbox_retired *next;
};

static struct kvt_inbox_retired *retired;	/* under inbox_lock */

size_t
kvt_inbox_size(uint32_t n)
{
	return sizeof(struct kvt_inbox) + n * sizeof(struct kvt_inbox_slot);
}

void
kvt_inbox_init(struct kvt_inbox *ib, uint32_t n)
{
	uint32_t i;

	ib->mask = n - 1;
	ib->head = 0;
	ib->tail = 0;
	for (i = 0; i < n; i++)
		ib->slot[i].seq = i;
}

int
kvt_inbox_push(struct kvt_inbox *ib, const void *data, uint32_t len)
{
	struct kvt_inbox_slot *sl;
	uint64_t pos, seq;
	int64_t dif;

	if (len > KVT_NOTIFY_MAX)
		return -EMSGSIZE;
	pos = __atomic_load_n(&ib->head, __ATOMIC_RELAXED);
	for (;;) {
		sl = &ib->slot[pos & ib->mask];
		seq = __atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE);
		dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (__atomic_compare_exchange_n(&ib->head, &pos, pos + 1,
							true, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED))
				break;
		} else if (dif < 0) {
			return -ENOBUFS;
		} else {
			pos = __atomic_load_n(&ib->head, __ATOMIC_RELAXED);
		}
	}
	sl->len = len;
	memcpy(sl->data, data, len);
	__atomic_store_n(&sl->seq, pos + 1, __ATOMIC_RELEASE);
	return 0;
}

/* Take one message; @return 1, or 0 when empty. */
static int
inbox_pop(const struct kvt_inbox_ref *ref, struct kvt_notify_msg *out)
{
	struct kvt_inbox *ib = __atomic_load_n(&ref->ib, __ATOMIC_ACQUIRE);
	struct kvt_inbox_slot *sl;
	uint64_t pos, seq;
	int64_t dif;

	if (ib == NULL)
		return 0;
	pos = __atomic_load_n(&ib->tail, __ATOMIC_RELAXED);
	for (;;) {
		sl = &ib->slot[pos & ref->mask];
		seq = __atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE);
		dif = (int64_t)(seq - (pos + 1));
		if (dif == 0) {
			if (__atomic_compare_exchange_n(&ib->tail, &pos, pos + 1,
							true, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED))
				break;
		} else if (dif < 0) {
			return 0;
		} else {
			pos = __atomic_load_n(&ib->tail, __ATOMIC_RELAXED);
		}
	}
	out->len = RTE_MIN(sl->len, (uint32_t)KVT_NOTIFY_MAX);
	memcpy(out->data, sl->data, out->len);
	memcpy(out->peer, ref->peer, sizeof(out->peer));
	__atomic_store_n(&sl->seq, pos + ref->mask + 1, __ATOMIC_RELEASE);
	return 1;
}

static int
set_publish(struct kvt_inbox_set *ns)
{
	struct kvt_inbox_set *old = inboxes;

	__atomic_store_n(&inboxes, ns, __ATOMIC_RELEASE);
	kvt_rcu_synchronize();
	free(old);
	return 0;
}

int
kvt_inbox_attach(struct kvt_inbox *ib, const char *peer)
{
	struct kvt_inbox_set *ns;
	unsigned int n, i, k;
	int ret;

	pthread_mutex_lock(&inbox_lock);
	n = inboxes != NULL ? inboxes->n : 0;
	ns = malloc(sizeof(*ns) + (n + 1) * sizeof(ns->r[0]));
	if (ns == NULL) {
		pthread_mutex_unlock(&inbox_lock);
		return -ENOMEM;
	}
	for (i = 0, k = 0; i < n; i++)
		if (inboxes->r[i].ib != NULL)
			ns->r[k++] = inboxes->r[i];
	n = k;
	ns->r[n].ib = ib;
	ns->r[n].mask = ib->mask;
	snprintf(ns->r[n].peer, sizeof(ns->r[n].peer), "%s", peer);
	ns->n = n + 1;
	ret = set_publish(ns);
	pthread_mutex_unlock(&inbox_lock);
	return ret;
}

void
kvt_inbox_detach(struct kvt_inbox *ib)
{
	unsigned int i;

	pthread_mutex_lock(&inbox_lock);
	/* Clear the entry in place (readers skip NULL); attach compacts. */
	for (i = 0; inboxes != NULL && i < inboxes->n; i++)
		if (inboxes->r[i].ib == ib)
			__atomic_store_n(&inboxes->r[i].ib, NULL,
					 __ATOMIC_RELEASE);
	pthread_mutex_unlock(&inbox_lock);
	kvt_rcu_synchronize();
}

void
kvt_inbox_retire(struct kvt_inbox *ib, void (*release)(void *), void *arg)
{
	struct kvt_inbox_retired *r = malloc(sizeof(*r));

	if (r == NULL) {
		kvt_inbox_detach(ib);
		release(arg);
		return;
	}
	r->ib = ib;
	r->release = release;
	r->arg = arg;
	r->since_us = kvt_now_us();
	pthread_mutex_lock(&inbox_lock);
	r->next = retired;
	retired = r;
	pthread_mutex_unlock(&inbox_lock);
}

static int
inbox_empty(const struct kvt_inbox *ib)
{
	return __atomic_load_n(&ib->head, __ATOMIC_ACQUIRE) ==
		__atomic_load_n(&ib->tail, __ATOMIC_ACQUIRE);
}

void
kvt_inbox_reap_retired(int all)
{
	struct kvt_inbox_retired **pp, *r, *done = NULL;
	uint64_t now = kvt_now_us();

	pthread_mutex_lock(&inbox_lock);
	for (pp = &retired; (r = *pp) != NULL;) {
		if (all || inbox_empty(r->ib) ||
		    now - r->since_us > KVT_INBOX_GRACE_US) {
			*pp = r->next;
			r->next = done;
			done = r;
		} else {
			pp = &r->next;
		}
	}
	pthread_mutex_unlock(&inbox_lock);
	while ((r = done) != NULL) {
		done = r->next;
		kvt_inbox_detach(r->ib);
		r->release(r->arg);
		free(r);
	}
}

struct kvt_inbox *
kvt_inbox_local_new(void)
{
	struct kvt_inbox *ib = aligned_alloc(RTE_CACHE_LINE_SIZE,
					     RTE_ALIGN_CEIL(kvt_inbox_size(256),
							    RTE_CACHE_LINE_SIZE));

	if (ib != NULL)
		kvt_inbox_init(ib, 256);
	return ib;
}

void
kvt_inbox_local_free(struct kvt_inbox *ib)
{
	free(ib);
}

int
kvt_notify_init(void)
{
	inboxes = calloc(1, sizeof(*inboxes));
	return inboxes != NULL ? 0 : -ENOMEM;
}

void
kvt_notify_fini(void)
{
	kvt_inbox_reap_retired(1);
	pthread_mutex_lock(&inbox_lock);
	set_publish(NULL);
	pthread_mutex_unlock(&inbox_lock);
}

int
kvt_notify_poll(struct kvt_notify_msg *out, unsigned int max)
{
	const struct kvt_inbox_set *set;
	unsigned int got = 0, i, k, start, tok;

	if (kvt_eng == NULL)
		return -ENODEV;
	if (out == NULL && max > 0)
		return -EINVAL;
	tok = kvt_rcu_read_lock();
	set = __atomic_load_n(&inboxes, __ATOMIC_ACQUIRE);
	if (set != NULL && set->n > 0) {
		/* Rotate the starting inbox so no peer starves the others. */
		start = __atomic_fetch_add(&poll_start, 1, __ATOMIC_RELAXED);
		for (k = 0; k < set->n && got < max; k++) {
			i = (start + k) % set->n;
			while (got < max && inbox_pop(&set->r[i], &out[got]))
				got++;
		}
	}
	kvt_rcu_read_unlock(tok);
	return (int)got;
}
