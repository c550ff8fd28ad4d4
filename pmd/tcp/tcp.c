/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp: the fallback transport for hosts without RDMA.  One port per
 * allowed network interface (ports=N: N, each listening on its own TCP
 * port, so the receive work of many peers spreads over N lcores), bound
 * to its address (and device); several connections per peer; one lcore
 * drives all of a port's non-blocking sockets.  Socket calls are this transport's nature: it is the one place
 * an lcore makes system calls.
 *
 * One-sided semantics on top of streams: the initiator sends WRITE (with
 * payload), READ, FENCE and NOTIFY frames; the target checks every range
 * against the regions it exports (kvt_target_range) before it touches
 * memory, receives WRITE payload straight into place, and acknowledges
 * each frame in order once it is done.  An acknowledgement therefore
 * means "placed", and the engine sends a submission's fence only after
 * every slice on every port is acknowledged.
 *
 * Data connections authenticate with a 128-bit token the target issued
 * through the control handshake (itself guarded by the shared secret), so
 * nobody who skipped the handshake can write exported memory.
 */
#define _GNU_SOURCE
#include "tcp.h"

RTE_LOG_REGISTER(tcp_logtype, kvt.pmd.tcp, NOTICE);

/* Every port of this PMD, for pairing ports with endpoints (probe and
 * remove run on the control path, before and after any pairing). */
struct tcp_port *tcp_ports[TCP_MAX_PORTS];
unsigned int tcp_nports;

/* ---- probe: one port per allowed interface (or ports=N) ---- */

static int
allowed(const char *ifname, int loopback)
{
	const char *list = kvt_pmd_env()->nic_allow;
	size_t n = strlen(ifname);
	const char *p;

	if (list == NULL)
		return !loopback;
	for (p = list; (p = strstr(p, ifname)) != NULL; p += n)
		if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
			return 1;
	return 0;
}

static int
numa_of(const char *ifname)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/class/net/%s/device/numa_node", ifname);
	return kvt_sysfs_int(path, -1);
}

/* Port k of interface i (k > 0 only with ports=N). */
static int
port_new(const struct kvt_pmd *pmd, const struct ifaddrs *i, unsigned int k,
	 long conns, long slice_kb)
{
	struct tcp_port *tp;
	char name[32];
	uint32_t mask;

	tp = calloc(1, sizeof(*tp));
	if (tp == NULL)
		return -ENOMEM;
	snprintf(tp->ifname, sizeof(tp->ifname), "%s", i->ifa_name);
	tp->addr = *(struct sockaddr_in *)i->ifa_addr;
	tp->addr.sin_port = 0;
	mask = ntohl(((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr);
	tp->prefix = (uint8_t)__builtin_popcount(mask);
	/* One socket more, kept for urgent work (tcp_submit). */
	tp->conns = (unsigned int)conns + 1;
	tp->slice = (uint32_t)slice_kb << 10;
	tp->lfd = tp->epfd = tp->uepfd = -1;
	pthread_mutex_init(&tp->lock, NULL);
	if (k == 0)
		snprintf(name, sizeof(name), "tcp:%s", i->ifa_name);
	else
		snprintf(name, sizeof(name), "tcp:%s/%u", i->ifa_name, k);
	if (kvt_port_create(pmd, name, numa_of(i->ifa_name), tp) == NULL) {
		free(tp);
		return -ENOSPC;
	}
	tcp_ports[tcp_nports++] = tp;
	return 0;
}

static int
tcp_probe(const struct kvt_pmd *pmd, const char *args)
{
	static const char *const keys[] = { "conns", "slice_kb", "ports", NULL };
	struct ifaddrs *ifa, *i;
	struct rte_kvargs *kv;
	long conns = 2, slice_kb = TCP_SLICE_KB, per_if = 1;
	unsigned int k;
	int n = 0, ret = 0;

	if (args != NULL && *args != '\0') {
		kv = rte_kvargs_parse(args, keys);
		if (kv == NULL)
			return -EINVAL;
		ret = kvt_kv_long(kv, "conns", 1, 8, &conns);
		if (ret == 0)
			ret = kvt_kv_long(kv, "slice_kb", 4, 16384, &slice_kb);
		if (ret == 0)
			ret = kvt_kv_long(kv, "ports", 1, TCP_MAX_PORTS, &per_if);
		rte_kvargs_free(kv);
		if (ret < 0)
			return ret;
	}
	if (getifaddrs(&ifa) != 0)
		return -errno;
	for (i = ifa; i != NULL && ret == 0; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
		    !(i->ifa_flags & IFF_UP) ||
		    !allowed(i->ifa_name, !!(i->ifa_flags & IFF_LOOPBACK)))
			continue;
		for (k = 0; k < per_if && ret == 0; k++) {
			if (tcp_nports == TCP_MAX_PORTS) {
				TCP_LOG(WARNING, "%u ports at most: %s gets fewer",
					TCP_MAX_PORTS, i->ifa_name);
				break;
			}
			ret = port_new(pmd, i, k, conns, slice_kb);
			n += ret == 0;
		}
	}
	freeifaddrs(ifa);
	if (n == 0)
		TCP_LOG(NOTICE, "no allowed interface with an IPv4 address: no tcp port");
	return ret == -ENOSPC ? 0 : ret;
}

static int
tcp_start(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	struct epoll_event ev = { .events = EPOLLIN };
	socklen_t sl = sizeof(tp->addr);
	int one = 1;

	tp->timeout_tsc = rte_get_tsc_hz() / 1000 * kvt_pmd_env()->timeout_ms;
	tp->stall_tsc = tp->timeout_tsc / 4;
	tp->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tp->lfd < 0)
		return -errno;
	setsockopt(tp->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(tp->lfd, (struct sockaddr *)&tp->addr, sizeof(tp->addr)) != 0 ||
	    listen(tp->lfd, 256) != 0 ||
	    getsockname(tp->lfd, (struct sockaddr *)&tp->addr, &sl) != 0) {
		TCP_LOG(ERR, "port %s: cannot listen: %s", port->name, strerror(errno));
		return -errno;
	}
	tp->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (tp->epfd < 0)
		return -errno;
	ev.data.ptr = NULL;	/* NULL: the listening socket */
	epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->lfd, &ev);
	/* The urgent lanes wait in a set of their own, so a poll finds
	 * them with one call between two data sockets; the set sits in
	 * epfd, which is what wakes a waiting lcore. */
	tp->uepfd = epoll_create1(EPOLL_CLOEXEC);
	if (tp->uepfd < 0)
		return -errno;
	ev.data.ptr = &tp->uepfd;
	if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->uepfd, &ev) != 0)
		return -errno;
	return 0;
}

