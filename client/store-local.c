/*
 * store-local.c — the in-process store: cbd's own circuit table and state
 * machine (src/circuit-table.c, src/breaker.c) behind one mutex. Also the
 * resilient store's private fallback, which needs seeding a circuit with
 * a given snapshot (cbci_local_seed).
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

/* Seeding replays outcomes; counts above this are clamped (thresholds
 * that large make no practical difference to the next decision). */
#define LOCAL_SEED_REPLAY_MAX 100000

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
	case CT_NOMEM:
		break;
	}
	return cbci_fail(err, CBC_ENOMEM, "out of memory storing circuit \"%s\"", name);
}

static cbc_status
local_get(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	cbci_local *local = impl;
	int64_t now = cbci_ctx_now(ctx);
	cb_snapshot snap;
	cb_policy policy;

	cbci_ctx_policy(ctx, &policy);
	pthread_mutex_lock(&local->lock);
	circuit_table_get(local->table, name, &snap);
	pthread_mutex_unlock(&local->lock);
	cbci_snapshot_fill(out, name, &snap, breaker_retry_after_ms(&snap, &policy, now));
	(void)err;
	return CBC_OK;
}

/* record_success and record_failure. */
static cbc_status
local_record(cbci_local *local, const char *name, const cbc_ctx *ctx, bool success,
    cbc_snapshot *out, cbc_error *err)
{
	int64_t now = cbci_ctx_now(ctx);
	cb_snapshot snap;
	cb_policy policy;
	ct_status status;

	cbci_ctx_policy(ctx, &policy);
	pthread_mutex_lock(&local->lock);
	if (success)
		status =
		    circuit_table_record_success(local->table, name, &policy, now, &snap, NULL);
	else
		status =
		    circuit_table_record_failure(local->table, name, &policy, now, &snap, NULL);
	pthread_mutex_unlock(&local->lock);
	cbci_snapshot_fill(out, name, &snap, breaker_retry_after_ms(&snap, &policy, now));
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
	int64_t now = cbci_ctx_now(ctx);
	cb_snapshot snap;
	cb_policy policy;
	ct_status status;

	cbci_ctx_policy(ctx, &policy);
	pthread_mutex_lock(&local->lock);
	status = circuit_table_cas(local->table, name, (cb_state)from, (cb_state)to, now, applied,
	    &snap, NULL);
	pthread_mutex_unlock(&local->lock);
	cbci_snapshot_fill(out, name, &snap, breaker_retry_after_ms(&snap, &policy, now));
	return local_status(status, name, err);
}

static cbc_status
local_set_state(void *impl, const char *name, cbc_state state, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err)
{
	cbci_local *local = impl;
	int64_t now = cbci_ctx_now(ctx);
	cb_snapshot snap;
	cb_policy policy;
	ct_status status;

	cbci_ctx_policy(ctx, &policy);
	pthread_mutex_lock(&local->lock);
	status = circuit_table_set_state(local->table, name, (cb_state)state, now, &snap, NULL);
	pthread_mutex_unlock(&local->lock);
	cbci_snapshot_fill(out, name, &snap, breaker_retry_after_ms(&snap, &policy, now));
	return local_status(status, name, err);
}

static cbc_status
local_acquire_slot(void *impl, const char *name, const cbc_ctx *ctx, cbc_slot *out, cbc_error *err)
{
	cbci_local *local = impl;
	int64_t now = cbci_ctx_now(ctx);
	ct_slot_grant grant;
	cb_policy policy;
	ct_status status;
	bool acquired;

	_Static_assert(CT_TOKEN_SIZE <= CBC_TOKEN_SIZE, "token room");
	cbci_ctx_policy(ctx, &policy);
	pthread_mutex_lock(&local->lock);
	status =
	    circuit_table_acquire_slot(local->table, name, &policy, now, NULL, &acquired, &grant);
	pthread_mutex_unlock(&local->lock);
	memset(out, 0, sizeof *out);
	if (status == CT_OK && acquired) {
		out->acquired = true;
		memcpy(out->token, grant.token, sizeof grant.token);
		out->expires_at = grant.expires_at;
	}
	return local_status(status, name, err);
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

/* Clamp a count for replay. */
static int64_t
seed_count(int64_t n)
{
	if (n < 0)
		return 0;
	return n > LOCAL_SEED_REPLAY_MAX ? LOCAL_SEED_REPLAY_MAX : n;
}

/*
 * The table has no "put": we rebuild snap with the state machine's own
 * transitions, under a policy that never trips or closes, at the
 * snapshot's own times:
 *   failure_count failures at last_failure_at (a success after them when
 *   the count is 0 but a failure time is set), then a forced open at
 *   opened_at, then forced half_open and success_count successes.
 */
cbc_status
cbci_local_seed(cbci_local *local, const char *name, const cb_snapshot *snap, cbc_error *err)
{
	cb_policy replay;
	cb_snapshot cur;
	ct_status status = CT_OK;
	int64_t fail_at, open_at;

	breaker_policy_default(&replay);
	replay.failure_threshold = CB_COUNT_MAX;
	replay.success_threshold = CB_COUNT_MAX;
	replay.max_gap_ms = 0;
	fail_at = snap->last_failure_at != CB_TIME_NONE ? snap->last_failure_at : 0;
	open_at = snap->opened_at != CB_TIME_NONE ? snap->opened_at : clock_realtime_ms();

	pthread_mutex_lock(&local->lock);
	circuit_table_delete(local->table, name);
	if (snap->last_failure_at != CB_TIME_NONE || snap->failure_count > 0) {
		int64_t n = seed_count(snap->failure_count);

		for (int64_t i = 0; i < (n > 0 ? n : 1) && status == CT_OK; i++)
			status = circuit_table_record_failure(local->table, name, &replay, fail_at,
			    &cur, NULL);
		if (n == 0 && status == CT_OK)
			status = circuit_table_record_success(local->table, name, &replay, fail_at,
			    &cur, NULL);
	}
	if (status == CT_OK && snap->state != CB_STATE_CLOSED)
		status =
		    circuit_table_set_state(local->table, name, CB_STATE_OPEN, open_at, &cur, NULL);
	if (status == CT_OK && snap->state == CB_STATE_HALF_OPEN) {
		int64_t n = seed_count(snap->success_count);

		status = circuit_table_set_state(local->table, name, CB_STATE_HALF_OPEN, open_at,
		    &cur, NULL);
		for (int64_t i = 0; i < n && status == CT_OK; i++)
			status = circuit_table_record_success(local->table, name, &replay, open_at,
			    &cur, NULL);
	}
	pthread_mutex_unlock(&local->lock);
	return local_status(status, name, err);
}
