/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_proto.c — unit tests for the shared codec pieces: member readers
 * and their messages, name validation, the ctx table, policy layering,
 * snapshots to and from JSON, the request fast path (proto-scan.c)
 * against json_loadb, on hand-picked and on seeded random lines, and the
 * request readers (proto_req_*) on a line's flat view against the same
 * readers on its jansson value.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check-run.h"
#include "test-rand.h"

#include "circuit-json.h"
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
	/* The request's own members (proto_flat.member) and others. */
	SCAN_YES("{\"op\":\"get\",\"ctx\":{\"op\":1,\"name\":2,\"ctx\":{\"op\":3}}}"),
	SCAN_YES("{\"nam\":1,\"name\":2,\"names\":3,\"o\":4,\"op\":5,\"opx\":6}"),
	SCAN_YES("{\"x\":1,\"name\":\"a\",\"y\":2,\"noreply\":true}"),
	SCAN_NO("{\"name\":\"a\",\"x\":1,\"name\":\"b\"}"),
	SCAN_NO("{\"name\":\"a\",\"x\":1,\"noreply\":true,\"x\":2}"),
	SCAN_NO("{\"ctx\":{\"name\":1,\"name\":2}}"),
	SCAN_NO("{\"duration_ms\":1,\"ctx\":{},\"duration_ms\":1}"),
	/* Space around every token, at every depth. */
	SCAN_YES(" { \"ctx\" : { \"a\" : 1 , \"b\" : \"x\" , \"c\" : { } } , \"op\" : \"get\" , "
		 "\"t\" : true , \"f\" : false , \"z\" : null , \"n\" : -5 } "),
	SCAN_YES("{\"n\":1 ,\"m\":-2\t}"),
	/* Words cut short, at the line's end and before others. */
	SCAN_YES("{\"a\":false,\"b\":true,\"c\":null}"),
	SCAN_NO("{\"a\":fals"),
	SCAN_NO("{\"a\":f"),
	SCAN_NO("{\"a\":t"),
	SCAN_NO("{\"a\":n"),
	SCAN_NO("{\"a\":fals}"),
	SCAN_NO("{\"a\":fAlse}"),
	SCAN_NO("{\"a\":nulL}"),
	SCAN_NO("{\"a\":f\0lse}"),
	/* Integers' ends. */
	SCAN_NO("{\"n\":-a}"),
	SCAN_NO("{\"n\":1x}"),
	SCAN_NO("{\"n\":1E}"),
	SCAN_NO("{\"n\":5,\"m\":1.0}"),
	SCAN_NO("{\"n\":1/}"),
	SCAN_YES("{\"n\":123456789012345678,\"m\":-123456789012345678}"),
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

/* Strings (values and names) of 0 to 40 bytes at every offset from the
 * line's start, plain or with one byte the fast path leaves to jansson at
 * each place: its 16-byte steps end in the right place. */
START_TEST(scan_string_boundaries)
{
	static const char *const bad[] = { "\\n", "\\\"", "\\u0041", "\x7f", "\x80", "\xc3\xa9",
		"\xff", "\x1f", "\x01", "\t" };
	char text[64], line[256];
	int n;

	for (size_t pad = 0; pad < 17; pad++) {
		for (size_t len = 0; len <= 40; len++) {
			proto_flat f;

			memset(text, 'a' + (int)(len % 26), len);
			text[len] = '\0';
			n = snprintf(line, sizeof line, "{\"%.*s\":\"%s\",\"%s\":%zu}", (int)pad,
			    "ppppppppppppppppp", text, text, len);
			/* The same name twice when pad == len and the bytes agree. */
			if (pad == len && (pad == 0 || text[0] == 'p'))
				continue;
			ck_assert_msg(scan_same(line, (size_t)n, NULL), "left to jansson: %s",
			    line);
			ck_assert(proto_scan_flat(line, (size_t)n, &f));
			ck_assert_uint_eq(f.v[1].len, len);
			ck_assert_uint_eq(f.v[2].key_len, len);
			ck_assert_int_eq(f.v[2].integer, (int64_t)len);
			for (size_t at = 0; at <= len; at++) {
				for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
					n = snprintf(line, sizeof line, "{\"%.*s\":\"%.*s%s%s\"}",
					    (int)pad, "ppppppppppppppppp", (int)at, text, bad[b],
					    text + at);
					ck_assert_msg(!scan_same(line, (size_t)n, NULL), "took: %s",
					    scan_quote(line, (size_t)n));
					n = snprintf(line, sizeof line,
					    "{\"%.*s\":1,\"%.*s%s%s\":2}", (int)pad,
					    "ppppppppppppppppp", (int)at, text, bad[b], text + at);
					ck_assert_msg(!scan_same(line, (size_t)n, NULL), "took: %s",
					    scan_quote(line, (size_t)n));
				}
			}
		}
	}
}
END_TEST

/* Each of the request's own members: noted where it is, refused twice in
 * the request, taken in a nested object, refused twice there. */
START_TEST(scan_member_index)
{
	char line[256];
	int n;

	for (int m = 0; m < PROTO_MEMBER_MAX; m++) {
		const char *name = proto_member_name((proto_member)m);
		proto_flat f;
		int i;

		n = snprintf(line, sizeof line, "{\"x\":0,\"%s\":7,\"y\":{\"%s\":8}}", name, name);
		ck_assert(scan_same(line, (size_t)n, NULL));
		ck_assert(proto_scan_flat(line, (size_t)n, &f));
		for (int o = 0; o < PROTO_MEMBER_MAX; o++)
			ck_assert_int_eq(f.member[o], o == m ? 2 : -1);
		i = f.member[m];
		ck_assert_str_eq(f.v[i].key, name);
		ck_assert_int_eq(f.v[i].type, PROTO_FLAT_INT);
		ck_assert_int_eq(f.v[i].integer, 7);
		ck_assert_int_eq(proto_flat_find(&f, 0, name), i);
		n = snprintf(line, sizeof line, "{\"%s\":1,\"x\":0,\"%s\":2}", name, name);
		ck_assert(!scan_same(line, (size_t)n, NULL));
		n = snprintf(line, sizeof line, "{\"y\":{\"%s\":1,\"x\":0,\"%s\":2}}", name, name);
		ck_assert(!scan_same(line, (size_t)n, NULL));
	}
}
END_TEST

/* A byte a mutation puts in: mostly JSON's own, sometimes anything. */
static char
scan_byte(uint64_t *state)
{
	static const char json_bytes[] = "{}[]\":,-+.0123456789eE \t\r\n\\u/truefalsenull\x00\x01"
					 "\x1f\x7f\x80\xc3\xa9\xff";

	if (test_below(state, 8) == 0)
		return (char)test_rand(state);
	return json_bytes[test_below(state, sizeof json_bytes - 1)];
}

/* Mutate line (len bytes, room for SCAN_LINE_MAX) in place: a few byte
 * flips, insertions, deletions, splices with another seed line or copies
 * of one of its own pieces. The new length. */
