"""OpenHands trajectories: V0 event lists, eval and resolver output JSONL, and V1 (agent SDK) events.

Layouts (each shape OpenHands' own code writes):
- a JSON array of events (`event_to_dict` / `event_to_trajectory`, e.g. a trajectory export):
  one session;
- an `output.jsonl` of eval runs (`EvalOutput`: `{instance_id, instruction, instance, history,
  metrics, metadata, test_result}`) or of resolver runs (`ResolverOutput`: `{issue, issue_type,
  instruction, base_commit, git_patch, history, metrics, success, result_explanation, error}`):
  one session per line, streamed. `history` holds `event_to_dict` events, the older flat events
  of early resolver/OpenDevin runs (an action's or observation's fields inline, no `source`,
  `id` or `args`), or `[action, observation]` pairs (`compatibility_for_eval_history_pairs`);
- a JSONL of V1 events (one session for the file); a single eval/resolver object with `history`;
- the one-event-per-file conversation store (`events/<n>.json`, `events/event-<n>-<id>.json`):
  the folder's event files are one session, yielded when its first file (in event order) is
  read; its other files yield nothing (so a folder walk imports the conversation once).

V0 events (`action` / `observation`):
- `system` action → system message; `message` actions → user/assistant text;
- actions with `tool_call_metadata` → tool calls; actions sharing a `model_response.id` form
  one assistant message (text from the response, else the action's `thought`); arguments come
  from the recorded response, else from `args`; usage/finish_reason/model from the response
  (or `metrics.token_usages` by response id);
- observations pair to calls by `tool_call_id`, else by `cause`; observations of text actions
  (no function calling) become user messages; `recall`, `null`, state-change and similar
  bookkeeping events are skipped.
V1 events (`kind`): `SystemPromptEvent` → system message (+ tool schemas), `MessageEvent` →
its `llm_message`, `ActionEvent`s sharing `llm_response_id` → one assistant message with
several calls, `ObservationEvent` / `UserRejectObservation` / `AgentErrorEvent` → tool results,
state updates give `recorded_totals`.
Flat events: an action's text is its thought plus the command it ran (`<execute_bash>` /
`<execute_ipython>` blocks, as the text-action CodeAct agent wrote them), observations are user
messages; a flat `message` is the user's when it is the first one or answers an agent message
that waited for a response, else the agent's.
Condensations (V0 `condensation` actions / `agent_condensation` observations, V1 `Condensation` /
`CondensationSummaryEvent`) are recorded compactions (`Session.recorded_compactions`), never
messages; the trigger is `manual` when a user asked for it (a condensation request from the
user), else `auto`.
When the history has no user message before the agent starts, the instance's `instruction`
is inserted as the first user message (metadata `from_instruction`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

from ..errors import FormatError
from ..session import Message, Session, ToolCall
from ._common import (
    TurnBuilder,
    as_dict,
    as_list,
    as_str,
    build_session,
    call_usage,
    clean_usage,
    compaction_marker,
    content_text,
    dumps_args,
    finish_reason,
    first_record,
    frozen,
    has_key,
    has_value,
    hashable,
    head_text,
    image_part,
    iter_jsonl,
    json_layout,
    marker_fields,
    openai_content,
    read_json,
    text_part,
)

FORMAT = "openhands"
EXPECTED = (
    "OpenHands events (a list of action/observation events, V1 kind-tagged events, "
    "or eval/resolver lines with 'history')"
)
_SKIP_ACTIONS = ("recall", "change_agent_state", "null")
_FLAT_DROP = ("action", "observation", "action_risk", "is_confirmed", "security_risk", "confirmation_state")
_RUN_TAGS = {
    "run": ("execute_bash", "command"),
    "run_ipython": ("execute_ipython", "code"),
    "browse": ("execute_browse", "url"),
    "browse_interactive": ("execute_browse", "browser_actions"),
}
_SKIP_OBSERVATIONS = ("null", "agent_state_changed", "recall", "agent_condensation")
_V1_RESULTS = ("ObservationEvent", "UserRejectObservation", "AgentErrorEvent")
_V1_EVENTS = (
    "ActionEvent",
    "ObservationEvent",
    "MessageEvent",
    "SystemPromptEvent",
    "ConversationStateUpdateEvent",
    "AgentErrorEvent",
    "UserRejectObservation",
    "Condensation",
    "CondensationSummaryEvent",
    "CondensationRequest",
    "PauseEvent",
)


def detect(path: str, head: bytes | str) -> bool:
    """OpenHands events (V0 action/observation or V1 `kind` events) or eval lines with `history`."""
    text = head_text(head)
    if not text.startswith(("{", "[")):
        return False
    record = first_record(text)
    if record is None and text.startswith("{") and any(f'"{key}"' in text for key in _RECORD_KEYS):
        record = _whole_object(text)  # one pretty-printed event, e.g. a file of the event store
    if record is not None:
        if _is_event(record):
            return True
        history = record.get("history")
        if isinstance(history, list) and ("instance_id" in record or "instruction" in record or "issue" in record):
            return not history or any(_is_history_item(e) for e in history[:5])
        if text.startswith("[") and "role" in record:
            return False
    return (
        has_key(text, "tool_call_metadata", "llm_response_id")
        or has_value(text, "kind", *_V1_EVENTS)
        or (has_key(text, "observation") and has_key(text, "cause"))
    )


#: The keys `detect` looks for in a record: a head holding none of them is not parsed whole.
_RECORD_KEYS = ("kind", "action", "observation", "history")


def _is_event(record: dict[str, Any]) -> bool:
    kind = record.get("kind")
    if isinstance(kind, str) and (kind in _V1_EVENTS or kind.endswith("Event")):
        return True
    return ("action" in record or "observation" in record) and (
        "source" in record or "id" in record or "cause" in record or "args" in record
    )


def _whole_object(text: str) -> dict[str, Any] | None:
    """The head parsed as one JSON object (None when it is not one, or is cut off)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _is_history_item(item: Any) -> bool:
    """An event of an eval/resolver `history`: a serialized event, a flat event, or an
    `[action, observation]` pair."""
    if isinstance(item, list):
        return len(item) == 2 and all(isinstance(e, dict) and _is_history_item(e) for e in item)
    if not isinstance(item, dict):
        return False
    return _is_event(item) or isinstance(item.get("action"), str) or isinstance(item.get("observation"), str)


