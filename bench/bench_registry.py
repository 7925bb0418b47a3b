"""Registry figures: a pull of an environment already present, and search over a registry of 100 environments.

Starts its own CNCF Distribution registry (`docker-registry serve`) on 127.0.0.1 with a temporary storage
folder and counts what it served from its access log. Needs the Docker engine and `envreg/calendar:1.0.0`.

    .venv/bin/python bench/bench_registry.py [--envs 100]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import io
import json
import os
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tiny_env(i: int, template: dict) -> tuple[dict, bytes]:
    """A valid environment manifest named env-NNN (one tool renamed lookup_NNN) and a gzip layer holding it."""
    from envreg.canonical import digest
    from envreg.manifest import Manifest

    data = copy.deepcopy(template)
    data["name"] = f"env-{i:03d}"
    data["description"] = f"Synthetic environment number {i} for the search benchmark."
    data["tools"][0]["name"] = f"lookup_{i:03d}"
    m = Manifest.model_validate(data)
    m.digests.tools = digest([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in m.tools])
    m.digests.manifest = m.body_digest()
    raw = m.dumps().encode()
    tar_buf = io.BytesIO()
    with tarfile.open(fileobj=tar_buf, mode="w") as tar:
        ti = tarfile.TarInfo("env/manifest.json")
        ti.size, ti.mode = len(raw), 0o644
        tar.addfile(ti, io.BytesIO(raw))
    return m.to_json(), tar_buf.getvalue()


def push_synthetic(rc, n: int) -> None:
    """Push n tiny environment images (one layer: /env/manifest.json) through the registry HTTP API."""
    import hashlib

    template = json.loads((ROOT / "manifests" / "calendar.json").read_text())
    for i in range(n):
        manifest, layer_tar = _tiny_env(i, template)
        layer = gzip.compress(layer_tar, mtime=0)
        repo = f"envreg/{manifest['name']}"
        layer_digest = rc.upload_blob(repo, layer)
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Labels": {
                    "io.envreg.name": manifest["name"],
                    "io.envreg.version": manifest["version"],
                    "io.envreg.manifest.digest": manifest["digests"]["manifest"],
                    "org.opencontainers.image.description": manifest["description"],
                }
            },
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
        }
        cbytes = json.dumps(config).encode()
        config_digest = rc.upload_blob(repo, cbytes)
        image_manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(cbytes),
                "digest": config_digest,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": layer_digest,
                }
            ],
        }
        rc.put_manifest(
            repo,
            manifest["version"],
            json.dumps(image_manifest).encode(),
            "application/vnd.docker.distribution.manifest.v2+json",
        )


def _blob_gets(requests) -> list:
    return [r for r in requests if r[0] == "GET" and "/blobs/" in r[1]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=100)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="envreg-bench-registry-"))
    os.environ["ENVREG_HOME"] = str(work / "home")
    os.environ["ENVREG_IMAGE_PREFIX"] = f"envregbench{uuid.uuid4().hex[:6]}/"
    import docker

    from envreg.registry import engine, index, transfer
    from envreg.registry.client import RegistryClient
    from envreg.registry.search import search
    from envreg.registry.testing import LocalRegistry

    client = docker.from_env()
    prefix = os.environ["ENVREG_IMAGE_PREFIX"]
    image, _ = client.images.build(
        fileobj=io.BytesIO(
            f'FROM envreg/calendar:1.0.0\nLABEL io.envreg.bench="{uuid.uuid4().hex}"\n'.encode()
        ),
        tag=f"{prefix}calendar:1.0.0",
        rm=True,
    )
    reg = LocalRegistry(work / "registry").start()
    try:
        print(f"registry {reg.address} (CNCF Distribution, storage {work / 'registry'})")
        index.record_image(image.id, "built")
        t = time.perf_counter()
        pushed = transfer.push("calendar", reg.address)
        print(
            f"push calendar:1.0.0 ({image.attrs['Size'] / 1e6:.0f} MB image): {time.perf_counter() - t:.2f} s"
        )

        # -- pull of an environment already present ---------------------------------------------------------
        for label, ref in (("by tag", "calendar:1.0.0"), ("by digest", f"calendar@{pushed.digest}")):
            mark = reg.log_mark()
            t = time.perf_counter()
            res = transfer.pull(ref, reg.address)
            dt = time.perf_counter() - t
            time.sleep(0.2)
            served = reg.requests_since(mark)
            blobs = _blob_gets(served)
            print(
                f"pull {label}, already present: {dt * 1000:.0f} ms, transferred={res.transferred}, "
                f"{len(served)} registry requests ({', '.join(f'{m} {p}' for m, p, _, _ in served)}), "
                f"{len(blobs)} blob GETs, {sum(s for *_, s in served)} bytes served"
            )
            assert not blobs and not res.transferred
        # for contrast: the same image pulled after removing it locally (its layers are shared with
        # envreg/calendar, so the engine fetches the config; a fresh host would fetch every layer)
        index.rm("calendar")
        engine.remove_image(image.id)
        mark = reg.log_mark()
        t = time.perf_counter()
        res = transfer.pull(f"calendar@{pushed.digest}", reg.address)
        dt = time.perf_counter() - t
        time.sleep(0.2)
        served = reg.requests_since(mark)
        print(
            f"pull by digest, image absent (layers shared): {dt * 1000:.0f} ms, transferred={res.transferred}, "
            f"{len(served)} requests, {len(_blob_gets(served))} blob GETs, {sum(s for *_, s in served)} bytes"
        )

        # -- search over a registry holding N environments ---------------------------------------------------
        with RegistryClient(reg.address) as rc:
            t = time.perf_counter()
            push_synthetic(rc, args.envs)
            print(
                f"pushed {args.envs} tiny environment images through the HTTP API in {time.perf_counter() - t:.2f} s"
            )
        os.environ["ENVREG_HOME"] = str(work / "search-home")  # empty index and caches: a cold search
        target = f"lookup_{args.envs // 2:03d}"
        for label in ("cold (no cache)", "warm (config + manifest cache)", "warm again"):
            mark = reg.log_mark()
            t = time.perf_counter()
            hits = search(target, reg.address)
            dt = time.perf_counter() - t
            time.sleep(0.2)
            served = reg.requests_since(mark)
            names = [h.name for h in hits]
            print(
                f"search {target!r} over {args.envs + 1} environments, {label}: {dt * 1000:.0f} ms, "
                f"hits={names}, {len(served)} registry requests ({len(_blob_gets(served))} blob GETs, "
                f"{sum(s for *_, s in served) / 1e3:.0f} kB)"
            )
            assert names == [f"env-{args.envs // 2:03d}"], names
        t = time.perf_counter()
        hits = search("synthetic", reg.address)
        print(
            f"search 'synthetic' (description, {len(hits)} hits): {(time.perf_counter() - t) * 1000:.0f} ms"
        )
    finally:
        reg.stop()
        engine.remove_image(image.id)


if __name__ == "__main__":
    main()
