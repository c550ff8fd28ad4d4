/* SPDX-License-Identifier: BSD-3-Clause */
/* --kvt-topo files: any bytes are refused with a reason or accepted. */
#define _GNU_SOURCE
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "kvt_private.h"
#include "../../pmd/rdma/rdma_topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	static int fd = -1;
	char err[256];
	int ret;

	if (fd < 0) {
		fd = memfd_create("kvt-topo", 0);
		if (fd < 0)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	ret = rd_topo_check_file(path, err, sizeof(err));
	if (ret != 0 && (ret != -EINVAL || err[0] == '\0' ||
			 strnlen(err, sizeof(err)) == sizeof(err)))
		abort();
	return 0;
}
