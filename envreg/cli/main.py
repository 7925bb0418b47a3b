"""The `envreg` typer app: one module per command group, registered here."""

from __future__ import annotations

import typer

from envreg.cli import adapters as adapters_cmd
from envreg.cli import augment as augment_cmd
from envreg.cli import build as build_cmd
from envreg.cli import catalog as catalog_cmd
from envreg.cli import episode as episode_cmd
from envreg.cli import importers as importers_cmd
from envreg.cli import manifest as manifest_cmd
from envreg.cli import registry as registry_cmd
from envreg.cli import reward as reward_cmd
from envreg.cli import runtime as runtime_cmd
from envreg.cli import serve_env as serve_env_cmd
from envreg.cli import synth as synth_cmd
from envreg.cli import validate as validate_cmd

app = typer.Typer(
    name="envreg",
    help="Registry and sandbox runtime for executable, stateful tool-use environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

adapters_cmd.register(app)
augment_cmd.register(app)
build_cmd.register(app)
catalog_cmd.register(app)
episode_cmd.register(app)
importers_cmd.register(app)
manifest_cmd.register(app)
runtime_cmd.register(app)
registry_cmd.register(app)
reward_cmd.register(app)
serve_env_cmd.register(app)
synth_cmd.register(app)
validate_cmd.register(app)


if __name__ == "__main__":
    app()
