"""Tensor cores from numba: warp-wide ``mma.sync``, ``ldmatrix`` and ``cp.async``, each with a simulator twin.

numba-cuda has no API for these instructions, so on a GPU each function below is an ``@intrinsic`` that
emits the PTX instruction with ``builder.asm`` (as ``kernels/hardware.py`` lowers its 16-byte load). On
numba's simulator (``lib.mode.SIMULATOR``) the same names are Python functions that every lane calls; the lanes
meet in :func:`lib.runtime.simulator.warp_collective` and the last to arrive computes the whole warp's answer with
the fragment layouts below, so a kernel written for the tensor cores runs, and is graded, without a GPU.
``tests/test_mma.py`` runs the same kernels in both modes: on a GPU it checks the hardware against these
layouts.

The fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k8 / mma.m16n8k16"; ``g = lane >> 2`` is
the lane's group, ``t = lane & 3`` its place in the group) live in :data:`LAYOUTS` and nowhere else: the
simulator twin, the fragment widget (``lib/widgets/fragments.js``, tested against this table) and the
chapter all read them from here.

========================  ======  ====================  ==================================================
shape / operand           matrix  per lane              element i of lane (row, col)
========================  ======  ====================  ==================================================
m16n8k8 tf32, A (row)     16×8    a0..a3 (f32 values)   (g + 8·(i & 1), t + 4·(i >> 1))
m16n8k8 tf32, B (col)     8×8     b0, b1                (t + 4·i, g)
m16n8k16 f16/bf16, A      16×16   a0..a7 (4 × b16x2)    (g + 8·((i >> 1) & 1), 2t + (i & 1) + 8·(i >> 2))
m16n8k16 f16/bf16, B      16×8    b0..b3 (2 × b16x2)    (2t + (i & 1) + 8·(i >> 1), g)
C and D (both shapes)     16×8    c0..c3 (f32)          (g + 8·(i >> 1), 2t + (i & 1))
========================  ======  ====================  ==================================================

Precision. TF32 operands: the GPU function rounds each A and B value with ``cvt.rna.tf32.f32`` (to the
nearest TF32 value, 10 mantissa bits, ties away from zero) before the ``mma``. The PTX ISA does not
promise what the tensor core does with raw float32 bits (reports, e.g. triton-lang/triton#4574, find the
low 13 bits dropped: truncation, a bias towards zero), so this module does not leave it to chance. The twin rounds the same way (:func:`round_tf32`). FP16/BF16 operands are used as stored (two
16-bit values per 32-bit register, the lower-addressed element in the low half). Products are exact and
the sums accumulate in float32; the twin adds in float64 and rounds once, so twin and GPU agree to the
accumulation's rounding, not bit for bit (the tests use tolerances).

API (every lane of the warp calls each function with its own operands, the whole warp converged):

* ``a_element_tf32(lane, i)``, ``b_element_tf32``, ``a_element_b16``, ``b_element_b16``, ``c_element``:
  the layout functions of :data:`LAYOUTS` as device functions, for kernels that load fragments themselves.
* ``mma_m16n8k8_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)``: float32 in and out.
* ``mma_m16n8k8_tf32_prerounded(...)``: the same without the per-operand ``cvt.rna``, for operands that are
  TF32 values already (``to_tf32`` or :func:`round_tf32` applied beforehand, e.g. once per matrix instead of
  once per fragment). The twin refuses a value that is not TF32, naming the lane.
* ``to_tf32(x)``: float32 rounded to TF32 in a kernel (``cvt.rna.tf32.f32``; :func:`round_tf32` on the twin).
* ``mma_m16n8k16_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)`` and ``mma_m16n8k16_bf16(...)``: a* and b*
  are 32-bit registers holding two 16-bit values each (:func:`pack_b16x2`, or straight from ``ldmatrix``),
  c* and d* float32.
* ``ldmatrix_x1/x2/x4(smem, index)`` and ``ldmatrix_x1/x2/x4_trans``: lane 8·m + r gives the flat element
  index, in a 16-bit shared array, of row r of 8×8 matrix m (16-byte aligned); returns 1, 2 or 4 uint32
  registers; register m of lane l holds matrix m's (l >> 2, 2(l & 3)) and (l >> 2, 2(l & 3) + 1), or with
  ``_trans`` its (2(l & 3), l >> 2) and (2(l & 3) + 1, l >> 2).
* ``ldmatrix_x1_tf32/x2_tf32/x4_tf32(smem, index)``: the same instruction on a float32 shared array (index
  in float32 elements, row starts 16-byte aligned): an 8×8 matrix of 16-bit values is an 8×4 matrix of
  32-bit ones, so register m of lane l holds matrix m's float32 (l >> 2, l & 3) whole (both halves come
  from one word). That is the TF32 A fragment's pattern: with matrices at rows 0-7 / 8-15 × k 0-3 / 4-7,
  one x4 loads a0..a3 (``ldmatrix_element_tf32``). B's fragment is not reachable from a K × N row-major
  tile: ldmatrix hands out a row of 4 words along a lane's t, but B's k must follow t and its n follow g,
  so the rows would have to run along k (B stored N × K); ``.trans`` swaps 16-bit halves, not words.
* ``cp_async_ca4/ca8/ca16/cg16(dst_smem, dst_index, src, src_index)``: copy 4, 8 or 16 bytes from global
  to shared memory without passing through registers (``.cg`` bypasses L1 and exists only for 16 bytes);
  ``cp_async_commit()`` closes a group of copies; ``cp_async_wait_group(n)`` waits until at most n
  committed groups are still in flight (n a literal), ``cp_async_wait_all()`` for n = 0. Indices are flat
  element offsets into C-contiguous arrays. The twin reads the source at the call and writes the
  destination at the wait, so a kernel that reads the tile before waiting reads stale memory here too.
"""
from __future__ import annotations

