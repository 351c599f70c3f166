"""Human labels of compaction summaries: a researcher's verdict (good / bad, and a note) on one summary.

    import workbench as wb
    result = wb.replay(session, "observation-masking")
    wb.label_summary(result.session_id, result.config, 0, "bad", note="the user's constraint is gone", db=path)
    wb.summary_labels(db=path)  # session_id, config_hash, config, compaction, label, note, labelled_at

A label is keyed by the session, the config's hash (`workbench.config.config_hash`: its spec without
its name, so a label follows the config, not what it was called) and the compaction's event index in
that config's replay (`SummaryLabel`); labelling the same compaction again replaces the label. The
store keeps them (`summary_labels`, `Store.set_summary_label`); the exports of a run put them on the
compactions they label (`with_labels`), and the metric audit reads `summary_labels()` as its `labels`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.config import ReplayConfig, config_hash, parse_config
from workbench.store import SUMMARY_LABEL_COLUMNS, Store, SummaryLabel

if TYPE_CHECKING:
    import pandas as pd

#: The columns `with_labels` adds to a frame of compactions.
LABEL_COLUMNS = ("label", "label_note")

ConfigLike = ReplayConfig | Mapping[str, Any] | str | Path


def label_summary(
    session_id: str,
    config: ConfigLike,
    compaction: int,
    label: str,
    *,
    note: str | None = None,
    db: str | os.PathLike[str] | None = None,
) -> SummaryLabel:
    """Label the summary of compaction `compaction` (its event index, as `ReplayResult.compactions`
    orders them) of `config`'s replay of session `session_id`: 'good' or 'bad', with an optional
    note. `config` is anything `parse_config` takes (a config, a dict, a preset name, TOML). Writes
    to the existing database `db` (default `$WORKBENCH_DB`); returns the label as stored."""
    parsed = parse_config(config)
    with Store(db, create=False) as store:
        return store.set_summary_label(
            session_id, config_hash(parsed), compaction, label, config=parsed.name, note=note
        )


def delete_summary_label(
    session_id: str, config: ConfigLike, compaction: int, db: str | os.PathLike[str] | None = None
) -> bool:
    """Remove a compaction's label (see `label_summary`); returns whether there was one."""
    with Store(db, create=False) as store:
        return store.delete_summary_label(session_id, config_hash(config), compaction)


def summary_labels(
    db: str | os.PathLike[str] | None = None, *, session_id: str | None = None, config: ConfigLike | None = None
) -> pd.DataFrame:
    """The stored labels (of one session and/or config when given), read-only: one row per labelled
    compaction, columns session_id, config_hash, config, compaction, label, note, labelled_at
    (`Store.summary_labels`)."""
    with Store(db, read_only=True) as store:
        return store.summary_labels(
            session_id=session_id, config_hash=config_hash(config) if config is not None else None
        )


def with_labels(compactions: pd.DataFrame, labels: pd.DataFrame, hashes: Mapping[str, str]) -> pd.DataFrame:
    """`compactions` (rows with session_id, config and event_index, as a run stores them) with `label`
    and `label_note` after `summary`: the label of (session, the config's hash in `hashes`, event
    index), None where there is none. The columns are added even when no compaction is labelled, so
    an export's shape does not depend on whether anyone labelled (missing values are `pd.NA`)."""
    shown = compactions.copy()
    found: dict[tuple[str, str, int], tuple[Any, Any]] = {
        (str(row["session_id"]), str(row["config_hash"]), int(row["compaction"])): (row["label"], row["note"])
        for row in labels[list(SUMMARY_LABEL_COLUMNS)].to_dict(orient="records")
    }
    keys = [
        (str(s), hashes.get(str(c), ""), int(e))
        for s, c, e in zip(
            shown.get("session_id", []), shown.get("config", []), shown.get("event_index", []), strict=True
        )
    ]
    verdicts = [found.get(key, (None, None)) for key in keys]
    position = list(shown.columns).index("summary") + 1 if "summary" in shown.columns else len(shown.columns)
    import pandas as pd

    for offset, column in enumerate(LABEL_COLUMNS):  # typed text even when empty: a parquet column stays VARCHAR
        shown.insert(
            position + offset, column, pd.Series([v[offset] for v in verdicts], index=shown.index, dtype="string")
        )
    return shown
