// SPDX-License-Identifier: Apache-2.0
// cache.js — the cached mode of breakers on cbd, as libcbclient's
// (client/cache.c): one watch connection per process and socket path,
// shared by every cached breaker that uses it, keeping the state of each
// circuit those breakers name and carrying their outcomes to cbd as
// noreply lines.
//
//   - The connection watches every name, applies the watch reply's
//     snapshots and the change/delete events (PROTOCOL.md §8) to one entry
//     per name, and reconnects every RECONNECT_MS while cbd is away. An
//     entry is valid only between the watch reply that read it and the loss
//     of the connection: a lost connection invalidates every entry at once,
//     until the next watch reply re-reads them.
//   - Outcomes are queued as noreply lines. A failure (what trips circuits)
//     is written at once, with everything queued before it (order kept);
//     successes wait at most FLUSH_MS (or until FLUSH_BYTES are queued), so
//     a stream of calls costs one write per period. Past OUT_MAX_BYTES
//     unwritten, or with no live connection, the breaker reports through
//     its client instead; so do the outcomes of a write that failed or that
//     a lost connection left unwritten (they reach cbd, or the store
//     policy, rather than vanishing: libcbclient keeps those for the next
//     connection).
//   - A frozen cbd (SIGSTOP, hung) keeps the connection open but answers
//     nothing, so the cache would stay live while outcomes queue unread.
//     When nothing has arrived for PROBE_INTERVAL_MS the connection sends
//     a hello with a probe id; one unanswered for PROBE_TIMEOUT_MS (no
//     line at all arrived) is taken as a lost connection (counted).
//   - The socket never keeps the process alive on its own (unref'd; a write
//     in progress and the FLUSH_MS timer do, briefly). The last breaker to
//     leave closes it: what is queued is written at once (what the kernel's
//     socket buffer takes; the rest as cbd reads it), then the connection
//     ends (sock.end(): no timer of a loaded machine drops it, and close()
//     never waits for cbd, so a frozen cbd cannot hang it; it reads
//     everything once it resumes, within CLOSE_TAIL_IDLE_MS; a process
//     ending meanwhile waits for that write, as for any write in progress).
//   - Protocol 3 §1: snapshots are compact (no policy, a policy_rev
//     instead). Each entry keeps the last policy seen with the rev it came
//     with; a snapshot without policy and with another rev makes it unknown
//     (every failure synced, the break read from the snapshot only). The
//     watch and the synced outcomes ask "policy": true, so their replies
//     refresh it, and a policy event (a reload changed the circuit's
//     policy) refreshes it without a state change. A v2 cbd sends the
//     policy in every snapshot and no rev: the same code reads it as before.
//   - Counted successes (PROTOCOL.md §14 item 12, as libcbclient): every
//     connection starts with a hello; once its reply lists "success" in
//     outcome_counts, a success that is not slow by the cached policy is not
//     queued as a line but counted in an open fold of its breaker's exact
//     line head (breakers of one name may carry different ctx). The folds
//     are queued as one line each, with "count" (an older cbd would count
//     such a line as one success: until the reply says so, and after every
//     disconnect, successes go one line each), before any other line is
//     queued, whenever the output is written, at FOLD_COUNT_MAX, when
//     FOLDS_MAX folds are open (all of them then), once FOLD_FLUSH_COUNT
//     successes were folded since the last write (as FLUSH_BYTES: a loop
//     that never yields still writes), and at a disconnect or the close,
//     where they are queued outcomes like any other (those a lost
//     connection leaves unwritten go through the client, each success).

import net from 'node:net';

