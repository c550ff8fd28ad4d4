/* SPDX-License-Identifier: BSD-3-Clause */
/* kvfwd results: the table for people, JSON for scripts. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "kvfwd.h"

double
kvfwd_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void
kvfwd_start_at(double t)
{
	struct timespec ts;
	double now;

	if (t <= 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
	if (now > t) {
		fprintf(stderr, "kvfwd: --start-at passed %.3f s ago: starting now\n",
			now - t);
		return;
	}
	ts.tv_sec = (time_t)t;
	ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
	while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

void
kvfwd_fmt_bytes(char *buf, size_t len, double b)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, "%.2f %s", b, unit[u]);
}

/* The pattern of seed: a xorshift stream, different for every seed. */
static inline uint64_t
next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

void
kvfwd_pattern(void *p, uint64_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull | 1, v;
	uint8_t *b = p;
	uint64_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		v = next(&x);
		memcpy(b + i, &v, 8);
	}
	for (; i < len; i++)
		b[i] = (uint8_t)next(&x);
}

int
kvfwd_pattern_ok(const void *p, uint64_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull | 1, v;
	const uint8_t *b = p;
	uint64_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		v = next(&x);
		if (memcmp(b + i, &v, 8) != 0)
			return 0;
	}
	for (; i < len; i++)
		if (b[i] != (uint8_t)next(&x))
			return 0;
	return 1;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
