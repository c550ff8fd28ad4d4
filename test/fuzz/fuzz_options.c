/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt_init's own options (after EAL's): the input is NUL-separated
 * arguments.  Each is refused with a reason, or parsed within its limits.
 */
#include <stdlib.h>
#include <string.h>

#include "kvt_private.h"

#define MAX_ARGS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1), *argv[MAX_ARGS + 1], err[256];
	struct kvt_opts o;
	size_t i;
	int argc = 0, ret;

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	argv[argc++] = buf;
	for (i = 0; i < size && argc < MAX_ARGS; i++)
		if (buf[i] == '\0')
			argv[argc++] = buf + i + 1;
	argv[argc] = NULL;
	kvt_opts_defaults(&o);
	err[0] = '\0';
	ret = kvt_opts_parse(&o, argc, argv, err, sizeof(err));
	if (ret < 0 && err[0] == '\0')
		abort();	/* every refusal says why */
	if (ret > argc || (ret >= 0 && (o.slice == 0 || o.timeout_ms == 0)))
		abort();
	kvt_opts_free(&o);
	free(buf);
	return 0;
}
