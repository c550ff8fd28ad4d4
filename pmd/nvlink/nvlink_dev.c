/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA memory device (kvt_dev.h): device memory for kvt_mem_alloc()
 * (cuMemCreate, exported as a fabric handle or a POSIX fd), locating
 * device addresses, host memory the GPUs store completions into, copies
 * and stream waits on fence words, and the facts NICs need (PCI
 * addresses, dma-buf exports).  Driver calls go through nv_cu
 * (nvlink_cu.c); a call from an application thread pushes the primary
 * context of the device it is about and pops it after, so the thread's
 * own current context stays as it was.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvlink.h"

struct nv_system nv_sys;

/* ---- devices ---- */

/* PCI address of a device, lower case as sysfs spells it. */
static int
dev_pci(int dev, char *pci, size_t len)
{
	char *c;

	if (nv_cu.cuDeviceGetPCIBusId(pci, (int)len, nv_sys.dev[dev].cu) !=
	    CUDA_SUCCESS)
		return -ENODEV;
	for (c = pci; *c != '\0'; c++)
		*c = (char)(*c >= 'A' && *c <= 'F' ? *c - 'A' + 'a' : *c);
	return 0;
}

static int
dev_numa(int d)
{
	char bus[32], path[96];

	if (dev_pci(d, bus, sizeof(bus)) < 0)
		return -1;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
	return kvt_sysfs_int(path, -1);
}

/* Facts of device i, its primary context and its kernels. */
static int
dev_init(int i)
{
	struct nv_dev *d = &nv_sys.dev[i];
	CUuuid uuid;
	CUresult r;
	int ret;

	r = nv_cu.cuDeviceGet(&d->cu, i);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuDeviceGetUuid(&uuid, d->cu);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuDeviceGetAttribute(&d->sms,
			CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->cu);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuDevicePrimaryCtxRetain(&d->ctx, d->cu);
	if (r != CUDA_SUCCESS) {
		NV_LOG(ERR, "cuda:%d: %s", i, nv_err(r));
		return -EIO;
	}
	memcpy(d->uuid, uuid.bytes, 16);
	d->numa = dev_numa(i);
	if (nv_cu.cuDeviceGetAttribute(&d->fabric,
			CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
			d->cu) != CUDA_SUCCESS)
		d->fabric = 0;
	if (nv_ctx_push(i) < 0)
		return -EIO;
	ret = nv_kernels_load(i);
	nv_ctx_pop();
	return ret;
}

