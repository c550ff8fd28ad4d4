/* SPDX-License-Identifier: BSD-3-Clause */
/* Small helpers shared by the engine and the PMDs. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_kvargs.h>

#include "kvt_private.h"

int
kvt_buf_put(struct kvt_buf *b, const void *p, size_t n)
{
	size_t cap;
	uint8_t *d;

	if (b->len + n > b->cap) {
		cap = b->cap != 0 ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		d = realloc(b->data, cap);
		if (d == NULL)
			return -ENOMEM;
		b->data = d;
		b->cap = cap;
	}
	if (p != NULL)
		memcpy(b->data + b->len, p, n);
	else if (n != 0)
		memset(b->data + b->len, 0, n);
	b->len += n;
	return 0;
}

void
kvt_buf_free(struct kvt_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

uint64_t
kvt_now_us(void)
{
	static uint64_t hz_cache;	/* any thread may fill it: atomic */
	uint64_t hz = __atomic_load_n(&hz_cache, __ATOMIC_RELAXED);
	struct timespec ts;

	/* The TSC keeps the hot path free of clock system calls; before EAL
	 * measured its rate, fall back to the monotonic clock. */
	if (hz == 0) {
		hz = rte_get_tsc_hz();
		__atomic_store_n(&hz_cache, hz, __ATOMIC_RELAXED);
	}
	if (hz != 0)
		return (uint64_t)((__uint128_t)rte_get_tsc_cycles() * 1000000 /
				  hz);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

#define KVT_REFUSE_PER_SEC 10

int
kvt_refuse(int err, const char *fmt, ...)
{
	static uint64_t window, printed, dropped;
	uint64_t now = kvt_now_us() / 1000000, w, d;
	char msg[512];
	va_list ap;

	/* Racy counters are fine: this only decides what to print. */
	w = __atomic_load_n(&window, __ATOMIC_RELAXED);
	if (w != now) {
		__atomic_store_n(&window, now, __ATOMIC_RELAXED);
		__atomic_store_n(&printed, 0, __ATOMIC_RELAXED);
		d = __atomic_exchange_n(&dropped, 0, __ATOMIC_RELAXED);
		if (d != 0)
			KVT_LOG(ERR, "%" PRIu64 " more refusals not shown", d);
	}
	if (__atomic_fetch_add(&printed, 1, __ATOMIC_RELAXED) >=
	    KVT_REFUSE_PER_SEC) {
		__atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED);
		return -err;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	KVT_LOG(ERR, "%s", msg);
	return -err;
}

int
kvt_kv_long(const struct rte_kvargs *kv, const char *key, long lo, long hi,
	    long *out)
{
	const char *v = rte_kvargs_get(kv, key);
	char *end;
	long n;

	if (v == NULL)
		return 0;
	errno = 0;
	n = strtol(v, &end, 10);
	if (end == v || *end != '\0' || errno != 0 || n < lo || n > hi) {
		KVT_LOG(ERR, "PMD option %s=%s: a number in %ld..%ld", key, v,
			lo, hi);
		return -EINVAL;
	}
	*out = n;
	return 0;
}

int
kvt_probe_ports(const struct kvt_pmd *pmd, const char *args,
		const char *prefix, long max)
{
	static const char *const keys[] = { "ports", NULL };
	struct rte_kvargs *kv;
	char name[32];
	long n = 1, i;
	int ret;

	if (args != NULL && *args != '\0') {
		kv = rte_kvargs_parse(args, keys);
		if (kv == NULL)
			return -EINVAL;
		ret = kvt_kv_long(kv, "ports", 1, max, &n);
		rte_kvargs_free(kv);
		if (ret < 0)
			return ret;
	}
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%s%ld", prefix, i);
		if (kvt_port_create(pmd, name, -1, NULL) == NULL)
			return -ENOSPC;
	}
	return 0;
}

int
kvt_sysfs_int(const char *path, int dflt)
{
	FILE *f = fopen(path, "r");
	int v;

	if (f == NULL)
		return dflt;
	if (fscanf(f, "%d", &v) != 1)
		v = dflt;
	fclose(f);
	return v;
}

int
kvt_connect_wait(int fd, uint64_t deadline_us)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t sl = sizeof(int);
	uint64_t now;
	int err = 0, ret;

	for (;;) {
		now = kvt_now_us();
		ret = poll(&pfd, 1, now >= deadline_us ? 0 :
			   (int)((deadline_us - now + 999) / 1000));
		if (ret > 0)
			break;
		if (ret == 0 && kvt_now_us() >= deadline_us)
			return -ETIMEDOUT;
		if (ret < 0 && errno != EINTR)
			return -errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0)
		return -errno;
	return -err;
}
