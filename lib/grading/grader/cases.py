"""The grader's split API: plan sizes, prepare a case, execute it, judge it.

Instructor mode runs the student's function in a sandboxed process and computes the verdict in the grader's
own process; ``grade()`` composes the same four steps in one process::

    planner = plan(ex, seed, on_gpu=lib.ON_GPU)                 # trusted process
    rng = np.random.default_rng(seed)
    results = []
    for size in planner:
        case = prepare_case(ex, size, rng)                      # trusted: inputs + float64 reference
        execution = execute_case(fn, case.public())             # student's process (no reference in reach)
        #   ... across processes: np.savez(f, **execution.to_arrays()); Execution.from_arrays(np.load(f,
        #   allow_pickle=False)): numpy arrays and JSON only
        results.append(judge(case, execution, planner.history))  # trusted: validates, compares, diagnoses
        planner.observe(size, execution.launches, execution.seconds)
    report = verdict(ex.id, seed, results, len(planner.planned), notes=planner.notes)   # lib.grading.grader.report

The pieces:

* :func:`plan` -> :class:`Planner`: which sizes to check. It starts from the exercise's fixed sizes (a size
  of 1, ragged ones, plus ``extra_sizes``; ``secret=True`` jitters them from the seed), watches the student's
  launches (:meth:`Planner.observe`), and on the simulator grows the size until the checks span at least
  three blocks of whatever the student launches, and past the reach of any launch that does not grow with
  the input, and checks one size of its own schedule (drawn from the seed, whatever the launches claim);
  every grown size is bounded by the exercise's ``sim_work`` (work, not time: the plan is the same on any
  machine); what it could not reach goes to :attr:`Planner.notes`. Iterate it lazily: the next size
  depends on the last observation.
* :func:`prepare_case` -> :class:`Case`: inputs (float32 numpy arrays) and the float64 reference. Only
  :meth:`Case.public` (exercise, size, inputs, output shape) goes to the student's process.
* :func:`execute_case` -> :class:`Execution` (the student's process): copies the inputs to the device, fills
  the output with NaN, calls ``fn(*inputs, out)`` with its launches recorded (:mod:`lib.runtime.launches`), and
  returns plain data: the outputs, the inputs as they were afterwards, the launches (:func:`launch_record`
  dicts), the exception text if it raised. When NaN comes back it runs again with another fill
  (:data:`SENTINEL`), so the judge can tell "never written" from "computed NaN" and from "added into the
  output without setting it first".
* :func:`judge` (case, execution, history) -> :class:`CaseResult` (the trusted process). `history` is
  ``Planner.history``, the earlier sizes' launches, to recognise a launch that does not grow with the input.
  It validates the execution (outcome, types, shapes, dtypes, launch records: it may come from an untrusted
  process; a malformed one fails the case), requires a kernel of the student's own (a launch whose kernel is
  not from the book's kernels/ or lib/), checks the inputs were left alone, compares with a tolerance from
  error analysis (:mod:`lib.grading.check`) and diagnoses: unwritten elements, NaN/inf computed, a launch that does
  not grow with the input, swapped x/y, or a known mistake when the output equals what a
  :class:`lib.grading.exercises.Variant` produces. Launch records from an untrusted process are its own claims: they
  can make a check fail or loosen the error model's structure, not make wrong outputs pass.
"""
from __future__ import annotations

import json
import math
import time
import traceback
from dataclasses import asdict, dataclass, field

import numpy as np

from lib import mode
from lib.grading.check import compare
from lib.grading.exercises import EXERCISES
from lib.grading.grader.diagnose import index_hint, observed_hint
from lib.grading.spec import Exercise, Variant

SENTINEL = np.float32(-1234.5677)   # the second fill: finite, with an ulp small enough that adding to it shows
SIM_WORK_SCALE = 1.0                # multiplies every exercise's sim_work (the largest grown size's work)
SCHEDULE_RANGE = (0.5, 1.0)         # the planner's own size: this fraction of sim_work, drawn from the seed
DECISIVE_FACTOR = 2.0               # a size that reaches past a fixed launch may go this far past sim_work
MIN_BLOCKS = 3                      # the checks span at least this many blocks of the student's largest launch
MAX_STEPS = 4                       # grown sizes at most
LAUNCH_KEYS = ("name", "module", "qualname", "grid", "block", "shared_bytes", "book")
MAX_LAUNCHES = 10_000               # launches kept per case; a longer list is refused as malformed