def load(path: str) -> list[Session]:
    """Every session in the file."""
    return list(iter_sessions(path))


def iter_sessions(path: str) -> Iterator[Session]:
    """Stream the sessions; eval JSONL files are read one instance per line."""
    if json_layout(path) == "jsonl":
        events: list[Any] = []
        for number, value in iter_jsonl(path, EXPECTED):
            if isinstance(value, dict) and isinstance(value.get("history"), list):
                if events:
                    raise FormatError(path, "an eval line follows event lines", line=number, expected=EXPECTED)
                yield _instance_session(path, value, number)
            elif isinstance(value, dict) and _is_event(value):
                events.append(value)
            else:
                raise FormatError(
                    path, "the line is neither an event nor an eval instance", line=number, expected=EXPECTED
                )
        if events:
            yield _events_session(path, events, {}, None, "the file")
        return
    value = read_json(path, EXPECTED)
    if isinstance(value, list):
        yield _events_session(path, value, {}, None, "the list")
    elif isinstance(value, dict) and isinstance(value.get("history"), list):
        yield _instance_session(path, value, None)
    elif isinstance(value, dict) and isinstance(value.get("events"), list):
        yield _events_session(path, value["events"], {}, None, "events")
    elif isinstance(value, dict) and (isinstance(value.get("kind"), str) or _is_event(value)):
        files = _event_files(path)
        if os.path.samefile(files[0], path):
            events = [value] + [read_json(f, EXPECTED) for f in files[1:]]
            yield _events_session(path, events, {"event_files": len(files)}, None, "the events folder")
    else:
        raise FormatError(path, "the JSON document is not an event list or an eval instance", expected=EXPECTED)


def _event_files(path: str) -> list[str]:
    """The one-event-per-file store OpenHands keeps of a conversation (`events/<n>.json` in V0,
    `events/event-<n>-<id>.json` in V1): every `*.json` beside `path`, in event order."""
    folder = os.path.dirname(os.path.abspath(path))

    def order(name: str) -> tuple[int, str]:
        number = re.search(r"\d+", name)
        return (int(number.group()) if number else -1, name)

    names = sorted((n for n in os.listdir(folder) if n.endswith(".json")), key=order)
    return [os.path.join(folder, n) for n in names] or [path]


