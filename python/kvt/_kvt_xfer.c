/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt._kvt, transfers: batches, submissions (blocks and page lists from
 * buffer-protocol arrays), polls and waits, statuses, and fence tables.
 * Every submission and wait runs without the GIL.
 */
#include "_kvt.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <rte_errno.h>

PyObject *
py_batch_alloc(PyObject *self, PyObject *args)
{
	struct kvt_batch *b;
	unsigned int n;
	int err = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "I", &n))
		return NULL;
	msg_clear();
	b = kvt_batch_alloc(n);
	if (b == NULL)
		err = rte_errno;
	return handle_or_raise(b, err, "kvt_batch_alloc");
}

PY_HANDLE_CALL(py_batch_free, kvt_batch_free, 0)

PY_HANDLE_CALL(py_batch_reset, kvt_batch_reset, 0)

/*
 * The options of a submission: flags (KVT_SUBMIT_* in the low bits, the
 * priority class from bit PY_PRIO_SHIFT), fence (table, slot, room) or
 * None, notification bytes or None.  The notification's buffer is held
 * until the call returns (kvt copies it at submit).
 */
static int
opts_get(PyObject *flags, PyObject *fence, PyObject *note,
	 struct kvt_submit_opts *o, Py_buffer *nb)
{
	unsigned long long table, room;
	unsigned long v;
	unsigned int slot;

	memset(o, 0, sizeof(*o));
	nb->obj = NULL;
	v = PyLong_AsUnsignedLong(flags);
	if (PyErr_Occurred())
		return -1;
	o->flags = (uint32_t)(v & ((1ul << PY_PRIO_SHIFT) - 1));
	o->priority = (uint32_t)(v >> PY_PRIO_SHIFT);
	if (fence != Py_None) {
		if (!PyArg_ParseTuple(fence, "KIK;fence is (table, slot, room)",
				      &table, &slot, &room))
			return -1;
		o->flags |= KVT_SUBMIT_FENCE;
		o->fence.table = table;
		o->fence.slot = slot;
		o->fence.room = room;
	}
	if (note != Py_None) {
		if (PyObject_GetBuffer(note, nb, PyBUF_SIMPLE) < 0)
			return -1;
		if (nb->len > KVT_NOTIFY_MAX) {
			PyBuffer_Release(nb);
			nb->obj = NULL;
			PyErr_Format(PyExc_ValueError,
				     "a notification holds at most %d bytes",
				     KVT_NOTIFY_MAX);
			return -1;
		}
		o->notify = nb->buf;
		o->notify_len = (uint32_t)nb->len;
	}
	return 0;
}

static void
opts_put(Py_buffer *nb)
{
	if (nb->obj != NULL)
		PyBuffer_Release(nb);
}

/*
 * The local, remote and length columns of a submission, of one length *n
 * (an int stands for itself, repeated; all ints: *n is 1).
 * @return 0, or -1 with an exception set.
 */
static int
columns_get(PyObject *ol, PyObject *or_, PyObject *on, struct column c[3],
	    Py_ssize_t *n)
{
	static const char *const name[3] = { "local", "remote", "length" };
	PyObject *o[3] = { ol, or_, on };
	int i, k;

	*n = 1;
	for (i = 0; i < 3; i++) {
		if (column_get(o[i], &c[i], 1, 0, name[i]) < 0) {
			while (i-- > 0)
				column_put(&c[i]);
			return -1;
		}
	}
	for (i = 2; i >= 0; i--)
		if (!c[i].is_scalar)
			*n = c[i].n;
	for (k = 0; k < 3; k++) {
		if (!c[k].is_scalar && c[k].n != *n) {
			PyErr_Format(PyExc_ValueError,
				     "local, remote and length arrays differ in length");
			for (i = 0; i < 3; i++)
				column_put(&c[i]);
			return -1;
		}
	}
	return 0;
}

static void
columns_put(struct column c[3])
{
	column_put(&c[2]);
	column_put(&c[1]);
	column_put(&c[0]);
}

/*
 * submit(batch, peer, op, locals, remotes, lens, flags, fence, note)
 * locals/remotes: an int or an array; lens: an int or an array.
 * -> index of the first request.
 */
