/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine: kvt_init() brings up (or attaches to) EAL, probes the
 * transports, places their ports on worker lcores, and starts the control
 * thread; kvt_fini() takes it all down again.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <numa.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>

#include "kvt_private.h"

RTE_LOG_REGISTER(kvt_logtype, kvt, NOTICE);

struct kvt_engine *kvt_eng;

/* Set when kvt ran rte_eal_init; EAL lives until the process exits, so a
 * later kvt_init() attaches to it. */
static int kvt_eal_ours;
static char kvt_eal_rundir[PATH_MAX];
static int kvt_eal_defaults;	/* kvt chose the EAL arguments */
static pid_t kvt_eal_pid;	/* the process that started EAL */

#define KVT_EAL_PREFIX "kvt-"

/*
 * Remove an EAL runtime directory and what EAL left in it (its telemetry
 * and multi-process sockets: EAL's own clean-up unlinks them only after
 * our exit handler ran, and not at all when a process is killed).
 */
static void
rundir_remove(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *e;
	DIR *d = opendir(dir);

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) <
		    sizeof(path))
			unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

/*
 * A serving host restarts workers for months: reap the runtime
 * directories of kvt processes that are gone (only kvt's own prefix, and
 * only when no process has that pid).
 */
static void
rundirs_reap(const char *ours)
{
	char base[PATH_MAX], path[PATH_MAX], *slash, *end;
	struct dirent *e;
	unsigned int n = 0;
	long pid;
	DIR *d;

	snprintf(base, sizeof(base), "%s", ours);
	slash = strrchr(base, '/');
	if (slash == NULL)
		return;
	*slash = '\0';
	d = opendir(base);
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, KVT_EAL_PREFIX, strlen(KVT_EAL_PREFIX)) != 0)
			continue;
		pid = strtol(e->d_name + strlen(KVT_EAL_PREFIX), &end, 10);
		if (*end != '\0' || pid <= 0 || pid == (long)getpid() ||
		    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", base, e->d_name) <
		    sizeof(path)) {
			rundir_remove(path);
			n++;
		}
	}
	closedir(d);
	if (n > 0)
		KVT_LOG(INFO, "removed %u runtime director%s of kvt processes that are gone",
			n, n == 1 ? "y" : "ies");
}

static void
eal_cleanup_at_exit(void)
{
	/* A child forked from us (a worker pool, a subprocess that never
	 * execs) has our memory but none of our threads, and shares our
	 * runtime directory: nothing here is its to stop or remove. */
	if (getpid() != kvt_eal_pid)
		return;
	if (kvt_eng != NULL)
		kvt_fini();
	rte_eal_cleanup();
	/* A directory named by the application's own EAL arguments may be
	 * shared with other processes: only an empty one goes. */
	if (kvt_eal_rundir[0] != '\0' && kvt_eal_defaults)
		rundir_remove(kvt_eal_rundir);
	else if (kvt_eal_rundir[0] != '\0')
		rmdir(kvt_eal_rundir);
}

int
kvt_host_id(uint8_t id[32])
{
	char boot[64] = "";
	struct stat st;
	FILE *f;
	size_t n;

	memset(id, 0, 32);
	f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f != NULL) {
		n = fread(boot, 1, sizeof(boot) - 1, f);
		boot[n] = '\0';
		fclose(f);
	}
	memcpy(id, boot, RTE_MIN(strlen(boot), (size_t)24));
	/* Processes in other network namespaces count as other hosts: they
	 * are how tests and containers build "hosts" on one machine. */
	if (stat("/proc/self/ns/net", &st) == 0)
		memcpy(id + 24, &st.st_ino, 8);
	return 0;
}

/*
 * Claim a cpu for a worker lcore among the kvt processes of this host: a
 * lock file per cpu, held (flock) for the life of the process.  Two
 * engines on one host then poll on different cpus without being told.
 * When every cpu has one, a later engine takes a second place (share 1)
 * on one of them, and so on: more engines than cpus spread evenly
 * rather than piling onto one.  @return 1 if we got it.
 */
