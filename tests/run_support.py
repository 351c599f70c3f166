"""What the executor tests share: a database's twin for the reference run, and a run's stored levels.

Importable from any test module (`from run_support import ...`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from workbench.store import open_results

#: Columns that differ between two computations of the same cells.
TIMING_COLUMNS = {"run_id", "duration_s", "finished_at"}


def twin_of(db: Path) -> Path:
    """A copy of a database made before any run: the same sessions, for the other executor."""
    copy = db.with_name(f"twin-{db.name}")
    shutil.copy(db, copy)
    return copy


def stored_levels(db: Path, run_id: str) -> dict[str, list[dict]]:
    """Every stored level of a run (cells with metrics, calls, compactions), minus run ids and timings."""
    with open_results(db) as stored:
        frames = {
            "cells": stored.results_frame(run_id),
            "calls": stored.calls_frame(run_id),
            "compactions": stored.compactions_frame(run_id),
        }
    return {
        level: [
            {k: v for k, v in row.items() if k not in TIMING_COLUMNS}
            for row in frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
        ]
        for level, frame in frames.items()
    }
