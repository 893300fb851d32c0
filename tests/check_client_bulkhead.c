/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_client_bulkhead.c — libcbclient's breaker against a real cbd with
 * protocol 3's bulkhead (max_concurrent) and retry budget: never more
 * than N callbacks in flight across forked processes (a counter in shared
 * memory fails the test at N+1), cached breakers taking the round trip
 * for limited circuits, the bulkhead's own error and reason (at once and
 * after wait_ms), a killed process's ticket handed to a waiting process,
 * tickets handed back on every outcome, and cbc_retry_execute marking its
 * retries and stopping on the budget's refusal; exact totals throughout.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "cbclient.h"
#include "cbd-harness.h"
#include "check-run.h"

/* Timeouts far above any real delay (answers, not timeouts, are tested). */
#define PATIENT_MS 10000
/* Processes and calls of the concurrency test. */
#define PROCS 6
#define CALLS 15
#define LIMIT 3

static cbd_harness *daemon_h;

static void
daemon_cleanup(void)
{
	if (daemon_h != NULL)
		harness_stop(daemon_h);
	free(daemon_h);
	daemon_h = NULL;
}

static cbd_harness *
start(const char *config)
{
	static bool registered;

	if (!registered) {
		atexit(daemon_cleanup);
		registered = true;
	}
	daemon_h = calloc(1, sizeof *daemon_h);
	ck_assert_ptr_nonnull(daemon_h);
	ck_assert(harness_start(daemon_h, config));
	return daemon_h;
}

static void
stop(void)
{
	daemon_cleanup();
}

/* A breaker over its own connection and remote store. */
typedef struct rig {
	cbc_conn *conn;
	cbc_store *store;
	cbc_breaker *b;
} rig;

static void
rig_open(rig *r, const char *path, const char *name, cbc_cache_mode cache, int64_t wait_ms)
{
	cbc_breaker_options o;
	cbc_error err;

	r->conn = cbc_conn_new(path, &err);
	ck_assert_ptr_nonnull(r->conn);
	ck_assert_int_eq(cbc_conn_set_timeouts(r->conn, PATIENT_MS, PATIENT_MS, &err), CBC_OK);
	r->store = cbc_store_new_remote(r->conn, &err);
	ck_assert_ptr_nonnull(r->store);
	cbc_breaker_options_init(&o);
	o.name = name;
	o.store = r->store;
	o.store_policy = CBC_POLICY_REJECT;
	o.cache = cache;
	o.wait_ms = wait_ms;
	r->b = cbc_breaker_new(&o, &err);
	ck_assert_msg(r->b != NULL, "%s", err.message);
}

static void
rig_close(rig *r)
{
	cbc_breaker_free(r->b);
	cbc_store_free(r->store);
	cbc_conn_free(r->conn);
}

/* The circuit's snapshot read on a fresh connection. */
static cbc_snapshot
snap_of(const char *path, const char *name)
{
	cbc_conn *c = cbc_conn_new(path, NULL);
	cbc_snapshot s;
	cbc_error err;

	ck_assert_ptr_nonnull(c);
	cbc_conn_set_timeouts(c, PATIENT_MS, PATIENT_MS, NULL);
	ck_assert_int_eq(cbc_get(c, name, NULL, &s, &err), CBC_OK);
	cbc_conn_free(c);
	return s;
}

/* ---------- never more than N in flight across processes ---------- */

typedef struct shared_count {
	int current;
	int peak;
	int over; /* callbacks that saw more than LIMIT running */
	int calls;
} shared_count;

static shared_count *shared;

static int
counted_call(void *arg)
{
	int now = __atomic_add_fetch(&shared->current, 1, __ATOMIC_SEQ_CST), peak;
	struct timespec ts = { 0, 2 * 1000 * 1000 };

	(void)arg;
	if (now > LIMIT)
		__atomic_add_fetch(&shared->over, 1, __ATOMIC_SEQ_CST);
	peak = __atomic_load_n(&shared->peak, __ATOMIC_SEQ_CST);
	while (now > peak &&
	    !__atomic_compare_exchange_n(&shared->peak, &peak, now, false, __ATOMIC_SEQ_CST,
		__ATOMIC_SEQ_CST))
		;
	__atomic_add_fetch(&shared->calls, 1, __ATOMIC_SEQ_CST);
	nanosleep(&ts, NULL);
	__atomic_sub_fetch(&shared->current, 1, __ATOMIC_SEQ_CST);
	return (int)(uintptr_t)arg;
}

