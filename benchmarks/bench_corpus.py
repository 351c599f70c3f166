"""The offline grid over the real corpus, as a ratio to its floor measured in the same run.

Corpus: the mini-swe-agent trajectories in `../shared/corpora/mini-swe-agent-gemini3` (skipped when
absent). Grid: three configs of `experiments/complexity-trap.toml` (the raw agent, observation
masking, the progressive summary with the offline summarizer), every session.

Floor: one batched tiktoken (cl100k) pass over the text of every message of the corpus: the least a
tool that reads every message once must pay.

- cold: the first run on a freshly imported database (the import stored the default tokenizer's
  counts; the model cache is empty), in a process of its own;
- warm: the same grid recomputed (`fresh=True`: every cell again) with counts stored, the model
  cache filled and the quality measures of the first run stored (`workbench.quality.measure_memo`:
  every replay comes out as before, so none is measured again), in another process (so no memo of
  the first run's process helps);
- warm, measured again: the same with `remeasure=True` (every replay's quality measured), printed for
  what it shows;
- warm, same process: that grid recomputed a second time in the process that just recomputed it (as
  the app or a notebook re-runs a grid): the session pool (`workbench.session_pool`) keeps each
  session's quality analysis. Printed for what it shows; the goal is the warm figure's.

Cold and warm are measured with each executor: `local` (threads of the run's process) and `processes`
(a worker process per CPU), the first on the imported database and the second on a copy of it made
before any run. The bench also prints which of them the default, `executor="auto"`, picks for the grid.

Each is printed as seconds and as a ratio to the floor; goals (issue 39): cold <= 6x, warm <= 2x.
The runs are repeated (`CORPUS_BENCH_RUNS`, default 3) and the median printed: the machine is shared.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpora" / "mini-swe-agent-gemini3"
SPEC = ROOT / "experiments" / "complexity-trap.toml"
CONFIGS = ("raw-agent", "observation-masking", "llm-summary")
COLD_GOAL, WARM_GOAL = 6.0, 2.0
EXECUTORS = ("local", "processes")

RUN_GRID = """
import json, sys, time
from workbench.experiments import run_experiment
spec = json.loads(sys.argv[2])
for _ in range(2 if sys.argv[3] == "fresh-twice" else 1):  # the second of two: the process's memos in place
    started = time.perf_counter()
    run = run_experiment(
        spec, db=sys.argv[1], fresh=sys.argv[3] != "resume", executor=sys.argv[4], remeasure=sys.argv[5] == "remeasure"
    )
print(json.dumps({"seconds": time.perf_counter() - started, "cells": run.progress.cells_done,
                  "status": run.status}))
"""


def grid_spec() -> dict[str, Any]:
    """The corpus grid: the spec's defaults and the three configs, on the imported dataset."""
    spec = tomllib.loads(SPEC.read_text(encoding="utf-8"))
    return {
        "name": "corpus-bench",
        "dataset": "corpus",
        "metrics": spec.get("metrics", []),
        "concurrency": 2,
        "defaults": spec["defaults"],
        "config": [c for c in spec["config"] if c["name"] in CONFIGS],
    }


def floor_seconds() -> tuple[float, int, int]:
    """Seconds of one batched cl100k pass over every message's text; (seconds, messages, characters)."""
    from workbench import importers
    from workbench.offline import tiktoken_encoding

    texts = [
        m.text
        for path in sorted((CORPUS / "trajs").rglob("*.json"))
        for s in importers.load(str(path))
        for m in s.messages
    ]
    encoding = tiktoken_encoding("cl100k_base")
    encoding.encode_ordinary_batch(texts[:10])  # the encoder's start-up is not the floor
    started = time.perf_counter()
    encoding.encode_ordinary_batch(texts)
    return time.perf_counter() - started, len(texts), sum(map(len, texts))


def imported_database(folder: str) -> tuple[str, float]:
    """A fresh database holding the corpus (dataset `corpus`); (path, import seconds)."""
    from workbench.store import Store

    path = os.path.join(folder, "corpus.duckdb")
    started = time.perf_counter()
    with Store(path) as store:
        report = store.import_paths([str(CORPUS / "trajs")], dataset="corpus")
    if report.errors:
        raise RuntimeError(f"the corpus did not import: {report.errors[0].error}")
    return path, time.perf_counter() - started


