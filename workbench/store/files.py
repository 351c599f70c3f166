"""Frames written to CSV or Parquet files by DuckDB (a private in-memory database of the process's
DuckDB, `workbench.store.hub`: the database file is not opened)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

FILE_FORMATS = ("csv", "parquet")


def write_frame(frame: pd.DataFrame, path: Path, format: str) -> None:
    """Write `frame` to `path` as `format` ("csv" with a header, or "parquet"). Lists and mappings in
    object columns are written as JSON text. A file the system refuses raises `OSError` with its reason."""
    import duckdb

    from workbench.store.hub import HUB

    if format not in FILE_FORMATS:
        raise ValueError(f"format {format!r}: expected one of {', '.join(FILE_FORMATS)}")
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object and frame[column].map(lambda v: isinstance(v, (list, dict))).any():
            frame[column] = frame[column].map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)
    connection = HUB.attach(":memory:", read_only=False)
    try:
        connection.register("frame", frame)
        quoted = str(path).replace("'", "''")
        options = "FORMAT csv, HEADER true" if format == "csv" else "FORMAT parquet"
        connection.execute(f"COPY frame TO '{quoted}' ({options})")
    except duckdb.IOException as exc:
        raise OSError(_io_reason(exc)) from exc
    finally:
        connection.close()


def _io_reason(exc: BaseException) -> str:
    """The system's reason in a DuckDB IO error (`IO Error: Cannot open file "x": Permission denied`)."""
    text = str(exc).removeprefix("IO Error: ")
    return text.rsplit(": ", 1)[-1] if ": " in text else text
