"""Shared fixtures. Test data is generated in code (see builders.py)."""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import ScriptedSummarizer, conversation
from hypothesis import settings

# LiteLLM fetches its price map from GitHub when it is imported, unless told not to, and on failure retries
# in a background thread whose warning lands in whatever a later test captures (a CLI's JSON). Some tests
# import LiteLLM directly, not through the workbench, which sets this first: the suite never asks.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# CI replays the same examples every run (a failure there is reproducible); locally they vary.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


#: Files of one long test each (a browser walk, a notebook's kernel). xdist hands out the files with the most
#: tests first, so these came last and ran alone while the other worker sat idle (about 50 s of the suite).
LONG_FILES_FIRST = ("tests/test_app_e2e.py", "tests/test_quickstart_notebook.py")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` handing out `LONG_FILES_FIRST` before the rest (in xdist's own order)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongFilesFirst(LoadFileScheduling):
        def _assign_work_unit(self, node: Any) -> None:
            for scope in reversed(LONG_FILES_FIRST):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return LongFilesFirst(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    if "streamlit.testing.v1" in sys.modules:  # collected tests run the app
        _scan_installed_components_once()


def _scan_installed_components_once() -> None:
    """A served app scans the installed packages for Streamlit components once, when its server starts;
    AppTest scans them again for every app it runs (about 0.15 s each, some 30 s of the suite's CPU). The
    installed packages do not change while the suite runs, so every AppTest shares the first scan."""
    from streamlit.components.v2 import manifest_scanner

    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


SHARED_SESSIONS = Path(__file__).resolve().parents[1].parent / "shared" / "sessions"


@pytest.fixture
def summarizer() -> ScriptedSummarizer:
    return ScriptedSummarizer()


@pytest.fixture
def long_conversation():
    return conversation(30, result_chars=2000)


@pytest.fixture
def shared_sessions() -> Path:
    """The recorded sessions beside the repo (../shared/sessions); skips when absent."""
    if not SHARED_SESSIONS.is_dir():
        pytest.skip("../shared/sessions is not present")
    return SHARED_SESSIONS


GRID_SPEC = """
name = "tiny-grid"
dataset = "grid"
concurrency = 2

[defaults]
context_limit = 6000
max_output = 500

[[config]]
name = "clear"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "hard_clear", keep_recent = 4 }
matrix = { "strategy.keep_recent" = [4, 12] }

[[config]]
name = "split"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "summarize_split", preserve = 0.4 }

[regress]
billed_input_tokens = "+2%"
compactions = "+10%"
summaries = "exact"
"""


@pytest.fixture(scope="session")
def database_copy(tmp_path_factory) -> Callable[[Path, str, Callable[[Path], Any]], Any]:
    """`database_copy(target, name, build)`: a copy at `target` of the database `build(path)` wrote, built
    once per worker for each `name` (a test's own file to write to, without building it again); returns
    what `build` returned."""
    built: dict[str, tuple[Path, Any]] = {}

    def copy(target: Path, name: str, build: Callable[[Path], Any]) -> Any:
        if name not in built:
            template = tmp_path_factory.mktemp(f"template-{name}") / "wb.duckdb"
            built[name] = (template, build(template))
        template, value = built[name]
        shutil.copyfile(template, target)
        wal = template.with_name(f"{template.name}.wal")  # none once the store closed, as it checkpoints
        if wal.exists():
            shutil.copyfile(wal, target.with_name(f"{target.name}.wal"))
        return value

    return copy


def _grid_database(db: Path) -> list[str]:
    """Three generated sessions (dataset `grid`) whose calls carry the provider's usage, as real
    recordings do (`recorded_input_tokens`); returns their ids."""
    from workbench.session import Session
    from workbench.store import Store

    def billed(messages):
        return [
            m.replace(metadata={**m.metadata, "usage": {"input_tokens": 900 + 37 * i, "output_tokens": 50}})
            if m.role == "assistant"
            else m
            for i, m in enumerate(messages)
        ]

    sessions = [Session.from_messages(billed(conversation(24 + i, result_chars=900)), dataset="grid") for i in range(3)]
    with Store(str(db)) as store:
        store.import_sessions(sessions, dataset="grid")
    return [s.id for s in sessions]


@pytest.fixture
def grid_db(tmp_path, database_copy) -> tuple[Path, Path, list[str]]:
    """A database of three generated sessions (dataset `grid`, see `_grid_database`) and a 3-config
    experiment spec over them."""
    db = tmp_path / "wb.duckdb"
    ids = database_copy(db, "grid", _grid_database)
    spec = tmp_path / "tiny-grid.toml"
    spec.write_text(GRID_SPEC)
    return db, spec, ids


EARLY_STOP_SPEC = """
name = "early-stops"
dataset = "early"

[defaults]
context_limit = 4000
max_output = 500

[[config]]
name = "clear"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "hard_clear", keep_recent = 4 }

[[config]]
preset = "no-compaction"
name = "raw"
overflow_retry = false

[regress]
billed_input_tokens = "+2%"
"""


def _early_stop_database(db: Path) -> None:
    from workbench.session import Session
    from workbench.store import Store

    with Store(str(db)) as store:
        store.import_sessions(
            [Session.from_messages(conversation(n, result_chars=900), dataset="early") for n in (4, 30, 32)],
            dataset="early",
        )


@pytest.fixture
def early_stop_db(tmp_path, database_copy) -> tuple[Path, Path]:
    """A database of three generated sessions (4, 30 and 32 steps, dataset `early`) and a spec whose `raw`
    config (no compaction in a 4000-token window) overflows on the two long ones after 15 calls: over
    every session it bills less than `clear`, which completes all three. Returns the database and the
    spec (a TOML file)."""
    db = tmp_path / "wb.duckdb"
    database_copy(db, "early-stops", _early_stop_database)
    spec = tmp_path / "early-stops.toml"
    spec.write_text(EARLY_STOP_SPEC)
    return db, spec


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def chromium():
    """A headless Debian Chromium driven by Playwright; skips where Chromium (or Playwright) is absent.

    Module-scoped: Playwright's sync API keeps an event loop running in this thread while it is open,
    which would break `asyncio.run` in later test modules.
    """
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
