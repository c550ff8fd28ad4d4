/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt._kvt's errors and arguments, below the module's other files: kvt's
 * log captured per thread so that an OSError carries kvt's reason;
 * handles and numbers from Python ints; columns of numbers from buffers
 * (numpy, array('Q'), bytes) or sequences of ints, converted in one pass.
 */
#define _GNU_SOURCE	/* fopencookie */
#include "_kvt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_errno.h>
#include <rte_log.h>

/*
 * kvt says why it refused something on its log, from the thread that
 * called it.  The log stream goes through here: each line is written to
 * stderr as before and kept as this thread's last message, which the
 * OSError then carries.
 */
static __thread char last_msg[512];

static ssize_t
log_write(void *cookie, const char *buf, size_t len)
{
	size_t n = len < sizeof(last_msg) - 1 ? len : sizeof(last_msg) - 1;

	(void)cookie;
	memcpy(last_msg, buf, n);
	while (n > 0 && (last_msg[n - 1] == '\n' || last_msg[n - 1] == '\r'))
		n--;
	last_msg[n] = '\0';
	/* A closed stderr loses the line there, not the message kept. */
	n = (size_t)write(STDERR_FILENO, buf, len);
	(void)n;
	return (ssize_t)len;
}

void
log_capture(void)
{
	static const cookie_io_functions_t io = { .write = log_write };
	FILE *f;

	if (rte_log_get_stream() != stderr && rte_log_get_stream() != stdout)
		return;	/* the application chose its own */
	f = fopencookie(NULL, "w", io);
	if (f != NULL) {
		setvbuf(f, NULL, _IOLBF, 0);
		rte_openlog_stream(f);
	}
}

void
msg_clear(void)
{
	last_msg[0] = '\0';
}

PyObject *
raise_errno(int err, const char *what)
{
	PyObject *args;

	if (err < 0)
		err = -err;
	if (last_msg[0] != '\0')
		args = Py_BuildValue("(is)", err, last_msg);
	else
		args = Py_BuildValue("(is)", err, what);
	if (args != NULL) {
		PyErr_SetObject(PyExc_OSError, args);
		Py_DECREF(args);
	}
	return NULL;
}

PyObject *
handle_or_raise(void *p, int err, const char *what)
{
	if (p == NULL)
		return raise_errno(err, what);
	return H(p);
}

/* A handle argument: a non-zero int. */
int
handle_arg(PyObject *o, void *out)
{
	void *p = PyLong_AsVoidPtr(o);

	if (p == NULL) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "a closed or null handle");
		return 0;
	}
	*(void **)out = p;
	return 1;
}

/* A 64-bit unsigned int argument (an address or a length): an int, or
 * anything with __index__ (numpy's integers). */
int
u64_arg(PyObject *o, void *out)
{
	unsigned long v;
	PyObject *i;

	/* unsigned long is 64 bits here; its conversion is a digit loop,
	 * not the byte-array path of the long long one. */
	if (PyLong_Check(o)) {
		v = PyLong_AsUnsignedLong(o);
	} else {
		i = PyNumber_Index(o);
		if (i == NULL)
			return 0;
		v = PyLong_AsUnsignedLong(i);
		Py_DECREF(i);
	}
	if (v == (unsigned long)-1 && PyErr_Occurred())
		return 0;
	*(uint64_t *)out = v;
	return 1;
}

/* ---- arrays ---- */

/*
 * The n items of list or tuple o (get: PyList_GetItem or PyTuple_GetItem)
 * as numbers, the way serving stacks pass them (ints; a repeated length
 * is one object): an item that is the previous one costs a compare, an
 * int a digit loop with its range checked (PyLong_AsUnsignedLong: 64 bits
 * here), anything else u64_arg().
 */
static int
items_u64(PyObject *o, PyObject *(*get)(PyObject *, Py_ssize_t),
	  uint64_t *out, Py_ssize_t n)
{
	PyObject *it, *prev = NULL;
	unsigned long v = 0;
	Py_ssize_t i;

	RTE_BUILD_BUG_ON(sizeof(unsigned long) != sizeof(uint64_t));
	for (i = 0; i < n; i++) {
		it = get(o, i);
		if (it == NULL)
			return -1;
		if (it != prev) {
			if (PyLong_CheckExact(it)) {
				v = PyLong_AsUnsignedLong(it);
				if (v == (unsigned long)-1 && PyErr_Occurred())
					return -1;
			} else if (!u64_arg(it, &v)) {
				return -1;
			}
			prev = it;
		}
		out[i] = v;
	}
	return 0;
}

/* The n items of any other sequence o as numbers. */
static int
seq_u64(PyObject *o, uint64_t *out, Py_ssize_t n)
{
	PyObject *it;
	Py_ssize_t i;
	int ok;

	for (i = 0; i < n; i++) {
		it = PySequence_GetItem(o, i);
		if (it == NULL)
			return -1;
		ok = u64_arg(it, &out[i]);
		Py_DECREF(it);
		if (!ok)
			return -1;
	}
	return 0;
}

int
column_get(PyObject *o, struct column *c, int scalar_ok, int four_ok,
	   const char *name)
{
	Py_ssize_t n;

	memset(c, 0, sizeof(*c));
	if (PyLong_Check(o)) {
		if (!scalar_ok) {
			PyErr_Format(PyExc_TypeError, "%s: an array is needed", name);
			return -1;
		}
		if (!u64_arg(o, &c->scalar))
			return -1;
		c->is_scalar = 1;
		c->n = -1;
		return 0;
	}
	if (PyObject_CheckBuffer(o)) {
		if (PyObject_GetBuffer(o, &c->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
			return -1;
		c->have_view = 1;
		if (c->view.itemsize != 8 && !(four_ok && c->view.itemsize == 4)) {
			PyErr_Format(PyExc_TypeError,
				     "%s: items of %zd bytes; 8-byte unsigned integers (uint64) are needed%s",
				     name, c->view.itemsize,
				     four_ok ? " (or uint32)" : "");
			goto release;
		}
		if (c->view.format != NULL && strchr("QLKqlkIi", c->view.format[
			strlen(c->view.format) - 1]) == NULL) {
			PyErr_Format(PyExc_TypeError, "%s: format '%s' is not an integer array",
				     name, c->view.format);
			goto release;
		}
		c->width = (int)c->view.itemsize;
		c->n = c->view.len / c->view.itemsize;
		return 0;
	}
	n = PySequence_Size(o);
	if (n < 0) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
			     "%s: an int array (buffer of uint64) or a sequence of ints is needed",
			     name);
		return -1;
	}
	c->owned = malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
	if (c->owned == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	if (PyList_Check(o) ? items_u64(o, PyList_GetItem, c->owned, n) < 0 :
	    PyTuple_Check(o) ? items_u64(o, PyTuple_GetItem, c->owned, n) < 0 :
	    seq_u64(o, c->owned, n) < 0) {
		free(c->owned);
		c->owned = NULL;
		return -1;
	}
	c->width = 8;
	c->n = n;
	return 0;
release:
	PyBuffer_Release(&c->view);
	c->have_view = 0;
	return -1;
}

void
column_put(struct column *c)
{
	if (c->have_view)
		PyBuffer_Release(&c->view);
	free(c->owned);
	c->have_view = 0;
	c->owned = NULL;
}
