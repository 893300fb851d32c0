/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-snapshot-test.c — protocol 3's compact snapshots (§1) against a real
 * cbd: the reply budget of a record_failure, the policy only on get, with
 * "policy": true and in policy events, policy_rev kept across records and
 * renewed by a reload that changes the circuit's policy (and only then) or
 * by a new creation.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"

static cbd_harness h;
static int a = -1, b = -1;
static int reloads;

static void
start(const char *config)
{
	util_start_conn(&h, &a, config);
	b = harness_connect(&h);
	ck_assert_int_ge(b, 0);
	reloads = 0;
}

static void
teardown(void)
{
	util_close(&b);
	util_stop_conn(&h, &a);
}

/* Replace the config file with text and reload; returns once cbd has. */
static void
reload(const char *text)
{
	FILE *f = fopen(h.config_path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(a, "reloads", ++reloads));
}

/* name's policy_rev, as get tells it. */
static int64_t
rev_of(const char *name)
{
	json_t *r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"%s\"}", name);
	int64_t rev = util_int(r, "snapshot.policy_rev");

	ck_assert_int_gt(rev, 0);
	json_decref(r);
	return rev;
}

/* The budget of §1: the reply line (without its LF) to a record_failure
 * without id, on a closed consecutive circuit with a 16-byte name and no
 * hold, is at most 384 bytes, with every totals member present. */
START_TEST(test_record_failure_reply_budget)
{
	static const char request[] =
	    "{\"op\":\"record_failure\",\"name\":\"payments-eu-west1\"}\n";
	char line[4096];
	json_t *r;

	start("");
	/* Large counts: the longest this circuit's reply gets. */
	for (int i = 0; i < 3; i++) {
		ck_assert(util_write_all(a, request, sizeof request - 1));
		ck_assert(util_read_line(a, line, sizeof line));
	}
	r = json_loads(line, 0, NULL);
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(util_str(r, "snapshot.name"), "payments-eu-west1");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
	ck_assert_ptr_null(util_get(r, "snapshot.policy"));
	ck_assert_int_gt(util_int(r, "snapshot.policy_rev"), 0);
	ck_assert_int_eq(util_int(r, "snapshot.totals.failures"), 3);
	for (const char *const *k = (const char *const[]){ "successes", "failures", "ignored",
		 "slow", "rejected", NULL };
	     *k != NULL; k++) {
		char path[64];

		snprintf(path, sizeof path, "snapshot.totals.%s", *k);
		ck_assert_ptr_nonnull(util_get(r, path));
	}
	printf("record_failure reply: %zu bytes (budget 384)\n", strlen(line));
	ck_assert_uint_le(strlen(line), 384);
	json_decref(r);
}
END_TEST

/* get carries the policy unless told not to; every other op only with
 * "policy": true; a policy that is not a boolean is refused. */
START_TEST(test_policy_where_asked)
{
	json_t *r;

	start("");
	r = util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"p\",\"ctx\":{\"break_ms\":700}}");
	ck_assert_ptr_null(util_get(r, "snapshot.policy"));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"p\",\"policy\":true}");
	ck_assert_int_eq(util_int(r, "snapshot.policy.break_ms"), 700);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.break_ms"), "client");
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"p\"}");
	ck_assert_int_eq(util_int(r, "snapshot.policy.break_ms"), 700);
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"p\",\"policy\":false}");
	ck_assert_ptr_null(util_get(r, "snapshot.policy"));
	ck_assert_int_gt(util_int(r, "snapshot.policy_rev"), 0);
	json_decref(r);
	/* null reads as absent, as every member does. */
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"p\",\"policy\":null}");
	ck_assert_ptr_nonnull(util_get(r, "snapshot.policy"));
	json_decref(r);
	r = util_call(a, "{\"op\":\"get\",\"name\":\"p\",\"policy\":1}");
	ck_assert_str_eq(util_code(r), "bad_request");
	ck_assert_ptr_nonnull(strstr(util_str(r, "error.message"), "policy"));
	json_decref(r);
	r = util_call(a, "{\"op\":\"list\",\"policy\":\"yes\"}");
	ck_assert_str_eq(util_code(r), "bad_request");
	json_decref(r);
	/* list and watch: compact, or with the policy when asked. */
	r = util_call_ok(a, "{\"op\":\"list\"}");
	ck_assert_str_eq(util_str(r, "circuits.0.name"), "p");
	ck_assert_ptr_null(util_get(r, "circuits.0.policy"));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"list\",\"policy\":true}");
	ck_assert_int_eq(util_int(r, "circuits.0.policy.break_ms"), 700);
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"watch\",\"names\":[\"p\"]}");
	ck_assert_ptr_null(util_get(r, "snapshots.0.policy"));
	ck_assert_int_gt(util_int(r, "snapshots.0.policy_rev"), 0);
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"watch\",\"names\":[\"p\"],\"policy\":true}");
	ck_assert_int_eq(util_int(r, "snapshots.0.policy.break_ms"), 700);
	json_decref(r);
	/* Change events stay compact. */
	for (int i = 0; i < 3; i++)
		json_decref(util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"p\"}"));
	r = util_next_event(b, "change", "p", "closed", "open");
	ck_assert_ptr_null(util_get(r, "snapshot.policy"));
	json_decref(r);
}
END_TEST

