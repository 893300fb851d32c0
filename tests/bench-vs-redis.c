/*
 * bench-vs-redis.c — cbd side by side with Redis, driven by one load
 * generator (prints figures, asserts nothing; not run by make check):
 *
 *   - cbd `record_failure` (the write a sidecar answers most);
 *   - Redis EVALSHA of a Lua script doing the same bookkeeping (count the
 *     failure, stamp it, open at the threshold, return the fields);
 *   - Redis GET (what a user compares "a lookup" with).
 *
 * Each connection is a thread with one request in flight (depth 1), on
 * its own circuit/key among 64; every round trip is timed.
 *
 *   CBD_BINARY=src/cbd tests/bench-vs-redis [-d SECONDS] [-c 8,50]
 *
 * Starts cbd on a temporary socket and, when redis-server is on PATH, a
 * Redis on a Unix socket in the same temporary directory (no TCP); stops
 * both at the end.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cbd-harness.h"

#define KEYS 64
#define MAX_CONNS 256
#define SAMPLES_MAX 400000
#define BUF 65536

/* The script Redis runs for a failure: the same fields cbd keeps. */
static const char *const record_failure_lua =
    "local n = redis.call('HINCRBY', KEYS[1], 'failure_count', 1) "
    "redis.call('HSET', KEYS[1], 'last_failure_at', ARGV[1]) "
    "if n >= tonumber(ARGV[2]) and redis.call('HGET', KEYS[1], 'state') ~= 'open' then "
    "redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', ARGV[1]) end "
    "return redis.call('HGETALL', KEYS[1])";

typedef enum mode { MODE_CBD, MODE_EVALSHA, MODE_GET } mode;

typedef struct worker {
	pthread_t thread;
	const char *path;
	mode mode;
	const char *sha;
	int index;
	double seconds;
	long requests;
	long errors;
	double *lat;
	long lat_count;
} worker;

/* Where one RESP value starting at p ends (within len), or NULL when more
 * bytes are needed. */
static const char *
resp_end(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	long n;

	if (nl == NULL)
		return NULL;
	switch (*p) {
	case '+':
	case '-':
	case ':':
		return nl + 1;
	case '$':
		n = strtol(p + 1, NULL, 10);
		if (n < 0)
			return nl + 1;
		return end - (nl + 1) >= n + 2 ? nl + 1 + n + 2 : NULL;
	case '*':
		n = strtol(p + 1, NULL, 10);
		p = nl + 1;
		for (long i = 0; i < n; i++) {
			if (p >= end || (p = resp_end(p, end)) == NULL)
				return NULL;
		}
		return p;
	}
	return nl + 1;
}

/* Read one reply: a line (cbd) or one RESP value (Redis). */
static bool
read_reply(int fd, mode m, char *buf, size_t *have, bool *error)
{
	for (;;) {
		const char *end = NULL;

		if (*have > 0) {
			if (m == MODE_CBD) {
				char *nl = memchr(buf, '\n', *have);

				end = nl != NULL ? nl + 1 : NULL;
				*error = end != NULL && strstr(buf, "\"ok\":true") == NULL;
			} else {
				end = resp_end(buf, buf + *have);
				*error = end != NULL && buf[0] == '-';
			}
		}
		if (end != NULL) {
			size_t used = (size_t)(end - buf);

			memmove(buf, end, *have - used);
			*have -= used;
			return true;
		}
		ssize_t n = read(fd, buf + *have, BUF - 1 - *have);

		if (n <= 0)
			return false;
		*have += (size_t)n;
		buf[*have] = '\0';
	}
}

