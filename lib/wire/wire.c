/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Handshake frames: a 12-byte header (magic, version, type, payload length)
 * then tag-length-value fields (u16 tag, u32 length), little-endian.  Every
 * read is bounds-checked, so a truncated or hostile frame is an error, not
 * a crash.  Unknown tags are skipped, which lets later versions add fields.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <rte_byteorder.h>

#include "kvt_private.h"

#define TLV_HDR 6

static void
put_le32(uint8_t *p, uint32_t v)
{
	v = rte_cpu_to_le_32(v);
	memcpy(p, &v, 4);
}

static uint32_t
get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return rte_le_to_cpu_32(v);
}

static uint16_t
get_le16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return rte_le_to_cpu_16(v);
}

int
kvt_wire_begin(struct kvt_buf *b, uint16_t type)
{
	struct kvt_wire_hdr h = {
		.magic = rte_cpu_to_le_32(KVT_WIRE_MAGIC),
		.version = rte_cpu_to_le_16(KVT_WIRE_VERSION),
		.type = rte_cpu_to_le_16(type),
		.len = 0,
	};

	b->len = 0;
	return kvt_buf_put(b, &h, sizeof(h));
}

int
kvt_wire_end(struct kvt_buf *b)
{
	if (b->len < KVT_WIRE_HDR || b->len - KVT_WIRE_HDR > KVT_WIRE_MAX)
		return -EMSGSIZE;
	put_le32(b->data + 8, (uint32_t)(b->len - KVT_WIRE_HDR));
	return 0;
}

int
kvt_wire_put(struct kvt_buf *b, uint16_t tag, const void *v, uint32_t len)
{
	uint8_t h[TLV_HDR];
	uint16_t t = rte_cpu_to_le_16(tag);
	int ret;

	memcpy(h, &t, 2);
	put_le32(h + 2, len);
	ret = kvt_buf_put(b, h, sizeof(h));
	return ret == 0 ? kvt_buf_put(b, v, len) : ret;
}

int
kvt_wire_put_u64(struct kvt_buf *b, uint16_t tag, uint64_t v)
{
	uint64_t le = rte_cpu_to_le_64(v);

	return kvt_wire_put(b, tag, &le, sizeof(le));
}

int
kvt_wire_put_str(struct kvt_buf *b, uint16_t tag, const char *s)
{
	return kvt_wire_put(b, tag, s, (uint32_t)strlen(s));
}

int
kvt_wire_open(struct kvt_buf *b, uint16_t tag, size_t *mark)
{
	*mark = b->len;
	return kvt_wire_put(b, tag, NULL, 0);
}

void
kvt_wire_close(struct kvt_buf *b, size_t mark)
{
	put_le32(b->data + mark + 2, (uint32_t)(b->len - mark - TLV_HDR));
}

int
kvt_wire_check_hdr(const uint8_t *buf, uint32_t max, uint16_t *type)
{
	uint32_t len;

	if (get_le32(buf) != KVT_WIRE_MAGIC ||
	    get_le16(buf + 4) != KVT_WIRE_VERSION)
		return -EPROTO;
	*type = get_le16(buf + 6);
	if (*type == 0 || *type >= KVT_W_TYPE_MAX)
		return -EPROTO;
	len = get_le32(buf + 8);
	if (len > max)
		return -EMSGSIZE;
	return (int)len;
}

int
kvt_tlv_next(struct kvt_tlv *t, uint16_t *tag, const uint8_t **val,
	     uint32_t *len)
{
	uint32_t l;

	if (t->left == 0)
		return 0;
	if (t->left < TLV_HDR)
		return -EPROTO;
	*tag = get_le16(t->p);
	l = get_le32(t->p + 2);
	if (l > t->left - TLV_HDR)
		return -EPROTO;
	*val = t->p + TLV_HDR;
	*len = l;
	t->p += TLV_HDR + l;
	t->left -= TLV_HDR + l;
	return 1;
}

