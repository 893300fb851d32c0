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
 *      the whole file).
 *
 *   CBD_BINARY=src/cbd tests/bench-authority [-n CIRCUITS] [-o OPEN] [-d SECONDS]
 */
#include <pthread.h>
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

int
main(int argc, char **argv)
{
	long circuits = 1000000, open = 10000;
	int seconds = 3, opt;

	while ((opt = getopt(argc, argv, "n:o:d:")) != -1) {
		switch (opt) {
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
			    "usage: bench-authority [-n CIRCUITS] [-o OPEN] [-d SECONDS]\n");
			return 2;
		}
	}
	if (getenv("CBD_BINARY") == NULL) {
		fprintf(stderr, "bench-authority: set CBD_BINARY to the cbd to measure\n");
		return 2;
	}
	memory_per_circuit(circuits);
	state_file_stall(open, seconds);
	return 0;
}
