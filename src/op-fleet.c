/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-fleet.c — the circuit ops in fleet mode (backend = redis): each
 * request becomes one call of the circuit script (src/fleet.lua) through
 * fleet.c; its reply answers the request and refreshes this host's copy
 * of the circuit (the circuit table, which answers while Redis is away);
 * events from other cbds refresh the copy and reach this host's
 * watchers; after an outage, circuits that opened here, holds placed
 * here and an operator's release, delete or unheld set_state made here
 * are written back.
 *
 * A connection whose request waits on Redis reads no further request
 * until it is answered, so replies keep the order of requests. Policy is
 * resolved here as in memory mode (the config file of this host, the
 * policy the circuit was created with, [defaults]) and handed to the
 * script whole; the script only checks that it was resolved against the
 * policy the circuit really was created with (else cbd resolves again).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "circuit-json.h"
#include "clock.h"
#include "daemon.h"
#include "events.h"
#include "fleet.h"
#include "log.h"
#include "op-fleet.h"
#include "stats.h"

/* Calls of one request again after the script said the circuit was
 * created with another policy (another cbd created it meanwhile). */
#define FLEET_MISMATCH_RETRIES 2

/* A permit or slot this connection holds in Redis: given back when the
 * connection closes (a dead host's go by their ttl). */
typedef struct op_fleet_slot {
	struct op_fleet_slot *next;
	char token[CT_TOKEN_SIZE];
	char name[];
} op_fleet_slot;

/* A request waiting on Redis. */
typedef struct op_pending {
	struct op_pending *prev, *next; /* its connection's fleet_pending */
	op_call call; /* its client is NULL once the connection closed */
	json_t *request; /* a reference: call's strings point into it */
	const char *script_op;
	json_t *first; /* record with a permit: the outcome's reply */
	bool permit_next; /* record with a permit: its release is still to send */
	int in_flight; /* script calls sent and not yet answered */
	int retries;
	char *declared_text; /* the policy the circuit was created with */
	proto_ctx declared; /* parsed from it after a mismatch */
	char token[CT_TOKEN_SIZE]; /* allow, acquire_slot: the token offered */
} op_pending;

static uint64_t token_counter;

/* --- the script's view of a circuit --- */

static const struct {
	const char *name;
	cb_reason reason;
} reason_names[] = {
	{ "failure_threshold", CB_REASON_FAILURE_THRESHOLD },
	{ "failure_rate", CB_REASON_FAILURE_RATE },
	{ "trial_failed", CB_REASON_TRIAL_FAILED },
	{ "trial_succeeded", CB_REASON_TRIAL_SUCCEEDED },
	{ "break_elapsed", CB_REASON_BREAK_ELAPSED },
	{ "forced", CB_REASON_FORCED },
	{ "cas", CB_REASON_CAS },
	{ "held", CB_REASON_HELD },
	{ "hold_expired", CB_REASON_HOLD_EXPIRED },
	{ "released", CB_REASON_RELEASED },
	{ "writeback", CB_REASON_WRITTEN_BACK },
	{ "merged", CB_REASON_MERGED },
};

/* The change a script reply or event reports (reason NONE: none). */
static void
change_from_json(const json_t *j, ct_change *out)
{
	const char *from = json_string_value(json_object_get(j, "from"));
	const char *to = json_string_value(json_object_get(j, "to"));
	const char *reason = json_string_value(json_object_get(j, "reason"));

	memset(out, 0, sizeof *out);
	if (!json_is_object(j) || from == NULL || to == NULL || reason == NULL ||
	    !breaker_state_parse(from, strlen(from), &out->from) ||
	    !breaker_state_parse(to, strlen(to), &out->to))
		return;
	for (size_t i = 0; i < sizeof reason_names / sizeof reason_names[0]; i++) {
		if (strcmp(reason, reason_names[i].name) == 0)
			out->reason = reason_names[i].reason;
	}
	if (out->reason == CB_REASON_NONE)
		out->reason = CB_REASON_FORCED;
}

/* Parse the canonical text of a declared policy ("" = none). */
static bool
declared_parse(const char *text, proto_ctx *out)
{
	json_t *wrap, *ctx;
	proto_error err;
	bool ok;

	memset(out, 0, sizeof *out);
	if (text == NULL || text[0] == '\0')
		return true;
	ctx = json_loads(text, 0, NULL);
	wrap = ctx != NULL ? json_pack("{s:o}", "ctx", ctx) : NULL;
	ok = wrap != NULL && proto_ctx_from_json(wrap, out, &err);
	json_decref(wrap);
	return ok;
}

/* The canonical text of a declared policy: "" for none. NULL: no memory. */
static char *
declared_text(const proto_ctx *declared)
{
	json_t *obj = declared != NULL ? proto_ctx_members_to_json(declared) : json_object();
	char *text;

	if (obj == NULL)
		return NULL;
	text = json_object_size(obj) == 0 ? strdup("")
					  : json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(obj);
	return text;
}

/* What the script reports of a circuit, as a view. Strings point into
 * j; declared receives the parsed policy; reporters (room for
 * CB_REPORTERS_MAX) stands for the reporters the script counted. */
