"""`ChatPolicy`: the policy behind any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, OpenAI, ...).

```bash
vllm serve Qwen/Qwen3-8B --enable-auto-tool-choice --tool-call-parser hermes --port 8000
python -m envreg.standin --env calendar --port 8000        # or the scripted stand-in, no GPU
```

One request per assistant step: the conversation so far, the tools (OpenAI function schemas) and the
sampling parameters; the answer's message (text, ``tool_calls``) and its token usage come back. A
request that could not be sent (connection refused or not made in time) is sent again, up to
`attempts`; one that was sent and failed is never repeated: it raises `PolicyError` saying what the
endpoint answered.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import httpx2

from envreg.errors import UpstreamError
from envreg.http.client import async_client


class PolicyError(UpstreamError):
    """The model endpoint refused a request or gave an answer that is not a chat completion."""


@dataclass(slots=True)
class PolicyReply:
    """One assistant step: the message as the endpoint gave it, its token usage and how long it took."""

    message: dict[str, Any]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    finish_reason: str | None = None


class Policy(Protocol):
    """Anything that answers a conversation with the next assistant message."""

    model: str

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: dict[str, Any]
    ) -> PolicyReply: ...


@dataclass
class ChatPolicy:
    """A model behind ``<base_url>/chat/completions``; the key comes from `api_key` or `$api_key_env`."""

    base_url: str
    model: str
    api_key: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 120.0
    attempts: int = 3
    sampling: dict[str, Any] = field(default_factory=dict)
    max_connections: int = 1024
    _http: httpx2.AsyncClient | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def _client(self) -> httpx2.AsyncClient:
        if self._http is None:
            key = self.api_key or os.environ.get(self.api_key_env) or "EMPTY"
            self._http = async_client(
                headers={"authorization": f"Bearer {key}"},
                timeout=httpx2.Timeout(self.timeout, connect=5.0),
                limits=httpx2.Limits(max_connections=self.max_connections),
            )
        return self._http

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: dict[str, Any]
    ) -> PolicyReply:
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.sampling, **sampling}
        if tools:
            body["tools"] = tools
        content = json.dumps(body, ensure_ascii=False)
        headers = {"content-type": "application/json"}
        start = time.perf_counter()
        for attempt in range(1, self.attempts + 1):
            try:
                response = await self._client().post(self.url, content=content, headers=headers)
                break
            except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:  # nothing was sent
                if attempt == self.attempts:
                    raise PolicyError(
                        f"no connection to the model at {self.base_url}: {exc!r}",
                        "start the model server (or `python -m envreg.standin`) and check --base-url",
                    ) from None
                await anyio.sleep(0.05 * attempt)
            except httpx2.TimeoutException as exc:
                raise PolicyError(
                    f"the model at {self.base_url} gave no answer in {self.timeout:g} s ({exc!r})"
                ) from None
            except httpx2.TransportError as exc:
                raise PolicyError(f"the model at {self.base_url} failed: {exc!r}") from None
        else:
            raise PolicyError(f"no request was sent: attempts is {self.attempts}, it must be at least 1")
        seconds = time.perf_counter() - start
        return _reply(response, self.base_url, seconds)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _reply(response: httpx2.Response, base_url: str, seconds: float) -> PolicyReply:
    if response.status_code != 200:
        raise PolicyError(
            f"the model at {base_url} answered HTTP {response.status_code}: {response.text[:300]}",
            "check --model and the endpoint's logs",
        )
    try:
        data = response.json()
        choice = data["choices"][0]
        message = dict(choice["message"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise PolicyError(
            f"the model at {base_url} did not answer a chat completion: {response.text[:300]}"
        ) from None
    usage = data.get("usage") or {}
    return PolicyReply(
        message=message,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        seconds=seconds,
        finish_reason=choice.get("finish_reason"),
    )
