/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon-util.c — helpers for cbd's integration tests (see daemon-util.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "daemon-util.h"

json_t *
util_call(int fd, const char *fmt, ...)
{
	static char reply[UTIL_REPLY_SIZE];
	static char line[1 << 18];
	json_error_t err;
	va_list ap;
	json_t *v;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (!harness_request(fd, line, reply, sizeof reply)) {
		fprintf(stderr, "util_call: no reply to %.200s\n", line);
		return NULL;
	}
	v = json_loads(reply, 0, &err);
	if (v == NULL)
		fprintf(stderr, "util_call: bad reply %.200s: %s\n", reply, err.text);
	return v;
}

const json_t *
util_get(const json_t *obj, const char *path)
{
	char key[128];

	while (obj != NULL && *path != '\0') {
		const char *dot = strchr(path, '.');
		size_t n = dot != NULL ? (size_t)(dot - path) : strlen(path);

		snprintf(key, sizeof key, "%.*s", (int)n, path);
		/* A number indexes an array ("policy_conflict.0"). */
		if (json_is_array(obj) && key[0] >= '0' && key[0] <= '9')
			obj = json_array_get(obj, (size_t)strtoul(key, NULL, 10));
		else
			obj = json_object_get(obj, key);
		path += n;
		if (*path == '.')
			path++;
	}
	return obj;
}

json_t *
util_call_ok_at(int line, int fd, const char *fmt, ...)
{
	static char req[1 << 18];
	va_list ap;
	json_t *r;

	va_start(ap, fmt);
	vsnprintf(req, sizeof req, fmt, ap);
	va_end(ap);
	r = util_call(fd, "%s", req);
	ck_assert_msg(r != NULL, "line %d: no reply to %.200s", line, req);
	ck_assert_msg(util_code(r) == NULL, "line %d: %.200s failed: %s", line, req,
	    util_str(r, "error.message"));
	return r;
}

const char *
util_code(const json_t *reply)
{
	if (json_is_true(json_object_get(reply, "ok")))
		return NULL;
	return util_str(reply, "error.code");
}

int64_t
util_int(const json_t *obj, const char *path)
{
	const json_t *v = util_get(obj, path);

	return json_is_integer(v) ? json_integer_value(v) : INT64_MIN;
}

bool
util_bool(const json_t *obj, const char *path)
{
	return json_is_true(util_get(obj, path));
}

const char *
util_str(const json_t *obj, const char *path)
{
	const json_t *v = util_get(obj, path);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

bool
util_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* Poll stats until member path is want (or, at_least, no less). */
static bool
stats_poll(int conn, const char *path, int64_t want, bool at_least)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();

	do {
		json_t *r = util_call(conn, "{\"op\":\"stats\"}");
		int64_t v = util_int(r, path);

		json_decref(r);
		if (v == want || (at_least && v > want))
			return true;
		usleep(5000);
	} while (harness_mono_ms() < deadline);
	return false;
}

bool
util_stats_reach(int conn, const char *path, int64_t want)
{
	return stats_poll(conn, path, want, false);
}

bool
util_stats_reach_min(int conn, const char *path, int64_t least)
{
	return stats_poll(conn, path, least, true);
}

bool
util_stats_reach_str(int conn, const char *path, const char *want)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();

	do {
		json_t *r = util_call(conn, "{\"op\":\"stats\"}");
		const char *v = util_str(r, path);
		bool same = v != NULL && strcmp(v, want) == 0;

		json_decref(r);
		if (same)
			return true;
		usleep(5000);
	} while (harness_mono_ms() < deadline);
	return false;
}

bool
util_read_line(int fd, char *buf, size_t size)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	size_t got = 0;

	while (got + 1 < size) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = deadline - harness_mono_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		n = read(fd, buf + got, 1);
		if (n <= 0)
			return false;
		if (buf[got] == '\n') {
			buf[got] = '\0';
			return true;
		}
		got++;
	}
	return false;
}

bool
util_wait_eof(int fd)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	char buf[4096];

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = deadline - harness_mono_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		n = read(fd, buf, sizeof buf);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
		if (n < 0)
			return false;
	}
}

json_t *
util_next_json(int fd, const char *what)
{
	static char line[UTIL_REPLY_SIZE];
	json_t *v;

	ck_assert_msg(util_read_line(fd, line, sizeof line), "no %s", what);
	v = json_loads(line, 0, NULL);
	ck_assert_msg(v != NULL, "not JSON: %.200s", line);
	return v;
}

json_t *
util_next_event(int fd, const char *event, const char *name, const char *from, const char *state)
{
	json_t *e = util_next_json(fd, "event");

	ck_assert_str_eq(util_str(e, "event"), event);
	if (name != NULL)
		ck_assert_str_eq(util_str(e,
				     strcmp(event, "delete") == 0 ? "name" : "snapshot.name"),
		    name);
	if (from != NULL)
		ck_assert_str_eq(util_str(e, "from"), from);
	if (state != NULL)
		ck_assert_str_eq(util_str(e, "snapshot.state"), state);
	return e;
}

