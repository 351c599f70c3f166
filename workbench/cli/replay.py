"""`workbench replay`: one stored session under one config.

Exit 1 when the replay ends in `compaction_failed` or `context_overflow` (the result is printed
first); text and JSON report the same compactions: those that changed the context, plus the
failed ones, counted apart. No-op firings (the strategy returned the context unchanged) are not
compactions: the text counts them in one line, the JSON lists them flagged `noop` and counts them
in `noop_compactions`; when every firing was one, a warning says so (`noop_note`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import click

from workbench.cli.common import CommandFailed, note, open_store, options, print_json, print_table, shared_options
from workbench.errors import ConfigError

FAILED_TERMINATIONS = ("compaction_failed", "context_overflow")
#: What the lexical fact metrics count, said wherever they are shown.
LEXICAL_NOTE = (
    "task state: the share of the task's state (task, instructions, constraints, files touched, "
    "decisions, progress, next step, open errors) the context still states; lexical: the share of "
    "the lexical facts removed (paths, identifiers, numbers, commands) still present"
)
QUALITY_SHOWN = (
    ("task_state_coverage", "task state stated"),
    ("fact_retention", "lexical facts kept"),
    ("needed_fact_retention", "needed lexical facts kept"),
    ("dangling_references", "dangling references"),
    ("probe_answerable", "probes answerable"),
    ("probe_accuracy", "probes answered"),
    ("judge_score", "judge score"),
    ("continuation_match", "next action matched"),
)


def find_session_id(store: Any, prefix: str) -> str:
    """The stored session id that `prefix` names (a unique prefix is enough)."""
    if store.has_session(prefix):
        return prefix
    matches = [i for i in store.session_ids() if i.startswith(prefix)]
    if len(matches) == 1:
        return str(matches[0])
    if not matches:
        raise ConfigError(f"no session {prefix!r} in {store.path}; `workbench sessions` lists them")
    raise ConfigError(f"session prefix {prefix!r} is ambiguous: {', '.join(matches[:5])}...")


def _records(items: Sequence[Any]) -> list[dict[str, Any]]:
    return [asdict(item) for item in items]


@click.command("replay")
@click.argument("session_id", metavar="SESSION_ID")
@click.option(
    "--config",
    "config_spec",
    required=True,
    metavar="SPEC",
    help="A TOML file, a preset name (e.g. as-recorded) or inline TOML "
    "(e.g. 'preset = \"goat-split-summary\"\\ncontext_limit = 64000').",
)
@click.option(
    "--calls/--no-calls",
    "show_calls",
    default=True,
    help="Include the per-call table (text) or the `calls` list (JSON).",
)
@click.option("--save", is_flag=True, help="Store the result as a one-cell run (see `workbench runs`).")
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="NAME",
    help="Also compute this model metric (repeatable): probe_accuracy, judge_score, continuation_match; "
    "they ask the config's `evaluator` model. The metrics that need no model are always computed.",
)
@shared_options
def replay_cmd(session_id: str, config_spec: str, show_calls: bool, save: bool, metrics: tuple[str, ...]) -> None:
    """Replay one stored session under one config; print per-call tokens and the compactions.

    Exits 1 when the replay ends in compaction_failed or context_overflow, or when a metric asked
    for with --metric could not be computed (the result is printed first).
    """
    from workbench.config import parse_config
    from workbench.llm import Gateway
    from workbench.quality.evaluator import EvaluatorFailed, check_evaluator
    from workbench.replay import changed_compactions, replay

    with open_store(must_exist=True) as store:
        config = parse_config(config_spec)
        model_metrics = _model_metrics(metrics, config)
        session = store.load_session(find_session_id(store, session_id))
        with Gateway(store.model_cache()) as gateway:  # summaries and answers cached in the database
            result = replay(session, config, gateway=gateway, metrics=model_metrics)
    run_id = None
    if save:
        from workbench.experiments import save_replay

        run_id = save_replay(result, options().db_path, dataset=session.dataset)
    noops = sum(1 for e in result.compactions if e.noop)
    done = changed_compactions(result.compactions)
    failed = len(result.compactions) - len(done) - noops
    nothing_changed = result.noop_note()
    nothing_recorded = _nothing_recorded(result, session)
    if options().as_json:
        data: dict[str, Any] = {
            "session_id": result.session_id,
            "config": result.config.to_dict(),
            "termination": result.termination,
            "error": result.error,
            "metrics": result.metrics,
            "compaction_count": len(done),
            "failed_compactions": failed,
            "noop_compactions": noops,
            "noop_note": nothing_changed,
            "note": result.baseline_note(),
            "recorded_note": nothing_recorded,
            "calibration": result.calibration.to_dict() if result.calibration else None,
        }
        if run_id:
            data["run_id"] = run_id
        if show_calls:
            data["calls"] = _records(result.calls)
        data["compactions"] = [
            {**event, **metrics}
            for event, metrics in zip(_records(result.compactions), _compaction_metrics(result), strict=True)
        ]
        print_json(data)
    else:
        _print_text(result, session, done, failed, noops, show_calls)
        if nothing_changed:
            note(f"warning: {nothing_changed}")
        for line in result.config.notes:
            note(f"note: {line}")
        if nothing_recorded:
            note(f"warning: {nothing_recorded}")
        if run_id:
            click.echo(f"saved as run {run_id}")
    if result.termination in FAILED_TERMINATIONS:
        raise CommandFailed("" if options().as_json else f"stopped: {result.error or result.termination}")
    try:  # a model metric asked for whose evaluator failed: as a failed experiment cell would say
        check_evaluator(result)
    except EvaluatorFailed as exc:
        raise CommandFailed(str(exc)) from exc


def _nothing_recorded(result: Any, session: Any) -> str | None:
    """The warning when the config replays the agent's own compactions and this session recorded none."""
    from workbench.strategies.recorded import nothing_recorded_note, uses_recorded

    if session.recorded_compactions or not uses_recorded(result.config.to_dict()):
        return None
    return nothing_recorded_note(result.config.name, 1, f"session {session.id}")


