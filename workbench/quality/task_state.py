"""Task state: what an agent needs to go on after a compaction, and how much of it the context still states.

At each compaction point the session's task state is extracted from the recorded messages before
the compaction's call, deterministically and offline, as short *statements* in seven dimensions:

- `task`: the first user request and every later user instruction (their first sentences);
- `constraints`: the user's sentences with a constraint cue (`facts.extract_constraints`: must,
  never, don't, always, make sure, instead of...);
- `artifacts`: each file the agent created, edited, moved, deleted or committed, and how (tool calls
  such as Write, Edit, str_replace or apply_patch; shell commands such as `sed -i`, `>`, `mv`, `rm`,
  `git commit`);
- `decisions`: the latest assistant sentences that decide (I'll, let's, decided, instead, going with...);
- `progress`: the latest assistant sentences saying what was done or found;
- `next_step`: the last real user request and the assistant's last stated next action after it;
- `open_errors`: errors in observations (tracebacks, `Error:` lines, failing tests, a non-zero exit)
  that no later run of the same command or edit of the same file succeeded.

An item is a statement with its key terms (each a set of accepted word stems; a file's action is
any verb naming it). The compacted context *covers* an item when the original message carrying it
is still there (by identity), or when one sentence or line of a context message states it: at
least `needed` of its key terms (half of them, at least two) within a window of a few words
(`StateItem.window`). A bare token somewhere does not count: a keyword list of the removed text
holds the terms of a statement only where they happen to stand side by side, so it scores far below
a summary stating the same state (and a little above nothing).

Metrics (compaction level, higher is better, a share): `task_state_coverage` (per compaction the
mean over the dimensions that have items; per run the mean over applied compactions) and one per
dimension (`task_state_task`, ...), None where a dimension has no item at that point.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from workbench.quality.facts import STOPWORDS, extract_constraints, normalize_path
from workbench.quality.trace import applied_events, assistant_positions, compaction_contexts, memo, session_of
from workbench.registry import register_metric
from workbench.session import Message, Session

__all__ = [
    "DIMENSIONS",
    "METRICS",
    "CompactionCoverage",
    "StateItem",
    "TaskState",
    "analyse",
    "covered_items",
    "extract_task_state",
    "stating_units",
    "task_state_at",
]

DIMENSIONS: tuple[str, ...] = ("task", "constraints", "artifacts", "decisions", "progress", "next_step", "open_errors")
#: The metric of each dimension, and the overall one.
METRICS: dict[str, str] = {"task_state_coverage": "", **{f"task_state_{d}": d for d in DIMENSIONS}}
MAX_TERMS = 6
MAX_REQUEST_SENTENCES = 3
MAX_DECISIONS = 8
MAX_PROGRESS = 5
MAX_ERRORS = 5
MAX_STATEMENT_CHARS = 240
MAX_LISTED = 20

_WORD = re.compile(r"[a-z0-9][a-z0-9_.+-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\[\"'])|\n+")
_BULLET = re.compile(r"^[\s>*#+-]*(?:\d+[.)]\s+)?")
_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_SHELL_FENCE = re.compile(r"```(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)
_MARKUP = re.compile(r"^\s*<[\w-]+[ >]|^\s*\[Request interrupted")
_GENERIC = frozenset(
    "let ll ve re now here there what which who how why when where one thing things sure ok okay yes "
    "continue proceed thanks thank good great well go get got want like need see look "
    "then next also still ill im ive lets id".split()
)
#: Each cue's lookahead holds the first letters of its words (matched ignoring case): most places fail it
#: at once instead of trying every word.
_DECISION = re.compile(
    r"\b(?=[ilwdgrcost])(?:i'll|i will|let's|let us|we'll|we will|decided|decide to|decision|instead|going with|"
    r"go with|rather than|chose|choose|opt(?:ed)? for|switch(?:ed)? to|the (?:fix|approach|plan) "
    r"(?:is|will be))\b",
    re.IGNORECASE,
)
_PROGRESS = re.compile(
    r"\b(?=[dfpcuaiwsrn])(?:done|fixed|pass(?:es|ed)?|passing|created|updated|added|implemented|completed|"
    r"finished|found|works|succeeded|committed|closed|resolved|all \d+|now (?:has|have|is|are))\b",
    re.IGNORECASE,
)
_NEXT = re.compile(
    r"\b(?=[nlitrs])(?:next|now i'll|now let me|let me|i'll|i will|i need to|need to|then|remaining|still need|"
    r"todo|to do)\b",
    re.IGNORECASE,
)
_ERROR_SIGNAL = re.compile(
    r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b(?::|$)|"
    r"^(?:error|fatal|ERROR|FATAL)\b[:\[]|\berror\[|\*\* \(\w+|\bFAILED\b|"
    r"\b[1-9]\d* (?:failed|failures?|errors?)\b|exit (?:code|status):? [1-9]|"
    r"command not found|No such file or directory|<tool_use_error>",
    re.MULTILINE,
)
#: Text one of which every `_ERROR_SIGNAL` match holds: an observation holding none (most of them) is not
#: searched, a scan that tries each alternative at every character.
_ERROR_SIGNAL_WORDS = (
    "Traceback",
    "Error",
    "Exception",
    "error",
    "fatal",
    "ERROR",
    "FATAL",
    "** (",
    "FAILED",
    "failed",
    "failure",
    "exit ",
    "command not found",
    "No such file or directory",
)
_ERROR_LINE = re.compile(
    r"^.*(?:Error|Exception|error|FAILED|failed|failures?|fatal|not found|No such file)"
    r".*$",
    re.MULTILINE,
)
_SUCCESS = re.compile(r"\b0 (?:failed|failures|errors)\b|\b\d+ passed\b|\bsuccessfully\b|\bOK\b", re.IGNORECASE)

#: The verbs that say how a file was touched (their stems are matched): an artifact is stated by its
#: name and one of these.
ACTIONS: dict[str, tuple[str, ...]] = {
    "created": ("created", "create", "creates", "new", "wrote", "written", "write", "added", "add", "adds"),
    "edited": (
        "edited",
        "edit",
        "edits",
        "modified",
        "modify",
        "updated",
        "update",
        "updates",
        "changed",
        "change",
        "changes",
        "fixed",
        "fix",
        "rewrote",
        "rewritten",
        "refactored",
        "replaced",
        "extended",
        "extracted",
        "added",
        "removed",
        "patched",
        "implemented",
    ),
    "deleted": ("deleted", "delete", "removed", "remove"),
    "moved": ("moved", "move", "renamed", "rename"),
    "committed": ("committed", "commit", "commits"),
}
_EDITOR_COMMANDS = {"create": "created", "str_replace": "edited", "insert": "edited", "undo_edit": "edited"}
_WRITE_TOOLS = frozenset(("write", "create", "create_file", "write_file", "notebookedit"))
_EDIT_TOOLS = frozenset(("edit", "multiedit", "edit_file", "str_replace", "replace", "insert"))
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$", re.MULTILINE)
_MOVE_TO = re.compile(r"^\*\*\* Move to: (.+)$", re.MULTILINE)
_SHELL_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\n)\s*")
_REDIRECT = re.compile(r"(?<![0-9&])>>?\s*([^\s|;&<>]+)")
_NOT_FILES = ("/dev/", "&")
_COMMAND_KEYS = ("command", "cmd", "script")


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """A crude stem that makes `created`, `creates` and `create` (or `modified` and `modify`) one word;
    identifiers, paths and numbers are left as they are."""
    word = word.rstrip(".-+")
    if not word.isalpha() or len(word) <= 3:
        return word
    for suffix, replacement in (
        ("ied", "i"),
        ("ies", "i"),
        ("ing", ""),
        ("ed", ""),
        ("es", ""),
        ("e", ""),
        ("y", "i"),
        ("s", ""),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: len(word) - len(suffix)] + replacement
    return word


def _normalized(text: str) -> str:
    """The text as words are read from it: lower case, without backticks and apostrophes."""
    return text.lower().replace("`", "").replace("'", "")


def _words(text: str) -> list[str]:
    return [w.rstrip(".-+") for w in _WORD.findall(_normalized(text))]


_ACTION_STEMS = {name: frozenset(map(stem, verbs)) for name, verbs in ACTIONS.items()}


# -- items ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateItem:
    """One statement of the task state: its `dimension`, the `text` as found (shortened), its key
    `terms` (each a set of accepted stems) and `source`, the index in `Session.messages` of the
    message carrying it (the last one, for a file touched several times)."""

    dimension: str
    text: str
    terms: tuple[frozenset[str], ...]
    source: int

    @property
    def needed(self) -> int:
        """How many of the key terms one sentence must hold to state the item (half, at least two)."""
        return min(len(self.terms), max(2, math.ceil(len(self.terms) / 2)))

    @property
    def window(self) -> int:
        """The most words those terms may span within the sentence."""
        return 4 * self.needed + 4


@dataclass(frozen=True)
class TaskState:
    """The task state at call `call_index`: its items, in the order of `DIMENSIONS`."""

    call_index: int
    items: tuple[StateItem, ...]

    def of(self, dimension: str) -> tuple[StateItem, ...]:
        return tuple(i for i in self.items if i.dimension == dimension)


def key_terms(text: str, *, limit: int = MAX_TERMS) -> tuple[frozenset[str], ...]:
    """The key terms of a sentence: its content words (no stop or filler words), identifiers, paths and
    numbers first, then the longest words; each as the singleton of its stem."""
    seen: dict[str, None] = {}
    for word in _words(text):
        if len(word) > 1 and word not in STOPWORDS and word not in _GENERIC:
            seen.setdefault(stem(word), None)
    ranked = sorted(seen, key=lambda w: (w.isalpha(), -len(w)))
    return tuple(frozenset((w,)) for w in ranked[:limit])


def _sentences(text: str) -> Iterator[str]:
    """The sentences and lines of a text, outside fenced code, without bullets and markup."""
    text = _FENCE.sub("\n", text)
    for piece in _SENTENCE_END.split(text):
        piece = _BULLET.sub("", piece).strip()
        if len(piece) >= 8:
            yield piece


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_STATEMENT_CHARS else text[: MAX_STATEMENT_CHARS - 1] + "…"


def _statement(dimension: str, sentence: str, source: int) -> StateItem | None:
    terms = key_terms(sentence)
    return StateItem(dimension, _short(sentence), terms, source) if len(terms) >= 2 else None


def is_request(message: Message) -> bool:
    """A real user request: a user message that is no observation, no compaction's summary, no
    command output or interruption marker."""
    if message.role != "user" or message.is_observation or message.origin != "original":
        return False
    text = message.text.strip()
    return bool(text) and not _MARKUP.match(text) and not (message.metadata or {}).get("recorded_compaction")


# -- what each message contributes (once per session) ---------------------------------------------


@dataclass(frozen=True)
class _Touch:
    path: str
    action: str


@dataclass(frozen=True)
class _Outcome:
    """What an observation says of the command or file `key`: an error (with its statement) or a success."""

    key: str
    error: StateItem | None


@dataclass(frozen=True)
class _Contribution:
    requests: tuple[StateItem, ...] = ()
    constraints: tuple[StateItem, ...] = ()
    touches: tuple[_Touch, ...] = ()
    decisions: tuple[StateItem, ...] = ()
    progress: tuple[StateItem, ...] = ()
    next_steps: tuple[StateItem, ...] = ()
    outcome: _Outcome | None = None


def _arguments(arguments: str) -> dict[str, Any]:
    try:
        data = json.loads(arguments)
    except (ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def _command_text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value) if value is not None else ""


def shell_touches(command: str) -> list[_Touch]:
    """The files a shell command writes, and how: `sed -i`, redirections, `tee`, `touch`, `mv`, `cp`,
    `rm`, `git mv`/`rm` and `git commit` (as the pseudo-file `git commit`)."""
    out: list[_Touch] = []
    for part in _SHELL_SPLIT.split(command):
        words = part.split()
        if not words:
            continue
        program = words[0]
        arguments = [w.strip("\"'") for w in words[1:] if not w.startswith("-")]
        if program == "git" and len(words) > 1:
            if words[1] == "commit":
                out.append(_Touch("git commit", "committed"))
                continue
            program, arguments = words[1], arguments[1:]
        if program == "sed" and any(w.startswith("-i") for w in words[1:]) and arguments:
            out.append(_Touch(arguments[-1], "edited"))
        elif program in ("mv", "cp") and len(arguments) >= 2:
            out.append(_Touch(arguments[-1], "moved" if program == "mv" else "created"))
        elif program == "rm":
            out.extend(_Touch(a, "deleted") for a in arguments)
        elif program == "touch":
            out.extend(_Touch(a, "created") for a in arguments)
        elif program == "tee":
            out.extend(_Touch(a, "edited") for a in arguments)
        for target in _REDIRECT.findall(part):
            if not target.startswith(_NOT_FILES):
                out.append(_Touch(target.strip("\"'"), "created" if ">>" not in part else "edited"))
    return [t for t in out if t.path and not t.path.startswith("$")]


def tool_touches(name: str, arguments: str) -> list[_Touch]:
    """The files a tool call writes, and how (file-writing tools, patches, shell commands)."""
    data = _arguments(arguments)
    lowered = name.lower()
    path = next((str(data[k]) for k in ("file_path", "path", "filename", "notebook_path") if data.get(k)), "")
    command = data.get("command")
    if lowered.startswith("str_replace") or (isinstance(command, str) and command in _EDITOR_COMMANDS and path):
        action = _EDITOR_COMMANDS.get(command) if isinstance(command, str) else None
        return [_Touch(path, action)] if path and action else []
    if lowered in _WRITE_TOOLS and path:
        return [_Touch(path, "created")]
    if lowered in _EDIT_TOOLS and path:
        return [_Touch(path, "edited")]
    patch = next((str(v) for v in data.values() if isinstance(v, str) and "*** Begin Patch" in v), "")
    if not patch and "*** Begin Patch" in arguments:
        patch = arguments
    if patch:
        touches = [
            _Touch(p.strip(), {"Add": "created", "Update": "edited", "Delete": "deleted"}[a])
            for a, p in _PATCH_FILE.findall(patch)
        ]
        return touches + [_Touch(p.strip(), "moved") for p in _MOVE_TO.findall(patch)]
    shell = next((_command_text(data[k]) for k in _COMMAND_KEYS if k in data), "")
    return shell_touches(shell) if shell else []


def fenced_commands(text: str) -> list[str]:
    """The shell commands of a text-action agent's message: its fenced bash/sh blocks."""
    return [block.strip() for block in _SHELL_FENCE.findall(text) if block.strip()]


