/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control thread: the listening socket, the loop over inbound
 * sessions (session.c: peers that opened us) and the peers we opened,
 * region events for the sessions, and upkeep of the peers we opened
 * (pings, region updates, loss detection).  It is an
 * ordinary thread outside the lcores' cpus, and the only place besides
 * kvt_peer_open() where control sockets are read or written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>

#include <rte_lcore.h>

#include "kvt_private.h"


/* epoll data tags: the low bit tells sessions from peers. */
#define TAG_WAKE ((uint64_t)3)

static int ctl_epfd = -1;

static uint32_t
ping_period_us(void)
{
	return RTE_MAX(kvt_eng->o.timeout_ms * 1000 / 4, 10000u);
}

/*
 * Region events for the sessions, queued by application threads without
 * the control lock (which the control thread holds while it works: a
 * serving stack registering thousands of regions would wait on it for
 * each) and moved to the sessions by the control thread.
 */
static struct {
	pthread_mutex_t lock;	/* held for a copy: never contended long */
	struct kvt_buf frames;	/* whole frames, in order */
	int failed;		/* a frame was lost: no memory */
	uint64_t del_seq;	/* the last REGION_DEL number given */
	uint64_t del_queued;	/* the newest REGION_DEL among frames */
} outbox = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The newest REGION_DEL handed to the sessions (under ctl_lock). */
static uint64_t del_delivered;
/* The number of the last REGION_DEL the calling thread caused: the
 * registry announces a removal on the thread that unregisters, which
 * then waits for it (region_gone_wait). */
static __thread uint64_t del_ticket;

static uint32_t wake_pending;	/* a byte is in the wake pipe */

static void
wake_ctl(void)
{
	char c = 1;

	/* One byte wakes the thread; the rest would be system calls for
	 * nothing while it is busy. */
	if (__atomic_exchange_n(&wake_pending, 1, __ATOMIC_SEQ_CST) != 0)
		return;
	if (kvt_eng->ctl_wake[1] >= 0 && write(kvt_eng->ctl_wake[1], &c, 1) < 0)
		return;	/* full pipe: a wake-up is already pending */
}

static void
advertised_addr(const struct sockaddr_in *bound, char *out, size_t len)
{
	struct ifaddrs *ifa, *i;
	struct in_addr a = bound->sin_addr;
	char ip[INET_ADDRSTRLEN];

	if (a.s_addr == htonl(INADDR_ANY)) {
		a.s_addr = htonl(INADDR_LOOPBACK);
		if (getifaddrs(&ifa) == 0) {
			for (i = ifa; i != NULL; i = i->ifa_next) {
				if (i->ifa_addr == NULL ||
				    i->ifa_addr->sa_family != AF_INET ||
				    (i->ifa_flags & IFF_LOOPBACK))
					continue;
				a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
				break;
			}
			freeifaddrs(ifa);
		}
	}
	inet_ntop(AF_INET, &a, ip, sizeof(ip));
	snprintf(out, len, "%s:%u", ip, ntohs(bound->sin_port));
}

static int
listen_open(void)
{
	struct kvt_engine *e = kvt_eng;
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd, one = 1;

	if (kvt_parse_addr(e->o.listen, &sa) < 0)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, SOMAXCONN) != 0) {
		int err = errno;

		close(fd);
		KVT_LOG(ERR, "cannot listen on %s: %s", e->o.listen, strerror(err));
		return err == EADDRINUSE ? -EADDRINUSE : -err;
	}
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	if ((ntohl(sa.sin_addr.s_addr) >> 24) != 127 && e->o.secret[0] == '\0')
		KVT_LOG(WARNING, "listening on %s without --kvt-secret: whoever reaches this port can read and write the memory this engine exports",
			e->o.listen);
	e->listen_addr = sa;
	advertised_addr(&sa, e->listen_str, sizeof(e->listen_str));
	e->listen_fd = fd;
	return 0;
}

/* The registry's event (kvt_mem_event_subscribe()): tell every peer
 * that opened us. */
