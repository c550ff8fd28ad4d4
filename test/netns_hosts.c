/* SPDX-License-Identifier: BSD-3-Clause */
/* Hosts in network namespaces for the Criterion tests (netns_hosts.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "netns_hosts.h"

char tc_ns_prefix[16];
static char tc_ns_script[PATH_MAX];

void
tc_cluster_down(void)
{
	if (tc_ns_prefix[0] != '\0')
		tc_sh("%s down %s >/dev/null 2>&1", tc_ns_script, tc_ns_prefix);
}

void
tc_cluster_up(void)
{
	const char *src = getenv("KVT_SRCDIR");
	char why[512] = "", err[64];
	FILE *f;

	if (geteuid() != 0)
		cr_skip_test("network namespaces need root");
	snprintf(tc_ns_script, sizeof(tc_ns_script), "%s/scripts/netns-cluster",
		 src != NULL ? src : "..");
	snprintf(tc_ns_prefix, sizeof(tc_ns_prefix), "k%d", (int)getpid() % 100000);
	snprintf(err, sizeof(err), "/tmp/%s.netns.err", tc_ns_prefix);
	if (tc_sh("%s up %s >/dev/null 2>%s", tc_ns_script, tc_ns_prefix, err) != 0) {
		f = fopen(err, "r");
		/* netns-cluster's last line names the command that failed. */
		while (f != NULL && fgets(why, sizeof(why), f) != NULL)
			;
		if (f != NULL)
			fclose(f);
		unlink(err);
		why[strcspn(why, "\n")] = '\0';
		tc_cluster_down();
		cr_skip_test("cannot build network namespaces: %s",
			     why[0] != '\0' ? why : "scripts/netns-cluster up failed");
	}
	unlink(err);
}

uint64_t
tc_ns_counter(const char *host, const char *ifn, const char *dir)
{
	char cmd[256], buf[64] = "";
	unsigned long long v = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd),
		 "ip netns exec %s-%s cat /sys/class/net/%s/statistics/%s_bytes",
		 tc_ns_prefix, host, ifn, dir);
	f = popen(cmd, "r");
	if (f != NULL) {
		if (fgets(buf, sizeof(buf), f) != NULL)
			v = strtoull(buf, NULL, 10);
		pclose(f);
	}
	return v;
}

void
tc_ns_addr(const char *host, const char *ifn, char *out, size_t len)
{
	char cmd[PATH_MAX + 64];
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s addr %s %s", tc_ns_script, host, ifn);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(out, (int)len, f), "%s", cmd);
	pclose(f);
	out[strcspn(out, "\n")] = '\0';
}

void
tc_host_start(struct tc_host *h)
{
	char ns[32], opts[256];

	tc_ns_addr(h->name, "be", h->be, sizeof(h->be));
	snprintf(ns, sizeof(ns), "%s-%s", tc_ns_prefix, h->name);
	snprintf(opts, sizeof(opts),
		 "--kvt-pmd tcp --kvt-nic %s --kvt-listen %s:7000 --kvt-timeout 500",
		 h->nics != NULL ? h->nics : "kv0,kv1", h->be);
	cr_assert_eq(tc_peer_start_in(&h->p, ns, opts), 0, "%s did not start",
		     h->name);
}
