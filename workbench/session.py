"""The session model: messages, steps and sessions.

A `Message` is OpenAI-chat shaped and immutable. A `Step` is what compaction keeps or drops
whole (a user message, or an assistant message with every tool result answering it), so no
strategy that works on steps can orphan a tool call or a tool result. A `Session` is a recorded
conversation with a content-derived id, so importing the same content twice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import islice
from typing import Any, ClassVar, Literal

from workbench.errors import did_you_mean

Role = Literal["system", "user", "assistant", "tool"]
Origin = Literal["original", "compacted_synthetic", "compacted_modified", "retrieved_history"]
ProbeKind = Literal["recall", "artifact", "decision", "continuation"]

ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
#: Roles accepted on input (`Message.from_openai`, `Session.from_messages`) for the role they stand for:
#: OpenAI's `developer` succeeds `system` for newer models, `function` is the legacy form of a tool
#: result (`name` and `content`, no `tool_call_id`), answering the assistant's legacy `function_call`.
#: The original role is kept in the message's `metadata["original_role"]`; output uses the mapped role.
ROLE_ALIASES: Mapping[str, str] = {"developer": "system", "function": "tool"}
#: The roles an observation may have: a tool result, or the user turn a text-action agent is shown.
OBSERVATION_ROLES: tuple[str, ...] = ("user", "tool")
ORIGINS: tuple[str, ...] = ("original", "compacted_synthetic", "compacted_modified", "retrieved_history")
PROBE_KINDS: tuple[str, ...] = ("recall", "artifact", "decision", "continuation")
PINNED_IMPORTANCE = 10.0
NO_RESULT_TEXT = "[no result recorded: the tool call was interrupted]"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by an assistant message; `arguments` is a JSON string."""

    id: str
    name: str
    arguments: str = "{}"

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ToolCall:
        function = data.get("function") or {}
        arguments = function.get("arguments", data.get("arguments", "{}"))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        return cls(
            id=str(data.get("id") or ""), name=str(function.get("name") or data.get("name") or ""), arguments=arguments
        )


Content = str | tuple[Mapping[str, Any], ...] | None


def _freeze_content(content: Any) -> Content:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        return (dict(content),)
    if isinstance(content, Iterable):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append({"type": "text", "text": part})
            elif isinstance(part, Mapping):
                parts.append(dict(part))
            else:
                raise TypeError(f"content part must be a dict or a string, not {type(part).__name__}")
        return tuple(parts)
    raise TypeError(f"content must be a string, a list of parts or None, not {type(content).__name__}")


