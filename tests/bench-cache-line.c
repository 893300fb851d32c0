/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-cache-line.c — what one event costs a watching process: a change
 * event line, as cbd writes it on a trip, fed N times to the watch cache's
 * line handler (decode and apply). For instructions per line:
 *
 *   valgrind --tool=callgrind --toggle-collect=cbci_cache_apply_line \
 *       tests/bench-cache-line [N [FILE]]
 *
 * (callgrind's total Ir / N). FILE: another line to feed (its first line).
 * The cache has no connection (its socket does not exist), so nothing but
 * this program applies lines. Linked statically: it calls libcbclient's
 * internals. Not run by make check.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* A trip of svc.a with the built-in policy, as cbd 0.2 writes it. */
static const char event_line[] =
    "{\"event\":\"change\",\"from\":\"closed\",\"snapshot\":{\"name\":\"svc.a\",\"state\":"
    "\"open\",\"failure_count\":5,\"success_count\":0,\"last_failure_at\":1796052888151,"
    "\"opened_at\":1796052888151,\"retry_after_ms\":30000,\"policy\":{\"failure_threshold\":"
    "5,\"success_threshold\":2,\"break_ms\":30000,\"half_open_max\":1,\"slot_ttl_ms\":30000,"
    "\"max_gap_ms\":null,\"trip\":\"consecutive\",\"window\":\"count\",\"window_size\":100,"
    "\"minimum_calls\":10,\"failure_rate\":50,\"slow_call_ms\":null,\"slow_call_rate\":100,"
    "\"min_reporters\":1,\"reporter_window_ms\":60000,\"break_backoff\":1,\"break_max_ms\":"
    "null,\"preset\":null,\"source\":{\"failure_threshold\":\"builtin\",\"success_"
    "threshold\":\"builtin\",\"break_ms\":\"builtin\",\"half_open_max\":\"builtin\",\"slot_"
    "ttl_ms\":\"builtin\",\"max_gap_ms\":\"builtin\",\"trip\":\"builtin\",\"window\":"
    "\"builtin\",\"window_size\":\"builtin\",\"minimum_calls\":\"builtin\",\"failure_rate\":"
    "\"builtin\",\"slow_call_ms\":\"builtin\",\"slow_call_rate\":\"builtin\",\"min_"
    "reporters\":\"builtin\",\"reporter_window_ms\":\"builtin\",\"break_backoff\":"
    "\"builtin\",\"break_max_ms\":\"builtin\",\"preset\":\"builtin\"}},\"hold\":null,"
    "\"totals\":{\"successes\":0,\"failures\":5,\"ignored\":0,\"slow\":0,\"rejected\":0},"
    "\"current_break_ms\":30000},\"reason\":\"failure threshold reached\"}";

/* The first line of path into a new buffer; NULL when unreadable. */
static char *
read_line(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (f == NULL)
		return NULL;
	n = getline(&line, &cap, f);
	fclose(f);
	if (n <= 0) {
		free(line);
		return NULL;
	}
	if (line[n - 1] == '\n')
		n--;
	*len = (size_t)n;
	return line;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 10000;
	char *owned = NULL;
	const char *line = event_line;
	size_t len = sizeof event_line - 1;
	cbc_cache_stats stats;
	struct timespec t0, t1;
	cbci_cache *c;

	if (argc > 2 && (line = owned = read_line(argv[2], &len)) == NULL) {
		fprintf(stderr, "bench-cache-line: cannot read a line from %s\n", argv[2]);
		return 1;
	}
	c = cbci_cache_acquire("/nonexistent/bench-cache-line.sock", NULL);
	if (c == NULL || cbci_cache_watch(c, "svc.a") == NULL) {
		fprintf(stderr, "bench-cache-line: cannot make a cache\n");
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++)
		cbci_cache_apply_line(c, line, len);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cbci_cache_stats(c, &stats);
	printf("%ld lines of %zu bytes: %.0f ns each; events %llu, bad lines %llu\n", n, len,
	    ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
		(double)(n > 0 ? n : 1),
	    (unsigned long long)stats.events, (unsigned long long)stats.bad_lines);
	cbci_cache_release(c, cbci_cache_generation());
	free(owned);
	return 0;
}
