# SPDX-License-Identifier: Apache-2.0
"""The breaker against a real cbd: tripping and CircuitOpenError with
retry_after_ms, fallback, half-open permits reserved and always handed
back, classification (never asked about a success), state-change
callbacks, duration_ms, the decorator, virtual time."""

import threading

import pytest

from conftest import wait_until

from cbdclient import (FAILURE, IGNORE, SUCCESS, Breaker, CircuitOpenError, Client,
                       ServerError, circuit_breaker)


class VirtualClock:
    def __init__(self, now=1_700_000_000_000):
        self.now = now

    def __call__(self):
        return self.now


def boom():
    raise ConnectionError("dependency down")


def fail_n(b, n, exc=ConnectionError):
    for _ in range(n):
        with pytest.raises(exc):
            b.call(boom) if exc is ConnectionError else b.call(lambda: (_ for _ in ()).throw(exc()))


def test_trips_and_refuses_with_retry_after(client, name):
    clock = VirtualClock()
    b = Breaker(name, client, clock=clock, failure_threshold=3, break_ms=5000)
    assert b.call(lambda x: x * 2, 21) == 42
    fail_n(b, 3)
    assert b.state == "open"
    clock.now += 1000
    with pytest.raises(CircuitOpenError) as e:
        b.call(lambda: "never")
    assert e.value.retry_after_ms == 4000 and e.value.state == "open"
    assert e.value.code == "open"
    # cbd holds the truth: a second process sees it open too.
    other = Breaker(name, Client(client.socket_path), clock=clock)
    with pytest.raises(CircuitOpenError):
        other.call(lambda: "never")


def test_fallback_gets_the_refusal(client, name):
    b = Breaker(name, client, failure_threshold=1, break_ms=60000,
                fallback=lambda err: ("cached", err.retry_after_ms > 0))
    fail_n(b, 1)
    assert b.call(lambda: "live") == ("cached", True)
    assert b.execute(lambda: "live", fallback=lambda err: "per-call") == "per-call"


def test_half_open_permit_is_reserved_and_handed_back(client, name):
    clock = VirtualClock()
    b = Breaker(name, client, clock=clock, failure_threshold=1, break_ms=1000,
                success_threshold=2)
    other = Breaker(name, Client(client.socket_path, io_timeout=2.0), clock=clock)
    fail_n(b, 1)
    clock.now += 1000
    seen = []

    def trial():
        # While this trial runs, nobody else gets one (half_open_max 1).
        with pytest.raises(CircuitOpenError) as e:
            other.call(lambda: "second trial")
        seen.append(e.value.state)
        raise ConnectionError("trial failed")

    with pytest.raises(ConnectionError):
        b.call(trial)
    assert seen == ["half_open"]
    assert b.state == "open"
    # The permit went back even though the call raised: no slot is held.
    snap = client.get(name, {"now": clock.now})["snapshot"]
    assert snap["state"] == "open"
    clock.now += 1000
    assert b.call(lambda: "ok") == "ok"  # a trial, its slot returned
    assert other.call(lambda: "ok") == "ok"  # so the next trial runs
    assert b.refresh() == "closed"


