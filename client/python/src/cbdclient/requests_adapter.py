# SPDX-License-Identifier: Apache-2.0
"""requests_adapter.py — a transport adapter for ``requests`` (optional:
imported only by who uses it; cbdclient itself needs nothing but the
standard library). Every request of a Session it is mounted on runs under
a breaker: refused while the circuit is open (CircuitOpenError, raised
without reaching the network), else sent and classified by classify_http
(5xx, 408, 429 and transport errors are failures).

    session = requests.Session()
    session.mount("https://payments.internal/", BreakerAdapter(Breaker("payments")))
"""

from __future__ import annotations

import time
from typing import Any, Callable

from requests.adapters import HTTPAdapter

from .breaker import Breaker
from .classify import IGNORE, Outcome, classified, classify_http


class BreakerAdapter(HTTPAdapter):
    """An HTTPAdapter whose requests run under ``breaker``; ``classify``
    maps a response or an exception to its outcome (default classify_http).
    Other keywords go to HTTPAdapter (pool sizes, max_retries...)."""

    def __init__(self, breaker: Breaker, *,
                 classify: Callable[[Any], Outcome] = classify_http, **kwargs: Any) -> None:
        self.breaker = breaker
        self.classify = classify
        super().__init__(**kwargs)

    def send(self, request, *args: Any, **kwargs: Any):
        permit = self.breaker.acquire()
        started = time.monotonic()
        outcome = IGNORE  # a KeyboardInterrupt or such says nothing
        try:
            response = super().send(request, *args, **kwargs)
            outcome = classified(self.classify, response)
            return response
        except Exception as e:
            outcome = classified(self.classify, e)
            raise
        finally:
            self.breaker.report(permit, outcome, int((time.monotonic() - started) * 1000))


__all__ = ["BreakerAdapter"]