int
kvt_tlv_u64(const uint8_t *val, uint32_t len, uint64_t *out)
{
	uint64_t v;

	if (len != 8)
		return -EPROTO;
	memcpy(&v, val, 8);
	*out = rte_le_to_cpu_64(v);
	return 0;
}

int
kvt_tlv_str(const uint8_t *val, uint32_t len, char *out, size_t outlen)
{
	uint32_t i;

	if (len == 0 || len >= outlen)
		return -EPROTO;
	for (i = 0; i < len; i++)
		if (val[i] < 0x20 || val[i] > 0x7e)
			return -EPROTO;
	memcpy(out, val, len);
	out[len] = '\0';
	return 0;
}

static int
decode_ep(const uint8_t *p, uint32_t len, struct kvt_wire_ep *e)
{
	struct kvt_tlv t = { p, len };
	const uint8_t *v;
	uint32_t l;
	uint64_t u;
	uint16_t tag;
	int r, have = 0;

	memset(e, 0, sizeof(*e));
	while ((r = kvt_tlv_next(&t, &tag, &v, &l)) > 0) {
		switch (tag) {
		case KVT_T_PMD:
			if (kvt_tlv_str(v, l, e->pmd, sizeof(e->pmd)) < 0)
				return -EPROTO;
			have |= 1;
			break;
		case KVT_T_PORT_NAME:
			if (kvt_tlv_str(v, l, e->ep.port_name,
					sizeof(e->ep.port_name)) < 0)
				return -EPROTO;
			break;
		case KVT_T_PORT_ID:
			if (kvt_tlv_u64(v, l, &u) < 0 || u >= KVT_MAX_PORTS)
				return -EPROTO;
			e->ep.port_id = (uint16_t)u;
			have |= 2;
			break;
		case KVT_T_BLOB:
			e->ep.blob = v;
			e->ep.len = l;
			break;
		}
	}
	return r == 0 && have == 3 ? 0 : -EPROTO;
}

int
kvt_wire_decode_hello(const uint8_t *p, size_t len, struct kvt_wire_hello *h)
{
	struct kvt_tlv t = { p, len };
	const uint8_t *v, *regions_end = NULL;
	uint32_t l;
	uint64_t u;
	uint16_t tag;
	int r, have = 0;

	memset(h, 0, sizeof(*h));
	while ((r = kvt_tlv_next(&t, &tag, &v, &l)) > 0) {
		switch (tag) {
		case KVT_T_NAME:
			if (kvt_tlv_str(v, l, h->name, sizeof(h->name)) < 0)
				return -EPROTO;
			have |= 1;
			break;
		case KVT_T_SECRET:
			if (l == 0 || l >= sizeof(h->secret))
				return -EPROTO;
			memcpy(h->secret, v, l);
			h->secret_len = l;
			h->has_secret = 1;
			break;
		case KVT_T_HOST_ID:
			if (l != sizeof(h->host_id))
				return -EPROTO;
			memcpy(h->host_id, v, l);
			have |= 2;
			break;
		case KVT_T_PID:
			if (kvt_tlv_u64(v, l, &u) < 0 || u > UINT32_MAX)
				return -EPROTO;
			h->pid = (uint32_t)u;
			have |= 4;
			break;
		case KVT_T_ENDPOINT:
			if (h->neps == KVT_WIRE_MAX_EPS ||
			    decode_ep(v, l, &h->eps[h->neps]) < 0)
				return -EPROTO;
			h->neps++;
			break;
		case KVT_T_REGION:
			/* Regions are kept raw and decoded one by one later;
			 * they must be contiguous. */
			if (h->regions == NULL)
				h->regions = v - TLV_HDR;
			else if (v - TLV_HDR != regions_end)
				return -EPROTO;
			regions_end = v + l;
			break;
		}
	}
	if (h->regions != NULL)
		h->regions_len = (size_t)(regions_end - h->regions);
	return r == 0 && have == 7 ? 0 : -EPROTO;
}