static int
claim_cpu(int cpu, int share)
{
	char path[64];
	int fd;

	if (share == 0)
		snprintf(path, sizeof(path), "/tmp/kvt-cpu%d.lock", cpu);
	else
		snprintf(path, sizeof(path), "/tmp/kvt-cpu%d.%d.lock", cpu, share);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return 0;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		close(fd);
		return 0;
	}
	return 1;	/* the fd stays open: the lock lasts until exit */
}

/* The last free cpu of node (any node when node < 0); -1 if none. */
static int
claim_on_node(const int *cpus, int ncpu, uint8_t *taken, int node)
{
	int i;

	for (i = ncpu - 1; i >= 0; i--) {
		if (taken[i] || (node >= 0 && numa_available() >= 0 &&
				 numa_node_of_cpu(cpus[i]) != node))
			continue;
		taken[i] = 1;
		if (claim_cpu(cpus[i], 0)) {
			taken[i] = 2;	/* ours */
			return cpus[i];
		}
	}
	return -1;
}

/* Every cpu has its engine: the first cpu with the fewest (a share slot
 * that is free), the last cpus first as above, none of ours twice; -1 if
 * none. */
static int
claim_shared(const int *cpus, int ncpu, uint8_t *taken)
{
	int share, i;

	for (share = 1; share < 64; share++)
		for (i = ncpu - 1; i >= 0; i--) {
			if (taken[i] == 2)
				continue;
			if (claim_cpu(cpus[i], share)) {
				taken[i] = 2;
				return cpus[i];
			}
		}
	return -1;
}

/*
 * Worker cpus for our own EAL: one per port (at most one per spare cpu),
 * each on its port's NUMA node where that node has a free cpu, else the
 * last free cpus we may run on.
 */
static int
default_lcores_arg(char *buf, size_t len, unsigned int nports)
{
	cpu_set_t set;
	int cpus[CPU_SETSIZE], pick[KVT_MAX_LCORES], ncpu = 0, c, nw, i, n = 0;
	uint8_t taken[CPU_SETSIZE] = { 0 };
	int off, numa;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return -errno;
	for (c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			cpus[ncpu++] = c;
	nw = RTE_MAX(1, RTE_MIN((int)nports, ncpu - 1));
	nw = RTE_MIN(nw, KVT_MAX_LCORES);
	for (i = 0; i < nw; i++) {
		numa = (unsigned int)i < kvt_eng->nports ? kvt_eng->ports[i]->numa : -1;
		c = claim_on_node(cpus, ncpu, taken, numa);
		if (c < 0 && numa >= 0)
			c = claim_on_node(cpus, ncpu, taken, -1);
		if (c < 0)
			c = claim_shared(cpus, ncpu, taken);
		if (c >= 0)
			pick[n++] = c;
	}
	/* No share slot left either: the last ones. */
	for (i = 0; n < nw; i++)
		pick[n++] = cpus[ncpu - 1 - (i % ncpu)];
	/* The main lcore is the application's thread: leave it unpinned. */
	off = snprintf(buf, len, "--lcores=0@(");
	for (i = 0; i < ncpu; i++)
		off += snprintf(buf + off, len - off, "%s%d", i ? "," : "",
				cpus[i]);
	off += snprintf(buf + off, len - off, ")");
	for (i = 0; i < nw; i++)
		off += snprintf(buf + off, len - off, ",%d@%d", i + 1, pick[i]);
	return (size_t)off < len ? 0 : -ENOSPC;
}

/*
 * A shared DPDK build loads its mempool handlers as drivers from the
 * driver directory it was built for (a static one has the ring handler
 * linked in).  Where that directory does not exist
 * (a machine the libraries were carried to), name the ring handler so EAL
 * loads it from the library path.  @return arguments added.
 */
static int
mempool_driver_arg(char **args)
{
#if defined(RTE_EAL_PMD_PATH) && defined(KVT_DPDK_ABI) && !defined(KVT_DPDK_STATIC)
	static char lib[] = "librte_mempool_ring.so." KVT_DPDK_ABI;

	if (access(RTE_EAL_PMD_PATH, F_OK) == 0)
		return 0;
	args[0] = (char *)"-d";
	args[1] = lib;
	return 2;
#else
	RTE_SET_USED(args);
	return 0;
#endif
}


/* "--log-level=PATTERN:LEVEL" (LEVEL a name or 1-8), applied before
 * rte_eal_init so that what the transports log while probing obeys it;
 * EAL parses the same arguments again later. */
static void
log_levels_early(int argc, char **argv)
{
	static const char *const names[] = { "emerg", "alert", "crit", "err",
		"warning", "notice", "info", "debug" };
	char pat[128], *colon;
	unsigned int lvl, k;
	int i;

	for (i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--log-level=", 12) != 0)
			continue;
		snprintf(pat, sizeof(pat), "%s", argv[i] + 12);
		colon = strrchr(pat, ':');
		if (colon == NULL)
			continue;
		*colon++ = '\0';
		lvl = (unsigned int)strtoul(colon, NULL, 10);
		for (k = 0; k < RTE_DIM(names); k++)
			if (strcmp(colon, names[k]) == 0)
				lvl = k + 1;
		if (lvl >= 1 && lvl <= RTE_DIM(names))
			rte_log_set_level_pattern(pat, lvl);
	}
}

/* EAL arguments that only set log levels keep kvt's defaults. */
static int
only_log_levels(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++)
		if (strncmp(argv[i], "--log-level", 11) != 0)
			return 0;
	return 1;
}

