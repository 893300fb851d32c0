# SPDX-License-Identifier: Apache-2.0
"""protocol.py — the line codec of PROTOCOL.md, with no I/O: a request as
one JSON line (``encode_request``), a reply line as a dict or the error it
carries (``decode_reply``), the ops on which cbd refuses ``noreply``, the
longest reply line accepted, and list's page bounds and cursors.

The lowest layer of the package next to errors.py and machine.py: the
connections (connection.py, aio.py), the watch cache (cache.py) and the
breaker (breaker.py) all build their lines here, so none of them imports
another for the codec (tests/test_imports.py keeps the imports acyclic).
"""

from __future__ import annotations

import json

from .errors import ServerError, UnavailableError

# The longest reply line we accept (a list of many circuits may be large:
# cbd cuts list replies at half of its max_output_bytes, 8 MiB by default).
MAX_REPLY_BYTES = 64 << 20
# Ops on which cbd honours noreply (§8: every op but these five).
NOREPLY_REFUSED = frozenset({"hello", "watch", "unwatch", "list", "stats"})
# The largest page of list (PROTOCOL.md, list, "Pages."; libcbclient's
# CBC_LIST_LIMIT_MAX).
LIST_LIMIT_MAX = 100000


def encode_request(op: str, members: dict) -> bytes:
    """One request line: members set to None are left out (§3)."""
    req = {"op": op}
    req.update({k: v for k, v in members.items() if v is not None})
    return json.dumps(req, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def decode_reply(line: bytes) -> dict:
    """A reply line as a dict; raises ServerError for ok: false."""
    try:
        reply = json.loads(line)
    except ValueError as e:
        raise UnavailableError(f"cbd sent a line that is not JSON: {e}") from None
    if not isinstance(reply, dict):
        raise UnavailableError("cbd sent a line that is not a JSON object")
    if reply.get("ok") is False:
        error = reply.get("error") or {}
        raise ServerError(str(error.get("code", "unknown")), str(error.get("message", "")))
    return reply


def check_list_limit(limit: int | None) -> None:
    """Raise ValueError unless limit is None or an int in 1..LIST_LIMIT_MAX."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) \
            or not 1 <= limit <= LIST_LIMIT_MAX:
        raise ValueError(f"limit must be an integer from 1 to {LIST_LIMIT_MAX}, not {limit!r}")


def next_cursor(reply: dict) -> str | None:
    """The cursor of a list reply's next page, None after the last page.
    A reply that left circuits out without a cursor (a cbd older than list
    pages) raises UnavailableError rather than end the listing short."""
    cursor = reply.get("cursor")
    if cursor is None and reply.get("truncated") is True:
        raise UnavailableError("cbd left circuits out of a list reply without a cursor "
                               "(a cbd without list pages): the listing cannot go on")
    return cursor
