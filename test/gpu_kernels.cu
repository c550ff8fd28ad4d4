/* SPDX-License-Identifier: BSD-3-Clause */
/* Kernels the GPU tests need: a deliberately late writer. */
#include <stdint.h>

__global__ static void
slow_fill(uint8_t *p, size_t len, uint8_t val, uint64_t spin_ns)
{
	uint64_t t0, t;
	size_t i;

	if (threadIdx.x == 0 && blockIdx.x == 0) {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
		do {
			asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
		} while (t - t0 < spin_ns);
	}
	__syncthreads();
	for (i = blockIdx.x * blockDim.x + threadIdx.x; i < len;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = val;
}

extern "C" int
tc_cuda_slow_fill(void *p, size_t len, uint8_t val, uint64_t spin_us,
		  void *stream)
{
	/* One block, so the spin delays every byte. */
	slow_fill<<<1, 1024, 0, (cudaStream_t)stream>>>((uint8_t *)p, len, val,
							spin_us * 1000);
	return (int)cudaGetLastError();
}
