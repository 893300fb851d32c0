/*
 * op-store.c — the store ops of protocol v1: get, record_success,
 * record_failure, cas, set_state, acquire_slot, release_slot, delete.
 */
#include "log.h"
#include "op.h"
#include "server.h"

/* reply.snapshot = the snapshot of call->name at call->now. */
static bool
reply_snapshot(op_call *call, const cb_snapshot *snap)
{
	json_t *obj = proto_snapshot_to_json(call->name, snap,
	    breaker_retry_after_ms(snap, &call->policy, call->now));

	if (obj == NULL || json_object_set_new(call->reply, "snapshot", obj) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_get(op_call *call)
{
	cb_snapshot snap;

	circuit_table_get(srv.table, call->name, &snap);
	return reply_snapshot(call, &snap);
}

/* Shared body of record_success and record_failure. */
static bool
record_outcome(op_call *call, bool success)
{
	cb_snapshot snap;
	ct_change change;
	ct_status status;

	if (success)
		status = circuit_table_record_success(srv.table, call->name, &call->policy,
		    call->now, &snap, &change);
	else
		status = circuit_table_record_failure(srv.table, call->name, &call->policy,
		    call->now, &snap, &change);
	if (!op_status(call, status))
		return false;
	op_log_change(call->name, &change);
	return reply_snapshot(call, &snap);
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

bool
op_cas(op_call *call)
{
	cb_state from, to;
	cb_snapshot snap;
	ct_change change;
	bool applied;

	if (!proto_get_state(call->request, "from", true, &from, NULL, &call->err) ||
	    !proto_get_state(call->request, "to", true, &to, NULL, &call->err))
		return false;
	if (!op_status(call,
		circuit_table_cas(srv.table, call->name, from, to, call->now, &applied, &snap,
		    &change)))
		return false;
	op_log_change(call->name, &change);
	if (json_object_set_new(call->reply, "applied", json_boolean(applied)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return reply_snapshot(call, &snap);
}

bool
op_set_state(op_call *call)
{
	cb_snapshot snap;
	ct_change change;
	cb_state state;

	if (!proto_get_state(call->request, "state", true, &state, NULL, &call->err))
		return false;
	if (!op_status(call,
		circuit_table_set_state(srv.table, call->name, state, call->now, &snap, &change)))
		return false;
	op_log_change(call->name, &change);
	return reply_snapshot(call, &snap);
}

bool
op_acquire_slot(op_call *call)
{
	ct_slot_grant grant;
	bool acquired;

	if (!op_status(call,
		circuit_table_acquire_slot(srv.table, call->name, &call->policy, call->now,
		    &call->client->owner, &acquired, &grant)))
		return false;
	if (json_object_set_new(call->reply, "acquired", json_boolean(acquired)) != 0 ||
	    (acquired &&
		(json_object_set_new(call->reply, "token", json_string(grant.token)) != 0 ||
		    json_object_set_new(call->reply, "expires_at",
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
	released = circuit_table_release_slot(srv.table, call->name, token, call->now);
	if (json_object_set_new(call->reply, "released", json_boolean(released)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_delete(op_call *call)
{
	char quoted[LOG_QUOTE_SIZE];
	bool existed = circuit_table_delete(srv.table, call->name);

	if (existed)
		log_info("circuit %s: deleted by uid %ld",
		    log_quote(call->name, quoted, sizeof quoted), (long)call->client->uid);
	if (json_object_set_new(call->reply, "existed", json_boolean(existed)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}
