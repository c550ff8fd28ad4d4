/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the tests: patterns, checksums, helper processes. */
#ifndef KVT_TEST_COMMON_H
#define KVT_TEST_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

/* Microseconds of CLOCK_MONOTONIC. */
uint64_t tc_now_us(void);

/* The peers and kvfwd the tests start are ThreadSanitizer builds
 * (meson -Dtest_peers: scripts/test with SANITIZE=thread). */
/* Sizes and counts every test uses. */
#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define DIM(a) (sizeof(a) / sizeof((a)[0]))

#define tc_tsan_peers() (getenv("KVT_TEST_TSAN_PEERS") != NULL)
/* Fill p with a pattern unique to seed (and to each 8-byte position). */
void tc_fill(void *p, size_t len, uint64_t seed);
uint64_t tc_hash(const void *p, size_t len);

/* A kvt-testpeer process. */
struct tc_peer {
	pid_t pid;
	FILE *in;		/* its stdin */
	int out;		/* its stdout */
	char addr[64];
};

/*
 * Start kvt-testpeer with kvt options opts (may be NULL) on top of the
 * defaults (the wait idle policy, loopback listener).  @return 0 or -errno.
 */
int tc_peer_start(struct tc_peer *p, const char *opts);
/* The same inside network namespace netns (opts must name --kvt-listen). */
int tc_peer_start_in(struct tc_peer *p, const char *netns, const char *opts);
/* Send a command; reply (without "ok ") in buf.  @return 0 on "ok". */
int tc_peer_cmd(struct tc_peer *p, char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Send a command and parse the reply's first number. */
long long tc_peer_num(struct tc_peer *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Send without waiting; take the reply later with tc_peer_reply. */
void tc_peer_send(struct tc_peer *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int tc_peer_reply(struct tc_peer *p, char *buf, size_t len);
void tc_peer_kill(struct tc_peer *p);
void tc_peer_stop(struct tc_peer *p);

/* Run a shell command built from fmt; @return its exit status, or -1. */
int tc_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* kvt_init for the test process itself, with opts added to defaults. */
int tc_engine_init(const char *opts);

#endif
