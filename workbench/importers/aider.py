"""aider chat logs (`.aider.chat.history.md`), one session per `# aider chat started at` header.

- consecutive `#### ` lines form one user message (a blank line ends it); what aider handled
  itself is not sent to the model, so it is not a message: a command (`/add …`, `!cmd`) goes
  to the preceding message's metadata `aider_commands` (before any message: the session's),
  a logged confirmation answer (`… (Y)es/(N)o … [Yes]: all`) to its `aider_output`. `/ask`,
  `/code`, `/architect` and `/context` followed by a prompt send that prompt: a user message
  with metadata `aider_command`;
- unprefixed text is assistant text; a block of `> ` lines ends it, so each reply that aider
  logged (each model call, one `Tokens:` report each) becomes its own assistant message; its
  `<thinking-content-…>` reasoning goes to metadata `thinking`;
- `> ` blocks are aider's own terminal output (edits applied, shell output, prompts): no
  structured tool calls exist, so they are not messages. They are kept in the preceding
  message's metadata `aider_output` (before any message: session metadata `aider_preamble`);
  a `Tokens: … sent, … cache write, … cache hit, … received` report becomes that reply's
  `usage` (normalised; `sent` is the whole prompt; rounded as aider printed them) and `Cost:` its `cost`;
  `Main model:` / `Model:` lines give the session's model. The output entry right after
  `The LLM did not conform to the edit format.` (and its help URL) is the error aider sends
  back to the model: a user message with metadata `aider_reflection: "edit_format_error"`.
aider writes two trailing spaces on every `#### ` and `> ` line; when a file has them, lines
without them (e.g. `> quoted` text inside a reply) stay assistant text. In such a file a
multi-line output carries `> ` on its first line only and the two spaces on its last only:
the unprefixed lines (blank ones included) up to that last line belong to the output.
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
_CONFIRM = re.compile(r"\(Y\)es/\(N\)o.*\[[^\]]*\]:\s*\S*$")
_THINKING = re.compile(r"<(thinking-content-[0-9a-f]+)>(.*?)(?:</\1>|\Z)", re.DOTALL)
_EDIT_ERROR = "The LLM did not conform to the edit format."
_SENDING_COMMANDS = ("/ask", "/code", "/architect", "/context")
_USAGE_KEYS = {
    "sent": "prompt_tokens",
    "received": "completion_tokens",
    "cache write": "cache_write_tokens",
    "cache hit": "cache_read_tokens",
}


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
    commands: list[str] = field(default_factory=list)
    model: str | None = None
    version: str | None = None


def load(path: str) -> list[Session]:
    """Every non-empty aider session in the log."""
    text = read_text(path)
    lines = text.splitlines()
    if text.lstrip("\ufeff \t\r\n").startswith(("{", "[")) or not any(
        _START.match(line) or line.startswith("#### ") for line in lines
    ):
        raise FormatError(
            path, "no '# aider chat started at' header and no '#### ' user line", line=1, expected=EXPECTED
        )
    reader = _Reader(strict=any(line.endswith("  ") and line.startswith(("#### ", "> ")) for line in lines))
    for line in lines:
        reader.feed(line)
    sessions = [_session(c) for c in reader.finish() if c.messages]
    if not sessions:
        raise FormatError(path, "no chat messages in the aider log", expected=EXPECTED)
    return sessions


@dataclass
class _Reader:
    """Groups the lines into blocks (a prompt, a reply, aider's output) and adds them to chats.

    An output block is a list of entries, one per line aider logged (a multi-line one joined).
    """

    strict: bool
    chats: list[_Chat] = field(default_factory=list)
    chat: _Chat = field(default_factory=lambda: _Chat(started_at=None))
    mode: str | None = None
    block: list[str] = field(default_factory=list)
    open_entry: bool = False

    def feed(self, line: str) -> None:
        start = _START.match(line)
        if start:
            self._flush()
            self.chats.append(self.chat)
            self.chat = _Chat(started_at=start.group(1) or None)
            return
        if self.mode == "output" and self.strict and self._continues(line):
            self.block[-1] = f"{self.block[-1]}\n{line.rstrip()}"
            self.open_entry = not line.endswith("  ")
            return
        if not line.strip() and self.mode != "assistant":
            self._flush()
            return
        kind = _classify(line, self.strict, self.mode)
        if kind != self.mode:
            self._flush()
            self.mode = kind
        self.block.append(_strip(line, kind))
        self.open_entry = kind == "output" and self.strict and not line.endswith("  ")

    def finish(self) -> list[_Chat]:
        self._flush()
        self.chats.append(self.chat)
        return self.chats

    def _continues(self, line: str) -> bool:
        """Whether `line` continues the output entry above it. Below an output line aider writes
        a `> ` line or a blank line, so an unprefixed line there continues it (its first line
        was padded with spaces); an entry not yet ended by the two spaces runs on, blank lines
        included, to the line that has them (a prefixed one starts a new entry)."""
        prefixed = line.startswith(("> ", "#### ")) or line.rstrip() in (">", "####")
        if self.open_entry:
            return not (prefixed and line.endswith("  "))
        return bool(line.strip()) and not prefixed

    def _flush(self) -> None:
        if self.block and self.mode == "user":
            _user(self.chat, self.block)
        elif self.block and self.mode == "assistant":
            _assistant(self.chat, self.block)
        elif self.block and self.mode == "output":
            _output(self.chat, self.block)
        self.mode, self.block, self.open_entry = None, [], False


def _classify(line: str, strict: bool, mode: str | None) -> str:
    """`user`, `output` or `assistant` for one line; in a strict file a prefixed line without
    aider's two trailing spaces only continues a block of its own kind."""
    bare = line.rstrip()
    if line.startswith("#### ") or bare == "####":
        if not strict or line.endswith("  ") or bare == "####" or mode == "user":
            return "user"
    elif line.startswith("> ") or bare == ">":
        if not strict or line.endswith("  ") or bare == ">" or mode == "output":
            return "output"
    return "assistant"


def _strip(line: str, kind: str | None) -> str:
    if kind == "user":
        return line[5:].rstrip() if len(line) > 4 else ""
    if kind == "output":
        return line[2:].rstrip() if len(line) > 1 else ""
    return line


def _user(chat: _Chat, lines: list[str]) -> None:
    """A prompt as a user message, unless aider handled it without the model (see the module doc)."""
    text = "\n".join(lines)
    if len(lines) == 1 and _CONFIRM.search(text):
        _keep_output(chat, text)
        return
    if not text.startswith(("/", "!")):
        chat.messages.append({"role": "user", "content": text, "metadata": {}})
        return
    command, *prompt = text.split(None, 1)
    if command in _SENDING_COMMANDS and prompt:
        chat.messages.append({"role": "user", "content": prompt[0], "metadata": {"aider_command": command}})
    elif chat.messages:
        chat.messages[-1]["metadata"].setdefault("aider_commands", []).append(text)
    else:
        chat.commands.append(text)


def _assistant(chat: _Chat, lines: list[str]) -> None:
    """A reply as an assistant message (its reasoning in metadata `thinking`); a reply cut
    short inside its reasoning is still a call, with empty content."""
    text = "\n".join(lines)
    thinking = "\n\n".join(t for t in (m.group(2).strip() for m in _THINKING.finditer(text)) if t)
    content = _THINKING.sub("", text).strip("\n")
    if content.strip() or thinking:
        meta = {"thinking": thinking} if thinking else {}
        chat.messages.append({"role": "assistant", "content": content if content.strip() else "", "metadata": meta})


def _output(chat: _Chat, entries: list[str]) -> None:
    """An output block: status lines read, the edit-format error made the user message aider
    sends, the rest kept with the message before it."""
    kept: list[str] = []
    error_follows = False
    for entry in entries:
        if error_follows and entry.strip() and not entry.startswith(("http://", "https://")):
            _keep_output(chat, "\n".join(kept))
            kept, error_follows = [], False
            chat.messages.append(
                {"role": "user", "content": entry.strip("\n"), "metadata": {"aider_reflection": "edit_format_error"}}
            )
            continue
        _status(chat, entry)
        kept.append(entry)
        error_follows = error_follows or entry.strip() == _EDIT_ERROR
    _keep_output(chat, "\n".join(kept))


def _status(chat: _Chat, entry: str) -> None:
    """Model and version lines to the chat; a token report to the reply it reports on."""
    model = _MODEL.match(entry)
    if model and chat.model is None:
        chat.model = model.group(1)
    version = _VERSION.match(entry)
    if version and chat.version is None:
        chat.version = version.group(1)
    target = chat.messages[-1] if chat.messages else None
    if entry.startswith("Tokens:") and target is not None and target["role"] == "assistant":
        counts = {_USAGE_KEYS[unit]: _number(value, scale) for value, scale, unit in _COUNT.findall(entry)}
        usage = call_usage(counts)
        if usage:
            target["metadata"]["usage"] = usage
        cost = _COST.search(entry)
        if cost:
            target["metadata"]["cost"] = float(cost.group(1).replace(",", ""))


def _keep_output(chat: _Chat, text: str) -> None:
    """Output text into the preceding message's `aider_output` (before any message: the preamble)."""
    text = text.strip("\n")
    if not text.strip():
        return
    if not chat.messages:
        chat.preamble.append(text)
        return
    meta = chat.messages[-1]["metadata"]
    previous = meta.get("aider_output")
    meta["aider_output"] = f"{previous}\n{text}" if previous else text


def _number(value: str, scale: str) -> int:
    try:
        number = float(value.replace(",", ""))
    except ValueError:
        return 0
    return int(round(number * {"k": 1e3, "m": 1e6}.get(scale.lower(), 1)))


def _session(chat: _Chat) -> Session:
    messages = [Message(role=m["role"], content=m["content"], metadata=m["metadata"]) for m in chat.messages]
    meta = {
        "started_at": chat.started_at,
        "model": chat.model,
        "aider_version": chat.version,
        "aider_preamble": "\n".join(chat.preamble) or None,
        "aider_commands": chat.commands or None,
    }
    return build_session(messages, FORMAT, metadata=meta)
