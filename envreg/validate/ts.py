"""The TypeScript MCP SDKs' JSON Schema validators (v1 and v2, Ajv as each SDK configures it), run by a Node
worker process (`ts/check_schemas.mjs`) that one validation run starts once and feeds one job per image."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from envreg import npm
from envreg.errors import EnvregError

PACKAGES = Path(__file__).resolve().parent / "ts"
SCRIPT = "check_schemas.mjs"
MAX_ANSWER = 64 << 20
JOB_TIMEOUT = 300


class SchemaWorker:
    """``async with SchemaWorker() as w: await w.check(job)``: installs the pinned packages on first use."""

    def __init__(self, cache: Path | None = None) -> None:
        self.cache = cache
        self.folder: Path | None = None
        self._process: Process | None = None
        self._stdout: BufferedByteReceiveStream | None = None
        self._lock = anyio.Lock()

    async def __aenter__(self) -> SchemaWorker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _start(self) -> None:
        self.folder = await anyio.to_thread.run_sync(npm.install, PACKAGES, self.cache)
        self._process = await anyio.open_process(
            [str(npm.node_binary(self.folder)), SCRIPT], cwd=self.folder, env=npm.environ(self.folder)
        )
        assert self._process.stdout is not None
        self._stdout = BufferedByteReceiveStream(self._process.stdout)

    async def check(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run one job (see the script's header); its answer."""
        async with self._lock:
            if self._process is None:
                await self._start()
            assert self._process is not None and self._process.stdin is not None and self._stdout is not None
            try:
                with anyio.fail_after(JOB_TIMEOUT):
                    await self._process.stdin.send(json.dumps(job).encode() + b"\n")
                    line = await self._stdout.receive_until(b"\n", MAX_ANSWER)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.IncompleteRead, TimeoutError) as exc:
                stderr = await self._stderr()
                await self.close()
                raise EnvregError(
                    f"the TypeScript schema worker stopped ({type(exc).__name__}): {stderr[-800:]}"
                ) from None
        answer = json.loads(line)
        if "error" in answer:
            raise EnvregError(f"the TypeScript schema worker failed: {answer['error'][-800:]}")
        return answer

    async def _stderr(self) -> str:
        if self._process is None or self._process.stderr is None:
            return ""
        try:
            with anyio.move_on_after(2):
                return (await self._process.stderr.receive()).decode(errors="replace")
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
        return ""

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
