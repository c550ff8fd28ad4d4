/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RDMA verbs transport: one port per active NIC port, each on an lcore of
 * the NIC's NUMA node, with its own completion queue and RC queue pairs to
 * every peer (rdma_conn.c).  Memory is registered on every NIC; the
 * topology decides which NICs a region's bytes prefer (rd_topo_*), so
 * one request is striped over all NICs near its memory.
 *
 * Arguments (--kvt-pmd rdma,...): qps=N queue pairs per peer and NIC
 * (default 2), sq=N send queue depth (default 512), sysfs=DIR the root the
 * topology is read from (default /).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_kvargs.h>

#include "rdma.h"

RTE_LOG_REGISTER(rd_logtype, kvt.pmd.rdma, NOTICE);

static struct rd_topo rd_topo;
static struct rd_dev *rd_devs;

/* ---- devices ---- */

static struct rd_dev *
dev_open(struct ibv_device *d)
{
	struct ibv_device_attr attr;
	struct rd_dev *dev;
	int fl;

	for (dev = rd_devs; dev != NULL; dev = dev->next) {
		if (strcmp(dev->name, rd_ibv.get_device_name(d)) == 0) {
			dev->refs++;
			return dev;
		}
	}
	dev = calloc(1, sizeof(*dev));
	if (dev == NULL)
		return NULL;
	snprintf(dev->name, sizeof(dev->name), "%s", rd_ibv.get_device_name(d));
	dev->ctx = rd_ibv.open_device(d);
	if (dev->ctx == NULL) {
		RD_LOG(ERR, "%s: cannot open: %s", dev->name, strerror(errno));
		goto free_dev;
	}
	if (rd_ibv.query_device(dev->ctx, &attr) != 0) {
		RD_LOG(ERR, "%s: cannot query: %s", dev->name, strerror(errno));
		goto close_dev;
	}
	dev->max_qp_wr = (uint32_t)RTE_MAX(attr.max_qp_wr, 0);
	dev->max_cqe = (uint32_t)RTE_MAX(attr.max_cqe, 0);
	dev->max_sge = (uint32_t)RTE_MAX(attr.max_sge, 0);
	dev->max_mr_size = attr.max_mr_size;
	dev->max_rd_atomic = (uint8_t)RTE_MIN(RTE_MAX(attr.max_qp_rd_atom, 0), 16);
	dev->max_init_rd_atomic =
		(uint8_t)RTE_MIN(RTE_MAX(attr.max_qp_init_rd_atom, 0), 16);
	RD_LOG(DEBUG, "%s: max_qp_wr %d, max_cqe %d, max_sge %d, max_mr_size %#" PRIx64
	       ", max_qp_rd_atom %d, max_qp_init_rd_atom %d", dev->name,
	       attr.max_qp_wr, attr.max_cqe, attr.max_sge,
	       (uint64_t)attr.max_mr_size, attr.max_qp_rd_atom,
	       attr.max_qp_init_rd_atom);
	if (dev->max_sge < 1 || dev->max_qp_wr < 2 * RD_CHAIN ||
	    dev->max_qp_wr < RD_NOTES || dev->max_cqe < 4 * RD_CHAIN) {
		RD_LOG(ERR, "%s: device limits too small for kvt (max_sge %u, max_qp_wr %u, max_cqe %u)",
		       dev->name, dev->max_sge, dev->max_qp_wr, dev->max_cqe);
		goto close_dev;
	}
	dev->pd = rd_ibv.alloc_pd(dev->ctx);
	if (dev->pd == NULL) {
		RD_LOG(ERR, "%s: cannot allocate a protection domain: %s",
		       dev->name, strerror(errno));
		goto close_dev;
	}
	/* Async events are read from the control thread without blocking. */
	fl = fcntl(dev->ctx->async_fd, F_GETFL);
	if (fl >= 0)
		fcntl(dev->ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	dev->refs = 1;
	dev->next = rd_devs;
	rd_devs = dev;
	return dev;

close_dev:
	rd_ibv.close_device(dev->ctx);
free_dev:
	free(dev);
	return NULL;
}

static void
dev_put(struct rd_dev *dev)
{
	struct rd_dev **pp;

	if (--dev->refs > 0)
		return;
	for (pp = &rd_devs; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == dev) {
			*pp = dev->next;
			break;
		}
	}
	rd_ibv.dealloc_pd(dev->pd);
	rd_ibv.close_device(dev->ctx);
	free(dev);
}

