/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops.c — the protocol's ops as functions over a cbc_conn: each builds its
 * request object, makes one round trip and reads the result members into
 * plain structs. Replies are checked as strictly as requests: a missing
 * or mistyped member is CBC_EPROTO naming it (protocol 2's snapshot
 * members, read by snapshot.c, may be absent: a protocol 1 cbd).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A request {"op": op} plus "name" when name is not NULL (validated). */
static cbc_status
request_new(const char *op, const char *name, json_t **out, cbc_error *err)
{
	json_t *req;
	cbc_status st;

	*out = NULL;
	if (name != NULL) {
		st = cbci_name_check(name, "name", err);
		if (st != CBC_OK)
			return st;
	}
	req = json_object();
	if (req == NULL || json_object_set_new(req, "op", json_string(op)) != 0 ||
	    (name != NULL && json_object_set_new(req, "name", json_string(name)) != 0)) {
		json_decref(req);
		return cbci_fail(err, CBC_ENOMEM, "out of memory building %s", op);
	}
	*out = req;
	return CBC_OK;
}

/* Add ctx (may be NULL) to req after checking its members. */
static cbc_status
request_ctx(json_t *req, const cbc_ctx *ctx, cbc_error *err)
{
	proto_ctx partial;
	cbc_status st;

	if (ctx == NULL)
		return CBC_OK;
	st = cbci_ctx_check(ctx, "ctx.", err);
	if (st != CBC_OK)
		return st;
	cbci_ctx_to_proto(ctx, &partial);
	if (!proto_ctx_to_json(&partial, req))
		return cbci_fail(err, CBC_ENOMEM, "out of memory building ctx");
	return CBC_OK;
}

/* Add a string member. */
static cbc_status
request_string(json_t *req, const char *key, const char *value, cbc_error *err)
{
	if (json_object_set_new(req, key, json_string(value)) != 0)
		return cbci_fail(err, CBC_ENOMEM, "out of memory building %s", key);
	return CBC_OK;
}

/* Send req (consumed) and get its ok reply. */
static cbc_status
request_send(cbc_conn *conn, json_t *req, cbci_reply *reply, cbc_error *err)
{
	cbc_status st = cbci_conn_call_node(conn, req, reply, err);

	json_decref(req);
	return st;
}

/* Does op carry a call's duration_ms (protocol 2: the outcome ops)? */
static bool
op_takes_duration(const char *op)
{
	return strcmp(op, "record") == 0 || strcmp(op, "record_success") == 0 ||
	    strcmp(op, "record_failure") == 0;
}

/* A string member of a request; a NULL value is left out. */
typedef struct request_member {
	const char *key;
	const char *value;
} request_member;

/* Build {"op", "name" (when not NULL), members..., "ctx" (when not NULL),
 * "duration_ms" (an outcome op whose ctx has one), "policy": true (when
 * policy: protocol 3's snapshot with the policy)}, send it and get its ok
 * reply. */
static cbc_status
request_call_policy(cbc_conn *conn, const char *op, const char *name, const request_member *members,
    size_t n, const cbc_ctx *ctx, bool policy, cbci_reply *reply, cbc_error *err)
{
	json_t *req;
	cbc_status st = request_new(op, name, &req, err);

	for (size_t i = 0; st == CBC_OK && i < n; i++) {
		if (members[i].value != NULL)
			st = request_string(req, members[i].key, members[i].value, err);
	}
	if (st == CBC_OK)
		st = request_ctx(req, ctx, err);
	if (st == CBC_OK && ctx != NULL && ctx->has_duration && op_takes_duration(op) &&
	    json_object_set_new(req, "duration_ms", json_integer(ctx->duration_ms)) != 0)
		st = cbci_fail(err, CBC_ENOMEM, "out of memory building duration_ms");
	if (st == CBC_OK && policy && json_object_set_new(req, "policy", json_true()) != 0)
		st = cbci_fail(err, CBC_ENOMEM, "out of memory building policy");
	if (st != CBC_OK) {
		json_decref(req);
		return st;
	}
	return request_send(conn, req, reply, err);
}

/* request_call_policy without "policy". */
static cbc_status
request_call(cbc_conn *conn, const char *op, const char *name, const request_member *members,
    size_t n, const cbc_ctx *ctx, cbci_reply *reply, cbc_error *err)
{
	return request_call_policy(conn, op, name, members, n, ctx, false, reply, err);
}

