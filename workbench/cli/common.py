"""What every `workbench` command shares: the options `--db`, `--json` and `--quiet` (defined once,
accepted before or after the command name), the exit statuses, error output and Ctrl-C handling.

Exit statuses: 0 success, 1 the work failed, 2 usage error (a bad option, config or `--db`), 130
interrupted (Ctrl-C or SIGTERM). Errors print one line, `error: ...`, on stderr; under `--json` they print
`{"error": {"type": ..., "message": ...}}` on stdout instead, usage errors included (and, under
`--json` only, unexpected exceptions: without it their traceback is kept, as they are bugs). Ctrl-C stops
the command with one line: the first SIGINT raises KeyboardInterrupt and further ones are ignored
while the command cleans up (a transaction in flight is finished or rolled back, the database is
closed), so the database never holds half a session and DuckDB is never torn down mid-write.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, NoReturn, TypeVar

import click

from workbench.errors import ConfigError, WorkbenchError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_META = "workbench.options"


class CommandFailed(click.ClickException):
    """The work failed after its result was printed: exit 1, with an optional message."""

    exit_code = EXIT_FAILED


@dataclass
class Options:
    """The shared options of one invocation (the last given wins)."""

    db: str | None = None
    as_json: bool = False
    quiet: bool = False

    @property
    def db_path(self) -> str:
        """`--db`, else `$WORKBENCH_DB`, else `data/workbench.duckdb`."""
        if self.db:
            return self.db
        from workbench.store.db import default_path

        return default_path()


def options() -> Options:
    """The shared options of the running command."""
    ctx = click.get_current_context()
    found = ctx.meta.get(_META)
    if found is None:
        found = ctx.meta[_META] = Options()
    assert isinstance(found, Options)
    return found


def _store(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        opts = ctx.meta.setdefault(_META, Options())  # ctx.meta is shared by the whole command chain
        if value in (None, False):
            return
        given = ctx.get_parameter_source(_param.name or name) == click.core.ParameterSource.COMMANDLINE
        if given or not getattr(opts, name):  # $WORKBENCH_DB never overrides a --db given earlier
            setattr(opts, name, value)

    return callback


def shared_options(function: F) -> F:
    """Add `--db`, `--json` and `--quiet` to a command or the group; read them with `options()`."""
    function = click.option(
        "--quiet",
        "-q",
        is_flag=True,
        expose_value=False,
        callback=_store("quiet"),
        help="Print only results and errors (no progress, warnings or notes).",
    )(function)
    function = click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=False,
        callback=_store("as_json"),
        help="Print the result (and any error) as JSON.",
    )(function)
    return click.option(
        "--db",
        metavar="PATH",
        envvar="WORKBENCH_DB",
        expose_value=False,
        callback=_store("db"),
        help="Database file [default: $WORKBENCH_DB, else data/workbench.duckdb].",
    )(function)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=_plain))


def note(message: str) -> None:
    """An informational line on stderr (silenced by --quiet)."""
    if not options().quiet:
        click.echo(message, err=True)


_FORMATTED_NUMBER = re.compile(r"[<+\-−]?\$?-?[\d,]*\.?\d+%?")  # as `workbench.formatting` writes them


def _numeric(value: Any) -> bool:
    """A number, a number as text (`1,234`, `$0.0123`, `57%`) or nothing: right-aligned in a table."""
    if value is None or value == "":
        return True
    if isinstance(value, str):
        return bool(_FORMATTED_NUMBER.fullmatch(value))
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Rows as aligned text columns (no pandas: keeps the command fast); numbers right-aligned."""
    if not rows:
        return
    cells = [[("" if row.get(c) is None else str(row.get(c))) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [
        all(_numeric(row.get(c)) for row in rows) and any(row.get(c) not in (None, "") for row in rows) for c in columns
    ]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    click.echo(line(columns))
    for row in cells:
        click.echo(line(row))


def open_store(*, must_exist: bool) -> Any:
    """The `Store` of `--db`. Commands that only read pass `must_exist=True`: a missing database
    is then an error, and no file or folder is created."""
    from workbench.store import Store

    return Store(options().db_path, create=not must_exist)


# --------------------------------------------------------------------------------------------
# Errors, exit statuses, Ctrl-C
# --------------------------------------------------------------------------------------------


def exit_status(exc: BaseException) -> int:
    """The exit status of an error a command let escape."""
    from workbench.store.db import MissingDatabaseError, NotADatabaseError

    if isinstance(exc, (ConfigError, NotADatabaseError, MissingDatabaseError, click.UsageError)):
        return EXIT_USAGE
    if isinstance(exc, click.ClickException):
        return exc.exit_code
    return EXIT_FAILED


def _json_requested(args: Sequence[str]) -> bool:
    """Whether `--json` was given (read from the arguments: a usage error may stop parsing before
    the option's callback runs)."""
    args = list(args)
    if "--" in args:
        args = args[: args.index("--")]
    return "--json" in args


def report_error(kind: str, message: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"error": {"type": kind, "message": message}}, ensure_ascii=False))
    else:
        click.echo(f"error: {message}", err=True)


