"""The store is the only owner of the DuckDB file: no other module of the package imports duckdb,
reaches for a store's connection or writes SQL (import-linter holds the first; this test all three)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"
STORE = PACKAGE / "store"

#: A string that is an SQL statement: a statement keyword first, in capitals, then a clause of it.
SQL = re.compile(
    r"^\s*(SELECT\b.*\bFROM\b|INSERT\s+INTO\b|DELETE\s+FROM\b|UPDATE\s+\w+\s+SET\b|CREATE\s+(TABLE|VIEW|INDEX)\b"
    r"|DROP\s+(TABLE|VIEW)\b|ALTER\s+TABLE\b|COPY\b.*\bTO\b|WITH\s+\w+\s+AS\s*\(|BEGIN\s+TRANSACTION\b)",
    re.DOTALL,
)


def _outside_the_store() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if STORE not in p.parents)


def _skipped(tree: ast.AST) -> set[int]:
    """The ids of the string nodes not read alone: docstrings (they may quote SQL to explain it) and
    the parts of f-strings (read whole)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.update(id(part) for part in node.values)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(node: ast.AST) -> str | None:
    """The text of a string literal, an f-string's literal parts (placeholders as `?`), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "?" for v in node.values)
    return None


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _skipped(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{path}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "duckdb" for a in node.names):
            found.append(f"{where}: imports duckdb")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "duckdb":
            found.append(f"{where}: imports from duckdb")
        elif isinstance(node, ast.Attribute) and node.attr == "connection":
            found.append(f"{where}: reaches for .connection")
        elif id(node) not in skipped and (text := _strings(node)) is not None and SQL.match(text):
            found.append(f"{where}: SQL {text.strip()[:60]!r}")
    return found


def test_no_module_outside_the_store_touches_the_database_directly():
    found = [v for path in _outside_the_store() for v in violations(path)]
    assert not found, "outside workbench/store/:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import duckdb\n", "imports duckdb"),
        ("from duckdb import connect\n", "imports from duckdb"),
        ("def f(store):\n    return store.connection\n", "reaches for .connection"),
        ("def f(con):\n    con.execute('SELECT id FROM sessions')\n", "SQL 'SELECT id FROM sessions'"),
        ("def f(con, t):\n    con.execute(f'DELETE FROM {t} WHERE x = 1')\n", "SQL 'DELETE FROM ? WHERE x = 1'"),
        ("Q = '''\n    INSERT INTO runs VALUES (?)'''\n", "SQL 'INSERT INTO runs VALUES (?)'"),
    ],
)
def test_the_check_finds_each_way_of_touching_the_database(tmp_path, source, expected):
    module = tmp_path / "probe.py"
    module.write_text(source, encoding="utf-8")
    assert [v.split(": ", 1)[1] for v in violations(module)] == [expected]


def test_docstrings_and_prose_may_mention_sql(tmp_path):
    module = tmp_path / "prose.py"
    module.write_text(
        'def f():\n    """Reads `SELECT * FROM cells` for you."""\n    return "select the runs from the list"\n',
        encoding="utf-8",
    )
    assert violations(module) == []
