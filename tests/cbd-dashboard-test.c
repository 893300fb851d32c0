/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-dashboard-test.c — the dashboard's HTTP side (issue 27) against a
 * real cbd on metrics_listen: the routes and their content types, the
 * Server-Sent Events of a trip, a delete and the stats tick, streams past
 * dashboard_max_clients refused (counted), a stalled stream dropped at
 * max_output_bytes while the socket's clients are answered throughout,
 * and /api/circuits and the events valid JSON for odd names and reasons;
 * /api/history holding every tick's counts (with no browser connected),
 * its cap on circuits honoured and counted, its cut, its odd names.
 * The page itself is tests/dashboard-browser.sh's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* A connection to the metrics port (rcvbuf > 0: that receive buffer,
 * set before connecting) with request `GET path` sent. */
static int
http_open(const char *path, const char *host, int rcvbuf)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timeval tv = { harness_timeout_ms() / 1000, 0 };
	int s = socket(AF_INET, SOCK_STREAM, 0);
	char req[512];

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (rcvbuf > 0)
		setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	int rc;

	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	/* The port may open a moment after the socket (a slow cbd: valgrind). */
	while ((rc = connect(s, (struct sockaddr *)&sa, sizeof sa)) != 0 && errno == ECONNREFUSED &&
	    harness_mono_ms() < deadline)
		harness_sleep_ms(20);
	ck_assert_msg(rc == 0, "connect to port %d: %s", port, strerror(errno));
	snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host);
	ck_assert(util_write_all(s, req, strlen(req)));
	return s;
}

