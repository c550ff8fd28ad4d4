/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * PMD registry and ports: which transports are enabled, the ports they
 * create, and which lcore owns each port.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rte_errno.h>
#include <rte_lcore.h>

#include "kvt_private.h"

static struct kvt_pmd *kvt_pmds;

void
kvt_pmd_register(struct kvt_pmd *pmd)
{
	const struct kvt_pmd_ops *o = pmd->ops;
	struct kvt_pmd **pp = &kvt_pmds;

	if (o->probe == NULL || o->submit == NULL || o->poll == NULL ||
	    ((o->conn_open != NULL || o->conn_accept != NULL) &&
	     o->conn_close == NULL)) {
		RTE_LOG(ERR, USER1, "kvt: transport %s lacks a mandatory op (probe, submit, poll, conn_close): not registered\n",
			pmd->name);
		return;
	}
	/* Keep constructor order stable: append. */
	while (*pp != NULL)
		pp = &(*pp)->next;
	pmd->next = NULL;
	*pp = pmd;
}

static const struct kvt_pmd *
pmd_find(const char *name, size_t len)
{
	const struct kvt_pmd *p;

	for (p = kvt_pmds; p != NULL; p = p->next)
		if (strlen(p->name) == len && strncmp(p->name, name, len) == 0)
			return p;
	return NULL;
}

struct kvt_port *
kvt_port_create(const struct kvt_pmd *pmd, const char *name, int numa,
		void *priv)
{
	struct kvt_engine *e = kvt_eng;
	struct kvt_port *p;

	if (pmd == NULL || name == NULL || strlen(name) >= sizeof(p->name)) {
		rte_errno = EINVAL;
		return NULL;
	}
	if (e->nports == KVT_MAX_PORTS) {
		KVT_LOG(ERR, "port %s: more than %d ports", name, KVT_MAX_PORTS);
		rte_errno = ENOSPC;
		return NULL;
	}
	p = aligned_alloc(RTE_CACHE_LINE_SIZE, sizeof(*p));
	if (p == NULL) {
		rte_errno = ENOMEM;
		return NULL;
	}
	memset(p, 0, sizeof(*p));
	p->id = (uint16_t)e->nports;
	strcpy(p->name, name);
	p->pmd = pmd;
	p->numa = numa;
	p->priv = priv;
	p->done_tail = &p->done_head;
	e->ports[e->nports++] = p;
	KVT_LOG(DEBUG, "port %u: %s (%s, numa %d)", p->id, name, pmd->name, numa);
	return p;
}

struct kvt_port *
kvt_port_get(unsigned int id)
{
	if (kvt_eng == NULL || id >= kvt_eng->nports)
		return NULL;
	return kvt_eng->ports[id];
}

static int
probe_one(const struct kvt_pmd *pmd, const char *args)
{
	unsigned int before = kvt_eng->nports;
	int ret;

	ret = pmd->ops->probe(pmd, args);
	if (ret < 0) {
		KVT_LOG(ERR, "transport %s: probe failed: %s", pmd->name,
			strerror(-ret));
		return ret;
	}
	KVT_LOG(INFO, "transport %s: %u port(s)", pmd->name,
		kvt_eng->nports - before);
	return 0;
}

static int
probed(const struct kvt_pmd *pmd)
{
	unsigned int i;

	for (i = 0; i < kvt_eng->nports; i++)
		if (kvt_eng->ports[i]->pmd == pmd)
			return 1;
	return 0;
}

/* Does a port carry interface or NIC `name` ("tcp:eth0", "rdma:mlx5_0.2")? */
static int
port_is_nic(const struct kvt_port *p, const char *name, size_t len)
{
	const char *n = strchr(p->name, ':');

	n = n != NULL ? n + 1 : p->name;
	return strncmp(n, name, len) == 0 && (n[len] == '\0' || n[len] == '.');
}

/* Every name of --kvt-nic must have become a port: a typo, or a NIC that
 * is down, would otherwise quietly leave traffic on the others. */
static int
nic_list_check(const char *list)
{
	const char *p = list;
	unsigned int i;
	size_t len;

	while (p != NULL && *p != '\0') {
		len = strcspn(p, ",");
		for (i = 0; i < kvt_eng->nports; i++)
			if (port_is_nic(kvt_eng->ports[i], p, len))
				break;
		if (len > 0 && i == kvt_eng->nports) {
			KVT_LOG(ERR, "--kvt-nic %.*s: no such interface or RDMA NIC, or it is down, or its transport is not enabled",
				(int)len, p);
			return -ENODEV;
		}
		p += len + (p[len] == ',');
	}
	return 0;
}

int
kvt_pmds_env_check(const struct kvt_pmd_env *env)
{
	const struct kvt_pmd *pmd;
	char err[256];
	int ret;

	for (pmd = kvt_pmds; pmd != NULL; pmd = pmd->next) {
		if (pmd->ops->env_check == NULL)
			continue;
		err[0] = '\0';
		ret = pmd->ops->env_check(env, err, sizeof(err));
		if (ret < 0) {
			KVT_LOG(ERR, "%s", err[0] != '\0' ? err : strerror(-ret));
			return ret;
		}
	}
	return 0;
}

