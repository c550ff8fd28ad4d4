/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "kvt_private.h"
#include "fault_proxy.h"
#include "../pmd/tcp/tcp_wire.h"

#define FP_MAX_PAIRS 32
#define FP_CHUNK 65536u

struct fp_pair {
	struct fproxy *fp;
	int a, b;		/* a: the initiator's end, b: the target's */
	int data;
};

struct fproxy {
	struct fp_rules *r;
	struct sockaddr_in target;	/* control */
	struct tcp_ep data_ep;		/* the target's tcp endpoint */
	int ctl_lfd, data_lfd;
	uint16_t data_port;
	char addr[64];
	pthread_t ctl_thr, data_thr;
	pthread_mutex_t lock;
	pthread_t thr[2 * FP_MAX_PAIRS];
	unsigned int nthr;
	struct fp_pair *pairs[FP_MAX_PAIRS];
	unsigned int npairs;
	int stop;
};

static int
listener(uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, 64) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

static int
dial_to(const struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static int
read_n(int fd, void *p, size_t n)
{
	size_t off = 0;
	ssize_t r;

	while (off < n) {
		r = recv(fd, (uint8_t *)p + off, n - off, 0);
		if (r <= 0)
			return -1;
		off += (size_t)r;
	}
	return 0;
}

static int
write_n(int fd, const void *p, size_t n)
{
	return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static void
pair_cut(struct fp_pair *pp)
{
	shutdown(pp->a, SHUT_RDWR);
	shutdown(pp->b, SHUT_RDWR);
}

/* Initiator -> target, bytes as they come. */
static void *
pump_raw(void *arg)
{
	struct fp_pair *pp = arg;
	uint8_t buf[65536];
	ssize_t n;

	while ((n = recv(pp->a, buf, sizeof(buf), 0)) > 0)
		if (write_n(pp->b, buf, (size_t)n) < 0)
			break;
	pair_cut(pp);
	return NULL;
}

/* The WELCOME again, with the tcp endpoint's blob pointing at us. */
static int
rewrite_welcome(struct fproxy *fp, const uint8_t *p, size_t len,
		struct kvt_buf *out)
{
	struct kvt_tlv t = { p, len }, e;
	const uint8_t *v, *ev;
	uint32_t l, el;
	uint16_t tag, etag;
	size_t mark;
	struct tcp_ep ep;
	char pmd[16];
	int is_tcp;

	kvt_wire_begin(out, KVT_W_WELCOME);
	while (kvt_tlv_next(&t, &tag, &v, &l) > 0) {
		if (tag != KVT_T_ENDPOINT) {
			kvt_wire_put(out, tag, v, l);
			continue;
		}
		is_tcp = 0;
		e.p = v;
		e.left = l;
		while (kvt_tlv_next(&e, &etag, &ev, &el) > 0)
			if (etag == KVT_T_PMD &&
			    kvt_tlv_str(ev, el, pmd, sizeof(pmd)) == 0 &&
			    strcmp(pmd, "tcp") == 0)
				is_tcp = 1;
		kvt_wire_open(out, KVT_T_ENDPOINT, &mark);
		e.p = v;
		e.left = l;
		while (kvt_tlv_next(&e, &etag, &ev, &el) > 0) {
			if (is_tcp && etag == KVT_T_BLOB && el == sizeof(ep)) {
				memcpy(&fp->data_ep, ev, sizeof(ep));
				ep = fp->data_ep;
				ep.ip = htonl(INADDR_LOOPBACK);
				ep.port = htons(fp->data_port);
				kvt_wire_put(out, etag, &ep, sizeof(ep));
			} else {
				kvt_wire_put(out, etag, ev, el);
			}
		}
		kvt_wire_close(out, mark);
	}
	return kvt_wire_end(out);
}

/* Target -> initiator on the control connection, frame by frame. */
static void *
pump_ctl(void *arg)
{
	struct fp_pair *pp = arg;
	struct kvt_buf b = { 0 }, w = { 0 };
	uint8_t hdr[KVT_WIRE_HDR];
	uint16_t type;
	int len;

	for (;;) {
		if (read_n(pp->b, hdr, sizeof(hdr)) < 0)
			break;
		len = kvt_wire_check_hdr(hdr, KVT_WIRE_MAX, &type);
		if (len < 0)
			break;
		b.len = 0;
		if (kvt_buf_put(&b, hdr, sizeof(hdr)) < 0 ||
		    kvt_buf_put(&b, NULL, (size_t)len) < 0 ||
		    read_n(pp->b, b.data + KVT_WIRE_HDR, (size_t)len) < 0)
			break;
		if (type == KVT_W_WELCOME) {
			if (rewrite_welcome(pp->fp, b.data + KVT_WIRE_HDR,
					    (size_t)len, &w) < 0 ||
			    write_n(pp->a, w.data, w.len) < 0)
				break;
		} else if (write_n(pp->a, b.data, b.len) < 0) {
			break;
		}
	}
	kvt_buf_free(&b);
	kvt_buf_free(&w);
	pair_cut(pp);
	return NULL;
}

/* Target -> initiator on a data connection: answers, one by one. */
static void *
pump_data(void *arg)
{
	struct fp_pair *pp = arg;
	struct fp_rules *r = pp->fp->r;
	uint8_t *buf = malloc(FP_CHUNK);
	struct tcp_hdr h;
	uint32_t left, n;

	while (buf != NULL && read_n(pp->b, &h, sizeof(h)) == 0) {
		left = h.type == F_READ_DATA && h.status == 0 ? h.len : 0;
		if (r->cut_type != 0 && h.type == r->cut_type) {
			r->cut_type = 0;
			r->cuts++;
			break;
		}
		if (r->lie && h.type == F_WRITE_ACK)
			h.status = r->ack_status;
		if (write_n(pp->a, &h, sizeof(h)) < 0)
			break;
		while (left > 0) {
			n = left < FP_CHUNK ? left : FP_CHUNK;
			if (read_n(pp->b, buf, n) < 0 || write_n(pp->a, buf, n) < 0)
				goto out;
			left -= n;
		}
	}
out:
	free(buf);
	pair_cut(pp);
	return NULL;
}

static void
pair_start(struct fproxy *fp, int a, int b, int data)
{
	struct fp_pair *pp = calloc(1, sizeof(*pp));

	pthread_mutex_lock(&fp->lock);
	if (pp == NULL || fp->npairs == FP_MAX_PAIRS) {
		pthread_mutex_unlock(&fp->lock);
		free(pp);
		close(a);
		close(b);
		return;
	}
	pp->fp = fp;
	pp->a = a;
	pp->b = b;
	pp->data = data;
	fp->pairs[fp->npairs++] = pp;
	pthread_create(&fp->thr[fp->nthr++], NULL, pump_raw, pp);
	pthread_create(&fp->thr[fp->nthr++], NULL, data ? pump_data : pump_ctl, pp);
	pthread_mutex_unlock(&fp->lock);
}

static void *
accept_ctl(void *arg)
{
	struct fproxy *fp = arg;
	int a, b;

	while ((a = accept4(fp->ctl_lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		b = dial_to(&fp->target);
		if (b < 0) {
			close(a);
			continue;
		}
		pair_start(fp, a, b, 0);
	}
	return NULL;
}

static void *
accept_data(void *arg)
{
	struct fproxy *fp = arg;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int a, b;

	while ((a = accept4(fp->data_lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		sa.sin_addr.s_addr = fp->data_ep.ip;
		sa.sin_port = fp->data_ep.port;
		b = dial_to(&sa);
		if (b < 0) {
			close(a);
			continue;
		}
		fp->r->data_conns++;
		pair_start(fp, a, b, 1);
	}
	return NULL;
}

struct fproxy *
fp_start(const char *target, struct fp_rules *rules)
{
	struct fproxy *fp = calloc(1, sizeof(*fp));
	uint16_t port;

	if (fp == NULL || kvt_parse_addr(target, &fp->target) < 0)
		goto fail;
	fp->r = rules;
	pthread_mutex_init(&fp->lock, NULL);
	fp->ctl_lfd = listener(&port);
	fp->data_lfd = listener(&fp->data_port);
	if (fp->ctl_lfd < 0 || fp->data_lfd < 0)
		goto fail;
	snprintf(fp->addr, sizeof(fp->addr), "127.0.0.1:%u", port);
	pthread_create(&fp->ctl_thr, NULL, accept_ctl, fp);
	pthread_create(&fp->data_thr, NULL, accept_data, fp);
	return fp;
fail:
	free(fp);
	return NULL;
}

const char *
fp_addr(const struct fproxy *fp)
{
	return fp->addr;
}

void
fp_stop(struct fproxy *fp)
{
	unsigned int i;

	shutdown(fp->ctl_lfd, SHUT_RDWR);
	shutdown(fp->data_lfd, SHUT_RDWR);
	pthread_join(fp->ctl_thr, NULL);
	pthread_join(fp->data_thr, NULL);
	for (i = 0; i < fp->npairs; i++)
		pair_cut(fp->pairs[i]);
	for (i = 0; i < fp->nthr; i++)
		pthread_join(fp->thr[i], NULL);
	for (i = 0; i < fp->npairs; i++) {
		close(fp->pairs[i]->a);
		close(fp->pairs[i]->b);
		free(fp->pairs[i]);
	}
	close(fp->ctl_lfd);
	close(fp->data_lfd);
	free(fp);
}