/* A reply member as a snapshot (internal.h). */
cbc_status
cbci_reply_snapshot_node(proto_node *obj, const char *fallback_name, cbc_snapshot *out,
    cbc_error *err)
{
	proto_error perr;
	cb_snapshot snap;
	int64_t retry = 0;
	proto_node name_node = proto_node_get(obj, "name");
	const char *name = proto_node_string(&name_node, NULL);

	if (!proto_snapshot_from_node(obj, &snap, &retry, &perr))
		return cbci_fail(err, CBC_EPROTO, "reply snapshot: %s", perr.message);
	if (name == NULL)
		name = fallback_name != NULL ? fallback_name : "";
	if (out != NULL)
		cbci_snapshot_fill(out, name, &snap, retry);
	return cbci_snapshot_v2(obj, out, err);
}

cbc_status
cbci_reply_snapshot(const json_t *obj, const char *fallback_name, cbc_snapshot *out, cbc_error *err)
{
	proto_node n = proto_node_json(obj);

	return cbci_reply_snapshot_node(&n, fallback_name, out, err);
}

/* Read a boolean reply member. */
static cbc_status
reply_bool(cbci_reply *reply, const char *key, bool *out, cbc_error *err)
{
	proto_node v = proto_node_get(&reply->top, key);

	if (v.type != PROTO_NODE_TRUE && v.type != PROTO_NODE_FALSE)
		return cbci_fail(err, CBC_EPROTO, "reply member %s must be a boolean", key);
	*out = v.type == PROTO_NODE_TRUE;
	return CBC_OK;
}

/* Read an integer reply member; optional ones leave *out alone when absent. */
static cbc_status
reply_int(cbci_reply *reply, const char *key, bool required, int64_t *out, cbc_error *err)
{
	proto_node v = proto_node_get(&reply->top, key);

	if (proto_node_is_absent(&v) || proto_node_is_null(&v)) {
		if (required)
			return cbci_fail(err, CBC_EPROTO, "reply member %s is missing", key);
		return CBC_OK;
	}
	if (v.type != PROTO_NODE_INT)
		return cbci_fail(err, CBC_EPROTO, "reply member %s must be an integer", key);
	*out = proto_node_int(&v);
	return CBC_OK;
}

/* Copy a string reply member into buf; false-ish status when too long. */
static cbc_status
reply_string(cbci_reply *reply, const char *key, bool required, char *buf, size_t size,
    cbc_error *err)
{
	proto_node v = proto_node_get(&reply->top, key);
	const char *text;
	size_t len = 0;

	if (proto_node_is_absent(&v) || proto_node_is_null(&v)) {
		buf[0] = '\0';
		if (required)
			return cbci_fail(err, CBC_EPROTO, "reply member %s is missing", key);
		return CBC_OK;
	}
	if ((text = proto_node_string(&v, &len)) == NULL)
		return cbci_fail(err, CBC_EPROTO, "reply member %s must be a string", key);
	if (len >= size)
		return cbci_fail(err, CBC_EPROTO, "reply member %s is longer than %zu bytes", key,
		    size - 1);
	memcpy(buf, text, len + 1);
	return CBC_OK;
}

/* The reply's "snapshot" member as the public snapshot. */
static cbc_status
reply_snapshot(cbci_reply *reply, const char *name, cbc_snapshot *out, cbc_error *err)
{
	proto_node snap = proto_node_get(&reply->top, "snapshot");

	return cbci_reply_snapshot_node(&snap, name, out, err);
}

/* Finish an op: clear err on success, drop the reply. */
static cbc_status
op_done(cbci_reply *reply, cbc_status st, cbc_error *err)
{
	cbci_reply_free(reply);
	if (st == CBC_OK)
		cbci_error_clear(err);
	return st;
}

/* The same for a reply read as jansson values. */
static cbc_status
op_done_json(json_t *reply, cbc_status st, cbc_error *err)
{
	json_decref(reply);
	if (st == CBC_OK)
		cbci_error_clear(err);
	return st;
}

