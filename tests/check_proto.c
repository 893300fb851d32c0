/*
 * check_proto.c — unit tests for the shared codec pieces: member readers
 * and their messages, name validation, the ctx table, policy layering,
 * snapshots to and from JSON, and the request fast path (proto-scan.c)
 * against json_loadb, on hand-picked and on seeded random lines.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check-run.h"

#include "circuit-table.h"
#include "proto.h"
#include "proto-scan.h"

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

/* ---- the fast path (proto-scan.c) against json_loadb ------------------ */

/* What proto_request_decode passes json_loadb. */
#define SCAN_JANSSON_FLAGS (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)
/* Random differential lines by default; $CBD_SCAN_ITERATIONS overrides. */
#define SCAN_ITERATIONS 200000
/* Longest mutated line. */
#define SCAN_LINE_MAX 1024

typedef struct scan_case {
	const char *text;
	size_t len;
	int scans; /* 1: the fast path must answer; 0: it must leave it to jansson */
} scan_case;

#define SCAN_YES(s)                                                                                \
	{                                                                                          \
		s, sizeof s - 1, 1                                                                 \
	}
#define SCAN_NO(s)                                                                                 \
	{                                                                                          \
		s, sizeof s - 1, 0                                                                 \
	}

static const scan_case scan_cases[] = {
	/* Plain requests. */
	SCAN_YES("{\"op\":\"get\",\"name\":\"db\"}"),
	SCAN_YES("{\"id\":1,\"op\":\"hello\",\"client\":\"fuzz/1\"}"),
	SCAN_YES("{\"id\":\"a\",\"op\":\"record\",\"name\":\"r\",\"outcome\":\"failure\","
		 "\"ctx\":{\"failure_threshold\":3,\"break_ms\":1000,\"now\":1700000000000}}"),
	SCAN_YES("{\"op\":\"get\",\"name\":\"a\",\"x\":true,\"y\":false,\"z\":null}"),
	SCAN_YES("{\"a\":{\"x\":1},\"b\":{\"x\":1}}"),
	SCAN_YES("{\"a\":1,\"A\":1}"),
	SCAN_YES("{\"\":1}"),
	SCAN_YES("{\"z\":1,\"a\":2,\"m\":{\"y\":3,\"b\":4},\"c\":5}"), /* order kept */
	SCAN_YES("{\"s\":\" !#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_`"
		 "abcdefghijklmnopqrstuvwxyz{|}~\"}"),
	SCAN_YES("{\"s\":\"\"}"),
	/* Whitespace. */
	SCAN_YES(" \t{ \"op\" : \"get\" ,\r\"name\":\"a\"\t} \r\t "),
	SCAN_YES("{\"op\":\"get\"}\r"),
	SCAN_YES("\n{\"a\":1}\n"),
	SCAN_YES("{\r\n\t\"a\"\r\n:\r\n{\r\n}\r\n}"),
	SCAN_NO("{\"a\":1}\f"),
	SCAN_NO("{\"a\":1}\v"),
	SCAN_NO("\f{\"a\":1}"),
	SCAN_NO("{\"a\":1}\xc2\xa0"),
	/* Integers. */
	SCAN_YES("{\"n\":0}"),
	SCAN_YES("{\"n\":-1}"),
	SCAN_YES("{\"n\":-0}"),
	SCAN_YES("{\"n\":7,\"m\":-7}"),
	SCAN_YES("{\"n\":999999999999999999}"), /* 18 digits */
	SCAN_YES("{\"n\":-999999999999999999}"), /* 18 digits */
	SCAN_YES("{\"n\":100000000000000000}"), /* 18 digits */
	SCAN_NO("{\"n\":1000000000000000000}"), /* 19 digits */
	SCAN_NO("{\"n\":-1000000000000000000}"), /* 19 digits */
	SCAN_NO("{\"n\":9223372036854775807}"), /* INT64_MAX */
	SCAN_NO("{\"n\":-9223372036854775808}"), /* INT64_MIN */
	SCAN_NO("{\"n\":9223372036854775808}"), /* jansson: too big */
	SCAN_NO("{\"n\":9999999999999999999}"), /* 19 digits past INT64_MAX */
	SCAN_NO("{\"n\":-9999999999999999999}"),
	SCAN_NO("{\"n\":99999999999999999999}"), /* 20 digits */
	SCAN_NO("{\"n\":0000000000000000001}"),
	SCAN_NO("{\"n\":01}"),
	SCAN_NO("{\"n\":-01}"),
	SCAN_NO("{\"n\":00}"),
	SCAN_NO("{\"n\":-00}"),
	SCAN_NO("{\"n\":-}"),
	SCAN_NO("{\"n\":--1}"),
	SCAN_NO("{\"n\":+1}"),
	SCAN_NO("{\"n\":1-}"),
	SCAN_NO("{\"n\":0x10}"),
	/* Reals and exponents. */
	SCAN_NO("{\"n\":1.5}"),
	SCAN_NO("{\"n\":0.0}"),
	SCAN_NO("{\"n\":-0.0}"),
	SCAN_NO("{\"n\":1.}"),
	SCAN_NO("{\"n\":.5}"),
	SCAN_NO("{\"n\":1e5}"),
	SCAN_NO("{\"n\":1E5}"),
	SCAN_NO("{\"n\":1e+5}"),
	SCAN_NO("{\"n\":-1e-5}"),
	SCAN_NO("{\"n\":0e0}"),
	SCAN_NO("{\"n\":1e}"),
	SCAN_NO("{\"n\":1e400}"),
	SCAN_NO("{\"n\":1.5e3,\"m\":2}"),
	/* Escapes. */
	SCAN_NO("{\"s\":\"a\\\"b\"}"),
	SCAN_NO("{\"s\":\"a\\\\b\"}"),
	SCAN_NO("{\"s\":\"\\u0041\"}"),
	SCAN_NO("{\"s\":\"\\/\"}"),
	SCAN_NO("{\"s\":\"\\n\\t\\r\\b\\f\"}"),
	SCAN_NO("{\"s\":\"\\x\"}"),
	SCAN_NO("{\"a\\n\":1}"),
	SCAN_NO("{\"\\u0061\":1,\"a\":2}"), /* a duplicate once unescaped */
	SCAN_NO("{\"s\":\"\\ud83d\\ude00\"}"),
	SCAN_NO("{\"s\":\"\\ud83d\"}"),
	SCAN_NO("{\"s\":\"\\u00e9\"}"),
	/* Bytes outside printable ASCII. */
	SCAN_NO("{\"s\":\"caf\xc3\xa9\"}"),
	SCAN_NO("{\"caf\xc3\xa9\":1}"),
	SCAN_NO("{\"s\":\"\xf0\x9f\x98\x80\"}"),
	SCAN_NO("{\"s\":\"\xff\"}"),
	SCAN_NO("{\"s\":\"\xc3\"}"),
	SCAN_NO("{\"s\":\"\xed\xa0\x80\"}"),
	SCAN_NO("{\"s\":\"a\x7f\"}"),
	SCAN_NO("{\"s\":\"a\tb\"}"),
	SCAN_NO("{\"s\":\"a\x01\"}"),
	SCAN_NO("{\"s\":\"a\x1f\"}"),
	SCAN_NO("{\"s\":\"a\nb\"}"),
	/* NUL bytes. */
	SCAN_NO("{\"s\":\"a\0b\"}"),
	SCAN_NO("{\"a\0\":1}"),
	SCAN_NO("{\"a\":1}\0"),
	SCAN_NO("\0{\"a\":1}"),
	SCAN_NO("{\"a\":1,\0\"b\":2}"),
	SCAN_NO("{\"a\":\0}"),
	SCAN_NO("{\"s\":\"\\u0000\"}"),
	SCAN_NO("{\"\\u0000\":1}"),
	/* Duplicates. */
	SCAN_NO("{\"op\":\"get\",\"op\":\"get\"}"),
	SCAN_NO("{\"op\":\"get\",\"name\":\"a\",\"op\":\"list\"}"),
	SCAN_NO("{\"ctx\":{\"now\":1,\"now\":2}}"),
	SCAN_NO("{\"ctx\":{\"now\":1},\"ctx\":{\"now\":1}}"),
	SCAN_NO("{\"a\":{\"b\":{\"c\":1,\"c\":1}}}"),
	SCAN_NO("{\"\":1,\"\":2}"),
	/* Trailing commas, missing separators. */
	SCAN_NO("{\"a\":1,}"),
	SCAN_NO("{\"a\":{\"b\":1,}}"),
	SCAN_NO("{,}"),
	SCAN_NO("{,\"a\":1}"),
	SCAN_NO("{\"a\":1,,\"b\":2}"),
	SCAN_NO("{\"a\" 1}"),
	SCAN_NO("{\"a\":1 \"b\":2}"),
	SCAN_NO("{\"a\"::1}"),
	SCAN_NO("{'a':1}"),
	SCAN_NO("{a:1}"),
	SCAN_NO("{\"a\":}"),
	/* Trailing garbage. */
	SCAN_NO("{\"a\":1}x"),
	SCAN_NO("{\"a\":1}}"),
	SCAN_NO("{\"a\":1}{}"),
	SCAN_NO("{\"a\":1} 1"),
	SCAN_NO("{\"a\":1}/"),
	SCAN_NO("{\"a\":1},"),
	SCAN_NO("{}\"x\""),
	/* Words. */
	SCAN_NO("{\"a\":tru}"),
	SCAN_NO("{\"a\":truex}"),
	SCAN_NO("{\"a\":True}"),
	SCAN_NO("{\"a\":nul}"),
	SCAN_NO("{\"a\":nulll}"),
	SCAN_NO("{\"a\":falsey}"),
	SCAN_NO("{\"a\":NaN}"),
	SCAN_NO("{\"a\":Infinity}"),
	SCAN_NO("{\"a\":-Infinity}"),
	SCAN_NO("{\"a\":true1}"),
	/* Empty objects, depth. */
	SCAN_YES("{}"),
	SCAN_YES("{ }"),
	SCAN_YES(" {\t} "),
	SCAN_YES("{\"a\":{}}"),
	SCAN_YES("{\"a\":{\"b\":{\"c\":{\"d\":1}}}}"), /* depth 4 */
	SCAN_YES("{\"a\":{\"b\":{\"c\":{}}},\"e\":{}}"), /* depth 4 */
	SCAN_NO("{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":1}}}}}"), /* depth 5 */
	SCAN_NO("{\"a\":{\"b\":{\"c\":{\"d\":{}}}}}"), /* depth 5 */
	SCAN_NO("{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{}}}}}}"),
	/* Arrays. */
	SCAN_NO("{\"a\":[]}"),
	SCAN_NO("{\"a\":[1,2,{\"b\":null}]}"),
	SCAN_NO("{\"a\":[}"),
	SCAN_NO("{\"a\":]}"),
	/* Truncated lines. */
	SCAN_NO("{\"op\":\"get\",\"name\":\"db\""),
	SCAN_NO("{\"op\":\"get\",\"name\":\"db"),
	SCAN_NO("{\"op\":\"get\",\"name\":"),
	SCAN_NO("{\"op\":\"get\",\"name\""),
	SCAN_NO("{\"op\":\"get\","),
	SCAN_NO("{\"op\""),
	SCAN_NO("{\"o"),
	SCAN_NO("{\""),
	SCAN_NO("{\"op\":tr"),
	SCAN_NO("{\"n\":-"),
	SCAN_NO("{\"n\":12"),
	SCAN_NO("{\"a\":{\"b\":1}"),
	SCAN_NO("{"),
	SCAN_NO(" { "),
	SCAN_NO("}"),
	SCAN_NO(""),
	SCAN_NO(" "),
	SCAN_NO("\r"),
	/* Top-level non-objects. */
	SCAN_NO("1"),
	SCAN_NO("-0"),
	SCAN_NO("\"s\""),
	SCAN_NO("true"),
	SCAN_NO("null"),
	SCAN_NO("[1]"),
	SCAN_NO("[]"),
	SCAN_NO("[{\"a\":1}]"),
};