PyObject *
py_submit(PyObject *self, PyObject *args)
{
	PyObject *ol, *or_, *on, *flags, *fence, *note;
	struct kvt_submit_opts o;
	struct kvt_xfer one, *x = &one;
	struct column c[3];
	Py_ssize_t n, i;
	unsigned int op;
	Py_buffer nb;
	void *b, *p;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&O&IOOOOOO", handle_arg, &b, handle_arg, &p,
			      &op, &ol, &or_, &on, &flags, &fence, &note))
		return NULL;
	if (columns_get(ol, or_, on, c, &n) < 0)
		return NULL;
	if (opts_get(flags, fence, note, &o, &nb) < 0)
		goto put_c;
	if (n > 1) {
		x = malloc((size_t)n * sizeof(*x));
		if (x == NULL) {
			PyErr_NoMemory();
			goto put_o;
		}
	}
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	for (i = 0; i < n; i++)
		x[i] = (struct kvt_xfer){ .op = op,
			.local = (void *)(uintptr_t)column_at(&c[0], i),
			.remote = column_at(&c[1], i), .len = column_at(&c[2], i) };
	ret = kvt_submit(b, p, x, (unsigned int)n, &o);
	Py_END_ALLOW_THREADS
	if (x != &one)
		free(x);
	opts_put(&nb);
	columns_put(c);
	if (ret < 0)
		return raise_errno(ret, "kvt_submit");
	return PyLong_FromLong(ret);
put_o:
	opts_put(&nb);
put_c:
	columns_put(c);
	return NULL;
}

/* Column c as n numbers: its own array (a sequence converted, a uint64
 * buffer), or *tmp filled with its one int. */
static const uint64_t *
column_array(const struct column *c, Py_ssize_t n, uint64_t **tmp)
{
	Py_ssize_t i;

	if (c->owned != NULL)
		return c->owned;
	if (!c->is_scalar)
		return c->view.buf;
	*tmp = malloc((size_t)n * sizeof(**tmp));
	if (*tmp == NULL)
		return NULL;
	for (i = 0; i < n; i++)
		(*tmp)[i] = c->scalar;
	return *tmp;
}

/*
 * Drop the blocks of length 0 from the n of cols (skip_empty: as
 * Mooncake does); tmp owns what had to be copied.  @return the blocks
 * left, or -1 with no memory.
 */
static Py_ssize_t
drop_empty(const uint64_t *cols[3], uint64_t *tmp[3], Py_ssize_t n)
{
	uint64_t *out[3];
	Py_ssize_t i, k = 0;
	int c;

	for (i = 0; i < n && cols[2][i] != 0; i++)
		;
	if (i == n)
		return n;
	for (c = 0; c < 3; c++) {
		out[c] = malloc((size_t)n * sizeof(uint64_t));
		if (out[c] == NULL) {
			while (c-- > 0)
				free(out[c]);
			return -1;
		}
	}
	for (i = 0; i < n; i++) {
		if (cols[2][i] == 0)
			continue;
		for (c = 0; c < 3; c++)
			out[c][k] = cols[c][i];
		k++;
	}
	for (c = 0; c < 3; c++) {
		free(tmp[c]);
		tmp[c] = out[c];
		cols[c] = out[c];
	}
	return k;
}

/*
 * submit_blocks(batch, peer, op, locals, remotes, lens, flags, fence,
 * note, skip_empty): one block list (kvt_submit_blocks()), its columns
 * converted in one pass each (a uint64 buffer is used as it is).
 * -> index of the list (its status is the list's), or None when
 * skip_empty left no block.
 */
PyObject *
py_submit_blocks(PyObject *self, PyObject *args)
{
	PyObject *ol, *or_, *on, *flags, *fence, *note;
	uint64_t *tmp[3] = { NULL, NULL, NULL };
	const uint64_t *cols[3];
	struct kvt_submit_opts o;
	struct kvt_blocks bl;
	struct column c[3];
	int ret, skip, i;
	unsigned int op;
	Py_buffer nb;
	Py_ssize_t n;
	void *b, *p;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&O&IOOOOOOp", handle_arg, &b, handle_arg,
			      &p, &op, &ol, &or_, &on, &flags, &fence, &note,
			      &skip))
		return NULL;
	if (columns_get(ol, or_, on, c, &n) < 0)
		return NULL;
	if (n > UINT32_MAX) {
		PyErr_Format(PyExc_ValueError, "%zd blocks: too many for one list", n);
		goto put_c;
	}
	if (opts_get(flags, fence, note, &o, &nb) < 0)
		goto put_c;
	for (i = 0; i < 3; i++) {
		cols[i] = column_array(&c[i], n, &tmp[i]);
		if (cols[i] == NULL) {
			PyErr_NoMemory();
			goto put_o;
		}
	}
	if (skip && (n = drop_empty(cols, tmp, n)) <= 0) {
		if (n < 0) {
			PyErr_NoMemory();
			goto put_o;
		}
		ret = INT_MIN;	/* nothing to move */
		goto out;
	}
	bl = (struct kvt_blocks){ .op = op, .n = (uint32_t)n, .local = cols[0],
				  .remote = cols[1], .len = cols[2] };
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	ret = kvt_submit_blocks(b, p, &bl, &o);
	Py_END_ALLOW_THREADS
