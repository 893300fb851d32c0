// SPDX-License-Identifier: Apache-2.0
// index.d.ts — hand-written TypeScript declarations of cbdclient (client/node).

import { EventEmitter } from 'node:events';

export type State = 'closed' | 'open' | 'half_open';
export type Outcome = 'success' | 'failure' | 'ignore';
export type StorePolicy = 'local' | 'allow' | 'reject';

/** The policy members of PROTOCOL.md §6 a caller may declare. */
export interface Policy {
  preset?: 'http-external' | 'service' | 'database';
  trip?: 'consecutive' | 'rate';
  failure_threshold?: number;
  success_threshold?: number;
  break_ms?: number;
  half_open_max?: number;
  slot_ttl_ms?: number;
  max_gap_ms?: number;
  window?: 'count' | 'time';
  window_size?: number;
  minimum_calls?: number;
  failure_rate?: number;
  slow_call_ms?: number;
  slow_call_rate?: number;
  min_reporters?: number;
  reporter_window_ms?: number;
  break_backoff?: number;
  break_max_ms?: number;
  /** Protocol 3 §7b: the bulkhead (calls in flight across the host). */
  max_concurrent?: number;
  /** Protocol 3 §7b: the retry budget. */
  retry_budget_percent?: number;
  retry_min_per_s?: number;
}

/** A request's ctx: the policy, and now (ms since the epoch) for virtual time. */
export interface Ctx extends Policy {
  now?: number;
}

export interface Hold {
  state: 'open' | 'closed';
  by_uid: number;
  by_user: string;
  reason: string | null;
  since: number;
  until: number | null;
}

/** A circuit's snapshot (PROTOCOL.md §7); more members may appear. */
export interface Snapshot {
  name: string;
  state: State;
  failure_count: number;
  success_count: number;
  last_failure_at: number | null;
  opened_at: number | null;
  retry_after_ms: number;
  current_break_ms: number;
  hold: Hold | null;
  /** Protocol 3: the policy's revision (absent from a v2 cbd): two
   * snapshots of a circuit with the same policy_rev have the same policy. */
  policy_rev?: number;
  /** The effective policy: a v2 cbd sends it in every snapshot; protocol 3
   * only on get (unless policy: false), with policy: true, and in policy
   * events. */
  policy?: Record<string, unknown>;
  totals?: Record<string, number>;
  [member: string]: unknown;
}

export interface Reply {
  ok: true;
  id?: number | string;
  policy_conflict?: unknown;
  [member: string]: unknown;
}
export interface SnapshotReply extends Reply { snapshot: Snapshot }
export interface GetReply extends SnapshotReply { stored: boolean }
export interface AllowAnswer {
  allowed: boolean;
  state: State;
  permit?: string;
  expires_at?: number;
  retry_after_ms?: number;
}
export interface AllowReply extends Reply, AllowAnswer {}

export const DEFAULT_SOCKET: '/run/cbd/cbd.sock';
export const DEFAULT_CONNECT_TIMEOUT_MS: number;
export const DEFAULT_IO_TIMEOUT_MS: number;
/** The largest list limit (and listAll pageSize) cbd takes: 100000. */
export const LIST_LIMIT_MAX: number;
export const DEFAULT_MAX_IN_FLIGHT: number;
export const DEFAULT_TIMEOUT_BACKOFF_MS: number;
export function resolveSocket(path?: string): string;

export interface ClientOptions {
  connectTimeoutMs?: number;
  ioTimeoutMs?: number;
  /** Requests on the wire at once; later ones wait in the client. */
  maxInFlight?: number;
}

interface RecordOptions {
  durationMs?: number;
  ctx?: Ctx;
  noreply?: boolean;
  /** true: the snapshot carries the policy (protocol 3). */
  policy?: boolean;
}
/** true: the snapshots carry their policies (protocol 3); false on get:
 * leave it out. */
interface PolicyOption {
  policy?: boolean;
}

