/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-metrics-test.c — Prometheus metrics (protocol 2, §8) from a real
 * cbd: the metrics op and GET /metrics on metrics_listen give the same
 * series with the right values, the per-circuit cap, promtool accepts the
 * text (when promtool is installed), and metrics_listen refuses addresses
 * that are not loopback.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"

static cbd_harness h;
static int fd = -1;
static int port;

static void
teardown(void)
{
	util_stop_conn(&h, &fd);
}

static void
start(const char *extra)
{
	util_start_metrics(&h, &fd, &port, extra);
}

/* The text of the metrics op (a copy to free). */
static char *
metrics_op(void)
{
	json_t *r = util_call(fd, "{\"op\":\"metrics\"}");
	char *text;

	ck_assert_ptr_nonnull(util_str(r, "text"));
	text = strdup(util_str(r, "text"));
	json_decref(r);
	return text;
}

/* An HTTP request to cbd's metrics listener; the whole response. */
static char *
http_get(const char *path)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap), req[256];
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = { harness_timeout_ms() / 1000, 0 };
	ssize_t n;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	ck_assert_int_eq(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
	snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
	ck_assert(util_write_all(s, req, strlen(req)));
	while (len + 1 < cap && (n = read(s, buf + len, cap - len - 1)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(s);
	return buf;
}

/* The value of the sample line that starts with `series ` in text. */
static double
sample(const char *text, const char *series)
{
	char want[512];
	const char *p;

	snprintf(want, sizeof want, "\n%s ", series);
	p = strstr(text, want);
	ck_assert_msg(p != NULL, "no sample %s", series);
	return strtod(p + strlen(want), NULL);
}

/* Write text to a file descriptor (util_write_all is for sockets). */
static bool
file_write(int wfd, const char *text)
{
	size_t len = strlen(text);

	while (len > 0) {
		ssize_t n = write(wfd, text, len);

		if (n <= 0)
			return false;
		text += n;
		len -= (size_t)n;
	}
	return true;
}

static bool
has(const char *text, const char *what)
{
	return strstr(text, what) != NULL;
}

/* promtool, when installed, accepts the text. */
static void
promtool_accepts(const char *text)
{
	if (system("command -v promtool >/dev/null 2>&1") == 0) {
		char path[] = "/tmp/cbd-metrics-XXXXXX", cmd[256], out[4096];
		int tfd = mkstemp(path);

		ck_assert_int_ge(tfd, 0);
		ck_assert(file_write(tfd, text));
		close(tfd);
		snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
		{
			const char *argv[] = { "/bin/sh", "-c", cmd, NULL };

			ck_assert_msg(util_run(argv, out, sizeof out) == 0, "promtool: %s", out);
		}
		unlink(path);
	} else {
		fprintf(stderr, "promtool not installed: text format not checked\n");
	}
}

START_TEST(test_series_and_values)
{
	char *text, *http;

	start("[defaults]\nfailure_threshold = 2\n");
	json_decref(util_call(fd, "{\"op\":\"record_failure\",\"name\":\"pay\\\"ments\"}"));
	json_decref(util_call(fd, "{\"op\":\"record_failure\",\"name\":\"pay\\\"ments\"}"));
	json_decref(util_call(fd, "{\"op\":\"allow\",\"name\":\"pay\\\"ments\"}"));
	json_decref(util_call(fd, "{\"op\":\"record\",\"name\":\"ok\",\"outcome\":\"success\"}"));
	json_decref(util_call(fd, "{\"op\":\"get\",\"name\":\"\"}"));
	text = metrics_op();
	ck_assert_double_eq(sample(text, "cbd_up"), 1);
	ck_assert(has(text, "\ncbd_build_info{version=\""));
	ck_assert_double_eq(sample(text, "cbd_circuits{state=\"open\"}"), 1);
	ck_assert_double_eq(sample(text, "cbd_circuits{state=\"closed\"}"), 1);
	ck_assert_double_eq(sample(text, "cbd_circuits{state=\"half_open\"}"), 0);
	ck_assert_double_eq(sample(text, "cbd_circuit_state{name=\"pay\\\"ments\",state=\"open\"}"),
	    1);
	ck_assert_double_eq(sample(text,
				"cbd_circuit_state{name=\"pay\\\"ments\",state=\"closed\"}"),
	    0);
	ck_assert_double_eq(sample(text,
				"cbd_circuit_calls_total{name=\"pay\\\"ments\",outcome="
				"\"failure\"}"),
	    2);
	ck_assert_double_eq(sample(text,
				"cbd_circuit_calls_total{name=\"pay\\\"ments\",outcome="
				"\"rejected\"}"),
	    1);
	ck_assert_double_eq(sample(text,
				"cbd_circuit_calls_total{name=\"ok\",outcome=\"success\"}"),
	    1);
	ck_assert_double_eq(sample(text,
				"cbd_circuit_transitions_total{name=\"pay\\\"ments\","
				"from=\"closed\",to=\"open\"}"),
	    1);
	ck_assert_double_eq(sample(text, "cbd_requests_total{op=\"record_failure\"}"), 2);
	ck_assert_double_eq(sample(text, "cbd_errors_total{code=\"bad_request\"}"), 1);
	ck_assert_double_eq(sample(text, "cbd_connections"), 1);
	ck_assert_double_eq(sample(text, "cbd_slots"), 0);
	ck_assert_double_eq(sample(text, "cbd_metrics_circuits_omitted"), 0);
	ck_assert(has(text, "# TYPE cbd_circuit_calls_total counter\n"));
	/* The same over HTTP. */
	http = http_get("/metrics");
	ck_assert_msg(strncmp(http, "HTTP/1.0 200", 12) == 0 ||
		strncmp(http, "HTTP/1.1 200", 12) == 0,
	    "got %.60s", http);
	ck_assert(has(http, "Content-Type: text/plain; version=0.0.4"));
	ck_assert(has(http, "\ncbd_circuit_state{name=\"pay\\\"ments\",state=\"open\"} 1\n"));
	free(http);
	http = http_get("/nope");
	ck_assert(has(http, " 404 "));
	free(http);
	promtool_accepts(text);
	free(text);
}
END_TEST

/* Protocol 3, §4: in_flight for circuits with a limit only, the refusals
 * of the bulkhead and the retry budget, granted retries. */
START_TEST(test_bulkhead_series)
{
	static const char limited[] =
	    "{\"op\":\"allow\",\"name\":\"bh\",\"ctx\":{\"max_concurrent\":1,"
	    "\"retry_budget_percent\":0,\"retry_min_per_s\":0}%s}";
	char *text;
	json_t *r;

	start("");
	r = util_call(fd, limited, "");
	ck_assert(util_bool(r, "allowed"));
	json_decref(r);
	r = util_call(fd, limited, "");
	ck_assert_str_eq(util_str(r, "reason"), "concurrency");
	json_decref(r);
	r = util_call(fd, limited, ",\"retry\":true");
	ck_assert_str_eq(util_str(r, "reason"), "retry_budget");
	json_decref(r);
	for (int i = 0; i < 2; i++)
		json_decref(util_call(fd, "{\"op\":\"allow\",\"name\":\"free\",\"retry\":true}"));
	text = metrics_op();
	ck_assert_double_eq(sample(text, "cbd_circuit_in_flight{name=\"bh\"}"), 1);
	ck_assert(!has(text, "cbd_circuit_in_flight{name=\"free\"}"));
	ck_assert_double_eq(sample(text,
				"cbd_circuit_calls_total{name=\"bh\",outcome="
				"\"rejected_concurrency\"}"),
	    1);
	ck_assert_double_eq(sample(text,
				"cbd_circuit_calls_total{name=\"bh\",outcome=\"rejected_retry\"}"),
	    1);
	ck_assert_double_eq(sample(text,
				"cbd_circuit_calls_total{name=\"bh\",outcome=\"rejected\"}"),
	    0);
	ck_assert_double_eq(sample(text, "cbd_circuit_retries_total{name=\"free\"}"), 2);
	ck_assert_double_eq(sample(text, "cbd_circuit_retries_total{name=\"bh\"}"), 0);
	ck_assert_double_eq(sample(text, "cbd_limit_hits_total{limit=\"max_waiters\"}"), 0);
	ck_assert(has(text, "# TYPE cbd_circuit_in_flight gauge\n"));
	ck_assert(has(text, "# TYPE cbd_circuit_retries_total counter\n"));
	promtool_accepts(text);
	free(text);
}
END_TEST

START_TEST(test_per_circuit_cap)
{
	char *text;

	start("metrics_max_circuits = 2\n");
	for (int i = 0; i < 5; i++) {
		json_t *r = util_call(fd, "{\"op\":\"record_success\",\"name\":\"c%d\"}", i);

		json_decref(r);
	}
	json_decref(util_call(fd, "{\"op\":\"set_state\",\"name\":\"c0\",\"state\":\"open\"}"));
	text = metrics_op();
	/* The open circuit first, then the most recently used. */
	ck_assert(has(text, "cbd_circuit_state{name=\"c0\",state=\"open\"} 1"));
	ck_assert(has(text, "cbd_circuit_state{name=\"c4\","));
	ck_assert(!has(text, "cbd_circuit_state{name=\"c1\","));
	ck_assert_double_eq(sample(text, "cbd_metrics_circuits_omitted"), 3);
	free(text);
}
END_TEST

START_TEST(test_listen_must_be_loopback)
{
	const char *binary = getenv("CBD_BINARY");
	char path[] = "/tmp/cbd-metrics-conf-XXXXXX", out[4096];
	static const char *const bad[] = { "0.0.0.0:9464", "10.1.2.3:9464", "127.0.0.1:0",
		"localhost", "[::]:9464" };

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int cfd = mkstemp(path);
		const char *argv[] = { binary, "-t", "-c", path, NULL };
		char text[128];

		ck_assert_int_ge(cfd, 0);
		snprintf(text, sizeof text, "[cbd]\nmetrics_listen = %s\n", bad[i]);
		ck_assert(file_write(cfd, text));
		close(cfd);
		ck_assert_int_eq(util_run(argv, out, sizeof out), 1);
		ck_assert_msg(strstr(out, ":2: metrics_listen:") != NULL, "%s: %s", bad[i], out);
		unlink(path);
		strcpy(path, "/tmp/cbd-metrics-conf-XXXXXX");
	}
}
END_TEST

/* Every failure an operator is paged for has a series: reloads by
 * result, state file writes by result, every limit hit by limit (the
 * same counts as stats.limits). */
START_TEST(test_operator_series)
{
	char dir[] = "/tmp/cbd-metrics-state-XXXXXX", extra[512], line[400], path[600];
	char reply[512];
	const char *key;
	json_t *r, *v;
	char *text;
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(extra, sizeof extra,
	    "max_line_bytes = 256\nmax_circuits = 1\nstate_file = %s/s.json\n", dir);
	start(extra);
	/* A line past max_line_bytes; a circuit past max_circuits (an open
	 * one is never reclaimed); the state file written for the open one. */
	memset(line, 'x', sizeof line - 2);
	line[sizeof line - 2] = '\n';
	line[sizeof line - 1] = '\0';
	ck_assert(util_write_all(fd, line, strlen(line)));
	ck_assert(util_read_line(fd, reply, sizeof reply));
	ck_assert_msg(strstr(reply, "line_too_long") != NULL, "%s", reply);
	json_decref(util_call(fd, "{\"op\":\"set_state\",\"name\":\"a\",\"state\":\"open\"}"));
	r = util_call(fd, "{\"op\":\"record_failure\",\"name\":\"b\"}");
	ck_assert_str_eq(util_code(r), "capacity");
	json_decref(r);
	ck_assert(util_stats_reach_min(fd, "state_writes", 1));
	/* A reload that fails, then one that works. */
	f = fopen(h.config_path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("[cbd]\nmax_circuits = 0\n", f);
	fclose(f);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(fd, "reload_failures", 1));
	f = fopen(h.config_path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[cbd]\nmetrics_listen = 127.0.0.1:%d\n%s", port, extra);
	fclose(f);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(fd, "reloads", 1));
	text = metrics_op();
	ck_assert_double_eq(sample(text, "cbd_reloads_total{result=\"ok\"}"), 1);
	ck_assert_double_eq(sample(text, "cbd_reloads_total{result=\"failed\"}"), 1);
	ck_assert_double_ge(sample(text, "cbd_state_file_writes_total{result=\"ok\"}"), 1);
	ck_assert_double_eq(sample(text, "cbd_state_file_writes_total{result=\"failed\"}"), 0);
	ck_assert_double_eq(sample(text, "cbd_limit_hits_total{limit=\"max_line_bytes\"}"), 1);
	ck_assert_double_eq(sample(text, "cbd_limit_hits_total{limit=\"max_circuits\"}"), 1);
	/* Every limit stats counts has its series, with the same count. */
	r = util_call(fd, "{\"op\":\"stats\"}");
	ck_assert_int_ge(json_object_size(json_object_get(r, "limits")), 11);
	json_object_foreach (json_object_get(r, "limits"), key, v) {
		char series[128];

		snprintf(series, sizeof series, "cbd_limit_hits_total{limit=\"%s\"}", key);
		ck_assert_double_eq(sample(text, series), (double)json_integer_value(v));
	}
	json_decref(r);
	free(text);
	util_stop_conn(&h, &fd);
	snprintf(path, sizeof path, "%s/s.json", dir);
	unlink(path);
	rmdir(dir);
}
END_TEST

/* Every series the Grafana dashboard queries is one cbd exports (the
 * fleet's cbd_backend_* in fleet mode: cbd-fleet-test). */
START_TEST(test_dashboard_queries_exported_series)
{
	char path[1024], *text;
	json_error_t err;
	json_t *dash, *panel, *target;
	size_t i, k;
	int exprs = 0;

	start("");
	text = metrics_op();
	snprintf(path, sizeof path, "%s/conf/grafana-cbd.json", getenv("CBD_SRCDIR"));
	dash = json_load_file(path, 0, &err);
	ck_assert_msg(dash != NULL, "%s: %s", path, err.text);
	json_array_foreach (json_object_get(dash, "panels"), i, panel) {
		json_array_foreach (json_object_get(panel, "targets"), k, target) {
			const char *p = json_string_value(json_object_get(target, "expr"));

			ck_assert_ptr_nonnull(p);
			exprs++;
			while ((p = strstr(p, "cbd_")) != NULL) {
				char name[128], type[160];
				size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");

				snprintf(name, sizeof name, "%.*s", (int)n, p);
				snprintf(type, sizeof type, "# TYPE %s ", name);
				/* Fleet series: cbd-fleet-test checks them. */
				ck_assert_msg(strncmp(name, "cbd_backend_", 12) == 0 ||
					has(text, type),
				    "the dashboard queries %s", name);
				p += n;
			}
		}
	}
	ck_assert_int_gt(exprs, 5);
	json_decref(dash);
	free(text);
}
END_TEST

/* cbd's open descriptors. */
static int
fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Issue 28 item 2: idle HTTP connections past metrics_max_connections are
 * closed when accepted: they hold no descriptor of cbd's, so the socket's
 * clients keep theirs; the port serves again once they are gone. */
START_TEST(test_http_connections_bounded)
{
	enum { IDLE = 40, MAX = 4 };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int idle[IDLE], before, c;
	long long deadline;
	char *http;

	start("metrics_max_connections = 4\n");
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* Our connection is accepted before counting. */
	json_decref(util_call_ok(fd, "{\"op\":\"hello\"}"));
	before = fd_count(h.pid);
	for (int i = 0; i < IDLE; i++) {
		idle[i] = socket(AF_INET, SOCK_STREAM, 0);
		ck_assert_int_eq(connect(idle[i], (struct sockaddr *)&sa, sizeof sa), 0);
	}
	ck_assert(util_stats_reach(fd, "limits.metrics_max_connections", IDLE - MAX));
	ck_assert_int_le(fd_count(h.pid), before + MAX);
	/* A client of the socket is served. */
	c = harness_connect(&h);
	ck_assert_int_ge(c, 0);
	json_decref(util_call_ok(c, "{\"op\":\"hello\"}"));
	close(c);
	for (int i = 0; i < IDLE; i++)
		close(idle[i]);
	/* cbd sees them close; then a scrape is answered. */
	deadline = harness_mono_ms() + harness_timeout_ms();
	while (fd_count(h.pid) > before && harness_mono_ms() < deadline)
		harness_sleep_ms(20);
	http = http_get("/metrics");
	ck_assert_msg(has(http, " 200 OK"), "%.200s", http);
	ck_assert(has(http, "cbd_limit_hits_total{limit=\"metrics_max_connections\"} 36"));
	free(http);
}
END_TEST

/* Issue 28 item 2: the metrics op's text is cut (at a line's end, with
 * "truncated": true) to fit max_output_bytes: the client is answered,
 * not dropped. */
START_TEST(test_metrics_op_cut_to_fit)
{
	enum { CIRCUITS = 2000 };
	json_t *r;
	const char *text;
	size_t len;

	start("max_output_bytes = 65536\nmetrics_max_circuits = 100000\n");
	for (int i = 0; i < CIRCUITS; i++)
		json_decref(util_call_ok(fd,
		    "{\"op\":\"set_state\",\"name\":\"m%04d\",\"state\":\"open\"}", i));
	r = util_call(fd, "{\"op\":\"metrics\"}");
	ck_assert_ptr_nonnull(r);
	ck_assert(util_bool(r, "ok"));
	ck_assert(util_bool(r, "truncated"));
	text = util_str(r, "text");
	len = strlen(text);
	ck_assert_int_le(len, 65536 / 2);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(text[len - 1], '\n');
	json_decref(r);
	r = util_call_ok(fd, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "limits.metrics_truncated"), 1);
	ck_assert_int_eq(util_int(r, "limits.max_output_bytes"), 0);
	json_decref(r);
}
END_TEST

