"""Every command and subcommand `envreg --help` lists, walked with bad input: no traceback, ever, and every
failure says `error:` and `hint:`. Commands are discovered from the typer app (commands added later are
walked too); the lazy command table (`envreg.cli.main.COMMANDS`) must agree with what the modules register."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from conftest import envreg_without
from typer.testing import CliRunner

from envreg.cli.errors import rendered
from envreg.cli.main import COMMANDS, app, load_command
from envreg.errors import SandboxGone

ROOT = Path(__file__).resolve().parent.parent
SERVERS = {("serve",), ("serve-env",), ("registry", "serve"), ("reward", "serve")}
"""Commands that run until stopped: walked with bad input only, never with their defaults."""
BAD = {
    ("synth", "graph"): ["--manifests", "bad.json"],
    ("synth", "run"): ["--manifests", "bad.json"],
    ("adapters", "bfcl", "replay"): ["--category", "no-such-category"],
    ("adapters", "bfcl", "generate"): ["--lock", "bad.json"],
    ("adapters", "tau2", "replay"): ["--domain", "no-such-domain"],
    ("adapters", "tau2", "generate"): ["--domain", "no-such-domain"],
    ("manifest",): ["no-such-env-x1"],
    ("build",): ["no-such-env-x1"],
    ("catalog",): ["--manifests", "bad.json"],
}
"""Commands whose defaults do real work (a whole synthesis run, every manifest): their bad input."""


def walk() -> list[tuple[tuple[str, ...], Any]]:
    """(path, click command) of every leaf command under the root, as the app lists them."""
    root = typer.main.get_command(app)
    found: list[tuple[tuple[str, ...], Any]] = []

    def visit(group: Any, path: tuple[str, ...]) -> None:
        ctx = group.make_context("envreg", [], resilient_parsing=True)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, f"{' '.join((*path, name))} is listed but does not load"
            if hasattr(command, "list_commands"):
                visit(command, (*path, name))
            else:
                found.append(((*path, name), command))

    visit(root, ())
    return found


COMMAND_PATHS = [path for path, _ in walk()]


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh home, no daemon, no Docker engine (DOCKER_HOST names a socket that does not exist)."""
    monkeypatch.setenv("ENVREG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    for name in ("ENVREG_DAEMON_URL", "ENVREG_TOKEN", "ENVREG_REGISTRY", "ENVREG_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    return tmp_path


def invoke(args: list[str]) -> Any:
    result = CliRunner().invoke(app, args, catch_exceptions=True)
    return result


def assert_clean(args: list[str], result: Any) -> None:
    """No traceback; a failure prints `error:` and `hint:`."""
    shown = f"envreg {' '.join(args)} -> exit {result.exit_code}\n{result.output}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{shown}\nraised {result.exception!r}") from result.exception
    assert "Traceback" not in result.output, shown
    if result.exit_code not in (0, None):
        assert "error:" in result.output and "hint:" in result.output, shown
        assert "this is a bug in envreg" not in result.output, shown


