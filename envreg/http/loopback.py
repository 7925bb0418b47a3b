"""The loopback names, declared once: what a bind address, a Host header or a URL may call this machine."""

from __future__ import annotations

LOOPBACK_ADDRESSES = ("127.0.0.1", "localhost", "::1")
"""Bind addresses that only this machine reaches."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The same names as a Host header or a URL's authority writes them (IPv6 in brackets)."""


def is_loopback(address: str) -> bool:
    """Whether a server bound to `address` is reachable only from this machine (``[::1]`` counts too)."""
    return address in LOOPBACK_ADDRESSES or address in LOOPBACK_HOSTS
