"""The reference pages in docs/ are what the code declares (regenerated and compared), and the
command list of `workbench --help` says what each command does."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.cli.reference import PAGES, builtin_kinds, configuration_reference
from workbench.registry import describe

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_checked_in_reference_is_what_the_code_declares(name):
    checked_in = (DOCS / name).read_text(encoding="utf-8")
    assert checked_in == PAGES[name](), f"docs/{name} is stale: run `python -m workbench.cli.reference docs`"


def test_the_configuration_reference_names_every_built_in_kind_and_parameter():
    page = configuration_reference()
    for family, entries in describe().items():
        for entry in entries:
            if entry["name"] not in builtin_kinds(family):
                continue
            assert f"`{entry['name']}`" in page, (family, entry["name"])
            for param in entry["params"]:
                assert f"`{param['name']}`" in page, (family, entry["name"], param["name"])
    assert "| `fact_retention` | higher |" in page


def test_the_command_list_says_what_each_command_does_whole():
    text = CliRunner().invoke(main, ["--help"], terminal_width=200).output
    assert "..." not in text.split("Commands:")[1]
    assert "the agent's own recorded compactions, probes, source)" in text
