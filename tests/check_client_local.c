/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_client_local.c — libcbclient without a real cbd: the store
 * contract on the local and resilient(local) stores, the breaker API in
 * virtual time, the resilient policies over a store that fails on demand,
 * and the connection layer against a scripted fake daemon.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbclient.h"
#include "check-run.h"
#include "client-test.h"

/* ---------- helpers ---------- */

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The virtual clock every breaker in this file uses. */
static int64_t vnow = INT64_C(1700000000000);

static int64_t
vclock(void *user)
{
	(void)user;
	return vnow;
}

/* Transitions seen by on_state_change. */
typedef struct recorder {
	int count;
	cbc_state prev[16], next[16];
	bool had_error[16];
	int error[16];
	int store_errors;
	cbc_store_op last_op;
	cbc_status last_status;
} recorder;

static void
record_change(cbc_state prev, cbc_state next, const int *error, void *user)
{
	recorder *r = user;

	if (r->count < 16) {
		r->prev[r->count] = prev;
		r->next[r->count] = next;
		r->had_error[r->count] = error != NULL;
		r->error[r->count] = error != NULL ? *error : 0;
	}
	r->count++;
}

static void
record_store_error(const cbc_error *error, cbc_store_op op, void *user)
{
	recorder *r = user;

	r->store_errors++;
	r->last_op = op;
	r->last_status = error->status;
}

/* Breaker options on `store` (NULL: private) with small numbers. */
static cbc_breaker_options
small_options(const char *name, cbc_store *store, recorder *rec)
{
	cbc_breaker_options o;

	cbc_breaker_options_init(&o);
	o.name = name;
	o.failure_threshold = 3;
	o.success_threshold = 2;
	o.break_ms = 1000;
	o.half_open_max = 1;
	o.store = store;
	o.clock = vclock;
	o.on_state_change = record_change;
	o.on_store_error = record_store_error;
	o.user = rec;
	return o;
}

static cbc_breaker *
breaker_new_ok(const cbc_breaker_options *o)
{
	cbc_error err;
	cbc_breaker *b = cbc_breaker_new(o, &err);

	ck_assert_msg(b != NULL, "breaker_new: %s", err.message);
	return b;
}

/* ---------- statuses and names ---------- */

START_TEST(every_status_has_a_string)
{
	for (int i = 0; i < CBC_STATUS_COUNT; i++) {
		const char *s = cbc_strerror((cbc_status)i);

		ck_assert_ptr_nonnull(s);
		ck_assert_str_ne(s, "unknown status");
		ck_assert_int_gt((int)strlen(s), 0);
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(s, cbc_strerror((cbc_status)j));
	}
	ck_assert_str_eq(cbc_strerror((cbc_status)CBC_STATUS_COUNT), "unknown status");
	ck_assert_str_eq(cbc_strerror((cbc_status)-1), "unknown status");
	for (int i = 0; i < CBC_STORE_OP_COUNT; i++)
		ck_assert_str_ne(cbc_store_op_name((cbc_store_op)i), "unknown");
	ck_assert_str_eq(cbc_store_op_name(CBC_OP_RECORD_FAILURE), "record_failure");
}
END_TEST

/* The header's version, the loaded library's and the package's agree. */
START_TEST(versions_agree)
{
	char number[32];

	ck_assert_str_eq(cbc_version(), PACKAGE_VERSION);
	ck_assert_int_eq(cbc_version_number(), CBC_VERSION);
	snprintf(number, sizeof number, "%d.%d.%d", CBC_VERSION_MAJOR, CBC_VERSION_MINOR,
	    CBC_VERSION_PATCH);
	ck_assert_str_eq(number, PACKAGE_VERSION);
	ck_assert_int_eq(CBC_PROTOCOL, 3);
}
END_TEST

START_TEST(state_names_round_trip)
{
	cbc_state s;

	for (int i = 0; i <= CBC_STATE_HALF_OPEN; i++) {
		ck_assert(cbc_state_parse(cbc_state_name((cbc_state)i), &s));
		ck_assert_int_eq(s, i);
	}
	ck_assert_str_eq(cbc_state_name(CBC_STATE_HALF_OPEN), "half_open");
	ck_assert(!cbc_state_parse("half-open", &s));
	ck_assert(!cbc_state_parse(NULL, &s));
}
END_TEST

/* ---------- breaker option validation ---------- */

typedef struct option_case {
	const char *field;
	void (*mutate)(cbc_breaker_options *o);
} option_case;

static cbc_store *shared_store_for_options;

static void
m_failure(cbc_breaker_options *o)
{
	o->failure_threshold = -1;
}
static void
m_failure_big(cbc_breaker_options *o)
{
	o->failure_threshold = 1000000001;
}
static void
m_success(cbc_breaker_options *o)
{
	o->success_threshold = -5;
}
static void
m_break(cbc_breaker_options *o)
{
	o->break_ms = (INT64_C(1) << 53) + 1;
}
static void
m_half_open(cbc_breaker_options *o)
{
	o->half_open_max = -1;
}
static void
m_ttl(cbc_breaker_options *o)
{
	o->slot_ttl_ms = -2;
}
static void
m_gap(cbc_breaker_options *o)
{
	o->max_gap_ms = -3;
}
static void
m_policy(cbc_breaker_options *o)
{
	o->store_policy = (cbc_store_policy)9;
}
static void
m_backoff(cbc_breaker_options *o)
{
	o->timeout_backoff_ms = 3600001;
}
static void
m_name_ctl(cbc_breaker_options *o)
{
	o->name = "bad\nname";
}
static void
m_name_empty(cbc_breaker_options *o)
{
	o->name = "";
}
static void
m_store_no_name(cbc_breaker_options *o)
{
	o->store = shared_store_for_options;
	o->name = NULL;
}

static void
m_trip(cbc_breaker_options *o)
{
	o->trip = (cbc_trip)9;
}
static void
m_window(cbc_breaker_options *o)
{
	o->window = (cbc_window)7;
}
static void
m_window_size_count(cbc_breaker_options *o)
{
	o->window_size = 10001;
}
static void
m_window_size_time(cbc_breaker_options *o)
{
	o->window = CBC_WINDOW_TIME;
	o->window_size = 999;
}
static void
m_minimum_calls(cbc_breaker_options *o)
{
	o->minimum_calls = -1;
}
static void
m_failure_rate(cbc_breaker_options *o)
{
	o->failure_rate = 101;
}
static void
m_slow_call_ms(cbc_breaker_options *o)
{
	o->slow_call_ms = -1;
}
static void
m_slow_call_rate(cbc_breaker_options *o)
{
	o->slow_call_rate = 101;
}
static void
m_min_reporters(cbc_breaker_options *o)
{
	o->min_reporters = 65;
}
static void
m_reporter_window(cbc_breaker_options *o)
{
	o->reporter_window_ms = -1;
}
static void
m_break_backoff(cbc_breaker_options *o)
{
	o->break_backoff = 11;
}
static void
m_break_max(cbc_breaker_options *o)
{
	o->break_ms = 5000;
	o->break_max_ms = 4999;
}
static void
m_preset_chars(cbc_breaker_options *o)
{
	o->preset = "not a name!";
}
static void
m_preset_unknown_locally(cbc_breaker_options *o)
{
	o->preset = "from-cbd-config"; /* a private store knows built-ins only */
}
static bool
any_filter(int result, void *user)
{
	(void)result;
	(void)user;
	return true;
}
static void
m_classify_and_filter(cbc_breaker_options *o)
{
	o->classify = cbc_classify_http;
	o->error_filter = any_filter;
}

static const option_case option_cases[] = {
	{ "trip", m_trip },
	{ "window must be", m_window },
	{ "window_size", m_window_size_count },
	{ "window_size must be from 1000", m_window_size_time },
	{ "minimum_calls", m_minimum_calls },
	{ "failure_rate", m_failure_rate },
	{ "slow_call_ms", m_slow_call_ms },
	{ "slow_call_rate", m_slow_call_rate },
	{ "min_reporters", m_min_reporters },
	{ "reporter_window_ms", m_reporter_window },
	{ "break_backoff", m_break_backoff },
	{ "break_max_ms", m_break_max },
	{ "preset", m_preset_chars },
	{ "preset", m_preset_unknown_locally },
	{ "classify and error_filter", m_classify_and_filter },
	{ "failure_threshold", m_failure },
	{ "failure_threshold", m_failure_big },
	{ "success_threshold", m_success },
	{ "break_ms", m_break },
	{ "half_open_max", m_half_open },
	{ "slot_ttl_ms", m_ttl },
	{ "max_gap_ms", m_gap },
	{ "store_policy", m_policy },
	{ "timeout_backoff_ms", m_backoff },
	{ "name", m_name_ctl },
	{ "name", m_name_empty },
	{ "name is required when a store is given", m_store_no_name },
};

START_TEST(invalid_options_are_refused_naming_the_option)
{
	const option_case *c = &option_cases[_i];
	cbc_breaker_options o;
	cbc_error err;

	shared_store_for_options = cbc_store_new_local(0, NULL);
	ck_assert_ptr_nonnull(shared_store_for_options);
	cbc_breaker_options_init(&o);
	o.name = "opts";
	c->mutate(&o);
	memset(&err, 0, sizeof err);
	ck_assert_ptr_null(cbc_breaker_new(&o, &err));
	ck_assert_int_eq(err.status, CBC_EINVAL);
	ck_assert_msg(strstr(err.message, c->field) != NULL, "message \"%s\" does not name %s",
	    err.message, c->field);
	cbc_store_free(shared_store_for_options);
}
END_TEST

START_TEST(valid_options_are_accepted)
{
	cbc_breaker_options o;
	cbc_breaker *b;
	cbc_error err;

	/* All zero: every policy member from the store's defaults, no name. */
	cbc_breaker_options_init(&o);
	b = cbc_breaker_new(&o, &err);
	ck_assert_msg(b != NULL, "%s", err.message);
	ck_assert_str_eq(cbc_breaker_name(b), "default");
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	cbc_breaker_free(b);
	o.name = "edge";
	o.failure_threshold = 1000000000;
	o.break_ms = INT64_C(1) << 53;
	o.timeout_backoff_ms = 0;
	b = cbc_breaker_new(&o, &err);
	ck_assert_msg(b != NULL, "%s", err.message);
	cbc_breaker_free(b);
	ck_assert_ptr_null(cbc_breaker_new(NULL, &err));
	ck_assert_int_eq(err.status, CBC_EINVAL);
}
END_TEST

START_TEST(store_arguments_are_checked)
{
	cbc_store *s = cbc_store_new_local(0, NULL);
	char long_name[300];
	cbc_snapshot snap;
	cbc_ctx ctx;
	cbc_error err;

	memset(long_name, 'a', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	ck_assert_int_eq(cbc_store_get(s, "", NULL, &snap, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "name"));
	ck_assert_int_eq(cbc_store_get(s, long_name, NULL, &snap, &err), CBC_EINVAL);
	ck_assert_int_eq(cbc_store_get(s, "a\x01", NULL, &snap, &err), CBC_EINVAL);
	ck_assert_int_eq(cbc_store_get(s, NULL, NULL, &snap, &err), CBC_EINVAL);
	memset(&ctx, 0, sizeof ctx);
	ctx.break_ms = -1;
	ck_assert_int_eq(cbc_store_record_failure(s, "x", &ctx, &snap, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "ctx.break_ms"));
	ck_assert_int_eq(cbc_store_set_state(s, "x", (cbc_state)5, NULL, &snap, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "state"));
	ck_assert_int_eq(cbc_store_release_slot(s, "x", NULL, NULL, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "token"));
	/* A valid call clears err. */
	ck_assert_int_eq(cbc_store_get(s, "x", NULL, &snap, &err), CBC_OK);
	ck_assert_int_eq(err.status, CBC_OK);
	ck_assert_str_eq(snap.name, "x");
	cbc_store_free(s);
}
END_TEST

/* ---------- the breaker in virtual time ---------- */

START_TEST(breaker_trips_then_fails_fast_with_retry_after)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("trip", NULL, &rec);
	cbc_breaker *b = breaker_new_ok(&o);
	cbc_exec_result res;
	cbc_error err;
	int calls = 0;

	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(cbc_breaker_execute(b, client_call_fail, &calls, &res, &err),
		    CBC_OK);
		ck_assert(res.called);
		ck_assert(res.counted_failure);
		ck_assert_int_eq(res.result, CLIENT_CALL_ERROR);
	}
	ck_assert_int_eq(calls, 3);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	ck_assert_int_eq(rec.count, 1);
	ck_assert_int_eq(rec.prev[0], CBC_STATE_CLOSED);
	ck_assert_int_eq(rec.next[0], CBC_STATE_OPEN);
	ck_assert(rec.had_error[0]);
	ck_assert_int_eq(rec.error[0], 7);
	vnow += 400;
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, &err), CBC_EOPEN);
	ck_assert(!res.called);
	ck_assert_int_eq(calls, 3);
	ck_assert_int_eq(res.retry_after_ms, 600);
	ck_assert_int_eq(err.status, CBC_EOPEN);
	ck_assert_ptr_nonnull(strstr(err.message, "trip"));
	ck_assert_int_eq(rec.count, 1);
	cbc_breaker_free(b);
}
END_TEST

static int
fallback_42(void *arg, int64_t retry_after_ms, void *user)
{
	(void)user;
	*(int64_t *)arg = retry_after_ms;
	return 42;
}

START_TEST(fallback_runs_when_open)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("fb", NULL, &rec);
	cbc_breaker *b;
	cbc_exec_result res;
	int64_t seen_retry = -1;

	o.fallback = fallback_42;
	b = breaker_new_ok(&o);
	ck_assert_int_eq(cbc_breaker_force_open(b, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &seen_retry, &res, NULL), CBC_OK);
	ck_assert(!res.called);
	ck_assert(res.fallback_called);
	ck_assert_int_eq(res.result, 42);
	ck_assert_int_eq(seen_retry, 1000);
	ck_assert_int_eq(res.retry_after_ms, 1000);
	cbc_breaker_free(b);
}
END_TEST

/* Only result 2 is the dependency's fault. */
static bool
only_two(int result, void *user)
{
	(void)user;
	return result == 2;
}

static int
return_arg(void *arg)
{
	return *(int *)arg;
}

START_TEST(error_filter_decides_what_counts)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("filter", NULL, &rec);
	cbc_breaker *b;
	cbc_exec_result res;
	int one = 1, two = 2;

	o.error_filter = only_two;
	b = breaker_new_ok(&o);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(cbc_breaker_execute(b, return_arg, &one, &res, NULL), CBC_OK);
		ck_assert(!res.counted_failure);
		ck_assert_int_eq(res.result, 1);
	}
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	for (int i = 0; i < 3; i++)
		cbc_breaker_execute(b, return_arg, &two, &res, NULL);
	ck_assert(res.counted_failure);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	cbc_breaker_free(b);
}
END_TEST

/* The trial call tries to get a second permit from another breaker on
 * the same circuit: with half_open_max 1 it must be refused. */
typedef struct trial_probe {
	cbc_breaker *other;
	cbc_status other_status;
	cbc_state other_state;
} trial_probe;

static int
trial_call(void *arg)
{
	trial_probe *t = arg;
	cbc_permit p;

	t->other_status = cbc_breaker_acquire(t->other, &p, NULL);
	t->other_state = p.state;
	if (t->other_status == CBC_OK)
		cbc_breaker_report(t->other, &p, CBC_OUTCOME_IGNORE, NULL);
	return 0;
}

