"""What the judge says about a wrong output when no known mistake explains all of it: what was observed.

:func:`observed_hint` turns a wrong output into one sentence, the strongest that the evidence supports, in
this order (a weaker diagnosis never hides a stronger one):

1. a launch with no threads;
2. a launch that stayed the same at every size *and* whose reach is exactly the right part of the output:
   the launch is blamed only when the wrong elements are exactly those it cannot have covered (the output
   elements past its threads, the rows past its threads or blocks, the rectangle outside its 2-D reach);
3. facts from the two fills: elements that depend on what the output held before (added into), elements
   computed as NaN or inf;
4. never-written elements, where the launch's reach is checked before the grid is blamed: "round the
   block count up" only when the grid really has too few threads, otherwise what is left unwritten, and what
   the launch implies (each thread handling k elements, a 2-D index flattened into gaps, a guard that
   stops short);
5. what the wrong values look like (one element, all of them).

:func:`index_hint` is the same idea for an IndexError: "guard with ``if i < n``" only when the line has no
guard; where one encloses it, the hint says which index was out of range and what it was computed from.
"""
from __future__ import annotations

import ast
import inspect
import math
import textwrap

import numpy as np

__all__ = ["observed_hint", "launch_fault", "index_hint"]


def _pad3(v) -> tuple:
    v = list(v)
    return tuple(v + [1] * (3 - len(v)))


def _label(record: dict) -> str:
    from lib.grading.grader.cases import launch_label

    return launch_label(record)


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


