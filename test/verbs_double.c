/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * TEST DOUBLE of libibverbs: see verbs_double.h for what it models.
 *
 * Layout: every process publishes a table (KVT_VDOUBLE_DIR/proc-PID) of
 * its memory regions and queue pairs' responder state (expected PSN,
 * posted receives, receive completions), mapped shared by the processes
 * that talk to it.  A requester executes its own send queue when its
 * completion queue is polled: it checks the responder's table, moves the
 * bytes with process_vm_writev/readv, and advances both PSNs.  GIDs carry
 * the owner's pid so that RTR learns which process the peer is.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include <infiniband/verbs.h>

#include "verbs_double_impl.h"

#undef ibv_reg_mr
#undef ibv_query_port

/*
 * Device limits, enforced the way a device does: a CQ, QP or MR past a
 * limit is refused with EINVAL, a request longer than the port's
 * max_msg_sz is refused at post.  KVT_VDOUBLE_PROFILE picks the values:
 *   rxe  Linux soft-RoCE in 6.1 (read with ibv_devinfo -v in the rxe
 *        guests of scripts/rxe-vm; inline from its WQE size)
 *   cx7  ConnectX-7 (the default; inline is what mlx5 grants a QP of
 *        this shape, rounded down)
 * and KVT_VDOUBLE_LIMITS="cqe=N,qp_wr=N,sge=N,inline=N,mr=N,rd_atom=N,
 * init_rd_atom=N,msg=N,mtu=N" (mtu: enum ibv_mtu) overrides any of them.
 */

static const struct vd_limits vd_rxe = {
	.cqe = 32767, .qp_wr = 1048576, .sge = 32, .inl = 256,
	.mr = UINT64_MAX, .rd_atom = 128, .init_rd_atom = 128,
	.msg = 8 << 20, .mtu = IBV_MTU_1024,
};
static const struct vd_limits vd_cx7 = {
	.cqe = 4194303, .qp_wr = 32768, .sge = 30, .inl = 256,
	.mr = UINT64_MAX, .rd_atom = 16, .init_rd_atom = 16,
	.msg = 1 << 30, .mtu = IBV_MTU_4096,
};

static struct vd_limits lim;
static int lim_ready;

const struct vd_limits *
vd_limits(void)
{
	static const char *const keys[] = { "cqe", "qp_wr", "sge", "inline",
		"mr", "rd_atom", "init_rd_atom", "msg", "mtu" };
	const char *prof, *over;
	uint64_t *field = &lim.cqe;
	char buf[256], *tok, *save, *eq;
	unsigned int k;

	if (lim_ready)	/* first: posting asks for every request */
		return &lim;
	prof = getenv("KVT_VDOUBLE_PROFILE");
	over = getenv("KVT_VDOUBLE_LIMITS");
	lim = prof != NULL && strcmp(prof, "rxe") == 0 ? vd_rxe : vd_cx7;
	if (over != NULL) {
		snprintf(buf, sizeof(buf), "%s", over);
		for (tok = strtok_r(buf, ",", &save); tok != NULL;
		     tok = strtok_r(NULL, ",", &save)) {
			eq = strchr(tok, '=');
			if (eq == NULL)
				continue;
			*eq = '\0';
			for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
				if (strcmp(tok, keys[k]) == 0)
					field[k] = strtoull(eq + 1, NULL, 0);
		}
	}
	lim_ready = 1;
	return &lim;
}

pthread_mutex_t vd_lock = PTHREAD_MUTEX_INITIALIZER;
struct vd_data_ops vd_data_ops;
static struct vd_dev devs[VD_MAX_DEVS];
static struct ibv_device *dev_list[VD_MAX_DEVS + 1];
static unsigned int ndevs;
struct vd_table *vd_mine;
static pid_t mine_pid;	/* the process that mapped it */
static uint32_t key_gen;
static struct {
	pid_t pid;
	struct vd_table *t;
	uint64_t seen_ns;	/* alive at this time */
} peers[64];

uint64_t
vd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How long a peer seen alive is believed alive without asking the
 * kernel again: a signal per request would bound the requests per
 * second the double can run. */
#define VD_ALIVE_NS 1000000ull

static void *
map_file(const char *name, size_t len, int create)
{
	const char *dir = getenv("KVT_VDOUBLE_DIR");
	char path[512];
	void *p;
	int fd;

	if (dir == NULL)
		return NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDWR | (create ? O_CREAT : 0), 0600);
	if (fd < 0)
		return NULL;
	if (create && ftruncate(fd, (off_t)len) != 0) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

