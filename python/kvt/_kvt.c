/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kvt._kvt: the C API of include/kvt.h as module functions over plain
 * handles (ints); this file has the module, the engine, memory, peers,
 * notifications and ports, _kvt_xfer.c the transfers, _kvt_args.c the
 * errors and the arguments (handles, numbers, arrays).  kvt/__init__.py
 * builds the classes users see on top, and keeps handles from being used
 * after they were freed.
 *
 * Every call that may wait or take a lock (init, registration, peer open,
 * submission, wait, fences) runs without the GIL.  Errors raise OSError
 * with the errno and the call that failed.  Arrays of addresses, lengths
 * and page numbers come through the buffer protocol (numpy, array('Q'),
 * bytes), so a batch of 100 000 blocks is one call.
 *
 * Limited API of Python 3.11 (the first with the buffer protocol in it).
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

/* ---- engine ---- */

static PyObject *
py_init(PyObject *self, PyObject *args)
{
	PyObject *list, *item;
	Py_ssize_t n, i;
	char **argv;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O", &list))
		return NULL;
	n = PySequence_Size(list);
	if (n < 0)
		return NULL;
	argv = calloc((size_t)n + 2, sizeof(char *));
	if (argv == NULL)
		return PyErr_NoMemory();
	argv[0] = strdup("kvt");
	for (i = 0; i < n; i++) {
		item = PySequence_GetItem(list, i);
		if (item == NULL)
			goto fail;
		if (!PyUnicode_Check(item)) {
			Py_DECREF(item);
			PyErr_SetString(PyExc_TypeError, "engine arguments are strings");
			goto fail;
		}
		argv[i + 1] = strdup(PyUnicode_AsUTF8AndSize(item, NULL));
		Py_DECREF(item);
		if (argv[i + 1] == NULL)
			goto fail;
	}
	/* EAL keeps pointers into argv: it stays allocated. */
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	ret = kvt_init((int)n + 1, argv);
	Py_END_ALLOW_THREADS
	if (ret < 0)
		return raise_errno(ret, "kvt_init (the reason is in kvt's log)");
	Py_RETURN_NONE;
fail:
	for (i = 0; i <= n; i++)
		free(argv[i]);
	free(argv);
	if (!PyErr_Occurred())
		PyErr_NoMemory();
	return NULL;
}

static PyObject *
py_fini(PyObject *self, PyObject *noargs)
{
	int ret;

	(void)self;
	(void)noargs;
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	ret = kvt_fini();
	Py_END_ALLOW_THREADS
	if (ret < 0)
		return raise_errno(ret, "kvt_fini");
	Py_RETURN_NONE;
}

static PyObject *
py_listen_addr(PyObject *self, PyObject *noargs)
{
	char buf[128];
	int ret;

	(void)self;
	(void)noargs;
	msg_clear();
	ret = kvt_listen_addr(buf, sizeof(buf));
	if (ret < 0)
		return raise_errno(ret, "kvt_listen_addr");
	return PyUnicode_FromString(buf);
}

static PyObject *
py_name(PyObject *self, PyObject *noargs)
{
	const char *n = kvt_name();

	(void)self;
	(void)noargs;
	if (n == NULL)
		return raise_errno(ENODEV, "kvt_name: the engine is not running");
	return PyUnicode_FromString(n);
}

static PyObject *
py_set_idle(PyObject *self, PyObject *args)
{
	const char *policy;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "s", &policy))
		return NULL;
	msg_clear();
	ret = kvt_set_idle(policy);
	if (ret < 0)
		return raise_errno(ret, "kvt_set_idle");
	Py_RETURN_NONE;
}

/* ---- memory ---- */

static PyObject *
py_mem_register(PyObject *self, PyObject *args)
{
	uint64_t addr, len;
	const char *loc = NULL;
	unsigned int flags;
	struct kvt_mem *m;
	int err = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&O&zI", u64_arg, &addr, u64_arg, &len,
			      &loc, &flags))
		return NULL;
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	m = kvt_mem_register((void *)(uintptr_t)addr, len, loc, flags);
	if (m == NULL)
		err = rte_errno;
	Py_END_ALLOW_THREADS
	return handle_or_raise(m, err, "kvt_mem_register");
}

static PY_HANDLE_CALL(py_mem_unregister, kvt_mem_unregister, 1)

static PyObject *
py_mem_alloc(PyObject *self, PyObject *args)
{
	const char *loc = NULL;
	uint64_t len;
	void *p;
	int err = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&z", u64_arg, &len, &loc))
		return NULL;
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	p = kvt_mem_alloc(len, loc);
	if (p == NULL)
		err = rte_errno;
	Py_END_ALLOW_THREADS
	return handle_or_raise(p, err, "kvt_mem_alloc");
}

static PyObject *
py_mem_free(PyObject *self, PyObject *args)
{
	uint64_t addr;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&", u64_arg, &addr))
		return NULL;
	msg_clear();
	ret = kvt_mem_free((void *)(uintptr_t)addr);
	if (ret < 0)
		return raise_errno(ret, "kvt_mem_free");
	Py_RETURN_NONE;
}

