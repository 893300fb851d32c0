/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-bulkhead-test.c — protocol 3's bulkhead (§2) and retry budget (§3)
 * against a real cbd: never more than max_concurrent tickets across
 * connections; a closed connection's tickets free at once and go to the
 * waiters in order; wait_ms's end answers "concurrency"; later lines of a
 * waiting connection wait behind it; a ticket's ttl frees it (on the
 * request's clock, and on cbd's for a waiter); retries past the budget
 * refused with retry_after_ms while first attempts never are; the reason
 * of every refusal; exact totals; the keys resolved like every policy key
 * and bad values refused naming the member.
 */
#include <poll.h>
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

/* Virtual time for the rules about time (in 2100: cbd's own clock never
 * ends what these take before the test does). */
#define T0 INT64_C(4102444800000)

#define CONNS 8

static cbd_harness h;
static int a = -1;
static int conns[CONNS];

static void
setup(void)
{
	for (int i = 0; i < CONNS; i++)
		conns[i] = -1;
}

static void
start(const char *config)
{
	util_start_conn(&h, &a, config);
	for (int i = 0; i < CONNS; i++) {
		conns[i] = harness_connect(&h);
		ck_assert_int_ge(conns[i], 0);
	}
}

static void
teardown(void)
{
	for (int i = 0; i < CONNS; i++)
		util_close(&conns[i]);
	util_stop_conn(&h, &a);
}

/* name's snapshot member path (an integer), as get tells it. */
static int64_t
snap_int(const char *name, const char *path)
{
	char full[128];
	json_t *r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"%s\",\"policy\":false}", name);
	int64_t v;

	snprintf(full, sizeof full, "snapshot.%s", path);
	ck_assert_msg(util_get(r, full) != NULL, "no %s", full);
	v = util_int(r, full);
	json_decref(r);
	return v;
}

/* Check name's totals: breaker refusals, concurrency refusals, granted
 * retries, budget refusals. */
static void
totals_are(const char *name, int64_t rejected, int64_t concurrency, int64_t retries,
    int64_t rejected_retry)
{
	ck_assert_int_eq(snap_int(name, "totals.rejected"), rejected);
	ck_assert_int_eq(snap_int(name, "totals.rejected_concurrency"), concurrency);
	ck_assert_int_eq(snap_int(name, "totals.retries"), retries);
	ck_assert_int_eq(snap_int(name, "totals.rejected_retry"), rejected_retry);
}

/* A refusal of allow: its state and reason. */
static void
refused(json_t *r, const char *state, const char *reason)
{
	ck_assert_msg(!util_bool(r, "allowed"), "allowed");
	ck_assert_str_eq(util_str(r, "state"), state);
	ck_assert_str_eq(util_str(r, "reason"), reason);
	ck_assert_ptr_nonnull(util_get(r, "retry_after_ms"));
	ck_assert_ptr_null(util_get(r, "permit"));
}

/* A grant with a ticket: its permit (the caller's copy). */
static char *
granted(json_t *r)
{
	ck_assert_msg(util_bool(r, "allowed"), "refused: %s",
	    util_str(r, "reason") != NULL ? util_str(r, "reason") : "?");
	ck_assert_ptr_nonnull(util_str(r, "permit"));
	ck_assert_ptr_nonnull(util_get(r, "expires_at"));
	ck_assert_ptr_null(util_get(r, "reason"));
	return strdup(util_str(r, "permit"));
}

/* Send a line without reading its reply. */
static void
send_line(int fd, const char *line)
{
	ck_assert(util_write_all(fd, line, strlen(line)));
	ck_assert(util_write_all(fd, "\n", 1));
}

/* The next reply on fd. */
static json_t *
next_reply(int fd)
{
	json_t *r = util_next_json(fd, "a reply");

	ck_assert_ptr_nonnull(r);
	ck_assert_msg(json_is_true(json_object_get(r, "ok")), "not ok: %s",
	    util_str(r, "error.message"));
	return r;
}

