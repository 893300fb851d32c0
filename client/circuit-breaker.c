/* SPDX-License-Identifier: Apache-2.0 */
/*
 * circuit-breaker.c — the breaker API over a store: permit decisions
 * (get, cas open -> half_open once the break elapsed, a trial slot in
 * half_open), outcome bookkeeping (three-way classification of a call's
 * result, the call's duration), observed transitions and forced states.
 *
 * The store holds the truth; the breaker keeps only the last state it
 * observed, to fire on_state_change once per transition it sees. A cached
 * breaker (cache.c) first asks the process's watch cache, and goes to
 * the store only when the cache cannot decide.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* The name of a breaker on a private store when none is given. */
#define BREAKER_DEFAULT_NAME "default"
/* retry_after_ms hint when half_open has no free trial slot: the trial
 * usually ends well before its slot's ttl, so we cap the hint here. */
#define BREAKER_TRIAL_RETRY_HINT_MS 1000
/* Bounds of timeout_backoff_ms (as for the resilient store). */
#define BREAKER_BACKOFF_MAX 3600000
/* Largest duration_ms a report carries (protocol 2: 0..2^53). */
#define BREAKER_DURATION_MAX CB_TIME_MAX
/* Room for a noreply outcome line: its prefix (op, name, ctx) plus the
 * duration and the end. A breaker whose prefix does not fit is not
 * cached (a ctx cannot grow it near this: names are <= 256 bytes). */
#define BREAKER_LINE_MAX 4096
/* Room for `,"duration_ms":N}` or `,"outcome":"rejected","count":N}`
 * and the newline. */
#define BREAKER_LINE_TAIL 48
/* Refusals made from the cache are reported to cbd (record, outcome
 * rejected, protocol 3 §6) in batches: the first one waits at most this
 * long for others while refusals go on (ms); the batch also goes when the
 * cache stops refusing, and when the breaker is freed. */
#define BREAKER_REJECTED_FLUSH_MS 1000

struct cbc_breaker {
	pthread_mutex_t lock;
	cbc_store *store; /* owned: a private local or a resilient wrapper */
	cbc_ctx ctx; /* the policy members given (0 = not given) */
	cb_policy policy; /* ctx resolved with the built-in defaults */
	cbc_breaker_options opts;
	cbc_state observed;
	char name[CBC_NAME_MAX + 1];
	char preset[CBC_PRESET_MAX + 1]; /* ctx.preset points here when given */
	/* Cached mode: the process's cache, this circuit's entry in it, the
	 * fork generation they belong to, and the noreply outcome lines
	 * without their closing brace (success, failure). */
	cbci_cache *cache;
	cbci_cache_entry *entry;
	unsigned cache_gen;
	char *line[2];
	size_t line_len[2];
	/* A success this long or longer is never folded into a counted line
	 * (its duration must reach cbd): the breaker's own slow_call_ms, -1
	 * none, 0 every success (a preset the client does not know). */
	int64_t fold_slow_ms;
	/* The cache's fold slot of these successes the last time (touched
	 * under the cache's lock only). */
	unsigned fold_hint;
	/* The same with a reply awaited (an outcome that could trip). */
	char *line_sync[2];
	size_t line_sync_len[2];
	/* The noreply record line (ignored outcomes, refusals), open too. */
	char *line_record;
	size_t line_record_len;
	/* Refusals made from the cache not yet reported, and the monotonic
	 * ms of the first of them (0: none pending). */
	uint64_t rejected_pending;
	int64_t rejected_since;
	uint64_t seen_seq; /* the cache's change events handed to the store */
	/* cbd's last answer to an uncached call, packed for one atomic load:
	 * the entry's seq then << 2 | (state + 1); 0: none. */
	uint64_t told;
	/* The store degraded since the cache last decided (set by the
	 * store-error hook): the cache's next decision hands its latest
	 * reading to the resilient store (cbci_resilient_remember). */
	bool degraded_since;
	/* The first permit goes through the store: it creates the circuit
	 * with this breaker's policy and lets the resilient store learn the
	 * policy cbd reports (what it degrades with). */
	bool primed;
	/* With wait_ms: idle connections of the breaker's own to ask allow
	 * on (under lock), and the process they belong to (a child after
	 * fork opens its own). */
	cbc_conn **pool;
	size_t pool_len, pool_cap;
	pid_t pool_pid;
};

/* Set by the breaker's store-error hook during a store call on this
 * thread: the answer came from the policy, not from the store. */
static _Thread_local bool store_degraded;

/* The resilient store's on_store_error: note the degradation, then tell
 * the caller's callback. */
static void
breaker_store_error(const cbc_error *error, cbc_store_op op, void *user)
{
	cbc_breaker *b = user;

	if (b->opts.on_store_error != NULL)
		b->opts.on_store_error(error, op, b->opts.user);
	store_degraded = true; /* after the callback, which may use breakers too */
	__atomic_store_n(&b->degraded_since, true, __ATOMIC_RELAXED);
}

void
cbc_breaker_options_init(cbc_breaker_options *opts)
{
	memset(opts, 0, sizeof *opts);
	opts->store_policy = CBC_POLICY_LOCAL;
	opts->timeout_backoff_ms = -1;
}