out:
	free(tmp[0]);
	free(tmp[1]);
	free(tmp[2]);
	opts_put(&nb);
	columns_put(c);
	if (ret == INT_MIN)
		Py_RETURN_NONE;
	if (ret < 0)
		return raise_errno(ret, "kvt_submit_blocks");
	return PyLong_FromLong(ret);
put_o:
	free(tmp[0]);
	free(tmp[1]);
	free(tmp[2]);
	opts_put(&nb);
put_c:
	columns_put(c);
	return NULL;
}

/*
 * xfer_sync(batch, peer, op, local, remote, length, timeout_us) -> status
 * One request, waited for, its status read and the batch emptied, in one
 * call without the GIL: a synchronous transfer's Python cost is this
 * call alone.  -ETIMEDOUT leaves the batch as it is (still pending).
 */
PyObject *
py_xfer_sync(PyObject *self, PyObject *args)
{
	unsigned long long us;
	struct kvt_xfer x;
	uint64_t local, remote, len;
	unsigned int op;
	void *b, *p;
	int ret, first;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&O&IO&O&O&K", handle_arg, &b, handle_arg, &p,
			      &op, u64_arg, &local, u64_arg, &remote, u64_arg, &len,
			      &us))
		return NULL;
	x = (struct kvt_xfer){ .op = op, .local = (void *)(uintptr_t)local,
			       .remote = remote, .len = len };
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	first = kvt_submit(b, p, &x, 1, NULL);
	ret = first;
	if (first >= 0) {
		ret = kvt_wait(b, us);
		if (ret == 0) {
			ret = kvt_status(b, (unsigned int)first);
			kvt_batch_reset(b);
		}
	}
	Py_END_ALLOW_THREADS
	if (first < 0)
		return raise_errno(first, "kvt_submit");
	return PyLong_FromLong(ret);
}

/* uint32 page numbers from a column (a copy when they are not uint32). */
static uint32_t *
pages_of(const struct column *c, uint32_t **owned)
{
	Py_ssize_t i;

	*owned = NULL;
	if (c->width == 4 && c->owned == NULL)
		return c->view.buf;
	*owned = malloc((size_t)(c->n > 0 ? c->n : 1) * sizeof(uint32_t));
	if (*owned == NULL) {
		PyErr_NoMemory();
		return NULL;
	}
	for (i = 0; i < c->n; i++) {
		uint64_t v = column_at(c, i);

		if (v > UINT32_MAX) {
			PyErr_Format(PyExc_ValueError, "page number %llu past 2^32",
				     (unsigned long long)v);
			free(*owned);
			*owned = NULL;
			return NULL;
		}
		(*owned)[i] = (uint32_t)v;
	}
	return *owned;
}

/*
 * submit_pages(batch, peer, op, page_size, local, remote, local_idx,
 *              remote_idx, flags, fence, note) -> index
 */
PyObject *
py_submit_pages(PyObject *self, PyObject *args)
{
	PyObject *oli, *ori, *flags, *fence, *note;
	uint32_t *lo = NULL, *ro = NULL;
	struct kvt_submit_opts o;
	struct column cl, cr;
	struct kvt_pages pg;
	uint64_t psz, local, remote;
	unsigned int op;
	Py_buffer nb;
	void *b, *p;
	int ret = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&O&IO&O&O&OOOOO", handle_arg, &b, handle_arg, &p,
			      &op, u64_arg, &psz, u64_arg, &local, u64_arg, &remote,
			      &oli, &ori, &flags, &fence, &note))
		return NULL;
	if (column_get(oli, &cl, 0, 1, "local_idx") < 0)
		return NULL;
	if (column_get(ori, &cr, 0, 1, "remote_idx") < 0)
		goto put_l;
	if (cl.n != cr.n || cl.n == 0 || cl.n > UINT32_MAX) {
		PyErr_Format(PyExc_ValueError,
			     "local_idx and remote_idx must hold the same number (> 0) of pages");
		goto put_r;
	}
	pg = (struct kvt_pages){ .op = op, .n = (uint32_t)cl.n, .page_size = psz,
				 .local = (void *)(uintptr_t)local, .remote = remote };
	pg.local_idx = pages_of(&cl, &lo);
	if (pg.local_idx == NULL)
		goto put_r;
	pg.remote_idx = pages_of(&cr, &ro);
	if (pg.remote_idx == NULL)
		goto free_idx;
	if (opts_get(flags, fence, note, &o, &nb) < 0)
		goto free_idx;
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	ret = kvt_submit_pages(b, p, &pg, &o);
	Py_END_ALLOW_THREADS
	opts_put(&nb);
	free(lo);
	free(ro);
	column_put(&cr);
	column_put(&cl);
	if (ret < 0)
		return raise_errno(ret, "kvt_submit_pages");
	return PyLong_FromLong(ret);
