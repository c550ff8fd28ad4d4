#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Build the nvlink kernels' images and write them as a C table.

    kernels_image.py NVCC PTXAS PTX_ISA SMS INPUT.cu OUTPUT.c

nvcc compiles INPUT.cu to PTX for the lowest architecture in SMS (comma
separated, e.g. 80,89,90); its ISA version is lowered to PTX_ISA (e.g.
8.0, what a CUDA 12.0 driver compiles), which ptxas checks: code that
needs a newer ISA fails here, not on a user's box.  ptxas then makes one
cubin per architecture.  OUTPUT.c holds the cubins and the PTX as
kvt_nv_images (kernels.h); the library picks one per device at run time.
"""
import os
import re
import subprocess
import sys
import tempfile


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        sys.exit("%s failed:\n%s" % (" ".join(cmd), r.stdout))


def c_bytes(name, data):
    lines = ["static const unsigned char %s[%d] = {" % (name, len(data))]
    for i in range(0, len(data), 16):
        lines.append("\t" + ", ".join("0x%02x" % b for b in data[i:i + 16]) +
                     ",")
    lines.append("};")
    return "\n".join(lines)


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    nvcc, ptxas, isa, sms, src, out = sys.argv[1:]
    sms = sorted(int(s) for s in sms.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path = os.path.join(tmp, "kernels.ptx")
        run([nvcc, "-ptx", "-arch=compute_%d" % sms[0], "-o", ptx_path, src])
        with open(ptx_path) as f:
            ptx = f.read()
        ptx, n = re.subn(r"^\.version\s+\d+\.\d+", ".version " + isa, ptx,
                         count=1, flags=re.M)
        if n != 1:
            sys.exit("no .version line in nvcc's PTX")
        with open(ptx_path, "w") as f:
            f.write(ptx)
        images = []
        for sm in sms:
            cubin = os.path.join(tmp, "sm_%d.cubin" % sm)
            run([ptxas, "-arch=sm_%d" % sm, "-o", cubin, ptx_path])
            with open(cubin, "rb") as f:
                images.append((sm, f.read()))
        images.append((0, ptx.encode() + b"\0"))
    parts = ["/* Written by kernels_image.py from kernels.cu: do not edit. */",
             '#include "kernels.h"', ""]
    for sm, data in images:
        parts.append(c_bytes("image_%d" % sm, data))
    parts.append("\nconst struct kvt_nv_image kvt_nv_images[] = {")
    for sm, data in images:
        parts.append("\t{ %d, image_%d, sizeof(image_%d) }," % (sm, sm, sm))
    parts.append("};\n")
    parts.append("const unsigned int kvt_nv_nimages = %d;" % len(images))
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
