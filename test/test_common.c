/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <xxhash.h>

#include "kvt.h"
#include "test_common.h"

/* How long a peer may take to answer a command.  A ThreadSanitizer-built
 * peer touches about five times the memory it maps (the shadow): a 1 GiB
 * allocation took it 26-32 s on a CI-like VM whose free memory was cold
 * (fresh pages there cost several us each), so it gets four times as
 * long. */
#define TC_REPLY_US (30 * 1000 * 1000)
#define tc_reply_us() (tc_tsan_peers() ? 4ull * TC_REPLY_US : TC_REPLY_US)

uint64_t
tc_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void
tc_fill(void *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1, v;
	uint8_t *b = p;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		v = x + i;
		memcpy(b + i, &v, 8);
	}
	for (; i < len; i++)
		b[i] = (uint8_t)(seed + i);
}

uint64_t
tc_hash(const void *p, size_t len)
{
	return XXH64(p, len, 0);
}

/* Split opts on spaces into argv (modifies a copy). */
static int
split(char *s, char **argv, int max)
{
	int n = 0;
	char *tok, *save = NULL;

	for (tok = strtok_r(s, " ", &save); tok != NULL && n < max;
	     tok = strtok_r(NULL, " ", &save))
		argv[n++] = tok;
	return n;
}

/* Read one line from fd, a byte at a time (no buffering to go stale). */
static int
read_line(int fd, char *buf, size_t len, uint64_t us)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t deadline = tc_now_us() + us;
	size_t n = 0;
	char c;

	while (n + 1 < len) {
		if (poll(&pfd, 1, 100) <= 0) {
			if (tc_now_us() > deadline)
				return -ETIMEDOUT;
			continue;
		}
		if (read(fd, &c, 1) != 1)
			return -EPIPE;
		if (c == '\n')
			break;
		buf[n++] = c;
	}
	buf[n] = '\0';
	return 0;
}

int
tc_peer_start(struct tc_peer *p, const char *opts)
{
	return tc_peer_start_in(p, NULL, opts);
}

int
tc_peer_start_in(struct tc_peer *p, const char *netns, const char *opts)
{
	const char *bin = getenv("KVT_TESTPEER");
	char line[256], *argv[64], optbuf[1024], self[PATH_MAX];
	int in[2], out[2], n = 0, ret;
	ssize_t sl;

	memset(p, 0, sizeof(*p));
	if (bin == NULL) {
		/* Beside the test binary, where meson builds it. */
		sl = readlink("/proc/self/exe", self, sizeof(self) - 32);
		if (sl <= 0)
			return -ENOENT;
		self[sl] = '\0';
		strcpy(strrchr(self, '/') + 1, "kvt-testpeer");
		bin = self;
	}
	if (pipe(in) != 0 || pipe(out) != 0)
		return -errno;
	snprintf(optbuf, sizeof(optbuf), "%s%s",
		 netns != NULL ? "" : "--kvt-listen 127.0.0.1:0 ",
		 opts != NULL ? opts : "");
	if (netns != NULL) {
		/* Inside a network namespace: "ip netns exec NS ...". */
		argv[n++] = (char *)"/usr/sbin/ip";
		argv[n++] = (char *)"netns";
		argv[n++] = (char *)"exec";
		argv[n++] = (char *)netns;
	}
	argv[n++] = (char *)bin;
	argv[n++] = (char *)"--";
	n += split(optbuf, argv + n, 60);
	argv[n] = NULL;
	p->pid = fork();
	if (p->pid < 0)
		return -errno;
	if (p->pid == 0) {
		/* An application's default dispositions: a SIGPIPE that
		 * kvt let through kills the peer, as it would kill it. */
		signal(SIGPIPE, SIG_DFL);
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	p->in = fdopen(in[1], "w");
	p->out = out[0];
	setvbuf(p->in, NULL, _IOLBF, 0);
	ret = read_line(p->out, line, sizeof(line), tc_reply_us());
	if (ret == 0 && sscanf(line, "ready %63s", p->addr) != 1)
		ret = -EPROTO;
	if (ret < 0)
		tc_peer_kill(p);
	return ret;
}

int
tc_peer_reply(struct tc_peer *p, char *buf, size_t len)
{
	char line[4096];
	int ret;

	ret = read_line(p->out, line, sizeof(line), tc_reply_us());
	if (ret < 0)
		return ret;
	if (strncmp(line, "ok", 2) != 0) {
		snprintf(buf, len, "%s", line);
		return -EPROTO;
	}
	snprintf(buf, len, "%s", line[2] == ' ' ? line + 3 : "");
	return 0;
}

static int
vcmd(struct tc_peer *p, char *buf, size_t len, const char *fmt, va_list ap)
{
	vfprintf(p->in, fmt, ap);
	fputc('\n', p->in);
	fflush(p->in);
	return tc_peer_reply(p, buf, len);
}

void
tc_peer_send(struct tc_peer *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(p->in, fmt, ap);
	va_end(ap);
	fputc('\n', p->in);
	fflush(p->in);
}

int
tc_peer_cmd(struct tc_peer *p, char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = vcmd(p, buf, len, fmt, ap);
	va_end(ap);
	return ret;
}

long long
tc_peer_num(struct tc_peer *p, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = vcmd(p, buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (ret < 0)
		return LLONG_MIN;
	return strtoll(buf, NULL, 0);
}

void
tc_peer_kill(struct tc_peer *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		p->pid = 0;
	}
	if (p->in != NULL)
		fclose(p->in);
	if (p->out > 0)
		close(p->out);
	p->in = NULL;
	p->out = -1;
}

void
tc_peer_stop(struct tc_peer *p)
{
	uint64_t deadline = tc_now_us() + 5000000;
	int st;

	if (p->pid <= 0)
		return;
	fprintf(p->in, "quit\n");
	fflush(p->in);
	while (tc_now_us() < deadline) {
		if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
			p->pid = 0;
			break;
		}
		usleep(10000);
	}
	tc_peer_kill(p);
}

int
tc_engine_init(const char *opts)
{
	char optbuf[1024], *argv[64];
	int n = 0;

	snprintf(optbuf, sizeof(optbuf),
		 "--kvt-listen 127.0.0.1:0 %s",
		 opts != NULL ? opts : "");
	argv[n++] = (char *)"kvt-test";
	argv[n++] = (char *)"--";
	n += split(optbuf, argv + n, 60);
	argv[n] = NULL;
	return kvt_init(n, argv);
}

int
tc_sh(const char *fmt, ...)
{
	char cmd[PATH_MAX + 512];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
