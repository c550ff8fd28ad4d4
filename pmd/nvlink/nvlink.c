/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nvlink: GPU-to-GPU transfers between processes of one host.
 *
 * Memory: the CUDA memory device (nvlink_dev.c, a kvt_dev_ops) allocates
 * and locates device memory; device memory from kvt_mem_alloc("cuda:N")
 * is cuMemCreate memory exported as a fabric handle where the device and
 * system allow it, else as a POSIX fd that the peer duplicates with
 * pidfd_getfd; other device memory (cudaMalloc, a framework's allocator)
 * goes through legacy CUDA IPC handles (nvlink_mem.c).  Fence tables in
 * host memory are memfd mappings the GPU writes to once registered with
 * cuMemHostRegister.  Every CUDA call goes through the driver, opened at
 * run time (nvlink_cu.c).
 *
 * Data path: the port takes whole submissions (KVT_PMD_F_WHOLE).  For
 * each (local GPU, remote GPU) pair there is a non-blocking stream (a
 * "lane").  Large requests go to the copy engines (cuMemcpyAsync); the
 * small pages of paged KV cache go to one launch of a gather kernel over
 * the submission's (src, dst, len) list, on at most the SM budget.  The
 * kernel's last block, after all blocks' copies are visible system-wide,
 * stores the fence (room id), the submission's done word and the lane's
 * progress word (see kernels.cu).  Stream order puts the copy-engine
 * copies before that kernel.  A small request skips the launch: the
 * lane's resident kernel picks it up from pinned host memory (see "Resident
 * kernels" in nvlink_xfer.c).  No completion is ever learned by querying
 * the stream: the lcore and kvt_poll() read words the GPU stored.
 *
 * A notification is pushed by the lcore into the peer's inbox once the
 * lane's progress word shows the submission's kernel finished; only then
 * is the done word stored.
 *
 * This file: ports, lanes and connections, and the kvt_pmd_ops.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_kvargs.h>

#include "nvlink.h"

RTE_LOG_REGISTER(nv_logtype, kvt.pmd.nvlink, NOTICE);

/* ---- lanes ---- */

static void
lane_free(struct nv_lane *l)
{
	if (l == NULL)
		return;
	if (nv_ctx_push(l->dev) == 0) {
		if (l->st != NULL) {
			nv_cu.cuStreamSynchronize(l->st);
			nv_cu.cuStreamDestroy(l->st);
		}
		if (l->join != NULL)
			nv_cu.cuEventDestroy(l->join);
		if (l->ring != NULL)
			nv_cu.cuMemFreeHost(l->ring);
		if (l->dring != 0)
			nv_cu.cuMemFree(l->dring);
		if (l->progress != NULL)
			nv_cu.cuMemFreeHost(l->progress);
		if (l->cmds != NULL)
			nv_cu.cuMemFreeHost(l->cmds);
		if (l->counters != 0)
			nv_cu.cuMemFree(l->counters);
		nv_ctx_pop();
	}
	free(l);
}

/* What a lane needs, in dev's context (current). */
static CUresult
lane_alloc(struct nv_lane *l)
{
	const unsigned int mapped = CU_MEMHOSTALLOC_DEVICEMAP |
		CU_MEMHOSTALLOC_PORTABLE;
	CUresult r;

	r = nv_cu.cuStreamCreate(&l->st, CU_STREAM_NON_BLOCKING);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuEventCreate(&l->join, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuMemHostAlloc((void **)&l->ring,
					 NV_RING * sizeof(*l->ring),
					 CU_MEMHOSTALLOC_PORTABLE);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuMemAlloc(&l->dring, NV_RING * sizeof(*l->ring));
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuMemHostAlloc((void **)&l->progress, 64, mapped);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuMemHostAlloc((void **)&l->cmds,
					 NV_TICKETS * sizeof(*l->cmds), mapped);
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuMemAlloc(&l->counters,
				     NV_TICKETS * sizeof(unsigned int));
	if (r == CUDA_SUCCESS)
		r = nv_cu.cuMemsetD8(l->counters, 0,
				     NV_TICKETS * sizeof(unsigned int));
	return r;
}

static struct nv_lane *
lane_new(int dev)
{
	struct nv_lane *l = calloc(1, sizeof(*l));
	CUresult r;

	if (l == NULL)
		return NULL;
	l->dev = dev;
	if (nv_ctx_push(dev) < 0) {
		free(l);
		return NULL;
	}
	r = lane_alloc(l);
	nv_ctx_pop();
	if (r != CUDA_SUCCESS) {
		NV_LOG(ERR, "lane on cuda:%d: %s", dev, nv_err(r));
		lane_free(l);
		return NULL;
	}
	*l->progress = 0;
	l->progress_d = nv_host_dptr(l->progress);
	memset(l->cmds, 0, NV_TICKETS * sizeof(*l->cmds));
	l->cmds_d = nv_host_dptr(l->cmds);
	return l;
}

static int
nv_probe(const struct kvt_pmd *pmd, const char *args)
{
	static const char *const keys[] = { "per_gpu", "sms", "resident", NULL };
	struct rte_kvargs *kv = NULL;
	struct nv_port *np;
	char name[32], image[24];
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
	n = nv_devices_init();
	if (n == 0) {
		NV_LOG(NOTICE, "%s: no nvlink port", nv_sys.why);
		return 0;
	}
	for (i = 0; i < (per_gpu ? n : 1); i++) {
		np = calloc(1, sizeof(*np));
		if (np == NULL)
			return -ENOMEM;
		np->dev = per_gpu ? i : -1;
		np->blocks = (unsigned int)RTE_MIN(sms, (long)nv_sys.dev[0].sms) *
			NV_BLOCKS_PER_SM;
		np->res_idle_us = (unsigned int)idle;
		if (per_gpu)
			snprintf(name, sizeof(name), "nvlink:%d", i);
		else
			snprintf(name, sizeof(name), "nvlink");
		if (kvt_port_create(pmd, name, nv_sys.dev[per_gpu ? i : 0].numa,
				    np) == NULL) {
			free(np);
			return -ENOSPC;
		}
	}
	if (nv_sys.dev[0].image_sm != 0)
		snprintf(image, sizeof(image), "sm_%u cubin",
			 nv_sys.dev[0].image_sm);
	else
		snprintf(image, sizeof(image), "PTX");
	NV_LOG(NOTICE, "%d GPU(s), %s, SM budget %ld, resident kernels %s%s; CUDA driver %d.%d, kernels from %s",
	       n, per_gpu ? "a port per GPU" : "one port", sms,
	       idle > 0 ? "on" : "off",
	       nv_sys.dev[0].fabric ? ", fabric handles" : "",
	       nv_sys.driver / 1000, nv_sys.driver % 1000 / 10, image);
	return 0;
}

/* Lanes for every pair this port serves, made before the lcores run. */
static int
nv_start(struct kvt_port *port)
{
	struct nv_port *np = port->priv;
	int s, d;

	for (s = 0; s < nv_sys.ndev; s++) {
		if (np->dev >= 0 && s != np->dev)
			continue;
		for (d = 0; d < nv_sys.ndev; d++) {
			np->lane[s][d] = lane_new(s);
			if (np->lane[s][d] == NULL)
				return -ENOMEM;
		}
	}
	np->res_idle = rte_get_tsc_hz() / 1000000 * np->res_idle_us;
	np->scratch_cap = 65536;
	np->scratch = malloc(np->scratch_cap * sizeof(*np->scratch));
	return np->scratch != NULL ? 0 : -ENOMEM;
}

static void
nv_stop(struct kvt_port *port)
{
	struct nv_port *np = port->priv;
	struct nv_wait *w;
	int s, d;

	/* Finish what the GPU has, then settle what waits on it. */
	nv_res_stop_all(np);
	for (s = 0; s < NV_MAX_DEV; s++)
		for (d = 0; d < NV_MAX_DEV; d++)
			if (np->lane[s][d] != NULL && nv_ctx_push(s) == 0) {
				nv_cu.cuStreamSynchronize(np->lane[s][d]->st);
				nv_ctx_pop();
			}
	while ((w = np->waits) != NULL) {
		const struct kvt_subinfo *si = w->d->data;

		np->waits = w->next;
		kvt_subinfo_fail(si, -ECANCELED);
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


static int
nv_endpoint(struct kvt_port *port, struct kvt_buf *ep)
{
	struct nv_ep e = { .ndev = (uint32_t)nv_sys.ndev };
	int i;

	RTE_SET_USED(port);
	for (i = 0; i < nv_sys.ndev; i++)
		memcpy(e.uuid[i], nv_sys.dev[i].uuid, 16);
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
		seen += nv_dev_by_uuid(e.uuid[i]) >= 0;
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

static const struct kvt_pmd_ops nv_ops = {
	.flags = KVT_PMD_F_ORDERED | KVT_PMD_F_WHOLE | KVT_PMD_F_PEER_COPIES,
	.rank = 40,
	.probe = nv_probe,
	.start = nv_start,
	.stop = nv_stop,
	.remove = nv_remove,
	.submit = nv_submit,
	.poll = nv_poll,
	.idle = nv_idle,
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
};

KVT_PMD_REGISTER(nvlink, nv_ops);
