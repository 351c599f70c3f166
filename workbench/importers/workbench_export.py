"""The workbench's own session exports: JSONL, plain or gzip'd, one session record per line.

A record is `{id, dataset, messages, tools, probes, metadata}` with messages in OpenAI shape plus
the workbench's extras (`importance`, `origin`, `metadata`): the layout of the bundled samples
(`datasets/samples/samples.jsonl.gz`, written by `workbench.samples`). Everything round-trips:
ids, datasets, probes, importance, origins and per-message metadata (usage, recorded
compactions) are read back as written. Gzip files are recognised by their magic bytes, whatever
their name.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from typing import Any

from ..errors import FormatError
from ..session import Message, Probe, Session
from ._common import first_record, has_key, head_text, loads

FORMAT = "workbench"
EXPECTED = "workbench session records ({id, dataset, messages, tools, probes, metadata}), one per line"
GZIP_MAGIC = b"\x1f\x8b"
_RECORD_KEYS = frozenset({"id", "dataset", "messages", "tools", "probes", "metadata", "format"})


def detect(path: str, head: bytes | str) -> bool:
    """A (possibly gzip'd) JSONL whose first line is a session record with `id`, `dataset`,
    `messages` and `probes` and no key outside the record's own."""
    if isinstance(head, bytes) and head.startswith(GZIP_MAGIC):
        head = _gunzip_head(head)
    text = head_text(head)
    if not text.startswith("{"):
        return False
    record = first_record(text)
    if record is None:
        return text.startswith('{"id"') and has_key(text, "dataset") and has_key(text, "probes")
    return _is_record(record)


def _is_record(record: dict[str, Any]) -> bool:
    return (
        {"id", "dataset", "messages", "probes"} <= record.keys()
        and record.keys() <= _RECORD_KEYS
        and isinstance(record["messages"], list)
    )


def _gunzip_head(data: bytes) -> bytes:
    """As much of a gzip stream's content as `data` (its first bytes) decompresses to."""
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, 1 << 20)
    except zlib.error:
        return b""


def load(path: str) -> list[Session]:
    return list(iter_sessions(path))


def iter_sessions(path: str) -> Iterator[Session]:
    """One session per line, streamed."""
    seen = False
    for number, raw in _lines(path):
        if not raw.strip():
            continue
        seen = True
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(
                path, f"the bytes at offset {exc.start} are not valid UTF-8", line=number, expected="UTF-8 text"
            ) from None
        record = loads(path, text, EXPECTED, line=number)
        yield _session(path, record, number)
    if not seen:
        raise FormatError(path, "the file is empty", expected=EXPECTED)


def _lines(path: str) -> Iterator[tuple[int, bytes]]:
    try:
        with open(path, "rb") as probe:
            gzipped = probe.read(2) == GZIP_MAGIC
        handle = gzip.open(path, "rb") if gzipped else open(path, "rb")
    except OSError as exc:
        raise FormatError(path, f"cannot read the file ({exc.strerror or exc})") from None
    try:
        with handle:
            yield from enumerate(handle, 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise FormatError(path, f"the gzip data is damaged ({exc})", expected="a complete gzip file") from None


def _session(path: str, record: Any, line: int) -> Session:
    if not isinstance(record, dict) or not _is_record(record):
        keys = ", ".join(sorted(map(str, record))[:6]) if isinstance(record, dict) else type(record).__name__
        raise FormatError(path, f"the line is not a session record ({keys})", line=line, expected=EXPECTED)
    try:
        messages = tuple(Message.from_openai(m) for m in record["messages"])
        probes = tuple(Probe.from_dict(p) for p in record.get("probes") or ())
    except (TypeError, ValueError, KeyError) as exc:
        raise FormatError(path, f"invalid message or probe: {exc}", line=line, expected=EXPECTED) from None
    tools = record.get("tools") or []
    metadata = record.get("metadata") or {}
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools) or not isinstance(metadata, dict):
        raise FormatError(
            path, "'tools' must be a list of objects and 'metadata' an object", line=line, expected=EXPECTED
        )
    if not messages:
        raise FormatError(path, "the session record has no messages", line=line, expected=EXPECTED)
    return Session(
        messages=messages,
        id=str(record.get("id") or ""),
        dataset=str(record.get("dataset") or FORMAT),
        format=FORMAT,
        tools=tuple(tools),
        probes=probes,
        metadata=metadata,
    )
