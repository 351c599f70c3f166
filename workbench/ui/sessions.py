"""The sessions page: datasets with their counts, the sessions of the database, one session's messages.

The database is opened read-only for each read and closed right after, so the app never holds
DuckDB's lock between reruns (the CLI can import while the app is open). Reads are cached per
database file modification time, so a new import shows on the next rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import streamlit as st

from workbench.db import default_path
from workbench.errors import StoreError

PAGE_SIZE = 40
PREVIEW_CHARS = 3000
AVATARS = {"system": "⚙️", "user": "user", "assistant": "assistant", "tool": "🛠️"}


def db_path_from_args(argv: Sequence[str] | None = None) -> str:
    """`--db PATH` from the script arguments (`streamlit run app.py -- --db PATH`), else the default."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db", default=None)
    args, _ = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    return args.db or default_path()


def _stamp(path: str) -> float:
    """Cache key part: the file's (and its WAL's) modification time."""
    stamps = [os.path.getmtime(p) for p in (path, path + ".wal") if os.path.exists(p)]
    return max(stamps) if stamps else 0.0


@st.cache_data(show_spinner=False, max_entries=8)
def load_overview(path: str, stamp: float) -> dict[str, list[dict[str, Any]]]:
    """Datasets and sessions of the database (read-only, closed right after)."""
    from workbench.store import Store

    with Store(path, read_only=True) as store:
        return {"datasets": store.dataset_rows(), "sessions": store.session_rows()}


@st.cache_data(show_spinner=False, max_entries=16)
def load_detail(path: str, stamp: float, session_id: str) -> dict[str, Any]:
    """One session as plain data: messages (role, text, tool calls...), probes, tools, metadata."""
    from workbench.store import Store

    with Store(path, read_only=True) as store:
        session = store.load_session(session_id)
    messages = []
    for index, message in enumerate(session.messages):
        messages.append({
            "index": index, "role": message.role, "text": message.text, "name": message.name,
            "tool_call_id": message.tool_call_id, "importance": message.importance, "origin": message.origin,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls],
            "non_text_parts": [p.get("type") for p in message.content or () if isinstance(p, dict)
                               and p.get("type") != "text"] if isinstance(message.content, tuple) else [],
        })
    return {"id": session.id, "dataset": session.dataset, "format": session.format, "messages": messages,
            "probes": [p.to_dict() for p in session.probes], "tools": [dict(t) for t in session.tools],
            "metadata": dict(session.metadata), "calls": session.calls}


def _pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def render_message(message: dict[str, Any], preview_chars: int = PREVIEW_CHARS) -> None:
    role = message["role"]
    with st.chat_message(role, avatar=AVATARS.get(role)):
        tags = [f"**{role}** · #{message['index']}"]
        if message["name"]:
            tags.append(f"`{message['name']}`")
        if message["importance"]:
            tags.append("📌 pinned" if message["importance"] >= 10 else f"importance {message['importance']:g}")
        if message["origin"] != "original":
            tags.append(message["origin"])
        st.markdown(" · ".join(tags))
        text = message["text"]
        if text:
            shown = text if len(text) <= preview_chars else text[:preview_chars]
            if role == "tool":
                st.code(shown, language=None)
            else:
                st.markdown(shown)
            if len(text) > preview_chars:
                st.caption(f"… {len(text) - preview_chars:,} more characters ({len(text):,} in all)")
        for part in message["non_text_parts"]:
            st.caption(f"[{part} part]")
        for call in message["tool_calls"]:
            st.markdown(f"→ tool call `{call['name']}` (`{call['id']}`)")
            st.code(_pretty_arguments(call["arguments"]), language="json")


def render_detail(path: str, stamp: float, session_id: str) -> None:
    detail = load_detail(path, stamp, session_id)
    messages = detail["messages"]
    st.subheader(f"Session {detail['id']}")
    cols = st.columns(4)
    cols[0].metric("Messages", len(messages))
    cols[1].metric("Calls", detail["calls"])
    cols[2].metric("Probes", len(detail["probes"]))
    cols[3].metric("Characters", f"{sum(len(m['text']) for m in messages):,}")
    st.caption(f"dataset `{detail['dataset']}` · format `{detail['format']}`")
    if detail["probes"]:
        with st.expander(f"Probes ({len(detail['probes'])})"):
            st.dataframe(detail["probes"], hide_index=True, width="stretch")
    if detail["metadata"]:
        with st.expander("Metadata"):
            st.json(detail["metadata"], expanded=False)
    roles = sorted({m["role"] for m in messages})
    shown_roles = st.multiselect("Roles", roles, default=roles, key="roles")
    selected = [m for m in messages if m["role"] in shown_roles]
    pages = max(1, -(-len(selected) // PAGE_SIZE))
    page = st.number_input(f"Page (of {pages}, {PAGE_SIZE} messages each)", min_value=1, max_value=pages,
                           value=1, step=1, key="page") if pages > 1 else 1
    start = (int(page) - 1) * PAGE_SIZE
    for message in selected[start:start + PAGE_SIZE]:
        render_message(message)


def main() -> None:
    st.set_page_config(page_title="Compaction Workbench", page_icon="🗜️", layout="wide")
    path = db_path_from_args()
    st.title("Compaction Workbench")
    st.caption(f"Database: `{path}`")
    if not os.path.exists(path):
        st.info(f"No database at `{path}` yet. Create it with the sample sessions: "
                f"`workbench init --db {path}`, or import recordings: `workbench import PATH --db {path}`.")
        return
    stamp = _stamp(path)
    try:
        overview = load_overview(path, stamp)
    except StoreError as exc:
        st.error(str(exc))
        return
    datasets, sessions = overview["datasets"], overview["sessions"]
    if not sessions:
        st.info(f"The database has no sessions yet: `workbench init --db {path}` loads the samples.")
        return

    st.header("Datasets")
    totals = st.columns(3)
    totals[0].metric("Sessions", f"{sum(d['sessions'] for d in datasets):,}")
    totals[1].metric("Messages", f"{sum(d['messages'] for d in datasets):,}")
    totals[2].metric("Calls", f"{sum(d['calls'] for d in datasets):,}")
    st.dataframe([{k: d[k] for k in ("name", "sessions", "messages", "calls", "description")} for d in datasets],
                 hide_index=True, width="stretch")

    st.header("Sessions")
    names = [d["name"] for d in datasets if d["sessions"]]
    choice = st.selectbox("Dataset", ["(all)", *names], key="dataset")
    rows = [s for s in sessions if choice == "(all)" or s["dataset"] == choice]
    st.dataframe([{k: s[k] for k in ("id", "dataset", "format", "messages", "calls", "probes", "source")}
                  for s in rows], hide_index=True, width="stretch")
    labels = {s["id"]: f"{s['id']} · {s['dataset']} · {s['calls']} calls, {s['messages']} messages" for s in rows}
    session_id = st.selectbox("Session", list(labels), format_func=labels.get, key="session")
    if session_id:
        render_detail(path, stamp, session_id)
