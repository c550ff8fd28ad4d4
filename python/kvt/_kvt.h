/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the files of the extension share: _kvt.c (the module, engine,
 * memory, peers, notifications, ports), _kvt_xfer.c (batches,
 * submissions, waits, fences) and _kvt_args.c (errors, arguments).
 * Calls go down that list, never up.
 */
#ifndef KVT_PY_H
#define KVT_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "kvt.h"

#define H(p) PyLong_FromVoidPtr((void *)(p))
/* A submission's flags word from Python: KVT_SUBMIT_* below this bit,
 * the priority class (enum kvt_prio) from it. */
#define PY_PRIO_SHIFT 16

/*
 * A column of n numbers: a buffer of 8-byte (or, where allowed, 4-byte)
 * unsigned items, a sequence of ints, or (scalar_ok) one int repeated.
 */
struct column {
	Py_buffer view;
	int have_view;
	uint64_t scalar;
	int is_scalar;
	uint64_t *owned;	/* a sequence, converted */
	Py_ssize_t n;
	int width;		/* bytes per item: 4 or 8 */
};

/* _kvt_args.c */
/* kvt's log lines go through a stream that keeps each thread's last one
 * (unless the application set its own stream). */
void log_capture(void);
/* Forget this thread's last kvt message (before a call that may log). */
void msg_clear(void);
/* Raise OSError(err, kvt's last message or what). */
PyObject *raise_errno(int err, const char *what);
int handle_arg(PyObject *o, void *out);
/* A handle for p, or OSError(err) where the constructor returned NULL. */
PyObject *handle_or_raise(void *p, int err, const char *what);

/*
 * A wrapper of a call on one handle that returns 0 or -errno: None, or
 * OSError raised.  nogil: it may block, so it runs without the GIL.
 * Most of the module's calls on a handle have this shape; each is then
 * one line where it is defined.
 */
#define PY_HANDLE_CALL(pyfn, cfn, nogil)				\
PyObject *								\
pyfn(PyObject *self, PyObject *args)					\
{									\
	PyThreadState *ts = NULL;					\
	void *h;							\
	int ret;							\
									\
	(void)self;							\
	if (!PyArg_ParseTuple(args, "O&", handle_arg, &h))		\
		return NULL;						\
	msg_clear();							\
	if (nogil)							\
		ts = PyEval_SaveThread();				\
	ret = cfn(h);							\
	if (ts != NULL)							\
		PyEval_RestoreThread(ts);				\
	if (ret < 0)							\
		return raise_errno(ret, #cfn);				\
	Py_RETURN_NONE;							\
}
int u64_arg(PyObject *o, void *out);
int column_get(PyObject *o, struct column *c, int scalar_ok, int four_ok,
	       const char *name);
void column_put(struct column *c);

static inline uint64_t
column_at(const struct column *c, Py_ssize_t i)
{
	if (c->is_scalar)
		return c->scalar;
	if (c->owned != NULL)
		return c->owned[i];
	if (c->width == 4)
		return ((const uint32_t *)c->view.buf)[i];
	return ((const uint64_t *)c->view.buf)[i];
}

/* _kvt_xfer.c: module functions */
PyObject *py_batch_alloc(PyObject *self, PyObject *args);
PyObject *py_batch_free(PyObject *self, PyObject *args);
PyObject *py_batch_reset(PyObject *self, PyObject *args);
PyObject *py_fence_arm(PyObject *self, PyObject *args);
PyObject *py_fence_create(PyObject *self, PyObject *args);
PyObject *py_fence_destroy(PyObject *self, PyObject *args);
PyObject *py_fence_handle(PyObject *self, PyObject *args);
PyObject *py_fence_poll(PyObject *self, PyObject *args);
PyObject *py_fence_wait(PyObject *self, PyObject *args);
PyObject *py_first_error(PyObject *self, PyObject *args);
PyObject *py_poll(PyObject *self, PyObject *args);
PyObject *py_status(PyObject *self, PyObject *args);
PyObject *py_submit_blocks(PyObject *self, PyObject *args);
PyObject *py_submit(PyObject *self, PyObject *args);
PyObject *py_submit_pages(PyObject *self, PyObject *args);
PyObject *py_wait(PyObject *self, PyObject *args);
PyObject *py_xfer_sync(PyObject *self, PyObject *args);

#endif /* KVT_PY_H */
