"""One cell of a stored run opened: its per-call curve, its compactions and its metrics.

The tables of a run hold each cell's calls, its compactions (summary, per-compaction metrics as
`details`) and its metrics, but not the messages a compaction replaced: `replay_cell` replays the
cell from the config the run stored (`run_configs`, the cell's repeat applied as the run did) on the
stored session, so the compaction view shows the context the strategy received and returned. Model
calls are answered from a snapshot of the database's model cache (the run's own answers), read-only.
`cell_compaction` shows a replayed compaction with the per-compaction metrics the run stored
(model-judged ones included, which the replay does not recompute), and says when the replay's
compaction differs from the stored one (another code version, a model answering differently).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.access import CompactionView, compaction_view

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from workbench.replay import ReplayResult

__all__ = ["CellKey", "StoredCell", "cell_compaction", "cell_keys", "replay_cell", "stored_cell"]

#: Cell columns that describe the cell rather than measure it (left out of its metrics table).
_CELL_COLUMNS = ("run_id", "session_id", "dataset", "config", "repeat", "termination", "error", "duration_s")


@dataclass(frozen=True)
class CellKey:
    """A cell of a run: a session under a named config, for one repeat."""

    session_id: str
    config: str
    repeat: int

    @property
    def label(self) -> str:
        return f"{self.session_id[:16]} × {self.config} · repeat {self.repeat}"


def cell_keys(results: pd.DataFrame) -> list[CellKey]:
    """The cells of a run's results frame (`wb.results`), in its order."""
    return [
        CellKey(str(s), str(c), int(r))
        for s, c, r in zip(results["session_id"], results["config"], results["repeat"], strict=True)
    ]


def _of_cell(frame: pd.DataFrame, key: CellKey) -> pd.DataFrame:
    if not len(frame):
        return frame
    chosen = (frame["session_id"] == key.session_id) & (frame["config"] == key.config) & (frame["repeat"] == key.repeat)
    return frame[chosen].reset_index(drop=True)


@dataclass(frozen=True, eq=False)
class StoredCell:
    """What a run stored of one cell: its calls, its compactions (no-ops included, `noop` marks them),
    its metrics, how the replay ended, and the config it ran under."""

    run_id: str
    key: CellKey
    calls: pd.DataFrame
    compactions: pd.DataFrame
    metrics: Mapping[str, Any]
    termination: str | None
    error: str | None
    config: Mapping[str, Any]

    @property
    def context_limit(self) -> int | None:
        limit = self.config.get("context_limit")
        return int(limit) if isinstance(limit, (int, float)) else None

    def changed_compactions(self) -> pd.DataFrame:
        """The compactions that changed the context (no-ops left out), in order."""
        if not len(self.compactions) or "noop" not in self.compactions.columns:
            return self.compactions
        return self.compactions[~self.compactions["noop"].fillna(False).astype(bool)]

    def figure(self) -> go.Figure:
        """The cell's context tokens per call with its compaction markers (`charts.token_curves`)."""
        from workbench.experiments import charts

        stopped = (
            {self.key.config: charts.stop_reason(self.termination, self.error)}
            if self.termination not in (None, "completed")
            else None
        )
        return charts.token_curves(
            self.calls,
            self.compactions,
            context_limit=self.context_limit,
            title=f"session {self.key.session_id[:16]} · {self.key.config} · repeat {self.key.repeat}",
            stopped=stopped,
        )

    def metrics_table(self) -> pd.DataFrame:
        """The cell's numeric metrics: `metric`, `value`, `better` (the direction the metric declares)."""
        import pandas as pd

        from workbench.experiments.compare import metric_direction

        rows = [
            {"metric": name, "value": value, "better": metric_direction(name)}
            for name, value in self.metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ]
        return pd.DataFrame(rows, columns=["metric", "value", "better"])

    def details(self, event_index: int) -> dict[str, Any]:
        """The per-compaction metrics the run stored for compaction `event_index` ({} when none)."""
        if not len(self.compactions):
            return {}
        rows = self.compactions[self.compactions["event_index"] == event_index]
        raw = rows.iloc[0]["details"] if len(rows) else None
        if isinstance(raw, str):
            parsed = json.loads(raw)
            return dict(parsed) if isinstance(parsed, dict) else {}
        return dict(raw) if isinstance(raw, Mapping) else {}


