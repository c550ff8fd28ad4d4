/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * shm: host memory shared between engines on one host.
 *
 * A region allocated with kvt_mem_alloc() is a memfd; a same-host peer
 * maps it through /proc/<pid>/fd/<n> (checking the inode, so a recycled fd
 * number cannot map the wrong file) and the lcore copies with memcpy.
 * Memory registered from elsewhere (malloc, a framework's allocator) has
 * no fd to share: it is reached with process_vm_writev/readv, which costs
 * a system call per slice and needs ptrace permission over the peer;
 * without it the import fails and says so.
 *
 * Ordering: the lcore copies a connection's slices in queue order and
 * stores fences and completion words with release semantics after the
 * copies, so data is visible before the fence that follows it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <rte_kvargs.h>

#include "kvt_pmd.h"

RTE_LOG_REGISTER(shm_logtype, kvt.pmd.shm, NOTICE);
#define SHM_LOG(level, fmt, ...)					\
	rte_log(RTE_LOG_ ## level, shm_logtype, "kvt.shm: " fmt "\n",	\
		##__VA_ARGS__)

#define SHM_MAX_PORTS 8
#define SHM_INBOX_SLOTS 256

enum { SHM_MEMFD = 1, SHM_CMA = 2 };

/* What a peer needs to reach one of our regions. */
struct shm_key {
	uint32_t kind;
	uint32_t pid;
	int32_t fd;
	uint32_t rsvd;
	uint64_t off;
	uint64_t ino;
	uint64_t len;
};

/* Our notification inbox for a peer, as sent in the connection reply. */
struct shm_inbox_key {
	uint32_t pid;
	int32_t fd;
	uint64_t ino;
	uint64_t size;
};

/* An imported region. */
struct shm_rmap {
	uint8_t *base;		/* where the peer's rm->base is mapped */
	void *map;
	size_t maplen;
	int cma;
	uint32_t pid;
};

struct shm_conn {
	struct kvt_conn c;	/* first */
	/* initiator: the peer's inbox, mapped */
	struct kvt_inbox *peer_inbox;
	size_t peer_inbox_len;
	/* acceptor: our inbox for the peer */
	struct kvt_inbox *inbox;
	size_t inbox_len;
	int inbox_fd;
};

static int
shm_probe(const struct kvt_pmd *pmd, const char *args)
{
	static const char *const keys[] = { "ports", NULL };
	struct rte_kvargs *kv;
	const char *v;
	char name[32], *end;
	long n = 1, i;

	if (args != NULL && *args != '\0') {
		kv = rte_kvargs_parse(args, keys);
		if (kv == NULL)
			return -EINVAL;
		v = rte_kvargs_get(kv, "ports");
		if (v != NULL) {
			n = strtol(v, &end, 10);
			if (*end != '\0' || n < 1 || n > SHM_MAX_PORTS)
				n = -1;
		}
		rte_kvargs_free(kv);
		if (n < 0)
			return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "shm%ld", i);
		if (kvt_port_create(pmd, name, -1, NULL) == NULL)
			return -ENOSPC;
	}
	return 0;
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
	return errno == ESRCH ? -ECONNRESET : errno == EPERM ? -EPERM : -EIO;
}

static int
shm_do(struct kvt_port *port, struct kvt_desc *d)
{
	struct shm_conn *sc = (struct shm_conn *)d->conn;
	const struct shm_rmap *rmap;
	uint8_t *at;

	if (d->op == KVT_DESC_DONE) {
		kvt_desc_store_done(d);
		return 0;
	}
	if (__atomic_load_n(&d->conn->dead, __ATOMIC_ACQUIRE))
		return -ECONNRESET;
	if (d->op == KVT_DESC_NOTIFY)
		return sc->peer_inbox != NULL ?
			kvt_inbox_push(sc->peer_inbox, d->data, d->len) :
			-ENOTSUP;
	rmap = d->rm->key[port->id];
	if (rmap->cma && d->op != KVT_DESC_FENCE)
		return cma_copy(rmap, d);
	if (rmap->cma)
		return -EPERM;	/* fence tables are always memfd */
	at = rmap->base + (d->remote - d->rm->base);
	switch (d->op) {
	case KVT_DESC_WRITE:
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

	for (i = 0; i < n; i++)
		kvt_desc_complete(d[i], shm_do(port, d[i]));
}

static unsigned int
shm_poll(struct kvt_port *port)
{
	RTE_SET_USED(port);
	return 0;
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
	struct shm_key k = {
		.kind = m->fd >= 0 ? SHM_MEMFD : SHM_CMA,
		.pid = (uint32_t)getpid(),
		.fd = m->fd,
		.off = m->fd_off,
		.ino = m->fd_ino,
		.len = m->len,
	};

	RTE_SET_USED(port);
	return kvt_buf_put(key, &k, sizeof(k));
}

/* Map a peer's memfd (inode-checked) at [off, off + len). */
static void *
map_peer_fd(uint32_t pid, int fd, uint64_t ino, uint64_t off, uint64_t len,
	    int prot, size_t *maplen, size_t *delta)
{
	char path[64];
	struct stat st;
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t aoff = off & ~(uint64_t)(pg - 1);
	void *p;
	int pfd;

	snprintf(path, sizeof(path), "/proc/%u/fd/%d", pid, fd);
	pfd = open(path, (prot & PROT_WRITE) ? O_RDWR : O_RDONLY);
	if (pfd < 0)
		return NULL;
	if (fstat(pfd, &st) != 0 || (uint64_t)st.st_ino != ino ||
	    (uint64_t)st.st_size < off + len) {
		close(pfd);
		errno = ESTALE;
		return NULL;
	}
	*delta = (size_t)(off - aoff);
	*maplen = (size_t)(len + *delta);
	p = mmap(NULL, *maplen, prot, MAP_SHARED | MAP_POPULATE, pfd,
		 (off_t)aoff);
	close(pfd);
	return p == MAP_FAILED ? NULL : p;
}

static int
shm_rmem_import(struct kvt_conn *c, struct kvt_rmem *rm, const uint8_t *key,
		size_t len)
{
	struct shm_rmap *rmap;
	struct shm_key k;
	size_t delta = 0;
	struct iovec l, r;
	uint8_t probe;
	int prot = PROT_READ;

	if (len != sizeof(k) || !c->info.same_host)
		return -ENOTSUP;
	memcpy(&k, key, sizeof(k));
	if (k.len != rm->len || k.pid != c->info.pid)
		return -EPROTO;
	if (rm->loc.type != KVT_LOC_CPU)
		return -ENOTSUP;
	rmap = calloc(1, sizeof(*rmap));
	if (rmap == NULL)
		return -ENOMEM;
	rmap->pid = k.pid;
	if (k.kind == SHM_MEMFD) {
		if (rm->flags & KVT_MEM_REMOTE_WRITE)
			prot |= PROT_WRITE;
		rmap->map = map_peer_fd(k.pid, k.fd, k.ino, k.off, k.len, prot,
					&rmap->maplen, &delta);
		if (rmap->map == NULL) {
			SHM_LOG(ERR, "cannot map region %#" PRIx64 " of pid %u: %s",
				rm->base, k.pid, strerror(errno));
			free(rmap);
			return -errno;
		}
		rmap->base = (uint8_t *)rmap->map + delta;
	} else {
		/* No fd: cross-memory attach.  Check we may, once, now. */
		l.iov_base = &probe;
		l.iov_len = 1;
		r.iov_base = (void *)(uintptr_t)rm->base;
		r.iov_len = 1;
		if (process_vm_readv((pid_t)k.pid, &l, 1, &r, 1, 0) != 1) {
			SHM_LOG(ERR, "region %#" PRIx64 " of pid %u is not memfd memory and process_vm_readv is refused (%s): allocate it with kvt_mem_alloc(), or run both engines as one user with ptrace allowed",
				rm->base, k.pid, strerror(errno));
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
	if (rmap->map != NULL)
		munmap(rmap->map, rmap->maplen);
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
	sc->inbox_fd = -1;
	/* Spread our ports over theirs. */
	sc->c.remote_port = eps[port->id % neps].port_id;
	*out = &sc->c;
	return 0;
}

static int
shm_conn_accept(struct kvt_port *port, const struct kvt_peer_info *pi,
		const uint8_t *req, size_t len, struct kvt_buf *rep,
		struct kvt_conn **out)
{
	struct shm_inbox_key k = { .pid = (uint32_t)getpid() };
	struct shm_conn *sc;
	struct stat st;
	int ret;

	RTE_SET_USED(port);
	RTE_SET_USED(req);
	RTE_SET_USED(len);
	if (!pi->same_host)
		return -ENOTSUP;
	sc = calloc(1, sizeof(*sc));
	if (sc == NULL)
		return -ENOMEM;
	sc->inbox_len = kvt_inbox_size(SHM_INBOX_SLOTS);
	sc->inbox_fd = memfd_create("kvt-inbox", MFD_CLOEXEC);
	if (sc->inbox_fd < 0 ||
	    ftruncate(sc->inbox_fd, (off_t)sc->inbox_len) != 0 ||
	    fstat(sc->inbox_fd, &st) != 0) {
		ret = -errno;
		goto close_fd;
	}
	sc->inbox = mmap(NULL, sc->inbox_len, PROT_READ | PROT_WRITE,
			 MAP_SHARED, sc->inbox_fd, 0);
	if (sc->inbox == MAP_FAILED) {
		ret = -errno;
		goto close_fd;
	}
	kvt_inbox_init(sc->inbox, SHM_INBOX_SLOTS);
	ret = kvt_inbox_attach(sc->inbox, pi->name);
	if (ret < 0)
		goto unmap;
	k.fd = sc->inbox_fd;
	k.ino = st.st_ino;
	k.size = sc->inbox_len;
	ret = kvt_buf_put(rep, &k, sizeof(k));
	if (ret < 0)
		goto detach;
	*out = &sc->c;
	return 0;

detach:
	kvt_inbox_detach(sc->inbox);
unmap:
	munmap(sc->inbox, sc->inbox_len);
close_fd:
	if (sc->inbox_fd >= 0)
		close(sc->inbox_fd);
	free(sc);
	return ret;
}

static int
shm_conn_ready(struct kvt_conn *c, const uint8_t *rep, size_t len)
{
	struct shm_conn *sc = (struct shm_conn *)c;
	struct shm_inbox_key k;
	size_t delta;

	if (len != sizeof(k))
		return -EPROTO;
	memcpy(&k, rep, sizeof(k));
	if (k.pid != c->info.pid || k.size != kvt_inbox_size(SHM_INBOX_SLOTS))
		return -EPROTO;
	sc->peer_inbox = map_peer_fd(k.pid, k.fd, k.ino, 0, k.size,
				     PROT_READ | PROT_WRITE,
				     &sc->peer_inbox_len, &delta);
	if (sc->peer_inbox == NULL) {
		SHM_LOG(ERR, "cannot map the inbox of pid %u: %s", k.pid,
			strerror(errno));
		return -errno;
	}
	return 0;
}

static void
inbox_release(void *arg)
{
	struct shm_conn *sc = arg;

	munmap(sc->inbox, sc->inbox_len);
	close(sc->inbox_fd);
	free(sc);
}

static void
shm_conn_close(struct kvt_conn *c)
{
	struct shm_conn *sc = (struct shm_conn *)c;

	if (sc->peer_inbox != NULL)
		munmap(sc->peer_inbox, sc->peer_inbox_len);
	if (sc->inbox != NULL)
		/* Messages the peer sent before it left are still ours. */
		kvt_inbox_retire(sc->inbox, inbox_release, sc);
	else
		free(sc);
}

static const struct kvt_pmd_ops shm_ops = {
	.flags = KVT_PMD_F_ORDERED,
	.rank = 30,
	.probe = shm_probe,
	.submit = shm_submit,
	.poll = shm_poll,
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