static size_t
scan_mutate(uint64_t *state, char *line, size_t len)
{
	/* Half the lines one change away from their seed: most of those are
	 * still in the fast path's subset, or just out of it. */
	size_t rounds = test_below(state, 2) == 0 ? 1 : 1 + test_below(state, 4);

	for (size_t r = 0; r < rounds; r++) {
		size_t at = test_below(state, len + 1), n;
		const scan_case *other;

		switch (test_below(state, 7)) {
		case 0: /* flip */
			if (len > 0)
				line[test_below(state, len)] = scan_byte(state);
			break;
		case 1: /* insert */
			if (len < SCAN_LINE_MAX) {
				memmove(line + at + 1, line + at, len - at);
				line[at] = scan_byte(state);
				len++;
			}
			break;
		case 2: /* delete a few */
			n = 1 + test_below(state, 3);
			if (at + n <= len) {
				memmove(line + at, line + at + n, len - at - n);
				len -= n;
			}
			break;
		case 3: /* splice: our head, another line's tail */
			other = &scan_cases[test_below(state,
			    sizeof scan_cases / sizeof scan_cases[0])];
			n = test_below(state, other->len + 1);
			if (at + other->len - n <= SCAN_LINE_MAX) {
				memcpy(line + at, other->text + n, other->len - n);
				len = at + other->len - n;
			}
			break;
		case 4: /* copy a piece of ourselves (duplicates, depth) */
			n = test_below(state, len - at + 1);
			if (len + n <= SCAN_LINE_MAX) {
				size_t to = test_below(state, len + 1);

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
				n = 1 + test_below(state, 4);
				memmove(line + at + n, line + at, len - at);
				for (size_t i = 0; i < n; i++)
					line[at + i] = (char)('0' + test_below(state, 10));
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
		const scan_case *seed = &scan_cases[test_below(&state, ncases)];
		size_t len;
		bool jansson_refused;

		/* Half the seeds from the fast path's own lines. */
		while (test_below(&state, 2) == 0 && seed->scans != 1)
			seed = &scan_cases[test_below(&state, ncases)];
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
	while (test_below(&g->state, 4) == 0)
		scan_gen_put(g, &" \t\r\n"[test_below(&g->state, 4)], 1);
}

/* A name: mostly short ones from a few letters (so names repeat), some
 * around PROTO_SCAN_KEY_MAX, a few with a byte outside the subset. */
static void
scan_gen_name(scan_gen *g)
{
	static const char odd[] = "\\\x7f\x01\xc3\xa9";
	char name[PROTO_SCAN_KEY_MAX + 8];
	size_t len;

	if (test_below(&g->state, 6) == 0)
		len = PROTO_SCAN_KEY_MAX - 2 + test_below(&g->state, 5);
	else
		len = test_below(&g->state, 4);
	for (size_t i = 0; i < len; i++)
		name[i] = "abn"[test_below(&g->state, 3)];
	if (len > 0 && test_below(&g->state, 30) == 0)
		name[test_below(&g->state, len)] = odd[test_below(&g->state, sizeof odd - 1)];
	scan_gen_put(g, "\"", 1);
	scan_gen_put(g, name, len);
	scan_gen_put(g, "\"", 1);
}

/* An integer of 1 to 21 digits, sometimes negative, rarely with a leading
 * zero, a fraction or an exponent. */
static void
scan_gen_number(scan_gen *g)
{
	size_t digits = test_below(&g->state, 3) == 0 ? 16 + test_below(&g->state, 6)
						      : 1 + test_below(&g->state, 4);

	if (test_below(&g->state, 3) == 0)
		scan_gen_put(g, "-", 1);
	for (size_t i = 0; i < digits; i++) {
		char d = (char)('0' + test_below(&g->state, 10));

		if (i == 0 && d == '0' && digits > 1 && test_below(&g->state, 8) != 0)
			d = '9'; /* mostly no leading zero */
		scan_gen_put(g, &d, 1);
	}
	if (test_below(&g->state, 20) == 0)
		scan_gen_put(g, test_below(&g->state, 2) ? ".5" : "e3", 2);
}

static void scan_gen_object(scan_gen *g, int depth);

static void
scan_gen_value(scan_gen *g, int depth)
{
	static const char *const words[] = { "true", "false", "null", "[]", "[1]", "\"\"",
		"\"plain text\"", "\"caf\xc3\xa9\"", "\"a\\\"b\"", "\"tab\tin\"" };
	const char *w;

	switch (test_below(&g->state, 6)) {
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
		for (size_t n = test_below(&g->state, 12); n > 0; n--) {
			char c = (char)(0x20 + test_below(&g->state, 0x5f));

			scan_gen_put(g, c == '"' || c == '\\' ? "x" : &c, 1);
		}
		scan_gen_put(g, "\"", 1);
		break;
	default:
		w = words[test_below(&g->state, test_below(&g->state, 4) == 0 ? 10 : 5)];
		scan_gen_put(g, w, strlen(w));
		break;
	}
}

/* An object at depth (the line's is 1), up to 4 members. */
static void
scan_gen_object(scan_gen *g, int depth)
{
	size_t members = test_below(&g->state, 5);

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

/* ---- proto_req: the flat view read as its jansson values -------------- */

/* Random request lines by default; $CBD_REQ_ITERATIONS overrides. */
#define REQ_ITERATIONS 100000
/* What an output holds before a reader runs: the same in both forms. */
#define REQ_UNSET_INT INT64_C(-7777777)
#define REQ_UNSET_LEN ((size_t)4242)

static const char req_unset[] = "unset";

/* ck_assert_msg without check's mark point (a write per passing check):
 * the generated lines make millions of checks. */
#define REQ_CHECK(cond, ...)                                                                       \
	do {                                                                                       \
		if (!(cond))                                                                       \
			ck_abort_msg(__VA_ARGS__);                                                 \
	} while (0)

/* One line in both forms: proto_scan_flat's view and json_loadb's value
 * (what proto_request_decode used to hand the dispatcher). */
typedef struct req_pair {
	const char *line;
	size_t len;
	proto_flat flat;
	json_t *json;
	proto_req f; /* .flat = &flat */
	proto_req j; /* .json = json */
} req_pair;

/* Read line into both forms; false when the fast path leaves it to
 * jansson. p must stay where it is while open (p->f points into it). */
static bool
req_open(req_pair *p, const char *line, size_t len)
{
	json_error_t jerr;

	memset(p, 0, sizeof *p);
	p->line = line;
	p->len = len;
	if (!proto_scan_flat(line, len, &p->flat))
		return false;
	p->json = json_loadb(line, len, SCAN_JANSSON_FLAGS, &jerr);
	REQ_CHECK(p->json != NULL && json_is_object(p->json),
	    "the fast path took a line json_loadb refuses (%s): \"%s\"", jerr.text,
	    scan_quote(line, len));
	p->f.flat = &p->flat;
	p->j.json = p->json;
	return true;
}

/* req_open on a C string the fast path must take. */
static void
req_open_must(req_pair *p, const char *line)
{
	REQ_CHECK(req_open(p, line, strlen(line)), "the fast path refused \"%s\"",
	    scan_quote(line, strlen(line)));
}

static void
req_close(req_pair *p)
{
	json_decref(p->json);
	p->json = NULL;
}

/* A line only json_loadb takes (an escape, a byte outside the subset):
 * the fast path must refuse it. A new reference. */
static json_t *
req_json_only(const char *line, size_t len)
{
	proto_flat flat;
	json_error_t jerr;
	json_t *v;

	REQ_CHECK(!proto_scan_flat(line, len, &flat), "the fast path took \"%s\"",
	    scan_quote(line, len));
	v = json_loadb(line, len, SCAN_JANSSON_FLAGS, &jerr);
	REQ_CHECK(v != NULL, "bad test line \"%s\": %s", scan_quote(line, len), jerr.text);
	return v;
}

/* Same return value, and when it is false the same code and message. */
static void
req_same_result(const req_pair *p, const char *reader, const char *key, const char *form, bool fok,
    bool jok, const proto_error *fe, const proto_error *je)
{
	REQ_CHECK(fok == jok, "%s(\"%s\") on \"%s\": flat %s, %s %s", reader, key,
	    scan_quote(p->line, p->len), fok ? "ok" : fe->message, form, jok ? "ok" : je->message);
	if (fok)
		return;
	REQ_CHECK(fe->code == je->code && strcmp(fe->message, je->message) == 0,
	    "%s(\"%s\") on \"%s\": flat %s \"%s\", %s %s \"%s\"", reader, key,
	    scan_quote(p->line, p->len), proto_code_name(fe->code), fe->message, form,
	    proto_code_name(je->code), je->message);
}

/* proto_req_int on both forms (and proto_get_int on the jansson value):
 * the same everything. The flat form's results in *out, *present, *err. */
static bool
req_int_both(const req_pair *p, proto_member m, int64_t min, int64_t max, bool required,
    int64_t *out, bool *present, proto_error *err)
{
	const char *key = proto_member_name(m);
	int64_t fv = REQ_UNSET_INT, jv = REQ_UNSET_INT, gv = REQ_UNSET_INT;
	bool fp = true, jp = true, gp = true;
	proto_error fe = { 0 }, je = { 0 }, ge = { 0 };
	bool fok = proto_req_int(&p->f, m, min, max, required, &fv, &fp, &fe);
	bool jok = proto_req_int(&p->j, m, min, max, required, &jv, &jp, &je);
	bool gok = proto_get_int(p->json, key, min, max, required, &gv, &gp, &ge);

	req_same_result(p, "proto_req_int", key, "json", fok, jok, &fe, &je);
	req_same_result(p, "proto_req_int", key, "proto_get_int", fok, gok, &fe, &ge);
	REQ_CHECK(fv == jv && fv == gv && fp == jp && fp == gp,
	    "proto_req_int(\"%s\", %lld, %lld) on \"%s\": flat %lld%s, json %lld%s, "
	    "proto_get_int %lld%s",
	    key, (long long)min, (long long)max, scan_quote(p->line, p->len), (long long)fv,
	    fp ? "" : " (absent)", (long long)jv, jp ? "" : " (absent)", (long long)gv,
	    gp ? "" : " (absent)");
	*out = fv;
	*present = fp;
	*err = fe;
	return fok;
}

/* Two string outputs are the same: both untouched, both NULL, or the same
 * bytes (and the NUL after them). */
static bool
req_same_text(const char *a, size_t alen, const char *b, size_t blen)
{
	if (a == req_unset || b == req_unset || a == NULL || b == NULL)
		return a == b && alen == blen;
	return alen == blen && memcmp(a, b, alen + 1) == 0;
}

/* proto_req_text on both forms (and proto_get_text on the jansson
 * value). */
static bool
req_text_both(const req_pair *p, proto_member m, bool required, const char **out, size_t *len,
    proto_error *err)
{
	const char *key = proto_member_name(m);
	const char *fs = req_unset, *js = req_unset, *gs = req_unset;
	size_t fl = REQ_UNSET_LEN, jl = REQ_UNSET_LEN, gl = REQ_UNSET_LEN;
	proto_error fe = { 0 }, je = { 0 }, ge = { 0 };
	bool fok = proto_req_text(&p->f, m, required, &fs, &fl, &fe);
	bool jok = proto_req_text(&p->j, m, required, &js, &jl, &je);
	bool gok = proto_get_text(p->json, key, required, &gs, &gl, &ge);

	req_same_result(p, "proto_req_text", key, "json", fok, jok, &fe, &je);
	req_same_result(p, "proto_req_text", key, "proto_get_text", fok, gok, &fe, &ge);
	REQ_CHECK(req_same_text(fs, fl, js, jl) && req_same_text(fs, fl, gs, gl),
	    "proto_req_text(\"%s\", %d) on \"%s\": flat %s (%zu bytes), json %s (%zu bytes)", key,
	    required, scan_quote(p->line, p->len), fs != NULL ? fs : "NULL", fl,
	    js != NULL ? js : "NULL", jl);
	*out = fs;
	*len = fl;
	*err = fe;
	return fok;
}

/* The length of a name output (0 when untouched or NULL). */
static size_t
req_len(const char *s)
{
	return s == NULL || s == req_unset ? 0 : strlen(s);
}

/* proto_req_name on both forms (and proto_get_name). */
static bool
req_name_both(const req_pair *p, proto_member m, const char **out, proto_error *err)
{
	const char *key = proto_member_name(m);
	const char *fs = req_unset, *js = req_unset, *gs = req_unset;
	proto_error fe = { 0 }, je = { 0 }, ge = { 0 };
	bool fok = proto_req_name(&p->f, m, &fs, &fe);
	bool jok = proto_req_name(&p->j, m, &js, &je);
	bool gok = proto_get_name(p->json, key, &gs, &ge);

	req_same_result(p, "proto_req_name", key, "json", fok, jok, &fe, &je);
	req_same_result(p, "proto_req_name", key, "proto_get_name", fok, gok, &fe, &ge);
	REQ_CHECK(req_same_text(fs, req_len(fs), js, req_len(js)) &&
		req_same_text(fs, req_len(fs), gs, req_len(gs)),
	    "proto_req_name(\"%s\") on \"%s\": flat %s, json %s", key, scan_quote(p->line, p->len),
	    fs != NULL ? fs : "NULL", js != NULL ? js : "NULL");
	*out = fs;
	*err = fe;
	return fok;
}

/* Two ctx outputs are the same: present bits, the values of the members
 * present, the preset name when present. */
static bool
req_same_ctx(const proto_ctx *a, const proto_ctx *b)
{
	if (a->present != b->present)
		return false;
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		if (proto_ctx_has(a, (proto_ctx_key)k) && a->value[k] != b->value[k])
			return false;
	}
	return !proto_ctx_has(a, PROTO_CTX_PRESET) || strcmp(a->preset, b->preset) == 0;
}

/* proto_req_ctx on both forms (and proto_ctx_from_json). */
static bool
req_ctx_both(const req_pair *p, proto_ctx *out, proto_error *err)
{
	proto_ctx fc, jc, gc;
	proto_error fe = { 0 }, je = { 0 }, ge = { 0 };
	bool fok, jok, gok;

	memset(&fc, 0xa5, sizeof fc);
	memset(&jc, 0xa5, sizeof jc);
	memset(&gc, 0xa5, sizeof gc);
	fok = proto_req_ctx(&p->f, &fc, &fe);
	jok = proto_req_ctx(&p->j, &jc, &je);
	gok = proto_ctx_from_json(p->json, &gc, &ge);
	req_same_result(p, "proto_req_ctx", "ctx", "json", fok, jok, &fe, &je);
	req_same_result(p, "proto_req_ctx", "ctx", "proto_ctx_from_json", fok, gok, &fe, &ge);
	REQ_CHECK(req_same_ctx(&fc, &jc) && req_same_ctx(&fc, &gc),
	    "proto_req_ctx on \"%s\": flat present 0x%x, json 0x%x (or values differ)",
	    scan_quote(p->line, p->len), (unsigned)fc.present, (unsigned)jc.present);
	*out = fc;
	*err = fe;
	return fok;
}

/* proto_req_id on both forms (and proto_request_id): the same id, of the
 * same type. *out: the flat form's id (a new reference, or NULL). */
static bool
req_id_both(const req_pair *p, json_t **out, proto_error *err)
{
	json_t *fi = NULL, *ji = NULL;
	const json_t *gi = NULL;
	proto_error fe = { 0 }, je = { 0 }, ge = { 0 };
	bool fok = proto_req_id(&p->f, &fi, &fe);
	bool jok = proto_req_id(&p->j, &ji, &je);
	bool gok = proto_request_id(p->json, &gi, &ge);

	req_same_result(p, "proto_req_id", "id", "json", fok, jok, &fe, &je);
	req_same_result(p, "proto_req_id", "id", "proto_request_id", fok, gok, &fe, &ge);
	REQ_CHECK((fi == NULL) == (ji == NULL) && (fi == NULL) == (gi == NULL),
	    "proto_req_id on \"%s\": flat %s, json %s, proto_request_id %s",
	    scan_quote(p->line, p->len), fi != NULL ? "an id" : "none",
	    ji != NULL ? "an id" : "none", gi != NULL ? "an id" : "none");
	if (fi != NULL) {
		REQ_CHECK(json_typeof(fi) == json_typeof(ji) &&
			json_typeof(fi) == json_typeof(gi) && json_equal(fi, ji) &&
			json_equal(fi, gi),
		    "proto_req_id on \"%s\": the ids differ", scan_quote(p->line, p->len));
	}
	json_decref(ji);
	*out = fi;
	*err = fe;
	return fok;
}

/* proto_req_has and proto_req_true on both forms. */
static void
req_flags_both(const req_pair *p, proto_member m, bool *has, bool *is_true)
{
	const char *key = proto_member_name(m);
	bool fh = proto_req_has(&p->f, m), jh = proto_req_has(&p->j, m);
	bool ft = proto_req_true(&p->f, m), jt = proto_req_true(&p->j, m);

	REQ_CHECK(fh == jh, "proto_req_has(\"%s\") on \"%s\": flat %d, json %d", key,
	    scan_quote(p->line, p->len), fh, jh);
	REQ_CHECK(ft == jt, "proto_req_true(\"%s\") on \"%s\": flat %d, json %d", key,
	    scan_quote(p->line, p->len), ft, jt);
	*has = fh;
	*is_true = ft;
}

/* proto_req_json on both forms: json_loadb's value, members in order. */
static void
req_json_both(const req_pair *p)
{
	json_t *fj = proto_req_json(&p->f), *jj = proto_req_json(&p->j);
	char *got, *want;

	REQ_CHECK(fj != NULL && jj == p->json, "proto_req_json on \"%s\"",
	    scan_quote(p->line, p->len));
	got = json_dumps(fj, JSON_COMPACT);
	want = json_dumps(jj, JSON_COMPACT);
	REQ_CHECK(got != NULL && want != NULL, "json_dumps: out of memory");
	REQ_CHECK(json_equal(fj, jj) && strcmp(got, want) == 0,
	    "proto_req_json on \"%s\":\n flat %s\n json %s", scan_quote(p->line, p->len), got,
	    want);
	free(got);
	free(want);
	json_decref(fj);
	json_decref(jj);
}

/* Bounds proto_req_int is asked with. */
static const int64_t req_bounds[][2] = {
	{ 0, CB_DURATION_MAX },
	{ INT64_MIN, INT64_MAX },
	{ 1, 10 },
	{ -5, -1 },
	{ CB_TIME_MIN, CB_TIME_MAX },
};

/* How often each reader answered ok and not ok over a run. */
typedef struct req_tally {
	long ok[4], bad[4]; /* int (duration_ms), name, ctx, id */
} req_tally;

/* Count a reader's answer on a member the line has (t may be NULL). */
static void
req_count(req_tally *t, int reader, const req_pair *p, proto_member m, bool ok)
{
	if (t == NULL || !proto_req_has(&p->f, m))
		return;
	if (ok)
		t->ok[reader]++;
	else
		t->bad[reader]++;
}

/* Every reader, with every key and bound, on both forms of p. */
static void
req_compare_all(const req_pair *p, req_tally *t)
{
	proto_error err;
	proto_ctx ctx;
	json_t *id;
	bool ok;

	for (int k = 0; k < PROTO_MEMBER_MAX; k++) {
		proto_member m = (proto_member)k;
		const char *key = proto_member_name(m), *text;
		size_t len;
		int64_t v;
		bool present, has, is_true;

		/* The scanner's index finds what a search by name finds. */
		REQ_CHECK(p->f.flat->member[m] == proto_flat_find(p->f.flat, 0, key),
		    "member index of \"%s\" on \"%s\": %d, proto_flat_find %d", key,
		    scan_quote(p->line, p->len), p->f.flat->member[m],
		    proto_flat_find(p->f.flat, 0, key));
		for (size_t b = 0; b < sizeof req_bounds / sizeof req_bounds[0]; b++) {
			for (int required = 0; required <= 1; required++) {
				ok = req_int_both(p, m, req_bounds[b][0], req_bounds[b][1],
				    required, &v, &present, &err);
				if (b == 0 && required && m == PROTO_MEMBER_DURATION_MS)
					req_count(t, 0, p, m, ok);
			}
		}
		req_text_both(p, m, false, &text, &len, &err);
		req_text_both(p, m, true, &text, &len, &err);
		ok = req_name_both(p, m, &text, &err);
		if (m == PROTO_MEMBER_NAME)
			req_count(t, 1, p, m, ok);
		req_flags_both(p, m, &has, &is_true);
	}
	req_count(t, 2, p, PROTO_MEMBER_CTX, req_ctx_both(p, &ctx, &err));
	ok = req_id_both(p, &id, &err);
	json_decref(id);
	req_count(t, 3, p, PROTO_MEMBER_ID, ok);
	req_json_both(p);
}

/* One proto_req_int case: key duration_ms with bounds 0..CB_DURATION_MAX. */
typedef struct req_int_case {
	const char *line;
	bool required;
	bool ok;
	int64_t value; /* REQ_UNSET_INT: untouched */
	bool present;
} req_int_case;

#define REQ_DURATION_RANGE "duration_ms must be an integer from 0 to 9007199254740992"

static const req_int_case req_int_cases[] = {
	{ "{}", false, true, REQ_UNSET_INT, false },
	{ "{}", true, false, REQ_UNSET_INT, false },
	{ "{\"duration_ms\":null}", false, true, REQ_UNSET_INT, false },
	{ "{\"duration_ms\":null}", true, false, REQ_UNSET_INT, false },
	{ "{\"duration_ms\":0}", true, true, 0, true },
	{ "{\"duration_ms\":-0}", true, true, 0, true },
	{ "{\"duration_ms\":1234}", false, true, 1234, true },
	{ "{\"duration_ms\":9007199254740992}", true, true, CB_DURATION_MAX, true },
	{ "{\"duration_ms\":9007199254740993}", true, false, REQ_UNSET_INT, true },
	{ "{\"duration_ms\":-1}", false, false, REQ_UNSET_INT, true },
	{ "{\"duration_ms\":999999999999999999}", true, false, REQ_UNSET_INT, true },
	{ "{\"duration_ms\":-999999999999999999}", true, false, REQ_UNSET_INT, true },
	{ "{\"duration_ms\":\"5\"}", false, false, REQ_UNSET_INT, true },
	{ "{\"duration_ms\":true}", false, false, REQ_UNSET_INT, true },
	{ "{\"duration_ms\":false}", false, false, REQ_UNSET_INT, true },
	{ "{\"duration_ms\":{}}", false, false, REQ_UNSET_INT, true },
	{ "{\"duration_ms\":{\"duration_ms\":5}}", false, false, REQ_UNSET_INT, true },
	{ "{\"ctx\":{\"duration_ms\":5}}", false, true, REQ_UNSET_INT, false },
};

START_TEST(req_int_hand_picked)
{
	for (size_t i = 0; i < sizeof req_int_cases / sizeof req_int_cases[0]; i++) {
		const req_int_case *c = &req_int_cases[i];
		proto_error err;
		req_pair p;
		int64_t v;
		bool present, ok;

		req_open_must(&p, c->line);
		ok = req_int_both(&p, PROTO_MEMBER_DURATION_MS, 0, CB_DURATION_MAX, c->required, &v,
		    &present, &err);
		ck_assert_msg(ok == c->ok && v == c->value && present == c->present,
		    "%s: ok %d value %lld present %d", c->line, ok, (long long)v, present);
		if (!ok) {
			ck_assert_int_eq(err.code, PROTO_BAD_REQUEST);
			ck_assert_str_eq(err.message,
			    c->present ? REQ_DURATION_RANGE : "duration_ms is required");
		}
		req_compare_all(&p, NULL);
		req_close(&p);
	}
}
END_TEST

START_TEST(req_text_hand_picked)
{
	static const char printable[] = "{\"token\":\" !#$%&'()*+,-./09:;<=>?@AZ[]^_`az{|}~\"}";
	proto_error err;
	const char *text;
	size_t len;
	req_pair p;
	json_t *v;

	req_open_must(&p, "{\"token\":\"abc\",\"outcome\":\"\",\"op\":5,\"id\":{},\"retry\":true}");
	ck_assert(req_text_both(&p, PROTO_MEMBER_TOKEN, true, &text, &len, &err));
	ck_assert_str_eq(text, "abc");
	ck_assert_uint_eq(len, 3);
	ck_assert(req_text_both(&p, PROTO_MEMBER_OUTCOME, true, &text, &len, &err));
	ck_assert_str_eq(text, "");
	ck_assert_uint_eq(len, 0);
	ck_assert(!req_text_both(&p, PROTO_MEMBER_OP, false, &text, &len, &err));
	ck_assert_str_eq(err.message, "op must be a string");
	ck_assert(text == req_unset && len == REQ_UNSET_LEN);
	ck_assert(!req_text_both(&p, PROTO_MEMBER_ID, false, &text, &len, &err));
	ck_assert_str_eq(err.message, "id must be a string");
	ck_assert(!req_text_both(&p, PROTO_MEMBER_RETRY, false, &text, &len, &err));
	ck_assert(req_text_both(&p, PROTO_MEMBER_PERMIT, false, &text, &len, &err));
	ck_assert_ptr_null(text);
	ck_assert_uint_eq(len, 0);
	ck_assert(!req_text_both(&p, PROTO_MEMBER_PERMIT, true, &text, &len, &err));
	ck_assert_str_eq(err.message, "permit is required");
	req_compare_all(&p, NULL);
	req_close(&p);

	req_open_must(&p, "{\"token\":null}");
	ck_assert(req_text_both(&p, PROTO_MEMBER_TOKEN, false, &text, &len, &err));
	ck_assert_ptr_null(text);
	ck_assert(!req_text_both(&p, PROTO_MEMBER_TOKEN, true, &text, &len, &err));
	ck_assert_str_eq(err.message, "token is required");
	req_compare_all(&p, NULL);
	req_close(&p);

	req_open_must(&p, printable);
	ck_assert(req_text_both(&p, PROTO_MEMBER_TOKEN, true, &text, &len, &err));
	ck_assert_uint_eq(len, sizeof printable - 1 - strlen("{\"token\":\"\"}"));
	ck_assert(memcmp(text, printable + 10, len) == 0);
	req_compare_all(&p, NULL);
	req_close(&p);

	/* A NUL inside: jansson's only (an escape), and refused. */
	v = req_json_only("{\"token\":\"a\\u0000b\"}", 20);
	ck_assert(!proto_req_text(&(proto_req){ .json = v }, PROTO_MEMBER_TOKEN, false, &text, &len,
	    &err));
	ck_assert_str_eq(err.message, "token must not contain NUL bytes");
	json_decref(v);
}
END_TEST

START_TEST(req_name_hand_picked)
{
	static const char *const json_only[][2] = {
		{ "{\"name\":\"a\\u0001b\"}", "name must not contain control characters" },
		{ "{\"name\":\"a\\u007f\"}", "name must not contain control characters" },
		{ "{\"name\":\"\x7f\"}", "name must not contain control characters" },
		{ "{\"name\":\"a\\tb\"}", "name must not contain control characters" },
		{ "{\"name\":\"\\u0085\"}", "name must not contain control characters" },
		{ "{\"name\":\"a\\u0000b\"}", "name must not contain control characters" },
		{ "{\"name\":\"caf\\u00e9\"}", NULL },
		{ "{\"name\":\"caf\xc3\xa9\"}", NULL },
		{ "{\"name\":\"a\\\"b\"}", NULL },
	};
	char line[CT_NAME_MAX + 64];
	proto_error err;
	const char *name;
	req_pair p;
	int n;

	req_open_must(&p, "{\"name\":\"payments\",\"op\":\"\",\"id\":5,\"token\":\" ~\"}");
	ck_assert(req_name_both(&p, PROTO_MEMBER_NAME, &name, &err));
	ck_assert_str_eq(name, "payments");
	ck_assert(!req_name_both(&p, PROTO_MEMBER_OP, &name, &err));
	ck_assert_str_eq(err.message, "op must be 1 to 256 bytes");
	ck_assert(!req_name_both(&p, PROTO_MEMBER_ID, &name, &err));
	ck_assert_str_eq(err.message, "id must be a string");
	ck_assert(req_name_both(&p, PROTO_MEMBER_TOKEN, &name, &err));
	ck_assert_str_eq(name, " ~");
	ck_assert(!req_name_both(&p, PROTO_MEMBER_PERMIT, &name, &err));
	ck_assert_str_eq(err.message, "permit is required");
	req_compare_all(&p, NULL);
	req_close(&p);

	req_open_must(&p, "{\"name\":null}");
	ck_assert(!req_name_both(&p, PROTO_MEMBER_NAME, &name, &err));
	ck_assert_str_eq(err.message, "name is required");
	req_close(&p);

	/* 255, 256 and 257 bytes. */
	for (int len = CT_NAME_MAX - 1; len <= CT_NAME_MAX + 1; len++) {
		n = snprintf(line, sizeof line, "{\"name\":\"%0*d\"}", len, 7);
		ck_assert(req_open(&p, line, (size_t)n));
		ck_assert_int_eq(req_name_both(&p, PROTO_MEMBER_NAME, &name, &err),
		    len <= CT_NAME_MAX);
		if (len > CT_NAME_MAX)
			ck_assert_str_eq(err.message, "name must be 1 to 256 bytes");
		else
			ck_assert_uint_eq(strlen(name), (size_t)len);
		req_compare_all(&p, NULL);
		req_close(&p);
	}

	/* Control characters and other bytes never reach the flat view. */
	for (size_t i = 0; i < sizeof json_only / sizeof json_only[0]; i++) {
		json_t *v = req_json_only(json_only[i][0], strlen(json_only[i][0]));
		bool ok = proto_req_name(&(proto_req){ .json = v }, PROTO_MEMBER_NAME, &name, &err);

		ck_assert_msg(ok == (json_only[i][1] == NULL), "%s", json_only[i][0]);
		if (!ok)
			ck_assert_str_eq(err.message, json_only[i][1]);
		json_decref(v);
	}
}
END_TEST

/* One proto_req_ctx case: the message when it fails. */
typedef struct req_ctx_case {
	const char *line;
	const char *message; /* NULL: ok */
} req_ctx_case;

static const req_ctx_case req_ctx_cases[] = {
	{ "{}", NULL },
	{ "{\"ctx\":null}", NULL },
	{ "{\"ctx\":{}}", NULL },
	{ "{\"ctx\":{\"now\":null,\"x\":1,\"Now\":\"a\",\"ctx\":{}}}", NULL },
	{ "{\"ctx\":5}", "ctx must be an object" },
	{ "{\"ctx\":\"{}\"}", "ctx must be an object" },
	{ "{\"ctx\":true}", "ctx must be an object" },
	{ "{\"ctx\":false}", "ctx must be an object" },
	{ "{\"x\":{\"ctx\":5}}", NULL },
	/* Two bad members: the table's first is named, in either order. */
	{ "{\"ctx\":{\"now\":-1,\"failure_threshold\":0}}",
	    "ctx.failure_threshold must be an integer from 1 to 1000000000" },
	{ "{\"ctx\":{\"failure_threshold\":0,\"now\":-1}}",
	    "ctx.failure_threshold must be an integer from 1 to 1000000000" },
	{ "{\"ctx\":{\"preset\":\"a b\",\"trip\":\"x\"}}",
	    "ctx.trip must be \"consecutive\" or \"rate\"" },
	{ "{\"ctx\":{\"window\":5,\"break_ms\":\"5\"}}",
	    "ctx.break_ms must be an integer from 1 to 9007199254740992" },
	{ "{\"ctx\":{\"break_max_ms\":1,\"break_ms\":2,\"window_size\":0}}",
	    "ctx.window_size must be an integer from 1 to 3600000" },
	/* Combinations. */
	{ "{\"ctx\":{\"window_size\":10000}}", NULL },
	{ "{\"ctx\":{\"window_size\":10001}}",
	    "ctx.window_size must be from 1 to 10000 for a count (calls) window" },
	{ "{\"ctx\":{\"window\":\"count\",\"window_size\":3600000}}",
	    "ctx.window_size must be from 1 to 10000 for a count (calls) window" },
	{ "{\"ctx\":{\"window_size\":1000,\"window\":\"time\"}}", NULL },
	{ "{\"ctx\":{\"window\":\"time\",\"window_size\":999}}",
	    "ctx.window_size must be from 1000 to 3600000 for a time (ms) window" },
	{ "{\"ctx\":{\"window\":\"time\",\"window_size\":3600000}}", NULL },
	{ "{\"ctx\":{\"window\":null,\"window_size\":3600000}}",
	    "ctx.window_size must be from 1 to 10000 for a count (calls) window" },
	{ "{\"ctx\":{\"break_ms\":100,\"break_max_ms\":100}}", NULL },
	{ "{\"ctx\":{\"break_max_ms\":99,\"break_ms\":100}}",
	    "ctx.break_max_ms must not be below ctx.break_ms" },
	{ "{\"ctx\":{\"break_max_ms\":1}}", NULL },
	{ "{\"ctx\":{\"window\":\"time\",\"window_size\":5,\"break_ms\":2,\"break_max_ms\":1}}",
	    "ctx.window_size must be from 1000 to 3600000 for a time (ms) window" },
	/* Enums and presets. */
	{ "{\"ctx\":{\"trip\":\"rate\",\"window\":\"count\"}}", NULL },
	{ "{\"ctx\":{\"trip\":\"RATE\"}}", "ctx.trip must be \"consecutive\" or \"rate\"" },
	{ "{\"ctx\":{\"trip\":1}}", "ctx.trip must be \"consecutive\" or \"rate\"" },
	{ "{\"ctx\":{\"trip\":\"\"}}", "ctx.trip must be \"consecutive\" or \"rate\"" },
	{ "{\"ctx\":{\"window\":{}}}", "ctx.window must be \"count\" or \"time\"" },
	{ "{\"ctx\":{\"window\":true}}", "ctx.window must be \"count\" or \"time\"" },
	{ "{\"ctx\":{\"preset\":\"service\"}}", NULL },
	{ "{\"ctx\":{\"preset\":\"my-own_preset.2\"}}", NULL },
	{ "{\"ctx\":{\"preset\":5}}", "ctx.preset must be a string" },
	{ "{\"ctx\":{\"preset\":false}}", "ctx.preset must be a string" },
	{ "{\"ctx\":{\"preset\":\"\"}}",
	    "ctx.preset must be a preset name (1 to 64 letters, digits, '-', '_', '.')" },
	{ "{\"ctx\":{\"preset\":\"a b\"}}",
	    "ctx.preset must be a preset name (1 to 64 letters, digits, '-', '_', '.')" },
	{ "{\"ctx\":{\"failure_threshold\":{\"failure_threshold\":1}}}",
	    "ctx.failure_threshold must be an integer from 1 to 1000000000" },
	{ "{\"ctx\":{\"now\":0,\"break_ms\":9007199254740992}}", NULL },
	{ "{\"ctx\":{\"now\":9007199254740993}}",
	    "ctx.now must be an integer from 0 to 9007199254740992" },
};

/* proto_req_ctx on line: ok, or failing with message. */
static void
req_ctx_expect(const char *line, const char *message)
{
	proto_error err;
	proto_ctx ctx;
	req_pair p;
	bool ok;

	req_open_must(&p, line);
	ok = req_ctx_both(&p, &ctx, &err);
	ck_assert_msg(ok == (message == NULL), "%s: %s", line, ok ? "ok" : err.message);
	if (!ok) {
		ck_assert_int_eq(err.code, PROTO_BAD_REQUEST);
		ck_assert_msg(strcmp(err.message, message) == 0, "%s: \"%s\", not \"%s\"", line,
		    err.message, message);
	}
	req_compare_all(&p, NULL);
	req_close(&p);
}

START_TEST(req_ctx_hand_picked)
{
	static const char *const json_only[][2] = {
		{ "{\"ctx\":[]}", "ctx must be an object" },
		{ "{\"ctx\":1.5}", "ctx must be an object" },
		{ "{\"ctx\":{\"now\":1.5}}",
		    "ctx.now must be an integer from 0 to 9007199254740992" },
		{ "{\"ctx\":{\"preset\":\"a\\u0000b\"}}", "ctx.preset must be a string" },
		{ "{\"ctx\":{\"trip\":\"rate\\u0000\"}}",
		    "ctx.trip must be \"consecutive\" or \"rate\"" },
		{ "{\"ctx\":{\"preset\":\"caf\\u00e9\"}}",
		    "ctx.preset must be a preset name (1 to 64 letters, digits, '-', '_', '.')" },
	};
	char line[256], field[64];
	proto_error err;
	proto_ctx ctx;
	req_pair p;

	for (size_t i = 0; i < sizeof req_ctx_cases / sizeof req_ctx_cases[0]; i++)
		req_ctx_expect(req_ctx_cases[i].line, req_ctx_cases[i].message);

	/* Every key of the table: its bounds and one past them, other types. */
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		const proto_ctx_def *def = proto_ctx_def_get((proto_ctx_key)k);
		char range[160];

		snprintf(field, sizeof field, "ctx.%s", def->name);
		if (def->type == PROTO_CTX_INT) {
			snprintf(range, sizeof range, "%s must be an integer from %lld to %lld",
			    field, (long long)def->min, (long long)def->max);
			/* window_size: its table bounds are both windows'. */
			snprintf(line, sizeof line, "{\"ctx\":{\"window\":\"time\",\"%s\":%lld}}",
			    def->name, (long long)def->min);
			req_ctx_expect(line,
			    k == PROTO_CTX_WINDOW_SIZE
				? "ctx.window_size must be from 1000 to 3600000 for a time (ms) "
				  "window"
				: NULL);
			snprintf(line, sizeof line, "{\"ctx\":{\"window\":\"time\",\"%s\":%lld}}",
			    def->name, (long long)def->max);
			req_ctx_expect(line, NULL);
			snprintf(line, sizeof line, "{\"ctx\":{\"%s\":%lld}}", def->name,
			    (long long)def->min - 1);
			req_ctx_expect(line, range);
			snprintf(line, sizeof line, "{\"ctx\":{\"%s\":%lld}}", def->name,
			    (long long)def->max + 1);
			req_ctx_expect(line, range);
			snprintf(line, sizeof line, "{\"ctx\":{\"%s\":\"1\"}}", def->name);
			req_ctx_expect(line, range);
			snprintf(line, sizeof line, "{\"ctx\":{\"%s\":true}}", def->name);
			req_ctx_expect(line, range);
			snprintf(line, sizeof line, "{\"ctx\":{\"%s\":{}}}", def->name);
			req_ctx_expect(line, range);
		} else if (def->type == PROTO_CTX_ENUM) {
			snprintf(range, sizeof range, "%s must be \"%s\" or \"%s\"", field,
			    def->names[0], def->names[1]);
			for (int i = 0; def->names[i] != NULL; i++) {
				snprintf(line, sizeof line, "{\"ctx\":{\"%s\":\"%s\"}}", def->name,
				    def->names[i]);
				req_open_must(&p, line);
				ck_assert(req_ctx_both(&p, &ctx, &err));
				ck_assert(proto_ctx_has(&ctx, (proto_ctx_key)k));
				ck_assert_int_eq(ctx.value[k], i);
				req_close(&p);
				snprintf(line, sizeof line, "{\"ctx\":{\"%s\":\"%s \"}}", def->name,
				    def->names[i]);
				req_ctx_expect(line, range);
			}
			snprintf(line, sizeof line, "{\"ctx\":{\"%s\":0}}", def->name);
			req_ctx_expect(line, range);
			snprintf(line, sizeof line, "{\"ctx\":{\"%s\":false}}", def->name);
			req_ctx_expect(line, range);
		} else {
			snprintf(range, sizeof range,
			    "%s must be a preset name (1 to 64 letters, digits, '-', '_', '.')",
			    field);
			for (int len = PROTO_PRESET_NAME_MAX - 1; len <= PROTO_PRESET_NAME_MAX + 1;
			     len++) {
				snprintf(line, sizeof line, "{\"ctx\":{\"%s\":\"%0*d\"}}",
				    def->name, len, 3);
				req_open_must(&p, line);
				ck_assert_int_eq(req_ctx_both(&p, &ctx, &err),
				    len <= PROTO_PRESET_NAME_MAX);
				if (len <= PROTO_PRESET_NAME_MAX)
					ck_assert_uint_eq(strlen(ctx.preset), (size_t)len);
				else
					ck_assert_str_eq(err.message, range);
				req_close(&p);
			}
		}
		/* null reads as absent. */
		snprintf(line, sizeof line, "{\"ctx\":{\"%s\":null}}", def->name);
		req_open_must(&p, line);
		ck_assert(req_ctx_both(&p, &ctx, &err));
		ck_assert_uint_eq(ctx.present, 0);
		req_close(&p);
	}

	req_open_must(&p,
	    "{\"ctx\":{\"failure_threshold\":3,\"trip\":\"rate\",\"preset\":"
	    "\"database\",\"now\":0}}");
	ck_assert(req_ctx_both(&p, &ctx, &err));
	ck_assert_uint_eq(ctx.present,
	    (1u << PROTO_CTX_FAILURE_THRESHOLD) | (1u << PROTO_CTX_TRIP) |
		(1u << PROTO_CTX_PRESET) | (1u << PROTO_CTX_NOW));
	ck_assert_int_eq(ctx.value[PROTO_CTX_FAILURE_THRESHOLD], 3);
	ck_assert_int_eq(ctx.value[PROTO_CTX_TRIP], CB_TRIP_RATE);
	ck_assert_str_eq(ctx.preset, "database");
	req_close(&p);

	for (size_t i = 0; i < sizeof json_only / sizeof json_only[0]; i++) {
		json_t *v = req_json_only(json_only[i][0], strlen(json_only[i][0]));

		ck_assert_msg(!proto_req_ctx(&(proto_req){ .json = v }, &ctx, &err), "%s",
		    json_only[i][0]);
		ck_assert_str_eq(err.message, json_only[i][1]);
		json_decref(v);
	}
}
END_TEST

START_TEST(req_id_and_flags_hand_picked)
{
	static const struct {
		const char *line;
		json_type type; /* JSON_NULL: no id; JSON_FALSE: bad_request */
	} ids[] = {
		{ "{\"id\":7}", JSON_INTEGER },
		{ "{\"id\":-7}", JSON_INTEGER },
		{ "{\"id\":0}", JSON_INTEGER },
		{ "{\"id\":999999999999999999}", JSON_INTEGER },
		{ "{\"id\":\"abc\"}", JSON_STRING },
		{ "{\"id\":\"\"}", JSON_STRING },
		{ "{\"id\":\"7\"}", JSON_STRING },
		{ "{\"id\":null}", JSON_NULL },
		{ "{}", JSON_NULL },
		{ "{\"x\":{\"id\":1}}", JSON_NULL },
		{ "{\"id\":true}", JSON_FALSE },
		{ "{\"id\":false}", JSON_FALSE },
		{ "{\"id\":{}}", JSON_FALSE },
		{ "{\"id\":{\"id\":1}}", JSON_FALSE },
	};
	static const struct {
		const char *line;
		bool has, is_true;
	} flags[] = {
		{ "{\"noreply\":true}", true, true },
		{ "{\"noreply\":false}", true, false },
		{ "{\"noreply\":1}", true, false },
		{ "{\"noreply\":\"true\"}", true, false },
		{ "{\"noreply\":{}}", true, false },
		{ "{\"noreply\":null}", false, false },
		{ "{}", false, false },
		{ "{\"x\":{\"noreply\":true}}", false, false },
	};
	proto_error err;
	req_pair p;
	json_t *id;

	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		bool ok;

		req_open_must(&p, ids[i].line);
		ok = req_id_both(&p, &id, &err);
		ck_assert_msg(ok == (ids[i].type != JSON_FALSE), "%s", ids[i].line);
		if (!ok) {
			ck_assert_int_eq(err.code, PROTO_BAD_REQUEST);
			ck_assert_str_eq(err.message, "id must be an integer or a string");
		}
		if (ok && ids[i].type == JSON_NULL)
			ck_assert_ptr_null(id);
		else if (ok)
			ck_assert_msg(id != NULL && json_typeof(id) == ids[i].type &&
				json_equal(id, json_object_get(p.json, "id")),
			    "%s", ids[i].line);
		json_decref(id);
		req_compare_all(&p, NULL);
		req_close(&p);
	}
	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
		bool has, is_true;

		req_open_must(&p, flags[i].line);
		req_flags_both(&p, PROTO_MEMBER_NOREPLY, &has, &is_true);
		ck_assert_msg(has == flags[i].has && is_true == flags[i].is_true, "%s",
		    flags[i].line);
		req_compare_all(&p, NULL);
		req_close(&p);
	}
	/* Ids only jansson reads: refused as the flat path would. */
	for (int i = 0; i < 2; i++) {
		const char *line = i == 0 ? "{\"id\":1.5}" : "{\"id\":[1]}";
		json_t *v = req_json_only(line, strlen(line));

		ck_assert(!proto_req_id(&(proto_req){ .json = v }, &id, &err));
		ck_assert_ptr_null(id);
		ck_assert_str_eq(err.message, "id must be an integer or a string");
		json_decref(v);
	}
}
END_TEST