import numpy as np

from numba import cuda

from lib.mode import SIMULATOR

WARP = 32
FULL_MASK = 0xFFFFFFFF


# --- the fragment layouts ---------------------------------------------------------------------------------
def _a_tf32(lane, i):
    g, t = lane >> 2, lane & 3
    return g + 8 * (i & 1), t + 4 * (i >> 1)


def _b_tf32(lane, i):
    g, t = lane >> 2, lane & 3
    return t + 4 * i, g


def _a_f16(lane, i):
    g, t = lane >> 2, lane & 3
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def _b_f16(lane, i):
    g, t = lane >> 2, lane & 3
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def _c(lane, i):
    g, t = lane >> 2, lane & 3
    return g + 8 * (i >> 1), 2 * t + (i & 1)


SHAPES = {"m16n8k8.tf32": (16, 8, 8), "m16n8k16.f16": (16, 8, 16), "m16n8k16.bf16": (16, 8, 16)}
# (shape, operand) -> (rows, cols, elements per lane, element(lane, i) -> (row, col))
LAYOUTS = {
    ("m16n8k8.tf32", "A"): (16, 8, 4, _a_tf32),
    ("m16n8k8.tf32", "B"): (8, 8, 2, _b_tf32),
    ("m16n8k8.tf32", "C"): (16, 8, 4, _c),
    ("m16n8k16.f16", "A"): (16, 16, 8, _a_f16),
    ("m16n8k16.f16", "B"): (16, 8, 4, _b_f16),
    ("m16n8k16.f16", "C"): (16, 8, 4, _c),
}
for _op in "ABC":  # BF16 fragments are laid out exactly as FP16's
    LAYOUTS[("m16n8k16.bf16", _op)] = LAYOUTS[("m16n8k16.f16", _op)]


