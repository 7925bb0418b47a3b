"""`StandInLLM`: an OpenAI-compatible HTTP server on 127.0.0.1 that answers from a Python policy.

It is not a model. ``/v1/chat/completions`` returns the assistant message a `policy` callable gives for
the request body (text, tool calls, malformed tool-call JSON, refusals), ``/v1/embeddings`` returns
deterministic vectors, ``/v1/models`` lists the model. The real client code (the `openai` SDK, httpx,
a trainer's client) talks to it over real HTTP; every request body is kept in `requests`.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

Policy = Callable[[dict[str, Any]], dict[str, Any]]
"""Request body (``messages``, ``tools``, sampling parameters) -> the assistant message to answer."""
_ids = itertools.count(1)


def text(content: str) -> dict[str, Any]:
    """An assistant message with text only."""
    return {"role": "assistant", "content": content}


def tool_calls(*calls: tuple[str, str], content: str | None = None) -> dict[str, Any]:
    """An assistant message with tool calls given as (name, raw arguments text)."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": args}}
            for name, args in calls
        ],
    }


def fake_embedding(text_: str, dim: int = 16) -> list[float]:
    """A deterministic vector for a text (the same text, the same vector)."""
    digest = hashlib.sha256(text_.encode()).digest()
    return [b / 255 - 0.5 for b in digest[:dim]]


def completion(message: dict[str, Any], model: str) -> dict[str, Any]:
    """A ``chat.completion`` body around one assistant message."""
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class StandInLLM:
    """Start with ``with StandInLLM(policy) as llm:``; `llm.base_url` is the ``.../v1`` to configure.

    `latency` (seconds) delays every answer, as a served model would; 0 answers at once. `port` 0 takes
    a free port from the OS. `keep_requests=False` stops keeping request bodies (long benchmarks).
    """

    def __init__(
        self,
        policy: Policy,
        model: str = "standin",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
        keep_requests: bool = True,
    ) -> None:
        self.policy = policy
        self.model = model
        self.host = host
        self.port = port
        self.latency = latency
        self.keep_requests = keep_requests
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ]
        )
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host=host,
                port=port,
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=1,
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="envreg-standin")

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _keep(self, body: dict[str, Any]) -> None:
        if self.keep_requests:
            self.requests.append(body)

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self._keep(body)
        if self.latency:
            await asyncio.sleep(self.latency)
        return JSONResponse(completion(self.policy(body), body.get("model") or self.model))

    async def embeddings(self, request: Request) -> JSONResponse:
        body = await request.json()
        self._keep(body)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return JSONResponse(
            {
                "object": "list",
                "model": body.get("model", self.model),
                "data": [
                    {"object": "embedding", "index": i, "embedding": fake_embedding(t)}
                    for i, t in enumerate(inputs)
                ],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        )

    async def models(self, request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    def start(self) -> StandInLLM:
        """Serve in a background thread; returns once the port is bound."""
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the stand-in LLM server did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> StandInLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
