"""Exports of a run: csv, parquet, json, and a self-contained HTML report.

- csv / parquet: one table, written by DuckDB's COPY: `level="cells"` (default; one row per
  session × config × repeat, every metric a column), `"calls"` or `"compactions"`.
- json: one document with the run, its configs, the cells and the compactions (summaries included).
- compactions (the json's, the compactions level, the html's summaries) carry the human labels of their
  summaries: `label` ('good' | 'bad') and `label_note`, empty where none (`workbench.labels`).
- html: a report that works offline (plotly.js is embedded, nothing is fetched): the leaderboard,
  cost versus quality with the Pareto front, token curves with compaction markers, and the
  summaries. Every piece of session text is escaped.

Replays that stop early total only the calls they made. The tabular exports keep every row and mark
each with `in_complete_pairs` (its session is one where every config of the run completed), so a
reader filters as the workbench compares; the json document says what was left out under
`complete_pairs` (`CompletePairs.to_dict`). The html report's leaderboard and chart are over the
complete pairs (every session with `complete_only=False`) and show the same note as the app and CLI.

The file is written to a temporary name and renamed, so a failed export leaves nothing half-written.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import ConfigError, unwritable
from workbench.experiments import charts
from workbench.experiments.compare import CompletePairs, complete_pairs, metric_direction
from workbench.extractive import baseline_note

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from workbench.store import RunResults

FORMATS = ("csv", "parquet", "json", "html")
#: The format each file name ending implies (`format_of`).
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".html": "html", ".htm": "html"}
LEVELS = ("cells", "calls", "compactions")
MAX_REPORT_SESSIONS = 4
MAX_REPORT_SUMMARIES = 200


def _frames(stored: RunResults, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return (stored.results_frame(run_id), stored.calls_frame(run_id), labelled_compactions(stored, run_id))


def labelled_compactions(stored: RunResults, run_id: str) -> pd.DataFrame:
    """The run's compactions with the human labels of their summaries: `label` ('good' | 'bad') and
    `label_note` after `summary`, empty where the compaction has no label (`workbench.labels`)."""
    from workbench.config import config_hash
    from workbench.labels import with_labels

    hashes = {name: config_hash(spec) for name, spec in stored.run_configs(run_id).items()}
    return with_labels(stored.compactions_frame(run_id), stored.summary_labels(), hashes)


def writable_target(path: Path, format: str) -> None:
    """Refuse, before any work, a target that cannot become the export file: a folder, a path under a
    file, or a folder that refuses new files."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give the file to write, such as {path / f'report.{format}'}")
    reason = unwritable(path)
    if reason is not None:
        raise ConfigError(f"cannot write {path}: {reason}")