/* ---- peers ---- */

static PyObject *
py_peer_open(PyObject *self, PyObject *args)
{
	unsigned int timeout_ms = 0;
	const char *addr;
	struct kvt_peer *p;
	int err = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "s|I", &addr, &timeout_ms))
		return NULL;
	msg_clear();
	Py_BEGIN_ALLOW_THREADS
	p = kvt_peer_open(addr, timeout_ms);
	if (p == NULL)
		err = rte_errno;
	Py_END_ALLOW_THREADS
	return handle_or_raise(p, err, "kvt_peer_open");
}

static PY_HANDLE_CALL(py_peer_close, kvt_peer_close, 1)

static PyObject *
py_peer_state(PyObject *self, PyObject *args)
{
	void *p;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&", handle_arg, &p))
		return NULL;
	msg_clear();
	ret = kvt_peer_state(p);
	return PyLong_FromLong(ret);
}

static PyObject *
py_peer_regions(PyObject *self, PyObject *args)
{
	struct kvt_region *r;
	PyObject *list, *d;
	void *p;
	int n, i;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&", handle_arg, &p))
		return NULL;
	msg_clear();
	n = kvt_peer_regions(p, NULL, 0);
	if (n < 0)
		return raise_errno(n, "kvt_peer_regions");
	r = calloc((size_t)n + 1, sizeof(*r));
	if (r == NULL)
		return PyErr_NoMemory();
	msg_clear();
	n = kvt_peer_regions(p, r, (unsigned int)n);
	if (n < 0) {
		free(r);
		return raise_errno(n, "kvt_peer_regions");
	}
	list = PyList_New(0);
	for (i = 0; list != NULL && i < n; i++) {
		d = Py_BuildValue("{sKsKsIsIss}", "base", (unsigned long long)r[i].base,
				  "len", (unsigned long long)r[i].len,
				  "flags", r[i].flags, "fence_slots", r[i].fence_slots,
				  "loc", r[i].loc);
		if (d == NULL || PyList_Append(list, d) < 0) {
			Py_XDECREF(d);
			Py_CLEAR(list);
			break;
		}
		Py_DECREF(d);
	}
	free(r);
	return list;
}

static PyObject *
py_peer_stats(PyObject *self, PyObject *args)
{
	struct kvt_peer_stats st;
	void *p;
	int ret;

	(void)self;
	if (!PyArg_ParseTuple(args, "O&", handle_arg, &p))
		return NULL;
	msg_clear();
	ret = kvt_peer_stats(p, &st);
	if (ret < 0)
		return raise_errno(ret, "kvt_peer_stats");
	return Py_BuildValue("{sKsKsK}", "write_bytes",
			     (unsigned long long)st.write_bytes, "read_bytes",
			     (unsigned long long)st.read_bytes, "errors",
			     (unsigned long long)st.errors);
}

/* ---- notifications, ports ---- */

/* notify_poll(max) -> [(peer name, bytes)] */
static PyObject *
py_notify_poll(PyObject *self, PyObject *args)
{
	struct kvt_notify_msg m[32];
	unsigned int max = 32;
	PyObject *list, *t;
	int n, i;

	(void)self;
	if (!PyArg_ParseTuple(args, "|I", &max))
		return NULL;
	msg_clear();
	n = kvt_notify_poll(m, max < 32 ? max : 32);
	if (n < 0)
		return raise_errno(n, "kvt_notify_poll");
	list = PyList_New(0);
	for (i = 0; list != NULL && i < n; i++) {
		t = Py_BuildValue("(sy#)", m[i].peer, (const char *)m[i].data,
				  (Py_ssize_t)m[i].len);
		if (t == NULL || PyList_Append(list, t) < 0)
			Py_CLEAR(list);
		Py_XDECREF(t);
	}
	return list;
}

/* ports() -> [{name, pmd, lcore, numa, write_bytes, ...}] */
static PyObject *
py_ports(PyObject *self, PyObject *noargs)
{
	struct kvt_port_stats st;
	struct kvt_port_info pi;
	unsigned int i, n;
	PyObject *list, *d;

	(void)self;
	(void)noargs;
	msg_clear();
	n = kvt_port_count();
	list = PyList_New(0);
	for (i = 0; list != NULL && i < n; i++) {
		if (kvt_port_info(i, &pi) < 0 || kvt_port_stats(i, &st) < 0)
			continue;
		d = Py_BuildValue("{sssssIsisKsKsKsKsKsK}", "name", pi.name,
				  "pmd", pi.pmd, "lcore", pi.lcore, "numa", pi.numa,
				  "write_bytes", (unsigned long long)st.write_bytes,
				  "read_bytes", (unsigned long long)st.read_bytes,
				  "served_bytes", (unsigned long long)st.served_bytes,
				  "slices", (unsigned long long)st.slices,
				  "errors", (unsigned long long)st.errors,
				  "retries", (unsigned long long)st.retries);
		if (d == NULL || PyList_Append(list, d) < 0)
			Py_CLEAR(list);
		Py_XDECREF(d);
	}
	return list;
}

