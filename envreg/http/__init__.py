"""What every HTTP client and server of envreg shares (issue 25 grows this into envreg's one HTTP layer)."""

from envreg.http.tls import ssl_context

__all__ = ["ssl_context"]
