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
 *
 *   agree-c PREFIX
 *   agree-c bulkhead NAME SERVER
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
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
	if (argc != 2) {
		fprintf(stderr, "usage: agree-c PREFIX | agree-c bulkhead NAME SERVER\n");
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
