"""The registry (DESIGN §5a): declared parameters validated in one place, the listing, every family's decorator."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from builders import conversation

import workbench as wb
from workbench import importers, registry
from workbench.config import parse_config
from workbench.errors import ConfigError
from workbench.registry import build, describe, evaluate_metrics, fresh, kinds, param, spec_of
from workbench.session import Message, Session
from workbench.strategies.windows import SlidingWindow

README = Path(__file__).resolve().parents[1] / "README.md"

# ------------------------------------------------------------------------------------------------
# validation: each error names the kind, the parameter, the value and what is valid

VALIDATION_ERRORS = [
    # (family, spec, fragments the message must hold)
    ("strategy", {"kind": "sliding_window", "window": 0}, ["'sliding_window'", "window", "0", "an integer >= 1"]),
    ("strategy", {"kind": "sliding_window", "window": 2.5}, ["'sliding_window'", "window", "2.5", "an integer"]),
    ("strategy", {"kind": "sliding_window", "window": True}, ["'sliding_window'", "window", "True"]),
    (
        "strategy",
        {"kind": "sliding_window"},
        ["'sliding_window'", "missing required parameter 'window'", "an integer >= 1"],
    ),
    (
        "strategy",
        {"kind": "trim", "keep_initial_user": "yes"},
        ["'trim'", "keep_initial_user", "'yes'", "true or false"],
    ),
    (
        "strategy",
        {"kind": "trim", "token_counter": "len/4"},
        ["'trim'", "unknown parameter 'token_counter'", "keep_recent_turns, keep_initial_user"],
    ),
    (
        "strategy",
        {"kind": "summarize_split", "preserve": 1.5},
        ["'summarize_split'", "preserve", "1.5", "within [0, 1]"],
    ),
    (
        "strategy",
        {"kind": "adaptive_chunking", "boundary": "paragraph"},
        ["'adaptive_chunking'", "boundary", "'paragraph'", "one of 'topic', 'count'"],
    ),
    ("strategy", {"kind": "summarize_full", "prompt": 3}, ["'summarize_full'", "prompt", "3", "a string"]),
    (
        "strategy",
        {"kind": "clear_tool_uses", "exclude_tools": ["bash", 3]},
        ["'clear_tool_uses'", "exclude_tools[1]", "3", "a string"],
    ),
    (
        "strategy",
        {"kind": "guard_select", "warn": {"kind": "hard_clear", "keep_recent": -1}},
        ["'guard_select'", "warn", "'hard_clear'", "keep_recent", "-1", ">= 1"],
    ),
    (
        "strategy",
        {"kind": "pipeline", "steps": [{"kind": "trim"}, {"kind": "nope"}]},
        ["'pipeline'", "steps[1]", "unknown strategy kind 'nope'", "sliding_window"],
    ),
    ("trigger", {"kind": "utilization", "ratio": 0}, ["'utilization'", "ratio", "0", "within (0, 1]"]),
    ("trigger", {"kind": "guard", "hard_limit": 100, "min_available": 100}, ["'guard'", "min_available"]),
    ("trigger", {"kind": "pressure", "tokens": "many"}, ["'pressure'", "tokens", "'many'", "or none"]),
    (
        "trigger",
        {"kind": "stat_threshold", "gauges": {"context_tokens": "big"}},
        ["'stat_threshold'", "gauges['context_tokens']", "'big'"],
    ),
    (
        "trigger",
        {"kind": "any", "triggers": [{"kind": "guard", "warn_threshold": 2}]},
        ["'any'", "triggers[0]", "'guard'", "warn_threshold", "2"],
    ),
    ("trigger", {"kind": "sometimes"}, ["unknown trigger kind 'sometimes'", "utilization"]),
    ("trigger", {"ratio": 0.5}, ["no 'kind'", "utilization"]),
]


@pytest.mark.parametrize(
    ("family", "spec", "fragments"), VALIDATION_ERRORS, ids=[repr(spec) for _, spec, _ in VALIDATION_ERRORS]
)
def test_validation_errors_name_kind_parameter_value_and_what_is_valid(family, spec, fragments):
    with pytest.raises(ConfigError) as info:
        build(family, spec)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize(
    ("spec", "field", "value"),
    [
        ({"kind": "sliding_window", "window": 3.0}, "window", 3),  # TOML's 3.0 for an int
        ({"kind": "summarize_split", "preserve": 1}, "preserve", 1.0),
        ({"kind": "clear_tool_uses", "exclude_tools": ["bash"]}, "exclude_tools", ("bash",)),
        ({"kind": "pressure", "turns": None, "tokens": 500}, "turns", None),
    ],
)
def test_values_are_converted_to_their_declared_type(spec, field, value):
    built = build("strategy" if spec["kind"] != "pressure" else "trigger", spec)
    assert getattr(built, field) == value and type(getattr(built, field)) is type(value)


def test_construction_in_python_is_validated_too():
    with pytest.raises(ConfigError, match="strategy 'sliding_window': window must be an integer >= 1, not 0"):
        SlidingWindow(window=0)
    assert SlidingWindow(3) == SlidingWindow(window=3.0)


def test_nested_specs_are_built_and_spelled_out():
    built = build("strategy", {"kind": "guard_select", "gentle": "trim"})
    assert built.gentle.kind == "trim" and built.critical.kind == "hard_clear"
    assert spec_of(built)["gentle"] == {"kind": "trim", "keep_recent_turns": 3, "keep_initial_user": True}
    with pytest.raises(ConfigError, match="a strategy where|a strategy must be"):
        build("strategy", {"kind": "pipeline", "steps": [build("trigger", "guard")]})


def test_fresh_rebuilds_nested_state():
    trigger = build("trigger", {"kind": "any", "triggers": [{"kind": "stat_threshold", "counters": {"iterations": 2}}]})
    inner = trigger.triggers[0]
    inner._snapshots["iterations"] = 7
    again = fresh(trigger)
    assert again == trigger and again.triggers[0] is not inner and again.triggers[0].snapshot("iterations") == 0


def test_a_config_holds_its_built_kinds_and_gives_a_fresh_trigger_per_replay():
    config = parse_config(
        {
            "trigger": {"kind": "stat_threshold", "counters": {"iterations": 3}},
            "strategy": {"kind": "sliding_window", "window": 2},
            "evaluator": "workbench/extractive",
            "evaluator_options": {"api_key": "sk-secret"},
        }
    )
    assert config.built_strategy is config.build_strategy()
    first, second = config.build_trigger(), config.new_trigger()
    assert first is not second and first is not config.built_trigger and first == config.built_trigger
    assert config.trigger == spec_of(config.built_trigger)
    stored = config.to_dict()
    assert stored["evaluator"] == "workbench/extractive" and "api_key" not in stored["evaluator_options"]
    assert parse_config(config.to_dict(redact=False)) == config


# ------------------------------------------------------------------------------------------------
# the listing


def test_describe_lists_every_family_with_documented_parameters():
    listing = describe()
    assert set(listing) == {"trigger", "strategy", "importer", "metric"}
    json.dumps(listing)  # JSON-able, as `workbench kinds --json` prints it
    for family in ("trigger", "strategy"):
        for entry in listing[family]:
            if entry["name"].startswith(("_", "test")) or entry["name"].endswith("_test"):
                continue
            assert entry["doc"], f"{family} {entry['name']} has no doc"
            for p in entry["params"]:
                assert set(p) >= {"name", "type", "default", "doc", "min", "max", "choices"}
                assert p["doc"], f"{family} {entry['name']}: parameter {p['name']} has no doc"
    window = next(e for e in listing["strategy"] if e["name"] == "sliding_window")
    assert window["params"] == [
        {
            "name": "window",
            "type": "int",
            "default": None,
            "required": True,
            "doc": window["params"][0]["doc"],
            "min": 1,
            "max": None,
            "choices": None,
        }
    ]
    split = {p["name"]: p for p in next(e for e in listing["strategy"] if e["name"] == "summarize_split")["params"]}
    assert split["prompt"]["type"] == "str" and "{transcript}" in split["prompt"]["doc"]
    assert (split["preserve"]["min"], split["preserve"]["max"], split["preserve"]["default"]) == (0, 1, 0.4)
    chunking = next(e for e in listing["strategy"] if e["name"] == "adaptive_chunking")
    assert next(p for p in chunking["params"] if p["name"] == "boundary")["choices"] == ["topic", "count"]
    pipeline = next(e for e in listing["strategy"] if e["name"] == "pipeline")
    assert pipeline["params"][0]["type"] == "list[strategy]"
    for entry in listing["metric"]:
        assert entry["direction"] in registry.DIRECTIONS and entry["level"] in registry.LEVELS
    names = [e["name"] for e in listing["metric"]]
    assert names[:4] == ["calls", "compactions", "noop_compactions", "peak_context_tokens"]
    assert {"openai", "claude-code", "aider"} <= {e["name"] for e in listing["importer"]}
    assert describe("metric") == {"metric": listing["metric"]}


def test_the_readme_names_every_built_in_trigger_and_strategy():
    text = README.read_text(encoding="utf-8")
    for family in ("trigger", "strategy"):
        for name, cls in kinds(family).items():
            if cls.__module__.startswith("workbench."):
                assert f"`{name}`" in text, f"README does not list the {family} {name}"


def test_unknown_family():
    with pytest.raises(ConfigError, match="unknown kind family 'judge'; valid: trigger, strategy, importer, metric"):
        kinds("judge")


# ------------------------------------------------------------------------------------------------
# a user's kinds, one per family, through the public decorators


@dataclass(frozen=True)
class EveryNthCall:
    """Fire before every n-th call."""

    n: int = param(3, doc="calls between compactions", min=1)

    def should_compact(self, view: Any) -> bool:
        return view.call_index % self.n == 0

    def notify_compacted(self, view: Any) -> None:
        return None


@dataclass(frozen=True)
class KeepLast:
    """Keep the system messages
    and the last steps.

    The rest is dropped (this paragraph is not the one-line doc)."""

    last: int = param(2, doc="trailing steps kept", min=1)
    mode: str = param("steps", doc="what is counted", choices=("steps",))

    def compact(self, context: Any, env: Any) -> list[Message]:
        return [*context.system, *(m for s in context.steps[-self.last :] for m in s.messages)]


@dataclass(frozen=True)
class FinalMessages:
    """Messages left in the final context."""

    def compute(self, result: Any) -> int:
        return len(result.final_context)

    def per_compaction(self, result: Any) -> list[Mapping[str, Any]]:
        return [{"messages_dropped": e.messages_before - e.messages_after} for e in result.compactions]


@dataclass(frozen=True)
class NeedsAModel:
    """Stands for a metric that calls the evaluator model."""

    requires_model: ClassVar[bool] = True

    def compute(self, result: Any) -> float | None:
        return 1.0 if result.config.evaluator else None


class LinesFormat:
    """One user message per line of a `.lines.json` file whose first line is `#lines`."""

    def detect(self, path: str, head: bytes) -> bool:
        return head.startswith(b"#lines")

    def iter_sessions(self, path: str) -> list[Session]:
        lines = Path(path).read_text(encoding="utf-8").splitlines()[1:]
        messages = [
            m for line in lines for m in (Message(role="user", content=line), Message(role="assistant", content="ok"))
        ]
        return [Session.from_messages(messages)]


USER_CONFIG = """
context_limit = 4000
max_output = 100
trigger = { kind = "every_nth_call_registry_test", n = 4 }
strategy = { kind = "keep_last_registry_test", last = 3 }
"""


def test_user_kinds_are_used_from_toml_and_report_their_metrics():
    result = wb.replay(conversation(12), USER_CONFIG)
    assert [e.call_index for e in result.compactions] == [4, 8, 12]
    assert result.config.strategy == {"kind": "keep_last_registry_test", "last": 3, "mode": "steps"}
    assert result.metrics["final_messages_registry_test"] == len(result.final_context)
    assert "needs_a_model_registry_test" not in result.metrics
    assert [row["messages_dropped"] for row in result.compaction_metrics] == [
        e.messages_before - e.messages_after for e in result.compactions
    ]
    asked = wb.replay(conversation(12), USER_CONFIG, metrics=["needs_a_model_registry_test"])
    assert asked.metrics["needs_a_model_registry_test"] is None  # no evaluator configured
    with pytest.raises(ConfigError, match="unknown metric kind 'nope'"):
        wb.replay(conversation(2), USER_CONFIG, metrics=["nope"])


def test_user_kind_parameters_are_validated_and_listed():
    with pytest.raises(ConfigError, match="keep_last_registry_test'.*last must be an integer >= 1, not 0"):
        parse_config(USER_CONFIG.replace("last = 3", "last = 0"))
    with pytest.raises(ConfigError, match="mode must be one of 'steps', not 'tokens'"):
        parse_config(USER_CONFIG.replace("last = 3", 'mode = "tokens"'))
    entry = next(e for e in describe("strategy")["strategy"] if e["name"] == "keep_last_registry_test")
    assert entry["doc"] == "Keep the system messages and the last steps."
    assert [p["name"] for p in entry["params"]] == ["last", "mode"]
    metric = next(e for e in describe("metric")["metric"] if e["name"] == "final_messages_registry_test")
    assert (metric["direction"], metric["unit"], metric["level"], metric["requires_model"]) == (
        "lower",
        "messages",
        "run",
        False,
    )


def test_a_user_importer_is_a_format(tmp_path):
    path = tmp_path / "talk.lines.json"
    path.write_text("#lines\nhello\nworld\n", encoding="utf-8")
    assert "lines_registry_test" in importers.FORMATS
    assert importers.detect(path) == "lines_registry_test"
    for fmt in ("auto", "lines_registry_test", "LINES-TEST"):
        [session] = importers.load(path, format=fmt)
        assert session.format == "lines_registry_test" and [m.text for m in session.messages][::2] == ["hello", "world"]


def test_evaluate_metrics_runs_on_any_result():
    result = wb.replay(conversation(6), USER_CONFIG)
    values, columns = evaluate_metrics(result)
    assert values == result.metrics
    assert set(columns) >= {"final_messages_registry_test", "compression_ratio"}


def test_a_name_taken_by_another_class_is_refused():
    with pytest.raises(ConfigError, match="already registered"):

        @wb.register_strategy("sliding_window")
        @dataclass(frozen=True)
        class Impostor:
            def compact(self, context: Any, env: Any) -> list[Message]:
                return list(context.messages)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"direction": "up"}, "direction must be one of higher, lower, none"),
        ({"direction": "higher", "level": "session"}, "level must be one of call, compaction, run"),
    ],
)
def test_metric_declarations_are_checked(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        wb.register_metric("bad_registry_test", **kwargs)


class PlainTrigger:
    """A kind that is not a dataclass: its parameters come from `__init__`."""

    def __init__(self, every: int = 2):
        self.every = every

    def should_compact(self, view: Any) -> bool:
        return view.call_index % self.every == 0

    def notify_compacted(self, view: Any) -> None:
        return None


def test_a_plain_class_kind_has_its_init_parameters_checked():
    assert spec_of(build("trigger", {"kind": "plain_class_registry_test", "every": 4.0})) == {
        "kind": "plain_class_registry_test",
        "every": 4,
    }
    with pytest.raises(ConfigError, match="'plain_class_registry_test': every must be an integer, not 'x'"):
        build("trigger", {"kind": "plain_class_registry_test", "every": "x"})
    with pytest.raises(ConfigError, match="unknown parameter 'each'; valid: every"):
        PlainTrigger(each=3)  # type: ignore[call-arg]


@pytest.fixture(scope="module", autouse=True)
def user_kinds():
    """Register this module's kinds through the public decorators, and forget them afterwards
    (the registry is process-wide; other modules' tests compare full listings)."""
    registered = [
        ("trigger", "every_nth_call_registry_test", wb.register_trigger("every_nth_call_registry_test"), EveryNthCall),
        ("strategy", "keep_last_registry_test", wb.register_strategy("keep_last_registry_test"), KeepLast),
        (
            "metric",
            "final_messages_registry_test",
            wb.register_metric("final_messages_registry_test", direction="lower", unit="messages", level="run"),
            FinalMessages,
        ),
        (
            "metric",
            "needs_a_model_registry_test",
            wb.register_metric("needs_a_model_registry_test", direction="higher", unit="share", level="run"),
            NeedsAModel,
        ),
        (
            "importer",
            "lines_registry_test",
            wb.register_importer("lines_registry_test", aliases=["lines-test"]),
            LinesFormat,
        ),
        ("trigger", "plain_class_registry_test", wb.register_trigger("plain_class_registry_test"), PlainTrigger),
    ]
    for _family, _name, decorate, cls in registered:
        decorate(cls)
    yield
    for family, name, _decorate, _cls in registered:
        registry.unregister(family, name)
    assert "lines_registry_test" not in importers.FORMATS


def test_kinds_are_listed_in_the_same_order_whatever_was_imported_first():
    """The order of the metrics decides the order of stored JSON and of report columns: it must not
    depend on which module a process happened to import first (a Ray worker and its driver differ)."""
    import subprocess
    import sys

    script = (
        "import {first}; from workbench.registry import kinds; "
        "print(','.join(kinds('metric')) + ';' + ','.join(kinds('strategy')))"
    )
    orders = {
        subprocess.run(
            [sys.executable, "-c", script.format(first=first)], capture_output=True, text=True, check=True
        ).stdout.strip()
        for first in ("workbench", "workbench.quality.probes")
    }
    assert len(orders) == 1, orders
    assert orders.pop().startswith("calls,compactions,noop_compactions,peak_context_tokens")


def test_the_listing_follows_registration_and_is_the_callers_own():
    """`kinds` keeps its sorted listing between calls, so it must notice a kind that comes or goes."""
    name = "keep_first_listing_test"

    @dataclass(frozen=True)
    class KeepFirst:
        def compact(self, context: Any, env: Any) -> list[Message]:
            return list(context.messages[:1])

    assert name not in kinds("strategy")
    wb.register_strategy(name)(KeepFirst)
    try:
        listed = kinds("strategy")
        assert listed[name] is KeepFirst
        assert list(listed)[-1] == name  # a user's kind comes after the built-in ones
        listed.pop(name)
        assert name in kinds("strategy")  # the caller's copy, not the registry's listing
    finally:
        registry.unregister("strategy", name)
    assert name not in kinds("strategy")


# ------------------------------------------------------------------------------------------------
# the methods the replay calls are checked at registration


class _NoCompact:
    pass


class _CompactWithoutEnv:
    def compact(self, context: Any) -> list[Message]:
        return list(context.messages)


class _CompactNotAMethod:
    compact = 3


class _FallbackWithoutEnv:
    def compact(self, context: Any, env: Any) -> list[Message]:
        return list(context.messages)

    def fallback(self, context: Any) -> list[Message]:
        return list(context.messages)


class _NoShouldCompact:
    def notify_compacted(self, view: Any) -> None:
        return None


class _ShouldCompactWithoutView:
    def should_compact(self) -> bool:
        return True

    def notify_compacted(self, view: Any) -> None:
        return None


class _NoNotifyCompacted:
    def should_compact(self, view: Any) -> bool:
        return True


class _NotifyWithoutView:
    def should_compact(self, view: Any) -> bool:
        return True

    def notify_compacted(self) -> None:
        return None


BAD_KINDS = [
    # (family, class, fragments the message must hold)
    ("strategy", _NoCompact, ["has no compact method", "compact(self, context, env) -> list[Message]"]),
    ("strategy", _CompactWithoutEnv, ["compact takes (self, context", "compact(self, context, env)"]),
    ("strategy", _CompactNotAMethod, ["compact is int, not a method", "compact(self, context, env)"]),
    ("strategy", _FallbackWithoutEnv, ["fallback takes (self, context", "fallback(self, context, env)"]),
    ("trigger", _NoShouldCompact, ["has no should_compact method", "should_compact(self, view) -> bool"]),
    ("trigger", _ShouldCompactWithoutView, ["should_compact takes (self)", "should_compact(self, view) -> bool"]),
    ("trigger", _NoNotifyCompacted, ["has no notify_compacted method", "notify_compacted(self, view)"]),
    ("trigger", _NotifyWithoutView, ["notify_compacted takes (self)", "notify_compacted(self, view)"]),
]


@pytest.mark.parametrize(("family", "cls", "fragments"), BAD_KINDS, ids=[cls.__name__ for _, cls, _ in BAD_KINDS])
def test_a_kind_without_the_methods_the_replay_calls_is_refused_at_registration(family, cls, fragments):
    name = f"bad_{cls.__name__.strip('_').lower()}_registry_test"
    decorator = wb.register_strategy(name) if family == "strategy" else wb.register_trigger(name)
    try:
        with pytest.raises(ConfigError) as info:
            decorator(cls)
        assert name not in kinds(family)
    finally:
        registry.unregister(family, name)
    message = str(info.value)
    for fragment in [f"{family} kind {name!r}", cls.__name__, *fragments]:
        assert fragment in message, f"{fragment!r} not in {message!r}"


class _VariadicStrategy:
    def compact(self, *args: Any, **kwargs: Any) -> list[Message]:
        return list(args[0].messages)


class _ExtraDefaultedStrategy:
    def compact(self, context: Any, env: Any, extra: int = 1) -> list[Message]:
        return list(context.messages)

    def fallback(self, context: Any, env: Any, *rest: Any) -> list[Message]:
        return list(context.messages)


class _StaticStrategy:
    @staticmethod
    def compact(context: Any, env: Any) -> list[Message]:
        return list(context.messages)


class _ClassMethodTrigger:
    @classmethod
    def should_compact(cls, view: Any, *, detail: bool = False) -> bool:
        return False

    def notify_compacted(self, view: Any, **extra: Any) -> None:
        return None


@pytest.mark.parametrize(
    ("family", "cls"),
    [
        ("strategy", _VariadicStrategy),
        ("strategy", _ExtraDefaultedStrategy),
        ("strategy", _StaticStrategy),
        ("trigger", _ClassMethodTrigger),
    ],
)
def test_methods_taking_varargs_defaults_or_no_self_are_accepted(family, cls):
    name = f"ok_{cls.__name__.strip('_').lower()}_registry_test"
    try:
        (wb.register_strategy(name) if family == "strategy" else wb.register_trigger(name))(cls)
        assert kinds(family)[name] is cls
        if family == "strategy":
            assert wb.compact([{"role": "user", "content": "hi"}], name)[0].text == "hi"
    finally:
        registry.unregister(family, name)


def _readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    blocks = text.split("```python\n")[1:]
    return next(block.split("```", 1)[0] for block in blocks if 'register_strategy("keep_first_and_last")' in block)


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "system", "content": "be brief"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "task"}],
        conversation(1),
        conversation(12),
    ],
    ids=["empty", "system only", "one step", "fewer steps than last", "more steps than last"],
)
def test_the_readme_strategy_example_handles_any_context(messages):
    namespace: dict[str, Any] = {"wb": wb, "__name__": "readme_example"}
    exec(compile(_readme_example(), "README.md", "exec", dont_inherit=True), namespace)  # the README's own example
    try:
        after = wb.compact(messages, {"kind": "keep_first_and_last", "last": 4})
    finally:
        registry.unregister("strategy", "keep_first_and_last")
    before = [Message.from_openai(m) if isinstance(m, dict) else m for m in messages]
    system = [m for m in before if m.role == "system"]
    assert after[: len(system)] == system
    assert len(after) == len(set(map(id, after))) <= len(before)  # no message twice
    if len(before) > len(system):
        assert after[len(system)] == before[len(system)] and after[-1] == before[-1]


