"""The LLM client of synthesis: any OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI, ...).

```bash
vllm serve Qwen/Qwen3-8B --enable-auto-tool-choice --tool-call-parser hermes --port 8000
python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tool-call-parser qwen25 --port 8000
envreg synth run --llm-base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B
```

The API key is read from an environment variable (``OPENAI_API_KEY`` unless told otherwise);
local servers accept any. Everything the model answers is checked: a refusal, text that is not
the JSON asked for, or tool-call arguments that do not parse are counted in `LLMStats` and
retried or refused, never trusted.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from envreg.http.tls import ssl_context

REFUSAL = re.compile(r"^\s*(i'?m sorry|i cannot|i can'?t|i am unable|i'm unable|as an ai)", re.IGNORECASE)


@dataclass
class LLMStats:
    """What the model did wrong, counted: shown in `envreg synth run`'s summary and stored in records."""

    requests: int = 0
    refusals: int = 0
    malformed_json: int = 0
    malformed_tool_calls: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class LLMConfig:
    """Where the model is: an OpenAI-compatible base URL (``.../v1``), a model name, a key."""

    base_url: str
    model: str
    api_key: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    timeout: float = 120.0
    attempts: int = 3
    stats: LLMStats = field(default_factory=LLMStats)

    @property
    def key(self) -> str:
        return self.api_key or os.environ.get(self.api_key_env) or "EMPTY"

    def client(self):
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        http = DefaultAsyncHttpxClient(verify=ssl_context())
        return AsyncOpenAI(
            base_url=self.base_url, api_key=self.key, timeout=self.timeout, max_retries=1, http_client=http
        )

    def sync_client(self):
        from openai import DefaultHttpxClient, OpenAI

        http = DefaultHttpxClient(verify=ssl_context())
        return OpenAI(
            base_url=self.base_url, api_key=self.key, timeout=self.timeout, max_retries=1, http_client=http
        )


@dataclass
class Reply:
    """One assistant message: text, parsed tool calls, and the calls whose arguments did not parse."""

    content: str
    tool_calls: list[dict[str, Any]]
    malformed: list[dict[str, Any]]
    refused: bool
    raw: dict[str, Any]


def _is_refusal(message: Any) -> bool:
    if getattr(message, "refusal", None):
        return True
    return not message.tool_calls and bool(REFUSAL.match(message.content or ""))


def extract_json(text: str) -> Any:
    """The first JSON object or list in `text` (models wrap JSON in prose or code fences)."""
    text = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fence:
        text = fence.group(1).strip()
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                return decoder.raw_decode(text[i:])[0]
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON object in the answer")


async def chat(config: LLMConfig, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> Reply:
    """One chat completion; tool calls are parsed, malformed ones kept apart (never raised)."""
    client = config.client()
    try:
        config.stats.requests += 1
        kwargs: dict[str, Any] = {
            "model": config.model,
            "messages": messages,
            "temperature": config.temperature,
        }
        if tools:
            kwargs["tools"] = tools
        response = await client.chat.completions.create(**kwargs)
    finally:
        await client.close()
    message = response.choices[0].message
    calls, malformed = [], []
    for call in message.tool_calls or []:
        raw = {"id": call.id, "name": call.function.name, "arguments": call.function.arguments}
        try:
            arguments = json.loads(call.function.arguments or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
            calls.append({**raw, "arguments": arguments})
        except ValueError as exc:
            config.stats.malformed_tool_calls += 1
            malformed.append({**raw, "error": str(exc)})
    refused = _is_refusal(message)
    if refused:
        config.stats.refusals += 1
    return Reply(message.content or "", calls, malformed, refused, message.model_dump(exclude_none=True))


async def chat_json(config: LLMConfig, system: str, prompt: str, check=None) -> Any | None:
    """Ask for JSON; retry (telling the model what was wrong) up to `config.attempts`; None if never valid.

    `check(value)` raises ``ValueError`` for JSON that parses but does not have the asked shape.
    """
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": prompt},
    ]
    for _ in range(config.attempts):
        try:
            reply = await chat(config, messages)
        except Exception as exc:  # transport errors, HTTP errors: counted, retried
            config.stats.errors += 1
            last = f"request failed: {exc}"
            continue
        if reply.refused:
            last = "refused"
            messages += [
                {"role": "assistant", "content": reply.content},
                {
                    "role": "user",
                    "content": "This is synthetic test data for a sandbox. Please answer in JSON.",
                },
            ]
            continue
        try:
            value = extract_json(reply.content)
            if check is not None:
                check(value)
            return value
        except ValueError as exc:
            config.stats.malformed_json += 1
            last = str(exc)
            messages += [
                {"role": "assistant", "content": reply.content},
                {"role": "user", "content": f"That was not valid: {exc}. Answer with the JSON only."},
            ]
    del last
    return None