/* ---- proto_req on generated request lines ----------------------------- */

/* A string: names the readers know (ops, enums, presets), junk of
 * printable ASCII, lengths at the name and preset limits, and now and then
 * one outside the fast path's subset. */
static void
req_gen_string(scan_gen *g)
{
	static const char *const words[] = { "get", "allow", "record", "record_success", "success",
		"failure", "consecutive", "rate", "count", "time", "Rate", "rate ", "service",
		"http-external", "database", "my.preset_1", "a b", "payments", "", "null", "true",
		"0", "1", "-1", "~" };
	static const char *const odd[] = { "a\\u0000b", "\\n", "caf\xc3\xa9", "a\\\"b", "\x7f",
		"\\u0085" };
	char junk[CT_NAME_MAX + 8];
	size_t len = 0;

	switch (test_below(&g->state, 10)) {
	case 0:
	case 1:
		len = test_below(&g->state, 12);
		for (size_t i = 0; i < len; i++) {
			char c = (char)(0x20 + test_below(&g->state, 0x5f));

			junk[i] = c == '"' || c == '\\' ? '.' : c;
		}
		break;
	case 2: /* around CT_NAME_MAX or PROTO_PRESET_NAME_MAX */
		len = test_below(&g->state, 2) == 0
		    ? CT_NAME_MAX - 1 + test_below(&g->state, 3)
		    : PROTO_PRESET_NAME_MAX - 1 + test_below(&g->state, 3);
		memset(junk, "nP-"[test_below(&g->state, 3)], len);
		break;
	case 3:
		if (test_below(&g->state, 4) == 0) {
			const char *w = odd[test_below(&g->state, sizeof odd / sizeof odd[0])];

			len = strlen(w);
			memcpy(junk, w, len);
			break;
		}
		/* fall through */
	default: {
		const char *w = words[test_below(&g->state, sizeof words / sizeof words[0])];

		len = strlen(w);
		memcpy(junk, w, len);
	} break;
	}
	scan_gen_put(g, "\"", 1);
	scan_gen_put(g, junk, len);
	scan_gen_put(g, "\"", 1);
}