struct vd_rail *
vd_rail(const char *name)
{
	char f[128];

	snprintf(f, sizeof(f), "rail-%s", name);
	return map_file(f, sizeof(struct vd_rail), 1);
}

static void
unlink_table(void)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/proc-%d", getenv("KVT_VDOUBLE_DIR"),
		 (int)getpid());
	unlink(path);
}

static struct vd_table *
table_mine(void)
{
	char f[64];

	if (vd_mine == NULL) {
		mine_pid = getpid();
		snprintf(f, sizeof(f), "proc-%d", (int)mine_pid);
		vd_mine = map_file(f, sizeof(*vd_mine), 1);
		if (vd_mine != NULL)
			atexit(unlink_table);
	}
	return vd_mine;
}

/* The table of a live process, or NULL when it is gone. */
struct vd_table *
vd_table_of(pid_t pid)
{
	char f[64];
	unsigned int i;

	uint64_t now;

	if (vd_mine != NULL ? pid == mine_pid : pid == getpid())
		return table_mine();
	now = vd_now_ns();
	for (i = 0; i < 64 && peers[i].pid != 0; i++)
		if (peers[i].pid == pid)
			break;
	if (i < 64 && peers[i].pid == pid &&
	    now - __atomic_load_n(&peers[i].seen_ns, __ATOMIC_RELAXED) < VD_ALIVE_NS)
		return peers[i].t;
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return NULL;
	if (i == 64)
		return NULL;
	if (peers[i].pid != pid) {
		snprintf(f, sizeof(f), "proc-%d", (int)pid);
		peers[i].t = map_file(f, sizeof(struct vd_table), 0);
		if (peers[i].t == NULL)
			return NULL;
		peers[i].pid = pid;
	}
	__atomic_store_n(&peers[i].seen_ns, now, __ATOMIC_RELAXED);
	return peers[i].t;
}

/* ---- devices ---- */

static void
devs_init(void)
{
	const char *names = getenv("KVT_VDOUBLE_DEVS");
	char buf[256], *save = NULL, *n;

	if (ndevs > 0 || getenv("KVT_VDOUBLE_DIR") == NULL)
		return;
	snprintf(buf, sizeof(buf), "%s", names != NULL ? names : "mlx5_0,mlx5_1");
	for (n = strtok_r(buf, ",", &save); n != NULL && ndevs < VD_MAX_DEVS;
	     n = strtok_r(NULL, ",", &save)) {
		struct vd_dev *d = &devs[ndevs];

		snprintf(d->dev.name, sizeof(d->dev.name), "%s", n);
		d->dev.transport_type = IBV_TRANSPORT_IB;
		d->rail = vd_rail(n);
		if (d->rail == NULL)
			break;
		if (d->rail->retry_ms == 0)
			d->rail->retry_ms = 50;
		d->index = ndevs;
		dev_list[ndevs++] = &d->dev;
	}
}

struct ibv_device **
ibv_get_device_list(int *num)
{
	pthread_mutex_lock(&vd_lock);
	devs_init();
	pthread_mutex_unlock(&vd_lock);
	if (num != NULL)
		*num = (int)ndevs;
	return dev_list;
}

void
ibv_free_device_list(struct ibv_device **list)
{
	(void)list;
}

const char *
ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}


struct ibv_context *
ibv_open_device(struct ibv_device *device)
{
	struct vd_dev *d = (struct vd_dev *)device;

	/* The limits are read again for every device opened: a test may
	 * change them between engines. */
	lim_ready = 0;
	if (table_mine() == NULL) {
		errno = ENODEV;
		return NULL;
	}
	d->ctx.device = device;
	d->ctx.ops.poll_cq = vd_data_ops.poll_cq;
	d->ctx.ops.post_send = vd_data_ops.post_send;
	d->ctx.ops.post_recv = vd_data_ops.post_recv;
	d->ctx.async_fd = eventfd(0, EFD_CLOEXEC);
	d->ctx.abi_compat = NULL;
	d->seen_down = d->rail->down;
	return &d->ctx;
}

int
ibv_close_device(struct ibv_context *ctx)
{
	close(ctx->async_fd);
	return 0;
}

