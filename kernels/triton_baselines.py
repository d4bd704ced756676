"""Triton baselines: what a reader who writes Triton would run instead of the book's Hopper kernels.

Two kernels, each the one of Triton's own tutorials, written as a Triton user writes them — the tutorial's
algorithm, its autotune list, its key — and not tuned by us:

* :func:`matmul` — tutorial 03, "Matrix Multiplication": one program per BLOCK_SIZE_M × BLOCK_SIZE_N tile of C
  in grouped order (GROUP_SIZE_M row tiles walk the columns together, for L2 reuse), ``tl.dot`` over tiles
  of K with a float32 accumulator, ``@triton.autotune`` over the tutorial's 16 CUDA configurations, key
  (M, N, K). FP16 or BF16 in, or float32 in with TF32 tensor cores (``input_precision="tf32"``).
  Deviation: C is written in **float32** (the tutorial rounds it to fp16), because the book compares every
  GEMM, cuBLAS included, with a float32 C (:mod:`kernels.hopper`).
* :func:`attention` — the forward pass of tutorial 06, "Fused Attention", as shipped for Triton 3.x:
  FlashAttention-2's algorithm, one program per BLOCK_M query rows of one head, Q, K, V and O through
  host-side TMA tensor descriptors, ``exp2`` with the scale folded in, causal attention split into the key
  tiles below the diagonal band (no mask) and the band itself (masked); ``@triton.autotune`` over
  BLOCK_M ∈ {64, 128}, BLOCK_N ∈ {32, 64, 128}, 2–4 stages, 4 or 8 warps, less the tutorial's Hopper filter
  (8 warps only for tiles of at least 128 × 128) and its pruning (BLOCK_M ≤ n; BLOCK_M ≥ BLOCK_N when
  causal). Its benchmark also runs the non-causal forward with automatic warp specialisation on Hopper
  (``warp_specialize=True``: device-side descriptors), so that is offered too. Deviations: the 16-bit type is
  the inputs' own (the tutorial fixes fp16, or fp8 which is left out here, with the backward pass), and the
  autotune key has the causal stage and the type in it (the tutorial's key has neither, so a causal run would
  reuse the configuration tuned for a non-causal one, and bf16 that of fp16: host descriptors carry no dtype
  the autotuner could see).

Sources (Triton, MIT licence):
https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html and
https://triton-lang.org/main/getting-started/tutorials/06-fused-attention.html

Nothing here imports Triton or torch when the module is imported; :func:`available` says whether they and a
GPU are there (:func:`unavailable_reason` says why not), and the kernels are built on first use. Every call
that autotunes is logged (:func:`tuning_log`: seconds of compiling and benchmarking, the configuration
chosen), so a recording can say what autotuning cost it.
"""
from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import time
from pathlib import Path

