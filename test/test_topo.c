/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Topology discovery on fabricated sysfs trees: two NUMA nodes, each with
 * two root complexes of two PCIe switches, each switch holding one GPU
 * and one RDMA NIC (the DGX shape), then allow-lists, a NIC that is down,
 * a process that sees only some GPUs, and the JSON override.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "kvt_private.h"
#include "../pmd/rdma/rdma_topo.h"
#include "sysfs_tree.h"

static char root[256];

/* Switch s (0..7): node s / 4, root complex by pairs. */
static void
switch_paths(unsigned int s, char *gpu, char *nic, size_t len)
{
	unsigned int node = s / 4, rc = node * 0x80 + (s % 4 / 2) * 0x40;
	unsigned int up = rc + 1 + (s % 2) * 8;
	char base[128];

	snprintf(base, sizeof(base), "pci0000:%02x/0000:%02x:%02x.0/0000:%02x:00.0",
		 rc, rc, 1 + s % 2, up);
	snprintf(gpu, len, "%s/0000:%02x:00.0/0000:%02x:00.0", base, up + 1, up + 2);
	snprintf(nic, len, "%s/0000:%02x:01.0/0000:%02x:00.0", base, up + 1, up + 3);
}

static void
machine(const char *down)
{
	char gpu[256], nic[256], name[16];
	unsigned int s;

	cr_assert_eq(st_root(root, sizeof(root)), 0);
	st_node(root, 0);
	st_node(root, 1);
	for (s = 0; s < 8; s++) {
		switch_paths(s, gpu, nic, sizeof(gpu));
		snprintf(name, sizeof(name), "mlx5_%u", s);
		st_gpu(root, gpu, (int)s / 4);
		st_nic(root, name, nic, (int)s / 4,
		       down != NULL && strcmp(down, name) == 0 ? "DOWN" : "ACTIVE",
		       "Ethernet");
	}
}

static void
fini(void)
{
	st_remove(root);
}

static int
discover(struct rd_topo *t, const char *allow, const char *extra,
	 const char *const *pci, unsigned int npci, const char *json,
	 char *err, size_t errlen)
{
	return rd_topo_discover(t, root, allow, extra, pci, npci, json, err,
				 errlen);
}

Test(topo, dgx_shape, .fini = fini)
{
	struct rd_topo t;
	struct rd_topo_pref p;
	struct kvt_loc loc;
	char err[256];
	unsigned int i;

	machine(NULL);
	cr_assert_eq(discover(&t, NULL, NULL, NULL, 0, NULL, err, sizeof(err)), 0);
	cr_assert_eq(t.nnics, 8);
	cr_assert_eq(t.ngpus, 8);
	cr_assert_eq(t.nnodes, 2);
	for (i = 0; i < 8; i++) {
		cr_assert_eq(t.nic[i].numa, (int)i / 4);
		cr_assert(t.nic[i].active);
		cr_assert_eq(t.nic[i].link, KVT_LINK_ETH);
		cr_assert_eq(t.nic[i].gid_index, 3, "RoCE v2 with an IPv4 address");
		cr_assert_eq(t.nic[i].rate_mbps, 400000);
		/* Each GPU prefers the NIC behind its own switch. */
		cr_assert_eq(t.cuda[i].preferred, 1u << i, "cuda:%u -> %#x", i,
			     t.cuda[i].preferred);
		cr_assert_eq(t.cuda[i].fallback, 0xffu & ~(1u << i));
	}
	cr_assert_str_eq(t.nic[2].pci, "0000:44:00.0");
	cr_assert_eq(t.cpu[0].preferred, 0x0f);
	cr_assert_eq(t.cpu[0].fallback, 0xf0);
	cr_assert_eq(t.cpu[1].preferred, 0xf0);
	loc = (struct kvt_loc){ KVT_LOC_CUDA, 6 };
	cr_assert_eq(rd_topo_lookup(&t, &loc, &p), 0);
	cr_assert_eq(p.preferred, 0x40);
	loc = (struct kvt_loc){ KVT_LOC_CUDA, 9 };
	cr_assert_eq(rd_topo_lookup(&t, &loc, &p), -ENOENT);
	/* Memory of a node sysfs does not list: every NIC is as good. */
	loc = (struct kvt_loc){ KVT_LOC_CPU, 5 };
	cr_assert_eq(rd_topo_lookup(&t, &loc, &p), 0);
	cr_assert_eq(p.preferred, 0xff);
}

Test(topo, allow_list_nearest_remaining, .fini = fini)
{
	struct rd_topo t;
	char err[256];

	machine(NULL);
	/* eth0 is a TCP interface: not the topology's business. */
	cr_assert_eq(discover(&t, "mlx5_0,eth0,mlx5_5", NULL, NULL, 0, NULL, err,
			      sizeof(err)), 0);
	cr_assert_eq(t.nnics, 2);
	cr_assert_str_eq(t.nic[0].name, "mlx5_0");
	cr_assert_str_eq(t.nic[1].name, "mlx5_5");
	cr_assert_eq(t.cuda[0].preferred, 0x1);
	/* Same root complex, other switch: still the nearest. */
	cr_assert_eq(t.cuda[1].preferred, 0x1);
	/* Other root complex, same node: the node's NIC, not the far one. */
	cr_assert_eq(t.cuda[2].preferred, 0x1);
	cr_assert_eq(t.cuda[2].fallback, 0x2);
	cr_assert_eq(t.cuda[5].preferred, 0x2);
	cr_assert_eq(t.cpu[1].preferred, 0x2);
}