cbc_status
cbc_hello(cbc_conn *conn, cbc_hello_info *out, cbc_error *err)
{
	char client[160];
	request_member members[] = { { "client", client } };
	cbci_reply reply;
	cbc_status st;

	if (!cbci_conn_client_name(conn, client, sizeof client))
		members[0].value = NULL;
	st = request_call(conn, "hello", NULL, members, 1, NULL, &reply, err);
	if (st != CBC_OK)
		return st;
	cbc_hello_info info;
	memset(&info, 0, sizeof info);
	st = reply_string(&reply, "server", true, info.server, sizeof info.server, err);
	if (st == CBC_OK)
		st = reply_string(&reply, "version", true, info.version, sizeof info.version, err);
	if (st == CBC_OK)
		st = reply_int(&reply, "protocol", true, &info.protocol, err);
	if (st == CBC_OK && out != NULL)
		*out = info;
	return op_done(&reply, st, err);
}

/* get, record_success, record_failure: name + ctx -> snapshot (with
 * "policy": true when policy). */
static cbc_status
op_snapshot(cbc_conn *conn, const char *op, const char *name, const cbc_ctx *ctx, bool policy,
    cbc_snapshot *out, cbc_error *err)
{
	cbci_reply reply;
	cbc_status st = request_call_policy(conn, op, name, NULL, 0, ctx, policy, &reply, err);

	if (st != CBC_OK)
		return st;
	st = reply_snapshot(&reply, name, out, err);
	return op_done(&reply, st, err);
}

cbc_status
cbc_get(cbc_conn *conn, const char *name, const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	return op_snapshot(conn, "get", name, ctx, false, out, err);
}

cbc_status
cbc_record_success(cbc_conn *conn, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	return op_snapshot(conn, "record_success", name, ctx, false, out, err);
}

cbc_status
cbc_record_failure(cbc_conn *conn, const char *name, const cbc_ctx *ctx, cbc_snapshot *out,
    cbc_error *err)
{
	return op_snapshot(conn, "record_failure", name, ctx, false, out, err);
}

cbc_status
cbci_record_policy(cbc_conn *conn, const char *name, bool failure, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err)
{
	return op_snapshot(conn, failure ? "record_failure" : "record_success", name, ctx, true,
	    out, err);
}

/* Check a state argument; CBC_EINVAL naming field. */
static cbc_status
state_check(cbc_state state, const char *field, cbc_error *err)
{
	if ((unsigned)state > CBC_STATE_HALF_OPEN)
		return cbci_fail(err, CBC_EINVAL,
		    "%s must be CBC_STATE_CLOSED, CBC_STATE_OPEN or CBC_STATE_HALF_OPEN", field);
	return CBC_OK;
}

cbc_status
cbc_cas(cbc_conn *conn, const char *name, cbc_state from, cbc_state to, const cbc_ctx *ctx,
    bool *applied, cbc_snapshot *out, cbc_error *err)
{
	const request_member members[] = {
		{ "from", cbc_state_name(from) },
		{ "to", cbc_state_name(to) },
	};
	cbci_reply reply;
	cbc_status st;
	bool done = false;

	st = state_check(from, "from", err);
	if (st == CBC_OK)
		st = state_check(to, "to", err);
	if (st == CBC_OK)
		st = request_call(conn, "cas", name, members, 2, ctx, &reply, err);
	if (st != CBC_OK)
		return st;
	st = reply_bool(&reply, "applied", &done, err);
	if (st == CBC_OK)
		st = reply_snapshot(&reply, name, out, err);
	if (st == CBC_OK && applied != NULL)
		*applied = done;
	return op_done(&reply, st, err);
}

cbc_status
cbc_set_state(cbc_conn *conn, const char *name, cbc_state state, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err)
{
	const request_member members[] = { { "state", cbc_state_name(state) } };
	cbci_reply reply;
	cbc_status st;

	st = state_check(state, "state", err);
	if (st == CBC_OK)
		st = request_call(conn, "set_state", name, members, 1, ctx, &reply, err);
	if (st != CBC_OK)
		return st;
	st = reply_snapshot(&reply, name, out, err);
	return op_done(&reply, st, err);
}

cbc_status
cbc_acquire_slot(cbc_conn *conn, const char *name, const cbc_ctx *ctx, cbc_slot *out,
    cbc_error *err)
{
	cbci_reply reply;
	cbc_slot slot;
	cbc_status st = request_call(conn, "acquire_slot", name, NULL, 0, ctx, &reply, err);

	if (st != CBC_OK)
		return st;
	memset(&slot, 0, sizeof slot);
	st = reply_bool(&reply, "acquired", &slot.acquired, err);
	if (st == CBC_OK && slot.acquired) {
		st = reply_string(&reply, "token", true, slot.token, sizeof slot.token, err);
		if (st == CBC_OK)
			st = reply_int(&reply, "expires_at", true, &slot.expires_at, err);
	}
	if (st == CBC_OK && out != NULL)
		*out = slot;
	return op_done(&reply, st, err);
}