/** list's paging (PROTOCOL.md §8 list, Pages). */
export interface ListOptions {
  /** At most this many circuits (1..LIST_LIMIT_MAX). */
  limit?: number;
  /** The previous page's cursor, from this same connection. */
  cursor?: string | null;
  /** true: each snapshot carries its policy (protocol 3). */
  policy?: boolean;
}
export interface ListReply extends Reply {
  circuits: Snapshot[];
  /** Circuits were left out (by limit or by cbd's output bound). */
  truncated: boolean;
  /** The next page's cursor; null on the last page. */
  cursor: string | null;
}

/** A watch event line (PROTOCOL.md §8 watch). */
export interface WatchEvent {
  /** policy (protocol 3): a reload changed the circuit's policy; its
   * snapshot carries the new one, the state unchanged. */
  event: 'change' | 'delete' | 'policy' | string;
  from?: State;
  snapshot?: Snapshot;
  name?: string;
  reason?: string;
  [member: string]: unknown;
}

export interface ClientEvents {
  event: [event: WatchEvent];
  disconnect: [error: CbdError];
}

/** One connection to cbd; many calls in flight, pipelined, answered in order. */
export class Client extends EventEmitter {
  constructor(socketPath?: string, options?: ClientOptions);
  readonly socketPath: string;
  connectTimeoutMs: number;
  ioTimeoutMs: number;
  readonly maxInFlight: number;
  readonly limitHits: { maxInFlight: number };
  policyConflicts: number;
  lastPolicyConflict: unknown;
  close(): void;
  request(op: string, members?: Record<string, unknown>): Promise<Reply | null>;
  hello(client?: string): Promise<Reply & { server: string; version: string; protocol: number }>;
  get(name: string, ctx?: Ctx, options?: PolicyOption): Promise<GetReply>;
  allow(name: string, ctx?: Ctx, options?: { waitMs?: number; retry?: boolean }): Promise<AllowReply>;
  record(name: string, outcome: Outcome, options: RecordOptions & { permit?: string; noreply: true }): Promise<null>;
  record(name: string, outcome: Outcome, options?: RecordOptions & { permit?: string }): Promise<SnapshotReply>;
  recordSuccess(name: string, options?: RecordOptions): Promise<SnapshotReply | null>;
  recordFailure(name: string, options?: RecordOptions): Promise<SnapshotReply | null>;
  cas(name: string, from: State, to: State, ctx?: Ctx, options?: PolicyOption): Promise<SnapshotReply & { applied: boolean }>;
  setState(name: string, state: State, options?: { hold?: boolean; ttlMs?: number; reason?: string; ctx?: Ctx; policy?: boolean }): Promise<SnapshotReply>;
  release(name: string, ctx?: Ctx, options?: PolicyOption): Promise<SnapshotReply & { released: boolean }>;
  acquireSlot(name: string, ctx?: Ctx): Promise<Reply & { acquired: boolean; token?: string; expires_at?: number }>;
  releaseSlot(name: string, token: string, ctx?: Ctx): Promise<Reply & { released: boolean }>;
  delete(name: string): Promise<Reply & { existed: boolean }>;
  /** One page of stored circuits; cursor (null on the last page) asks
   * for the next page on this same connection. Waits while a listAll on
   * this client walks its pages. */
  list(state?: State, ctx?: Ctx, options?: ListOptions): Promise<ListReply>;
  /** Every stored circuit, following the cursor page after page on this
   * client's one connection; other lists on this client wait until the
   * iteration ends (finish it or break out of it; not awaited inside the
   * loop, where it would wait for ever). Fails with
   * UnavailableError if the connection is lost between pages. */
  listAll(state?: State, ctx?: Ctx, options?: { pageSize?: number; policy?: boolean }): AsyncGenerator<Snapshot, void, undefined>;
  watch(names: string[] | 'all', options?: PolicyOption): Promise<Reply & { snapshots: Snapshot[]; truncated?: boolean }>;
  unwatch(names: string[] | 'all'): Promise<Reply>;
  on<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): this;
  off<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): this;
  stats(): Promise<Reply>;
  metrics(): Promise<Reply & { text: string }>;
}

