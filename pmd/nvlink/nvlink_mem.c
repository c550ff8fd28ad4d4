/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nvlink region keys and imports.  A region of kvt_mem_alloc() memory is
 * exported as its allocation's fabric handle or POSIX fd (the peer
 * duplicates the fd with pidfd_getfd); other device memory (cudaMalloc,
 * a framework's allocator) as a legacy CUDA IPC handle (cuIpc*); host fence tables
 * as their memfd, which the importer maps and registers with CUDA so the
 * GPU can store fences there.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "nvlink.h"

int
nv_dev_by_uuid(const uint8_t *uuid)
{
	int i;

	for (i = 0; i < nv_sys.ndev; i++)
		if (memcmp(nv_sys.dev[i].uuid, uuid, 16) == 0)
			return i;
	return -1;
}

/* ---- region keys ---- */

/* A legacy IPC handle of the allocation addr lies in, and its extent. */
static int
ipc_export(int dev, const void *addr, CUipcMemHandle *h, CUdeviceptr *base,
	   size_t *size)
{
	CUresult r;

	if (nv_ctx_push(dev) < 0)
		return -EIO;
	r = nv_cu.cuMemGetAddressRange(base, size, (CUdeviceptr)(uintptr_t)addr);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuIpcGetMemHandle(h, *base);
	nv_ctx_pop();
	return r == CUDA_SUCCESS ? 0 : -EINVAL;
}

int
nv_mem_register(struct kvt_port *port, struct kvt_lmem *m)
{
	struct nv_lmem *k;
	struct nv_alloc *a;
	CUdeviceptr base = 0;
	size_t size = 0;
	CUipcMemHandle ipc;

	/* Host memory: only fence tables, which the GPU writes into. */
	if (m->loc.type == KVT_LOC_CPU)
		return (m->flags & KVT_MEM_F_FENCE) && m->fd >= 0 ? 0 : -ENOTSUP;
	if (m->loc.id >= nv_sys.ndev)
		return -ENODEV;
	if (((struct nv_port *)port->priv)->dev >= 0 &&
	    ((struct nv_port *)port->priv)->dev != m->loc.id)
		return -ENOTSUP;	/* another GPU's port takes it */
	k = calloc(1, sizeof(*k));
	if (k == NULL)
		return -ENOMEM;
	k->dev = m->loc.id;
	k->key.pid = (uint32_t)getpid();
	memcpy(k->key.uuid, nv_sys.dev[k->dev].uuid, 16);
	pthread_mutex_lock(&nv_lock);
	a = nv_alloc_find((uintptr_t)m->addr);
	if (a != NULL) {
		k->key.off = (uintptr_t)m->addr - a->va;
		k->key.size = a->size;
		k->key.fd = a->fd;
		if (a->has_fabric) {
			k->key.kind = NV_KEY_FABRIC;
			memcpy(k->key.handle, &a->fabric, sizeof(a->fabric));
		} else {
			k->key.kind = NV_KEY_FD;
		}
	}
	pthread_mutex_unlock(&nv_lock);
	if (a == NULL) {
		/* cudaMalloc-style memory: a legacy IPC handle of its
		 * allocation. */
		if (ipc_export(k->dev, m->addr, &ipc, &base, &size) < 0) {
			NV_LOG(ERR, "register %p: not device memory CUDA can export (cudaMalloc or kvt_mem_alloc memory needed)",
			       m->addr);
			free(k);
			return -EINVAL;
		}
		k->key.kind = NV_KEY_IPC;
		k->key.off = (uintptr_t)m->addr - base;
		k->key.size = size;
		memcpy(k->key.handle, &ipc, sizeof(ipc));
	}
	m->key[port->id] = k;
	return 0;
}

void
nv_mem_unregister(struct kvt_port *port, struct kvt_lmem *m)
{
	free(m->key[port->id]);
	m->key[port->id] = NULL;
}

int
nv_mem_export(struct kvt_port *port, const struct kvt_lmem *m,
	      struct kvt_buf *key)
{
	struct nv_key k = { .kind = NV_KEY_HOST };
	const struct nv_lmem *l = m->key[port->id];

	if (m->loc.type == KVT_LOC_CPU) {
		k.pid = (uint32_t)getpid();
		if (kvt_memfd_key(m, &k.host) < 0)
			return -ENOTSUP;
		return kvt_buf_put(key, &k, sizeof(k));
	}
	return kvt_buf_put(key, &l->key, sizeof(l->key));
}

/* ---- imports (the device's context is current) ---- */

static int
dup_peer_fd(uint32_t pid, int fd)
{
	int pidfd, nfd;

	pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (pidfd < 0)
		return -errno;
	nfd = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	close(pidfd);
	return nfd < 0 ? -errno : nfd;
}

static int
import_vmm(struct nv_rmem *r, const struct nv_key *k)
{
	CUmemFabricHandle fh;
	void *os;
	int fd = -1, ret = -EIO;
	CUresult cr;

	if (k->kind == NV_KEY_FABRIC) {
		memcpy(&fh, k->handle, sizeof(fh));
		cr = nv_cu.cuMemImportFromShareableHandle(&r->h, &fh,
				CU_MEM_HANDLE_TYPE_FABRIC);
	} else {
		fd = dup_peer_fd(k->pid, k->fd);
		if (fd < 0) {
			NV_LOG(ERR, "pidfd_getfd from pid %u: %s (same user and ptrace permission needed)",
			       k->pid, strerror(-fd));
			return fd;
		}
		os = (void *)(uintptr_t)fd;
		cr = nv_cu.cuMemImportFromShareableHandle(&r->h, os,
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	}
	if (fd >= 0)
		close(fd);
	if (cr != CUDA_SUCCESS) {
		NV_LOG(ERR, "cuMemImportFromShareableHandle: %s", nv_err(cr));
		return -EIO;
	}
	r->size = k->size;
	if (nv_cu.cuMemAddressReserve(&r->va, r->size, 0, 0, 0) != CUDA_SUCCESS)
		goto release;
	if (nv_cu.cuMemMap(r->va, r->size, 0, r->h, 0) != CUDA_SUCCESS)
		goto free_va;
	ret = nv_map_all_devices(r->va, r->size);
	if (ret < 0)
		goto unmap;
	r->base = (uint8_t *)(uintptr_t)r->va + k->off;
	return 0;

unmap:
	nv_cu.cuMemUnmap(r->va, r->size);
free_va:
	nv_cu.cuMemAddressFree(r->va, r->size);
release:
	nv_cu.cuMemRelease(r->h);
	return ret;
}

static int
import_ipc(struct nv_rmem *r, const struct nv_key *k)
{
	CUipcMemHandle h;
	CUresult e;

	memcpy(&h, k->handle, sizeof(h));
	e = nv_cu.cuIpcOpenMemHandle(&r->ipc_base, h,
				     CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	if (e != CUDA_SUCCESS) {
		NV_LOG(ERR, "cuIpcOpenMemHandle: %s", nv_err(e));
		return -EIO;
	}
	r->base = (uint8_t *)(uintptr_t)r->ipc_base + k->off;
	return 0;
}

static int
import_host(struct nv_rmem *r, const struct nv_key *k)
{
	int ret = kvt_memfd_map(&k->host, PROT_READ | PROT_WRITE, &r->host);
	CUresult e = CUDA_ERROR_INVALID_CONTEXT;

	if (ret < 0)
		return ret;
	if (nv_ctx_push(0) == 0) {
		e = nv_cu.cuMemHostRegister(r->host.map, r->host.len,
					    CU_MEMHOSTREGISTER_PORTABLE |
					    CU_MEMHOSTREGISTER_DEVICEMAP);
		nv_ctx_pop();
	}
	if (e != CUDA_SUCCESS) {
		kvt_map_release(&r->host);
		return -EIO;
	}
	r->base = (uint8_t *)(uintptr_t)nv_host_dptr(r->host.map) +
		(r->host.base - (uint8_t *)r->host.map);
	return 0;
}

int
nv_rmem_import(struct kvt_conn *c, struct kvt_rmem *rm, const uint8_t *key,
	       size_t len)
{
	struct nv_rmem *r;
	struct nv_key k;
	int ret;

	if (len != sizeof(k) || !c->info.same_host)
		return -ENOTSUP;
	memcpy(&k, key, sizeof(k));
	if (k.pid != c->info.pid)
		return -EPROTO;
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -ENOMEM;
	r->kind = (int)k.kind;
	if (k.kind == NV_KEY_HOST) {
		if (!(rm->flags & KVT_MEM_F_FENCE)) {
			free(r);
			return -ENOTSUP;
		}
		r->dev = -1;
		ret = import_host(r, &k);
	} else {
		r->dev = nv_dev_by_uuid(k.uuid);
		if (r->dev < 0 || k.off + rm->len > k.size) {
			free(r);
			return -ENOTSUP;	/* a GPU we cannot see */
		}
		if (nv_ctx_push(r->dev) < 0) {
			free(r);
			return -EIO;
		}
		ret = k.kind == NV_KEY_IPC ? import_ipc(r, &k) :
			import_vmm(r, &k);
		nv_ctx_pop();
	}
	if (ret < 0) {
		free(r);
		return ret;
	}
	rm->key[c->port->id] = r;
	return 0;
}

void
nv_rmem_release(struct kvt_conn *c, struct kvt_rmem *rm)
{
	struct nv_rmem *r = rm->key[c->port->id];

	if (r == NULL)
		return;
	if (nv_ctx_push(r->dev >= 0 ? r->dev : 0) < 0)
		goto out;
	if (r->kind == NV_KEY_HOST) {
		nv_cu.cuMemHostUnregister(r->host.map);
	} else if (r->kind == NV_KEY_IPC) {
		nv_cu.cuIpcCloseMemHandle(r->ipc_base);
	} else {
		nv_cu.cuMemUnmap(r->va, r->size);
		nv_cu.cuMemAddressFree(r->va, r->size);
		nv_cu.cuMemRelease(r->h);
	}
	nv_ctx_pop();
out:
	if (r->kind == NV_KEY_HOST)
		kvt_map_release(&r->host);
	free(r);
	rm->key[c->port->id] = NULL;
}
