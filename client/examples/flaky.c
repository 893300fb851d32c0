/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flaky.c — libcbclient's example: protect calls to a flaky dependency
 * with a circuit shared through cbd.
 *
 *   flaky [-s SOCKET] [-n CALLS] [-p FAIL_PERCENT]
 *
 * Every process running this with the same circuit name ("flaky-demo")
 * shares one circuit: when one trips it, the others fail fast too. If cbd
 * is not running, the breaker keeps working on a local copy (policy
 * LOCAL) and says so through on_store_error.
 *
 * It declares a small policy so the demo trips quickly. A circuit's policy
 * is cbd's to decide: an operator's [circuit "flaky-demo"] section wins,
 * and the first declaration sticks; a declaration that differs is
 * reported (policy_conflict) and printed at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cbclient.h>

static const char usage[] = "usage: flaky [-s SOCKET] [-n CALLS] [-p FAIL_PERCENT]\n"
			    "Calls a dependency that fails FAIL_PERCENT% of the time (default 60)\n"
			    "CALLS times (default 40) through the circuit \"flaky-demo\" in cbd\n"
			    "(SOCKET, else $CBD_SOCKET, else /run/cbd/cbd.sock).\n";

/* The "dependency": fails fail_percent of the time. */
static int
call_dependency(void *arg)
{
	int fail_percent = *(int *)arg;

	usleep(2000);
	return rand() % 100 < fail_percent ? -1 : 0;
}

/* What we answer while the circuit is open. */
static int
serve_cached(void *arg, int64_t retry_after_ms, void *user)
{
	(void)arg;
	(void)user;
	printf("  fallback: cached answer (retry in %lld ms)\n", (long long)retry_after_ms);
	return 0;
}

static void
state_changed(cbc_state prev, cbc_state next, const int *error, void *user)
{
	(void)user;
	printf("  circuit: %s -> %s%s\n", cbc_state_name(prev), cbc_state_name(next),
	    error != NULL ? " (after a failed call)" : "");
}

static void
store_error(const cbc_error *error, cbc_store_op op, void *user)
{
	int *reported = user;

	if ((*reported)++ > 0)
		return; /* say it once */
	printf("  cbd unavailable during %s: %s (breaking on a local copy)\n",
	    cbc_store_op_name(op), error->message);
}

int
main(int argc, char **argv)
{
	const char *socket_path = NULL;
	int calls = 40, fail_percent = 60, c;
	cbc_breaker_options opts;
	cbc_breaker *breaker;
	cbc_store *store;
	cbc_conn *conn;
	int store_errors = 0;
	cbc_error err;

	if (argc > 1 && strcmp(argv[1], "--help") == 0) {
		printf("%s", usage);
		return 0;
	}
	while ((c = getopt(argc, argv, "s:n:p:h")) != -1) {
		switch (c) {
		case 's':
			socket_path = optarg;
			break;
		case 'n':
			calls = atoi(optarg);
			break;
		case 'p':
			fail_percent = atoi(optarg);
			break;
		case 'h':
			printf("%s", usage);
			return 0;
		default:
			fprintf(stderr, "%s", usage);
			return 2;
		}
	}
	conn = cbc_conn_new(socket_path, &err);
	if (conn == NULL) {
		fprintf(stderr, "flaky: %s\n", err.message);
		return 1;
	}
	store = cbc_store_new_remote(conn, &err);
	if (store == NULL) {
		fprintf(stderr, "flaky: %s\n", err.message);
		cbc_conn_free(conn);
		return 1;
	}
	cbc_breaker_options_init(&opts);
	opts.name = "flaky-demo";
	opts.failure_threshold = 3;
	opts.success_threshold = 2;
	opts.break_ms = 50;
	opts.store = store;
	opts.store_policy = CBC_POLICY_LOCAL;
	opts.fallback = serve_cached;
	opts.on_state_change = state_changed;
	opts.on_store_error = store_error;
	opts.user = &store_errors;
	breaker = cbc_breaker_new(&opts, &err);
	if (breaker == NULL) {
		fprintf(stderr, "flaky: %s\n", err.message);
		cbc_store_free(store);
		cbc_conn_free(conn);
		return 1;
	}
	srand((unsigned)getpid());
	for (int i = 0; i < calls; i++) {
		cbc_exec_result res;
		cbc_status st =
		    cbc_breaker_execute(breaker, call_dependency, &fail_percent, &res, &err);

		if (st != CBC_OK)
			printf("call %2d: not made: %s\n", i, err.message);
		else if (res.called)
			printf("call %2d: %s\n", i, res.result == 0 ? "ok" : "failed");
		else
			printf("call %2d: served by the fallback\n", i);
		usleep(5000);
	}
	if (cbc_conn_policy_conflicts(conn) > 0) {
		char keys[256];

		cbc_conn_last_policy_conflict(conn, keys, sizeof keys);
		printf("note: cbd runs flaky-demo with its own %s (see cbctl get flaky-demo)\n",
		    keys[0] != '\0' ? keys : "policy");
	}
	cbc_breaker_free(breaker);
	cbc_store_free(store);
	cbc_conn_free(conn);
	return 0;
}
