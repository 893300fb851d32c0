/* SPDX-License-Identifier: Apache-2.0 */
/*
 * retry.c — cbc_retry_*: retries with exponential backoff (full jitter)
 * and a per-attempt deadline around a breaker. The breaker is asked
 * before every attempt, every attempt's outcome is reported to it, and a
 * refusal ends the run. No threads; the clock, sleep and random source
 * are the options' (defaults: CLOCK_MONOTONIC, nanosleep, getrandom).
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "internal.h"

/* The largest shift of base_ms (2^62 overflows nothing below the cap). */
#define RETRY_SHIFT_MAX 62
#define MS_PER_S 1000
#define NS_PER_MS 1000000L

static int64_t
default_clock(void *user)
{
	struct timespec ts;

	(void)user;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * MS_PER_S + ts.tv_nsec / NS_PER_MS;
}

static void
default_sleep(int64_t ms, void *user)
{
	struct timespec req, rem;

	(void)user;
	if (ms <= 0)
		return;
	req.tv_sec = (time_t)(ms / MS_PER_S);
	req.tv_nsec = (long)(ms % MS_PER_S) * NS_PER_MS;
	while (nanosleep(&req, &rem) != 0 && errno == EINTR)
		req = rem;
}

/* getrandom; the monotonic clock mixed (splitmix64) if it fails. */
static uint64_t
default_rand(void *user)
{
	uint64_t v = 0;
	struct timespec ts;

	(void)user;
	if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
		return v;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	v = (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
	v += UINT64_C(0x9e3779b97f4a7c15);
	v = (v ^ (v >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	v = (v ^ (v >> 27)) * UINT64_C(0x94d049bb133111eb);
	return v ^ (v >> 31);
}

void
cbc_retry_options_init(cbc_retry_options *opts)
{
	if (opts == NULL)
		return;
	memset(opts, 0, sizeof *opts);
	opts->max_attempts = CBC_RETRY_DEFAULT_ATTEMPTS;
	opts->base_ms = CBC_RETRY_DEFAULT_BASE_MS;
	opts->max_ms = CBC_RETRY_DEFAULT_MAX_MS;
}

cbc_status
cbc_retry_options_check(const cbc_retry_options *opts, cbc_error *err)
{
	if (opts == NULL)
		return cbci_fail(err, CBC_EINVAL, "retry options: opts is required");
	if (opts->max_attempts < 1 || opts->max_attempts > CBC_RETRY_ATTEMPTS_MAX)
		return cbci_fail(err, CBC_EINVAL,
		    "retry options: max_attempts must be 1..%d (got %d)", CBC_RETRY_ATTEMPTS_MAX,
		    opts->max_attempts);
	if (opts->timeout_ms < 0 || opts->timeout_ms > CBC_RETRY_TIMEOUT_MAX_MS)
		return cbci_fail(err, CBC_EINVAL,
		    "retry options: timeout_ms must be 0..%lld (got %lld)",
		    (long long)CBC_RETRY_TIMEOUT_MAX_MS, (long long)opts->timeout_ms);
	if (opts->max_ms < 0 || opts->max_ms > CBC_RETRY_DELAY_MAX_MS)
		return cbci_fail(err, CBC_EINVAL,
		    "retry options: max_ms must be 0..%lld (got %lld)",
		    (long long)CBC_RETRY_DELAY_MAX_MS, (long long)opts->max_ms);
	if (opts->base_ms < 0 || opts->base_ms > opts->max_ms)
		return cbci_fail(err, CBC_EINVAL,
		    "retry options: base_ms must be 0..max_ms (%lld) (got %lld)",
		    (long long)opts->max_ms, (long long)opts->base_ms);
	cbci_error_clear(err);
	return CBC_OK;
}

/* min(max_ms, base_ms * 2^(retry-1)) without overflow. */
static int64_t
delay_cap(const cbc_retry_options *opts, int retry)
{
	int shift = retry - 1;
	int64_t cap = opts->base_ms;

	if (shift > RETRY_SHIFT_MAX)
		shift = RETRY_SHIFT_MAX;
	while (shift-- > 0 && cap < opts->max_ms)
		cap *= 2;
	return cap < opts->max_ms ? cap : opts->max_ms;
}

int64_t
cbc_retry_delay_ms(const cbc_retry_options *opts, int retry)
{
	cbc_retry_rand_fn rnd;
	int64_t cap;

	if (opts == NULL || retry < 1)
		return 0;
	cap = delay_cap(opts, retry);
	if (cap <= 0)
		return 0;
	rnd = opts->rand != NULL ? opts->rand : default_rand;
	return (int64_t)(rnd(opts->user) % ((uint64_t)cap + 1));
}

/* One run's view of the options and its hooks. */
typedef struct run {
	const cbc_retry_options *o;
	cbc_breaker *b;
	cbc_retry_clock_fn clock;
	bool open_announced; /* on_circuit_open fired for this open period */
} run;

static void
announce_open(run *r, int64_t retry_after_ms)
{
	if (r->open_announced)
		return;
	r->open_announced = true;
	if (r->o->hooks.on_circuit_open != NULL)
		r->o->hooks.on_circuit_open(retry_after_ms, r->o->user);
}

/* Fire the hook of a state change the breaker was seen making. */
static void
state_hooks(run *r, cbc_state before, cbc_state after)
{
	if (after != CBC_STATE_OPEN)
		r->open_announced = false;
	if (before == after)
		return;
	if (after == CBC_STATE_HALF_OPEN && r->o->hooks.on_circuit_half_open != NULL)
		r->o->hooks.on_circuit_half_open(r->o->user);
	else if (after == CBC_STATE_CLOSED && r->o->hooks.on_circuit_closed != NULL)
		r->o->hooks.on_circuit_closed(r->o->user);
	else if (after == CBC_STATE_OPEN)
		announce_open(r, CBC_TIME_NONE);
}

/* Acquire a permit for one attempt (no breaker: always granted); the
 * attempts after the first are asked as retries (protocol 3: cbd's retry
 * budget counts them, and a budget refusal ends the run). */
static cbc_status
attempt_acquire(run *r, int attempt, cbc_permit *p, cbc_retry_result *res, cbc_error *err)
{
	cbc_state before;
	cbc_status st;

	memset(p, 0, sizeof *p);
	if (r->b == NULL)
		return CBC_OK;
	before = cbc_breaker_state(r->b);
	st = cbci_breaker_acquire(r->b, p, attempt > 1, err);
	if (st == CBC_EOPEN || st == CBC_EBULKHEAD || st == CBC_EBUDGET) {
		state_hooks(r, before, cbc_breaker_state(r->b));
		res->retry_after_ms = p->retry_after_ms;
		res->reason = p->reason;
		if (st == CBC_EOPEN)
			announce_open(r, p->retry_after_ms);
		return st;
	}
	if (st == CBC_OK)
		state_hooks(r, before, cbc_breaker_state(r->b));
	return st;
}

/* Report one attempt's outcome (store errors are never reported here). */
static void
attempt_report(run *r, cbc_permit *p, cbc_outcome outcome, int64_t duration_ms)
{
	cbc_state before;

	if (r->b == NULL)
		return;
	before = cbc_breaker_state(r->b);
	(void)cbc_breaker_report_duration(r->b, p, outcome, duration_ms, NULL);
	state_hooks(r, before, cbc_breaker_state(r->b));
}

cbc_status
cbc_retry_execute(cbc_breaker *breaker, const cbc_retry_options *opts, cbc_retry_fn fn, void *arg,
    cbc_retry_result *out, cbc_error *err)
{
	cbc_retry_options defaults;
	cbc_retry_result res;
	cbc_retry_sleep_fn sleep_fn;
	cbc_permit permit;
	cbc_status st;
	run r;
	int attempt;

	memset(&res, 0, sizeof res);
	if (out != NULL)
		*out = res;
	if (fn == NULL)
		return cbci_fail(err, CBC_EINVAL, "fn is required");
	if (opts == NULL) {
		cbc_retry_options_init(&defaults);
		opts = &defaults;
	}
	st = cbc_retry_options_check(opts, err);
	if (st != CBC_OK)
		return st;
	r.o = opts;
	r.b = breaker;
	r.clock = opts->clock != NULL ? opts->clock : default_clock;
	r.open_announced = false;
	sleep_fn = opts->sleep != NULL ? opts->sleep : default_sleep;

	for (attempt = 1;; attempt++) {
		int64_t start, end, deadline, delay;
		bool more;

		st = attempt_acquire(&r, attempt, &permit, &res, err);
		if (st != CBC_OK)
			break;
		start = r.clock(opts->user);
		deadline = opts->timeout_ms > 0 ? start + opts->timeout_ms : CBC_RETRY_NO_DEADLINE;
		res.result = fn(arg, deadline);
		end = r.clock(opts->user);
		res.attempts = attempt;
		res.timed_out = end >= deadline;
		if (res.timed_out)
			res.outcome = CBC_OUTCOME_FAILURE;
		else if (breaker != NULL)
			res.outcome = cbci_breaker_classify(breaker, res.result);
		else
			res.outcome = res.result == 0 ? CBC_OUTCOME_SUCCESS : CBC_OUTCOME_FAILURE;
		attempt_report(&r, &permit, res.outcome, end > start ? end - start : 0);
		res.succeeded = res.outcome == CBC_OUTCOME_SUCCESS;
		if (res.succeeded) {
			cbci_error_clear(err);
			st = CBC_OK;
			break;
		}
		if (res.timed_out && opts->hooks.on_timeout != NULL)
			opts->hooks.on_timeout(attempt, opts->user);
		if (opts->hooks.on_failure != NULL)
			opts->hooks.on_failure(attempt, res.result, opts->user);
		more = attempt < opts->max_attempts &&
		    (opts->retry_on == NULL ||
			opts->retry_on(res.result, res.timed_out, opts->user));
		if (!more) {
			st = res.timed_out ? cbci_fail(err, CBC_ETIMEOUT,
						 "attempt %d ran past its timeout_ms (%lld)",
						 attempt, (long long)opts->timeout_ms)
					   : CBC_OK;
			if (st == CBC_OK)
				cbci_error_clear(err);
			break;
		}
		/* This report opened the circuit: no backoff, the next acquire
		 * is refused (or, its break elapsed, is a trial). */
		if (breaker != NULL && cbc_breaker_state(breaker) == CBC_STATE_OPEN)
			continue;
		delay = cbc_retry_delay_ms(opts, attempt);
		if (opts->hooks.on_retry != NULL)
			opts->hooks.on_retry(attempt, res.result, delay, opts->user);
		sleep_fn(delay, opts->user);
	}
	if (out != NULL)
		*out = res;
	return st;
}