int
util_run(const char *const *argv, char *out, size_t size)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	size_t got = 0;
	int pipefd[2], status;
	pid_t pid;

	if (pipe(pipefd) != 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pipefd[1], STDOUT_FILENO);
		dup2(pipefd[1], STDERR_FILENO);
		close(pipefd[0]);
		close(pipefd[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(pipefd[1]);
	for (;;) {
		struct pollfd p = { .fd = pipefd[0], .events = POLLIN };
		long long left = deadline - harness_mono_ms();
		char sink[256];
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		if (got + 1 < size)
			n = read(pipefd[0], out + got, size - 1 - got);
		else
			n = read(pipefd[0], sink, sizeof sink);
		if (n <= 0)
			break;
		if (got + 1 < size)
			got += (size_t)n;
	}
	if (size > 0)
		out[got] = '\0';
	close(pipefd[0]);
	while (harness_mono_ms() < deadline) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

bool
util_wait_file(const char *path, const char *text)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	static char buf[1 << 20];

	while (harness_mono_ms() < deadline) {
		FILE *f = fopen(path, "r");

		if (f != NULL) {
			size_t n = fread(buf, 1, sizeof buf - 1, f);

			fclose(f);
			buf[n] = '\0';
			if (strstr(buf, text) != NULL)
				return true;
		}
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
	return false;
}

void
util_log_create(char path[UTIL_LOG_PATH_SIZE])
{
	int fd;

	snprintf(path, UTIL_LOG_PATH_SIZE, "/tmp/cbd-log-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
}

void
util_start_logged(cbd_harness *h, const char *config, const char *const *args, const char *log_path)
{
	harness_opts opts = { .log_path = log_path, .args = args };

	ck_assert_msg(harness_start_opts(h, config, &opts), "cbd did not start");
}

int
util_log_count(const char *path, const char *text)
{
	static char line[8192];
	FILE *f = fopen(path, "r");
	int n = 0;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof line, f) != NULL) {
		if (strstr(line, text) != NULL)
			n++;
	}
	fclose(f);
	return n;
}

bool
util_path_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

void
util_start_conn(cbd_harness *h, int *fd, const char *config)
{
	ck_assert_msg(harness_start(h, config), "cbd did not start");
	*fd = harness_connect(h);
	ck_assert_int_ge(*fd, 0);
}

void
util_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void
util_stop_conn(cbd_harness *h, int *fd)
{
	util_close(fd);
	harness_stop(h);
}

bool
util_request_as(const cbd_harness *h, unsigned uid, unsigned gid, const char *line, char *reply,
    size_t size)
{
	int pipefd[2], status;
	size_t got = 0;
	pid_t pid;

	if (pipe(pipefd) != 0)
		return false;
	pid = fork();
	if (pid < 0)
		return false;
	if (pid == 0) {
		char buf[4096];
		int fd;

		close(pipefd[0]);
		if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
			_exit(2);
		fd = harness_connect(h);
		if (fd < 0 || !harness_request(fd, line, buf, sizeof buf))
			_exit(3);
		if (write(pipefd[1], buf, strlen(buf)) < 0)
			_exit(4);
		_exit(0);
	}
	close(pipefd[1]);
	for (;;) {
		ssize_t n = read(pipefd[0], reply + got, size - 1 - got);

		if (n <= 0)
			break;
		got += (size_t)n;
		if (got + 1 >= size)
			break;
	}
	reply[got] = '\0';
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int
util_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof sa;
	int s = socket(AF_INET, SOCK_STREAM, 0), p;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert_int_eq(getsockname(s, (struct sockaddr *)&sa, &len), 0);
	p = ntohs(sa.sin_port);
	close(s);
	return p;
}

bool
util_http_dechunk(char *body)
{
	char *in = body, *out = body, *end;

	for (;;) {
		unsigned long size = strtoul(in, &end, 16);

		if (end == in || strncmp(end, "\r\n", 2) != 0)
			return false;
		in = end + 2;
		if (size == 0) {
			*out = '\0';
			return strcmp(in, "\r\n") == 0;
		}
		if (strlen(in) < size + 2 || strncmp(in + size, "\r\n", 2) != 0)
			return false;
		memmove(out, in, size);
		out += size;
		in += size + 2;
	}
}

void
util_start_metrics(cbd_harness *h, int *fd, int *port, const char *extra)
{
	char config[512];

	*port = util_free_port();
	snprintf(config, sizeof config, "[cbd]\nmetrics_listen = 127.0.0.1:%d\n%s", *port, extra);
	util_start_conn(h, fd, config);
}