static bool
view_from_json(const char *name, const json_t *j, int64_t now, ct_view *view, proto_ctx *declared,
    cb_reporters *reporters)
{
	const json_t *window = json_object_get(j, "window");
	int64_t break_ms = 0, count;
	proto_policy_sources sources;
	const char *preset;
	proto_error err;
	cb_policy policy;

	proto_node totals = proto_node_json(json_object_get(j, "totals"));
	proto_node hold = proto_node_json(json_object_get(j, "hold"));
	unsigned found;

	memset(view, 0, sizeof *view);
	view->hold.until = CB_TIME_NONE;
	if (!json_is_object(j) || !proto_snapshot_from_json(j, &view->snap, NULL, &err) ||
	    !declared_parse(json_string_value(json_object_get(j, "declared")), declared) ||
	    !circuit_json_totals_read(&totals, "totals", CIRCUIT_JSON_STRICT, &view->totals, &found,
		&err) ||
	    !circuit_json_hold_read(&hold, "hold", CIRCUIT_JSON_STRICT, &view->hold, &err))
		return false;
	view->stored = true;
	view->declared = declared;
	/* As cb_snapshot keeps it: a break break_backoff grew, 0: the policy's. */
	conf_policy(&cbd.conf, name, declared, &policy, &sources, &preset);
	proto_get_int(j, "current_break_ms", 0, CB_DURATION_MAX, false, &break_ms, NULL, &err);
	view->snap.current_break_ms = break_ms;
	count = json_integer_value(json_object_get(j, "slots"));
	view->slots = count > 0 ? (uint64_t)count : 0;
	if (json_is_object(window)) {
		view->has_window = true;
		view->window.calls = (uint32_t)json_integer_value(json_object_get(window, "calls"));
		view->window.failures =
		    (uint32_t)json_integer_value(json_object_get(window, "failures"));
		view->window.slow = (uint32_t)json_integer_value(json_object_get(window, "slow"));
	}
	count = json_integer_value(json_object_get(j, "reporters"));
	if (policy.min_reporters > 1) {
		breaker_reporters_init(reporters, policy.min_reporters);
		for (uint32_t i = 0; i < reporters->slots && (int64_t)i < count; i++)
			reporters->r[i] = (cb_reporter){ .id = (int64_t)i + 1, .at = now };
		view->reporters = reporters;
	}
	return true;
}

/* What copy_apply's view points into besides the JSON it read: valid
 * until the next copy_apply (cbd is single-threaded). */
static proto_ctx copy_declared;
static union {
	cb_reporters r;
	unsigned char room[sizeof(cb_reporters) + CB_REPORTERS_MAX * sizeof(cb_reporter)];
} copy_reporters;

/* Make this host's copy of name what the script reports (circuit NULL
 * or null: not stored), log and broadcast its change. *view (may be
 * NULL) receives the script's view. Returns whether circuit was read. */
static bool
copy_apply(const char *name, const json_t *circuit, const json_t *change_json, int64_t now,
    bool deleted_event, ct_view *view)
{
	ct_view local;
	ct_change change;

	if (view == NULL)
		view = &local;
	if (circuit == NULL || json_is_null(circuit)) {
		memset(view, 0, sizeof *view);
		breaker_snapshot_init(&view->snap);
		view->hold.until = CB_TIME_NONE;
		if (circuit_table_delete(cbd.table, name) && deleted_event) {
			events_deleted(name);
		}
		return true;
	}
	if (!view_from_json(name, circuit, now, view, &copy_declared, &copy_reporters.r)) {
		log_warning("fleet: cannot read the circuit script's view of a circuit");
		return false;
	}
	/* Only a cache: a refused restore (max_circuits) leaves the copy out. */
	circuit_table_restore(cbd.table, name, view, clock_realtime_ms());
	change_from_json(change_json, &change);
	events_changed(name, &change);
	return true;
}

/* --- requests --- */

/* The members every call of p's request carries. NULL: no memory. */
static json_t *
args_common(op_pending *p)
{
	op_call *call = &p->call;
	char reporter[FLEET_ORIGIN_SIZE + 24];
	json_t *args = json_object();

	snprintf(reporter, sizeof reporter, "%s:%ld", fleet_origin(),
	    call->client != NULL ? (long)call->client->pid : 0L);
	if (args == NULL ||
	    json_object_set_new(args, "policy", proto_policy_flat_json(&call->policy)) != 0 ||
	    json_object_set_new(args, "declared", json_string(p->declared_text)) != 0 ||
	    json_object_set_new(args, "reporter", json_string(reporter)) != 0 ||
	    (call->table.duration_ms > 0 &&
		json_object_set_new(args, "duration_ms", json_integer(call->table.duration_ms)) !=
		    0) ||
	    (proto_ctx_has(&call->ctx, PROTO_CTX_NOW) &&
		json_object_set_new(args, "now", json_integer(call->now)) != 0)) {
		json_decref(args);
		return NULL;
	}
	return args;
}

static void pending_done(const json_t *reply, void *arg);

/* One script call for p. False when it could not be sent. */
static bool
pending_call(op_pending *p, const char *script_op, json_t *extra)
{
	json_t *args = args_common(p);
	bool ok;

	if (args == NULL || (extra != NULL && json_object_update(args, extra) != 0)) {
		json_decref(args);
		return false;
	}
	ok = fleet_call_script(script_op, p->call.name, args, pending_done, p) != NULL;
	json_decref(args);
	p->in_flight += ok;
	return ok;
}

/* An op's path through the circuit script: a row of the op table's fleet
 * column (op-fleet.h). */
struct op_fleet_path {
	/* The script's op (NULL: the request names it: record's outcome). */
	const char *script_op;
	/* Members of the first script call beyond the common ones, into
	 * extra; false with *bad (call->err), or alone (out of memory). NULL:
	 * none. */
	bool (*args)(op_pending *p, json_t *extra, bool *bad, bool *answered);
	/* The reply's members from the script's answer; *snapshot when the
	 * circuit's snapshot follows them. NULL: the snapshot alone. */
	bool (*reply)(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot);
	/* May create a circuit: one this host has no copy of needs room for
	 * one (max_circuits). A failed cas creates nothing. */
	bool needs_room;
	/* An operator's action remembered while Redis is away, written back
	 * when it returns (WB_NONE: not one). */
	int writeback;
	/* Its answer's missing circuit is its own doing (delete): no deleted
	 * event from the copy. */
	bool deletes;
};

