/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvfwd initiator: threads that submit batches to the target and time
 * them.  Plain mode writes (or reads) blocks into each thread's share of
 * the target buffer, --depth batches in flight; a mixed stream writes
 * small blocks one at a time beside it.  Fence mode is in fenced.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_common.h>
#include <rte_errno.h>

#include "kvfwd.h"
#include "initiator.h"

/* Local block i came from target block first_block + i, or, for a page
 * list, first_block + order[i]. */
static void
read_check(struct worker *w, const uint8_t *local, unsigned int n,
	   uint64_t first_block, const uint32_t *order)
{
	const struct kvfwd_opts *o = w->sh->o;
	uint64_t blk;
	unsigned int i;

	for (i = 0; i < n; i++) {
		w->read_checked++;
		blk = first_block + (order != NULL ? order[i] : i);
		if (!kvfwd_check(local + i * o->block, o->block, blk + 1,
				 kvfwd_is_dev(o->src_loc)))
			w->read_bad++;
	}
}

/* A random order of the share's n blocks (page lists scatter them). */
static uint32_t *
shuffled(uint64_t n, unsigned int seed)
{
	uint32_t *p = malloc(n * sizeof(*p)), t;
	uint64_t i, j;

	if (p == NULL)
		return NULL;
	for (i = 0; i < n; i++)
		p[i] = (uint32_t)i;
	srand(seed);
	for (i = n; i > 1; i--) {
		j = (uint64_t)rand() % i;
		t = p[i - 1];
		p[i - 1] = p[j];
		p[j] = t;
	}
	return p;
}

/* --pages, --list: blocks [next, next + n) of the share, as one page
 * list, or one block list (col: 3 * n scratch numbers). */
static int
submit_list(struct worker *w, struct kvt_batch *b, uint8_t *local,
	    const uint32_t *order, uint32_t *li, uint32_t *ri, uint64_t *col,
	    uint64_t first, uint64_t next, unsigned int n)
{
	const struct kvfwd_opts *o = w->sh->o;
	struct kvt_pages pg = { .op = o->op, .n = n, .page_size = o->block,
				.local = local, .remote = w->dest->rbase,
				.local_idx = li, .remote_idx = ri };
	struct kvt_blocks bl = { .op = o->op, .n = n, .local = col,
				 .remote = col + n, .len = col + 2 * n };
	unsigned int i;

	if (o->pages == KVFWD_BLOCKS) {
		for (i = 0; i < n; i++) {
			col[i] = (uintptr_t)local + (uint64_t)i * o->block;
			col[n + i] = w->dest->rbase +
				(first + order[next + i]) * o->block;
			col[2 * n + i] = o->block;
		}
		return kvt_submit_blocks(b, w->dest->peer, &bl, &w->sh->po);
	}
	for (i = 0; i < n; i++) {
		li[i] = i;
		ri[i] = (uint32_t)(first + order[next + i]);
	}
	return kvt_submit_pages(b, w->dest->peer, &pg, &w->sh->po);
}

/* A batch of a plain worker, submitted and not yet waited for. */
struct inflight {
	struct kvt_batch *b;
	uint8_t *local;		/* its share of the source */
	unsigned int n;		/* requests; 0: free */
	uint64_t first;		/* its first block in the target buffer */
	const uint32_t *order;	/* a page list's blocks, after first */
	double t0;
};

/* Wait for f, check and count it, and make it free again. */
static int
inflight_finish(struct worker *w, struct inflight *f)
{
	struct shared *sh = w->sh;
	const struct kvfwd_opts *o = sh->o;

	if (kvfwd_wait_timed(w, f->b, o->pages ? 1 : f->n, f->t0) < 0) {
		fprintf(stderr, "kvfwd: submit/wait failed\n");
		return -1;
	}
	if (o->verify && o->op == KVT_OP_READ)
		read_check(w, f->local, f->n, f->first, f->order);
	if (kvfwd_reuse(f->b) < 0)
		return -1;
	w->requests += f->n;
	w->bytes += (uint64_t)f->n * o->block;
	__atomic_fetch_add(&sh->bytes_done, (uint64_t)f->n * o->block,
			   __ATOMIC_RELAXED);
	f->n = 0;
	return 0;
}

/*
 * Plain mode: blocks go to this thread's share of the target buffer, in
 * --depth batches in flight: the oldest is waited for before its batch
 * is filled again.  Reads land in a source area of their own per batch;
 * writes of every batch read the same one.
 */
