/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-call.c — the op kernel (see op-call.h): what every op handler uses
 * to answer one request: the circuit's policy resolved, table statuses
 * as errors, the reply built and written (snapshots encoded as text),
 * snapshot collections cut to the output bound, the audit line, and the
 * ops' per-connection slot.
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <uthash.h>

#include "conf.h"
#include "daemon.h"
#include "events.h"
#include "fleet.h"
#include "log-limit.h"
#include "log.h"
#include "op-call.h"
#include "stats.h"
#include "watch.h"

bool
op_status(op_call *call, ct_status status)
{
	switch (status) {
	case CT_OK:
		return true;
	case CT_CAPACITY:
		return proto_fail(&call->err, PROTO_CAPACITY,
		    "max_circuits (%lld) reached and no circuit is idle to reclaim: no new "
		    "circuit can be created",
		    (long long)cbd.conf.max_circuits);
	case CT_SLOTS:
		stats_limit_hit(STATS_LIMIT_SLOTS);
		return proto_fail(&call->err, PROTO_CAPACITY,
		    "max_slots (%lld) reached: no slot can be taken now",
		    (long long)cbd.conf.max_slots);
	case CT_NOMEM:
		break;
	}
	return proto_fail(&call->err, PROTO_INTERNAL, "%s", circuit_table_status_text(status));
}