// Successes wait at most this long before they are written, together (ms).
export const FLUSH_MS = 1;
// Queued successes are written at once when they reach this many bytes (a
// loop of calls that never yields to the event loop never runs the timer).
export const FLUSH_BYTES = 16 << 10;
// Wait between reconnect attempts while cbd is away (ms).
export const RECONNECT_MS = 20;
// Unwritten outcomes, at most (bytes); past it the client reports them.
export const OUT_MAX_BYTES = 1 << 20;
// Names cached per process; breakers past it ask cbd (counted).
export const NAMES_MAX = 4096;
// Longest line accepted from cbd (a watch reply carries a snapshot per
// name, about 1 KiB each); past it the connection is dropped.
export const LINE_MAX_BYTES = NAMES_MAX * 2048;
// Names per watch request (keeps each line far below cbd's max_line_bytes).
export const WATCH_BATCH = 64;
// A closed cache's connection, still writing what it queued (cbd reads
// nothing: frozen, or slower than the queue), gives up after this long
// with nothing read (ms): a cbd frozen or hung past it loses that tail.
export const CLOSE_TAIL_IDLE_MS = 60_000;
// A frozen cbd keeps the watch connection open: after this long with
// nothing received (ms) the connection sends a probe (a hello)...
export const PROBE_INTERVAL_MS = 500;
// ...and a probe unanswered this long (ms) drops the connection as lost,
// so a frozen cbd is noticed within about 1.5 s at worst (the interval,
// then the timeout) and the store policy applies from then on.
export const PROBE_TIMEOUT_MS = 1000;
// Ids of probes: strings, where the cache's other requests (watch,
// unwatch) carry no id, so their replies are never taken for each other.
const PROBE_ID_PREFIX = 'cache-probe-';
// The ids of outcomes sent with a reply (those that could trip), and how
// long their caller waits for it (a frozen cbd is the probe's business).
const SYNC_ID_PREFIX = 'cache-sync-';
export const SYNC_TIMEOUT_MS = PROBE_TIMEOUT_MS;

// The most folds open at once (successes of as many line heads); one more
// queues them all.
export const FOLDS_MAX = 64;
// The most successes one counted line carries (cbd's PROTO_SUCCESS_COUNT_MAX).
export const FOLD_COUNT_MAX = 1_000_000;
// Successes folded since the last write past which the output is written
// at once (FLUSH_BYTES's part for folds).
export const FOLD_FLUSH_COUNT = 1024;

// What decide() answers.
export const PERMIT = 'permit';
export const REFUSE = 'refuse';
export const ASK = 'ask';

// Every cache of this process, by socket path.
const caches = new Map();
// Names watched by every cache of this process.
let namesWatched = 0;

const int = (v, d) => (Number.isInteger(v) ? v : d);

/** A snapshot's policy_rev (protocol 3 §1); null from a v2 cbd (or one that
 * is not a positive integer). */
export function policyRev(snap) {
  const rev = snap.policy_rev;
  return Number.isInteger(rev) && rev > 0 ? rev : null;
}

/** The circuit's rule as the last snapshot read reported it, the counts
 * that snapshot carried (base) and the process's own outcomes since (own):
 * enough to tell whether one more outcome of the process could trip the
 * circuit. Own counts are zeroed, and the rule read, only from a snapshot
 * known to include them and to be of the stored circuit (a change event,
 * the reply to a synced outcome); a watch reply may predate the creating
 * request (its policy the defaults, not the breaker's) and may or may not
 * include own outcomes, so it only sets the base. Until a rule is read
 * every failure is synced. An outcome counted twice costs a round trip,
 * never an overshoot. The rule keeps the policy_rev it was read with: a
 * snapshot with another rev and no policy (protocol 3) makes it unknown
 * again, until a snapshot that carries the policy (a synced outcome's
 * reply, a policy event) is read. */
export class OwnCount {
  constructor() {
    this.known = false;
    this.rev = null; // the policy_rev the rule was read with
    this.baseFc = this.baseCalls = this.baseFails = this.baseSlow = 0;
    this.ownFc = this.ownCalls = this.ownFails = this.ownSlow = 0;
  }

  setBase(snap, reset) {
    const p = snap.policy;
    const rev = policyRev(snap);
    if (!(reset && p && typeof p === 'object')) {
      if (rev !== this.rev) this.known = false; // stale: the policy changed since
    } else {
      this.known = true;
      this.rev = rev;
      this.rate = p.trip === 'rate';
      this.countWindow = p.window !== 'time';
      this.threshold = int(p.failure_threshold, 5);
      this.minCalls = int(p.minimum_calls, 10);
      this.failRate = int(p.failure_rate, 50);
      this.winSize = int(p.window_size, 100);
      this.slowMs = int(p.slow_call_ms, -1);
      this.slowRate = int(p.slow_call_rate, 100);
      this.cannotTrip = snap.hold != null || int(p.min_reporters, 1) > 1;
    }
    this.baseFc = int(snap.failure_count, 0);
    const w = snap.window && typeof snap.window === 'object' ? snap.window : {};
    this.baseCalls = int(w.calls, 0);
    this.baseFails = int(w.failures, 0);
    this.baseSlow = int(w.slow, 0);
    if (reset) this.ownFc = this.ownCalls = this.ownFails = this.ownSlow = 0;
  }

