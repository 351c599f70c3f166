"""Experiment grid benchmark: 200 cells whose summaries come from a local latency server.

40 generated sessions × 5 configs; every cell compacts once with one summarizer call to a local
OpenAI-compatible server in a child process (1 s latency), 40 requests in flight (the model's
limit; the executor keeps `CELLS_PER_CALL_SLOT` times as many cells going). Printed:
(a) ideal wall time (cells × latency / concurrency) over the achieved one — goal >= 0.9;
(b) the resumed re-run (every cell reused, no model call) over the first run's time — goal <= 0.05.
The grid's first run is timed `FIRST_RUNS` times, each asking new questions (a per-run `seed`
option, so the model cache short-cuts none of them), and the median printed with every time: on a
shared machine other processes' work lengthens a run at random.
Run: `python -m benchmarks experiments`.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # standalone: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.experiments import run_experiment
from workbench.experiments.run import CELLS_PER_CALL_SLOT
from workbench.session import Message, Session, ToolCall
from workbench.store import Store
from workbench.testing import FakeOpenAIProcess

SESSIONS = 40
LATENCY = 1.0
CONCURRENCY = 40
STEPS = 8  # 9 recorded calls: a threshold of 5..8 iterations fires exactly once
FIRST_RUNS = 5
GOAL = 0.9


def _session(number: int) -> Session:
    messages = [
        Message(role="system", content="You are a coding agent."),
        Message(role="user", content=f"Task {number}: make tests/test_module_{number}.py pass."),
    ]
    for step in range(STEPS):
        call_id = f"c{number}_{step}"
        messages.append(
            Message(
                role="assistant",
                content=f"Step {step}: reading src/module_{number}.py",
                tool_calls=(
                    ToolCall(id=call_id, name="read_file", arguments=f'{{"path": "src/module_{number}_{step}.py"}}'),
                ),
            )
        )
        messages.append(
            Message(
                role="tool",
                tool_call_id=call_id,
                name="read_file",
                content=f"def handler_{number}_{step}():\n    return {step}\n" * 20,
            )
        )
    messages.append(Message(role="assistant", content="Done."))
    return Session.from_messages(messages, dataset="bench")


def _spec(server: FakeOpenAIProcess, seed: int = 0) -> dict:
    options = {
        "api_base": server.api_base,
        "api_key": "sk-bench-dummy",
        "max_tokens": 128,
        "timeout": 30,
        "concurrency": CONCURRENCY,
        "seed": seed,
        # priced as a user prices a model LiteLLM does not know, so each call's cost is computed
        "input_cost_per_token": 1.5e-7,
        "output_cost_per_token": 6e-7,
    }
    configs = [
        {
            "name": f"full-{n}",
            "trigger": {"kind": "stat_threshold", "counters": {"iterations": n}},
            "strategy": {"kind": "summarize_full"},
        }
        for n in (5, 6, 7, 8)
    ]
    configs.append(
        {
            "name": "split-5",
            "trigger": {"kind": "stat_threshold", "counters": {"iterations": 5}},
            "strategy": {"kind": "summarize_split"},
        }
    )
    return {
        "name": "bench-grid",
        "dataset": "bench",
        "concurrency": CONCURRENCY,
        "defaults": {"summarizer": "openai/bench-summarizer", "summarizer_options": options},
        "config": configs,
    }


def _warm_up(server: FakeOpenAIProcess, folder: str) -> None:
    """A one-cell run in a database of its own first: the process's one-time start-up (importing
    LiteLLM and its first request, about 3 s; pandas, which DuckDB imports at the first insert of
    Arrow rows, about 1 s) is not what this bench measures."""
    db = str(Path(folder) / "warm-up.duckdb")
    with Store(db) as store:
        store.import_sessions([_session(SESSIONS)], dataset="bench")
    spec = _spec(server)
    run_experiment({**spec, "name": "warm-up", "config": spec["config"][:1]}, db=db)


def run() -> None:
    with tempfile.TemporaryDirectory() as folder, FakeOpenAIProcess(latency=LATENCY) as server:
        _warm_up(server, folder)
        db = str(Path(folder) / "bench.duckdb")
        with Store(db) as store:
            store.import_sessions([_session(i) for i in range(SESSIONS)], dataset="bench")
        timings = []
        for attempt in range(FIRST_RUNS):
            spec = _spec(server, seed=attempt + 1)
            before = server.request_count
            started = time.perf_counter()
            run = run_experiment(spec, db=db)
            timings.append((time.perf_counter() - started, attempt, run, server.request_count - before))
        first_s, attempt, first, requests = sorted(timings, key=lambda timing: timing[0])[len(timings) // 2]
        spec = _spec(server, seed=attempt + 1)
        before = server.request_count
        started = time.perf_counter()
        second = run_experiment(spec, db=db)
        second_s = time.perf_counter() - started
        new_requests = server.request_count - before
    cells = first.progress.cells_total
    assert first.progress.failed_cells == 0, "cells failed"
    ideal = math.ceil(cells / CONCURRENCY) * LATENCY
    print(
        f"grid: {cells} cells ({SESSIONS} sessions x {len(spec['config'])} configs), {requests} summarizer "
        f"requests at {LATENCY * 1000:.0f} ms, {CONCURRENCY} requests in flight "
        f"({CONCURRENCY * CELLS_PER_CALL_SLOT} cells)"
    )
    verdict = "OK" if ideal / first_s >= GOAL else "BELOW GOAL"
    print(
        f"first run: median {first_s:.2f} s of {FIRST_RUNS} ({', '.join(f'{t[0]:.2f}' for t in timings)}); "
        f"ideal {ideal:.2f} s; ideal/achieved {ideal / first_s:.3f} (goal >= {GOAL}) {verdict}"
    )
    print(
        f"resumed run: {second_s:.3f} s, {second.progress.cells_reused} cells reused, {new_requests} new requests; "
        f"ratio to the first run {second_s / first_s:.3f} (goal <= 0.05)"
    )


if __name__ == "__main__":
    run()
