/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-vs-redis.c — cbd side by side with Redis, driven by one load
 * generator (prints figures, asserts nothing; not run by make check):
 *
 *   - cbd `record_failure` (the write a sidecar answers most);
 *   - Redis EVALSHA of a Lua script doing the same bookkeeping (count the
 *     failure, stamp it, open at the threshold, return the fields);
 *   - Redis GET (what a user compares "a lookup" with);
 *   - an echo server (the floor: what the kernel alone costs a server),
 *     and one answering every line with as many bytes as cbd's
 *     record_failure reply (the floor for a server that must send a
 *     snapshot: about 300 bytes with protocol 3's compact snapshots,
 *     1.1 KB with protocol 2's policy in every one).
 *
 * Every connection has one request in flight (depth 1), on its own
 * circuit/key among 64; every round trip is timed. With two CPUs or more
 * the servers run on CPU 0 and the load generator on CPU 1, so the figures
 * are the server's own cost, not the two fighting for one core (-P: leave
 * the scheduler to place them).
 *
 * Each server runs once a round, in turn (-r rounds, default 3); the
 * ratios are of the medians, so a noisy moment does not decide them.
 *
 *   CBD_BINARY=src/cbd tests/bench-vs-redis [-d SECONDS] [-c 8,50] [-r 3] [-P]
 *
 * Starts cbd on a temporary socket and, when redis-server is on PATH, a
 * Redis on a Unix socket in the same temporary directory (no TCP); stops
 * both at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-load.h"
#include "cbd-harness.h"
#include "redis-util.h"

/* The script Redis runs for a failure: the same fields cbd keeps. */
static const char *const record_failure_lua =
    "local n = redis.call('HINCRBY', KEYS[1], 'failure_count', 1) "
    "redis.call('HSET', KEYS[1], 'last_failure_at', ARGV[1]) "
    "if n >= tonumber(ARGV[2]) and redis.call('HGET', KEYS[1], 'state') ~= 'open' then "
    "redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', ARGV[1]) end "
    "return redis.call('HGETALL', KEYS[1])";

/* GET reads keys of its own: the script makes circuit-NN hashes, and GET
 * on a hash is a WRONGTYPE error. */
static size_t
format_get(char *req, size_t size, int key, void *arg)
{
	(void)arg;
	return (size_t)snprintf(req, size, "*2\r\n$3\r\nGET\r\n$8\r\nvalue-%02d\r\n", key);
}

static size_t
format_evalsha(char *req, size_t size, int key, void *arg)
{
	return (size_t)snprintf(req, size,
	    "*6\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n$10\r\ncircuit-%02d\r\n"
	    "$13\r\n1700000000000\r\n$10\r\n1000000000\r\n",
	    (const char *)arg, key);
}

/* Rounds: each server runs once a round (-r). */
#define ROUNDS_MAX 15

enum { CBD, GET, EVALSHA, ECHO, SIZED, SERVERS };

/* Keep the last run's CPU a request (round r) and reply size of server k. */
static void
note(int k, int r, double cpu[][ROUNDS_MAX], double *bytes)
{
	bench_figures f = bench_last();

	cpu[k][r] = f.cpu_us;
	if (f.reply_bytes > 0)
		bytes[k] = f.reply_bytes;
}

