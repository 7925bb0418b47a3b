"""Start a real CNCF Distribution registry (`docker-registry serve`, Debian's package) on loopback.

For tests and benchmarks: a free port on 127.0.0.1, a storage folder of its own, optional htpasswd
(bcrypt) basic auth, and an access log to count what clients asked for.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx2

from envreg.http.client import request

INSTALL_HINT = "install it with `apt-get install -y docker-registry` (CNCF Distribution 2.8)"


def registry_binary() -> str | None:
    return shutil.which("docker-registry") or (
        "/usr/bin/docker-registry" if Path("/usr/bin/docker-registry").exists() else None
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash for htpasswd, from the system's libcrypt (or the `bcrypt` package when installed)."""
    try:
        import bcrypt  # type: ignore[import-not-found]

        return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
    except ImportError:
        pass
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # libxcrypt supports $2b$

        out = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 5))
    if not out or not out.startswith("$2"):
        raise RuntimeError("no bcrypt implementation available for htpasswd")
    return out


class LocalRegistry:
    """`with LocalRegistry(tmp) as reg: reg.address` -> "127.0.0.1:PORT"."""

    def __init__(self, root: Path, *, users: dict[str, str] | None = None, port: int | None = None) -> None:
        self.root = Path(root)
        self.users = users
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = self.root / "registry.log"
        self.proc: subprocess.Popen | None = None

    def config(self) -> str:
        lines = [
            "version: 0.1",
            "log:",
            "  level: info",
            "  formatter: text",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.root / 'storage'}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: {self.address}",
        ]
        if self.users:
            lines += ["auth:", "  htpasswd:", "    realm: envreg-test", f"    path: {self.root / 'htpasswd'}"]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 20) -> LocalRegistry:
        binary = registry_binary()
        if not binary:
            raise RuntimeError(f"docker-registry is not installed: {INSTALL_HINT}")
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "storage").mkdir(exist_ok=True)
        if self.users:
            (self.root / "htpasswd").write_text(
                "".join(f"{u}:{bcrypt_hash(p)}\n" for u, p in self.users.items())
            )
        cfg = self.root / "config.yml"
        cfg.write_text(self.config())
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [binary, "serve", str(cfg)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                r = request("GET", f"http://{self.address}/v2/", timeout=1)
                if r.status_code in (200, 401):
                    return self
            except httpx2.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer on {self.address} within {timeout}s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def log_mark(self) -> int:
        """The current end of the access log; pass it to `requests_since`."""
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def requests_since(self, mark: int = 0) -> list[tuple[str, str, int, int]]:
        """(method, path, status, bytes) of every request the registry served since `mark`."""
        with self.log_path.open("rb") as f:
            f.seek(mark)
            text = f.read().decode(errors="replace")
        out = []
        for m in re.finditer(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (\S+) HTTP/[\d.]+" (\d{3}) (\d+|-)', text):
            size = int(m.group(4)) if m.group(4).isdigit() else 0
            out.append((m.group(1), m.group(2), int(m.group(3)), size))
        return out