void
kvt_wire_peer_info(const struct kvt_wire_hello *h, const uint8_t *our_host,
		   struct kvt_peer_info *info)
{
	snprintf(info->name, sizeof(info->name), "%s", h->name);
	memcpy(info->host_id, h->host_id, sizeof(info->host_id));
	info->pid = h->pid;
	info->same_host = memcmp(h->host_id, our_host, sizeof(h->host_id)) == 0;
}

int
kvt_wire_secret_ok(const struct kvt_wire_hello *h, const char *want)
{
	size_t lw = strlen(want), i;
	unsigned char diff;

	if (!h->has_secret)
		return 0;
	diff = (unsigned char)(lw != h->secret_len);
	for (i = 0; i < lw; i++)
		diff |= (unsigned char)(want[i] ^
					(i < h->secret_len ? h->secret[i] : 0));
	return diff == 0;
}

int
kvt_wire_encode_region(struct kvt_buf *b, const struct kvt_lmem *m,
		       uint64_t fence_slots)
{
	struct kvt_buf key = { 0 };
	struct kvt_port *p;
	size_t mark, kmark;
	unsigned int i;
	int ret;

	ret = kvt_wire_open(b, KVT_T_REGION, &mark);
	ret |= kvt_wire_put_u64(b, KVT_T_BASE, (uintptr_t)m->addr);
	ret |= kvt_wire_put_u64(b, KVT_T_LEN, m->len);
	ret |= kvt_wire_put_u64(b, KVT_T_FLAGS, m->flags);
	ret |= kvt_wire_put_u64(b, KVT_T_LOC,
				((uint64_t)m->loc.type << 16) | (uint16_t)m->loc.id);
	if (fence_slots != 0)
		ret |= kvt_wire_put_u64(b, KVT_T_FENCE_SLOTS, fence_slots);
	for (i = 0; i < kvt_port_count() && ret == 0; i++) {
		p = kvt_port_get(i);
		if (!(m->port_mask & (1u << i)) || p->pmd->ops->mem_export == NULL)
			continue;
		key.len = 0;
		ret = p->pmd->ops->mem_export(p, m, &key);
		if (ret < 0)
			break;
		ret = kvt_wire_open(b, KVT_T_KEY, &kmark);
		ret |= kvt_wire_put_u64(b, KVT_T_PORT_ID, i);
		ret |= kvt_wire_put(b, KVT_T_BLOB, key.data, (uint32_t)key.len);
		kvt_wire_close(b, kmark);
	}
	kvt_buf_free(&key);
	kvt_wire_close(b, mark);
	return ret != 0 ? -ENOMEM : 0;
}

static int
decode_key(const uint8_t *p, uint32_t len, struct kvt_wire_region *r)
{
	struct kvt_tlv t = { p, len };
	const uint8_t *v;
	uint32_t l;
	uint64_t u;
	uint16_t tag;
	int ret, have = 0;
	unsigned int k = r->nkeys;

	if (k == KVT_MAX_PORTS)
		return -EPROTO;
	while ((ret = kvt_tlv_next(&t, &tag, &v, &l)) > 0) {
		if (tag == KVT_T_PORT_ID) {
			if (kvt_tlv_u64(v, l, &u) < 0 || u >= KVT_MAX_PORTS)
				return -EPROTO;
			r->keys[k].port_id = (uint16_t)u;
			have |= 1;
		} else if (tag == KVT_T_BLOB) {
			r->keys[k].blob = v;
			r->keys[k].len = l;
			have |= 2;
		}
	}
	if (ret < 0 || have != 3)
		return -EPROTO;
	r->nkeys++;
	return 0;
}

