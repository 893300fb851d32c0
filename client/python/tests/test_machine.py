# SPDX-License-Identifier: Apache-2.0
"""The state machine (machine.py) replays the sequences of the C unit tests
tests/check_breaker.c and tests/check_window.c, case by case."""

import random

import pytest

from cbdclient import machine as m
from cbdclient.machine import CLOSED, HALF_OPEN, OPEN, Policy, Snapshot

T0 = 1700000000000


def policy(**kw):
    p = dict(failure_threshold=3, success_threshold=2, break_ms=1000)
    p.update(kw)
    return Policy(**p)


def open_at(t):
    return Snapshot(state=OPEN, failure_count=3, last_failure_at=t, opened_at=t)


# -- check_breaker.c ----------------------------------------------------------
def test_defaults_match_spec():
    p = Policy()
    assert (p.failure_threshold, p.success_threshold, p.break_ms, p.half_open_max) == \
        (5, 2, 30000, 1)
    assert p.slot_ttl_ms == p.break_ms and p.max_gap_ms == 0
    assert p.trip == m.TRIP_CONSECUTIVE


def test_initial_snapshot():
    s = Snapshot()
    assert (s.state, s.failure_count, s.success_count, s.last_failure_at, s.opened_at) == \
        (CLOSED, 0, 0, None, None)
    assert s.is_initial()
    s.last_failure_at = 0
    assert not s.is_initial()


def test_closed_failures_trip_at_threshold():
    p, s = policy(), Snapshot()
    assert m.on_failure(s, p, 10) is None
    assert m.on_failure(s, p, 20) is None
    assert s.failure_count == 2 and s.last_failure_at == 20
    s.success_count = 7
    assert m.on_failure(s, p, 30) == m.REASON_FAILURE_THRESHOLD
    assert (s.state, s.opened_at, s.success_count, s.failure_count) == (OPEN, 30, 0, 3)


def test_threshold_one_trips_at_once():
    s = Snapshot()
    assert m.on_failure(s, policy(failure_threshold=1), 0) == m.REASON_FAILURE_THRESHOLD
    assert s.opened_at == 0


def test_closed_success_resets():
    p, s = policy(), Snapshot()
    m.on_failure(s, p, 10)
    assert m.on_success(s, p, 11) is None
    assert (s.failure_count, s.last_failure_at, s.state) == (0, 10, CLOSED)


def test_half_open_success_closes_at_threshold():
    p, s = policy(), open_at(100)
    m.force(s, HALF_OPEN, 1100)
    assert m.on_success(s, p, 1101) is None
    assert s.success_count == 1
    assert m.on_success(s, p, 1102) == m.REASON_TRIAL_SUCCEEDED
    assert (s.state, s.failure_count, s.success_count, s.opened_at, s.last_failure_at) == \
        (CLOSED, 0, 0, None, 100)


def test_half_open_failure_reopens():
    p, s = policy(), open_at(100)
    m.force(s, HALF_OPEN, 1100)
    m.on_success(s, p, 1101)
    assert m.on_failure(s, p, 1200) == m.REASON_TRIAL_FAILED
    assert (s.state, s.opened_at, s.last_failure_at, s.success_count) == (OPEN, 1200, 1200, 0)


def test_open_stragglers():
    p, s = policy(), open_at(100)
    assert m.on_success(s, p, 150) is None
    assert (s.state, s.failure_count, s.success_count) == (OPEN, 3, 0)
    assert m.on_failure(s, p, 900) is None
    assert (s.state, s.opened_at, s.last_failure_at, s.failure_count) == (OPEN, 100, 900, 3)


def test_chain_continues_rules():
    p, s = policy(max_gap_ms=100), Snapshot()
    assert m.chain_continues(s, p, 1000000)
    s.last_failure_at = 1000
    assert m.chain_continues(s, p, 1100)
    assert not m.chain_continues(s, p, 1101)
    p.max_gap_ms = 0
    assert m.chain_continues(s, p, 1 << 53)


def test_broken_chain_restarts_at_one():
    p, s = policy(max_gap_ms=100), Snapshot()
    m.on_failure(s, p, 0)
    m.on_failure(s, p, 100)
    assert s.failure_count == 2
    assert m.on_failure(s, p, 201) is None
    assert (s.failure_count, s.state) == (1, CLOSED)


