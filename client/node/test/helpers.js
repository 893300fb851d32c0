// SPDX-License-Identifier: Apache-2.0
// helpers.js — a real cbd for the tests: started from $CBD_BINARY on a
// socket in a temporary directory, stopped at the end (SIGCONT then
// SIGTERM, SIGKILL after a bounded wait); every wait bounded. Also the
// per-file fixture (one cbd and a client of it), waitFor, and a virtual
// clock for the retry tests.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { before, after } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Client } from '../index.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const TOP = path.resolve(HERE, '..', '..', '..');
// Bounded waits (ms): cbd starting to answer, and stopping.
const START_WAIT_MS = 10_000;
const STOP_WAIT_MS = 10_000;
const POLL_MS = 10;

let names = 0;
/** A circuit name no other test uses. */
export function uniqueName(base = 'c') {
  names += 1;
  return `${base}-${process.pid}-${names}`;
}

export function cbdBinary() {
  return process.env.CBD_BINARY || '';
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function hello(socketPath) {
  return new Promise((resolve) => {
    const s = net.createConnection({ path: socketPath });
    let data = '';
    const t = setTimeout(() => finish(false), 1000);
    function finish(ok) {
      clearTimeout(t);
      s.destroy();
      resolve(ok);
    }
    s.on('error', () => finish(false));
    s.on('connect', () => s.write('{"op":"hello"}\n'));
    s.on('data', (d) => {
      data += d;
      if (data.includes('\n')) {
        try {
          finish(JSON.parse(data).ok === true);
        } catch {
          finish(false);
        }
      }
    });
  });
}

/** One cbd on a private socket. */
export class Daemon {
  static async start(config = null) {
    const d = new Daemon(config);
    await d.start();
    return d;
  }

  constructor(config) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cbd-node.'));
    this.socket = path.join(this.dir, 'cbd.sock');
    this.logPath = path.join(this.dir, 'cbd.log');
    this.args = ['-s', this.socket];
    if (config !== null) {
      const conf = path.join(this.dir, 'cbd.conf');
      fs.writeFileSync(conf, config);
      this.args.push('-c', conf);
    }
    this.proc = null;
  }

  async start() {
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(cbdBinary(), this.args, { stdio: ['ignore', 'ignore', log] });
    fs.closeSync(log);
    this.exited = new Promise((r) => this.proc.once('exit', r));
    let done = false;
    this.exited.then(() => {
      done = true;
    });
    const deadline = Date.now() + START_WAIT_MS;
    while (!(await hello(this.socket))) {
      if (done || Date.now() > deadline) {
        await this.stop();
        throw new Error(`cbd did not start: ${fs.readFileSync(this.logPath, 'utf8')}`);
      }
      await sleep(POLL_MS);
    }
  }

  running() {
    return this.proc && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Did cbd exit within the bounded wait? (The timer is cleared, so it
   * keeps nothing alive.) */
  async waitExit() {
    let timer;
    const t = new Promise((r) => {
      timer = setTimeout(() => r(false), STOP_WAIT_MS);
    });
    try {
      return await Promise.race([this.exited.then(() => true), t]);
    } finally {
      clearTimeout(timer);
    }
  }

  async stop() {
    if (!this.running()) return;
    this.proc.kill('SIGCONT');
    this.proc.kill('SIGTERM');
    if (!(await this.waitExit())) {
      this.proc.kill('SIGKILL');
      await this.waitExit();
    }
  }

  /** SIGKILL: gone without a goodbye (the socket file stays). */
  async kill() {
    this.proc.kill('SIGKILL');
    await this.waitExit();
  }

  pause() {
    this.proc.kill('SIGSTOP');
  }

  resume() {
    this.proc.kill('SIGCONT');
  }

  async cleanup() {
    await this.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Virtual time: now() in ms; sleep(ms) advances it and resolves on the
 * next turn of the loop (so a promise already settled wins a race). */
export class VirtualClock {
  constructor(start = 1_700_000_000_000) {
    this.t = start;
    this.sleeps = [];
  }

  now = () => this.t;

  sleep = (ms, signal) => {
    this.sleeps.push(ms);
    return new Promise((resolve) => {
      setImmediate(() => {
        if (!signal?.aborted) this.t += ms;
        resolve();
      });
    });
  };
}

/**
 * One cbd for the test file and a client of it: node:test's before
 * starts them and calls ready(d, client); after closes both. Client
 * options default to 2 s timeouts.
 */
export function sharedDaemon(ready, clientOptions = {}) {
  let d = null;
  let client = null;
  before(async () => {
    d = await Daemon.start();
    client = new Client(d.socket, { ioTimeoutMs: 2000, connectTimeoutMs: 2000, ...clientOptions });
    await ready(d, client);
  });
  after(async () => {
    client?.close();
    await d?.cleanup();
  });
}

/** Poll cond (sync or async) every pollMs until it holds; fail after waitMs. */
export async function waitFor(cond, what, waitMs = 10_000, pollMs = 5) {
  const deadline = Date.now() + waitMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(pollMs);
  }
}