/* Let each device reach the others' memory (NVLink or PCIe P2P). */
static void
peers_enable(void)
{
	int i, j, can;
	CUresult r;

	for (i = 0; i < nv_sys.ndev; i++) {
		if (nv_ctx_push(i) < 0)
			continue;
		for (j = 0; j < nv_sys.ndev; j++) {
			can = 0;
			if (j == i || nv_cu.cuDeviceCanAccessPeer(&can,
					nv_sys.dev[i].cu, nv_sys.dev[j].cu) !=
			    CUDA_SUCCESS || !can)
				continue;
			r = nv_cu.cuCtxEnablePeerAccess(nv_sys.dev[j].ctx, 0);
			if (r != CUDA_SUCCESS &&
			    r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
				NV_LOG(WARNING, "cuda:%d cannot reach cuda:%d: %s",
				       i, j, nv_err(r));
		}
		nv_ctx_pop();
	}
}

int
nv_devices_init(void)
{
	static int tried;
	int i, n = 0, v = 0;

	/* Once per process: the answer does not change. */
	if (nv_sys.ready || tried)
		return nv_sys.ndev;
	tried = 1;
	nv_sys.ndev = 0;
	if (nv_driver_load(nv_sys.why, sizeof(nv_sys.why)) < 0)
		return 0;
	if (nv_cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
		snprintf(nv_sys.why, sizeof(nv_sys.why), "no CUDA device");
		return 0;
	}
	n = RTE_MIN(n, NV_MAX_DEV);
	for (i = 0; i < n; i++)
		if (dev_init(i) < 0) {
			snprintf(nv_sys.why, sizeof(nv_sys.why),
				 "cuda:%d does not start", i);
			return 0;
		}
	nv_sys.ndev = n;
	peers_enable();
	nv_cu.cuDeviceGetAttribute(&v,
		CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
		nv_sys.dev[0].cu);
	nv_sys.host_ptr_ok = v;
	nv_sys.ready = 1;
	return n;
}

/* Device-accessible address of registered host memory. */
uint64_t
nv_host_dptr(void *p)
{
	CUdeviceptr d = 0;
	CUresult r;

	if (nv_sys.host_ptr_ok)
		return (uintptr_t)p;
	if (nv_ctx_push(0) < 0)
		return 0;
	r = nv_cu.cuMemHostGetDevicePointer(&d, p, 0);
	nv_ctx_pop();
	return r == CUDA_SUCCESS ? d : 0;
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
	return nv_cu.cuMemSetAccess(va, size, acc, (size_t)nv_sys.ndev) ==
		CUDA_SUCCESS ? 0 : -EIO;
}

/* cuMemCreate memory, mapped where every device reaches it, exported. */
static int
vmm_alloc(const struct kvt_loc *loc, size_t len, void **addr)
{
	CUmemAllocationProp prop;
	struct nv_alloc *a;
	size_t gran = 0;
	CUresult r;

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
	nv_cu.cuMemGetAllocationGranularity(&gran, &prop,
					    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	a->size = RTE_ALIGN_CEIL(len, RTE_MAX(gran, (size_t)(2 << 20)));
	a->dev = loc->id;
	a->fd = -1;
	r = nv_cu.cuMemCreate(&a->h, a->size, &prop, 0);
	if (r != CUDA_SUCCESS && nv_sys.dev[loc->id].fabric) {
		/* Fabric needs IMEX channels the system may not have. */
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		r = nv_cu.cuMemCreate(&a->h, a->size, &prop, 0);
	}
	if (r != CUDA_SUCCESS) {
		NV_LOG(ERR, "cuMemCreate %zu bytes on cuda:%d: %s", a->size,
		       loc->id, nv_err(r));
		free(a);
		return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	}
	if ((prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) &&
	    nv_cu.cuMemExportToShareableHandle(&a->fabric, a->h,
			CU_MEM_HANDLE_TYPE_FABRIC, 0) == CUDA_SUCCESS)
		a->has_fabric = 1;
	if (nv_cu.cuMemExportToShareableHandle(&a->fd, a->h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS)
		a->fd = -1;
	if (nv_cu.cuMemAddressReserve(&a->va, a->size, 0, 0, 0) != CUDA_SUCCESS)
		goto release;
	if (nv_cu.cuMemMap(a->va, a->size, 0, a->h, 0) != CUDA_SUCCESS)
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
	nv_cu.cuMemUnmap(a->va, a->size);
free_va:
	nv_cu.cuMemAddressFree(a->va, a->size);
release:
	if (a->fd >= 0)
		close(a->fd);
	nv_cu.cuMemRelease(a->h);
	free(a);
	return -EIO;
}

static int
nv_mem_alloc(const struct kvt_loc *loc, size_t len, void **addr)
{
	int ret;

	if (loc->type != KVT_LOC_CUDA)
		return -ENOTSUP;
	if (loc->id >= nv_sys.ndev)
		return -ENODEV;
	if (nv_ctx_push(loc->id) < 0)
		return -EIO;
	ret = vmm_alloc(loc, len, addr);
	nv_ctx_pop();
	return ret;
}

/* Let the work of every device that may touch memory about to go end. */
static void
devices_sync(void)
{
	int i;

	for (i = 0; i < nv_sys.ndev; i++)
		if (nv_ctx_push(i) == 0) {
			nv_cu.cuCtxSynchronize();
			nv_ctx_pop();
		}
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
	devices_sync();
	nv_cu.cuMemUnmap(a->va, a->size);
	nv_cu.cuMemAddressFree(a->va, a->size);
	nv_cu.cuMemRelease(a->h);
	if (a->fd >= 0)
		close(a->fd);
	free(a);
	return 0;
}

/*
 * What the driver knows of an address: its memory type (0 for memory it
 * does not know) and, for device memory, the local index of its device.
 * Managed memory counts as unknown: kvt moves it as host memory does.
 */
static unsigned int
ptr_type(const void *addr, int *dev)
{
	CUpointer_attribute which[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
		CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
		CU_POINTER_ATTRIBUTE_IS_MANAGED };
	unsigned int type = 0, managed = 0;
	int ordinal = -1, i;
	void *out[] = { &type, &ordinal, &managed };

	if (nv_cu.cuPointerGetAttributes(RTE_DIM(which), which, out,
			(CUdeviceptr)(uintptr_t)addr) != CUDA_SUCCESS || managed)
		return 0;
	*dev = -1;
	for (i = 0; i < nv_sys.ndev; i++)
		if (nv_sys.dev[i].cu == ordinal)
			*dev = i;
	return type;
}

static int
nv_mem_locate(const void *addr, struct kvt_loc *loc)
{
	int dev = -1;

	if (!nv_sys.ready || nv_sys.ndev == 0)
		return -ENOTSUP;
	if (ptr_type(addr, &dev) != CU_MEMORYTYPE_DEVICE || dev < 0)
		return -ENOTSUP;
	loc->type = KVT_LOC_CUDA;
	loc->id = (int16_t)dev;
	return 0;
}

static int
nv_host_register(void *addr, size_t len)
{
	CUresult r;

	if (!nv_sys.ready || nv_sys.ndev == 0)
		return 0;
	if (nv_ctx_push(0) < 0)
		return -EIO;
	r = nv_cu.cuMemHostRegister(addr, len, CU_MEMHOSTREGISTER_PORTABLE |
				    CU_MEMHOSTREGISTER_DEVICEMAP);
	nv_ctx_pop();
	return r == CUDA_SUCCESS ? 0 : -EIO;
}

static void
nv_host_unregister(void *addr)
{
	if (!nv_sys.ready || nv_sys.ndev == 0 || nv_ctx_push(0) < 0)
		return;
	nv_cu.cuMemHostUnregister(addr);
	nv_ctx_pop();
}

static int
nv_dev_copy(void *dst, const void *src, size_t len)
{
	CUresult r;

	if (!nv_sys.ready || nv_sys.ndev == 0)
		return -ENOTSUP;
	if (nv_ctx_push(0) < 0)
		return -EIO;
	r = nv_cu.cuMemcpy((CUdeviceptr)(uintptr_t)dst,
			   (CUdeviceptr)(uintptr_t)src, len);
	nv_ctx_pop();
	return r == CUDA_SUCCESS ? 0 : -EIO;
}

/* The local index of the device a stream (NULL: the thread's default
 * stream) runs on, -1 if it is none of the primary contexts'. */
static int
stream_dev(CUstream st)
{
	CUcontext ctx = NULL;
	int i;

	if (st != NULL ? nv_cu.cuStreamGetCtx(st, &ctx) != CUDA_SUCCESS :
	    nv_cu.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
		return -1;
	if (st == NULL && ctx == NULL)
		return 0;	/* the runtime would use device 0 */
	for (i = 0; i < nv_sys.ndev; i++)
		if (nv_sys.dev[i].ctx == ctx)
			return i;
	return -1;
}

static int
nv_stream_wait(const uint64_t *word, uint64_t room, uint64_t timeout_ns,
	       uint32_t *status, void *stream)
{
	uint64_t w = (uintptr_t)word;
	int dev = -1, ret;

	if (!nv_sys.ready || nv_sys.ndev == 0)
		return -ENOTSUP;
	/* Host tables are registered; the kernel needs their device view. */
	if (ptr_type(word, &dev) == CU_MEMORYTYPE_HOST)
		w = nv_host_dptr((void *)(uintptr_t)word);
	dev = stream_dev(stream);
	if (dev < 0 || w == 0)
		return -EINVAL;
	if (nv_ctx_push(dev) < 0)
		return -EIO;
	ret = nv_launch_fence_wait(dev, w, room, timeout_ns,
				   (uintptr_t)status, stream);
	nv_ctx_pop();
	return ret;
}

static int
nv_dev_count(void)
{
	return nv_devices_init();
}

static int
nv_dev_pci(int dev, char *pci, size_t len)
{
	if (!nv_sys.ready || dev < 0 || dev >= nv_sys.ndev)
		return -ENODEV;
	return dev_pci(dev, pci, len);
}

/*
 * dma-buf export of device memory, for NICs (ibv_reg_dmabuf_mr).  The
 * driver exports page-aligned ranges; off says where addr lies inside.
 */
static int
nv_mem_dmabuf(const void *addr, size_t len, int *fd, uint64_t *off)
{
	uintptr_t a = (uintptr_t)addr, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = a & ~(pg - 1);
	size_t span = RTE_ALIGN_CEIL(a + len, pg) - start;
	int dev = -1;
	CUresult r;

	if (!nv_sys.ready || ptr_type(addr, &dev) != CU_MEMORYTYPE_DEVICE)
		return -ENOTSUP;
	r = nv_cu.cuMemGetHandleForAddressRange(fd, (CUdeviceptr)start, span,
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
