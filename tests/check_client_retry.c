/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_client_retry.c — libcbclient's cbc_retry_* in virtual time: the
 * backoff bounds (full jitter, cap), retry_on, the per-attempt deadline,
 * the order of the hooks, and the breaker around the attempts (an open
 * circuit stops the retries at once, a half-open trial is reported) on a
 * local store. No daemon.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "cbclient.h"
#include "check-run.h"

/* Virtual time: the breaker's clock and the retry clock both read it;
 * the retry sleep advances it. */
#define VSTART INT64_C(1700000000000)
#define LOG_SIZE 1024
#define SCRIPT_MAX 16

typedef struct vworld {
	int64_t now;
	/* The random source: scripted values, then `fallback`. */
	uint64_t script[SCRIPT_MAX];
	int nscript, next;
	uint64_t fallback;
	/* What happened, in order. */
	char log[LOG_SIZE];
	int64_t slept[SCRIPT_MAX];
	int nslept;
	int64_t retry_delays[SCRIPT_MAX];
	int nretry;
	int64_t open_retry_after;
	int opens;
	/* The attempt: results to return, time each takes, deadlines seen. */
	int results[SCRIPT_MAX];
	int nresults;
	int64_t takes_ms;
	int calls;
	int64_t deadlines[SCRIPT_MAX];
	int64_t starts[SCRIPT_MAX];
	int stop_result; /* retry_on says no to this result */
} vworld;

static vworld W;

static void
world_reset(void)
{
	memset(&W, 0, sizeof W);
	W.now = VSTART;
	W.stop_result = -12345;
}

static void
logf_(const char *word)
{
	size_t len = strlen(W.log);

	snprintf(W.log + len, sizeof W.log - len, "%s%s", len > 0 ? " " : "", word);
}

static int64_t
vclock(void *user)
{
	(void)user;
	return W.now;
}

static void
vsleep(int64_t ms, void *user)
{
	(void)user;
	if (W.nslept < SCRIPT_MAX)
		W.slept[W.nslept++] = ms;
	W.now += ms;
}

static uint64_t
vrand(void *user)
{
	(void)user;
	if (W.next < W.nscript)
		return W.script[W.next++];
	return W.fallback;
}

/* A deterministic generator for the sweep (64-bit LCG, high bits). */
static uint64_t lcg_state = 42;
static uint64_t
lcg_rand(void *user)
{
	(void)user;
	lcg_state = lcg_state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
	return lcg_state >> 11;
}

static int
attempt(void *arg, int64_t deadline_ms)
{
	int r;

	(void)arg;
	if (W.calls < SCRIPT_MAX) {
		W.deadlines[W.calls] = deadline_ms;
		W.starts[W.calls] = W.now;
	}
	r = W.calls < W.nresults ? W.results[W.calls] : W.results[W.nresults - 1];
	W.calls++;
	W.now += W.takes_ms;
	return r;
}

static bool
retry_on(int result, bool timed_out, void *user)
{
	(void)timed_out;
	(void)user;
	return result != W.stop_result;
}

static void
on_retry(int n, int result, int64_t delay_ms, void *user)
{
	char w[64];

	(void)user;
	(void)result;
	if (W.nretry < SCRIPT_MAX)
		W.retry_delays[W.nretry++] = delay_ms;
	snprintf(w, sizeof w, "retry%d", n);
	logf_(w);
}

static void
on_timeout(int n, void *user)
{
	char w[64];

	(void)user;
	snprintf(w, sizeof w, "timeout%d", n);
	logf_(w);
}

static void
on_failure(int n, int result, void *user)
{
	char w[64];

	(void)user;
	snprintf(w, sizeof w, "failure%d:%d", n, result);
	logf_(w);
}

static void
on_open(int64_t retry_after_ms, void *user)
{
	(void)user;
	W.opens++;
	W.open_retry_after = retry_after_ms;
	logf_("open");
}

static void
on_half_open(void *user)
{
	(void)user;
	logf_("half_open");
}

static void
on_closed(void *user)
{
	(void)user;
	logf_("closed");
}

static cbc_retry_options
vopts(int attempts, int64_t base_ms, int64_t max_ms)
{
	cbc_retry_options o;

	cbc_retry_options_init(&o);
	o.max_attempts = attempts;
	o.base_ms = base_ms;
	o.max_ms = max_ms;
	o.clock = vclock;
	o.sleep = vsleep;
	o.rand = vrand;
	o.retry_on = retry_on;
	o.hooks.on_retry = on_retry;
	o.hooks.on_timeout = on_timeout;
	o.hooks.on_failure = on_failure;
	o.hooks.on_circuit_open = on_open;
	o.hooks.on_circuit_half_open = on_half_open;
	o.hooks.on_circuit_closed = on_closed;
	return o;
}

