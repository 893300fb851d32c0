// SPDX-License-Identifier: Apache-2.0
// connection.js — one connection to cbd for Node's event loop: the socket
// path (argument, else $CBD_SOCKET, else /run/cbd/cbd.sock), connect and
// I/O timeouts, reconnection, and every op of PROTOCOL.md §8 as a method
// returning a promise. Many requests may be in flight at once: they are
// written in order (pipelined) and cbd answers in order, so the n-th line
// carrying `ok` answers the n-th request still waiting (event lines, which
// never carry `ok`, are emitted as 'event' instead). A connection that timed out, broke or
// sent garbage is dropped at once and every request still waiting on it
// fails, so a late reply can never be taken for another request's; the
// next call reconnects.

import { EventEmitter } from 'node:events';
import net from 'node:net';
import { CbdTimeoutError, ServerError, UnavailableError } from './errors.js';

export const DEFAULT_SOCKET = '/run/cbd/cbd.sock';
// libcbclient's CBC_DEFAULT_CONNECT_TIMEOUT_MS and CBC_DEFAULT_IO_TIMEOUT_MS.
export const DEFAULT_CONNECT_TIMEOUT_MS = 100;
export const DEFAULT_IO_TIMEOUT_MS = 100;
// The longest reply line accepted (cbd cuts list replies at half of its
// max_output_bytes, 8 MiB by default).
export const MAX_REPLY_BYTES = 64 << 20;
// Requests written and not yet answered on one connection, at most. cbd
// drops a client whose unread replies pass its max_output_bytes (8 MiB by
// default, PROTOCOL.md §10); later requests wait in the client until
// replies come back (each wait counted in limitHits.maxInFlight).
export const DEFAULT_MAX_IN_FLIGHT = 1024;
// Ops on which cbd honours noreply (§8: every op but these five).
export const NOREPLY_REFUSED = Object.freeze(['hello', 'watch', 'unwatch', 'list', 'stats']);
// The largest list limit cbd takes (PROTOCOL.md §8 list, Pages;
// libcbclient's CBC_LIST_LIMIT_MAX).
export const LIST_LIMIT_MAX = 100000;

/** Run judge once the event loop has polled its sockets. A timeout's timer
 * runs before the loop reads them (and before it reports a connect that
 * completed): after a busy stretch of this process (or a starved CPU) the
 * connection may be made, or the reply waiting unread, though the timer is
 * due. setImmediate runs after the poll phase, as the watch cache's probe
 * judges (cache.js). */
function judgeLate(judge) {
  setImmediate(judge);
}

/** The socket path: path, else $CBD_SOCKET, else /run/cbd/cbd.sock. */
export function resolveSocket(path) {
  return path || process.env.CBD_SOCKET || DEFAULT_SOCKET;
}

/** One request line: members set to null or undefined are left out (§3). */
export function encodeRequest(op, members = {}) {
  const req = { op };
  for (const [k, v] of Object.entries(members)) if (v != null) req[k] = v;
  return `${JSON.stringify(req)}\n`;
}

/** A connection to cbd. Events: 'event' (a watch event line, §8 watch:
 * {event, from, snapshot, reason} or {event: 'delete', name, reason}),
 * 'disconnect' (error) when a connection with watches is lost (watches end
 * with the connection: watch again after reconnecting). */
