// SPDX-License-Identifier: Apache-2.0
// http.js — the HTTP integrations, without dependencies: breakerFetch
// wraps a fetch (the global one, undici's, by default) so that every
// request runs under a breaker (refused without reaching the network while
// open, classified by classifyHttp: 5xx, 408, 429 and network errors are
// failures); breakerMiddleware (Express/Connect style) and BreakerGuard
// (NestJS style: canActivate) answer 503 with Retry-After (retry_after_ms
// rounded up to seconds) while a named circuit refuses calls. The two
// last take no permit and report nothing (breaker.check()): the calls the
// handler makes to the dependency are protected by their own breaker.

import { performance } from 'node:perf_hooks';
import { CircuitOpenError } from './errors.js';
import { classifyHttp, FAILURE, IGNORE, OUTCOMES } from './classify.js';

/** A refusal's Retry-After: retryAfterMs in whole seconds, rounded up (at
 * least 1). */
export function retryAfterSeconds(retryAfterMs) {
  return Math.max(1, Math.ceil(retryAfterMs / 1000));
}

function classified(classify, value) {
  try {
    const o = classify(value);
    return OUTCOMES.includes(o) ? o : FAILURE;
  } catch {
    return FAILURE;
  }
}

/** A fetch whose every request runs under breaker: fetch(input, init) as
 * usual, rejecting with CircuitOpenError while the circuit is open.
 * Options: fetch (default globalThis.fetch), classify (a Response or an
 * error -> outcome; default classifyHttp). */
export function breakerFetch(breaker, { fetch = globalThis.fetch, classify = classifyHttp } = {}) {
  if (typeof fetch !== 'function') throw new TypeError('breakerFetch needs a fetch (Node.js >= 18 has one)');
  return async function fetchUnderBreaker(input, init) {
    const permit = await breaker.acquire();
    const started = performance.now();
    let outcome = IGNORE;
    try {
      const res = await fetch(input, init);
      outcome = classified(classify, res);
      return res;
    } catch (e) {
      outcome = classified(classify, e);
      throw e;
    } finally {
      await breaker.report(permit, outcome, Math.floor(performance.now() - started));
    }
  };
}

/** The first refusal among breakers (CircuitOpenError), else null. */
async function refusal(breakers) {
  for (const b of breakers) {
    try {
      await b.check();
    } catch (e) {
      if (e instanceof CircuitOpenError) return e;
      throw e;
    }
  }
  return null;
}

function refuse(res, e) {
  const body = `circuit "${e.circuit ?? ''}" is open: retry in ${e.retryAfterMs} ms\n`;
  res.statusCode = 503;
  res.setHeader('Retry-After', String(retryAfterSeconds(e.retryAfterMs)));
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.end(body);
}

/** Express/Connect middleware (req, res, next): 503 with Retry-After
 * while any of breakers refuses, else next(). Works on a plain node:http
 * server too: middleware(req, res, () => handler(req, res)). */
export function breakerMiddleware(...breakers) {
  const list = breakers.flat();
  return function circuitGuard(req, res, next) {
    refusal(list).then(
      (e) => (e ? refuse(res, e) : next()),
      (err) => next(err),
    );
  };
}

/** The error BreakerGuard throws: NestJS renders an error carrying
 * statusCode and message with that status (its BaseExceptionFilter); the
 * guard has set Retry-After on the response already. */
export class ServiceUnavailableError extends CircuitOpenError {
  constructor(open) {
    super(open.circuit ?? '', 'open', open.retryAfterMs);
    this.statusCode = 503;
    this.status = 503;
  }

  getStatus() {
    return 503;
  }

  getResponse() {
    return { statusCode: 503, message: this.message, retryAfterMs: this.retryAfterMs };
  }
}

/** A NestJS-style guard (no dependency on @nestjs): canActivate(context)
 * resolves true when no breaker refuses; else it sets Retry-After on the
 * response and throws (options.exception(err, seconds) when given, e.g.
 * () => new ServiceUnavailableException(), else a ServiceUnavailableError). */
export class BreakerGuard {
  constructor(breakers, { exception = null } = {}) {
    this.breakers = [breakers].flat();
    this.exception = exception;
  }

  async canActivate(context) {
    const e = await refusal(this.breakers);
    if (!e) return true;
    const seconds = retryAfterSeconds(e.retryAfterMs);
    const res = context?.switchToHttp?.().getResponse?.();
    if (res) {
      if (typeof res.setHeader === 'function') res.setHeader('Retry-After', String(seconds));
      else if (typeof res.header === 'function') res.header('Retry-After', String(seconds));
    }
    throw this.exception ? this.exception(e, seconds) : new ServiceUnavailableError(e);
  }
}
