/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_encode.c — the hot path's snapshot encoder (src/core/encode.c) writes
 * exactly the text jansson writes for the same snapshot
 * (circuit_json_snapshot + json_dumps), for every kind of snapshot: initial,
 * open, held with an awkward reason, names that need escaping, rate
 * windows, reporters, grown breaks, presets, every source. And
 * enc_compact writes what json_dumpb writes, on hand-picked values and on
 * seeded random ones.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check-run.h"
#include "test-rand.h"
#include "encode.h"
#include "circuit-json.h"

#define T0 INT64_C(1700000000000)

/* Both encodings of one snapshot, with its policy or without (protocol
 * 3's compact snapshot), must be the same bytes. */
static void
same_text_as(const char *name, const ct_view *view, const cb_policy *policy, const char *preset,
    const proto_policy_sources *sources, int64_t now, bool with_policy)
{
	json_t *obj = circuit_json_snapshot(name, view, policy, preset, sources, now, with_policy);
	char *want = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
	enc_buf got = { 0 };

	ck_assert_ptr_nonnull(want);
	ck_assert(json_integer_value(json_object_get(obj, "policy_rev")) == view->policy_rev);
	ck_assert((json_object_get(obj, "policy") != NULL) == with_policy);
	encode_snapshot(&got, name, view, policy, preset, sources, now, with_policy);
	ck_assert(!got.nomem);
	ck_assert_msg(strcmp(got.buf, want) == 0, "\n got %s\nwant %s", got.buf, want);
	/* And again: the second time the policy text comes from the cache. */
	got.len = 0;
	encode_snapshot(&got, name, view, policy, preset, sources, now, with_policy);
	ck_assert_str_eq(got.buf, want);
	enc_free(&got);
	free(want);
	json_decref(obj);
}

static void
same_text(const char *name, const ct_view *view, const cb_policy *policy, const char *preset,
    const proto_policy_sources *sources, int64_t now)
{
	same_text_as(name, view, policy, preset, sources, now, true);
	same_text_as(name, view, policy, preset, sources, now, false);
}

static ct_view
initial(void)
{
	ct_view v;

	memset(&v, 0, sizeof v);
	breaker_snapshot_init(&v.snap);
	v.hold.until = CB_TIME_NONE;
	v.policy_rev = 4294967295u; /* the longest */
	return v;
}

START_TEST(closed_and_open)
{
	cb_policy p;
	proto_policy_sources src;
	ct_view v = initial();

	breaker_policy_default(&p);
	memset(&src, 0, sizeof src);
	same_text("payments", &v, &p, NULL, &src, T0);
	v.snap.state = CB_STATE_OPEN;
	v.snap.failure_count = 5;
	v.snap.last_failure_at = T0 - 10;
	v.snap.opened_at = T0 - 10;
	v.totals.failures = 123456789012;
	v.totals.rejected = 7;
	p.max_gap_ms = 60000;
	src.key[PROTO_CTX_BREAK_MS] = PROTO_SOURCE_CONFIG;
	src.key[PROTO_CTX_FAILURE_THRESHOLD] = PROTO_SOURCE_CLIENT;
	src.key[PROTO_CTX_MAX_GAP_MS] = PROTO_SOURCE_DEFAULTS;
	same_text("payments", &v, &p, NULL, &src, T0);
	/* A clock behind opened_at, and far ahead. */
	same_text("payments", &v, &p, NULL, &src, T0 - 100000);
	same_text("payments", &v, &p, NULL, &src, T0 + 100000000);
}
END_TEST

/* The times' text is kept from one snapshot to the next (the 13-digit
 * ones by their 5 high digits): across those digits' changes, the 13-digit
 * bounds, and back and forth between times of other lengths. */
START_TEST(times_kept_between_snapshots)
{
	const int64_t times[] = { T0, T0 + 1, T0 + 99999999, T0 + 100000000, T0 - 1,
		INT64_C(999999999999), INT64_C(1000000000000), INT64_C(1000000000001),
		INT64_C(9999999999999), INT64_C(10000000000000), T0, 0, 7, -1, T0 + 12345,
		INT64_C(1099999999999), INT64_C(1100000000000), CB_TIME_NONE, T0 };
	cb_policy p;
	ct_view v = initial();

	breaker_policy_default(&p);
	v.snap.state = CB_STATE_OPEN;
	for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
		v.snap.last_failure_at = times[i];
		v.snap.opened_at = times[(i + 3) % (sizeof times / sizeof times[0])];
		same_text("payments", &v, &p, NULL, NULL, T0);
	}
}
END_TEST