def _command_key(observation: Message, previous: Message | None) -> str:
    """What an observation answers: the command (or tool and file) of its tool call, or the fenced
    command of a text-action agent's message."""
    calls = previous.tool_calls if previous is not None else ()
    call = next((c for c in calls if c.id == observation.tool_call_id), calls[0] if calls else None)
    if call is None:
        commands = fenced_commands(previous.text) if previous is not None else []
        return " ".join(commands[0].split())[:200] if commands else ""
    data = _arguments(call.arguments)
    shell = next((_command_text(data[k]) for k in _COMMAND_KEYS if k in data and isinstance(data[k], (str, list))), "")
    if shell:
        return " ".join(shell.split())[:200]
    path = next((str(data[k]) for k in ("file_path", "path") if data.get(k)), "")
    return f"{call.name} {normalize_path(path)}".strip()


def _outcome(index: int, message: Message, previous: Message | None) -> _Outcome | None:
    text = message.text
    key = _command_key(message, previous)
    if not key:
        return None
    signal = _ERROR_SIGNAL.search(text) if any(word in text for word in _ERROR_SIGNAL_WORDS) else None
    if signal is None or _SUCCESS.search(text) and not re.search(r"\b[1-9]\d* (?:failed|failures?)\b", text):
        return _Outcome(key, None)
    line = _ERROR_LINE.search(text, max(0, signal.start() - 200))
    error_text = (line.group() if line else signal.group()).strip()
    statement = f"{key.split()[0] if key else ''} {error_text}".strip()
    terms = key_terms(error_text, limit=MAX_TERMS - 1)
    command_terms = [t for t in key_terms(key, limit=3) if t not in terms]
    terms = (*terms, *command_terms[:1])
    if len(terms) < 2:
        return _Outcome(key, None)
    return _Outcome(key, StateItem("open_errors", _short(statement), terms, index))