/* RoCE without a GID the topology chose: the first non-zero one. */
static int
gid_find(struct rd_port *rp)
{
	static const union ibv_gid zero;
	int i;

	for (i = 0; i < 16; i++)
		if (rd_ibv.query_gid(rp->dev->ctx, rp->nic.port, i, &rp->gid) == 0 &&
		    memcmp(&rp->gid, &zero, sizeof(zero)) != 0)
			return i;
	return -1;
}

/* A completion channel, non-blocking, so that a waiting lcore wakes on
 * completions; NULL (the port is polled) where the device has none. */
static struct ibv_comp_channel *
comp_channel(struct ibv_context *ctx, const char *nic)
{
	struct ibv_comp_channel *ch = rd_ibv.create_comp_channel(ctx);
	int fl;

	if (ch == NULL) {
		RD_LOG(DEBUG, "%s: no completion channel (%s): polled while idle",
		       nic, strerror(errno));
		return NULL;
	}
	fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
		rd_ibv.destroy_comp_channel(ch);
		return NULL;
	}
	return ch;
}

/*
 * The queue pairs' local ACK timeout, t for 4.096 us << t per try, seven
 * retries before a pair fails: the whole budget is about the peer
 * timeout, so a slow host (loaded, or soft-RoCE under emulation, where
 * the peer's kernel answers) is not taken for a broken link, and a broken
 * one still fails within about the timeout.  Never below 14 (67 ms).
 */
static uint8_t
qp_timeout(uint32_t timeout_ms)
{
	uint8_t t = 14;

	while (t < 31 && (4096ull << t) * 8 < (uint64_t)timeout_ms * 1000000)
		t++;
	return t;
}