/* An integer: the table's bounds and one past them, small ones, random
 * ones of up to PROTO_SCAN_DIGITS_MAX digits, now and then one the fast
 * path leaves to jansson. */
static void
req_gen_int(scan_gen *g)
{
	static const char *const edges[] = { "0", "-0", "1", "-1", "2", "10", "11", "64", "65",
		"99", "100", "101", "999", "1000", "10000", "10001", "3600000", "3600001",
		"1000000000", "1000000001", "9007199254740992", "9007199254740993",
		"999999999999999999", "-999999999999999999", "1.5", "1e3", "01",
		"1000000000000000000" };
	char text[32];
	size_t len = 0;

	switch (test_below(&g->state, 3)) {
	case 0: {
		size_t n = test_below(&g->state, 25) == 0 ? sizeof edges / sizeof edges[0]
							  : sizeof edges / sizeof edges[0] - 4;
		const char *w = edges[test_below(&g->state, n)];

		scan_gen_put(g, w, strlen(w));
		return;
	}
	case 1:
		len = (size_t)snprintf(text, sizeof text, "%d", (int)test_below(&g->state, 31));
		break;
	default: {
		size_t digits = 1 + test_below(&g->state, PROTO_SCAN_DIGITS_MAX);

		if (test_below(&g->state, 3) == 0)
			text[len++] = '-';
		text[len++] = (char)('1' + test_below(&g->state, 9));
		for (size_t i = 1; i < digits; i++)
			text[len++] = (char)('0' + test_below(&g->state, 10));
	} break;
	}
	scan_gen_put(g, text, len);
}

