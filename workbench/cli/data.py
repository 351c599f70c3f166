"""Commands over the stored data: `import`, `sessions`, `datasets`, `init`."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from workbench.cli.common import CommandFailed, note, open_store, options, print_json, print_table, shared_options

SAMPLES_DATASET = "samples"
PROGRESS_MIN_FILES = 20
# The built-in format names, for --help only (the importers, plugins included, are the authority).
FORMAT_CHOICES = (
    "auto",
    "openai",
    "anthropic",
    "claude-code",
    "codex",
    "swe-agent",
    "mini-swe-agent",
    "openhands",
    "aider",
    "inspect-ai",
    "workbench",
)


def format_names() -> tuple[str, ...]:
    """`auto` and every importer's format name (built-in and registered)."""
    from workbench import importers

    names = ["auto", *importers.FORMATS]
    try:
        from workbench import registry

        names += [n for n in registry.kinds("importer") if n not in names]
    except Exception:  # a registry without an importer family: the built-ins only
        pass
    return tuple(names)


def _check_format(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if value == "auto":
        return value
    from workbench import importers
    from workbench.errors import FormatError

    if value in format_names():
        return value
    try:
        return str(importers.format_name(value, ""))  # aliases such as openai-chat
    except FormatError:
        raise click.BadParameter(f"unknown format {value!r}; choose one of: {', '.join(format_names())}") from None


def _count_candidates(paths: tuple[str, ...]) -> int:
    """How many files the import will read (folders walked with the importers' rules)."""
    if not any(os.path.isdir(p) for p in paths):
        return len(paths)
    from workbench.importers import candidate_files

    return sum(1 for _ in candidate_files(paths))


def _check_dataset_name(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """`store.check_dataset_name`, as a usage error before any work (generate --out opens no store)."""
    from workbench.errors import ConfigError
    from workbench.store import check_dataset_name

    try:
        check_dataset_name(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _read_outcomes(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """The outcomes table, read before any import: a bad file is a usage error naming its line."""
    if value is None:
        return None
    from workbench.errors import FormatError
    from workbench.importers.outcomes import read_outcomes

    try:
        return read_outcomes(value)
    except FormatError as exc:
        raise click.BadParameter(str(exc)) from None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


@click.command("import")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option(
    "--format",
    "fmt",
    default="auto",
    show_default=True,
    callback=_check_format,
    help=f"Format of the files, auto-detected per file by default ({', '.join(FORMAT_CHOICES[1:])}, or a plugin's).",
)
@click.option(
    "--dataset",
    default=None,
    metavar="NAME",
    callback=_check_dataset_name,
    help="Dataset to file the sessions under [default: the format name].",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help=f"Progress bar on stderr [default: on for {PROGRESS_MIN_FILES}+ files, off with --quiet].",
)
@click.option(
    "--outcomes",
    default=None,
    metavar="CSV",
    callback=_read_outcomes,
    help="Attach a run's per-instance outcomes (a CSV: instance_id,resolved,patch_applied, such as a "
    "SWE-bench run's results_summary.csv) to the sessions, matched by their instance id; sessions "
    'already stored get them too. Filter with --where "outcome_resolved".',
)
@shared_options
def import_cmd(paths: tuple[str, ...], fmt: str, dataset: str | None, progress: bool | None, outcomes: Any) -> None:
    """Import session files or folders (walked recursively).

    Prints the sessions and messages imported, the duplicates skipped (sessions already in the
    database), every file or folder passed over and why, and one line per file that failed. Good
    files are imported even when others fail; the exit status is 1 if any file failed. Ctrl-C
    keeps every session already written whole and nothing partial (exit 130).
    """
    opts = options()
    path = opts.db_path
    if not any(os.path.exists(p) for p in paths):  # nothing to read: no database is created for it
        for missing in paths:
            click.echo(
                f"error: {missing}: no such file or folder (expected recorded-session files or folders of them)",
                err=True,
            )
        raise CommandFailed("")
    with open_store(must_exist=False) as store:  # checks --db before any walk
        total = _count_candidates(paths)
        show = progress if progress is not None else (total >= PROGRESS_MIN_FILES and not opts.quiet)
        bar = None
        if show:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="file", file=sys.stderr, desc="importing", leave=False)
        try:
            report = store.import_paths(
                list(paths),
                format=fmt,
                dataset=dataset,
                progress=(lambda _outcome: bar.update(1)) if bar is not None else None,
                outcomes=outcomes,
            )
        finally:
            if bar is not None:
                bar.close()
    if opts.as_json:
        print_json({"db": path, **report.to_dict()})
    else:
        click.echo(
            f"imported {_plural(report.sessions, 'session')} ({report.messages} messages, "
            f"{report.calls} calls) into {path}"
        )
        if report.replaced:
            click.echo(report.replaced_text())
        if report.duplicates:
            click.echo(report.duplicates_text())
        if report.outcomes is not None:
            click.echo(report.outcomes.text())
        for warning in report.warnings:
            note(f"warning: {warning}")
        skipped = report.skipped_files
        if skipped:
            note(f"ignored {len(skipped)} file(s) or folder(s), not imported:")
            for outcome in skipped:
                reason = outcome.skipped or ""
                note(f"  {reason}" if reason.startswith(outcome.path) else f"  {outcome.path}: {reason}")
        for outcome in report.errors:
            click.echo(f"error: {outcome.error}", err=True)
        if report.errors:
            click.echo(f"{len(report.errors)} of {_plural(len(report.files), 'file')} failed", err=True)
    if report.errors:
        raise CommandFailed("")
    if not report.files:  # (under --json the report printed says so: "files": 0)
        raise CommandFailed(
            ""
            if opts.as_json
            else f"no session file found in {', '.join(paths)}"
            + (
                " (the files met are listed above with why each was passed over)"
                if report.skipped_files and not opts.quiet
                else ""
            )
        )


@click.command("sessions")
@click.option("--dataset", default=None, metavar="NAME", help="Only this dataset.")
@click.option(
    "--where",
    default=None,
    metavar="SQL",
    help="SQL condition over the sessions (columns: id, dataset, format, source, messages, calls, "
    "recorded_compactions, outcome_resolved, outcome_patch_applied, ...).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Show only the first N sessions (in the listing's order).",
)
@shared_options
def sessions_cmd(dataset: str | None, where: str | None, limit: int | None) -> None:
    """List the imported sessions (id, dataset, format, messages, calls, the agent's own recorded
    compactions, probes, source)."""
    with open_store(must_exist=True) as store:
        rows = store.session_rows(dataset=dataset, where=where)
    if limit is not None:
        rows = rows[:limit]
    if options().as_json:
        print_json(rows)
    elif not rows:
        click.echo("no sessions" + (f" in dataset {dataset!r}" if dataset else ""))
    else:
        print_table(
            [{**row, "recorded": row["recorded_compactions"]} for row in rows],
            ["id", "dataset", "format", "messages", "calls", "observations", "recorded", "probes", "source"],
        )


@click.command("datasets")
@shared_options
def datasets_cmd() -> None:
    """List the datasets with their session, message and call counts."""
    with open_store(must_exist=True) as store:
        rows = store.dataset_rows()
    if options().as_json:
        print_json(rows)
    elif rows:
        print_table(rows, ["name", "sessions", "messages", "calls", "description"])
    else:
        click.echo("no datasets")


def init_database(path: str, *, with_samples: bool = False) -> dict[str, Any]:
    """Create the database; when it holds no session (or `with_samples`), load the bundled samples
    as `samples` (sessions already stored are skipped)."""
    from workbench import samples
    from workbench.store import Store

    existed = os.path.exists(path)
    with Store(path) as store:
        imported = 0
        if with_samples or store.count() == 0:
            report = store.import_sessions(
                samples.bundled_samples(), dataset=SAMPLES_DATASET, source="datasets/samples/samples.jsonl.gz"
            )
            store.describe_dataset(
                SAMPLES_DATASET,
                "Generated coding-agent sessions with planted facts and probes (python -m workbench.samples)",
            )
            imported = report.sessions
        return {"db": path, "created": not existed, "imported": imported, "sessions": store.count()}


@click.command("init")
@click.option(
    "--samples",
    "with_samples",
    is_flag=True,
    help="Load the bundled samples even when the database holds other sessions (the shipped experiments run on them).",
)
@shared_options
def init_cmd(with_samples: bool) -> None:
    """Create the database and, if it has no sessions, load the bundled sample sessions (idempotent)."""
    result = init_database(options().db_path, with_samples=with_samples)
    if options().as_json:
        print_json(result)
    elif result["imported"]:
        click.echo(
            f"initialised {result['db']}: imported {result['imported']} sample sessions (dataset {SAMPLES_DATASET!r})"
        )
    else:
        click.echo(
            f"{result['db']} is ready: {result['sessions']} sessions (nothing to import"
            + (": the samples are there already)" if with_samples else ")")
        )


@click.command("generate")
@click.option(
    "--sessions", "n_sessions", type=click.IntRange(min=1), default=10_000, show_default=True, help="How many sessions."
)
@click.option(
    "--messages",
    "n_messages",
    type=click.IntRange(min=4),
    default=5_000_000,
    show_default=True,
    help="How many messages in all (at least 4 per session).",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Same seed, same sessions (and ids).")
@click.option(
    "--dataset",
    default="synthetic",
    show_default=True,
    metavar="NAME",
    callback=_check_dataset_name,
    help="Dataset to file them under (part of every session id). A dataset holds one generation: "
    "one holding sessions of other sizes or another seed is refused.",
)
@click.option(
    "--out",
    "-o",
    "out",
    default=None,
    metavar="FILE",
    help="Write workbench JSONL (gzip if it ends in .gz) for `workbench import` instead of the database.",
)
@click.option(
    "--memory-limit",
    default=None,
    envvar="WORKBENCH_MEMORY_LIMIT",
    metavar="SIZE",
    help="Cap DuckDB's memory, e.g. 1GB [default: $WORKBENCH_MEMORY_LIMIT, else DuckDB's 80 % of RAM].",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr [default: on, off with --quiet].")
@shared_options
def generate_cmd(
    n_sessions: int,
    n_messages: int,
    seed: int,
    dataset: str,
    out: str | None,
    memory_limit: str | None,
    progress: bool | None,
) -> None:
    """Generate a synthetic dataset shaped like real agent recordings, streamed into the database.

    Sessions mix system, user, assistant and tool messages as Claude Code, OpenHands and Codex
    record them (tool outputs heavy-tailed, usage on every call); the same seed gives the same
    sessions. Written in batches, so memory stays bounded at any size.

    Session ids name the dataset and the seed (`0000003-synthetic-7`), so another --dataset or
    --seed makes new sessions. Re-running the same command skips the sessions already stored
    (completing an interrupted run); generating into a dataset that holds synthetic sessions of
    other --sessions/--messages/--seed is refused (exit 2): use another --dataset name.
    """
    from workbench import synthetic

    if n_messages < synthetic.MIN_MESSAGES * n_sessions:
        raise click.BadParameter(
            f"{n_messages} messages are fewer than {synthetic.MIN_MESSAGES} per session for {n_sessions} sessions",
            param_hint="--messages",
        )
    opts = options()
    show = progress if progress is not None else not opts.quiet
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(
            total=n_messages,
            unit="msg",
            unit_scale=True,
            file=sys.stderr,
            desc="generating",
            leave=False,
            disable=None if progress is None else False,
        )  # default: off without a tty

    def advance(_sessions: int, messages: int) -> None:
        if bar is not None:
            bar.update(messages - bar.n)

    try:
        if out is not None:
            path = synthetic.write_jsonl(out, n_sessions, n_messages, seed=seed, dataset=dataset, progress=advance)
            result: dict[str, Any] = {"out": str(path), "sessions": n_sessions, "messages": n_messages, "seed": seed}
        else:
            with open_store(must_exist=False) as store:
                if memory_limit:
                    store.set_memory_limit(memory_limit)
                try:
                    report = synthetic.generate_dataset(
                        store, n_sessions, n_messages, seed=seed, dataset=dataset, progress=advance
                    )
                except synthetic.DatasetConflict as exc:
                    raise click.BadParameter(str(exc), param_hint="--dataset") from None
            skipped_text = report.duplicates_text() if report.duplicates else "skipped 0 sessions already stored"
            result = {"db": opts.db_path, "dataset": dataset, "seed": seed, **report.to_dict()}
            for key in ("session_ids", "file_outcomes", "skipped", "errors", "warnings"):
                result.pop(key, None)
    finally:
        if bar is not None:
            bar.close()
    if opts.as_json:
        print_json(result)
    elif out is not None:
        click.echo(f"wrote {_plural(n_sessions, 'session')} ({n_messages} messages) to {result['out']}")
    else:
        click.echo(
            f"generated {_plural(result['sessions'], 'session')} ({result['messages']} messages, "
            f"{result['calls']} calls) into {result['db']} as dataset {dataset!r} in {result['seconds']:.1f} s; "
            f"{skipped_text}"
        )


COMMANDS = (import_cmd, sessions_cmd, datasets_cmd, init_cmd, generate_cmd)
