"""Strategy kinds, one module per family; importing this package registers them all."""

from workbench.strategies import composite, inspect_kinds, recorded, summaries, tools, windows  # noqa: F401
from workbench.strategies.common import keep_last_fraction

__all__ = ["keep_last_fraction"]