def _write_atomically(path: Path, write: Any) -> None:
    """Write through a hidden partial file that replaces `path` only once complete. An OSError, or
    from a COPY too, becomes a ConfigError naming `path` (not the partial file)."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(partial)
        os.replace(partial, path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if partial.is_file() or partial.is_symlink():
            partial.unlink()


def _json_ready(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            return _json_ready(value.item())
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    import pandas as pd

    clean = frame.astype(object).where(pd.notna(frame), None)
    return [_json_ready(row) for row in clean.to_dict(orient="records")]


def format_of(path: str | os.PathLike[str]) -> str:
    """The export format a file name implies (`report.html` -> html, case ignored); a ConfigError
    names the endings it knows when the name implies none, or says the path is a folder."""
    if Path(path).is_dir():
        raise ConfigError(
            f"{os.fspath(path)} is a folder; give the file to write, such as {Path(path) / 'report.html'}"
        )
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        known = ", ".join(f"{end} ({fmt})" for end, fmt in SUFFIXES.items())
        raise ConfigError(
            f"cannot tell the export format from {os.fspath(path)!r}; name the file with one of "
            f"{known}, or give the format"
        )
    return SUFFIXES[suffix]


def export(
    run_id: str,
    format: str,
    path: str | os.PathLike[str],
    db: str | None = None,
    *,
    level: str = "cells",
    complete_only: bool = True,
) -> Path:
    """Write run `run_id` (an id, unique prefix or run name) as csv, parquet, json or html; returns the path.

    Tables keep every row with `in_complete_pairs`; the html report compares configs on the complete
    pairs unless `complete_only=False` (see the module's doc).
    A file name whose ending implies another format (`format="csv"` into `x.parquet`) is refused: the
    file would not be what its name says."""
    if format not in FORMATS:
        raise ConfigError(f"unknown export format {format!r}; valid: {', '.join(FORMATS)}")
    if level not in LEVELS:
        raise ConfigError(f"unknown level {level!r}; valid: {', '.join(LEVELS)}")
    if level != "cells" and format not in ("csv", "parquet"):
        raise ConfigError(
            f"a {format} export holds the whole run (its cells and compactions), so it takes no level; "
            f"level {level!r} is for one table, in csv or parquet"
        )
    target = Path(path)
    writable_target(target, format)
    implied = SUFFIXES.get(target.suffix.lower())
    if implied is not None and implied != format:
        raise ConfigError(
            f"{target} names a {implied} file, but the format is {format}; name the file "
            f"{target.with_suffix('.' + format)} or give the format {implied}"
        )
    from workbench.store import open_results
    from workbench.store.files import write_frame

    with open_results(db) as stored:
        run_id = stored.resolve_run_id(run_id)
        if format in ("csv", "parquet"):
            if level == "compactions":
                frame = labelled_compactions(stored, run_id)
            else:
                frame = stored.calls_frame(run_id) if level == "calls" else stored.results_frame(run_id)
            shown = marked(frame, complete_pairs(stored.results_frame(run_id)))
            _write_atomically(target, lambda p: write_frame(shown, p, format))
        elif format == "json":
            document = _document(stored, run_id)
            _write_atomically(
                target, lambda p: p.write_text(json.dumps(document, indent=1, ensure_ascii=False), encoding="utf-8")
            )
        else:
            report = render_report(stored, run_id, complete_only=complete_only)
            _write_atomically(target, lambda p: p.write_text(report, encoding="utf-8"))
    return target


def marked(frame: pd.DataFrame, pairs: CompletePairs) -> pd.DataFrame:
    """`frame` (cells, calls or compactions of a run) with `in_complete_pairs` after `termination` (or
    `config`): whether the row's session is one where every config of the run completed."""
    shown = frame.copy()
    after = next((c for c in ("termination", "config") if c in shown.columns), None)
    position = list(shown.columns).index(after) + 1 if after is not None else len(shown.columns)
    shown.insert(
        position,
        "in_complete_pairs",
        shown["session_id"].astype(str).isin(pairs.complete_units) if "session_id" in shown else True,
    )
    return shown


def _parsed_details(row: dict[str, Any]) -> dict[str, Any]:
    """A compaction's row with its `details` (stored as JSON text) as the object it holds, not a string in a string."""
    details = row.get("details")
    if isinstance(details, str):
        try:
            row["details"] = json.loads(details)
        except ValueError:
            pass
    return row


def _document(stored: RunResults, run_id: str) -> dict[str, Any]:
    info = stored.run_info(run_id)
    cells, _, compactions = _frames(stored, run_id)
    pairs = complete_pairs(cells)
    return {
        "run": _json_ready(vars(info)),
        "spec": stored.run_spec(run_id),
        "configs": [{"name": name, **spec} for name, spec in stored.run_configs(run_id).items()],
        "results": _records(marked(cells, pairs)),
        "compactions": [_parsed_details(row) for row in _records(marked(compactions, pairs))],
        "note": baseline_note(stored.summarizers_used(run_id)),
        "complete_pairs": _json_ready(pairs.to_dict()),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


# -- the HTML report ---------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 24px auto; max-width: 1200px;
       color: #222; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ddd; }
.meta { color: #555; font-size: 0.9em; } .banner { background: #fff4d6; border: 1px solid #e6c25a;
  padding: 8px 12px; border-radius: 6px; margin: 12px 0; }
table { border-collapse: collapse; font-size: 0.88em; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
td.best { background: #d8f0d8; font-weight: 600; } td.worst { background: #f8dede; }
pre { white-space: pre-wrap; font-size: 0.85em; margin: 0; max-height: 24em; overflow: auto; }
details { margin: 6px 0; }
"""


def leaderboard_html(board: pd.DataFrame, pairs: CompletePairs | None = None) -> str:
    """The leaderboard as an HTML table; per metric, the best config is green and the worst red.

    Only the configs of `pairs.rankable` are ranked (a config that completed fewer sessions than another
    is marked neither best nor worst), and `pairs.note` under the table says what the means are over."""
    ranked = board if pairs is None else board[[str(c) in pairs.rankable for c in board.index]]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in board.columns)
    best: dict[str, Any] = {}
    worst: dict[str, Any] = {}
    for column in board.columns:
        direction = metric_direction(str(column))
        values = ranked[column].dropna()
        if direction == "none" or values.nunique() < 2:
            continue
        best[column] = values.idxmax() if direction == "higher" else values.idxmin()
        worst[column] = values.idxmin() if direction == "higher" else values.idxmax()
    rows = []
    for config, row in board.iterrows():
        cells = []
        for column in board.columns:
            marker = (
                ' class="best"'
                if best.get(column) == config
                else ' class="worst"'
                if worst.get(column) == config
                else ""
            )
            cells.append(f"<td{marker}>{html.escape(charts.format_metric(str(column), row[column]))}</td>")
        rows.append(f'<tr><td class="text">{html.escape(str(config))}</td>{"".join(cells)}</tr>')
    note = pairs.note if pairs is not None else None
    return (
        f'<table><thead><tr><th class="text">config</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>" + (f'<p class="banner">{html.escape(note)}</p>' if note else "")
    )


def _stopped(results: pd.DataFrame, session_id: str) -> dict[str, str]:
    """Why each config's replay of the session ended early (first repeat), for the token curves."""
    if not len(results) or "termination" not in results.columns:
        return {}
    rows = results[
        (results["session_id"] == session_id)
        & (results["repeat"] == 0)
        & results["termination"].notna()
        & (results["termination"] != "completed")
    ]
    return {
        str(row["config"]): charts.stop_reason(row["termination"], row.get("error"))
        for row in rows.to_dict(orient="records")
    }


def _figure_html(figure: Any) -> str:
    return str(
        figure.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True})
    )


#: The report's sections holding figures (`report_figures`), in order.
COST_QUALITY_SECTION = "Cost versus quality"
TOKENS_SECTION = "Context tokens per call"


def report_figures(
    results: pd.DataFrame,
    calls: pd.DataFrame,
    compactions: pd.DataFrame,
    *,
    context_limit: int | None = None,
    complete_only: bool = True,
) -> list[tuple[str, go.Figure]]:
    """The figures of the HTML report, each with its section: cost versus quality over the complete
    pairs (when the run has a quality metric), then the token curves of the `MAX_REPORT_SESSIONS`
    longest sessions (first repeat). The app shows the same list."""
    figures: list[tuple[str, go.Figure]] = []
    pairs = complete_pairs(results, complete_only=complete_only) if len(results) else None
    scatter = charts.cost_quality(results, pairs=pairs) if pairs is not None else None
    if scatter is not None:
        figures.append((COST_QUALITY_SECTION, scatter))
    if len(calls):
        sizes = calls.groupby("session_id")["call_index"].max().sort_values(ascending=False)
        for session_id in list(sizes.index)[:MAX_REPORT_SESSIONS]:
            session_calls = calls[(calls["session_id"] == session_id) & (calls["repeat"] == 0)]
            session_events = (
                compactions[(compactions["session_id"] == session_id) & (compactions["repeat"] == 0)]
                if len(compactions)
                else None
            )
            figure = charts.token_curves(
                session_calls,
                session_events,
                context_limit=context_limit,
                title=f"session {session_id[:16]}",
                stopped=_stopped(results, session_id),
            )
            figures.append((TOKENS_SECTION, figure))
    return figures


def run_figures(
    run_id: str, db: str | os.PathLike[str] | None = None, *, complete_only: bool = True
) -> list[tuple[str, go.Figure]]:
    """`report_figures` of a stored run (an id, unique prefix or name): the figures its HTML report draws."""
    from workbench.store import open_results

    with open_results(db, read_only=True) as stored:
        run_id = stored.resolve_run_id(run_id)
        results, calls, compactions = _frames(stored, run_id)
        limit = _shared_limit(stored, run_id)
    return report_figures(results, calls, compactions, context_limit=limit, complete_only=complete_only)


def _shared_limit(stored: RunResults, run_id: str) -> int | None:
    """The context window every config of the run replays in, None when they differ."""
    limits = {spec.get("context_limit") for spec in stored.run_configs(run_id).values() if isinstance(spec, Mapping)}
    limit = limits.pop() if len(limits) == 1 else None
    return int(limit) if isinstance(limit, (int, float)) else None


def export_bytes(
    run_id: str, format: str, db: str | os.PathLike[str] | None = None, *, complete_only: bool = True
) -> bytes:
    """The `export` of a run (cells level for the tables) as the bytes of its file, for a download:
    written to a temporary folder by `export`, read back, and removed."""
    import tempfile

    if format not in FORMATS:
        raise ConfigError(f"unknown export format {format!r}; valid: {', '.join(FORMATS)}")
    with tempfile.TemporaryDirectory(prefix="workbench-export-") as folder:
        target = export(
            run_id,
            format,
            Path(folder) / f"run.{format}",
            db=None if db is None else os.fspath(db),
            complete_only=complete_only,
        )
        return target.read_bytes()


def report_html(
    title: str,
    results: pd.DataFrame,
    calls: pd.DataFrame,
    compactions: pd.DataFrame,
    *,
    meta: Sequence[tuple[str, str]] = (),
    summarizers: Sequence[str] = (),
    context_limit: int | None = None,
    complete_only: bool = True,
) -> str:
    """A self-contained HTML report of result frames (a stored run, or an ad-hoc comparison); the
    leaderboard and the chart compare configs on the complete pairs unless `complete_only=False`."""
    from plotly.offline import get_plotlyjs

    parts = [f"<h1>{html.escape(title)}</h1>"]
    if meta:
        parts.append(
            '<p class="meta">' + " · ".join(f"{html.escape(k)}: {html.escape(str(v))}" for k, v in meta) + "</p>"
        )
    note = baseline_note(summarizers)
    if note:
        parts.append(f'<div class="banner">{html.escape(note)}</div>')
    parts.append("<h2>Leaderboard</h2>")
    pairs = complete_pairs(results, complete_only=complete_only) if len(results) else None
    board = charts.leaderboard(results, pairs=pairs) if pairs is not None else None
    parts.append(leaderboard_html(board, pairs) if board is not None else "<p>No finished cells.</p>")
    heading = None
    for section, figure in report_figures(
        results, calls, compactions, context_limit=context_limit, complete_only=complete_only
    ):
        if section != heading:
            parts.append(f"<h2>{html.escape(section)}</h2>")
            heading = section
        parts.append(_figure_html(figure))
    if len(compactions):
        parts.append("<h2>Summaries</h2>")
        shown = compactions[compactions["summary"].notna()].head(MAX_REPORT_SUMMARIES)
        for row in shown.to_dict(orient="records"):
            parts.append(
                f"<details><summary>{html.escape(str(row['config']))} · session "
                f"{html.escape(str(row['session_id'])[:16])} · before call {row['call_index']} · "
                f"{row['tokens_before']:,} → {row['tokens_after']:,} tokens{_label_text(row)}</summary>"
                f"<pre>{html.escape(str(row['summary']))}</pre></details>"
            )
        if len(compactions[compactions["summary"].notna()]) > len(shown):
            parts.append(f'<p class="meta">First {len(shown)} summaries shown; the json export has them all.</p>')
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<style>{_STYLE}</style><script type="text/javascript">{get_plotlyjs()}</script></head>'
        f"<body>{body}</body></html>"
    )


def _label_text(row: Mapping[Any, Any]) -> str:
    """` · labelled good: NOTE` (escaped) for a compaction a researcher labelled, else ""."""
    label = row.get("label")
    if not isinstance(label, str):
        return ""
    note = row.get("label_note")
    return html.escape(f" · labelled {label}" + (f": {note}" if isinstance(note, str) and note else ""))


def render_report(stored: RunResults, run_id: str, *, complete_only: bool = True) -> str:
    """The HTML report of a stored run."""
    info = stored.run_info(run_id)
    results, calls, compactions = _frames(stored, run_id)
    specs = list(stored.run_configs(run_id).values())
    limits = {spec.get("context_limit") for spec in specs if isinstance(spec, Mapping)}
    meta = [
        ("run", info.id),
        ("status", info.status),
        ("cells", f"{info.cells_done}/{info.cells_total}"),
        ("code", info.code_version or "?"),
        ("dataset version", info.dataset_version or "?"),
        ("started", info.started_at.isoformat(timespec="seconds") if info.started_at else "?"),
    ]
    return report_html(
        f"Experiment {info.name}",
        results,
        calls,
        compactions,
        meta=meta,
        summarizers=stored.summarizers_used(run_id),
        context_limit=limits.pop() if len(limits) == 1 else None,
        complete_only=complete_only,
    )
