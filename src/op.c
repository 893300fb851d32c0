/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op.c — the op table and the dispatcher: decode the line, check the
 * envelope, the op, admin rights, required members, name and ctx; resolve
 * the circuit's own policy (protocol 2, §1) and report where the request
 * disagrees with it; then call the op's handler and append its reply.
 * Counts requests and errors.
 */
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include <uthash.h>

#include "conf.h"
#include "fleet.h"
#include "housekeeping.h"
#include "log-limit.h"
#include "log.h"
#include "op.h"
#include "server.h"
#include "stats.h"
#include "watch.h"

static const char *const need_name[] = { "name", NULL };
static const char *const need_cas[] = { "name", "from", "to", NULL };
static const char *const need_state[] = { "name", "state", NULL };
static const char *const need_token[] = { "name", "token", NULL };
static const char *const need_outcome[] = { "name", "outcome", NULL };

/* Every op of protocol 2. */
static const op_entry ops[] = {
	{ "hello", op_hello, OP_REPLIES, NULL },
	{ "get", op_get, OP_NAME | OP_CTX | OP_FLEET | OP_FLAT, need_name },
	{ "record_success", op_record_success, OP_WRITE | OP_NAME | OP_CTX | OP_FLEET | OP_FLAT,
	    need_name },
	{ "record_failure", op_record_failure, OP_WRITE | OP_NAME | OP_CTX | OP_FLEET | OP_FLAT,
	    need_name },
	{ "cas", op_cas, OP_WRITE | OP_NAME | OP_CTX | OP_FLEET, need_cas },
	{ "set_state", op_set_state, OP_ADMIN | OP_WRITE | OP_NAME | OP_CTX | OP_FLEET,
	    need_state },
	{ "acquire_slot", op_acquire_slot, OP_WRITE | OP_NAME | OP_CTX | OP_FLEET, need_name },
	{ "release_slot", op_release_slot, OP_NAME | OP_CTX | OP_FLEET, need_token },
	{ "delete", op_delete, OP_ADMIN | OP_NAME | OP_FLEET, need_name },
	{ "release", op_release, OP_ADMIN | OP_NAME | OP_CTX | OP_FLEET, need_name },
	{ "allow", op_allow, OP_WRITE | OP_NAME | OP_CTX | OP_FLEET | OP_FLAT, need_name },
	{ "record", op_record, OP_WRITE | OP_NAME | OP_CTX | OP_FLEET | OP_FLAT, need_outcome },
	{ "list", op_list, OP_CTX | OP_REPLIES, NULL },
	{ "stats", op_stats, OP_REPLIES, NULL },
	{ "watch", op_watch, OP_REPLIES, NULL },
	{ "unwatch", op_unwatch, OP_REPLIES, NULL },
	{ "metrics", op_metrics, OP_REPLIES, NULL },
};

#define OP_COUNT (sizeof ops / sizeof ops[0])

_Static_assert(OP_COUNT <= STATS_OP_MAX, "raise STATS_OP_MAX");

static const char *op_name_list[OP_COUNT];

size_t
op_count(void)
{
	return OP_COUNT;
}

const op_entry *
op_at(size_t i)
{
	return i < OP_COUNT ? &ops[i] : NULL;
}

const char *const *
op_names(void)
{
	for (size_t i = 0; i < OP_COUNT; i++)
		op_name_list[i] = ops[i].name;
	return op_name_list;
}

/* The row of op `text` (len bytes), or NULL. */
static const op_entry *
op_find(const char *text, size_t len)
{
	for (size_t i = 0; i < OP_COUNT; i++) {
		const char *name = ops[i].name;

		/* The first byte first: most rows differ there. (text holds no
		 * NUL: the readers refuse one.) */
		if (len > 0 && name[0] == text[0] && strncmp(name, text, len) == 0 &&
		    name[len] == '\0')
			return &ops[i];
	}
	return NULL;
}

void
op_reply_error(server_client *c, proto_code code, const char *fmt, ...)
{
	proto_error err = { .code = code };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err.message, sizeof err.message, fmt, ap);
	va_end(ap);
	stats.errors[code]++;
	server_client_reply(c, proto_reply_error(NULL, &err));
}

