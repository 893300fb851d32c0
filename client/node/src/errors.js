// SPDX-License-Identifier: Apache-2.0
// errors.js — the client's errors: cbd's refusals (its error code and
// message), an unreachable or hung cbd, and cbd's refusals of a call
// (RefusedError, with retryAfterMs): an open circuit, a full bulkhead, a
// spent retry budget.

export class CbdError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.name = 'CbdError';
    this.code = code;
    this.detail = message;
  }
}

/** cbd answered ok: false (PROTOCOL.md §4); code is cbd's (bad_request,
 * forbidden, capacity, ...), detail its message. */
export class ServerError extends CbdError {
  constructor(code, message) {
    super(code, message);
    this.name = 'ServerError';
  }
}

/** cbd could not be reached, broke the connection or sent a line that is
 * not a reply (code 'unavailable'). */
export class UnavailableError extends CbdError {
  constructor(message, code = 'unavailable') {
    super(code, message);
    this.name = 'UnavailableError';
  }
}

/** cbd did not connect or answer within the timeout (code 'timeout'). */
export class CbdTimeoutError extends UnavailableError {
  constructor(message) {
    super(message, 'timeout');
    this.name = 'CbdTimeoutError';
  }
}

/** The common base of cbd's refusals of a call (allow answered allowed:
 * false): circuit, state, retryAfterMs (when to try again) and reason
 * (protocol 3: 'open', 'held', 'half_open_full', 'concurrency',
 * 'retry_budget'; null from an older cbd or the local fallback). */
export class RefusedError extends CbdError {
  constructor(code, circuit, state, retryAfterMs, reason, message) {
    super(code, message);
    this.name = 'RefusedError';
    this.circuit = circuit;
    this.state = state;
    this.retryAfterMs = retryAfterMs;
    this.reason = reason ?? null;
  }
}

/** The breaker refused the call: open, held open, or half_open with no
 * free trial slot; retryAfterMs says when to try again. */
export class CircuitOpenError extends RefusedError {
  constructor(circuit, state, retryAfterMs, reason = null) {
    super('open', circuit, state, retryAfterMs, reason, `circuit "${circuit}" is ${state}: retry in ${retryAfterMs} ms`);
    this.name = 'CircuitOpenError';
  }
}

/** The circuit's bulkhead is full (protocol 3 max_concurrent, reason
 * 'concurrency'): inFlight calls hold every ticket and none freed within
 * the breaker's waitMs. The breaker is not open (retryAfterMs is 0). */
export class BulkheadFullError extends RefusedError {
  constructor(circuit, state, retryAfterMs, inFlight = null) {
    super('concurrency', circuit, state, retryAfterMs, 'concurrency', `circuit "${circuit}": bulkhead full (${inFlight} calls in flight)`);
    this.name = 'BulkheadFullError';
    this.inFlight = inFlight;
  }
}

/** A retry refused by the circuit's retry budget (protocol 3
 * retry_budget_percent, reason 'retry_budget'); retry helpers stop at it. */
export class RetryBudgetError extends RefusedError {
  constructor(circuit, state, retryAfterMs) {
    super('retry_budget', circuit, state, retryAfterMs, 'retry_budget', `circuit "${circuit}": retry budget spent: retry in ${retryAfterMs} ms`);
    this.name = 'RetryBudgetError';
  }
}

/** The error for an allow reply with allowed: false. */
export function refusal(circuit, reply) {
  const state = reply.state || 'closed';
  const left = reply.retry_after_ms || 0;
  if (reply.reason === 'concurrency') return new BulkheadFullError(circuit, state, left, reply.in_flight ?? null);
  if (reply.reason === 'retry_budget') return new RetryBudgetError(circuit, state, left);
  return new CircuitOpenError(circuit, state, left, reply.reason ?? null);
}

// Refusals that mean "cbd cannot serve now" rather than an answer (§4, §11).
const DEGRADING_CODES = new Set(['shutting_down', 'internal']);

/** Does err mean cbd is unavailable (fall back per policy), rather than an
 * answer to pass on (bad_request, forbidden, capacity)? */
export function storeFailed(err) {
  if (err instanceof UnavailableError) return true;
  return err instanceof ServerError && DEGRADING_CODES.has(err.code);
}
