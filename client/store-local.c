/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store-local.c — the in-process store: cbd's own circuit table and state
 * machine (src/core/circuit-table.c, src/core/breaker.c) behind one mutex. Also the
 * resilient store's private fallback, which needs seeding a circuit with
 * a given snapshot (cbci_local_seed).
 *
 * A local store serves one process, so each call's ctx is the policy (there
 * is no operator config to defer to); circuits are reclaimed only when
 * max_circuits is reached.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "circuit-table.h"
#include "internal.h"

struct cbci_local {
	pthread_mutex_t lock;
	circuit_table *table;
};

/* A random 64-bit instance id so slot tokens differ across stores and
 * processes; falls back to time and pid if getrandom is unavailable. */
static uint64_t
local_instance_id(void)
{
	uint64_t id;
	struct timespec ts;

	if (getrandom(&id, sizeof id, GRND_NONBLOCK) == (ssize_t)sizeof id)
		return id;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	id = ((uint64_t)getpid() << 40) ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec;
	return id ^ (uint64_t)(uintptr_t)&id;
}

cbci_local *
cbci_local_new(uint64_t max_circuits, cbc_error *err)
{
	cbci_local *local = calloc(1, sizeof *local);

	if (local == NULL) {
		cbci_fail(err, CBC_ENOMEM, "out of memory creating a local store");
		return NULL;
	}
	local->table =
	    circuit_table_new(max_circuits == 0 ? UINT64_MAX : max_circuits, local_instance_id());
	if (local->table == NULL || pthread_mutex_init(&local->lock, NULL) != 0) {
		circuit_table_free(local->table);
		free(local);
		cbci_fail(err, CBC_ENOMEM, "out of memory creating a local store");
		return NULL;
	}
	return local;
}

void
cbci_local_free(cbci_local *local)
{
	if (local == NULL)
		return;
	circuit_table_free(local->table);
	pthread_mutex_destroy(&local->lock);
	free(local);
}

/* The table's status as ours. */
static cbc_status
local_status(ct_status status, const char *name, cbc_error *err)
{
	switch (status) {
	case CT_OK:
		return CBC_OK;
	case CT_CAPACITY:
		cbci_fail(err, CBC_ECAPACITY, "max_circuits reached: circuit \"%s\" not created",
		    name);
		if (err != NULL)
			memcpy(err->code, "capacity", sizeof "capacity");
		return CBC_ECAPACITY;
	case CT_SLOTS:
	case CT_NOMEM:
		break;
	}
	return cbci_fail(err, CBC_ENOMEM, "out of memory storing circuit \"%s\"", name);
}

/* The table call of one store call: ctx's policy (built-in presets
 * resolved), clock and the call's duration (slow calls). */
static ct_call
local_call(const cbc_ctx *ctx, cb_policy *policy)
{
	int64_t now = cbci_ctx_now(ctx);

	cbci_ctx_policy(ctx, policy);
	/* One process: min_reporters cannot be met by anyone else. */
	policy->min_reporters = 1;
	return (ct_call){ .policy = policy,
		.declared = NULL,
		.now = now,
		.clock = now,
		.duration_ms = ctx != NULL && ctx->has_duration ? ctx->duration_ms : 0 };
}

/* The public snapshot of a view: the core's members, and protocol 2's
 * current_break_ms and (rate rule) window as cbd reports them. Totals
 * stay "not reported": a local store does not keep them. */
static void
local_fill(cbc_snapshot *out, const char *name, const ct_view *view, const cb_policy *policy,
    int64_t now)
{
	cbci_snapshot_fill(out, name, &view->snap, circuit_table_retry_after(view, policy, now));
	out->current_break_ms = breaker_break_ms(&view->snap, policy);
	if (policy->trip == CB_TRIP_RATE) {
		cb_window_counts w = view->has_window ? view->window : (cb_window_counts){ 0 };

		out->window.known = true;
		out->window.calls = w.calls;
		out->window.failures = w.failures;
		out->window.slow = w.slow;
		out->window.failure_rate = w.calls > 0 ? w.failures * 100.0 / w.calls : 0.0;
		out->window.slow_call_rate = w.calls > 0 ? w.slow * 100.0 / w.calls : 0.0;
	}
}