cbc_status
cbc_release_slot(cbc_conn *conn, const char *name, const char *token, const cbc_ctx *ctx,
    cbc_error *err)
{
	const request_member members[] = { { "token", token } };
	cbci_reply reply;
	cbc_status st;

	if (token == NULL)
		return cbci_fail(err, CBC_EINVAL, "token is required");
	st = request_call(conn, "release_slot", name, members, 1, ctx, &reply, err);
	if (st != CBC_OK)
		return st;
	return op_done(&reply, st, err);
}

/* allow's reason member (protocol 3). */
static cbc_reason
allow_reason(const char *text)
{
	static const char *const names[] = { "", "open", "held", "half_open_full", "concurrency",
		"retry_budget" };

	if (text[0] == '\0')
		return CBC_REASON_NONE;
	for (size_t i = 1; i < sizeof names / sizeof names[0]; i++) {
		if (strcmp(text, names[i]) == 0)
			return (cbc_reason)i;
	}
	return CBC_REASON_OTHER;
}

/* Build allow's request: name, ctx, and protocol 3's wait_ms and retry. */
static cbc_status
allow_request(const char *name, const cbc_ctx *ctx, const cbc_allow_options *opts, json_t **out,
    cbc_error *err)
{
	json_t *req;
	cbc_status st;

	if (opts != NULL && (opts->wait_ms < 0 || opts->wait_ms > CBC_WAIT_MAX_MS))
		return cbci_fail(err, CBC_EINVAL, "wait_ms must be from 0 to %d", CBC_WAIT_MAX_MS);
	st = request_new("allow", name, &req, err);
	if (st == CBC_OK)
		st = request_ctx(req, ctx, err);
	if (st == CBC_OK && opts != NULL && opts->wait_ms > 0 &&
	    json_object_set_new(req, "wait_ms", json_integer(opts->wait_ms)) != 0)
		st = cbci_fail(err, CBC_ENOMEM, "out of memory building wait_ms");
	if (st == CBC_OK && opts != NULL && opts->retry &&
	    json_object_set_new(req, "retry", json_true()) != 0)
		st = cbci_fail(err, CBC_ENOMEM, "out of memory building retry");
	if (st != CBC_OK) {
		json_decref(req);
		return st;
	}
	*out = req;
	return CBC_OK;
}

cbc_status
cbc_allow(cbc_conn *conn, const char *name, const cbc_ctx *ctx, cbc_allow_result *out,
    cbc_error *err)
{
	return cbc_allow_ex(conn, name, ctx, NULL, out, err);
}

cbc_status
cbc_allow_ex(cbc_conn *conn, const char *name, const cbc_ctx *ctx, const cbc_allow_options *opts,
    cbc_allow_result *out, cbc_error *err)
{
	cbci_reply reply;
	cbc_allow_result res;
	char state[16], reason[64];
	json_t *req = NULL;
	int64_t extra = cbci_conn_extra_ms;
	cbc_status st = allow_request(name, ctx, opts, &req, err);

	if (st != CBC_OK)
		return st;
	/* cbd answers a waiting allow up to wait_ms later. */
	cbci_conn_extra_ms = opts != NULL ? opts->wait_ms : 0;
	st = request_send(conn, req, &reply, err);
	cbci_conn_extra_ms = extra;
	if (st != CBC_OK)
		return st;
	memset(&res, 0, sizeof res);
	res.in_flight = -1;
	res.expires_at = -1;
	st = reply_bool(&reply, "allowed", &res.allowed, err);
	if (st == CBC_OK)
		st = reply_string(&reply, "state", true, state, sizeof state, err);
	if (st == CBC_OK && !cbc_state_parse(state, &res.state))
		st = cbci_fail(err, CBC_EPROTO, "reply member state is not a state: %s", state);
	if (st == CBC_OK)
		st = reply_int(&reply, "retry_after_ms", false, &res.retry_after_ms, err);
	if (st == CBC_OK)
		st = reply_string(&reply, "permit", false, res.permit, sizeof res.permit, err);
	res.has_permit = res.permit[0] != '\0';
	if (st == CBC_OK)
		st = reply_string(&reply, "reason", false, reason, sizeof reason, err);
	if (st == CBC_OK)
		res.reason = allow_reason(reason);
	if (st == CBC_OK)
		st = reply_int(&reply, "in_flight", false, &res.in_flight, err);
	if (st == CBC_OK && res.has_permit)
		st = reply_int(&reply, "expires_at", false, &res.expires_at, err);
	if (st == CBC_OK && out != NULL)
		*out = res;
	return op_done(&reply, st, err);
}

