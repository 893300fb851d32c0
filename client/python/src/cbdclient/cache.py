# SPDX-License-Identifier: Apache-2.0
"""cache.py — cached mode (libcbclient's client/cache.c, in Python): one
watch connection per process and socket path, shared by every cached
breaker that uses it, keeping the snapshot of each circuit those breakers
name, and carrying their outcomes to cbd as noreply lines.

  - The connection has one owner: a reader thread (``ThreadWatchCache``,
    for breakers on a ``Client``) or the event loop (``LoopWatchCache``,
    for breakers on an ``AsyncClient``: a reader callback and timers on
    that loop). The owner connects, sends one watch for every name,
    applies the watch reply's snapshots and the change/delete events as
    they arrive, and reconnects every RECONNECT_S while cbd is away.
  - An entry is valid only between the watch reply that read it and the
    loss of the connection: a lost connection invalidates every entry at
    once, until the next watch reply re-reads them.
  - A frozen or hung cbd keeps the connection open and says nothing: when
    nothing has arrived for PROBE_INTERVAL_S the owner sends a hello (the
    probe), and one unanswered for PROBE_TIMEOUT_S counts as a lost
    connection (PROTOCOL.md §14 item 9).
  - Outcomes are appended to one output buffer as noreply lines. A failure
    (what trips circuits) is written at once by its caller, after
    everything queued before it; successes are written by the owner every
    FLUSH_S while calls flow, so a stream of closed calls costs no write
    each. Past OUT_MAX unwritten bytes, or with no live connection, the
    caller reports through the uncached path instead.
  - A process stops at its own threshold: each entry counts the process's
    own outcomes since the last snapshot known to include them
    (``OwnCount``). An outcome that could trip the circuit by the rule that
    snapshot reported is sent with an id instead of noreply and its caller
    waits for the reply (SYNC_TIMEOUT_S at most), whose snapshot the owner
    applies before the next line: the next call of the process decides
    from the state cbd reached. Other processes' trips still arrive as
    events, one event late.
  - Closing (the last breaker's release, the interpreter's exit) writes
    everything queued at once, in order, as far as the socket takes it;
    the rest (cbd reads nothing: frozen, or slower than the queue) goes to
    a daemon thread of its own that writes it as cbd reads, reading and
    dropping what cbd sends, and gives up when cbd has read nothing for
    CLOSE_TAIL_IDLE_S. close() waits for that thread at most
    CLOSE_FLUSH_S (so a process ending right after has it written if cbd
    reads), then lets it go on: no timer of a loaded machine drops what
    breakers queued before their close, and close never waits for cbd.
    Lines kept from a lost connection get one connect of their own. Once
    closing, the reader applies nothing more.
  - After fork() the child forgets its parent's caches: breakers it
    inherited take the uncached path, breakers it creates get a cache of
    its own.
  - Protocol 3 §1: snapshots are compact (no ``policy``, a ``policy_rev``
    instead). Each entry keeps the last policy seen with the rev it came
    with; a snapshot without policy and with another rev makes it unknown
    (every failure synced, the break read from the snapshot only). The
    watch and the synced outcomes ask ``"policy": true``, so their replies
    refresh it, and a ``policy`` event (a reload changed the circuit's
    policy) refreshes it without a state change. A v2 cbd sends the policy
    in every snapshot and no rev: the same code reads it as before.
  - Counted successes (PROTOCOL.md §14 item 12, as libcbclient): every
    connection starts with a hello; once its reply lists "success" in
    ``outcome_counts``, a success that is not slow by the cached policy is
    not queued as a line but counted in an open fold of its breaker's
    exact line head (breakers of one name may carry different ctx). The
    folds go out as one line each, with ``"count"`` (an older cbd would
    count such a line as one success: until the reply says so, and after
    every disconnect, successes go one line each), before any other line
    is queued, whenever the output is written, at FOLD_COUNT_MAX, when
    FOLDS_MAX folds are open (all of them then), and at a disconnect or
    the close, where they are queued lines like any other.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import select
import socket
import threading
import time
from dataclasses import asdict, dataclass

from .machine import CLOSED, OPEN, STATES
from .protocol import encode_request

# Successes wait at most this long in the output before the owner writes
# them, together (seconds); failures are written at once.
FLUSH_S = 0.001
# The owner keeps that timer running this long after the last queued
# success, so a steady flow of calls never has to wake it; after it the
# owner sleeps, and a lone success is written by its caller.
HOT_S = 0.05
# Wait between reconnect attempts while cbd is away (seconds).
RECONNECT_S = 0.02
# At close, what the socket does not take at once is written by a daemon
# thread as cbd reads it; close waits for it at most CLOSE_FLUSH_S (so a
# process ending right after has it written if cbd reads), then lets it go
# on (close never waits for cbd). It gives up when cbd has read nothing for
# CLOSE_TAIL_IDLE_S: a cbd frozen or hung past it loses that tail, which is
# all it holds. Without a thread (none can start: the interpreter is
# finalizing), close writes for CLOSE_FLUSH_S and drops the rest.
CLOSE_FLUSH_S = 0.2
CLOSE_TAIL_IDLE_S = 60.0
# Unwritten outcome bytes past which outcomes take the uncached path.
OUT_MAX = 1 << 20
# Names cached per process and socket path; past it breakers ask cbd.
NAMES_MAX = 4096
# Longest line accepted from cbd (a watch reply carries about 1 KiB per
# name); past it the connection is dropped.
LINE_MAX = NAMES_MAX * 2048
# Names per watch request (keeps each line far below max_line_bytes).
WATCH_BATCH = 64
# Bytes read at a time.
READ_CHUNK = 65536
# A cbd that is frozen (SIGSTOP) or hung keeps the watch connection open,
# so without a probe the cache would stay valid and failures would queue
# unread. After this long with nothing received the owner sends a hello;
# one unanswered for PROBE_TIMEOUT_S drops the connection like a lost one.
# Worst case, a frozen cbd is noticed within ~1.5 s (interval + timeout),
# and an idle healthy connection costs one hello every 0.5 s.
PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 1.0
# The probes' ids (the cache's watch requests carry none).
PROBE_ID_PREFIX = "cache-probe-"
# The ids of outcomes sent with a reply (those that could trip), and how
# long their caller waits for it (a frozen cbd is the probe's business).
SYNC_ID_PREFIX = "cache-sync-"
SYNC_TIMEOUT_S = PROBE_TIMEOUT_S

# The most folds open at once (successes of as many line heads); one more
# puts them all in the output.
FOLDS_MAX = 64
# The most successes one counted line carries (cbd's PROTO_SUCCESS_COUNT_MAX).
FOLD_COUNT_MAX = 1_000_000

# What the cache says about a call.
PERMIT = "permit"  # closed: run it now, report with noreply
REFUSE = "refuse"  # open (or held open), break not elapsed
ASK = "ask"  # anything else: the uncached path through cbd


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class CacheStats:
    """The counters of one cache (shared by its breakers)."""

    cached_calls: int = 0  # closed in the cache: ran without a round trip
    local_refusals: int = 0  # refused from the cache
    uncached: int = 0  # decisions left to cbd (the uncached path)
    noreply_lines: int = 0  # outcomes queued as noreply lines
    sends: int = 0  # writes that carried them
    store_reports: int = 0  # outcomes sent the uncached way instead
    events: int = 0  # change/delete/policy events read
    policy_events: int = 0  # of them, policy events (a reload changed the policy)
    connects: int = 0
    reconnects: int = 0  # connects after the first
    disconnects: int = 0
    names_full: int = 0  # breakers left uncached at NAMES_MAX
    out_full: int = 0  # outcomes that found OUT_MAX queued
    bad_lines: int = 0  # lines from cbd that could not be read
    watch_refused: int = 0  # ok: false to a watch (a protocol 1 cbd)
    line_too_long: int = 0
    probes: int = 0  # hellos sent on a quiet connection
    probe_timeouts: int = 0  # probes unanswered: connection dropped
    syncs: int = 0  # outcomes that could trip, sent with a reply awaited
    sync_timeouts: int = 0  # of them, those whose reply did not come in time
    folded: int = 0  # successes sent inside counted lines ("count" > 1)
    live: bool = False  # a watch connection is up now
    names: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _int(policy: dict, key: str, default: int) -> int:
    v = policy.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def policy_rev(snap: dict) -> int | None:
    """A snapshot's policy_rev (protocol 3 §1); None from a v2 cbd (or one
    that is not a positive integer)."""
    rev = snap.get("policy_rev")
    return rev if isinstance(rev, int) and not isinstance(rev, bool) and rev > 0 else None


class OwnCount:
    """The circuit's rule as the last snapshot read reported it, the counts
    that snapshot carried (base) and the process's own outcomes since
    (own): enough to tell whether one more outcome of the process could
    trip the circuit. Own counts are zeroed, and the rule read, only from
    a snapshot known to include them and to be of the stored circuit (a
    change event, the reply to a synced outcome); a watch reply may
    predate the creating request (its policy the defaults, not the
    breaker's) and may or may not include own outcomes, so it only sets
    the base. Until a rule is read every failure is synced. An outcome
    counted twice costs a round trip, never an overshoot. The rule keeps
    the policy_rev it was read with: a snapshot with another rev and no
    policy (protocol 3) makes it unknown again, until a snapshot that
    carries the policy (a synced outcome's reply, a policy event) is read."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.known = False
        self.rev: int | None = None  # the policy_rev the rule was read with
        self.rate = False
        self.count_window = True
        self.cannot_trip = False  # held, or min_reporters > 1
        self.threshold = self.min_calls = self.fail_rate = self.win_size = 0
        self.slow_ms = -1  # -1: no slow rule
        self.slow_rate = 100
        self.base_fc = self.base_calls = self.base_fails = self.base_slow = 0
        self.own_fc = self.own_calls = self.own_fails = self.own_slow = 0

    def set_base(self, snap: dict, reset: bool) -> None:
        policy = snap.get("policy")
        rev = policy_rev(snap)
        with self.lock:
            if not (reset and isinstance(policy, dict)):
                if rev != self.rev:
                    self.known = False  # stale: the policy changed since
            else:
                self.known = True
                self.rev = rev
                self.rate = policy.get("trip") == "rate"
                self.count_window = policy.get("window") != "time"
                self.threshold = _int(policy, "failure_threshold", 5)
                self.min_calls = _int(policy, "minimum_calls", 10)
                self.fail_rate = _int(policy, "failure_rate", 50)
                self.win_size = _int(policy, "window_size", 100)
                self.slow_ms = _int(policy, "slow_call_ms", -1)
                self.slow_rate = _int(policy, "slow_call_rate", 100)
                self.cannot_trip = (snap.get("hold") is not None
                                    or _int(policy, "min_reporters", 1) > 1)
            fc = snap.get("failure_count")
            self.base_fc = fc if isinstance(fc, int) else 0
            w = snap.get("window") if isinstance(snap.get("window"), dict) else {}
            self.base_calls = _int(w, "calls", 0)
            self.base_fails = _int(w, "failures", 0)
            self.base_slow = _int(w, "slow", 0)
            if reset:
                self.own_fc = self.own_calls = self.own_fails = self.own_slow = 0

    def count(self, outcome: str, ms: int) -> bool:
        """Add one own outcome (of ms) and say whether it could trip the
        circuit: then it must be sent with a reply awaited."""
        if outcome == "ignore":
            return False  # changes no rule
        with self.lock:
            fail = outcome == "failure"
            slow = self.slow_ms >= 0 and ms >= self.slow_ms
            if fail:
                self.own_fc += 1
            else:
                self.base_fc = self.own_fc = 0
            self.own_calls += 1
            self.own_fails += fail
            self.own_slow += slow
            if not self.known:
                return fail  # no rule read yet: any failure might trip it
            if self.cannot_trip:
                return False
            if not self.rate:
                return fail and self.base_fc + self.own_fc >= self.threshold
            if not fail and not slow:
                return False
            # The window holds at most base + own calls and at least the
            # larger of the two (either may include the other): judge the
            # rate at its highest.
            hi = self.base_calls + self.own_calls
            lo = max(self.base_calls, self.own_calls)
            if self.count_window:
                hi, lo = min(hi, self.win_size), min(lo, self.win_size)
            if hi < self.min_calls:
                return False
            if fail and (self.base_fails + self.own_fails) * 100 >= self.fail_rate * lo:
                return True
            return slow and (self.base_slow + self.own_slow) * 100 >= self.slow_rate * lo


class _ThreadWaiter:
    """A caller thread waiting for the reply to a synced outcome."""

    __slots__ = ("event", "snap")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.snap: dict | None = None

    def deliver(self, snap: dict | None) -> None:
        self.snap = snap
        self.event.set()


class _FutureWaiter:
    """A coroutine on the owning loop waiting for that reply."""

    __slots__ = ("future",)

    def __init__(self, loop) -> None:
        self.future = loop.create_future()

    def deliver(self, snap: dict | None) -> None:
        if not self.future.done():
            self.future.set_result(snap)


class Entry:
    """What the cache knows of one circuit."""

    __slots__ = ("name", "valid", "state", "opened_at", "break_ms", "retry_after_ms",
                 "received_at", "hold_state", "hold_until", "seq", "last", "own",
                 "applied", "latest", "policy", "policy_rev", "limited", "fold_slow_ms")

    def __init__(self, name: str) -> None:
        self.name = name
        self.valid = False  # read by the current connection's watch reply
        self.state = CLOSED
        self.opened_at: int | None = None
        self.break_ms: int | None = None  # current_break_ms, else the policy's
        self.retry_after_ms = 0  # as reported, at received_at (wall ms)
        self.received_at = 0
        self.hold_state: str | None = None  # None: not held
        self.hold_until: int | None = None  # None: until released
        self.seq = 0  # change events applied
        self.last: dict | None = None  # the last change event's snapshot
        self.own = OwnCount()
        self.applied = 0  # snapshots applied (replies, events, synced outcomes)
        self.latest: dict | None = None  # the last of them (kept when invalid)
        # The last policy seen and the policy_rev it came with (None: none
        # seen, or stale).
        self.policy: dict | None = None
        self.policy_rev: int | None = None
        # The circuit has a bulkhead (a ticket is never granted from the
        # cache) or a retry budget (cbd counts first attempts): ask cbd.
        self.limited = False
        # The kept policy's slow_call_ms for folding successes (-1: none;
        # None: no policy kept, nothing folded).
        self.fold_slow_ms: int | None = None

    def set(self, snap: dict, reset: bool = False) -> bool:
        """Read a snapshot; False when it cannot be read. A compact one
        (protocol 3) of the kept policy's rev is kept with that policy
        filled in (as latest and last), so readers of the entry's
        snapshots see a policy whenever it is known."""
        state = snap.get("state")
        hold = snap.get("hold")
        if state not in STATES or not (hold is None or isinstance(hold, dict)):
            return False
        policy = snap.get("policy")
        rev = policy_rev(snap)
        if isinstance(policy, dict):
            self.policy, self.policy_rev = policy, rev
        elif rev != self.policy_rev:
            self.policy = None  # stale: the circuit's policy changed since
        elif self.policy is not None:
            snap = dict(snap, policy=self.policy)
            policy = self.policy
        cur = snap.get("current_break_ms")
        brk = cur if _time(cur) else policy.get("break_ms") if isinstance(policy, dict) else None
        times = (snap.get("opened_at"), brk, hold.get("until") if hold else None)
        if not all(t is None or _time(t) for t in times) or not _time(
                snap.get("retry_after_ms", 0)):
            return False
        self.valid = True
        self.state = state
        self.opened_at, self.break_ms, self.hold_until = times
        self.retry_after_ms = snap.get("retry_after_ms", 0)
        self.received_at = _wall_ms()
        self.hold_state = hold.get("state") if hold else None
        self.limited = "in_flight" in snap or (isinstance(policy, dict) and (
            policy.get("max_concurrent") is not None
            or policy.get("retry_budget_percent") is not None))
        self.fold_slow_ms = (_int(policy, "slow_call_ms", -1) if isinstance(policy, dict)
                             else None)
        self.own.set_base(snap, reset)
        self.applied += 1
        self.latest = snap
        return True


def _time(v: object) -> bool:
    """A time or duration as the protocol sends them (§5)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


class WatchCache:
    """The connection, entries and output shared by one process's cached
    breakers on one socket path. Subclasses own the connection (``_wake``
    tells the owner there is work: reconnect, output waiting, timer)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pid = os.getpid()
        self.refs = 0
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._sock: socket.socket | None = None
        self._broken = False  # a send failed: the owner reconnects
        self._blocked = False  # the socket took less than all: wait for room
        self._stop = False
        self._cold = True  # the owner sleeps without a timer: wake it
        self._lazy_at = -HOT_S  # monotonic time of the last queued success
        self._out = bytearray()  # pending lines
        self._out_partial = False  # _out starts with a line's unsent tail
        self._in = bytearray()  # bytes read, not yet a full line
        # cbd answered on the current connection: only then is it live (a
        # frozen cbd's backlog accepts connections nothing will read).
        self._answered = False
        # The owner's: when the connection last brought anything
        # (monotonic), and the outstanding probe's sending time.
        self._received_at = 0.0
        self._probe_at: float | None = None
        self._probe_n = 0  # the last probe's number, for its id
        self._sync_n = 0  # the last synced outcome's number, for its id
        self._waiters: dict = {}  # id -> waiter of a synced outcome
        # Users gone with the garbage collector, released by the owner
        # (a finalizer may run while this thread holds a lock of ours).
        self._dropped: collections.deque = collections.deque()
        self._stats = CacheStats()
        # This connection's cbd takes counted successes (its hello reply
        # listed "success" in outcome_counts); False from every connect.
        self._counts_ok = False
        # The open folds: line head -> successes counted (in order).
        self._folds: dict[bytes, int] = {}

    # -- for breakers ---------------------------------------------------
    def usable(self) -> bool:
        """Not a parent's cache inherited through fork, not stopped."""
        return self.pid == os.getpid() and not self._stop

    def watch(self, name: str) -> Entry | None:
        """The entry of name, watched from now; None past NAMES_MAX."""
        with self._lock:
            e = self._entries.get(name)
            if e is not None:
                return e
            if len(self._entries) >= NAMES_MAX:
                self._stats.names_full += 1
                return None
            e = self._entries[name] = Entry(name)
            if self._sock is not None and not self._queue_watch_locked([name]):
                self._broken = True
            self._flush_locked()
            wake = bool(self._out) or self._broken
        if wake:
            self._wake()
        return e

    def decide(self, e: Entry, seen_seq: int, told: tuple[int, str] | None = None
               ) -> tuple[str, int, dict | None, int]:
        """(verdict, retry_after_ms, the last change event's snapshot when
        newer than seen_seq else None, the entry's seq). told: (seq, state)
        cbd answered the caller's last uncached request with, at that seq:
        until an event comes, a different cached state is older than it."""
        left = 0
        with self._lock:
            fresh = e.last if e.seq != seen_seq else None
            seq = e.seq
            if not e.valid or self._sock is None or self._broken or not self._answered:
                verdict = ASK
            elif told is not None and told[0] == e.seq and told[1] != e.state:
                verdict = ASK  # the event of what cbd told us is on its way
            elif e.hold_state == OPEN:
                # Held open: refused until the hold ends (its until, else
                # for as long as it is held).
                if e.hold_until is None:
                    left = max(1, e.retry_after_ms - (_wall_ms() - e.received_at))
                else:
                    left = e.hold_until - _wall_ms()
                verdict = REFUSE if left > 0 else ASK
            elif e.state == CLOSED:
                # A bulkhead's tickets and a retry budget's first attempts
                # are cbd's to count.
                verdict = ASK if e.limited else PERMIT
            elif e.state == OPEN:
                now = _wall_ms()
                if e.opened_at is not None and e.break_ms is not None:
                    # Never more than the break (a clock behind opened_at
                    # counts as no time elapsed, as cbd's).
                    left = min(e.opened_at + e.break_ms - now, e.break_ms)
                else:
                    left = e.retry_after_ms - (now - e.received_at)
                verdict = REFUSE if left > 0 else ASK
            else:
                verdict = ASK  # half_open: trial slots are cbd's
            if verdict == PERMIT:
                self._stats.cached_calls += 1
            elif verdict == REFUSE:
                self._stats.local_refusals += 1
            else:
                self._stats.uncached += 1
        return verdict, max(0, left), fresh, seq

    def send(self, line: bytes, urgent: bool) -> bool:
        """Queue one noreply line (urgent: written now, after what is
        queued). False when it cannot go this way: report it uncached."""
        queued = wake = False
        with self._lock:
            if self._sock is not None and not self._broken and self.usable():
                # (Open folds go before the line: not idle then.)
                idle = not self._out and not self._folds
                now = time.monotonic()
                # Another success within the hot period: calls are flowing.
                dense = not urgent and now - self._lazy_at < HOT_S
                # Failures, and sparse successes while the owner sleeps
                # (waking it would cost more than the write), go now.
                write_now = urgent or (self._cold and not dense)
                if len(self._out) + len(line) > OUT_MAX:
                    self._stats.out_full += 1
                else:
                    if self._folds:
                        self._put_folds_locked()
                    self._out += line
                    queued = True
                    if not urgent:
                        self._lazy_at = now
                    if write_now:
                        self._flush_locked()
                        if idle and self._broken:
                            # cbd went away under us: not written, the
                            # uncached path reports it.
                            self._out.clear()
                            queued = False
                if queued:
                    self._stats.noreply_lines += 1
                # Wake the owner: to reconnect, to wait for room, or to run
                # its timer now that successes flow.
                if self._cold and (self._broken or self._blocked or (queued and dense)):
                    self._cold = False
                    wake = True
            if not queued:
                self._stats.store_reports += 1
        if wake:
            self._wake()
        return queued

    def fold(self, prefix: bytes) -> bool:
        """Count one success of the line head prefix (a breaker's noreply
        record_success less its closing brace) in its open fold instead of
        queuing its line, when this connection's cbd takes counted
        successes and the owner's timer runs (a lone success of an idle
        process is written by its caller, as a line). The caller checked
        that the success is not slow by the cached policy. False: send its
        line."""
        wake = False
        with self._lock:
            if not self._counts_ok or self._sock is None or self._broken or not self.usable():
                return False
            now = time.monotonic()
            dense = now - self._lazy_at < HOT_S
            if self._cold and not dense:
                return False
            folds = self._folds
            n = folds.get(prefix)
            if n is None:
                if len(folds) >= FOLDS_MAX:
                    self._put_folds_locked()
                n = 0
            folds[prefix] = n + 1
            if n + 1 >= FOLD_COUNT_MAX:
                self._put_folds_locked()
            self._lazy_at = now
            # Wake the owner to run its timer now that successes flow.
            if self._cold:
                self._cold = False
                wake = True
        if wake:
            self._wake()
        return True

    def _put_folds_locked(self) -> None:
        """Queue every open fold as one line: its head, then ,"count":N}
        (N > 1; else the plain line), past OUT_MAX too (at most FOLDS_MAX
        lines, fewer than those they replace)."""
        out, stats = self._out, self._stats
        for prefix, n in self._folds.items():
            out += prefix
            if n > 1:
                out += b',"count":%d}\n' % n
                stats.folded += n
            else:
                out += b"}\n"
            stats.noreply_lines += 1
        self._folds.clear()

    def _queue_sync(self, line: bytes, waiter) -> bool:
        """Queue one outcome line (less its closing brace) with an id and
        write it at once, after what is queued; False when it cannot go
        this way: report it uncached."""
        with self._lock:
            if self._sock is None or self._broken or not self.usable():
                self._stats.store_reports += 1
                return False
            self._sync_n += 1
            sync_id = f"{SYNC_ID_PREFIX}{self._sync_n}"
            idle = not self._out and not self._folds
            if self._folds:
                self._put_folds_locked()
            # Past OUT_MAX too: it is one line, and it matters most.
            self._out += line + b',"id":"%s"}\n' % sync_id.encode()
            self._waiters[sync_id] = waiter
            self._flush_locked()
            if idle and self._broken:
                self._out.clear()
                del self._waiters[sync_id]
                self._stats.store_reports += 1
                return False
            self._stats.syncs += 1
            wake = self._cold and (self._blocked or self._broken)
            if wake:
                self._cold = False
        if wake:
            self._wake()
        return True

    def send_sync(self, line: bytes) -> tuple[dict | None, bool]:
        """Send an outcome that could trip (line: its request less the
        closing brace) with a reply awaited, at most SYNC_TIMEOUT_S: (cbd's
        snapshot, already applied to the entry, or None; sent). Not sent:
        report it uncached."""
        waiter = _ThreadWaiter()
        if not self._queue_sync(line, waiter):
            return None, False
        if not waiter.event.wait(SYNC_TIMEOUT_S):
            with self._lock:
                self._stats.sync_timeouts += 1
        return waiter.snap, True

    async def send_sync_async(self, line: bytes) -> tuple[dict | None, bool]:
        """send_sync for a cache its event loop owns, from that loop."""
        import asyncio
        waiter = _FutureWaiter(self.loop)
        if not self._queue_sync(line, waiter):
            return None, False
        try:
            snap = await asyncio.wait_for(asyncio.shield(waiter.future), SYNC_TIMEOUT_S)
        except asyncio.TimeoutError:
            with self._lock:
                self._stats.sync_timeouts += 1
            snap = None
        return snap, True

    def _wake_waiters_locked(self) -> None:
        waiters, self._waiters = self._waiters, {}
        for w in waiters.values():
            w.deliver(None)

    def seq(self, e: Entry) -> int:
        with self._lock:
            return e.seq

    def stats(self) -> CacheStats:
        with self._lock:
            s = CacheStats(**asdict(self._stats))
            s.live = self._sock is not None and not self._broken and self._answered
            s.names = len(self._entries)
        return s

    # -- the connection (lock held unless said) --------------------------
    def _wake(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def release_soon(self) -> None:
        """One user less, from a finalizer: takes no lock, the owner
        releases it."""
        self._dropped.append(None)
        self._wake()

    def _release_dropped(self) -> None:
        """The owner's side of release_soon (no lock of ours held)."""
        while self._dropped:
            self._dropped.popleft()
            release(self)

    def _flush_locked(self) -> None:
        """Send as much pending output as the socket takes now; the open
        folds go with it (a success waits at most one flush, as its line
        would)."""
        if self._folds and self._sock is not None and not self._broken:
            self._put_folds_locked()
        while self._sock is not None and not self._broken and self._out:
            try:
                n = self._sock.send(self._out)
            except InterruptedError:
                continue
            except BlockingIOError:
                self._blocked = True  # the owner sends the rest when writable
                return
            except OSError:
                self._broken = True
                return
            self._blocked = False
            self._stats.sends += 1
            self._out_partial = self._out[n - 1] != 0x0A
            del self._out[:n]

    def _queue_watch_locked(self, names: list[str]) -> bool:
        for i in range(0, len(names), WATCH_BATCH):
            # The initial snapshots with their policies (protocol 3; a v2
            # cbd ignores the member and sends them anyway).
            line = encode_request("watch", {"names": names[i:i + WATCH_BATCH], "policy": True})
            if len(self._out) + len(line) > OUT_MAX:
                self._stats.out_full += 1
                return False
            if self._folds:
                self._put_folds_locked()
            self._out += line
        return True

    def _connect_locked(self, watch: bool = True) -> bool:
        """Try to connect and watch every name (watch false: only connect,
        for the lines kept at close)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(self.path)
        except OSError:  # absent, refused, or a full backlog: retry later
            s.close()
            return False
        self._sock = s
        self._received_at = time.monotonic()
        self._probe_at = None
        self._stats.connects += 1
        if self._stats.connects > 1:
            self._stats.reconnects += 1
        self._answered = False
        self._counts_ok = False
        if not watch:
            self._flush_locked()
            return True
        # The watch reply (a hello's without names) makes it live. The
        # hello's reply says whether this cbd takes counted successes:
        # until it does, every success goes as a line of its own.
        if not self._queue_watch_locked(list(self._entries)):
            self._broken = True
        if self._folds:
            self._put_folds_locked()
        self._probe_n += 1
        self._out += encode_request("hello", {"id": f"{PROBE_ID_PREFIX}{self._probe_n}"})
        self._flush_locked()
        return True

    def _disconnect_locked(self) -> None:
        """Drop the connection: every entry invalid until re-watched."""
        if self._sock is not None:
            self._sock.close()
            self._stats.disconnects += 1
        self._sock = None
        self._broken = self._blocked = self._answered = False
        self._probe_at = None
        self._in.clear()
        # Lines not yet written stay queued for the next connection (a
        # line half written is dropped: its head went to the old one).
        if self._out_partial:
            nl = self._out.find(b"\n")
            del self._out[:nl + 1 if nl >= 0 else len(self._out)]
            self._out_partial = False
        # The open folds are queued lines too: kept for the next connection
        # (whose cbd folds nothing until its hello reply says so).
        self._counts_ok = False
        if self._folds:
            self._put_folds_locked()
        for e in self._entries.values():
            e.valid = False
        self._wake_waiters_locked()

    def _probe_expired_locked(self) -> bool:
        """The outstanding probe went unanswered for PROBE_TIMEOUT_S:
        cbd is not answering (counted; the owner drops the connection)."""
        if self._probe_at is None or time.monotonic() - self._probe_at < PROBE_TIMEOUT_S:
            return False
        self._stats.probe_timeouts += 1
        return True

    def _probe_locked(self) -> float | None:
        """Queue a probe when the connection has been quiet for
        PROBE_INTERVAL_S (none while one is outstanding). The seconds
        until the owner must look again; None without a connection or
        entries (no timer then)."""
        if self._sock is None or self._broken or not self._entries:
            return None
        now = time.monotonic()
        if self._probe_at is None:
            quiet = now - self._received_at
            if quiet < PROBE_INTERVAL_S:
                return PROBE_INTERVAL_S - quiet
            self._probe_n += 1
            # Past OUT_MAX too: it is small, and what it tells matters most
            # when output is stuck.
            if self._folds:
                self._put_folds_locked()
            self._out += encode_request("hello", {"id": f"{PROBE_ID_PREFIX}{self._probe_n}"})
            self._probe_at = now
            self._stats.probes += 1
        return max(0.0, self._probe_at + PROBE_TIMEOUT_S - now)

    def _close_conn_locked(self) -> None:
        """At close (lock held; the owner, or the loop's close): everything
        queued is written now, in order, as far as the socket takes it; the
        rest goes to a tail thread (_write_tail) that writes it as cbd
        reads, waited for at most CLOSE_FLUSH_S. Lines kept from a lost
        connection get one connect of their own (a Unix socket's succeeds
        or fails at once). The connection is gone after, the entries
        invalid, waiters woken."""
        if self._folds:
            self._put_folds_locked()  # the open folds are queued lines too
        if self._sock is None and self._out:
            self._connect_locked(watch=False)
        self._flush_locked()
        done = None
        if self._sock is not None and not self._broken and self._out:
            done = threading.Event()
            try:
                threading.Thread(target=_write_tail, args=(self._sock, bytes(self._out), done),
                                 name=f"cbd-close {self.path}", daemon=True).start()
            except RuntimeError:  # the interpreter is finalizing (3.12+)
                done = None
            else:
                self._sock = None  # the tail thread's now
                self._out.clear()
                self._out_partial = False
                self._stats.disconnects += 1
        if done is None:
            self._close_flush_locked()
        self._disconnect_locked()
        self._out.clear()  # no connection will come to write it
        if done is not None:
            # The tail thread ends, or goes on without us.
            self._lock.release()
            try:
                done.wait(CLOSE_FLUSH_S)
            finally:
                self._lock.acquire()

    def _close_flush_locked(self) -> None:
        """At close, when no tail thread could be started: give queued
        outcomes up to CLOSE_FLUSH_S to go."""
        deadline = time.monotonic() + CLOSE_FLUSH_S
        self._flush_locked()
        while self._sock is not None and not self._broken and self._out:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            poller = select.poll()
            poller.register(self._sock, select.POLLOUT)
            self._lock.release()
            try:
                poller.poll(left * 1000)
            finally:
                self._lock.acquire()
            self._flush_locked()

    # -- reading (the owner only, lock not held) -------------------------
    def _read(self, sock: socket.socket) -> bool:
        """Read what cbd sent and apply every full line. False: the
        connection is gone."""
        while True:
            try:
                data = sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            if not data:
                return False
            if self._stop:
                continue  # closed: nothing more is applied
            # Anything from cbd shows it answers (a long line arriving in
            # pieces too).
            with self._lock:
                self._received_at = time.monotonic()
                self._probe_at = None
                if sock is self._sock:
                    self._answered = True
            self._in += data
            start = 0
            while (nl := self._in.find(b"\n", start)) >= 0:
                try:
                    self._apply_line(bytes(self._in[start:nl]), sock)
                except (TypeError, ValueError, AttributeError):
                    # A line of unexpected shape must not stop the owner.
                    with self._lock:
                        self._stats.bad_lines += 1
                start = nl + 1
            del self._in[:start]
            if len(self._in) > LINE_MAX:
                with self._lock:
                    self._stats.line_too_long += 1
                return False

    def _apply_snapshot(self, snap: object, event: bool, reset: bool = False) -> dict | None:
        """Apply a snapshot to its entry; the snapshot as the entry keeps it
        (its policy filled in when known), None when not applied."""
        name = snap.get("name") if isinstance(snap, dict) else None
        if not isinstance(name, str):
            with self._lock:
                self._stats.bad_lines += 1
            return None
        with self._lock:
            e = self._entries.get(name)
            if e is None:
                return None
            if not e.set(snap, reset or event):
                self._stats.bad_lines += 1
                e.valid = False  # cannot tell its state: ask cbd
                return None
            if event:
                # An event's snapshot is of a stored circuit (a watch
                # reply's may be the initial one of a name not created).
                e.last = e.latest
                e.seq += 1
            return e.latest

    def _apply_line(self, line: bytes, sock: socket.socket | None = None) -> None:
        """Apply one line read on sock (None: the current connection)."""
        if not line.strip():
            return
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            with self._lock:
                self._stats.bad_lines += 1
            return
        msg_id = msg.get("id")
        if isinstance(msg_id, str) and msg_id.startswith(PROBE_ID_PREFIX):
            # A hello's reply (the connect's or a probe's): its arrival is a
            # sign of life, and it says whether this cbd takes counted
            # successes (an older one has no outcome_counts, and counts
            # such a line as one success).
            counts = msg.get("outcome_counts")
            takes = isinstance(counts, list) and "success" in counts
            with self._lock:
                if self._sock is not None and (sock is None or sock is self._sock):
                    self._counts_ok = takes
            return
        if isinstance(msg_id, str) and msg_id.startswith(SYNC_ID_PREFIX):
            # The reply to an outcome that could trip: applied before the
            # next line, then its caller goes on.
            snap = msg.get("snapshot") if msg.get("ok") is True else None
            if isinstance(snap, dict):
                snap = self._apply_snapshot(snap, False, True) or snap
            with self._lock:
                waiter = self._waiters.pop(msg_id, None)
            if waiter is not None:
                waiter.deliver(snap if isinstance(snap, dict) else None)
            return
        event = msg.get("event")
        if event is not None:
            with self._lock:
                self._stats.events += 1
        if event == "change":
            self._apply_snapshot(msg.get("snapshot"), True)
        elif event == "policy":
            # A reload changed the circuit's policy (protocol 3): the rule
            # and the entry refresh; the state is as it was. The breakers
            # read it as they read a change event's snapshot.
            with self._lock:
                self._stats.policy_events += 1
            self._apply_snapshot(msg.get("snapshot"), True)
        elif event == "delete":
            name = msg.get("name")
            with self._lock:
                e = self._entries.get(name) if isinstance(name, str) else None
                if e is not None and e.valid:
                    # Gone: the next call creates it closed.
                    e.state, e.hold_state, e.opened_at = CLOSED, None, None
        elif msg.get("ok") is True:
            snaps = msg.get("snapshots")
            for snap in snaps if isinstance(snaps, list) else ():
                self._apply_snapshot(snap, False)
        elif event is None:
            # ok: false to a watch (a protocol 1 cbd): entries stay invalid
            # and breakers keep asking cbd.
            with self._lock:
                self._stats.watch_refused += 1


class ThreadWatchCache(WatchCache):
    """A cache whose connection a reader thread owns (breakers on a
    Client, any thread)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name=f"cbd-watch {path}",
                                        daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # full: the reader is awake already; closed: stopped

    def _run(self) -> None:
        """Connect, read events, flush output (successes on a FLUSH_S timer
        while calls flow), reconnect."""
        lock = self._lock
        lock.acquire()
        try:
            while not self._stop:
                if self._sock is not None and self._probe_expired_locked():
                    self._disconnect_locked()  # cbd does not answer: as if lost
                if self._sock is None:
                    self._connect_locked()
                probe_wait = self._probe_locked()
                self._flush_locked()
                if self._broken:
                    self._disconnect_locked()
                self._cold = False
                if self._sock is None:
                    timeout = RECONNECT_S * 1000
                elif time.monotonic() - self._lazy_at < HOT_S:
                    timeout = FLUSH_S * 1000
                else:
                    timeout = None
                    # The probe's timer is no reason to wake the owner for
                    # output: it still counts as asleep.
                    self._cold = True
                if self._sock is not None and probe_wait is not None:
                    probe_ms = probe_wait * 1000
                    timeout = probe_ms if timeout is None else min(timeout, probe_ms)
                sock = self._sock
                poller = select.poll()
                poller.register(self._wake_r, select.POLLIN)
                if sock is not None:
                    poller.register(sock, select.POLLIN | (select.POLLOUT if self._blocked
                                                           else 0))
                lock.release()
                try:
                    ready = dict(poller.poll(timeout))
                    if self._wake_r.fileno() in ready:
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, InterruptedError):
                            pass
                    gone = (sock is not None and ready.get(sock.fileno(), 0)
                            & (select.POLLIN | select.POLLHUP | select.POLLERR)
                            and not self._read(sock))
                    self._release_dropped()
                finally:
                    lock.acquire()
                if gone:
                    self._disconnect_locked()
            self._close_conn_locked()
        finally:
            lock.release()
            if threading.current_thread() is self._thread and self._stop:
                self._wake_r.close()
                self._wake_w.close()

    def close(self) -> None:
        """Write what is queued (what the socket does not take at once goes
        on as cbd reads it, waited for at most CLOSE_FLUSH_S), stop the
        reader."""
        with self._lock:
            self._stop = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join()


class LoopWatchCache(WatchCache):
    """A cache whose connection an asyncio event loop owns (breakers on an
    AsyncClient, used from that loop): a reader callback and timers."""

    def __init__(self, path: str, loop) -> None:
        super().__init__(path)
        self.loop = loop
        self._hooked: socket.socket | None = None  # registered with the loop
        self._writing = False
        self._timer = None
        self._scheduled = False
        self._wake()

    def usable(self) -> bool:
        return super().usable() and not self.loop.is_closed()

    def _wake(self) -> None:
        if not self._scheduled and not self.loop.is_closed():
            self._scheduled = True
            self.loop.call_soon_threadsafe(self._service)

    def _unhook(self) -> None:
        if self._hooked is not None and not self.loop.is_closed():
            self.loop.remove_reader(self._hooked)
            if self._writing:
                self.loop.remove_writer(self._hooked)
        self._hooked = None
        self._writing = False

    def _service(self) -> None:
        """One turn of the owner: connect, flush, arm the reader, the
        writer and the next timer."""
        self._scheduled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._release_dropped()
        if self._stop:
            return
        with self._lock:
            if self._sock is not None and self._probe_expired_locked():
                self._unhook()  # cbd does not answer: as if lost
                self._disconnect_locked()
            if self._sock is None and self._connect_locked():
                self._hooked = self._sock
                self.loop.add_reader(self._sock, self._readable)
            probe_wait = self._probe_locked()
            self._flush_locked()
            if self._broken:
                self._unhook()
                self._disconnect_locked()
            self._cold = False
            if self._sock is None:
                delay = RECONNECT_S
            elif time.monotonic() - self._lazy_at < HOT_S:
                delay = FLUSH_S
            else:
                delay = None
                self._cold = True  # the probe's timer aside (see _run)
            if self._sock is not None and probe_wait is not None:
                delay = probe_wait if delay is None else min(delay, probe_wait)
            if self._sock is not None and self._blocked != self._writing:
                if self._blocked:
                    self.loop.add_writer(self._sock, self._service)
                else:
                    self.loop.remove_writer(self._sock)
                self._writing = self._blocked
        if delay is not None:
            self._timer = self.loop.call_later(delay, self._service)

    def _readable(self) -> None:
        sock = self._sock
        if sock is not None and not self._read(sock):
            with self._lock:
                if self._sock is sock:
                    self._unhook()
                    self._disconnect_locked()
            self._service()

    def close(self) -> None:
        """Write what is queued (what the socket does not take at once goes
        on as cbd reads it, waited for at most CLOSE_FLUSH_S), drop the
        connection and the loop's callbacks."""
        with self._lock:
            self._stop = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._unhook()
            self._close_conn_locked()


# Every cache of this process: thread-owned ones by socket path,
# loop-owned ones by (loop, socket path).
_registry_lock = threading.Lock()
_registry: dict = {}


def acquire(path: str, loop=None) -> WatchCache:
    """The process's cache for path (for loop: owned by that event loop),
    started on first use; release it when done."""
    with _registry_lock:
        for key in [k for k, c in _registry.items()
                    if isinstance(c, LoopWatchCache) and c.loop.is_closed()]:
            _registry.pop(key).close()  # its loop is gone: close its socket
        key = path if loop is None else (id(loop), path)
        c = _registry.get(key)
        if c is None:
            c = _registry[key] = (ThreadWatchCache(path) if loop is None
                                  else LoopWatchCache(path, loop))
        c.refs += 1
    return c


def release(c: WatchCache) -> None:
    """One user less; the last one stops the cache (its queued outcomes
    written first: see WatchCache._close_conn_locked)."""
    if c.pid != os.getpid() or c._stop:
        return  # a parent's cache, abandoned at fork, or stopped
    with _registry_lock:
        c.refs -= 1
        if c.refs > 0:
            return
        for key, other in list(_registry.items()):
            if other is c:
                del _registry[key]
    c.close()


def stats(path: str, loop=None) -> CacheStats | None:
    """The counters of the process's cache for path, if it has one."""
    with _registry_lock:
        c = _registry.get(path if loop is None else (id(loop), path))
    return c.stats() if c is not None else None


def _write_tail(sock: socket.socket, tail: bytes, done: threading.Event) -> None:
    """A closed cache's tail thread: write what the socket did not take at
    close as cbd reads it (reading and dropping what cbd sends, so its
    replies never block it), then close the connection; give up when cbd
    took nothing for CLOSE_TAIL_IDLE_S or went away. done is set at the
    end."""
    view = memoryview(tail)
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLOUT)
        while view:
            ready = poller.poll(CLOSE_TAIL_IDLE_S * 1000)
            if not ready:
                break  # cbd read nothing for CLOSE_TAIL_IDLE_S
            ev = ready[0][1]
            if ev & (select.POLLERR | select.POLLNVAL):
                break
            if ev & select.POLLIN:
                try:
                    if not sock.recv(READ_CHUNK):
                        break  # cbd closed the connection
                except (BlockingIOError, InterruptedError):
                    pass
            if ev & select.POLLOUT:
                try:
                    view = view[sock.send(view):]
                except (BlockingIOError, InterruptedError):
                    pass
            elif ev & select.POLLHUP:
                break
    except OSError:
        pass  # cbd went away: what is left is lost with it
    finally:
        sock.close()
        done.set()


def _close_all() -> None:
    """At exit: write what every cache has queued (as close() does), stop
    their owners. A tail thread still writing when the interpreter ends
    ends with it: the exit waits for cbd at most CLOSE_FLUSH_S a cache."""
    with _registry_lock:
        caches = list(_registry.values())
        _registry.clear()
    for c in caches:
        if c.pid == os.getpid():
            c.close()


def _forget_after_fork() -> None:
    """The child has no reader threads: forget the parent's caches."""
    global _registry_lock
    _registry_lock = threading.Lock()
    _registry.clear()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_forget_after_fork)

__all__ = ["CacheStats", "WatchCache", "ThreadWatchCache", "LoopWatchCache", "acquire",
           "release", "stats", "PERMIT", "REFUSE", "ASK", "NAMES_MAX", "OUT_MAX",
           "PROBE_INTERVAL_S", "PROBE_TIMEOUT_S"]
