/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_window.c — unit tests of protocol 2's trip rules in virtual time:
 * the sliding windows (count and time, against a naive recount of random
 * sequences), the rate rule's exact opening points, slow calls,
 * min_reporters and break_backoff.
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check-run.h"

#include "breaker.h"
#include "window.h"

#define T0 INT64_C(1700000000000)

static cb_window *
window_new(cb_window_kind kind, int64_t size)
{
	cb_window *w = malloc(window_bytes(kind, size));

	ck_assert_ptr_nonnull(w);
	window_init(w, kind, size);
	return w;
}

START_TEST(count_window_keeps_the_last_n)
{
	cb_window *w = window_new(CB_WINDOW_COUNT, 3);
	cb_window_counts n;

	window_add(w, true, false, T0);
	window_add(w, true, true, T0);
	window_add(w, false, false, T0);
	n = window_counts(w, T0);
	ck_assert_uint_eq(n.calls, 3);
	ck_assert_uint_eq(n.failures, 2);
	ck_assert_uint_eq(n.slow, 1);
	/* The 4th call pushes out the 1st (a failure). */
	window_add(w, false, false, T0);
	n = window_counts(w, T0);
	ck_assert_uint_eq(n.calls, 3);
	ck_assert_uint_eq(n.failures, 1);
	window_reset(w);
	n = window_counts(w, T0);
	ck_assert_uint_eq(n.calls, 0);
	free(w);
}
END_TEST

START_TEST(count_window_memory)
{
	/* 100 calls: 25 bytes of outcome bits beyond the header. */
	ck_assert_uint_le(window_bytes(CB_WINDOW_COUNT, 100) - sizeof(cb_window), 32);
	/* A time window: at most 12 bytes a bucket. */
	ck_assert_uint_le(window_bytes(CB_WINDOW_TIME, 60000) - sizeof(cb_window), 60 * 12);
}
END_TEST

START_TEST(time_window_buckets_expire)
{
	cb_window *w = window_new(CB_WINDOW_TIME, 3000); /* 3 buckets */
	cb_window_counts n;

	window_add(w, true, false, T0);
	window_add(w, false, false, T0 + 999);
	window_add(w, true, false, T0 + 1500);
	n = window_counts(w, T0 + 2999);
	ck_assert_uint_eq(n.calls, 3);
	ck_assert_uint_eq(n.failures, 2);
	/* T0's second leaves the window 3 s later. */
	n = window_counts(w, T0 + 3000);
	ck_assert_uint_eq(n.calls, 1);
	ck_assert_uint_eq(n.failures, 1);
	/* A long silence empties it. */
	n = window_counts(w, T0 + 3600000);
	ck_assert_uint_eq(n.calls, 0);
	/* A clock behind the newest bucket counts in the newest bucket. */
	window_add(w, true, false, T0 + 3600000);
	window_add(w, true, false, T0);
	n = window_counts(w, T0 + 3600000);
	ck_assert_uint_eq(n.calls, 2);
	free(w);
}
END_TEST

/* For random sequences, the windowed counters equal a naive recount of
 * the last N outcomes (count) or of the last N seconds (time). */
START_TEST(windows_match_a_naive_recount)
{
	enum { CALLS = 5000 };
	static int64_t at[CALLS];
	static bool fail[CALLS], slow[CALLS];
	unsigned seed = 12345;

	for (int round = 0; round < 20; round++) {
		int64_t size = 1 + rand_r(&seed) % 50;
		cb_window_kind kind = round % 2 ? CB_WINDOW_TIME : CB_WINDOW_COUNT;
		int64_t wsize = kind == CB_WINDOW_TIME ? size * 1000 : size;
		cb_window *w = window_new(kind, wsize);
		int64_t t = T0;

		for (int i = 0; i < CALLS; i++) {
			uint32_t calls = 0, failures = 0, slows = 0;
			cb_window_counts n;

			t += rand_r(&seed) % 700;
			at[i] = t;
			fail[i] = rand_r(&seed) % 3 == 0;
			slow[i] = rand_r(&seed) % 5 == 0;
			window_add(w, fail[i], slow[i], t);
			n = window_counts(w, t);
			for (int k = i; k >= 0; k--) {
				if (kind == CB_WINDOW_COUNT && i - k >= size)
					break;
				if (kind == CB_WINDOW_TIME && t / 1000 - at[k] / 1000 >= size)
					break;
				calls++;
				failures += fail[k];
				slows += slow[k];
			}
			ck_assert_uint_eq(n.calls, calls);
			ck_assert_uint_eq(n.failures, failures);
			ck_assert_uint_eq(n.slow, slows);
		}
		free(w);
	}
}
END_TEST

