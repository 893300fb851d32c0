/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agree-c.c — the C side of tests/clients-agree.sh: the same calls the
 * Python, Node.js and Go programs of that test make, through libcbclient
 * on the cbd at $CBD_SOCKET, in circuits named after PREFIX:
 *   PREFIX-success        5 successful calls under a classifier written
 *                         the natural way (404: ignored, else failure);
 *   PREFIX-tight          10 instantly failing calls, threshold 3, cached:
 *                         prints "runs N" (the callback's runs);
 *   PREFIX-count-cached, PREFIX-count-uncached
 *                         2 ignored errors, 3 failures (threshold 3), 4
 *                         calls while open, then the breaker is freed.
 * With `bulkhead NAME SERVER`: 12 calls through circuit NAME (declared
 * max_concurrent 3, waiting up to 10 s for a ticket), 4 threads at once,
 * each call one request to the counting server at the Unix socket SERVER;
 * prints "errors N".
 * With `serve`: the C side of tests/fleet-clients-reseed.sh, a long-lived
 * process whose cached breakers (one per circuit named, default policy,
 * made on first use) answer commands read from stdin, one a line, each
 * answered with one line "NAME RESULT" (RESULT: allowed, the refusal's
 * reason such as held or open, or error):
 *   call NAME          one call (a success when it runs);
 *   expect NAME WANT   a call every 10 ms until RESULT is WANT (60 s at
 *                      most): the last RESULT;
 *   sample NAME FILE   a call every 10 ms until FILE exists (300 s at
 *                      most): "NAME CALLS RESULT[,RESULT...]", the results
 *                      seen in the order first seen;
 *   first NAME WANT    a call every 10 ms until RESULT is WANT (120 s at
 *                      most): "NAME RESULT MS SEEN", MS the wall clock
 *                      (ms since the epoch) when that call returned, SEEN
 *                      the results before it (as sample's, or -).
 *
 *   agree-c PREFIX
 *   agree-c bulkhead NAME SERVER
 *   agree-c serve
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/un.h>
#include <unistd.h>

#include "cbclient.h"

/* Results of the calls: a not-found (ignored by the natural classifier),
 * and an error the counting classifier ignores. */
#define RESULT_NOT_FOUND 404
#define RESULT_IGNORED 2

static int
call_ok(void *arg)
{
	(void)arg;
	return 0;
}

static int
call_fail(void *arg)
{
	int *runs = arg;

	if (runs != NULL)
		(*runs)++;
	return 1;
}

static int
call_ignored(void *arg)
{
	(void)arg;
	return RESULT_IGNORED;
}

static cbc_outcome
natural(int result, void *user)
{
	(void)user;
	return result == RESULT_NOT_FOUND ? CBC_OUTCOME_IGNORE : CBC_OUTCOME_FAILURE;
}

static cbc_outcome
counting(int result, void *user)
{
	(void)user;
	return result == RESULT_IGNORED ? CBC_OUTCOME_IGNORE : CBC_OUTCOME_FAILURE;
}

/* A breaker named PREFIX-suffix on store. */
static cbc_breaker *
breaker(cbc_store *store, const char *prefix, const char *suffix, cbc_cache_mode cache,
    cbc_classify_fn classify)
{
	char name[CBC_NAME_MAX + 1];
	cbc_breaker_options o;
	cbc_error err;
	cbc_breaker *b;

	snprintf(name, sizeof name, "%s-%s", prefix, suffix);
	cbc_breaker_options_init(&o);
	o.name = name;
	o.store = store;
	o.cache = cache;
	o.classify = classify;
	o.failure_threshold = 3;
	o.break_ms = 60000;
	b = cbc_breaker_new(&o, &err);
	if (b == NULL)
		fprintf(stderr, "agree-c: %s: %s\n", name, err.message);
	return b;
}

/* One request to the counting server: connect, "x", read "ok". */
static int
call_counting(void *arg)
{
	const char *path = arg;
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	char got[8] = "";
	ssize_t n;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0), ok;

	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
	    write(fd, "x", 1) == 1 && shutdown(fd, SHUT_WR) == 0 &&
	    (n = read(fd, got, sizeof got - 1)) == 2 && memcmp(got, "ok", 2) == 0;
	if (fd >= 0)
		close(fd);
	return ok ? 0 : 1;
}

typedef struct lane {
	cbc_breaker *b;
	const char *server;
	int errors;
} lane;

static void *
lane_run(void *arg)
{
	lane *l = arg;

	for (int i = 0; i < 3; i++) {
		cbc_exec_result r;
		cbc_error err;

		if (cbc_breaker_execute(l->b, call_counting, (void *)l->server, &r, &err) !=
			CBC_OK ||
		    !r.called || r.result != 0) {
			l->errors++;
			fprintf(stderr, "agree-c: bulkhead call: %s (result %d)\n", err.message,
			    r.result);
		}
	}
	return NULL;
}

/* agree-c bulkhead NAME SERVER */
static int
bulkhead(const char *name, const char *server)
{
	cbc_breaker_options o;
	pthread_t threads[4];
	lane lanes[4];
	cbc_error err;
	cbc_breaker *b;
	cbc_conn *conn = cbc_conn_new(NULL, &err);
	cbc_store *store = conn != NULL ? cbc_store_new_remote(conn, &err) : NULL;
	int errors = 0;

	if (store == NULL || cbc_conn_set_timeouts(conn, 5000, 5000, &err) != CBC_OK) {
		fprintf(stderr, "agree-c: %s\n", err.message);
		return 1;
	}
	cbc_breaker_options_init(&o);
	o.store = store;
	o.name = name;
	o.max_concurrent = 3;
	o.wait_ms = 10000;
	b = cbc_breaker_new(&o, &err);
	if (b == NULL) {
		fprintf(stderr, "agree-c: %s: %s\n", name, err.message);
		return 1;
	}
	for (int i = 0; i < 4; i++) {
		lanes[i] = (lane){ b, server, 0 };
		pthread_create(&threads[i], NULL, lane_run, &lanes[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(threads[i], NULL);
		errors += lanes[i].errors;
	}
	cbc_breaker_free(b);
	cbc_store_free(store);
	cbc_conn_free(conn);
	printf("errors %d\n", errors);
	return 0;
}

/* serve's breakers, by circuit name. */
#define SERVE_MAX 16

typedef struct serve_state {
	cbc_store *store;
	cbc_breaker *b[SERVE_MAX];
	size_t n;
} serve_state;

static cbc_breaker *
serve_breaker(serve_state *s, const char *name)
{
	cbc_breaker_options o;
	cbc_error err;

	for (size_t i = 0; i < s->n; i++)
		if (strcmp(cbc_breaker_name(s->b[i]), name) == 0)
			return s->b[i];
	if (s->n == SERVE_MAX)
		return NULL;
	cbc_breaker_options_init(&o);
	o.name = name;
	o.store = s->store;
	o.cache = CBC_CACHE_ON;
	/* A store error is reported as one, not answered by a local breaker. */
	o.store_policy = CBC_POLICY_REJECT;
	s->b[s->n] = cbc_breaker_new(&o, &err);
	if (s->b[s->n] == NULL) {
		fprintf(stderr, "agree-c: %s: %s\n", name, err.message);
		return NULL;
	}
	return s->b[s->n++];
}

/* One call through b: "allowed", the refusal's reason, or "error". */
static const char *
serve_call(cbc_breaker *b)
{
	cbc_exec_result r;
	cbc_error err;

	switch (cbc_breaker_execute(b, call_ok, NULL, &r, &err)) {
	case CBC_OK:
		return "allowed";
	case CBC_EOPEN:
		return cbc_reason_name(r.reason);
	default:
		fprintf(stderr, "agree-c: %s: %s\n", cbc_breaker_name(b), err.message);
		return "error";
	}
}

/* Append result to the comma-separated seen unless it is there already. */
static void
seen_add(char *seen, size_t size, const char *result)
{
	size_t len = strlen(seen), rlen = strlen(result);

	for (const char *p = seen; *p != '\0';) {
		size_t n = strcspn(p, ",");

		if (n == rlen && strncmp(p, result, n) == 0)
			return;
		p += n + (p[n] == ',');
	}
	if (len + rlen + 2 <= size)
		snprintf(seen + len, size - len, "%s%s", len > 0 ? "," : "", result);
}

static bool
serve_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* agree-c serve: commands on stdin (above), answers on stdout. */
static int
serve(void)
{
	serve_state s = { .n = 0 };
	cbc_error err;
	cbc_conn *conn = cbc_conn_new(NULL, &err);
	char line[1024];

	s.store = conn != NULL ? cbc_store_new_remote(conn, &err) : NULL;
	if (s.store == NULL || cbc_conn_set_timeouts(conn, 5000, 5000, &err) != CBC_OK) {
		fprintf(stderr, "agree-c: %s\n", err.message);
		return 1;
	}
	while (fgets(line, sizeof line, stdin) != NULL) {
		char cmd[16], name[CBC_NAME_MAX + 1], arg[512] = "";
		cbc_breaker *b;
		const char *got = "error";

		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "%15s %128s %511s", cmd, name, arg) < 2 ||
		    (b = serve_breaker(&s, name)) == NULL) {
			printf("%s error\n", line);
			fflush(stdout);
			continue;
		}
		if (strcmp(cmd, "call") == 0) {
			got = serve_call(b);
		} else if (strcmp(cmd, "expect") == 0) {
			for (int i = 0; i < 6000; i++) {
				got = serve_call(b);
				if (strcmp(got, arg) == 0)
					break;
				usleep(10000);
			}
		} else if (strcmp(cmd, "first") == 0) {
			char seen[256] = "";
			struct timespec at = { 0, 0 };

			for (int i = 0; i < 12000; i++) {
				got = serve_call(b);
				clock_gettime(CLOCK_REALTIME, &at);
				if (strcmp(got, arg) == 0)
					break;
				seen_add(seen, sizeof seen, got);
				usleep(10000);
			}
			printf("%s %s %lld %s\n", name, got,
			    (long long)at.tv_sec * 1000 + at.tv_nsec / 1000000,
			    seen[0] != '\0' ? seen : "-");
			fflush(stdout);
			continue;
		} else if (strcmp(cmd, "sample") == 0) {
			char seen[256] = "";
			int calls = 0;

			for (int i = 0; i < 30000 && !serve_exists(arg); i++) {
				seen_add(seen, sizeof seen, serve_call(b));
				calls++;
				usleep(10000);
			}
			printf("%s %d %s\n", name, calls, seen);
			fflush(stdout);
			continue;
		}
		printf("%s %s\n", name, got);
		fflush(stdout);
	}
	for (size_t i = 0; i < s.n; i++)
		cbc_breaker_free(s.b[i]);
	cbc_store_free(s.store);
	cbc_conn_free(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	static const cbc_cache_mode modes[] = { CBC_CACHE_ON, CBC_CACHE_OFF };
	static const char *const mode_names[] = { "count-cached", "count-uncached" };
	cbc_conn *conn;
	cbc_store *store;
	cbc_breaker *b;
	cbc_error err;
	int runs = 0;

	if (argc == 4 && strcmp(argv[1], "bulkhead") == 0)
		return bulkhead(argv[2], argv[3]);
	if (argc == 2 && strcmp(argv[1], "serve") == 0)
		return serve();
	if (argc != 2) {
		fprintf(stderr,
		    "usage: agree-c PREFIX | agree-c bulkhead NAME SERVER | agree-c serve\n");
		return 2;
	}
	conn = cbc_conn_new(NULL, &err);
	store = conn != NULL ? cbc_store_new_remote(conn, &err) : NULL;
	if (store == NULL || cbc_conn_set_timeouts(conn, 5000, 5000, &err) != CBC_OK) {
		fprintf(stderr, "agree-c: %s\n", err.message);
		return 1;
	}
	if ((b = breaker(store, argv[1], "success", CBC_CACHE_AUTO, natural)) == NULL)
		return 1;
	for (int i = 0; i < 5; i++)
		cbc_breaker_execute(b, call_ok, NULL, NULL, NULL);
	cbc_breaker_free(b);
	if ((b = breaker(store, argv[1], "tight", CBC_CACHE_AUTO, NULL)) == NULL)
		return 1;
	for (int i = 0; i < 10; i++)
		cbc_breaker_execute(b, call_fail, &runs, NULL, NULL);
	cbc_breaker_free(b);
	for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
		if ((b = breaker(store, argv[1], mode_names[m], modes[m], counting)) == NULL)
			return 1;
		for (int i = 0; i < 2; i++)
			cbc_breaker_execute(b, call_ignored, NULL, NULL, NULL);
		for (int i = 0; i < 3 + 4; i++)
			cbc_breaker_execute(b, call_fail, NULL, NULL, NULL);
		cbc_breaker_free(b);
	}
	printf("runs %d\n", runs);
	cbc_store_free(store);
	cbc_conn_free(conn);
	return 0;
}
