// SPDX-License-Identifier: Apache-2.0
// breaker.js — the breaker API, as libcbclient's (client/circuit-breaker.c
// over client/store-resilient.c): execute / call with a fallback, three-way
// classification, the call's duration (performance.now()) reported as
// duration_ms, half-open permits always handed back (also when the call
// throws or is aborted), 'stateChange' events, wrap(asyncFn); and the store
// policies for when cbd is unreachable:
//
//   LOCAL   carry on with a private copy of the circuit (local.js), seeded
//           from the last state cbd reported and run with the policy cbd
//           reported for it (a hold too: held open stays open until the
//           hold's end, held closed never opens);
//   ALLOW   calls run as if the circuit were closed;
//   REJECT  acquire rejects with the UnavailableError without running the
//           call; bookkeeping after a call never throws.
//
// No latching: every call asks cbd first, and its first answer makes it
// authoritative again (the local copy is dropped). After a timeout cbd is
// skipped for timeoutBackoffMs, so a hung cbd costs one timeout per window.
//
// Cached mode (cache.js; on by default with cbd, off with cached: false):
// a call decides from the process's watch cache when it can — closed runs
// at once and its outcome goes as a noreply line, open within its break is
// refused locally — and otherwise (half_open, break elapsed, name not read,
// no live watch, a breaker's first call) asks cbd as above.

import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import * as m from './machine.js';
import { LocalStore } from './local.js';
import { Client } from './connection.js';
import { joinCache, leaveCache, PERMIT, policyRev, REFUSE } from './cache.js';
import { CbdError, CbdTimeoutError, CircuitOpenError, RefusedError, refusal, storeFailed } from './errors.js';
import { classifyDefault, FAILURE, IGNORE, OUTCOMES, SUCCESS } from './classify.js';

export const LOCAL = 'local';
export const ALLOW = 'allow';
export const REJECT = 'reject';
export const STORE_POLICIES = Object.freeze([LOCAL, ALLOW, REJECT]);
// After a timeout, cbd is skipped for this long (CBC_DEFAULT_TIMEOUT_BACKOFF_MS).
export const DEFAULT_TIMEOUT_BACKOFF_MS = 250;
export const TIMEOUT_BACKOFF_MAX_MS = 3_600_000;
// Refusals made from the cache are reported to cbd in batches (protocol 3
// §6): the first waits at most this long for others while refusals go on;
// the batch also goes when the cache stops refusing and on close().
const REJECTED_FLUSH_MS = 1000;
// Most refusals one record reports (cbd's bound on count).
const REJECTED_COUNT_MAX = 1_000_000;
// The longest wait for a bulkhead ticket cbd takes (allow's wait_ms).
export const WAIT_MS_MAX = 60_000;
// Policy members of protocol 3 (§7b) a breaker may declare besides the
// state machine's.
const LIMIT_KEYS = Object.freeze(['max_concurrent', 'retry_budget_percent', 'retry_min_per_s']);
// A circuit name's length in bytes (§5).
export const NAME_MAX_BYTES = 256;

/** A granted call: report its outcome exactly once. */
export class Permit {
  constructor(name, state, token = null, local = false, cached = false) {
    this.name = name;
    this.state = state;
    this.token = token; // allow's permit (a trial slot or a bulkhead ticket)
    this.local = local; // granted by the local fallback
    this.cached = cached; // granted by the watch cache (closed)
    this.started = performance.now();
    this.reported = false;
  }
}