/* record: the outcome is the script's op; a permit's release follows. */
static bool
args_record(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	op_call *call = &p->call;
	const char *text;

	if (!proto_get_text(call->request, "outcome", true, &text, NULL, &call->err))
		return *bad = true, false;
	if (strcmp(text, "success") != 0 && strcmp(text, "failure") != 0 &&
	    strcmp(text, "ignore") != 0) {
		proto_fail(&call->err, PROTO_BAD_REQUEST,
		    "outcome must be \"success\", \"failure\" or \"ignore\"");
		return *bad = true, false;
	}
	p->script_op = text;
	if (!proto_get_text(call->request, "permit", false, &text, NULL, &call->err))
		return *bad = true, false;
	p->permit_next = text != NULL;
	return true;
}

/* allow, acquire_slot: the token a slot taken gets. */
static bool
args_token(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	snprintf(p->token, sizeof p->token, "%s-%016" PRIx64, fleet_origin(), ++token_counter);
	return json_object_set_new(extra, "token", json_string(p->token)) == 0;
}

static bool
args_release_slot(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	const char *text;

	if (!proto_get_text(p->call.request, "token", true, &text, NULL, &p->call.err))
		return *bad = true, false;
	return json_object_set_new(extra, "token", json_string(text)) == 0;
}

static bool
args_cas(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	op_call *call = &p->call;
	cb_state from, to;

	if (!proto_get_state(call->request, "from", true, &from, NULL, &call->err) ||
	    !proto_get_state(call->request, "to", true, &to, NULL, &call->err) ||
	    !op_cas_allowed(call, from, to, answered))
		return *bad = true, false;
	return json_object_set_new(extra, "from", json_string(breaker_state_name(from))) == 0 &&
	    json_object_set_new(extra, "to", json_string(breaker_state_name(to))) == 0 &&
	    json_object_set_new(extra, "admin",
		json_boolean(server_client_is_admin(call->client))) == 0;
}

static bool
args_set_state(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	op_call *call = &p->call;
	char user[CT_USER_MAX + 1];
	ct_hold_request req;
	cb_state state;
	bool hold;

	if (!proto_get_state(call->request, "state", true, &state, NULL, &call->err) ||
	    !op_hold_members(call, state, &hold, &req))
		return *bad = true, false;
	op_peer_user(call, user, sizeof user);
	return json_object_set_new(extra, "state", json_string(breaker_state_name(state))) == 0 &&
	    (!hold ||
		json_object_set_new(extra, "hold",
		    json_pack("{s:I, s:I, s:s, s:o}", "ttl_ms", (json_int_t)req.ttl_ms, "by_uid",
			(json_int_t)req.by_uid, "by_user", user, "reason",
			req.reason != NULL ? json_string(req.reason) : json_null())) == 0);
}

/* The op-specific members of the first script call (its fleet path's).
 * NULL and *bad when the request is invalid (call->err), NULL alone when
 * out of memory. */
static json_t *
args_for_op(op_pending *p, bool *bad, bool *answered)
{
	const op_fleet_path *path = p->call.op->fleet;
	json_t *extra = json_object();

	*bad = *answered = false;
	if (extra == NULL)
		return NULL;
	p->script_op = path->script_op;
	if (path->args != NULL && !path->args(p, extra, bad, answered)) {
		json_decref(extra);
		return NULL;
	}
	return extra;
}

/* c's blocking bits from its waiting request and requests in flight. */
static void
block_update(server_client *c, const op_conn *oc)
{
	server_client_block(c, SERVER_CLIENT_BLOCK_REPLY, oc->fleet_wait != NULL);
	server_client_block(c, SERVER_CLIENT_BLOCK_FULL,
	    oc->fleet_inflight >= OP_FLEET_INFLIGHT_MAX);
}

static void
pending_link(op_pending *p, server_client *c)
{
	op_conn *oc = op_conn_peek(c);

	p->prev = NULL;
	p->next = oc->fleet_pending;
	if (oc->fleet_pending != NULL)
		oc->fleet_pending->prev = p;
	oc->fleet_pending = p;
	oc->fleet_inflight++;
	block_update(c, oc);
}

static void
pending_unlink(op_pending *p, server_client *c)
{
	op_conn *oc = op_conn_peek(c);

	if (p->prev != NULL)
		p->prev->next = p->next;
	else
		oc->fleet_pending = p->next;
	if (p->next != NULL)
		p->next->prev = p->prev;
	p->prev = p->next = NULL;
	oc->fleet_inflight--;
	block_update(c, oc);
}

static void
pending_free(op_pending *p)
{
	json_decref(p->first);
	json_decref(p->call.reply);
	enc_free(&p->call.tail);
	enc_free(&p->call.tail_more);
	json_decref(p->request);
	free(p->declared_text);
	free(p);
}

/* Point p's call at its own members again (it was copied). */
static void
pending_fix(op_pending *p)
{
	op_call *call = &p->call;

	call->table.policy = &call->policy;
	call->table.declared = &call->ctx;
	call->table.owner = call->client != NULL ? &call->client->owner : NULL;
}

