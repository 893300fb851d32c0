# SPDX-License-Identifier: Apache-2.0
"""connection.py — one connection to cbd for threads: the socket path
(argument, else $CBD_SOCKET, else /run/cbd/cbd.sock), connect and I/O
timeouts, reconnection, one lock per connection, and every op of
PROTOCOL.md §8 as a method. ``list`` takes pages (``limit``, ``cursor``);
``iter_circuits`` follows the cursor to read every circuit.

A request is one JSON line (protocol.py is the codec); its reply is the
next line that carries ``ok`` (watch events, which never do, are skipped).
A connection that timed out or broke is closed at once, so a late reply can
never be taken for the answer to a later request; the next call reconnects.
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time
import weakref
from typing import Any, Iterator

from .errors import CbdTimeoutError, UnavailableError
# The line codec lives in protocol.py; its names stay importable from here.
from .protocol import (LIST_LIMIT_MAX, MAX_REPLY_BYTES, NOREPLY_REFUSED,  # noqa: F401
                       check_list_limit, decode_reply, encode_request, next_cursor)

DEFAULT_SOCKET = "/run/cbd/cbd.sock"
# Timeouts in seconds (libcbclient's CBC_DEFAULT_CONNECT_TIMEOUT_MS and
# CBC_DEFAULT_IO_TIMEOUT_MS: 100 ms each).
DEFAULT_CONNECT_TIMEOUT = 0.1
DEFAULT_IO_TIMEOUT = 0.1
# Bytes read from the socket at a time.
READ_CHUNK = 65536


def resolve_socket(path: str | None = None) -> str:
    """The socket path: path, else $CBD_SOCKET, else /run/cbd/cbd.sock."""
    return path or os.environ.get("CBD_SOCKET") or DEFAULT_SOCKET


def lost_cursor_error(cursor: str) -> UnavailableError:
    """The error for a cursor whose connection closed mid-listing."""
    return UnavailableError(f'the connection to cbd closed during a listing: cursor "{cursor}" '
                            "went with it (start the listing again)")


class Ops:
    """Every op as a method over ``self.request(op, **members)`` (shared by
    the thread and asyncio clients; the asyncio one returns coroutines).

    Protocol 3 §1: snapshots carry ``policy_rev`` and no ``policy``, except
    ``get``'s (``policy=False`` leaves it out) and those of a request sent
    with ``policy=True`` (every op that returns snapshots takes it, ``list``
    too). A v2 cbd ignores the member and sends the policy in every
    snapshot, without ``policy_rev``."""

    def request(self, op: str, **members: Any):  # pragma: no cover - abstract
        raise NotImplementedError

    def hello(self, client: str | None = None):
        return self.request("hello", client=client)

    def get(self, name: str, ctx: dict | None = None, *, policy: bool | None = None):
        return self.request("get", name=name, ctx=ctx, policy=policy)

    def allow(self, name: str, ctx: dict | None = None, *, wait_ms: int | None = None,
              retry: bool | None = None):
        """May I call? ``wait_ms``: wait up to that long in cbd for a
        bulkhead ticket (cbd reads nothing else of this connection
        meanwhile, and the reply may take wait_ms past the io_timeout:
        use a connection of its own with a longer io_timeout, as Breaker
        does); ``retry=True``: the call is a retry (protocol 3 §2, §3)."""
        return self.request("allow", name=name, ctx=ctx, wait_ms=wait_ms, retry=retry)

    def record(self, name: str, outcome: str, permit: str | None = None,
               duration_ms: int | None = None, ctx: dict | None = None,
               noreply: bool = False, *, policy: bool | None = None):
        return self.request("record", name=name, outcome=outcome, permit=permit,
                            duration_ms=duration_ms, ctx=ctx, noreply=noreply or None,
                            policy=policy)

    def record_success(self, name: str, duration_ms: int | None = None,
                       ctx: dict | None = None, noreply: bool = False, *,
                       policy: bool | None = None):
        return self.request("record_success", name=name, duration_ms=duration_ms, ctx=ctx,
                            noreply=noreply or None, policy=policy)

    def record_failure(self, name: str, duration_ms: int | None = None,
                       ctx: dict | None = None, noreply: bool = False, *,
                       policy: bool | None = None):
        return self.request("record_failure", name=name, duration_ms=duration_ms, ctx=ctx,
                            noreply=noreply or None, policy=policy)

    def cas(self, name: str, from_state: str, to_state: str, ctx: dict | None = None, *,
            policy: bool | None = None):
        return self.request("cas", name=name, ctx=ctx, policy=policy,
                            **{"from": from_state, "to": to_state})

    def set_state(self, name: str, state: str, hold: bool | None = None,
                  ttl_ms: int | None = None, reason: str | None = None,
                  ctx: dict | None = None, *, policy: bool | None = None):
        return self.request("set_state", name=name, state=state, hold=hold, ttl_ms=ttl_ms,
                            reason=reason, ctx=ctx, policy=policy)

    def release(self, name: str, ctx: dict | None = None, *, policy: bool | None = None):
        return self.request("release", name=name, ctx=ctx, policy=policy)

    def acquire_slot(self, name: str, ctx: dict | None = None):
        return self.request("acquire_slot", name=name, ctx=ctx)

    def release_slot(self, name: str, token: str, ctx: dict | None = None):
        return self.request("release_slot", name=name, token=token, ctx=ctx)

    def delete(self, name: str):
        return self.request("delete", name=name)

    def list(self, state: str | None = None, ctx: dict | None = None, *,
             limit: int | None = None, cursor: str | None = None,
             policy: bool | None = None):
        """Circuits' snapshots: ``{"circuits": [...], "truncated": bool,
        "cursor": str | None}``. ``limit`` (1..100000) caps the page;
        ``truncated`` says circuits were left out (by ``limit`` or by cbd's
        output bound) and ``cursor`` then names the next page: pass it back
        to this client, with no other ``list`` in between, for the next
        page (the listing keeps the ``state`` it started with). The last
        page's ``cursor`` is None. A cursor belongs to the connection: one
        from another client, or used after another list, is ServerError
        ``bad_request``; one whose connection closed raises
        UnavailableError (the listing cannot be resumed). ``iter_circuits``
        follows the cursor for you. ``policy=True``: each snapshot carries
        its circuit's policy (protocol 3)."""
        check_list_limit(limit)
        return self.request("list", state=state, ctx=ctx, limit=limit, cursor=cursor,
                            policy=policy)

    def stats(self):
        return self.request("stats")

    def metrics(self):
        return self.request("metrics")


