# SPDX-License-Identifier: Apache-2.0
"""middleware.py — ASGI and WSGI middleware that answer 503 Service
Unavailable, with Retry-After in whole seconds (retry_after_ms rounded
up), while one of the named circuits refuses calls (open, held open), and
pass every other request on to the application. They take no permit and
report no outcome (Breaker.check): the calls the application makes to the
dependency are protected by their own breaker. Standard library only.

    app = ASGIBreakerMiddleware(app, AsyncBreaker(Breaker("payments", AsyncClient())))
    app = WSGIBreakerMiddleware(app, Breaker("payments"))
"""

from __future__ import annotations

from typing import Any, Iterable

from .breaker import AsyncBreaker, Breaker
from .errors import CircuitOpenError


def retry_after_seconds(retry_after_ms: int) -> int:
    """A refusal's Retry-After: retry_after_ms in whole seconds, rounded
    up (at least 1)."""
    return max(1, -(-int(retry_after_ms) // 1000))


def _answer(e: CircuitOpenError) -> tuple[list[tuple[str, str]], bytes]:
    body = (f'circuit "{e.name}" is open: retry in {e.retry_after_ms} ms\n').encode()
    return [("Content-Type", "text/plain; charset=utf-8"),
            ("Retry-After", str(retry_after_seconds(e.retry_after_ms))),
            ("Content-Length", str(len(body)))], body


class WSGIBreakerMiddleware:
    """WSGI: 503 with Retry-After while any of ``breakers`` refuses."""

    def __init__(self, app: Any, *breakers: Breaker) -> None:
        self.app = app
        self.breakers = breakers

    def __call__(self, environ: dict, start_response: Any) -> Iterable[bytes]:
        for b in self.breakers:
            try:
                b.check()
            except CircuitOpenError as e:
                headers, body = _answer(e)
                start_response("503 Service Unavailable", headers)
                return [body]
        return self.app(environ, start_response)


class ASGIBreakerMiddleware:
    """ASGI (HTTP scopes; others pass): 503 with Retry-After while any of
    ``breakers`` (AsyncBreakers, or Breakers wrapped in one) refuses."""

    def __init__(self, app: Any, *breakers: AsyncBreaker | Breaker) -> None:
        self.app = app
        self.breakers = [b if isinstance(b, AsyncBreaker) else AsyncBreaker(b) for b in breakers]

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            for b in self.breakers:
                try:
                    await b.check()
                except CircuitOpenError as e:
                    headers, body = _answer(e)
                    await send({"type": "http.response.start", "status": 503,
                                "headers": [(k.lower().encode(), v.encode()) for k, v in headers]})
                    await send({"type": "http.response.body", "body": body})
                    return
        await self.app(scope, receive, send)


__all__ = ["WSGIBreakerMiddleware", "ASGIBreakerMiddleware", "retry_after_seconds"]
