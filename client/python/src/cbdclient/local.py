# SPDX-License-Identifier: Apache-2.0
"""local.py — circuits kept in this process: cbd's allow / record / get /
set_state semantics (PROTOCOL.md §7, §7a, §8 "allow and record") over the
pure state machine in machine.py, with trial slots (half_open_max,
slot_ttl_ms). The breaker's LOCAL fallback runs here while cbd is
unreachable, and a breaker without cbd (``Breaker.private``) runs here
always.

Every method takes the circuit's policy and ``now`` (ms) from the caller;
nothing here reads a clock. Each circuit's window is emptied on every
transition, as cbd does. One process reports, so min_reporters counts as 1.
"""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass, field, replace

from . import machine
from .machine import CLOSED, HALF_OPEN, OPEN, Policy, Snapshot


@dataclass
class _Circuit:
    snap: Snapshot
    window: machine.Window | None = None
    slots: dict = field(default_factory=dict)  # token -> expires_at


def snapshot_dict(name: str, snap: Snapshot, policy: Policy, now: int) -> dict:
    """A snapshot as cbd writes one (§7), for a local circuit."""
    return {"name": name, "state": snap.state, "failure_count": snap.failure_count,
            "success_count": snap.success_count, "last_failure_at": snap.last_failure_at,
            "opened_at": snap.opened_at,
            "retry_after_ms": machine.retry_after_ms(snap, policy, now),
            "current_break_ms": machine.break_ms(snap, policy), "hold": None}


class LocalStore:
    """In-process circuits, safe for threads (one lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._circuits: dict[str, _Circuit] = {}
        self._instance = os.urandom(8).hex()
        self._counter = itertools.count(1)

    def _circuit(self, name: str) -> _Circuit:
        c = self._circuits.get(name)
        if c is None:
            c = self._circuits[name] = _Circuit(Snapshot())
        return c

    @staticmethod
    def _policy(policy: Policy) -> Policy:
        return replace(policy, min_reporters=1) if policy.min_reporters != 1 else policy

    @staticmethod
    def _window(c: _Circuit, policy: Policy) -> machine.Window | None:
        if policy.trip != machine.TRIP_RATE:
            return None
        if c.window is None or not c.window.fits(policy.window, policy.window_size):
            c.window = machine.Window(policy.window, policy.window_size)
        return c.window

    @staticmethod
    def _transitioned(c: _Circuit, before: str) -> None:
        if c.snap.state != before and c.window is not None:
            c.window.reset()

    def seed(self, name: str, snap: Snapshot, now: int) -> None:
        """Start name from snap (a copy), with no slots and an empty window."""
        s = replace(snap)
        if s.state != CLOSED and s.opened_at is None:
            s.opened_at = now
        with self._lock:
            self._circuits[name] = _Circuit(s)

    def forget(self, name: str) -> None:
        with self._lock:
            self._circuits.pop(name, None)

    def known(self, name: str) -> bool:
        with self._lock:
            return name in self._circuits

    def get(self, name: str, policy: Policy, now: int) -> dict:
        with self._lock:
            c = self._circuits.get(name)
            snap = c.snap if c is not None else Snapshot()
            return snapshot_dict(name, snap, policy, now)

    def allow(self, name: str, policy: Policy, now: int) -> dict:
        """cbd's allow: may I call? A half_open grant carries a permit."""
        policy = self._policy(policy)
        with self._lock:
            c = self._circuit(name)
            before = c.snap.state
            machine.on_allow(c.snap, policy, now)
            self._transitioned(c, before)
            if c.snap.state == CLOSED:
                return {"allowed": True, "state": CLOSED}
            if c.snap.state == OPEN:
                return {"allowed": False, "state": OPEN,
                        "retry_after_ms": machine.retry_after_ms(c.snap, policy, now)}
            for token, expires_at in list(c.slots.items()):
                if now >= expires_at:
                    del c.slots[token]
            if len(c.slots) >= policy.half_open_max:
                return {"allowed": False, "state": HALF_OPEN,
                        "retry_after_ms": max(0, min(c.slots.values()) - now)}
            token = f"{self._instance}-{next(self._counter):016x}"
            expires_at = now + policy.slot_ttl_ms
            c.slots[token] = expires_at
            return {"allowed": True, "state": HALF_OPEN, "permit": token,
                    "expires_at": expires_at}

    def record(self, name: str, outcome: str, policy: Policy, now: int,
               duration_ms: int | None = None, permit: str | None = None) -> dict:
        """cbd's record: the outcome (success, failure, ignore), its slot
        given back; the snapshot after it."""
        policy = self._policy(policy)
        with self._lock:
            c = self._circuits.get(name)
            if c is None and outcome == "ignore":
                return snapshot_dict(name, Snapshot(), policy, now)
            c = c or self._circuit(name)
            if permit is not None:
                c.slots.pop(permit, None)
            if outcome in ("success", "failure"):
                slow = (policy.slow_call_ms > 0 and duration_ms is not None
                        and duration_ms >= policy.slow_call_ms)
                before = c.snap.state
                machine.on_outcome(c.snap, policy, now, outcome == "failure", slow,
                                   window=self._window(c, policy))
                self._transitioned(c, before)
            elif outcome != "ignore":
                raise ValueError("outcome must be success, failure or ignore")
            return snapshot_dict(name, c.snap, policy, now)

    def set_state(self, name: str, state: str, policy: Policy, now: int) -> dict:
        with self._lock:
            c = self._circuit(name)
            machine.force(c.snap, state, now)
            if c.window is not None:
                c.window.reset()
            return snapshot_dict(name, c.snap, policy, now)
