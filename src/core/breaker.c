/* SPDX-License-Identifier: Apache-2.0 */
/*
 * breaker.c — the circuit-breaker state machine (see breaker.h).
 *
 * Each rule below is a sentence of proto/PROTOCOL.md §7, "Snapshots,
 * lifetime and the state machine"; the unit tests in tests/check_breaker.c
 * hold one case per rule.
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
	policy->window = CB_WINDOW_COUNT;
	policy->window_size = CB_DEFAULT_WINDOW_COUNT;
	policy->minimum_calls = CB_DEFAULT_MINIMUM_CALLS;
	policy->failure_rate = CB_DEFAULT_FAILURE_RATE;
	policy->slow_call_ms = 0;
	policy->slow_call_rate = CB_DEFAULT_SLOW_CALL_RATE;
	policy->min_reporters = CB_DEFAULT_MIN_REPORTERS;
	policy->reporter_window_ms = CB_DEFAULT_REPORTER_WINDOW_MS;
	policy->break_backoff = CB_DEFAULT_BREAK_BACKOFF;
	policy->break_max_ms = 0;
	policy->max_concurrent = 0;
	policy->retry_budget_percent = -1;
	policy->retry_min_per_s = CB_DEFAULT_RETRY_MIN_PER_S;
}

void
breaker_snapshot_init(cb_snapshot *snap)
{
	snap->state = CB_STATE_CLOSED;
	snap->failure_count = 0;
	snap->success_count = 0;
	snap->last_failure_at = CB_TIME_NONE;
	snap->opened_at = CB_TIME_NONE;
	snap->current_break_ms = 0;
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

int64_t
breaker_break_ms(const cb_snapshot *snap, const cb_policy *policy)
{
	return snap->current_break_ms > 0 ? snap->current_break_ms : policy->break_ms;
}

/* A failed trial: open again, with a longer break when break_backoff says
 * so (capped at break_max_ms). */
static void
trial_failed(cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	if (policy->break_backoff > 1) {
		int64_t grown = breaker_break_ms(snap, policy);

		grown = grown > CB_DURATION_MAX / policy->break_backoff
		    ? CB_DURATION_MAX
		    : grown * policy->break_backoff;
		if (policy->break_max_ms > 0 && grown > policy->break_max_ms)
			grown = policy->break_max_ms;
		snap->current_break_ms = grown;
	}
	trip_open(snap, now);
	snap->last_failure_at = now;
}

/* Closed for good after trials: counts and the grown break start over. */
static void
close_after_trials(cb_snapshot *snap)
{
	snap->state = CB_STATE_CLOSED;
	snap->failure_count = 0;
	snap->success_count = 0;
	snap->opened_at = CB_TIME_NONE;
	snap->current_break_ms = 0;
}

void
breaker_reporters_init(cb_reporters *r, int64_t min_reporters)
{
	r->slots = (uint32_t)min_reporters;
	memset(r->r, 0, sizeof r->r[0] * r->slots);
	for (uint32_t i = 0; i < r->slots; i++)
		r->r[i].at = CB_TIME_NONE;
}

size_t
breaker_reporters_bytes(int64_t min_reporters)
{
	return sizeof(cb_reporters) + sizeof(cb_reporter) * (size_t)min_reporters;
}

uint32_t
breaker_reporters_count(const cb_reporters *r, int64_t now, int64_t window_ms)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < r->slots; i++)
		n += r->r[i].at != CB_TIME_NONE && now - r->r[i].at <= window_ms;
	return n;
}

/* Note a report by id at now: its entry is refreshed, or the oldest
 * entry makes room (only the newest `slots` distinct reporters matter). */
static void
reporters_note(cb_reporters *r, int64_t id, int64_t now)
{
	uint32_t oldest = 0;

	for (uint32_t i = 0; i < r->slots; i++) {
		if (r->r[i].at != CB_TIME_NONE && r->r[i].id == id) {
			if (now > r->r[i].at)
				r->r[i].at = now;
			return;
		}
		if (r->r[i].at == CB_TIME_NONE ||
		    (r->r[oldest].at != CB_TIME_NONE && r->r[i].at < r->r[oldest].at))
			oldest = i;
	}
	r->r[oldest].id = id;
	r->r[oldest].at = now;
}

/* The shared-breaker gate (closed -> open only): enough distinct peers
 * reported a failure or a slow call recently. */