free_idx:
	free(lo);
	free(ro);
put_r:
	column_put(&cr);
put_l:
	column_put(&cl);
	return NULL;
}

PyObject *
py_poll(PyObject *self, PyObject *args)
{
	void *b;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&", handle_arg, &b))
		return NULL;
	msg_clear();
	ret = kvt_poll(b);
	if (ret < 0)
		return raise_errno(ret, "kvt_poll");
	return PyLong_FromLong(ret);
}

/* wait(batch, timeout_us) -> True when all settled, False on timeout */
PyObject *
py_wait(PyObject *self, PyObject *args)
{
	unsigned long long us;
	void *b;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&K", handle_arg, &b, &us))
		return NULL;
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	ret = kvt_wait(b, us);
	Py_END_ALLOW_THREADS
	if (ret == -ETIMEDOUT)
		Py_RETURN_FALSE;
	if (ret < 0)
		return raise_errno(ret, "kvt_wait");
	Py_RETURN_TRUE;
}

/* status(batch, first, n=1) -> an int, or a list of n ints */
PyObject *
py_status(PyObject *self, PyObject *args)
{
	unsigned int first, n = 0, i;
	PyObject *list, *v;
	void *b;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&I|I", handle_arg, &b, &first, &n))
		return NULL;
	if (n == 0)
		return PyLong_FromLong(kvt_status(b, first));
	list = PyList_New(n);
	for (i = 0; list != NULL && i < n; i++) {
		v = PyLong_FromLong(kvt_status(b, first + i));
		if (v == NULL || PyList_SetItem(list, i, v) < 0)
			Py_CLEAR(list);
	}
	return list;
}

/* first_error(batch, first, n) -> 0 or the first request's error */
PyObject *
py_first_error(PyObject *self, PyObject *args)
{
	unsigned int first, n, i;
	void *b;
	int st = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&II", handle_arg, &b, &first, &n))
		return NULL;
	for (i = 0; i < n && st == 0; i++)
		st = kvt_status(b, first + i);
	return PyLong_FromLong(st);
}

/* ---- fences ---- */

PyObject *
py_fence_create(PyObject *self, PyObject *args)
{
	struct kvt_fence_table *ft;
	const char *loc = NULL;
	unsigned int n;
	int err = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "I|z", &n, &loc))
		return NULL;
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	ft = kvt_fence_table_create(n, loc);
	if (ft == NULL)
		err = rte_errno;
	Py_END_ALLOW_THREADS
	return handle_or_raise(ft, err, "kvt_fence_table_create");
}

PY_HANDLE_CALL(py_fence_destroy, kvt_fence_table_destroy, 0)

PyObject *
py_fence_handle(PyObject *self, PyObject *args)
{
	void *ft;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&", handle_arg, &ft))
		return NULL;
	return PyLong_FromUnsignedLongLong(kvt_fence_table_handle(ft));
}

PyObject *
py_fence_arm(PyObject *self, PyObject *args)
{
	unsigned long long room;
	unsigned int slot;
	void *ft;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&IK", handle_arg, &ft, &slot, &room))
		return NULL;
	msg_clear();
	ret = kvt_fence_arm(ft, slot, room);
	if (ret < 0)
		return raise_errno(ret, "kvt_fence_arm");
	Py_RETURN_NONE;
}

/* fence_poll / fence_wait -> 0, -EAGAIN, -ESTALE, -ETIMEDOUT */
PyObject *
py_fence_poll(PyObject *self, PyObject *args)
{
	unsigned int slot;
	void *ft;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&I", handle_arg, &ft, &slot))
		return NULL;
	msg_clear();
	ret = kvt_fence_poll(ft, slot);
	if (ret == -EINVAL)
		return raise_errno(ret, "kvt_fence_poll");
	return PyLong_FromLong(ret);
}

PyObject *
py_fence_wait(PyObject *self, PyObject *args)
{
	unsigned long long us;
	unsigned int slot;
	void *ft;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&IK", handle_arg, &ft, &slot, &us))
		return NULL;
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	ret = kvt_fence_wait(ft, slot, us);
	Py_END_ALLOW_THREADS
	if (ret == -EINVAL)
		return raise_errno(ret, "kvt_fence_wait");
	return PyLong_FromLong(ret);
}