/* Check the options; CBC_EINVAL naming the first invalid one. */
static cbc_status
breaker_options_check(const cbc_breaker_options *o, const cbc_ctx *ctx, cbc_error *err)
{
	cbc_status st;

	if (o->store != NULL && o->name == NULL)
		return cbci_fail(err, CBC_EINVAL,
		    "name is required when a store is given: every process sharing a circuit "
		    "must agree on its name");
	if (o->name != NULL && (st = cbci_name_check(o->name, "name", err)) != CBC_OK)
		return st;
	st = cbci_ctx_check(ctx, "", err);
	if (st != CBC_OK)
		return st;
	/* A private store is a local one: built-in presets only. */
	if (o->store == NULL && (st = cbci_ctx_check_local(ctx, "", err)) != CBC_OK)
		return st;
	if (o->classify != NULL && o->error_filter != NULL)
		return cbci_fail(err, CBC_EINVAL,
		    "classify and error_filter are both set: set one (classify replaces "
		    "error_filter)");
	if ((unsigned)o->cache > CBC_CACHE_ON)
		return cbci_fail(err, CBC_EINVAL,
		    "cache must be CBC_CACHE_AUTO, CBC_CACHE_OFF or CBC_CACHE_ON");
	if (o->cache == CBC_CACHE_ON && cbci_store_remote_conn(o->store) == NULL)
		return cbci_fail(err, CBC_EINVAL,
		    "cache is CBC_CACHE_ON but store is not a remote store (cbc_store_new_remote)");
	if (o->cache == CBC_CACHE_ON && o->clock != NULL)
		return cbci_fail(err, CBC_EINVAL,
		    "cache is CBC_CACHE_ON with a clock: the cache keeps real time (set one)");
	if ((unsigned)o->store_policy > CBC_POLICY_REJECT)
		return cbci_fail(err, CBC_EINVAL,
		    "store_policy must be CBC_POLICY_LOCAL, CBC_POLICY_ALLOW or CBC_POLICY_REJECT");
	if (o->wait_ms < 0 || o->wait_ms > CBC_WAIT_MAX_MS)
		return cbci_fail(err, CBC_EINVAL, "wait_ms must be from 0 to %d", CBC_WAIT_MAX_MS);
	if (o->timeout_backoff_ms > BREAKER_BACKOFF_MAX)
		return cbci_fail(err, CBC_EINVAL,
		    "timeout_backoff_ms must be from 0 to %d (negative: the default)",
		    BREAKER_BACKOFF_MAX);
	return CBC_OK;
}

/* The policy options as a ctx (preset still the caller's pointer). */
static void
breaker_options_ctx(const cbc_breaker_options *o, cbc_ctx *ctx)
{
	memset(ctx, 0, sizeof *ctx);
	ctx->failure_threshold = o->failure_threshold;
	ctx->success_threshold = o->success_threshold;
	ctx->break_ms = o->break_ms;
	ctx->half_open_max = o->half_open_max;
	ctx->slot_ttl_ms = o->slot_ttl_ms;
	ctx->max_gap_ms = o->max_gap_ms;
	ctx->trip = o->trip;
	ctx->window = o->window;
	ctx->window_size = o->window_size;
	ctx->minimum_calls = o->minimum_calls;
	ctx->failure_rate = o->failure_rate;
	ctx->slow_call_ms = o->slow_call_ms;
	ctx->slow_call_rate = o->slow_call_rate;
	ctx->min_reporters = o->min_reporters;
	ctx->reporter_window_ms = o->reporter_window_ms;
	ctx->break_backoff = o->break_backoff;
	ctx->break_max_ms = o->break_max_ms;
	ctx->max_concurrent = o->max_concurrent;
	ctx->retry_budget_percent = o->retry_budget_percent;
	ctx->retry_min_per_s = o->retry_min_per_s;
	ctx->preset = o->preset;
}

/* The line of an outcome op (noreply, or with a reply awaited: then
 * with "policy": true, so that the reply refreshes the cache's copy of
 * the circuit's rule, protocol 3), without its closing brace. */
static char *
breaker_line(cbc_breaker *b, const char *op, bool noreply, size_t *len)
{
	json_t *req = noreply
	    ? json_pack("{s:s, s:s, s:b}", "op", op, "name", b->name, "noreply", 1)
	    : json_pack("{s:s, s:s, s:b}", "op", op, "name", b->name, "policy", 1);
	proto_ctx partial;
	char *text = NULL;

	cbci_ctx_to_proto(&b->ctx, &partial);
	if (req != NULL && proto_ctx_to_json(&partial, req))
		text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (text == NULL)
		return NULL;
	*len = strlen(text) - 1; /* the closing brace */
	return text;
}

/* Join the process's cache when the options ask for it (AUTO: a remote
 * store and no clock). Without resources the breaker runs uncached. */