@dataclass(frozen=True)
class Message:
    """One chat message.

    `content` is text, a tuple of parts (`{"type": "text", "text": ...}`, `{"type": "image_url", ...}`)
    or None. `importance` is in [-10, 10]; 10 or more pins the message through every strategy.
    `origin` says whether compaction made or changed it. `observation` marks a `user` message that
    carries the environment's answer to the assistant's action just before it (the shell output a
    text-action agent such as mini-swe-agent or SWE-agent is shown); a `tool` result is always an
    observation (`is_observation`). `metadata` holds what the recording said (usage, finish_reason,
    model, timestamps...). Token counts are cached on the instance, which is safe because a message
    never changes.
    """

    role: str
    content: Content = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    origin: str = "original"
    importance: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)
    observation: bool = False
    _token_cache: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role must be one of {', '.join(ROLES)}, not {self.role!r}")
        if self.observation and self.role not in OBSERVATION_ROLES:
            raise ValueError(f"only a user or tool message can be an observation, not a {self.role} message")
        if self.origin not in ORIGINS:
            raise ValueError(f"message origin must be one of {', '.join(ORIGINS)}, not {self.origin!r}")
        if not -10.0 <= float(self.importance) <= 10.0:
            raise ValueError(f"importance must be within [-10, 10], not {self.importance}")
        content = _freeze_content(self.content)
        if content is not self.content:
            object.__setattr__(self, "content", content)
        if not isinstance(self.tool_calls, tuple):
            calls = tuple(c if isinstance(c, ToolCall) else ToolCall.from_openai(c) for c in self.tool_calls)
            object.__setattr__(self, "tool_calls", calls)

    @property
    def pinned(self) -> bool:
        return self.importance >= PINNED_IMPORTANCE

    @property
    def is_observation(self) -> bool:
        """Whether this message is the environment's answer to an action: a tool result, or a
        user message marked `observation` (what masking, clearing and truncation act on)."""
        return self.role == "tool" or self.observation

    def __repr__(self) -> str:
        """One short line (a message may hold megabytes of text): role, size, a preview."""
        text = self.text
        preview = text[:40].replace("\n", " ")
        extras = f", tool_calls={len(self.tool_calls)}" if self.tool_calls else ""
        if self.tool_call_id is not None:
            extras += f", tool_call_id={self.tool_call_id!r}"
        if self.origin != "original":
            extras += f", origin={self.origin!r}"
        return f"Message({self.role}, {len(text):,} chars{extras}: {preview!r}{'...' if len(text) > 40 else ''})"

    @property
    def text(self) -> str:
        """The text content: the string itself, or the text parts joined by newlines (other parts skipped)."""
        content = self.content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")

    @property
    def has_non_text_parts(self) -> bool:
        return isinstance(self.content, tuple) and any(p.get("type") != "text" for p in self.content)

    def replace(self, **changes: Any) -> Message:
        """A copy with `changes` applied (and a fresh token cache)."""
        return replace(self, **changes)

    def to_openai(self, *, extras: bool = False) -> dict[str, Any]:
        """The OpenAI chat dict; with `extras`, also `origin`, `importance`, `observation` (a user
        observation) and `metadata` when set."""
        content = self.content
        out: dict[str, Any] = {
            "role": self.role,
            "content": content if content is None or isinstance(content, str) else [dict(p) for p in content],
        }
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if extras:
            if self.origin != "original":
                out["origin"] = self.origin
            if self.importance:
                out["importance"] = self.importance
            if self.observation and self.role != "tool":
                out["observation"] = True
            if self.metadata:
                out["metadata"] = dict(self.metadata)
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Message:
        """Build from an OpenAI chat dict; `importance`, `origin`, `observation` and `metadata` are read
        when present.

        Roles `developer` and (legacy) `function` become `system` and `tool` (`ROLE_ALIASES`), and an
        assistant's legacy `function_call` its one tool call (id-less here: `as_messages` pairs it).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"a message must be a dict, not {type(data).__name__}")
        role = data.get("role", "")
        metadata = dict(data.get("metadata") or {})
        alias = ROLE_ALIASES.get(role) if isinstance(role, str) else None
        if alias is not None:
            metadata.setdefault("original_role", role)
            role = alias
        calls = tuple(ToolCall.from_openai(c) for c in data.get("tool_calls") or ())
        legacy_call = data.get("function_call")
        if not calls and role == "assistant" and isinstance(legacy_call, Mapping):
            # The legacy single call: its id is given by `as_messages`, which sees the result answering it.
            calls = (ToolCall.from_openai({"function": legacy_call}),)
        return cls(
            role=role,
            content=data.get("content"),
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            origin=data.get("origin", "original"),
            importance=float(data.get("importance", 0.0) or 0.0),
            metadata=metadata,
            observation=bool(data.get("observation")) and role != "tool",
        )


MessageLike = Message | Mapping[str, Any]


def as_message(item: MessageLike) -> Message:
    return item if isinstance(item, Message) else Message.from_openai(item)


def as_messages(items: Iterable[MessageLike]) -> list[Message]:
    """Messages from a list of `Message`s and OpenAI chat dicts.

    A legacy assistant `function_call` gets the id `function_call_<position>`, and the `function`
    message right after it (no `tool_call_id`; the same `name` or none) answers it with that id. A
    `function` message with no such call before it stays a tool result answering no call, which
    `tool_pairing_problems` reports, as it does any orphan result.
    """
    if isinstance(items, (Mapping, Message, str, bytes)):
        kind = "dict" if isinstance(items, Mapping) else type(items).__name__
        raise TypeError(f"messages must be a list of messages (dicts or Message), not a {kind}")
    out: list[Message] = []
    legacy: ToolCall | None = None  # the unanswered legacy call of the assistant message just before
    for item in items:
        if isinstance(item, Message):
            message = item
        else:
            message = Message.from_openai(item)
            if (
                message.role == "assistant"
                and not item.get("tool_calls")
                and isinstance(item.get("function_call"), Mapping)
            ):  # `from_openai` made its one id-less call
                legacy = replace(message.tool_calls[0], id=f"function_call_{len(out)}")
                out.append(message.replace(tool_calls=(legacy,)))
                continue
            if (
                legacy is not None
                and item.get("role") == "function"
                and message.tool_call_id is None
                and message.name in (None, legacy.name)
            ):
                message = message.replace(tool_call_id=legacy.id, name=legacy.name)
                out.append(message)
                legacy = None
                continue
        if message.role != "tool":
            legacy = None
        out.append(message)
    return out


@dataclass(frozen=True)
class Step:
    """A unit compaction keeps or drops whole.

    `kind` is `system`, `user`, `assistant` (with its tool results and observations) or `tool` (a
    stray tool message with no call before it: only in malformed input).
    """

    messages: tuple[Message, ...]
    #: Tokens of the step's messages per tokenizer name, filled by the replay (like `Message._token_cache`).
    _token_cache: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: Names of the per-step rewrites this step is a fixed point of (`strategies.common.settle`).
    settled: ClassVar[frozenset[str]] = frozenset()

    @property
    def kind(self) -> str:
        return self.messages[0].role

    @cached_property
    def paired(self) -> bool:
        """Whether this step is an assistant message whose every tool call the step's tool results
        answer once each (and nothing else), or a step with no tool traffic at all: a context made
        of such steps pairs every call with its result (`tools_paired`)."""
        head, rest = self.messages[0], self.messages[1:]
        if head.role == "tool" or any(m.role != "tool" and not m.observation for m in rest):
            return False
        answers = [m.tool_call_id for m in rest if m.role == "tool"]
        if head.role != "assistant":
            return not answers
        ids = [call.id for call in head.tool_calls]
        return len(answers) == len(ids) == len(set(ids)) and set(answers) == set(ids)

    @cached_property
    def pinned(self) -> bool:
        return any(m.pinned for m in self.messages)

    @cached_property
    def tool_uses(self) -> int:
        """The tool calls this step makes (its head's, when the head is an assistant message); a
        text action answered by user observations (no tool calls) is one use."""
        head = self.messages[0]
        if head.role != "assistant":
            return 0
        if head.tool_calls:
            return len(head.tool_calls)
        return 1 if any(m.observation for m in self.messages[1:]) else 0

    @property
    def head(self) -> Message:
        return self.messages[0]


def group_steps(messages: Sequence[Message]) -> list[Step]:
    """Split messages into steps: each observation joins the assistant step whose action it answers.

    Tool messages directly after an assistant message (or after its other results) join it, and so
    does a user observation (`Message.observation`: a text-action agent's shell output); a tool
    message anywhere else starts a step of its own, as does a user observation after anything but
    an assistant step. Any other message starts a step.
    """
    steps: list[list[Message]] = []
    open_calls: set[str] = set()
    for message in messages:
        if (
            message.role == "tool"
            and steps
            and steps[-1][0].role == "assistant"
            and (message.tool_call_id in open_calls or not message.tool_call_id)
        ):
            steps[-1].append(message)
            open_calls.discard(message.tool_call_id or "")
            continue
        if message.observation and steps and steps[-1][0].role == "assistant":
            steps[-1].append(message)
            continue
        steps.append([message])
        open_calls = {c.id for c in message.tool_calls} if message.role == "assistant" else set()
    return [Step(tuple(s)) for s in steps]


def flatten(steps: Iterable[Step]) -> list[Message]:
    return [m for s in steps for m in s.messages]


def split_leading_system(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """(the leading system messages, the rest)."""
    system = leading_system(messages)
    return system, list(islice(messages, len(system), None))


def leading_system(messages: Sequence[Message]) -> list[Message]:
    """The leading system messages."""
    i = 0
    while i < len(messages) and messages[i].role == "system":
        i += 1
    return list(islice(messages, i))


def tool_pairing_problems(messages: Sequence[Message]) -> list[str]:
    """Every tool call without a result and every result without a call, as readable lines."""
    problems: list[str] = []
    pending: dict[str, int] = {}
    for index, message in enumerate(messages):
        if message.role == "assistant":
            for call_id, at in pending.items():
                problems.append(f"tool call {call_id!r} at message {at} has no result")
            pending = {c.id: index for c in message.tool_calls}
        elif message.role == "tool":
            if message.tool_call_id in pending:
                del pending[message.tool_call_id]
            else:
                problems.append(f"tool result at message {index} answers no preceding call ({message.tool_call_id!r})")
        elif pending and message.role == "user":
            for call_id, at in pending.items():
                problems.append(f"tool call {call_id!r} at message {at} has no result")
            pending = {}
    for call_id, at in pending.items():
        problems.append(f"tool call {call_id!r} at message {at} has no result")
    return problems


def tools_paired(messages: Sequence[Message]) -> bool:
    """`not tool_pairing_problems(messages)`, in one tight pass that builds no text: the replay
    checks every compaction's output with it and asks for the readable problems only when it fails."""
    pending: set[str | None] = set()
    for message in messages:
        role = message.role
        if role == "tool":
            if message.tool_call_id not in pending:
                return False
            pending.discard(message.tool_call_id)
        elif role == "assistant":
            if pending:
                return False
            if message.tool_calls:
                pending = {call.id for call in message.tool_calls}
        elif pending and role == "user":
            return False
    return not pending


@dataclass(frozen=True)
class Probe:
    """A question about the session whose answer a good compaction keeps available.

    `from_call` is the 0-based call index from which the probe applies (its fact is known by then).
    """

    question: str
    expected: str
    kind: str = "recall"
    from_call: int = 0

    def __post_init__(self) -> None:
        if self.kind not in PROBE_KINDS:
            raise ValueError(f"probe kind must be one of {', '.join(PROBE_KINDS)}, not {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "expected": self.expected, "kind": self.kind, "from_call": self.from_call}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Probe:
        """A probe from its `to_dict` form; an unknown or missing key, or a `from_call` that is not a
        call index, is refused (a misspelt key would otherwise silently apply the probe from call 0)."""
        keys = ("question", "expected", "kind", "from_call")
        unknown = sorted(set(map(str, data)) - set(keys))
        if unknown:
            raise ValueError(
                f"unknown probe key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(keys)} (the 0-based call from which the probe applies)"
                f"{did_you_mean(unknown, keys)}"
            )
        missing = [key for key in ("question", "expected") if key not in data]
        if missing:
            raise ValueError(f"a probe needs {' and '.join(map(repr, missing))}")
        from_call = data.get("from_call", 0)
        if isinstance(from_call, bool) or not isinstance(from_call, int) or from_call < 0:
            raise ValueError(f"probe 'from_call' must be a call index >= 0, not {from_call!r}")
        return cls(
            question=str(data["question"]),
            expected=str(data["expected"]),
            kind=str(data.get("kind", "recall")),
            from_call=from_call,
        )


USAGE_INPUT_KEYS: tuple[str, ...] = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
"""The input kinds of a normalised per-call usage record (`Message.metadata["usage"]`): uncached
input, input read from the provider's prompt cache, input written to it. Output is `output_tokens`."""


def recorded_input_tokens(message: Message) -> int | None:
    """The input tokens the provider billed for the call that produced `message` (an assistant
    message): the sum of the three input kinds of its recorded usage, or None when the recording
    has no usage for it."""
    usage = message.metadata.get("usage") if message.metadata else None
    if not isinstance(usage, Mapping):
        return None
    counts = [usage[key] for key in USAGE_INPUT_KEYS if isinstance(usage.get(key), int)]
    return sum(counts) if counts else None


@dataclass(frozen=True)
class RecordedCompaction:
    """A compaction the recorded agent made itself: an annotation of the session, never a message.

    `message_index` is the index in `Session.messages` of the first message after the compaction
    (`len(messages)` when nothing followed it); `call_index` is the 0-based recorded LLM call
    (assistant message) it precedes, i.e. the number of assistant messages before `message_index`.
    `trigger` is `"manual"`, `"auto"` or None when the recording does not say; `tokens_before`
    the context size the agent reported when it compacted (None when not recorded); `summary` the
    text the agent continued from (empty when none was recorded). The session keeps the full
    original history: the summary is not among its messages.
    """

    call_index: int
    message_index: int
    trigger: str | None = None
    tokens_before: int | None = None
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_index": self.call_index,
            "message_index": self.message_index,
            "trigger": self.trigger,
            "tokens_before": self.tokens_before,
            "summary": self.summary,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], messages: Sequence[Message] = ()) -> RecordedCompaction:
        """Read a `metadata["recorded_compactions"]` entry; a missing `call_index` is computed from
        `message_index` over `messages` (`pre_tokens` is read as `tokens_before`)."""
        message_index = int(data.get("message_index") or 0)
        call_index = data.get("call_index")
        if not isinstance(call_index, int):
            call_index = sum(1 for m in messages[:message_index] if m.role == "assistant")
        tokens = data.get("tokens_before", data.get("pre_tokens"))
        trigger = data.get("trigger")
        return cls(
            call_index=call_index,
            message_index=message_index,
            trigger=str(trigger) if trigger is not None else None,
            tokens_before=int(tokens) if isinstance(tokens, (int, float)) and not isinstance(tokens, bool) else None,
            summary=str(data.get("summary") or ""),
        )


#: `json.dumps(records, default=str)` without the circularity check (records hold no cycles): the same
#: text, about a tenth faster, and the content id is a good share of an import's time.
_HASH_ENCODER = json.JSONEncoder(default=str, check_circular=False)


def content_hash(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()) -> str:
    """A stable id from the conversation's content (messages with importance/origin, tool schemas).

    Keys keep the order the model builds them in, so the same content always hashes the same.
    """
    records = []
    for message in messages:
        record = message.to_openai()
        record["importance"] = message.importance
        record["origin"] = message.origin
        records.append(record)
    digest = hashlib.sha256(_HASH_ENCODER.encode(records).encode())
    if tools:
        digest.update(json.dumps(list(tools), sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Session:
    """A recorded conversation.

    `id` is a hash of the content unless given. `format` is the source format it was imported
    from, `tools` the tool schemas offered to the model (OpenAI shape), `probes` the questions a
    replay's final context should still answer, `metadata` anything else the recording said
    (model, usage totals...). The agent's own compactions are annotations
    (`metadata["recorded_compactions"]`, read through `recorded_compactions`), never messages:
    `messages` is the full original history. Per-call provider usage sits in each assistant
    message's `metadata["usage"]` (see `recorded_input_tokens`).
    """

    messages: tuple[Message, ...]
    id: str = ""
    dataset: str = "default"
    format: str = "openai"
    tools: tuple[Mapping[str, Any], ...] = ()
    probes: tuple[Probe, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.messages, tuple) or not all(isinstance(m, Message) for m in self.messages):
            object.__setattr__(self, "messages", tuple(as_messages(self.messages)))
        if not all(isinstance(p, Probe) for p in self.probes):
            object.__setattr__(
                self, "probes", tuple(p if isinstance(p, Probe) else Probe.from_dict(p) for p in self.probes)
            )
        if not isinstance(self.tools, tuple):
            object.__setattr__(self, "tools", tuple(self.tools))
        if not self.id:
            object.__setattr__(self, "id", content_hash(self.messages, self.tools))

    @classmethod
    def from_messages(
        cls,
        messages: Iterable[MessageLike],
        id: str | None = None,
        probes: Iterable[Probe | Mapping[str, Any]] | None = None,
        **fields: Any,
    ) -> Session:
        parsed = tuple(p if isinstance(p, Probe) else Probe.from_dict(p) for p in probes or ())
        return cls(messages=tuple(as_messages(messages)), id=id or "", probes=parsed, **fields)

    @property
    def calls(self) -> int:
        """Recorded LLM calls: one per assistant message."""
        return sum(1 for m in self.messages if m.role == "assistant")

    def __repr__(self) -> str:
        """One short line (a session may hold megabytes of text): id, format, dataset, sizes."""
        return (
            f"Session(id={self.id!r}, format={self.format!r}, dataset={self.dataset!r}, "
            f"messages={len(self.messages)}, calls={self.calls}, probes={len(self.probes)})"
        )

    @property
    def steps(self) -> list[Step]:
        return group_steps(self.messages)

    @property
    def recorded_compactions(self) -> tuple[RecordedCompaction, ...]:
        """The compactions the recorded agent made itself, in order (from `metadata["recorded_compactions"]`)."""
        entries = self.metadata.get("recorded_compactions") if self.metadata else None
        if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)):
            return ()
        return tuple(
            e if isinstance(e, RecordedCompaction) else RecordedCompaction.from_dict(e, self.messages)
            for e in entries
            if isinstance(e, (Mapping, RecordedCompaction))
        )

    def with_dataset(self, dataset: str) -> Session:
        return replace(self, dataset=dataset)

    def to_openai(self) -> list[dict[str, Any]]:
        return [m.to_openai() for m in self.messages]