def variants(exercise_id: str) -> list[Variant]:
    """The known-wrong variants of an exercise (lib.grading.variants.VARIANTS, imported lazily; none if absent)."""
    try:
        from lib.grading.variants import VARIANTS
    except ImportError:
        return []
    return list(VARIANTS.get(exercise_id, []))


class GradeTimeout(Exception):
    """Raised inside a student's code that outlived the check's time limit."""


# --- plain data ------------------------------------------------------------------------------------------

def launch_record(launch) -> dict:
    """A :class:`lib.runtime.launches.Launch` as plain data (what crosses a process boundary)."""
    return {"name": str(launch.name), "module": str(launch.module), "qualname": str(launch.qualname),
            "grid": [int(g) for g in launch.grid], "block": [int(b) for b in launch.block],
            "shared_bytes": int(launch.shared_bytes), "book": bool(launch.book)}


def launch_threads(record: dict) -> int:
    return math.prod(record["grid"]) * math.prod(record["block"])


def launch_label(record: dict) -> str:
    """name[grid, block] with the trailing 1s of grid and block dropped: add_kernel[16, 256]."""
    def dims(v):
        v = list(v)
        while len(v) > 1 and v[-1] == 1:
            v.pop()
        return "x".join(map(str, v)) if len(v) > 1 else str(v[0])
    return f"{record['name']}[{dims(record['grid'])}, {dims(record['block'])}]"


def _config(record: dict) -> tuple:
    return record["name"], tuple(record["grid"]), tuple(record["block"])


@dataclass
class Case:
    """One size of one exercise: the inputs and, kept in the trusted process, the float64 reference."""
    exercise: str
    size: tuple
    inputs: tuple
    expected: np.ndarray
    out_shape: tuple

    def public(self) -> "Case":
        """What the student's process may see: everything but the reference."""
        return Case(self.exercise, self.size, self.inputs, np.empty(0), self.out_shape)


@dataclass
class Execution:
    """What happened when the student's function ran on one case (plain data)."""
    outcome: str                                   # "ran" | "raised" | "not attempted" | "timeout"
    outputs: list = field(default_factory=list)    # float32 arrays, one per fill (NaN, then SENTINEL)
    fills: list = field(default_factory=list)      # the fill of each output, as float
    inputs_after: list = field(default_factory=list)
    launches: list = field(default_factory=list)   # launch_record dicts, in launch order
    error: str = ""                                # "your code raised ..." when outcome is "raised"
    error_hint: str = ""
    seconds: float = 0.0
    sites: list = field(default_factory=list)      # traced runs only (lib.grading.grader.perf.site_rows)

    def to_arrays(self) -> dict:
        """A dict of numpy arrays for np.savez (load with allow_pickle=False, then :meth:`from_arrays`)."""
        meta = {"outcome": self.outcome, "fills": [float(f) for f in self.fills], "launches": self.launches,
                "error": self.error, "error_hint": self.error_hint, "seconds": float(self.seconds),
                "n_outputs": len(self.outputs), "n_inputs": len(self.inputs_after), "sites": self.sites}
        arrays = {"meta": np.array(json.dumps(meta))}
        arrays.update({f"output{i}": np.asarray(o) for i, o in enumerate(self.outputs)})
        arrays.update({f"input{i}": np.asarray(x) for i, x in enumerate(self.inputs_after)})
        return arrays

    @classmethod
    def from_arrays(cls, arrays) -> "Execution":
        """The inverse of :meth:`to_arrays`; raises ValueError on anything malformed."""
        try:
            meta = json.loads(str(arrays["meta"][()]))
            outputs = [np.asarray(arrays[f"output{i}"]) for i in range(int(meta["n_outputs"]))]
            inputs = [np.asarray(arrays[f"input{i}"]) for i in range(int(meta["n_inputs"]))]
            return cls(str(meta["outcome"]), outputs, list(meta["fills"]), inputs, list(meta["launches"]),
                       str(meta["error"]), str(meta["error_hint"]), float(meta["seconds"]),
                       list(meta.get("sites", [])))
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed execution record ({type(exc).__name__}: {exc})") from None


@dataclass
class CaseResult:
    size: tuple
    passed: bool
    seconds: float
    message: str = ""
    hint: str = ""
    raised: bool = False          # the student's code raised (rather than computing wrong values)
    not_attempted: bool = False
    launches: list = field(default_factory=list)
    tolerance: str = ""
    mistake: str = ""             # the name of the known variant the output matches, if any
    observed_hint: str = ""       # what was observed, without naming a mistake (lib.grading.grader.diagnose)
    models: dict = field(default_factory=dict)   # variant name -> how its model compares (model_verdicts)

    def to_dict(self) -> dict:
        return asdict(self)