/* The whole response to GET path (the connection closes after it). */
static char *
http_get_host(const char *path, const char *host)
{
	size_t cap = 8 << 20, len = 0;
	char *buf = malloc(cap);
	int s = http_open(path, host, 0);
	ssize_t n;

	while (len + 1 < cap && (n = read(s, buf + len, cap - len - 1)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(s);
	return buf;
}

static char *
http_get(const char *path)
{
	return http_get_host(path, "127.0.0.1");
}

static bool
has(const char *text, const char *what)
{
	return strstr(text, what) != NULL;
}

/* The body of a response. */
static const char *
body(const char *http)
{
	const char *b = strstr(http, "\r\n\r\n");

	ck_assert_ptr_nonnull(b);
	return b + 4;
}

/* ---- a stream of Server-Sent Events ----------------------------------- */

typedef struct sse {
	int s;
	char buf[1 << 20];
	size_t len;
} sse;

static sse *
sse_open(void)
{
	sse *e = calloc(1, sizeof *e);

	e->s = http_open("/events", "localhost", 0);
	return e;
}

static void
sse_close(sse *e)
{
	close(e->s);
	free(e);
}

/* The next event's data (of type `type`, others skipped) parsed; NULL
 * when none came within the harness's timeout. The head of the response
 * is skipped (it ends with a blank line, like a frame). */
static json_t *
sse_next(sse *e, const char *type)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	char want[64];

	snprintf(want, sizeof want, "event: %s\ndata: ", type);
	while (harness_mono_ms() < deadline) {
		char *end = strstr(e->buf, "\n\n");

		if (end != NULL) {
			size_t frame = (size_t)(end + 2 - e->buf);
			json_t *j = NULL;

			*end = '\0';
			if (strncmp(e->buf, want, strlen(want)) == 0) {
				json_error_t err;

				j = json_loads(e->buf + strlen(want), 0, &err);
				ck_assert_msg(j != NULL, "bad event data: %s: %.300s", err.text,
				    e->buf + strlen(want));
			}
			memmove(e->buf, e->buf + frame, e->len - frame + 1);
			e->len -= frame;
			if (j != NULL)
				return j;
			continue;
		}
		{
			struct pollfd p = { e->s, POLLIN, 0 };
			ssize_t n;

			if (poll(&p, 1, 100) <= 0)
				continue;
			n = read(e->s, e->buf + e->len, sizeof e->buf - e->len - 1);
			if (n <= 0)
				return NULL;
			e->len += (size_t)n;
			e->buf[e->len] = '\0';
		}
	}
	return NULL;
}

/* Read what came (without waiting) and forget the whole frames. */
static void
sse_drain(sse *e)
{
	struct pollfd p = { e->s, POLLIN, 0 };
	char *end;

	while (poll(&p, 1, 0) > 0) {
		ssize_t n = read(e->s, e->buf + e->len, sizeof e->buf - e->len - 1);

		ck_assert_int_gt(n, 0);
		e->len += (size_t)n;
		e->buf[e->len] = '\0';
		end = NULL;
		for (char *f = strstr(e->buf, "\n\n"); f != NULL; f = strstr(f + 2, "\n\n"))
			end = f + 2;
		if (end != NULL) {
			e->len -= (size_t)(end - e->buf);
			memmove(e->buf, end, e->len + 1);
		}
	}
}

/* The next change event of circuit name. */
static json_t *
sse_change_of(sse *e, const char *name)
{
	json_t *j;

	while ((j = sse_next(e, "change")) != NULL) {
		if (strcmp(util_str(j, "snapshot.name"), name) == 0)
			return j;
		json_decref(j);
	}
	return NULL;
}

/* ---- the tests ----------------------------------------------------------- */

START_TEST(test_routes)
{
	static const struct {
		const char *path, *status, *type, *text;
	} routes[] = {
		{ "/", " 200 ", "Content-Type: text/html; charset=utf-8", "<title>cbd circuits" },
		{ "/index.html", " 200 ", "Content-Type: text/html", "app.js" },
		{ "/app.js", " 200 ", "Content-Type: text/javascript", "EventSource" },
		{ "/style.css", " 200 ", "Content-Type: text/css", "--open" },
		{ "/favicon.ico", " 200 ", "Content-Type: image/svg+xml", "<svg" },
		{ "/api/circuits?x=1", " 200 ", "Content-Type: application/json",
		    "\"circuits\":[" },
		{ "/metrics", " 200 ", "Content-Type: text/plain", "cbd_dashboard_clients 0" },
		{ "/nope", " 404 ", "Content-Type: text/plain", "the dashboard at /" },
	};

	start("");
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
		char *http = http_get(routes[i].path);

		ck_assert_msg(has(http, routes[i].status), "%s: %.200s", routes[i].path, http);
		ck_assert_msg(has(http, routes[i].type), "%s: %.300s", routes[i].path, http);
		ck_assert_msg(has(body(http), routes[i].text), "%s: %.300s", routes[i].path, http);
		free(http);
	}
	{
		/* The page's own files only (no CDN), never from a foreign name
		 * (DNS rebinding), nothing but GET. */
		char *http = http_get("/");

		ck_assert(has(http, "Content-Security-Policy: default-src 'self'"));
		ck_assert(!has(body(http), "http://") && !has(body(http), "https://"));
		free(http);
		static const char *const foreign[] = { "evil.example:9464",
			"127.0.0.1.evil.example", "localhost.evil.example", "[::1].evil.example" };
		static const char *const loopback[] = { "127.0.0.1:9464", "127.8.9.10", "localhost",
			"LocalHost:80", "[::1]:9464" };

		for (size_t i = 0; i < 4; i++) {
			http = http_get_host("/api/circuits", foreign[i]);
			ck_assert_msg(has(http, " 403 "), "%s: %.200s", foreign[i], http);
			free(http);
		}
		for (size_t i = 0; i < 5; i++) {
			http = http_get_host("/api/circuits", loopback[i]);
			ck_assert_msg(has(http, " 200 "), "%s: %.200s", loopback[i], http);
			free(http);
		}
		http = http_get_host("/metrics", "evil.example:9464");
		ck_assert(has(http, " 200 "));
		free(http);
	}
}
END_TEST

/* A trip, a hold, a delete and the tick reach a stream, without a reload;
 * /api/circuits has the circuit with what the tiles need. */
