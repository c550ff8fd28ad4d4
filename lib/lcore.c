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
#include <sys/syscall.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_pause.h>

#include "kvt_private.h"

/* Stay hot this long after the last work before the idle policy applies. */
#define KVT_IDLE_GRACE_US 200
/* Port calls waiting for one lcore (each caller waits for its own). */
#define KVT_CALLS 64

struct kvt_call {
	struct kvt_port *port;
	int (*fn)(struct kvt_port *, void *);
	void *arg;
	int ret;
	uint32_t state;		/* CALL_* */
};

enum { CALL_PENDING, CALL_DONE, CALL_ABANDONED };

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

	if (kvt_eng == NULL)
		return -ENODEV;
	if (kvt_parse_idle(policy, &idle, &us) < 0)
		return -EINVAL;
	/* The lcores read both fields each idle turn; a torn pair lasts one
	 * turn at most. */
	__atomic_store_n(&kvt_eng->o.idle_us, us, __ATOMIC_RELAXED);
	__atomic_store_n(&kvt_eng->o.idle, idle, __ATOMIC_RELEASE);
	return 0;
}

/* Settle what p's PMD handed back during the call that just returned. */
static inline void
settle(struct kvt_port *p)
{
	if (p->done_head != NULL)
		kvt_port_settle(p);
}

static void
run_call(struct kvt_call *c)
{
	uint32_t expect = CALL_PENDING;

	c->ret = c->fn(c->port, c->arg);
	settle(c->port);
	if (!__atomic_compare_exchange_n(&c->state, &expect, CALL_DONE, false,
					 __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
		free(c);	/* the caller gave up waiting */
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
single(const struct kvt_desc *d)
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
		if (single(d[i])) {
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
		while (!single(d[i]) && j < n && d[j]->port == d[i]->port &&
		       !single(d[j]))
			j++;
		p = kvt_eng->ports[d[i]->port];
		p->pmd->ops->submit(p, &d[i], j - i);
		settle(p);
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

static void
idle_wait(const struct kvt_opts *o)
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
	}
}

static int
lcore_main(void *arg)
{
	struct kvt_lcore *lc = arg;
	const struct kvt_opts *o = &kvt_eng->o;
	uint64_t grace = rte_get_tsc_hz() / 1000000 * KVT_IDLE_GRACE_US;
	uint64_t last_work = rte_get_tsc_cycles();
	struct kvt_desc *burst[KVT_BURST];
	struct kvt_port *p;
	unsigned int n, i, work;

	__atomic_store_n(&lc->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
	__atomic_store_n(&lc->running, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&lc->stop, __ATOMIC_ACQUIRE)) {
		n = rte_ring_sc_dequeue_burst(lc->ring, (void **)burst,
					      KVT_BURST, NULL);
		/* A call queued before those descriptors runs before them
		 * (a connection attached before its first slice). */
		work = rte_ring_empty(lc->calls) ? 0 : run_calls(lc);
		if (n != 0) {
			KVT_TSAN_ACQUIRE(lc->ring);
			dispatch(burst, n);
			work += n;
		}
		if (lc->defer != NULL)
			work += run_deferred(lc);
		for (i = 0; i < lc->nports; i++) {
			p = lc->ports[i];
			work += p->pmd->ops->poll(p);
			settle(p);
			if (p->done_bytes != 0) {
				__atomic_fetch_sub(&p->inflight_bytes, p->done_bytes,
						   __ATOMIC_RELAXED);
				p->done_bytes = 0;
			}
		}
		__atomic_store_n(&lc->loops, lc->loops + 1, __ATOMIC_RELAXED);
		if (work != 0) {
			last_work = rte_get_tsc_cycles();
			continue;
		}
		lc->idle_loops++;
		if (rte_get_tsc_cycles() - last_work > grace)
			idle_wait(o);
	}
	__atomic_store_n(&lc->running, 0, __ATOMIC_RELEASE);
	/* EAL's wait for a finished lcore is invisible to TSan. */
	KVT_TSAN_RELEASE(lc);
	return 0;
}

static int
lcore_setup(struct kvt_lcore *lc)
{
	char name[RTE_RING_NAMESIZE];
	unsigned int size = rte_align32pow2(kvt_eng->o.descs);

	snprintf(name, sizeof(name), "kvt_ring_%u", lc->id);
	lc->ring = rte_ring_create(name, size, (int)rte_lcore_to_socket_id(lc->id),
				   RING_F_SC_DEQ);
	if (lc->ring == NULL) {
		KVT_LOG(ERR, "lcore %u: ring: %s", lc->id, rte_strerror(rte_errno));
		return -rte_errno;
	}
	snprintf(name, sizeof(name), "kvt_calls_%u", lc->id);
	lc->calls = rte_ring_create(name, KVT_CALLS,
				    (int)rte_lcore_to_socket_id(lc->id),
				    RING_F_SC_DEQ);
	if (lc->calls == NULL) {
		KVT_LOG(ERR, "lcore %u: call ring: %s", lc->id,
			rte_strerror(rte_errno));
		rte_ring_free(lc->ring);
		lc->ring = NULL;
		return -rte_errno;
	}
	kvt_lcore_ring_attach(lc);
	return 0;
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
	struct kvt_desc *d;

	while (run_calls(lc) != 0)
		;
	while (rte_ring_sc_dequeue(lc->ring, (void **)&d) == 0) {
		KVT_TSAN_ACQUIRE(lc->ring);
		kvt_desc_finish(d, -ECANCELED);
	}
	while (lc->defer != NULL) {
		d = lc->defer;
		lc->defer = d->next;
		if (d->op == KVT_DESC_DONE)
			kvt_desc_store_done(d);
		else
			kvt_desc_finish(d, -ECANCELED);
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
	for (i = 0; i < e->nlcores; i++)
		__atomic_store_n(&e->lcores[i].stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < e->nlcores; i++) {
		lc = &e->lcores[i];
		if (lc->ring == NULL)
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
		rte_ring_free(e->lcores[i].ring);
		rte_ring_free(e->lcores[i].calls);
		e->lcores[i].ring = NULL;
		e->lcores[i].calls = NULL;
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
	deadline = kvt_now_us() + (uint64_t)timeout_ms * 1000;
	while (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CALL_PENDING) {
		if (kvt_now_us() > deadline &&
		    __atomic_compare_exchange_n(&c->state, &expect,
						CALL_ABANDONED, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			KVT_LOG(ERR, "port %s: lcore %u did not answer in %u ms",
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
