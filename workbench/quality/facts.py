"""Salient facts of a message, extracted deterministically and normalised for matching.

A fact is something an agent may need again after a compaction: a file path, a code identifier,
a number with its unit, a URL or host, an error (its type, and its type with the message), a
commit hash, a command line, or a constraint or decision the user stated ("must", "don't",
"use X instead of Y"). Each fact has a `kind`, the `text` as first written and a `key`, the
normalised form two mentions of the same fact share: lower case, quotes and backticks dropped,
whitespace collapsed, trailing punctuation dropped, and for paths the `./` prefix and workspace
roots (`/workspace/<repo>/`, `/testbed/`, `/home/<user>/...`) removed, so `./src/app.py`,
`/workspace/app/src/app.py` and `src/app.py` are one fact.

Extraction is one pass of one compiled pattern over the text plus a few cheap passes (tool-call
arguments, user constraints), and it is done once per message: the result is cached by message
identity (messages are immutable), like token counts, so a replay's thousands of contexts
share the work.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import weakref
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from types import MappingProxyType
from typing import Any

from workbench.session import Message

KINDS = ("path", "identifier", "number", "url", "error", "commit", "command", "constraint")
MAX_FACT_CHARS = 200
COMMAND_ARGUMENTS = ("command", "cmd", "script")
COMMAND_PROGRAMS = frozenset(
    (
        "git",
        "pytest",
        "python",
        "python3",
        "pip",
        "uv",
        "npm",
        "npx",
        "pnpm",
        "yarn",
        "node",
        "make",
        "cargo",
        "go",
        "docker",
        "kubectl",
        "ls",
        "cd",
        "cat",
        "grep",
        "rg",
        "sed",
        "awk",
        "find",
        "curl",
        "wget",
        "bash",
        "sh",
        "ruff",
        "mypy",
        "tox",
        "poetry",
        "bun",
        "deno",
        "gh",
        "mvn",
        "gradle",
        "psql",
        "sqlite3",
        "duckdb",
    )
)
_EXTENSIONS = (
    "py|pyi|ts|tsx|js|jsx|mjs|cjs|json|jsonl|toml|yaml|yml|md|rst|txt|rs|go|java|kt|c|h|cc|cpp|hpp|"
    "rb|sh|bash|zsh|sql|html|css|scss|lock|cfg|ini|env|xml|csv|ipynb|vue|svelte|swift|php|proto|"
    "gradle|mk|log|conf|dockerfile|tf|lua|ex|exs|scala|cs|dart"
)
_UNITS = (
    "ms|us|µs|ns|s|sec|secs|seconds?|minutes?|mins?|hours?|hrs?|h|days?|weeks?|"
    "kb|mb|gb|tb|kib|mib|gib|bytes?|tokens?|px|rows?|lines?|items?|requests?|req/s|rps|qps|"
    "usd|eur|calls?|files?|tests?|passed|failed|errors?|warnings?|workers?|retries|attempts?|"
    "chars?|characters?|records?|users?|steps?|times|k|m"
)

_TOKEN = re.compile(r"[\w./:@~+$%#-]+")
#: UTF-8 bytes -> themselves when they may belong to a `_TOKEN` (its ASCII characters, every non-ASCII
#: byte), else a space: splitting the translated bytes on whitespace gives `_TOKEN`'s ASCII tokens whole.
_TOKEN_BYTES = bytes(b if b >= 0x80 or re.fullmatch(_TOKEN, chr(b)) else 0x20 for b in range(256))
_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+")
_ERROR_ENDINGS = ("Error", "Exception", "Interrupt", "Failure", "Exit")  # what an error type's name ends with
_ERROR_WITH_MESSAGE = re.compile(r"(?:" + "|".join(_ERROR_ENDINGS) + r"):[ \t]*([^\n]{1,160})")
_GENERIC_ERROR = re.compile(
    r"(?<![\w-])(?:[Ee]rror|ERROR|[Ff]atal|FATAL|panic)(?:\[[A-Za-z0-9]+\])?:"
    r"[ \t]*([^\n]{3,160})"
)
#: ASCII digits: `\d` tests every character's Unicode category, and this pattern is tried at every digit of a text
_SPACED_NUMBER = re.compile(r"([0-9][0-9,]*+(?:\.[0-9]+)?+)[ \t](" + _UNITS + r")\b")
_ASSIGNMENT = re.compile(r"([A-Z][A-Z0-9_]{2,}+)[ \t]*+[:=][ \t]*(\"[^\"\n]{0,60}\"|'[^'\n]{0,60}'|[\w.+-]{1,40})")
_BACKTICKED = re.compile(r"`([^`\n]{2,120})`")
_PATH_WITH_EXTENSION = re.compile(r"(?:[\w.@+-]+/)*[\w-][\w.@+-]*\.(?:" + _EXTENSIONS + r")", re.IGNORECASE)
_HOST = re.compile(
    r"(?:\d{1,3}(?:\.\d{1,3}){3}|[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:internal|local|lan|com|net|org|"
    r"io|dev|app|cloud|svc|cluster|example))(?::\d{2,5})?"
)
_TICKET = re.compile(r"[A-Z][A-Z0-9]{1,9}-\d{1,6}")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_NUMBER = re.compile(r"\$?\d[\d,]*(?:\.\d+)?(?:%|(?:" + _UNITS + r"))|v?\d+\.\d+\.\d+(?:[-.][\w.]+)?", re.IGNORECASE)
_IDENTIFIER = re.compile(
    r"[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]*[A-Za-z0-9]|_[A-Za-z][A-Za-z0-9_]{2,}"
    r"|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[a-z][a-z0-9]+(?:[A-Z][a-z0-9]*)+"
)
_ERROR_NAME = re.compile(r"[A-Z][A-Za-z0-9_]*(?:" + "|".join(_ERROR_ENDINGS) + ")")
_TOKEN_EDGES = ".:-~#+$@"
_SENTENCES = re.compile(r"(?:[^.!?\n]|[.!?](?=[^\s.!?]))+(?:[.!?]+|$)", re.MULTILINE)
_CUES = (
    r"\b(?:must|mustn't|don't|do not|never|always|should|shouldn't|avoid|instead of|prefer|only use|"
    r"make sure|required?|requires|we decided|decided to|from now on|stay compatible|keep (?:it|the|them|\w+) "
    r"[\w ]*compatible|no new|not allowed|forbidden|please use|stick to|rather than)\b"
)
_CONSTRAINT_CUES = re.compile(_CUES, re.IGNORECASE)
#: The same cues for lower-cased text, where ignoring case changes nothing else (and costs twice as much).
_LOWER_CONSTRAINT_CUES = re.compile(_CUES)
_COMMAND_LINE = re.compile(r"^[ \t]*\$[ \t]+(\S[^\n]{1,200})$", re.MULTILINE)
_SPACES = re.compile(r"\s+")
#: The non-ASCII characters that case ties to an ASCII letter: the ones ignoring case matches with one
#: (`İ`, dotless `ı`, long `ſ`, the Kelvin sign), which include the ones whose lower case holds one (`İ`
#: gives `i̇`, the Kelvin sign `k`). A text without them can be searched lowered, a case-insensitive
#: search of ASCII letters costing twice as much, and its ASCII letters lowered alone lower it.
CASE_ODD = ("\u0130", "\u0131", "\u017f", "\u212a")
#: What `drop_quotes` and fact keys drop: backticks, straight and curly quotes.
QUOTE_CHARS = ("`", '"', "'", "“", "”", "‘", "’")
_ASCII_QUOTE_CHARS = ("`", '"', "'")
_TRAILING = ".,;:!?)]}>"
_ROOTS = re.compile(
    r"^(?:/(?:workspace|workspaces|projects?)/[^/]+/"
    r"|/(?:testbed|repo|app|code)/|/(?:home|Users)/[^/]+/(?:[^/]+/){0,2}?(?=src/|tests?/|lib/|"
    r"packages?/|apps?/|docs/)|/(?:home|Users)/[^/]+/|/root/|~/)"
)
_WORD = re.compile(r"[a-z0-9][a-z0-9_.+-]*")
STOPWORDS = frozenset(
    "a an the and or but if then so to of in on at for from by with without into onto over under as is are be "
    "been being was were it its this that these those we you i me my our your us please also just any all "
    "each every some no not do does did don't dont must should would could can will shall may might use "
    "using used keep make sure only new from now on than rather instead".split()
)


@dataclass(frozen=True, slots=True)
class Fact:
    """One salient fact: `kind` (see `KINDS`), `key` (normalised, what matching compares), `text` (as written)."""

    kind: str
    key: str
    text: str


def _clean(text: str) -> str:
    text = _SPACES.sub(" ", drop_quotes(text)).strip().lower()
    return text.rstrip(_TRAILING).strip()


def normalize_text(text: str) -> str:
    """A whole text normalised like fact keys (lower case, no quotes, single spaces), for substring matching."""
    return " ".join(drop_quotes(text.lower()).split())


def drop_quotes(text: str) -> str:
    """The text without its quote characters (backticks, straight and curly quotes)."""
    for quote in _ASCII_QUOTE_CHARS if text.isascii() else QUOTE_CHARS:
        if quote in text:
            text = text.replace(quote, "")
    return text


def normalize_path(text: str) -> str:
    """`./src/a.py`, `/workspace/repo/src/a.py` and `src/a.py` all give `src/a.py`."""
    path = drop_quotes(text).strip().rstrip(_TRAILING)
    while path.startswith("./"):
        path = path[2:]
    root = _ROOTS.match(path)
    return (path[root.end() :] if root else path).lower()


def normalize(text: str, kind: str = "identifier") -> str:
    """The matching key of a fact's text (see the module docstring)."""
    if kind == "path":
        return normalize_path(text)
    return _clean(text)[:MAX_FACT_CHARS]