START_TEST(names_and_holds)
{
	cb_policy p;
	ct_view v = initial();

	breaker_policy_default(&p);
	same_text("a \"quoted\" \\ name", &v, &p, NULL, NULL, T0);
	same_text("zahlungen-\xc3\xa4-\xe2\x82\xac-\xf0\x9f\x92\xb3", &v, &p, NULL, NULL, T0);
	v.snap.state = CB_STATE_OPEN;
	v.snap.opened_at = T0;
	v.hold.held = true;
	v.hold.state = CB_STATE_OPEN;
	v.hold.since = T0;
	v.hold.by_uid = 1000;
	v.hold.by_user = "alice";
	v.hold.reason = "INC-42: \"db\" failover\n\tnext step \\ \x01 caf\xc3\xa9";
	same_text("held", &v, &p, NULL, NULL, T0 + 5);
	v.hold.until = T0 + 60000;
	v.hold.reason = NULL;
	v.hold.by_user = "";
	same_text("held", &v, &p, NULL, NULL, T0 + 5);
}
END_TEST

START_TEST(rate_reporters_backoff_preset)
{
	cb_policy p;
	proto_policy_sources src;
	ct_view v = initial();
	cb_reporters *r = malloc(breaker_reporters_bytes(3));

	breaker_policy_default(&p);
	memset(&src, 0, sizeof src);
	p.trip = CB_TRIP_RATE;
	p.window = CB_WINDOW_TIME;
	p.window_size = 60000;
	p.slow_call_ms = 2000;
	p.min_reporters = 3;
	p.break_backoff = 2;
	p.break_max_ms = 120000;
	src.key[PROTO_CTX_PRESET] = PROTO_SOURCE_CONFIG;
	src.key[PROTO_CTX_TRIP] = PROTO_SOURCE_CONFIG;
	breaker_reporters_init(r, 3);
	v.has_window = true;
	v.window.calls = 3;
	v.window.failures = 1;
	v.window.slow = 2;
	v.reporters = r;
	v.snap.current_break_ms = 80000;
	same_text("rated", &v, &p, "http-external", &src, T0);
	v.has_window = false;
	same_text("rated", &v, &p, "slow-partner", &src, T0);
	free(r);
}
END_TEST

/* Protocol 3: in_flight with a limit, the new totals, the new keys in the
 * policy (null and set, with their sources). */
START_TEST(bulkhead_and_budget)
{
	cb_policy p;
	proto_policy_sources src;
	ct_view v = initial();

	breaker_policy_default(&p);
	memset(&src, 0, sizeof src);
	v.totals.rejected_concurrency = 12;
	v.totals.retries = INT64_MAX;
	v.totals.rejected_retry = 3;
	same_text("no-limit", &v, &p, NULL, &src, T0);
	p.max_concurrent = 16;
	p.retry_budget_percent = 0;
	p.retry_min_per_s = 1000000;
	src.key[PROTO_CTX_MAX_CONCURRENT] = PROTO_SOURCE_CONFIG;
	src.key[PROTO_CTX_RETRY_BUDGET_PERCENT] = PROTO_SOURCE_CLIENT;
	src.key[PROTO_CTX_RETRY_MIN_PER_S] = PROTO_SOURCE_DEFAULTS;
	same_text("limited", &v, &p, NULL, &src, T0);
	v.in_flight = 16;
	v.snap.state = CB_STATE_HALF_OPEN;
	same_text("limited", &v, &p, "guarded", &src, T0);
}
END_TEST

/* enc_int's text must be printf's. */
static void
same_int(enc_buf *b, int64_t v)
{
	char want[32];

	b->len = 0;
	enc_int(b, v);
	snprintf(want, sizeof want, "%lld", (long long)v);
	ck_assert_str_eq(b->buf, want);
}

