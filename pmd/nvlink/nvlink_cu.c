/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver, reached at run time: libcuda.so.1 is opened with
 * dlopen() and every entry point is asked of cuGetProcAddress_v2 at the
 * ABI of CUDA 12.0, so one build runs on any CUDA 12.x or 13.x driver and
 * starts where there is none (the nvlink transport then stays off and
 * says why).  Nothing links the CUDA runtime: kvt works in the device's
 * primary context, the one the runtime (and so torch) uses, and pushes
 * it around each call from an application thread.
 *
 * The kernels travel as images (kernels_image.py): cubins for the
 * architectures serving stacks run and PTX of an ISA every CUDA 12
 * driver compiles.  A device loads the cubin of its major revision with
 * the highest minor it can run, else the PTX (also when KVT_CUDA_PTX=1).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "nvlink.h"

struct nv_driver nv_cu;

/* The ABI every entry point is asked for. */
#define NV_ABI 12000

static const struct {
	const char *sym;
	size_t off;
} nv_calls[] = {
#define NV_ENTRY(name, v) { #name, offsetof(struct nv_driver, name) },
	NV_DRIVER_CALLS(NV_ENTRY)
#undef NV_ENTRY
};

const char *
nv_err(CUresult r)
{
	const char *s = NULL;

	if (nv_cu.cuGetErrorString == NULL || nv_cu.cuGetErrorString(r, &s) !=
	    CUDA_SUCCESS || s == NULL)
		return "unknown CUDA error";
	return s;
}

/*
 * Open the driver and resolve every call.  @return 0, or -ENOTSUP with
 * the reason in why.
 */
int
nv_driver_load(char *why, size_t len)
{
	PFN_cuGetProcAddress_v12000 gpa;
	CUdriverProcAddressQueryResult q;
	void *lib, *fn;
	int version = 0;
	unsigned int i;
	CUresult r;

	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		snprintf(why, len, "no CUDA driver (%s)", dlerror());
		return -ENOTSUP;
	}
	gpa = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
	if (gpa == NULL) {
		snprintf(why, len, "the CUDA driver is older than 12.0");
		return -ENOTSUP;
	}
	for (i = 0; i < RTE_DIM(nv_calls); i++) {
		fn = NULL;
		r = gpa(nv_calls[i].sym, &fn, NV_ABI,
			CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q);
		if (r != CUDA_SUCCESS || q != CU_GET_PROC_ADDRESS_SUCCESS ||
		    fn == NULL) {
			snprintf(why, len, "the CUDA driver lacks %s",
				 nv_calls[i].sym);
			return -ENOTSUP;
		}
		memcpy((char *)&nv_cu + nv_calls[i].off, &fn, sizeof(fn));
	}
	r = nv_cu.cuInit(0);
	if (r != CUDA_SUCCESS) {
		snprintf(why, len, "cuInit: %s", nv_err(r));
		return -ENOTSUP;
	}
	nv_cu.cuDriverGetVersion(&version);
	nv_sys.driver = version;
	return 0;
}

/* ---- contexts ---- */

/* Make dev's primary context current on an application thread; undo with
 * nv_ctx_pop(). */
int
nv_ctx_push(int dev)
{
	return nv_cu.cuCtxPushCurrent(nv_sys.dev[dev].ctx) == CUDA_SUCCESS ?
		0 : -EIO;
}

void
nv_ctx_pop(void)
{
	CUcontext c;

	nv_cu.cuCtxPopCurrent(&c);
}

/* The lcore switches devices often; skip the call when it is current. */
void
nv_use(int dev)
{
	static __thread int cur = -1;

	if (dev != cur && nv_cu.cuCtxSetCurrent(nv_sys.dev[dev].ctx) ==
	    CUDA_SUCCESS)
		cur = dev;
}

/* ---- kernels ---- */

static const struct kvt_nv_image *
image_ptx(void)
{
	unsigned int i;

	for (i = 0; i < kvt_nv_nimages; i++)
		if (kvt_nv_images[i].sm == 0)
			return &kvt_nv_images[i];
	return NULL;
}