cbc_status
cbc_record(cbc_conn *conn, const char *name, cbc_outcome outcome, const char *permit,
    const cbc_ctx *ctx, cbc_snapshot *out, cbc_error *err)
{
	static const char *const outcomes[] = { "success", "failure", "ignore" };
	cbci_reply reply;
	cbc_status st;

	if ((unsigned)outcome > CBC_OUTCOME_IGNORE)
		return cbci_fail(err, CBC_EINVAL,
		    "outcome must be CBC_OUTCOME_SUCCESS, CBC_OUTCOME_FAILURE or "
		    "CBC_OUTCOME_IGNORE");
	const request_member members[] = {
		{ "outcome", outcomes[outcome] },
		{ "permit", permit },
	};
	st = request_call(conn, "record", name, members, 2, ctx, &reply, err);
	if (st != CBC_OK)
		return st;
	st = reply_snapshot(&reply, name, out, err);
	return op_done(&reply, st, err);
}

cbc_status
cbc_delete(cbc_conn *conn, const char *name, bool *existed, cbc_error *err)
{
	cbci_reply reply;
	bool was = false;
	cbc_status st = request_call(conn, "delete", name, NULL, 0, NULL, &reply, err);

	if (st != CBC_OK)
		return st;
	st = reply_bool(&reply, "existed", &was, err);
	if (st == CBC_OK && existed != NULL)
		*existed = was;
	return op_done(&reply, st, err);
}

/* Longest hold ttl: the protocol's 2^53. */
#define OPS_TTL_MAX (INT64_C(1) << 53)

/* Check hold's arguments; CBC_EINVAL naming the one at fault. */
static cbc_status
hold_check(cbc_state state, int64_t ttl_ms, const char *reason, cbc_error *err)
{
	if (state != CBC_STATE_OPEN && state != CBC_STATE_CLOSED)
		return cbci_fail(err, CBC_EINVAL,
		    "state must be CBC_STATE_OPEN or CBC_STATE_CLOSED (half_open cannot be held)");
	if (ttl_ms < 0 || ttl_ms > OPS_TTL_MAX)
		return cbci_fail(err, CBC_EINVAL, "ttl_ms must be 0 (until released) or 1 to %lld",
		    (long long)OPS_TTL_MAX);
	if (reason != NULL && strlen(reason) > CBC_REASON_MAX)
		return cbci_fail(err, CBC_EINVAL, "reason must be at most %d bytes",
		    CBC_REASON_MAX);
	return CBC_OK;
}

cbc_status
cbc_hold(cbc_conn *conn, const char *name, cbc_state state, int64_t ttl_ms, const char *reason,
    cbc_snapshot *out, cbc_error *err)
{
	json_t *req, *text = NULL;
	cbci_reply reply;
	proto_node snap, hold;
	cbc_status st = hold_check(state, ttl_ms, reason, err);

	if (st != CBC_OK)
		return st;
	if (reason != NULL && (text = json_string(reason)) == NULL)
		return cbci_fail(err, CBC_EINVAL, "reason must be UTF-8");
	st = request_new("set_state", name, &req, err);
	if (st != CBC_OK) {
		json_decref(text);
		return st;
	}
	/* reason first: set_new takes it also when it fails. */
	if ((text != NULL && json_object_set_new(req, "reason", text) != 0) ||
	    json_object_set_new(req, "state", json_string(cbc_state_name(state))) != 0 ||
	    json_object_set_new(req, "hold", json_true()) != 0 ||
	    (ttl_ms > 0 && json_object_set_new(req, "ttl_ms", json_integer(ttl_ms)) != 0)) {
		json_decref(req);
		return cbci_fail(err, CBC_ENOMEM, "out of memory building set_state");
	}
	st = request_send(conn, req, &reply, err);
	if (st != CBC_OK)
		return st;
	st = reply_snapshot(&reply, name, out, err);
	/* A protocol 1 cbd ignores hold and forces: say so rather than let
	 * the caller believe the state is held. */
	snap = proto_node_get(&reply.top, "snapshot");
	hold = proto_node_get(&snap, "hold");
	if (st == CBC_OK && proto_node_is_absent(&hold))
		st = cbci_fail(err, CBC_EPROTO,
		    "cbd at %s did not report a hold (protocol 1?): %s was forced %s, not held",
		    cbc_conn_socket_path(conn), name, cbc_state_name(state));
	return op_done(&reply, st, err);
}

