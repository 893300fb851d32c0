# SPDX-License-Identifier: Apache-2.0
"""classify.py — what a call's outcome means for the breaker: SUCCESS,
FAILURE or IGNORE (PROTOCOL.md §14 item 8), and the HTTP classifier:
5xx, 408, 429 and transport errors are failures; the other statuses
(1xx-3xx, the other 4xx: the caller's business) are successes."""

from __future__ import annotations

import enum
import http.client
import socket
import urllib.error
from typing import Any, Callable


class Outcome(str, enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    IGNORE = "ignore"


SUCCESS = Outcome.SUCCESS
FAILURE = Outcome.FAILURE
IGNORE = Outcome.IGNORE

# HTTP statuses that say the dependency is unwell besides 5xx.
HTTP_FAILURE_STATUSES = frozenset({408, 429})


def http_outcome(status: int) -> Outcome:
    """The outcome of an HTTP status (libcbclient's cbc_http_outcome)."""
    if status >= 500 or status in HTTP_FAILURE_STATUSES or status < 100:
        return FAILURE
    return SUCCESS


def http_status(value: object) -> int | None:
    """The HTTP status an answer or an error carries: ``.status``,
    ``.status_code`` (requests, httpx), ``.code`` of urllib's HTTPError."""
    for attr in ("status", "status_code"):
        status = getattr(value, attr, None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    if isinstance(value, urllib.error.HTTPError) and isinstance(value.code, int):
        return value.code
    response = getattr(value, "response", None)  # requests' HTTPError
    if response is not None and response is not value:
        return http_status(response)
    return None


def classify_http(value: object) -> Outcome:
    """Classify an HTTP call's result or exception: by its status when it
    carries one; a transport error (urllib.error.URLError, http.client
    errors, socket errors and timeouts, any other OSError) is a failure;
    other exceptions are failures; a result with no status a success."""
    status = http_status(value)
    if status is not None:
        return http_outcome(status)
    if isinstance(value, (urllib.error.URLError, http.client.HTTPException, socket.timeout,
                          TimeoutError, OSError, BaseException)):
        return FAILURE
    return SUCCESS


def classified(classify: Callable[[Any], Outcome], value: Any) -> Outcome:
    """classify(value) as an Outcome; a classifier that raises, or answers
    something that is not an outcome, counts as a failure."""
    try:
        return Outcome(classify(value))
    except Exception:
        return FAILURE
