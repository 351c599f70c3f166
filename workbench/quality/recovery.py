"""Recovery after a recorded compaction: what the agent did next, read from the recording itself.

    python -m workbench.quality.recovery_table [PATH ...] [--window K]   # default: ../shared/sessions

A recording that marks where the agent compacted (`Session.recorded_compactions`: Claude Code's
compact boundaries, Codex's `compacted`, OpenHands condensations) also shows what the agent had to
do afterwards to go on. The actions are its tool calls (for a text-action agent, the fenced shell
blocks of an assistant message without tool calls, one action per message); each has an identity:

- a file read (Read, read_file, an editor's `view`, or a shell `cat`/`head`/`tail`/`nl`/`sed -n`
  of files) is the files it reads; writing a whole file (Write, an editor's `create`) also shows
  the agent that file's content;
- a shell command is its command string, whitespace collapsed, a leading `cd DIR &&` and a
  trailing `2>&1` dropped;
- any other call is its tool name and its JSON arguments, without the ones that do not change
  what it does (`description`, `timeout`, ...).

An action after a boundary *re-acquires* when it reads only files whose content the agent had seen
before the boundary, or repeats (same identity) a command or search it had run before; file edits
never do. The whole recorded history before the boundary counts as seen. Per compaction, over
the first `WINDOW` actions after it (fewer when the next compaction or the end comes first: later,
re-running a test after an edit is the work itself, not recovery):

- `recovery_reacquired_calls`: the share of those actions that re-acquire;
- `recovery_reacquired_tokens`: the share of their observation tokens (the results they got back)
  that re-acquiring actions got;
- `recovery_calls_to_new_action`: how many actions came before the first one the agent had not
  done before the boundary (0: it went straight on), up to the next compaction or the end (None
  when there is none).

They describe the recording, so they are measured for a replay of the agent's own compactions
(strategy kind `recorded`, the `as-recorded` preset) only: any other configuration changes the
context, and a replay cannot know what the agent would have done with it (None). Per run: the mean
over the compactions. `workbench.quality.recovery_table` prints them and relates them to
`fact_retention`'s lost facts.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from workbench.quality.facts import MAX_FACT_CHARS, normalize, normalize_path
from workbench.quality.trace import memo, session_of
from workbench.registry import register_metric
from workbench.session import Message, Session, ToolCall
from workbench.tokens import message_tokens

__all__ = ["WINDOW", "Action", "Recovery", "actions", "mean_of", "recoveries", "recovery_of"]

WINDOW = 20
READ_TOOLS = frozenset(("read", "read_file", "view", "view_file", "open_file", "readfile"))
WHOLE_WRITE_TOOLS = frozenset(("write", "write_file", "create_file", "writefile"))
EDITOR_READS = frozenset(("view",))
EDITOR_WHOLE_WRITES = frozenset(("create",))
SHELL_READERS = frozenset(("cat", "head", "tail", "nl", "less", "more", "bat"))
IGNORED_ARGUMENTS = frozenset(
    ("description", "timeout", "run_in_background", "thought", "security_risk", "is_input", "explanation")
)
PATH_ARGUMENTS = ("file_path", "path", "filename", "file", "notebook_path")
_WRITE_WORDS = ("edit", "write", "patch", "create", "replace", "insert", "delete")
_FENCE = re.compile(r"```(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)
_CD_PREFIX = re.compile(r"^cd\s+(?:\"[^\"]*\"|'[^']*'|\S+)\s*&&\s*")
_SHELL_SEPARATORS = ("|", ";", "&&", "||", ">", "<", "$(", "`")


@dataclass(frozen=True)
class Action:
    """One action of the recording: `position` of its assistant message in `Session.messages`,
    `kind` (`read`, `write` or `run`), `key` (its identity), `reads` (the normalised paths whose
    content it shows the agent: read, or written whole), `item` (what it acquires, as written: the
    path read, the command, or the call), `fact_keys` (the keys, as facts of
    `workbench.quality.facts`, of its command and of the paths it names) and `observation_tokens`
    (its result's tokens)."""

    position: int
    kind: str
    key: str
    reads: tuple[str, ...]
    item: str
    fact_keys: tuple[str, ...]
    observation_tokens: int


@dataclass(frozen=True)
class Recovery:
    """What the agent did after recorded compaction number `compaction` (see the module docstring):
    `actions` in the window, the `reacquired` ones among them, their observation tokens, and
    `calls_to_new_action`. `earlier_keys[i]` holds the fact keys of the actions before the boundary
    that `reacquired[i]` repeats (the same command, or a read of the same file), as the removed
    content states them."""

    compaction: int
    call_index: int
    message_index: int
    actions: tuple[Action, ...]
    reacquired: tuple[Action, ...]
    calls_to_new_action: int | None
    earlier_keys: tuple[frozenset[str], ...] = ()

    @property
    def observation_tokens(self) -> int:
        return sum(a.observation_tokens for a in self.actions)

    @property
    def reacquired_tokens(self) -> int:
        return sum(a.observation_tokens for a in self.reacquired)

    @property
    def reacquired_calls_share(self) -> float | None:
        return len(self.reacquired) / len(self.actions) if self.actions else None

    @property
    def reacquired_tokens_share(self) -> float | None:
        total = self.observation_tokens
        return self.reacquired_tokens / total if total else None

    def reacquired_items(self) -> list[str]:
        """The items re-acquired, each once, in order."""
        return list(dict.fromkeys(a.item for a in self.reacquired))


# -- actions ------------------------------------------------------------------------------------


def _arguments(call: ToolCall) -> dict[str, Any]:
    try:
        data = json.loads(call.arguments or "{}")
    except (ValueError, TypeError):
        return {"": call.arguments}
    return data if isinstance(data, dict) else {"": data}


def _command_of(arguments: Mapping[str, Any]) -> str | None:
    """The shell command of a call's arguments (`command` or `cmd`; a list like ["bash", "-lc", "..."]
    gives its script)."""
    value = arguments.get("command", arguments.get("cmd"))
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value[-1] if len(value) >= 3 and value[1] in ("-c", "-lc") else " ".join(value)
    return value if isinstance(value, str) and value.strip() else None


def normalize_command(command: str) -> str:
    """A shell command's identity: whitespace collapsed, leading `cd DIR &&` and a trailing `2>&1` dropped."""
    text = " ".join(command.split())
    while (match := _CD_PREFIX.match(text)) is not None:
        text = text[match.end() :]
    return text.removesuffix("2>&1").strip()


def _shell_reads(command: str) -> tuple[str, ...]:
    """The files a simple read-only shell command prints (`cat a b`, `head -n 20 a`, `sed -n 1,9p a`), else ()."""
    if any(separator in command for separator in _SHELL_SEPARATORS):
        return ()
    try:
        words = shlex.split(command)
    except ValueError:
        return ()
    if not words:
        return ()
    program, rest = words[0], words[1:]
    if program == "sed" and "-n" in rest:
        return (rest[-1],) if len(rest) >= 3 and not rest[-1].startswith("-") else ()
    if program not in SHELL_READERS:
        return ()
    files = []
    skip = False
    for word in rest:
        if skip:
            skip = False
        elif word in ("-n", "-c"):
            skip = True
        elif not word.startswith("-") and not word.lstrip("+").isdigit():
            files.append(word)
    return tuple(files)


def _path_of(arguments: Mapping[str, Any]) -> str | None:
    for name in PATH_ARGUMENTS:
        value = arguments.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _command_action(position: int, command: str, tokens: int) -> Action:
    shown = normalize_command(command)
    reads = tuple(normalize_path(p) for p in _shell_reads(shown))
    return Action(
        position=position,
        kind="read" if reads else "run",
        key=f"shell:{shown}",
        reads=reads,
        item=shown,
        fact_keys=(normalize(command.strip()[:MAX_FACT_CHARS], "command"), *reads),
        observation_tokens=tokens,
    )


def _call_action(position: int, call: ToolCall, tokens: int) -> Action:
    name = call.name.lower()
    arguments = _arguments(call)
    path = _path_of(arguments)
    editor_command = arguments.get("command") if isinstance(arguments.get("command"), str) else None
    is_editor = path is not None and editor_command is not None and " " not in editor_command
    if path is not None and (name in READ_TOOLS or (is_editor and editor_command in EDITOR_READS)):
        return Action(
            position=position,
            kind="read",
            key=f"read:{normalize_path(path)}",
            reads=(normalize_path(path),),
            item=path,
            fact_keys=(normalize_path(path),),
            observation_tokens=tokens,
        )
    command = None if is_editor else _command_of(arguments)
    if command is not None and not any(word in name for word in _WRITE_WORDS):
        return _command_action(position, command, tokens)
    kept = {k: v for k, v in arguments.items() if k not in IGNORED_ARGUMENTS}
    shown = json.dumps(kept, sort_keys=True, ensure_ascii=False, default=str)
    paths = (normalize_path(path),) if path else ()
    if is_editor or any(word in name for word in _WRITE_WORDS):
        whole = name in WHOLE_WRITE_TOOLS or (is_editor and editor_command in EDITOR_WHOLE_WRITES)
        return Action(
            position=position,
            kind="write",
            key=f"{name}:{shown}",
            reads=paths if whole else (),
            item=f"{call.name} {path or ''}".strip(),
            fact_keys=paths,
            observation_tokens=tokens,
        )
    return Action(
        position=position,
        kind="run",
        key=f"{name}:{shown}",
        reads=(),
        item=f"{call.name} {shown}",
        fact_keys=paths,
        observation_tokens=tokens,
    )


def _results(messages: Sequence[Message], position: int, tokenizer: str) -> tuple[dict[str, int], int]:
    """Tokens of the observations answering the assistant message at `position`: by tool-call id,
    and all of them together."""
    by_id: dict[str, int] = {}
    total = 0
    for message in messages[position + 1 :]:
        if not message.is_observation:
            break
        tokens = message_tokens(message, tokenizer)
        total += tokens
        if message.tool_call_id:
            by_id[message.tool_call_id] = by_id.get(message.tool_call_id, 0) + tokens
    return by_id, total


def actions(session: Session, tokenizer: str = "heuristic") -> tuple[Action, ...]:
    """Every action of the recording, in order (cached per session and tokenizer)."""

    def compute() -> tuple[Action, ...]:
        out: list[Action] = []
        messages = session.messages
        for position, message in enumerate(messages):
            if message.role != "assistant":
                continue
            by_id, total = _results(messages, position, tokenizer)
            if message.tool_calls:
                out += [_call_action(position, call, by_id.get(call.id, 0)) for call in message.tool_calls]
                continue
            blocks = [b.strip() for b in _FENCE.findall(message.text) if b.strip()]
            if blocks:
                out.append(_command_action(position, "\n".join(blocks), total))
        return tuple(out)

    found: tuple[Action, ...] = memo(session, f"recovery_actions:{tokenizer}", compute)
    return found


# -- recovery -----------------------------------------------------------------------------------


def _seen_path(path: str, seen: set[str]) -> bool:
    """Whether `path` is among `seen`, also when one is a relative tail of the other."""
    return path in seen or any(s.endswith("/" + path) or path.endswith("/" + s) for s in seen)


def _reacquires(action: Action, keys: set[str], paths: set[str]) -> bool:
    if action.kind == "write":
        return False
    if action.kind == "read":
        return all(_seen_path(p, paths) for p in action.reads)
    return action.key in keys


def _repeats(action: Action, earlier: Action) -> bool:
    """Whether `action` re-acquires what `earlier` got: the same call, or a read of a file `earlier` showed."""
    return action.key == earlier.key or any(_seen_path(p, set(earlier.reads)) for p in action.reads)


def recoveries(session: Session, *, window: int = WINDOW, tokenizer: str = "heuristic") -> tuple[Recovery, ...]:
    """What the agent did after each of the session's recorded compactions (see the module docstring)."""

    def compute() -> tuple[Recovery, ...]:
        every = actions(session, tokenizer)
        records = session.recorded_compactions
        out: list[Recovery] = []
        for number, record in enumerate(records):
            end = records[number + 1].message_index if number + 1 < len(records) else len(session.messages)
            before = [a for a in every if a.position < record.message_index]
            after = [a for a in every if record.message_index <= a.position < end]
            keys = {a.key for a in before}
            paths = {p for a in before for p in a.reads}
            shown = tuple(after[:window])
            reacquired = tuple(a for a in shown if _reacquires(a, keys, paths))
            new = next((i for i, a in enumerate(after) if not _reacquires(a, keys, paths) and a.key not in keys), None)
            earlier = tuple(frozenset(k for b in before if _repeats(a, b) for k in b.fact_keys) for a in reacquired)
            out.append(
                Recovery(
                    compaction=number,
                    call_index=record.call_index,
                    message_index=record.message_index,
                    actions=shown,
                    reacquired=reacquired,
                    calls_to_new_action=new,
                    earlier_keys=earlier,
                )
            )
        return tuple(out)

    found: tuple[Recovery, ...] = memo(session, f"recovery:{window}:{tokenizer}", compute)
    return found


def _replays_recorded(result: Any) -> bool:
    strategy = getattr(getattr(result, "config", None), "strategy", None)
    return isinstance(strategy, Mapping) and strategy.get("kind") == "recorded"


def recovery_of(result: Any) -> dict[int, Recovery] | None:
    """The recovery after each compaction event of an `as-recorded` replay, by event index (events at
    a call where the agent did not compact are absent); None for any other configuration."""
    if not _replays_recorded(result):
        return None
    session = session_of(result)
    tokenizer = str(getattr(result.config, "tokenizer", "heuristic"))
    by_call = {r.call_index: r for r in recoveries(session, tokenizer=tokenizer)}
    return {i: by_call[e.call_index] for i, e in enumerate(result.compactions) if e.call_index in by_call}


def mean_of(values: Sequence[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


class _RecoveryMetric:
    requires_model: ClassVar[bool] = False
    #: What the agent did next, read from the recording: no property of the compacted context (the
    #: metric audit, which degrades the context, leaves such metrics out).
    reads_context: ClassVar[bool] = False
    column: ClassVar[str]

    def value(self, recovery: Recovery) -> float | int | None:
        raise NotImplementedError

    def unavailable(self, result: Any) -> str | None:
        if not _replays_recorded(result):
            return (
                "recovery metrics describe what the recorded agent did after its own compactions: they are "
                "measured for a replay of them (strategy kind 'recorded', the as-recorded preset) only"
            )
        return None

    def compute(self, result: Any) -> float | None:
        found = recovery_of(result)
        return mean_of([self.value(r) for r in found.values()]) if found else None

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        found = recovery_of(result) or {}
        rows = []
        for index in range(len(result.compactions)):
            recovery = found.get(index)
            row: dict[str, Any] = {self.column: self.value(recovery) if recovery else None}
            if self.column == "recovery_reacquired_calls":
                row["recovery_calls"] = len(recovery.actions) if recovery else None
                row["recovery_reacquired_items"] = recovery.reacquired_items() if recovery else []
            rows.append(row)
        return rows


@register_metric("recovery_reacquired_calls", direction="lower", unit="share", level="compaction")
class RecoveryReacquiredCalls(_RecoveryMetric):
    """After a recorded compaction, the share of the agent's next actions (at most `WINDOW`) that read
    again a file it had seen or repeated a command or search it had run before the compaction
    (as-recorded replays only; per run the mean over compactions). Per compaction, `recovery_calls`
    counts the actions measured and `recovery_reacquired_items` lists what they re-acquired."""

    column = "recovery_reacquired_calls"

    def value(self, recovery: Recovery) -> float | None:
        return recovery.reacquired_calls_share


@register_metric("recovery_reacquired_tokens", direction="lower", unit="share", level="compaction")
class RecoveryReacquiredTokens(_RecoveryMetric):
    """After a recorded compaction, the share of the observation tokens of the agent's next actions
    (at most `WINDOW`) that went to re-acquiring what it had before (as-recorded replays only)."""

    column = "recovery_reacquired_tokens"

    def value(self, recovery: Recovery) -> float | None:
        return recovery.reacquired_tokens_share


@register_metric("recovery_calls_to_new_action", direction="lower", unit="calls", level="compaction")
class RecoveryCallsToNewAction(_RecoveryMetric):
    """After a recorded compaction, the actions before the agent's first one it had not done before
    the compaction (as-recorded replays only; None when none came)."""

    column = "recovery_calls_to_new_action"

    def value(self, recovery: Recovery) -> int | None:
        return recovery.calls_to_new_action


# -- the table over recorded compactions ----------------------------------------------------------