/*
 * The image a device of compute capability major.minor runs best: the
 * cubin of the same major with the highest minor not above its own, else
 * the PTX.
 */
static const struct kvt_nv_image *
image_pick(int major, int minor)
{
	const struct kvt_nv_image *best = NULL, *im;
	const char *jit = getenv("KVT_CUDA_PTX");
	unsigned int i, cc = (unsigned int)(major * 10 + minor);

	if (jit != NULL && strcmp(jit, "1") == 0)
		return image_ptx();
	for (i = 0; i < kvt_nv_nimages; i++) {
		im = &kvt_nv_images[i];
		if (im->sm != 0 && im->sm / 10 == cc / 10 && im->sm <= cc &&
		    (best == NULL || im->sm > best->sm))
			best = im;
	}
	return best != NULL ? best : image_ptx();
}

/* Load the kernels into dev's primary context (current). */
int
nv_kernels_load(int dev)
{
	struct nv_dev *d = &nv_sys.dev[dev];
	const struct kvt_nv_image *im;
	int major = 0, minor = 0;
	CUresult r;

	nv_cu.cuDeviceGetAttribute(&major,
		CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->cu);
	nv_cu.cuDeviceGetAttribute(&minor,
		CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->cu);
	im = image_pick(major, minor);
	if (im == NULL)
		return -ENOTSUP;
	r = nv_cu.cuModuleLoadData(&d->mod, im->data);
	if (r != CUDA_SUCCESS && im->sm != 0 && image_ptx() != NULL) {
		/* A cubin this driver does not take: compile the PTX. */
		NV_LOG(INFO, "cuda:%d: sm_%u image refused (%s), using PTX",
		       dev, im->sm, nv_err(r));
		im = image_ptx();
		r = nv_cu.cuModuleLoadData(&d->mod, im->data);
	}
	if (r != CUDA_SUCCESS) {
		NV_LOG(ERR, "cuda:%d (sm_%d%d): kernels do not load: %s", dev,
		       major, minor, nv_err(r));
		return -ENOTSUP;
	}
	d->image_sm = im->sm;
	if (nv_cu.cuModuleGetFunction(&d->gather, d->mod, "kvt_nv_gather") ||
	    nv_cu.cuModuleGetFunction(&d->resident, d->mod, "kvt_nv_resident") ||
	    nv_cu.cuModuleGetFunction(&d->fence_wait, d->mod,
				      "kvt_nv_fence_wait"))
		return -ENOTSUP;
	return 0;
}

static int
launch(CUfunction f, unsigned int blocks, unsigned int threads, CUstream st,
       void **args)
{
	return nv_cu.cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, st, args,
				    NULL) == CUDA_SUCCESS ? 0 : -EIO;
}

int
nv_launch_gather(const struct nv_lane *l, CUdeviceptr tasks, uint32_t n,
		 const struct kvt_nv_task *inl, const struct kvt_nv_tail *tail,
		 unsigned int blocks)
{
	struct kvt_nv_inline it;
	struct kvt_nv_tail tl = *tail;
	void *args[] = { &tasks, &n, &it, &tl };

	memset(&it, 0, sizeof(it));
	if (tasks == 0)
		memcpy(it.t, inl, n * sizeof(it.t[0]));
	return launch(nv_sys.dev[l->dev].gather, blocks, 512, l->st, args);
}

int
nv_launch_resident(const struct nv_lane *l, uint64_t first)
{
	uint64_t cmds = l->cmds_d, progress = l->progress_d;
	uint32_t ncmds = NV_TICKETS;
	void *args[] = { &cmds, &ncmds, &first, &progress };

	return launch(nv_sys.dev[l->dev].resident, 1, KVT_NV_RES_THREADS, l->st,
		      args);
}

int
nv_launch_fence_wait(int dev, uint64_t word, uint64_t room,
		     uint64_t timeout_ns, uint64_t status, CUstream st)
{
	void *args[] = { &word, &room, &timeout_ns, &status };

	return launch(nv_sys.dev[dev].fence_wait, 1, 1, st, args);
}
