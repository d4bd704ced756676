"""The copy of the student edition that every sandbox sees: ``lib/``, ``kernels/``, ``data/``, no chapters, and
no kernel that answers an exercise.

A submission runs in its own process, so the launch records that say which kernels ran are its own claims
(README, threat model): one that imports the book's ``kernels.intro.vector_add`` and rewrites its records
to say "mine" would pass ``vector_add``. So the grader's copy leaves out every definition of ``kernels/``
that answers an exercise a notebook may be graded on (:data:`ANSWERS`): each is replaced by a stand-in
that raises "... answers the exercise ..., so the grader's copy of the book leaves it out" when called or
launched. Importing it still works, so a chapter's other cells run; only what would be the answer fails.
What the exercises may use stays (``kernels.scan.scan_three_phase``, which the scan exercises build on).

The retired exercises (:data:`lib.grading.exercises.RETIRED`) are answered by kernels/ by definition (that is why
they retired): instructor mode gives no verdict on them (lib.grading.grader.remote), so their kernels stay.
tests/test_instructor_hostile.py checks that every entry is gone from the copy and that the launchers listed
answer their exercise in the checkout. The list came from calling every public function of kernels/ with
every exercise's arguments (and, for the batched transpose, once per matrix): only these answered one.
"""
from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

from lib.mode import ROOT

# kernels/ file -> {definition: the exercise it answers}. A 2-D transpose answers the batched exercise one
# matrix at a time (a loop over the batch on the host).
_TRANSPOSES = ["transpose_naive_kernel", "transpose_tiled_kernel", "transpose_padded_kernel",
               "transpose_swizzled_kernel", "transpose_batched_kernel", "transpose_wide_kernel",
               "transpose_vector_kernel", "transpose_naive", "transpose_tiled", "transpose_padded",
               "transpose_swizzled", "transpose_batched", "transpose_wide", "transpose_vector", "_torch_transpose"]
ANSWERS: dict[str, dict[str, str]] = {
    "kernels/intro.py": {"vector_add_kernel": "vector_add", "vector_add": "vector_add", "_torch_add": "vector_add"},
    "kernels/hardware.py": {"vector_add_float4_kernel": "vector_add", "vector_add_float4": "vector_add"},
    "kernels/memory.py": dict.fromkeys(_TRANSPOSES, "transpose_batched"),
}

_STAND_IN = '''

class _LeftOutOfTheGradersCopy:
    """A definition of the book that answers an exercise: left out of the copy the grader's sandboxes see."""

    def __init__(self, name, exercise):
        self.name, self.exercise = name, exercise

    def _refuse(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} answers the exercise {self.exercise}, so the grader's copy of the book "
                           "leaves it out: write your own")

    __call__ = _refuse

    def __getitem__(self, launch_configuration):
        return self._refuse

'''


def strip_answers(source: str, module: str, answers: dict[str, str]) -> str:
    """`source` (a kernels/ file) with each top-level definition named in `answers` (a function, a decorated
    kernel, or an assignment such as a functools.partial) replaced by a stand-in that refuses to run."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    spans = []
    for node in tree.body:
        names = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            first = node.lineno
        hit = [n for n in names if n in answers]
        if hit:
            spans.append((first, node.end_lineno, hit))
    missing = set(answers) - {n for *_, hit in spans for n in hit}
    if missing:
        raise ValueError(f"{module}: no top-level definition of {', '.join(sorted(missing))} to leave out")
    for first, last, hit in sorted(spans, reverse=True):
        stand_ins = "".join(f"{n} = _LeftOutOfTheGradersCopy({module + '.' + n!r}, {answers[n]!r})\n" for n in hit)
        lines[first - 1:last] = [stand_ins]
    first = min(f for f, *_ in spans)
    lines[first - 1:first - 1] = [_STAND_IN]
    return "".join(lines)


def build(dest: Path, copied: list[str]):
    """The sandboxes' read-only copy of the student edition in `dest`: `copied` (STUDENT_EDITION) from the
    checkout, without __pycache__, with the answers left out of kernels/, readable by everyone."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in copied:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    for rel, answers in ANSWERS.items():
        path = dest / rel
        module = rel.removesuffix(".py").replace("/", ".")
        path.write_text(strip_answers(path.read_text(), module, answers))
    for path in [dest, *dest.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
