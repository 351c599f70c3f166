"""The `workbench` command (also `python -m workbench`), a package of command modules.

`main` is the click group; the options every command shares (`--db`, `--json`, `--quiet`), the
exit statuses, JSON errors and Ctrl-C handling live in `common`. Each command module defines
its commands and lists them in a module-level `COMMANDS` tuple; adding a module name to
`COMMAND_MODULES` registers them.

Heavy libraries (pandas, litellm, streamlit) are imported by the commands that need them, never
at module level, so `workbench --help` stays fast.
"""

from __future__ import annotations

import importlib

import click

from workbench.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, WorkbenchGroup, shared_options
from workbench.cli.data import FORMAT_CHOICES, format_names, init_database

__all__ = [
    "COMMAND_MODULES",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "FORMAT_CHOICES",
    "format_names",
    "init_database",
    "main",
]

COMMAND_MODULES = ("data", "replay", "kinds", "experiments", "audit")


@click.group(cls=WorkbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@shared_options
@click.version_option(package_name="compaction-workbench", prog_name="workbench")
def main() -> None:
    """Compaction Workbench: import recorded agent sessions and replay them under compaction configs.

    Exit status: 0 ok, 1 the work failed, 2 usage error, 130 interrupted.
    """


def _register_commands() -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        for command in module.COMMANDS:
            main.add_command(command)


_register_commands()