TUTORIAL_URLS = {
    "matmul": "https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html",
    "attention": "https://triton-lang.org/main/getting-started/tutorials/06-fused-attention.html",
}
# (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, num_stages, num_warps) of tutorial 03's CUDA configs, all with
# GROUP_SIZE_M = 8; the last eight are the ones it calls good for fp8 inputs.
MATMUL_CONFIGS = [(128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
                  (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (32, 64, 32, 5, 2),
                  (128, 256, 128, 3, 8), (256, 128, 128, 3, 8), (256, 64, 128, 4, 4), (64, 256, 128, 4, 4),
                  (128, 128, 128, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 32, 64, 4, 4)]
MATMUL_GROUP_SIZE_M = 8
PRECISIONS = {"float16": "float16", "bfloat16": "bfloat16", "tf32": "float32"}   # kind of input -> torch dtype
SHORT = {"float16": "fp16", "bfloat16": "bf16", "tf32": "tf32"}
# tutorial 06's search space (CUDA): BLOCK_M × BLOCK_N × num_stages × num_warps
ATTENTION_BLOCK_M, ATTENTION_BLOCK_N = (64, 128), (32, 64, 128)
ATTENTION_STAGES, ATTENTION_WARPS = (2, 3, 4), (4, 8)
LOG2E = 1.44269504              # 1 / ln 2: exp(x) = exp2(x · LOG2E)

_BUILT: dict = {}
_TUNING: list[dict] = []


def matmul_name(kind: str) -> str:
    """The recorded name of the Triton matmul for a kind of input ('float16', 'bfloat16', 'tf32')."""
    return f"triton.matmul.{SHORT[kind]}"


def attention_name(kind: str, causal: bool = False, warp_specialize: bool = False) -> str:
    """The recorded name of the Triton attention for 'fp16' or 'bf16' inputs."""
    return f"triton.attention.{kind}" + (".causal" if causal else "") + (".ws" if warp_specialize else "")


def unavailable_reason() -> str | None:
    """Why the Triton baselines cannot run in this process, or None when they can (imports neither)."""
    import lib

    if os.environ.get("BOOK_TRITON", "1") == "0":
        return "switched off for this run (BOOK_TRITON=0)"
    if not lib.ON_GPU:
        return "no CUDA GPU in this process (numba's simulator is on): Triton needs a GPU"
    for package in ("triton", "torch"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed (`pip install {package}` adds the Triton baselines)"
    return None


def available() -> bool:
    """True when Triton, torch and a CUDA GPU are there, so the baselines can run."""
    return unavailable_reason() is None


def _require():
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"the Triton baselines cannot run here: {reason}")


def tuning_log() -> list[dict]:
    """One entry per call of this process that autotuned: kernel, shape, seconds, the configuration chosen."""
    return [dict(entry) for entry in _TUNING]


def describe(config) -> str:
    """A triton.Config as one short line: its meta-parameters, stages and warps."""
    meta = ", ".join(f"{k}={v}" for k, v in config.kwargs.items())
    return f"{meta}, stages={config.num_stages}, warps={config.num_warps}"


def _tuning_key(tuner, args, kwargs) -> tuple:
    """The key under which `tuner` (a triton Autotuner) files a call's tuning, computed as it computes it."""
    named = {**dict(zip(tuner.arg_names, args)), **kwargs}
    named = {k: v for k, v in named.items() if k in tuner.arg_names}
    return tuple([named[k] for k in tuner.keys if k in named] +
                 [str(v.dtype) for v in named.values() if hasattr(v, "dtype")])


def _tuned_call(tuner, which: str, kernel: str, shape: str, args, kwargs, grid):
    """Launch the autotuned `tuner[grid](*args, **kwargs)`. A key it has not tuned yet is first compiled in
    parallel (:func:`precompile`), then tuned by Triton as usual; the seconds both took are logged."""
    import torch

    fresh = _tuning_key(tuner, args, kwargs) not in tuner.cache
    start = time.perf_counter()
    if fresh:
        try:
            precompile(tuner, which, args, kwargs, grid)
        except Exception as err:  # only speed is lost: Triton compiles each configuration itself
            _drop_pool()
            print(f"{kernel}: parallel compiling failed ({type(err).__name__}: {str(err)[:200]}); "
                  "Triton compiles one configuration at a time")
    tuner[grid](*args, **kwargs)
    if fresh:
        torch.cuda.synchronize()
        _TUNING.append({"kernel": kernel, "shape": shape, "autotune_s": round(time.perf_counter() - start, 2),
                        "config": describe(tuner.best_config)})


# --- compiling an autotuner's configurations in parallel ----------------------------------------------------
_POOL = None


def _drop_pool():
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=False, cancel_futures=True)
    _POOL = None


def _worker_count() -> int:
    return max(1, min(32, (os.cpu_count() or 2) - 1))


def precompile(tuner, which: str, args, kwargs, grid) -> int:
    """Compile every configuration `tuner` would try for this call in worker processes, into Triton's
    on-disk cache, so its own (serial) compiles become cache hits: compiling is most of the cost of an
    autotuning, and Triton compiles one configuration at a time (under the GIL). The configurations, their
    pruning and what Triton chooses are unchanged. Returns how many were compiled; a worker's failure is left
    for Triton to meet again (a configuration that cannot compile is skipped by its autotuner)."""
    global _POOL
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from triton import knobs
    from triton.runtime import driver

    specs = []

    def capture(**hook):     # called before each compile with its exact specialisation; True skips it
        specs.append(hook["compile"]["specialization_data"])
        return True

    named = dict(zip(tuner.arg_names, args))
    tuner.nargs = named      # what its early pruning reads
    try:
        configs = tuner.prune_configs(kwargs)
    finally:
        tuner.nargs = None
    before, knobs.runtime.jit_cache_hook = knobs.runtime.jit_cache_hook, capture
    try:
        for config in configs:
            if config.pre_hook is not None:
                config.pre_hook({**named, **kwargs, **config.all_kwargs()})
            tuner.fn.warmup(*args, grid=grid, **kwargs, **config.all_kwargs())
    finally:
        knobs.runtime.jit_cache_hook = before
    if not specs:
        return 0
    target = driver.active.get_current_target()
    target = (target.backend, target.arch, target.warp_size)
    if _POOL is None:
        _POOL = ProcessPoolExecutor(_worker_count(), mp_context=multiprocessing.get_context("spawn"))
    list(_POOL.map(_compile_in_worker, [which] * len(specs), specs, [target] * len(specs)))
    return len(specs)


def _compile_in_worker(which: str, spec: str, target: tuple) -> str:
    """In a worker process (no GPU needed): compile one specialisation of `which` ('matmul' or
    'attention') captured by :func:`precompile`; returns '' or the error."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        fn = (_matmul_kernel() if which == "matmul" else _attention_kernel(target[1] // 10)[0]).fn
        data = json.loads(spec)
        constexprs = {tuple(k): tl.dtype(v) if tl.dtype.is_dtype(v) else
                      tl.constexpr(v["constexpr"]) if isinstance(v, dict) and "constexpr" in v else v
                      for k, v in zip(data["constant_keys"], data["constant_vals"])}
        attrs = dict(zip(map(tuple, data["attrs_keys"]), data["attrs_vals"]))
        signature = {k: tuple(v) if isinstance(v, list) else v for k, v in data["signature"].items()}
        options = {k: tuple(v) if isinstance(v, list) else v for k, v in data["options"].items()}
        triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget(*target), options=options)
        return ""
    except Exception as err:  # reported by Triton itself when the autotuner meets the configuration
        return f"{type(err).__name__}: {str(err)[:200]}"


# --- tutorial 03: matrix multiplication ------------------------------------------------------------------
def _matmul_kernel():
    """The autotuned kernel of tutorial 03 (built once, on first use)."""
    if "matmul" in _BUILT:
        return _BUILT["matmul"]
    import triton
    import triton.language as tl

    configs = [triton.Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk,
                              "GROUP_SIZE_M": MATMUL_GROUP_SIZE_M}, num_stages=stages, num_warps=warps)
               for bm, bn, bk, stages, warps in MATMUL_CONFIGS]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      stride_am, stride_ak,
                      stride_bk, stride_bn,
                      stride_cm, stride_cn,
                      BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                      GROUP_SIZE_M: tl.constexpr, INPUT_PRECISION: tl.constexpr):
        """C (M × N, float32) = A (M × K) · B (K × N), any strides; tutorial 03's kernel."""
        # grouped order: GROUP_SIZE_M row tiles share the columns of B they read (L2 reuse)
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_pid_in_group = GROUP_SIZE_M * num_pid_n
        first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m

        # rows and columns past the edge wrap round (their results are masked at the store)
        offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            # the last tile of K is masked: zeros past the edge
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator, input_precision=INPUT_PRECISION)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk

        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, accumulator, mask=c_mask)   # float32 C (the tutorial: .to(tl.float16))

    _BUILT["matmul"] = matmul_kernel
    return matmul_kernel


