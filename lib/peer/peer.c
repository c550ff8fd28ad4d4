/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Peers we open: the initiator side of the handshake, the connections
 * each port makes to the peer, and the peer's exported regions as we
 * imported them.
 *
 * Handshake (all frames length-prefixed, see wire.c):
 *   HELLO    ->             name, secret, host id, pid
 *            <- WELCOME     name, host id, pid, endpoints, regions
 *                 (or REFUSE with an errno and a reason)
 *   CONN_REQ ->             per local port that reaches one of its
 *            <- CONN_REP    endpoints: PMD blobs both ways
 * After that the control thread owns the socket: pings, region updates.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>

#include <rte_errno.h>

#include "kvt_private.h"
#include "rangemap.h"

#define KVT_PEER_MAGIC 0x6b767065u

int
kvt_peer_valid(const struct kvt_peer *p)
{
	return p != NULL && p->magic == KVT_PEER_MAGIC;
}

void
kvt_conn_set_dead(struct kvt_conn *c)
{
	__atomic_store_n(&c->dead, 1, __ATOMIC_RELEASE);
}

void
kvt_conn_set_down(struct kvt_conn *c, int down)
{
	struct kvt_peer *p = c->accepted ? NULL : c->owner;
	uint32_t bit = 1u << c->port->id;

	__atomic_store_n(&c->down, down ? 1u : 0u, __ATOMIC_RELEASE);
	if (p == NULL)
		return;
	if (down)
		__atomic_fetch_or(&p->down_mask, bit, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&p->down_mask, ~bit, __ATOMIC_RELEASE);
}

uint64_t
kvt_conn_heard_us(const struct kvt_conn *c)
{
	if (c->accepted)
		return __atomic_load_n(&((const struct kvt_session *)c->owner)->last_rx_us,
				       __ATOMIC_RELAXED);
	return __atomic_load_n(&((const struct kvt_peer *)c->owner)->last_pong_us,
			       __ATOMIC_RELAXED);
}

