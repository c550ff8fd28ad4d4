/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The tcp data connection's frames: byte order and the checks every
 * header from the wire passes before anything acts on it (fuzzed by
 * test/fuzz/fuzz_tcp_frame.c).
 */
#include <errno.h>
#include <string.h>

#include <rte_byteorder.h>

#include "kvt_pmd.h"
#include "tcp_wire.h"

void
tcp_hdr_to_wire(struct tcp_hdr *h)
{
	h->status = (int32_t)rte_cpu_to_le_32((uint32_t)h->status);
	h->addr = rte_cpu_to_le_64(h->addr);
	h->aux = rte_cpu_to_le_64(h->aux);
	h->len = rte_cpu_to_le_32(h->len);
	h->seq = rte_cpu_to_le_32(h->seq);
}

void
tcp_hdr_from_wire(struct tcp_hdr *h)
{
	h->status = (int32_t)rte_le_to_cpu_32((uint32_t)h->status);
	h->addr = rte_le_to_cpu_64(h->addr);
	h->aux = rte_le_to_cpu_64(h->aux);
	h->len = rte_le_to_cpu_32(h->len);
	h->seq = rte_le_to_cpu_32(h->seq);
}

int
tcp_request_check(const struct tcp_hdr *h, uint32_t *payload)
{
	if (h->type == 0 || h->type >= F_MAX || (h->type % 2) == 0 ||
	    h->len > TCP_MAX_FRAME)
		return -EPROTO;
	if (h->type == F_NOTIFY && h->len > KVT_NOTIFY_MAX)
		return -EPROTO;
	*payload = h->type == F_WRITE || h->type == F_NOTIFY ? h->len : 0;
	return 0;
}

int
tcp_answer_check(const struct tcp_hdr *h, uint8_t want, uint32_t len,
		 uint32_t *payload)
{
	if (h->type != want ||
	    (h->type == F_READ_DATA && h->status == 0 && h->len != len) ||
	    (h->type != F_READ_DATA && h->len != 0))
		return -EPROTO;
	*payload = h->type == F_READ_DATA && h->status == 0 ? h->len : 0;
	return 0;
}

int
tcp_msg_parse(const uint8_t *msg, size_t len, struct tcp_retire *rq,
	      struct tcp_retired *rd)
{
	uint32_t i;

	if (len == sizeof(*rq) && msg[0] == TCP_M_RETIRE) {
		memcpy(rq, msg, sizeof(*rq));
		rq->nseq = rte_le_to_cpu_32(rq->nseq);
		if (rq->nseq > TCP_RETIRE_SEQS)
			return -EPROTO;
		for (i = 0; i < rq->nseq; i++)
			rq->seq[i] = rte_le_to_cpu_32(rq->seq[i]);
		return TCP_M_RETIRE;
	}
	if (len == sizeof(*rd) && msg[0] == TCP_M_RETIRED) {
		memcpy(rd, msg, sizeof(*rd));
		rd->nseq = rte_le_to_cpu_32(rd->nseq);
		rd->taken = rte_le_to_cpu_64(rd->taken);
		if (rd->nseq > TCP_RETIRE_SEQS)
			return -EPROTO;
		return TCP_M_RETIRED;
	}
	return -EPROTO;
}

int
tcp_wire_status(int32_t st)
{
	switch (st) {
	case 0:
	case -EFAULT:
	case -ERANGE:
	case -ENOBUFS:
	case -ENOTSUP:
	case -EIO:
		return st;
	default:
		return -EPROTO;
	}
}
