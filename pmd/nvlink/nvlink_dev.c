/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA memory device (kvt_dev.h): device memory for kvt_mem_alloc()
 * (cuMemCreate, exported as a fabric handle or a POSIX fd), locating
 * device addresses, host memory the GPUs store completions into, copies
 * and stream waits on fence words, and the facts NICs need (PCI
 * addresses, dma-buf exports).  Only cudart is linked; driver entry
 * points are looked up at run time, so the library starts on machines
 * without a driver (the device then stays off and says why).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvlink.h"

struct nv_driver nv_cu;
struct nv_system nv_sys;

/* ---- driver entry points ---- */

int
nv_resolve(const char *sym, void **fn)
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

	r |= nv_resolve("cuMemCreate", (void **)&nv_cu.mem_create);
	r |= nv_resolve("cuMemExportToShareableHandle", (void **)&nv_cu.mem_export);
	r |= nv_resolve("cuMemImportFromShareableHandle", (void **)&nv_cu.mem_import);
	r |= nv_resolve("cuMemMap", (void **)&nv_cu.mem_map);
	r |= nv_resolve("cuMemUnmap", (void **)&nv_cu.mem_unmap);
	r |= nv_resolve("cuMemSetAccess", (void **)&nv_cu.mem_set_access);
	r |= nv_resolve("cuMemAddressReserve", (void **)&nv_cu.mem_reserve);
	r |= nv_resolve("cuMemAddressFree", (void **)&nv_cu.mem_free_va);
	r |= nv_resolve("cuMemRelease", (void **)&nv_cu.mem_release);
	r |= nv_resolve("cuMemGetAllocationGranularity",
		     (void **)&nv_cu.mem_granularity);
	r |= nv_resolve("cuMemGetAddressRange", (void **)&nv_cu.mem_range);
	r |= nv_resolve("cuDeviceGetAttribute", (void **)&nv_cu.dev_attr);
	r |= nv_resolve("cuStreamWriteValue64", (void **)&nv_cu.write_value64);
	return r != 0 ? -ENOTSUP : 0;
}

/* ---- devices ---- */

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
int
nv_dev_save(void)
{
	int d = 0;

	if (cudaGetDevice(&d) != cudaSuccess)
		cudaGetLastError();
	return d;
}

int
nv_devices_init(void)
{
	struct cudaDeviceProp prop;
	cudaError_t e;
	int i, j, can, v = 0, old;

	if (nv_sys.ready)
		return nv_sys.ndev;
	e = cudaGetDeviceCount(&nv_sys.ndev);
	if (e != cudaSuccess) {
		NV_LOG(INFO, "no usable CUDA device (%s): no GPU memory",
		       cudaGetErrorString(e));
		nv_sys.ndev = 0;
		return 0;
	}
	if (resolve_all() < 0) {
		NV_LOG(ERR, "CUDA driver lacks the virtual memory API: no GPU memory");
		nv_sys.ndev = 0;
		return 0;
	}
	nv_sys.ndev = RTE_MIN(nv_sys.ndev, NV_MAX_DEV);
	old = nv_dev_save();
	for (i = 0; i < nv_sys.ndev; i++) {
		cudaGetDeviceProperties(&prop, i);
		memcpy(nv_sys.dev[i].uuid, &prop.uuid, 16);
		nv_sys.dev[i].sms = prop.multiProcessorCount;
		nv_sys.dev[i].numa = dev_numa(i);
		nv_cu.dev_attr(&nv_sys.dev[i].fabric,
			    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, i);
		cudaSetDevice(i);
		for (j = 0; j < nv_sys.ndev; j++) {
			if (j == i)
				continue;
			cudaDeviceCanAccessPeer(&can, i, j);
			if (can && cudaDeviceEnablePeerAccess(j, 0) != cudaSuccess)
				cudaGetLastError();	/* already enabled */
		}
	}
	cudaSetDevice(old);
	cudaDeviceGetAttribute(&v, cudaDevAttrCanUseHostPointerForRegisteredMem, 0);
	nv_sys.host_ptr_ok = v;
	nv_sys.ready = 1;
	return nv_sys.ndev;
}

/* Device-accessible address of registered host memory. */
uint64_t
nv_host_dptr(void *p)
{
	void *d = NULL;

	if (nv_sys.host_ptr_ok)
		return (uintptr_t)p;
	if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return (uintptr_t)d;
}

/* ---- allocations (kvt_mem_alloc) ---- */

static struct nv_alloc *allocs;
pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;

struct nv_alloc *
nv_alloc_find(uintptr_t p)
{
	struct nv_alloc *a;

	for (a = allocs; a != NULL; a = a->next)
		if (p >= a->va && p - a->va < a->size)
			return a;
	return NULL;
}