def _contribution(index: int, message: Message, previous: Message | None) -> _Contribution:
    if is_request(message):
        constraints = tuple(
            StateItem("constraints", _short(f.text), terms, index)
            for f in extract_constraints(message.text)
            if len(terms := key_terms(f.text)) >= 2
        )
        constrained = {c.text for c in constraints}
        requests = tuple(
            item
            for s in _sentences(message.text)
            if _short(s) not in constrained
            if (item := _statement("task", s, index)) is not None
        )[:MAX_REQUEST_SENTENCES]
        return _Contribution(requests=requests, constraints=constraints)
    if message.role == "assistant":
        touches = tuple(t for call in message.tool_calls for t in tool_touches(call.name, call.arguments))
        if not message.tool_calls:
            touches = tuple(t for command in fenced_commands(message.text) for t in shell_touches(command))
        decisions: list[StateItem] = []
        progress: list[StateItem] = []
        next_steps: list[StateItem] = []
        for sentence in _sentences(message.text):
            for cue, found, dimension in (
                (_DECISION, decisions, "decisions"),
                (_PROGRESS, progress, "progress"),
                (_NEXT, next_steps, "next_step"),
            ):
                if cue.search(sentence) and (item := _statement(dimension, sentence, index)) is not None:
                    found.append(item)
        return _Contribution(
            touches=touches, decisions=tuple(decisions), progress=tuple(progress), next_steps=tuple(next_steps)
        )
    if message.is_observation:
        return _Contribution(outcome=_outcome(index, message, previous))
    return _Contribution()