START_TEST(test_events_of_a_trip)
{
	sse *e;
	json_t *j, *r;
	int i;

	start("");
	e = sse_open();
	ck_assert(util_stats_reach(fd, "dashboard_clients", 1));
	/* Trip: failures until open. */
	for (i = 0; i < 100; i++) {
		r = util_call_ok(fd, "{\"op\":\"record_failure\",\"name\":\"pay\"}");
		json_decref(r);
		r = util_call_ok(fd, "{\"op\":\"get\",\"name\":\"pay\"}");
		if (strcmp(util_str(r, "snapshot.state"), "open") == 0) {
			json_decref(r);
			break;
		}
		json_decref(r);
	}
	ck_assert_int_lt(i, 100);
	j = sse_change_of(e, "pay");
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(util_str(j, "from"), "closed");
	ck_assert_str_eq(util_str(j, "snapshot.state"), "open");
	ck_assert_int_gt(util_int(j, "snapshot.retry_after_ms"), 0);
	ck_assert_int_gt(util_int(j, "snapshot.policy_rev"), 0);
	json_decref(j);
	/* The stats tick: pay's calls and failures since the last. */
	for (;;) {
		const json_t *rates;
		size_t k;
		json_t *row;
		bool seen = false;

		j = sse_next(e, "stats");
		ck_assert_ptr_nonnull(j);
		rates = util_get(j, "rates");
		ck_assert(json_is_array(rates));
		json_array_foreach (rates, k, row) {
			if (strcmp(json_string_value(json_array_get(row, 0)), "pay") == 0) {
				ck_assert_int_eq(json_integer_value(json_array_get(row, 1)), i + 1);
				ck_assert_int_eq(json_integer_value(json_array_get(row, 2)), i + 1);
				seen = true;
			}
		}
		json_decref(j);
		if (seen)
			break;
	}
	/* A hold: a change event with who and why. */
	json_decref(util_call_ok(fd,
	    "{\"op\":\"set_state\",\"name\":\"pay\",\"state\":\"open\",\"hold\":true,"
	    "\"reason\":\"incident 7\",\"ttl_ms\":600000}"));
	j = sse_change_of(e, "pay");
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(util_str(j, "snapshot.hold.reason"), "incident 7");
	json_decref(j);
	{
		char *http = http_get("/api/circuits");
		json_error_t err;
		json_t *list = json_loads(body(http), 0, &err);

		ck_assert_msg(list != NULL, "%s", err.text);
		ck_assert_int_eq(util_int(list, "count"), 1);
		ck_assert(!util_bool(list, "truncated"));
		ck_assert_int_gt(util_int(list, "now"), 0);
		ck_assert_str_eq(util_str(list, "circuits.0.name"), "pay");
		ck_assert_str_eq(util_str(list, "circuits.0.hold.reason"), "incident 7");
		ck_assert_int_gt(util_int(list, "circuits.0.totals.failures"), 0);
		json_decref(list);
		free(http);
	}
	json_decref(util_call_ok(fd, "{\"op\":\"delete\",\"name\":\"pay\"}"));
	j = sse_next(e, "delete");
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(util_str(j, "name"), "pay");
	ck_assert_str_eq(util_str(j, "reason"), "deleted");
	json_decref(j);
	sse_close(e);
	ck_assert(util_stats_reach(fd, "dashboard_clients", 0));
}
END_TEST

/* Streams past dashboard_max_clients are refused (503), counted in stats
 * and metrics; one closing makes room. */
START_TEST(test_streams_bounded)
{
	sse *a, *b;
	char *http;

	start("dashboard_max_clients = 2\n");
	a = sse_open();
	b = sse_open();
	ck_assert(util_stats_reach(fd, "dashboard_clients", 2));
	http = http_get("/events");
	ck_assert_msg(has(http, " 503 "), "%.200s", http);
	ck_assert(has(http, "dashboard_max_clients"));
	free(http);
	ck_assert(util_stats_reach(fd, "limits.dashboard_max_clients", 1));
	http = http_get("/metrics");
	ck_assert(has(http, "cbd_limit_hits_total{limit=\"dashboard_max_clients\"} 1"));
	ck_assert(has(http, "cbd_dashboard_clients 2"));
	free(http);
	sse_close(a);
	ck_assert(util_stats_reach(fd, "dashboard_clients", 1));
	a = sse_open();
	ck_assert(util_stats_reach(fd, "dashboard_clients", 2));
	json_decref(util_call_ok(fd, "{\"op\":\"set_state\",\"name\":\"n\",\"state\":\"open\"}"));
	json_decref(sse_change_of(a, "n"));
	json_decref(sse_change_of(b, "n"));
	sse_close(a);
	sse_close(b);
}
END_TEST

