# SPDX-License-Identifier: Apache-2.0
"""errors.py — the exceptions of the client: cbd's refusals (carrying its
error code and message), an unreachable or hung cbd, and an open circuit
(carrying retry_after_ms)."""

from __future__ import annotations


class CbdError(Exception):
    """Base of every error of this package: ``code`` and ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ServerError(CbdError):
    """cbd answered ``ok: false`` (PROTOCOL.md §4): ``code`` is cbd's
    (``bad_request``, ``forbidden``, ``capacity``, ...)."""


class UnavailableError(CbdError):
    """cbd could not be reached, broke the connection or sent something that
    is not a reply (code ``unavailable``)."""

    def __init__(self, message: str, code: str = "unavailable") -> None:
        super().__init__(code, message)


class CbdTimeoutError(UnavailableError):
    """cbd did not connect or answer within the timeout (code ``timeout``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "timeout")


class CircuitOpenError(CbdError):
    """The breaker refused the call: the circuit is open (or half_open with
    no free trial slot). ``retry_after_ms`` says when to try again."""

    def __init__(self, name: str, state: str, retry_after_ms: int) -> None:
        super().__init__("open", f'circuit "{name}" is {state}: retry in {retry_after_ms} ms')
        self.name = name
        self.state = state
        self.retry_after_ms = retry_after_ms


# Refusals that mean "cbd cannot serve now" rather than an answer (§4, §11).
_DEGRADING_CODES = frozenset({"shutting_down", "internal"})


def store_failed(err: BaseException) -> bool:
    """Does err mean cbd is unavailable (fall back per policy), rather than
    an answer to return as it is (bad_request, forbidden, capacity)?"""
    if isinstance(err, UnavailableError):
        return True
    return isinstance(err, ServerError) and err.code in _DEGRADING_CODES