def matmul(a, b, c, kind: str):
    """c (M × N, float32 torch tensor) = a (M × K) @ b (K × N) with tutorial 03's autotuned kernel; `kind` is
    'float16', 'bfloat16' (a, b of that type) or 'tf32' (float32 a, b through TF32 tensor cores). b may be a
    transposed view (kernels.hopper passes Bᵀ of its K-major B): the kernel takes any strides."""
    import torch
    import triton

    _require()
    if kind not in PRECISIONS:
        raise ValueError(f"kind must be one of {sorted(PRECISIONS)}, got {kind!r}")
    want = getattr(torch, PRECISIONS[kind])
    if a.dtype != want or b.dtype != want:
        raise ValueError(f"{kind} matmul needs {want} inputs, got {a.dtype} and {b.dtype}")
    (m, k), (kb, n) = a.shape, b.shape
    if k != kb:
        raise ValueError(f"a is {m} × {k} but b is {kb} × {n}: a's columns must match b's rows")
    if tuple(c.shape) != (m, n) or c.dtype != torch.float32:
        raise ValueError(f"c must be a float32 {m} × {n} tensor, got {c.dtype} {tuple(c.shape)}")
    kernel = _matmul_kernel()

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_SIZE_M"]) * triton.cdiv(n, meta["BLOCK_SIZE_N"]),)

    args = (a, b, c, m, n, k,
            a.stride(0), a.stride(1),
            b.stride(0), b.stride(1),
            c.stride(0), c.stride(1))
    meta = {"INPUT_PRECISION": "tf32" if kind == "tf32" else "ieee"}   # "ieee" is ignored for 16-bit inputs
    _tuned_call(kernel, "matmul", matmul_name(kind), f"{m}x{n}x{k}", args, meta, grid)


