/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rdma transport's handshake blobs as a peer may send them: queue
 * pair info and endpoints.  What decodes must encode back to bytes that
 * decode to the same thing.
 */
#include <stdlib.h>
#include <string.h>

#include "kvt_pmd.h"
#include "../../pmd/rdma/rdma.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rd_qpinfo qi, qi2;
	struct rd_endpoint e, e2;
	struct kvt_buf b = { 0 };

	memset(&qi, 0, sizeof(qi));
	memset(&e, 0, sizeof(e));
	if (rd_qpinfo_decode(data, size, &qi) == 0) {
		if (qi.nqps == 0 || qi.nqps > RD_MAX_QPS)
			abort();
		memset(&qi2, 0, sizeof(qi2));
		if (rd_qpinfo_encode(&qi, &b) != 0 ||
		    rd_qpinfo_decode(b.data, b.len, &qi2) != 0 ||
		    memcmp(&qi, &qi2, sizeof(qi)) != 0)
			abort();
	}
	b.len = 0;
	if (rd_endpoint_decode(data, size, &e) == 0) {
		if (strnlen(e.name, sizeof(e.name)) == sizeof(e.name))
			abort();
		memset(&e2, 0, sizeof(e2));
		if (rd_endpoint_encode(&e, &b) != 0 ||
		    rd_endpoint_decode(b.data, b.len, &e2) != 0 ||
		    memcmp(&e, &e2, sizeof(e)) != 0)
			abort();
	}
	kvt_buf_free(&b);
	return 0;
}
