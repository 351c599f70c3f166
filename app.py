"""The Streamlit app: `streamlit run app.py -- --db PATH` (default: $WORKBENCH_DB, else data/workbench.duckdb)."""

# Streamlit runs this page as `__main__`. A worker process of a run launched from the app (executor
# "processes") runs it again as `__mp_main__`: it must neither start a second app nor import one.
if __name__ == "__main__":
    from workbench.offline import apply_defaults
    from workbench.ui.app import main

    apply_defaults()  # offline tokenizers and price map for the app's process; the user's own settings win
    main()
