/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store-resilient.c — a store that wraps another one and keeps answering
 * when it fails, per policy (see cbc_store_policy in cbclient.h):
 *
 *   LOCAL   degrade to a private local store, seeding each circuit from
 *           the last snapshot the wrapped store returned for it, so an open
 *           circuit stays open, and running it with the policy cbd last
 *           reported for it (protocol 2's snapshot.policy: the circuit's
 *           own policy, which cbd's config or its creator decided), so it
 *           breaks as cbd would (trip rule, window, slow calls and
 *           break_backoff included; the window starts empty, and
 *           min_reporters counts as 1: one process); a held circuit
 *           stays held (open until the hold's end, closed whatever
 *           fails). Protocol 3's snapshots carry only the policy's
 *           revision (policy_rev): the policy is kept with its rev, a
 *           snapshot of another rev makes it stale, and while it is
 *           stale (or was never reported) outcomes go to a remote store
 *           with "policy": true, so their reply brings it;
 *   ALLOW   answer as if the circuit were closed;
 *   REJECT  return the error from the ops made before the protected call
 *           (get, cas, set_state, acquire_slot); bookkeeping after it
 *           (record_*, release_slot) answers from the last snapshot seen.
 *
 * No latching: every call tries the wrapped store first, and its first
 * answer makes it authoritative again (the circuit's fallback copy is
 * dropped, to be reseeded from fresh data on the next failure). The one
 * exception is the timeout backoff: after the wrapped store timed out, it
 * is skipped for timeout_backoff_ms so a hung daemon costs one timeout per
 * window rather than one per call. delete is an admin op, not part of
 * protecting a call: its errors are always returned.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define HASH_NONFATAL_OOM 1
static _Thread_local int seen_oom;
#define uthash_nonfatal_oom(obj) (seen_oom = 1)
#include <uthash.h>

#include "internal.h"

/* Circuits whose last snapshot we remember; beyond this, new names are
 * seeded from the initial snapshot when degrading. */
#define RESILIENT_SEEN_MAX 65536
/* Bounds of timeout_backoff_ms. */
#define RESILIENT_BACKOFF_MAX 3600000
/* The token handed out by ALLOW's acquire_slot (releasing it is a no-op). */
#define RESILIENT_ALLOW_TOKEN "resilient-allow"

/* What we know of one circuit. */
typedef struct seen_circuit {
	UT_hash_handle hh;
	cb_snapshot last; /* the last snapshot the wrapped store returned */
	cbci_policy_kept kept; /* the last policy reported, with its rev */
	cbc_ctx reported; /* the policy kept for the last snapshot's rev, as
			   * a ctx (0: not reported, or stale) */
	bool policy_known; /* reported holds a policy */
	bool degraded; /* the fallback holds this circuit's live copy */
	char name[];
} seen_circuit;

typedef struct resilient {
	pthread_mutex_t lock;
	cbc_store *inner;
	cbci_local *fallback;
	cbc_resilient_options opts;
	seen_circuit *seen;
	size_t seen_count;
	int64_t skip_until; /* monotonic ms: backoff after a timeout */
	cbc_error skip_error; /* the timeout that started the backoff */
} resilient;

void
cbc_resilient_options_init(cbc_resilient_options *opts)
{
	memset(opts, 0, sizeof *opts);
	opts->policy = CBC_POLICY_LOCAL;
	opts->timeout_backoff_ms = CBC_DEFAULT_TIMEOUT_BACKOFF_MS;
}

/* Find name (lock held). */
static seen_circuit *
seen_find(resilient *r, const char *name)
{
	seen_circuit *s;

	HASH_FIND_STR(r->seen, name, s);
	return s;
}

/* Find or add name (lock held); NULL when full or out of memory. */
static seen_circuit *
seen_get(resilient *r, const char *name)
{
	seen_circuit *s = seen_find(r, name);
	size_t len;

	if (s != NULL || r->seen_count >= RESILIENT_SEEN_MAX)
		return s;
	len = strlen(name);
	s = calloc(1, sizeof *s + len + 1);
	if (s == NULL)
		return NULL;
	memcpy(s->name, name, len + 1);
	breaker_snapshot_init(&s->last);
	seen_oom = 0;
	HASH_ADD_KEYPTR(hh, r->seen, s->name, len, s);
	if (seen_oom) {
		free(s);
		return NULL;
	}
	r->seen_count++;
	return s;
}

/* The policy snap reports as a ctx for the fallback (members 0 when not
 * reported). A hold has no local form, so it is kept through the policy:
 * held open breaks until the hold's end (or as long as the protocol
 * allows when it has none), held closed never reaches its threshold. */
static void
reported_ctx(const cbc_snapshot *snap, cbc_ctx *out)
{
	cbci_ctx_from_policy(&snap->policy, out);
	if (snap->hold.held && snap->hold.state == CBC_STATE_OPEN) {
		if (snap->hold.until == CBC_TIME_NONE || snap->opened_at == CBC_TIME_NONE)
			out->break_ms = CB_DURATION_MAX;
		else if (snap->hold.until - snap->opened_at > CB_DURATION_MIN)
			out->break_ms = snap->hold.until - snap->opened_at;
		else
			out->break_ms = CB_DURATION_MIN;
		/* The hold's break is not grown, nor capped below itself. */
		out->break_backoff = 0;
		out->break_max_ms = 0;
	} else if (snap->hold.held) {
		/* Held closed: no rule may open it. */
		out->trip = CBC_TRIP_CONSECUTIVE;
		out->failure_threshold = CB_COUNT_MAX;
	}
}

/* The ctx the fallback runs name with: the caller's clock and duration,
 * and the policy cbd last reported for the circuit (all of it, as cbd
 * keeps the circuit's own), or the caller's when cbd reported none. A
 * preset is dropped when cbd reported the policy (every key is there)
 * and when the local store does not know it (a preset of cbd's config). */
static void
resilient_fallback_ctx(resilient *r, const char *name, const cbc_ctx *ctx, cbc_ctx *out)
{
	seen_circuit *s;
	cbc_ctx rep;
	bool known = false;

	*out = *ctx;
	pthread_mutex_lock(&r->lock);
	s = seen_find(r, name);
	if (s != NULL) {
		rep = s->reported;
		known = s->policy_known;
	} else {
		memset(&rep, 0, sizeof rep);
	}
	pthread_mutex_unlock(&r->lock);
	if (known) {
		/* cbd's policy alone: a key it reported as null (no gap limit,
		 * no slow rule, no break cap) must not come from the caller. */
		memset(out, 0, sizeof *out);
		out->has_now = ctx->has_now;
		out->now = ctx->now;
		out->has_duration = ctx->has_duration;
		out->duration_ms = ctx->duration_ms;
	}
	cbci_ctx_overlay(out, &rep);
	if (out->preset != NULL && (known || proto_preset_builtin(out->preset) == NULL))
		out->preset = NULL;
	/* break_max_ms below a reported break_ms would be refused. */
	if (out->break_max_ms != 0 && out->break_ms != 0 && out->break_max_ms < out->break_ms)
		out->break_max_ms = out->break_ms;
}

/* Remember snap as s's last snapshot, with the policy kept for its
 * policy_rev (lock held). */
static void
seen_note(seen_circuit *s, const cbc_snapshot *snap)
{
	cbc_snapshot merged = *snap;

	cbci_policy_keep(&s->kept, &merged);
	cbci_snapshot_to_core(&merged, &s->last);
	reported_ctx(&merged, &s->reported);
	s->policy_known = merged.policy.known;
}

/* Does name's reply need the policy: none kept for it, or stale? */
static bool
resilient_wants_policy(resilient *r, const char *name)
{
	seen_circuit *s;
	bool want;

	pthread_mutex_lock(&r->lock);
	s = seen_find(r, name);
	want = s == NULL || !s->kept.policy.known;
	pthread_mutex_unlock(&r->lock);
	return want;
}

/* The wrapped store answered for name: remember snap (may be NULL: no
 * snapshot in the answer) and end any degradation of that circuit. */
static void
resilient_answered(resilient *r, const char *name, const cbc_snapshot *snap)
{
	seen_circuit *s;

	pthread_mutex_lock(&r->lock);
	s = snap != NULL ? seen_get(r, name) : seen_find(r, name);
	if (s != NULL) {
		if (snap != NULL)
			seen_note(s, snap);
		if (s->degraded) {
			s->degraded = false;
			cbci_local_forget(r->fallback, name);
		}
	}
	pthread_mutex_unlock(&r->lock);
}

/* Is the wrapped store in its timeout backoff? Fills err when it is. */
static bool
resilient_skipping(resilient *r, cbc_error *err)
{
	bool skip;

	pthread_mutex_lock(&r->lock);
	skip = r->skip_until != 0 && clock_monotonic_ms() < r->skip_until;
	if (skip)
		cbci_error_copy(err, &r->skip_error);
	pthread_mutex_unlock(&r->lock);
	return skip;
}

/* The wrapped store failed with err on op: start a backoff after a
 * timeout, then tell the caller's callback. */
static void
resilient_failed(resilient *r, cbc_store_op op, const cbc_error *err, bool skipped)
{
	if (!skipped && err->status == CBC_ETIMEOUT && r->opts.timeout_backoff_ms > 0) {
		pthread_mutex_lock(&r->lock);
		r->skip_until = clock_monotonic_ms() + r->opts.timeout_backoff_ms;
		r->skip_error = *err;
		pthread_mutex_unlock(&r->lock);
	}
	if (r->opts.on_store_error != NULL)
		r->opts.on_store_error(err, op, r->opts.user);
}

/* Make sure the fallback holds name's live copy (LOCAL policy). */
static cbc_status
resilient_degrade(resilient *r, const char *name, cbc_error *err)
{
	seen_circuit *s;
	cb_snapshot initial;
	cbc_status st = CBC_OK;

	pthread_mutex_lock(&r->lock);
	s = seen_get(r, name);
	if (s == NULL) {
		/* Cannot remember this one: seed from the initial snapshot. */
		breaker_snapshot_init(&initial);
		st = cbci_local_seed(r->fallback, name, &initial, err);
	} else if (!s->degraded) {
		st = cbci_local_seed(r->fallback, name, &s->last, err);
		if (st == CBC_OK)
			s->degraded = true;
	}
	pthread_mutex_unlock(&r->lock);
	return st;
}

/* The last snapshot seen for name (initial if none) as the public one. */
static void
resilient_last(resilient *r, const char *name, const cbc_ctx *ctx, cbc_snapshot *out)
{
	seen_circuit *s;
	cb_snapshot snap;
	cb_policy policy;

	cbc_ctx own;

	resilient_fallback_ctx(r, name, ctx, &own);
	pthread_mutex_lock(&r->lock);
	s = seen_find(r, name);
	if (s != NULL)
		snap = s->last;
	else
		breaker_snapshot_init(&snap);
	pthread_mutex_unlock(&r->lock);
	cbci_ctx_policy(&own, &policy);
	cbci_snapshot_fill(out, name, &snap,
	    breaker_retry_after_ms(&snap, &policy, cbci_ctx_now(ctx)));
}

/* An initial (closed) snapshot for name. */
static void
resilient_closed(const char *name, cbc_snapshot *out)
{
	cb_snapshot snap;

	breaker_snapshot_init(&snap);
	cbci_snapshot_fill(out, name, &snap, 0);
}

/* One op's arguments and results, so every op shares one driver. */
typedef struct op_call {
	cbc_store_op op;
	const char *name;
	const cbc_ctx *ctx;
	cbc_state from, to; /* cas; to is also set_state's state */
	const char *token; /* release_slot */
	bool *applied; /* cas */
	bool *existed; /* delete */
	cbc_snapshot *snap; /* get, record_*, cas, set_state */
	cbc_slot *slot; /* acquire_slot */
} op_call;

/* Run c on store s (the wrapped store or the fallback). */
static cbc_status
op_run(const cbc_store_ops *ops, void *impl, const op_call *c, cbc_error *err)
{
	switch (c->op) {
	case CBC_OP_GET:
		return ops->get(impl, c->name, c->ctx, c->snap, err);
	case CBC_OP_RECORD_SUCCESS:
		return ops->record_success(impl, c->name, c->ctx, c->snap, err);
	case CBC_OP_RECORD_FAILURE:
		return ops->record_failure(impl, c->name, c->ctx, c->snap, err);
	case CBC_OP_CAS:
		return ops->cas(impl, c->name, c->from, c->to, c->ctx, c->applied, c->snap, err);
	case CBC_OP_SET_STATE:
		return ops->set_state(impl, c->name, c->to, c->ctx, c->snap, err);
	case CBC_OP_ACQUIRE_SLOT:
		return ops->acquire_slot(impl, c->name, c->ctx, c->slot, err);
	case CBC_OP_RELEASE_SLOT:
		return ops->release_slot(impl, c->name, c->token, c->ctx, err);
	case CBC_OP_DELETE:
		return ops->delete_circuit(impl, c->name, c->existed, err);
	}
	return cbci_fail(err, CBC_EINVAL, "unknown store op %d", (int)c->op);
}

/* Ops made before the protected call (REJECT returns their errors). */
static bool
op_is_pre_call(cbc_store_op op)
{
	return op == CBC_OP_GET || op == CBC_OP_CAS || op == CBC_OP_SET_STATE ||
	    op == CBC_OP_ACQUIRE_SLOT;
}

/* ALLOW's answer, and REJECT's for bookkeeping: calls flow. */
static cbc_status
op_answer_allow(resilient *r, const op_call *c, bool from_last, cbc_error *err)
{
	switch (c->op) {
	case CBC_OP_GET:
	case CBC_OP_RECORD_SUCCESS:
	case CBC_OP_RECORD_FAILURE:
	case CBC_OP_SET_STATE:
		if (from_last)
			resilient_last(r, c->name, c->ctx, c->snap);
		else
			resilient_closed(c->name, c->snap);
		break;
	case CBC_OP_CAS:
		*c->applied = false;
		resilient_closed(c->name, c->snap);
		break;
	case CBC_OP_ACQUIRE_SLOT:
		memset(c->slot, 0, sizeof *c->slot);
		c->slot->acquired = true;
		memcpy(c->slot->token, RESILIENT_ALLOW_TOKEN, sizeof RESILIENT_ALLOW_TOKEN);
		c->slot->expires_at = cbci_ctx_now(c->ctx);
		break;
	case CBC_OP_RELEASE_SLOT:
	case CBC_OP_DELETE:
		break;
	}
	cbci_error_clear(err);
	return CBC_OK;
}

/* Run c on the wrapped store: an outcome for a circuit whose policy is
 * not kept goes to a remote store with "policy": true (protocol 3's
 * compact snapshots carry it only when asked). */
static cbc_status
op_run_inner(resilient *r, const op_call *c, cbc_error *err)
{
	cbc_conn *conn = cbci_store_remote_conn(r->inner);

	if (conn != NULL && (c->op == CBC_OP_RECORD_SUCCESS || c->op == CBC_OP_RECORD_FAILURE) &&
	    resilient_wants_policy(r, c->name))
		return cbci_record_policy(conn, c->name, c->op == CBC_OP_RECORD_FAILURE, c->ctx,
		    c->snap, err);
	return op_run(r->inner->ops, r->inner->impl, c, err);
}

/* The driver: wrapped store first, then the policy. */
static cbc_status
resilient_op(resilient *r, const op_call *c, cbc_error *err)
{
	cbc_error inner_err;
	op_call local;
	cbc_ctx own;
	bool skipped;
	cbc_status st;

	cbci_error_clear(&inner_err);
	skipped = resilient_skipping(r, &inner_err);
	if (!skipped) {
		st = op_run_inner(r, c, &inner_err);
		if (st == CBC_OK) {
			resilient_answered(r, c->name, c->snap != NULL ? c->snap : NULL);
			return CBC_OK;
		}
		if (!cbci_store_failed(&inner_err))
			return cbci_error_copy(err, &inner_err);
	}
	resilient_failed(r, c->op, &inner_err, skipped);
	if (c->op == CBC_OP_DELETE)
		return cbci_error_copy(err, &inner_err);
	switch (r->opts.policy) {
	case CBC_POLICY_LOCAL:
		if (c->op == CBC_OP_RELEASE_SLOT && strcmp(c->token, RESILIENT_ALLOW_TOKEN) == 0)
			return CBC_OK;
		st = resilient_degrade(r, c->name, err);
		if (st != CBC_OK)
			return st;
		local = *c;
		if (c->ctx != NULL) {
			resilient_fallback_ctx(r, c->name, c->ctx, &own);
			local.ctx = &own;
		}
		return op_run(&cbci_local_ops, r->fallback, &local, err);
	case CBC_POLICY_ALLOW:
		return op_answer_allow(r, c, false, err);
	case CBC_POLICY_REJECT:
		if (op_is_pre_call(c->op))
			return cbci_error_copy(err, &inner_err);
		return op_answer_allow(r, c, true, err);
	}
	return cbci_error_copy(err, &inner_err);
}

static cbc_status
res_get(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	op_call c = { .op = CBC_OP_GET, .name = name, .ctx = ctx, .snap = out };

	return resilient_op(impl, &c, err);
}

static cbc_status
res_record_success(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	op_call c = { .op = CBC_OP_RECORD_SUCCESS, .name = name, .ctx = ctx, .snap = out };

	return resilient_op(impl, &c, err);
}

static cbc_status
res_record_failure(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	op_call c = { .op = CBC_OP_RECORD_FAILURE, .name = name, .ctx = ctx, .snap = out };

	return resilient_op(impl, &c, err);
}

static cbc_status
res_cas(void *impl, const char *name, cbc_state from, cbc_state to, const cbc_ctx *ctx,
    bool *applied, cbc_snapshot *out, cbc_error *err)
{
	op_call c = { .op = CBC_OP_CAS,
		.name = name,
		.ctx = ctx,
		.from = from,
		.to = to,
		.applied = applied,
		.snap = out };

	return resilient_op(impl, &c, err);
}

static cbc_status
res_set_state(void *impl, const char *name, cbc_state state, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	op_call c = { .op = CBC_OP_SET_STATE, .name = name, .ctx = ctx, .to = state, .snap = out };

	return resilient_op(impl, &c, err);
}

static cbc_status
res_acquire_slot(void *impl, const char *name, const cbc_ctx *ctx, cbc_slot *out, cbc_error *err)
{
	op_call c = { .op = CBC_OP_ACQUIRE_SLOT, .name = name, .ctx = ctx, .slot = out };

	return resilient_op(impl, &c, err);
}

static cbc_status
res_release_slot(void *impl, const char *name, const char *token, const cbc_ctx *ctx,
    cbc_error *err)
{
	op_call c = { .op = CBC_OP_RELEASE_SLOT, .name = name, .ctx = ctx, .token = token };

	return resilient_op(impl, &c, err);
}

static cbc_status
res_delete(void *impl, const char *name, bool *existed, cbc_error *err)
{
	op_call c = { .op = CBC_OP_DELETE, .name = name, .existed = existed };
	resilient *r = impl;
	seen_circuit *s;
	cbc_status st;

	st = resilient_op(r, &c, err);
	/* Forget the circuit here too: a deleted circuit reads as initial. */
	pthread_mutex_lock(&r->lock);
	s = seen_find(r, name);
	if (s != NULL) {
		HASH_DEL(r->seen, s);
		r->seen_count--;
		free(s);
	}
	cbci_local_forget(r->fallback, name);
	pthread_mutex_unlock(&r->lock);
	return st;
}

static void
res_destroy(void *impl)
{
	resilient *r = impl;
	seen_circuit *s, *tmp;

	HASH_ITER (hh, r->seen, s, tmp) {
		HASH_DEL(r->seen, s);
		free(s);
	}
	cbci_local_free(r->fallback);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static const cbc_store_ops resilient_ops = {
	.get = res_get,
	.record_success = res_record_success,
	.record_failure = res_record_failure,
	.cas = res_cas,
	.set_state = res_set_state,
	.acquire_slot = res_acquire_slot,
	.release_slot = res_release_slot,
	.delete_circuit = res_delete,
	.destroy = res_destroy,
};

cbc_store *
cbc_store_new_resilient(cbc_store *inner, const cbc_resilient_options *opts, cbc_error *err)
{
	cbc_resilient_options defaults;
	resilient *r;
	cbc_store *store;

	if (inner == NULL) {
		cbci_fail(err, CBC_EINVAL, "inner store is required");
		return NULL;
	}
	if (opts == NULL) {
		cbc_resilient_options_init(&defaults);
		opts = &defaults;
	}
	if ((unsigned)opts->policy > CBC_POLICY_REJECT) {
		cbci_fail(err, CBC_EINVAL,
		    "policy must be CBC_POLICY_LOCAL, CBC_POLICY_ALLOW or CBC_POLICY_REJECT");
		return NULL;
	}
	if (opts->timeout_backoff_ms < 0 || opts->timeout_backoff_ms > RESILIENT_BACKOFF_MAX) {
		cbci_fail(err, CBC_EINVAL, "timeout_backoff_ms must be from 0 to %d",
		    RESILIENT_BACKOFF_MAX);
		return NULL;
	}
	r = calloc(1, sizeof *r);
	if (r == NULL) {
		cbci_fail(err, CBC_ENOMEM, "out of memory creating a resilient store");
		return NULL;
	}
	r->fallback = cbci_local_new(0, err);
	if (r->fallback == NULL || pthread_mutex_init(&r->lock, NULL) != 0) {
		cbci_local_free(r->fallback);
		free(r);
		cbci_fail(err, CBC_ENOMEM, "out of memory creating a resilient store");
		return NULL;
	}
	r->inner = inner;
	r->opts = *opts;
	store = cbc_store_new_custom(&resilient_ops, r, err);
	if (store == NULL)
		res_destroy(r);
	return store;
}

void
cbci_resilient_remember(cbc_store *store, const char *name, const cbc_snapshot *snap)
{
	resilient *r;
	seen_circuit *s;

	if (store == NULL || store->ops != &resilient_ops)
		return;
	r = store->impl;
	pthread_mutex_lock(&r->lock);
	s = seen_get(r, name);
	if (s != NULL) {
		/* cbd answered through the cache: authoritative again, as
		 * when the wrapped store answers (resilient_answered). */
		if (s->degraded) {
			s->degraded = false;
			cbci_local_forget(r->fallback, name);
		}
		seen_note(s, snap);
	}
	pthread_mutex_unlock(&r->lock);
}

/* The resilient store over a remote one: its state and the connection;
 * NULL for any other store. */
static cbc_conn *
resilient_remote(cbc_store *store, resilient **out)
{
	if (store == NULL || store->ops != &resilient_ops)
		return NULL;
	*out = store->impl;
	return cbci_store_remote_conn((*out)->inner);
}

/* The wrapped store failed outside the store ops (allow, record): start
 * the timeout backoff as resilient_failed does; the store op the caller
 * makes next reports the error (once). */
static void
resilient_backoff(resilient *r, const cbc_error *err)
{
	if (err->status == CBC_ETIMEOUT && r->opts.timeout_backoff_ms > 0) {
		pthread_mutex_lock(&r->lock);
		r->skip_until = clock_monotonic_ms() + r->opts.timeout_backoff_ms;
		r->skip_error = *err;
		pthread_mutex_unlock(&r->lock);
	}
}

/* An allow answer's state into the last snapshot seen of name, so that a
 * later degradation starts from it: an open circuit stays open (its
 * opened_at put back from retry_after_ms). */
static void
resilient_note_allow(resilient *r, const char *name, const cbc_ctx *ctx,
    const cbc_allow_result *res)
{
	cb_state state = (cb_state)res->state;
	int64_t now = cbci_ctx_now(ctx);
	seen_circuit *s;
	cb_policy policy;
	cbc_ctx own;

	resilient_fallback_ctx(r, name, ctx, &own);
	cbci_ctx_policy(&own, &policy);
	pthread_mutex_lock(&r->lock);
	s = seen_get(r, name);
	if (s != NULL && s->last.state != state) {
		if (state == CB_STATE_OPEN) {
			s->last.state = CB_STATE_OPEN;
			s->last.opened_at =
			    now - (breaker_break_ms(&s->last, &policy) - res->retry_after_ms);
		} else {
			breaker_force(&s->last, state, now);
		}
	}
	pthread_mutex_unlock(&r->lock);
}

bool
cbci_resilient_allow(cbc_store *store, cbc_conn *via, const char *name, const cbc_ctx *ctx,
    const cbc_allow_options *opts, cbc_allow_result *out, cbc_status *status, cbc_error *err)
{
	resilient *r = NULL;
	cbc_conn *conn = resilient_remote(store, &r);
	cbc_error inner_err;

	if (conn != NULL && via != NULL)
		conn = via;
	if (conn == NULL || resilient_skipping(r, &inner_err))
		return false;
	*status = cbc_allow_ex(conn, name, ctx, opts, out, &inner_err);
	if (*status == CBC_OK) {
		resilient_answered(r, name, NULL);
		resilient_note_allow(r, name, ctx, out);
		cbci_error_clear(err);
		return true;
	}
	if (!cbci_store_failed(&inner_err)) {
		cbci_error_copy(err, &inner_err);
		return true;
	}
	resilient_backoff(r, &inner_err);
	return false;
}

bool
cbci_resilient_record(cbc_store *store, cbc_conn *via, const char *name, cbc_outcome outcome,
    const char *permit, const cbc_ctx *ctx, cbc_snapshot *out, bool *has_out)
{
	resilient *r = NULL;
	cbc_conn *conn = resilient_remote(store, &r);
	cbc_error inner_err;
	cbc_snapshot snap;

	*has_out = false;
	if (conn != NULL && via != NULL)
		conn = via;
	if (conn == NULL || resilient_skipping(r, &inner_err))
		return false;
	if (cbc_record(conn, name, outcome, permit, ctx, &snap, &inner_err) == CBC_OK) {
		/* An ignored outcome's snapshot of a circuit not stored: no
		 * snapshot worth keeping. */
		resilient_answered(r, name, outcome == CBC_OUTCOME_IGNORE ? NULL : &snap);
		if (out != NULL)
			*out = snap;
		*has_out = true;
		return true;
	}
	if (cbci_store_failed(&inner_err)) {
		resilient_backoff(r, &inner_err);
		return false;
	}
	/* cbd refused it (capacity): the permit was released all the same. */
	return true;
}

void
cbci_resilient_record_ignore(cbc_store *store, const char *name, const cbc_ctx *ctx)
{
	resilient *r = NULL;
	cbc_conn *conn = resilient_remote(store, &r);
	cbc_error inner_err;

	if (conn == NULL || resilient_skipping(r, &inner_err))
		return;
	if (cbc_record(conn, name, CBC_OUTCOME_IGNORE, NULL, ctx, NULL, &inner_err) == CBC_OK)
		resilient_answered(r, name, NULL);
	else if (cbci_store_failed(&inner_err))
		resilient_backoff(r, &inner_err);
}
