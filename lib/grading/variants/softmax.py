"""Known-wrong answers to the softmax chapter's exercises, online_merge(m, l, out) and log_softmax_rows(x, out),
and to softmax_rows(x, out), which no page asks for any more but the grader still knows (lib.grading.exercises.RETIRED)."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from lib.grading.variants._common import EXP_OVERFLOW, Variant, threads_1d, unwritten

THREADS = 128
FIXED_THREADS = 64


# --- online_merge ------------------------------------------------------------------------------------------
@cuda.jit
def merge_states(m, l, out, guard_empty, zero_start, weigh_by_l, rescale, swap_columns):
    """out[r] = (M, L), the merge of row r's tile states, one thread per row, with the mistakes as switches:
    no guard for two empty states (exp(-inf + inf) = NaN), 0 as the max's starting value, l ignored, the
    running total not rescaled to a new maximum, M and L stored in each other's column.

    Memory: each thread walks its own row (uncoalesced across threads; the rows are short).
    Launch: 1-D, one thread per row.
    """
    row = cuda.grid(1)
    if row >= m.shape[0]:
        return
    big = float32(0.0) if zero_start else float32(-math.inf)
    total = float32(0.0)
    for t in range(m.shape[1]):
        new = max(big, m[row, t])
        weight = l[row, t] if weigh_by_l else float32(1.0)
        if new != -math.inf or not guard_empty:
            if rescale:
                total = total * math.exp(big - new) + weight * math.exp(m[row, t] - new)
            else:
                total = total + weight * math.exp(m[row, t] - new)
        big = new
    out[row, 1 if swap_columns else 0] = big
    out[row, 0 if swap_columns else 1] = total


def _merge(guard_empty=True, zero_start=False, weigh_by_l=True, rescale=True, swap_columns=False):
    def fn(m, l, out):
        merge_states[(m.shape[0] + THREADS - 1) // THREADS, THREADS](
            m, l, out, guard_empty, zero_start, weigh_by_l, rescale, swap_columns)
    return fn


def _merged(m, l, start=-np.inf):
    """(M, L) per row in float64, the maximum starting from `start`."""
    m, l = np.asarray(m, np.float64), np.asarray(l, np.float64)
    top = np.maximum(m.max(axis=1), start)
    shift = np.where(np.isneginf(top), 0.0, top)
    return top, (l * np.exp(m - shift[:, None])).sum(axis=1)


def _no_empty_guard(m, l, launches, fill=np.nan):
    top, total = _merged(m, l)
    total[np.isneginf(np.asarray(m)[:, 0])] = np.nan  # exp(-inf - -inf) in the first step: NaN stays
    return np.stack([top, total], axis=1)


def _no_rescale(m, l, launches, fill=np.nan):
    """Each tile's l·exp(m - the running max when it was added), in the kernel's float32 order."""
    m, l = np.asarray(m, np.float32), np.asarray(l, np.float32)
    big = np.full(m.shape[0], -np.inf, np.float32)
    total = np.zeros(m.shape[0], np.float32)
    with np.errstate(invalid="ignore"):
        for t in range(m.shape[1]):
            new = np.maximum(big, m[:, t])
            live = new != -np.inf
            term = (l[live, t] * np.exp((m[live, t] - new[live]).astype(np.float64))).astype(np.float32)
            total[live] = total[live] + term
            big = new
    return np.stack([big.astype(np.float64), total.astype(np.float64)], axis=1)


# --- softmax_rows ------------------------------------------------------------------------------------------
@cuda.jit
def softmax_row_per_thread(x, out, subtract_max, divide, cols):
    """out[r, c] = exp(x[r, c] - max) / sum over the row, one thread per row, over the first `cols` columns,
    with the mistakes as switches: the max not subtracted, the division by the sum left out.

    Memory: each thread walks its own row three times (uncoalesced across threads).
    Launch: 1-D, one thread per row.
    """
    r = cuda.grid(1)
    if r >= x.shape[0]:
        return
    m = float32(-math.inf)
    for c in range(cols):
        m = max(m, x[r, c])
    if not subtract_max:
        m = float32(0.0)
    total = float32(0.0)
    for c in range(cols):
        total += math.exp(x[r, c] - m)
    for c in range(cols):
        e = math.exp(x[r, c] - m)
        out[r, c] = e / total if divide else e


def _softmax(subtract_max=True, divide=True, last_column=True, fixed=False):
    def fn(x, out):
        cols = x.shape[1] if last_column else x.shape[1] - 1
        if fixed:
            softmax_row_per_thread[1, FIXED_THREADS](x, out, subtract_max, divide, cols)
        else:
            softmax_row_per_thread[(x.shape[0] + THREADS - 1) // THREADS, THREADS](x, out, subtract_max, divide, cols)
    return fn


def _softmax64(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _no_max(x, launches, fill=np.nan):
    """exp(x) / sum(exp(x)) in float32: a row with an exp past float32's range has the sum inf, so its
    elements are inf / inf = NaN where exp overflowed and 0 elsewhere."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(np.where(x > EXP_OVERFLOW, 0.0, x))
        e[x > EXP_OVERFLOW] = np.inf
        total = e.sum(axis=1, keepdims=True)
        total[total > np.finfo(np.float32).max] = np.inf
        return e / total