/* A stream that reads nothing is dropped once the bound named `limit` is
 * reached by the events waiting for it (its own max_output_bytes, or all
 * output's max_total_output_bytes: the stream goes, not a socket client);
 * the socket's clients are answered all along (every request of the loop
 * below is), and another stream gets every event. */
static void
stalled_stream_dropped(const char *config, const char *limit)
{
	char reason[257], line[1024], limit_path[64];
	sse *live;
	json_t *st;
	int stalled, sent = 0;
	long long t0, worst = 0;

	memset(reason, 'r', 256);
	reason[256] = '\0';
	snprintf(limit_path, sizeof limit_path, "limits.%s", limit);
	start(config);
	stalled = http_open("/events", "localhost", 4096);
	live = sse_open();
	ck_assert(util_stats_reach(fd, "dashboard_clients", 2));
	/* Changes of ~700 bytes each until the stalled one is dropped (the
	 * kernel's buffers take some first; bounded). */
	for (;;) {
		st = util_call_ok(fd, "{\"op\":\"stats\"}");
		if (util_int(st, limit_path) >= 1) {
			json_decref(st);
			break;
		}
		json_decref(st);
		ck_assert_int_lt(sent, 200000);
		for (int i = 0; i < 100; i++, sent++) {
			snprintf(line, sizeof line,
			    "{\"op\":\"set_state\",\"name\":\"flap\",\"state\":\"%s\",\"hold\":"
			    "true,"
			    "\"reason\":\"%s\"}",
			    sent % 2 ? "closed" : "open", reason);
			t0 = harness_mono_ms();
			json_decref(util_call_ok(fd, "%s", line));
			if (harness_mono_ms() - t0 > worst)
				worst = harness_mono_ms() - t0;
		}
		/* The live stream keeps up (it reads what came so far). */
		sse_drain(live);
	}
	ck_assert(util_stats_reach(fd, "dashboard_clients", 1));
	/* Printed, not asserted (timings are the machine's). */
	printf("stalled stream dropped after %d changes; a socket request's worst answer "
	       "meanwhile: "
	       "%lld ms\n",
	    sent, worst);
	/* The stalled one sees its stream end (after what was sent). */
	{
		char buf[65536];
		ssize_t n;

		while ((n = read(stalled, buf, sizeof buf)) > 0)
			;
		ck_assert_int_eq(n, 0);
	}
	close(stalled);
	/* The live one is still served. */
	json_decref(
	    util_call_ok(fd, "{\"op\":\"set_state\",\"name\":\"last\",\"state\":\"open\"}"));
	st = sse_change_of(live, "last");
	ck_assert_ptr_nonnull(st);
	json_decref(st);
	sse_close(live);
}

START_TEST(test_stalled_stream_dropped)
{
	stalled_stream_dropped("max_output_bytes = 65536\n", "max_output_bytes");
}
END_TEST

START_TEST(test_streams_count_in_total_output)
{
	stalled_stream_dropped("max_output_bytes = 1048576\nmax_total_output_bytes = 65536\n",
	    "max_total_output_bytes");
}
END_TEST

/* Names with quotes, backslashes and UTF-8, a reason with control bytes:
 * /api/circuits and the events are valid JSON with the exact strings. */
START_TEST(test_odd_names)
{
	static const char *const names[] = { "quote\"d", "back\\slash", "caf\xc3\xa9 \xe6\x97\xa5",
		"</script><b>", "sp ace" };
	static const char *const wire[] = { "quote\\\"d", "back\\\\slash",
		"caf\xc3\xa9 \xe6\x97\xa5", "</script><b>", "sp ace" };
	sse *e;
	char *http;
	json_t *list;
	json_error_t err;

	start("");
	e = sse_open();
	ck_assert(util_stats_reach(fd, "dashboard_clients", 1));
	for (size_t i = 0; i < 5; i++) {
		json_t *j;

		json_decref(util_call_ok(fd,
		    "{\"op\":\"set_state\",\"name\":\"%s\",\"state\":\"open\",\"hold\":true,"
		    "\"reason\":\"line\\nbreak\\u0001\\\"q\\\"\"}",
		    wire[i]));
		j = sse_change_of(e, names[i]);
		ck_assert_ptr_nonnull(j);
		ck_assert_str_eq(util_str(j, "snapshot.hold.reason"), "line\nbreak\x01\"q\"");
		json_decref(j);
	}
	http = http_get("/api/circuits");
	list = json_loads(body(http), 0, &err);
	ck_assert_msg(list != NULL, "%s: %.300s", err.text, body(http));
	ck_assert_int_eq(util_int(list, "count"), 5);
	for (size_t i = 0; i < 5; i++) {
		bool found = false;
		size_t k;
		json_t *c;

		json_array_foreach (json_object_get(list, "circuits"), k, c)
			found |=
			    strcmp(json_string_value(json_object_get(c, "name")), names[i]) == 0;
		ck_assert_msg(found, "%s", names[i]);
	}
	json_decref(list);
	free(http);
	json_decref(util_call_ok(fd, "{\"op\":\"delete\",\"name\":\"%s\"}", wire[0]));
	list = sse_next(e, "delete");
	ck_assert_ptr_nonnull(list);
	ck_assert_str_eq(util_str(list, "name"), names[0]);
	json_decref(list);
	sse_close(e);
}
END_TEST

