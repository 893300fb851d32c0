/*
 * check_proto.c — unit tests for the shared codec pieces: member readers
 * and their messages, name validation, the ctx table, policy layering and
 * snapshots to and from JSON.
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check-run.h"

#include "circuit-table.h"
#include "proto.h"

static json_t *
parse(const char *text)
{
	json_error_t jerr;
	json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);

	ck_assert_msg(v != NULL, "bad test JSON: %s", jerr.text);
	return v;
}

START_TEST(int_member_rules)
{
	json_t *req = parse(
	    "{\"a\": 5, \"f\": 5.0, \"n\": -1, \"s\": \"5\", \"z\": null, \"big\": 2000000000}");
	proto_error err;
	int64_t v = 0;
	bool present = true;

	ck_assert(proto_get_int(req, "a", 1, 10, true, &v, &present, &err));
	ck_assert_int_eq(v, 5);
	ck_assert(present);
	ck_assert(!proto_get_int(req, "f", 1, 10, true, &v, NULL, &err));
	ck_assert_int_eq(err.code, PROTO_BAD_REQUEST);
	ck_assert_ptr_nonnull(strstr(err.message, "f must be an integer"));
	ck_assert(!proto_get_int(req, "n", 1, 10, false, &v, NULL, &err));
	ck_assert(!proto_get_int(req, "s", 1, 10, false, &v, NULL, &err));
	ck_assert(!proto_get_int(req, "big", CB_COUNT_MIN, CB_COUNT_MAX, false, &v, NULL, &err));
	ck_assert_ptr_nonnull(strstr(err.message, "big"));
	/* null reads as absent: fine when optional, an error when required. */
	v = 77;
	ck_assert(proto_get_int(req, "z", 1, 10, false, &v, &present, &err));
	ck_assert(!present);
	ck_assert_int_eq(v, 77);
	ck_assert(!proto_get_int(req, "z", 1, 10, true, &v, NULL, &err));
	ck_assert_str_eq(err.message, "z is required");
	ck_assert(!proto_get_int(req, "missing", 1, 10, true, &v, NULL, &err));
	ck_assert_str_eq(err.message, "missing is required");
	json_decref(req);
}
END_TEST

START_TEST(name_rules)
{
	const char *why;
	char longest[CT_NAME_MAX + 2];

	ck_assert(proto_name_valid("payments", 8, &why));
	ck_assert(proto_name_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, &why));
	ck_assert(!proto_name_valid("", 0, &why));
	memset(longest, 'x', sizeof longest);
	ck_assert(proto_name_valid(longest, CT_NAME_MAX, &why));
	ck_assert(!proto_name_valid(longest, CT_NAME_MAX + 1, &why));
	ck_assert_str_eq(why, "must be 1 to 256 bytes");
	ck_assert(!proto_name_valid("a\nb", 3, &why));
	ck_assert_str_eq(why, "must not contain control characters");
	ck_assert(!proto_name_valid("a\0b", 3, &why));
	ck_assert(!proto_name_valid("a\x7f", 2, &why));
	ck_assert(!proto_name_valid("\xc2\x85", 2, &why)); /* C1 NEL */
	ck_assert_str_eq(why, "must not contain control characters");
	ck_assert(!proto_name_valid("\xff", 1, &why));
	ck_assert_str_eq(why, "must be valid UTF-8");
	ck_assert(!proto_name_valid("\xc3", 1, &why)); /* truncated */
	ck_assert(!proto_name_valid("\xc0\xaf", 2, &why)); /* overlong */
	ck_assert(!proto_name_valid("\xe0\x80\xaf", 3, &why)); /* overlong */
	ck_assert(!proto_name_valid("\xed\xa0\x80", 3, &why)); /* surrogate */
	ck_assert(!proto_name_valid("\xf4\x90\x80\x80", 4, &why)); /* > U+10FFFF */
}
END_TEST

