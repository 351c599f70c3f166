"""Which recorded messages are observations: the environment's answer to an agent's action.

A tool result is one by its role. Text-action agents have no tool role: the agent writes its
command in the assistant message and is shown the output as the next `user` turn. Each format
says in its own way which user turns those are; `mark_observations` applies the format's rule,
at import (`build_session`) and again on sessions stored before observations were recorded
(the store re-derives them), so both always agree.

- mini-swe-agent: every user turn right after the agent's action (or after another observation);
  the task comes before the first action; format-error retries are the environment's answer too.
- SWE-agent: user entries right after an action whose `message_type`, when the file has one, is
  `observation` (SWE-agent also labels the task prompt `observation`: it comes before any action).
- OpenHands (V0, the CodeAct text actions): user turns made from an observation event (their
  metadata names the observation type).
- aider: the edit-format errors aider sends back to the model (`aider_reflection`); aider's
  terminal output is not sent to the model, so it is no message at all.

Other formats (Claude Code, Codex, OpenAI and Anthropic message lists) return results as tool
messages; a user message there is the user's (or marked `observation: true` by the caller).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..session import Message

#: A format's rule: whether user message `message` is an observation, given the message before it.
Rule = Callable[[Message, Message | None], bool]


def _after_action(message: Message, previous: Message | None) -> bool:
    return previous is not None and (previous.role == "assistant" or previous.is_observation)


def _swe_agent(message: Message, previous: Message | None) -> bool:
    return message.metadata.get("message_type") in (None, "observation") and _after_action(message, previous)


def _openhands(message: Message, previous: Message | None) -> bool:
    return isinstance(message.metadata.get("observation"), str)


def _aider(message: Message, previous: Message | None) -> bool:
    return bool(message.metadata.get("aider_reflection"))


RULES: dict[str, Rule] = {
    "mini-swe-agent": _after_action,
    "swe-agent": _swe_agent,
    "openhands": _openhands,
    "aider": _aider,
}

#: The formats whose user turns may be observations (the others' observations are tool messages).
TEXT_ACTION_FORMATS: frozenset[str] = frozenset(RULES)


def mark_observations(fmt: str, messages: Sequence[Message]) -> list[Message]:
    """`messages` with the user turns that format `fmt` shows as the environment's answer marked
    `observation` (and any other user turn unmarked); the messages themselves when nothing changes."""
    rule = RULES.get(fmt)
    out = list(messages)
    if rule is None:
        return out
    previous: Message | None = None
    for index, message in enumerate(out):
        if message.role == "user":
            wanted = rule(message, previous)
            if wanted != message.observation:
                out[index] = message = message.replace(observation=wanted)
        previous = message
    return out


__all__ = ["RULES", "TEXT_ACTION_FORMATS", "mark_observations"]
