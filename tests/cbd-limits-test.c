/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-limits-test.c — every peer bounded (issue 9), against a real cbd:
 * the output bound per reply, idle connections, the descriptor limit,
 * the socket removed only while it is cbd's own, rate-limited and escaped
 * logs, whole reply lines only, and a pipelining non-reader dropped while
 * others are served.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

/* Built with AddressSanitizer (which holds freed memory in quarantine)?
 * gcc says so with __SANITIZE_ADDRESS__, clang with __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

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

/* Send n lines "<before><number, 5 digits><after>\n" in batches, reading
 * every reply; each must be ok. */
static void
pipeline_ok(int fd, const char *before, const char *after, int n)
{
	enum { BATCH = 100 }; /* replies of a batch fit max_output_bytes */
	static char buf[BATCH * 256], reply[65536];

	for (int i = 0; i < n; i += BATCH) {
		int m = n - i < BATCH ? n - i : BATCH;
		size_t len = 0;

		for (int j = 0; j < m; j++)
			len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%05d%s\n", before,
			    i + j, after);
		ck_assert(util_write_all(fd, buf, len));
		for (int j = 0; j < m; j++) {
			ck_assert_msg(util_read_line(fd, reply, sizeof reply), "reply %d missing",
			    i + j);
			ck_assert_msg(strstr(reply, "\"ok\":true") != NULL, "reply %d: %s", i + j,
			    reply);
		}
	}
}

/* A kB figure ("VmHWM") from /proc/pid/status; -1 when absent. */
static long
proc_status_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
			v = strtol(line + flen + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

/* Descriptors pid has open. */
static int
proc_fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] != '.')
			n++;
	}
	closedir(d);
	return n;
}

/* Read fd to EOF (bounded wait) into a malloc'd buffer; *len its size. */
static char *
read_to_eof(int fd, size_t *len, int pause_ms, size_t chunk)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	size_t cap = 1 << 20, got = 0;
	char *buf = malloc(cap);

	ck_assert_ptr_nonnull(buf);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = deadline - harness_mono_ms();
		ssize_t n;

		ck_assert_msg(left > 0 && poll(&p, 1, (int)left) == 1, "no EOF in time");
		if (got + chunk > cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		n = read(fd, buf + got, chunk);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			break;
		ck_assert_msg(n > 0, "read: %s", strerror(errno));
		got += (size_t)n;
		if (pause_ms > 0)
			harness_sleep_ms(pause_ms);
	}
	*len = got;
	return buf;
}

/* Every byte of buf[len] is in whole lines, each a JSON object; returns
 * how many lines. */
static int
assert_whole_lines(const char *buf, size_t len)
{
	size_t start = 0;
	int lines = 0;

	ck_assert_msg(len == 0 || buf[len - 1] == '\n', "the last line was cut (%zu bytes)", len);
	while (start < len) {
		const char *nl = memchr(buf + start, '\n', len - start);
		size_t end = (size_t)(nl - buf);
		json_error_t err;
		json_t *v = json_loadb(buf + start, end - start, 0, &err);

		ck_assert_msg(json_is_object(v), "line %d is not a JSON object: %.80s", lines,
		    buf + start);
		json_decref(v);
		lines++;
		start = end + 1;
	}
	return lines;
}