static void *
worker_run(void *arg)
{
	worker *w = arg;
	char req[512], *buf = malloc(BUF);
	int fd = harness_connect_path(w->path);
	double end = harness_now_s() + w->seconds;
	size_t have = 0;
	long i = 0;

	if (fd < 0 || buf == NULL) {
		free(buf);
		return NULL;
	}
	while (harness_now_s() < end) {
		int key = (w->index + (int)i++) % KEYS;
		char name[32];
		size_t len;
		bool error;
		double t;

		/* GET reads its own keys: the script makes circuit-NN hashes,
		 * and GET on a hash is a WRONGTYPE error. */
		snprintf(name, sizeof name, "%s-%02d", w->mode == MODE_GET ? "value" : "circuit",
		    key);
		if (w->mode == MODE_CBD)
			len = (size_t)snprintf(req, sizeof req,
			    "{\"op\":\"record_failure\",\"name\":\"%s\"}\n", name);
		else if (w->mode == MODE_GET)
			len = (size_t)snprintf(req, sizeof req, "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n",
			    strlen(name), name);
		else
			len = (size_t)snprintf(req, sizeof req,
			    "*6\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n$%zu\r\n%s\r\n"
			    "$13\r\n1700000000000\r\n$10\r\n1000000000\r\n",
			    w->sha, strlen(name), name);
		t = harness_now_s();
		if (!harness_send_all(fd, req, len) || !read_reply(fd, w->mode, buf, &have, &error))
			break;
		if (w->lat_count < SAMPLES_MAX)
			w->lat[w->lat_count++] = (harness_now_s() - t) * 1e6;
		w->requests++;
		if (error && w->errors++ == 0 && getenv("BENCH_DEBUG") != NULL)
			fprintf(stderr, "first error reply: %.200s\n", buf);
	}
	close(fd);
	free(buf);
	return NULL;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One run; returns requests per second, prints a line. */
static double
run(const char *label, const char *path, mode m, const char *sha, int conns, double seconds)
{
	static worker w[MAX_CONNS];
	double *all, rate;
	long total = 0, errors = 0, n = 0;

	for (int i = 0; i < conns; i++) {
		w[i] =
		    (worker){ .path = path, .mode = m, .sha = sha, .index = i, .seconds = seconds };
		w[i].lat = malloc(sizeof(double) * SAMPLES_MAX);
		pthread_create(&w[i].thread, NULL, worker_run, &w[i]);
	}
	for (int i = 0; i < conns; i++) {
		pthread_join(w[i].thread, NULL);
		total += w[i].requests;
		errors += w[i].errors;
		n += w[i].lat_count;
	}
	all = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
	n = 0;
	for (int i = 0; i < conns; i++) {
		memcpy(all + n, w[i].lat, sizeof(double) * (size_t)w[i].lat_count);
		n += w[i].lat_count;
		free(w[i].lat);
	}
	qsort(all, (size_t)n, sizeof(double), cmp_double);
	rate = (double)total / seconds;
	printf("%-36s %3d conns  %9.0f req/s  p50 %7.1f us  p99 %7.1f us  errors %ld\n", label,
	    conns, rate, n ? all[n / 2] : 0, n ? all[n * 99 / 100] : 0, errors);
	free(all);
	return rate;
}

/* Start redis-server on a Unix socket in dir; its pid, or -1. */
static pid_t
redis_start(const char *dir, char *sock, size_t size)
{
	pid_t pid;

	snprintf(sock, size, "%s/redis.sock", dir);
	pid = fork();
	if (pid == 0) {
		execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock,
		    "--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning",
		    "--logfile", "/dev/null", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200 && pid > 0; i++) {
		int fd = harness_connect_path(sock);

		if (fd >= 0) {
			close(fd);
			return pid;
		}
		usleep(25000);
	}
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	return -1;
}

/* SCRIPT LOAD the Lua script; the sha in out (41 bytes). */
static bool
redis_load(const char *sock, char *out)
{
	char req[2048], reply[128];
	size_t have = 0;
	int fd = harness_connect_path(sock);
	bool ok;

	snprintf(req, sizeof req, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%zu\r\n%s\r\n",
	    strlen(record_failure_lua), record_failure_lua);
	ok = fd >= 0 && harness_send_all(fd, req, strlen(req));
	/* The reply is "$40\r\n<sha>\r\n": 47 bytes. */
	while (ok && have < 47) {
		ssize_t n = read(fd, reply + have, sizeof reply - 1 - have);

		ok = n > 0;
		have += ok ? (size_t)n : 0;
	}
	if (fd >= 0)
		close(fd);
	reply[have] = '\0';
	return ok && sscanf(reply, "$40\r\n%40s", out) == 1;
}

int
main(int argc, char **argv)
{
	int conns[8] = { 8, 50 }, nconns = 2, opt;
	double seconds = 3;
	char dir[] = "/tmp/cbd-vs-redis-XXXXXX", rsock[300], sha[41] = "";
	cbd_harness h;
	pid_t redis = -1;

	while ((opt = getopt(argc, argv, "d:c:")) != -1) {
		if (opt == 'd') {
			seconds = atof(optarg);
		} else if (opt == 'c') {
			char *p = optarg;

			nconns = 0;
			while (nconns < 8 && *p != '\0') {
				conns[nconns++] = (int)strtol(p, &p, 10);
				if (*p == ',')
					p++;
			}
		} else {
			fprintf(stderr, "usage: bench-vs-redis [-d SECONDS] [-c 8,50]\n");
			return 2;
		}
	}
	if (getenv("CBD_BINARY") == NULL || !harness_start(&h, "[cbd]\nlog_level = warning\n")) {
		fprintf(stderr, "bench-vs-redis: set CBD_BINARY to a cbd that starts\n");
		return 2;
	}
	if (mkdtemp(dir) != NULL)
		redis = redis_start(dir, rsock, sizeof rsock);
	if (redis > 0 && !redis_load(rsock, sha)) {
		fprintf(stderr, "bench-vs-redis: SCRIPT LOAD failed\n");
		sha[0] = '\0';
	}
	if (redis < 0)
		printf("redis-server not found or did not start: cbd only\n");
	for (int i = 0; i < nconns; i++) {
		int c = conns[i] > MAX_CONNS ? MAX_CONNS : conns[i];
		double cbd = run("cbd record_failure", h.socket_path, MODE_CBD, NULL, c, seconds);

		if (redis > 0) {
			double get = run("redis GET", rsock, MODE_GET, NULL, c, seconds);
			double eval = sha[0] != '\0' ? run("redis EVALSHA record-failure script",
							   rsock, MODE_EVALSHA, sha, c, seconds)
						     : 0;

			printf("ratios at %d conns: cbd/GET %.2f  cbd/EVALSHA %.2f\n", c, cbd / get,
			    eval > 0 ? cbd / eval : 0);
		}
	}
	if (redis > 0) {
		kill(redis, SIGTERM);
		waitpid(redis, NULL, 0);
	}
	harness_stop(&h);
	{
		char cmd[400];

		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "bench-vs-redis: cannot remove %s\n", dir);
	}
	return 0;
}
