/* SPDX-License-Identifier: Apache-2.0 */
/*
 * breaker.h — the circuit-breaker state machine: protocol v1's rules, and
 * protocol 2's rate rule (with window.c), slow calls, min_reporters,
 * break_backoff, the retry_after_ms clamp and hold endings.
 *
 * Pure: no I/O, no clock reads, no allocation. Every decision takes `now`
 * (ms since the Unix epoch) from the caller, so the daemon, libcbclient's
 * local fallback and the tests (virtual time) all run this same code.
 *
 * The trip rule is data (cb_policy.trip): callers hand a policy to
 * breaker_on_failure()/breaker_on_success() and never branch on the rule
 * themselves, so a second rule (failure rate over a sliding window) can be
 * added here without touching them.
 */
#ifndef CBD_BREAKER_H
#define CBD_BREAKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "window.h"

/* "null" for a time member of a snapshot (last_failure_at, opened_at). */
#define CB_TIME_NONE INT64_C(-1)

/* Bounds of the protocol's numbers (spec: "Names, numbers, time"). */
#define CB_COUNT_MIN INT64_C(1)
#define CB_COUNT_MAX INT64_C(1000000000)
#define CB_DURATION_MIN INT64_C(1)
#define CB_DURATION_MAX (INT64_C(1) << 53)
#define CB_TIME_MIN INT64_C(0)
#define CB_TIME_MAX (INT64_C(1) << 53)

/* Built-in defaults (spec: "ctx — the policy of one call"). */
#define CB_DEFAULT_FAILURE_THRESHOLD 5
#define CB_DEFAULT_SUCCESS_THRESHOLD 2
#define CB_DEFAULT_BREAK_MS 30000
#define CB_DEFAULT_HALF_OPEN_MAX 1
/* Most slots one circuit may grant at once (protocol 2, §9). */
#define CB_HALF_OPEN_MAX 10000

typedef enum cb_state {
	CB_STATE_CLOSED = 0,
	CB_STATE_OPEN,
	CB_STATE_HALF_OPEN,
} cb_state;

#define CB_STATE_COUNT 3

/* How failures trip the circuit. */
typedef enum cb_trip_rule {
	/* failure_threshold failures in a chain (see max_gap_ms). */
	CB_TRIP_CONSECUTIVE = 0,
	/* the failure rate (or slow-call rate) over a sliding window. */
	CB_TRIP_RATE,
} cb_trip_rule;

/* Defaults of the rate rule and of the shared-breaker keys (spec §3). */
#define CB_DEFAULT_WINDOW_COUNT 100
#define CB_DEFAULT_WINDOW_TIME_MS 60000
#define CB_DEFAULT_MINIMUM_CALLS 10
#define CB_DEFAULT_FAILURE_RATE 50
#define CB_DEFAULT_SLOW_CALL_RATE 100
#define CB_DEFAULT_MIN_REPORTERS 1
#define CB_DEFAULT_REPORTER_WINDOW_MS 60000
#define CB_DEFAULT_BREAK_BACKOFF 1
/* Bounds of the shared-breaker keys. */
#define CB_REPORTERS_MAX 64
#define CB_BREAK_BACKOFF_MAX 10
#define CB_PERCENT_MAX 100
/* Protocol 3: the bulkhead (max_concurrent) and the retry budget. */
#define CB_CONCURRENT_MAX 1000000
#define CB_RETRY_BUDGET_PERCENT_MAX 1000
#define CB_RETRY_MIN_PER_S_MAX 1000000
#define CB_DEFAULT_RETRY_MIN_PER_S 10
/* The retry budget's window: this many one-second buckets. */
#define CB_RETRY_WINDOW_S 10

/* Why a transition happened; the daemon logs it beside old -> new. */
typedef enum cb_reason {
	CB_REASON_NONE = 0, /* no state change */
	CB_REASON_FAILURE_THRESHOLD, /* closed -> open (consecutive) */
	CB_REASON_FAILURE_RATE, /* closed -> open (rate) */
	CB_REASON_TRIAL_FAILED, /* half_open -> open */
	CB_REASON_TRIAL_SUCCEEDED, /* half_open -> closed */
	CB_REASON_BREAK_ELAPSED, /* open -> half_open on allow */
	CB_REASON_FORCED, /* set_state */
	CB_REASON_CAS, /* a successful cas */
	CB_REASON_HELD, /* set_state with hold */
	CB_REASON_HOLD_EXPIRED, /* a hold's ttl ran out */
	CB_REASON_RELEASED, /* an operator released a hold */
	CB_REASON_WRITTEN_BACK, /* fleet: an operator's action made while Redis was away */
	CB_REASON_MERGED, /* fleet: a host's copy merged with the fleet's circuit */
} cb_reason;

/* The policy of one call: every member already resolved (config, the
 * creating request, built-in default). 0 means "unset" for max_gap_ms,
 * slow_call_ms and break_max_ms. */
typedef struct cb_policy {
	cb_trip_rule trip;
	int64_t failure_threshold;
	int64_t success_threshold;
	int64_t break_ms;
	int64_t half_open_max;
	int64_t slot_ttl_ms;
	int64_t max_gap_ms;
	/* trip = rate */
	cb_window_kind window;
	int64_t window_size; /* calls (count) or ms (time) */
	int64_t minimum_calls;
	int64_t failure_rate; /* percent */
	int64_t slow_call_ms;
	int64_t slow_call_rate; /* percent */
	/* any rule */
	int64_t min_reporters;
	int64_t reporter_window_ms;
	int64_t break_backoff;
	int64_t break_max_ms;
	/* protocol 3 */
	int64_t max_concurrent; /* tickets in flight at once; 0: no limit */
	int64_t retry_budget_percent; /* -1: no retry budget */
	int64_t retry_min_per_s;
} cb_policy;