START_TEST(test_socket_replaced_by_a_file_is_kept)
{
	int fd, st;

	util_start_logged(&h, NULL, NULL, log_path);
	ck_assert_int_eq(unlink(h.socket_path), 0);
	fd = open(h.socket_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	kill(h.pid, SIGTERM);
	st = harness_wait(&h);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	ck_assert_msg(util_path_exists(h.socket_path), "cbd removed a file it did not create");
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

	util_start_logged(&h, NULL, NULL, log_path);
	/* Someone removes A's socket and B binds the same path. */
	snprintf(sock, sizeof sock, "%s", h.socket_path);
	ck_assert_int_eq(unlink(sock), 0);
	opts.socket = sock;
	ck_assert(harness_start_opts(&b, NULL, &opts));
	kill(h.pid, SIGTERM);
	st = harness_wait(&h);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	ck_assert_msg(util_path_exists(sock), "stopping A removed B's socket");
	fd = connect_ok(&b);
	call_ok(fd, "{\"op\":\"hello\"}");
	close(fd);
	harness_stop(&b);
	ck_assert_msg(!util_path_exists(sock), "B left its own socket behind");
}
END_TEST

/* Hole 1: with 20 000 circuits, one write of 5000 list lines from a client
 * that reads nothing. Each reply is checked against max_output_bytes
 * before it is queued: the connection is dropped, the rest of its lines
 * are not answered, memory stays near the bound, another client is served
 * meanwhile, and what the dropped client does read is whole lines. (list
 * also sizes its reply to what is queued, so once the bound is near most
 * replies are short truncated lists: it takes a few thousand lines, not a
 * few, to pass it.) */
START_TEST(test_list_flood_dropped_per_reply)
{
	enum { CIRCUITS = 20000, LISTS = 5000, MAX_OUTPUT = 262144 };
	static const char *const config = "[cbd]\nmax_output_bytes = 262144\n";
	static char flood[LISTS * 16];
	size_t len = 0, got;
	long hwm_before, hwm_after;
	int a, b, f, lines;
	json_t *r;
	char *buf;

	util_start_logged(&h, config, NULL, log_path);
	a = connect_ok(&h);
	b = connect_ok(&h);
	pipeline_ok(a, "{\"op\":\"record_failure\",\"name\":\"flood-", "\"}", CIRCUITS);
	/* One list read in full first: the peak of building one reply is in
	 * the baseline. */
	r = util_call(a, "{\"op\":\"list\"}");
	ck_assert(r != NULL && util_bool(r, "truncated"));
	json_decref(r);
	hwm_before = proc_status_kb(h.pid, "VmHWM");
	ck_assert_int_gt(hwm_before, 0);

	for (int i = 0; i < LISTS; i++)
		len += (size_t)snprintf(flood + len, sizeof flood - len, "{\"op\":\"list\"}\n");
	f = connect_ok(&h);
	ck_assert(util_write_all(f, flood, len));
	/* Another client is answered meanwhile. */
	r = util_call(b, "{\"op\":\"get\",\"name\":\"flood-00001\"}");
	ck_assert(r != NULL && util_code(r) == NULL);
	json_decref(r);
	ck_assert(util_stats_reach(b, "limits.max_output_bytes", 1));
	/* The dropped client reads whole lines, then EOF; far from all. */
	buf = read_to_eof(f, &got, 0, 65536);
	lines = assert_whole_lines(buf, got);
	free(buf);
	ck_assert_int_lt(lines, LISTS);
	r = util_call(b, "{\"op\":\"stats\"}");
	ck_assert_ptr_nonnull(r);
	/* The lines after the drop were not answered. */
	ck_assert_int_lt(util_int(r, "ops.list.requests"), 1 + LISTS);
	ck_assert_int_eq(util_int(r, "circuits"), CIRCUITS);
	json_decref(r);
	hwm_after = proc_status_kb(h.pid, "VmHWM");
	/* Peak memory: what was queued stays within a few times the bound
	 * (1 MiB of slack for malloc). ASan keeps freed memory, so not there. */
	ck_assert_msg(SANITIZED || hwm_after <= hwm_before + 3 * MAX_OUTPUT / 1024 + 1024,
	    "peak RSS %ld kB, was %ld kB before the flood", hwm_after, hwm_before);
	ck_assert_int_eq(util_log_count(log_path, "would pass max_output_bytes"), 1);
	close(f);
	close(b);
	close(a);
}
END_TEST

/* Hole 8: a client pipelining 100k requests and reading nothing is dropped,
 * while another client's 100 requests are all answered. */
START_TEST(test_pipelining_non_reader_dropped)
{
	enum { REQUESTS = 100000, BATCH = 1000 };
	int b, f, status = -1;
	long long deadline;
	pid_t writer;

	util_start_logged(&h, "[cbd]\nmax_output_bytes = 65536\n", NULL, log_path);
	b = connect_ok(&h);
	f = connect_ok(&h);
	writer = fork();
	ck_assert_int_ge(writer, 0);
	if (writer == 0) {
		static char buf[BATCH * 32];
		size_t len = 0;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; i < BATCH; i++)
			len += (size_t)snprintf(buf + len, sizeof buf - len,
			    "{\"op\":\"get\",\"name\":\"p\"}\n");
		/* Blocks once cbd stops reading; fails once it has closed. */
		for (int i = 0; i < REQUESTS / BATCH; i++) {
			if (!util_write_all(f, buf, len))
				_exit(0);
		}
		_exit(1);
	}
	for (int i = 0; i < 100; i++) {
		json_t *r = util_call(b, "{\"id\":%d,\"op\":\"get\",\"name\":\"other\"}", i);

		ck_assert_msg(r != NULL && util_code(r) == NULL, "get %d not answered", i);
		ck_assert_int_eq(util_int(r, "id"), i);
		json_decref(r);
	}
	ck_assert(util_stats_reach(b, "limits.max_output_bytes", 1));
	ck_assert(util_stats_reach(b, "connections.current", 1));
	deadline = harness_mono_ms() + harness_timeout_ms();
	while (harness_mono_ms() < deadline && waitpid(writer, &status, WNOHANG) != writer)
		harness_sleep_ms(5);
	if (!WIFEXITED(status)) {
		kill(writer, SIGKILL);
		waitpid(writer, &status, 0);
	}
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "the writer was never cut off (status %d)", status);
	close(f);
	close(b);
}
END_TEST

