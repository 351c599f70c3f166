"""A workbench config live in an Inspect AI agent: `react(compaction=workbench.inspect.compaction(...))`.

`compaction(config)` returns an Inspect `CompactionStrategy` that compacts the agent's messages
with the config's strategy, as a replay would (the same kind, tokenizer, window, failure policy and
invariant checks), so a configuration picked from replays can be tried where only a live run can
judge it: does the agent still solve the task. Its log holds one `compaction` event per compaction,
which the `inspect` importer reads back as recorded compactions.

When: Inspect decides itself when to compact (its context's tokens above the strategy's threshold),
so the config's trigger is turned into that threshold (`live_threshold`): `inspect_threshold` as it
is; `utilization` as its ratio of the window less the reply's room; `token_threshold`, `guard` and
`pressure` (with `tokens`) as their token counts; `any` / `all` as the lowest / highest of theirs.
Triggers that count something else (calls, steps) cannot gate a live run and are refused. A
fraction is a share of the live model's window, as in Inspect. Inspect also compacts when the
model stops on its context length, whatever the trigger.

Summarizer: the config's own model (through the workbench gateway) when the config names one,
else the agent's model through Inspect (`summarizer="inspect"` or `"config"` chooses).

`inspect_ai` is an optional dependency (`pip install 'compaction-workbench[inspect]'`): this module
imports it only when `compaction()` is called.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from workbench.compaction import Completion
from workbench.config import ReplayConfig, load_toml, parse_config
from workbench.errors import ConfigError
from workbench.presets import presets
from workbench.session import Message, ToolCall

#: What `pip install` needs for this module.
EXTRA = "compaction-workbench[inspect]"
#: Strategy kinds whose compactions Inspect would call edits (they rewrite messages in place).
EDIT_KINDS = frozenset({"inspect_edit", "clear_tool_uses", "observation_masking", "tool_result_truncation"})
#: A threshold that never fires (a trigger that is switched off).
NEVER = 2**62

Summarizing = Literal["inspect", "config"]


def require_inspect() -> None:
    """Import `inspect_ai`, or raise an ImportError that names the extra to install."""
    try:
        import inspect_ai  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"workbench.inspect needs Inspect AI, which is not installed: pip install '{EXTRA}'") from exc


def _raw(spec: ReplayConfig | Mapping[str, Any] | str | Path) -> Mapping[str, Any]:
    """The table the user wrote (to see whether it names a summarizer)."""
    if isinstance(spec, ReplayConfig):
        return spec.to_dict()
    if isinstance(spec, Mapping):
        return spec
    if isinstance(spec, str) and spec.strip() in presets():
        return {}
    return load_toml(spec)


def live_threshold(config: ReplayConfig) -> int | float:
    """The config's trigger as Inspect's threshold: tokens (an int) or a share of the window (a float <= 1)."""
    return _threshold_of(config.trigger, config)


def _threshold_of(spec: Mapping[str, Any], config: ReplayConfig) -> int | float:
    kind = spec.get("kind")
    if kind == "inspect_threshold":
        value = float(spec["threshold"])
        return value if value <= 1 else int(value)
    if kind == "utilization":
        return float(spec["ratio"]) * (config.context_limit - config.max_output) / config.context_limit
    if kind == "token_threshold":
        return int(spec["threshold"]) or NEVER
    if kind == "guard":
        return int(float(spec["warn_threshold"]) * int(spec["hard_limit"]))
    if kind == "pressure" and spec.get("tokens"):
        return int(spec["tokens"])
    if kind in ("any", "all"):
        inner = [_threshold_of(t, config) for t in spec["triggers"]]
        tokens = [t if isinstance(t, int) else int(t * config.context_limit) for t in inner]
        return min(tokens) if kind == "any" else max(tokens)
    raise ConfigError(
        f"trigger {kind!r} cannot decide when a live Inspect agent compacts: Inspect compacts when the "
        "context's tokens pass a threshold; use inspect_threshold, utilization, token_threshold, guard, "
        "pressure with tokens, or any / all of them"
    )


def compaction(config: ReplayConfig | Mapping[str, Any] | str | Path, *, summarizer: Summarizing | None = None) -> Any:
    """An Inspect `CompactionStrategy` applying `config` (a TOML path, inline TOML, a preset name or a
    dict): `react(compaction=workbench.inspect.compaction("goat-split-summary"))`.

    `summarizer`: "config" summarizes with the config's model through the workbench gateway,
    "inspect" with the agent's model through Inspect; by default the config's when it names one.
    """
    require_inspect()
    raw = _raw(config)
    parsed = parse_config(config)
    if summarizer is None:
        summarizer = "config" if "summarizer" in raw else "inspect"
    if summarizer not in ("inspect", "config"):
        raise ConfigError(f"summarizer must be 'inspect' or 'config', not {summarizer!r}")
    return _strategy_class()(parsed, summarizer)


# --------------------------------------------------------------------------------------------
# messages, both ways


def from_inspect(message: Any) -> Message:
    """A workbench `Message` for an Inspect `ChatMessage` (its id, source and summary mark in metadata)."""
    from inspect_ai.model import ContentText

    content: Any
    if isinstance(message.content, str):
        content = message.content
    else:
        content = tuple(
            {"type": "text", "text": part.text}
            if isinstance(part, ContentText)
            else {"type": _part_type(part), "text": _part_text(part), "inspect_part": index}
            for index, part in enumerate(message.content)
        )
    metadata: dict[str, Any] = {"inspect_id": message.id}
    if message.source is not None:
        metadata["source"] = message.source
    if message.metadata and "summary" in message.metadata:
        metadata["summary"] = message.metadata["summary"]
    calls = tuple(
        ToolCall(id=call.id, name=call.function, arguments=json.dumps(call.arguments, sort_keys=True))
        for call in (getattr(message, "tool_calls", None) or ())
    )
    return Message(
        role=message.role,
        content=content,
        tool_calls=calls,
        tool_call_id=getattr(message, "tool_call_id", None),
        name=getattr(message, "function", None) if message.role == "tool" else None,
        metadata=metadata,
    )


def _part_type(part: Any) -> str:
    kind = str(getattr(part, "type", "data"))
    return "reasoning" if kind == "reasoning" else kind


def _part_text(part: Any) -> str:
    if getattr(part, "type", None) == "reasoning":
        return str(part.summary or ("" if part.redacted else part.reasoning))
    return ""


def to_inspect(message: Message, originals: Mapping[str, Any]) -> Any:
    """The Inspect `ChatMessage` for a workbench `Message`: the original where the strategy kept it,
    a copy with a new id where it changed it, a new message where it wrote one."""
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentText,
    )
    from inspect_ai.tool import ToolCall as InspectToolCall
    from shortuuid import uuid

    original = originals.get(str(message.metadata.get("inspect_id")))
    parts: list[Any] = []
    for part in message.content if isinstance(message.content, tuple) else ():
        index = part.get("inspect_part")
        if original is not None and isinstance(index, int) and not isinstance(original.content, str):
            parts.append(original.content[index])
        else:
            parts.append(ContentText(text=str(part.get("text", ""))))
    content: Any = parts if isinstance(message.content, tuple) else (message.content or "")
    known = {call.id: call for call in (getattr(original, "tool_calls", None) or ())}
    calls = [
        known.get(call.id) or InspectToolCall(id=call.id, function=call.name, arguments=json.loads(call.arguments))
        for call in message.tool_calls
    ]
    if original is not None:
        update: dict[str, Any] = {"id": uuid(), "content": content}
        if message.role == "assistant":
            update["tool_calls"] = calls or None
        return original.model_copy(update=update)
    metadata = {"summary": True} if message.origin == "compacted_synthetic" and message.role == "user" else None
    if message.role == "system":
        return ChatMessageSystem(content=content)
    if message.role == "assistant":
        return ChatMessageAssistant(content=content, tool_calls=calls or None, metadata=metadata)
    if message.role == "tool":
        return ChatMessageTool(content=content, tool_call_id=message.tool_call_id, function=message.name)
    return ChatMessageUser(content=content, metadata=metadata)


# --------------------------------------------------------------------------------------------
# the summarizer through Inspect's model


class InspectModelSummarizer:
    """A workbench `Summarizer` asking an Inspect `Model`; called from a worker thread of the event loop
    that runs the agent (the strategy runs there), it sends the request back to that loop."""

    def __init__(self, model: Any):
        self._model = model
        self.model = f"inspect:{model}"

    def complete(
        self, messages: list[dict[str, Any]], *, purpose: str = "summary", max_tokens: int | None = None
    ) -> Completion:
        import anyio.from_thread
        from inspect_ai.model import GenerateConfig

        request = [to_inspect(Message.from_openai(m), {}) for m in messages]
        generate = functools.partial(self._model.generate, input=request, config=GenerateConfig(max_tokens=max_tokens))
        output = anyio.from_thread.run(generate)
        usage = output.usage
        reasons = {"max_tokens": "length", "model_length": "length", "content_filter": "content_filter"}
        return Completion(
            text=output.completion,
            model=self.model,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            cost_usd=None,
            finish_reason=reasons.get(output.stop_reason, "stop"),
        )


# --------------------------------------------------------------------------------------------
# the strategy


@functools.cache
def _strategy_class() -> type:
    """`WorkbenchCompaction`, defined on first use (its base class comes from `inspect_ai`)."""
    from inspect_ai.model import CompactionStrategy

    class WorkbenchCompaction(CompactionStrategy):
        """Inspect compacts with a workbench config's strategy, gated by its trigger's threshold."""

        def __init__(self, config: ReplayConfig, summarizer: Summarizing):
            strategy = config.build_strategy()
            kind = str(getattr(strategy, "kind", ""))
            if kind in EDIT_KINDS:
                type_: Literal["summary", "edit", "trim"] = "edit"
            elif getattr(strategy, "summarizes", True):
                type_ = "summary"
            else:
                type_ = "trim"
            super().__init__(type=type_, threshold=live_threshold(config), memory=False)
            self.config = config
            self.summarizer = summarizer

        @property
        def preserve_prefix(self) -> bool:
            """The config's strategy decides what to keep; Inspect puts back the system messages only."""
            return False

        def _repr_params_(self) -> dict[str, Any]:
            params: dict[str, Any] = super()._repr_params_()
            params.update(config=self.config.name, summarizer=self.summarizer)
            return params

        async def compact(self, model: Any, messages: list[Any], tools: list[Any]) -> tuple[list[Any], Any]:
            import anyio.to_thread

            return await anyio.to_thread.run_sync(self.compact_now, model, messages)

        def compact_now(self, model: Any, messages: Sequence[Any]) -> tuple[list[Any], Any]:
            """The strategy on the messages, in workbench terms (a worker thread: it may block)."""
            from workbench.llm.lazy import LazyModel
            from workbench.replay import compact

            config = self.config
            originals = {str(m.id): m for m in messages}
            before = [from_inspect(m) for m in messages]
            model_for_summaries: Any = (
                InspectModelSummarizer(model)
                if self.summarizer == "inspect"
                else LazyModel(config.summarizer, config.summarizer_options)
            )
            after = compact(
                before,
                config.build_strategy(),
                summarizer=model_for_summaries,
                tokenizer=config.tokenizer,
                context_limit=config.context_limit,
                max_output=config.max_output,
                on_failure=config.on_failure,
            )
            kept = {id(m): originals[str(m.metadata["inspect_id"])] for m in before}
            result = [kept.get(id(m)) or to_inspect(m, originals) for m in after]
            summary = next(
                (
                    chat
                    for chat, m in zip(result, after, strict=True)
                    if m.origin == "compacted_synthetic" and m.role == "user"
                ),
                None,
            )
            return result, summary

    return WorkbenchCompaction


__all__ = [
    "EXTRA",
    "InspectModelSummarizer",
    "compaction",
    "from_inspect",
    "live_threshold",
    "require_inspect",
    "to_inspect",
]
