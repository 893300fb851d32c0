// SPDX-License-Identifier: Apache-2.0
// http.test.js — the HTTP integrations against real local servers
// (node:http): breakerFetch (the global fetch) trips on 5xx and refuses
// without reaching the server; breakerMiddleware on a plain node:http
// server and BreakerGuard answer 503 with a Retry-After matching
// retry_after_ms while the circuit is open, without calling the handler;
// the middleware in an Express app when express is installed (skipped
// with a message otherwise: the suite never needs the network).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { once } from 'node:events';
import { uniqueName, sharedDaemon } from './helpers.js';
import { Breaker, BreakerGuard, CircuitOpenError, Client, breakerFetch, breakerMiddleware, retryAfterSeconds } from '../index.js';

let d;
let client;
sharedDaemon(async (dd, cc) => {
  d = dd;
  client = cc;
});

async function serve(handler) {
  const server = http.createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, url: `http://127.0.0.1:${server.address().port}/` };
}

/** Opens the circuit (break 60 s) and waits for the breaker to refuse: cbd's retry_after_ms. */
async function openCircuit(b) {
  await client.setState(b.name, 'open');
  const ms = (await client.get(b.name)).snapshot.retry_after_ms;
  for (let i = 0; i < 2000; i++) {
    try {
      await b.check();
    } catch (e) {
      if (e instanceof CircuitOpenError) return ms;
      throw e;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.fail('the breaker never saw the circuit open');
}

test('breakerFetch trips on 5xx and then refuses without reaching the server', async () => {
  let hits = 0;
  const { server, url } = await serve((req, res) => {
    hits += 1;
    res.statusCode = 503;
    res.end('down');
  });
  try {
    const b = new Breaker(uniqueName('fetch'), { client, policy: { failure_threshold: 2, break_ms: 60000 } });
    const f = breakerFetch(b);
    for (let i = 0; i < 2; i++) assert.equal((await f(url)).status, 503);
    for (let i = 0; i < 3; i++) await assert.rejects(f(url), CircuitOpenError);
    assert.equal(hits, 2);
    await b.close();
  } finally {
    server.close();
  }
});

test('breakerMiddleware on node:http: 503 with Retry-After while open, the handler not called', async () => {
  const b = new Breaker(uniqueName('mw'), { client, policy: { break_ms: 60000 } });
  await b.call(async () => 'creates the circuit');
  const guard = breakerMiddleware(b);
  let handled = 0;
  const { server, url } = await serve((req, res) =>
    guard(req, res, () => {
      handled += 1;
      res.end('hello');
    }),
  );
  try {
    assert.equal(await (await fetch(url)).text(), 'hello');
    const ms = await openCircuit(b);
    const res = await fetch(url);
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), String(retryAfterSeconds(ms)));
    assert.match(await res.text(), /open/);
    assert.equal(handled, 1);
    await b.close();
  } finally {
    server.close();
  }
  assert.equal(retryAfterSeconds(1500), 2);
  assert.equal(retryAfterSeconds(0), 1);
  assert.equal(retryAfterSeconds(2000), 2);
});

test('BreakerGuard: true while closed; open: Retry-After on the response and a 503 error', async () => {
  const b = new Breaker(uniqueName('guard'), { client, policy: { break_ms: 60000 } });
  await b.call(async () => 'creates the circuit');
  const guard = new BreakerGuard(b);
  // A NestJS-like pipeline on node:http: the guard, then the handler; an
  // error carrying statusCode is answered with it (as Nest's filter does).
  let handled = 0;
  const { server, url } = await serve(async (req, res) => {
    const context = { switchToHttp: () => ({ getRequest: () => req, getResponse: () => res }) };
    try {
      if (await guard.canActivate(context)) {
        handled += 1;
        res.end('hello');
      }
    } catch (e) {
      res.statusCode = e.statusCode ?? 500;
      res.end(JSON.stringify(e.getResponse?.() ?? { message: e.message }));
    }
  });
  try {
    assert.equal(await (await fetch(url)).text(), 'hello');
    const ms = await openCircuit(b);
    const res = await fetch(url);
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), String(retryAfterSeconds(ms)));
    assert.equal((await res.json()).statusCode, 503);
    assert.equal(handled, 1);
    await b.close();
  } finally {
    server.close();
  }
});

test('breakerMiddleware in an Express app', async (t) => {
  let express;
  try {
    express = (await import('express')).default;
  } catch {
    t.skip('express is not installed (npm install express): the node:http tests cover the middleware');
    return;
  }
  const b = new Breaker(uniqueName('express'), { client, policy: { break_ms: 60000 } });
  await b.call(async () => 'creates the circuit');
  const app = express();
  let handled = 0;
  app.use(breakerMiddleware(b));
  app.get('/', (req, res) => {
    handled += 1;
    res.send('hello');
  });
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${server.address().port}/`;
  try {
    assert.equal(await (await fetch(url)).text(), 'hello');
    const ms = await openCircuit(b);
    const res = await fetch(url);
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), String(retryAfterSeconds(ms)));
    assert.equal(handled, 1);
    await b.close();
  } finally {
    server.close();
  }
});