# --- planning -------------------------------------------------------------------------------------------

class Planner:
    """Yields the sizes to check, one at a time; :meth:`observe` tells it what the student launched.

    ``for size in planner: ...; planner.observe(size, launches, seconds)``. The fixed sizes come first. On the
    simulator it then grows the last size (the exercise's parallel dimensions times a factor) while

    (a) a launch that grows with the input has fewer than MIN_BLOCKS blocks, or
    (b) a launch kept the same grid and block at every size and the work has not yet reached MIN_BLOCKS times
        its threads (or 1.1 times its threads times the elements per block of a launch that grows: more
        partials than a one-block second pass has threads);

    and, whatever the launches say (they are the submission's own claims), it checks one size of its own
    schedule: a fraction of the exercise's ``sim_work`` drawn from the seed (SCHEDULE_RANGE), so that a
    launch that does not really grow is found even when its records say it does.

    Sizes are sized by work, never by the clock: the work of a size is the product of its dimensions, and
    no grown size exceeds ``ex.sim_work`` (times SIM_WORK_SCALE), except one size that reaches past a launch
    that stayed the same, which may go to DECISIVE_FACTOR times that. So the plan is the same on a fast
    machine and a loaded one (a seed replays it), its memory is bounded whatever the submission claims, and a
    slow machine only takes longer (the time limit then says "incomplete", not "failed": lib.grading.grader.report).
    """

    def __init__(self, ex: Exercise, fixed: list, *, grow: bool, seed: int = 0, work_cap: float | None = None,
                 max_steps: int = MAX_STEPS):
        self.ex = ex
        self.fixed = list(fixed)
        self.grow = grow and ex.grow is not None
        if work_cap is None and self.grow and not ex.sim_work:
            raise ValueError(f"{ex.id}: the exercise declares no sim_work (the largest size the simulator grows it "
                             "to): set it in lib/grading/exercises.py")
        self.work_cap = float((ex.sim_work or 0) * SIM_WORK_SCALE if work_cap is None else work_cap)
        self.max_steps = max_steps
        lo, hi = SCHEDULE_RANGE
        self.schedule_fraction = lo + (hi - lo) * float(np.random.default_rng([int(seed) & 0xFFFFFFFF, 2]).random())
        self.history: list[tuple[tuple, list, float]] = []   # (size, launches, seconds)
        self.planned: list[tuple] = []
        self.notes: list[str] = []
        self._steps = 0
        self._forced = False
        self._scheduled = False

    def __iter__(self):
        return self

    def __next__(self) -> tuple:
        size = self._next()
        if size is None:
            raise StopIteration
        self.planned.append(size)
        return size

    def observe(self, size, launches: list, seconds: float):
        self.history.append((tuple(size), list(launches), float(seconds)))

    def fixed_launches(self) -> list[dict]:
        """The student's launches that kept the same name, grid and block at every size checked."""
        return fixed_launches([(s, l) for s, l, _ in self.history])

    def _next(self):
        if len(self.planned) < len(self.fixed):
            return self.fixed[len(self.planned)]
        if not self.grow or self._steps >= self.max_steps or len(self.history) < len(self.planned):
            return None
        size, launches, _ = max(self.history, key=lambda h: work(h[0]))
        bigger = self._from_launches(size, launches) if launches else None
        if bigger is None and not self._scheduled:  # the grader's own size, whatever the launches say
            self._scheduled = True
            bigger = self._largest_within(size, self.schedule_fraction * self.work_cap)
        if bigger is None:
            return None
        self._steps += 1
        return bigger

    def _from_launches(self, size, launches):
        factor = self._factor(size, launches)
        if factor is None:
            return None
        target = self.ex.grow(size, factor)
        if work(target) <= self.work_cap:
            return target
        # Past the largest size checked here. If no size so far reaches past a launch that stayed the same at
        # every size, or spans two blocks, the checks could not tell a launch that ignores the size from a
        # right one: the smallest size that does is checked, up to DECISIVE_FACTOR times the cap (only the
        # launch's own coverage: not the one-block-second-pass rule, whose sizes can be huge).
        decisive = None if self._forced else self._factor(size, launches, blocks=2, fixed_multiple=1.1, margin=1.1,
                                                          partials=False)
        if decisive is not None and work(self.ex.grow(size, decisive)) <= DECISIVE_FACTOR * self.work_cap:
            self._forced = True
            reach = self.ex.grow(size, decisive)
            if work(reach) > self.work_cap:
                self.notes.append("one size was checked past the largest the simulator checks for this exercise: "
                                  "the smallest that reaches past your launch")
            return reach
        largest = self._largest_within(size, self.work_cap)
        note = ("larger sizes were not checked: your launches call for sizes past the largest the simulator "
                f"checks for this exercise ({_work_label(self.work_cap)} elements of work); a GPU checks larger ones")
        if note not in self.notes:
            self.notes.append(note)
        return largest

    def _largest_within(self, size, cap):
        """The largest ex.grow(size, f), f >= 1.5, whose work stays within `cap`; None if even 1.5x does not."""
        best, factor = None, 1.5
        while factor < 1e7:
            bigger = self.ex.grow(size, factor)
            if work(bigger) > cap:
                break
            best = bigger
            factor *= 1.2
        if best is None or work(best) <= max(work(h[0]) for h in self.history):
            return None
        return best

    def _units(self, size) -> int:
        """The work the launches spread over: the product of the dimensions that grow (rows for a
        row-wise exercise, rows x columns for a 2-D one, elements for 1-D)."""
        bigger = self.ex.grow(size, 2.0)
        return math.prod(s for s, b in zip(size, bigger) if b > s) or 1

    def _factor(self, size, launches, blocks: int = MIN_BLOCKS, fixed_multiple: float = MIN_BLOCKS,
                margin: float = 2.0, partials: bool = True):
        """How much larger the next size must be, or None when the checks already span enough: `blocks` blocks
        of the widest launch that grows with the input (aiming at `margin` times that), and `fixed_multiple`
        times the threads of a launch that stayed the same (a launch of one block that stays one block is
        judged by its threads: a grid-stride loop of one block is right at any size, and growing the size
        until it spans three blocks would never end)."""
        units = self._units(size)
        fixed = self.fixed_launches()
        fixed_configs = {_config(f) for f in fixed}
        growing = [r for r in launches if _config(r) not in fixed_configs]
        factor = 1.0
        if growing:
            have = math.prod(max(growing, key=lambda r: math.prod(r["grid"]))["grid"])
            if have < blocks:
                factor = max(factor, margin * blocks / max(have, 1))
        per_block = max((units / max(math.prod(r["grid"]), 1) for r in growing), default=1.0)
        bigger = self.ex.grow(size, 2.0)
        parallel = [d for d, b in zip(size, bigger) if b > d] or [units]
        dims = len(parallel)
        for r in fixed:
            need = max(fixed_multiple * launch_threads(r),
                       1.1 * launch_threads(r) * per_block if growing and partials else 0)
            if units < need:
                factor = max(factor, need / units)
            # A launch that stays the same may give a thread to a row (one query, one softmax row) rather than
            # to an element: its reach is then its threads (its widest side, for a 2-D launch) along one
            # dimension, and the smallest dimension that grows must pass it.
            (gx, gy, gz), (bx, by, bz) = [tuple(list(v) + [1] * (3 - len(v))) for v in (r["grid"], r["block"])]
            side = launch_threads(r) if gy * by == 1 and gz * bz == 1 else max(gx * bx, gy * by, gz * bz)
            if dims > 1 and min(parallel) < 1.1 * side:
                factor = max(factor, (1.1 * side / min(parallel)) ** dims)
        if factor <= 1.0:
            return None
        # the parallel dimensions grow by the factor's root when there are several of them
        return max(factor ** (1.0 / dims) * 1.1, 1.5)


