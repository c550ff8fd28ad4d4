# SPDX-License-Identifier: BSD-3-Clause
"""The installed wheel on a GPU box, as a serving stack uses it: torch
tensors on cuda:0 in two processes, kvt's Mooncake class over nvlink, a
write and a read of 64 MiB in 256 pages, every byte compared on the GPU.
kvt (the CUDA driver API, opened at run time) and torch (the CUDA
runtime) share the device's primary context: kvt exports and maps
torch's allocations (legacy IPC handles), and torch reads memory kvt
allocated (kvt.Engine.alloc, cuMemCreate) after a write into it.

    python torch_nvlink.py           the initiator (starts the target)
    python torch_nvlink.py --target
"""
import ctypes
import subprocess
import sys

import torch

import kvt
from kvt.compat.mooncake import TransferEngine

N = 64 << 20
PAGE = N // 256


def engine():
    te = TransferEngine()
    assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "nvlink", "") == 0
    return te


class DeviceBytes:
    """Memory torch did not allocate, as torch.as_tensor takes it."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "|u1", "data": (ptr, False),
            "version": 3}


def primary_context_current():
    """Whether this thread runs in cuda:0's primary context."""
    cu = ctypes.CDLL("libcuda.so.1")
    cur, prim, dev = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int()
    assert cu.cuCtxGetCurrent(ctypes.byref(cur)) == 0
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(prim), dev) == 0
    cu.cuDevicePrimaryCtxRelease(dev)
    return cur.value is not None and cur.value == prim.value


def target():
    te = engine()
    buf = torch.zeros(N, dtype=torch.uint8, device="cuda:0")
    assert te.register_memory(buf.data_ptr(), N) == 0
    kbase = kvt.current().alloc(N, "cuda:0")
    assert te.register_memory(kbase, N) == 0
    print("127.0.0.1:%d %d %d" % (te.get_rpc_port(), buf.data_ptr(), kbase),
          flush=True)
    sys.stdin.readline()                      # written
    torch.cuda.synchronize()
    want = (torch.arange(N, device="cuda:0") * 7 % 251).to(torch.uint8)
    kbuf = torch.as_tensor(DeviceBytes(kbase, N), device="cuda:0")
    print("same" if torch.equal(buf, want) and torch.equal(kbuf, want)
          and primary_context_current() else "DIFFERENT", flush=True)
    buf.copy_(torch.flip(want, [0]))          # for the read back
    torch.cuda.synchronize()
    print("flipped", flush=True)
    sys.stdin.readline()


def initiator():
    t = subprocess.Popen([sys.executable, __file__, "--target"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        peer, rbase, kbase = t.stdout.readline().split()
        rbase, kbase = int(rbase), int(kbase)
        te = engine()
        src = (torch.arange(N, device="cuda:0") * 7 % 251).to(torch.uint8)
        dst = torch.zeros(N, dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
        assert te.batch_register_memory([src.data_ptr(), dst.data_ptr()],
                                        [N, N]) == 0
        offs = [i * PAGE for i in range(N // PAGE)]
        rc = te.batch_transfer_sync_write(
            peer, [src.data_ptr() + o for o in offs],
            [rbase + o for o in offs], [PAGE] * len(offs))
        assert rc == 0, "write returned %d" % rc
        rc = te.transfer_sync_write(peer, src.data_ptr(), kbase, N)
        assert rc == 0, "write into kvt's memory returned %d" % rc
        t.stdin.write("written\n")
        t.stdin.flush()
        wrote = t.stdout.readline().strip()
        assert t.stdout.readline().strip() == "flipped"
        rc = te.batch_transfer_sync_read(
            peer, [dst.data_ptr() + o for o in offs],
            [rbase + o for o in offs], [PAGE] * len(offs))
        assert rc == 0, "read returned %d" % rc
        torch.cuda.synchronize()
        read = torch.equal(dst, torch.flip(src, [0]))
        ports = [p for p in kvt.current().ports()
                 if p["write_bytes"] or p["read_bytes"]]
    finally:
        t.stdin.close()
        t.wait(60)
    print("torch cuda:0 -> cuda:0 over %s: write (torch's and kvt's memory,"
          " one primary context) %s, read %s" % (
              ",".join(p["name"] for p in ports) or "?", wrote,
              "same" if read else "DIFFERENT"), flush=True)
    return wrote == "same" and read


if __name__ == "__main__":
    if sys.argv[1:] == ["--target"]:
        target()
    else:
        sys.exit(0 if initiator() else 1)
