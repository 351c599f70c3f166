"""The Streamlit app: `streamlit run app.py -- --db PATH` (default: $WORKBENCH_DB, else data/workbench.duckdb)."""

from workbench.offline import apply_defaults
from workbench.ui.app import main

# Streamlit runs this page as `__main__`. A worker process of a run launched from the app (executor
# "processes") imports it again as `__mp_main__`, and must not start a second app.
if __name__ == "__main__":
    apply_defaults()  # offline tokenizers and price map for the app's process; the user's own settings win
    main()
