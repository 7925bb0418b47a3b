"""How the root group ends a command that failed: `error:` + `hint:` on stderr, never a traceback.

`rendered()` wraps every command: an `EnvregError` prints its message and hint (exit 1), a missing optional
dependency names the extra to install (exit 1), either of them also as a task group's only error; a click usage
error says what was wrong and where the help is (exit 2), and anything else is reported as a bug with how to
see its traceback (`ENVREG_DEBUG=1`, exit 1).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer

from envreg.cli.output import ClickException, UsageError, fail, missing_extra, print_error


def _debug() -> bool:
    from envreg.config import debug

    return debug()


def _stdout_closed() -> None:
    """Point stdout at /dev/null so the interpreter's final flush raises nothing more."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@contextmanager
def rendered() -> Iterator[None]:
    """Turn what escapes a command into `error:` + `hint:` and an exit status."""
    from envreg.errors import EnvregError

    try:
        yield
    except (typer.Exit, typer.Abort, ClickException, KeyboardInterrupt, SystemExit):
        raise
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as git and click do
        _stdout_closed()
        raise typer.Exit(1) from None
    except Exception as exc:
        if _debug():
            raise
        leaf = _only_error(exc)
        if isinstance(leaf, EnvregError):
            raise fail(leaf.message, leaf.hint) from None
        if isinstance(leaf, ModuleNotFoundError):
            if (found := missing_extra(leaf)) is None:
                raise
            raise fail(*found) from None
        raise fail(
            f"unexpected {type(leaf).__name__}: {leaf}",
            "this is a bug in envreg: run it again with ENVREG_DEBUG=1 for the traceback, and report it",
        ) from None


def _only_error(exc: BaseException) -> BaseException:
    """The one error inside a task group's exception group (nested or not), else `exc` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def run_standalone(main: Callable[[], Any]) -> NoReturn:
    """Run the root group's `main` (non-standalone) and exit as a command-line program does."""
    try:
        code = main()
    except UsageError as exc:
        ctx = exc.ctx
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:  # a group called bare: its help
            print(ctx.get_help())
            sys.exit(exc.exit_code)
        where = ctx.command_path if ctx is not None else "envreg"
        print_error(exc.format_message(), f"see `{where} --help`")
        sys.exit(exc.exit_code)
    except ClickException as exc:
        print_error(exc.format_message())
        sys.exit(exc.exit_code)
    except typer.Abort:
        print_error("aborted", "nothing more was done")
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