static cbc_status
breaker_cache_join(cbc_breaker *b, const cbc_breaker_options *o, cbc_error *err)
{
	cbc_conn *conn = cbci_store_remote_conn(o->store);

	if (o->cache == CBC_CACHE_OFF || conn == NULL || o->clock != NULL)
		return CBC_OK;
	b->line[0] = breaker_line(b, "record_success", true, &b->line_len[0]);
	b->line[1] = breaker_line(b, "record_failure", true, &b->line_len[1]);
	b->line_sync[0] = breaker_line(b, "record_success", false, &b->line_sync_len[0]);
	b->line_sync[1] = breaker_line(b, "record_failure", false, &b->line_sync_len[1]);
	b->line_record = breaker_line(b, "record", true, &b->line_record_len);
	if (b->line[0] == NULL || b->line[1] == NULL || b->line_sync[0] == NULL ||
	    b->line_sync[1] == NULL || b->line_record == NULL)
		return cbci_fail(err, CBC_ENOMEM, "out of memory building the breaker's lines");
	if (b->line_len[0] + BREAKER_LINE_TAIL > BREAKER_LINE_MAX ||
	    b->line_len[1] + BREAKER_LINE_TAIL > BREAKER_LINE_MAX ||
	    b->line_record_len + BREAKER_LINE_TAIL > BREAKER_LINE_MAX)
		return CBC_OK; /* cannot happen with today's bounds: run uncached */
	/* The circuit is created with this breaker's policy, which the
	 * cache's copy (a watch reply's initial snapshot) may not show. */
	if (b->ctx.preset != NULL && proto_preset_builtin(b->ctx.preset) == NULL)
		b->fold_slow_ms = 0;
	else
		b->fold_slow_ms = b->policy.slow_call_ms > 0 ? b->policy.slow_call_ms : -1;
	b->cache_gen = cbci_cache_generation();
	b->cache = cbci_cache_acquire(cbc_conn_socket_path(conn), err);
	if (b->cache == NULL)
		return CBC_ENOMEM;
	b->entry = cbci_cache_watch(b->cache, b->name);
	return CBC_OK;
}

/* Is the breaker's cache usable (joined, and not a parent's after fork)? */
static bool
breaker_cached(const cbc_breaker *b)
{
	return b->entry != NULL && b->cache_gen == cbci_cache_generation();
}

/* Write n in decimal at buf; returns the length (n >= 0). */
static size_t
breaker_digits(char *buf, int64_t n)
{
	char tmp[24];
	size_t len = 0, i = 0;

	do {
		tmp[len++] = (char)('0' + n % 10);
		n /= 10;
	} while (n > 0);
	while (len > 0)
		buf[i++] = tmp[--len];
	return i;
}

/* Queue the noreply record line with tail (`,"outcome":...` without the
 * closing brace) on the cache (urgent: written at once, after what is
 * queued); false when it cannot take it. */
static bool
breaker_send_record(cbc_breaker *b, const char *tail, size_t tail_len, int64_t n, bool urgent)
{
	char line[BREAKER_LINE_MAX];
	size_t len = b->line_record_len;

	memcpy(line, b->line_record, len);
	memcpy(line + len, tail, tail_len);
	len += tail_len;
	len += breaker_digits(line + len, n);
	line[len++] = '}';
	line[len++] = '\n';
	return cbci_cache_send(b->cache, line, len, urgent);
}

/* Report the refusals made from the cache so far (record, outcome
 * rejected, with their count); kept for later when the cache cannot take
 * the line. urgent: written at once, with what is queued before it. */
static void
breaker_rejected_flush(cbc_breaker *b, bool urgent)
{
	static const char tail[] = ",\"outcome\":\"rejected\",\"count\":";
	uint64_t n = __atomic_exchange_n(&b->rejected_pending, 0, __ATOMIC_ACQ_REL);

	__atomic_store_n(&b->rejected_since, 0, __ATOMIC_RELAXED);
	while (n > 0) {
		uint64_t part = n > PROTO_REJECTED_COUNT_MAX ? PROTO_REJECTED_COUNT_MAX : n;

		if (!breaker_send_record(b, tail, sizeof tail - 1, (int64_t)part, urgent)) {
			__atomic_fetch_add(&b->rejected_pending, n, __ATOMIC_RELAXED);
			return;
		}
		n -= part;
	}
}

/* One refusal made from the cache: counted, and the batch sent once its
 * first refusal is BREAKER_REJECTED_FLUSH_MS old. */
static void
breaker_rejected_add(cbc_breaker *b)
{
	int64_t now = clock_monotonic_coarse_ms(), since;

	__atomic_fetch_add(&b->rejected_pending, 1, __ATOMIC_RELAXED);
	since = __atomic_load_n(&b->rejected_since, __ATOMIC_RELAXED);
	if (since == 0)
		__atomic_store_n(&b->rejected_since, now, __ATOMIC_RELAXED);
	else if (now - since >= BREAKER_REJECTED_FLUSH_MS)
		breaker_rejected_flush(b, false);
}

cbc_status
cbc_breaker_cache_stats(cbc_breaker *b, cbc_cache_stats *out, cbc_error *err)
{
	if (!breaker_cached(b))
		return cbci_fail(err, CBC_EINVAL, "breaker \"%s\" is not cached", b->name);
	cbci_cache_stats(b->cache, out);
	cbci_error_clear(err);
	return CBC_OK;
}

