/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nvlink: GPU-to-GPU transfers between processes of one host.
 *
 * Memory: device memory from kvt_mem_alloc("cuda:N") is cuMemCreate memory
 * exported as a fabric handle where the device and system allow it, else
 * as a POSIX fd that the peer duplicates with pidfd_getfd; other device
 * memory (cudaMalloc, a framework's allocator) goes through legacy CUDA
 * IPC handles.  Fence tables in host memory are memfd mappings the GPU
 * writes to once registered with cudaHostRegister.
 *
 * Data path: the port takes whole submissions (KVT_PMD_F_WHOLE).  For
 * each (local GPU, remote GPU) pair there is a non-blocking stream (a
 * "lane").  Large requests go to the copy engines (cudaMemcpyAsync); the
 * small pages of paged KV cache go to one launch of a gather kernel over
 * the submission's (src, dst, len) list, on at most the SM budget.  The
 * kernel's last block, after all blocks' copies are visible system-wide,
 * stores the fence (room id), the submission's done word and the lane's
 * progress word (see kernels.cu).  Stream order puts the copy-engine
 * copies before that kernel.  A small request skips the launch: the
 * lane's resident kernel picks it up from pinned host memory (see "Resident
 * kernels" below).  No completion is ever learned by querying
 * the stream: the lcore and kvt_poll() read words the GPU stored.
 *
 * A notification is pushed by the lcore into the peer's inbox once the
 * lane's progress word shows the submission's kernel finished; only then
 * is the done word stored.
 *
 * Only cudart is linked; driver entry points are looked up at run time,
 * so the library starts on machines without a driver (the probe then
 * makes no port and says why).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <rte_cycles.h>
#include <rte_kvargs.h>
#include <rte_pause.h>

#include "kvt_pmd.h"
#include "nvlink.h"

RTE_LOG_REGISTER(nv_logtype, kvt.pmd.nvlink, NOTICE);
#define NV_LOG(level, fmt, ...)						\
	rte_log(RTE_LOG_ ## level, nv_logtype, "kvt.nvlink: " fmt "\n",	\
		##__VA_ARGS__)

#define NV_MAX_DEV 16
#define NV_RING 262144		/* gather tasks per lane */
#define NV_TICKETS 1024		/* launches in flight per lane */
#define NV_CE_MIN (4u << 20)	/* requests this large use copy engines */
#define NV_DEFAULT_SMS 16
#define NV_BLOCKS_PER_SM 4
#define NV_RES_MAX (64u << 10)	/* requests this small go to a resident kernel */
#define NV_RES_IDLE_US 200	/* it returns after this long without one */

/* ---- driver entry points ---- */

static struct {
	CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t,
			       const CUmemAllocationProp *, unsigned long long);
	CUresult (*mem_export)(void *, CUmemGenericAllocationHandle,
			       CUmemAllocationHandleType, unsigned long long);
	CUresult (*mem_import)(CUmemGenericAllocationHandle *, void *,
			       CUmemAllocationHandleType);
	CUresult (*mem_map)(CUdeviceptr, size_t, size_t,
			    CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*mem_unmap)(CUdeviceptr, size_t);
	CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *,
				   size_t);
	CUresult (*mem_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
				unsigned long long);
	CUresult (*mem_free_va)(CUdeviceptr, size_t);
	CUresult (*mem_release)(CUmemGenericAllocationHandle);
	CUresult (*mem_granularity)(size_t *, const CUmemAllocationProp *,
				    CUmemAllocationGranularity_flags);
	CUresult (*mem_range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*dev_attr)(int *, CUdevice_attribute, CUdevice);
	CUresult (*write_value64)(CUstream, CUdeviceptr, cuuint64_t,
				  unsigned int);
} cu;

static int
resolve(const char *sym, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;

	if (cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault,
					     &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess || *fn == NULL)
		return -ENOTSUP;
	return 0;
}

static int
resolve_all(void)
{
	int r = 0;

	r |= resolve("cuMemCreate", (void **)&cu.mem_create);
	r |= resolve("cuMemExportToShareableHandle", (void **)&cu.mem_export);
	r |= resolve("cuMemImportFromShareableHandle", (void **)&cu.mem_import);
	r |= resolve("cuMemMap", (void **)&cu.mem_map);
	r |= resolve("cuMemUnmap", (void **)&cu.mem_unmap);
	r |= resolve("cuMemSetAccess", (void **)&cu.mem_set_access);
	r |= resolve("cuMemAddressReserve", (void **)&cu.mem_reserve);
	r |= resolve("cuMemAddressFree", (void **)&cu.mem_free_va);
	r |= resolve("cuMemRelease", (void **)&cu.mem_release);
	r |= resolve("cuMemGetAllocationGranularity",
		     (void **)&cu.mem_granularity);
	r |= resolve("cuMemGetAddressRange", (void **)&cu.mem_range);
	r |= resolve("cuDeviceGetAttribute", (void **)&cu.dev_attr);
	r |= resolve("cuStreamWriteValue64", (void **)&cu.write_value64);
	return r != 0 ? -ENOTSUP : 0;
}

/* ---- devices ---- */

struct nv_dev {
	uint8_t uuid[16];
	int sms;
	int numa;
	int fabric;		/* exports fabric handles */
};

static struct {
	int ndev;
	struct nv_dev dev[NV_MAX_DEV];
	int host_ptr_ok;	/* registered host memory has the same VA */
	int ready;
} nv;

