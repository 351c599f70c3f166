"""The package's import graph: no cycle anywhere in `workbench/` (DESIGN §2: imports flow one way)."""

from __future__ import annotations

import grimp


def find_cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Every cycle closed by a back edge of a depth-first walk (empty exactly when the graph is acyclic)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if not imported.startswith(package):
                continue
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph.modules):
        if module.startswith(package) and module not in state:
            visit(module)
    return cycles


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    assert find_cycles(graph, "pkg") == []
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert find_cycles(graph, "pkg") == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_workbench_has_no_import_cycle() -> None:
    graph = grimp.build_graph("workbench")
    assert "workbench.registry" in graph.modules
    cycles = find_cycles(graph, "workbench")
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_registry_imports_no_kinds_module() -> None:
    """Built-in kinds are loaded by name at run time, never imported by the registry."""
    graph = grimp.build_graph("workbench")
    assert graph.find_modules_directly_imported_by("workbench.registry") <= {"workbench.errors"}
