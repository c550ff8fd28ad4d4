/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Memory device interface.
 *
 * A memory device is memory that kvt does not place itself: GPU memory.
 * Its driver is one const struct kvt_dev_ops registered by
 * KVT_DEV_REGISTER(), beside the transports (kvt_pmd.h) and independent
 * of them: the engine asks the devices where an address lives, to
 * allocate device memory for kvt_mem_alloc(), to make batch memory
 * reachable by the device, and to copy into device memory (fence
 * tables); transports ask them for the facts they need (a NIC's dma-buf
 * of GPU memory, a GPU's PCI address).  The model is DPDK's rte_gpu_ops
 * beside ethdev.
 *
 * Every op runs on application or control threads, never on an lcore's
 * hot path, and every op may be NULL: the engine reads a NULL op as
 * -ENOTSUP (or, for the void ones, as nothing to do).  A device that
 * probed no hardware is never asked anything but probe and count.
 */
#ifndef KVT_DEV_H
#define KVT_DEV_H

#include <stddef.h>
#include <stdint.h>

#include <rte_common.h>

/** Memory location kinds. */
enum kvt_loc_type {
	KVT_LOC_CPU = 0,
	KVT_LOC_CUDA = 1,
};

/** A memory location: cpu:N (a NUMA node) or cuda:N (a device). */
struct kvt_loc {
	uint16_t type;		/**< enum kvt_loc_type */
	int16_t id;		/**< NUMA node or CUDA device */
};

/**
 * Parse a location: "cpu:N" or "cuda:N", N from 0 to 1023.
 *
 * @return 0, or -EINVAL.
 */
int kvt_parse_loc(const char *s, struct kvt_loc *loc);

/**
 * Find the hardware (kvt_init(), before any other op).
 *
 * @retval >0 the number of devices; the device is on.
 * @retval 0 no hardware here (no driver, no device); the device stays off.
 * @retval -errno the driver is there but unusable; the device stays off
 *   and the reason is logged.
 */
typedef int (*kvt_dev_probe_t)(void);

/**
 * Allocate len bytes of shareable memory at loc.
 *
 * @retval 0 *addr holds the memory.
 * @retval -ENOTSUP loc is not a kind this device owns.
 * @retval -ENODEV loc names a device this machine lacks.
 * @retval -ENOMEM the device is out of memory.
 * @retval -EIO the driver failed.
 */
typedef int (*kvt_dev_mem_alloc_t)(const struct kvt_loc *loc, size_t len,
				   void **addr);

/**
 * Free memory that mem_alloc returned.
 *
 * @retval 0 freed.
 * @retval -EINVAL addr is not an allocation of this device.
 */
typedef int (*kvt_dev_mem_free_t)(const struct kvt_loc *loc, void *addr,
				  size_t len);

/**
 * Where does addr live?
 *
 * @retval 0 addr is memory of this device; *loc says which.
 * @retval -ENOTSUP addr is not memory of this device.
 */
typedef int (*kvt_dev_mem_locate_t)(const void *addr, struct kvt_loc *loc);

/**
 * Make host memory the engine writes completions to (batch memory, fence
 * tables in host memory) reachable by the device, so that it may store
 * a done word or a fence there.
 *
 * @retval 0 registered (or nothing to do).
 * @retval -EIO the driver refused; the engine warns and goes on (device
 *   transports then cannot complete into that memory).
 */
typedef int (*kvt_dev_host_register_t)(void *addr, size_t len);

/** Undo host_register (also after kvt_fini()). */
typedef void (*kvt_dev_host_unregister_t)(void *addr);

/**
 * Synchronous copy where either side may be memory of this device.
 *
 * @retval 0 copied.
 * @retval -EIO the driver failed.
 */
typedef int (*kvt_dev_copy_t)(void *dst, const void *src, size_t len);

/**
 * Make a device stream wait until *word == room (kvt_fence_wait_stream()):
 * word is host or device memory; the device stores 1 in *status when
 * the room arrived, 2 when the word held another room, 3 after
 * timeout_ns.
 *
 * @retval 0 the wait is queued on stream.
 * @retval -EIO the driver failed.
 */
typedef int (*kvt_dev_stream_wait_t)(const uint64_t *word, uint64_t room,
				     uint64_t timeout_ns, uint32_t *status,
				     void *stream);

/**
 * The number of devices this process sees (also before probe: the
 * topology asks it).
 *
 * @return the count, 0 without a driver.
 */
typedef int (*kvt_dev_count_t)(void);

/**
 * The PCI address ("0000:3b:00.0", lower case) of device dev.
 *
 * @retval 0 pci holds it.
 * @retval -ENODEV no such device.
 */
typedef int (*kvt_dev_pci_t)(int dev, char *pci, size_t len);

/**
 * A dma-buf fd for device memory [addr, addr + len), for NICs that read
 * and write it directly.  The caller closes *fd.
 *
 * @retval 0 *fd and *off (addr's offset inside the dma-buf) are set.
 * @retval -ENOTSUP addr is not memory of this device, or its driver has
 *   no dma-buf export.
 * @retval -EIO the driver failed.
 */
typedef int (*kvt_dev_dmabuf_t)(const void *addr, size_t len, int *fd,
				uint64_t *off);

/** The operations of a memory device; any may be NULL. */
struct kvt_dev_ops {
	kvt_dev_probe_t probe;
	kvt_dev_mem_alloc_t mem_alloc;
	kvt_dev_mem_free_t mem_free;
	kvt_dev_mem_locate_t mem_locate;
	kvt_dev_host_register_t host_register;
	kvt_dev_host_unregister_t host_unregister;
	kvt_dev_copy_t copy;
	kvt_dev_stream_wait_t stream_wait;
	kvt_dev_count_t count;
	kvt_dev_pci_t pci;
	kvt_dev_dmabuf_t dmabuf;
};

/** A registered memory device. */
struct kvt_dev {
	const char *name;
	const struct kvt_dev_ops *ops;
	/** Engine-private: devices probe found (0: off). */
	int ndev;
	struct kvt_dev *next;
};

/** Add a device to the registry (constructors only). */
void kvt_dev_register(struct kvt_dev *dev);

/** Register a memory device from a constructor, DPDK style. */
#define KVT_DEV_REGISTER(nm, o)					\
	static struct kvt_dev kvt_dev_##nm = {				\
		.name = RTE_STR(nm),					\
		.ops = &(o),						\
	};								\
	RTE_INIT(kvt_dev_init_##nm)					\
	{								\
		kvt_dev_register(&kvt_dev_##nm);			\
	}

/*
 * What transports ask of the devices.  Any thread; each asks the
 * registered devices in turn.
 */

/**
 * The PCI address ("0000:3b:00.0") of CUDA device dev.
 *
 * @return 0, or -ENODEV (no device has that number).
 */
int kvt_cuda_pci(int dev, char *pci, size_t len);

/** Number of CUDA devices this process sees (0 without CUDA). */
int kvt_cuda_count(void);

/**
 * A dma-buf fd for device memory [addr, addr + len) (for NICs that read
 * and write GPU memory directly).  The caller closes *fd.
 *
 * @return 0 with *fd and *off (addr's offset inside the dma-buf);
 *   -ENOTSUP (no device owns that memory, or the driver has no dma-buf
 *   export), -EIO.
 */
int kvt_mem_dmabuf(const void *addr, size_t len, int *fd, uint64_t *off);

#endif /* KVT_DEV_H */
