/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stress.c — how much one misbehaving peer slows everyone else. Starts a
 * fresh cbd ($CBD_BINARY, else ./src/cbd), measures a probe client's
 * `get` latency while cbd is quiet, then again while each hostile load
 * runs alongside:
 *   (a) slowloris: many connections sending a partial line byte by byte;
 *   (b) list flood: connections pipelining {"op":"list"} with many
 *       circuits stored;
 *   (c) churn: record_failure on ever-new names (1M, or until the phase
 *       ends).
 * Prints p50/p99 per phase, the p99's ratio to quiet (the goal: within
 * 2x) and cbd's RSS after the phase. Asserts nothing; not run by make
 * check.
 *
 * What is measured is how cbd treats the probe while it serves the load,
 * not how the load's own threads crowd the probe out of a CPU: with two
 * CPUs or more, cbd runs on CPU 0 and this process on CPU 1, its load
 * threads at SCHED_IDLE (they run whenever the probe does not). On a host
 * with cores to spare a hostile peer has its own; on two cores this is
 * the nearest thing. -P leaves placement to the scheduler (the load then
 * competes with the probe and with cbd for the two CPUs).
 *
 *   stress [-d SECONDS_PER_PHASE] [-n SLOWLORIS_CONNS] [-c LIST_CIRCUITS]
 *          [-m CHURN_NAMES] [-P]
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cbd-harness.h"

/* Defaults of the options. */
#define STRESS_PHASE_S 5.0
#define STRESS_SLOWLORIS 500
#define STRESS_LIST_CIRCUITS 20000
#define STRESS_CHURN_NAMES 1000000L
/* The probe's pause between two gets, and its most samples per phase. */
#define STRESS_PROBE_GAP_US 1000
#define STRESS_PROBE_MAX 1000000
/* Slowloris: one byte per connection per round, a round this often. */
#define STRESS_SLOWLORIS_ROUND_MS 100
/* List flood: connections, and lists pipelined per write. */
#define STRESS_LIST_CONNS 4
#define STRESS_LIST_BATCH 16
/* Churn: connections, and record_failure lines per write. */
#define STRESS_CHURN_CONNS 2
#define STRESS_CHURN_BATCH 256
/* Most load threads of one phase; the load's head start on the probe. */
#define STRESS_THREADS_MAX 8
#define STRESS_WARMUP_US 500000
/* Descriptors beyond the slowloris connections. */
#define STRESS_SPARE_FDS 64
/* A load connection waits this long for replies before giving up. */
#define STRESS_READ_TIMEOUT_S 10
#define STRESS_BUF (1 << 20)

static const char config[] = "[cbd]\n"
			     "max_connections = 4096\n"
			     "max_circuits = 2000000\n"
			     "log_level = error\n";

static atomic_bool load_stop;
static atomic_long load_done; /* requests answered (or bytes sent) by the load */
static atomic_long load_errors; /* load connections lost */

