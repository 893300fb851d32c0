# SPDX-License-Identifier: Apache-2.0
"""cbdclient — the Python client of cbd, the circuit-breaker sidecar.

``Client`` (threads) and ``AsyncClient`` (asyncio, pipelined) speak every op
of proto/PROTOCOL.md; ``Breaker`` is libcbclient's breaker (fallback,
classification, permits, state callbacks, the LOCAL / ALLOW / REJECT store
policies); ``Retry`` adds per-attempt timeouts and retries with backoff.
Standard library only.
"""

from .aio import AsyncClient
from .breaker import (ALLOW, DEFAULT_TIMEOUT_BACKOFF_MS, LOCAL, REJECT, AsyncBreaker, Breaker,
                      Permit, StorePolicy, circuit_breaker)
from .classify import FAILURE, IGNORE, SUCCESS, Outcome, classify_http, http_outcome
from .connection import DEFAULT_SOCKET, Client, resolve_socket
from .errors import (BulkheadFullError, CbdError, CbdTimeoutError, CircuitOpenError,
                     RefusedError, RetryBudgetError, ServerError, UnavailableError)
from .machine import CLOSED, HALF_OPEN, OPEN
from .retry import AttemptTimeoutError, Hooks, Retry, with_retries

__version__ = "0.2.0"

__all__ = [
    "AsyncClient", "Client", "DEFAULT_SOCKET", "resolve_socket",
    "Breaker", "AsyncBreaker", "Permit", "StorePolicy", "LOCAL", "ALLOW", "REJECT",
    "DEFAULT_TIMEOUT_BACKOFF_MS", "circuit_breaker",
    "Outcome", "SUCCESS", "FAILURE", "IGNORE", "classify_http", "http_outcome",
    "CbdError", "ServerError", "UnavailableError", "CbdTimeoutError", "CircuitOpenError",
    "RefusedError", "BulkheadFullError", "RetryBudgetError",
    "CLOSED", "OPEN", "HALF_OPEN",
    "Retry", "Hooks", "AttemptTimeoutError", "with_retries",
]