static int
dev_numa(int d)
{
	char bus[32], path[96];
	FILE *f;
	int n = -1;

	if (cudaDeviceGetPCIBusId(bus, sizeof(bus), d) != cudaSuccess)
		return -1;
	for (char *c = bus; *c; c++)
		*c = (char)(*c >= 'A' && *c <= 'F' ? *c - 'A' + 'a' : *c);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
	f = fopen(path, "r");
	if (f != NULL) {
		if (fscanf(f, "%d", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

/* Control paths run on application threads: leave their current device
 * as it was. */
static int
dev_save(void)
{
	int d = 0;

	if (cudaGetDevice(&d) != cudaSuccess)
		cudaGetLastError();
	return d;
}

static int
devices_init(void)
{
	struct cudaDeviceProp prop;
	cudaError_t e;
	int i, j, can, v = 0, old;

	if (nv.ready)
		return nv.ndev;
	e = cudaGetDeviceCount(&nv.ndev);
	if (e != cudaSuccess) {
		NV_LOG(NOTICE, "no usable CUDA device (%s): no nvlink port",
		       cudaGetErrorString(e));
		nv.ndev = 0;
		return 0;
	}
	if (resolve_all() < 0) {
		NV_LOG(ERR, "CUDA driver lacks the virtual memory API: no nvlink port");
		nv.ndev = 0;
		return 0;
	}
	nv.ndev = RTE_MIN(nv.ndev, NV_MAX_DEV);
	old = dev_save();
	for (i = 0; i < nv.ndev; i++) {
		cudaGetDeviceProperties(&prop, i);
		memcpy(nv.dev[i].uuid, &prop.uuid, 16);
		nv.dev[i].sms = prop.multiProcessorCount;
		nv.dev[i].numa = dev_numa(i);
		cu.dev_attr(&nv.dev[i].fabric,
			    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, i);
		cudaSetDevice(i);
		for (j = 0; j < nv.ndev; j++) {
			if (j == i)
				continue;
			cudaDeviceCanAccessPeer(&can, i, j);
			if (can && cudaDeviceEnablePeerAccess(j, 0) != cudaSuccess)
				cudaGetLastError();	/* already enabled */
		}
	}
	cudaSetDevice(old);
	cudaDeviceGetAttribute(&v, cudaDevAttrCanUseHostPointerForRegisteredMem, 0);
	nv.host_ptr_ok = v;
	nv.ready = 1;
	return nv.ndev;
}

/* The lcore switches devices often; skip the call when it is current. */
static void
use_dev(int d)
{
	static __thread int cur = -1;

	if (d != cur && cudaSetDevice(d) == cudaSuccess)
		cur = d;
}

static int
dev_by_uuid(const uint8_t *uuid)
{
	int i;

	for (i = 0; i < nv.ndev; i++)
		if (memcmp(nv.dev[i].uuid, uuid, 16) == 0)
			return i;
	return -1;
}

/* Device-accessible address of registered host memory. */
static uint64_t
host_dptr(void *p)
{
	void *d = NULL;

	if (nv.host_ptr_ok)
		return (uintptr_t)p;
	if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return (uintptr_t)d;
}

/* ---- ports and lanes: one stream per (local GPU, remote GPU) ---- */

struct nv_lane {
	cudaStream_t st;
	cudaEvent_t join;	/* other lanes wait on it */
	int dev;		/* runs on */
	struct kvt_nv_task *ring;	/* pinned host: filled by the lcore */
	struct kvt_nv_task *dring;	/* device mirror the kernel reads */
	uint64_t head;		/* tasks handed out, ever */
	uint64_t *progress;	/* pinned: last finished ticket */
	uint64_t progress_d;	/* its device address */
	uint64_t ticket;	/* last issued */
	uint64_t ring_end[NV_TICKETS];	/* head after each ticket */
	unsigned int *counters;	/* device: one per ticket slot */
	struct kvt_nv_cmd *cmds;	/* pinned, mapped: one per ticket slot */
	uint64_t cmds_d;	/* their device address */
	int resident;		/* the resident kernel runs on st */
	uint64_t last_cmd;	/* TSC when it was last given a command */
};

/* A submission waiting for its kernel so the lcore can notify. */
struct nv_wait {
	struct kvt_desc *d;
	struct nv_lane *lane;
	uint64_t ticket;
	uint64_t deadline;	/* TSC, for a full inbox */
	struct nv_wait *next;
};

struct nv_port {
	int dev;		/* -1: all devices */
	unsigned int blocks;	/* gather grid: SM budget x blocks per SM */
	struct nv_lane *lane[NV_MAX_DEV][NV_MAX_DEV];
	struct nv_wait *waits;
	struct nv_wait *free_waits;
	struct kvt_nv_task *scratch;	/* tasks of one submission */
	uint32_t scratch_cap;
	unsigned int res_idle_us;	/* resident=US; 0: no resident kernels */
	uint64_t res_idle;	/* the same in TSC cycles (EAL is up at start) */
	unsigned int nres;	/* lanes whose resident kernel runs */
};

/* ---- allocations (kvt_mem_alloc) ---- */

struct nv_alloc {
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h;
	int dev;
	int fd;			/* POSIX fd export */
	int has_fabric;
	CUmemFabricHandle fabric;
	struct nv_alloc *next;
};

static struct nv_alloc *allocs;
static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;

static struct nv_alloc *
alloc_find(uintptr_t p)
{
	struct nv_alloc *a;

	for (a = allocs; a != NULL; a = a->next)
		if (p >= a->va && p - a->va < a->size)
			return a;
	return NULL;
}

static int
map_all_devices(CUdeviceptr va, size_t size)
{
	CUmemAccessDesc acc[NV_MAX_DEV];
	int i;

	for (i = 0; i < nv.ndev; i++) {
		acc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc[i].location.id = i;
		acc[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	}
	return cu.mem_set_access(va, size, acc, (size_t)nv.ndev) == CUDA_SUCCESS ?
		0 : -EIO;
}

static int
nv_mem_alloc(const struct kvt_loc *loc, size_t len, void **addr)
{
	CUmemAllocationProp prop;
	struct nv_alloc *a;
	size_t gran = 0;
	CUresult r;

	if (loc->type != KVT_LOC_CUDA)
		return -ENOTSUP;
	if (loc->id >= nv.ndev)
		return -ENODEV;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return -ENOMEM;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = loc->id;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	if (nv.dev[loc->id].fabric)
		prop.requestedHandleTypes |= CU_MEM_HANDLE_TYPE_FABRIC;
	cu.mem_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	a->size = RTE_ALIGN_CEIL(len, RTE_MAX(gran, (size_t)(2 << 20)));
	a->dev = loc->id;
	a->fd = -1;
	r = cu.mem_create(&a->h, a->size, &prop, 0);
	if (r != CUDA_SUCCESS && nv.dev[loc->id].fabric) {
		/* Fabric needs IMEX channels the system may not have. */
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		r = cu.mem_create(&a->h, a->size, &prop, 0);
	}
	if (r != CUDA_SUCCESS) {
		NV_LOG(ERR, "cuMemCreate %zu bytes on cuda:%d: error %d", a->size,
		       loc->id, r);
		free(a);
		return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	}
	if ((prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) &&
	    cu.mem_export(&a->fabric, a->h, CU_MEM_HANDLE_TYPE_FABRIC, 0) ==
	    CUDA_SUCCESS)
		a->has_fabric = 1;
	if (cu.mem_export(&a->fd, a->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
			  0) != CUDA_SUCCESS)
		a->fd = -1;
	if (cu.mem_reserve(&a->va, a->size, 0, 0, 0) != CUDA_SUCCESS)
		goto release;
	if (cu.mem_map(a->va, a->size, 0, a->h, 0) != CUDA_SUCCESS)
		goto free_va;
	if (map_all_devices(a->va, a->size) < 0)
		goto unmap;
	pthread_mutex_lock(&nv_lock);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&nv_lock);
	*addr = (void *)(uintptr_t)a->va;
	return 0;

unmap:
	cu.mem_unmap(a->va, a->size);
free_va:
	cu.mem_free_va(a->va, a->size);
release:
	if (a->fd >= 0)
		close(a->fd);
	cu.mem_release(a->h);
	free(a);
	return -EIO;
}

static int
nv_mem_free(const struct kvt_loc *loc, void *addr, size_t len)
{
	struct nv_alloc **pp, *a;

	RTE_SET_USED(loc);
	RTE_SET_USED(len);
	pthread_mutex_lock(&nv_lock);
	for (pp = &allocs; *pp != NULL; pp = &(*pp)->next)
		if ((*pp)->va == (uintptr_t)addr)
			break;
	a = *pp;
	if (a != NULL)
		*pp = a->next;
	pthread_mutex_unlock(&nv_lock);
	if (a == NULL)
		return -EINVAL;
	cudaDeviceSynchronize();
	cu.mem_unmap(a->va, a->size);
	cu.mem_free_va(a->va, a->size);
	cu.mem_release(a->h);
	if (a->fd >= 0)
		close(a->fd);
	free(a);
	return 0;
}

static int
nv_mem_locate(const void *addr, struct kvt_loc *loc)
{
	struct cudaPointerAttributes at;

	if (!nv.ready || nv.ndev == 0)
		return -ENOTSUP;
	if (cudaPointerGetAttributes(&at, addr) != cudaSuccess) {
		cudaGetLastError();
		return -ENOTSUP;
	}
	if (at.type != cudaMemoryTypeDevice)
		return -ENOTSUP;
	loc->type = KVT_LOC_CUDA;
	loc->id = (int16_t)at.device;
	return 0;
}

static int
nv_host_register(void *addr, size_t len)
{
	if (!nv.ready || nv.ndev == 0)
		return 0;
	if (cudaHostRegister(addr, len, cudaHostRegisterMapped |
			     cudaHostRegisterPortable) != cudaSuccess) {
		cudaGetLastError();
		return -EIO;
	}
	return 0;
}

static void
nv_host_unregister(void *addr)
{
	if (nv.ready && nv.ndev > 0 && cudaHostUnregister(addr) != cudaSuccess)
		cudaGetLastError();
}

/* ---- region keys ---- */

enum { NV_KEY_IPC = 1, NV_KEY_FD, NV_KEY_FABRIC, NV_KEY_HOST };

struct nv_key {
	uint32_t kind;
	uint32_t pid;
	uint8_t uuid[16];	/* the device the memory is on */
	uint64_t off;		/* of the region inside the exported object */
	uint64_t size;		/* of the exported object */
	int32_t fd;
	uint32_t rsvd;
	uint8_t handle[64];	/* IPC or fabric handle */
	struct kvt_memfd_key host;	/* NV_KEY_HOST (fence tables) */
};

struct nv_lmem {
	struct nv_key key;
	int dev;
};

static int
nv_mem_register(struct kvt_port *port, struct kvt_lmem *m)
{
	struct nv_lmem *k;
	struct nv_alloc *a;
	CUdeviceptr base = 0;
	size_t size = 0;
	cudaIpcMemHandle_t ipc;

	/* Host memory: only fence tables, which the GPU writes into. */
	if (m->loc.type == KVT_LOC_CPU)
		return (m->flags & KVT_MEM_F_FENCE) && m->fd >= 0 ? 0 : -ENOTSUP;
	if (m->loc.id >= nv.ndev)
		return -ENODEV;
	if (((struct nv_port *)port->priv)->dev >= 0 &&
	    ((struct nv_port *)port->priv)->dev != m->loc.id)
		return -ENOTSUP;	/* another GPU's port takes it */
	k = calloc(1, sizeof(*k));
	if (k == NULL)
		return -ENOMEM;
	k->dev = m->loc.id;
	k->key.pid = (uint32_t)getpid();
	memcpy(k->key.uuid, nv.dev[k->dev].uuid, 16);
	pthread_mutex_lock(&nv_lock);
	a = alloc_find((uintptr_t)m->addr);
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
		if (cu.mem_range(&base, &size, (CUdeviceptr)(uintptr_t)m->addr) !=
		    CUDA_SUCCESS ||
		    cudaIpcGetMemHandle(&ipc, (void *)(uintptr_t)base) !=
		    cudaSuccess) {
			cudaGetLastError();
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

static void
nv_mem_unregister(struct kvt_port *port, struct kvt_lmem *m)
{
	free(m->key[port->id]);
	m->key[port->id] = NULL;
}

static int
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

/* ---- imports ---- */

struct nv_rmem {
	uint8_t *base;		/* where the peer's rm->base is, here */
	int dev;		/* local index of the device it is on, -1 host */
	int kind;
	/* what to undo */
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h;
	void *ipc_base;
	struct kvt_map host;
};

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
		cr = cu.mem_import(&r->h, &fh, CU_MEM_HANDLE_TYPE_FABRIC);
	} else {
		fd = dup_peer_fd(k->pid, k->fd);
		if (fd < 0) {
			NV_LOG(ERR, "pidfd_getfd from pid %u: %s (same user and ptrace permission needed)",
			       k->pid, strerror(-fd));
			return fd;
		}
		os = (void *)(uintptr_t)fd;
		cr = cu.mem_import(&r->h, os, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	}
	if (fd >= 0)
		close(fd);
	if (cr != CUDA_SUCCESS) {
		NV_LOG(ERR, "cuMemImportFromShareableHandle: error %d", cr);
		return -EIO;
	}
	r->size = k->size;
	if (cu.mem_reserve(&r->va, r->size, 0, 0, 0) != CUDA_SUCCESS)
		goto release;
	if (cu.mem_map(r->va, r->size, 0, r->h, 0) != CUDA_SUCCESS)
		goto free_va;
	ret = map_all_devices(r->va, r->size);
	if (ret < 0)
		goto unmap;
	r->base = (uint8_t *)(uintptr_t)r->va + k->off;
	return 0;

unmap:
	cu.mem_unmap(r->va, r->size);
free_va:
	cu.mem_free_va(r->va, r->size);
release:
	cu.mem_release(r->h);
	return ret;
}

static int
import_ipc(struct nv_rmem *r, const struct nv_key *k)
{
	cudaIpcMemHandle_t h;

	int old = dev_save();
	cudaError_t e;

	memcpy(&h, k->handle, sizeof(h));
	cudaSetDevice(r->dev);
	e = cudaIpcOpenMemHandle(&r->ipc_base, h, cudaIpcMemLazyEnablePeerAccess);
	cudaSetDevice(old);
	if (e != cudaSuccess) {
		NV_LOG(ERR, "cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
		cudaGetLastError();
		return -EIO;
	}
	r->base = (uint8_t *)r->ipc_base + k->off;
	return 0;
}

static int
import_host(struct nv_rmem *r, const struct nv_key *k)
{
	int ret = kvt_memfd_map(&k->host, PROT_READ | PROT_WRITE, &r->host);

	if (ret < 0)
		return ret;
	if (cudaHostRegister(r->host.map, r->host.len, cudaHostRegisterMapped |
			     cudaHostRegisterPortable) != cudaSuccess) {
		cudaGetLastError();
		kvt_map_release(&r->host);
		return -EIO;
	}
	r->base = (uint8_t *)(uintptr_t)host_dptr(r->host.map) +
		(r->host.base - (uint8_t *)r->host.map);
	return 0;
}

static int
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
		r->dev = dev_by_uuid(k.uuid);
		if (r->dev < 0 || k.off + rm->len > k.size) {
			free(r);
			return -ENOTSUP;	/* a GPU we cannot see */
		}
		ret = k.kind == NV_KEY_IPC ? import_ipc(r, &k) :
			import_vmm(r, &k);
	}
	if (ret < 0) {
		free(r);
		return ret;
	}
	rm->key[c->port->id] = r;
	return 0;
}

static void
nv_rmem_release(struct kvt_conn *c, struct kvt_rmem *rm)
{
	struct nv_rmem *r = rm->key[c->port->id];

	if (r == NULL)
		return;
	if (r->kind == NV_KEY_HOST) {
		cudaHostUnregister(r->host.map);
		kvt_map_release(&r->host);
	} else if (r->kind == NV_KEY_IPC) {
		cudaIpcCloseMemHandle(r->ipc_base);
	} else {
		cu.mem_unmap(r->va, r->size);
		cu.mem_free_va(r->va, r->size);
		cu.mem_release(r->h);
	}
	cudaGetLastError();
	free(r);
	rm->key[c->port->id] = NULL;
}

/* ---- lanes ---- */

static void
lane_free(struct nv_lane *l)
{
	if (l == NULL)
		return;
	cudaSetDevice(l->dev);
	cudaStreamSynchronize(l->st);
	cudaStreamDestroy(l->st);
	cudaEventDestroy(l->join);
	cudaFreeHost(l->ring);
	cudaFree(l->dring);
	cudaFreeHost(l->progress);
	cudaFreeHost(l->cmds);
	cudaFree(l->counters);
	cudaGetLastError();
	free(l);
}

static struct nv_lane *
lane_new(int dev)
{
	struct nv_lane *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->dev = dev;
	cudaSetDevice(dev);
	if (cudaStreamCreateWithFlags(&l->st, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaEventCreateWithFlags(&l->join, cudaEventDisableTiming) != cudaSuccess ||
	    cudaHostAlloc((void **)&l->ring, NV_RING * sizeof(*l->ring),
			  cudaHostAllocPortable) != cudaSuccess ||
	    cudaMalloc((void **)&l->dring, NV_RING * sizeof(*l->dring)) !=
	    cudaSuccess ||
	    cudaHostAlloc((void **)&l->progress, 64,
			  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
	    cudaHostAlloc((void **)&l->cmds, NV_TICKETS * sizeof(*l->cmds),
			  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
	    cudaMalloc((void **)&l->counters, NV_TICKETS * sizeof(unsigned int)) !=
	    cudaSuccess ||
	    cudaMemset(l->counters, 0, NV_TICKETS * sizeof(unsigned int)) !=
	    cudaSuccess) {
		NV_LOG(ERR, "lane on cuda:%d: %s", dev,
		       cudaGetErrorString(cudaGetLastError()));
		lane_free(l);
		return NULL;
	}
	*l->progress = 0;
	l->progress_d = host_dptr(l->progress);
	memset(l->cmds, 0, NV_TICKETS * sizeof(*l->cmds));
	l->cmds_d = host_dptr(l->cmds);
	return l;
}

static int
nv_probe(const struct kvt_pmd *pmd, const char *args)
{
	static const char *const keys[] = { "per_gpu", "sms", "resident", NULL };
	struct rte_kvargs *kv = NULL;
	struct nv_port *np;
	char name[32];
	long per_gpu = 0, sms = NV_DEFAULT_SMS, idle = NV_RES_IDLE_US;
	int i, n, ret;

	if (args != NULL && *args != '\0') {
		kv = rte_kvargs_parse(args, keys);
		if (kv == NULL)
			return -EINVAL;
		ret = kvt_kv_long(kv, "per_gpu", 0, 1, &per_gpu);
		if (ret == 0)
			ret = kvt_kv_long(kv, "sms", 1, 1024, &sms);
		if (ret == 0)
			ret = kvt_kv_long(kv, "resident", 0, 10000000, &idle);
		rte_kvargs_free(kv);
		if (ret < 0)
			return ret;
	}
	n = devices_init();
	if (n == 0)
		return 0;
	for (i = 0; i < (per_gpu ? n : 1); i++) {
		np = calloc(1, sizeof(*np));
		if (np == NULL)
			return -ENOMEM;
		np->dev = per_gpu ? i : -1;
		np->blocks = (unsigned int)RTE_MIN(sms, (long)nv.dev[0].sms) *
			NV_BLOCKS_PER_SM;
		np->res_idle_us = (unsigned int)idle;
		if (per_gpu)
			snprintf(name, sizeof(name), "nvlink:%d", i);
		else
			snprintf(name, sizeof(name), "nvlink");
		if (kvt_port_create(pmd, name, nv.dev[per_gpu ? i : 0].numa,
				    np) == NULL) {
			free(np);
			return -ENOSPC;
		}
	}
	NV_LOG(NOTICE, "%d GPU(s), %s, SM budget %ld, resident kernels %s%s", n,
	       per_gpu ? "a port per GPU" : "one port", sms,
	       idle > 0 ? "on" : "off",
	       nv.dev[0].fabric ? ", fabric handles" : "");
	return 0;
}

/* Lanes for every pair this port serves, made before the lcores run. */
static int
nv_start(struct kvt_port *port)
{
	struct nv_port *np = port->priv;
	int s, d, old = dev_save();

	for (s = 0; s < nv.ndev; s++) {
		if (np->dev >= 0 && s != np->dev)
			continue;
		for (d = 0; d < nv.ndev; d++) {
			np->lane[s][d] = lane_new(s);
			if (np->lane[s][d] == NULL) {
				cudaSetDevice(old);
				return -ENOMEM;
			}
		}
	}
	cudaSetDevice(old);
	np->res_idle = rte_get_tsc_hz() / 1000000 * np->res_idle_us;
	np->scratch_cap = 65536;
	np->scratch = malloc(np->scratch_cap * sizeof(*np->scratch));
	return np->scratch != NULL ? 0 : -ENOMEM;
}

static void res_stop_all(struct nv_port *np);

static void
nv_stop(struct kvt_port *port)
{
	struct nv_port *np = port->priv;
	struct nv_wait *w;
	int s, d;

	/* Finish what the GPU has, then settle what waits on it. */
	res_stop_all(np);
	for (s = 0; s < NV_MAX_DEV; s++)
		for (d = 0; d < NV_MAX_DEV; d++)
			if (np->lane[s][d] != NULL) {
				cudaSetDevice(s);
				cudaStreamSynchronize(np->lane[s][d]->st);
			}
	while ((w = np->waits) != NULL) {
		const struct kvt_subinfo *si = w->d->data;

		np->waits = w->next;
		kvt_desc_complete(w->d, -ECANCELED);
		__atomic_store_n(si->done, 1, __ATOMIC_RELEASE);
		free(w);
	}
}

static void
nv_remove(struct kvt_port *port)
{
	struct nv_port *np = port->priv;
	struct nv_wait *w;
	int s, d;

	for (s = 0; s < NV_MAX_DEV; s++)
		for (d = 0; d < NV_MAX_DEV; d++)
			lane_free(np->lane[s][d]);
	while ((w = np->free_waits) != NULL) {
		np->free_waits = w->next;
		free(w);
	}
	free(np->scratch);
	free(np);
}

/* ---- connections ---- */

struct nv_ep {
	uint32_t ndev;
	uint8_t uuid[NV_MAX_DEV][16];
};

struct nv_conn {
	struct kvt_conn c;	/* first */
	struct kvt_map peer_inbox;
	struct kvt_shared_inbox inbox;
};

static int
nv_endpoint(struct kvt_port *port, struct kvt_buf *ep)
{
	struct nv_ep e = { .ndev = (uint32_t)nv.ndev };
	int i;

	RTE_SET_USED(port);
	for (i = 0; i < nv.ndev; i++)
		memcpy(e.uuid[i], nv.dev[i].uuid, 16);
	return kvt_buf_put(ep, &e, sizeof(e));
}

static int
nv_conn_open(struct kvt_port *port, const struct kvt_peer_info *pi,
	     const struct kvt_endpoint *eps, unsigned int neps,
	     struct kvt_buf *req, struct kvt_conn **out)
{
	struct nv_conn *c;
	struct nv_ep e;
	uint32_t i;
	int seen = 0;

	RTE_SET_USED(port);
	RTE_SET_USED(req);
	RTE_SET_USED(neps);	/* one NVLink endpoint per engine */
	if (!pi->same_host || eps[0].len != sizeof(e))
		return -ENOTSUP;
	memcpy(&e, eps[0].blob, sizeof(e));
	for (i = 0; i < e.ndev && i < NV_MAX_DEV; i++)
		seen += dev_by_uuid(e.uuid[i]) >= 0;
	if (seen == 0)
		return -ENOTSUP;	/* none of its GPUs is visible here */
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->c.remote_port = eps[0].port_id;
	*out = &c->c;
	return 0;
}

static int
nv_conn_accept(struct kvt_port *port, const struct kvt_accept *a,
	       const uint8_t *req, size_t len, struct kvt_buf *rep,
	       struct kvt_conn **out)
{
	struct nv_conn *c;
	int ret;

	RTE_SET_USED(req);
	RTE_SET_USED(len);
	if (!a->info.same_host)
		return -ENOTSUP;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	kvt_conn_accept_init(&c->c, port, a);
	ret = kvt_shared_inbox_create(&c->inbox, a->info.name, rep);
	if (ret < 0) {
		free(c);
		return ret;
	}
	*out = &c->c;
	return 0;
}

static int
nv_conn_ready(struct kvt_conn *c, const uint8_t *rep, size_t len)
{
	struct nv_conn *nc = (struct nv_conn *)c;

	return kvt_shared_inbox_map(rep, len, c->info.pid, &nc->peer_inbox);
}

static void
nv_conn_close(struct kvt_conn *c)
{
	struct nv_conn *nc = (struct nv_conn *)c;

	kvt_map_release(&nc->peer_inbox);
	kvt_shared_inbox_close(&nc->inbox);
	free(nc);
}

/* ---- data path ---- */

/* Free ring space up to the last finished ticket. */
static uint64_t
ring_tail(const struct nv_lane *l)
{
	uint64_t done = __atomic_load_n(l->progress, __ATOMIC_ACQUIRE);

	return done == 0 ? 0 : l->ring_end[done % NV_TICKETS];
}

/*
 * Room for n tasks, contiguous, and a ticket slot.  The GPU drains the
 * lane quickly, so waiting here is short; it is bounded all the same.
 */
static struct kvt_nv_task *
ring_take(struct nv_lane *l, uint32_t n)
{
	uint64_t until = rte_get_tsc_cycles() + rte_get_tsc_hz() * 5;
	uint64_t start = l->head;

	if ((start % NV_RING) + n > NV_RING)
		start += NV_RING - start % NV_RING;
	while (start + n - ring_tail(l) > NV_RING ||
	       l->ticket + 1 - __atomic_load_n(l->progress, __ATOMIC_ACQUIRE) >=
	       NV_TICKETS) {
		if (rte_get_tsc_cycles() > until)
			return NULL;
		rte_pause();
	}
	l->head = start + n;
	return &l->ring[start % NV_RING];
}

/*
 * Resident kernels.  A launch costs microseconds before the GPU moves a
 * byte; for a small request that is most of its latency.  So a lane
 * that gets one starts a resident kernel on its stream (one block,
 * KVT_NV_RES_THREADS threads), and later small requests are commands the
 * kernel reads from pinned host memory: the lcore writes a line, the GPU
 * sees it on its next poll.  The kernel takes tickets like a launch and
 * stores the lane's progress word, so everything that waits on tickets
 * works unchanged.  Stream work on the lane (a big request, a source
 * event) first sends the kernel an exit command, so stream order keeps
 * the two apart; after res_idle without a command the lcore sends one
 * too, so an idle engine holds no SM and a cudaDeviceSynchronize() in the
 * application waits at most that long for it.
 */
static int
res_post(struct nv_lane *l, uint64_t src, uint64_t dst, uint64_t len,
	 const struct kvt_nv_tail *tail)
{
	struct kvt_nv_cmd *c;
	uint64_t w[KVT_NV_CMD_WORDS];

	if (ring_take(l, 0) == NULL)
		return -ETIMEDOUT;
	l->ticket++;
	l->ring_end[l->ticket % NV_TICKETS] = l->head;
	w[0] = l->ticket;
	w[1] = src;
	w[2] = dst;
	w[3] = len;
	w[4] = tail->fence;
	w[5] = tail->room;
	w[6] = tail->done;
	c = &l->cmds[l->ticket % NV_TICKETS];
	memcpy(c, w, sizeof(w));
	__atomic_store_n(&c->check, kvt_nv_cmd_check(w), __ATOMIC_RELEASE);
	l->last_cmd = rte_get_tsc_cycles();
	return 0;
}

static int
res_start(struct nv_port *np, struct nv_lane *l)
{
	use_dev(l->dev);
	if (kvt_nv_resident((const struct kvt_nv_cmd *)(uintptr_t)l->cmds_d,
			    NV_TICKETS, l->ticket + 1, l->progress_d, l->st) != 0)
		return -EIO;
	l->resident = 1;
	np->nres++;
	NV_LOG(DEBUG, "resident kernel on cuda:%d from ticket %" PRIu64,
	       l->dev, l->ticket + 1);
	return 0;
}

/* Ask the lane's resident kernel, if any, to return. */
static int
res_stop(struct nv_port *np, struct nv_lane *l)
{
	static const struct kvt_nv_tail none;
	int ret;

	if (!l->resident)
		return 0;
	ret = res_post(l, 0, 0, KVT_NV_CMD_EXIT, &none);
	if (ret < 0)
		return ret;
	l->resident = 0;
	np->nres--;
	return 0;
}

static void
res_stop_all(struct nv_port *np)
{
	int s, d;

	for (s = 0; s < NV_MAX_DEV && np->nres > 0; s++)
		for (d = 0; d < NV_MAX_DEV; d++)
			if (np->lane[s][d] != NULL)
				res_stop(np, np->lane[s][d]);
}

/* Resident kernels idle for res_idle return. */
static void
res_reap(struct nv_port *np)
{
	uint64_t now = rte_get_tsc_cycles();
	struct nv_lane *l;
	int s, d;

	for (s = 0; s < nv.ndev; s++)
		for (d = 0; d < nv.ndev; d++) {
			l = np->lane[s][d];
			if (l != NULL && l->resident &&
			    now - l->last_cmd > np->res_idle)
				res_stop(np, l);
		}
}

/*
 * A submission for a resident kernel: at most one request (or only a
 * fence), of at most NV_RES_MAX bytes, not waiting for a source event.
 */
static int
res_fits(const struct nv_port *np, const struct kvt_subinfo *si)
{
	uint64_t len;

	if (np->res_idle == 0 || si->cuda_event != NULL || si->n > 1)
		return 0;
	if (si->n == 0)
		return 1;
	if (si->pages != NULL)
		return si->pages->n == 1 && si->pages->page_size <= NV_RES_MAX;
	len = kvt_subinfo_req(si, 0)->len;
	return len <= NV_RES_MAX;
}

/* The submission's copy (scratch[0], or none) as a command. */
static int
res_issue(struct nv_port *np, struct nv_lane *l, uint32_t ntask,
	  struct kvt_nv_tail *tail)
{
	const struct kvt_nv_task *t = &np->scratch[0];
	int ret;

	if (!l->resident) {
		ret = res_start(np, l);
		if (ret < 0)
			return ret;
	}
	ret = ntask == 0 ? res_post(l, 0, 0, 0, tail) :
		res_post(l, t->src, t->dst, t->len, tail);
	tail->ticket = l->ticket;
	return ret;
}

struct nv_plan {
	struct nv_lane *lanes[NV_MAX_DEV * NV_MAX_DEV];
	int nlanes;
	struct nv_lane *primary;
	int resident;		/* for the primary lane's resident kernel */
};

static int
lane_of(struct nv_port *np, const struct kvt_xreq *x, int port_id,
	struct nv_lane **out)
{
	const struct nv_rmem *r = x->rm->key[port_id];
	int local = x->lm->loc.id;

	if (r == NULL || r->dev < 0 || local >= nv.ndev)
		return -EHOSTUNREACH;
	if (np->dev >= 0 && local != np->dev)
		return -EHOSTUNREACH;
	*out = np->lane[local][r->dev];
	return *out != NULL ? 0 : -EHOSTUNREACH;
}


/*
 * A lane joins the plan; it first waits for the source's event.  Unless
 * the plan is for the lane's resident kernel, that kernel is asked to
 * return first, so the stream work queues behind it.
 */
static int
plan_add(struct nv_port *np, struct nv_plan *p, struct nv_lane *l, void *event)
{
	int i, ret;

	for (i = 0; i < p->nlanes; i++)
		if (p->lanes[i] == l)
			return 0;
	if (!p->resident) {
		ret = res_stop(np, l);
		if (ret < 0)
			return ret;
	}
	p->lanes[p->nlanes++] = l;
	if (p->primary == NULL)
		p->primary = l;
	if (event == NULL)
		return 0;
	use_dev(l->dev);
	return cudaStreamWaitEvent(l->st, event, 0) == cudaSuccess ? 0 : -EIO;
}

/* One copy: the copy engines for a big one or one off the primary lane,
 * else a task of the primary lane's gather kernel. */
static int
copy_add(struct nv_port *np, const struct nv_plan *plan, struct nv_lane *l,
	 uint64_t src, uint64_t dst, uint64_t len, uint32_t *ntask)
{
	struct kvt_nv_task *t;

	if (len >= NV_CE_MIN || l != plan->primary) {
		use_dev(l->dev);
		return cudaMemcpyAsync((void *)dst, (const void *)src, len,
				       cudaMemcpyDefault, l->st) != cudaSuccess ?
			-EIO : 0;
	}
	if (*ntask == np->scratch_cap) {
		t = realloc(np->scratch, 2 * np->scratch_cap * sizeof(*t));
		if (t == NULL)
			return -ENOMEM;
		np->scratch = t;
		np->scratch_cap *= 2;
	}
	np->scratch[*ntask].src = src;
	np->scratch[*ntask].dst = dst;
	np->scratch[*ntask].len = len;
	(*ntask)++;
	return 0;
}

/* The pages of a page list (request x) on lane l. */
static int
copy_pages(struct nv_port *np, const struct nv_plan *plan, struct nv_lane *l,
	   const struct kvt_xreq *x, const struct kvt_xpages *pg,
	   const struct nv_rmem *r, uint32_t *ntask)
{
	uint64_t ps = pg->page_size, lp, rp;
	uint32_t k;
	int ret = 0;

	for (k = 0; k < pg->n && ret == 0; k++) {
		lp = (uintptr_t)x->local + (uint64_t)pg->local_idx[k] * ps;
		rp = (uintptr_t)r->base + (x->remote + (uint64_t)pg->remote_idx[k] * ps -
					   x->rm->base);
		ret = x->op == KVT_OP_WRITE ? copy_add(np, plan, l, lp, rp, ps, ntask) :
			copy_add(np, plan, l, rp, lp, ps, ntask);
	}
	return ret;
}

/*
 * One pass over the requests: copy-engine copies are issued at once on
 * their lane; the small ones of the first lane become gather tasks for
 * that lane's kernel (small ones of other lanes, rare, go to the copy
 * engines too).
 */
static int
issue_copies(struct nv_port *np, struct kvt_port *port,
	     const struct kvt_subinfo *si, struct nv_plan *plan, uint32_t *ntask)
{
	const struct kvt_xreq *x;
	const struct nv_rmem *r;
	struct nv_lane *l, *last = NULL;
	uint8_t *rp;
	uint64_t src, dst;
	uint32_t i;
	int ret;

	*ntask = 0;
	for (i = 0; i < si->n; i++) {
		x = kvt_subinfo_req(si, i);
		ret = lane_of(np, x, port->id, &l);
		if (ret == 0 && l != last)
			ret = plan_add(np, plan, l, si->cuda_event);
		if (ret < 0)
			return ret;
		last = l;
		/* Whole submissions have no slices for the engine to count:
		 * the bytes are counted here, when issued. */
		if (x->op == KVT_OP_WRITE)
			kvt_stat_add(&port->st.write_bytes, x->len);
		else
			kvt_stat_add(&port->st.read_bytes, x->len);
		kvt_stat_add(&port->st.slices, 1);
		r = x->rm->key[port->id];
		if (si->pages != NULL) {
			ret = copy_pages(np, plan, l, x, si->pages, r, ntask);
		} else {
			rp = r->base + (x->remote - x->rm->base);
			src = x->op == KVT_OP_WRITE ? (uintptr_t)x->local : (uintptr_t)rp;
			dst = x->op == KVT_OP_WRITE ? (uintptr_t)rp : (uintptr_t)x->local;
			ret = copy_add(np, plan, l, src, dst, x->len, ntask);
		}
		if (ret < 0)
			return ret;
	}
	if (plan->primary == NULL) {
		/* Only a fence or a notification: any lane will do. */
		i = np->dev >= 0 ? (uint32_t)np->dev : 0;
		return plan_add(np, plan, np->lane[i][i], si->cuda_event);
	}
	return 0;
}

/* Launch the gather kernel(s); the last carries the tail. */
static int
launch(struct nv_port *np, struct nv_lane *l, uint32_t ntask,
       struct kvt_nv_tail *tail)
{
	struct kvt_nv_task *t, *dt;
	struct kvt_nv_tail tl;
	uint32_t off = 0, n;
	unsigned int blocks;

	use_dev(l->dev);
	do {
		n = RTE_MIN(ntask - off, (uint32_t)NV_RING / 2);
		/* A few tasks ride in the launch; more are copied to the
		 * device first (one copy-engine transfer, not a PCIe read
		 * per task). */
		dt = NULL;
		t = ring_take(l, n <= KVT_NV_INLINE ? 0 : n);
		if (t == NULL)
			return -ETIMEDOUT;
		if (n > KVT_NV_INLINE) {
			memcpy(t, np->scratch + off, (size_t)n * sizeof(*t));
			dt = l->dring + (t - l->ring);
			if (cudaMemcpyAsync(dt, t, (size_t)n * sizeof(*t),
					    cudaMemcpyHostToDevice, l->st) !=
			    cudaSuccess)
				return -EIO;
		}
		tl = off + n == ntask ? *tail : (struct kvt_nv_tail){ 0 };
		l->ticket++;
		l->ring_end[l->ticket % NV_TICKETS] = l->head;
		tl.progress = l->progress_d;
		tl.ticket = l->ticket;
		tl.counter = (uintptr_t)&l->counters[l->ticket % NV_TICKETS];
		blocks = RTE_MAX(1u, RTE_MIN(np->blocks, (n + 15) / 16));
		if (kvt_nv_gather(dt, n, np->scratch + off, &tl, blocks,
				  l->st) != 0)
			return -EIO;
		off += n;
	} while (off < ntask);
	tail->ticket = l->ticket;
	return 0;
}

/*
 * One small copy: the copy engine, then the tail as stream memory
 * operations (each a system-wide barrier, then the store), which reaches
 * the receiver sooner than a kernel launch does.
 */
static int
tiny(struct nv_port *np, struct nv_lane *l, struct kvt_nv_tail *tail)
{
	const struct kvt_nv_task *t = &np->scratch[0];
	CUstream st = (CUstream)l->st;

	use_dev(l->dev);
	if (ring_take(l, 0) == NULL)
		return -ETIMEDOUT;
	if (cudaMemcpyAsync((void *)t->dst, (const void *)t->src, t->len,
			    cudaMemcpyDefault, l->st) != cudaSuccess)
		return -EIO;
	l->ticket++;
	l->ring_end[l->ticket % NV_TICKETS] = l->head;
	tail->ticket = l->ticket;
	if ((tail->fence && cu.write_value64(st, tail->fence, tail->room, 0)) ||
	    (tail->done && cu.write_value64(st, tail->done, 1, 0)) ||
	    cu.write_value64(st, l->progress_d, l->ticket, 0))
		return -EIO;
	return 0;
}

static struct nv_wait *
wait_new(struct nv_port *np)
{
	struct nv_wait *w = np->free_waits;

	if (w != NULL) {
		np->free_waits = w->next;
		return w;
	}
	/* Grows once to the most submissions ever waiting at a time. */
	return malloc(sizeof(*w));
}

static void
sub_fail(struct nv_port *np, struct kvt_desc *d, int err)
{
	const struct kvt_subinfo *si = d->data;
	int s, t;

	/* Let what was queued finish before saying done. */
	res_stop_all(np);
	for (s = 0; s < NV_MAX_DEV; s++)
		for (t = 0; t < NV_MAX_DEV; t++)
			if (np->lane[s][t] != NULL) {
				use_dev(s);
				cudaStreamSynchronize(np->lane[s][t]->st);
			}
	cudaGetLastError();
	kvt_desc_complete(d, err);
	__atomic_store_n(si->done, 1, __ATOMIC_RELEASE);
}

static void
issue_sub(struct kvt_port *port, struct kvt_desc *d)
{
	struct nv_port *np = port->priv;
	const struct kvt_subinfo *si = d->data;
	struct kvt_nv_tail tail = { 0 };
	struct nv_plan plan = { .resident = res_fits(np, si) };
	const struct nv_rmem *fr;
	struct nv_wait *w;
	uint32_t ntask;
	int i, ret;

	if (__atomic_load_n(&d->conn->dead, __ATOMIC_ACQUIRE)) {
		sub_fail(np, d, -ECONNRESET);
		return;
	}
	ret = issue_copies(np, port, si, &plan, &ntask);
	if (ret < 0) {
		sub_fail(np, d, ret);
		return;
	}
	/* Copies on other lanes finish before the tail kernel runs. */
	for (i = 1; i < plan.nlanes; i++) {
		use_dev(plan.lanes[i]->dev);
		if (cudaEventRecord(plan.lanes[i]->join, plan.lanes[i]->st) !=
		    cudaSuccess ||
		    cudaStreamWaitEvent(plan.primary->st, plan.lanes[i]->join, 0) !=
		    cudaSuccess) {
			sub_fail(np, d, -EIO);
			return;
		}
	}
	if (si->fence_rm != NULL) {
		fr = si->fence_rm->key[port->id];
		if (fr == NULL) {
			sub_fail(np, d, -EHOSTUNREACH);
			return;
		}
		tail.fence = (uintptr_t)fr->base + (si->fence_addr -
						      si->fence_rm->base);
		tail.room = si->room;
	}
	if (si->notify_len == 0) {
		tail.done = host_dptr(si->done);
		if (tail.done == 0) {
			sub_fail(np, d, -EIO);
			return;
		}
	}
	if (plan.resident)
		ret = res_issue(np, plan.primary, ntask, &tail);
	else if (ntask == 1 && plan.nlanes == 1)
		ret = tiny(np, plan.primary, &tail);
	else
		ret = launch(np, plan.primary, ntask, &tail);
	if (ret < 0) {
		sub_fail(np, d, ret);
		return;
	}
	if (si->notify_len == 0) {
		kvt_desc_complete(d, 0);	/* the GPU stores done */
		return;
	}
	w = wait_new(np);
	if (w == NULL) {
		sub_fail(np, d, -ENOMEM);
		return;
	}
	w->d = d;
	w->lane = plan.primary;
	w->ticket = tail.ticket;
	w->deadline = 0;
	w->next = np->waits;
	np->waits = w;
}

static void
nv_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		if (d[i]->op == KVT_DESC_SUB) {
			issue_sub(port, d[i]);
		} else {
			/* Only whole submissions are routed here. */
			kvt_desc_complete(d[i], -ENOTSUP);
		}
	}
}

/* Notify for submissions whose kernel finished, then say done. */
static unsigned int
nv_poll(struct kvt_port *port)
{
	struct nv_port *np = port->priv;
	struct nv_wait **pp = &np->waits, *w;
	const struct kvt_subinfo *si;
	struct nv_conn *c;
	unsigned int n = 0;
	int ret;

	if (np->nres > 0)
		res_reap(np);
	while ((w = *pp) != NULL) {
		if (__atomic_load_n(w->lane->progress, __ATOMIC_ACQUIRE) <
		    w->ticket) {
			pp = &w->next;
			continue;
		}
		si = w->d->data;
		c = (struct nv_conn *)w->d->conn;
		ret = c->peer_inbox.base == NULL ? -ENOTSUP :
			kvt_inbox_push((struct kvt_inbox *)c->peer_inbox.base,
				       si->notify, si->notify_len);
		if (ret == -ENOBUFS) {
			/* A slow receiver: wait, up to the peer timeout. */
			if (w->deadline == 0)
				w->deadline = rte_get_tsc_cycles() +
					rte_get_tsc_hz() / 1000 *
					kvt_pmd_env()->timeout_ms;
			if (rte_get_tsc_cycles() < w->deadline) {
				pp = &w->next;
				continue;
			}
		}
		*pp = w->next;
		kvt_desc_complete(w->d, ret);
		__atomic_store_n(si->done, 1, __ATOMIC_RELEASE);
		w->next = np->free_waits;
		np->free_waits = w;
		n++;
	}
	return n;
}

static int
nv_dev_copy(void *dst, const void *src, size_t len)
{
	if (!nv.ready || nv.ndev == 0)
		return -ENOTSUP;
	if (cudaMemcpy(dst, src, len, cudaMemcpyDefault) != cudaSuccess) {
		cudaGetLastError();
		return -EIO;
	}
	return 0;
}

static int
nv_stream_wait(const uint64_t *word, uint64_t room, uint64_t timeout_ns,
	       uint32_t *status, void *stream)
{
	struct cudaPointerAttributes at;
	const uint64_t *w = word;

	if (!nv.ready || nv.ndev == 0)
		return -ENOTSUP;
	/* Host tables are registered; the kernel needs their device view. */
	if (cudaPointerGetAttributes(&at, word) == cudaSuccess &&
	    at.type == cudaMemoryTypeHost)
		w = (const uint64_t *)(uintptr_t)host_dptr((void *)(uintptr_t)word);
	cudaGetLastError();
	return kvt_nv_fence_wait(w, room, timeout_ns, status, stream) == 0 ?
		0 : -EIO;
}

static int
nv_dev_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

static int
nv_dev_pci(int dev, char *pci, size_t len)
{
	char *c;

	if (cudaDeviceGetPCIBusId(pci, (int)len, dev) != cudaSuccess) {
		cudaGetLastError();
		return -ENODEV;
	}
	for (c = pci; *c != '\0'; c++)
		*c = (char)(*c >= 'A' && *c <= 'F' ? *c - 'A' + 'a' : *c);
	return 0;
}

/*
 * dma-buf export of device memory, for NICs (ibv_reg_dmabuf_mr).  The
 * driver exports page-aligned ranges; off says where addr lies inside.
 */
static int
nv_mem_dmabuf(const void *addr, size_t len, int *fd, uint64_t *off)
{
	static CUresult (*get_handle)(void *, CUdeviceptr, size_t,
				      CUmemRangeHandleType, unsigned long long);
	struct cudaPointerAttributes at;
	uintptr_t a = (uintptr_t)addr, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = a & ~(pg - 1);
	size_t span = RTE_ALIGN_CEIL(a + len, pg) - start;
	CUresult r;

	if (cudaPointerGetAttributes(&at, addr) != cudaSuccess) {
		cudaGetLastError();
		return -ENOTSUP;
	}
	if (at.type != cudaMemoryTypeDevice)
		return -ENOTSUP;
	if (get_handle == NULL &&
	    resolve("cuMemGetHandleForAddressRange", (void **)&get_handle) < 0)
		return -ENOTSUP;
	r = get_handle(fd, (CUdeviceptr)start, span,
		       CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE)
		return -ENOTSUP;
	if (r != CUDA_SUCCESS)
		return -EIO;
	*off = a - start;
	return 0;
}

static const struct kvt_pmd_ops nv_ops = {
	.flags = KVT_PMD_F_ORDERED | KVT_PMD_F_WHOLE,
	.rank = 40,
	.probe = nv_probe,
	.start = nv_start,
	.stop = nv_stop,
	.remove = nv_remove,
	.submit = nv_submit,
	.poll = nv_poll,
	.mem_register = nv_mem_register,
	.mem_unregister = nv_mem_unregister,
	.mem_export = nv_mem_export,
	.endpoint = nv_endpoint,
	.conn_open = nv_conn_open,
	.conn_accept = nv_conn_accept,
	.conn_ready = nv_conn_ready,
	.conn_close = nv_conn_close,
	.rmem_import = nv_rmem_import,
	.rmem_release = nv_rmem_release,
	.mem_alloc = nv_mem_alloc,
	.mem_free = nv_mem_free,
	.mem_locate = nv_mem_locate,
	.host_register = nv_host_register,
	.host_unregister = nv_host_unregister,
	.dev_copy = nv_dev_copy,
	.stream_wait = nv_stream_wait,
	.dev_pci = nv_dev_pci,
	.dev_count = nv_dev_count,
	.mem_dmabuf = nv_mem_dmabuf,
};

KVT_PMD_REGISTER(nvlink, nv_ops);
