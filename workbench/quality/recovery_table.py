"""The recovery table: what the agent did after each of its recorded compactions, beside the facts the
offline metrics said it lost.

    python -m workbench.quality.recovery_table [PATH ...] [--window K]   # default: ../shared/sessions

One row per recorded compaction (`workbench.quality.recovery`'s measures), and how `fact_retention`'s
and `needed_fact_retention`'s lost facts relate to what the agent then re-acquired: the share of the
re-acquired items that were among the lost facts, and the share of the lost paths and commands that
were re-acquired. The behavioural ground truth the offline metrics are read against.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.quality.recovery import WINDOW, Recovery, mean_of, recoveries
from workbench.session import Session

SHARED = Path(__file__).resolve().parents[3] / "shared" / "sessions"
DEFAULT_FOLDERS = tuple(SHARED / name for name in ("claude-code", "codex", "openhands"))
TOKENIZER = "cl100k_base"
ACQUIRED_KINDS = ("path", "command")


@dataclass(frozen=True)
class LostRelation:
    """How one compaction's lost facts (of a fact metric) relate to what the agent re-acquired after it:
    `items` re-acquired (distinct items with a fact key), `items_lost` those with a key among the
    lost facts; `lost` the lost facts of the kinds an action acquires (paths, commands), `lost_reacquired`
    those a re-acquiring action names."""

    items: int
    items_lost: int
    lost: int
    lost_reacquired: int


def relate(recovery: Recovery, lost_keys: Mapping[str, str]) -> LostRelation:
    """`lost_keys`: the lost facts' keys and kinds."""
    items: dict[str, set[str]] = {}
    for action, earlier in zip(recovery.reacquired, recovery.earlier_keys, strict=True):
        if action.fact_keys or earlier:
            items.setdefault(action.item, set()).update(action.fact_keys, earlier)
    named = {k for keys in items.values() for k in keys}
    lost = {k for k, kind in lost_keys.items() if kind in ACQUIRED_KINDS}
    items_lost = sum(1 for keys in items.values() if not keys.isdisjoint(lost_keys))
    return LostRelation(items=len(items), items_lost=items_lost, lost=len(lost), lost_reacquired=len(lost & named))


def _as_recorded(session: Session) -> Any:
    from workbench.replay import replay

    config = {
        "name": "as-recorded",
        "tokenizer": TOKENIZER,
        "context_limit": 200_000,
        "max_output": 8192,
        "trigger": {"kind": "recorded"},
        "strategy": {"kind": "recorded"},
    }
    return replay(session, config, measure=False)


def table_rows(session: Session, window: int = WINDOW) -> list[dict[str, Any]]:
    """One row per recorded compaction of `session`: its recovery and how `fact_retention`'s and
    `needed_fact_retention`'s lost facts relate to it (the latter None where the replay did not reach it)."""
    from workbench.quality.retention import analyse

    result = _as_recorded(session)
    facts = {c.call_index: c for c in analyse(result).compactions}
    rows = []
    for recovery in recoveries(session, window=window, tokenizer=TOKENIZER):
        row: dict[str, Any] = {"session": session.id, "call": recovery.call_index, "recovery": recovery}
        accounting = facts.get(recovery.call_index)
        if accounting is not None:
            row["fact_retention"] = accounting.fact_retention
            row["lost"] = relate(recovery, {f.key: f.kind for f in accounting.lost})
            row["needed_lost"] = relate(recovery, {f.key: f.kind for f in accounting.needed_lost})
        rows.append(row)
    return rows


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "—"


def _number(value: float | int | None) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def render(rows: Sequence[Mapping[str, Any]], window: int) -> str:
    """The Markdown tables: one row per compaction, then the summary over them."""
    lines = [
        f"Recovery after each recorded compaction (the first {window} actions after it):",
        "",
        "| session | call | actions | re-acquired | recovery_reacquired_calls | recovery_reacquired_tokens | "
        "recovery_calls_to_new_action | fact_retention | re-acquired items among lost facts | "
        "lost paths/commands re-acquired | re-acquired items among lost needed facts |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r: Recovery = row["recovery"]
        lost, needed = row.get("lost"), row.get("needed_lost")
        lines.append(
            f"| {row['session']} | {row['call']} | {len(r.actions)} | {len(r.reacquired)} | "
            f"{_number(r.reacquired_calls_share)} | {_number(r.reacquired_tokens_share)} | "
            f"{_number(r.calls_to_new_action)} | {_number(row.get('fact_retention'))} | "
            f"{_share(lost.items_lost, lost.items) if lost else '—'} | "
            f"{_share(lost.lost_reacquired, lost.lost) if lost else '—'} | "
            f"{_share(needed.items_lost, needed.items) if needed else '—'} |"
        )
    found: list[Recovery] = [row["recovery"] for row in rows]
    related = [row for row in rows if "lost" in row]

    def pooled(name: str, part: str, whole: str) -> str:
        return _share(sum(getattr(r[name], part) for r in related), sum(getattr(r[name], whole) for r in related))

    def mean(attribute: str) -> str:
        return _number(mean_of([getattr(r, attribute) for r in found]))

    lines += [
        "",
        f"Summary over {len(rows)} recorded compactions:",
        "",
        "| measure | value |",
        "|---|---|",
        f"| recovery_reacquired_calls (mean) | {mean('reacquired_calls_share')} |",
        f"| recovery_reacquired_tokens (mean) | {mean('reacquired_tokens_share')} |",
        f"| recovery_calls_to_new_action (mean) | {mean('calls_to_new_action')} |",
        f"| fact_retention (mean) | {_number(mean_of([r.get('fact_retention') for r in related]))} |",
        f"| re-acquired items among fact_retention's lost facts | {pooled('lost', 'items_lost', 'items')} |",
        f"| fact_retention's lost paths/commands re-acquired | {pooled('lost', 'lost_reacquired', 'lost')} |",
        f"| re-acquired items among needed_fact_retention's lost facts | "
        f"{pooled('needed_lost', 'items_lost', 'items')} |",
        f"| needed_fact_retention's lost paths/commands re-acquired | "
        f"{pooled('needed_lost', 'lost_reacquired', 'lost')} |",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from workbench.quality.recorded_table import recorded_sessions

    parser = argparse.ArgumentParser(
        prog="python -m workbench.quality.recovery_table", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "paths", nargs="*", help="sessions to import (default: the shared Claude Code, Codex and OpenHands recordings)"
    )
    parser.add_argument("--window", type=int, default=WINDOW, help="actions after each compaction measured")
    args = parser.parse_args(argv)
    paths = args.paths or [str(p) for p in DEFAULT_FOLDERS if p.exists()]
    sessions = recorded_sessions(paths)
    if not sessions:
        print("no session with recorded compactions found", file=sys.stderr)
        return 1
    rows = [row for session in sessions for row in table_rows(session, args.window)]
    print(render(rows, args.window))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