static void req_gen_object(scan_gen *g, int depth);

/* Any value, objects down to PROTO_SCAN_DEPTH_MAX. */
static void
req_gen_value(scan_gen *g, int depth)
{
	static const char *const words[] = { "true", "false", "null", "{}" };

	switch (test_below(&g->state, 8)) {
	case 0:
	case 1:
		req_gen_string(g);
		break;
	case 2:
	case 3:
		req_gen_int(g);
		break;
	case 4:
		if (depth < PROTO_SCAN_DEPTH_MAX) {
			req_gen_object(g, depth + 1);
			break;
		}
		/* fall through */
	default: {
		const char *w = words[test_below(&g->state, 4)];

		scan_gen_put(g, w, strlen(w));
	} break;
	}
}

/* Write members names[order[0..n-1]] of an object, each value written by
 * value(g, name, depth). */
static void
req_gen_members(scan_gen *g, const char *const *names, size_t n, int depth,
    void (*value)(scan_gen *g, const char *name, int depth))
{
	size_t order[32];
	size_t count = 0;

	/* Each name with probability 1/3, in a random order. */
	for (size_t i = 0; i < n && count < sizeof order / sizeof order[0]; i++) {
		if (test_below(&g->state, 3) == 0)
			order[count++] = i;
	}
	for (size_t i = count; i > 1; i--) {
		size_t j = test_below(&g->state, i), t = order[i - 1];

		order[i - 1] = order[j];
		order[j] = t;
	}
	scan_gen_put(g, "{", 1);
	for (size_t i = 0; i < count; i++) {
		if (i > 0)
			scan_gen_put(g, ",", 1);
		scan_gen_space(g);
		scan_gen_put(g, "\"", 1);
		scan_gen_put(g, names[order[i]], strlen(names[order[i]]));
		scan_gen_put(g, "\"", 1);
		scan_gen_space(g);
		scan_gen_put(g, ":", 1);
		scan_gen_space(g);
		value(g, names[order[i]], depth);
	}
	scan_gen_space(g);
	scan_gen_put(g, "}", 1);
}

