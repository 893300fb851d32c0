/* SPDX-License-Identifier: Apache-2.0 */
/*
 * circuit-json.c — a circuit as jansson values (see circuit-json.h): its
 * hold, totals, window and whole snapshot, and the one reader of holds and
 * totals (cbd's state file and fleet script, libcbclient's replies). Pure:
 * no I/O, no clock.
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

json_t *
circuit_json_totals(const ct_totals *t)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "successes",
	    (json_int_t)t->successes, "failures", (json_int_t)t->failures, "ignored",
	    (json_int_t)t->ignored, "slow", (json_int_t)t->slow, "rejected",
	    (json_int_t)t->rejected, "rejected_concurrency", (json_int_t)t->rejected_concurrency,
	    "retries", (json_int_t)t->retries, "rejected_retry", (json_int_t)t->rejected_retry);
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
    const char *preset, const proto_policy_sources *sources, int64_t now, bool with_policy)
{
	json_t *obj =
	    proto_snapshot_to_json(name, &view->snap, circuit_table_retry_after(view, policy, now));

	if (obj == NULL)
		return NULL;
	if (json_object_set_new(obj, "policy_rev", json_integer(view->policy_rev)) != 0 ||
	    (with_policy &&
		json_object_set_new(obj, "policy", proto_policy_to_json(policy, preset, sources)) !=
		    0) ||
	    json_object_set_new(obj, "hold", circuit_json_hold(&view->hold)) != 0 ||
	    json_object_set_new(obj, "totals", circuit_json_totals(&view->totals)) != 0 ||
	    json_object_set_new(obj, "current_break_ms",
		json_integer(breaker_break_ms(&view->snap, policy))) != 0 ||
	    (policy->max_concurrent > 0 &&
		json_object_set_new(obj, "in_flight", json_integer((json_int_t)view->in_flight)) !=
		    0) ||
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

/* Member key of obj as an integer in [min, max]: absent is *out alone
 * (false with err when required), null is null_value when null_ok. */
static bool
read_int(proto_node *obj, const char *path, const char *key, int64_t min, int64_t max,
    bool required, bool null_ok, int64_t null_value, int64_t *out, proto_error *err)
{
	proto_node v = proto_node_get(obj, key);
	int64_t n;

	switch (proto_node_typeof(&v)) {
	case PROTO_NODE_ABSENT:
		if (required)
			return proto_fail(err, PROTO_BAD_REQUEST, "%s.%s is missing", path, key);
		return true;
	case PROTO_NODE_NULL:
		if (!null_ok)
			break;
		*out = null_value;
		return true;
	case PROTO_NODE_INT:
		n = proto_node_int(&v);
		if (n < min || n > max)
			break;
		*out = n;
		return true;
	default:
		break;
	}
	return proto_fail(err, PROTO_BAD_REQUEST, "%s.%s must be an integer from %lld to %lld",
	    path, key, (long long)min, (long long)max);
}

/* Member key of obj as a string without NUL (pointing into obj): absent
 * or null is NULL (false with err when required). */
static bool
read_text(proto_node *obj, const char *path, const char *key, bool required, const char **out,
    proto_error *err)
{
	proto_node v = proto_node_get(obj, key);
	size_t len = 0;

	*out = NULL;
	if (proto_node_is_absent(&v) || proto_node_is_null(&v)) {
		if (required)
			return proto_fail(err, PROTO_BAD_REQUEST, "%s.%s is missing", path, key);
		return true;
	}
	*out = proto_node_string(&v, &len);
	if (*out == NULL)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s.%s must be a string", path, key);
	if (strlen(*out) != len)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s.%s must not contain NUL bytes", path,
		    key);
	return true;
}

bool
circuit_json_hold_read(proto_node *hold, const char *path, circuit_json_mode mode, ct_hold *out,
    proto_error *err)
{
	bool strict = mode == CIRCUIT_JSON_STRICT;
	const char *state;
	size_t len;

	memset(out, 0, sizeof *out);
	out->until = CB_TIME_NONE;
	out->by_user = "";
	if (proto_node_is_absent(hold) || proto_node_is_null(hold))
		return true;
	if (!proto_node_is_object(hold))
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be an object or null", path);
	out->held = true;
	if (!read_text(hold, path, "state", false, &state, err))
		return false;
	len = state != NULL ? strlen(state) : 0;
	if (state == NULL || !breaker_state_parse(state, len, &out->state) ||
	    out->state == CB_STATE_HALF_OPEN)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s.state must be open or closed", path);
	if (!read_int(hold, path, "by_uid", -1, INT64_C(4294967295), strict, !strict, -1,
		&out->by_uid, err) ||
	    !read_text(hold, path, "by_user", strict, &out->by_user, err) ||
	    !read_text(hold, path, "reason", false, &out->reason, err) ||
	    !read_int(hold, path, "since", CB_TIME_MIN, CB_TIME_MAX, true, false, 0, &out->since,
		err) ||
	    !read_int(hold, path, "until", CB_TIME_MIN, CB_TIME_MAX, false, true, CB_TIME_NONE,
		&out->until, err))
		return false;
	if (out->by_user == NULL)
		out->by_user = "";
	return true;
}

bool
circuit_json_totals_read(proto_node *totals, const char *path, circuit_json_mode mode,
    ct_totals *out, unsigned *found, proto_error *err)
{
	static const char *const keys[CIRCUIT_JSON_TOTALS_COUNT] = { "successes", "failures",
		"ignored", "slow", "rejected", "rejected_concurrency", "retries",
		"rejected_retry" };
	uint64_t *fields[CIRCUIT_JSON_TOTALS_COUNT] = { &out->successes, &out->failures,
		&out->ignored, &out->slow, &out->rejected, &out->rejected_concurrency,
		&out->retries, &out->rejected_retry };
	bool strict = mode == CIRCUIT_JSON_STRICT;

	*found = 0;
	if (!proto_node_is_object(totals)) {
		if (!strict && (proto_node_is_absent(totals) || proto_node_is_null(totals)))
			return true;
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be an object", path);
	}
	for (unsigned k = 0; k < CIRCUIT_JSON_TOTALS_COUNT; k++) {
		/* Tolerant: null (or, from no cbd, a negative count) is not
		 * reported, as absent is. */
		int64_t n = -1;

		if (!read_int(totals, path, keys[k], strict ? 0 : INT64_MIN, INT64_MAX,
			strict && k < CIRCUIT_JSON_TOTALS_V2, !strict, -1, &n, err))
			return false;
		if (n >= 0) {
			*fields[k] = (uint64_t)n;
			*found |= 1u << k;
		}
	}
	return true;
}
