// SPDX-License-Identifier: Apache-2.0
// machine.js — the circuit-breaker state machine, pure: PROTOCOL.md §7 and
// §7a (consecutive and rate rules, count and time windows, slow calls,
// min_reporters, break_backoff) as cbd's src/core/breaker.c and src/core/window.c run
// them. No I/O and no clock reads: every decision takes `now` (ms since the
// Unix epoch) from the caller, so the LOCAL fallback and the tests (virtual
// time, proto/traces/state-machine.json) run the same code.

export const CLOSED = 'closed';
export const OPEN = 'open';
export const HALF_OPEN = 'half_open';
export const STATES = Object.freeze([CLOSED, OPEN, HALF_OPEN]);

export const TRIP_CONSECUTIVE = 'consecutive';
export const TRIP_RATE = 'rate';
export const WINDOW_COUNT = 'count';
export const WINDOW_TIME = 'time';

// Bounds of the protocol's numbers (§5).
export const COUNT_MAX = 1_000_000_000;
export const DURATION_MAX = 2 ** 53;
// A time window's bucket: one second (§7a).
export const WINDOW_BUCKET_MS = 1000;

// Why a transition happened (the texts cbd logs).
export const REASON_FAILURE_THRESHOLD = 'failure threshold reached';
export const REASON_FAILURE_RATE = 'failure or slow-call rate reached';
export const REASON_TRIAL_FAILED = 'trial call failed';
export const REASON_TRIAL_SUCCEEDED = 'trial calls succeeded';
export const REASON_BREAK_ELAPSED = 'break elapsed';

// The built-in presets of §7a.
export const PRESETS = Object.freeze({
  'http-external': { trip: TRIP_RATE, window: WINDOW_COUNT, window_size: 10, minimum_calls: 5, failure_rate: 50, break_ms: 30000 },
  service: { trip: TRIP_RATE, window: WINDOW_COUNT, window_size: 10, minimum_calls: 5, failure_rate: 50, break_ms: 30000 },
  database: { trip: TRIP_RATE, window: WINDOW_COUNT, window_size: 5, minimum_calls: 3, failure_rate: 30, break_ms: 15000 },
});

// The built-in defaults of §6 (0: unset for max_gap_ms, slow_call_ms,
// break_max_ms; window_size 0: 100 calls / 60000 ms; slot_ttl_ms 0: break_ms).
const DEFAULTS = Object.freeze({
  trip: TRIP_CONSECUTIVE, failure_threshold: 5, success_threshold: 2, break_ms: 30000,
  half_open_max: 1, slot_ttl_ms: 0, max_gap_ms: 0, window: WINDOW_COUNT, window_size: 0,
  minimum_calls: 10, failure_rate: 50, slow_call_ms: 0, slow_call_rate: 100,
  min_reporters: 1, reporter_window_ms: 60000, break_backoff: 1, break_max_ms: 0,
});
export const POLICY_KEYS = Object.freeze([...Object.keys(DEFAULTS), 'preset']);

/** A resolved policy from a ctx (§6): a preset below its own keys, the
 * built-in defaults for the rest; unknown keys and null are ignored. */
export function resolvePolicy(ctx = {}) {
  const p = { ...DEFAULTS };
  const preset = ctx?.preset;
  if (preset != null) {
    if (!Object.hasOwn(PRESETS, preset)) throw new RangeError(`preset "${preset}" is not a built-in preset`);
    Object.assign(p, PRESETS[preset]);
  }
  for (const k of Object.keys(DEFAULTS)) if (ctx?.[k] != null) p[k] = ctx[k];
  if (!p.window_size) p.window_size = p.window === WINDOW_COUNT ? 100 : 60000;
  if (!p.slot_ttl_ms) p.slot_ttl_ms = p.break_ms;
  return p;
}

/** The policy a snapshot reports (§7: every key, null for unset). */
export function policyFromReported(reported) {
  const ctx = { ...(reported || {}) };
  delete ctx.source;
  delete ctx.preset;
  return resolvePolicy(ctx);
}

/** The initial snapshot (§7), less name and retry_after_ms. */
export function initialSnapshot() {
  return { state: CLOSED, failure_count: 0, success_count: 0, last_failure_at: null, opened_at: null, current_break_ms: 0 };
}

/** A snapshot cbd sent, as the machine keeps it (current_break_ms 0 when it
 * is the policy's break_ms: the snapshot's policy, else the one given, known
 * from an earlier snapshot: protocol 3 snapshots are compact). */
export function snapshotFromReply(snap, policy = null) {
  const s = initialSnapshot();
  s.state = snap.state ?? CLOSED;
  s.failure_count = snap.failure_count || 0;
  s.success_count = snap.success_count || 0;
  s.last_failure_at = snap.last_failure_at ?? null;
  s.opened_at = snap.opened_at ?? null;
  const cur = snap.current_break_ms;
  if (cur && cur !== (snap.policy ?? policy)?.break_ms) s.current_break_ms = cur;
  return s;
}

/** The rate rule's sliding window: the last N calls (count) or the calls of
 * the last N ms in one-second buckets (time). */
export class Window {
  constructor(kind, size) {
    this.kind = kind;
    this.slots = kind === WINDOW_COUNT ? size : Math.ceil(size / WINDOW_BUCKET_MS);
    this.reset();
  }

  fits(kind, size) {
    return this.kind === kind && this.slots === (kind === WINDOW_COUNT ? size : Math.ceil(size / WINDOW_BUCKET_MS));
  }

  reset() {
    this.calls = this.failures = this.slow = 0;
    if (this.kind === WINDOW_COUNT) {
      this.ring = Array.from({ length: this.slots }, () => [false, false]);
      this.next = 0;
    } else {
      this.buckets = Array.from({ length: this.slots }, () => [0, 0, 0]);
      this.lastSecond = null;
    }
  }