export class CbdError extends Error {
  constructor(code: string, message: string);
  code: string;
  /** cbd's message (or the client's), without the code. */
  detail: string;
}
export class ServerError extends CbdError {}
export class UnavailableError extends CbdError {
  constructor(message: string, code?: string);
}
export class CbdTimeoutError extends UnavailableError {
  constructor(message: string);
}
/** The common base of cbd's refusals of a call. */
export class RefusedError extends CbdError {
  circuit: string;
  state: State;
  retryAfterMs: number;
  /** 'open', 'held', 'half_open_full', 'concurrency', 'retry_budget'; null
   * from an older cbd or the local fallback. */
  reason: string | null;
}
export class CircuitOpenError extends RefusedError {
  constructor(circuit: string, state: State, retryAfterMs: number, reason?: string | null);
}
/** No bulkhead ticket free (reason 'concurrency') within waitMs. */
export class BulkheadFullError extends RefusedError {
  constructor(circuit: string, state: State, retryAfterMs: number, inFlight?: number | null);
  inFlight: number | null;
}
/** A retry refused by the retry budget (reason 'retry_budget'). */
export class RetryBudgetError extends RefusedError {
  constructor(circuit: string, state: State, retryAfterMs: number);
}

export const SUCCESS: 'success';
export const FAILURE: 'failure';
export const IGNORE: 'ignore';
export type Classifier = (value: unknown) => Outcome;
export function classifyDefault(value: unknown): Outcome;
export function classifyHttp(value: unknown): Outcome;
export function httpOutcome(status: number): Outcome;
export function httpStatus(value: unknown): number | null;

export const LOCAL: 'local';
export const ALLOW: 'allow';
export const REJECT: 'reject';
export const WAIT_MS_MAX: 60000;

export class Permit {
  readonly name: string;
  readonly state: State;
  readonly token: string | null;
  readonly local: boolean;
  /** Granted by the watch cache (closed): its outcome goes as a noreply line. */
  readonly cached: boolean;
  readonly started: number;
  reported: boolean;
}

export interface BreakerOptions {
  client?: Client;
  socketPath?: string;
  storePolicy?: StorePolicy;
  classify?: Classifier;
  classifyResults?: boolean;
  fallback?: (err: RefusedError) => unknown;
  timeoutBackoffMs?: number;
  /** How long a call waits in cbd for a bulkhead ticket (0..60000). */
  waitMs?: number;
  clock?: () => number;
  policy?: Policy;
  /** Cached mode (watch + noreply): by default on with cbd and no clock;
   * false: every call asks cbd; true: insist (RangeError without cbd or
   * with a clock). */
  cached?: boolean;
}

