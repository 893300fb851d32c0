/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c — the store interface: a handle holding a vtable, and the
 * dispatchers that check arguments (names, states, ctx) once for every
 * implementation before calling it.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const op_names[CBC_STORE_OP_COUNT] = {
	[CBC_OP_GET] = "get",
	[CBC_OP_RECORD_SUCCESS] = "record_success",
	[CBC_OP_RECORD_FAILURE] = "record_failure",
	[CBC_OP_CAS] = "cas",
	[CBC_OP_SET_STATE] = "set_state",
	[CBC_OP_ACQUIRE_SLOT] = "acquire_slot",
	[CBC_OP_RELEASE_SLOT] = "release_slot",
	[CBC_OP_DELETE] = "delete",
};

const char *
cbc_store_op_name(cbc_store_op op)
{
	if ((unsigned)op >= CBC_STORE_OP_COUNT)
		return "unknown";
	return op_names[op];
}

cbc_store *
cbc_store_new_custom(const cbc_store_ops *ops, void *impl, cbc_error *err)
{
	cbc_store *store;

	if (ops == NULL || ops->get == NULL || ops->record_success == NULL ||
	    ops->record_failure == NULL || ops->cas == NULL || ops->set_state == NULL ||
	    ops->acquire_slot == NULL || ops->release_slot == NULL || ops->delete_circuit == NULL) {
		cbci_fail(err, CBC_EINVAL, "ops must implement every store operation");
		return NULL;
	}
	store = calloc(1, sizeof *store);
	if (store == NULL) {
		cbci_fail(err, CBC_ENOMEM, "out of memory creating a store");
		return NULL;
	}
	store->ops = ops;
	store->impl = impl;
	cbci_error_clear(err);
	return store;
}

void
cbc_store_free(cbc_store *store)
{
	if (store == NULL)
		return;
	if (store->ops->destroy != NULL)
		store->ops->destroy(store->impl);
	free(store);
}

static const cbc_ctx empty_ctx;

/* Common checks: name and ctx. *ctx is replaced by an empty one if NULL. */
static cbc_status
store_check(const char *name, const cbc_ctx **ctx, cbc_error *err)
{
	cbc_status st = cbci_name_check(name, "name", err);

	if (st != CBC_OK)
		return st;
	if (*ctx == NULL)
		*ctx = &empty_ctx;
	return cbci_ctx_check(*ctx, "ctx.", err);
}

static cbc_status
state_check(cbc_state state, const char *field, cbc_error *err)
{
	if ((unsigned)state > CBC_STATE_HALF_OPEN)
		return cbci_fail(err, CBC_EINVAL,
		    "%s must be CBC_STATE_CLOSED, CBC_STATE_OPEN or CBC_STATE_HALF_OPEN", field);
	return CBC_OK;
}

/* Clear err after a successful implementation call. */
static cbc_status
store_done(cbc_status st, cbc_error *err)
{
	if (st == CBC_OK)
		cbci_error_clear(err);
	return st;
}

cbc_status
cbc_store_get(cbc_store *store, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	cbc_snapshot tmp;
	cbc_status st = store_check(name, &ctx, err);

	if (st != CBC_OK)
		return st;
	return store_done(store->ops->get(store->impl, name, ctx, out ? out : &tmp, err), err);
}

cbc_status
cbc_store_record_success(cbc_store *store, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	cbc_snapshot tmp;
	cbc_status st = store_check(name, &ctx, err);

	if (st != CBC_OK)
		return st;
	return store_done(store->ops->record_success(store->impl, name, ctx, out ? out : &tmp, err),
	    err);
}

cbc_status
cbc_store_record_failure(cbc_store *store, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	cbc_snapshot tmp;
	cbc_status st = store_check(name, &ctx, err);

	if (st != CBC_OK)
		return st;
	return store_done(store->ops->record_failure(store->impl, name, ctx, out ? out : &tmp, err),
	    err);
}

cbc_status
cbc_store_cas(cbc_store *store, const char *name, cbc_state from, cbc_state to, const cbc_ctx *ctx,
    bool *applied, cbc_snapshot *out, cbc_error *err)
{
	cbc_snapshot tmp;
	bool tmp_applied;
	cbc_status st = store_check(name, &ctx, err);

	if (st == CBC_OK)
		st = state_check(from, "from", err);
	if (st == CBC_OK)
		st = state_check(to, "to", err);
	if (st != CBC_OK)
		return st;
	return store_done(store->ops->cas(store->impl, name, from, to, ctx,
			      applied ? applied : &tmp_applied, out ? out : &tmp, err),
	    err);
}

cbc_status
cbc_store_set_state(cbc_store *store, const char *name, cbc_state state, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err)
{
	cbc_snapshot tmp;
	cbc_status st = store_check(name, &ctx, err);

	if (st == CBC_OK)
		st = state_check(state, "state", err);
	if (st != CBC_OK)
		return st;
	return store_done(store->ops->set_state(store->impl, name, state, ctx, out ? out : &tmp,
			      err),
	    err);
}

cbc_status
cbc_store_acquire_slot(cbc_store *store, const char *name, const cbc_ctx *ctx, cbc_slot *out,
    cbc_error *err)
{
	cbc_slot tmp;
	cbc_status st = store_check(name, &ctx, err);

	if (st != CBC_OK)
		return st;
	return store_done(store->ops->acquire_slot(store->impl, name, ctx, out ? out : &tmp, err),
	    err);
}

cbc_status
cbc_store_release_slot(cbc_store *store, const char *name, const char *token, const cbc_ctx *ctx,
    cbc_error *err)
{
	cbc_status st = store_check(name, &ctx, err);

	if (st != CBC_OK)
		return st;
	if (token == NULL)
		return cbci_fail(err, CBC_EINVAL, "token is required");
	if (strlen(token) >= CBC_TOKEN_SIZE)
		return cbci_fail(err, CBC_EINVAL, "token must be shorter than %d bytes",
		    CBC_TOKEN_SIZE);
	return store_done(store->ops->release_slot(store->impl, name, token, ctx, err), err);
}

cbc_status
cbc_store_delete(cbc_store *store, const char *name, bool *existed, cbc_error *err)
{
	bool tmp;
	cbc_status st = cbci_name_check(name, "name", err);

	if (st != CBC_OK)
		return st;
	return store_done(store->ops->delete_circuit(store->impl, name, existed ? existed : &tmp,
			      err),
	    err);
}