def content_words(text: str) -> frozenset[str]:
    """The non-stopword words of a text (lower case): what fuzzy matching of constraints compares."""
    return frozenset(w.rstrip(".-+") for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1)


@functools.lru_cache(maxsize=4096)
def text_words(text: str) -> frozenset[str]:
    """`content_words` of a normalised text, memoised (summaries are matched against at every compaction)."""
    return content_words(text)


def _is_commit(token: str) -> bool:
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _is_plain_word(token: str | bytes) -> bool:
    """Letters only, in one case or capitalised: no path, number, host, commit, error name nor identifier shape."""
    return token.isalpha() and (token.islower() or token.isupper() or token[1:].islower())


def _has_letter(text: str) -> bool:
    if text.isascii():  # (an ASCII text has a letter exactly when casing changes it)
        return text.upper() != text.lower()
    return any(map(str.isalpha, text))


def _classify(token: str) -> tuple[Fact, ...]:
    """The facts one whitespace-free token states on its own (memoised: tokens repeat a lot)."""
    if token.isdigit() or _is_plain_word(token):
        return ()
    token = token.lstrip(":-#+@").rstrip(_TOKEN_EDGES)
    if len(token) < 3 or _is_plain_word(token) or token.startswith(("http://", "https://")):
        return ()
    if ":" in token:
        located = _located(token)
        if located is not None:
            return located
    if ".." in token and "/" not in token:
        ends = token.replace("...", "..").split("..")
        if len(ends) == 2 and all(len(end) >= 7 and _COMMIT.fullmatch(end) and _is_commit(end) for end in ends):
            return tuple(Fact("commit", end, end) for end in ends)
    if "/" in token:
        key = normalize_path(token)
        slashes = token.count("/")
        if _has_letter(key) and (slashes >= 2 or token[0] in "/~." or _PATH_WITH_EXTENSION.fullmatch(token)):
            return (Fact("path", key, token),)
        return ()
    dotted = "." in token  # plain substring tests first: each pattern below needs its character
    if dotted and not token[0].isdigit() and _PATH_WITH_EXTENSION.fullmatch(token):
        return (Fact("path", normalize_path(token), token),)
    if dotted and _HOST.fullmatch(token):
        return (Fact("url", token.lower(), token),)
    if "-" in token and _TICKET.fullmatch(token):
        return (Fact("identifier", token.lower(), token),)
    if len(token) >= 7 and _COMMIT.fullmatch(token) and _is_commit(token):
        return (Fact("commit", token, token),)
    if token[0].isdigit() or token[0] in "$v":
        if _NUMBER.fullmatch(token):
            return (Fact("number", token.lower().replace(",", ""), token),)
        if token[0] != "v":
            return ()
    if token.endswith(_ERROR_ENDINGS) and _ERROR_NAME.fullmatch(token):
        return (Fact("error", token.lower(), token),)
    if dotted:
        parts = [p for p in token.split(".") if p]
        if parts and _ERROR_NAME.fullmatch(parts[-1]):
            return (Fact("error", parts[-1].lower(), parts[-1]), Fact("identifier", token.lower(), token))
        found = tuple(Fact("identifier", p.lower(), p) for p in parts if len(p) >= 4 and _IDENTIFIER.fullmatch(p))
        if found and all(p.isidentifier() for p in parts):
            return (Fact("identifier", token.lower(), token), *found)
        return found
    if len(token) >= 4 and _IDENTIFIER.fullmatch(token):
        return (Fact("identifier", token.lower(), token),)
    return ()


