/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt's own options, the ones after EAL's "--".  getopt_long does the
 * parsing; this file turns values into settings and says exactly which
 * option was wrong.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "kvt_private.h"

enum {
	OPT_NAME = 256,
	OPT_LISTEN,
	OPT_SECRET,
	OPT_PMD,
	OPT_NIC,
	OPT_IDLE,
	OPT_SLICE,
	OPT_LCORES,
	OPT_TIMEOUT,
	OPT_DESCS,
	OPT_TOPO,
	OPT_META,
	OPT_CLUSTER,
};

static const struct option kvt_long_opts[] = {
	{ "kvt-name", required_argument, NULL, OPT_NAME },
	{ "kvt-listen", required_argument, NULL, OPT_LISTEN },
	{ "kvt-secret", required_argument, NULL, OPT_SECRET },
	{ "kvt-pmd", required_argument, NULL, OPT_PMD },
	{ "kvt-nic", required_argument, NULL, OPT_NIC },
	{ "kvt-idle", required_argument, NULL, OPT_IDLE },
	{ "kvt-slice", required_argument, NULL, OPT_SLICE },
	{ "kvt-lcores", required_argument, NULL, OPT_LCORES },
	{ "kvt-timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "kvt-descs", required_argument, NULL, OPT_DESCS },
	{ "kvt-topo", required_argument, NULL, OPT_TOPO },
	{ "kvt-meta", required_argument, NULL, OPT_META },
	{ "kvt-cluster", required_argument, NULL, OPT_CLUSTER },
	{ NULL, 0, NULL, 0 },
};

#define KVT_SLICE_MIN 256u
#define KVT_SLICE_MAX (64u << 20)

void
kvt_opts_defaults(struct kvt_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->idle = KVT_IDLE_WAIT;
	o->idle_us = KVT_IDLE_GRACE_US;
	o->slice = 64 << 10;
	o->timeout_ms = 1000;
	o->descs = 1 << 16;
	strcpy(o->listen, "0.0.0.0:0");
	strcpy(o->cluster, "default");
}

void
kvt_opts_free(struct kvt_opts *o)
{
	unsigned int i;

	for (i = 0; i < o->n_pmd_args; i++)
		free(o->pmd_args[i]);
	o->n_pmd_args = 0;
	free(o->nic);
	free(o->topo);
	free(o->meta);
	o->nic = o->topo = o->meta = NULL;
}

int
kvt_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned int shift = 0;
	char *end;

	if (s == NULL || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno != 0)
		return -EINVAL;
	switch (*end) {
	case '\0':
		break;
	case 'k': case 'K':
		shift = 10;
		break;
	case 'm': case 'M':
		shift = 20;
		break;
	case 'g': case 'G':
		shift = 30;
		break;
	default:
		return -EINVAL;
	}
	if (shift != 0) {
		/* A size past 2^64 must not wrap into a small one. */
		if (v > (UINT64_MAX >> shift))
			return -ERANGE;
		v <<= shift;
		end++;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

static int
parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	unsigned long v;
	char *end;

	if (s == NULL || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int
kvt_parse_addr(const char *s, struct sockaddr_in *sa)
{
	struct addrinfo hints = { .ai_family = AF_INET,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	char host[128];
	const char *colon;
	uint32_t port;
	size_t hl;

	if (s == NULL)
		return -EINVAL;
	colon = strrchr(s, ':');
	if (colon == NULL || colon == s)
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (parse_u32(colon + 1, 0, 65535, &port) < 0)
		return -EINVAL;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa->sin_addr) == 1)
		return 0;
	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return -EINVAL;
	sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
	freeaddrinfo(res);
	return 0;
}

int
kvt_parse_loc(const char *s, struct kvt_loc *loc)
{
	uint32_t id;

	if (s == NULL)
		return -EINVAL;
	if (strncmp(s, "cpu:", 4) == 0) {
		loc->type = KVT_LOC_CPU;
		s += 4;
	} else if (strncmp(s, "cuda:", 5) == 0) {
		loc->type = KVT_LOC_CUDA;
		s += 5;
	} else {
		return -EINVAL;
	}
	if (parse_u32(s, 0, 1023, &id) < 0)
		return -EINVAL;
	loc->id = (int16_t)id;
	return 0;
}

void
kvt_loc_str(const struct kvt_loc *loc, char *buf, size_t len)
{
	snprintf(buf, len, "%s:%d", loc->type == KVT_LOC_CUDA ? "cuda" : "cpu",
		 loc->id);
}

int
kvt_parse_idle(const char *v, enum kvt_idle *idle, uint32_t *us)
{
	if (v == NULL)
		return -EINVAL;
	if (strcmp(v, "spin") == 0) {
		*idle = KVT_IDLE_SPIN;
		return 0;
	}
	if (strcmp(v, "pause") == 0) {
		*idle = KVT_IDLE_PAUSE;
		return 0;
	}
	if (strncmp(v, "sleep:", 6) == 0 &&
	    parse_u32(v + 6, 1, 1000000, us) == 0) {
		*idle = KVT_IDLE_SLEEP;
		return 0;
	}
	/* wait[:US]: stay hot US after the last work, then block. */
	if (strcmp(v, "wait") == 0) {
		*idle = KVT_IDLE_WAIT;
		*us = KVT_IDLE_GRACE_US;
		return 0;
	}
	if (strncmp(v, "wait:", 5) == 0 &&
	    parse_u32(v + 5, 0, 10000000, us) == 0) {
		*idle = KVT_IDLE_WAIT;
		return 0;
	}
	return -EINVAL;
}

/* "1,3-4" into lcore ids. */
static int
parse_lcores(struct kvt_opts *o, const char *v)
{
	const char *p = v;
	unsigned long a, b;
	char *end;

	o->n_lcores = 0;
	while (*p != '\0') {
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		a = strtoul(p, &end, 10);
		b = a;
		if (*end == '-') {
			if (!isdigit((unsigned char)end[1]))
				return -EINVAL;
			b = strtoul(end + 1, &end, 10);
		}
		if (b < a || b >= RTE_MAX_LCORE)
			return -EINVAL;
		for (; a <= b; a++) {
			if (o->n_lcores == KVT_MAX_LCORES)
				return -EINVAL;
			o->lcores[o->n_lcores++] = (unsigned int)a;
		}
		if (*end == ',')
			end++;
		else if (*end != '\0')
			return -EINVAL;
		p = end;
	}
	return o->n_lcores > 0 ? 0 : -EINVAL;
}

static int
parse_meta(const char *v)
{
	if (strcmp(v, "p2p") == 0)
		return 0;
	if (strncmp(v, "etcd://", 7) == 0 && v[7] != '\0')
		return 0;
	return -EINVAL;
}

static int
valid_name(const char *v, size_t max)
{
	size_t i, n = strlen(v);

	if (n == 0 || n >= max)
		return 0;
	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)v[i]) && strchr("-_.:", v[i]) == NULL)
			return 0;
	return 1;
}

