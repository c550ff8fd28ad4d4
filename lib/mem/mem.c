/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory: shareable allocations (kvt_mem_alloc) and the registry of
 * regions transfers may use.
 *
 * The registry is a range map (rangemap.h) that submit searches without
 * locking, O(log n) to search and to change; changes are control-path
 * events, serialised by reg_lock.  A second map, keyed by the handle's
 * own address, tells a live handle from a stale one without reading it.
 * Others learn of exported regions through kvt_mem_event_subscribe().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <jansson.h>
#include <rte_errno.h>

#include "kvt_private.h"
#include "rangemap.h"

#define KVT_MEM_MAGIC 0x6b766d6du

struct kvt_alloc {
	uint8_t *addr;
	size_t len;
	int fd;			/* memfd, -1 for device memory */
	uint64_t ino;
	struct kvt_loc loc;
	const struct kvt_dev *dev;	/* device memory: who allocated it */
	unsigned int regs;	/* registrations inside it */
	struct kvt_alloc *next;
};

#define KVT_MEM_SUBSCRIBERS 4

static struct kvt_rangemap kvt_reg;	/* address -> struct kvt_mem */
static struct kvt_rangemap kvt_handles;	/* handle -> itself */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	kvt_mem_event_fn fn;
	void *arg;
} subs[KVT_MEM_SUBSCRIBERS];	/* under reg_lock */
static struct kvt_alloc *kvt_allocs;	/* under reg_lock */
static uint64_t kvt_mem_ids;