/* line as a C string literal, for failure messages. */
static const char *
scan_quote(const char *line, size_t len)
{
	static char out[4 * SCAN_LINE_MAX + 64];
	size_t n = 0;

	for (size_t i = 0; i < len && n + 8 < sizeof out; i++) {
		unsigned char c = (unsigned char)line[i];

		if (c == '"' || c == '\\')
			n += (size_t)snprintf(out + n, sizeof out - n, "\\%c", c);
		else if (c >= 0x20 && c < 0x7f)
			out[n++] = (char)c;
		else
			n += (size_t)snprintf(out + n, sizeof out - n, "\\x%02x", c);
	}
	out[n] = '\0';
	return out;
}

/* json_dumps(JSON_COMPACT) of v: jansson keeps members in insertion
 * order, so equal texts mean equal values in the same order. */
static char *
scan_dump(const json_t *v)
{
	char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

	ck_assert_ptr_nonnull(text);
	return text;
}

/* Check the fast path against json_loadb on one line: where it answers,
 * jansson answers the same text; where jansson refuses, it refuses. True
 * when the fast path answered; *refused (if not NULL): jansson refused. */
static bool
scan_same(const char *line, size_t len, bool *refused)
{
	json_error_t jerr;
	json_t *scan = proto_scan_request(line, len);
	json_t *ref = json_loadb(line, len, SCAN_JANSSON_FLAGS, &jerr);
	bool answered = scan != NULL;

	if (refused != NULL)
		*refused = ref == NULL;
	if (scan != NULL) {
		char *got, *want;

		ck_assert_msg(ref != NULL, "scan took a line json_loadb refuses (%s): \"%s\"",
		    jerr.text, scan_quote(line, len));
		got = scan_dump(scan);
		want = scan_dump(ref);
		ck_assert_msg(strcmp(got, want) == 0 && json_equal(scan, ref),
		    "scan and json_loadb differ on \"%s\":\n scan %s\n json %s",
		    scan_quote(line, len), got, want);
		free(got);
		free(want);
	}
	json_decref(scan);
	json_decref(ref);
	return answered;
}