/* Nothing to read on fd now (a reply not yet given). Only the absence of
 * a reply cbd has had every chance to give: callers first wait for a
 * settled counter that comes after it. */
static bool
quiet(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* Never more than max_concurrent tickets across connections; refusals say
 * "concurrency" with in_flight and retry_after_ms 0; a record with the
 * permit gives one back; in_flight in snapshots; exact totals. */
START_TEST(test_never_more_than_n)
{
	char *permits[CONNS];
	json_t *r;
	int held = 0, refusals = 0;

	start("[circuit \"b\"]\nmax_concurrent = 3\n");
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < CONNS; i++) {
			r = util_call_ok(conns[i], "{\"op\":\"allow\",\"name\":\"b\"}");
			if (util_bool(r, "allowed")) {
				permits[held++] = granted(r);
			} else {
				refused(r, "closed", "concurrency");
				ck_assert_int_eq(util_int(r, "in_flight"), 3);
				ck_assert_int_eq(util_int(r, "retry_after_ms"), 0);
				refusals++;
			}
			json_decref(r);
			ck_assert_int_le(held, 3);
			ck_assert_int_eq(snap_int("b", "in_flight"), held);
		}
		ck_assert_int_eq(held, 3);
		/* Hand every ticket back: then 3 more may go. */
		for (int i = 0; i < held; i++) {
			r = util_call_ok(a,
			    "{\"op\":\"record\",\"name\":\"b\",\"outcome\":\"success\","
			    "\"permit\":\"%s\"}",
			    permits[i]);
			ck_assert_int_eq(util_int(r, "snapshot.in_flight"), held - i - 1);
			json_decref(r);
			free(permits[i]);
		}
		held = 0;
	}
	ck_assert_int_eq(refusals, 2 * (CONNS - 3));
	totals_are("b", 0, 2 * (CONNS - 3), 0, 0);
	ck_assert_int_eq(snap_int("b", "totals.successes"), 6);
	/* release_slot with the permit gives a ticket back too. */
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"b\"}");
	permits[0] = granted(r);
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"release_slot\",\"name\":\"b\",\"token\":\"%s\"}",
	    permits[0]);
	ck_assert(util_bool(r, "released"));
	json_decref(r);
	free(permits[0]);
	ck_assert_int_eq(snap_int("b", "in_flight"), 0);
	/* A circuit without a limit takes no ticket and shows no in_flight. */
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"free\"}");
	ck_assert(util_bool(r, "allowed"));
	ck_assert_ptr_null(util_get(r, "permit"));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"free\"}");
	ck_assert_ptr_null(util_get(r, "snapshot.in_flight"));
	ck_assert(json_is_null(util_get(r, "snapshot.policy.max_concurrent")));
	json_decref(r);
}
END_TEST

/* A closed connection's tickets free at once and go to the waiters, first
 * come first served; a waiter whose connection closes leaves the queue. */