/* An HTTP request (request: its whole text) on a new connection whose
 * receive buffer is small (no autotuning: cbd can run ahead of a reader
 * by its own bound and its send buffer only). */
static int
http_send(const char *request)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timeval tv = { harness_timeout_ms() / 1000, 0 };
	int s = socket(AF_INET, SOCK_STREAM, 0), rcvbuf = 65536;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	ck_assert_int_eq(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert(util_write_all(s, request, strlen(request)));
	return s;
}

/* Read s into *buf (grown; NUL-ended) until `until` is in it (NULL: until
 * EOF); returns the length. */
static size_t
http_read(int s, char **buf, size_t len, const char *until)
{
	size_t cap = len + (1 << 20);
	ssize_t n;

	*buf = realloc(*buf, cap);
	(*buf)[len] = '\0';
	while (until == NULL || strstr(*buf, until) == NULL) {
		if (cap - len < 65536 + 1) {
			cap *= 2;
			*buf = realloc(*buf, cap);
			ck_assert_ptr_nonnull(*buf);
		}
		n = read(s, *buf + len, cap - len - 1);
		if (n <= 0)
			break;
		len += (size_t)n;
		(*buf)[len] = '\0';
	}
	return len;
}

/* Issue 28 item 2: a scrape of more circuits than SCRAPE_AT_ONCE_CIRCUITS
 * is made in steps across turns of the loop, sent as it is made (chunked)
 * and no further ahead of its reader than cbd's bound: a request on the
 * socket is answered while it is under way, and a change it makes (to
 * the circuit the scrape visits last) shows in the scrape. Before, the
 * whole text was made in the turn that read the request: the change
 * could not show. No timing: the reader reads only the head until the
 * change is answered, and the first family alone is several times what
 * the sockets hold. */
