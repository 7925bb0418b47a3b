"""A client for the OCI distribution HTTP API v2 (CNCF Distribution, Harbor, GHCR, ...), over httpx2.

Reads only metadata (catalog, tags, manifests, config blobs and, for search, the small layer that holds the
environment manifest); the engine moves image blobs. Every body fetched by digest is checked against it.

Authentication follows the registry's `WWW-Authenticate` challenge: `Basic` (credentials sent as is) or
`Bearer realm=...,service=...,scope=...` (a token fetched from the realm, with the credentials when there
are any, cached per scope). Credentials come from the Docker credential store (`~/.docker/config.json`
`auths`, `credHelpers`, `credsStore`, via the `docker` package), from `ENVREG_REGISTRY_USERNAME` /
`ENVREG_REGISTRY_PASSWORD`, or are passed in.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import os
import re
import tarfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx2

from envreg.config import envreg_home, insecure_registries, registry_credentials
from envreg.http.client import sync_client
from envreg.registry.errors import AuthError, NotFound, RegistryError, VerificationError
from envreg.registry.refs import normalize_registry

MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_ACCEPT = ", ".join((MT_OCI_MANIFEST, MT_DOCKER_MANIFEST, MT_OCI_INDEX, MT_DOCKER_LIST))
INDEX_TYPES = (MT_OCI_INDEX, MT_DOCKER_LIST)


@dataclass(frozen=True)
class Credentials:
    username: str | None = None
    password: str | None = None
    identity_token: str | None = None  # an OAuth2 refresh token (docker login with a token helper)

    def engine_auth(self) -> dict[str, str] | None:
        """The `auth_config` the Docker SDK passes to the engine."""
        if self.identity_token:
            return {"identitytoken": self.identity_token}
        if self.username is not None:
            return {"username": self.username, "password": self.password or ""}
        return None


def docker_credentials(registry: str) -> Credentials | None:
    """Credentials for `registry` from the environment or the Docker credential store, or None."""
    if (given := registry_credentials()) is not None:
        return Credentials(*given)
    try:
        import docker.auth

        cfg = docker.auth.load_config()
        entry = docker.auth.resolve_authconfig(cfg, registry) or {}
    except Exception:  # an unreadable config or a broken helper: carry on anonymously
        return None
    entry = {k.lower(): v for k, v in entry.items()}
    if entry.get("identitytoken"):
        return Credentials(entry.get("username"), None, entry["identitytoken"])
    if entry.get("username"):
        return Credentials(entry["username"], entry.get("password", ""))
    return None


def is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 or registry.endswith("]") else registry
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="...",service="..."` -> ("bearer", {"realm": ..., "service": ...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)\s*=\s*"([^"]*)"', rest)}
    for k, v in re.findall(r'(\w+)\s*=\s*([^",\s]+)', rest):
        params.setdefault(k.lower(), v)
    return scheme.lower(), params


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class RemoteImage:
    """An image in a registry, known from its manifest and config blob alone (nothing pulled)."""

    repository: str
    reference: str  # tag or digest asked for
    digest: str  # registry manifest digest (the repo digest)
    config_digest: str  # = the image ID once pulled
    labels: dict[str, str]
    layers: list[dict[str, Any]] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


class RegistryClient:
    """The HTTP API v2 of one registry (`host[:port]`)."""

    def __init__(
        self,
        registry: str,
        credentials: Credentials | bool | None = True,
        *,
        scheme: str | None = None,
        timeout: float = 30,
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        self.registry = normalize_registry(registry)
        if credentials is True:
            credentials = docker_credentials(self.registry)
        self.credentials: Credentials | None = credentials or None
        insecure = set(insecure_registries())
        self.scheme = scheme or (
            "http" if is_loopback(self.registry) or self.registry in insecure else "https"
        )
        self.base = f"{self.scheme}://{self.registry}"
        self.http = sync_client(timeout=timeout, follow_redirects=True, transport=transport)
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}
        self._basic = False
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request sent, for figures

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------ auth

    def _auth_header(self, scope: str) -> dict[str, str]:
        with self._lock:
            token = self._tokens.get(scope)
        if token:
            return {"authorization": f"Bearer {token}"}
        if self._basic and self.credentials and self.credentials.username is not None:
            raw = f"{self.credentials.username}:{self.credentials.password or ''}".encode()
            import base64

            return {"authorization": "Basic " + base64.b64encode(raw).decode()}
        return {}

    def _fetch_token(self, params: dict[str, str], scope: str) -> str:
        realm = params.get("realm")
        if not realm:
            raise AuthError(f"{self.registry}: bearer challenge without a realm")
        query: dict[str, str] = {}
        if params.get("service"):
            query["service"] = params["service"]
        if scope:
            query["scope"] = scope
        creds = self.credentials
        if creds and creds.identity_token:
            form = {
                "grant_type": "refresh_token",
                "refresh_token": creds.identity_token,
                "client_id": "envreg",
            }
            form.update(query)
            r = self.http.post(realm, data=form)
        else:
            auth = (creds.username, creds.password or "") if creds and creds.username is not None else None
            r = self.http.get(realm, params=query, auth=auth)
        self.requests.append(("GET", "token"))
        if r.status_code in (401, 403):
            raise self._denied(r)
        if r.status_code != 200:
            raise AuthError(f"{self.registry}: the token service {realm} answered {r.status_code}")
        body = r.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            raise AuthError(f"{self.registry}: the token service {realm} returned no token")
        with self._lock:
            self._tokens[scope] = token
        return token

    def _denied(self, r: httpx2.Response) -> AuthError:
        who = (
            f"as {self.credentials.username!r}"
            if self.credentials and self.credentials.username
            else "anonymously"
        )
        return AuthError(
            f"{self.registry} refused access {who} ({r.status_code} on {r.request.method} {r.request.url.path})",
            f"log in with `docker login {self.registry}` (envreg reads the Docker credential store), "
            "or set ENVREG_REGISTRY_USERNAME / ENVREG_REGISTRY_PASSWORD",
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        scope: str = "",
        headers: dict[str, str] | None = None,
        ok: Iterable[int] = (200,),
        stream: bool = False,
        **kw: Any,
    ) -> httpx2.Response:
        url = path if path.startswith("http") else self.base + path
        for attempt in range(3):
            h = {**(headers or {}), **self._auth_header(scope)}
            req = self.http.build_request(method, url, headers=h, **kw)
            try:
                r = self.http.send(req, stream=stream)
            except httpx2.HTTPError as exc:
                raise RegistryError(
                    f"cannot reach the registry at {self.base} ({exc.__class__.__name__}: {exc})",
                    "check the address (--registry HOST[:PORT]) and that the registry is running",
                ) from None
            self.requests.append((method, req.url.path))
            if r.status_code != 401 or attempt == 2:
                break
            if stream:
                r.close()
            scheme, params = parse_challenge(r.headers.get("www-authenticate", ""))
            if scheme == "basic":
                if not self.credentials or self.credentials.username is None or self._basic:
                    raise self._denied(r)
                self._basic = True
            elif scheme == "bearer":
                if attempt == 1 and self._tokens.get(scope):
                    raise self._denied(r)
                self._fetch_token(params, scope or params.get("scope", ""))
                if not scope:
                    scope = params.get("scope", "")
            else:
                raise self._denied(r)
        if r.status_code == 401 or r.status_code == 403:
            raise self._denied(r)
        if r.status_code not in ok:
            if stream:
                r.read()
            raise self._error(r)
        return r

    def _error(self, r: httpx2.Response) -> RegistryError:
        detail = ""
        try:
            errors = r.json().get("errors") or []
            detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)
        except Exception:
            detail = r.text[:200]
        msg = f"{self.registry}: {r.request.method} {r.request.url.path} -> {r.status_code} {detail}".strip()
        if r.status_code == 404:
            return NotFound(msg)
        return RegistryError(msg)

    # ------------------------------------------------------------------------------------------------ reads

    def ping(self) -> None:
        self.request("GET", "/v2/", scope="")

    def catalog(self, page: int = 1000) -> list[str]:
        """Every repository (paginated through `Link` headers)."""
        repos: list[str] = []
        path = f"/v2/_catalog?n={page}"
        while path:
            r = self.request("GET", path, scope="registry:catalog:*")
            repos.extend(r.json().get("repositories") or [])
            path = _next_link(r)
        return repos

    def tags(self, repository: str) -> list[str]:
        path = f"/v2/{repository}/tags/list"
        out: list[str] = []
        while path:
            try:
                r = self.request("GET", path, scope=f"repository:{repository}:pull")
            except NotFound:
                return out
            out.extend(r.json().get("tags") or [])
            path = _next_link(r)
        return out

    def manifest(self, repository: str, reference: str) -> tuple[str, str, bytes]:
        """(digest, media type, body) of a manifest; the body is checked against the digest."""
        r = self.request(
            "GET",
            f"/v2/{repository}/manifests/{reference}",
            scope=f"repository:{repository}:pull",
            headers={"accept": MANIFEST_ACCEPT},
        )
        body = r.content
        actual = sha256(body)
        if reference.startswith("sha256:") and actual != reference:
            raise VerificationError(
                f"{self.registry}/{repository}@{reference}: the registry returned a manifest whose digest is {actual}"
            )
        declared = r.headers.get("docker-content-digest")
        if declared and declared != actual:
            raise VerificationError(
                f"{self.registry}/{repository}:{reference}: the registry declares digest {declared} "
                f"but the manifest it sent hashes to {actual}"
            )
        media = r.headers.get("content-type", "").split(";")[0] or json.loads(body).get("mediaType", "")
        return actual, media, body

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        """HEAD a manifest: its digest, or None when absent."""
        try:
            r = self.request(
                "HEAD",
                f"/v2/{repository}/manifests/{reference}",
                scope=f"repository:{repository}:pull",
                headers={"accept": MANIFEST_ACCEPT},
            )
        except NotFound:
            return None
        return r.headers.get("docker-content-digest")

    def blob(self, repository: str, digest: str, limit: int = 64 << 20) -> bytes:
        """A blob's bytes, checked against its digest."""
        r = self.request("GET", f"/v2/{repository}/blobs/{digest}", scope=f"repository:{repository}:pull")
        if len(r.content) > limit:
            raise RegistryError(f"{repository}@{digest}: blob larger than {limit} bytes")
        if sha256(r.content) != digest:
            raise VerificationError(f"{self.registry}/{repository}: blob {digest} does not match its digest")
        return r.content

    def image_manifest(
        self, repository: str, reference: str, platform: str = "linux/amd64"
    ) -> tuple[str, dict[str, Any]]:
        """(registry manifest digest, image manifest) behind a tag or digest; an index picks `platform`."""
        digest, media, body = self.manifest(repository, reference)
        doc = json.loads(body)
        if media in INDEX_TYPES or doc.get("manifests"):
            os_, arch = platform.split("/", 1)
            chosen = next(
                (
                    m
                    for m in doc.get("manifests") or []
                    if (m.get("platform") or {}).get("os") == os_
                    and (m.get("platform") or {}).get("architecture") == arch
                ),
                None,
            )
            if chosen is None:
                raise NotFound(f"{self.registry}/{repository}:{reference} has no {platform} image")
            digest, media, body = self.manifest(repository, chosen["digest"])
            doc = json.loads(body)
        if not (doc.get("config") or {}).get("digest"):
            raise RegistryError(
                f"{self.registry}/{repository}:{reference} is not an image manifest ({media})"
            )
        return digest, doc

    def config_labels(self, repository: str, config_digest: str) -> dict[str, str]:
        config = json.loads(self._cached_blob(repository, config_digest))
        return dict((config.get("config") or {}).get("Labels") or {})

    def image(self, repository: str, reference: str, platform: str = "linux/amd64") -> RemoteImage:
        """The image behind a tag or digest: manifest digest, config digest (= image ID) and labels."""
        digest, doc = self.image_manifest(repository, reference, platform)
        config_digest = doc["config"]["digest"]
        labels = self.config_labels(repository, config_digest)
        return RemoteImage(
            repository, reference, digest, config_digest, labels, list(doc.get("layers") or [])
        )

    def _cached_blob(self, repository: str, digest: str) -> bytes:
        """Config blobs are content-addressed and small: keep them under $ENVREG_HOME/cache/blobs."""

        path = envreg_home() / "cache" / "blobs" / digest.replace(":", "/")
        if path.is_file():
            data = path.read_bytes()
            if sha256(data) == digest:
                return data
        data = self.blob(repository, digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        return data

    def find_file(
        self, repository: str, layers: list[dict[str, Any]], path: str, max_layer: int = 8 << 20
    ) -> bytes | None:
        """A file's bytes from an image's layers (top layer first), fetching only small layers, or None."""
        want = path.lstrip("/")
        for layer in reversed(layers):
            if int(layer.get("size") or 0) > max_layer:
                return None  # a large layer: the base, not where an environment's files live
            data = self.blob(repository, layer["digest"], limit=max_layer)
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
                for m in tar:
                    name = m.name.removeprefix("./")
                    if name == want and m.isfile():
                        f = tar.extractfile(m)
                        return f.read() if f else None
                    if name == _whiteout(want):
                        return None
        return None

    # ------------------------------------------------------------------------------------------------ writes

    def upload_blob(self, repository: str, data: bytes) -> str:
        """Upload a blob (monolithic); returns its digest. Skips it when the registry has it already."""
        digest = sha256(data)
        scope = f"repository:{repository}:pull,push"
        try:
            self.request("HEAD", f"/v2/{repository}/blobs/{digest}", scope=scope)
            return digest
        except NotFound:
            pass
        r = self.request("POST", f"/v2/{repository}/blobs/uploads/", scope=scope, ok=(202,))
        location = r.headers["location"]
        if location.startswith("/"):
            location = self.base + location
        sep = "&" if "?" in location else "?"
        self.request(
            "PUT",
            f"{location}{sep}digest={digest}",
            scope=scope,
            ok=(201,),
            content=data,
            headers={"content-type": "application/octet-stream"},
        )
        return digest

    def put_manifest(self, repository: str, reference: str, body: bytes, media_type: str) -> str:
        r = self.request(
            "PUT",
            f"/v2/{repository}/manifests/{reference}",
            scope=f"repository:{repository}:pull,push",
            ok=(201,),
            content=body,
            headers={"content-type": media_type},
        )
        return r.headers.get("docker-content-digest") or sha256(body)


def _whiteout(path: str) -> str:
    head, _, tail = path.rpartition("/")
    return f"{head}/.wh.{tail}" if head else f".wh.{tail}"


def _next_link(r: httpx2.Response) -> str | None:
    link = r.headers.get("link")
    if not link:
        return None
    m = re.search(r"<([^>]+)>\s*;\s*rel=\"?next\"?", link)
    return m.group(1) if m else None