bool
op_fleet_send(op_call *call, bool *answered)
{
	op_pending *p;
	json_t *extra;
	bool bad = false;

	*answered = false;
	if (call->client == NULL || call->name == NULL)
		return true; /* this host's copy answers */
	/* max_circuits bounds this host's copies: a circuit it has no copy of
	 * is created only when there is room for one (a failed cas creates
	 * nothing, so it needs none). */
	if (call->op->fleet->needs_room && !call->stored &&
	    !op_status(call, circuit_table_make_room(cbd.table, call->clock)))
		return false;
	p = op_conn_of(call->client) != NULL ? calloc(1, sizeof *p) : NULL;
	if (p == NULL)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	/* The call lives in p from here; the dispatcher's copy is neither
	 * answered nor freed while pending is set. */
	p->call = *call;
	p->request = json_incref((json_t *)call->request);
	pending_fix(p);
	p->declared_text = declared_text(call->declared);
	extra = p->declared_text != NULL ? args_for_op(p, &bad, answered) : NULL;
	if (extra == NULL || !pending_call(p, p->script_op, extra)) {
		bool ok = extra != NULL || *answered;

		if (extra != NULL)
			fleet_count_unavailable(); /* Redis cannot take it: local */
		else if (bad || *answered)
			call->err = p->call.err;
		else
			proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
		/* cas may have answered from this host's copy (applied: false). */
		call->tail = p->call.tail;
		json_decref(p->request);
		free(p->declared_text);
		free(p);
		if (extra != NULL) {
			/* This host's copy answers now (and remembers an operator's
			 * action for the write-back). */
			json_decref(extra);
			*answered = true;
			return op_fleet_local(call);
		}
		return ok;
	}
	json_decref(extra);
	call->pending = true;
	pending_link(p, call->client);
	/* A reply must keep its place among the connection's replies; a
	 * noreply request has none to keep (Redis runs the connection's
	 * calls in order all the same). */
	if (!call->noreply) {
		op_conn_peek(call->client)->fleet_wait = p;
		block_update(call->client, op_conn_peek(call->client));
	}
	return true;
}

/* Remember a slot p's connection got, to give it back when the
 * connection closes. Past max_slots (or out of memory) it is not
 * remembered and goes back by its ttl. */
static void
slot_note(op_pending *p, const char *token)
{
	server_client *c = p->call.client;
	size_t len = strlen(p->call.name);
	op_conn *oc = c != NULL ? op_conn_peek(c) : NULL;
	op_fleet_slot *s;

	if (oc == NULL)
		return;
	if (stats.fleet_slots >= (uint64_t)cbd.conf.max_slots) {
		stats_limit_hit(STATS_LIMIT_SLOTS);
		return;
	}
	s = malloc(sizeof *s + len + 1);
	if (s == NULL)
		return; /* it goes back by its ttl */
	snprintf(s->token, sizeof s->token, "%s", token);
	memcpy(s->name, p->call.name, len + 1);
	s->next = oc->fleet_slots;
	oc->fleet_slots = s;
	stats.fleet_slots++;
}

static void
slot_forget(server_client *c, const char *token)
{
	op_conn *oc = op_conn_peek(c);

	if (oc == NULL)
		return;
	for (op_fleet_slot **sp = &oc->fleet_slots; *sp != NULL; sp = &(*sp)->next) {
		if (strcmp((*sp)->token, token) == 0) {
			op_fleet_slot *s = *sp;

			*sp = s->next;
			free(s);
			stats.fleet_slots--;
			return;
		}
	}
}

/* The out-of-memory answer of a reply function. */
static bool
reply_nomem(op_pending *p)
{
	return proto_fail(&p->call.err, PROTO_INTERNAL, "out of memory");
}

static bool
reply_get(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	return json_object_set_new(op_reply(&p->call), "stored", json_boolean(view->stored)) == 0
	    ? true
	    : reply_nomem(p);
}

static bool
reply_allow(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	json_t *r = op_reply(&p->call);
	const json_t *permit = json_object_get(reply, "permit");
	bool allowed = json_is_true(json_object_get(reply, "allowed"));

	*snapshot = false;
	if (json_object_set_new(r, "allowed", json_boolean(allowed)) != 0 ||
	    json_object_set_new(r, "state", json_string(breaker_state_name(view->snap.state))) !=
		0 ||
	    (json_is_object(permit) &&
		(json_object_set(r, "permit", json_object_get(permit, "token")) != 0 ||
		    json_object_set(r, "expires_at", json_object_get(permit, "expires_at")) !=
			0)) ||
	    (!allowed &&
		json_object_set(r, "retry_after_ms", json_object_get(reply, "retry_after_ms")) !=
		    0))
		return reply_nomem(p);
	if (json_is_object(permit))
		slot_note(p, p->token);
	return true;
}

static bool
reply_acquire_slot(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	json_t *r = op_reply(&p->call);
	const json_t *permit = json_object_get(reply, "permit");
	bool acquired = json_is_true(json_object_get(reply, "acquired"));

	*snapshot = false;
	if (json_object_set_new(r, "acquired", json_boolean(acquired)) != 0 ||
	    (acquired && json_is_object(permit) &&
		(json_object_set(r, "token", json_object_get(permit, "token")) != 0 ||
		    json_object_set(r, "expires_at", json_object_get(permit, "expires_at")) != 0)))
		return reply_nomem(p);
	if (acquired)
		slot_note(p, p->token);
	return true;
}

static bool
reply_release_slot(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	op_call *call = &p->call;
	const char *token = json_string_value(json_object_get(call->request, "token"));

	*snapshot = false;
	if (call->client != NULL && token != NULL)
		slot_forget(call->client, token);
	return json_object_set(op_reply(call), "released", json_object_get(reply, "released")) == 0
	    ? true
	    : reply_nomem(p);
}

static bool
reply_delete(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	op_call *call = &p->call;
	bool existed = json_is_true(json_object_get(reply, "existed"));

	*snapshot = false;
	if (existed) {
		op_audit(call, "deleted", NULL);
		events_deleted(call->name);
	}
	return json_object_set_new(op_reply(call), "existed", json_boolean(existed)) == 0
	    ? true
	    : reply_nomem(p);
}

static bool
reply_cas(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	return json_object_set(op_reply(&p->call), "applied", json_object_get(reply, "applied")) ==
		0
	    ? true
	    : reply_nomem(p);
}