/* A child's run: CALLS executes on a cached (AUTO) breaker waiting up to
 * PATIENT_MS for a ticket. Exit 0 when every call ran and the cache let
 * none through on its own; 1 for a refused call, 2 for a cache grant. */
static int
child_calls(const char *path)
{
	cbc_cache_stats cs;
	cbc_exec_result res;
	cbc_error err;
	rig r;
	int code = 0;

	rig_open(&r, path, "bh", CBC_CACHE_AUTO, PATIENT_MS / 2);
	for (int i = 0; i < CALLS; i++) {
		/* Half the calls fail: a failure hands its ticket back too. */
		void *arg = (void *)(uintptr_t)(i % 2 == 0 ? 0 : 1);

		if (cbc_breaker_execute(r.b, counted_call, arg, &res, &err) != CBC_OK ||
		    !res.called)
			code = 1;
	}
	if (cbc_breaker_cache_stats(r.b, &cs, &err) == CBC_OK && cs.permitted != 0)
		code = 2;
	rig_close(&r);
	return code;
}

START_TEST(never_more_than_limit_in_flight_across_processes)
{
	cbd_harness *h = start("[circuit \"bh\"]\nmax_concurrent = 3\nfailure_threshold = 1000\n");
	pid_t pids[PROCS];
	cbc_snapshot s;
	int status;

	shared =
	    mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(shared != MAP_FAILED);
	memset(shared, 0, sizeof *shared);
	for (int i = 0; i < PROCS; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0)
			_exit(child_calls(h->socket_path));
	}
	for (int i = 0; i < PROCS; i++) {
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		ck_assert(WIFEXITED(status));
		ck_assert_msg(WEXITSTATUS(status) == 0, "child %d exited %d", i,
		    WEXITSTATUS(status));
	}
	/* Printed, not asserted: how many ran at once at most. */
	printf("bulkhead: %d calls in %d processes, at most %d at once (limit %d)\n", shared->calls,
	    PROCS, shared->peak, LIMIT);
	ck_assert_int_eq(shared->over, 0);
	ck_assert_int_le(shared->peak, LIMIT);
	ck_assert_int_ge(shared->peak, 1);
	ck_assert_int_eq(shared->calls, PROCS * CALLS);
	s = snap_of(h->socket_path, "bh");
	ck_assert_int_eq(s.in_flight, 0);
	ck_assert_int_eq(s.policy.max_concurrent, LIMIT);
	ck_assert_int_eq(s.policy.source.max_concurrent, CBC_SOURCE_CONFIG);
	ck_assert_int_eq(s.totals.successes + s.totals.failures, PROCS * CALLS);
	ck_assert_int_eq(s.totals.failures, PROCS * (CALLS / 2));
	ck_assert_int_eq(s.totals.rejected_concurrency, 0);
	ck_assert_int_eq(s.totals.rejected, 0);
	munmap(shared, sizeof *shared);
	stop();
}
END_TEST

/* ---------- the bulkhead's error, at once and after wait_ms ---------- */

/* A call that counts itself in *(int *)arg (when not NULL) and succeeds. */
static int
counted_call_ok_shim(void *arg)
{
	if (arg != NULL)
		++*(int *)arg;
	return 0;
}

static int
fallback_fn(void *arg, int64_t retry_after_ms, void *user)
{
	(void)arg;
	(void)retry_after_ms;
	(void)user;
	return 42;
}

