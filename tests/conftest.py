"""Shared fixtures. Test data is generated in code (see builders.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from builders import ScriptedSummarizer, conversation
from hypothesis import settings

# CI replays the same examples every run (a failure there is reproducible); locally they vary.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

SHARED_SESSIONS = Path(__file__).resolve().parents[1].parent / "shared" / "sessions"


@pytest.fixture
def summarizer() -> ScriptedSummarizer:
    return ScriptedSummarizer()


@pytest.fixture
def long_conversation():
    return conversation(30, result_chars=2000)


@pytest.fixture
def shared_sessions() -> Path:
    """The recorded sessions beside the repo (../shared/sessions); skips when absent."""
    if not SHARED_SESSIONS.is_dir():
        pytest.skip("../shared/sessions is not present")
    return SHARED_SESSIONS
