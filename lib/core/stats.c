/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Statistics through DPDK telemetry: /kvt/ports lists the ports,
 * /kvt/port,<id> gives one port's counters, /kvt/peers the open peers'.
 */
#include <stdlib.h>
#include <string.h>

#include <rte_telemetry.h>

#include "kvt_private.h"

static int
tel_ports(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvt_port_info pi;
	unsigned int i;

	RTE_SET_USED(cmd);
	RTE_SET_USED(params);
	rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
	for (i = 0; i < kvt_port_count(); i++)
		if (kvt_port_info(i, &pi) == 0)
			rte_tel_data_add_array_string(d, pi.name);
	return 0;
}

static int
tel_port(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvt_port_stats st;
	struct kvt_port_info pi;
	char *end;
	unsigned long id;

	RTE_SET_USED(cmd);
	if (params == NULL || *params == '\0')
		return -EINVAL;
	id = strtoul(params, &end, 10);
	if (*end != '\0' || kvt_port_info((unsigned int)id, &pi) < 0 ||
	    kvt_port_stats((unsigned int)id, &st) < 0)
		return -EINVAL;
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_string(d, "name", pi.name);
	rte_tel_data_add_dict_string(d, "pmd", pi.pmd);
	rte_tel_data_add_dict_u64(d, "lcore", pi.lcore);
	rte_tel_data_add_dict_u64(d, "write_bytes", st.write_bytes);
	rte_tel_data_add_dict_u64(d, "read_bytes", st.read_bytes);
	rte_tel_data_add_dict_u64(d, "served_bytes", st.served_bytes);
	rte_tel_data_add_dict_u64(d, "slices", st.slices);
	rte_tel_data_add_dict_u64(d, "errors", st.errors);
	rte_tel_data_add_dict_u64(d, "retries", st.retries);
	return 0;
}

static int
tel_peers(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvt_peer *p;

	RTE_SET_USED(cmd);
	RTE_SET_USED(params);
	if (kvt_eng == NULL)
		return -ENODEV;
	rte_tel_data_start_dict(d);
	pthread_mutex_lock(&kvt_eng->ctl_lock);
	for (p = kvt_eng->peers; p != NULL; p = p->next)
		rte_tel_data_add_dict_u64(d, p->info.name,
					  __atomic_load_n(&p->st.write_bytes,
							  __ATOMIC_RELAXED) +
					  __atomic_load_n(&p->st.read_bytes,
							  __ATOMIC_RELAXED));
	pthread_mutex_unlock(&kvt_eng->ctl_lock);
	return 0;
}

int
kvt_stats_init(void)
{
	static int done;

	/* Telemetry keeps commands for the life of the process. */
	if (done)
		return 0;
	done = 1;
	rte_telemetry_register_cmd("/kvt/ports", tel_ports,
				   "List kvt ports. No parameters");
	rte_telemetry_register_cmd("/kvt/port", tel_port,
				   "Counters of one kvt port. Parameters: int port id");
	rte_telemetry_register_cmd("/kvt/peers", tel_peers,
				   "Bytes moved per open peer. No parameters");
	return 0;
}