def test_kinds_only_here_are_those_a_fresh_process_would_not_load(monkeypatch):
    """The built-in kinds and a plugin's (its entry point's package) load in any process; a kind defined
    in a script, a notebook or a test module does not."""

    @dataclass(frozen=True)
    class Here:
        def compact(self, context, env):
            return context

    @dataclass(frozen=True)
    class FromPlugin:
        def compact(self, context, env):
            return context

    FromPlugin.__module__ = "acme_kinds.strategies"
    registry.load_kinds()
    entry = type("Entry", (), {"name": "acme", "value": "acme_kinds:register"})()
    monkeypatch.setattr(registry, "_plugin_entry_points", lambda: [entry])
    before = registry.kinds_only_here()  # this module's own kinds, registered when it was imported
    assert "trigger:every_nth_call_registry_test" in before
    assert "strategy:observation_masking" not in before and "metric:task_state_coverage" not in before
    wb.register_strategy("here_only_test")(Here)
    wb.register_strategy("plugin_only_test")(FromPlugin)
    try:
        assert sorted(registry.kinds_only_here()) == sorted([*before, "strategy:here_only_test"])
    finally:
        registry.unregister("strategy", "here_only_test")
        registry.unregister("strategy", "plugin_only_test")
    assert registry.kinds_only_here() == before
