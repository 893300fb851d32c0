/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-lifecycle-test.c — cbd's life as a process: SIGTERM shutdown (flush,
 * socket removed, exit 0, shutting_down), SIGHUP reload (good and bad
 * files), stale and live sockets, logging (transitions, open-circuit
 * warnings), and under HAVE_SYSTEMD the sd_notify messages and socket
 * activation.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"

static cbd_harness h;
static char log_path[UTIL_LOG_PATH_SIZE];

static void
setup(void)
{
	util_log_create(log_path);
}

static void
teardown(void)
{
	harness_stop(&h);
	unlink(log_path);
}

START_TEST(test_sigterm_flushes_and_removes_socket)
{
	enum { N = 3000 };
	/* A small reply each (a snapshot is about 1.5 KB). */
	const char *req = "{\"op\":\"release_slot\",\"name\":\"x\",\"token\":\"t\"}\n";
	static char reply[4096];
	int a, b, status;

	util_start_logged(&h, NULL, NULL, log_path);
	a = harness_connect(&h);
	b = harness_connect(&h);
	/* a pipelines N requests and reads nothing yet: their replies pile up
	 * in the socket and in cbd's output buffer. */
	for (int i = 0; i < N; i++)
		ck_assert(util_write_all(a, req, strlen(req)));
	ck_assert(util_stats_reach(b, "ops.release_slot.requests", N));
	ck_assert_int_eq(kill(h.pid, SIGTERM), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_msg(util_read_line(a, reply, sizeof reply), "reply %d missing", i);
		ck_assert_msg(strstr(reply, "\"ok\":true") != NULL, "reply %d: %s", i, reply);
	}
	ck_assert(util_wait_eof(a));
	ck_assert(util_wait_eof(b));
	status = harness_wait(&h);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
	ck_assert_msg(!util_path_exists(h.socket_path), "socket file left behind");
	ck_assert(util_wait_file(log_path, "info: stopping (SIGTERM)"));
	close(a);
	close(b);
}
END_TEST

START_TEST(test_sigint_stops_too)
{
	int status;

	util_start_logged(&h, NULL, NULL, log_path);
	ck_assert_int_eq(kill(h.pid, SIGINT), 0);
	status = harness_wait(&h);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
	ck_assert(!util_path_exists(h.socket_path));
}
END_TEST

