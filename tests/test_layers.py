"""The library's layers stay layers: every import in lib/, kernels/ and tools/ is read (module level and inside
functions) and none may point at a layer above its own. Layers, lowest first:

  0  lib.mode, lib.aliases, lib.hw     how this process runs; hardware facts and models (lib.hw: no numba)
  1  lib.runtime                       what a kernel needs to run, on a GPU or on the simulator
  2  lib.grading                       checks, exercises, variants, tracer, grader
  3  lib.measure                       timer, ladders (check, then time), results, ncu, PTX/SASS
  4  lib.widgets                       the interactive figures
  5  lib (the package root)            the surface a chapter imports
  6  kernels                           the lessons' kernels
  7  tools                             the commands (make record, make student ...)

So the library never imports kernels/ or tools/; no private name (``_x``) crosses from one of these packages
into another; and nothing in the book imports a module by an old path (lib.aliases keeps those for readers).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = [("lib.mode", 0), ("lib.aliases", 0), ("lib.hw", 0), ("lib.runtime", 1), ("lib.grading", 2),
          ("lib.measure", 3), ("lib.widgets", 4), ("kernels", 6), ("tools", 7), ("lib", 5)]
NO_NUMBA = ("lib.hw",)


def layer_of(module: str) -> tuple[str, int] | None:
    """(the layer's package, its number) of a book module, None for a module outside the book."""
    for package, number in LAYERS:
        if module == package or module.startswith(package + "."):
            return package, number
    return None


def module_of(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(root: Path, module: str) -> bool:
    base = root / Path(*module.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def imports_of(root: Path, path: Path):
    """(line, imported module, imported name or None) for every import statement in a file."""
    module = module_of(root, path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if _is_module(root, sub):  # `from lib.runtime import simulator` imports a module
                    yield node.lineno, sub, None
                else:
                    yield node.lineno, target, alias.name


def violations(root: Path, old_paths=None) -> list[str]:
    """Every import that breaks the layering, as 'file:line: what is wrong'."""
    if old_paths is None:
        from lib.aliases import OLD_PATHS as old_paths
    found = []
    files = [p for d in ("lib", "kernels", "tools") for p in sorted((root / d).rglob("*.py"))]
    for path in files:
        module = module_of(root, path)
        own = layer_of(module)
        where = f"{path.relative_to(root)}"
        for line, target, name in imports_of(root, path):
            if own[0].startswith(NO_NUMBA) and target.split(".")[0] == "numba":
                found.append(f"{where}:{line}: {own[0]} is hardware facts and models, without numba: imports {target}")
            other = layer_of(target)
            if other is None:
                continue
            if any(target == old or target.startswith(old + ".") for old in old_paths):
                found.append(f"{where}:{line}: imports {target} by its old path (lib.aliases says where it is now)")
                continue
            if other[1] > own[1]:
                found.append(f"{where}:{line}: {own[0]} (layer {own[1]}) imports {target} from {other[0]} "
                             f"(layer {other[1]}), a layer above it")
            crossing = other[0] != own[0]
            private = (name or "").startswith("_") or any(part.startswith("_") and part != "__init__"
                                                          for part in target.split(".")[1:])
            if crossing and private:
                found.append(f"{where}:{line}: {own[0]} uses the private {target}{'.' + name if name else ''} "
                             f"of {other[0]}")
    return found


def test_the_book_keeps_its_layers():
    found = violations(ROOT)
    assert not found, "imports that break the layering:\n" + "\n".join(found)


def _plant(root: Path, files: dict[str, str]):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in ("lib", "lib/hw", "lib/runtime", "lib/grading", "lib/measure", "lib/widgets", "kernels", "tools"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").touch()


@pytest.mark.parametrize("rel, text, complaint", [
    ("lib/hw/specs.py", "from kernels.memory import THREADS\n", "a layer above it"),
    ("lib/runtime/launches.py", "def f():\n    from lib.grading import check\n", "a layer above it"),
    ("lib/measure/timing.py", "from lib.runtime.simulator import _current\n", "private"),
    ("lib/grading/check.py", "from lib import cuda\n", "a layer above it"),
    ("lib/widgets/w.py", "import tools.record\n", "a layer above it"),
    ("kernels/memory.py", "from lib.bench import Rung\n", "old path"),
    ("lib/hw/occupancy.py", "from numba import cuda\n", "without numba"),
])
def test_a_planted_back_import_is_caught(tmp_path, rel, text, complaint):
    _plant(tmp_path, {"lib/runtime/simulator.py": "_current = None\n", "kernels/memory.py": "THREADS = 256\n",
                      "lib/grading/check.py": "", "tools/record.py": "", rel: text})
    found = violations(tmp_path, old_paths={"lib.bench": "lib.measure.bench"})
    assert len(found) == 1 and complaint in found[0] and found[0].startswith(rel), found


def test_imports_in_the_right_direction_pass(tmp_path):
    _plant(tmp_path, {"lib/runtime/simulator.py": "_current = None\n", "lib/measure/bench.py":
                      "from lib.grading import check\nfrom lib.runtime import simulator\nfrom lib import mode\n",
                      "lib/mode.py": "", "lib/grading/check.py": "from lib.hw import specs\n", "lib/hw/specs.py": "",
                      "kernels/memory.py": "import lib\nfrom lib.measure.bench import x\n",
                      "tools/record.py": "import kernels.memory\n"})
    assert violations(tmp_path, old_paths={}) == []
