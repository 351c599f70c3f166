"""SWE-agent trajectories (`*.traj`): a JSON object whose `history` is the model's message list.

- `history` entries `{role, content, agent, message_type, thought, action, tool_calls?,
  tool_call_ids?}` become messages; function-calling files pair `tool` observations to calls
  through `tool_call_ids`; older text-action files have no tool calls and their observations
  stay `user` messages (what the model saw);
- `is_demo` entries keep metadata `is_demo`; `agent`, `message_type` and `action` go to
  message metadata;
- `trajectory` steps recorded after the last step that `history` holds (SWE-agent does not
  always write the final `submit` step into `history`) are appended in the history's shape:
  the step's `response` as an assistant message and its `observation` as the tool result of
  a `bash` call `{"command": action}` (the step keeps no call; the action is the command the
  environment ran) or, in a file without tool calls, as a user message; both carry metadata
  `from_trajectory`;
- `info` (`exit_status`, `submission`, `model_stats`) and the model named in `replay_config`
  go to session metadata; `model_stats` tokens become `recorded_totals`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import FormatError
from ..session import Message, Session, ToolCall
from ._common import (
    TurnBuilder,
    as_dict,
    as_list,
    as_str,
    build_session,
    dumps_args,
    has_key,
    head_text,
    new_message,
    openai_content,
    read_json,
)

FORMAT = "swe-agent"
EXPECTED = "a SWE-agent trajectory: {history: [{role, content, ...}], trajectory, info}"


def detect(path: str, head: bytes | str) -> bool:
    """A JSON object with `history` plus `trajectory`/`message_type`/`replay_config` (or a
    `.traj` file holding a JSON object)."""
    text = head_text(head)
    if not text.startswith("{"):
        return False
    if path.endswith(".traj"):
        return True
    return has_key(text, "history") and has_key(text, "trajectory", "message_type", "replay_config")


def load(path: str) -> list[Session]:
    """The trajectory's history as one session."""
    data = read_json(path, EXPECTED)
    if not isinstance(data, dict) or not isinstance(data.get("history"), list):
        raise FormatError(path, "no 'history' list in the trajectory", expected=EXPECTED)
    builder = TurnBuilder()
    for index, entry in enumerate(data["history"]):
        _entry(path, builder, entry, f"history[{index}]")
    steps = [s for s in as_list(data.get("trajectory")) if isinstance(s, dict)]
    with_calls = any(isinstance(e, dict) and e.get("tool_calls") for e in data["history"])
    for index, step in _missing_steps(data["history"], steps):
        _step(builder, step, index, with_calls)
    messages = builder.messages()
    if not messages:
        raise FormatError(path, "the history is empty", expected=EXPECTED)
    info = as_dict(data.get("info"))
    stats = as_dict(info.get("model_stats"))
    totals = {
        name: stats[key]
        for key, name in (
            ("tokens_sent", "prompt_tokens"),
            ("tokens_received", "completion_tokens"),
            ("api_calls", "api_calls"),
        )
        if isinstance(stats.get(key), int)
    }
    meta: dict[str, Any] = {
        "model": _model(data.get("replay_config")),
        "instance_id": _instance_id(path, data),
        "exit_status": info.get("exit_status"),
        "submission": info.get("submission") if isinstance(info.get("submission"), str) else None,
        "recorded_totals": totals or None,
        "cost": stats.get("instance_cost") if isinstance(stats.get("instance_cost"), (int, float)) else None,
        "trajectory_steps": len(as_list(data.get("trajectory"))),
    }
    return [build_session(messages, FORMAT, metadata=meta)]


def _entry(path: str, builder: TurnBuilder, entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise FormatError(path, f"{where} is not an object", expected="{role, content}")
    role = entry.get("role")
    meta = {key: entry[key] for key in ("agent", "message_type") if isinstance(entry.get(key), str)}
    if entry.get("is_demo") in (True, "True", "true"):
        meta["is_demo"] = True
    content = openai_content(entry.get("content"))
    if role == "assistant":
        if isinstance(entry.get("action"), str):
            meta["action"] = entry["action"]
        calls = [_call(c) for c in as_list(entry.get("tool_calls")) if isinstance(c, dict)]
        if calls:
            turn = builder.assistant(metadata=meta)
            if isinstance(content, str):
                turn.texts.append(content)
            elif content:
                turn.parts.extend(content)
            for call in calls:
                builder.add_call(turn, call)
            return
        builder.add(new_message(path, where, None, role="assistant", content=content or "", metadata=meta))
    elif role == "tool":
        ids = [as_str(i) for i in as_list(entry.get("tool_call_ids"))] or [as_str(entry.get("tool_call_id"))]
        builder.result(ids[0] or None, content, metadata=meta)
    elif role in ("system", "user"):
        builder.add(new_message(path, where, None, role=role, content=content or "", metadata=meta))
    else:
        raise FormatError(path, f"{where} has role {role!r}", expected="role system, user, assistant or tool")


def _missing_steps(history: list[Any], steps: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The trajectory steps after the one matching the history's last (non-demo) assistant
    entry: matched by action and response, else by action alone; none when nothing matches
    (a step left out in the middle cannot be placed), all when the history holds no reply."""
    replies = [e for e in history if isinstance(e, dict) and e.get("role") == "assistant" and not e.get("is_demo")]
    if not replies:
        return list(enumerate(steps))
    last = replies[-1]
    action = as_str(last.get("action")).strip()
    texts = {as_str(last.get(k)).strip() for k in ("content", "thought")} - {""}
    for exact in (True, False):
        for index in range(len(steps) - 1, -1, -1):
            step = steps[index]
            if as_str(step.get("action")).strip() == action and (
                not exact or as_str(step.get("response")).strip() in texts
            ):
                return list(enumerate(steps))[index + 1 :]
    return []


def _step(builder: TurnBuilder, step: dict[str, Any], index: int, with_calls: bool) -> None:
    """One trajectory step as the history would have held it (see the module doc)."""
    action = as_str(step.get("action"))
    meta = {"message_type": "action", "action": action, "from_trajectory": True}
    response = as_str(step.get("response") or step.get("thought"))
    observation = as_str(step.get("observation"))
    if not with_calls:
        builder.add(Message(role="assistant", content=response, metadata=meta))
        builder.add(
            Message(role="user", content=observation, metadata={"message_type": "observation", "from_trajectory": True})
        )
        return
    turn = builder.assistant(text=response, metadata=meta)
    call = builder.add_call(
        turn, ToolCall(id=f"trajectory_step_{index}", name="bash", arguments=dumps_args({"command": action.strip()}))
    )
    builder.result(call.id, observation, metadata={"message_type": "observation", "from_trajectory": True})


def _call(raw: dict[str, Any]) -> ToolCall:
    function = as_dict(raw.get("function"))
    return ToolCall(
        id=as_str(raw.get("id")),
        name=as_str(function.get("name") or raw.get("name")),
        arguments=dumps_args(function.get("arguments", raw.get("arguments"))),
    )


def _model(replay_config: Any) -> str | None:
    config = replay_config
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except (ValueError, RecursionError):
            return None
    name = as_dict(as_dict(as_dict(config).get("agent")).get("model")).get("name")
    return name if isinstance(name, str) else None


def _instance_id(path: str, data: dict[str, Any]) -> str:
    env = data.get("environment")
    name = os.path.basename(path)
    return name[: -len(".traj")] if name.endswith(".traj") else (env if isinstance(env, str) else name)