def stored_cell(run_id: str, key: CellKey, db: str | os.PathLike[str] | None = None) -> StoredCell:
    """What run `run_id` (an id, unique prefix or name) stored of cell `key`; a StoreError when the
    run has no such cell."""
    from workbench.errors import StoreError
    from workbench.store import open_results

    with open_results(db, read_only=True) as stored:
        run_id = stored.resolve_run_id(run_id)
        results = _of_cell(stored.results_frame(run_id), key)
        if not len(results):
            raise StoreError(f"run {run_id} has no cell {key.label}")
        calls = _of_cell(stored.calls_frame(run_id), key)
        compactions = _of_cell(stored.compactions_frame(run_id), key)
        config = stored.run_configs(run_id).get(key.config, {})
    row = results.iloc[0].to_dict()
    metrics = {str(k): v for k, v in row.items() if k not in _CELL_COLUMNS}
    termination, error = row.get("termination"), row.get("error")
    return StoredCell(
        run_id=run_id,
        key=key,
        calls=calls,
        compactions=compactions,
        metrics=metrics,
        termination=termination if isinstance(termination, str) else None,
        error=error if isinstance(error, str) else None,
        config=config,
    )


def replay_cell(cell: StoredCell, db: str | os.PathLike[str] | None = None, *, gateway: Any = None) -> ReplayResult:
    """The cell replayed again from the config its run stored, on the stored session, with the
    repeat's own model-cache keys (`repeat_config`), so its compactions' contexts can be shown.

    Without a `gateway`, model calls are answered from a read-only snapshot of the database's model
    cache (the answers the run stored: no model is asked again for them, and the database is never
    opened for writing); a call the snapshot lacks goes to its model, its answer kept in memory only."""
    from workbench.access import session
    from workbench.config import parse_config
    from workbench.experiments.cells import repeat_config
    from workbench.replay import replay

    config = repeat_config(parse_config(dict(cell.config)), cell.key.repeat)
    stored = session(cell.key.session_id, db=db)
    if gateway is not None:
        return replay(stored, config, gateway=gateway)
    from workbench.experiments.workers import SnapshotCache
    from workbench.llm import Gateway
    from workbench.store import Store

    with Store(db, read_only=True) as store:
        snapshot = store.model_cache_rows()
    own = Gateway(SnapshotCache(snapshot))
    try:
        return replay(stored, config, gateway=own)
    finally:
        own.close()


@dataclass(frozen=True)
class CellCompaction:
    """A compaction of a replayed cell (`view`) and whether it is the one the run stored: the same
    call, tokens before and after and summary (`matches`; when not, `note` says how they differ)."""

    view: CompactionView
    matches: bool
    note: str | None


def cell_compaction(cell: StoredCell, result: ReplayResult, event_index: int) -> CellCompaction:
    """Compaction `event_index` of `result` (the cell replayed by `replay_cell`), with the
    per-compaction metrics the run stored (the replay's own where the run stored none)."""
    before, after = result.compaction_contexts(event_index)
    event = result.compactions[event_index]
    measured = cell.details(event_index) or (
        dict(result.compaction_metrics[event_index]) if event_index < len(result.compaction_metrics) else {}
    )
    view = compaction_view(before, after, event, measured, event_index=event_index)
    rows = cell.compactions[cell.compactions["event_index"] == event_index] if len(cell.compactions) else None
    if rows is None or not len(rows):
        return CellCompaction(view, False, f"the run stored no compaction #{event_index} for this cell")
    stored = rows.iloc[0]
    differences = [
        name
        for name, replayed, kept in (
            ("call", view.call_index, stored["call_index"]),
            ("tokens before", view.tokens_before, stored["tokens_before"]),
            ("tokens after", view.tokens_after, stored["tokens_after"]),
            ("summary", view.summary, stored["summary"] if isinstance(stored["summary"], str) else None),
        )
        if _plain(replayed) != _plain(kept)
    ]
    if not differences:
        return CellCompaction(view, True, None)
    return CellCompaction(
        view,
        False,
        f"replayed again, this compaction differs from the stored one ({', '.join(differences)}): the code or "
        "the summarizer's answers changed since the run",
    )


def _plain(value: Any) -> Any:
    """A stored value as Python compares it: numpy scalars unwrapped, NaN and "" as None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return None if value == "" else value