START_TEST(integers_at_the_edges)
{
	enc_buf b = { 0 };
	const int64_t values[] = { 0, 1, -1, 9, 10, INT64_C(9007199254740992), INT64_MAX,
		INT64_MIN };
	uint64_t state = UINT64_C(1130);
	int64_t pow10 = 1;

	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
		same_int(&b, values[i]);
	/* Around every power of ten and the 32-bit and 8-digit splits the
	 * encoder makes. */
	for (int e = 0; e <= 18; e++) {
		for (int64_t d = -2; d <= 2; d++) {
			same_int(&b, pow10 + d);
			same_int(&b, -(pow10 + d));
			if (e < 18) /* 10^19 - 1 is past INT64_MAX */
				same_int(&b, pow10 * 10 - 1 + d);
		}
		if (e < 18)
			pow10 *= 10;
	}
	same_int(&b, (int64_t)UINT32_MAX);
	same_int(&b, (int64_t)UINT32_MAX + 1);
	same_int(&b, INT64_C(1700000000000));
	same_int(&b, INT64_C(100000000) * 99999 + 5);
	/* Random magnitudes: every digit count equally often. */
	for (int i = 0; i < 200000; i++) {
		int64_t v = (int64_t)(test_rand(&state) >> test_below(&state, 64));

		same_int(&b, test_below(&state, 2) ? v : -v);
	}
	enc_free(&b);
	encode_cache_clear();
}
END_TEST

/* ---- enc_compact against json_dumpb ------------------------------------ */

#define ENC_DUMP_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY)
/* Random values by default; $CBD_ENC_ITERATIONS overrides. */
#define ENC_ITERATIONS 20000
/* Deepest random nesting and widest random container. */
#define ENC_DEPTH_MAX 5
#define ENC_WIDTH_MAX 6
/* Longest random string, in code points. */
#define ENC_STRING_MAX 24

/* text (len bytes) with its bytes outside printable ASCII as \xNN. */
static char *
enc_quote(const char *text, size_t len)
{
	char *out = malloc(4 * len + 1), *p = out;

	ck_assert_ptr_nonnull(out);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c >= 0x20 && c < 0x7f)
			*p++ = (char)c;
		else
			p += sprintf(p, "\\x%02x", c);
	}
	*p = '\0';
	return out;
}

/* enc_compact(v) must write the bytes json_dumpb(v) writes. */
static void
same_compact(const json_t *v)
{
	size_t size = json_dumpb(v, NULL, 0, ENC_DUMP_FLAGS);
	char *want = malloc(size + 1);
	enc_buf got = { 0 };

	ck_assert_uint_gt(size, 0);
	ck_assert_ptr_nonnull(want);
	ck_assert_uint_eq(json_dumpb(v, want, size, ENC_DUMP_FLAGS), size);
	enc_compact(&got, v);
	ck_assert(!got.nomem);
	if (got.len != size || memcmp(got.buf, want, size) != 0) {
		char *g = enc_quote(got.buf, got.len), *w = enc_quote(want, size);

		ck_abort_msg("enc_compact differs from json_dumpb:\n got %s\nwant %s", g, w);
	}
	enc_free(&got);
	free(want);
}

/* same_compact of a value built for it (stolen). */
static void
same_compact_new(json_t *v)
{
	ck_assert_ptr_nonnull(v);
	same_compact(v);
	json_decref(v);
}

START_TEST(compact_strings)
{
	char text[8];

	/* Every control byte alone, and between other bytes. */
	for (int c = 0; c < 0x20; c++) {
		text[0] = (char)c;
		same_compact_new(json_stringn(text, 1));
		memcpy(text, "a", 1);
		text[1] = (char)c;
		memcpy(text + 2, "\xc3\xa9", 2);
		text[4] = (char)c;
		text[5] = (char)c;
		same_compact_new(json_stringn(text, 6));
	}
	same_compact_new(json_string("\x7f"));
	same_compact_new(json_string("a\x7f"
				     "b"));
	same_compact_new(json_string(""));
	same_compact_new(json_string("\""));
	same_compact_new(json_string("\\"));
	same_compact_new(json_string("\\\"\\\"\"\\"));
	same_compact_new(json_string("a \"quoted\" \\ back/slash/"));
	same_compact_new(json_string("\\u0041 \\n"));
	same_compact_new(json_string("caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac"));
	same_compact_new(json_string("\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\xf0\x90\x80\x80"));
	same_compact_new(json_string("\xc2\x80\xc2\x85\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf"));
	same_compact_new(json_string("\xe2\x80\xa8\xe2\x80\xa9")); /* U+2028, U+2029 */
	same_compact_new(json_stringn("\0", 1));
	same_compact_new(json_stringn("a\0b", 3));
	same_compact_new(json_stringn("\0\0\0", 3));
	same_compact_new(json_stringn("x\0\n\x01\xc3\xa9\0", 7));
}
END_TEST

