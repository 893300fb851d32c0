// SPDX-License-Identifier: Apache-2.0
// retry.js — retries, backoff and timeouts around a breaker (issue 13's
// "Retries, backoff and timeouts"): a per-attempt timeout, retries with
// exponential backoff (base, max, full jitter), retryOn, hooks. The breaker
// is asked before every attempt and told every attempt's outcome (a
// bulkhead ticket goes back with it, whatever the attempt did); attempts
// after the first are marked retries (allow's "retry": true, counted
// against the circuit's retry budget); any refusal — an open circuit, a
// full bulkhead, a spent retry budget (RetryBudgetError) — ends the
// retries at once. The clock, the sleep and
// the random source are injectable, so the tests run in virtual time. An
// attempt gets an AbortSignal that is aborted at its deadline; it then
// counts as a failure (AttemptTimeoutError) whatever it does later.

import { performance } from 'node:perf_hooks';
import { CircuitOpenError, RefusedError } from './errors.js';
import { FAILURE, SUCCESS } from './classify.js';
import { CLOSED, HALF_OPEN, OPEN } from './machine.js';

export const DEFAULT_ATTEMPTS = 3;
export const DEFAULT_BASE_MS = 100;
export const DEFAULT_MAX_MS = 10_000;
// The largest exponent of the backoff (2^30 * base is past any max_ms).
const BACKOFF_SHIFT_MAX = 30;

export class AttemptTimeoutError extends Error {
  constructor(attempt, timeoutMs) {
    super(`attempt ${attempt} timed out after ${timeoutMs} ms`);
    this.name = 'AttemptTimeoutError';
    this.attempt = attempt;
  }
}

/** Passed to hooks when retryOnResult asked for a retry. */
export class RetryableResult extends Error {
  constructor(result) {
    super('retrying after a result retryOnResult refused');
    this.name = 'RetryableResult';
    this.result = result;
  }
}

/** The default sleep: a timer, cleared when signal aborts. */
export function realSleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * new Retry({breaker, attempts, baseMs, maxMs, jitter, attemptTimeoutMs,
 * retryOn(err), retryOnResult(value), fallback(err), hooks, clock (ms,
 * monotonic), sleep(ms, signal) -> promise, random() -> [0, 1)}).
 * Hooks (all optional): onRetry(attempt, error, delayMs), onTimeout(attempt),
 * onFailure(attempt, error), onCircuitOpen(retryAfterMs),
 * onCircuitHalfOpen(), onCircuitClosed().
 */
export class Retry {
  constructor({
    breaker = null, attempts = DEFAULT_ATTEMPTS, baseMs = DEFAULT_BASE_MS, maxMs = DEFAULT_MAX_MS, jitter = true,
    attemptTimeoutMs = null, retryOn = () => true, retryOnResult = null, fallback = null, hooks = {},
    clock = () => performance.now(), sleep = realSleep, random = Math.random,
  } = {}) {
    if (!(Number.isInteger(attempts) && attempts >= 1)) throw new RangeError('attempts must be an integer of at least 1');
    if (!(baseMs >= 0 && maxMs >= baseMs)) throw new RangeError('baseMs must be >= 0 and maxMs >= baseMs');
    if (attemptTimeoutMs != null && !(attemptTimeoutMs > 0)) throw new RangeError('attemptTimeoutMs must be positive');
    Object.assign(this, { breaker, attempts, baseMs, maxMs, jitter, attemptTimeoutMs, retryOn, retryOnResult, fallback, hooks, clock, sleep, random });
  }

  /** The backoff before retry number n (1, 2, ...). */
  delayMs(n) {
    const cap = Math.min(this.maxMs, this.baseMs * 2 ** Math.min(n - 1, BACKOFF_SHIFT_MAX));
    return this.jitter ? Math.floor(this.random() * cap) : cap;
  }

  hook(name, ...args) {
    const fn = this.hooks[name];
    if (fn) fn(...args);
  }