START_TEST(test_big_scrape_in_steps)
{
	enum { CIRCUITS = 50000, BATCH = 1000 };
	static const char name[] = "scrape-test-circuit-with-a-long-name-%05d";
	char last[64], want[160], line[160], *batch, *resp = NULL, *body;
	size_t len;
	int s;

	start("metrics_max_circuits = 100000\n");
	batch = malloc(BATCH * sizeof line);
	ck_assert_ptr_nonnull(batch);
	for (int i = 0; i < CIRCUITS; i += BATCH) {
		batch[0] = '\0';
		for (int j = i; j < i + BATCH; j++) {
			char n[64];

			snprintf(n, sizeof n, name, j);
			snprintf(line, sizeof line,
			    "{\"op\":\"record_success\",\"name\":\"%s\",\"noreply\":true}\n", n);
			strcat(batch, line);
		}
		ck_assert(util_write_all(fd, batch, strlen(batch)));
	}
	free(batch);
	ck_assert(util_stats_reach(fd, "circuits", CIRCUITS));
	snprintf(last, sizeof last, name, CIRCUITS - 1);
	s = http_send("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
	len = http_read(s, &resp, 0, "\r\n\r\n");
	ck_assert_msg(has(resp, " 200 OK\r\n"), "%.200s", resp);
	ck_assert(has(resp, "\r\nTransfer-Encoding: chunked\r\n"));
	ck_assert(!has(resp, "Content-Length"));
	/* The scrape is under way: the socket is answered, and the change
	 * made now shows in what is still to come. */
	json_decref(
	    util_call_ok(fd, "{\"op\":\"set_state\",\"name\":\"%s\",\"state\":\"open\"}", last));
	len = http_read(s, &resp, len, NULL);
	close(s);
	body = strstr(resp, "\r\n\r\n") + 4;
	ck_assert_msg(util_http_dechunk(body), "not a whole chunked body (%zu bytes)", len);
	snprintf(want, sizeof want, "\ncbd_circuit_state{name=\"%s\",state=\"open\"} 1\n", last);
	ck_assert_msg(has(body, want), "the change made during the scrape is not in it");
	snprintf(want, sizeof want, "\ncbd_circuit_retries_total{name=\"%s\"} 0\n", last);
	ck_assert(has(body, want));
	ck_assert(has(body, "\ncbd_circuits{state=\"closed\"} 50000\n"));
	ck_assert(has(body, "\ncbd_metrics_circuits_omitted 0\n"));
	promtool_accepts(body);
	/* HTTP/1.0 knows no chunks: the body ends with the connection. */
	s = http_send("GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
	len = http_read(s, &resp, 0, NULL);
	close(s);
	ck_assert(!has(resp, "Transfer-Encoding"));
	ck_assert(!has(resp, "Content-Length"));
	ck_assert(has(resp, "\ncbd_metrics_circuits_omitted 0\n"));
	free(resp);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("metrics");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_series_and_values);
	tcase_add_test(tc, test_bulkhead_series);
	tcase_add_test(tc, test_per_circuit_cap);
	tcase_add_test(tc, test_listen_must_be_loopback);
	tcase_add_test(tc, test_operator_series);
	tcase_add_test(tc, test_dashboard_queries_exported_series);
	tcase_add_test(tc, test_http_connections_bounded);
	tcase_add_test(tc, test_metrics_op_cut_to_fit);
	tcase_add_test(tc, test_big_scrape_in_steps);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