static void
region_event(const struct kvt_mem *m, int added, void *arg)
{
	struct kvt_buf b = { 0 };
	int ret;

	RTE_SET_USED(arg);
	/* Removals are numbered in the order they are queued, which is the
	 * order each session receives them: a peer's REGION_GONE for one
	 * number covers every removal before it. */
	pthread_mutex_lock(&outbox.lock);
	ret = kvt_wire_begin(&b, added ? KVT_W_REGION_ADD : KVT_W_REGION_DEL);
	if (added) {
		ret |= kvt_mem_export_one(m, &b);
	} else {
		del_ticket = ++outbox.del_seq;
		ret |= kvt_wire_put_u64(&b, KVT_T_BASE, (uintptr_t)m->lm.addr);
		ret |= kvt_wire_put_u64(&b, KVT_T_SEQ, del_ticket);
		outbox.del_queued = del_ticket;
	}
	ret |= kvt_wire_end(&b);
	if (ret != 0 || kvt_buf_put(&outbox.frames, b.data, b.len) < 0)
		outbox.failed = 1;
	pthread_mutex_unlock(&outbox.lock);
	kvt_buf_free(&b);
	wake_ctl();
}

/* Control thread (ctl_lock): hand the queued region events to every
 * session that opened us.  A session that missed one (no memory) cannot
 * be told the truth any more: it is closed, and its peer opens again. */
static void
outbox_deliver(void)
{
	struct kvt_buf frames;
	struct kvt_session *s;
	uint64_t del;
	int failed;

	pthread_mutex_lock(&outbox.lock);
	frames = outbox.frames;
	failed = outbox.failed;
	del = outbox.del_queued;
	outbox.frames = (struct kvt_buf){ 0 };
	outbox.failed = 0;
	pthread_mutex_unlock(&outbox.lock);
	if (frames.len == 0 && !failed)
		return;
	for (s = kvt_eng->sessions; s != NULL; s = s->next) {
		if (!s->authed)
			continue;
		if (failed)
			s->overflow = 1;
		else if (kvt_sess_queue(s, &frames) == -ENOMEM)
			s->overflow = 1;
		s->del_sent = del;
	}
	del_delivered = del;
	if (failed)
		KVT_LOG(ERR, "a region event was lost (no memory): closing the sessions of our peers");
	kvt_buf_free(&frames);
}

/* ---- peers we opened ---- */

/*
 * Tell the peer which of the regions it removed we are done with (no
 * request of ours uses them, nor ever will), so its unregister returns.
 */
static void
peer_gone(struct kvt_peer *p)
{
	uint64_t upto = kvt_peer_regions_release(p);
	struct kvt_buf b = { 0 };

	if (upto <= p->del_acked)
		return;
	if (kvt_wire_begin(&b, KVT_W_REGION_GONE) == 0 &&
	    kvt_wire_put_u64(&b, KVT_T_SEQ, upto) == 0 &&
	    kvt_wire_end(&b) == 0 &&
	    send(p->fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT) ==
	    (ssize_t)b.len)
		p->del_acked = upto;	/* else again at the next tick */
	kvt_buf_free(&b);
}