START_TEST(bulkhead_full_is_its_own_error)
{
	cbd_harness *h = start("[circuit \"one\"]\nmax_concurrent = 1\n");
	cbc_exec_result res;
	cbc_permit held, p;
	cbc_snapshot s;
	cbc_error err;
	rig a, b, c;
	int calls = 0;

	rig_open(&a, h->socket_path, "one", CBC_CACHE_AUTO, 0);
	rig_open(&b, h->socket_path, "one", CBC_CACHE_OFF, 0);
	rig_open(&c, h->socket_path, "one", CBC_CACHE_OFF, 50);
	ck_assert_int_eq(cbc_breaker_acquire(a.b, &held, &err), CBC_OK);
	ck_assert(held.has_slot); /* the ticket */
	ck_assert_int_eq(held.state, CBC_STATE_CLOSED);
	/* Refused at once: the bulkhead's error, not the breaker's. */
	ck_assert_int_eq(cbc_breaker_acquire(b.b, &p, &err), CBC_EBULKHEAD);
	ck_assert_int_eq(err.status, CBC_EBULKHEAD);
	ck_assert_int_eq(p.reason, CBC_REASON_CONCURRENCY);
	ck_assert_int_eq(p.state, CBC_STATE_CLOSED);
	ck_assert_int_eq(p.in_flight, 1);
	ck_assert_int_eq(p.retry_after_ms, 0);
	ck_assert_ptr_nonnull(strstr(err.message, "bulkhead"));
	ck_assert_str_eq(cbc_strerror(CBC_EBULKHEAD), "bulkhead full: too many calls in flight");
	/* execute without a fallback: the call does not run. */
	ck_assert_int_eq(cbc_breaker_execute(b.b, counted_call_ok_shim, &calls, &res, &err),
	    CBC_EBULKHEAD);
	ck_assert(!res.called);
	ck_assert_int_eq(res.reason, CBC_REASON_CONCURRENCY);
	/* wait_ms passes with no ticket freed: the same error. */
	ck_assert_int_eq(cbc_breaker_acquire(c.b, &p, &err), CBC_EBULKHEAD);
	ck_assert_int_eq(p.reason, CBC_REASON_CONCURRENCY);
	ck_assert_int_eq(calls, 0);
	/* The holder hands it back: the next one gets it. */
	ck_assert_int_eq(cbc_breaker_report(a.b, &held, CBC_OUTCOME_SUCCESS, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_acquire(b.b, &p, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_report(b.b, &p, CBC_OUTCOME_IGNORE, &err), CBC_OK);
	s = snap_of(h->socket_path, "one");
	ck_assert_int_eq(s.in_flight, 0);
	ck_assert_int_eq(s.totals.rejected_concurrency, 3);
	ck_assert_int_eq(s.totals.rejected, 0);
	ck_assert_int_eq(s.totals.successes, 1);
	ck_assert_int_eq(s.totals.ignored, 1);
	ck_assert_int_eq(s.state, CBC_STATE_CLOSED);
	rig_close(&c);
	rig_close(&b);
	rig_close(&a);
	stop();
}
END_TEST

START_TEST(fallback_runs_for_a_full_bulkhead)
{
	cbd_harness *h = start("[circuit \"fb\"]\nmax_concurrent = 1\n");
	cbc_breaker_options o;
	cbc_exec_result res;
	cbc_permit held;
	cbc_error err;
	cbc_conn *conn;
	cbc_store *store;
	cbc_breaker *fb;
	rig a;

	rig_open(&a, h->socket_path, "fb", CBC_CACHE_OFF, 0);
	ck_assert_int_eq(cbc_breaker_acquire(a.b, &held, &err), CBC_OK);
	conn = cbc_conn_new(h->socket_path, &err);
	cbc_conn_set_timeouts(conn, PATIENT_MS, PATIENT_MS, NULL);
	store = cbc_store_new_remote(conn, &err);
	cbc_breaker_options_init(&o);
	o.name = "fb";
	o.store = store;
	o.fallback = fallback_fn;
	fb = cbc_breaker_new(&o, &err);
	ck_assert_ptr_nonnull(fb);
	ck_assert_int_eq(cbc_breaker_execute(fb, counted_call_ok_shim, NULL, &res, &err), CBC_OK);
	ck_assert(res.fallback_called);
	ck_assert_int_eq(res.result, 42);
	ck_assert_int_eq(res.reason, CBC_REASON_CONCURRENCY);
	ck_assert_int_eq(cbc_breaker_report(a.b, &held, CBC_OUTCOME_FAILURE, &err), CBC_OK);
	ck_assert_int_eq(snap_of(h->socket_path, "fb").in_flight, 0);
	cbc_breaker_free(fb);
	cbc_store_free(store);
	cbc_conn_free(conn);
	rig_close(&a);
	stop();
}
END_TEST

/* ---------- a killed holder's ticket goes to a waiting process ---------- */

/* Take the ticket, say so, then wait to be killed. */
static void
holder_child(const char *path, int ready_fd)
{
	cbc_permit p;
	rig r;

	rig_open(&r, path, "k", CBC_CACHE_OFF, 0);
	if (cbc_breaker_acquire(r.b, &p, NULL) != CBC_OK)
		_exit(3);
	if (write(ready_fd, "y", 1) != 1)
		_exit(4);
	for (;;)
		pause();
}

/* Wait up to PATIENT_MS for a ticket: exit 0 when granted. */
static void
waiter_child(const char *path)
{
	cbc_permit p;
	cbc_status st;
	rig r;

	rig_open(&r, path, "k", CBC_CACHE_AUTO, PATIENT_MS);
	st = cbc_breaker_acquire(r.b, &p, NULL);
	if (st == CBC_OK)
		cbc_breaker_report(r.b, &p, CBC_OUTCOME_SUCCESS, NULL);
	rig_close(&r);
	_exit(st == CBC_OK ? 0 : 10 + (int)st);
}

/* cbd's stats.waiters, read with a raw request. */
static long long
waiters(const cbd_harness *h)
{
	char reply[65536];
	int fd = harness_connect(h);
	const char *at;
	long long n = -1;

	ck_assert_int_ge(fd, 0);
	ck_assert(harness_request(fd, "{\"op\":\"stats\"}", reply, sizeof reply));
	close(fd);
	at = strstr(reply, "\"waiters\":");
	if (at != NULL)
		n = atoll(at + strlen("\"waiters\":"));
	return n;
}

START_TEST(killed_holder_frees_its_ticket_for_a_waiter)
{
	cbd_harness *h = start("[circuit \"k\"]\nmax_concurrent = 1\n");
	int ready[2], status;
	pid_t holder, waiter;
	long long deadline;
	cbc_snapshot s;
	char byte;

	ck_assert_int_eq(pipe(ready), 0);
	holder = fork();
	ck_assert_int_ge(holder, 0);
	if (holder == 0)
		holder_child(h->socket_path, ready[1]);
	ck_assert_int_eq(read(ready[0], &byte, 1), 1);
	waiter = fork();
	ck_assert_int_ge(waiter, 0);
	if (waiter == 0)
		waiter_child(h->socket_path);
	/* The waiter is queued in cbd (a settled counter, not a sleep). */
	deadline = harness_mono_ms() + PATIENT_MS;
	while (waiters(h) != 1 && harness_mono_ms() < deadline)
		harness_sleep_ms(5);
	ck_assert_int_eq(waiters(h), 1);
	kill(holder, SIGKILL);
	ck_assert_int_eq(waitpid(holder, &status, 0), holder);
	ck_assert_int_eq(waitpid(waiter, &status, 0), waiter);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	s = snap_of(h->socket_path, "k");
	ck_assert_int_eq(s.in_flight, 0);
	ck_assert_int_eq(s.totals.successes, 1);
	ck_assert_int_eq(s.totals.rejected_concurrency, 0);
	close(ready[0]);
	close(ready[1]);
	stop();
}
END_TEST

/* ---------- cbc_retry_execute and the retry budget ---------- */

static int
always_fails(void *arg, int64_t deadline_ms)
{
	(void)deadline_ms;
	++*(int *)arg;
	return 5;
}

static void
no_sleep(int64_t ms, void *user)
{
	(void)ms;
	(void)user;
}

START_TEST(retries_past_the_budget_are_refused_and_retry_stops)
{
	/* Over 10 s: at most max(1 * 10, first attempts * 0 %) = 10 retries. */
	cbd_harness *h = start("[circuit \"rb\"]\nretry_budget_percent = 0\n"
			       "retry_min_per_s = 1\nfailure_threshold = 1000\n");
	cbc_retry_options ro;
	cbc_retry_result res;
	cbc_cache_stats cs;
	cbc_snapshot s;
	cbc_error err;
	int calls = 0;
	rig r;

	rig_open(&r, h->socket_path, "rb", CBC_CACHE_AUTO, 0);
	cbc_retry_options_init(&ro);
	ro.max_attempts = 5;
	ro.base_ms = 0;
	ro.max_ms = 0;
	ro.sleep = no_sleep;
	/* Two runs: 2 first attempts, 8 retries granted. */
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(cbc_retry_execute(r.b, &ro, always_fails, &calls, &res, &err),
		    CBC_OK);
		ck_assert_int_eq(res.attempts, 5);
		ck_assert(!res.succeeded);
	}
	ck_assert_int_eq(calls, 10);
	/* The third: 1 first attempt, 2 retries, then the budget refuses. */
	ck_assert_int_eq(cbc_retry_execute(r.b, &ro, always_fails, &calls, &res, &err),
	    CBC_EBUDGET);
	ck_assert_int_eq(err.status, CBC_EBUDGET);
	ck_assert_int_eq(res.attempts, 3);
	ck_assert_int_eq(res.reason, CBC_REASON_RETRY_BUDGET);
	ck_assert_int_gt(res.retry_after_ms, 0);
	ck_assert_int_le(res.retry_after_ms, 10000);
	ck_assert_int_eq(calls, 13);
	/* A first attempt is never refused by the budget. */
	ck_assert_int_eq(cbc_retry_execute(r.b, &ro, always_fails, &calls, &res, &err),
	    CBC_EBUDGET);
	ck_assert_int_eq(res.attempts, 1);
	ck_assert_int_eq(calls, 14);
	/* Every decision went to cbd: the circuit has a budget. */
	ck_assert_int_eq(cbc_breaker_cache_stats(r.b, &cs, &err), CBC_OK);
	ck_assert_int_eq(cs.permitted, 0);
	s = snap_of(h->socket_path, "rb");
	ck_assert_int_eq(s.totals.retries, 10);
	ck_assert_int_eq(s.totals.rejected_retry, 2);
	ck_assert_int_eq(s.totals.failures, 14);
	ck_assert_int_eq(s.totals.rejected, 0);
	ck_assert_int_eq(s.totals.rejected_concurrency, 0);
	ck_assert_int_eq(s.policy.retry_budget_percent, 0);
	ck_assert_int_eq(s.policy.retry_min_per_s, 1);
	ck_assert_int_eq(s.in_flight, -1); /* no limit */
	rig_close(&r);
	stop();
}
END_TEST

/* ---------- timed-out attempts hand their tickets back ---------- */

/* A retry clock that moves 100 ms at every reading: with a 50 ms
 * timeout, every attempt runs past its deadline. */
static int64_t
leaping_clock(void *user)
{
	return (*(int64_t *)user += 100);
}

START_TEST(timed_out_attempts_hand_their_tickets_back)
{
	cbd_harness *h = start("[circuit \"t\"]\nmax_concurrent = 1\nfailure_threshold = 1000\n");
	cbc_retry_options ro;
	cbc_retry_result res;
	int64_t now = 0;
	cbc_snapshot s;
	cbc_error err;
	int calls = 0;
	rig r;

	/* One ticket: each attempt after the first gets it only if the one
	 * before handed it back. */
	rig_open(&r, h->socket_path, "t", CBC_CACHE_AUTO, 0);
	cbc_retry_options_init(&ro);
	ro.max_attempts = 4;
	ro.timeout_ms = 50;
	ro.base_ms = 0;
	ro.max_ms = 0;
	ro.sleep = no_sleep;
	ro.clock = leaping_clock;
	ro.user = &now;
	ck_assert_int_eq(cbc_retry_execute(r.b, &ro, always_fails, &calls, &res, &err),
	    CBC_ETIMEOUT);
	ck_assert_int_eq(res.attempts, 4);
	ck_assert(res.timed_out);
	ck_assert_int_eq(calls, 4);
	s = snap_of(h->socket_path, "t");
	ck_assert_int_eq(s.in_flight, 0);
	ck_assert_int_eq(s.totals.failures, 4);
	ck_assert_int_eq(s.totals.retries, 3);
	ck_assert_int_eq(s.totals.rejected_concurrency, 0);
	ck_assert_int_eq(s.totals.rejected_retry, 0);
	rig_close(&r);
	stop();
}
END_TEST

/* ---------- wait_ms beyond the I/O timeout ---------- */

START_TEST(a_wait_longer_than_the_io_timeout_is_answered)
{
	cbd_harness *h = start("[circuit \"w\"]\nmax_concurrent = 1\n");
	cbc_breaker_options o;
	cbc_permit held, p;
	cbc_error err;
	cbc_conn *conn;
	cbc_store *store;
	cbc_breaker *b;
	rig a;

	rig_open(&a, h->socket_path, "w", CBC_CACHE_OFF, 0);
	ck_assert_int_eq(cbc_breaker_acquire(a.b, &held, &err), CBC_OK);
	/* I/O timeout 1 s, wait 1.5 s: cbd answers after the wait, within
	 * the timeout the wait extends (a second to spare). */
	conn = cbc_conn_new(h->socket_path, &err);
	ck_assert_int_eq(cbc_conn_set_timeouts(conn, 1000, 1000, &err), CBC_OK);
	store = cbc_store_new_remote(conn, &err);
	cbc_breaker_options_init(&o);
	o.name = "w";
	o.store = store;
	o.store_policy = CBC_POLICY_REJECT;
	o.cache = CBC_CACHE_OFF;
	o.wait_ms = 1500;
	b = cbc_breaker_new(&o, &err);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p, &err), CBC_EBULKHEAD);
	ck_assert_int_eq(p.reason, CBC_REASON_CONCURRENCY);
	ck_assert_int_eq(cbc_breaker_report(a.b, &held, CBC_OUTCOME_SUCCESS, &err), CBC_OK);
	ck_assert_int_eq(snap_of(h->socket_path, "w").totals.rejected_concurrency, 1);
	cbc_breaker_free(b);
	cbc_store_free(store);
	cbc_conn_free(conn);
	rig_close(&a);
	stop();
}
END_TEST

