"""What every command prints the same way: `error: ...` + `hint: ...` on stderr, JSON on stdout.

Commands raise `fail(message, hint)` for bad input they find themselves; an `EnvregError` (message and hint),
a missing optional dependency and anything else that escapes a command are rendered here too, by the root
group (`envreg.cli.main`), so no command ends in a traceback (`ENVREG_DEBUG=1` shows it).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from envreg.extras import missing_package

try:  # typer vendors click (0.2x and later)
    from typer._click.exceptions import ClickException, UsageError
    from typer._click.globals import get_current_context
except ImportError:  # an older typer runs on click itself
    from click import get_current_context  # type: ignore[no-redef]
    from click.exceptions import ClickException, UsageError  # type: ignore[assignment,no-redef]

__all__ = ["ClickException", "UsageError", "err", "fail", "get_current_context", "print_error", "print_json"]

err = Console(emoji=False, stderr=True, highlight=False, soft_wrap=True)


def command_path() -> str:
    """The running command as typed (`envreg synth graph`), or `envreg` outside a command."""
    ctx = get_current_context(silent=True)
    return ctx.command_path if ctx is not None else "envreg"


def print_error(message: str, hint: str | None = None) -> None:
    """`error: message` and `hint: hint` on stderr; without a hint, where the command's help is."""
    err.print(f"[red]error:[/] {escape(message)}")
    err.print(f"[dim]hint:[/] {escape(hint or f'see `{command_path()} --help`')}")


def fail(message: str, hint: str | None = None, code: int = 1) -> typer.Exit:
    """Print the error and its hint; return the `typer.Exit` to raise (`raise fail(...)`).

    Exit status 1 for a failure, 2 for bad usage."""
    print_error(message, hint)
    return typer.Exit(code)


def missing_extra(exc: ModuleNotFoundError) -> tuple[str, str] | None:
    """(message, hint) for the running command when it misses a module that an extra brings, else None."""
    found = missing_package(exc)
    return None if found is None else (f"`{command_path()}` needs {found[0]}", found[1])


def print_json(data: Any) -> None:
    """`data` as JSON on stdout (indented on a terminal, one line otherwise)."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(data, indent=indent, default=str) + "\n")
    sys.stdout.flush()


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only names or ids, one per line.")]
