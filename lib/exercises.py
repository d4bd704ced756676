"""Every graded exercise of the book, in one place.

An exercise is a reference (float64 numpy), an input generator, the output's shape, a tolerance, and the
sizes to check on the simulator and on a GPU. Student functions use destination-passing style:
``fn(*inputs, out)`` receives numba device arrays (float32, C-contiguous) and launches kernels.
Adding an exercise = one :class:`Exercise` in :data:`EXERCISES`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .check import SAFETY, U32, k_scaled_rtol, prefix_sum_rounding


@dataclass(frozen=True)
class Tolerance:
    """|actual - expected| <= rtol * scale + atol, element by element; `note` says where the bound comes
    from (shown in the report)."""
    rtol: float | np.ndarray
    atol: float | np.ndarray = 0.0
    scale: np.ndarray | None = None  # None: |expected|
    note: str = ""

    def describe(self, expected=None) -> str:
        """The bound in a few words, with its largest value when the reference is given."""
        parts = [self.note] if self.note else []
        if expected is not None:
            scale = np.abs(np.asarray(expected, np.float64)) if self.scale is None else self.scale
            with np.errstate(invalid="ignore"):
                bound = np.broadcast_to(np.asarray(self.rtol) * scale + self.atol, np.shape(expected))
            finite = bound[np.isfinite(bound)]
            if finite.size:
                parts.append(f"|error| <= {float(finite.max()):.2g} at most")
        elif np.ndim(self.rtol) == 0 and np.ndim(self.atol) == 0:
            parts.append(f"rtol {float(self.rtol):.2g}, atol {float(self.atol):.2g}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Variant:
    """A known-wrong way to solve an exercise, so the grader can name the mistake when a student's output
    equals what this mistake produces."""
    name: str            # e.g. "no carry between blocks"
    mistake: str         # the sentence shown to the student
    model: Callable      # model(*inputs, launches, fill=nan) -> np.ndarray | None: the output this mistake
                         # produces on these inputs (None: cannot say for this launch); launches: the
                         # grader's launch dicts; fill: what out held before (NaN, then the grader's
                         # SENTINEL on a second run); a model without `fill` is asked for NaN only
    kernel: Callable     # a student-style wrong function fn(*inputs, out), for the tests


def variants(exercise_id: str) -> list[Variant]:
    """The known-wrong variants of an exercise (lib.variants.VARIANTS, imported lazily; none if absent)."""
    try:
        from .variants import VARIANTS
    except ImportError:
        return []
    return list(VARIANTS.get(exercise_id, []))


@dataclass(frozen=True)
class Exercise:
    id: str
    signature: str                                  # shown in reports, e.g. "vector_add(a, b, out)"
    task: str                                       # one sentence
    make_inputs: Callable[[tuple, np.random.Generator], tuple]
    out_shape: Callable[..., tuple]                 # from the inputs
    reference: Callable[..., np.ndarray]            # float64
    tolerance: Callable[..., Tolerance]             # tolerance(*inputs, expected, launch=None): launch is
                                                    # {"threads", "block_threads"} of the student's widest
                                                    # launch (the error model's structure), None if unknown
    sim_cases: tuple                                # size parameters, small (the planner grows them)
    gpu_cases: tuple
    grow: Callable[[tuple, float], tuple] = None    # a larger size: the parallel dimensions times a factor
    time_limit_s: float = 60.0

    @property
    def names(self) -> list[str]:
        """The argument names of the signature, e.g. ['a', 'b', 'out']."""
        return self.signature[self.signature.index("(") + 1:-1].split(", ")


def _ragged(value: float) -> int:
    """An odd size, 1 more than a multiple of 4 (so no power-of-two launch fits it exactly)."""
    return int(value) // 4 * 4 + 1


def _grow_dims(*dims):
    """grow(size, factor) that multiplies the dimensions at positions `dims` (the parallel ones)."""
    def grow(size, factor):
        return tuple(_ragged(s * factor) if i in dims else s for i, s in enumerate(size))
    return grow


def _uniform(rng, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def _f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


# --- vector_add -----------------------------------------------------------------------------------
def _vector_add_reference(a, b):
    a, b = _f64(a, b)
    return a + b


# --- transpose ------------------------------------------------------------------------------------
def _transpose_reference(a):
    return np.asarray(a, dtype=np.float64).T.copy()


# --- matmul -----------------------------------------------------------------------------------------
def _grow_matmul(size, factor):
    """M and N times the factor; K shrinks (to no less than 17, past one 16-wide tile) so that a larger
    output stays affordable on the simulator: the fixed sizes already check long K loops."""
    m, n, k = size
    return _ragged(m * factor), _ragged(n * factor), max(min(k, 17), int(k / factor))


def _matmul_inputs(size, rng):
    m, n, k = size
    return _uniform(rng, (m, k)), _uniform(rng, (k, n))


def _matmul_tolerance(a, b, expected, launch=None):
    a, b = _f64(a, b)
    return Tolerance(rtol=k_scaled_rtol(a.shape[1]), scale=np.abs(a) @ np.abs(b),
                     note=f"K-scaled: dot products of {a.shape[1]} terms, relative to |a| @ |b|")


def _one_rounding(*inputs_and_expected, launch=None):
    """Each output is one float32 operation (or a copy): off by at most one rounding, U32 * |expected|."""
    return Tolerance(rtol=2 * U32, note="one float32 rounding (2^-23 relative)")


def _exact(*inputs_and_expected, launch=None):
    return Tolerance(rtol=0.0, note="exact (no rounding is involved)")


def _per_chunk(n: int, launch, per: str) -> int:
    """Elements added one after another in the error model (1 when the launch is unknown: the loosest model,
    one sequential pass over every element). per="thread" (a reduction): each thread's share of n, then the
    partials in any order, atomics included. per="block" (a scan): each block's tile, block threads x each
    thread's share, scanned as a tree, then the carries passed from tile to tile."""
    if not launch:
        return 1
    share = -(-n // int(launch["threads"]))
    return share if per == "thread" else share * int(launch["block_threads"])


# --- reductions -----------------------------------------------------------------------------------
def _reduce_inputs(size, rng):
    """Inputs of reduce_max. Odd sizes are all negative, so a wrong identity (0 for max) shows up. The maximum
    sits in the last sixteenth when n % 4 == 1 (the sizes the planner grows to), so a kernel that drops the
    tail's blocks or partials misses it, and in the first sixteenth otherwise, so a kernel where the last
    block's result wins misses it."""
    (n,) = size
    x = _uniform(rng, (n,))
    if n % 2:
        x = x - np.float32(2.0)
    if n >= 16:
        where = rng.integers(n - n // 16, n) if n % 4 == 1 else rng.integers(0, n // 16)
        x[where] = x.max() + np.float32(0.5)
    return (x,)


def _sequential_rounding(partials, axis):
    """sqrt(Σ s²) of a sum added in order along `axis` (its running partials given), plus ceil(log2 K) + 1
    additions at the result's own magnitude, as a tree of K terms may make (lib.check.prefix_sum_rounding)."""
    k = partials.shape[axis]
    result = np.take(partials, -1, axis=axis)
    depth = int(np.ceil(np.log2(max(k, 1)))) + 1
    return np.sqrt((partials * partials).sum(axis=axis) + depth * result * result)


def _column_sums_tolerance(x, expected, launch=None):
    """Each column summed down its rows one after another (a tree is more accurate)."""
    partials = np.cumsum(np.asarray(x, np.float64), axis=0)
    bound = SAFETY * U32 * _sequential_rounding(partials, axis=0)
    return Tolerance(rtol=1.0, scale=bound,  # an absolute bound, as rtol x scale for callers that read those
                     note=f"{SAFETY:g}·u·sqrt(Σ partial²), columns of {x.shape[0]} added in order")


def _sum_tolerance(x, expected, launch=None):
    per = _per_chunk(x.size, launch, "thread")
    bound = SAFETY * U32 * prefix_sum_rounding(x, per)[-1:]
    return Tolerance(rtol=1.0, scale=bound,  # an absolute bound, as rtol x scale for callers that read those
                     note=f"{SAFETY:g}·u·sqrt(Σ partial²): {per} element(s) per thread, then the partials in order")


def _scan_tolerance(x, expected, launch=None):
    per = _per_chunk(x.size, launch, "block")
    bound = SAFETY * U32 * prefix_sum_rounding(x, per)
    return Tolerance(rtol=1.0, scale=bound,  # an absolute bound, as rtol x scale for callers that read those
                     note=f"{SAFETY:g}·u·sqrt(Σ partial²) per output: tiles of {per} element(s), "
                          "then the carries from tile to tile")


def _exclusive_scan(x):
    x = np.asarray(x, dtype=np.float64)
    return np.concatenate([[0.0], np.cumsum(x)[:-1]])


def _compact_positive(x):
    """The elements of x that are > 0, in their order, then zeros: stream compaction."""
    x = np.asarray(x, dtype=np.float64)
    kept = x[x > 0]
    return np.concatenate([kept, np.zeros(x.size - kept.size)])


WARP_SIZE = 32


def _warp_chunks(x):
    """x (float64) padded with zeros to whole warps, one row per 32-element chunk."""
    x = np.asarray(x, dtype=np.float64)
    return np.concatenate([x, np.zeros(-x.size % WARP_SIZE)]).reshape(-1, WARP_SIZE)


def _warp_sums_tolerance(x, expected, launch=None):
    partials = np.cumsum(_warp_chunks(x), axis=1)
    bound = SAFETY * U32 * _sequential_rounding(partials, axis=1)
    return Tolerance(rtol=1.0, scale=bound,  # an absolute bound, as rtol x scale for callers that read those
                     note=f"{SAFETY:g}·u·sqrt(Σ partial²) over each chunk of 32")


# --- softmax ----------------------------------------------------------------------------------------
def _softmax_inputs(size, rng):
    rows, cols = size
    x = rng.normal(0.0, 3.0, size=(rows, cols)).astype(np.float32)
    x[::3] = rng.uniform(80.0, 100.0, size=x[::3].shape)  # exp(89) overflows float32: needs the max trick
    return (x,)


def _softmax_reference(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _softmax_tolerance(x, expected, launch=None):
    # exp adds a few ulps of its own; elements below 1e-30 (exp underflowing) may be flushed to 0
    return Tolerance(rtol=2 * k_scaled_rtol(x.shape[1]), atol=1e-30,
                     note=f"K-scaled: row sums of {x.shape[1]} exponentials, relative to each element")


# --- online_merge (softmax chapter) ----------------------------------------------------------------
def _online_merge_inputs(size, rng):
    """Per-tile states (m, l) of `tiles` tiles per row: every third row lifted to m in [80, 100] (exp(m)
    overflows float32 there), about 1 tile in 8 empty (-inf, 0), and the last row all empty."""
    rows, tiles = size
    m = rng.normal(0.0, 3.0, size=(rows, tiles)).astype(np.float32)
    m[::3] += rng.uniform(80.0, 100.0, size=m[::3].shape).astype(np.float32)
    l = rng.uniform(1.0, 64.0, size=(rows, tiles)).astype(np.float32)  # a tile's sum counts its max as 1
    empty = rng.random((rows, tiles)) < 0.125
    if rows > 1:
        empty[-1] = True
    m[empty], l[empty] = -np.inf, 0.0
    return m, l


def _online_merge_reference(m, l):
    m, l = _f64(m, l)
    top = m.max(axis=1)
    shift = np.where(np.isneginf(top), 0.0, top)
    total = (l * np.exp(m - shift[:, None])).sum(axis=1)
    return np.stack([top, total], axis=1)


# --- attention ---------------------------------------------------------------------------------------
SPIKE_SCORE = 3.0  # the spike-late key's score is SPIKE_SCORE * q[..., 0], in [1.5, 4.5]


def spike_late_qkv(rng, q_shape, kv_shape):
    """q, k, v uniform in [-1, 1], except q[..., 0] in [0.5, 1.5] and a "spike-late" last key
    (SPIKE_SCORE·sqrt(d), 0, ..., 0): its score q·k/sqrt(d) = SPIKE_SCORE·q[0] ≥ 1.5, while the other keys'
    scores spread with a standard deviation of about 0.34, so the last key holds the row maximum in almost
    every row and a kernel that walks the keys in order meets the maximum in its last tile (the rescale)."""
    q, k, v = _uniform(rng, q_shape), _uniform(rng, kv_shape), _uniform(rng, kv_shape)
    d = q_shape[-1]
    q[..., 0] = rng.uniform(0.5, 1.5, size=q_shape[:-1]).astype(np.float32)
    k[..., -1, :] = 0.0
    k[..., -1, 0] = np.float32(SPIKE_SCORE * np.sqrt(d))
    return q, k, v


def _attention_inputs(size, rng):
    m, n, d = size
    return spike_late_qkv(rng, (m, d), (n, d))


def _attention_probs(q, k):
    q, k = _f64(q, k)
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def _attention_reference(q, k, v):
    return _attention_probs(q, k) @ np.asarray(v, dtype=np.float64)


def _attention_tolerance(q, k, v, expected, launch=None):
    scale = _attention_probs(q, k) @ np.abs(np.asarray(v, dtype=np.float64))
    return Tolerance(rtol=2 * (k_scaled_rtol(k.shape[0]) + k_scaled_rtol(q.shape[1])), scale=scale,
                     note=f"K-scaled: {k.shape[0]} keys and dot products of {q.shape[1]}, relative to P @ |v|")


# --- attention_tile_update (attention chapter) --------------------------------------------------------
def _tile_update_inputs(size, rng):
    """A running state (m, l, o) per row and one tile of scores s (rows, cols) and values v (cols, d). Rows
    cycle through four cases: the first tile (m = -inf, l = 0, o = 0), a tile that brings a larger maximum
    (the rescale), a tile below the running maximum, and a tile with masked (-inf) scores. With more than
    four rows, the second-to-last is an empty state meeting a fully masked tile: it stays (-inf, 0, 0)."""
    rows, cols, d = size
    s = rng.normal(0.0, 2.0, size=(rows, cols)).astype(np.float32)
    v = _uniform(rng, (cols, d))
    m = (s.max(axis=1) + rng.uniform(-3.0, 3.0, size=rows)).astype(np.float32)
    l = rng.uniform(1.0, 40.0, size=rows).astype(np.float32)
    o = (l[:, None] * _uniform(rng, (rows, d))).astype(np.float32)
    case = np.arange(rows) % 4
    m[case == 0], l[case == 0], o[case == 0] = -np.inf, 0.0, 0.0
    m[case == 1] = s[case == 1].max(axis=1) - 2.5
    m[case == 2] = s[case == 2].max(axis=1) + 2.5
    masked = (case == 3)[:, None] & (rng.random((rows, cols)) < 0.5)
    masked[:, 0] = False
    s[masked] = -np.inf
    if rows > 4:
        m[-2], l[-2], o[-2], s[-2] = -np.inf, 0.0, 0.0, -np.inf
    return m, l, o, s, v


def _tile_update64(m, l, o, s, v):
    """The updated state in float64 and the tolerance's scale: columns [m', l', o'...]."""
    m, l, o, s, v = _f64(m, l, o, s, v)
    new = np.maximum(m, s.max(axis=1))
    shift = np.where(np.isneginf(new), 0.0, new)
    with np.errstate(invalid="ignore"):
        alpha = np.where(np.isneginf(m), 0.0, np.exp(m - shift))
        p = np.exp(s - shift[:, None])
    out = np.concatenate([new[:, None], (l * alpha + p.sum(axis=1))[:, None], o * alpha[:, None] + p @ v], axis=1)
    scale = np.concatenate([np.abs(np.where(np.isfinite(new), new, 0.0))[:, None], out[:, 1:2],
                            np.abs(o) * alpha[:, None] + p @ np.abs(v)], axis=1)
    return out, scale


EXERCISES: dict[str, Exercise] = {e.id: e for e in [
    Exercise("vector_add", "vector_add(a, b, out)", "out[i] = a[i] + b[i] for every i (1-D float32)",
             make_inputs=lambda size, rng: (_uniform(rng, size), _uniform(rng, size)),
             out_shape=lambda a, b: a.shape, reference=_vector_add_reference,
             tolerance=_one_rounding, grow=_grow_dims(0),
             sim_cases=((1,), (1000,), (4099,)), gpu_cases=((1000,), (1_000_003,), (16_777_217,), (1,))),
    Exercise("outer_product", "outer_product(x, y, out)",
             "out[i, j] = x[i] * y[j] for x (m,), y (n,), out (m, n): one thread per element on a 2-D grid",
             make_inputs=lambda size, rng: (_uniform(rng, (size[0],)), _uniform(rng, (size[1],))),
             out_shape=lambda x, y: (x.size, y.size),
             reference=lambda x, y: np.outer(np.asarray(x, np.float64), np.asarray(y, np.float64)),
             tolerance=_one_rounding, grow=_grow_dims(0, 1),
             sim_cases=((1, 1), (37, 53), (70, 33)), gpu_cases=((1, 1), (37, 53), (1000, 777), (4099, 2050))),
    Exercise("transpose", "transpose(a, out)", "out[j, i] = a[i, j] for a of shape (rows, cols)",
             make_inputs=lambda size, rng: (_uniform(rng, size),), out_shape=lambda a: a.shape[::-1],
             reference=_transpose_reference, tolerance=_exact, grow=_grow_dims(0, 1),
             sim_cases=((1, 1), (37, 53), (70, 33)), gpu_cases=((1, 1), (37, 53), (1000, 777), (4099, 2050))),
    Exercise("column_sums", "column_sums(x, out)", "out[j] = sum of column j of x (2-D, row-major)",
             make_inputs=lambda size, rng: (_uniform(rng, size),), out_shape=lambda x: (x.shape[1],),
             reference=lambda x: np.asarray(x, np.float64).sum(axis=0), tolerance=_column_sums_tolerance,
             grow=_grow_dims(0, 1), sim_cases=((1, 1), (37, 53), (300, 70)), gpu_cases=((1, 1), (37, 53), (4099, 1000), (1000, 4099))),
    Exercise("matmul", "matmul(a, b, c)", "c = a @ b for a (M, K), b (K, N), c (M, N), float32 row-major",
             make_inputs=_matmul_inputs, out_shape=lambda a, b: (a.shape[0], b.shape[1]),
             reference=lambda a, b: np.asarray(a, np.float64) @ np.asarray(b, np.float64),
             tolerance=_matmul_tolerance, grow=_grow_matmul, sim_cases=((1, 1, 1), (33, 17, 45), (40, 70, 65)),
             gpu_cases=((1, 1, 1), (33, 17, 45), (1000, 777, 555), (1024, 1024, 1024))),
    Exercise("matmul_bt", "matmul_bt(a, b, c)",
             "c = a @ b.T for a (M, K), b (N, K), c (M, N), float32 row-major (b is stored transposed)",
             make_inputs=lambda size, rng: (_uniform(rng, (size[0], size[2])), _uniform(rng, (size[1], size[2]))),
             out_shape=lambda a, b: (a.shape[0], b.shape[0]),
             reference=lambda a, b: np.asarray(a, np.float64) @ np.asarray(b, np.float64).T,
             tolerance=lambda a, b, expected, launch=None: _matmul_tolerance(a, b.T, expected),
             grow=_grow_matmul,
             sim_cases=((1, 1, 1), (20, 33, 17), (33, 18, 40)),
             gpu_cases=((1, 1, 1), (33, 17, 45), (1000, 777, 555), (2048, 2048, 2048))),
    Exercise("reduce_sum", "reduce_sum(x, out)", "out[0] = sum of x (out has shape (1,))",
             make_inputs=lambda size, rng: (_uniform(rng, size),), out_shape=lambda x: (1,),
             reference=lambda x: np.array([np.asarray(x, np.float64).sum()]), tolerance=_sum_tolerance,
             grow=_grow_dims(0), sim_cases=((1,), (300,), (2001,)), gpu_cases=((1,), (1000,), (1_048_583,), (16_777_219,))),
    Exercise("reduce_max", "reduce_max(x, out)", "out[0] = max of x (out has shape (1,))",
             make_inputs=_reduce_inputs, out_shape=lambda x: (1,),
             reference=lambda x: np.array([np.asarray(x, np.float64).max()]),
             tolerance=_exact,
             grow=_grow_dims(0), sim_cases=((1,), (1003,), (2001,)), gpu_cases=((1,), (1003,), (1_048_583,), (16_777_217,))),
    Exercise("warp_reduce", "warp_reduce(x, out)",
             "out[w] = x[32w] + ... + x[32w + 31] for every 32-element chunk of x (the last may be short), "
             "with warp shuffles: one warp per chunk, no shared memory",
             make_inputs=lambda size, rng: (_uniform(rng, size),),
             out_shape=lambda x: (-(-x.size // WARP_SIZE),),
             reference=lambda x: _warp_chunks(x).sum(axis=1), tolerance=_warp_sums_tolerance, grow=_grow_dims(0),
             sim_cases=((1,), (100,), (1000,)), gpu_cases=((1,), (1000,), (1_000_003,))),
    Exercise("scan_inclusive", "scan_inclusive(x, out)", "out[i] = x[0] + ... + x[i]",
             make_inputs=lambda size, rng: (_uniform(rng, size),), out_shape=lambda x: x.shape,
             reference=lambda x: np.cumsum(np.asarray(x, np.float64)), tolerance=_scan_tolerance, grow=_grow_dims(0),
             sim_cases=((1,), (300,), (1500,)), gpu_cases=((1,), (1000,), (1_048_583,), (16_777_219,))),
    Exercise("scan_exclusive", "scan_exclusive(x, out)", "out[0] = 0, out[i] = x[0] + ... + x[i-1]",
             make_inputs=lambda size, rng: (_uniform(rng, size),), out_shape=lambda x: x.shape,
             reference=_exclusive_scan, tolerance=_scan_tolerance, grow=_grow_dims(0),
             sim_cases=((1,), (300,), (1500,)), gpu_cases=((1,), (1000,), (1_048_583,), (16_777_219,))),
    Exercise("compact_positive", "compact_positive(x, out)",
             "out starts with the elements of x that are > 0, in their order; the rest of out is 0",
             make_inputs=lambda size, rng: (_uniform(rng, size),), out_shape=lambda x: x.shape,
             reference=_compact_positive, tolerance=_exact, grow=_grow_dims(0),
             sim_cases=((1,), (300,), (1000,)), gpu_cases=((1,), (1000,), (1_048_583,), (16_777_219,))),
    Exercise("online_merge", "online_merge(m, l, out)",
             "out[r] = (M, L), the merge of row r's tile states (m[r, t], l[r, t]); empty rows give (-inf, 0)",
             make_inputs=_online_merge_inputs, out_shape=lambda m, l: (m.shape[0], 2),
             reference=_online_merge_reference,
             tolerance=lambda m, l, expected, launch=None: Tolerance(
                 rtol=2 * k_scaled_rtol(m.shape[1]), note=f"K-scaled: {m.shape[1]} tile states per row"),
             grow=_grow_dims(0),
             sim_cases=((1, 1), (5, 37), (40, 9)), gpu_cases=((1, 1), (1000, 37), (65536, 64))),
    Exercise("softmax_rows", "softmax_rows(x, out)", "each row of out = softmax of that row of x (2-D)",
             make_inputs=_softmax_inputs, out_shape=lambda x: x.shape, reference=_softmax_reference,
             tolerance=_softmax_tolerance, grow=_grow_dims(0), sim_cases=((1, 1), (5, 37), (7, 300)),
             gpu_cases=((1, 1), (5, 37), (1000, 1000), (4096, 4099))),
    Exercise("attention", "attention(q, k, v, out)",
             "out = softmax(q @ k.T / sqrt(d)) @ v for q (m, d), k and v (n, d)",
             make_inputs=_attention_inputs, out_shape=lambda q, k, v: q.shape, reference=_attention_reference,
             tolerance=_attention_tolerance, grow=_grow_dims(0), sim_cases=((1, 1, 64), (17, 45, 64), (33, 70, 64)),
             gpu_cases=((1, 1, 64), (17, 45, 64), (1000, 1531, 64), (2048, 4099, 128)), time_limit_s=120.0),
    Exercise("attention_tile_update", "attention_tile_update(m, l, o, s, v, out)",
             "one FlashAttention step per row: from the state (m, l, o) and a tile of scores s (rows, cols) "
             "and values v (cols, d), write out[:, 0] = m', out[:, 1] = l', out[:, 2:] = o' (o unnormalised)",
             make_inputs=_tile_update_inputs, out_shape=lambda m, l, o, s, v: (m.shape[0], o.shape[1] + 2),
             reference=lambda *inputs: _tile_update64(*inputs)[0],
             tolerance=lambda m, l, o, s, v, expected, launch=None: Tolerance(
                 rtol=2 * k_scaled_rtol(s.shape[1] + 1), scale=_tile_update64(m, l, o, s, v)[1],
                 note=f"K-scaled: tiles of {s.shape[1]} scores, relative to the running state"),
             grow=_grow_dims(0),
             sim_cases=((1, 1, 4), (6, 16, 8), (37, 32, 64)), gpu_cases=((1, 1, 4), (6, 16, 8), (4099, 64, 128))),
]}