/* A reload that changes a circuit's policy sends a policy event with the
 * new policy_rev and the policy. */
START_TEST(test_policy_event)
{
	sse *e;
	json_t *j, *r;
	int64_t rev;
	FILE *f;

	start("");
	json_decref(util_call_ok(fd, "{\"op\":\"set_state\",\"name\":\"p\",\"state\":\"open\"}"));
	r = util_call_ok(fd, "{\"op\":\"get\",\"name\":\"p\"}");
	rev = util_int(r, "snapshot.policy_rev");
	json_decref(r);
	e = sse_open();
	ck_assert(util_stats_reach(fd, "dashboard_clients", 1));
	f = fopen(h.config_path, "a");
	ck_assert_ptr_nonnull(f);
	fputs("[circuit \"p\"]\nbreak_ms = 2000\n", f);
	fclose(f);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	j = sse_next(e, "policy");
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(util_str(j, "snapshot.name"), "p");
	ck_assert_int_ne(util_int(j, "snapshot.policy_rev"), rev);
	ck_assert_int_eq(util_int(j, "snapshot.policy.break_ms"), 2000);
	json_decref(j);
	sse_close(e);
}
END_TEST

/* More circuits than max_output_bytes holds: the list is cut, says so,
 * and counts the cut; open ones come first. */
START_TEST(test_list_cut)
{
	char *http;
	json_t *list;

	start("max_output_bytes = 65536\n");
	for (int i = 0; i < 1000; i++)
		json_decref(util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"c%04d\"}", i));
	json_decref(
	    util_call_ok(fd, "{\"op\":\"set_state\",\"name\":\"c0500\",\"state\":\"open\"}"));
	http = http_get("/api/circuits");
	list = json_loads(body(http), 0, NULL);
	ck_assert_ptr_nonnull(list);
	ck_assert(util_bool(list, "truncated"));
	ck_assert_int_eq(util_int(list, "total"), 1000);
	ck_assert_int_lt(util_int(list, "count"), 1000);
	ck_assert_str_eq(util_str(list, "circuits.0.name"), "c0500");
	ck_assert_int_le(strlen(body(http)), 65536 + 256);
	json_decref(list);
	free(http);
}
END_TEST

/* Issue 28 item 2: /api/circuits of more than SCRAPE_AT_ONCE_CIRCUITS
 * circuits is made in steps and sent chunked: the same JSON (open and
 * held first), whole; and cut to max_output_bytes in steps as at once. */