def _contributions(session: Session) -> list[_Contribution]:
    def compute() -> list[_Contribution]:
        out: list[_Contribution] = []
        last_assistant: Message | None = None
        for index, message in enumerate(session.messages):
            out.append(_contribution(index, message, last_assistant))
            if message.role == "assistant":
                last_assistant = message
        return out

    found: list[_Contribution] = memo(session, "task_state_contributions", compute)
    return found


def _artifact(path: str, actions: list[str], source: int) -> StateItem:
    name = path if path == "git commit" else normalize_path(path).rstrip("/").rsplit("/", 1)[-1]
    accepted = frozenset().union(*(_ACTION_STEMS[a] for a in actions))
    named = frozenset((stem(name),)) if path != "git commit" else frozenset(("git",))
    how = ", ".join(dict.fromkeys(actions))
    return StateItem("artifacts", f"{how} {path}", (named, accepted), source)


def extract_task_state(messages: Sequence[Message], call_index: int = 0) -> TaskState:
    """The task state of a recorded history (the messages before a call), see the module docstring."""
    return _state(
        Session.from_messages(messages) if not isinstance(messages, Session) else messages, len(messages), call_index
    )


def task_state_at(session: Session, call_index: int) -> TaskState:
    """The task state from the recorded messages before call `call_index` (cached per session and call).

    Built from `_checkpoints`, one pass over the session for all its calls; equal to `_state`, the
    plain walk up to the call (tests/test_quality_task_state.py)."""
    positions = assistant_positions(session)
    end = positions[call_index] if 0 <= call_index < len(positions) else len(session.messages)
    states: dict[int, TaskState] = memo(session, "task_states", dict)
    if call_index not in states:
        states[call_index] = _checkpoints(session).state(end, call_index)
    return states[call_index]


