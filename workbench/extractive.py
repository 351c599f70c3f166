"""The offline summarizer behind the model string `workbench/extractive`.

Three layers:

1. `extractive_summary(messages, budget_tokens=1200)`: a pure, deterministic function. From an
   OpenAI-dict transcript it keeps what an agent most often needs again (file paths, identifiers,
   numbers with their context, error lines, decisions and constraints, the last user request),
   drops duplicates and writes them as headed sections within a token budget (len/4 heuristic).
   System messages are taken as instructions and ignored; when a message wraps its material in
   `<transcript>` / `<existing_summary>` tags (as the workbench's summarizing strategies do,
   see `workbench.strategies.prompts`) only the tagged material is read, and the items of an
   existing summary are carried forward.
2. A LiteLLM custom provider (`ExtractiveLLM`, built lazily so this module never imports litellm
   itself) whose `completion` / `acompletion` answer with that summary, usage counted with the
   heuristic, finish_reason "stop"; `max_tokens` is the budget when given.
3. `register()` adds the provider to `litellm.custom_provider_map` (idempotent), and
   `install_import_hook()` makes that happen as soon as litellm is imported in this process,
   without importing it eagerly.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
import time
import uuid
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PROVIDER = "workbench"
MODEL = "extractive"
MODEL_STRING = f"{PROVIDER}/{MODEL}"
DEFAULT_BUDGET_TOKENS = 1200
MESSAGE_OVERHEAD = 4
MAX_ITEM_CHARS = 240
MAX_REQUEST_SHARE = 0.25

SECTIONS = ("files", "identifiers", "errors", "decisions", "facts")
TITLES = {
    "files": "Files",
    "identifiers": "Identifiers",
    "errors": "Errors",
    "decisions": "Decisions & constraints",
    "facts": "Facts & numbers",
    "request": "Last request",
    "notes": "Notes",
}
# share of the budget (after the last request) each section may use before leftovers are shared out
WEIGHTS = {"files": 0.15, "identifiers": 0.15, "errors": 0.2, "decisions": 0.3, "facts": 0.2}
# leftover budget goes to sections in this order
PRIORITY = ("decisions", "errors", "files", "facts", "identifiers")


def heuristic_tokens(text: str) -> int:
    """len/4, floor 1 for non-empty text (the workbench's `heuristic` tokenizer)."""
    return max(1, len(text) // 4) if text else 0


# ---------------------------------------------------------------------------------------------
# reading the input

_TAG_RE = {tag: re.compile(rf"<{tag}>\n?(.*?)\n?</{tag}>", re.S) for tag in ("transcript", "existing_summary")}
_BLOCK_LABEL = re.compile(r"^\[(system|user|assistant|tool result(?: \((?P<tool>[^)\n]*)\))?)\]\s*$")
_OMITTED = "(non-text content omitted)"
_NO_EXISTING = re.compile(r"^\(none\b.*\)$", re.S)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return "\n".join(parts)


def _calls_text(message: Mapping[str, Any]) -> str:
    lines = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        lines.append(f"-> call {function.get('name', '')}({function.get('arguments', '')})")
    return "\n".join(lines)


def _parse_transcript(text: str) -> list[tuple[str, str]]:
    """A rendered transcript (`[role]` label lines) back into (role, text) blocks."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        label = _BLOCK_LABEL.match(line.strip())
        if label:
            role = label.group(1)
            blocks.append(("tool" if role.startswith("tool result") else role, []))
        elif line.strip() == _OMITTED:
            continue
        else:
            if not blocks:
                blocks.append(("user", []))
            blocks[-1][1].append(line)
    return [(role, "\n".join(lines).strip()) for role, lines in blocks]


def read_input(messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[tuple[str, str]]]:
    """(existing summaries, conversation blocks as (role, text)) from an OpenAI-dict request."""
    existing: list[str] = []
    blocks: list[tuple[str, str]] = []
    tagged = False
    plain: list[tuple[str, str]] = []
    for message in messages:
        role = str(message.get("role") or "user")
        text = _content_text(message.get("content"))
        if role in ("system", "developer"):
            continue  # instructions, not material
        found_transcript = _TAG_RE["transcript"].findall(text)
        found_existing = _TAG_RE["existing_summary"].findall(text)
        if found_transcript or found_existing:
            tagged = True
            existing.extend(e.strip() for e in found_existing
                            if e.strip() and not _NO_EXISTING.match(e.strip()))
            for transcript in found_transcript:
                blocks.extend(_parse_transcript(transcript))
            continue
        calls = _calls_text(message) if role == "assistant" else ""
        body = "\n".join(t for t in (text, calls) if t)
        if body.strip():
            plain.append(("tool" if role in ("tool", "function") else role, body))
    if not tagged:
        blocks = plain
    elif plain:
        # untagged messages beside tagged material are instructions appended to the conversation
        # (e.g. "now summarize"), except real tool/assistant traffic, which is material
        blocks.extend(b for b in plain if b[0] in ("assistant", "tool"))
    return existing, blocks


# ---------------------------------------------------------------------------------------------
# extraction

_URL = re.compile(r"\bhttps?://[^\s<>()\"'`]+")
_EXTENSIONS = ("py|pyi|ipynb|md|rst|txt|json|jsonl|toml|yaml|yml|ini|cfg|conf|lock|csv|tsv|sql|db|js|jsx|mjs|"
               "ts|tsx|go|rs|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|sh|bash|zsh|ps1|html|css|scss|xml|"
               "ex|exs|erl|lua|r|jl|scala|proto|gradle|mk|dockerfile|env|log|parquet|duckdb|svg|png|jpg")
_PATH = re.compile(
    r"(?<![\w/@.:-])"
    r"(?:(?:~|\.{1,2})?/)?(?:[\w@+-][\w.@+-]*/)+[\w@+-][\w.@+-]*"
    r"|(?<![\w/@.:-])[\w-][\w.-]*\.(?:" + _EXTENSIONS + r")\b"
    r"|\b(?:Makefile|Dockerfile|Justfile|Procfile|LICENSE|README)\b")
_FILE_EXT = re.compile(r"\.(?:" + _EXTENSIONS + r")$", re.I)
_IDENT_PATTERNS = (
    re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b"),          # CamelCase
    re.compile(r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b"),           # camelCase
    re.compile(r"\b_{0,2}[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+_{0,2}\b"),  # snake_case, SCREAMING_CASE
    re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\b"),  # dotted.names
    re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\("),                     # called()
)
_DOTTED_NOISE = {"e.g", "i.e", "etc.al", "vs.al"}
_ERROR = re.compile(
    r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b|\bFAILED\b|\bERROR\b|"
    r"\berror(?:\[\w+\])?:|\bfatal:|\bpanic:|\bexit (?:code|status)[:= ]*[1-9]\d*|non-zero exit|"
    r"\bexited with (?:code )?[1-9]\d*|\bSegmentation fault\b|\bcommand not found\b|\[Errno \d+\]|"
    r"No such file or directory|Permission denied")
_DECISION = re.compile(
    r"\b(?:must(?:n't| not)?|never|always|decided?|decision|agreed?|use|using|don't|do not|should(?:n't| not)?|"
    r"avoid|instead|prefer(?:red)?|requires?|required|constraint|only|chose|choose|going with|we will|"
    r"we'll|let's|plan)\b", re.I)
_NUMBER_TOKEN = re.compile(r"^[(\[\"'`]*[-+$€£]?\d[\d,._:/]*(?:%|ms|s|m|h|k|kb|mb|gb|tb|x|px|°c)?[)\]\"'`.,;:!?]*$",
                           re.I)
_LISTING = re.compile(r"^[dlcbps-][rwxsStT-]{9}[@+.]?\s")  # `ls -l` rows: numbers without meaning
FACT_LINE_CHARS = 160
TOOL_FACT_LINES = 3  # number lines taken from the start and from the end of each tool result
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")
_TRAILING = ".,;:!?)]}'\"`>"


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def _clip(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _lines(text: str) -> list[str]:
    """Non-empty lines; long lines further split into sentences."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if len(line) > MAX_ITEM_CHARS:
            out.extend(s.strip() for s in _SENTENCE_SPLIT.split(line) if s.strip())
        else:
            out.append(line)
    return out


def _files(text: str) -> list[str]:
    found = [u.rstrip(_TRAILING) for u in _URL.findall(text)]
    scrubbed = _URL.sub(" ", text)
    for match in _PATH.finditer(scrubbed):
        path = match.group(0).rstrip(_TRAILING)
        if "/" in path:
            last = path.rsplit("/", 1)[-1]
            if not (_FILE_EXT.search(last) or path.startswith(("/", "./", "../", "~/")) or path.count("/") >= 2):
                continue  # "and/or", "input/output"
            if re.fullmatch(r"[\d/.:-]+", path):
                continue  # dates, ratios
        found.append(path)
    return found


def _identifiers(text: str, files: set[str]) -> list[str]:
    hits: list[tuple[int, str]] = []
    for pattern in _IDENT_PATTERNS:
        for match in pattern.finditer(text):
            name = match.group(1) if match.groups() else match.group(0)
            hits.append((match.start(), name))
    out = []
    for _, name in sorted(hits):
        if "." in name:
            low = name.lower()
            if low in _DOTTED_NOISE or _FILE_EXT.search(name) or name in files \
                    or any(len(p) < 2 for p in name.split(".")):
                continue
            if any(f.endswith(name) or name in f for f in files):
                continue
        if len(name) < 3 or name.isdigit() or any(f"{name}." in f for f in files):
            continue  # too short, or only the stem of a file name
        out.append(name)
    return out


def _number_facts(line: str) -> list[str]:
    """Numbers with their context: the whole line when short, else a few words around each number."""
    words = line.split()
    if not any(_NUMBER_TOKEN.match(word) for word in words) or _LISTING.match(line):
        return []
    if len(line) <= FACT_LINE_CHARS:
        return [line]
    spans: list[list[int]] = []
    for i, word in enumerate(words):
        if _NUMBER_TOKEN.match(word):
            lo, hi = max(0, i - 6), min(len(words), i + 5)
            if spans and lo <= spans[-1][1]:
                spans[-1][1] = hi
            else:
                spans.append([lo, hi])
    return [" ".join(words[lo:hi]) for lo, hi in spans]


class _Buckets:
    """Ordered, de-duplicated items per section."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, str]] = {name: {} for name in SECTIONS}

    def add(self, section: str, item: str) -> None:
        item = _clip(item)
        if not item:
            return
        key = _key(item)
        bucket = self.items[section]
        if key in bucket:
            del bucket[key]  # seen again: moves to the newest position
        bucket[key] = item

    def __getitem__(self, section: str) -> list[str]:
        return list(self.items[section].values())


_HEADING = re.compile(r"^#{1,6}\s*(.+?)\s*$")


def _section_of(title: str) -> str | None:
    low = title.lower()
    for section, prefix in (("files", "file"), ("identifiers", "identifier"), ("errors", "error"),
                            ("decisions", "decision"), ("facts", "fact"), ("request", "last request")):
        if low.startswith(prefix):
            return section
    return None


def _absorb_existing(text: str, buckets: _Buckets) -> str:
    """Carry an earlier summary's items forward; returns the request it quoted (or "")."""
    section: str | None = None
    structured = False
    request_lines: list[str] = []
    leftovers: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        heading = _HEADING.match(line)
        if heading:
            section = _section_of(heading.group(1))
            structured = structured or section is not None
            continue
        if not line:
            continue
        if section == "request":
            request_lines.append(line[1:].strip() if line.startswith(">") else line)
        elif section == "identifiers" and line.startswith("- "):
            for name in line[2:].split(","):
                name = name.strip().strip("`")
                if name:
                    buckets.add("identifiers", name)
        elif section in SECTIONS and line.startswith("- "):
            buckets.add(section, line[2:])
        else:
            leftovers.append(line)
    if not structured or leftovers:
        _extract_block("assistant", "\n".join(leftovers if structured else text.splitlines()), buckets)
    return "\n".join(request_lines).strip()


def _extract_block(role: str, text: str, buckets: _Buckets) -> None:
    files = _files(text)
    for path in files:
        buckets.add("files", path)
    for name in _identifiers(text, set(files)):
        buckets.add("identifiers", name)
    facts: list[list[str]] = []
    for line in _lines(text):
        if line.startswith("-> call "):
            continue
        if _ERROR.search(line):
            buckets.add("errors", line)
        elif role != "tool" and _DECISION.search(line):
            buckets.add("decisions", line)
        else:
            found = _number_facts(line)
            if found:
                facts.append(found)
    if role == "tool" and len(facts) > 2 * TOOL_FACT_LINES:  # long outputs: their head and their tail
        facts = facts[:TOOL_FACT_LINES] + facts[-TOOL_FACT_LINES:]
    for found in facts:
        for fact in found:
            buckets.add("facts", fact)


# ---------------------------------------------------------------------------------------------
# writing within the budget


def _render(sections: list[tuple[str, list[str]]], request: str) -> str:
    parts = []
    for name, items in sections:
        if not items:
            continue
        if name == "identifiers":
            lines = _wrap_names(items)
        else:
            lines = [f"- {item}" for item in items]
        parts.append(f"## {TITLES[name]}\n" + "\n".join(lines))
    if request:
        parts.append(f"## {TITLES['request']}\n" + "\n".join(f"> {line}" if line else ">"
                                                           for line in request.splitlines()))
    return "\n\n".join(parts)


def _wrap_names(names: Sequence[str], width: int = 100) -> list[str]:
    lines: list[str] = []
    current = ""
    for name in names:
        piece = f"`{name}`"
        if current and len(current) + len(piece) + 2 > width:
            lines.append(f"- {current}")
            current = piece
        else:
            current = f"{current}, {piece}" if current else piece
    if current:
        lines.append(f"- {current}")
    return lines


def _item_cost(name: str, item: str) -> int:
    return len(item) + (4 if name == "identifiers" else 3)


def _fit(name: str, items: list[str], chars: int) -> tuple[list[str], int]:
    """The newest items of `items` fitting in `chars` characters (kept in their original order)."""
    chosen: list[str] = []
    used = 0
    for item in reversed(items):
        cost = _item_cost(name, item)
        if used + cost > chars:
            break
        chosen.append(item)
        used += cost
    return chosen[::-1], used


def _truncate_request(request: str, chars: int) -> str:
    if len(request) <= chars:
        return request
    if chars <= 3:
        return ""
    return request[: chars - 3].rstrip() + "..."


def extractive_summary(messages: Sequence[Mapping[str, Any]], *, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> str:
    """A deterministic extractive summary of an OpenAI-dict conversation within `budget_tokens`.

    Sections (each omitted when empty): Files, Identifiers, Errors, Decisions & constraints,
    Facts & numbers, Last request. Within a section the newest items win when the budget is
    tight; items appear in the order they were last seen.
    """
    budget_chars = max(16, int(budget_tokens) * 4)
    existing, blocks = read_input(messages)
    buckets = _Buckets()
    request = ""
    for text in existing:
        request = _absorb_existing(text, buckets) or request
    for role, text in blocks:
        _extract_block(role, text, buckets)
    for role, text in reversed(blocks):
        if role == "user" and text.strip() and not text.lstrip().startswith("["):
            request = text.strip()
            break
    else:
        for role, text in reversed(blocks):
            if role == "user" and text.strip():
                request = request or text.strip()
                break

    header_chars = sum(len(TITLES[n]) + 6 for n in SECTIONS if buckets[n]) + len(TITLES["request"]) + 6
    request = _truncate_request(request, int(budget_chars * MAX_REQUEST_SHARE))
    available = max(0, budget_chars - header_chars - (len(request) + 2 * request.count("\n") + 2 if request else 0))

    chosen: dict[str, list[str]] = {}
    used: dict[str, int] = {}
    for name in SECTIONS:
        chosen[name], used[name] = _fit(name, buckets[name], int(available * WEIGHTS[name]))
    leftover = available - sum(used.values())
    for name in PRIORITY:
        if leftover <= 0:
            break
        items = buckets[name]
        if len(chosen[name]) == len(items):
            continue
        chosen[name], used_now = _fit(name, items, used[name] + leftover)
        leftover -= used_now - used[name]
        used[name] = used_now

    text = _render([(n, chosen[n]) for n in SECTIONS], request)
    if not any(chosen.values()) and not request:
        notes = [line for _, block in blocks for line in _lines(block)]
        text = _render_notes(notes, budget_chars) if notes else "No conversation content to summarize."
    while len(text) > budget_chars and "\n" in text:  # a last guard; the shares normally prevent it
        text = text.rsplit("\n", 1)[0]
    return text[:budget_chars]


def _render_notes(lines: Sequence[str], budget_chars: int) -> str:
    items, _ = _fit("notes", [_clip(line) for line in lines], budget_chars - len(TITLES["notes"]) - 4)
    return f"## {TITLES['notes']}\n" + "\n".join(f"- {item}" for item in items)


def request_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Heuristic prompt tokens of a request: text and tool calls of each message plus 4 per message."""
    total = 0
    for message in messages:
        text = _content_text(message.get("content"))
        calls = _calls_text(message)
        total += heuristic_tokens("\n".join(t for t in (text, calls) if t)) + MESSAGE_OVERHEAD
    return total


# ---------------------------------------------------------------------------------------------
# the LiteLLM custom provider

_HANDLER_CLASSES: dict[int, type] = {}
_HANDLERS: dict[int, Any] = {}


def _budget(optional_params: Mapping[str, Any] | None) -> int:
    params = optional_params or {}
    for name in ("max_tokens", "max_completion_tokens"):
        value = params.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return DEFAULT_BUDGET_TOKENS


def handler_class(litellm_module: Any = None) -> type:
    """The `litellm.CustomLLM` subclass serving `workbench/extractive` (created on first use)."""
    litellm = litellm_module if litellm_module is not None else _import_litellm()
    cached = _HANDLER_CLASSES.get(id(litellm))
    if cached is not None:
        return cached

    class ExtractiveLLM(litellm.CustomLLM):  # type: ignore[misc, name-defined]
        """`workbench/extractive`: answers every request with `extractive_summary` of its messages."""

        def _respond(self, model: str, messages: list, optional_params: Mapping[str, Any] | None) -> Any:
            name = model.split("/", 1)[1] if model.startswith(f"{PROVIDER}/") else model
            if name != MODEL:
                from litellm.llms.custom_llm import CustomLLMError

                raise CustomLLMError(status_code=404, message=(
                    f"unknown model {PROVIDER}/{name}; the workbench provider serves only {MODEL_STRING}"))
            text = extractive_summary(messages, budget_tokens=_budget(optional_params))
            prompt_tokens = request_tokens(messages)
            completion_tokens = heuristic_tokens(text)
            return litellm.ModelResponse(
                id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
                created=int(time.time()),
                model=MODEL_STRING,
                object="chat.completion",
                choices=[{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": text}}],
                usage=litellm.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                    total_tokens=prompt_tokens + completion_tokens),
            )

        def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            return self._respond(model, messages, kwargs.get("optional_params"))

        async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            return self._respond(model, messages, kwargs.get("optional_params"))

        def _chunk(self, model: str, messages: list, optional_params: Any) -> dict[str, Any]:
            response = self._respond(model, messages, optional_params)
            usage = response.usage
            return {"text": response.choices[0].message.content, "is_finished": True, "finish_reason": "stop",
                    "index": 0, "tool_use": None,
                    "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                              "total_tokens": usage.total_tokens}}

        def streaming(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            yield self._chunk(model, messages, kwargs.get("optional_params"))

        async def astreaming(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            yield self._chunk(model, messages, kwargs.get("optional_params"))

    _HANDLER_CLASSES[id(litellm)] = ExtractiveLLM
    return ExtractiveLLM


def _import_litellm() -> Any:
    import litellm

    from workbench import _offline  # noqa: F401 - offline defaults before litellm loads

    return litellm


def register(litellm_module: Any = None) -> Any:
    """Make `workbench/extractive` callable through `litellm.completion`; returns the handler.

    In this litellm (1.10x) a custom provider is an entry `{"provider": name, "custom_handler":
    CustomLLM instance}` in `litellm.custom_provider_map`; litellm's `custom_llm_setup()` (run at
    the start of every completion call) copies the names into `litellm.provider_list` and
    `litellm._custom_providers`, and the handler is called with the model name without the
    `workbench/` prefix. We run `custom_llm_setup()` once ourselves too, so provider lookups made
    outside a completion call (e.g. `litellm.get_llm_provider`) see it at once. Idempotent: an
    existing `workbench` entry is left in place.
    """
    litellm = litellm_module if litellm_module is not None else _import_litellm()
    provider_map = getattr(litellm, "custom_provider_map", None)
    if provider_map is None:
        provider_map = []
        litellm.custom_provider_map = provider_map
    for item in provider_map:
        if item.get("provider") == PROVIDER:
            return item.get("custom_handler")
    handler = _HANDLERS.get(id(litellm))
    if handler is None:
        handler = handler_class(litellm)()
        _HANDLERS[id(litellm)] = handler
    provider_map.append({"provider": PROVIDER, "custom_handler": handler})
    setup = getattr(getattr(litellm, "utils", None), "custom_llm_setup", None)
    if callable(setup):
        setup()
    return handler


# ---------------------------------------------------------------------------------------------
# registering whenever litellm is imported


class _RegisteringLoader(importlib.abc.Loader):
    """Runs litellm's own loader, then registers the provider in the fresh module."""

    def __init__(self, loader: Any):
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        spec = getattr(module, "__spec__", None)
        if spec is not None:  # litellm sees its real loader (importlib.resources, reloads...)
            spec.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        try:
            register(module)
        except Exception as exc:  # never break `import litellm`
            warnings.warn(f"could not register the {MODEL_STRING} provider with litellm: {exc}",
                          RuntimeWarning, stacklevel=2)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class LiteLLMImportHook(importlib.abc.MetaPathFinder):
    """A `sys.meta_path` finder that hands out litellm's real spec with a registering loader."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "litellm":
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, LiteLLMImportHook):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


def install_import_hook() -> None:
    """Register `workbench/extractive` with litellm now if it is imported, else as soon as it is.

    Does not import litellm (that costs seconds). Safe to call any number of times.
    """
    module = sys.modules.get("litellm")
    if module is not None:
        if hasattr(module, "CustomLLM"):  # fully imported (not mid-import in another frame)
            register(module)
        return
    if not any(isinstance(finder, LiteLLMImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, LiteLLMImportHook())


__all__ = ["DEFAULT_BUDGET_TOKENS", "LiteLLMImportHook", "MODEL_STRING", "extractive_summary", "handler_class",
           "install_import_hook", "read_input", "register", "request_tokens"]