  advance(second) {
    const last = this.lastSecond;
    if (last !== null && second <= last) return;
    const start = last === null || second - last > this.slots ? second - this.slots + 1 : last + 1;
    for (let s = start; s <= second; s++) {
      const b = this.buckets[((s % this.slots) + this.slots) % this.slots];
      this.calls -= b[0];
      this.failures -= b[1];
      this.slow -= b[2];
      b[0] = b[1] = b[2] = 0;
    }
    this.lastSecond = second;
  }

  add(failure, slow, now) {
    const f = failure ? 1 : 0;
    const sl = slow ? 1 : 0;
    if (this.kind === WINDOW_COUNT) {
      if (this.calls === this.slots) {
        const [of, os] = this.ring[this.next];
        this.calls -= 1;
        this.failures -= of ? 1 : 0;
        this.slow -= os ? 1 : 0;
      }
      this.ring[this.next] = [failure, slow];
      this.next = (this.next + 1) % this.slots;
    } else {
      this.advance(Math.floor(now / WINDOW_BUCKET_MS));
      // A clock behind the newest bucket counts in the newest bucket.
      const b = this.buckets[this.lastSecond % this.slots];
      b[0] += 1;
      b[1] += f;
      b[2] += sl;
    }
    this.calls += 1;
    this.failures += f;
    this.slow += sl;
  }

  /** {calls, failures, slow} in the window at now. */
  counts(now) {
    if (this.kind === WINDOW_TIME && this.lastSecond !== null) this.advance(Math.floor(now / WINDOW_BUCKET_MS));
    return { calls: this.calls, failures: this.failures, slow: this.slow };
  }
}

/** The break in effect: break_ms, or the one break_backoff grew. */
export function breakMs(snap, policy) {
  return snap.current_break_ms > 0 ? snap.current_break_ms : policy.break_ms;
}

function chainContinues(snap, policy, now) {
  if (policy.max_gap_ms <= 0 || snap.last_failure_at === null) return true;
  return now - snap.last_failure_at <= policy.max_gap_ms;
}

export function breakElapsed(snap, policy, now) {
  if (snap.state !== OPEN) return false;
  if (snap.opened_at === null) return true;
  return now - snap.opened_at >= breakMs(snap, policy);
}

export function retryAfterMs(snap, policy, now) {
  if (snap.state !== OPEN || breakElapsed(snap, policy, now)) return 0;
  const elapsed = now > snap.opened_at ? now - snap.opened_at : 0;
  return breakMs(snap, policy) - elapsed;
}

function tripOpen(snap, now) {
  snap.state = OPEN;
  snap.opened_at = now;
  snap.success_count = 0;
}

function trialFailed(snap, policy, now) {
  if (policy.break_backoff > 1) {
    let grown = Math.min(breakMs(snap, policy) * policy.break_backoff, DURATION_MAX);
    if (policy.break_max_ms > 0 && grown > policy.break_max_ms) grown = policy.break_max_ms;
    snap.current_break_ms = grown;
  }
  tripOpen(snap, now);
  snap.last_failure_at = now;
}

/** A forced state (set_state, the break elapsing). */
export function force(snap, state, now) {
  if (!STATES.includes(state)) throw new RangeError(`state must be one of ${STATES.join(', ')}`);
  snap.state = state;
  if (state === CLOSED) {
    snap.failure_count = snap.success_count = 0;
    snap.opened_at = null;
    snap.current_break_ms = 0;
  } else if (state === OPEN) {
    snap.opened_at = now;
    snap.success_count = 0;
  } else {
    snap.success_count = 0;
  }
}

/** Open with its break elapsed moves to half_open; the reason, or null. */
export function onAllow(snap, policy, now) {
  if (!breakElapsed(snap, policy, now)) return null;
  force(snap, HALF_OPEN, now);
  return REASON_BREAK_ELAPSED;
}

/** Apply one call's outcome; the reason of a transition, or null. The
 * window is not emptied here (the caller does, on every transition). */
export function onOutcome(snap, policy, now, failure, slow = false, window = null) {
  const slowRule = policy.slow_call_ms > 0;
  const bad = failure || (slow && policy.trip === TRIP_RATE && slowRule);
  if (snap.state === CLOSED) {
    if (failure) {
      snap.failure_count = chainContinues(snap, policy, now) ? snap.failure_count + 1 : 1;
      snap.last_failure_at = now;
    } else {
      snap.failure_count = 0;
    }
    let trips;
    if (policy.trip === TRIP_RATE) {
      trips = false;
      if (window) {
        window.add(failure, slowRule && slow, now);
        const c = window.counts(now);
        trips = c.calls > 0 && c.calls >= policy.minimum_calls &&
          (c.failures * 100 >= policy.failure_rate * c.calls || (slowRule && c.slow * 100 >= policy.slow_call_rate * c.calls));
      }
    } else {
      trips = failure && snap.failure_count >= policy.failure_threshold;
    }
    if (!trips) return null;
    tripOpen(snap, now);
    return policy.trip === TRIP_RATE ? REASON_FAILURE_RATE : REASON_FAILURE_THRESHOLD;
  }
  if (snap.state === HALF_OPEN) {
    if (bad) {
      trialFailed(snap, policy, now);
      return REASON_TRIAL_FAILED;
    }
    snap.success_count += 1;
    if (snap.success_count < policy.success_threshold) return null;
    snap.state = CLOSED;
    snap.failure_count = snap.success_count = 0;
    snap.opened_at = null;
    snap.current_break_ms = 0;
    return REASON_TRIAL_SUCCEEDED;
  }
  // open: a straggler never extends the break window.
  if (failure) snap.last_failure_at = now;
  return null;
}