def annotation(param: Any) -> str:
    """A parameter's type as text: typer's own (the annotation) or, on an older typer, click's type."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        return str(getattr(descriptor, "annotation", ""))
    return type(getattr(param, "type", None)).__name__


def is_number(param: Any) -> bool:
    kind = annotation(param)
    return kind in ("<class 'int'>", "<class 'float'>") or kind.startswith(("Int", "Float"))


def bad_arguments(command: Any, tmp: Path) -> list[str]:
    """Values for the required arguments that cannot work: an environment that does not exist, a file that
    is not JSON."""
    args = []
    for param in command.params:
        if getattr(param, "param_type_name", "") != "argument" or not param.required:
            continue
        is_path = "path" in annotation(param).lower()
        value = str(tmp / "bad.json") if is_path else "no-such-env-x1"
        args += [value] * (2 if param.nargs == -1 else 1)
    return args


def test_the_command_table_matches_the_modules() -> None:
    """Every name in the lazy table is registered by its module under that name, with that help line, and
    every command a module registers is in the table."""
    for name, (module, help_line) in COMMANDS.items():
        command = load_command(name)
        assert command is not None, f"envreg.cli.{module} registers no command {name!r}"
        real = (command.help or "").strip().split("\n\n")[0].replace("\n", " ")
        assert real == help_line, f"{name}: the table says {help_line!r}, the command {real!r}"
    registered: dict[str, set[str]] = {}
    for name, (module, _) in COMMANDS.items():
        registered.setdefault(module, set()).add(name)
    from envreg.cli.main import _modules

    for module, group in _modules.items():
        assert set(group.commands) == registered[module], module


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=" ".join)
def test_help_of_every_command(path: tuple[str, ...], cli_env: Path) -> None:
    for flag in ("--help", "-h"):
        result = invoke([*path, flag])
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.output


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=" ".join)
def test_bad_input_never_ends_in_a_traceback(path: tuple[str, ...], cli_env: Path) -> None:
    command = dict(walk())[path]
    runs: list[list[str]] = []
    if path in BAD:
        runs.append([*path, *BAD[path]])
    elif path not in SERVERS:
        runs.append([*path, *bad_arguments(command, cli_env)])
    for param in command.params:  # a number option given text
        if getattr(param, "param_type_name", "") == "option" and is_number(param):
            runs.append([*path, *bad_arguments(command, cli_env), param.opts[0], "not-a-number"])
            break
    runs.append([*path, "--no-such-option"])
    for args in runs:
        assert_clean(args, invoke(args))


@pytest.mark.parametrize(
    "args",
    [
        ["episode", "no-such-env", "--isolation", "local"],
        ["episode", "calendar", "--isolation", "local", "--scenario", "no-such-scenario"],
        ["episode", "calendar", "--isolation", "nowhere"],
        ["episode", "calendar"],  # the container tier without an engine
        ["run", "no-such-env", "--isolation", "local"],
        ["run", "calendar", "--isolation", "local", "--state", "bad.json"],
        ["run", "calendar:9.9.9"],
        ["inspect", "calendar:9.9.9"],
        ["inspect", "calendar@sha256:" + "0" * 64],
        ["pull", "calendar:9.9.9"],
        ["pull", "--locked", "--lockfile", "bad.json"],
        ["load", "bad.json"],
        ["reward", "score", "bad.json"],
        ["synth", "export", "bad.json"],
        ["synth", "replay", "bad.json"],
        ["gc"],
        ["gc", "--dry-run"],
        ["ps"],
        ["stop", "--all"],
        ["stop"],
        ["logs", "sb_0000"],
        ["build", "no-such-env"],
        ["validate", "no-such-env"],
        ["manifest", "no-such-env"],
        ["schema", "no-such-format"],
        ["catalog", "--manifests", "bad.json"],
    ],
    ids=" ".join,
)
def test_named_failures_say_what_and_how(args: list[str], cli_env: Path) -> None:
    result = invoke(args)
    assert_clean(args, result)
    assert result.exit_code not in (0, None), result.output


@pytest.mark.parametrize(
    ("blocked", "args", "extra"),
    [
        (["fastapi"], ["serve", "--port", "0"], "server"),
        (["fastapi"], ["reward", "serve", "--port", "0"], "server"),
        (["networkx", "torch", "sentence_transformers"], ["synth", "graph", "--out", "g.json"], "synth"),
        (["bfcl_eval"], ["manifest", "--check", "bfcl-math-api"], "bfcl-eval"),
        (["tau2", "loguru"], ["manifest", "--check", "tau2-airline"], "tau2"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_a_missing_extra_names_what_to_install(
    blocked: list[str], args: list[str], extra: str, cli_env: Path
) -> None:
    proc = envreg_without(
        set(blocked), args, env={**os.environ, "ENVREG_IMAGES": str(ROOT / "images")}, cwd=cli_env
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "error:" in proc.stderr and "hint:" in proc.stderr, proc.stderr
    assert (f"envreg[{extra}]" if extra != "bfcl-eval" else "bfcl-requirements.lock") in proc.stderr, (
        proc.stderr
    )


@pytest.mark.parametrize(
    ("raised", "shown"),
    [
        (ModuleNotFoundError("No module named 'tau2'", name="tau2"), "pip install 'envreg[tau2]'"),
        (SandboxGone("sandbox sb_1 is gone", "open a new one"), "open a new one"),
    ],
    ids=["missing-extra", "envreg-error"],
)
def test_a_task_groups_only_error_is_rendered_as_itself(
    raised: Exception, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error raised in a task (synthesis and replays run their sandboxes in task groups) reaches the command's
    end wrapped in an ExceptionGroup: it is reported as itself, not as "unexpected ExceptionGroup"."""

    async def fails() -> None:
        raise raised

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(fails)

    with pytest.raises(typer.Exit) as ended, rendered():
        anyio.run(main)
    assert ended.value.exit_code == 1
    stderr = capsys.readouterr().err
    assert shown in stderr and "ExceptionGroup" not in stderr, stderr


