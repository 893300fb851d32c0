/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_client.c — latency of libcbclient calls, for the numbers the tests
 * only bound loosely: a round trip to a live cbd, a breaker call on cbd and
 * on a private store, a call while cbd is missing, and calls while cbd is
 * stopped (SIGSTOP) with and without the timeout backoff; and the cached
 * mode (issue 11): a protected call's cost with the cache on and off in
 * closed, open and half_open, and the propagation delay of a trip made in
 * one process to the caches of PROP_WATCHERS others.
 *
 *   CBD_BINARY=src/cbd tests/bench_client [-p | -c [-s STATE] [-l CALLS]] [-P] [-n NICE]
 *
 * -p: the propagation measurement alone. -c: the cached closed and open
 * calls alone (-s closed or -s open: one of them); with -l, also the mean
 * over CALLS closed calls back to back (a sustained loop: past the 1 MiB
 * backlog it runs at cbd's reading pace). -P: cbd on CPU 0, the bench
 * (callers and the cache's reader thread) on CPU 1. -n: run cbd at that nice value (what a unit's Nice= does; it
 * needs root for a negative one).
 *
 * Starts its own cbd on a temporary socket (tests/cbd-harness API).
 * Prints one line per measurement; not run by make check.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cbclient.h"
#include "cbd-harness.h"

#define SAMPLES_MAX 20000

static double samples[SAMPLES_MAX];

static double
now_us(void)
{
	return harness_now_s() * 1e6;
}

/* Print p50/p99/max and the mean of the first n samples (µs). */
static void
report(const char *what, int n)
{
	double sum = 0;

	for (int i = 0; i < n; i++)
		sum += samples[i];
	harness_sort_samples(samples, (size_t)n);
	printf("%-52s n=%-6d p50=%9.1f us  p99=%9.1f us  max=%9.1f us  mean=%9.3f us\n", what, n,
	    samples[n / 2], samples[n * 99 / 100], samples[n - 1], sum / n);
}

static int
call_ok(void *arg)
{
	(void)arg;
	return 0;
}

/* Watcher processes of the propagation measurement, and its rounds. */
#define PROP_WATCHERS 100
#define PROP_ROUNDS 10
/* Calls timed per cached case (uncached cases: UNCACHED_CALLS). */
#define CACHED_CALLS SAMPLES_MAX
#define UNCACHED_CALLS 2000
/* Bound on waiting for a cache to come live or see a state (ms). */
#define WAIT_MS 5000
/* Poll period of cache_wait (µs). The propagation watchers poll slowly:
 * what they report is when their reader thread applied the event, which
 * does not depend on the polling; slow polling keeps 100 processes from
 * loading the cores the reader threads need. */
static int wait_poll_us = 1000;
#define WATCHER_POLL_US 20000
/* The pace of the paced closed-call measurement (µs between calls). */
#define PACED_GAP_US 100
#define PACED_CALLS 5000
/* The pause before the burst: cbd reads a full backlog (~14,000 lines)
 * in ~15-30 ms. */
#define BURST_SETTLE_US 300000
/* Busy-paced closed calls: µs between call starts. */
static const double spin_gaps[] = { 2, 5, 20 };
/* Sparse calls: further apart than the reader's hot period (50 ms). */
#define SPARSE_GAP_US 60000
#define SPARSE_CALLS 100

static void time_calls(cbc_breaker *b, const char *what, int n, int gap_us);
static void time_calls_spin(cbc_breaker *b, const char *what, int n, double gap_us);
static double cbd_cpu_s(void);
/* -c: only the cached closed and open cases; -l: a sustained closed loop
 * of that many calls. */
static bool only_cached;
/* cbd's pid (its CPU time: /proc/PID/stat). */
static pid_t cbd_pid;
/* -s closed|open: with -c, that state alone (callgrind: one path). */
static const char *only_state;
static long long sustained_calls;

static cbc_breaker *
breaker_named(cbc_store *store, const char *name, int64_t backoff_ms, cbc_cache_mode cache)
{
	cbc_breaker_options o;

	cbc_breaker_options_init(&o);
	o.name = name;
	o.store = store;
	o.timeout_backoff_ms = backoff_ms;
	o.cache = cache;
	o.success_threshold = 1000000000; /* half_open stays half_open */
	o.half_open_max = 10000;
	o.break_ms = 600000;
	return cbc_breaker_new(&o, NULL);
}

static cbc_breaker *
breaker_on(cbc_store *store, int64_t backoff_ms)
{
	return breaker_named(store, "bench", backoff_ms, CBC_CACHE_OFF);
}

/* Wait until b's cache decides calls itself in the state it expects
 * (closed: a cached permit; open: a cached refusal). */
static bool
cache_wait(cbc_breaker *b, cbc_state want)
{
	double deadline = now_us() + WAIT_MS * 1000.0;

	while (now_us() < deadline) {
		cbc_cache_stats before, after;
		cbc_permit p;
		cbc_status st;

		cbc_breaker_cache_stats(b, &before, NULL);
		st = cbc_breaker_acquire(b, &p, NULL);
		if (st == CBC_OK)
			cbc_breaker_report(b, &p, CBC_OUTCOME_IGNORE, NULL);
		cbc_breaker_cache_stats(b, &after, NULL);
		if (want == CBC_STATE_CLOSED && st == CBC_OK && p.cached)
			return true;
		if (want == CBC_STATE_OPEN && st == CBC_EOPEN &&
		    after.refused_calls > before.refused_calls)
			return true;
		usleep((useconds_t)wait_poll_us);
	}
	return false;
}

/* The cost of a protected call in each state, cache on and off. */
static void
bench_states(cbc_store *remote, cbc_conn *admin)
{
	static const cbc_state states[] = { CBC_STATE_CLOSED, CBC_STATE_OPEN, CBC_STATE_HALF_OPEN };
	char what[96], name[32];

	for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
		for (int on = 1; on >= 0; on--) {
			cbc_breaker *b;
			int n =
			    on && states[i] != CBC_STATE_HALF_OPEN ? CACHED_CALLS : UNCACHED_CALLS;

			if (only_cached && (!on || states[i] == CBC_STATE_HALF_OPEN))
				continue;
			if (only_state != NULL &&
			    strcmp(only_state, cbc_state_name(states[i])) != 0)
				continue;

			snprintf(name, sizeof name, "state-%zu-%d", i, on);
			b = breaker_named(remote, name, -1, on ? CBC_CACHE_ON : CBC_CACHE_OFF);
			if (b == NULL)
				continue;
			cbc_breaker_execute(b, call_ok, NULL, NULL, NULL); /* create, prime */
			if (states[i] != CBC_STATE_CLOSED)
				cbc_set_state(admin, name, states[i], NULL, NULL, NULL);
			if (on && states[i] != CBC_STATE_HALF_OPEN && !cache_wait(b, states[i]))
				fprintf(stderr, "bench_client: cache of %s not live\n", name);
			if (on && states[i] == CBC_STATE_HALF_OPEN)
				usleep(100000); /* the event reaches the cache */
			snprintf(what, sizeof what, "protected call, %s, cache %s",
			    cbc_state_name(states[i]), on ? "on" : "off");
			time_calls(b, what, n, 0);
			/* The mean over a run (p50 above is rounded to 0.1 us),
			 * with the calls of it that found the backlog full: right
			 * after the run above (closed: its outcomes still queued,
			 * so the calls go at cbd's reading pace), then as a burst
			 * once cbd has read them (closed: 20,000 outcomes, 1.5 MB,
			 * about what the backlog and the socket hold). */
			for (int burst = 0; on && states[i] != CBC_STATE_HALF_OPEN && burst < 2;
			     burst++) {
				cbc_cache_stats s0, s1;
				double t0;

				if (burst)
					usleep(BURST_SETTLE_US);
				cbc_breaker_cache_stats(b, &s0, NULL);
				t0 = now_us();
				for (int k = 0; k < n; k++)
					cbc_breaker_execute(b, call_ok, NULL, NULL, NULL);
				t0 = now_us() - t0;
				cbc_breaker_cache_stats(b, &s1, NULL);
				printf("    mean over %d calls%s: %.0f ns (%llu found the backlog "
				       "full, %llu via the store)\n",
				    n, burst ? ", a burst after a pause" : "", t0 * 1000.0 / n,
				    (unsigned long long)(s1.out_full - s0.out_full),
				    (unsigned long long)(s1.store_reports - s0.store_reports));
			}
			if (on && states[i] == CBC_STATE_CLOSED && sustained_calls > 0) {
				cbc_cache_stats s0, s1;
				double t0;

				double cpu0 = cbd_cpu_s();

				cbc_breaker_cache_stats(b, &s0, NULL);
				t0 = now_us();
				for (long long k = 0; k < sustained_calls; k++)
					cbc_breaker_execute(b, call_ok, NULL, NULL, NULL);
				t0 = now_us() - t0;
				cbc_breaker_cache_stats(b, &s1, NULL);
				/* cbd's CPU a call (the lines it read meanwhile are
				 * about the calls made: the backlog is full at both
				 * ends). */
				printf("    sustained: mean over %lld calls: %.0f ns (%llu found "
				       "the backlog full, %llu via the store); cbd CPU %.0f ns "
				       "a call\n",
				    sustained_calls, t0 * 1000.0 / (double)sustained_calls,
				    (unsigned long long)(s1.out_full - s0.out_full),
				    (unsigned long long)(s1.store_reports - s0.store_reports),
				    (cbd_cpu_s() - cpu0) * 1e9 / (double)sustained_calls);
			}
			if (on) {
				cbc_cache_stats cs;

				cbc_breaker_cache_stats(b, &cs, NULL);
				printf("    cache: %llu permitted, %llu refused, %llu asked cbd, "
				       "%llu noreply lines in %llu writes (%llu successes folded "
				       "into counted lines), %llu via the store, "
				       "%llu found the backlog full, %llu disconnects\n",
				    (unsigned long long)cs.permitted,
				    (unsigned long long)cs.refused_calls,
				    (unsigned long long)cs.asked,
				    (unsigned long long)cs.noreply_lines,
				    (unsigned long long)cs.sends, (unsigned long long)cs.folded,
				    (unsigned long long)cs.store_reports,
				    (unsigned long long)cs.out_full,
				    (unsigned long long)cs.disconnects);
			}
			if (on && states[i] == CBC_STATE_CLOSED) {
				/* One call at a time, cbd keeping up: a write per call. */
				snprintf(what, sizeof what,
				    "protected call, closed, cache on, 1 call/%d us", PACED_GAP_US);
				time_calls(b, what, PACED_CALLS, PACED_GAP_US);
				/* Busy paced: 500k, 200k and 50k calls a second. */
				for (size_t g = 0; g < sizeof spin_gaps / sizeof spin_gaps[0];
				     g++) {
					snprintf(what, sizeof what,
					    "protected call, closed, cache on, 1 call/%g us (spin)",
					    spin_gaps[g]);
					time_calls_spin(b, what, CACHED_CALLS, spin_gaps[g]);
				}
				/* Sparse: past the reader's hot period each call
				 * wakes it (a pipe write). */
				snprintf(what, sizeof what,
				    "protected call, closed, cache on, 1 call/%d ms",
				    SPARSE_GAP_US / 1000);
				time_calls(b, what, SPARSE_CALLS, SPARSE_GAP_US);
			}
			cbc_breaker_free(b);
		}
	}
}