int
ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	(void)ctx;
	memset(a, 0, sizeof(*a));
	a->max_mr_size = vd_limits()->mr;
	a->max_qp_wr = (int)vd_limits()->qp_wr;
	a->max_sge = (int)vd_limits()->sge;
	a->max_qp_rd_atom = (int)vd_limits()->rd_atom;
	a->max_qp_init_rd_atom = (int)vd_limits()->init_rd_atom;
	a->max_cqe = (int)vd_limits()->cqe;
	a->max_qp = VD_MAX_QPS;
	return 0;
}

int
ibv_query_port(struct ibv_context *ctx, uint8_t port,
	       struct _compat_ibv_port_attr *out)
{
	struct vd_dev *d = (struct vd_dev *)ctx->device;
	struct ibv_port_attr *a = (struct ibv_port_attr *)(void *)out;

	if (port != 1)
		return EINVAL;
	a->state = d->rail->down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
	a->active_mtu = (enum ibv_mtu)vd_limits()->mtu;
	a->max_mtu = (enum ibv_mtu)vd_limits()->mtu;
	a->max_msg_sz = (uint32_t)VD_MIN(vd_limits()->msg, UINT32_MAX);
	a->lid = 0;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

int
ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index,
	      union ibv_gid *gid)
{
	struct vd_dev *d = (struct vd_dev *)ctx->device;
	uint32_t pid = (uint32_t)getpid();

	memset(gid, 0, sizeof(*gid));
	if (port != 1 || index < 0 || index > 255)
		return EINVAL;
	if (index == 0) {
		gid->raw[0] = 0xfe;
		gid->raw[1] = 0x80;
		memcpy(gid->raw + 8, &pid, 4);
		gid->raw[12] = (uint8_t)d->index;
	}
	return 0;
}

int
ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct vd_dev *d = (struct vd_dev *)ctx->device;
	uint32_t down = __atomic_load_n(&d->rail->down, __ATOMIC_ACQUIRE);

	if (down == d->seen_down) {
		errno = EAGAIN;
		return -1;
	}
	d->seen_down = down;
	memset(ev, 0, sizeof(*ev));
	ev->event_type = down ? IBV_EVENT_PORT_ERR : IBV_EVENT_PORT_ACTIVE;
	ev->element.port_num = 1;
	return 0;
}

void
ibv_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
}

const char *
ibv_event_type_str(enum ibv_event_type ev)
{
	return ev == IBV_EVENT_PORT_ERR ? "port error" : "event";
}

/* ---- protection domains and memory ---- */

struct ibv_pd *
ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));

	if (pd != NULL)
		pd->context = ctx;
	return pd;
}

int
ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

struct ibv_mr *
ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
		 unsigned int access)
{
	struct ibv_mr *mr;
	unsigned int i;

	(void)iova;
	if (len > vd_limits()->mr) {
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&vd_lock);
	for (i = 0; i < VD_MAX_MRS && vd_mine->mr[i].key != 0; i++)
		;
	if (i == VD_MAX_MRS || (mr = calloc(1, sizeof(*mr))) == NULL) {
		pthread_mutex_unlock(&vd_lock);
		errno = ENOMEM;
		return NULL;
	}
	key_gen = (key_gen + 1) & 0xfff;
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = mr->rkey = (i + 1) | (key_gen << 20);
	vd_mine->mr[i].access = access;
	vd_mine->mr[i].addr = (uint64_t)(uintptr_t)addr;
	vd_mine->mr[i].len = len;
	__atomic_store_n(&vd_mine->mr[i].key, mr->rkey, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&vd_lock);
	return mr;
}

struct ibv_mr *
ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, (uint64_t)(uintptr_t)addr,
				(unsigned int)access);
}

