/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * shm: host memory shared between engines on one host.
 *
 * A region allocated with kvt_mem_alloc() is a memfd; a same-host peer
 * maps it through /proc/<pid>/fd/<n> (checking the inode, so a recycled fd
 * number cannot map the wrong file) and the lcore copies with memcpy, or
 * with streaming stores for bulk-class writes (copy_stream()).
 * Memory registered from elsewhere (malloc, a framework's allocator) has
 * no fd to share: it is reached with process_vm_writev/readv, which costs
 * a system call per slice and needs ptrace permission over the peer;
 * without it the import fails and says so.
 *
 * Ordering: the lcore copies a connection's slices in queue order and
 * stores fences and completion words with release semantics after the
 * copies, so data is visible before the fence that follows it.  A copy
 * is finished when its slice completes, and nothing copies on our behalf
 * anywhere else: no byte of a slice, done or failed, lands later (what
 * tcp must fence off when it gives up a socket).  The target cannot
 * refuse our copies, so a region it unregisters is closed once we confirm
 * we stopped using it (KVT_PMD_F_PEER_COPIES).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/uio.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "kvt_pmd_kit.h"

RTE_LOG_REGISTER(shm_logtype, kvt.pmd.shm, NOTICE);
#define SHM_LOG(level, fmt, ...)					\
	rte_log(RTE_LOG_ ## level, shm_logtype, "kvt.shm: " fmt "\n",	\
		##__VA_ARGS__)

#define SHM_MAX_PORTS 8

enum { SHM_MEMFD = 1, SHM_CMA = 2 };

/* What a peer needs to reach one of our regions. */
struct shm_key {
	uint32_t kind;
	uint32_t rsvd;
	struct kvt_memfd_key m;	/* pid always; fd fields for SHM_MEMFD */
};

/* An imported region. */
struct shm_rmap {
	struct kvt_map map;	/* SHM_MEMFD */
	int cma;
	uint32_t pid;
};

struct shm_conn {
	struct kvt_conn c;	/* first */
	struct kvt_map peer_inbox;	/* initiator: the peer's inbox */
	struct kvt_shared_inbox inbox;	/* acceptor: ours for the peer */
};

static int
shm_probe(const struct kvt_pmd *pmd, const char *args)
{
	return kvt_probe_ports(pmd, args, "shm", SHM_MAX_PORTS);
}

/* ---- data path ---- */

static int
cma_copy(const struct shm_rmap *rmap, const struct kvt_desc *d)
{
	struct iovec l = { .iov_base = d->local, .iov_len = d->len };
	struct iovec r = { .iov_base = (void *)(uintptr_t)d->remote,
			   .iov_len = d->len };
	ssize_t n;

	n = d->op == KVT_DESC_WRITE ?
		process_vm_writev((pid_t)rmap->pid, &l, 1, &r, 1, 0) :
		process_vm_readv((pid_t)rmap->pid, &l, 1, &r, 1, 0);
	if (n == (ssize_t)d->len)
		return 0;
	if (n >= 0)
		return -EIO;
	if (errno == EFAULT)
		return -EFAULT;	/* a range unmapped under its registration */
	return errno == ESRCH ? -ECONNRESET : errno == EPERM ? -EPERM : -EIO;
}

/* Bulk-class writes of this size or more stream past the cache. */
#define SHM_STREAM_MIN (16u << 10)

/*
 * Copy with streaming stores: the destination is not read into the cache
 * first and does not push out what urgent work keeps there (rings,
 * descriptors, its own data).  The fence orders the stores before the
 * completion the caller stores next.
 */
static void
copy_stream(uint8_t *dst, const uint8_t *src, size_t len)
{
#if defined(__x86_64__)
	size_t head = RTE_MIN((16 - ((uintptr_t)dst & 15)) & 15, len), i;

	memcpy(dst, src, head);
	dst += head;
	src += head;
	len -= head;
	for (i = 0; i + 64 <= len; i += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(src + i + 48));

		_mm_stream_si128((__m128i *)(dst + i), a);
		_mm_stream_si128((__m128i *)(dst + i + 16), b);
		_mm_stream_si128((__m128i *)(dst + i + 32), c);
		_mm_stream_si128((__m128i *)(dst + i + 48), e);
	}
	memcpy(dst + i, src + i, len - i);
	_mm_sfence();
#else
	memcpy(dst, src, len);
#endif
}

static int
shm_do(struct kvt_port *port, struct kvt_desc *d)
{
	struct shm_conn *sc = (struct shm_conn *)d->conn;
	const struct shm_rmap *rmap;
	uint8_t *at;

	if (__atomic_load_n(&d->conn->dead, __ATOMIC_ACQUIRE))
		return -ECONNRESET;
	if (d->op == KVT_DESC_NOTIFY)
		return sc->peer_inbox.base != NULL ?
			kvt_inbox_push((struct kvt_inbox *)sc->peer_inbox.base,
				       d->data, d->len) : -ENOTSUP;
	rmap = d->rm->key[port->id];
	if (rmap->cma && d->op != KVT_DESC_FENCE)
		return cma_copy(rmap, d);
	if (rmap->cma)
		return -EPERM;	/* fence tables are always memfd */
	at = rmap->map.base + (d->remote - d->rm->base);
	switch (d->op) {
	case KVT_DESC_WRITE:
		if (d->prio == KVT_PRIO_BULK && d->len >= SHM_STREAM_MIN)
			copy_stream(at, d->local, d->len);
		else
			memcpy(at, d->local, d->len);
		break;
	case KVT_DESC_READ:
		memcpy(d->local, at, d->len);
		break;
	case KVT_DESC_FENCE:
		__atomic_store_n((uint64_t *)at, d->value, __ATOMIC_RELEASE);
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static void
shm_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n)
{
	unsigned int i;

	/* A DONE is the engine's store: nothing to do but report it. */
	for (i = 0; i < n; i++)
		kvt_desc_complete(port, d[i], d[i]->op == KVT_DESC_DONE ? 0 :
				  shm_do(port, d[i]));
}

static unsigned int
shm_poll(struct kvt_port *port)
{
	RTE_SET_USED(port);
	return 0;
}

/* Every copy ends inside submit: only a submission gives work (a
 * peer's writes land without this lcore). */
static uint64_t
shm_idle(struct kvt_port *port, int *fd)
{
	RTE_SET_USED(port);
	*fd = -1;
	return KVT_IDLE_FOREVER;
}

/* ---- memory ---- */

static int
shm_mem_register(struct kvt_port *port, struct kvt_lmem *m)
{
	RTE_SET_USED(port);
	return m->loc.type == KVT_LOC_CPU ? 0 : -ENOTSUP;
}

static int
shm_mem_export(struct kvt_port *port, const struct kvt_lmem *m,
	       struct kvt_buf *key)
{
	struct shm_key k = { .kind = SHM_MEMFD };

	RTE_SET_USED(port);
	if (kvt_memfd_key(m, &k.m) < 0) {
		k.kind = SHM_CMA;
		k.m.pid = (uint32_t)getpid();
		k.m.len = m->len;
	}
	return kvt_buf_put(key, &k, sizeof(k));
}

static int
shm_rmem_import(struct kvt_conn *c, struct kvt_rmem *rm, const uint8_t *key,
		size_t len)
{
	struct shm_rmap *rmap;
	struct shm_key k;
	struct iovec l, r;
	uint8_t probe;
	int prot = PROT_READ, ret;

	if (len != sizeof(k) || !c->info.same_host)
		return -ENOTSUP;
	memcpy(&k, key, sizeof(k));
	if (k.m.len != rm->len || k.m.pid != c->info.pid)
		return -EPROTO;
	if (rm->loc.type != KVT_LOC_CPU)
		return -ENOTSUP;
	rmap = calloc(1, sizeof(*rmap));
	if (rmap == NULL)
		return -ENOMEM;
	rmap->pid = k.m.pid;
	if (k.kind == SHM_MEMFD) {
		if (rm->flags & KVT_MEM_REMOTE_WRITE)
			prot |= PROT_WRITE;
		ret = kvt_memfd_map(&k.m, prot, &rmap->map);
		if (ret < 0) {
			SHM_LOG(ERR, "cannot map region %#" PRIx64 " of pid %u: %s",
				rm->base, k.m.pid, strerror(-ret));
			free(rmap);
			return ret;
		}
	} else {
		/* No fd: cross-memory attach.  Check we may, once, now. */
		l.iov_base = &probe;
		l.iov_len = 1;
		r.iov_base = (void *)(uintptr_t)rm->base;
		r.iov_len = 1;
		if (process_vm_readv((pid_t)k.m.pid, &l, 1, &r, 1, 0) != 1) {
			SHM_LOG(ERR, "region %#" PRIx64 " of pid %u is not memfd memory and process_vm_readv is refused (%s): allocate it with kvt_mem_alloc(), or run both engines as one user with ptrace allowed",
				rm->base, k.m.pid, strerror(errno));
			free(rmap);
			return -EPERM;
		}
		rmap->cma = 1;
	}
	rm->key[c->port->id] = rmap;
	return 0;
}

static void
shm_rmem_release(struct kvt_conn *c, struct kvt_rmem *rm)
{
	struct shm_rmap *rmap = rm->key[c->port->id];

	if (rmap == NULL)
		return;
	kvt_map_release(&rmap->map);
	free(rmap);
	rm->key[c->port->id] = NULL;
}

/* ---- connections ---- */

static int
shm_conn_open(struct kvt_port *port, const struct kvt_peer_info *pi,
	      const struct kvt_endpoint *eps, unsigned int neps,
	      struct kvt_buf *req, struct kvt_conn **out)
{
	struct shm_conn *sc;

	RTE_SET_USED(req);
	if (!pi->same_host)
		return -ENOTSUP;
	sc = calloc(1, sizeof(*sc));
	if (sc == NULL)
		return -ENOMEM;
	/* Spread our ports over theirs. */
	sc->c.remote_port = eps[port->id % neps].port_id;
	*out = &sc->c;
	return 0;
}

static int
shm_conn_accept(struct kvt_port *port, const struct kvt_accept *a,
		const uint8_t *req, size_t len, struct kvt_buf *rep,
		struct kvt_conn **out)
{
	struct shm_conn *sc;
	int ret;

	RTE_SET_USED(req);
	RTE_SET_USED(len);
	if (!a->info.same_host)
		return -ENOTSUP;
	sc = calloc(1, sizeof(*sc));
	if (sc == NULL)
		return -ENOMEM;
	kvt_conn_accept_init(&sc->c, port, a);
	ret = kvt_shared_inbox_create(&sc->inbox, a->info.name, rep);
	if (ret < 0) {
		free(sc);
		return ret;
	}
	*out = &sc->c;
	return 0;
}

static int
shm_conn_ready(struct kvt_conn *c, const uint8_t *rep, size_t len)
{
	struct shm_conn *sc = (struct shm_conn *)c;
	int ret;

	ret = kvt_shared_inbox_map(rep, len, c->info.pid, &sc->peer_inbox);
	if (ret < 0)
		SHM_LOG(ERR, "cannot map the inbox of pid %u: %s", c->info.pid,
			strerror(-ret));
	return ret;
}

static void
shm_conn_close(struct kvt_conn *c)
{
	struct shm_conn *sc = (struct shm_conn *)c;

	kvt_map_release(&sc->peer_inbox);
	kvt_shared_inbox_close(&sc->inbox);
	free(sc);
}

static const struct kvt_pmd_ops shm_ops = {
	.flags = KVT_PMD_F_ORDERED | KVT_PMD_F_PEER_COPIES,
	.rank = 30,
	.probe = shm_probe,
	.submit = shm_submit,
	.poll = shm_poll,
	.idle = shm_idle,
	.mem_register = shm_mem_register,
	.mem_export = shm_mem_export,
	.conn_open = shm_conn_open,
	.conn_accept = shm_conn_accept,
	.conn_ready = shm_conn_ready,
	.conn_close = shm_conn_close,
	.rmem_import = shm_rmem_import,
	.rmem_release = shm_rmem_release,
};

KVT_PMD_REGISTER(shm, shm_ops);