# The same functions for kernels: (row, col) of element i of `lane`'s fragment.
a_element_tf32 = cuda.jit(device=True)(_a_tf32)
b_element_tf32 = cuda.jit(device=True)(_b_tf32)
a_element_b16 = cuda.jit(device=True)(_a_f16)
b_element_b16 = cuda.jit(device=True)(_b_f16)
c_element = cuda.jit(device=True)(_c)


def _layout(shape: str, operand: str):
    try:
        return LAYOUTS[(shape, operand)]
    except KeyError:
        raise ValueError(f"no fragment layout for shape {shape!r}, operand {operand!r}: shapes are "
                         f"{sorted(SHAPES)}, operands 'A', 'B', 'C'") from None


def lane_elements(shape: str, operand: str, lane: int) -> list[tuple[int, int]]:
    """(row, col) of each element lane `lane` holds, in register order."""
    if not 0 <= lane < WARP:
        raise ValueError(f"lane must be in 0..31, got {lane}")
    _, _, per_lane, element = _layout(shape, operand)
    return [element(lane, i) for i in range(per_lane)]


def owners(shape: str, operand: str) -> np.ndarray:
    """owners[row, col] = (lane, i): which lane holds each element of the operand, in which slot."""
    rows, cols, per_lane, element = _layout(shape, operand)
    out = np.full((rows, cols, 2), -1, dtype=np.int64)
    for lane in range(WARP):
        for i in range(per_lane):
            out[element(lane, i)] = lane, i
    return out


def ldmatrix_element_tf32(lane: int, register: int) -> tuple[int, int, int]:
    """(matrix, row, col) of the float32 value ldmatrix_x*_tf32 puts in `register`: matrices are 8 × 4 words."""
    return register, lane >> 2, lane & 3


def ldmatrix_element(lane: int, register: int, half: int, trans: bool = False) -> tuple[int, int, int]:
    """(matrix, row, col) of the 16-bit value ldmatrix puts in `half` (0 low, 1 high) of `register`."""
    g, t = lane >> 2, lane & 3
    row, col = g, 2 * t + half
    return (register, col, row) if trans else (register, row, col)


