/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-fleet.c — the circuit ops in fleet mode (backend = redis): each
 * request becomes one call of the circuit script (src/fleet.lua) through
 * fleet.c, as its row of the op table's fleet column says; the script's
 * reply answers the request and refreshes this host's copy of the circuit
 * (fleet-copy.c). While Redis is away this host's copy answers and an
 * operator's action is remembered for the write-back (fleet-sync.c, which
 * also takes other cbds' events).
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

#include "daemon.h"
#include "events.h"
#include "fleet-copy.h"
#include "fleet-fold.h"
#include "fleet-sync.h"
#include "fleet.h"
#include "log.h"
#include "op-fleet.h"
#include "op-wait.h"
#include "stats.h"

/* Calls of one request again after the script said the circuit was
 * created with another policy (another cbd created it meanwhile). */
#define FLEET_MISMATCH_RETRIES 2

/* A permit or slot this connection holds in Redis: given back when the
 * connection closes (a dead host's go by their ttl). */
typedef struct op_fleet_slot {
	struct op_fleet_slot *next;
	bool pinned; /* its circuit's copy is pinned for it (never reclaimed) */
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
	uint64_t stamp; /* fleet_seq() before its last script call */
	int retries;
	char *declared_text; /* the policy the circuit was created with */
	proto_ctx declared; /* parsed from it after a mismatch */
	char token[CT_TOKEN_SIZE]; /* allow, acquire_slot: the token offered */
	int64_t wait_ms; /* allow: how long it may wait for a ticket here */
	bool released_here; /* release_slot: a ticket of this host's went back */
	bool busy; /* counted in its circuit's busy entry */
	/* Waiting for room in Redis (FLEET_INFLIGHT_MAX): its first call's
	 * arguments, and the next request waiting. */
	json_t *queued_args;
	struct op_pending *queue_next;
	/* Its call carries a fold of outcomes (it is the fold's first): the
	 * fold's answer goes to each of them (fold_done). */
	struct op_fold *fold;
} op_pending;

/* --- coalesced outcomes (issue 24) ---
 * The outcomes of one circuit (success, failure, ignore, rejected; not a
 * record with a permit) that arrive while a script call of this host for
 * the circuit is in flight, or within fleet_coalesce_ms of the first, wait
 * in a fold and go to Redis in one call of the script's "outcomes" op,
 * which applies them one by one in arrival order (fleet-fold.h). A fold
 * goes when its window has passed (at once for a failure: it may trip)
 * and no call of this host for the circuit is in flight; at once when
 * another request of the circuit arrives (requests take effect in the
 * order this host read them), when FLEET_FOLD_MAX outcomes are in, or
 * when one arrives that the fold cannot carry (another policy, declared
 * or now). Each outcome's request is answered from the script's answer
 * for it; Redis away, each is answered from this host's copy, as alone. */
typedef struct op_fold_member {
	op_pending *p;
	fleet_fold_item item;
	fleet_fold_place place;
	char reporter[FLEET_ORIGIN_SIZE + 24];
} op_fold_member;

typedef struct op_fold {
	char *name;
	json_t *first_extra; /* the first's own members (a fold of one goes as it) */
	const char *first_op; /* the first's own script op */
	op_fold_member *m;
	size_t n, cap;
	struct event *timer; /* its window (fleet_coalesce_ms) */
	bool due; /* its window has passed (or a failure is in) */
	bool failures; /* a failure is in */
} op_fold;

/* This host's script calls in flight per circuit, and its fold waiting. */
typedef struct circuit_calls {
	UT_hash_handle hh;
	unsigned sent;
	op_fold *fold;
	char name[];
} circuit_calls;

static circuit_calls *calls_by_name;

static uint64_t token_counter;

/* Requests of this host on one circuit that Redis has not answered yet
 * (sent or waiting for room): while there is one, an allow or get of the
 * circuit is not answered from the copy, so that this host's requests
 * take effect in the order it read them (as when all go to Redis on its
 * one script connection). */
typedef struct busy_entry {
	UT_hash_handle hh;
	unsigned count;
	char name[];
} busy_entry;

static busy_entry *busy;

/* Count one more request of this host on name in Redis; false when not
 * counted (out of memory: the copy may answer sooner). */
static bool
busy_inc(const char *name)
{
	size_t len = strlen(name);
	busy_entry *e;

	HASH_FIND(hh, busy, name, len, e);
	if (e == NULL) {
		e = calloc(1, sizeof *e + len + 1);
		if (e == NULL)
			return false;
		memcpy(e->name, name, len + 1);
		HASH_ADD_KEYPTR(hh, busy, e->name, len, e);
	}
	e->count++;
	return true;
}

static void
busy_dec(const char *name)
{
	busy_entry *e;

	HASH_FIND(hh, busy, name, strlen(name), e);
	if (e != NULL && --e->count == 0) {
		HASH_DEL(busy, e);
		free(e);
	}
}

static void
busy_add(op_pending *p)
{
	p->busy = busy_inc(p->call.name);
}

static void
busy_drop(op_pending *p)
{
	if (p->busy)
		busy_dec(p->call.name);
	p->busy = false;
}

static unsigned
busy_count(const char *name)
{
	busy_entry *e;

	HASH_FIND(hh, busy, name, strlen(name), e);
	return e != NULL ? e->count : 0;
}

static bool
busy_with(const char *name)
{
	busy_entry *e;

	HASH_FIND(hh, busy, name, strlen(name), e);
	return e != NULL;
}