static void *
plain_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	const struct kvfwd_opts *o = sh->o;
	const struct kvfwd_dest *d = w->dest;
	/* The threads of one target split its buffer. */
	unsigned int per = (o->threads + sh->ndest - 1) / sh->ndest;
	uint64_t share = d->rlen / per / o->block;
	uint64_t first = (w->id / sh->ndest) * share, next = 0;
	struct kvt_xfer *x = calloc(o->batch, sizeof(*x));
	struct inflight *fl = calloc(o->depth, sizeof(*fl)), *f;
	uint32_t *li = NULL, *ri = NULL, *order = NULL;
	uint64_t *col = NULL;
	unsigned int n, i, k = 0;
	int ret;

	if (o->pages) {
		li = calloc(o->batch, sizeof(*li));
		ri = calloc(o->batch, sizeof(*ri));
		col = calloc(3 * (size_t)o->batch, sizeof(*col));
		order = shuffled(share, w->id + 1);
		if (li == NULL || ri == NULL || col == NULL || order == NULL)
			sh->failed = 1;
	}
	for (i = 0; fl != NULL && i < o->depth; i++) {
		fl[i].b = kvt_batch_alloc(o->batch);
		fl[i].local = w->src + (o->op == KVT_OP_READ ?
					(uint64_t)i * o->batch * o->block : 0);
		if (fl[i].b == NULL)
			sh->failed = 1;
	}
	while (x != NULL && fl != NULL && !sh->failed &&
	       (n = kvfwd_take_blocks(sh, o->batch)) > 0) {
		f = &fl[k];
		if (f->n > 0 && inflight_finish(w, f) < 0) {
			sh->failed = 1;
			break;
		}
		if (next + n > share)
			next = 0;
		f->first = first + next;
		f->t0 = kvfwd_now();
		if (o->pages) {
			f->first = first;
			f->order = order + next;
			ret = submit_list(w, f->b, f->local, order, li, ri,
					  col, first, next, n);
		} else {
			for (i = 0; i < n; i++)
				x[i] = (struct kvt_xfer){ .op = o->op,
					.local = f->local + (uint64_t)i * o->block,
					.remote = d->rbase + (f->first + i) * o->block,
					.len = o->block };
			f->t0 = kvfwd_now();
			ret = kvt_submit(f->b, d->peer, x, n, &sh->po);
		}
		if (ret < 0) {
			fprintf(stderr, "kvfwd: submit/wait failed\n");
			sh->failed = 1;
			break;
		}
		f->n = n;
		next += n;
		k = (k + 1) % o->depth;
	}
	/* The rest, oldest first (after a failure: to let go of them). */
	for (i = 0; fl != NULL && i < o->depth; i++) {
		f = &fl[(k + i) % o->depth];
		if (f->n > 0 && inflight_finish(w, f) < 0)
			sh->failed = 1;
		kvt_batch_free(f->b);
	}
	free(fl);
	free(x);
	free(li);
	free(ri);
	free(col);
	free(order);
	return NULL;
}

/*
 * --mixed: 4 KiB writes one at a time, in their own class, to the area
 * kept for them, while the main stream runs.
 */
#define MIXED_AREA (1ull << 20)
#define MIXED_BLOCK 4096u

/* Wait until us microseconds have passed since t0. */
static void
pace(double t0, uint32_t us)
{
	double left = t0 + us / 1e6 - kvfwd_now();
	struct timespec ts = { 0, 0 };

	if (left <= 0)
		return;
	ts.tv_nsec = (long)(left * 1e9) % 1000000000L;
	ts.tv_sec = (time_t)left;
	nanosleep(&ts, NULL);
}

static void *
mixed_worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	struct kvt_submit_opts so = { .priority = sh->o->mixed_priority };
	struct kvt_batch *b = kvt_batch_alloc(1);
	struct kvt_xfer x = { .op = KVT_OP_WRITE, .local = w->src,
			      .len = MIXED_BLOCK };
	uint64_t i = 0;
	double t0;

	while (b != NULL && !sh->failed &&
	       !__atomic_load_n(&sh->streams_done, __ATOMIC_ACQUIRE)) {
		x.remote = sh->mixed_base + (i++ % (MIXED_AREA / MIXED_BLOCK)) *
			MIXED_BLOCK;
		t0 = kvfwd_now();
		if (kvt_submit(b, sh->peer, &x, 1, &so) < 0 ||
		    kvfwd_wait_timed(w, b, 1, t0) < 0 || kvfwd_reuse(b) < 0) {
			fprintf(stderr, "kvfwd: a mixed-stream write failed\n");
			sh->failed = 1;
			break;
		}
		w->requests++;
		pace(t0, sh->o->mixed_every_us);
	}
	kvt_batch_free(b);
	return NULL;
}

