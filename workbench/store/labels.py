"""Human labels of summaries: a researcher's good / bad on one compaction of a config's replay."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import duckdb

from workbench.errors import StoreError
from workbench.store.hub import Connection

if TYPE_CHECKING:
    import pandas as pd

#: The verdicts a researcher gives a summary.
SUMMARY_LABELS = ("good", "bad")
#: The columns of `Store.summary_labels()` (and of the `summary_labels` table), in order.
SUMMARY_LABEL_COLUMNS = ("session_id", "config_hash", "config", "compaction", "label", "note", "labelled_at")


@dataclass(frozen=True)
class SummaryLabel:
    """A researcher's verdict on the summary of one compaction.

    The key is (`session_id`, `config_hash`, `compaction`): the config by `workbench.config.config_hash`
    (its spec without its name, so a renamed config keeps its labels; `config` is the name it had when
    labelled, for display) and the compaction by its `event_index` in that config's replay of the
    session (the order of `ReplayResult.compactions`, no-op firings counted; the `#i` of the Compare
    page and `cell_compactions.event_index`). A deterministic replay gives the same events again, so
    a label made on the Compare page finds its compaction in a stored run of the same config.
    """

    session_id: str
    config_hash: str
    config: str
    compaction: int
    label: str
    note: str | None
    labelled_at: datetime


def summary_labels_frame(
    con: Connection, *, session_id: str | None = None, config_hash: str | None = None
) -> pd.DataFrame:
    """The stored labels as a DataFrame of `SUMMARY_LABEL_COLUMNS` (see `Store.summary_labels`), read
    on an open connection (the exports read them on the connection they read the run with)."""
    try:
        return con.execute(
            f"SELECT {', '.join(SUMMARY_LABEL_COLUMNS)} FROM summary_labels "
            "WHERE (?::VARCHAR IS NULL OR session_id = ?) AND (?::VARCHAR IS NULL OR config_hash = ?) "
            "ORDER BY session_id, config_hash, compaction",
            [session_id, session_id, config_hash, config_hash],
        ).df()
    except duckdb.Error as exc:
        raise StoreError(f"reading the summary labels failed: {exc}") from exc
