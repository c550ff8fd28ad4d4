/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What RDMA ports tell each other, on the wire: endpoints (handshake),
 * queue-pair information (CONN_REQ, CONN_REP) and the re-arm messages,
 * each little endian in a fixed layout whose length is checked; and the
 * choice of a peer's endpoint for a local NIC.
 */
#include <errno.h>
#include <string.h>

#include "rdma.h"

#define RD_WIRE_VERSION 1

static void
put_le(uint8_t *p, uint64_t v, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get_le(const uint8_t *p, unsigned int n)
{
	uint64_t v = 0;
	unsigned int i;

	for (i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#define EP_LEN (1 + 32 + 1 + 1 + 1 + 2 + 16)

int
rd_endpoint_encode(const struct rd_endpoint *e, struct kvt_buf *b)
{
	uint8_t w[EP_LEN], *p = w;

	*p++ = RD_WIRE_VERSION;
	memcpy(p, e->name, 32);
	p += 32;
	*p++ = e->link;
	*p++ = e->port_num;
	*p++ = e->mtu;
	put_le(p, e->lid, 2);
	p += 2;
	memcpy(p, e->gid, 16);
	return kvt_buf_put(b, w, sizeof(w));
}

static int
mtu_ok(uint8_t mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096;
}

int
rd_endpoint_decode(const uint8_t *p, size_t len, struct rd_endpoint *e)
{
	if (len != EP_LEN || p[0] != RD_WIRE_VERSION)
		return -EPROTO;
	p++;
	memcpy(e->name, p, 32);
	p += 32;
	if (memchr(e->name, '\0', sizeof(e->name)) == NULL)
		return -EPROTO;
	e->link = *p++;
	e->port_num = *p++;
	e->mtu = *p++;
	e->lid = (uint16_t)get_le(p, 2);
	p += 2;
	memcpy(e->gid, p, 16);
	if ((e->link != KVT_LINK_IB && e->link != KVT_LINK_ETH) || !mtu_ok(e->mtu))
		return -EPROTO;
	return 0;
}

#define QI_FIXED (1 + 1 + 1 + 2 + 16 + 8 + 4)

int
rd_qpinfo_encode(const struct rd_qpinfo *qi, struct kvt_buf *b)
{
	uint8_t w[QI_FIXED + RD_MAX_QPS * 8], *p = w;
	unsigned int i;

	if (qi->nqps == 0 || qi->nqps > RD_MAX_QPS)
		return -EINVAL;
	*p++ = RD_WIRE_VERSION;
	*p++ = qi->nqps;
	*p++ = qi->mtu;
	put_le(p, qi->lid, 2);
	p += 2;
	memcpy(p, qi->gid, 16);
	p += 16;
	put_le(p, qi->flush_addr, 8);
	p += 8;
	put_le(p, qi->flush_rkey, 4);
	p += 4;
	for (i = 0; i < qi->nqps; i++) {
		put_le(p, qi->qpn[i], 4);
		put_le(p + 4, qi->psn[i], 4);
		p += 8;
	}
	return kvt_buf_put(b, w, (size_t)(p - w));
}

int
rd_qpinfo_decode(const uint8_t *p, size_t len, struct rd_qpinfo *qi)
{
	unsigned int i;

	memset(qi, 0, sizeof(*qi));
	if (len < QI_FIXED || p[0] != RD_WIRE_VERSION)
		return -EPROTO;
	qi->nqps = p[1];
	qi->mtu = p[2];
	if (qi->nqps == 0 || qi->nqps > RD_MAX_QPS || !mtu_ok(qi->mtu) ||
	    len != QI_FIXED + (size_t)qi->nqps * 8)
		return -EPROTO;
	qi->lid = (uint16_t)get_le(p + 3, 2);
	memcpy(qi->gid, p + 5, 16);
	qi->flush_addr = get_le(p + 21, 8);
	qi->flush_rkey = (uint32_t)get_le(p + 29, 4);
	p += QI_FIXED;
	for (i = 0; i < qi->nqps; i++, p += 8) {
		qi->qpn[i] = (uint32_t)get_le(p, 4);
		qi->psn[i] = (uint32_t)get_le(p + 4, 4);
		/* QPNs and PSNs are 24-bit. */
		if (qi->qpn[i] > 0xffffff || qi->psn[i] > 0xffffff)
			return -EPROTO;
	}
	return 0;
}

/*
 * Rails: NIC mlx5_3 talks to the peer's mlx5_3 when it has one (the
 * same rail of a rail-optimised fabric), else to the peer NIC at the
 * same position, else to any of the same link layer.
 */
int
rd_pick_endpoint(const char *self, uint8_t link, unsigned int ordinal,
		       const struct rd_endpoint *eps, unsigned int n)
{
	unsigned int i;

	if (n == 0)
		return -1;
	for (i = 0; i < n; i++)
		if (eps[i].link == link && strcmp(eps[i].name, self) == 0)
			return (int)i;
	if (eps[ordinal % n].link == link)
		return (int)(ordinal % n);
	for (i = 0; i < n; i++)
		if (eps[i].link == link)
			return (int)i;
	return -1;
}

/* Re-arm messages (rdma_conn.c). */
void
rd_msg_put(struct kvt_buf *b, const struct rd_msg *m)
{
	uint8_t w[14];

	w[0] = m->type;
	w[1] = m->qp;
	put_le(w + 2, m->token, 4);
	put_le(w + 6, m->qpn, 4);
	put_le(w + 10, m->psn, 4);
	kvt_buf_put(b, w, sizeof(w));
}

int
rd_msg_get(const uint8_t *p, size_t len, struct rd_msg *m)
{
	if (len != 14)
		return -EPROTO;
	m->type = p[0];
	m->qp = p[1];
	m->token = (uint32_t)get_le(p + 2, 4);
	m->qpn = (uint32_t)get_le(p + 6, 4);
	m->psn = (uint32_t)get_le(p + 10, 4);
	return m->qpn > 0xffffff || m->psn > 0xffffff ? -EPROTO : 0;
}