static int
mixed_start(struct worker *mw)
{
	mw->req.v = malloc(MAX_SAMPLES * sizeof(double));
	mw->batch.v = malloc(MAX_SAMPLES * sizeof(double));
	mw->src = kvt_mem_alloc(MIXED_BLOCK, "cpu:0");
	if (mw->req.v == NULL || mw->batch.v == NULL || mw->src == NULL ||
	    kvt_mem_register(mw->src, MIXED_BLOCK, "cpu:0", 0) == NULL) {
		fprintf(stderr, "kvfwd: cannot set up the mixed stream\n");
		return -1;
	}
	kvfwd_fill(mw->src, MIXED_BLOCK, 1, 0, 0);
	return pthread_create(&mw->th, NULL, mixed_worker, mw) == 0 ? 0 : -1;
}

/* The main stream ended: stop the small writes and keep their samples. */
static void
mixed_end(struct shared *sh, struct worker *mw, struct kvfwd_result *res)
{
	__atomic_store_n(&sh->streams_done, 1, __ATOMIC_RELEASE);
	if (mw->th != 0)
		pthread_join(mw->th, NULL);
	res->mixed_lat = mw->req.v;
	res->n_mixed_lat = mw->req.n;
	res->mixed_requests = mw->requests;
	free(mw->batch.v);
}

/* The target's buffer and fence table, from what it exports. */
static int
find_regions(struct shared *sh)
{
	struct kvt_region r[64];
	double until = kvfwd_now() + 5;
	int n, i;

	do {
		n = kvt_peer_regions(sh->peer, r, RTE_DIM(r));
		for (i = 0; i < n && i < (int)RTE_DIM(r); i++) {
			if (r[i].fence_slots > 0)
				sh->ftable = r[i].base;
			else if (r[i].len > sh->rlen &&
				 (r[i].flags & KVT_MEM_REMOTE_WRITE))
				sh->rbase = r[i].base, sh->rlen = r[i].len;
		}
	} while ((sh->rlen == 0 || sh->ftable == 0) && kvfwd_now() < until &&
		 usleep(10000) == 0);
	return sh->rlen != 0 ? 0 : -ENOENT;
}

static int
say(struct shared *sh, const char *text)
{
	struct kvt_submit_opts so = { .notify = text,
				      .notify_len = (uint32_t)strlen(text) };
	struct kvt_batch *b = kvt_batch_alloc(1);
	int ret;

	ret = kvt_submit(b, sh->peer, NULL, 0, &so);
	if (ret >= 0)
		ret = kvt_wait(b, 5000000);
	if (ret == 0)
		ret = kvt_status(b, 0);
	kvt_batch_free(b);
	return ret;
}

/*
 * Wait for a text message from the target starting with prefix.
 * @return 0, -EBUSY (the target serves another initiator), -ECONNRESET
 * (the target is gone: no use waiting), -ETIMEDOUT.
 */
static int
wait_text(struct shared *sh, const char *prefix)
{
	double until = kvfwd_now() + 30;
	int found = 0, busy = 0;

	while (!found && !busy && kvfwd_now() < until) {
		kvfwd_pump_credits(sh);
		pthread_mutex_lock(&sh->lock);
		found = strncmp(sh->result, prefix, strlen(prefix)) == 0;
		busy = strcmp(sh->result, "busy") == 0;
		pthread_mutex_unlock(&sh->lock);
		if (!found && kvt_peer_state(sh->peer) != 0)
			return -ECONNRESET;
		if (!found)
			usleep(1000);
	}
	return found ? 0 : busy ? -EBUSY : -ETIMEDOUT;
}

