/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Same-host sharing, used by every transport that reaches a peer on this
 * host (shm, nvlink): memfd regions mapped through /proc/<pid>/fd/<n>
 * (inode-checked, so a recycled fd number cannot map the wrong file), and
 * notification inboxes that live in a memfd the sender maps.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "kvt_private.h"

#define KVT_SHARED_INBOX_SLOTS 256

int
kvt_memfd_key(const struct kvt_lmem *m, struct kvt_memfd_key *k)
{
	if (m->fd < 0)
		return -ENOTSUP;
	memset(k, 0, sizeof(*k));
	k->pid = (uint32_t)getpid();
	k->fd = m->fd;
	k->off = m->fd_off;
	k->ino = m->fd_ino;
	k->len = m->len;
	return 0;
}

int
kvt_memfd_map(const struct kvt_memfd_key *k, int prot, struct kvt_map *out)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t aoff = k->off & ~(uint64_t)(pg - 1);
	char path[64];
	struct stat st;
	void *p;
	int fd, err;

	snprintf(path, sizeof(path), "/proc/%u/fd/%d", k->pid, k->fd);
	fd = open(path, (prot & PROT_WRITE) ? O_RDWR : O_RDONLY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != k->ino ||
	    (uint64_t)st.st_size < k->off + k->len) {
		close(fd);
		return -ESTALE;
	}
	out->len = (size_t)(k->len + k->off - aoff);
	/* Populated now, so page faults do not land in the transfers. */
	p = mmap(NULL, out->len, prot, MAP_SHARED | MAP_POPULATE, fd,
		 (off_t)aoff);
	err = errno;
	close(fd);
	if (p == MAP_FAILED)
		return -err;
	out->map = p;
	out->base = (uint8_t *)p + (k->off - aoff);
	return 0;
}

void
kvt_map_release(struct kvt_map *m)
{
	if (m->map != NULL)
		munmap(m->map, m->len);
	memset(m, 0, sizeof(*m));
}

/* ---- shared inboxes ---- */

struct inbox_key {
	uint32_t pid;
	int32_t fd;
	uint64_t ino;
	uint64_t size;
};

int
kvt_shared_inbox_create(struct kvt_shared_inbox *sb, const char *peer,
			struct kvt_buf *rep)
{
	struct inbox_key k = { .pid = (uint32_t)getpid() };
	struct stat st;
	int ret;

	memset(sb, 0, sizeof(*sb));
	sb->len = kvt_inbox_size(KVT_SHARED_INBOX_SLOTS);
	sb->fd = memfd_create("kvt-inbox", MFD_CLOEXEC);
	if (sb->fd < 0)
		return -errno;
	if (ftruncate(sb->fd, (off_t)sb->len) != 0 || fstat(sb->fd, &st) != 0) {
		ret = -errno;
		goto close_fd;
	}
	sb->ib = mmap(NULL, sb->len, PROT_READ | PROT_WRITE, MAP_SHARED,
		      sb->fd, 0);
	if (sb->ib == MAP_FAILED) {
		ret = -errno;
		goto close_fd;
	}
	kvt_inbox_init(sb->ib, KVT_SHARED_INBOX_SLOTS);
	ret = kvt_inbox_attach(sb->ib, peer);
	if (ret < 0)
		goto unmap;
	k.fd = sb->fd;
	k.ino = st.st_ino;
	k.size = sb->len;
	ret = kvt_buf_put(rep, &k, sizeof(k));
	if (ret < 0)
		goto detach;
	return 0;

detach:
	kvt_inbox_detach(sb->ib);
unmap:
	munmap(sb->ib, sb->len);
close_fd:
	close(sb->fd);
	memset(sb, 0, sizeof(*sb));
	return ret;
}

static void
inbox_release(void *arg)
{
	struct kvt_shared_inbox *sb = arg;

	munmap(sb->ib, sb->len);
	close(sb->fd);
	free(sb);
}

void
kvt_shared_inbox_close(struct kvt_shared_inbox *sb)
{
	struct kvt_shared_inbox *keep;

	if (sb->ib == NULL)
		return;
	/* Messages the peer sent just before it left are still ours: keep
	 * the inbox readable until they are taken. */
	keep = malloc(sizeof(*keep));
	if (keep == NULL) {
		kvt_inbox_detach(sb->ib);
		munmap(sb->ib, sb->len);
		close(sb->fd);
	} else {
		*keep = *sb;
		kvt_inbox_retire(keep->ib, inbox_release, keep);
	}
	memset(sb, 0, sizeof(*sb));
}

int
kvt_shared_inbox_map(const uint8_t *rep, size_t len, uint32_t pid,
		     struct kvt_map *out)
{
	struct kvt_memfd_key mk = { 0 };
	struct inbox_key k;

	if (len != sizeof(k))
		return -EPROTO;
	memcpy(&k, rep, sizeof(k));
	if (k.pid != pid || k.size != kvt_inbox_size(KVT_SHARED_INBOX_SLOTS))
		return -EPROTO;
	mk.pid = k.pid;
	mk.fd = k.fd;
	mk.ino = k.ino;
	mk.len = k.size;
	return kvt_memfd_map(&mk, PROT_READ | PROT_WRITE, out);
}
