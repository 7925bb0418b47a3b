"""The `envreg` typer app: one module per command group, imported when its command runs.

`COMMANDS` names each top-level command, the module whose `register(app)` adds it, and its one-line help,
so that `envreg --help` and shell completion list every command without importing any of them (the
runtime, pydantic and the mcp SDK stay unimported until a command needs them). A module may also be
registered eagerly (`module.register(app)` below the app); `tests/test_cli_walk.py` checks that the table
and the modules agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from envreg import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "catalog": (
        "catalog",
        "List the catalog (environment, domain, tools, scenarios, what it is) from manifests/.",
    ),
    "manifest": ("manifest", "Generate manifests/<name>.json from each environment's code."),
    "build": (
        "build",
        "Build the base and environment images (<prefix>/<name>:<version>) with docker buildx bake.",
    ),
    "validate": (
        "validate",
        "Check that environment images are executable, stateful, isolated and deterministic.",
    ),
    "episode": (
        "episode",
        "Play a scenario's calls as a scripted agent over MCP in a sandbox; print calls, state hash, reward.",
    ),
    "serve": (
        "runtime",
        "Run the runtime daemon: a REST control API (OpenAPI at /openapi.json) and the MCP gateway, on one port.",
    ),
    "run": ("runtime", "Start a sandbox and print its MCP URL and token for an external agent."),
    "ps": ("runtime", "List the daemon's sandboxes."),
    "logs": ("runtime", "Print the log of a sandbox's environment server (its container's output)."),
    "stop": ("runtime", "Stop sandboxes the daemon leases (their containers or instances are removed)."),
    "gc": (
        "runtime",
        "Remove envreg containers, networks and socket folders whose runtime has ended (or whose hard expiry passed).",
    ),
    "serve-env": (
        "serve_env",
        "Serve an environment over MCP streamable HTTP, with a token-protected control plane.",
    ),
    "push": ("registry", "Push an environment to an OCI registry (then pull it anywhere by digest)."),
    "pull": (
        "registry",
        "Pull environments by digest, verifying image and manifest digests and the environment code.",
    ),
    "search": (
        "registry",
        "Find environments in the local index, the committed manifests and a registry (metadata only).",
    ),
    "ls": ("registry", "List the environments in the local index."),
    "inspect": ("registry", "Show an environment: manifest, tools and state schema."),
    "rm": ("registry", "Remove environments from the local index and untag their images."),
    "lock": ("registry", "Pin a suite of environments by image and manifest digest in envreg.lock."),
    "save": (
        "registry",
        "Save environments (images, manifests, lock) into one archive for air-gapped hosts.",
    ),
    "load": ("registry", "Load an archive; every digest is verified before anything is recorded."),
    "registry": ("registry", "A local OCI registry (CNCF Distribution) to push to and pull from."),
    "reward": ("reward", "Score model outputs by replaying them in sandboxes against trajectory records."),
    "synth": ("synth", "Synthesis: tool graph, executed multi-turn trajectories, SFT / RL exports."),
    "augment": (
        "augment",
        "Augment records and scenarios with COVERT's families; write only the variants that pass verification.",
    ),
    "adapters": ("adapters", "Foreign environments served through envreg."),
    "import": ("importers", "Import environments written for other frameworks."),
    "scenario": ("scenario", "Validation scenarios: record their calls' results and final states."),
    "envgen": (
        "envgen",
        "EnvGen: environments from API metadata, every revision built and validated in containers.",
    ),
    "eval": (
        "eval",
        "Play every task `--trials` times with the model; print pass@1, pass^k and mean reward by environment and domain.",
    ),
    "report": (
        "report",
        "Write the console's pages for trajectory, rollout and validation files as static HTML under --html OUT/.",
    ),
    "schema": (
        "schema",
        "Print the JSON Schema of an envreg file format (manifest, scenario, trajectory, lock).",
    ),
}
"""command -> (module under envreg.cli, its one-line help)."""


class LazyGroup(TyperGroup):
    """The root group: commands of `COMMANDS` are imported on first use; errors are `error:` + `hint:`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        eager = [name for name in super().list_commands(ctx) if name not in COMMANDS]
        return [*COMMANDS, *eager]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if (command := super().get_command(ctx, cmd_name)) is not None:
            return command
        if cmd_name not in COMMANDS:
            return None
        if self._listing:  # help and completion need the name and the help line only
            return TyperCommand(name=cmd_name, help=COMMANDS[cmd_name][1], callback=None)
        return load_command(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False

    def invoke(self, ctx: Any) -> Any:
        from envreg.cli.errors import rendered

        with rendered():
            return super().invoke(ctx)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        from envreg.cli.errors import run_standalone

        return run_standalone(
            lambda: super(LazyGroup, self).main(args, prog_name, complete_var, standalone_mode=False, **extra)
        )


_modules: dict[str, Any] = {}


def load_command(name: str) -> Any:
    """The click command `name` as its module registers it (the module imported once)."""
    module_name = COMMANDS[name][0]
    if module_name not in _modules:
        registered = typer.Typer()
        import_module(f"envreg.cli.{module_name}").register(registered)
        _modules[module_name] = typer.main.get_group(registered)
    return _modules[module_name].commands.get(name)


def _print_version(value: bool) -> None:
    if value:
        print(f"envreg {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="envreg",
    cls=LazyGroup,
    help="Registry and sandbox runtime for executable, stateful tool-use environments.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Registry and sandbox runtime for executable, stateful tool-use environments."""


if __name__ == "__main__":
    app()
