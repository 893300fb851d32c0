/*
 * internal.h — libcbclient's private helpers shared by its files: error
 * filling, ctx conversion to the core's types, the clock, and the store
 * handle's layout. Not installed.
 */
#ifndef CBC_INTERNAL_H
#define CBC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "breaker.h"
#include "cbclient.h"
#include "clock.h"
#include "proto.h"

/* Fill err (may be NULL) with status and a printf-style message; returns
 * status so callers can `return cbci_fail(...)`. */
cbc_status cbci_fail(cbc_error *err, cbc_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clear err (may be NULL) to CBC_OK. */
void cbci_error_clear(cbc_error *err);

/* Copy src into err (may be NULL); returns src->status. */
cbc_status cbci_error_copy(cbc_error *err, const cbc_error *src);

/* ctx as the core's partial policy (the members given). */
void cbci_ctx_to_proto(const cbc_ctx *ctx, proto_ctx *out);
/* ctx resolved against the built-in defaults. */
void cbci_ctx_policy(const cbc_ctx *ctx, cb_policy *out);
/* ctx's clock: ctx->now when given, else the realtime clock. */
int64_t cbci_ctx_now(const cbc_ctx *ctx);
/* Check every member of ctx is in range; CBC_EINVAL naming `prefix.member`. */
cbc_status cbci_ctx_check(const cbc_ctx *ctx, const char *prefix, cbc_error *err);

/* Validate a circuit name; CBC_EINVAL naming `field`. */
cbc_status cbci_name_check(const char *name, const char *field, cbc_error *err);

/* A core snapshot as the public one (name copied, retry_after_ms given). */
void cbci_snapshot_fill(cbc_snapshot *out, const char *name, const cb_snapshot *snap,
    int64_t retry_after_ms);
/* The public snapshot as a core one. */
void cbci_snapshot_to_core(const cbc_snapshot *in, cb_snapshot *out);

/* Protocol 2's members of a snapshot as "not reported": not held, totals
 * -1, policy not known (snapshot.c). */
void cbci_snapshot_v2_clear(cbc_snapshot *out);
/* Read a snapshot object's protocol 2 members (hold, totals, policy) into
 * out (may be NULL: only checked); absent members read as not reported,
 * mistyped ones are CBC_EPROTO naming them. */
cbc_status cbci_snapshot_v2(const json_t *obj, cbc_snapshot *out, cbc_error *err);
/* The names of a policy_conflict array joined by commas into buf (cut to
 * fit; size may be 0); returns how many names it held. */
size_t cbci_conflict_join(const json_t *conflict, char *buf, size_t size);

/* Send `request` (an object; an "id" member is added) on conn and read
 * its reply. CBC_OK: *reply is the ok:true reply object, to json_decref.
 * CBC_EREFUSED / CBC_ECAPACITY: the daemon answered ok:false; err holds
 * its code and message. Anything else: a transport or framing error. */
cbc_status cbci_conn_call(cbc_conn *conn, json_t *request, json_t **reply, cbc_error *err);

/* hello's client name copied into buf; false when none was set. */
bool cbci_conn_client_name(cbc_conn *conn, char *buf, size_t size);

/* A store: its vtable and the implementation's state. */
struct cbc_store {
	const cbc_store_ops *ops;
	void *impl;
};

/* The local store's implementation, also used privately by the resilient
 * store as its fallback. */
typedef struct cbci_local cbci_local;
extern const cbc_store_ops cbci_local_ops;
cbci_local *cbci_local_new(uint64_t max_circuits, cbc_error *err);
void cbci_local_free(cbci_local *local);
/* Make name's circuit hold exactly snap (slots dropped). */
cbc_status cbci_local_seed(cbci_local *local, const char *name, const cb_snapshot *snap,
    cbc_error *err);
/* Drop name's circuit. */
void cbci_local_forget(cbci_local *local, const char *name);

/* Did the store fail (unreachable, timed out, broken, out of memory, or
 * cbd answered shutting_down / internal)? A refusal that is an answer
 * (bad_request, forbidden, capacity) or the caller's mistake is not. */
bool cbci_store_failed(const cbc_error *err);

#endif
