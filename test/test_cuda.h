/* SPDX-License-Identifier: BSD-3-Clause */
/* CUDA helpers for the tests (built only with CUDA). */
#ifndef KVT_TEST_CUDA_H
#define KVT_TEST_CUDA_H

#include <stddef.h>
#include <stdint.h>

/* Number of CUDA devices, or -1 with the reason in why. */
int tc_cuda_devices(char *why, size_t len);
/* Fill device (or host) memory with tc_fill's pattern. */
int tc_cuda_fill(void *p, size_t len, uint64_t seed);
/* tc_hash of device (or host) memory. */
uint64_t tc_cuda_hash(const void *p, size_t len);
/* A kernel on stream that spins spin_us, then sets every byte to val. */
int tc_cuda_slow_fill(void *p, size_t len, uint8_t val, uint64_t spin_us,
		      void *stream);

#endif