static void
progress(struct shared *sh, struct worker *w)
{
	double last = kvfwd_now(), now;
	uint64_t prev = 0, done;
	unsigned int i, running;
	char gb[32];

	do {
		usleep(100000);
		running = 0;
		for (i = 0; i < sh->o->threads; i++)
			running += pthread_tryjoin_np(w[i].th, NULL) == EBUSY;
		now = kvfwd_now();
		if (now - last >= 1.0 || running == 0) {
			done = __atomic_load_n(&sh->bytes_done, __ATOMIC_RELAXED);
			kvfwd_fmt_bytes(gb, sizeof(gb), (double)done);
			printf("\r  %6.1f s  %10s moved  %8.2f GB/s", now - sh->t0,
			       gb, (double)(done - prev) / (now - last) / 1e9);
			fflush(stdout);
			prev = done;
			last = now;
		}
	} while (running > 0);
	printf("\n");
}

static int
merge(struct kvfwd_result *res, struct worker *w, unsigned int n)
{
	unsigned int i;

	res->req_lat = malloc(n * MAX_SAMPLES * sizeof(double));
	res->batch_lat = malloc(n * MAX_SAMPLES * sizeof(double));
	if (res->req_lat == NULL || res->batch_lat == NULL)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		res->bytes += w[i].bytes;
		res->requests += w[i].requests;
		res->errors += w[i].errors;
		res->checked += w[i].read_checked;
		res->mixed += w[i].read_bad;
		memcpy(res->req_lat + res->n_req_lat, w[i].req.v,
		       w[i].req.n * sizeof(double));
		res->n_req_lat += w[i].req.n;
		memcpy(res->batch_lat + res->n_batch_lat, w[i].batch.v,
		       w[i].batch.n * sizeof(double));
		res->n_batch_lat += w[i].batch.n;
		free(w[i].req.v);
		free(w[i].batch.v);
	}
	return 0;
}

/*
 * One untimed pass over the target buffer, so first-touch costs (page
 * tables, lazily backed memory) do not land in the measurement.  It
 * moves large requests from a buffer of its own whatever --block is (a
 * pass in 4 KiB requests one at a time took 40 s), and says so.
 */
#define WARM_CHUNK (4ull << 20)
#define WARM_BATCH 16u

static int
warm_up(struct shared *sh, const struct kvfwd_dest *d)
{
	const struct kvfwd_opts *o = sh->o;
	uint64_t chunk = RTE_MIN(RTE_MAX(WARM_CHUNK, o->block), d->rlen);
	uint64_t off = 0, len;
	struct kvt_xfer x[WARM_BATCH];
	struct kvt_batch *b = kvt_batch_alloc(WARM_BATCH);
	uint8_t *buf = kvt_mem_alloc(chunk, o->src_loc);
	struct kvt_mem *m = NULL;
	char total[32];
	unsigned int n;
	int ret = -ENOMEM;

	if (buf != NULL)
		m = kvt_mem_register(buf, chunk, o->src_loc, 0);
	if (b == NULL || m == NULL)
		goto out;
	kvfwd_fmt_bytes(total, sizeof(total), (double)d->rlen);
	if (!o->json)
		fprintf(stderr, "kvfwd: warming up the target buffer (%s)\n", total);
	ret = 0;
	while (ret == 0 && off < d->rlen) {
		for (n = 0; n < WARM_BATCH && off < d->rlen; n++, off += len) {
			len = RTE_MIN(chunk, d->rlen - off);
			x[n] = (struct kvt_xfer){ .op = o->op, .local = buf,
				.remote = d->rbase + off, .len = len };
		}
		/* Requests of one batch may overlap in our buffer: only the
		 * remote side matters here.  The wait is kvt's backstop (each
		 * request settles within the peer timeout); it allows 1 MB/s,
		 * as slow as an emulated NIC on a loaded host gets. */
		ret = kvt_submit(b, d->peer, x, n, NULL);
		if (ret >= 0)
			ret = kvt_wait(b, WAIT_US + (uint64_t)n * chunk);
		for (; ret == 0 && n > 0; n--)
			ret = kvt_status(b, n - 1);
		kvt_batch_reset(b);
	}
out:
	if (m != NULL)
		kvt_mem_unregister(m);
	kvt_mem_free(buf);
	kvt_batch_free(b);
	return ret;
}