START_TEST(test_shutting_down_for_lines_sent_before_stop)
{
	char reply[4096];
	int a, st;
	json_t *r;

	util_start_logged(&h, NULL, NULL, log_path);
	a = harness_connect(&h);
	r = util_call(a, "{\"op\":\"hello\"}");
	ck_assert(util_code(r) == NULL);
	json_decref(r);
	/* Freeze cbd, queue a request and SIGTERM: when cbd runs again it sees
	 * both, and handles the signal (higher priority) first. */
	ck_assert_int_eq(kill(h.pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(h.pid, &st, WUNTRACED), h.pid);
	ck_assert(WIFSTOPPED(st));
	ck_assert(
	    util_write_all(a, "{\"id\":5,\"op\":\"record_failure\",\"name\":\"late\"}\n", 45));
	ck_assert_int_eq(kill(h.pid, SIGTERM), 0);
	ck_assert_int_eq(kill(h.pid, SIGCONT), 0);
	ck_assert(util_read_line(a, reply, sizeof reply));
	ck_assert_msg(strstr(reply, "\"shutting_down\"") != NULL &&
		strstr(reply, "\"id\":5") != NULL,
	    "got %s", reply);
	ck_assert(util_wait_eof(a));
	st = harness_wait(&h);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	close(a);
}
END_TEST

/* Replace the config file of h. */
static void
rewrite_config(const char *text)
{
	FILE *f = fopen(h.config_path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

START_TEST(test_sighup_reload)
{
	int a;
	json_t *r;

	util_start_logged(&h, "[defaults]\nfailure_threshold = 5\n", NULL, log_path);
	a = harness_connect(&h);
	r = util_call(a, "{\"op\":\"record_failure\",\"name\":\"kept\"}");
	ck_assert_int_eq(util_int(r, "snapshot.failure_count"), 1);
	json_decref(r);
	r = util_call(a, "{\"op\":\"acquire_slot\",\"name\":\"slotted\"}");
	ck_assert(util_bool(r, "acquired"));
	json_decref(r);

	rewrite_config("[defaults]\nfailure_threshold = 2\n[cbd]\nsocket_mode = 0600\n");
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(a, "reloads", 1));
	/* The new policy applies; the connection, circuits and slots survived. */
	json_decref(util_call(a, "{\"op\":\"record_failure\",\"name\":\"new\"}"));
	r = util_call(a, "{\"op\":\"record_failure\",\"name\":\"new\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
	r = util_call(a, "{\"op\":\"get\",\"name\":\"kept\"}");
	ck_assert_int_eq(util_int(r, "snapshot.failure_count"), 1);
	json_decref(r);
	r = util_call(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "slots"), 1);
	ck_assert_int_eq(util_int(r, "connections.current"), 1);
	json_decref(r);
	ck_assert(util_wait_file(log_path, "configuration reloaded"));
	ck_assert(util_wait_file(log_path, "socket_mode cannot change without a restart"));

	/* A bad file is reported and the old configuration kept. */
	rewrite_config("[defaults]\nfailure_threshold = 3\n[cbd]\nmax_circuits = 0\n");
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(a, "reload_failures", 1));
	json_decref(util_call(a, "{\"op\":\"record_failure\",\"name\":\"new2\"}"));
	r = util_call(a, "{\"op\":\"record_failure\",\"name\":\"new2\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
	ck_assert(util_wait_file(log_path, "reload failed"));
	ck_assert(util_wait_file(log_path, "cbd.conf:4: max_circuits"));
	close(a);
}
END_TEST

START_TEST(test_sighup_limits_apply)
{
	int a, b;
	json_t *r;
	char reply[4096];

	util_start_logged(&h, "[cbd]\nmax_circuits = 1\n", NULL, log_path);
	a = harness_connect(&h);
	/* An open circuit is never reclaimed to make room. */
	json_decref(util_call(a, "{\"op\":\"set_state\",\"name\":\"one\",\"state\":\"open\"}"));
	r = util_call(a, "{\"op\":\"record_failure\",\"name\":\"two\"}");
	ck_assert_str_eq(util_code(r), "capacity");
	json_decref(r);
	rewrite_config("[cbd]\nmax_circuits = 2\nmax_connections = 1\n");
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(a, "reloads", 1));
	r = util_call(a, "{\"op\":\"record_failure\",\"name\":\"two\"}");
	ck_assert(util_code(r) == NULL);
	json_decref(r);
	/* max_connections 1: a keeps its connection, a second one is refused. */
	b = harness_connect(&h);
	ck_assert(util_read_line(b, reply, sizeof reply));
	ck_assert_msg(strstr(reply, "\"capacity\"") != NULL, "got %s", reply);
	close(b);
	close(a);
}
END_TEST

START_TEST(test_stale_socket_replaced)
{
	cbd_harness first;
	harness_opts opts = { .log_path = log_path };
	char sock[400];
	int a;
	json_t *r;

	ck_assert(harness_start(&first, NULL));
	/* SIGKILL leaves the socket file behind, with nobody listening. */
	kill(first.pid, SIGKILL);
	harness_wait(&first);
	ck_assert(util_path_exists(first.socket_path));
	snprintf(sock, sizeof sock, "%s", first.socket_path);
	opts.socket = sock;
	ck_assert(harness_start_opts(&h, NULL, &opts));
	a = harness_connect(&h);
	r = util_call(a, "{\"op\":\"hello\"}");
	ck_assert(util_code(r) == NULL);
	json_decref(r);
	close(a);
	ck_assert(util_wait_file(log_path, "removed stale socket"));
	harness_stop(&h);
	harness_stop(&first);
}
END_TEST

START_TEST(test_live_socket_refused)
{
	harness_opts opts = { .log_path = log_path, .no_wait = true };
	cbd_harness second;
	int st, a;
	json_t *r;

	ck_assert(harness_start(&h, NULL));
	opts.socket = h.socket_path;
	ck_assert(harness_start_opts(&second, NULL, &opts));
	st = harness_wait(&second);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	ck_assert(util_wait_file(log_path, "another cbd is already listening"));
	harness_stop(&second);
	/* The first one is untouched. */
	ck_assert(util_path_exists(h.socket_path));
	a = harness_connect(&h);
	r = util_call(a, "{\"op\":\"hello\"}");
	ck_assert(util_code(r) == NULL);
	json_decref(r);
	close(a);
}
END_TEST

START_TEST(test_not_a_socket_refused)
{
	harness_opts opts = { .log_path = log_path, .no_wait = true };
	char p[64];
	int fd, st;

	snprintf(p, sizeof p, "/tmp/cbd-notsock-XXXXXX");
	fd = mkstemp(p);
	ck_assert_int_ge(fd, 0);
	close(fd);
	opts.socket = p;
	ck_assert(harness_start_opts(&h, NULL, &opts));
	st = harness_wait(&h);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	ck_assert(util_wait_file(log_path, "is not a socket"));
	ck_assert(util_path_exists(p));
	unlink(p);
}
END_TEST

START_TEST(test_socket_mode)
{
	struct stat st;

	ck_assert(harness_start(&h, "[cbd]\nsocket_mode = 0640\nsocket_group = 65534\n"));
	ck_assert_int_eq(stat(h.socket_path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0640);
	ck_assert_int_eq(st.st_gid, 65534);
}
END_TEST

START_TEST(test_logs_transitions_and_open_warning)
{
	int a;

	util_start_logged(&h, "[cbd]\nopen_warning_interval = 1\nlog_timestamps = 1\n", NULL,
	    log_path);
	a = harness_connect(&h);
	json_decref(
	    util_call(a, "{\"op\":\"set_state\",\"name\":\"pay \\\"q\\\"\",\"state\":\"open\"}"));
	json_decref(util_call(a,
	    "{\"op\":\"record_failure\",\"name\":\"t\",\"ctx\":{\"failure_threshold\":1}}"));
	/* Open, but its break is over: not "still open". */
	json_decref(util_call(a,
	    "{\"op\":\"record_failure\",\"name\":\"over\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":1}}"));
	ck_assert(util_wait_file(log_path,
	    "info: circuit \"pay \\\"q\\\"\": closed -> open (forced by an operator)"));
	ck_assert(util_wait_file(log_path,
	    "info: circuit \"t\": closed -> open (failure threshold reached)"));
	ck_assert(util_wait_file(log_path, "warning: 2 circuits still open: "));
	ck_assert(util_wait_file(log_path, "\"pay \\\"q\\\"\""));
	/* (3 if "over", whose break is over, were listed.) */
	/* log_timestamps: "YYYY-MM-DD HH:MM:SS.mmm info: ...". */
	{
		FILE *f = fopen(log_path, "r");
		char line[4096];

		ck_assert_ptr_nonnull(f);
		ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
		fclose(f);
		ck_assert_msg(strlen(line) > 24 && line[4] == '-' && line[10] == ' ' &&
			line[19] == '.' && line[23] == ' ',
		    "no timestamp: %s", line);
	}
	close(a);
}
END_TEST

/* The first line of the log (wait for one first). */
static void
first_log_line(char *line, size_t size)
{
	FILE *f;

	ck_assert(util_wait_file(log_path, "info: "));
	f = fopen(log_path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(line, (int)size, f));
	fclose(f);
}

/* Default logs: the time on each line unless stderr is the journal, told
 * by JOURNAL_STREAM naming stderr's device and inode (not by its mere
 * presence). */
START_TEST(test_log_timestamps_unless_journal)
{
	char env[64], line[4096];
	const char *envs[] = { env, NULL };
	harness_opts opts = { .log_path = log_path, .env = envs };
	struct stat st;

	/* JOURNAL_STREAM names another file: not the journal, stamped. */
	snprintf(env, sizeof env, "JOURNAL_STREAM=1:1");
	ck_assert(harness_start_opts(&h, NULL, &opts));
	first_log_line(line, sizeof line);
	ck_assert_msg(strlen(line) > 24 && line[4] == '-' && line[10] == ' ' && line[19] == '.' &&
		line[23] == ' ' && strncmp(line + 24, "info: ", 6) == 0,
	    "no timestamp: %s", line);
	harness_stop(&h);
	/* stderr is what JOURNAL_STREAM names: the journal's <N> prefix and
	 * no time (journald stamps lines). */
	ck_assert_int_eq(truncate(log_path, 0), 0);
	ck_assert_int_eq(stat(log_path, &st), 0);
	snprintf(env, sizeof env, "JOURNAL_STREAM=%llu:%llu", (unsigned long long)st.st_dev,
	    (unsigned long long)st.st_ino);
	ck_assert(harness_start_opts(&h, NULL, &opts));
	first_log_line(line, sizeof line);
	ck_assert_msg(strncmp(line, "<6>info: ", 9) == 0, "not a journal line: %s", line);
}
END_TEST

/* log_format = json: every line one JSON object with time, level, msg,
 * and a state change's and an audit's fields. */
START_TEST(test_log_format_json)
{
	bool change = false, audit = false;
	char line[4096];
	int a, lines = 0;
	FILE *f;

	util_start_logged(&h, "[cbd]\nlog_format = json\n", NULL, log_path);
	a = harness_connect(&h);
	json_decref(util_call(a,
	    "{\"op\":\"set_state\",\"name\":\"j "
	    "\\\"q\\\"\\u00e9\",\"state\":\"open\",\"hold\":true,\"reason\":"
	    "\"INC-1\"}"));
	ck_assert(util_wait_file(log_path, "\"from\":\"closed\",\"to\":\"open\""));
	close(a);
	f = fopen(log_path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof line, f) != NULL) {
		json_error_t err;
		json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &err);
		const char *time = json_string_value(json_object_get(o, "time"));
		const char *circuit = json_string_value(json_object_get(o, "circuit"));

		ck_assert_msg(json_is_object(o), "not a JSON object (%s): %s", err.text, line);
		ck_assert_msg(time != NULL && strlen(time) == 24 && time[10] == 'T' &&
			time[23] == 'Z',
		    "time: %s", line);
		ck_assert_msg(json_is_string(json_object_get(o, "level")) &&
			json_is_string(json_object_get(o, "msg")),
		    "level, msg: %s", line);
		if (circuit != NULL && json_object_get(o, "to") != NULL) {
			ck_assert_str_eq(circuit, "j \"q\"\xc3\xa9");
			ck_assert_str_eq(json_string_value(json_object_get(o, "from")), "closed");
			ck_assert_str_eq(json_string_value(json_object_get(o, "to")), "open");
			ck_assert_str_eq(json_string_value(json_object_get(o, "level")), "info");
			change = true;
		}
		if (json_object_get(o, "audit") != NULL) {
			ck_assert_msg(json_is_integer(json_object_get(o, "uid")), "uid: %s", line);
			ck_assert_str_eq(circuit, "j \"q\"\xc3\xa9");
			ck_assert_str_eq(json_string_value(json_object_get(o, "reason")), "INC-1");
			audit = true;
		}
		json_decref(o);
		lines++;
	}
	fclose(f);
	ck_assert_msg(change && audit && lines >= 3, "%d lines, change %d, audit %d", lines, change,
	    audit);
}
END_TEST