static void
req_gen_any(scan_gen *g, const char *name, int depth)
{
	(void)name;
	req_gen_value(g, depth);
}

/* A nested object of a few of the request's names. */
static void
req_gen_object(scan_gen *g, int depth)
{
	static const char *const names[] = { "a", "id", "ctx", "now", "name", "" };

	req_gen_members(g, names, sizeof names / sizeof names[0], depth, req_gen_any);
}

/* A ctx member's value: four times in five one its row takes, else
 * anything. */
static void
req_gen_ctx_value(scan_gen *g, const char *name, int depth)
{
	const proto_ctx_def *def = NULL;
	proto_ctx_key key;
	char text[32];
	int n;

	if (proto_ctx_key_parse(name, &key))
		def = proto_ctx_def_get(key);
	if (def == NULL || test_below(&g->state, 5) == 0) {
		req_gen_value(g, depth);
		return;
	}
	switch (def->type) {
	case PROTO_CTX_ENUM:
		n = snprintf(text, sizeof text, "\"%s\"", def->names[test_below(&g->state, 2)]);
		scan_gen_put(g, text, (size_t)n);
		break;
	case PROTO_CTX_NAME:
		req_gen_string(g);
		break;
	case PROTO_CTX_INT:
		switch (test_below(&g->state, 4)) {
		case 0:
			n = snprintf(text, sizeof text, "%lld", (long long)def->min);
			break;
		case 1:
			n = snprintf(text, sizeof text, "%lld", (long long)def->max);
			break;
		default:
			n = snprintf(text, sizeof text, "%lld",
			    (long long)(def->min +
				(int64_t)test_below(&g->state,
				    (size_t)(def->max - def->min < 20000 ? def->max - def->min + 1
									 : 20000))));
			break;
		}
		scan_gen_put(g, text, (size_t)n);
		break;
	}
}

