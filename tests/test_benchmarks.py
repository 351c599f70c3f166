"""The benchmarks import most of what they time inside their functions (so `python -m benchmarks
ingest` does not load the app): a name that moved breaks `make bench` only when that bench runs.
Every `from workbench... import name` in them must name something that exists."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def _workbench_imports(path: Path) -> list[tuple[int, str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (node.lineno, node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "workbench"
        for alias in node.names
    ]


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_name_a_benchmark_imports_from_the_workbench_exists(path):
    missing = []
    for line, module, name in _workbench_imports(path):
        imported = importlib.import_module(module)
        if not hasattr(imported, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert not missing, "\n".join(missing)