def _located(token: str) -> tuple[Fact, ...] | None:
    """The facts of a path followed by a place in it: `src/app.py:12`, `src/app.py:50:def`
    (`grep -n`), `tests/test_app.py::test_login` (a pytest id): the path, then whatever names
    follow it (line and column numbers aside); None when the token is not one."""
    head, _, rest = token.partition(":")
    if not rest or not (rest[0].isdigit() or rest[0] == ":"):
        return None
    found = _classify(head)
    if not found or found[0].kind != "path":
        return None
    for part in rest.split(":"):
        if part and not part.isdigit():
            found += _classify(part)
    return found


_CLASSIFIED: dict[bytes, tuple[Fact, ...]] = {}
_MAX_CLASSIFIED = 500_000
#: What `_classify` strips from a token's ends before looking at it, as bytes.
_LEADING_EDGES, _TRAILING_EDGES = b":-#+@", _TOKEN_EDGES.encode()
#: Claude Code's file reads number every line as `  12→`: the arrow, outside `_TOKEN`, parts tokens like a space.
_LINE_ARROW = "\u2192"


def _classify_piece(piece: bytes) -> tuple[Fact, ...]:
    """The facts of a piece: an ASCII one is one token, any other is split by `_TOKEN` first."""
    if piece.isascii():
        return _classify(piece.decode("ascii"))
    return tuple(fact for token in _TOKEN.findall(piece.decode("utf-8", "surrogatepass")) for fact in _classify(token))