cbc_status
cbc_release(cbc_conn *conn, const char *name, bool *released, cbc_snapshot *out, cbc_error *err)
{
	cbci_reply reply;
	bool done = false;
	cbc_status st = request_call(conn, "release", name, NULL, 0, NULL, &reply, err);

	if (st != CBC_OK)
		return st;
	st = reply_bool(&reply, "released", &done, err);
	if (st == CBC_OK)
		st = reply_snapshot(&reply, name, out, err);
	if (st == CBC_OK && released != NULL)
		*released = done;
	return op_done(&reply, st, err);
}

cbc_status
cbc_list(cbc_conn *conn, const cbc_state *state_filter, cbc_snapshot **out, size_t *count,
    cbc_error *err)
{
	return cbc_list_ex(conn, state_filter, out, count, NULL, err);
}

/* One list request: state filter, limit (0: none) and cursor (NULL:
 * none); the snapshots, truncated and the next cursor ("" when none). */
static cbc_status
list_request(cbc_conn *conn, const cbc_state *state_filter, size_t limit, const char *cursor,
    cbc_snapshot **out, size_t *count, bool *truncated, char *next_cursor, size_t next_size,
    cbc_error *err)
{
	json_t *req, *reply;
	const json_t *circuits;
	const char *next;
	cbc_snapshot *snaps = NULL;
	cbc_status st;
	size_t n = 0;

	*out = NULL;
	*count = 0;
	if (next_cursor != NULL && next_size > 0)
		next_cursor[0] = '\0';
	st = state_filter != NULL ? state_check(*state_filter, "state_filter", err) : CBC_OK;
	if (st == CBC_OK && limit > CBC_LIST_LIMIT_MAX)
		st = cbci_fail(err, CBC_EINVAL, "limit must be at most %d", CBC_LIST_LIMIT_MAX);
	if (st == CBC_OK)
		st = request_new("list", NULL, &req, err);
	if (st != CBC_OK)
		return st;
	if (state_filter != NULL)
		st = request_string(req, "state", cbc_state_name(*state_filter), err);
	if (st == CBC_OK && cursor != NULL && cursor[0] != '\0')
		st = request_string(req, "cursor", cursor, err);
	if (st == CBC_OK && limit > 0 &&
	    json_object_set_new(req, "limit", json_integer((json_int_t)limit)) != 0)
		st = cbci_fail(err, CBC_ENOMEM, "out of memory building limit");
	if (st != CBC_OK) {
		json_decref(req);
		return st;
	}
	/* Its circuits are an array: jansson values. */
	st = cbci_conn_call(conn, req, &reply, err);
	json_decref(req);
	if (st != CBC_OK)
		return st;
	circuits = json_object_get(reply, "circuits");
	if (!json_is_array(circuits)) {
		st = cbci_fail(err, CBC_EPROTO, "reply member circuits must be an array");
		return op_done_json(reply, st, err);
	}
	n = json_array_size(circuits);
	snaps = calloc(n > 0 ? n : 1, sizeof *snaps);
	if (snaps == NULL)
		return op_done_json(reply, cbci_fail(err, CBC_ENOMEM, "out of memory listing"),
		    err);
	for (size_t i = 0; i < n && st == CBC_OK; i++) {
		const json_t *item = json_array_get(circuits, i);

		if (json_string_value(json_object_get(item, "name")) == NULL)
			st = cbci_fail(err, CBC_EPROTO, "circuits[%zu].name is missing", i);
		else
			st = cbci_reply_snapshot(item, NULL, &snaps[i], err);
	}
	next = json_string_value(json_object_get(reply, "cursor"));
	if (st == CBC_OK && next != NULL && next_cursor != NULL && strlen(next) >= next_size)
		st = cbci_fail(err, CBC_EPROTO, "reply member cursor is longer than %zu bytes",
		    next_size);
	if (st != CBC_OK) {
		free(snaps);
		return op_done_json(reply, st, err);
	}
	*out = snaps;
	*count = n;
	if (truncated != NULL)
		*truncated = json_is_true(json_object_get(reply, "truncated"));
	if (next != NULL && next_cursor != NULL)
		snprintf(next_cursor, next_size, "%s", next);
	return op_done_json(reply, st, err);
}

