/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.c — throughput and latency of cbd over its Unix socket. Prints
 * figures; asserts nothing (speed targets are judged by people reading
 * them, never by timed test assertions).
 *
 *   bench [-s SOCKET] [-d SECONDS] [-c CONNS,...] [-p DEPTH]
 *
 * Without -s it starts $CBD_BINARY (else ./src/cbd) on a temporary socket
 * and stops it at the end. Each connection is a thread sending the sidecar
 * pair a service sends per outbound call — allow, then record — on its own
 * circuit name among a shared set of 64, `depth` requests in flight.
 *
 * It shares connecting, sending, the clock, sorting samples, starting cbd
 * and the -c list with the other benchmarks (cbd-harness, bench-load) but
 * keeps its own threads rather than bench_run's one epoll thread: its
 * figures stay comparable with its earlier ones.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-load.h"
#include "cbd-harness.h"

#define BENCH_MAX_DEPTH 1024
#define BENCH_LAT_SAMPLES 200000
#define BENCH_BUF 65536

typedef struct worker {
	pthread_t thread;
	const char *socket_path;
	int index;
	int depth;
	double seconds;
	long requests;
	long errors;
	double *latencies; /* per request, depth 1 only */
	long latency_count;
} worker;

/* Read until `lines` newlines arrived; count replies that are not ok. */
static bool
read_replies(int fd, char *buf, int lines, long *errors)
{
	int seen = 0;

	while (seen < lines) {
		ssize_t n = read(fd, buf, BENCH_BUF);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n')
				seen++;
		}
		if (memmem(buf, (size_t)n, "\"ok\": false", 11) != NULL ||
		    memmem(buf, (size_t)n, "\"ok\":false", 10) != NULL)
			(*errors)++;
	}
	return true;
}

static void *
worker_run(void *arg)
{
	worker *w = arg;
	char *out = malloc((size_t)w->depth * 160 + 1);
	char *in = malloc(BENCH_BUF);
	int fd = harness_connect_path(w->socket_path);
	double end;

	if (fd < 0 || out == NULL || in == NULL) {
		fprintf(stderr, "bench: worker %d cannot connect to %s\n", w->index,
		    w->socket_path);
		w->errors++;
		goto done;
	}
	end = harness_now_s() + w->seconds;
	while (harness_now_s() < end) {
		size_t len = 0;
		double t0 = harness_now_s();

		for (int i = 0; i < w->depth; i++) {
			int circuit = (w->index * 7 + i) % BENCH_KEYS;

			/* Counted over the whole run: at depth 1 the batches
			 * alternate allow and record (by position in a batch,
			 * depth 1 only ever sent allow). */
			len += (size_t)sprintf(out + len,
			    ((w->requests + i) % 2 == 0)
				? "{\"op\":\"allow\",\"name\":\"svc-%d\"}\n"
				: "{\"op\":\"record\",\"name\":\"svc-%d\",\"outcome\":"
				  "\"success\"}\n",
			    circuit);
		}
		if (!harness_send_all(fd, out, len) ||
		    !read_replies(fd, in, w->depth, &w->errors)) {
			w->errors++;
			break;
		}
		w->requests += w->depth;
		if (w->latencies != NULL && w->latency_count < BENCH_LAT_SAMPLES)
			w->latencies[w->latency_count++] = harness_now_s() - t0;
	}
done:
	if (fd >= 0)
		close(fd);
	free(out);
	free(in);
	return NULL;
}

/* One run: conns threads at depth for seconds; prints one line. */
static void
run(const char *path, int conns, int depth, double seconds)
{
	worker *w = calloc((size_t)conns, sizeof *w);
	long total = 0, errors = 0;
	double t0, elapsed;
	double *all = NULL;
	long all_count = 0;

	t0 = harness_now_s();
	for (int i = 0; i < conns; i++) {
		w[i].socket_path = path;
		w[i].index = i;
		w[i].depth = depth;
		w[i].seconds = seconds;
		if (depth == 1)
			w[i].latencies = malloc(sizeof(double) * BENCH_LAT_SAMPLES);
		pthread_create(&w[i].thread, NULL, worker_run, &w[i]);
	}
	for (int i = 0; i < conns; i++) {
		pthread_join(w[i].thread, NULL);
		total += w[i].requests;
		errors += w[i].errors;
		all_count += w[i].latency_count;
	}
	elapsed = harness_now_s() - t0;
	printf("conns %4d  depth %4d  %10.0f req/s  errors %ld", conns, depth,
	    (double)total / elapsed, errors);
	if (depth == 1 && all_count > 0) {
		long k = 0;

		all = malloc(sizeof(double) * (size_t)all_count);
		for (int i = 0; i < conns; i++)
			for (long j = 0; j < w[i].latency_count; j++)
				all[k++] = w[i].latencies[j];
		harness_sort_samples(all, (size_t)all_count);
		printf("  p50 %.1f us  p99 %.1f us", all[all_count / 2] * 1e6,
		    all[all_count * 99 / 100] * 1e6);
		free(all);
	}
	printf("\n");
	fflush(stdout);
	for (int i = 0; i < conns; i++)
		free(w[i].latencies);
	free(w);
}

int
main(int argc, char **argv)
{
	const char *path = NULL;
	const char *conns_text = "1,8,50";
	int conns[BENCH_CONNS_MAX], runs;
	cbd_harness cbd = { 0 };
	double seconds = 2.0;
	int depth = 0;
	int opt;

	while ((opt = getopt(argc, argv, "s:d:c:p:h")) != -1) {
		switch (opt) {
		case 's':
			path = optarg;
			break;
		case 'd':
			seconds = atof(optarg);
			if (seconds <= 0 || seconds > 60) {
				fprintf(stderr, "bench: -d takes 0..60 seconds\n");
				return 2;
			}
			break;
		case 'c':
			conns_text = optarg;
			break;
		case 'p':
			depth = atoi(optarg);
			if (depth < 1 || depth > BENCH_MAX_DEPTH) {
				fprintf(stderr, "bench: -p takes 1..%d\n", BENCH_MAX_DEPTH);
				return 2;
			}
			break;
		default:
			fprintf(stderr,
			    "usage: bench [-s SOCKET] [-d SECONDS] [-c CONNS,...] [-p DEPTH]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (path == NULL) {
		char config[128];

		setenv("CBD_BINARY", "./src/cbd", 0);
		snprintf(config, sizeof config,
		    "[cbd]\nmax_connections = %d\nlog_level = warning\n", BENCH_CONNS_MAX + 8);
		if (!harness_start(&cbd, config)) {
			fprintf(stderr, "bench: could not start cbd (set CBD_BINARY)\n");
			return 1;
		}
		path = cbd.socket_path;
	}
	printf("cbd benchmark: allow/record pairs over %s, %.1f s per run\n", path, seconds);
	runs = bench_parse_conns(conns_text, conns, BENCH_CONNS_MAX);
	for (int i = 0; i < runs; i++) {
		if (conns[i] < 1 || conns[i] > BENCH_CONNS_MAX)
			continue;
		if (depth > 0) {
			run(path, conns[i], depth, seconds);
			continue;
		}
		run(path, conns[i], 1, seconds);
		run(path, conns[i], 64, seconds);
	}
	if (cbd.pid > 0)
		harness_stop(&cbd);
	return 0;
}