static int
check_sizes(const struct kvfwd_opts *o, const struct shared *sh)
{
	char a[32], b[32];

	if (!o->fence && sh->rlen / o->threads <
	    (uint64_t)o->depth * o->batch * o->block) {
		kvfwd_fmt_bytes(a, sizeof(a), (double)sh->rlen);
		kvfwd_fmt_bytes(b, sizeof(b), (double)o->threads * o->depth *
				o->batch * o->block);
		fprintf(stderr, "kvfwd: target buffer %s is smaller than threads x batch x block x depth = %s\n",
			a, b);
		return -1;
	}
	if (o->fence && (sh->ftable == 0 || sh->rlen < o->block)) {
		fprintf(stderr, "kvfwd: target has no fence table or a buffer smaller than one block\n");
		return -1;
	}
	return 0;
}

/*
 * Blocks [0, n) of the target hold every block plain mode may read:
 * thread w reads inside [w * share, w * share + min(share, budget)).
 * Page lists and timed runs may reach any block of a share.
 */
static uint64_t
read_reach(const struct kvfwd_opts *o, const struct shared *sh)
{
	uint64_t share = sh->rlen / o->threads / o->block;
	uint64_t budget = (o->total + o->block - 1) / o->block;

	if (o->pages || o->duration > 0 || budget > share)
		budget = share;
	return (uint64_t)(o->threads - 1) * share + budget;
}

/*
 * --peer A,B,...: the targets after the first, for plain runs; each
 * one's largest writable buffer.  @return 0 or an exit code.
 */
static int
more_dests(struct shared *sh, const char *list)
{
	const struct kvfwd_opts *o = sh->o;
	struct kvt_region r[64];
	struct kvfwd_dest *d;
	char addrs[sizeof(o->peer)], *tok, *save = NULL;
	double until;
	int n, i;

	snprintf(addrs, sizeof(addrs), "%s", list);
	for (tok = strtok_r(addrs, ",", &save); tok != NULL;
	     tok = strtok_r(NULL, ",", &save)) {
		if (sh->ndest == KVFWD_MAX_DESTS || sh->ndest == o->threads) {
			fprintf(stderr, "kvfwd: more targets than --threads (or %u)\n",
				KVFWD_MAX_DESTS);
			return KVFWD_EXIT_USAGE;
		}
		d = &sh->dest[sh->ndest++];
		d->peer = kvt_peer_open(tok, 5000);
		if (d->peer == NULL) {
			fprintf(stderr, "kvfwd: cannot reach target %s: %s\n", tok,
				rte_strerror(rte_errno));
			return KVFWD_EXIT_PEER;
		}
		until = kvfwd_now() + 5;
		do {
			n = kvt_peer_regions(d->peer, r, RTE_DIM(r));
			for (i = 0; i < n && i < (int)RTE_DIM(r); i++)
				if (r[i].fence_slots == 0 && r[i].len > d->rlen &&
				    (r[i].flags & KVT_MEM_REMOTE_WRITE))
					d->rbase = r[i].base, d->rlen = r[i].len;
		} while (d->rlen == 0 && kvfwd_now() < until && usleep(10000) == 0);
	}
	/* Each target's threads split its buffer. */
	for (i = 0; i < (int)sh->ndest; i++)
		if (sh->dest[i].rlen / ((o->threads + sh->ndest - 1) / sh->ndest) <
		    (uint64_t)o->depth * o->batch * o->block) {
			fprintf(stderr, "kvfwd: target %u's buffer is smaller than its threads x batch x block x depth\n",
				i);
			return KVFWD_EXIT_USAGE;
		}
	return 0;
}

/* Bytes moved to each target (several only): at the start of the timed
 * part (end 0), then what moved since (end 1). */
static void
dest_bytes(const struct shared *sh, struct kvfwd_result *res, int end)
{
	struct kvt_peer_stats st;
	unsigned int i;

	if (sh->ndest < 2)
		return;
	res->ntargets = sh->ndest;
	for (i = 0; i < sh->ndest; i++) {
		if (kvt_peer_stats(sh->dest[i].peer, &st) < 0)
			continue;
		res->target_bytes[i] = st.write_bytes + st.read_bytes -
			(end ? res->target_bytes[i] : 0);
	}
}

static void
dests_close(struct shared *sh)
{
	unsigned int i;

	for (i = 1; i < sh->ndest; i++)
		kvt_peer_close(sh->dest[i].peer);
}

/*
 * Open a session with the target: "hello", then its "ready SINKPORT
 * [OFF LEN SLOT0]": the sink for a tcp baseline and, from a target that
 * serves several initiators, the area of its buffer and the first fence
 * slot that are this session's.  @return 0 or a negative errno.
 */
