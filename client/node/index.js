// SPDX-License-Identifier: Apache-2.0
// index.js — cbdclient for Node.js: the public API of client/node (a
// connection speaking every op of PROTOCOL.md, the breaker with its store
// policies, the classifiers, retries, and the pure state machine).

export { Client, DEFAULT_SOCKET, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_IO_TIMEOUT_MS, DEFAULT_MAX_IN_FLIGHT, LIST_LIMIT_MAX, resolveSocket } from './src/connection.js';
export { Breaker, Permit, LOCAL, ALLOW, REJECT, DEFAULT_TIMEOUT_BACKOFF_MS, WAIT_MS_MAX } from './src/breaker.js';
export { CbdError, ServerError, UnavailableError, CbdTimeoutError, RefusedError, CircuitOpenError, BulkheadFullError, RetryBudgetError } from './src/errors.js';
export { SUCCESS, FAILURE, IGNORE, classifyDefault, classifyHttp, httpOutcome, httpStatus } from './src/classify.js';
export { Retry, AttemptTimeoutError, RetryableResult } from './src/retry.js';
export { LocalStore } from './src/local.js';
export { cacheStats, NAMES_MAX as CACHE_NAMES_MAX, OUT_MAX_BYTES as CACHE_OUT_MAX_BYTES } from './src/cache.js';
export { breakerFetch, breakerMiddleware, BreakerGuard, ServiceUnavailableError, retryAfterSeconds } from './src/http.js';
export * as machine from './src/machine.js';