/**
 * A circuit breaker on the cbd circuit `name`. Options: client (a Client;
 * default one on socketPath, else $CBD_SOCKET, else /run/cbd/cbd.sock),
 * storePolicy ('local' | 'allow' | 'reject'), classify (error or result ->
 * 'success' | 'failure' | 'ignore'), classifyResults (also classify
 * returned values, e.g. fetch Responses), fallback(err), timeoutBackoffMs,
 * clock (ms since the epoch: virtual time, sent as ctx.now), policy (the
 * §6 members to declare; normally the operator's config decides), cached
 * (decide from the process's watch cache: by default when on cbd without
 * a clock; false: every call asks cbd; true: insist, RangeError without cbd
 * or with a clock — the cache keeps real time), waitMs (0..60000: how long
 * a call waits in cbd for a bulkhead ticket when the circuit's
 * max_concurrent calls are all in flight, before BulkheadFullError; such
 * allows go over connections of their own, with the client's ioTimeoutMs
 * plus waitMs).
 * Bulkhead (protocol 3): on a circuit with max_concurrent every granted
 * call holds a ticket (its permit), handed back with its outcome whatever
 * the call does (returns, throws, rejects, is aborted); such calls never
 * come from the watch cache. Refusals reject with a RefusedError:
 * CircuitOpenError, BulkheadFullError, RetryBudgetError (a retry past the
 * retry budget: acquire({ retry: true })).
 * Events: 'stateChange' (prev, state, error), 'storeError' (error, op).
 * close() leaves the cache (writing what is queued) and closes the client
 * the breaker made itself.
 */
export class Breaker extends EventEmitter {
  constructor(name, options = {}) {
    super();
    if (typeof name !== 'string' || Buffer.byteLength(name) < 1 || Buffer.byteLength(name) > NAME_MAX_BYTES) {
      throw new RangeError(`name must be a string of 1 to ${NAME_MAX_BYTES} bytes`);
    }
    const {
      client, socketPath, storePolicy = LOCAL, classify = classifyDefault, classifyResults = false, fallback = null,
      timeoutBackoffMs = DEFAULT_TIMEOUT_BACKOFF_MS, clock = null, policy = {}, private: priv = false, cached, waitMs = 0,
    } = options;
    if (!(Number.isInteger(waitMs) && waitMs >= 0 && waitMs <= WAIT_MS_MAX)) throw new RangeError(`waitMs must be an integer from 0 to ${WAIT_MS_MAX}`);
    if (cached !== undefined && typeof cached !== 'boolean') throw new TypeError('cached must be a boolean');
    if (cached === true && (priv || clock)) {
      throw new RangeError(priv ? 'cached: true needs cbd (not a private breaker)' : 'cached: true with a clock: the cache keeps real time');
    }
    if (!STORE_POLICIES.includes(storePolicy)) throw new RangeError(`storePolicy must be one of ${STORE_POLICIES.join(', ')}`);
    if (!(timeoutBackoffMs >= 0 && timeoutBackoffMs <= TIMEOUT_BACKOFF_MAX_MS)) {
      throw new RangeError(`timeoutBackoffMs must be from 0 to ${TIMEOUT_BACKOFF_MAX_MS}`);
    }
    for (const k of Object.keys(policy)) if (!m.POLICY_KEYS.includes(k) && !LIMIT_KEYS.includes(k)) throw new TypeError(`unknown policy member "${k}"`);
    this.name = name;
    this.storePolicy = storePolicy;
    this.classify = classify;
    this.classifyResults = classifyResults;
    this.fallback = fallback;
    this.timeoutBackoffMs = timeoutBackoffMs;
    this.waitMs = waitMs;
    // Connections of waiting allows (waitMs): cbd reads nothing else of a
    // connection while its allow waits, so a wait never holds up the
    // breaker's client (nor the records that free tickets). Idle ones are
    // kept open: a ticket goes back when its connection closes.
    this.waitConns = [];
    this.clock = clock;
    this.ctx = Object.fromEntries(Object.entries(policy).filter(([, v]) => v != null));
    this.policy = m.resolvePolicy(this.ctx); // throws on a bad preset
    this.ownsClient = !priv && !client;
    this.client = priv ? null : client || new Client(socketPath);
    this.observed = m.CLOSED;
    this.local = new LocalStore();
    this.degraded = priv;
    this.skipUntil = 0;
    this.skipError = null;
    // What cbd last said about the circuit (for the LOCAL fallback).
    this.seen = m.initialSnapshot();
    this.seenPolicy = null;
    this.seenPolicyRev = null;
    this.seenHold = null;
    // Cached mode: the process's cache for the client's socket and this
    // name's entry in it (null past the cache's name limit: uncached).
    this.cacheMembership = null;
    this.cache = null;
    this.cacheEntry = null;
    this.primed = false; // cbd answered a call: the circuit has our policy
    this.told = null; // {seq, state}: cbd's last answer to this breaker (see noteTold)
    // Refusals made from the cache not yet reported, and when the first of
    // them was made (Date.now(); 0: none pending).
    this.rejectedN = 0;
    this.rejectedSince = 0;
    if (this.client && !clock && cached !== false) {
      this.cacheMembership = joinCache(this.client.socketPath, name, this);
      this.cache = this.cacheMembership.cache;
      this.cacheEntry = this.cacheMembership.entry;
      const ctx = Object.keys(this.ctx).length ? this.ctx : undefined;
      this.noreplyHead = {};
      for (const [outcome, op] of [[SUCCESS, 'record_success'], [FAILURE, 'record_failure'], [IGNORE, 'record']]) {
        const head = JSON.stringify({ op, name, outcome: outcome === IGNORE ? IGNORE : undefined, ctx, noreply: true }).slice(0, -1);
        this.noreplyHead[outcome] = { text: `${head},"duration_ms":`, bytes: Buffer.byteLength(head) + 15 };
        // Counted successes (PROTOCOL.md §14 item 12): the head is a fold's
        // key, then ,"count":N}\n.
        if (outcome === SUCCESS) this.foldHead = head;
      }
      // A success as slow as the ctx's slow_call_ms is not folded.
      this.foldSlowMs = Number.isInteger(this.ctx.slow_call_ms) && this.ctx.slow_call_ms >= 0 ? this.ctx.slow_call_ms : null;
      // Refusals made from the cache, less N}\n.
      this.rejectedHead = `${JSON.stringify({ op: 'record', name, outcome: 'rejected', ctx, noreply: true }).slice(0, -1)},"count":`;
      // The same with a reply (an outcome that could trip), which carries
      // the circuit's policy (protocol 3 §1) to refresh the cache's rule.
      this.syncHead = {};
      for (const [outcome, op] of [[SUCCESS, 'record_success'], [FAILURE, 'record_failure']]) {
        this.syncHead[outcome] = `${JSON.stringify({ op, name, ctx, policy: true }).slice(0, -1)},"duration_ms":`;
      }
    }
  }