# --- tutorial 06: fused attention, forward ---------------------------------------------------------------
def _attention_kernel(major: int):
    """The autotuned forward kernel of tutorial 06 for a GPU of compute capability `major`.x (built once)."""
    if "attention" in _BUILT:
        return _BUILT["attention"]
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    hopper = major == 9

    def set_block_shapes(nargs):
        """Each configuration's TMA boxes, on the host descriptors (the warp-specialised path has none)."""
        if not isinstance(nargs["desc_q"], TensorDescriptor):
            return
        bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
        nargs["desc_q"].block_shape = [bm, d]
        nargs["desc_k"].block_shape = [bn, d]
        nargs["desc_v"].block_shape = [bn, d]
        nargs["desc_o"].block_shape = [bm, d]

    def keep(config):
        """The tutorial's filter: on Hopper, 8 warps only for tiles of at least 128 × 128."""
        bm, bn = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
        return not (hopper and bm * bn < 128 * 128 and config.num_warps == 8)

    def prune(configs, named_args, **kwargs):
        """The tutorial's pruning: no query tile longer than n; causal: BLOCK_M ≥ BLOCK_N (whole key tiles
        below the diagonal band)."""
        n, stage = kwargs["N_CTX"], kwargs["STAGE"]
        return [c for c in configs if c.kwargs["BLOCK_M"] <= n
                and (stage == 1 or c.kwargs["BLOCK_M"] >= c.kwargs["BLOCK_N"])]

    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w, pre_hook=set_block_shapes)
               for bm in ATTENTION_BLOCK_M for bn in ATTENTION_BLOCK_N for s in ATTENTION_STAGES
               for w in ATTENTION_WARPS]

    @triton.jit
    def _maybe_make_tensor_desc(desc_or_ptr, shape, strides, block_shape):
        if isinstance(desc_or_ptr, tl.tensor_descriptor):
            return desc_or_ptr
        else:
            return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)

    @triton.jit
    def _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype: tl.constexpr, start_m, qk_scale,
                        BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                        STAGE: tl.constexpr, offs_m, offs_n, N_CTX, warp_specialize: tl.constexpr):
        """The online softmax over one range of key tiles: all of them (STAGE 3), those below the diagonal
        band (1) or the band itself (2, masked)."""
        if STAGE == 1:
            lo, hi = 0, start_m * BLOCK_M
        elif STAGE == 2:
            lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
            lo = tl.multiple_of(lo, BLOCK_M)
        else:
            lo, hi = 0, N_CTX
        offset_kv = offset_y + lo
        for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=warp_specialize):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = desc_k.load([offset_kv, 0]).T
            qk = tl.dot(q, k)
            if STAGE == 2:
                mask = offs_m[:, None] >= (start_n + offs_n[None, :])
                qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
                m_ij = tl.maximum(m_i, tl.max(qk, 1))
                qk -= m_ij[:, None]
            else:
                m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                qk = qk * qk_scale - m_ij[:, None]
            p = tl.math.exp2(qk)
            alpha = tl.math.exp2(m_i - m_ij)     # rescales what was summed under the old maximum
            l_ij = tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = desc_v.load([offset_kv, 0])
            acc = tl.dot(p.to(dtype), v, acc)
            l_i = l_i * alpha + l_ij             # updated last: fewer registers live across the dots
            m_i = m_ij
            offset_kv += BLOCK_N
        return acc, l_i, m_i

    @triton.autotune(configs=list(filter(keep, configs)),
                     key=["N_CTX", "HEAD_DIM", "BF16", "STAGE", "warp_specialize"],
                     prune_configs_by={"early_config_prune": prune})
    @triton.jit
    def _attn_fwd(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BF16: tl.constexpr, STAGE: tl.constexpr, warp_specialize: tl.constexpr):
        """O = softmax(Q Kᵀ · sm_scale) V for BLOCK_M query rows of one (batch, head); M = the rows'
        log2-sum-exp (what the tutorial's backward pass reads)."""
        dtype = tl.bfloat16 if BF16 else tl.float16
        tl.static_assert(BLOCK_N <= HEAD_DIM)
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H

        y_dim = Z * H * N_CTX          # q, k, v, o as (Z·H·N_CTX) × HEAD_DIM row-major matrices
        desc_q = _maybe_make_tensor_desc(desc_q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                         block_shape=[BLOCK_M, HEAD_DIM])
        desc_k = _maybe_make_tensor_desc(desc_k, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                         block_shape=[BLOCK_N, HEAD_DIM])
        desc_v = _maybe_make_tensor_desc(desc_v, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                         block_shape=[BLOCK_N, HEAD_DIM])
        desc_o = _maybe_make_tensor_desc(desc_o, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                         block_shape=[BLOCK_M, HEAD_DIM])

        offset_y = off_z * (N_CTX * H) + off_h * N_CTX
        qo_offset_y = offset_y + start_m * BLOCK_M
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        qk_scale = sm_scale * 1.44269504   # exp2 instead of exp
        q = desc_q.load([qo_offset_y, 0])  # stays on chip throughout
        # STAGE 1: not causal, every key tile in one loop; STAGE 3: causal, the tiles below the band
        # (no mask), then the band (masked)
        if STAGE & 1:
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m,
                                            qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N, 4 - STAGE, offs_m, offs_n,
                                            N_CTX, warp_specialize)
        if STAGE & 2:
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m,
                                            qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N, 2, offs_m, offs_n,
                                            N_CTX, warp_specialize)
        m_i += tl.math.log2(l_i)
        acc = acc / l_i[:, None]
        tl.store(M + off_hz * N_CTX + offs_m, m_i)
        desc_o.store([qo_offset_y, 0], acc.to(dtype))

    _BUILT["attention"] = (_attn_fwd, TensorDescriptor, hopper)
    return _BUILT["attention"]


