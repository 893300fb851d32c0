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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-load.h"
#include "cbd-harness.h"
#include "redis-util.h"

#define TRIPS_MAX 10000

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

static char *
read_script(void)
{
	const char *srcdir = getenv("CBD_SRCDIR");
	char path[1024];
	char *text = NULL;
	long len;
	FILE *f;

	snprintf(path, sizeof path, "%s/src/fleet.lua", srcdir != NULL ? srcdir : ".");
	f = fopen(path, "rb");
	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (text = malloc((size_t)len + 1)) != NULL) {
		if (fread(text, 1, (size_t)len, f) != (size_t)len) {
			free(text);
			text = NULL;
		} else {
			text[len] = '\0';
		}
	}
	fclose(f);
	return text;
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

int
main(int argc, char **argv)
{
	int conns[8] = { 8, 50 }, nconns = 2, trips = 1000, opt;
	double seconds = 3;
	char config[512], sha[41];
	cbd_harness a, b;
	redis_server redis;
	char *script;

	while ((opt = getopt(argc, argv, "d:c:n:")) != -1) {
		if (opt == 'd')
			seconds = atof(optarg);
		else if (opt == 'c')
			nconns = bench_parse_conns(optarg, conns, 8);
		else if (opt == 'n')
			trips = atoi(optarg) < TRIPS_MAX ? atoi(optarg) : TRIPS_MAX;
		else {
			fprintf(stderr, "usage: bench-fleet [-d SECONDS] [-c 8,50] [-n TRIPS]\n");
			return 2;
		}
	}
	if (!redis_available() || !redis_start(&redis)) {
		fprintf(stderr, "bench-fleet: needs redis-server\n");
		return 2;
	}
	script = read_script();
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