def _model_metrics(names: Sequence[str], config: Any) -> tuple[str, ...]:
    """The metrics `--metric` names, checked: each exists, and the model ones have an evaluator to ask."""
    from workbench.registry import lookup

    kinds = [lookup("metric", name) for name in names]
    needing = [kind.kind for kind in kinds if getattr(kind, "requires_model", False)]  # type: ignore[attr-defined]
    if needing and config.evaluator is None:
        raise ConfigError(
            f"{', '.join(needing)} ask{'s' if len(needing) == 1 else ''} a model: set `evaluator` in "
            f'the config (e.g. evaluator = "openai/gpt-4o-mini")'
        )
    return tuple(kind.kind for kind in kinds)  # type: ignore[attr-defined]


def _compaction_metrics(result: Any) -> list[dict[str, Any]]:
    """Each compaction's metrics (fact retention, lost facts...), empty for events without them."""
    rows = list(result.compaction_metrics)
    return [dict(row) for row in rows] + [{} for _ in range(len(result.compactions) - len(rows))]


def _share(value: Any) -> str:
    from workbench.formatting import format_value

    return format_value("number", value)


def _print_text(result: Any, session: Any, done: list[Any], failed: int, noops: int, show_calls: bool) -> None:
    """The header, the totals and quality, the compactions, then (long) the per-call table: what a
    reader looks for first comes first."""
    click.echo(
        f"session {result.session_id} ({session.format}, {session.calls} calls) under "
        f"{result.config.name!r} (window {result.config.context_limit:,} tokens, {result.config.max_output:,} "
        f"kept for the reply, tokenizer {result.config.tokenizer}): {result.termination}"
    )
    from workbench.experiments.charts import format_metric

    metrics = result.metrics

    def count(name: str) -> str:
        value = metrics.get(name)
        return format_metric(name, value) if isinstance(value, (int, float)) else str(value)

    click.echo(
        f"billed input {count('billed_input_tokens')} tokens, cached {count('cached_input_tokens')}, "
        f"peak context {count('peak_context_tokens')}, summarizer calls {count('summarizer_calls')}"
    )
    quality = [
        f"{label} {format_metric(name, metrics[name])}"
        for name, label in QUALITY_SHOWN
        if metrics.get(name) is not None
    ]
    if quality:
        click.echo(", ".join(quality))
    if result.calibration is not None:
        click.echo(result.calibration.describe())
    note = result.baseline_note()
    if note:
        click.echo(note)
    events = [
        {
            "call": e.call_index,
            "messages": f"{e.messages_before}->{e.messages_after}",
            "tokens": f"{e.tokens_before}->{e.tokens_after}",
            "seconds": round(e.duration_s, 3),
            "fell_back": e.fell_back,
            "no_progress": e.no_progress,
            "error": e.error or "",
            "task state": _share(m.get("task_state_coverage")),
            "lexical kept": _share(m.get("fact_retention")),
            "needed kept": _share(m.get("needed_fact_retention")),
            "summary": (e.summary or "")[:60].replace("\n", " "),
        }
        for e, m in zip(result.compactions, _compaction_metrics(result), strict=True)
        if not e.noop
    ]
    click.echo(
        f"\n{len(done)} compaction(s)"
        + (f", {failed} failed" if failed else "")
        + (f"; {noops} no-op firing(s) not listed (the strategy returned the context unchanged)" if noops else "")
    )
    print_table(
        events,
        [
            "call",
            "messages",
            "tokens",
            "seconds",
            "fell_back",
            "no_progress",
            "error",
            "task state",
            "lexical kept",
            "needed kept",
            "summary",
        ],
    )
    if events:
        click.echo(f"({LEXICAL_NOTE})")
    if show_calls:
        recorded_input, agent_compacted = result.recorded_columns()
        calls = [
            {
                "call": c.index,
                "messages": c.context_messages,
                "tokens": c.context_tokens,
                "cached": c.cached_prefix_tokens,
                "output": c.completion_tokens,
                "compacted": "yes" if c.compacted_before else "",
                "recorded input": "" if tokens is None else tokens,
                "agent compacted": "yes" if agent else "",
            }
            for c, tokens, agent in zip(result.calls, recorded_input, agent_compacted, strict=True)
        ]
        # beside the replay, what the recording says when it says it: the input the provider billed, the
        # agent's compactions
        extra = [
            name
            for name, values in (("recorded input", recorded_input), ("agent compacted", agent_compacted))
            if any(value not in (None, False) for value in values)
        ]
        click.echo(f"\nper call ({len(calls)}; --no-calls leaves this table out):")
        print_table(calls, ["call", "messages", "tokens", "cached", "output", "compacted", *extra])


COMMANDS = (replay_cmd,)