static int64_t
breaker_vclock(void *user)
{
	(void)user;
	return W.now;
}

static cbc_outcome
classify_404_ok(int result, void *user)
{
	(void)user;
	return result == 404 ? CBC_OUTCOME_SUCCESS : CBC_OUTCOME_FAILURE;
}

/* A breaker on store: trips after 2 failures, 1000 ms break, one trial
 * closes it. */
static cbc_breaker *
vbreaker(cbc_store *store)
{
	cbc_breaker_options o;
	cbc_error err;
	cbc_breaker *b;

	cbc_breaker_options_init(&o);
	o.name = "retry-test";
	o.failure_threshold = 2;
	o.success_threshold = 1;
	o.break_ms = 1000;
	o.half_open_max = 1;
	o.store = store;
	o.clock = breaker_vclock;
	o.classify = classify_404_ok;
	b = cbc_breaker_new(&o, &err);
	ck_assert_msg(b != NULL, "breaker_new: %s", err.message);
	return b;
}

/* ---------- options ---------- */

START_TEST(options_defaults_and_errors_name_the_field)
{
	cbc_retry_options o;
	cbc_error err;

	cbc_retry_options_init(&o);
	ck_assert_int_eq(o.max_attempts, CBC_RETRY_DEFAULT_ATTEMPTS);
	ck_assert_int_eq(o.base_ms, CBC_RETRY_DEFAULT_BASE_MS);
	ck_assert_int_eq(o.max_ms, CBC_RETRY_DEFAULT_MAX_MS);
	ck_assert_int_eq(cbc_retry_options_check(&o, &err), CBC_OK);

	o.max_attempts = 0;
	ck_assert_int_eq(cbc_retry_options_check(&o, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "max_attempts"));
	o.max_attempts = CBC_RETRY_ATTEMPTS_MAX + 1;
	ck_assert_int_eq(cbc_retry_options_check(&o, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "max_attempts"));
	o.max_attempts = 3;
	o.timeout_ms = -1;
	ck_assert_int_eq(cbc_retry_options_check(&o, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "timeout_ms"));
	o.timeout_ms = 0;
	o.base_ms = o.max_ms + 1;
	ck_assert_int_eq(cbc_retry_options_check(&o, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "base_ms"));
	o.base_ms = 1;
	o.max_ms = CBC_RETRY_DELAY_MAX_MS + 1;
	ck_assert_int_eq(cbc_retry_options_check(&o, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "max_ms"));

	/* execute refuses them too, without calling fn. */
	world_reset();
	W.results[0] = 0;
	W.nresults = 1;
	o = vopts(0, 1, 1);
	ck_assert_int_eq(cbc_retry_execute(NULL, &o, attempt, NULL, NULL, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "max_attempts"));
	ck_assert_int_eq(W.calls, 0);
	o = vopts(1, 1, 1);
	ck_assert_int_eq(cbc_retry_execute(NULL, &o, NULL, NULL, NULL, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "fn"));
}
END_TEST

/* ---------- backoff ---------- */

START_TEST(backoff_caps_double_up_to_max)
{
	cbc_retry_options o;
	/* base 100, max 1000: caps 100 200 400 800 1000 1000. */
	static const int64_t caps[] = { 100, 200, 400, 800, 1000, 1000 };
	size_t i;

	world_reset();
	o = vopts(10, 100, 1000);
	for (i = 0; i < sizeof caps / sizeof caps[0]; i++) {
		/* A draw of exactly cap gives cap; cap + 1 wraps to 0. */
		W.fallback = (uint64_t)caps[i];
		ck_assert_int_eq(cbc_retry_delay_ms(&o, (int)i + 1), caps[i]);
		W.fallback = (uint64_t)caps[i] + 1;
		ck_assert_int_eq(cbc_retry_delay_ms(&o, (int)i + 1), 0);
	}
	/* Far retries stay at the cap (no overflow). */
	W.fallback = UINT64_MAX;
	ck_assert_int_le(cbc_retry_delay_ms(&o, 1000), 1000);
	ck_assert_int_ge(cbc_retry_delay_ms(&o, 1000), 0);
	o.base_ms = CBC_RETRY_DELAY_MAX_MS;
	o.max_ms = CBC_RETRY_DELAY_MAX_MS;
	W.fallback = (uint64_t)CBC_RETRY_DELAY_MAX_MS;
	ck_assert_int_eq(cbc_retry_delay_ms(&o, CBC_RETRY_ATTEMPTS_MAX), CBC_RETRY_DELAY_MAX_MS);
	/* No retry before the first. */
	ck_assert_int_eq(cbc_retry_delay_ms(&o, 0), 0);
}
END_TEST

