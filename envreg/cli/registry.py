"""Registry commands: push, pull, search, ls, inspect, rm, lock, save, load, and `registry serve` (a local
OCI registry to push to).

Errors read `error: ...` then `hint: ...` (what to do) on stderr, exit status 1; long operations show rich
progress on stderr; `--json` prints machine-readable results on stdout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from envreg.cli.output import QuietOpt, err, print_error

out = Console(emoji=False, highlight=False, width=None if sys.stdout.isatty() else 200)

REGISTRY_HELP = "Registry HOST[:PORT] (default: $ENVREG_REGISTRY)."
NAMESPACE_HELP = "Repository namespace in the registry: <registry>/<namespace>/<name>."

RegistryOpt = Annotated[str | None, typer.Option("--registry", "-r", help=REGISTRY_HELP)]
NamespaceOpt = Annotated[str, typer.Option("--namespace", help=NAMESPACE_HELP)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
TagOpt = Annotated[
    bool,
    typer.Option(
        "--tag", help="Also tag envreg/<name>:<version> (moves the tag other users of this engine may run)."
    ),
]


@contextmanager
def errors() -> Iterator[None]:
    """Turn registry/engine failures into `error:` + `hint:` lines and exit status 1."""
    from envreg.errors import EnvregError

    try:
        yield
    except EnvregError as exc:
        print_error(exc.message, exc.hint)
        raise typer.Exit(1) from None
    except LookupError as exc:
        print_error(str(exc))
        raise typer.Exit(1) from None
    except ValueError as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None


@contextmanager
def progress(label: str, *, quiet: bool = False) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """A rich progress display fed by engine events ({id, status, progressDetail}) or byte counts."""
    if quiet or (not err.is_terminal and not _force_progress()):
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TransferSpeedColumn,
    )

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err,
        transient=True,
    ) as bar:
        tasks: dict[str, Any] = {}

        def on(ev: dict[str, Any]) -> None:
            key = ev.get("id") or ev.get("status") or label
            detail = ev.get("progressDetail") or {}
            current = detail.get("current", ev.get("current"))
            total = detail.get("total", ev.get("total"))
            desc = f"{label} {key[:12]}: {ev.get('status', '')}"
            if key not in tasks:
                tasks[key] = bar.add_task(desc, total=total)
            bar.update(tasks[key], description=desc, completed=current or 0, total=total)

        yield on


def _force_progress() -> bool:
    from envreg.config import force_progress

    return force_progress()


def _short(d: str | None) -> str:
    return (d or "").removeprefix("sha256:")[:12]


def _dump(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


# ------------------------------------------------------------------------------------------------ commands


def push(
    ref: Annotated[str, typer.Argument(help="NAME[:VERSION] from the local index.")],
    registry: RegistryOpt = None,
    namespace: NamespaceOpt = "envreg",
    force: Annotated[
        bool, typer.Option("--force", help="Move an existing remote tag to this image.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Push an environment to an OCI registry (then pull it anywhere by digest)."""
    from envreg.registry import transfer
    from envreg.registry.refs import default_registry

    with errors():
        reg = default_registry(registry)
        if not reg:
            from envreg.registry.errors import RegistryError

            raise RegistryError(
                "no registry to push to", "pass --registry HOST[:PORT] or set ENVREG_REGISTRY"
            )
        with progress("push") as on:
            res = transfer.push(ref, reg, namespace=namespace, force=force, progress=on)
    if as_json:
        _dump(
            {
                "name": res.record.name,
                "version": res.record.version,
                "repository": res.repository,
                "tag": res.tag,
                "digest": res.digest,
                "image_id": res.record.image_id,
                "manifest_digest": res.record.manifest_digest,
            }
        )
        return
    out.print(f"pushed {res.record.ref} -> {res.repository}:{res.tag}")
    out.print(
        f"  digest {res.digest}  (pull with `envreg pull {res.record.name}@{res.digest} --registry {reg}`)"
    )