#: The signals that stop a command as Ctrl-C does: SIGINT, and SIGTERM (`timeout`, `kill`, a scheduler).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Interrupt:
    """Handler of `_STOP_SIGNALS`: the first raises KeyboardInterrupt, later ones are ignored (cleanup runs)."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}

    def __call__(self, signum: int, frame: Any) -> None:
        for stop in _STOP_SIGNALS:
            signal.signal(stop, signal.SIG_IGN)
        raise KeyboardInterrupt

    def install(self) -> None:
        try:
            for stop in _STOP_SIGNALS:
                self.previous[stop] = signal.signal(stop, self)
        except ValueError:  # not the main thread (e.g. inside a test runner thread)
            self.restore()

    def restore(self) -> None:
        for stop, previous in self.previous.items():
            signal.signal(stop, previous)
        self.previous = {}


class WorkbenchGroup(click.Group):
    """The `workbench` group: runs a command and turns every error into an exit status and one
    line (or a JSON error under --json)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list with each command's whole first sentence (click cuts it at 45 characters
        and the width left, which hid what half the commands do)."""
        rows = [
            (name, command.get_short_help_str(limit=1_000))
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> NoReturn:
        arguments = list(sys.argv[1:] if args is None else args)
        as_json = _json_requested(arguments)
        _apply_offline_defaults()
        interrupt = _Interrupt()
        interrupt.install()
        status = EXIT_OK
        try:
            super().main(
                arguments, prog_name=prog_name or "workbench", complete_var=complete_var, standalone_mode=False, **extra
            )
        except click.exceptions.Exit as exc:
            status = exc.exit_code
        except (KeyboardInterrupt, click.Abort):
            report_error("Interrupted", "interrupted; nothing partial was written", as_json)
            status = EXIT_INTERRUPTED
        except CommandFailed as exc:
            if exc.message:
                report_error("CommandFailed", exc.message, as_json)
            status = EXIT_FAILED
        except click.ClickException as exc:
            if as_json:
                report_error(type(exc).__name__, exc.format_message(), True)
            else:
                exc.show()
            status = exit_status(exc)
        except WorkbenchError as exc:
            if _caused_by_interrupt(exc):  # Ctrl-C inside a DuckDB query, wrapped by the store
                report_error("Interrupted", "interrupted; nothing partial was written", as_json)
                status = EXIT_INTERRUPTED
            else:
                report_error(type(exc).__name__, str(exc), as_json)
                status = exit_status(exc)
        except Exception as exc:
            if not as_json:
                raise  # a bug: the traceback is what a maintainer needs
            report_error(type(exc).__name__, f"internal error: {exc}", True)
            status = EXIT_FAILED
        finally:
            interrupt.restore()
        sys.exit(status)


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt (or DuckDB's interrupt error) is in the error's cause chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt) or type(current).__name__ == "InterruptException":
            return True
        current = current.__cause__ or current.__context__
    return False


def _apply_offline_defaults() -> None:
    """The entry point's offline defaults (tokenizers and models without network), never
    overriding what the user set."""
    from workbench.offline import apply_defaults

    apply_defaults()


def fail(message: str, status: int = EXIT_FAILED) -> NoReturn:
    """Stop the command with `message` and `status` (2 means a usage error)."""
    if status == EXIT_USAGE:
        raise click.UsageError(message)
    raise CommandFailed(message)