static bool
reply_release(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	if (json_is_true(json_object_get(reply, "released")))
		op_audit(&p->call, "released the hold of", NULL);
	return json_object_set(op_reply(&p->call), "released",
		   json_object_get(reply, "released")) == 0
	    ? true
	    : reply_nomem(p);
}

static bool
reply_set_state(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	op_call *call = &p->call;
	cb_state state;
	ct_hold_request req;
	bool hold;

	if (proto_get_state(call->request, "state", true, &state, NULL, &call->err) &&
	    op_hold_members(call, state, &hold, &req))
		op_audit_set_state(call, state, hold, &req);
	return true;
}

/* The reply of p's request from the script's answer: its fleet path's
 * members, then (most ops) the circuit's snapshot. */
static bool
pending_reply(op_pending *p, const json_t *reply, const ct_view *view)
{
	const op_fleet_path *path = p->call.op->fleet;
	bool snapshot = true;

	if (path->reply != NULL && !path->reply(p, reply, view, &snapshot))
		return false;
	if (!snapshot)
		return true;
	return op_reply_snapshot(&p->call, "snapshot", view);
}

/* Answer p (ok or call->err), resume its connection, free p. */
static void
pending_finish(op_pending *p, bool ok)
{
	server_client *c = p->call.client;

	if (c != NULL) {
		op_conn *oc = op_conn_peek(c);
		bool was_blocked = server_client_waiting(c);

		ok = ok && op_reply_conflicts(&p->call);
		op_finish(&p->call, ok);
		p->call.reply = NULL;
		if (oc->fleet_wait == p)
			oc->fleet_wait = NULL;
		pending_unlink(p, c);
		if (was_blocked && !server_client_waiting(c))
			server_client_resume(c);
	}
	pending_free(p);
}

/* Redis could not answer: this host's copy does, as in memory mode. */
static void
pending_local(op_pending *p)
{
	op_call *call = &p->call;
	bool ok;

	op_resolve_policy(call);
	pending_fix(p);
	ok = op_fleet_local(call);
	pending_finish(p, ok);
}

static void
pending_done(const json_t *reply, void *arg)
{
	op_pending *p = arg;
	op_call *call = &p->call;
	const json_t *circuit;
	ct_view view;

	p->in_flight--;
	/* Events this request causes reach its connection after its reply. */
	if (call->client != NULL)
		op_begin(call->client);
	if (call->client == NULL) {
		/* The connection closed: nothing to answer (its slots went back
		 * when it closed), but what the call did in Redis reaches this
		 * host's copy and its watchers all the same. */
		if (reply != NULL && !json_is_true(json_object_get(reply, "mismatch")))
			copy_apply(call->name, json_object_get(reply, "circuit"),
			    json_object_get(reply, "change"),
			    json_is_integer(json_object_get(reply, "now"))
				? json_integer_value(json_object_get(reply, "now"))
				: call->now,
			    true, NULL);
		if (p->in_flight == 0)
			pending_free(p);
		return;
	}
	if (reply == NULL) {
		pending_local(p);
		return;
	}
	if (json_is_true(json_object_get(reply, "mismatch"))) {
		/* Another cbd created the circuit with another policy: resolve
		 * against that one and call again. */
		const char *stored = json_string_value(json_object_get(reply, "declared"));
		bool bad, answered;
		json_t *extra;

		if (p->first != NULL || p->retries++ >= FLEET_MISMATCH_RETRIES ||
		    !declared_parse(stored, &p->declared)) {
			pending_local(p);
			return;
		}
		free(p->declared_text);
		p->declared_text = strdup(stored != NULL ? stored : "");
		call->declared = &p->declared;
		conf_policy(&cbd.conf, call->name, &p->declared, &call->policy, &call->sources,
		    &call->preset);
		call->conflicts = proto_policy_conflicts(&call->ctx, &call->policy, call->preset);
		extra = p->declared_text != NULL ? args_for_op(p, &bad, &answered) : NULL;
		if (extra == NULL && (bad || answered)) {
			/* cas, judged again against the right policy, was answered
			 * (or refused) from this host's copy. */
			pending_finish(p, answered);
			return;
		}
		if (extra == NULL || !pending_call(p, p->script_op, extra)) {
			json_decref(extra);
			pending_local(p);
			return;
		}
		json_decref(extra);
		return;
	}
	if (p->permit_next) {
		/* record's outcome is in; its permit's release follows. */
		json_t *extra;

		p->permit_next = false;
		p->first = json_incref((json_t *)reply);
		extra = json_pack("{s:s}", "token",
		    json_string_value(json_object_get(call->request, "permit")));
		if (extra == NULL || !pending_call(p, "release_slot", extra)) {
			json_decref(extra);
			pending_local(p);
			return;
		}
		json_decref(extra);
		return;
	}
	if (p->first != NULL) {
		/* The outcome's change, the circuit after the release. */
		const char *permit = json_string_value(json_object_get(call->request, "permit"));

		if (permit != NULL)
			slot_forget(call->client, permit);
		copy_apply(call->name, json_object_get(p->first, "circuit"),
		    json_object_get(p->first, "change"), call->now, false, NULL);
	}
	/* Time and retry_after_ms as the fleet's clock says. */
	if (json_is_integer(json_object_get(reply, "now")))
		call->now = json_integer_value(json_object_get(reply, "now"));
	circuit = json_object_get(reply, "circuit");
	if (!copy_apply(call->name, circuit, json_object_get(reply, "change"), call->now,
		!call->op->fleet->deletes, &view)) {
		pending_local(p);
		return;
	}
	if (view.stored) {
		/* The policy the circuit really has (declared by its creator). */
		call->declared = view.declared;
		conf_policy(&cbd.conf, call->name, view.declared, &call->policy, &call->sources,
		    &call->preset);
	}
	pending_finish(p, pending_reply(p, reply, &view));
}

