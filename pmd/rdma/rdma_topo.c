/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Topology: which RDMA NICs should carry the bytes of each memory location.
 *
 * Everything is read from sysfs below a root directory, so tests can build
 * a machine out of directories and symlinks: NICs from
 * sys/class/infiniband (NUMA node, PCI path, port state, link layer, GID
 * types, rate), GPUs from sys/bus/pci/devices (NVIDIA display or 3D
 * controllers), NUMA nodes from sys/devices/system/node.  libnuma reads the
 * same files but cannot be pointed elsewhere, hence the direct reads.
 *
 * Distance between a GPU and a NIC follows the PCI tree: both devices'
 * canonical paths (sys/devices/pci0000:00/0000:00:01.0/...) are compared
 * component by component.  Under one root complex the distance is the
 * number of bridges between them; another root complex on the same node
 * counts more, another NUMA node most.  A GPU's preferred NICs are the
 * nearest ones when they share its root complex, else those of its NUMA
 * node; a CPU node's are the NICs on that node.  The rest is fallback.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "rdma_topo.h"

#define DIST_OTHER_ROOT 500
#define DIST_UNKNOWN 600
#define DIST_OTHER_NODE 1000
#define NVIDIA_VENDOR "0x10de"

static int
read_line(const char *root, const char *rel, char *buf, size_t len)
{
	char path[PATH_MAX];
	FILE *f;
	char *nl;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	f = fopen(path, "r");
	if (f == NULL)
		return -errno;
	if (fgets(buf, (int)len, f) == NULL) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	nl = strchr(buf, '\n');
	if (nl != NULL)
		*nl = '\0';
	return 0;
}

static int
read_int(const char *root, const char *rel, int dflt)
{
	char buf[32];
	char *end;
	long v;

	if (read_line(root, rel, buf, sizeof(buf)) < 0)
		return dflt;
	v = strtol(buf, &end, 0);
	return end == buf ? dflt : (int)v;
}

/* The device path below root/sys/devices of the symlink root/rel, or "". */
static void
device_path(const char *root, const char *rel, char *out, size_t len)
{
	char path[PATH_MAX], real[PATH_MAX], base[PATH_MAX];
	const char *p;

	out[0] = '\0';
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	if (realpath(path, real) == NULL || realpath(root, base) == NULL)
		return;
	p = real + strlen(base);
	if (strncmp(real, base, strlen(base)) != 0)
		return;
	if (strcmp(base, "/") == 0)
		p = real;
	if (strncmp(p, "/sys/devices/", 13) == 0)
		snprintf(out, len, "%s", p + 13);
}

static void
path_basename(const char *path, char *out, size_t len)
{
	const char *b = strrchr(path, '/');

	snprintf(out, len, "%s", b != NULL ? b + 1 : path);
}

static int
listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p;

	for (p = list; (p = strstr(p, name)) != NULL; p += n)
		if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
			return 1;
	return 0;
}

/* RoCE: the first RoCE v2 GID holding an IPv4 address, else any RoCE v2. */
static int
pick_gid(const char *root, const char *dev, unsigned int port)
{
	char rel[PATH_MAX], buf[64];
	int i, v2 = -1;

	for (i = 0; i < 256; i++) {
		snprintf(rel, sizeof(rel),
			 "sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
			 dev, port, i);
		if (read_line(root, rel, buf, sizeof(buf)) < 0)
			continue;
		if (strcmp(buf, "RoCE v2") != 0)
			continue;
		snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/ports/%u/gids/%d",
			 dev, port, i);
		if (read_line(root, rel, buf, sizeof(buf)) < 0 ||
		    strcmp(buf, "0000:0000:0000:0000:0000:0000:0000:0000") == 0)
			continue;
		if (strncmp(buf, "0000:0000:0000:0000:0000:ffff:", 30) == 0)
			return i;
		if (v2 < 0)
			v2 = i;
	}
	return v2;
}

static void
nic_port_read(const char *root, struct rd_topo_nic *n)
{
	char rel[PATH_MAX], buf[64];
	int gbps;

	snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/ports/%u/state",
		 n->name, n->port);
	n->active = read_line(root, rel, buf, sizeof(buf)) == 0 &&
		strstr(buf, "ACTIVE") != NULL;
	snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/ports/%u/link_layer",
		 n->name, n->port);
	if (read_line(root, rel, buf, sizeof(buf)) == 0)
		n->link = strcmp(buf, "InfiniBand") == 0 ? KVT_LINK_IB :
			strcmp(buf, "Ethernet") == 0 ? KVT_LINK_ETH :
			KVT_LINK_UNKNOWN;
	snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/ports/%u/rate",
		 n->name, n->port);
	if (read_line(root, rel, buf, sizeof(buf)) == 0 &&
	    sscanf(buf, "%d", &gbps) == 1 && gbps > 0)
		n->rate_mbps = (uint32_t)gbps * 1000;
	n->gid_index = n->link == KVT_LINK_ETH ? pick_gid(root, n->name, n->port) :
		0;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct rd_topo_nic *)a)->name,
		      ((const struct rd_topo_nic *)b)->name);
}

