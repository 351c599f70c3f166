"""The import panel of the Sessions page: uploaded files or a folder on this machine, into the database.

The library does the work (`Store.import_paths`: formats detected per file, a failing file reported
and rolled back, the others imported); the panel shows each file as it finishes and the outcome.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import streamlit as st

from workbench.ui import common


def _outcome_row(outcome: Any) -> dict[str, Any]:
    return {
        "file": os.path.basename(outcome.path) if outcome.path else "",
        "sessions": outcome.sessions,
        "messages": outcome.messages,
        "duplicates": outcome.duplicates,
        "error": outcome.error or "",
        "skipped": outcome.skipped or "",
    }


def run_import(path: str, sources: list[str], dataset: str | None) -> None:
    from workbench.store import Store

    with st.status("Importing…", expanded=True) as status:

        def progress(outcome: Any) -> None:
            mark = "✗" if outcome.error else "✓"
            st.text(
                f"{mark} {os.path.basename(outcome.path)}: {outcome.sessions} sessions"
                + (f" · {outcome.error}" if outcome.error else "")
            )

        try:
            with Store(path) as store:
                report = store.import_paths(sources, dataset=dataset, progress=progress)
        except Exception as exc:  # the database in use, a folder that vanished...
            status.update(label="Import failed", state="error")
            st.error(common.readable_error(exc))
            return
        failed = [f for f in report.files if f.error]
        status.update(
            label=f"Imported {report.sessions} sessions, skipped {report.duplicates} duplicates"
            + (f", {len(failed)} files failed" if failed else ""),
            state="error" if failed else "complete",
        )
    if report.duplicates:
        text = report.duplicates_text()
        st.info(text[:1].upper() + text[1:], icon=":material/content_copy:")
    rows = [_outcome_row(f) for f in report.files]
    if rows:
        st.dataframe(rows, hide_index=True, width="stretch", key="import_report")
    for outcome in failed:
        st.error(f"{os.path.basename(outcome.path)}: {outcome.error}")


def import_panel(path: str) -> None:
    with st.expander("Import recordings", expanded=not os.path.exists(path)):
        uploads = st.file_uploader("Files (JSON, JSONL, gzip)", accept_multiple_files=True, key="import_files")
        folder = st.text_input("…or a folder on this machine (walked recursively)", key="import_folder")
        dataset = st.text_input("Dataset (empty: the one each file says, else default)", key="import_dataset")
        if not st.button("Import", key="import_run", disabled=not uploads and not folder.strip()):
            return
        if folder.strip() and not os.path.exists(folder.strip()):
            st.error(f"No such file or folder: {folder.strip()}")
            return
        with tempfile.TemporaryDirectory(prefix="workbench-upload-") as staging:
            sources = []
            for upload in uploads or []:
                target = os.path.join(staging, os.path.basename(upload.name) or "upload")
                with open(target, "wb") as handle:
                    handle.write(upload.getbuffer())
                sources.append(target)
            if folder.strip():
                sources.append(folder.strip())
            run_import(path, sources, dataset.strip() or None)