int
nv_map_all_devices(CUdeviceptr va, size_t size)
{
	CUmemAccessDesc acc[NV_MAX_DEV];
	int i;

	for (i = 0; i < nv_sys.ndev; i++) {
		acc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc[i].location.id = i;
		acc[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	}
	return nv_cu.mem_set_access(va, size, acc, (size_t)nv_sys.ndev) == CUDA_SUCCESS ?
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
	if (loc->id >= nv_sys.ndev)
		return -ENODEV;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return -ENOMEM;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = loc->id;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	if (nv_sys.dev[loc->id].fabric)
		prop.requestedHandleTypes |= CU_MEM_HANDLE_TYPE_FABRIC;
	nv_cu.mem_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	a->size = RTE_ALIGN_CEIL(len, RTE_MAX(gran, (size_t)(2 << 20)));
	a->dev = loc->id;
	a->fd = -1;
	r = nv_cu.mem_create(&a->h, a->size, &prop, 0);
	if (r != CUDA_SUCCESS && nv_sys.dev[loc->id].fabric) {
		/* Fabric needs IMEX channels the system may not have. */
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		r = nv_cu.mem_create(&a->h, a->size, &prop, 0);
	}
	if (r != CUDA_SUCCESS) {
		NV_LOG(ERR, "cuMemCreate %zu bytes on cuda:%d: error %d", a->size,
		       loc->id, r);
		free(a);
		return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	}
	if ((prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) &&
	    nv_cu.mem_export(&a->fabric, a->h, CU_MEM_HANDLE_TYPE_FABRIC, 0) ==
	    CUDA_SUCCESS)
		a->has_fabric = 1;
	if (nv_cu.mem_export(&a->fd, a->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
			  0) != CUDA_SUCCESS)
		a->fd = -1;
	if (nv_cu.mem_reserve(&a->va, a->size, 0, 0, 0) != CUDA_SUCCESS)
		goto release;
	if (nv_cu.mem_map(a->va, a->size, 0, a->h, 0) != CUDA_SUCCESS)
		goto free_va;
	if (nv_map_all_devices(a->va, a->size) < 0)
		goto unmap;
	pthread_mutex_lock(&nv_lock);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&nv_lock);
	*addr = (void *)(uintptr_t)a->va;
	return 0;

unmap:
	nv_cu.mem_unmap(a->va, a->size);
free_va:
	nv_cu.mem_free_va(a->va, a->size);
release:
	if (a->fd >= 0)
		close(a->fd);
	nv_cu.mem_release(a->h);
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
	nv_cu.mem_unmap(a->va, a->size);
	nv_cu.mem_free_va(a->va, a->size);
	nv_cu.mem_release(a->h);
	if (a->fd >= 0)
		close(a->fd);
	free(a);
	return 0;
}

static int
nv_mem_locate(const void *addr, struct kvt_loc *loc)
{
	struct cudaPointerAttributes at;

	if (!nv_sys.ready || nv_sys.ndev == 0)
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
	if (!nv_sys.ready || nv_sys.ndev == 0)
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
	if (nv_sys.ready && nv_sys.ndev > 0 && cudaHostUnregister(addr) != cudaSuccess)
		cudaGetLastError();
}

static int
nv_dev_copy(void *dst, const void *src, size_t len)
{
	if (!nv_sys.ready || nv_sys.ndev == 0)
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

	if (!nv_sys.ready || nv_sys.ndev == 0)
		return -ENOTSUP;
	/* Host tables are registered; the kernel needs their device view. */
	if (cudaPointerGetAttributes(&at, word) == cudaSuccess &&
	    at.type == cudaMemoryTypeHost)
		w = (const uint64_t *)(uintptr_t)nv_host_dptr((void *)(uintptr_t)word);
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
	    nv_resolve("cuMemGetHandleForAddressRange", (void **)&get_handle) < 0)
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

static int
nv_dev_probe(void)
{
	return nv_devices_init();
}

static const struct kvt_dev_ops nv_dev_ops = {
	.probe = nv_dev_probe,
	.mem_alloc = nv_mem_alloc,
	.mem_free = nv_mem_free,
	.mem_locate = nv_mem_locate,
	.host_register = nv_host_register,
	.host_unregister = nv_host_unregister,
	.copy = nv_dev_copy,
	.stream_wait = nv_stream_wait,
	.count = nv_dev_count,
	.pci = nv_dev_pci,
	.dmabuf = nv_mem_dmabuf,
};

KVT_DEV_REGISTER(cuda, nv_dev_ops);
