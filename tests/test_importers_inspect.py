"""The Inspect AI eval log importer: the shared logs checked against their raw JSON, and logs built
here (`.json` and `.eval`) holding what the shared ones lack: compaction events, epochs, no ids."""

from __future__ import annotations

import copy
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import FormatError
from workbench.importers import detect, iter_load, load
from workbench.session import ROLES, Session, tool_pairing_problems
from workbench.store import Store

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "sessions" / "inspect-ai"


# --------------------------------------------------------------------------- raw logs


def raw_samples(path: Path) -> list[dict[str, Any]]:
    """The samples of a log, read straight from its JSON."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return [json.loads(archive.read(n)) for n in archive.namelist() if n.startswith("samples/")]
    return list(json.loads(path.read_text(encoding="utf-8")).get("samples") or [])


def raw_events(sample: dict[str, Any]) -> list[dict[str, Any]]:
    return list(sample.get("events") or (sample.get("transcript") or {}).get("events") or [])


def agent_model_events(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """The model events not made inside a scorer span (a grader's calls are not the agent's)."""
    spans = {e["id"]: e for e in raw_events(sample) if e["event"] == "span_begin"}

    def in_scorer(span: str | None) -> bool:
        while span in spans:
            if spans[span].get("type") == "scorer":
                return True
            span = spans[span].get("parent_id")
        return False

    return [e for e in raw_events(sample) if e["event"] == "model" and not in_scorer(e.get("span_id"))]


def shared_logs() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(p for p in SHARED.rglob("*") if p.suffix in (".json", ".eval"))


def check_session(session: Session) -> None:
    assert session.format == "inspect-ai"
    assert all(m.role in ROLES for m in session.messages)
    assert tool_pairing_problems(session.messages) == []


def by_sample(sessions: list[Session]) -> dict[tuple[Any, Any], Session]:
    return {(s.metadata["sample_id"], s.metadata["epoch"]): s for s in sessions}


# --------------------------------------------------------------------------- the shared logs


@pytest.mark.shared
@pytest.mark.parametrize("path", shared_logs() or [None], ids=lambda p: p.name if isinstance(p, Path) else "absent")
def test_shared_log_imports_as_its_raw_file_says(path: Path | None) -> None:
    if path is None:
        pytest.skip("../shared/sessions/inspect-ai is not available")
    assert detect(path) == "inspect-ai"
    samples = raw_samples(path)
    sessions = by_sample(load(path))
    assert set(sessions) == {(s["id"], s["epoch"]) for s in samples}, "one session per sample and epoch"
    assert len({s.id for s in sessions.values()}) == len(samples)
    for sample in samples:
        session = sessions[(sample["id"], sample["epoch"])]
        check_session(session)
        calls = [m for m in session.messages if m.role == "assistant"]
        events = agent_model_events(sample)
        assert len(calls) == len(events) == session.calls
        for message, event in zip(calls, events, strict=True):
            raw = event["output"]["usage"]
            usage = message.metadata["usage"]
            assert usage["output_tokens"] == raw["output_tokens"]
            assert usage["cache_read_input_tokens"] == raw.get("input_tokens_cache_read", 0)
            assert sum(usage.values()) == raw["total_tokens"], "the billed input is the raw input, cache included"
        assert session.metadata["scores"] == {name: score["value"] for name, score in sample["scores"].items()}
        assert session.metadata.get("sample_metadata") == (sample.get("metadata") or None)
        side = len([e for e in raw_events(sample) if e["event"] == "model"]) - len(events)
        assert session.metadata.get("side_calls") == (side or None)
        offered = next((e["tools"] for e in events if e.get("tools")), [])
        assert [t["function"]["name"] for t in session.tools] == [t["name"] for t in offered]
        assert not session.recorded_compactions
        assert not any(e["event"] == "compaction" for e in raw_events(sample)), "the shared logs have none"


@pytest.mark.shared
def test_shared_browser_log_keeps_its_tool_calls_and_cache_reads() -> None:
    path = SHARED / "UKGovernmentBEIS__inspect_ai/tests/analysis/test_logs/2025-05-12T20-27-36-04-00_browser.json"
    if not path.is_file():
        pytest.skip("../shared/sessions/inspect-ai is not available")
    (session,) = load(path)
    assert [m.role for m in session.messages] == ["user"] + ["assistant", "tool"] * 4 + ["assistant"]
    assert [c.name for m in session.messages for c in m.tool_calls][:2] == ["web_browser_go", "web_browser_click"]
    assert session.metadata["usage_totals"]["cache_read_input_tokens"] == 9088
    assert session.metadata["outcome"] == {"resolved": True, "source": "inspect score includes"}


# --------------------------------------------------------------------------- logs built here

SUMMARY = "[CONTEXT COMPACTION SUMMARY]\n\nThe agent read a.py and b.py."


def usage(given: int, output: int, read: int = 0, write: int = 0) -> dict[str, int]:
    """An Inspect ModelUsage as Anthropic reports it (input excludes the cache kinds)."""
    return {
        "input_tokens": given,
        "output_tokens": output,
        "input_tokens_cache_read": read,
        "input_tokens_cache_write": write,
        "total_tokens": given + read + write + output,
    }


def model_event(output: dict[str, Any], used: dict[str, int], stop: str = "tool_calls") -> dict[str, Any]:
    tool = {"name": "read", "description": "Read a file.", "parameters": {"type": "object", "properties": {}}}
    return {
        "event": "model",
        "model": "anthropic/claude-sonnet-4",
        "input": [],
        "tools": [tool],
        "output": {"choices": [{"message": output, "stop_reason": stop}], "usage": used},
    }


def compaction_event(kind: str, before: int, after: int) -> dict[str, Any]:
    return {
        "event": "compaction",
        "type": kind,
        "tokens_before": before,
        "tokens_after": after,
        "source": "inspect",
        "metadata": {"strategy": "CompactionSummary"},
    }


def built_sample(epoch: int = 1) -> dict[str, Any]:
    """A react-like sample: two tool calls, an edit compaction, then a summary compaction (with its
    summarizer's model call, which made no message of the history), then the answer."""
    a1 = {"id": "a1", "role": "assistant", "content": "", "tool_calls": [_call("c1", "a.py")]}
    a2 = {
        "id": "a2",
        "role": "assistant",
        "content": [{"type": "reasoning", "reasoning": "b next"}, {"type": "text", "text": "reading b"}],
        "tool_calls": [_call("c2", "b.py")],
    }
    a3 = {"id": "a3", "role": "assistant", "content": "attachment://answer"}
    summary = {"id": "s1", "role": "user", "content": SUMMARY, "metadata": {"summary": True}}
    messages = [
        {"id": "m0", "role": "system", "content": "You are careful."},
        {"id": "m1", "role": "user", "content": "Compare a.py and b.py.", "source": "input"},
        a1,
        {"id": "t1", "role": "tool", "tool_call_id": "c1", "function": "read", "content": "A"},
        a2,
        {"id": "t2", "role": "tool", "tool_call_id": "c2", "function": "read", "content": "", "error": _error()},
        summary,
        a3,
    ]
    summarizer = {"id": "x9", "role": "assistant", "content": "The agent read a.py and b.py."}
    events = [
        {"event": "span_begin", "id": "s", "type": "solver", "name": "react"},
        model_event(a1, usage(100, 10, write=50)),
        {"event": "tool", "id": "c1", "function": "read"},
        compaction_event("edit", 700, 400),
        model_event(a2, usage(20, 12, read=150)),
        model_event(summarizer, usage(300, 40), stop="stop"),
        compaction_event("summary", 900, 120),
        model_event(a3, usage(120, 30), stop="stop"),
    ]
    return {
        "id": "task-1",
        "epoch": epoch,
        "input": "Compare a.py and b.py.",
        "target": "same",
        "messages": messages,
        "events": events,
        "attachments": {"answer": "They are the same."},
        "scores": {"match": {"value": "C", "answer": "same"}, "tokens": {"value": 0.5}},
        "metadata": {"difficulty": "easy"},
        "model_usage": {"anthropic/claude-sonnet-4": usage(540, 92)},
    }


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "function": "read", "arguments": {"path": name}, "type": "function"}