cbc_breaker *
cbc_breaker_new(const cbc_breaker_options *opts, cbc_error *err)
{
	cbc_breaker *b;
	cbc_ctx ctx;

	if (opts == NULL) {
		cbci_fail(err, CBC_EINVAL, "options are required");
		return NULL;
	}
	breaker_options_ctx(opts, &ctx);
	if (breaker_options_check(opts, &ctx, err) != CBC_OK)
		return NULL;
	b = calloc(1, sizeof *b);
	if (b == NULL || pthread_mutex_init(&b->lock, NULL) != 0) {
		free(b);
		cbci_fail(err, CBC_ENOMEM, "out of memory creating a breaker");
		return NULL;
	}
	b->ctx = ctx;
	if (ctx.preset != NULL) {
		/* checked: at most CBC_PRESET_MAX bytes */
		snprintf(b->preset, sizeof b->preset, "%s", ctx.preset);
		b->ctx.preset = b->preset;
	}
	cbci_ctx_policy(&b->ctx, &b->policy);
	b->opts = *opts;
	b->observed = CBC_STATE_CLOSED;
	snprintf(b->name, sizeof b->name, "%s",
	    opts->name != NULL ? opts->name : BREAKER_DEFAULT_NAME);
	b->opts.name = b->name;
	b->opts.preset = b->ctx.preset;
	if (opts->store == NULL) {
		b->store = cbc_store_new_local(0, err);
	} else {
		cbc_resilient_options ro;

		cbc_resilient_options_init(&ro);
		ro.policy = opts->store_policy;
		ro.on_store_error = breaker_store_error;
		ro.user = b;
		if (opts->timeout_backoff_ms >= 0)
			ro.timeout_backoff_ms = opts->timeout_backoff_ms;
		b->store = cbc_store_new_resilient(opts->store, &ro, err);
	}
	if (b->store == NULL) {
		pthread_mutex_destroy(&b->lock);
		free(b);
		return NULL;
	}
	if (breaker_cache_join(b, opts, err) != CBC_OK) {
		cbc_breaker_free(b);
		return NULL;
	}
	cbci_error_clear(err);
	return b;
}

