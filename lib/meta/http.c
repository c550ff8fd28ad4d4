/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A small HTTP client for etcd's JSON gateway: one POST, one answer, on a
 * connection of its own, bounded by a deadline.  It asks in HTTP/1.0, so
 * the answer is never chunked and ends when the server closes.  Plain
 * http only (the gateway kvt talks to); names resolve through
 * getaddrinfo.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "kvt_private.h"

/* Split "http://host:port/path" (or "http://[v6]:port/path"). */
static int
url_split(const char *url, char *host, size_t hlen, char *port, size_t plen,
	  const char **path)
{
	const char *h, *e, *c;

	if (strncmp(url, "http://", 7) != 0)
		return -EINVAL;
	h = url + 7;
	e = strchr(h, '/');
	*path = e != NULL ? e : "/";
	if (e == NULL)
		e = h + strlen(h);
	if (*h == '[') {
		c = memchr(h, ']', (size_t)(e - h));
		if (c == NULL)
			return -EINVAL;
		snprintf(host, hlen, "%.*s", (int)(c - h - 1), h + 1);
		c = c[1] == ':' ? c + 1 : NULL;
	} else {
		c = memchr(h, ':', (size_t)(e - h));
		snprintf(host, hlen, "%.*s", (int)((c != NULL ? c : e) - h), h);
	}
	snprintf(port, plen, "%.*s", c != NULL ? (int)(e - c - 1) : 2,
		 c != NULL ? c + 1 : "80");
	return host[0] != '\0' ? 0 : -EINVAL;
}

/* Wait for events on fd until deadline: 0, or -ETIMEDOUT / -errno. */
static int
wait_fd(int fd, short events, uint64_t deadline_us)
{
	struct pollfd p = { .fd = fd, .events = events };
	uint64_t now;
	int r;

	for (;;) {
		now = kvt_now_us();
		if (now >= deadline_us)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline_us - now + 999) / 1000));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* A non-blocking socket connected to host:port, or -errno. */
static int
dial(const char *host, const char *port, uint64_t deadline_us)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *a;
	int fd = -1, ret = -EHOSTUNREACH, err;
	socklen_t sl = sizeof(err);

	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return -EHOSTUNREACH;
	for (a = ai; a != NULL; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    a->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		ret = errno == EINPROGRESS ? wait_fd(fd, POLLOUT, deadline_us) : -errno;
		if (ret == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) == 0)
			ret = -err;
		if (ret == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd >= 0 ? fd : ret;
}

static int
send_all(int fd, const char *p, size_t len, uint64_t deadline_us)
{
	ssize_t n;
	int ret;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		ret = wait_fd(fd, POLLOUT, deadline_us);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* Everything the server sends until it closes (at most max bytes). */
static int
recv_all(int fd, char **out, size_t *len, size_t max, uint64_t deadline_us)
{
	size_t cap = 4096;
	char *buf = malloc(cap + 1), *b;
	ssize_t n;
	int ret;

	*len = 0;
	if (buf == NULL)
		return -ENOMEM;
	for (;;) {
		if (*len == cap) {
			if (cap >= max) {
				ret = -EMSGSIZE;
				goto fail;
			}
			cap *= 2;
			b = realloc(buf, cap + 1);
			if (b == NULL) {
				ret = -ENOMEM;
				goto fail;
			}
			buf = b;
		}
		n = recv(fd, buf + *len, cap - *len, 0);
		if (n == 0)
			break;
		if (n > 0) {
			*len += (size_t)n;
			continue;
		}
		if (errno != EAGAIN && errno != EINTR) {
			ret = -errno;
			goto fail;
		}
		ret = wait_fd(fd, POLLIN, deadline_us);
		if (ret < 0)
			goto fail;
	}
	buf[*len] = '\0';
	*out = buf;
	return 0;
fail:
	free(buf);
	return ret;
}

int
kvt_http_post(const char *url, const char *body, uint64_t deadline_us,
	      size_t max, long *status, char **answer)
{
	char host[128], port[16], *req = NULL, *raw = NULL, *hdr_end;
	const char *path;
	size_t len = 0;
	int fd, ret, n;

	*answer = NULL;
	*status = 0;
	ret = url_split(url, host, sizeof(host), port, sizeof(port), &path);
	if (ret < 0)
		return ret;
	n = asprintf(&req, "POST %s HTTP/1.0\r\nHost: %s:%s\r\n"
		     "Content-Type: application/json\r\n"
		     "Content-Length: %zu\r\n\r\n%s",
		     path, host, port, strlen(body), body);
	if (n < 0)
		return -ENOMEM;
	fd = dial(host, port, deadline_us);
	if (fd < 0) {
		free(req);
		return fd;
	}
	ret = send_all(fd, req, (size_t)n, deadline_us);
	if (ret == 0)
		ret = recv_all(fd, &raw, &len, max, deadline_us);
	close(fd);
	free(req);
	if (ret < 0)
		return ret;
	hdr_end = strstr(raw, "\r\n\r\n");
	if (hdr_end == NULL || sscanf(raw, "HTTP/%*d.%*d %ld", status) != 1) {
		free(raw);
		return -EPROTO;
	}
	hdr_end += 4;
	memmove(raw, hdr_end, len - (size_t)(hdr_end - raw) + 1);
	*answer = raw;
	return 0;
}
