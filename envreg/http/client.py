"""The one way envreg opens an HTTP client: httpx's, with the process's one TLS context (`ssl_context`)."""

from __future__ import annotations

from typing import Any

import httpx2

from envreg.http.tls import ssl_context


def async_client(**options: Any) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` with `options` (timeout, headers, limits, transport ...)."""
    return httpx2.AsyncClient(verify=ssl_context(), **options)


def sync_client(**options: Any) -> httpx2.Client:
    """An `httpx2.Client` with `options`."""
    return httpx2.Client(verify=ssl_context(), **options)


def request(method: str, url: str, **options: Any) -> httpx2.Response:
    """One request on a client of its own (``httpx2.request``), for one-shot calls: probes, checks."""
    return httpx2.request(method, url, verify=ssl_context(), **options)