export class Client extends EventEmitter {
  /** options: connectTimeoutMs, ioTimeoutMs (100 ms each by default),
   * maxInFlight (requests on the wire at once, DEFAULT_MAX_IN_FLIGHT). */
  constructor(socketPath, { connectTimeoutMs = DEFAULT_CONNECT_TIMEOUT_MS, ioTimeoutMs = DEFAULT_IO_TIMEOUT_MS, maxInFlight = DEFAULT_MAX_IN_FLIGHT } = {}) {
    super();
    if (!(connectTimeoutMs > 0)) throw new RangeError('connectTimeoutMs must be positive (ms)');
    if (!(ioTimeoutMs > 0)) throw new RangeError('ioTimeoutMs must be positive (ms)');
    if (!(Number.isInteger(maxInFlight) && maxInFlight >= 1)) throw new RangeError('maxInFlight must be an integer of at least 1');
    this.maxInFlight = maxInFlight;
    this.limitHits = { maxInFlight: 0 }; // requests that waited for maxInFlight
    this.backlog = []; // {op, line, resolve, reject}: waiting for maxInFlight
    this.socketPath = resolveSocket(socketPath);
    this.connectTimeoutMs = connectTimeoutMs;
    this.ioTimeoutMs = ioTimeoutMs;
    this.policyConflicts = 0; // replies that carried policy_conflict
    this.lastPolicyConflict = null;
    this.sock = null;
    this.pending = []; // {op, resolve, reject, timer}, in request order
    this.buf = '';
    this.watching = false; // a watch was answered on this connection
    // The listAll holding this client's list turn ({done}: settles when it
    // ends), or null. A list cursor dies at the connection's next list, so
    // no other list is written while one walks its pages.
    this.listing = null;
  }

  close() {
    this.drop(new UnavailableError('client closed'));
  }

  /** Forget the connection; every waiting request fails with err. */
  drop(err) {
    const sock = this.sock;
    this.sock = null;
    this.buf = '';
    if (sock) sock.destroy();
    if (this.watching) {
      this.watching = false;
      this.emit('disconnect', err);
    }
    const pending = this.pending.concat(this.backlog);
    this.pending = [];
    this.backlog = [];
    for (const p of pending) {
      clearTimeout(p.timer);
      p.reject(err);
    }
  }

  connect() {
    const sock = net.createConnection({ path: this.socketPath });
    sock.setEncoding('utf8');
    const connectTimer = setTimeout(() => {
      // Judged once the loop has looked at the socket (judgeLate).
      judgeLate(() => {
        if (this.sock === sock && sock.connecting) this.drop(new CbdTimeoutError(`connecting to ${this.socketPath} timed out`));
      });
    }, this.connectTimeoutMs);
    sock.once('connect', () => {
      clearTimeout(connectTimer);
      if (this.sock === sock && this.pending.length === 0 && !this.watching) sock.unref(); // idle
    });
    sock.on('data', (chunk) => {
      if (this.sock === sock) this.onData(chunk);
    });
    sock.on('error', (e) => {
      clearTimeout(connectTimer);
      if (this.sock !== sock) return;
      const what = sock.connecting ? `cannot connect to ${this.socketPath}` : 'connection to cbd failed';
      this.drop(new UnavailableError(`${what}: ${e.code || e.message}`));
    });
    sock.on('close', () => {
      clearTimeout(connectTimer);
      if (this.sock === sock) this.drop(new UnavailableError('cbd closed the connection'));
    });
    return sock;
  }

  onData(chunk) {
    const sock = this.sock;
    this.buf += chunk;
    let start = 0;
    let nl;
    while ((nl = this.buf.indexOf('\n', start)) >= 0) {
      const line = this.buf.slice(start, nl);
      start = nl + 1;
      // Dropped (or closed by an 'event' listener): the rest is not ours.
      if (!this.onLine(line) || this.sock !== sock) return;
    }
    this.buf = this.buf.slice(start);
    if (this.buf.length > MAX_REPLY_BYTES) this.drop(new UnavailableError(`reply longer than ${MAX_REPLY_BYTES} bytes`));
  }

  /** One line from cbd; false when the connection was dropped. */
  onLine(line) {
    if (!line.trim()) return true;
    let reply;
    try {
      reply = JSON.parse(line);
    } catch (e) {
      this.drop(new UnavailableError(`cbd sent a line that is not JSON: ${e.message}`));
      return false;
    }
    if (reply === null || typeof reply !== 'object') return true;
    if (!('ok' in reply)) {
      if (typeof reply.event === 'string') this.emit('event', reply); // never carries ok
      return true;
    }
    const p = this.pending.shift();
    if (!p) {
      this.drop(new UnavailableError('cbd sent a reply nobody asked for'));
      return false;
    }
    clearTimeout(p.timer);
    while (this.backlog.length > 0 && this.pending.length < this.maxInFlight) {
      const next = this.backlog.shift();
      if (next.noreply) this.sock.write(next.line);
      else this.send(next);
    }
    if (reply.ok === false) {
      const error = reply.error || {};
      p.reject(new ServerError(String(error.code ?? 'unknown'), String(error.message ?? '')));
    } else {
      if (reply.policy_conflict) {
        this.policyConflicts += 1;
        this.lastPolicyConflict = reply.policy_conflict;
      }
      if (p.op === 'watch') {
        this.watching = true; // events may come: keep the process alive
        this.sock?.ref();
      }
      p.resolve(reply);
    }
    if (this.pending.length === 0 && !this.watching) this.sock?.unref(); // idle: keep no process alive
    return true;
  }

