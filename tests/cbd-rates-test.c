/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-rates-test.c — protocol 2's trip rules against a real cbd: presets
 * from ctx and from the config file, several processes recording into one
 * rate circuit (it opens at the same call as with one process), totals
 * exact under 16 concurrent clients, min_reporters across processes, and
 * break_backoff's growing breaks.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"

static cbd_harness h;
static int fd = -1;

static void
start(const char *config)
{
	util_start_conn(&h, &fd, config);
}

static void
teardown(void)
{
	util_stop_conn(&h, &fd);
}

/* Fork `procs` processes; each sends `count` copies of line on its own
 * connection and counts the replies whose snapshot is closed. Returns the
 * sum of those counts. */
static int
fork_senders(int procs, int count, const char *line)
{
	int pipes[2], total = 0;
	pid_t pids[32];

	ck_assert_int_le(procs, 32);
	ck_assert_int_eq(pipe(pipes), 0);
	for (int i = 0; i < procs; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			int conn = harness_connect(&h), closed = 0;

			for (int k = 0; conn >= 0 && k < count; k++) {
				json_t *r = util_call(conn, "%s", line);
				const char *state = util_str(r, "snapshot.state");

				if (r == NULL || util_code(r) != NULL)
					_exit(2);
				closed += state != NULL && strcmp(state, "closed") == 0;
				json_decref(r);
			}
			if (write(pipes[1], &closed, sizeof closed) != sizeof closed)
				_exit(3);
			_exit(conn >= 0 ? 0 : 1);
		}
	}
	close(pipes[1]);
	for (int i = 0; i < procs; i++) {
		int status, n;

		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sender %d: status %d",
		    i, status);
		ck_assert_int_eq(read(pipes[0], &n, sizeof n), (ssize_t)sizeof n);
		total += n;
	}
	close(pipes[0]);
	return total;
}

START_TEST(test_presets_from_config_and_ctx)
{
	json_t *r;

	start("[preset \"strict\"]\ntrip = rate\nwindow_size = 4\nminimum_calls = 2\n"
	      "failure_rate = 100\n"
	      "[preset \"database\"]\nbreak_ms = 7000\n"
	      "[circuit \"db\"]\npreset = database\n"
	      "[circuit \"billing\"]\npreset = strict\nfailure_rate = 50\n");
	/* database (rate, 5 calls, minimum 3, 30 %), with the file's break. */
	json_decref(util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"db\"}"));
	json_decref(util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"db\"}"));
	r = util_call_ok(fd, "{\"op\":\"record_failure\",\"name\":\"db\",\"policy\":true}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open"); /* 1 of 3 >= 30 % */
	ck_assert_str_eq(util_str(r, "snapshot.policy.preset"), "database");
	ck_assert_str_eq(util_str(r, "snapshot.policy.trip"), "rate");
	ck_assert_int_eq(util_int(r, "snapshot.policy.window_size"), 5);
	ck_assert_int_eq(util_int(r, "snapshot.policy.break_ms"), 7000);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.window_size"), "config");
	json_decref(r);
	/* A preset of the file, and a key beside it that wins. */
	json_decref(util_call_ok(fd, "{\"op\":\"record_failure\",\"name\":\"billing\"}"));
	r = util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"billing\",\"policy\":true}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open"); /* 1 of 2 >= 50 % */
	ck_assert_int_eq(util_int(r, "snapshot.policy.failure_rate"), 50);
	json_decref(r);
	/* From ctx, at the client's level. */
	r = util_call_ok(fd,
	    "{\"op\":\"record_failure\",\"name\":\"api\",\"policy\":true,"
	    "\"ctx\":{\"preset\":\"service\"}}");
	ck_assert_str_eq(util_str(r, "snapshot.policy.preset"), "service");
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.trip"), "client");
	ck_assert_int_eq(util_int(r, "snapshot.window.calls"), 1);
	json_decref(r);
	r = util_call(fd, "{\"op\":\"get\",\"name\":\"x\",\"ctx\":{\"preset\":\"nope\"}}");
	ck_assert_str_eq(util_code(r), "bad_request");
	json_decref(r);
	r = util_call(fd,
	    "{\"op\":\"get\",\"name\":\"x\",\"ctx\":{\"window\":\"count\","
	    "\"window_size\":60000}}");
	ck_assert_str_eq(util_code(r), "bad_request");
	json_decref(r);
}
END_TEST

/* 4 processes x 25 failures into one rate circuit (window 100, minimum
 * 50, 50 %): it opens at the 50th call whoever sends it, so exactly 49
 * replies say closed, and there is one transition. */
START_TEST(test_processes_open_a_rate_circuit_at_one_point)
{
	json_t *r;

	start("[circuit \"shared\"]\ntrip = rate\nwindow_size = 100\nminimum_calls = 50\n"
	      "failure_rate = 50\nbreak_ms = 3600000\n");
	ck_assert_int_eq(fork_senders(4, 25, "{\"op\":\"record_failure\",\"name\":\"shared\"}"),
	    49);
	r = util_call_ok(fd, "{\"op\":\"get\",\"name\":\"shared\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	ck_assert_int_eq(util_int(r, "snapshot.totals.failures"), 100);
	ck_assert_int_eq(util_int(r, "snapshot.window.calls"), 0); /* emptied at the trip */
	json_decref(r);
	r = util_call_ok(fd, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "transitions"), 1);
	json_decref(r);
}
END_TEST