def _rows_covered(x, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    out = unwritten(x.shape, fill)
    out[:reach] = _softmax64(x[:reach])
    return out


def _last_column(x, launches, fill=np.nan):
    out = unwritten(x.shape, fill)
    if x.shape[1] > 1:
        out[:, :-1] = _softmax64(x[:, :-1])
    return out


def _not_divided(x, launches, fill=np.nan):
    x32 = np.asarray(x, np.float32)
    return np.exp((x32 - x32.max(axis=1, keepdims=True)).astype(np.float64))



# --- log_softmax_rows ------------------------------------------------------------------------------------------
LOG_OF_SOFTMAX, NO_MAX, MAX_NOT_SUBTRACTED, SUM_NOT_LOGGED, RIGHT = 0, 1, 2, 3, 4


@cuda.jit
def log_softmax_row_per_thread(x, out, mistake):
    """out[r, c] = x - max - log(sum of exp(x - max)) over row r, one thread per row, or one of the mistakes:
    log(exp(x - max) / sum) (LOG_OF_SOFTMAX, -inf where that underflows to 0, as a GPU's log(0)), no max at all (NO_MAX), the max left in the result
    (MAX_NOT_SUBTRACTED), the sum not logged (SUM_NOT_LOGGED).

    Memory: each thread walks its own row three times (uncoalesced across threads).
    Launch: 1-D, one thread per row.
    """
    r = cuda.grid(1)
    if r >= x.shape[0]:
        return
    cols = x.shape[1]
    m = float32(-math.inf)
    for c in range(cols):
        m = max(m, x[r, c])
    if mistake == NO_MAX:
        m = float32(0.0)
    total = float32(0.0)
    for c in range(cols):
        total += math.exp(x[r, c] - m)
    log_total = math.log(total)
    for c in range(cols):
        if mistake == LOG_OF_SOFTMAX:
            p = math.exp(x[r, c] - m) / total
            out[r, c] = math.log(p) if p > 0 else -math.inf  # log(0) is -inf on a GPU, an error in Python
        elif mistake == MAX_NOT_SUBTRACTED:
            out[r, c] = x[r, c] - log_total
        elif mistake == SUM_NOT_LOGGED:
            out[r, c] = x[r, c] - m - total
        else:
            out[r, c] = x[r, c] - m - log_total


def _log_softmax(mistake, fixed=False):
    def fn(x, out):
        grid, threads = (1, FIXED_THREADS) if fixed else ((x.shape[0] + THREADS - 1) // THREADS, THREADS)
        log_softmax_row_per_thread[grid, threads](x, out, mistake)
    return fn


def _log_softmax64(x):
    x = np.asarray(x, np.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted, np.log(np.exp(shifted).sum(axis=1, keepdims=True))


# exp(t) is 0 in float32 below about -103.97 (past the smallest subnormal); the inputs keep every x - max either
# above -60 or below -150, so this threshold never meets a borderline element
EXP_UNDERFLOW = -104.0


def _log_of_softmax(x, launches, fill=np.nan):
    """The log of the float32 softmax: -inf where exp(x - max) underflowed to 0."""
    shifted, log_total = _log_softmax64(x)
    return np.where(shifted < EXP_UNDERFLOW, -np.inf, shifted - log_total)


def _log_softmax_no_max(x, launches, fill=np.nan):
    """x - log(sum exp(x)): a row whose exp overflows has the sum inf, so every element is -inf; other rows are
    right (where they have an exp below the underflow, the sum does not notice)."""
    x = np.asarray(x, np.float64)
    shifted, log_total = _log_softmax64(x)
    with np.errstate(over="ignore"):
        overflow = (x > EXP_OVERFLOW).any(axis=1, keepdims=True) | \
            (np.exp(np.minimum(x, EXP_OVERFLOW)).sum(axis=1, keepdims=True) > np.finfo(np.float32).max)
    return np.where(overflow, -np.inf, shifted - log_total)


def _log_softmax_rows_covered(x, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    out = unwritten(x.shape, fill)
    shifted, log_total = _log_softmax64(x[:reach])
    out[:reach] = shifted - log_total
    return out

VARIANTS = {
    "log_softmax_rows": [
        Variant("log of the softmax",
                "elements far below their row's maximum are -inf: exp(x - max) underflowed to 0 before the log. "
                "Never form the softmax: log softmax = (x - max) - log(sum of exp(x - max))",
                _log_of_softmax, _log_softmax(LOG_OF_SOFTMAX)),
        Variant("exp overflow without the max subtracted",
                "rows with large values are -inf: exp(x) overflows float32 past 88.7, so the row's sum is inf; "
                "subtract the row's maximum inside the exp (and take it out again outside the log)",
                _log_softmax_no_max, _log_softmax(NO_MAX)),
        Variant("max not subtracted from x",
                "every element is too large by its row's maximum: log softmax = x - max - log(sum), where the "
                "sum is of exp(x - max)",
                lambda x, launches, fill=np.nan: np.asarray(x, np.float64) - _log_softmax64(x)[1],
                _log_softmax(MAX_NOT_SUBTRACTED)),
        Variant("sum not logged",
                "you subtracted the row's sum of exponentials itself: subtract its log",
                lambda x, launches, fill=np.nan: (lambda sh, lt: sh - np.exp(lt))(*_log_softmax64(x)),
                _log_softmax(SUM_NOT_LOGGED)),
        Variant("launch ignores the size",
                "rows past the threads you launched were never computed: size the grid from the number of rows",
                _log_softmax_rows_covered, _log_softmax(RIGHT, fixed=True)),
    ],
    "online_merge": [
        Variant("no guard for empty states",
                "rows that start with an empty tile are NaN: merging two empty states computes exp(-inf - -inf) "
                "= exp(NaN); skip the update while the new maximum is still -inf",
                _no_empty_guard, _merge(guard_empty=False)),
        Variant("0 as the identity of max",
                "the running maximum starts from 0, so rows whose maximum is below 0 (and empty rows, which "
                "must stay (-inf, 0)) come out wrong: start from -inf",
                lambda m, l, launches, fill=np.nan: np.stack(_merged(m, l, start=0.0), axis=1),
                _merge(zero_start=True)),
        Variant("M and L swapped",
                "the two columns are swapped: out[r, 0] is the maximum M and out[r, 1] the sum L",
                lambda m, l, launches, fill=np.nan: np.stack(_merged(m, l)[::-1], axis=1),
                _merge(swap_columns=True)),
        Variant("l ignored",
                "each tile counted as one exp(m - M): a tile's state (m, l) stands for l exponentials "
                "relative to m, so add l·exp(m - M)",
                lambda m, l, launches, fill=np.nan: np.stack(_merged(m, (np.asarray(l) > 0).astype(np.float64)),
                                                             axis=1),
                _merge(weigh_by_l=False)),
        Variant("missing online rescale",
                "the running sum was not rescaled when the maximum grew: multiply it by exp(old max - new max) "
                "before adding the next tile",
                _no_rescale, _merge(rescale=False)),
    ],
    "softmax_rows": [
        Variant("exp overflow without the max subtracted",
                "rows with large values are NaN: exp(x) overflows float32 past 88.7; subtract the row's "
                "maximum first (exp(x - max) <= 1, and softmax does not change)",
                _no_max, _softmax(subtract_max=False)),
        Variant("launch ignores the size",
                "rows past the threads you launched were never computed: size the grid from the number of rows",
                _rows_covered, _softmax(fixed=True)),
        Variant("last column dropped",
                "the last column is missing (and left out of each row's max and sum): loop over all the columns",
                _last_column, _softmax(last_column=False)),
        Variant("not divided by the row sum",
                "each element is exp(x - max), not divided by the row's sum of exponentials",
                _not_divided, _softmax(divide=False)),
    ],
}
