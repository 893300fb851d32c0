/*
 * check_encode.c — the hot path's snapshot encoder (src/encode.c) writes
 * exactly the text jansson writes for the same snapshot
 * (op_snapshot_json + json_dumps), for every kind of snapshot: initial,
 * open, held with an awkward reason, names that need escaping, rate
 * windows, reporters, grown breaks, presets, every source.
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check-run.h"
#include "encode.h"
#include "op.h"

#define T0 INT64_C(1700000000000)

/* Both encodings of one snapshot must be the same bytes. */
static void
same_text(const char *name, const ct_view *view, const cb_policy *policy, const char *preset,
    const proto_policy_sources *sources, int64_t now)
{
	json_t *obj = op_snapshot_json(name, view, policy, preset, sources, now);
	char *want = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
	enc_buf got = { 0 };

	ck_assert_ptr_nonnull(want);
	encode_snapshot(&got, name, view, policy, preset, sources, now);
	ck_assert(!got.nomem);
	ck_assert_msg(strcmp(got.buf, want) == 0, "\n got %s\nwant %s", got.buf, want);
	/* And again: the second time the policy text comes from the cache. */
	got.len = 0;
	encode_snapshot(&got, name, view, policy, preset, sources, now);
	ck_assert_str_eq(got.buf, want);
	enc_free(&got);
	free(want);
	json_decref(obj);
}

static ct_view
initial(void)
{
	ct_view v;

	memset(&v, 0, sizeof v);
	breaker_snapshot_init(&v.snap);
	v.hold.until = CB_TIME_NONE;
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

START_TEST(integers_at_the_edges)
{
	enc_buf b = { 0 };
	const int64_t values[] = { 0, 1, -1, 9, 10, INT64_C(9007199254740992), INT64_MAX,
		INT64_MIN };
	char want[32];

	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		b.len = 0;
		enc_int(&b, values[i]);
		snprintf(want, sizeof want, "%lld", (long long)values[i]);
		ck_assert_str_eq(b.buf, want);
	}
	enc_free(&b);
	encode_cache_clear();
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("encode");
	TCase *tc = tcase_create("encode");

	tcase_add_test(tc, closed_and_open);
	tcase_add_test(tc, names_and_holds);
	tcase_add_test(tc, rate_reporters_backoff_preset);
	tcase_add_test(tc, integers_at_the_edges);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
