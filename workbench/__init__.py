"""Compaction Workbench: replay recorded agent sessions under compaction triggers and strategies.

import workbench as wb
sessions = wb.load("path/to/sessions")
result = wb.replay(sessions[0], {"trigger": {"kind": "utilization"}, "strategy": {"kind": "summarize_split"}})
"""

from workbench.access import iter_sessions, session, sessions
from workbench.compaction import CompactionEnv, Completion, Context, Summarizer, Trigger, TriggerView
from workbench.config import ReplayConfig, parse_config
from workbench.errors import (
    CompactionError,
    ConfigError,
    FormatError,
    InvariantError,
    NoopCompactionsWarning,
    SessionFilterError,
    StoreError,
    SummarizerError,
    WorkbenchError,
)
from workbench.importers import load
from workbench.presets import preset, presets
from workbench.registry import (
    StrategySpec,
    TriggerSpec,
    build_strategy,
    build_trigger,
    describe,
    kinds,
    param,
    register_importer,
    register_metric,
    register_strategy,
    register_trigger,
    spec_of,
)
from workbench.replay import CallRecord, CompactionEvent, ReplayResult, compact, replay
from workbench.session import (
    Message,
    Probe,
    RecordedCompaction,
    Session,
    Step,
    ToolCall,
    group_steps,
    recorded_input_tokens,
)
from workbench.tokens import count_tokens, get_tokenizer

__version__ = "0.1.0"

__all__ = [
    "CallRecord",
    "CompactionEnv",
    "CompactionError",
    "CompactionEvent",
    "Completion",
    "ConfigError",
    "Context",
    "FormatError",
    "InvariantError",
    "Message",
    "Probe",
    "ReplayConfig",
    "ReplayResult",
    "Session",
    "Step",
    "StoreError",
    "Summarizer",
    "SummarizerError",
    "ToolCall",
    "Trigger",
    "TriggerView",
    "WorkbenchError",
    "build_strategy",
    "build_trigger",
    "compact",
    "count_tokens",
    "get_tokenizer",
    "group_steps",
    "load",
    "parse_config",
    "register_strategy",
    "register_trigger",
    "replay",
    "spec_of",
    "RecordedCompaction",
    "iter_sessions",
    "recorded_input_tokens",
    "session",
    "sessions",
    "StrategySpec",
    "TriggerSpec",
    "describe",
    "kinds",
    "param",
    "register_importer",
    "register_metric",
    "SessionFilterError",
    "preset",
    "presets",
    "NoopCompactionsWarning",
]

# Experiments load on first use (they bring pandas and numpy): `wb.run_experiment`, `wb.results`, ...
_LAZY = {
    "run_experiment": "workbench.experiments",
    "results": "workbench.experiments",
    "runs": "workbench.experiments",
    "compare": "workbench.experiments",
    "export": "workbench.experiments",
    "regress": "workbench.experiments",
    "load_experiment": "workbench.experiments",
    "delete_runs": "workbench.experiments",
    "label_summary": "workbench.labels",
    "summary_labels": "workbench.labels",
    "audit_metrics": "workbench.experiments.audit",
}
__all__ += list(_LAZY)


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    """The module's names with the lazy ones, so that completion in a notebook offers `wb.run_experiment`."""
    return sorted({*globals(), *_LAZY})