START_TEST(test_close_frees_to_waiters_in_order)
{
	static const char wait[] = "{\"id\":%d,\"op\":\"allow\",\"name\":\"w\",\"wait_ms\":60000,"
				   "\"ctx\":{\"max_concurrent\":1}}";
	char line[256], *permit;
	json_t *r;

	start("");
	r = util_call_ok(conns[0],
	    "{\"op\":\"allow\",\"name\":\"w\",\"ctx\":{\"max_concurrent\":1}}");
	free(granted(r));
	json_decref(r);
	/* Waiters on 1..4, queued in that order. */
	for (int i = 1; i <= 4; i++) {
		snprintf(line, sizeof line, wait, i);
		send_line(conns[i], line);
		ck_assert(util_stats_reach(a, "waiters", i));
	}
	/* 2 leaves the queue (its connection closes): nothing is granted. */
	util_close(&conns[2]);
	ck_assert(util_stats_reach(a, "waiters", 3));
	ck_assert_int_eq(snap_int("w", "in_flight"), 1);
	/* The holder closes: 1 gets its ticket at once, 3 and 4 wait on. */
	util_close(&conns[0]);
	r = next_reply(conns[1]);
	ck_assert_int_eq(util_int(r, "id"), 1);
	permit = granted(r);
	json_decref(r);
	ck_assert(util_stats_reach(a, "waiters", 2));
	ck_assert(quiet(conns[3]) && quiet(conns[4]));
	/* 1 hands it back by record: 3 gets it. */
	r = util_call_ok(conns[1],
	    "{\"op\":\"record\",\"name\":\"w\",\"outcome\":\"success\",\"permit\":\"%s\"}", permit);
	json_decref(r);
	free(permit);
	r = next_reply(conns[3]);
	ck_assert_int_eq(util_int(r, "id"), 3);
	free(granted(r));
	json_decref(r);
	ck_assert(util_stats_reach(a, "waiters", 1));
	ck_assert(quiet(conns[4]));
	/* 3 closes: 4 gets it. */
	util_close(&conns[3]);
	r = next_reply(conns[4]);
	ck_assert_int_eq(util_int(r, "id"), 4);
	free(granted(r));
	json_decref(r);
	ck_assert(util_stats_reach(a, "waiters", 0));
	/* Nobody was refused: waiting is not a refusal. */
	totals_are("w", 0, 0, 0, 0);
}
END_TEST

/* wait_ms's end answers the refusal (counted once); later lines of a
 * waiting connection wait behind it, replies in order. */
START_TEST(test_wait_expiry_and_order)
{
	json_t *r;

	start("[circuit \"e\"]\nmax_concurrent = 1\n");
	r = util_call_ok(conns[0], "{\"op\":\"allow\",\"name\":\"e\"}");
	free(granted(r));
	json_decref(r);
	/* An allow that waits 300 ms, and a get behind it on the same line. */
	send_line(conns[1],
	    "{\"id\":1,\"op\":\"allow\",\"name\":\"e\",\"wait_ms\":300}\n"
	    "{\"id\":2,\"op\":\"get\",\"name\":\"e\"}");
	ck_assert(util_stats_reach(a, "waiters", 1));
	/* The get came in the same read as the allow, and was not answered:
	 * cbd counts a request when it reads its line. */
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "ops.get.requests"), 0);
	json_decref(r);
	r = next_reply(conns[1]);
	ck_assert_int_eq(util_int(r, "id"), 1);
	refused(r, "closed", "concurrency");
	ck_assert_int_eq(util_int(r, "in_flight"), 1);
	ck_assert_int_eq(util_int(r, "retry_after_ms"), 0);
	json_decref(r);
	r = next_reply(conns[1]);
	ck_assert_int_eq(util_int(r, "id"), 2);
	ck_assert_int_eq(util_int(r, "snapshot.in_flight"), 1);
	json_decref(r);
	ck_assert(util_stats_reach(a, "waiters", 0));
	totals_are("e", 0, 1, 0, 0);
}
END_TEST

/* Shutdown answers a waiter at once (shutting_down), without waiting for
 * its wait_ms. */
START_TEST(test_shutdown_answers_waiters)
{
	json_t *r;

	start("[circuit \"s\"]\nmax_concurrent = 1\n");
	r = util_call_ok(conns[0], "{\"op\":\"allow\",\"name\":\"s\"}");
	free(granted(r));
	json_decref(r);
	send_line(conns[1], "{\"id\":3,\"op\":\"allow\",\"name\":\"s\",\"wait_ms\":60000}");
	ck_assert(util_stats_reach(a, "waiters", 1));
	ck_assert_int_eq(kill(h.pid, SIGTERM), 0);
	r = util_next_json(conns[1], "the waiter's answer");
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(util_int(r, "id"), 3);
	ck_assert_str_eq(util_code(r), "shutting_down");
	json_decref(r);
	ck_assert(util_wait_eof(conns[1]));
}
END_TEST