void
op_fleet_client_closed(server_client *c)
{
	op_conn *oc = op_conn_peek(c);
	op_fleet_slot *s, *next;

	/* Their calls still run in Redis; nothing is answered. */
	while (oc->fleet_pending != NULL) {
		op_pending *p = oc->fleet_pending;

		pending_unlink(p, c);
		p->call.client = NULL;
		p->call.table.owner = NULL;
	}
	oc->fleet_wait = NULL;
	block_update(c, oc);
	for (s = oc->fleet_slots; s != NULL; s = next) {
		json_t *args = json_pack("{s:s, s:s}", "token", s->token, "declared", "");

		next = s->next;
		/* Fire and forget: a slot Redis does not get back expires. */
		if (args != NULL)
			fleet_call_script("release_slot", s->name, args, NULL, NULL);
		json_decref(args);
		free(s);
		stats.fleet_slots--;
	}
	oc->fleet_slots = NULL;
}

/* --- operator actions made while Redis is away --- */

typedef enum wb_action {
	WB_NONE = 0, /* not an operator's action */
	WB_RELEASE, /* ends the hold the circuit had */
	WB_DELETE,
	WB_SET_STATE, /* unheld: forces state, clears a hold */
} wb_action;

/* A circuit as this host knew it (a hold is identified by its state,
 * since, by_uid and by_user). */
typedef struct wb_known {
	int64_t opened_at; /* CB_TIME_NONE: none */
	bool held;
	cb_state hold_state;
	int64_t hold_since;
	int64_t hold_by_uid;
	char hold_by_user[CT_USER_MAX + 1];
} wb_known;

/* What an operator did to one circuit on this host while Redis was away,
 * against the circuit as this host knew it before the first such action. */
typedef struct wb_entry {
	UT_hash_handle hh;
	wb_action action; /* the last action (see wb_note) */
	cb_state state; /* WB_SET_STATE: the state forced */
	int64_t at; /* the action's decision clock */
	wb_known known;
	char name[];
} wb_entry;

static wb_entry *wb_entries;
static uint64_t wb_count;
static bool wb_full_logged; /* OP_FLEET_WRITEBACK_MAX reached: logged */

/* The circuit as this host knows it (view) into k. */
static void
wb_known_read(wb_known *k, const ct_view *view)
{
	k->opened_at = view->stored ? view->snap.opened_at : CB_TIME_NONE;
	k->held = view->hold.held;
	k->hold_state = view->hold.state;
	k->hold_since = view->hold.since;
	k->hold_by_uid = view->hold.by_uid;
	snprintf(k->hold_by_user, sizeof k->hold_by_user, "%s",
	    view->hold.held && view->hold.by_user != NULL ? view->hold.by_user : "");
}

/* Keep e (a new entry) unless OP_FLEET_WRITEBACK_MAX are kept already. */
static void
wb_add(wb_entry *e)
{
	fleet_stats *counters = (fleet_stats *)fleet_counters();

	if (wb_count >= OP_FLEET_WRITEBACK_MAX) {
		counters->writeback_dropped++;
		if (!wb_full_logged)
			log_warning("fleet: an operator changed %d circuits while redis is away; "
				    "changes to more are not written back",
			    OP_FLEET_WRITEBACK_MAX);
		wb_full_logged = true;
		free(e);
		return;
	}
	HASH_ADD_KEYPTR(hh, wb_entries, e->name, strlen(e->name), e);
	wb_count++;
}

static void
wb_remove(wb_entry *e)
{
	HASH_DEL(wb_entries, e);
	wb_count--;
}

/* Remember an operator's action on name (before: the circuit before it).
 * hold_placed: a held set_state, which merge writes back; it is noted
 * only when it replaced a hold (as a release of that one). Every noted
 * action ends the hold the circuit had, so a later release ends a hold
 * placed here since, which the fleet never had: the earlier action stays.
 * A later delete or unheld set_state supersedes the earlier action; what
 * the fleet must match stays what this host knew before the first. */
static void
wb_note(const char *name, wb_action action, cb_state state, int64_t at, const wb_known *before,
    bool hold_placed)
{
	size_t len = strlen(name);
	wb_entry *e;

	HASH_FIND(hh, wb_entries, name, len, e);
	if (hold_placed) {
		if (e != NULL || !before->held)
			return;
		action = WB_RELEASE;
	}
	if (e != NULL) {
		if (action != WB_RELEASE) {
			e->action = action;
			e->state = state;
			e->at = at;
		}
		return;
	}
	if (action == WB_RELEASE && !before->held)
		return; /* nothing released */
	e = calloc(1, sizeof *e + len + 1);
	if (e == NULL)
		return; /* not written back */
	memcpy(e->name, name, len + 1);
	e->action = action;
	e->state = state;
	e->at = at;
	e->known = *before;
	wb_add(e);
}

bool
op_fleet_local(op_call *call)
{
	const op_fleet_path *path = call->op->fleet;
	ct_hold_request req;
	ct_change change;
	ct_view view;
	wb_known before;
	cb_state state = CB_STATE_CLOSED;
	bool hold = false;
	int64_t now;

	if (call->name == NULL || fleet_up() || path->writeback == WB_NONE)
		return call->op->handler(call);
	/* The circuit before the action (a lapsed hold ends here, as the
	 * action would end it); delete has no ctx, so no ctx.now. */
	now = (call->op->flags & OP_CTX) ? call->now : call->clock;
	circuit_table_get(cbd.table, call->name, now, &view, &change);
	events_changed(call->name, &change);
	wb_known_read(&before, &view);
	if (!call->op->handler(call))
		return false;
	if (path->writeback == WB_SET_STATE &&
	    (!proto_get_state(call->request, "state", true, &state, NULL, &call->err) ||
		!op_hold_members(call, state, &hold, &req)))
		return true; /* answered: it was read once already */
	wb_note(call->name, (wb_action)path->writeback, state, now, &before, hold);
	return true;
}