def test_forced_states():
    s = open_at(100)
    s.success_count = 4
    m.force(s, HALF_OPEN, 200)
    assert (s.state, s.success_count, s.opened_at, s.failure_count) == (HALF_OPEN, 0, 100, 3)
    m.force(s, OPEN, 300)
    assert (s.opened_at, s.failure_count) == (300, 3)
    m.force(s, CLOSED, 400)
    assert (s.state, s.failure_count, s.success_count, s.opened_at, s.last_failure_at) == \
        (CLOSED, 0, 0, None, 100)


def test_break_elapsed_and_retry_after():
    p, s = policy(), open_at(1000)
    assert not m.break_elapsed(s, p, 1999)
    assert m.retry_after_ms(s, p, 1000) == 1000
    assert m.retry_after_ms(s, p, 1999) == 1
    assert m.break_elapsed(s, p, 2000)
    assert m.retry_after_ms(s, p, 2000) == 0
    assert m.retry_after_ms(s, p, 5000) == 0
    m.force(s, HALF_OPEN, 3000)
    assert not m.break_elapsed(s, p, 9000)
    assert m.retry_after_ms(s, p, 1500) == 0
    assert m.retry_after_ms(Snapshot(), p, 1500) == 0


def test_allow_moves_to_half_open_once():
    p, s = policy(), open_at(1000)
    assert m.on_allow(s, p, 1999) is None and s.state == OPEN
    assert m.on_allow(s, p, 2000) == m.REASON_BREAK_ELAPSED
    assert (s.state, s.success_count) == (HALF_OPEN, 0)
    assert m.on_allow(s, p, 2001) is None and s.state == HALF_OPEN


def test_state_names():
    assert m.STATES == ("closed", "open", "half_open")
    with pytest.raises(ValueError):
        m.force(Snapshot(), "half-open", 0)


# -- check_window.c ---------------------------------------------------------------
def test_count_window_keeps_the_last_n():
    w = m.Window(m.WINDOW_COUNT, 3)
    w.add(True, False, T0)
    w.add(True, True, T0)
    w.add(False, False, T0)
    assert w.counts(T0) == (3, 2, 1)
    w.add(False, False, T0)
    calls, failures, _ = w.counts(T0)
    assert (calls, failures) == (3, 1)
    w.reset()
    assert w.counts(T0)[0] == 0


def test_time_window_buckets_expire():
    w = m.Window(m.WINDOW_TIME, 3000)
    w.add(True, False, T0)
    w.add(False, False, T0 + 999)
    w.add(True, False, T0 + 1500)
    assert w.counts(T0 + 2999)[:2] == (3, 2)
    assert w.counts(T0 + 3000)[:2] == (1, 1)
    assert w.counts(T0 + 3600000)[0] == 0
    w.add(True, False, T0 + 3600000)
    w.add(True, False, T0)
    assert w.counts(T0 + 3600000)[0] == 2


