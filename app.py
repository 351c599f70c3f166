"""The Streamlit app: `streamlit run app.py -- --db PATH` (default: $WORKBENCH_DB, else data/workbench.duckdb)."""

from workbench.ui.sessions import main

main()