def _instance_session(path: str, record: dict[str, Any], line: int | None) -> Session:
    metadata = as_dict(record.get("metadata"))
    llm = as_dict(metadata.get("llm_config")) or as_dict(metadata.get("llm"))
    metrics = as_dict(record.get("metrics"))
    issue = as_dict(record.get("issue"))
    meta: dict[str, Any] = {
        "instance_id": record.get("instance_id") or _issue_id(issue),
        "source_line": line,
        "model": llm.get("model") if isinstance(llm.get("model"), str) else None,
        "agent_class": metadata.get("agent_class"),
        "recorded_totals": clean_usage(metrics.get("accumulated_token_usage")),
        "cost": metrics.get("accumulated_cost") if isinstance(metrics.get("accumulated_cost"), (int, float)) else None,
        "error": record.get("error") if isinstance(record.get("error"), str) else None,
    }
    if issue:
        meta.update(
            {
                "openhands_kind": "resolver",
                "issue_title": issue.get("title"),
                "issue_type": record.get("issue_type"),
                "success": record.get("success") if isinstance(record.get("success"), bool) else None,
            }
        )
    usages = {
        hashable(u.get("response_id")): u
        for u in as_list(metrics.get("token_usages"))
        if isinstance(u, dict) and u.get("response_id")
    }
    instruction = record.get("instruction")
    return _events_session(
        path,
        record["history"],
        meta,
        line,
        "history",
        usages=usages,
        instruction=instruction if isinstance(instruction, str) else None,
    )


def _issue_id(issue: dict[str, Any]) -> str | None:
    """`owner/repo#number` of a resolver run's issue."""
    if not issue.get("repo") or issue.get("number") is None:
        return None
    owner = f"{issue['owner']}/" if issue.get("owner") else ""
    return f"{owner}{issue['repo']}#{issue['number']}"


def _events_session(
    path: str,
    events: list[Any],
    meta: dict[str, Any],
    line: int | None,
    where: str,
    *,
    usages: dict[str, Any] | None = None,
    instruction: str | None = None,
) -> Session:
    builder = TurnBuilder()
    state = _State(usages or {})
    events = _normalised(path, events, line, where)
    needs_instruction = instruction is not None and not _user_first(events)
    for event in events:
        if needs_instruction and not _is_system(event):
            builder.add(Message(role="user", content=instruction, metadata={"from_instruction": True}))
            needs_instruction = False
        if isinstance(event.get("kind"), str):
            _v1_event(builder, event, state)
        elif "action" in event:
            _v0_action(builder, event, state)
        else:
            _v0_observation(builder, event, state)
    if needs_instruction:
        builder.add(Message(role="user", content=instruction, metadata={"from_instruction": True}))
    messages = builder.messages()
    if not any(m.role in ("user", "assistant") for m in messages):
        raise FormatError(path, f"{where} holds no conversation events", line=line, expected=EXPECTED)
    meta = dict(meta)
    if state.totals and not meta.get("recorded_totals"):
        meta["recorded_totals"] = state.totals
    return build_session(messages, FORMAT, tools=state.tools, metadata=meta)


def _normalised(path: str, events: list[Any], line: int | None, where: str) -> list[dict[str, Any]]:
    """The events as serialized events: `[action, observation]` pairs unpacked, flat events
    converted; anything that is not an OpenHands event is a FormatError (never skipped)."""
    out: list[dict[str, Any]] = []
    flat = _FlatSources()
    for index, item in enumerate(events):
        for event in item if isinstance(item, list) and _is_history_item(item) else [item]:
            if not isinstance(event, dict):
                raise FormatError(
                    path, f"{where}[{index}] is not an object", line=line, expected="an OpenHands event object"
                )
            if isinstance(event.get("kind"), str) or _is_event(event) or "extras" in event:
                out.append(event)
            elif isinstance(event.get("action"), str) or isinstance(event.get("observation"), str):
                out.append(flat.convert(event))
            else:
                keys = ", ".join(sorted(map(str, event))[:6]) or "no keys"
                raise FormatError(
                    path,
                    f"{where}[{index}] is not an OpenHands event (keys: {keys})",
                    line=line,
                    expected="an event with 'action', 'observation' or 'kind'",
                )
    return out