/* One entry per port of each allowed device. */
static void
nics_read(struct rd_topo *t, const char *root, const char *allow)
{
	char path[PATH_MAX], rel[PATH_MAX];
	struct rd_topo_nic *n;
	struct dirent *de, *pe;
	DIR *d, *pd;
	long port;

	snprintf(path, sizeof(path), "%s/sys/class/infiniband", root);
	d = opendir(path);
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL && t->nnics < RD_TOPO_MAX_NICS) {
		if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof(n->name))
			continue;
		if (allow != NULL && !listed(allow, de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/sys/class/infiniband/%s/ports",
			 root, de->d_name);
		pd = opendir(path);
		if (pd == NULL)
			continue;
		while ((pe = readdir(pd)) != NULL && t->nnics < RD_TOPO_MAX_NICS) {
			port = strtol(pe->d_name, NULL, 10);
			if (port < 1 || port > 255)
				continue;
			n = &t->nic[t->nnics++];
			memset(n, 0, sizeof(*n));
			snprintf(n->name, sizeof(n->name), "%s", de->d_name);
			n->port = (uint8_t)port;
			snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/device",
				 n->name);
			device_path(root, rel, n->path, sizeof(n->path));
			path_basename(n->path, n->pci, sizeof(n->pci));
			snprintf(rel, sizeof(rel),
				 "sys/class/infiniband/%s/device/numa_node", n->name);
			n->numa = read_int(root, rel, -1);
			nic_port_read(root, n);
		}
		closedir(pd);
	}
	closedir(d);
	qsort(t->nic, t->nnics, sizeof(t->nic[0]), name_cmp);
}

static int
gpu_cmp(const void *a, const void *b)
{
	return strcmp(((const struct rd_topo_gpu *)a)->pci,
		      ((const struct rd_topo_gpu *)b)->pci);
}

static void
gpus_read(struct rd_topo *t, const char *root)
{
	char path[PATH_MAX], rel[PATH_MAX], buf[32];
	struct rd_topo_gpu *g;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "%s/sys/bus/pci/devices", root);
	d = opendir(path);
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL && t->ngpus < RD_TOPO_MAX_GPUS) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%s/vendor", de->d_name);
		if (read_line(root, rel, buf, sizeof(buf)) < 0 ||
		    strcmp(buf, NVIDIA_VENDOR) != 0)
			continue;
		snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%s/class", de->d_name);
		if (read_line(root, rel, buf, sizeof(buf)) < 0 ||
		    (strncmp(buf, "0x0300", 6) != 0 && strncmp(buf, "0x0302", 6) != 0))
			continue;
		g = &t->gpu[t->ngpus++];
		snprintf(g->pci, sizeof(g->pci), "%.15s", de->d_name);
		snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%s", de->d_name);
		device_path(root, rel, g->path, sizeof(g->path));
		snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%s/numa_node",
			 de->d_name);
		g->numa = read_int(root, rel, -1);
	}
	closedir(d);
	qsort(t->gpu, t->ngpus, sizeof(t->gpu[0]), gpu_cmp);
}

static unsigned int
nodes_count(const char *root)
{
	char path[PATH_MAX];
	unsigned int n = 0, id;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "%s/sys/devices/system/node", root);
	d = opendir(path);
	if (d == NULL)
		return 1;
	while ((de = readdir(d)) != NULL)
		if (sscanf(de->d_name, "node%u", &id) == 1 &&
		    id < RD_TOPO_MAX_NODES && id + 1 > n)
			n = id + 1;
	closedir(d);
	return RTE_MAX(n, 1u);
}

/* Bridges between two devices; see the file comment for the scale. */
static int
pci_distance(const char *a, int numa_a, const char *b, int numa_b)
{
	int common = 0, da = 0, db = 0;
	const char *pa = a, *pb = b;
	size_t la, lb;

	if (numa_a >= 0 && numa_b >= 0 && numa_a != numa_b)
		return DIST_OTHER_NODE;
	if (a[0] == '\0' || b[0] == '\0')
		return DIST_UNKNOWN;
	for (;;) {
		la = strcspn(pa, "/");
		lb = strcspn(pb, "/");
		if (la != lb || strncmp(pa, pb, la) != 0)
			break;
		common++;
		if (pa[la] == '\0' || pb[lb] == '\0')
			break;
		pa += la + 1;
		pb += lb + 1;
	}
	if (common == 0)
		return DIST_OTHER_ROOT;
	for (; *pa != '\0'; pa++)
		da += *pa == '/';
	for (; *pb != '\0'; pb++)
		db += *pb == '/';
	return da + db + 2;
}

