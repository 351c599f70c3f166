"""The app's navigation: one `st.Page` per page function; `app.py` at the repository root runs `main()`.

Streamlit serves the default page at the root URL only (its `url_path` is reserved, not served), so
the Sessions page is the default at `/` and also a hidden page at `/sessions`, like `/compare` and
the others.
"""

from __future__ import annotations

from typing import Any

import streamlit as st


def pages() -> list[Any]:
    """The app's pages (`st.Page`), in the order the navigation lists them."""
    from workbench.ui import compare, experiments, regression, sessions, sql

    return [
        st.Page(sessions.page, title="Sessions", icon=":material/forum:", url_path="", default=True),
        st.Page(compare.page, title="Compare", icon=":material/compare_arrows:", url_path=compare.URL_PATH),
        st.Page(experiments.page, title="Experiments", icon=":material/science:", url_path="experiments"),
        st.Page(regression.page, title="Regression", icon=":material/rule:", url_path="regression"),
        st.Page(sql.page, title="SQL", icon=":material/database:", url_path="sql"),
        st.Page(sessions.page, title="Sessions", icon=":material/forum:", url_path="sessions", visibility="hidden"),
    ]


def main() -> None:
    st.set_page_config(page_title="Compaction Workbench", page_icon="🗜️", layout="wide")
    st.navigation(pages()).run()
