/*
 * bench_client.c — latency of libcbclient calls, for the numbers the tests
 * only bound loosely: a round trip to a live cbd, a breaker call on cbd and
 * on a private store, a call while cbd is missing, and calls while cbd is
 * stopped (SIGSTOP) with and without the timeout backoff.
 *
 *   CBD_BINARY=src/cbd tests/bench_client
 *
 * Starts its own cbd on a temporary socket (tests/cbd-harness API).
 * Prints one line per measurement; not run by make check.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cbclient.h"
#include "cbd-harness.h"

#define SAMPLES_MAX 20000

static double samples[SAMPLES_MAX];

static double
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Print p50/p99/max of the first n samples (µs). */
static void
report(const char *what, int n)
{
	qsort(samples, (size_t)n, sizeof samples[0], cmp_double);
	printf("%-52s n=%-6d p50=%9.1f us  p99=%9.1f us  max=%9.1f us\n", what, n, samples[n / 2],
	    samples[n * 99 / 100], samples[n - 1]);
}

static int
call_ok(void *arg)
{
	(void)arg;
	return 0;
}

static cbc_breaker *
breaker_on(cbc_store *store, int64_t backoff_ms)
{
	cbc_breaker_options o;

	cbc_breaker_options_init(&o);
	o.name = "bench";
	o.store = store;
	o.timeout_backoff_ms = backoff_ms;
	return cbc_breaker_new(&o, NULL);
}

/* Time n breaker calls, sleeping gap_us between them. */
static void
time_calls(cbc_breaker *b, const char *what, int n, int gap_us)
{
	for (int i = 0; i < n; i++) {
		double t0 = now_us();

		cbc_breaker_execute(b, call_ok, NULL, NULL, NULL);
		samples[i] = now_us() - t0;
		if (gap_us > 0)
			usleep((useconds_t)gap_us);
	}
	report(what, n);
}

int
main(void)
{
	cbd_harness h;
	cbc_conn *conn;
	cbc_store *remote, *local;
	cbc_breaker *b;
	cbc_snapshot s;
	char what[96];

	signal(SIGPIPE, SIG_IGN);
	if (!harness_start(&h, "")) {
		fprintf(stderr, "bench_client: cannot start cbd (is CBD_BINARY set?)\n");
		return 1;
	}
	conn = cbc_conn_new(h.socket_path, NULL);
	remote = cbc_store_new_remote(conn, NULL);

	for (int i = 0; i < 2000; i++) {
		double t0 = now_us();

		cbc_get(conn, "bench", NULL, &s, NULL);
		samples[i] = now_us() - t0;
	}
	report("get round trip, live cbd", 2000);

	b = breaker_on(remote, -1);
	time_calls(b, "breaker execute, live cbd (get + record)", 2000, 0);
	cbc_breaker_free(b);

	local = cbc_store_new_local(0, NULL);
	b = breaker_on(local, -1);
	time_calls(b, "breaker execute, resilient(local) store", SAMPLES_MAX, 0);
	cbc_breaker_free(b);
	cbc_store_free(local);

	/* cbd missing: the socket file is gone, connect fails at once. */
	{
		cbc_conn *dead = cbc_conn_new("/tmp/bench-no-such-cbd.sock", NULL);
		cbc_store *dead_store = cbc_store_new_remote(dead, NULL);

		b = breaker_on(dead_store, -1);
		time_calls(b, "breaker execute, cbd missing (LOCAL policy)", 2000, 0);
		cbc_breaker_free(b);
		cbc_store_free(dead_store);
		cbc_conn_free(dead);
	}

	/* cbd stopped, 50 ms timeouts. */
	cbc_conn_set_timeouts(conn, 50, 50, NULL);
	kill(h.pid, SIGSTOP);
	b = breaker_on(remote, -1);
	snprintf(what, sizeof what, "cbd stopped, io 50 ms, backoff %d ms, 1 call/10 ms",
	    CBC_DEFAULT_TIMEOUT_BACKOFF_MS);
	time_calls(b, what, 60, 10000);
	cbc_breaker_free(b);
	b = breaker_on(remote, 0);
	time_calls(b, "cbd stopped, io 50 ms, no backoff", 10, 0);
	cbc_breaker_free(b);
	kill(h.pid, SIGCONT);

	cbc_store_free(remote);
	cbc_conn_free(conn);
	harness_stop(&h);
	return 0;
}
