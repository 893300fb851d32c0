/*
 * breaker.h — the circuit-breaker state machine (protocol v1's rules, with
 * protocol 2's retry_after_ms clamp and hold endings).
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

/* How failures trip the circuit. Only the spec's rule exists today. */
typedef enum cb_trip_rule {
	/* failure_threshold failures in a chain (see max_gap_ms). */
	CB_TRIP_CONSECUTIVE = 0,
} cb_trip_rule;

/* Why a transition happened; the daemon logs it beside old -> new. */
typedef enum cb_reason {
	CB_REASON_NONE = 0, /* no state change */
	CB_REASON_FAILURE_THRESHOLD, /* closed -> open */
	CB_REASON_TRIAL_FAILED, /* half_open -> open */
	CB_REASON_TRIAL_SUCCEEDED, /* half_open -> closed */
	CB_REASON_BREAK_ELAPSED, /* open -> half_open on allow */
	CB_REASON_FORCED, /* set_state */
	CB_REASON_CAS, /* a successful cas */
	CB_REASON_HELD, /* set_state with hold */
	CB_REASON_HOLD_EXPIRED, /* a hold's ttl ran out */
	CB_REASON_RELEASED, /* an operator released a hold */
} cb_reason;

/* The policy of one call: every member already resolved (ctx, config,
 * built-in default). max_gap_ms == 0 means "unset". */
typedef struct cb_policy {
	cb_trip_rule trip;
	int64_t failure_threshold;
	int64_t success_threshold;
	int64_t break_ms;
	int64_t half_open_max;
	int64_t slot_ttl_ms;
	int64_t max_gap_ms;
} cb_policy;

/* The spec's snapshot, less the name and retry_after_ms (derived). */
typedef struct cb_snapshot {
	cb_state state;
	int64_t failure_count;
	int64_t success_count;
	int64_t last_failure_at; /* CB_TIME_NONE when null */
	int64_t opened_at; /* CB_TIME_NONE when null */
} cb_snapshot;

/* The built-in default policy (slot_ttl_ms = break_ms, max_gap unset). */
void breaker_policy_default(cb_policy *policy);

/* The initial snapshot: closed, 0, 0, null, null. */
void breaker_snapshot_init(cb_snapshot *snap);

/* True when snap equals the initial snapshot (nothing worth storing). */
bool breaker_snapshot_is_initial(const cb_snapshot *snap);

/* Apply a successful call; returns why the state changed, or NONE. */
cb_reason breaker_on_success(cb_snapshot *snap, const cb_policy *policy, int64_t now);

/* Apply a failed call; returns why the state changed, or NONE. */
cb_reason breaker_on_failure(cb_snapshot *snap, const cb_policy *policy, int64_t now);

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