void
cbc_breaker_free(cbc_breaker *b)
{
	if (b == NULL)
		return;
	/* Written now, not left to the reader thread. */
	if (breaker_cached(b))
		breaker_rejected_flush(b, true);
	cbci_cache_release(b->cache, b->cache_gen);
	free(b->line[0]);
	free(b->line[1]);
	free(b->line_sync[0]);
	free(b->line_sync[1]);
	free(b->line_record);
	cbc_store_free(b->store);
	for (size_t i = 0; i < b->pool_len; i++)
		cbc_conn_free(b->pool[i]);
	free(b->pool);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

/* A connection of the breaker's own for a waiting allow: an idle one,
 * else a new one like the store's; NULL when the store is not remote
 * (or out of memory: the store's connection then). */
static cbc_conn *
pool_take(cbc_breaker *b)
{
	cbc_conn *store_conn = cbci_store_remote_conn(b->opts.store), *c = NULL;
	pid_t pid = getpid();

	if (store_conn == NULL)
		return NULL;
	pthread_mutex_lock(&b->lock);
	if (b->pool_pid != pid) {
		/* Inherited across fork: the parent's sockets are not ours. */
		for (size_t i = 0; i < b->pool_len; i++)
			cbc_conn_free(b->pool[i]);
		b->pool_len = 0;
		b->pool_pid = pid;
	}
	if (b->pool_len > 0)
		c = b->pool[--b->pool_len];
	pthread_mutex_unlock(&b->lock);
	return c != NULL ? c : cbci_conn_clone(store_conn, NULL);
}

/* Give a connection back for the next waiting allow. */
static void
pool_put(cbc_breaker *b, cbc_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&b->lock);
	if (b->pool_pid == getpid() && b->pool_len == b->pool_cap) {
		size_t cap = b->pool_cap != 0 ? b->pool_cap * 2 : 4;
		cbc_conn **grown = realloc(b->pool, cap * sizeof *grown);

		if (grown != NULL) {
			b->pool = grown;
			b->pool_cap = cap;
		}
	}
	if (b->pool_pid == getpid() && b->pool_len < b->pool_cap) {
		b->pool[b->pool_len++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&b->lock);
	cbc_conn_free(c);
}

const char *
cbc_breaker_name(const cbc_breaker *b)
{
	return b->name;
}

/* The ctx of one store call: the policy plus the caller's clock if any. */
static void
breaker_call_ctx(cbc_breaker *b, cbc_ctx *ctx)
{
	*ctx = b->ctx;
	if (b->opts.clock != NULL) {
		ctx->has_now = true;
		ctx->now = b->opts.clock(b->opts.user);
	}
}

/* cbd answered an uncached call of a cached breaker with state: the cache
 * decides again once its entry agrees (or an event comes). */
static void
breaker_told(cbc_breaker *b, cbc_state state)
{
	uint64_t seq;

	if (!breaker_cached(b) || store_degraded)
		return;
	seq = cbci_cache_seq(b->cache, b->entry);
	__atomic_store_n(&b->told, seq << 2 | ((uint64_t)state + 1), __ATOMIC_RELAXED);
}

/* Note a state seen in the store; fire on_state_change if it moved. Under
 * ALLOW a degraded answer is "as if closed", not a state anyone is in, so
 * it is not observed. */
static void
breaker_observed(cbc_breaker *b, cbc_state state, const int *error)
{
	cbc_state prev;

	if (store_degraded && b->opts.store != NULL && b->opts.store_policy == CBC_POLICY_ALLOW)
		return;
	pthread_mutex_lock(&b->lock);
	prev = b->observed;
	b->observed = state;
	pthread_mutex_unlock(&b->lock);
	if (prev != state && b->opts.on_state_change != NULL)
		b->opts.on_state_change(prev, state, error, b->opts.user);
}

cbc_state
cbc_breaker_state(cbc_breaker *b)
{
	cbc_state s;

	pthread_mutex_lock(&b->lock);
	s = b->observed;
	pthread_mutex_unlock(&b->lock);
	return s;
}

/* Refuse a permit: fill it and err. */
static cbc_status
permit_refuse(cbc_breaker *b, cbc_permit *p, cbc_state state, int64_t retry_after_ms,
    cbc_error *err)
{
	p->granted = false;
	p->state = state;
	p->retry_after_ms = retry_after_ms;
	if (p->reason == CBC_REASON_NONE)
		p->reason =
		    state == CBC_STATE_HALF_OPEN ? CBC_REASON_HALF_OPEN_FULL : CBC_REASON_OPEN;
	if (p->reason == CBC_REASON_CONCURRENCY)
		return cbci_fail(err, CBC_EBULKHEAD,
		    "circuit \"%s\": bulkhead full (%lld calls in flight): retry in %lld ms",
		    b->name, (long long)p->in_flight, (long long)retry_after_ms);
	if (p->reason == CBC_REASON_RETRY_BUDGET)
		return cbci_fail(err, CBC_EBUDGET,
		    "circuit \"%s\": retry refused by the retry budget: retry in %lld ms", b->name,
		    (long long)retry_after_ms);
	return cbci_fail(err, CBC_EOPEN, "circuit \"%s\" is %s: retry in %lld ms", b->name,
	    cbc_state_name(state), (long long)retry_after_ms);
}

/* Grant a permit in state; the call's duration counts from here. */
static cbc_status
permit_grant(cbc_permit *p, cbc_state state, cbc_error *err)
{
	p->granted = true;
	p->state = state;
	p->retry_after_ms = 0;
	p->granted_at = clock_monotonic_ms();
	cbci_error_clear(err);
	return CBC_OK;
}

/* half_open: a trial runs only with a slot from the store. */
static cbc_status
acquire_trial(cbc_breaker *b, const cbc_ctx *ctx, cbc_permit *p, cbc_error *err)
{
	cbc_slot slot;
	cbc_status st;
	int64_t hint;

	st = cbc_store_acquire_slot(b->store, b->name, ctx, &slot, err);
	if (st != CBC_OK && st != CBC_ECAPACITY)
		return st;
	/* capacity: the circuit vanished (deleted) and cbd is full; no trial. */
	if (st == CBC_ECAPACITY || !slot.acquired) {
		hint = b->policy.slot_ttl_ms < BREAKER_TRIAL_RETRY_HINT_MS
		    ? b->policy.slot_ttl_ms
		    : BREAKER_TRIAL_RETRY_HINT_MS;
		return permit_refuse(b, p, CBC_STATE_HALF_OPEN, hint, err);
	}
	p->has_slot = true;
	memcpy(p->slot_token, slot.token, sizeof p->slot_token);
	return permit_grant(p, CBC_STATE_HALF_OPEN, err);
}

/* acquire's answer from cbd's allow (st: its status). */
static cbc_status
acquire_allowed(cbc_breaker *b, cbc_permit *p, const cbc_allow_result *allow, cbc_status st,
    cbc_error *err)
{
	if (st != CBC_OK)
		return st;
	__atomic_store_n(&b->primed, true, __ATOMIC_RELAXED);
	breaker_told(b, allow->state);
	breaker_observed(b, allow->state, NULL);
	if (!allow->allowed) {
		int64_t hint = allow->retry_after_ms;

		p->reason = allow->reason;
		p->in_flight = allow->in_flight;
		/* half_open without a free slot: the trial usually ends well
		 * before its slot's ttl (as acquire_trial hints). */
		if (allow->state == CBC_STATE_HALF_OPEN && hint > BREAKER_TRIAL_RETRY_HINT_MS &&
		    allow->reason != CBC_REASON_RETRY_BUDGET)
			hint = BREAKER_TRIAL_RETRY_HINT_MS;
		return permit_refuse(b, p, allow->state, hint, err);
	}
	if (allow->has_permit) {
		p->has_slot = true;
		memcpy(p->slot_token, allow->permit, sizeof p->slot_token);
	}
	return permit_grant(p, allow->state, err);
}

cbc_status
cbc_breaker_acquire(cbc_breaker *b, cbc_permit *p, cbc_error *err)
{
	return cbci_breaker_acquire(b, p, false, err);
}

cbc_status
cbci_breaker_acquire(cbc_breaker *b, cbc_permit *p, bool retry, cbc_error *err)
{
	cbc_allow_options allow_opts = { .wait_ms = b->opts.wait_ms, .retry = retry };
	cbc_allow_result allow;
	cbc_conn *via;
	cbc_snapshot snap;
	cbc_status st;
	cbc_ctx ctx;
	bool applied;

	memset(p, 0, sizeof *p);
	p->in_flight = -1;
	p->retry = retry;
	/* A retry is always asked of cbd: its retry budget counts it. */
	if (!retry && breaker_cached(b) && __atomic_load_n(&b->primed, __ATOMIC_RELAXED)) {
		int64_t left;
		bool has_fresh;
		uint64_t packed = __atomic_load_n(&b->told, __ATOMIC_RELAXED);
		cbci_cache_told told = { .known = packed != 0,
			.seq = packed >> 2,
			.state = (cbc_state)((packed & 3) - 1) };
		cbci_cache_verdict v;

		v = cbci_cache_decide(b->cache, b->entry, &b->seen_seq, &snap, &has_fresh, &left,
		    &told);

		if (has_fresh)
			cbci_resilient_remember(b->store, b->name, &snap);
		if (v != CBCI_CACHE_ASK && __atomic_load_n(&b->degraded_since, __ATOMIC_RELAXED)) {
			/* The cache decides again after an outage: its
			 * reading is what the next outage starts from. */
			__atomic_store_n(&b->degraded_since, false, __ATOMIC_RELAXED);
			if (cbci_cache_latest(b->cache, b->entry, &snap))
				cbci_resilient_remember(b->store, b->name, &snap);
		}
		store_degraded = false;
		if (v == CBCI_CACHE_REFUSE) {
			breaker_rejected_add(b);
		} else if (__atomic_load_n(&b->rejected_pending, __ATOMIC_RELAXED) != 0) {
			breaker_rejected_flush(b, false); /* it stopped refusing */
		}
		if (v == CBCI_CACHE_PERMIT) {
			breaker_observed(b, CBC_STATE_CLOSED, NULL);
			p->cached = true;
			return permit_grant(p, CBC_STATE_CLOSED, err);
		}
		if (v == CBCI_CACHE_REFUSE) {
			breaker_observed(b, CBC_STATE_OPEN, NULL);
			p->reason = cbci_cache_held_open(b->cache, b->entry) ? CBC_REASON_HELD
									     : CBC_REASON_OPEN;
			return permit_refuse(b, p, CBC_STATE_OPEN, left, err);
		}
	}
	breaker_call_ctx(b, &ctx);
	store_degraded = false;
	/* cbd's allow when it answers (it counts its refusals); else the
	 * store ops, with the store policy. */
	/* A call that may wait asks on a connection of its own, which keeps
	 * the ticket until report hands it back. */
	via = b->opts.wait_ms > 0 ? pool_take(b) : NULL;
	if (cbci_resilient_allow(b->store, via, b->name, &ctx, &allow_opts, &allow, &st, err)) {
		st = acquire_allowed(b, p, &allow, st, err);
		if (st == CBC_OK && p->has_slot && via != NULL) {
			p->wait_conn = via;
			return st;
		}
		/* An answer that could not be read may have granted a ticket:
		 * closing the connection hands it back. */
		if (via != NULL && st != CBC_OK && st != CBC_EOPEN && st != CBC_EBULKHEAD &&
		    st != CBC_EBUDGET)
			cbc_conn_close(via);
		pool_put(b, via);
		return st;
	}
	pool_put(b, via);
	/* A private store with a bulkhead or a retry budget: the same allow,
	 * in this process (no waiting). */
	if (b->opts.store == NULL &&
	    (b->policy.max_concurrent > 0 || b->policy.retry_budget_percent >= 0) &&
	    cbci_local_allow(b->store, b->name, &ctx, retry, &allow, &st, err))
		return acquire_allowed(b, p, &allow, st, err);
	st = cbc_store_get(b->store, b->name, &ctx, &snap, err);
	/* At most two rounds: the state read, then the state after moving an
	 * open circuit whose break elapsed to half_open. */
	for (bool moved = false; st == CBC_OK; moved = true) {
		if (!store_degraded)
			__atomic_store_n(&b->primed, true, __ATOMIC_RELAXED);
		breaker_told(b, snap.state);
		breaker_observed(b, snap.state, NULL);
		if (snap.state == CBC_STATE_CLOSED)
			return permit_grant(p, CBC_STATE_CLOSED, err);
		if (snap.state == CBC_STATE_HALF_OPEN)
			return acquire_trial(b, &ctx, p, err);
		if (moved || snap.retry_after_ms > 0)
			return permit_refuse(b, p, CBC_STATE_OPEN, snap.retry_after_ms, err);
		/* The break elapsed: move to half_open; losing the race is
		 * fine, the winner's state is in snap. */
		store_degraded = false;
		st = cbc_store_cas(b->store, b->name, CBC_STATE_OPEN, CBC_STATE_HALF_OPEN, &ctx,
		    &applied, &snap, err);
	}
	return st;
}

/* Send a cached permit's outcome (success or failure) on the watch
 * connection: as a noreply line, or, when it could trip the circuit by
 * this process's own counts, with its reply awaited (the next call is
 * decided on cbd's answer). False when the cache cannot take it (the
 * store gets it instead). */
static bool
report_noreply(cbc_breaker *b, cbc_outcome outcome, int64_t duration_ms, const int *error)
{
	static const char mid[] = ",\"duration_ms\":";
	bool failure = outcome == CBC_OUTCOME_FAILURE, could_trip;
	size_t i = failure ? 1 : 0, len = b->line_len[i];
	char line[BREAKER_LINE_MAX];
	cbc_state state = (cbc_state)-1;

	memcpy(line, b->line[i], len);
	memcpy(line + len, mid, sizeof mid - 1);
	len += sizeof mid - 1;
	len += breaker_digits(line + len, duration_ms);
	line[len++] = '}';
	line[len++] = '\n';
	if (cbci_cache_report(b->cache, b->entry, line, len, b->line[0], b->line_len[0],
		&b->fold_hint, b->fold_slow_ms, failure, duration_ms, &could_trip))
		return true;
	if (!could_trip)
		return false;
	len = b->line_sync_len[i];
	memcpy(line, b->line_sync[i], len);
	memcpy(line + len, mid, sizeof mid - 1);
	len += sizeof mid - 1;
	len += breaker_digits(line + len, duration_ms);
	if (!cbci_cache_sync(b->cache, b->entry, line, len, &state))
		return false;
	if ((unsigned)state <= CBC_STATE_HALF_OPEN)
		breaker_observed(b, state, failure ? error : NULL);
	return true;
}

/* Record the outcome of a granted permit with the call's duration and
 * release its slot. Store errors are swallowed: they never replace the
 * call's own result. */
static void
report_outcome(cbc_breaker *b, cbc_permit *p, cbc_outcome outcome, int64_t duration_ms,
    const int *error)
{
	static const char ignore_tail[] = ",\"outcome\":\"ignore\",\"duration_ms\":";
	cbc_snapshot snap;
	cbc_error ignored;
	cbc_status st = CBC_OK;
	bool has_snap = false;
	cbc_ctx ctx;

	if (outcome == CBC_OUTCOME_IGNORE && p->cached && breaker_cached(b) &&
	    breaker_send_record(b, ignore_tail, sizeof ignore_tail - 1, duration_ms, false)) {
		p->granted = false;
		return;
	}
	/* (A permit granted before a fork and reported in the child goes
	 * through the store: the parent's cache is not the child's.) */
	if (p->cached && breaker_cached(b) && report_noreply(b, outcome, duration_ms, error)) {
		p->granted = false;
		return;
	}
	breaker_call_ctx(b, &ctx);
	ctx.has_duration = true;
	ctx.duration_ms = duration_ms;
	store_degraded = false;
	/* A permit of cbd's allow (a trial slot, a bulkhead ticket) goes back
	 * with the outcome in one record; when cbd does not answer, the store
	 * ops below report and release it (a broken connection freed it). */
	if (p->wait_conn != NULL && __atomic_load_n(&b->pool_pid, __ATOMIC_RELAXED) != getpid())
		p->wait_conn = NULL; /* taken before a fork: the parent's socket */
	if (p->has_slot &&
	    cbci_resilient_record(b->store, p->wait_conn, b->name, outcome, p->slot_token, &ctx,
		&snap, &has_snap)) {
		pool_put(b, p->wait_conn);
		p->wait_conn = NULL;
		if (has_snap && outcome != CBC_OUTCOME_IGNORE) {
			breaker_told(b, snap.state);
			breaker_observed(b, snap.state, error);
		}
		p->granted = false;
		p->has_slot = false;
		return;
	}
	/* (A broken connection of the breaker's own freed its ticket.) */
	pool_put(b, p->wait_conn);
	p->wait_conn = NULL;
	if (outcome == CBC_OUTCOME_SUCCESS)
		st = cbc_store_record_success(b->store, b->name, &ctx, &snap, &ignored);
	else if (outcome == CBC_OUTCOME_FAILURE)
		st = cbc_store_record_failure(b->store, b->name, &ctx, &snap, &ignored);
	else
		cbci_resilient_record_ignore(b->store, b->name, &ctx);
	if (outcome != CBC_OUTCOME_IGNORE && st == CBC_OK) {
		breaker_told(b, snap.state);
		breaker_observed(b, snap.state, error);
	}
	if (p->has_slot)
		cbc_store_release_slot(b->store, b->name, p->slot_token, &ctx, &ignored);
	p->granted = false;
	p->has_slot = false;
}

cbc_status
cbc_breaker_report(cbc_breaker *b, cbc_permit *p, cbc_outcome outcome, cbc_error *err)
{
	return cbc_breaker_report_duration(b, p, outcome, -1, err);
}

cbc_status
cbc_breaker_report_duration(cbc_breaker *b, cbc_permit *p, cbc_outcome outcome, int64_t duration_ms,
    cbc_error *err)
{
	if (duration_ms > BREAKER_DURATION_MAX)
		return cbci_fail(err, CBC_EINVAL,
		    "duration_ms must be at most %lld (negative: since acquire)",
		    (long long)BREAKER_DURATION_MAX);
	if ((unsigned)outcome > CBC_OUTCOME_IGNORE)
		return cbci_fail(err, CBC_EINVAL,
		    "outcome must be CBC_OUTCOME_SUCCESS, CBC_OUTCOME_FAILURE or "
		    "CBC_OUTCOME_IGNORE");
	if (p == NULL || !p->granted)
		return cbci_fail(err, CBC_ESTATE, "permit for circuit \"%s\" %s", b->name,
		    "was not granted or was already reported");
	if (duration_ms < 0) {
		duration_ms = clock_monotonic_ms() - p->granted_at;
		if (duration_ms < 0)
			duration_ms = 0;
	}
	report_outcome(b, p, outcome, duration_ms, NULL);
	cbci_error_clear(err);
	return CBC_OK;
}

/* The outcome of fn's result: 0 is a success, never classified; a
 * nonzero one goes to classify (or the older error_filter), else counts
 * as a failure. An out-of-range answer of classify counts as a failure. */
cbc_outcome
cbci_breaker_classify(cbc_breaker *b, int result)
{
	cbc_outcome o;

	if (result == 0)
		return CBC_OUTCOME_SUCCESS;
	if (b->opts.classify != NULL) {
		o = b->opts.classify(result, b->opts.user);
		return (unsigned)o > CBC_OUTCOME_IGNORE ? CBC_OUTCOME_FAILURE : o;
	}
	if (b->opts.error_filter != NULL)
		return b->opts.error_filter(result, b->opts.user) ? CBC_OUTCOME_FAILURE
								  : CBC_OUTCOME_SUCCESS;
	return CBC_OUTCOME_FAILURE;
}

cbc_status
cbc_breaker_execute(cbc_breaker *b, cbc_call_fn fn, void *arg, cbc_exec_result *out, cbc_error *err)
{
	cbc_exec_result res;
	cbc_permit p;
	cbc_status st;

	memset(&res, 0, sizeof res);
	if (fn == NULL) {
		if (out != NULL)
			*out = res;
		return cbci_fail(err, CBC_EINVAL, "fn is required");
	}
	st = cbc_breaker_acquire(b, &p, err);
	if (st == CBC_EOPEN || st == CBC_EBULKHEAD || st == CBC_EBUDGET) {
		res.state = p.state;
		res.retry_after_ms = p.retry_after_ms;
		res.reason = p.reason;
		if (b->opts.fallback != NULL) {
			res.result = b->opts.fallback(arg, p.retry_after_ms, b->opts.user);
			res.fallback_called = true;
			st = CBC_OK;
			cbci_error_clear(err);
		}
	} else if (st == CBC_OK) {
		int64_t started = clock_monotonic_us();

		res.result = fn(arg);
		res.duration_ms = (clock_monotonic_us() - started) / 1000;
		res.called = true;
		res.outcome = cbci_breaker_classify(b, res.result);
		res.counted_failure = res.outcome == CBC_OUTCOME_FAILURE;
		report_outcome(b, &p, res.outcome, res.duration_ms,
		    res.counted_failure ? &res.result : NULL);
		res.state = cbc_breaker_state(b);
		cbci_error_clear(err);
	} else {
		res.state = cbc_breaker_state(b);
	}
	if (out != NULL)
		*out = res;
	return st;
}

cbc_status
cbc_breaker_refresh(cbc_breaker *b, cbc_state *state, cbc_error *err)
{
	cbc_snapshot snap;
	cbc_status st;
	cbc_ctx ctx;

	breaker_call_ctx(b, &ctx);
	store_degraded = false;
	st = cbc_store_get(b->store, b->name, &ctx, &snap, err);
	if (st != CBC_OK)
		return st;
	breaker_observed(b, snap.state, NULL);
	if (state != NULL)
		*state = snap.state;
	return CBC_OK;
}

/* set_state on the store, then observe. */
static cbc_status
breaker_set_state(cbc_breaker *b, cbc_state state, cbc_error *err)
{
	cbc_snapshot snap;
	cbc_status st;
	cbc_ctx ctx;

	breaker_call_ctx(b, &ctx);
	store_degraded = false;
	st = cbc_store_set_state(b->store, b->name, state, &ctx, &snap, err);
	if (st != CBC_OK)
		return st;
	breaker_observed(b, snap.state, NULL);
	return CBC_OK;
}

cbc_status
cbc_breaker_force_open(cbc_breaker *b, cbc_error *err)
{
	return breaker_set_state(b, CBC_STATE_OPEN, err);
}

cbc_status
cbc_breaker_force_close(cbc_breaker *b, cbc_error *err)
{
	return breaker_set_state(b, CBC_STATE_CLOSED, err);
}

cbc_status
cbc_breaker_force_half_open(cbc_breaker *b, cbc_error *err)
{
	return breaker_set_state(b, CBC_STATE_HALF_OPEN, err);
}
