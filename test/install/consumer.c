/* SPDX-License-Identifier: BSD-3-Clause */
/* A program built against the installed kvt alone (pkg-config kvt): one
 * write to its own engine over tcp, the bytes compared. */
#include <stdio.h>
#include <string.h>
#include <kvt.h>

int
main(void)
{
	char *argv[] = { "consumer", "--", "--kvt-pmd", "tcp", "--kvt-listen",
			 "127.0.0.1:0", NULL }, addr[64];
	static char src[65536], dst[65536];
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = src,
			      .remote = (uintptr_t)dst, .len = sizeof(src) };
	struct kvt_peer *peer;
	struct kvt_batch *b;
	int ret = 1;

	memset(src, 0x5a, sizeof(src));
	if (kvt_init(6, argv) < 0 || kvt_listen_addr(addr, sizeof(addr)) < 0 ||
	    kvt_mem_register(src, sizeof(src), "cpu:0", 0) == NULL ||
	    kvt_mem_register(dst, sizeof(dst), "cpu:0", KVT_MEM_REMOTE_WRITE) == NULL)
		return 1;
	peer = kvt_peer_open(addr, 5000);
	b = kvt_batch_alloc(1);
	if (peer != NULL && b != NULL && kvt_submit(b, peer, &x, 1, NULL) == 0 &&
	    kvt_wait(b, 10000000) == 0 && kvt_status(b, 0) == 0)
		ret = memcmp(src, dst, sizeof(dst)) != 0;
	printf("consumer: %s\n", ret == 0 ? "64 KiB written and intact" : "failed");
	kvt_batch_free(b);
	kvt_peer_close(peer);
	kvt_fini();
	return ret;
}
