/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-codec-test.c — unit tests of the request codec added to proto.c for
 * cbd (and shareable with clients): decoding a framed line, the id rules,
 * NUL-free text members and the reply builders.
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check-run.h"
#include "proto.h"

/* Decode text; expect failure with code and a message holding mention. */
static void
expect_decode_error(const char *text, proto_code code, const char *mention)
{
	proto_error err = { 0 };
	json_t *v = proto_request_decode(text, strlen(text), &err);

	ck_assert_msg(v == NULL, "decoded: %s", text);
	ck_assert_msg(err.code == code, "%s: code %s", text, proto_code_name(err.code));
	if (mention != NULL)
		ck_assert_msg(strstr(err.message, mention) != NULL, "%s: message %s", text,
		    err.message);
}

START_TEST(test_decode_object)
{
	proto_error err;
	const char *text = "{\"op\":\"get\",\"name\":\"a\"} trailing";
	json_t *v = proto_request_decode(text, 24, &err);

	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(json_string_value(json_object_get(v, "op")), "get");
	json_decref(v);
}
END_TEST

START_TEST(test_decode_errors)
{
	expect_decode_error("", PROTO_PARSE_ERROR, NULL);
	expect_decode_error("nope", PROTO_PARSE_ERROR, "not JSON");
	expect_decode_error("[1]", PROTO_PARSE_ERROR, "object");
	expect_decode_error("\"s\"", PROTO_PARSE_ERROR, NULL);
	expect_decode_error("{\"a\":1,\"a\":2}", PROTO_PARSE_ERROR, NULL);
	expect_decode_error("{\"a\":1} {}", PROTO_PARSE_ERROR, NULL);
	expect_decode_error("{\"now\":99999999999999999999}", PROTO_BAD_REQUEST,
	    "now is an integer out of range");
	expect_decode_error("{\"ctx\": {\"break_ms\" : -99999999999999999999 }}", PROTO_BAD_REQUEST,
	    "break_ms");
	expect_decode_error("{\"x\":[99999999999999999999]}", PROTO_BAD_REQUEST, "near byte");
	expect_decode_error("{\"r\":1e999}", PROTO_BAD_REQUEST, "r is a number out of range");
	/* Client text that reads like jansson's overflow messages is still a
	 * syntax error: the decoder goes by jansson's error code. */
	expect_decode_error("{\"op\":\"get\" \"too big\"}", PROTO_PARSE_ERROR, "not JSON");
	expect_decode_error("{\"op\":\"get\" \"real number overflow\"}", PROTO_PARSE_ERROR,
	    "not JSON");
	expect_decode_error("{\"too big\":1 2}", PROTO_PARSE_ERROR, "not JSON");
	expect_decode_error("{\"x\":[-1.5e400]}", PROTO_BAD_REQUEST, "a number is out of range");
}
END_TEST

START_TEST(test_nul_in_strings)
{
	const char *text = "{\"op\":\"get\\u0000x\",\"name\":\"a\\u0000\"}";
	proto_error err;
	json_t *v = proto_request_decode(text, strlen(text), &err);
	const char *s;

	ck_assert_ptr_nonnull(v);
	ck_assert(!proto_get_text(v, "op", true, &s, NULL, &err));
	ck_assert_int_eq(err.code, PROTO_BAD_REQUEST);
	ck_assert(!proto_get_name(v, "name", &s, &err));
	json_decref(v);
}
END_TEST

START_TEST(test_ids)
{
	proto_error err;
	const json_t *id;
	json_t *v;

	v = json_loads("{\"id\":5}", 0, NULL);
	ck_assert(proto_request_id(v, &id, &err) && json_integer_value(id) == 5);
	json_decref(v);
	v = json_loads("{\"id\":\"x\"}", 0, NULL);
	ck_assert(proto_request_id(v, &id, &err) && strcmp(json_string_value(id), "x") == 0);
	json_decref(v);
	v = json_loads("{\"id\":null}", 0, NULL);
	ck_assert(proto_request_id(v, &id, &err) && id == NULL);
	json_decref(v);
	v = json_loads("{}", 0, NULL);
	ck_assert(proto_request_id(v, &id, &err) && id == NULL);
	json_decref(v);
	v = json_loads("{\"id\":true}", 0, NULL);
	ck_assert(!proto_request_id(v, &id, &err) && id == NULL);
	ck_assert_int_eq(err.code, PROTO_BAD_REQUEST);
	json_decref(v);
}
END_TEST

START_TEST(test_replies)
{
	json_t *id = json_integer(3), *r;
	proto_error err;
	char *text;

	r = proto_reply_ok(id);
	text = json_dumps(r, JSON_COMPACT);
	ck_assert_str_eq(text, "{\"id\":3,\"ok\":true}");
	free(text);
	json_decref(r);
	proto_fail(&err, PROTO_BAD_REQUEST, "%s is required", "name");
	r = proto_reply_error(NULL, &err);
	text = json_dumps(r, JSON_COMPACT);
	ck_assert_str_eq(text,
	    "{\"ok\":false,\"error\":{\"code\":\"bad_request\",\"message\":\"name is required\"}}");
	free(text);
	json_decref(r);
	/* A message cut inside a UTF-8 sequence is shortened, not dropped. */
	memset(err.message, 'a', sizeof err.message);
	err.message[sizeof err.message - 3] = '\xc3';
	err.message[sizeof err.message - 2] = '\0';
	r = proto_reply_error(id, &err);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(strlen(json_string_value(
			      json_object_get(json_object_get(r, "error"), "message"))),
	    sizeof err.message - 3);
	json_decref(r);
	json_decref(id);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("cbd-codec");
	TCase *tc = tcase_create("codec");

	tcase_add_test(tc, test_decode_object);
	tcase_add_test(tc, test_decode_errors);
	tcase_add_test(tc, test_nul_in_strings);
	tcase_add_test(tc, test_ids);
	tcase_add_test(tc, test_replies);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
