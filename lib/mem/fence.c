/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fence tables (receiver side).  A slot is armed with a room id; a sender
 * writes that id into the slot after all of its data is placed; the
 * receiver accepts the slot only on an exact match.  0 means "nothing
 * arrived", so room ids are never 0, and arming clears the slot first.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_errno.h>
#include <rte_pause.h>

#include "kvt_private.h"

#define KVT_FENCE_MAGIC 0x6b766665u
#define KVT_FENCE_MAX_SLOTS (1u << 24)

struct kvt_fence_table {
	uint32_t magic;
	uint32_t nslots;
	struct kvt_fence_table *next;	/* all tables, freed by kvt_fini */
	uint64_t *words;	/* peers write here */
	uint64_t *expect;	/* armed room per slot */
	struct kvt_mem *m;
	struct kvt_loc loc;
	const struct kvt_dev *dev;	/* copies into its device memory, or NULL */
};

struct kvt_mem *kvt_mem_register_flags(void *addr, size_t len,
				       const char *loc, uint32_t flags);

static struct kvt_fence_table *tables;
static pthread_mutex_t tables_lock = PTHREAD_MUTEX_INITIALIZER;

static void
table_free(struct kvt_fence_table *ft)
{
	if (ft->dev == NULL)
		kvt_host_unregister(ft->words);
	kvt_mem_free(ft->words);
	free(ft->expect);
	ft->magic = 0;
	free(ft);
}

static int
ft_ok(const struct kvt_fence_table *ft, uint32_t slot)
{
	return ft != NULL && ft->magic == KVT_FENCE_MAGIC && slot < ft->nslots;
}

static int
zero_device(struct kvt_fence_table *ft, size_t len)
{
	uint64_t *z = calloc(1, len);
	int ret;

	if (z == NULL)
		return -ENOMEM;
	ret = kvt_dev_copy(ft->dev, ft->words, z, len);
	free(z);
	return ret;
}

struct kvt_fence_table *
kvt_fence_table_create(uint32_t nslots, const char *locs)
{
	struct kvt_fence_table *ft;
	size_t len = (size_t)nslots * 8;
	int err;

	if (kvt_eng == NULL) {
		rte_errno = ENODEV;
		return NULL;
	}
	if (nslots == 0 || nslots > KVT_FENCE_MAX_SLOTS) {
		rte_errno = EINVAL;
		return NULL;
	}
	ft = calloc(1, sizeof(*ft));
	if (ft == NULL) {
		rte_errno = ENOMEM;
		return NULL;
	}
	if (locs == NULL)
		locs = "cpu:0";
	if (kvt_parse_loc(locs, &ft->loc) < 0) {
		err = EINVAL;
		goto free_ft;
	}
	if (ft->loc.type != KVT_LOC_CPU) {
		ft->dev = kvt_dev_copier();
		if (ft->dev == NULL) {
			KVT_LOG(ERR, "fence table at %s: no memory device here copies into it",
				locs);
			err = ENODEV;
			goto free_ft;
		}
	}
	ft->expect = calloc(nslots, sizeof(*ft->expect));
	ft->words = kvt_mem_alloc(len, locs);
	if (ft->expect == NULL || ft->words == NULL) {
		err = ft->words == NULL ? rte_errno : ENOMEM;
		goto free_words;
	}
	if (ft->dev == NULL) {
		memset(ft->words, 0, len);
		/* GPUs on this host may wait on it (kvt_fence_wait_stream). */
		kvt_host_register(ft->words, len);
	} else if (zero_device(ft, len) < 0) {
		err = EIO;
		goto free_words;
	}
	ft->m = kvt_mem_register_flags(ft->words, len, locs,
				       KVT_MEM_REMOTE_WRITE | KVT_MEM_F_FENCE);
	if (ft->m == NULL) {
		err = rte_errno;
		goto free_words;
	}
	ft->nslots = nslots;
	ft->magic = KVT_FENCE_MAGIC;
	pthread_mutex_lock(&tables_lock);
	ft->next = tables;
	tables = ft;
	pthread_mutex_unlock(&tables_lock);
	return ft;

free_words:
	if (ft->words != NULL)
		kvt_mem_free(ft->words);
	free(ft->expect);
free_ft:
	free(ft);
	rte_errno = err;
	return NULL;
}