START_TEST(backoff_full_jitter_spans_zero_to_cap)
{
	cbc_retry_options o;
	int retry, i;

	world_reset();
	o = vopts(10, 50, 600);
	o.rand = lcg_rand;
	for (retry = 1; retry <= 6; retry++) {
		int64_t cap = 50 << (retry - 1) < 600 ? 50 << (retry - 1) : 600;
		int64_t lo = cap, hi = 0;

		for (i = 0; i < 2000; i++) {
			int64_t d = cbc_retry_delay_ms(&o, retry);

			ck_assert_int_ge(d, 0);
			ck_assert_int_le(d, cap);
			lo = d < lo ? d : lo;
			hi = d > hi ? d : hi;
		}
		/* Full jitter: the draws cover the whole range, not just the cap. */
		ck_assert_int_le(lo, cap / 10);
		ck_assert_int_ge(hi, cap - cap / 10);
	}
}
END_TEST

START_TEST(execute_sleeps_the_drawn_delays)
{
	cbc_retry_options o;
	cbc_retry_result res;
	cbc_error err;
	int i;

	world_reset();
	W.results[0] = 7;
	W.nresults = 1;
	/* base 100, max 700: caps 100 200 400 700; 799 % 701 = 98. */
	W.script[0] = 100;
	W.script[1] = 200;
	W.script[2] = 400;
	W.script[3] = 799;
	W.nscript = 4;
	o = vopts(5, 100, 700);
	ck_assert_int_eq(cbc_retry_execute(NULL, &o, attempt, NULL, &res, &err), CBC_OK);
	ck_assert(!res.succeeded);
	ck_assert_int_eq(res.result, 7);
	ck_assert_int_eq(res.attempts, 5);
	ck_assert_int_eq(W.calls, 5);
	ck_assert_int_eq(W.nslept, 4);
	{
		static const int64_t want[] = { 100, 200, 400, 98 };

		for (i = 0; i < 4; i++) {
			ck_assert_int_eq(W.slept[i], want[i]);
			ck_assert_int_eq(W.retry_delays[i], want[i]);
		}
	}
	/* Each attempt started after the previous sleep (virtual time). */
	ck_assert_int_eq(W.starts[4] - W.starts[0], 100 + 200 + 400 + 98);
}
END_TEST

/* ---------- retry_on, deadline, hooks ---------- */

START_TEST(retry_on_false_stops)
{
	cbc_retry_options o;
	cbc_retry_result res;
	cbc_error err;

	world_reset();
	W.results[0] = 5;
	W.results[1] = 9;
	W.nresults = 2;
	W.stop_result = 9;
	o = vopts(10, 10, 10);
	ck_assert_int_eq(cbc_retry_execute(NULL, &o, attempt, NULL, &res, &err), CBC_OK);
	ck_assert_int_eq(W.calls, 2);
	ck_assert_int_eq(res.attempts, 2);
	ck_assert_int_eq(res.result, 9);
	ck_assert(!res.succeeded);
	ck_assert_int_eq(W.nslept, 1);
	ck_assert_str_eq(W.log, "failure1:5 retry1 failure2:9");
}
END_TEST