/* policy_rev: the same across records and state changes; a reload that
 * changes the circuit's policy renews it (and sends watchers a policy
 * event), one that changes another circuit's does not; a circuit deleted
 * and created again gets a new one. */
START_TEST(test_policy_rev)
{
	int64_t p0, q0, p1;
	json_t *r;

	start("[circuit \"p\"]\nbreak_ms = 1000\n");
	json_decref(util_call_ok(a, "{\"op\":\"record_success\",\"name\":\"p\"}"));
	json_decref(util_call_ok(a, "{\"op\":\"record_success\",\"name\":\"q\"}"));
	p0 = rev_of("p");
	q0 = rev_of("q");
	ck_assert_int_ne(p0, q0);
	for (int i = 0; i < 5; i++) {
		r = util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"p\"}");
		ck_assert_int_eq(util_int(r, "snapshot.policy_rev"), p0);
		json_decref(r);
	}
	ck_assert_int_eq(rev_of("p"), p0);
	json_decref(util_call_ok(b, "{\"op\":\"watch\",\"names\":[\"p\",\"q\"]}"));
	/* p's section changes: p gets a new rev and its watcher the event. */
	reload("[circuit \"p\"]\nbreak_ms = 2000\n");
	r = util_next_event(b, "policy", "p", NULL, "open");
	ck_assert_int_eq(util_int(r, "snapshot.policy.break_ms"), 2000);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.break_ms"), "config");
	p1 = util_int(r, "snapshot.policy_rev");
	ck_assert_int_ne(p1, p0);
	json_decref(r);
	ck_assert_int_eq(rev_of("p"), p1);
	ck_assert_int_eq(rev_of("q"), q0);
	/* A reload that changes nothing of p's or q's: no event, no new rev.
	 * (The next line on b is the reply to this unwatch, not an event.) */
	reload("[circuit \"p\"]\nbreak_ms = 2000\n[circuit \"other\"]\nbreak_ms = 5\n");
	r = util_call_ok(b, "{\"op\":\"unwatch\",\"names\":[\"q\"]}");
	json_decref(r);
	ck_assert_int_eq(rev_of("p"), p1);
	ck_assert_int_eq(rev_of("q"), q0);
	/* The same policy from another source is a change (its source). */
	reload("[defaults]\nbreak_ms = 2000\n");
	r = util_next_event(b, "policy", "p", NULL, NULL);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.break_ms"), "defaults");
	ck_assert_int_ne(util_int(r, "snapshot.policy_rev"), p1);
	json_decref(r);
	/* Deleted and created again: a new rev. */
	q0 = rev_of("q");
	json_decref(util_call_ok(a, "{\"op\":\"delete\",\"name\":\"q\"}"));
	json_decref(util_call_ok(a, "{\"op\":\"record_success\",\"name\":\"q\"}"));
	ck_assert_int_ne(rev_of("q"), q0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("snapshot");
	TCase *tc = tcase_create("compact");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_record_failure_reply_budget);
	tcase_add_test(tc, test_policy_where_asked);
	tcase_add_test(tc, test_policy_rev);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
