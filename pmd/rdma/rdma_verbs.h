/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libibverbs, reached at run time: kvt does not link rdma-core, so a box
 * without it runs every other transport.  The rdma transport loads the
 * library when it is probed (rd_verbs_load) and calls it through this
 * table.  Verbs that are inline in verbs.h (post, poll, notify) go
 * through the context's own operations and need no entry.
 */
#ifndef KVT_RDMA_VERBS_H
#define KVT_RDMA_VERBS_H

#include <infiniband/verbs.h>

struct rd_verbs {
	struct ibv_device **(*get_device_list)(int *n);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *d);
	struct ibv_context *(*open_device)(struct ibv_device *d);
	int (*close_device)(struct ibv_context *ctx);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *a);
	int (*query_port_compat)(struct ibv_context *ctx, uint8_t port,
				 struct _compat_ibv_port_attr *a);
	int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index,
			 union ibv_gid *gid);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len,
				 int access);
	/* NULL where rdma-core predates dma-buf (v34). */
	struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t off,
					size_t len, uint64_t iova, int fd,
					int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
	int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe,
				    void *cq_context,
				    struct ibv_comp_channel *ch, int vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq,
			    void **cq_context);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *a);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask);
	int (*destroy_qp)(struct ibv_qp *qp);
	int (*get_async_event)(struct ibv_context *ctx,
			       struct ibv_async_event *ev);
	void (*ack_async_event)(struct ibv_async_event *ev);
	const char *(*event_type_str)(enum ibv_event_type ev);
};

extern struct rd_verbs rd_ibv;

/*
 * Fill rd_ibv: from the process's own libibverbs where one is loaded
 * already (the application's, or a test double), else from
 * libibverbs.so.1.  0, or -ENOENT with the reason in why.
 */
int rd_verbs_load(char *why, size_t len);

/* ibv_query_port as verbs.h's inline does it: the context's extended
 * operation where it has one, else the library's entry. */
int rd_query_port(struct ibv_context *ctx, uint8_t port,
		  struct ibv_port_attr *a);

#endif /* KVT_RDMA_VERBS_H */