def _error() -> dict[str, str]:
    return {"type": "file_not_found", "message": "b.py does not exist"}


def built_log(epochs: int = 1, eval_id: str = "E1") -> dict[str, Any]:
    return {
        "version": 2,
        "status": "success",
        "eval": {
            "eval_id": eval_id,
            "run_id": "R1",
            "task": "compare",
            "task_id": "T1",
            "model": "anthropic/claude-sonnet-4",
            "dataset": {"name": "files"},
            "config": {"epochs": epochs},
        },
        "plan": {},
        "results": {},
        "stats": {},
        "samples": [built_sample(epoch) for epoch in range(1, epochs + 1)],
    }


def write_json_log(path: Path, log: dict[str, Any]) -> Path:
    path.write_text(json.dumps(log, indent=2), encoding="utf-8")
    return path


def write_eval_log(path: Path, log: dict[str, Any]) -> Path:
    """The `.eval` layout: header.json (the log without samples) and one member per sample."""
    header = {k: v for k, v in log.items() if k != "samples"}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("_journal/start.json", json.dumps({"version": 2, "eval": log["eval"], "plan": {}}))
        for sample in log["samples"]:
            archive.writestr(f"samples/{sample['id']}_epoch_{sample['epoch']}.json", json.dumps(sample))
        archive.writestr("header.json", json.dumps(header))
    return path


