/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Worker lcores: each drains its descriptor ring in bursts, hands the
 * descriptors to the ports it owns, polls those ports, and runs the tail
 * operations (fences, notifications) that completions scheduled.
 * Control work (kvt_port_call()) comes through a ring of its own, so a
 * full data ring never holds it up and no descriptor carries it.  Nothing
 * here allocates, locks or makes a system call in steady state; only the
 * sleep idle policy sleeps, and only after the lcore has been idle a while.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_pause.h>

#include "kvt_private.h"

/* Port calls waiting for one lcore (each caller waits for its own). */
#define KVT_CALLS 64

struct kvt_call {
	struct kvt_port *port;
	int (*fn)(struct kvt_port *, void *);
	void *arg;
	int ret;
	uint32_t state;		/* CALL_* */
};

/*
 * A call is taken (PENDING -> RUNNING) before it runs, or abandoned
 * (PENDING -> ABANDONED) by a caller that waited long enough: never both,
 * so fn never runs with an argument its caller no longer holds.
 */
enum { CALL_PENDING, CALL_RUNNING, CALL_DONE, CALL_ABANDONED };

int
kvt_lcore_tid(unsigned int idx)
{
	if (kvt_eng == NULL || idx >= kvt_eng->nlcores)
		return -1;
	return __atomic_load_n(&kvt_eng->lcores[idx].tid, __ATOMIC_ACQUIRE);
}

uint64_t
kvt_lcore_loops(unsigned int idx)
{
	if (kvt_eng == NULL || idx >= kvt_eng->nlcores)
		return 0;
	return __atomic_load_n(&kvt_eng->lcores[idx].loops, __ATOMIC_RELAXED);
}

int
kvt_set_idle(const char *policy)
{
	enum kvt_idle idle;
	uint32_t us = 0;
	unsigned int i;

	if (kvt_eng == NULL)
		return -ENODEV;
	if (kvt_parse_idle(policy, &idle, &us) < 0)
		return -EINVAL;
	/* The lcores read both fields each idle turn; a torn pair lasts one
	 * turn at most. */
	__atomic_store_n(&kvt_eng->o.idle_us, us, __ATOMIC_RELAXED);
	__atomic_store_n(&kvt_eng->o.idle, idle, __ATOMIC_RELEASE);
	/* A waiting lcore looks at the new policy now. */
	for (i = 0; i < kvt_eng->nlcores; i++)
		if (kvt_eng->lcores[i].calls != NULL)
			kvt_lcore_kick(&kvt_eng->lcores[i]);
	return 0;
}

/* Settle what p's PMD handed back during the call that just returned. */
static inline void
settle_port(struct kvt_port *p)
{
	if (p->done_head != NULL)
		kvt_port_settle(p);
}