  /** Add one own outcome (of ms) and say whether it could trip the
   * circuit: then it must be sent with a reply awaited. */
  count(outcome, ms) {
    if (outcome === 'ignore') return false; // changes no rule
    const fail = outcome === 'failure';
    const slow = this.known && this.slowMs >= 0 && ms >= this.slowMs;
    if (fail) this.ownFc += 1;
    else this.baseFc = this.ownFc = 0;
    this.ownCalls += 1;
    if (fail) this.ownFails += 1;
    if (slow) this.ownSlow += 1;
    if (!this.known) return fail; // no rule read yet: any failure might trip it
    if (this.cannotTrip) return false;
    if (!this.rate) return fail && this.baseFc + this.ownFc >= this.threshold;
    if (!fail && !slow) return false;
    // The window holds at most base + own calls and at least the larger of
    // the two (either may include the other): judge the rate at its highest.
    let hi = this.baseCalls + this.ownCalls;
    let lo = Math.max(this.baseCalls, this.ownCalls);
    if (this.countWindow) {
      hi = Math.min(hi, this.winSize);
      lo = Math.min(lo, this.winSize);
    }
    if (hi < this.minCalls) return false;
    if (fail && (this.baseFails + this.ownFails) * 100 >= this.failRate * lo) return true;
    return slow && (this.baseSlow + this.ownSlow) * 100 >= this.slowRate * lo;
  }
}

/** One name's entry: what the last snapshot or event said. */
export class Entry {
  constructor(name) {
    this.name = name;
    this.valid = false; // read by the current connection's watch reply
    this.state = 'closed';
    this.openedAt = null;
    this.breakMs = null; // current_break_ms, else the policy's break_ms
    this.retryAfterMs = 0; // as reported, at receivedAt
    this.receivedAt = 0;
    this.hold = null; // {state, until} while held
    this.breakers = new Set(); // WeakRefs of the breakers told of every snapshot
    this.seq = 0; // change and policy events applied
    this.own = new OwnCount();
    // The last policy seen and the policy_rev it came with (null: none
    // seen, or stale).
    this.policy = null;
    this.policyRev = null;
    // The circuit has a bulkhead or a retry budget: ask cbd.
    this.limited = false;
    // The kept policy's slow_call_ms for folding successes (-1: none;
    // null: no policy kept, nothing folded).
    this.foldSlowMs = null;
  }

  /** Read a snapshot; returns it as the entry keeps it: a compact one
   * (protocol 3) of the kept policy's rev with that policy filled in, so
   * the breakers see a policy whenever it is known. */
  set(snap, reset = false) {
    const rev = policyRev(snap);
    if (snap.policy && typeof snap.policy === 'object') {
      this.policy = snap.policy;
      this.policyRev = rev;
    } else if (rev !== this.policyRev) {
      this.policy = null; // stale: the circuit's policy changed since
    } else if (this.policy !== null) {
      snap = { ...snap, policy: this.policy };
    }
    this.own.setBase(snap, reset);
    this.valid = true;
    this.state = snap.state;
    this.openedAt = snap.opened_at ?? null;
    this.breakMs = snap.current_break_ms ?? snap.policy?.break_ms ?? null;
    this.retryAfterMs = snap.retry_after_ms ?? 0;
    this.receivedAt = Date.now();
    this.hold = snap.hold ? { state: snap.hold.state, until: snap.hold.until ?? null } : null;
    const p = snap.policy;
    this.foldSlowMs = p && typeof p === 'object' ? int(p.slow_call_ms, -1) : null;
    this.limited = 'in_flight' in snap || (!!p && typeof p === 'object' && (p.max_concurrent != null || p.retry_budget_percent != null));
    return snap;
  }
}

