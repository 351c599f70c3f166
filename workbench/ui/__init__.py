"""Streamlit pages (views only: data comes from the library, the database opened read-only and briefly).

`app.py` at the repository root runs `workbench.ui.app.main()`: Sessions, Compare, Experiments, SQL.
"""
