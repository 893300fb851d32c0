/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-permit.c — the permit ops (see op-permit.h): allow ("may I call?",
 * taking a ticket when the circuit has max_concurrent, waiting for one
 * up to wait_ms through op-wait.c) and record ("how did it go?", giving
 * back allow's permit or ticket).
 */
#include <string.h>

#include "daemon.h"
#include "events.h"
#include "op-permit.h"
#include "op-wait.h"

/* One attempt of an allow that waits for a ticket (op-wait.h). */
static bool
allow_again(op_call *call, bool expired, bool *done)
{
	ct_allow allow;
	ct_change change;

	call->table.again = true;
	*done = true;
	if (!op_status(call,
		circuit_table_allow(cbd.table, call->name, &call->table, &allow, NULL, &change)))
		return false;
	events_changed(call->name, &change);
	if (!allow.allowed && allow.reason == CT_REFUSED_CONCURRENCY) {
		if (!expired) {
			*done = false;
			return true;
		}
		circuit_table_count_waited(cbd.table, call->name);
	}
	return op_reply_allow(call, &allow);
}

bool
op_allow(op_call *call)
{
	ct_allow allow;
	ct_change change;
	ct_status status;
	int64_t wait_ms = 0;

	if (!op_wait_members(call, &wait_ms))
		return false;
	/* Waiters first: a ticket freed on cbd's clock is theirs. (Their
	 * attempts may create circuits, and so reclaim idle ones: the circuit
	 * is then looked up again.) */
	if (op_wait_queued(call->name))
		op_wait_kick(call->name);
	else
		call->table.found = call->found; /* looked up once (op_resolve_policy) */
	call->table.wait = wait_ms > 0 && !call->noreply;
	status = circuit_table_allow(cbd.table, call->name, &call->table, &allow, NULL, &change);
	call->table.found = NULL;
	if (!op_status(call, status))
		return false;
	events_changed(call->name, &change);
	if (call->table.wait && !allow.allowed && allow.reason == CT_REFUSED_CONCURRENCY) {
		/* Answered later, maybe: not in the output begun now. */
		op_reply_direct_cancel(call);
		if (op_wait_defer(call, wait_ms, allow_again))
			return true;
		circuit_table_count_waited(cbd.table, call->name);
	}
	return op_reply_allow(call, &allow);
}

/* The outcomes of record. */
typedef enum record_outcome {
	RECORD_SUCCESS,
	RECORD_FAILURE,
	RECORD_IGNORE,
	RECORD_REJECTED,
} record_outcome;

static const char *const outcome_names[] = {
	[RECORD_SUCCESS] = "success",
	[RECORD_FAILURE] = "failure",
	[RECORD_IGNORE] = "ignore",
	[RECORD_REJECTED] = "rejected",
};

bool
op_record(op_call *call)
{
	const char *outcome, *permit;
	int64_t count = 1;
	bool has_count = false;
	int which = -1;
	ct_change change = { .reason = CB_REASON_NONE };
	ct_status status = CT_OK;
	ct_view view;

	if (!proto_req_text(&call->req, PROTO_MEMBER_OUTCOME, true, &outcome, NULL, &call->err) ||
	    !proto_req_text(&call->req, PROTO_MEMBER_PERMIT, false, &permit, NULL, &call->err))
		return false;
	for (int i = 0; i < (int)(sizeof outcome_names / sizeof outcome_names[0]); i++) {
		/* (The first byte tells the four apart.) */
		if (outcome[0] == outcome_names[i][0] && strcmp(outcome, outcome_names[i]) == 0) {
			which = i;
			break;
		}
	}
	if (which < 0)
		return proto_fail(&call->err, PROTO_BAD_REQUEST,
		    "outcome must be \"success\", \"failure\", \"ignore\" or \"rejected\"");
	/* A count of refusals (protocol 3, §6) or of successes alike; a
	 * failure or an ignored call is one (each failure may trip). */
	if (!proto_req_int(&call->req, PROTO_MEMBER_COUNT, 1,
		which == RECORD_SUCCESS ? PROTO_SUCCESS_COUNT_MAX : PROTO_REJECTED_COUNT_MAX, false,
		&count, &has_count, &call->err))
		return false;
	if (has_count && which != RECORD_REJECTED && which != RECORD_SUCCESS)
		return proto_fail(&call->err, PROTO_BAD_REQUEST,
		    "count is only for outcomes \"rejected\" and \"success\"");
	/* The permit goes back whatever becomes of the outcome (before it:
	 * the outcome's snapshot shows it back); a waiter may take it. */
	if (permit != NULL) {
		circuit_table_release_slot(cbd.table, call->name, permit, call->now);
		op_wait_kick(call->name);
	} else {
		/* Looked up once (op_resolve_policy); a waiter kicked above may
		 * have created a circuit, and so reclaimed idle ones. */
		call->table.found = call->found;
	}
	switch ((record_outcome)which) {
	case RECORD_SUCCESS:
		status = circuit_table_record_successes(cbd.table, call->name, &call->table,
		    (uint64_t)count, &view, &change);
		break;
	case RECORD_FAILURE:
		status = circuit_table_record_failure(cbd.table, call->name, &call->table, &view,
		    &change);
		break;
	case RECORD_IGNORE:
		circuit_table_record_ignore(cbd.table, call->name, &call->table, &view, &change);
		break;
	case RECORD_REJECTED:
		circuit_table_record_rejected(cbd.table, call->name, &call->table, (uint64_t)count,
		    &view, &change);
		break;
	}
	call->table.found = NULL;
	events_changed(call->name, &change);
	if (!op_status(call, status))
		return false;
	return op_reply_snapshot(call, "snapshot", &view);
}