# --- rounding and bit patterns (numpy; the twin's arithmetic) ------------------------------------------
def round_tf32(x) -> np.ndarray:
    """float32 rounded to TF32 (10 mantissa bits) as cvt.rna.tf32.f32 does: to nearest, ties away from
    zero; infinities and NaNs pass unchanged. Returns float32."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    sign, magnitude = bits & 0x80000000, bits & 0x7FFFFFFF
    rounded = sign | ((magnitude + np.uint32(0x1000)) & np.uint32(0xFFFFE000))
    return np.where(finite, rounded, bits).astype(np.uint32).view(np.float32)


def bf16_bits(x) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even (what torch does)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def b16_values(bits, kind: str) -> np.ndarray:
    """16-bit patterns (uint16 or int16) -> float64 values of `kind` 'f16' or 'bf16'."""
    bits = np.asarray(bits)
    if bits.dtype.itemsize != 2 or bits.dtype.kind not in "iu":
        raise ValueError(f"16-bit patterns must be int16 or uint16, not {bits.dtype}")
    bits = bits.view(np.uint16)
    if kind == "f16":
        return bits.view(np.float16).astype(np.float64)
    if kind == "bf16":
        return bf16_values(bits).astype(np.float64)
    raise ValueError(f"kind must be 'f16' or 'bf16', got {kind!r}")


def _pack_b16x2(lo, hi):
    """Two 16-bit patterns -> one 32-bit register value, `lo` in the low half (the lower address)."""
    return (int(lo) & 0xFFFF) | ((int(hi) & 0xFFFF) << 16)  # int(): a uint16 shifted by 16 would be 0


pack_b16x2 = cuda.jit(device=True)(_pack_b16x2)  # the same, callable in kernels


# --- the simulator twins ----------------------------------------------------------------------------------
def _all_lanes(op: str, ops: dict):
    if len(ops) != WARP:
        missing = sorted(set(range(WARP)) - set(ops))
        raise simulator.SimulatorError(
            f"{op} is a warp-wide instruction: all 32 lanes must execute it together; lanes {missing} did not "
            "(they exited or took another branch)")


def _gather(shape: str, operand: str, ops: dict, first: int, decode):
    rows, cols, per_lane, element = _layout(shape, operand)
    m = np.empty((rows, cols), dtype=np.float64)
    for lane, values in ops.items():
        for i in range(per_lane):
            m[element(lane, i)] = decode(values[first + i])
    return m


def _scatter_c(shape: str, d: np.ndarray) -> dict:
    d32 = d.astype(np.float32)
    return {lane: tuple(d32[rc] for rc in lane_elements(shape, "C", lane)) for lane in range(WARP)}


def _mma_twin(shape: str):
    op = f"mma.sync.{shape}"
    kind = shape.split(".")[1]

    def compute(ops):
        _all_lanes(op, ops)
        if kind == "tf32":  # a0..a3, b0, b1 are float32 values, rounded as cvt.rna.tf32.f32 does
            elements = {lane: [float(round_tf32(np.float32(x))) for x in v[:6]] for lane, v in ops.items()}
        else:  # a0..a3, b0, b1 are registers of two 16-bit values: a0..a7, b0..b3 as the PTX ISA counts
            elements = {lane: _unpack(v[:6], kind) for lane, v in ops.items()}
        n_a = LAYOUTS[(shape, "A")][2]
        a = _gather(shape, "A", elements, 0, float)
        b = _gather(shape, "B", elements, n_a, float)
        c = _gather(shape, "C", {lane: v[6:] for lane, v in ops.items()}, 0, lambda x: float(np.float32(x)))
        return _scatter_c(shape, a @ b + c)

    def twin(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        return simulator.warp_collective(op, FULL_MASK, (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3), compute)

    twin.__name__ = "mma_" + shape.replace(".", "_")
    return twin


def _mma_tf32_prerounded_twin():
    op = "mma.sync.m16n8k8.tf32 (operands pre-rounded)"
    exact = _mma_twin("m16n8k8.tf32")

    def twin(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        for name, x in zip(("a0", "a1", "a2", "a3", "b0", "b1"), (a0, a1, a2, a3, b0, b1)):
            x = np.float32(x)
            if round_tf32(x).view(np.uint32) != x.view(np.uint32):
                t = simulator.current_thread()
                raise ValueError(f"{op}: {name} = {float(x)!r} of lane {t.thread_id % WARP} (block "
                                 f"{tuple(t.blockIdx)}, thread {tuple(t.threadIdx)}) is not a TF32 value: round "
                                 "it with to_tf32 first, or use mma_m16n8k8_tf32")
        return exact(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

    twin.__name__ = "mma_m16n8k8_tf32_prerounded"
    return twin


def _to_tf32(x):
    return np.float32(round_tf32(np.float32(x)))


def _unpack(registers, kind: str) -> list[float]:
    out = []
    for r in registers:
        r = int(r) & 0xFFFFFFFF
        out += list(b16_values(np.array([r & 0xFFFF, r >> 16], dtype=np.uint16), kind))
    return out


def _flat_host(array, where: str):
    """The numpy array behind a simulator array (global or shared), flattened (C order) as a view."""
    item = getattr(array, "_item", array)
    host = getattr(item, "_ary", item)
    host = np.asarray(host)
    if not host.flags.c_contiguous:
        raise ValueError(f"{where}: the array must be C-contiguous (its index is a flat element offset)")
    return host.reshape(-1)


def _ldmatrix_rows(op: str, ops, count: int, itemsize: int) -> list:
    """The `count` 8-row matrices an ldmatrix reads: lane 8·m + r gives row r of matrix m, 16 bytes of
    `itemsize`-byte elements (in the shared array's own dtype). Each row address is checked (element size,
    16-byte alignment, inside the array)."""
    width, bits = 16 // itemsize, 8 * itemsize
    matrices = []
    for m in range(count):
        rows = []
        for r in range(8):
            smem, index = ops[8 * m + r]
            flat = _flat_host(smem, op)
            if flat.dtype.itemsize != itemsize:
                raise ValueError(f"{op}: the shared array must hold {bits}-bit elements, not {flat.dtype}")
            if (flat.ctypes.data + itemsize * int(index)) % 16:
                raise ValueError(f"{op}: lane {8 * m + r} gave row address index {index}, not 16-byte aligned "
                                 f"(each row of {width} {bits}-bit values must start on a 16-byte boundary)")
            if not 0 <= index <= flat.size - width:
                raise IndexError(f"{op}: lane {8 * m + r}'s row [{index}, {index + width}) is outside the "
                                 f"shared array of {flat.size} elements")
            # element by element through the array itself, so the simulator's debugger sees the reads
            shape = np.shape(smem)
            values = [smem[np.unravel_index(index + k, shape)] for k in range(width)]
            rows.append(np.array(values, dtype=flat.dtype))
        matrices.append(np.stack(rows))
    return matrices


def _ldmatrix_twin(count: int, trans: bool):
    op = f"ldmatrix.m8n8.x{count}{'.trans' if trans else ''}"

    def compute(ops):
        _all_lanes(op, ops)
        matrices = [m.view(np.uint16) for m in _ldmatrix_rows(op, ops, count, itemsize=2)]
        out = {}
        for lane in range(WARP):
            regs = []
            for reg in range(count):
                halves = [matrices[reg][ldmatrix_element(lane, reg, h, trans)[1:]] for h in (0, 1)]
                regs.append(np.uint32(_pack_b16x2(int(halves[0]), int(halves[1]))))
            out[lane] = regs[0] if count == 1 else tuple(regs)
        return out

    def twin(smem, index):
        return simulator.warp_collective(op, FULL_MASK, (smem, int(index)), compute)

    twin.__name__ = f"ldmatrix_x{count}{'_trans' if trans else ''}"
    return twin


def _ldmatrix_tf32_twin(count: int):
    op = f"ldmatrix.m8n8.x{count} (float32 words)"

    def compute(ops):
        _all_lanes(op, ops)
        matrices = [m.astype(np.float32) for m in _ldmatrix_rows(op, ops, count, itemsize=4)]
        out = {}
        for lane in range(WARP):
            regs = tuple(matrices[reg][ldmatrix_element_tf32(lane, reg)[1:]] for reg in range(count))
            out[lane] = regs[0] if count == 1 else regs
        return out

    def twin(smem, index):
        return simulator.warp_collective(op, FULL_MASK, (smem, int(index)), compute)

    twin.__name__ = f"ldmatrix_x{count}_tf32"
    return twin


def _pending_copies():
    """The calling simulated thread's cp.async state: (uncommitted copies, committed groups)."""
    t = simulator.current_thread()
    if t is None:
        raise simulator.SimulatorError("cp.async can only be called inside a kernel")
    state = t.__dict__.setdefault("_cp_async", ([], []))
    return state


