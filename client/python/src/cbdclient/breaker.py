# SPDX-License-Identifier: Apache-2.0
"""breaker.py — the breaker API, as libcbclient's (client/circuit-breaker.c
over client/store-resilient.c): ``call`` / ``execute`` with a fallback,
three-way classification, the call's duration reported as duration_ms,
half-open permits (allow's permit) always handed back, state-change
callbacks, a decorator; and the store policies for when cbd is
unreachable:

  LOCAL   carry on with a private copy of the circuit (local.py), seeded
          from the last state cbd reported and run with the policy cbd
          reported for it (a hold too: held open stays open until the
          hold's end, held closed never opens);
  ALLOW   calls run as if the circuit were closed;
  REJECT  acquire raises the UnavailableError without running the call;
          bookkeeping after a call never raises.

No latching: every call asks cbd first, and its first answer makes it
authoritative again (the local copy is dropped). After a timeout cbd is
skipped for timeout_backoff_ms, so a hung cbd costs one timeout per window.

Cached mode (cache.py; on by default on a cbd connection without a clock):
a call that the process's watch cache sees closed runs at once and its
outcome goes to cbd as a noreply line; one it sees open (break or open
hold not elapsed) is refused locally, and such refusals are reported to cbd
in batches (record, outcome rejected, with their count: at least once a
second while refusing, when the cache stops refusing, and on close());
everything else, and a breaker's first call, takes the uncached path above.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import inspect
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from . import cache, machine
from .aio import AsyncClient
from .classify import FAILURE, IGNORE, SUCCESS, Outcome, classified
from .connection import Client
from .errors import (CbdError, CbdTimeoutError, CircuitOpenError, RefusedError, ServerError,
                     UnavailableError, refusal, store_failed)
from .local import LocalStore
from .machine import CLOSED, HALF_OPEN, OPEN, Policy, Snapshot
from .protocol import encode_request

# _report_cached's answer for an outcome that could trip: send it with a
# reply awaited.
_SYNC = object()

# After a timeout, cbd is skipped for this long (libcbclient's
# CBC_DEFAULT_TIMEOUT_BACKOFF_MS).
DEFAULT_TIMEOUT_BACKOFF_MS = 250
# Refusals made from the cache are reported to cbd in batches (protocol 3
# §6): the first waits at most this long for others while refusals go on;
# the batch also goes when the cache stops refusing and on close().
REJECTED_FLUSH_S = 1.0
# Most refusals one record reports (cbd's bound on count).
REJECTED_COUNT_MAX = 1_000_000
# Bounds of timeout_backoff_ms (as libcbclient's).
TIMEOUT_BACKOFF_MAX_MS = 3_600_000
# The policy members a breaker may declare (PROTOCOL.md §6).
POLICY_KEYS = frozenset({
    "failure_threshold", "success_threshold", "break_ms", "half_open_max", "slot_ttl_ms",
    "max_gap_ms", "trip", "window", "window_size", "minimum_calls", "failure_rate",
    "slow_call_ms", "slow_call_rate", "min_reporters", "reporter_window_ms",
    "break_backoff", "break_max_ms", "max_concurrent", "retry_budget_percent",
    "retry_min_per_s", "preset"})
# The longest wait for a bulkhead ticket cbd takes (allow's wait_ms).
WAIT_MS_MAX = 60_000


class StorePolicy(str, enum.Enum):
    LOCAL = "local"
    ALLOW = "allow"
    REJECT = "reject"


LOCAL = StorePolicy.LOCAL
ALLOW = StorePolicy.ALLOW
REJECT = StorePolicy.REJECT


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Permit:
    """A granted call: report its outcome exactly once."""

    name: str
    state: str
    token: str | None = None  # allow's permit (a trial slot or a bulkhead ticket)
    local: bool = False  # granted by the local fallback
    cached: bool = False  # granted by the watch cache: report with noreply
    started: float = field(default_factory=time.monotonic)
    reported: bool = False


class Breaker:
    """A circuit breaker on the cbd circuit ``name`` (shared by every
    process that uses the name).

    Options: ``client`` (a Client; default: one on ``socket_path``, else
    $CBD_SOCKET, else /run/cbd/cbd.sock), ``store_policy`` (LOCAL, ALLOW,
    REJECT), ``classify`` (exception -> Outcome; default: every exception
    is a failure), ``classify_results`` (also classify returned values,
    e.g. HTTP responses; a plain return is otherwise a success, never
    classified), ``fallback`` (called with the RefusedError instead of
    raising it), ``on_state_change(prev, state, error)``,
    ``on_store_error(error, op)``, ``timeout_backoff_ms``, ``clock`` (ms
    since the epoch, virtual time: sent as ctx.now), ``cached`` (None: the
    watch cache when on cbd without a clock; False: every call asks cbd;
    True: insist), ``wait_ms`` (0..60000: how long a call waits in cbd for
    a bulkhead ticket when the circuit's ``max_concurrent`` calls are all
    in flight, before BulkheadFullError; such allows go over connections
    of their own, each with the client's io_timeout plus wait_ms), and the
    policy members of PROTOCOL.md §6 as keywords (``max_concurrent``,
    ``retry_budget_percent`` and ``retry_min_per_s`` included; sent only
    when given; normally the operator's config decides).

    Bulkhead (protocol 3 §2): on a circuit with ``max_concurrent`` every
    granted call holds a ticket (its permit), handed back with its outcome
    whatever happens to the call (an exception, BaseException, asyncio
    cancellation). Such calls never come from the watch cache. Refusals
    raise a RefusedError: CircuitOpenError (open, held open, no trial
    slot), BulkheadFullError (no ticket), RetryBudgetError (a retry past
    the retry budget, ``acquire(retry=True)``).

    A breaker on an ``AsyncClient`` is used through ``AsyncBreaker``.
    ``close()`` (or ``with``) leaves the watch cache.
    """

    def __init__(self, name: str, client: Client | None = None, *,
                 socket_path: str | None = None,
                 store_policy: StorePolicy | str = LOCAL,
                 classify: Callable[[Any], Outcome] | None = None,
                 classify_results: bool = False,
                 fallback: Callable[[CircuitOpenError], Any] | None = None,
                 on_state_change: Callable[[str, str, Any], None] | None = None,
                 on_store_error: Callable[[CbdError, str], None] | None = None,
                 timeout_backoff_ms: int = DEFAULT_TIMEOUT_BACKOFF_MS,
                 clock: Callable[[], int] | None = None,
                 cached: bool | None = None,
                 wait_ms: int = 0,
                 _private: bool = False,
                 **policy: Any) -> None:
        if not isinstance(name, str) or not 1 <= len(name.encode()) <= 256:
            raise ValueError("name must be a string of 1 to 256 bytes")
        unknown = sorted(set(policy) - POLICY_KEYS)
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r}")
        if isinstance(wait_ms, bool) or not isinstance(wait_ms, int) \
                or not 0 <= wait_ms <= WAIT_MS_MAX:
            raise ValueError(f"wait_ms must be an integer from 0 to {WAIT_MS_MAX}")
        if not 0 <= timeout_backoff_ms <= TIMEOUT_BACKOFF_MAX_MS:
            raise ValueError(f"timeout_backoff_ms must be from 0 to {TIMEOUT_BACKOFF_MAX_MS}")
        self.name = name
        self.store_policy = StorePolicy(store_policy)
        self.classify = classify
        self.classify_results = classify_results
        self.fallback = fallback
        self.on_state_change = on_state_change
        self.on_store_error = on_store_error
        self.timeout_backoff_ms = timeout_backoff_ms
        self.wait_ms = wait_ms
        # Connections of waiting allows (wait_ms): cbd reads nothing else
        # of a connection while its allow waits, so a wait never blocks
        # the breaker's client (nor the records that free tickets). Idle
        # ones are kept open: a ticket goes back when its connection closes.
        self._wait_conns: list = []
        self.clock = clock
        self.ctx = {k: v for k, v in policy.items() if v is not None}
        self.policy = Policy.from_ctx(self.ctx)  # raises on a bad preset
        self.client = None if _private else (client or Client(socket_path))
        self._lock = threading.Lock()
        self._observed = CLOSED
        self._local = LocalStore()
        self._degraded = _private
        self._skip_until = 0.0
        self._skip_error: CbdError | None = None
        # What cbd last said about the circuit (for the LOCAL fallback).
        self._seen = Snapshot()
        # cbd's policy for the circuit and its policy_rev (protocol 3 §1):
        # None until a snapshot carries it, and again once a compact one
        # shows another rev; the next uncached record then asks for it.
        self._seen_policy: dict | None = None
        self._seen_policy_rev: int | None = None
        self._seen_hold: dict | None = None
        # Cached mode: the process's cache, this circuit's entry in it, the
        # change events seen, and whether an uncached call created the
        # circuit (the first call always asks cbd).
        self._async = isinstance(self.client, AsyncClient)
        self._cache: cache.WatchCache | None = None
        self._entry: cache.Entry | None = None
        self._cache_release: weakref.finalize | None = None
        self._seen_seq = 0
        self._told: tuple[int, str] | None = None  # see WatchCache.decide
        self._cache_read = 0  # the entry's snapshots already noted (_cache_answered)
        self._primed = False
        # Refusals made from the cache not yet reported, and when the first
        # of them was made (monotonic s; None: none pending).
        self._rejected_n = 0
        self._rejected_since: float | None = None
        self.cached = self._wants_cache(cached)
        if self.cached:
            # The noreply lines, less ,"duration_ms":N}\n (built once).
            ctx = self.ctx or None
            self._lines = {
                SUCCESS: encode_request("record_success", dict(
                    name=name, ctx=ctx, noreply=True))[:-2],
                FAILURE: encode_request("record_failure", dict(
                    name=name, ctx=ctx, noreply=True))[:-2],
                IGNORE: encode_request("record", dict(
                    name=name, outcome="ignore", ctx=ctx, noreply=True))[:-2],
            }
            # Counted successes (PROTOCOL.md §14 item 12): the success
            # line's head is a fold's key, then ,"count":N}\n; a success as
            # slow as the ctx's slow_call_ms is not folded.
            slow = (self.ctx or {}).get("slow_call_ms")
            self._fold_slow_ms = slow if isinstance(slow, int) and slow >= 0 else None
            # Refusals made from the cache (protocol 3 §6), less
            # ,"count":N}\n.
            self._rejected_line = encode_request("record", dict(
                name=name, outcome="rejected", ctx=ctx, noreply=True))[:-2]
            # The same with a reply (an outcome that could trip), which
            # carries the circuit's policy (protocol 3 §1) to refresh the
            # cache's rule.
            self._sync_lines = {
                SUCCESS: encode_request("record_success", dict(
                    name=name, ctx=ctx, policy=True))[:-2],
                FAILURE: encode_request("record_failure", dict(
                    name=name, ctx=ctx, policy=True))[:-2],
            }
            self.client._cached_breakers.add(self)
            if not self._async:
                self._join_cache(None)

    def _wants_cache(self, cached: bool | None) -> bool:
        if cached is False:
            return False
        remote = isinstance(self.client, (Client, AsyncClient))
        if cached and (not remote or self.clock is not None):
            raise ValueError("cached=True needs a cbd connection (Client or AsyncClient) "
                             "and no clock (the cache keeps real time)")
        return remote and self.clock is None

    def _join_cache(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Join the process's cache (for loop: the one that loop owns)."""
        self._leave_cache()
        c = cache.acquire(self.client.socket_path, loop)
        self._cache_release = weakref.finalize(self, c.release_soon)
        self._cache_release.atexit = False  # cache's own atexit closes it
        entry = c.watch(self.name)
        with self._lock:
            self._cache, self._entry = c, entry
            self._seen_seq = 0
            self._told = None
            self._primed = False

    def _leave_cache(self) -> None:
        with self._lock:
            finalizer, self._cache_release = self._cache_release, None
            c, self._cache, self._entry = self._cache, None, None
        if finalizer is not None and finalizer.detach() is not None:
            cache.release(c)

    def close(self) -> None:
        """Leave the watch cache (the last breaker to leave writes what is
        queued, what the socket does not take at once going on as cbd reads
        it, waited for 200 ms at most, and closes the connection); later
        calls take the uncached path. Closes the connections of waiting
        allows (wait_ms): tickets taken on them go back."""
        c = self._cache
        if c is not None:
            # Written now, with what is queued before it, not left to the
            # cache's owner.
            self._rejected_flush(c, urgent=True)
        self.cached = False
        self._leave_cache()
        with self._lock:
            conns, self._wait_conns = self._wait_conns, []
        for conn in conns:  # the waiting allows' connections
            if isinstance(conn, Client):
                conn.close()
            else:
                conn._fail_all(UnavailableError("breaker closed"))

    def __enter__(self) -> "Breaker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cache_stats(self) -> "cache.CacheStats | None":
        """The counters of the watch cache this breaker uses (None when
        it is not cached)."""
        c = self._cache
        return c.stats() if c is not None else None

    @classmethod
    def private(cls, name: str = "default", **options: Any) -> "Breaker":
        """A breaker on an in-process circuit only (no cbd)."""
        return cls(name, _private=True, **options)

    # -- time and observation ------------------------------------------
    def _now(self) -> int:
        return self.clock() if self.clock is not None else _wall_ms()

    def _ctx_now(self, ctx: dict | None) -> int:
        return ctx["now"] if ctx and "now" in ctx else self._now()

    def _call_ctx(self) -> dict | None:
        if self.clock is None:
            return self.ctx or None
        return dict(self.ctx, now=self.clock())

    @property
    def state(self) -> str:
        """The last state seen, without I/O."""
        with self._lock:
            return self._observed

    def _observe(self, state: str, error: Any = None, degraded: bool = False) -> None:
        if degraded and self.store_policy == ALLOW:
            return  # "as if closed" is not a state anyone is in
        with self._lock:
            prev, self._observed = self._observed, state
        if prev != state and self.on_state_change is not None:
            self.on_state_change(prev, state, error)

    # -- cbd, and falling back --------------------------------------------
    def _skipping(self) -> CbdError | None:
        with self._lock:
            if self._skip_until and time.monotonic() < self._skip_until:
                return self._skip_error
        return None

    def _failed(self, err: CbdError, op: str, skipped: bool) -> None:
        if not skipped and isinstance(err, CbdTimeoutError) and self.timeout_backoff_ms > 0:
            with self._lock:
                self._skip_until = time.monotonic() + self.timeout_backoff_ms / 1000
                self._skip_error = err
        if self.on_store_error is not None:
            self.on_store_error(err, op)

    def _remote(self, op: str, fn: Callable[[], dict]) -> tuple[dict | None, CbdError | None]:
        """Ask cbd; (reply, None), or (None, err) when cbd is unavailable.
        Refusals that are answers are raised as they are."""
        if self.client is None:
            return None, None
        if self._async:
            raise TypeError("a breaker on an AsyncClient is used through AsyncBreaker")
        err = self._skipping()
        if err is None:
            try:
                reply = fn()
            except CbdError as e:
                if not store_failed(e):
                    raise
                err = e
                self._failed(e, op, False)
            else:
                self._answered()
                return reply, None
        else:
            self._failed(err, op, True)
        return None, err

    async def _remote_async(self, op: str, fn: Callable[[], Any]
                            ) -> tuple[dict | None, CbdError | None]:
        """_remote for an AsyncClient (fn returns the request's coroutine)."""
        err = self._skipping()
        if err is None:
            try:
                reply = await fn()
            except CbdError as e:
                if not store_failed(e):
                    raise
                err = e
                self._failed(e, op, False)
            else:
                self._answered()
                return reply, None
        else:
            self._failed(err, op, True)
        return None, err

    def _answered(self) -> None:
        """cbd answered: authoritative again."""
        with self._lock:
            if self._degraded:
                self._degraded = False
                self._local.forget(self.name)

    def _note_snapshot(self, snap: dict) -> None:
        policy, rev = snap.get("policy"), cache.policy_rev(snap)
        with self._lock:
            if isinstance(policy, dict):
                self._seen_policy, self._seen_policy_rev = policy, rev
            elif rev != self._seen_policy_rev:
                self._seen_policy = None  # stale: the policy changed since
            self._seen = Snapshot.from_reply(snap, self._seen_policy)
            self._seen_hold = snap.get("hold")

    def _note_allow(self, reply: dict, now: int) -> None:
        """An allow answer's state, into the last snapshot seen."""
        state = reply.get("state")
        with self._lock:
            seen = self._seen
            if state == OPEN and seen.state != OPEN:
                policy = self._fallback_policy_locked()
                seen.state = OPEN
                seen.opened_at = now - (machine.break_ms(seen, policy)
                                        - int(reply.get("retry_after_ms") or 0))
            elif state in (CLOSED, HALF_OPEN) and seen.state != state:
                machine.force(seen, state, now)

    def _fallback_policy_locked(self) -> Policy:
        """The policy the local copy runs: cbd's for the circuit when it
        reported one (a hold kept through it), else the declared one."""
        if self._seen_policy is None:
            return self.policy
        policy = Policy.from_reported(self._seen_policy)
        hold = self._seen_hold
        if hold and hold.get("state") == OPEN:
            until, opened = hold.get("until"), self._seen.opened_at
            brk = (machine.DURATION_MAX if until is None or opened is None
                   else max(1, until - opened))
            policy = replace(policy, break_ms=brk, break_backoff=1, break_max_ms=0)
        elif hold:
            policy = replace(policy, trip=machine.TRIP_CONSECUTIVE,
                             failure_threshold=machine.COUNT_MAX)
        return policy

    def break_ms(self) -> int:
        """The break in effect as last seen (cbd's policy, grown by
        break_backoff), else the declared one."""
        with self._lock:
            return machine.break_ms(self._seen, self._fallback_policy_locked())

    def _fallback_policy(self) -> Policy:
        with self._lock:
            return self._fallback_policy_locked()

    def _degrade(self, now: int) -> None:
        """Make sure the local copy is live, seeded from what cbd said."""
        with self._lock:
            if not self._degraded:
                self._local.seed(self.name, replace(self._seen), now)
                self._degraded = True

    # -- the two-step form ----------------------------------------------
    def acquire(self, retry: bool = False) -> Permit:
        """A permit for one call, or a RefusedError: CircuitOpenError,
        BulkheadFullError (after waiting up to wait_ms), RetryBudgetError
        (REJECT: the UnavailableError when cbd is unavailable).
        ``retry=True`` marks the call a retry of one that failed (counted
        against the circuit's retry budget; always asks cbd)."""
        permit = None if retry else self._acquire_cached()
        return permit if permit is not None else self._acquire_uncached(retry)

    def _limited(self) -> bool:
        """Does the circuit have a bulkhead or a retry budget, as this
        breaker declared or cbd last reported? Its calls then ask cbd
        (a ticket is never granted from a cache; first attempts are what
        the budget is a percent of)."""
        if any(self.ctx.get(k) is not None for k in ("max_concurrent", "retry_budget_percent")):
            return True
        with self._lock:
            policy = self._seen_policy
        return isinstance(policy, dict) and (policy.get("max_concurrent") is not None
                                             or policy.get("retry_budget_percent") is not None)

    def _acquire_cached(self) -> Permit | None:
        """The cache's answer: a permit (closed), CircuitOpenError (open,
        break not elapsed), or None: ask cbd."""
        if self._entry is not None and self._limited():
            return None
        with self._lock:
            c, entry, seen, primed = self._cache, self._entry, self._seen_seq, self._primed
            told = self._told
        if entry is None or not primed or not c.usable():
            return None
        verdict, left, fresh, seq = c.decide(entry, seen, told)
        if verdict == cache.REFUSE:
            self._rejected_add(c)
        elif self._rejected_n:
            self._rejected_flush(c)  # it stopped refusing
        if verdict != cache.ASK:
            self._cache_answered(entry)
        if fresh is not None:
            # Another process's change (or our own trip), as cbd sent it:
            # the state callbacks fire, the LOCAL fallback starts from it.
            with self._lock:
                self._seen_seq = seq
            self._note_snapshot(fresh)
            self._observe(fresh["state"])
        if verdict == cache.PERMIT:
            self._observe(CLOSED)
            return Permit(self.name, CLOSED, cached=True)
        if verdict == cache.REFUSE:
            self._observe(OPEN)
            raise CircuitOpenError(self.name, OPEN, left,
                                   "held" if entry.hold_state == OPEN else "open")
        return None

    def _rejected_add(self, c: "cache.WatchCache") -> None:
        """One refusal made from the cache: counted, and the batch sent to
        cbd (record, outcome rejected, with the count) once its first
        refusal is REJECTED_FLUSH_S old."""
        now = time.monotonic()
        with self._lock:
            self._rejected_n += 1
            if self._rejected_since is None:
                self._rejected_since = now
                return
            due = now - self._rejected_since >= REJECTED_FLUSH_S
        if due:
            self._rejected_flush(c)

    def _rejected_flush(self, c: "cache.WatchCache", urgent: bool = False) -> None:
        """Report the refusals made from the cache so far (kept for later
        when the cache cannot take the line; urgent: written now)."""
        with self._lock:
            n, self._rejected_n, self._rejected_since = self._rejected_n, 0, None
        while n > 0:
            part = min(n, REJECTED_COUNT_MAX)
            if not c.send(self._rejected_line + b',"count":%d}\n' % part, urgent):
                with self._lock:
                    self._rejected_n += n
                return
            n -= part

    def _cache_answered(self, entry: "cache.Entry") -> None:
        """The cache decided from a fresh reading of cbd, which is
        authoritative again: a local copy made when cbd was away earlier is
        dropped, and the snapshot the cache last read (a hold placed
        meanwhile too) is what the next fallback starts from: an open
        circuit stays open, a held one held."""
        applied, latest = entry.applied, entry.latest
        if applied == self._cache_read and not self._degraded:
            return
        with self._lock:
            self._cache_read = applied
            if self._degraded:
                self._degraded = False
                self._local.forget(self.name)
        if latest is not None and self._policy_applies(latest):
            self._note_snapshot(latest)

    def _policy_applies(self, snap: dict) -> bool:
        """Is snap of the circuit our first call created? A watch reply read
        before it is the initial snapshot of a name not stored, with the
        defaults' policy, not the one this breaker declares."""
        if not self.ctx:
            return True
        source = (snap.get("policy") or {}).get("source")
        return isinstance(source, dict) and "client" in source.values()

    def _told_state(self, state: str) -> None:
        """cbd answered an uncached request with state: the cache decides
        again once it agrees (or an event comes). The circuit exists now."""
        with self._lock:
            c, entry = self._cache, self._entry
        if entry is not None:
            told = (c.seq(entry), state)
            with self._lock:
                self._told = told
                self._primed = True

    def _acquire_uncached(self, retry: bool = False) -> Permit:
        ctx = self._call_ctx()
        now = ctx["now"] if ctx and "now" in ctx else None
        reply, err = self._remote("allow", lambda: self._allow(ctx, retry))
        return self._granted(reply, err, now)

    def _allow(self, ctx: dict | None, retry: bool) -> dict:
        """allow on the client, or (wait_ms) on a connection of its own."""
        if not self.wait_ms:
            return self.client.allow(self.name, ctx, retry=retry or None)
        conn = self._wait_conn()
        try:
            return conn.allow(self.name, ctx, wait_ms=self.wait_ms, retry=retry or None)
        finally:
            with self._lock:
                self._wait_conns.append(conn)

    def _wait_conn(self):
        """An idle connection for a waiting allow (a new one when none):
        the client's timeouts, the wait added to its io_timeout."""
        with self._lock:
            if self._wait_conns:
                return self._wait_conns.pop()
        cls = AsyncClient if self._async else Client
        return cls(self.client.socket_path, connect_timeout=self.client.connect_timeout,
                   io_timeout=self.client.io_timeout + self.wait_ms / 1000)

    async def _allow_async(self, ctx: dict | None, retry: bool) -> dict:
        if not self.wait_ms:
            return await self.client.allow(self.name, ctx, retry=retry or None)
        conn = self._wait_conn()
        try:
            return await conn.allow(self.name, ctx, wait_ms=self.wait_ms, retry=retry or None)
        finally:
            with self._lock:
                self._wait_conns.append(conn)

    async def _acquire_uncached_async(self, retry: bool = False) -> Permit:
        ctx = self._call_ctx()
        now = ctx["now"] if ctx and "now" in ctx else None
        # The allow runs to its end even when the caller is cancelled
        # meanwhile: a ticket it brings is then handed back at once. On a
        # thread Client it runs on asyncio's thread pool.
        if self._async:
            task = asyncio.ensure_future(self._remote_async(
                "allow", lambda: self._allow_async(ctx, retry)))
        else:
            task = asyncio.get_running_loop().run_in_executor(
                None, self._remote, "allow", lambda: self._allow(ctx, retry))
        try:
            reply, err = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._hand_back_late)
            raise
        return self._granted(reply, err, now)

    def _hand_back_late(self, fut: "asyncio.Future") -> None:
        """A cancelled acquire's allow ended: hand back the ticket or slot
        it was granted (outcome ignore; the permit goes back with it)."""
        if fut.cancelled() or fut.exception() is not None:
            return
        reply = fut.result()
        if isinstance(reply, tuple):
            reply = reply[0]
        if not isinstance(reply, dict) or not reply.get("permit"):
            return
        permit, ctx = reply["permit"], self._call_ctx()
        if self._async:
            coro = self.client.record(self.name, "ignore", permit=permit, ctx=ctx, noreply=True)
            task = asyncio.ensure_future(coro)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        else:
            asyncio.get_running_loop().run_in_executor(
                None, self._record_quietly, permit, ctx)

    def _record_quietly(self, permit: str, ctx: dict | None) -> None:
        try:
            self.client.record(self.name, "ignore", permit=permit, ctx=ctx, noreply=True)
        except CbdError:
            pass  # cbd away: the connection's end or the ttl frees it

    def _granted(self, reply: dict | None, err: CbdError | None, now: int | None) -> Permit:
        """acquire's answer from cbd's allow reply, else the store policy."""
        degraded = reply is None
        if degraded:
            now = now if now is not None else self._now()
            if self.store_policy == ALLOW:
                return Permit(self.name, CLOSED)
            if self.store_policy == REJECT and self.client is not None:
                raise err
            self._degrade(now)
            reply = self._local.allow(self.name, self._fallback_policy(), now)
        else:
            self._note_allow(reply, now if now is not None else self._now())
            self._told_state(reply["state"])
        state = reply["state"]
        self._observe(state, degraded=degraded)
        if not reply["allowed"]:
            raise refusal(self.name, reply)
        return Permit(self.name, state, reply.get("permit"), local=degraded)

    def report(self, permit: Permit, outcome: Outcome | str,
               duration_ms: int | None = None, error: Any = None) -> None:
        """Record a granted call's outcome (with its duration: by default
        the time since acquire) and hand its permit back. Never raises for
        cbd's sake: bookkeeping does not replace the call's own result."""
        outcome, duration_ms = self._report_begin(permit, outcome, duration_ms)
        route = self._report_cached(permit, outcome, duration_ms)
        if route is _SYNC:
            snap, sent = self._cache.send_sync(self._sync_line(outcome, duration_ms))
            if sent:
                self._synced(snap, outcome, error)
                return
        elif route:
            return
        self._report_uncached(permit, outcome, duration_ms, error)

    def _sync_line(self, outcome: Outcome, duration_ms: int) -> bytes:
        """The outcome line with a reply (less its closing brace)."""
        return self._sync_lines[outcome] + b',"duration_ms":%d' % duration_ms

    def _synced(self, snap: dict | None, outcome: Outcome, error: Any) -> None:
        """Bookkeeping from a synced outcome's reply (None: none came)."""
        if snap is not None:
            self._note_snapshot(snap)
            self._told_state(snap["state"])
            self._observe(snap["state"], error if outcome == FAILURE else None)

    def _report_begin(self, permit: Permit, outcome: Outcome | str,
                      duration_ms: int | None) -> tuple[Outcome, int]:
        outcome = Outcome(outcome)
        if permit.reported:
            raise ValueError(f'permit for circuit "{self.name}" was already reported')
        permit.reported = True
        if duration_ms is None:
            duration_ms = max(0, int((time.monotonic() - permit.started) * 1000))
        return outcome, duration_ms

    def _report_cached(self, permit: Permit, outcome: Outcome, duration_ms: int,
                       may_sync: bool = True) -> bool | object:
        """A cached permit's outcome as a noreply line on the watch
        connection (a failure written at once); False: report it uncached;
        _SYNC: it could trip the circuit, send it with a reply awaited
        (send_sync). Every outcome of a cached breaker, whatever its path,
        is counted against the circuit's rule."""
        c, entry = self._cache, self._entry
        could_trip = entry is not None and self.cached and entry.own.count(
            outcome.value, duration_ms)
        if not permit.cached or c is None or not c.usable():
            return False
        if could_trip and may_sync:
            return _SYNC
        if (outcome == SUCCESS and not could_trip and entry is not None
                and (slow := entry.fold_slow_ms) is not None
                and (slow < 0 or duration_ms < slow)
                and (self._fold_slow_ms is None or duration_ms < self._fold_slow_ms)
                and c.fold(self._lines[SUCCESS])):
            return True  # counted in its fold, sent with the next write
        line = self._lines[outcome] + b',"duration_ms":%d}\n' % duration_ms
        return c.send(line, outcome == FAILURE)

    def _record_args(self, permit: Permit, outcome: Outcome, duration_ms: int) -> dict:
        remote_token = None if permit.local else permit.token
        # An ignored call without a permit changes nothing but cbd's
        # totals.ignored: sent without waiting for the reply.
        noreply = outcome == IGNORE and remote_token is None
        # Until cbd's policy for the circuit is known (protocol 3 sends it
        # only when asked), the reply brings it for the LOCAL fallback.
        return dict(name=self.name, outcome=outcome.value, permit=remote_token,
                    duration_ms=duration_ms, ctx=self._call_ctx(), noreply=noreply,
                    policy=True if self._seen_policy is None and not noreply else None)

    def _report_uncached(self, permit: Permit, outcome: Outcome, duration_ms: int,
                         error: Any) -> None:
        args = self._record_args(permit, outcome, duration_ms)
        try:
            reply, err = self._remote("record", lambda: self.client.record(**args))
        except CbdError:
            return  # an answer such as bad_request: nothing to fall back to
        self._recorded(permit, outcome, duration_ms, error, args["ctx"], reply, err)

    async def _report_uncached_async(self, permit: Permit, outcome: Outcome, duration_ms: int,
                                     error: Any) -> None:
        args = self._record_args(permit, outcome, duration_ms)
        try:
            reply, err = await self._remote_async("record", lambda: self.client.record(**args))
        except CbdError:
            return
        self._recorded(permit, outcome, duration_ms, error, args["ctx"], reply, err)

    def _recorded(self, permit: Permit, outcome: Outcome, duration_ms: int, error: Any,
                  ctx: dict | None, reply: dict | None, err: CbdError | None) -> None:
        """report's bookkeeping from cbd's record reply, else the store
        policy's."""
        if reply is None and err is None and self.client is not None:
            return  # sent with noreply
        if reply is not None:
            if "snapshot" in reply:
                self._note_snapshot(reply["snapshot"])
                self._told_state(reply["snapshot"]["state"])
                if outcome != IGNORE:
                    self._observe(reply["snapshot"]["state"],
                                  error if outcome == FAILURE else None)
            return
        if self.client is not None and self.store_policy != LOCAL:
            return  # ALLOW and REJECT: nothing to keep
        now = self._ctx_now(ctx)
        self._degrade(now)
        snap = self._local.record(self.name, outcome.value, self._fallback_policy(), now,
                                  duration_ms, permit.token if permit.local else None)
        if outcome != IGNORE:
            self._observe(snap["state"], error if outcome == FAILURE else None, degraded=True)

    # -- the one-call form ----------------------------------------------
    def _classify(self, value: Any) -> Outcome:
        if self.classify is None:
            return FAILURE
        return classified(self.classify, value)

    def execute(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
                *, fallback: Callable[[CircuitOpenError], Any] | None = None) -> Any:
        """Run fn(*args, **kwargs) if the circuit permits; report its
        outcome and duration (the permit, a bulkhead ticket too, goes back
        whatever fn does). Refused: fallback(err) if one is given (here or
        on the breaker), else the RefusedError (CircuitOpenError,
        BulkheadFullError)."""
        fallback = fallback or self.fallback
        try:
            permit = self.acquire()
        except RefusedError as e:
            if fallback is None:
                raise
            return fallback(e)
        started = time.monotonic()
        try:
            result = fn(*args, **(kwargs or {}))
        except Exception as e:
            ms = int((time.monotonic() - started) * 1000)
            self.report(permit, self._classify(e), ms, error=e)
            raise
        except BaseException:
            # Cancelled (KeyboardInterrupt, SystemExit, ...): says nothing
            # about the dependency, but the permit goes back.
            ms = int((time.monotonic() - started) * 1000)
            self.report(permit, IGNORE, ms)
            raise
        ms = int((time.monotonic() - started) * 1000)
        outcome = self._classify(result) if self.classify_results else SUCCESS
        self.report(permit, outcome, ms, error=result if outcome == FAILURE else None)
        return result

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """execute(fn, args, kwargs) with the breaker's fallback."""
        return self.execute(fn, args, kwargs)

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The decorator form: ``@breaker`` protects every call of fn."""
        if inspect.iscoroutinefunction(fn):
            return AsyncBreaker(self)(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return self.execute(fn, args, kwargs)

        wrapper.breaker = self  # type: ignore[attr-defined]
        return wrapper

    protect = __call__

    # -- reading and forcing ---------------------------------------------
    # -- checking without a call -------------------------------------------
    def _check_cached(self) -> bool:
        """The cache's answer to check(): True when it decided (raises
        CircuitOpenError when it refuses); False: ask cbd."""
        c, entry = self._cache, self._entry
        if entry is None or not self._primed or c is None or not c.usable():
            return False
        verdict, left, _, _ = c.decide(entry, self._seen_seq, self._told)
        if verdict == cache.REFUSE:
            raise CircuitOpenError(self.name, OPEN, left,
                                   "held" if entry.hold_state == OPEN else "open")
        return verdict == cache.PERMIT

    def _check_reply(self, reply: dict | None, ctx: dict | None) -> None:
        """check()'s verdict from cbd's get reply, else (cbd unavailable)
        from the local copy when the breaker fell back to one."""
        if reply is not None:
            snap = reply["snapshot"]
            hold = snap.get("hold")
            left = int(snap.get("retry_after_ms") or 0)
            if (hold and hold.get("state") == OPEN) or (snap["state"] == OPEN and left > 0):
                raise CircuitOpenError(self.name, OPEN, max(1, left))
            return
        if self._degraded and (self.client is None or self.store_policy == LOCAL):
            snap = self._local.get(self.name, self._fallback_policy(), self._ctx_now(ctx))
            if snap["state"] == OPEN and snap.get("retry_after_ms", 0) > 0:
                raise CircuitOpenError(self.name, OPEN, snap["retry_after_ms"])

    def check(self) -> None:
        """Raise CircuitOpenError when a call now would be refused (open,
        break not elapsed; held open), without taking a permit or
        reporting anything (the middleware's guard). Cached: the watch
        cache answers; else cbd (get); cbd unavailable: the local copy
        after a fallback, else nothing is refused."""
        if self._check_cached():
            return
        ctx = self._call_ctx()
        try:
            reply, _ = self._remote("get", lambda: self.client.get(self.name, ctx))
        except CbdError:
            return  # an answer such as forbidden: not a refusal
        self._check_reply(reply, ctx)

    def refresh(self) -> str:
        """Read the circuit from cbd (or the local copy) and fire
        on_state_change for changes other processes made."""
        ctx = self._call_ctx()
        reply, err = self._remote("get", lambda: self.client.get(self.name, ctx))
        if reply is not None:
            self._note_snapshot(reply["snapshot"])
            state = reply["snapshot"]["state"]
            self._observe(state)
            return state
        if self.client is not None and self.store_policy == REJECT:
            raise err
        if self.client is not None and self.store_policy == ALLOW:
            return CLOSED
        now = self._ctx_now(ctx)
        if self._degraded:
            state = self._local.get(self.name, self._fallback_policy(), now)["state"]
        else:
            with self._lock:
                state = self._seen.state
        self._observe(state, degraded=True)
        return state

    def _force(self, state: str) -> str:
        ctx = self._call_ctx()
        if self.client is None:
            snap = self._local.set_state(self.name, state, self.policy, self._ctx_now(ctx))
        else:
            snap = self.client.set_state(self.name, state, ctx=ctx)["snapshot"]
            self._note_snapshot(snap)
        self._observe(snap["state"])
        return snap["state"]

    def force_open(self) -> str:
        return self._force(OPEN)

    def force_close(self) -> str:
        return self._force(CLOSED)

    def force_half_open(self) -> str:
        return self._force(HALF_OPEN)


def circuit_breaker(name: str, **options: Any) -> Callable[[Callable], Callable]:
    """Decorator factory: ``@circuit_breaker("payments", fallback=...)``."""
    return Breaker(name, **options)


class AsyncBreaker:
    """A Breaker for coroutine functions: ``await ab.call(fetch, url)``.
    Cached decisions and noreply outcomes are taken on the event loop
    (they never block); the uncached path awaits the breaker's
    AsyncClient, or, on a thread Client, runs in asyncio's default thread
    pool (a few hundred microseconds, bounded by the client's io_timeout),
    so the event loop never blocks on cbd. The protected coroutine runs on
    the loop. A cancelled call hands its permit back (outcome ignore)."""

    def __init__(self, breaker: Breaker) -> None:
        self.breaker = breaker
        self._handing_back: set[asyncio.Task] = set()  # cancelled calls' reports

    async def acquire(self, retry: bool = False) -> Permit:
        """Breaker.acquire without blocking the event loop. Cancelled
        while cbd answers: a ticket or slot granted meanwhile is handed
        back at once."""
        b = self.breaker
        if b._async and b.cached:
            loop = asyncio.get_running_loop()
            c = b._cache
            if c is None or c.loop is not loop or not c.usable():
                b._join_cache(loop)  # the cache this loop owns
        permit = None if retry else b._acquire_cached()
        if permit is not None:
            return permit
        return await b._acquire_uncached_async(retry)

    async def check(self) -> None:
        """Breaker.check without blocking the event loop."""
        b = self.breaker
        if b._async and b.cached:
            loop = asyncio.get_running_loop()
            c = b._cache
            if c is None or c.loop is not loop or not c.usable():
                b._join_cache(loop)
        if b._check_cached():
            return
        if not b._async:
            return await asyncio.to_thread(b.check)
        ctx = b._call_ctx()
        try:
            reply, _ = await b._remote_async("get", lambda: b.client.get(b.name, ctx))
        except CbdError:
            return
        b._check_reply(reply, ctx)

    async def report(self, permit: Permit, outcome: Outcome | str,
                     duration_ms: int | None = None, error: Any = None) -> None:
        """Breaker.report without blocking the event loop."""
        b = self.breaker
        outcome, duration_ms = b._report_begin(permit, outcome, duration_ms)
        route = b._report_cached(permit, outcome, duration_ms)
        if route is _SYNC:
            line = b._sync_line(outcome, duration_ms)
            if isinstance(b._cache, cache.LoopWatchCache):
                snap, sent = await b._cache.send_sync_async(line)
            else:
                snap, sent = await asyncio.to_thread(b._cache.send_sync, line)
            if sent:
                b._synced(snap, outcome, error)
                return
        elif route:
            return
        if b._async:
            await b._report_uncached_async(permit, outcome, duration_ms, error)
        else:
            await asyncio.to_thread(b._report_uncached, permit, outcome, duration_ms, error)

    def _report_cancelled(self, permit: Permit, ms: int) -> None:
        """Hand a cancelled call's permit back: no await may run now."""
        b = self.breaker
        outcome, ms = b._report_begin(permit, IGNORE, ms)
        if b._report_cached(permit, outcome, ms, may_sync=False):
            return
        if b._async:
            # Sent by a task of its own (a slot is released with it).
            task = asyncio.get_running_loop().create_task(
                b._report_uncached_async(permit, outcome, ms, None))
            self._handing_back.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._handing_back.discard)
        else:
            b._report_uncached(permit, outcome, ms, None)

    async def execute(self, fn: Callable[..., Any], args: tuple = (),
                      kwargs: dict | None = None, *,
                      fallback: Callable[[CircuitOpenError], Any] | None = None) -> Any:
        b = self.breaker
        fallback = fallback or b.fallback
        try:
            permit = await self.acquire()
        except RefusedError as e:
            if fallback is None:
                raise
            return fallback(e)
        started = time.monotonic()
        try:
            result = await fn(*args, **(kwargs or {}))
        except Exception as e:
            ms = int((time.monotonic() - started) * 1000)
            await self.report(permit, b._classify(e), ms, e)
            raise
        except BaseException:
            ms = int((time.monotonic() - started) * 1000)
            self._report_cancelled(permit, ms)
            raise
        ms = int((time.monotonic() - started) * 1000)
        outcome = b._classify(result) if b.classify_results else SUCCESS
        await self.report(permit, outcome, ms, result if outcome == FAILURE else None)
        return result

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.execute(fn, args, kwargs)

    def close(self) -> None:
        self.breaker.close()

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The decorator form for ``async def`` functions."""
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            return await self.execute(fn, args, kwargs)

        wrapper.breaker = self  # type: ignore[attr-defined]
        return wrapper


__all__ = ["Breaker", "AsyncBreaker", "Permit", "StorePolicy", "LOCAL", "ALLOW", "REJECT",
           "DEFAULT_TIMEOUT_BACKOFF_MS", "WAIT_MS_MAX", "circuit_breaker", "ServerError"]