static cbc_status
local_get(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	cbci_local *local = impl;
	cb_policy policy;
	ct_call call = local_call(ctx, &policy);
	ct_view view;

	cbc_status st = cbci_ctx_check_local(ctx, "ctx.", err);

	if (st != CBC_OK)
		return st;
	pthread_mutex_lock(&local->lock);
	circuit_table_get(local->table, name, call.now, &view, NULL);
	pthread_mutex_unlock(&local->lock);
	local_fill(out, name, &view, &policy, call.now);
	return CBC_OK;
}

/* record_success and record_failure. */
static cbc_status
local_record(cbci_local *local, const char *name, const cbc_ctx *ctx, bool success,
    cbc_snapshot *out, cbc_error *err)
{
	cb_policy policy;
	ct_call call = local_call(ctx, &policy);
	ct_status status;
	ct_view view;

	cbc_status st = cbci_ctx_check_local(ctx, "ctx.", err);

	if (st != CBC_OK)
		return st;
	pthread_mutex_lock(&local->lock);
	if (success)
		status = circuit_table_record_success(local->table, name, &call, &view, NULL);
	else
		status = circuit_table_record_failure(local->table, name, &call, &view, NULL);
	pthread_mutex_unlock(&local->lock);
	local_fill(out, name, &view, &policy, call.now);
	return local_status(status, name, err);
}

static cbc_status
local_record_success(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	return local_record(impl, name, ctx, true, out, err);
}

static cbc_status
local_record_failure(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	return local_record(impl, name, ctx, false, out, err);
}

static cbc_status
local_cas(void *impl, const char *name, cbc_state from, cbc_state to, const cbc_ctx *ctx,
    bool *applied, cbc_snapshot *out, cbc_error *err)
{
	cbci_local *local = impl;
	cb_policy policy;
	ct_call call = local_call(ctx, &policy);
	ct_status status;
	ct_view view;

	cbc_status st = cbci_ctx_check_local(ctx, "ctx.", err);

	if (st != CBC_OK)
		return st;
	pthread_mutex_lock(&local->lock);
	status = circuit_table_cas(local->table, name, (cb_state)from, (cb_state)to, &call, applied,
	    &view, NULL);
	pthread_mutex_unlock(&local->lock);
	local_fill(out, name, &view, &policy, call.now);
	return local_status(status, name, err);
}

static cbc_status
local_set_state(void *impl, const char *name, cbc_state state, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err)
{
	cbci_local *local = impl;
	cb_policy policy;
	ct_call call = local_call(ctx, &policy);
	ct_status status;
	ct_view view;

	cbc_status st = cbci_ctx_check_local(ctx, "ctx.", err);

	if (st != CBC_OK)
		return st;
	pthread_mutex_lock(&local->lock);
	status =
	    circuit_table_set_state(local->table, name, (cb_state)state, NULL, &call, &view, NULL);
	pthread_mutex_unlock(&local->lock);
	local_fill(out, name, &view, &policy, call.now);
	return local_status(status, name, err);
}

static cbc_status
local_acquire_slot(void *impl, const char *name, const cbc_ctx *ctx, cbc_slot *out, cbc_error *err)
{
	cbci_local *local = impl;
	cb_policy policy;
	ct_call call = local_call(ctx, &policy);
	ct_slot_grant grant;
	ct_status status;
	bool acquired;

	_Static_assert(CT_TOKEN_SIZE <= CBC_TOKEN_SIZE, "token room");
	cbc_status st = cbci_ctx_check_local(ctx, "ctx.", err);

	if (st != CBC_OK)
		return st;
	pthread_mutex_lock(&local->lock);
	status = circuit_table_acquire_slot(local->table, name, &call, &acquired, &grant);
	pthread_mutex_unlock(&local->lock);
	memset(out, 0, sizeof *out);
	if (status == CT_OK && acquired) {
		out->acquired = true;
		memcpy(out->token, grant.token, sizeof grant.token);
		out->expires_at = grant.expires_at;
	}
	return local_status(status, name, err);
}

