"""Can numba-cuda 0.30.4 emit Hopper's warpgroup MMA? A probe, run offline (no GPU): one inline-PTX
``wgmma.mma_async`` (m64n8k16, FP16 in, FP32 accumulate, A and B from shared-memory descriptors) compiled
by numba's NVVM for ``sm_90`` and for the arch-specific ``sm_90a``, then assembled by ptxas. It answers
"does it compile, and to what SASS", not "is it right": the descriptors here point at nothing and the
kernel is never launched.

Run: ``.venv/bin/python -m kernels.tensorcores_wgmma`` (needs the offline toolchain of .tools/, see
.tools/sass.py); it writes data/results/tensorcores.wgmma.txt.

Where the rest lives: chapters/tensorcores.md (the page); lib/grading/variants/tensorcores.py (its exercises'
known-wrong variants); tests/test_tensorcores.py (tests); data/results/tensorcores.* (recorded on the H200).
Record it with ``python -m tools.record tensorcores`` on a GPU; on the simulator the same kernels run through
the page's checks and the tests.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

WGMMA = ("wgmma.fence.sync.aligned;\n"
         "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {$0, $1, $2, $3}, $4, $5, p, 1, 1, 0, 1;\n"
         "wgmma.commit_group.sync.aligned;\n"
         "wgmma.wait_group.sync.aligned 0;")


def make_probe():
    """The probe kernel: each of 128 threads (one warpgroup) gets 4 accumulators of a 64 × 8 tile."""
    from llvmlite import ir
    from numba import cuda, float32, types
    from numba.cuda.extending import intrinsic

    f32, i64 = ir.FloatType(), ir.IntType(64)

    @intrinsic
    def wgmma_m64n8k16_f16(typingctx, desc_a, desc_b, c0, c1, c2, c3):
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [i64, i64, f32, f32, f32, f32])
            text = "{ .reg .pred p; setp.ne.b32 p, 1, 0;\n" + WGMMA + " }"
            d = builder.asm(fnty, text, "=f,=f,=f,=f,l,l,0,1,2,3", list(args), True)
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(d, k) for k in range(4)])
        return types.UniTuple(types.float32, 4)(desc_a, desc_b, c0, c1, c2, c3), codegen

    def wgmma_probe_kernel(out, desc_a, desc_b):
        """One wgmma.mma_async of a 64 × 8 × 16 tile; each thread writes the sum of its 4 accumulators.

        Memory: A and B would be read by the tensor cores from shared memory at the descriptors' addresses
        (here: whatever desc_a[0] and desc_b[0] hold; the probe is compiled, never launched).
        Launch: one warpgroup (128 threads), one block.
        """
        acc = wgmma_m64n8k16_f16(desc_a[0], desc_b[0], float32(0), float32(0), float32(0), float32(0))
        out[cuda.threadIdx.x] = acc[0] + acc[1] + acc[2] + acc[3]

    return wgmma_probe_kernel, (types.float32[::1], types.int64[::1], types.int64[::1])


def probe() -> list[str]:
    """Compile the probe for sm_90 and sm_90a; lines saying what NVVM's PTX targets and what ptxas did."""
    from numba import cuda
    from numba.cuda.core import config

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / ".tools"))
    import sass  # the offline ptxas/cuobjdump (cuda-toolkit 13.5 wheels)

    kernel, sig = make_probe()
    lines = []
    for cc in [(9, 0), (9, 0, "a")]:
        config.FORCE_CUDA_CC = cc               # how numba-cuda 0.30.4 is told about an arch-specific target
        ptx, _ = cuda.compile_ptx(kernel, sig, cc=cc)
        target = next(line for line in ptx.splitlines() if line.startswith(".target"))
        arch = "sm_90a" if len(cc) == 3 else "sm_90"
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "probe.ptx")
            Path(path).write_text(ptx)
            run = subprocess.run([os.path.join(sass.BIN, "ptxas"), f"-arch={arch}", path, "-o",
                                  os.path.join(tmp, "probe.cubin")], capture_output=True, text=True)
            if run.returncode:
                first = next((ln for ln in run.stderr.splitlines() if "error" in ln), run.stderr.strip())
                result = "ptxas refused it: " + first.split("error")[-1].strip(" :")
            else:
                listing = subprocess.run([os.path.join(sass.BIN, "cuobjdump"), "-sass",
                                          os.path.join(tmp, "probe.cubin")], capture_output=True, text=True).stdout
                ops = [ln.split("*/")[1].strip().rstrip(";").split(" ")[0] for ln in listing.splitlines()
                       if "GMMA" in ln or "WARPGROUP" in ln]
                result = "ptxas compiled it; SASS has " + ", ".join(ops)
        lines.append(f"cc={cc}: NVVM's PTX says '{target}'; {result}")
    return lines


if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "data" / "results" / "tensorcores.wgmma.txt"
    import numba_cuda

    text = [f"# wgmma probe, offline (no GPU): numba-cuda {numba_cuda.__version__}, ptxas of .tools/cuda"]
    text += probe()
    out.write_text("\n".join(text) + "\n")
    print("\n".join(text))