  /** Does this breaker decide from the watch cache? */
  get cached() {
    return this.cacheEntry !== null;
  }

  /** Can the cache decide this breaker's calls now (its watch connection
   * is live and has read the circuit)? Its first call asks cbd anyway. */
  get cacheLive() {
    return this.cacheEntry !== null && this.cache.live && this.cache.answered && this.cacheEntry.valid;
  }

  /** The watch cache's counters (cache.js cacheStats), null when uncached. */
  cacheStats() {
    return this.cacheEntry ? this.cache.snapshotStats() : null;
  }

  /** Leave the watch cache (the last breaker of the process writes what is
   * queued and ends its connection, never waiting for cbd: see cache.js);
   * close the client the breaker made itself. Later calls ask cbd. */
  async close() {
    const membership = this.cacheMembership;
    if (membership) {
      // Written now, with what is queued before it, not left to a timer.
      this.rejectedFlush(true);
      this.cacheMembership = null;
      this.cache = null;
      this.cacheEntry = null;
      await leaveCache(membership);
    }
    if (this.ownsClient) this.client.close();
    for (const c of this.waitConns.splice(0)) c.close();
  }

  /** From the cache: a snapshot of the circuit (a watch reply's, or a
   * change event's: of a stored circuit, remembered for the fallback). */
  cacheUpdated(snap, fromEvent) {
    // A watch reply's too (a hold placed while the cache was away): the
    // next fallback starts from what the cache read, unless it predates
    // the circuit's creation (the defaults' policy, not the declared one).
    if (fromEvent || (this.primed && this.policyApplies(snap))) this.noteSnapshot(snap);
    this.observe(snap.state);
  }

