/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-concurrency-test.c — many clients at once against a real cbd: exact
 * counts from 16+ concurrent connections (one request at a time and
 * pipelined), a cas race with exactly one winner, and an allow race that
 * moves an open circuit to half_open exactly once and grants one permit.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"

/* Clients per race. */
#define CLIENTS 16

static cbd_harness h;

static void
setup(void)
{
	ck_assert_msg(harness_start(&h, "[cbd]\nmax_connections = 64\n"), "cbd did not start");
}

static void
teardown(void)
{
	harness_stop(&h);
}

/* Fork CLIENTS children that connect, wait at a barrier, then run body(i,
 * fd) and report its result. Every child keeps its connection (and so
 * any slot it holds) until all have reported. */
static void
race(int (*body)(int i, int fd), int codes[CLIENTS])
{
	int start[2], results[2], release[2];
	pid_t pids[CLIENTS];

	ck_assert_int_eq(pipe(start), 0);
	ck_assert_int_eq(pipe(results), 0);
	ck_assert_int_eq(pipe(release), 0);
	for (int i = 0; i < CLIENTS; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			unsigned char msg[2];
			char go;
			int fd;

			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(start[1]);
			close(results[0]);
			close(release[1]);
			fd = harness_connect(&h);
			msg[0] = (unsigned char)i;
			msg[1] = 100;
			/* Everyone starts when the parent closes the start pipe. */
			if (fd >= 0 && read(start[0], &go, 1) == 0)
				msg[1] = (unsigned char)body(i, fd);
			if (write(results[1], msg, 2) != 2)
				_exit(1);
			/* Hold on until everyone has answered. */
			if (read(release[0], &go, 1) < 0)
				_exit(1);
			_exit(0);
		}
	}
	close(start[0]);
	close(results[1]);
	close(release[0]);
	/* Give every child the chance to connect first; not needed for
	 * correctness, only to make the race real. */
	usleep(50000);
	close(start[1]);
	for (int i = 0; i < CLIENTS; i++) {
		unsigned char msg[2];

		ck_assert_int_eq(read(results[0], msg, 2), 2);
		ck_assert_int_lt(msg[0], CLIENTS);
		codes[msg[0]] = msg[1];
	}
	close(release[1]);
	close(results[0]);
	for (int i = 0; i < CLIENTS; i++)
		ck_assert_int_eq(waitpid(pids[i], NULL, 0), pids[i]);
}

enum { PER_CLIENT = 500 };

/* Half the clients send one request at a time, half pipeline them all. */
static int
record_failures(int i, int fd)
{
	static char reply[4096];

	if (i % 2 == 0) {
		for (int k = 0; k < PER_CLIENT; k++) {
			json_t *r = util_call(fd,
			    "{\"op\":\"record_failure\",\"name\":\"shared\","
			    "\"ctx\":{\"failure_threshold\":1000000000}}");
			bool ok = r != NULL && util_code(r) == NULL;

			json_decref(r);
			if (!ok)
				return 1;
		}
		return 0;
	}
	size_t cap = PER_CLIENT * 128, len = 0;
	char *buf = malloc(cap);

	for (int k = 0; k < PER_CLIENT; k++)
		len += (size_t)snprintf(buf + len, cap - len,
		    "{\"op\":\"record_failure\",\"name\":\"shared\",\"ctx\":{\"failure_threshold\":"
		    "1000000000}}\n");
	if (!util_write_all(fd, buf, len))
		return 2;
	free(buf);
	for (int k = 0; k < PER_CLIENT; k++) {
		if (!util_read_line(fd, reply, sizeof reply) ||
		    strstr(reply, "\"ok\":true") == NULL)
			return 3;
	}
	return 0;
}

START_TEST(test_concurrent_failures_exact_count)
{
	int codes[CLIENTS], fd;
	json_t *r;

	race(record_failures, codes);
	for (int i = 0; i < CLIENTS; i++)
		ck_assert_msg(codes[i] == 0, "client %d exited %d", i, codes[i]);
	fd = harness_connect(&h);
	r = util_call(fd, "{\"op\":\"get\",\"name\":\"shared\"}");
	ck_assert_int_eq(util_int(r, "snapshot.failure_count"), CLIENTS * PER_CLIENT);
	json_decref(r);
	close(fd);
}
END_TEST

/* Exit 10 when this client's cas applied, 11 when not. */
static int
cas_once(int i, int fd)
{
	json_t *r =
	    util_call(fd, "{\"op\":\"cas\",\"name\":\"race\",\"from\":\"closed\",\"to\":\"open\"}");
	int code = r == NULL || util_code(r) != NULL ? 1 : util_bool(r, "applied") ? 10 : 11;

	json_decref(r);
	return code;
}

START_TEST(test_cas_race_one_winner)
{
	int codes[CLIENTS], winners = 0;

	race(cas_once, codes);
	for (int i = 0; i < CLIENTS; i++) {
		ck_assert_msg(codes[i] == 10 || codes[i] == 11, "client %d exited %d", i, codes[i]);
		winners += codes[i] == 10;
	}
	ck_assert_int_eq(winners, 1);
}
END_TEST

/* Exit 10 when allowed (with a permit), 11 when refused; keeps the
 * connection (and so the permit) until told to go. */
static int
allow_once(int i, int fd)
{
	json_t *r = util_call(fd,
	    "{\"op\":\"allow\",\"name\":\"trial\",\"ctx\":{\"now\":100000,\"break_ms\":1000}}");
	int code;

	if (r == NULL || util_code(r) != NULL)
		return 1;
	if (strcmp(util_str(r, "state"), "half_open") != 0)
		code = 2;
	else if (util_bool(r, "allowed"))
		code = util_str(r, "permit") != NULL ? 10 : 3;
	else
		code = util_int(r, "retry_after_ms") > 0 ? 11 : 4;
	json_decref(r);
	return code;
}

START_TEST(test_allow_race_one_permit)
{
	int codes[CLIENTS], allowed = 0, fd;
	json_t *r;

	fd = harness_connect(&h);
	r = util_call(fd,
	    "{\"op\":\"set_state\",\"name\":\"trial\",\"state\":\"open\",\"ctx\":{\"now\":1000}}");
	ck_assert(util_code(r) == NULL);
	json_decref(r);
	race(allow_once, codes);
	for (int i = 0; i < CLIENTS; i++) {
		ck_assert_msg(codes[i] == 10 || codes[i] == 11, "client %d exited %d", i, codes[i]);
		allowed += codes[i] == 10;
	}
	ck_assert_int_eq(allowed, 1);
	/* One forced transition and one open -> half_open, however many asked. */
	r = util_call(fd, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "transitions"), 2);
	json_decref(r);
	close(fd);
}
END_TEST

static Suite *
concurrency_suite(void)
{
	Suite *s = suite_create("cbd-concurrency");
	TCase *tc = tcase_create("concurrency");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, test_concurrent_failures_exact_count);
	tcase_add_test(tc, test_cas_race_one_winner);
	tcase_add_test(tc, test_allow_race_one_permit);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return check_run(concurrency_suite(), NULL);
}