struct ibv_mr *
ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova,
		  int fd, int access)
{
	(void)pd; (void)off; (void)len; (void)iova; (void)fd; (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

int
ibv_dereg_mr(struct ibv_mr *mr)
{
	unsigned int i = (mr->lkey & 0xfffff) - 1;

	pthread_mutex_lock(&vd_lock);
	__atomic_store_n(&vd_mine->mr[i].key, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&vd_lock);
	/* As a NIC does: once deregistration returns, no access under the
	 * key touches the memory; those already moving bytes finish first. */
	while (__atomic_load_n(&vd_mine->mr[i].busy, __ATOMIC_SEQ_CST) != 0)
		sched_yield();
	free(mr);
	return 0;
}

/*
 * Enter the region of table t holding [addr, addr+len) under key with
 * access, to move bytes there until vd_mr_leave(): @return it, or NULL.
 * Entered before the key is checked, so a deregistration that cleared
 * the key waits for those who saw it (ibv_dereg_mr).
 */
struct vd_rmr *
vd_mr_enter(struct vd_table *t, uint32_t key, uint64_t addr, uint64_t len,
	    unsigned int access)
{
	unsigned int i = (key & 0xfffff) - 1;
	struct vd_rmr *m;

	if (i >= VD_MAX_MRS)
		return NULL;
	m = &t->mr[i];
	__atomic_fetch_add(&m->busy, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == key &&
	    addr >= m->addr && len <= m->len && addr - m->addr <= m->len - len &&
	    (access == 0 || (m->access & access) == access))
		return m;
	__atomic_fetch_sub(&m->busy, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

void
vd_mr_leave(struct vd_rmr *m)
{
	__atomic_fetch_sub(&m->busy, 1, __ATOMIC_SEQ_CST);
}

/* ---- completion queues ---- */

/*
 * The double moves data when a queue is polled (its peer's polls fill
 * ours): it has no completion events to give, so it has no channel, and
 * kvt polls its ports while their lcore waits.
 */
struct ibv_comp_channel *
ibv_create_comp_channel(struct ibv_context *ctx)
{
	(void)ctx;
	errno = ENOSYS;
	return NULL;
}

int
ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	(void)ch;
	return EINVAL;
}

struct ibv_cq *
ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
	      struct ibv_comp_channel *channel, int comp_vector)
{
	struct vd_cq *c = calloc(1, sizeof(*c));

	(void)cq_context; (void)channel; (void)comp_vector;
	if (c == NULL)
		return NULL;
	if (cqe < 1 || (uint64_t)cqe > vd_limits()->cqe) {
		free(c);
		errno = EINVAL;
		return NULL;
	}
	c->size = (unsigned int)cqe;
	c->wc = calloc(c->size, sizeof(c->wc[0]));
	if (c->wc == NULL) {
		free(c);
		return NULL;
	}
	c->cq.context = ctx;
	c->cq.cqe = cqe;
	return &c->cq;
}

int
ibv_destroy_cq(struct ibv_cq *cq)
{
	struct vd_cq *c = (struct vd_cq *)cq;

	free(c->wc);
	free(c);
	return 0;
}

struct ibv_wc *
vd_cq_push(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st,
	   enum ibv_wc_opcode op, uint32_t len, uint32_t qpn)
{
	struct vd_cq *c = (struct vd_cq *)cq;
	struct ibv_wc *w;

	if (c->n == c->size) {
		fprintf(stderr, "verbs double: completion queue overrun\n");
		abort();
	}
	w = &c->wc[(c->head + c->n++) % c->size];
	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id;
	w->status = st;
	w->opcode = op;
	w->byte_len = len;
	w->qp_num = qpn;
	return w;
}

/* ---- queue pairs ---- */

struct vd_rqp *
vd_rqp_mine(const struct vd_qp *q)
{
	return &vd_mine->qp[q->idx];
}

struct ibv_qp *
ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	struct vd_dev *d = (struct vd_dev *)pd->context->device;
	struct vd_qp *q;
	unsigned int i;

	if (ia->qp_type != IBV_QPT_RC ||
	    ia->cap.max_inline_data > VD_MIN(vd_limits()->inl, VD_INLINE) ||
	    ia->cap.max_send_wr > vd_limits()->qp_wr ||
	    ia->cap.max_recv_wr > vd_limits()->qp_wr ||
	    ia->cap.max_send_sge > vd_limits()->sge ||
	    ia->cap.max_recv_sge > vd_limits()->sge || ia->cap.max_send_wr == 0) {
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&vd_lock);
	for (i = 0; i < VD_MAX_QPS && vd_mine->qp[i].used; i++)
		;
	q = i < VD_MAX_QPS ? calloc(1, sizeof(*q)) : NULL;
	if (q != NULL)
		q->sq = calloc(ia->cap.max_send_wr, sizeof(q->sq[0]));
	if (q == NULL || q->sq == NULL) {
		if (q != NULL)
			free(q);
		pthread_mutex_unlock(&vd_lock);
		errno = ENOMEM;
		return NULL;
	}
	memset(&vd_mine->qp[i], 0, sizeof(vd_mine->qp[i]));
	vd_mine->qp[i].used = 1;
	vd_mine->qp[i].state = IBV_QPS_RESET;
	q->idx = i;
	q->dev = d;
	q->max_send = ia->cap.max_send_wr;
	q->qp.context = pd->context;
	q->qp.pd = pd;
	q->qp.send_cq = ia->send_cq;
	q->qp.recv_cq = ia->recv_cq;
	q->qp.qp_num = i + 1;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = IBV_QPT_RC;
	q->next = d->qps;
	d->qps = q;
	pthread_mutex_unlock(&vd_lock);
	return &q->qp;
}

/* Error state: flush the send queue (signalled requests complete with a
 * flush error) and the posted receives. */
void
vd_qp_flush(struct vd_qp *q)
{
	struct vd_rqp *r = vd_rqp_mine(q);
	struct vd_swr *w;

	while (q->sq_n > 0) {
		w = &q->sq[q->sq_head];
		q->sq_head = (q->sq_head + 1) % q->max_send;
		q->sq_n--;
		if (w->flags & IBV_SEND_SIGNALED)
			vd_cq_push(q->qp.send_cq, w->wr_id, IBV_WC_WR_FLUSH_ERR,
				IBV_WC_SEND, 0, q->qp.qp_num);
	}
	while (r->rq_head != r->rq_tail) {
		vd_cq_push(q->qp.recv_cq, r->rq[r->rq_head % VD_RQ].wr_id,
			IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, q->qp.qp_num);
		r->rq_head++;
	}
}

void
vd_qp_set_state(struct vd_qp *q, enum ibv_qp_state s)
{
	q->qp.state = s;
	__atomic_store_n(&vd_rqp_mine(q)->state, (uint32_t)s, __ATOMIC_RELEASE);
}

int
ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct vd_qp *q = (struct vd_qp *)qp;
	struct vd_rqp *r;
	uint32_t pid;
	int ret = 0;

	pthread_mutex_lock(&vd_lock);
	r = vd_rqp_mine(q);
	if (!(mask & IBV_QP_STATE)) {
		ret = EINVAL;
		goto out;
	}
	switch (a->qp_state) {
	case IBV_QPS_RESET:
		q->sq_n = 0;
		r->rq_head = r->rq_tail = 0;
		r->rc_head = r->rc_tail = 0;
		vd_qp_set_state(q, IBV_QPS_RESET);
		break;
	case IBV_QPS_INIT:
		if (qp->state != IBV_QPS_RESET ||
		    (mask & (IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) !=
		    (IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
			ret = EINVAL;
			break;
		}
		vd_qp_set_state(q, IBV_QPS_INIT);
		break;
	case IBV_QPS_RTR:
		if (qp->state != IBV_QPS_INIT || !(mask & IBV_QP_AV) ||
		    !(mask & IBV_QP_DEST_QPN) || !(mask & IBV_QP_RQ_PSN) ||
		    !a->ah_attr.is_global || a->dest_qp_num == 0 ||
		    a->dest_qp_num > VD_MAX_QPS ||
		    ((mask & IBV_QP_PATH_MTU) && a->path_mtu > vd_limits()->mtu) ||
		    ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
		     a->max_dest_rd_atomic > vd_limits()->rd_atom)) {
			ret = EINVAL;
			break;
		}
		memcpy(&pid, a->ah_attr.grh.dgid.raw + 8, 4);
		q->peer = (pid_t)pid;
		q->dest_qpn = a->dest_qp_num;
		r->rq_psn = a->rq_psn & 0xffffff;
		vd_qp_set_state(q, IBV_QPS_RTR);
		break;
	case IBV_QPS_RTS:
		if (qp->state != IBV_QPS_RTR || !(mask & IBV_QP_SQ_PSN) ||
		    ((mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
		     a->max_rd_atomic > vd_limits()->init_rd_atom)) {
			ret = EINVAL;
			break;
		}
		q->sq_psn = a->sq_psn & 0xffffff;
		vd_qp_set_state(q, IBV_QPS_RTS);
		break;
	case IBV_QPS_ERR:
		vd_qp_set_state(q, IBV_QPS_ERR);
		vd_qp_flush(q);
		break;
	default:
		ret = EINVAL;
	}
out:
	pthread_mutex_unlock(&vd_lock);
	errno = ret;
	return ret;
}

int
ibv_destroy_qp(struct ibv_qp *qp)
{
	struct vd_qp *q = (struct vd_qp *)qp, **pp;

	pthread_mutex_lock(&vd_lock);
	for (pp = &q->dev->qps; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	}
	memset(vd_rqp_mine(q), 0, sizeof(struct vd_rqp));
	pthread_mutex_unlock(&vd_lock);
	free(q->sq);
	free(q);
	return 0;
}

