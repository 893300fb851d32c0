/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-store.c — the store ops: get, record_success, record_failure, cas,
 * set_state (with holds), release, acquire_slot, release_slot, delete.
 */
#include <string.h>

#include "events.h"
#include "log.h"
#include "op.h"
#include "daemon.h"

bool
op_get(op_call *call)
{
	ct_change change;
	ct_view view;

	circuit_table_get(cbd.table, call->name, call->now, &view, &change);
	events_changed(call->name, &change);
	if (json_object_set_new(op_reply(call), "stored", json_boolean(view.stored)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return op_reply_snapshot(call, "snapshot", &view);
}

/* Shared body of record_success and record_failure. */
static bool
record_outcome(op_call *call, bool success)
{
	ct_change change;
	ct_status status;
	ct_view view;

	if (success)
		status = circuit_table_record_success(cbd.table, call->name, &call->table, &view,
		    &change);
	else
		status = circuit_table_record_failure(cbd.table, call->name, &call->table, &view,
		    &change);
	if (!op_status(call, status))
		return false;
	events_changed(call->name, &change);
	return op_reply_snapshot(call, "snapshot", &view);
}

bool
op_record_success(op_call *call)
{
	return record_outcome(call, true);
}

bool
op_record_failure(op_call *call)
{
	return record_outcome(call, false);
}

/* A non-admin may only move open -> half_open once the break has elapsed
 * (protocol 2, §4): the one move the store interface leaves to clients.
 * False (forbidden) otherwise; *answered when the reply is already made
 * (applied: false for a held circuit or a state that does not match). */
bool
op_cas_allowed(op_call *call, cb_state from, cb_state to, bool *answered)
{
	ct_change change;
	ct_view view;

	*answered = false;
	if (server_client_is_admin(call->client))
		return true;
	if (from != CB_STATE_OPEN || to != CB_STATE_HALF_OPEN)
		return proto_fail(&call->err, PROTO_FORBIDDEN,
		    "uid %ld is not an admin: cas may only move open -> half_open once the break "
		    "has elapsed",
		    (long)call->client->uid);
	circuit_table_get(cbd.table, call->name, call->now, &view, &change);
	events_changed(call->name, &change);
	if (view.hold.held || view.snap.state != from) {
		*answered = true;
		if (json_object_set_new(op_reply(call), "applied", json_false()) != 0)
			return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
		return op_reply_snapshot(call, "snapshot", &view);
	}
	if (!breaker_break_elapsed(&view.snap, &call->policy, call->now))
		return proto_fail(&call->err, PROTO_FORBIDDEN,
		    "uid %ld is not an admin: cas open -> half_open only once the break has "
		    "elapsed (%lld ms left)",
		    (long)call->client->uid,
		    (long long)circuit_table_retry_after(&view, &call->policy, call->now));
	return true;
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

/* An optional boolean member. */
static bool
get_bool(op_call *call, const char *key, bool *out)
{
	const json_t *v = json_object_get(call->request, key);

	*out = false;
	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_boolean(v))
		return proto_fail(&call->err, PROTO_BAD_REQUEST, "%s must be true or false", key);
	*out = json_is_true(v);
	return true;
}

/* set_state's hold members: hold, ttl_ms, reason (protocol 2, §4). */
bool
op_hold_members(op_call *call, cb_state state, bool *hold, ct_hold_request *req)
{
	bool has_ttl = false;
	size_t len;

	memset(req, 0, sizeof *req);
	if (!get_bool(call, "hold", hold) ||
	    !proto_get_int(call->request, "ttl_ms", CB_DURATION_MIN, CB_DURATION_MAX, false,
		&req->ttl_ms, &has_ttl, &call->err) ||
	    !proto_get_text(call->request, "reason", false, &req->reason, &len, &call->err))
		return false;
	if (!*hold && (has_ttl || req->reason != NULL))
		return proto_fail(&call->err, PROTO_BAD_REQUEST, "%s is only valid with hold: true",
		    has_ttl ? "ttl_ms" : "reason");
	if (*hold && state == CB_STATE_HALF_OPEN)
		return proto_fail(&call->err, PROTO_BAD_REQUEST,
		    "state half_open cannot be held (hold open or closed)");
	if (req->reason != NULL && len > CT_REASON_MAX)
		return proto_fail(&call->err, PROTO_BAD_REQUEST, "reason must be at most %d bytes",
		    CT_REASON_MAX);
	req->by_uid = (int64_t)call->client->uid;
	return true;
}

void
op_audit_set_state(op_call *call, cb_state state, bool hold, const ct_hold_request *req)
{
	char what[96];

	if (hold && req->ttl_ms > 0)
		snprintf(what, sizeof what, "held %s for %lld ms", breaker_state_name(state),
		    (long long)req->ttl_ms);
	else
		snprintf(what, sizeof what, "%s %s", hold ? "held" : "forced",
		    breaker_state_name(state));
	op_audit(call, what, req->reason);
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
	}
	if (json_object_set_new(op_reply(call), "existed", json_boolean(existed)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}
