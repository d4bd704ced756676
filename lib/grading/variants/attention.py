"""Known-wrong answers to the attention chapter's exercises, causal_attention(q, k, v, out) and
attention_tile_update(m, l, o, s, v, out), and to attention(q, k, v, out), which no page asks for any more but
the grader still knows (lib.grading.exercises.RETIRED)."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from lib.grading.variants._common import Variant, threads_1d, unwritten

MAX_D = 128
THREADS = 32
FIXED_THREADS = 64


# --- attention -------------------------------------------------------------------------------------------------
@cuda.jit
def attention_row(q, k, v, out, scaled, rescale, k_as_dn, keys):
    """One query row per thread, the online softmax over the first `keys` keys, with the mistakes as switches:
    no 1/sqrt(d), no rescale of l and o when the maximum grows, k's memory read as a (d, n) matrix.

    Memory: each thread reads all of k and v (uncoalesced across threads; the chapter's first rung).
    Launch: 1-D, one thread per query row.
    """
    i = cuda.grid(1)
    if i >= q.shape[0]:
        return
    d = q.shape[1]
    n = k.shape[0]
    scale = float32(1.0) / math.sqrt(float32(d)) if scaled else float32(1.0)
    o = cuda.local.array(MAX_D, float32)
    for c in range(d):
        o[c] = float32(0.0)
    m, l = float32(-math.inf), float32(0.0)
    for j in range(keys):
        s = float32(0.0)
        for c in range(d):
            if k_as_dn:
                flat = c * n + j
                s += q[i, c] * k[flat // d, flat % d]
            else:
                s += q[i, c] * k[j, c]
        s *= scale
        if s > m:
            if rescale:
                alpha = math.exp(m - s)
                l *= alpha
                for c in range(d):
                    o[c] *= alpha
            m = s
        p = math.exp(s - m)
        l += p
        for c in range(d):
            o[c] += p * v[j, c]
    for c in range(d):
        out[i, c] = o[c] / l


def _attention(scaled=True, rescale=True, k_as_dn=False, last_key=True, fixed=False):
    def fn(q, k, v, out):
        keys = k.shape[0] if last_key else k.shape[0] - 1
        grid = 1 if fixed else (q.shape[0] + THREADS - 1) // THREADS
        attention_row[grid, FIXED_THREADS if fixed else THREADS](q, k, v, out, scaled, rescale, k_as_dn, keys)
    return fn


def _attention64(q, k, v, scaled=True, rescale=True, k_as_dn=False, keys=None):
    """softmax(q @ K.T * scale) @ v in float64 over the first `keys` keys; K is k or k's memory read as (d, n);
    without the rescale each key's weight is exp(s - the running maximum when it was added)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    n, d = k.shape
    keys = n if keys is None else keys
    kt = k.ravel().reshape(d, n) if k_as_dn else k.T
    s = (q @ kt)[:, :keys] * (1.0 / np.sqrt(d) if scaled else 1.0)
    top = np.maximum.accumulate(s, axis=1) if not rescale else s.max(axis=1, keepdims=True)
    w = np.exp(s - top)
    if keys == 0:
        return np.full(q.shape, np.nan)
    return (w @ v[:keys]) / w.sum(axis=1, keepdims=True)


def _rows_covered(q, k, v, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    out = unwritten(q.shape, fill)
    out[:reach] = _attention64(q[:reach], k, v)
    return out


# --- attention_tile_update -------------------------------------------------------------------------------------
TILE_THREADS = 64


@cuda.jit
def tile_update(m, l, o, s, v, out, guard_empty, use_m, rescale, swap_ml, normalise):
    """One FlashAttention step per row (one thread per row), with the mistakes as switches: no guard for an
    empty state meeting a fully masked tile, the new maximum taken from the tile alone, l and o not rescaled,
    m' and l' stored in each other's column, o' divided by l'.

    Memory: each thread reads its row of s and all of v (uncoalesced; rows are independent).
    Launch: 1-D, one thread per row.
    """
    r = cuda.grid(1)
    if r >= m.shape[0]:
        return
    new = m[r] if use_m else float32(-math.inf)
    for j in range(s.shape[1]):
        new = max(new, s[r, j])
    out[r, 1 if swap_ml else 0] = new
    if guard_empty and new == -math.inf:
        out[r, 0 if swap_ml else 1] = float32(0.0)
        for c in range(o.shape[1]):
            out[r, 2 + c] = float32(0.0)
        return
    alpha = math.exp(m[r] - new) if rescale else float32(1.0)
    total = l[r] * alpha
    for j in range(s.shape[1]):
        total += math.exp(s[r, j] - new)
    out[r, 0 if swap_ml else 1] = total
    for c in range(o.shape[1]):
        acc = o[r, c] * alpha
        for j in range(s.shape[1]):
            acc += math.exp(s[r, j] - new) * v[j, c]
        out[r, 2 + c] = acc / total if normalise else acc


def _tile_update(guard_empty=True, use_m=True, rescale=True, swap_ml=False, normalise=False):
    def fn(m, l, o, s, v, out):
        tile_update[(m.shape[0] + TILE_THREADS - 1) // TILE_THREADS, TILE_THREADS](
            m, l, o, s, v, out, guard_empty, use_m, rescale, swap_ml, normalise)
    return fn


def _update64(m, l, o, s, v, guard_empty=True, use_m=True, rescale=True, swap_ml=False, normalise=False):
    """The kernel above in float64: rows whose new maximum is -inf take the guard (0, 0...) or, without it,
    NaN (exp(-inf - -inf))."""
    m, l, o, s, v = (np.asarray(a, np.float64) for a in (m, l, o, s, v))
    new = s.max(axis=1)
    if use_m:
        new = np.maximum(new, m)
    empty = np.isneginf(new)
    with np.errstate(invalid="ignore"):
        alpha = np.exp(m - new) if rescale else np.ones_like(m)
        p = np.exp(s - new[:, None])
        total = l * alpha + p.sum(axis=1)
        acc = o * alpha[:, None] + p @ v
    if normalise:
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = acc / total[:, None]
    if guard_empty:
        total[empty], acc[empty] = 0.0, 0.0
    else:
        total[empty], acc[empty] = np.nan, np.nan
    first, second = (total, new) if swap_ml else (new, total)
    return np.concatenate([first[:, None], second[:, None], acc], axis=1)



# --- causal_attention ------------------------------------------------------------------------------------------
RIGHT_MASK, NO_MASK, TOP_LEFT, DIAGONAL_MASKED, MASKED_AS_ZERO = 0, 1, 2, 3, 4


@cuda.jit
def causal_row(q, k, v, out, mask):
    """One query row per thread, softmax in two passes (max, then sum and output) over the keys that the mask
    lets through: RIGHT_MASK j <= n - m + i; NO_MASK every key; TOP_LEFT j <= i (the mask aligned to the first
    query instead of the last); DIAGONAL_MASKED j < n - m + i; MASKED_AS_ZERO the right keys, and every hidden
    key with a score of 0 instead of -inf.

    Memory: each thread reads all of k and v twice (uncoalesced across threads; the chapter's first rung).
    Launch: 1-D, one thread per query row.
    """
    i = cuda.grid(1)
    if i >= q.shape[0]:
        return
    d = q.shape[1]
    n = k.shape[0]
    last = n - q.shape[0] + i        # the last key this query may see
    if mask == TOP_LEFT:
        last = i
    elif mask == DIAGONAL_MASKED:
        last -= 1
    elif mask == NO_MASK:
        last = n - 1
    keys = n if mask == MASKED_AS_ZERO else min(last + 1, n)
    scale = float32(1.0) / math.sqrt(float32(d))
    m = float32(-math.inf)
    for j in range(keys):
        s = float32(0.0)
        if j <= last:
            for c in range(d):
                s += q[i, c] * k[j, c]
        m = max(m, s * scale)
    o = cuda.local.array(MAX_D, float32)
    for c in range(d):
        o[c] = float32(0.0)
    l = float32(0.0)
    for j in range(keys):
        s = float32(0.0)
        if j <= last:
            for c in range(d):
                s += q[i, c] * k[j, c]
        p = math.exp(s * scale - m)
        l += p
        for c in range(d):
            o[c] += p * v[j, c]
    for c in range(d):
        out[i, c] = o[c] / l


def _causal(mask=RIGHT_MASK, fixed=False):
    def fn(q, k, v, out):
        grid, threads = (1, FIXED_THREADS) if fixed else ((q.shape[0] + THREADS - 1) // THREADS, THREADS)
        causal_row[grid, threads](q, k, v, out, mask)
    return fn


def _causal64(q, k, v, visible, zero_hidden=False):
    """softmax over the visible keys of q @ k.T / sqrt(d), then @ v, in float64; hidden keys get -inf, or a
    score of 0 with `zero_hidden`; a row with no visible key is 0 / 0 = NaN."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    s = np.where(visible, s, 0.0 if zero_hidden else -np.inf)
    with np.errstate(invalid="ignore"):
        top = s.max(axis=1, keepdims=True)
        w = np.exp(s - np.where(np.isfinite(top), top, 0.0))
        return (w @ v) / w.sum(axis=1, keepdims=True)


def _visible(q, k, shift=0, top_left=False):
    """visible[i, j] for key j and query i: j <= n - m + i + shift (or j <= i with top_left)."""
    m, n = q.shape[0], k.shape[0]
    rows = np.arange(m)[:, None] if top_left else (n - m + np.arange(m))[:, None]
    return np.arange(n)[None, :] <= rows + shift


def _causal_rows_covered(q, k, v, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    out = unwritten(q.shape, fill)
    out[:reach] = _causal64(q, k, v, _visible(q, k))[:reach]
    return out

VARIANTS = {
    "causal_attention": [
        Variant("no mask",
                "every query saw every key: query i may only attend to keys j <= n - m + i (itself and the "
                "past); leave the later keys out of the max, the sum and the output",
                lambda q, k, v, launches, fill=np.nan: _causal64(q, k, v, np.ones((q.shape[0], k.shape[0]), bool)),
                _causal(NO_MASK)),
        Variant("mask aligned to the first query",
                "you let query i see keys j <= i: the queries are the last m of the n positions, so query i is "
                "position n - m + i and sees keys j <= n - m + i (the two agree only when m = n)",
                lambda q, k, v, launches, fill=np.nan: _causal64(q, k, v, _visible(q, k, top_left=True)),
                _causal(TOP_LEFT)),
        Variant("diagonal masked",
                "a query did not see its own position: the mask is j <= n - m + i, the diagonal included (with "
                "m = n the first query then has no key at all and divides 0 by 0)",
                lambda q, k, v, launches, fill=np.nan: _causal64(q, k, v, _visible(q, k, shift=-1)),
                _causal(DIAGONAL_MASKED)),
        Variant("hidden scores set to 0",
                "the hidden keys still carry weight: a score of 0 gives exp(0 - max) > 0; a hidden key's score "
                "is -inf (or leave it out of the loop)",
                lambda q, k, v, launches, fill=np.nan: _causal64(q, k, v, _visible(q, k), zero_hidden=True),
                _causal(MASKED_AS_ZERO)),
        Variant("launch ignores the size",
                "query rows past the threads you launched were never computed: size the grid from the number "
                "of queries",
                _causal_rows_covered, _causal(fixed=True)),
    ],
    "attention": [
        Variant("missing 1/sqrt(d)",
                "the scores were not scaled: softmax(q @ k.T / sqrt(d)), so multiply each dot product by "
                "1 / sqrt(d) before the exponential",
                lambda q, k, v, launches, fill=np.nan: _attention64(q, k, v, scaled=False),
                _attention(scaled=False)),
        Variant("missing online rescale",
                "when a key brings a new maximum, what was already summed must shrink to it: multiply l and o "
                "by exp(old max - new max) before adding the new key",
                lambda q, k, v, launches, fill=np.nan: _attention64(q, k, v, rescale=False),
                _attention(rescale=False)),
        Variant("launch ignores the size",
                "query rows past the threads you launched were never computed: size the grid from the number "
                "of queries",
                _rows_covered, _attention(fixed=True)),
        Variant("k read as (d, n)",
                "k was indexed as if it were stored transposed, (d, n): k is (n, d), so the score of key j is "
                "the sum over c of q[i, c] * k[j, c]",
                lambda q, k, v, launches, fill=np.nan: _attention64(q, k, v, k_as_dn=True),
                _attention(k_as_dn=True)),
        Variant("last key skipped",
                "the last key is missing from every row: the loop over keys stops one short (range(n))",
                lambda q, k, v, launches, fill=np.nan: _attention64(q, k, v, keys=k.shape[0] - 1),
                _attention(last_key=False)),
    ],
    "attention_tile_update": [
        Variant("missing rescale",
                "l and o were not rescaled to the new maximum: multiply both by alpha = exp(m - m') before "
                "adding the tile",
                lambda *a, fill=np.nan: _update64(*a[:5], rescale=False), _tile_update(rescale=False)),
        Variant("no guard for an empty state",
                "the row whose state is empty and whose tile is fully masked is NaN: exp(-inf - -inf); when the "
                "new maximum is -inf, keep the state (-inf, 0, 0)",
                lambda *a, fill=np.nan: _update64(*a[:5], guard_empty=False), _tile_update(guard_empty=False)),
        Variant("new maximum from the tile alone",
                "the new maximum ignores the running one: m' = max(m, max of the tile's scores)",
                lambda *a, fill=np.nan: _update64(*a[:5], use_m=False), _tile_update(use_m=False)),
        Variant("m' and l' swapped",
                "columns 0 and 1 are swapped: out[:, 0] is the new maximum m' and out[:, 1] the sum l'",
                lambda *a, fill=np.nan: _update64(*a[:5], swap_ml=True), _tile_update(swap_ml=True)),
        Variant("o' normalised",
                "o' was divided by l': the running state keeps o unnormalised (the division happens once, "
                "after the last tile)",
                lambda *a, fill=np.nan: _update64(*a[:5], normalise=True), _tile_update(normalise=True)),
    ],
}
