/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Cluster metadata in etcd (--kvt-meta etcd://host:port[,host:port...]).
 *
 * The engine publishes a descriptor (name, control address, pid, regions,
 * ports) under <prefix>/<cluster>/engines/<name>, attached to a lease a
 * "kvt-meta" thread keeps alive; the key is created only if absent, so a
 * live engine's name cannot be taken; at kvt_fini the key and lease go.
 * kvt_peer_open(name) reads the key and then connects as with the P2P
 * handshake.  Everything after that is P2P: an etcd outage stops name
 * lookups, not transfers between peers already open.
 *
 * Client: etcd's v3 JSON gateway over HTTP (http.c), parsed with
 * jansson; every answer is checked before it is used.  Base64 (the
 * gateway's encoding of keys and values) is written here: jansson does
 * not offer it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <rte_errno.h>

#include "kvt_private.h"

#define META_PREFIX "/kvt"
#define META_MAX_ENDPOINTS 8
#define META_HTTP_MS 1000
#define META_ANSWER_MAX (1u << 20)

static struct {
	char ep[META_MAX_ENDPOINTS][128];	/* "http://host:port" */
	unsigned int nep;
	unsigned int cur;	/* the endpoint that answered last */
	char key[256];
	int64_t lease;
	unsigned int ttl;
	pthread_t thread;
	int running;
	int listed;		/* our key holds our name */
	int dirty;		/* regions changed: publish again */
	pthread_mutex_t lock;
	pthread_cond_t cond;
} meta = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

int
kvt_meta_enabled(void)
{
	return meta.nep > 0;
}

/* ---- base64 ---- */

static const char b64[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *
b64_encode(const void *in, size_t n)
{
	const uint8_t *p = in;
	char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
	size_t i;
	uint32_t v;

	if (out == NULL)
		return NULL;
	for (i = 0; i + 2 < n; i += 3) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = b64[v >> 18];
		*o++ = b64[(v >> 12) & 63];
		*o++ = b64[(v >> 6) & 63];
		*o++ = b64[v & 63];
	}
	if (i < n) {
		v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
		*o++ = b64[v >> 18];
		*o++ = b64[(v >> 12) & 63];
		*o++ = i + 1 < n ? b64[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return out;
}

/* @return bytes decoded into out (NUL-terminated), or -1. */
static int
b64_decode(const char *in, char *out, size_t cap)
{
	size_t n = strlen(in), i, o = 0;
	uint32_t v = 0;
	int bits = 0;
	const char *c;

	for (i = 0; i < n && in[i] != '='; i++) {
		c = strchr(b64, in[i]);
		if (c == NULL || in[i] == '\0')
			return -1;
		v = v << 6 | (uint32_t)(c - b64);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o + 1 >= cap)
				return -1;
			out[o++] = (char)(v >> bits);
		}
	}
	out[o] = '\0';
	return (int)o;
}

/* ---- HTTP ---- */

/*
 * POST body to path on the first endpoint that answers.  @return the
 * parsed JSON answer (caller frees), or NULL with *err set: -EHOSTUNREACH
 * (no endpoint answered), -EPROTO (not JSON, or an error answer).
 */
static json_t *
post_within(const char *path, json_t *body, int *err, uint64_t deadline_us)
{
	char url[256], *text = json_dumps(body, JSON_COMPACT), *answer = NULL;
	json_t *res = NULL;
	unsigned int i, k;
	uint64_t now;
	long code = 0;
	int ret;

	*err = -EHOSTUNREACH;
	if (text == NULL) {
		*err = -ENOMEM;
		return NULL;
	}
	for (i = 0; i < meta.nep && res == NULL; i++) {
		now = kvt_now_us();
		if (now >= deadline_us) {
			*err = -ETIMEDOUT;
			break;
		}
		k = (meta.cur + i) % meta.nep;
		snprintf(url, sizeof(url), "%s%s", meta.ep[k], path);
		free(answer);
		answer = NULL;
		ret = kvt_http_post(url, text,
				    RTE_MIN(deadline_us, now + META_HTTP_MS * 1000ull),
				    META_ANSWER_MAX, &code, &answer);
		if (ret < 0)
			continue;
		res = json_loads(answer, 0, NULL);
		if (res == NULL || !json_is_object(res) || code != 200 ||
		    json_object_get(res, "error") != NULL) {
			/* A member that cannot serve (a learner answers 503)
			 * does not speak for the cluster: ask the next. */
			KVT_LOG(WARNING, "etcd %s%s answered %ld: %.200s", meta.ep[k],
				path, code, answer);
			json_decref(res);
			res = NULL;
			*err = -EPROTO;
			continue;
		}
		meta.cur = k;
	}
	if (res == NULL && *err == -EHOSTUNREACH && kvt_now_us() >= deadline_us)
		*err = -ETIMEDOUT;
	free(answer);
	free(text);
	return res;
}

/* POST with the usual bound: each endpoint gets META_HTTP_MS. */
static json_t *
post(const char *path, json_t *body, int *err)
{
	return post_within(path, body, err,
			   kvt_now_us() + 1000ull * META_HTTP_MS * meta.nep);
}

/* etcd's int64 fields arrive as JSON strings. */
static int
get_i64(json_t *o, const char *name, int64_t *out)
{
	json_t *v = json_object_get(o, name);
	char *end;

	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v))
		return -EPROTO;
	*out = strtoll(json_string_value(v), &end, 10);
	return *end == '\0' ? 0 : -EPROTO;
}

