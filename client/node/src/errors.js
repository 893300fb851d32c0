// SPDX-License-Identifier: Apache-2.0
// errors.js — the client's errors: cbd's refusals (its error code and
// message), an unreachable or hung cbd, and an open circuit (retryAfterMs).

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

/** The breaker refused the call: open, or half_open with no free trial
 * slot; retryAfterMs says when to try again. */
export class CircuitOpenError extends CbdError {
  constructor(circuit, state, retryAfterMs) {
    super('open', `circuit "${circuit}" is ${state}: retry in ${retryAfterMs} ms`);
    this.name = 'CircuitOpenError';
    this.circuit = circuit;
    this.state = state;
    this.retryAfterMs = retryAfterMs;
  }
}

// Refusals that mean "cbd cannot serve now" rather than an answer (§4, §11).
const DEGRADING_CODES = new Set(['shutting_down', 'internal']);

/** Does err mean cbd is unavailable (fall back per policy), rather than an
 * answer to pass on (bad_request, forbidden, capacity)? */
export function storeFailed(err) {
  if (err instanceof UnavailableError) return true;
  return err instanceof ServerError && DEGRADING_CODES.has(err.code);
}