  /** Send one request; its reply (null with noreply). Rejects with
   * ServerError (cbd's code and message), UnavailableError or
   * CbdTimeoutError. */
  request(op, members = {}) {
    let line;
    try {
      line = encodeRequest(op, members);
    } catch (e) {
      return Promise.reject(e);
    }
    const noreply = members.noreply === true && !NOREPLY_REFUSED.includes(op);
    if (!this.sock) this.sock = this.connect();
    const sock = this.sock;
    if (noreply) {
      // Behind waiting requests it waits too, so requests keep their order.
      if (this.backlog.length > 0) this.backlog.push({ op, line, noreply: true, resolve() {}, reject() {} });
      else sock.write(line);
      return Promise.resolve(null);
    }
    sock.ref();
    return new Promise((resolve, reject) => {
      const p = { op, line, resolve, reject, timer: null };
      if (this.pending.length >= this.maxInFlight) {
        this.limitHits.maxInFlight += 1;
        this.backlog.push(p);
      } else {
        this.send(p);
      }
    });
  }

  /** Write a request on the connection and start its timeout. */
  send(p) {
    const sock = this.sock;
    // Connecting counts against the connect timeout, the answer against
    // the I/O timeout.
    const budget = this.ioTimeoutMs + (sock.connecting ? this.connectTimeoutMs : 0);
    p.timer = setTimeout(() => {
      // Judged once the loop has read what arrived (judgeLate).
      judgeLate(() => {
        if (this.sock === sock && this.pending.includes(p)) this.drop(new CbdTimeoutError(`cbd did not answer ${p.op} within ${this.ioTimeoutMs} ms`));
      });
    }, budget);
    this.pending.push(p);
    sock.write(p.line);
  }

  hello(client) {
    return this.request('hello', { client });
  }

  /** get: the snapshot carries the policy (protocol 3: unless options
   * policy is false). */
  get(name, ctx, { policy } = {}) {
    return this.request('get', { name, ctx, policy });
  }

  allow(name, ctx, { waitMs, retry } = {}) {
    // waitMs: cbd reads nothing else of this connection while the allow
    // waits, and answers up to waitMs past the ioTimeoutMs: use a
    // connection of its own with a longer ioTimeoutMs (as Breaker does).
    return this.request('allow', { name, ctx, wait_ms: waitMs || undefined, retry: retry || undefined });
  }

  /** record: outcome 'success' | 'failure' | 'ignore'; options permit,
   * durationMs, ctx, noreply, policy (true: the snapshot carries the
   * policy; protocol 3 snapshots are compact otherwise). */
  record(name, outcome, { permit, durationMs, ctx, noreply, policy } = {}) {
    return this.request('record', { name, outcome, permit, duration_ms: durationMs, ctx, noreply: noreply || undefined, policy });
  }

  recordSuccess(name, { durationMs, ctx, noreply, policy } = {}) {
    return this.request('record_success', { name, duration_ms: durationMs, ctx, noreply: noreply || undefined, policy });
  }

  recordFailure(name, { durationMs, ctx, noreply, policy } = {}) {
    return this.request('record_failure', { name, duration_ms: durationMs, ctx, noreply: noreply || undefined, policy });
  }

  cas(name, from, to, ctx, { policy } = {}) {
    return this.request('cas', { name, from, to, ctx, policy });
  }