def test_windows_match_a_naive_recount():
    rng = random.Random(12345)
    for rnd in range(20):
        size = 1 + rng.randrange(50)
        kind = m.WINDOW_TIME if rnd % 2 else m.WINDOW_COUNT
        w = m.Window(kind, size * 1000 if kind == m.WINDOW_TIME else size)
        t, hist = T0, []
        for i in range(1000):
            t += rng.randrange(700)
            f, s = rng.randrange(3) == 0, rng.randrange(5) == 0
            hist.append((t, f, s))
            w.add(f, s, t)
            if kind == m.WINDOW_COUNT:
                last = hist[-size:]
            else:
                last = [h for h in hist if t // 1000 - h[0] // 1000 < size]
            assert w.counts(t) == (len(last), sum(h[1] for h in last), sum(h[2] for h in last))


def rate_policy(**kw):
    p = dict(trip=m.TRIP_RATE, window=m.WINDOW_COUNT, window_size=10, minimum_calls=5,
             failure_rate=50, break_ms=1000)
    p.update(kw)
    return Policy(**p)


def rec(s, p, w, failure, slow, now):
    return m.on_outcome(s, p, now, failure, slow, window=w)


def test_rate_opens_exactly_at_the_rate():
    p = rate_policy()
    w, s = m.Window(p.window, p.window_size), Snapshot()
    for _ in range(4):
        assert rec(s, p, w, True, False, T0) is None
    assert s.state == CLOSED
    assert rec(s, p, w, True, False, T0) == m.REASON_FAILURE_RATE
    assert (s.state, s.opened_at) == (OPEN, T0)
    s = Snapshot()
    w.reset()
    for f in (False, False, True, False):
        rec(s, p, w, f, False, T0)
    assert rec(s, p, w, True, False, T0) is None  # 2/5
    assert rec(s, p, w, True, False, T0) == m.REASON_FAILURE_RATE  # 3/6


def test_slow_calls_alone_open_and_fail_trials():
    p = rate_policy(slow_call_ms=100, slow_call_rate=60)
    w, s = m.Window(p.window, p.window_size), Snapshot()
    rec(s, p, w, False, True, T0)
    rec(s, p, w, False, False, T0)
    rec(s, p, w, False, True, T0)
    assert rec(s, p, w, False, False, T0) is None
    assert rec(s, p, w, False, True, T0) == m.REASON_FAILURE_RATE
    m.force(s, HALF_OPEN, T0 + 2000)
    assert rec(s, p, w, False, True, T0 + 2001) == m.REASON_TRIAL_FAILED
    assert s.state == OPEN
    p.slow_call_ms = 0
    m.force(s, HALF_OPEN, T0 + 3000)
    assert rec(s, p, w, False, True, T0 + 3001) is None
    assert s.success_count == 1


def test_time_window_rate_forgets_old_failures():
    p = rate_policy(window=m.WINDOW_TIME, window_size=2000, minimum_calls=3)
    w, s = m.Window(p.window, p.window_size), Snapshot()
    rec(s, p, w, True, False, T0)
    rec(s, p, w, True, False, T0 + 100)
    rec(s, p, w, False, False, T0 + 2000)
    rec(s, p, w, False, False, T0 + 2000)
    assert rec(s, p, w, True, False, T0 + 2500) is None
    assert s.state == CLOSED


def test_min_reporters_gates_opening():
    p = Policy(failure_threshold=2, min_reporters=2, reporter_window_ms=1000)
    r, s = m.Reporters(2), Snapshot()
    for i in range(10):
        assert m.on_outcome(s, p, T0 + i, True, reporters=r, reporter=11) is None
    assert s.state == CLOSED
    assert r.count(T0 + 10, 1000) == 1
    assert m.on_outcome(s, p, T0 + 500, True, reporters=r, reporter=22) == \
        m.REASON_FAILURE_THRESHOLD
    m.force(s, CLOSED, T0 + 600)
    m.on_outcome(s, p, T0 + 5000, True, reporters=r, reporter=11)
    assert m.on_outcome(s, p, T0 + 5001, True, reporters=r, reporter=11) is None
    assert r.count(T0 + 5001, 1000) == 1


def test_break_backoff_grows_caps_and_resets():
    p = Policy(failure_threshold=1, break_ms=1000, break_backoff=2, break_max_ms=3000)
    s, t = Snapshot(), T0
    m.on_failure(s, p, t)
    assert m.break_ms(s, p) == 1000
    t += 1000
    assert m.on_allow(s, p, t) == m.REASON_BREAK_ELAPSED
    assert m.on_failure(s, p, t) == m.REASON_TRIAL_FAILED
    assert m.break_ms(s, p) == 2000
    assert m.retry_after_ms(s, p, t + 500) == 1500
    assert not m.break_elapsed(s, p, t + 1999)
    t += 2000
    assert m.on_allow(s, p, t) == m.REASON_BREAK_ELAPSED
    m.on_failure(s, p, t)
    assert m.break_ms(s, p) == 3000
    m.force(s, OPEN, t)
    assert m.break_ms(s, p) == 3000
    t += 3000
    m.on_allow(s, p, t)
    m.on_success(s, p, t)
    assert m.on_success(s, p, t) == m.REASON_TRIAL_SUCCEEDED
    assert m.break_ms(s, p) == 1000


def test_presets_and_reported_policy():
    p = Policy.from_ctx({"preset": "database", "break_ms": 5000})
    assert (p.trip, p.window_size, p.minimum_calls, p.failure_rate, p.break_ms) == \
        (m.TRIP_RATE, 5, 3, 30, 5000)
    q = Policy.from_reported({"failure_threshold": 3, "max_gap_ms": None, "preset": None,
                              "source": {}})
    assert q.failure_threshold == 3 and q.max_gap_ms == 0
    with pytest.raises(ValueError):
        Policy.from_ctx({"preset": "nope"})