static int
peer_read(struct kvt_peer *p)
{
	uint8_t tmp[16384];
	uint16_t type;
	size_t off = 0;
	ssize_t n;
	int len, ret = 0;

	for (;;) {
		n = recv(p->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			break;
		if (kvt_buf_put(&p->rx, tmp, (size_t)n) < 0)
			return -ENOMEM;
	}
	if (errno != EAGAIN && errno != EINTR)
		return -ECONNRESET;
	while (ret == 0 && p->rx.len - off >= KVT_WIRE_HDR) {
		len = kvt_wire_check_hdr(p->rx.data + off, KVT_WIRE_MAX, &type);
		if (len < 0)
			return len;
		if (p->rx.len - off - KVT_WIRE_HDR < (size_t)len)
			break;
		switch (type) {
		case KVT_W_PONG:
			/* Read by the lcores (kvt_conn_heard_us). */
			__atomic_store_n(&p->last_pong_us, kvt_now_us(),
					 __ATOMIC_RELAXED);
			if (p->ping_head != p->ping_tail)
				p->ping_head++;
			break;
		case KVT_W_REGION_ADD:
		case KVT_W_REGION_DEL:
			ret = kvt_peer_region_update(p, type == KVT_W_REGION_ADD,
						     p->rx.data + off + KVT_WIRE_HDR,
						     (size_t)len);
			if (ret == 0 && type == KVT_W_REGION_DEL)
				peer_gone(p);
			break;
		case KVT_W_PORT_MSG:
			ret = kvt_ctl_port_msg(p->conn, p->rx.data + off +
					       KVT_WIRE_HDR, (size_t)len);
			break;
		default:
			ret = -EPROTO;
		}
		off += KVT_WIRE_HDR + (size_t)len;
	}
	memmove(p->rx.data, p->rx.data + off, p->rx.len - off);
	p->rx.len -= off;
	return ret;
}

static void
peer_ping(struct kvt_peer *p, uint64_t now)
{
	struct kvt_buf b = { 0 };

	if (now - p->last_ping_us < ping_period_us() ||
	    p->ping_tail - p->ping_head == KVT_PINGS_OUT)
		return;
	p->last_ping_us = now;
	if (kvt_wire_begin(&b, KVT_W_PING) == 0 && kvt_wire_end(&b) == 0) {
		if (send(p->fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT) ==
		    (ssize_t)b.len)
			p->ping_sent_us[p->ping_tail++ % KVT_PINGS_OUT] = now;
		else if (errno != EAGAIN)
			kvt_peer_lost(p, -ECONNRESET);
	}
	kvt_buf_free(&b);
}

/*
 * Is the peer lost?  When a PING we sent went unanswered for the timeout
 * less one PING period (so the peer is declared lost within the timeout
 * of its last answer) and no answer waits unread.  Time we did not run (a
 * starved control thread sends no PINGs) counts against nobody, and a
 * peer that answered every PING in time is alive however late we read
 * it.
 */
static int
peer_silent(const struct kvt_peer *p, uint64_t now, uint64_t dead_us)
{
	int unread = 0;

	if (p->ping_head == p->ping_tail ||
	    now - p->ping_sent_us[p->ping_head % KVT_PINGS_OUT] <=
	    RTE_MAX(dead_us - RTE_MIN(ping_period_us(), dead_us), dead_us / 2))
		return 0;
	return ioctl(p->fd, FIONREAD, &unread) != 0 || unread == 0;
}

static int
adopt_peer(struct kvt_peer *p)
{
	struct epoll_event ev = { .events = EPOLLIN };

	/* Peers are told from sessions by the low pointer bit. */
	ev.data.u64 = (uintptr_t)p | 1;
	p->last_ping_us = kvt_now_us();
	p->ping_head = p->ping_tail = 0;
	__atomic_store_n(&p->last_pong_us, p->last_ping_us, __ATOMIC_RELAXED);
	if (epoll_ctl(ctl_epfd, EPOLL_CTL_ADD, p->fd, &ev) != 0)
		return -errno;
	wake_ctl();
	return 0;
}

static void
forget_peer(struct kvt_peer *p)
{
	if (ctl_epfd >= 0 && p->fd >= 0)
		epoll_ctl(ctl_epfd, EPOLL_CTL_DEL, p->fd, NULL);
}

/* Does s's peer copy into our memory itself (so only it can stop)? */
static int
sess_copies_here(const struct kvt_session *s)
{
	unsigned int i;

	for (i = 0; i < KVT_MAX_PORTS; i++)
		if (s->conn[i] != NULL &&
		    (s->conn[i]->port->pmd->ops->flags & KVT_PMD_F_PEER_COPIES))
			return 1;
	return 0;
}

/* Under ctl_lock: sessions that still owe a REGION_GONE for seq; with
 * give_up, each of them is closed at the next tick. */
static unsigned int
gone_owed(uint64_t seq, int give_up)
{
	struct kvt_session *s;
	unsigned int n = 0;

	if (del_delivered < seq)
		return 1;	/* not even handed out yet */
	for (s = kvt_eng->sessions; s != NULL; s = s->next) {
		if (!s->authed || s->del_sent < seq || s->del_acked >= seq ||
		    !sess_copies_here(s))
			continue;
		n++;
		if (give_up) {
			KVT_LOG(ERR, "peer %s did not confirm in time that it stopped writing a region unregistered here: its session is closed",
				s->info.name);
			s->overflow = 1;
		}
	}
	return n;
}

/*
 * The calling thread's last removal: wait until every peer that copies
 * into our memory itself (shm, nvlink) confirmed that no copy of its
 * into the region runs or will start.  Those that do not within the
 * timeout lose their session.
 */
static int
region_gone_wait(unsigned int timeout_ms)
{
	uint64_t seq = del_ticket;
	uint64_t deadline = kvt_now_us() + (uint64_t)timeout_ms * 1000;
	unsigned int owed;
	int late;

	if (seq == 0)
		return 0;
	for (;;) {
		late = kvt_now_us() > deadline;
		pthread_mutex_lock(&kvt_eng->ctl_lock);
		owed = gone_owed(seq, late);
		pthread_mutex_unlock(&kvt_eng->ctl_lock);
		if (owed == 0)
			return 0;
		if (late) {
			wake_ctl();
			return -ETIMEDOUT;
		}
		usleep(100);
	}
}

static const struct kvt_ctl_hooks ctl_hooks = {
	.adopt_peer = adopt_peer,
	.forget_peer = forget_peer,
	.region_gone_wait = region_gone_wait,
};

static void
ctl_tick(uint64_t now)
{
	struct kvt_session *s, *next;
	struct kvt_port *port;
	struct kvt_peer *p;
	uint64_t dead_us = (uint64_t)kvt_eng->o.timeout_ms * 1000;
	unsigned int i;

	for (p = kvt_eng->peers; p != NULL; p = p->next) {
		if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != KVT_PEER_UP)
			continue;
		peer_ping(p, now);
		if (p->retired != NULL || p->del_seen > p->del_acked)
			peer_gone(p);
		if (peer_silent(p, now, dead_us)) {
			KVT_LOG(ERR, "peer %s: no answer for %u ms", p->info.name,
				kvt_eng->o.timeout_ms);
			kvt_peer_lost(p, -ETIMEDOUT);
		}
	}
	kvt_batches_reap_zombies();
	kvt_inbox_reap_retired(0);
	for (i = 0; i < kvt_port_count(); i++) {
		port = kvt_port_get(i);
		if (port->pmd->ops->ctl_tick != NULL)
			port->pmd->ops->ctl_tick(port, now);
	}
	kvt_sess_accept_resume(now);
	for (s = kvt_eng->sessions; s != NULL; s = next) {
		next = s->next;
		if (kvt_sess_expired(s, now, dead_us))
			kvt_sess_close(s);
		else if (s->tx.len > s->tx_off && kvt_sess_flush(s) < 0)
			kvt_sess_close(s);
	}
}