def _token_facts(text: str, out: list[Fact]) -> None:
    """Appends the facts of the text's `_TOKEN`s to `out`, in order of first mention, each distinct
    piece classified once per process (`_CLASSIFIED`, keyed by the piece's bytes).

    The pieces are found on the UTF-8 bytes, a third of the cost of the regular expression: ASCII
    bytes outside the token class become spaces (`_TOKEN_BYTES`), so a split on whitespace gives the
    ASCII tokens whole, and only a piece holding other characters is decoded and split by `_TOKEN`
    (which keeps the Unicode word characters among them). A plain word or number states nothing
    (`_classify`'s first test, made here on the bytes), and a piece is classified as what is left
    of it once its edges are stripped, as `_classify` does first, so `path.py:` and `path.py` share one."""
    if _LINE_ARROW in text:
        text = text.replace(_LINE_ARROW, " ")
    memo = _CLASSIFIED
    known = memo.get
    for piece in dict.fromkeys(text.encode("utf-8", "surrogatepass").translate(_TOKEN_BYTES).split()):
        found = known(piece)
        if found is None:
            if piece.isdigit() or _is_plain_word(piece):
                found = ()
            else:
                core = piece.lstrip(_LEADING_EDGES).rstrip(_TRAILING_EDGES)
                found = known(core) if core is not piece else None
                if found is None:
                    found = _classify_piece(core) if len(core) >= 3 else ()
                    memo[core] = found
            if len(memo) >= _MAX_CLASSIFIED:
                memo.clear()
            memo[piece] = found
        if found:
            out.extend(found)


def extract_facts(text: str) -> Iterator[Fact]:
    """Every fact of a text except constraints (which only user messages state).

    Single tokens (paths, identifiers, numbers, hosts, commits, error names) are classified once
    per distinct token; facts spanning several words (URLs, error messages, `NAME = value`,
    numbers with a spaced unit, back-ticked snippets, `$ command` lines) have their own passes,
    each skipped when a plain substring test shows it cannot match.
    """
    return iter(_extract(text))


#: Where a match of each error pattern may start, relative to a cue it contains (every match contains one):
#: `Error:` starts its match; `rror:` follows a match's first letter (all the generic names have five
#: letters, so a `]:` closing `error[E0308]:` sits five letters after the bracket's opening).
_ERROR_CUES = tuple((f"{ending}:", 0) for ending in _ERROR_ENDINGS)
_GENERIC_ERROR_CUES = (("rror:", -1), ("RROR:", -1), ("atal:", -1), ("ATAL:", -1), ("panic:", 0), ("]:", None))