START_TEST(half_open_reserves_a_slot_for_the_trial)
{
	recorder rec = { 0 }, rec2 = { 0 };
	cbc_store *store = cbc_store_new_local(0, NULL);
	cbc_breaker_options o = small_options("ho", store, &rec);
	cbc_breaker_options o2 = small_options("ho", store, &rec2);
	cbc_breaker *b = breaker_new_ok(&o), *b2 = breaker_new_ok(&o2);
	trial_probe t = { .other = b2 };
	cbc_exec_result res;

	ck_assert_int_eq(cbc_breaker_force_open(b, NULL), CBC_OK);
	vnow += 1000;
	ck_assert_int_eq(cbc_breaker_execute(b, trial_call, &t, &res, NULL), CBC_OK);
	ck_assert(res.called);
	ck_assert_int_eq(t.other_status, CBC_EOPEN);
	ck_assert_int_eq(t.other_state, CBC_STATE_HALF_OPEN);
	/* The slot was released after the trial: the next trial runs. */
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_HALF_OPEN);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, NULL, &res, NULL), CBC_OK);
	ck_assert(res.called);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	/* closed->open (forced), open->half_open, half_open->closed: once each. */
	ck_assert_int_eq(rec.count, 3);
	ck_assert_int_eq(rec.next[0], CBC_STATE_OPEN);
	ck_assert_int_eq(rec.prev[1], CBC_STATE_OPEN);
	ck_assert_int_eq(rec.next[1], CBC_STATE_HALF_OPEN);
	ck_assert_int_eq(rec.prev[2], CBC_STATE_HALF_OPEN);
	ck_assert_int_eq(rec.next[2], CBC_STATE_CLOSED);
	ck_assert(!rec.had_error[2]);
	cbc_breaker_free(b);
	cbc_breaker_free(b2);
	cbc_store_free(store);
}
END_TEST

START_TEST(half_open_failure_reopens)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("reopen", NULL, &rec);
	cbc_breaker *b = breaker_new_ok(&o);
	cbc_exec_result res;

	for (int i = 0; i < 3; i++)
		cbc_breaker_execute(b, client_call_fail, NULL, &res, NULL);
	vnow += 1000;
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_fail, NULL, &res, NULL), CBC_OK);
	ck_assert(res.called);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, NULL, &res, NULL), CBC_EOPEN);
	ck_assert_int_eq(res.retry_after_ms, 1000);
	ck_assert_int_eq(rec.count, 3);
	ck_assert_int_eq(rec.next[2], CBC_STATE_OPEN);
	ck_assert(rec.had_error[2]);
	cbc_breaker_free(b);
}
END_TEST

START_TEST(half_open_max_bounds_concurrent_permits)
{
	recorder rec = { 0 };
	cbc_store *store = cbc_store_new_local(0, NULL);
	cbc_breaker_options o = small_options("hom", store, &rec);
	cbc_breaker *b;
	cbc_permit p1, p2, p3;
	cbc_error err;

	o.half_open_max = 2;
	o.success_threshold = 10;
	b = breaker_new_ok(&o);
	ck_assert_int_eq(cbc_breaker_force_half_open(b, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p1, NULL), CBC_OK);
	ck_assert(p1.has_slot);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p2, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p3, &err), CBC_EOPEN);
	ck_assert_int_eq(p3.state, CBC_STATE_HALF_OPEN);
	ck_assert_int_gt(p3.retry_after_ms, 0);
	ck_assert_int_eq(cbc_breaker_report(b, &p1, CBC_OUTCOME_SUCCESS, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p3, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_report(b, &p2, CBC_OUTCOME_IGNORE, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_report(b, &p3, CBC_OUTCOME_IGNORE, NULL), CBC_OK);
	cbc_breaker_free(b);
	cbc_store_free(store);
}
END_TEST

START_TEST(two_step_form)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("steps", NULL, &rec);
	cbc_breaker *b = breaker_new_ok(&o);
	cbc_permit p;
	cbc_error err;

	memset(&p, 0, sizeof p);
	ck_assert_int_eq(cbc_breaker_report(b, &p, CBC_OUTCOME_SUCCESS, &err), CBC_ESTATE);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(cbc_breaker_acquire(b, &p, NULL), CBC_OK);
		ck_assert(p.granted);
		ck_assert_int_eq(p.state, CBC_STATE_CLOSED);
		/* ignore never counts */
		ck_assert_int_eq(cbc_breaker_report(b, &p, CBC_OUTCOME_IGNORE, NULL), CBC_OK);
	}
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(cbc_breaker_acquire(b, &p, NULL), CBC_OK);
		ck_assert_int_eq(cbc_breaker_report(b, &p, CBC_OUTCOME_FAILURE, NULL), CBC_OK);
	}
	ck_assert_int_eq(cbc_breaker_report(b, &p, CBC_OUTCOME_FAILURE, &err), CBC_ESTATE);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	ck_assert_int_eq(cbc_breaker_acquire(b, &p, &err), CBC_EOPEN);
	ck_assert(!p.granted);
	ck_assert_int_eq(p.retry_after_ms, 1000);
	ck_assert_int_eq(cbc_breaker_report(b, &p, CBC_OUTCOME_SUCCESS, &err), CBC_ESTATE);
	ck_assert_int_eq(cbc_breaker_report(b, &p, (cbc_outcome)9, &err), CBC_EINVAL);
	cbc_breaker_free(b);
}
END_TEST