  /** set_state (admin): options hold, ttlMs, reason, ctx, policy. */
  setState(name, state, { hold, ttlMs, reason, ctx, policy } = {}) {
    return this.request('set_state', { name, state, hold, ttl_ms: ttlMs, reason, ctx, policy });
  }

  release(name, ctx, { policy } = {}) {
    return this.request('release', { name, ctx, policy });
  }

  acquireSlot(name, ctx) {
    return this.request('acquire_slot', { name, ctx });
  }

  releaseSlot(name, token, ctx) {
    return this.request('release_slot', { name, token, ctx });
  }

  delete(name) {
    return this.request('delete', { name });
  }

  /** list (§8): one page of stored circuits (those in state, if given):
   * {circuits, truncated, cursor}. Without options it is one reply, cut by
   * cbd's output bound (truncated: true). options: limit (1..LIST_LIMIT_MAX
   * circuits at most), cursor (the previous page's, on this same
   * connection: its filter applies). cursor is null on the last page. A
   * list waits while a listAll on this client walks its pages; a list of
   * its own in between pages ends a cursor it holds (cbd then answers
   * bad_request). policy: true, each snapshot carries its policy (protocol
   * 3). */
  async list(state, ctx, { limit, cursor, policy } = {}) {
    if (limit != null && !(Number.isInteger(limit) && limit >= 1 && limit <= LIST_LIMIT_MAX)) {
      throw new RangeError(`limit must be an integer from 1 to ${LIST_LIMIT_MAX} (got ${limit})`);
    }
    while (this.listing) await this.listing.done;
    return this.listPage(state, ctx, limit, cursor, policy);
  }

  /** One list request, written now; the reply with cursor null when cbd
   * gave none. */
  async listPage(state, ctx, limit, cursor, policy) {
    const reply = await this.request('list', { state, ctx, limit, cursor, policy });
    reply.cursor ??= null;
    return reply;
  }

  /** Every stored circuit (those in state, if given), one snapshot at a
   * time: an async iterator following the cursor page after page on this
   * client's one connection. options: pageSize (the limit of each page;
   * default: as many as cbd's output bound lets one reply carry). Other
   * lists on this client wait until the iteration ends (finish it or
   * break out of it; a list awaited inside the loop on this same client
   * would wait for ever: use another Client there). If the connection is
   * lost between pages, it fails with UnavailableError rather than start
   * again (the cursor died with the connection). policy: true, each
   * snapshot carries its policy. */
  async *listAll(state, ctx, { pageSize, policy } = {}) {
    if (pageSize != null && !(Number.isInteger(pageSize) && pageSize >= 1 && pageSize <= LIST_LIMIT_MAX)) {
      throw new RangeError(`pageSize must be an integer from 1 to ${LIST_LIMIT_MAX} (got ${pageSize})`);
    }
    while (this.listing) await this.listing.done;
    let end;
    this.listing = { done: new Promise((resolve) => { end = resolve; }) };
    try {
      let cursor;
      let sock = null; // the connection the cursor belongs to
      do {
        if (sock !== null && this.sock !== sock) {
          throw new UnavailableError('connection to cbd lost during listAll: its list cursor died with it (list again)');
        }
        const reply = this.listPage(state, ctx, pageSize, cursor, policy);
        sock = this.sock; // request() wrote on it (connecting first if needed)
        const page = await reply;
        yield* page.circuits;
        cursor = page.cursor;
      } while (cursor !== null);
    } finally {
      this.listing = null;
      end();
    }
  }

  /** watch (§8): the current snapshots of names (or of every stored
   * circuit with names 'all'); then 'event' for each change (and, protocol
   * 3, {event: 'policy', snapshot} when a reload changed a circuit's
   * policy). options policy: true, the initial snapshots carry their
   * policies. */
  watch(names, { policy } = {}) {
    return this.request('watch', names === 'all' ? { all: true, policy } : { names, policy });
  }

  unwatch(names) {
    return this.request('unwatch', names === 'all' ? { all: true } : { names });
  }

  stats() {
    return this.request('stats');
  }

  metrics() {
    return this.request('metrics');
  }
}
