/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbclient.h — libcbclient, the C client library of cbd, the circuit-breaker
 * sidecar daemon. Installed header; every handle is opaque.
 *
 * Three layers, each usable on its own:
 *   1. cbc_conn    — one connection to cbd's Unix socket and every protocol
 *                    op as a function (hello, get, record_*, cas,
 *                    set_state, acquire_slot, release_slot, allow, record,
 *                    delete, list, stats, protocol 2's hold and release,
 *                    and a raw request). Replies of a protocol 1 cbd are
 *                    read too (protocol 2's members read as absent).
 *   2. cbc_store   — the store interface (a small vtable) with three
 *                    implementations: local (in process), remote (cbd) and
 *                    resilient (wraps another store, degrades per policy).
 *   3. cbc_breaker — the circuit breaker: execute(fn) or acquire/report,
 *                    and cbc_retry_execute: retries with backoff around it.
 *                    On a remote store it is cached by default: one watch
 *                    connection per process keeps the circuits' state,
 *                    and closed calls send their outcome without waiting
 *                    (cbc_cache_mode below).
 *
 * Conventions
 *   - Every function that can fail returns a cbc_status and, when given a
 *     non-NULL `cbc_error *err`, fills it with the status, a message naming
 *     the field or the socket at fault, and the daemon's error code when the
 *     daemon refused the request. cbc_strerror() has a string for every
 *     status. The library never prints, exits or aborts.
 *   - A handle passed to another constructor is borrowed: it must outlive
 *     the handle that borrows it (free in reverse order of creation).
 *   - Times are milliseconds since the Unix epoch; durations milliseconds.
 *
 * Threads
 *   - cbc_conn: safe to share between threads. One mutex per connection
 *     serialises requests: a request and its reply are one critical
 *     section, so threads sharing a connection wait for each other (at most
 *     the I/O timeout each). Use one connection per thread for parallelism.
 *   - cbc_store (local, remote, resilient): safe to share between threads.
 *   - cbc_breaker: safe to share between threads; callbacks run on the
 *     calling thread without any library lock held, and may run
 *     concurrently when the breaker is shared.
 *   - cbc_conn_last_reply() returns the last reply of the connection, which
 *     another thread sharing the connection may have replaced.
 *   - After fork(), a child must not use a connection opened by its parent
 *     (they would share one socket): open a new one. A cached breaker
 *     inherited from the parent runs uncached in the child; breakers the
 *     child creates share a watch cache of its own.
 *   - cbd releases the slots a connection holds when it closes; a request
 *     that times out or breaks closes the connection, so a trial slot held
 *     through the same connection ends early (its trial still reports).
 */
#ifndef CBCLIENT_H
#define CBCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Status and errors                                                  */
/* ------------------------------------------------------------------ */

typedef enum cbc_status {
	CBC_OK = 0,
	CBC_EINVAL, /* an argument or option is invalid (message names it) */
	CBC_ENOMEM, /* out of memory */
	CBC_ECONNECT, /* could not connect to cbd (message names the socket) */
	CBC_ETIMEOUT, /* connect or request did not finish within its timeout */
	CBC_EIO, /* the connection broke (reopened on the next call) */
	CBC_EPROTO, /* the reply was not a valid protocol reply */
	CBC_EREFUSED, /* the daemon refused the request: see cbc_error.code */
	CBC_ECAPACITY, /* max_circuits reached: no new circuit was created */
	CBC_EOPEN, /* breaker: call not permitted (open, or no trial slot) */
	CBC_ESTATE, /* breaker: permit already reported or never granted */
	/* Protocol 3 (interface 6): the bulkhead was full (allow's reason
	 * "concurrency": max_concurrent calls in flight, none freed within
	 * wait_ms); the circuit itself may be closed. retry_after_ms says
	 * when to try again (0: cbd cannot tell). */
	CBC_EBULKHEAD,
	/* Protocol 3: a retry refused by the circuit's retry budget (allow's
	 * reason "retry_budget"); retry_after_ms: until a retry frees. */
	CBC_EBUDGET,
} cbc_status;

#define CBC_STATUS_COUNT 13

/* Room for the daemon's error code and for a message. */
#define CBC_CODE_SIZE 32
#define CBC_MESSAGE_SIZE 256

typedef struct cbc_error {
	cbc_status status;
	/* The daemon's error code ("bad_request", "forbidden", "capacity",
	 * ...) when the daemon answered ok:false; "" otherwise. */
	char code[CBC_CODE_SIZE];
	char message[CBC_MESSAGE_SIZE];
} cbc_error;

/* The library's version, as numbers (compile time) and as a string (the
 * library actually loaded: compare them to detect a mismatch). */
#define CBC_VERSION_MAJOR 0
#define CBC_VERSION_MINOR 2
#define CBC_VERSION_PATCH 0
#define CBC_VERSION ((CBC_VERSION_MAJOR * 10000) + (CBC_VERSION_MINOR * 100) + CBC_VERSION_PATCH)
/* The wire protocol this library speaks. */
#define CBC_PROTOCOL 3

/* "0.2.0": the version of the library loaded at run time. */
const char *cbc_version(void);
/* CBC_VERSION of the library loaded at run time. */
int cbc_version_number(void);

/* A fixed string for every status (never NULL, also for unknown values). */
const char *cbc_strerror(cbc_status status);

/* Free memory the library returned (cbc_list, cbc_request, ...). */
void cbc_free(void *p);

/* ------------------------------------------------------------------ */
/* Plain data                                                         */
/* ------------------------------------------------------------------ */

typedef enum cbc_state {
	CBC_STATE_CLOSED = 0,
	CBC_STATE_OPEN = 1,
	CBC_STATE_HALF_OPEN = 2,
} cbc_state;

/* Wire name ("closed", "open", "half_open"); "unknown" for other values. */
const char *cbc_state_name(cbc_state state);
/* Parse a wire name; false when it is not one. */
bool cbc_state_parse(const char *text, cbc_state *out);

/* "null" for a time member of a snapshot. */
#define CBC_TIME_NONE INT64_C(-1)
/* Longest circuit name in bytes. */
#define CBC_NAME_MAX 256
/* Room for a slot token or permit and its NUL. */
#define CBC_TOKEN_SIZE 128

/* How failures trip a circuit (protocol 2, §3); UNSET: not sent. */
typedef enum cbc_trip {
	CBC_TRIP_UNSET = 0,
	CBC_TRIP_CONSECUTIVE, /* failure_threshold failures in a row */
	CBC_TRIP_RATE, /* failure (or slow-call) rate over a sliding window */
} cbc_trip;

/* The rate rule's window; UNSET: not sent. */
typedef enum cbc_window {
	CBC_WINDOW_UNSET = 0,
	CBC_WINDOW_COUNT, /* the last window_size calls */
	CBC_WINDOW_TIME, /* the calls of the last window_size ms */
} cbc_window;

/* Wire names ("consecutive", "rate"; "count", "time"); "unset" for UNSET
 * and other values. */
const char *cbc_trip_name(cbc_trip trip);
const char *cbc_window_name(cbc_window window);

/* Longest preset name in bytes. */
#define CBC_PRESET_MAX 64

/* The policy and clock of one call: the protocol's ctx. A member left 0
 * (an enum UNSET, preset NULL) is not sent (cbd uses its config file, else
 * the built-in default; the local store uses the built-in default). `now`
 * is sent only when has_now. Protocol 2: a circuit's policy is decided
 * when it is created (its [circuit] config section first, then the
 * creating request's ctx, then [defaults], then the built-in default);
 * later ctx members never change it, and those that differ are reported
 * (cbc_conn_last_policy_conflict). Bounds are cbd's (cbclient's checks use
 * the same table); a member out of bounds is CBC_EINVAL naming it. */
typedef struct cbc_ctx {
	int64_t failure_threshold;
	int64_t success_threshold;
	int64_t break_ms;
	int64_t half_open_max; /* 1..10000 */
	int64_t slot_ttl_ms;
	int64_t max_gap_ms;
	bool has_now;
	int64_t now;
	/* Protocol 2, trip rules (§3). */
	cbc_trip trip;
	cbc_window window;
	int64_t window_size; /* count: 1..10000 calls; time: 1000..3600000 ms */
	int64_t minimum_calls; /* calls in the window before the rate counts */
	int64_t failure_rate; /* percent, 1..100 */
	int64_t slow_call_ms; /* a call this long or longer is slow */
	int64_t slow_call_rate; /* percent, 1..100 */
	int64_t min_reporters; /* 1..64 distinct processes to open (shared) */
	int64_t reporter_window_ms; /* how long a reporter counts */
	int64_t break_backoff; /* 1..10: each failed trial multiplies the break */
	int64_t break_max_ms; /* the longest break (>= break_ms) */
	/* Protocol 3 (§7b): the bulkhead, calls in flight at once across the
	 * host (1..1000000), and the retry budget (percent of first attempts,
	 * 1..1000; retries a second always granted, 1..1000000). 0: not sent
	 * (a budget of 0 % or a minimum of 0 is set in cbd's config). */
	int64_t max_concurrent;
	int64_t retry_budget_percent;
	int64_t retry_min_per_s;
	/* A preset: "http-external", "service", "database", or a [preset] of
	 * cbd's config (borrowed; the local store knows the built-in ones). */
	const char *preset;
	/* The call's duration, sent as record_*'s duration_ms (0..2^53) when
	 * has_duration: slow calls are counted from it. Not a policy key. */
	bool has_duration;
	int64_t duration_ms;
} cbc_ctx;

/* Where the value of one key of a circuit's effective policy comes from
 * (protocol 2's policy.source). */
typedef enum cbc_policy_source {
	CBC_SOURCE_NONE = 0, /* not reported (a v1 cbd, a local store) */
	CBC_SOURCE_BUILTIN, /* the built-in default */
	CBC_SOURCE_DEFAULTS, /* cbd's [defaults] section */
	CBC_SOURCE_CLIENT, /* declared by the request that created the circuit */
	CBC_SOURCE_CONFIG, /* the circuit's [circuit "NAME"] section */
	CBC_SOURCE_OTHER, /* a source this library does not know */
} cbc_policy_source;

/* Wire name ("builtin", "defaults", "client", "config"); "none" and
 * "other" for the two others. */
const char *cbc_policy_source_name(cbc_policy_source source);

/* A policy value cbd reported as null (the key has no value, such as
 * max_gap_ms when there is no gap limit). */
#define CBC_POLICY_NULL INT64_C(-1)

/* The sources of a circuit's policy, one per key. */
typedef struct cbc_policy_sources {
	cbc_policy_source failure_threshold;
	cbc_policy_source success_threshold;
	cbc_policy_source break_ms;
	cbc_policy_source half_open_max;
	cbc_policy_source slot_ttl_ms;
	cbc_policy_source max_gap_ms;
	cbc_policy_source trip;
	cbc_policy_source window;
	cbc_policy_source window_size;
	cbc_policy_source minimum_calls;
	cbc_policy_source failure_rate;
	cbc_policy_source slow_call_ms;
	cbc_policy_source slow_call_rate;
	cbc_policy_source min_reporters;
	cbc_policy_source reporter_window_ms;
	cbc_policy_source break_backoff;
	cbc_policy_source break_max_ms;
	cbc_policy_source max_concurrent;
	cbc_policy_source retry_budget_percent;
	cbc_policy_source retry_min_per_s;
	cbc_policy_source preset;
} cbc_policy_sources;

/* A circuit's effective policy as cbd reported it (protocol 2). Protocol
 * 3 (compact snapshots) reports it only in get's snapshot (cbc_get,
 * cbc_store_get over a remote store) and not in the snapshots of the
 * other ops (record, cas, set_state, hold, release, list): known is false
 * there, and the snapshot's policy_rev says which policy the circuit has
 * (fetch it with cbc_get when policy_rev differs from the one kept). Each
 * value is 0 when not reported (known is false, or a v1 cbd) and
 * CBC_POLICY_NULL when reported as null (max_gap_ms, slow_call_ms and
 * break_max_ms when unset); trip and window are UNSET when not reported.
 * Keys this library does not know are skipped (cbc_conn_last_reply has
 * them). */
typedef struct cbc_policy {
	bool known; /* the snapshot carried a policy */
	int64_t failure_threshold;
	int64_t success_threshold;
	int64_t break_ms;
	int64_t half_open_max;
	int64_t slot_ttl_ms;
	int64_t max_gap_ms;
	cbc_trip trip;
	cbc_window window;
	int64_t window_size;
	int64_t minimum_calls;
	int64_t failure_rate;
	int64_t slow_call_ms;
	int64_t slow_call_rate;
	int64_t min_reporters;
	int64_t reporter_window_ms;
	int64_t break_backoff;
	int64_t break_max_ms;
	/* Protocol 3: CBC_POLICY_NULL when unset (no limit, no budget). */
	int64_t max_concurrent;
	int64_t retry_budget_percent;
	int64_t retry_min_per_s;
	bool has_preset; /* false: no preset (null) */
	char preset[CBC_PRESET_MAX + 1];
	cbc_policy_sources source;
} cbc_policy;

/* Longest hold reason in bytes (protocol 2). */
#define CBC_REASON_MAX 256
/* Room for the user name of a hold and its NUL. */
#define CBC_USER_SIZE 64

/* An operator's hold on a circuit (protocol 2): a forced state that stays
 * until its ttl or a release. */
typedef struct cbc_hold {
	bool held; /* false: no hold (also from a v1 cbd); the rest is zero */
	cbc_state state; /* CBC_STATE_OPEN or CBC_STATE_CLOSED */
	int64_t by_uid; /* the admin who set it */
	char by_user[CBC_USER_SIZE]; /* "" when cbd did not name one */
	bool has_reason;
	char reason[CBC_REASON_MAX + 1]; /* when has_reason */
	int64_t since; /* ms since the epoch */
	int64_t until; /* ms since the epoch; CBC_TIME_NONE: until released */
} cbc_hold_info;

/* A circuit's counts since it was created (protocol 2); each -1 when cbd
 * did not report them (a v1 cbd, a local store). */
typedef struct cbc_totals {
	int64_t successes;
	int64_t failures;
	int64_t ignored;
	int64_t slow;
	int64_t rejected; /* allow refusals */
	/* Protocol 3 (§7b): allow refusals for want of a ticket (not in
	 * rejected), retries granted, retries the budget refused. */
	int64_t rejected_concurrency;
	int64_t retries;
	int64_t rejected_retry;
} cbc_totals;

/* A rate circuit's window now (protocol 2): calls, failures and slow calls
 * in it, and the rates in percent (0 when empty; may be fractional). */
typedef struct cbc_window_counts {
	bool known; /* the snapshot carried a window (a rate circuit) */
	int64_t calls;
	int64_t failures;
	int64_t slow;
	double failure_rate;
	double slow_call_rate;
} cbc_window_counts;

typedef struct cbc_snapshot {
	char name[CBC_NAME_MAX + 1];
	cbc_state state;
	int64_t failure_count;
	int64_t success_count;
	int64_t last_failure_at; /* CBC_TIME_NONE when null */
	int64_t opened_at; /* CBC_TIME_NONE when null */
	int64_t retry_after_ms; /* time left in the break (or hold) while open */
	/* Protocol 2 (a v1 reply reads as: not held, totals -1, policy not
	 * known). */
	cbc_hold_info hold;
	cbc_totals totals;
	cbc_policy policy;
	/* The break in effect, grown by break_backoff after failed trials;
	 * -1 when not reported. */
	int64_t current_break_ms;
	cbc_window_counts window; /* rate circuits (window.known) */
	/* Distinct processes that reported a failure within
	 * reporter_window_ms (min_reporters > 1); -1 when not reported. */
	int64_t reporters;
	/* Protocol 3: the revision of the circuit's effective policy (1 to
	 * 2^32-1); two snapshots of one circuit with the same policy_rev have
	 * the same policy (and sources). It changes when a reload, a preset
	 * change or the circuit's creation changes the policy; nothing is
	 * promised across cbd restarts. 0 when not reported (a protocol 1 or
	 * 2 cbd, whose snapshots all carry the policy; a local store). */
	int64_t policy_rev;
	/* Protocol 3 (§7b): tickets handed out and not back; -1 when not
	 * reported (the circuit has no max_concurrent, or an older cbd). */
	int64_t in_flight;
} cbc_snapshot;

/* A half-open trial slot. */
typedef struct cbc_slot {
	bool acquired;
	char token[CBC_TOKEN_SIZE]; /* when acquired */
	int64_t expires_at; /* when acquired */
} cbc_slot;

/* Why allow refused (protocol 3: every refusal says why). */
typedef enum cbc_reason {
	CBC_REASON_NONE = 0, /* granted, or an older cbd that does not say */
	CBC_REASON_OPEN, /* the circuit is open */
	CBC_REASON_HELD, /* held open by an operator */
	CBC_REASON_HALF_OPEN_FULL, /* half_open, no trial slot free */
	CBC_REASON_CONCURRENCY, /* the bulkhead: no ticket free */
	CBC_REASON_RETRY_BUDGET, /* a retry past the retry budget */
	CBC_REASON_OTHER, /* a reason this library does not know */
} cbc_reason;

/* Wire name ("open", "held", "half_open_full", "concurrency",
 * "retry_budget"); "none" and "other" for the two others. */
const char *cbc_reason_name(cbc_reason reason);

/* The answer to the sidecar op allow. */
typedef struct cbc_allow_result {
	bool allowed;
	cbc_state state;
	int64_t retry_after_ms; /* when refused: a hint */
	/* A permit: a half_open trial slot, or (protocol 3) a bulkhead
	 * ticket; hand it back with cbc_record (or cbc_release_slot). */
	bool has_permit;
	char permit[CBC_TOKEN_SIZE];
	/* Protocol 3. */
	cbc_reason reason; /* when refused */
	int64_t in_flight; /* refused for concurrency: tickets held; else -1 */
	int64_t expires_at; /* with a permit: when it ends on its own; else -1 */
} cbc_allow_result;

/* allow's protocol 3 members: wait up to wait_ms (0..60000) for a ticket
 * (cbd answers when one frees, first come first served, or when wait_ms
 * passes; the request's I/O timeout is extended by wait_ms), and retry:
 * this call retries one that failed (counted against the retry budget). */
typedef struct cbc_allow_options {
	int64_t wait_ms;
	bool retry;
} cbc_allow_options;

/* Longest wait_ms cbd accepts. */
#define CBC_WAIT_MAX_MS 60000

typedef enum cbc_outcome {
	CBC_OUTCOME_SUCCESS = 0,
	CBC_OUTCOME_FAILURE,
	CBC_OUTCOME_IGNORE,
} cbc_outcome;

typedef struct cbc_hello_info {
	char server[64];
	char version[64];
	int64_t protocol;
} cbc_hello_info;

/* Requests and errors of one op, from the stats reply. */
typedef struct cbc_op_stats {
	char op[32];
	int64_t requests;
	int64_t errors;
} cbc_op_stats;

#define CBC_STATS_OPS_MAX 32

/* Errors of one code ("bad_request", ...), from the stats reply. */
typedef struct cbc_code_stats {
	char code[CBC_CODE_SIZE];
	int64_t count;
} cbc_code_stats;

#define CBC_STATS_CODES_MAX 16

/* The daemon's counters. A member the daemon did not send reads as -1.
 * For everything else, cbc_conn_last_reply() has the reply's JSON text. */
typedef struct cbc_stats {
	int64_t uptime_ms;
	int64_t started_at; /* ms since the epoch */
	int64_t connections; /* open now */
	int64_t connections_total; /* accepted since start */
	int64_t circuits; /* stored now */
	int64_t slots; /* held now */
	int64_t requests; /* all ops */
	int64_t errors; /* all error replies (sum over codes) */
	int64_t transitions; /* state changes */
	int64_t reloads;
	int64_t reload_failures;
	size_t op_count;
	cbc_op_stats ops[CBC_STATS_OPS_MAX];
	size_t code_count;
	cbc_code_stats codes[CBC_STATS_CODES_MAX];
} cbc_stats;

/* ------------------------------------------------------------------ */
/* Connection                                                         */
/* ------------------------------------------------------------------ */

typedef struct cbc_conn cbc_conn;

/* The packaged default socket, used when neither a path nor CBD_SOCKET
 * is given. */
#define CBC_DEFAULT_SOCKET "/run/cbd/cbd.sock"
/* Default timeouts (ms). Connecting to a missing or refused socket fails
 * at once; these bound a hung or stopped daemon. */
#define CBC_DEFAULT_CONNECT_TIMEOUT_MS 100
#define CBC_DEFAULT_IO_TIMEOUT_MS 100

/* A connection to socket_path, else $CBD_SOCKET, else CBC_DEFAULT_SOCKET.
 * Connecting is lazy: the first request connects, and a broken connection
 * is reopened by the next request. NULL (err filled) on a bad path. */
cbc_conn *cbc_conn_new(const char *socket_path, cbc_error *err);
void cbc_conn_free(cbc_conn *conn);

/* The socket path in use. */
const char *cbc_conn_socket_path(const cbc_conn *conn);

/* Timeouts in ms, 1..3600000. connect_ms bounds connecting; io_ms bounds a
 * whole request (send and reply) once connected. A timed-out connection is
 * closed (its late reply is never mistaken for the next one). */
cbc_status cbc_conn_set_timeouts(cbc_conn *conn, int connect_ms, int io_ms, cbc_error *err);

/* The name sent as hello's `client` member (optional, copied). */
cbc_status cbc_conn_set_client_name(cbc_conn *conn, const char *client, cbc_error *err);

/* Connect now (also done lazily by every request). */
cbc_status cbc_conn_connect(cbc_conn *conn, cbc_error *err);
/* Close the connection; the next request reopens it. */
void cbc_conn_close(cbc_conn *conn);

/* A copy of the last reply line received on this connection (no newline),
 * to free with cbc_free(); NULL when there is none or out of memory. */
char *cbc_conn_last_reply(cbc_conn *conn);

/* The policy_conflict member of the last reply on this connection
 * (protocol 2): the request's ctx policy keys that differ from the
 * circuit's effective policy, which the circuit kept (its config, or the
 * request that created it, decided). Copied into buf (size may be 0) as
 * the key names joined by commas in cbd's order ("break_ms,
 * failure_threshold" without the space), "" when the last reply carried
 * none; returns how many keys it named. Same thread caveat as
 * cbc_conn_last_reply. */
size_t cbc_conn_last_policy_conflict(cbc_conn *conn, char *buf, size_t size);
/* How many replies on this connection carried a policy_conflict since it
 * was created (a breaker makes several calls per execute: this one does
 * not miss a conflict reported by an earlier one). */
uint64_t cbc_conn_policy_conflicts(cbc_conn *conn);

/* Send one request line (a JSON object, without newline) and read its
 * reply. *reply (may be NULL) receives the reply line, to free with
 * cbc_free(), also when the daemon answered ok:false (CBC_EREFUSED). */
cbc_status cbc_request(cbc_conn *conn, const char *request_json, char **reply, cbc_error *err);

/* The protocol ops. `ctx` may be NULL (nothing sent). */
cbc_status cbc_hello(cbc_conn *conn, cbc_hello_info *out, cbc_error *err);
cbc_status cbc_get(cbc_conn *conn, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err);
cbc_status cbc_record_success(cbc_conn *conn, const char *name, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err);
cbc_status cbc_record_failure(cbc_conn *conn, const char *name, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err);
cbc_status cbc_cas(cbc_conn *conn, const char *name, cbc_state from, cbc_state to,
    const cbc_ctx *ctx, bool *applied, cbc_snapshot *out, cbc_error *err);
cbc_status cbc_set_state(cbc_conn *conn, const char *name, cbc_state state, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err);
cbc_status cbc_acquire_slot(cbc_conn *conn, const char *name, const cbc_ctx *ctx, cbc_slot *out,
    cbc_error *err);
cbc_status cbc_release_slot(cbc_conn *conn, const char *name, const char *token, const cbc_ctx *ctx,
    cbc_error *err);
cbc_status cbc_allow(cbc_conn *conn, const char *name, const cbc_ctx *ctx, cbc_allow_result *out,
    cbc_error *err);
/* allow with protocol 3's wait_ms and retry (opts may be NULL: neither). */
cbc_status cbc_allow_ex(cbc_conn *conn, const char *name, const cbc_ctx *ctx,
    const cbc_allow_options *opts, cbc_allow_result *out, cbc_error *err);
/* permit may be NULL. */
cbc_status cbc_record(cbc_conn *conn, const char *name, cbc_outcome outcome, const char *permit,
    const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err);
cbc_status cbc_delete(cbc_conn *conn, const char *name, bool *existed, cbc_error *err);
/* Hold name in state (CBC_STATE_OPEN or CBC_STATE_CLOSED) until ttl_ms
 * pass (0: until released) with an optional reason (NULL: none; at most
 * CBC_REASON_MAX bytes of UTF-8): protocol 2's set_state with hold (admin).
 * A held open circuit refuses every call; a held closed one allows every
 * call; no rule moves either until the hold ends. cbc_set_state (no hold)
 * clears a hold and forces as in protocol 1. */
cbc_status cbc_hold(cbc_conn *conn, const char *name, cbc_state state, int64_t ttl_ms,
    const char *reason, cbc_snapshot *out, cbc_error *err);
/* End name's hold (admin): held open goes to half_open (trials decide),
 * held closed stays closed with its counts reset. *released (may be NULL)
 * is false when the circuit was not held (nothing changed). */
cbc_status cbc_release(cbc_conn *conn, const char *name, bool *released, cbc_snapshot *out,
    cbc_error *err);
/* Every stored circuit, or only those in *state_filter (when not NULL).
 * *out is an array of *count snapshots to free with cbc_free(). From a
 * protocol 3 cbd they are compact (policy.known false, policy_rev set):
 * cbc_get gives a circuit's policy. */
cbc_status cbc_list(cbc_conn *conn, const cbc_state *state_filter, cbc_snapshot **out,
    size_t *count, cbc_error *err);
/* cbc_list, also saying whether cbd cut the list to fit its output limit
 * (truncated may be NULL; false when cbd does not say). */
cbc_status cbc_list_ex(cbc_conn *conn, const cbc_state *state_filter, cbc_snapshot **out,
    size_t *count, bool *truncated, cbc_error *err);
/* Most circuits one page may be asked for; room for a cursor. */
#define CBC_LIST_LIMIT_MAX 100000
#define CBC_CURSOR_SIZE 64
/* One page of a listing: at most limit circuits (0: as many as fit cbd's
 * output bound) from where cursor (NULL or "": the start) left off.
 * next_cursor (next_size bytes, CBC_CURSOR_SIZE is enough) receives the
 * cursor of the next page, "" after the last. A cursor is good only on the
 * same conn, until its next list. Every circuit stored for the whole
 * listing comes exactly once. */
cbc_status cbc_list_page(cbc_conn *conn, const cbc_state *state_filter, size_t limit,
    const char *cursor, cbc_snapshot **out, size_t *count, char *next_cursor, size_t next_size,
    cbc_error *err);
cbc_status cbc_stats_get(cbc_conn *conn, cbc_stats *out, cbc_error *err);

/* ------------------------------------------------------------------ */
/* Stores                                                             */
/* ------------------------------------------------------------------ */

typedef struct cbc_store cbc_store;

typedef enum cbc_store_op {
	CBC_OP_GET = 0,
	CBC_OP_RECORD_SUCCESS,
	CBC_OP_RECORD_FAILURE,
	CBC_OP_CAS,
	CBC_OP_SET_STATE,
	CBC_OP_ACQUIRE_SLOT,
	CBC_OP_RELEASE_SLOT,
	CBC_OP_DELETE,
} cbc_store_op;

#define CBC_STORE_OP_COUNT 8

/* The op's wire name ("get", "record_success", ...). */
const char *cbc_store_op_name(cbc_store_op op);

/* The store interface. Each function returns a status and fills err on
 * failure; ctx is never NULL (the dispatchers below pass an empty one). A
 * custom store (another backend) implements these and is wrapped with
 * cbc_store_new_custom(). */
typedef struct cbc_store_ops {
	cbc_status (*get)(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
	    cbc_error *err);
	cbc_status (*record_success)(void *impl, const char *name, const cbc_ctx *ctx,
	    cbc_snapshot *out, cbc_error *err);
	cbc_status (*record_failure)(void *impl, const char *name, const cbc_ctx *ctx,
	    cbc_snapshot *out, cbc_error *err);
	cbc_status (*cas)(void *impl, const char *name, cbc_state from, cbc_state to,
	    const cbc_ctx *ctx, bool *applied, cbc_snapshot *out, cbc_error *err);
	cbc_status (*set_state)(void *impl, const char *name, cbc_state state, const cbc_ctx *ctx,
	    cbc_snapshot *out, cbc_error *err);
	cbc_status (*acquire_slot)(void *impl, const char *name, const cbc_ctx *ctx, cbc_slot *out,
	    cbc_error *err);
	cbc_status (*release_slot)(void *impl, const char *name, const char *token,
	    const cbc_ctx *ctx, cbc_error *err);
	cbc_status (*delete_circuit)(void *impl, const char *name, bool *existed, cbc_error *err);
	/* Called by cbc_store_free (may be NULL). */
	void (*destroy)(void *impl);
} cbc_store_ops;

/* A store backed by ops and impl (ops must outlive the store). */
cbc_store *cbc_store_new_custom(const cbc_store_ops *ops, void *impl, cbc_error *err);

/* An in-process store: the same table and state machine code cbd runs,
 * behind a mutex. max_circuits 0 means unlimited. Slot tokens carry a
 * random instance id (getrandom), so they never repeat across stores. */
cbc_store *cbc_store_new_local(uint64_t max_circuits, cbc_error *err);

/* cbd over conn (borrowed). */
cbc_store *cbc_store_new_remote(cbc_conn *conn, cbc_error *err);

/* What a resilient store does when the store it wraps fails. */
typedef enum cbc_store_policy {
	/* Degrade to a private local store seeded with the last snapshot seen
	 * for the circuit: an open circuit stays open. (default) */
	CBC_POLICY_LOCAL = 0,
	/* Answer as if the circuit were closed: calls flow. (A breaker does
	 * not take these answers as observed states: cbc_breaker_state()
	 * keeps the last state the store itself reported.) */
	CBC_POLICY_ALLOW,
	/* Return the store's error from get, cas, set_state and acquire_slot
	 * (the calls made before the protected operation). Bookkeeping after
	 * it (record_*, release_slot) never reports a store error. */
	CBC_POLICY_REJECT,
} cbc_store_policy;

/* Called on every failure of the wrapped store, on the calling thread,
 * before the policy is applied. */
typedef void (*cbc_store_error_fn)(const cbc_error *error, cbc_store_op op, void *user);

/* After the wrapped store TIMED OUT, the resilient store does not try it
 * again for this long: calls in that window degrade at once instead of
 * each waiting out the timeout. Other failures (a missing socket, a
 * refused connect, a broken connection) fail in microseconds and get no
 * backoff: the next call tries again. */
#define CBC_DEFAULT_TIMEOUT_BACKOFF_MS 250

typedef struct cbc_resilient_options {
	cbc_store_policy policy;
	cbc_store_error_fn on_store_error; /* may be NULL */
	void *user; /* passed to on_store_error */
	int64_t timeout_backoff_ms; /* 0: none; 0..3600000 */
} cbc_resilient_options;

/* LOCAL, no callback, CBC_DEFAULT_TIMEOUT_BACKOFF_MS. */
void cbc_resilient_options_init(cbc_resilient_options *opts);

/* A store wrapping inner (borrowed); opts NULL means the defaults. Every
 * call tries inner first (except within a timeout backoff); the moment it
 * answers it is authoritative again. Errors of the caller (CBC_EINVAL)
 * are returned as they are, never degraded. */
cbc_store *cbc_store_new_resilient(cbc_store *inner, const cbc_resilient_options *opts,
    cbc_error *err);

void cbc_store_free(cbc_store *store);

/* The store ops, for direct use (cbctl-like tools, tests). ctx may be
 * NULL. Names are validated first (1..256 bytes of UTF-8, no control
 * characters): CBC_EINVAL naming `name`. */
cbc_status cbc_store_get(cbc_store *store, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err);
cbc_status cbc_store_record_success(cbc_store *store, const char *name, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err);
cbc_status cbc_store_record_failure(cbc_store *store, const char *name, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err);
cbc_status cbc_store_cas(cbc_store *store, const char *name, cbc_state from, cbc_state to,
    const cbc_ctx *ctx, bool *applied, cbc_snapshot *out, cbc_error *err);
cbc_status cbc_store_set_state(cbc_store *store, const char *name, cbc_state state,
    const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err);
cbc_status cbc_store_acquire_slot(cbc_store *store, const char *name, const cbc_ctx *ctx,
    cbc_slot *out, cbc_error *err);
cbc_status cbc_store_release_slot(cbc_store *store, const char *name, const char *token,
    const cbc_ctx *ctx, cbc_error *err);
cbc_status cbc_store_delete(cbc_store *store, const char *name, bool *existed, cbc_error *err);

/* ------------------------------------------------------------------ */
/* Breaker                                                            */
/* ------------------------------------------------------------------ */

typedef struct cbc_breaker cbc_breaker;

/* Cached mode (README "Cached mode"): one watch connection per process
 * and socket path, shared by every cached breaker, keeps the snapshot of
 * each circuit they name, updated by cbd's change and delete events. A
 * cached breaker decides from it:
 *   closed           the call runs at once; its outcome goes to cbd as a
 *                    noreply line (no wait; lines pending together go in
 *                    one write), ignored outcomes too (record, outcome
 *                    ignore);
 *   open, break (or hold) not elapsed
 *                    refused locally, retry_after_ms from the snapshot;
 *                    these refusals are reported to cbd (record, outcome
 *                    rejected, with their count: protocol 3 §6) once the
 *                    first of a batch is 1 s old while refusals go on,
 *                    when the cache stops refusing, and when the breaker
 *                    is freed, so totals.rejected counts them;
 *   anything else    half_open, open with the break elapsed, no live
 *                    watch: the uncached path through cbd (allow: slots
 *                    exact, refusals counted; the resilient store's
 *                    policy while cbd is away).
 * Own outcomes: the cache counts this process's outcomes per circuit
 * against the circuit's rule (consecutive or rate) since cbd's last
 * snapshot; an outcome that could trip the circuit is sent with its reply
 * awaited (at most 1 s: synced, sync_timeouts), so one process alone
 * never runs more calls than the rule allows (threshold 3: exactly 3
 * failing calls run, however fast). Until cbd has reported the circuit's
 * rule to the cache, every failure is sent that way. Protocol 3: the rule
 * is kept with its policy_rev; the watch and the synced outcomes ask for
 * the policy, a policy event (a reload) refreshes it, and a snapshot of
 * another policy_rev makes it unknown again (failures synced until a
 * reply brings it).
 * Counted successes: when cbd's hello (sent on every watch connection)
 * lists "success" in outcome_counts, a closed call's success that is not
 * slow (by the circuit's slow_call_ms as cbd reported it, and by the
 * breaker's own) is not queued as a line of its own: the cache counts it
 * in an open fold of its breaker's line, which goes out as one line
 * (record_success with "count": N, no duration_ms) before any other line
 * is queued (every circuit's outcomes keep their order: a success only
 * ever moves later, never past a later line), with the next write (the
 * same 1-10 ms timer as the lines: a success reaches cbd at most one
 * write later, as before), at 1,000,000 successes, when 64 folds are open,
 * and when the connection is lost (then queued for the next one, as the
 * lines are: every line not wholly written, the one half written
 * included, goes whole to the next connection) or the cache closes. A slow success, a failure, an ignored
 * outcome and a refusal count go as lines, as does every success on a
 * connection whose cbd has not said it takes counts (an older cbd, or
 * until its hello reply comes). folded counts the successes sent so.
 * Staleness: a change made by another process (a trip, a hold) is seen
 * here once cbd's event is delivered, one write and one read after the
 * request that caused it; until then calls decide on the previous state.
 * A cbd that stops answering but keeps the connection open (frozen) is
 * noticed within about 1.5 s of its last line (probe_timeouts): from then
 * on, no live watch; a reconnect (every 20 ms) is live only once cbd
 * answers on it. When the cache decides again after the store degraded,
 * its reading ends the degradation: a circuit held or opened meanwhile
 * stays so if cbd then goes away. */
typedef enum cbc_cache_mode {
	CBC_CACHE_AUTO = 0, /* on for a remote store without a clock option */
	CBC_CACHE_OFF, /* every decision asks cbd (protocol 1 behaviour) */
	CBC_CACHE_ON, /* on; CBC_EINVAL when the store is not remote or a clock is set */
} cbc_cache_mode;

/* Most circuit names one process's cache watches (more: those breakers
 * ask cbd; counted in names_full). */
#define CBC_CACHE_NAMES_MAX 4096u
/* Most outcome bytes waiting to be written. A call whose outcome finds
 * them queued (cbd reads slower than calls come) waits until cbd has read
 * some, at most 1 s (then, cbd counting as frozen, it reports through the
 * store); counted in out_full. */
#define CBC_CACHE_OUT_MAX (1024u * 1024u)

/* The counters of a process's cache (shared by its cached breakers). */
typedef struct cbc_cache_stats {
	bool live; /* the watch connection is up */
	size_t names; /* names watched */
	uint64_t permitted; /* calls let through from the cache (closed) */
	uint64_t refused_calls; /* calls refused from the cache (open) */
	uint64_t asked; /* decisions left to cbd (half_open, elapsed, not live) */
	uint64_t noreply_lines; /* noreply lines queued (a counted line: one) */
	uint64_t sends; /* writes that carried them (lines / sends: batching) */
	uint64_t store_reports; /* cached outcomes reported through the store */
	uint64_t events; /* events applied (change, policy, delete, ...) */
	uint64_t connects; /* watch connections made (reconnects included) */
	uint64_t disconnects; /* watch connections lost */
	uint64_t refused; /* ok:false answers to a watch (a protocol 1 cbd) */
	uint64_t bad_lines; /* lines or snapshots that could not be read */
	uint64_t out_full; /* limit hits: CBC_CACHE_OUT_MAX (calls that waited) */
	uint64_t names_full; /* limit hits: CBC_CACHE_NAMES_MAX */
	uint64_t line_too_long; /* limit hits: a line from cbd too long */
	int64_t last_event_us; /* monotonic µs when the last event was applied */
	/* Watch connections dropped because cbd did not answer: nothing
	 * received for 500 ms brings a hello, and nothing received within
	 * 1 s after it drops the connection as lost (a frozen cbd). */
	uint64_t probe_timeouts;
	/* Outcomes that could trip their circuit by this process's own
	 * counts, sent with their reply awaited (at most 1 s: then counted in
	 * sync_timeouts). */
	uint64_t synced;
	uint64_t sync_timeouts;
	/* Successes sent inside counted lines ("count": N > 1, one line for
	 * N successes; a cbd whose hello lists "success" in outcome_counts).
	 * noreply_lines counts each such line once. (libcbclient 7.) */
	uint64_t folded;
	/* The live connection's cbd takes counted successes (its hello's
	 * reply came and listed "success"): successes fold from now on. */
	bool folding;
} cbc_cache_stats;

/* The protected operation: returns 0 on success, anything else is a
 * result the classifier classifies. */
typedef int (*cbc_call_fn)(void *arg);
/* Classify a NONZERO result of the call: success (a business error, say),
 * failure, or ignore (counts neither way). Never called for 0, which is
 * always a success. Default (no classifier): every nonzero result is a
 * failure. */
typedef cbc_outcome (*cbc_classify_fn)(int result, void *user);
/* The older two-way form: does this NONZERO result count as a failure
 * (true) or as a success (false)? Like the classifier it is never called
 * for 0 (before libcbclient's interface 2 it was, so `r != 7` turned
 * successes into failures). Set classify or error_filter, not both. */
typedef bool (*cbc_error_filter_fn)(int result, void *user);

/* HTTP: a call that returns the response's status (100..599) lets
 * cbc_classify_http classify it; a transport error (no status) returns
 * any other nonzero value (say -1). 0 stays "success" (never asked).
 *   failure: 5xx, 408 (request timeout), 429 (too many requests), and
 *            anything that is not a status (transport errors)
 *   success: 1xx, 2xx, 3xx and the other 4xx (the caller's business
 *            errors: the dependency answered) */
cbc_outcome cbc_http_outcome(int status);
/* cbc_http_outcome as a classifier (user is unused). */
cbc_outcome cbc_classify_http(int result, void *user);
/* Runs instead of the call when it is not permitted; its return value
 * becomes the result. */
typedef int (*cbc_fallback_fn)(void *arg, int64_t retry_after_ms, void *user);
/* A transition the breaker observed. error points at the protected call's
 * result when that call's failure caused it, else NULL. A new breaker
 * assumes closed: if the store already holds another state, the first
 * call (or refresh) that sees it fires closed -> that state. */
typedef void (*cbc_state_change_fn)(cbc_state prev, cbc_state next, const int *error, void *user);
/* A clock in ms since the epoch (tests use virtual time); when set, the
 * breaker sends it as ctx.now with every store call. */
typedef int64_t (*cbc_clock_fn)(void *user);

typedef struct cbc_breaker_options {
	/* The circuit's name, agreed by every process sharing it. Required
	 * when a store is given; a private store defaults it to "default". */
	const char *name;
	/* Policy, each 0 = not given (the store's config, else the built-in
	 * default: 5, 2, 30000, 1, break_ms, no gap limit). */
	int64_t failure_threshold; /* 1..1000000000 */
	int64_t success_threshold; /* 1..1000000000 */
	int64_t break_ms; /* 1..2^53 */
	int64_t half_open_max; /* 1..1000000000 */
	int64_t slot_ttl_ms; /* 1..2^53 */
	int64_t max_gap_ms; /* 1..2^53 */
	/* Protocol 2's trip rules, each 0 (UNSET, NULL) = not given; bounds
	 * and meaning as in cbc_ctx and README "Choosing a trip rule". */
	cbc_trip trip;
	cbc_window window;
	int64_t window_size;
	int64_t minimum_calls;
	int64_t failure_rate;
	int64_t slow_call_ms;
	int64_t slow_call_rate;
	int64_t min_reporters;
	int64_t reporter_window_ms;
	int64_t break_backoff;
	int64_t break_max_ms;
	/* Protocol 3 (§7b), 0 = not given: see cbc_ctx. A private store
	 * (store NULL) applies them in this process (without waiting). */
	int64_t max_concurrent;
	int64_t retry_budget_percent;
	int64_t retry_min_per_s;
	const char *preset; /* copied */
	/* The store (borrowed); NULL: a private local store. A given store is
	 * wrapped in a resilient store with store_policy. */
	cbc_store *store;
	cbc_store_policy store_policy;
	int64_t timeout_backoff_ms; /* see cbc_resilient_options; <0: default */
	/* Cached mode (above); AUTO: on for a remote store (off when a
	 * clock is given: the cache keeps real time). */
	cbc_cache_mode cache;
	/* Protocol 3: how long a call may wait for a bulkhead ticket when the
	 * circuit's max_concurrent calls are in flight (0..CBC_WAIT_MAX_MS;
	 * 0: refused at once with CBC_EBULKHEAD). Sent as allow's wait_ms;
	 * the request's I/O timeout grows by it. With wait_ms, the breaker
	 * asks on connections of its own (one per call in flight, kept for
	 * reuse, same socket and timeouts as the store's), so a waiting call
	 * never holds up the store's connection (other threads, the reports
	 * that hand tickets back). */
	int64_t wait_ms;
	/* Callbacks (each may be NULL); user is passed to each. */
	cbc_classify_fn classify;
	cbc_error_filter_fn error_filter; /* not with classify */
	cbc_fallback_fn fallback;
	cbc_state_change_fn on_state_change;
	cbc_store_error_fn on_store_error;
	cbc_clock_fn clock;
	void *user;
} cbc_breaker_options;

/* Everything 0/NULL, store_policy LOCAL, timeout_backoff_ms default. */
void cbc_breaker_options_init(cbc_breaker_options *opts);

/* NULL with CBC_EINVAL naming the option when an option is invalid. */
cbc_breaker *cbc_breaker_new(const cbc_breaker_options *opts, cbc_error *err);
void cbc_breaker_free(cbc_breaker *breaker);

const char *cbc_breaker_name(const cbc_breaker *breaker);

/* What execute did. */
typedef struct cbc_exec_result {
	int result; /* fn's (or the fallback's) return value */
	bool called; /* fn ran */
	bool fallback_called; /* the fallback ran */
	bool counted_failure; /* fn's result counted as a failure */
	cbc_outcome outcome; /* how fn's result was classified (when called) */
	int64_t duration_ms; /* how long fn ran (monotonic clock; when called) */
	cbc_state state; /* the state after the call */
	int64_t retry_after_ms; /* when not permitted: time until the next try */
	cbc_reason reason; /* when not permitted: why (protocol 3) */
} cbc_exec_result;

/* Run fn(arg) when the circuit permits it, and record the outcome with
 * fn's duration (measured on the monotonic clock, sent as duration_ms so
 * a slow_call_ms rule counts slow calls).
 *   CBC_OK     fn ran (out->result is its value), or the fallback ran.
 *   CBC_EOPEN  not permitted and no fallback; out->retry_after_ms.
 *   CBC_EBULKHEAD  protocol 3: the circuit's max_concurrent calls are in
 *              flight and none ended within wait_ms (no fallback);
 *              out->reason CBC_REASON_CONCURRENCY.
 *   other      only with CBC_POLICY_REJECT: the store failed before fn
 *              (fn did not run).
 * In half_open a trial slot is reserved from the store before fn and
 * released after it, so half_open_max trials run at a time across every
 * process sharing the circuit. On a remote store the permit is asked with
 * cbd's allow (its refusals count in totals.rejected; a half-open permit
 * is allow's slot), and every outcome is reported, ignored ones included
 * (cbd's totals.ignored), so cbd's totals count this process's calls as
 * they count any client's; when cbd is unavailable the store ops and the
 * store policy answer. out may be NULL. */
cbc_status cbc_breaker_execute(cbc_breaker *breaker, cbc_call_fn fn, void *arg,
    cbc_exec_result *out, cbc_error *err);

/* The two-step form, for callers that cannot pass a function. */
typedef struct cbc_permit {
	bool granted; /* set by acquire; cleared by report */
	cbc_state state; /* the state that granted it */
	int64_t retry_after_ms; /* when refused */
	bool has_slot; /* a half-open trial slot is held */
	char slot_token[CBC_TOKEN_SIZE];
	int64_t granted_at; /* monotonic ms when granted (for the duration) */
	bool cached; /* granted from the cache: the outcome goes as noreply */
	/* Protocol 3: why it was refused; has_slot also when the permit is a
	 * bulkhead ticket (handed back by report, whatever the outcome). */
	cbc_reason reason;
	int64_t in_flight; /* refused for concurrency: tickets held; else -1 */
	bool retry; /* asked as a retry (cbc_retry_execute) */
	/* The library's own (do not touch): with wait_ms, the connection of
	 * the breaker's that holds the ticket until report. */
	void *wait_conn;
} cbc_permit;

/* CBC_OK: permit granted, make the call then report. CBC_EOPEN: refused
 * (permit->retry_after_ms, permit->reason); CBC_EBULKHEAD: the bulkhead
 * is full. Other statuses as for execute.
 * Protocol 3's bulkhead: when cbd reports the circuit has max_concurrent
 * (its snapshots carry in_flight), every permit is asked of cbd (never
 * granted from the cache) and holds a ticket; report hands it back
 * whatever the outcome. A permit never reported keeps its ticket until
 * the store's connection closes or the ticket's ttl (slot_ttl_ms). */
cbc_status cbc_breaker_acquire(cbc_breaker *breaker, cbc_permit *permit, cbc_error *err);
/* Report the outcome of a granted permit (releases its slot), with the
 * time since acquire granted it as the call's duration. CBC_ESTATE when
 * the permit was not granted or was already reported. Store errors are
 * never reported here. */
cbc_status cbc_breaker_report(cbc_breaker *breaker, cbc_permit *permit, cbc_outcome outcome,
    cbc_error *err);
/* cbc_breaker_report with the call's duration: duration_ms >= 0 is sent
 * as it is (the caller timed the call); negative: the time since acquire
 * granted the permit (monotonic clock), which is what cbc_breaker_report
 * sends. */
cbc_status cbc_breaker_report_duration(cbc_breaker *breaker, cbc_permit *permit,
    cbc_outcome outcome, int64_t duration_ms, cbc_error *err);

/* The counters of the cache this breaker uses; CBC_EINVAL when the
 * breaker is not cached. */
cbc_status cbc_breaker_cache_stats(cbc_breaker *breaker, cbc_cache_stats *out, cbc_error *err);

/* The last state the breaker observed (no I/O). */
cbc_state cbc_breaker_state(cbc_breaker *breaker);
/* Re-read the store; fires on_state_change for changes made elsewhere. */
cbc_status cbc_breaker_refresh(cbc_breaker *breaker, cbc_state *state, cbc_error *err);
cbc_status cbc_breaker_force_open(cbc_breaker *breaker, cbc_error *err);
cbc_status cbc_breaker_force_close(cbc_breaker *breaker, cbc_error *err);
cbc_status cbc_breaker_force_half_open(cbc_breaker *breaker, cbc_error *err);

/* ------------------------------------------------------------------ */
/* Retries (client/retry.c)                                           */
/* ------------------------------------------------------------------ */

/* Retries with backoff and a per-attempt timeout around a breaker, as the
 * Python, Go and Node.js clients do (README "Retries"). The breaker is
 * asked before every attempt and every attempt's outcome is reported to
 * it; a refusal from an open circuit ends the retries at once. No thread
 * is spawned: an attempt is told its deadline and must keep it; one that
 * returns at or after its deadline counts as a timed-out failure. The
 * backoff before retry n is drawn from [0, min(max_ms, base_ms * 2^(n-1))]
 * (full jitter); the clock, sleep and random source can be replaced
 * (virtual time in tests). */

#define CBC_RETRY_DEFAULT_ATTEMPTS 3
#define CBC_RETRY_DEFAULT_BASE_MS 100
#define CBC_RETRY_DEFAULT_MAX_MS 10000
/* Bounds of the options (CBC_EINVAL naming the field outside them). */
#define CBC_RETRY_ATTEMPTS_MAX 1000
#define CBC_RETRY_DELAY_MAX_MS INT64_C(3600000)
#define CBC_RETRY_TIMEOUT_MAX_MS INT64_C(3600000)
/* The deadline passed to an attempt when there is no timeout. */
#define CBC_RETRY_NO_DEADLINE INT64_MAX

/* The protected attempt: deadline_ms is absolute on the options' clock
 * (monotonic ms), CBC_RETRY_NO_DEADLINE without timeout_ms. Returns 0 on
 * success, else a result the breaker's classifier judges. */
typedef int (*cbc_retry_fn)(void *arg, int64_t deadline_ms);
/* Retry after this failed attempt? result is the attempt's value,
 * timed_out whether it ran past its deadline. NULL: retry every failure. */
typedef bool (*cbc_retry_on_fn)(int result, bool timed_out, void *user);
/* Monotonic milliseconds; sleep ms; a uniform 64-bit random number. */
typedef int64_t (*cbc_retry_clock_fn)(void *user);
typedef void (*cbc_retry_sleep_fn)(int64_t ms, void *user);
typedef uint64_t (*cbc_retry_rand_fn)(void *user);

/* Hooks (each may be NULL), on the calling thread, in this order for a
 * failed attempt: on_circuit_* (state changes seen), on_timeout,
 * on_failure, then on_retry before the sleep. */
typedef struct cbc_retry_hooks {
	void (*on_retry)(int attempt, int result, int64_t delay_ms, void *user);
	void (*on_timeout)(int attempt, void *user);
	void (*on_failure)(int attempt, int result, void *user);
	/* The circuit refused an attempt (retry_after_ms) or opened on this
	 * run's report (CBC_TIME_NONE); once per open period of a run. */
	void (*on_circuit_open)(int64_t retry_after_ms, void *user);
	void (*on_circuit_half_open)(void *user);
	void (*on_circuit_closed)(void *user);
} cbc_retry_hooks;

typedef struct cbc_retry_options {
	int max_attempts; /* attempts in all, 1..CBC_RETRY_ATTEMPTS_MAX */
	int64_t timeout_ms; /* per attempt; 0: none; ..CBC_RETRY_TIMEOUT_MAX_MS */
	int64_t base_ms; /* 0..max_ms */
	int64_t max_ms; /* base_ms..CBC_RETRY_DELAY_MAX_MS */
	cbc_retry_on_fn retry_on;
	cbc_retry_hooks hooks;
	/* NULL: CLOCK_MONOTONIC, nanosleep, getrandom. */
	cbc_retry_clock_fn clock;
	cbc_retry_sleep_fn sleep;
	cbc_retry_rand_fn rand;
	void *user; /* passed to every callback above */
} cbc_retry_options;

/* What a run did. */
typedef struct cbc_retry_result {
	int result; /* the last attempt's value */
	int attempts; /* attempts made (fn calls) */
	bool succeeded; /* the last attempt counted as a success */
	bool timed_out; /* the last attempt ran past its deadline */
	cbc_outcome outcome; /* how the last attempt was reported */
	int64_t retry_after_ms; /* CBC_EOPEN: the circuit's time left */
	cbc_reason reason; /* a refusal's reason (protocol 3) */
} cbc_retry_result;

/* The defaults above; no callbacks. */
void cbc_retry_options_init(cbc_retry_options *opts);
/* CBC_EINVAL naming the first invalid field of opts. */
cbc_status cbc_retry_options_check(const cbc_retry_options *opts, cbc_error *err);
/* The backoff before retry number retry (1, 2, ...), drawn with opts'
 * random source (0 for retry < 1). */
int64_t cbc_retry_delay_ms(const cbc_retry_options *opts, int retry);
/* Run fn(arg, deadline) until an attempt succeeds, retry_on says no, the
 * attempts are spent or the circuit refuses. breaker may be NULL (every
 * nonzero result is then a failure); opts NULL: the defaults.
 *   CBC_OK        the last attempt ran: out->succeeded tells how it went.
 *   CBC_ETIMEOUT  the last attempt ran past its deadline.
 *   CBC_EOPEN     the circuit refused an attempt (out->retry_after_ms).
 *   CBC_EBULKHEAD the bulkhead refused an attempt (protocol 3).
 *   CBC_EBUDGET   a retry was refused by the circuit's retry budget
 *                 (protocol 3): retries stop; out->retry_after_ms.
 * Protocol 3: attempts after the first are asked as retries ("retry":
 * true on allow; always a round trip to cbd, even on a cached breaker),
 * so cbd counts them against the circuit's retry budget.
 *   other         invalid options, or the store failed before an attempt
 *                 (CBC_POLICY_REJECT). out may be NULL. */
cbc_status cbc_retry_execute(cbc_breaker *breaker, const cbc_retry_options *opts, cbc_retry_fn fn,
    void *arg, cbc_retry_result *out, cbc_error *err);

#ifdef __cplusplus
}
#endif

#endif
