# SPDX-License-Identifier: Apache-2.0
"""Retries, backoff and timeouts in virtual time (an injected clock, sleep
and random source): exponential backoff with full jitter, retry_on, hooks,
per-attempt timeouts; the breaker asked before every attempt, every
attempt reported, and an open circuit ending the retries at once."""

import asyncio
import random

import pytest

from cbdclient import (AttemptTimeoutError, Breaker, CircuitOpenError, Hooks, Retry,
                       with_retries)


class VirtualTime:
    """A monotonic clock in seconds; sleep advances it."""

    def __init__(self):
        self.t = 1000.0
        self.sleeps = []

    def clock(self):
        return self.t

    def sleep(self, seconds):
        self.sleeps.append(round(seconds * 1000))
        self.t += seconds

    def ms(self):
        return int(self.t * 1000)


class Flaky:
    """Fails the first `failures` calls (taking `took` virtual seconds)."""

    def __init__(self, vt, failures, exc=ConnectionError, took=0.0):
        self.vt, self.left, self.exc, self.took, self.calls = vt, failures, exc, took, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.kwargs = kwargs
        self.vt.t += self.took
        if self.left > 0:
            self.left -= 1
            raise self.exc("flaky")
        return "ok"


def retry(vt, **kw):
    return Retry(clock=vt.clock, sleep=vt.sleep, **kw)


def test_exponential_backoff_capped_without_jitter():
    vt = VirtualTime()
    r = retry(vt, attempts=6, base_ms=100, max_ms=1000, jitter=False)
    fn = Flaky(vt, 5)
    assert r.call(fn) == "ok"
    assert fn.calls == 6
    assert vt.sleeps == [100, 200, 400, 800, 1000]


def test_full_jitter_draws_below_the_bound():
    vt = VirtualTime()
    r = retry(vt, attempts=8, base_ms=100, max_ms=2000, rng=random.Random(7))
    assert r.call(Flaky(vt, 7)) == "ok"
    bounds = [100, 200, 400, 800, 1600, 2000, 2000]
    assert all(0 <= s <= b for s, b in zip(vt.sleeps, bounds)), vt.sleeps
    assert len(set(vt.sleeps)) > 1  # jittered, not the bounds themselves
    # Seeded: the same draws again.
    vt2 = VirtualTime()
    retry(vt2, attempts=8, base_ms=100, max_ms=2000, rng=random.Random(7)).call(Flaky(vt2, 7))
    assert vt2.sleeps == vt.sleeps


def test_gives_up_with_the_last_error_and_hooks():
    vt = VirtualTime()
    seen = []
    r = retry(vt, attempts=3, base_ms=10, jitter=False,
              on_retry=lambda n, e, d: seen.append(("retry", n, d)),
              on_failure=lambda n, e: seen.append(("failure", n)))
    with pytest.raises(ConnectionError):
        r.call(Flaky(vt, 10))
    assert seen == [("failure", 1), ("retry", 1, 10), ("failure", 2), ("retry", 2, 20),
                    ("failure", 3)]


def test_retry_on_decides():
    vt = VirtualTime()
    r = retry(vt, attempts=5, retry_on=lambda e: not isinstance(e, ValueError))
    fn = Flaky(vt, 3, exc=ValueError)
    with pytest.raises(ValueError):
        r.call(fn)
    assert fn.calls == 1 and vt.sleeps == []


def test_retry_on_result():
    vt = VirtualTime()
    answers = iter([503, 503, 200])
    r = retry(vt, attempts=5, base_ms=1, jitter=False, retry_on_result=lambda s: s >= 500)
    assert r.call(lambda: next(answers)) == 200
    assert vt.sleeps == [1, 2]


def test_per_attempt_timeout_sync():
    vt = VirtualTime()
    timeouts = []
    r = retry(vt, attempts=3, base_ms=10, jitter=False, attempt_timeout_ms=500,
              timeout_kwarg="timeout", on_timeout=timeouts.append)
    fn = Flaky(vt, 0, took=0.6)  # answers, but past its deadline
    with pytest.raises(AttemptTimeoutError):
        r.call(fn)
    assert fn.calls == 3 and timeouts == [1, 2, 3]
    assert fn.kwargs == {"timeout": 0.5}  # the attempt learns its deadline
    # An attempt that raises TimeoutError itself is a timeout too.
    timeouts.clear()
    r.call(Flaky(vt, 1, exc=TimeoutError))
    assert timeouts == [1]


def test_breaker_asked_before_every_attempt_and_open_ends_retries(own_cbd):
    from cbdclient import Client
    vt = VirtualTime()
    client = Client(own_cbd.socket, io_timeout=2.0)
    b = Breaker("retried", client, clock=vt.ms, failure_threshold=2, break_ms=60000)
    opened = []
    r = retry(vt, breaker=b, attempts=10, base_ms=100, jitter=False,
              on_circuit_open=opened.append)
    fn = Flaky(vt, 100)
    with pytest.raises(CircuitOpenError) as e:
        r.call(fn)
    # Two attempts failed and opened the circuit; the third was refused,
    # which ended the retries without sleeping again.
    assert fn.calls == 2 and vt.sleeps == [100, 200]
    # Hooked twice: the circuit opened (cbd's break), then it refused.
    assert opened == [60000, e.value.retry_after_ms] and e.value.retry_after_ms > 0
    snap = client.get("retried", {"now": vt.ms()})["snapshot"]
    assert snap["totals"]["failures"] == 2 and snap["totals"]["rejected"] == 1
    # A fallback answers instead of the error.
    r.fallback = lambda err: "fallback"
    assert r.call(fn) == "fallback" and fn.calls == 2
    client.close()


def test_every_attempt_reported_and_half_open_hooks():
    vt = VirtualTime()
    events = []
    b = Breaker.private("r", clock=vt.ms, failure_threshold=1, break_ms=1000,
                        success_threshold=1)
    hooks = Hooks(on_circuit_open=lambda ms: events.append("open"),
                  on_circuit_half_open=lambda: events.append("half_open"),
                  on_circuit_closed=lambda: events.append("closed"))
    r = retry(vt, breaker=b, attempts=3, base_ms=1000, jitter=False, hooks=hooks)
    # Attempt 1 fails and opens; the backoff (1 s) outlasts the break, so
    # attempt 2 is a trial that succeeds and closes.
    assert r.call(Flaky(vt, 1)) == "ok"
    assert events == ["open", "half_open", "closed"]


def test_async_attempt_cancelled_at_its_deadline():
    vt = VirtualTime()
    calls = []

    async def slow_then_fast():
        calls.append(1)
        if len(calls) == 1:
            await asyncio.sleep(30)  # cancelled by the per-attempt timeout
        return "fast"

    async def vsleep(seconds):
        vt.sleep(seconds)

    timeouts = []
    r = Retry(attempts=2, base_ms=5, jitter=False, attempt_timeout_ms=20, clock=vt.clock,
              sleep=vsleep, on_timeout=timeouts.append)
    assert asyncio.run(asyncio.wait_for(r.call_async(slow_then_fast), 10)) == "fast"
    assert timeouts == [1] and vt.sleeps == [5]


def test_decorator():
    vt = VirtualTime()
    fn = Flaky(vt, 2)

    @with_retries(attempts=3, clock=vt.clock, sleep=vt.sleep, base_ms=1, jitter=False)
    def fetch():
        return fn()

    assert fetch() == "ok" and fn.calls == 3
