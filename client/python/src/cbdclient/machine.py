# SPDX-License-Identifier: Apache-2.0
"""machine.py — the circuit-breaker state machine, pure: PROTOCOL.md §7
and §7a (consecutive and rate rules, count and time windows, slow calls,
min_reporters, break_backoff) as cbd's src/core/breaker.c and src/core/window.c run
them.

No I/O and no clock reads: every decision takes ``now`` (ms since the Unix
epoch) from the caller, so the local fallback and the tests (virtual time)
run the same code. The tests replay the sequences of tests/check_breaker.c
and tests/check_window.c.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"
STATES = (CLOSED, OPEN, HALF_OPEN)

TRIP_CONSECUTIVE = "consecutive"
TRIP_RATE = "rate"
WINDOW_COUNT = "count"
WINDOW_TIME = "time"

# Bounds of the protocol's numbers (§5).
COUNT_MAX = 1_000_000_000
DURATION_MAX = 1 << 53
TIME_MAX = 1 << 53
# A time window's bucket: one second (§7a).
WINDOW_BUCKET_MS = 1000

# Why a transition happened (the texts cbd logs).
REASON_NONE = None
REASON_FAILURE_THRESHOLD = "failure threshold reached"
REASON_FAILURE_RATE = "failure or slow-call rate reached"
REASON_TRIAL_FAILED = "trial call failed"
REASON_TRIAL_SUCCEEDED = "trial calls succeeded"
REASON_BREAK_ELAPSED = "break elapsed"
REASON_FORCED = "forced by an operator"

# The built-in presets of §7a.
PRESETS = {
    "http-external": dict(trip=TRIP_RATE, window=WINDOW_COUNT, window_size=10,
                          minimum_calls=5, failure_rate=50, break_ms=30000),
    "service": dict(trip=TRIP_RATE, window=WINDOW_COUNT, window_size=10,
                    minimum_calls=5, failure_rate=50, break_ms=30000),
    "database": dict(trip=TRIP_RATE, window=WINDOW_COUNT, window_size=5,
                     minimum_calls=3, failure_rate=30, break_ms=15000),
}


@dataclass
class Policy:
    """A resolved policy (§6, §7a). 0 means unset for max_gap_ms,
    slow_call_ms and break_max_ms; slot_ttl_ms 0 means break_ms."""

    trip: str = TRIP_CONSECUTIVE
    failure_threshold: int = 5
    success_threshold: int = 2
    break_ms: int = 30000
    half_open_max: int = 1
    slot_ttl_ms: int = 0
    max_gap_ms: int = 0
    window: str = WINDOW_COUNT
    window_size: int = 0  # 0: 100 calls (count) / 60000 ms (time)
    minimum_calls: int = 10
    failure_rate: int = 50
    slow_call_ms: int = 0
    slow_call_rate: int = 100
    min_reporters: int = 1
    reporter_window_ms: int = 60000
    break_backoff: int = 1
    break_max_ms: int = 0

    def __post_init__(self) -> None:
        if not self.window_size:
            self.window_size = 100 if self.window == WINDOW_COUNT else 60000
        if not self.slot_ttl_ms:
            self.slot_ttl_ms = self.break_ms

    @classmethod
    def from_ctx(cls, ctx: dict | None) -> "Policy":
        """The policy a ctx declares, a built-in preset below its own keys,
        built-in defaults for the rest (unknown keys and None ignored)."""
        ctx = dict(ctx or {})
        keys = {f.name for f in fields(cls)}
        merged: dict = {}
        preset = ctx.get("preset")
        if preset is not None:
            if preset not in PRESETS:
                raise ValueError(f"preset {preset!r} is not a built-in preset")
            merged.update(PRESETS[preset])
        merged.update({k: v for k, v in ctx.items() if k in keys and v is not None})
        return cls(**merged)

    @classmethod
    def from_reported(cls, policy: dict | None) -> "Policy":
        """The policy a snapshot reports (§7: every key, null for unset)."""
        return cls.from_ctx({k: v for k, v in (policy or {}).items()
                             if k not in ("source", "preset")})


@dataclass
class Snapshot:
    """The state of one circuit (§7), less name and retry_after_ms."""

    state: str = CLOSED
    failure_count: int = 0
    success_count: int = 0
    last_failure_at: int | None = None
    opened_at: int | None = None
    current_break_ms: int = 0  # the break grown by break_backoff; 0: break_ms

    @classmethod
    def from_reply(cls, snap: dict, policy: dict | None = None) -> "Snapshot":
        """From a snapshot cbd sent (its break as current_break_ms, unless
        it is the policy's break_ms: the snapshot's policy, else the policy
        given, known from an earlier one: protocol 3 snapshots are compact)."""
        s = cls(state=snap.get("state", CLOSED),
                failure_count=snap.get("failure_count") or 0,
                success_count=snap.get("success_count") or 0,
                last_failure_at=snap.get("last_failure_at"),
                opened_at=snap.get("opened_at"))
        policy = snap.get("policy") or policy or {}
        cur = snap.get("current_break_ms")
        if cur and cur != policy.get("break_ms"):
            s.current_break_ms = cur
        return s

    def is_initial(self) -> bool:
        return (self.state == CLOSED and self.failure_count == 0 and self.success_count == 0
                and self.last_failure_at is None and self.opened_at is None)


class Window:
    """The rate rule's sliding window: the last N calls (count) or the
    calls of the last N ms in one-second buckets (time)."""

    def __init__(self, kind: str, size: int) -> None:
        self.kind = kind
        self.slots = size if kind == WINDOW_COUNT else -(-size // WINDOW_BUCKET_MS)
        self.reset()

    def fits(self, kind: str, size: int) -> bool:
        return self.kind == kind and self.slots == Window(kind, size).slots

    def reset(self) -> None:
        self.calls = self.failures = self.slow = 0
        if self.kind == WINDOW_COUNT:
            self._ring: list = [(False, False)] * self.slots
            self._next = 0
        else:
            self._buckets = [[0, 0, 0] for _ in range(self.slots)]
            self._last_second: int | None = None

    def _advance(self, second: int) -> None:
        last = self._last_second
        if last is not None and second <= last:
            return
        start = (second - self.slots + 1 if last is None or second - last > self.slots
                 else last + 1)
        for s in range(start, second + 1):
            b = self._buckets[s % self.slots]
            self.calls -= b[0]
            self.failures -= b[1]
            self.slow -= b[2]
            b[0] = b[1] = b[2] = 0
        self._last_second = second

    def add(self, failure: bool, slow: bool, now: int) -> None:
        if self.kind == WINDOW_COUNT:
            if self.calls == self.slots:
                f, s = self._ring[self._next]
                self.calls -= 1
                self.failures -= f
                self.slow -= s
            self._ring[self._next] = (failure, slow)
            self._next = (self._next + 1) % self.slots
        else:
            self._advance(now // WINDOW_BUCKET_MS)
            # A clock behind the newest bucket counts in the newest bucket.
            b = self._buckets[self._last_second % self.slots]
            b[0] += 1
            b[1] += failure
            b[2] += slow
        self.calls += 1
        self.failures += failure
        self.slow += slow

    def counts(self, now: int) -> tuple[int, int, int]:
        """(calls, failures, slow) in the window at now."""
        if self.kind == WINDOW_TIME and self._last_second is not None:
            self._advance(now // WINDOW_BUCKET_MS)
        return self.calls, self.failures, self.slow


@dataclass
class Reporters:
    """The newest min_reporters distinct reporters of failures: id -> at."""

    slots: int
    seen: dict = field(default_factory=dict)

    def note(self, rid: int, now: int) -> None:
        if rid in self.seen:
            self.seen[rid] = max(self.seen[rid], now)
            return
        if len(self.seen) >= self.slots:
            del self.seen[min(self.seen, key=self.seen.get)]
        self.seen[rid] = now

    def count(self, now: int, window_ms: int) -> int:
        return sum(1 for at in self.seen.values() if now - at <= window_ms)


def break_ms(snap: Snapshot, policy: Policy) -> int:
    """The break in effect: break_ms, or the one break_backoff grew."""
    return snap.current_break_ms if snap.current_break_ms > 0 else policy.break_ms


def chain_continues(snap: Snapshot, policy: Policy, now: int) -> bool:
    if policy.max_gap_ms <= 0 or snap.last_failure_at is None:
        return True
    return now - snap.last_failure_at <= policy.max_gap_ms


def break_elapsed(snap: Snapshot, policy: Policy, now: int) -> bool:
    if snap.state != OPEN:
        return False
    if snap.opened_at is None:
        return True
    return now - snap.opened_at >= break_ms(snap, policy)


def retry_after_ms(snap: Snapshot, policy: Policy, now: int) -> int:
    if snap.state != OPEN or break_elapsed(snap, policy, now):
        return 0
    elapsed = now - snap.opened_at if now > snap.opened_at else 0
    return break_ms(snap, policy) - elapsed


def _trip_open(snap: Snapshot, now: int) -> None:
    snap.state = OPEN
    snap.opened_at = now
    snap.success_count = 0


def _trial_failed(snap: Snapshot, policy: Policy, now: int) -> None:
    if policy.break_backoff > 1:
        grown = min(break_ms(snap, policy) * policy.break_backoff, DURATION_MAX)
        if policy.break_max_ms > 0 and grown > policy.break_max_ms:
            grown = policy.break_max_ms
        snap.current_break_ms = grown
    _trip_open(snap, now)
    snap.last_failure_at = now


def force(snap: Snapshot, state: str, now: int) -> None:
    """A forced state (set_state, cas, the break elapsing)."""
    if state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}")
    snap.state = state
    if state == CLOSED:
        snap.failure_count = snap.success_count = 0
        snap.opened_at = None
        snap.current_break_ms = 0
    elif state == OPEN:
        snap.opened_at = now
        snap.success_count = 0
    else:
        snap.success_count = 0


def on_allow(snap: Snapshot, policy: Policy, now: int):
    """Open with its break elapsed moves to half_open."""
    if not break_elapsed(snap, policy, now):
        return REASON_NONE
    force(snap, HALF_OPEN, now)
    return REASON_BREAK_ELAPSED


def on_outcome(snap: Snapshot, policy: Policy, now: int, failure: bool, slow: bool = False,
               window: Window | None = None, reporters: Reporters | None = None,
               reporter: int = 0):
    """Apply one call's outcome; the reason of a transition, or None. The
    window is not emptied here (the caller does, for every transition)."""
    slow_rule = policy.slow_call_ms > 0
    bad = failure or (slow and policy.trip == TRIP_RATE and slow_rule)
    if bad and reporters is not None:
        reporters.note(reporter, now)
    if snap.state == CLOSED:
        if failure:
            snap.failure_count = (snap.failure_count + 1
                                  if chain_continues(snap, policy, now) else 1)
            snap.last_failure_at = now
        else:
            snap.failure_count = 0
        if policy.trip == TRIP_RATE:
            trips = False
            if window is not None:
                window.add(failure, slow_rule and slow, now)
                calls, failures, slows = window.counts(now)
                trips = calls > 0 and calls >= policy.minimum_calls and (
                    failures * 100 >= policy.failure_rate * calls
                    or (slow_rule and slows * 100 >= policy.slow_call_rate * calls))
        else:
            trips = failure and snap.failure_count >= policy.failure_threshold
        if not trips:
            return REASON_NONE
        if (policy.min_reporters > 1 and reporters is not None
                and reporters.count(now, policy.reporter_window_ms) < policy.min_reporters):
            return REASON_NONE
        _trip_open(snap, now)
        return REASON_FAILURE_RATE if policy.trip == TRIP_RATE else REASON_FAILURE_THRESHOLD
    if snap.state == HALF_OPEN:
        if bad:
            _trial_failed(snap, policy, now)
            return REASON_TRIAL_FAILED
        snap.success_count += 1
        if snap.success_count < policy.success_threshold:
            return REASON_NONE
        snap.state = CLOSED
        snap.failure_count = snap.success_count = 0
        snap.opened_at = None
        snap.current_break_ms = 0
        return REASON_TRIAL_SUCCEEDED
    # open: a straggler never extends the break window.
    if failure:
        snap.last_failure_at = now
    return REASON_NONE


def on_success(snap: Snapshot, policy: Policy, now: int):
    return on_outcome(snap, policy, now, False)


def on_failure(snap: Snapshot, policy: Policy, now: int):
    return on_outcome(snap, policy, now, True)
