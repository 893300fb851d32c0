# SPDX-License-Identifier: Apache-2.0
"""aio.py — the asyncio client: one connection (asyncio streams), many
requests in flight on it, pipelined: each request's line is written at
once and its reply is the next reply line read (cbd answers in request
order, PROTOCOL.md §2), matched through a FIFO of futures.

Every op of connection.Ops is a coroutine here. A timeout or a broken
connection fails every request in flight (their replies can no longer be
paired) and closes the connection; the next request reconnects.
``iter_circuits`` is an async iterator over every circuit, following the
list cursor on a connection of its own.
"""

from __future__ import annotations

import asyncio
import collections
import json
import weakref
from typing import Any, AsyncIterator

from .connection import (DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT, Ops, lost_cursor_error,
                         resolve_socket)
from .errors import CbdTimeoutError, ServerError, UnavailableError
from .protocol import (MAX_REPLY_BYTES, NOREPLY_REFUSED, check_list_limit, encode_request,
                       next_cursor)

# Unsent bytes past which a request waits for the socket (drain).
WRITE_BUFFER_HIGH = 1 << 20


class AsyncClient(Ops):
    """A pipelined asyncio connection to cbd. Use from one event loop."""

    def __init__(self, socket_path: str | None = None, *,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 io_timeout: float = DEFAULT_IO_TIMEOUT) -> None:
        if connect_timeout <= 0 or io_timeout <= 0:
            raise ValueError("connect_timeout and io_timeout must be positive (seconds)")
        self.socket_path = resolve_socket(socket_path)
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: collections.deque = collections.deque()
        self._read_task: asyncio.Task | None = None
        self._connecting: asyncio.Lock | None = None
        # The cursor of the listing going on on this connection (None when
        # none), and the last one lost with its connection.
        self._page_cursor: str | None = None
        self._lost_cursor: str | None = None
        self._cached_breakers: weakref.WeakSet = weakref.WeakSet()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection, and the watch cache of the breakers on
        it (queued outcomes written first: what the socket does not take
        at once goes on as cbd reads it, waited for 200 ms at most)."""
        for b in list(self._cached_breakers):
            b.close()
        self._fail_all(UnavailableError("connection closed by the client"))
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    def cache_stats(self):
        """The counters of this event loop's watch cache on this socket
        (cache.CacheStats), None when no cached breaker uses it."""
        from . import cache
        return cache.stats(self.socket_path, asyncio.get_running_loop())

    def iter_circuits(self, state: str | None = None, ctx: dict | None = None, *,
                      page_size: int | None = None,
                      policy: bool | None = None) -> AsyncIterator[dict]:
        """Every circuit's snapshot (optionally only those in ``state``),
        read page by page (``page_size`` circuits at most, else as many as
        cbd's output bound lets into one reply), for ``async for``. The
        pages go over a connection of the listing's own, so no request
        pipelined on this client can end the listing; it is closed when the
        iteration ends. Each circuit stored for the whole listing comes
        exactly once; if the connection closes mid-listing the iteration
        raises UnavailableError rather than start again. ``policy=True``:
        each snapshot carries its circuit's policy."""
        check_list_limit(page_size)
        return self._circuits(state, ctx, page_size, policy)

    async def _circuits(self, state: str | None, ctx: dict | None,
                        page_size: int | None, policy: bool | None) -> AsyncIterator[dict]:
        listing = AsyncClient(self.socket_path, connect_timeout=self.connect_timeout,
                              io_timeout=self.io_timeout)
        try:
            cursor = None
            while True:
                reply = await listing.list(state, ctx, limit=page_size, cursor=cursor,
                                           policy=policy)
                cursor = next_cursor(reply)
                for circuit in reply["circuits"]:
                    yield circuit
                if cursor is None:
                    return
        finally:
            await listing.close()

    def _fail_all(self, err: Exception) -> None:
        """Close the connection and fail every request in flight with err."""
        if self._page_cursor is not None:
            self._lost_cursor = self._page_cursor
            self._page_cursor = None
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
        while self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(err)

    async def _ensure(self) -> None:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is not None:
                return
            try:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(self.socket_path, limit=MAX_REPLY_BYTES),
                    self.connect_timeout)
            except asyncio.TimeoutError:
                raise CbdTimeoutError(f"connecting to {self.socket_path} timed out") from None
            except OSError as e:
                raise UnavailableError(
                    f"cannot connect to {self.socket_path}: {e.strerror or e}") from None
            self._read_task = asyncio.get_running_loop().create_task(
                self._read_loop(self._reader))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        """Hand each reply line to the oldest request in flight."""
        try:
            while True:
                line = await reader.readline()
                if not line.endswith(b"\n"):
                    raise UnavailableError("cbd closed the connection")
                if not line.strip():
                    continue
                try:
                    reply = json.loads(line)
                except ValueError as e:
                    raise UnavailableError(f"cbd sent a line that is not JSON: {e}") from None
                if not isinstance(reply, dict) or "ok" not in reply:
                    continue  # a watch event: not a reply
                if not self._pending:
                    raise UnavailableError("cbd sent a reply nobody asked for")
                fut = self._pending.popleft()
                if not fut.done():
                    fut.set_result(reply)
        except asyncio.CancelledError:
            raise
        except (UnavailableError, OSError, ValueError) as e:
            if reader is self._reader:
                err = e if isinstance(e, UnavailableError) else UnavailableError(
                    f"connection to cbd failed: {e}")
                self._fail_all(err)

    def _timed_out(self, fut: asyncio.Future, writer: asyncio.StreamWriter, op: str) -> None:
        """A reply's timer fired: every request in flight fails with it."""
        if not fut.done() and writer is self._writer:
            self._fail_all(CbdTimeoutError(f"cbd did not answer {op} within "
                                           f"{self.io_timeout * 1000:.0f} ms"))

    async def request(self, op: str, **members: Any) -> dict | None:
        """Send one request; await its reply (None with noreply)."""
        line = encode_request(op, members)
        noreply = members.get("noreply") is True and op not in NOREPLY_REFUSED
        cursor = members.get("cursor") if op == "list" else None
        if cursor is not None and cursor == self._lost_cursor:
            raise lost_cursor_error(cursor)
        await self._ensure()
        writer = self._writer
        loop = asyncio.get_running_loop()
        fut = None
        if not noreply:
            fut = loop.create_future()
            self._pending.append(fut)
        try:
            writer.write(line)
            # Wait for the socket only when cbd is not reading (rare).
            if writer.transport.get_write_buffer_size() > WRITE_BUFFER_HIGH:
                await asyncio.wait_for(writer.drain(), self.io_timeout)
        except asyncio.TimeoutError:
            err = CbdTimeoutError(f"cbd did not read {op} within "
                                  f"{self.io_timeout * 1000:.0f} ms")
            if writer is self._writer:
                self._fail_all(err)
            raise err from None
        except OSError as e:
            err = UnavailableError(f"connection to cbd failed: {e.strerror or e}")
            if writer is self._writer:
                self._fail_all(err)
            raise err from None
        if fut is None:
            return None
        # One timer per request rather than a wait_for task: a cancelled
        # caller cancels only its future, which stays in line so that the
        # replies after it are still paired.
        timer = loop.call_later(self.io_timeout, self._timed_out, fut, writer, op)
        try:
            reply = await fut
        finally:
            timer.cancel()
        if op == "list":
            # Any list ends the connection's previous listing; a cursor that
            # came back after its connection closed is already lost.
            page_cursor = reply.get("cursor") if reply.get("ok") else None
            if writer is self._writer:
                self._page_cursor = page_cursor
            elif page_cursor is not None:
                self._lost_cursor = page_cursor
            reply.setdefault("cursor", None)
        if reply.get("ok") is False:
            error = reply.get("error") or {}
            raise ServerError(str(error.get("code", "unknown")), str(error.get("message", "")))
        return reply