static int
port_open(const struct kvt_pmd *pmd, struct ibv_device *d,
	  const struct rd_topo_nic *nic, int nic_index, unsigned int ordinal,
	  unsigned int nqps, unsigned int sq)
{
	struct ibv_port_attr pa;
	struct rd_port *rp;
	char name[32];
	int gid;

	rp = calloc(1, sizeof(*rp));
	if (rp == NULL)
		return -ENOMEM;
	rp->nic = *nic;
	rp->nic_index = nic_index;
	rp->ordinal = ordinal;
	rp->dev = dev_open(d);
	if (rp->dev == NULL)
		goto free_port;
	if (rd_query_port(rp->dev->ctx, nic->port, &pa) != 0 ||
	    pa.state != IBV_PORT_ACTIVE) {
		RD_LOG(WARNING, "%s port %u is not active: skipped", nic->name,
		       nic->port);
		goto put_dev;
	}
	rp->lid = pa.lid;
	rp->mtu = (uint8_t)pa.active_mtu;
	/* 0 means the port did not say: 2 GiB, what RC allows. */
	rp->max_msg = pa.max_msg_sz != 0 ? pa.max_msg_sz : 1u << 31;
	if ((uint64_t)rp->max_msg * RD_MSG_PIECES < kvt_pmd_env()->slice) {
		RD_LOG(ERR, "%s: messages of at most %u bytes: a %" PRIu64 "-byte slice would take more than %u work requests; use a smaller --kvt-slice",
		       nic->name, rp->max_msg, (uint64_t)kvt_pmd_env()->slice,
		       RD_MSG_PIECES);
		goto put_dev;
	}
	rp->nic.link = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? KVT_LINK_ETH :
		KVT_LINK_IB;
	gid = nic->gid_index >= 0 ? nic->gid_index : 0;
	if (rd_ibv.query_gid(rp->dev->ctx, nic->port, gid, &rp->gid) != 0 ||
	    (rp->nic.link == KVT_LINK_ETH && nic->gid_index < 0))
		gid = gid_find(rp);
	if (gid < 0 && rp->nic.link == KVT_LINK_ETH) {
		RD_LOG(WARNING, "%s: RoCE port without a usable GID: skipped",
		       nic->name);
		goto put_dev;
	}
	rp->nic.gid_index = gid;
	rp->nqps = nqps;
	rp->sq = rte_align32prevpow2(RTE_MIN(sq, rp->dev->max_qp_wr));
	rp->cq_size = (int)RTE_MIN((uint32_t)RD_CQ_WANT, rp->dev->max_cqe);
	rp->chan = comp_channel(rp->dev->ctx, nic->name);
	rp->cq = rd_ibv.create_cq(rp->dev->ctx, rp->cq_size, NULL, rp->chan, 0);
	if (rp->cq == NULL) {
		RD_LOG(ERR, "%s: cannot create a completion queue of %d entries: %s",
		       nic->name, rp->cq_size, strerror(errno));
		goto put_dev;
	}
	RD_LOG(DEBUG, "%s port %u: active MTU %d, max_msg_sz %u; completion queue %d, send queue %u",
	       nic->name, nic->port, 128 << pa.active_mtu, rp->max_msg,
	       rp->cq_size, rp->sq);
	rp->timeout = qp_timeout(kvt_pmd_env()->timeout_ms);
	pthread_mutex_init(&rp->lock, NULL);
	rp->backoff_ms = RD_BACKOFF_MIN_MS;
	if (nic->port > 1)
		snprintf(name, sizeof(name), "rdma:%.20s.%u", nic->name, nic->port);
	else
		snprintf(name, sizeof(name), "rdma:%.25s", nic->name);
	if (rp->dev->nports == RTE_DIM(rp->dev->port))
		goto destroy_cq;
	rp->port = kvt_port_create(pmd, name, nic->numa, rp);
	if (rp->port == NULL)
		goto destroy_cq;
	rp->dev->port[rp->dev->nports++] = rp;
	RD_LOG(INFO, "port %s: %s, NUMA node %d, PCI %s, %u Mb/s", name,
	       rp->nic.link == KVT_LINK_ETH ? "RoCE" : "InfiniBand", nic->numa,
	       nic->pci[0] ? nic->pci : "?", nic->rate_mbps);
	return 0;

destroy_cq:
	rd_ibv.destroy_cq(rp->cq);
put_dev:
	if (rp->chan != NULL)
		rd_ibv.destroy_comp_channel(rp->chan);
	dev_put(rp->dev);
free_port:
	free(rp);
	return -ENODEV;
}

static int
args_parse(const char *args, unsigned int *qps, unsigned int *sq, char *root,
	   size_t rootlen)
{
	static const char *const keys[] = { "qps", "sq", "sysfs", NULL };
	struct rte_kvargs *kv;
	const char *v;
	long q = *qps, n = *sq;
	int ret;

	if (args == NULL || *args == '\0')
		return 0;
	kv = rte_kvargs_parse(args, keys);
	if (kv == NULL) {
		RD_LOG(ERR, "--kvt-pmd rdma,%s: unknown key (qps, sq, sysfs)", args);
		return -EINVAL;
	}
	ret = kvt_kv_long(kv, "qps", 1, RD_MAX_QPS, &q);
	if (ret == 0)
		ret = kvt_kv_long(kv, "sq", 2 * RD_CHAIN, RD_SQ_MAX, &n);
	if (ret == 0 && (n & (n - 1)) != 0) {
		RD_LOG(ERR, "--kvt-pmd rdma,%s: sq is a power of two", args);
		ret = -EINVAL;
	}
	*qps = (unsigned int)q;
	*sq = (unsigned int)n;
	if ((v = rte_kvargs_get(kv, "sysfs")) != NULL)
		snprintf(root, rootlen, "%s", v);
	rte_kvargs_free(kv);
	return ret;
}