#ifdef HAVE_SYSTEMD
/* A datagram socket standing in for systemd's notify socket. */
static int
notify_listen(char *path, size_t size, char *dir, size_t dir_size)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	snprintf(dir, dir_size, "/tmp/cbd-notify-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, size, "%s/notify", dir);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	memcpy(sa.sun_path, path, strlen(path));
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	return fd;
}

/* The next notify message (bounded wait); must start with want. */
static void
expect_notify(int fd, const char *want)
{
	char buf[512];
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	ck_assert_msg(poll(&p, 1, harness_timeout_ms()) == 1, "no notify message (want %s)", want);
	n = recv(fd, buf, sizeof buf - 1, 0);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	ck_assert_msg(strncmp(buf, want, strlen(want)) == 0, "got \"%s\", want \"%s\"", buf, want);
}

START_TEST(test_sd_notify)
{
	char path[128], dir[64], env[200];
	const char *envs[] = { env, NULL };
	harness_opts opts = { .env = envs };
	int nfd = notify_listen(path, sizeof path, dir, sizeof dir);
	int st;

	snprintf(env, sizeof env, "NOTIFY_SOCKET=%s", path);
	ck_assert(harness_start_opts(&h, NULL, &opts));
	expect_notify(nfd, "READY=1");
	kill(h.pid, SIGHUP);
	expect_notify(nfd, "RELOADING=1\nMONOTONIC_USEC=");
	expect_notify(nfd, "READY=1");
	kill(h.pid, SIGTERM);
	expect_notify(nfd, "STOPPING=1");
	st = harness_wait(&h);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	close(nfd);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(test_socket_activation)
{
	const char *activate = "/usr/bin/systemd-socket-activate";
	char path[128], dir[64], env[200];
	const char *prefix[] = { activate, "-l", "@SOCKET@", "-E", env, NULL };
	harness_opts opts = { .prefix = prefix, .no_socket_arg = true, .log_path = log_path };
	int nfd, a;
	json_t *r;

	if (access(activate, X_OK) != 0) {
		fprintf(stderr, "test_socket_activation: %s missing, not run\n", activate);
		return;
	}
	nfd = notify_listen(path, sizeof path, dir, sizeof dir);
	snprintf(env, sizeof env, "NOTIFY_SOCKET=%s", path);
	ck_assert(harness_start_opts(&h, NULL, &opts));
	a = harness_connect(&h);
	r = util_call(a, "{\"op\":\"hello\"}");
	ck_assert_msg(r != NULL && util_code(r) == NULL, "no answer through the inherited socket");
	json_decref(r);
	expect_notify(nfd, "READY=1");
	ck_assert(util_wait_file(log_path, "(socket activation)"));
	close(a);
	harness_stop(&h);
	close(nfd);
	unlink(path);
	rmdir(dir);
}
END_TEST
#endif

static Suite *
lifecycle_suite(void)
{
	Suite *s = suite_create("cbd-lifecycle");
	TCase *tc = tcase_create("lifecycle");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_sigterm_flushes_and_removes_socket);
	tcase_add_test(tc, test_sigint_stops_too);
	tcase_add_test(tc, test_shutting_down_for_lines_sent_before_stop);
	tcase_add_test(tc, test_sighup_reload);
	tcase_add_test(tc, test_sighup_limits_apply);
	tcase_add_test(tc, test_stale_socket_replaced);
	tcase_add_test(tc, test_live_socket_refused);
	tcase_add_test(tc, test_not_a_socket_refused);
	tcase_add_test(tc, test_socket_mode);
	tcase_add_test(tc, test_logs_transitions_and_open_warning);
	tcase_add_test(tc, test_log_timestamps_unless_journal);
	tcase_add_test(tc, test_log_format_json);
#ifdef HAVE_SYSTEMD
	tcase_add_test(tc, test_sd_notify);
	tcase_add_test(tc, test_socket_activation);
#endif
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return check_run(lifecycle_suite(), NULL);
}