START_TEST(test_list_in_steps)
{
	enum { CIRCUITS = 3000 };
	char line[128], *http, *b;
	json_t *list;
	FILE *f;

	start("");
	for (int i = 0; i < CIRCUITS; i++) {
		snprintf(line, sizeof line,
		    "{\"op\":\"record_success\",\"name\":\"c%04d\",\"noreply\":true}\n", i);
		ck_assert(util_write_all(fd, line, strlen(line)));
	}
	ck_assert(util_stats_reach(fd, "circuits", CIRCUITS));
	json_decref(
	    util_call_ok(fd, "{\"op\":\"set_state\",\"name\":\"c1500\",\"state\":\"open\"}"));
	http = http_get("/api/circuits");
	ck_assert_msg(has(http, "\r\nTransfer-Encoding: chunked\r\n"), "%.300s", http);
	b = (char *)body(http);
	ck_assert(util_http_dechunk(b));
	list = json_loads(b, 0, NULL);
	ck_assert_ptr_nonnull(list);
	ck_assert(!util_bool(list, "truncated"));
	ck_assert_int_eq(util_int(list, "total"), CIRCUITS);
	ck_assert_int_eq(util_int(list, "count"), CIRCUITS);
	ck_assert_int_eq(json_array_size(json_object_get(list, "circuits")), CIRCUITS);
	ck_assert_str_eq(util_str(list, "circuits.0.name"), "c1500");
	json_decref(list);
	free(http);
	/* Cut to max_output_bytes (in steps: more than SCRAPE_AT_ONCE_CIRCUITS
	 * snapshots of DASHBOARD_SNAPSHOT_MIN bytes fit it). */
	f = fopen(h.config_path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[cbd]\nmetrics_listen = 127.0.0.1:%d\nmax_output_bytes = 262144\n", port);
	fclose(f);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(fd, "reloads", 1));
	http = http_get("/api/circuits");
	ck_assert(has(http, "\r\nTransfer-Encoding: chunked\r\n"));
	b = (char *)body(http);
	ck_assert(util_http_dechunk(b));
	list = json_loads(b, 0, NULL);
	ck_assert_ptr_nonnull(list);
	ck_assert(util_bool(list, "truncated"));
	ck_assert_int_lt(util_int(list, "count"), CIRCUITS);
	ck_assert_int_eq(util_int(list, "count"),
	    json_array_size(json_object_get(list, "circuits")));
	ck_assert_str_eq(util_str(list, "circuits.0.name"), "c1500");
	ck_assert_int_le(strlen(b), 262144 + 256);
	json_decref(list);
	free(http);
}
END_TEST

/* ---- the history (/api/history) ------------------------------------------ */

/* GET /api/history, parsed (valid JSON or the test fails). */
static json_t *
history_get(void)
{
	char *http = http_get("/api/history");
	json_error_t err;
	json_t *j;

	ck_assert_msg(has(http, " 200 ") && has(http, "Content-Type: application/json"), "%.200s",
	    http);
	j = json_loads(body(http), 0, &err);
	ck_assert_msg(j != NULL, "%s: %.300s", err.text, body(http));
	free(http);
	return j;
}

/* The history of name in list (NULL: none). */
static json_t *
history_of(json_t *list, const char *name)
{
	size_t k;
	json_t *c;

	json_array_foreach (json_object_get(list, "circuits"), k, c) {
		if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
			return c;
	}
	return NULL;
}

/* The sum over name's samples of field (1 calls, 2 failures, 3 slow, 4
 * rejected, 5 refused for want of a ticket); -1 when it has no history.
 * *samples: how many (when not NULL). Each sample's time is checked: at
 * or after "since", after the one before, at most "last". */
static int64_t
history_sum(json_t *list, const char *name, int field, size_t *samples)
{
	json_t *c = history_of(list, name), *row;
	int64_t sum = 0, prev = 0, since, last = util_int(list, "last");
	size_t k;

	if (c == NULL)
		return -1;
	since = json_integer_value(json_object_get(c, "since"));
	json_array_foreach (json_object_get(c, "samples"), k, row) {
		int64_t t = json_integer_value(json_array_get(row, 0));

		ck_assert_int_eq(json_array_size(row), 6);
		ck_assert_int_ge(t, since);
		ck_assert_int_gt(t, prev);
		ck_assert_int_le(t, last);
		prev = t;
		sum += json_integer_value(json_array_get(row, (size_t)field));
	}
	if (samples != NULL)
		*samples = json_array_size(json_object_get(c, "samples"));
	return sum;
}

/* Wait (bounded) until name's history sums field to want; the list then. */
static json_t *
history_wait(const char *name, int field, int64_t want)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	json_t *list;

	for (;;) {
		list = history_get();
		if (history_sum(list, name, field, NULL) == want || harness_mono_ms() > deadline)
			return list;
		json_decref(list);
		harness_sleep_ms(50);
	}
}

/* With no browser connected, the ticks keep each circuit's counts: the
 * samples of the ticks sum to exactly the calls, failures, slow calls,
 * refusals while open and refusals for want of a ticket made; calls made
 * after a tick took the first ones land in later samples. */