/** The counters of a process's watch cache for one socket path. */
export interface CacheStats {
  /** Calls permitted from the cache (closed). */
  cachedCalls: number;
  /** Calls refused from the cache (open within its break, held open). */
  refusedCalls: number;
  /** Calls of cached breakers that asked cbd (half_open, break elapsed,
   * not read yet, no live watch, a breaker's first call). */
  uncachedCalls: number;
  /** Outcomes queued as noreply lines, and the writes that carried them. */
  noreplyLines: number;
  writes: number;
  /** Outcomes of cached calls reported through the client instead (no
   * live connection, 1 MiB unwritten, a failed write). */
  storeReports: number;
  events: number;
  /** Of the events, policy events (protocol 3: a reload changed a policy). */
  policyEvents: number;
  connects: number;
  /** Connects after a lost connection. */
  reconnects: number;
  disconnects: number;
  /** Breakers left uncached: CACHE_NAMES_MAX names watched. */
  namesFull: number;
  /** Outcomes not queued: CACHE_OUT_MAX_BYTES unwritten. */
  outFull: number;
  lineTooLong: number;
  badLines: number;
  /** Watch requests answered ok: false (a protocol 1 cbd). */
  watchRefused: number;
  /** Probes (hellos) sent after 500 ms with nothing received from cbd. */
  probes: number;
  /** Probes unanswered for 1000 ms: cbd not answering (frozen), the
   * connection dropped as lost. */
  probeTimeouts: number;
  /** Outcomes that could trip the circuit, sent with a reply awaited. */
  syncs: number;
  /** Of them, those whose reply did not come within 1000 ms. */
  syncTimeouts: number;
  /** Successes sent inside counted record_success lines ("count" > 1):
   * folded on a cbd whose hello lists "success" in outcome_counts. */
  folded: number;
  /** Connected and answered by cbd (entries may still await their watch reply). */
  live: boolean;
  /** Names watched now. */
  names: number;
}
/** The counters of this process's cache for socketPath; null when none runs. */
export function cacheStats(socketPath: string): CacheStats | null;
/** Names cached per process (4096); breakers past it ask cbd. */
export const CACHE_NAMES_MAX: number;
/** Unwritten outcome bytes per cache (1 MiB); past it outcomes go through the client. */
export const CACHE_OUT_MAX_BYTES: number;

export interface BreakerEvents {
  stateChange: [prev: State, state: State, error: unknown];
  storeError: [error: CbdError, op: string];
}

export class Breaker extends EventEmitter {
  constructor(name: string, options?: BreakerOptions);
  static private(name?: string, options?: Omit<BreakerOptions, 'client' | 'socketPath' | 'storePolicy'>): Breaker;
  readonly name: string;
  readonly client: Client | null;
  readonly storePolicy: StorePolicy;
  /** The last state seen, without I/O. */
  readonly state: State;
  /** Does the breaker decide from the watch cache? */
  readonly cached: boolean;
  /** Can the cache decide its calls now (live, circuit read)? */
  readonly cacheLive: boolean;
  /** The cache's counters; null when not cached. */
  cacheStats(): CacheStats | null;
  /** Leave the cache (the breaker's refusal count is written at once; the
   * last cached breaker of the process writes what is queued and ends the
   * watch connection once cbd has read it, never waiting for cbd); close
   * the client the breaker made itself. */
  close(): Promise<void>;
  on<K extends keyof BreakerEvents>(event: K, listener: (...args: BreakerEvents[K]) => void): this;
  once<K extends keyof BreakerEvents>(event: K, listener: (...args: BreakerEvents[K]) => void): this;
  off<K extends keyof BreakerEvents>(event: K, listener: (...args: BreakerEvents[K]) => void): this;
  acquire(options?: { retry?: boolean; signal?: AbortSignal }): Promise<Permit>;
  report(permit: Permit, outcome: Outcome, durationMs?: number | null, error?: unknown): Promise<void>;
  execute<T, F = never>(fn: () => T | Promise<T>, options?: { fallback?: (err: RefusedError) => F | Promise<F>; signal?: AbortSignal }): Promise<T | F>;
  call<A extends unknown[], T>(fn: (...args: A) => T | Promise<T>, ...args: A): Promise<T>;
  wrap<A extends unknown[], T>(fn: (...args: A) => Promise<T>): ((...args: A) => Promise<T>) & { breaker: Breaker };
  classifyValue(value: unknown): Outcome;
  breakMs(): number;
  /** Rejects with CircuitOpenError when a call now would be refused (open,
   * held open); takes no permit, reports nothing. */
  check(): Promise<void>;
  refresh(): Promise<State>;
  forceOpen(): Promise<State>;
  forceClose(): Promise<State>;
  forceHalfOpen(): Promise<State>;
}

export interface RetryHooks {
  onRetry?: (attempt: number, error: unknown, delayMs: number) => void;
  onTimeout?: (attempt: number) => void;
  onFailure?: (attempt: number, error: unknown) => void;
  onCircuitOpen?: (retryAfterMs: number) => void;
  onCircuitHalfOpen?: () => void;
  onCircuitClosed?: () => void;
}

