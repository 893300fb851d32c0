/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_breaker.c — unit tests for the pure state machine, one case per
 * rule of proto/PROTOCOL.md §7, "Snapshots, lifetime and the state
 * machine".
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check-run.h"

#include "breaker.h"

static cb_policy
policy(void)
{
	cb_policy p;

	breaker_policy_default(&p);
	p.failure_threshold = 3;
	p.success_threshold = 2;
	p.break_ms = 1000;
	return p;
}

static cb_snapshot
open_at(int64_t t)
{
	cb_snapshot s;

	breaker_snapshot_init(&s);
	s.state = CB_STATE_OPEN;
	s.failure_count = 3;
	s.last_failure_at = t;
	s.opened_at = t;
	return s;
}

START_TEST(defaults_match_spec)
{
	cb_policy p;

	breaker_policy_default(&p);
	ck_assert_int_eq(p.failure_threshold, 5);
	ck_assert_int_eq(p.success_threshold, 2);
	ck_assert_int_eq(p.break_ms, 30000);
	ck_assert_int_eq(p.half_open_max, 1);
	ck_assert_int_eq(p.slot_ttl_ms, p.break_ms);
	ck_assert_int_eq(p.max_gap_ms, 0);
	ck_assert_int_eq(p.trip, CB_TRIP_CONSECUTIVE);
}
END_TEST

START_TEST(initial_snapshot)
{
	cb_snapshot s;

	breaker_snapshot_init(&s);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 0);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.last_failure_at, CB_TIME_NONE);
	ck_assert_int_eq(s.opened_at, CB_TIME_NONE);
	ck_assert(breaker_snapshot_is_initial(&s));
	s.last_failure_at = 0;
	ck_assert(!breaker_snapshot_is_initial(&s));
}
END_TEST

START_TEST(closed_failures_trip_at_threshold)
{
	cb_policy p = policy();
	cb_snapshot s;

	breaker_snapshot_init(&s);
	ck_assert_int_eq(breaker_on_failure(&s, &p, 10), CB_REASON_NONE);
	ck_assert_int_eq(breaker_on_failure(&s, &p, 20), CB_REASON_NONE);
	ck_assert_int_eq(s.failure_count, 2);
	ck_assert_int_eq(s.last_failure_at, 20);
	s.success_count = 7; /* tripping clears it */
	ck_assert_int_eq(breaker_on_failure(&s, &p, 30), CB_REASON_FAILURE_THRESHOLD);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, 30);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.failure_count, 3);
}
END_TEST

START_TEST(threshold_one_trips_at_once)
{
	cb_policy p = policy();
	cb_snapshot s;

	p.failure_threshold = 1;
	breaker_snapshot_init(&s);
	ck_assert_int_eq(breaker_on_failure(&s, &p, 0), CB_REASON_FAILURE_THRESHOLD);
	ck_assert_int_eq(s.opened_at, 0);
}
END_TEST

START_TEST(closed_success_resets)
{
	cb_policy p = policy();
	cb_snapshot s;

	breaker_snapshot_init(&s);
	breaker_on_failure(&s, &p, 10);
	ck_assert_int_eq(breaker_on_success(&s, &p, 11), CB_REASON_NONE);
	ck_assert_int_eq(s.failure_count, 0);
	ck_assert_int_eq(s.last_failure_at, 10);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
}
END_TEST

START_TEST(half_open_success_closes_at_threshold)
{
	cb_policy p = policy();
	cb_snapshot s = open_at(100);

	breaker_force(&s, CB_STATE_HALF_OPEN, 1100);
	ck_assert_int_eq(breaker_on_success(&s, &p, 1101), CB_REASON_NONE);
	ck_assert_int_eq(s.success_count, 1);
	ck_assert_int_eq(breaker_on_success(&s, &p, 1102), CB_REASON_TRIAL_SUCCEEDED);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 0);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.opened_at, CB_TIME_NONE);
	ck_assert_int_eq(s.last_failure_at, 100);
}
END_TEST

START_TEST(half_open_failure_reopens)
{
	cb_policy p = policy();
	cb_snapshot s = open_at(100);

	breaker_force(&s, CB_STATE_HALF_OPEN, 1100);
	breaker_on_success(&s, &p, 1101);
	ck_assert_int_eq(breaker_on_failure(&s, &p, 1200), CB_REASON_TRIAL_FAILED);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, 1200);
	ck_assert_int_eq(s.last_failure_at, 1200);
	ck_assert_int_eq(s.success_count, 0);
}
END_TEST

START_TEST(open_stragglers)
{
	cb_policy p = policy();
	cb_snapshot s = open_at(100);

	ck_assert_int_eq(breaker_on_success(&s, &p, 150), CB_REASON_NONE);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.failure_count, 3);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(breaker_on_failure(&s, &p, 900), CB_REASON_NONE);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, 100);
	ck_assert_int_eq(s.last_failure_at, 900);
	ck_assert_int_eq(s.failure_count, 3);
}
END_TEST

