"""`workbench kinds [FAMILY]`: every registered kind (built-in and plugin) with its parameters.

Reads `workbench.registry.describe()`, the listing the app and the README also show; needs no
database.
"""

from __future__ import annotations

from typing import Any

import click

from workbench.cli.common import options, print_json, shared_options

FAMILIES = ("trigger", "strategy", "importer", "metric")


def _param_line(param: dict[str, Any]) -> str:
    text = f"{param['name']}: {param.get('type') or 'any'}"
    if "default" in param and param.get("required") is not True:
        text += f" = {param['default']!r}"
    bounds = [f"{key} {param[key]}" for key in ("min", "max") if param.get(key) is not None]
    if param.get("choices"):
        bounds.append("one of " + ", ".join(map(str, param["choices"])))
    if bounds:
        text += f" ({'; '.join(bounds)})"
    if param.get("doc"):
        text += f"  - {param['doc']}"
    return text


def _print_text(listing: dict[str, list[dict[str, Any]]]) -> None:
    for family, entries in listing.items():
        click.echo(f"{family} ({len(entries)})")
        for entry in entries:
            extras = [f"{key} {entry[key]}" for key in ("direction", "unit", "level") if entry.get(key)]
            doc = entry.get("doc") or ""
            click.echo(
                f"  {entry['name']}" + (f"  - {doc}" if doc else "") + (f" [{', '.join(extras)}]" if extras else "")
            )
            for param in entry.get("params", []):
                click.echo(f"      {_param_line(param)}")
        click.echo("")


@click.command("kinds")
@click.argument("family", required=False, type=click.Choice(FAMILIES))
@shared_options
def kinds_cmd(family: str | None) -> None:
    """List every trigger, strategy, importer and metric kind (or one family's) with its parameters,
    defaults, bounds and one-line doc."""
    from workbench import registry

    listing = registry.describe(family)
    if options().as_json:
        print_json(listing)
    else:
        _print_text(listing)


COMMANDS = (kinds_cmd,)