START_TEST(test_history)
{
	json_t *list;
	size_t samples = 0;

	start("[circuit \"h1\"]\nslow_call_ms = 100\n[circuit \"b\"]\nmax_concurrent = 1\n");
	list = history_get();
	ck_assert_int_eq(util_int(list, "ticks"), 150);
	ck_assert_int_eq(util_int(list, "tick_ms"), 2000);
	ck_assert_int_eq(util_int(list, "count"), 0);
	json_decref(list);
	for (int i = 0; i < 6; i++)
		json_decref(util_call_ok(fd,
		    "{\"op\":\"record_success\",\"name\":\"h1\",\"duration_ms\":%d}",
		    i < 2 ? 500 : 1));
	for (int i = 0; i < 3; i++)
		json_decref(util_call_ok(fd, "{\"op\":\"record_failure\",\"name\":\"h1\"}"));
	list = history_wait("h1", 1, 9);
	ck_assert_int_eq(history_sum(list, "h1", 1, &samples), 9);
	ck_assert_int_ge(samples, 1);
	ck_assert_int_eq(history_sum(list, "h1", 2, NULL), 3);
	ck_assert_int_eq(history_sum(list, "h1", 3, NULL), 2);
	ck_assert_int_eq(history_sum(list, "h1", 4, NULL), 0);
	json_decref(list);
	/* A tick took those: these are a later tick's. */
	for (int i = 0; i < 4; i++)
		json_decref(util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"h1\"}"));
	json_decref(util_call_ok(fd, "{\"op\":\"set_state\",\"name\":\"r\",\"state\":\"open\"}"));
	for (int i = 0; i < 3; i++) {
		json_t *a = util_call_ok(fd, "{\"op\":\"allow\",\"name\":\"r\"}");

		ck_assert(!util_bool(a, "allowed"));
		json_decref(a);
	}
	json_decref(util_call_ok(fd, "{\"op\":\"allow\",\"name\":\"b\"}"));
	json_decref(util_call_ok(fd, "{\"op\":\"allow\",\"name\":\"b\"}"));
	json_decref(history_wait("h1", 1, 13));
	json_decref(history_wait("r", 4, 3));
	list = history_wait("b", 5, 1);
	ck_assert_int_eq(history_sum(list, "h1", 1, &samples), 13);
	ck_assert_int_ge(samples, 2);
	ck_assert_int_eq(history_sum(list, "h1", 2, NULL), 3);
	ck_assert_int_eq(history_sum(list, "h1", 3, NULL), 2);
	ck_assert_int_eq(history_sum(list, "r", 4, NULL), 3);
	ck_assert_int_eq(history_sum(list, "r", 1, NULL), 0);
	ck_assert_int_eq(history_sum(list, "b", 5, NULL), 1);
	ck_assert_int_eq(util_int(list, "total"), 3);
	ck_assert_int_eq(util_int(list, "left_out"), 0);
	ck_assert(!util_bool(list, "truncated"));
	json_decref(list);
	ck_assert(util_stats_reach(fd, "dashboard_history_circuits", 3));
	ck_assert(util_stats_reach(fd, "dashboard_clients", 0));
	/* A deleted circuit's history goes with it. */
	json_decref(util_call_ok(fd, "{\"op\":\"delete\",\"name\":\"r\"}"));
	ck_assert(util_stats_reach(fd, "dashboard_history_circuits", 2));
	list = history_get();
	ck_assert_ptr_null(history_of(list, "r"));
	json_decref(list);
	{
		/* What a tick costs (printed, not asserted). */
		json_t *st = util_call_ok(fd, "{\"op\":\"stats\"}");

		printf("history: a tick over 3 circuits took %lld us\n",
		    (long long)util_int(st, "dashboard_tick_us"));
		json_decref(st);
	}
}
END_TEST

/* More busy circuits than DASHBOARD_HISTORY_CIRCUITS (1,000): 1,000 get a
 * history, the others are counted as left out; a history longer than
 * max_output_bytes is cut, says so and counts the cut. */