/* The spec's snapshot, less the name and retry_after_ms (derived). */
typedef struct cb_snapshot {
	cb_state state;
	int64_t failure_count;
	int64_t success_count;
	int64_t last_failure_at; /* CB_TIME_NONE when null */
	int64_t opened_at; /* CB_TIME_NONE when null */
	int64_t current_break_ms; /* the break grown by break_backoff; 0: break_ms */
} cb_snapshot;

/* The recent reporters of failures (min_reporters > 1): who and when, the
 * newest `slots` distinct ones. */
typedef struct cb_reporter {
	int64_t id; /* a process id (cbd: SO_PEERCRED) */
	int64_t at;
} cb_reporter;

typedef struct cb_reporters {
	uint32_t slots;
	cb_reporter r[];
} cb_reporters;

/* One call's outcome and what the rules beyond the snapshot need. */
typedef struct cb_outcome {
	bool failure;
	bool slow; /* duration_ms >= slow_call_ms */
	cb_window *window; /* trip = rate: the circuit's window */
	cb_reporters *reporters; /* min_reporters > 1: its recent reporters */
	int64_t reporter; /* who reports this call */
} cb_outcome;

/* The built-in default policy (slot_ttl_ms = break_ms, max_gap unset). */
void breaker_policy_default(cb_policy *policy);

/* The initial snapshot: closed, 0, 0, null, null. */
void breaker_snapshot_init(cb_snapshot *snap);

/* True when snap equals the initial snapshot (nothing worth storing). */
bool breaker_snapshot_is_initial(const cb_snapshot *snap);

/* Apply one call's outcome under the policy's trip rule; returns why the
 * state changed, or NONE. The window (rate rule) and reporters are updated;
 * a transition does not empty the window (the caller does, for every
 * transition alike). */
cb_reason breaker_on_outcome(cb_snapshot *snap, const cb_policy *policy, int64_t now,
    const cb_outcome *outcome);

/* Apply *n successes alike (o->failure false) as *n breaker_on_outcome
 * calls would, in bulk: the cost does not grow with *n (a count window
 * takes at most its size in pushes). Stops right after the first
 * transition (the caller empties the window, then applies the rest):
 * *n becomes how many were applied, and the reason is returned; NONE when
 * all were applied without one. */
cb_reason breaker_on_successes(cb_snapshot *snap, const cb_policy *policy, int64_t now,
    const cb_outcome *o, uint64_t *n);

/* breaker_on_outcome of a plain success / failure (no window, no
 * reporters, not slow). */
cb_reason breaker_on_success(cb_snapshot *snap, const cb_policy *policy, int64_t now);
cb_reason breaker_on_failure(cb_snapshot *snap, const cb_policy *policy, int64_t now);

/* The break in effect: break_ms, or the one break_backoff grew. */
int64_t breaker_break_ms(const cb_snapshot *snap, const cb_policy *policy);

/* Bytes of a reporters record for min_reporters. */
size_t breaker_reporters_bytes(int64_t min_reporters);
/* Make r (breaker_reporters_bytes() long) empty. */
void breaker_reporters_init(cb_reporters *r, int64_t min_reporters);
/* Distinct reporters whose last report at `at` has now - at <= window_ms. */
uint32_t breaker_reporters_count(const cb_reporters *r, int64_t now, int64_t window_ms);

/* allow's first step: an open circuit whose break has elapsed moves to
 * half_open. Returns CB_REASON_BREAK_ELAPSED when it moved, else NONE. */
cb_reason breaker_on_allow(cb_snapshot *snap, const cb_policy *policy, int64_t now);

/* Force a state (set_state, the target of a successful cas). */
void breaker_force(cb_snapshot *snap, cb_state state, int64_t now);

/* Does a failure at `now` continue the current chain (max_gap_ms)? */
bool breaker_chain_continues(const cb_snapshot *snap, const cb_policy *policy, int64_t now);

/* Is the circuit open with its break window over? */
bool breaker_break_elapsed(const cb_snapshot *snap, const cb_policy *policy, int64_t now);

/* Time left in the break window while open; 0 once elapsed or not open.
 * Never more than break_ms: a `now` before opened_at counts as no time
 * elapsed. */
int64_t breaker_retry_after_ms(const cb_snapshot *snap, const cb_policy *policy, int64_t now);

/* The end of an operator's hold on `held` (open or closed): a held open
 * circuit goes to half_open (trial calls decide), a held closed one stays
 * closed with its counts reset. Returns the reason for the change log. */
cb_reason breaker_hold_end(cb_snapshot *snap, cb_state held, int64_t now);

/* Wire name of a state ("closed", "open", "half_open"). */
const char *breaker_state_name(cb_state state);

/* Parse a wire state name of `len` bytes; false when it is not one. */
bool breaker_state_parse(const char *text, size_t len, cb_state *out);

/* A short phrase for logs ("failure threshold reached"). */
const char *breaker_reason_text(cb_reason reason);

#endif