void
kvt_peer_lost(struct kvt_peer *p, int err)
{
	uint32_t up = KVT_PEER_UP;
	unsigned int i;

	if (!__atomic_compare_exchange_n(&p->state, &up, KVT_PEER_DEAD, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	p->err = err;
	for (i = 0; i < KVT_MAX_PORTS; i++)
		if (p->conn[i] != NULL)
			kvt_conn_set_dead(p->conn[i]);
	KVT_LOG(ERR, "peer %s (%s) lost: %s", p->info.name, p->addr,
		strerror(-err));
}

/* ---- imported regions ---- */

static void
rimp_release(struct kvt_peer *p, struct kvt_rimp *ri)
{
	struct kvt_conn *c;
	unsigned int i;

	for (i = 0; i < KVT_MAX_PORTS; i++) {
		c = p->conn[i];
		if (c != NULL && (ri->rm.port_mask & (1u << i)) &&
		    c->port->pmd->ops->rmem_release != NULL)
			c->port->pmd->ops->rmem_release(c, &ri->rm);
	}
	kvt_claims_free(ri->claims);
	free(ri);
}

static struct kvt_rimp *
rimp_import(struct kvt_peer *p, const uint8_t *val, size_t len)
{
	struct kvt_wire_region wr;
	struct kvt_rimp *ri;
	struct kvt_conn *c;
	unsigned int i, k;
	int ret;

	if (kvt_wire_decode_region(val, len, &wr) < 0) {
		KVT_LOG(ERR, "peer %s: malformed region", p->info.name);
		return NULL;
	}
	ri = calloc(1, sizeof(*ri));
	if (ri == NULL)
		return NULL;
	ri->rm.base = wr.base;
	ri->rm.len = wr.len;
	ri->rm.flags = wr.flags;
	ri->rm.fence_slots = wr.fence_slots;
	ri->rm.loc = wr.loc;
	for (i = 0; i < KVT_MAX_PORTS; i++) {
		c = p->conn[i];
		if (c == NULL || c->port->pmd->ops->rmem_import == NULL)
			continue;
		for (k = 0; k < wr.nkeys; k++) {
			if (wr.keys[k].port_id != c->remote_port)
				continue;
			ret = c->port->pmd->ops->rmem_import(c, &ri->rm,
							     wr.keys[k].blob,
							     wr.keys[k].len);
			if (ret == 0)
				ri->rm.port_mask |= 1u << i;
			else if (ret != -ENOTSUP)
				KVT_LOG(WARNING, "peer %s: region %#" PRIx64 " not reachable through %s: %s",
					p->info.name, wr.base, c->port->name,
					strerror(-ret));
			break;
		}
	}
	return ri;
}

/* Add an import to p's regions.  A region announced twice (it raced the
 * WELCOME) or overlapping one already imported replaces nothing: the
 * first import stays. */
static int
regions_add(struct kvt_peer *p, struct kvt_rimp *ri)
{
	int ret = kvt_rangemap_insert(&p->regions, ri->rm.base, ri->rm.len, ri);

	if (ret == -EEXIST) {
		KVT_LOG(DEBUG, "peer %s: region %#" PRIx64 "+%" PRIu64 " overlaps one imported: kept the first",
			p->info.name, ri->rm.base, ri->rm.len);
		ret = 0;
	}
	if (ret < 0 || kvt_rangemap_find(&p->regions, ri->rm.base, 1) != ri)
		rimp_release(p, ri);
	return ret;
}

int
kvt_peer_region_update(struct kvt_peer *p, int add, const uint8_t *val,
		       size_t len)
{
	struct kvt_tlv t = { val, len };
	struct kvt_rimp *ri;
	const uint8_t *v;
	void *gone;
	uint64_t base, seq = 0;
	uint32_t l;
	uint16_t tag;

	if (kvt_tlv_next(&t, &tag, &v, &l) <= 0)
		return -EPROTO;
	if (add) {
		if (tag != KVT_T_REGION)
			return -EPROTO;
		ri = rimp_import(p, v, l);
		if (ri == NULL)
			return -EPROTO;
		return regions_add(p, ri);
	}
	if (tag != KVT_T_BASE || kvt_tlv_u64(v, l, &base) < 0)
		return -EPROTO;
	/* Its number, which REGION_GONE answers (an older peer sends none). */
	if (kvt_tlv_next(&t, &tag, &v, &l) > 0 && tag == KVT_T_SEQ &&
	    kvt_tlv_u64(v, l, &seq) == 0 && seq > p->del_seen)
		p->del_seen = seq;
	/* Once removed from the map (which waits out the readers that may
	 * have found it), no new request takes it. */
	if (kvt_rangemap_remove(&p->regions, base, &gone) < 0)
		return 0;	/* never imported: nothing to do */
	ri = gone;
	/* Submissions hold regions by reference: it goes when they are
	 * done (kvt_peer_regions_release). */
	ri->del_seq = seq;
	ri->retired_next = p->retired;
	p->retired = ri;
	return 0;
}

uint64_t
kvt_peer_regions_release(struct kvt_peer *p)
{
	struct kvt_rimp **pp = &p->retired, *ri;
	uint64_t upto = p->del_seen;

	while ((ri = *pp) != NULL) {
		if (__atomic_load_n(&ri->refs, __ATOMIC_ACQUIRE) == 0) {
			*pp = ri->retired_next;
			rimp_release(p, ri);
			continue;
		}
		if (ri->del_seq != 0 && ri->del_seq <= upto)
			upto = ri->del_seq - 1;
		pp = &ri->retired_next;
	}
	return upto;
}

struct kvt_rimp *
kvt_peer_find_region(struct kvt_peer *p, uint64_t addr, uint64_t len)
{
	if (len == 0)
		return NULL;
	return kvt_rangemap_find(&p->regions, addr, len);
}

/* ---- the handshake ---- */

static int
connect_to(const struct sockaddr_in *sa, uint64_t deadline)
{
	int fd, err, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0)
		err = errno == EINPROGRESS ? kvt_connect_wait(fd, deadline) :
					     -errno;
	else
		err = 0;
	if (err != 0) {
		close(fd);
		return err;
	}
	return fd;
}

static int
send_hello(int fd, uint64_t deadline)
{
	struct kvt_engine *e = kvt_eng;
	struct kvt_buf b = { 0 };
	int ret;

	ret = kvt_wire_begin(&b, KVT_W_HELLO);
	ret |= kvt_wire_put_str(&b, KVT_T_NAME, e->o.name);
	if (e->o.secret[0] != '\0')
		ret |= kvt_wire_put_str(&b, KVT_T_SECRET, e->o.secret);
	ret |= kvt_wire_put(&b, KVT_T_HOST_ID, e->env.host_id,
			    sizeof(e->env.host_id));
	ret |= kvt_wire_put_u64(&b, KVT_T_PID, (uint64_t)getpid());
	ret |= kvt_wire_end(&b);
	ret = ret != 0 ? -ENOMEM : kvt_wire_send(fd, &b, deadline);
	kvt_buf_free(&b);
	return ret;
}

/* Turn a REFUSE frame into an errno, logging the peer's reason. */
static int
refused(const char *addr, const uint8_t *p, size_t len)
{
	struct kvt_tlv t = { p, len };
	char reason[256] = "no reason given";
	const uint8_t *v;
	uint64_t err = EPROTO;
	uint32_t l;
	uint16_t tag;

	while (kvt_tlv_next(&t, &tag, &v, &l) > 0) {
		if (tag == KVT_T_ERRNO)
			kvt_tlv_u64(v, l, &err);
		else if (tag == KVT_T_REASON)
			kvt_tlv_str(v, l, reason, sizeof(reason));
	}
	KVT_LOG(ERR, "peer %s refused us: %s", addr, reason);
	return err == EACCES ? -EACCES : -EPROTO;
}

/* One CONN_REQ / CONN_REP round trip for local port `port`. */
static int
connect_port(struct kvt_peer *p, struct kvt_port *port,
	     const struct kvt_wire_hello *w, struct kvt_buf *b,
	     uint64_t deadline)
{
	struct kvt_endpoint eps[KVT_WIRE_MAX_EPS];
	struct kvt_buf req = { 0 };
	struct kvt_conn *c = NULL;
	const uint8_t *blob = NULL;
	uint64_t err = 0;
	uint32_t blen = 0, l;
	const uint8_t *v;
	struct kvt_tlv t;
	unsigned int i, n = 0;
	uint16_t tag;
	int ret;

	for (i = 0; i < w->neps; i++)
		if (strcmp(w->eps[i].pmd, port->pmd->name) == 0)
			eps[n++] = w->eps[i].ep;
	if (n == 0 || port->pmd->ops->conn_open == NULL)
		return -ENOTSUP;
	ret = port->pmd->ops->conn_open(port, &p->info, eps, n, &req, &c);
	if (ret < 0)
		goto out;
	c->port = port;
	c->info = p->info;
	c->owner = p;
	c->accepted = 0;
	ret = kvt_wire_begin(b, KVT_W_CONN_REQ);
	ret |= kvt_wire_put_u64(b, KVT_T_PORT_ID, c->remote_port);
	ret |= kvt_wire_put_u64(b, KVT_T_FROM_PORT, port->id);
	ret |= kvt_wire_put(b, KVT_T_BLOB, req.data, (uint32_t)req.len);
	ret |= kvt_wire_end(b);
	ret = ret != 0 ? -ENOMEM : kvt_wire_send(p->fd, b, deadline);
	if (ret == 0)
		ret = kvt_wire_recv(p->fd, b, KVT_WIRE_MAX, deadline);
	if (ret >= 0 && ret != KVT_W_CONN_REP)
		ret = -EPROTO;
	if (ret < 0)
		goto close_conn;
	t.p = b->data + KVT_WIRE_HDR;
	t.left = b->len - KVT_WIRE_HDR;
	while (kvt_tlv_next(&t, &tag, &v, &l) > 0) {
		if (tag == KVT_T_ERRNO)
			kvt_tlv_u64(v, l, &err);
		else if (tag == KVT_T_BLOB) {
			blob = v;
			blen = l;
		}
	}
	if (err != 0 || blob == NULL) {
		ret = err != 0 ? -(int)RTE_MIN(err, 4095ull) : -EPROTO;
		goto close_conn;
	}
	ret = port->pmd->ops->conn_ready != NULL ?
		port->pmd->ops->conn_ready(c, blob, blen) : 0;
	if (ret < 0)
		goto close_conn;
	p->conn[port->id] = c;
	p->conn_mask |= 1u << port->id;
	goto out;

close_conn:
	port->pmd->ops->conn_close(c);
out:
	kvt_buf_free(&req);
	return ret;
}

static int
import_regions(struct kvt_peer *p, const struct kvt_wire_hello *w)
{
	struct kvt_tlv t = { w->regions, w->regions_len };
	struct kvt_rimp *ri;
	const uint8_t *v;
	uint32_t l;
	uint16_t tag;
	int ret;

	while (kvt_tlv_next(&t, &tag, &v, &l) > 0) {
		ri = rimp_import(p, v, l);
		if (ri == NULL)
			return -EPROTO;
		ret = regions_add(p, ri);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static int
release_import(void *ri, void *p)
{
	rimp_release(p, ri);
	return 0;
}

static void
peer_free(struct kvt_peer *p)
{
	struct kvt_conn *c;
	unsigned int i;

	kvt_rangemap_walk(&p->regions, release_import, p);
	kvt_rangemap_clear(&p->regions);
	while (p->retired != NULL) {
		struct kvt_rimp *ri = p->retired;

		p->retired = ri->retired_next;
		rimp_release(p, ri);
	}
	for (i = 0; i < KVT_MAX_PORTS; i++) {
		c = p->conn[i];
		if (c == NULL)
			continue;
		kvt_conn_set_dead(c);
		c->port->pmd->ops->conn_close(c);
	}
	if (p->fd >= 0)
		close(p->fd);
	kvt_buf_free(&p->rx);
	p->magic = 0;
	free(p);
}

static int
handshake(struct kvt_peer *p, uint64_t deadline)
{
	struct kvt_wire_hello *w;
	struct kvt_buf b = { 0 };
	unsigned int i;
	int ret;

	w = malloc(sizeof(*w));
	if (w == NULL)
		return -ENOMEM;
	ret = send_hello(p->fd, deadline);
	if (ret == 0)
		ret = kvt_wire_recv(p->fd, &b, KVT_WIRE_MAX, deadline);
	if (ret == KVT_W_REFUSE) {
		ret = refused(p->addr, b.data + KVT_WIRE_HDR, b.len - KVT_WIRE_HDR);
		goto out;
	}
	if (ret >= 0 && ret != KVT_W_WELCOME)
		ret = -EPROTO;
	if (ret >= 0)
		ret = kvt_wire_decode_hello(b.data + KVT_WIRE_HDR,
					    b.len - KVT_WIRE_HDR, w);
	if (ret < 0)
		goto out;
	if (kvt_eng->o.secret[0] != '\0' && !kvt_wire_secret_ok(w, kvt_eng->o.secret)) {
		KVT_LOG(ERR, "peer %s did not prove the shared secret", p->addr);
		ret = -EACCES;
		goto out;
	}
	kvt_wire_peer_info(w, kvt_eng->env.host_id, &p->info);
	for (i = 0; i < kvt_port_count(); i++) {
		ret = connect_port(p, kvt_port_get(i), w, &b, deadline);
		if (ret < 0 && ret != -ENOTSUP)
			KVT_LOG(WARNING, "peer %s: port %s cannot connect: %s",
				p->addr, kvt_port_get(i)->name, strerror(-ret));
		if (ret == -ETIMEDOUT || ret == -ECONNRESET)
			goto out;
	}
	ret = import_regions(p, w);
	if (ret == 0 && p->conn_mask == 0) {
		KVT_LOG(ERR, "peer %s: no transport reaches it", p->addr);
		ret = -EHOSTUNREACH;
	} else if (ret == 0 &&
		   (p->conn_mask & ~__atomic_load_n(&p->down_mask, __ATOMIC_ACQUIRE)) == 0) {
		KVT_LOG(ERR, "peer %s: none of its paths connects now", p->addr);
		ret = -EHOSTUNREACH;
	}
out:
	kvt_buf_free(&b);
	free(w);
	return ret;
}

/* Append the names of the ports of mask to list ("a, b"). */
static size_t
port_names(char *list, size_t len, size_t off, uint32_t mask, uint32_t down)
{
	unsigned int i;
	int n;

	for (i = 0; i < kvt_port_count() && off < len; i++) {
		if (!(mask & (1u << i)))
			continue;
		n = snprintf(list + off, len - off, "%s%s%s",
			     (mask & ((1u << i) - 1)) ? ", " : "",
			     kvt_port_get(i)->name,
			     (down & (1u << i)) ? " (down)" : "");
		if (n > 0)
			off += (size_t)n;
	}
	return off;
}

/*
 * Say which local ports carry data to a new peer, and which only stand
 * by: a KV network that a backend interface (or a single NIC) carries
 * is seen here, before it costs anything (the idle-NIC failure of DESIGN
 * §1).  Data goes over the highest-ranked ports that reach the memory
 * (shm before tcp, for one): the rest carry what those cannot reach.
 */
static void
log_paths(const struct kvt_peer *p)
{
	uint32_t down = __atomic_load_n(&p->down_mask, __ATOMIC_ACQUIRE);
	uint32_t best = kvt_best_ports(p->conn_mask);
	char list[512] = "";
	size_t off;

	off = port_names(list, sizeof(list), 0, best, down);
	if ((p->conn_mask & ~best) != 0 && off < sizeof(list)) {
		off += (size_t)snprintf(list + off, sizeof(list) - off,
					"; standing by for memory %s cannot reach: ",
					__builtin_popcount(best) > 1 ? "those" : "it");
		port_names(list, sizeof(list), off, p->conn_mask & ~best, down);
	}
	KVT_LOG(NOTICE, "peer %s (%s) open: %u region(s); data over %s",
		p->info.name, p->addr, p->regions.n, list);
}

static struct kvt_peer *
cached(const char *addr)
{
	struct kvt_peer *p;

	for (p = kvt_eng->peers; p != NULL; p = p->next) {
		if (strcmp(p->addr, addr) == 0 &&
		    __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == KVT_PEER_UP) {
			__atomic_fetch_add(&p->refs, 1, __ATOMIC_RELAXED);
			return p;
		}
	}
	return NULL;
}

struct kvt_peer *
kvt_peer_open(const char *addr, unsigned int timeout_ms)
{
	struct sockaddr_in sa;
	struct kvt_peer *p;
	char where[128];
	uint64_t deadline;
	int ret, by_name = 0;

	if (kvt_eng == NULL) {
		rte_errno = ENODEV;
		return NULL;
	}
	if (addr == NULL || strlen(addr) >= sizeof(p->addr)) {
		KVT_LOG(ERR, "peer address: expected host:port or a name");
		rte_errno = EINVAL;
		return NULL;
	}
	deadline = kvt_now_us() +
		(uint64_t)(timeout_ms ? timeout_ms : kvt_eng->o.timeout_ms) * 1000;
	/* An open peer is the same handle, whatever etcd says now. */
	pthread_mutex_lock(&kvt_eng->ctl_lock);
	p = cached(addr);
	pthread_mutex_unlock(&kvt_eng->ctl_lock);
	if (p != NULL)
		return p;
	if (kvt_parse_addr(addr, &sa) < 0 || sa.sin_port == 0) {
		/* Not host:port: a name, when a metadata service is set. */
		if (!kvt_meta_enabled()) {
			KVT_LOG(ERR, "peer address '%s': expected host:port (names need --kvt-meta etcd://...)",
				addr);
			rte_errno = EINVAL;
			return NULL;
		}
		ret = kvt_meta_resolve(addr, where, sizeof(where), deadline);
		if (ret == 0 && (kvt_parse_addr(where, &sa) < 0 || sa.sin_port == 0))
			ret = -EPROTO;
		if (ret < 0) {
			rte_errno = -ret;
			return NULL;
		}
		by_name = 1;
	}
	p = calloc(1, sizeof(*p));
	if (p == NULL) {
		rte_errno = ENOMEM;
		return NULL;
	}
	p->magic = KVT_PEER_MAGIC;
	p->refs = 1;
	p->state = KVT_PEER_UP;
	strcpy(p->addr, addr);
	memcpy(&p->info.ctl_addr, &sa, sizeof(sa));
	p->fd = connect_to(&sa, deadline);
	if (p->fd < 0) {
		ret = p->fd;
		KVT_LOG(ERR, "peer %s: cannot connect: %s", addr, strerror(-ret));
		goto free_peer;
	}
	ret = handshake(p, deadline);
	if (ret < 0) {
		KVT_LOG(ERR, "peer %s: handshake failed: %s", addr, strerror(-ret));
		goto free_peer;
	}
	/* A stale etcd entry can point at another engine's address. */
	if (by_name && strcmp(p->info.name, addr) != 0) {
		KVT_LOG(ERR, "peer %s: the engine at %s is %s, not %s (a stale etcd entry)",
			addr, where, p->info.name, addr);
		ret = -ESTALE;
		goto free_peer;
	}
	pthread_mutex_lock(&kvt_eng->ctl_lock);
	ret = kvt_eng->ctl_hooks != NULL ? kvt_eng->ctl_hooks->adopt_peer(p) :
		-ENOTCONN;
	if (ret == 0) {
		p->next = kvt_eng->peers;
		kvt_eng->peers = p;
	}
	pthread_mutex_unlock(&kvt_eng->ctl_lock);
	if (ret < 0)
		goto free_peer;
	log_paths(p);
	return p;

free_peer:
	peer_free(p);
	rte_errno = -ret;
	return NULL;
}

static void
peer_unlink(struct kvt_peer *p)
{
	struct kvt_peer **pp;

	for (pp = &kvt_eng->peers; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

int
kvt_peer_close(struct kvt_peer *p)
{
	if (kvt_eng == NULL)
		return -ENODEV;
	if (!kvt_peer_valid(p))
		return -EINVAL;
	pthread_mutex_lock(&kvt_eng->ctl_lock);
	if (p->refs > 1) {
		p->refs--;
		pthread_mutex_unlock(&kvt_eng->ctl_lock);
		return 0;
	}
	if (__atomic_load_n(&p->inflight, __ATOMIC_ACQUIRE) != 0) {
		pthread_mutex_unlock(&kvt_eng->ctl_lock);
		KVT_LOG(ERR, "close peer %s: submissions in flight", p->info.name);
		return -EBUSY;
	}
	peer_unlink(p);
	__atomic_store_n(&p->state, KVT_PEER_CLOSED, __ATOMIC_RELEASE);
	if (kvt_eng->ctl_hooks != NULL)
		kvt_eng->ctl_hooks->forget_peer(p);
	pthread_mutex_unlock(&kvt_eng->ctl_lock);
	peer_free(p);
	return 0;
}

void
kvt_peers_close_all(void)
{
	struct kvt_peer *p;

	while ((p = kvt_eng->peers) != NULL) {
		kvt_eng->peers = p->next;
		peer_free(p);
	}
}

struct regions_out {
	struct kvt_region *out;
	unsigned int max;
	unsigned int n;
};

static int
region_out(void *v, void *arg)
{
	const struct kvt_rmem *rm = &((struct kvt_rimp *)v)->rm;
	struct regions_out *o = arg;
	struct kvt_region *r = &o->out[o->n];

	if (o->n++ >= o->max)
		return 0;
	memset(r, 0, sizeof(*r));
	r->base = rm->base;
	r->len = rm->len;
	r->flags = rm->flags & (KVT_MEM_REMOTE_READ | KVT_MEM_REMOTE_WRITE);
	r->fence_slots = rm->fence_slots;
	kvt_loc_str(&rm->loc, r->loc, sizeof(r->loc));
	return 0;
}

int
kvt_peer_regions(struct kvt_peer *p, struct kvt_region *out, unsigned int max)
{
	struct regions_out o = { out, max, 0 };
	unsigned int tok;

	if (kvt_eng == NULL)
		return -ENODEV;
	if (!kvt_peer_valid(p) || (out == NULL && max > 0))
		return -EINVAL;
	if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != KVT_PEER_UP)
		return -ECONNRESET;
	tok = kvt_rcu_read_lock();
	kvt_rangemap_walk(&p->regions, region_out, &o);
	kvt_rcu_read_unlock(tok);
	return (int)o.n;
}

int
kvt_peer_state(struct kvt_peer *p)
{
	if (!kvt_peer_valid(p))
		return -EINVAL;
	return __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == KVT_PEER_UP ?
		0 : -ECONNRESET;
}

int
kvt_peer_stats(struct kvt_peer *p, struct kvt_peer_stats *st)
{
	if (!kvt_peer_valid(p) || st == NULL)
		return -EINVAL;
	st->write_bytes = __atomic_load_n(&p->st.write_bytes, __ATOMIC_RELAXED);
	st->read_bytes = __atomic_load_n(&p->st.read_bytes, __ATOMIC_RELAXED);
	st->errors = __atomic_load_n(&p->st.errors, __ATOMIC_RELAXED);
	return 0;
}
