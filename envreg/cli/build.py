"""`envreg build`: build the base image and environment images with `docker buildx bake`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import deque
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envreg.cli.output import err, fail
from envreg.extras import missing_package
from envreg.protocol import MANIFEST_DIGEST_LABEL

out = Console(emoji=False)

_STEP = re.compile(r"^#(\d+) (.*)$")


def _run_bake(cmd: list[str], *, label: str, progress: str) -> None:
    """Run one bake; a rich live status of the current build step unless `progress` is 'plain'."""
    if progress == "plain":
        proc = subprocess.run(cmd)
        if proc.returncode:
            raise typer.Exit(proc.returncode)
        return
    tail: deque[str] = deque(maxlen=60)
    names: dict[str, str] = {}
    done = 0
    with err.status(f"[bold]{label}[/]: starting", spinner="dots") as status:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            m = _STEP.match(line)
            if not m:
                continue
            vid, rest = m.groups()
            if (
                vid not in names
                and not rest.startswith(("DONE", "CACHED", "ERROR", "CANCELED"))
                and not rest[:1].isdigit()
            ):
                names[vid] = rest
            elif rest.startswith(("DONE", "CACHED")):
                done += 1
            step = names.get(vid, rest)
            status.update(f"[bold]{label}[/]: {done} steps done; {step[:100]}")
        rc = proc.wait()
    if rc:
        err.print("\n".join(tail), markup=False, highlight=False)
        raise fail(
            f"docker buildx bake failed ({label}, exit {rc})",
            "the build log is above; `envreg build --progress plain` shows all of it",
        )
    err.print(f"[green]built[/] {label} ({done} steps)")


def _inspect(ref: str) -> dict[str, Any] | None:
    proc = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True)
    return json.loads(proc.stdout)[0] if proc.returncode == 0 else None


def _would_move(image: Any) -> str | None:
    """Why building `image` would silently change what its tag runs, or None when it would not."""
    current = _inspect(image.tag)
    if current is None:
        return None
    label = (current["Config"].get("Labels") or {}).get(MANIFEST_DIGEST_LABEL, "")
    if label == image.manifest_digest:
        return None
    return (
        f"{image.name}: {image.tag} is already image {current['Id'].removeprefix('sha256:')[:12]} with manifest "
        f"{label.removeprefix('sha256:')[:12] or '(none)'}, and this build's manifest is "
        f"{image.manifest_digest.removeprefix('sha256:')[:12]}: a version names one environment. Bump the "
        f"version (Environment({image.name!r}, ..., version=...)), or pass --force to move the tag "
        "(other users of this engine then run the new image)"
    )


def build(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Environments to build (default: every one in the images folder that loads here: one whose code "
            "needs an extra this venv lacks, such as tau2's, is skipped with a note)."
        ),
    ] = None,
    images_dir: Annotated[
        Path | None,
        typer.Option(
            "--images-dir",
            help="Environments folder (default: $ENVREG_IMAGES or ./images).",
            show_default=False,
        ),
    ] = None,
    manifests_dir: Annotated[
        Path | None,
        typer.Option(
            "--manifests-dir",
            help="Manifests folder (default: $ENVREG_MANIFESTS or ./manifests).",
            show_default=False,
        ),
    ] = None,
    frozen: Annotated[
        bool, typer.Option("--frozen", help="Refuse stale manifests instead of regenerating them (for CI).")
    ] = False,
    progress: Annotated[
        str, typer.Option(help="'rich' (a live status) or 'plain' (the raw BuildKit log).")
    ] = "rich",
    print_only: Annotated[
        bool,
        typer.Option(
            "--print", help="Print the bake definition; build, stage and write nothing (no manifest either)."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON instead of a table.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Move an existing <prefix>/<name>:<version> tag even when it names an image of other code.",
        ),
    ] = False,
) -> None:
    """Build the base and environment images (<prefix>/<name>:<version>) with docker buildx bake.

    The prefix is $ENVREG_IMAGE_PREFIX (default envreg; always joined with a '/': team -> team/calendar:1.0.0,
    team/base:0.1.0). A version names one environment: an existing tag whose manifest digest differs from
    the new build's is not moved (bump the version), unless --force. Outside an envreg checkout the images
    are built from the installed package's catalog, with its manifests as they are (--frozen)."""
    from envreg.config import manifests_dir as config_manifests_dir
    from envreg.docker_engine import EngineUnavailable, require_engine
    from envreg.env.loader import known_names, resolve_folder
    from envreg.images import (
        EnvImage,
        ImageBuildError,
        bake_command,
        bake_vars,
        base_tag,
        build_base_rootfs,
        envreg_version,
        git_facts,
        paths,
        source_date_epoch,
        stage_base,
        stage_env,
    )
    from envreg.manifest import Manifest, check_manifest, manifest_of, manifest_path, write_manifest

    try:
        p = paths()
    except ImageBuildError as exc:
        raise fail(str(exc), "install envreg from its wheel, or run inside a clone of envreg") from None
    frozen = frozen or not p.checkout  # a wheel's catalog is read-only: its manifests are what it ships
    if images_dir is not None:
        os.environ["ENVREG_IMAGES"] = str(images_dir.resolve())
    elif "ENVREG_IMAGES" not in os.environ and (p.root / "images").is_dir():
        os.environ["ENVREG_IMAGES"] = str(p.root / "images")
    mdir = (manifests_dir or config_manifests_dir() or p.root / "manifests").resolve()

    refs = names or known_names()
    if not refs:
        raise fail(
            f"no environments given and none found under {os.environ.get('ENVREG_IMAGES')}",
            "name them (`envreg build calendar bank`), or pass --images-dir FOLDER",
            2,
        )

    # 1. every manifest must be sound before anything is built or tagged
    envs: list[tuple[EnvImage, Path, Path]] = []
    refused: list[str] = []
    skipped: list[str] = []
    for ref in refs:
        try:
            env = manifest_of(ref)  # generated from the code; a foreign folder's in a container sandbox
            folder = resolve_folder(ref)
        except Exception as exc:
            needs = missing_package(exc) if isinstance(exc, ModuleNotFoundError) else None
            if needs and not names:  # the whole catalog was asked for: build what this venv can generate
                skipped.append(f"{ref}: its code needs {needs[0]} ({needs[1]})")
            else:
                reason = f"it needs {needs[0]} ({needs[1]})" if needs else str(exc)
                refused.append(f"{ref}: the environment does not load: {reason}")
            continue
        path = manifest_path(env.name, mdir)
        if path.is_file():
            try:
                Manifest.loads(path.read_text()).verify()
            except ValueError as exc:
                refused.append(
                    f"{env.name}: {path} is not a valid manifest: {str(exc).splitlines()[0]}"
                    f" (regenerate it with `envreg manifest {env.name}` and review the diff)"
                )
                continue
        problem = check_manifest(env, mdir)
        if problem and frozen:
            refused.append(f"{env.name}: {problem} (run `envreg manifest {env.name}` and commit the result)")
            continue
        if problem and print_only:  # what the build would write, written nowhere
            digest = env.digests.manifest
        else:
            if problem:
                write_manifest(env, mdir)
                err.print(f"[yellow]regenerated[/] {path}: {problem}")
            m = Manifest.loads(path.read_text())
            m.verify()
            digest = m.digests.manifest
        image = EnvImage(env.name, env.version, env.description, digest)
        if not force and not print_only and (moved := _would_move(image)):
            refused.append(moved)
            continue
        envs.append((image, folder, path))
    for line in skipped:
        err.print(f"[yellow]skipped:[/] {escape(line)}")
    if refused:
        for r in refused:
            err.print(f"[red]refused:[/] {escape(r)}")
        raise fail("nothing was built or tagged", "fix what each `refused:` line says, then build again")
    if not envs:
        raise fail(
            "nothing to build: every environment was skipped", "install what each `skipped:` line names"
        )
    if print_only:
        _print_bake(p, [e for e, _, _ in envs])
        return

    try:
        require_engine(buildx=True)
        # 2. the pinned base rootfs (rebuilt from Debian and checked against images/base/base.lock if missing)
        lock = build_base_rootfs(p=p)
        # 3. stage contexts, write the bake variables
        epoch = source_date_epoch(p.root)
        revision, _, source = git_facts(p.root)
        stage_base(p, epoch)
        for e, folder, mpath in envs:
            stage_env(p, e.name, folder, mpath, epoch)
    except EngineUnavailable as exc:
        raise fail(exc.message, exc.hint) from None
    except ImageBuildError as exc:
        raise fail(str(exc), "nothing was tagged; fix what it says and build again") from None
    version = envreg_version(p.root)
    vars_file = p.stage / "vars.json"
    vars_file.write_text(
        json.dumps(
            bake_vars(
                [e for e, _, _ in envs],
                lock=lock,
                epoch=epoch,
                version=version,
                revision=revision,
                source=source,
                stage=p.stage,
            ),
            indent=2,
        )
        + "\n"
    )
    env_targets = [f"env-{e.name}" for e, _, _ in envs]

    # 4. bake: base first (env images use it as FROM once loaded), then the environments
    _run_bake(
        bake_command(p, vars_file, ["base"], progress="plain"), label=base_tag(version), progress=progress
    )
    _run_bake(
        bake_command(p, vars_file, env_targets, progress="plain"),
        label=", ".join(e.tag for e, _, _ in envs),
        progress=progress,
    )

    # 5. report
    rows = []
    for tag, name, ver, mdigest in [
        (base_tag(version), "base", version, ""),
        *((e.tag, e.name, e.version, e.manifest_digest) for e, _, _ in envs),
    ]:
        info = _inspect(tag)
        if info is None:
            raise fail(f"{tag} is missing after the build", "the engine dropped it: build again")
        label = (info["Config"].get("Labels") or {}).get(MANIFEST_DIGEST_LABEL, "")
        if mdigest and label != mdigest:
            raise fail(
                f"{tag} carries manifest digest {label!r}, expected {mdigest}",
                "another build moved the tag meanwhile: build again",
            )
        if mdigest:
            from envreg.registry import record_image

            record_image(info["Id"], "built", tag=False)
        rows.append(
            {
                "name": name,
                "version": ver,
                "tag": tag,
                "image_id": info["Id"],
                "manifest_digest": mdigest,
                "size": info["Size"],
            }
        )
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(title="envreg images")
    for col in ("name", "version", "image ID", "manifest digest", "size"):
        table.add_column(col, justify="right" if col == "size" else "left")
    for r in rows:
        table.add_row(
            r["name"],
            r["version"],
            r["image_id"].removeprefix("sha256:")[:12],
            r["manifest_digest"].removeprefix("sha256:")[:12] or "-",
            f"{r['size'] / 1e6:.0f} MB",
        )
    out.print(table)


