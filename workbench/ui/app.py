"""The app's navigation: one `st.Page` per page function; `app.py` at the repository root runs `main()`."""

from __future__ import annotations

import streamlit as st


def main() -> None:
    from workbench.ui import compare, experiments, sessions, sql

    st.set_page_config(page_title="Compaction Workbench", page_icon="🗜️", layout="wide")
    navigation = st.navigation([
        st.Page(sessions.page, title="Sessions", icon="📚", url_path="sessions", default=True),
        st.Page(compare.page, title="Compare", icon="⚖️", url_path="compare"),
        st.Page(experiments.page, title="Experiments", icon="🧪", url_path="experiments"),
        st.Page(sql.page, title="SQL", icon="🦆", url_path="sql"),
    ])
    navigation.run()