/* client_idle_ms: 64 connections that never send a byte hold
 * max_connections = 64 only until they are idle that long. */
START_TEST(test_idle_connections_closed)
{
	enum { N = 64 };
	int idle[N], extra, c;
	char line[4096];
	json_t *r;

	util_start_logged(&h, "[cbd]\nmax_connections = 64\nclient_idle_ms = 300\n", NULL,
	    log_path);
	for (int i = 0; i < N; i++)
		idle[i] = connect_ok(&h);
	/* Full: one more is refused. */
	extra = connect_ok(&h);
	ck_assert(util_read_line(extra, line, sizeof line));
	ck_assert_msg(strstr(line, "\"capacity\"") != NULL, "got %s", line);
	close(extra);
	for (int i = 0; i < N; i++) {
		ck_assert_msg(util_wait_eof(idle[i]), "idle connection %d not closed", i);
		close(idle[i]);
	}
	c = connect_ok(&h);
	r = util_call(c, "{\"op\":\"stats\"}");
	ck_assert(r != NULL && util_code(r) == NULL);
	/* All of them, but the last one may have been refused instead when
	 * the harness's own probe connection was not yet seen closed. */
	ck_assert_int_ge(util_int(r, "limits.client_idle_ms"), N - 1);
	json_decref(r);
	close(c);
}
END_TEST

/* client_idle_ms is reloadable: off at start, a quiet connection stays;
 * after SIGHUP turns it on, the connection is closed. */