static bool
reporters_allow_trip(const cb_policy *policy, const cb_outcome *o, int64_t now)
{
	if (policy->min_reporters <= 1 || o->reporters == NULL)
		return true;
	return breaker_reporters_count(o->reporters, now, policy->reporter_window_ms) >=
	    (uint32_t)policy->min_reporters;
}

/* The rate rule in closed: does the window, with this call in it, open? */
static bool
rate_trips(const cb_policy *policy, const cb_outcome *o, int64_t now)
{
	bool slow_rule = policy->slow_call_ms > 0;
	cb_window_counts n;

	if (o->window == NULL)
		return false;
	window_add(o->window, o->failure, slow_rule && o->slow, now);
	n = window_counts(o->window, now);
	if (n.calls == 0 || (int64_t)n.calls < policy->minimum_calls)
		return false;
	/* Exactly in integers: failures x 100 >= failure_rate x calls. */
	return (int64_t)n.failures * 100 >= policy->failure_rate * (int64_t)n.calls ||
	    (slow_rule && (int64_t)n.slow * 100 >= policy->slow_call_rate * (int64_t)n.calls);
}

cb_reason
breaker_on_outcome(cb_snapshot *snap, const cb_policy *policy, int64_t now, const cb_outcome *o)
{
	/* A slow call counts as a failure in half_open when the rate rule's
	 * slow rule is on. */
	bool bad =
	    o->failure || (o->slow && policy->trip == CB_TRIP_RATE && policy->slow_call_ms > 0);
	bool trips;

	if (bad && o->reporters != NULL)
		reporters_note(o->reporters, o->reporter, now);
	switch (snap->state) {
	case CB_STATE_CLOSED:
		if (o->failure) {
			if (breaker_chain_continues(snap, policy, now))
				snap->failure_count++;
			else
				snap->failure_count = 1;
			snap->last_failure_at = now;
		} else {
			snap->failure_count = 0;
		}
		if (policy->trip == CB_TRIP_RATE)
			trips = rate_trips(policy, o, now);
		else
			trips = o->failure && snap->failure_count >= policy->failure_threshold;
		if (!trips || !reporters_allow_trip(policy, o, now))
			return CB_REASON_NONE;
		trip_open(snap, now);
		return policy->trip == CB_TRIP_RATE ? CB_REASON_FAILURE_RATE
						    : CB_REASON_FAILURE_THRESHOLD;
	case CB_STATE_HALF_OPEN:
		if (bad) {
			trial_failed(snap, policy, now);
			return CB_REASON_TRIAL_FAILED;
		}
		snap->success_count++;
		if (snap->success_count < policy->success_threshold)
			return CB_REASON_NONE;
		close_after_trials(snap);
		return CB_REASON_TRIAL_SUCCEEDED;
	case CB_STATE_OPEN:
		/* A straggler never extends the break window. */
		if (o->failure)
			snap->last_failure_at = now;
		return CB_REASON_NONE;
	}
	return CB_REASON_NONE;
}

/* The rate rule's test of the window as it is (rate_trips without the
 * call it adds). */
static bool
rate_reached(const cb_policy *policy, cb_window_counts n)
{
	bool slow_rule = policy->slow_call_ms > 0;

	if (n.calls == 0 || (int64_t)n.calls < policy->minimum_calls)
		return false;
	return (int64_t)n.failures * 100 >= policy->failure_rate * (int64_t)n.calls ||
	    (slow_rule && (int64_t)n.slow * 100 >= policy->slow_call_rate * (int64_t)n.calls);
}

/* How many successes alike may be added to w, after the one just added
 * did not trip, before one more might (that one is then added and tested
 * alone); `left` when none of the rest can trip. Added successes only
 * lower the failure share and, when not slow, the slow share, so a test
 * that failed with at least minimum_calls in the window fails for every
 * later one; slow ones raise the slow share. */