def _cued_matches(pattern: re.Pattern[str], text: str, cues: tuple[tuple[str, int | None], ...]) -> list[re.Match[str]]:
    """What `pattern.finditer(text)` finds, for a pattern each of whose matches holds one of the
    `cues` at a known offset from its start (None: five letters before the `[` the cue closes).

    The cues are found by plain substring search and the pattern is tried only where a match could
    start, in order, each from where the last match ended: a scan of the whole text by the pattern
    costs many times more (a lookbehind, or a set of first letters as common as `E`, defeats the
    regular-expression engine's own skipping)."""
    starts: set[int] = set()
    for cue, offset in cues:
        at = text.find(cue)
        while at >= 0:
            start = at + offset if offset is not None else text.rfind("[", 0, at) - 5
            if start >= 0:
                starts.add(start)
            at = text.find(cue, at + 1)
    found: list[re.Match[str]] = []
    end = 0
    for start in sorted(starts):
        if start >= end:
            match = pattern.match(text, start)
            if match is not None:
                found.append(match)
                end = match.end()
    return found


def _extract(text: str) -> list[Fact]:
    return _extract_many([text])[0]


def _extract_many(texts: Sequence[str]) -> list[list[Fact]]:
    """The facts of each text (constraints aside): its single tokens first, then what each pass for
    facts spanning several words finds, pass by pass.

    The tokens are looked at text by text (each text's distinct tokens, in order), the passes run
    once over the texts joined by newlines: no such fact spans two lines, and a text of a few dozen
    characters, as most are, would pay each pass's cost per call many times its cost per character."""
    found: list[list[Fact]] = []
    for text in texts:
        out: list[Fact] = []
        if text:
            _token_facts(text, out)
        found.append(out)
    starts = list(accumulate([len(t) + 1 for t in texts[:-1]], initial=0))
    for at, fact in _phrase_facts("\n".join(texts)):
        found[bisect_right(starts, at) - 1].append(fact)
    return found


def _phrase_facts(text: str) -> Iterator[tuple[int, Fact]]:
    """(where it starts, fact) for the facts spanning several words: URLs, error messages, numbers
    with a spaced unit, `NAME = value`, back-ticked snippets and `$ command` lines, pass by pass."""
    if "://" in text:
        for match in _URL.finditer(text):
            url = match.group().rstrip(_TRAILING)
            yield match.start(), Fact("url", normalize(url, "url"), url)
    for match in _cued_matches(_ERROR_WITH_MESSAGE, text, _ERROR_CUES):
        start = match.start()
        floor = max(0, start - 80)
        while start > floor and (text[start - 1].isalnum() or text[start - 1] in "_."):
            start -= 1
        name = text[start : match.start()] + match.group()[: match.group().index(":")]
        if _ERROR_NAME.fullmatch(name.rsplit(".", 1)[-1]):
            full = f"{name}: {match.group(1).strip()}"
            yield match.start(), Fact("error", normalize(full, "error"), full)
    for match in _cued_matches(_GENERIC_ERROR, text, _GENERIC_ERROR_CUES):
        yield match.start(), Fact("error", normalize(match.group(), "error"), match.group())
    for match in _SPACED_NUMBER.finditer(text):
        if match.start() and (text[match.start() - 1].isalnum() or text[match.start() - 1] in "._"):
            continue
        number = f"{match.group(1)}{match.group(2)}"
        yield match.start(), Fact("number", number.lower().replace(",", ""), match.group())
    for match in _ASSIGNMENT.finditer(text):
        if match.start() and (text[match.start() - 1].isalnum() or text[match.start() - 1] == "_"):
            continue
        name, value = match.group(1), match.group(2)
        kind = "number" if value[:1].isdigit() else "identifier"
        yield match.start(), Fact(kind, normalize(f"{name} = {value}"), match.group())
    if "`" in text:
        for match in _BACKTICKED.finditer(text):
            inner = match.group(1).strip()
            first = inner.split(" ", 1)[0]
            if first in COMMAND_PROGRAMS and " " in inner:
                yield match.start(), Fact("command", normalize(inner, "command"), inner)
            elif " " in inner and len(inner) >= 3:
                yield match.start(), Fact("identifier", normalize(inner), inner)
    if "$" in text:
        for match in _command_lines(text):
            command = match.group(1).strip()
            yield match.start(), Fact("command", normalize(command, "command"), command)