int
kvt_ports_probe(void)
{
	const struct kvt_opts *o = &kvt_eng->o;
	const struct kvt_pmd *pmd;
	unsigned int i;
	const char *a, *comma;
	int ret;

	if (o->n_pmd_args == 0) {
		for (pmd = kvt_pmds; pmd != NULL; pmd = pmd->next) {
			if (pmd->ops->flags & KVT_PMD_F_EXPLICIT)
				continue;
			/* Without an explicit list a failing transport is
			 * skipped, not fatal: the others still run.  Bad
			 * arguments still are. */
			if (probe_one(pmd, "") == -EINVAL)
				return -EINVAL;
		}
	} else {
		for (i = 0; i < o->n_pmd_args; i++) {
			a = o->pmd_args[i];
			comma = strchr(a, ',');
			pmd = pmd_find(a, comma ? (size_t)(comma - a) : strlen(a));
			if (pmd == NULL) {
				KVT_LOG(ERR, "unknown transport in --kvt-pmd %s", a);
				return -EINVAL;
			}
			if (probed(pmd)) {
				KVT_LOG(ERR, "--kvt-pmd names transport %s twice", pmd->name);
				return -EINVAL;
			}
			ret = probe_one(pmd, comma ? comma + 1 : "");
			if (ret < 0)
				return ret;
		}
	}
	if (kvt_eng->nports == 0) {
		KVT_LOG(ERR, "no transport created a port");
		return -ENODEV;
	}
	return nic_list_check(o->nic);
}

/*
 * Give each port to an lcore: prefer lcores on the port's NUMA node, and
 * among those the one with the fewest ports.
 */
int
kvt_ports_assign(void)
{
	struct kvt_engine *e = kvt_eng;
	struct kvt_lcore *best, *lc;
	struct kvt_port *p;
	unsigned int i, j;
	int same, best_same;

	if (e->nlcores == 0) {
		KVT_LOG(ERR, "no worker lcore for the ports (give EAL a spare lcore, or --kvt-lcores)");
		return -ENODEV;
	}
	for (i = 0; i < e->nports; i++) {
		p = e->ports[i];
		best = NULL;
		best_same = 0;
		for (j = 0; j < e->nlcores; j++) {
			lc = &e->lcores[j];
			same = p->numa < 0 ||
				(int)rte_lcore_to_socket_id(lc->id) == p->numa;
			if (best == NULL || same > best_same ||
			    (same == best_same && lc->nports < best->nports)) {
				best = lc;
				best_same = same;
			}
		}
		best->ports[best->nports++] = p;
		p->lcore = best->id;
		KVT_LOG(INFO, "port %s on lcore %u", p->name, best->id);
	}
	return 0;
}

int
kvt_ports_start(void)
{
	struct kvt_engine *e = kvt_eng;
	struct kvt_port *p;
	unsigned int i;
	int ret;

	for (i = 0; i < e->nports; i++) {
		p = e->ports[i];
		if (p->pmd->ops->start == NULL)
			continue;
		ret = p->pmd->ops->start(p);
		if (ret < 0) {
			KVT_LOG(ERR, "port %s: start failed: %s", p->name,
				strerror(-ret));
			return ret;
		}
	}
	return 0;
}

void
kvt_ports_remove(void)
{
	struct kvt_engine *e = kvt_eng;
	unsigned int i;

	for (i = 0; i < e->nports; i++) {
		if (e->ports[i]->pmd->ops->remove != NULL)
			e->ports[i]->pmd->ops->remove(e->ports[i]);
		free(e->ports[i]);
		e->ports[i] = NULL;
	}
	e->nports = 0;
}

const struct kvt_pmd_env *
kvt_pmd_env(void)
{
	return kvt_eng != NULL ? &kvt_eng->env : NULL;
}

/* The highest-ranked ports of mask: those that carry a request's data
 * (the others stand by for memory these cannot reach). */
uint32_t
kvt_best_ports(uint32_t mask)
{
	int best = INT32_MIN, r;
	uint32_t out = 0, m;

	for (m = mask; m != 0; m &= m - 1) {
		r = kvt_eng->ports[__builtin_ctz(m)]->pmd->ops->rank;
		if (r > best) {
			best = r;
			out = 0;
		}
		if (r == best)
			out |= 1u << __builtin_ctz(m);
	}
	return out;
}

unsigned int
kvt_port_count(void)
{
	return kvt_eng != NULL ? kvt_eng->nports : 0;
}

int
kvt_port_info(unsigned int port, struct kvt_port_info *info)
{
	struct kvt_port *p;

	if (kvt_eng == NULL)
		return -ENODEV;
	p = kvt_port_get(port);
	if (p == NULL || info == NULL)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", p->name);
	snprintf(info->pmd, sizeof(info->pmd), "%s", p->pmd->name);
	info->lcore = p->lcore;
	info->numa = p->numa;
	return 0;
}

int
kvt_port_stats(unsigned int port, struct kvt_port_stats *st)
{
	struct kvt_port *p;

	if (kvt_eng == NULL)
		return -ENODEV;
	p = kvt_port_get(port);
	if (p == NULL || st == NULL)
		return -EINVAL;
	/* Single writer (the lcore); 64-bit loads do not tear on the
	 * targets kvt supports. */
	st->write_bytes = __atomic_load_n(&p->st.write_bytes, __ATOMIC_RELAXED);
	st->read_bytes = __atomic_load_n(&p->st.read_bytes, __ATOMIC_RELAXED);
	st->served_bytes = __atomic_load_n(&p->st.served_bytes, __ATOMIC_RELAXED);
	st->slices = __atomic_load_n(&p->st.slices, __ATOMIC_RELAXED);
	st->errors = __atomic_load_n(&p->st.errors, __ATOMIC_RELAXED);
	st->retries = __atomic_load_n(&p->st.retries, __ATOMIC_RELAXED);
	return 0;
}