START_TEST(compact_scalars)
{
	const json_int_t ints[] = { 0, 1, -1, 9, 10, -10, 99, 100, INT64_C(9007199254740992),
		INT64_C(-9007199254740993), INT64_MAX, INT64_MAX - 1, INT64_MIN, INT64_MIN + 1,
		INT32_MAX, INT32_MIN, UINT32_MAX };
	const double reals[] = { 0.0, -0.0, 1.0, -1.5, 0.1, 1.0 / 3, 1e300, -1e-300, 5e-324,
		1.7976931348623157e308, 123456789.123, 1e17, 1e16, 9007199254740993.0, 100.0 };

	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
		same_compact_new(json_integer(ints[i]));
	for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
		same_compact_new(json_real(reals[i]));
	same_compact_new(json_true());
	same_compact_new(json_false());
	same_compact_new(json_null());
}
END_TEST

START_TEST(compact_containers)
{
	json_t *v, *inner;
	char key[4];

	same_compact_new(json_object());
	same_compact_new(json_array());
	same_compact_new(json_pack("[[],{},[[]],{s:{}},[{}]]", "a"));
	same_compact_new(
	    json_pack("{s:i,s:s,s:b,s:n,s:f}", "z", 1, "a", "x", "m", 1, "n", "b", 2.5));
	same_compact_new(json_pack("{s:{s:{s:{s:{s:[i,I,s#]}}}}}", "a", "b", "c", "d", "e", 1,
	    (json_int_t)INT64_MIN, "a\0b", 3));
	same_compact_new(json_pack("[n,b,b,i,f,s]", 1, 0, -7, -0.25, "\t"));
	/* Keys that need escaping, in insertion order. */
	v = json_object();
	json_object_set_new(v, "\"", json_integer(1));
	json_object_set_new(v, "\\", json_integer(2));
	json_object_set_new(v, "\x01\x1f\n\t\b\f\r", json_integer(3));
	json_object_set_new(v, "caf\xc3\xa9\xf0\x9f\x98\x80", json_integer(4));
	json_object_set_new(v, "", json_integer(5));
	json_object_set_new(v, "\x7f", json_integer(6));
	same_compact_new(v);
	/* Many members (order past any small-table size), deleted ones. */
	v = json_object();
	for (int i = 0; i < 300; i++) {
		snprintf(key, sizeof key, "%d", (i * 7919) % 1000);
		json_object_set_new(v, key, json_integer(i));
	}
	json_object_del(v, "0");
	json_object_del(v, "919");
	json_object_set_new(v, "0", json_string("back"));
	same_compact_new(v);
	/* A value shared by two containers. */
	inner = json_pack("{s:[i,i]}", "x", 1, 2);
	v = json_pack("[O,{s:O}]", inner, "k", inner);
	json_decref(inner);
	same_compact_new(v);
}
END_TEST

/* The jansson 2.14 API takes names with a NUL inside (json_object_setn):
 * json_dumpb writes all of the name's bytes, enc_compact (strlen of the
 * key) stops at the NUL. No cbd code builds such a name and json_loadb
 * refuses one, so nothing reaches it today; enc_compact's contract is
 * json_dumpb's text for any value, so the test stays. */
START_TEST(compact_key_with_nul)
{
	json_t *v = json_object();

	ck_assert_int_eq(json_object_setn_new(v, "a\0b", 3, json_integer(1)), 0);
	same_compact_new(v);
}
END_TEST

/* A random code point: control bytes, ASCII, and every UTF-8 length; no
 * surrogates (not UTF-8). NUL only when nul. */
