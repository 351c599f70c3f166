"""The quickstart notebook runs top to bottom (as a user would run it from experiments/)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a Jupyter kernel running the notebook: `make test-fast` leaves it out

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def test_the_quickstart_notebook_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXPERIMENTS / "quickstart.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(EXPERIMENTS)}}
    )
    client.execute()
    outputs = [cell.get("outputs", []) for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not any(o.get("output_type") == "error" for o in cell) for cell in outputs)
    comparison = [o for o in outputs[2] if o.get("output_type") == "execute_result"]
    assert comparison and "billed_input_tokens" in comparison[0]["data"]["text/plain"]
    figure = [o for o in outputs[3] if o.get("output_type") in ("execute_result", "display_data")]
    assert figure and "application/vnd.plotly.v1+json" in figure[0]["data"]
    trap = [o for o in outputs[5] if o.get("output_type") == "execute_result"]
    corpus = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "mini-swe-agent-gemini3"
    expected = "input reduction" if corpus.is_dir() else "shared/corpora is not here"
    assert trap and expected in trap[0]["data"]["text/plain"]
    loop = [o for o in outputs[6] if o.get("output_type") == "execute_result"]
    assert loop, outputs[6]
    table = loop[0]["data"]["text/plain"].splitlines()  # live and replayed compaction calls, row by row
    rows = [line.split()[1:] for line in table[1:]]
    assert rows and all(len(row) == 2 and row[0] == row[1] for row in rows), table