@dataclass(frozen=True)
class _Checkpoint:
    """`_state`'s accumulators before one message: how long the lists that only grow were, and
    copies of what changes in place (files, the last request, the next step, the open errors)."""

    tasks: int
    constraints: int
    files: tuple[tuple[str, tuple[str, ...], int], ...]
    decisions: int
    progress: int
    last_request: tuple[StateItem, ...]
    next_step: tuple[StateItem, ...]
    errors: tuple[StateItem, ...]


class _Checkpoints:
    """The task state before every call of a session, from one pass over its contributions: walking
    them again up to each call (`_state`) costs the session's length per call, which a replay that
    compacts at most calls (observation masking) pays for each."""

    def __init__(self, session: Session):
        ends = {*assistant_positions(session), len(session.messages)}
        self.task: list[StateItem] = []
        self.constraints: list[StateItem] = []
        self.decisions: list[StateItem] = []
        self.progress: list[StateItem] = []
        self.at: dict[int, _Checkpoint] = {}
        self._artifacts: dict[tuple[str, tuple[str, ...], int], StateItem] = {}
        seen_constraints: set[str] = set()
        files: dict[str, tuple[str, tuple[str, ...], int]] = {}
        next_steps: list[StateItem] = []
        errors: dict[str, StateItem] = {}
        last_request: tuple[StateItem, ...] = ()
        contributions = _contributions(session)
        for index in range(len(contributions) + 1):
            if index in ends:
                self.at[index] = _Checkpoint(
                    len(self.task),
                    len(self.constraints),
                    tuple(files.values()),
                    len(self.decisions),
                    len(self.progress),
                    last_request,
                    tuple(next_steps[-1:]),
                    tuple(list(errors.values())[-MAX_ERRORS:]),
                )
            if index == len(contributions):
                break
            found = contributions[index]
            self.task += found.requests
            for item in found.constraints:
                if item.text.lower() not in seen_constraints:
                    seen_constraints.add(item.text.lower())
                    self.constraints.append(item)
            if found.requests:
                last_request, next_steps = found.requests, []
            for touch in found.touches:
                key = touch.path if touch.path == "git commit" else normalize_path(touch.path)
                written, actions, _ = files.get(key, (touch.path, (), index))
                files[key] = (written, (*actions, touch.action), index)
            self.decisions += found.decisions
            self.progress += found.progress
            next_steps += found.next_steps
            if found.outcome is not None:
                errors.pop(found.outcome.key, None)
                if found.outcome.error is not None:
                    errors[found.outcome.key] = found.outcome.error

    def state(self, end: int, call_index: int) -> TaskState:
        """The task state before message `end` (an assistant message's index, or the session's length)."""
        point = self.at[end]
        items: list[StateItem] = [*self.task[: point.tasks], *self.constraints[: point.constraints]]
        for file in point.files:
            artifact = self._artifacts.get(file)
            if artifact is None:
                artifact = self._artifacts.setdefault(file, _artifact(file[0], list(file[1]), file[2]))
            items.append(artifact)
        items += self.decisions[: point.decisions][-MAX_DECISIONS:] + self.progress[: point.progress][-MAX_PROGRESS:]
        items += [StateItem("next_step", i.text, i.terms, i.source) for i in point.last_request[:1]]
        items += [*point.next_step, *point.errors]
        return TaskState(call_index, tuple(items))


