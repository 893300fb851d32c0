/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_trace.c — replays proto/traces/state-machine.json, the
 * language-neutral trace of the state machine, against the core's circuit
 * table (what cbd and libcbclient's local store run). Every client's local
 * state machine replays the same file, so they all agree with cbd.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check-run.h"
#include "circuit-table.h"
#include "proto.h"
#include "trace-load.h"

/* The case's policy: its ctx members resolved like a creating request's. */
static void
case_policy(const json_t *policy, cb_policy *out, proto_ctx *declared)
{
	json_t *request = json_pack("{s:O}", "ctx", policy);
	proto_layer layer = { declared, NULL, PROTO_SOURCE_CLIENT };
	proto_error err;

	ck_assert_msg(proto_ctx_from_json(request, declared, &err), "%s", err.message);
	json_decref(request);
	if (proto_ctx_has(declared, PROTO_CTX_PRESET))
		layer.preset = proto_preset_builtin(declared->preset);
	proto_policy_resolve(&layer, 1, out, NULL);
}

/* want[key] (an integer or null) equals got. */
static void
expect_time(const json_t *want, const char *key, int64_t got, const char *where)
{
	const json_t *v = json_object_get(want, key);

	if (v == NULL)
		return;
	if (json_is_null(v))
		ck_assert_msg(got == CB_TIME_NONE, "%s: %s is %lld, want null", where, key,
		    (long long)got);
	else
		ck_assert_msg(got == json_integer_value(v), "%s: %s is %lld, want %lld", where, key,
		    (long long)got, (long long)json_integer_value(v));
}

static void
replay_case(const json_t *c)
{
	const char *title = json_string_value(json_object_get(c, "name"));
	circuit_table *table = circuit_table_new(100, 42);
	proto_ctx declared;
	cb_policy policy;
	size_t i;
	json_t *step;

	ck_assert_ptr_nonnull(table);
	case_policy(json_object_get(c, "policy"), &policy, &declared);
	json_array_foreach (json_object_get(c, "steps"), i, step) {
		const char *op = json_string_value(json_object_get(step, "op"));
		const json_t *want = json_object_get(step, "expect");
		ct_call call = { .policy = &policy, .declared = &declared };
		char where[256];
		ct_view view;

		call.now = call.clock = json_integer_value(json_object_get(step, "now"));
		call.duration_ms = json_integer_value(json_object_get(step, "duration_ms"));
		snprintf(where, sizeof where, "%s, step %zu (%s)", title, i, op);
		if (strcmp(op, "allow") == 0) {
			ct_allow a;

			ck_assert_int_eq(circuit_table_allow(table, "c", &call, &a, &view, NULL),
			    CT_OK);
			ck_assert_msg(a.allowed == json_is_true(json_object_get(want, "allowed")),
			    "%s: allowed", where);
			ck_assert_str_eq(breaker_state_name(a.state),
			    json_string_value(json_object_get(want, "state")));
			if (!a.allowed)
				ck_assert_msg(a.retry_after_ms ==
					json_integer_value(json_object_get(want, "retry_after_ms")),
				    "%s: retry_after_ms %lld", where, (long long)a.retry_after_ms);
			if (a.has_permit)
				circuit_table_release_slot(table, "c", a.permit.token, call.now);
			continue;
		}
		if (strcmp(op, "success") == 0)
			ck_assert_int_eq(circuit_table_record_success(table, "c", &call, &view,
					     NULL),
			    CT_OK);
		else if (strcmp(op, "failure") == 0)
			ck_assert_int_eq(circuit_table_record_failure(table, "c", &call, &view,
					     NULL),
			    CT_OK);
		else if (strcmp(op, "ignore") == 0)
			circuit_table_record_ignore(table, "c", &call, &view, NULL);
		else if (strcmp(op, "force") == 0) {
			cb_state st;
			const char *name = json_string_value(json_object_get(step, "state"));

			ck_assert(breaker_state_parse(name, strlen(name), &st));
			ck_assert_int_eq(circuit_table_set_state(table, "c", st, NULL, &call, &view,
					     NULL),
			    CT_OK);
		} else
			ck_abort_msg("%s: unknown op", where);
		ck_assert_msg(strcmp(breaker_state_name(view.snap.state),
				  json_string_value(json_object_get(want, "state"))) == 0,
		    "%s: state %s", where, breaker_state_name(view.snap.state));
		ck_assert_msg(view.snap.failure_count ==
			json_integer_value(json_object_get(want, "failure_count")),
		    "%s: failure_count %lld", where, (long long)view.snap.failure_count);
		ck_assert_msg(view.snap.success_count ==
			json_integer_value(json_object_get(want, "success_count")),
		    "%s: success_count", where);
		expect_time(want, "last_failure_at", view.snap.last_failure_at, where);
		expect_time(want, "opened_at", view.snap.opened_at, where);
		ck_assert_msg(breaker_break_ms(&view.snap, &policy) ==
			json_integer_value(json_object_get(want, "current_break_ms")),
		    "%s: current_break_ms", where);
		if (json_object_get(want, "window") != NULL) {
			const json_t *w = json_object_get(want, "window");

			ck_assert_msg(view.has_window, "%s: no window", where);
			ck_assert_msg(view.window.calls ==
				    json_integer_value(json_object_get(w, "calls")) &&
				view.window.failures ==
				    json_integer_value(json_object_get(w, "failures")) &&
				view.window.slow == json_integer_value(json_object_get(w, "slow")),
			    "%s: window %u/%u/%u", where, view.window.calls, view.window.failures,
			    view.window.slow);
		}
	}
	circuit_table_free(table);
}

START_TEST(trace_replays)
{
	json_t *doc = trace_load(), *c;
	size_t i;

	json_array_foreach (json_object_get(doc, "cases"), i, c)
		replay_case(c);
	json_decref(doc);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("trace");

	tcase_add_test(tc, trace_replays);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