START_TEST(test_idle_reload)
{
	int c;
	FILE *f;

	util_start_logged(&h, NULL, NULL, log_path);
	c = connect_ok(&h);
	call_ok(c, "{\"op\":\"hello\"}");
	f = fopen(h.config_path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("[cbd]\nclient_idle_ms = 200\n", f);
	ck_assert_int_eq(fclose(f), 0);
	kill(h.pid, SIGHUP);
	ck_assert(util_wait_file(log_path, "configuration reloaded"));
	ck_assert_msg(util_wait_eof(c), "idle connection not closed after reload");
	close(c);
	c = connect_ok(&h);
	ck_assert(util_stats_reach(c, "limits.client_idle_ms", 1));
	close(c);
}
END_TEST

/* Connect n clients first, then have each send hello and read one line:
 * an answer, or the capacity refusal. Every client gets one or the other;
 * returns how many were served (fds stay open in fds). */
static int
connect_all_answered(int *fds, int n)
{
	static char line[4096];
	int served = 0;

	for (int i = 0; i < n; i++)
		fds[i] = connect_ok(&h);
	for (int i = 0; i < n; i++) {
		/* A refused client may find the socket closed already. */
		(void)!send(fds[i], "{\"op\":\"hello\"}\n", 15, MSG_NOSIGNAL);
		ck_assert_msg(util_read_line(fds[i], line, sizeof line),
		    "client %d got neither service nor a capacity line", i);
		if (strstr(line, "\"ok\":true") != NULL)
			served++;
		else
			ck_assert_msg(strstr(line, "\"capacity\"") != NULL, "client %d: %s", i,
			    line);
	}
	return served;
}

/* Hole 4: under a descriptor limit of 64, max_connections (1024) is
 * clamped at start; 100 clients each get service or a capacity line. */
START_TEST(test_fd_limit_clamps_max_connections)
{
	static const char *const prefix[] = { "prlimit", "--nofile=64:64", NULL };
	harness_opts opts = { .log_path = log_path, .prefix = prefix };
	enum { N = 100 };
	int fds[N], served;

	ck_assert(harness_start_opts(&h, NULL, &opts));
	served = connect_all_answered(fds, N);
	ck_assert_int_gt(served, 0);
	ck_assert_int_lt(served, N);
	ck_assert(util_wait_file(log_path, "serving at most"));
	for (int i = 0; i < N; i++)
		close(fds[i]);
}
END_TEST

/* Out of descriptors at accept (the limit lowered under a running cbd):
 * waiting clients still get their capacity line, the condition is logged
 * at most about once a second, and accepting resumes once clients leave. */
START_TEST(test_emfile_refuses_with_capacity)
{
	enum { N = 80, LIMIT = 40 };
	struct rlimit rl = { LIMIT, LIMIT };
	int fds[N], served, c, warnings;
	long long started;
	json_t *r;

	util_start_logged(&h, NULL, NULL, log_path);
	/* cbd accepts connections (the harness's probe) as soon as it
	 * listens, before it sets its descriptor limit and max_connections
	 * from it; it logs "listening" after. A limit lowered before that
	 * would make max_connections refuse the clients instead. */
	ck_assert(util_wait_file(log_path, " listening on "));
	started = harness_mono_ms();
	ck_assert_int_eq(prlimit(h.pid, RLIMIT_NOFILE, &rl, NULL), 0);
	served = connect_all_answered(fds, N);
	ck_assert_int_gt(served, 0);
	ck_assert_int_lt(served, N);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	c = connect_ok(&h);
	r = util_call(c, "{\"op\":\"stats\"}");
	ck_assert(r != NULL && util_code(r) == NULL);
	ck_assert_int_eq(util_int(r, "limits.descriptors"), N - served);
	json_decref(r);
	close(c);
	warnings = util_log_count(log_path, "refusing new clients until a descriptor frees");
	ck_assert_int_ge(warnings, 1);
	ck_assert_int_le(warnings, 1 + (harness_mono_ms() - started) / 1000);
}
END_TEST

/* 2000 connects against max_connections = 1024 leave cbd's descriptor
 * count where it started. */
START_TEST(test_fd_count_after_2000_connects)
{
	enum { N = 2000 };
	static int fds[N];
	int c, before, after;

	util_start_logged(&h, NULL, NULL, log_path);
	c = connect_ok(&h);
	call_ok(c, "{\"op\":\"hello\"}");
	before = proc_fd_count(h.pid);
	for (int i = 0; i < N; i++)
		fds[i] = connect_ok(&h);
	/* c and 1023 of them are served, the others refused. */
	ck_assert(util_stats_reach(c, "limits.max_connections", N - 1023));
	for (int i = 0; i < N; i++)
		close(fds[i]);
	ck_assert(util_stats_reach(c, "connections.current", 1));
	after = proc_fd_count(h.pid);
	ck_assert_int_eq(after, before);
	close(c);
}
END_TEST

/* Hole 7: a slow reader with a backlog of replies while cbd stops. When
 * the drain time is up cbd gives up the lines not begun but finishes the
 * one partly written: the reader gets only whole lines, then EOF. */
START_TEST(test_whole_lines_at_shutdown)
{
	enum { N = 3000, SLOW_CHUNK = 4096, SLOW_PAUSE_MS = 200, DRAIN_MS = 5000 };
	long long slow_until;
	size_t got, len = 0;
	char *buf;
	int s, lines;

	util_start_logged(&h, "[cbd]\nmax_output_bytes = 16777216\n", NULL, log_path);
	s = connect_ok(&h);
	buf = malloc((size_t)N * 64);
	ck_assert_ptr_nonnull(buf);
	for (int i = 0; i < N; i++)
		len += (size_t)sprintf(buf + len, "{\"id\":%d,\"op\":\"get\",\"name\":\"w\"}\n", i);
	ck_assert(util_write_all(s, buf, len));
	free(buf);
	{
		int c = connect_ok(&h);

		ck_assert(util_stats_reach(c, "ops.get.requests", N));
		close(c);
	}
	kill(h.pid, SIGTERM);
	/* A bit at a time until the drain time has passed, then the rest. */
	slow_until = harness_mono_ms() + DRAIN_MS + 1000;
	buf = malloc(1 << 22);
	ck_assert_ptr_nonnull(buf);
	got = 0;
	while (harness_mono_ms() < slow_until) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		ssize_t n;

		ck_assert(poll(&p, 1, harness_timeout_ms()) == 1);
		n = read(s, buf + got, SLOW_CHUNK);
		ck_assert_int_gt(n, 0);
		got += (size_t)n;
		harness_sleep_ms(SLOW_PAUSE_MS);
	}
	{
		size_t rest_len;
		char *rest = read_to_eof(s, &rest_len, 0, 65536);

		ck_assert(got + rest_len <= (size_t)1 << 22);
		memcpy(buf + got, rest, rest_len);
		got += rest_len;
		free(rest);
	}
	lines = assert_whole_lines(buf, got);
	ck_assert_int_gt(lines, 0);
	ck_assert_int_lt(lines, N); /* the drain time did pass mid-stream */
	free(buf);
	close(s);
	ck_assert_int_eq(harness_wait(&h), 0);
}
END_TEST