/* Requests waiting for room in Redis, host-wide, oldest first (each
 * connection has one at most: it reads no further line meanwhile). */
static struct {
	op_pending *head, *tail;
} queue;

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

/* This host's calls of circuit name (create: made when missing; NULL:
 * none, or out of memory). */
static circuit_calls *
calls_find(const char *name, bool create)
{
	size_t len = strlen(name);
	circuit_calls *e;

	HASH_FIND(hh, calls_by_name, name, len, e);
	if (e == NULL && create) {
		e = calloc(1, sizeof *e + len + 1);
		if (e == NULL)
			return NULL;
		memcpy(e->name, name, len + 1);
		HASH_ADD_KEYPTR(hh, calls_by_name, e->name, len, e);
	}
	return e;
}

/* Forget e when it has no call in flight and no fold. */
static void
calls_tidy(circuit_calls *e)
{
	if (e != NULL && e->sent == 0 && e->fold == NULL) {
		HASH_DEL(calls_by_name, e);
		free(e);
	}
}

/* A script call of a request on name went out. */
static void
calls_sent(const char *name)
{
	circuit_calls *e = calls_find(name, true);

	if (e != NULL)
		e->sent++;
}

/* The arguments of a script call for p: the common members and extra
 * (may be NULL). NULL: out of memory. */
static json_t *
pending_args(op_pending *p, json_t *extra)
{
	json_t *args = args_common(p);

	if (args == NULL || (extra != NULL && json_object_update(args, extra) != 0)) {
		json_decref(args);
		return NULL;
	}
	return args;
}

/* One script call for p with args (borrowed). False when not sent. */
static bool
pending_send(op_pending *p, const char *script_op, json_t *args)
{
	bool ok;

	p->stamp = fleet_seq();
	ok = fleet_call_script(script_op, p->call.name, args, pending_done, p) != NULL;

	p->in_flight += ok;
	if (ok)
		calls_sent(p->call.name);
	return ok;
}

/* One script call for p. False when it could not be sent. */
static bool
pending_call(op_pending *p, const char *script_op, json_t *extra)
{
	json_t *args = pending_args(p, extra);
	bool ok = args != NULL && pending_send(p, script_op, args);

	json_decref(args);
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
	 * when it returns (FLEET_WB_NONE: not one). */
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
	int64_t count = 1;
	bool has_count = false;

	if (!proto_get_text(call->request, "outcome", true, &text, NULL, &call->err))
		return *bad = true, false;
	if (strcmp(text, "success") != 0 && strcmp(text, "failure") != 0 &&
	    strcmp(text, "ignore") != 0 && strcmp(text, "rejected") != 0) {
		proto_fail(&call->err, PROTO_BAD_REQUEST,
		    "outcome must be \"success\", \"failure\", \"ignore\" or \"rejected\"");
		return *bad = true, false;
	}
	p->script_op = text;
	/* rejected's count (protocol 3, §6) and success's, as memory mode
	 * reads them. */
	if (!proto_get_int(call->request, "count", 1,
		strcmp(text, "success") == 0 ? PROTO_SUCCESS_COUNT_MAX : PROTO_REJECTED_COUNT_MAX,
		false, &count, &has_count, &call->err))
		return *bad = true, false;
	if (has_count && strcmp(text, "rejected") != 0 && strcmp(text, "success") != 0) {
		proto_fail(&call->err, PROTO_BAD_REQUEST,
		    "count is only for outcomes \"rejected\" and \"success\"");
		return *bad = true, false;
	}
	if ((strcmp(text, "rejected") == 0 || count > 1) &&
	    json_object_set_new(extra, "count", json_integer((json_int_t)count)) != 0)
		return false;
	if (!proto_get_text(call->request, "permit", false, &text, NULL, &call->err))
		return *bad = true, false;
	p->permit_next = text != NULL;
	/* A ticket is this host's (protocol 3, §2): it goes back here, and
	 * a waiter may take it. */
	if (text != NULL) {
		circuit_table_release_slot(cbd.table, call->name, text, call->now);
		op_wait_kick(call->name);
	}
	return true;
}

/* record_success: its count (successes alike), as memory mode reads it. */
static bool
args_success(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	int64_t count = 1;

	(void)answered;
	if (!proto_get_int(p->call.request, "count", 1, PROTO_SUCCESS_COUNT_MAX, false, &count,
		NULL, &p->call.err))
		return *bad = true, false;
	return count == 1 ||
	    json_object_set_new(extra, "count", json_integer((json_int_t)count)) == 0;
}

/* record_failure: a failure is one a request (each may trip). */
static bool
args_failure(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	(void)extra;
	(void)answered;
	if (json_object_get(p->call.request, "count") != NULL) {
		proto_fail(&p->call.err, PROTO_BAD_REQUEST,
		    "count is only for record_success (failures are one a request)");
		return *bad = true, false;
	}
	return true;
}

/* allow, acquire_slot: the token a slot taken gets. */
static bool
args_token(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	snprintf(p->token, sizeof p->token, "%s-%016" PRIx64, fleet_origin(), ++token_counter);
	return json_object_set_new(extra, "token", json_string(p->token)) == 0;
}

/* allow: this host's members (wait_ms, retry), then the token. */
static bool
args_allow(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	if (!op_wait_members(&p->call, &p->wait_ms))
		return *bad = true, false;
	return args_token(p, extra, bad, answered);
}

