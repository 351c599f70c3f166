"""Deterministic sample sessions: long, realistic coding-agent recordings with planted facts.

Each session is a coding agent working in a fictional Python repository: a system prompt, user
requests that change topic, assistant tool calls (`read_file`, `grep`, `run_tests`, `edit_file`,
`bash`) answered by large outputs (module sources, pytest runs with tracebacks, logs), failed
tool calls and their fixes, constraints stated by the user (pinned, importance 10), and a final
request the recording stops in the middle of. Facts are planted where they occur naturally (a
config value in a file, an exception in a test run, a host in a log, a ticket id in a request)
and each becomes a `Probe` whose expected answer appears literally in the session text; its
`from_call` is the index of the first call whose context contains the fact.

Everything is drawn from `random.Random(seed)` (and string-seeded children of it), so the same
seed always gives the same messages, hence the same content-hash session ids.

    python -m workbench.samples                 # regenerate datasets/samples/samples.jsonl.gz
    python -m workbench.samples --check         # verify the committed file is up to date
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.session import Message, Probe, Session, ToolCall

DEFAULT_SEED = 20250301
DEFAULT_N = 12
MIN_CALLS = 20
MAX_CALLS = 400
DATASET_FILE = "{name}.jsonl.gz"
MODEL = "gpt-4.1-2025-04-14"
#: The recorded agent compacts its own context (as Claude Code's auto-compact does) before a call
#: when the context passes this many tokens by its own count (characters / 4): the summary it
#: continued from and the point are recorded in `metadata["recorded_compactions"]`, so `as-recorded`
#: replays them. About 21k cl100k tokens: the replay of the agent's compactions fits a 32k window.
AUTO_COMPACT_TOKENS = 16_000

# --------------------------------------------------------------------------------------------
# The fictional repositories
# --------------------------------------------------------------------------------------------

PROJECTS: tuple[dict[str, Any], ...] = (
    {
        "package": "ledgerly",
        "about": "an invoicing and billing service",
        "ticket": "LEDG",
        "modules": ("invoice", "tax", "currency", "payments", "customers", "reports", "webhooks"),
        "nouns": ("invoice", "amount", "rate", "customer", "line", "payment", "refund", "currency"),
    },
    {
        "package": "tracelog",
        "about": "a structured log parser and shipper",
        "ticket": "TRC",
        "modules": ("parser", "reader", "filters", "sinks", "schema", "buffer", "cli"),
        "nouns": ("record", "header", "field", "batch", "offset", "level", "sink", "pattern"),
    },
    {
        "package": "shipyard",
        "about": "a deployment orchestration CLI",
        "ticket": "SHIP",
        "modules": ("deploy", "config", "hosts", "rollout", "health", "secrets", "plan"),
        "nouns": ("host", "release", "target", "step", "manifest", "probe", "secret", "window"),
    },
    {
        "package": "geofence",
        "about": "a geospatial alerting API",
        "ticket": "GEO",
        "modules": ("zones", "points", "alerts", "storage", "tiles", "auth", "routes"),
        "nouns": ("zone", "point", "alert", "tile", "polygon", "radius", "token", "region"),
    },
)

VERBS = (
    "load",
    "parse",
    "validate",
    "compute",
    "render",
    "apply",
    "resolve",
    "merge",
    "normalize",
    "fetch",
    "build",
    "emit",
    "flush",
    "split",
    "format",
    "collect",
    "refresh",
    "encode",
)
ATTRS = ("name", "value", "created_at", "status", "kind", "size", "owner", "tags", "source", "limit")
EXCEPTIONS = (
    ("KeyError", "'{noun}_code'"),
    ("TypeError", "unsupported operand type(s) for +: 'NoneType' and 'int'"),
    ("AttributeError", "'NoneType' object has no attribute '{attr}'"),
    ("ValueError", "invalid literal for int() with base 10: '{noun}-{num}'"),
    ("IndexError", "list index out of range"),
    ("ZeroDivisionError", "division by zero"),
    ("AssertionError", "assert {num} == {num2}"),
)
DECISIONS = (
    ("serialization", ("orjson", "msgspec", "ujson")),
    ("HTTP calls", ("httpx", "aiohttp", "urllib3")),
    ("structured logging", ("structlog", "loguru")),
    ("retries", ("tenacity", "backoff")),
    ("configuration parsing", ("pydantic-settings", "dynaconf")),
)
SEPARATOR = "_ " * 39 + "_"
LINT_FINDINGS = (
    "E501 Line too long (104 > 100)",
    "F401 `os` imported but unused",
    "B006 Do not use mutable data structures for argument defaults",
    "SIM108 Use ternary operator instead of `if`-`else`-block",
)
HOST_WORDS = ("db", "cache", "gw", "queue", "auth", "search", "metrics")
ENVS = ("staging", "prod", "qa", "canary")

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository, with line numbers.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Path relative to the repository root."}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "Search the repository for a regular expression.",
            "parameters": {
                "type": "object",
                "properties": {"pattern": {"type": "string"}, "path": {"type": "string", "default": "."}},
                "required": ["pattern"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run pytest with the given arguments and return its output.",
            "parameters": {"type": "object", "properties": {"args": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": "Replace one exact occurrence of old_str by new_str in a file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                },
                "required": ["path", "old_str", "new_str"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository and return stdout and stderr.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
)

SYSTEM_PROMPT = """You are an autonomous software engineering agent working in the repository at /workspace/{package}, \
{about} written in Python 3.11.

You act through tools: read_file (read a file with line numbers), grep (search the repository), run_tests \
(run pytest), edit_file (replace one exact occurrence of a string in a file) and bash (run a shell command). \
Every tool call returns its output in the next message.

