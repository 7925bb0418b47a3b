"""Registry pieces that need no engine: references, the index, the lockfile, the HTTP client's auth flows
(against httpx2 mock transports standing in for a registry and a token service), archive verification."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from pathlib import Path

import httpx2
import pytest

from envreg.manifest import Manifest
from envreg.registry import AuthError, LocalIndex, LockEntry, Lockfile, NotFound, RegistryError
from envreg.registry.client import Credentials, RegistryClient, docker_credentials, parse_challenge
from envreg.registry.errors import VerificationError
from envreg.registry.index import IndexRecord
from envreg.registry.refs import EnvRef, parse_remote, remote_for, version_key

ROOT = Path(__file__).resolve().parent.parent
D = {c: "sha256:" + c * 64 for c in "abcdef0123"}


def test_env_refs() -> None:
    assert EnvRef.parse("calendar") == EnvRef("calendar")
    assert EnvRef.parse("calendar:1.2.0") == EnvRef("calendar", "1.2.0")
    assert EnvRef.parse(f"envreg/calendar@{D['a']}") == EnvRef("calendar", None, D["a"])
    assert str(EnvRef.parse(f"calendar:1@{D['b']}")) == f"calendar:1@{D['b']}"
    for bad in ("Calendar", "calendar@sha256:xyz", "calendar:", "a b"):
        with pytest.raises(ValueError):
            EnvRef.parse(bad)
    r = remote_for(EnvRef("bank", "1.0.0"), "http://127.0.0.1:5000/")
    assert (r.repo, r.pinned()) == ("127.0.0.1:5000/envreg/bank", "127.0.0.1:5000/envreg/bank:1.0.0")
    q = parse_remote(f"ghcr.io/org/envs/bank:2@{D['c']}")
    assert q is not None and (q.registry, q.repository, q.tag, q.digest) == (
        "ghcr.io",
        "org/envs/bank",
        "2",
        D["c"],
    )
    assert parse_remote("envreg/bank") is None and parse_remote("localhost:5000/bank").tag is None


def test_version_order() -> None:
    versions = ["1.10.0", "1.2.0", "1.2.0-rc1", "0.9", "2.0.0"]
    assert sorted(versions, key=version_key) == ["0.9", "1.2.0-rc1", "1.2.0", "1.10.0", "2.0.0"]


def _record(name: str, version: str, image: str, **kw) -> IndexRecord:
    m = Manifest.loads((ROOT / "manifests" / "calendar.json").read_text())
    return IndexRecord(
        name=name,
        version=version,
        manifest=m.dumps(),
        manifest_digest=kw.get("manifest_digest", m.digest),
        image_id=image,
        repo_digest=kw.get("repo_digest"),
        local_ref=f"envreg/{name}:{version}",
        source=kw.get("source", "built"),
        created="2026-01-01T00:00:00Z",
    )


def test_index_resolve_list_remove(tmp_path: Path) -> None:
    idx = LocalIndex(tmp_path / "index.sqlite")
    with pytest.raises(LookupError, match="it is empty"):
        idx.resolve("calendar")
    idx.put(_record("calendar", "1.2.0", D["a"]))
    idx.put(_record("calendar", "1.10.0", D["b"], repo_digest=f"127.0.0.1:5000/envreg/calendar@{D['c']}"))
    idx.put(_record("bank", "1.0.0", D["d"], source="pulled"))
    assert idx.resolve("calendar").version == "1.10.0"  # newest, numerically
    assert idx.resolve("calendar:1.2.0").image_id == D["a"]
    assert idx.resolve(f"calendar@{D['a']}").version == "1.2.0"
    assert idx.resolve(f"calendar@{D['c']}").version == "1.10.0"  # the registry manifest digest works too
    with pytest.raises(
        NotFound, match=r"calendar:9 is not in the local index \(versions of calendar: 1.10.0, 1.2.0\)"
    ):
        idx.resolve("calendar:9")
    with pytest.raises(LookupError, match=r"no environment named 'airline'.*known: bank, calendar"):
        idx.resolve("airline")
    with pytest.raises(LookupError, match="has digest"):
        idx.resolve(f"bank@{D['a']}")
    assert [r.ref for r in idx.list()] == ["bank:1.0.0", "calendar:1.10.0", "calendar:1.2.0"]
    idx.set_repo_digest("bank", "1.0.0", f"h:1/envreg/bank@{D['e']}")
    assert idx.get("bank", "1.0.0").repo_digest.endswith(D["e"])
    assert [r.version for r in idx.remove("calendar", "1.2.0")] == ["1.2.0"]
    assert [r.ref for r in idx.list()] == ["bank:1.0.0", "calendar:1.10.0"]
    rec = idx.resolve("calendar")
    assert rec.load_manifest().name == "calendar" and "manifest='" not in repr(rec)
    assert rec.to_json()["manifest"]["name"] == "calendar"


def test_lockfile_roundtrip_and_validation(tmp_path: Path) -> None:
    lock = Lockfile(
        [
            LockEntry("calendar", "1.0.0", D["a"], D["b"], "h:1/envreg/calendar", D["c"]),
            LockEntry("bank", "1.0.0", D["d"], D["e"]),
        ]
    )
    path = lock.write(tmp_path / "envreg.lock")
    again = Lockfile.read(path)
    assert again.dumps() == lock.dumps()
    assert [e["name"] for e in json.loads(path.read_text())["environments"]] == ["bank", "calendar"]
    pins = {e.name: e.pull_ref for e in again.environments}
    assert pins == {"bank": None, "calendar": f"h:1/envreg/calendar@{D['c']}"}
    data = json.loads(path.read_text())
    data["environments"][0]["image_id"] = "latest"
    path.write_text(json.dumps(data))
    with pytest.raises(RegistryError, match=r"not a valid envreg lockfile.*image_id is not a sha256 digest"):
        Lockfile.read(path)
    with pytest.raises(RegistryError, match="no lockfile"):
        Lockfile.read(tmp_path / "missing.lock")


def test_parse_challenge() -> None:
    scheme, params = parse_challenge(
        'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull"'
    )
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.example/token",
        "service": "registry.example",
        "scope": "repository:a/b:pull",
    }
    assert parse_challenge('Basic realm="x"') == ("basic", {"realm": "x"})


def _fake_registry(token_log: list, *, user="alice", password="pw", scheme="bearer"):
    """A registry (reg.test) guarded by a bearer token service (auth.test), or by basic auth."""
    good_basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"digest": D["a"], "size": 2},
            "layers": [],
        }
    ).encode()
    mdigest = "sha256:" + hashlib.sha256(manifest).hexdigest()

    def handler(request: httpx2.Request) -> httpx2.Response:
        auth = request.headers.get("authorization", "")
        if request.url.host == "auth.test":
            token_log.append(dict(request.url.params))
            if auth != good_basic:
                return httpx2.Response(401, json={"details": "bad credentials"})
            return httpx2.Response(200, json={"token": "tok-" + request.url.params["scope"]})
        if scheme == "bearer":
            ok = auth.startswith("Bearer tok-")
            challenge = 'Bearer realm="http://auth.test/token",service="reg.test"'
        else:
            ok = auth == good_basic
            challenge = 'Basic realm="reg"'
        if not ok:
            return httpx2.Response(
                401, headers={"www-authenticate": challenge}, json={"errors": [{"code": "UNAUTHORIZED"}]}
            )
        path = request.url.path
        if path == "/v2/_catalog":
            if request.url.params.get("last"):
                return httpx2.Response(200, json={"repositories": ["envreg/c"]})
            return httpx2.Response(
                200,
                json={"repositories": ["envreg/a", "envreg/b"]},
                headers={"link": '</v2/_catalog?last=envreg/b&n=2>; rel="next"'},
            )
        if path == "/v2/envreg/a/manifests/1.0.0":
            return httpx2.Response(
                200,
                content=manifest,
                headers={
                    "content-type": "application/vnd.oci.image.manifest.v1+json",
                    "docker-content-digest": mdigest,
                },
            )
        if path in ("/v2/envreg/a/manifests/lying", f"/v2/envreg/a/manifests/{D['b']}"):
            return httpx2.Response(
                200,
                content=manifest,
                headers={
                    "content-type": "application/vnd.oci.image.manifest.v1+json",
                    "docker-content-digest": D["f"],
                },
            )
        return httpx2.Response(404, json={"errors": [{"code": "MANIFEST_UNKNOWN", "message": "unknown"}]})

    return httpx2.MockTransport(handler), mdigest


def test_bearer_token_flow_with_credentials() -> None:
    log: list = []
    transport, mdigest = _fake_registry(log)
    with RegistryClient("reg.test", Credentials("alice", "pw"), scheme="http", transport=transport) as rc:
        assert rc.catalog() == ["envreg/a", "envreg/b", "envreg/c"]  # paginated through Link
        digest, _media, _body = rc.manifest("envreg/a", "1.0.0")
        assert digest == mdigest
        rc.manifest("envreg/a", "1.0.0")  # the token for this scope is cached
    assert [e["scope"] for e in log] == ["registry:catalog:*", "repository:envreg/a:pull"]
    assert all(e["service"] == "reg.test" for e in log)


def test_bearer_and_basic_refusals_say_what_to_do() -> None:
    transport, _ = _fake_registry([])
    with RegistryClient("reg.test", Credentials("alice", "nope"), scheme="http", transport=transport) as rc:
        with pytest.raises(AuthError, match="refused access as 'alice'") as exc:
            rc.catalog()
        assert "docker login reg.test" in exc.value.hint
    transport, _ = _fake_registry([], scheme="basic")
    with RegistryClient("reg.test", None, scheme="http", transport=transport) as rc:
        with pytest.raises(AuthError, match="anonymously"):
            rc.tags("envreg/a")
    with RegistryClient("reg.test", Credentials("alice", "pw"), scheme="http", transport=transport) as rc:
        assert rc.catalog()[0] == "envreg/a"
        with pytest.raises(NotFound):
            rc.manifest("envreg/a", "9.9.9")


def test_manifest_digest_is_checked() -> None:
    transport, _ = _fake_registry([], scheme="basic")
    with RegistryClient("reg.test", Credentials("alice", "pw"), scheme="http", transport=transport) as rc:
        with pytest.raises(VerificationError, match="declares digest"):
            rc.manifest("envreg/a", "lying")
        with pytest.raises(VerificationError, match="returned a manifest whose digest is"):
            rc.manifest("envreg/a", D["b"])


def test_credentials_from_docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVREG_REGISTRY_USERNAME", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert docker_credentials("reg.test:5000") is None
    auth = base64.b64encode(b"bob:hunter2").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"reg.test:5000": {"auth": auth}}}))
    assert docker_credentials("reg.test:5000") == Credentials("bob", "hunter2")
    assert Credentials("bob", "hunter2").engine_auth() == {"username": "bob", "password": "hunter2"}
    monkeypatch.setenv("ENVREG_REGISTRY_USERNAME", "carol")
    monkeypatch.setenv("ENVREG_REGISTRY_PASSWORD", "pw")
    assert docker_credentials("reg.test:5000") == Credentials("carol", "pw")


def _archive(tmp_path: Path) -> Path:
    """A tiny archive in `envreg save`'s layout (fake images.tar: verification never reaches the engine)."""
    lock = Lockfile([LockEntry("calendar", "1.0.0", D["a"], D["b"])]).dumps().encode()
    files = {"envreg.lock": lock, "images.tar": b"x" * 5000, "manifests/calendar-1.0.0.json": b"{}"}
    meta = {
        "format": "envreg-archive",
        "version": 1,
        "environments": ["calendar:1.0.0"],
        "files": {
            k: {"sha256": "sha256:" + hashlib.sha256(v).hexdigest(), "size": len(v)} for k, v in files.items()
        },
    }
    path = tmp_path / "suite.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in [("envreg-archive.json", json.dumps(meta).encode()), *files.items()]:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return path


def test_archive_verification(tmp_path: Path) -> None:
    from envreg.registry.archive import verify_archive

    path = _archive(tmp_path)
    meta, lock = verify_archive(path)
    assert meta["environments"] == ["calendar:1.0.0"] and lock.environments[0].image_id == D["a"]
    data = path.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(VerificationError, match="truncated"):
        verify_archive(cut)
    i = data.index(b"x" * 100)
    bad = tmp_path / "bad.tar"
    bad.write_bytes(data[:i] + b"y" + data[i + 1 :])
    with pytest.raises(VerificationError, match=r"images\.tar does not match its recorded sha256"):
        verify_archive(bad)
    with pytest.raises(RegistryError, match="no archive"):
        verify_archive(tmp_path / "nope.tar")
