/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.c — throughput and latency of cbd over its Unix socket. Prints
 * figures; asserts nothing (speed targets are judged by people reading
 * them, never by timed test assertions).
 *
 *   bench [-s SOCKET] [-d SECONDS] [-c CONNS,...] [-p DEPTH]
 *   bench -t [-d SECONDS] [-r ROUNDS]
 *
 * -t (protocol 3's bulkhead): cbd's CPU per allow+record pair with a
 * ticket (circuits with max_concurrent: allow hands out a permit, record
 * hands it back) and without (no limit, the same requests and batches),
 * read from /proc/PID/stat of the cbd it starts; rounds alternate the two
 * and the medians are printed with their ratio (the target: at most 1.3).
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

/* ---- -t: the CPU a ticket costs ----------------------------------------- */

#define TICKET_CONNS 4
#define TICKET_DEPTH 32

typedef struct ticket_worker {
	pthread_t thread;
	const char *socket_path;
	int index;
	bool limited; /* circuits lim-NN (max_concurrent) or unl-NN */
	double seconds;
	long pairs;
	long errors;
} ticket_worker;

/* The permit of the reply line at p (NUL-ended copy into out); false when
 * it has none. */
static bool
permit_of(const char *p, const char *end, char *out, size_t size)
{
	static const char key[] = "\"permit\":\"";
	const char *k = memmem(p, (size_t)(end - p), key, sizeof key - 1), *q;

	if (k == NULL)
		return false;
	k += sizeof key - 1;
	q = memchr(k, '"', (size_t)(end - k));
	if (q == NULL || (size_t)(q - k) >= size)
		return false;
	memcpy(out, k, (size_t)(q - k));
	out[q - k] = '\0';
	return true;
}

/* Read `lines` reply lines into buf (whole); false on error. */
static bool
read_lines(int fd, char *buf, size_t size, int lines, size_t *len)
{
	int seen = 0;

	*len = 0;
	while (seen < lines && *len < size) {
		ssize_t n = read(fd, buf + *len, size - *len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		for (ssize_t i = 0; i < n; i++)
			seen += buf[*len + (size_t)i] == '\n';
		*len += (size_t)n;
	}
	return seen == lines;
}

/* Batches of TICKET_DEPTH allows, then their records (with the permits
 * the allows handed out, when limited). */
static void *
ticket_worker_run(void *arg)
{
	ticket_worker *w = arg;
	char permits[TICKET_DEPTH][64];
	char *out = malloc(TICKET_DEPTH * 200), *in = malloc(BENCH_BUF);
	int fd = harness_connect_path(w->socket_path);
	const char *prefix = w->limited ? "lim" : "unl";
	double end = harness_now_s() + w->seconds;

	while (fd >= 0 && out != NULL && in != NULL && harness_now_s() < end) {
		size_t len = 0, got;
		const char *p;

		for (int i = 0; i < TICKET_DEPTH; i++)
			len +=
			    (size_t)sprintf(out + len, "{\"op\":\"allow\",\"name\":\"%s-%02d\"}\n",
				prefix, (w->index * 7 + i) % BENCH_KEYS);
		if (!harness_send_all(fd, out, len) ||
		    !read_lines(fd, in, BENCH_BUF, TICKET_DEPTH, &got))
			break;
		p = in;
		for (int i = 0; i < TICKET_DEPTH; i++) {
			const char *nl = memchr(p, '\n', got - (size_t)(p - in));

			if (w->limited && !permit_of(p, nl, permits[i], sizeof permits[i]))
				w->errors++;
			p = nl + 1;
		}
		len = 0;
		for (int i = 0; i < TICKET_DEPTH; i++) {
			len += (size_t)sprintf(out + len,
			    w->limited ? "{\"op\":\"record\",\"name\":\"%s-%02d\",\"outcome\":"
					 "\"success\",\"permit\":\"%s\"}\n"
				       : "{\"op\":\"record\",\"name\":\"%s-%02d\",\"outcome\":"
					 "\"success\"%s}\n",
			    prefix, (w->index * 7 + i) % BENCH_KEYS, w->limited ? permits[i] : "");
		}
		if (!harness_send_all(fd, out, len) ||
		    !read_lines(fd, in, BENCH_BUF, TICKET_DEPTH, &got))
			break;
		w->pairs += TICKET_DEPTH;
	}
	if (fd < 0)
		w->errors++;
	if (fd >= 0)
		close(fd);
	free(out);
	free(in);
	return NULL;
}

/* utime + stime of pid, in seconds. */
static double
cpu_seconds(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long utime = 0, stime = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	if (fgets(buf, sizeof buf, f) == NULL) {
		fclose(f);
		return 0;
	}
	fclose(f);
	/* After the command's ')': state is field 3; utime 14, stime 15. */
	p = strrchr(buf, ')');
	if (p == NULL ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
		&stime) != 2)
		return 0;
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* One -t run; cbd's CPU microseconds per pair. */
static double
ticket_run(const char *path, pid_t pid, bool limited, double seconds, long *pairs_out)
{
	ticket_worker w[TICKET_CONNS];
	double cpu0 = cpu_seconds(pid), cpu;
	long pairs = 0, errors = 0;

	memset(w, 0, sizeof w);
	for (int i = 0; i < TICKET_CONNS; i++) {
		w[i].socket_path = path;
		w[i].index = i;
		w[i].limited = limited;
		w[i].seconds = seconds;
		pthread_create(&w[i].thread, NULL, ticket_worker_run, &w[i]);
	}
	for (int i = 0; i < TICKET_CONNS; i++) {
		pthread_join(w[i].thread, NULL);
		pairs += w[i].pairs;
		errors += w[i].errors;
	}
	cpu = cpu_seconds(pid) - cpu0;
	if (errors > 0)
		fprintf(stderr, "bench: %ld errors (%s)\n", errors, limited ? "tickets" : "none");
	*pairs_out = pairs;
	return pairs > 0 ? cpu * 1e6 / (double)pairs : 0;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* -t: rounds of both, alternating; the medians and their ratio. */
static int
ticket_bench(double seconds, int rounds)
{
	char *config = malloc(BENCH_KEYS * 128 + 256);
	double with[64], without[64];
	cbd_harness cbd = { 0 };
	size_t len;
	long pairs;

	len = (size_t)sprintf(config, "[cbd]\nlog_level = warning\n");
	/* A limit never reached: every allow takes a ticket. The circuits
	 * without one have a section too (a key at its default), so that
	 * both resolve their policy alike. */
	for (int i = 0; i < BENCH_KEYS; i++)
		len += (size_t)sprintf(config + len,
		    "[circuit \"lim-%02d\"]\nmax_concurrent = 1000000\n"
		    "[circuit \"unl-%02d\"]\nretry_min_per_s = 10\n",
		    i, i);
	setenv("CBD_BINARY", "./src/cbd", 0);
	if (!harness_start(&cbd, config)) {
		fprintf(stderr, "bench: could not start cbd (set CBD_BINARY)\n");
		free(config);
		return 1;
	}
	printf("cbd benchmark -t: cbd's CPU per allow+record pair, %d connections, "
	       "batches of %d, %.1f s per run, %d rounds\n",
	    TICKET_CONNS, TICKET_DEPTH, seconds, rounds);
	for (int r = 0; r < rounds; r++) {
		without[r] = ticket_run(cbd.socket_path, cbd.pid, false, seconds, &pairs);
		printf("round %d  no limit  %8.2f us CPU/pair  (%ld pairs)\n", r + 1, without[r],
		    pairs);
		with[r] = ticket_run(cbd.socket_path, cbd.pid, true, seconds, &pairs);
		printf("round %d  tickets   %8.2f us CPU/pair  (%ld pairs)\n", r + 1, with[r],
		    pairs);
		fflush(stdout);
	}
	qsort(with, (size_t)rounds, sizeof with[0], cmp_double);
	qsort(without, (size_t)rounds, sizeof without[0], cmp_double);
	printf("median: no limit %.2f us, tickets %.2f us CPU/pair: %.2fx (target <= 1.3x)\n",
	    without[rounds / 2], with[rounds / 2],
	    without[rounds / 2] > 0 ? with[rounds / 2] / without[rounds / 2] : 0);
	harness_stop(&cbd);
	free(config);
	return 0;
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
	int depth = 0, rounds = 5;
	bool tickets = false;
	int opt;

	while ((opt = getopt(argc, argv, "s:d:c:p:r:th")) != -1) {
		switch (opt) {
		case 't':
			tickets = true;
			break;
		case 'r':
			rounds = atoi(optarg);
			if (rounds < 1 || rounds > 64) {
				fprintf(stderr, "bench: -r takes 1..64\n");
				return 2;
			}
			break;
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
			    "usage: bench [-s SOCKET] [-d SECONDS] [-c CONNS,...] [-p DEPTH]\n"
			    "       bench -t [-d SECONDS] [-r ROUNDS]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (tickets)
		return ticket_bench(seconds, rounds);
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
