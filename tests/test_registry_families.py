"""The typed families: the same kinds as the string API, typed by their contract, with the declared attributes set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from workbench import registry
from workbench.compaction import STRATEGIES, TRIGGERS, Strategy, Trigger
from workbench.errors import ConfigError
from workbench.importers import IMPORTERS
from workbench.metrics import Calls
from workbench.registry import METRICS, Family
from workbench.strategies.windows import SlidingWindow
from workbench.triggers import TokenThreshold

FAMILIES: list[tuple[Family[Any], str]] = [
    (TRIGGERS, "trigger"),
    (STRATEGIES, "strategy"),
    (METRICS, "metric"),
    (IMPORTERS, "importer"),
]


@pytest.mark.parametrize(("family", "name"), FAMILIES, ids=[name for _, name in FAMILIES])
def test_a_family_answers_what_the_string_api_answers(family: Family[Any], name: str) -> None:
    listed = family.kinds()
    assert family.name == name
    assert list(listed) == list(registry.kinds(name))
    assert listed, f"no built-in {name} kinds"
    for kind, cls in listed.items():
        assert family.lookup(kind) is cls is registry.lookup(name, kind)
        assert cls.kind == kind and cls.family == name


@pytest.mark.parametrize(
    ("family", "kind", "expected"),
    [
        (TRIGGERS, "token_threshold", TokenThreshold),
        (STRATEGIES, "sliding_window", SlidingWindow),
        (METRICS, "calls", Calls),
    ],
)
def test_lookup_returns_the_registered_class(family: Family[Any], kind: str, expected: type) -> None:
    assert family.lookup(kind) is expected


def test_lookup_accepts_an_alias_and_answers_the_canonical_kind() -> None:
    assert IMPORTERS.lookup("openai-chat") is IMPORTERS.lookup("openai")
    assert IMPORTERS.lookup("openai-chat").kind == "openai"


def test_build_makes_a_kind_of_the_family_and_keeps_a_built_one() -> None:
    strategy = STRATEGIES.build({"kind": "sliding_window", "window": 3})
    assert isinstance(strategy, SlidingWindow) and isinstance(strategy, Strategy)
    assert strategy.window == 3
    assert STRATEGIES.build(strategy) is strategy
    trigger = TRIGGERS.build("token_threshold")
    assert isinstance(trigger, TokenThreshold) and isinstance(trigger, Trigger)


def test_a_family_refuses_a_kind_of_another_family() -> None:
    with pytest.raises(ConfigError, match="unknown strategy kind 'token_threshold'"):
        STRATEGIES.lookup("token_threshold")
    with pytest.raises(ConfigError, match="unknown trigger kind 'sliding_window'"):
        TRIGGERS.build({"kind": "sliding_window", "window": 3})


def test_an_unknown_family_is_refused_when_declared() -> None:
    with pytest.raises(ConfigError, match="unknown kind family 'triggers'"):
        Family("triggers")


def test_importers_declare_their_priority_and_aliases() -> None:
    openai = IMPORTERS.lookup("openai")
    assert "openai-chat" in openai.aliases
    assert openai.priority < 0 < IMPORTERS.lookup("claude-code").priority  # the catch-all chat formats come last


@dataclass(frozen=True)
class _Plain:
    def compute(self, result: Any) -> int:
        return 0


@dataclass(frozen=True)
class _NeedsModel:
    requires_model: ClassVar[bool] = True
    reads_context: ClassVar[bool] = False

    def compute(self, result: Any) -> int:
        return 0


@dataclass(frozen=True)
class _Inherits(_NeedsModel):
    pass


@pytest.mark.parametrize(
    ("cls", "requires_model", "reads_context"),
    [(_Plain, False, True), (_NeedsModel, True, False), (_Inherits, True, False)],
)
def test_a_metric_gets_the_optional_attributes_it_leaves_out(
    cls: type, requires_model: bool, reads_context: bool
) -> None:
    name = f"families_test_{cls.__name__.lower()}"
    registry.register_metric(name, direction="higher", unit="", level="compaction")(cls)
    try:
        metric = METRICS.lookup(name)
        assert (metric.requires_model, metric.reads_context) == (requires_model, reads_context)
        assert (metric.direction, metric.unit, metric.level) == ("higher", "", "compaction")
        listed = next(entry for entry in registry.describe("metric")["metric"] if entry["name"] == name)
        assert listed["requires_model"] is requires_model
    finally:
        registry.unregister("metric", name)
