/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Preloaded into processes built with -finstrument-functions: each
 * thread's function entries and exits (time, function address) go to a
 * ring of the last RW_EVENTS; at exit, the process writes its code
 * mappings and every ring to $KVT_ROUTE_DIR/trace.PID for count.py.
 * Not itself instrumented (scripts/route-walk compiles it apart).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#define RW_EVENTS (1u << 20)

struct rw_event {
	uint64_t ns;
	void *fn;
	uint8_t enter;
};

struct rw_ring {
	struct rw_event *ev;
	uint64_t n;
	pid_t tid;
	struct rw_ring *next;
};

static __thread struct rw_ring *mine;
static __thread int busy;
static struct rw_ring *rings;
static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;

static struct rw_ring *
ring_new(void)
{
	struct rw_ring *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->ev = malloc(sizeof(*r->ev) * RW_EVENTS);
	if (r->ev == NULL) {
		free(r);
		return NULL;
	}
	r->tid = (pid_t)syscall(SYS_gettid);
	pthread_mutex_lock(&rings_lock);
	r->next = rings;
	rings = r;
	pthread_mutex_unlock(&rings_lock);
	return r;
}

static void
record(void *fn, uint8_t enter)
{
	struct rw_event *e;
	struct timespec ts;

	if (busy)
		return;
	busy = 1;
	if (mine == NULL)
		mine = ring_new();
	if (mine != NULL) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		e = &mine->ev[mine->n % RW_EVENTS];
		e->ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		e->fn = fn;
		e->enter = enter;
		__atomic_store_n(&mine->n, mine->n + 1, __ATOMIC_RELEASE);
	}
	busy = 0;
}

void
__cyg_profile_func_enter(void *fn, void *site)
{
	(void)site;
	record(fn, 1);
}

void
__cyg_profile_func_exit(void *fn, void *site)
{
	(void)site;
	record(fn, 0);
}

static void
dump_maps(FILE *out)
{
	FILE *m = fopen("/proc/self/maps", "r");
	unsigned long lo, hi, off;
	char line[4096], perms[8], path[4000];

	if (m == NULL)
		return;
	while (fgets(line, sizeof(line), m) != NULL) {
		path[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %3999s", &lo, &hi,
			   perms, &off, path) >= 4 &&
		    perms[2] == 'x' && path[0] == '/')
			fprintf(out, "M %lx %lx %lx %s\n", lo, hi, off, path);
	}
	fclose(m);
}

__attribute__((destructor)) static void
dump(void)
{
	const char *dir = getenv("KVT_ROUTE_DIR");
	struct rw_ring *r;
	uint64_t i, n, first;
	char name[4200];
	FILE *out;

	busy = 1;
	if (dir == NULL)
		return;
	snprintf(name, sizeof(name), "%s/trace.%d", dir, (int)getpid());
	out = fopen(name, "w");
	if (out == NULL)
		return;
	dump_maps(out);
	pthread_mutex_lock(&rings_lock);
	for (r = rings; r != NULL; r = r->next) {
		n = __atomic_load_n(&r->n, __ATOMIC_ACQUIRE);
		first = n > RW_EVENTS ? n - RW_EVENTS : 0;
		fprintf(out, "T %d %" PRIu64 "\n", (int)r->tid, first);
		for (i = first; i < n; i++) {
			struct rw_event *e = &r->ev[i % RW_EVENTS];

			fprintf(out, "%c %" PRIu64 " %lx\n", e->enter ? 'E' : 'X',
				e->ns, (unsigned long)(uintptr_t)e->fn);
		}
	}
	pthread_mutex_unlock(&rings_lock);
	fclose(out);
}
