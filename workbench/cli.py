"""The `workbench` command (also `python -m workbench`).

Each command is a thin function over the library: it parses options, calls `workbench.store`
(and later `replay`, `experiments`...), and prints a result, as text or with `--json`. Every
command takes `--db PATH` (default `$WORKBENCH_DB`, else `data/workbench.duckdb`); it may also be
given before the command (`workbench --db X sessions`).

Errors the workbench raises on purpose (`WorkbenchError`: StoreError, FormatError, ConfigError)
print one line, `error: ...`, on stderr and exit with status 1 (2 for configuration errors),
without a traceback. Heavy libraries (pandas, litellm, streamlit) are imported by the commands
that need them, never at module level, so `workbench --help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, TypeVar

import click

from workbench.errors import ConfigError, WorkbenchError

F = TypeVar("F", bound=Callable[..., Any])

# The importers' format names (workbench.importers.FORMATS; kept here so --help needs no import).
FORMAT_CHOICES = ("auto", "openai", "anthropic", "claude-code", "codex", "swe-agent", "mini-swe-agent",
                  "openhands", "aider")
SAMPLES_DATASET = "samples"
PROGRESS_MIN_FILES = 20


class WorkbenchGroup(click.Group):
    """A click group that turns `WorkbenchError`s into a one-line message and an exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WorkbenchError as exc:
            fail(str(exc), 2 if isinstance(exc, ConfigError) else 1)


def fail(message: str, status: int = 1) -> None:
    """Print `error: message` on stderr and exit with `status`."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(status)


# --------------------------------------------------------------------------------------------
# Shared options
# --------------------------------------------------------------------------------------------

def db_option(function: F) -> F:
    """`--db PATH` on a command (overrides a `--db` given before the command)."""
    return click.option("--db", "db_path", metavar="PATH", default=None,
                        help="Database file [default: $WORKBENCH_DB, else data/workbench.duckdb].")(function)


def json_option(function: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(function)


def resolve_db(db_path: str | None) -> str:
    """The database path: the command's --db, else the group's --db, else the default."""
    if db_path:
        return db_path
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.obj and ctx.obj.get("db"):
            return str(ctx.obj["db"])
        ctx = ctx.parent
    from workbench.db import default_path

    return default_path()


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=_plain))


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Rows as aligned text columns (no pandas: keeps the command fast)."""
    if not rows:
        return
    cells = [[("" if row.get(c) is None else str(row.get(c))) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row.get(c), (int, float)) for row in rows) for c in columns]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=False)).rstrip()

    click.echo(line(columns))
    for row in cells:
        click.echo(line(row))


# --------------------------------------------------------------------------------------------
# The group
# --------------------------------------------------------------------------------------------

@click.group(cls=WorkbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_path", metavar="PATH", default=None,
              help="Database file for every command [default: $WORKBENCH_DB, else data/workbench.duckdb].")
@click.version_option(package_name="compaction-workbench", prog_name="workbench")
@click.pass_context
def main(ctx: click.Context, db_path: str | None) -> None:
    """Compaction Workbench: import recorded agent sessions and replay them under compaction configs."""
    ctx.ensure_object(dict)
    if db_path:
        ctx.obj["db"] = db_path


# --------------------------------------------------------------------------------------------
# import
# --------------------------------------------------------------------------------------------

def _count_candidates(paths: tuple[str, ...]) -> int:
    """How many files the import will read (folders walked with the importers' rules)."""
    if not any(os.path.isdir(p) for p in paths):
        return len(paths)
    from workbench import importers
    from workbench.store import _candidate_files

    return sum(1 for _ in _candidate_files(importers, list(paths)))


@main.command("import")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--format", "fmt", type=click.Choice(FORMAT_CHOICES), default="auto", show_default=True,
              help="Format of the files (auto-detected per file by default).")
@click.option("--dataset", default=None, metavar="NAME",
              help="Dataset to file the sessions under [default: the format name].")