  /** Is snap of the circuit as this breaker's first call created it? */
  policyApplies(snap) {
    if (Object.keys(this.ctx).length === 0) return true;
    const source = snap.policy?.source;
    return !!source && typeof source === 'object' && Object.values(source).includes('client');
  }

  /** From the cache: the circuit was deleted (the next call creates it). */
  cacheDeleted() {
    this.seen = m.initialSnapshot();
    this.observe(m.CLOSED);
  }

  /** A breaker on an in-process circuit only (no cbd). */
  static private(name = 'default', options = {}) {
    return new Breaker(name, { ...options, private: true });
  }

  // -- time and observation --------------------------------------------
  now() {
    return this.clock ? this.clock() : Date.now();
  }

  callCtx() {
    if (!this.clock) return Object.keys(this.ctx).length ? this.ctx : undefined;
    return { ...this.ctx, now: this.clock() };
  }

  ctxNow(ctx) {
    return ctx && 'now' in ctx ? ctx.now : this.now();
  }

  /** The last state seen, without I/O. */
  get state() {
    return this.observed;
  }

  observe(state, error = null, degraded = false) {
    if (degraded && this.storePolicy === ALLOW) return; // "as if closed" is no state
    const prev = this.observed;
    this.observed = state;
    if (prev !== state) this.emit('stateChange', prev, state, error);
  }

  // -- cbd, and falling back ---------------------------------------------
  failed(err, op, skipped) {
    if (!skipped && err instanceof CbdTimeoutError && this.timeoutBackoffMs > 0) {
      this.skipUntil = performance.now() + this.timeoutBackoffMs;
      this.skipError = err;
    }
    this.emit('storeError', err, op);
  }

  /** Ask cbd: {reply} or {err} when cbd is unavailable. Refusals that are
   * answers (bad_request, forbidden, capacity) are thrown as they are. */
  async remote(op, fn) {
    if (!this.client) return { reply: null, err: null };
    if (this.skipUntil && performance.now() < this.skipUntil) {
      this.failed(this.skipError, op, true);
      return { reply: null, err: this.skipError };
    }
    try {
      const reply = await fn();
      if (this.degraded) {
        this.degraded = false;
        this.local.forget(this.name);
      }
      return { reply, err: null };
    } catch (e) {
      if (!storeFailed(e)) throw e;
      this.failed(e, op, false);
      return { reply: null, err: e };
    }
  }

  /** What cbd said of the circuit. Its policy is kept with its policy_rev
   * (protocol 3 §1): a compact snapshot of another rev makes it unknown
   * (the declared policy runs the fallback) until the next uncached record
   * asks for it. */
  noteSnapshot(snap) {
    const rev = policyRev(snap);
    if (snap.policy != null && typeof snap.policy === 'object') {
      this.seenPolicy = snap.policy;
      this.seenPolicyRev = rev;
    } else if (rev !== this.seenPolicyRev) {
      this.seenPolicy = null; // stale: the policy changed since
    }
    this.seen = m.snapshotFromReply(snap, this.seenPolicy);
    this.seenHold = snap.hold ?? null;
  }

  noteAllow(reply, now) {
    const state = reply.state;
    const seen = this.seen;
    if (state === m.OPEN && seen.state !== m.OPEN) {
      seen.state = m.OPEN;
      seen.opened_at = now - (m.breakMs(seen, this.fallbackPolicy()) - (reply.retry_after_ms || 0));
    } else if ((state === m.CLOSED || state === m.HALF_OPEN) && seen.state !== state) {
      m.force(seen, state, now);
    }
  }