static int
peer_listed(const struct kvt_peer *p)
{
	const struct kvt_peer *q;

	for (q = kvt_eng->peers; q != NULL; q = q->next)
		if (q == p)
			return 1;
	return 0;
}

static void
ctl_event(struct epoll_event *ev)
{
	struct kvt_session *s;
	struct kvt_peer *p;
	char drain[64];
	int ret;

	if (ev->data.u64 == KVT_CTL_TAG_LISTEN) {
		kvt_sess_accept();
		return;
	}
	if (ev->data.u64 == TAG_WAKE) {
		/* Cleared after the drain (a byte written before the clear
		 * may be drained, none after it) and before this loop turn
		 * delivers: what a suppressed wake-up announced is seen. */
		while (read(kvt_eng->ctl_wake[0], drain, sizeof(drain)) > 0)
			;
		__atomic_store_n(&wake_pending, 0, __ATOMIC_SEQ_CST);
		return;
	}
	if (ev->data.u64 & 1) {
		p = (struct kvt_peer *)(uintptr_t)(ev->data.u64 & ~(uint64_t)1);
		/* It may have been closed since epoll_wait returned. */
		if (!peer_listed(p))
			return;
		if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != KVT_PEER_UP) {
			epoll_ctl(ctl_epfd, EPOLL_CTL_DEL, p->fd, NULL);
			return;
		}
		ret = peer_read(p);
		if (ret < 0) {
			KVT_LOG(ERR, "peer %s: control connection lost (%s)",
				p->info.name, strerror(-ret));
			epoll_ctl(ctl_epfd, EPOLL_CTL_DEL, p->fd, NULL);
			kvt_peer_lost(p, -ECONNRESET);
		}
		return;
	}
	s = ev->data.ptr;
	if ((ev->events & EPOLLIN) || (ev->events & (EPOLLHUP | EPOLLERR)))
		ret = kvt_sess_read(s);
	else
		ret = kvt_sess_flush(s);
	if (ret < 0)
		kvt_sess_close(s);
}

