"""Plugins (DESIGN §5a): an installed distribution's kinds reach the CLI through `workbench.plugins` entry points.

The distribution is built outside the repository, in tmp_path: a module plus a `.dist-info` folder
with `METADATA` and `entry_points.txt`, put on the PYTHONPATH of a `workbench` subprocess. Nothing
imports the plugin but the registry's discovery.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # plugins installed and used from the command line


PLUGIN = '''
"""A demo plugin: one kind of every family."""

from dataclasses import dataclass
from pathlib import Path

import workbench as wb
from workbench.session import Message, Session


@wb.register_trigger("demo_every")
@dataclass(frozen=True)
class Every:
    """Fire before every n-th call."""

    every: int = wb.param(2, doc="calls between compactions", min=1)

    def should_compact(self, view):
        return view.call_index % self.every == 0

    def notify_compacted(self, view):
        return None


@wb.register_strategy("demo_keep_tail")
@dataclass(frozen=True)
class KeepTail:
    """Keep the system messages and the last steps."""

    last: int = wb.param(1, doc="trailing steps kept", min=1)

    def compact(self, context, env):
        return [*context.system, *(m for s in context.steps[-self.last:] for m in s.messages)]


@wb.register_importer("demo-lines", aliases=["demo"])
class DemoLines:
    """A '#demo' header line, then one user request per line, each answered by the assistant."""

    def detect(self, path, head):
        return head.startswith(b"#demo")

    def iter_sessions(self, path):
        lines = Path(path).read_text(encoding="utf-8").splitlines()[1:]
        messages = []
        for line in lines:
            messages += [Message(role="user", content=line), Message(role="assistant", content="done: " + line)]
        return [Session.from_messages(messages, id="demo-" + Path(path).stem)]


@wb.register_metric("demo_final_messages", direction="lower", unit="messages", level="run")
@dataclass(frozen=True)
class FinalMessages:
    """Messages left in the final context."""

    def compute(self, result):
        return len(result.final_context)
'''

CONFIG = """
context_limit = 8000
max_output = 100
trigger = { kind = "demo_every", every = 3 }
strategy = { kind = "demo_keep_tail", last = 2 }
"""


def write_distribution(root: Path, name: str, module: str, source: str) -> None:
    """A minimal installed distribution: `module.py` and `name-0.1.dist-info` declaring the entry point."""
    (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[workbench.plugins]\n{name} = {module}\n", encoding="utf-8")


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    write_distribution(root, "wbplugin_demo", "wbplugin_demo", PLUGIN)
    return root


def run(args: list[str], *, pythonpath: Path, db: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "WORKBENCH_DB": str(db)}
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], capture_output=True, text=True, env=env, timeout=300, cwd=pythonpath
    )


def test_the_plugin_kinds_are_listed_without_any_import(plugin_dir: Path, tmp_path: Path) -> None:
    done = run(["kinds", "--json"], pythonpath=plugin_dir, db=tmp_path / "unused.duckdb")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    names = {family: {e["name"] for e in entries} for family, entries in listing.items()}
    assert "demo_every" in names["trigger"] and "demo_keep_tail" in names["strategy"]
    assert "demo-lines" in names["importer"] and "demo_final_messages" in names["metric"]
    assert "sliding_window" in names["strategy"]  # built-ins are still there
    trigger = next(e for e in listing["trigger"] if e["name"] == "demo_every")
    assert trigger["doc"] == "Fire before every n-th call."
    assert trigger["params"][0] | {"doc": ""} == {
        "name": "every",
        "type": "int",
        "default": 2,
        "required": False,
        "doc": "",
        "min": 1,
        "max": None,
        "choices": None,
    }
    assert not (tmp_path / "unused.duckdb").exists()


def test_the_plugin_importer_trigger_strategy_and_metric_work_from_the_cli(plugin_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "work.duckdb"
    forced = tmp_path / "forced.txt"
    forced.write_text("#demo\n" + "\n".join(f"request {i}" for i in range(10)) + "\n", encoding="utf-8")
    done = run(["import", str(forced), "--format", "demo-lines", "--dataset", "demo"], pythonpath=plugin_dir, db=db)
    assert done.returncode == 0, done.stdout + done.stderr
    sniffed = tmp_path / "sniffed.json"  # auto-detection asks the plugin's format before the generic ones
    sniffed.write_text("#demo\nfirst\nsecond\n", encoding="utf-8")
    done = run(["import", str(sniffed), "--dataset", "demo"], pythonpath=plugin_dir, db=db)
    assert done.returncode == 0, done.stdout + done.stderr

    done = run(["sessions", "--json"], pythonpath=plugin_dir, db=db)
    assert done.returncode == 0, done.stderr
    sessions = {s["id"]: s for s in json.loads(done.stdout)}
    assert sessions["demo-forced"]["format"] == "demo-lines" and sessions["demo-forced"]["calls"] == 10
    assert sessions["demo-sniffed"]["format"] == "demo-lines"

    done = run(["replay", "demo-forced", "--config", CONFIG, "--json"], pythonpath=plugin_dir, db=db)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["config"]["trigger"] == {"kind": "demo_every", "every": 3}
    assert data["config"]["strategy"] == {"kind": "demo_keep_tail", "last": 2}
    assert data["metrics"]["compactions"] == 3  # before calls 3, 6 and 9
    # the last compaction (before call 9) keeps 2 steps, the assistant 8 and the request 9; then reply 9
    assert data["metrics"]["demo_final_messages"] == 3


def test_a_broken_plugin_is_a_warning_naming_it(plugin_dir: Path, tmp_path: Path) -> None:
    write_distribution(plugin_dir, "wbplugin_broken", "wbplugin_broken", 'raise RuntimeError("half-installed")\n')
    done = run(["kinds", "--json"], pythonpath=plugin_dir, db=tmp_path / "empty.duckdb")
    assert done.returncode == 0, done.stderr
    assert "wbplugin_broken" in done.stderr and "half-installed" in done.stderr
    json.loads(done.stdout)  # the command still did its work
    assert "demo_every" in {e["name"] for e in json.loads(done.stdout)["trigger"]}  # the good plugin loaded


def test_a_plugin_is_loaded_only_when_kinds_are_needed(plugin_dir: Path) -> None:
    """Importing workbench discovers nothing; the first lookup does."""
    code = (
        "import sys, workbench as wb; assert 'wbplugin_demo' not in sys.modules; "
        "assert 'demo_every' in wb.kinds('trigger'); assert 'wbplugin_demo' in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(plugin_dir)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