  /** The policy the local copy runs: cbd's for the circuit when it reported
   * one (a hold kept through it), else the declared one. One process
   * reports, so min_reporters is 1. */
  fallbackPolicy() {
    if (this.seenPolicy == null) return { ...this.policy, min_reporters: 1 };
    const policy = m.policyFromReported(this.seenPolicy);
    policy.min_reporters = 1;
    const hold = this.seenHold;
    if (hold && hold.state === m.OPEN) {
      const until = hold.until;
      const opened = this.seen.opened_at;
      policy.break_ms = until == null || opened == null ? m.DURATION_MAX : Math.max(1, until - opened);
      policy.break_backoff = 1;
      policy.break_max_ms = 0;
    } else if (hold) {
      policy.trip = m.TRIP_CONSECUTIVE;
      policy.failure_threshold = m.COUNT_MAX;
    }
    return policy;
  }

  /** The break in effect as last seen, else the declared one. */
  breakMs() {
    return m.breakMs(this.seen, this.fallbackPolicy());
  }

  degrade(now) {
    if (!this.degraded) {
      this.local.seed(this.name, { ...this.seen }, now);
      this.degraded = true;
    }
  }

  // -- the two-step form --------------------------------------------------
  /** Does the circuit have a bulkhead or a retry budget, as declared or as
   * cbd last reported? Its calls then ask cbd (a ticket is never granted
   * from a cache; first attempts are what the budget is a percent of). */
  limited() {
    if (this.ctx.max_concurrent != null || this.ctx.retry_budget_percent != null) return true;
    const p = this.seenPolicy;
    return !!p && (p.max_concurrent != null || p.retry_budget_percent != null);
  }

  /** allow on the client, or (waitMs) on a connection of its own. */
  async allowRemote(ctx, retry) {
    if (!this.waitMs) return this.client.allow(this.name, ctx, { retry });
    const conn = this.waitConns.pop() || new Client(this.client.socketPath, {
      connectTimeoutMs: this.client.connectTimeoutMs, ioTimeoutMs: this.client.ioTimeoutMs + this.waitMs,
    });
    try {
      return await conn.allow(this.name, ctx, { waitMs: this.waitMs, retry });
    } finally {
      if (this.waitConns.length < 64) this.waitConns.push(conn);
      else conn.close();
    }
  }

  /** A Permit for one call; rejects with a RefusedError: CircuitOpenError,
   * BulkheadFullError (after waiting up to waitMs), RetryBudgetError
   * (REJECT: with the UnavailableError when cbd is unavailable). Options:
   * retry (the call is a retry of one that failed: counted against the
   * circuit's retry budget, always asks cbd), signal (an AbortSignal:
   * aborted while cbd has not answered, acquire rejects with its reason at
   * once and a ticket granted later is handed back at once). */
  async acquire({ retry = false, signal } = {}) {
    signal?.throwIfAborted();
    if (retry || (this.cacheEntry && this.limited())) {
      if (this.cacheEntry) this.cache.stats.uncachedCalls += 1;
    } else if (this.cacheEntry && !this.primed) {
      this.cache.stats.uncachedCalls += 1; // the first call creates the circuit
    } else if (this.cacheEntry) {
      // Otherwise ASK (counted by decide): on to cbd below.
      const { verdict, retryAfterMs } = this.cache.decide(this.cacheEntry, this.told);
      if (verdict === REFUSE) this.rejectedAdd();
      else if (this.rejectedN) this.rejectedFlush(); // it stopped refusing
      if (verdict === PERMIT || verdict === REFUSE) {
        if (this.degraded) {
          // The cache reads cbd again: cbd is authoritative.
          this.degraded = false;
          this.local.forget(this.name);
        }
        if (verdict === PERMIT) {
          this.observe(m.CLOSED);
          return new Permit(this.name, m.CLOSED, null, false, true);
        }
        this.observe(m.OPEN);
        throw new CircuitOpenError(this.name, m.OPEN, retryAfterMs, this.cacheEntry.hold?.state === m.OPEN ? 'held' : 'open');
      }
    }
    const ctx = this.callCtx();
    const asked = this.remote('allow', () => this.allowRemote(ctx, retry));
    const { reply: answer, err } = signal ? await this.abortable(asked, signal, ctx) : await asked;
    let reply = answer;
    const degraded = reply === null;
    if (!degraded) this.primed = true;
    const now = this.ctxNow(ctx);
    if (degraded) {
      if (this.storePolicy === ALLOW) return new Permit(this.name, m.CLOSED);
      if (this.storePolicy === REJECT && this.client) throw err;
      this.degrade(now);
      reply = this.local.allow(this.name, this.fallbackPolicy(), now);
    } else {
      this.noteAllow(reply, now);
      this.noteTold(reply.state);
    }
    this.observe(reply.state, null, degraded);
    if (!reply.allowed) throw refusal(this.name, reply);
    return new Permit(this.name, reply.state, reply.permit ?? null, degraded);
  }