static void *
ctl_main(void *arg)
{
	struct epoll_event evs[64];
	int n, i, tick_ms = (int)RTE_MAX(ping_period_us() / 2000, 5u);

	RTE_SET_USED(arg);
	while (__atomic_load_n(&kvt_eng->ctl_running, __ATOMIC_ACQUIRE)) {
		n = epoll_wait(ctl_epfd, evs, RTE_DIM(evs), tick_ms);
		pthread_mutex_lock(&kvt_eng->ctl_lock);
		/* What sessions and peers sent first, new connections
		 * last: a flood of them does not delay a peer's frames. */
		for (i = 0; i < n; i++)
			if (evs[i].data.u64 != KVT_CTL_TAG_LISTEN)
				ctl_event(&evs[i]);
		for (i = 0; i < n; i++)
			if (evs[i].data.u64 == KVT_CTL_TAG_LISTEN)
				ctl_event(&evs[i]);
		outbox_deliver();
		ctl_tick(kvt_now_us());
		pthread_mutex_unlock(&kvt_eng->ctl_lock);
	}
	return NULL;
}

int
kvt_ctl_start(void)
{
	struct kvt_engine *e = kvt_eng;
	struct epoll_event ev = { .events = EPOLLIN };
	int ret;

	e->ctl_wake[0] = e->ctl_wake[1] = -1;
	wake_pending = 0;
	ret = listen_open();
	if (ret < 0)
		return ret;
	ctl_epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ctl_epfd < 0) {
		ret = -errno;
		goto close_listen;
	}
	if (pipe2(e->ctl_wake, O_NONBLOCK | O_CLOEXEC) != 0) {
		ret = -errno;
		goto close_epoll;
	}
	kvt_sess_init(ctl_epfd);
	ev.data.u64 = KVT_CTL_TAG_LISTEN;
	epoll_ctl(ctl_epfd, EPOLL_CTL_ADD, e->listen_fd, &ev);
	ev.data.u64 = TAG_WAKE;
	epoll_ctl(ctl_epfd, EPOLL_CTL_ADD, e->ctl_wake[0], &ev);
	ret = kvt_mem_event_subscribe(region_event, NULL);
	if (ret < 0)
		goto close_pipe;
	e->ctl_hooks = &ctl_hooks;
	e->ctl_running = 1;
	ret = rte_ctrl_thread_create(&e->ctl_thread, "kvt-ctl", NULL, ctl_main,
				     NULL);
	if (ret != 0) {
		ret = -ret;
		e->ctl_running = 0;
		goto unsubscribe;
	}
	return 0;

unsubscribe:
	e->ctl_hooks = NULL;
	kvt_mem_event_unsubscribe(region_event, NULL);
close_pipe:
	close(e->ctl_wake[0]);
	close(e->ctl_wake[1]);
	e->ctl_wake[0] = e->ctl_wake[1] = -1;
close_epoll:
	close(ctl_epfd);
	ctl_epfd = -1;
close_listen:
	close(e->listen_fd);
	e->listen_fd = -1;
	return ret;
}

void
kvt_ctl_stop(void)
{
	struct kvt_engine *e = kvt_eng;

	if (!e->ctl_running)
		return;
	kvt_mem_event_unsubscribe(region_event, NULL);
	__atomic_store_n(&e->ctl_running, 0, __ATOMIC_RELEASE);
	wake_ctl();
	pthread_join(e->ctl_thread, NULL);
	while (e->sessions != NULL)
		kvt_sess_close(e->sessions);
	pthread_mutex_lock(&outbox.lock);
	kvt_buf_free(&outbox.frames);
	outbox.failed = 0;
	pthread_mutex_unlock(&outbox.lock);
	close(e->listen_fd);
	close(e->ctl_wake[0]);
	close(e->ctl_wake[1]);
	close(ctl_epfd);
	e->listen_fd = ctl_epfd = -1;
	e->ctl_wake[0] = e->ctl_wake[1] = -1;
	e->ctl_hooks = NULL;
}
