"""The Streamlit app: `streamlit run app.py -- --db PATH` (default: $WORKBENCH_DB, else data/workbench.duckdb)."""

from workbench.offline import apply_defaults
from workbench.ui.app import main

apply_defaults()  # offline tokenizers and price map for the app's process; the user's own settings win
main()