START_TEST(deadline_is_passed_and_enforced)
{
	cbc_retry_options o;
	cbc_retry_result res;
	cbc_error err;

	/* No timeout: no deadline. */
	world_reset();
	W.results[0] = 0;
	W.nresults = 1;
	o = vopts(3, 10, 10);
	ck_assert_int_eq(cbc_retry_execute(NULL, &o, attempt, NULL, &res, &err), CBC_OK);
	ck_assert_int_eq(W.deadlines[0], CBC_RETRY_NO_DEADLINE);
	ck_assert(res.succeeded);

	/* timeout 250: each attempt gets its own start + 250. */
	world_reset();
	W.results[0] = 1;
	W.results[1] = 0;
	W.nresults = 2;
	W.fallback = 10;
	o = vopts(3, 10, 10);
	o.timeout_ms = 250;
	ck_assert_int_eq(cbc_retry_execute(NULL, &o, attempt, NULL, &res, &err), CBC_OK);
	ck_assert_int_eq(W.calls, 2);
	ck_assert_int_eq(W.deadlines[0], VSTART + 250);
	ck_assert_int_eq(W.deadlines[1], W.starts[1] + 250);
	ck_assert_int_eq(W.starts[1], VSTART + 10);

	/* An attempt returning 0 at its deadline is a timed-out failure. */
	world_reset();
	W.results[0] = 0;
	W.nresults = 1;
	W.takes_ms = 250;
	o = vopts(2, 10, 10);
	o.timeout_ms = 250;
	ck_assert_int_eq(cbc_retry_execute(NULL, &o, attempt, NULL, &res, &err), CBC_ETIMEOUT);
	ck_assert_ptr_nonnull(strstr(err.message, "timeout_ms"));
	ck_assert(res.timed_out);
	ck_assert(!res.succeeded);
	ck_assert_int_eq(res.outcome, CBC_OUTCOME_FAILURE);
	ck_assert_int_eq(res.attempts, 2);
	ck_assert_str_eq(W.log, "timeout1 failure1:0 retry1 timeout2 failure2:0");

	/* Just inside the deadline is not a timeout. */
	world_reset();
	W.results[0] = 0;
	W.nresults = 1;
	W.takes_ms = 249;
	ck_assert_int_eq(cbc_retry_execute(NULL, &o, attempt, NULL, &res, &err), CBC_OK);
	ck_assert(res.succeeded);
	ck_assert_int_eq(res.attempts, 1);
}
END_TEST

START_TEST(hooks_called_in_order)
{
	cbc_retry_options o;
	cbc_retry_result res;
	cbc_error err;
	cbc_store *store = cbc_store_new_local(0, &err);
	cbc_breaker *b;
	cbc_breaker_options bo;

	ck_assert_ptr_nonnull(store);
	cbc_breaker_options_init(&bo);
	bo.name = "hooks";
	bo.failure_threshold = 10;
	bo.store = store;
	bo.clock = breaker_vclock;
	b = cbc_breaker_new(&bo, &err);
	ck_assert_ptr_nonnull(b);

	world_reset();
	W.results[0] = 3;
	W.results[1] = 4;
	W.results[2] = 0;
	W.nresults = 3;
	W.fallback = 5;
	o = vopts(5, 10, 10);
	o.timeout_ms = 100;
	W.takes_ms = 0;
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, &res, &err), CBC_OK);
	ck_assert(res.succeeded);
	ck_assert_int_eq(res.attempts, 3);
	ck_assert_str_eq(W.log, "failure1:3 retry1 failure2:4 retry2");

	/* Every attempt was reported: two failures then a success resets. */
	{
		cbc_snapshot snap;

		ck_assert_int_eq(cbc_store_get(store, "hooks", NULL, &snap, &err), CBC_OK);
		ck_assert_int_eq(snap.state, CBC_STATE_CLOSED);
		ck_assert_int_eq(snap.failure_count, 0);
	}
	world_reset();
	W.results[0] = 3;
	W.nresults = 1;
	o = vopts(3, 10, 10);
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, &res, &err), CBC_OK);
	{
		cbc_snapshot snap;

		ck_assert_int_eq(cbc_store_get(store, "hooks", NULL, &snap, &err), CBC_OK);
		ck_assert_int_eq(snap.failure_count, 3);
	}
	cbc_breaker_free(b);
	cbc_store_free(store);
}
END_TEST

START_TEST(breaker_classifier_judges_results)
{
	cbc_retry_options o;
	cbc_retry_result res;
	cbc_error err;
	cbc_store *store = cbc_store_new_local(0, &err);
	cbc_breaker *b = vbreaker(store);

	world_reset();
	W.results[0] = 404; /* the classifier's success */
	W.nresults = 1;
	o = vopts(3, 10, 10);
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, &res, &err), CBC_OK);
	ck_assert(res.succeeded);
	ck_assert_int_eq(res.result, 404);
	ck_assert_int_eq(res.attempts, 1);
	ck_assert_str_eq(W.log, "");
	cbc_breaker_free(b);
	cbc_store_free(store);
}
END_TEST

/* ---------- the circuit ---------- */