START_TEST(test_totals_exact_under_16_clients)
{
	json_t *r;

	start("[circuit \"t\"]\nfailure_threshold = 1000000000\n");
	fork_senders(16, 50, "{\"op\":\"record\",\"name\":\"t\",\"outcome\":\"success\"}");
	fork_senders(16, 30, "{\"op\":\"record\",\"name\":\"t\",\"outcome\":\"failure\"}");
	fork_senders(16, 20, "{\"op\":\"record\",\"name\":\"t\",\"outcome\":\"ignore\"}");
	r = util_call_ok(fd, "{\"op\":\"get\",\"name\":\"t\"}");
	ck_assert_int_eq(util_int(r, "snapshot.totals.successes"), 800);
	ck_assert_int_eq(util_int(r, "snapshot.totals.failures"), 480);
	ck_assert_int_eq(util_int(r, "snapshot.totals.ignored"), 320);
	json_decref(r);
}
END_TEST

/* min_reporters = 2: one process failing alone never opens the circuit;
 * a second process's failure within the window does. */
START_TEST(test_min_reporters_across_processes)
{
	json_t *r;

	start("[circuit \"m\"]\nfailure_threshold = 2\nmin_reporters = 2\n"
	      "reporter_window_ms = 60000\n");
	ck_assert_int_eq(fork_senders(1, 20, "{\"op\":\"record_failure\",\"name\":\"m\"}"), 20);
	r = util_call_ok(fd, "{\"op\":\"get\",\"name\":\"m\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
	ck_assert_int_eq(util_int(r, "snapshot.reporters"), 1);
	json_decref(r);
	/* This process is the second reporter. */
	r = util_call_ok(fd, "{\"op\":\"record_failure\",\"name\":\"m\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	ck_assert_int_eq(util_int(r, "snapshot.reporters"), 2);
	json_decref(r);
	/* Reports older than the window stop counting (virtual time). */
	json_decref(util_call_ok(fd, "{\"op\":\"set_state\",\"name\":\"m\",\"state\":\"closed\"}"));
	r = util_call_ok(fd,
	    "{\"op\":\"record_failure\",\"name\":\"m\",\"ctx\":{\"now\":4102444800000}}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
	ck_assert_int_eq(util_int(r, "snapshot.reporters"), 1);
	json_decref(r);
}
END_TEST

/* break_backoff = 2: breaks of 1, 2, 4 s after successive failed trials,
 * capped at break_max_ms, back to 1 s after a close. */
START_TEST(test_break_backoff)
{
	int64_t t = 1000000;
	json_t *r;

	start("[circuit \"b\"]\nfailure_threshold = 1\nsuccess_threshold = 1\nbreak_ms = 1000\n"
	      "break_backoff = 2\nbreak_max_ms = 4000\n");
	r = util_call_ok(fd, "{\"op\":\"record_failure\",\"name\":\"b\",\"ctx\":{\"now\":%lld}}",
	    (long long)t);
	ck_assert_int_eq(util_int(r, "snapshot.current_break_ms"), 1000);
	json_decref(r);
	for (int64_t want = 2000, brk = 1000; want <= 8000; want *= 2) {
		t += brk;
		r = util_call_ok(fd, "{\"op\":\"allow\",\"name\":\"b\",\"ctx\":{\"now\":%lld}}",
		    (long long)t);
		ck_assert(util_bool(r, "allowed"));
		json_decref(r);
		r = util_call_ok(fd,
		    "{\"op\":\"record\",\"name\":\"b\",\"outcome\":\"failure\",\"ctx\":{"
		    "\"now\":%lld}}",
		    (long long)t);
		brk = want > 4000 ? 4000 : want;
		ck_assert_int_eq(util_int(r, "snapshot.current_break_ms"), brk);
		ck_assert_int_eq(util_int(r, "snapshot.retry_after_ms"), brk);
		json_decref(r);
		/* Refused until the grown break is over. */
		r = util_call_ok(fd, "{\"op\":\"allow\",\"name\":\"b\",\"ctx\":{\"now\":%lld}}",
		    (long long)(t + brk - 1));
		ck_assert(!util_bool(r, "allowed"));
		json_decref(r);
		if (want == 8000)
			t += brk;
	}
	/* A successful trial closes and resets the break. */
	json_decref(util_call_ok(fd, "{\"op\":\"allow\",\"name\":\"b\",\"ctx\":{\"now\":%lld}}",
	    (long long)t));
	r = util_call_ok(fd,
	    "{\"op\":\"record\",\"name\":\"b\",\"outcome\":\"success\",\"ctx\":{\"now\":%"
	    "lld}}",
	    (long long)t);
	ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
	ck_assert_int_eq(util_int(r, "snapshot.current_break_ms"), 1000);
	json_decref(r);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("rates");
	TCase *tc = tcase_create("rates");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_presets_from_config_and_ctx);
	tcase_add_test(tc, test_processes_open_a_rate_circuit_at_one_point);
	tcase_add_test(tc, test_totals_exact_under_16_clients);
	tcase_add_test(tc, test_min_reporters_across_processes);
	tcase_add_test(tc, test_break_backoff);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