static int
eal_start(int eal_argc, char **eal_argv)
{
	char lcores[1024], prefix[64], mem[16];
	char *args[64];
	int n = 0, i, ret;

	if (rte_lcore_count() > 0) {
		KVT_LOG(INFO, "EAL already initialised: attaching");
		if (eal_argc > 1)
			KVT_LOG(WARNING, "EAL arguments ignored: EAL is already running");
		return 0;
	}
	if (eal_argc > (int)RTE_DIM(args) - 1) {
		KVT_LOG(ERR, "%d EAL arguments: at most %u", eal_argc - 1,
			(unsigned int)RTE_DIM(args) - 2);
		return -EINVAL;
	}
	if (eal_argc > 1 && !only_log_levels(eal_argc, eal_argv)) {
		for (i = 0; i < eal_argc; i++)
			args[n++] = eal_argv[i];
	} else {
		ret = default_lcores_arg(lcores, sizeof(lcores),
					 kvt_eng->nports);
		if (ret < 0)
			return ret;
		snprintf(prefix, sizeof(prefix), "--file-prefix=" KVT_EAL_PREFIX "%d",
			 (int)getpid());
		snprintf(mem, sizeof(mem), "%u",
			 64 + kvt_eng->o.descs * 2 / 8192);
		kvt_eal_defaults = 1;
		args[n++] = eal_argc > 0 ? eal_argv[0] : (char *)"kvt";
		args[n++] = (char *)"--no-huge";
		args[n++] = (char *)"--no-pci";
		args[n++] = (char *)"--no-shconf";
		args[n++] = (char *)"--log-level=lib.eal:warning";
		args[n++] = (char *)"--log-level=lib.telemetry:error";
		args[n++] = (char *)"-m";
		args[n++] = mem;
		args[n++] = prefix;
		args[n++] = lcores;
		n += mempool_driver_arg(args + n);
		/* Log levels alone go on top of the defaults. */
		if (n + eal_argc - 1 > (int)RTE_DIM(args) - 1) {
			KVT_LOG(ERR, "%d log-level arguments: at most %d beside kvt's EAL defaults",
				eal_argc - 1, (int)RTE_DIM(args) - 1 - n);
			return -EINVAL;
		}
		for (i = 1; i < eal_argc; i++)
			args[n++] = eal_argv[i];
	}
	args[n] = NULL;
	ret = rte_eal_init(n, args);
	if (ret < 0) {
		KVT_LOG(ERR, "EAL initialisation failed: %s",
			rte_strerror(rte_errno));
		return -EIO;
	}
	kvt_eal_ours = 1;
	snprintf(kvt_eal_rundir, sizeof(kvt_eal_rundir), "%s",
		 rte_eal_get_runtime_dir());
	rundirs_reap(kvt_eal_rundir);
	kvt_eal_pid = getpid();
	atexit(eal_cleanup_at_exit);
	return 0;
}

