/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libibverbs loaded at run time (rdma_verbs.h).  Symbols are taken from
 * the global scope first, so that a process which links the library (or
 * a test double of it) and kvt share one copy; otherwise the library is
 * opened by its soname, as rdma-core's own providers expect.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rdma_verbs.h"

struct rd_verbs rd_ibv;

struct entry {
	const char *name;
	size_t off;
	int optional;
};

#define E(f, n) { "ibv_" #n, offsetof(struct rd_verbs, f), 0 }

static const struct entry entries[] = {
	E(get_device_list, get_device_list),
	E(free_device_list, free_device_list),
	E(get_device_name, get_device_name),
	E(open_device, open_device),
	E(close_device, close_device),
	E(query_device, query_device),
	E(query_port_compat, query_port),
	E(query_gid, query_gid),
	E(alloc_pd, alloc_pd),
	E(dealloc_pd, dealloc_pd),
	E(reg_mr, reg_mr),
	{ "ibv_reg_dmabuf_mr", offsetof(struct rd_verbs, reg_dmabuf_mr), 1 },
	E(dereg_mr, dereg_mr),
	E(create_comp_channel, create_comp_channel),
	E(destroy_comp_channel, destroy_comp_channel),
	E(create_cq, create_cq),
	E(destroy_cq, destroy_cq),
	E(get_cq_event, get_cq_event),
	E(ack_cq_events, ack_cq_events),
	E(create_qp, create_qp),
	E(modify_qp, modify_qp),
	E(destroy_qp, destroy_qp),
	E(get_async_event, get_async_event),
	E(ack_async_event, ack_async_event),
	E(event_type_str, event_type_str),
};

#undef E

/* Each entry from the process's global scope (if global) or else from
 * lib (if not NULL); the first required one found in neither, or NULL.
 * (RTLD_DEFAULT is a null handle: hence the flag.) */
static const char *
fill(int global, void *lib)
{
	unsigned int i;
	void *f;

	for (i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		f = global ? dlsym(RTLD_DEFAULT, entries[i].name) : NULL;
		if (f == NULL && lib != NULL)
			f = dlsym(lib, entries[i].name);
		if (f == NULL && !entries[i].optional)
			return entries[i].name;
		memcpy((char *)&rd_ibv + entries[i].off, &f, sizeof(f));
	}
	return NULL;
}

int
rd_verbs_load(char *why, size_t len)
{
	static void *lib;
	const char *missing;
	int global = 0;

	if (rd_ibv.get_device_list != NULL)
		return 0;
	/* A libibverbs (or a double) the process has already: its
	 * functions come first, the library fills any gap. */
	if (dlsym(RTLD_DEFAULT, "ibv_get_device_list") != NULL) {
		global = 1;
		if (fill(global, NULL) == NULL)
			return 0;
	}
	if (lib == NULL)
		lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (lib == NULL) {
		snprintf(why, len, "libibverbs.so.1 cannot be loaded (%s): install rdma-core",
			 dlerror());
		goto fail;
	}
	missing = fill(global, lib);
	if (missing != NULL) {
		snprintf(why, len, "libibverbs.so.1 has no %s: rdma-core is too old",
			 missing);
		goto fail;
	}
	return 0;
fail:
	memset(&rd_ibv, 0, sizeof(rd_ibv));
	return -ENOENT;
}

int
rd_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a)
{
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);

	if (vctx != NULL)
		return vctx->query_port(ctx, port, a, sizeof(*a));
	memset(a, 0, sizeof(*a));
	return rd_ibv.query_port_compat(ctx, port,
					(struct _compat_ibv_port_attr *)a);
}
