/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-authority.c — the figures protocol 2's authority issue asks for,
 * measured on a real cbd (prints figures, asserts nothing; not run by make
 * check):
 *
 *   1. memory per circuit: cbd's resident set before and after creating
 *      N closed circuits with 16-byte names (default 1000000);
 *   2. the longest stall a probe client sees while cbd keeps a state file
 *      of 10000 open circuits up to date: a probe sends `get` back to back
 *      and records every round trip, first quietly, then while another
 *      client changes a circuit every 20 ms (each change makes cbd write
 *      the whole file);
 *   3. durability at scale (issue 28 item 4): with HELD held circuits
 *      (default 100000), the time from a hold's reply until stats says
 *      its append is fdatasync'ed (state_appends moved on; the daemon is
 *      otherwise quiet, so that append holds the hold), SAMPLES times;
 *      then ROUNDS times a hold placed 100 ms before a kill -9: is it
 *      there after the restart, and how long the restart took. Run the
 *      machine's load beside it (e.g. busy loops) to see it under load.
 *
 *   CBD_BINARY=src/cbd tests/bench-authority [-n CIRCUITS] [-o OPEN] [-d SECONDS]
 *       [-H HELD] [-s SAMPLES] [-k ROUNDS]
 *   (-n 0, -o 0 or -H 0 skips that part)
 */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cbd-harness.h"

/* Requests written before their replies are read (bounded pipeline). */
#define BENCH_BATCH 2000
#define BENCH_SAMPLES_MAX 2000000

static double samples[BENCH_SAMPLES_MAX];

static double
now_us(void)
{
	return harness_now_s() * 1e6;
}

/* The resident set of pid in KiB (VmRSS), or -1. */
static long
rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, "VmRSS:", 6) == 0)
			kib = strtol(line + 6, NULL, 10);
	}
	fclose(f);
	return kib;
}

/* Read exactly `lines` reply lines. */
static bool
read_lines(int fd, long lines)
{
	static char buf[1 << 16];

	while (lines > 0) {
		ssize_t n = read(fd, buf, sizeof buf);

		if (n <= 0)
			return false;
		for (ssize_t i = 0; i < n; i++)
			lines -= buf[i] == '\n';
	}
	return true;
}

/* Request i of a pipeline, written into buf; returns its length. */
typedef int (*request_fn)(char *buf, size_t size, long i);

static int
allow_warm_up(char *buf, size_t size, long i)
{
	return snprintf(buf, size, "{\"op\":\"allow\",\"name\":\"warm-up-%08ld\"}", i);
}

/* "circuit-%08ld": 16-byte names; allow creates closed circuits. */
static int
allow_circuit(char *buf, size_t size, long i)
{
	return snprintf(buf, size, "{\"op\":\"allow\",\"name\":\"circuit-%08ld\"}", i);
}

static int
force_open(char *buf, size_t size, long i)
{
	return snprintf(buf, size,
	    "{\"op\":\"set_state\",\"name\":\"open-%08ld\",\"state\":\"open\"}", i);
}

/* Send `count` requests made by fn in pipelined batches. */
static bool
pipeline(int fd, long count, request_fn fn)
{
	static char buf[BENCH_BATCH * 256];

	for (long i = 0; i < count;) {
		size_t len = 0;
		long n = 0;

		while (n < BENCH_BATCH && i < count) {
			len += (size_t)fn(buf + len, sizeof buf - len, i);
			buf[len++] = '\n';
			n++;
			i++;
		}
		if (!harness_send_all(fd, buf, len) || !read_lines(fd, n))
			return false;
	}
	return true;
}

static void
memory_per_circuit(long circuits)
{
	char config[256];
	cbd_harness h;
	long before, after;
	int fd;

	snprintf(config, sizeof config,
	    "[cbd]\nmax_circuits = %ld\nidle_reclaim_ms = 0\nlog_level = warning\n", circuits * 2);
	if (!harness_start(&h, config)) {
		fprintf(stderr, "bench: cbd did not start\n");
		exit(1);
	}
	fd = harness_connect(&h);
	/* One circuit first, so that the baseline holds the event loop's and
	 * the table's fixed costs. */
	pipeline(fd, 1, allow_warm_up);
	before = rss_kib(h.pid);
	if (!pipeline(fd, circuits, allow_circuit))
		fprintf(stderr, "bench: pipeline broke\n");
	after = rss_kib(h.pid);
	printf("memory: %ld closed circuits, 16-byte names: RSS %ld -> %ld KiB, "
	       "%.1f bytes per circuit\n",
	    circuits, before, after, (double)(after - before) * 1024.0 / (double)circuits);
	close(fd);
	harness_stop(&h);
}

/* The changer: every 20 ms forces one of the open circuits open again (a
 * change the state file must record), until stop. */
typedef struct changer {
	cbd_harness *h;
	volatile bool stop;
	long open;
	long changes;
} changer;

