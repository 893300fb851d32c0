/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-circuit.c — the circuit ops (see op-circuit.h), what a store client
 * calls: get, record_success, record_failure, cas, set_state (with
 * holds), release, acquire_slot, release_slot, delete.
 */
#include <string.h>

#include "daemon.h"
#include "events.h"
#include "log.h"
#include "op-circuit.h"
#include "op-wait.h"

bool
op_get(op_call *call)
{
	ct_change change;
	ct_view view;

	call->table.found = call->found; /* looked up once (op_resolve_policy) */
	circuit_table_get_call(cbd.table, call->name, &call->table, &view, &change);
	call->table.found = NULL;
	events_changed(call->name, &change);
	/* (Written in place: "stored" and its value as one literal.) */
	if (call->direct && view.stored)
		ENC_LIT(&call->tail, ",\"stored\":true");
	else if (call->direct)
		ENC_LIT(&call->tail, ",\"stored\":false");
	else if (!op_reply_bool(call, "stored", view.stored))
		return false;
	return op_reply_snapshot(call, "snapshot", &view);
}

/* Shared body of record_success and record_failure; count: of
 * successes alike (>= 1). */
static inline __attribute__((always_inline)) bool
record_outcome(op_call *call, bool success, int64_t count)
{
	ct_change change;
	ct_status status;
	ct_view view;

	call->table.found = call->found; /* looked up once (op_resolve_policy) */
	if (count > 1)
		status = circuit_table_record_successes(cbd.table, call->name, &call->table,
		    (uint64_t)count, &view, &change);
	else if (success)
		status = circuit_table_record_success(cbd.table, call->name, &call->table, &view,
		    &change);
	else
		status = circuit_table_record_failure(cbd.table, call->name, &call->table, &view,
		    &change);
	call->table.found = NULL;
	if (!op_status(call, status))
		return false;
	events_changed(call->name, &change);
	return op_reply_snapshot(call, "snapshot", &view);
}

/* record_success with a count: that many successes alike. */
static __attribute__((noinline)) bool
record_counted(op_call *call)
{
	int64_t count = 1;

	if (!proto_req_int(&call->req, PROTO_MEMBER_COUNT, 1, PROTO_SUCCESS_COUNT_MAX, false,
		&count, NULL, &call->err))
		return false;
	return record_outcome(call, true, count);
}

bool
op_record_success(op_call *call)
{
	/* (A line without count, the most, costs a test of the scanner's
	 * index.) */
	if (proto_req_surely_absent(&call->req, PROTO_MEMBER_COUNT))
		return record_outcome(call, true, 1);
	return record_counted(call);
}

bool
op_record_failure(op_call *call)
{
	/* Failures are one a line: each may trip. */
	if (!proto_req_surely_absent(&call->req, PROTO_MEMBER_COUNT) &&
	    proto_req_has(&call->req, PROTO_MEMBER_COUNT))
		return proto_fail(&call->err, PROTO_BAD_REQUEST,
		    "count is only for record_success (failures are one a request)");
	return record_outcome(call, false, 1);
}

bool
op_cas(op_call *call)
{
	cb_state from, to;
	ct_change change;
	ct_view view;
	bool applied, answered;

	if (!proto_get_state(call->request, "from", true, &from, NULL, &call->err) ||
	    !proto_get_state(call->request, "to", true, &to, NULL, &call->err))
		return false;
	if (!op_cas_allowed(call, from, to, &answered))
		return false;
	if (answered)
		return true;
	if (!op_status(call,
		circuit_table_cas(cbd.table, call->name, from, to, &call->table, &applied, &view,
		    &change)))
		return false;
	events_changed(call->name, &change);
	if (json_object_set_new(op_reply(call), "applied", json_boolean(applied)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return op_reply_snapshot(call, "snapshot", &view);
}

bool
op_set_state(op_call *call)
{
	char user[CT_USER_MAX + 1];
	ct_hold_request req;
	ct_change change;
	ct_view view;
	cb_state state;
	bool hold;

	if (!proto_get_state(call->request, "state", true, &state, NULL, &call->err) ||
	    !op_hold_members(call, state, &hold, &req))
		return false;
	op_peer_user(call, user, sizeof user);
	req.by_user = user;
	if (!op_status(call,
		circuit_table_set_state(cbd.table, call->name, state, hold ? &req : NULL,
		    &call->table, &view, &change)))
		return false;
	op_audit_set_state(call, state, hold, &req);
	events_changed(call->name, &change);
	return op_reply_snapshot(call, "snapshot", &view);
}

bool
op_release(op_call *call)
{
	ct_change change;
	ct_view view;
	bool released;

	circuit_table_release(cbd.table, call->name, &call->table, &released, &view, &change);
	if (released)
		op_audit(call, "released the hold of", NULL);
	events_changed(call->name, &change);
	events_hold_logged(call->name, &change, &view);
	if (json_object_set_new(op_reply(call), "released", json_boolean(released)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return op_reply_snapshot(call, "snapshot", &view);
}

bool
op_acquire_slot(op_call *call)
{
	ct_slot_grant grant;
	bool acquired;

	if (!op_status(call,
		circuit_table_acquire_slot(cbd.table, call->name, &call->table, &acquired, &grant)))
		return false;
	if (json_object_set_new(op_reply(call), "acquired", json_boolean(acquired)) != 0 ||
	    (acquired &&
		(json_object_set_new(op_reply(call), "token", json_string(grant.token)) != 0 ||
		    json_object_set_new(op_reply(call), "expires_at",
			json_integer(grant.expires_at)) != 0)))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_release_slot(op_call *call)
{
	const char *token;
	bool released;

	if (!proto_get_text(call->request, "token", true, &token, NULL, &call->err))
		return false;
	released = circuit_table_release_slot(cbd.table, call->name, token, call->now);
	op_wait_kick(call->name);
	if (json_object_set_new(op_reply(call), "released", json_boolean(released)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_delete(op_call *call)
{
	bool existed = circuit_table_delete(cbd.table, call->name);

	if (existed) {
		op_audit(call, "deleted", NULL);
		events_deleted(call->name);
		op_wait_kick(call->name); /* its tickets went with it */
	}
	if (json_object_set_new(op_reply(call), "existed", json_boolean(existed)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}