/* The ctx keys and a few others, for req_gen_members. */
static const char *req_ctx_names[PROTO_CTX_KEY_COUNT + 3];

static void
req_gen_ctx(scan_gen *g, int depth)
{
	if (req_ctx_names[0] == NULL) {
		for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++)
			req_ctx_names[k] = proto_ctx_def_get((proto_ctx_key)k)->name;
		req_ctx_names[PROTO_CTX_KEY_COUNT] = "unknown";
		req_ctx_names[PROTO_CTX_KEY_COUNT + 1] = "Now";
		req_ctx_names[PROTO_CTX_KEY_COUNT + 2] = "";
	}
	req_gen_members(g, req_ctx_names, sizeof req_ctx_names / sizeof req_ctx_names[0], depth,
	    req_gen_ctx_value);
}

/* A request member's value: ctx mostly an object of ctx keys, noreply
 * mostly a boolean, the rest anything. */
static void
req_gen_request_value(scan_gen *g, const char *name, int depth)
{
	if (strcmp(name, "ctx") == 0 && test_below(&g->state, 4) != 0)
		req_gen_ctx(g, depth + 1);
	else if (strcmp(name, "noreply") == 0 && test_below(&g->state, 2) == 0)
		scan_gen_put(g, test_below(&g->state, 2) ? "true" : "false",
		    test_below(&g->state, 2) ? 4 : 5);
	else
		req_gen_value(g, depth);
}