START_TEST(force_state_and_refresh_see_changes_made_elsewhere)
{
	recorder r1 = { 0 }, r2 = { 0 };
	cbc_store *store = cbc_store_new_local(0, NULL);
	cbc_breaker_options o1 = small_options("shared", store, &r1);
	cbc_breaker_options o2 = small_options("shared", store, &r2);
	cbc_breaker *b1 = breaker_new_ok(&o1), *b2 = breaker_new_ok(&o2);
	cbc_state st;

	ck_assert_int_eq(cbc_breaker_force_open(b1, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_state(b1), CBC_STATE_OPEN);
	ck_assert_int_eq(r1.count, 1);
	/* b2 has not looked yet. */
	ck_assert_int_eq(cbc_breaker_state(b2), CBC_STATE_CLOSED);
	ck_assert_int_eq(cbc_breaker_refresh(b2, &st, NULL), CBC_OK);
	ck_assert_int_eq(st, CBC_STATE_OPEN);
	ck_assert_int_eq(r2.count, 1);
	ck_assert_int_eq(r2.next[0], CBC_STATE_OPEN);
	ck_assert_int_eq(cbc_breaker_refresh(b2, &st, NULL), CBC_OK);
	ck_assert_int_eq(r2.count, 1); /* no change, no callback */
	ck_assert_int_eq(cbc_breaker_force_half_open(b1, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_state(b1), CBC_STATE_HALF_OPEN);
	ck_assert_int_eq(cbc_breaker_force_close(b1, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_state(b1), CBC_STATE_CLOSED);
	ck_assert_int_eq(r1.count, 3);
	ck_assert_int_eq(cbc_breaker_refresh(b2, &st, NULL), CBC_OK);
	ck_assert_int_eq(st, CBC_STATE_CLOSED);
	ck_assert_int_eq(r2.count, 2);
	ck_assert_int_eq(r2.prev[1], CBC_STATE_OPEN);
	ck_assert_int_eq(r2.next[1], CBC_STATE_CLOSED);
	cbc_breaker_free(b1);
	cbc_breaker_free(b2);
	cbc_store_free(store);
}
END_TEST

/* ---------- the resilient store over a store that fails on demand ---------- */

typedef struct flaky {
	cbc_store *real;
	cbc_status fail; /* CBC_OK: answer */
	char fail_code[CBC_CODE_SIZE];
	int calls;
	/* When stamp: get answers carry this policy and hold, as cbd's
	 * protocol 2 snapshots do. */
	bool stamp;
	cbc_policy policy;
	cbc_hold_info hold;
	int64_t grown_break_ms; /* when > 0: current_break_ms of get answers */
	/* When > 0: every snapshot carries this policy_rev and only get's
	 * the policy (protocol 3's compact snapshots). */
	int64_t rev;
} flaky;

/* Protocol 3: a snapshot other than get's carries policy_rev alone. */
static cbc_status
flaky_compact(flaky *f, cbc_status st, cbc_snapshot *out)
{
	if (st == CBC_OK && f->rev > 0)
		out->policy_rev = f->rev;
	return st;
}

static cbc_status
flaky_fail(flaky *f, cbc_error *err)
{
	f->calls++;
	if (f->fail == CBC_OK)
		return CBC_OK;
	err->status = f->fail;
	snprintf(err->code, sizeof err->code, "%s", f->fail_code);
	snprintf(err->message, sizeof err->message, "injected: %s", cbc_strerror(f->fail));
	return f->fail;
}

static cbc_status
f_get(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	flaky *f = impl;
	cbc_status st = flaky_fail(f, err) ?: cbc_store_get(f->real, name, ctx, out, err);

	if (st == CBC_OK && f->stamp) {
		out->policy = f->policy;
		out->hold = f->hold;
		out->current_break_ms = f->grown_break_ms > 0
		    ? f->grown_break_ms
		    : f->policy.break_ms; /* as cbd: not grown */
		out->policy_rev = f->rev;
	}
	return st;
}

static cbc_status
f_rs(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	flaky *f = impl;

	return flaky_compact(f,
	    flaky_fail(f, err) ?: cbc_store_record_success(f->real, name, ctx, out, err), out);
}

static cbc_status
f_rf(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	flaky *f = impl;

	return flaky_compact(f,
	    flaky_fail(f, err) ?: cbc_store_record_failure(f->real, name, ctx, out, err), out);
}

static cbc_status
f_cas(void *impl, const char *name, cbc_state from, cbc_state to, const cbc_ctx *ctx, bool *applied,
    cbc_snapshot *out, cbc_error *err)
{
	flaky *f = impl;

	return flaky_fail(f, err) ?: cbc_store_cas(f->real, name, from, to, ctx, applied, out, err);
}

static cbc_status
f_set(void *impl, const char *name, cbc_state state, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	flaky *f = impl;

	return flaky_fail(f, err) ?: cbc_store_set_state(f->real, name, state, ctx, out, err);
}

static cbc_status
f_acq(void *impl, const char *name, const cbc_ctx *ctx, cbc_slot *out, cbc_error *err)
{
	flaky *f = impl;

	return flaky_fail(f, err) ?: cbc_store_acquire_slot(f->real, name, ctx, out, err);
}

static cbc_status
f_rel(void *impl, const char *name, const char *token, const cbc_ctx *ctx, cbc_error *err)
{
	flaky *f = impl;

	return flaky_fail(f, err) ?: cbc_store_release_slot(f->real, name, token, ctx, err);
}

static cbc_status
f_del(void *impl, const char *name, bool *existed, cbc_error *err)
{
	flaky *f = impl;

	return flaky_fail(f, err) ?: cbc_store_delete(f->real, name, existed, err);
}

static const cbc_store_ops flaky_ops = {
	.get = f_get,
	.record_success = f_rs,
	.record_failure = f_rf,
	.cas = f_cas,
	.set_state = f_set,
	.acquire_slot = f_acq,
	.release_slot = f_rel,
	.delete_circuit = f_del,
	.destroy = NULL,
};

/* A flaky store over a fresh local one, and a resilient store over it. */
typedef struct resilient_rig {
	flaky f;
	cbc_store *inner;
	cbc_store *res;
	recorder rec;
} resilient_rig;

static void
rig_init(resilient_rig *rig, cbc_store_policy policy, int64_t backoff_ms)
{
	cbc_resilient_options ro;
	cbc_error err;

	memset(rig, 0, sizeof *rig);
	rig->f.real = cbc_store_new_local(0, NULL);
	rig->inner = cbc_store_new_custom(&flaky_ops, &rig->f, &err);
	ck_assert_ptr_nonnull(rig->inner);
	cbc_resilient_options_init(&ro);
	ro.policy = policy;
	ro.on_store_error = record_store_error;
	ro.user = &rig->rec;
	ro.timeout_backoff_ms = backoff_ms;
	rig->res = cbc_store_new_resilient(rig->inner, &ro, &err);
	ck_assert_msg(rig->res != NULL, "%s", err.message);
}

static void
rig_free(resilient_rig *rig)
{
	cbc_store_free(rig->res);
	cbc_store_free(rig->inner);
	cbc_store_free(rig->f.real);
}

static cbc_ctx
vctx(int64_t now)
{
	cbc_ctx c;

	memset(&c, 0, sizeof c);
	c.failure_threshold = 5;
	c.success_threshold = 3;
	c.break_ms = 1000;
	c.has_now = true;
	c.now = now;
	return c;
}

START_TEST(local_policy_seeds_from_last_snapshot_and_never_latches)
{
	resilient_rig rig;
	cbc_ctx c = vctx(1000);
	cbc_snapshot s;
	int before;

	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	cbc_store_record_failure(rig.res, "svc", &c, &s, NULL);
	c.now = 1100;
	cbc_store_record_failure(rig.res, "svc", &c, &s, NULL);
	ck_assert_int_eq(s.failure_count, 2);
	rig.f.fail = CBC_ECONNECT;
	c.now = 1200;
	ck_assert_int_eq(cbc_store_get(rig.res, "svc", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(rig.rec.store_errors, 1);
	ck_assert_int_eq(rig.rec.last_op, CBC_OP_GET);
	ck_assert_int_eq(rig.rec.last_status, CBC_ECONNECT);
	ck_assert_int_eq(s.state, CBC_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 2);
	ck_assert_int_eq(s.last_failure_at, 1100);
	/* Degraded writes land in the local copy. */
	ck_assert_int_eq(cbc_store_record_failure(rig.res, "svc", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.failure_count, 3);
	ck_assert_int_eq(cbc_store_get(rig.res, "svc", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.failure_count, 3);
	/* Every call tried the real store first. */
	ck_assert_int_eq(rig.f.calls, 5);
	/* Back: authoritative at once. */
	rig.f.fail = CBC_OK;
	before = rig.f.calls;
	ck_assert_int_eq(cbc_store_get(rig.res, "svc", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(rig.f.calls, before + 1);
	ck_assert_int_eq(s.failure_count, 2);
	/* Down again: reseeded from what the real store last said. */
	rig.f.fail = CBC_EIO;
	ck_assert_int_eq(cbc_store_get(rig.res, "svc", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.failure_count, 2);
	rig_free(&rig);
}
END_TEST

/* What cbd reports for a circuit whose config says 2 failures open it
 * for 7 s. */
static cbc_policy
reported_policy(void)
{
	cbc_policy p;

	memset(&p, 0, sizeof p);
	p.known = true;
	p.failure_threshold = 2;
	p.success_threshold = 1;
	p.break_ms = 7000;
	p.half_open_max = 1;
	p.slot_ttl_ms = 7000;
	p.max_gap_ms = CBC_POLICY_NULL;
	p.source.failure_threshold = CBC_SOURCE_CONFIG;
	p.source.break_ms = CBC_SOURCE_CONFIG;
	return p;
}

START_TEST(local_policy_breaks_with_the_policy_cbd_reported)
{
	resilient_rig rig;
	cbc_ctx c;
	cbc_snapshot s;

	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	rig.f.stamp = true;
	rig.f.policy = reported_policy();
	/* The caller declares nothing (cbd's config rules), or something
	 * else: either way the circuit runs the policy cbd reported. */
	for (int declared = 0; declared < 2; declared++) {
		const char *name = declared ? "declared" : "quiet";

		memset(&c, 0, sizeof c);
		c.has_now = true;
		c.now = 1000;
		if (declared) {
			c.failure_threshold = 10;
			c.break_ms = 100;
		}
		rig.f.fail = CBC_OK;
		ck_assert_int_eq(cbc_store_get(rig.res, name, &c, &s, NULL), CBC_OK);
		ck_assert(s.policy.known);
		rig.f.fail = CBC_ECONNECT;
		ck_assert_int_eq(cbc_store_record_failure(rig.res, name, &c, &s, NULL), CBC_OK);
		ck_assert_int_eq(s.state, CBC_STATE_CLOSED);
		ck_assert_int_eq(cbc_store_record_failure(rig.res, name, &c, &s, NULL), CBC_OK);
		ck_assert_msg(s.state == CBC_STATE_OPEN, "%s: 2 failures did not open", name);
		ck_assert_int_eq(s.retry_after_ms, 7000);
		c.now = 1000 + 6999;
		ck_assert_int_eq(cbc_store_get(rig.res, name, &c, &s, NULL), CBC_OK);
		ck_assert_int_eq(s.state, CBC_STATE_OPEN);
		ck_assert_int_eq(s.retry_after_ms, 1);
	}
	rig_free(&rig);
}
END_TEST

/* Protocol 3: the policy get reported is kept through the compact
 * snapshots of the same policy_rev (the outcomes' replies), and goes
 * stale with a snapshot of another rev (a reload changed it): the
 * fallback then runs the caller's policy, not the stale one. */
START_TEST(local_policy_kept_through_compact_snapshots_of_its_rev)
{
	resilient_rig rig;
	cbc_ctx c = vctx(1000); /* the caller: 5 failures */
	cbc_snapshot s;

	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	rig.f.stamp = true;
	rig.f.policy = reported_policy(); /* cbd: 2 failures */
	rig.f.rev = 7;
	ck_assert_int_eq(cbc_store_get(rig.res, "kept", &c, &s, NULL), CBC_OK);
	ck_assert(s.policy.known);
	ck_assert_int_eq(s.policy_rev, 7);
	ck_assert_int_eq(cbc_store_record_success(rig.res, "kept", &c, &s, NULL), CBC_OK);
	ck_assert(!s.policy.known);
	ck_assert_int_eq(s.policy_rev, 7);
	rig.f.fail = CBC_ECONNECT;
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(cbc_store_record_failure(rig.res, "kept", &c, &s, NULL), CBC_OK);
	ck_assert_msg(s.state == CBC_STATE_OPEN, "2 failures did not open (policy not kept)");
	ck_assert_int_eq(s.retry_after_ms, 7000);
	/* Back; a reload gave the circuit another policy (rev 8), which
	 * only a compact snapshot told: the kept one is stale. */
	rig.f.fail = CBC_OK;
	ck_assert_int_eq(cbc_store_get(rig.res, "stale", &c, &s, NULL), CBC_OK);
	ck_assert(s.policy.known);
	rig.f.rev = 8;
	ck_assert_int_eq(cbc_store_record_success(rig.res, "stale", &c, &s, NULL), CBC_OK);
	rig.f.fail = CBC_ECONNECT;
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(cbc_store_record_failure(rig.res, "stale", &c, &s, NULL), CBC_OK);
		ck_assert_msg(s.state == CBC_STATE_CLOSED, "opened after %d failures", i + 1);
	}
	ck_assert_int_eq(cbc_store_record_failure(rig.res, "stale", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_OPEN);
	ck_assert_int_eq(s.retry_after_ms, 1000); /* the caller's break */
	rig_free(&rig);
}
END_TEST

START_TEST(local_policy_keeps_a_hold)
{
	resilient_rig rig;
	cbc_ctx c;
	cbc_snapshot s;

	memset(&c, 0, sizeof c);
	c.has_now = true;
	c.now = 1000;
	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	rig.f.stamp = true;
	rig.f.policy = reported_policy();
	/* Held open until released: open long past the break. */
	ck_assert_int_eq(cbc_store_set_state(rig.f.real, "held", CBC_STATE_OPEN, &c, &s, NULL),
	    CBC_OK);
	rig.f.hold.held = true;
	rig.f.hold.state = CBC_STATE_OPEN;
	rig.f.hold.since = 1000;
	rig.f.hold.until = CBC_TIME_NONE;
	ck_assert_int_eq(cbc_store_get(rig.res, "held", &c, &s, NULL), CBC_OK);
	rig.f.fail = CBC_EIO;
	c.now = 1000 + 3600000;
	ck_assert_int_eq(cbc_store_get(rig.res, "held", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_OPEN);
	ck_assert_int_gt(s.retry_after_ms, 0);
	/* Held open for 60 s: open until then, not after. */
	rig.f.fail = CBC_OK;
	c.now = 1000;
	rig.f.hold.until = 61000;
	ck_assert_int_eq(cbc_store_get(rig.res, "held", &c, &s, NULL), CBC_OK);
	rig.f.fail = CBC_EIO;
	c.now = 60999;
	ck_assert_int_eq(cbc_store_get(rig.res, "held", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_OPEN);
	ck_assert_int_eq(s.retry_after_ms, 1);
	c.now = 61000;
	ck_assert_int_eq(cbc_store_get(rig.res, "held", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.retry_after_ms, 0);
	/* Held closed: no failure opens it. */
	rig.f.fail = CBC_OK;
	rig.f.hold.state = CBC_STATE_CLOSED;
	rig.f.hold.until = CBC_TIME_NONE;
	ck_assert_int_eq(cbc_store_set_state(rig.f.real, "kept", CBC_STATE_CLOSED, &c, &s, NULL),
	    CBC_OK);
	ck_assert_int_eq(cbc_store_get(rig.res, "kept", &c, &s, NULL), CBC_OK);
	rig.f.fail = CBC_EIO;
	for (int i = 0; i < 20; i++) {
		ck_assert_int_eq(cbc_store_record_failure(rig.res, "kept", &c, &s, NULL), CBC_OK);
		ck_assert_int_eq(s.state, CBC_STATE_CLOSED);
	}
	rig_free(&rig);
}
END_TEST

START_TEST(local_policy_keeps_an_open_circuit_open)
{
	resilient_rig rig;
	cbc_ctx c = vctx(5000);
	cbc_snapshot s;

	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	ck_assert_int_eq(cbc_store_set_state(rig.res, "o", CBC_STATE_OPEN, &c, &s, NULL), CBC_OK);
	rig.f.fail = CBC_ECONNECT;
	c.now = 5400;
	ck_assert_int_eq(cbc_store_get(rig.res, "o", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, 5000);
	ck_assert_int_eq(s.retry_after_ms, 600);
	/* Half-open with a success already counted survives too. */
	rig.f.fail = CBC_OK;
	ck_assert_int_eq(cbc_store_set_state(rig.res, "h", CBC_STATE_HALF_OPEN, &c, &s, NULL),
	    CBC_OK);
	ck_assert_int_eq(cbc_store_record_success(rig.res, "h", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.success_count, 1);
	rig.f.fail = CBC_ETIMEOUT;
	ck_assert_int_eq(cbc_store_get(rig.res, "h", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_HALF_OPEN);
	ck_assert_int_eq(s.success_count, 1);
	ck_assert_int_eq(cbc_store_record_success(rig.res, "h", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(cbc_store_record_success(rig.res, "h", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_CLOSED);
	rig_free(&rig);
}
END_TEST

START_TEST(local_policy_breaker_keeps_protecting)
{
	resilient_rig rig;
	recorder rec = { 0 };
	cbc_breaker_options o;
	cbc_breaker *b;
	cbc_exec_result res;
	int calls = 0;

	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	o = small_options("lp", rig.inner, &rec);
	b = breaker_new_ok(&o);
	for (int i = 0; i < 3; i++)
		cbc_breaker_execute(b, client_call_fail, &calls, &res, NULL);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	rig.f.fail = CBC_ECONNECT;
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, NULL), CBC_EOPEN);
	ck_assert_int_eq(calls, 3);
	ck_assert_int_gt(rec.store_errors, 0);
	cbc_breaker_free(b);
	rig_free(&rig);
}
END_TEST

START_TEST(allow_policy_lets_calls_flow)
{
	resilient_rig rig;
	recorder rec = { 0 };
	cbc_breaker_options o;
	cbc_breaker *b;
	cbc_exec_result res;
	cbc_snapshot s;
	cbc_slot slot;
	int calls = 0;
	bool applied = true;

	rig_init(&rig, CBC_POLICY_ALLOW, 0);
	o = small_options("al", rig.inner, &rec);
	o.store_policy = CBC_POLICY_ALLOW;
	b = breaker_new_ok(&o);
	ck_assert_int_eq(cbc_breaker_force_open(b, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, NULL), CBC_EOPEN);
	ck_assert_int_eq(rec.count, 1);
	rig.f.fail = CBC_ECONNECT;
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, NULL), CBC_OK);
	ck_assert(res.called);
	ck_assert_int_eq(calls, 1);
	ck_assert_int_gt(rec.store_errors, 0);
	/* "As if closed" is not a state the circuit is in: nothing observed. */
	ck_assert_int_eq(rec.count, 1);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	/* The store ops themselves. */
	ck_assert_int_eq(cbc_store_get(rig.res, "al", NULL, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_CLOSED);
	ck_assert_int_eq(cbc_store_cas(rig.res, "al", CBC_STATE_OPEN, CBC_STATE_HALF_OPEN, NULL,
			     &applied, &s, NULL),
	    CBC_OK);
	ck_assert(!applied);
	ck_assert_int_eq(cbc_store_acquire_slot(rig.res, "al", NULL, &slot, NULL), CBC_OK);
	ck_assert(slot.acquired);
	ck_assert_int_eq(cbc_store_release_slot(rig.res, "al", slot.token, NULL, NULL), CBC_OK);
	cbc_breaker_free(b);
	rig_free(&rig);
}
END_TEST

START_TEST(reject_policy_surfaces_pre_call_errors_only)
{
	resilient_rig rig;
	recorder rec = { 0 };
	cbc_breaker_options o;
	cbc_breaker *b;
	cbc_exec_result res;
	cbc_snapshot s;
	cbc_slot slot;
	cbc_permit p;
	cbc_error err;
	int calls = 0;
	bool applied;

	rig_init(&rig, CBC_POLICY_REJECT, 0);
	o = small_options("rj", rig.inner, &rec);
	o.store_policy = CBC_POLICY_REJECT;
	b = breaker_new_ok(&o);
	/* A permit taken while the store works, reported after it failed:
	 * the report is not an error. */
	ck_assert_int_eq(cbc_breaker_acquire(b, &p, NULL), CBC_OK);
	rig.f.fail = CBC_ECONNECT;
	ck_assert_int_eq(cbc_breaker_report(b, &p, CBC_OUTCOME_FAILURE, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, &err), CBC_ECONNECT);
	ck_assert_int_eq(err.status, CBC_ECONNECT);
	ck_assert(!res.called);
	ck_assert_int_eq(calls, 0);
	ck_assert_int_eq(cbc_breaker_force_open(b, &err), CBC_ECONNECT);
	ck_assert_int_eq(cbc_store_get(rig.res, "rj", NULL, &s, NULL), CBC_ECONNECT);
	ck_assert_int_eq(cbc_store_cas(rig.res, "rj", CBC_STATE_OPEN, CBC_STATE_HALF_OPEN, NULL,
			     &applied, &s, NULL),
	    CBC_ECONNECT);
	ck_assert_int_eq(cbc_store_set_state(rig.res, "rj", CBC_STATE_OPEN, NULL, &s, NULL),
	    CBC_ECONNECT);
	ck_assert_int_eq(cbc_store_acquire_slot(rig.res, "rj", NULL, &slot, NULL), CBC_ECONNECT);
	ck_assert_int_eq(cbc_store_record_failure(rig.res, "rj", NULL, &s, NULL), CBC_OK);
	ck_assert_int_eq(cbc_store_record_success(rig.res, "rj", NULL, &s, NULL), CBC_OK);
	ck_assert_int_eq(cbc_store_release_slot(rig.res, "rj", "t", NULL, NULL), CBC_OK);
	/* Back: the next call uses it. */
	rig.f.fail = CBC_OK;
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, &err), CBC_OK);
	ck_assert_int_eq(calls, 1);
	cbc_breaker_free(b);
	rig_free(&rig);
}
END_TEST

START_TEST(answers_that_are_refusals_are_not_degraded)
{
	resilient_rig rig;
	cbc_snapshot s;
	cbc_error err;

	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	rig.f.fail = CBC_EREFUSED;
	snprintf(rig.f.fail_code, sizeof rig.f.fail_code, "forbidden");
	ck_assert_int_eq(cbc_store_set_state(rig.res, "x", CBC_STATE_OPEN, NULL, &s, &err),
	    CBC_EREFUSED);
	ck_assert_str_eq(err.code, "forbidden");
	ck_assert_int_eq(rig.rec.store_errors, 0);
	rig.f.fail = CBC_ECAPACITY;
	snprintf(rig.f.fail_code, sizeof rig.f.fail_code, "capacity");
	ck_assert_int_eq(cbc_store_record_failure(rig.res, "x", NULL, &s, &err), CBC_ECAPACITY);
	/* shutting_down is a failure of the store. */
	rig.f.fail = CBC_EREFUSED;
	snprintf(rig.f.fail_code, sizeof rig.f.fail_code, "shutting_down");
	ck_assert_int_eq(cbc_store_get(rig.res, "x", NULL, &s, &err), CBC_OK);
	ck_assert_int_eq(rig.rec.store_errors, 1);
	rig_free(&rig);
}
END_TEST

START_TEST(timeout_backoff_skips_then_retries)
{
	resilient_rig rig, quick;
	cbc_snapshot s;
	int64_t t0;

	rig_init(&rig, CBC_POLICY_LOCAL, 600000);
	rig.f.fail = CBC_ETIMEOUT;
	ck_assert_int_eq(cbc_store_get(rig.res, "b", NULL, &s, NULL), CBC_OK);
	ck_assert_int_eq(rig.f.calls, 1);
	rig.f.fail = CBC_OK;
	/* Within the backoff the wrapped store is not tried... */
	ck_assert_int_eq(cbc_store_get(rig.res, "b", NULL, &s, NULL), CBC_OK);
	ck_assert_int_eq(rig.f.calls, 1);
	ck_assert_int_eq(rig.rec.store_errors, 2);
	ck_assert_int_eq(rig.rec.last_status, CBC_ETIMEOUT);
	rig_free(&rig);
	/* ...and after it, it is. */
	rig_init(&quick, CBC_POLICY_LOCAL, 1);
	quick.f.fail = CBC_ETIMEOUT;
	cbc_store_get(quick.res, "b", NULL, &s, NULL);
	quick.f.fail = CBC_OK;
	t0 = mono_ms();
	while (mono_ms() - t0 < 5)
		usleep(1000);
	ck_assert_int_eq(cbc_store_get(quick.res, "b", NULL, &s, NULL), CBC_OK);
	ck_assert_int_eq(quick.f.calls, 2);
	rig_free(&quick);
	/* Fast failures get no backoff. */
	rig_init(&rig, CBC_POLICY_LOCAL, 600000);
	rig.f.fail = CBC_ECONNECT;
	cbc_store_get(rig.res, "b", NULL, &s, NULL);
	cbc_store_get(rig.res, "b", NULL, &s, NULL);
	ck_assert_int_eq(rig.f.calls, 2);
	rig_free(&rig);
}
END_TEST

START_TEST(resilient_options_are_checked)
{
	cbc_store *inner = cbc_store_new_local(0, NULL);
	cbc_resilient_options ro;
	cbc_error err;

	ck_assert_ptr_null(cbc_store_new_resilient(NULL, NULL, &err));
	ck_assert_ptr_nonnull(strstr(err.message, "inner"));
	cbc_resilient_options_init(&ro);
	ro.policy = (cbc_store_policy)7;
	ck_assert_ptr_null(cbc_store_new_resilient(inner, &ro, &err));
	ck_assert_ptr_nonnull(strstr(err.message, "policy"));
	cbc_resilient_options_init(&ro);
	ro.timeout_backoff_ms = -1;
	ck_assert_ptr_null(cbc_store_new_resilient(inner, &ro, &err));
	ck_assert_ptr_nonnull(strstr(err.message, "timeout_backoff_ms"));
	cbc_store_free(inner);
}
END_TEST

/* ---------- trip rules, durations and classification (issue 10) ---------- */

/* A classifier that counts its calls and sorts results: 4 is a business
 * error (success), 7 is ignored, anything else fails. */
static int classify_calls, classify_zero_calls;

static cbc_outcome
classify_kinds(int result, void *user)
{
	(void)user;
	classify_calls++;
	if (result == 0)
		classify_zero_calls++;
	return result == 4 ? CBC_OUTCOME_SUCCESS
	    : result == 7  ? CBC_OUTCOME_IGNORE
			   : CBC_OUTCOME_FAILURE;
}

static bool
not_seven(int result, void *user)
{
	(void)user;
	return result != 7;
}

START_TEST(error_filter_is_never_asked_about_success)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("not7", NULL, &rec);
	cbc_breaker *b;
	cbc_exec_result res;
	int calls = 0, seven = 7, two = 2;

	/* The natural "ignore kind 7" filter: three successful calls must not
	 * open the circuit (failure_threshold 3). */
	o.error_filter = not_seven;
	b = breaker_new_ok(&o);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, NULL),
		    CBC_OK);
		ck_assert(!res.counted_failure);
		ck_assert_int_eq(res.outcome, CBC_OUTCOME_SUCCESS);
	}
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	ck_assert_int_eq(rec.count, 0);
	/* 7 is not a failure; 2 is. */
	for (int i = 0; i < 3; i++)
		cbc_breaker_execute(b, return_arg, &seven, &res, NULL);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	for (int i = 0; i < 3; i++)
		cbc_breaker_execute(b, return_arg, &two, &res, NULL);
	ck_assert(res.counted_failure);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	cbc_breaker_free(b);
}
END_TEST

START_TEST(classify_is_three_way_and_never_sees_zero)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("three-way", NULL, &rec);
	cbc_breaker *b;
	cbc_exec_result res;
	cbc_snapshot snap;
	cbc_error err;
	int calls = 0, four = 4, seven = 7, nine = 9;

	classify_calls = classify_zero_calls = 0;
	o.classify = classify_kinds;
	b = breaker_new_ok(&o);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, NULL),
		    CBC_OK);
		ck_assert_int_eq(res.outcome, CBC_OUTCOME_SUCCESS);
	}
	ck_assert_int_eq(classify_calls, 0);
	/* Two failures, then a business error (success) resets the chain. */
	cbc_breaker_execute(b, return_arg, &nine, &res, NULL);
	cbc_breaker_execute(b, return_arg, &nine, &res, NULL);
	ck_assert_int_eq(res.outcome, CBC_OUTCOME_FAILURE);
	ck_assert(res.counted_failure);
	cbc_breaker_execute(b, return_arg, &four, &res, NULL);
	ck_assert_int_eq(res.outcome, CBC_OUTCOME_SUCCESS);
	ck_assert(!res.counted_failure);
	ck_assert_int_eq(res.result, 4);
	ck_assert_int_eq(cbc_breaker_refresh(b, NULL, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	/* Two failures, then ignored results change nothing: the third
	 * failure still opens at exactly three. */
	cbc_breaker_execute(b, return_arg, &nine, &res, NULL);
	cbc_breaker_execute(b, return_arg, &nine, &res, NULL);
	for (int i = 0; i < 4; i++) {
		cbc_breaker_execute(b, return_arg, &seven, &res, NULL);
		ck_assert_int_eq(res.outcome, CBC_OUTCOME_IGNORE);
		ck_assert(!res.counted_failure);
	}
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	cbc_breaker_execute(b, return_arg, &nine, &res, NULL);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	ck_assert_int_eq(classify_zero_calls, 0);
	ck_assert_int_eq(classify_calls, 2 + 1 + 2 + 4 + 1);
	(void)snap;
	cbc_breaker_free(b);
}
END_TEST

/* Every class of HTTP answer. */
typedef struct http_case {
	int status;
	cbc_outcome want;
} http_case;

static const http_case http_cases[] = {
	{ 100, CBC_OUTCOME_SUCCESS },
	{ 199, CBC_OUTCOME_SUCCESS },
	{ 200, CBC_OUTCOME_SUCCESS },
	{ 204, CBC_OUTCOME_SUCCESS },
	{ 301, CBC_OUTCOME_SUCCESS },
	{ 304, CBC_OUTCOME_SUCCESS },
	{ 399, CBC_OUTCOME_SUCCESS },
	{ 400, CBC_OUTCOME_SUCCESS }, /* business errors: the dependency answered */
	{ 401, CBC_OUTCOME_SUCCESS },
	{ 403, CBC_OUTCOME_SUCCESS },
	{ 404, CBC_OUTCOME_SUCCESS },
	{ 407, CBC_OUTCOME_SUCCESS },
	{ 409, CBC_OUTCOME_SUCCESS },
	{ 422, CBC_OUTCOME_SUCCESS },
	{ 428, CBC_OUTCOME_SUCCESS },
	{ 430, CBC_OUTCOME_SUCCESS },
	{ 499, CBC_OUTCOME_SUCCESS },
	{ 408, CBC_OUTCOME_FAILURE }, /* request timeout */
	{ 429, CBC_OUTCOME_FAILURE }, /* too many requests */
	{ 500, CBC_OUTCOME_FAILURE },
	{ 502, CBC_OUTCOME_FAILURE },
	{ 503, CBC_OUTCOME_FAILURE },
	{ 504, CBC_OUTCOME_FAILURE },
	{ 599, CBC_OUTCOME_FAILURE },
	{ -1, CBC_OUTCOME_FAILURE }, /* transport errors: no status */
	{ -110, CBC_OUTCOME_FAILURE },
	{ 1, CBC_OUTCOME_FAILURE },
	{ 99, CBC_OUTCOME_FAILURE },
	{ 600, CBC_OUTCOME_FAILURE },
	{ 1000, CBC_OUTCOME_FAILURE },
};

START_TEST(http_classifier_table)
{
	const http_case *c = &http_cases[_i];

	ck_assert_msg(cbc_http_outcome(c->status) == c->want, "status %d: got %d, wanted %d",
	    c->status, (int)cbc_http_outcome(c->status), (int)c->want);
	ck_assert_int_eq(cbc_classify_http(c->status, NULL), c->want);
}
END_TEST

START_TEST(http_classifier_in_a_breaker)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("http", NULL, &rec);
	cbc_breaker *b;
	cbc_exec_result res;
	int not_found = 404, unavailable = 503, transport = -1, too_many = 429;

	o.classify = cbc_classify_http;
	b = breaker_new_ok(&o);
	/* 404s are the caller's business: never open. */
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(cbc_breaker_execute(b, return_arg, &not_found, &res, NULL),
		    CBC_OK);
		ck_assert_int_eq(res.outcome, CBC_OUTCOME_SUCCESS);
	}
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	cbc_breaker_execute(b, return_arg, &unavailable, &res, NULL);
	cbc_breaker_execute(b, return_arg, &transport, &res, NULL);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	cbc_breaker_execute(b, return_arg, &too_many, &res, NULL);
	ck_assert(res.counted_failure);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	cbc_breaker_free(b);
}
END_TEST

START_TEST(execute_measures_the_duration_and_a_slow_rule_opens)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("slow", NULL, &rec);
	cbc_breaker *b;
	cbc_exec_result res;
	cbc_snapshot snap;
	cbc_store *store = cbc_store_new_local(0, NULL);
	int fast = 0, slow = 50;

	/* Rate rule on the slow calls alone: the last 2 calls, all slow. */
	o.store = store;
	o.trip = CBC_TRIP_RATE;
	o.window_size = 2;
	o.minimum_calls = 2;
	o.slow_call_ms = 40;
	o.slow_call_rate = 100;
	b = breaker_new_ok(&o);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_sleep, &fast, &res, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_sleep, &slow, &res, NULL), CBC_OK);
	ck_assert_int_ge(res.duration_ms, 50);
	ck_assert_int_eq(res.outcome, CBC_OUTCOME_SUCCESS);
	/* One fast, one slow: 50 % slow, not 100 %. */
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	/* Slow, slow: 100 %. */
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_sleep, &slow, &res, NULL), CBC_OK);
	ck_assert_int_eq(res.result, 0);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	ck_assert_int_eq(rec.count, 1);
	cbc_breaker_free(b);
	/* The store's snapshot: the window emptied by the transition, the
	 * break as policy says. */
	ck_assert_int_eq(cbc_store_get(store, "slow", NULL, &snap, NULL), CBC_OK);
	ck_assert_int_eq(snap.state, CBC_STATE_OPEN);
	cbc_store_free(store);
}
END_TEST

START_TEST(report_sends_a_duration)
{
	recorder rec = { 0 };
	cbc_store *store = cbc_store_new_local(0, NULL);
	cbc_breaker_options o = small_options("reported", store, &rec);
	cbc_breaker *b;
	cbc_snapshot snap;
	cbc_permit p;
	cbc_error err;
	cbc_ctx rate;
	int slow = 50;

	/* A slow rule that never opens here: the window shows what was sent. */
	o.trip = CBC_TRIP_RATE;
	o.window_size = 10;
	o.minimum_calls = 10;
	o.slow_call_ms = 40;
	b = breaker_new_ok(&o);
	/* The local store keeps no policy: reads pass the same one. */
	memset(&rate, 0, sizeof rate);
	rate.trip = CBC_TRIP_RATE;
	rate.window_size = 10;
	rate.minimum_calls = 10;
	rate.slow_call_ms = 40;
	/* The caller timed it: 5 s, slow. */
	ck_assert_int_eq(cbc_breaker_acquire(b, &p, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_report_duration(b, &p, CBC_OUTCOME_SUCCESS, 5000, &err),
	    CBC_OK);
	ck_assert_int_eq(cbc_store_get(store, "reported", &rate, &snap, NULL), CBC_OK);
	ck_assert_int_eq(snap.window.calls, 1);
	ck_assert_int_eq(snap.window.slow, 1);
	/* Measured between acquire and report: >= 50 ms, slow. */
	ck_assert_int_eq(cbc_breaker_acquire(b, &p, &err), CBC_OK);
	client_call_sleep(&slow);
	ck_assert_int_eq(cbc_breaker_report(b, &p, CBC_OUTCOME_FAILURE, &err), CBC_OK);
	ck_assert_int_eq(cbc_store_get(store, "reported", &rate, &snap, NULL), CBC_OK);
	ck_assert_int_eq(snap.window.calls, 2);
	ck_assert_int_eq(snap.window.failures, 1);
	ck_assert_int_eq(snap.window.slow, 2);
	/* Given as 0: not slow. */
	ck_assert_int_eq(cbc_breaker_acquire(b, &p, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_report_duration(b, &p, CBC_OUTCOME_SUCCESS, 0, &err), CBC_OK);
	ck_assert_int_eq(cbc_store_get(store, "reported", &rate, &snap, NULL), CBC_OK);
	ck_assert_int_eq(snap.window.calls, 3);
	ck_assert_int_eq(snap.window.slow, 2);
	/* Out of bounds: refused naming it, the permit still granted. */
	ck_assert_int_eq(cbc_breaker_acquire(b, &p, &err), CBC_OK);
	ck_assert_int_eq(cbc_breaker_report_duration(b, &p, CBC_OUTCOME_SUCCESS,
			     (INT64_C(1) << 53) + 1, &err),
	    CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "duration_ms"));
	ck_assert(p.granted);
	ck_assert_int_eq(cbc_breaker_report(b, &p, CBC_OUTCOME_IGNORE, &err), CBC_OK);
	cbc_breaker_free(b);
	cbc_store_free(store);
}
END_TEST

START_TEST(rate_rule_with_a_builtin_preset_runs_locally)
{
	recorder rec = { 0 };
	cbc_breaker_options o = small_options("preset", NULL, &rec);
	cbc_breaker *b;
	cbc_exec_result res;
	int calls = 0;

	/* http-external: rate, the last 10 calls, minimum 5, 50 %. The
	 * breaker's failure_threshold 3 is not the rule any more. */
	o.failure_threshold = 0;
	o.preset = "http-external";
	b = breaker_new_ok(&o);
	/* f s f s f: 3 of 5 failed at the fifth call (exactly the minimum). */
	for (int i = 0; i < 4; i++) {
		cbc_breaker_execute(b, i % 2 ? client_call_ok : client_call_fail, &calls, &res,
		    NULL);
		ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_CLOSED);
	}
	cbc_breaker_execute(b, client_call_fail, &calls, &res, NULL);
	ck_assert_int_eq(cbc_breaker_state(b), CBC_STATE_OPEN);
	cbc_breaker_free(b);
}
END_TEST

START_TEST(local_store_reports_window_and_grown_break)
{
	cbc_store *s = cbc_store_new_local(0, NULL);
	cbc_snapshot snap;
	cbc_ctx c;
	cbc_error err;

	memset(&c, 0, sizeof c);
	c.has_now = true;
	c.now = 1000;
	c.trip = CBC_TRIP_RATE;
	c.window = CBC_WINDOW_TIME;
	c.window_size = 10000;
	c.minimum_calls = 4;
	c.failure_rate = 75;
	c.break_ms = 1000;
	c.break_backoff = 2;
	c.break_max_ms = 3000;
	ck_assert_int_eq(cbc_store_record_failure(s, "w", &c, &snap, &err), CBC_OK);
	ck_assert_int_eq(cbc_store_record_success(s, "w", &c, &snap, &err), CBC_OK);
	ck_assert_int_eq(cbc_store_record_failure(s, "w", &c, &snap, &err), CBC_OK);
	ck_assert(snap.window.known);
	ck_assert_int_eq(snap.window.calls, 3);
	ck_assert_int_eq(snap.window.failures, 2);
	ck_assert(snap.window.failure_rate > 66.6 && snap.window.failure_rate < 66.7);
	ck_assert_int_eq(snap.current_break_ms, 1000);
	ck_assert_int_eq(snap.reporters, -1);
	/* 3 of 4: open at 75 %. */
	ck_assert_int_eq(cbc_store_record_failure(s, "w", &c, &snap, &err), CBC_OK);
	ck_assert_int_eq(snap.state, CBC_STATE_OPEN);
	ck_assert_int_eq(snap.window.calls, 0);
	/* A failed trial doubles the break, up to break_max_ms. */
	c.now = 2000;
	ck_assert_int_eq(cbc_store_set_state(s, "w", CBC_STATE_HALF_OPEN, &c, &snap, &err), CBC_OK);
	ck_assert_int_eq(cbc_store_record_failure(s, "w", &c, &snap, &err), CBC_OK);
	ck_assert_int_eq(snap.state, CBC_STATE_OPEN);
	ck_assert_int_eq(snap.current_break_ms, 2000);
	ck_assert_int_eq(snap.retry_after_ms, 2000);
	/* A preset the local store does not know is refused, naming it. */
	c.preset = "from-config";
	ck_assert_int_eq(cbc_store_get(s, "w", &c, &snap, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "ctx.preset"));
	c.preset = "database";
	ck_assert_int_eq(cbc_store_get(s, "w", &c, &snap, &err), CBC_OK);
	/* A consecutive circuit has no window. */
	memset(&c, 0, sizeof c);
	ck_assert_int_eq(cbc_store_record_failure(s, "plain", &c, &snap, &err), CBC_OK);
	ck_assert(!snap.window.known);
	ck_assert_int_eq(snap.current_break_ms, 30000);
	/* Bad ctx members are named. */
	c.failure_rate = 0;
	c.window = CBC_WINDOW_TIME;
	c.window_size = 50;
	ck_assert_int_eq(cbc_store_get(s, "w", &c, &snap, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "ctx.window_size"));
	memset(&c, 0, sizeof c);
	c.has_duration = true;
	c.duration_ms = -1;
	ck_assert_int_eq(cbc_store_record_success(s, "w", &c, &snap, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "duration_ms"));
	cbc_store_free(s);
}
END_TEST

/* What cbd reports for a circuit whose config says: rate, the last 4
 * calls, minimum 4, 50 %, slow at 100 ms (100 %), break 7 s. */
static cbc_policy
reported_rate_policy(void)
{
	cbc_policy p;

	memset(&p, 0, sizeof p);
	p.known = true;
	p.failure_threshold = 5;
	p.success_threshold = 2;
	p.break_ms = 7000;
	p.half_open_max = 1;
	p.slot_ttl_ms = 7000;
	p.max_gap_ms = CBC_POLICY_NULL;
	p.trip = CBC_TRIP_RATE;
	p.window = CBC_WINDOW_COUNT;
	p.window_size = 4;
	p.minimum_calls = 4;
	p.failure_rate = 50;
	p.slow_call_ms = 100;
	p.slow_call_rate = 100;
	p.min_reporters = 2; /* one process locally: counts as 1 */
	p.reporter_window_ms = 60000;
	p.break_backoff = 1;
	p.break_max_ms = CBC_POLICY_NULL;
	return p;
}

START_TEST(local_policy_runs_the_rate_rule_cbd_reported)
{
	resilient_rig rig;
	cbc_ctx c;
	cbc_snapshot s;

	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	rig.f.stamp = true;
	rig.f.policy = reported_rate_policy();
	memset(&c, 0, sizeof c);
	c.has_now = true;
	c.now = 1000;
	/* The caller declares a consecutive rule of 1: cbd's policy wins. */
	c.failure_threshold = 1;
	c.slow_call_ms = 5;
	rig.f.fail = CBC_OK;
	ck_assert_int_eq(cbc_store_get(rig.res, "rated", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.policy.trip, CBC_TRIP_RATE);
	rig.f.fail = CBC_ECONNECT;
	/* s f s: 1 failure in 3 calls; then a slow success (150 ms): 1 of 4
	 * failed, 1 slow: closed. */
	ck_assert_int_eq(cbc_store_record_success(rig.res, "rated", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(cbc_store_record_failure(rig.res, "rated", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_CLOSED);
	ck_assert_int_eq(cbc_store_record_success(rig.res, "rated", &c, &s, NULL), CBC_OK);
	c.has_duration = true;
	c.duration_ms = 150;
	ck_assert_int_eq(cbc_store_record_success(rig.res, "rated", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_CLOSED);
	ck_assert(s.window.known);
	ck_assert_int_eq(s.window.calls, 4);
	ck_assert_int_eq(s.window.slow, 1);
	/* A second failure: 2 of the last 4 (f s s f) = 50 %: open, for the
	 * 7 s cbd reported. */
	c.has_duration = false;
	ck_assert_int_eq(cbc_store_record_failure(rig.res, "rated", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_OPEN);
	ck_assert_int_eq(s.retry_after_ms, 7000);
	rig_free(&rig);
}
END_TEST

START_TEST(local_policy_keeps_a_grown_break)
{
	resilient_rig rig;
	cbc_ctx c;
	cbc_snapshot s;

	rig_init(&rig, CBC_POLICY_LOCAL, 0);
	rig.f.stamp = true;
	rig.f.policy = reported_rate_policy();
	rig.f.policy.break_backoff = 2;
	rig.f.policy.break_max_ms = 60000;
	memset(&c, 0, sizeof c);
	c.has_now = true;
	c.now = 1000;
	/* cbd says: open since 1000 with a break grown to 28 s. */
	ck_assert_int_eq(cbc_store_set_state(rig.f.real, "grown", CBC_STATE_OPEN, &c, &s, NULL),
	    CBC_OK);
	rig.f.grown_break_ms = 28000;
	ck_assert_int_eq(cbc_store_get(rig.res, "grown", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.current_break_ms, 28000);
	rig.f.fail = CBC_EIO;
	c.now = 1000 + 27999;
	ck_assert_int_eq(cbc_store_get(rig.res, "grown", &c, &s, NULL), CBC_OK);
	ck_assert_int_eq(s.state, CBC_STATE_OPEN);
	ck_assert_int_eq(s.retry_after_ms, 1);
	ck_assert_int_eq(s.current_break_ms, 28000);
	rig_free(&rig);
}
END_TEST

/* ---------- the store contract on local and resilient(local) ---------- */

static void *
local_create(uint64_t max_circuits)
{
	client_box *box = calloc(1, sizeof *box);

	box->store = cbc_store_new_local(max_circuits, NULL);
	return box->store != NULL ? box : NULL;
}

static void *
resilient_local_create(uint64_t max_circuits)
{
	client_box *box = calloc(1, sizeof *box);

	box->inner = cbc_store_new_local(max_circuits, NULL);
	box->store = cbc_store_new_resilient(box->inner, NULL, NULL);
	return box->store != NULL ? box : NULL;
}

static void
box_teardown(void *box)
{
	client_box_free_stores(box);
	free(box);
}

/* ---------- the connection against a scripted fake daemon ---------- */

/* Timeouts of a connection to the fake whose test is about answers, not
 * timeouts: far above any real delay (a loaded machine, valgrind). */
#define FAKE_SLOW_TIMEOUT_MS 10000

/* The fake daemon is a client_stand_in answering with fake_line: each
 * request by its "name" member (get) or op (hello, release, set_state
 * with hold). */

/* Every request line the fake daemon read, in order (the last
 * FAKE_LOG_MAX of them). */
#define FAKE_LOG_MAX 64
#define FAKE_LINE_MAX 4096
static pthread_mutex_t fake_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char fake_log[FAKE_LOG_MAX][FAKE_LINE_MAX];
static int fake_log_count;

static void
fake_log_add(const char *line)
{
	pthread_mutex_lock(&fake_log_lock);
	snprintf(fake_log[fake_log_count % FAKE_LOG_MAX], FAKE_LINE_MAX, "%s", line);
	fake_log_count++;
	pthread_mutex_unlock(&fake_log_lock);
}

/* How many requests the fake daemon has read so far. */
static int
fake_log_total(void)
{
	int n;

	pthread_mutex_lock(&fake_log_lock);
	n = fake_log_count;
	pthread_mutex_unlock(&fake_log_lock);
	return n;
}

/* The i-th request line read (0 = first), parsed; NULL when gone. */
static json_t *
fake_log_get(int i)
{
	json_t *req = NULL;

	pthread_mutex_lock(&fake_log_lock);
	if (i >= 0 && i < fake_log_count && i >= fake_log_count - FAKE_LOG_MAX)
		req = json_loads(fake_log[i % FAKE_LOG_MAX], 0, NULL);
	pthread_mutex_unlock(&fake_log_lock);
	return req;
}

/* A protocol 2 snapshot as cbd sends it: held open by alice until 5000
 * with a reason, totals, the policy with its sources, a policy key and a
 * source this library does not know, and a member it does not know. */
#define FAKE_V2_SNAPSHOT                                                                           \
	"{\"name\":\"v2held\",\"state\":\"open\",\"failure_count\":0,\"success_count\":0,"         \
	"\"last_failure_at\":null,\"opened_at\":1000,\"retry_after_ms\":4000,"                     \
	"\"hold\":{\"state\":\"open\",\"by_uid\":1000,\"by_user\":\"alice\",\"reason\":"           \
	"\"deploy\","                                                                              \
	"\"since\":1000,\"until\":5000},"                                                          \
	"\"totals\":{\"successes\":7,\"failures\":5,\"ignored\":1,\"slow\":0,\"rejected\":12},"    \
	"\"policy\":{\"failure_threshold\":2,\"success_threshold\":2,\"break_ms\":30000,"          \
	"\"half_open_max\":1,\"slot_ttl_ms\":30000,\"max_gap_ms\":null,\"trip\":\"consecutive\","  \
	"\"source\":{\"failure_threshold\":\"config\",\"success_threshold\":\"builtin\","          \
	"\"break_ms\":\"client\",\"half_open_max\":\"defaults\",\"slot_ttl_ms\":\"builtin\","      \
	"\"max_gap_ms\":\"builtin\",\"trip\":\"builtin\",\"future\":\"preset\"}},"                 \
	"\"reporters\":3}"

/* A rate circuit as cbd sends it (proto/examples/rates.txt, with a
 * break grown by break_backoff and reporters): fractional rates. */
#define FAKE_RATE_SNAPSHOT                                                                         \
	"{\"name\":\"v2rate\",\"state\":\"closed\",\"failure_count\":1,\"success_count\":0,"       \
	"\"last_failure_at\":1002,\"opened_at\":null,\"retry_after_ms\":0,\"policy\":{"            \
	"\"failure_threshold\":5,\"success_threshold\":2,\"break_ms\":30000,\"half_open_max\":1,"  \
	"\"slot_ttl_ms\":30000,\"max_gap_ms\":null,\"trip\":\"rate\",\"window\":\"time\","         \
	"\"window_size\":10000,\"minimum_calls\":5,\"failure_rate\":50,\"slow_call_ms\":2000,"     \
	"\"slow_call_rate\":80,\"min_reporters\":2,\"reporter_window_ms\":60000,"                  \
	"\"break_backoff\":2,\"break_max_ms\":null,\"preset\":\"http-external\",\"source\":{"      \
	"\"trip\":\"client\",\"window\":\"config\",\"window_size\":\"config\",\"slow_call_ms\":"   \
	"\"defaults\",\"min_reporters\":\"config\",\"break_max_ms\":\"builtin\",\"preset\":"       \
	"\"client\"}},\"hold\":null,\"totals\":{\"successes\":1,\"failures\":2,\"ignored\":0,"     \
	"\"slow\":1,\"rejected\":0},\"current_break_ms\":60000,\"window\":{\"calls\":3,"           \
	"\"failures\":2,\"slow\":1,\"failure_rate\":66.66666666666667,\"slow_call_rate\":"         \
	"33.333333333333336},\"reporters\":1}"

/* A protocol 1 snapshot of name in state. */
static void
fake_v1_snapshot(char *out, size_t size, const char *name, const char *state)
{
	snprintf(out, size,
	    "{\"name\":\"%s\",\"state\":\"%s\",\"failure_count\":0,\"success_count\":0,"
	    "\"last_failure_at\":null,\"opened_at\":null,\"retry_after_ms\":0}",
	    name, state);
}

/* set_state with hold: the hold the request asked for, by uid 0. */
static void
fake_hold_snapshot(const json_t *req, char *out, size_t size)
{
	const char *name = json_string_value(json_object_get(req, "name"));
	const char *state = json_string_value(json_object_get(req, "state"));
	const json_t *ttl = json_object_get(req, "ttl_ms");
	const char *reason = json_string_value(json_object_get(req, "reason"));
	char until[32] = "null", why[300] = "null";

	if (json_is_integer(ttl))
		snprintf(until, sizeof until, "%lld", 1000 + (long long)json_integer_value(ttl));
	if (reason != NULL)
		snprintf(why, sizeof why, "\"%s\"", reason);
	snprintf(out, size,
	    "{\"name\":\"%s\",\"state\":\"%s\",\"failure_count\":0,\"success_count\":0,"
	    "\"last_failure_at\":null,\"opened_at\":1000,\"retry_after_ms\":0,"
	    "\"hold\":{\"state\":\"%s\",\"by_uid\":0,\"by_user\":\"root\",\"reason\":%s,"
	    "\"since\":1000,\"until\":%s}}",
	    name, state, state, why, until);
}

/* The policy_rev of the fake's protocol 3 circuit "v3" (its policy, with
 * failure_threshold 2, only when get or "policy": true asks). */
static int64_t fake_rev = 3;

static void
fake_v3_snapshot(const json_t *req, char *out, size_t size)
{
	const char *op = json_string_value(json_object_get(req, "op"));
	bool policy = json_is_true(json_object_get(req, "policy")) ||
	    (op != NULL && strcmp(op, "get") == 0 &&
		!json_is_false(json_object_get(req, "policy")));

	snprintf(out, size,
	    "{\"name\":\"v3\",\"state\":\"closed\",\"failure_count\":0,\"success_count\":0,"
	    "\"last_failure_at\":null,\"opened_at\":null,\"retry_after_ms\":0,"
	    "\"policy_rev\":%lld%s,\"hold\":null,\"current_break_ms\":30000}",
	    (long long)__atomic_load_n(&fake_rev, __ATOMIC_ACQUIRE),
	    policy ? ",\"policy\":{\"failure_threshold\":2,\"break_ms\":30000,\"trip\":"
		     "\"consecutive\",\"source\":{\"failure_threshold\":\"config\"}}"
		   : "");
}

/* One reply for the request line; false: close the connection. */
static bool
fake_reply(const char *line, char *out, size_t size)
{
	json_t *req = json_loads(line, 0, NULL);
	const char *op = json_string_value(json_object_get(req, "op"));
	const char *name = json_string_value(json_object_get(req, "name"));
	json_int_t id = json_integer_value(json_object_get(req, "id"));
	bool keep = true;
	char snap[1024];

	fake_log_add(line);
	if (op != NULL && strcmp(op, "release") == 0) {
		fake_v1_snapshot(snap, sizeof snap, name != NULL ? name : "", "half_open");
		/* a protocol 2 snapshot: hold null */
		snap[strlen(snap) - 1] = '\0';
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"released\":true,\"snapshot\":%s,\"hold\":null}}\n",
		    (long long)id, snap);
	} else if (op != NULL && strcmp(op, "set_state") == 0 &&
	    json_is_true(json_object_get(req, "hold")) &&
	    (name == NULL || strcmp(name, "v1") != 0)) {
		fake_hold_snapshot(req, snap, sizeof snap);
		snprintf(out, size, "{\"id\":%lld,\"ok\":true,\"snapshot\":%s}\n", (long long)id,
		    snap);
	} else if (name != NULL && strncmp(name, "closed", 6) == 0 && op != NULL &&
	    strcmp(op, "allow") == 0) {
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"allowed\":true,\"state\":\"closed\"}\n",
		    (long long)id);
	} else if (name != NULL && strncmp(name, "closed", 6) == 0) {
		fake_v1_snapshot(snap, sizeof snap, name, "closed");
		snprintf(out, size, "{\"id\":%lld,\"ok\":true,\"snapshot\":%s}\n", (long long)id,
		    snap);
	} else if (name != NULL && strcmp(name, "v3") == 0) {
		fake_v3_snapshot(req, snap, sizeof snap);
		snprintf(out, size, "{\"id\":%lld,\"ok\":true,\"snapshot\":%s}\n", (long long)id,
		    snap);
	} else if (name != NULL && strcmp(name, "v2held") == 0) {
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"snapshot\":" FAKE_V2_SNAPSHOT
		    ",\"policy_conflict\":[\"break_ms\",\"failure_threshold\"]}\n",
		    (long long)id);
	} else if (name != NULL && strcmp(name, "v2rate") == 0) {
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"snapshot\":" FAKE_RATE_SNAPSHOT "}\n",
		    (long long)id);
	} else if (name != NULL && strcmp(name, "v2badwindow") == 0) {
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"snapshot\":{\"name\":\"v2badwindow\",\"state\":"
		    "\"closed\",\"failure_count\":0,\"success_count\":0,\"last_failure_at\":"
		    "null,\"opened_at\":null,\"window\":{\"calls\":1,\"failure_rate\":\"high\"}}}"
		    "\n",
		    (long long)id);
	} else if (name != NULL && strcmp(name, "v2badtrip") == 0) {
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"snapshot\":{\"name\":\"v2badtrip\",\"state\":"
		    "\"closed\",\"failure_count\":0,\"success_count\":0,\"last_failure_at\":"
		    "null,\"opened_at\":null,\"policy\":{\"trip\":3}}}\n",
		    (long long)id);
	} else if (name != NULL && strcmp(name, "v2badhold") == 0) {
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"snapshot\":{\"name\":\"v2badhold\",\"state\":"
		    "\"half_open\",\"failure_count\":0,\"success_count\":0,\"last_failure_at\":"
		    "null,\"opened_at\":null,\"hold\":{\"state\":\"half_open\",\"since\":1}}}\n",
		    (long long)id);
	} else if (name != NULL && strcmp(name, "v2badpolicy") == 0) {
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"snapshot\":{\"name\":\"v2badpolicy\",\"state\":"
		    "\"closed\",\"failure_count\":0,\"success_count\":0,\"last_failure_at\":"
		    "null,\"opened_at\":null,\"policy\":{\"break_ms\":\"long\"}}}\n",
		    (long long)id);
	} else if (op != NULL && strcmp(op, "hello") == 0)
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"server\":\"fake\",\"version\":\"0\",\"protocol\":1}"
		    "\n",
		    (long long)id);
	else if (name == NULL)
		snprintf(out, size,
		    "{\"ok\":false,\"error\":{\"code\":\"bad_request\",\"message\":\"name is "
		    "required\"}}\n");
	else if (strcmp(name, "garbage") == 0)
		snprintf(out, size, "this is not json\n");
	else if (strcmp(name, "forbidden") == 0)
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":false,\"error\":{\"code\":\"forbidden\",\"message\":"
		    "\"admin only\"}}\n",
		    (long long)id);
	else if (strcmp(name, "full") == 0)
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":false,\"error\":{\"code\":\"capacity\",\"message\":\"max_"
		    "circuits reached\"}}\n",
		    (long long)id);
	else if (strcmp(name, "wrongid") == 0)
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"snapshot\":{\"name\":\"wrongid\",\"state\":"
		    "\"closed\",\"failure_count\":0,\"success_count\":0,\"last_failure_at\":null,"
		    "\"opened_at\":null,\"retry_after_ms\":0}}\n",
		    (long long)id + 1);
	else if (strcmp(name, "badsnap") == 0)
		snprintf(out, size, "{\"id\":%lld,\"ok\":true,\"snapshot\":{\"state\":\"ajar\"}}\n",
		    (long long)id);
	else if (strcmp(name, "close") == 0)
		keep = false;
	else
		snprintf(out, size,
		    "{\"id\":%lld,\"ok\":true,\"snapshot\":{\"name\":\"%s\",\"state\":\"open\","
		    "\"failure_count\":4,\"success_count\":0,\"last_failure_at\":100,\"opened_at\":"
		    "90,\"retry_after_ms\":25}}\r\n",
		    (long long)id, name);
	json_decref(req);
	return keep;
}