static void *
changer_run(void *arg)
{
	changer *ch = arg;
	int fd = harness_connect(ch->h);
	char line[256];
	struct timespec pause = { 0, 20 * 1000000 };

	while (!ch->stop) {
		snprintf(line, sizeof line,
		    "{\"op\":\"set_state\",\"name\":\"open-%08ld\",\"state\":\"%s\"}\n",
		    ch->changes % ch->open,
		    (ch->changes / ch->open) % 2 == 0 ? "half_open" : "open");
		if (!harness_send_all(fd, line, strlen(line)) || !read_lines(fd, 1))
			break;
		ch->changes++;
		nanosleep(&pause, NULL);
	}
	close(fd);
	return NULL;
}

/* Probe round trips for `seconds`; prints p50, p99, max. */
static void
probe(cbd_harness *h, int seconds, const char *label)
{
	const char *req = "{\"op\":\"get\",\"name\":\"open-00000000\"}\n";
	int fd = harness_connect(h);
	double end = now_us() + seconds * 1e6;
	size_t n = 0;

	while (n < BENCH_SAMPLES_MAX && now_us() < end) {
		double t = now_us();

		if (!harness_send_all(fd, req, strlen(req)) || !read_lines(fd, 1))
			break;
		samples[n++] = now_us() - t;
	}
	close(fd);
	harness_sort_samples(samples, (size_t)n);
	printf("state file: %-34s %7zu gets: p50 %7.1f us  p99 %7.1f us  max %8.1f us\n", label, n,
	    n ? samples[n / 2] : 0, n ? samples[n * 99 / 100] : 0, n ? samples[n - 1] : 0);
}

static void
state_file_stall(long open, int seconds)
{
	char config[512], dir[] = "/tmp/cbd-bench-XXXXXX", stats[65536];
	changer ch = { .open = open };
	cbd_harness h;
	pthread_t thread;
	const char *w;
	int fd;

	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(config, sizeof config, "[cbd]\nstate_file = %s/state.json\nlog_level = warning\n",
	    dir);
	if (!harness_start(&h, config)) {
		fprintf(stderr, "bench: cbd did not start\n");
		exit(1);
	}
	fd = harness_connect(&h);
	pipeline(fd, open, force_open);
	sleep(1); /* the first write of the whole set */
	probe(&h, seconds, "quiet (no changes):");
	ch.h = &h;
	pthread_create(&thread, NULL, changer_run, &ch);
	probe(&h, seconds, "one change every 20 ms:");
	ch.stop = true;
	pthread_join(thread, NULL);
	if (harness_request(fd, "{\"op\":\"stats\"}", stats, sizeof stats) &&
	    (w = strstr(stats, "\"state_writes\":")) != NULL)
		printf("state file: %ld open circuits, %ld changes, %ld writes of the file\n", open,
		    ch.changes, strtol(w + 15, NULL, 10));
	if ((w = strstr(stats, "\"state_write_pause_max_us\":")) != NULL)
		printf("state file: longest pause of cbd's loop for a write (fork): %ld us\n",
		    strtol(w + 27, NULL, 10));
	close(fd);
	harness_stop(&h);
	snprintf(config, sizeof config, "rm -rf %s", dir);
	if (system(config) != 0)
		fprintf(stderr, "bench: cannot remove %s\n", dir);
}

/* A member of a stats reply (-1: absent or no reply). */
static long
stats_member(int fd, const char *member)
{
	static char reply[65536];
	char key[96];
	const char *w;

	snprintf(key, sizeof key, "\"%s\":", member);
	if (!harness_request(fd, "{\"op\":\"stats\"}", reply, sizeof reply) ||
	    (w = strstr(reply, key)) == NULL)
		return -1;
	return strtol(w + strlen(key), NULL, 10);
}

/* Wait until stats' member stops moving (unchanged for 1 s). */
static void
stats_settle(int fd, const char *member)
{
	long last = -2, now;
	int still = 0;

	while (still < 20) {
		now = stats_member(fd, member);
		still = now == last ? still + 1 : 0;
		last = now;
		harness_sleep_ms(50);
	}
}

/* Create `held` held-open circuits "s%06ld" (noreply, pipelined). */
static void
hold_many(int fd, long held)
{
	static char buf[BENCH_BATCH * 128];

	for (long i = 0; i < held; i += BENCH_BATCH) {
		size_t len = 0;

		for (long k = i; k < i + BENCH_BATCH && k < held; k++)
			len += (size_t)snprintf(buf + len, sizeof buf - len,
			    "{\"op\":\"set_state\",\"name\":\"s%06ld\",\"state\":\"open\","
			    "\"hold\":true,\"noreply\":true}\n",
			    k);
		if (!harness_send_all(fd, buf, len)) {
			fprintf(stderr, "bench: cbd went away\n");
			exit(1);
		}
	}
	while (stats_member(fd, "held") < held)
		harness_sleep_ms(50);
}

