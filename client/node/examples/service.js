#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// service.js — an example service protecting its upstream with cbd.
//
// A small HTTP server (Node built-ins only) whose every request fetches an
// upstream through a cbd breaker named "upstream", with retries
// (exponential backoff, full jitter, a 500 ms per-attempt timeout that
// aborts the fetch) and a fallback answer while the circuit is open. With
// --demo it also runs a flaky upstream on loopback that answers 503 while it
// is "down" (toggle with GET /toggle on the upstream).
//
//   cbd -s /tmp/cbd.sock &
//   CBD_SOCKET=/tmp/cbd.sock node client/node/examples/service.js --demo
//   curl localhost:8080/          # "upstream says hello" or the fallback
//   curl localhost:8081/toggle    # take the demo upstream down / up
//   cbctl -s /tmp/cbd.sock get upstream

import http from 'node:http';
import { parseArgs } from 'node:util';
import { Breaker, CircuitOpenError, Retry, classifyHttp } from '../index.js';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: '8080' }, // 0: any free port
    upstream: { type: 'string', default: 'http://127.0.0.1:8081/' },
    demo: { type: 'boolean', default: false },
    'demo-port': { type: 'string', default: '8081' },
  },
});

function listen(server, port) {
  return new Promise((resolve) => server.listen(Number(port), '127.0.0.1', () => resolve(server.address().port)));
}

/** A loopback upstream: 200, or 503 while down. Its URL. */
async function flakyUpstream(port) {
  let down = false;
  const server = http.createServer((req, res) => {
    if (req.url === '/toggle') down = !down;
    res.statusCode = down && req.url !== '/toggle' ? 503 : 200;
    res.end(`upstream ${down ? 'down' : 'says hello'}\n`);
  });
  return `http://127.0.0.1:${await listen(server, port)}/`;
}

const upstream = args.demo ? await flakyUpstream(args['demo-port']) : args.upstream;

// The circuit's policy is the operator's ([circuit "upstream"] in cbd.conf);
// declared here only for circuits nobody configured.
const breaker = new Breaker('upstream', { classify: classifyHttp, policy: { failure_threshold: 5, break_ms: 10000 } });
breaker.on('stateChange', (prev, state) => console.error(`circuit upstream: ${prev} -> ${state}`));
const retry = new Retry({
  breaker, attempts: 3, baseMs: 50, maxMs: 500, attemptTimeoutMs: 500,
  retryOn: (e) => classifyHttp(e) === 'failure',
});

// One attempt: a fetch aborted at the attempt's deadline; an HTTP error
// status is thrown as an error carrying .status (classifyHttp reads it).
async function fetchUpstream({ signal }) {
  const res = await fetch(upstream, { signal });
  const body = await res.text();
  if (!res.ok) throw Object.assign(new Error(`HTTP ${res.status}: ${body.trim()}`), { status: res.status });
  return body;
}

const server = http.createServer(async (req, res) => {
  let status = 200;
  let body;
  try {
    body = await retry.call(fetchUpstream);
  } catch (e) {
    if (e instanceof CircuitOpenError) {
      // The fallback, the same in every language's example.
      status = 503;
      res.setHeader('Retry-After', String(Math.floor(e.retryAfterMs / 1000) + 1));
      body = `fallback: upstream unavailable, retry in ${e.retryAfterMs} ms\n`;
    } else [status, body] = [502, `upstream failed: ${e.message}\n`]; // every attempt failed
  }
  res.statusCode = status;
  res.end(body);
});
const port = await listen(server, args.port);
console.error(`serving on 127.0.0.1:${port}, upstream ${upstream}`);
