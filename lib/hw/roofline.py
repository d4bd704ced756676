"""The roofline model: what a kernel's arithmetic intensity lets it reach on a given GPU.

A kernel that does F FLOPs and moves B bytes to or from DRAM has arithmetic intensity I = F / B (FLOPs per
byte). It cannot finish before F / peak nor before B / bandwidth, so its attainable rate is
``min(peak, I × bandwidth)``: a slanted roof (memory-bound) up to the *ridge point* I = peak / bandwidth,
and a flat one (compute-bound) after it. Each kind of arithmetic has its own flat roof: FP32 on the SIMT
cores, TF32 and FP16 on the tensor cores (Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009).

Datasheet peaks assume the boost clock on every SM at once; under a full FMA load the clock drops to stay
within the power limit, so the measured ceiling (cuBLAS, or a copy for bandwidth) sits below the roof.

The live widget (:mod:`lib.widgets.roofline`) draws this with its own JavaScript twin of these functions.
"""
from __future__ import annotations

from lib.hw.specs import GPUS, GPUSpec

ROOFS = ("fp32", "tf32", "fp16")
ROOF_LABELS = {"fp32": "FP32 (SIMT cores)", "tf32": "TF32 (tensor cores)", "fp16": "FP16 (tensor cores)"}


def intensity(flops: float, bytes_moved: float) -> float:
    """Arithmetic intensity in FLOPs per byte."""
    if bytes_moved <= 0 or flops < 0:
        raise ValueError(f"need flops >= 0 and bytes > 0, got {flops} and {bytes_moved}")
    return flops / bytes_moved


def peak_tflops(spec: GPUSpec, roof: str = "fp32") -> float | None:
    """The flat roof of one kind of arithmetic (None where the GPU has no such unit, e.g. TF32 on a T4)."""
    if roof not in ROOFS:
        raise ValueError(f"roof must be one of {ROOFS}, got {roof!r}")
    return {"fp32": spec.fp32_tflops, "tf32": spec.tf32_tflops, "fp16": spec.fp16_tflops}[roof]


def attainable_tflops(flops_per_byte: float, peak: float, bandwidth_gbs: float) -> float:
    """min(peak, intensity × bandwidth), in TFLOP/s."""
    return min(peak, flops_per_byte * bandwidth_gbs / 1e3)


def ridge_point(peak: float, bandwidth_gbs: float) -> float:
    """The intensity (FLOPs per byte) where the memory roof meets the compute roof."""
    return peak * 1e12 / (bandwidth_gbs * 1e9)


def ridge_table(keys=("H100", "H200")) -> list[dict]:
    """Ridge points of each roof of some GPUs (FLOPs per byte of DRAM traffic)."""
    rows = []
    for key in keys:
        spec = GPUS[key]
        for roof in ROOFS:
            peak = peak_tflops(spec, roof)
            if peak is not None:
                rows.append({"GPU": spec.name, "roof": ROOF_LABELS[roof], "peak TFLOP/s": peak,
                             "bandwidth GB/s": spec.bandwidth_gbs,
                             "ridge FLOP/B": round(ridge_point(peak, spec.bandwidth_gbs), 1)})
    return rows


def analyze(spec: dict, flops: float, bytes_moved: float) -> dict:
    """Everything the widget states about a hypothetical kernel (the twin of ``analyze`` in roofline.js).

    `spec` is a GPU as the widget holds it: bandwidth_gbs, fp32_tflops, tf32_tflops (or None),
    fp16_tflops. Returns the intensity, each roof's ridge point and attainable TFLOP/s, the FP32 bound
    ('memory' or 'compute') and the time floor in ms on the FP32 roof: max(F / peak, B / bandwidth).
    """
    ai = intensity(flops, bytes_moved)
    out = {"intensity": ai}
    for roof in ROOFS:
        peak = spec[f"{roof}_tflops"]
        out[f"ridge_{roof}"] = None if peak is None else ridge_point(peak, spec["bandwidth_gbs"])
        out[f"attainable_{roof}"] = None if peak is None else attainable_tflops(ai, peak, spec["bandwidth_gbs"])
    out["bound"] = "memory" if ai < out["ridge_fp32"] else "compute"
    out["floor_ms"] = max(flops / (spec["fp32_tflops"] * 1e12), bytes_moved / (spec["bandwidth_gbs"] * 1e9)) * 1e3
    return out


def widget_specs() -> dict:
    """The spec table as the widget carries it (JSON-ready), keyed like lib.hw.specs.GPUS."""
    return {key: {"name": s.name, "bandwidth_gbs": s.bandwidth_gbs, "fp32_tflops": s.fp32_tflops,
                  "tf32_tflops": s.tf32_tflops, "fp16_tflops": s.fp16_tflops} for key, s in GPUS.items()}