/* The median of n rates (sorts them). */
static double
median(double *v, int n)
{
	harness_sort_samples(v, (size_t)n);
	return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int
main(int argc, char **argv)
{
	int conns[8] = { 8, 50 }, nconns = 2, opt, rounds = 3;
	double seconds = 3;
	bool pin = bench_cpus() >= 2;
	char sha[41] = "", echo_path[sizeof((cbd_harness *)0)->socket_path + 8],
	     sized_path[sizeof echo_path], reply[8192];
	size_t reply_bytes = 0;
	pid_t echo, sized = -1;
	int fd;
	redis_server redis;
	bool have_redis;
	cbd_harness h;

	while ((opt = getopt(argc, argv, "d:c:r:P")) != -1) {
		if (opt == 'P') {
			pin = false;
		} else if (opt == 'r') {
			rounds = atoi(optarg);
			rounds = rounds < 1 ? 1 : rounds > ROUNDS_MAX ? ROUNDS_MAX : rounds;
		} else if (opt == 'd') {
			seconds = atof(optarg);
		} else if (opt == 'c') {
			nconns = bench_parse_conns(optarg, conns, 8);
		} else {
			fprintf(stderr,
			    "usage: bench-vs-redis [-d SECONDS] [-c 8,50] [-r ROUNDS] [-P]\n");
			return 2;
		}
	}
	if (getenv("CBD_BINARY") == NULL || !harness_start(&h, "[cbd]\nlog_level = warning\n")) {
		fprintf(stderr, "bench-vs-redis: set CBD_BINARY to a cbd that starts\n");
		return 2;
	}
	have_redis = redis_available() && redis_start(&redis);
	if (have_redis && !bench_redis_load(redis.socket_path, record_failure_lua, sha)) {
		fprintf(stderr, "bench-vs-redis: SCRIPT LOAD failed\n");
		sha[0] = '\0';
	}
	if (!have_redis)
		printf("redis-server not found or did not start: cbd only\n");
	snprintf(echo_path, sizeof echo_path, "%s.echo", h.socket_path);
	echo = bench_echo_start(echo_path, 0);
	/* How long cbd's answer is (a circuit of the run's, as it will be). */
	fd = harness_connect(&h);
	if (fd >= 0 &&
	    harness_request(fd,
		"{\"op\":\"record_failure\",\"name\":\"circuit-00\",\"ctx\":{\"now\":1}}", reply,
		sizeof reply))
		reply_bytes = strlen(reply) + 1;
	if (fd >= 0)
		close(fd);
	snprintf(sized_path, sizeof sized_path, "%s.sized", h.socket_path);
	if (reply_bytes > 0)
		sized = bench_echo_start(sized_path, reply_bytes);
	if (pin) {
		bool pinned = bench_pin(0, 1) && bench_pin(h.pid, 0) &&
		    (!have_redis || bench_pin(redis.pid, 0)) && (echo < 0 || bench_pin(echo, 0)) &&
		    (sized < 0 || bench_pin(sized, 0));

		printf(pinned ? "servers on CPU 0, load generator on CPU 1\n"
			      : "pinning failed: the scheduler places servers and load\n");
	}
	for (int i = 0; i < nconns; i++) {
		int c = conns[i];
		double rate[SERVERS][ROUNDS_MAX] = { { 0 } }, cpu[SERVERS][ROUNDS_MAX] = { { 0 } },
		       bytes[SERVERS] = { 0 };
		char label[64];

		snprintf(label, sizeof label, "echo answering %zu bytes (cbd's)", reply_bytes);
		/* Every server once a round, in turn: a noisy second hits all of
		 * them alike, and the medians are compared. */
		for (int r = 0; r < rounds; r++) {
			bench_server_pid(h.pid);
			rate[CBD][r] = bench_run("cbd record_failure", h.socket_path, BENCH_LINES,
			    bench_format_record_failure, NULL, c, seconds);
			note(CBD, r, cpu, bytes);
			bench_server_pid(have_redis ? redis.pid : 0);
			if (have_redis)
				rate[GET][r] = bench_run("redis GET", redis.socket_path, BENCH_RESP,
				    format_get, NULL, c, seconds);
			if (have_redis)
				note(GET, r, cpu, bytes);
			bench_server_pid(have_redis ? redis.pid : 0);
			if (have_redis && sha[0] != '\0')
				rate[EVALSHA][r] = bench_run("redis EVALSHA record-failure script",
				    redis.socket_path, BENCH_RESP, format_evalsha, sha, c, seconds);
			if (have_redis && sha[0] != '\0')
				note(EVALSHA, r, cpu, bytes);
			bench_server_pid(echo);
			if (echo > 0)
				rate[ECHO][r] = bench_run("echo server (the floor)", echo_path,
				    BENCH_ECHO, bench_format_record_failure, NULL, c, seconds);
			if (echo > 0)
				note(ECHO, r, cpu, bytes);
			bench_server_pid(sized);
			if (sized > 0)
				rate[SIZED][r] = bench_run(label, sized_path, BENCH_ECHO,
				    bench_format_record_failure, NULL, c, seconds);
			if (sized > 0)
				note(SIZED, r, cpu, bytes);
		}
		for (int k = 0; k < SERVERS; k++) {
			rate[k][0] = median(rate[k], rounds);
			cpu[k][0] = median(cpu[k], rounds);
		}
		printf("medians of %d rounds at %d conns: cbd %.0f, GET %.0f, EVALSHA %.0f, echo "
		       "%.0f, "
		       "echo %zu bytes %.0f req/s\n",
		    rounds, c, rate[CBD][0], rate[GET][0], rate[EVALSHA][0], rate[ECHO][0],
		    reply_bytes, rate[SIZED][0]);
		printf("at %d conns, reply bytes and server CPU a request (medians): cbd %.0f B "
		       "%.2f us, GET %.0f B %.2f us, EVALSHA %.0f B %.2f us, echo %.0f B %.2f us, "
		       "echo %zu bytes %.2f us\n",
		    c, bytes[CBD], cpu[CBD][0], bytes[GET], cpu[GET][0], bytes[EVALSHA],
		    cpu[EVALSHA][0], bytes[ECHO], cpu[ECHO][0], reply_bytes, cpu[SIZED][0]);
		if (rate[GET][0] > 0 && rate[EVALSHA][0] > 0)
			printf("ratios at %d conns: cbd/GET %.2f  cbd/EVALSHA %.2f  cbd/echo-%zu "
			       "%.2f\n",
			    c, rate[CBD][0] / rate[GET][0], rate[CBD][0] / rate[EVALSHA][0],
			    reply_bytes, rate[SIZED][0] > 0 ? rate[CBD][0] / rate[SIZED][0] : 0);
	}
	bench_echo_stop(echo, echo_path);
	bench_echo_stop(sized, sized_path);
	if (have_redis)
		redis_stop(&redis);
	harness_stop(&h);
	return 0;
}
