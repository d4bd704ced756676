"""Datasheet figures of the GPUs the book talks about, each with its source.

Peaks are vendor figures for dense math (no 2:4 sparsity) at boost clock; real kernels stay below them
because clocks drop under power and thermal limits. Per-SM limits (threads, blocks, registers, shared
memory) come from the compute-capability table of the CUDA C++ Programming Guide.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, asdict

CUDA_GUIDE_LIMITS = ("CUDA C++ Programming Guide, 'Features and Technical Specifications' table of compute "
                     "capabilities, https://docs.nvidia.com/cuda/cuda-c-programming-guide/"
                     "#features-and-technical-specifications")


@dataclass(frozen=True)
class GPUSpec:
    key: str
    name: str
    arch: str
    compute_capability: tuple[int, int]
    sms: int
    boost_mhz: int
    memory_gb: int
    memory_type: str
    bandwidth_gbs: float          # DRAM bandwidth, GB/s (10^9 bytes per second)
    fp32_tflops: float            # FP32 on the SIMT cores (FMA = 2 FLOPs)
    tf32_tflops: float | None     # tensor cores, dense, None where the architecture has no TF32
    fp16_tflops: float            # tensor cores, dense, FP16 inputs with FP32 accumulate
    l2_mb: float
    smem_per_sm_kb: int           # shared memory per SM (the configurable maximum)
    smem_per_block_kb: int        # the most one block may opt in to
    regs_per_sm: int              # 32-bit registers
    max_threads_per_sm: int
    max_blocks_per_sm: int
    source: str

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // 32

    @property
    def ridge_fp32(self) -> float:
        """FLOPs per byte above which an FP32 SIMT kernel can be compute-bound."""
        return self.fp32_tflops * 1e12 / (self.bandwidth_gbs * 1e9)

    def as_dict(self) -> dict:
        return asdict(self)


GPUS: dict[str, GPUSpec] = {s.key: s for s in [
    GPUSpec("H200", "NVIDIA H200 SXM", "Hopper", (9, 0), sms=132, boost_mhz=1980, memory_gb=141,
            memory_type="HBM3e", bandwidth_gbs=4800, fp32_tflops=67.0, tf32_tflops=494.7, fp16_tflops=989.4,
            l2_mb=60, smem_per_sm_kb=228, smem_per_block_kb=227, regs_per_sm=65536, max_threads_per_sm=2048,
            max_blocks_per_sm=32,
            source="NVIDIA H200 Tensor Core GPU datasheet (2024), https://www.nvidia.com/en-us/data-center/h200/ "
                   "(tensor figures there are with sparsity; dense is half); SM count, clock and compute as the "
                   "H100 SXM5 in the Hopper whitepaper; L2 (60 MiB), SMs and clock as the driver reports them on "
                   "the reference H200 (data/results/device.json); " + CUDA_GUIDE_LIMITS),
    GPUSpec("H100", "NVIDIA H100 SXM5", "Hopper", (9, 0), sms=132, boost_mhz=1980, memory_gb=80,
            memory_type="HBM3", bandwidth_gbs=3350, fp32_tflops=67.0, tf32_tflops=494.7, fp16_tflops=989.4,
            l2_mb=50, smem_per_sm_kb=228, smem_per_block_kb=227, regs_per_sm=65536, max_threads_per_sm=2048,
            max_blocks_per_sm=32,
            source="NVIDIA H100 Tensor Core GPU datasheet and NVIDIA H100 Tensor Core GPU Architecture "
                   "whitepaper (2022), https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper; "
                   + CUDA_GUIDE_LIMITS),
    GPUSpec("A100", "NVIDIA A100 SXM4 80GB", "Ampere", (8, 0), sms=108, boost_mhz=1410, memory_gb=80,
            memory_type="HBM2e", bandwidth_gbs=2039, fp32_tflops=19.5, tf32_tflops=156.0, fp16_tflops=312.0,
            l2_mb=40, smem_per_sm_kb=164, smem_per_block_kb=163, regs_per_sm=65536, max_threads_per_sm=2048,
            max_blocks_per_sm=32,
            source="NVIDIA A100 Tensor Core GPU datasheet (2021), https://www.nvidia.com/content/dam/en-zz/"
                   "Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf; NVIDIA "
                   "A100 Tensor Core GPU Architecture whitepaper (2020); " + CUDA_GUIDE_LIMITS),
    GPUSpec("L4", "NVIDIA L4", "Ada Lovelace", (8, 9), sms=58, boost_mhz=2040, memory_gb=24,
            memory_type="GDDR6", bandwidth_gbs=300, fp32_tflops=30.3, tf32_tflops=60.0, fp16_tflops=121.0,
            l2_mb=48, smem_per_sm_kb=100, smem_per_block_kb=99, regs_per_sm=65536, max_threads_per_sm=1536,
            max_blocks_per_sm=24,
            source="NVIDIA L4 Tensor Core GPU datasheet (2023), https://www.nvidia.com/en-us/data-center/l4/ "
                   "(tensor figures there are with sparsity; dense is half); NVIDIA Ada GPU Architecture "
                   "whitepaper; " + CUDA_GUIDE_LIMITS),
    GPUSpec("T4", "NVIDIA T4", "Turing", (7, 5), sms=40, boost_mhz=1590, memory_gb=16,
            memory_type="GDDR6", bandwidth_gbs=320, fp32_tflops=8.1, tf32_tflops=None, fp16_tflops=65.0,
            l2_mb=4, smem_per_sm_kb=64, smem_per_block_kb=64, regs_per_sm=65536, max_threads_per_sm=1024,
            max_blocks_per_sm=16,
            source="NVIDIA T4 Tensor Core GPU datasheet (2019), https://www.nvidia.com/content/dam/en-zz/"
                   "Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf; NVIDIA Turing GPU "
                   "Architecture whitepaper; " + CUDA_GUIDE_LIMITS),
    GPUSpec("RTX 4090", "NVIDIA GeForce RTX 4090", "Ada Lovelace", (8, 9), sms=128, boost_mhz=2520,
            memory_gb=24, memory_type="GDDR6X", bandwidth_gbs=1008, fp32_tflops=82.6, tf32_tflops=82.6,
            fp16_tflops=165.2, l2_mb=72, smem_per_sm_kb=100, smem_per_block_kb=99, regs_per_sm=65536,
            max_threads_per_sm=1536, max_blocks_per_sm=24,
            source="NVIDIA Ada GPU Architecture whitepaper (2022), appendix table for the GeForce RTX 4090, "
                   "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf; "
                   + CUDA_GUIDE_LIMITS),
]}

REFERENCE_GPU = "H200"


def spec_for(device_name: str) -> GPUSpec | None:
    """The spec whose key appears in a device name such as 'NVIDIA H200' or 'NVIDIA GeForce RTX 4090'."""
    normalized = device_name.upper().replace("-", " ")
    for key, spec in GPUS.items():
        if re.search(r"\b" + re.escape(key.upper()) + r"\b", normalized):  # 'L4' must not match 'L40S'
            return spec
    return None


def table():
    """All specs as a pandas DataFrame, one row per GPU."""
    import pandas as pd

    rows = []
    for s in GPUS.values():
        rows.append({"GPU": s.name, "arch": s.arch, "cc": "%d.%d" % s.compute_capability, "SMs": s.sms,
                     "boost MHz": s.boost_mhz, "memory": f"{s.memory_gb} GB {s.memory_type}",
                     "bandwidth GB/s": s.bandwidth_gbs, "FP32 TFLOP/s": s.fp32_tflops,
                     "TF32 TFLOP/s": s.tf32_tflops, "FP16 TFLOP/s": s.fp16_tflops, "L2 MB": s.l2_mb,
                     "smem/SM KB": s.smem_per_sm_kb, "FP32 ridge FLOP/B": round(s.ridge_fp32, 1)})
    return pd.DataFrame(rows).set_index("GPU")