/* One watcher of the propagation measurement: per round, wait until the
 * trip refuses here, send when its event was applied, then wait until
 * the circuit is closed again and say so. */
static void
prop_watcher(const char *path, int to_parent)
{
	cbc_conn *conn = cbc_conn_new(path, NULL);
	cbc_store *store = cbc_store_new_remote(conn, NULL);
	cbc_breaker *b = breaker_named(store, "prop", -1, CBC_CACHE_ON);
	int64_t ready = -1;

	wait_poll_us = WATCHER_POLL_US;
	if (b == NULL || !cache_wait(b, CBC_STATE_CLOSED) ||
	    write(to_parent, &ready, sizeof ready) != sizeof ready)
		_exit(2);
	for (int r = 0; r < PROP_ROUNDS; r++) {
		for (cbc_state want = CBC_STATE_OPEN;; want = CBC_STATE_CLOSED) {
			cbc_cache_stats cs;

			while (!cache_wait(b, want))
				;
			cbc_breaker_cache_stats(b, &cs, NULL);
			if (write(to_parent, &cs.last_event_us, sizeof cs.last_event_us) !=
			    sizeof cs.last_event_us)
				_exit(2);
			if (want == CBC_STATE_CLOSED)
				break;
		}
	}
	cbc_breaker_free(b);
	cbc_store_free(store);
	cbc_conn_free(conn);
	_exit(0);
}