/* A NIC whose port is down stays listed (it may come back) but is no
 * one's preferred or fallback NIC. */
Test(topo, down_nic_listed_not_used, .fini = fini)
{
	struct rd_topo t;
	char err[256];

	machine("mlx5_3");
	cr_assert_eq(discover(&t, NULL, NULL, NULL, 0, NULL, err, sizeof(err)), 0);
	cr_assert_eq(t.nnics, 8);
	cr_assert(!t.nic[3].active);
	cr_assert_eq(t.cuda[3].preferred, 1u << 2, "%#x", t.cuda[3].preferred);
	cr_assert_eq(t.cpu[0].preferred, 0x07);
	cr_assert_eq((t.cpu[0].fallback | t.cpu[0].preferred) & (1u << 3), 0);
}

/* CUDA_VISIBLE_DEVICES=5: the process's cuda:0 is the sixth GPU. */
Test(topo, visible_gpu_subset, .fini = fini)
{
	const char *pci[] = { "0000:8b:00.0", "0000:ff:00.0" };
	struct rd_topo t;
	char err[256];

	machine(NULL);
	cr_assert_eq(discover(&t, NULL, NULL, pci, 2, NULL, err, sizeof(err)), 0);
	cr_assert_eq(t.ncuda, 2);
	cr_assert_eq(t.cuda_gpu[0], 5);
	cr_assert_eq(t.cuda[0].preferred, 1u << 5);
	/* A GPU sysfs does not show: no preference. */
	cr_assert_eq(t.cuda_gpu[1], -1);
	cr_assert_eq(t.cuda[1].preferred, 0xff);
}

/* Verbs devices without sysfs entries (soft devices, test doubles). */
Test(topo, verbs_only_nics, .fini = fini)
{
	struct rd_topo t;
	char err[256];

	cr_assert_eq(st_root(root, sizeof(root)), 0);
	cr_assert_eq(discover(&t, NULL, "mlx5_0,mlx5_1", NULL, 0, NULL, err,
			      sizeof(err)), 0);
	cr_assert_eq(t.nnics, 2);
	cr_assert_eq(t.nic[0].numa, -1);
	cr_assert_eq(t.cpu[0].preferred, 0x3);
	cr_assert_eq(discover(&t, "mlx5_1", "mlx5_0,mlx5_1", NULL, 0, NULL, err,
			      sizeof(err)), 0);
	cr_assert_eq(t.nnics, 1);
	cr_assert_str_eq(t.nic[0].name, "mlx5_1");
}

static void
write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

Test(topo, json_override, .fini = fini)
{
	struct rd_topo t;
	char err[256], json[300];

	machine(NULL);
	snprintf(json, sizeof(json), "%s/topo.json", root);
	write_file(json, "{ \"cuda:3\": { \"preferred\": [\"mlx5_7\"], \"fallback\": [] },\n"
		   "  \"cpu:0\": { \"preferred\": [\"mlx5_1\"] } }\n");
	cr_assert_eq(discover(&t, NULL, NULL, NULL, 0, json, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(t.cuda[3].preferred, 0x80);
	cr_assert_eq(t.cuda[3].fallback, 0);
	cr_assert_eq(t.cpu[0].preferred, 0x02);
	cr_assert_eq(t.cpu[0].fallback, 0xfd);
	/* Untouched entries keep what sysfs said. */
	cr_assert_eq(t.cuda[2].preferred, 0x04);
}

Test(topo, json_errors, .fini = fini)
{
	static const struct {
		const char *text;
		const char *says;
	} bad[] = {
		{ "{ \"cuda:1\": { \"preferred\": [\"mlx5_9\"] } }", "mlx5_9" },
		{ "{ \"gpu:1\": { \"preferred\": [] } }", "gpu:1" },
		{ "{ \"cpu:0\": { \"preferred\": \"mlx5_0\" } }", "not an array" },
		{ "{ \"cpu:0\": { \"fallback\": [] } }", "preferred" },
		{ "{ \"cpu:0\": ", "line" },
		{ "[1, 2]", "not a JSON object" },
	};
	struct rd_topo t;
	char err[256], json[300];
	unsigned int i;

	machine(NULL);
	snprintf(json, sizeof(json), "%s/topo.json", root);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(json, bad[i].text);
		cr_assert_eq(discover(&t, NULL, NULL, NULL, 0, json, err, sizeof(err)),
			     -EINVAL, "%s", bad[i].text);
		cr_assert(strstr(err, bad[i].says) != NULL, "'%s' -> '%s'",
			  bad[i].text, err);
	}
	/* A NIC the allow-list dropped is unknown to the override. */
	write_file(json, "{ \"cpu:0\": { \"preferred\": [\"mlx5_2\"] } }");
	cr_assert_eq(discover(&t, "mlx5_0", NULL, NULL, 0, json, err, sizeof(err)),
		     -EINVAL);
	snprintf(json, sizeof(json), "%s/missing.json", root);
	cr_assert_eq(discover(&t, NULL, NULL, NULL, 0, json, err, sizeof(err)),
		     -ENOENT);
}