/* ---------- a reload that adds a limit ends the cache's grants ---------- */

START_TEST(cache_asks_once_a_reload_adds_a_limit)
{
	cbd_harness *h = start("[circuit \"r\"]\nfailure_threshold = 1000\n");
	cbc_cache_stats before, cs;
	cbc_exec_result res;
	long long deadline;
	cbc_snapshot s;
	cbc_error err;
	rig r;
	FILE *f;

	rig_open(&r, h->socket_path, "r", CBC_CACHE_ON, 0);
	/* Until the watch is live and the circuit primed, calls ask. */
	deadline = harness_mono_ms() + PATIENT_MS;
	do {
		ck_assert_int_eq(cbc_breaker_execute(r.b, counted_call_ok_shim, NULL, &res, &err),
		    CBC_OK);
		ck_assert_int_eq(cbc_breaker_cache_stats(r.b, &cs, &err), CBC_OK);
	} while (cs.permitted == 0 && harness_mono_ms() < deadline && usleep(2000) == 0);
	ck_assert_uint_gt(cs.permitted, 0);
	f = fopen(h->config_path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[circuit \"r\"]\nfailure_threshold = 1000\nmax_concurrent = 2\n");
	fclose(f);
	ck_assert_int_eq(kill(h->pid, SIGHUP), 0);
	/* The policy event reaches the cache. */
	deadline = harness_mono_ms() + PATIENT_MS;
	do {
		ck_assert_int_eq(cbc_breaker_cache_stats(r.b, &before, &err), CBC_OK);
	} while (before.events <= cs.events && harness_mono_ms() < deadline && usleep(2000) == 0);
	ck_assert_uint_gt(before.events, cs.events);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(cbc_breaker_execute(r.b, counted_call_ok_shim, NULL, &res, &err),
		    CBC_OK);
	ck_assert_int_eq(cbc_breaker_cache_stats(r.b, &cs, &err), CBC_OK);
	ck_assert_uint_eq(cs.permitted, before.permitted);
	ck_assert_uint_eq(cs.asked, before.asked + 5);
	s = snap_of(h->socket_path, "r");
	ck_assert_int_eq(s.in_flight, 0);
	ck_assert_int_eq(s.policy.max_concurrent, 2);
	rig_close(&r);
	stop();
}
END_TEST

/* ---------- allow_ex on a connection ---------- */

START_TEST(allow_ex_sends_wait_and_retry)
{
	cbd_harness *h = start("[circuit \"x\"]\nmax_concurrent = 1\n");
	cbc_allow_options ao = { .wait_ms = 0, .retry = true };
	cbc_allow_result a, b;
	cbc_snapshot s;
	cbc_error err;
	cbc_conn *c = cbc_conn_new(h->socket_path, &err);

	cbc_conn_set_timeouts(c, PATIENT_MS, PATIENT_MS, NULL);
	ck_assert_int_eq(cbc_allow_ex(c, "x", NULL, &ao, &a, &err), CBC_OK);
	ck_assert(a.allowed);
	ck_assert(a.has_permit);
	ck_assert_int_gt(a.expires_at, 0);
	ck_assert_int_eq(a.reason, CBC_REASON_NONE);
	ao.retry = false;
	ao.wait_ms = 20;
	ck_assert_int_eq(cbc_allow_ex(c, "x", NULL, &ao, &b, &err), CBC_OK);
	ck_assert(!b.allowed);
	ck_assert_int_eq(b.reason, CBC_REASON_CONCURRENCY);
	ck_assert_int_eq(b.in_flight, 1);
	ao.wait_ms = CBC_WAIT_MAX_MS + 1;
	ck_assert_int_eq(cbc_allow_ex(c, "x", NULL, &ao, &b, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "wait_ms"));
	ck_assert_int_eq(cbc_record(c, "x", CBC_OUTCOME_SUCCESS, a.permit, NULL, &s, &err), CBC_OK);
	ck_assert_int_eq(s.in_flight, 0);
	ck_assert_int_eq(s.totals.retries, 1);
	ck_assert_int_eq(s.totals.rejected_concurrency, 1);
	ck_assert_str_eq(cbc_reason_name(CBC_REASON_RETRY_BUDGET), "retry_budget");
	cbc_conn_free(c);
	stop();
}
END_TEST

START_TEST(breaker_options_check_wait_ms)
{
	cbc_breaker_options o;
	cbc_error err;

	cbc_breaker_options_init(&o);
	o.wait_ms = -1;
	ck_assert_ptr_null(cbc_breaker_new(&o, &err));
	ck_assert_int_eq(err.status, CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "wait_ms"));
	o.wait_ms = CBC_WAIT_MAX_MS + 1;
	ck_assert_ptr_null(cbc_breaker_new(&o, &err));
	o.wait_ms = 0;
	o.max_concurrent = 1000001;
	ck_assert_ptr_null(cbc_breaker_new(&o, &err));
	ck_assert_ptr_nonnull(strstr(err.message, "max_concurrent"));
}
END_TEST

