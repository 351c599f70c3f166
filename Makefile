# Every target sets itself up: a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DB ?= $(or $(WORKBENCH_DB),data/workbench.duckdb)
PORT ?= 8501

.PHONY: run test test-fast lint bench install db clean

# Python writes its bytecode (and pytest its rewritten test modules) even where the environment says not
# to: the suite starts many interpreters (CLI commands, the app, Ray workers, pytest in a user's project),
# and each would compile the package again.
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade uv

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

db: $(STAMP)
	$(BIN)/workbench init --db $(DB)

run: $(STAMP) db
	$(BIN)/streamlit run app.py --server.headless true --server.port $(PORT) -- --db $(DB)

# The suite spread over the machine's cores by pytest-xdist (PYTEST_WORKERS=0: one process). `loadfile`
# keeps a test file on one worker, so its module-scoped fixtures (databases, runs, servers) are built once.
PYTEST_WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Everything but the tests marked slow (the app, the command line, whole experiment runs, fresh interpreters,
# two processes, Ray, live Inspect evals, the notebook, scale, corpus): the library's own tests, the loop while working.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check workbench tests benchmarks
	$(BIN)/ruff format --check workbench tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# Removes only what `make` can rebuild (the venv, caches): never a database, which holds imported data.
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info
	find workbench tests benchmarks -name __pycache__ -type d -prune -exec rm -rf {} +