int
kvt_fence_table_destroy(struct kvt_fence_table *ft)
{
	struct kvt_fence_table **pp;
	int ret;

	if (!ft_ok(ft, 0))
		return -EINVAL;
	ret = kvt_mem_unregister(ft->m);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&tables_lock);
	for (pp = &tables; *pp != NULL; pp = &(*pp)->next)
		if (*pp == ft) {
			*pp = ft->next;
			break;
		}
	pthread_mutex_unlock(&tables_lock);
	table_free(ft);
	return 0;
}

/* kvt_fini: the registrations are going; free what is left. */
void
kvt_fence_fini(void)
{
	struct kvt_fence_table *ft;

	pthread_mutex_lock(&tables_lock);
	while ((ft = tables) != NULL) {
		tables = ft->next;
		kvt_mem_unregister(ft->m);
		table_free(ft);
	}
	pthread_mutex_unlock(&tables_lock);
}

uint64_t
kvt_fence_table_handle(const struct kvt_fence_table *ft)
{
	return ft_ok(ft, 0) ? (uintptr_t)ft->words : 0;
}

volatile uint64_t *
kvt_fence_table_words(const struct kvt_fence_table *ft)
{
	return ft_ok(ft, 0) ? ft->words : NULL;
}

int
kvt_fence_arm(struct kvt_fence_table *ft, uint32_t slot, uint64_t room)
{
	static const uint64_t zero;
	int ret;

	if (!ft_ok(ft, slot) || room == 0)
		return -EINVAL;
	if (ft->dev != NULL) {
		ret = kvt_dev_copy(ft->dev, &ft->words[slot], &zero, 8);
		if (ret < 0)
			return ret;
	} else {
		__atomic_store_n(&ft->words[slot], 0, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&ft->expect[slot], room, __ATOMIC_RELEASE);
	return 0;
}

int
kvt_fence_poll(struct kvt_fence_table *ft, uint32_t slot)
{
	uint64_t v;

	if (!ft_ok(ft, slot))
		return -EINVAL;
	if (ft->dev != NULL) {
		/* A device word: read with a copy (a GPU wait is cheaper). */
		if (kvt_dev_copy(ft->dev, &v, &ft->words[slot], 8) < 0)
			return -EIO;
	} else {
		/* Acquire: data written before the fence is visible after. */
		v = __atomic_load_n(&ft->words[slot], __ATOMIC_ACQUIRE);
	}
	if (v == 0)
		return -EAGAIN;
	return v == __atomic_load_n(&ft->expect[slot], __ATOMIC_ACQUIRE) ?
		0 : -ESTALE;
}

int
kvt_fence_wait(struct kvt_fence_table *ft, uint32_t slot, uint64_t timeout_us)
{
	struct timespec nap = { 0, 20000 };
	uint64_t start = kvt_now_us(), el;
	int ret;

	for (;;) {
		ret = kvt_fence_poll(ft, slot);
		if (ret != -EAGAIN)
			return ret;
		el = kvt_now_us() - start;
		if (el >= timeout_us)
			return -ETIMEDOUT;
		if (el < 100)
			rte_pause();
		else
			nanosleep(&nap, NULL);
	}
}

int
kvt_fence_wait_stream(struct kvt_fence_table *ft, uint32_t slot,
		      void *cuda_stream, uint64_t timeout_us, uint32_t *status)
{
	const struct kvt_dev *dev;

	if (!ft_ok(ft, slot) || status == NULL)
		return -EINVAL;
	dev = ft->dev != NULL ? ft->dev : kvt_dev_copier();
	return kvt_dev_stream_wait(dev, &ft->words[slot],
				   __atomic_load_n(&ft->expect[slot],
						   __ATOMIC_ACQUIRE),
				   timeout_us * 1000, status, cuda_stream);
}
