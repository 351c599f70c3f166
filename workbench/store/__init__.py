"""The only owner of the DuckDB file: every connection and every SQL statement of the workbench.

- `db`: opening the file (locks, waits, read-only), migrations, `FileHold` (brief opens per batch);
- `sessions`: `Store`, sessions, messages, probes, token counts, datasets; `writer`: the batch writer of
  imports (the walk of files and folders is `workbench.importers.pipeline`); `labels`: summary labels;
- `results`: `RunResults`, the experiment tables (runs, cells, calls, compactions) and their frames;
- `model_cache`: `DuckDBCache`, the `llm_cache` table behind the gateway's `Cache` protocol;
- `console`: the app's read-only SQL console;
- `files`: writing frames to CSV / Parquet / JSON with DuckDB.

Everything else asks these modules: no other package imports duckdb or writes SQL (a test and an
import-linter contract hold that).
"""

from workbench.importers.report import FileOutcome, ImportReport
from workbench.store.db import FileHold, MissingDatabaseError, NotADatabaseError, default_path
from workbench.store.labels import SUMMARY_LABEL_COLUMNS, SUMMARY_LABELS, SummaryLabel, summary_labels_frame
from workbench.store.model_cache import DuckDBCache
from workbench.store.results import (
    FinishedCell,
    NoopConfig,
    RunInfo,
    RunResults,
    held_results,
    open_results,
    shown_status,
)
from workbench.store.sessions import COUNTABLE, Store, held_store, sessions_from_tables
from workbench.store.writer import check_dataset_name, continues

__all__ = [
    "COUNTABLE",
    "SUMMARY_LABELS",
    "SUMMARY_LABEL_COLUMNS",
    "DuckDBCache",
    "FileHold",
    "FileOutcome",
    "FinishedCell",
    "ImportReport",
    "MissingDatabaseError",
    "NoopConfig",
    "NotADatabaseError",
    "RunInfo",
    "RunResults",
    "Store",
    "SummaryLabel",
    "check_dataset_name",
    "continues",
    "default_path",
    "held_results",
    "held_store",
    "open_results",
    "sessions_from_tables",
    "shown_status",
    "summary_labels_frame",
]