pct(const double *v, size_t n, double p)
{
	size_t i;

	if (n == 0)
		return 0;
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

struct port_row {
	struct kvt_port_info info;
	uint64_t bytes;
};

/* Bytes each port moved during the timed part (warm-up excluded). */
static unsigned int
port_rows(const struct kvfwd_result *r, struct port_row *rows,
	  unsigned int max, uint64_t *total)
{
	struct kvt_port_stats st;
	unsigned int i, n = kvt_port_count();

	*total = 0;
	for (i = 0; i < n && i < max; i++) {
		kvt_port_info(i, &rows[i].info);
		kvt_port_stats(i, &st);
		rows[i].bytes = st.write_bytes + st.read_bytes - r->port_bytes0[i];
		*total += rows[i].bytes;
	}
	return i;
}

static void
report_json(const struct kvfwd_opts *o, const struct kvfwd_result *r,
	    struct port_row *rows, unsigned int nrows, uint64_t total)
{
	json_t *j = json_object(), *ports = json_array(), *p;
	double gbps = r->secs > 0 ? (double)r->bytes / r->secs / 1e9 : 0;
	unsigned int i;
	char *s;

	json_object_set_new(j, "op", json_string(o->op == KVT_OP_READ ? "read" : "write"));
	json_object_set_new(j, "block", json_integer((json_int_t)o->block));
	json_object_set_new(j, "batch", json_integer(o->batch));
	json_object_set_new(j, "depth", json_integer(o->depth));
	json_object_set_new(j, "threads", json_integer(o->threads));
	json_object_set_new(j, "bytes", json_integer((json_int_t)r->bytes));
	json_object_set_new(j, "requests", json_integer((json_int_t)r->requests));
	json_object_set_new(j, "seconds", json_real(r->secs));
	json_object_set_new(j, "gbps", json_real(gbps));
	json_object_set_new(j, "requests_per_s",
			    json_real(r->secs > 0 ? (double)r->requests / r->secs : 0));
	json_object_set_new(j, "errors", json_integer((json_int_t)r->errors));
	json_object_set_new(j, "req_p50_us", json_real(pct(r->req_lat, r->n_req_lat, 0.5)));
	json_object_set_new(j, "req_p99_us", json_real(pct(r->req_lat, r->n_req_lat, 0.99)));
	json_object_set_new(j, "req_p999_us", json_real(pct(r->req_lat, r->n_req_lat, 0.999)));
	json_object_set_new(j, "batch_p50_us", json_real(pct(r->batch_lat, r->n_batch_lat, 0.5)));
	json_object_set_new(j, "batch_p99_us", json_real(pct(r->batch_lat, r->n_batch_lat, 0.99)));
	json_object_set_new(j, "batch_p999_us", json_real(pct(r->batch_lat, r->n_batch_lat, 0.999)));
	for (i = 0; i < nrows; i++) {
		p = json_object();
		json_object_set_new(p, "name", json_string(rows[i].info.name));
		json_object_set_new(p, "pmd", json_string(rows[i].info.pmd));
		json_object_set_new(p, "bytes", json_integer((json_int_t)rows[i].bytes));
		json_object_set_new(p, "share", json_real(total ? (double)rows[i].bytes / (double)total : 0));
		json_array_append_new(ports, p);
	}
	json_object_set_new(j, "ports", ports);
	if (o->mixed) {
		json_object_set_new(j, "mixed_requests", json_integer((json_int_t)r->mixed_requests));
		json_object_set_new(j, "mixed_p50_us", json_real(pct(r->mixed_lat, r->n_mixed_lat, 0.5)));
		json_object_set_new(j, "mixed_p99_us", json_real(pct(r->mixed_lat, r->n_mixed_lat, 0.99)));
		json_object_set_new(j, "mixed_p999_us", json_real(pct(r->mixed_lat, r->n_mixed_lat, 0.999)));
	}
	if (r->ntargets > 1) {
		p = json_array();
		for (i = 0; i < r->ntargets; i++)
			json_array_append_new(p, json_integer((json_int_t)r->target_bytes[i]));
		json_object_set_new(j, "target_bytes", p);
	}
	if (r->verified) {
		json_object_set_new(j, "verify_checked", json_integer((json_int_t)r->checked));
		json_object_set_new(j, "verify_mixed", json_integer((json_int_t)r->mixed));
		json_object_set_new(j, "verify_stale", json_integer((json_int_t)r->stale));
	}
	if (r->baseline_name != NULL && r->baseline_gbps > 0) {
		json_object_set_new(j, "baseline", json_string(r->baseline_name));
		json_object_set_new(j, "baseline_gbps", json_real(r->baseline_gbps));
		json_object_set_new(j, "ratio", json_real(gbps / r->baseline_gbps));
	}
	s = json_dumps(j, JSON_COMPACT);
	printf("%s\n", s);
	free(s);
	json_decref(j);
}

void
kvfwd_report(const struct kvfwd_opts *o, struct kvfwd_result *r)
{
	struct port_row rows[64];
	unsigned int n, i;
	uint64_t total;
	double gbps = r->secs > 0 ? (double)r->bytes / r->secs / 1e9 : 0;
	char a[32], b[32];

	qsort(r->req_lat, r->n_req_lat, sizeof(double), cmp_double);
	qsort(r->batch_lat, r->n_batch_lat, sizeof(double), cmp_double);
	if (r->mixed_lat != NULL)
		qsort(r->mixed_lat, r->n_mixed_lat, sizeof(double), cmp_double);
	n = port_rows(r, rows, 64, &total);
	if (o->json) {
		report_json(o, r, rows, n, total);
		return;
	}
	kvfwd_fmt_bytes(a, sizeof(a), (double)r->bytes);
	kvfwd_fmt_bytes(b, sizeof(b), (double)o->block);
	printf("kvfwd: %s %s in %s blocks, batch %u, depth %u, %u thread(s), %.2f s\n",
	       o->op == KVT_OP_READ ? "read" : "write", a, b, o->batch,
	       o->depth, o->threads, r->secs);
	printf("  throughput     %10.2f GB/s   %12.0f req/s   errors %" PRIu64 "\n",
	       gbps, r->secs > 0 ? (double)r->requests / r->secs : 0, r->errors);
	printf("  latency/req    p50 %9.1f us   p99 %9.1f us   p999 %9.1f us\n",
	       pct(r->req_lat, r->n_req_lat, 0.5), pct(r->req_lat, r->n_req_lat, 0.99),
	       pct(r->req_lat, r->n_req_lat, 0.999));
	printf("  latency/batch  p50 %9.1f us   p99 %9.1f us   p999 %9.1f us\n",
	       pct(r->batch_lat, r->n_batch_lat, 0.5),
	       pct(r->batch_lat, r->n_batch_lat, 0.99),
	       pct(r->batch_lat, r->n_batch_lat, 0.999));
	if (o->mixed)
		printf("  mixed 4K/req   p50 %9.1f us   p99 %9.1f us   p999 %9.1f us   (%" PRIu64 " requests)\n",
		       pct(r->mixed_lat, r->n_mixed_lat, 0.5),
		       pct(r->mixed_lat, r->n_mixed_lat, 0.99),
		       pct(r->mixed_lat, r->n_mixed_lat, 0.999), r->mixed_requests);
	printf("  %-16s %-8s %14s %8s\n", "port", "pmd", "bytes", "share");
	for (i = 0; i < n; i++) {
		kvfwd_fmt_bytes(a, sizeof(a), (double)rows[i].bytes);
		printf("  %-16s %-8s %14s %7.1f%%\n", rows[i].info.name,
		       rows[i].info.pmd, a,
		       total ? 100.0 * (double)rows[i].bytes / (double)total : 0.0);
	}
	if (r->verified)
		printf("  verify         %" PRIu64 " blocks checked where they landed, %" PRIu64 " mixed, %" PRIu64 " stale\n",
		       r->checked, r->mixed, r->stale);
	if (r->baseline_name != NULL && r->baseline_gbps > 0)
		printf("  baseline       %s %.2f GB/s   ratio %.2f\n",
		       r->baseline_name, r->baseline_gbps, gbps / r->baseline_gbps);
	else if (r->baseline_name != NULL)
		printf("  baseline       %s: not measured here\n", r->baseline_name);
}