/* ---- the descriptor ---- */

static char *
descriptor(void)
{
	struct kvt_port_info pi;
	json_t *d = json_object(), *ports = json_array(), *regions;
	char hex[65];
	unsigned int i;
	char *s;

	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", kvt_eng->env.host_id[i]);
	json_object_set_new(d, "name", json_string(kvt_eng->o.name));
	json_object_set_new(d, "addr", json_string(kvt_eng->listen_str));
	json_object_set_new(d, "pid", json_integer(getpid()));
	json_object_set_new(d, "host", json_string(hex));
	for (i = 0; i < kvt_port_count(); i++) {
		kvt_port_info(i, &pi);
		json_array_append_new(ports, json_pack("{s:s,s:s}", "name", pi.name,
						       "pmd", pi.pmd));
	}
	json_object_set_new(d, "ports", ports);
	regions = kvt_mem_export_json();
	json_object_set_new(d, "regions", regions != NULL ? regions : json_array());
	s = json_dumps(d, JSON_COMPACT);
	json_decref(d);
	return s;
}

static int
grant(void)
{
	json_t *req = json_pack("{s:I}", "TTL", (json_int_t)meta.ttl), *res;
	int64_t id = 0;
	int err;

	res = post("/v3/lease/grant", req, &err);
	json_decref(req);
	if (res == NULL)
		return err;
	err = get_i64(res, "ID", &id);
	json_decref(res);
	if (err < 0 || id == 0)
		return -EPROTO;
	meta.lease = id;
	return 0;
}

/* The condition "the key is held by our lease": an engine that stalled
 * past its lease must not overwrite or delete the key of an engine that
 * took the name meanwhile. */
static json_t *
ours(const char *k64)
{
	char lease[24];

	snprintf(lease, sizeof(lease), "%" PRId64, meta.lease);
	return json_pack("{s:s,s:s,s:s,s:s}", "key", k64, "target", "LEASE",
			 "result", "EQUAL", "lease", lease);
}

/* Put the descriptor: only if absent (first time), else only while the
 * key is ours.  @return 0, -EEXIST (the key is not ours), or an error. */
static int
publish(int create)
{
	char *val = descriptor(), *k = b64_encode(meta.key, strlen(meta.key));
	char *v = val != NULL ? b64_encode(val, strlen(val)) : NULL;
	json_t *put, *req, *res;
	int err = -ENOMEM;

	if (k == NULL || v == NULL)
		goto out;
	put = json_pack("{s:s,s:s,s:I}", "key", k, "value", v, "lease",
			(json_int_t)meta.lease);
	if (create)
		req = json_pack("{s:[{s:s,s:s,s:s}],s:[{s:o}]}",
				"compare", "key", k, "target", "CREATE",
				"create_revision", "0",
				"success", "request_put", put);
	else
		req = json_pack("{s:[o],s:[{s:o}]}", "compare", ours(k),
				"success", "request_put", put);
	res = post("/v3/kv/txn", req, &err);
	json_decref(req);
	if (res == NULL)
		goto out;
	err = json_is_true(json_object_get(res, "succeeded")) ? 0 : -EEXIST;
	json_decref(res);
out:
	free(val);
	free(k);
	free(v);
	return err;
}

static int
keepalive(void)
{
	json_t *req = json_pack("{s:I}", "ID", (json_int_t)meta.lease), *res;
	json_t *r;
	int64_t ttl = 0;
	int err;

	res = post("/v3/lease/keepalive", req, &err);
	json_decref(req);
	if (res == NULL)
		return err;
	r = json_object_get(res, "result");
	/* No TTL in the answer: the lease is gone (expired during an
	 * outage). */
	err = r != NULL && get_i64(r, "TTL", &ttl) == 0 && ttl > 0 ? 0 : -ENOENT;
	json_decref(res);
	return err;
}

static void
lease_revoke(void)
{
	json_t *req = json_pack("{s:I}", "ID", (json_int_t)meta.lease), *res;
	int err;

	res = post("/v3/lease/revoke", req, &err);
	json_decref(req);
	json_decref(res);
}