START_TEST(name_member_messages)
{
	json_t *req = parse("{\"name\": \"\", \"num\": 3, \"ctl\": \"a\\u0001\"}");
	proto_error err;
	const char *name;

	ck_assert(!proto_get_name(req, "name", &name, &err));
	ck_assert_str_eq(err.message, "name must be 1 to 256 bytes");
	ck_assert(!proto_get_name(req, "num", &name, &err));
	ck_assert_str_eq(err.message, "num must be a string");
	ck_assert(!proto_get_name(req, "ctl", &name, &err));
	ck_assert_str_eq(err.message, "ctl must not contain control characters");
	ck_assert(!proto_get_name(req, "absent", &name, &err));
	ck_assert_str_eq(err.message, "absent is required");
	json_decref(req);
}
END_TEST

START_TEST(state_member)
{
	json_t *req = parse("{\"a\": \"half_open\", \"b\": \"HALF_OPEN\", \"c\": 1}");
	proto_error err;
	cb_state st;
	bool present;

	ck_assert(proto_get_state(req, "a", true, &st, &present, &err));
	ck_assert_int_eq(st, CB_STATE_HALF_OPEN);
	ck_assert(present);
	ck_assert(!proto_get_state(req, "b", true, &st, NULL, &err));
	ck_assert_ptr_nonnull(strstr(err.message, "b must be"));
	ck_assert(!proto_get_state(req, "c", true, &st, NULL, &err));
	ck_assert(proto_get_state(req, "d", false, &st, &present, &err));
	ck_assert(!present);
	json_decref(req);
}
END_TEST

START_TEST(ctx_members)
{
	json_t *req = parse("{\"ctx\": {\"failure_threshold\": 7, \"now\": 0, \"max_gap_ms\": "
			    "null, \"unknown\": 1}}");
	proto_ctx ctx;
	proto_error err;

	ck_assert(proto_ctx_from_json(req, &ctx, &err));
	ck_assert(proto_ctx_has(&ctx, PROTO_CTX_FAILURE_THRESHOLD));
	ck_assert_int_eq(ctx.value[PROTO_CTX_FAILURE_THRESHOLD], 7);
	ck_assert(proto_ctx_has(&ctx, PROTO_CTX_NOW));
	ck_assert_int_eq(ctx.value[PROTO_CTX_NOW], 0);
	ck_assert(!proto_ctx_has(&ctx, PROTO_CTX_MAX_GAP_MS));
	ck_assert(!proto_ctx_has(&ctx, PROTO_CTX_BREAK_MS));
	json_decref(req);

	const char *bad[] = {
		"{\"ctx\": 5}",
		"{\"ctx\": {\"failure_threshold\": 0}}",
		"{\"ctx\": {\"success_threshold\": 1000000001}}",
		"{\"ctx\": {\"break_ms\": 1.5}}",
		"{\"ctx\": {\"half_open_max\": \"1\"}}",
		"{\"ctx\": {\"slot_ttl_ms\": -1}}",
		"{\"ctx\": {\"now\": 9007199254740993}}",
	};
	const char *fields[] = { "ctx", "ctx.failure_threshold", "ctx.success_threshold",
		"ctx.break_ms", "ctx.half_open_max", "ctx.slot_ttl_ms", "ctx.now" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		req = parse(bad[i]);
		ck_assert_msg(!proto_ctx_from_json(req, &ctx, &err), "accepted %s", bad[i]);
		ck_assert_int_eq(err.code, PROTO_BAD_REQUEST);
		ck_assert_msg(strncmp(err.message, fields[i], strlen(fields[i])) == 0,
		    "message \"%s\" does not name %s", err.message, fields[i]);
		json_decref(req);
	}
	/* Bounds: 2^53 is the largest duration and time. */
	req = parse("{\"ctx\": {\"now\": 9007199254740992, \"break_ms\": 9007199254740992}}");
	ck_assert(proto_ctx_from_json(req, &ctx, &err));
	json_decref(req);
}
END_TEST

START_TEST(ctx_table_rows)
{
	proto_ctx_key key;

	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		const proto_ctx_def *def = proto_ctx_def_get((proto_ctx_key)k);

		ck_assert(proto_ctx_key_parse(def->name, &key));
		ck_assert_int_eq(key, k);
		ck_assert_int_lt(def->min, def->max);
	}
	ck_assert(!proto_ctx_key_parse("breakms", &key));
}
END_TEST