@click.option("--progress/--no-progress", default=None,
              help=f"Progress bar on stderr [default: on for {PROGRESS_MIN_FILES}+ files].")
@db_option
@json_option
def import_cmd(paths: tuple[str, ...], fmt: str, dataset: str | None, progress: bool | None,
               db_path: str | None, as_json: bool) -> None:
    """Import session files or folders (walked recursively).

    Prints the sessions and messages imported, the duplicates skipped (sessions already in the
    database) and one line per file that failed. Good files are imported even when others fail;
    the exit status is 1 if any file failed.
    """
    from workbench.store import Store

    path = resolve_db(db_path)
    total = _count_candidates(paths)
    show = progress if progress is not None else total >= PROGRESS_MIN_FILES
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="file", file=sys.stderr, desc="importing", leave=False)
    try:
        with Store(path) as store:
            report = store.import_paths(list(paths), format=fmt, dataset=dataset,
                                        progress=(lambda _outcome: bar.update(1)) if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        print_json({"db": path, **report.to_dict()})
    else:
        click.echo(f"imported {report.sessions} session{'s' * (report.sessions != 1)} "
                   f"({report.messages} messages, {report.calls} calls) into {path}")
        click.echo(f"skipped {report.duplicates} duplicate session{'s' * (report.duplicates != 1)} "
                   f"(already imported)")
        if report.skipped_files:
            click.echo(f"ignored {len(report.skipped_files)} file{'s' * (len(report.skipped_files) != 1)} "
                       f"matching no session format")
        for outcome in report.errors:
            click.echo(f"error: {outcome.error}", err=True)
        if report.errors:
            click.echo(f"{len(report.errors)} of {len(report.files)} file{'s' * (len(report.files) != 1)} "
                       f"failed", err=True)
    if report.errors:
        raise SystemExit(1)


# --------------------------------------------------------------------------------------------
# sessions, datasets
# --------------------------------------------------------------------------------------------

@main.command("sessions")
@click.option("--dataset", default=None, metavar="NAME", help="Only this dataset.")
@click.option("--where", default=None, metavar="SQL",
              help="SQL condition over the sessions (columns: id, dataset, format, source, messages, calls, ...).")
@db_option
@json_option
def sessions_cmd(dataset: str | None, where: str | None, db_path: str | None, as_json: bool) -> None:
    """List the imported sessions (id, dataset, format, messages, calls, probes, source)."""
    from workbench.store import Store

    with Store(resolve_db(db_path)) as store:
        rows = store.session_rows(dataset=dataset, where=where)
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo("no sessions" + (f" in dataset {dataset!r}" if dataset else ""))
        return
    print_table(rows, ["id", "dataset", "format", "messages", "calls", "probes", "source"])


@main.command("datasets")
@db_option
@json_option
def datasets_cmd(db_path: str | None, as_json: bool) -> None:
    """List the datasets with their session, message and call counts."""
    from workbench.store import Store

    with Store(resolve_db(db_path)) as store:
        rows = store.dataset_rows()
    if as_json:
        print_json(rows)
    elif rows:
        print_table(rows, ["name", "sessions", "messages", "calls", "description"])
    else:
        click.echo("no datasets")


# --------------------------------------------------------------------------------------------
# init
# --------------------------------------------------------------------------------------------

def init_database(path: str) -> dict[str, Any]:
    """Create the database; when it holds no session, load the bundled samples as `samples`."""
    from workbench import samples
    from workbench.store import Store

    existed = os.path.exists(path)
    with Store(path) as store:
        imported = 0
        if store.count() == 0:
            report = store.import_sessions(samples.bundled_samples(), dataset=SAMPLES_DATASET,
                                           source="datasets/samples/samples.jsonl.gz")
            store.describe_dataset(SAMPLES_DATASET, "Generated coding-agent sessions with planted facts and "
                                                    "probes (python -m workbench.samples)")
            imported = report.sessions
        return {"db": path, "created": not existed, "imported": imported, "sessions": store.count()}


@main.command("init")
@db_option
@json_option
def init_cmd(db_path: str | None, as_json: bool) -> None:
    """Create the database and, if it has no sessions, load the bundled sample sessions (idempotent)."""
    result = init_database(resolve_db(db_path))
    if as_json:
        print_json(result)
    elif result["imported"]:
        click.echo(f"initialised {result['db']}: imported {result['imported']} sample sessions "
                   f"(dataset {SAMPLES_DATASET!r})")
    else:
        click.echo(f"{result['db']} is ready: {result['sessions']} sessions (nothing to import)")


# --------------------------------------------------------------------------------------------
# replay
# --------------------------------------------------------------------------------------------

def find_session_id(store: Any, prefix: str) -> str:
    """The stored session id that `prefix` names (a unique prefix is enough)."""
    if store.has_session(prefix):
        return prefix
    matches = [i for i in store.session_ids() if i.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ConfigError(f"no session {prefix!r} in {store.path}; `workbench sessions` lists them")
    raise ConfigError(f"session prefix {prefix!r} is ambiguous: {', '.join(matches[:5])}...")


@main.command("replay")
@click.argument("session_id", metavar="SESSION_ID")
@click.option("--config", "config_spec", required=True, metavar="SPEC",
              help="A TOML file, or inline TOML (e.g. 'trigger = {kind=\"pressure\"}\\nstrategy = {...}').")
@click.option("--calls/--no-calls", "show_calls", default=True, help="Print the per-call table.")
@db_option
@json_option
def replay_cmd(session_id: str, config_spec: str, show_calls: bool, db_path: str | None, as_json: bool) -> None:
    """Replay one stored session under one config; print per-call tokens and the compactions."""
    from workbench.config import parse_config
    from workbench.llm import DuckDBCache, Gateway
    from workbench.replay import replay
    from workbench.store import Store

    config = parse_config(config_spec)
    with Store(resolve_db(db_path)) as store:
        session = store.load_session(find_session_id(store, session_id))
        with Gateway(DuckDBCache(store.connection)) as gateway:  # summaries cached in the database
            result = replay(session, config, gateway=gateway)
    if as_json:
        print_json({"session_id": result.session_id, "config": result.config.to_dict(),
                    "termination": result.termination, "error": result.error, "metrics": result.metrics,
                    "calls": _records(result.calls),
                    "compactions": _records(result.compactions)})
        return
    events = [{"call": e.call_index, "messages": f"{e.messages_before}->{e.messages_after}",
               "tokens": f"{e.tokens_before}->{e.tokens_after}", "seconds": round(e.duration_s, 3),
               "fell_back": e.fell_back, "no_progress": e.no_progress, "error": e.error or "",
               "summary": (e.summary or "")[:60].replace("\n", " ")} for e in result.compactions]
    click.echo(f"session {result.session_id} ({session.format}, {session.calls} calls) under "
               f"{result.config.name!r}: {result.termination}")
    if show_calls:
        calls = [{"call": c.index, "messages": c.context_messages, "tokens": c.context_tokens,
                  "cached": c.cached_prefix_tokens, "output": c.completion_tokens,
                  "compacted": "yes" if c.compacted_before else ""} for c in result.calls]
        print_table(calls, ["call", "messages", "tokens", "cached", "output", "compacted"])
    click.echo(f"\n{len(events)} compaction(s)")
    print_table(events, ["call", "messages", "tokens", "seconds", "fell_back", "no_progress", "error", "summary"])
    metrics = result.metrics
    click.echo(f"\nbilled input {metrics['billed_input_tokens']:,} tokens, cached {metrics['cached_input_tokens']:,}, "
               f"peak context {metrics['peak_context_tokens']:,}, summarizer calls {metrics['summarizer_calls']}")
    if result.error:
        click.echo(f"stopped: {result.error}", err=True)


def _records(items: list[Any]) -> list[dict[str, Any]]:
    from dataclasses import asdict

    return [asdict(item) for item in items]


if __name__ == "__main__":  # pragma: no cover
    main(prog_name="workbench")
