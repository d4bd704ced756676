"""Module paths of earlier editions, kept so that saved notebooks and instructors' scripts still run.

``import lib.bench`` (or ``from lib.grader import grade``, or ``python -m lib.grader``) finds the module at
its new place and returns that very module object, so a monkeypatch, an ``isinstance`` or a pickle sees one
module, not two copies. New code imports the new paths; ``tests/test_layers.py`` refuses old ones inside the
book.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

OLD_PATHS = {
    "lib.simulator": "lib.runtime.simulator", "lib.simdebug": "lib.runtime.simdebug",
    "lib.gpucompile": "lib.runtime.gpucompile", "lib.launches": "lib.runtime.launches",
    "lib.quiet_launches": "lib.runtime.quiet_launches", "lib.dynamic_shared": "lib.runtime.dynamic_shared",
    "lib.validate": "lib.runtime.validate", "lib.mma": "lib.runtime.mma",
    "lib.specs": "lib.hw.specs", "lib.occupancy": "lib.hw.occupancy", "lib.roofline": "lib.hw.roofline",
    "lib.gpu_diagram": "lib.hw.gpu_diagram",
    "lib.timing": "lib.measure.timing", "lib.clocks": "lib.measure.clocks", "lib.bench": "lib.measure.bench",
    "lib.results": "lib.measure.results", "lib.ncu": "lib.measure.ncu", "lib.ptx": "lib.measure.ptx",
    "lib.check": "lib.grading.check", "lib.exercises": "lib.grading.exercises",
    "lib.variants": "lib.grading.variants", "lib.tracer": "lib.grading.tracer", "lib.grader": "lib.grading.grader",
}


def new_path(name: str) -> str | None:
    """Where an old module path (or a submodule of an old package) lives now; None if it is not old."""
    head = name
    while head:
        if head in OLD_PATHS:
            return OLD_PATHS[head] + name[len(head):]
        head = head.rpartition(".")[0]
    return None


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        new = new_path(name)
        if new is None:
            return None
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        spec = importlib.util.spec_from_loader(name, self, is_package=real.submodule_search_locations is not None)
        spec.loader_state = {"new": new}
        return spec

    def create_module(self, spec):
        module = importlib.import_module(spec.loader_state["new"])
        spec.loader_state["spec"] = module.__spec__
        return module

    def exec_module(self, module):
        # importlib gave the module the old path's spec: give it back its own (reload, runpy, pickle).
        module.__spec__ = module.__spec__.loader_state["spec"]

    # runpy (``python -m lib.grader``) asks the loader for the code it runs as __main__.
    def get_code(self, name):
        new = new_path(name)
        return importlib.util.find_spec(new).loader.get_code(new)

    def is_package(self, name):
        return importlib.util.find_spec(new_path(name)).submodule_search_locations is not None


def install() -> None:
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