static bool
fake_line(const char *line, char *reply, size_t size, void *arg)
{
	(void)arg;
	return fake_reply(line, reply, size);
}

START_TEST(conn_socket_path_resolution)
{
	cbc_conn *c;
	cbc_error err;
	char longpath[200];

	c = cbc_conn_new("/tmp/explicit.sock", NULL);
	ck_assert_str_eq(cbc_conn_socket_path(c), "/tmp/explicit.sock");
	cbc_conn_free(c);
	setenv("CBD_SOCKET", "/tmp/from-env.sock", 1);
	c = cbc_conn_new(NULL, NULL);
	ck_assert_str_eq(cbc_conn_socket_path(c), "/tmp/from-env.sock");
	cbc_conn_free(c);
	unsetenv("CBD_SOCKET");
	c = cbc_conn_new(NULL, NULL);
	ck_assert_str_eq(cbc_conn_socket_path(c), CBC_DEFAULT_SOCKET);
	ck_assert_str_eq(cbc_conn_socket_path(c), "/run/cbd/cbd.sock");
	ck_assert_int_eq(cbc_conn_set_timeouts(c, 0, 50, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "connect_ms"));
	ck_assert_int_eq(cbc_conn_set_timeouts(c, 50, -1, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "io_ms"));
	cbc_conn_free(c);
	memset(longpath, 'p', sizeof longpath - 1);
	longpath[0] = '/';
	longpath[sizeof longpath - 1] = '\0';
	ck_assert_ptr_null(cbc_conn_new(longpath, &err));
	ck_assert_int_eq(err.status, CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "socket path"));
}
END_TEST