def _cp_async_twin(nbytes: int, cache: str):
    name = f"cp_async_{cache}{nbytes}"

    def twin(dst, dst_index, src, src_index):
        d, s = _flat_host(dst, name), _flat_host(src, name)
        if d.dtype.itemsize != s.dtype.itemsize or nbytes % d.dtype.itemsize:
            raise ValueError(f"{name}: copies {nbytes} bytes between arrays of {d.dtype} and {s.dtype}: the "
                             "element sizes must match and divide the copy size")
        n = nbytes // d.dtype.itemsize
        for label, flat, index in (("dst", d, dst_index), ("src", s, src_index)):
            if (flat.ctypes.data + int(index) * flat.dtype.itemsize) % nbytes:
                raise ValueError(f"{name}: {label} element {index} is not {nbytes}-byte aligned")
            if not 0 <= index <= flat.size - n:
                raise IndexError(f"{name}: {label} elements [{index}, {index + n}) are outside the array of "
                                 f"{flat.size}")
        uncommitted, _ = _pending_copies()
        uncommitted.append((dst, int(dst_index), s[int(src_index):int(src_index) + n].copy(), n))

    twin.__name__ = name
    return twin


def _cp_async_commit():
    uncommitted, groups = _pending_copies()
    groups.append(list(uncommitted))
    uncommitted.clear()