/* The state file keeps the new totals of the circuits it keeps (after a
 * restart their tickets are gone with their connections). */
START_TEST(test_state_file_keeps_totals)
{
	char dir[] = "/tmp/cbd-bulkhead-state-XXXXXX", config[512], path[600];
	json_t *r;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(config, sizeof config,
	    "[cbd]\nstate_file = %s/state.json\n[circuit \"p\"]\nmax_concurrent = 1\n", dir);
	start(config);
	r = util_call_ok(conns[0], "{\"op\":\"allow\",\"name\":\"p\",\"retry\":true}");
	free(granted(r));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"p\"}");
	refused(r, "closed", "concurrency");
	json_decref(r);
	/* Held closed, the circuit is kept (open, half_open and held ones
	 * are); a stop writes the state file. */
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"p\",\"state\":\"closed\",\"hold\":true}"));
	teardown();
	setup();
	start(config);
	totals_are("p", 0, 1, 1, 0);
	ck_assert_int_eq(snap_int("p", "in_flight"), 0);
	teardown();
	setup();
	snprintf(path, sizeof path, "%s/state.json", dir);
	unlink(path);
	rmdir(dir);
}
END_TEST

/* A ticket's ttl frees it: on the request's clock (ctx.now), and on cbd's
 * clock for a waiter. */
START_TEST(test_ttl_frees)
{
	json_t *r;

	start("[circuit \"t\"]\nmax_concurrent = 1\nslot_ttl_ms = 1000\n"
	      "[circuit \"real\"]\nmax_concurrent = 1\nslot_ttl_ms = 200\n");
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"t\",\"ctx\":{\"now\":%lld}}",
	    (long long)T0);
	free(granted(r));
	ck_assert_int_eq(util_int(r, "expires_at"), T0 + 1000);
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"t\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 999));
	refused(r, "closed", "concurrency");
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"t\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1000));
	free(granted(r));
	json_decref(r);
	totals_are("t", 0, 1, 0, 0);
	/* On cbd's clock: a waiter gets the ticket its holder never gives
	 * back once its ttl has run. */
	r = util_call_ok(conns[0], "{\"op\":\"allow\",\"name\":\"real\"}");
	free(granted(r));
	json_decref(r);
	send_line(conns[1], "{\"id\":7,\"op\":\"allow\",\"name\":\"real\",\"wait_ms\":60000}");
	r = next_reply(conns[1]);
	ck_assert_int_eq(util_int(r, "id"), 7);
	free(granted(r));
	json_decref(r);
	totals_are("real", 0, 0, 0, 0);
}
END_TEST

/* §3's rule on the request's clock: with 10 first attempts and 20 %, two
 * retries go and the third is refused until the oldest retry leaves the
 * window; first attempts are never refused by the budget. */