/* Place hold `name`; true once its reply came. */
static bool
hold_one(int fd, const char *name)
{
	char line[256], reply[4096];

	snprintf(line, sizeof line,
	    "{\"op\":\"set_state\",\"name\":\"%s\",\"state\":\"open\",\"hold\":true}", name);
	return harness_request(fd, line, reply, sizeof reply) && strstr(reply, "\"ok\":true");
}

static void
durability(long held, int count, int rounds)
{
	char config[512], dir[] = "/tmp/cbd-bench-XXXXXX", name[64], reply[4096];
	cbd_harness h;
	int fd, lost = 0;
	double restart_sum = 0, restart_max = 0;

	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		exit(1);
	}
	/* A restart with HELD circuits takes seconds (more on a loaded box). */
	setenv("CBD_HARNESS_TIMEOUT_MS", "180000", 0);
	snprintf(config, sizeof config,
	    "[cbd]\nstate_file = %s/state.json\nmax_circuits = %ld\nlog_level = warning\n", dir,
	    held * 2 + 1000);
	if (!harness_start(&h, config)) {
		fprintf(stderr, "bench: cbd did not start\n");
		exit(1);
	}
	fd = harness_connect(&h);
	hold_many(fd, held);
	stats_settle(fd, "state_writes");
	for (int i = 0; i < count; i++) {
		long before = stats_member(fd, "state_appends");
		double t0;

		snprintf(name, sizeof name, "late-%d", i);
		if (!hold_one(fd, name))
			break;
		t0 = now_us();
		while (stats_member(fd, "state_appends") <= before)
			usleep(200);
		samples[i] = (now_us() - t0) / 1000.0;
		harness_sleep_ms(20 + 37 * (i % 5)); /* not in step with a tick */
	}
	harness_sort_samples(samples, (size_t)count);
	printf("durable: %ld held circuits, %d holds: reply -> appended and fdatasync'ed: "
	       "p50 %.1f ms  p90 %.1f ms  max %.1f ms\n",
	    held, count, samples[count / 2], samples[count * 9 / 10], samples[count - 1]);
	for (int r = 0; r < rounds; r++) {
		double t0;

		snprintf(name, sizeof name, "kill-%d", r);
		if (!hold_one(fd, name))
			break;
		harness_sleep_ms(100);
		kill(h.pid, SIGKILL);
		close(fd);
		harness_wait(&h);
		harness_stop(&h);
		t0 = now_us();
		if (!harness_start(&h, config)) {
			fprintf(stderr, "bench: cbd did not restart\n");
			exit(1);
		}
		fd = harness_connect(&h);
		{
			char line[128];

			snprintf(line, sizeof line, "{\"op\":\"get\",\"name\":\"%s\"}", name);
			if (!harness_request(fd, line, reply, sizeof reply))
				reply[0] = '\0';
		}
		t0 = (now_us() - t0) / 1e6;
		restart_sum += t0;
		restart_max = t0 > restart_max ? t0 : restart_max;
		lost += strstr(reply, "\"hold\":{") == NULL;
		stats_settle(fd, "state_writes");
	}
	if (rounds > 0)
		printf("durable: %d holds placed 100 ms before a kill -9: %d lost; "
		       "restart with %ld held circuits: mean %.2f s, max %.2f s\n",
		    rounds, lost, held, restart_sum / rounds, restart_max);
	close(fd);
	harness_stop(&h);
	snprintf(config, sizeof config, "rm -rf %s", dir);
	if (system(config) != 0)
		fprintf(stderr, "bench: cannot remove %s\n", dir);
}

int
main(int argc, char **argv)
{
	long circuits = 1000000, open = 10000, held = 100000;
	int seconds = 3, opt, count = 20, rounds = 5;

	while ((opt = getopt(argc, argv, "n:o:d:H:s:k:")) != -1) {
		switch (opt) {
		case 'H':
			held = strtol(optarg, NULL, 10);
			break;
		case 's':
			count = atoi(optarg);
			if (count < 1 || count > 100000)
				count = 20;
			break;
		case 'k':
			rounds = atoi(optarg);
			break;
		case 'n':
			circuits = strtol(optarg, NULL, 10);
			break;
		case 'o':
			open = strtol(optarg, NULL, 10);
			break;
		case 'd':
			seconds = atoi(optarg);
			break;
		default:
			fprintf(stderr,
			    "usage: bench-authority [-n CIRCUITS] [-o OPEN] [-d SECONDS] [-H HELD] "
			    "[-s SAMPLES] [-k ROUNDS]\n");
			return 2;
		}
	}
	if (getenv("CBD_BINARY") == NULL) {
		fprintf(stderr, "bench-authority: set CBD_BINARY to the cbd to measure\n");
		return 2;
	}
	if (circuits > 0)
		memory_per_circuit(circuits);
	if (open > 0)
		state_file_stall(open, seconds);
	if (held > 0)
		durability(held, count, rounds);
	return 0;
}