export class WatchCache {
  constructor(socketPath) {
    this.socketPath = socketPath;
    this.refs = 0;
    this.entries = new Map();
    this.sock = null;
    this.live = false; // connected, and no write failed
    // cbd answered on the current connection: only then does the cache
    // decide and report itself live (a frozen cbd's backlog accepts
    // connections that nothing will read).
    this.answered = false;
    this.everConnected = false;
    this.closed = false;
    this.in = '';
    this.out = []; // {line, breaker, outcome, durationMs, count}: not written yet
    this.outBytes = 0;
    // This connection's cbd takes counted successes (its hello reply
    // listed "success" in outcome_counts); false from every connect.
    this.countsOk = false;
    // The open folds: line head -> {breaker, count}; successes folded
    // since the last write.
    this.folds = new Map();
    this.foldedPending = 0;
    this.flushTimer = null;
    this.reconnectTimer = null;
    this.writing = 0; // writes not yet completed
    this.probeTimer = null; // armed while connected
    this.probeJudge = null; // the setImmediate that judges a late probe
    this.probeSentAt = null; // the outstanding probe's performance.now()
    this.receivedAt = 0; // performance.now() of the last data received
    this.stats = {
      cachedCalls: 0, // calls permitted from the cache (closed)
      refusedCalls: 0, // calls refused from the cache (open, held open)
      uncachedCalls: 0, // calls of cached breakers that asked cbd
      noreplyLines: 0, // outcomes queued as noreply lines
      writes: 0, // socket writes that carried them
      storeReports: 0, // outcomes of cached calls reported through the client
      events: 0,
      policyEvents: 0, // of them, policy events (a reload changed a policy)
      connects: 0,
      reconnects: 0, // connects after a lost connection
      disconnects: 0,
      namesFull: 0, // breakers not cached: NAMES_MAX names watched
      outFull: 0, // outcomes not queued: OUT_MAX_BYTES unwritten
      lineTooLong: 0,
      badLines: 0,
      watchRefused: 0, // watch answered ok: false (a protocol 1 cbd)
      probes: 0, // hellos sent after PROBE_INTERVAL_MS with nothing received
      probeTimeouts: 0, // probes unanswered for PROBE_TIMEOUT_MS: connection dropped
      syncs: 0, // outcomes that could trip, sent with a reply awaited
      syncTimeouts: 0, // of them, those whose reply did not come in time
      folded: 0, // successes sent inside counted lines ("count" > 1)
    };
    this.syncN = 0;
    this.waiters = new Map(); // id -> resolve of a synced outcome's caller
    this.connect();
  }

  // -- the connection -----------------------------------------------------
  connect() {
    this.reconnectTimer = null;
    if (this.closed) return;
    const sock = net.createConnection({ path: this.socketPath });
    this.sock = sock;
    sock.unref();
    sock.setEncoding('utf8');
    sock.once('connect', () => {
      if (this.sock !== sock) return;
      this.live = true;
      this.answered = false;
      this.countsOk = false;
      this.stats.connects += 1;
      if (this.everConnected) this.stats.reconnects += 1;
      this.everConnected = true;
      this.receivedAt = performance.now();
      this.probeSentAt = null;
      this.armProbe(PROBE_INTERVAL_MS);
      const names = [...this.entries.keys()];
      let watch = '';
      for (let i = 0; i < names.length; i += WATCH_BATCH) watch += watchLine(names.slice(i, i + WATCH_BATCH));
      // The watch reply (a hello's without names) makes it answered. The
      // hello's reply says whether this cbd takes counted successes: until
      // it does, every success goes as a line of its own.
      watch += `${JSON.stringify({ op: 'hello', id: `${PROBE_ID_PREFIX}connect` })}\n`;
      this.write(watch, []);
    });
    sock.on('data', (chunk) => {
      if (this.sock === sock) this.onData(chunk);
    });
    sock.on('error', () => {
      if (this.sock === sock) this.disconnect();
    });
    sock.on('close', () => {
      if (this.sock === sock) this.disconnect();
    });
  }

  /** The connection is gone: every entry invalid, unwritten outcomes to the
   * client, and a new attempt in RECONNECT_MS. */
  disconnect() {
    const sock = this.sock;
    if (sock === null) return;
    this.sock = null;
    sock.destroy();
    if (this.live) this.stats.disconnects += 1;
    this.live = false;
    this.answered = false;
    this.countsOk = false;
    this.in = '';
    for (const e of this.entries.values()) e.valid = false;
    this.clearFlushTimer();
    this.clearProbeTimer();
    // The open folds are queued outcomes too: through the client with them.
    this.putFolds();
    const unwritten = this.out;
    this.out = [];
    this.outBytes = 0;
    this.reroute(unwritten);
    const waiters = [...this.waiters.values()];
    this.waiters.clear();
    for (const resolve of waiters) resolve(null);
    if (!this.closed) {
      this.reconnectTimer = setTimeout(() => this.connect(), RECONNECT_MS);
      this.reconnectTimer.unref();
    }
  }