def _command_lines(text: str) -> list[re.Match[str]]:
    """What `_COMMAND_LINE.finditer(text)` finds: the pattern tried only at the start of each line
    whose first character other than spaces and tabs is a `$` followed by one (found by plain
    substring search: the pattern's `^` would be tried at every character)."""
    starts: set[int] = set()
    for cue in ("$ ", "$\t"):
        at = text.find(cue)
        while at >= 0:
            line = text.rfind("\n", 0, at) + 1
            if not text[line:at].strip(" \t"):
                starts.add(line)
            at = text.find(cue, at + 1)
    return [match for match in (_COMMAND_LINE.match(text, start) for start in sorted(starts)) if match]


def extract_constraints(text: str) -> Iterator[Fact]:
    """The sentences of a user's text that state a constraint or a decision.

    The cues are looked for once, in the whole text (`_cue_starts`), and a sentence states one when
    a cue starts within it: no cue holds a sentence's end (`.`, `!`, `?`, a line break), and a
    sentence is bounded by non-word characters, so a cue's word boundaries hold in the text exactly
    when they hold in the sentence. Only the sentence around each cue is read: sentences never
    span lines, so the sentences of a line are those found from its start.
    """
    end = 0
    for cue in _cue_starts(text):
        if cue < end:
            continue
        for match in _SENTENCES.finditer(text, max(end, text.rfind("\n", 0, cue) + 1)):
            if match.end() > cue:  # (every word character is in a sentence: this one starts at or before the cue)
                break
        else:
            continue
        end = match.end()
        sentence = match.group().strip()
        if len(sentence) >= 8:
            yield Fact("constraint", normalize(sentence, "constraint"), sentence)


def _cue_starts(text: str) -> list[int]:
    """Where the constraint cues start in the text, as `_CONSTRAINT_CUES.finditer` finds them."""
    lowered = text.lower()
    if len(lowered) == len(text) and (text.isascii() or not any(char in text for char in CASE_ODD)):
        return [match.start() for match in _LOWER_CONSTRAINT_CUES.finditer(lowered)]
    return [match.start() for match in _CONSTRAINT_CUES.finditer(text)]