class _FlatSources:
    """Converts flat events (fields inline, no `source`/`args`) to serialized V0 events."""

    def __init__(self) -> None:
        self.messages = 0
        self.agent_waits = False

    def convert(self, event: dict[str, Any]) -> dict[str, Any]:
        fields = {k: v for k, v in event.items() if k not in _FLAT_DROP}
        if isinstance(event.get("observation"), str):
            content = fields.pop("content", "")
            return {"observation": event["observation"], "source": "environment", "content": content, "extras": fields}
        action = event["action"]
        source = "agent"
        if action == "message":
            waits = bool(event.get("wait_for_response"))
            source = "user" if self.messages == 0 or (self.agent_waits and not waits) else "agent"
            self.messages += 1
            self.agent_waits = source == "agent" and waits
            if "images_urls" in fields and "image_urls" not in fields:
                fields["image_urls"] = fields.pop("images_urls")
        elif action in ("system", "recall"):
            source = "user" if action == "recall" else "agent"
        return {"action": action, "source": source, "args": fields, "message": _flat_text(action, fields)}


def _flat_text(action: str, args: dict[str, Any]) -> str:
    """What a text-action agent wrote for `action` (its thought is added separately)."""
    if action == "message":
        return as_str(args.get("content"))
    if action == "finish":
        return ""
    if action in _RUN_TAGS:
        tag, key = _RUN_TAGS[action]
        return f"<{tag}>\n{as_str(args.get(key))}\n</{tag}>"
    rest = {k: v for k, v in args.items() if k != "thought" and v not in (None, "", {}, [])}
    return f"{action} {dumps_args(rest)}" if rest else action


class _State:
    """Per-session bookkeeping: action id → call id, text actions, tools, the latest compaction."""

    def __init__(self, usages: dict[str, Any]) -> None:
        self.usages = usages
        self.calls: dict[Any, str] = {}
        self.text_actions: set[Any] = set()
        self.tools: list[dict[str, Any]] = []
        self.totals: dict[str, int] | None = None
        self.count = 0
        self.requested_by: str | None = None
        self.marker: dict[str, Any] | None = None
        self.marker_at = -1

    def condensation(
        self, builder: TurnBuilder, event: dict[str, Any], summary: str, *, forgotten: int | None, summary_event: bool
    ) -> None:
        """Record a condensation; a summary event right after its condensation completes it."""
        if (
            summary_event
            and self.marker is not None
            and self.marker_at == len(builder)
            and (not self.marker["summary"] or self.marker["summary"] == summary)
        ):
            self.marker["summary"] = summary
            return
        marker = compaction_marker(
            trigger="manual" if self.requested_by == "user" else "auto",
            summary=summary,
            timestamp=event.get("timestamp"),
            forgotten_events=forgotten,
        )
        builder.add(marker)
        self.marker = marker_fields(marker)
        self.marker_at = len(builder)
        self.requested_by = None


def _forgotten(values: dict[str, Any]) -> int | None:
    """How many events a condensation forgot (an id list, or an inclusive id range)."""
    ids = values.get("forgotten_event_ids")
    if isinstance(ids, list):
        return len(ids) or None
    start, end = values.get("forgotten_events_start_id"), values.get("forgotten_events_end_id")
    if isinstance(start, int) and isinstance(end, int) and end >= start:
        return end - start + 1
    return None


def _user_first(events: list[Any]) -> bool:
    """Whether a user message comes before the agent's first action or message."""
    for event in events:
        if not isinstance(event, dict) or _is_system(event):
            continue
        if event.get("kind") == "MessageEvent":
            return as_dict(event.get("llm_message")).get("role") == "user"
        if event.get("kind") in ("ActionEvent",) or event.get("source") == "agent":
            return False
        if event.get("action") == "message" and event.get("source") == "user":
            return True
    return False


def _is_system(event: dict[str, Any]) -> bool:
    return (
        event.get("kind") == "SystemPromptEvent"
        or event.get("action") == "system"
        or ("kind" in event and event.get("kind") == "ConversationStateUpdateEvent")
    )


# --------------------------------------------------------------------------- V0