START_TEST(conn_missing_socket_fails_fast_naming_it)
{
	cbc_conn *c = cbc_conn_new("/tmp/cbc-no-such-dir/none.sock", NULL);
	cbc_snapshot s;
	cbc_error err;
	int64_t t0 = mono_ms();

	for (int i = 0; i < 100; i++)
		ck_assert_int_eq(cbc_get(c, "x", NULL, &s, &err), CBC_ECONNECT);
	/* 100 attempts; each is a failed connect(2). Loose bound. */
	ck_assert_int_lt(mono_ms() - t0, 1000);
	ck_assert_ptr_nonnull(strstr(err.message, "/tmp/cbc-no-such-dir/none.sock"));
	cbc_conn_free(c);
}
END_TEST

START_TEST(conn_silent_daemon_times_out)
{
	client_stand_in fd;
	cbc_conn *c;
	cbc_snapshot s;
	cbc_error err;
	int64_t t0, took;

	client_stand_in_start(&fd, NULL, NULL); /* listens, never accepts or answers */
	c = cbc_conn_new(fd.path, NULL);
	ck_assert_int_eq(cbc_conn_set_timeouts(c, 50, 50, NULL), CBC_OK);
	t0 = mono_ms();
	ck_assert_int_eq(cbc_get(c, "x", NULL, &s, &err), CBC_ETIMEOUT);
	took = mono_ms() - t0;
	ck_assert_int_ge(took, 45);
	ck_assert_int_lt(took, 500);
	ck_assert_ptr_nonnull(strstr(err.message, fd.path));
	/* Closed after the timeout; the next call tries again and times out. */
	ck_assert_int_eq(cbc_get(c, "x", NULL, &s, &err), CBC_ETIMEOUT);
	cbc_conn_free(c);
	client_stand_in_stop(&fd);
}
END_TEST

