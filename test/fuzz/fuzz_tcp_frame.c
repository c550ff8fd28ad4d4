/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp data frames as a peer may send them, header after header: a
 * request the target accepts, an answer the initiator accepts, and the
 * status it turns into, must all stay within the protocol's bounds.  The
 * whole input is also read as a message between the two ends of a
 * connection (RETIRE, RETIRED), which must keep its counts in bounds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_pmd.h"
#include "../../pmd/tcp/tcp_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tcp_hdr h;
	struct tcp_retire rq;
	struct tcp_retired rd;
	uint32_t payload, want_len;
	uint8_t want;
	int st;

	st = tcp_msg_parse(data, size, &rq, &rd);
	if ((st == TCP_M_RETIRE && rq.nseq > TCP_RETIRE_SEQS) ||
	    (st == TCP_M_RETIRED && rd.nseq > TCP_RETIRE_SEQS) ||
	    (st != TCP_M_RETIRE && st != TCP_M_RETIRED && st != -EPROTO))
		abort();

	while (size >= sizeof(h) + 5) {
		memcpy(&h, data, sizeof(h));
		want = data[sizeof(h)];
		memcpy(&want_len, data + sizeof(h) + 1, 4);
		data += sizeof(h) + 5;
		size -= sizeof(h) + 5;
		tcp_hdr_from_wire(&h);
		if (tcp_request_check(&h, &payload) == 0 &&
		    (payload > TCP_MAX_FRAME || (h.type % 2) == 0 ||
		     (h.type == F_NOTIFY && payload > KVT_NOTIFY_MAX)))
			abort();
		if (tcp_answer_check(&h, want, want_len, &payload) == 0 &&
		    (h.type != want || (payload != 0 && payload != want_len)))
			abort();
		st = tcp_wire_status(h.status);
		if (st != 0 && st != -ERANGE && st != -ENOBUFS && st != -ENOTSUP &&
		    st != -EIO && st != -EFAULT && st != -EPROTO)
			abort();
		tcp_hdr_to_wire(&h);
		if (memcmp(&h, data - sizeof(h) - 5, sizeof(h)) != 0)
			abort();	/* byte order must round-trip */
	}
	return 0;
}
