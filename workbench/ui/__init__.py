"""Streamlit pages (views only: data comes from `workbench.store`, opened read-only and briefly).

`app.py` at the repository root runs `workbench.ui.sessions.main()`.
"""
