"""Offline SASS (no GPU) of the cp.async softmax kernel's candidate configurations, and of rung 6 for comparison.

Run from the repository root: .venv/bin/python .gpu/soft_async/sass_table.py
Prints one markdown row per configuration: registers, spills, shared bytes (static + dynamic), blocks per SM on
the H200 (lib.occupancy), and the SASS counts that matter (LDGSTS = cp.async copies, LDG/STG, LDS/STS, local
memory, DEPBAR = waits)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".tools"))
import sass  # noqa: E402  (first: it sets up the offline compiler)

sys.path.insert(0, ROOT)
import kernels.softmax as sm  # noqa: E402
from lib.occupancy import occupancy  # noqa: E402

FLAT = "void(float32[::1], float32[::1], int64)"
ROWS = "void(float32[:, ::1], float32[:, ::1])"
# (label, cols, kernel, signature, threads, dynamic shared bytes)
CONFIGS = [("shared T512 R32 S96 (rung 6)", 65536, sm.make_softmax_on_chip_shared_kernel(32, 96, 512), ROWS, 512,
            4 * 512 * 96)]
for cols, t, r, s, g in [(65536, 512, 32, 96, 1), (65536, 512, 32, 96, 2), (65536, 512, 32, 96, 4),
                         (65536, 512, 32, 96, 8), (65536, 1024, 16, 48, 2), (65536, 1024, 16, 48, 4),
                         (65536, 256, 64, 192, 4), (65536, 512, 16, 112, 4), (32768, 512, 32, 32, 4),
                         (32768, 512, 16, 48, 2), (8192, 256, 32, 0, 1), (4096, 128, 32, 0, 1)]:
    CONFIGS.append((f"async T{t} R{r} S{s} G{g}", cols, sm.make_softmax_on_chip_async_kernel(r, s, t, g), FLAT, t,
                    4 * t * s))

KEYS = ["LDGSTS", "LDG", "STG", "LDS", "STS", "LDL", "STL", "MUFU", "DEPBAR"]
print("| kernel | cols | regs | spill st/ld B | shared B | blocks/SM | " + " | ".join(KEYS) + " |")
print("|---" * (6 + len(KEYS)) + "|")
for label, cols, kernel, sig, threads, dynamic in CONFIGS:
    try:
        info = sass.compile_sass(kernel, sig)
    except Exception as e:  # a configuration that does not compile is reported, not fatal
        print(f"| {label} | {cols} | compile error: {type(e).__name__}: {str(e)[:100]} |")
        continue
    shared = info["smem"] + dynamic
    occ = occupancy("H200", threads, info["regs"], shared)
    counts = {k: sum(n for op, n in info["hist"].items() if op.split(".")[0] == k) for k in KEYS}
    blocks = f"{occ['blocks']} ({', '.join(occ['limiting'])})" if occ["blocks"] else occ["error"]
    print(f"| {label} | {cols} | {info['regs']} | {info['spill_stores']}/{info['spill_loads']} | {shared} | {blocks} | "
          + " | ".join(str(counts[k]) for k in KEYS) + " |", flush=True)