def _checkpoints(session: Session) -> _Checkpoints:
    found: _Checkpoints = memo(session, "task_state_checkpoints", lambda: _Checkpoints(session))
    return found


def _state(session: Session, end: int, call_index: int) -> TaskState:
    contributions = _contributions(session)[:end]
    task: list[StateItem] = []
    constraints: dict[str, StateItem] = {}
    files: dict[str, tuple[str, list[str], int]] = {}
    decisions: list[StateItem] = []
    progress: list[StateItem] = []
    next_steps: list[StateItem] = []
    errors: dict[str, StateItem] = {}
    last_request: tuple[StateItem, ...] = ()
    for index, found in enumerate(contributions):
        task += found.requests
        for item in found.constraints:
            constraints.setdefault(item.text.lower(), item)
        if found.requests:
            last_request, next_steps = found.requests, []
        for touch in found.touches:
            key = touch.path if touch.path == "git commit" else normalize_path(touch.path)
            written, actions, _ = files.get(key, (touch.path, [], index))
            files[key] = (written, [*actions, touch.action], index)
        decisions += found.decisions
        progress += found.progress
        next_steps += found.next_steps
        if found.outcome is not None:
            errors.pop(found.outcome.key, None)
            if found.outcome.error is not None:
                errors[found.outcome.key] = found.outcome.error
    items: list[StateItem] = [*task, *constraints.values()]
    items += [_artifact(path, actions, source) for path, actions, source in files.values()]
    items += decisions[-MAX_DECISIONS:] + progress[-MAX_PROGRESS:]
    items += [StateItem("next_step", i.text, i.terms, i.source) for i in last_request[:1]] + next_steps[-1:]
    items += list(errors.values())[-MAX_ERRORS:]
    return TaskState(call_index, tuple(items))


# -- coverage ------------------------------------------------------------------------------------


class _Units:
    """A message's sentences and lines as stems, with where each stem occurs: (unit, position).

    Compared by identity: the per-session cache of `covered_items` keys on it. Built in two steps, each
    once per message and only when asked: first the set of the text's stems, which rules out most
    items (a unit cannot hold `needed` terms the whole text lacks), then the positions."""

    __slots__ = ("text", "_stems", "_postings")

    def __init__(self, text: str) -> None:
        self.text = text
        self._stems: frozenset[str] | None = None
        self._postings: dict[str, tuple[tuple[int, int], ...]] | None = None

    @property
    def stems(self) -> frozenset[str]:
        """Every stem of the text: its units' words, as the units read them."""
        if self._stems is None:
            self._stems = frozenset(map(stem, set(_WORD.findall(_normalized(self.text)))))
        return self._stems

    @property
    def postings(self) -> Mapping[str, tuple[tuple[int, int], ...]]:
        if self._postings is None:
            postings: dict[str, list[tuple[int, int]]] = {}
            for unit, words in enumerate(stating_units(self.text)):
                for position, word in enumerate(words):
                    postings.setdefault(word, []).append((unit, position))
            self._postings = {w: tuple(p) for w, p in postings.items()}
        return self._postings

    def states(self, item: StateItem) -> bool:
        """Whether one of these units states `item` (see `_states`)."""
        stems = self.stems
        if sum(1 for accepted in item.terms if not accepted.isdisjoint(stems)) < item.needed:
            return False
        postings = self.postings
        hits: dict[int, list[tuple[int, int]]] = {}
        for index, accepted in enumerate(item.terms):
            for word in accepted:
                for unit, position in postings.get(word, ()):
                    hits.setdefault(unit, []).append((position, index))
        return _states(item, hits)