START_TEST(policy_layers)
{
	proto_ctx circuit = { 0 }, client = { 0 }, defaults = { 0 };
	const proto_layer layers[] = { { &circuit, NULL, PROTO_SOURCE_CONFIG },
		{ &client, NULL, PROTO_SOURCE_CLIENT },
		{ &defaults, NULL, PROTO_SOURCE_DEFAULTS } };
	proto_policy_sources src;
	cb_policy p;

	proto_policy_resolve(layers, 3, &p, &src);
	ck_assert_int_eq(p.failure_threshold, 5);
	ck_assert_int_eq(p.break_ms, 30000);
	ck_assert_int_eq(p.slot_ttl_ms, 30000);
	ck_assert_int_eq(p.max_gap_ms, 0);
	ck_assert_int_eq(src.key[PROTO_CTX_BREAK_MS], PROTO_SOURCE_BUILTIN);

	proto_ctx_set(&defaults, PROTO_CTX_FAILURE_THRESHOLD, 10);
	proto_ctx_set(&defaults, PROTO_CTX_BREAK_MS, 500);
	proto_ctx_set(&circuit, PROTO_CTX_FAILURE_THRESHOLD, 20);
	proto_ctx_set(&client, PROTO_CTX_MAX_GAP_MS, 99);
	proto_policy_resolve(layers, 3, &p, &src);
	ck_assert_int_eq(p.failure_threshold, 20);
	ck_assert_int_eq(src.key[PROTO_CTX_FAILURE_THRESHOLD], PROTO_SOURCE_CONFIG);
	ck_assert_int_eq(p.break_ms, 500);
	ck_assert_int_eq(src.key[PROTO_CTX_BREAK_MS], PROTO_SOURCE_DEFAULTS);
	ck_assert_int_eq(p.slot_ttl_ms, 500); /* follows the resolved break */
	ck_assert_int_eq(p.max_gap_ms, 99);
	ck_assert_int_eq(src.key[PROTO_CTX_MAX_GAP_MS], PROTO_SOURCE_CLIENT);
	ck_assert_int_eq(p.success_threshold, 2);

	/* The operator's section beats the client, the client beats [defaults]. */
	proto_ctx_set(&client, PROTO_CTX_FAILURE_THRESHOLD, 1);
	proto_ctx_set(&client, PROTO_CTX_BREAK_MS, 7);
	proto_ctx_set(&circuit, PROTO_CTX_SLOT_TTL_MS, 42);
	proto_policy_resolve(layers, 3, &p, NULL);
	ck_assert_int_eq(p.failure_threshold, 20);
	ck_assert_int_eq(p.break_ms, 7);
	ck_assert_int_eq(p.slot_ttl_ms, 42);

	/* NULL layers are skipped. */
	const proto_layer sparse[] = { { NULL, NULL, PROTO_SOURCE_CONFIG },
		{ &defaults, NULL, PROTO_SOURCE_DEFAULTS } };
	proto_policy_resolve(sparse, 2, &p, NULL);
	ck_assert_int_eq(p.failure_threshold, 10);
}
END_TEST

START_TEST(policy_conflicts_name_differing_members)
{
	proto_ctx request = { 0 };
	cb_policy p;

	breaker_policy_default(&p);
	ck_assert_uint_eq(proto_policy_conflicts(&request, &p, NULL), 0);
	proto_ctx_set(&request, PROTO_CTX_FAILURE_THRESHOLD, 5); /* same: no conflict */
	proto_ctx_set(&request, PROTO_CTX_NOW, 123); /* the clock is not policy */
	ck_assert_uint_eq(proto_policy_conflicts(&request, &p, NULL), 0);
	proto_ctx_set(&request, PROTO_CTX_BREAK_MS, 100);
	proto_ctx_set(&request, PROTO_CTX_MAX_GAP_MS, 100); /* unset in p */
	ck_assert_uint_eq(proto_policy_conflicts(&request, &p, NULL),
	    (UINT32_C(1) << PROTO_CTX_BREAK_MS) | (UINT32_C(1) << PROTO_CTX_MAX_GAP_MS));
}
END_TEST