/* Our key goes (only if it is still ours), then our lease. */
static void
unpublish(void)
{
	char *k = b64_encode(meta.key, strlen(meta.key));
	json_t *req, *res;
	int err;

	if (k != NULL && meta.listed) {
		req = json_pack("{s:[o],s:[{s:{s:s}}]}", "compare", ours(k),
				"success", "request_delete_range", "key", k);
		res = post("/v3/kv/txn", req, &err);
		json_decref(req);
		json_decref(res);
	}
	free(k);
	lease_revoke();
}

/*
 * The name was lost while our lease had lapsed: take it back if it is
 * free, else stay unlisted (with no lease kept alive for nothing).
 * @return 0 listed again, -EEXIST still taken, or an error.
 */
static int
relist(void)
{
	int ret = grant();

	if (ret == 0)
		ret = publish(1);
	if (ret == -EEXIST)
		lease_revoke();
	if (ret == 0) {
		meta.listed = 1;
		KVT_LOG(NOTICE, "engine name %s is free again: listed", meta.key);
	}
	return ret;
}

static void
lost_name(void)
{
	meta.listed = 0;
	KVT_LOG(ERR, "engine name %s was taken by another engine while this one's lease had lapsed: this engine is no longer listed (it takes the name back once it is free)",
		meta.key);
}

/* The lease is kept alive every ttl/3; regions changes are published. */
static void *
meta_main(void *arg)
{
	struct timespec ts;
	int ret, lost = 0;

	RTE_SET_USED(arg);
	pthread_mutex_lock(&meta.lock);
	while (meta.running) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)meta.ttl * 1000000000L / 3 % 1000000000L;
		ts.tv_sec += (time_t)meta.ttl / 3 + ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		if (!meta.dirty)
			pthread_cond_timedwait(&meta.cond, &meta.lock, &ts);
		if (!meta.running)
			break;
		pthread_mutex_unlock(&meta.lock);
		if (!meta.listed) {
			ret = relist();
			if (ret == -EEXIST)
				ret = 0;	/* still taken: nothing to report */
		} else {
			ret = keepalive();
			if (ret == -ENOENT) {
				/* Expired while we were away: start over, if
				 * nobody took the name meanwhile. */
				KVT_LOG(WARNING, "etcd lease lost: publishing %s again",
					meta.key);
				ret = grant();
				if (ret == 0)
					ret = publish(1);
			} else if (ret == 0 && __atomic_exchange_n(&meta.dirty, 0,
								   __ATOMIC_ACQ_REL)) {
				ret = publish(0);
			}
			if (ret == -EEXIST) {
				lease_revoke();
				lost_name();
				ret = 0;
			}
		}
		if (ret < 0 && !lost)
			KVT_LOG(ERR, "etcd unreachable (%s): open peers keep working, lookups by name fail",
				strerror(-ret));
		else if (ret == 0 && lost)
			KVT_LOG(NOTICE, "etcd reachable again");
		lost = ret < 0;
		pthread_mutex_lock(&meta.lock);
	}
	pthread_mutex_unlock(&meta.lock);
	return NULL;
}

static int
parse_endpoints(const char *url)
{
	const char *p = url + strlen("etcd://"), *end;
	size_t n;

	meta.nep = 0;
	while (*p != '\0' && meta.nep < META_MAX_ENDPOINTS) {
		end = strchr(p, ',');
		n = end != NULL ? (size_t)(end - p) : strlen(p);
		if (n == 0 || n > 100)
			return -EINVAL;
		snprintf(meta.ep[meta.nep++], sizeof(meta.ep[0]), "http://%.*s",
			 (int)n, p);
		p += n + (end != NULL);
	}
	return meta.nep > 0 ? 0 : -EINVAL;
}

/* The registry's event: the descriptor lists exported regions, so the
 * publishing thread writes it again. */
static void
regions_changed(const struct kvt_mem *m, int added, void *arg)
{
	RTE_SET_USED(m);
	RTE_SET_USED(added);
	RTE_SET_USED(arg);
	pthread_mutex_lock(&meta.lock);
	meta.dirty = 1;
	pthread_cond_signal(&meta.cond);
	pthread_mutex_unlock(&meta.lock);
}