void
op_log_change(const char *name, const ct_change *change)
{
	char quoted[LOG_QUOTE_SIZE];

	if (change->reason == CB_REASON_NONE)
		return;
	/* States and holds are what the state file keeps and watchers see. */
	housekeeping_state_changed();
	watch_changed(name, change);
	if (change->from == change->to)
		return;
	stats.transitions++;
	if (!log_limit_allow(name))
		return;
	{
		const log_field fields[] = { { "circuit", name, false },
			{ "from", breaker_state_name(change->from), false },
			{ "to", breaker_state_name(change->to), false },
			{ "reason", breaker_reason_text(change->reason), false } };

		log_fields(LOG_LEVEL_INFO, fields, 4, "circuit %s: %s -> %s (%s)",
		    log_quote(name, quoted, sizeof quoted), fields[1].value, fields[2].value,
		    fields[3].value);
	}
}

void
op_log_hold(const char *name, const ct_change *change, const ct_view *view)
{
	char quoted[LOG_QUOTE_SIZE];

	if (change->reason == CB_REASON_NONE || change->from != change->to)
		return;
	{
		const log_field fields[] = { { "circuit", name, false },
			{ "hold", view->hold.held ? "held" : "hold ended", false },
			{ "reason", breaker_reason_text(change->reason), false } };

		log_fields(LOG_LEVEL_INFO, fields, 3, "circuit %s: %s (%s)",
		    log_quote(name, quoted, sizeof quoted), fields[1].value, fields[2].value);
	}
}

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
		    (long long)srv.conf.max_circuits);
	case CT_SLOTS:
		stats_limit_hit(STATS_LIMIT_SLOTS);
		return proto_fail(&call->err, PROTO_CAPACITY,
		    "max_slots (%lld) reached: no slot can be taken now",
		    (long long)srv.conf.max_slots);
	case CT_NOMEM:
		break;
	}
	return proto_fail(&call->err, PROTO_INTERNAL, "%s", circuit_table_status_text(status));
}

json_t *
op_hold_json(const ct_hold *hold)
{
	if (!hold->held)
		return json_null();
	return json_pack("{s:s, s:I, s:s, s:o, s:I, s:o}", "state", breaker_state_name(hold->state),
	    "by_uid", (json_int_t)hold->by_uid, "by_user", hold->by_user, "reason",
	    hold->reason != NULL ? json_string(hold->reason) : json_null(), "since",
	    (json_int_t)hold->since, "until",
	    hold->until != CB_TIME_NONE ? json_integer(hold->until) : json_null());
}

bool
op_hold_from_json(const json_t *hold, ct_hold *out, proto_error *err)
{
	memset(out, 0, sizeof *out);
	out->until = CB_TIME_NONE;
	if (hold == NULL || json_is_null(hold))
		return true;
	if (!json_is_object(hold))
		return proto_fail(err, PROTO_BAD_REQUEST, "hold must be an object or null");
	out->held = true;
	if (!proto_get_state(hold, "state", true, &out->state, NULL, err) ||
	    !proto_get_int(hold, "by_uid", -1, INT64_C(4294967295), true, &out->by_uid, NULL,
		err) ||
	    !proto_get_text(hold, "by_user", true, &out->by_user, NULL, err) ||
	    !proto_get_text(hold, "reason", false, &out->reason, NULL, err) ||
	    !proto_get_int(hold, "since", CB_TIME_MIN, CB_TIME_MAX, true, &out->since, NULL, err) ||
	    !proto_get_int(hold, "until", CB_TIME_MIN, CB_TIME_MAX, false, &out->until, NULL, err))
		return false;
	if (out->state == CB_STATE_HALF_OPEN)
		return proto_fail(err, PROTO_BAD_REQUEST, "hold.state must be open or closed");
	return true;
}

/* A count member (>= 0) into *out; false when absent or not one. */
static bool
count_from_json(const json_t *obj, const char *key, uint64_t *out)
{
	const json_t *v = json_object_get(obj, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

bool
op_totals_from_json(const json_t *totals, ct_totals *out, proto_error *err)
{
	if (!json_is_object(totals) || !count_from_json(totals, "successes", &out->successes) ||
	    !count_from_json(totals, "failures", &out->failures) ||
	    !count_from_json(totals, "ignored", &out->ignored) ||
	    !count_from_json(totals, "slow", &out->slow) ||
	    !count_from_json(totals, "rejected", &out->rejected))
		return proto_fail(err, PROTO_BAD_REQUEST, "totals must hold five counts");
	return true;
}

json_t *
op_totals_json(const ct_totals *t)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I}", "successes", (json_int_t)t->successes,
	    "failures", (json_int_t)t->failures, "ignored", (json_int_t)t->ignored, "slow",
	    (json_int_t)t->slow, "rejected", (json_int_t)t->rejected);
}