static cb_policy
rate_policy(void)
{
	cb_policy p;

	breaker_policy_default(&p);
	p.trip = CB_TRIP_RATE;
	p.window = CB_WINDOW_COUNT;
	p.window_size = 10;
	p.minimum_calls = 5;
	p.failure_rate = 50;
	p.break_ms = 1000;
	return p;
}

/* Record one outcome; returns the reason. */
static cb_reason
record(cb_snapshot *s, const cb_policy *p, cb_window *w, bool failure, bool slow, int64_t now)
{
	cb_outcome o = { .failure = failure, .slow = slow, .window = w };

	return breaker_on_outcome(s, p, now, &o);
}

START_TEST(rate_opens_exactly_at_the_rate)
{
	cb_policy p = rate_policy();
	cb_window *w = window_new(p.window, p.window_size);
	cb_snapshot s;

	breaker_snapshot_init(&s);
	/* Below minimum_calls nothing opens, even at 100 %. */
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(record(&s, &p, w, true, false, T0), CB_REASON_NONE);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	/* The 5th call: 5 of 5. */
	ck_assert_int_eq(record(&s, &p, w, true, false, T0), CB_REASON_FAILURE_RATE);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, T0);

	/* Exactly at the rate: 3 failures of 6 = 50 % opens; 2 of 5 does not. */
	breaker_snapshot_init(&s);
	window_reset(w);
	record(&s, &p, w, false, false, T0);
	record(&s, &p, w, false, false, T0);
	record(&s, &p, w, true, false, T0);
	record(&s, &p, w, false, false, T0);
	ck_assert_int_eq(record(&s, &p, w, true, false, T0), CB_REASON_NONE); /* 2/5 */
	ck_assert_int_eq(record(&s, &p, w, true, false, T0), CB_REASON_FAILURE_RATE); /* 3/6 */
	free(w);
}
END_TEST

START_TEST(slow_calls_alone_open_and_fail_trials)
{
	cb_policy p = rate_policy();
	cb_window *w = window_new(p.window, p.window_size);
	cb_snapshot s;

	p.slow_call_ms = 100;
	p.slow_call_rate = 60;
	breaker_snapshot_init(&s);
	/* Successes, but slow: 3 of 5 slow = 60 %. */
	record(&s, &p, w, false, true, T0);
	record(&s, &p, w, false, false, T0);
	record(&s, &p, w, false, true, T0);
	ck_assert_int_eq(record(&s, &p, w, false, false, T0), CB_REASON_NONE);
	ck_assert_int_eq(record(&s, &p, w, false, true, T0), CB_REASON_FAILURE_RATE);
	/* In half_open a slow call is a failed trial. */
	breaker_force(&s, CB_STATE_HALF_OPEN, T0 + 2000);
	ck_assert_int_eq(record(&s, &p, w, false, true, T0 + 2001), CB_REASON_TRIAL_FAILED);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	/* Without a slow rule, slowness changes nothing. */
	p.slow_call_ms = 0;
	breaker_force(&s, CB_STATE_HALF_OPEN, T0 + 3000);
	ck_assert_int_eq(record(&s, &p, w, false, true, T0 + 3001), CB_REASON_NONE);
	ck_assert_int_eq(s.success_count, 1);
	free(w);
}
END_TEST

START_TEST(time_window_rate_forgets_old_failures)
{
	cb_policy p = rate_policy();
	cb_window *w;
	cb_snapshot s;

	p.window = CB_WINDOW_TIME;
	p.window_size = 2000;
	p.minimum_calls = 3;
	w = window_new(p.window, p.window_size);
	breaker_snapshot_init(&s);
	record(&s, &p, w, true, false, T0);
	record(&s, &p, w, true, false, T0 + 100);
	/* Two seconds later those failures are gone: 1 failure of 3 calls. */
	record(&s, &p, w, false, false, T0 + 2000);
	record(&s, &p, w, false, false, T0 + 2000);
	ck_assert_int_eq(record(&s, &p, w, true, false, T0 + 2500), CB_REASON_NONE);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	free(w);
}
END_TEST

