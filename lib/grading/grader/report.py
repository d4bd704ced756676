"""A grade report: the verdict, each checked size with the kernels launched and the tolerance used, and the
replay line; it renders itself as text and as HTML."""
from __future__ import annotations

import html
from dataclasses import dataclass, field

from lib.grading.grader.cases import CaseResult, launch_label

PASSED, FAILED, NOT_ATTEMPTED, TIMEOUT, ERROR = "passed", "failed", "not attempted yet", "timed out", "error"
INCOMPLETE = "incomplete"   # time ran out after every size checked had passed: not a pass, not a failure
MAX_LAUNCHES_SHOWN = 4


def size_label(size) -> str:
    return "×".join(str(s) for s in size)


def launches_label(launches: list) -> str:
    """The distinct launches of a case in order, e.g. 'block_scan[12, 128], add_offsets[11, 128] (+2 more)'."""
    labels = list(dict.fromkeys(launch_label(r) + (" (book)" if r["book"] else "") for r in launches))
    shown = ", ".join(labels[:MAX_LAUNCHES_SHOWN])
    more = len(labels) - MAX_LAUNCHES_SHOWN
    return shown + (f" (+{more} more)" if more > 0 else "") if labels else "no kernel launched"


@dataclass
class GradeReport:
    exercise: str
    status: str
    seed: int
    cases: list[CaseResult] = field(default_factory=list)
    message: str = ""
    hint: str = ""
    seconds: float = 0.0
    planned: int = 0                 # sizes the planner chose; fewer checked is never a pass
    notes: list[str] = field(default_factory=list)
    show_seed: bool = True           # False for a secret seed (instructor mode)
    perf: list = field(default_factory=list)   # PerfCheck of the exercise's performance property, if checked
    perf_note: str = ""              # how it was checked (or why not)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __bool__(self):
        return self.passed

    @property
    def perf_failed(self) -> bool:
        """A performance property was checked and failed (whether or not that fails the grade)."""
        return any(not c.passed for c in self.perf)

    def first_failure(self) -> str:
        return "" if self.passed else self.message

    @property
    def cases_passed(self) -> int:
        return sum(c.passed for c in self.cases)

    def _replay(self) -> str:
        if self.status in (PASSED, NOT_ATTEMPTED) or not self.show_seed:
            return ""
        return f"grade({self.exercise!r}, fn, seed={self.seed})"

    def __str__(self):
        head = {PASSED: "PASSED", NOT_ATTEMPTED: "NOT ATTEMPTED YET", INCOMPLETE: "INCOMPLETE"}.get(self.status,
                                                                                                  "FAILED")
        seed = f"seed {self.seed}, " if self.show_seed else ""
        lines = [f"{self.exercise}: {head}  ({seed}{self.seconds:.1f} s, {self.cases_passed} of "
                 f"{self.planned} sizes passed)"]
        for c in self.cases:
            lines.append(f"  {'ok  ' if c.passed else 'FAIL'} size {size_label(c.size):<16} {c.seconds:6.2f} s"
                         f"  {launches_label(c.launches)}")
            if not c.passed and c.message:
                lines.append(f"       {c.message}")
        tolerances = list(dict.fromkeys(c.tolerance for c in self.cases if c.tolerance))
        if tolerances:
            lines.append(f"  tolerance: {tolerances[-1]}")
        if self.perf:
            lines.append(f"  correct ✓; performance ({self.perf_note}):")
            lines.extend(f"    {c.label()}" for c in self.perf)
        elif self.perf_note:
            lines.append(f"  note: {self.perf_note}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if (self.message and self.status != PASSED and not any(not c.passed for c in self.cases)
                and not self.perf_failed):
            lines.append(f"  {self.message}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        if self._replay():
            lines.append(f"  replay: {self._replay()}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self):
        color = {PASSED: "#1a7f37", NOT_ATTEMPTED: "#6e7781", INCOMPLETE: "#9a6700"}.get(self.status, "#cf222e")
        title = {PASSED: "passed", NOT_ATTEMPTED: "not attempted yet"}.get(self.status, self.status)
        esc = html.escape
        rows = "".join(
            f"<tr><td>{'✓' if c.passed else '✗'}</td><td><code>{size_label(c.size)}</code></td>"
            f"<td>{c.seconds:.2f} s</td><td><code>{esc(launches_label(c.launches))}</code></td>"
            f"<td>{esc(c.message) if not c.passed else ''}</td></tr>"
            for c in self.cases)
        body = f"<table>{rows}</table>" if rows else ""
        shown = any(not c.passed for c in self.cases)
        msg = (f"<p>{esc(self.message)}</p>" if self.message and not self.passed and not shown
               and not self.perf_failed else "")
        tolerances = list(dict.fromkeys(c.tolerance for c in self.cases if c.tolerance))
        tol = f"<p><small>tolerance: {esc(tolerances[-1])}</small></p>" if tolerances else ""
        notes = "".join(f"<p><small>note: {esc(n)}</small></p>" for n in self.notes)
        if self.perf:
            items = "".join(f'<li><span style="color:{"#1a7f37" if c.passed else "#cf222e"}">'
                            f"{esc(c.name)} {'✓' if c.passed else '✗'}</span> <small>({esc(c.detail)})</small></li>"
                            for c in self.perf)
            notes = (f"<p>correct ✓; performance <small>({esc(self.perf_note)})</small>:</p>"
                     f"<ul style=\"margin:0\">{items}</ul>" + notes)
        elif self.perf_note:
            notes = f"<p><small>note: {esc(self.perf_note)}</small></p>" + notes
        tip = f"<p><b>Hint:</b> {esc(self.hint)}</p>" if self.hint else ""
        replay = f"<p><small>replay: <code>{esc(self._replay())}</code></small></p>" if self._replay() else ""
        seed = f"seed {self.seed}, " if self.show_seed else ""
        return (f'<div style="border-left:4px solid {color};padding:0.3em 0.8em;margin:0.5em 0">'
                f'<b style="color:{color}">{esc(self.exercise)}: {title}</b> '
                f'<small>({seed}{self.seconds:.1f} s, {self.cases_passed} of {self.planned} sizes passed)</small>'
                f'{body}{msg}{tip}{tol}{notes}{replay}</div>')

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "passed": self.passed, "status": self.status, "seed": self.seed,
                "seconds": round(self.seconds, 3), "first_failure": self.first_failure(),
                "cases_passed": self.cases_passed, "cases_planned": self.planned,
                "perf": [c.to_dict() for c in self.perf]}


def verdict(exercise: str, seed: int, results: list[CaseResult], planned: int, *, timed_out: bool = False,
            limit_s: float = 0.0, notes=(), seconds: float = 0.0, perf=None, perf_note: str = "",
            perf_gates: bool = False, running=None) -> GradeReport:
    """The report from the case results. Passed only when every planned size was checked and passed, and,
    where the exercise's performance property gates, every property checked passed (a property failure is
    reported apart: "correct ✓, coalesced ✗ (...)")."""
    report = GradeReport(exercise, FAILED, seed, list(results), planned=planned, notes=list(notes),
                         seconds=seconds, perf=list(perf or []), perf_note=perf_note)
    if any(c.not_attempted for c in results):
        report.status = NOT_ATTEMPTED
        report.message = next(c.message for c in results if c.not_attempted)
        report.cases = []
        return report
    _confirm_mistakes(results, exercise)
    failed = next((c for c in results if not c.passed), None)
    if failed is not None:
        report.status = ERROR if failed.raised else FAILED
        report.message = f"size {size_label(failed.size)}: {failed.message}"
        report.hint = failed.hint
        return report
    if timed_out and results:
        # Every size checked so far passed: the clock ran out, the answer did not go wrong. Not a pass (a check
        # that did not run is not one), and not a failure either.
        where = f" (size {size_label(running)})" if running else ""
        report.status = INCOMPLETE
        report.message = (f"incomplete: the {len(results)} size(s) checked all passed, and the time limit of "
                          f"{limit_s:.0f} s ran out during size {len(results) + 1} of {planned}{where}")
        report.hint = ("a slow machine or a slow kernel, not a wrong answer: run the check again (or on a GPU). "
                       "If that size should take seconds, look for an endless loop or a barrier that not every "
                       "thread reaches.")
        return report
    if timed_out:
        report.status = TIMEOUT
        report.message = f"did not return within {limit_s:.0f} s (size {len(results) + 1} of {planned})"
        report.hint = ("an endless loop, or threads waiting for each other? Every thread must reach each "
                       "syncthreads(); loops need an exit condition that every thread reaches.")
        return report
    if planned == 0 or len(results) < planned:
        report.message = (f"only {len(results)} of {planned} planned sizes were checked: a check that did not "
                          "run is not a pass")
        return report
    slow = [c for c in report.perf if not c.passed]
    if slow and perf_gates:
        report.message = "correct ✓, " + "; ".join(c.label() for c in slow)
        report.hint = perf_hint(exercise)
        return report
    report.status = PASSED
    return report


def _confirm_mistakes(results: list[CaseResult], exercise: str):
    """A known mistake stays named on a case only if no size checked contradicts its model: a size that
    passed, where the mistake would have failed, or a failed size whose wrong elements are not the ones the
    mistake gets wrong, rules it out (lib.grading.grader.cases.model_verdicts). A case whose every named
    mistake is ruled out says what was observed instead (CaseResult.observed_hint)."""
    ruled_out = {name for c in results for name, said in c.models.items() if said == "differs"}
    for c in results:
        if c.passed or not c.mistake:
            continue
        names = [n for n in c.mistake.split(" or ") if n not in ruled_out]
        if len(names) == len(c.mistake.split(" or ")):
            continue
        from lib.grading.grader.cases import name_mistake

        named = name_mistake(exercise, names) if names else None
        if named is None:
            c.mistake, c.hint = "", c.observed_hint or c.hint
        else:
            c.mistake, c.hint = named


def perf_hint(exercise: str) -> str:
    from lib.grading.exercises import EXERCISES

    ex = EXERCISES.get(exercise)
    return ex.perf.note if ex is not None and ex.perf is not None else ""