json_t *
op_window_json(const ct_view *view)
{
	cb_window_counts w = view->has_window ? view->window : (cb_window_counts){ 0 };
	double calls = w.calls;

	return json_pack("{s:i, s:i, s:i, s:f, s:f}", "calls", (int)w.calls, "failures",
	    (int)w.failures, "slow", (int)w.slow, "failure_rate",
	    w.calls > 0 ? w.failures * 100.0 / calls : 0.0, "slow_call_rate",
	    w.calls > 0 ? w.slow * 100.0 / calls : 0.0);
}

json_t *
op_snapshot_json(const char *name, const ct_view *view, const cb_policy *policy, const char *preset,
    const proto_policy_sources *sources, int64_t now)
{
	json_t *obj =
	    proto_snapshot_to_json(name, &view->snap, circuit_table_retry_after(view, policy, now));

	if (obj == NULL)
		return NULL;
	if (json_object_set_new(obj, "policy", proto_policy_to_json(policy, preset, sources)) !=
		0 ||
	    json_object_set_new(obj, "hold", op_hold_json(&view->hold)) != 0 ||
	    json_object_set_new(obj, "totals", op_totals_json(&view->totals)) != 0 ||
	    json_object_set_new(obj, "current_break_ms",
		json_integer(breaker_break_ms(&view->snap, policy))) != 0 ||
	    (policy->trip == CB_TRIP_RATE &&
		json_object_set_new(obj, "window", op_window_json(view)) != 0) ||
	    (policy->min_reporters > 1 &&
		json_object_set_new(obj, "reporters",
		    json_integer(view->reporters != NULL ? breaker_reporters_count(view->reporters,
							       now, policy->reporter_window_ms)
							 : 0)) != 0)) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

bool
op_reply_snapshot(op_call *call, const char *member, const ct_view *view)
{
	/* Encoded straight as text (encode.c): the reply's largest member. */
	ENC_LIT(&call->tail, ",\"");
	enc_puts(&call->tail, member);
	ENC_LIT(&call->tail, "\":");
	encode_snapshot(&call->tail, call->name, view, &call->policy, call->preset, &call->sources,
	    call->now);
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
	size_t half = (size_t)srv.conf.max_output_bytes / 2;

	*s = (op_snapshots){ .now = call->now };
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
	conf_policy(&srv.conf, name, view->declared, &policy, &sources, &preset);
	/* Encoded straight as text (encode.c), a comma before all but the
	 * first: the entry's exact cost is what the buffer grew by. */
	if (s->count > 0)
		enc_put(&s->items, ",", 1);
	encode_snapshot(&s->items, name, view, &policy, preset, &sources, s->now);
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
	const proto_ctx *declared = circuit_table_use(srv.table, call->name, call->clock, &stored);
	char quoted[LOG_QUOTE_SIZE];

	call->stored = stored;
	call->declared = stored ? declared : &call->ctx;
	conf_policy(&srv.conf, call->name, call->declared, &call->policy, &call->sources,
	    &call->preset);
	call->conflicts = proto_policy_conflicts(&call->ctx, &call->policy, call->preset);
	if (call->conflicts == 0)
		return;
	stats.policy_conflicts++;
	if (warn_first(call->client->id, call->name))
		log_warning("circuit %s: connection %llu (pid %ld) declares a policy that differs "
			    "from the circuit's own; the circuit keeps its policy (see "
			    "policy_conflict in the reply)",
		    log_quote(call->name, quoted, sizeof quoted),
		    (unsigned long long)call->client->id, (long)call->client->pid);
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

/* The checks every op shares, then the handler. False with call->err. */
static bool
op_run(op_call *call, const op_entry *op)
{
	if ((op->flags & OP_ADMIN) && !server_client_is_admin(call->client))
		return proto_fail(&call->err, PROTO_FORBIDDEN,
		    "%s is an admin op and uid %ld is not an admin (cbd's admin_users and "
		    "admin_groups name the admins; root and cbd's own user always are)",
		    op->name, (long)call->client->uid);
	for (const char *const *m = op->required; m != NULL && *m != NULL; m++) {
		if (!proto_req_has(&call->req, *m))
			return proto_fail(&call->err, PROTO_BAD_REQUEST, "%s is required", *m);
	}
	if ((op->flags & OP_NAME) && !proto_req_name(&call->req, "name", &call->name, &call->err))
		return false;
	call->clock = clock_realtime_ms();
	if (op->flags & OP_CTX) {
		if (!proto_req_ctx(&call->req, &call->ctx, &call->err))
			return false;
		call->now = proto_ctx_has(&call->ctx, PROTO_CTX_NOW)
		    ? call->ctx.value[PROTO_CTX_NOW]
		    : call->clock;
		if (proto_ctx_has(&call->ctx, PROTO_CTX_PRESET) &&
		    conf_preset_find(&srv.conf, call->ctx.preset) == NULL)
			return proto_fail(&call->err, PROTO_BAD_REQUEST,
			    "ctx.preset: no preset named \"%s\"", call->ctx.preset);
		if (call->name != NULL)
			op_resolve_policy(call);
		call->table = (ct_call){ .policy = &call->policy,
			.declared = &call->ctx,
			.now = call->now,
			.clock = call->clock,
			.owner = &call->client->owner,
			.reporter = (int64_t)call->client->pid };
		/* How long the reported call took (slow-call rule). */
		if (!proto_req_int(&call->req, "duration_ms", 0, CB_DURATION_MAX, false,
			&call->table.duration_ms, NULL, &call->err))
			return false;
	}
	/* Fleet mode: the circuit script in Redis answers (op-fleet.c);
	 * while Redis is away, this host's copy does. */
	if ((op->flags & OP_FLEET) && fleet_enabled()) {
		if (fleet_up()) {
			bool answered;

			if (!op_fleet_send(call, &answered))
				return false;
			if (call->pending)
				return true;
			if (answered)
				return op_reply_conflicts(call);
		} else {
			fleet_count_unavailable();
			return op_fleet_local(call) && op_reply_conflicts(call);
		}
	}
	return op->handler(call) && op_reply_conflicts(call);
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
op_finish(op_call *call, bool ok)
{
	server_client *c = call->client;

	if (ok && call->written) {
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
			stats.op_errors[call->op - ops]++;
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
	enc_recycle(&call->tail);
	enc_free(&call->tail_more);
}

void
op_dispatch(server_client *c, const char *line, size_t len)
{
	op_call call = { .client = c, .tail = enc_take() };
	const op_entry *op = NULL;
	json_t *request = NULL, *id = NULL;
	proto_flat flat;
	const char *opname;
	size_t oplen;
	bool ok = false, noreply = false;

	stats.requests++;
	if (!proto_request_read(line, len, &flat, &call.req, &request, &call.err))
		goto reply;
	if (!proto_req_id(&call.req, &id, &call.err) ||
	    !proto_req_text(&call.req, "op", true, &opname, &oplen, &call.err))
		goto reply;
	op = op_find(opname, oplen);
	/* noreply (protocol 2, §6): carried out, nothing written back, not
	 * even an error (counted as usual), except for the ops that exist to
	 * answer. */
	noreply = proto_req_true(&call.req, "noreply") && (op == NULL || !(op->flags & OP_REPLIES));
	if (op == NULL) {
		proto_fail(&call.err, PROTO_UNKNOWN_OP, "unknown op \"%.64s\"", opname);
		goto reply;
	}
	/* Every op but the OP_FLAT ones (and all of them in fleet mode, where
	 * they may be answered later) reads jansson values. */
	if (call.req.flat != NULL && (!(op->flags & OP_FLAT) || fleet_enabled())) {
		request = proto_req_json(&call.req);
		if (request == NULL) {
			proto_fail(&call.err, PROTO_INTERNAL, "out of memory");
			goto reply;
		}
		call.req = (proto_req){ .json = request };
		/* The id a later answer echoes must live as long as the request
		 * it keeps: the one inside it. */
		if (id != NULL) {
			json_decref(id);
			id = json_incref(json_object_get(request, "id"));
		}
	}
	call.request = call.req.json;
	stats.op_requests[op - ops]++;
	if (srv.state == SERVER_STOPPING) {
		proto_fail(&call.err, PROTO_SHUTTING_DOWN, "cbd is shutting down");
		goto reply;
	}
	/* A request answered later (fleet mode) takes these along. */
	call.op = op;
	call.id = id;
	call.noreply = noreply;
	watch_request_begin(c);
	ok = op_run(&call, op);
reply:
	call.op = op;
	call.id = id;
	call.noreply = noreply;
	if (call.pending) {
		/* op-fleet.c answers once Redis has; it holds its own references
		 * (to the request and the id). (Its events are held back again
		 * when it is answered.) */
		watch_request_end(c);
		json_decref(id);
		json_decref(request);
		return;
	}
	op_finish(&call, ok);
	json_decref(id);
	json_decref(request);
}