int
kvt_meta_start(void)
{
	const char *url = kvt_eng->o.meta;
	int ret;

	meta.nep = 0;
	if (url == NULL || strcmp(url, "p2p") == 0)
		return 0;
	ret = parse_endpoints(url);
	if (ret < 0) {
		KVT_LOG(ERR, "--kvt-meta %s: expected etcd://host:port[,host:port]", url);
		return ret;
	}
	snprintf(meta.key, sizeof(meta.key), "%s/%s/engines/%s", META_PREFIX,
		 kvt_eng->o.cluster, kvt_eng->o.name);
	meta.ttl = RTE_MAX(2u, kvt_eng->o.timeout_ms * 3 / 1000);
	ret = grant();
	if (ret == 0)
		ret = publish(1);
	if (ret == -EEXIST) {
		KVT_LOG(ERR, "engine name %s is taken in cluster %s by a live engine",
			kvt_eng->o.name, kvt_eng->o.cluster);
		lease_revoke();	/* the key is the other engine's */
	} else if (ret < 0) {
		KVT_LOG(ERR, "cannot publish to etcd at %s: %s", url, strerror(-ret));
	}
	if (ret < 0) {
		meta.nep = 0;
		return ret;
	}
	meta.listed = 1;
	meta.running = 1;
	ret = pthread_create(&meta.thread, NULL, meta_main, NULL);
	if (ret != 0) {
		meta.running = 0;
		unpublish();
		meta.nep = 0;
		return -ret;
	}
	pthread_setname_np(meta.thread, "kvt-meta");
	/* Only fails with every slot taken: a descriptor then lists the
	 * regions of its last write. */
	if (kvt_mem_event_subscribe(regions_changed, NULL) < 0)
		KVT_LOG(WARNING, "etcd descriptor: not told of region changes");
	KVT_LOG(INFO, "published %s (lease ttl %u s)", meta.key, meta.ttl);
	return 0;
}

void
kvt_meta_stop(void)
{
	if (meta.nep == 0)
		return;
	kvt_mem_event_unsubscribe(regions_changed, NULL);
	pthread_mutex_lock(&meta.lock);
	meta.running = 0;
	pthread_cond_signal(&meta.cond);
	pthread_mutex_unlock(&meta.lock);
	pthread_join(meta.thread, NULL);
	unpublish();
	meta.nep = 0;
}


/*
 * The control address in an etcd range answer (the JSON text the gateway
 * sent): kvs[0].value, base64 of the engine's JSON descriptor, whose
 * "addr" is host:port.  Every step is checked: the answer is untrusted.
 * @return 0, -ENOENT (no such key), -EPROTO (malformed).
 */
int
kvt_meta_parse_range(const char *answer, size_t alen, char *addr, size_t len)
{
	json_t *res, *kvs, *d = NULL, *a;
	struct sockaddr_in sa;
	const char *v;
	char *val = NULL;
	size_t cap;
	int err = -EPROTO;

	res = json_loadb(answer, alen, 0, NULL);
	if (!json_is_object(res)) {
		json_decref(res);
		return -EPROTO;
	}
	kvs = json_object_get(res, "kvs");
	if (kvs == NULL || (json_is_array(kvs) && json_array_size(kvs) == 0)) {
		json_decref(res);
		return -ENOENT;
	}
	v = json_string_value(json_object_get(json_array_get(kvs, 0), "value"));
	/* As large as the answer says: an engine may export thousands of
	 * regions. */
	cap = v != NULL ? strlen(v) / 4 * 3 + 4 : 0;
	if (v != NULL)
		val = malloc(cap);
	if (val != NULL && b64_decode(v, val, cap) > 0)
		d = json_loads(val, 0, NULL);
	a = json_object_get(d, "addr");
	if (json_is_string(a) && strlen(json_string_value(a)) < len &&
	    kvt_parse_addr(json_string_value(a), &sa) == 0) {
		snprintf(addr, len, "%s", json_string_value(a));
		err = 0;
	}
	free(val);
	json_decref(d);
	json_decref(res);
	return err;
}

int
kvt_meta_resolve(const char *name, char *addr, size_t len, uint64_t deadline_us)
{
	char key[256], *k, *text;
	json_t *req, *res;
	int err;

	if (meta.nep == 0)
		return -EINVAL;
	snprintf(key, sizeof(key), "%s/%s/engines/%s", META_PREFIX,
		 kvt_eng->o.cluster, name);
	k = b64_encode(key, strlen(key));
	if (k == NULL)
		return -ENOMEM;
	req = json_pack("{s:s}", "key", k);
	free(k);
	res = post_within("/v3/kv/range", req, &err, deadline_us);
	json_decref(req);
	if (res == NULL) {
		KVT_LOG(ERR, "peer %s: cannot ask etcd: %s", name, strerror(-err));
		return err;
	}
	text = json_dumps(res, JSON_COMPACT);
	json_decref(res);
	if (text == NULL)
		return -ENOMEM;
	err = kvt_meta_parse_range(text, strlen(text), addr, len);
	free(text);
	if (err == -ENOENT)
		KVT_LOG(ERR, "peer %s: not published in cluster %s", name,
			kvt_eng->o.cluster);
	else if (err < 0)
		KVT_LOG(ERR, "peer %s: its etcd descriptor is malformed", name);
	return err;
}