def _print_bake(p: Any, envs: list[Any]) -> None:
    """`docker buildx bake --print` of what `envreg build` would build: the variables go to a temporary file,
    nothing is staged, built or written under the checkout."""
    import tempfile

    from envreg.images import BaseLock, bake_command, bake_vars, envreg_version, git_facts, source_date_epoch

    lock = BaseLock.read(p.base_lock)
    if lock is None:
        raise fail(f"{p.base_lock} is missing", "write it with `scripts/build-base --relock`")
    revision, _, source = git_facts(p.root)
    with tempfile.TemporaryDirectory(prefix="envreg-bake-") as tmp:
        vars_file = Path(tmp) / "vars.json"
        variables = bake_vars(
            envs,
            lock=lock,
            epoch=source_date_epoch(p.root),
            version=envreg_version(p.root),
            revision=revision,
            source=source,
            stage=p.stage,
        )
        vars_file.write_text(json.dumps(variables, indent=2) + "\n")
        targets = ["base", *(f"env-{e.name}" for e in envs)]
        try:
            proc = subprocess.run([*bake_command(p, vars_file, targets), "--print"], check=False)
        except FileNotFoundError:
            raise fail("the docker CLI is not installed", "install Docker with the buildx plugin") from None
    if proc.returncode:
        raise typer.Exit(proc.returncode)


def one_at_a_time(fn: Any) -> Any:
    """`fn` under an exclusive lock on the checkout's `.cache/bake.lock`: every build stages into the same
    `.cache/bake` (two at once, two test workers or two EnvGen runs, would write each other's bake variables)."""
    import fcntl
    import functools

    @functools.wraps(fn)
    def locked(*args: Any, **kwargs: Any) -> Any:
        from envreg.images import paths

        cache = paths().cache
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / "bake.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return fn(*args, **kwargs)

    return locked


def register(app: typer.Typer) -> None:
    app.command("build")(one_at_a_time(build))