def _argument_strings(arguments: str) -> Iterator[tuple[str, str]]:
    """(argument name, string value) of a tool call's JSON arguments (raw text when not JSON)."""
    try:
        data: Any = json.loads(arguments)
    except (ValueError, TypeError):
        yield "", arguments
        return
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, str):
            yield name, value
        elif isinstance(value, Mapping):
            stack.extend((str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((name, v) for v in value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield name, str(value)


_PATH_ARGUMENTS = ("path", "file_path", "file", "filename", "notebook_path")


def _compute_many(messages: Sequence[Message]) -> list[Mapping[str, Fact]]:
    """The facts of each message by key (see `message_facts`), the texts of all of them extracted together."""
    texts: list[str] = []
    plans: list[list[int | list[Fact]]] = []  # per message, in order: a text's place in `texts`, or facts
    for message in messages:
        plan: list[int | list[Fact]] = [len(texts)]
        texts.append(message.text)
        if message.role == "user":
            plan.append(list(extract_constraints(message.text)))
        for call in message.tool_calls:
            for name, value in _argument_strings(call.arguments):
                if name in COMMAND_ARGUMENTS and value.strip():
                    command = value.strip()
                    plan.append([Fact("command", normalize(command[:MAX_FACT_CHARS], "command"), command)])
                elif name in _PATH_ARGUMENTS and value.strip():
                    plan.append([Fact("path", normalize_path(value), value)])
                plan.append(len(texts))
                texts.append(value)
        plans.append(plan)
    extracted = _extract_many(texts) if texts else []
    out: list[Mapping[str, Fact]] = []
    for plan in plans:
        facts: dict[str, Fact] = {}
        first = facts.setdefault
        for part in plan:
            for fact in extracted[part] if isinstance(part, int) else part:
                first(fact.key, fact)
        facts.pop("", None)
        out.append(MappingProxyType(facts))
    return out


_CACHE: dict[int, tuple[weakref.ref[Message], Mapping[str, Fact]]] = {}
#: Re-entrant: the weak-reference callbacks below take it, and a garbage collection can run them in a
#: thread that holds it already (any allocation under the lock may collect a message).
_CACHE_LOCK = threading.RLock()
_BY_CONTENT: dict[tuple[str, str, tuple[str, ...]], Mapping[str, Fact]] = {}
_MAX_BY_CONTENT = 4096


def _forget(key: int) -> Any:
    def callback(_: weakref.ref[Message]) -> None:
        with _CACHE_LOCK:
            entry = _CACHE.get(key)
            if entry is not None and entry[0]() is None:
                del _CACHE[key]

    return callback


def message_facts(message: Message) -> Mapping[str, Fact]:
    """The facts of one message by key (read-only); computed once per message and cached.

    Every message gives the facts of its text (a system prompt too: a fact it states is not lost
    while it is kept); user messages also give their constraints; tool calls give their
    arguments' facts, with `command` arguments as commands and `path`-like arguments as paths.
    """
    entry = _CACHE.get(id(message))
    if entry is not None and entry[0]() is message:
        return entry[1]
    prime([message])
    return _CACHE[id(message)][1]


def prime(messages: Iterable[Message]) -> None:
    """Extract and cache the facts of every message not cached yet, together: what `message_facts`
    then gives, at a fraction of the cost of asking message by message (see `_extract_many`).

    Messages a compaction wrote are looked up by content first: replays of a grid often write the
    same text again."""
    todo: dict[int, Message] = {}
    for message in messages:
        entry = _CACHE.get(id(message))
        if (entry is None or entry[0]() is not message) and id(message) not in todo:
            todo[id(message)] = message
    if not todo:
        return
    known: dict[int, Mapping[str, Fact]] = {}
    computed: list[Message] = []
    for key, message in todo.items():
        found = _BY_CONTENT.get(_content_key(message)) if message.origin != "original" else None
        if found is None:
            computed.append(message)
        else:
            known[key] = found
    for message, facts in zip(computed, _compute_many(computed), strict=True):
        known[id(message)] = facts
        if message.origin != "original":
            if len(_BY_CONTENT) >= _MAX_BY_CONTENT:
                _BY_CONTENT.clear()
            _BY_CONTENT[_content_key(message)] = facts
    with _CACHE_LOCK:
        for key, facts in known.items():
            _CACHE[key] = (weakref.ref(todo[key], _forget(key)), facts)


def _content_key(message: Message) -> tuple[str, str, tuple[str, ...]]:
    return message.role, message.text, tuple(c.arguments for c in message.tool_calls)


_TEXTS: dict[int, tuple[weakref.ref[Message], str]] = {}


def _forget_text(key: int) -> Any:
    def callback(_: weakref.ref[Message]) -> None:
        with _CACHE_LOCK:
            entry = _TEXTS.get(key)
            if entry is not None and entry[0]() is None:
                del _TEXTS[key]

    return callback


def searched_text(message: Message) -> str:
    """What the quality metrics search a message for: its text and its tool calls' arguments, one per line."""
    return "\n".join([message.text, *(c.arguments for c in message.tool_calls)])


def message_text(message: Message) -> str:
    """The message's `searched_text`, normalised (`normalize_text`); cached per message."""
    key = id(message)
    entry = _TEXTS.get(key)
    if entry is not None and entry[0]() is message:
        return entry[1]
    text = normalize_text(searched_text(message))
    with _CACHE_LOCK:
        _TEXTS[key] = (weakref.ref(message, _forget_text(key)), text)
    return text


def facts_of(messages: Iterable[Message]) -> dict[str, Fact]:
    """The union of the facts of several messages, by key (first mention wins)."""
    out: dict[str, Fact] = {}
    for message in messages:
        for key, fact in message_facts(message).items():
            if key not in out:
                out[key] = fact
    return out


def text_facts(text: str, *, constraints: bool = False) -> dict[str, Fact]:
    """The facts of a free text (e.g. a model's answer), by key."""
    out: dict[str, Fact] = {}
    for fact in extract_facts(text):
        out.setdefault(fact.key, fact)
    if constraints:
        for fact in extract_constraints(text):
            out.setdefault(fact.key, fact)
    return out


def clear_process_caches() -> None:
    """Forget what is shared across messages (classified tokens, facts of texts compactions wrote):
    the next extraction starts cold (for benchmarks; per-message caches go with their messages)."""
    with _CACHE_LOCK:
        _CLASSIFIED.clear()
        _BY_CONTENT.clear()
        text_words.cache_clear()
