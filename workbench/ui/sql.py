"""The SQL page: a DuckDB console over the workbench tables and views.

Each query opens the database read-only with external file access disabled and locked (see
`data.run_sql`), so the console can read the workbench's tables and nothing else, and write nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import streamlit as st

from workbench.store import console
from workbench.ui import common, data

if TYPE_CHECKING:
    import pandas as pd

EXAMPLE = console.EXAMPLE_QUERY


def distinct_columns(names: list[str]) -> list[str]:
    """`names` with each repeat suffixed (`a`, `a_2`, `a_3`), skipping suffixes already taken, so a
    query whose columns share a name (`SELECT 1 AS a, 2 AS a`, `SELECT *` over a join) can be shown."""
    taken = set(names)
    seen: set[str] = set()
    result = []
    for name in names:
        if name in seen:
            number = 2
            while f"{name}_{number}" in taken:
                number += 1
            renamed = f"{name}_{number}"
            taken.add(renamed)
            result.append(renamed)
        else:
            seen.add(name)
            result.append(name)
    return result


@st.cache_data(show_spinner=False, max_entries=32, ttl=600)
def cached_query(path: str, stamp: float, sql: str) -> tuple[pd.DataFrame, bool]:
    return data.run_sql(path, sql)


def page() -> None:
    path = common.database_path()
    st.title("SQL")
    st.caption(f"DuckDB console over `{path}`: read-only, no access to files outside the database.")
    if not os.path.exists(path):
        st.info(f"No database at `{path}` yet: `workbench init --db {path}` creates it with the samples.")
        return
    stamp = data.stamp(path)
    try:
        tables = data.table_names(path)
    except Exception as exc:  # shown as a message
        common.show_read_error(exc)
        return
    st.caption("Tables and views: " + ", ".join(tables))
    with st.form("sql"):
        sql = st.text_area("Query", value=EXAMPLE, height=160, key="sql_text")
        submitted = st.form_submit_button("Run")
    if not submitted and "sql_last" not in st.session_state:
        return
    if submitted:
        st.session_state["sql_last"] = sql
    query = st.session_state["sql_last"]
    if not query.strip():
        st.warning("Type a query first.")
        return
    try:
        frame, truncated = cached_query(path, stamp, query)
    except Exception as exc:  # DuckDB's message is the readable part
        common.show_read_error(exc, prefix="The query failed: ")
        return
    st.caption(f"{len(frame):,} rows" + (f" (the first {data.SQL_ROW_LIMIT:,})" if truncated else ""))
    names = [str(c) for c in frame.columns]
    shown = distinct_columns(names)
    table = frame
    if shown != names:  # Streamlit refuses a table whose columns share a name
        renamed = ", ".join(f"{old} → {new}" for old, new in zip(names, shown, strict=True) if old != new)
        st.caption(f"Columns sharing a name are numbered in the table ({renamed}); the CSV keeps the query's names.")
        table = frame.set_axis(shown, axis=1)
    st.dataframe(table, hide_index=True, width="stretch")
    st.download_button(
        "Download CSV", frame.to_csv(index=False).encode(), file_name="query.csv", mime="text/csv", key="sql_csv"
    )