def test_build_skips_what_needs_a_missing_extra_unless_it_is_named(cli_env: Path) -> None:
    """`envreg build` of the whole folder builds what this venv can load and says what it skipped and why (a
    fresh clone's `scripts/test` and `scripts/demo` have no tau2); an environment named outright is refused."""
    images = cli_env / "images"
    for name in ("calendar", "tau2-airline"):
        shutil.copytree(ROOT / "images" / name, images / name, ignore=shutil.ignore_patterns("__pycache__"))

    def build(*args: str) -> subprocess.CompletedProcess:
        argv = ["build", "--images-dir", str(images), "--manifests-dir", str(cli_env / "manifests"), *args]
        return envreg_without({"tau2", "loguru"}, argv, cwd=cli_env)

    whole = build()
    assert "skipped: tau2-airline: its code needs tau2" in whole.stderr, whole.stderr
    assert "pip install 'envreg[tau2]'" in whole.stderr and "refused" not in whole.stderr, whole.stderr
    # calendar went on to the build itself, which needs the engine that this test does not have
    assert whole.returncode == 1 and "scripts/setup-docker" in whole.stderr, whole.stderr
    assert "Traceback" not in whole.stderr, whole.stderr

    named = build("tau2-airline", "calendar")
    assert named.returncode == 1 and "nothing was built or tagged" in named.stderr, named.stderr
    assert "refused: tau2-airline: the environment does not load: it needs tau2" in named.stderr, named.stderr
    assert "pip install 'envreg[tau2]'" in named.stderr and "setup-docker" not in named.stderr, named.stderr

    shutil.rmtree(images / "calendar")
    alone = build()
    assert alone.returncode == 1 and "nothing to build: every environment was skipped" in alone.stderr


def test_version_and_completion(cli_env: Path) -> None:
    from envreg import __version__

    for flag in ("--version", "-V"):
        result = invoke([flag])
        assert result.exit_code == 0 and result.output.strip() == f"envreg {__version__}"
    # what the shell's completion hooks do (`--show-completion` finds the shell among this process's
    # ancestors, and a test run may have none): the script for bash, then the words for `envreg cat<TAB>`
    script = CliRunner().invoke(app, [], env={"_ENVREG_COMPLETE": "source_bash"}, prog_name="envreg")
    assert script.exit_code == 0 and "_ENVREG_COMPLETE" in script.output, script.output
    words = CliRunner().invoke(
        app,
        [],
        env={"_ENVREG_COMPLETE": "complete_bash", "COMP_WORDS": "envreg cat", "COMP_CWORD": "1"},
        prog_name="envreg",
    )
    assert words.exit_code == 0 and "catalog" in words.output.split(), words.output


@pytest.mark.parametrize("args", [["catalog"], ["catalog", "--json"], ["schema", "manifest"]])
def test_a_reader_that_went_away_ends_the_command_quietly(args: list[str], cli_env: Path) -> None:
    """`envreg ... | head -1`: when stdout's reader has gone, the command stops with exit 1 and nothing on
    stderr, as git and click do (not "unexpected BrokenPipeError ... a bug in envreg")."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout now fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from envreg.cli.main import app; app(prog_name='envreg')", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "", proc.stderr


def test_help_imports_no_command() -> None:
    """`envreg --help` lists every command without importing the runtime, pydantic, the mcp SDK or any
    command module (bench/bench_cli.py measures the time)."""
    code = (
        "import sys\nfrom envreg.cli.main import app\n"
        "try:\n    app(['--help'], prog_name='envreg')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'mcp', 'httpx2', 'docker') "
        "or m.startswith(('envreg.runtime', 'envreg.env', 'envreg.cli.')) and m not in "
        "('envreg.cli.main', 'envreg.cli.errors', 'envreg.cli.output')), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "[]", proc.stderr
    for name in COMMANDS:
        assert name in proc.stdout


def test_search_and_inspect_fall_back_to_the_committed_manifests(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVREG_MANIFESTS", str(ROOT / "manifests"))
    result = invoke(["search", "get_directions", "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    assert [(h["name"], h["where"]) for h in hits] == [("maps", "catalog")]
    assert "tool:get_directions" in hits[0]["matched"]
    shown = invoke(["inspect", "maps", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert data["manifest"]["name"] == "maps" and data["source"].startswith("catalog")
    assert invoke(["search", "get_directions", "-q"]).output == "maps\n"


def test_error_text_is_shown_as_written_never_as_emoji(capsys: pytest.CaptureFixture[str]) -> None:
    from envreg.cli.output import print_error

    print_error("no environment ':calendar:' here", "try :smile: [bold]x[/bold]")
    shown = capsys.readouterr().err
    assert "':calendar:'" in shown and ":smile: [bold]x[/bold]" in shown, shown
