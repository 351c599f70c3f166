"""The offline summarizer behind the model string `workbench/extractive`: a baseline, not a model.

`extractive_summary(messages, budget_tokens=None)` is a pure, deterministic function: from an
OpenAI-dict request it copies out what an agent needs again and writes it as headed sections. It
never paraphrases, so its quality figures are those of an extractive baseline; results and charts
label it with `OFFLINE_BASELINE_LABEL` (test a model string with `is_offline_baseline`).

What it reads. System messages are instructions, not material. When a message wraps its material
in `<transcript>` / `<existing_summary>` tags (as the workbench's summarizing strategies do, see
`workbench.strategies.prompts`) only the tagged material is read and the items of an existing
summary are carried forward. A native conversation may end with the summarization instructions
appended as a user message (long, and asking for a summary): that message is read as
instructions, not as the user's last request.

How long. `budget_tokens` (the request's `max_tokens`) when given; else a length the instructions
state ("in at most 400 words", "under 2,000 tokens", "a 300-word summary"); else
`DEFAULT_BUDGET_TOKENS`, but no more than half the material (and at least 64 tokens). Lengths are counted len/4, and
the summary never exceeds its budget.

What it keeps, in this order of precedence, each within a share of the budget:

1. the task: the first user request (or the task an existing summary carries);
2. the last user request, quoted;
3. the latest progress: the last assistant actions (text and tool calls) and their results;
4. by salience, in the rest of the budget: file paths, identifiers, other user requests,
   commands run, errors, decisions and constraints, lines with numbers.

Salience: a term (path or identifier) scores every block it appears in, weighted by the block's
role (user 3, assistant 2, tool 1) and by recency (a block at the end counts twice one at the
start). Path and identifier lists take the highest-scoring terms; a line (error, decision, fact,
command, request) scores its recency and its role plus the salience of the terms it carries, and
the chosen lines are written in the order they happened.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PROVIDER = "workbench"
MODEL = "extractive"
MODEL_STRING = f"{PROVIDER}/{MODEL}"
#: Results and charts show this beside every figure produced with `workbench/extractive`.
OFFLINE_BASELINE_LABEL = "offline extractive baseline (not a model)"
DEFAULT_BUDGET_TOKENS = 1200
DEFAULT_FLOOR_TOKENS = 64
MESSAGE_OVERHEAD = 4
MAX_ITEM_CHARS = 240
REQUEST_ITEM_CHARS = 300

SECTIONS = ("files", "identifiers", "requests", "commands", "errors", "decisions", "facts")
TITLES = {
    "task": "Task",
    "progress": "Latest progress",
    "files": "Files",
    "identifiers": "Identifiers",
    "requests": "Other user requests",
    "commands": "Commands run",
    "errors": "Errors",
    "decisions": "Decisions & constraints",
    "facts": "Facts & numbers",
    "request": "Last request",
    "notes": "Notes",
}
#: Shares of the budget the always-kept parts may take at most.
TASK_SHARE = 0.2
REQUEST_SHARE = 0.15
PROGRESS_SHARE = 0.15
PROGRESS_BLOCKS = 8
#: Shares of the rest each salient section may use before leftovers are shared out (in PRIORITY order).
WEIGHTS = {
    "files": 0.14,
    "identifiers": 0.2,
    "requests": 0.1,
    "commands": 0.08,
    "errors": 0.12,
    "decisions": 0.18,
    "facts": 0.18,
}
PRIORITY = ("identifiers", "files", "decisions", "facts", "errors", "commands", "requests")
ROLE_WEIGHT = {"user": 3.0, "assistant": 2.0, "tool": 1.0}


def heuristic_tokens(text: str) -> int:
    """len/4, floor 1 for non-empty text (the workbench's `heuristic` tokenizer)."""
    return max(1, len(text) // 4) if text else 0


def is_offline_baseline(model: str | None) -> bool:
    """True when `model` names this summarizer (`workbench/extractive`), whose output is a baseline."""
    if not model:
        return False
    name = str(model).strip().lower()
    return name == MODEL_STRING or name.endswith(f"/{MODEL_STRING}")


def baseline_note(models: Iterable[str | None]) -> str | None:
    """The sentence that goes with results whose summaries came from this baseline, naming which of
    `models` (the summarizers behind the results) it is; None when none of them is."""
    offline = sorted({str(m) for m in models if is_offline_baseline(m)})
    if not offline:
        return None
    return (
        f"Summaries by {', '.join(offline)}: the {OFFLINE_BASELINE_LABEL}. "
        "Read its quality figures as a floor, not as a model's."
    )


# ---------------------------------------------------------------------------------------------
# the requested length

_UNIT_TOKENS = {"token": 1.0, "word": 4 / 3, "character": 0.25, "char": 0.25}
_STATED = re.compile(
    r"(?:at most|up to|no more than|not more than|no longer than|under|below|within|less than|fewer than|"
    r"maximum(?: of)?|max\.?|about|around|roughly|approximately|~|<=|≤)\s*(\d[\d,_]*)\s*"
    r"(token|word|character|char)s?\b"
    r"|\b(\d[\d,_]*)[- ](token|word|character|char)s? (?:summary|note|limit|budget|maximum)",
    re.I,
)


def stated_budget(instructions: Iterable[str]) -> int | None:
    """The length, in tokens, the first instruction stating one asks for (words x 4/3, characters / 4)."""
    for text in instructions:
        match = _STATED.search(text)
        if match:
            number = match.group(1) or match.group(3)
            unit = (match.group(2) or match.group(4)).lower()
            value = int(number.replace(",", "").replace("_", ""))
            if value > 0:
                return max(1, int(value * _UNIT_TOKENS[unit]))
    return None


# ---------------------------------------------------------------------------------------------
# reading the input

#: The tags a summarization prompt wraps its material in; what each holds is what the reference pattern
#: `<tag>\n?(.*?)\n?</tag>` (dot matching newlines) finds. `_tagged` finds it with plain searches: the
#: pattern's lazy scan tries the closing tag at every character of a transcript (3.6 ms for 120 kB), and
#: a request's transcript was scanned six times.
_TAGS = ("transcript", "existing_summary")


@dataclass(frozen=True)
class _Tagged:
    """A message's text, the contents of its tags, and the text outside them."""

    text: str
    transcripts: tuple[str, ...]
    existing: tuple[str, ...]
    outside: str

    @property
    def any(self) -> bool:
        return bool(self.transcripts or self.existing)


def _tag_spans(text: str, tag: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of each `<tag>...</tag>` of `text`, in order, not overlapping; the content
    without one newline after the opening tag and one before the closing tag."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    spans = []
    start = text.find(opening)
    while start >= 0:
        body = start + len(opening)
        if text.startswith("\n", body):
            body += 1
        close = text.find(closing, body)
        if close < 0:
            break
        content_end = close - 1 if close > body and text[close - 1] == "\n" else close
        spans.append((start, close + len(closing), text[body:content_end]))
        start = text.find(opening, close + len(closing))
    return spans


def _without(text: str, spans: Sequence[tuple[int, int, str]]) -> str:
    """`text` with each span replaced by a space."""
    if not spans:
        return text
    pieces, last = [], 0
    for start, end, _ in spans:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return " ".join(pieces)


def _tagged(text: str) -> _Tagged:
    """The tagged material of `text`; outside the tags is the text without its transcripts, then without
    the existing summaries left in it (a summary quoted inside a transcript goes with the transcript)."""
    transcripts = _tag_spans(text, "transcript")
    existing = _tag_spans(text, "existing_summary")
    if not transcripts and not existing:
        return _Tagged(text, (), (), text)
    without_transcripts = _without(text, transcripts)
    left = _tag_spans(without_transcripts, "existing_summary") if transcripts else existing
    return _Tagged(
        text,
        tuple(c for _, _, c in transcripts),
        tuple(c for _, _, c in existing),
        _without(without_transcripts, left),
    )


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


def read_input(
    messages: Sequence[Mapping[str, Any]], tagged_texts: Sequence[_Tagged] | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """(existing summaries, conversation blocks as (role, text)) from an OpenAI-dict request
    (`tagged_texts`: each message's `_tagged` text, when the caller has it already)."""
    if tagged_texts is None:
        tagged_texts = [_tagged(_content_text(m.get("content"))) for m in messages]
    existing: list[str] = []
    blocks: list[tuple[str, str]] = []
    tagged = False
    plain: list[tuple[str, str]] = []
    for message, found in zip(messages, tagged_texts, strict=True):
        role = str(message.get("role") or "user")
        if role in ("system", "developer"):
            continue  # instructions, not material
        if found.any:
            tagged = True
            existing.extend(e.strip() for e in found.existing if e.strip() and not _NO_EXISTING.match(e.strip()))
            for transcript in found.transcripts:
                blocks.extend(_parse_transcript(transcript))
            continue
        calls = _calls_text(message) if role == "assistant" else ""
        body = "\n".join(t for t in (found.text, calls) if t)
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
_EXTENSIONS = (
    "py|pyi|ipynb|md|rst|txt|json|jsonl|toml|yaml|yml|ini|cfg|conf|lock|csv|tsv|sql|db|js|jsx|mjs|"
    "ts|tsx|go|rs|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|sh|bash|zsh|ps1|html|css|scss|xml|"
    "ex|exs|erl|lua|r|jl|scala|proto|gradle|mk|dockerfile|env|log|parquet|duckdb|svg|png|jpg"
)
#: File names `_PATH` finds without a "/" or an extension.
_BARE_FILES = ("Makefile", "Dockerfile", "Justfile", "Procfile", "LICENSE", "README")
_PATH = re.compile(
    r"(?<![\w/@.:-])"
    r"(?:(?:~|\.{1,2})?/)?(?:[\w@+-][\w.@+-]*/)+[\w@+-][\w.@+-]*"
    r"|(?<![\w/@.:-])[\w-][\w.-]*\.(?:" + _EXTENSIONS + r")\b"
    r"|\b(?:" + "|".join(_BARE_FILES) + r")\b"
)
_FILE_EXT = re.compile(r"\.(?:" + _EXTENSIONS + r")$", re.I)
#: Each pattern with the text every match of it holds ("": none): a text without it is not scanned.
#: Runs of word characters are taken possessively (`*+`, `++`): a match that fails its closing `\b` or the
#: `.`/`::` after a run cannot succeed by giving characters of the run back (the end would fall between two
#: word characters), so the engine does not try, a third less time over an agent's text; the `.` and `::`
#: groups keep giving back whole parts (the end then falls before a dot). The same matches as the plain
#: patterns (tests/test_extractive.py).
_IDENT_PATTERNS = (
    (re.compile(r"\b[A-Z][a-z0-9]++(?:[A-Z][a-z0-9]*+)++\b"), ""),  # CamelCase
    (re.compile(r"\b[a-z][a-z0-9]*+(?:[A-Z][a-z0-9]*+)++\b"), ""),  # camelCase
    (re.compile(r"\b_{0,2}[A-Za-z][A-Za-z0-9]*+(?:_[A-Za-z0-9]++)++_{0,2}\b"), "_"),  # snake_case, SCREAMING_CASE
    (re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*+(?:\.[A-Za-z_][A-Za-z0-9_]*+)+\b"), "."),  # dotted.names
    (re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*+(?:::[A-Za-z_][A-Za-z0-9_]*+)+\b"), "::"),  # Rust::paths, C++::names
    (re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\("), "("),  # called()
)
_DOTTED_NOISE = {"e.g", "i.e", "etc.al", "vs.al"}
_ERROR = re.compile(
    r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b|\bFAILED\b|\bERROR\b|"
    r"\berror(?:\[\w+\])?:|\bfatal:|\bpanic:|\bexit (?:code|status)[:= ]*[1-9]\d*|non-zero exit|"
    r"\bexited with (?:code )?[1-9]\d*|\bSegmentation fault\b|\bcommand not found\b|\[Errno \d+\]|"
    r"No such file or directory|Permission denied"
)
#: Text one of which every `_ERROR` match holds. The pattern is tried at every character of a line, the
#: costliest scan of a block, so a line holding none of them (most lines) is not searched.
_ERROR_WORDS = (
    "Traceback",
    "Error",
    "Exception",
    "FAILED",
    "ERROR",
    "error",
    "fatal:",
    "panic:",
    "exit",
    "Segmentation fault",
    "command not found",
    "[Errno ",
    "No such file or directory",
    "Permission denied",
)
_DIGIT = re.compile(r"\d")
_DECISION = re.compile(  # the lookahead holds each word's first letter: most places fail it at once
    r"\b(?=[mnadusiprcogwl])(?:must(?:n't| not)?|never|always|decided?|decision|agreed?|use|using|don't|do not|"
    r"should(?:n't| not)?|avoid|instead|prefer(?:red)?|requires?|required|constraint|only|chose|choose|"
    r"going with|we will|we'll|let's|plan)\b",
    re.I,
)
_NUMBER_TOKEN = re.compile(
    r"^[(\[\"'`]*[-+$€£]?\d[\d,._:/]*(?:%|ms|s|m|h|k|kb|mb|gb|tb|x|px|°c)?[)\]\"'`.,;:!?]*$", re.I
)
_ENUMERATOR = re.compile(r"^\(?\d{1,2}[.)]$")
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
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if len(line) > MAX_ITEM_CHARS:
            out.extend(s.strip() for s in _SENTENCE_SPLIT.split(line) if s.strip())
        else:
            out.append(line)
    return out


def _path_matches(text: str) -> Iterator[str]:
    """`_PATH`'s matches in `text`, in order, searched only in the words that can hold one: a match holds
    no whitespace, and a "/" or a "." unless it is a bare file name. The same matches as a search of the
    whole text (tests/test_extractive.py), in half the time: the pattern tries every character it is
    given, and this is the offline summarizer's costliest search."""
    if any(name in text for name in _BARE_FILES):
        return (m.group(0) for m in _PATH.finditer(text))
    return (m.group(0) for word in text.split() if "/" in word or "." in word for m in _PATH.finditer(word))


def _files(text: str) -> list[str]:
    found: list[str] = []
    scrubbed = text
    if "://" in text:  # what every URL holds: most texts hold none, and need no copy
        found = [u.rstrip(_TRAILING) for u in _URL.findall(text)]
        scrubbed = _URL.sub(" ", text)
    for match in _path_matches(scrubbed):
        path = match.rstrip(_TRAILING)
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
    for pattern, held in _IDENT_PATTERNS:
        if held not in text:
            continue
        for match in pattern.finditer(text):
            name = match.group(1) if match.groups() else match.group(0)
            if match.groups() and name.isalpha() and name.islower():
                continue  # a call of a plain word (map(, get(): too common to tell anything
            hits.append((match.start(), name))
    out: list[str] = []
    paths = "\n".join(files)  # one search instead of one per file (names hold no newline)
    for _, name in sorted(hits):
        if "." in name:
            low = name.lower()
            if low in _DOTTED_NOISE or _FILE_EXT.search(name) or any(len(p) < 2 for p in name.split(".")):
                continue
            if name in paths:
                continue  # part of a path
        if len(name) < 3 or name.isdigit() or f"{name}." in paths:
            continue  # too short, or only the stem of a file name
        out.append(name)
    return out


def _number_facts(line: str) -> list[str]:
    """Numbers with their context: the whole line when short, else a few words around each number."""
    if not _DIGIT.search(line):
        return []  # every number token holds a digit
    words = line.split()
    counted = words[1:] if words and _ENUMERATOR.match(words[0]) else words  # "3." numbers a list item
    if not any(_NUMBER_TOKEN.match(word) for word in counted) or _LISTING.match(line):
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


_INSTRUCTION_WORDS = re.compile(r"\b(?:summar|condens|compact|hand-?over|hand-?off|recap)", re.I)
INSTRUCTION_MIN_CHARS = 200


def _looks_like_instructions(text: str) -> bool:
    """An appended summarization prompt: long, and asking for a summary (a short "summarize X" is a request)."""
    return len(text) >= INSTRUCTION_MIN_CHARS and bool(_INSTRUCTION_WORDS.search(text))


def instructions_and_material(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(instruction texts, existing summaries, conversation blocks) of a request (see the module docstring).

    Instructions are the system messages and any text outside the tags of a tagged request, or the
    summarization prompt appended to a native conversation (whose own system prompt is the agent's,
    not the summarizer's).
    """
    instructions: list[str] = []
    system: list[str] = []
    tagged = False
    tagged_texts = [_tagged(_content_text(m.get("content"))) for m in messages]
    for message, found in zip(messages, tagged_texts, strict=True):
        role = str(message.get("role") or "user")
        if role in ("system", "developer"):
            system.append(found.text)
        elif found.any:
            tagged = True
            if found.outside.strip():
                instructions.append(found.outside)
    existing, blocks = read_input(messages, tagged_texts)
    if tagged:  # the system message is the summarizer's prompt (in a native conversation, the agent's own)
        instructions[:0] = system
        instructions.extend(
            found.text
            for m, found in zip(messages, tagged_texts, strict=True)
            if str(m.get("role") or "user") == "user" and not found.any
        )
    elif blocks and blocks[-1][0] == "user" and _looks_like_instructions(blocks[-1][1]):
        instructions.append(blocks[-1][1])
        blocks = blocks[:-1]
    return instructions, existing, blocks


# ---------------------------------------------------------------------------------------------
# candidates and their salience


@dataclass
class _Line:
    text: str
    position: int
    order: int
    score: float = 0.0


@dataclass
class _Pool:
    """Candidate lines per section, de-duplicated (a line seen again moves to its newest position)."""

    lines: dict[str, dict[str, _Line]] = field(default_factory=lambda: {name: {} for name in SECTIONS})
    order: int = 0

    def add(self, section: str, text: str, position: int, score: float, limit: int = MAX_ITEM_CHARS) -> None:
        text = _clip(text, limit)
        if text:
            self.put(section, text, _key(text), position, score)

    def put(self, section: str, text: str, key: str, position: int, score: float) -> None:
        """Add a line already clipped, under its `_key`."""
        bucket = self.lines[section]
        old = bucket.pop(key, None)
        self.order += 1
        bucket[key] = _Line(text, position, self.order, max(score, old.score if old else 0.0))


@dataclass
class _Terms:
    """Salience of paths and identifiers: role x recency summed over the blocks holding them."""

    score: dict[str, float] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)

    def add(self, term: str, kind: str, weight: float, position: int) -> None:
        self.score[term] = self.score.get(term, 0.0) + weight
        self.last[term] = max(position, self.last.get(term, position))
        self.kind.setdefault(term, kind)

    def ranked(self, kind: str) -> list[str]:
        names = [t for t, k in self.kind.items() if k == kind]
        return sorted(names, key=lambda t: (-self.score[t], -self.last[t], t))

    def normalised(self) -> dict[str, float]:
        top = max(self.score.values(), default=0.0)
        return {t: s / top for t, s in self.score.items()} if top else {}


_HASH = re.compile(r"\b[0-9a-f]{7,40}\b")  # kept when it mixes digits and letters (commit ids)
_ARITY = re.compile(r"\b([a-z_][A-Za-z0-9_]*[?!]?/\d)\b")
_SLASH_DIGIT = re.compile(r"/\d")  # what every `_ARITY` match holds, found by a fast literal search
_DIGIT_NAME = re.compile(  # runs taken possessively where giving back cannot help, as in `_IDENT_PATTERNS`
    r"\b[A-Za-z][A-Za-z0-9]*+(?:-[A-Za-z0-9]++)++(?:\.\d++)+\b"  # spotter-dov.1
    r"|\b[A-Za-z]++(?:-[A-Za-z0-9]++)*-\d[\w.]*\b"
)  # gpt-4o, issue-12
_DIGIT_NAME_HOLDS = re.compile(r"-\d|\.\d")  # besides a "-", what every `_DIGIT_NAME` match holds


@functools.lru_cache(maxsize=4096)
def _terms_of(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`_find_terms`, memoised: the lines a summary scores repeat from one summary to the next (a
    progressive summary carries them forward, and every config of an experiment reads the same session)."""
    return _find_terms(text)


def _find_terms(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(paths, identifiers) of a text, in order of appearance."""
    files = _files(text)
    names = _identifiers(text, set(files))
    names.extend(h for h in _HASH.findall(text) if not h.isdigit() and not h.isalpha())
    if _SLASH_DIGIT.search(text):
        names.extend(m.group(0) for m in _ARITY.finditer(text))
    if "-" in text and _DIGIT_NAME_HOLDS.search(text):
        names.extend(m.group(0) for m in _DIGIT_NAME.finditer(text))
    return tuple(files), tuple(names)


def clear_caches() -> None:
    """Forget the memoised terms and blocks: the next summary reads every text afresh (for benchmarks)."""
    _terms_of.cache_clear()
    _block_items.cache_clear()


def _call_arguments(call_line: str) -> Any:
    """The decoded arguments of a rendered tool call (`-> call name({...})`); None when not JSON."""
    start, end = call_line.find("("), call_line.rfind(")")
    if start < 0 or end <= start:
        return None
    try:
        return json.loads(call_line[start + 1 : end])
    except ValueError:
        return None


def _values(data: Any) -> Iterable[str]:
    """The string values inside decoded JSON (keys are the tool's schema, not material)."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, Mapping):
        for value in data.values():
            yield from _values(value)
    elif isinstance(data, list):
        for value in data:
            yield from _values(value)


def _call_material(call_line: str) -> str:
    """What a tool call says: its argument values, or the raw arguments when they are not JSON."""
    arguments = _call_arguments(call_line)
    if arguments is None:
        start = call_line.find("(")
        return call_line[start + 1 :] if start >= 0 else ""
    return "\n".join(_values(arguments))


def _command_of(call_line: str) -> str | None:
    """The shell command of a rendered tool call (`-> call name({"command": ...})`), if it has one."""
    arguments = _call_arguments(call_line)
    if isinstance(arguments, Mapping):
        for key in ("command", "cmd"):
            value = arguments.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip().splitlines()[0]
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return " ".join(value)
    return None


def _is_synthetic(text: str) -> bool:
    return text.lstrip().startswith("[")


@dataclass
class _Material:
    task: str = ""
    request: str = ""
    progress: list[str] = field(default_factory=list)
    pool: _Pool = field(default_factory=_Pool)
    terms: _Terms = field(default_factory=_Terms)


_HEADING = re.compile(r"^#{1,6}\s*(.+?)\s*$")


def _section_of(title: str) -> str | None:
    low = title.lower()
    for section, prefix in (
        ("task", "task"),
        ("progress", "latest progress"),
        ("files", "file"),
        ("identifiers", "identifier"),
        ("requests", "other user request"),
        ("commands", "command"),
        ("errors", "error"),
        ("decisions", "decision"),
        ("facts", "fact"),
        ("request", "last request"),
    ):
        if low.startswith(prefix):
            return section
    return None


_TASK_LINE = re.compile(
    r"^[\s\d.)*#-]*(?:primary request|original request|user request|task|goal|objective)s?"
    r"(?: and intent)?\**\s*:\**\s*(.*)$",
    re.I,
)


def _stated_task(lines: Sequence[str]) -> str:
    """The task a free-text summary names ("Primary Request: ...", "Task: ..."): that line, or the next ones."""
    for index, line in enumerate(lines):
        match = _TASK_LINE.match(line)
        if match:
            rest = match.group(1).strip() or " ".join(lines[index + 1 : index + 3])
            return _clip(rest, REQUEST_ITEM_CHARS)
    return ""


def _absorb_existing(text: str, material: _Material, *, memo: bool = True) -> None:
    """Carry an earlier summary forward: its task and request, its items (as the oldest material)."""
    section: str | None = None
    quoted: dict[str, list[str]] = {"task": [], "request": []}
    leftovers: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        heading = _HEADING.match(line)
        if heading:
            section = _section_of(heading.group(1))
            continue
        if not line:
            continue
        item = line[2:] if line.startswith("- ") else line
        if section in quoted:
            quoted[section].append(line[1:].strip() if line.startswith(">") else line)
        elif section == "identifiers":
            for name in item.split(","):
                name = name.strip().strip("`")
                if name:
                    material.terms.add(name, "identifier", ROLE_WEIGHT["assistant"], 0)
        elif section == "files":
            for path in _files(item) or [item.strip("`")]:
                material.terms.add(path, "file", ROLE_WEIGHT["assistant"], 0)
        elif section in SECTIONS:
            material.pool.add(section, item, 0, ROLE_WEIGHT["assistant"])
        elif section == "progress":
            material.pool.add("facts", item, 0, ROLE_WEIGHT["assistant"])  # earlier progress: a fact now
        else:
            leftovers.append(line)
    material.task = "\n".join(quoted["task"]).strip() or material.task
    material.request = "\n".join(quoted["request"]).strip() or material.request
    if leftovers:  # free text (a model's summary): read as the earliest assistant material
        material.task = material.task or _stated_task(leftovers)
        _extract_block("assistant", "\n".join(leftovers), 0, 1, material, memo=memo)


_LISTED_LINE = re.compile(r"^\s*\d+(?:→|\t|:\s|\|)")  # a numbered line of a file listing (cat -n, Read)


@dataclass(frozen=True)
class _BlockItems:
    """What a block offers wherever it stands: its terms and candidate lines, in the order read.

    `lines` holds (section, clipped text, its `_key`); the block's place (its position and role
    weight) is applied when the items join a summary's material."""

    files: tuple[str, ...]
    names: tuple[str, ...]
    lines: tuple[tuple[str, str, str], ...]


def _read_block(text: str, tool: bool) -> _BlockItems:
    """The items of a block's `text` (`tool`: a tool result, whose listed file lines are not events)."""
    said = "\n".join(_call_material(line) if line.startswith("-> call ") else line for line in text.splitlines())
    files, names = _find_terms(said)
    found: list[tuple[str, str, int]] = []
    facts: list[str] = []
    error_words = [word for word in _ERROR_WORDS if word in text]
    for line in _lines(text):
        if line.startswith("-> call "):
            command = _command_of(line)
            if command:
                found.append(("commands", command, 160))
            continue
        if tool and _LISTED_LINE.match(line):
            continue  # file contents: their terms count, their lines are not events
        if error_words and any(word in line for word in error_words) and _ERROR.search(line):
            found.append(("errors", line, MAX_ITEM_CHARS))
        elif not tool and _DECISION.search(line):
            found.append(("decisions", line, MAX_ITEM_CHARS))
        else:
            facts.extend(_number_facts(line))
    if tool and len(facts) > 2 * TOOL_FACT_LINES:  # long outputs: their head and their tail
        facts = facts[:TOOL_FACT_LINES] + facts[-TOOL_FACT_LINES:]
    found.extend(("facts", fact, MAX_ITEM_CHARS) for fact in facts)
    lines = []
    for section, line, limit in found:
        clipped = _clip(line, limit)
        if clipped:
            lines.append((section, clipped, _key(clipped)))
    return _BlockItems(tuple(dict.fromkeys(files)), tuple(dict.fromkeys(names)), tuple(lines))


#: A block of a transcript is read again by every later summary of its session (a progressive
#: summary's next transcript overlaps the last, each config of an experiment reads the session).
_block_items = functools.lru_cache(maxsize=8192)(_read_block)


def _extract_block(role: str, text: str, position: int, total: int, material: _Material, *, memo: bool = True) -> None:
    """Add a block's items to `material`, weighted by its role and recency (`memo`: its items from the memo)."""
    recency = 1.0 + position / max(1, total)
    weight = ROLE_WEIGHT.get(role, 1.0) * recency
    items = (_block_items if memo else _read_block)(text, role == "tool")
    for path in items.files:
        material.terms.add(path, "file", weight, position)
    for name in items.names:
        material.terms.add(name, "identifier", weight, position)
    put = material.pool.put
    for section, line, key in items.lines:
        put(section, line, key, position, weight)


def _progress(blocks: Sequence[tuple[str, str]], last_user: int | None) -> list[tuple[int, str]]:
    """(position, line) of the latest progress: the agent's blocks after the last user request,
    or, when the transcript ends with that request, the ones just before it."""
    after = [i for i in range(len(blocks)) if blocks[i][0] != "user" and (last_user is None or i > last_user)]
    if not after and last_user is not None:
        before: list[int] = []
        for i in range(last_user - 1, -1, -1):
            if blocks[i][0] == "user":
                break
            before.append(i)
        after = before[::-1]
    lines: list[tuple[int, str]] = []
    for i in after[-PROGRESS_BLOCKS:]:
        role, text = blocks[i]
        body = [line for line in _lines(text)]
        if role == "tool":
            if body:
                shown = body[0] if len(body) == 1 else f"{_clip(body[0], 100)} ... {_clip(body[-1], 100)}"
                lines.append((i, "result: " + _clip(shown, 200)))
            continue
        said = [line for line in body if not line.startswith("-> call ")]
        if said:
            lines.append((i, _clip(" ".join(said), 200)))
        lines.extend((i, _clip(line, 160)) for line in body if line.startswith("-> call "))
    return lines


def _gather(
    messages: Sequence[Mapping[str, Any]], *, memo: bool = True
) -> tuple[list[str], _Material, list[tuple[str, str]]]:
    instructions, existing, blocks = instructions_and_material(messages)
    material = _Material()
    for text in existing:
        _absorb_existing(text, material, memo=memo)
    users = [i for i, (role, text) in enumerate(blocks) if role == "user" and text.strip()]
    real = [i for i in users if not _is_synthetic(blocks[i][1])] or users
    first = real[0] if real else None
    last = real[-1] if real else None
    if not material.task and first is not None:
        material.task = blocks[first][1].strip()
    if last is not None and (last != first or material.request or existing):
        material.request = blocks[last][1].strip()
    total = len(blocks)
    for i, (role, text) in enumerate(blocks):
        _extract_block(role, text, i, total, material, memo=memo)
        if role == "user" and i in real and i not in (first, last):
            material.pool.add("requests", text, i, ROLE_WEIGHT["user"] * 2, limit=REQUEST_ITEM_CHARS)
    material.progress = [line for _, line in _progress(blocks, last)]
    _score_lines(material, memo=memo)
    return instructions, material, blocks


def _score_lines(material: _Material, *, memo: bool = True) -> None:
    """A line's score: its role x recency, plus the salience of the terms it carries (capped)."""
    terms_of = _terms_of if memo else _find_terms
    salience = material.terms.normalised()
    for section, bucket in material.pool.lines.items():
        if section == "requests":
            continue
        for line in bucket.values():
            files, names = terms_of(line.text)
            carried = sum(salience.get(t, 0.0) for t in dict.fromkeys((*files, *names)))
            line.score += 2.0 * min(3.0, carried)


# ---------------------------------------------------------------------------------------------
# writing within the budget


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


def _quoted_within(text: str, chars: int) -> str:
    """`text` quoted in at most `chars` characters (its head kept, '...' marking a cut); "" if nothing fits."""
    if len(_quote(text)) <= chars:
        return _quote(text)
    low, high = 0, len(text)
    while low < high:  # the longest head whose quoted form fits
        mid = (low + high + 1) // 2
        if len(_quote(text[:mid].rstrip() + "...")) <= chars:
            low = mid
        else:
            high = mid - 1
    return _quote(text[:low].rstrip() + "...") if low else ""


def _section(name: str, body: str) -> str:
    return f"## {TITLES[name]}\n{body}"


def _header_cost(name: str) -> int:
    return len(TITLES[name]) + 4 + 2  # "## " + title + "\n", and the blank line between sections


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


def _take_terms(names: Sequence[str], chars: int, *, quoted: bool) -> tuple[list[str], int]:
    chosen: list[str] = []
    used = 0
    for name in names:
        cost = len(name) + (5 if quoted else 3)  # quoted: "`name`, " and a share of each line's "- "
        if used + cost > chars:
            continue  # a shorter, less salient term may still fit
        chosen.append(name)
        used += cost
    return chosen, used


def _take_lines(lines: Sequence[_Line], chars: int) -> tuple[list[_Line], int]:
    ranked = sorted(lines, key=lambda line: (-line.score, -line.position, -line.order))
    chosen: list[_Line] = []
    used = 0
    for line in ranked:
        cost = len(line.text) + 3
        if used + cost > chars:
            continue
        chosen.append(line)
        used += cost
    return sorted(chosen, key=lambda line: (line.position, line.order)), used


def _share(budget_chars: int, share: float, floor_chars: int, floor_divisor: int) -> int:
    """`share` of the budget, but in a small budget up to `floor_chars` (at most 1/`floor_divisor` of it)."""
    return max(int(budget_chars * share), min(floor_chars, budget_chars // floor_divisor))


def _default_budget(blocks: Sequence[tuple[str, str]], existing_chars: int) -> int:
    material = sum(len(text) for _, text in blocks) + existing_chars
    return max(DEFAULT_FLOOR_TOKENS, min(DEFAULT_BUDGET_TOKENS, material // 8))


def summary_budget(messages: Sequence[Mapping[str, Any]], max_tokens: int | None = None) -> int:
    """The length a request gets: `max_tokens`, else the length its instructions state, else the default."""
    if max_tokens is not None and max_tokens > 0:
        return int(max_tokens)
    instructions, existing, blocks = instructions_and_material(messages)
    stated = stated_budget(instructions)
    if stated is not None:
        return stated
    return _default_budget(blocks, sum(len(e) for e in existing))


def extractive_summary(messages: Sequence[Mapping[str, Any]], *, budget_tokens: int | None = None) -> str:
    """A deterministic extractive summary of an OpenAI-dict request, at most `budget_tokens` long
    (None: the length the request states, else the default; see the module docstring).

    What each block of the conversation offers (its terms, its candidate lines) is memoised, so a
    block read by an earlier summary costs only its weighting; `clear_caches` forgets it."""
    return _summary(messages, budget_tokens, memo=True)


def reference_summary(messages: Sequence[Mapping[str, Any]], *, budget_tokens: int | None = None) -> str:
    """`extractive_summary` with no memo: every block read afresh. Slower, and equal to it on every
    request: the reference the memoised summary is held to."""
    return _summary(messages, budget_tokens, memo=False)


def _summary(messages: Sequence[Mapping[str, Any]], budget_tokens: int | None, *, memo: bool) -> str:
    budget = summary_budget(messages, budget_tokens)
    budget_chars = max(1, budget) * 4
    _, material, blocks = _gather(messages, memo=memo)

    parts: dict[str, str] = {}
    left = budget_chars
    if material.task:
        parts["task"] = _quoted_within(
            material.task, min(left, _share(budget_chars, TASK_SHARE, 400, 3)) - _header_cost("task")
        )
        left -= len(parts["task"]) + _header_cost("task") if parts["task"] else 0
    if material.request and material.request != material.task:
        parts["request"] = _quoted_within(
            material.request, min(left, _share(budget_chars, REQUEST_SHARE, 300, 4)) - _header_cost("request")
        )
        left -= len(parts["request"]) + _header_cost("request") if parts["request"] else 0
    if material.progress and left > _header_cost("progress") + 8:
        share = min(left, _share(budget_chars, PROGRESS_SHARE, 240, 4)) - _header_cost("progress")
        chosen: list[str] = []
        for line in reversed(material.progress):  # the newest first
            room_left = share - sum(len(c) + 3 for c in chosen) - 3
            if len(line) > room_left:
                if not chosen and room_left >= 8:  # the newest action, cut to fit
                    chosen.append(line[: room_left - 3].rstrip() + "...")
                break
            chosen.append(line)
        if chosen:
            parts["progress"] = "\n".join(f"- {line}" for line in reversed(chosen))
            left -= len(parts["progress"]) + _header_cost("progress")

    quoted_whole = [
        text
        for name, text in (("task", material.task), ("request", material.request))
        if parts.get(name) and not parts[name].endswith("...")
    ]
    for bucket in material.pool.lines.values():  # a line the task or the request already shows in full
        for key in [k for k, line in bucket.items() if any(line.text in text for text in quoted_whole)]:
            del bucket[key]
    files = material.terms.ranked("file")
    names = material.terms.ranked("identifier")
    available = {name: bool(material.pool.lines[name]) for name in SECTIONS}
    available["files"], available["identifiers"] = bool(files), bool(names)
    room = max(0, left - sum(_header_cost(n) for n in SECTIONS if available[n]))
    while True:  # the shares' costs are estimates: shrink the room until the whole fits
        text = _render_all(parts, _pick_salient(material, files, names, room))
        if len(text) <= budget_chars or room == 0:
            break
        room = max(0, room - (len(text) - budget_chars) - 8)
    if not text:
        notes = [line for _, block in blocks for line in _lines(block)]
        text = _render_notes(notes, budget_chars) if notes else "No conversation content to summarize."
    while len(text) > budget_chars and "\n" in text:  # a last guard; the shares normally prevent it
        text = text.rsplit("\n", 1)[0]
    return text[:budget_chars]


def _pick_salient(material: _Material, files: list[str], names: list[str], room: int) -> dict[str, Any]:
    """The salient items fitting `room` characters: each section's share first, then leftovers by PRIORITY."""
    picked: dict[str, Any] = {}
    used: dict[str, int] = {}

    def pick(name: str, chars: int) -> None:
        if name == "files":
            picked[name], used[name] = _take_terms(files, chars, quoted=False)
        elif name == "identifiers":
            picked[name], used[name] = _take_terms(names, chars, quoted=True)
        else:
            picked[name], used[name] = _take_lines(list(material.pool.lines[name].values()), chars)

    for name in SECTIONS:
        pick(name, int(room * WEIGHTS[name]))
    for name in PRIORITY:
        leftover = room - sum(used.values())
        if leftover <= 0:
            break
        pick(name, used[name] + leftover)
    return picked


def _render_all(parts: Mapping[str, str], picked: Mapping[str, Any]) -> str:
    ordered: list[str] = []
    for name in ("task", "progress"):
        if parts.get(name):
            ordered.append(_section(name, parts[name]))
    for name in SECTIONS:
        if not picked.get(name):
            continue
        if name == "identifiers":
            body = "\n".join(_wrap_names(picked[name]))
        elif name == "files":
            body = "\n".join(f"- {path}" for path in picked[name])
        else:
            body = "\n".join(f"- {line.text}" for line in picked[name])
        ordered.append(_section(name, body))
    if parts.get("request"):
        ordered.append(_section("request", parts["request"]))
    return "\n\n".join(ordered)


def _render_notes(lines: Sequence[str], budget_chars: int) -> str:
    room = budget_chars - _header_cost("notes")
    chosen: list[str] = []
    for line in reversed([_clip(line) for line in lines]):
        if sum(len(c) + 3 for c in chosen) + len(line) + 3 > room:
            break
        chosen.append(line)
    return _section("notes", "\n".join(f"- {item}" for item in reversed(chosen)))


def request_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Heuristic prompt tokens of a request: text and tool calls of each message plus 4 per message."""
    total = 0
    for message in messages:
        text = _content_text(message.get("content"))
        calls = _calls_text(message)
        total += heuristic_tokens("\n".join(t for t in (text, calls) if t)) + MESSAGE_OVERHEAD
    return total


__all__ = [
    "DEFAULT_BUDGET_TOKENS",
    "MODEL_STRING",
    "OFFLINE_BASELINE_LABEL",
    "baseline_note",
    "clear_caches",
    "extractive_summary",
    "instructions_and_material",
    "is_offline_baseline",
    "read_input",
    "reference_summary",
    "request_tokens",
    "stated_budget",
    "summary_budget",
]