def stating_units(text: str) -> list[list[str]]:
    """The units of a text that can state something, as stems: its sentences and lines."""
    return [[stem(w) for w in words] for piece in _SENTENCE_END.split(text) if (words := _words(piece))]


_UNITS: dict[int, tuple[weakref.ref[Message], _Units]] = {}
_UNITS_LOCK = threading.RLock()


def _forget(key: int) -> Any:
    def forget(_: Any) -> None:
        with _UNITS_LOCK:
            entry = _UNITS.get(key)
            if entry is not None and entry[0]() is None:
                del _UNITS[key]

    return forget


def _units(message: Message, by_text: dict[str, _Units] | None = None) -> _Units:
    """The units of `message` (kept while it lives); `by_text` shares them between messages of one text
    (a strategy's copies, the same placeholder or summary in several replays of a session)."""
    key = id(message)
    entry = _UNITS.get(key)
    if entry is not None and entry[0]() is message:
        return entry[1]
    text = message.text
    found = by_text.get(text) if by_text is not None else None
    if found is None:
        found = _Units(text)
        if by_text is not None:
            found = by_text.setdefault(text, found)
    with _UNITS_LOCK:
        _UNITS[key] = (weakref.ref(message, _forget(key)), found)
    return found


def _states(item: StateItem, hits: Mapping[Any, list[tuple[int, int]]]) -> bool:
    """Whether some unit holds `needed` of the item's terms within its window (hits: unit -> (position,
    term index))."""
    needed, window = item.needed, item.window
    for found in hits.values():
        if len({t for _, t in found}) < needed:
            continue
        found.sort()
        start = 0
        for end in range(len(found)):
            while found[end][0] - found[start][0] >= window:
                start += 1
            if len({t for _, t in found[start : end + 1]}) >= needed:
                return True
    return False


class _Stating:
    """Which messages state an item, as far as checked: per session, the compactions of all its replays
    share the answer for a message they keep, so each (message, item) pair is checked once."""

    def __init__(self) -> None:
        self.checked: set[_Units] = set()
        self.stating: set[_Units] = set()

    def any_of(self, item: StateItem, units: set[_Units]) -> bool:
        for found in units - self.checked:
            if found.states(item):
                self.stating.add(found)  # before `checked`: a reader never sees it checked and not stating
            self.checked.add(found)
        return not self.stating.isdisjoint(units)


def _stating(session: Session) -> dict[tuple[frozenset[str], ...], _Stating]:
    found: dict[tuple[frozenset[str], ...], _Stating] = memo(session, "task_state_stating", dict)
    return found


def covered_items(items: Sequence[StateItem], context: Sequence[Message], session: Session | None = None) -> list[bool]:
    """For each item, whether `context` states it (see the module docstring); `session` is the recording
    the items' `source` indices point into (its messages kept in the context cover their items).

    An item is stated by the context when one of its messages states it, so with a session the answer
    for each (message, item terms) pair is kept for the session's later compactions."""
    if session is None:
        units = {_units(m) for m in context}
        return [any(found.states(item) for found in units) for item in items]
    present = {id(m) for m in context}
    by_text: dict[str, _Units] = memo(session, "task_state_units", dict)
    units = {_units(m, by_text) for m in context}
    stating = _stating(session)
    out: list[bool] = []
    for item in items:
        if 0 <= item.source < len(session.messages) and id(session.messages[item.source]) in present:
            out.append(True)
            continue
        known = stating.get(item.terms)
        if known is None:
            known = stating.setdefault(item.terms, _Stating())
        out.append(known.any_of(item, units))
    return out


