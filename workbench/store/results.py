"""Experiment results in DuckDB, at four levels: run, cell (session × config × repeat), call, compaction.

Tables (created by the migration `0004_experiment_results` in `workbench.store.db`):

- `runs`: one row per run: its spec, the code and dataset versions, status and timestamps;
- `run_configs`: the full replay config of every named config of a run;
- `cells`: one row per finished cell (termination, error, duration, every metric as JSON);
- `cell_metrics`: the same metrics in long form (`metric`, numeric `value` or `text`), so a metric a
  plugin adds needs no new column;
- `cell_calls`: one row per replayed LLM call of a cell;
- `cell_compactions`: one row per compaction event, with its summary and per-compaction metrics
  (e.g. lost facts) as JSON `details`; `noop` (migration `0006_compaction_noop`) marks a firing whose
  strategy returned the context unchanged (NULL on rows stored before it).

Views: `results_long` (cells joined with their metrics) and `config_metrics` (per run, config and
metric: mean, min, max, count) are what the app, the exports and notebooks read alike.

A cell is written whole, in one transaction (with the others that finished at about the same
time), so a run that is killed holds only whole cells and resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import duckdb

from workbench.errors import StoreError
from workbench.replay import call_column
from workbench.store.db import FileHold, connect, default_path, insert_rows, object_columns
from workbench.store.hub import Connection

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from workbench.quality.measure_memo import MeasureRow
    from workbench.replay import ReplayResult

CELL_KEY = ("run_id", "session_id", "config", "repeat")


@dataclass(frozen=True)
class RunInfo:
    """A run as stored in `runs`."""

    id: str
    name: str
    kind: str
    status: str
    cells_total: int | None
    cells_done: int
    code_version: str | None
    dataset_version: str | None
    started_at: datetime
    finished_at: datetime | None


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _json(value: Any, *, sort_keys: bool = False) -> str:
    return json.dumps(value, default=_plain, ensure_ascii=False, allow_nan=False, sort_keys=sort_keys)


def _plain(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return str(value)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    return None


def _clean_json(value: Any, *, sort_keys: bool = False) -> str:
    """`_json(_clean(value))`: the walk through every list and mapping only when the value holds a NaN or
    an infinity, which the encoder refuses (a compaction's details are thousands of small values)."""
    try:
        return _json(value, sort_keys=sort_keys)
    except ValueError:
        return _json(_clean(value), sort_keys=sort_keys)


def _clean(value: Any) -> Any:
    """A metric's value (or a compaction's details) as JSON can hold it: NaN and infinities become
    None wherever they sit, in lists and mappings too (a user's metric may return any of them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    return value


@contextmanager
def open_results(db: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> Iterator[RunResults]:
    """The experiment tables of an existing database (`db`, else the default path), opened for the
    block and closed after it; a missing file is an error (`MissingDatabaseError`)."""
    path = os.fspath(db) if db is not None else default_path()
    connection = connect(path, create=False, read_only=read_only)
    try:
        yield RunResults(connection)
    finally:
        connection.close()


@contextmanager
def held_results(hold: FileHold) -> Iterator[RunResults]:
    """The experiment tables through `hold`: the file is open for the block only (one batch of writes)."""
    with hold.open() as connection:
        yield RunResults(connection)


#: The runs under way in this process. A run recorded as running that is not one of them is under way
#: in the process its row names (`host`, `pid`) while that process lives; otherwise it was cut short
#: (killed, the machine stopped) and is shown as interrupted (a resume computes the rest).
_ACTIVE_RUNS: set[str] = set()


def shown_status(run_id: str, status: str, host: str | None = None, pid: int | None = None) -> str:
    """The status to show for a run recorded with `status` by the process `pid` on `host`.

    A run of another machine is taken as running (its process cannot be asked); one of this machine
    is running while its process lives, and a row from before runs named their process is not."""
    if status != "running" or run_id in _ACTIVE_RUNS:
        return status
    if host is None or pid is None or pid == os.getpid():
        return "interrupted"
    if host != socket.gethostname():
        return status
    return status if _process_alive(pid) else "interrupted"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


@dataclass(frozen=True)
class FinishedCell:
    """A cell to store: its replay result and where it sits in the grid."""

    result: ReplayResult
    config: str
    repeat: int
    dataset: str | None = None
    duration_s: float | None = None


#: The `cell_calls` columns read from the calls of a result: (column, `CallRecord` field).
_CALL_FIELDS = (
    ("call_index", "index"),
    ("message_index", "message_index"),
    ("context_messages", "context_messages"),
    ("context_tokens", "context_tokens"),
    ("completion_tokens", "completion_tokens"),
    ("cached_prefix_tokens", "cached_prefix_tokens"),
    ("compacted_before", "compacted_before"),
)


def _recorded(result: ReplayResult) -> tuple[Sequence[int | None], Sequence[bool]]:
    columns = getattr(result, "recorded_columns", None)
    if callable(columns):
        billed, compacted = columns()
        return billed, compacted
    return [None] * len(result.calls), [False] * len(result.calls)


def _compaction_details(result: ReplayResult) -> list[dict[str, Any]]:
    """The per-compaction metric columns of each event (lost facts and the like)."""
    per_event: Any = getattr(result, "compaction_metrics", None) or []
    details: list[dict[str, Any]] = []
    for index in range(len(result.compactions)):
        if isinstance(per_event, Mapping):
            details.append({name: values[index] for name, values in per_event.items() if index < len(values)})
        else:
            details.append(dict(per_event[index]) if index < len(per_event) else {})
    return details


# -- reading ----------------------------------------------------------------------------------


#: The tables holding a run's cells, and those holding the whole run, children first (a run is
#: deleted from all of them in one transaction).
CELL_TABLES = (
    ("cell_compactions", "run_id"),
    ("cell_calls", "run_id"),
    ("cell_metrics", "run_id"),
    ("cells", "run_id"),
)
RUN_TABLES = (*CELL_TABLES, ("run_configs", "run_id"), ("runs", "id"))


@dataclass(frozen=True)
class NoopConfig:
    """A config of a run whose trigger fired but whose strategy changed no context in any stored cell."""

    config: str
    sessions: int
    firings: int
    datasets: tuple[str, ...]


class RunResults:
    """The experiment tables of one open connection: writes of runs and cells, reads as frames.

    Get one from `Store.results` (the store's connection), `open_results(db)` (a brief open of an
    existing file) or `held_results(hold)` (one batch through a `FileHold`)."""

    def __init__(self, connection: Connection):
        self._con = connection

    def start_run(
        self,
        run_id: str,
        *,
        name: str,
        kind: str,
        spec: Mapping[str, Any],
        configs: Sequence[tuple[str, Mapping[str, Any]]],
        code_version: str | None,
        dataset_version: str | None,
        datasets: Sequence[str],
        cells_total: int,
    ) -> bool:
        """Record a run (or mark an existing one running again); returns True when it is new."""
        _ACTIVE_RUNS.add(run_id)
        exists = self._con.execute("SELECT count(*) FROM runs WHERE id = ?", [run_id]).fetchall()[0][0]
        if exists:
            self._con.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL, cells_total = ?, host = ?, pid = ? "
                "WHERE id = ?",
                [cells_total, socket.gethostname(), os.getpid(), run_id],
            )
            return False
        self._con.execute("BEGIN TRANSACTION")
        try:
            self._con.execute(
                "INSERT INTO runs (id, name, kind, spec, code_version, dataset_version, datasets, cells_total, "
                "status, started_at, finished_at, host, pid) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, NULL, ?, ?)",
                [
                    run_id,
                    name,
                    kind,
                    _json(spec),
                    code_version,
                    dataset_version,
                    list(datasets),
                    cells_total,
                    _now(),
                    socket.gethostname(),
                    os.getpid(),
                ],
            )
            for position, (config_name, config_spec) in enumerate(configs):
                self._con.execute(
                    "INSERT INTO run_configs VALUES (?, ?, ?, ?)", [run_id, config_name, position, _json(config_spec)]
                )
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        return True

    def finish_run(self, run_id: str, status: str = "finished") -> None:
        try:
            self._con.execute("UPDATE runs SET status = ?, finished_at = ? WHERE id = ?", [status, _now(), run_id])
        finally:
            _ACTIVE_RUNS.discard(run_id)

    def finished_cells(self, run_id: str) -> set[tuple[str, str, int]]:
        rows = self._con.execute("SELECT session_id, config, repeat FROM cells WHERE run_id = ?", [run_id]).fetchall()
        return {(s, c, int(r)) for s, c, r in rows}

    def save_cell(
        self,
        run_id: str,
        result: ReplayResult,
        *,
        config: str,
        repeat: int,
        dataset: str | None,
        duration_s: float | None = None,
    ) -> None:
        """Write one finished cell (all four levels) in one transaction."""
        self.save_cells(run_id, [FinishedCell(result, config, repeat, dataset, duration_s)])

    def save_cells(
        self, run_id: str, cells: Sequence[FinishedCell], measures: Sequence[MeasureRow] = (), version: str = ""
    ) -> int:
        """Write finished cells (all four levels) in one transaction; cells already stored are left alone.

        Returns how many were written. Rows are built as columns and inserted as numpy arrays
        (`object_columns`), one statement per table, so a batch costs about what one cell does.
        `measures` (fingerprint, session id, JSON), measured under the code's `version`, go to
        `measure_memo` in the same transaction (replacing one stored under the same fingerprint).
        """
        if not cells:
            self._save_measures(measures, version)
            return 0
        stored = {
            (s, c, int(r))
            for s, c, r in self._con.execute(
                "SELECT session_id, config, repeat FROM cells WHERE run_id = ? AND session_id IN "
                "(SELECT unnest(?::VARCHAR[]))",
                [run_id, sorted({c.result.session_id for c in cells})],
            ).fetchall()
        }
        fresh: list[FinishedCell] = []
        for cell in cells:
            cell_key = (cell.result.session_id, cell.config, cell.repeat)
            if cell_key not in stored:
                stored.add(cell_key)
                fresh.append(cell)
        if not fresh:
            self._save_measures(measures, version)
            return 0
        now = _now()
        rows: dict[str, dict[str, list[Any]]] = {
            "cells": {},
            "cell_metrics": {},
            "cell_calls": {},
            "cell_compactions": {},
        }

        def add(table: str, **values: Any) -> None:
            columns = rows[table]
            for name, value in values.items():
                columns.setdefault(name, []).append(value)

        for cell in fresh:
            result = cell.result
            key = {"run_id": run_id, "session_id": result.session_id, "config": cell.config, "repeat": cell.repeat}
            metrics = {name: _clean(value) for name, value in result.metrics.items()}
            add(
                "cells",
                **key,
                dataset=cell.dataset,
                termination=result.termination,
                error=result.error,
                duration_s=cell.duration_s,
                summarizer=result.config.summarizer,
                metrics=_json(metrics),
                finished_at=now,
            )
            for name, value in metrics.items():
                number = _finite(value)
                text = (
                    None if number is not None or value is None else value if isinstance(value, str) else _json(value)
                )
                add("cell_metrics", **key, metric=name, value=number, text=text)
            recorded_input, recorded_compaction = _recorded(result)
            calls = rows["cell_calls"]
            count = len(result.calls)
            for name, value in key.items():
                calls.setdefault(name, []).extend([value] * count)
            for column, field_name in _CALL_FIELDS:
                calls.setdefault(column, []).extend(call_column(result.calls, field_name))
            calls.setdefault("recorded_input_tokens", []).extend(recorded_input)
            calls.setdefault("recorded_compaction", []).extend(recorded_compaction)
            details = _compaction_details(result)
            for index, event in enumerate(result.compactions):
                usage = event.summarizer_usage or {}
                add(
                    "cell_compactions",
                    **key,
                    event_index=index,
                    call_index=event.call_index,
                    messages_before=event.messages_before,
                    messages_after=event.messages_after,
                    tokens_before=event.tokens_before,
                    tokens_after=event.tokens_after,
                    summary=event.summary,
                    duration_s=event.duration_s,
                    fell_back=event.fell_back,
                    no_progress=event.no_progress,
                    breaker_open=event.breaker_open,
                    error=event.error,
                    noop=event.noop,
                    summarizer_calls=usage.get("calls"),
                    summarizer_input_tokens=usage.get("input_tokens"),
                    summarizer_output_tokens=usage.get("output_tokens"),
                    summarizer_cost_usd=_finite(usage.get("cost_usd")),
                    details=_clean_json(details[index], sort_keys=True) if details[index] else None,
                )
        self._con.execute("BEGIN TRANSACTION")
        try:
            for table, columns in rows.items():
                if not columns:
                    continue
                insert_rows(self._con, table, object_columns(columns))
            self._save_measures(measures, version)
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        return len(fresh)

    def _frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        try:
            return self._con.execute(sql, list(params)).df()
        except duckdb.Error as exc:
            raise StoreError(f"reading results failed: {exc}") from exc

    def _save_measures(self, measures: Sequence[MeasureRow], version: str) -> None:
        if not measures:
            return
        unique = {fingerprint: (session_id, text) for fingerprint, session_id, text in measures}
        rows: dict[str, list[Any]] = {
            "fingerprint": list(unique),
            "session_id": [session_id for session_id, _ in unique.values()],
            "version": [version] * len(unique),
            "measures": [text for _, text in unique.values()],
            "measured_at": [_now()] * len(unique),
        }
        insert_rows(self._con, "measure_memo", object_columns(rows), existing="replace")

    def stored_measures(self, session_ids: Sequence[str], version: str) -> pa.Table:
        """The measures stored for the sessions `session_ids` under the code's `version`: an Arrow table of
        `fingerprint` and `measures` (`workbench.quality.measure_memo.StoredMeasures` reads it)."""
        return self._con.sql(
            "SELECT fingerprint, measures FROM measure_memo WHERE version = $version "
            "AND session_id IN (SELECT unnest($ids::VARCHAR[]))",
            params={"version": version, "ids": list(session_ids)},
        ).to_arrow_table()

    def forget_measures(self, keep_version: str) -> int:
        """Delete the measures of every code version but `keep_version` (each edit of the code is one, so
        they would pile up); returns how many went."""
        return len(
            self._con.execute("DELETE FROM measure_memo WHERE version <> ? RETURNING 1", [keep_version]).fetchall()
        )

    def delete_cells(self, run_id: str) -> None:
        """Delete a run's cells at every level (the run and its configs stay), in one transaction."""
        self._con.execute("BEGIN TRANSACTION")
        try:
            for table, column in CELL_TABLES:
                self._con.execute(f"DELETE FROM {table} WHERE {column} = ?", [run_id])
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise

    def run_exists(self, run_id: str) -> bool:
        return bool(self._con.execute("SELECT count(*) FROM runs WHERE id = ?", [run_id]).fetchall()[0][0])

    def resolve_run_id(self, run_id: str, *, by_name: bool = True) -> str:
        """A stored run id from an id, a unique id prefix, or (when `by_name`) a run name (its newest run)."""
        if self.run_exists(run_id):
            return run_id
        rows = self._con.execute(
            "SELECT id FROM runs WHERE starts_with(id, ?) ORDER BY started_at DESC", [run_id]
        ).fetchall()
        if len(rows) == 1:
            return str(rows[0][0])
        named = (
            self._con.execute(
                "SELECT id FROM runs WHERE name = ? ORDER BY started_at DESC LIMIT 1", [run_id]
            ).fetchall()
            if by_name
            else []
        )
        if named:
            return str(named[0][0])
        if rows:
            raise StoreError(f"run id {run_id!r} is ambiguous: {', '.join(str(r[0]) for r in rows[:5])}")
        known = [
            str(r[0]) for r in self._con.execute("SELECT id FROM runs ORDER BY started_at DESC LIMIT 5").fetchall()
        ]
        raise StoreError(f"no run {run_id!r}" + (f"; recent runs: {', '.join(known)}" if known else "; no runs yet"))

    def delete_runs(self, run_ids: Sequence[str]) -> dict[str, int]:
        """Delete whole runs (their cells at every level, configs and the run itself) in one transaction;
        returns the cells deleted per run id. Every id (an id or a unique prefix, never a name: what is
        deleted must be named exactly) is resolved first: one unknown id deletes nothing."""
        resolved = list(dict.fromkeys(self.resolve_run_id(run_id, by_name=False) for run_id in run_ids))
        cells = {
            run_id: int(self._con.execute("SELECT count(*) FROM cells WHERE run_id = ?", [run_id]).fetchall()[0][0])
            for run_id in resolved
        }
        self._con.execute("BEGIN TRANSACTION")
        try:
            for table, column in RUN_TABLES:
                self._con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?::VARCHAR[]))", [resolved])
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        return cells

    def runs_frame(self) -> pd.DataFrame:
        frame = self._frame(
            """
            SELECT r.id, r.name, r.kind, r.status, r.cells_total, count(c.session_id) AS cells_done,
                   r.code_version, r.dataset_version, r.datasets, r.started_at, r.finished_at, r.host, r.pid
            FROM runs r LEFT JOIN cells c ON c.run_id = r.id
            GROUP BY ALL ORDER BY r.started_at DESC""",
        )
        import pandas as pd

        frame["status"] = [
            shown_status(run_id, status, None if pd.isna(host) else str(host), None if pd.isna(pid) else int(pid))
            for run_id, status, host, pid in zip(frame["id"], frame["status"], frame["host"], frame["pid"], strict=True)
        ]
        return frame.drop(columns=["host", "pid"])

    def results_frame(self, run_id: str) -> pd.DataFrame:
        """One row per cell: `session_id`, `dataset`, `config`, `repeat`, `termination`, then every metric."""
        import pandas as pd

        cells = self._frame(
            "SELECT session_id, dataset, config, repeat, termination, error, duration_s, metrics "
            "FROM cells WHERE run_id = ? ORDER BY session_id, config, repeat",
            [run_id],
        )
        order = [
            r[0]
            for r in self._con.execute(
                "SELECT config FROM run_configs WHERE run_id = ? ORDER BY position", [run_id]
            ).fetchall()
        ]
        metric_rows = [json.loads(m) if isinstance(m, str) else (m or {}) for m in cells.pop("metrics")]
        metrics = pd.DataFrame(metric_rows, index=cells.index)
        metrics = metrics.drop(columns=[c for c in ("termination",) if c in metrics.columns])
        frame = pd.concat([cells, metrics], axis=1)
        frame.insert(0, "run_id", run_id)
        if order:
            rank = {name: i for i, name in enumerate(order)}
            frame = frame.sort_values(
                ["session_id", "config", "repeat"],
                key=lambda s: s.map(rank) if s.name == "config" else s,
                kind="stable",
            )
            frame = frame.reset_index(drop=True)
        return frame

    def summarizers_used(self, run_id: str, configs: Sequence[str] | None = None) -> list[str]:
        """The summarizer models of a run's configs (of `configs`, when given) whose cells called one:
        what the run's summaries came from."""
        called = {
            name
            for (name,) in self._con.execute(
                "SELECT DISTINCT config FROM cells WHERE run_id = ? "
                "AND coalesce(TRY_CAST(json_extract(metrics, '$.summarizer_calls') AS BIGINT), 0) > 0",
                [run_id],
            ).fetchall()
        }
        rows = self._con.execute(
            "SELECT config, spec FROM run_configs WHERE run_id = ? ORDER BY position", [run_id]
        ).fetchall()
        models = []
        for name, spec in rows:
            config = json.loads(spec) if isinstance(spec, str) else (spec or {})
            if name in called and (configs is None or name in configs) and config.get("summarizer"):
                models.append(str(config["summarizer"]))
        return list(dict.fromkeys(models))

    def noop_configs(self, run_id: str) -> list[NoopConfig]:
        """The configs of a run whose cells hold no-op firings (`noop_compactions`) and nothing else: no
        compaction that changed a context, none that failed (in the order of `run_configs`)."""
        rows = self._con.execute(
            """
            WITH counted AS (
                SELECT config, session_id, dataset, termination,
                       coalesce(TRY_CAST(json_extract(metrics, '$.noop_compactions') AS BIGINT), 0) AS noops,
                       coalesce(TRY_CAST(json_extract(metrics, '$.compactions') AS BIGINT), 0) AS changed
                FROM cells WHERE run_id = ?)
            SELECT k.config, count(DISTINCT k.session_id), sum(k.noops),
                   list(DISTINCT k.dataset ORDER BY k.dataset) FILTER (WHERE k.dataset IS NOT NULL)
            FROM counted k LEFT JOIN run_configs r ON r.run_id = ? AND r.config = k.config
            GROUP BY k.config, r.position
            HAVING sum(k.noops) > 0 AND sum(k.changed) = 0
               AND count(*) FILTER (WHERE k.termination = 'compaction_failed') = 0
            ORDER BY r.position, k.config""",
            [run_id, run_id],
        ).fetchall()
        return [
            NoopConfig(str(config), int(sessions), int(firings), tuple(map(str, datasets or ())))
            for config, sessions, firings, datasets in rows
        ]

    def calls_frame(self, run_id: str) -> pd.DataFrame:
        return self._frame(
            "SELECT * FROM cell_calls WHERE run_id = ? ORDER BY session_id, config, repeat, call_index", [run_id]
        )

    def compactions_frame(self, run_id: str) -> pd.DataFrame:
        return self._frame(
            "SELECT * FROM cell_compactions WHERE run_id = ? ORDER BY session_id, config, repeat, event_index",
            [run_id],
        )

    def run_info(self, run_id: str) -> RunInfo:
        rows = self._con.execute(
            """
            SELECT r.id, r.name, r.kind, r.status, r.cells_total, count(c.session_id), r.code_version,
                   r.dataset_version, r.started_at, r.finished_at, r.host, r.pid
            FROM runs r LEFT JOIN cells c ON c.run_id = r.id WHERE r.id = ? GROUP BY ALL""",
            [run_id],
        ).fetchall()
        if not rows:
            raise StoreError(f"no run {run_id!r}")
        *fields, host, pid = rows[0]
        info = RunInfo(*fields)
        return replace(info, status=shown_status(info.id, info.status, host, pid))

    def run_configs(self, run_id: str) -> dict[str, dict[str, Any]]:
        """The full replay config (`ReplayConfig.to_dict()`) of each named config of a run, in order."""
        rows = self._con.execute(
            "SELECT config, spec FROM run_configs WHERE run_id = ? ORDER BY position", [run_id]
        ).fetchall()
        return {name: json.loads(spec) if isinstance(spec, str) else dict(spec) for name, spec in rows}

    def summary_labels(self) -> pd.DataFrame:
        """Every summary label (`workbench.labels`): what exports join to a run's compactions."""
        from workbench.store.labels import summary_labels_frame

        return summary_labels_frame(self._con)

    def run_spec(self, run_id: str) -> dict[str, Any]:
        rows = self._con.execute("SELECT spec FROM runs WHERE id = ?", [run_id]).fetchall()
        if not rows:
            raise StoreError(f"no run {run_id!r}")
        value = rows[0][0]
        return json.loads(value) if isinstance(value, str) else dict(value)