WRITERS = {"json": write_json_log, "eval": write_eval_log}


def without_ids(log: dict[str, Any]) -> dict[str, Any]:
    """Older logs write no message ids: calls are then matched by text and tool calls."""
    log = copy.deepcopy(log)
    for sample in log["samples"]:
        for message in sample["messages"]:
            message.pop("id", None)
        for event in sample["events"]:
            if event["event"] == "model":
                event["output"]["choices"][0]["message"].pop("id", None)
    return log


@pytest.mark.parametrize("ids", [True, False], ids=["ids", "no-ids"])
@pytest.mark.parametrize("suffix", sorted(WRITERS))
def test_built_log_imports_calls_usage_and_compactions(tmp_path: Path, suffix: str, ids: bool) -> None:
    log = built_log() if ids else without_ids(built_log())
    path = WRITERS[suffix](tmp_path / f"log.{suffix}", log)
    assert detect(path) == "inspect-ai"
    (session,) = load(path)
    check_session(session)
    assert [m.role for m in session.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert session.calls == 3, "the summarizer's call made no message of the history"
    assert not any(SUMMARY in m.text for m in session.messages), "the summary is an annotation, not a message"
    calls = [m for m in session.messages if m.role == "assistant"]
    assert [m.metadata["usage"] for m in calls] == [
        {"input_tokens": 100, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 50, "output_tokens": 10},
        {"input_tokens": 20, "cache_read_input_tokens": 150, "cache_creation_input_tokens": 0, "output_tokens": 12},
        {"input_tokens": 120, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 30},
    ]
    assert [m.metadata["finish_reason"] for m in calls] == ["tool_calls", "tool_calls", "stop"]
    assert calls[1].metadata["thinking"] == "b next" and calls[1].text == "reading b"
    assert calls[2].text == "They are the same.", "attachments are resolved"
    assert session.messages[5].text == "Error: b.py does not exist"
    assert session.metadata["side_calls"] == 1
    assert session.metadata["side_call_usage"]["input_tokens"] == 300
    edit, summary = session.recorded_compactions
    assert (edit.call_index, edit.tokens_before, edit.summary, edit.trigger) == (1, 700, "", "auto")
    assert (summary.call_index, summary.tokens_before, summary.summary) == (2, 900, SUMMARY)
    assert session.messages[edit.message_index] is calls[1]
    assert session.messages[summary.message_index] is calls[2]
    entries = session.metadata["recorded_compactions"]
    assert [(e["compaction_type"], e["tokens_after"], e["compaction_source"]) for e in entries] == [
        ("edit", 400, "inspect"),
        ("summary", 120, "inspect"),
    ]
    assert session.tools[0]["function"]["name"] == "read"
    assert session.metadata["scores"] == {"match": "C", "tokens": 0.5}
    assert session.metadata["outcome"] == {"resolved": True, "source": "inspect score match"}
    assert session.metadata["sample_metadata"] == {"difficulty": "easy"}
    assert (session.metadata["task"], session.metadata["instance_id"], session.metadata["model"]) == (
        "compare",
        "task-1",
        "anthropic/claude-sonnet-4",
    )


@pytest.mark.parametrize("suffix", sorted(WRITERS))
def test_each_epoch_is_its_own_session_even_when_identical(tmp_path: Path, suffix: str) -> None:
    path = WRITERS[suffix](tmp_path / f"log.{suffix}", built_log(epochs=3))
    sessions = load(path)
    assert [s.metadata["epoch"] for s in sessions] == [1, 2, 3]
    assert len({s.id for s in sessions}) == 3
    assert {s.id for s in load(path)} == {s.id for s in sessions}, "ids are stable across imports"


def test_a_compaction_after_the_last_call_is_recorded_at_the_end(tmp_path: Path) -> None:
    log = built_log()
    log["samples"][0]["events"].append(compaction_event("trim", 500, 300))
    (session,) = load(write_json_log(tmp_path / "log.json", log))
    last = session.recorded_compactions[-1]
    assert (last.call_index, last.message_index, last.tokens_before) == (3, len(session.messages), 500)


def test_import_command_detects_both_layouts(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    write_json_log(folder / "a.json", built_log())
    write_eval_log(folder / "b.eval", built_log(epochs=2, eval_id="E2"))
    db = tmp_path / "wb.duckdb"
    result = CliRunner().invoke(main, ["import", str(folder), "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with Store(db) as store:
        assert store.count() == 3, "one content, but three samples of two evals"
    assert [len(r.sessions) for r in iter_load(folder)] == [1, 2]
    write_json_log(folder / "c.json", built_log(epochs=2, eval_id="E2"))
    assert [len(r.sessions) for r in iter_load(folder)] == [1, 2, 0], "the same eval's samples, in either layout"


def _zip(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return path


def _bad_files(tmp: Path) -> Iterator[tuple[Path, str]]:
    yield _zip(tmp / "no-header.eval", {"samples/1_epoch_1.json": "{}"}), "no header.json"
    yield (
        _zip(tmp / "bad-sample.eval", {"header.json": json.dumps(built_log()), "samples/1_epoch_1.json": "{"}),
        ("samples/1_epoch_1.json"),
    )
    log = built_log()
    log["samples"] = {"not": "a list"}
    yield write_json_log(tmp / "samples.json", log), "'samples' is not a list"
    log = built_log()
    log["samples"] = []
    yield write_json_log(tmp / "empty.json", log), "no sample with messages"
    log = built_log()
    log["samples"][0]["messages"][2]["role"] = "robot"
    yield write_json_log(tmp / "role.json", log), "samples[0].messages[2] has role 'robot'"
    yield write_json_log(tmp / "chat.json", [{"role": "user", "content": "hi"}]), "no 'eval' object"


def test_a_bad_file_names_the_file_and_what_was_expected(tmp_path: Path) -> None:
    for path, problem in _bad_files(tmp_path):
        with pytest.raises(FormatError) as info:
            load(path, format="inspect-ai")
        assert str(path) in str(info.value) and problem in str(info.value), str(info.value)
        assert info.value.expected and "Inspect" in info.value.expected
        assert info.value.__cause__ is None


def test_detection_does_not_take_other_json_or_zips(tmp_path: Path) -> None:
    other_zip = _zip(tmp_path / "other.eval", {"readme.txt": "hello"})
    chat = write_json_log(tmp_path / "chat.json", {"messages": [{"role": "user", "content": "eval status"}]})
    assert detect(chat) != "inspect-ai"
    with pytest.raises(FormatError):
        detect(other_zip)