START_TEST(ctx_to_json_round_trip)
{
	proto_ctx ctx = { 0 }, back;
	proto_error err;
	json_t *obj = json_object();

	ck_assert(proto_ctx_to_json(&ctx, obj));
	ck_assert_ptr_null(json_object_get(obj, "ctx"));
	proto_ctx_set(&ctx, PROTO_CTX_HALF_OPEN_MAX, 3);
	proto_ctx_set(&ctx, PROTO_CTX_NOW, 123);
	ck_assert(proto_ctx_to_json(&ctx, obj));
	ck_assert(proto_ctx_from_json(obj, &back, &err));
	ck_assert_int_eq(back.present, ctx.present);
	ck_assert_int_eq(back.value[PROTO_CTX_HALF_OPEN_MAX], 3);
	ck_assert_int_eq(back.value[PROTO_CTX_NOW], 123);
	json_decref(obj);
}
END_TEST

START_TEST(snapshot_json_round_trip)
{
	cb_snapshot s, back;
	proto_error err;
	int64_t retry = -5;
	json_t *obj;

	breaker_snapshot_init(&s);
	obj = proto_snapshot_to_json("svc", &s, 0);
	ck_assert_ptr_nonnull(obj);
	ck_assert(json_is_null(json_object_get(obj, "opened_at")));
	ck_assert(json_is_null(json_object_get(obj, "last_failure_at")));
	ck_assert_str_eq(json_string_value(json_object_get(obj, "state")), "closed");
	ck_assert_str_eq(json_string_value(json_object_get(obj, "name")), "svc");
	ck_assert(proto_snapshot_from_json(obj, &back, &retry, &err));
	ck_assert(breaker_snapshot_is_initial(&back));
	ck_assert_int_eq(retry, 0);
	json_decref(obj);

	s.state = CB_STATE_OPEN;
	s.failure_count = 5;
	s.opened_at = 1000;
	s.last_failure_at = 999;
	obj = proto_snapshot_to_json("svc", &s, 250);
	ck_assert(proto_snapshot_from_json(obj, &back, &retry, &err));
	ck_assert_int_eq(back.state, CB_STATE_OPEN);
	ck_assert_int_eq(back.failure_count, 5);
	ck_assert_int_eq(back.opened_at, 1000);
	ck_assert_int_eq(back.last_failure_at, 999);
	ck_assert_int_eq(retry, 250);
	json_decref(obj);

	obj = parse("{\"state\": \"sideways\", \"failure_count\": 0, \"success_count\": 0}");
	ck_assert(!proto_snapshot_from_json(obj, &back, NULL, &err));
	ck_assert_ptr_nonnull(strstr(err.message, "state"));
	json_decref(obj);
}
END_TEST

START_TEST(error_codes_round_trip)
{
	proto_code code;
	proto_error err;

	for (int c = 0; c < PROTO_CODE_COUNT; c++) {
		ck_assert(proto_code_parse(proto_code_name((proto_code)c), &code));
		ck_assert_int_eq(code, c);
	}
	ck_assert_str_eq(proto_code_name(PROTO_LINE_TOO_LONG), "line_too_long");
	ck_assert(!proto_code_parse("nope", &code));
	ck_assert(!proto_fail(&err, PROTO_CAPACITY, "max_circuits (%d) reached", 3));
	ck_assert_int_eq(err.code, PROTO_CAPACITY);
	ck_assert_str_eq(err.message, "max_circuits (3) reached");
}
END_TEST

int
main(void)
{
	Suite *suite = suite_create("proto");
	TCase *tc = tcase_create("codec");

	tcase_add_test(tc, int_member_rules);
	tcase_add_test(tc, name_rules);
	tcase_add_test(tc, name_member_messages);
	tcase_add_test(tc, state_member);
	tcase_add_test(tc, ctx_members);
	tcase_add_test(tc, ctx_table_rows);
	tcase_add_test(tc, policy_layers);
	tcase_add_test(tc, policy_conflicts_name_differing_members);
	tcase_add_test(tc, ctx_to_json_round_trip);
	tcase_add_test(tc, snapshot_json_round_trip);
	tcase_add_test(tc, error_codes_round_trip);
	suite_add_tcase(suite, tc);
	return check_run(suite, NULL);
}
