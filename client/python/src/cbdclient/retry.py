# SPDX-License-Identifier: Apache-2.0
"""retry.py — retries, backoff and timeouts around a breaker (issue 13's
"Retries, backoff and timeouts"): a per-attempt timeout, retries with
exponential backoff (base, max, full jitter), retry_on, hooks. The breaker
is asked before every attempt and every attempt's outcome is reported to
it (a bulkhead ticket goes back with it, whatever the attempt did); the
attempts after the first are marked retries (allow's ``"retry": true``,
counted against the circuit's retry budget), and any refusal — an open
circuit, a full bulkhead, a spent retry budget (RetryBudgetError) — ends
the retries at once.

The clock, the sleep and the random source are injectable, so the tests run
in virtual time. No threads are spawned for attempts: a synchronous attempt
learns its deadline (``timeout_kwarg``: e.g. ``timeout`` for urllib's
urlopen), and one that raises TimeoutError or returns past its deadline is
a timeout; the asyncio form cancels an attempt at its deadline
(asyncio.wait_for).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from .breaker import Breaker, Permit
from .classify import FAILURE, IGNORE, SUCCESS
from .errors import CircuitOpenError, RefusedError
from .machine import CLOSED, HALF_OPEN, OPEN

# Defaults of the backoff (ms) and of the number of attempts.
DEFAULT_ATTEMPTS = 3
DEFAULT_BASE_MS = 100
DEFAULT_MAX_MS = 10_000


class AttemptTimeoutError(TimeoutError):
    """An attempt ran past its per-attempt timeout."""


def _default_retry_on(err: BaseException) -> bool:
    return isinstance(err, Exception)


@dataclass
class Hooks:
    """Called during a run (all optional): on_retry(attempt, error,
    delay_ms) before sleeping; on_timeout(attempt) when an attempt timed
    out; on_failure(attempt, error) for every failed attempt;
    on_circuit_open(retry_after_ms) when the circuit opened during the run
    or refused an attempt (the retries then end);
    on_circuit_half_open() / on_circuit_closed() when the breaker was seen
    moving to that state during the run."""

    on_retry: Callable[[int, BaseException, int], None] | None = None
    on_timeout: Callable[[int], None] | None = None
    on_failure: Callable[[int, BaseException], None] | None = None
    on_circuit_open: Callable[[int], None] | None = None
    on_circuit_half_open: Callable[[], None] | None = None
    on_circuit_closed: Callable[[], None] | None = None


class Retry:
    """Run a call with retries: ``Retry(breaker=b, attempts=4).call(fn, x)``.

    attempts: most attempts in all (1: no retry); base_ms, max_ms: the
    backoff before retry n is drawn from [0, min(max_ms, base_ms * 2**(n-1))]
    (full jitter; ``jitter=False``: exactly that bound); attempt_timeout_ms:
    the per-attempt timeout; retry_on(error) -> bool (default: any
    Exception; a RefusedError never); retry_on_result(value) -> bool
    (retry a returned value, such as an HTTP 503 response); clock (seconds,
    monotonic), sleep(seconds), rng (random.Random) for virtual time.
    """

    def __init__(self, breaker: Breaker | None = None, *, attempts: int = DEFAULT_ATTEMPTS,
                 base_ms: int = DEFAULT_BASE_MS, max_ms: int = DEFAULT_MAX_MS,
                 jitter: bool = True, attempt_timeout_ms: int | None = None,
                 timeout_kwarg: str | None = None,
                 retry_on: Callable[[BaseException], bool] = _default_retry_on,
                 retry_on_result: Callable[[Any], bool] | None = None,
                 hooks: Hooks | None = None, fallback: Callable[[RefusedError], Any]
                 | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] | None = None,
                 rng: random.Random | None = None, **hook_kwargs: Any) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        if base_ms < 0 or max_ms < base_ms:
            raise ValueError("base_ms must be >= 0 and max_ms >= base_ms")
        if attempt_timeout_ms is not None and attempt_timeout_ms <= 0:
            raise ValueError("attempt_timeout_ms must be positive")
        self.breaker = breaker
        self.attempts = attempts
        self.base_ms = base_ms
        self.max_ms = max_ms
        self.jitter = jitter
        self.attempt_timeout_ms = attempt_timeout_ms
        self.timeout_kwarg = timeout_kwarg
        self.retry_on = retry_on
        self.retry_on_result = retry_on_result
        self.hooks = hooks or Hooks(**hook_kwargs)
        self.fallback = fallback
        self.clock = clock
        self.sleep = sleep
        self.rng = rng or random.Random()

    def delay_ms(self, retry: int) -> int:
        """The backoff before retry number ``retry`` (1, 2, ...)."""
        cap = min(self.max_ms, self.base_ms * (2 ** min(retry - 1, 62)))
        return int(self.rng.uniform(0, cap)) if self.jitter else cap

    # -- what both forms share -------------------------------------------
    def _hook(self, name: str, *args: Any) -> None:
        fn = getattr(self.hooks, name)
        if fn is not None:
            fn(*args)

    def _state_hooks(self, before: str, after: str) -> None:
        if before == after:
            return
        if after == HALF_OPEN:
            self._hook("on_circuit_half_open")
        elif after == CLOSED:
            self._hook("on_circuit_closed")

    def _acquire(self, retry: bool = False) -> Permit | None:
        if self.breaker is None:
            return None
        before = self.breaker.state
        try:
            permit = self.breaker.acquire(retry=retry)
        except CircuitOpenError as e:
            self._state_hooks(before, self.breaker.state)
            self._hook("on_circuit_open", e.retry_after_ms)
            raise
        except RefusedError:
            self._state_hooks(before, self.breaker.state)
            raise
        self._state_hooks(before, self.breaker.state)
        return permit

    def _report(self, permit: Permit | None, outcome, ms: int, error: Any) -> None:
        if permit is None:
            return
        before = self.breaker.state
        self.breaker.report(permit, outcome, ms, error=error)
        after = self.breaker.state
        if before != after and after == OPEN:
            self._hook("on_circuit_open", self.breaker.break_ms())
        else:
            self._state_hooks(before, after)

    def _outcome_of_error(self, err: BaseException):
        if self.breaker is None:
            return FAILURE
        return self.breaker._classify(err) if isinstance(err, Exception) else IGNORE

    def _outcome_of_result(self, result: Any):
        if self.breaker is None or not self.breaker.classify_results:
            return SUCCESS
        return self.breaker._classify(result)

    def _retry_or_raise(self, attempt: int, err: BaseException) -> int:
        """After a failed attempt: the delay (ms) before the next, or raise."""
        if isinstance(err, TimeoutError):
            self._hook("on_timeout", attempt)
        self._hook("on_failure", attempt, err)
        if attempt >= self.attempts or not isinstance(err, Exception) or not self.retry_on(err):
            raise err
        delay = self.delay_ms(attempt)
        self._hook("on_retry", attempt, err, delay)
        return delay

    def _timed_out(self, started: float) -> bool:
        return (self.attempt_timeout_ms is not None
                and (self.clock() - started) * 1000 >= self.attempt_timeout_ms)

    # -- the synchronous form ---------------------------------------------
    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) with retries; its result, or the last error
        (the RefusedError — CircuitOpenError, BulkheadFullError,
        RetryBudgetError — or the fallback's value, when the breaker
        refused an attempt)."""
        sleep = self.sleep or time.sleep
        for attempt in range(1, self.attempts + 1):
            try:
                permit = self._acquire(attempt > 1)
            except RefusedError as e:
                if self.fallback is not None:
                    return self.fallback(e)
                raise
            started = self.clock()
            call_kwargs = dict(kwargs)
            if self.timeout_kwarg and self.attempt_timeout_ms is not None:
                call_kwargs[self.timeout_kwarg] = self.attempt_timeout_ms / 1000
            try:
                result = fn(*args, **call_kwargs)
            except BaseException as e:
                ms = int((self.clock() - started) * 1000)
                self._report(permit, self._outcome_of_error(e), ms, e)
                delay = self._retry_or_raise(attempt, e)
                sleep(delay / 1000)
                continue
            ms = int((self.clock() - started) * 1000)
            if self._timed_out(started):
                # Past its deadline: the attempt failed, its result is late.
                err = AttemptTimeoutError(f"attempt {attempt} took {ms} ms, past its timeout "
                                          f"of {self.attempt_timeout_ms} ms")
                self._report(permit, FAILURE, ms, err)
                delay = self._retry_or_raise(attempt, err)
                sleep(delay / 1000)
                continue
            outcome = self._outcome_of_result(result)
            self._report(permit, outcome, ms, result if outcome == FAILURE else None)
            if (self.retry_on_result is not None and self.retry_on_result(result)
                    and attempt < self.attempts):
                err = RetryableResult(result)
                self._hook("on_failure", attempt, err)
                delay = self.delay_ms(attempt)
                self._hook("on_retry", attempt, err, delay)
                sleep(delay / 1000)
                continue
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the asyncio form ---------------------------------------------------
    async def _acquire_async(self, io: Callable[..., Any], retry: bool) -> Permit | None:
        """_acquire off the event loop; cancelled meanwhile, a permit the
        breaker was granted goes back at once (outcome ignore)."""
        if io is _run_here:
            return self._acquire(retry)
        fut = asyncio.get_running_loop().run_in_executor(None, self._acquire, retry)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(self._hand_back_late)
            raise

    def _hand_back_late(self, fut: "asyncio.Future") -> None:
        if fut.cancelled() or fut.exception() is not None or fut.result() is None:
            return
        asyncio.get_running_loop().run_in_executor(
            None, self.breaker.report, fut.result(), IGNORE)

    async def call_async(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """await fn(*args, **kwargs) with retries; each attempt is
        cancelled at its deadline (AttemptTimeoutError)."""
        sleep = self.sleep or asyncio.sleep
        # The breaker's requests to cbd leave the event loop free.
        io = (asyncio.to_thread if self.breaker is not None and self.breaker.client is not None
              else _run_here)
        for attempt in range(1, self.attempts + 1):
            try:
                permit = await self._acquire_async(io, attempt > 1)
            except RefusedError as e:
                if self.fallback is not None:
                    return self.fallback(e)
                raise
            started = self.clock()
            try:
                coro = fn(*args, **kwargs)
                if self.attempt_timeout_ms is not None:
                    try:
                        result = await asyncio.wait_for(coro, self.attempt_timeout_ms / 1000)
                    except asyncio.TimeoutError:
                        raise AttemptTimeoutError(
                            f"attempt {attempt} timed out after "
                            f"{self.attempt_timeout_ms} ms") from None
                else:
                    result = await coro
            except BaseException as e:
                ms = int((self.clock() - started) * 1000)
                if isinstance(e, Exception):
                    await io(self._report, permit, self._outcome_of_error(e), ms, e)
                else:
                    self._report(permit, IGNORE, ms, e)  # cancelled: no await now
                delay = self._retry_or_raise(attempt, e)
                res = sleep(delay / 1000)
                if asyncio.iscoroutine(res):
                    await res
                continue
            ms = int((self.clock() - started) * 1000)
            outcome = self._outcome_of_result(result)
            await io(self._report, permit, outcome, ms, result if outcome == FAILURE else None)
            if (self.retry_on_result is not None and self.retry_on_result(result)
                    and attempt < self.attempts):
                err = RetryableResult(result)
                self._hook("on_failure", attempt, err)
                delay = self.delay_ms(attempt)
                self._hook("on_retry", attempt, err, delay)
                res = sleep(delay / 1000)
                if asyncio.iscoroutine(res):
                    await res
                continue
            return result
        raise AssertionError("unreachable")  # pragma: no cover


async def _run_here(fn: Callable[..., Any], *args: Any) -> Any:
    """Run fn on the loop (no I/O to leave it for)."""
    return fn(*args)


class RetryableResult(Exception):
    """Passed to hooks when retry_on_result asked for a retry."""

    def __init__(self, result: Any) -> None:
        super().__init__(f"retrying after result {result!r}")
        self.result = result


def with_retries(fn: Callable[..., Any] | None = None, **options: Any):
    """Decorator: ``@with_retries(breaker=b, attempts=3)``."""
    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        retry = Retry(**options)
        if inspect.iscoroutinefunction(f):
            @functools.wraps(f)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                return await retry.call_async(f, *args, **kwargs)
            return awrapper

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return retry.call(f, *args, **kwargs)
        return wrapper

    return wrap(fn) if fn is not None else wrap
