/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "sysfs_tree.h"

static void
mkdirs(const char *path)
{
	char buf[1024], *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		mkdir(buf, 0755);
		*p = '/';
	}
	mkdir(buf, 0755);
}

static void
put(const char *dir, const char *file, const char *text)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	*strrchr(path, '/') = '\0';
	mkdirs(path);
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "w");
	if (f != NULL) {
		fprintf(f, "%s\n", text);
		fclose(f);
	}
}

int
st_root(char *root, size_t len)
{
	snprintf(root, len, "/tmp/kvt-sysfs-XXXXXX");
	return mkdtemp(root) != NULL ? 0 : -1;
}

void
st_node(const char *root, int n)
{
	char dir[1024];

	snprintf(dir, sizeof(dir), "%s/sys/devices/system/node/node%d", root, n);
	mkdirs(dir);
}

static void
pci_dev(const char *root, const char *path, int numa, char *dir, size_t len)
{
	char num[16];

	snprintf(dir, len, "%s/sys/devices/%s", root, path);
	mkdirs(dir);
	snprintf(num, sizeof(num), "%d", numa);
	put(dir, "numa_node", num);
}

void
st_gpu(const char *root, const char *path, int numa)
{
	char dir[1024], link[1024], target[1024];
	const char *bdf = strrchr(path, '/') + 1;

	pci_dev(root, path, numa, dir, sizeof(dir));
	put(dir, "vendor", "0x10de");
	put(dir, "class", "0x030200");
	snprintf(link, sizeof(link), "%s/sys/bus/pci/devices", root);
	mkdirs(link);
	snprintf(link, sizeof(link), "%s/sys/bus/pci/devices/%s", root, bdf);
	snprintf(target, sizeof(target), "../../../devices/%s", path);
	if (symlink(target, link) != 0)
		perror(link);
}

void
st_nic(const char *root, const char *name, const char *path, int numa,
       const char *state, const char *link_layer)
{
	char dir[1024], cls[900], link[1024], target[1024];

	pci_dev(root, path, numa, dir, sizeof(dir));
	put(dir, "vendor", "0x15b3");
	snprintf(cls, sizeof(cls), "%s/sys/class/infiniband/%s", root, name);
	mkdirs(cls);
	snprintf(link, sizeof(link), "%s/device", cls);
	snprintf(target, sizeof(target), "../../../devices/%s", path);
	if (symlink(target, link) != 0)
		perror(link);
	put(cls, "ports/1/state", strcmp(state, "ACTIVE") == 0 ? "4: ACTIVE" :
	    "1: DOWN");
	put(cls, "ports/1/link_layer", link_layer);
	put(cls, "ports/1/rate", "400 Gb/sec (4X NDR)");
	put(cls, "ports/1/gids/0", "fe80:0000:0000:0000:0a00:00ff:fe00:0001");
	if (strcmp(link_layer, "Ethernet") == 0) {
		put(cls, "ports/1/gid_attrs/types/0", "IB/RoCE v1");
		put(cls, "ports/1/gid_attrs/types/1", "RoCE v2");
		put(cls, "ports/1/gids/1", "fe80:0000:0000:0000:0a00:00ff:fe00:0001");
		put(cls, "ports/1/gid_attrs/types/2", "IB/RoCE v1");
		put(cls, "ports/1/gids/2", "0000:0000:0000:0000:0000:ffff:0a00:0001");
		put(cls, "ports/1/gid_attrs/types/3", "RoCE v2");
		put(cls, "ports/1/gids/3", "0000:0000:0000:0000:0000:ffff:0a00:0001");
	}
}

void
st_remove(const char *root)
{
	char cmd[1100];

	if (strncmp(root, "/tmp/kvt-sysfs-", 15) != 0)
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", root);
}