Working rules:
- Understand before you change: read the relevant code and reproduce a failure before fixing it.
- Make the smallest change that solves the problem, keep the existing style, and do not reformat unrelated code.
- After every change, run the tests that cover it; before you finish a task, run the whole suite.
- When a tool call fails, read the error, adjust the call and try again; never repeat the same failing call.
- Never invent file contents or test results: quote what the tools returned.
- The user may state constraints during the session; they hold until the user revokes them.
- When a task is done, reply with a short summary of what changed, which files you touched and how you verified it.

Repository layout: src/{package}/ (the package), tests/ (pytest suite), migrations/ (database migrations, \
applied in production), config/ (settings per environment), docs/ and scripts/."""


# --------------------------------------------------------------------------------------------
# Text builders (pure functions of a Random)
# --------------------------------------------------------------------------------------------


def _camel(*words: str) -> str:
    return "".join(w.capitalize() for w in words)


def _module_source(
    rng: random.Random,
    package: str,
    module: str,
    nouns: Sequence[str],
    functions: Sequence[str],
    constants: dict[str, str],
) -> list[str]:
    """A plausible Python module as a list of lines."""
    noun = rng.choice(nouns)
    cls = _camel(noun, rng.choice(("record", "config", "client", "state", "entry")))
    others = [m for m in ("utils", "errors", "models", "settings") if m != module]
    lines = [
        f'"""{module.capitalize()} handling for {package}: {rng.choice(VERBS)} and {rng.choice(VERBS)} {noun}s."""',
        "",
        "from __future__ import annotations",
        "",
        "import logging",
        *sorted(
            rng.sample(
                [
                    "import json",
                    "import time",
                    "import re",
                    "import os",
                    "import itertools",
                    "from collections import defaultdict",
                    "from decimal import Decimal",
                ],
                3,
            )
        ),
        "from dataclasses import dataclass, field",
        "",
        f"from {package}.{rng.choice(others)} import {rng.choice(VERBS)}_{rng.choice(nouns)}",
        f"from {package}.errors import {_camel(module, 'error')}",
        "",
        "log = logging.getLogger(__name__)",
        "",
    ]
    for name, value in constants.items():
        lines.append(f"{name} = {value}")
    lines += ["", "", "@dataclass", f"class {cls}:", f'    """One {noun} as stored by the {module} module."""', ""]
    attrs = rng.sample(ATTRS, 4)
    types = ("str", "int", "float | None", "list[str]", "dict[str, str]")
    for attr in attrs:
        t = rng.choice(types)
        default = {
            "str": '""',
            "int": "0",
            "float | None": "None",
            "list[str]": "field(default_factory=list)",
            "dict[str, str]": "field(default_factory=dict)",
        }[t]
        lines.append(f"    {attr}: {t} = {default}")
    lines += [
        "",
        "    def is_valid(self) -> bool:",
        f"        return bool(self.{attrs[0]}) and self.{attrs[1]} is not None",
        "",
    ]
    for fn in functions:
        arg = rng.choice(nouns)
        helper = f"{rng.choice(VERBS)}_{rng.choice(nouns)}"
        attr = rng.choice(attrs)
        lines += [
            "",
            f"def {fn}({arg}s: list[{cls}], *, strict: bool = False) -> list[{cls}]:",
            f'    """{fn.replace("_", " ").capitalize()} for each {arg}; `strict` raises on the first bad one."""',
        ]
        body = rng.choice(
            (
                [
                    f"    result: list[{cls}] = []",
                    f"    for item in {arg}s:",
                    f"        if item.{attr} is None:",
                    "            if strict:",
                    f'                raise {_camel(module, "error")}(f"{fn}: {{item!r}} has no {attr}")',
                    "            continue",
                    "        result.append(item)",
                    f'    log.debug("{fn}: kept %d of %d", len(result), len({arg}s))',
                    "    return result",
                ],
                [
                    "    seen = set()",
                    "    out = []",
                    f"    for item in sorted({arg}s, key=lambda i: i.{attr}):",
                    f"        key = (item.{attr}, item.{attrs[0]})",
                    "        if key in seen:",
                    "            continue",
                    "        seen.add(key)",
                    "        out.append(item)",
                    "    return out",
                ],
                [
                    "    groups = defaultdict(list)",
                    f"    for item in {arg}s:",
                    f"        groups[item.{attr}].append(item)",
                    "    merged = []",
                    "    for key, items in groups.items():",
                    "        if strict and len(items) > 1:",
                    f'            raise {_camel(module, "error")}(f"duplicate {attr} {{key!r}}")',
                    "        merged.append(items[-1])",
                    "    return merged",
                ],
                [
                    "    started = time.monotonic()",
                    f"    valid = [i for i in {arg}s if i.is_valid()]",
                    f"    if strict and len(valid) != len({arg}s):",
                    f'        raise {_camel(module, "error")}("{fn}: invalid {arg}s")',
                    f'    log.info("{fn} took %.3fs", time.monotonic() - started)',
                    "    return valid",
                ],
                [
                    f"    if not {arg}s:",
                    "        return []",
                    f"    first, *rest = {arg}s",
                    "    for item in rest:",
                    f"        if item.{attr} != first.{attr} and strict:",
                    f'            raise {_camel(module, "error")}("mixed {attr}")',
                    "    return [first, *rest]",
                ],
            )
        )
        lines += body
        if rng.random() < 0.35:
            lines += [
                "",
                "",
                f"def _{helper}(value: str) -> str:",
                "    value = value.strip()",
                "    if not value:",
                f'        raise ValueError("{helper}: empty value")',
                "    return value.lower()",
            ]
    return lines


def _test_source(rng: random.Random, package: str, module: str, functions: Sequence[str]) -> list[str]:
    lines = ["import pytest", "", f"from {package}.{module} import {', '.join(functions[:4])}", ""]
    for fn in functions:
        for case in rng.sample(("empty", "single", "strict", "duplicates", "ordering"), 2):
            lines += [
                "",
                f"def test_{fn}_{case}(make_items):",
                f"    items = make_items({rng.randint(0, 12)}, kind={case!r})",
            ]
            if case == "strict":
                lines += ["    with pytest.raises(Exception):", f"        {fn}(items, strict=True)"]
            else:
                lines += [f"    result = {fn}(items)", "    assert len(result) <= len(items)"]
    return lines


def _numbered(lines: Sequence[str], start: int = 1) -> str:
    return "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(lines, start))


def _pytest_header(rng: random.Random, package: str, collected: int) -> list[str]:
    return [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0",
        f"rootdir: /workspace/{package}",
        "configfile: pyproject.toml",
        f"plugins: cov-5.0.0, xdist-3.6.1, timeout-2.3.{rng.randint(0, 3)}",
        f"collected {collected} items",
        "",
    ]


def _dots(rng: random.Random, files: Sequence[str], fail_in: str | None = None) -> tuple[list[str], int]:
    lines, total = [], 0
    for path in files:
        n = rng.randint(4, 30)
        total += n
        marks = "." * n
        if path == fail_in:
            k = rng.randrange(n)
            marks = marks[:k] + "F" + marks[k + 1 :]
        lines.append(f"{path} {marks:<40} [{min(99, total * 3)}%]")
    return lines, total


def _log_lines(rng: random.Random, package: str, count: int, planted: str | None = None) -> list[str]:
    levels = ("INFO", "INFO", "INFO", "DEBUG", "WARNING", "INFO", "ERROR")
    lines = []
    second = rng.randint(0, 3000)
    day = rng.randint(3, 6)
    plant_at = rng.randrange(count // 3, count) if planted else -1
    for i in range(count):
        second += rng.randint(0, 4)
        stamp = (
            f"2025-03-{day:02d} {9 + second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d},"
            f"{rng.randint(0, 999):03d}"
        )
        level = rng.choice(levels)
        if i == plant_at:
            lines.append(f"{stamp} ERROR   {package}.worker: {planted}")
            continue
        what = rng.choice(
            (
                f"processed batch id={rng.randint(1000, 9999)} size={rng.choice((50, 100, 250, 500))} "
                f"in {rng.random() * 2:.2f}s",
                f"cache {'hit' if rng.random() < 0.7 else 'miss'} key={rng.choice(VERBS)}:{rng.randint(1, 99999)}",
                f"GET /api/v{rng.randint(1, 2)}/{rng.choice(VERBS)} {rng.choice((200, 200, 200, 204, 404, 500))} "
                f"{rng.randint(3, 900)}ms",
                f"retrying request attempt={rng.randint(1, 3)} backoff={rng.choice((0.5, 1, 2, 4))}s",
                f"connection pool size={rng.randint(2, 32)} in_use={rng.randint(0, 16)}",
                f"scheduled job {rng.choice(VERBS)}_{rng.choice(ATTRS)} next_run_in={rng.randint(5, 600)}s",
            )
        )
        lines.append(f"{stamp} {level:<7} {package}.{rng.choice(('worker', 'api', 'db', 'scheduler'))}: {what}")
    return lines


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------


@dataclass
class _Builder:
    """Accumulates messages, counts calls and records probes as facts are planted."""

    rng: random.Random
    seed: int
    calls: int
    project: dict[str, Any]
    messages: list[Message] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    files: dict[str, list[str]] = field(default_factory=dict)
    functions: dict[str, list[str]] = field(default_factory=dict)
    edited: set[str] = field(default_factory=set)
    made: int = 0  # assistant messages so far
    chars: int = 0  # running context size as the agent saw it, for the recorded usage
    call_counter: int = 0
    kept_chars: int = 0  # what survives the agent's compactions: the system prompt and pinned messages
    compactions: list[dict[str, Any]] = field(default_factory=list)

    # -- repository state -----------------------------------------------------------------
    @property
    def package(self) -> str:
        return str(self.project["package"])

    def module_path(self, module: str) -> str:
        return f"src/{self.package}/{module}.py"

    def module_functions(self, module: str) -> list[str]:
        if module not in self.functions:
            rng = random.Random(f"{self.seed}:functions:{module}")
            nouns = self.project["nouns"]
            names: list[str] = []
            while len(names) < rng.randint(3, 6):
                name = f"{rng.choice(VERBS)}_{rng.choice(nouns)}s"
                if name not in names:
                    names.append(name)
            self.functions[module] = names
        return self.functions[module]

    def file(self, path: str) -> list[str]:
        if path not in self.files:
            rng = random.Random(f"{self.seed}:file:{path}")
            if path.startswith("tests/test_"):
                module = path[len("tests/test_") : -3]
                self.files[path] = _test_source(rng, self.package, module, self.module_functions(module))
            else:
                module = Path(path).stem
                self.files[path] = _module_source(
                    rng, self.package, module, self.project["nouns"], self.module_functions(module), {}
                )
        return self.files[path]

    def set_constant(self, module: str, name: str, value: str) -> None:
        """Plant `NAME = value` in a module's source (before it is first read)."""
        lines = self.file(self.module_path(module))
        for i, line in enumerate(lines):
            if line.startswith(f"{name} = "):
                lines[i] = f"{name} = {value}"
                return
        at = next(i for i, line in enumerate(lines) if line.startswith("log = "))
        lines[at + 1 : at + 1] = [f"{name} = {value}"]

    # -- messages ---------------------------------------------------------------------------
    def add(self, message: Message) -> Message:
        self.messages.append(message)
        size = len(message.text) + sum(len(c.arguments) for c in message.tool_calls)
        self.chars += size
        if message.role == "system" or message.importance >= 10:
            self.kept_chars += size
        return message

    def compact_if_full(self) -> None:
        """The agent's own auto-compaction before the next call, recorded as an annotation: the
        history stays whole; the agent's context (its recorded usage) restarts from the summary."""
        if self.made == 0 or self.chars // 4 < AUTO_COMPACT_TOKENS:
            return
        summary = self.agent_summary()
        self.compactions.append(
            {
                "call_index": self.made,
                "message_index": len(self.messages),
                "trigger": "auto",
                "tokens_before": self.chars // 4 + 1,
                "summary": summary,
            }
        )
        self.chars = self.kept_chars + len(summary)

    def agent_summary(self) -> str:
        """What the agent wrote when it compacted: the task, the requests, the files, what it did last."""
        requests = [m.text for m in self.messages if m.role == "user" and m.importance < 10]
        pinned = [m.text for m in self.messages if m.role == "user" and m.importance >= 10]
        first = self.messages[1].text if len(self.messages) > 1 else ""
        read = list(dict.fromkeys(self.files))[-8:]
        last_tool = next((m for m in reversed(self.messages) if m.role == "tool"), None)
        lines = [
            f"This session continues an earlier conversation about /workspace/{self.package} that ran out "
            "of context. Summary of the work so far:",
            f"1. The session's first request: {first[:300]}",
            f"2. The current request: {requests[-1][:300] if requests else first[:300]}",
            f"3. Constraints in force: {'; '.join(p.splitlines()[0][:160] for p in pinned) or 'none stated'}",
            f"4. Files looked at: {', '.join(read) or 'none yet'}",
            f"5. Files changed: {', '.join(sorted(self.edited)) or 'none yet'}",
        ]
        if last_tool is not None:
            tail = last_tool.text.strip().splitlines()[-1][:200] if last_tool.text.strip() else ""
            lines.append(f"6. Last step: {last_tool.name} returned: {tail}")
        lines.append("Continue from here without asking the user to repeat anything.")
        return "\n".join(lines)

    def plant(self, text: str, expected: str, question: str, kind: str) -> None:
        """Record a probe for a fact in `text`, the message about to be added (checked literally)."""
        if expected not in text:  # a generator bug, never user input
            raise AssertionError(f"planted answer {expected!r} is not in the message")
        if self.made < self.calls:
            self.probes.append(Probe(question=question, expected=expected, kind=kind, from_call=self.made))

    def user(self, text: str, importance: float = 0.0) -> None:
        self.add(Message(role="user", content=text, importance=importance))

    def call_id(self) -> str:
        self.call_counter += 1
        return f"call_{self.rng.getrandbits(48):012x}{self.call_counter:03d}"

    def assistant(self, text: str | None, calls: Sequence[tuple[str, dict[str, Any]]] = ()) -> list[str]:
        self.compact_if_full()
        tool_calls = tuple(
            ToolCall(id=self.call_id(), name=name, arguments=json.dumps(args, ensure_ascii=False))
            for name, args in calls
        )
        completion = (len(text or "") + sum(len(c.arguments) for c in tool_calls)) // 4 + 1
        usage = {"prompt_tokens": self.chars // 4 + 1, "completion_tokens": completion}
        finish = "tool_calls" if tool_calls else "stop"
        self.add(
            Message(
                role="assistant",
                content=text,
                tool_calls=tool_calls,
                metadata={"model": MODEL, "usage": usage, "finish_reason": finish},
            )
        )
        self.made += 1
        return [c.id for c in tool_calls]

    def result(self, call_id: str, name: str, text: str, importance: float = 0.0) -> None:
        self.add(Message(role="tool", content=text, tool_call_id=call_id, name=name, importance=importance))

    @property
    def left(self) -> int:
        return self.calls - self.made

    # -- one tool call with its result ------------------------------------------------------
    def act(
        self,
        thought: str | None,
        name: str,
        args: dict[str, Any],
        output: str,
        importance: float = 0.0,
        plant: tuple[str, str, str] | None = None,
    ) -> None:
        (cid,) = self.assistant(thought, [(name, args)])
        if plant:
            self.plant(output, *plant)
        self.result(cid, name, output, importance)

    def read(self, path: str, thought: str | None = None, plant: tuple[str, str, str] | None = None) -> None:
        lines = self.file(path)
        self.act(
            thought
            or self.rng.choice(
                (
                    f"Let me look at {path}.",
                    f"Reading {path} first.",
                    f"I need to see how {Path(path).stem} is implemented.",
                    None,
                )
            ),
            "read_file",
            {"path": path},
            _numbered(lines),
            plant=plant,
        )

    def grep(self, pattern: str, thought: str | None = None) -> None:
        for module in self.project["modules"]:
            if pattern in self.module_functions(module):
                self.file(self.module_path(module))
                self.file(f"tests/test_{module}.py")
        hits = []
        for path in sorted(self.files):
            for i, line in enumerate(self.files[path], 1):
                if pattern in line:
                    hits.append(f"{path}:{i}:{line}")
        output = "\n".join(hits[:60]) if hits else "(no matches)"
        self.act(thought or f"Searching for `{pattern}`.", "grep", {"pattern": pattern, "path": "."}, output)

    def bash(
        self,
        command: str,
        output: str,
        thought: str | None = None,
        importance: float = 0.0,
        plant: tuple[str, str, str] | None = None,
    ) -> None:
        self.act(thought or f"Running `{command}`.", "bash", {"command": command}, output, importance, plant)

    def test_files(self, k: int) -> list[str]:
        modules = list(self.project["modules"])
        return [f"tests/test_{m}.py" for m in sorted(self.rng.sample(modules, min(k, len(modules))))]

    def run_tests(
        self,
        args: str,
        failure: tuple[str, str, str, str] | None = None,
        thought: str | None = None,
        plant: tuple[str, str, str] | None = None,
    ) -> None:
        """failure: (test file, test name, module path, 'Exception: message')."""
        files = self.test_files(self.rng.randint(3, 6))
        if failure and failure[0] not in files:
            files = sorted([*files[:-1], failure[0]])
        dots, total = _dots(self.rng, files, failure[0] if failure else None)
        out = _pytest_header(self.rng, self.package, total) + dots + [""]
        seconds = f"{self.rng.uniform(0.6, 9):.2f}s"
        if failure:
            test_file, test_name, module_path, error = failure
            fn = test_name[len("test_") :].rsplit("_", 1)[0]
            lineno = self.rng.randint(40, 140)
            out += [
                "=================================== FAILURES ===================================",
                f"{'_' * 20} {test_name} {'_' * 20}",
                "",
                "make_items = <function make_items.<locals>.factory at 0x7f3a2c1e5d30>",
                "",
                f"    def {test_name}(make_items):",
                f"        items = make_items({self.rng.randint(1, 9)}, kind='single')",
                f">       result = {fn}(items)",
                "",
                f"{test_file}:{self.rng.randint(8, 60)}: ",
                SEPARATOR,
                "",
                f"    def {fn}(items, *, strict=False):",
                "        result = []",
                "        for item in items:",
                ">           key = normalize(item)",
                "",
                f"{module_path}:{lineno}: ",
                SEPARATOR,
                "",
                f"E   {error}",
                "",
                f"{module_path}:{lineno + self.rng.randint(3, 30)}: {error.split(':')[0]}",
                "----------------------------- Captured log call ------------------------------",
                *_log_lines(self.rng, self.package, self.rng.randint(3, 8)),
                "=========================== short test summary info ============================",
                f"FAILED {test_file}::{test_name} - {error}",
                f"{'=' * 24} 1 failed, {total - 1} passed in {seconds} {'=' * 24}",
            ]
        else:
            out.append(f"{'=' * 30} {total} passed in {seconds} {'=' * 30}")
        self.act(
            thought or f"Running the tests: `pytest {args}`.", "run_tests", {"args": args}, "\n".join(out), plant=plant
        )

    def edit(
        self,
        path: str,
        thought: str,
        *,
        mode: str = "guard",
        function: str | None = None,
        fail: bool = False,
        plant: tuple[str, str, str] | None = None,
    ) -> tuple[str, str]:
        """Edit `path`: `guard` adds a None check before a line of `function`'s loop (a fix);
        `append` adds `function` at the end of the file (a feature). Returns (old_str, new_str)."""
        lines = self.file(path)
        if mode == "append":
            at = len(lines) - 2
            old = "\n".join(lines[at:])
            new_lines = [
                *lines[at:],
                "",
                "",
                f"def {function}(items, *, limit=None):",
                f'    """{(function or "items").replace("_", " ").capitalize()}: at most `limit` items, '
                'newest first."""',
                "    ordered = sorted(items, key=lambda i: i.created_at, reverse=True)",
                "    return ordered if limit is None else ordered[:limit]",
            ]
        else:
            start = next((i for i, line in enumerate(lines) if function and line.startswith(f"def {function}(")), 0)
            loop = [i for i in range(start + 1, len(lines)) if lines[i].startswith("        ")]
            at = loop[0] if loop else next(i for i in range(start + 1, len(lines)) if lines[i].startswith("    "))
            old = lines[at]
            indent = old[: len(old) - len(old.lstrip())]
            new_lines = [f"{indent}if item is None:", f"{indent}    continue", old]
        new = "\n".join(new_lines)
        if fail:
            wrong = old.replace("    ", "  ", 1)
            self.act(
                thought,
                "edit_file",
                {"path": path, "old_str": wrong, "new_str": new},
                f"Error: old_str not found in {path}; no changes made. Check whitespace: the file is "
                f"indented with 4 spaces.",
            )
            thought = "The indentation was wrong; retrying with the exact text."
        count = len(old.split("\n"))
        lines[at : at + count] = new_lines
        self.edited.add(path)
        self.act(
            thought,
            "edit_file",
            {"path": path, "old_str": old, "new_str": new},
            f"Edited {path}: replaced 1 occurrence at line {at + 1}.\n"
            + _numbered(lines[max(0, at - 3) : at + len(new_lines) + 3], max(1, at - 2)),
            plant=plant,
        )
        return old, new


# --------------------------------------------------------------------------------------------
# Topics: each one is a user request and the agent's work on it
# --------------------------------------------------------------------------------------------


def _explore(b: _Builder, n: int, module: str) -> None:
    """`n` calls of looking around, mostly near `module`: reads (sometimes two at once), greps,
    partial test runs, lint, logs, git; some of them fail and are retried differently."""
    rng = b.rng
    related = [module, *rng.sample([m for m in b.project["modules"] if m != module], 2)]
    last = ""
    for _ in range(n):
        roll = rng.random()
        if roll < 0.28:
            path = b.module_path(rng.choice(related)) if rng.random() < 0.8 else f"tests/test_{module}.py"
            if path == last:
                path = f"tests/test_{rng.choice(related)}.py"
            b.read(path)
            last = path
        elif roll < 0.38:
            a, c = rng.sample(related, 2)
            paths = [b.module_path(a), f"tests/test_{c}.py"]
            ids = b.assistant(
                rng.choice(
                    (
                        f"Reading {paths[0]} and {paths[1]} together.",
                        f"I want to compare {paths[0]} with how {paths[1]} uses it.",
                    )
                ),
                [("read_file", {"path": p}) for p in paths],
            )
            for cid, p in zip(ids, paths, strict=False):
                b.result(cid, "read_file", _numbered(b.file(p)))
        elif roll < 0.55:
            fn = rng.choice(b.module_functions(rng.choice(related)))
            b.grep(
                fn,
                rng.choice(
                    (
                        f"Where else is `{fn}` used?",
                        f"Searching for `{fn}`.",
                        f"Checking the callers of `{fn}` before changing anything.",
                    )
                ),
            )
        elif roll < 0.61:
            missing = f"src/{b.package}/{rng.choice(('helpers', 'util', 'common'))}.py"
            b.act(
                f"The helper is probably in {missing}.",
                "read_file",
                {"path": missing},
                f"Error: file not found: {missing}",
            )
        elif roll < 0.67:
            script = f"scripts/check_{module}.py"
            b.bash(
                f"python {script}",
                "\n".join(
                    [
                        "Traceback (most recent call last):",
                        f'  File "/workspace/{b.package}/{script}", line {rng.randint(3, 40)}, in <module>',
                        f"    from {b.package}.{module} import {b.module_functions(module)[0]}",
                        f'  File "/workspace/{b.package}/src/{b.package}/{module}.py", '
                        f"line {rng.randint(5, 15)}, in <module>",
                        "    import yaml",
                        "ModuleNotFoundError: No module named 'yaml'",
                        "",
                        "[exit code 1]",
                    ]
                ),
                thought=f"Trying the check script for {module}.",
            )
        elif roll < 0.75:
            tests = f"tests/test_{module}.py"
            b.run_tests(f"{tests} -q", thought=f"Running {tests} to see the current state.")
        elif roll < 0.81:
            b.bash(
                f"ruff check src/{b.package}/{module}.py",
                "\n".join(
                    [
                        f"src/{b.package}/{module}.py:{rng.randint(10, 120)}:{rng.randint(1, 60)}: "
                        f"{rng.choice(LINT_FINDINGS)}"
                        for _ in range(rng.randint(1, 6))
                    ]
                    + ["Found issues. [*] fixable with `ruff check --fix`."]
                ),
                thought="Checking lint on the module.",
            )
        elif roll < 0.87:
            b.bash(
                "git log --oneline -n 15",
                "\n".join(
                    f"{rng.getrandbits(28):07x} {rng.choice(VERBS).capitalize()} {rng.choice(b.project['nouns'])} "
                    f"{rng.choice(('handling', 'validation', 'tests', 'docs', 'logging'))} ({b.project['ticket']}-"
                    f"{rng.randint(100, 999)})"
                    for _ in range(15)
                ),
                thought="What changed recently?",
            )
        elif roll < 0.94:
            b.bash(
                f"tail -n 120 logs/{rng.choice(('worker', 'api'))}.log",
                "\n".join(_log_lines(rng, b.package, 120)),
                importance=-2.0,
                thought="Checking the recent log output.",
            )
        else:
            b.bash(
                "git status --short",
                "\n".join(f" M {p}" for p in sorted(b.edited)) or "(no output)",
                thought="Which files did I change so far?",
            )


def _topic_fix(b: _Builder, budget: int, module: str, final: bool) -> None:
    rng = b.rng
    fn = rng.choice(b.module_functions(module))
    test_name = f"test_{fn}_{rng.choice(('empty', 'single', 'ordering', 'duplicates'))}"
    test_file = f"tests/test_{module}.py"
    kind, template = rng.choice(EXCEPTIONS)
    error = f"{kind}: " + template.format(
        noun=rng.choice(b.project["nouns"]), attr=rng.choice(ATTRS), num=rng.randint(2, 99), num2=rng.randint(100, 999)
    )
    b.user(
        rng.choice(
            (
                f"{test_file}::{test_name} started failing after yesterday's merge. Can you find out why and fix it?",
                f"CI is red: {test_name} in {test_file} fails. Please fix the code, not the test.",
                f"Please look into the failing {test_name}; it blocks the release.",
            )
        )
    )
    if b.left <= 0:
        return
    b.run_tests(
        f"{test_file} -x",
        failure=(test_file, test_name, b.module_path(module), error),
        plant=(error, f"Which error did {test_name} fail with before it was fixed?", "recall"),
    )
    _explore(b, max(0, min(budget, b.left) - 4 - (0 if final else 1)), module)
    if b.left <= 0:
        return
    b.read(b.module_path(module), f"The traceback points into {b.module_path(module)}; reading it.")
    if b.left <= 0:
        return
    path = b.module_path(module)
    old, new = b.edit(
        path,
        f"The bug is in `{fn}`: it does not skip missing items. Fixing it in {path}.",
        function=fn,
        fail=rng.random() < 0.25 and b.left >= 4,
        plant=(path, f"Which file was changed to fix {test_name}?", "artifact"),
    )
    if b.left <= 0:
        return
    b.run_tests(f"{test_file} -x", thought="Re-running the failing test.")
    if b.left <= 0 or final:
        return
    b.assistant(
        f"Fixed {test_name}: `{fn}` in {path} raised `{error}` on missing items; it now skips them "
        f"before `{old.strip()}`. The tests in {test_file} pass now."
    )


def _topic_feature(b: _Builder, budget: int, module: str, final: bool) -> None:
    rng = b.rng
    noun = rng.choice(b.project["nouns"])
    new_fn = f"{rng.choice(VERBS)}_{noun}_{rng.choice(('summary', 'index', 'preview', 'batch', 'snapshot'))}"
    flag = f"--{rng.choice(('dry-run', 'since', 'limit', 'format', 'verbose-diff'))}"
    request = (
        f"add a function `{new_fn}` to src/{b.package}/{module}.py and expose it through a `{flag}` option of the CLI."
    )
    text = rng.choice(
        (
            f"Next, {request}",
            f"New task: {request} Keep it small.",
            f"{request} The product team needs it for the {rng.choice(ENVS)} demo.",
        )
    )
    if final:
        b.plant(text, new_fn, "What was the agent asked to implement last (the task in progress)?", "continuation")
    b.user(text)
    _explore(b, max(0, min(budget, b.left) - 2 - (0 if final else 1)), module)
    if b.left <= 0:
        return
    path = b.module_path(module)
    b.edit(
        path,
        f"Adding `{new_fn}` next to the existing helpers in {path}.",
        mode="append",
        function=new_fn,
        plant=(new_fn, f"Which function was added to support the {flag} option?", "artifact"),
    )
    if b.left <= 0:
        return
    b.run_tests("-x -q", thought="Checking that nothing else broke.")
    if b.left <= 0 or final:
        return
    b.assistant(f"Added `{new_fn}` to {path} and wired the `{flag}` option; the suite passes.")


def _topic_logs(b: _Builder, budget: int, module: str, final: bool) -> None:
    rng = b.rng
    env = rng.choice(ENVS)
    host = f"{rng.choice(HOST_WORDS)}-{env}-{rng.randint(2, 9)}.internal:{rng.randint(4000, 9999)}"
    timeout = rng.choice((15, 20, 30, 45, 60))
    const = f"{rng.choice(('UPSTREAM', 'REQUEST', 'GATEWAY'))}_TIMEOUT_SECONDS"
    b.set_constant(module, const, str(timeout))
    b.user(
        rng.choice(
            (
                f"The {env} workers keep timing out since this morning. Can you check the logs and "
                f"tell me what is going on?",
                f"We get intermittent timeouts in {env}. Investigate, don't change anything yet.",
            )
        )
    )
    if b.left <= 0:
        return
    incident = f"upstream {host} timed out after {timeout}s (request id {rng.getrandbits(32):08x})"
    b.bash(
        f"tail -n 200 logs/{env}-worker.log",
        "\n".join(_log_lines(rng, b.package, 200, planted=incident)),
        thought="Looking at the worker log first.",
        importance=-1.0,
        plant=(host, f"Which upstream host timed out in the {env} worker logs?", "recall"),
    )
    _explore(b, max(0, min(budget, b.left) - 2 - (0 if final else 1)), module)
    if b.left <= 0:
        return
    b.read(
        b.module_path(module),
        f"The timeout value should be configured in {b.module_path(module)}.",
        plant=(f"{const} = {timeout}", f"What is {const} set to in {b.module_path(module)}?", "recall"),
    )
    if b.left <= 0 or final:
        return
    b.assistant(
        f"The {env} workers time out calling {host}: `{const} = {timeout}` in "
        f"{b.module_path(module)} is shorter than the upstream's p99 latency during its batch window. "
        f"Raising it or adding a retry with backoff would fix it; I changed nothing, as asked."
    )


def _topic_question(b: _Builder, budget: int, module: str, final: bool) -> None:
    rng = b.rng
    fn = rng.choice(b.module_functions(module))
    b.user(
        rng.choice(
            (
                f"Quick question: where is `{fn}` used, and is it safe to make `strict` the default?",
                f"Before we go on: what does `{fn}` do with duplicates?",
            )
        )
    )
    if b.left > 0:
        b.grep(fn, f"Looking for every use of `{fn}`.")
    _explore(b, max(0, min(budget, b.left) - 1), module)
    if b.left <= 0 or final:
        return
    b.assistant(
        f"`{fn}` lives in {b.module_path(module)}. It keeps the last item per key and only raises "
        f"when `strict=True`; callers in the CLI rely on the lenient default, so changing it would be "
        f"a breaking change."
    )


CONSTRAINTS = (
    (
        "Never touch anything under migrations/ — those files are applied in production.",
        "migrations/",
        "Which directory must the agent never modify?",
    ),
    (
        "From now on always run the tests with `pytest -x` so we stop at the first failure.",
        "pytest -x",
        "Which command did the user require for running the tests?",
    ),
    (
        "The public API must stay backward compatible: no renamed functions and no changed signatures.",
        "backward compatible",
        "What did the user require of the public API?",
    ),
    (
        "Please add no new dependencies; we only have the standard library and requests.",
        "no new dependencies",
        "What did the user say about dependencies?",
    ),
    (
        "Keep the code compatible with Python 3.9: no match statements, no `X | Y` types at runtime.",
        "Python 3.9",
        "Which Python version must the code stay compatible with?",
    ),
)


def _constraint(b: _Builder, used: list[int]) -> None:
    choices = [i for i in range(len(CONSTRAINTS)) if i not in used]
    if not choices:
        return
    i = b.rng.choice(choices)
    used.append(i)
    text, expected, question = CONSTRAINTS[i]
    b.plant(text, expected, question, "decision")
    b.user(text, importance=10.0)


def _decision(b: _Builder) -> None:
    topic, libraries = b.rng.choice(DECISIONS)
    lib = b.rng.choice(libraries)
    text = (
        f"About {topic}: we decided in the design review to use {lib} from now on; please use {lib} for anything new."
    )
    b.plant(text, lib, f"Which library did the user decide to use for {topic}?", "decision")
    b.user(text, importance=b.rng.choice((0.0, 5.0, 10.0)))


TOPICS = (_topic_fix, _topic_fix, _topic_feature, _topic_logs, _topic_question)


def generate_session(seed: int, calls: int, dataset: str = "samples") -> Session:
    """One session with exactly `calls` assistant messages (calls >= 3), deterministic in `seed`."""
    if calls < 3:
        raise ValueError("a sample session needs at least 3 calls")
    rng = random.Random(seed)
    project = PROJECTS[rng.randrange(len(PROJECTS))]
    b = _Builder(rng=rng, seed=seed, calls=calls, project=project)
    ticket = f"{project['ticket']}-{rng.randint(1000, 9999)}"
    b.add(Message(role="system", content=SYSTEM_PROMPT.format(**project)))
    first = (
        f"Hi! Today we're working on {project['package']} ({project['about']}). Everything today goes "
        f"under ticket {ticket}; put it in every commit message."
    )
    b.plant(first, ticket, "Which ticket id must every commit message of this session mention?", "recall")
    b.user(first, importance=rng.choice((0.0, 10.0)))
    used: list[int] = []
    _constraint(b, used)
    decided = False
    while b.left > 0:
        final = b.left <= 10 or (b.left <= 30 and b.made > 8 and rng.random() < 0.3)
        budget = b.left if final else rng.randint(4, min(45, b.left))
        if not final and rng.random() < 0.3:
            _constraint(b, used)
        if not final and not decided and b.made > calls // 3:
            _decision(b)
            decided = True
        module = rng.choice(project["modules"])
        topic = _topic_feature if final else rng.choice(TOPICS)
        start = b.made
        topic(b, budget, module, final)
        if b.made == start and b.left > 0:  # a topic must make progress
            b.assistant("Understood.")
    session = Session.from_messages(
        b.messages,
        probes=b.probes,
        tools=TOOLS,
        dataset=dataset,
        format="openai",
        metadata={
            "generator": "workbench.samples",
            "seed": seed,
            "project": project["package"],
            "model": MODEL,
            **({"recorded_compactions": b.compactions} if b.compactions else {}),
        },
    )
    assert session.calls == calls, (session.calls, calls)
    return session


def dataset_sizes(n: int = DEFAULT_N, min_calls: int = MIN_CALLS, max_calls: int = MAX_CALLS) -> list[int]:
    """`n` call counts spread geometrically from `min_calls` to `max_calls`."""
    if n == 1:
        return [min_calls]
    ratio = (max_calls / min_calls) ** (1 / (n - 1))
    return [round(min_calls * ratio**i) for i in range(n)]


def generate_dataset(
    name: str = "samples",
    n: int = DEFAULT_N,
    seed: int = DEFAULT_SEED,
    min_calls: int = MIN_CALLS,
    max_calls: int = MAX_CALLS,
) -> list[Session]:
    """`n` sessions of `min_calls`..`max_calls` calls; session i uses seed `seed * 1000 + i`."""
    return [
        generate_session(seed * 1000 + i, calls, dataset=name)
        for i, calls in enumerate(dataset_sizes(n, min_calls, max_calls))
    ]


# --------------------------------------------------------------------------------------------
# Files: gzip JSONL, one session per line
# --------------------------------------------------------------------------------------------


def session_record(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "dataset": session.dataset,
        "messages": [m.to_openai(extras=True) for m in session.messages],
        "tools": [dict(t) for t in session.tools],
        "probes": [p.to_dict() for p in session.probes],
        "metadata": dict(session.metadata),
    }


def session_from_record(record: dict[str, Any], dataset: str | None = None) -> Session:
    return Session.from_messages(
        record["messages"],
        id=record.get("id"),
        probes=record.get("probes") or (),
        tools=tuple(record.get("tools") or ()),
        dataset=dataset or record.get("dataset") or "samples",
        format="openai",
        metadata=record.get("metadata") or {},
    )


def dataset_bytes(sessions: Iterable[Session]) -> bytes:
    """The gzip JSONL bytes of `sessions` (no timestamp or file name in the gzip header: reproducible)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as out:
        for session in sessions:
            out.write(json.dumps(session_record(session), ensure_ascii=False, separators=(",", ":")).encode())
            out.write(b"\n")
    return buffer.getvalue()


def write_dataset(sessions: Sequence[Session], folder: str | Path, name: str | None = None) -> Path:
    """Write `sessions` to `folder/<name>.jsonl.gz` (name: the sessions' dataset); returns the file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = name or (sessions[0].dataset if sessions else "samples")
    target = folder / DATASET_FILE.format(name=name)
    target.write_bytes(dataset_bytes(sessions))
    return target


def read_dataset(folder: str | Path, dataset: str | None = None) -> list[Session]:
    """Every session of the `*.jsonl.gz` / `*.jsonl` files in `folder` (or of one such file)."""
    folder = Path(folder)
    files = [folder] if folder.is_file() else sorted([*folder.glob("*.jsonl.gz"), *folder.glob("*.jsonl")])
    sessions = []
    for path in files:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    sessions.append(session_from_record(json.loads(line), dataset))
    return sessions


def bundled_folder() -> Path:
    """`datasets/samples` of the source tree (beside the `workbench` package)."""
    return Path(__file__).resolve().parents[1] / "datasets" / "samples"


def bundled_samples() -> list[Session]:
    """The bundled samples: read from `datasets/samples`, or regenerated when the folder is absent."""
    folder = bundled_folder()
    if folder.is_dir() and any(folder.glob("*.jsonl*")):
        return read_dataset(folder, "samples")
    return generate_dataset()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.samples", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(bundled_folder()), help="folder to write (default: datasets/samples)")
    parser.add_argument("--name", default="samples", help="dataset name and file stem")
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="number of sessions")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--min-calls", type=int, default=MIN_CALLS)
    parser.add_argument("--max-calls", type=int, default=MAX_CALLS)
    parser.add_argument("--check", action="store_true", help="only verify the file on disk is up to date")
    args = parser.parse_args(argv)
    sessions = generate_dataset(args.name, args.n, args.seed, args.min_calls, args.max_calls)
    data = dataset_bytes(sessions)
    target = Path(args.out) / DATASET_FILE.format(name=args.name)
    if args.check:
        if not target.is_file() or target.read_bytes() != data:
            print(f"{target} is out of date; run python -m workbench.samples", file=sys.stderr)
            return 1
        print(f"{target} is up to date")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    calls = [s.calls for s in sessions]
    print(
        f"wrote {target}: {len(sessions)} sessions, {sum(len(s.messages) for s in sessions)} messages, "
        f"calls {min(calls)}..{max(calls)}, {sum(len(s.probes) for s in sessions)} probes, "
        f"{len(data) / 1e6:.2f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