@dataclass(frozen=True)
class CompactionCoverage:
    """The task state at one compaction and which items the context after it still states."""

    event_index: int
    call_index: int
    state: TaskState
    covered: tuple[bool, ...]

    def share(self, dimension: str | None = None) -> float | None:
        """Covered share of one dimension's items (None without any); overall (no dimension): the mean
        over the dimensions that have items."""
        if dimension is None:
            shares = [s for d in DIMENSIONS if (s := self.share(d)) is not None]
            return sum(shares) / len(shares) if shares else None
        flags = [c for i, c in zip(self.state.items, self.covered, strict=True) if i.dimension == dimension]
        return sum(flags) / len(flags) if flags else None

    def missing(self, dimension: str | None = None, limit: int = MAX_LISTED) -> list[str]:
        """The statements the context no longer states (of one dimension), the first `limit`."""
        return [
            f"{i.dimension}: {i.text}"
            for i, c in zip(self.state.items, self.covered, strict=True)
            if not c and (dimension is None or i.dimension == dimension)
        ][:limit]


def coverage_of(
    session: Session, call_index: int, context: Sequence[Message], event_index: int = 0
) -> CompactionCoverage:
    """The task state at `call_index` and which of it `context` (a compacted context) states."""
    state = task_state_at(session, call_index)
    return CompactionCoverage(event_index, call_index, state, tuple(covered_items(state.items, context, session)))


def analyse(result: Any) -> tuple[CompactionCoverage, ...]:
    """The coverage of every applied compaction of a replay result (memoised per result)."""

    def compute() -> tuple[CompactionCoverage, ...]:
        session = session_of(result)
        out = []
        for event_index in applied_events(result):
            _, after = compaction_contexts(result, event_index)
            out.append(coverage_of(session, result.compactions[event_index].call_index, after, event_index))
        return tuple(out)

    found: tuple[CompactionCoverage, ...] = memo(result, "task_state_coverage", compute)
    return found


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


class _TaskStateMetric:
    """A task-state coverage metric: `dimension` "" is the overall one."""

    requires_model: ClassVar[bool] = False
    reusable: ClassVar[bool] = True
    dimension: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return f"task_state_{self.dimension or 'coverage'}"

    def compute(self, result: Any) -> float | None:
        return _mean([c.share(self.dimension or None) for c in analyse(result)])

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        by_event = {c.event_index: c for c in analyse(result)}
        rows = []
        for index in range(len(result.compactions)):
            found = by_event.get(index)
            row: dict[str, Any] = {self.name: found.share(self.dimension or None) if found else None}
            if not self.dimension:
                row["task_state_items"] = len(found.state.items) if found else None
                row["task_state_missing"] = found.missing() if found else []
            rows.append(row)
        return rows


@register_metric("task_state_coverage", direction="higher", unit="share", level="compaction")
class TaskStateCoverage(_TaskStateMetric):
    """Share of the session's task state (task and instructions, constraints, artifact trail, decisions,
    progress, next step, open errors) the compacted context still states as a sentence, not as bare
    tokens: per compaction the mean over the dimensions with items, per run the mean over compactions."""


def _dimension_metric(dimension: str, doc: str) -> type[_TaskStateMetric]:
    cls = type(
        f"TaskState_{dimension}", (_TaskStateMetric,), {"dimension": dimension, "__doc__": doc, "__module__": __name__}
    )
    return register_metric(f"task_state_{dimension}", direction="higher", unit="share", level="compaction")(cls)


_DIMENSION_DOCS = {
    "task": "Share of the user's task and later instructions the compacted context still states.",
    "constraints": "Share of the user's constraints (must, never, don't, always...) the compacted context still "
    "states.",
    "artifacts": "Share of the artifact trail (files created, edited, moved, deleted; commits) the context still "
    "states with how they were touched.",
    "decisions": "Share of the agent's latest decisions (I'll, let's, decided, instead...) the context still states.",
    "progress": "Share of the agent's latest statements of what was done or found the context still states.",
    "next_step": "Share of the next step (the last user request, the agent's stated next action) the context "
    "still states.",
    "open_errors": "Share of the errors still open at the compaction (not followed by a success of the same "
    "command or file) the context still states.",
}
DIMENSION_METRICS = {d: _dimension_metric(d, _DIMENSION_DOCS[d]) for d in DIMENSIONS}