int
kvt_mem_event_subscribe(kvt_mem_event_fn fn, void *arg)
{
	unsigned int i;
	int ret = -ENOSPC;

	pthread_mutex_lock(&reg_lock);
	for (i = 0; i < KVT_MEM_SUBSCRIBERS && ret < 0; i++) {
		if (subs[i].fn == NULL) {
			subs[i].fn = fn;
			subs[i].arg = arg;
			ret = 0;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return ret;
}

void
kvt_mem_event_unsubscribe(kvt_mem_event_fn fn, void *arg)
{
	unsigned int i;

	pthread_mutex_lock(&reg_lock);
	for (i = 0; i < KVT_MEM_SUBSCRIBERS; i++)
		if (subs[i].fn == fn && subs[i].arg == arg)
			subs[i].fn = NULL;
	pthread_mutex_unlock(&reg_lock);
}

/*
 * Tell the subscribers an exported region came or went.  Called without
 * reg_lock: a subscriber takes the control lock, under which the control
 * thread reads the registry (kvt_mem_export_all()).
 */
static void
mem_event(const struct kvt_mem *m, int added)
{
	kvt_mem_event_fn fn[KVT_MEM_SUBSCRIBERS];
	void *arg[KVT_MEM_SUBSCRIBERS];
	unsigned int i;

	if (!(m->lm.flags & (KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE)))
		return;
	pthread_mutex_lock(&reg_lock);
	for (i = 0; i < KVT_MEM_SUBSCRIBERS; i++) {
		fn[i] = subs[i].fn;
		arg[i] = subs[i].arg;
	}
	pthread_mutex_unlock(&reg_lock);
	for (i = 0; i < KVT_MEM_SUBSCRIBERS; i++)
		if (fn[i] != NULL)
			fn[i](m, added, arg[i]);
}

struct kvt_mem *
kvt_mem_find(const void *addr, uint64_t len)
{
	if (len == 0)
		return NULL;
	return kvt_rangemap_find(&kvt_reg, (uintptr_t)addr, len);
}

/* Publish the registry with m added (add) or removed; under reg_lock. */
static int
reg_update(struct kvt_mem *m, int add)
{
	void *v;
	int ret;

	if (!add) {
		ret = kvt_rangemap_remove(&kvt_reg, (uintptr_t)m->lm.addr, &v);
		if (ret == 0)
			kvt_rangemap_remove(&kvt_handles, (uintptr_t)m, &v);
		return ret;
	}
	ret = kvt_rangemap_insert(&kvt_handles, (uintptr_t)m, 1, m);
	if (ret < 0)
		return ret;
	ret = kvt_rangemap_insert(&kvt_reg, (uintptr_t)m->lm.addr, m->lm.len, m);
	if (ret < 0)
		kvt_rangemap_remove(&kvt_handles, (uintptr_t)m, &v);
	return ret;
}

static struct kvt_alloc *
alloc_find(const void *addr, size_t len)
{
	struct kvt_alloc *a;
	uintptr_t p = (uintptr_t)addr;

	for (a = kvt_allocs; a != NULL; a = a->next)
		if (p >= (uintptr_t)a->addr && p - (uintptr_t)a->addr < a->len &&
		    len <= a->len - (p - (uintptr_t)a->addr))
			return a;
	return NULL;
}

/*
 * msync() with MS_ASYNC does nothing but check that the range is mapped
 * (ENOMEM for a hole), in one call whatever its length.
 */
int
kvt_host_mapped(const void *addr, size_t len)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(pg - 1);

	return msync((void *)start, (uintptr_t)addr + len - start, MS_ASYNC) == 0;
}

/* Where does addr live?  The memory devices say so for theirs. */
static int
mem_locate(void *addr, struct kvt_loc *loc)
{
	int node = -1;

	if (kvt_dev_locate(addr, loc) != NULL)
		return 0;
	loc->type = KVT_LOC_CPU;
	if (get_mempolicy(&node, NULL, 0, addr, MPOL_F_NODE | MPOL_F_ADDR) != 0)
		node = 0;
	loc->id = (int16_t)RTE_MAX(node, 0);
	return 0;
}

static void
ports_unregister(struct kvt_mem *m)
{
	struct kvt_port *p;
	unsigned int i;

	for (i = 0; i < kvt_port_count(); i++) {
		p = kvt_port_get(i);
		if ((m->lm.port_mask & (1u << i)) && p->pmd->ops->mem_unregister)
			p->pmd->ops->mem_unregister(p, &m->lm);
	}
	m->lm.port_mask = 0;
}

static int
ports_register(struct kvt_mem *m)
{
	char loc[16];
	struct kvt_port *p;
	unsigned int i;
	int ret;

	for (i = 0; i < kvt_port_count(); i++) {
		p = kvt_port_get(i);
		if (p->pmd->ops->mem_register == NULL)
			continue;
		ret = p->pmd->ops->mem_register(p, &m->lm);
		if (ret == -ENOTSUP)
			continue;
		if (ret < 0) {
			KVT_LOG(ERR, "register %p+%" PRIu64 ": port %s refused: %s",
				m->lm.addr, m->lm.len, p->name, strerror(-ret));
			ports_unregister(m);
			return ret;
		}
		m->lm.port_mask |= 1u << i;
	}
	if (m->lm.port_mask == 0) {
		kvt_loc_str(&m->lm.loc, loc, sizeof(loc));
		KVT_LOG(ERR, "register %p+%" PRIu64 ": no transport here moves %s memory",
			m->lm.addr, m->lm.len, loc);
		return -ENOTSUP;
	}
	return 0;
}

/* Memory is placed on cpu:N only if node N exists here (cuda:N is
 * checked by the device that serves it).  A registration may name any
 * node: there the location is a label the topology (sysfs, --kvt-topo)
 * interprets. */
static int
node_exists(const struct kvt_loc *loc)
{
	int max = numa_available() >= 0 ? numa_max_node() : 0;

	return loc->type != KVT_LOC_CPU || (loc->id >= 0 && loc->id <= max);
}

struct kvt_mem *
kvt_mem_register_flags(void *addr, size_t len, const char *locs, uint32_t flags)
{
	struct kvt_alloc *a;
	struct kvt_mem *m;
	struct kvt_loc loc;
	int ret;

	if (kvt_eng == NULL) {
		rte_errno = ENODEV;
		return NULL;
	}
	if (addr == NULL || len == 0 ||
	    (uintptr_t)addr + len < (uintptr_t)addr ||
	    (flags & ~(KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE |
		       KVT_MEM_F_FENCE)) != 0) {
		KVT_LOG(ERR, "register %p+%zu flags %#x: invalid", addr, len, flags);
		rte_errno = EINVAL;
		return NULL;
	}
	if (locs != NULL && kvt_parse_loc(locs, &loc) < 0) {
		KVT_LOG(ERR, "register %p: bad location '%s' (cpu:N or cuda:N)",
			addr, locs);
		rte_errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (m == NULL) {
		rte_errno = ENOMEM;
		return NULL;
	}
	m->magic = KVT_MEM_MAGIC;
	m->lm.addr = addr;
	m->lm.len = len;
	m->lm.flags = flags;
	m->lm.fd = -1;
	if (locs == NULL)
		mem_locate(addr, &loc);
	m->lm.loc = loc;
	if (loc.type == KVT_LOC_CPU && !kvt_host_mapped(addr, len)) {
		KVT_LOG(ERR, "register %p+%zu: not mapped in this process (%s)",
			addr, len, strerror(errno));
		free(m);
		rte_errno = EFAULT;
		return NULL;
	}

	pthread_mutex_lock(&reg_lock);
	if (kvt_rangemap_overlaps(&kvt_reg, (uintptr_t)addr, len)) {
		KVT_LOG(ERR, "register %p+%zu: overlaps a registered region",
			addr, len);
		ret = -EEXIST;
		goto unlock;
	}
	a = alloc_find(addr, len);
	if (a != NULL && a->fd >= 0) {
		m->lm.fd = a->fd;
		m->lm.fd_off = (uint64_t)((uint8_t *)addr - a->addr);
		m->lm.fd_ino = a->ino;
	}
	ret = ports_register(m);
	if (ret < 0)
		goto unlock;
	ret = reg_update(m, 1);
	if (ret < 0)
		goto unregister;
	if (a != NULL)
		a->regs++;
	m->id = ++kvt_mem_ids;
	pthread_mutex_unlock(&reg_lock);
	mem_event(m, 1);
	return m;

unregister:
	ports_unregister(m);
unlock:
	pthread_mutex_unlock(&reg_lock);
	free(m);
	rte_errno = -ret;
	return NULL;
}

struct kvt_mem *
kvt_mem_register(void *addr, size_t len, const char *loc, uint32_t flags)
{
	if (flags & KVT_MEM_F_FENCE) {
		rte_errno = EINVAL;
		return NULL;
	}
	return kvt_mem_register_flags(addr, len, loc, flags);
}

static int
registered(const struct kvt_mem *m)
{
	return kvt_rangemap_find(&kvt_handles, (uintptr_t)m, 1) == m;
}

int
kvt_mem_unregister(struct kvt_mem *m)
{
	struct kvt_alloc *a;
	int ret;

	if (kvt_eng == NULL)
		return -ENODEV;
	pthread_mutex_lock(&reg_lock);
	if (m == NULL || !registered(m)) {
		pthread_mutex_unlock(&reg_lock);
		return -EINVAL;
	}
	/* Unpublish first: once readers of the old registry are gone, no
	 * submit can start using m, and the in-flight count is final. */
	ret = reg_update(m, 0);
	if (ret == 0 && __atomic_load_n(&m->inflight, __ATOMIC_ACQUIRE) != 0) {
		reg_update(m, 1);
		KVT_LOG(ERR, "unregister %p: transfers in flight", m->lm.addr);
		ret = -EBUSY;
	}
	if (ret < 0) {
		pthread_mutex_unlock(&reg_lock);
		return ret;
	}
	a = alloc_find(m->lm.addr, m->lm.len);
	if (a != NULL)
		a->regs--;
	pthread_mutex_unlock(&reg_lock);
	mem_event(m, 0);
	/* Peers that copy into this memory themselves stop only when they
	 * hear of it: unregistered means closed once they say so. */
	if ((m->lm.flags & (KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE)) &&
	    kvt_eng->ctl_hooks != NULL)
		ret = kvt_eng->ctl_hooks->region_gone_wait(kvt_eng->o.timeout_ms);
	ports_unregister(m);
	m->magic = 0;
	free(m);
	return ret;
}

int
kvt_mem_export_one(const struct kvt_mem *m, struct kvt_buf *out)
{
	return kvt_wire_encode_region(out, &m->lm,
				      (m->lm.flags & KVT_MEM_F_FENCE) ?
				      m->lm.len / 8 : 0);
}

static int
export_one(void *v, void *out)
{
	const struct kvt_mem *m = v;

	if (!(m->lm.flags & (KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE)))
		return 0;
	return kvt_mem_export_one(m, out);
}

int
kvt_mem_export_all(struct kvt_buf *out)
{
	int ret;

	/* The registry lock keeps regions alive while their keys are read. */
	pthread_mutex_lock(&reg_lock);
	ret = kvt_rangemap_walk(&kvt_reg, export_one, out);
	pthread_mutex_unlock(&reg_lock);
	return ret;
}

static int
release_one(void *v, void *arg)
{
	struct kvt_mem *m = v;

	RTE_SET_USED(arg);
	ports_unregister(m);
	m->magic = 0;
	free(m);
	return 0;
}

void
kvt_mem_fini(void)
{
	struct kvt_rangemap r;
	struct kvt_alloc *a;

	pthread_mutex_lock(&reg_lock);
	r = kvt_reg;
	__atomic_store_n(&kvt_reg.root, NULL, __ATOMIC_RELEASE);
	kvt_reg.n = 0;
	kvt_rangemap_clear(&kvt_handles);
	/* The registrations go; the allocations stay the application's. */
	for (a = kvt_allocs; a != NULL; a = a->next)
		a->regs = 0;
	pthread_mutex_unlock(&reg_lock);
	kvt_rcu_synchronize();
	kvt_rangemap_walk(&r, release_one, NULL);
	kvt_rangemap_clear(&r);
}

/* ---- shareable allocations ---- */

static int
host_alloc(struct kvt_alloc *a, int node)
{
	struct stat st;
	char name[32];
	void *p;

	snprintf(name, sizeof(name), "kvt-%d", (int)getpid());
	a->fd = memfd_create(name, MFD_CLOEXEC);
	if (a->fd < 0)
		return -errno;
	if (ftruncate(a->fd, (off_t)a->len) != 0 || fstat(a->fd, &st) != 0)
		goto close_fd;
	a->ino = st.st_ino;
	/* Populated now: first-touch faults would land in the transfers. */
	p = mmap(NULL, a->len, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_POPULATE, a->fd, 0);
	if (p == MAP_FAILED)
		goto close_fd;
	a->addr = p;
	if (numa_available() >= 0 && node <= numa_max_node())
		numa_tonode_memory(p, a->len, node);
	return 0;

close_fd:
	close(a->fd);
	return -ENOMEM;
}


void *
kvt_mem_alloc(size_t len, const char *locs)
{
	struct kvt_alloc *a;
	struct kvt_loc loc;
	long pg = sysconf(_SC_PAGESIZE);
	int ret;

	if (kvt_eng == NULL) {
		rte_errno = ENODEV;
		return NULL;
	}
	if (len == 0 || len > (1ull << 46) ||
	    (locs != NULL && (kvt_parse_loc(locs, &loc) < 0 || !node_exists(&loc)))) {
		KVT_LOG(ERR, "alloc %zu at '%s': invalid", len, locs ? locs : "");
		rte_errno = EINVAL;
		return NULL;
	}
	if (locs == NULL) {
		loc.type = KVT_LOC_CPU;
		loc.id = 0;
	}
	a = calloc(1, sizeof(*a));
	if (a == NULL) {
		rte_errno = ENOMEM;
		return NULL;
	}
	a->len = RTE_ALIGN_CEIL(len, (size_t)pg);
	a->loc = loc;
	a->fd = -1;
	if (loc.type == KVT_LOC_CPU) {
		ret = host_alloc(a, loc.id);
	} else {
		ret = kvt_dev_alloc(&a->loc, a->len, (void **)&a->addr,
				    &a->dev);
	}
	if (ret < 0) {
		KVT_LOG(ERR, "alloc %zu at %s: %s", len, locs ? locs : "cpu:0",
			strerror(-ret));
		free(a);
		rte_errno = -ret;
		return NULL;
	}
	pthread_mutex_lock(&reg_lock);
	a->next = kvt_allocs;
	kvt_allocs = a;
	pthread_mutex_unlock(&reg_lock);
	return a->addr;
}

int
kvt_mem_free(void *addr)
{
	struct kvt_alloc **pp, *a;

	/* Allocations outlive the engine: freeing needs no engine. */
	pthread_mutex_lock(&reg_lock);
	for (pp = &kvt_allocs; *pp != NULL; pp = &(*pp)->next)
		if ((*pp)->addr == addr)
			break;
	a = *pp;
	if (a == NULL || a->regs != 0) {
		pthread_mutex_unlock(&reg_lock);
		if (a != NULL)
			KVT_LOG(ERR, "free %p: still registered", addr);
		return a == NULL ? -EINVAL : -EBUSY;
	}
	*pp = a->next;
	pthread_mutex_unlock(&reg_lock);
	if (a->fd >= 0) {
		munmap(a->addr, a->len);
		close(a->fd);
	} else {
		kvt_dev_free(a->dev, &a->loc, a->addr, a->len);
	}
	free(a);
	return 0;
}

unsigned int
kvt_target_begin(void)
{
	return kvt_rcu_read_lock();
}

void
kvt_target_end(unsigned int token)
{
	kvt_rcu_read_unlock(token);
}

uint8_t *
kvt_target_range(uint64_t addr, uint64_t len, uint32_t perm)
{
	struct kvt_mem *m;

	if (len == 0 || addr + len < addr)
		return NULL;
	m = kvt_mem_find((const void *)(uintptr_t)addr, len);
	if (m == NULL || m->lm.loc.type != KVT_LOC_CPU)
		return NULL;
	if (perm == KVT_MEM_F_FENCE)
		return (m->lm.flags & KVT_MEM_F_FENCE) && len == 8 && (addr & 7) == 0 ?
			(uint8_t *)(uintptr_t)addr : NULL;
	if ((m->lm.flags & KVT_MEM_F_FENCE) || (m->lm.flags & perm) != perm)
		return NULL;
	return (uint8_t *)(uintptr_t)addr;
}

/* Exported regions for the metadata descriptor. */
static int
json_one(void *v, void *arg)
{
	const struct kvt_lmem *m = &((struct kvt_mem *)v)->lm;
	char loc[16];

	if (!(m->flags & (KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE)))
		return 0;
	kvt_loc_str(&m->loc, loc, sizeof(loc));
	json_array_append_new(arg, json_pack("{s:I,s:I,s:i,s:s}",
		"base", (json_int_t)(uintptr_t)m->addr,
		"len", (json_int_t)m->len, "flags", (int)m->flags,
		"loc", loc));
	return 0;
}

json_t *
kvt_mem_export_json(void)
{
	json_t *a = json_array();

	pthread_mutex_lock(&reg_lock);
	kvt_rangemap_walk(&kvt_reg, json_one, a);
	pthread_mutex_unlock(&reg_lock);
	return a;
}