static void
lcore_add(struct kvt_engine *e, unsigned int id)
{
	struct kvt_lcore *lc = &e->lcores[e->nlcores++];

	lc->id = id;
	lc->evfd = lc->epfd = -1;	/* made by kvt_lcores_start() */
}

/* Pick the worker lcores kvt runs its ports on. */
static int
lcores_pick(void)
{
	struct kvt_engine *e = kvt_eng;
	unsigned int i, id;

	if (e->o.n_lcores > 0) {
		for (i = 0; i < e->o.n_lcores; i++) {
			id = e->o.lcores[i];
			if (!rte_lcore_is_enabled(id) || id == rte_get_main_lcore() ||
			    rte_eal_get_lcore_state(id) != WAIT) {
				KVT_LOG(ERR, "--kvt-lcores: lcore %u is not an idle EAL worker", id);
				return -EINVAL;
			}
			lcore_add(e, id);
		}
		return 0;
	}
	RTE_LCORE_FOREACH_WORKER(id) {
		if (e->nlcores == KVT_MAX_LCORES)
			break;
		if (rte_eal_get_lcore_state(id) == WAIT)
			lcore_add(e, id);
	}
	return 0;
}

static int
pool_create(void)
{
	struct kvt_engine *e = kvt_eng;
	char name[RTE_MEMPOOL_NAMESIZE];

	snprintf(name, sizeof(name), "kvt_desc_%d", (int)getpid());
	e->pool = rte_mempool_create(name, e->o.descs - 1, sizeof(struct kvt_desc),
				     256, 0, NULL, NULL, NULL, NULL,
				     SOCKET_ID_ANY, 0);
	if (e->pool == NULL) {
		KVT_LOG(ERR, "descriptor pool: %s", rte_strerror(rte_errno));
		return -ENOMEM;
	}
	return 0;
}

/* Split argv into EAL's part and kvt's part. */
static void
split_args(int argc, char **argv, int *eal_argc, int *kvt_first)
{
	int i;

	*eal_argc = argc;
	*kvt_first = argc;
	if (argc > 1 && strncmp(argv[1], "--kvt-", 6) == 0) {
		*eal_argc = 1;
		*kvt_first = 1;
		return;
	}
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			*eal_argc = i;
			*kvt_first = i + 1;
			return;
		}
	}
}

static void
engine_free(void)
{
	kvt_opts_free(&kvt_eng->o);
	pthread_mutex_destroy(&kvt_eng->ctl_lock);
	free(kvt_eng);
	kvt_eng = NULL;
}

/* The lcores are stopped: each port stops, and what its stop hands back
 * settles here. */
static void
ports_stop(void)
{
	struct kvt_engine *e = kvt_eng;
	unsigned int i;

	for (i = 0; i < e->nports; i++) {
		if (e->ports[i]->pmd->ops->stop != NULL)
			e->ports[i]->pmd->ops->stop(e->ports[i]);
		kvt_port_settle(e->ports[i]);
	}
}