START_TEST(conn_replies_are_checked)
{
	client_stand_in fd;
	cbc_conn *c;
	cbc_snapshot s;
	cbc_hello_info h;
	cbc_error err;
	char *raw;

	client_stand_in_start(&fd, fake_line, NULL);
	c = cbc_conn_new(fd.path, NULL);
	ck_assert_int_eq(cbc_conn_set_timeouts(c, FAKE_SLOW_TIMEOUT_MS, FAKE_SLOW_TIMEOUT_MS, NULL),
	    CBC_OK);
	ck_assert_ptr_null(cbc_conn_last_reply(c));
	ck_assert_int_eq(cbc_hello(c, &h, &err), CBC_OK);
	ck_assert_str_eq(h.server, "fake");
	ck_assert_int_eq(h.protocol, 1);
	ck_assert_int_eq(cbc_get(c, "svc", NULL, &s, &err), CBC_OK);
	ck_assert_str_eq(s.name, "svc");
	ck_assert_int_eq(s.state, CBC_STATE_OPEN);
	ck_assert_int_eq(s.failure_count, 4);
	ck_assert_int_eq(s.last_failure_at, 100);
	ck_assert_int_eq(s.opened_at, 90);
	ck_assert_int_eq(s.retry_after_ms, 25);
	raw = cbc_conn_last_reply(c);
	ck_assert_ptr_nonnull(raw);
	ck_assert_ptr_nonnull(strstr(raw, "\"retry_after_ms\":25"));
	ck_assert_ptr_null(strchr(raw, '\n'));
	cbc_free(raw);
	ck_assert_int_eq(cbc_get(c, "forbidden", NULL, &s, &err), CBC_EREFUSED);
	ck_assert_str_eq(err.code, "forbidden");
	ck_assert_str_eq(err.message, "admin only");
	ck_assert_int_eq(cbc_get(c, "full", NULL, &s, &err), CBC_ECAPACITY);
	ck_assert_str_eq(err.code, "capacity");
	ck_assert_int_eq(cbc_get(c, "garbage", NULL, &s, &err), CBC_EPROTO);
	ck_assert_int_eq(cbc_get(c, "badsnap", NULL, &s, &err), CBC_EPROTO);
	ck_assert_ptr_nonnull(strstr(err.message, "state"));
	ck_assert_int_eq(cbc_get(c, "wrongid", NULL, &s, &err), CBC_EPROTO);
	ck_assert_ptr_nonnull(strstr(err.message, "id"));
	ck_assert_int_eq(cbc_get(c, "close", NULL, &s, &err), CBC_EIO);
	/* Reopened on the next call. */
	ck_assert_int_eq(cbc_get(c, "again", NULL, &s, &err), CBC_OK);
	ck_assert_str_eq(s.name, "again");
	ck_assert_int_ge(fd.accepted, 2);
	/* The raw form hands back the reply, also a refusal. */
	ck_assert_int_eq(cbc_request(c, "{\"op\":\"get\",\"name\":\"forbidden\"}", &raw, &err),
	    CBC_EREFUSED);
	ck_assert_ptr_nonnull(strstr(raw, "admin only"));
	cbc_free(raw);
	ck_assert_int_eq(cbc_request(c, "{\"op\":\"get\"}\n{}", &raw, &err), CBC_EINVAL);
	/* Bad arguments never reach the wire. */
	ck_assert_int_eq(cbc_get(c, "", NULL, &s, &err), CBC_EINVAL);
	ck_assert_int_eq(cbc_record(c, "x", (cbc_outcome)5, NULL, NULL, &s, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "outcome"));
	cbc_conn_free(c);
	client_stand_in_stop(&fd);
}
END_TEST

START_TEST(conn_reads_protocol_2_snapshots)
{
	client_stand_in fd;
	cbc_conn *c;
	cbc_snapshot s;
	cbc_error err;
	char keys[64];

	client_stand_in_start(&fd, fake_line, NULL);
	c = cbc_conn_new(fd.path, NULL);
	ck_assert_int_eq(cbc_get(c, "v2held", NULL, &s, &err), CBC_OK);
	ck_assert_str_eq(s.name, "v2held");
	ck_assert(s.hold.held);
	ck_assert_int_eq(s.hold.state, CBC_STATE_OPEN);
	ck_assert_int_eq(s.hold.by_uid, 1000);
	ck_assert_str_eq(s.hold.by_user, "alice");
	ck_assert(s.hold.has_reason);
	ck_assert_str_eq(s.hold.reason, "deploy");
	ck_assert_int_eq(s.hold.since, 1000);
	ck_assert_int_eq(s.hold.until, 5000);
	ck_assert_int_eq(s.retry_after_ms, 4000);
	ck_assert_int_eq(s.totals.successes, 7);
	ck_assert_int_eq(s.totals.failures, 5);
	ck_assert_int_eq(s.totals.ignored, 1);
	ck_assert_int_eq(s.totals.slow, 0);
	ck_assert_int_eq(s.totals.rejected, 12);
	ck_assert(s.policy.known);
	ck_assert_int_eq(s.policy.failure_threshold, 2);
	ck_assert_int_eq(s.policy.success_threshold, 2);
	ck_assert_int_eq(s.policy.break_ms, 30000);
	ck_assert_int_eq(s.policy.half_open_max, 1);
	ck_assert_int_eq(s.policy.slot_ttl_ms, 30000);
	ck_assert_int_eq(s.policy.max_gap_ms, CBC_POLICY_NULL);
	ck_assert_int_eq(s.policy.source.failure_threshold, CBC_SOURCE_CONFIG);
	ck_assert_int_eq(s.policy.source.success_threshold, CBC_SOURCE_BUILTIN);
	ck_assert_int_eq(s.policy.source.break_ms, CBC_SOURCE_CLIENT);
	ck_assert_int_eq(s.policy.source.half_open_max, CBC_SOURCE_DEFAULTS);
	ck_assert_int_eq(s.policy.source.max_gap_ms, CBC_SOURCE_BUILTIN);
	ck_assert_str_eq(cbc_policy_source_name(s.policy.source.failure_threshold), "config");
	ck_assert_str_eq(cbc_policy_source_name(CBC_SOURCE_NONE), "none");
	ck_assert_str_eq(cbc_policy_source_name((cbc_policy_source)99), "other");
	/* policy_conflict, kept per connection. */
	ck_assert_int_eq((int)cbc_conn_last_policy_conflict(c, keys, sizeof keys), 2);
	ck_assert_str_eq(keys, "break_ms,failure_threshold");
	ck_assert_int_eq((int)cbc_conn_policy_conflicts(c), 1);
	/* A protocol 1 reply: not held, totals -1, policy not known, no
	 * conflict (the count stays). */
	ck_assert_int_eq(cbc_get(c, "svc", NULL, &s, &err), CBC_OK);
	ck_assert(!s.hold.held);
	ck_assert_int_eq(s.totals.successes, -1);
	ck_assert_int_eq(s.totals.rejected, -1);
	ck_assert(!s.policy.known);
	ck_assert_int_eq(s.policy.break_ms, 0);
	ck_assert_int_eq(s.policy.source.break_ms, CBC_SOURCE_NONE);
	ck_assert_int_eq((int)cbc_conn_last_policy_conflict(c, keys, sizeof keys), 0);
	ck_assert_str_eq(keys, "");
	ck_assert_int_eq((int)cbc_conn_policy_conflicts(c), 1);
	/* Cut to fit the caller's buffer; the count is whole. */
	ck_assert_int_eq(cbc_get(c, "v2held", NULL, &s, &err), CBC_OK);
	ck_assert_int_eq((int)cbc_conn_last_policy_conflict(c, keys, 6), 2);
	ck_assert_str_eq(keys, "break");
	ck_assert_int_eq((int)cbc_conn_last_policy_conflict(c, NULL, 0), 2);
	ck_assert_int_eq((int)cbc_conn_policy_conflicts(c), 2);
	/* Mistyped protocol 2 members are named. */
	ck_assert_int_eq(cbc_get(c, "v2badhold", NULL, &s, &err), CBC_EPROTO);
	ck_assert_msg(strstr(err.message, "snapshot.hold.state") != NULL, "%s", err.message);
	ck_assert_int_eq(cbc_get(c, "v2badpolicy", NULL, &s, &err), CBC_EPROTO);
	ck_assert_msg(strstr(err.message, "snapshot.policy.break_ms") != NULL, "%s", err.message);
	cbc_conn_free(c);
	client_stand_in_stop(&fd);
}
END_TEST

/* Did the last request the fake read carry "policy": true? */
static bool
fake_last_asked_policy(void)
{
	json_t *req = fake_log_get(fake_log_total() - 1);
	bool asked = json_is_true(json_object_get(req, "policy"));

	ck_assert_ptr_nonnull(req);
	ck_assert(asked || json_object_get(req, "policy") == NULL);
	json_decref(req);
	return asked;
}

/* Protocol 3: get carries the policy by default (nothing asked); the
 * other ops' snapshots are compact (policy_rev only). A resilient store
 * over a remote one asks for the policy on an outcome while it holds
 * none for the circuit's policy_rev: the first, and the first after a
 * snapshot of another rev; a protocol 2 snapshot (policy, no rev) is
 * kept as it is. */
START_TEST(conn_reads_protocol_3_snapshots)
{
	client_stand_in fd;
	cbc_store *remote, *res;
	cbc_conn *c;
	cbc_snapshot s;
	cbc_error err;

	__atomic_store_n(&fake_rev, 3, __ATOMIC_RELEASE);
	client_stand_in_start(&fd, fake_line, NULL);
	c = cbc_conn_new(fd.path, NULL);
	ck_assert_int_eq(cbc_get(c, "v3", NULL, &s, &err), CBC_OK);
	ck_assert(!fake_last_asked_policy());
	ck_assert(s.policy.known);
	ck_assert_int_eq(s.policy.failure_threshold, 2);
	ck_assert_int_eq(s.policy_rev, 3);
	ck_assert_int_eq(cbc_record_failure(c, "v3", NULL, &s, &err), CBC_OK);
	ck_assert(!fake_last_asked_policy());
	ck_assert(!s.policy.known);
	ck_assert_int_eq(s.policy.failure_threshold, 0);
	ck_assert_int_eq(s.policy_rev, 3);
	/* A protocol 2 snapshot: the policy, policy_rev 0. */
	ck_assert_int_eq(cbc_get(c, "v2held", NULL, &s, &err), CBC_OK);
	ck_assert(s.policy.known);
	ck_assert_int_eq(s.policy_rev, 0);
	remote = cbc_store_new_remote(c, &err);
	ck_assert_ptr_nonnull(remote);
	res = cbc_store_new_resilient(remote, NULL, &err);
	ck_assert_ptr_nonnull(res);
	ck_assert_int_eq(cbc_store_record_success(res, "v3", NULL, &s, &err), CBC_OK);
	ck_assert(fake_last_asked_policy()); /* none kept yet */
	ck_assert(s.policy.known);
	ck_assert_int_eq(cbc_store_record_failure(res, "v3", NULL, &s, &err), CBC_OK);
	ck_assert(!fake_last_asked_policy()); /* kept for rev 3 */
	ck_assert_int_eq(cbc_store_record_success(res, "v3", NULL, &s, &err), CBC_OK);
	ck_assert(!fake_last_asked_policy());
	__atomic_store_n(&fake_rev, 4, __ATOMIC_RELEASE); /* a reload */
	ck_assert_int_eq(cbc_store_record_success(res, "v3", NULL, &s, &err), CBC_OK);
	ck_assert(!fake_last_asked_policy()); /* it learns of rev 4 here */
	ck_assert_int_eq(s.policy_rev, 4);
	ck_assert_int_eq(cbc_store_record_failure(res, "v3", NULL, &s, &err), CBC_OK);
	ck_assert(fake_last_asked_policy());
	ck_assert_int_eq(cbc_store_record_failure(res, "v3", NULL, &s, &err), CBC_OK);
	ck_assert(!fake_last_asked_policy());
	/* Protocol 2: every snapshot carries the policy, none asked for
	 * after the first. */
	ck_assert_int_eq(cbc_store_record_success(res, "v2held", NULL, &s, &err), CBC_OK);
	ck_assert(fake_last_asked_policy());
	ck_assert_int_eq(cbc_store_record_success(res, "v2held", NULL, &s, &err), CBC_OK);
	ck_assert(!fake_last_asked_policy());
	cbc_store_free(res);
	cbc_store_free(remote);
	cbc_conn_free(c);
	client_stand_in_stop(&fd);
}
END_TEST