static int
set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = strdup(v);
	return *dst != NULL ? 0 : -ENOMEM;
}

/* Apply one option; @return 0 or -EINVAL with a message in err. */
static int
apply_opt(struct kvt_opts *o, int c, const char *v, char *err, size_t errlen)
{
	struct sockaddr_in sa;
	uint64_t sz;

	switch (c) {
	case OPT_NAME:
		if (!valid_name(v, sizeof(o->name)))
			goto bad;
		strcpy(o->name, v);
		return 0;
	case OPT_LISTEN:
		if (strlen(v) >= sizeof(o->listen) || kvt_parse_addr(v, &sa) < 0)
			goto bad;
		strcpy(o->listen, v);
		return 0;
	case OPT_SECRET:
		if (strlen(v) == 0 || strlen(v) >= sizeof(o->secret))
			goto bad;
		strcpy(o->secret, v);
		return 0;
	case OPT_PMD:
		if (o->n_pmd_args == KVT_MAX_PMD_ARGS || !isalpha((unsigned char)*v))
			goto bad;
		o->pmd_args[o->n_pmd_args] = strdup(v);
		if (o->pmd_args[o->n_pmd_args] == NULL)
			return -ENOMEM;
		o->n_pmd_args++;
		return 0;
	case OPT_NIC:
		if (*v == '\0')
			goto bad;
		return set_str(&o->nic, v);
	case OPT_IDLE:
		if (kvt_parse_idle(v, &o->idle, &o->idle_us) < 0)
			goto bad;
		return 0;
	case OPT_SLICE:
		if (kvt_parse_size(v, &sz) < 0 || sz < KVT_SLICE_MIN ||
		    sz > KVT_SLICE_MAX)
			goto bad;
		o->slice = (uint32_t)sz;
		return 0;
	case OPT_LCORES:
		if (parse_lcores(o, v) < 0)
			goto bad;
		return 0;
	case OPT_TIMEOUT:
		if (parse_u32(v, 10, 3600000, &o->timeout_ms) < 0)
			goto bad;
		return 0;
	case OPT_DESCS:
		if (parse_u32(v, 1024, 1u << 24, &o->descs) < 0)
			goto bad;
		return 0;
	case OPT_TOPO:
		return set_str(&o->topo, v);
	case OPT_META:
		if (parse_meta(v) < 0)
			goto bad;
		return set_str(&o->meta, v);
	case OPT_CLUSTER:
		if (!valid_name(v, sizeof(o->cluster)))
			goto bad;
		strcpy(o->cluster, v);
		return 0;
	}
bad:
	snprintf(err, errlen, "invalid value '%s' for --%s", v,
		 kvt_long_opts[c - OPT_NAME].name);
	return -EINVAL;
}

int
kvt_opts_parse(struct kvt_opts *o, int argc, char **argv, char *err,
	       size_t errlen)
{
	int n = 0, c, idx, ret;

	/* Count the leading kvt options (and their values). */
	while (n < argc && strncmp(argv[n], "--kvt-", 6) == 0) {
		n += strchr(argv[n], '=') != NULL ? 1 : 2;
	}
	if (n > argc) {
		snprintf(err, errlen, "option '%s' needs a value", argv[argc - 1]);
		return -EINVAL;
	}
	if (n == 0)
		return 0;

	{
		/* getopt wants argv[0] to be the program name. */
		char *args[n + 2];
		int i;

		args[0] = (char *)"kvt";
		for (i = 0; i < n; i++)
			args[i + 1] = argv[i];
		args[n + 1] = NULL;
		optind = 0;	/* glibc: start afresh, whatever ran before */
		opterr = 0;
		while ((c = getopt_long(n + 1, args, "+", kvt_long_opts, &idx))
		       != -1) {
			if (c == '?' || c == ':') {
				snprintf(err, errlen, "unknown option '%s' or missing value",
					 args[optind - 1]);
				return -EINVAL;
			}
			ret = apply_opt(o, c, optarg, err, errlen);
			if (ret < 0)
				return ret;
		}
		if (optind != n + 1) {
			snprintf(err, errlen, "unexpected argument '%s'", args[optind]);
			return -EINVAL;
		}
	}
	return n;
}