START_TEST(test_retry_budget)
{
	static const char allow[] =
	    "{\"op\":\"allow\",\"name\":\"r\",%s\"ctx\":{\"now\":%lld,\"retry_budget_percent\":20,"
	    "\"retry_min_per_s\":0}}";
	json_t *r;

	start("");
	/* With no first attempt, no retry goes (the minimum is 0). */
	r = util_call_ok(a, allow, "\"retry\":true,", (long long)(T0 + 500));
	refused(r, "closed", "retry_budget");
	ck_assert_int_eq(util_int(r, "retry_after_ms"), 500);
	json_decref(r);
	for (int i = 0; i < 10; i++) {
		r = util_call_ok(a, allow, "", (long long)(T0 + 1000 + i));
		ck_assert(util_bool(r, "allowed"));
		json_decref(r);
	}
	for (int i = 0; i < 2; i++) {
		r = util_call_ok(a, allow, "\"retry\":true,", (long long)(T0 + 2000 + i));
		ck_assert(util_bool(r, "allowed"));
		json_decref(r);
	}
	/* The third: 3 > 10 * 20 %. The oldest retry (second T0/1000 + 2)
	 * leaves the window at T0 + 12000. */
	r = util_call_ok(a, allow, "\"retry\":true,", (long long)(T0 + 5000));
	refused(r, "closed", "retry_budget");
	ck_assert_int_eq(util_int(r, "retry_after_ms"), 7000);
	json_decref(r);
	/* First attempts go whatever the retries did. */
	r = util_call_ok(a, allow, "", (long long)(T0 + 5001));
	ck_assert(util_bool(r, "allowed"));
	json_decref(r);
	/* Second 11: the first attempts of second 1 have left the window,
	 * the retries of second 2 not yet: 1 first attempt, 2 retries. */
	r = util_call_ok(a, allow, "\"retry\":true,", (long long)(T0 + 11999));
	refused(r, "closed", "retry_budget");
	ck_assert_int_eq(util_int(r, "retry_after_ms"), 1);
	json_decref(r);
	/* At T0 + 12000 the retries of second 2 have left, and the first
	 * attempts of second 1 too: 1 first attempt left (second 5), which
	 * grants no retry at 20 %. */
	r = util_call_ok(a, allow, "\"retry\":true,", (long long)(T0 + 12000));
	refused(r, "closed", "retry_budget");
	json_decref(r);
	totals_are("r", 0, 0, 2, 4);
	/* retry_min_per_s: 10 a second over 10 s, whatever the first
	 * attempts. */
	for (int i = 0; i < 100; i++) {
		r = util_call_ok(a,
		    "{\"op\":\"allow\",\"name\":\"m\",\"retry\":true,\"ctx\":{\"now\":%lld,"
		    "\"retry_budget_percent\":0}}",
		    (long long)(T0 + i));
		ck_assert(util_bool(r, "allowed"));
		json_decref(r);
	}
	r = util_call_ok(a,
	    "{\"op\":\"allow\",\"name\":\"m\",\"retry\":true,\"ctx\":{\"now\":%lld,"
	    "\"retry_budget_percent\":0}}",
	    (long long)(T0 + 100));
	refused(r, "closed", "retry_budget");
	ck_assert_int_eq(util_int(r, "retry_after_ms"), 9900);
	json_decref(r);
	totals_are("m", 0, 0, 100, 1);
	/* Without a budget, retries are counted and never refused. */
	for (int i = 0; i < 3; i++) {
		r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"n\",\"retry\":true}");
		ck_assert(util_bool(r, "allowed"));
		json_decref(r);
	}
	totals_are("n", 0, 0, 3, 0);
}
END_TEST

/* Every refusal says why, checked in the order breaker, retry budget,
 * bulkhead; half-open trials count against the limit; a held-closed
 * circuit keeps its limit. */