def work(size) -> int:
    """The planner's measure of a size: the product of its dimensions (elements for 1-D, M·N·K for a matmul,
    rows·cols·d for attention), proportional to what the simulator does for a kernel that reads its inputs."""
    return math.prod(int(d) for d in size)


def _work_label(n: float) -> str:
    return f"{n / 1e6:.3g} M" if n >= 1e6 else f"{n / 1e3:.3g} k"


def plan(ex: Exercise | str, seed: int, *, on_gpu: bool, secret: bool = False, extra_sizes=(),
         work_cap: float | None = None) -> Planner:
    """The sizes to check for `ex`: the fixed ones (GPU or simulator list, plus `extra_sizes`), then, on the
    simulator, larger ones chosen from the observed launches and one from the grader's own schedule.
    `secret` jitters the fixed sizes from the seed (so a student cannot replay the hidden ones) while keeping
    the size of 1; the schedule's size is drawn from the seed either way."""
    ex = EXERCISES[ex] if isinstance(ex, str) else ex
    fixed = [tuple(int(d) for d in s) for s in (ex.gpu_cases if on_gpu else ex.sim_cases)]
    fixed += [tuple(int(d) for d in s) for s in extra_sizes]
    for s in fixed:
        if len(s) != len(fixed[0]) or any(d < 1 for d in s):
            raise ValueError(f"{ex.id}: size {s} does not fit the exercise's sizes like {fixed[0]}")
    if secret:
        rng = np.random.default_rng([seed, 1])
        fixed = [tuple(d if d == 1 else d + int(rng.integers(0, max(2, d // 8))) for d in s) for s in fixed]
    return Planner(ex, fixed, grow=not on_gpu, seed=seed, work_cap=work_cap)


# --- preparing and executing -------------------------------------------------------------------------------

def prepare_case(ex: Exercise | str, size, rng: np.random.Generator) -> Case:
    ex = EXERCISES[ex] if isinstance(ex, str) else ex
    inputs = tuple(np.ascontiguousarray(x) for x in ex.make_inputs(tuple(size), rng))
    expected = np.asarray(ex.reference(*inputs), dtype=np.float64)
    return Case(ex.id, tuple(size), inputs, expected, tuple(ex.out_shape(*inputs)))


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - an exception whose __str__ raises still gets a report
        return "(its message could not be shown: str() of it raised)"


def _student_location(tb) -> str:
    """The innermost frame of the traceback that is the student's code (not numba's, not the book's)."""
    frames = traceback.extract_tb(tb)
    for frame in reversed(frames):
        f = frame.filename.replace("\\", "/")
        if "/numba" not in f and "/lib/" not in f and "/site-packages/" not in f and "threading.py" not in f:
            return f"line {frame.lineno}: {frame.line}" if frame.line else f"line {frame.lineno}"
    return ""


def describe_exception(exc: BaseException) -> str:
    try:
        loc = _student_location(exc.__traceback__)
    except BaseException:  # noqa: BLE001
        loc = ""
    text = f"{type(exc).__name__}: {_safe_str(exc)}".strip()
    return f"your code raised {text}" + (f" (at {loc})" if loc else "")


def exception_hint(exc: BaseException) -> str:
    text = _safe_str(exc)
    if isinstance(exc, IndexError):
        return index_hint(exc)
    if "values must be >= 1" in text:  # cuda.core's words (and the simulator's) for a grid or block with a 0
        return ("a launch needs at least one block of one thread: round the block count up, "
                "(n + threads - 1) // threads, so that a small n still gets one block.")
    if "TypingError" in type(exc).__name__ or "Failed in cuda mode pipeline" in text or "compile" in text:
        return "numba could not compile the kernel for a GPU: read the first lines of the message for the failing line."
    if "race" in text.lower() or "uninitiali" in text.lower() or "never written" in text.lower():
        return "the simulator's debugger caught this: it names both source lines involved."
    if "CUDA_ERROR" in text or "CudaAPIError" in type(exc).__name__:
        return "a CUDA error leaves the GPU context unusable: restart the notebook's kernel after fixing it."
    return ""


def execute_case(fn, case: Case, *, stop=None, schedule=None) -> Execution:
    """Run ``fn(*inputs, out)`` on the device (the student's process). `stop` (a threading.Event) set by a
    supervisor means a GradeTimeout raised in here is the supervisor's, not the student's. On the simulator,
    `schedule` (ints, e.g. ``[seed, case number]``) seeds the order its blocks and threads run in
    (:func:`lib.runtime.simulator.schedule_seed`), so that a replay of the case replays that order."""
    if schedule is not None and mode.SIMULATOR:
        from lib.runtime import simulator

        with simulator.schedule_seed([int(v) for v in schedule]):
            return execute_case(fn, case, stop=stop)
    from numba import cuda

    from lib.runtime import launches as launch_hooks, quiet_launches

    t0 = time.perf_counter()
    result = Execution("ran")
    for fill in (np.float32(np.nan), SENTINEL):
        d_inputs = [cuda.to_device(x) for x in case.inputs]
        d_out = cuda.to_device(np.full(case.out_shape, fill, dtype=np.float32))
        try:
            # the grader's small sizes are deliberate: numba's low-occupancy warning is not the reader's concern
            with launch_hooks.record() as seen, quiet_launches.on_purpose():
                fn(*d_inputs, d_out)
                cuda.synchronize()
        except NotImplementedError:
            return Execution("not attempted", seconds=time.perf_counter() - t0)
        except GradeTimeout as exc:
            if stop is not None and stop.is_set():
                raise
            return Execution("raised", error=describe_exception(exc) + ": GradeTimeout is the grader's own "
                             "signal, not an answer", launches=[launch_record(r) for r in seen],
                             seconds=time.perf_counter() - t0)
        except BaseException as exc:  # noqa: BLE001 - every failure of student code becomes a report
            if stop is not None and stop.is_set():
                raise GradeTimeout() from None
            return Execution("raised", error=describe_exception(exc), error_hint=exception_hint(exc),
                             launches=[launch_record(r) for r in seen], seconds=time.perf_counter() - t0)
        out = d_out.copy_to_host()
        result.outputs.append(out)
        result.fills.append(float(fill))
        if not result.inputs_after:
            result.inputs_after = [d.copy_to_host() for d in d_inputs]
            result.launches = [launch_record(r) for r in seen[:MAX_LAUNCHES]]  # the first ones tell enough
        if not np.isnan(out).any():
            break  # nothing left in doubt: no second run
    result.seconds = time.perf_counter() - t0
    return result


# --- judging -----------------------------------------------------------------------------------------------

def _validate(case: Case, ex: Exercise, execution) -> str | None:
    """Why this execution record cannot be trusted as well-formed, or None."""
    if not isinstance(execution, Execution):
        return f"expected an Execution, got {type(execution).__name__}"
    if execution.outcome not in ("ran", "raised", "not attempted", "timeout"):
        return f"unknown outcome {execution.outcome!r}"
    if not isinstance(execution.launches, list) or len(execution.launches) > MAX_LAUNCHES:
        return "the launch list is not a list of at most 10000 launches"
    for r in execution.launches:
        if not isinstance(r, dict) or set(r) != set(LAUNCH_KEYS):
            return "a launch record does not have the expected fields"
        if not (all(isinstance(r[k], str) for k in ("name", "module", "qualname")) and isinstance(r["book"], bool)
                and isinstance(r["shared_bytes"], int) and r["shared_bytes"] >= 0
                and all(isinstance(v, list) and len(v) in (1, 2, 3)
                        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in v)
                        for v in (r["grid"], r["block"]))):
            return "a launch record has a malformed name, grid, block or book flag"
    if execution.outcome != "ran":
        return None
    if not 1 <= len(execution.outputs) <= 2 or len(execution.fills) != len(execution.outputs):
        return "expected one or two outputs with their fills"
    for o in execution.outputs:
        if not isinstance(o, np.ndarray) or o.dtype != np.float32 or o.shape != tuple(case.out_shape):
            return f"an output is not a float32 array of shape {tuple(case.out_shape)}"
    if len(execution.inputs_after) != len(case.inputs):
        return f"expected {len(case.inputs)} inputs after the run"
    for x, y in zip(case.inputs, execution.inputs_after):
        if not isinstance(y, np.ndarray) or y.dtype != x.dtype or y.shape != x.shape:
            return "an input after the run has the wrong type, dtype or shape"
    return None


def launch_structure(launches: list) -> dict | None:
    """{"threads", "block_threads"} of the student's widest own launch: the structure the tolerance's error
    model assumes (None when no kernel of the student's own ran)."""
    own = [r for r in launches if not r["book"]]
    if not own:
        return None
    widest = max(own, key=launch_threads)
    return {"threads": max(launch_threads(widest), 1), "block_threads": max(math.prod(widest["block"]), 1)}


def judge(case: Case, execution: Execution, history=()) -> CaseResult:
    """The verdict on one execution, in the trusted process. `history`: (size, launches, seconds) of the
    earlier sizes (Planner.history), to recognise a launch that does not grow with the input."""
    ex = EXERCISES[case.exercise]
    result = CaseResult(case.size, False, 0.0)
    problem = _validate(case, ex, execution)
    if problem:
        result.message = f"the run returned a malformed result ({problem})"
        return result
    result.seconds = execution.seconds
    result.launches = [dict(r) for r in execution.launches]
    if execution.outcome == "not attempted":
        result.not_attempted = True
        result.message = f"write {ex.signature} in the exercise cell above, then run this cell again"
        return result
    if execution.outcome == "timeout":
        result.message = "did not return within the time limit"
        return result
    if execution.outcome == "raised":
        result.raised = True
        result.message = execution.error or "your code raised an exception"
        result.hint = execution.error_hint
        return result
    own = [r for r in execution.launches if not r["book"]]
    if not execution.launches:
        result.message = ("no kernel ran: your function must launch a kernel of your own "
                          "(kernel[blocks, threads](...)); an answer computed on the host (numpy) or by "
                          "another library (torch, cupy) does not count")
        return result
    if not own:
        names = ", ".join(sorted({f"{r['module']}.{r['name']}" for r in execution.launches}))
        result.message = (f"only the book's own kernels ran ({names}): write and launch a kernel of your own "
                          "for this exercise")
        return result
    for i, (x, after) in enumerate(zip(case.inputs, execution.inputs_after)):
        if not np.array_equal(after.view(np.uint8), x.view(np.uint8)):
            where = tuple(int(j) for j in np.argwhere(after != x)[0]) if (after != x).any() else ()
            result.message = (f"input `{ex.names[i]}` was modified (first at {where}): a kernel must only "
                              "write its output")
            return result
    tol = ex.tolerance(*case.inputs, case.expected, launch=launch_structure(execution.launches))
    result.tolerance = tol.describe(case.expected)
    actual = execution.outputs[0]
    bad = compare(actual, case.expected, tol.rtol, tol.atol, tol.scale)
    if bad is None:
        result.passed = True
        # the known mistakes that this size rules out (each would have failed here): a mistake is named
        # only when its model reproduces every size checked (lib.grading.grader.report.verdict)
        result.models = model_verdicts(ex, case, execution, tol)
        return result
    written = _written_mask(execution)
    if written is not None:
        nan_or_inf = ~np.isfinite(actual) & np.isfinite(case.expected)
        bad.n_unwritten = int((nan_or_inf & ~written).sum())
        bad.n_nonfinite = int((nan_or_inf & written).sum())
        bad.n_read_out = int(_reads_out(execution).sum())
    result.message = bad.describe()
    fixed = fixed_launches([(s, l) for s, l, *_ in history] + [(case.size, execution.launches)])
    swapped = bool(bad.n_unwritten) and len(case.out_shape) == 2 and _grid_covers(case, own)
    result.observed_hint = observed_hint(case, bad, own, fixed, written, swapped_xy=swapped)
    result.hint = result.observed_hint
    result.models = model_verdicts(ex, case, execution, tol)
    mistake = name_mistake(ex, [n for n, said in result.models.items() if said == REPRODUCES])
    if mistake is not None and not any(launch_threads(r) == 0 for r in own):
        result.mistake, result.hint = mistake
    return result


def _grid_covers(case: Case, own: list[dict]) -> bool:
    """Some 2-D launch has at least as many threads along x as a 2-D array (output or input) has columns, and
    along y as it has rows: the block count was rounded up, so unwritten elements come from the indexing."""
    shapes = [tuple(case.out_shape)] + [x.shape for x in case.inputs if x.ndim == 2]
    for r in own:
        grid, block = list(r["grid"]) + [1, 1], list(r["block"]) + [1, 1]
        cover_x, cover_y = grid[0] * block[0], grid[1] * block[1]
        if cover_y > 1 and any(cover_x >= cols and cover_y >= rows for rows, cols in shapes):
            return True
    return False


def _written_mask(execution: Execution):
    """Elements the student's code wrote (None without a second run): an element that still holds the
    fill in both runs was never written."""
    if len(execution.outputs) < 2:
        return None
    first, second = execution.outputs
    untouched = np.isnan(first) & (second.view(np.uint32) == np.float32(SENTINEL).view(np.uint32))
    return ~untouched


def _reads_out(execution: Execution):
    """Elements whose value depends on what the output held before the call (added into, not stored)."""
    if len(execution.outputs) < 2:
        return np.zeros(0, bool)
    first, second = execution.outputs
    untouched = second.view(np.uint32) == np.float32(SENTINEL).view(np.uint32)
    return np.isnan(first) & ~np.isnan(second) & ~untouched


def fixed_launches(runs) -> list[dict]:
    """Of the last run's launches, the student's own that kept the same name, grid and block at every size of
    `runs` ((size, launches) pairs, at least two different sizes): the ones that do not grow with the input."""
    runs = [(tuple(s), l) for s, l in runs if l]
    if len({s for s, _ in runs}) < 2:
        return []
    common = set.intersection(*({_config(r) for r in l if not r["book"]} for _, l in runs))
    return [r for r in runs[-1][1] if _config(r) in common]


REPRODUCES, SAME_ELEMENTS, DIFFERS = "reproduces", "same elements", "differs"


def model_verdicts(ex: Exercise, case: Case, execution: Execution, tol) -> dict[str, str]:
    """For each known-wrong variant whose model says something on this case, how it compares with the
    student's output: REPRODUCES (every element within the check's own bound), SAME_ELEMENTS (wrong in
    exactly the same elements, and within a hundredth of the mistake's own error there, but outside the
    check's bound: a model that is exact only at small sizes, such as a sum added onto the fill, whose
    rounding grows with the size) or DIFFERS (other elements or other values are wrong, or, at a size the
    student passed, the mistake would have failed). A model is asked for each fill the output
    had (NaN, then SENTINEL when there was a second run), with ``fill=`` when it takes one. A model that
    declines (None), or that is right on these inputs (it equals the reference: it tells nothing), is left
    out. A mistake is named on a case where it REPRODUCES, and only if no size checked DIFFERS
    (lib.grading.grader.report.verdict)."""
    ref = np.abs(np.asarray(case.expected, np.float64))
    scale = ref if tol.scale is None else tol.scale  # the check's own bound
    actual_bad = [compare(actual, case.expected, tol.rtol, tol.atol, scale) for actual in execution.outputs]
    found = {}
    for v in variants(ex.id):
        verdicts = []
        for fill, actual, bad in zip(execution.fills, execution.outputs, actual_bad):
            try:
                try:
                    model = v.model(*case.inputs, execution.launches, fill=fill)
                except TypeError:
                    model = v.model(*case.inputs, execution.launches) if math.isnan(fill) else None
            except Exception:  # noqa: BLE001 - a variant that cannot model this case says nothing
                model = None
            if model is None or np.shape(model) != actual.shape:
                continue
            model = np.asarray(model, dtype=np.float64)
            model_bad = compare(model, case.expected, tol.rtol, tol.atol, scale)
            if model_bad is None:
                continue
            if compare(actual, model, tol.rtol, tol.atol, _own_scale(model, ref, scale, tol.scale is None)) is None:
                verdicts.append(REPRODUCES)
            elif bad is not None and np.array_equal(bad.wrong_mask, model_bad.wrong_mask) and _near(
                    actual, model, case.expected, bad.wrong_mask):
                verdicts.append(SAME_ELEMENTS)
            else:
                verdicts.append(DIFFERS)
        if verdicts:
            found[v.name] = (DIFFERS if DIFFERS in verdicts else SAME_ELEMENTS if SAME_ELEMENTS in verdicts
                             else REPRODUCES)
    return found


def _own_scale(model, ref, scale, relative: bool):
    """The check's bound for an output judged against a model: its rounding scales with the values the mistake
    puts there (M and L swapped puts a sum of exponentials where the reference `ref` has a maximum near 0). A
    relative bound is taken of both magnitudes; a bound given as an absolute scale (rtol = 1 × max_row_sum's
    rounding bound) grows by the ratio of the model's magnitude to the reference's, never |model| itself: with
    rtol = 1 that would admit any output."""
    with np.errstate(invalid="ignore", divide="ignore"):
        size = np.where(np.isfinite(model), np.abs(model), 0.0)
        if relative:
            return np.fmax(scale, size)
        return scale * np.fmax(np.where(np.isfinite(ref) & (ref > 0), size / ref, 1.0), 1.0)


def _near(actual, model, expected, wrong) -> bool:
    """On the wrong elements, the output is far nearer the model than the model is to the reference (within a
    hundredth of the mistake's own error): the mistake is this one, its model's rounding only is off."""
    a, m, e = (np.asarray(v, np.float64)[wrong] for v in (actual, model, expected))
    with np.errstate(invalid="ignore"):
        off, own = np.abs(a - m), np.abs(m - e)
    finite = np.isfinite(off) & np.isfinite(own)
    return bool(finite.all() and (off <= 0.01 * own).all())


def name_mistake(ex: Exercise | str, names: list[str]) -> tuple[str, str] | None:
    """(name, sentence) for the known mistakes `names` (those whose models reproduce the output), else None.
    When two or more match, these inputs cannot tell those mistakes apart (e.g. a ReLU applied before the
    bias and no ReLU at all, where every dot product is positive): the case names them all, "A or B", with
    each one's sentence; a case whose inputs separate them names one."""
    ex_id = ex if isinstance(ex, str) else ex.id
    sentences = {v.name: v.mistake for v in variants(ex_id)}
    matches = [(n, sentences[n]) for n in names if n in sentences]
    if len(matches) <= 1:
        return matches[0] if matches else None
    return (" or ".join(name for name, _ in matches),
            f"{len(matches)} known mistakes give this output on these inputs: "
            + "; or ".join(f"{name} ({sentence})" for name, sentence in matches))