def launch_fault(fixed: list[dict], wrong: np.ndarray, unwritten: np.ndarray | None, size) -> str | None:
    """The sentence blaming a launch that stayed the same at every size, or None: only when the wrong elements
    are exactly the ones that launch cannot have reached (one output element, row, chunk of 32 or tile per
    thread or block, from the start of the output)."""
    shape = wrong.shape
    for r in fixed:
        (gx, gy, gz), (bx, by, bz) = _pad3(r["grid"]), _pad3(r["block"])
        threads, blocks = gx * gy * gz * bx * by * bz, gx * gy * gz
        candidates = []  # (covered mask, words for what it reaches)
        flat = np.arange(wrong.size).reshape(shape)
        for k, what in ((threads, "threads"), (threads // 32, "warps")):
            if 0 < k < wrong.size:
                candidates.append((flat < k, f"its {k} {what} reach only the first {k} output elements"))
        if wrong.ndim >= 2:
            rows = np.arange(shape[0]).reshape((-1,) + (1,) * (wrong.ndim - 1))
            for k, what in ((threads, "threads"), (blocks, "blocks"), (gx * bx, "threads along x"),
                            (gy * by, "threads along y")):
                if 0 < k < shape[0]:
                    unit = "rows" if wrong.ndim == 2 else "matrices of the batch"
                    candidates.append((np.broadcast_to(rows < k, shape),
                                       f"its {k} {what} reach only the first {k} {unit}"))
        if wrong.ndim in (2, 3):
            cy, cx = gy * by, gx * bx
            r_idx = np.arange(shape[-2]).reshape(-1, 1)
            c_idx = np.arange(shape[-1]).reshape(1, -1)
            rect = np.broadcast_to((r_idx < cy) & (c_idx < cx), shape)
            if (cy < shape[-2] or cx < shape[-1]) and rect.any():
                candidates.append((rect, f"its {cy} × {cx} threads (y × x) reach only rows "
                                         f"0..{min(cy, shape[-2]) - 1} and columns 0..{min(cx, shape[-1]) - 1}"))
        for covered, reach in candidates:
            if np.array_equal(wrong, ~covered):
                how = ("never written" if unwritten is not None and np.array_equal(unwritten, wrong)
                       else "wrong")
                where = "x".join(map(str, size))
                return (f"your launch {_label(r)} is the same at every size checked: at size {where} {reach}, and "
                        f"exactly the elements past that reach are {how}. Compute the grid from the size "
                        "(blocks = (n + threads - 1) // threads), or loop over the rest: "
                        "for i in range(cuda.grid(1), n, cuda.gridsize(1)).")
    return None


def _threads(records: list[dict]) -> int:
    return max((math.prod(r["grid"]) * math.prod(r["block"]) for r in records), default=0)


def _is_2d(record: dict) -> bool:
    (gx, gy, gz), (bx, by, bz) = _pad3(record["grid"]), _pad3(record["block"])
    return gy * by > 1 or gz * bz > 1


def _unwritten_1d(mask: np.ndarray, own: list[dict]) -> str:
    """Never-written elements of a 1-D output (and nothing else wrong): what the launch says about them."""
    n = mask.size
    idx = np.flatnonzero(mask)
    first, count = int(idx[0]), int(idx.size)
    widest = max(own, key=lambda r: math.prod(r["grid"]) * math.prod(r["block"])) if own else None
    threads = _threads(own)
    launch = f"your launch {_label(widest)}" if widest else "your launch"
    flatten = ("threads land on the same element and leave others; flatten the 2-D thread index with the grid's "
               "whole width, i = y * (cuda.gridDim.x * cuda.blockDim.x) + x.")
    if idx[-1] == n - 1 and count == n - first:  # the tail (or everything)
        tail = (f"no element was written" if count == n else
                f"elements {_span(first, n - 1)} (the tail, the last {count}) were never written")
        if threads and first == threads:
            return (f"{tail}: {launch} has {threads} threads for {n} elements, one each, so the grid does not "
                    "cover the array: round the block count up, (n + threads - 1) // threads.")
        if threads and first % threads == 0 and first > threads:
            k = first // threads
            return (f"{tail}, and {first} = {k} × the {threads} threads of {launch}: each thread handled "
                    f"{k} elements and stopped; let the loop run to n (for i in range(start, n, stride)).")
        if widest is not None and threads >= n and _is_2d(widest):
            return f"{tail}, although {launch} has {threads} threads for {n} elements: {flatten}"
        if threads >= n:
            return (f"{tail}, although {launch} has {threads} threads for {n} elements: the bounds guard or "
                    "the loop's end stops short of n (the last index is n - 1), or the last partial group of "
                    "elements a thread handles together is skipped.")
        if count == n:
            return (f"{tail}: is the kernel launched (kernel[blocks, threads](...)) with the output array, and "
                    "does it store into it?")
        return f"{tail}; {launch} has {threads} threads: check what reaches the elements past {first - 1}."
    shown = ", ".join(map(str, idx[:4])) + (", ..." if count > 4 else "")
    text = f"{count} of {n} elements were never written (indices {shown})"
    if widest is not None and threads >= n:
        if _is_2d(widest):
            return f"{text}, although {launch} has {threads} threads for {n} elements: {flatten}"
        return (f"{text}, although {launch} has {threads} threads for {n} elements: the index arithmetic "
                "sends two threads to one element and none to others.")
    return f"{text}: check the index arithmetic and that every element is reached by exactly one thread."


def _unwritten_2d(mask: np.ndarray, own: list[dict]) -> str | None:
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    covers = _grid_reach(own)
    if mask[rows[0]:, :].all() and rows[-1] == mask.shape[0] - 1:
        r0, total = int(rows[0]), mask.shape[0]
        if covers is not None and covers[0] >= total and covers[1] >= mask.shape[1]:
            return (f"rows {_span(r0, total - 1)} of the output were never written, although your grid reaches "
                    f"{covers[0]} rows and {covers[1]} columns: the row index (y, the second of cuda.grid(2)) "
                    "or its guard is wrong for those rows.")
        return (f"rows {_span(r0, total - 1)} of the output were never written: does the grid cover all "
                f"{total} rows (blocks rounded up along y)?")
    if mask[:, cols[0]:].all() and cols[-1] == mask.shape[1] - 1:
        c0, total = int(cols[0]), mask.shape[1]
        if covers is not None and covers[0] >= mask.shape[0] and covers[1] >= total:
            return (f"columns {_span(c0, total - 1)} of the output were never written, although your grid "
                    f"reaches {covers[0]} rows and {covers[1]} columns: the column index (x) or its guard is "
                    "wrong for those columns.")
        return (f"columns {_span(c0, total - 1)} of the output were never written: does the grid cover all "
                f"{total} columns (blocks rounded up along x)?")
    return None


def _grid_reach(own: list[dict]) -> tuple[int, int] | None:
    """(rows, columns) the widest 2-D own launch reaches (y, x), or None."""
    two_d = [r for r in own if _is_2d(r)]
    if not two_d:
        return None
    r = max(two_d, key=lambda r: math.prod(r["grid"]) * math.prod(r["block"]))
    (gx, gy, _), (bx, by, _) = _pad3(r["grid"]), _pad3(r["block"])
    return gy * by, gx * bx


def observed_hint(case, bad, own: list[dict], fixed: list[dict], written: np.ndarray | None,
                  swapped_xy: bool = False) -> str:
    """The strongest sentence the evidence supports about this wrong output (see the module docstring)."""
    from lib.grading.check import hint as pattern_hint

    size = "x".join(map(str, case.size))
    empty = [r for r in own if math.prod(r["grid"]) * math.prod(r["block"]) == 0]
    if empty:
        return (f"your launch {_label(empty[0])} has no threads at size {size}: round the block count up, "
                "(n + threads - 1) // threads, so that a partial block is launched too.")
    wrong = bad.wrong_mask
    unwritten = None if written is None else (~written & wrong)
    fault = launch_fault(fixed, wrong, unwritten, case.size) if fixed else None
    if fault:
        return fault
    if bad.n_read_out or bad.n_nonfinite:
        return pattern_hint(bad)
    if bad.n_unwritten and bad.n_unwritten == bad.n_wrong and (bad.n_unwritten < wrong.size or own):
        if swapped_xy:
            return ("the grid covers the array (x along its columns, y along its rows), yet elements were "
                    "never written: the index arithmetic swaps x and y? cuda.grid(2) returns (x, y), and x "
                    "should run along the columns.")
        mask = wrong
        if mask.ndim == 1:
            return _unwritten_1d(mask, own)
        if mask.ndim == 2:
            said = _unwritten_2d(mask, own)
            if said:
                return said
        if mask.ndim >= 3:
            return _unwritten_batch(mask, own)
    return pattern_hint(bad)


def _unwritten_batch(mask: np.ndarray, own: list[dict]) -> str:
    """Never-written elements of a batch of matrices (and nothing else wrong)."""
    batch = mask.shape[0]
    per_matrix = mask.reshape(batch, -1)
    whole = per_matrix.all(axis=1)
    reach_z = max((_pad3(r["grid"])[2] * _pad3(r["block"])[2] for r in own), default=0)
    if whole.any() and not (per_matrix.any(axis=1) & ~whole).any():
        first = int(np.flatnonzero(whole)[0])
        if whole[first:].all():
            if reach_z == first:
                return (f"matrices {_span(first, batch - 1)} of the batch were never written: your grid's z "
                        f"dimension reaches {reach_z} of the {batch} matrices; launch one z block per matrix.")
            return (f"matrices {_span(first, batch - 1)} of the batch were never written, although your grid's z "
                    f"dimension reaches {reach_z}: check how the kernel picks its matrix (cuda.blockIdx.z).")
    count, first_at = int(mask.sum()), tuple(map(int, np.argwhere(mask)[0]))
    return (f"{count} of {mask.size} elements were never written (the first at {first_at}): check the index "
            "arithmetic and that every element of every matrix is reached by one thread.")


# --- IndexError: a guard that is there, and an index that is wrong -----------------------------------------

def _student_frame(tb):
    """The innermost traceback frame in the student's code (not numba's, not the book's), or None."""
    found = None
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/numba" not in f and "/lib/" not in f and "/site-packages/" not in f and "threading.py" not in f:
            found = tb
        tb = tb.tb_next
    return found


class _Eval(ast.NodeVisitor):
    """Evaluates an index expression from the frame's variables: names, numbers, + - * // % and unary -."""
    OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}

    def __init__(self, names: dict):
        self.names = names

    def value(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and isinstance(self.names.get(node.id), (int, np.integer)):
            return int(self.names[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in self.OPS:
            return self.OPS[type(node.op)](self.value(node.left), self.value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.value(node.operand)
        raise ValueError("not a plain index expression")


def index_hint(exc: BaseException) -> str:
    """The hint for an IndexError raised in a kernel: where no ``if`` encloses the line, guard it; where one
    does, the guard is not the problem: name the subscript that went out of range and what it was computed
    from, at the thread that raised."""
    plain = ("a thread indexed outside an array: guard with `if i < n:` (the grid is rounded up to whole "
             "blocks, so the last block has threads past the end).")
    try:
        tb = _student_frame(exc.__traceback__)
        if tb is None:
            return plain
        frame, lineno = tb.tb_frame, tb.tb_lineno
        lines, start = inspect.getsourcelines(frame.f_code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return plain
    target = lineno - start + 1
    guards, statement = [], None

    def visit(node, enclosing):
        nonlocal statement, guards
        for child in ast.iter_child_nodes(node):
            inner = enclosing
            if isinstance(child, (ast.If, ast.While)) and any(isinstance(c, ast.Compare) for c in ast.walk(child.test)):
                if getattr(child.test, "lineno", 0) != target:
                    inner = enclosing + [child]
            if isinstance(child, ast.stmt) and child.lineno <= target <= getattr(child, "end_lineno", child.lineno) \
                    and not isinstance(child, (ast.If, ast.While, ast.For, ast.FunctionDef)):
                statement, guards = child, inner
            visit(child, inner)

    visit(tree, [])
    if statement is None or not guards:
        return plain
    names = dict(frame.f_globals)
    names.update(frame.f_locals)
    evaluator = _Eval(names)
    offenders = []
    for node in ast.walk(statement):
        if not isinstance(node, ast.Subscript) or not isinstance(node.value, ast.Name):
            continue
        array = names.get(node.value.id)
        shape = getattr(array, "shape", None)
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if shape is None or len(parts) != len(shape):
            continue
        for axis, part in enumerate(parts):
            try:
                value = evaluator.value(part)
            except (ValueError, ZeroDivisionError, TypeError):
                continue
            if not -shape[axis] <= value < shape[axis]:
                used = sorted({n.id for n in ast.walk(part) if isinstance(n, ast.Name)})
                values = ", ".join(f"{u} = {int(names[u])}" for u in used
                                   if isinstance(names.get(u), (int, np.integer)))
                offenders.append((ast.unparse(node), ast.unparse(part), value, shape[axis], values))
    guard = ast.unparse(guards[-1].test)
    if not offenders:
        return (f"a thread indexed outside an array although the line is guarded (`if {guard}`): the guard "
                "keeps one index in range, but another index on that line is computed differently; check each "
                "subscript's formula against the array's length.")
    sub, expr, value, length, values = offenders[0]
    return (f"the guard `if {guard}` is there, yet `{sub}` asked for index {value} of an array of {length}: "
            f"that index is `{expr}`" + (f" (with {values})" if values else "") + ", computed differently from "
            "the guarded one: check its formula (the last valid index is the length - 1).")