void
op_fleet_free(void)
{
	wb_entry *e, *tmp;

	HASH_ITER (hh, wb_entries, e, tmp) {
		wb_remove(e);
		free(e);
	}
	wb_full_logged = false;
}

/* This host's copy of name becomes the fleet's circuit after a
 * write-back. The operator's action was logged and sent to watchers when
 * it was made here; a state the fleet's circuit has otherwise (the
 * write-back skipped, or the copy moved on since) is news here. A copy
 * the fleet no longer stores goes quietly: watchers saw the delete, and
 * a circuit that opened here since comes back by its merge. */
static void
wb_copy_refresh(const char *name, const json_t *circuit)
{
	const char *to = json_string_value(json_object_get(circuit, "state"));
	int64_t now = clock_realtime_ms();
	json_t *change = NULL;
	ct_change lapsed;
	ct_view local;

	circuit_table_get(cbd.table, name, now, &local, &lapsed);
	events_changed(name, &lapsed);
	if (to != NULL && strcmp(to, breaker_state_name(local.snap.state)) != 0)
		change = json_pack("{s:s, s:s, s:s}", "from", breaker_state_name(local.snap.state),
		    "to", to, "reason", "merged");
	copy_apply(name, circuit, change, now, false, NULL);
	json_decref(change);
}

/* The write-back of e answered (reply NULL: Redis went away again, e is
 * kept for the next recovery). */
static void
wb_done(const json_t *reply, void *arg)
{
	fleet_stats *counters = (fleet_stats *)fleet_counters();
	wb_entry *e = arg, *newer;

	if (reply == NULL) {
		HASH_FIND(hh, wb_entries, e->name, strlen(e->name), newer);
		if (newer == NULL) {
			wb_add(e);
			return;
		}
		/* e came first: as wb_note would have kept them, against what
		 * e knew (a release after e ended a hold placed since). */
		if (newer->action == WB_RELEASE) {
			newer->action = e->action;
			newer->state = e->state;
			newer->at = e->at;
		}
		newer->known = e->known;
		free(e);
		return;
	}
	if (json_is_true(json_object_get(reply, "applied")))
		counters->written_back++;
	else {
		counters->writeback_skipped++;
		log_info("fleet: %s made on circuit \"%s\" while redis was away is not written "
			 "back: the fleet's circuit changed meanwhile",
		    e->action == WB_RELEASE      ? "a release"
			: e->action == WB_DELETE ? "a delete"
						 : "a forced state",
		    e->name);
	}
	wb_copy_refresh(e->name, json_object_get(reply, "circuit"));
	free(e);
}

/* The script call that writes e back. NULL: no memory. */
static json_t *
wb_args(const wb_entry *e)
{
	static const char *const actions
	    [] = { [WB_RELEASE] = "release", [WB_DELETE] = "delete", [WB_SET_STATE] = "set_state" };
	proto_policy_sources sources;
	const char *preset;
	cb_policy policy;
	ct_change change;
	ct_view view;
	json_t *known;
	const wb_known *k = &e->known;

	/* The policy only bounds how long Redis keeps a forced open circuit. */
	circuit_table_get(cbd.table, e->name, clock_realtime_ms(), &view, &change);
	events_changed(e->name, &change);
	conf_policy(&cbd.conf, e->name, view.declared, &policy, &sources, &preset);
	known = json_pack("{s:o, s:o}", "opened_at",
	    k->opened_at != CB_TIME_NONE ? json_integer(k->opened_at) : json_null(), "hold",
	    k->held ? json_pack("{s:s, s:I, s:I, s:s}", "state", breaker_state_name(k->hold_state),
			  "since", (json_int_t)k->hold_since, "by_uid", (json_int_t)k->hold_by_uid,
			  "by_user", k->hold_by_user)
		    : json_null());
	if (known == NULL)
		return NULL;
	return json_pack("{s:o, s:s, s:s, s:I, s:o}", "policy", proto_policy_flat_json(&policy),
	    "action", actions[e->action], "state", breaker_state_name(e->state), "at",
	    (json_int_t)e->at, "known", known);
}

/* Send every remembered action to Redis (recovery); those that cannot be
 * sent stay for the next. Returns how many were sent. */
static uint64_t
wb_send_all(void)
{
	wb_entry *e, *tmp;
	uint64_t sent = 0;

	HASH_ITER (hh, wb_entries, e, tmp) {
		json_t *args = wb_args(e);

		if (args != NULL &&
		    fleet_call_script("writeback", e->name, args, wb_done, e) != NULL) {
			wb_remove(e);
			sent++;
		}
		json_decref(args);
	}
	wb_full_logged = false;
	return sent;
}

/* --- events and recovery --- */

/* An event applied from the fleet: the circuit as a get read it after
 * the event arrived (events and this host's own replies travel on two
 * connections; reading the circuit again on the script connection keeps
 * this host's copy from going back to an older state). */
static void
event_apply_now(const json_t *event, const json_t *circuit)
{
	const char *name = json_string_value(json_object_get(event, "name"));

	copy_apply(name, circuit, json_object_get(event, "change"),
	    json_is_integer(json_object_get(event, "now"))
		? json_integer_value(json_object_get(event, "now"))
		: clock_realtime_ms(),
	    true, NULL);
}

static void
event_read_done(const json_t *reply, void *arg)
{
	json_t *event = arg;

	/* Redis gone meanwhile (or the read failed): the event's own view. */
	if (reply == NULL || json_is_true(json_object_get(reply, "mismatch")))
		event_apply_now(event, json_object_get(event, "circuit"));
	else
		event_apply_now(event, json_object_get(reply, "circuit"));
	json_decref(event);
}

