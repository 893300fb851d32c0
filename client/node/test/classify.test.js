// SPDX-License-Identifier: Apache-2.0
// classify.test.js — the classifiers: the default (an error is a failure,
// an abort ignored) and the HTTP one for fetch Responses (status) and
// errors carrying .status / .statusCode / .response.status.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { classifyDefault, classifyHttp, httpOutcome, httpStatus, SUCCESS, FAILURE, IGNORE } from '../index.js';

test('httpOutcome: 5xx, 408, 429 and nonsense are failures, the rest successes', () => {
  for (const s of [500, 502, 503, 599, 408, 429, 0, 99]) assert.equal(httpOutcome(s), FAILURE, String(s));
  for (const s of [100, 200, 204, 301, 304, 400, 401, 403, 404, 409, 422]) assert.equal(httpOutcome(s), SUCCESS, String(s));
});

test('httpStatus reads status, statusCode and response.status', () => {
  assert.equal(httpStatus({ status: 503 }), 503);
  assert.equal(httpStatus({ statusCode: 429 }), 429);
  assert.equal(httpStatus(Object.assign(new Error('x'), { response: { status: 502 } })), 502);
  assert.equal(httpStatus(new Error('x')), null);
  assert.equal(httpStatus('text'), null);
  assert.equal(httpStatus(null), null);
});

test('classifyHttp on errors: status when carried, aborts ignored, others failures', () => {
  assert.equal(classifyHttp(Object.assign(new Error('bad'), { status: 404 })), SUCCESS);
  assert.equal(classifyHttp(Object.assign(new Error('bad'), { status: 503 })), FAILURE);
  assert.equal(classifyHttp(new TypeError('fetch failed')), FAILURE);
  assert.equal(classifyHttp(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' })), FAILURE);
  assert.equal(classifyHttp(new DOMException('aborted', 'AbortError')), IGNORE);
  assert.equal(classifyHttp({ no: 'status' }), SUCCESS);
});

test('the default classifier: failure, except an abort', () => {
  assert.equal(classifyDefault(new Error('x')), FAILURE);
  assert.equal(classifyDefault(new DOMException('aborted', 'AbortError')), IGNORE);
});

test('classifyHttp on real fetch Responses and a refused connection', async (t) => {
  const server = http.createServer((req, res) => {
    res.statusCode = Number(req.url.slice(1));
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => server.close());
  const base = `http://127.0.0.1:${server.address().port}`;
  for (const [status, want] of [[200, SUCCESS], [404, SUCCESS], [429, FAILURE], [503, FAILURE]]) {
    const res = await fetch(`${base}/${status}`, { signal: AbortSignal.timeout(5000) });
    await res.arrayBuffer();
    assert.equal(classifyHttp(res), want, String(status));
  }
  // A port nobody listens on: fetch's TypeError is a failure.
  const closed = http.createServer();
  await new Promise((r) => closed.listen(0, '127.0.0.1', r));
  const port = closed.address().port;
  await new Promise((r) => closed.close(r));
  const err = await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(5000) }).catch((e) => e);
  assert.ok(err instanceof Error);
  assert.equal(classifyHttp(err), FAILURE);
});
