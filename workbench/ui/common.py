"""What every page shares: the database path, cached reads, the session picker, readable errors."""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import data


def database_path() -> str:
    return data.db_path_from_args()


@st.cache_data(show_spinner=False, max_entries=8)
def load_overview(path: str, stamp: float) -> dict[str, list[dict[str, Any]]]:
    """Datasets and sessions (cached per database modification time, so a new import shows)."""
    return data.overview(path)


@st.cache_resource(show_spinner=False, max_entries=16)
def load_session(path: str, stamp: float, session_id: str) -> Any:
    """One Session (immutable, shared by reruns and pages without copying)."""
    return data.load_session(path, session_id)


def readable_error(exc: BaseException) -> str:
    """The message to show for a failure: ours as they are, anything else with its type."""
    if isinstance(exc, WorkbenchError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def show_read_error(exc: BaseException, prefix: str = "") -> None:
    """A failed read as a message: while a run launched from the app holds the database, what to do
    (`st.info`: wait for it); anything else as an error."""
    if isinstance(exc, data.DatabaseBusyError) or data.is_busy(exc):
        st.info(data.BUSY_MESSAGE)
    else:
        st.error(prefix + readable_error(exc))


def open_overview(path: str) -> tuple[dict[str, list[dict[str, Any]]], float] | None:
    """The overview and the database stamp, or None after explaining what is missing."""
    if not os.path.exists(path):
        st.info(
            f"No database at `{path}` yet. Create it with the sample sessions: "
            f"`workbench init --db {path}`, or import recordings: `workbench import PATH --db {path}`."
        )
        return None
    stamp = data.stamp(path)
    try:
        overview = load_overview(path, stamp)
    except Exception as exc:  # any read failure becomes a message in the page
        show_read_error(exc)
        return None
    if not overview["sessions"]:
        st.info(f"The database has no sessions yet: `workbench init --db {path}` loads the samples.")
        return None
    return overview, stamp


def session_label(row: dict[str, Any]) -> str:
    return f"{row['id']} · {row['dataset']} · {row['calls']} calls, {row['messages']} messages"
