/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What etcd's gateway answers to a lookup (JSON, base64, JSON again): an
 * address comes out only when it is a valid host:port.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in sa;
	char addr[64];
	int ret;

	memset(addr, 0x55, sizeof(addr));
	ret = kvt_meta_parse_range((const char *)data, size, addr, sizeof(addr));
	if (ret == 0 && (strnlen(addr, sizeof(addr)) == sizeof(addr) ||
			 kvt_parse_addr(addr, &sa) != 0))
		abort();
	if (ret != 0 && ret != -ENOENT && ret != -EPROTO)
		abort();
	return 0;
}