START_TEST(conn_hold_and_release)
{
	client_stand_in fd;
	cbc_conn *c;
	cbc_snapshot s;
	cbc_error err;
	json_t *req;
	char reason[CBC_REASON_MAX + 2];
	bool released = false;
	int sent;

	client_stand_in_start(&fd, fake_line, NULL);
	c = cbc_conn_new(fd.path, NULL);
	ck_assert_int_eq(cbc_hold(c, "pay", CBC_STATE_OPEN, 90000, "deploy", &s, &err), CBC_OK);
	req = fake_log_get(fake_log_total() - 1);
	ck_assert_str_eq(json_string_value(json_object_get(req, "op")), "set_state");
	ck_assert_str_eq(json_string_value(json_object_get(req, "state")), "open");
	ck_assert(json_is_true(json_object_get(req, "hold")));
	ck_assert_int_eq(json_integer_value(json_object_get(req, "ttl_ms")), 90000);
	ck_assert_str_eq(json_string_value(json_object_get(req, "reason")), "deploy");
	json_decref(req);
	ck_assert(s.hold.held);
	ck_assert_int_eq(s.hold.state, CBC_STATE_OPEN);
	ck_assert_str_eq(s.hold.by_user, "root");
	ck_assert_int_eq(s.hold.by_uid, 0);
	ck_assert_str_eq(s.hold.reason, "deploy");
	ck_assert_int_eq(s.hold.until, 91000);
	/* No ttl, no reason: neither member is sent. */
	ck_assert_int_eq(cbc_hold(c, "pay", CBC_STATE_CLOSED, 0, NULL, &s, &err), CBC_OK);
	req = fake_log_get(fake_log_total() - 1);
	ck_assert_str_eq(json_string_value(json_object_get(req, "state")), "closed");
	ck_assert_ptr_null(json_object_get(req, "ttl_ms"));
	ck_assert_ptr_null(json_object_get(req, "reason"));
	json_decref(req);
	ck_assert(s.hold.held);
	ck_assert_int_eq(s.hold.state, CBC_STATE_CLOSED);
	ck_assert_int_eq(s.hold.until, CBC_TIME_NONE);
	ck_assert(!s.hold.has_reason);
	ck_assert_int_eq(cbc_release(c, "pay", &released, &s, &err), CBC_OK);
	ck_assert(released);
	ck_assert_int_eq(s.state, CBC_STATE_HALF_OPEN);
	ck_assert(!s.hold.held);
	req = fake_log_get(fake_log_total() - 1);
	ck_assert_str_eq(json_string_value(json_object_get(req, "op")), "release");
	ck_assert_str_eq(json_string_value(json_object_get(req, "name")), "pay");
	json_decref(req);
	/* Bad arguments never reach the wire. */
	sent = fake_log_total();
	ck_assert_int_eq(cbc_hold(c, "pay", CBC_STATE_HALF_OPEN, 0, NULL, &s, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "state"));
	ck_assert_int_eq(cbc_hold(c, "pay", CBC_STATE_OPEN, -1, NULL, &s, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "ttl_ms"));
	ck_assert_int_eq(cbc_hold(c, "pay", CBC_STATE_OPEN, (INT64_C(1) << 53) + 1, NULL, &s, &err),
	    CBC_EINVAL);
	memset(reason, 'r', sizeof reason - 1);
	reason[sizeof reason - 1] = '\0';
	ck_assert_int_eq(cbc_hold(c, "pay", CBC_STATE_OPEN, 0, reason, &s, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "reason"));
	ck_assert_int_eq(cbc_hold(c, "pay", CBC_STATE_OPEN, 0, "\xff", &s, &err), CBC_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "UTF-8"));
	ck_assert_int_eq(cbc_hold(c, "", CBC_STATE_OPEN, 0, NULL, &s, &err), CBC_EINVAL);
	ck_assert_int_eq(cbc_release(c, "", NULL, &s, &err), CBC_EINVAL);
	ck_assert_int_eq(fake_log_total(), sent);
	/* A protocol 1 cbd forces without holding: that is an error. */
	ck_assert_int_eq(cbc_hold(c, "v1", CBC_STATE_OPEN, 0, NULL, &s, &err), CBC_EPROTO);
	ck_assert_msg(strstr(err.message, "not held") != NULL, "%s", err.message);
	cbc_conn_free(c);
	client_stand_in_stop(&fd);
}
END_TEST

/* Every request from first on names name with exactly `members` ctx
 * members, failure_threshold (when not 0) among them. */
static void
assert_sent_ctx(int first, const char *name, size_t members, int64_t failure_threshold)
{
	int seen = 0;

	for (int i = first; i < fake_log_total(); i++) {
		json_t *req = fake_log_get(i);
		const json_t *ctx;

		ck_assert_ptr_nonnull(req);
		ck_assert_str_eq(json_string_value(json_object_get(req, "name")), name);
		ctx = json_object_get(req, "ctx");
		ck_assert_msg(json_object_size(ctx) == members, "request %d sent ctx members %s", i,
		    json_dumps(ctx, JSON_COMPACT));
		if (failure_threshold != 0)
			ck_assert_int_eq(json_integer_value(
					     json_object_get(ctx, "failure_threshold")),
			    failure_threshold);
		json_decref(req);
		seen++;
	}
	ck_assert_int_ge(seen, 4); /* get + record, twice */
}

START_TEST(breaker_sends_only_the_policy_it_was_given)
{
	client_stand_in fd;
	cbc_breaker_options o;
	cbc_exec_result res;
	cbc_breaker *b;
	cbc_store *store;
	cbc_conn *c;
	int first, calls = 0;

	client_stand_in_start(&fd, fake_line, NULL);
	c = cbc_conn_new(fd.path, NULL);
	store = cbc_store_new_remote(c, NULL);
	/* No option set: no ctx at all, so cbd's config rules. */
	cbc_breaker_options_init(&o);
	o.name = "closed-quiet";
	o.store = store;
	/* The fake serves one connection at a time and knows no watch: this
	 * breaker runs uncached (cached mode: check_client_remote). */
	o.cache = CBC_CACHE_OFF;
	b = breaker_new_ok(&o);
	first = fake_log_total();
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_fail, &calls, &res, NULL), CBC_OK);
	ck_assert_int_eq(calls, 2);
	assert_sent_ctx(first, "closed-quiet", 0, 0);
	cbc_breaker_free(b);
	/* One option and a clock: exactly those two members. */
	o.name = "closed-declared";
	o.failure_threshold = 4;
	o.clock = vclock;
	b = breaker_new_ok(&o);
	first = fake_log_total();
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, NULL), CBC_OK);
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_fail, &calls, &res, NULL), CBC_OK);
	assert_sent_ctx(first, "closed-declared", 2, 4);
	cbc_breaker_free(b);
	cbc_store_free(store);
	cbc_conn_free(c);
	client_stand_in_stop(&fd);
}
END_TEST

START_TEST(conn_reads_trip_rule_members)
{
	client_stand_in fd;
	cbc_conn *c;
	cbc_snapshot s;
	cbc_error err;

	client_stand_in_start(&fd, fake_line, NULL);
	c = cbc_conn_new(fd.path, NULL);
	ck_assert_int_eq(cbc_get(c, "v2rate", NULL, &s, &err), CBC_OK);
	ck_assert(s.policy.known);
	ck_assert_int_eq(s.policy.trip, CBC_TRIP_RATE);
	ck_assert_int_eq(s.policy.window, CBC_WINDOW_TIME);
	ck_assert_str_eq(cbc_trip_name(s.policy.trip), "rate");
	ck_assert_str_eq(cbc_window_name(s.policy.window), "time");
	ck_assert_int_eq(s.policy.window_size, 10000);
	ck_assert_int_eq(s.policy.minimum_calls, 5);
	ck_assert_int_eq(s.policy.failure_rate, 50);
	ck_assert_int_eq(s.policy.slow_call_ms, 2000);
	ck_assert_int_eq(s.policy.slow_call_rate, 80);
	ck_assert_int_eq(s.policy.min_reporters, 2);
	ck_assert_int_eq(s.policy.reporter_window_ms, 60000);
	ck_assert_int_eq(s.policy.break_backoff, 2);
	ck_assert_int_eq(s.policy.break_max_ms, CBC_POLICY_NULL);
	ck_assert(s.policy.has_preset);
	ck_assert_str_eq(s.policy.preset, "http-external");
	ck_assert_int_eq(s.policy.source.trip, CBC_SOURCE_CLIENT);
	ck_assert_int_eq(s.policy.source.window, CBC_SOURCE_CONFIG);
	ck_assert_int_eq(s.policy.source.slow_call_ms, CBC_SOURCE_DEFAULTS);
	ck_assert_int_eq(s.policy.source.preset, CBC_SOURCE_CLIENT);
	ck_assert_int_eq(s.policy.source.failure_rate, CBC_SOURCE_NONE); /* not sent */
	ck_assert_int_eq(s.current_break_ms, 60000);
	ck_assert(s.window.known);
	ck_assert_int_eq(s.window.calls, 3);
	ck_assert_int_eq(s.window.failures, 2);
	ck_assert_int_eq(s.window.slow, 1);
	ck_assert(s.window.failure_rate > 66.66 && s.window.failure_rate < 66.67);
	ck_assert(s.window.slow_call_rate > 33.33 && s.window.slow_call_rate < 33.34);
	ck_assert_int_eq(s.reporters, 1);
	ck_assert_int_eq(s.totals.slow, 1);
	/* The older reply (no trip rule members): not reported. */
	ck_assert_int_eq(cbc_get(c, "svc", NULL, &s, &err), CBC_OK);
	ck_assert_int_eq(s.policy.trip, CBC_TRIP_UNSET);
	ck_assert(!s.policy.has_preset);
	ck_assert_int_eq(s.current_break_ms, -1);
	ck_assert(!s.window.known);
	ck_assert_int_eq(s.reporters, -1);
	/* FAKE_V2_SNAPSHOT: trip consecutive, reporters, no window. */
	ck_assert_int_eq(cbc_get(c, "v2held", NULL, &s, &err), CBC_OK);
	ck_assert_int_eq(s.policy.trip, CBC_TRIP_CONSECUTIVE);
	ck_assert_int_eq(s.reporters, 3);
	ck_assert(!s.window.known);
	/* Mistyped members are named. */
	ck_assert_int_eq(cbc_get(c, "v2badwindow", NULL, &s, &err), CBC_EPROTO);
	ck_assert_msg(strstr(err.message, "snapshot.window.failure_rate") != NULL, "%s",
	    err.message);
	ck_assert_int_eq(cbc_get(c, "v2badtrip", NULL, &s, &err), CBC_EPROTO);
	ck_assert_msg(strstr(err.message, "snapshot.policy.trip") != NULL, "%s", err.message);
	cbc_conn_free(c);
	client_stand_in_stop(&fd);
}
END_TEST

START_TEST(breaker_sends_every_trip_rule_option)
{
	client_stand_in fd;
	cbc_breaker_options o;
	cbc_exec_result res;
	cbc_breaker *b;
	cbc_store *store;
	cbc_conn *c;
	int first, calls = 0, records = 0, gets = 0;
	char preset[] = "service";

	client_stand_in_start(&fd, fake_line, NULL);
	c = cbc_conn_new(fd.path, NULL);
	/* Every request must reach the fake, also under valgrind on a busy
	 * machine: timeouts far above any real delay (a bound, not a speed). */
	ck_assert_int_eq(cbc_conn_set_timeouts(c, FAKE_SLOW_TIMEOUT_MS, FAKE_SLOW_TIMEOUT_MS, NULL),
	    CBC_OK);
	store = cbc_store_new_remote(c, NULL);
	cbc_breaker_options_init(&o);
	o.name = "closed-rates";
	o.store = store;
	/* The fake serves one connection at a time and knows no watch: this
	 * breaker runs uncached (cached mode: check_client_remote). */
	o.cache = CBC_CACHE_OFF;
	o.trip = CBC_TRIP_RATE;
	o.window = CBC_WINDOW_TIME;
	o.window_size = 5000;
	o.minimum_calls = 3;
	o.failure_rate = 40;
	o.slow_call_ms = 200;
	o.slow_call_rate = 80;
	o.min_reporters = 2;
	o.reporter_window_ms = 30000;
	o.break_ms = 1000;
	o.break_backoff = 3;
	o.break_max_ms = 90000;
	o.preset = preset;
	b = breaker_new_ok(&o);
	preset[0] = 'X'; /* copied by the breaker */
	first = fake_log_total();
	ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, &res, NULL), CBC_OK);
	ck_assert_int_eq(calls, 1);
	for (int i = first; i < fake_log_total(); i++) {
		json_t *req = fake_log_get(i);
		const json_t *ctx = json_object_get(req, "ctx");
		const char *op = json_string_value(json_object_get(req, "op"));

		ck_assert_ptr_nonnull(req);
		ck_assert_int_eq(json_object_size(ctx), 13);
		ck_assert_str_eq(json_string_value(json_object_get(ctx, "trip")), "rate");
		ck_assert_str_eq(json_string_value(json_object_get(ctx, "window")), "time");
		ck_assert_str_eq(json_string_value(json_object_get(ctx, "preset")), "service");
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "window_size")), 5000);
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "minimum_calls")), 3);
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "failure_rate")), 40);
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "slow_call_ms")), 200);
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "slow_call_rate")), 80);
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "min_reporters")), 2);
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "reporter_window_ms")),
		    30000);
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "break_backoff")), 3);
		ck_assert_int_eq(json_integer_value(json_object_get(ctx, "break_max_ms")), 90000);
		if (strncmp(op, "record", 6) == 0) {
			/* the call's duration, outside ctx */
			ck_assert(json_is_integer(json_object_get(req, "duration_ms")));
			ck_assert_int_ge(json_integer_value(json_object_get(req, "duration_ms")),
			    0);
			records++;
		} else {
			/* the uncached path asks with allow (protocol 3 §6) */
			ck_assert_str_eq(op, "allow");
			ck_assert_ptr_null(json_object_get(req, "duration_ms"));
			gets++;
		}
		json_decref(req);
	}
	ck_assert_int_eq(records, 1);
	ck_assert_int_eq(gets, 1);
	cbc_breaker_free(b);
	cbc_store_free(store);
	cbc_conn_free(c);
	client_stand_in_stop(&fd);
}
END_TEST

/* ---------- cached mode against a counting stand-in ---------- */

/* Connections the counting stand-in serves at once (cached breakers
 * have two: their store's and the cache's watch connection). */
#define COUNTING_CONNS 8
/* Successes of the counting tests: a tight loop of cached calls. */
#define COUNTING_CALLS 20000
/* Bound on the waits for the stand-in to have read every line: far
 * above a delivery, only a lost line reaches it. */
#define COUNTING_WAIT_MS 20000

/* A stand-in cbd for cached breakers: serves every connection at once
 * (a thread each), answers hello (with "outcome_counts" when counts),
 * watch (a closed circuit, its policy known), allow and awaited records,
 * and counts the noreply success lines and the successes they carry. */
typedef struct counting_fake {
	client_stand_in listen; /* its socket (no thread of its own) */
	bool counts;
	pthread_t accepter, conn_thread[COUNTING_CONNS];
	int conn_fd[COUNTING_CONNS];
	int conns;
	pthread_mutex_t lock;
	int64_t lines; /* noreply record_success lines */
	int64_t counted_lines; /* of them with "count" */
	int64_t successes; /* successes they carry */
	int64_t timed; /* of them with duration_ms */
	int64_t hellos;
} counting_fake;

static const char counting_snapshot[] =
    "{\"name\":\"%s\",\"state\":\"closed\",\"failure_count\":0,\"success_count\":0,"
    "\"last_failure_at\":null,\"opened_at\":null,\"retry_after_ms\":0,\"policy_rev\":1,"
    "\"hold\":null,\"policy\":{\"failure_threshold\":1000000,\"break_ms\":30000,"
    "\"trip\":\"consecutive\",\"source\":{}}}";