  onData(chunk) {
    const sock = this.sock;
    // Anything received shows cbd is answering: the outstanding probe
    // (if any) is no longer needed; its reply is ignored when it comes.
    // Its timer waited for the timeout: the next probe is due sooner.
    this.receivedAt = performance.now();
    this.answered = true;
    if (this.probeSentAt !== null) {
      this.probeSentAt = null;
      if (this.probeTimer !== null) {
        this.clearProbeTimer();
        this.armProbe(PROBE_INTERVAL_MS);
      }
    }
    this.in += chunk;
    let start = 0;
    let nl;
    while ((nl = this.in.indexOf('\n', start)) >= 0) {
      const line = this.in.slice(start, nl);
      start = nl + 1;
      this.onLine(line);
      if (this.sock !== sock) return; // a listener closed it
    }
    this.in = this.in.slice(start);
    if (this.in.length > LINE_MAX_BYTES) {
      this.stats.lineTooLong += 1;
      this.disconnect();
    }
  }

  onLine(line) {
    if (!line.trim()) return;
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      this.stats.badLines += 1;
      return;
    }
    if (msg === null || typeof msg !== 'object') {
      this.stats.badLines += 1;
    } else if (typeof msg.id === 'string' && msg.id.startsWith(PROBE_ID_PREFIX)) {
      // A hello's reply (the connect's or a probe's): its arrival is a sign
      // of life (onData), and it says whether this cbd takes counted
      // successes (an older one has no outcome_counts, and counts such a
      // line as one success).
      this.countsOk = Array.isArray(msg.outcome_counts) && msg.outcome_counts.includes('success');
    } else if (typeof msg.id === 'string' && msg.id.startsWith(SYNC_ID_PREFIX)) {
      // The reply to an outcome that could trip: applied before the next
      // line, then its caller goes on.
      let snap = msg.ok === true && msg.snapshot && typeof msg.snapshot === 'object' ? msg.snapshot : null;
      if (snap) snap = this.apply(snap, false, true) ?? snap;
      const resolve = this.waiters.get(msg.id);
      this.waiters.delete(msg.id);
      resolve?.(snap);
    } else if (msg.event === 'change') {
      this.stats.events += 1;
      this.apply(msg.snapshot, true);
    } else if (msg.event === 'policy') {
      // A reload changed the circuit's policy (protocol 3): the rule and
      // the entry refresh, the state is as it was; the breakers read it as
      // they read a change event's snapshot.
      this.stats.events += 1;
      this.stats.policyEvents += 1;
      this.apply(msg.snapshot, true);
    } else if (msg.event === 'delete') {
      this.stats.events += 1;
      const e = this.entries.get(msg.name);
      if (e?.valid) {
        // Gone: the next call creates it closed.
        e.state = 'closed';
        e.openedAt = null;
        e.hold = null;
        for (const ref of e.breakers) ref.deref()?.cacheDeleted();
      }
    } else if (msg.ok === true) {
      // A watch reply (the only requests with replies on this connection
      // are watch and unwatch; unwatch carries no snapshots).
      if (Array.isArray(msg.snapshots)) for (const s of msg.snapshots) this.apply(s, false);
    } else if (msg.ok === false) {
      this.stats.watchRefused += 1; // entries stay invalid: breakers ask cbd
    } else if (typeof msg.event === 'string') {
      this.stats.events += 1;
    }
  }

  /** One snapshot from a watch reply, a change or policy event or a
   * synced outcome's reply (reset: it includes every own outcome counted).
   * Returns it as the entry keeps it (policy filled in when known), null
   * when not applied. */
  apply(snap, fromEvent, reset = false) {
    if (snap === null || typeof snap !== 'object' || typeof snap.name !== 'string') {
      this.stats.badLines += 1;
      return null;
    }
    const e = this.entries.get(snap.name);
    if (!e) return null; // unwatched since
    if (typeof snap.state !== 'string') {
      this.stats.badLines += 1;
      e.valid = false; // cannot tell its state: ask cbd
      return null;
    }
    snap = e.set(snap, reset || fromEvent);
    if (fromEvent) e.seq += 1;
    for (const ref of e.breakers) ref.deref()?.cacheUpdated(snap, fromEvent);
    return snap;
  }

  // -- the probe ---------------------------------------------------------------
  armProbe(ms) {
    this.probeTimer = setTimeout(() => this.onProbeTimer(), ms);
    this.probeTimer.unref();
  }

  clearProbeTimer() {
    if (this.probeTimer !== null) {
      clearTimeout(this.probeTimer);
      this.probeTimer = null;
    }
    if (this.probeJudge !== null) {
      clearImmediate(this.probeJudge);
      this.probeJudge = null;
    }
  }

  /** Due: send a probe after PROBE_INTERVAL_MS with nothing received, judge
   * one outstanding for PROBE_TIMEOUT_MS, else wait for whichever is next. */
  onProbeTimer() {
    this.probeTimer = null;
    if (this.sock === null || !this.live) return;
    const now = performance.now();
    if (this.probeSentAt !== null) {
      const waited = now - this.probeSentAt;
      if (waited < PROBE_TIMEOUT_MS) {
        this.armProbe(PROBE_TIMEOUT_MS - waited);
        return;
      }
      // Timers run before the loop reads sockets: after a busy stretch of
      // this process the reply may be waiting unread. Judge once the loop
      // has read what arrived (setImmediate runs after the poll phase).
      this.probeJudge = setImmediate(() => {
        this.probeJudge = null;
        if (this.probeSentAt === null) {
          this.armProbe(PROBE_INTERVAL_MS);
          return;
        }
        this.stats.probeTimeouts += 1;
        this.disconnect(); // cbd is not answering: as a lost connection
      });
      this.probeJudge.unref();
      return;
    }
    const idle = now - this.receivedAt;
    if (idle < PROBE_INTERVAL_MS) {
      this.armProbe(PROBE_INTERVAL_MS - idle);
      return;
    }
    this.stats.probes += 1; // also the probe's number in its id
    this.probeSentAt = now;
    this.writeAfterQueued(`${JSON.stringify({ op: 'hello', id: `${PROBE_ID_PREFIX}${this.stats.probes}` })}\n`);
    this.armProbe(PROBE_TIMEOUT_MS);
  }

  // -- output ----------------------------------------------------------------
  /** Write text now (the connection is live); items are the outcomes it
   * carries, reported through the client if the write fails. */
  write(text, items) {
    this.stats.writes += items.length > 0 ? 1 : 0;
    this.writing += 1;
    this.sock.write(text, (err) => {
      if (err && items.length > 0) this.reroute(items);
      this.writing -= 1;
    });
  }

  /** Write a request of the cache's own (a watch, an unwatch, a probe) now,
   * after the queued outcomes and open folds (nothing overtakes a
   * success: written with them). */
  writeAfterQueued(text) {
    if (this.out.length > 0 || this.folds.size > 0) this.flush();
    this.write(text, []);
  }

  flush() {
    this.clearFlushTimer();
    if (!this.live) return;
    // The open folds go with this write (a success waits at most one
    // flush, as its line would).
    if (this.folds.size > 0) this.putFolds();
    this.foldedPending = 0;
    if (this.out.length === 0) return;
    const items = this.out;
    this.out = [];
    this.outBytes = 0;
    let text = '';
    for (const item of items) text += item.line;
    this.write(text, items);
  }

  clearFlushTimer() {
    if (this.flushTimer !== null) {
      clearTimeout(this.flushTimer);
      this.flushTimer = null;
    }
  }

  /** Queue one outcome line (bytes: its length in UTF-8); false when the
   * breaker must report it through its client: no live connection, or
   * OUT_MAX_BYTES already unwritten. urgent (failures, a closing breaker's
   * refusals): written at once with everything queued before it. count:
   * how many refusals a 'rejected' line reports. */
  send(line, bytes, urgent, breaker, outcome, durationMs, count = 1) {
    if (!this.live) {
      this.stats.storeReports += 1;
      return false;
    }
    if (this.outBytes + this.sock.writableLength + bytes > OUT_MAX_BYTES) {
      this.stats.outFull += 1;
      this.stats.storeReports += 1;
      return false;
    }
    if (this.folds.size > 0) this.putFolds(); // nothing overtakes a success
    this.out.push({ line, breaker, outcome, durationMs, count });
    this.outBytes += bytes;
    this.stats.noreplyLines += 1;
    if (urgent || this.outBytes >= FLUSH_BYTES) this.flush();
    else if (this.flushTimer === null) this.flushTimer = setTimeout(() => this.flush(), FLUSH_MS);
    return true;
  }

  /** Count one success of breaker (head: its noreply record_success line
   * less the closing brace) in the open fold of that head instead of
   * queuing its line, when this connection's cbd takes counted successes
   * (the breaker checked that the success is not slow by the cached
   * policy). The hot path: a lookup and an increment. False: send its
   * line. */
  fold(head, breaker) {
    if (!this.live || !this.countsOk) return false;
    let f = this.folds.get(head);
    if (f === undefined) {
      if (this.folds.size >= FOLDS_MAX) this.putFolds();
      f = { breaker, count: 0 };
      this.folds.set(head, f);
    }
    f.count += 1;
    if (f.count >= FOLD_COUNT_MAX) this.putFolds();
    if (++this.foldedPending >= FOLD_FLUSH_COUNT) this.flush();
    else if (this.flushTimer === null) this.flushTimer = setTimeout(() => this.flush(), FLUSH_MS);
    return true;
  }

  /** Queue every open fold as one line: its head, then ,"count":N} (N > 1;
   * else the plain line), past OUT_MAX_BYTES too (at most FOLDS_MAX lines,
   * fewer than those they replace). */
  putFolds() {
    for (const [head, { breaker, count }] of this.folds) {
      const line = count > 1 ? `${head},"count":${count}}\n` : `${head}}\n`;
      this.out.push({ line, breaker, outcome: 'success', durationMs: 0, count });
      this.outBytes += Buffer.byteLength(line);
      this.stats.noreplyLines += 1;
      if (count > 1) this.stats.folded += count;
    }
    this.folds.clear();
  }

  /** Send an outcome that could trip (line: its request less the closing
   * brace) with a reply awaited, at most SYNC_TIMEOUT_MS: {snap: cbd's
   * snapshot, already applied to the entry, or null; sent}. Not sent:
   * report it through the client. */
  sendSync(line, breaker, outcome, durationMs) {
    if (!this.live) {
      this.stats.storeReports += 1;
      return Promise.resolve({ snap: null, sent: false });
    }
    this.syncN += 1;
    const id = `${SYNC_ID_PREFIX}${this.syncN}`;
    this.stats.syncs += 1;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters.delete(id);
        this.stats.syncTimeouts += 1;
        resolve({ snap: null, sent: true });
      }, SYNC_TIMEOUT_MS);
      // Not unref'd: the watch socket is, and a call waiting for its
      // reply must keep the process alive (at most SYNC_TIMEOUT_MS).
      this.waiters.set(id, (snap) => {
        clearTimeout(timer);
        resolve({ snap, sent: true });
      });
      // After what is queued (past OUT_MAX_BYTES too: it is one line, and
      // it matters most).
      if (this.folds.size > 0) this.putFolds();
      this.out.push({ line: `${line},"id":"${id}"}\n`, breaker, outcome, durationMs });
      this.flush();
    });
  }

  /** Outcomes that did not reach the socket: through each breaker's client
   * (cbd on its own connection, else the store policy). */
  reroute(items) {
    for (const { breaker, outcome, durationMs, count } of items) {
      this.stats.storeReports += 1;
      breaker.reportThroughClient(outcome, durationMs, count);
    }
  }

  // -- names and decisions ---------------------------------------------------
  /** The entry of name for a breaker (ref: a WeakRef of it), watched from
   * now; null past NAMES_MAX. */
  join(name, ref) {
    let e = this.entries.get(name);
    if (!e) {
      if (namesWatched >= NAMES_MAX) {
        this.stats.namesFull += 1;
        return null;
      }
      e = new Entry(name);
      this.entries.set(name, e);
      namesWatched += 1;
      if (this.live) this.writeAfterQueued(watchLine([name]));
    }
    e.breakers.add(ref);
    return e;
  }

  /** A breaker (ref) no longer uses e: unwatched once no breaker does. */
  leave(e, ref) {
    e.breakers.delete(ref);
    if (e.breakers.size > 0 || this.entries.get(e.name) !== e) return;
    this.entries.delete(e.name);
    namesWatched -= 1;
    if (this.live) this.writeAfterQueued(`${JSON.stringify({ op: 'unwatch', names: [e.name] })}\n`);
  }

  /** {verdict: PERMIT | REFUSE | ASK, retryAfterMs} for a call on e now. */
  decide(e, told = null) {
    let verdict = ASK;
    let left = 0;
    if (!e.valid || !this.live || !this.answered) {
      verdict = ASK;
    } else if (told && told.seq === e.seq && told.state !== e.state) {
      verdict = ASK; // the event of what cbd told the breaker is on its way
    } else if (e.hold && e.hold.state === 'open') {
      // Held open: refused until the hold ends (its until; without one,
      // until released).
      const now = Date.now();
      if (e.hold.until != null) {
        left = e.hold.until - now;
        verdict = left > 0 ? REFUSE : ASK;
      } else {
        left = Math.max(1, e.retryAfterMs - (now - e.receivedAt));
        verdict = REFUSE;
      }
    } else if (e.state === 'closed') {
      // A bulkhead's tickets and a retry budget's first attempts are cbd's
      // to count.
      verdict = e.limited ? ASK : PERMIT;
    } else if (e.state === 'open') {
      const now = Date.now();
      left = e.openedAt != null && e.breakMs != null ? e.openedAt + e.breakMs - now : e.retryAfterMs - (now - e.receivedAt);
      verdict = left > 0 ? REFUSE : ASK;
    }
    if (verdict === PERMIT) this.stats.cachedCalls += 1;
    else if (verdict === REFUSE) this.stats.refusedCalls += 1;
    else this.stats.uncachedCalls += 1;
    return { verdict, retryAfterMs: verdict === REFUSE ? Math.ceil(left) : 0 };
  }

  snapshotStats() {
    return { ...this.stats, live: this.live && this.answered, names: this.entries.size };
  }

  // -- closing ---------------------------------------------------------------
  /** Close: what is queued is written now, after what is in flight (the
   * kernel takes what fits in the socket's buffer at once, in this call);
   * then the connection ends once the rest is written (sock.end(): the
   * socket lives on, unref'd, until cbd has read it all, so nothing queued
   * is dropped by a timer of a loaded machine, and a frozen cbd gets it
   * when it resumes, unless it read nothing for CLOSE_TAIL_IDLE_MS; a
   * closed or crashed cbd fails the writes, whose outcomes then go through
   * the breakers' clients). Never waits for cbd. */
  async close() {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.clearProbeTimer();
    this.flush();
    this.putFolds(); // (no live connection: through the client with the rest)
    const sock = this.sock;
    if (sock) {
      this.sock = null;
      this.live = false;
      this.answered = false;
      if (this.writing > 0) {
        sock.end(); // after the writes in flight
        sock.once('finish', () => sock.destroy()); // then stop reading too
        sock.setTimeout(CLOSE_TAIL_IDLE_MS, () => sock.destroy());
      } else {
        sock.destroy();
      }
    }
    // Outcomes still unwritten (no live connection): through the client.
    const unwritten = this.out;
    this.out = [];
    this.outBytes = 0;
    this.reroute(unwritten);
    for (const e of this.entries.values()) e.valid = false;
    namesWatched -= this.entries.size;
    this.entries.clear();
  }
}