static struct ibv_device *
verbs_find(struct ibv_device **devs, int n, const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (strcmp(rd_ibv.get_device_name(devs[i]), name) == 0)
			return devs[i];
	return NULL;
}

static int
rd_probe(const struct kvt_pmd *pmd, const char *args)
{
	char root[256] = "/", err[256], extra[1024] = "", pcis[RD_TOPO_MAX_GPUS][16];
	const char *cuda_pci[RD_TOPO_MAX_GPUS];
	const struct kvt_pmd_env *env = kvt_pmd_env();
	unsigned int qps = 2, sq = 512, i, ncuda, opened = 0;
	struct ibv_device **devs;
	struct ibv_device *d;
	size_t l;
	int n = 0, ret;

	ret = args_parse(args, &qps, &sq, root, sizeof(root));
	if (ret < 0)
		return ret;
	if (rd_verbs_load(err, sizeof(err)) < 0) {
		RD_LOG(NOTICE, "%s: the rdma transport stays idle", err);
		return 0;
	}
	devs = rd_ibv.get_device_list(&n);
	if (devs == NULL || n == 0) {
		RD_LOG(NOTICE, "no RDMA device: the rdma transport stays idle");
		if (devs != NULL)
			rd_ibv.free_device_list(devs);
		return 0;
	}
	for (i = 0; i < (unsigned int)n; i++) {
		l = strlen(extra);
		snprintf(extra + l, sizeof(extra) - l, "%s%s", l ? "," : "",
			 rd_ibv.get_device_name(devs[i]));
	}
	ncuda = (unsigned int)RTE_MIN(kvt_cuda_count(), RD_TOPO_MAX_GPUS);
	for (i = 0; i < ncuda; i++) {
		if (kvt_cuda_pci((int)i, pcis[i], sizeof(pcis[i])) < 0)
			pcis[i][0] = '\0';
		cuda_pci[i] = pcis[i];
	}
	ret = rd_topo_discover(&rd_topo, root, env->nic_allow, extra,
				ncuda > 0 ? cuda_pci : NULL, ncuda, env->topo_file,
				err, sizeof(err));
	if (ret < 0) {
		RD_LOG(ERR, "%s", err);
		goto free_list;
	}
	for (i = 0; i < rd_topo.nnics; i++) {
		d = verbs_find(devs, n, rd_topo.nic[i].name);
		if (d == NULL || !rd_topo.nic[i].active)
			continue;
		if (port_open(pmd, d, &rd_topo.nic[i], (int)i, opened, qps,
			      sq) == 0)
			opened++;
	}
	if (opened == 0)
		RD_LOG(NOTICE, "no active RDMA port%s: the rdma transport stays idle",
		       env->nic_allow != NULL ? " allowed by --kvt-nic" : "");
free_list:
	rd_ibv.free_device_list(devs);
	return ret;
}

/* EAL runs now: the TSC rate is known. */
static int
rd_start(struct kvt_port *port)
{
	struct rd_port *rp = port->priv;

	rp->watchdog_tsc = rte_get_tsc_hz() / 1000 * 2 * kvt_pmd_env()->timeout_ms;
	return 0;
}

static void
rd_remove(struct kvt_port *port)
{
	struct rd_port *rp = port->priv;

	/* Every event taken was acknowledged at once (rd_idle). */
	rd_ibv.destroy_cq(rp->cq);
	if (rp->chan != NULL)
		rd_ibv.destroy_comp_channel(rp->chan);
	dev_put(rp->dev);
	pthread_mutex_destroy(&rp->lock);
	free(rp);
}

/* ---- memory ---- */