def _v0_action(builder: TurnBuilder, event: dict[str, Any], state: _State) -> None:
    action = event.get("action")
    args = as_dict(event.get("args"))
    source = event.get("source")
    stamp = {"timestamp": event["timestamp"]} if event.get("timestamp") else {}
    if action == "system":
        builder.add(Message(role="system", content=as_str(args.get("content") or event.get("message")), metadata=stamp))
        tools = as_list(args.get("tools"))
        state.tools.extend(t for t in tools if isinstance(t, dict))
        return
    if action == "condensation":
        state.condensation(builder, event, as_str(args.get("summary")), forgotten=_forgotten(args), summary_event=False)
        return
    if action == "condensation_request":
        state.requested_by = as_str(source) or "agent"
        return
    tcm = as_dict(event.get("tool_call_metadata"))
    if tcm.get("tool_call_id"):
        _v0_call(builder, event, tcm, args, state)
        return
    if action == "message":
        text = as_str(args.get("content") or event.get("message"))
        images = [image_part(as_str(u)) for u in as_list(args.get("image_urls")) if u]
        content: Any = [text_part(text), *images] if images else text
        if source == "user":
            builder.add(Message(role="user", content=content, metadata=stamp))
        else:
            builder.add(Message(role="assistant", content=content, metadata=stamp))
        return
    if action in _SKIP_ACTIONS or source != "agent":
        return
    thought = as_str(args.get("thought"))
    summary = as_str(event.get("message"))
    text = "\n\n".join(t for t in (thought, summary) if t.strip())
    builder.add(Message(role="assistant", content=text, metadata={**stamp, "action": action}))
    state.text_actions.add(hashable(event.get("id")))


def _v0_call(
    builder: TurnBuilder, event: dict[str, Any], tcm: dict[str, Any], args: dict[str, Any], state: _State
) -> None:
    call_id = as_str(tcm.get("tool_call_id"))
    response = as_dict(tcm.get("model_response"))
    choice = as_dict(as_list(response.get("choices"))[0]) if as_list(response.get("choices")) else {}
    message = as_dict(choice.get("message"))
    arguments = next(
        (
            as_dict(c.get("function")).get("arguments")
            for c in as_list(message.get("tool_calls"))
            if isinstance(c, dict) and c.get("id") == call_id
        ),
        None,
    )
    if arguments is None:
        arguments = {k: v for k, v in args.items() if k != "thought"}
    response_id = response.get("id") or f"call:{call_id}"
    meta: dict[str, Any] = {"timestamp": event.get("timestamp")}
    usage = call_usage(response.get("usage")) or call_usage(state.usages.get(hashable(response_id)))
    if usage:
        meta["usage"] = usage
    reason = finish_reason(choice.get("finish_reason"))
    if reason:
        meta["finish_reason"] = reason
    if isinstance(response.get("model"), str):
        meta["model"] = response["model"]
    fresh = not builder.knows(("resp", hashable(response_id)))
    turn = builder.assistant(key=("resp", hashable(response_id)), metadata=meta)
    if fresh:
        text = content_text(message.get("content")) or as_str(args.get("thought"))
        if text:
            turn.texts.append(text)
    call = builder.add_call(
        turn, ToolCall(id=call_id, name=as_str(tcm.get("function_name")), arguments=dumps_args(arguments))
    )
    state.calls[hashable(event.get("id"))] = call.id


def _v0_observation(builder: TurnBuilder, event: dict[str, Any], state: _State) -> None:
    observation = event.get("observation")
    if observation == "agent_condensation":
        summary = as_str(event.get("content")) or as_str(event.get("message"))
        state.condensation(builder, event, summary, forgotten=None, summary_event=True)
        return
    if observation in _SKIP_OBSERVATIONS:
        return
    tcm = as_dict(event.get("tool_call_metadata"))
    call_id = as_str(tcm.get("tool_call_id")) or state.calls.get(hashable(event.get("cause")))
    content = event.get("content")
    text = content if isinstance(content, str) and content else as_str(event.get("message"))
    meta: dict[str, Any] = {"observation": observation}
    if event.get("timestamp"):
        meta["timestamp"] = event["timestamp"]
    if call_id:
        builder.result(call_id, text, name=as_str(tcm.get("function_name")) or None, metadata=meta)
    elif text.strip():
        builder.add(Message(role="user", content=text, metadata=meta))


# --------------------------------------------------------------------------- V1


