// SPDX-License-Identifier: Apache-2.0
// local.js — circuits kept in this process: cbd's allow / record / get /
// set_state semantics (PROTOCOL.md §7, §7a, §8 "allow and record") over the
// pure state machine of machine.js, with trial slots (half_open_max,
// slot_ttl_ms). The breaker's LOCAL fallback runs here while cbd is
// unreachable, and a private breaker (no cbd) runs here always. Every method
// takes the policy and `now` (ms) from the caller; nothing reads a clock.
// Each circuit's window is emptied on every transition, as cbd does. One
// process reports, so min_reporters counts as 1.

import { randomBytes } from 'node:crypto';
import * as m from './machine.js';

/** A snapshot as cbd writes one (§7), for a local circuit. */
export function snapshotObject(name, snap, policy, now) {
  return {
    name, state: snap.state, failure_count: snap.failure_count, success_count: snap.success_count,
    last_failure_at: snap.last_failure_at, opened_at: snap.opened_at,
    retry_after_ms: m.retryAfterMs(snap, policy, now), current_break_ms: m.breakMs(snap, policy), hold: null,
  };
}

export class LocalStore {
  constructor() {
    this.circuits = new Map(); // name -> {snap, window, slots: Map token -> expires_at}
    this.instance = randomBytes(8).toString('hex');
    this.counter = 0;
  }

  circuit(name) {
    let c = this.circuits.get(name);
    if (!c) {
      c = { snap: m.initialSnapshot(), window: null, slots: new Map() };
      this.circuits.set(name, c);
    }
    return c;
  }

  static windowOf(c, policy) {
    if (policy.trip !== m.TRIP_RATE) return null;
    if (!c.window || !c.window.fits(policy.window, policy.window_size)) c.window = new m.Window(policy.window, policy.window_size);
    return c.window;
  }

  static transitioned(c, before) {
    if (c.snap.state !== before && c.window) c.window.reset();
  }

  /** Start name from snap (a copy), with no slots and an empty window. */
  seed(name, snap, now) {
    const s = { ...snap };
    if (s.state !== m.CLOSED && s.opened_at === null) s.opened_at = now;
    this.circuits.set(name, { snap: s, window: null, slots: new Map() });
  }

  forget(name) {
    this.circuits.delete(name);
  }

  get(name, policy, now) {
    const c = this.circuits.get(name);
    return snapshotObject(name, c ? c.snap : m.initialSnapshot(), policy, now);
  }

  /** The window's counts at now (null without one). */
  window(name, now) {
    const w = this.circuits.get(name)?.window;
    return w ? w.counts(now) : null;
  }

  /** cbd's allow: may I call? A half_open grant carries a permit. */
  allow(name, policy, now) {
    const c = this.circuit(name);
    const before = c.snap.state;
    m.onAllow(c.snap, policy, now);
    LocalStore.transitioned(c, before);
    if (c.snap.state === m.CLOSED) return { allowed: true, state: m.CLOSED };
    if (c.snap.state === m.OPEN) return { allowed: false, state: m.OPEN, retry_after_ms: m.retryAfterMs(c.snap, policy, now) };
    for (const [token, expiresAt] of c.slots) if (now >= expiresAt) c.slots.delete(token);
    if (c.slots.size >= policy.half_open_max) {
      return { allowed: false, state: m.HALF_OPEN, retry_after_ms: Math.max(0, Math.min(...c.slots.values()) - now) };
    }
    this.counter += 1;
    const permit = `${this.instance}-${this.counter.toString(16).padStart(16, '0')}`;
    const expiresAt = now + policy.slot_ttl_ms;
    c.slots.set(permit, expiresAt);
    return { allowed: true, state: m.HALF_OPEN, permit, expires_at: expiresAt };
  }

  /** cbd's record: the outcome, its slot given back; the snapshot after. */
  record(name, outcome, policy, now, durationMs = null, permit = null) {
    if (!['success', 'failure', 'ignore'].includes(outcome)) throw new RangeError('outcome must be success, failure or ignore');
    let c = this.circuits.get(name);
    if (!c && outcome === 'ignore') return snapshotObject(name, m.initialSnapshot(), policy, now);
    c = c || this.circuit(name);
    if (permit != null) c.slots.delete(permit);
    if (outcome !== 'ignore') {
      const slow = policy.slow_call_ms > 0 && durationMs != null && durationMs >= policy.slow_call_ms;
      const before = c.snap.state;
      m.onOutcome(c.snap, policy, now, outcome === 'failure', slow, LocalStore.windowOf(c, policy));
      LocalStore.transitioned(c, before);
    }
    return snapshotObject(name, c.snap, policy, now);
  }

  setState(name, state, policy, now) {
    const c = this.circuit(name);
    m.force(c.snap, state, now);
    if (c.window) c.window.reset();
    return snapshotObject(name, c.snap, policy, now);
  }
}
