/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-fleet.c — fleet mode's cost (prints figures, asserts nothing; not
 * run by make check):
 *
 *   - record_failure through cbd in fleet mode (cbd -> the circuit script
 *     in Redis -> cbd), at each connection count;
 *   - the same script called directly with EVALSHA by the same load
 *     generator, with the request cbd sends (the floor cbd adds to);
 *   - the cross-host event delay: a trip through cbd A until host B's
 *     watcher has the event, p50 and p99.
 *
 *   CBD_BINARY=src/cbd CBD_SRCDIR=.. tests/bench-fleet [-d SECONDS] [-c 8,50] [-n TRIPS]
 *
 * Starts a redis-server on a Unix socket in a temp dir and two cbds on it
 * (backend = redis); stops them all at the end.
 *
 * Fleet mode (-f HOSTS, issue 24): HOSTS cbds (default 8) on one
 * redis-server, each driven by its own load generator thread with -C
 * connections (default 2), each making protected calls one after the
 * other: an allow (timed), then the outcome as a noreply record (with the
 * permit when allow gave one). 1,000 circuits; about 95 % successes:
 * each circuit fails in bursts (2 s out of every 80, at its own phase)
 * that trip it (failure_threshold 5) and recover it (break_ms 1000, a
 * trial that succeeds once the burst is over), plus 3 % scattered
 * failures. Meanwhile the main thread trips circuits of their own through
 * host 0 and times their events on a watcher of host 1. Prints protected
 * calls a second fleet-wide, Redis's and the cbds' CPU per protected call
 * (/proc/PID/schedstat), allow's p50/p99, the share of failures and
 * refusals, the script calls and copy answers (stats.backend), and the
 * trip's propagation delay p50/p99.
 *
 *   CBD_BINARY=src/cbd tests/bench-fleet -f 8 [-C 2] [-d SECONDS] [-n TRIPS (200)]
 *       [-K CIRCUITS (1000)] [-W FLEET_COALESCE_MS (the cbd's default)]
 *
 * It also prints the outcomes folded into shared script calls
 * (stats.backend.coalesced, folds): -K and -W show folding where the load
 * meets in few circuits or waits longer.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-load.h"
#include "cbd-harness.h"
#include "redis-util.h"

#define TRIPS_MAX 10000
/* Fleet mode. */
#define FLEET_HOSTS_MAX 32
#define FLEET_CONNS_MAX 16
#define FLEET_CIRCUITS 1000
/* Circuits the load spreads over (-K; default FLEET_CIRCUITS), and the
 * cbds' fleet_coalesce_ms (-W; -1: not set, the cbd's default). */
static int fleet_circuits = FLEET_CIRCUITS;
static int fleet_coalesce_ms = -1;
#define FLEET_BURST_EVERY_S 80 /* a circuit's burst of failures: 2 s out of this */
#define FLEET_BURST_S 2
#define FLEET_SAMPLES_MAX 200000 /* allow latencies kept per connection */

/* What cbd sends for a record_failure on a circuit with the built-in
 * policy (op-fleet.c, fleet.c): the script's positional arguments after
 * op and channel, less name: origin, now ("": Redis TIME), declared,
 * policy, reporter, duration_ms, token, extra. */
static const char *const request_args[] = { "bench", "", "",
	"consecutive 5 2 30000 1 30000 0 count 100 10 50 0 100 1 60000 1 0", "bench:1", "", "",
	"" };

/* EVALSHA sha 3 direct:{circuit-NN} ...:slots ...:window failure direct:events
 * circuit-NN <request_args> */
static size_t
format_evalsha(char *req, size_t size, int key, void *arg)
{
	char name[32], k1[48], k2[64], k3[64];
	const char *argv[8 + 1 + sizeof request_args / sizeof request_args[0]];
	size_t argc = 0, len;

	snprintf(name, sizeof name, "circuit-%02d", key);
	snprintf(k1, sizeof k1, "direct:{%s}", name);
	snprintf(k2, sizeof k2, "%s:slots", k1);
	snprintf(k3, sizeof k3, "%s:window", k1);
	argv[argc++] = "EVALSHA";
	argv[argc++] = arg;
	argv[argc++] = "3";
	argv[argc++] = k1;
	argv[argc++] = k2;
	argv[argc++] = k3;
	argv[argc++] = "failure";
	argv[argc++] = "direct:events";
	argv[argc++] = name;
	for (size_t i = 0; i < sizeof request_args / sizeof request_args[0]; i++)
		argv[argc++] = request_args[i];
	len = (size_t)snprintf(req, size, "*%zu\r\n", argc);
	for (size_t i = 0; i < argc && len < size; i++)
		len += (size_t)snprintf(req + len, size - len, "$%zu\r\n%s\r\n", strlen(argv[i]),
		    argv[i]);
	return len;
}

/* Read one line from fd into buf (blocking); false at EOF. */
static bool
read_line(int fd, char *buf, size_t size)
{
	size_t n = 0;

	while (n + 1 < size) {
		ssize_t r = read(fd, buf + n, 1);

		if (r <= 0)
			return false;
		if (buf[n++] == '\n')
			break;
	}
	buf[n] = '\0';
	return true;
}

/* Trip n fresh circuits through a; time until b's watcher has each event. */
static void
event_delay(const cbd_harness *a, const cbd_harness *b, int n)
{
	int fa = harness_connect(a), fb = harness_connect(b), got = 0;
	static double delay[TRIPS_MAX];
	char line[65536];

	if (fa < 0 || fb < 0) {
		fprintf(stderr, "bench-fleet: cannot connect\n");
		return;
	}
	for (int i = 0; i < n; i++) {
		char req[256];
		double t0;

		snprintf(req, sizeof req, "{\"op\":\"watch\",\"names\":[\"trip-%d\"]}\n", i);
		if (!harness_send_all(fb, req, strlen(req)) || !read_line(fb, line, sizeof line))
			break;
		snprintf(req, sizeof req,
		    "{\"op\":\"record_failure\",\"name\":\"trip-%d\",\"ctx\":{\"failure_"
		    "threshold\":1}}"
		    "\n",
		    i);
		t0 = harness_now_s();
		if (!harness_send_all(fa, req, strlen(req)) || !read_line(fb, line, sizeof line))
			break;
		delay[got++] = (harness_now_s() - t0) * 1e3;
		if (!read_line(fa, line, sizeof line))
			break;
	}
	close(fa);
	close(fb);
	harness_sort_samples(delay, (size_t)got);
	if (got > 0)
		printf("cross-host event delay (trip on A -> event on B's watcher), %d trips: "
		       "p50 %.3f ms  p99 %.3f ms  max %.3f ms\n",
		    got, delay[got / 2], delay[got * 99 / 100], delay[got - 1]);
}

/* --- fleet mode --- */

/* One load generator connection (a thread of its own). */
typedef struct fleet_gen {
	pthread_t thread;
	const cbd_harness *host;
	unsigned seed;
	double until; /* harness_now_s() */
	uint64_t calls, refused, failures, errors;
	double *samples; /* allow latencies, ms */
	size_t nsamples;
} fleet_gen;

static double fleet_t0;

/* Is circuit c in a burst of failures at time t (s since start)? */
static bool
fleet_in_burst(int c, double t)
{
	long phase = (long)(t + (double)(c * 7919 % (FLEET_BURST_EVERY_S * 10)) / 10.0);

	return phase % FLEET_BURST_EVERY_S < FLEET_BURST_S;
}

/* The value of "member":"..." in line into out (size), or false. */
static bool
fleet_member(const char *line, const char *member, char *out, size_t size)
{
	char key[64];
	const char *at, *end;

	snprintf(key, sizeof key, "\"%s\":\"", member);
	at = strstr(line, key);
	if (at == NULL)
		return false;
	at += strlen(key);
	end = strchr(at, '"');
	if (end == NULL || (size_t)(end - at) >= size)
		return false;
	memcpy(out, at, (size_t)(end - at));
	out[end - at] = '\0';
	return true;
}

static void *
fleet_gen_run(void *arg)
{
	fleet_gen *g = arg;
	int fd = harness_connect(g->host);
	char req[512], line[8192], permit[128];

	if (fd < 0) {
		g->errors++;
		return NULL;
	}
	while (harness_now_s() < g->until) {
		int c = (int)(rand_r(&g->seed) % (unsigned)fleet_circuits);
		double t0 = harness_now_s(), ms;
		bool failure, has_permit;
		int len;

		len = snprintf(req, sizeof req, "{\"op\":\"allow\",\"name\":\"c-%d\"}\n", c);
		if (!harness_send_all(fd, req, (size_t)len) || !read_line(fd, line, sizeof line)) {
			g->errors++;
			break;
		}
		ms = (harness_now_s() - t0) * 1e3;
		if (g->nsamples < FLEET_SAMPLES_MAX)
			g->samples[g->nsamples++] = ms;
		g->calls++;
		if (strstr(line, "\"ok\":true") == NULL) {
			g->errors++;
			continue;
		}
		if (strstr(line, "\"allowed\":true") == NULL) {
			g->refused++;
			continue;
		}
		has_permit = fleet_member(line, "permit", permit, sizeof permit);
		failure = fleet_in_burst(c, t0 - fleet_t0) || rand_r(&g->seed) % 100 < 3;
		g->failures += failure;
		len = snprintf(req, sizeof req,
		    "{\"op\":\"record\",\"name\":\"c-%d\",\"outcome\":\"%s\",%s%s%s\"noreply\":"
		    "true}\n",
		    c, failure ? "failure" : "success", has_permit ? "\"permit\":\"" : "",
		    has_permit ? permit : "", has_permit ? "\"," : "");
		if (!harness_send_all(fd, req, (size_t)len)) {
			g->errors++;
			break;
		}
	}
	close(fd);
	return NULL;
}

/* On-CPU seconds of pid (its main thread: /proc/PID/schedstat). */
static double
fleet_cpu_s(pid_t pid)
{
	char path[64];
	unsigned long long ns = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/schedstat", (long)pid);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	if (fscanf(f, "%llu", &ns) != 1)
		ns = 0;
	fclose(f);
	return (double)ns / 1e9;
}

/* A member of cbd h's stats.backend (an integer; -1: unknown). */
static long long
fleet_backend_int(const cbd_harness *h, const char *member)
{
	int fd = harness_connect(h);
	char line[65536], key[64];
	const char *at;
	long long v = -1;

	if (fd < 0)
		return -1;
	if (harness_send_all(fd, "{\"op\":\"stats\"}\n", 15) && read_line(fd, line, sizeof line)) {
		snprintf(key, sizeof key, "\"%s\":", member);
		at = strstr(line, key);
		if (at != NULL)
			v = strtoll(at + strlen(key), NULL, 10);
	}
	close(fd);
	return v;
}

static int
fleet_bench(int hosts, int conns, double seconds, int trips)
{
	static cbd_harness cbds[FLEET_HOSTS_MAX];
	static fleet_gen gens[FLEET_HOSTS_MAX * FLEET_CONNS_MAX];
	long long calls0 = 0, calls1 = 0, copy0 = 0, copy1 = 0, folded0 = 0, folded1 = 0;
	long long folds0 = 0, folds1 = 0;
	char coalesce[64] = "";
	double redis_cpu0, redis_cpu1, cbd_cpu0 = 0, cbd_cpu1 = 0, t_start, t_end;
	uint64_t calls = 0, refused = 0, failures = 0, errors = 0;
	size_t nsamples = 0, ngens = (size_t)hosts * (size_t)conns;
	char config[1024];
	redis_server redis;
	double *all;
	int started = 0;

	if (!redis_available() || !redis_start(&redis)) {
		fprintf(stderr, "bench-fleet: needs redis-server\n");
		return 2;
	}
	if (fleet_coalesce_ms >= 0)
		snprintf(coalesce, sizeof coalesce, "fleet_coalesce_ms = %d\n", fleet_coalesce_ms);
	snprintf(config, sizeof config,
	    "[cbd]\nlog_level = warning\nbackend = redis\nredis = unix:%s\n"
	    "redis_timeout_ms = 2000\nmax_circuits = 100000\n%s"
	    "[defaults]\nfailure_threshold = 5\nbreak_ms = 1000\n",
	    redis.socket_path, coalesce);
	for (; started < hosts; started++) {
		if (getenv("CBD_BINARY") == NULL || !harness_start(&cbds[started], config)) {
			fprintf(stderr, "bench-fleet: set CBD_BINARY to a cbd that starts\n");
			goto out;
		}
	}
	usleep(500000); /* every cbd reaches Redis */
	for (size_t i = 0; i < ngens; i++) {
		gens[i] = (fleet_gen){ .host = &cbds[i % (size_t)hosts],
			.seed = (unsigned)(i * 2654435761u + 1),
			.samples = malloc(FLEET_SAMPLES_MAX * sizeof(double)) };
		if (gens[i].samples == NULL) {
			fprintf(stderr, "bench-fleet: out of memory\n");
			goto out;
		}
	}
	/* Warm-up: every circuit created and copied (1 s, not measured). */
	fleet_t0 = harness_now_s();
	for (size_t i = 0; i < ngens; i++) {
		gens[i].until = harness_now_s() + 1.0;
		pthread_create(&gens[i].thread, NULL, fleet_gen_run, &gens[i]);
	}
	for (size_t i = 0; i < ngens; i++) {
		pthread_join(gens[i].thread, NULL);
		gens[i].calls = gens[i].refused = gens[i].failures = gens[i].errors = 0;
		gens[i].nsamples = 0;
	}
	for (int h = 0; h < hosts; h++) {
		calls0 += fleet_backend_int(&cbds[h], "calls");
		copy0 += fleet_backend_int(&cbds[h], "copy_answers");
		folded0 += fleet_backend_int(&cbds[h], "coalesced");
		folds0 += fleet_backend_int(&cbds[h], "folds");
		cbd_cpu0 += fleet_cpu_s(cbds[h].pid);
	}
	redis_cpu0 = fleet_cpu_s(redis.pid);
	t_start = harness_now_s();
	for (size_t i = 0; i < ngens; i++) {
		gens[i].until = t_start + seconds;
		pthread_create(&gens[i].thread, NULL, fleet_gen_run, &gens[i]);
	}
	/* Meanwhile: trips through host 0, seen by a watcher on host 1. */
	if (hosts > 1)
		event_delay(&cbds[0], &cbds[1], trips);
	for (size_t i = 0; i < ngens; i++)
		pthread_join(gens[i].thread, NULL);
	t_end = harness_now_s();
	redis_cpu1 = fleet_cpu_s(redis.pid);
	for (int h = 0; h < hosts; h++) {
		calls1 += fleet_backend_int(&cbds[h], "calls");
		copy1 += fleet_backend_int(&cbds[h], "copy_answers");
		folded1 += fleet_backend_int(&cbds[h], "coalesced");
		folds1 += fleet_backend_int(&cbds[h], "folds");
		cbd_cpu1 += fleet_cpu_s(cbds[h].pid);
	}
	for (size_t i = 0; i < ngens; i++) {
		calls += gens[i].calls;
		refused += gens[i].refused;
		failures += gens[i].failures;
		errors += gens[i].errors;
		nsamples += gens[i].nsamples;
	}
	all = malloc((nsamples + 1) * sizeof *all);
	if (all != NULL) {
		size_t n = 0;

		for (size_t i = 0; i < ngens; i++) {
			memcpy(all + n, gens[i].samples, gens[i].nsamples * sizeof *all);
			n += gens[i].nsamples;
		}
		harness_sort_samples(all, n);
	}
	printf("fleet: %d cbds on one redis-server, %d load connections each (a thread each), "
	       "%d circuits, %.1f s\n",
	    hosts, conns, fleet_circuits, t_end - t_start);
	printf("protected calls (allow + noreply outcome): %llu, %.0f/s fleet-wide; refused "
	       "%.2f %%, failures %.2f %% of outcomes, errors %llu\n",
	    (unsigned long long)calls, (double)calls / (t_end - t_start),
	    calls > 0 ? 100.0 * (double)refused / (double)calls : 0,
	    calls > refused ? 100.0 * (double)failures / (double)(calls - refused) : 0,
	    (unsigned long long)errors);
	if (calls > 0)
		printf("Redis CPU %.2f us per protected call (%.0f %% of a core); cbds' CPU %.2f "
		       "us "
		       "per protected call (all %d)\n",
		    (redis_cpu1 - redis_cpu0) * 1e6 / (double)calls,
		    100.0 * (redis_cpu1 - redis_cpu0) / (t_end - t_start),
		    (cbd_cpu1 - cbd_cpu0) * 1e6 / (double)calls, hosts);
	if (calls > 0)
		printf("script calls %.3f per protected call (event reads included); allow and get "
		       "answered from a copy: %lld (%.1f %% of allows)\n",
		    (double)(calls1 - calls0) / (double)calls, copy1 - copy0,
		    100.0 * (double)(copy1 - copy0) / (double)calls);
	if (calls > 0)
		printf("outcomes folded (issue 24): %lld in %lld script calls (%.1f %% of "
		       "outcomes, "
		       "%.1f a fold)\n",
		    folded1 - folded0, folds1 - folds0,
		    100.0 * (double)(folded1 - folded0) / (double)calls,
		    folds1 > folds0 ? (double)(folded1 - folded0) / (double)(folds1 - folds0) : 0);
	if (all != NULL && nsamples > 0)
		printf("allow latency: p50 %.3f ms  p99 %.3f ms  max %.3f ms (%zu samples)\n",
		    all[nsamples / 2], all[nsamples * 99 / 100], all[nsamples - 1], nsamples);
	free(all);
out:
	for (size_t i = 0; i < ngens; i++)
		free(gens[i].samples);
	for (int h = 0; h < started; h++)
		harness_stop(&cbds[h]);
	redis_stop(&redis);
	return 0;
}

int
main(int argc, char **argv)
{
	int conns[8] = { 8, 50 }, nconns = 2, trips = 1000, opt, hosts = 0, per_host = 2;
	bool trips_given = false;
	double seconds = 3;
	char config[512], sha[41];
	cbd_harness a, b;
	redis_server redis;
	char *script;

	while ((opt = getopt(argc, argv, "d:c:n:f:C:K:W:")) != -1) {
		if (opt == 'K' && atoi(optarg) > 0)
			fleet_circuits = atoi(optarg);
		else if (opt == 'W')
			fleet_coalesce_ms = atoi(optarg);
		else if (opt == 'f')
			hosts = atoi(optarg);
		else if (opt == 'C')
			per_host = atoi(optarg);
		else if (opt == 'd')
			seconds = atof(optarg);
		else if (opt == 'c')
			nconns = bench_parse_conns(optarg, conns, 8);
		else if (opt == 'n') {
			trips = atoi(optarg) < TRIPS_MAX ? atoi(optarg) : TRIPS_MAX;
			trips_given = true;
		} else {
			fprintf(stderr,
			    "usage: bench-fleet [-d SECONDS] [-c 8,50] [-n TRIPS]\n"
			    "       bench-fleet -f HOSTS [-C CONNS] [-d SECONDS] [-n TRIPS] "
			    "[-K CIRCUITS] [-W COALESCE_MS]\n");
			return 2;
		}
	}
	if (hosts > 0) {
		if (hosts > FLEET_HOSTS_MAX || per_host < 1 || per_host > FLEET_CONNS_MAX) {
			fprintf(stderr, "bench-fleet: -f 1..%d, -C 1..%d\n", FLEET_HOSTS_MAX,
			    FLEET_CONNS_MAX);
			return 2;
		}
		/* Trips timed while the load runs (-d): fewer by default. */
		return fleet_bench(hosts, per_host, seconds, trips_given ? trips : 200);
	}
	if (!redis_available() || !redis_start(&redis)) {
		fprintf(stderr, "bench-fleet: needs redis-server\n");
		return 2;
	}
	script = redis_fleet_script();
	if (script == NULL || !bench_redis_load(redis.socket_path, script, sha)) {
		fprintf(stderr, "bench-fleet: cannot load src/fleet.lua (set CBD_SRCDIR)\n");
		redis_stop(&redis);
		return 2;
	}
	free(script);
	snprintf(config, sizeof config,
	    "[cbd]\nlog_level = warning\nbackend = redis\nredis = unix:%s\n", redis.socket_path);
	if (getenv("CBD_BINARY") == NULL || !harness_start(&a, config)) {
		fprintf(stderr, "bench-fleet: set CBD_BINARY to a cbd that starts\n");
		redis_stop(&redis);
		return 2;
	}
	if (!harness_start(&b, config)) {
		harness_stop(&a);
		redis_stop(&redis);
		return 2;
	}
	usleep(200000); /* both reach Redis */
	for (int i = 0; i < nconns; i++) {
		double via = bench_run("cbd (fleet) record_failure", a.socket_path, BENCH_LINES,
		    bench_format_record_failure, NULL, conns[i], seconds);
		double direct = bench_run("redis EVALSHA fleet.lua failure", redis.socket_path,
		    BENCH_RESP, format_evalsha, sha, conns[i], seconds);

		printf("ratio at %d conns: cbd (fleet) / direct EVALSHA %.2f\n", conns[i],
		    direct > 0 ? via / direct : 0);
	}
	event_delay(&a, &b, trips);
	harness_stop(&a);
	harness_stop(&b);
	redis_stop(&redis);
	return 0;
}
