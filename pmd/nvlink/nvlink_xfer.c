/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The nvlink data path (lcore): whole submissions go to lanes, large
 * requests to the copy engines, small pages to one gather kernel launch
 * per submission, a single small request to the lane's resident kernel;
 * the lcore reads the progress words the GPU stores, pushes
 * notifications and says done.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_pause.h>

#include "nvlink.h"

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
 * too, so an idle engine holds no SM and a cuCtxSynchronize() in the
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
	nv_use(l->dev);
	if (nv_launch_resident(l, l->ticket + 1) < 0)
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

void
nv_res_stop_all(struct nv_port *np)
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

	for (s = 0; s < nv_sys.ndev; s++)
		for (d = 0; d < nv_sys.ndev; d++) {
			l = np->lane[s][d];
			if (l != NULL && l->resident &&
			    now - l->last_cmd > np->res_idle)
				res_stop(np, l);
		}
}

/*
 * A submission for a resident kernel: at most one request, page or block
 * (or only a fence), of at most NV_RES_MAX bytes, not waiting for a
 * source event.
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
	if (si->blocks != NULL && si->blocks->n > 1)
		return 0;
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

	if (r == NULL || r->dev < 0 || local >= nv_sys.ndev)
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
	nv_use(l->dev);
	return nv_cu.cuStreamWaitEvent(l->st, (CUevent)event, 0) == CUDA_SUCCESS ?
		0 : -EIO;
}

/* One copy: the copy engines for a big one or one off the primary lane,
 * else a task of the primary lane's gather kernel. */
static int
copy_add(struct nv_port *np, const struct nv_plan *plan, struct nv_lane *l,
	 uint64_t src, uint64_t dst, uint64_t len, uint32_t *ntask)
{
	struct kvt_nv_task *t;

	if (len >= NV_CE_MIN || l != plan->primary) {
		nv_use(l->dev);
		return nv_cu.cuMemcpyAsync(dst, src, len, l->st) != CUDA_SUCCESS ?
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

/* The blocks of request i of a block list (request x) on lane l. */
static int
copy_blocks(struct nv_port *np, const struct nv_plan *plan, struct nv_lane *l,
	    const struct kvt_xreq *x, const struct kvt_xblocks *xb, uint32_t i,
	    const struct nv_rmem *r, uint32_t *ntask)
{
	uint64_t lp, rp;
	uint32_t k;
	int ret = 0;

	for (k = xb->first[i]; k < xb->first[i + 1] && ret == 0; k++) {
		lp = xb->local[k];
		rp = (uintptr_t)r->base + (xb->remote[k] - x->rm->base);
		ret = x->op == KVT_OP_WRITE ?
			copy_add(np, plan, l, lp, rp, xb->len[k], ntask) :
			copy_add(np, plan, l, rp, lp, xb->len[k], ntask);
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
		} else if (si->blocks != NULL) {
			ret = copy_blocks(np, plan, l, x, si->blocks, i, r, ntask);
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
	struct kvt_nv_task *t;
	struct kvt_nv_tail tl;
	uint32_t off = 0, n;
	unsigned int blocks;
	CUdeviceptr dt;

	nv_use(l->dev);
	do {
		n = RTE_MIN(ntask - off, (uint32_t)NV_RING / 2);
		/* A few tasks ride in the launch; more are copied to the
		 * device first (one copy-engine transfer, not a PCIe read
		 * per task). */
		dt = 0;
		t = ring_take(l, n <= KVT_NV_INLINE ? 0 : n);
		if (t == NULL)
			return -ETIMEDOUT;
		if (n > KVT_NV_INLINE) {
			memcpy(t, np->scratch + off, (size_t)n * sizeof(*t));
			dt = l->dring + (uintptr_t)(t - l->ring) * sizeof(*t);
			if (nv_cu.cuMemcpyAsync(dt, (uintptr_t)t,
						(size_t)n * sizeof(*t), l->st) !=
			    CUDA_SUCCESS)
				return -EIO;
		}
		tl = off + n == ntask ? *tail : (struct kvt_nv_tail){ 0 };
		l->ticket++;
		l->ring_end[l->ticket % NV_TICKETS] = l->head;
		tl.progress = l->progress_d;
		tl.ticket = l->ticket;
		tl.counter = l->counters +
			(l->ticket % NV_TICKETS) * sizeof(unsigned int);
		blocks = RTE_MAX(1u, RTE_MIN(np->blocks, (n + 15) / 16));
		if (nv_launch_gather(l, dt, n, np->scratch + off, &tl,
				     blocks) < 0)
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
	CUstream st = l->st;

	nv_use(l->dev);
	if (ring_take(l, 0) == NULL)
		return -ETIMEDOUT;
	if (nv_cu.cuMemcpyAsync(t->dst, t->src, t->len, l->st) != CUDA_SUCCESS)
		return -EIO;
	l->ticket++;
	l->ring_end[l->ticket % NV_TICKETS] = l->head;
	tail->ticket = l->ticket;
	if ((tail->fence &&
	     nv_cu.cuStreamWriteValue64(st, tail->fence, tail->room, 0)) ||
	    (tail->done && nv_cu.cuStreamWriteValue64(st, tail->done, 1, 0)) ||
	    nv_cu.cuStreamWriteValue64(st, l->progress_d, l->ticket, 0))
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
	nv_res_stop_all(np);
	for (s = 0; s < NV_MAX_DEV; s++)
		for (t = 0; t < NV_MAX_DEV; t++)
			if (np->lane[s][t] != NULL) {
				nv_use(s);
				nv_cu.cuStreamSynchronize(np->lane[s][t]->st);
			}
	kvt_subinfo_fail(si, err);
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
		nv_use(plan.lanes[i]->dev);
		if (nv_cu.cuEventRecord(plan.lanes[i]->join, plan.lanes[i]->st) !=
		    CUDA_SUCCESS ||
		    nv_cu.cuStreamWaitEvent(plan.primary->st, plan.lanes[i]->join,
					    0) != CUDA_SUCCESS) {
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
		tail.done = nv_host_dptr(si->done);
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
	if (si->notify_len == 0)
		return;		/* the GPU stores done */
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

void
nv_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		if (d[i]->op == KVT_DESC_SUB) {
			issue_sub(port, d[i]);
		} else {
			/* Only whole submissions are routed here. */
			kvt_desc_complete(port, d[i], -ENOTSUP);
		}
	}
}

/*
 * The GPU stores done words itself; the lcore is needed for the
 * notifications that follow a kernel (polled until they went, as they
 * come within microseconds) and to stop an idle resident kernel.
 */
uint64_t
nv_idle(struct kvt_port *port, int *fd)
{
	const struct nv_port *np = port->priv;

	*fd = -1;
	if (np->waits != NULL)
		return 0;
	return np->nres > 0 ? np->res_idle_us : KVT_IDLE_FOREVER;
}

/* Notify for submissions whose kernel finished, then say done. */
unsigned int
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
		if (ret != 0)
			kvt_subinfo_fail(si, ret);
		__atomic_store_n(si->done, 1, __ATOMIC_RELEASE);
		w->next = np->free_waits;
		np->free_waits = w;
		n++;
	}
	return n;
}