def _cp_async_wait_group(n):
    _, groups = _pending_copies()
    while len(groups) > int(n):
        for dst, di, values, count in groups.pop(0):
            for k in range(count):  # element by element through the array itself: the debugger sees writes
                dst[np.unravel_index(di + k, dst.shape)] = values[k]


def _cp_async_wait_all():
    _cp_async_wait_group(0)


# --- the GPU intrinsics -----------------------------------------------------------------------------------
def _gpu_intrinsics():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)

    def as_u32(context, builder, value, ty):
        if isinstance(ty, types.Integer):
            return context.cast(builder, value, ty, types.uint32)
        raise TypeError(f"a 32-bit register operand must be an integer, not {ty}")

    def element_address(context, builder, array_type, array, index, index_type):
        data = context.make_array(array_type)(context, builder, value=array).data
        index = context.cast(builder, index, index_type, types.intp)
        return builder.ptrtoint(builder.gep(data, [index]), i64)

    def shared_address(context, builder, array_type, array, index, index_type):
        """The 32-bit shared-window address of array[index]: the array's base is converted once (a pure
        asm that LLVM hoists out of loops) and the offset is 32-bit arithmetic, so a kernel's address
        maths does not run in 64-bit generic addresses."""
        data = context.make_array(array_type)(context, builder, value=array).data
        base = builder.asm(ir.FunctionType(i32, [i64]), "{ .reg .u64 ga; cvta.to.shared.u64 ga, $1; "
                           "cvt.u32.u64 $0, ga; }", "=r,l", [builder.ptrtoint(data, i64)], False, "smem_base")
        index = builder.trunc(context.cast(builder, index, index_type, types.intp), i32)
        itemsize = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
        return builder.add(base, builder.mul(index, ir.Constant(i32, itemsize)))

    def mma(shape: str, ptx: str, n_a: int, n_b: int, prerounded: bool = False):
        """One mma.sync shape; for TF32 each A/B operand is rounded with cvt.rna, or with `prerounded` passed
        as its bits (the operands are TF32 values already)."""
        @intrinsic
        def mma_intrinsic(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            operands = (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
            ab_ok = all(isinstance(t, types.Float if shape.endswith("tf32") else types.Integer)
                        for t in operands[:n_a + n_b])
            if not (ab_ok and all(isinstance(t, (types.Float, types.Integer)) for t in operands[n_a + n_b:])):
                return None

            def codegen(context, builder, sig, args):
                args = list(args)
                if shape.endswith("tf32") and prerounded:
                    ab = [builder.bitcast(context.cast(builder, v, t, types.float32), i32)
                          for v, t in zip(args[:n_a + n_b], sig.args)]
                elif shape.endswith("tf32"):
                    cvt = ir.FunctionType(i32, [f32])
                    ab = [builder.asm(cvt, "cvt.rna.tf32.f32 $0, $1;", "=r,f",
                                      [context.cast(builder, v, t, types.float32)], False, "tf32")
                          for v, t in zip(args[:n_a + n_b], sig.args)]
                else:
                    ab = [as_u32(context, builder, v, t) for v, t in zip(args[:n_a + n_b], sig.args)]
                c = [context.cast(builder, v, t, types.float32)
                     for v, t in zip(args[n_a + n_b:], sig.args[n_a + n_b:])]
                fnty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [i32] * (n_a + n_b) + [f32] * 4)
                regs = lambda first, n: ",".join(f"${k}" for k in range(first, first + n))  # noqa: E731
                text = (f"{ptx} {{{regs(0, 4)}}}, {{{regs(4, n_a)}}}, {{{regs(4 + n_a, n_b)}}}, "
                        f"{{{regs(4 + n_a + n_b, 4)}}};")
                constraints = ",".join(["=f"] * 4 + ["r"] * (n_a + n_b) + ["f"] * 4)
                d = builder.asm(fnty, text, constraints, ab + c, False, "mma")
                return context.make_tuple(builder, sig.return_type,
                                          [builder.extract_value(d, k) for k in range(4)])
            return types.UniTuple(types.float32, 4)(*operands), codegen
        return mma_intrinsic

    def ldmatrix(count: int, trans: bool, tf32: bool = False):
        """ldmatrix on a 16-bit shared array (uint32 registers), or with `tf32` on a float32 one: the same
        instruction, its 32-bit registers reinterpreted as float32 values."""
        ptx = f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
        dtypes = (types.float32,) if tf32 else (types.uint16, types.int16, types.float16)
        element = types.float32 if tf32 else types.uint32

        @intrinsic
        def ldmatrix_intrinsic(typingctx, smem, index):
            if not (isinstance(smem, types.Array) and smem.dtype in dtypes and isinstance(index, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                address = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
                outs = ",".join(f"${k}" for k in range(count))
                text = f"{ptx} {{{outs}}}, [${count}];"
                ret = i32 if count == 1 else ir.LiteralStructType([i32] * count)
                value = builder.asm(ir.FunctionType(ret, [i32]), text,
                                    ",".join(["=r"] * count + ["r", "~{memory}"]), [address], True, "ldmatrix")
                words = [value] if count == 1 else [builder.extract_value(value, k) for k in range(count)]
                if tf32:
                    words = [builder.bitcast(w, f32) for w in words]
                return words[0] if count == 1 else context.make_tuple(builder, sig.return_type, words)
            ret = element if count == 1 else types.UniTuple(element, count)
            return ret(smem, index), codegen
        return ldmatrix_intrinsic

    @intrinsic
    def to_tf32(typingctx, x):
        if not isinstance(x, types.Float):
            return None

        def codegen(context, builder, sig, args):
            bits = builder.asm(ir.FunctionType(i32, [f32]), "cvt.rna.tf32.f32 $0, $1;", "=r,f",
                               [context.cast(builder, args[0], sig.args[0], types.float32)], False, "tf32")
            return builder.bitcast(bits, f32)
        return types.float32(x), codegen

    def cp_async(nbytes: int, cache: str):
        ptx = f"cp.async.{cache}.shared.global [$0], [$1], {nbytes};"

        @intrinsic
        def cp_async_intrinsic(typingctx, dst, dst_index, src, src_index):
            if not (isinstance(dst, types.Array) and isinstance(src, types.Array)
                    and isinstance(dst_index, types.Integer) and isinstance(src_index, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                d = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
                s = element_address(context, builder, sig.args[2], args[2], args[3], sig.args[3])
                builder.asm(ir.FunctionType(ir.VoidType(), [i32, i64]), ptx, "r,l,~{memory}", [d, s], True)
                return context.get_dummy_value()
            return types.void(dst, dst_index, src, src_index), codegen
        return cp_async_intrinsic

    @intrinsic
    def cp_async_commit(typingctx):
        def codegen(context, builder, sig, args):
            builder.asm(ir.FunctionType(ir.VoidType(), []), "cp.async.commit_group;", "~{memory}", [], True)
            return context.get_dummy_value()
        return types.void(), codegen

    @intrinsic
    def cp_async_wait_group(typingctx, n):
        if not isinstance(n, types.IntegerLiteral):
            return None  # numba retries with the literal value; a run-time n cannot be an immediate

        def codegen(context, builder, sig, args):
            builder.asm(ir.FunctionType(ir.VoidType(), []), f"cp.async.wait_group {n.literal_value};",
                        "~{memory}", [], True)
            return context.get_dummy_value()
        return types.void(n), codegen

    @intrinsic
    def cp_async_wait_all(typingctx):
        def codegen(context, builder, sig, args):
            builder.asm(ir.FunctionType(ir.VoidType(), []), "cp.async.wait_all;", "~{memory}", [], True)
            return context.get_dummy_value()
        return types.void(), codegen

    tf32_ptx = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
    return dict(
        mma_m16n8k8_tf32=mma("m16n8k8.tf32", tf32_ptx, 4, 2),
        mma_m16n8k8_tf32_prerounded=mma("m16n8k8.tf32", tf32_ptx, 4, 2, prerounded=True),
        to_tf32=to_tf32,
        mma_m16n8k16_f16=mma("m16n8k16.f16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 4, 2),
        mma_m16n8k16_bf16=mma("m16n8k16.bf16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 4, 2),
        ldmatrix_x1=ldmatrix(1, False), ldmatrix_x2=ldmatrix(2, False), ldmatrix_x4=ldmatrix(4, False),
        ldmatrix_x1_trans=ldmatrix(1, True), ldmatrix_x2_trans=ldmatrix(2, True),
        ldmatrix_x4_trans=ldmatrix(4, True),
        ldmatrix_x1_tf32=ldmatrix(1, False, tf32=True), ldmatrix_x2_tf32=ldmatrix(2, False, tf32=True),
        ldmatrix_x4_tf32=ldmatrix(4, False, tf32=True),
        cp_async_ca4=cp_async(4, "ca"), cp_async_ca8=cp_async(8, "ca"), cp_async_ca16=cp_async(16, "ca"),
        cp_async_cg16=cp_async(16, "cg"), cp_async_commit=cp_async_commit,
        cp_async_wait_group=cp_async_wait_group, cp_async_wait_all=cp_async_wait_all)


def _simulator_twins():
    return dict(
        mma_m16n8k8_tf32=_mma_twin("m16n8k8.tf32"), mma_m16n8k16_f16=_mma_twin("m16n8k16.f16"),
        mma_m16n8k8_tf32_prerounded=_mma_tf32_prerounded_twin(), to_tf32=_to_tf32,
        mma_m16n8k16_bf16=_mma_twin("m16n8k16.bf16"),
        ldmatrix_x1=_ldmatrix_twin(1, False), ldmatrix_x2=_ldmatrix_twin(2, False),
        ldmatrix_x4=_ldmatrix_twin(4, False), ldmatrix_x1_trans=_ldmatrix_twin(1, True),
        ldmatrix_x2_trans=_ldmatrix_twin(2, True), ldmatrix_x4_trans=_ldmatrix_twin(4, True),
        ldmatrix_x1_tf32=_ldmatrix_tf32_twin(1), ldmatrix_x2_tf32=_ldmatrix_tf32_twin(2),
        ldmatrix_x4_tf32=_ldmatrix_tf32_twin(4),
        cp_async_ca4=_cp_async_twin(4, "ca"), cp_async_ca8=_cp_async_twin(8, "ca"),
        cp_async_ca16=_cp_async_twin(16, "ca"), cp_async_cg16=_cp_async_twin(16, "cg"),
        cp_async_commit=_cp_async_commit, cp_async_wait_group=_cp_async_wait_group,
        cp_async_wait_all=_cp_async_wait_all)


if SIMULATOR:
    from lib.runtime import simulator  # warp_collective, current_thread

_FUNCTIONS = _simulator_twins() if SIMULATOR else _gpu_intrinsics()
globals().update(_FUNCTIONS)
__all__ = sorted(_FUNCTIONS) + ["a_element_tf32", "b_element_tf32", "a_element_b16", "b_element_b16",
                                "c_element", "LAYOUTS", "SHAPES", "lane_elements", "owners", "ldmatrix_element",
                                "ldmatrix_element_tf32",
                                "round_tf32", "bf16_bits", "bf16_values", "b16_values", "pack_b16x2"]