START_TEST(open_circuit_stops_retries_at_once)
{
	cbc_retry_options o;
	cbc_retry_result res;
	cbc_error err;
	cbc_store *store = cbc_store_new_local(0, &err);
	cbc_breaker *b;
	cbc_snapshot snap;

	ck_assert_ptr_nonnull(store);
	b = vbreaker(store);
	world_reset();
	W.results[0] = 500;
	W.nresults = 1;
	W.fallback = 1;
	o = vopts(10, 1, 1);
	/* Two failures trip it; the third attempt is refused. */
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, &res, &err), CBC_EOPEN);
	ck_assert_int_eq(W.calls, 2);
	ck_assert_int_eq(res.attempts, 2);
	ck_assert_int_eq(W.opens, 1);
	ck_assert_int_gt(res.retry_after_ms, 0);
	ck_assert_int_le(res.retry_after_ms, 1000);
	ck_assert_str_eq(W.log, "failure1:500 retry1 open failure2:500");
	ck_assert_int_eq(cbc_store_get(store, "retry-test", NULL, &snap, &err), CBC_OK);
	ck_assert_int_eq(snap.state, CBC_STATE_OPEN);

	/* Already open: refused before any attempt, the hook says how long. */
	world_reset();
	W.results[0] = 0;
	W.nresults = 1;
	W.now = VSTART + 100;
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, &res, &err), CBC_EOPEN);
	ck_assert_int_eq(W.calls, 0);
	ck_assert_int_eq(res.attempts, 0);
	ck_assert_int_eq(W.opens, 1);
	ck_assert_int_gt(W.open_retry_after, 0);
	ck_assert_int_eq(W.open_retry_after, res.retry_after_ms);
	ck_assert_int_eq(W.nslept, 0);
	cbc_breaker_free(b);
	cbc_store_free(store);
}
END_TEST

/* Trip the circuit of b at VSTART (two failures, no retry). */
static void
trip(cbc_breaker *b)
{
	cbc_retry_options o;
	cbc_error err;

	world_reset();
	W.results[0] = 500;
	W.nresults = 1;
	o = vopts(1, 1, 1);
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, NULL, &err), CBC_OK);
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, NULL, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
}

START_TEST(half_open_trial_is_counted)
{
	cbc_retry_options o;
	cbc_retry_result res;
	cbc_error err;
	cbc_store *store = cbc_store_new_local(0, &err);
	cbc_breaker *b = vbreaker(store);
	cbc_snapshot snap;

	/* A successful trial closes it: half_open, then closed. */
	trip(b);
	world_reset();
	W.now = VSTART + 1001;
	W.results[0] = 0;
	W.nresults = 1;
	o = vopts(3, 1, 1);
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, &res, &err), CBC_OK);
	ck_assert(res.succeeded);
	ck_assert_int_eq(W.calls, 1);
	ck_assert_str_eq(W.log, "half_open closed");
	ck_assert_int_eq(cbc_store_get(store, "retry-test", NULL, &snap, &err), CBC_OK);
	ck_assert_int_eq(snap.state, CBC_STATE_CLOSED);

	/* A failed trial reopens it and ends the retries: one call. */
	trip(b);
	world_reset();
	W.now = VSTART + 1001;
	W.results[0] = 500;
	W.nresults = 1;
	W.fallback = 1;
	o = vopts(5, 1, 1);
	ck_assert_int_eq(cbc_retry_execute(b, &o, attempt, NULL, &res, &err), CBC_EOPEN);
	ck_assert_int_eq(W.calls, 1);
	ck_assert_int_eq(W.opens, 1);
	ck_assert_str_eq(W.log, "half_open open failure1:500");
	ck_assert_int_eq(cbc_store_get(store, "retry-test", NULL, &snap, &err), CBC_OK);
	ck_assert_int_eq(snap.state, CBC_STATE_OPEN);
	ck_assert_int_eq(snap.opened_at, VSTART + 1001);
	cbc_breaker_free(b);
	cbc_store_free(store);
}
END_TEST

static Suite *
retry_suite(void)
{
	Suite *s = suite_create("libcbclient retries (virtual time)");
	TCase *tc = tcase_create("retry");

	tcase_add_test(tc, options_defaults_and_errors_name_the_field);
	tcase_add_test(tc, backoff_caps_double_up_to_max);
	tcase_add_test(tc, backoff_full_jitter_spans_zero_to_cap);
	tcase_add_test(tc, execute_sleeps_the_drawn_delays);
	tcase_add_test(tc, retry_on_false_stops);
	tcase_add_test(tc, deadline_is_passed_and_enforced);
	tcase_add_test(tc, hooks_called_in_order);
	tcase_add_test(tc, breaker_classifier_judges_results);
	tcase_add_test(tc, open_circuit_stops_retries_at_once);
	tcase_add_test(tc, half_open_trial_is_counted);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return check_run(retry_suite(), NULL);
}
