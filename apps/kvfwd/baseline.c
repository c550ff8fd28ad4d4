/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The raw copy each transport competes with, measured in the same run:
 * memcpy for host memory on one host (what the shm port does, on one
 * core), with the run's access pattern: blocks of the same size from a
 * source as large as one thread's batch into a destination as large as
 * the target buffer, for at least as many bytes as the run moved.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <rte_common.h>

#include "kvfwd.h"

#define SINK_BUF (4u << 20)

/* Transport pmd carries the run: named so, or the only kind of port. */
int
kvfwd_uses(const struct kvfwd_opts *o, const char *pmd)
{
	struct kvt_port_info pi;
	unsigned int i, n = 0;
	size_t l = strlen(pmd);

	if (o->transport[0] != '\0')
		return strncmp(o->transport, pmd, l) == 0 &&
			(o->transport[l] == '\0' || o->transport[l] == ',');
	for (i = 0; i < kvt_port_count(); i++)
		if (kvt_port_info(i, &pi) == 0 && strcmp(pi.pmd, pmd) == 0)
			n++;
	return n > 0 && n == kvt_port_count();
}

/* ---- the target's sink: accept, read, drop ---- */

static void *
sink_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char *buf = malloc(SINK_BUF);

	while (buf != NULL && recv(fd, buf, SINK_BUF, 0) > 0)
		;
	free(buf);
	close(fd);
	return NULL;
}

static void *
sink_main(void *arg)
{
	int lfd = (int)(intptr_t)arg, fd;
	pthread_t th;

	while ((fd = accept(lfd, NULL, NULL)) >= 0)
		if (pthread_create(&th, NULL, sink_conn, (void *)(intptr_t)fd) == 0)
			pthread_detach(th);
	return NULL;
}

uint16_t
kvfwd_sink_start(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	pthread_t th;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, 16) != 0 || getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 ||
	    pthread_create(&th, NULL, sink_main, (void *)(intptr_t)fd) != 0) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	pthread_detach(th);
	return ntohs(sa.sin_port);
}

/* ---- plain socket streams to it ---- */

struct stream {
	char ip[64];
	uint16_t port;
	uint64_t bytes;
	uint64_t block;
	const uint8_t *src;
	double secs;
	int ok;
};

static void *
stream_main(void *arg)
{
	struct stream *st = arg;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(st->port) };
	uint64_t sent = 0;
	double t0;
	ssize_t n;
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (inet_pton(AF_INET, st->ip, &sa.sin_addr) != 1 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return NULL;
	}
	t0 = kvfwd_now();
	while (sent < st->bytes) {
		n = send(fd, st->src + sent % st->block,
			 st->block - sent % st->block, MSG_NOSIGNAL);
		if (n <= 0)
			break;
		sent += (uint64_t)n;
	}
	shutdown(fd, SHUT_WR);
	/* Wait until the sink has read everything (it closes then). */
	while (recv(fd, &one, sizeof(one), 0) > 0)
		;
	st->secs = kvfwd_now() - t0;
	st->ok = sent >= st->bytes;
	close(fd);
	return NULL;
}

/* One plain stream per target address, in parallel, moving as many bytes
 * as the run did, in the run's block size. */
static double
stream_gbps(const struct kvfwd_opts *o, const struct kvfwd_result *res)
{
	struct stream st[8];
	pthread_t th[8];
	char list[256], *tok, *save = NULL;
	uint8_t *src = malloc(o->block);
	double secs = 0;
	int n = 0, i, ok = 1;

	if (src == NULL || res->sink_port == 0)
		return -1;
	memset(src, 0x5a, o->block);
	snprintf(list, sizeof(list), "%s",
		 o->baseline_to[0] ? o->baseline_to : res->peer_ip);
	for (tok = strtok_r(list, ",", &save); tok != NULL && n < 8;
	     tok = strtok_r(NULL, ",", &save))
		n++;
	snprintf(list, sizeof(list), "%s",
		 o->baseline_to[0] ? o->baseline_to : res->peer_ip);
	save = NULL;
	for (i = 0, tok = strtok_r(list, ",", &save); i < n;
	     i++, tok = strtok_r(NULL, ",", &save)) {
		memset(&st[i], 0, sizeof(st[i]));
		snprintf(st[i].ip, sizeof(st[i].ip), "%s", tok);
		st[i].port = res->sink_port;
		st[i].bytes = RTE_MAX(res->bytes, (uint64_t)1 << 28) / (uint64_t)n;
		st[i].block = o->block;
		st[i].src = src;
		pthread_create(&th[i], NULL, stream_main, &st[i]);
	}
	for (i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		ok &= st[i].ok;
		secs = RTE_MAX(secs, st[i].secs);
	}
	free(src);
	return ok && secs > 0 ? (double)RTE_MAX(res->bytes, (uint64_t)1 << 28) /
		secs / 1e9 : -1;
}

static double
memcpy_gbps(const struct kvfwd_opts *o)
{
	uint64_t sspan = (uint64_t)o->batch * o->block, dspan = o->buffer;
	uint64_t blk = o->block, soff = 0, doff = 0, moved = 0;
	uint8_t *a = malloc(sspan), *b = malloc(dspan);
	double t0, el;

	if (a == NULL || b == NULL || blk > dspan) {
		free(a);
		free(b);
		return -1;
	}
	memset(a, 1, sspan);
	memset(b, 2, dspan);
	/* One untimed pass, as kvfwd warms the transfer path up. */
	for (doff = 0; doff + blk <= dspan; doff += blk)
		memcpy(b + doff, a + (doff / blk % o->batch) * blk, blk);
	doff = 0;
	t0 = kvfwd_now();
	do {
		memcpy(b + doff, a + soff, blk);
		moved += blk;
		soff = soff + 2 * blk > sspan ? 0 : soff + blk;
		doff = doff + 2 * blk > dspan ? 0 : doff + blk;
	} while ((el = kvfwd_now() - t0) < 0.5 || moved < o->total);
	free(a);
	free(b);
	return (double)moved / el / 1e9;
}

double
kvfwd_baseline(const struct kvfwd_opts *o, const struct kvfwd_result *res,
	       const char **name)
{
	if (kvfwd_uses(o, "tcp")) {
		*name = "plain socket stream";
		return stream_gbps(o, res);
	}
	/* The raw RDMA rate needs a perftest server on the target host:
	 * scripts/rdma-test runs ib_write_bw beside kvfwd. */
	if (kvfwd_uses(o, "rdma")) {
		*name = "ib_write_bw (run by scripts/rdma-test)";
		return -1;
	}
	if (strncmp(o->src_loc, "cpu", 3) == 0 &&
	    strncmp(o->dst_loc, "cpu", 3) == 0) {
		*name = "memcpy";
		return memcpy_gbps(o);
	}
	if (kvfwd_is_dev(o->src_loc) && kvfwd_is_dev(o->dst_loc)) {
		*name = "cudaMemcpyPeerAsync";
		return kvfwd_gpu_copy_gbps(o);
	}
	*name = NULL;
	return -1;
}
