// SPDX-License-Identifier: Apache-2.0
// classify.js — what a call's outcome means for the breaker: 'success',
// 'failure' or 'ignore' (PROTOCOL.md §14 item 8), and the HTTP classifier
// (libcbclient's cbc_http_outcome): 5xx, 408, 429 and transport errors are
// failures; the other statuses (1xx-3xx, other 4xx: the caller's business)
// are successes. An aborted call (AbortError) says nothing: 'ignore'.

export const SUCCESS = 'success';
export const FAILURE = 'failure';
export const IGNORE = 'ignore';
export const OUTCOMES = Object.freeze([SUCCESS, FAILURE, IGNORE]);

// HTTP statuses besides 5xx that say the dependency is unwell.
export const HTTP_FAILURE_STATUSES = Object.freeze([408, 429]);

/** The outcome of an HTTP status. */
export function httpOutcome(status) {
  if (status >= 500 || status < 100 || HTTP_FAILURE_STATUSES.includes(status)) return FAILURE;
  return SUCCESS;
}

/** The HTTP status a fetch Response, or an error with .status /
 * .statusCode / .response.status, carries; null if none. */
export function httpStatus(value) {
  if (value == null || typeof value !== 'object') return null;
  for (const k of ['status', 'statusCode']) if (Number.isInteger(value[k])) return value[k];
  const r = value.response;
  if (r && r !== value) return httpStatus(r);
  return null;
}

function isAbort(value) {
  return value instanceof Error && (value.name === 'AbortError' || value.code === 'ABORT_ERR');
}

/** The default classifier: every error is a failure, an abort is ignored. */
export function classifyDefault(value) {
  return isAbort(value) ? IGNORE : FAILURE;
}

/** Classify an HTTP call's result (a fetch Response) or error: by its
 * status when it carries one; an abort is ignored; any other error (fetch's
 * TypeError, ECONNREFUSED, a timeout) is a failure; a result with no status
 * is a success. */
export function classifyHttp(value) {
  const status = httpStatus(value);
  if (status !== null) return httpOutcome(status);
  if (isAbort(value)) return IGNORE;
  return value instanceof Error ? FAILURE : SUCCESS;
}