/* Hole 6: one circuit flapping 1000 times logs a bounded number of lines
 * and a summary of the rest. */
START_TEST(test_transition_logs_rate_limited)
{
	enum { FLAPS = 1000 };
	static char line[8192];
	long long suppressed = 0, counted;
	int c, logged;
	json_t *r;
	FILE *f;

	util_start_logged(&h, NULL, NULL, log_path);
	c = connect_ok(&h);
	for (int i = 0; i < FLAPS; i += 2) {
		call_ok(c, "{\"op\":\"set_state\",\"name\":\"flap\",\"state\":\"open\"}");
		call_ok(c, "{\"op\":\"set_state\",\"name\":\"flap\",\"state\":\"closed\"}");
	}
	ck_assert(util_stats_reach(c, "transitions", FLAPS));
	r = util_call(c, "{\"op\":\"stats\"}");
	ck_assert_ptr_nonnull(r);
	counted = util_int(r, "limits.transition_logs_suppressed");
	json_decref(r);
	close(c);
	harness_stop(&h); /* the summary of the last window is logged at exit */
	logged = util_log_count(log_path, "info: circuit \"flap\": ");
	/* At most 5 a window; the run may straddle a window or two. */
	ck_assert_int_ge(logged, 1);
	ck_assert_int_le(logged, 3 * 5);
	f = fopen(log_path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof line, f) != NULL) {
		const char *p = strstr(line, "info: suppressed ");
		long long n;

		if (p != NULL && strstr(p, " transitions of \"flap\" in the last ") != NULL &&
		    sscanf(p, "info: suppressed %lld", &n) == 1)
			suppressed += n;
	}
	fclose(f);
	ck_assert_int_eq(logged + suppressed, FLAPS);
	ck_assert_int_eq(counted, suppressed);
}
END_TEST

/* The sum of N over the log's "suppressed N <what>" summary lines. */
static long long
summed_suppressed(const char *what)
{
	static char line[8192];
	long long sum = 0, n;
	FILE *f = fopen(log_path, "r");

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof line, f) != NULL) {
		const char *p = strstr(line, "info: suppressed ");

		if (p != NULL && strstr(p, what) != NULL &&
		    sscanf(p, "info: suppressed %lld", &n) == 1)
			sum += n;
	}
	fclose(f);
	return sum;
}

/* Issue 28 item 6: a client opening a connection per request with a
 * conflicting ctx gets a bounded number of policy_conflict warnings and a
 * summary of the rest (it got one warning per request). */
START_TEST(test_policy_conflict_logs_rate_limited)
{
	enum { CONNS = 60 };
	long long counted, suppressed;
	int c, logged;
	json_t *r;

	util_start_logged(&h, NULL, NULL, log_path);
	c = connect_ok(&h);
	call_ok(c, "{\"op\":\"record_failure\",\"name\":\"pc\",\"ctx\":{\"failure_threshold\":2}}");
	for (int i = 0; i < CONNS; i++) {
		int k = connect_ok(&h);

		r = util_call(k,
		    "{\"op\":\"record_success\",\"name\":\"pc\","
		    "\"ctx\":{\"failure_threshold\":9}}");
		ck_assert_ptr_nonnull(r);
		ck_assert_str_eq(util_str(r, "policy_conflict.0"), "failure_threshold");
		json_decref(r);
		close(k);
	}
	r = util_call(c, "{\"op\":\"stats\"}");
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(util_int(r, "policy_conflicts"), CONNS);
	counted = util_int(r, "limits.policy_conflict_logs_suppressed");
	json_decref(r);
	close(c);
	harness_stop(&h); /* the summary of the last window is logged at exit */
	logged = util_log_count(log_path, "declares a policy that differs");
	/* At most 5 a window; the run may straddle a window or two. */
	ck_assert_int_ge(logged, 1);
	ck_assert_int_le(logged, 3 * 5);
	suppressed = summed_suppressed(" policy_conflict warnings of \"pc\" in the last ");
	ck_assert_int_eq(logged + suppressed, CONNS);
	ck_assert_int_eq(counted, suppressed);
}
END_TEST

