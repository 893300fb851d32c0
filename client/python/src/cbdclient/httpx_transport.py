# SPDX-License-Identifier: Apache-2.0
"""httpx_transport.py — ``httpx`` transports under a breaker (optional:
imported only by who uses it). ``BreakerTransport`` wraps a sync
transport, ``AsyncBreakerTransport`` an async one: every request is
refused while the circuit is open (CircuitOpenError, raised without
reaching the network), else sent and classified by classify_http (5xx,
408, 429 and transport errors are failures).

    client = httpx.Client(transport=BreakerTransport(Breaker("payments")))
    aclient = httpx.AsyncClient(transport=AsyncBreakerTransport(
        AsyncBreaker(Breaker("payments", AsyncClient()))))
"""

from __future__ import annotations

import time
from typing import Any, Callable

import httpx

from .breaker import AsyncBreaker, Breaker
from .classify import IGNORE, Outcome, classified, classify_http


class BreakerTransport(httpx.BaseTransport):
    """A sync httpx transport under ``breaker`` (``transport``: the one
    that sends, default httpx.HTTPTransport())."""

    def __init__(self, breaker: Breaker, transport: httpx.BaseTransport | None = None, *,
                 classify: Callable[[Any], Outcome] = classify_http) -> None:
        self.breaker = breaker
        self.transport = transport or httpx.HTTPTransport()
        self.classify = classify

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        permit = self.breaker.acquire()
        started = time.monotonic()
        outcome = IGNORE
        try:
            response = self.transport.handle_request(request)
            outcome = classified(self.classify, response)
            return response
        except Exception as e:
            outcome = classified(self.classify, e)
            raise
        finally:
            self.breaker.report(permit, outcome, int((time.monotonic() - started) * 1000))

    def close(self) -> None:
        self.transport.close()


class AsyncBreakerTransport(httpx.AsyncBaseTransport):
    """An async httpx transport under ``breaker`` (an AsyncBreaker, or a
    Breaker wrapped in one); ``transport`` default httpx.AsyncHTTPTransport()."""

    def __init__(self, breaker: AsyncBreaker | Breaker,
                 transport: httpx.AsyncBaseTransport | None = None, *,
                 classify: Callable[[Any], Outcome] = classify_http) -> None:
        self.breaker = breaker if isinstance(breaker, AsyncBreaker) else AsyncBreaker(breaker)
        self.transport = transport or httpx.AsyncHTTPTransport()
        self.classify = classify

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        permit = await self.breaker.acquire()
        started = time.monotonic()
        outcome = IGNORE
        try:
            response = await self.transport.handle_async_request(request)
            outcome = classified(self.classify, response)
            return response
        except Exception as e:
            outcome = classified(self.classify, e)
            raise
        finally:
            await self.breaker.report(permit, outcome, int((time.monotonic() - started) * 1000))

    async def aclose(self) -> None:
        await self.transport.aclose()


__all__ = ["BreakerTransport", "AsyncBreakerTransport"]