export interface RetryOptions {
  breaker?: Breaker | null;
  attempts?: number;
  baseMs?: number;
  maxMs?: number;
  jitter?: boolean;
  attemptTimeoutMs?: number | null;
  retryOn?: (error: unknown) => boolean;
  retryOnResult?: (result: any) => boolean;
  fallback?: (err: RefusedError) => unknown;
  hooks?: RetryHooks;
  clock?: () => number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  random?: () => number;
}

export interface AttemptInfo {
  attempt: number;
  signal: AbortSignal;
}

export class Retry {
  constructor(options?: RetryOptions);
  delayMs(retry: number): number;
  call<T>(fn: (info: AttemptInfo) => T | Promise<T>): Promise<T>;
  wrap<A extends unknown[], T>(fn: (...args: A) => Promise<T>): (...args: A) => Promise<T>;
}

export class AttemptTimeoutError extends Error {
  attempt: number;
}
export class RetryableResult extends Error {
  constructor(result: unknown);
  result: unknown;
}

/** In-process circuits (the LOCAL fallback, private breakers). */
export class LocalStore {
  allow(name: string, policy: Record<string, unknown>, now: number): AllowAnswer;
  record(name: string, outcome: Outcome, policy: Record<string, unknown>, now: number, durationMs?: number | null, permit?: string | null): Snapshot;
  get(name: string, policy: Record<string, unknown>, now: number): Snapshot;
  setState(name: string, state: State, policy: Record<string, unknown>, now: number): Snapshot;
  window(name: string, now: number): { calls: number; failures: number; slow: number } | null;
}

/** HTTP integrations (src/http.js): no dependency on any framework. */
export interface BreakerFetchOptions {
  /** The fetch that sends (default globalThis.fetch, undici's). */
  fetch?: (input: any, init?: any) => Promise<any>;
  /** A Response or an error -> outcome (default classifyHttp). */
  classify?: Classifier;
}
/** A fetch whose every request runs under breaker (CircuitOpenError while open). */
export function breakerFetch(breaker: Breaker, options?: BreakerFetchOptions): (input: any, init?: any) => Promise<Response>;
/** retryAfterMs in whole seconds, rounded up (at least 1). */
export function retryAfterSeconds(retryAfterMs: number): number;
/** Minimal shapes of node:http / Express objects the middleware uses. */
export interface MiddlewareResponse {
  statusCode: number;
  setHeader(name: string, value: string | number): unknown;
  end(body?: string): unknown;
}
/** Express/Connect middleware: 503 with Retry-After while any breaker refuses, else next(). */
export function breakerMiddleware(...breakers: Array<Breaker | Breaker[]>): (req: unknown, res: MiddlewareResponse, next: (err?: unknown) => void) => void;
/** What BreakerGuard throws by default: statusCode 503 (NestJS renders it with that status). */
export class ServiceUnavailableError extends CircuitOpenError {
  constructor(open: CircuitOpenError);
  statusCode: 503;
  status: 503;
  getStatus(): 503;
  getResponse(): { statusCode: 503; message: string; retryAfterMs: number };
}
/** The parts of NestJS's ExecutionContext the guard uses. */
export interface GuardContext {
  switchToHttp(): { getResponse(): any };
}
export interface BreakerGuardOptions {
  /** The error to throw when refused (e.g. () => new ServiceUnavailableException()). */
  exception?: (err: CircuitOpenError, retryAfterSeconds: number) => unknown;
}
/** A NestJS-style guard: true, or Retry-After set on the response and an error thrown. */
export class BreakerGuard {
  constructor(breakers: Breaker | Breaker[], options?: BreakerGuardOptions);
  canActivate(context: GuardContext): Promise<boolean>;
}

export namespace machine {
  const CLOSED: 'closed';
  const OPEN: 'open';
  const HALF_OPEN: 'half_open';
  function resolvePolicy(ctx?: Policy): Required<Omit<Policy, 'preset'>>;
}
