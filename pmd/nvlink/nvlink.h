/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the files of the nvlink PMD share: nvlink_cu.c (the CUDA driver,
 * opened at run time: entry points, contexts, the kernels' images and
 * launches), nvlink_dev.c (the CUDA memory device: devices, allocations,
 * the kvt_dev_ops),
 * nvlink_mem.c (region keys and imports), nvlink.c (ports, lanes,
 * connections, the kvt_pmd_ops) and nvlink_xfer.c (the data path).
 * kernels.h is what the C side shares with the CUDA kernels.
 */
#ifndef KVT_NVLINK_H
#define KVT_NVLINK_H

#include <pthread.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "kvt_pmd_kit.h"
#include "kernels.h"

extern int nv_logtype;
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

/*
 * The driver calls kvt makes, each with the version of its ABI in CUDA
 * 12.0 (the typedef cudaTypedefs.h gives it), looked up at run time by
 * nvlink_cu.c: nv_cu.cuMemcpyAsync(...) and so on.
 */
#define NV_DRIVER_CALLS(X)						\
	X(cuInit, 2000)							\
	X(cuDriverGetVersion, 2020)					\
	X(cuGetErrorString, 6000)					\
	X(cuDeviceGet, 2000)						\
	X(cuDeviceGetCount, 2000)					\
	X(cuDeviceGetAttribute, 2000)					\
	X(cuDeviceGetUuid, 11040)					\
	X(cuDeviceGetPCIBusId, 4010)					\
	X(cuDeviceCanAccessPeer, 4000)					\
	X(cuDevicePrimaryCtxRetain, 7000)				\
	X(cuCtxSetCurrent, 4000)					\
	X(cuCtxGetCurrent, 4000)					\
	X(cuCtxPushCurrent, 4000)					\
	X(cuCtxPopCurrent, 4000)					\
	X(cuCtxEnablePeerAccess, 4000)					\
	X(cuCtxSynchronize, 2000)					\
	X(cuStreamCreate, 2000)						\
	X(cuStreamDestroy, 4000)					\
	X(cuStreamSynchronize, 2000)					\
	X(cuStreamWaitEvent, 3020)					\
	X(cuStreamWriteValue64, 11070)					\
	X(cuStreamGetCtx, 9020)						\
	X(cuEventCreate, 2000)						\
	X(cuEventDestroy, 4000)						\
	X(cuEventRecord, 2000)						\
	X(cuMemHostAlloc, 2020)						\
	X(cuMemFreeHost, 2000)						\
	X(cuMemAlloc, 3020)						\
	X(cuMemFree, 3020)						\
	X(cuMemsetD8, 3020)						\
	X(cuMemcpy, 4000)						\
	X(cuMemcpyAsync, 4000)						\
	X(cuMemHostRegister, 6050)					\
	X(cuMemHostUnregister, 4000)					\
	X(cuMemHostGetDevicePointer, 3020)				\
	X(cuPointerGetAttributes, 7000)					\
	X(cuIpcGetMemHandle, 4010)					\
	X(cuIpcOpenMemHandle, 11000)					\
	X(cuIpcCloseMemHandle, 4010)					\
	X(cuModuleLoadData, 2000)					\
	X(cuModuleGetFunction, 2000)					\
	X(cuLaunchKernel, 4000)						\
	X(cuMemCreate, 10020)						\
	X(cuMemExportToShareableHandle, 10020)				\
	X(cuMemImportFromShareableHandle, 10020)			\
	X(cuMemMap, 10020)						\
	X(cuMemUnmap, 10020)						\
	X(cuMemSetAccess, 10020)					\
	X(cuMemAddressReserve, 10020)					\
	X(cuMemAddressFree, 10020)					\
	X(cuMemRelease, 10020)						\
	X(cuMemGetAllocationGranularity, 10020)				\
	X(cuMemGetAddressRange, 3020)					\
	X(cuMemGetHandleForAddressRange, 11070)

struct nv_driver {
#define NV_MEMBER(name, v) PFN_ ## name ## _v ## v name;
	NV_DRIVER_CALLS(NV_MEMBER)
#undef NV_MEMBER
};