START_TEST(scan_hand_picked)
{
	for (size_t i = 0; i < sizeof scan_cases / sizeof scan_cases[0]; i++) {
		const scan_case *c = &scan_cases[i];
		bool answered = scan_same(c->text, c->len, NULL);

		ck_assert_msg(answered == (c->scans == 1), "scan %s \"%s\"",
		    answered ? "took" : "left to jansson", scan_quote(c->text, c->len));
	}
}
END_TEST

START_TEST(scan_key_lengths)
{
	char key[PROTO_SCAN_KEY_MAX + 2], line[2 * PROTO_SCAN_KEY_MAX + 64];
	int n;

	/* PROTO_SCAN_KEY_MAX bytes: the fast path's; one more: jansson's. */
	for (size_t klen = PROTO_SCAN_KEY_MAX - 1; klen <= PROTO_SCAN_KEY_MAX + 1; klen++) {
		memset(key, 'k', klen);
		key[klen] = '\0';
		n = snprintf(line, sizeof line, "{\"op\":\"get\",\"%s\":1}", key);
		ck_assert_int_eq(scan_same(line, (size_t)n, NULL), klen <= PROTO_SCAN_KEY_MAX);
		n = snprintf(line, sizeof line, "{\"ctx\":{\"%s\":{\"%s\":2}}}", key, key);
		ck_assert_int_eq(scan_same(line, (size_t)n, NULL), klen <= PROTO_SCAN_KEY_MAX);
		/* The same long name twice: a duplicate either way. */
		n = snprintf(line, sizeof line, "{\"%s\":1,\"%s\":2}", key, key);
		ck_assert(!scan_same(line, (size_t)n, NULL));
		/* Names alike up to the limit and different after it. */
		n = snprintf(line, sizeof line, "{\"%sa\":1,\"%sb\":2}", key, key);
		ck_assert_int_eq(scan_same(line, (size_t)n, NULL), klen + 1 <= PROTO_SCAN_KEY_MAX);
	}
}
END_TEST