static uint32_t
active_nics(const struct rd_topo *t)
{
	uint32_t m = 0;
	unsigned int i;

	for (i = 0; i < t->nnics; i++)
		if (t->nic[i].active)
			m |= 1u << i;
	return m;
}

static void
pref_cpu(struct rd_topo *t, unsigned int node, struct rd_topo_pref *p)
{
	uint32_t all = active_nics(t), here = 0, unknown = 0;
	unsigned int i;

	for (i = 0; i < t->nnics; i++) {
		if (!(all & (1u << i)))
			continue;
		if (t->nic[i].numa == (int)node)
			here |= 1u << i;
		else if (t->nic[i].numa < 0)
			unknown |= 1u << i;
	}
	p->preferred = here != 0 ? here : unknown != 0 ? unknown : all;
	p->fallback = all & ~p->preferred;
}

static void
pref_gpu(struct rd_topo *t, const struct rd_topo_gpu *g,
	 struct rd_topo_pref *p)
{
	int best = INT_MAX, dist[RD_TOPO_MAX_NICS];
	uint32_t all = active_nics(t), pref = 0;
	unsigned int i;

	for (i = 0; i < t->nnics; i++) {
		if (!(all & (1u << i)))
			continue;
		dist[i] = pci_distance(g->path, g->numa, t->nic[i].path,
				       t->nic[i].numa);
		best = RTE_MIN(best, dist[i]);
	}
	for (i = 0; i < t->nnics; i++) {
		if (!(all & (1u << i)))
			continue;
		/* Same root complex: the nearest only.  Otherwise every NIC
		 * no farther than the GPU's own node. */
		if (best < DIST_OTHER_ROOT ? dist[i] == best :
		    dist[i] <= RTE_MAX(best, DIST_UNKNOWN))
			pref |= 1u << i;
	}
	p->preferred = pref != 0 ? pref : all;
	p->fallback = all & ~p->preferred;
}

int
rd_topo_nic_index(const struct rd_topo *t, const char *name)
{
	unsigned int i;

	for (i = 0; i < t->nnics; i++)
		if (strcmp(t->nic[i].name, name) == 0)
			return (int)i;
	return -1;
}

static void
extra_add(struct rd_topo *t, const char *extra, const char *allow)
{
	char name[32];
	const char *p = extra;
	struct rd_topo_nic *n;
	size_t l;

	while (*p != '\0' && t->nnics < RD_TOPO_MAX_NICS) {
		l = strcspn(p, ",");
		snprintf(name, sizeof(name), "%.*s", (int)RTE_MIN(l, sizeof(name) - 1), p);
		p += l + (p[l] == ',');
		if (name[0] == '\0' || rd_topo_nic_index(t, name) >= 0 ||
		    (allow != NULL && !listed(allow, name)))
			continue;
		n = &t->nic[t->nnics++];
		memset(n, 0, sizeof(*n));
		snprintf(n->name, sizeof(n->name), "%s", name);
		n->numa = -1;
		n->port = 1;
		n->active = 1;
		n->gid_index = -1;
	}
}

static int
gpu_by_pci(const struct rd_topo *t, const char *pci)
{
	unsigned int i;

	for (i = 0; i < t->ngpus; i++)
		if (strcasecmp(t->gpu[i].pci, pci) == 0)
			return (int)i;
	return -1;
}

/* NIC names of a JSON array as a mask; @return 0 or -EINVAL. */
static int
json_nics(const struct rd_topo *t, json_t *a, const char *key,
	  const char *field, uint32_t *mask, char *err, size_t errlen)
{
	json_t *v;
	size_t i;
	int idx;

	*mask = 0;
	if (!json_is_array(a)) {
		snprintf(err, errlen, "%s.%s is not an array of NIC names", key, field);
		return -EINVAL;
	}
	json_array_foreach(a, i, v) {
		/* Without a topology (a syntax check) any name will do. */
		idx = !json_is_string(v) ? -1 : t == NULL ? 0 :
			rd_topo_nic_index(t, json_string_value(v));
		if (idx < 0) {
			snprintf(err, errlen, "%s.%s names %s, which is not an allowed RDMA NIC here",
				 key, field, json_is_string(v) ? json_string_value(v) : "a non-string");
			return -EINVAL;
		}
		*mask |= 1u << idx;
	}
	return 0;
}