static uint32_t
enc_codepoint(uint64_t *state, bool nul)
{
	uint32_t cp;

	switch (test_below(state, 6)) {
	case 0:
		cp = test_below(state, 0x20);
		break;
	case 1:
		cp = "\"\\/\x7f"[test_below(state, 4)];
		break;
	case 2:
		cp = 0x80 + test_below(state, 0x780);
		break;
	case 3:
		cp = 0x800 + test_below(state, 0xf800);
		break;
	case 4:
		cp = 0x10000 + test_below(state, 0x100000);
		break;
	default:
		cp = 0x20 + test_below(state, 0x5f);
		break;
	}
	if (cp >= 0xd800 && cp <= 0xdfff)
		cp -= 0x800;
	if (cp == 0 && !nul)
		cp = 1;
	return cp;
}

/* Random valid UTF-8 into out (room for 4 * ENC_STRING_MAX + 1); its
 * length. NUL-terminated too. */
static size_t
enc_utf8(uint64_t *state, char *out, bool nul)
{
	uint32_t n = test_below(state, ENC_STRING_MAX + 1);
	unsigned char *p = (unsigned char *)out;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t cp = enc_codepoint(state, nul);

		if (cp < 0x80) {
			*p++ = (unsigned char)cp;
		} else if (cp < 0x800) {
			*p++ = (unsigned char)(0xc0 | cp >> 6);
			*p++ = (unsigned char)(0x80 | (cp & 0x3f));
		} else if (cp < 0x10000) {
			*p++ = (unsigned char)(0xe0 | cp >> 12);
			*p++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
			*p++ = (unsigned char)(0x80 | (cp & 0x3f));
		} else {
			*p++ = (unsigned char)(0xf0 | cp >> 18);
			*p++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
			*p++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
			*p++ = (unsigned char)(0x80 | (cp & 0x3f));
		}
	}
	*p = '\0';
	return (size_t)(p - (unsigned char *)out);
}

static json_t *
enc_random(uint64_t *state, int depth)
{
	char text[4 * ENC_STRING_MAX + 1];
	json_t *v;
	uint32_t n;
	double d;
	uint64_t bits;

	switch (test_below(state, depth < ENC_DEPTH_MAX ? 9 : 7)) {
	case 0:
		return json_null();
	case 1:
		return json_boolean(test_below(state, 2));
	case 2:
		switch (test_below(state, 4)) {
		case 0:
			return json_integer(test_below(state, 2) ? INT64_MAX : INT64_MIN);
		case 1:
			return json_integer((json_int_t)test_below(state, 2001) - 1000);
		default:
			return json_integer((json_int_t)test_rand(state));
		}
	case 3:
		/* Any finite double, or a short decimal one. */
		if (test_below(state, 2)) {
			bits = test_rand(state);
			memcpy(&d, &bits, sizeof d);
			if (d != d || d - d != 0)
				d = 0.5;
		} else {
			d = ((double)test_below(state, 200001) - 100000) / 1000;
		}
		return json_real(d);
	case 4:
	case 5:
	case 6:
		n = (uint32_t)enc_utf8(state, text, true);
		return json_stringn(text, n);
	case 7:
		v = json_object();
		for (n = test_below(state, ENC_WIDTH_MAX + 1); n > 0; n--) {
			enc_utf8(state, text, false);
			json_object_set_new(v, text, enc_random(state, depth + 1));
		}
		return v;
	default:
		v = json_array();
		for (n = test_below(state, ENC_WIDTH_MAX + 1); n > 0; n--)
			json_array_append_new(v, enc_random(state, depth + 1));
		return v;
	}
}

START_TEST(compact_random)
{
	const char *env = getenv("CBD_ENC_ITERATIONS");
	long iterations = env != NULL && atol(env) > 0 ? atol(env) : ENC_ITERATIONS;
	uint64_t state = UINT64_C(20261130);

	for (long i = 0; i < iterations; i++)
		same_compact_new(enc_random(&state, 0));
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("encode");
	TCase *tc = tcase_create("encode");

	tcase_add_test(tc, closed_and_open);
	tcase_add_test(tc, times_kept_between_snapshots);
	tcase_add_test(tc, names_and_holds);
	tcase_add_test(tc, rate_reporters_backoff_preset);
	tcase_add_test(tc, bulkhead_and_budget);
	tcase_add_test(tc, integers_at_the_edges);
	suite_add_tcase(s, tc);

	tc = tcase_create("compact");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, compact_strings);
	tcase_add_test(tc, compact_scalars);
	tcase_add_test(tc, compact_containers);
	tcase_add_test(tc, compact_random);
	tcase_add_test(tc, compact_key_with_nul);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
