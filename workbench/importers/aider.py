"""aider chat logs (`.aider.chat.history.md`), one session per `# aider chat started at` header.

- consecutive `#### ` lines form one user message (a blank line ends it);
- unprefixed text is assistant text; a block of `> ` lines ends it, so each reply that aider
  logged (each model call, one `Tokens:` report each) becomes its own assistant message;
- `> ` blocks are aider's own terminal output (edits applied, shell output, prompts): no
  structured tool calls exist, so they are not messages. They are kept in the preceding
  message's metadata `aider_output` (before any message: session metadata `aider_preamble`);
  a `Tokens: … sent, … cache write, … cache hit, … received` report becomes that reply's
  `usage` (normalised; `sent` is the whole prompt; rounded as aider printed them) and `Cost:` its `cost`;
  `Main model:` / `Model:` lines give the session's model.
aider writes two trailing spaces on every `#### ` and `> ` line; when a file has them, lines
without them (e.g. `> quoted` text inside a reply) stay assistant text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError
from ..session import Message, Session
from ._common import build_session, call_usage, head_text, read_text

FORMAT = "aider"
EXPECTED = "an aider chat log with '# aider chat started at' headers and '#### ' user lines"
_START = re.compile(r"^# aider chat started at\s*(.*?)\s*$")
_COUNT = re.compile(r"([\d.,]+)\s*([kKmM]?)\s+(sent|received|cache write|cache hit)")
_COST = re.compile(r"Cost:\s*\$([\d.,]+)\s+message")
_MODEL = re.compile(r"^(?:Main model|Model):\s*(\S+)")
_VERSION = re.compile(r"^Aider v(\S+)")
_USAGE_KEYS = {"sent": "prompt_tokens", "received": "completion_tokens", "cache write": "cache_write_tokens",
               "cache hit": "cache_read_tokens"}


def detect(path: str, head: bytes | str) -> bool:
    """The aider file name, or a text head containing an aider session header."""
    if path.replace("\\", "/").endswith(".aider.chat.history.md"):
        return True
    text = head_text(head)
    return not text.startswith(("{", "[")) and re.search(r"(?m)^# aider chat started at", text) is not None


@dataclass
class _Chat:
    started_at: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    preamble: list[str] = field(default_factory=list)
    model: str | None = None
    version: str | None = None


def load(path: str) -> list[Session]:
    """Every non-empty aider session in the log."""
    text = read_text(path)
    lines = text.splitlines()
    if text.lstrip("\ufeff \t\r\n").startswith(("{", "[")) or not any(
            _START.match(line) or line.startswith("#### ") for line in lines):
        raise FormatError(path, "no '# aider chat started at' header and no '#### ' user line", line=1,
                          expected=EXPECTED)
    strict = any(line.endswith("  ") and line.startswith(("#### ", "> ")) for line in lines)
    chats: list[_Chat] = []
    chat = _Chat(started_at=None)
    mode: str | None = None
    block: list[str] = []
    for line in lines:
        start = _START.match(line)
        if start:
            _flush(chat, mode, block)
            chats.append(chat)
            chat, mode, block = _Chat(started_at=start.group(1) or None), None, []
            continue
        if not line.strip() and mode != "assistant":
            _flush(chat, mode, block)
            mode, block = None, []
            continue
        kind = _classify(line, strict, mode)
        if kind == "text":
            kind = "assistant"
        if kind != mode:
            _flush(chat, mode, block)
            mode, block = kind, []
        block.append(_strip(line, kind))
    _flush(chat, mode, block)
    chats.append(chat)
    sessions = [_session(c) for c in chats if c.messages]
    if not sessions:
        raise FormatError(path, "no chat messages in the aider log", expected=EXPECTED)
    return sessions


def _classify(line: str, strict: bool, mode: str | None) -> str:
    """`user`, `output` or `text` for one line; in a strict file a prefixed line without
    aider's two trailing spaces only continues a block of its own kind."""
    bare = line.rstrip()
    if line.startswith("#### ") or bare == "####":
        return "user" if not strict or line.endswith("  ") or bare == "####" or mode == "user" else "text"
    if line.startswith("> ") or bare == ">":
        return "output" if not strict or line.endswith("  ") or bare == ">" or mode == "output" else "text"
    return "text"


def _strip(line: str, kind: str | None) -> str:
    if kind == "user":
        return line[5:].rstrip() if len(line) > 4 else ""
    if kind == "output":
        return line[2:].rstrip() if len(line) > 1 else ""
    return line


def _flush(chat: _Chat, mode: str | None, block: list[str]) -> None:
    if not block or mode is None:
        return
    if mode == "user":
        chat.messages.append({"role": "user", "content": "\n".join(block), "metadata": {}})
    elif mode == "assistant":
        text = "\n".join(block).strip("\n")
        if text.strip():
            chat.messages.append({"role": "assistant", "content": text, "metadata": {}})
    else:
        _output(chat, block)


def _output(chat: _Chat, block: list[str]) -> None:
    """Attach an output block to the preceding message (usage to the reply it reports on)."""
    target = chat.messages[-1] if chat.messages else None
    for line in block:
        model = _MODEL.match(line)
        if model and chat.model is None:
            chat.model = model.group(1)
        version = _VERSION.match(line)
        if version and chat.version is None:
            chat.version = version.group(1)
        if line.startswith("Tokens:") and target is not None and target["role"] == "assistant":
            counts = {_USAGE_KEYS[unit]: _number(value, scale) for value, scale, unit in _COUNT.findall(line)}
            usage = call_usage(counts)
            if usage:
                target["metadata"]["usage"] = usage
            cost = _COST.search(line)
            if cost:
                target["metadata"]["cost"] = float(cost.group(1).replace(",", ""))
    text = "\n".join(block).strip("\n")
    if not text.strip():
        return
    if target is None:
        chat.preamble.append(text)
    else:
        previous = target["metadata"].get("aider_output")
        target["metadata"]["aider_output"] = f"{previous}\n{text}" if previous else text


def _number(value: str, scale: str) -> int:
    try:
        number = float(value.replace(",", ""))
    except ValueError:
        return 0
    return int(round(number * {"k": 1e3, "m": 1e6}.get(scale.lower(), 1)))


def _session(chat: _Chat) -> Session:
    messages = [Message(role=m["role"], content=m["content"], metadata=m["metadata"]) for m in chat.messages]
    meta = {"started_at": chat.started_at, "model": chat.model, "aider_version": chat.version,
            "aider_preamble": "\n".join(chat.preamble) or None}
    return build_session(messages, FORMAT, metadata=meta)