def _v1_event(builder: TurnBuilder, event: dict[str, Any], state: _State) -> None:
    kind = event.get("kind")
    stamp = {"timestamp": event["timestamp"]} if event.get("timestamp") else {}
    if kind == "SystemPromptEvent":
        prompt = event.get("system_prompt")
        builder.add(Message(role="system", content=content_text(prompt), metadata=stamp))
        state.tools.extend(t for t in as_list(event.get("tools")) if isinstance(t, dict))
    elif kind == "MessageEvent":
        _v1_message(builder, event, stamp)
    elif kind == "ActionEvent":
        _v1_action(builder, event, state, stamp)
    elif kind in _V1_RESULTS:
        call_id = as_str(event.get("tool_call_id")) or state.calls.get(hashable(event.get("action_id")))
        text, is_error = _v1_observation_text(event)
        meta = {**stamp, "is_error": True} if is_error else stamp
        builder.result(call_id or None, text, name=as_str(event.get("tool_name")) or None, metadata=meta)
    elif kind in ("Condensation", "CondensationSummaryEvent"):
        state.condensation(
            builder,
            event,
            as_str(event.get("summary")),
            forgotten=_forgotten(event),
            summary_event=kind == "CondensationSummaryEvent",
        )
    elif kind == "CondensationRequest":
        state.requested_by = as_str(event.get("source")) or "agent"
    elif kind == "ConversationStateUpdateEvent" and event.get("key") == "stats":
        metrics = as_dict(as_dict(event.get("value")).get("usage_to_metrics"))
        totals = clean_usage(as_dict(as_dict(metrics.get("default")).get("accumulated_token_usage")))
        if totals:
            state.totals = totals


def _v1_message(builder: TurnBuilder, event: dict[str, Any], stamp: dict[str, Any]) -> None:
    message = as_dict(event.get("llm_message"))
    role = message.get("role")
    content = openai_content(message.get("content"))
    if isinstance(content, list) and all(p.get("type") == "text" for p in content):
        content = "\n".join(as_str(p.get("text")) for p in content)
    if role == "assistant":
        key = ("resp", hashable(event["llm_response_id"])) if event.get("llm_response_id") else None
        turn = builder.assistant(key=key, metadata=stamp)
        if isinstance(content, str):
            turn.texts.append(content)
        elif content:
            turn.parts.extend(content)
    elif role in ("user", "system"):
        builder.add(Message(role=role, content=frozen(content) if content is not None else "", metadata=stamp))
    elif role == "tool":
        builder.result(as_str(message.get("tool_call_id")) or None, content, name=as_str(message.get("name")) or None)


def _v1_action(builder: TurnBuilder, event: dict[str, Any], state: _State, stamp: dict[str, Any]) -> None:
    tool_call = as_dict(event.get("tool_call"))
    call_id = as_str(event.get("tool_call_id") or tool_call.get("id"))
    name = as_str(event.get("tool_name") or tool_call.get("name"))
    arguments = tool_call.get("arguments")
    if arguments is None:
        arguments = {k: v for k, v in as_dict(event.get("action")).items() if k != "kind"}
    response_id = event.get("llm_response_id") or f"event:{event.get('id')}"
    turn = builder.assistant(key=("resp", hashable(response_id)), metadata=stamp)
    thought = content_text(event.get("thought"))
    if thought.strip() and thought not in turn.texts:
        turn.texts.append(thought)
    reasoning = event.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning.strip() and reasoning != turn.metadata.get("thinking"):
        turn.metadata["thinking"] = reasoning
    call = builder.add_call(turn, ToolCall(id=call_id, name=name, arguments=dumps_args(arguments)))
    state.calls[hashable(event.get("id"))] = call.id


def _v1_observation_text(event: dict[str, Any]) -> tuple[str, bool]:
    """The text an observation event shows the model, and whether it reports an error."""
    if event.get("kind") == "AgentErrorEvent":
        return as_str(event.get("error")), True
    if event.get("kind") == "UserRejectObservation":
        return as_str(event.get("rejection_reason") or "The user rejected this action."), True
    observation = event.get("observation")
    if not isinstance(observation, dict):
        return as_str(observation), False
    error = observation.get("error")
    is_error = bool(error) or bool(observation.get("is_error"))
    if isinstance(observation.get("content"), (list, str)) and observation.get("content"):
        return content_text(observation["content"]), is_error
    for key in ("output", "message", "text"):
        if isinstance(observation.get(key), str) and observation[key]:
            return observation[key], is_error
    if isinstance(error, str) and error:
        return error, True
    return "", is_error