START_TEST(test_reasons)
{
	char *permit;
	json_t *r;

	start("[circuit \"x\"]\nmax_concurrent = 1\nhalf_open_max = 2\nfailure_threshold = 1\n"
	      "break_ms = 1000\nretry_budget_percent = 0\nretry_min_per_s = 0\n");
	/* closed: the budget before the bulkhead (the one ticket is free). */
	r = util_call_ok(a,
	    "{\"op\":\"allow\",\"name\":\"x\",\"retry\":true,\"ctx\":{\"now\":%lld}}",
	    (long long)T0);
	refused(r, "closed", "retry_budget");
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
	    (long long)T0);
	permit = granted(r);
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
	    (long long)T0);
	refused(r, "closed", "concurrency");
	json_decref(r);
	/* The failure opens it (the ticket goes back with the record). */
	json_decref(util_call_ok(a,
	    "{\"op\":\"record\",\"name\":\"x\",\"outcome\":\"failure\",\"permit\":\"%s\","
	    "\"ctx\":{\"now\":%lld}}",
	    permit, (long long)T0));
	free(permit);
	/* open: the breaker first, even for a retry. */
	r = util_call_ok(a,
	    "{\"op\":\"allow\",\"name\":\"x\",\"retry\":true,\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 10));
	refused(r, "open", "open");
	ck_assert_int_eq(util_int(r, "retry_after_ms"), 990);
	json_decref(r);
	/* half_open: a trial takes the one ticket; the next trial slot is
	 * free but no ticket is. */
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1000));
	ck_assert_str_eq(util_str(r, "state"), "half_open");
	permit = granted(r);
	json_decref(r);
	ck_assert_int_eq(snap_int("x", "in_flight"), 1);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1001));
	refused(r, "half_open", "concurrency");
	ck_assert_int_eq(util_int(r, "in_flight"), 1);
	json_decref(r);
	json_decref(util_call_ok(a,
	    "{\"op\":\"release_slot\",\"name\":\"x\",\"token\":\"%s\",\"ctx\":{\"now\":%lld}}",
	    permit, (long long)(T0 + 1002)));
	free(permit);
	/* Trial slots full (2 acquired by acquire_slot, which takes no
	 * ticket): half_open_full. */
	for (int i = 0; i < 2; i++) {
		r = util_call_ok(a,
		    "{\"op\":\"acquire_slot\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
		    (long long)(T0 + 1003));
		ck_assert(util_bool(r, "acquired"));
		json_decref(r);
	}
	ck_assert_int_eq(snap_int("x", "in_flight"), 0);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1004));
	refused(r, "half_open", "half_open_full");
	json_decref(r);
	/* Held open: "held"; held closed keeps the limit. */
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"x\",\"state\":\"open\","
	    "\"hold\":true,\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1005)));
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1006));
	refused(r, "open", "held");
	json_decref(r);
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"x\",\"state\":\"closed\","
	    "\"hold\":true,\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1007)));
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1008));
	free(granted(r));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"x\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1009));
	refused(r, "closed", "concurrency");
	json_decref(r);
	/* rejected: open, half_open_full, held; concurrency: 3; budget: 1 (the
	 * retry refused while open is the breaker's). */
	totals_are("x", 3, 3, 0, 1);
}
END_TEST

/* The keys resolve like every policy key (config > client > defaults >
 * builtin, presets too) and show in the policy with their sources. */
START_TEST(test_policy_keys)
{
	json_t *r;

	start("[defaults]\nretry_min_per_s = 5\n"
	      "[preset \"guarded\"]\nmax_concurrent = 16\nretry_budget_percent = 20\n"
	      "[circuit \"cfg\"]\nmax_concurrent = 4\n");
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"cfg\",\"ctx\":{\"max_concurrent\":9}}");
	free(granted(r));
	ck_assert_ptr_nonnull(util_get(r, "policy_conflict"));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"cfg\"}");
	ck_assert_int_eq(util_int(r, "snapshot.policy.max_concurrent"), 4);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.max_concurrent"), "config");
	ck_assert(json_is_null(util_get(r, "snapshot.policy.retry_budget_percent")));
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.retry_budget_percent"), "builtin");
	ck_assert_int_eq(util_int(r, "snapshot.policy.retry_min_per_s"), 5);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.retry_min_per_s"), "defaults");
	ck_assert_int_eq(util_int(r, "snapshot.in_flight"), 1);
	json_decref(r);
	r = util_call_ok(a,
	    "{\"op\":\"allow\",\"name\":\"cl\",\"ctx\":{\"max_concurrent\":2,"
	    "\"retry_budget_percent\":0,\"retry_min_per_s\":0}}");
	free(granted(r));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"cl\"}");
	ck_assert_int_eq(util_int(r, "snapshot.policy.max_concurrent"), 2);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.max_concurrent"), "client");
	ck_assert_int_eq(util_int(r, "snapshot.policy.retry_budget_percent"), 0);
	ck_assert_int_eq(util_int(r, "snapshot.policy.retry_min_per_s"), 0);
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"pre\",\"ctx\":{\"preset\":\"guarded\"}}");
	free(granted(r));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"pre\"}");
	ck_assert_int_eq(util_int(r, "snapshot.policy.max_concurrent"), 16);
	ck_assert_int_eq(util_int(r, "snapshot.policy.retry_budget_percent"), 20);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.max_concurrent"), "client");
	json_decref(r);
}
END_TEST

