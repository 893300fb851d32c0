/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store-remote.c — the store interface over cbd: each operation is the
 * protocol op of the same name on a borrowed cbc_conn (see ops.c).
 */
#include "internal.h"

static cbc_status
remote_get(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	return cbc_get(impl, name, ctx, out, err);
}

static cbc_status
remote_record_success(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	return cbc_record_success(impl, name, ctx, out, err);
}

static cbc_status
remote_record_failure(void *impl, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	return cbc_record_failure(impl, name, ctx, out, err);
}

static cbc_status
remote_cas(void *impl, const char *name, cbc_state from, cbc_state to, const cbc_ctx *ctx,
    bool *applied, cbc_snapshot *out, cbc_error *err)
{
	return cbc_cas(impl, name, from, to, ctx, applied, out, err);
}

static cbc_status
remote_set_state(void *impl, const char *name, cbc_state state, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err)
{
	return cbc_set_state(impl, name, state, ctx, out, err);
}

static cbc_status
remote_acquire_slot(void *impl, const char *name, const cbc_ctx *ctx, cbc_slot *out, cbc_error *err)
{
	return cbc_acquire_slot(impl, name, ctx, out, err);
}

static cbc_status
remote_release_slot(void *impl, const char *name, const char *token, const cbc_ctx *ctx,
    cbc_error *err)
{
	return cbc_release_slot(impl, name, token, ctx, err);
}

static cbc_status
remote_delete(void *impl, const char *name, bool *existed, cbc_error *err)
{
	return cbc_delete(impl, name, existed, err);
}

static const cbc_store_ops remote_ops = {
	.get = remote_get,
	.record_success = remote_record_success,
	.record_failure = remote_record_failure,
	.cas = remote_cas,
	.set_state = remote_set_state,
	.acquire_slot = remote_acquire_slot,
	.release_slot = remote_release_slot,
	.delete_circuit = remote_delete,
	.destroy = NULL, /* the connection is borrowed */
};

cbc_store *
cbc_store_new_remote(cbc_conn *conn, cbc_error *err)
{
	if (conn == NULL) {
		cbci_fail(err, CBC_EINVAL, "conn is required");
		return NULL;
	}
	return cbc_store_new_custom(&remote_ops, conn, err);
}

cbc_conn *
cbci_store_remote_conn(const cbc_store *store)
{
	return store != NULL && store->ops == &remote_ops ? store->impl : NULL;
}