/* Trip "prop" PROP_ROUNDS times with PROP_WATCHERS cached processes
 * watching; each sample is trip sent -> event applied in one watcher. */
static void
bench_propagation(const char *path, cbc_conn *admin)
{
	pid_t pids[PROP_WATCHERS];
	int fds[2], n = 0;
	int64_t v;

	if (pipe(fds) != 0)
		return;
	for (int i = 0; i < PROP_WATCHERS; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			close(fds[0]);
			prop_watcher(path, fds[1]);
		}
	}
	close(fds[1]);
	for (int i = 0; i < PROP_WATCHERS; i++)
		if (read(fds[0], &v, sizeof v) != sizeof v)
			goto out;
	for (int r = 0; r < PROP_ROUNDS; r++) {
		int64_t t0 = (int64_t)now_us();

		cbc_set_state(admin, "prop", CBC_STATE_OPEN, NULL, NULL, NULL);
		for (int i = 0; i < PROP_WATCHERS; i++) {
			if (read(fds[0], &v, sizeof v) != sizeof v)
				goto out;
			samples[n++] = (double)(v - t0);
		}
		cbc_set_state(admin, "prop", CBC_STATE_CLOSED, NULL, NULL, NULL);
		for (int i = 0; i < PROP_WATCHERS; i++)
			if (read(fds[0], &v, sizeof v) != sizeof v)
				goto out;
	}
	report("propagation: trip -> event applied, 100 watchers", n);
	printf("    (min %.1f us)\n", samples[0]);
