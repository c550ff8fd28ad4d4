/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control connection's frames as a peer may send them: frame header,
 * HELLO/WELCOME, regions, TLV walking.  What decodes must be sane (every
 * pointer inside the input, every string terminated).
 */
#include <stdlib.h>
#include <string.h>

#include "kvt_private.h"

/* Inside [buf, buf + len), or nothing at all (an absent blob). */
static int
inside(const uint8_t *p, size_t n, const uint8_t *buf, size_t len)
{
	if (p == NULL)
		return n == 0;
	return p >= buf && n <= len && (size_t)(p - buf) <= len - n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvt_wire_hello h;
	struct kvt_wire_region r;
	struct kvt_tlv t = { data, size };
	const uint8_t *v, *body = data;
	size_t blen = size;
	uint32_t l;
	uint16_t tag, type;
	unsigned int k;
	int len;

	if (size >= KVT_WIRE_HDR) {
		len = kvt_wire_check_hdr(data, KVT_WIRE_MAX, &type);
		if (len >= 0 && (size_t)len <= size - KVT_WIRE_HDR) {
			body = data + KVT_WIRE_HDR;
			blen = (size_t)len;
		}
	}
	if (kvt_wire_decode_hello(body, blen, &h) == 0) {
		if (strnlen(h.name, sizeof(h.name)) == sizeof(h.name) ||
		    h.neps > KVT_WIRE_MAX_EPS ||
		    (h.regions != NULL && !inside(h.regions, h.regions_len, body, blen)))
			abort();
		for (k = 0; k < h.neps; k++)
			if (!inside(h.eps[k].ep.blob, h.eps[k].ep.len, body, blen))
				abort();
	}
	if (kvt_wire_decode_region(body, blen, &r) == 0) {
		if (r.nkeys > KVT_MAX_PORTS)
			abort();
		for (k = 0; k < r.nkeys; k++)
			if (!inside(r.keys[k].blob, r.keys[k].len, body, blen))
				abort();
	}
	while (kvt_tlv_next(&t, &tag, &v, &l) > 0)
		if (!inside(v, l, data, size))
			abort();
	return 0;
}