/* Why a GPU range could not be registered, for the error line. */
static const char *
cuda_reg_reason(int dmabuf_err, int peer_err)
{
	if (access("/sys/module/nvidia_peermem", F_OK) != 0 &&
	    access("/sys/module/nv_peer_mem", F_OK) != 0 &&
	    dmabuf_err == -ENOTSUP)
		return "the GPU driver exports no dma-buf here and no peer-memory module (nvidia_peermem) is loaded";
	if (dmabuf_err == -ENOTSUP)
		return "no dma-buf export; the peer-memory path refused it";
	if (peer_err == ENOMEM || dmabuf_err == -ENOMEM)
		return "out of registrable memory (ulimit -l, or the NIC's translation limits)";
	return "the NIC refused the dma-buf (ibv_reg_dmabuf_mr) and the peer-memory path";
}

static struct ibv_mr *
reg_cuda(struct rd_port *rp, struct kvt_lmem *m, int access)
{
	struct ibv_mr *mr = NULL;
	uint64_t off = 0;
	int fd = -1, derr;

	derr = rd_ibv.reg_dmabuf_mr == NULL ? -ENOTSUP :
	       kvt_mem_dmabuf(m->addr, m->len, &fd, &off);
	if (derr == 0) {
		mr = rd_ibv.reg_dmabuf_mr(rp->dev->pd, off, m->len,
					  (uint64_t)(uintptr_t)m->addr, fd, access);
		if (mr == NULL)
			derr = -errno;
		close(fd);
		if (mr != NULL)
			return mr;
	}
	/* Peer memory (nvidia_peermem) takes device pointers directly. */
	mr = rd_ibv.reg_mr(rp->dev->pd, m->addr, m->len, access);
	if (mr == NULL)
		RD_LOG(WARNING, "%s: cannot register cuda:%d memory %p+%" PRIu64 ": %s; this NIC will not carry it",
		       rp->nic.name, m->loc.id, m->addr, m->len,
		       cuda_reg_reason(derr, errno));
	return mr;
}

static int
rd_mem_register(struct kvt_port *port, struct kvt_lmem *m)
{
	struct rd_port *rp = port->priv;
	struct rd_topo_pref pref;
	uint32_t bit = 1u << port->id, nic = 1u << rp->nic_index;
	struct ibv_mr *mr;
	int access = IBV_ACCESS_LOCAL_WRITE;

	if (m->flags & (KVT_MEM_REMOTE_WRITE | KVT_MEM_F_FENCE))
		access |= IBV_ACCESS_REMOTE_WRITE;
	if (m->flags & KVT_MEM_REMOTE_READ)
		access |= IBV_ACCESS_REMOTE_READ;
	if (m->loc.type == KVT_LOC_CUDA) {
		/* GPU memory the NIC cannot reach is still the GPU path's
		 * (nvlink): not an error for the registration. */
		mr = reg_cuda(rp, m, access);
		if (mr == NULL)
			return -ENOTSUP;
	} else if (m->len > rp->dev->max_mr_size) {
		RD_LOG(WARNING, "%s: %p+%" PRIu64 " is larger than the device registers (max_mr_size %#" PRIx64 "); this NIC will not carry it",
		       rp->nic.name, m->addr, m->len, rp->dev->max_mr_size);
		return -ENOTSUP;
	} else {
		mr = rd_ibv.reg_mr(rp->dev->pd, m->addr, m->len, access);
		if (mr == NULL)
			RD_LOG(ERR, "%s: cannot register %p+%" PRIu64 ": %s%s",
			       rp->nic.name, m->addr, m->len, strerror(errno),
			       errno == ENOMEM || errno == EPERM ?
			       " (locked-memory limit: ulimit -l)" : "");
	}
	if (mr == NULL)
		return errno != 0 ? -errno : -EIO;
	m->key[port->id] = mr;
	if (rd_topo_lookup(&rd_topo, &m->loc, &pref) == 0) {
		if (pref.preferred & nic)
			m->pref_mask |= bit;
		else if (pref.fallback & nic)
			m->fallback_mask |= bit;
	} else {
		m->pref_mask |= bit;
	}
	return 0;
}

