"""Compaction Workbench: replay recorded agent sessions under compaction triggers and strategies.

    import workbench as wb
    sessions = wb.load("path/to/sessions")
    result = wb.replay(sessions[0], {"trigger": {"kind": "utilization"}, "strategy": {"kind": "summarize_split"}})
"""

from workbench import _offline  # noqa: F401  - first: offline defaults for tiktoken/litellm
from workbench.extractive import install_import_hook

install_import_hook()  # `workbench/extractive` becomes a LiteLLM provider whenever litellm is imported

# ruff: noqa: E402
from workbench.compaction import CompactionEnv, Completion, Context, Summarizer, Trigger, TriggerView
from workbench.config import ReplayConfig, parse_config
from workbench.errors import (
                              CompactionError,
                              ConfigError,
                              FormatError,
                              InvariantError,
                              StoreError,
                              SummarizerError,
                              WorkbenchError,
)
from workbench.importers import load
from workbench.registry import build_strategy, build_trigger, register_strategy, register_trigger, spec_of
from workbench.replay import CallRecord, CompactionEvent, ReplayResult, compact, replay
from workbench.session import Message, Probe, Session, Step, ToolCall, group_steps
from workbench.tokens import count_tokens, get_tokenizer

__version__ = "0.1.0"

__all__ = [
    "CallRecord", "CompactionEnv", "CompactionError", "CompactionEvent", "Completion", "ConfigError", "Context",
    "FormatError", "InvariantError", "Message", "Probe", "ReplayConfig", "ReplayResult", "Session", "Step",
    "StoreError", "Summarizer", "SummarizerError", "ToolCall", "Trigger", "TriggerView", "WorkbenchError",
    "build_strategy", "build_trigger", "compact", "count_tokens", "get_tokenizer", "group_steps", "load",
    "parse_config", "register_strategy", "register_trigger", "replay", "spec_of",
]