START_TEST(chain_continues_rules)
{
	cb_policy p = policy();
	cb_snapshot s;

	breaker_snapshot_init(&s);
	/* No previous failure: continues whatever the gap. */
	p.max_gap_ms = 100;
	ck_assert(breaker_chain_continues(&s, &p, 1000000));
	s.last_failure_at = 1000;
	ck_assert(breaker_chain_continues(&s, &p, 1100));
	ck_assert(!breaker_chain_continues(&s, &p, 1101));
	/* Unset max gap: always continues. */
	p.max_gap_ms = 0;
	ck_assert(breaker_chain_continues(&s, &p, INT64_C(1) << 53));
}
END_TEST

START_TEST(broken_chain_restarts_at_one)
{
	cb_policy p = policy();
	cb_snapshot s;

	p.max_gap_ms = 100;
	breaker_snapshot_init(&s);
	breaker_on_failure(&s, &p, 0);
	breaker_on_failure(&s, &p, 100);
	ck_assert_int_eq(s.failure_count, 2);
	ck_assert_int_eq(breaker_on_failure(&s, &p, 201), CB_REASON_NONE);
	ck_assert_int_eq(s.failure_count, 1);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
}
END_TEST

START_TEST(forced_states)
{
	cb_snapshot s = open_at(100);

	s.success_count = 4;
	breaker_force(&s, CB_STATE_HALF_OPEN, 200);
	ck_assert_int_eq(s.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.opened_at, 100);
	ck_assert_int_eq(s.failure_count, 3);
	breaker_force(&s, CB_STATE_OPEN, 300);
	ck_assert_int_eq(s.opened_at, 300);
	ck_assert_int_eq(s.failure_count, 3);
	breaker_force(&s, CB_STATE_CLOSED, 400);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 0);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.opened_at, CB_TIME_NONE);
	ck_assert_int_eq(s.last_failure_at, 100);
}
END_TEST

START_TEST(break_elapsed_and_retry_after)
{
	cb_policy p = policy();
	cb_snapshot s = open_at(1000);

	ck_assert(!breaker_break_elapsed(&s, &p, 1999));
	ck_assert_int_eq(breaker_retry_after_ms(&s, &p, 1000), 1000);
	ck_assert_int_eq(breaker_retry_after_ms(&s, &p, 1999), 1);
	ck_assert(breaker_break_elapsed(&s, &p, 2000));
	ck_assert_int_eq(breaker_retry_after_ms(&s, &p, 2000), 0);
	ck_assert_int_eq(breaker_retry_after_ms(&s, &p, 5000), 0);
	/* Not open: never elapsed, retry 0. */
	breaker_force(&s, CB_STATE_HALF_OPEN, 3000);
	ck_assert(!breaker_break_elapsed(&s, &p, 9000));
	ck_assert_int_eq(breaker_retry_after_ms(&s, &p, 1500), 0);
	breaker_snapshot_init(&s);
	ck_assert_int_eq(breaker_retry_after_ms(&s, &p, 1500), 0);
}
END_TEST

START_TEST(allow_moves_to_half_open_once)
{
	cb_policy p = policy();
	cb_snapshot s = open_at(1000);

	ck_assert_int_eq(breaker_on_allow(&s, &p, 1999), CB_REASON_NONE);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(breaker_on_allow(&s, &p, 2000), CB_REASON_BREAK_ELAPSED);
	ck_assert_int_eq(s.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(breaker_on_allow(&s, &p, 2001), CB_REASON_NONE);
	ck_assert_int_eq(s.state, CB_STATE_HALF_OPEN);
}
END_TEST

START_TEST(state_names_round_trip)
{
	cb_state st;

	for (int i = 0; i < CB_STATE_COUNT; i++) {
		const char *name = breaker_state_name((cb_state)i);

		ck_assert(breaker_state_parse(name, strlen(name), &st));
		ck_assert_int_eq(st, i);
	}
	ck_assert_str_eq(breaker_state_name(CB_STATE_HALF_OPEN), "half_open");
	ck_assert(!breaker_state_parse("half-open", 9, &st));
	ck_assert(!breaker_state_parse("open", 3, &st));
	ck_assert(!breaker_state_parse("OPEN", 4, &st));
	ck_assert_str_eq(breaker_state_name((cb_state)42), "unknown");
}
END_TEST

START_TEST(every_reason_has_text)
{
	for (int r = CB_REASON_NONE; r <= CB_REASON_CAS; r++)
		ck_assert_str_ne(breaker_reason_text((cb_reason)r), "unknown");
}
END_TEST

int
main(void)
{
	Suite *suite = suite_create("breaker");
	TCase *tc = tcase_create("rules");

	tcase_add_test(tc, defaults_match_spec);
	tcase_add_test(tc, initial_snapshot);
	tcase_add_test(tc, closed_failures_trip_at_threshold);
	tcase_add_test(tc, threshold_one_trips_at_once);
	tcase_add_test(tc, closed_success_resets);
	tcase_add_test(tc, half_open_success_closes_at_threshold);
	tcase_add_test(tc, half_open_failure_reopens);
	tcase_add_test(tc, open_stragglers);
	tcase_add_test(tc, chain_continues_rules);
	tcase_add_test(tc, broken_chain_restarts_at_one);
	tcase_add_test(tc, forced_states);
	tcase_add_test(tc, break_elapsed_and_retry_after);
	tcase_add_test(tc, allow_moves_to_half_open_once);
	tcase_add_test(tc, state_names_round_trip);
	tcase_add_test(tc, every_reason_has_text);
	suite_add_tcase(suite, tc);
	return check_run(suite, NULL);
}