def attention(q, k, v, o, causal: bool, warp_specialize: bool = False, config=None):
    """o = softmax(q kᵀ / √d) v (causal: key j ≤ query i) with tutorial 06's autotuned forward kernel; q, k,
    v, o contiguous torch tensors of one 16-bit type, shape (batch, heads, n, d), d ∈ {16, ..., 256}.
    `warp_specialize`: the tutorial's automatic warp specialisation (device-side descriptors on Hopper).
    `config`: run with this triton.Config instead of autotuning (to check the one a tuning chose)."""
    import torch
    import triton

    _require()
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"attention needs float16 or bfloat16 q, k, v, got {q.dtype}")
    for name, x in (("k", k), ("v", v), ("o", o)):
        if x.shape != q.shape or x.dtype != q.dtype:
            raise ValueError(f"{name} must match q: {q.dtype} {tuple(q.shape)}, got {x.dtype} {tuple(x.shape)}")
    for name, x in (("q", q), ("k", k), ("v", v), ("o", o)):
        if x.ndim != 4 or not x.is_contiguous():
            raise ValueError(f"{name} must be a contiguous (batch, heads, n, d) tensor, got shape {tuple(x.shape)}")
    z, h, n, d = q.shape
    if d not in (16, 32, 64, 128, 256):
        raise ValueError(f"head dimension must be 16, 32, 64, 128 or 256, got {d}")
    if warp_specialize and causal:
        raise ValueError("tutorial 06 specialises warps on Hopper for the non-causal forward only "
                         "(Triton 3.6 does not compile the causal one)")
    kernel, tensor_descriptor, hopper = _attention_kernel(torch.cuda.get_device_capability()[0])
    lse = torch.empty((z, h, n), device=q.device, dtype=torch.float32)
    if hopper and warp_specialize:     # the tutorial: device-side descriptors, in memory Triton allocates
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
        descs = (q, k, v, o)
    else:
        rows, unit = z * h * n, [1, 1]   # each configuration's pre-hook sets the real block shapes
        descs = tuple(tensor_descriptor(x, shape=[rows, d], strides=[d, 1], block_shape=unit) for x in (q, k, v, o))
    args = (1.0 / math.sqrt(d), lse, z, h, *descs)
    meta = dict(N_CTX=n, HEAD_DIM=d, BF16=q.dtype == torch.bfloat16, STAGE=3 if causal else 1,
                warp_specialize=warp_specialize)

    def grid(m):
        return (triton.cdiv(n, m["BLOCK_M"]), z * h, 1)

    if config is None:
        name = attention_name(SHORT[str(q.dtype).removeprefix("torch.")], causal, warp_specialize)
        _tuned_call(kernel, "attention", name, f"{z * h}x{n}x{d}", args, meta, grid)
        return
    names = ["sm_scale", "M", "Z", "H", "desc_q", "desc_k", "desc_v", "desc_o"]
    if config.pre_hook is not None:
        config.pre_hook({**dict(zip(names, args)), **meta, **config.kwargs})
    kernel.fn[grid](*args, **meta, **config.all_kwargs())


