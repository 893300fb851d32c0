# SPDX-License-Identifier: Apache-2.0
"""errors.py — the exceptions of the client: cbd's refusals (carrying its
error code and message), an unreachable or hung cbd, and cbd's refusals
of a call (RefusedError, carrying retry_after_ms): an open circuit, a full
bulkhead, a spent retry budget."""

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


class RefusedError(CbdError):
    """The common base of cbd's refusals of a call (allow answered
    ``allowed: false``): ``name``, ``state``, ``retry_after_ms`` (when to
    try again) and ``reason`` (protocol 3: ``open``, ``held``,
    ``half_open_full``, ``concurrency``, ``retry_budget``; None from an
    older cbd or the local fallback)."""

    def __init__(self, code: str, name: str, state: str, retry_after_ms: int,
                 reason: str | None, message: str) -> None:
        super().__init__(code, message)
        self.name = name
        self.state = state
        self.retry_after_ms = retry_after_ms
        self.reason = reason


class CircuitOpenError(RefusedError):
    """The breaker refused the call: the circuit is open (or held open, or
    half_open with no free trial slot). ``retry_after_ms`` says when to
    try again."""

    def __init__(self, name: str, state: str, retry_after_ms: int,
                 reason: str | None = None) -> None:
        super().__init__("open", name, state, retry_after_ms, reason,
                         f'circuit "{name}" is {state}: retry in {retry_after_ms} ms')


class BulkheadFullError(RefusedError):
    """The circuit's bulkhead is full (protocol 3 ``max_concurrent``,
    reason ``concurrency``): ``in_flight`` calls hold every ticket and none
    freed within the breaker's ``wait_ms``. The breaker is not open: try
    again once a call ends (``retry_after_ms`` is 0)."""

    def __init__(self, name: str, state: str, retry_after_ms: int,
                 in_flight: int | None = None) -> None:
        super().__init__("concurrency", name, state, retry_after_ms, "concurrency",
                         f'circuit "{name}": bulkhead full ({in_flight} calls in flight)')
        self.in_flight = in_flight


class RetryBudgetError(RefusedError):
    """A retry refused by the circuit's retry budget (protocol 3
    ``retry_budget_percent``, reason ``retry_budget``): the host retried
    too much of late. Retry helpers stop at it; ``retry_after_ms`` says
    when the budget has room again."""

    def __init__(self, name: str, state: str, retry_after_ms: int) -> None:
        super().__init__("retry_budget", name, state, retry_after_ms, "retry_budget",
                         f'circuit "{name}": retry budget spent: retry in {retry_after_ms} ms')


def refusal(name: str, reply: dict) -> RefusedError:
    """The error for an allow reply with ``allowed: false``."""
    state = str(reply.get("state") or "closed")
    left = int(reply.get("retry_after_ms") or 0)
    reason = reply.get("reason")
    if reason == "concurrency":
        return BulkheadFullError(name, state, left, reply.get("in_flight"))
    if reason == "retry_budget":
        return RetryBudgetError(name, state, left)
    return CircuitOpenError(name, state, left, reason)


# Refusals that mean "cbd cannot serve now" rather than an answer (§4, §11).
_DEGRADING_CODES = frozenset({"shutting_down", "internal"})


def store_failed(err: BaseException) -> bool:
    """Does err mean cbd is unavailable (fall back per policy), rather than
    an answer to return as it is (bad_request, forbidden, capacity)?"""
    if isinstance(err, UnavailableError):
        return True
    return isinstance(err, ServerError) and err.code in _DEGRADING_CODES