int
kvt_wire_decode_region(const uint8_t *p, size_t len, struct kvt_wire_region *r)
{
	struct kvt_tlv t = { p, len };
	const uint8_t *v;
	uint32_t l;
	uint64_t u;
	uint16_t tag;
	int ret, have = 0;

	memset(r, 0, sizeof(*r));
	while ((ret = kvt_tlv_next(&t, &tag, &v, &l)) > 0) {
		switch (tag) {
		case KVT_T_BASE:
			if (kvt_tlv_u64(v, l, &r->base) < 0)
				return -EPROTO;
			have |= 1;
			break;
		case KVT_T_LEN:
			if (kvt_tlv_u64(v, l, &r->len) < 0 || r->len == 0)
				return -EPROTO;
			have |= 2;
			break;
		case KVT_T_FLAGS:
			if (kvt_tlv_u64(v, l, &u) < 0 || u > UINT32_MAX)
				return -EPROTO;
			r->flags = (uint32_t)u;
			break;
		case KVT_T_LOC:
			if (kvt_tlv_u64(v, l, &u) < 0 || (u >> 16) > KVT_LOC_CUDA)
				return -EPROTO;
			r->loc.type = (uint16_t)(u >> 16);
			r->loc.id = (int16_t)(u & 0xffff);
			break;
		case KVT_T_FENCE_SLOTS:
			if (kvt_tlv_u64(v, l, &u) < 0 || u > UINT32_MAX)
				return -EPROTO;
			r->fence_slots = (uint32_t)u;
			break;
		case KVT_T_KEY:
			if (decode_key(v, l, r) < 0)
				return -EPROTO;
			break;
		}
	}
	if (ret < 0 || have != 3 || r->base + r->len < r->base)
		return -EPROTO;
	if (r->fence_slots != 0 && (uint64_t)r->fence_slots * 8 > r->len)
		return -EPROTO;
	return 0;
}

/* ---- blocking I/O with a deadline, for the initiator ---- */

static int
wait_fd(int fd, short ev, uint64_t deadline_us)
{
	struct pollfd pfd = { .fd = fd, .events = ev };
	uint64_t now = kvt_now_us();
	int ret;

	if (now >= deadline_us)
		return -ETIMEDOUT;
	ret = poll(&pfd, 1, (int)((deadline_us - now + 999) / 1000));
	if (ret < 0)
		return errno == EINTR ? 0 : -errno;
	return ret == 0 ? -ETIMEDOUT : 0;
}

int
kvt_wire_send(int fd, const struct kvt_buf *b, uint64_t deadline_us)
{
	size_t off = 0;
	ssize_t n;
	int ret;

	while (off < b->len) {
		n = send(fd, b->data + off, b->len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -ECONNRESET;
		ret = wait_fd(fd, POLLOUT, deadline_us);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static int
recv_exact(int fd, uint8_t *p, size_t len, uint64_t deadline_us)
{
	size_t off = 0;
	ssize_t n;
	int ret;

	while (off < len) {
		n = recv(fd, p + off, len - off, MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			return -ECONNRESET;
		ret = wait_fd(fd, POLLIN, deadline_us);
		if (ret < 0)
			return ret;
	}
	return 0;
}

int
kvt_wire_recv(int fd, struct kvt_buf *b, uint32_t max, uint64_t deadline_us)
{
	uint16_t type;
	int len, ret;

	b->len = 0;
	ret = kvt_buf_put(b, NULL, KVT_WIRE_HDR);
	if (ret < 0)
		return ret;
	ret = recv_exact(fd, b->data, KVT_WIRE_HDR, deadline_us);
	if (ret < 0)
		return ret;
	len = kvt_wire_check_hdr(b->data, max, &type);
	if (len < 0)
		return len;
	ret = kvt_buf_put(b, NULL, (size_t)len);
	if (ret < 0)
		return ret;
	ret = recv_exact(fd, b->data + KVT_WIRE_HDR, (size_t)len, deadline_us);
	return ret < 0 ? ret : type;
}
