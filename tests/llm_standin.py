"""A local OpenAI-compatible STAND-IN server for tests (no LLM is reachable here).

It is not a model: a Starlette app on 127.0.0.1 that answers ``/v1/chat/completions`` and
``/v1/embeddings`` from a Python `policy` the test gives it (scripted chat completions, including
tool calls, malformed tool-call JSON and refusals). It lets the real client code (the `openai` SDK
against a real HTTP endpoint) be tested end to end; every request is kept in `requests`.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from servers import free_port
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

Policy = Callable[[dict[str, Any]], dict[str, Any]]
_ids = itertools.count(1)


def text(content: str) -> dict[str, Any]:
    """An assistant message with text only."""
    return {"role": "assistant", "content": content}


def tool_calls(*calls: tuple[str, str]) -> dict[str, Any]:
    """An assistant message with tool calls given as (name, raw arguments text)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": args}}
            for name, args in calls
        ],
    }


def fake_embedding(text_: str, dim: int = 16) -> list[float]:
    digest = hashlib.sha256(text_.encode()).digest()
    return [b / 255 - 0.5 for b in digest[:dim]]


class StandInLLM:
    """Start with `with StandInLLM(policy) as llm:`; `llm.base_url` is the ``.../v1`` to configure."""

    def __init__(self, policy: Policy, model: str = "standin") -> None:
        self.policy = policy
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.port = free_port()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
            ]
        )
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        message = self.policy(body)
        return JSONResponse(
            {
                "id": f"chatcmpl-{next(_ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    async def embeddings(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
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

    def __enter__(self) -> StandInLLM:
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("the stand-in LLM server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
