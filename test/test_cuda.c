/* SPDX-License-Identifier: BSD-3-Clause */
#include <stdlib.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "test_common.h"
#include "test_cuda.h"

int
tc_cuda_devices(char *why, size_t len)
{
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		snprintf(why, len, "%s", cudaGetErrorString(e));
		return -1;
	}
	return n;
}

int
tc_cuda_fill(void *p, size_t len, uint64_t seed)
{
	void *h = malloc(len);
	int ret;

	if (h == NULL)
		return -1;
	tc_fill(h, len, seed);
	/* From pageable memory cudaMemcpy may return before the last bytes
	 * reached the device; a transfer on another stream must not race
	 * them, so wait for the legacy stream that carried the copy. */
	ret = cudaMemcpy(p, h, len, cudaMemcpyDefault) == cudaSuccess &&
		cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess ? 0 : -1;
	free(h);
	return ret;
}

uint64_t
tc_cuda_hash(const void *p, size_t len)
{
	void *h = malloc(len);
	uint64_t v = 0;

	if (h != NULL && cudaMemcpy(h, p, len, cudaMemcpyDefault) == cudaSuccess)
		v = tc_hash(h, len);
	free(h);
	return v;
}