START_TEST(req_generated_differential)
{
	/* The dispatcher's members, the others proto_member names, near
	 * misses of them (the scanner's member index), one unknown, the
	 * empty name. */
	static const char *const names[] = { "op", "name", "id", "noreply", "duration_ms",
		"outcome", "permit", "token", "ctx", "from", "to", "state", "policy", "count",
		"wait_ms", "retry", "nam", "names", "t", "ctxs", "x", "" };
	const char *env = getenv("CBD_REQ_ITERATIONS");
	long iterations = env != NULL && atol(env) > 0 ? atol(env) : REQ_ITERATIONS;
	scan_gen g = { .state = UINT64_C(20261130) };
	req_tally t = { { 0 }, { 0 } };
	long taken = 0;
	req_pair p;

	for (long i = 0; i < iterations; i++) {
		g.len = 0;
		scan_gen_space(&g);
		req_gen_members(&g, names, sizeof names / sizeof names[0], 1,
		    req_gen_request_value);
		scan_gen_space(&g);
		if (!req_open(&p, g.text, g.len))
			continue;
		taken++;
		req_compare_all(&p, &t);
		req_close(&p);
	}
	/* The lines must reach the readers, and each reader must answer
	 * both ways on members given, or the loop proves nothing. */
	ck_assert_msg(taken > iterations / 2, "the fast path took only %ld of %ld lines", taken,
	    iterations);
	for (int r = 0; r < 4; r++) {
		ck_assert_msg(t.ok[r] > taken / 100 && t.bad[r] > taken / 100,
		    "reader %d: %ld ok, %ld not of %ld lines", r, t.ok[r], t.bad[r], taken);
	}
}
END_TEST

/* The one reader of holds and totals (circuit-json.c): what the writer
 * writes reads back, strict mode (the state file, the fleet script) wants
 * every member, tolerant mode (libcbclient) takes a member left out, and
 * both name path.member in their errors. */
START_TEST(circuit_json_readers)
{
	ct_hold hold = { .held = true,
		.state = CB_STATE_OPEN,
		.since = 1000,
		.until = 5000,
		.by_uid = 0,
		.by_user = "root",
		.reason = "maintenance" };
	ct_totals totals = { 1, 2, 3, 4, 5, 6, 7, 8 }, t;
	json_t *hj = circuit_json_hold(&hold), *tj = circuit_json_totals(&totals), *bad;
	proto_node hn = proto_node_json(hj), tn = proto_node_json(tj), n;
	proto_error err;
	unsigned found;
	ct_hold h;

	ck_assert(circuit_json_hold_read(&hn, "hold", CIRCUIT_JSON_STRICT, &h, &err));
	ck_assert(h.held && h.state == CB_STATE_OPEN && h.since == 1000 && h.until == 5000);
	ck_assert_str_eq(h.by_user, "root");
	ck_assert_str_eq(h.reason, "maintenance");
	ck_assert(circuit_json_totals_read(&tn, "totals", CIRCUIT_JSON_STRICT, &t, &found, &err));
	ck_assert_uint_eq(found, CIRCUIT_JSON_TOTALS_ALL);
	ck_assert(t.successes == 1 && t.failures == 2 && t.ignored == 3 && t.slow == 4 &&
	    t.rejected == 5);

	/* by_uid left out: strict refuses, naming it; tolerant takes it. */
	json_object_del(hj, "by_uid");
	hn = proto_node_json(hj);
	ck_assert(!circuit_json_hold_read(&hn, "hold", CIRCUIT_JSON_STRICT, &h, &err));
	ck_assert_str_eq(err.message, "hold.by_uid is missing");
	hn = proto_node_json(hj);
	ck_assert(circuit_json_hold_read(&hn, "snapshot.hold", CIRCUIT_JSON_TOLERANT, &h, &err));
	ck_assert(h.held && h.by_uid == 0);

	/* A hold's state may not be half_open. */
	json_object_set_new(hj, "state", json_string("half_open"));
	hn = proto_node_json(hj);
	ck_assert(!circuit_json_hold_read(&hn, "snapshot.hold", CIRCUIT_JSON_TOLERANT, &h, &err));
	ck_assert_str_eq(err.message, "snapshot.hold.state must be open or closed");

	/* null or absent: no hold, in both modes. */
	n = proto_node_json(NULL);
	ck_assert(circuit_json_hold_read(&n, "hold", CIRCUIT_JSON_STRICT, &h, &err) && !h.held);

	/* Totals: a count left out is an error strict, not reported tolerant. */
	json_object_del(tj, "slow");
	tn = proto_node_json(tj);
	ck_assert(!circuit_json_totals_read(&tn, "totals", CIRCUIT_JSON_STRICT, &t, &found, &err));
	ck_assert_str_eq(err.message, "totals.slow is missing");
	tn = proto_node_json(tj);
	ck_assert(circuit_json_totals_read(&tn, "snapshot.totals", CIRCUIT_JSON_TOLERANT, &t,
	    &found, &err));
	ck_assert_uint_eq(found, CIRCUIT_JSON_TOTALS_ALL & ~8u);
	bad = json_pack("{s:i}", "successes", -3);
	tn = proto_node_json(bad);
	ck_assert(!circuit_json_totals_read(&tn, "totals", CIRCUIT_JSON_STRICT, &t, &found, &err));
	n = proto_node_json(NULL);
	ck_assert(!circuit_json_totals_read(&n, "totals", CIRCUIT_JSON_STRICT, &t, &found, &err));
	ck_assert(circuit_json_totals_read(&n, "totals", CIRCUIT_JSON_TOLERANT, &t, &found, &err) &&
	    found == 0);
	json_decref(bad);
	json_decref(hj);
	json_decref(tj);
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
	tcase_add_test(tc, circuit_json_readers);
	suite_add_tcase(suite, tc);

	tc = tcase_create("scan");
	/* 200000 lines through both decoders, on a loaded machine too. */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, scan_hand_picked);
	tcase_add_test(tc, scan_key_lengths);
	tcase_add_test(tc, scan_string_boundaries);
	tcase_add_test(tc, scan_member_index);
	tcase_add_test(tc, scan_random_differential);
	tcase_add_test(tc, scan_generated_differential);
	tcase_add_test(tc, decode_unchanged_by_scan);
	suite_add_tcase(suite, tc);

	tc = tcase_create("req");
	/* 100000 generated lines, every reader on both forms of each. */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, req_int_hand_picked);
	tcase_add_test(tc, req_text_hand_picked);
	tcase_add_test(tc, req_name_hand_picked);
	tcase_add_test(tc, req_ctx_hand_picked);
	tcase_add_test(tc, req_id_and_flags_hand_picked);
	tcase_add_test(tc, req_generated_differential);
	suite_add_tcase(suite, tc);
	return check_run(suite, NULL);
}
