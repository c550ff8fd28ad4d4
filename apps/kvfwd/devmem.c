/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Patterns in memory that may live on a GPU: filled and checked through a
 * host copy (kvfwd is a test tool; the copy is not what it measures), and
 * the raw GPU copy baseline.
 */
#include <stdlib.h>
#include <string.h>

#include "kvfwd.h"
#ifdef KVT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int
kvfwd_is_dev(const char *loc)
{
	return strncmp(loc, "cuda:", 5) == 0;
}

/*
 * A per-thread host buffer of at least len bytes, pinned when CUDA is
 * there: a cudaMemcpy from pageable memory may return before the data
 * reached the device, and the transfer that follows on another stream
 * would then read old bytes.  From pinned memory it is synchronous.
 */
static uint8_t *
staging(uint64_t len)
{
	static __thread uint8_t *buf;
	static __thread uint64_t cap;
	uint8_t *nb = NULL;

	if (len > cap) {
#ifdef KVT_HAVE_CUDA
		if (buf != NULL)
			cudaFreeHost(buf);
		if (cudaMallocHost((void **)&nb, len) != cudaSuccess)
			nb = NULL;
#else
		free(buf);
		nb = malloc(len);
#endif
		buf = nb;
		cap = nb != NULL ? len : 0;
		if (nb == NULL)
			return NULL;
	}
	return buf;
}

int
kvfwd_fill(void *dst, uint64_t len, uint64_t seed, int dev, int corrupt)
{
	uint8_t *p = dev ? staging(len) : dst;

	if (p == NULL)
		return -1;
	kvfwd_pattern(p, len, seed);
	if (corrupt)
		p[len / 2] ^= 0x5a;
#ifdef KVT_HAVE_CUDA
	if (dev && cudaMemcpy(dst, p, len, cudaMemcpyHostToDevice) != cudaSuccess)
		return -1;
#endif
	return 0;
}

int
kvfwd_check(const void *src, uint64_t len, uint64_t seed, int dev)
{
	const uint8_t *p = src;

#ifdef KVT_HAVE_CUDA
	uint8_t *h;

	if (dev) {
		h = staging(len);
		if (h == NULL ||
		    cudaMemcpy(h, src, len, cudaMemcpyDeviceToHost) != cudaSuccess)
			return 0;
		p = h;
	}
#else
	(void)dev;
#endif
	return kvfwd_pattern_ok(p, len, seed);
}

double
kvfwd_gpu_copy_gbps(const struct kvfwd_opts *o)
{
#ifdef KVT_HAVE_CUDA
	int sd = atoi(o->src_loc + 5), dd = atoi(o->dst_loc + 5);
	uint64_t sspan = (uint64_t)o->batch * o->block, dspan = o->buffer;
	uint64_t soff = 0, doff = 0, moved = 0;
	cudaStream_t st;
	uint8_t *a = NULL, *b = NULL;
	double t0, el = -1;

	/* The run's pattern: block copies from a batch-sized source into a
	 * buffer-sized destination, one cudaMemcpyPeerAsync each. */
	if (cudaSetDevice(sd) != cudaSuccess ||
	    cudaMalloc((void **)&a, sspan) != cudaSuccess ||
	    cudaSetDevice(dd) != cudaSuccess ||
	    cudaMalloc((void **)&b, dspan) != cudaSuccess ||
	    cudaSetDevice(sd) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
		goto out;
	cudaMemcpyPeerAsync(b, dd, a, sd, o->block, st);	/* warm up */
	cudaStreamSynchronize(st);
	t0 = kvfwd_now();
	while (moved < o->total) {
		cudaMemcpyPeerAsync(b + doff, dd, a + soff, sd, o->block, st);
		moved += o->block;
		soff = soff + 2 * o->block > sspan ? 0 : soff + o->block;
		doff = doff + 2 * o->block > dspan ? 0 : doff + o->block;
	}
	cudaStreamSynchronize(st);
	el = kvfwd_now() - t0;
	cudaStreamDestroy(st);
out:
	cudaFree(a);
	cudaFree(b);
	return el > 0 ? (double)moved / el / 1e9 : -1;
#else
	(void)o;
	return -1;
#endif
}