static void
rd_mem_unregister(struct kvt_port *port, struct kvt_lmem *m)
{
	struct ibv_mr *mr = m->key[port->id];

	m->key[port->id] = NULL;
	m->pref_mask &= ~(1u << port->id);
	m->fallback_mask &= ~(1u << port->id);
	if (mr != NULL && rd_ibv.dereg_mr(mr) != 0)
		RD_LOG(WARNING, "%s: deregistering %p: %s",
		       ((struct rd_port *)port->priv)->nic.name, m->addr,
		       strerror(errno));
}

/* Key blob: version, then the rkey (little endian). */
static int
rd_mem_export(struct kvt_port *port, const struct kvt_lmem *m,
	      struct kvt_buf *key)
{
	const struct ibv_mr *mr = m->key[port->id];
	uint8_t b[5] = { 1 };
	uint32_t rkey = mr->rkey;
	unsigned int i;

	for (i = 0; i < 4; i++)
		b[1 + i] = (uint8_t)(rkey >> (8 * i));
	return kvt_buf_put(key, b, sizeof(b));
}

static int
rd_rmem_import(struct kvt_conn *c, struct kvt_rmem *rm, const uint8_t *key,
	       size_t len)
{
	uint64_t rkey = 0;
	unsigned int i;

	if (len != 5 || key[0] != 1)
		return -EPROTO;
	for (i = 0; i < 4; i++)
		rkey |= (uint64_t)key[1 + i] << (8 * i);
	/* The key itself, tagged so that a zero rkey is not "none". */
	rm->key[c->port->id] = (void *)(uintptr_t)(rkey | (1ull << 32));
	return 0;
}

static void
rd_rmem_release(struct kvt_conn *c, struct kvt_rmem *rm)
{
	rm->key[c->port->id] = NULL;
}

/* ---- handshake endpoint ---- */

static int
rd_endpoint(struct kvt_port *port, struct kvt_buf *ep)
{
	const struct rd_port *rp = port->priv;
	struct rd_endpoint e;

	memset(&e, 0, sizeof(e));
	snprintf(e.name, sizeof(e.name), "%s", rp->nic.name);
	e.link = rp->nic.link;
	e.port_num = rp->nic.port;
	e.mtu = rp->mtu;
	e.lid = rp->lid;
	memcpy(e.gid, rp->gid.raw, sizeof(e.gid));
	return rd_endpoint_encode(&e, ep);
}

/* --kvt-topo is read here, but a malformed one stops every engine. */
static int
rd_env_check(const struct kvt_pmd_env *env, char *err, size_t errlen)
{
	char why[224];
	int ret;

	if (env->topo_file == NULL)
		return 0;
	ret = rd_topo_check_file(env->topo_file, why, sizeof(why));
	if (ret < 0)
		snprintf(err, errlen, "--kvt-topo: %s", why);
	return ret;
}

static const struct kvt_pmd_ops rd_ops = {
	.flags = KVT_PMD_F_ONCE,	/* numbered notifications: rdma_xfer.c */
	.rank = 20,
	/* 64 MiB drain in ~1.3 ms at 400 Gb/s: room for the submitter's
	 * polls. */
	.stripe_cap = 64u << 20,
	.env_check = rd_env_check,
	.probe = rd_probe,
	.start = rd_start,
	.remove = rd_remove,
	.submit = rd_submit,
	.poll = rd_poll,
	.idle = rd_idle,
	.mem_register = rd_mem_register,
	.mem_unregister = rd_mem_unregister,
	.mem_export = rd_mem_export,
	.endpoint = rd_endpoint,
	.conn_open = rd_conn_open,
	.conn_accept = rd_conn_accept,
	.conn_ready = rd_conn_ready,
	.conn_close = rd_conn_close,
	.rmem_import = rd_rmem_import,
	.rmem_release = rd_rmem_release,
	.conn_msg = rd_conn_msg,
	.ctl_tick = rd_ctl_tick,
};

KVT_PMD_REGISTER(rdma, rd_ops);