  /** asked, or signal's reason when it aborts first: the allow then goes
   * on, and a permit it brings goes back at once (outcome ignore). */
  abortable(asked, signal, ctx) {
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        reject(signal.reason);
        asked.then(({ reply }) => {
          if (reply?.permit) this.client.record(this.name, IGNORE, { permit: reply.permit, ctx, noreply: true }).catch(() => {});
        }, () => {});
      };
      signal.addEventListener('abort', onAbort, { once: true });
      asked.then((v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      }, (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      });
    });
  }

  /** Record a granted call's outcome (with its duration: by default the
   * time since acquire) and hand its permit back. Never rejects for cbd's
   * sake: bookkeeping does not replace the call's own result. */
  async report(permit, outcome, durationMs = null, error = null) {
    if (!OUTCOMES.includes(outcome)) throw new RangeError('outcome must be success, failure or ignore');
    if (permit.reported) throw new Error(`permit for circuit "${this.name}" was already reported`);
    permit.reported = true;
    if (durationMs == null) durationMs = Math.max(0, Math.floor(performance.now() - permit.started));
    // Every outcome of a cached breaker, whatever its path, is counted
    // against the circuit's rule; one that could trip is sent with a reply
    // awaited, so the next call sees the state it led to.
    const couldTrip = this.cacheEntry ? this.cacheEntry.own.count(outcome, durationMs) : false;
    if (permit.cached && this.cacheEntry && couldTrip) {
      const { snap, sent } = await this.cache.sendSync(this.syncHead[outcome] + durationMs, this, outcome, durationMs);
      if (sent) {
        if (snap) {
          this.noteSnapshot(snap);
          this.noteTold(snap.state);
          this.observe(snap.state, outcome === FAILURE ? error : null);
        }
        return;
      }
    } else if (permit.cached && this.cacheEntry) {
      // Without waiting, on the watch connection; when it cannot take the
      // line, through the client as uncached calls report. A success not
      // slow by the cached policy may be counted in a fold instead.
      const slow = this.cacheEntry.foldSlowMs;
      if (outcome === SUCCESS && slow !== null && (slow < 0 || durationMs < slow) && (this.foldSlowMs === null || durationMs < this.foldSlowMs) && this.cache.fold(this.foldHead, this)) return;
      const head = this.noreplyHead[outcome];
      const tail = `${durationMs}}\n`;
      if (this.cache.send(head.text + tail, head.bytes + tail.length, outcome === FAILURE, this, outcome, durationMs)) return;
    }
    return this.recordThroughClient(permit, outcome, durationMs, error);
  }

  /** One refusal made from the cache: counted, and the batch sent to cbd
   * (record, outcome rejected, with the count) once its first refusal is
   * REJECTED_FLUSH_MS old. */
  rejectedAdd() {
    const now = Date.now();
    this.rejectedN += 1;
    if (this.rejectedSince === 0) this.rejectedSince = now;
    else if (now - this.rejectedSince >= REJECTED_FLUSH_MS) this.rejectedFlush();
  }

  /** Report the refusals made from the cache so far (kept for later when
   * the cache cannot take the line; urgent: written at once). */
  rejectedFlush(urgent = false) {
    let n = this.rejectedN;
    this.rejectedN = 0;
    this.rejectedSince = 0;
    while (n > 0 && this.cache) {
      const part = Math.min(n, REJECTED_COUNT_MAX);
      const line = `${this.rejectedHead}${part}}\n`;
      if (!this.cache.send(line, Buffer.byteLength(line), urgent, this, 'rejected', 0, part)) break;
      n -= part;
    }
    this.rejectedN += n;
  }

  /** The state cbd answered a request with, at the entry's seq then: until
   * an event comes, the cache does not decide from an older state. */
  noteTold(state) {
    if (this.cacheEntry) this.told = { seq: this.cacheEntry.seq, state };
  }

  /** A cached call's outcome (or count refusals made from the cache) that
   * the watch connection could not carry. */
  reportThroughClient(outcome, durationMs, count = 1) {
    if (outcome === 'rejected') {
      if (!this.client) return;
      const ctx = Object.keys(this.ctx).length ? this.ctx : undefined;
      this.client.request('record', { name: this.name, outcome, count, ctx, noreply: true }).catch((e) => this.emit('storeError', e, 'record'));
      return;
    }
    // (A fold's successes, each as an uncached call reports it: the
    // client's cbd may not take a count.)
    for (let i = 1; i < count; i++) this.recordThroughClient(new Permit(this.name, m.CLOSED), outcome, durationMs, null).catch((e) => this.emit('storeError', e, 'record'));
    this.recordThroughClient(new Permit(this.name, m.CLOSED), outcome, durationMs, null).catch((e) => this.emit('storeError', e, 'record'));
  }

  /** Record an outcome on cbd through the client (with the local copy when
   * cbd is unavailable and the policy is LOCAL). */
  async recordThroughClient(permit, outcome, durationMs, error) {
    const remoteToken = permit.local ? null : permit.token;
    const ctx = this.callCtx();
    // An ignored call without a permit changes nothing but cbd's
    // totals.ignored: sent without waiting for the reply.
    const noreply = outcome === IGNORE && remoteToken === null;
    let res;
    try {
      // Until cbd's policy for the circuit is known (protocol 3 sends it only
      // when asked), the reply brings it for the LOCAL fallback.
      const policy = this.seenPolicy == null && !noreply ? true : undefined;
      res = await this.remote('record', () => this.client.record(this.name, outcome, { permit: remoteToken ?? undefined, durationMs, ctx, noreply, policy }));
    } catch (e) {
      if (e instanceof CbdError) return; // an answer such as bad_request
      throw e;
    }
    const { reply, err } = res;
    if (reply === null && err === null && this.client) return; // noreply
    if (reply !== null) {
      if (reply.snapshot) {
        this.noteSnapshot(reply.snapshot);
        this.noteTold(reply.snapshot.state);
        if (outcome !== IGNORE) this.observe(reply.snapshot.state, outcome === FAILURE ? error : null);
      }
      return;
    }
    if (this.client && this.storePolicy !== LOCAL) return; // ALLOW, REJECT: nothing kept
    const now = this.ctxNow(ctx);
    this.degrade(now);
    const snap = this.local.record(this.name, outcome, this.fallbackPolicy(), now, durationMs, permit.local ? permit.token : null);
    if (outcome !== IGNORE) this.observe(snap.state, outcome === FAILURE ? error : null, true);
  }

  // -- the one-call form --------------------------------------------------
  classifyValue(value) {
    try {
      const o = this.classify(value);
      return OUTCOMES.includes(o) ? o : FAILURE;
    } catch {
      return FAILURE; // a classifier that throws: a failure
    }
  }

  /** Run fn() if the circuit permits (await its promise); report its
   * outcome and duration (the permit, a bulkhead ticket too, goes back
   * whatever fn does). Refused: fallback(err) if one is given (here or on
   * the breaker), else the RefusedError (CircuitOpenError,
   * BulkheadFullError). signal: an AbortSignal for the wait for cbd's
   * answer (see acquire). */
  async execute(fn, { fallback, signal } = {}) {
    const fb = fallback || this.fallback;
    let permit;
    try {
      permit = await this.acquire({ signal });
    } catch (e) {
      if (e instanceof RefusedError && fb) return fb(e);
      throw e;
    }
    const started = performance.now();
    let outcome = IGNORE;
    let error = null;
    try {
      const result = await fn();
      outcome = this.classifyResults ? this.classifyValue(result) : SUCCESS;
      if (outcome === FAILURE) error = result;
      return result;
    } catch (e) {
      outcome = this.classifyValue(e);
      error = e;
      throw e;
    } finally {
      // Whatever happened, the permit goes back with the outcome.
      await this.report(permit, outcome, Math.max(0, Math.floor(performance.now() - started)), error);
    }
  }

  /** execute(() => fn(...args)). */
  call(fn, ...args) {
    return this.execute(() => fn(...args));
  }

  /** A protected async function: every call goes through execute. */
  wrap(asyncFn) {
    const wrapped = (...args) => this.execute(() => asyncFn(...args));
    wrapped.breaker = this;
    return wrapped;
  }

  // -- reading and forcing --------------------------------------------------
  /** Read the circuit from cbd (or the local copy); emits stateChange for
   * changes other processes made. */
  /** Reject with CircuitOpenError when a call now would be refused (open,
   * break not elapsed; held open), without taking a permit or reporting
   * anything (the middleware's and the guard's test). Cached: the watch
   * cache answers; else cbd (get); cbd unavailable: the local copy after
   * a fallback, else nothing is refused. */
  async check() {
    if (this.cacheEntry && this.primed) {
      const { verdict, retryAfterMs } = this.cache.decide(this.cacheEntry, this.told);
      if (verdict === REFUSE) throw new CircuitOpenError(this.name, m.OPEN, retryAfterMs, this.cacheEntry.hold?.state === m.OPEN ? 'held' : 'open');
      if (verdict === PERMIT) return;
    }
    const ctx = this.callCtx();
    let res;
    try {
      res = await this.remote('get', () => this.client.get(this.name, ctx));
    } catch (e) {
      if (e instanceof CbdError) return; // an answer such as forbidden: not a refusal
      throw e;
    }
    const snap = res.reply?.snapshot;
    if (snap) {
      const left = snap.retry_after_ms || 0;
      if (snap.hold?.state === m.OPEN || (snap.state === m.OPEN && left > 0)) throw new CircuitOpenError(this.name, m.OPEN, Math.max(1, left));
      return;
    }
    if (this.degraded && (!this.client || this.storePolicy === LOCAL)) {
      const local = this.local.get(this.name, this.fallbackPolicy(), this.ctxNow(ctx));
      if (local.state === m.OPEN && local.retry_after_ms > 0) throw new CircuitOpenError(this.name, m.OPEN, local.retry_after_ms);
    }
  }

  async refresh() {
    const ctx = this.callCtx();
    const { reply, err } = await this.remote('get', () => this.client.get(this.name, ctx));
    if (reply !== null) {
      this.noteSnapshot(reply.snapshot);
      this.observe(reply.snapshot.state);
      return reply.snapshot.state;
    }
    if (this.client && this.storePolicy === REJECT) throw err;
    if (this.client && this.storePolicy === ALLOW) return m.CLOSED;
    const state = this.degraded ? this.local.get(this.name, this.fallbackPolicy(), this.ctxNow(ctx)).state : this.seen.state;
    this.observe(state, null, true);
    return state;
  }

  async force(state) {
    const ctx = this.callCtx();
    let snap;
    if (!this.client) {
      snap = this.local.setState(this.name, state, this.fallbackPolicy(), this.ctxNow(ctx));
    } else {
      snap = (await this.client.setState(this.name, state, { ctx })).snapshot;
      this.noteSnapshot(snap);
    }
    this.observe(snap.state);
    return snap.state;
  }

  forceOpen() {
    return this.force(m.OPEN);
  }

  forceClose() {
    return this.force(m.CLOSED);
  }

  forceHalfOpen() {
    return this.force(m.HALF_OPEN);
  }
}
