/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The memory device registry (kvt_dev.h): devices register from
 * constructors, kvt_init() probes them, and the engine and the transports
 * reach device memory only through the functions here.  A NULL op reads
 * as -ENOTSUP.
 */
#include <errno.h>
#include <string.h>

#include "kvt_private.h"

static struct kvt_dev *kvt_devs;

void
kvt_dev_register(struct kvt_dev *dev)
{
	struct kvt_dev **pp = &kvt_devs;

	while (*pp != NULL)
		pp = &(*pp)->next;
	dev->next = NULL;
	*pp = dev;
}

void
kvt_devs_probe(void)
{
	struct kvt_dev *d;
	int n;

	for (d = kvt_devs; d != NULL; d = d->next) {
		if (d->ndev > 0)
			continue;	/* a later kvt_init: still there */
		n = d->ops->probe != NULL ? d->ops->probe() : 0;
		if (n < 0)
			KVT_LOG(WARNING, "memory device %s: probe failed: %s",
				d->name, strerror(-n));
		d->ndev = RTE_MAX(n, 0);
		if (d->ndev > 0)
			KVT_LOG(DEBUG, "memory device %s: %d device(s)",
				d->name, d->ndev);
	}
}

const struct kvt_dev *
kvt_dev_locate(const void *addr, struct kvt_loc *loc)
{
	const struct kvt_dev *d;

	for (d = kvt_devs; d != NULL; d = d->next)
		if (d->ndev > 0 && d->ops->mem_locate != NULL &&
		    d->ops->mem_locate(addr, loc) == 0)
			return d;
	return NULL;
}

int
kvt_dev_alloc(const struct kvt_loc *loc, size_t len, void **addr,
	      const struct kvt_dev **owner)
{
	const struct kvt_dev *d;
	int ret;

	for (d = kvt_devs; d != NULL; d = d->next) {
		if (d->ndev == 0 || d->ops->mem_alloc == NULL)
			continue;
		ret = d->ops->mem_alloc(loc, len, addr);
		if (ret == -ENOTSUP)
			continue;
		if (ret == 0)
			*owner = d;
		return ret;
	}
	return -ENODEV;
}

int
kvt_dev_free(const struct kvt_dev *d, const struct kvt_loc *loc, void *addr,
	     size_t len)
{
	if (d->ops->mem_free == NULL)
		return -ENOTSUP;
	return d->ops->mem_free(loc, addr, len);
}

const struct kvt_dev *
kvt_dev_copier(void)
{
	const struct kvt_dev *d;

	for (d = kvt_devs; d != NULL; d = d->next)
		if (d->ndev > 0 && d->ops->copy != NULL)
			return d;
	return NULL;
}

int
kvt_dev_copy(const struct kvt_dev *d, void *dst, const void *src, size_t len)
{
	if (d == NULL || d->ops->copy == NULL)
		return -ENOTSUP;
	return d->ops->copy(dst, src, len);
}

int
kvt_dev_stream_wait(const struct kvt_dev *d, const uint64_t *word,
		    uint64_t room, uint64_t timeout_ns, uint32_t *status,
		    void *stream)
{
	if (d == NULL || d->ops->stream_wait == NULL)
		return -ENOTSUP;
	return d->ops->stream_wait(word, room, timeout_ns, status, stream);
}

/*
 * Batch memory and host fence tables: every device that may store into
 * them registers them.  Also used after kvt_fini() for unregistering,
 * which is why a device keeps its probe result.
 */
void
kvt_host_register(void *addr, size_t len)
{
	const struct kvt_dev *d;
	int ret;

	for (d = kvt_devs; d != NULL; d = d->next) {
		if (d->ndev == 0 || d->ops->host_register == NULL)
			continue;
		ret = d->ops->host_register(addr, len);
		if (ret < 0)
			KVT_LOG(WARNING, "memory device %s cannot register batch memory: %s",
				d->name, strerror(-ret));
	}
}

void
kvt_host_unregister(void *addr)
{
	const struct kvt_dev *d;

	for (d = kvt_devs; d != NULL; d = d->next)
		if (d->ndev > 0 && d->ops->host_unregister != NULL)
			d->ops->host_unregister(addr);
}

/* Facts for the transports (a NIC registering GPU memory, the topology):
 * asked of every registered device, probed or not. */
int
kvt_cuda_count(void)
{
	const struct kvt_dev *d;
	int n;

	for (d = kvt_devs; d != NULL; d = d->next)
		if (d->ops->count != NULL && (n = d->ops->count()) > 0)
			return n;
	return 0;
}

int
kvt_cuda_pci(int dev, char *pci, size_t len)
{
	const struct kvt_dev *d;

	for (d = kvt_devs; d != NULL; d = d->next)
		if (d->ops->pci != NULL && d->ops->pci(dev, pci, len) == 0)
			return 0;
	return -ENODEV;
}

int
kvt_mem_dmabuf(const void *addr, size_t len, int *fd, uint64_t *off)
{
	const struct kvt_dev *d;
	int ret = -ENOTSUP;

	for (d = kvt_devs; d != NULL; d = d->next) {
		if (d->ops->dmabuf == NULL)
			continue;
		ret = d->ops->dmabuf(addr, len, fd, off);
		if (ret != -ENOTSUP)
			return ret;
	}
	return ret;
}