  stateHooks(before, after) {
    if (before === after) return;
    if (after === HALF_OPEN) this.hook('onCircuitHalfOpen');
    else if (after === CLOSED) this.hook('onCircuitClosed');
  }

  async acquire(retry = false) {
    if (!this.breaker) return null;
    const before = this.breaker.state;
    try {
      const permit = await this.breaker.acquire({ retry });
      this.stateHooks(before, this.breaker.state);
      return permit;
    } catch (e) {
      if (e instanceof RefusedError) this.stateHooks(before, this.breaker.state);
      if (e instanceof CircuitOpenError) this.hook('onCircuitOpen', e.retryAfterMs);
      throw e;
    }
  }

  async report(permit, outcome, ms, error) {
    if (!permit) return;
    const before = this.breaker.state;
    await this.breaker.report(permit, outcome, ms, error);
    const after = this.breaker.state;
    if (before !== after && after === OPEN) this.hook('onCircuitOpen', this.breaker.breakMs());
    else this.stateHooks(before, after);
  }

  /** One attempt, raced against its deadline. */
  async attempt(fn, n) {
    const ctl = new AbortController();
    const info = { attempt: n, signal: ctl.signal };
    if (this.attemptTimeoutMs == null) return fn(info);
    const timer = new AbortController();
    const timeout = Promise.resolve(this.sleep(this.attemptTimeoutMs, timer.signal)).then(() => {
      throw new AttemptTimeoutError(n, this.attemptTimeoutMs);
    });
    try {
      return await Promise.race([Promise.resolve().then(() => fn(info)), timeout]);
    } catch (e) {
      if (e instanceof AttemptTimeoutError) ctl.abort(e);
      throw e;
    } finally {
      timer.abort();
      timeout.catch(() => {});
    }
  }

  /** After a failed attempt: the delay before the next, or throw err. */
  retryOrThrow(n, err) {
    if (err instanceof AttemptTimeoutError) this.hook('onTimeout', n);
    this.hook('onFailure', n, err);
    if (n >= this.attempts || !this.retryOn(err)) throw err;
    const delay = this.delayMs(n);
    this.hook('onRetry', n, err, delay);
    return delay;
  }

  /** fn({attempt, signal}) with retries: its result, or the last error
   * (the RefusedError — CircuitOpenError, BulkheadFullError,
   * RetryBudgetError — or the fallback's value, when the breaker refused). */
  async call(fn) {
    for (let n = 1; ; n++) {
      let permit;
      try {
        permit = await this.acquire(n > 1);
      } catch (e) {
        if (e instanceof RefusedError && this.fallback) return this.fallback(e);
        throw e;
      }
      const started = this.clock();
      let result;
      try {
        result = await this.attempt(fn, n);
      } catch (e) {
        const ms = Math.max(0, Math.floor(this.clock() - started));
        const outcome = e instanceof AttemptTimeoutError ? FAILURE : this.breaker ? this.breaker.classifyValue(e) : FAILURE;
        await this.report(permit, outcome, ms, e);
        await this.sleep(this.retryOrThrow(n, e));
        continue;
      }
      const ms = Math.max(0, Math.floor(this.clock() - started));
      const outcome = this.breaker?.classifyResults ? this.breaker.classifyValue(result) : SUCCESS;
      await this.report(permit, outcome, ms, outcome === FAILURE ? result : null);
      if (this.retryOnResult && this.retryOnResult(result) && n < this.attempts) {
        const err = new RetryableResult(result);
        this.hook('onFailure', n, err);
        const delay = this.delayMs(n);
        this.hook('onRetry', n, err, delay);
        await this.sleep(delay);
        continue;
      }
      return result;
    }
  }

  /** A protected async function: wrap(fn)(...args) runs fn(...args) with
   * retries (fn's own arguments; the attempt's signal is not passed). */
  wrap(asyncFn) {
    return (...args) => this.call(() => asyncFn(...args));
  }
}