def best_config(kernel: str = "attention"):
    """The configuration the last autotuned call of `kernel` ran with (tuned then, or from the cache)."""
    built = _BUILT.get(kernel)
    if built is None:
        raise RuntimeError(f"{kernel} has not run in this process yet")
    tuner = built[0] if isinstance(built, tuple) else built
    return tuner.best_config


# --- what a recording writes -------------------------------------------------------------------------------
TUNING_FIELDS = ["kernel", "shape", "status", "autotune_s", "config", "note"]


def write_tuning(path, env: dict, names: list[str]) -> Path:
    """Write <chapter>.triton.csv: one row per autotuning of the kernels `names` that this process did
    (seconds of compiling and benchmarking, the configuration chosen); where the baselines cannot run, one
    row per name saying why (status 'skipped')."""
    reason = unavailable_reason()
    if reason is not None:
        rows = [{"kernel": name, "shape": "", "status": "skipped", "autotune_s": "", "config": "", "note": reason}
                for name in names]
    else:
        rows = [{**entry, "status": "tuned", "note": ""} for entry in _TUNING if entry["kernel"] in names]
        rows += [{"kernel": name, "shape": "", "status": "not run", "autotune_s": "", "config": "",
                  "note": "Triton is there but this kernel did not run in this process"}
                 for name in names if not any(r["kernel"] == name for r in rows)]
    path = Path(path)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TUNING_FIELDS + list(env))
        w.writeheader()
        w.writerows({**row, **env} for row in rows)
    return path


def read_tuning(path):
    """<chapter>.triton.csv as a DataFrame, or None where it has not been recorded."""
    import pandas as pd

    path = Path(path)
    return pd.read_csv(path, keep_default_na=False) if path.exists() else None


def tuning_summary(path, chapter: str) -> str:
    """What a recorded <chapter>.triton.csv says, in lines that fit the page: the seconds autotuning added to
    the recording and the configuration chosen per kernel and shape, or why the baseline was skipped."""
    import textwrap

    df = read_tuning(path)
    if df is None:
        return textwrap.fill(f"Triton baseline: not recorded yet (`python -m tools.record {chapter}` on a GPU "
                             f"with Triton writes data/results/{Path(path).name})", 76, break_on_hyphens=False)
    skipped = df[df["status"] != "tuned"]
    tuned = df[df["status"] == "tuned"]
    lines = []
    if len(tuned):
        seconds = sum(float(x) for x in tuned["autotune_s"])
        lines.append(f"Triton: autotuning (compiling + benchmarking every configuration) added {seconds:.0f} s "
                     f"to the recording, for {len(tuned)} shapes; chosen:")
        lines += [f"  {r['kernel'].removeprefix('triton.')} {r['shape']}: "
                  + r["config"].replace("BLOCK_SIZE_", "").replace("BLOCK_", "").replace("GROUP_SIZE_M", "GROUP")
                  for _, r in tuned.iterrows()]
    for _, r in skipped.iterrows():
        lines.append(f"{r['kernel']} {r['status']}: {r['note']}")
    return "\n".join(textwrap.fill(line, 76, subsequent_indent="    ", break_on_hyphens=False) for line in lines)