static int
hello(struct shared *sh, struct kvfwd_result *res)
{
	const struct kvfwd_opts *o = sh->o;
	unsigned long long off, len;
	unsigned int port, slot0;
	char text[192], addr[64];
	int ret;

	kvt_listen_addr(addr, sizeof(addr));
	/* A baseline alone needs the target's sink, not its credits.  The
	 * last field bounds the blocks a verified read may look at, so the
	 * target fills those, not its whole buffer (64 Mi one-byte blocks
	 * take an emulated guest half a minute). */
	snprintf(text, sizeof(text), "hello %s %" PRIu64 " %s %d %" PRIu64,
		 addr, o->block, !o->fence && !o->verify ? "sink" :
		 o->op == KVT_OP_READ ? "read" : "write", o->verify,
		 read_reach(o, sh));
	ret = say(sh, text);
	if (ret == 0)
		ret = wait_text(sh, "ready");
	if (ret < 0)
		return ret;
	switch (sscanf(sh->result, "ready %u %llu %llu %u", &port, &off, &len,
		       &slot0)) {
	case 4:
		if (off + len > sh->rlen || len == 0)
			return -EPROTO;
		sh->rbase += off;
		sh->rlen = len;
		sh->slot0 = slot0;
		/* fall through */
	case 1:
		res->sink_port = (uint16_t)port;
		return 0;
	default:
		return -EPROTO;
	}
}