START_TEST(min_reporters_gates_opening)
{
	cb_policy p;
	cb_reporters *r = malloc(breaker_reporters_bytes(2));
	cb_outcome o = { .failure = true, .reporters = r };
	cb_snapshot s;

	breaker_policy_default(&p);
	p.failure_threshold = 2;
	p.min_reporters = 2;
	p.reporter_window_ms = 1000;
	breaker_reporters_init(r, 2);
	breaker_snapshot_init(&s);
	/* One process failing alone never opens. */
	o.reporter = 11;
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(breaker_on_outcome(&s, &p, T0 + i, &o), CB_REASON_NONE);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_uint_eq(breaker_reporters_count(r, T0 + 10, 1000), 1);
	/* A second process within the window does. */
	o.reporter = 22;
	ck_assert_int_eq(breaker_on_outcome(&s, &p, T0 + 500, &o), CB_REASON_FAILURE_THRESHOLD);
	/* Reports older than the window stop counting. */
	breaker_force(&s, CB_STATE_CLOSED, T0 + 600);
	o.reporter = 11;
	breaker_on_outcome(&s, &p, T0 + 5000, &o);
	ck_assert_int_eq(breaker_on_outcome(&s, &p, T0 + 5001, &o), CB_REASON_NONE);
	ck_assert_uint_eq(breaker_reporters_count(r, T0 + 5001, 1000), 1);
	free(r);
}
END_TEST

START_TEST(break_backoff_grows_caps_and_resets)
{
	cb_policy p;
	cb_snapshot s;
	int64_t t = T0;

	breaker_policy_default(&p);
	p.failure_threshold = 1;
	p.break_ms = 1000;
	p.break_backoff = 2;
	p.break_max_ms = 3000;
	breaker_snapshot_init(&s);
	breaker_on_failure(&s, &p, t);
	ck_assert_int_eq(breaker_break_ms(&s, &p), 1000);
	/* Failed trials: 2 s, then 4 s capped at 3 s. */
	t += 1000;
	ck_assert_int_eq(breaker_on_allow(&s, &p, t), CB_REASON_BREAK_ELAPSED);
	ck_assert_int_eq(breaker_on_failure(&s, &p, t), CB_REASON_TRIAL_FAILED);
	ck_assert_int_eq(breaker_break_ms(&s, &p), 2000);
	ck_assert_int_eq(breaker_retry_after_ms(&s, &p, t + 500), 1500);
	ck_assert(!breaker_break_elapsed(&s, &p, t + 1999));
	t += 2000;
	ck_assert_int_eq(breaker_on_allow(&s, &p, t), CB_REASON_BREAK_ELAPSED);
	breaker_on_failure(&s, &p, t);
	ck_assert_int_eq(breaker_break_ms(&s, &p), 3000);
	/* A forced open does not grow it; a close resets it. */
	breaker_force(&s, CB_STATE_OPEN, t);
	ck_assert_int_eq(breaker_break_ms(&s, &p), 3000);
	t += 3000;
	breaker_on_allow(&s, &p, t);
	breaker_on_success(&s, &p, t);
	ck_assert_int_eq(breaker_on_success(&s, &p, t), CB_REASON_TRIAL_SUCCEEDED);
	ck_assert_int_eq(breaker_break_ms(&s, &p), 1000);
}
END_TEST

int
main(void)
{
	Suite *suite = suite_create("trip rules");
	TCase *tc = tcase_create("window");

	tcase_add_test(tc, count_window_keeps_the_last_n);
	tcase_add_test(tc, count_window_memory);
	tcase_add_test(tc, time_window_buckets_expire);
	tcase_add_test(tc, windows_match_a_naive_recount);
	tcase_add_test(tc, rate_opens_exactly_at_the_rate);
	tcase_add_test(tc, slow_calls_alone_open_and_fail_trials);
	tcase_add_test(tc, time_window_rate_forgets_old_failures);
	tcase_add_test(tc, min_reporters_gates_opening);
	tcase_add_test(tc, break_backoff_grows_caps_and_resets);
	suite_add_tcase(suite, tc);
	return check_run(suite, NULL);
}
