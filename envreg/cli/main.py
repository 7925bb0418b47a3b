"""The `envreg` typer app: one module per command group, registered here."""

from __future__ import annotations

import typer

from envreg.cli import manifest as manifest_cmd
from envreg.cli import serve_env as serve_env_cmd

app = typer.Typer(
    name="envreg",
    help="Registry and sandbox runtime for executable, stateful tool-use environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

manifest_cmd.register(app)
serve_env_cmd.register(app)


if __name__ == "__main__":
    app()