/* Issue 28 item 6: a state file that cannot be written (here: a directory
 * at its journal's path; a full or read-only disk is the same) is retried
 * every tick, but its error is logged at most 5 times a window, the rest
 * summarized. */
START_TEST(test_state_file_errors_rate_limited)
{
	char dir[64] = "/tmp/cbd-statelog-XXXXXX", tmp[128], config[256];
	long long counted, suppressed;
	int c, logged;
	json_t *r;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(tmp, sizeof tmp, "%s/state.json.journal-0", dir);
	ck_assert_int_eq(mkdir(tmp, 0700), 0);
	snprintf(config, sizeof config, "[cbd]\nstate_file = %s/state.json\n", dir);
	util_start_logged(&h, config, NULL, log_path);
	c = connect_ok(&h);
	call_ok(c, "{\"op\":\"set_state\",\"name\":\"x\",\"state\":\"open\"}");
	/* Retried every housekeeping tick (100 ms): wait for 20 failures. */
	ck_assert(util_stats_reach_min(c, "state_write_failures", 20));
	r = util_call(c, "{\"op\":\"stats\"}");
	ck_assert_ptr_nonnull(r);
	counted = util_int(r, "limits.state_file_logs_suppressed");
	json_decref(r);
	ck_assert_int_ge(counted, 20 - 3 * 5);
	close(c);
	harness_stop(&h);
	/* The writer's lines (at most 5 a window). */
	logged = util_log_count(log_path, "state_file: cannot open");
	ck_assert_int_ge(logged, 1);
	ck_assert_int_le(logged, 3 * 5);
	suppressed = summed_suppressed(" state_file errors in the last ");
	ck_assert_int_ge(suppressed, counted);
	rmdir(tmp);
	rmdir(dir);
}
END_TEST

/* Hole 6: control bytes from clients reach the log escaped. */
START_TEST(test_control_bytes_escaped_in_log)
{
	static const char *const verbose[] = { "-v", NULL };
	static char text[1 << 20];
	size_t n;
	int c;
	FILE *f;

	util_start_logged(&h, NULL, verbose, log_path);
	c = connect_ok(&h);
	call_ok(c, "{\"op\":\"hello\",\"client\":\"a\\u0001b\\u007fc\\nd\"}");
	json_decref(util_call(c, "{\"op\":\"x\\u0002y\"}"));
	close(c);
	harness_stop(&h);
	f = fopen(log_path, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = '\0';
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(((unsigned char)text[i] >= 0x20 && text[i] != 0x7f) ||
			text[i] == '\n',
		    "raw byte 0x%02x in the log at %zu", (unsigned char)text[i], i);
	ck_assert_msg(strstr(text, "hello from \"a\\x01b\\x7fc\\x0ad\"") != NULL, "log: %s", text);
	ck_assert_msg(strstr(text, "x\\x02y") != NULL, "log: %s", text);
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
	tcase_add_test(tc, test_list_flood_dropped_per_reply);
	tcase_add_test(tc, test_pipelining_non_reader_dropped);
	tcase_add_test(tc, test_idle_connections_closed);
	tcase_add_test(tc, test_idle_reload);
	tcase_add_test(tc, test_fd_limit_clamps_max_connections);
	tcase_add_test(tc, test_emfile_refuses_with_capacity);
	tcase_add_test(tc, test_fd_count_after_2000_connects);
	tcase_add_test(tc, test_whole_lines_at_shutdown);
	tcase_add_test(tc, test_transition_logs_rate_limited);
	tcase_add_test(tc, test_policy_conflict_logs_rate_limited);
	if (getenv("CBD_TEST_REDIS_SOCKET") == NULL)
		tcase_add_test(tc, test_state_file_errors_rate_limited);
	tcase_add_test(tc, test_control_bytes_escaped_in_log);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return check_run(limits_suite(), NULL);
}