static void
event_apply(const json_t *event)
{
	const char *name = json_string_value(json_object_get(event, "name"));
	const json_t *circuit = json_object_get(event, "circuit");
	proto_policy_sources sources;
	proto_ctx declared;
	const char *preset, *why;
	cb_policy policy;
	json_t *args, *kept;

	if (name == NULL || !proto_name_valid(name, strlen(name), &why))
		return;
	/* A get never creates and, sent without "declared", never
	 * mismatches; the policy only shapes what it reads. */
	declared_parse(json_string_value(json_object_get(circuit, "declared")), &declared);
	conf_policy(&cbd.conf, name, &declared, &policy, &sources, &preset);
	/* At the event's own clock (ctx.now of the request that caused it,
	 * else Redis's then): a read at another time could end holds or
	 * slots early. */
	args = json_pack("{s:o, s:O}", "policy", proto_policy_flat_json(&policy), "now",
	    json_object_get(event, "now") != NULL ? json_object_get(event, "now") : json_null());
	kept = json_deep_copy(event);
	if (args != NULL && kept != NULL &&
	    fleet_call_script("get", name, args, event_read_done, kept) != NULL) {
		json_decref(args);
		return;
	}
	json_decref(args);
	json_decref(kept);
	event_apply_now(event, circuit);
}

static void
merge_done(const json_t *reply, void *arg)
{
	char *name = arg;

	/* This host's copy was in that state already (it opened or was held
	 * here): refreshed, not logged or sent to watchers a second time. */
	if (reply != NULL)
		copy_apply(name, json_object_get(reply, "circuit"), NULL, clock_realtime_ms(),
		    false, NULL);
	free(name);
}

typedef struct merge_walk {
	int64_t since;
	uint64_t sent;
} merge_walk;

/* Write back one circuit that opened here during the outage, or that an
 * operator held here then. */
static void
merge_visit(const char *name, const ct_view *view, void *arg)
{
	merge_walk *w = arg;
	proto_policy_sources sources;
	const char *preset;
	cb_policy policy;
	bool held_here = view->hold.held && view->hold.since >= w->since;
	char *text, *copy;
	json_t *args, *circuit;

	/* Opened here during the outage, or held here by an operator then. */
	if (!held_here &&
	    (view->snap.state != CB_STATE_OPEN || view->hold.held ||
		view->snap.opened_at < w->since))
		return;
	conf_policy(&cbd.conf, name, view->declared, &policy, &sources, &preset);
	text = declared_text(view->declared);
	copy = strdup(name);
	/* The copy's snapshot, its raw current_break_ms and, when an operator
	 * held it here, the hold. */
	circuit = proto_snapshot_to_json(name, &view->snap, 0);
	if (circuit != NULL &&
	    (json_object_set_new(circuit, "current_break_ms",
		 json_integer(view->snap.current_break_ms)) != 0 ||
		(held_here &&
		    json_object_set_new(circuit, "hold", circuit_json_hold(&view->hold)) != 0))) {
		json_decref(circuit);
		circuit = NULL;
	}
	args = text != NULL && circuit != NULL
	    ? json_pack("{s:o, s:s, s:O}", "policy", proto_policy_flat_json(&policy), "declared",
		  text, "circuit", circuit)
	    : NULL;
	json_decref(circuit);
	if (args != NULL && copy != NULL &&
	    fleet_call_script("merge", name, args, merge_done, copy) != NULL) {
		copy = NULL;
		w->sent++;
	}
	free(copy);
	free(text);
	json_decref(args);
}

static void
recover(int64_t outage_since)
{
	merge_walk w = { .since = outage_since };
	fleet_stats *counters = (fleet_stats *)fleet_counters();
	uint64_t actions;

	/* An operator's actions first: a hold placed here after a release
	 * must find the released one gone, a circuit opened here after a
	 * delete must find the deleted one gone. */
	actions = wb_send_all();
	circuit_table_foreach_pinned(cbd.table, merge_visit, &w);
	counters->merged += w.sent;
	if (w.sent > 0 || actions > 0)
		log_info("fleet: wrote back %llu circuits that opened or were held and %llu "
			 "releases, deletes or forced states made while redis was away",
		    (unsigned long long)w.sent, (unsigned long long)actions);
}

bool
op_fleet_start(void)
{
	return fleet_start(event_apply, recover);
}

/* --- the op table's fleet column --- */

const op_fleet_path op_fleet_get = { "get", NULL, reply_get, false, WB_NONE, false };
const op_fleet_path op_fleet_record_success = { "success", NULL, NULL, true, WB_NONE, false };
const op_fleet_path op_fleet_record_failure = { "failure", NULL, NULL, true, WB_NONE, false };
const op_fleet_path op_fleet_record = { NULL, args_record, NULL, true, WB_NONE, false };
const op_fleet_path op_fleet_allow = { "allow", args_token, reply_allow, true, WB_NONE, false };
const op_fleet_path op_fleet_acquire_slot = { "acquire_slot", args_token, reply_acquire_slot, true,
	WB_NONE, false };
const op_fleet_path op_fleet_release_slot = { "release_slot", args_release_slot, reply_release_slot,
	false, WB_NONE, false };
const op_fleet_path op_fleet_cas = { "cas", args_cas, reply_cas, false, WB_NONE, false };
const op_fleet_path op_fleet_set_state = { "set_state", args_set_state, reply_set_state, true,
	WB_SET_STATE, false };
const op_fleet_path op_fleet_delete = { "delete", NULL, reply_delete, false, WB_DELETE, true };
const op_fleet_path op_fleet_release = { "release", NULL, reply_release, false, WB_RELEASE, false };
