"""The Sessions page: datasets, sessions (filters, sizes, formats, recorded compactions), one session's messages.

Session text is shown as text (`st.text` / `st.code`), never as markdown or HTML: a recording may
hold anything. The viewer's filters are keyed by the session id, so each session keeps its own.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from workbench.access import session_detail
from workbench.ui import common, data, importing

PAGE_SIZE = 40
PREVIEW_CHARS = 1500
AVATARS = {"system": "⚙️", "user": "user", "assistant": "assistant", "tool": "🛠️"}


@st.cache_data(show_spinner=False, max_entries=16)
def load_detail(path: str, stamp: float, session_id: str) -> dict[str, Any]:
    return session_detail(common.load_session(path, stamp, session_id))


def render_text(text: str, *, role: str, key: str, preview_chars: int = PREVIEW_CHARS) -> None:
    """Session text, literally; a long one collapsed behind an expander."""

    def show(value: str) -> None:
        if role == "tool":
            st.code(value, language=None, wrap_lines=True)
        else:
            st.text(value)

    if len(text) <= preview_chars:
        show(text)
        return
    show(text[:preview_chars] + " …")
    with st.expander(f"Full text ({len(text):,} characters)"):
        show(text)


def render_recorded_compaction(event: dict[str, Any]) -> None:
    before = f"{event['tokens_before']:,} tokens before" if event.get("tokens_before") else "size not recorded"
    trigger = event.get("trigger") or "trigger not recorded"
    st.warning(f"✂ Recorded compaction before call {event['call_index']} ({trigger}, {before})")
    if event.get("summary"):
        with st.expander("Summary the agent continued from"):
            st.text(event["summary"])


def render_message(message: dict[str, Any], session_id: str) -> None:
    role = message["role"]
    with st.chat_message(role, avatar=AVATARS.get(role)):
        tags = [
            f"{role} · #{message['index']}",
            f"{message['tokens']:,} tokens",
            f"{message['cumulative_tokens']:,} so far",
        ]
        if message["name"]:
            tags.append(str(message["name"]))
        if message["importance"]:
            tags.append("pinned" if message["importance"] >= 10 else f"importance {message['importance']:g}")
        if message["origin"] != "original":
            tags.append(str(message["origin"]))
        if message.get("observation") and role != "tool":
            tags.append("observation")
        st.caption(" · ".join(tags))
        if message["text"]:
            shown_as = "tool" if message.get("observation") else role
            render_text(message["text"], role=shown_as, key=f"{session_id}:{message['index']}")
        for part in message["non_text_parts"]:
            st.caption(f"[{part} part]")
        for call in message["tool_calls"]:
            st.caption(f"→ tool call {call['name']} ({call['id']})")
            st.code(data.pretty_arguments(call["arguments"]), language="json", wrap_lines=True)


def remembered_multiselect(label: str, options: list[str], *, key: str) -> list[str]:
    """A multiselect (default: every option) whose choice survives viewing another session.

    Streamlit forgets a widget's state on a run that does not draw it, so the choice is also kept
    under `_kept:<key>` and given back when the widget reappears.
    """
    kept = f"_kept:{key}"
    if key not in st.session_state and kept in st.session_state:
        st.session_state[key] = [o for o in st.session_state[kept] if o in options]
    if key in st.session_state:
        chosen = st.multiselect(label, options, key=key)
    else:
        chosen = st.multiselect(label, options, default=options, key=key)
    st.session_state[kept] = list(chosen)
    return list(chosen)


def render_detail(path: str, stamp: float, session_id: str) -> None:
    detail = load_detail(path, stamp, session_id)
    messages = detail["messages"]
    recorded = detail["recorded_compactions"]
    st.subheader(f"Session {detail['id']}")
    cols = st.columns(5)
    cols[0].metric("Messages", len(messages))
    cols[1].metric("Calls", detail["calls"])
    cols[2].metric("Tokens", f"{detail['tokens']:,}")
    cols[3].metric("Recorded compactions", len(recorded))
    cols[4].metric("Probes", len(detail["probes"]))
    st.caption(f"dataset {detail['dataset']} · format {detail['format']} · tokens counted with the heuristic tokenizer")
    if recorded:
        with st.expander(f"Recorded compactions ({len(recorded)})"):
            st.dataframe(
                [{k: e[k] for k in ("call_index", "message_index", "trigger", "tokens_before")} for e in recorded],
                hide_index=True,
                width="stretch",
            )
    if detail["probes"]:
        with st.expander(f"Probes ({len(detail['probes'])})"):
            st.dataframe(detail["probes"], hide_index=True, width="stretch")
    if detail["metadata"]:
        with st.expander("Metadata"):
            st.json(detail["metadata"], expanded=False)

    roles = sorted({m["role"] for m in messages})
    shown_roles = remembered_multiselect("Roles", roles, key=f"roles:{session_id}")
    selected = [m for m in messages if m["role"] in shown_roles]
    pages = max(1, -(-len(selected) // PAGE_SIZE))
    page = (
        st.number_input(
            f"Page (of {pages}, {PAGE_SIZE} messages each)",
            min_value=1,
            max_value=pages,
            value=1,
            step=1,
            key=f"page:{session_id}",
        )
        if pages > 1
        else 1
    )
    start = (int(page) - 1) * PAGE_SIZE
    boundaries: dict[int, list[dict[str, Any]]] = {}
    for event in recorded:
        boundaries.setdefault(int(event["message_index"]), []).append(event)
    shown = selected[start : start + PAGE_SIZE]
    for position, message in enumerate(shown):
        previous = shown[position - 1]["index"] if position else (selected[start - 1]["index"] if start else -1)
        for boundary in sorted(i for i in boundaries if previous < i <= message["index"]):
            for event in boundaries[boundary]:
                render_recorded_compaction(event)
        render_message(message, session_id)
    if shown and start + PAGE_SIZE >= len(selected):
        for boundary in sorted(i for i in boundaries if i > shown[-1]["index"]):
            for event in boundaries[boundary]:
                render_recorded_compaction(event)


#: Counts with thousands separators, like the totals above the tables.
_COUNTS = {
    name: st.column_config.NumberColumn(format="localized")
    for name in ("sessions", "messages", "calls", "observations", "characters", "recorded_compactions", "probes")
}


def open_in_compare(session_id: str) -> None:
    """Switch to the Compare page with `session_id` selected (its URL's `session` parameter: the page
    applies it, keeping the rest of its form)."""
    from workbench.ui import compare

    st.switch_page(st.Page(compare.page, url_path=compare.URL_PATH), query_params={"session": session_id})


def page() -> None:
    path = common.database_path()
    st.title("Compaction Workbench")
    st.caption(f"Database: `{path}`")
    importing.import_panel(path)
    opened = common.open_overview(path)
    if opened is None:
        return
    overview, stamp = opened
    datasets, sessions = overview["datasets"], overview["sessions"]

    st.header("Datasets")
    totals = st.columns(3)
    totals[0].metric("Sessions", f"{sum(d['sessions'] for d in datasets):,}")
    totals[1].metric("Messages", f"{sum(d['messages'] for d in datasets):,}")
    totals[2].metric("Calls", f"{sum(d['calls'] for d in datasets):,}")
    st.dataframe(
        [{k: d[k] for k in ("name", "sessions", "messages", "calls", "description")} for d in datasets],
        hide_index=True,
        width="stretch",
        column_config=_COUNTS,
    )

    st.header("Sessions")
    filters = st.columns(4)
    names = [d["name"] for d in datasets if d["sessions"]]
    dataset = filters[0].selectbox("Dataset", ["(all)", *names], key="dataset")
    formats = sorted({s["format"] for s in sessions})
    chosen_formats = filters[1].multiselect("Formats", formats, default=formats, key="formats")
    only_recorded = filters[2].checkbox("Only with recorded compactions", key="only_recorded")
    search = filters[3].text_input("Id or source contains", key="search")
    rows = [
        s
        for s in sessions
        if (dataset == "(all)" or s["dataset"] == dataset)
        and s["format"] in chosen_formats
        and (not only_recorded or s["recorded_compactions"])
        and (not search or search in s["id"] or search in str(s["source"] or ""))
    ]
    st.dataframe(
        [
            {
                k: s[k]
                for k in (
                    "id",
                    "dataset",
                    "format",
                    "messages",
                    "calls",
                    "observations",
                    "characters",
                    "recorded_compactions",
                    "probes",
                    "source",
                )
            }
            for s in rows
        ],
        hide_index=True,
        width="stretch",
        column_config=_COUNTS,
    )
    if not rows:
        st.info("No session matches these filters.")
        return
    labels = {s["id"]: common.session_label(s) for s in rows}
    session_id = st.selectbox("Session", list(labels), format_func=lambda key: labels[key], key="session")
    if session_id and st.button("Compare this session", key="session_compare", icon=":material/compare_arrows:"):
        open_in_compare(session_id)
    if session_id:
        try:
            render_detail(path, stamp, session_id)
        except Exception as exc:  # a session that fails to load is a message, not a traceback
            common.show_read_error(exc)