START_TEST(test_history_cap)
{
	json_t *list, *st;

	start("max_output_bytes = 65536\n");
	for (int i = 0; i < 1010; i++)
		json_decref(util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"c%04d\"}", i));
	ck_assert(util_stats_reach_min(fd, "dashboard_history_left_out", 10));
	ck_assert(util_stats_reach(fd, "dashboard_history_circuits", 1000));
	list = history_get();
	ck_assert_int_eq(util_int(list, "total"), 1000);
	ck_assert_int_ge(util_int(list, "left_out"), 10);
	ck_assert(util_bool(list, "truncated"));
	ck_assert_int_lt(util_int(list, "count"), 1000);
	ck_assert_int_gt(util_int(list, "count"), 0);
	json_decref(list);
	{
		char *http = http_get("/api/history");

		ck_assert_int_le(strlen(body(http)), 65536 + 256);
		free(http);
	}
	st = util_call_ok(fd, "{\"op\":\"stats\"}");
	ck_assert_int_ge(util_int(st, "limits.list_truncated"), 1);
	printf("history: a tick over 1,010 circuits took %lld us\n",
	    (long long)util_int(st, "dashboard_tick_us"));
	json_decref(st);
}
END_TEST

/* Odd names in the history: valid JSON with the exact strings. */
START_TEST(test_history_odd_names)
{
	static const char *const names[] = { "quote\"d", "back\\slash", "caf\xc3\xa9 \xe6\x97\xa5",
		"</script><b>", "ctl\x01x" };
	static const char *const wire[] = { "quote\\\"d", "back\\\\slash",
		"caf\xc3\xa9 \xe6\x97\xa5", "</script><b>", "ctl\\u0001x" };
	json_t *list;

	start("");
	for (size_t i = 0; i < 5; i++) {
		json_t *r = util_call(fd, "{\"op\":\"record_success\",\"name\":\"%s\"}", wire[i]);
		bool stored = r != NULL && util_code(r) == NULL;

		json_decref(r);
		if (!stored)
			continue; /* a name cbd refuses (control bytes) has no history */
		list = history_wait(names[i], 1, 1);
		ck_assert_msg(history_sum(list, names[i], 1, NULL) == 1, "%s", names[i]);
		json_decref(list);
	}
}
END_TEST

/* All 1,000 histories taken: a newly busy circuit is left out (counted)
 * until the least recently busy has had no calls for 30 s
 * (DASHBOARD_HISTORY_YIELD_TICKS), then takes its place. */
START_TEST(test_history_yield)
{
	long long deadline;
	json_t *list, *st;
	bool found = false;

	start("");
	for (int i = 0; i < 1000; i++)
		json_decref(util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"c%04d\"}", i));
	ck_assert(util_stats_reach(fd, "dashboard_history_circuits", 1000));
	json_decref(util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"late\"}"));
	ck_assert(util_stats_reach_min(fd, "dashboard_history_left_out", 1));
	/* 15 ticks of 2 s, and the harness's bound on top. */
	deadline = harness_mono_ms() + 40000 + harness_timeout_ms();
	while (!found && harness_mono_ms() < deadline) {
		json_decref(util_call_ok(fd, "{\"op\":\"record_success\",\"name\":\"late\"}"));
		harness_sleep_ms(500);
		list = history_get();
		found = history_of(list, "late") != NULL;
		if (found)
			ck_assert_int_eq(util_int(list, "total"), 1000);
		json_decref(list);
	}
	ck_assert_msg(found, "late never got a history");
	st = util_call_ok(fd, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(st, "dashboard_history_circuits"), 1000);
	ck_assert_int_ge(util_int(st, "dashboard_history_left_out"), 1);
	json_decref(st);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("dashboard");
	TCase *tc = tcase_create("dashboard");

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_routes);
	tcase_add_test(tc, test_events_of_a_trip);
	tcase_add_test(tc, test_streams_bounded);
	tcase_add_test(tc, test_stalled_stream_dropped);
	tcase_add_test(tc, test_streams_count_in_total_output);
	tcase_add_test(tc, test_odd_names);
	tcase_add_test(tc, test_list_cut);
	tcase_add_test(tc, test_list_in_steps);
	tcase_add_test(tc, test_policy_event);
	tcase_add_test(tc, test_history);
	tcase_add_test(tc, test_history_cap);
	tcase_add_test(tc, test_history_odd_names);
	tcase_add_test(tc, test_history_yield);
	suite_add_tcase(s, tc);
	return check_run(s, NULL);
}
