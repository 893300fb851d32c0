/*
 * breaker.c — the circuit-breaker state machine (see breaker.h).
 *
 * Each rule below is a sentence of protocol-v1.md's "The state machine"
 * section; the unit tests in tests/check_breaker.c hold one case per rule.
 */
#include <string.h>

#include "breaker.h"

static const char *const state_names[CB_STATE_COUNT] = {
	[CB_STATE_CLOSED] = "closed",
	[CB_STATE_OPEN] = "open",
	[CB_STATE_HALF_OPEN] = "half_open",
};

void
breaker_policy_default(cb_policy *policy)
{
	policy->trip = CB_TRIP_CONSECUTIVE;
	policy->failure_threshold = CB_DEFAULT_FAILURE_THRESHOLD;
	policy->success_threshold = CB_DEFAULT_SUCCESS_THRESHOLD;
	policy->break_ms = CB_DEFAULT_BREAK_MS;
	policy->half_open_max = CB_DEFAULT_HALF_OPEN_MAX;
	policy->slot_ttl_ms = CB_DEFAULT_BREAK_MS;
	policy->max_gap_ms = 0;
}

void
breaker_snapshot_init(cb_snapshot *snap)
{
	snap->state = CB_STATE_CLOSED;
	snap->failure_count = 0;
	snap->success_count = 0;
	snap->last_failure_at = CB_TIME_NONE;
	snap->opened_at = CB_TIME_NONE;
}

bool
breaker_snapshot_is_initial(const cb_snapshot *snap)
{
	return snap->state == CB_STATE_CLOSED && snap->failure_count == 0 &&
	    snap->success_count == 0 && snap->last_failure_at == CB_TIME_NONE &&
	    snap->opened_at == CB_TIME_NONE;
}

/* Enter open: the break window starts now and trial successes restart. */
static void
trip_open(cb_snapshot *snap, int64_t now)
{
	snap->state = CB_STATE_OPEN;
	snap->opened_at = now;
	snap->success_count = 0;
}

cb_reason
breaker_on_success(cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	(void)now;
	switch (snap->state) {
	case CB_STATE_CLOSED:
		snap->failure_count = 0;
		return CB_REASON_NONE;
	case CB_STATE_HALF_OPEN:
		snap->success_count++;
		if (snap->success_count < policy->success_threshold)
			return CB_REASON_NONE;
		snap->state = CB_STATE_CLOSED;
		snap->failure_count = 0;
		snap->success_count = 0;
		snap->opened_at = CB_TIME_NONE;
		return CB_REASON_TRIAL_SUCCEEDED;
	case CB_STATE_OPEN:
		/* A straggler from before the trip: no change. */
		return CB_REASON_NONE;
	}
	return CB_REASON_NONE;
}

/* The consecutive rule: failure_threshold failures in one chain. */
static cb_reason
failure_consecutive(cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	switch (snap->state) {
	case CB_STATE_CLOSED:
		if (breaker_chain_continues(snap, policy, now))
			snap->failure_count++;
		else
			snap->failure_count = 1;
		snap->last_failure_at = now;
		if (snap->failure_count < policy->failure_threshold)
			return CB_REASON_NONE;
		trip_open(snap, now);
		return CB_REASON_FAILURE_THRESHOLD;
	case CB_STATE_HALF_OPEN:
		trip_open(snap, now);
		snap->last_failure_at = now;
		return CB_REASON_TRIAL_FAILED;
	case CB_STATE_OPEN:
		/* A straggler never extends the break window. */
		snap->last_failure_at = now;
		return CB_REASON_NONE;
	}
	return CB_REASON_NONE;
}

cb_reason
breaker_on_failure(cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	switch (policy->trip) {
	case CB_TRIP_CONSECUTIVE:
		return failure_consecutive(snap, policy, now);
	}
	return CB_REASON_NONE;
}

cb_reason
breaker_on_allow(cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	if (!breaker_break_elapsed(snap, policy, now))
		return CB_REASON_NONE;
	breaker_force(snap, CB_STATE_HALF_OPEN, now);
	return CB_REASON_BREAK_ELAPSED;
}

void
breaker_force(cb_snapshot *snap, cb_state state, int64_t now)
{
	snap->state = state;
	switch (state) {
	case CB_STATE_CLOSED:
		snap->failure_count = 0;
		snap->success_count = 0;
		snap->opened_at = CB_TIME_NONE;
		break;
	case CB_STATE_OPEN:
		snap->opened_at = now;
		snap->success_count = 0;
		break;
	case CB_STATE_HALF_OPEN:
		snap->success_count = 0;
		break;
	}
}

bool
breaker_chain_continues(const cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	if (policy->max_gap_ms <= 0 || snap->last_failure_at == CB_TIME_NONE)
		return true;
	return now - snap->last_failure_at <= policy->max_gap_ms;
}

bool
breaker_break_elapsed(const cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	if (snap->state != CB_STATE_OPEN)
		return false;
	/* A forced open on a snapshot with no opened_at cannot happen (force
	 * sets it), but treat it as elapsed rather than open forever. */
	if (snap->opened_at == CB_TIME_NONE)
		return true;
	return now - snap->opened_at >= policy->break_ms;
}

int64_t
breaker_retry_after_ms(const cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	int64_t elapsed;

	if (snap->state != CB_STATE_OPEN || breaker_break_elapsed(snap, policy, now))
		return 0;
	/* A clock behind opened_at (another process's ctx.now) is no time. */
	elapsed = now > snap->opened_at ? now - snap->opened_at : 0;
	return policy->break_ms - elapsed;
}

cb_reason
breaker_hold_end(cb_snapshot *snap, cb_state held, int64_t now)
{
	if (held == CB_STATE_OPEN) {
		breaker_force(snap, CB_STATE_HALF_OPEN, now);
		return CB_REASON_HOLD_EXPIRED;
	}
	breaker_force(snap, CB_STATE_CLOSED, now);
	return CB_REASON_HOLD_EXPIRED;
}

const char *
breaker_state_name(cb_state state)
{
	if ((unsigned)state >= CB_STATE_COUNT)
		return "unknown";
	return state_names[state];
}

bool
breaker_state_parse(const char *text, size_t len, cb_state *out)
{
	for (int i = 0; i < CB_STATE_COUNT; i++) {
		if (strlen(state_names[i]) == len && memcmp(state_names[i], text, len) == 0) {
			*out = (cb_state)i;
			return true;
		}
	}
	return false;
}

const char *
breaker_reason_text(cb_reason reason)
{
	switch (reason) {
	case CB_REASON_NONE:
		return "no change";
	case CB_REASON_FAILURE_THRESHOLD:
		return "failure threshold reached";
	case CB_REASON_TRIAL_FAILED:
		return "trial call failed";
	case CB_REASON_TRIAL_SUCCEEDED:
		return "trial calls succeeded";
	case CB_REASON_BREAK_ELAPSED:
		return "break elapsed";
	case CB_REASON_FORCED:
		return "forced by an operator";
	case CB_REASON_CAS:
		return "compare-and-set";
	case CB_REASON_HELD:
		return "held by an operator";
	case CB_REASON_HOLD_EXPIRED:
		return "hold expired";
	case CB_REASON_RELEASED:
		return "hold released by an operator";
	}
	return "unknown";
}