out:
	close(fds[0]);
	for (int i = 0; i < PROP_WATCHERS; i++)
		if (pids[i] > 0)
			waitpid(pids[i], NULL, 0);
}

/* cbd's user + system CPU time so far (s), or -1. */
static double
cbd_cpu_s(void)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	ssize_t n;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)cbd_pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	n = (ssize_t)fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* Fields 14 and 15 (utime, stime), after the ")" that ends comm. */
	p = strrchr(buf, ')');
	if (p == NULL ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Time n breaker calls, spinning (not sleeping: the core stays busy and
 * its caches warm, as in a server's loop) until start + gap_us between
 * their starts: a call rate of 1e6 / gap_us a second. */
static void
time_calls_spin(cbc_breaker *b, const char *what, int n, double gap_us)
{
	double next = now_us();

	for (int i = 0; i < n; i++) {
		double t0;

		while ((t0 = now_us()) < next)
			;
		next = t0 + gap_us;
		cbc_breaker_execute(b, call_ok, NULL, NULL, NULL);
		samples[i] = now_us() - t0;
	}
	report(what, n);
}

/* Time n breaker calls, sleeping gap_us between them. */
static void
time_calls(cbc_breaker *b, const char *what, int n, int gap_us)
{
	for (int i = 0; i < n; i++) {
		double t0 = now_us();

		cbc_breaker_execute(b, call_ok, NULL, NULL, NULL);
		samples[i] = now_us() - t0;
		if (gap_us > 0)
			usleep((useconds_t)gap_us);
	}
	report(what, n);
}

int
main(int argc, char **argv)
{
	bool only_propagation = false, pin = false;
	int cbd_nice = 0, opt;
	cbd_harness h;
	cbc_conn *conn;
	cbc_store *remote, *local;
	cbc_breaker *b;
	cbc_snapshot s;
	char what[96];

	while ((opt = getopt(argc, argv, "pcPs:l:n:")) != -1) {
		if (opt == 'p') {
			only_propagation = true;
		} else if (opt == 'c') {
			only_cached = true;
		} else if (opt == 'P') {
			pin = true;
		} else if (opt == 's') {
			only_state = optarg;
		} else if (opt == 'l') {
			sustained_calls = atoll(optarg);
		} else if (opt == 'n') {
			cbd_nice = atoi(optarg);
		} else {
			fprintf(stderr,
			    "usage: bench_client [-p | -c [-s STATE] [-l CALLS]] [-P] [-n NICE]\n");
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (!harness_start(&h, "")) {
		fprintf(stderr, "bench_client: cannot start cbd (is CBD_BINARY set?)\n");
		return 1;
	}
	/* -n: cbd's priority, as a unit's Nice= would set it (a trip's
	 * events reach 100 woken watchers sooner when they do not preempt
	 * cbd between its writes). */
	/* -P: cbd on CPU 0, this process (caller and reader thread) on CPU
	 * 1: what the caller pays itself, without cbd preempting it. */
	if (pin) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(0, &set);
		if (sched_setaffinity(h.pid, sizeof set, &set) != 0)
			fprintf(stderr, "bench_client: cannot pin cbd: %s\n", strerror(errno));
		CPU_ZERO(&set);
		CPU_SET(1, &set);
		if (sched_setaffinity(0, sizeof set, &set) != 0)
			fprintf(stderr, "bench_client: cannot pin: %s\n", strerror(errno));
		printf("cbd on CPU 0, bench_client on CPU 1\n");
	}
	if (cbd_nice != 0) {
		if (setpriority(PRIO_PROCESS, (id_t)h.pid, cbd_nice) != 0)
			fprintf(stderr, "bench_client: cannot set cbd's nice to %d: %s\n", cbd_nice,
			    strerror(errno));
		else
			printf("cbd runs at nice %d\n", cbd_nice);
	}
	cbd_pid = h.pid;
	conn = cbc_conn_new(h.socket_path, NULL);
	remote = cbc_store_new_remote(conn, NULL);
	if (only_cached) {
		cbc_conn *admin = cbc_conn_new(h.socket_path, NULL);

		cbc_conn_set_timeouts(admin, 5000, 5000, NULL);
		bench_states(remote, admin);
		cbc_conn_free(admin);
		cbc_store_free(remote);
		cbc_conn_free(conn);
		harness_stop(&h);
		return 0;
	}
	if (only_propagation) {
		cbc_conn *admin = cbc_conn_new(h.socket_path, NULL);

		cbc_conn_set_timeouts(admin, 5000, 5000, NULL);
		bench_propagation(h.socket_path, admin);
		cbc_conn_free(admin);
		cbc_store_free(remote);
		cbc_conn_free(conn);
		harness_stop(&h);
		return 0;
	}

	for (int i = 0; i < 2000; i++) {
		double t0 = now_us();

		cbc_get(conn, "bench", NULL, &s, NULL);
		samples[i] = now_us() - t0;
	}
	report("get round trip, live cbd", 2000);

	b = breaker_on(remote, -1);
	time_calls(b, "breaker execute, live cbd (get + record)", 2000, 0);
	cbc_breaker_free(b);

	{
		cbc_conn *admin = cbc_conn_new(h.socket_path, NULL);

		cbc_conn_set_timeouts(admin, 5000, 5000, NULL);
		bench_states(remote, admin);
		bench_propagation(h.socket_path, admin);
		cbc_conn_free(admin);
	}

	local = cbc_store_new_local(0, NULL);
	b = breaker_on(local, -1);
	time_calls(b, "breaker execute, resilient(local) store", SAMPLES_MAX, 0);
	cbc_breaker_free(b);
	cbc_store_free(local);

	/* cbd missing: the socket file is gone, connect fails at once. */
	{
		cbc_conn *dead = cbc_conn_new("/tmp/bench-no-such-cbd.sock", NULL);
		cbc_store *dead_store = cbc_store_new_remote(dead, NULL);

		b = breaker_on(dead_store, -1);
		time_calls(b, "breaker execute, cbd missing (LOCAL policy)", 2000, 0);
		cbc_breaker_free(b);
		cbc_store_free(dead_store);
		cbc_conn_free(dead);
	}

	/* cbd stopped, 50 ms timeouts. */
	cbc_conn_set_timeouts(conn, 50, 50, NULL);
	kill(h.pid, SIGSTOP);
	b = breaker_on(remote, -1);
	snprintf(what, sizeof what, "cbd stopped, io 50 ms, backoff %d ms, 1 call/10 ms",
	    CBC_DEFAULT_TIMEOUT_BACKOFF_MS);
	time_calls(b, what, 60, 10000);
	cbc_breaker_free(b);
	b = breaker_on(remote, 0);
	time_calls(b, "cbd stopped, io 50 ms, no backoff", 10, 0);
	cbc_breaker_free(b);
	kill(h.pid, SIGCONT);

	cbc_store_free(remote);
	cbc_conn_free(conn);
	harness_stop(&h);
	return 0;
}
