/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * strlcpy() for DPDK linked in statically: Debian's EAL archive calls it
 * (from libbsd, which kvt does not bring along), and glibc has it only
 * from 2.38.  Built where the C library lacks it; the version map keeps
 * it inside libkvt.
 */
#include <string.h>

size_t strlcpy(char *dst, const char *src, size_t size);

size_t
strlcpy(char *dst, const char *src, size_t size)
{
	size_t len = strlen(src);

	if (size != 0) {
		size_t n = len < size - 1 ? len : size - 1;

		memcpy(dst, src, n);
		dst[n] = '\0';
	}
	return len;
}
