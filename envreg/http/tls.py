"""One TLS context for every HTTP client envreg opens."""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's CAs, or those of ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as
    set when it is first built), built once per process: httpx builds one for every client it creates, and
    reading the CA bundle costs ~25 ms of CPU, more than a hundred loopback calls. Pass it as ``verify=``."""
    return httpx2.create_ssl_context()