int
kvfwd_initiator(const struct kvfwd_opts *o, struct kvfwd_result *res)
{
	struct shared sh = { .o = o, .lock = PTHREAD_MUTEX_INITIALIZER };
	struct worker *w, mw = { .sh = &sh };
	char first[sizeof(o->peer)];
	const char *more;
	uint64_t src_len;
	unsigned int i;
	int ret = 0, tty = isatty(1) && !o->json, session;

	/* --peer A,B,...: plain runs spread their threads over targets. */
	snprintf(first, sizeof(first), "%s", o->peer);
	more = strchr(o->peer, ',');
	first[strcspn(first, ",")] = '\0';
	session = o->fence || o->verify || (o->baseline && kvfwd_uses(o, "tcp"));
	if (more != NULL && (session || o->mixed || o->baseline_only)) {
		fprintf(stderr, "kvfwd: several targets go with plain runs (not --fence, --verify, --mixed, a tcp --baseline)\n");
		return KVFWD_EXIT_USAGE;
	}
	sh.peer = kvt_peer_open(first, 5000);
	if (sh.peer == NULL) {
		fprintf(stderr, "kvfwd: cannot reach target %s: %s\n", first,
			rte_strerror(rte_errno));
		return KVFWD_EXIT_PEER;
	}
	sh.po.priority = o->priority;
	if (find_regions(&sh) < 0 || sh.rlen == 0) {
		fprintf(stderr, "kvfwd: target %s exports no writable buffer\n",
			o->peer);
		kvt_peer_close(sh.peer);
		return KVFWD_EXIT_PEER;
	}
	snprintf(res->peer_ip, sizeof(res->peer_ip), "%.*s",
		 (int)(strrchr(first, ':') != NULL ?
		       strrchr(first, ':') - first : 0), first);
	if (session) {
		ret = hello(&sh, res);
		if (ret < 0) {
			fprintf(stderr, "kvfwd: target did not answer our hello: %s\n",
				ret == -EBUSY ? "it serves as many initiators as it can (--initiators)" :
				strerror(-ret));
			kvt_peer_close(sh.peer);
			return KVFWD_EXIT_PEER;
		}
	}
	if (o->mixed) {
		/* The small writes' area: the buffer's last MiB. */
		sh.rlen = sh.rlen > 2 * MIXED_AREA ? sh.rlen - MIXED_AREA : 0;
		sh.mixed_base = sh.rbase + sh.rlen;
	}
	if (sh.rlen == 0 || check_sizes(o, &sh) < 0) {
		kvt_peer_close(sh.peer);
		return KVFWD_EXIT_USAGE;
	}
	sh.dest[0] = (struct kvfwd_dest){ .peer = sh.peer, .rbase = sh.rbase,
					  .rlen = sh.rlen };
	sh.ndest = 1;
	if (more != NULL) {
		ret = more_dests(&sh, more + 1);
		if (ret != 0) {
			dests_close(&sh);
			kvt_peer_close(sh.peer);
			return ret;
		}
	}
	if (o->baseline_only) {
		/* main() measures the baseline: from the start time on. */
		res->bytes = o->total;
		kvfwd_start_at(o->start_at);
		kvt_peer_close(sh.peer);
		return 0;
	}
	w = calloc(o->threads, sizeof(*w));
	sh.bytes_left = o->total;
	/* Reads in flight at once land in areas of their own. */
	src_len = (uint64_t)o->batch * o->block *
		(o->op == KVT_OP_READ && !o->fence ? o->depth : 1);
	for (i = 0; i < o->threads; i++) {
		w[i].sh = &sh;
		w[i].id = i;
		w[i].dest = &sh.dest[i % sh.ndest];
		w[i].req.v = malloc(MAX_SAMPLES * sizeof(double));
		w[i].batch.v = malloc(MAX_SAMPLES * sizeof(double));
		w[i].src = kvt_mem_alloc(src_len, o->src_loc);
		if (w[i].src == NULL ||
		    kvt_mem_register(w[i].src, src_len, o->src_loc, 0) == NULL) {
			fprintf(stderr, "kvfwd: cannot allocate %s source memory: %s\n",
				o->src_loc, rte_strerror(rte_errno));
			return KVFWD_EXIT_USAGE;
		}
	}
	for (i = 0; !o->fence && i < sh.ndest && ret == 0; i++)
		ret = warm_up(&sh, &sh.dest[i]);
	if (!o->fence) {
		if (ret != 0) {
			fprintf(stderr, "kvfwd: warm-up pass failed: %s\n",
				strerror(ret < 0 ? -ret : EIO));
			return KVFWD_EXIT_FAIL;
		}
	}
	dest_bytes(&sh, res, 0);
	for (i = 0; i < kvt_port_count() && i < RTE_DIM(res->port_bytes0); i++) {
		struct kvt_port_stats st;

		kvt_port_stats(i, &st);
		res->port_bytes0[i] = st.write_bytes + st.read_bytes;
	}
	kvfwd_start_at(o->start_at);
	sh.t0 = kvfwd_now();
	if (o->duration > 0)
		sh.deadline = sh.t0 + o->duration;
	for (i = 0; i < o->threads; i++)
		pthread_create(&w[i].th, NULL, o->fence ? kvfwd_fence_worker :
			       plain_worker, &w[i]);
	if (o->mixed && mixed_start(&mw) < 0)
		sh.failed = 1;
	if (tty)
		progress(&sh, w);
	for (i = 0; i < o->threads; i++)
		pthread_join(w[i].th, NULL);
	res->secs = kvfwd_now() - sh.t0;
	if (o->mixed)
		mixed_end(&sh, &mw, res);
	if (merge(res, w, o->threads) < 0)
		ret = KVFWD_EXIT_FAIL;
	if (session) {
		ret = say(&sh, "bye");
		if (ret != 0)
			fprintf(stderr, "kvfwd: bye not delivered: %s\n", strerror(-ret));
		ret = 0;
	}
	if (session && (o->fence || o->verify)) {
		uint64_t c, m, st;

		if (wait_text(&sh, "result ") < 0)
			fprintf(stderr, "kvfwd: no result (last message '%s')\n", sh.result);
		if (sscanf(sh.result, "result %" SCNu64 " %" SCNu64 " %" SCNu64,
			   &c, &m, &st) == 3) {
			/* Writes: the target checked; reads: we did. */
			res->checked += c;
			res->mixed += m;
			res->stale += st;
			res->verified = 1;
		} else if (o->fence) {
			fprintf(stderr, "kvfwd: the target sent no verify result\n");
			ret = KVFWD_EXIT_FAIL;
		}
		/* Every block that arrived was looked at, or the run proves
		 * nothing. */
		if (o->verify && res->checked != res->requests - res->errors) {
			fprintf(stderr, "kvfwd: verify: %" PRIu64 " of %" PRIu64 " blocks were checked\n",
				res->checked, res->requests - res->errors);
			ret = KVFWD_EXIT_FAIL;
		}
	}
	if (sh.failed || res->errors > 0 || res->mixed > 0 || res->stale > 0)
		ret = KVFWD_EXIT_FAIL;
	dest_bytes(&sh, res, 1);
	dests_close(&sh);
	kvt_peer_close(sh.peer);
	free(sh.credits);
	free(w);
	return ret;
}