class Client(Ops):
    """A connection to cbd, safe to share between threads (one request at a
    time on the wire, under a lock). Methods return the reply as a dict and
    raise ServerError (cbd's code and message), UnavailableError or
    CbdTimeoutError. ``noreply=True`` (outcome ops) returns None at once."""

    def __init__(self, socket_path: str | None = None, *,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 io_timeout: float = DEFAULT_IO_TIMEOUT) -> None:
        if connect_timeout <= 0 or io_timeout <= 0:
            raise ValueError("connect_timeout and io_timeout must be positive (seconds)")
        self.socket_path = resolve_socket(socket_path)
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self.policy_conflicts = 0  # replies that carried policy_conflict
        self.last_policy_conflict: list | None = None
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._buf = b""
        # The cursor of the listing going on on this connection (None when
        # none), and the last one lost with its connection (for a clear
        # error instead of cbd's bad_request on the next connection).
        self._page_cursor: str | None = None
        self._lost_cursor: str | None = None
        self._cached_breakers: weakref.WeakSet = weakref.WeakSet()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection, and the watch cache of the breakers on
        it (queued outcomes written first: what the socket does not take
        at once goes on as cbd reads it, waited for 200 ms at most)."""
        for b in list(self._cached_breakers):
            b.close()
        with self._lock:
            self._drop()

    def cache_stats(self):
        """The counters of this process's watch cache on this socket
        (cache.CacheStats), None when no cached breaker uses it."""
        from . import cache
        return cache.stats(self.socket_path)

    def iter_circuits(self, state: str | None = None, ctx: dict | None = None, *,
                      page_size: int | None = None,
                      policy: bool | None = None) -> Iterator[dict]:
        """Every circuit's snapshot (optionally only those in ``state``),
        read page by page (``page_size`` circuits at most, else as many as
        cbd's output bound lets into one reply). The pages go over a
        connection of the listing's own, so no other request on this client
        can end the listing, and it is closed when the iteration ends. Each
        circuit stored for the whole listing comes exactly once; if the
        connection closes mid-listing the iteration raises UnavailableError
        rather than start again. ``policy=True``: each snapshot carries
        its circuit's policy."""
        check_list_limit(page_size)
        return self._circuits(state, ctx, page_size, policy)

    def _circuits(self, state: str | None, ctx: dict | None,
                  page_size: int | None, policy: bool | None) -> Iterator[dict]:
        with Client(self.socket_path, connect_timeout=self.connect_timeout,
                    io_timeout=self.io_timeout) as listing:
            cursor = None
            while True:
                reply = listing.list(state, ctx, limit=page_size, cursor=cursor,
                                     policy=policy)
                cursor = next_cursor(reply)
                yield from reply["circuits"]
                if cursor is None:
                    return

    def _drop(self) -> None:
        if self._page_cursor is not None:
            self._lost_cursor = self._page_cursor
            self._page_cursor = None
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._buf = b""

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.connect_timeout)
        try:
            s.connect(self.socket_path)
        except socket.timeout:
            s.close()
            raise CbdTimeoutError(f"connecting to {self.socket_path} timed out") from None
        except OSError as e:
            s.close()
            raise UnavailableError(f"cannot connect to {self.socket_path}: {e.strerror or e}") \
                from None
        return s

    def _stale(self) -> bool:
        """Did cbd close the idle connection (say, it restarted)?"""
        readable, _, _ = select.select([self._sock], [], [], 0)
        if not readable:
            return False
        try:
            data = self._sock.recv(READ_CHUNK, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        if not data:
            return True
        self._buf += data  # unread event lines; skipped as replies are read
        return False

    def _readline(self, deadline: float) -> bytes:
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1:]
                return line
            if len(self._buf) > MAX_REPLY_BYTES:
                raise UnavailableError(f"reply longer than {MAX_REPLY_BYTES} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            self._sock.settimeout(left)
            data = self._sock.recv(READ_CHUNK)
            if not data:
                raise UnavailableError("cbd closed the connection")
            self._buf += data

    def request(self, op: str, **members: Any) -> dict | None:
        """Send one request, return its reply (None with noreply)."""
        line = encode_request(op, members)
        noreply = members.get("noreply") is True and op not in NOREPLY_REFUSED
        cursor = members.get("cursor") if op == "list" else None
        with self._lock:
            if self._sock is not None and self._stale():
                self._drop()
            if cursor is not None and cursor == self._lost_cursor:
                raise lost_cursor_error(cursor)
            try:
                if self._sock is None:
                    self._sock = self._connect()
                deadline = time.monotonic() + self.io_timeout
                self._sock.settimeout(self.io_timeout)
                self._sock.sendall(line)
                if noreply:
                    return None
                while True:
                    raw = self._readline(deadline)
                    if not raw.strip():
                        continue
                    reply = json.loads(raw) if b'"ok"' in raw else None
                    if isinstance(reply, dict) and "ok" in reply:
                        break  # else an event line (no ok): skip it
                if op == "list":
                    # Any list ends the connection's previous listing.
                    self._page_cursor = reply.get("cursor") if reply.get("ok") else None
            except socket.timeout:
                self._drop()
                raise CbdTimeoutError(f"cbd did not answer {op} within "
                                      f"{self.io_timeout * 1000:.0f} ms") from None
            except UnavailableError:
                self._drop()
                raise
            except ValueError as e:
                self._drop()
                raise UnavailableError(f"cbd sent a line that is not JSON: {e}") from None
            except OSError as e:
                self._drop()
                raise UnavailableError(f"connection to cbd failed: {e.strerror or e}") from None
        conflict = reply.get("policy_conflict")
        if conflict:
            self.policy_conflicts += 1
            self.last_policy_conflict = conflict
        if reply.get("ok") is False:
            return decode_reply(raw)
        if op == "list":
            reply.setdefault("cursor", None)
        return reply