/* splitmix64: a fixed seed gives the same lines on every machine. */
static uint64_t
scan_rand(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static size_t
scan_below(uint64_t *state, size_t n)
{
	return n > 0 ? (size_t)(scan_rand(state) % n) : 0;
}

/* A byte a mutation puts in: mostly JSON's own, sometimes anything. */
static char
scan_byte(uint64_t *state)
{
	static const char json_bytes[] = "{}[]\":,-+.0123456789eE \t\r\n\\u/truefalsenull\x00\x01"
					 "\x1f\x7f\x80\xc3\xa9\xff";

	if (scan_below(state, 8) == 0)
		return (char)scan_rand(state);
	return json_bytes[scan_below(state, sizeof json_bytes - 1)];
}

/* Mutate line (len bytes, room for SCAN_LINE_MAX) in place: a few byte
 * flips, insertions, deletions, splices with another seed line or copies
 * of one of its own pieces. The new length. */
static size_t
scan_mutate(uint64_t *state, char *line, size_t len)
{
	/* Half the lines one change away from their seed: most of those are
	 * still in the fast path's subset, or just out of it. */
	size_t rounds = scan_below(state, 2) == 0 ? 1 : 1 + scan_below(state, 4);

	for (size_t r = 0; r < rounds; r++) {
		size_t at = scan_below(state, len + 1), n;
		const scan_case *other;

		switch (scan_below(state, 7)) {
		case 0: /* flip */
			if (len > 0)
				line[scan_below(state, len)] = scan_byte(state);
			break;
		case 1: /* insert */
			if (len < SCAN_LINE_MAX) {
				memmove(line + at + 1, line + at, len - at);
				line[at] = scan_byte(state);
				len++;
			}
			break;
		case 2: /* delete a few */
			n = 1 + scan_below(state, 3);
			if (at + n <= len) {
				memmove(line + at, line + at + n, len - at - n);
				len -= n;
			}
			break;
		case 3: /* splice: our head, another line's tail */
			other = &scan_cases[scan_below(state,
			    sizeof scan_cases / sizeof scan_cases[0])];
			n = scan_below(state, other->len + 1);
			if (at + other->len - n <= SCAN_LINE_MAX) {
				memcpy(line + at, other->text + n, other->len - n);
				len = at + other->len - n;
			}
			break;
		case 4: /* copy a piece of ourselves (duplicates, depth) */
			n = scan_below(state, len - at + 1);
			if (len + n <= SCAN_LINE_MAX) {
				size_t to = scan_below(state, len + 1);

				memmove(line + to + n, line + to, len - to);
				memmove(line + to, line + (at <= to ? at : at + n), n);
				len += n;
			}
			break;
		case 5: /* truncate */
			len = at;
			break;
		default: /* digits: long integers, leading zeros */
			if (len + 4 <= SCAN_LINE_MAX) {
				n = 1 + scan_below(state, 4);
				memmove(line + at + n, line + at, len - at);
				for (size_t i = 0; i < n; i++)
					line[at + i] = (char)('0' + scan_below(state, 10));
				len += n;
			}
			break;
		}
	}
	return len;
}

/* The number of random lines, $CBD_SCAN_ITERATIONS or the default. */
static long
scan_iterations(void)
{
	const char *env = getenv("CBD_SCAN_ITERATIONS");

	return env != NULL && atol(env) > 0 ? atol(env) : SCAN_ITERATIONS;
}

START_TEST(scan_random_differential)
{
	const size_t ncases = sizeof scan_cases / sizeof scan_cases[0];
	uint64_t state = UINT64_C(20261130);
	long iterations = scan_iterations(), answered = 0, refused = 0;
	char line[SCAN_LINE_MAX];

	for (long i = 0; i < iterations; i++) {
		const scan_case *seed = &scan_cases[scan_below(&state, ncases)];
		size_t len;
		bool jansson_refused;

		/* Half the seeds from the fast path's own lines. */
		while (scan_below(&state, 2) == 0 && seed->scans != 1)
			seed = &scan_cases[scan_below(&state, ncases)];
		len = seed->len;

		memcpy(line, seed->text, len);
		len = scan_mutate(&state, line, len);
		if (scan_same(line, len, &jansson_refused))
			answered++;
		if (jansson_refused)
			refused++;
	}
	/* The mix must exercise both sides, or the loop proves nothing. */
	ck_assert_msg(answered > iterations / 20, "the fast path took only %ld of %ld lines",
	    answered, iterations);
	ck_assert_msg(refused > iterations / 20, "jansson refused only %ld of %ld lines", refused,
	    iterations);
}
END_TEST

/* Generated lines: a line being written, cut short when it is full. */
typedef struct scan_gen {
	uint64_t state;
	char text[4 * SCAN_LINE_MAX];
	size_t len;
} scan_gen;

static void
scan_gen_put(scan_gen *g, const char *text, size_t len)
{
	if (len > sizeof g->text - g->len)
		len = sizeof g->text - g->len;
	memcpy(g->text + g->len, text, len);
	g->len += len;
}

static void
scan_gen_space(scan_gen *g)
{
	while (scan_below(&g->state, 4) == 0)
		scan_gen_put(g, &" \t\r\n"[scan_below(&g->state, 4)], 1);
}

/* A name: mostly short ones from a few letters (so names repeat), some
 * around PROTO_SCAN_KEY_MAX, a few with a byte outside the subset. */
static void
scan_gen_name(scan_gen *g)
{
	static const char odd[] = "\\\x7f\x01\xc3\xa9";
	char name[PROTO_SCAN_KEY_MAX + 8];
	size_t len;

	if (scan_below(&g->state, 6) == 0)
		len = PROTO_SCAN_KEY_MAX - 2 + scan_below(&g->state, 5);
	else
		len = scan_below(&g->state, 4);
	for (size_t i = 0; i < len; i++)
		name[i] = "abn"[scan_below(&g->state, 3)];
	if (len > 0 && scan_below(&g->state, 30) == 0)
		name[scan_below(&g->state, len)] = odd[scan_below(&g->state, sizeof odd - 1)];
	scan_gen_put(g, "\"", 1);
	scan_gen_put(g, name, len);
	scan_gen_put(g, "\"", 1);
}

/* An integer of 1 to 21 digits, sometimes negative, rarely with a leading
 * zero, a fraction or an exponent. */
static void
scan_gen_number(scan_gen *g)
{
	size_t digits = scan_below(&g->state, 3) == 0 ? 16 + scan_below(&g->state, 6)
						      : 1 + scan_below(&g->state, 4);

	if (scan_below(&g->state, 3) == 0)
		scan_gen_put(g, "-", 1);
	for (size_t i = 0; i < digits; i++) {
		char d = (char)('0' + scan_below(&g->state, 10));

		if (i == 0 && d == '0' && digits > 1 && scan_below(&g->state, 8) != 0)
			d = '9'; /* mostly no leading zero */
		scan_gen_put(g, &d, 1);
	}
	if (scan_below(&g->state, 20) == 0)
		scan_gen_put(g, scan_below(&g->state, 2) ? ".5" : "e3", 2);
}

static void scan_gen_object(scan_gen *g, int depth);

static void
scan_gen_value(scan_gen *g, int depth)
{
	static const char *const words[] = { "true", "false", "null", "[]", "[1]", "\"\"",
		"\"plain text\"", "\"caf\xc3\xa9\"", "\"a\\\"b\"", "\"tab\tin\"" };
	const char *w;

	switch (scan_below(&g->state, 6)) {
	case 0:
	case 1:
		scan_gen_number(g);
		break;
	case 2:
		if (depth < PROTO_SCAN_DEPTH_MAX + 1) {
			scan_gen_object(g, depth + 1);
			break;
		}
		/* fall through */
	case 3:
		scan_gen_put(g, "\"", 1);
		for (size_t n = scan_below(&g->state, 12); n > 0; n--) {
			char c = (char)(0x20 + scan_below(&g->state, 0x5f));

			scan_gen_put(g, c == '"' || c == '\\' ? "x" : &c, 1);
		}
		scan_gen_put(g, "\"", 1);
		break;
	default:
		w = words[scan_below(&g->state, scan_below(&g->state, 4) == 0 ? 10 : 5)];
		scan_gen_put(g, w, strlen(w));
		break;
	}
}

/* An object at depth (the line's is 1), up to 4 members. */
static void
scan_gen_object(scan_gen *g, int depth)
{
	size_t members = scan_below(&g->state, 5);

	scan_gen_put(g, "{", 1);
	for (size_t i = 0; i < members; i++) {
		scan_gen_space(g);
		if (i > 0) {
			scan_gen_put(g, ",", 1);
			scan_gen_space(g);
		}
		scan_gen_name(g);
		scan_gen_space(g);
		scan_gen_put(g, ":", 1);
		scan_gen_space(g);
		scan_gen_value(g, depth);
	}
	scan_gen_space(g);
	scan_gen_put(g, "}", 1);
}

START_TEST(scan_generated_differential)
{
	scan_gen g = { .state = UINT64_C(7) };
	long iterations = scan_iterations() / 4, answered = 0, refused = 0;

	for (long i = 0; i < iterations; i++) {
		bool jansson_refused;

		g.len = 0;
		scan_gen_space(&g);
		scan_gen_object(&g, 1);
		scan_gen_space(&g);
		if (scan_same(g.text, g.len, &jansson_refused))
			answered++;
		if (jansson_refused)
			refused++;
	}
	/* Mostly in the subset or just past one of its edges. */
	ck_assert_msg(answered > iterations / 4, "the fast path took only %ld of %ld lines",
	    answered, iterations);
	ck_assert_msg(refused > iterations / 20, "jansson refused only %ld of %ld lines", refused,
	    iterations);
}
END_TEST

/* What proto_request_decode answered before the fast path: json_loadb, an
 * object or nothing. */
static json_t *
decode_before(const char *line, size_t len)
{
	json_error_t jerr;
	json_t *v = json_loadb(line, len, SCAN_JANSSON_FLAGS, &jerr);

	if (v != NULL && !json_is_object(v)) {
		json_decref(v);
		return NULL;
	}
	return v;
}

START_TEST(decode_unchanged_by_scan)
{
	const size_t ncases = sizeof scan_cases / sizeof scan_cases[0];
	uint64_t state = UINT64_C(42);
	char line[SCAN_LINE_MAX];

	for (size_t i = 0; i < ncases + 20000; i++) {
		size_t len = scan_cases[i % ncases].len;
		proto_error err;
		json_t *got, *want;

		memcpy(line, scan_cases[i % ncases].text, len);
		if (i >= ncases)
			len = scan_mutate(&state, line, len);
		got = proto_request_decode(line, len, &err);
		want = decode_before(line, len);
		ck_assert_msg((got != NULL) == (want != NULL), "decode %s \"%s\"",
		    got != NULL ? "took" : "refused", scan_quote(line, len));
		if (got != NULL) {
			char *a = scan_dump(got), *b = scan_dump(want);

			ck_assert_msg(strcmp(a, b) == 0, "decode of \"%s\":\n now %s\n was %s",
			    scan_quote(line, len), a, b);
			free(a);
			free(b);
		} else {
			ck_assert_int_ne(err.code, PROTO_INTERNAL);
		}
		json_decref(got);
		json_decref(want);
	}
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

	tc = tcase_create("scan");
	/* 200000 lines through both decoders, on a loaded machine too. */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, scan_hand_picked);
	tcase_add_test(tc, scan_key_lengths);
	tcase_add_test(tc, scan_random_differential);
	tcase_add_test(tc, scan_generated_differential);
	tcase_add_test(tc, decode_unchanged_by_scan);
	suite_add_tcase(suite, tc);
	return check_run(suite, NULL);
}
