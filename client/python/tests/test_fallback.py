# SPDX-License-Identifier: Apache-2.0
"""The store policies when cbd is unreachable (PROTOCOL.md §11, libcbclient's
resilient store): cbd killed, and cbd SIGSTOPped (bounded latency: one
timeout per backoff window), then back."""

import time

import pytest

from cbdclient import (ALLOW, REJECT, Breaker, CircuitOpenError,
                       Client, UnavailableError)


def boom():
    raise ConnectionError("dependency down")


def fails(b, n):
    for _ in range(n):
        with pytest.raises(ConnectionError):
            b.call(boom)


def breaker(d, **kw):
    errors = []
    kw.setdefault("on_store_error", lambda err, op: errors.append((err.code, op)))
    # Uncached: these are the store policies of the uncached path (cached
    # breakers take it too once the watch connection is lost: test_cache).
    kw.setdefault("cached", False)
    b = Breaker("payments", Client(d.socket, io_timeout=0.2), **kw)
    return b, errors


def test_local_keeps_an_open_circuit_open(own_cbd):
    b, errors = breaker(own_cbd, failure_threshold=2, break_ms=60000)
    fails(b, 2)
    own_cbd.kill()
    with pytest.raises(CircuitOpenError) as e:
        b.call(lambda: "never")
    assert 0 < e.value.retry_after_ms <= 60000
    assert errors and errors[0] == ("unavailable", "allow")


def test_local_breaks_with_cbds_policy(own_cbd):
    # The policy cbd reported (threshold 3), not the one this process
    # declares, runs the local copy; the chain goes on from cbd's count.
    Client(own_cbd.socket).record_failure("payments", ctx={"failure_threshold": 3})
    b, errors = breaker(own_cbd, failure_threshold=50, break_ms=1000)
    fails(b, 1)  # failure_count 2 at cbd, its snapshot remembered
    own_cbd.kill()
    assert b.call(lambda: "still closed") == "still closed"  # resets the count
    fails(b, 2)
    assert b.state == "closed"
    fails(b, 1)
    assert b.state == "open"
    with pytest.raises(CircuitOpenError):
        b.call(lambda: "never")


def test_local_rate_rule_in_process(own_cbd):
    b, _ = breaker(own_cbd, trip="rate", window_size=4, minimum_calls=4, failure_rate=50)
    b.call(lambda: 1)
    own_cbd.kill()
    b.call(lambda: 1)
    b.call(lambda: 1)
    fails(b, 1)
    assert b.state == "closed"  # 1 of 4: the window starts empty locally
    fails(b, 1)
    assert b.state == "open"  # 2 of 4 = 50 %


def test_local_held_open_stays_open(own_cbd):
    Client(own_cbd.socket).set_state("payments", "open", hold=True, reason="maintenance")
    b, _ = breaker(own_cbd, break_ms=1)
    b.refresh()
    own_cbd.kill()
    with pytest.raises(CircuitOpenError):
        b.call(lambda: "never")


def test_allow_runs_calls_as_if_closed(own_cbd):
    b, errors = breaker(own_cbd, store_policy=ALLOW, failure_threshold=1)
    own_cbd.kill()
    fails(b, 3)
    assert b.call(lambda: "runs") == "runs"
    assert ("unavailable", "allow") in errors


def test_reject_raises_without_running(own_cbd):
    b, _ = breaker(own_cbd, store_policy=REJECT)
    own_cbd.kill()
    ran = []
    with pytest.raises(UnavailableError):
        b.call(lambda: ran.append(1))
    assert ran == []


def test_back_to_cbd_without_latching(own_cbd):
    b, _ = breaker(own_cbd, failure_threshold=1, break_ms=60000)
    own_cbd.kill()
    fails(b, 1)
    assert b.state == "open"  # the local copy opened
    own_cbd.start()
    # cbd answers again and is authoritative: it never saw those failures.
    assert b.call(lambda: "ok") == "ok"
    assert b.state == "closed"


class CountingClient(Client):
    """Counts the requests that reach the wire."""

    sent = 0

    def request(self, op, **members):
        self.sent += 1
        return super().request(op, **members)


def test_stopped_cbd_costs_one_timeout_per_backoff_window(own_cbd):
    errors = []
    c = CountingClient(own_cbd.socket, io_timeout=0.2)
    b = Breaker("payments", c, failure_threshold=3, timeout_backoff_ms=60000,
                on_store_error=lambda err, op: errors.append(err.code), cached=False)
    b.call(lambda: 1)
    sent = c.sent
    own_cbd.pause()
    latencies = []
    try:
        for _ in range(20):
            t = time.monotonic()
            b.call(lambda: 1)
            latencies.append(time.monotonic() - t)
        fails(b, 3)
        with pytest.raises(CircuitOpenError):
            b.call(lambda: "never")  # the local copy broke
    finally:
        own_cbd.resume()
    # Exactly one request waited for the stopped cbd; every later one
    # skipped it (but still told on_store_error).
    assert c.sent - sent == 1
    assert errors == ["timeout"] * 47
    print(f"\nstopped cbd: first call {latencies[0] * 1000:.1f} ms (io_timeout 200 ms), "
          f"later calls max {max(latencies[1:]) * 1000:.3f} ms")
    # A bound on the wait (not a speed figure): nothing waited far past io_timeout.
    assert max(latencies) < 0.2 + 5.0


def test_backoff_ends_and_cbd_is_asked_again(own_cbd):
    c = CountingClient(own_cbd.socket, io_timeout=0.1)
    b = Breaker("payments", c, timeout_backoff_ms=50, cached=False)
    own_cbd.pause()
    try:
        b.call(lambda: 1)
        b.call(lambda: 1)
        assert c.sent == 1
    finally:
        own_cbd.resume()
    # The running cbd may take longer than 100 ms on a loaded machine: the
    # short timeout was for the stopped one.
    c.io_timeout = 5.0
    time.sleep(0.1)  # past the backoff
    b.call(lambda: 1)
    assert c.sent == 3  # allow and record reached cbd again
    assert c.get("payments")["snapshot"]["totals"]["successes"] == 1
