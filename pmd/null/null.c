/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * null: a port that completes every slice at once without moving a byte.
 * It reaches any peer and any memory, so it measures the pipeline's own
 * cost (submit -> ring -> lcore -> completion) and drives tests of the
 * rings.  Only started when named: --kvt-pmd null[,ports=N].
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvt_pmd_kit.h"

RTE_LOG_REGISTER(null_logtype, kvt.pmd.null, NOTICE);

#define NULL_MAX_PORTS 8

static int
null_probe(const struct kvt_pmd *pmd, const char *args)
{
	return kvt_probe_ports(pmd, args, "null", NULL_MAX_PORTS);
}

static void
null_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		kvt_desc_complete(port, d[i], 0);
}

static unsigned int
null_poll(struct kvt_port *port)
{
	RTE_SET_USED(port);
	return 0;
}

/* Work comes only from submissions. */
static uint64_t
null_idle(struct kvt_port *port, int *fd)
{
	RTE_SET_USED(port);
	*fd = -1;
	return KVT_IDLE_FOREVER;
}

static int
null_mem_register(struct kvt_port *port, struct kvt_lmem *m)
{
	RTE_SET_USED(port);
	RTE_SET_USED(m);
	return 0;
}

static int
null_mem_export(struct kvt_port *port, const struct kvt_lmem *m,
		struct kvt_buf *key)
{
	RTE_SET_USED(port);
	RTE_SET_USED(m);
	RTE_SET_USED(key);
	return 0;
}

static int
null_conn_new(struct kvt_conn **out)
{
	*out = calloc(1, sizeof(**out));
	return *out != NULL ? 0 : -ENOMEM;
}

static int
null_conn_open(struct kvt_port *port, const struct kvt_peer_info *pi,
	       const struct kvt_endpoint *eps, unsigned int neps,
	       struct kvt_buf *req, struct kvt_conn **out)
{
	int ret;

	RTE_SET_USED(pi);
	RTE_SET_USED(req);
	ret = null_conn_new(out);
	if (ret == 0)
		(*out)->remote_port = eps[port->id % neps].port_id;
	return ret;
}

static int
null_conn_accept(struct kvt_port *port, const struct kvt_accept *a,
		 const uint8_t *req, size_t len, struct kvt_buf *rep,
		 struct kvt_conn **out)
{
	int ret;

	RTE_SET_USED(req);
	RTE_SET_USED(len);
	RTE_SET_USED(rep);
	ret = null_conn_new(out);
	if (ret == 0)
		kvt_conn_accept_init(*out, port, a);
	return ret;
}

static void
null_conn_close(struct kvt_conn *c)
{
	free(c);
}

static int
null_rmem_import(struct kvt_conn *c, struct kvt_rmem *rm, const uint8_t *key,
		 size_t len)
{
	RTE_SET_USED(c);
	RTE_SET_USED(rm);
	RTE_SET_USED(key);
	RTE_SET_USED(len);
	return 0;
}

static const struct kvt_pmd_ops null_ops = {
	.flags = KVT_PMD_F_ORDERED | KVT_PMD_F_EXPLICIT,
	.rank = 100,
	.probe = null_probe,
	.submit = null_submit,
	.poll = null_poll,
	.idle = null_idle,
	.mem_register = null_mem_register,
	.mem_export = null_mem_export,
	.conn_open = null_conn_open,
	.conn_accept = null_conn_accept,
	.conn_close = null_conn_close,
	.rmem_import = null_rmem_import,
};

KVT_PMD_REGISTER(null, null_ops);