bool
cbci_local_allow(cbc_store *store, const char *name, const cbc_ctx *ctx, bool retry,
    cbc_allow_result *out, cbc_status *status, cbc_error *err)
{
	static const cbc_reason reasons[] = {
		[CT_REFUSED_NONE] = CBC_REASON_NONE,
		[CT_REFUSED_OPEN] = CBC_REASON_OPEN,
		[CT_REFUSED_HELD] = CBC_REASON_HELD,
		[CT_REFUSED_HALF_OPEN_FULL] = CBC_REASON_HALF_OPEN_FULL,
		[CT_REFUSED_CONCURRENCY] = CBC_REASON_CONCURRENCY,
		[CT_REFUSED_RETRY_BUDGET] = CBC_REASON_RETRY_BUDGET,
	};
	cbci_local *local;
	cb_policy policy;
	ct_call call;
	ct_allow allow;
	ct_status st;

	if (store == NULL || store->ops != &cbci_local_ops)
		return false;
	local = store->impl;
	call = local_call(ctx, &policy);
	call.retry = retry;
	pthread_mutex_lock(&local->lock);
	st = circuit_table_allow(local->table, name, &call, &allow, NULL, NULL);
	pthread_mutex_unlock(&local->lock);
	*status = local_status(st, name, err);
	if (st != CT_OK)
		return true;
	memset(out, 0, sizeof *out);
	out->allowed = allow.allowed;
	out->state = (cbc_state)allow.state;
	out->retry_after_ms = allow.retry_after_ms;
	out->reason = (unsigned)allow.reason < sizeof reasons / sizeof reasons[0]
	    ? reasons[allow.reason]
	    : CBC_REASON_OTHER;
	out->in_flight = allow.reason == CT_REFUSED_CONCURRENCY ? (int64_t)allow.in_flight : -1;
	out->expires_at = -1;
	if (allow.has_permit) {
		out->has_permit = true;
		memcpy(out->permit, allow.permit.token, sizeof allow.permit.token);
		out->expires_at = allow.permit.expires_at;
	}
	cbci_error_clear(err);
	return true;
}

static cbc_status
local_release_slot(void *impl, const char *name, const char *token, const cbc_ctx *ctx,
    cbc_error *err)
{
	cbci_local *local = impl;
	int64_t now = cbci_ctx_now(ctx);

	(void)err;
	pthread_mutex_lock(&local->lock);
	circuit_table_release_slot(local->table, name, token, now);
	pthread_mutex_unlock(&local->lock);
	return CBC_OK;
}

static cbc_status
local_delete(void *impl, const char *name, bool *existed, cbc_error *err)
{
	cbci_local *local = impl;

	(void)err;
	pthread_mutex_lock(&local->lock);
	*existed = circuit_table_delete(local->table, name);
	pthread_mutex_unlock(&local->lock);
	return CBC_OK;
}

static void
local_destroy(void *impl)
{
	cbci_local_free(impl);
}

const cbc_store_ops cbci_local_ops = {
	.get = local_get,
	.record_success = local_record_success,
	.record_failure = local_record_failure,
	.cas = local_cas,
	.set_state = local_set_state,
	.acquire_slot = local_acquire_slot,
	.release_slot = local_release_slot,
	.delete_circuit = local_delete,
	.destroy = local_destroy,
};

cbc_store *
cbc_store_new_local(uint64_t max_circuits, cbc_error *err)
{
	cbci_local *local = cbci_local_new(max_circuits, err);
	cbc_store *store;

	if (local == NULL)
		return NULL;
	store = cbc_store_new_custom(&cbci_local_ops, local, err);
	if (store == NULL)
		cbci_local_free(local);
	return store;
}

void
cbci_local_forget(cbci_local *local, const char *name)
{
	pthread_mutex_lock(&local->lock);
	circuit_table_delete(local->table, name);
	pthread_mutex_unlock(&local->lock);
}

cbc_status
cbci_local_seed(cbci_local *local, const char *name, const cb_snapshot *snap, cbc_error *err)
{
	ct_view view;
	ct_status status;

	/* The table restores a circuit as the state file does: the snapshot
	 * as it is, no slots. */
	memset(&view, 0, sizeof view);
	view.snap = *snap;
	view.hold.until = CB_TIME_NONE;
	if (view.snap.state != CB_STATE_CLOSED && view.snap.opened_at == CB_TIME_NONE)
		view.snap.opened_at = clock_realtime_ms();
	pthread_mutex_lock(&local->lock);
	status = circuit_table_restore(local->table, name, &view, clock_realtime_ms());
	pthread_mutex_unlock(&local->lock);
	return local_status(status, name, err);
}