cbc_status
cbc_list_ex(cbc_conn *conn, const cbc_state *state_filter, cbc_snapshot **out, size_t *count,
    bool *truncated, cbc_error *err)
{
	return list_request(conn, state_filter, 0, NULL, out, count, truncated, NULL, 0, err);
}

cbc_status
cbc_list_page(cbc_conn *conn, const cbc_state *state_filter, size_t limit, const char *cursor,
    cbc_snapshot **out, size_t *count, char *next_cursor, size_t next_size, cbc_error *err)
{
	if (next_cursor == NULL || next_size == 0) {
		*out = NULL;
		*count = 0;
		return cbci_fail(err, CBC_EINVAL, "next_cursor must be a buffer");
	}
	return list_request(conn, state_filter, limit, cursor, out, count, NULL, next_cursor,
	    next_size, err);
}

/* An integer member of obj, or -1. */
static int64_t
stats_int(const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);

	return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* ops: {"get": {"requests": N, "errors": N}, ...} */
static void
stats_ops(cbc_stats *out, const json_t *ops)
{
	const char *op;
	json_t *v;

	json_object_foreach ((json_t *)ops, op, v) {
		cbc_op_stats *row;

		if (!json_is_object(v) || out->op_count == CBC_STATS_OPS_MAX)
			continue;
		row = &out->ops[out->op_count++];
		snprintf(row->op, sizeof row->op, "%s", op);
		row->requests = stats_int(v, "requests");
		row->errors = stats_int(v, "errors");
	}
}

/* errors: {"parse_error": N, ...}; also sums them into out->errors. */
static void
stats_codes(cbc_stats *out, const json_t *errors)
{
	const char *code;
	json_t *v;

	if (json_is_integer(errors)) {
		out->errors = json_integer_value(errors);
		return;
	}
	if (!json_is_object(errors))
		return;
	out->errors = 0;
	json_object_foreach ((json_t *)errors, code, v) {
		cbc_code_stats *row;

		if (!json_is_integer(v))
			continue;
		out->errors += json_integer_value(v);
		if (out->code_count == CBC_STATS_CODES_MAX)
			continue;
		row = &out->codes[out->code_count++];
		snprintf(row->code, sizeof row->code, "%s", code);
		row->count = json_integer_value(v);
	}
}

cbc_status
cbc_stats_get(cbc_conn *conn, cbc_stats *out, cbc_error *err)
{
	json_t *req, *reply;
	const json_t *conns;
	cbc_stats s;
	/* Its members are walked: jansson values. */
	cbc_status st = request_new("stats", NULL, &req, err);

	if (st != CBC_OK)
		return st;
	st = cbci_conn_call(conn, req, &reply, err);
	json_decref(req);
	if (st != CBC_OK)
		return st;
	memset(&s, 0, sizeof s);
	s.uptime_ms = stats_int(reply, "uptime_ms");
	s.started_at = stats_int(reply, "started_at");
	conns = json_object_get(reply, "connections");
	if (json_is_object(conns)) {
		s.connections = stats_int(conns, "current");
		s.connections_total = stats_int(conns, "total");
	} else {
		s.connections = stats_int(reply, "connections");
		s.connections_total = -1;
	}
	s.circuits = stats_int(reply, "circuits");
	s.slots = stats_int(reply, "slots");
	s.requests = stats_int(reply, "requests");
	s.errors = -1;
	s.transitions = stats_int(reply, "transitions");
	s.reloads = stats_int(reply, "reloads");
	s.reload_failures = stats_int(reply, "reload_failures");
	if (json_is_object(json_object_get(reply, "ops")))
		stats_ops(&s, json_object_get(reply, "ops"));
	stats_codes(&s, json_object_get(reply, "errors"));
	if (out != NULL)
		*out = s;
	return op_done_json(reply, CBC_OK, err);
}