static uint64_t
successes_safe(const cb_policy *policy, const cb_window *w, bool slow, uint64_t left)
{
	cb_window_counts n = w->counts;
	int64_t calls = n.calls, min = policy->minimum_calls, need;

	if (calls < min) {
		/* Each success adds a call until a count window is full. */
		if (w->kind == CB_WINDOW_COUNT && min > (int64_t)w->slots)
			return left;
		if (w->kind == CB_WINDOW_TIME && n.calls == CB_WINDOW_CALLS_MAX)
			return left;
		need = min - calls - 1; /* the pushes that keep calls < min */
		return (uint64_t)need < left ? (uint64_t)need : left;
	}
	if (!slow)
		return left;
	if (w->kind == CB_WINDOW_COUNT)
		return 0; /* the share moves with what drops out: one at a time */
	/* A time window: calls and slow both grow by one a success; the
	 * first j with (slow + j) x 100 >= rate x (calls + j). */
	if (policy->slow_call_rate >= CB_PERCENT_MAX || n.calls == CB_WINDOW_CALLS_MAX)
		return left;
	need = policy->slow_call_rate * calls - (int64_t)n.slow * 100;
	need = (need + (CB_PERCENT_MAX - policy->slow_call_rate) - 1) /
	    (CB_PERCENT_MAX - policy->slow_call_rate);
	return (uint64_t)(need - 1) < left ? (uint64_t)(need - 1) : left;
}

cb_reason
breaker_on_successes(cb_snapshot *snap, const cb_policy *policy, int64_t now, const cb_outcome *o,
    uint64_t *n)
{
	bool slow = o->slow && policy->trip == CB_TRIP_RATE && policy->slow_call_ms > 0;
	bool window_slow = policy->slow_call_ms > 0 && o->slow;
	uint64_t want = *n, done, skip;
	cb_reason reason;

	if (want <= 1) {
		*n = want;
		return want == 1 ? breaker_on_outcome(snap, policy, now, o) : CB_REASON_NONE;
	}
	switch (snap->state) {
	case CB_STATE_CLOSED:
		/* The first one as ever (it notes a slow reporter, moves the
		 * window's head and resets the failure count). */
		reason = breaker_on_outcome(snap, policy, now, o);
		if (reason != CB_REASON_NONE) {
			*n = 1;
			return reason;
		}
		if (policy->trip != CB_TRIP_RATE || o->window == NULL ||
		    !reporters_allow_trip(policy, o, now)) {
			/* Nothing of the rest can trip: the window takes them. */
			if (policy->trip == CB_TRIP_RATE && o->window != NULL)
				window_add_run(o->window, false, window_slow, want - 1, now);
			return CB_REASON_NONE;
		}
		for (done = 1; done < want; done++) {
			skip = successes_safe(policy, o->window, slow, want - done);
			window_add_run(o->window, false, window_slow, skip, now);
			done += skip;
			if (done == want)
				break;
			window_add(o->window, false, window_slow, now);
			if (rate_reached(policy, window_counts(o->window, now))) {
				trip_open(snap, now);
				*n = done + 1;
				return CB_REASON_FAILURE_RATE;
			}
		}
		return CB_REASON_NONE;
	case CB_STATE_HALF_OPEN:
		if (slow || snap->success_count + 1 >= policy->success_threshold) {
			*n = 1;
			return breaker_on_outcome(snap, policy, now, o);
		}
		/* Trial successes until the one that closes. */
		done = (uint64_t)(policy->success_threshold - snap->success_count) - 1;
		if (want <= done) {
			snap->success_count += (int64_t)want;
			return CB_REASON_NONE;
		}
		snap->success_count += (int64_t)done;
		*n = done + 1;
		return breaker_on_outcome(snap, policy, now, o);
	case CB_STATE_OPEN:
		/* What one does there (a slow one notes its reporter), once. */
		return breaker_on_outcome(snap, policy, now, o);
	}
	return CB_REASON_NONE;
}

cb_reason
breaker_on_success(cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	cb_outcome o = { .failure = false };

	return breaker_on_outcome(snap, policy, now, &o);
}

cb_reason
breaker_on_failure(cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	cb_outcome o = { .failure = true };

	return breaker_on_outcome(snap, policy, now, &o);
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
		snap->current_break_ms = 0;
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
	return now - snap->opened_at >= breaker_break_ms(snap, policy);
}

int64_t
breaker_retry_after_ms(const cb_snapshot *snap, const cb_policy *policy, int64_t now)
{
	int64_t elapsed;

	if (snap->state != CB_STATE_OPEN || breaker_break_elapsed(snap, policy, now))
		return 0;
	/* A clock behind opened_at (another process's ctx.now) is no time. */
	elapsed = now > snap->opened_at ? now - snap->opened_at : 0;
	return breaker_break_ms(snap, policy) - elapsed;
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
	case CB_REASON_FAILURE_RATE:
		return "failure or slow-call rate reached";
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
	case CB_REASON_WRITTEN_BACK:
		return "written back: an operator's action on a host while Redis was away";
	case CB_REASON_MERGED:
		return "merged with the fleet's circuit";
	}
	return "unknown";
}