static bool
args_release_slot(op_pending *p, json_t *extra, bool *bad, bool *answered)
{
	const char *text;

	if (!proto_get_text(p->call.request, "token", true, &text, NULL, &p->call.err))
		return *bad = true, false;
	p->released_here = circuit_table_release_slot(cbd.table, p->call.name, text, p->call.now);
	op_wait_kick(p->call.name);
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

/* c's blocking bits from its waiting request and requests in flight or
 * waiting for room. */
static void
block_update(server_client *c, const op_conn *oc)
{
	server_client_block(c, SERVER_CLIENT_BLOCK_REPLY,
	    oc->fleet_wait != NULL || oc->wait != NULL);
	server_client_block(c, SERVER_CLIENT_BLOCK_FULL,
	    oc->fleet_inflight >= OP_FLEET_INFLIGHT_MAX || oc->fleet_queued > 0);
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

/* call goes on in p (sent, queued or folded): the dispatcher leaves it
 * pending, the connection keeps it; a reply must keep its place among the
 * connection's replies, so the connection waits for it. A noreply request
 * has none to keep (Redis runs the connection's calls in order all the
 * same). */
static void
pending_hold(op_pending *p, op_call *call)
{
	busy_add(p);
	call->pending = true;
	pending_link(p, call->client);
	if (!call->noreply) {
		op_conn_peek(call->client)->fleet_wait = p;
		block_update(call->client, op_conn_peek(call->client));
	}
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
	busy_drop(p);
	json_decref(p->queued_args);
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

static void queue_drain(void);
static void pending_local(op_pending *p);
static void fold_fail(op_pending *lead);
static void folds_flush_all(void);
static void pending_finish(op_pending *p, bool ok);

/* Does call need room for a copy (max_circuits) before it is sent? Its
 * path says, as memory mode would create the circuit: a cas from closed
 * may create it (one unknown is closed), a cas from another state cannot;
 * an ignored outcome creates nothing. */
static bool
path_needs_room(const op_call *call)
{
	const op_fleet_path *path = call->op->fleet;
	const char *member = path == &op_fleet_cas ? "from"
	    : path == &op_fleet_record             ? "outcome"
						   : NULL;
	const json_t *v = member != NULL ? json_object_get(call->request, member) : NULL;

	if (path == &op_fleet_cas)
		return json_is_string(v) && strcmp(json_string_value(v), "closed") == 0;
	if (path == &op_fleet_record && json_is_string(v) &&
	    strcmp(json_string_value(v), "ignore") == 0)
		return false;
	return path->needs_room;
}

/* Put p (its first call's members in extra) at the end of the queue.
 * False: out of memory (it is sent at once instead). */
static bool
queue_add(op_pending *p, json_t *extra)
{
	p->queued_args = pending_args(p, extra);
	if (p->queued_args == NULL)
		return false;
	p->queue_next = NULL;
	if (queue.tail != NULL)
		queue.tail->queue_next = p;
	else
		queue.head = p;
	queue.tail = p;
	fleet_set_room_hook(queue_drain);
	fleet_count_queued();
	return true;
}

/* Room in Redis, or Redis gone: send the requests waiting, oldest first,
 * while there is room (answer them locally when Redis is away). While
 * Sentinel switches the master there is no room and Redis is not away:
 * they wait, with folds, for the new master (fleet.h, FLEET_SWITCHING). */
static void
queue_drain(void)
{
	/* Redis away: the outcomes waiting in folds are answered from this
	 * host's copy now, as requests waiting for room are. */
	if (!fleet_up())
		folds_flush_all();
	while (queue.head != NULL && (fleet_has_room() || !fleet_up())) {
		op_pending *p = queue.head;
		server_client *c = p->call.client;
		json_t *args = p->queued_args;
		bool sent;

		queue.head = p->queue_next;
		if (queue.head == NULL)
			queue.tail = NULL;
		p->queue_next = NULL;
		p->queued_args = NULL;
		sent = fleet_up() && pending_send(p, p->script_op, args);
		json_decref(args);
		if (c != NULL) {
			op_conn *oc = op_conn_peek(c);
			bool was_blocked = server_client_waiting(c);

			oc->fleet_queued--;
			if (!sent && p->fold != NULL) {
				block_update(c, oc);
				fold_fail(p);
				continue;
			}
			if (!sent) {
				fleet_count_unavailable();
				pending_local(p); /* answers, resumes c */
				continue;
			}
			block_update(c, oc);
			if (was_blocked && !server_client_waiting(c))
				server_client_resume(c);
		} else if (!sent && p->fold != NULL) {
			fold_fail(p);
		} else if (!sent) {
			/* Its connection closed and Redis is away: nothing to
			 * answer, and no copy to change without a connection. */
			fleet_count_unavailable();
			pending_free(p);
		}
	}
}

/* --- folds (see op_fold) --- */

static void
fold_free(op_fold *f)
{
	if (f->timer != NULL)
		event_free(f->timer);
	json_decref(f->first_extra);
	free(f->name);
	free(f->m);
	free(f);
}

/* Send p's call with its members in extra, or queue it for room. False
 * when Redis cannot take it. */
static bool
pending_go(op_pending *p, json_t *extra)
{
	if ((queue.head != NULL || !fleet_has_room()) && queue_add(p, extra)) {
		if (p->call.client != NULL) {
			op_conn *oc = op_conn_peek(p->call.client);

			oc->fleet_queued++;
			block_update(p->call.client, oc);
		}
		return true;
	}
	return pending_call(p, p->script_op, extra);
}

/* Answer one of a fold's requests from this host's copy (Redis away). */
static void
fold_member_local(op_pending *m)
{
	fleet_count_unavailable();
	if (m->call.client != NULL)
		pending_local(m);
	else
		pending_free(m);
}

/* The call of lead's fold could not go: each of its requests is answered
 * from this host's copy, as it would have been alone. */
static void
fold_fail(op_pending *lead)
{
	op_fold *f = lead->fold;

	lead->fold = NULL;
	lead->script_op = f->first_op;
	for (size_t i = 0; i < f->n; i++)
		fold_member_local(f->m[i].p);
	fold_free(f);
}

/* Send e's fold (full: it holds FLEET_FOLD_MAX). A fold of one goes as
 * its request's own call. */
static void
fold_send(circuit_calls *e, bool full)
{
	op_fold *f = e->fold;
	op_pending *lead = f->m[0].p;
	fleet_fold_item *items;
	fleet_fold_place *place;
	json_t *extra;

	e->fold = NULL;
	if (!fleet_up()) {
		/* Redis away (or cbd stopping): each answered from the copy. */
		lead->fold = f;
		fold_fail(lead);
		return;
	}
	if (f->n == 1) {
		extra = f->first_extra;
		f->first_extra = NULL;
		fold_free(f);
		if (!pending_go(lead, extra))
			fold_member_local(lead);
		json_decref(extra);
		return;
	}
	items = malloc(f->n * sizeof *items);
	place = malloc(f->n * sizeof *place);
	for (size_t i = 0; items != NULL && i < f->n; i++) {
		items[i] = f->m[i].item;
		/* f->m moved as it grew: the reporter is read where it is now. */
		items[i].reporter = f->m[i].reporter;
	}
	extra = items != NULL && place != NULL
	    ? fleet_fold_extra(items, f->n, &lead->call.policy, place)
	    : NULL;
	for (size_t i = 0; extra != NULL && i < f->n; i++)
		f->m[i].place = place[i];
	free(items);
	free(place);
	lead->fold = f;
	lead->script_op = "outcomes";
	if (extra == NULL || !pending_go(lead, extra)) {
		json_decref(extra);
		fold_fail(lead);
		return;
	}
	json_decref(extra);
	fleet_count_fold(f->n, full);
	for (size_t i = 1; i < f->n; i++)
		f->m[i].p->in_flight = 1;
}

/* Send name's fold when it may go: full, or its window passed (or a
 * failure is in) and no call of this host for the circuit is in flight;
 * now: whenever it has one (another request of the circuit follows). */
static void
fold_kick(const char *name, bool now)
{
	circuit_calls *e = calls_find(name, false);
	bool full;
	char *copy;

	if (e == NULL || e->fold == NULL)
		return;
	full = e->fold->n >= FLEET_FOLD_MAX;
	if (!full && !now && !(e->fold->due && e->sent == 0))
		return;
	/* name may go with the request that answers (a local answer). */
	copy = strdup(name);
	fold_send(e, full);
	if (copy != NULL)
		calls_tidy(calls_find(copy, false));
	free(copy);
}

static void
fold_timer(evutil_socket_t fd, short what, void *arg)
{
	op_fold *f = arg;

	(void)fd;
	(void)what;
	f->due = true;
	fold_kick(f->name, false);
}

/* Send every fold now (Redis away: they are answered locally). */
static void
folds_flush_all(void)
{
	circuit_calls *e, *tmp;

	HASH_ITER (hh, calls_by_name, e, tmp) {
		if (e->fold != NULL)
			fold_kick(e->name, true);
	}
}

/* A script call of a request on name was answered: a fold waiting for
 * it may go. */
static void
calls_answered(const char *name)
{
	circuit_calls *e = calls_find(name, false);

	if (e == NULL)
		return;
	if (e->sent > 0)
		e->sent--;
	if (e->sent == 0 && e->fold != NULL)
		fold_kick(name, false);
	else
		calls_tidy(e);
}

/* May p's outcome go in the same script call as first's: the same
 * policy as the script reads it (fleet-args.c's 17 members), the same
 * creating policy and the same now (each outcome carries its own
 * reporter and duration)? */
static bool
fold_fits(const op_pending *first, const op_pending *p)
{
	const cb_policy *a = &first->call.policy, *b = &p->call.policy;
	bool now_a = proto_ctx_has(&first->call.ctx, PROTO_CTX_NOW);
	bool now_b = proto_ctx_has(&p->call.ctx, PROTO_CTX_NOW);

	return a->trip == b->trip && a->failure_threshold == b->failure_threshold &&
	    a->success_threshold == b->success_threshold && a->break_ms == b->break_ms &&
	    a->half_open_max == b->half_open_max && a->slot_ttl_ms == b->slot_ttl_ms &&
	    a->max_gap_ms == b->max_gap_ms && a->window == b->window &&
	    a->window_size == b->window_size && a->minimum_calls == b->minimum_calls &&
	    a->failure_rate == b->failure_rate && a->slow_call_ms == b->slow_call_ms &&
	    a->slow_call_rate == b->slow_call_rate && a->min_reporters == b->min_reporters &&
	    a->reporter_window_ms == b->reporter_window_ms &&
	    a->break_backoff == b->break_backoff && a->break_max_ms == b->break_max_ms &&
	    strcmp(first->declared_text, p->declared_text) == 0 && now_a == now_b &&
	    (!now_a || first->call.now == p->call.now);
}

static unsigned busy_count(const char *name);

/* Is every request of this host on name still to reach Redis an outcome
 * waiting in its fold that cannot move the state of a closed circuit
 * under policy (a success, ignore or rejected under the consecutive rule:
 * it resets or counts, never trips)? Then an answer from a closed copy is
 * the one Redis gives after the fold. */
static bool
fold_only_benign(const char *name, const cb_policy *policy)
{
	circuit_calls *e = calls_find(name, false);

	return e != NULL && e->fold != NULL && e->sent == 0 && !e->fold->failures &&
	    policy->trip == CB_TRIP_CONSECUTIVE && busy_count(name) == e->fold->n;
}

/* Put outcome p (its own members in extra) in its circuit's fold, made
 * when there is none; false when it goes alone (not an outcome that
 * folds, Redis away, or nothing to fold it with: no call of the circuit
 * in flight and fleet_coalesce_ms 0). Never sends: fold_kick does, once p
 * is linked. */
static bool
fold_take(op_pending *p, json_t *extra)
{
	const char *op = p->script_op;
	char kind = strcmp(op, "success") == 0 ? 's'
	    : strcmp(op, "failure") == 0       ? 'f'
	    : strcmp(op, "ignore") == 0        ? 'i'
	    : strcmp(op, "rejected") == 0      ? 'r'
					       : '\0';
	circuit_calls *e;
	op_fold_member *m;
	op_fold *f;

	if (kind == '\0' || p->permit_next || !fleet_up())
		return false;
	e = calls_find(p->call.name, false);
	/* Nothing to wait for and nothing to wait with: alone, at once (a
	 * failure and a request that waits for its reply never wait out the
	 * window). */
	if ((e == NULL || (e->sent == 0 && e->fold == NULL)) &&
	    (cbd.conf.fleet_coalesce_ms == 0 || kind == 'f' || !p->call.noreply))
		return false;
	if (e != NULL && e->fold != NULL && !fold_fits(e->fold->m[0].p, p)) {
		/* Another policy, declared or now: that fold goes first. */
		fold_send(e, false);
		e = calls_find(p->call.name, false);
	}
	if (e == NULL)
		e = calls_find(p->call.name, true);
	if (e == NULL)
		return false;
	f = e->fold;
	if (f == NULL) {
		f = calloc(1, sizeof *f);
		if (f == NULL || (f->name = strdup(p->call.name)) == NULL) {
			free(f);
			calls_tidy(e);
			return false;
		}
		f->first_extra = json_incref(extra);
		f->first_op = op;
		if (cbd.conf.fleet_coalesce_ms > 0) {
			struct timeval tv = { (time_t)(cbd.conf.fleet_coalesce_ms / 1000),
				(suseconds_t)(cbd.conf.fleet_coalesce_ms % 1000 * 1000) };

			f->timer = evtimer_new(cbd.base, fold_timer, f);
			if (f->timer == NULL || evtimer_add(f->timer, &tv) != 0)
				f->due = true;
		} else {
			f->due = true;
		}
		e->fold = f;
		/* Told when Redis goes away (queue_drain). */
		fleet_set_room_hook(queue_drain);
	}
	if (f->n == f->cap) {
		size_t cap = f->cap > 0 ? f->cap * 2 : 4;
		op_fold_member *grown = realloc(f->m, cap * sizeof *grown);

		if (grown == NULL) {
			if (f->n == 0) {
				e->fold = NULL;
				fold_free(f);
				calls_tidy(e);
			}
			return false;
		}
		f->m = grown;
		f->cap = cap;
	}
	m = &f->m[f->n++];
	memset(m, 0, sizeof *m);
	m->p = p;
	snprintf(m->reporter, sizeof m->reporter, "%s:%ld", fleet_origin(),
	    p->call.client != NULL ? (long)p->call.client->pid : 0L);
	m->item.kind = kind;
	m->item.value = kind == 'r'         ? json_integer_value(json_object_get(extra, "count"))
	    : p->call.table.duration_ms > 0 ? p->call.table.duration_ms
					    : 0;
	/* A counted success: that many in one run of its own. */
	m->item.count = kind == 's' && json_is_integer(json_object_get(extra, "count"))
	    ? json_integer_value(json_object_get(extra, "count"))
	    : 1;
	m->item.want = !p->call.noreply;
	/* A failure may trip: the fleet learns it as soon as nothing of this
	 * host's is in flight for the circuit; and a request that waits for
	 * its reply does not wait out the window either. */
	if (kind == 'f' || m->item.want)
		f->due = true;
	f->failures = f->failures || kind == 'f';
	return true;
}

/* One of a fold's requests that neither changed the state nor waits for
 * a reply (noreply): it is done, the fold's last answer refreshes the
 * copy. */
static void
fold_quiet(op_pending *m)
{
	m->in_flight--;
	if (m->call.client == NULL) {
		if (m->in_flight == 0)
			pending_free(m);
		return;
	}
	op_begin(m->call.client);
	pending_finish(m, true);
}

static void pending_answer(const json_t *reply, op_pending *p);

/* lead's fold was answered: each of its requests gets the script's answer
 * for its outcome (the circuit as it left it, its change), in order; the
 * last one the circuit after them all. Redis away or a declared mismatch:
 * each gets that answer, as alone (the copy; its own call again). */
static void
fold_done(op_pending *lead, const json_t *reply)
{
	op_fold *f = lead->fold;
	bool whole = reply == NULL || json_is_true(json_object_get(reply, "mismatch"));
	json_t *now = reply != NULL ? json_object_get(reply, "now") : NULL;
	/* lead may be answered (and freed) first, as the fold's first. */
	uint64_t stamp = lead->stamp;
	size_t cursor = 0;

	lead->fold = NULL;
	lead->script_op = f->first_op;
	for (size_t i = 0; i < f->n; i++) {
		op_pending *m = f->m[i].p;
		const json_t *e;
		json_t *one;

		m->stamp = stamp;
		if (whole) {
			pending_answer(reply, m);
			continue;
		}
		e = fleet_fold_answer(reply, f->m[i].place, &cursor);
		if (e == NULL && i + 1 < f->n) {
			fold_quiet(m);
			continue;
		}
		one = json_pack("{s:O?, s:O?, s:O?}", "now", now, "circuit",
		    e != NULL ? json_array_get(e, 2) : json_object_get(reply, "circuit"), "change",
		    e != NULL ? json_array_get(e, 3) : NULL);
		pending_answer(one, m);
		json_decref(one);
	}
	fold_free(f);
}

/* allow and get from this host's copy, without a script call, when its
 * answer is the script's: the copy is fresh (fleet_copy_fresh: no event
 * can have been missed since Redis last said what it is), closed and not
 * held, the policy has no max_concurrent nor retry budget (and allow is
 * not a retry), get's snapshot does not move with the clock (no rate
 * window, no min_reporters), and no request of this host on the circuit
 * is still in Redis or waiting for room (this host's requests take effect
 * in the order it read them); but an allow may pass outcomes waiting in
 * a fold that cannot move a closed circuit (fold_only_benign). Everything
 * else (half_open's slots, open with or without an elapsed break, holds,
 * tickets) is Redis's to answer. False: ask Redis (*bad: call->err). */
static bool
copy_answer(op_call *call, bool *bad)
{
	const cb_policy *policy = &call->policy;
	bool allow = call->op->fleet == &op_fleet_allow;
	int64_t wait_ms;
	ct_change change;
	ct_view view;

	*bad = false;
	if (!allow && call->op->fleet != &op_fleet_get)
		return false;
	if (!call->stored || policy->max_concurrent > 0 || policy->retry_budget_percent >= 0)
		return false;
	if (allow && !op_wait_members(call, &wait_ms))
		return *bad = true, false;
	if (allow ? call->table.retry : policy->trip == CB_TRIP_RATE || policy->min_reporters > 1)
		return false;
	if (!fleet_copy_fresh(call->name) ||
	    (busy_with(call->name) && !(allow && fold_only_benign(call->name, policy))) ||
	    !circuit_table_peek(cbd.table, call->name, &view) ||
	    view.snap.state != CB_STATE_CLOSED || view.hold.held)
		return false;
	fleet_count_copy_answer();
	if (allow) {
		ct_allow a = { .allowed = true, .state = CB_STATE_CLOSED };

		if (!op_reply_allow(call, &a))
			*bad = true;
		return true;
	}
	circuit_table_get(cbd.table, call->name, call->now, &view, &change);
	events_changed(call->name, &change);
	if (json_object_set_new(op_reply(call), "stored", json_boolean(view.stored)) != 0) {
		proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
		return *bad = true, true;
	}
	if (!op_reply_snapshot(call, "snapshot", &view))
		*bad = true;
	return true;
}

bool
op_fleet_send(op_call *call, bool *answered)
{
	op_pending *p;
	json_t *extra;
	bool bad = false, queued;

	*answered = false;
	if (call->client == NULL || call->name == NULL)
		return true; /* this host's copy answers */
	if (copy_answer(call, &bad)) {
		*answered = true;
		return !bad;
	}
	if (bad)
		return false;
	/* max_circuits bounds this host's copies: a circuit it has no copy of
	 * is created only when there is room for one. */
	if (path_needs_room(call) && !call->stored &&
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
	p->declared_text = fleet_copy_declared_text(call->declared);
	extra = p->declared_text != NULL ? args_for_op(p, &bad, answered) : NULL;
	if (extra != NULL && fold_take(p, extra)) {
		/* Folded with the circuit's other outcomes (see op_fold). */
		json_decref(extra);
		pending_hold(p, call);
		fold_kick(p->call.name, false);
		return true;
	}
	/* Any other request of the circuit follows the outcomes folded
	 * before it. */
	if (extra != NULL)
		fold_kick(p->call.name, true);
	/* Redis runs FLEET_INFLIGHT_MAX calls at once for this host: past
	 * it (or behind others waiting) a request waits its turn. */
	queued = extra != NULL && (queue.head != NULL || !fleet_has_room()) && queue_add(p, extra);
	if (extra == NULL || (!queued && !pending_call(p, p->script_op, extra))) {
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
	if (queued)
		op_conn_peek(call->client)->fleet_queued++;
	pending_hold(p, call);
	return true;
}

static bool reply_nomem(op_pending *p);

/* Give back a slot this host took in Redis and will not keep (fire and
 * forget: a slot Redis does not get back goes by its ttl). No
 * "declared": a release never mismatches the policy the circuit was
 * created with (with "" it would, for any circuit created with a ctx). */
static void
give_back_done(const json_t *reply, void *arg)
{
	(void)reply;
	busy_dec(arg);
	free(arg);
}

static void
slot_give_back(const char *name, const char *token)
{
	json_t *args = json_pack("{s:s}", "token", token);
	/* Counted busy: this host's later allow or get of the circuit follows
	 * it (answered from the copy only once it ran). */
	char *copy = strdup(name);

	if (copy != NULL && !busy_inc(copy)) {
		free(copy);
		copy = NULL;
	}
	if (args == NULL ||
	    fleet_call_script("release_slot", name, args, copy != NULL ? give_back_done : NULL,
		copy) == NULL) {
		if (copy != NULL)
			give_back_done(NULL, copy);
	}
	json_decref(args);
}

/* Keep a slot p's connection got, to give it back when the connection
 * closes, its circuit's copy pinned meanwhile. Past max_slots (as in
 * memory mode: capacity, counted) or out of memory it is given back at
 * once and p fails. */
static bool
slot_note(op_pending *p, const char *token)
{
	server_client *c = p->call.client;
	size_t len = strlen(p->call.name);
	op_conn *oc = c != NULL ? op_conn_peek(c) : NULL;
	op_fleet_slot *s;

	if (oc == NULL)
		return true;
	if (stats.fleet_slots >= (uint64_t)cbd.conf.max_slots) {
		slot_give_back(p->call.name, token);
		return op_status(&p->call, CT_SLOTS);
	}
	s = malloc(sizeof *s + len + 1);
	if (s == NULL) {
		slot_give_back(p->call.name, token);
		return reply_nomem(p);
	}
	snprintf(s->token, sizeof s->token, "%s", token);
	memcpy(s->name, p->call.name, len + 1);
	s->pinned = circuit_table_pin(cbd.table, s->name, true);
	s->next = oc->fleet_slots;
	oc->fleet_slots = s;
	stats.fleet_slots++;
	return true;
}

/* Forget slot s (given back), unpin its copy, free it. */
static void
slot_drop(op_fleet_slot *s)
{
	if (s->pinned)
		circuit_table_pin(cbd.table, s->name, false);
	free(s);
	stats.fleet_slots--;
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
			slot_drop(s);
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

/* A waiting allow's attempt (op-wait.h): the fleet's breaker granted it
 * in closed; this host's bulkhead decides. */
static bool
allow_again_local(op_call *call, bool expired, bool *done)
{
	ct_allow allow = { .allowed = true, .state = CB_STATE_CLOSED };

	call->table.again = true;
	*done = true;
	if (!op_status(call,
		circuit_table_allow_local(cbd.table, call->name, &call->table, &allow)))
		return false;
	if (!allow.allowed && allow.reason == CT_REFUSED_CONCURRENCY) {
		if (!expired) {
			*done = false;
			return true;
		}
		circuit_table_count_waited(cbd.table, call->name);
	}
	return op_reply_allow(call, &allow);
}

/* allow: the fleet's breaker answered (Redis); the retry budget and the
 * bulkhead are this host's (protocol 3, §5), judged here after it. */
static bool
reply_allow(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	op_call *call = &p->call;
	const json_t *permit = json_object_get(reply, "permit");
	const cb_policy *policy = &call->policy;
	ct_allow allow = { .allowed = json_is_true(json_object_get(reply, "allowed")),
		.state = view->snap.state };
	bool trial = json_is_object(permit);

	*snapshot = false;
	if (trial) {
		allow.has_permit = true;
		snprintf(allow.permit.token, sizeof allow.permit.token, "%s", p->token);
		allow.permit.expires_at = json_integer_value(json_object_get(permit, "expires_at"));
	}
	if (!allow.allowed) {
		allow.retry_after_ms = json_integer_value(json_object_get(reply, "retry_after_ms"));
		allow.reason = allow.state == CB_STATE_HALF_OPEN ? CT_REFUSED_HALF_OPEN_FULL
		    : view->hold.held                            ? CT_REFUSED_HELD
								 : CT_REFUSED_OPEN;
	}
	if (policy->max_concurrent > 0 || policy->retry_budget_percent >= 0 || call->table.retry) {
		call->table.wait =
		    p->wait_ms > 0 && !call->noreply && allow.state == CB_STATE_CLOSED;
		if (!op_status(call,
			circuit_table_allow_local(cbd.table, call->name, &call->table, &allow))) {
			if (trial)
				slot_give_back(call->name, p->token);
			return false;
		}
		if (trial && !allow.allowed)
			slot_give_back(call->name, p->token); /* refused here: not kept */
		if (call->table.wait && !allow.allowed && allow.reason == CT_REFUSED_CONCURRENCY) {
			/* The waiter answers it (pending_finish leaves it be). */
			if (op_wait_defer(call, p->wait_ms, allow_again_local))
				return true;
			circuit_table_count_waited(cbd.table, call->name);
		}
	}
	if (!op_reply_allow(call, &allow))
		return false;
	return !(trial && allow.allowed) || slot_note(p, p->token);
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
	return !acquired || slot_note(p, p->token);
}

static bool
reply_release_slot(op_pending *p, const json_t *reply, const ct_view *view, bool *snapshot)
{
	op_call *call = &p->call;
	const char *token = json_string_value(json_object_get(call->request, "token"));

	*snapshot = false;
	if (call->client != NULL && token != NULL)
		slot_forget(call->client, token);
	return json_object_set_new(op_reply(call), "released",
		   json_boolean(
		       p->released_here || json_is_true(json_object_get(reply, "released")))) == 0
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

	if (c != NULL && p->call.pending) {
		/* A waiter took the call over (op-wait.c): it answers. */
		op_conn *oc = op_conn_peek(c);

		p->call.tail = (enc_buf){ 0 };
		p->call.tail_more = (enc_buf){ 0 };
		p->call.reply = NULL;
		if (oc->fleet_wait == p)
			oc->fleet_wait = NULL;
		pending_unlink(p, c);
		op_suspend(c);
	} else if (c != NULL) {
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
		else
			/* Answered outside the connection's read: what it wrote
			 * (a noreply request's events) goes out with no reply or
			 * turn to carry it. */
			server_client_write_soon(c);
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

/* What this host alone counts goes in the snapshot of the fleet's circuit
 * (protocol 3, §5): its tickets in flight, the refusals of its bulkhead
 * and retry budget, the retries it granted. */
static void
view_add_local(const char *name, ct_view *view)
{
	ct_view local;

	if (!circuit_table_peek(cbd.table, name, &local))
		return;
	view->in_flight = local.in_flight;
	view->totals.rejected_concurrency = local.totals.rejected_concurrency;
	view->totals.retries = local.totals.retries;
	view->totals.rejected_retry = local.totals.rejected_retry;
}

/* The callback of every request's script call. */
static void
pending_done(const json_t *reply, void *arg)
{
	op_pending *p = arg;

	calls_answered(p->call.name);
	if (p->fold != NULL)
		fold_done(p, reply);
	else
		pending_answer(reply, p);
}

/* p's script call was answered (reply; NULL: Redis did not). */
static void
pending_answer(const json_t *reply, op_pending *p)
{
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
			fleet_copy_apply(call->name, json_object_get(reply, "circuit"),
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
		    !fleet_copy_declared_parse(stored, &p->declared)) {
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
		fleet_copy_apply(call->name, json_object_get(p->first, "circuit"),
		    json_object_get(p->first, "change"), call->now, false, NULL);
	}
	/* Time and retry_after_ms as the fleet's clock says. */
	if (json_is_integer(json_object_get(reply, "now")))
		call->now = json_integer_value(json_object_get(reply, "now"));
	circuit = json_object_get(reply, "circuit");
	if (!fleet_copy_apply_fresh(call->name, circuit, json_object_get(reply, "change"),
		call->now, !call->op->fleet->deletes, &view, p->stamp)) {
		pending_local(p);
		return;
	}
	view_add_local(call->name, &view);
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
		next = s->next;
		slot_give_back(s->name, s->token);
		slot_drop(s);
	}
	oc->fleet_slots = NULL;
}

bool
op_fleet_local(op_call *call)
{
	const op_fleet_path *path = call->op->fleet;
	ct_hold_request req;
	ct_change change;
	ct_view view;
	fleet_wb_known before;
	cb_state state = CB_STATE_CLOSED;
	bool hold = false;
	int64_t now;

	if (call->name == NULL || !fleet_writes_back() || path->writeback == FLEET_WB_NONE)
		return call->op->handler(call);
	/* The circuit before the action (a lapsed hold ends here, as the
	 * action would end it); delete has no ctx, so no ctx.now. */
	now = (call->op->flags & OP_CTX) ? call->now : call->clock;
	circuit_table_get(cbd.table, call->name, now, &view, &change);
	events_changed(call->name, &change);
	fleet_sync_known_read(&before, &view);
	if (!call->op->handler(call))
		return false;
	if (path->writeback == FLEET_WB_SET_STATE &&
	    (!proto_get_state(call->request, "state", true, &state, NULL, &call->err) ||
		!op_hold_members(call, state, &hold, &req)))
		return true; /* answered: it was read once already */
	fleet_sync_note(call->name, (fleet_wb_action)path->writeback, state, now, &before, hold);
	return true;
}

/* --- the op table's fleet column --- */

const op_fleet_path op_fleet_get = { "get", NULL, reply_get, false, FLEET_WB_NONE, false };
const op_fleet_path op_fleet_record_success = { "success", args_success, NULL, true, FLEET_WB_NONE,
	false };
const op_fleet_path op_fleet_record_failure = { "failure", args_failure, NULL, true, FLEET_WB_NONE,
	false };
const op_fleet_path op_fleet_record = { NULL, args_record, NULL, true, FLEET_WB_NONE, false };
const op_fleet_path op_fleet_allow = { "allow", args_allow, reply_allow, true, FLEET_WB_NONE,
	false };
const op_fleet_path op_fleet_acquire_slot = { "acquire_slot", args_token, reply_acquire_slot, true,
	FLEET_WB_NONE, false };
const op_fleet_path op_fleet_release_slot = { "release_slot", args_release_slot, reply_release_slot,
	false, FLEET_WB_NONE, false };
const op_fleet_path op_fleet_cas = { "cas", args_cas, reply_cas, false, FLEET_WB_NONE, false };
const op_fleet_path op_fleet_set_state = { "set_state", args_set_state, reply_set_state, true,
	FLEET_WB_SET_STATE, false };
const op_fleet_path op_fleet_delete = { "delete", NULL, reply_delete, false, FLEET_WB_DELETE,
	true };
const op_fleet_path op_fleet_release = { "release", NULL, reply_release, false, FLEET_WB_RELEASE,
	false };