static void
sleep_us(long us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Read until `lines` LFs have come (bounded by the socket's timeout). */
static bool
read_lines(int fd, char *buf, long lines)
{
	while (lines > 0) {
		ssize_t n = recv(fd, buf, STRESS_BUF, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		for (ssize_t i = 0; i < n; i++)
			lines -= buf[i] == '\n';
	}
	return true;
}

/* A connection for a load thread: blocking, reads time out. */
static int
load_connect(const cbd_harness *h)
{
	struct timeval tv = { .tv_sec = STRESS_READ_TIMEOUT_S };
	int fd = harness_connect(h);

	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return fd;
}

/* --- the probe --- */

typedef struct probe_result {
	long count;
	long failures;
	double p50_ms;
	double p99_ms;
	double max_ms;
} probe_result;

static int
compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Probe with `get` for `seconds`, one request at a time. */
static void
probe_run(const cbd_harness *h, double seconds, probe_result *out)
{
	static double samples[STRESS_PROBE_MAX];
	double end = harness_now_s() + seconds;
	char reply[4096];
	int fd = harness_connect(h);

	memset(out, 0, sizeof *out);
	while (harness_now_s() < end && out->count < STRESS_PROBE_MAX) {
		double t0 = harness_now_s();

		if (fd < 0 ||
		    !harness_request(fd, "{\"op\":\"get\",\"name\":\"probe\"}", reply,
			sizeof reply) ||
		    strstr(reply, "\"ok\":true") == NULL) {
			out->failures++;
			if (fd >= 0)
				close(fd);
			fd = harness_connect(h);
			continue;
		}
		samples[out->count++] = (harness_now_s() - t0) * 1e3;
		sleep_us(STRESS_PROBE_GAP_US);
	}
	if (fd >= 0)
		close(fd);
	if (out->count == 0)
		return;
	qsort(samples, (size_t)out->count, sizeof samples[0], compare_double);
	out->p50_ms = samples[out->count / 2];
	out->p99_ms = samples[out->count * 99 / 100];
	out->max_ms = samples[out->count - 1];
}

/* --- the loads --- */

typedef struct load_arg {
	const cbd_harness *h;
	int index;
	long count; /* slowloris connections; churn names */
} load_arg;

/* (a) Connect `count` connections, then trickle a partial line. */
static void *
slowloris_run(void *p)
{
	const load_arg *a = p;
	static const char partial[] = "{\"op\":\"get\",\"name\":\"slowly-but-never-ending-";
	int *fds = calloc((size_t)a->count, sizeof *fds);
	long opened = 0;
	size_t pos = 0;

	if (fds == NULL)
		return NULL;
	for (; opened < a->count && !atomic_load(&load_stop); opened++) {
		fds[opened] = harness_connect(a->h);
		if (fds[opened] < 0)
			break;
	}
	while (!atomic_load(&load_stop)) {
		char byte = pos < sizeof partial - 1 ? partial[pos] : 'x';

		for (long i = 0; i < opened; i++) {
			if (fds[i] >= 0 &&
			    send(fds[i], &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
				atomic_fetch_add(&load_done, 1);
			} else if (fds[i] >= 0) {
				atomic_fetch_add(&load_errors, 1);
				close(fds[i]);
				fds[i] = -1;
			}
		}
		pos++;
		sleep_us(STRESS_SLOWLORIS_ROUND_MS * 1000L);
	}
	for (long i = 0; i < opened; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
	}
	free(fds);
	return NULL;
}

/* (b) Pipeline lists, reading every reply. */
static void *
list_flood_run(void *p)
{
	const load_arg *a = p;
	char *buf = malloc(STRESS_BUF);
	char batch[STRESS_LIST_BATCH * 16];
	size_t len = 0;
	int fd = load_connect(a->h);

	for (int i = 0; i < STRESS_LIST_BATCH; i++)
		len += (size_t)snprintf(batch + len, sizeof batch - len, "{\"op\":\"list\"}\n");
	while (buf != NULL && fd >= 0 && !atomic_load(&load_stop)) {
		if (!harness_send_all(fd, batch, len) || !read_lines(fd, buf, STRESS_LIST_BATCH)) {
			atomic_fetch_add(&load_errors, 1);
			close(fd);
			fd = load_connect(a->h);
			continue;
		}
		atomic_fetch_add(&load_done, STRESS_LIST_BATCH);
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

/* Names of the churn: every thread takes the next unused number. */
static atomic_long churn_next;

/* (c) record_failure on ever-new names, pipelined. */
static void *
churn_run(void *p)
{
	const load_arg *a = p;
	char *buf = malloc(STRESS_BUF);
	char *batch = malloc(STRESS_CHURN_BATCH * 64);
	int fd = load_connect(a->h);

	while (buf != NULL && batch != NULL && fd >= 0 && !atomic_load(&load_stop)) {
		long first = atomic_fetch_add(&churn_next, STRESS_CHURN_BATCH);
		size_t len = 0;

		long n =
		    a->count - first < STRESS_CHURN_BATCH ? a->count - first : STRESS_CHURN_BATCH;

		if (n <= 0)
			break;
		for (long i = 0; i < n; i++)
			len += (size_t)snprintf(batch + len, 64,
			    "{\"op\":\"record_failure\",\"name\":\"churn-%ld\"}\n", first + i);
		if (!harness_send_all(fd, batch, len) || !read_lines(fd, buf, n)) {
			atomic_fetch_add(&load_errors, 1);
			close(fd);
			fd = load_connect(a->h);
			continue;
		}
		atomic_fetch_add(&load_done, n);
	}
	if (fd >= 0)
		close(fd);
	free(batch);
	free(buf);
	return NULL;
}

/* Store `count` open circuits for the list flood. */
static bool
store_circuits(const cbd_harness *h, long count)
{
	char *buf = malloc(STRESS_BUF);
	char *batch = malloc(STRESS_CHURN_BATCH * 96);
	int fd = load_connect(h);
	bool ok = buf != NULL && batch != NULL && fd >= 0;

	for (long first = 0; ok && first < count; first += STRESS_CHURN_BATCH) {
		size_t len = 0;
		long n = count - first < STRESS_CHURN_BATCH ? count - first : STRESS_CHURN_BATCH;

		for (long i = 0; i < n; i++)
			len += (size_t)snprintf(batch + len, 96,
			    "{\"op\":\"set_state\",\"name\":\"listed-%ld\",\"state\":\"open\"}\n",
			    first + i);
		ok = harness_send_all(fd, batch, len) && read_lines(fd, buf, n);
	}
	if (fd >= 0)
		close(fd);
	free(batch);
	free(buf);
	return ok;
}

/* --- placement --- */

/* Load threads at SCHED_IDLE (set by main with -P off). */
static bool load_idle;

static bool
pin_to(pid_t pid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(pid, sizeof set, &set) == 0;
}

static int
cpu_count(void)
{
	cpu_set_t set;

	return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

/* --- phases --- */

typedef void *(*load_fn)(void *);

/* cbd's resident memory in MiB (from /proc), or -1. */
static double
rss_mib(pid_t pid)
{
	char path[64], line[256];
	double kib = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
	f = fopen(path, "r");
	while (f != NULL && fgets(line, sizeof line, f) != NULL) {
		if (sscanf(line, "VmRSS: %lf kB", &kib) == 1)
			break;
	}
	if (f != NULL)
		fclose(f);
	return kib < 0 ? -1 : kib / 1024;
}

/* Run `threads` copies of fn (none when NULL) alongside the probe for
 * `seconds`; print one row, with the p99 against quiet's (NULL: this is
 * quiet). */
static void
phase(const cbd_harness *h, const char *name, load_fn fn, int threads, long count, double seconds,
    const probe_result *quiet, const char *unit, probe_result *out)
{
	pthread_t tid[STRESS_THREADS_MAX];
	load_arg args[STRESS_THREADS_MAX];
	int started = 0;

	atomic_store(&load_stop, false);
	atomic_store(&load_done, 0);
	atomic_store(&load_errors, 0);
	for (int i = 0; fn != NULL && i < threads && i < STRESS_THREADS_MAX; i++) {
		args[i] = (load_arg){ .h = h, .index = i, .count = count };
		if (pthread_create(&tid[i], NULL, fn, &args[i]) != 0)
			continue;
		if (load_idle)
			pthread_setschedparam(tid[i], SCHED_IDLE, &(struct sched_param){ 0 });
		started++;
	}
	/* Let the load get going (slowloris connects first). */
	if (fn != NULL)
		sleep_us(STRESS_WARMUP_US);
	probe_run(h, seconds, out);
	atomic_store(&load_stop, true);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	printf("%-24s %7ld %8.3f %8.3f %9.3f %7.2fx %5ld %6.1f   %ld %s, %ld lost\n", name,
	    out->count, out->p50_ms, out->p99_ms, out->max_ms,
	    quiet != NULL && quiet->p99_ms > 0 ? out->p99_ms / quiet->p99_ms : 1.0, out->failures,
	    rss_mib(h->pid), atomic_load(&load_done), unit, atomic_load(&load_errors));
	fflush(stdout);
}

/* Make room for the slowloris connections (cbd inherits the limit). */
static void
raise_fd_limit(long want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= (rlim_t)want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)want ? (rlim_t)want
										  : rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
}

int
main(int argc, char **argv)
{
	double seconds = STRESS_PHASE_S;
	long slowloris = STRESS_SLOWLORIS, circuits = STRESS_LIST_CIRCUITS;
	long churn = STRESS_CHURN_NAMES;
	probe_result quiet, r;
	char label[64];
	cbd_harness h;
	bool pin = cpu_count() >= 2;
	int opt;

	while ((opt = getopt(argc, argv, "d:n:c:m:P")) != -1) {
		switch (opt) {
		case 'P':
			pin = false;
			break;
		case 'd':
			seconds = atof(optarg);
			break;
		case 'n':
			slowloris = atol(optarg);
			break;
		case 'c':
			circuits = atol(optarg);
			break;
		case 'm':
			churn = atol(optarg);
			break;
		default:
			fprintf(stderr,
			    "usage: stress [-d SECONDS] [-n SLOWLORIS] [-c CIRCUITS] [-m NAMES] "
			    "[-P]\n");
			return 2;
		}
	}
	if (getenv("CBD_BINARY") == NULL)
		setenv("CBD_BINARY", "./src/cbd", 0);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit(slowloris + STRESS_SPARE_FDS);
	if (!harness_start(&h, config)) {
		fprintf(stderr, "stress: cannot start %s\n", getenv("CBD_BINARY"));
		return 1;
	}
	printf("stress: %s, probe get every %d us, %.1f s per phase\n", getenv("CBD_BINARY"),
	    STRESS_PROBE_GAP_US, seconds);
	if (pin) {
		load_idle = pin_to(h.pid, 0) && pin_to(0, 1);
		printf(load_idle ? "cbd on CPU 0; probe and load on CPU 1, the load at SCHED_IDLE\n"
				 : "pinning failed: the scheduler places cbd, probe and load\n");
	} else {
		printf("cbd, probe and load placed by the scheduler (-P)\n");
	}
	printf("%-24s %7s %8s %8s %9s %8s %5s %6s   %s\n", "phase", "probes", "p50 ms", "p99 ms",
	    "max ms", "p99/quiet", "fails", "rss MB", "load");
	phase(&h, "quiet", NULL, 0, 0, seconds, NULL, "(no load)", &quiet);
	snprintf(label, sizeof label, "(a) slowloris x%ld", slowloris);
	phase(&h, label, slowloris_run, 1, slowloris, seconds, &quiet, "bytes trickled", &r);
	if (!store_circuits(&h, circuits))
		fprintf(stderr, "stress: storing %ld circuits failed\n", circuits);
	snprintf(label, sizeof label, "(b) list flood, %ldc", circuits);
	phase(&h, label, list_flood_run, STRESS_LIST_CONNS, 0, seconds, &quiet, "lists answered",
	    &r);
	snprintf(label, sizeof label, "(c) churn, %ld names", churn);
	phase(&h, label, churn_run, STRESS_CHURN_CONNS, churn, seconds, &quiet, "names recorded",
	    &r);
	harness_stop(&h);
	return 0;
}