static PyMethodDef methods[] = {
	{ "init", py_init, METH_VARARGS, "kvt_init(args)" },
	{ "fini", py_fini, METH_NOARGS, "kvt_fini()" },
	{ "listen_addr", py_listen_addr, METH_NOARGS, "kvt_listen_addr()" },
	{ "name", py_name, METH_NOARGS, "kvt_name()" },
	{ "set_idle", py_set_idle, METH_VARARGS, "kvt_set_idle(policy)" },
	{ "mem_register", py_mem_register, METH_VARARGS, "(addr, len, loc, flags) -> handle" },
	{ "mem_unregister", py_mem_unregister, METH_VARARGS, "(handle)" },
	{ "mem_alloc", py_mem_alloc, METH_VARARGS, "(len, loc) -> addr" },
	{ "mem_free", py_mem_free, METH_VARARGS, "(addr)" },
	{ "peer_open", py_peer_open, METH_VARARGS, "(addr, timeout_ms=0) -> handle" },
	{ "peer_close", py_peer_close, METH_VARARGS, "(handle)" },
	{ "peer_state", py_peer_state, METH_VARARGS, "(handle) -> state" },
	{ "peer_regions", py_peer_regions, METH_VARARGS, "(handle) -> [dict]" },
	{ "peer_stats", py_peer_stats, METH_VARARGS, "(handle) -> dict" },
	{ "batch_alloc", py_batch_alloc, METH_VARARGS, "(n) -> handle" },
	{ "batch_free", py_batch_free, METH_VARARGS, "(handle)" },
	{ "batch_reset", py_batch_reset, METH_VARARGS, "(handle)" },
	{ "submit", py_submit, METH_VARARGS,
	  "(batch, peer, op, local, remote, length, flags, fence, note) -> first" },
	{ "submit_pages", py_submit_pages, METH_VARARGS,
	  "(batch, peer, op, page_size, local, remote, local_idx, remote_idx, flags, fence, note) -> index" },
	{ "submit_blocks", py_submit_blocks, METH_VARARGS,
	  "(batch, peer, op, local, remote, length, flags, fence, note, skip_empty) -> index or None" },
	{ "xfer_sync", py_xfer_sync, METH_VARARGS,
	  "(batch, peer, op, local, remote, length, timeout_us) -> status" },
	{ "poll", py_poll, METH_VARARGS, "(batch) -> pending" },
	{ "wait", py_wait, METH_VARARGS, "(batch, timeout_us) -> settled" },
	{ "status", py_status, METH_VARARGS, "(batch, first, n=0) -> int or [int]" },
	{ "first_error", py_first_error, METH_VARARGS, "(batch, first, n) -> 0 or errno" },
	{ "fence_create", py_fence_create, METH_VARARGS, "(nslots, loc=None) -> handle" },
	{ "fence_destroy", py_fence_destroy, METH_VARARGS, "(handle)" },
	{ "fence_handle", py_fence_handle, METH_VARARGS, "(handle) -> table id for senders" },
	{ "fence_arm", py_fence_arm, METH_VARARGS, "(handle, slot, room)" },
	{ "fence_poll", py_fence_poll, METH_VARARGS, "(handle, slot) -> 0/-EAGAIN/-ESTALE" },
	{ "fence_wait", py_fence_wait, METH_VARARGS, "(handle, slot, us) -> 0/-ESTALE/-ETIMEDOUT" },
	{ "notify_poll", py_notify_poll, METH_VARARGS, "(max=32) -> [(peer, bytes)]" },
	{ "ports", py_ports, METH_NOARGS, "() -> [dict]" },
	{ NULL, NULL, 0, NULL },
};

static int
add_consts(PyObject *m)
{
	return PyModule_AddIntConstant(m, "OP_READ", KVT_OP_READ) ||
		PyModule_AddIntConstant(m, "OP_WRITE", KVT_OP_WRITE) ||
		PyModule_AddIntConstant(m, "MEM_REMOTE_READ", KVT_MEM_REMOTE_READ) ||
		PyModule_AddIntConstant(m, "MEM_REMOTE_WRITE", KVT_MEM_REMOTE_WRITE) ||
		PyModule_AddIntConstant(m, "SUBMIT_ALLOW_OVERLAP",
					KVT_SUBMIT_ALLOW_OVERLAP) ||
		PyModule_AddIntConstant(m, "PRIO_NORMAL", KVT_PRIO_NORMAL) ||
		PyModule_AddIntConstant(m, "PRIO_URGENT", KVT_PRIO_URGENT) ||
		PyModule_AddIntConstant(m, "PRIO_BULK", KVT_PRIO_BULK) ||
		PyModule_AddIntConstant(m, "PRIO_SHIFT", PY_PRIO_SHIFT) ||
		PyModule_AddIntConstant(m, "NOTIFY_MAX", KVT_NOTIFY_MAX);
}

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_kvt",
	"kvt's C API over plain handles; use the kvt package instead.",
	-1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__kvt(void)
{
	PyObject *m = PyModule_Create(&module);

	log_capture();
	if (m != NULL && add_consts(m) < 0)
		Py_CLEAR(m);
	return m;
}
