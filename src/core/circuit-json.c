/* SPDX-License-Identifier: Apache-2.0 */
/*
 * circuit-json.c — a circuit as jansson values (see circuit-json.h): its
 * hold, totals, window and whole snapshot, and the hold and totals read
 * back. Pure: no I/O, no clock.
 */
#include <string.h>

#include "circuit-json.h"

json_t *
circuit_json_hold(const ct_hold *hold)
{
	if (!hold->held)
		return json_null();
	return json_pack("{s:s, s:I, s:s, s:o, s:I, s:o}", "state", breaker_state_name(hold->state),
	    "by_uid", (json_int_t)hold->by_uid, "by_user", hold->by_user, "reason",
	    hold->reason != NULL ? json_string(hold->reason) : json_null(), "since",
	    (json_int_t)hold->since, "until",
	    hold->until != CB_TIME_NONE ? json_integer(hold->until) : json_null());
}

bool
circuit_json_hold_read(const json_t *hold, ct_hold *out, proto_error *err)
{
	memset(out, 0, sizeof *out);
	out->until = CB_TIME_NONE;
	if (hold == NULL || json_is_null(hold))
		return true;
	if (!json_is_object(hold))
		return proto_fail(err, PROTO_BAD_REQUEST, "hold must be an object or null");
	out->held = true;
	if (!proto_get_state(hold, "state", true, &out->state, NULL, err) ||
	    !proto_get_int(hold, "by_uid", -1, INT64_C(4294967295), true, &out->by_uid, NULL,
		err) ||
	    !proto_get_text(hold, "by_user", true, &out->by_user, NULL, err) ||
	    !proto_get_text(hold, "reason", false, &out->reason, NULL, err) ||
	    !proto_get_int(hold, "since", CB_TIME_MIN, CB_TIME_MAX, true, &out->since, NULL, err) ||
	    !proto_get_int(hold, "until", CB_TIME_MIN, CB_TIME_MAX, false, &out->until, NULL, err))
		return false;
	if (out->state == CB_STATE_HALF_OPEN)
		return proto_fail(err, PROTO_BAD_REQUEST, "hold.state must be open or closed");
	return true;
}

/* A count member (>= 0) into *out; false when absent or not one. */
static bool
count_from_json(const json_t *obj, const char *key, uint64_t *out)
{
	const json_t *v = json_object_get(obj, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

bool
circuit_json_totals_read(const json_t *totals, ct_totals *out, proto_error *err)
{
	if (!json_is_object(totals) || !count_from_json(totals, "successes", &out->successes) ||
	    !count_from_json(totals, "failures", &out->failures) ||
	    !count_from_json(totals, "ignored", &out->ignored) ||
	    !count_from_json(totals, "slow", &out->slow) ||
	    !count_from_json(totals, "rejected", &out->rejected))
		return proto_fail(err, PROTO_BAD_REQUEST, "totals must hold five counts");
	return true;
}

json_t *
circuit_json_totals(const ct_totals *t)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I}", "successes", (json_int_t)t->successes,
	    "failures", (json_int_t)t->failures, "ignored", (json_int_t)t->ignored, "slow",
	    (json_int_t)t->slow, "rejected", (json_int_t)t->rejected);
}

json_t *
circuit_json_window(const ct_view *view)
{
	cb_window_counts w = view->has_window ? view->window : (cb_window_counts){ 0 };
	double calls = w.calls;

	return json_pack("{s:i, s:i, s:i, s:f, s:f}", "calls", (int)w.calls, "failures",
	    (int)w.failures, "slow", (int)w.slow, "failure_rate",
	    w.calls > 0 ? w.failures * 100.0 / calls : 0.0, "slow_call_rate",
	    w.calls > 0 ? w.slow * 100.0 / calls : 0.0);
}

json_t *
circuit_json_snapshot(const char *name, const ct_view *view, const cb_policy *policy,
    const char *preset, const proto_policy_sources *sources, int64_t now)
{
	json_t *obj =
	    proto_snapshot_to_json(name, &view->snap, circuit_table_retry_after(view, policy, now));

	if (obj == NULL)
		return NULL;
	if (json_object_set_new(obj, "policy", proto_policy_to_json(policy, preset, sources)) !=
		0 ||
	    json_object_set_new(obj, "hold", circuit_json_hold(&view->hold)) != 0 ||
	    json_object_set_new(obj, "totals", circuit_json_totals(&view->totals)) != 0 ||
	    json_object_set_new(obj, "current_break_ms",
		json_integer(breaker_break_ms(&view->snap, policy))) != 0 ||
	    (policy->trip == CB_TRIP_RATE &&
		json_object_set_new(obj, "window", circuit_json_window(view)) != 0) ||
	    (policy->min_reporters > 1 &&
		json_object_set_new(obj, "reporters",
		    json_integer(view->reporters != NULL ? breaker_reporters_count(view->reporters,
							       now, policy->reporter_window_ms)
							 : 0)) != 0)) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}