static bool
counting_line(const char *line, char *out, size_t size, void *arg)
{
	counting_fake *f = arg;
	json_t *req = json_loads(line, 0, NULL);
	const char *op = json_string_value(json_object_get(req, "op"));
	const char *name = json_string_value(json_object_get(req, "name"));
	const json_t *id = json_object_get(req, "id");
	char idtext[96] = "null", snap[1024];

	if (json_is_string(id))
		snprintf(idtext, sizeof idtext, "\"%s\"", json_string_value(id));
	else if (json_is_integer(id))
		snprintf(idtext, sizeof idtext, "%lld", (long long)json_integer_value(id));
	if (op == NULL) {
		snprintf(out, size, "{\"ok\":false,\"error\":{\"code\":\"bad_request\"}}\n");
	} else if (strcmp(op, "hello") == 0) {
		pthread_mutex_lock(&f->lock);
		f->hellos++;
		pthread_mutex_unlock(&f->lock);
		snprintf(out, size,
		    "{\"id\":%s,\"ok\":true,\"server\":\"fake\",\"version\":\"0\",\"protocol\":3%s}"
		    "\n",
		    idtext, f->counts ? ",\"outcome_counts\":[\"rejected\",\"success\"]" : "");
	} else if (strcmp(op, "watch") == 0) {
		/* (Every name's snapshot: the names of a reconnect come in
		 * one watch; a reply past the stand-in's line size is cut.) */
		const json_t *names = json_object_get(req, "names");
		size_t used = (size_t)snprintf(out, size, "{\"ok\":true,\"snapshots\":[");

		for (size_t i = 0; i < json_array_size(names) && used < size; i++) {
			snprintf(snap, sizeof snap, counting_snapshot,
			    json_string_value(json_array_get(names, i)));
			used += (size_t)snprintf(out + used, size - used, "%s%s", i > 0 ? "," : "",
			    snap);
		}
		if (used < size)
			snprintf(out + used, size - used, "]}\n");
	} else if (json_is_true(json_object_get(req, "noreply"))) {
		const json_t *count = json_object_get(req, "count");

		pthread_mutex_lock(&f->lock);
		if (strcmp(op, "record_success") == 0) {
			f->lines++;
			f->counted_lines += count != NULL;
			f->successes += count != NULL ? json_integer_value(count) : 1;
			f->timed += json_object_get(req, "duration_ms") != NULL;
		}
		pthread_mutex_unlock(&f->lock);
	} else if (strcmp(op, "allow") == 0) {
		snprintf(out, size,
		    "{\"id\":%s,\"ok\":true,\"allowed\":true,\"state\":\"closed\"}\n", idtext);
	} else {
		snprintf(snap, sizeof snap, counting_snapshot, name != NULL ? name : "");
		snprintf(out, size, "{\"id\":%s,\"ok\":true,\"snapshot\":%s}\n", idtext, snap);
	}
	json_decref(req);
	return true;
}

/* The stand-in a connection thread serves (one at a time per test). */
static counting_fake *counting_current;

static void *
counting_conn_serve(void *arg)
{
	client_serve_lines(*(int *)arg, counting_line, counting_current);
	return NULL;
}

static void *
counting_serve(void *arg)
{
	counting_fake *f = arg;

	for (;;) {
		int c = accept(f->listen.listen_fd, NULL, NULL);

		if (c < 0)
			return NULL;
		pthread_mutex_lock(&f->lock);
		if (f->conns == COUNTING_CONNS) {
			pthread_mutex_unlock(&f->lock);
			close(c);
			continue;
		}
		f->conn_fd[f->conns] = c;
		pthread_mutex_unlock(&f->lock);
		/* (Only this thread adds connections.) */
		ck_assert_int_eq(pthread_create(&f->conn_thread[f->conns], NULL,
				     counting_conn_serve, &f->conn_fd[f->conns]),
		    0);
		pthread_mutex_lock(&f->lock);
		f->conns++;
		pthread_mutex_unlock(&f->lock);
	}
}

static void
counting_start(counting_fake *f, bool counts)
{
	memset(f, 0, sizeof *f);
	/* A listening socket without a thread of the stand-in's own. */
	client_stand_in_start(&f->listen, NULL, NULL);
	f->counts = counts;
	ck_assert_int_eq(pthread_mutex_init(&f->lock, NULL), 0);
	counting_current = f;
	ck_assert_int_eq(pthread_create(&f->accepter, NULL, counting_serve, f), 0);
}

static void
counting_stop(counting_fake *f)
{
	int n;

	shutdown(f->listen.listen_fd, SHUT_RDWR);
	pthread_join(f->accepter, NULL);
	pthread_mutex_lock(&f->lock);
	n = f->conns;
	pthread_mutex_unlock(&f->lock);
	for (int i = 0; i < n; i++) {
		shutdown(f->conn_fd[i], SHUT_RDWR);
		pthread_join(f->conn_thread[i], NULL);
		close(f->conn_fd[i]);
	}
	client_stand_in_stop(&f->listen);
	pthread_mutex_destroy(&f->lock);
	counting_current = NULL;
}

/* Wait until the stand-in has read successes carried in noreply lines,
 * or until COUNTING_WAIT_MS passed without any; the count then. */
static int64_t
counting_wait(counting_fake *f, int64_t successes)
{
	struct timespec start = { 0, 0 }, now;
	int64_t got, seen = -1;

	for (;;) {
		pthread_mutex_lock(&f->lock);
		got = f->successes;
		pthread_mutex_unlock(&f->lock);
		clock_gettime(CLOCK_MONOTONIC, &now);
		/* The bound runs from the last progress: under valgrind the
		 * stand-in's thread reads 20,000 lines slower than 20 s (CI
		 * saw 18,501 when a bound from the start ran out). */
		if (got != seen) {
			seen = got;
			start = now;
		}
		if (got >= successes ||
		    (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
			COUNTING_WAIT_MS)
			return got;
		usleep(2000);
	}
}

/* A cached breaker named name on the stand-in, deciding from its cache
 * (bounded wait: permits reported ignored until one came from it); on
 * *conn and *store, made when *conn is NULL. */
static cbc_breaker *
counting_breaker(counting_fake *f, const char *name, cbc_conn **conn, cbc_store **store)
{
	cbc_breaker_options o;
	cbc_breaker *b;
	cbc_permit p;

	if (*conn == NULL) {
		*conn = cbc_conn_new(f->listen.path, NULL);
		ck_assert_ptr_nonnull(*conn);
		ck_assert_int_eq(cbc_conn_set_timeouts(*conn, FAKE_SLOW_TIMEOUT_MS,
				     FAKE_SLOW_TIMEOUT_MS, NULL),
		    CBC_OK);
		*store = cbc_store_new_remote(*conn, NULL);
	}
	cbc_breaker_options_init(&o);
	o.name = name;
	o.store = *store;
	o.cache = CBC_CACHE_ON;
	o.store_policy = CBC_POLICY_REJECT;
	b = breaker_new_ok(&o);
	for (int i = 0; i < COUNTING_WAIT_MS; i++) {
		cbc_cache_stats cs;

		if (cbc_breaker_acquire(b, &p, NULL) == CBC_OK) {
			cbc_breaker_report(b, &p, CBC_OUTCOME_IGNORE, NULL);
			/* Deciding, and knowing whether the stand-in takes
			 * counts (the hello's reply follows the watch's: a
			 * loop run in between would go as lines). */
			if (p.cached && cbc_breaker_cache_stats(b, &cs, NULL) == CBC_OK &&
			    cs.folding == f->counts)
				return b;
		}
		usleep(1000);
	}
	ck_abort_msg("the cache of %s never decided (or never knew about counts)", name);
	return b;
}

/* A stand-in cbd whose hello has no outcome_counts (an older cbd): every
 * success goes as a line of its own, with its duration. (_i 1: the same
 * loop folds when hello lists "success".) */
START_TEST(cached_successes_fold_only_when_hello_says_so)
{
	counting_fake f;
	cbc_cache_stats cs;
	cbc_breaker *b;
	cbc_store *store = NULL;
	cbc_conn *conn = NULL;
	int64_t got;
	int calls = 0;

	counting_start(&f, _i == 1);
	b = counting_breaker(&f, "counting", &conn, &store);
	for (int i = 0; i < COUNTING_CALLS; i++)
		ck_assert_int_eq(cbc_breaker_execute(b, client_call_ok, &calls, NULL, NULL),
		    CBC_OK);
	ck_assert_int_eq(cbc_breaker_cache_stats(b, &cs, NULL), CBC_OK);
	ck_assert_int_eq(cs.store_reports, 0);
	cbc_breaker_free(b); /* the release writes what is queued */
	got = counting_wait(&f, COUNTING_CALLS);
	ck_assert_msg(got == COUNTING_CALLS,
	    "%lld of %d successes read (cache: %llu connects, %llu disconnects, %llu probe "
	    "timeouts, %llu waits for room, %llu lines)",
	    (long long)got, COUNTING_CALLS, (unsigned long long)cs.connects,
	    (unsigned long long)cs.disconnects, (unsigned long long)cs.probe_timeouts,
	    (unsigned long long)cs.out_full, (unsigned long long)cs.noreply_lines);
	pthread_mutex_lock(&f.lock);
	if (_i == 0) {
		ck_assert_int_eq(cs.folded, 0);
		ck_assert_int_eq(f.counted_lines, 0);
		ck_assert_int_eq(f.lines, COUNTING_CALLS);
		ck_assert_int_eq(f.timed, COUNTING_CALLS);
	} else {
		ck_assert_int_gt(cs.folded, 0);
		ck_assert_int_gt(f.counted_lines, 0);
		/* Far fewer lines than successes (a line a flush at most). */
		ck_assert_msg(f.lines * 10 < COUNTING_CALLS, "%lld lines", (long long)f.lines);
		/* A counted line carries no duration (nor does a fold of one
		 * success: the plain line). */
		ck_assert_int_le(f.timed, f.lines - f.counted_lines);
	}
	ck_assert_int_ge(f.hellos, 1);
	pthread_mutex_unlock(&f.lock);
	cbc_store_free(store);
	cbc_conn_free(conn);
	counting_stop(&f);
}
END_TEST

/* More breakers (circuits) than the cache keeps folds open (64), called
 * in turn in runs of COUNTING_RUN: a new one finds the table full and
 * every fold goes out; every success still counted once. */
#define COUNTING_WIDE 80
#define COUNTING_RUN 50
START_TEST(cached_folds_beyond_the_table_stay_exact)
{
	counting_fake f;
	cbc_breaker *b[COUNTING_WIDE];
	cbc_cache_stats cs;
	cbc_store *store = NULL;
	cbc_conn *conn = NULL;
	char name[32];

	counting_start(&f, true);
	for (int i = 0; i < COUNTING_WIDE; i++) {
		snprintf(name, sizeof name, "wide-%d", i);
		b[i] = counting_breaker(&f, name, &conn, &store);
	}
	for (int i = 0; i < COUNTING_CALLS; i++)
		ck_assert_int_eq(cbc_breaker_execute(b[i / COUNTING_RUN % COUNTING_WIDE],
				     client_call_ok, NULL, NULL, NULL),
		    CBC_OK);
	ck_assert_int_eq(cbc_breaker_cache_stats(b[0], &cs, NULL), CBC_OK);
	ck_assert_int_eq(cs.store_reports, 0);
	for (int i = 0; i < COUNTING_WIDE; i++)
		cbc_breaker_free(b[i]);
	ck_assert_int_eq(counting_wait(&f, COUNTING_CALLS), COUNTING_CALLS);
	pthread_mutex_lock(&f.lock);
	ck_assert_int_gt(f.counted_lines, 0);
	ck_assert_int_lt(f.lines * 10, COUNTING_CALLS);
	pthread_mutex_unlock(&f.lock);
	cbc_store_free(store);
	cbc_conn_free(conn);
	counting_stop(&f);
}
END_TEST

static Suite *
client_suite(void)
{
	Suite *s = suite_create("libcbclient (no daemon)");
	TCase *tc;

	tc = tcase_create("api");
	tcase_add_test(tc, every_status_has_a_string);
	tcase_add_test(tc, state_names_round_trip);
	tcase_add_test(tc, versions_agree);
	tcase_add_loop_test(tc, invalid_options_are_refused_naming_the_option, 0,
	    (int)(sizeof option_cases / sizeof option_cases[0]));
	tcase_add_test(tc, valid_options_are_accepted);
	tcase_add_test(tc, store_arguments_are_checked);
	suite_add_tcase(s, tc);

	tc = tcase_create("breaker");
	tcase_add_test(tc, breaker_trips_then_fails_fast_with_retry_after);
	tcase_add_test(tc, fallback_runs_when_open);
	tcase_add_test(tc, error_filter_decides_what_counts);
	tcase_add_test(tc, half_open_reserves_a_slot_for_the_trial);
	tcase_add_test(tc, half_open_failure_reopens);
	tcase_add_test(tc, half_open_max_bounds_concurrent_permits);
	tcase_add_test(tc, two_step_form);
	tcase_add_test(tc, force_state_and_refresh_see_changes_made_elsewhere);
	suite_add_tcase(s, tc);

	tc = tcase_create("trip rules");
	tcase_add_test(tc, error_filter_is_never_asked_about_success);
	tcase_add_test(tc, classify_is_three_way_and_never_sees_zero);
	tcase_add_loop_test(tc, http_classifier_table, 0,
	    (int)(sizeof http_cases / sizeof http_cases[0]));
	tcase_add_test(tc, http_classifier_in_a_breaker);
	tcase_add_test(tc, execute_measures_the_duration_and_a_slow_rule_opens);
	tcase_add_test(tc, report_sends_a_duration);
	tcase_add_test(tc, rate_rule_with_a_builtin_preset_runs_locally);
	tcase_add_test(tc, local_store_reports_window_and_grown_break);
	tcase_add_test(tc, local_policy_runs_the_rate_rule_cbd_reported);
	tcase_add_test(tc, local_policy_keeps_a_grown_break);
	suite_add_tcase(s, tc);

	tc = tcase_create("resilient");
	tcase_add_test(tc, local_policy_seeds_from_last_snapshot_and_never_latches);
	tcase_add_test(tc, local_policy_keeps_an_open_circuit_open);
	tcase_add_test(tc, local_policy_breaks_with_the_policy_cbd_reported);
	tcase_add_test(tc, local_policy_kept_through_compact_snapshots_of_its_rev);
	tcase_add_test(tc, local_policy_keeps_a_hold);
	tcase_add_test(tc, local_policy_breaker_keeps_protecting);
	tcase_add_test(tc, allow_policy_lets_calls_flow);
	tcase_add_test(tc, reject_policy_surfaces_pre_call_errors_only);
	tcase_add_test(tc, answers_that_are_refusals_are_not_degraded);
	tcase_add_test(tc, timeout_backoff_skips_then_retries);
	tcase_add_test(tc, resilient_options_are_checked);
	suite_add_tcase(s, tc);

	tc = tcase_create("connection");
	tcase_add_test(tc, conn_socket_path_resolution);
	tcase_add_test(tc, conn_missing_socket_fails_fast_naming_it);
	tcase_add_test(tc, conn_silent_daemon_times_out);
	tcase_add_test(tc, conn_replies_are_checked);
	tcase_add_test(tc, conn_reads_protocol_2_snapshots);
	tcase_add_test(tc, conn_reads_protocol_3_snapshots);
	tcase_add_test(tc, conn_hold_and_release);
	tcase_add_test(tc, breaker_sends_only_the_policy_it_was_given);
	tcase_add_test(tc, conn_reads_trip_rule_members);
	tcase_add_test(tc, breaker_sends_every_trip_rule_option);
	suite_add_tcase(s, tc);

	tc = tcase_create("cached");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, cached_successes_fold_only_when_hello_says_so, 0, 2);
	tcase_add_test(tc, cached_folds_beyond_the_table_stay_exact);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	static contract_impl local_impl = { .name = "contract: local store" };
	static contract_impl resilient_impl = { .name = "contract: resilient(local) store" };
	signal(SIGPIPE, SIG_IGN);
	client_contract_ops(&local_impl);
	local_impl.create = local_create;
	local_impl.teardown = box_teardown;
	client_contract_ops(&resilient_impl);
	resilient_impl.create = resilient_local_create;
	resilient_impl.teardown = box_teardown;
	return check_run(client_suite(), contract_suite(&local_impl),
	    contract_suite(&resilient_impl), NULL);
}