/** The watch of names, their initial snapshots with their policies
 * (protocol 3; a v2 cbd ignores the member and sends them anyway). */
function watchLine(names) {
  return `${JSON.stringify({ op: 'watch', names, policy: true })}\n`;
}

// A breaker dropped without close() leaves its cache once collected, so
// short-lived breakers do not pile up in the cache (nor keep it open).
const collected = new FinalizationRegistry(({ cache, entry, ref }) => {
  if (entry) cache.leave(entry, ref);
  releaseCache(cache);
});

/** breaker joins the process's cache for socketPath under name: {cache,
 * entry (null past NAMES_MAX: the breaker asks cbd), ref}. */
export function joinCache(socketPath, name, breaker) {
  const cache = acquireCache(socketPath);
  const ref = new WeakRef(breaker);
  const entry = cache.join(name, ref);
  collected.register(breaker, { cache, entry, ref }, ref);
  return { cache, entry, ref };
}

/** The breaker of a joinCache membership is done with it. */
export function leaveCache({ cache, entry, ref }) {
  collected.unregister(ref);
  if (entry) cache.leave(entry, ref);
  return releaseCache(cache);
}

/** The cache for socketPath, shared by every cached breaker of the process
 * (started by the first). */
function acquireCache(socketPath) {
  let c = caches.get(socketPath);
  if (!c) {
    c = new WatchCache(socketPath);
    caches.set(socketPath, c);
  }
  c.refs += 1;
  return c;
}

/** One breaker is done with c: the last one closes it. */
async function releaseCache(c) {
  c.refs -= 1;
  if (c.refs > 0) return;
  if (caches.get(c.socketPath) === c) caches.delete(c.socketPath);
  await c.close();
}

/** The counters of the cache for socketPath (null when none runs): calls
 * permitted, refused and left to cbd, noreply lines and their writes,
 * outcomes reported through the client instead, events, connects,
 * reconnects, disconnects, and the hits of its limits; live and names now. */
export function cacheStats(socketPath) {
  const c = caches.get(socketPath);
  return c ? c.snapshotStats() : null;
}