def auto_choice(db: str) -> str:
    """What `executor="auto"` (the default) runs the whole grid with on this machine, and why."""
    from workbench.experiments import load_experiment
    from workbench.experiments.cells import CellTask
    from workbench.experiments.run import choose_executor, select_sessions
    from workbench.experiments.spec import grid
    from workbench.store import Store

    experiment = load_experiment(grid_spec())
    with Store(db, read_only=True) as store:
        pairs = select_sessions(store, experiment)
        sizes = store.message_counts([session_id for session_id, _ in pairs])
    todo = [CellTask(s, "corpus", c, r) for s, c, r in grid(experiment, [session_id for session_id, _ in pairs])]
    choice = choose_executor(experiment, todo, sizes)
    return f"{choice.name} ({choice.reason})"


def grid_seconds(db: str, mode: str, executor: str = "local", remeasure: bool = False) -> float:
    """Seconds of the grid in a process of its own; `mode`: "resume", "fresh" or "fresh-twice" (the
    second of two fresh runs in that process); `remeasure`: every replay's quality measured again."""
    import json

    spec = json.dumps(grid_spec())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", RUN_GRID, db, spec, mode, executor, "remeasure" if remeasure else "reuse"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the grid failed:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["status"] != "finished":
        raise RuntimeError(f"the grid ended {figures['status']}")
    return float(figures["seconds"])


def run() -> None:
    if not CORPUS.is_dir():
        print(f"skipped: no corpus at {CORPUS}")
        return
    runs = int(os.environ.get("CORPUS_BENCH_RUNS", "3"))
    floors, same_process, imports, remeasured = [], [], [], []
    default = ""
    timed: dict[tuple[str, str], list[float]] = {(e, m): [] for e in EXECUTORS for m in ("cold", "warm")}
    for _ in range(runs):
        floor, messages, characters = floor_seconds()
        floors.append(floor)
        with tempfile.TemporaryDirectory() as folder:
            db, imported = imported_database(folder)
            imports.append(imported)
            default = default or auto_choice(db)
            copies = {executor: db for executor in EXECUTORS}
            for executor in EXECUTORS[1:]:
                copies[executor] = shutil.copy(db, os.path.join(folder, f"{executor}.duckdb"))
            for executor, path in copies.items():
                timed[executor, "cold"].append(grid_seconds(path, "resume", executor))
                timed[executor, "warm"].append(grid_seconds(path, "fresh", executor))
            remeasured.append(grid_seconds(copies["processes"], "fresh", "processes", remeasure=True))
            same_process.append(grid_seconds(db, "fresh-twice"))
    floor = statistics.median(floors)
    print(f"corpus: {messages:,} messages, {characters:,} characters; grid: {len(CONFIGS)} configs")
    print(f"floor (one batched cl100k pass): median {floor:.2f} s of {[round(f, 2) for f in floors]}")
    print(f"import (counts stored): median {statistics.median(imports):.2f} s")
    print(f"the default executor (auto) runs this grid with: {default}")
    for (executor, mode), seconds in timed.items():
        goal = COLD_GOAL if mode == "cold" else WARM_GOAL
        median = statistics.median(seconds)
        verdict = "OK" if median / floor <= goal else "ABOVE GOAL"
        print(
            f"{mode} grid, {executor} executor: median {median:.2f} s of {[round(s, 2) for s in seconds]}; "
            f"{median / floor:.1f}x the floor (goal <= {goal:g}x) {verdict}"
        )
    measured = statistics.median(remeasured)
    print(
        f"warm grid, measured again (processes, remeasure=True): median {measured:.2f} s of "
        f"{[round(m, 2) for m in remeasured]}; {measured / floor:.1f}x the floor"
    )
    again = statistics.median(same_process)
    print(
        f"warm grid, same process (local): median {again:.2f} s of {[round(a, 2) for a in same_process]}; "
        f"{again / floor:.1f}x the floor"
    )