/* ---- memory, endpoints, connections (control path) ---- */

static int
tcp_mem_register(struct kvt_port *port, struct kvt_lmem *m)
{
	RTE_SET_USED(port);
	return m->loc.type == KVT_LOC_CPU ? 0 : -ENOTSUP;
}

static int
tcp_mem_export(struct kvt_port *port, const struct kvt_lmem *m,
	       struct kvt_buf *key)
{
	RTE_SET_USED(port);
	RTE_SET_USED(m);
	RTE_SET_USED(key);
	return 0;	/* the target checks addresses itself: no key */
}

static int
tcp_rmem_import(struct kvt_conn *c, struct kvt_rmem *rm, const uint8_t *key,
		size_t len)
{
	RTE_SET_USED(c);
	RTE_SET_USED(key);
	RTE_SET_USED(len);
	return rm->loc.type == KVT_LOC_CPU ? 0 : -ENOTSUP;
}

static int
tcp_endpoint(struct kvt_port *port, struct kvt_buf *ep)
{
	struct tcp_port *tp = port->priv;
	struct tcp_ep e = {
		.ip = tp->addr.sin_addr.s_addr,
		.port = tp->addr.sin_port,
		.prefix = tp->prefix,
	};

	return kvt_buf_put(ep, &e, sizeof(e));
}

static void
tcp_stop(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	struct tcp_sock *s;
	struct tcp_conn *c;
	unsigned int i;

	/* Every socket goes: its slices fail here rather than move to a
	 * sibling, and its connection forgets it (a peer closed after the
	 * ports stopped detaches what is left). */
	while ((s = tp->socks) != NULL) {
		c = s->conn;
		for (i = 0; c != NULL && i < c->nsocks; i++)
			if (c->socks[i] == s)
				tcp_conn_sock_del(c, i);
		s->conn = NULL;
		tcp_sock_close(port, s, -ECANCELED);
	}
}

static void
tcp_remove(struct kvt_port *port)
{
	struct tcp_port *tp = port->priv;
	unsigned int i;

	for (i = 0; i < tcp_nports; i++)
		if (tcp_ports[i] == tp)
			tcp_ports[i] = tcp_ports[--tcp_nports];

	if (tp->lfd >= 0)
		close(tp->lfd);
	if (tp->uepfd >= 0)
		close(tp->uepfd);
	if (tp->epfd >= 0)
		close(tp->epfd);
	pthread_mutex_destroy(&tp->lock);
	free(tp);
}

static const struct kvt_pmd_ops tcp_ops = {
	.flags = KVT_PMD_F_ONCE | KVT_PMD_F_SYSCALLS,
	.rank = 10,
	.probe = tcp_probe,
	.start = tcp_start,
	.stop = tcp_stop,
	.remove = tcp_remove,
	.submit = tcp_submit,
	.poll = tcp_poll,
	.idle = tcp_idle,
	.mem_register = tcp_mem_register,
	.mem_export = tcp_mem_export,
	.endpoint = tcp_endpoint,
	.ctl_tick = tcp_ctl_tick,
	.conn_open = tcp_conn_open,
	.conn_accept = tcp_conn_accept,
	.conn_ready = tcp_conn_ready,
	.conn_close = tcp_conn_close,
	.conn_msg = tcp_conn_msg,
	.rmem_import = tcp_rmem_import,
};

KVT_PMD_REGISTER(tcp, tcp_ops);