int
kvt_init(int argc, char **argv)
{
	struct kvt_engine *e;
	char err[256] = "";
	int eal_argc, kvt_first, consumed, ret;

	if (kvt_eng != NULL)
		return -EALREADY;
	if (argc < 0 || (argc > 0 && argv == NULL))
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return -ENOMEM;
	kvt_eng = e;
	pthread_mutex_init(&e->ctl_lock, NULL);
	e->listen_fd = -1;
	kvt_opts_defaults(&e->o);
	split_args(argc, argv, &eal_argc, &kvt_first);
	consumed = kvt_opts_parse(&e->o, argc - kvt_first, argv + kvt_first,
				  err, sizeof(err));
	if (consumed < 0) {
		KVT_LOG(ERR, "%s", err);
		ret = consumed;
		goto free_engine;
	}
	if (e->o.name[0] == '\0') {
		char host[40] = "kvt";

		gethostname(host, sizeof(host) - 1);
		snprintf(e->o.name, sizeof(e->o.name), "%.40s-%d", host,
			 (int)getpid());
	}
	kvt_host_id(e->env.host_id);
	e->env.slice = e->o.slice;
	e->env.timeout_ms = e->o.timeout_ms;
	e->env.nic_allow = e->o.nic;
	e->env.topo_file = e->o.topo;
	ret = kvt_pmds_env_check(&e->env);
	if (ret < 0)
		goto remove_ports;

	/* Ports are probed before EAL starts (the lcore list depends on
	 * them): their log levels are set first. */
	log_levels_early(eal_argc, argv);
	kvt_devs_probe();
	ret = kvt_ports_probe();
	if (ret < 0)
		goto remove_ports;
	ret = eal_start(eal_argc, argv);
	if (ret < 0)
		goto remove_ports;
	ret = lcores_pick();
	if (ret < 0)
		goto remove_ports;
	ret = kvt_ports_assign();
	if (ret < 0)
		goto remove_ports;
	ret = pool_create();
	if (ret < 0)
		goto remove_ports;
	ret = kvt_notify_init();
	if (ret < 0)
		goto mem_fini;
	ret = kvt_ports_start();
	if (ret < 0)
		goto stop_ports;
	ret = kvt_lcores_start();
	if (ret < 0)
		goto stop_ports;
	ret = kvt_ctl_start();
	if (ret < 0)
		goto stop_lcores;
	ret = kvt_meta_start();
	if (ret < 0)
		goto stop_ctl;
	kvt_stats_init();
	KVT_LOG(NOTICE, "engine %s listening on %s, %u port(s) on %u lcore(s)",
		e->o.name, e->listen_str, e->nports, e->nlcores);
	/* Like rte_eal_init: argv[ret] is the last argument kvt used. */
	return argc > 0 ? kvt_first - 1 + consumed : 0;

stop_ctl:
	kvt_ctl_stop();
stop_lcores:
	kvt_lcores_stop();
stop_ports:
	ports_stop();
	kvt_lcores_free();
	kvt_notify_fini();
mem_fini:
	kvt_mem_fini();
	rte_mempool_free(e->pool);
remove_ports:
	kvt_ports_remove();
free_engine:
	engine_free();
	return ret;
}

int
kvt_fini(void)
{
	struct kvt_engine *e = kvt_eng;

	if (e == NULL)
		return -ENODEV;
	kvt_meta_stop();
	kvt_ctl_stop();
	kvt_lcores_stop();
	ports_stop();
	kvt_batches_cancel_all();
	kvt_peers_close_all();
	kvt_notify_fini();
	kvt_fence_fini();
	kvt_mem_fini();
	kvt_ports_remove();
	kvt_lcores_free();
	rte_mempool_free(e->pool);
	engine_free();
	return 0;
}

const char *
kvt_name(void)
{
	return kvt_eng != NULL ? kvt_eng->o.name : NULL;
}

int
kvt_listen_addr(char *buf, size_t size)
{
	size_t n;

	if (kvt_eng == NULL)
		return -ENODEV;
	n = strlen(kvt_eng->listen_str);
	if (buf == NULL || n + 1 > size)
		return -ENOSPC;
	memcpy(buf, kvt_eng->listen_str, n + 1);
	return (int)n;
}