def test_permit_handed_back_on_ignore_and_interrupt(client, name):
    clock = VirtualClock()
    b = Breaker(name, client, clock=clock, failure_threshold=1, break_ms=1000,
                classify=lambda e: IGNORE)
    client.set_state(name, "half_open", ctx={"now": clock.now})
    with pytest.raises(ConnectionError):
        b.call(boom)  # ignored: the trial counts neither way
    with pytest.raises(KeyboardInterrupt):
        b.call(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert client.stats()["slots"] == 0 or client.acquire_slot(name)["acquired"]
    snap = client.get(name)["snapshot"]
    assert snap["state"] == "half_open" and snap["totals"]["ignored"] == 2


def test_two_step_form(client, name):
    b = Breaker(name, client, failure_threshold=2)
    p = b.acquire()
    b.report(p, FAILURE, duration_ms=7)
    with pytest.raises(ValueError):
        b.report(p, SUCCESS)
    assert client.get(name)["snapshot"]["failure_count"] == 1


def test_classifier_three_ways_never_asked_about_success(client, name):
    asked = []

    def classify(value):
        asked.append(value)
        if isinstance(value, KeyError):
            return SUCCESS  # a business error: the dependency answered
        if isinstance(value, ValueError):
            return IGNORE
        if isinstance(value, LookupError):
            return "nonsense"  # out of range: a failure
        return FAILURE

    b = Breaker(name, client, classify=classify, failure_threshold=100)
    assert b.call(lambda: "fine") == "fine"
    assert asked == []  # a success is never classified
    for exc in (KeyError, ValueError, IndexError, OSError):
        with pytest.raises(exc):
            b.call(lambda: (_ for _ in ()).throw(exc("x")))
    assert [type(v) for v in asked] == [KeyError, ValueError, IndexError, OSError]

    def totals():  # cached outcomes land without a reply: wait for them
        t = client.get(name)["snapshot"]["totals"]
        return (t["successes"], t["ignored"], t["failures"])
    wait_until(lambda: totals() == (2, 1, 2))


def test_classify_results_for_returned_answers(client, name):
    class Resp:
        def __init__(self, status):
            self.status = status

    from cbdclient import classify_http
    # Uncached: the state is read back at once (cached, a trip is seen
    # when its event arrives).
    b = Breaker(name, client, classify=classify_http, classify_results=True,
                failure_threshold=2, cached=False)
    assert b.call(lambda: Resp(404)).status == 404  # the caller's business
    b.call(lambda: Resp(503))
    b.call(lambda: Resp(429))
    assert b.state == "open"


def test_state_change_callbacks(client, name):
    clock = VirtualClock()
    changes = []
    b = Breaker(name, client, clock=clock, failure_threshold=2, break_ms=1000,
                success_threshold=1,
                on_state_change=lambda prev, new, err: changes.append((prev, new, type(err))))
    fail_n(b, 2)
    clock.now += 1000
    b.call(lambda: "ok")
    assert changes == [("closed", "open", ConnectionError), ("open", "half_open", type(None)),
                       ("half_open", "closed", type(None))]
    # Changes made elsewhere show up on refresh.
    client.set_state(name, "open", ctx={"now": clock.now})
    assert b.refresh() == "open" and changes[-1][:2] == ("closed", "open")


def test_duration_reaches_the_slow_call_rule(client, name):
    import time
    b = Breaker(name, client, trip="rate", window_size=10, minimum_calls=2,
                slow_call_ms=20, slow_call_rate=100)
    b.call(time.sleep, 0.03)
    b.call(time.sleep, 0.03)
    wait_until(lambda: client.get(name)["snapshot"]["totals"]["slow"] == 2)
    assert client.get(name)["snapshot"]["state"] == "open"


def test_decorators(client, name):
    b = Breaker(name, client, failure_threshold=1, fallback=lambda e: "fallback",
                cached=False)

    @b
    def fetch(x, y=1):
        if x < 0:
            raise ConnectionError("down")
        return x + y

    assert fetch(1, y=2) == 3 and fetch.breaker is b
    with pytest.raises(ConnectionError):
        fetch(-1)
    assert fetch(1) == "fallback"

    @circuit_breaker(name + "-2", client=client)
    def ok():
        return "ok"

    assert ok() == "ok"


def test_refusals_that_are_answers_are_raised(client, name):
    b = Breaker(name, client, break_ms=0)  # out of range: cbd says bad_request
    with pytest.raises(ServerError) as e:
        b.call(lambda: "x")
    assert e.value.code == "bad_request"
    with pytest.raises(TypeError):
        Breaker(name, client, no_such_option=1)


def test_threads_share_a_breaker(client, name):
    b = Breaker(name, client, failure_threshold=1000000)

    def work():
        for _ in range(50):
            with pytest.raises(ConnectionError):
                b.call(boom)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    wait_until(lambda: client.get(name)["snapshot"]["failure_count"] == 200)


def test_private_breaker_runs_in_process():
    clock = VirtualClock()
    b = Breaker.private("p", clock=clock, failure_threshold=2, break_ms=1000)
    fail_n(b, 2)
    with pytest.raises(CircuitOpenError) as e:
        b.call(lambda: 1)
    assert e.value.retry_after_ms == 1000
    clock.now += 1000
    assert b.call(lambda: 1) == 1 and b.state == "half_open"


def test_natural_classifier_never_sees_a_success(client, name):
    """A classifier written the natural way ("ignore KeyError, everything
    else is a failure") would turn successes into failures if it were asked
    about them: five successful calls are five successes, through the
    breaker and through Retry."""
    from cbdclient import Retry
    asked = []

    def natural(value):
        asked.append(value)
        return IGNORE if isinstance(value, KeyError) else FAILURE

    for n, via_retry in enumerate((False, True)):
        circuit = f"{name}-{n}"
        b = Breaker(circuit, client, classify=natural, failure_threshold=3, cached=False)
        r = Retry(attempts=1, breaker=b)
        for _ in range(5):
            assert (r.call(lambda: "ok") if via_retry else b.call(lambda: "ok")) == "ok"
        snap = client.get(circuit)["snapshot"]
        assert (snap["state"], snap["totals"]["successes"], snap["totals"]["failures"]) == (
            "closed", 5, 0)
    assert asked == []