/* ---------- threads sharing one breaker wait without blocking ---------- */

#define THREADS 6
#define THREAD_CALLS 10

typedef struct thread_arg {
	cbc_breaker *b;
	int refused;
} thread_arg;

static void *
thread_calls(void *arg)
{
	thread_arg *t = arg;
	cbc_exec_result res;

	for (int i = 0; i < THREAD_CALLS; i++) {
		if (cbc_breaker_execute(t->b, counted_call, NULL, &res, NULL) != CBC_OK ||
		    !res.called)
			t->refused++;
	}
	return NULL;
}

START_TEST(threads_sharing_a_breaker_wait_for_tickets)
{
	cbd_harness *h = start("[circuit \"bh\"]\nmax_concurrent = 3\n");
	pthread_t th[THREADS];
	thread_arg args[THREADS];
	cbc_snapshot s;
	rig r;

	shared =
	    mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(shared != MAP_FAILED);
	memset(shared, 0, sizeof *shared);
	/* One breaker, one store connection, six threads: the waiting
	 * allows go on the breaker's own connections, so the reports that
	 * hand tickets back are never stuck behind them. */
	rig_open(&r, h->socket_path, "bh", CBC_CACHE_AUTO, PATIENT_MS / 2);
	for (int i = 0; i < THREADS; i++) {
		args[i] = (thread_arg){ .b = r.b };
		ck_assert_int_eq(pthread_create(&th[i], NULL, thread_calls, &args[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		ck_assert_int_eq(args[i].refused, 0);
	}
	ck_assert_int_eq(shared->over, 0);
	ck_assert_int_le(shared->peak, LIMIT);
	ck_assert_int_eq(shared->calls, THREADS * THREAD_CALLS);
	s = snap_of(h->socket_path, "bh");
	ck_assert_int_eq(s.in_flight, 0);
	ck_assert_int_eq(s.totals.successes, THREADS * THREAD_CALLS);
	ck_assert_int_eq(s.totals.rejected_concurrency, 0);
	rig_close(&r);
	munmap(shared, sizeof *shared);
	stop();
}
END_TEST

/* ---------- every refusal says why ---------- */

START_TEST(refusals_say_why)
{
	cbd_harness *h = start("[circuit \"why\"]\nbreak_ms = 600000\n");
	cbc_permit p;
	cbc_error err;
	long long deadline;
	cbc_status st;
	rig u, c;

	rig_open(&u, h->socket_path, "why", CBC_CACHE_OFF, 0);
	rig_open(&c, h->socket_path, "why", CBC_CACHE_ON, 0);
	ck_assert_int_eq(cbc_breaker_acquire(c.b, &p, &err), CBC_OK); /* primes the cache */
	ck_assert_int_eq(cbc_breaker_report(c.b, &p, CBC_OUTCOME_SUCCESS, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_force_open(u.b, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_acquire(u.b, &p, &err), CBC_EOPEN);
	ck_assert_int_eq(p.reason, CBC_REASON_OPEN);
	ck_assert_int_eq(cbc_hold(u.conn, "why", CBC_STATE_OPEN, 0, "test", NULL, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_acquire(u.b, &p, &err), CBC_EOPEN);
	ck_assert_int_eq(p.reason, CBC_REASON_HELD);
	/* The cache refuses on its own once the hold's event came. */
	deadline = harness_mono_ms() + PATIENT_MS;
	do {
		st = cbc_breaker_acquire(c.b, &p, &err);
		if (st == CBC_OK)
			cbc_breaker_report(c.b, &p, CBC_OUTCOME_IGNORE, &err);
	} while ((st != CBC_EOPEN || p.reason != CBC_REASON_HELD) && harness_mono_ms() < deadline &&
	    usleep(2000) == 0);
	ck_assert_int_eq(st, CBC_EOPEN);
	ck_assert_int_eq(p.reason, CBC_REASON_HELD);
	ck_assert_int_eq(cbc_breaker_force_half_open(u.b, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_acquire(u.b, &p, &err), CBC_OK); /* the trial */
	/* The cache may refuse as held until the release's event comes;
	 * then it asks cbd, which has no trial slot left. */
	deadline = harness_mono_ms() + PATIENT_MS;
	do
		st = cbc_breaker_acquire(c.b, &p, &err);
	while (st == CBC_EOPEN && p.reason == CBC_REASON_HELD && harness_mono_ms() < deadline &&
	    usleep(2000) == 0);
	ck_assert_int_eq(st, CBC_EOPEN);
	ck_assert_int_eq(p.reason, CBC_REASON_HALF_OPEN_FULL);
	rig_close(&c);
	rig_close(&u);
	stop();
}
END_TEST

/* ---------- a private (in-process) store ---------- */

START_TEST(private_store_applies_both_rules_in_process)
{
	cbc_breaker_options o;
	cbc_retry_options ro;
	cbc_retry_result res;
	cbc_permit p1, p2;
	cbc_breaker *b;
	cbc_error err;
	int calls = 0;

	cbc_breaker_options_init(&o);
	o.max_concurrent = 1;
	o.retry_budget_percent = 1; /* max(1 * 10, first attempts / 100): 10 */
	o.retry_min_per_s = 1;
	o.failure_threshold = 1000;
	b = cbc_breaker_new(&o, &err);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p1, &err), CBC_OK);
	ck_assert(p1.has_slot);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p2, &err), CBC_EBULKHEAD);
	ck_assert_int_eq(p2.reason, CBC_REASON_CONCURRENCY);
	ck_assert_int_eq(p2.in_flight, 1);
	ck_assert_int_eq(cbc_breaker_report(b, &p1, CBC_OUTCOME_FAILURE, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p2, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_report(b, &p2, CBC_OUTCOME_IGNORE, &err), CBC_OK);
	/* 1 first attempt and 10 retries, then the budget refuses. */
	cbc_retry_options_init(&ro);
	ro.max_attempts = 20;
	ro.base_ms = 0;
	ro.max_ms = 0;
	ro.sleep = no_sleep;
	ck_assert_int_eq(cbc_retry_execute(b, &ro, always_fails, &calls, &res, &err), CBC_EBUDGET);
	ck_assert_int_eq(res.attempts, 11);
	ck_assert_int_eq(calls, 11);
	ck_assert_int_eq(res.reason, CBC_REASON_RETRY_BUDGET);
	cbc_breaker_free(b);
}
END_TEST

static Suite *
bulkhead_suite(void)
{
	Suite *s = suite_create("bulkhead and retry budget (cbd)");
	TCase *tc = tcase_create("bulkhead");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, breaker_options_check_wait_ms);
	tcase_add_test(tc, private_store_applies_both_rules_in_process);
	tcase_add_test(tc, refusals_say_why);
	tcase_add_test(tc, threads_sharing_a_breaker_wait_for_tickets);
	tcase_add_test(tc, allow_ex_sends_wait_and_retry);
	tcase_add_test(tc, never_more_than_limit_in_flight_across_processes);
	tcase_add_test(tc, bulkhead_full_is_its_own_error);
	tcase_add_test(tc, fallback_runs_for_a_full_bulkhead);
	tcase_add_test(tc, killed_holder_frees_its_ticket_for_a_waiter);
	tcase_add_test(tc, retries_past_the_budget_are_refused_and_retry_stops);
	tcase_add_test(tc, timed_out_attempts_hand_their_tickets_back);
	tcase_add_test(tc, a_wait_longer_than_the_io_timeout_is_answered);
	tcase_add_test(tc, cache_asks_once_a_reload_adds_a_limit);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	int status;

	signal(SIGPIPE, SIG_IGN);
	if (getenv("CBD_BINARY") == NULL) {
		fprintf(stderr, "CBD_BINARY is not set: run through make check\n");
		return 77;
	}
	status = check_run(bulkhead_suite(), NULL);
	daemon_cleanup();
	return status;
}
