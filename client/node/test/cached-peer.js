// SPDX-License-Identifier: Apache-2.0
// cached-peer.js — another process for cache.test.js: one cached breaker
// (its own watch cache, as any other process has), driven over stdin and
// answering on stdout in JSON lines.
//
//   node cached-peer.js SOCKET NAME POLICY_JSON
//   stdin:  state | stats | call | release | changes | close
//   stdout: {ready} once primed and read by its cache; {state}; {stats};
//           for call: {ran} when the call runs (it then waits for release)
//           and {result: 'ran' | 'refused' | 'error', state, message};
//           {changes}, then {change: state, at: ms since the epoch, µs
//           precision} at every stateChange (bench.js's propagation).

import { performance } from 'node:perf_hooks';
import readline from 'node:readline';
import { Breaker, CircuitOpenError } from '../index.js';

const [socketPath, name, policyJson] = process.argv.slice(2);
const say = (msg) => process.stdout.write(`${JSON.stringify(msg)}\n`);
const b = new Breaker(name, { socketPath, policy: JSON.parse(policyJson) });
let release = null;

await b.call(async () => 'first'); // through cbd: primes the breaker
// The parent bounds this wait (it kills a peer that never says ready).
while (!b.cacheLive) await new Promise((r) => setTimeout(r, 5));
say({ ready: true });

for await (const line of readline.createInterface({ input: process.stdin })) {
  if (line === 'state') {
    say({ state: b.state });
  } else if (line === 'stats') {
    say({ stats: b.cacheStats() });
  } else if (line === 'call') {
    const trial = () => new Promise((resolve) => {
      release = resolve;
      say({ ran: true });
    });
    b.call(trial).then(
      () => say({ result: 'ran' }),
      (e) => say({ result: e instanceof CircuitOpenError ? 'refused' : 'error', state: e.state, message: e.message }),
    );
  } else if (line === 'changes') {
    b.on('stateChange', (prev, state) => say({ change: state, at: performance.timeOrigin + performance.now() }));
    say({ changes: true });
  } else if (line === 'release') {
    release?.();
  } else if (line === 'close') {
    break;
  }
}
await b.close();