static void
run_call(struct kvt_call *c)
{
	uint32_t expect = CALL_PENDING;

	if (!__atomic_compare_exchange_n(&c->state, &expect, CALL_RUNNING, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		free(c);	/* the caller gave up waiting: not run */
		return;
	}
	c->ret = c->fn(c->port, c->arg);
	settle_port(c->port);
	__atomic_store_n(&c->state, CALL_DONE, __ATOMIC_RELEASE);
}

/* The port calls queued so far; @return how many ran. */
static unsigned int
run_calls(struct kvt_lcore *lc)
{
	struct kvt_call *c[8];
	unsigned int n, i;

	n = rte_ring_sc_dequeue_burst(lc->calls, (void **)c, RTE_DIM(c), NULL);
	if (n == 0)
		return 0;
	KVT_TSAN_ACQUIRE(lc->calls);
	for (i = 0; i < n; i++)
		run_call(c[i]);
	return n;
}

/* A submission's tail (fence, notification, done) is handled alone. */
static inline int
is_tail(const struct kvt_desc *d)
{
	return d->op == KVT_DESC_FENCE || d->op == KVT_DESC_NOTIFY ||
		d->op == KVT_DESC_DONE;
}

/* Hand a burst to the ports, in runs of descriptors for the same port. */
static void
dispatch(struct kvt_desc **d, unsigned int n)
{
	struct kvt_port *p;
	unsigned int i = 0, j;

	while (i < n) {
		/* A fence or notification of a failed submission must not
		 * reach the peer; a done marker waits for the notification
		 * ahead of it. */
		if (is_tail(d[i])) {
			switch (kvt_desc_gate(d[i])) {
			case KVT_GATE_CANCEL:
				kvt_desc_finish(d[i++], -ECANCELED);
				continue;
			case KVT_GATE_WAIT:
				kvt_lcore_defer(d[i++]);	/* on this lcore */
				continue;
			}
		}
		j = i + 1;
		while (!is_tail(d[i]) && j < n && d[j]->port == d[i]->port &&
		       !is_tail(d[j]))
			j++;
		p = kvt_eng->ports[d[i]->port];
		p->pmd->ops->submit(p, &d[i], j - i);
		settle_port(p);
		i = j;
	}
}

/* @return the work done; waiting retries are not work, so an lcore that
 * only retries still follows its idle policy. */
static unsigned int
run_deferred(struct kvt_lcore *lc)
{
	struct kvt_desc *d = lc->defer, *next;
	unsigned int n = 0;

	lc->defer = NULL;
	lc->defer_tail = NULL;
	for (; d != NULL; d = next) {
		next = d->next;
		n += !(d->flags & KVT_DF_RETRY) && d->op != KVT_DESC_DONE;
		dispatch(&d, 1);
	}
	return n;
}

/* Wait policy, on the lcore: add each port's wake descriptor to the
 * lcore's epoll set (once, as the lcore starts). */
static void
watch_ports(struct kvt_lcore *lc)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct kvt_port *p;
	unsigned int i;
	int fd;

	lc->no_grace = lc->nports > 0;
	for (i = 0; i < lc->nports; i++)
		if (!(lc->ports[i]->pmd->ops->flags & KVT_PMD_F_SYSCALLS))
			lc->no_grace = 0;
	for (i = 0; i < lc->nports && lc->epfd >= 0; i++) {
		p = lc->ports[i];
		fd = -1;
		if (p->pmd->ops->idle != NULL)
			p->pmd->ops->idle(p, &fd);
		ev.data.u32 = i + 1;
		if (fd >= 0 && epoll_ctl(lc->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
			KVT_LOG(WARNING, "lcore %u: port %s cannot wake it (%s): it is polled while the lcore waits",
				lc->id, p->name, strerror(errno));
	}
}

/* How long the lcore may block: the shortest its ports allow. */
static uint64_t
wait_bound_us(struct kvt_lcore *lc)
{
	uint64_t us = lc->defer != NULL ? KVT_WAIT_POLL_US : KVT_IDLE_FOREVER;
	struct kvt_port *p;
	unsigned int i;
	int fd;

	for (i = 0; i < lc->nports && us != 0; i++) {
		p = lc->ports[i];
		us = RTE_MIN(us, p->pmd->ops->idle != NULL ?
			     p->pmd->ops->idle(p, &fd) : KVT_WAIT_POLL_US);
	}
	return us;
}

static int
rings_empty(const struct kvt_lcore *lc)
{
	unsigned int c;

	for (c = 0; c < KVT_PRIO_CLASSES; c++)
		if (!rte_ring_empty(lc->ring[c]))
			return 0;
	return 1;
}

/*
 * Wait policy: block until a submission (kvt_lcore_wake), a port's
 * descriptor or the ports' own bound wakes the lcore.  It says so first,
 * then looks at its rings once more (kvt_lcore_wake says why that is
 * enough); a submission finds it awake again and makes no system call.
 */
static void
idle_block(struct kvt_lcore *lc)
{
	struct epoll_event ev[KVT_MAX_PORTS + 1];
	uint64_t us = wait_bound_us(lc), drain;
	struct timespec ts, *tp = NULL;
	int n, i;

	if (us == 0 || lc->epfd < 0)
		return;
	if (us != KVT_IDLE_FOREVER) {
		ts.tv_sec = (time_t)(us / 1000000);
		ts.tv_nsec = (long)(us % 1000000) * 1000;
		tp = &ts;
	}
	__atomic_store_n(&lc->sleeping, 1, __ATOMIC_SEQ_CST);
	if (!rings_empty(lc) || !rte_ring_empty(lc->calls) ||
	    __atomic_load_n(&lc->stop, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&lc->sleeping, 0, __ATOMIC_RELAXED);
		return;
	}
	n = epoll_pwait2(lc->epfd, ev, (int)RTE_DIM(ev), tp, NULL);
	if (n < 0 && errno == ENOSYS)	/* kernels before 5.11 */
		n = epoll_wait(lc->epfd, ev, (int)RTE_DIM(ev),
			       tp == NULL ? -1 : (int)(us / 1000) + 1);
	__atomic_store_n(&lc->sleeping, 0, __ATOMIC_RELAXED);
	/* A waker that cleared the flag writes the counter, perhaps only
	 * now: a late write costs one early wake next time, no more. */
	for (i = 0; i < n; i++)
		if (ev[i].data.u32 == 0 &&
		    read(lc->evfd, &drain, sizeof(drain)) < 0)
			break;
}

static void
idle_wait(struct kvt_lcore *lc, const struct kvt_opts *o)
{
	uint32_t us = __atomic_load_n(&o->idle_us, __ATOMIC_RELAXED);
	struct timespec ts;

	switch (__atomic_load_n(&o->idle, __ATOMIC_ACQUIRE)) {
	case KVT_IDLE_SPIN:
		break;
	case KVT_IDLE_PAUSE:
		rte_pause();
		break;
	case KVT_IDLE_SLEEP:
		ts.tv_sec = us / 1000000;
		ts.tv_nsec = (long)(us % 1000000) * 1000;
		nanosleep(&ts, NULL);
		break;
	case KVT_IDLE_WAIT:
		idle_block(lc);
		break;
	}
}

/* How long an lcore stays hot after its last work, in microseconds. */
static uint64_t
grace_us(const struct kvt_lcore *lc, const struct kvt_opts *o)
{
	if (__atomic_load_n(&o->idle, __ATOMIC_ACQUIRE) != KVT_IDLE_WAIT)
		return KVT_IDLE_GRACE_US;
	return lc->no_grace ? 0 : __atomic_load_n(&o->idle_us, __ATOMIC_RELAXED);
}

static inline unsigned int
ring_take(struct kvt_lcore *lc, enum kvt_prio c, struct kvt_desc **d,
     unsigned int max)
{
	unsigned int n, i;

	n = rte_ring_sc_dequeue_burst(lc->ring[c], (void **)d, max, NULL);
	if (n != 0)
		KVT_TSAN_ACQUIRE(lc->ring[c]);
	/* The submitter leaves the second line alone (struct kvt_desc). */
	for (i = 0; i < n; i++)
		d[i]->prio = (uint8_t)c;
	return n;
}

/* Cut the next slices of a held ORDERED submission and hand them out;
 * @return how many went, and 1 in *fin once it is all cut. */
static unsigned int
run_cut(struct kvt_held *h, unsigned int max, int *fin)
{
	struct kvt_desc *d[KVT_BURST], *cut = h->d[h->pos];
	unsigned int n;

	if (!h->cutting) {
		kvt_cut_begin(cut, &h->cut);
		h->cutting = 1;
	}
	n = kvt_cut(cut, &h->cut, d, RTE_MIN(max, (unsigned int)KVT_BURST), fin);
	if (*fin)
		h->cutting = 0;
	if (n != 0)
		dispatch(d, n);
	return n;
}

/*
 * Hand out class c's held descriptors, step at a time, at most budget a
 * turn; bulk stops as soon as urgent work comes.  A submission being cut
 * keeps its place, and what was taken behind it waits: its fence and done
 * marker follow its slices.  @return how many went.
 */
static unsigned int
serve_held(struct kvt_lcore *lc, enum kvt_prio c, unsigned int step,
      unsigned int budget)
{
	struct kvt_held *h = &lc->held[c];
	unsigned int done = 0, n, j;
	int fin;

	while (h->pos < h->n && done < budget) {
		if (h->d[h->pos]->op == KVT_DESC_CUT) {
			n = run_cut(h, RTE_MIN(step, budget - done), &fin);
			done += n;
			if (fin)
				h->pos++;
			else if (n == 0)
				break;	/* the pool is empty: next turn */
		} else {
			for (j = h->pos + 1; j < h->n && j - h->pos < step &&
			     h->d[j]->op != KVT_DESC_CUT; j++)
				;
			dispatch(&h->d[h->pos], j - h->pos);
			done += j - h->pos;
			h->pos = j;
		}
		if (c == KVT_PRIO_BULK &&
		    !rte_ring_empty(lc->ring[KVT_PRIO_URGENT]))
			break;
	}
	return done;
}

/* Refill each class's held descriptors from its ring once they went. */
static void
take_all(struct kvt_lcore *lc)
{
	struct kvt_held *h;
	unsigned int c;

	for (c = 0; c < KVT_PRIO_CLASSES; c++) {
		h = &lc->held[c];
		if (h->pos == h->n) {
			h->n = ring_take(lc, (enum kvt_prio)c, h->d, KVT_BURST);
			h->pos = 0;
		}
	}
}

static int
held_pending(const struct kvt_lcore *lc)
{
	unsigned int c;

	for (c = 0; c < KVT_PRIO_CLASSES; c++)
		if (lc->held[c].pos < lc->held[c].n)
			return 1;
	return 0;
}

static int
lcore_main(void *arg)
{
	struct kvt_lcore *lc = arg;
	const struct kvt_opts *o = &kvt_eng->o;
	uint64_t last_work = rte_get_tsc_cycles();
	const uint64_t tsc_us = rte_get_tsc_hz() / 1000000;
	struct kvt_port *p;
	unsigned int i, work;

	__atomic_store_n(&lc->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
	/* A bounded sleep ends when asked, not up to 50 us later. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	watch_ports(lc);
	__atomic_store_n(&lc->running, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&lc->stop, __ATOMIC_ACQUIRE)) {
		/* Urgent first, then normal, then bulk, which yields to
		 * urgent work every few descriptors: each class is served
		 * every turn, a burst at most, so none starves, and urgent
		 * work never waits behind more than a few bulk slices. */
		take_all(lc);
		/* A call queued before those descriptors runs before them
		 * (a connection attached before its first slice). */
		work = rte_ring_empty(lc->calls) ? 0 : run_calls(lc);
		work += serve_held(lc, KVT_PRIO_URGENT, KVT_BURST, KVT_BURST);
		work += serve_held(lc, KVT_PRIO_NORMAL, KVT_BURST, KVT_BURST);
		work += serve_held(lc, KVT_PRIO_BULK, KVT_BULK_STEP, KVT_BURST);
		if (lc->defer != NULL)
			work += run_deferred(lc);
		for (i = 0; i < lc->nports; i++) {
			p = lc->ports[i];
			work += p->pmd->ops->poll(p);
			settle_port(p);
			if (p->done_bytes != 0) {
				__atomic_fetch_sub(&p->inflight_bytes, p->done_bytes,
						   __ATOMIC_RELAXED);
				p->done_bytes = 0;
			}
		}
		__atomic_store_n(&lc->loops, lc->loops + 1, __ATOMIC_RELAXED);
		if (work != 0 || held_pending(lc)) {
			last_work = rte_get_tsc_cycles();
			continue;
		}
		lc->idle_loops++;
		if (rte_get_tsc_cycles() - last_work > tsc_us * grace_us(lc, o))
			idle_wait(lc, o);
	}
	__atomic_store_n(&lc->running, 0, __ATOMIC_RELEASE);
	/* EAL's wait for a finished lcore is invisible to TSan. */
	KVT_TSAN_RELEASE(lc);
	return 0;
}

static void
wake_close(struct kvt_lcore *lc)
{
	if (lc->evfd >= 0)
		close(lc->evfd);
	if (lc->epfd >= 0)
		close(lc->epfd);
	lc->evfd = lc->epfd = -1;
}

static void
rings_free(struct kvt_lcore *lc)
{
	unsigned int c;

	for (c = 0; c < KVT_PRIO_CLASSES; c++) {
		rte_ring_free(lc->ring[c]);
		lc->ring[c] = NULL;
	}
	rte_ring_free(lc->calls);
	lc->calls = NULL;
}

static int
lcore_setup(struct kvt_lcore *lc)
{
	static const char *const cls[KVT_PRIO_CLASSES] = { "ring", "urg", "bulk" };
	char name[RTE_RING_NAMESIZE];
	unsigned int size = rte_align32pow2(kvt_eng->o.descs), c;
	int sock = (int)rte_lcore_to_socket_id(lc->id), ret;

	for (c = 0; c < KVT_PRIO_CLASSES; c++) {
		snprintf(name, sizeof(name), "kvt_%s_%u", cls[c], lc->id);
		lc->ring[c] = rte_ring_create(name, size, sock, RING_F_SC_DEQ);
		if (lc->ring[c] == NULL) {
			KVT_LOG(ERR, "lcore %u: ring: %s", lc->id,
				rte_strerror(rte_errno));
			ret = -rte_errno;
			goto free_rings;
		}
	}
	snprintf(name, sizeof(name), "kvt_calls_%u", lc->id);
	lc->calls = rte_ring_create(name, KVT_CALLS, sock, RING_F_SC_DEQ);
	if (lc->calls == NULL) {
		KVT_LOG(ERR, "lcore %u: call ring: %s", lc->id,
			rte_strerror(rte_errno));
		ret = -rte_errno;
		goto free_rings;
	}
	lc->sleeping = 0;
	memset(lc->held, 0, sizeof(lc->held));
	lc->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	lc->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (lc->evfd < 0 || lc->epfd < 0 ||
	    epoll_ctl(lc->epfd, EPOLL_CTL_ADD, lc->evfd,
		      &(struct epoll_event){ .events = EPOLLIN }) != 0) {
		KVT_LOG(ERR, "lcore %u: wake descriptors: %s", lc->id,
			strerror(errno));
		ret = -EMFILE;
		goto close_wake;
	}
	kvt_lcore_ring_attach(lc);
	return 0;

close_wake:
	wake_close(lc);
free_rings:
	rings_free(lc);
	return ret;
}

int
kvt_lcores_start(void)
{
	struct kvt_engine *e = kvt_eng;
	struct kvt_lcore *lc;
	unsigned int i;
	int ret;

	for (i = 0; i < e->nlcores; i++) {
		ret = lcore_setup(&e->lcores[i]);
		if (ret < 0)
			return ret;
	}
	for (i = 0; i < e->nlcores; i++) {
		lc = &e->lcores[i];
		ret = rte_eal_remote_launch(lcore_main, lc, lc->id);
		if (ret < 0) {
			KVT_LOG(ERR, "lcore %u: launch failed: %s", lc->id,
				strerror(-ret));
			kvt_lcores_stop();
			return ret;
		}
	}
	for (i = 0; i < e->nlcores; i++)
		while (!__atomic_load_n(&e->lcores[i].running, __ATOMIC_ACQUIRE))
			rte_pause();
	__atomic_store_n(&e->lcores_running, 1, __ATOMIC_RELEASE);
	return 0;
}

/* Fail whatever is left in a stopped lcore's ring; run its calls here. */
static void
drain_ring(struct kvt_lcore *lc)
{
	struct kvt_held *h;
	struct kvt_desc *d;
	unsigned int c;

	while (run_calls(lc) != 0)
		;
	for (c = 0; c < KVT_PRIO_CLASSES; c++) {
		h = &lc->held[c];
		h->cutting = 0;
		while (h->pos < h->n)
			kvt_desc_finish(h->d[h->pos++], -ECANCELED);
	}
	for (c = 0; c < KVT_PRIO_CLASSES; c++)
		while (rte_ring_sc_dequeue(lc->ring[c], (void **)&d) == 0) {
			KVT_TSAN_ACQUIRE(lc->ring[c]);
			kvt_desc_finish(d, -ECANCELED);
		}
	while (lc->defer != NULL) {
		d = lc->defer;
		lc->defer = d->next;
		kvt_desc_finish(d, -ECANCELED);	/* a DONE marker: stored */
	}
	lc->defer_tail = NULL;
}

void
kvt_lcores_stop(void)
{
	struct kvt_engine *e = kvt_eng;
	struct kvt_lcore *lc;
	unsigned int i;

	__atomic_store_n(&e->lcores_running, 0, __ATOMIC_RELEASE);
	for (i = 0; i < e->nlcores; i++) {
		__atomic_store_n(&e->lcores[i].stop, 1, __ATOMIC_RELEASE);
		if (e->lcores[i].calls != NULL)
			kvt_lcore_kick(&e->lcores[i]);
	}
	for (i = 0; i < e->nlcores; i++) {
		lc = &e->lcores[i];
		if (lc->calls == NULL)
			continue;
		rte_eal_wait_lcore(lc->id);
		KVT_TSAN_ACQUIRE(lc);
		drain_ring(lc);
	}
}

void
kvt_lcores_free(void)
{
	struct kvt_engine *e = kvt_eng;
	unsigned int i;

	for (i = 0; i < e->nlcores; i++) {
		kvt_lcore_ring_detach(&e->lcores[i]);
		wake_close(&e->lcores[i]);
		rings_free(&e->lcores[i]);
	}
}

int
kvt_port_call(struct kvt_port *port, int (*fn)(struct kvt_port *, void *),
	      void *arg, unsigned int timeout_ms)
{
	struct kvt_lcore *lc = kvt_lcore_of_port(port);
	struct kvt_call *c;
	uint32_t expect = CALL_PENDING;
	uint64_t deadline;
	int ret;

	/* On the port's own lcore the loop settles after its PMD call. */
	if (rte_lcore_id() == port->lcore)
		return fn(port, arg);
	if (lc == NULL || !__atomic_load_n(&lc->running, __ATOMIC_ACQUIRE)) {
		ret = fn(port, arg);
		kvt_port_settle(port);
		return ret;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->port = port;
	c->fn = fn;
	c->arg = arg;
	KVT_TSAN_RELEASE(lc->calls);
	if (rte_ring_mp_enqueue(lc->calls, c) != 0) {
		free(c);
		return -ENOBUFS;
	}
	kvt_lcore_wake(lc);
	deadline = kvt_now_us() + (uint64_t)timeout_ms * 1000;
	/* Once the lcore took the call it finishes it: wait for that. */
	while (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CALL_DONE) {
		if (timeout_ms != 0 && kvt_now_us() > deadline &&
		    __atomic_compare_exchange_n(&c->state, &expect,
						CALL_ABANDONED, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			KVT_LOG(ERR, "port %s: lcore %u did not take a call in %u ms (not run)",
				port->name, port->lcore, timeout_ms);
			return -ETIMEDOUT;
		}
		expect = CALL_PENDING;
		usleep(10);
	}
	ret = c->ret;
	free(c);
	return ret;
}