bool
op_reply_snapshot(op_call *call, const char *member, const ct_view *view)
{
	/* A noreply request's reply would be thrown away (op_finish): it
	 * is not made. (Making it could fail only for want of memory.) */
	if (call->noreply)
		return true;
	/* Encoded straight as text (encode.c): the reply's largest member.
	 * (Every op's is "snapshot": one literal, not three pieces.) */
	if (strcmp(member, "snapshot") == 0) {
		ENC_LIT(&call->tail, ",\"snapshot\":");
	} else {
		ENC_LIT(&call->tail, ",\"");
		enc_puts(&call->tail, member);
		ENC_LIT(&call->tail, "\":");
	}
	encode_snapshot(&call->tail, call->name, view, &call->policy, call->preset, &call->sources,
	    call->now, call->with_policy);
	if (call->tail.nomem)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

/* Room kept in a reply for its envelope ("id", "ok", "truncated"). */
#define OP_ENVELOPE_BYTES 256

bool
op_snapshots_init(op_snapshots *s, op_call *call)
{
	size_t queued = call->client->out_len - call->client->out_off;
	size_t half = (size_t)cbd.conf.max_output_bytes / 2;

	*s = (op_snapshots){ .now = call->now, .with_policy = call->with_policy };
	s->budget = half > queued + OP_ENVELOPE_BYTES ? half - queued - OP_ENVELOPE_BYTES : 0;
	return true;
}

void
op_snapshots_add(op_snapshots *s, const char *name, const ct_view *view)
{
	proto_policy_sources sources;
	const char *preset;
	cb_policy policy;
	size_t before = s->items.len, cost;

	if (s->truncated || s->nomem)
		return;
	conf_policy(&cbd.conf, name, view->declared, &policy, &sources, &preset);
	/* Encoded straight as text (encode.c), a comma before all but the
	 * first: the entry's exact cost is what the buffer grew by. */
	if (s->count > 0)
		enc_put(&s->items, ",", 1);
	encode_snapshot(&s->items, name, view, &policy, preset, &sources, s->now, s->with_policy);
	if (s->items.nomem) {
		s->nomem = true;
		return;
	}
	cost = s->items.len - before;
	if (cost > s->budget) {
		s->truncated = true;
		s->items.len = before;
		return;
	}
	s->budget -= cost;
	s->count++;
}

void
op_snapshots_free(op_snapshots *s)
{
	enc_free(&s->items);
}

bool
op_snapshots_reply(op_snapshots *s, op_call *call, const char *member, bool always_truncated)
{
	if (s->nomem) {
		op_snapshots_free(s);
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	}
	if (s->truncated)
		stats_limit_hit(STATS_LIMIT_LIST);
	ENC_LIT(&call->tail, ",\"");
	enc_puts(&call->tail, member);
	ENC_LIT(&call->tail, "\":[");
	/* The items (up to half of max_output_bytes) go after the tail as
	 * they are: moved, not copied. */
	if (call->tail_more.len == 0) {
		enc_free(&call->tail_more);
		call->tail_more = s->items;
		s->items = (enc_buf){ 0 };
		ENC_LIT(&call->tail_more, "]");
	} else {
		ENC_LIT(&call->tail, "]");
	}
	op_snapshots_free(s);
	if (call->tail.nomem ||
	    ((always_truncated || s->truncated) &&
		json_object_set_new(op_reply(call), "truncated", json_boolean(s->truncated)) != 0))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

void
op_peer_user(op_call *call, char *buf, size_t size)
{
	char scratch[1024];
	struct passwd pw, *found = NULL;

	buf[0] = '\0';
	if (getpwuid_r(call->client->uid, &pw, scratch, sizeof scratch, &found) == 0 &&
	    found != NULL)
		snprintf(buf, size, "%s", found->pw_name);
}

void
op_audit(op_call *call, const char *what, const char *reason)
{
	char quoted[LOG_QUOTE_SIZE], why[LOG_QUOTE_SIZE], user[CT_USER_MAX + 1], uid[24];
	log_field fields[] = { { "audit", what, false }, { "uid", uid, true },
		{ "user", NULL, false }, { "circuit", call->name, false },
		{ "reason", reason, false } };

	op_peer_user(call, user, sizeof user);
	snprintf(uid, sizeof uid, "%ld", (long)call->client->uid);
	fields[2].value = user[0] != '\0' ? user : NULL;
	log_fields(LOG_LEVEL_INFO, fields, 5, "audit: uid %s (%s) %s circuit %s%s%s", uid,
	    user[0] != '\0' ? user : "unknown user", what,
	    log_quote(call->name, quoted, sizeof quoted), reason != NULL ? ", reason " : "",
	    reason != NULL ? log_quote(reason, why, sizeof why) : "");
}

/* Connections that were already warned about a circuit's policy conflict:
 * one warning per circuit and connection. Bounded: when full it starts
 * over (a repeat warning beats unbounded memory). */
#define OP_WARNED_MAX 10000

typedef struct warned {
	UT_hash_handle hh;
	char key[]; /* "<connection id>:<name>" */
} warned;

static warned *warned_set;
static unsigned warned_count;

/* True the first time (connection, name) is seen. */
static bool
warn_first(uint64_t conn, const char *name)
{
	char key[32 + CT_NAME_MAX];
	size_t len = (size_t)snprintf(key, sizeof key, "%llu:%s", (unsigned long long)conn, name);
	warned *w;

	HASH_FIND(hh, warned_set, key, len, w);
	if (w != NULL)
		return false;
	if (warned_count >= OP_WARNED_MAX)
		op_warned_reset();
	w = malloc(sizeof *w + len + 1);
	if (w == NULL)
		return true;
	memcpy(w->key, key, len + 1);
	HASH_ADD(hh, warned_set, key[0], len, w);
	warned_count++;
	return true;
}

void
op_warned_reset(void)
{
	warned *w, *tmp;

	HASH_ITER (hh, warned_set, w, tmp) {
		HASH_DEL(warned_set, w);
		free(w);
	}
	warned_count = 0;
}

void
op_resolve_policy(op_call *call)
{
	bool stored;
	struct circuit *found;
	const proto_ctx *declared =
	    circuit_table_use_found(cbd.table, call->name, call->clock, &stored, &found);
	char quoted[LOG_QUOTE_SIZE];

	call->stored = stored;
	/* In fleet mode other requests may run (and create circuits, and so
	 * reclaim idle ones) before this one's table call: no hint. */
	call->found = fleet_enabled() ? NULL : found;
	call->declared = stored ? declared : &call->ctx;
	conf_policy(&cbd.conf, call->name, call->declared, &call->policy, &call->sources,
	    &call->preset);
	call->conflicts = proto_policy_conflicts(&call->ctx, &call->policy, call->preset);
	if (call->conflicts == 0)
		return;
	stats.policy_conflicts++;
	/* One warning per connection and circuit, and per circuit at most
	 * LOG_LIMIT_BURST a window (a connection per request would repeat
	 * it without end). */
	if (warn_first(call->client->id, call->name) &&
	    log_limit_allow_kind(LOG_LIMIT_POLICY_CONFLICT, call->name))
		log_warning("circuit %s: connection %llu (pid %ld) declares a policy that differs "
			    "from the circuit's own; the circuit keeps its policy (see "
			    "policy_conflict in the reply)",
		    log_quote(call->name, quoted, sizeof quoted),
		    (unsigned long long)call->client->id, (long)call->client->pid);
}

/* ,"member":"text" (text needs no escaping). */
static void
put_member_text(enc_buf *b, const char *member, const char *text)
{
	ENC_LIT(b, ",\"");
	enc_puts(b, member);
	ENC_LIT(b, "\":\"");
	enc_puts(b, text);
	ENC_LIT(b, "\"");
}

/* allow's members as text, in the order op_reply_allow's jansson members
 * are written (direct). */
static bool
reply_allow_text(op_call *call, const ct_allow *allow, const char *reason)
{
	enc_buf *b = &call->tail;

	/* The common answers as one literal each. */
	if (allow->allowed && allow->state == CB_STATE_CLOSED)
		ENC_LIT(b, ",\"allowed\":true,\"state\":\"closed\"");
	else if (!allow->allowed && allow->state == CB_STATE_OPEN)
		ENC_LIT(b, ",\"allowed\":false,\"state\":\"open\"");
	else if (allow->allowed)
		ENC_LIT(b, ",\"allowed\":true");
	else
		ENC_LIT(b, ",\"allowed\":false");
	if (allow->state != (allow->allowed ? CB_STATE_CLOSED : CB_STATE_OPEN))
		put_member_text(b, "state", breaker_state_name(allow->state));
	if (!allow->allowed && reason != NULL)
		put_member_text(b, "reason", reason);
	if (!allow->allowed && allow->reason == CT_REFUSED_CONCURRENCY) {
		ENC_LIT(b, ",\"in_flight\":");
		enc_int(b, (json_int_t)allow->in_flight);
	}
	if (!allow->allowed) {
		ENC_LIT(b, ",\"retry_after_ms\":");
		enc_int(b, allow->retry_after_ms);
	}
	if (allow->has_permit) {
		ENC_LIT(b, ",\"permit\":");
		enc_name(b, allow->permit.token);
		ENC_LIT(b, ",\"expires_at\":");
		enc_int(b, allow->permit.expires_at);
	}
	if (b->nomem)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_reply_allow(op_call *call, const ct_allow *allow)
{
	json_t *r;
	const char *reason = circuit_table_refusal_name(allow->reason);

	if (call->direct)
		return reply_allow_text(call, allow, reason);
	r = op_reply(call);
	/* A permit's members are written as text after the others (every
	 * granted allow of a circuit with a ticket has them). */
	if (allow->has_permit) {
		ENC_LIT(&call->tail, ",\"permit\":");
		enc_name(&call->tail, allow->permit.token);
		ENC_LIT(&call->tail, ",\"expires_at\":");
		enc_int(&call->tail, allow->permit.expires_at);
		if (call->tail.nomem)
			return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	}
	if (json_object_set_new(r, "allowed", json_boolean(allow->allowed)) != 0 ||
	    json_object_set_new(r, "state", json_string(breaker_state_name(allow->state))) != 0 ||
	    (!allow->allowed && reason != NULL &&
		json_object_set_new(r, "reason", json_string(reason)) != 0) ||
	    (!allow->allowed && allow->reason == CT_REFUSED_CONCURRENCY &&
		json_object_set_new(r, "in_flight", json_integer((json_int_t)allow->in_flight)) !=
		    0) ||
	    (!allow->allowed &&
		json_object_set_new(r, "retry_after_ms", json_integer(allow->retry_after_ms)) != 0))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_reply_conflicts(op_call *call)
{
	json_t *names;

	if (call->conflicts == 0)
		return true;
	names = json_array();
	for (int k = 0; names != NULL && k < PROTO_CTX_KEY_COUNT; k++) {
		if ((call->conflicts & (UINT32_C(1) << k)) &&
		    json_array_append_new(names,
			json_string(proto_ctx_def_get((proto_ctx_key)k)->name)) != 0) {
			json_decref(names);
			names = NULL;
		}
	}
	if (names == NULL || json_object_set_new(op_reply(call), "policy_conflict", names) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

op_conn *
op_conn_of(server_client *c)
{
	if (c->slot == NULL)
		c->slot = calloc(1, sizeof(op_conn));
	return c->slot;
}

json_t *
op_reply(op_call *call)
{
	if (call->reply == NULL)
		call->reply = proto_reply_ok(call->id);
	return call->reply;
}

/* An ok reply without an id, up to its first member. */
#define OK_HEAD "{\"ok\":true"

void
op_reply_head(enc_buf *b, const json_t *id)
{
	if (id != NULL) {
		ENC_LIT(b, "{\"id\":");
		enc_compact(b, id);
		ENC_LIT(b, ",\"ok\":true}");
	} else {
		ENC_LIT(b, OK_HEAD "}");
	}
}

void
op_reply_direct(op_call *call)
{
	enc_buf *b = &call->tail; /* (empty: op_run takes none for it) */

	server_client_reply_begin(call->client, b);
	call->direct = true;
	if (call->id != NULL) {
		ENC_LIT(b, "{\"id\":");
		enc_compact(b, call->id);
		ENC_LIT(b, ",\"ok\":true");
	} else {
		ENC_LIT(b, OK_HEAD);
	}
}

void
op_reply_direct_cancel(op_call *call)
{
	if (!call->direct)
		return;
	server_client_reply_cancel(call->client, &call->tail);
	call->tail = enc_take();
	call->direct = false;
}

bool
op_reply_bool(op_call *call, const char *member, bool value)
{
	if (call->direct) {
		ENC_LIT(&call->tail, ",\"");
		enc_puts(&call->tail, member);
		if (value)
			ENC_LIT(&call->tail, "\":true");
		else
			ENC_LIT(&call->tail, "\":false");
		return true; /* (nomem: seen with the reply's next member or end) */
	}
	if (json_object_set_new(op_reply(call), member, json_boolean(value)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

/* Write call's reply: its jansson members, then the members encoded as
 * text (call->tail, then call->tail_more), as one line, copied once into
 * the connection's output. Steals call->reply. */
static void
reply_with_tail(server_client *c, op_call *call, const json_t *id)
{
	static const char plain_head[] = OK_HEAD;
	enc_buf head;
	struct iovec parts[4];

	parts[1] = (struct iovec){ call->tail.buf, call->tail.len };
	parts[2] = (struct iovec){ call->tail_more.buf, call->tail_more.len };
	parts[3] = (struct iovec){ (void *)"}", 1 };
	/* Most replies: no id, no member beyond the tail's. */
	if (call->reply == NULL && id == NULL) {
		parts[0] = (struct iovec){ (void *)plain_head, sizeof plain_head - 1 };
		server_client_reply_parts(c, parts, 4);
		return;
	}
	head = enc_take();
	if (call->reply != NULL)
		enc_compact(&head, call->reply);
	else
		op_reply_head(&head, id);
	json_decref(call->reply);
	call->reply = NULL;
	if (head.nomem || head.len < 2 || head.buf[head.len - 1] != '}') {
		enc_free(&head);
		server_client_reply_oom(c, id);
		return;
	}
	/* "{...}" + ",\"snapshot\":{...}" -> "{...,\"snapshot\":{...}}" */
	parts[0] = (struct iovec){ head.buf, head.len - 1 };
	server_client_reply_parts(c, parts, 4);
	enc_recycle(&head);
}

void
op_begin(server_client *c)
{
	watch_request_begin(c);
}

void
op_suspend(server_client *c)
{
	watch_request_end(c);
}

void
op_finish(op_call *call, bool ok)
{
	server_client *c = call->client;

	if (call->direct && (!ok || call->noreply || call->tail.nomem)) {
		/* Not to be written as begun: nothing of it goes out. */
		bool nomem = ok && !call->noreply;

		op_reply_direct_cancel(call);
		if (nomem)
			ok = proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	}
	if (ok && call->direct) {
		/* Written in place, in order: ended and committed. */
		ENC_LIT(&call->tail, "}");
		if (call->tail.nomem) {
			op_reply_direct_cancel(call);
			server_client_reply_oom(c, call->id);
		} else {
			server_client_reply_commit(c, &call->tail);
		}
		json_decref(call->reply);
		call->reply = NULL;
	} else if (ok && call->written) {
		json_decref(call->reply); /* written piece by piece already */
	} else if (ok) {
		if (call->noreply) {
			json_decref(call->reply);
			stats.noreply++;
		} else if (call->tail.len > 0 || call->tail_more.len > 0 || call->reply == NULL) {
			reply_with_tail(c, call, call->id);
		} else {
			server_client_reply(c, call->reply);
		}
	} else {
		json_t *error;

		json_decref(call->reply);
		stats.errors[call->err.code]++;
		if (call->op != NULL)
			stats.op_errors[call->op_index]++;
		log_debug("connection %llu: %s: %s", (unsigned long long)c->id,
		    proto_code_name(call->err.code), call->err.message);
		if (call->noreply) {
			stats.noreply++;
		} else {
			error = proto_reply_error(call->id, &call->err);
			if (error != NULL)
				server_client_reply(c, error);
			else
				server_client_reply_oom(c, call->id);
		}
	}
	/* Events this request caused reach its own connection after it. */
	watch_request_end(c);
	if (call->tail.buf != NULL) /* (most replies: given to c's output) */
		enc_recycle(&call->tail);
	if (call->tail_more.buf != NULL)
		enc_free(&call->tail_more);
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