static int
json_override(struct rd_topo *t, const char *file, char *err, size_t errlen)
{
	struct rd_topo_pref *p, np;
	json_error_t je;
	json_t *root, *v, *a;
	const char *key;
	struct kvt_loc loc;
	int ret = 0;

	root = json_load_file(file, 0, &je);
	if (root == NULL) {
		snprintf(err, errlen, "topology file %s: %s (line %d)", file, je.text,
			 je.line);
		return access(file, R_OK) != 0 ? -ENOENT : -EINVAL;
	}
	if (!json_is_object(root)) {
		snprintf(err, errlen, "topology file %s: not a JSON object", file);
		ret = -EINVAL;
		goto out;
	}
	json_object_foreach(root, key, v) {
		if (kvt_parse_loc(key, &loc) < 0 || loc.id < 0 ||
		    (loc.type == KVT_LOC_CPU && loc.id >= RD_TOPO_MAX_NODES) ||
		    (loc.type == KVT_LOC_CUDA && loc.id >= RD_TOPO_MAX_GPUS)) {
			snprintf(err, errlen, "topology file %s: key %s is not cpu:N or cuda:N",
				 file, key);
			ret = -EINVAL;
			goto out;
		}
		a = json_is_object(v) ? json_object_get(v, "preferred") : NULL;
		np.preferred = 0;
		if (a == NULL) {
			snprintf(err, errlen, "topology file %s: %s needs {\"preferred\": [...]}",
				 file, key);
			ret = -EINVAL;
			goto out;
		}
		ret = json_nics(t, a, key, "preferred", &np.preferred, err, errlen);
		/* No fallback list: every other NIC. */
		np.fallback = t != NULL ? active_nics(t) : 0;
		a = json_object_get(v, "fallback");
		if (ret == 0 && a != NULL)
			ret = json_nics(t, a, key, "fallback", &np.fallback, err, errlen);
		if (ret < 0)
			goto out;
		np.fallback &= ~np.preferred;
		if (t == NULL)
			continue;
		if (loc.type == KVT_LOC_CPU) {
			p = &t->cpu[loc.id];
			t->nnodes = RTE_MAX(t->nnodes, (unsigned int)loc.id + 1);
		} else {
			p = &t->cuda[loc.id];
			t->ncuda = RTE_MAX(t->ncuda, (unsigned int)loc.id + 1);
		}
		*p = np;
	}
out:
	json_decref(root);
	return ret;
}

int
rd_topo_check_file(const char *file, char *err, size_t errlen)
{
	err[0] = '\0';
	return json_override(NULL, file, err, errlen);
}

int
rd_topo_discover(struct rd_topo *t, const char *root, const char *allow,
		  const char *extra, const char *const *cuda_pci,
		  unsigned int ncuda, const char *json, char *err, size_t errlen)
{
	unsigned int i;
	int g;

	memset(t, 0, sizeof(*t));
	err[0] = '\0';
	nics_read(t, root, allow);
	if (extra != NULL)
		extra_add(t, extra, allow);
	gpus_read(t, root);
	t->nnodes = nodes_count(root);
	for (i = 0; i < t->nnodes; i++)
		pref_cpu(t, i, &t->cpu[i]);
	t->ncuda = cuda_pci != NULL ? RTE_MIN(ncuda, (unsigned int)RD_TOPO_MAX_GPUS) :
		t->ngpus;
	for (i = 0; i < t->ncuda; i++) {
		g = cuda_pci != NULL ? gpu_by_pci(t, cuda_pci[i]) : (int)i;
		t->cuda_gpu[i] = g;
		if (g >= 0) {
			pref_gpu(t, &t->gpu[g], &t->cuda[i]);
		} else {
			/* A GPU sysfs does not show: any NIC will do. */
			struct rd_topo_gpu none = { .numa = -1 };

			pref_gpu(t, &none, &t->cuda[i]);
		}
	}
	return json != NULL ? json_override(t, json, err, errlen) : 0;
}

int
rd_topo_lookup(const struct rd_topo *t, const struct kvt_loc *loc,
		struct rd_topo_pref *out)
{
	if (loc->type == KVT_LOC_CPU) {
		/* Memory of an unknown node: any NIC is as near as another. */
		if (loc->id < 0 || (unsigned int)loc->id >= t->nnodes) {
			out->preferred = active_nics(t);
			out->fallback = 0;
			return 0;
		}
		*out = t->cpu[loc->id];
		return 0;
	}
	if (loc->type == KVT_LOC_CUDA && loc->id >= 0 &&
	    (unsigned int)loc->id < t->ncuda) {
		*out = t->cuda[loc->id];
		return 0;
	}
	return -ENOENT;
}