def pull(
    refs: Annotated[
        list[str] | None,
        typer.Argument(
            help="NAME[:VERSION|@sha256:...] or HOST/REPO[:TAG][@sha256:...]; none with --locked."
        ),
    ] = None,
    registry: RegistryOpt = None,
    namespace: NamespaceOpt = "envreg",
    locked: Annotated[bool, typer.Option("--locked", help="Install exactly what the lockfile pins.")] = False,
    lockfile: Annotated[Path, typer.Option("--lockfile", help="Lockfile path.")] = Path("envreg.lock"),
    replace: Annotated[
        bool, typer.Option("--replace", help="Allow replacing a recorded version with another image.")
    ] = False,
    tag: TagOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Pull environments by digest, verifying image and manifest digests and the environment code.

    A mismatch records nothing. Pulled images keep the registry's name (HOST/REPO:VERSION); the runtime
    finds them through the local index."""
    from envreg.registry import transfer
    from envreg.registry.lockfile import Lockfile

    results = []
    with errors():
        if locked:
            lock = Lockfile.read(lockfile)
            if refs:
                wanted = set(refs)
                lock = Lockfile([e for e in lock.environments if e.name in wanted or e.ref in wanted])
            with progress("pull") as on:
                results = transfer.pull_locked(lock, tag=tag, progress=on)
        else:
            if not refs:
                raise ValueError("name at least one environment (or pass --locked)")
            for ref in refs:
                with progress("pull") as on:
                    results.append(
                        transfer.pull(
                            ref, registry, namespace=namespace, replace=replace, tag=tag, progress=on
                        )
                    )
    if as_json:
        _dump([{**_record_json(r.record), "transferred": r.transferred} for r in results])
        return
    for r in results:
        how = "pulled" if r.transferred else "up to date"
        out.print(
            f"{how} {r.record.ref} image {_short(r.record.image_id)} manifest {_short(r.record.manifest_digest)}"
            + (f" from {r.record.repo_digest}" if r.record.repo_digest else "")
            + f" as {r.record.local_ref}"
        )


def search(
    text: Annotated[str, typer.Argument(help="Text to find in names, descriptions and tool names.")],
    registry: RegistryOpt = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="Only repositories under it.")] = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Find environments in the local index, the committed manifests and a registry (metadata only).

    Environments neither the local index nor the registry has come from the committed manifests (WHERE
    catalog: `envreg build NAME` builds one)."""
    from envreg.registry.search import search as search_environments

    with errors():
        hits = search_environments(text, registry, namespace=namespace)
    if as_json:
        _dump([h.to_json() for h in hits])
        return
    if quiet:
        for name in dict.fromkeys(h.name for h in hits):
            print(name)
        return
    if not hits:
        print_error(
            f"no environment matches {text!r}",
            "search matches names, descriptions and tool names; `envreg catalog` lists every environment",
        )
        raise typer.Exit(1)
    table = Table(box=None, pad_edge=False)
    for col in ("NAME", "VERSION", "WHERE", "MATCHED", "DESCRIPTION"):
        table.add_column(col)
    for h in hits:
        desc = h.description if len(h.description) <= 60 else h.description[:57] + "..."
        table.add_row(h.name, h.version, h.where, ", ".join(h.matched), desc)
    out.print(table)


def ls(quiet: QuietOpt = False, as_json: JsonOpt = False) -> None:
    """List the environments in the local index."""
    from envreg.registry import engine
    from envreg.registry.index import LocalIndex

    with errors():
        records = LocalIndex().list()
        present: dict[str, bool] = {}
        try:
            for r in records:
                present[r.image_id] = engine.image_info(r.image_id) is not None
        except Exception:
            present = {}
    if as_json:
        _dump([{**_record_json(r, manifest=False), "present": present.get(r.image_id)} for r in records])
        return
    if quiet:
        for r in records:
            print(r.ref)
        return
    if not records:
        err.print("the local index is empty (envreg build / envreg pull / envreg load fill it)")
        return
    table = Table(box=None, pad_edge=False)
    for col in ("NAME", "VERSION", "IMAGE", "MANIFEST", "SOURCE", "CREATED", "REGISTRY"):
        table.add_column(col)
    for r in records:
        image = _short(r.image_id)
        if present and not present.get(r.image_id):
            image += " (missing)"
        table.add_row(
            r.name,
            r.version,
            image,
            _short(r.manifest_digest),
            r.source,
            r.created,
            (r.repo_digest or "").split("@")[0],
        )
    out.print(table)


def inspect(
    ref: Annotated[str, typer.Argument(help="NAME[:VERSION|@sha256:...].")],
    registry: Annotated[
        str | None,
        typer.Option("--registry", "-r", help="Inspect in this registry instead (nothing pulled)."),
    ] = None,
    namespace: NamespaceOpt = "envreg",
    as_json: JsonOpt = False,
) -> None:
    """Show an environment: manifest, tools and state schema.

    An environment the local index does not have is shown from its committed manifest (source: catalog)."""
    from envreg.registry.index import LocalIndex

    with errors():
        if registry:
            manifest, meta = _remote_manifest(ref, registry, namespace)
        else:
            manifest, meta = _local_manifest(ref, LocalIndex())
    if as_json:
        _dump({**meta, "manifest": manifest.to_json()})
        return
    out.print(f"[bold]{manifest.name}[/] {manifest.version}  ({manifest.domain})")
    out.print(manifest.description)
    for k, v in meta.items():
        out.print(f"  {k}: {v}")
    out.print(f"  scenarios: {manifest.scenarios}, rejected states: {manifest.rejected_states}")
    rt = manifest.runtime
    out.print(
        f"  runtime: agent port {rt.agent_port}, control port {rt.control_port}, user {rt.user}, "
        f"network {rt.network}"
    )
    out.print(
        f"  limits: state {rt.limits.max_state_bytes:,} bytes, arguments {rt.limits.max_argument_bytes:,} "
        f"bytes per call; source {_short(manifest.digests.source)} ({len(manifest.source_files)} files)"
    )
    tools = Table(title=f"tools ({len(manifest.tools)})", box=None, pad_edge=False, title_justify="left")
    tools.add_column("TOOL", no_wrap=True)
    for col in ("ARGUMENTS", "HINTS", "DESCRIPTION"):
        tools.add_column(col)
    for t in manifest.tools:
        props = t.input_schema.get("properties") or {}
        required = set(t.input_schema.get("required") or [])
        args = ", ".join(f"{a}{'' if a in required else '?'}" for a in props)
        hints = ",".join(
            k.removesuffix("Hint").replace("readOnly", "read-only") for k, v in t.annotations.items() if v
        )
        tools.add_row(t.name, args, hints, t.description.splitlines()[0] if t.description else "")
    out.print(tools)
    schema = manifest.state_schema
    state = Table(
        title=f"state schema ({schema.get('title', '')})", box=None, pad_edge=False, title_justify="left"
    )
    for col in ("FIELD", "TYPE", "DESCRIPTION"):
        state.add_column(col)
    for field_name, spec in (schema.get("properties") or {}).items():
        state.add_row(field_name, _type_of(spec), spec.get("description", ""))
    out.print(state)
    if manifest.volatile:
        out.print(f"  volatile paths: {', '.join(manifest.volatile)}")


def _type_of(spec: dict) -> str:
    if "$ref" in spec:
        return spec["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in spec:
        return " | ".join(_type_of(s) for s in spec["anyOf"])
    t = spec.get("type", "?")
    if t == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"map[{_type_of(spec['additionalProperties'])}]"
    if t == "array" and isinstance(spec.get("items"), dict):
        return f"list[{_type_of(spec['items'])}]"
    return str(t) + (f" ({spec['format']})" if "format" in spec else "")


def _local_manifest(ref: str, index: Any) -> tuple[Any, dict[str, Any]]:
    """The manifest of `ref` in the local index, else its committed manifest (`where: catalog`)."""
    from envreg.registry.errors import NotFound
    from envreg.registry.refs import EnvRef
    from envreg.registry.search import catalog_manifest

    try:
        rec = index.resolve(ref)
    except NotFound:
        env = EnvRef.parse(ref)
        manifest = None if env.digest else catalog_manifest(env.name, env.version)
        if manifest is None:
            raise
        return manifest, {
            "source": "catalog (a committed manifest: not built or pulled here)",
            "manifest_digest": manifest.digest,
            "build": f"envreg build {manifest.name}",
        }
    return rec.load_manifest(), _record_json(rec, manifest=False)


def _remote_manifest(ref: str, registry: str, namespace: str):
    from envreg.registry.client import RegistryClient
    from envreg.registry.errors import NotFound
    from envreg.registry.index import LocalIndex
    from envreg.registry.refs import EnvRef, remote_for
    from envreg.registry.search import remote_manifest
    from envreg.registry.transfer import _find_by_digest, _newest_tag

    env = EnvRef.parse(ref)
    remote = remote_for(env, registry, namespace)
    with RegistryClient(remote.registry) as rc:
        if env.digest:
            mdigest, _ = _find_by_digest(rc, remote.repository, env.digest)
            reference = mdigest
        else:
            reference = env.version or _newest_tag(rc, remote.repository)
        img = rc.image(remote.repository, reference)
        manifest = remote_manifest(rc, img, LocalIndex())
    if manifest is None:
        raise NotFound(f"{remote.repo}:{reference}: no verifiable environment manifest in the image")
    return manifest, {
        "repository": remote.repo,
        "repo_digest": f"{remote.repo}@{img.digest}",
        "image_id": img.config_digest,
        "manifest_digest": manifest.digest,
    }


def rm(
    refs: Annotated[list[str], typer.Argument(help="NAME (every version) or NAME:VERSION.")],
    keep_image: Annotated[bool, typer.Option("--keep-image", help="Only forget the index record.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove environments from the local index and untag their images."""
    from envreg.registry import index

    removed = []
    with errors():
        for ref in refs:
            for r in index.rm(ref, keep_image=keep_image):
                removed.append(_record_json(r, manifest=False))
                if not as_json:
                    out.print(f"removed {r.ref} (image {_short(r.image_id)})")
    if as_json:
        _dump(removed)


def lock(
    names: Annotated[list[str], typer.Argument(help="Environments to pin: NAME[:VERSION|@sha256:...].")],
    registry: Annotated[
        str | None,
        typer.Option("--registry", "-r", help="Pin what the registry serves (default: the local index)."),
    ] = None,
    namespace: NamespaceOpt = "envreg",
    output: Annotated[Path, typer.Option("--output", "-o", help="Lockfile path.")] = Path("envreg.lock"),
    as_json: JsonOpt = False,
) -> None:
    """Pin a suite of environments by image and manifest digest in envreg.lock."""
    from envreg.registry import transfer

    with errors():
        lockfile = transfer.lock(names, registry, namespace=namespace)
        lockfile.write(output)
    if as_json:
        _dump(json.loads(output.read_text()))
        return
    for e in lockfile.environments:
        where = f" from {e.repository}@{_short(e.repo_digest)}" if e.pull_ref else " (not pushed: local only)"
        out.print(f"locked {e.ref} image {_short(e.image_id)} manifest {_short(e.manifest_digest)}{where}")
    out.print(f"wrote {output}")


def save(
    names: Annotated[list[str], typer.Argument(help="Environments to save.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Archive path (a tar file).")],
    as_json: JsonOpt = False,
) -> None:
    """Save environments (images, manifests, lock) into one archive for air-gapped hosts."""
    from envreg.registry import archive

    with errors(), progress("save") as on:
        lockfile = archive.save(names, output, progress=on)
    size = output.stat().st_size
    if as_json:
        _dump({"archive": str(output), "size": size, "environments": [e.ref for e in lockfile.environments]})
        return
    out.print(f"saved {', '.join(e.ref for e in lockfile.environments)} to {output} ({size / 1e6:.1f} MB)")


def load(
    archive: Annotated[Path, typer.Argument(help="An archive written by `envreg save`.")],
    tag: TagOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Load an archive; every digest is verified before anything is recorded.

    Loaded images keep their registry's name (HOST/REPO:VERSION) or none; the runtime finds them through
    the local index."""
    from envreg.registry.archive import load as load_archive

    with errors(), progress("load") as on:
        records = load_archive(archive, progress=on, tag=tag)
    if as_json:
        _dump([_record_json(r, manifest=False) for r in records])
        return
    for r in records:
        out.print(f"loaded {r.ref} image {_short(r.image_id)} manifest {_short(r.manifest_digest)}")


def _record_json(r, manifest: bool = True) -> dict[str, Any]:
    data = r.to_json()
    if not manifest:
        data.pop("manifest", None)
    return data


registry_app = typer.Typer(
    help="A local OCI registry (CNCF Distribution) to push to and pull from.", no_args_is_help=True
)


@registry_app.command("serve")
def registry_serve(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free one).")] = 5000,
    root: Annotated[
        Path | None,
        typer.Option(help="Where it stores images (default: $ENVREG_HOME/registry).", show_default=False),
    ] = None,
) -> None:
    """Run a CNCF Distribution registry on 127.0.0.1 until Ctrl-C (`envreg push --registry 127.0.0.1:PORT`).

    It is Debian's `docker-registry` package (the registry envreg's tests use), storing under ROOT; plain
    HTTP, which envreg and Docker allow for loopback registries only."""
    import signal
    import time

    from envreg.config import envreg_home
    from envreg.registry.testing import INSTALL_HINT, LocalRegistry, free_port, registry_binary

    if registry_binary() is None:
        print_error("the CNCF Distribution registry (docker-registry) is not installed", INSTALL_HINT)
        raise typer.Exit(1)
    registry = LocalRegistry(root or envreg_home() / "registry", port=port or free_port())
    try:
        registry.start()
    except RuntimeError as exc:
        print_error(str(exc), f"pick another --port (0: any free one); its log is {registry.log_path}")
        raise typer.Exit(1) from None
    err.print(f"registry listening on [bold]{registry.address}[/] (storage {registry.root / 'storage'})")
    err.print(f"push with `envreg push NAME --registry {registry.address}`; Ctrl-C stops it")
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stop and registry.proc is not None and registry.proc.poll() is None:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        registry.stop()
    err.print("registry stopped")


def register(app: typer.Typer) -> None:
    app.add_typer(registry_app, name="registry")
    app.command("push")(push)
    app.command("pull")(pull)
    app.command("search")(search)
    app.command("ls")(ls)
    app.command("inspect")(inspect)
    app.command("rm")(rm)
    app.command("lock")(lock)
    app.command("save")(save)
    app.command("load")(load)
