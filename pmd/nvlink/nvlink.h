/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the files of the nvlink PMD share: nvlink_dev.c (the CUDA memory
 * device: driver entry points, devices, allocations, the kvt_dev_ops),
 * nvlink_mem.c (region keys and imports), nvlink.c (ports, lanes,
 * connections, the kvt_pmd_ops) and nvlink_xfer.c (the data path).
 * kernels.h is what the C side shares with the CUDA kernels.
 */
#ifndef KVT_NVLINK_H
#define KVT_NVLINK_H

#include <pthread.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "kvt_pmd.h"
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

/* Driver entry points, looked up at run time (nvlink_dev.c). */
struct nv_driver {
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
};

extern struct nv_driver nv_cu;

struct nv_dev {
	uint8_t uuid[16];
	int sms;
	int numa;
	int fabric;		/* exports fabric handles */
};

struct nv_system {
	int ndev;
	struct nv_dev dev[NV_MAX_DEV];
	int host_ptr_ok;	/* registered host memory has the same VA */
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
	void *ipc_base;
	struct kvt_map host;
};

/* Ports and lanes: one stream per (local GPU, remote GPU). */

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

/* A connection (nvlink.c). */
struct nv_conn {
	struct kvt_conn c;	/* first */
	struct kvt_map peer_inbox;
	struct kvt_shared_inbox inbox;
};

/* nvlink_dev.c */
int nv_devices_init(void);
int nv_dev_save(void);
uint64_t nv_host_dptr(void *p);
struct nv_alloc *nv_alloc_find(uintptr_t p);
int nv_map_all_devices(CUdeviceptr va, size_t size);
int nv_resolve(const char *sym, void **fn);

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