extern struct nv_driver nv_cu;

struct nv_dev {
	CUdevice cu;
	CUcontext ctx;		/* the primary context, retained */
	CUmodule mod;		/* the kernels */
	CUfunction gather, resident, fence_wait;
	unsigned int image_sm;	/* the cubin loaded, 0: PTX */
	uint8_t uuid[16];
	int sms;
	int numa;
	int fabric;		/* exports fabric handles */
};

struct nv_system {
	int ndev;
	struct nv_dev dev[NV_MAX_DEV];
	int host_ptr_ok;	/* registered host memory has the same VA */
	int driver;		/* its CUDA version, 12080 for 12.8 */
	char why[160];		/* why there is no GPU, if there is none */
	int ready;
};

extern struct nv_system nv_sys;

/* Device memory from kvt_mem_alloc("cuda:N"), under nv_lock. */
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

extern pthread_mutex_t nv_lock;

/* Region keys: what a peer needs to map a region (nvlink_mem.c). */
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

/* A peer's region mapped here. */
struct nv_rmem {
	uint8_t *base;		/* where the peer's rm->base is, here */
	int dev;		/* local index of the device it is on, -1 host */
	int kind;
	/* what to undo */
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h;
	CUdeviceptr ipc_base;
	struct kvt_map host;
};

/* Ports and lanes: one stream per (local GPU, remote GPU). */

struct nv_lane {
	CUstream st;
	CUevent join;		/* other lanes wait on it */
	int dev;		/* runs on */
	struct kvt_nv_task *ring;	/* pinned host: filled by the lcore */
	CUdeviceptr dring;	/* device mirror the kernel reads */
	uint64_t head;		/* tasks handed out, ever */
	uint64_t *progress;	/* pinned: last finished ticket */
	uint64_t progress_d;	/* its device address */
	uint64_t ticket;	/* last issued */
	uint64_t ring_end[NV_TICKETS];	/* head after each ticket */
	CUdeviceptr counters;	/* device: an unsigned int per ticket slot */
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

/* A connection (nvlink.c). */
struct nv_conn {
	struct kvt_conn c;	/* first */
	struct kvt_map peer_inbox;
	struct kvt_shared_inbox inbox;
};

/* nvlink_cu.c */
int nv_driver_load(char *why, size_t len);
const char *nv_err(CUresult r);
int nv_ctx_push(int dev);
void nv_ctx_pop(void);
void nv_use(int dev);
int nv_kernels_load(int dev);
int nv_launch_gather(const struct nv_lane *l, CUdeviceptr tasks, uint32_t n,
		     const struct kvt_nv_task *inl,
		     const struct kvt_nv_tail *tail, unsigned int blocks);
int nv_launch_resident(const struct nv_lane *l, uint64_t first);
int nv_launch_fence_wait(int dev, uint64_t word, uint64_t room,
			 uint64_t timeout_ns, uint64_t status, CUstream st);

/* nvlink_dev.c */
int nv_devices_init(void);
uint64_t nv_host_dptr(void *p);
struct nv_alloc *nv_alloc_find(uintptr_t p);
int nv_map_all_devices(CUdeviceptr va, size_t size);

/* nvlink_mem.c */
int nv_dev_by_uuid(const uint8_t *uuid);
int nv_mem_register(struct kvt_port *port, struct kvt_lmem *m);
void nv_mem_unregister(struct kvt_port *port, struct kvt_lmem *m);
int nv_mem_export(struct kvt_port *port, const struct kvt_lmem *m,
		  struct kvt_buf *key);
int nv_rmem_import(struct kvt_conn *c, struct kvt_rmem *rm, const uint8_t *key,
		   size_t len);
void nv_rmem_release(struct kvt_conn *c, struct kvt_rmem *rm);

/* nvlink_xfer.c */
void nv_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n);
unsigned int nv_poll(struct kvt_port *port);
uint64_t nv_idle(struct kvt_port *port, int *fd);
void nv_res_stop_all(struct nv_port *np);

#endif /* KVT_NVLINK_H */