/* Bad values of each key, of wait_ms and of retry: bad_request naming the
 * member; and in the config file, naming the key. */
START_TEST(test_bad_values)
{
	static const struct {
		const char *members;
		const char *named;
	} bad[] = {
		{ "\"ctx\":{\"max_concurrent\":0}", "max_concurrent" },
		{ "\"ctx\":{\"max_concurrent\":1000001}", "max_concurrent" },
		{ "\"ctx\":{\"max_concurrent\":\"8\"}", "max_concurrent" },
		{ "\"ctx\":{\"retry_budget_percent\":-1}", "retry_budget_percent" },
		{ "\"ctx\":{\"retry_budget_percent\":1001}", "retry_budget_percent" },
		{ "\"ctx\":{\"retry_min_per_s\":-1}", "retry_min_per_s" },
		{ "\"ctx\":{\"retry_min_per_s\":1000001}", "retry_min_per_s" },
		{ "\"wait_ms\":-1", "wait_ms" },
		{ "\"wait_ms\":60001", "wait_ms" },
		{ "\"wait_ms\":\"10\"", "wait_ms" },
		{ "\"wait_ms\":1.5", "wait_ms" },
		{ "\"retry\":1", "retry" },
		{ "\"retry\":\"yes\"", "retry" },
	};
	char path[512];
	json_t *r;

	start("");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		r = util_call(a, "{\"op\":\"allow\",\"name\":\"bad\",%s}", bad[i].members);
		ck_assert_msg(util_code(r) != NULL && strcmp(util_code(r), "bad_request") == 0,
		    "%s: not bad_request", bad[i].members);
		ck_assert_msg(strstr(util_str(r, "error.message"), bad[i].named) != NULL, "%s: %s",
		    bad[i].members, util_str(r, "error.message"));
		json_decref(r);
	}
	/* Nothing was created by them. */
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"bad\"}");
	ck_assert(!util_bool(r, "stored"));
	json_decref(r);
	/* The config file: cbd -t names the key. */
	for (const char *const *line = (const char *const[]){ "max_concurrent = 0",
		 "retry_budget_percent = 1001", "retry_min_per_s = -1", NULL };
	     *line != NULL; line++) {
		char out[2048], key[64];
		const char *argv[] = { getenv("CBD_BINARY"), "-t", "-c", path, NULL };
		FILE *f;
		int rc;

		snprintf(path, sizeof path, "%s/bad.conf", h.dir);
		f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "[defaults]\n%s\n", *line);
		fclose(f);
		rc = util_run(argv, out, sizeof out);
		sscanf(*line, "%63s", key);
		ck_assert_msg(rc == 1 && strstr(out, key) != NULL, "%s: exit %d: %s", *line, rc,
		    out);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("bulkhead");
	TCase *tc = tcase_create("tickets");

	/* Fleet mode counts tickets and retries per host too (PROTOCOL.md
	 * §15), so every case but the state file's holds there as here. */
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_never_more_than_n);
	tcase_add_test(tc, test_close_frees_to_waiters_in_order);
	tcase_add_test(tc, test_wait_expiry_and_order);
	tcase_add_test(tc, test_ttl_frees);
	tcase_add_test(tc, test_shutdown_answers_waiters);
	/* The state file is memory mode's (PROTOCOL.md §15). */
	if (getenv("CBD_TEST_REDIS_SOCKET") == NULL)
		tcase_add_test(tc, test_state_file_keeps_totals);
	tcase_add_test(tc, test_retry_budget);
	tcase_add_test(tc, test_reasons);
	tcase_add_test(tc, test_policy_keys);
	tcase_add_test(tc, test_bad_values);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
