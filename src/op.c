/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op.c — the op table and the dispatcher (see op.h): decode the line,
 * check the envelope, the op, admin rights, required members, name and
 * ctx; resolve the circuit's own policy (protocol 2, §1) and report where
 * the request disagrees with it; then call the op's handler (or, in fleet
 * mode, send it to Redis) and append its reply. Counts requests and
 * errors. The only file that names every op's room.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"
#include "daemon.h"
#include "fleet.h"
#include "op-circuit.h"
#include "op-fleet.h"
#include "op-list.h"
#include "op-permit.h"
#include "op-service.h"
#include "op-wait.h"
#include "op.h"
#include "stats.h"

/* Required members (checked in proto_member's order: name first). */
#define NEED(m) (UINT32_C(1) << PROTO_MEMBER_##m)
#define NEED_NAME NEED(NAME)
#define NEED_CAS (NEED(NAME) | NEED(FROM) | NEED(TO))
#define NEED_STATE (NEED(NAME) | NEED(STATE))
#define NEED_TOKEN (NEED(NAME) | NEED(TOKEN))
#define NEED_OUTCOME (NEED(NAME) | NEED(OUTCOME))

/* Every op of protocol 2: name, handler, flags, required members, and
 * fleet mode's path through the circuit script (NULL: answered here). */
static const op_entry ops[] = {
	{ "hello", op_hello, OP_REPLIES, 0, NULL },
	{ "get", op_get, OP_NAME | OP_CTX | OP_FLAT | OP_POLICY | OP_DIRECT, NEED_NAME,
	    &op_fleet_get },
	{ "record_success", op_record_success, OP_WRITE | OP_NAME | OP_CTX | OP_FLAT | OP_DIRECT,
	    NEED_NAME, &op_fleet_record_success },
	{ "record_failure", op_record_failure, OP_WRITE | OP_NAME | OP_CTX | OP_FLAT | OP_DIRECT,
	    NEED_NAME, &op_fleet_record_failure },
	{ "cas", op_cas, OP_WRITE | OP_NAME | OP_CTX, NEED_CAS, &op_fleet_cas },
	{ "set_state", op_set_state, OP_ADMIN | OP_WRITE | OP_NAME | OP_CTX, NEED_STATE,
	    &op_fleet_set_state },
	{ "acquire_slot", op_acquire_slot, OP_WRITE | OP_NAME | OP_CTX, NEED_NAME,
	    &op_fleet_acquire_slot },
	{ "release_slot", op_release_slot, OP_NAME | OP_CTX, NEED_TOKEN, &op_fleet_release_slot },
	{ "delete", op_delete, OP_ADMIN | OP_NAME, NEED_NAME, &op_fleet_delete },
	{ "release", op_release, OP_ADMIN | OP_NAME | OP_CTX, NEED_NAME, &op_fleet_release },
	{ "allow", op_allow, OP_WRITE | OP_NAME | OP_CTX | OP_FLAT | OP_DIRECT, NEED_NAME,
	    &op_fleet_allow },
	{ "record", op_record, OP_WRITE | OP_NAME | OP_CTX | OP_FLAT | OP_DIRECT, NEED_OUTCOME,
	    &op_fleet_record },
	{ "list", op_list, OP_CTX | OP_REPLIES, 0, NULL },
	{ "stats", op_stats, OP_REPLIES, 0, NULL },
	{ "watch", op_watch, OP_REPLIES, 0, NULL },
	{ "unwatch", op_unwatch, OP_REPLIES, 0, NULL },
	{ "metrics", op_metrics, OP_REPLIES, 0, NULL },
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

/* The ops by name: a small open-addressed table (filled on first use),
 * hashed on the length and the first and last bytes (which tell every
 * row apart): a request finds its op in a probe or two and one memcmp,
 * not a search of the table in order. */
#define OP_SLOTS 64 /* a power of two, well above OP_COUNT */
_Static_assert(OP_COUNT < OP_SLOTS / 2, "raise OP_SLOTS");

static struct {
	uint8_t len; /* 0: empty */
	uint8_t row;
} op_slot[OP_SLOTS];

static inline unsigned
op_hash(const char *text, size_t len)
{
	return ((unsigned)len * 7u + (unsigned char)text[0] * 3u +
		   (unsigned char)text[len - 1] * 5u) &
	    (OP_SLOTS - 1);
}

/* The row of op `text` (len bytes, len > 0), or NULL. */
static const op_entry *
op_find(const char *text, size_t len)
{
	if (op_slot[op_hash(ops[0].name, strlen(ops[0].name))].len == 0) {
		for (size_t i = 0; i < OP_COUNT; i++) {
			size_t n = strlen(ops[i].name);
			unsigned h = op_hash(ops[i].name, n);

			while (op_slot[h].len != 0)
				h = (h + 1) & (OP_SLOTS - 1);
			op_slot[h].len = (uint8_t)n;
			op_slot[h].row = (uint8_t)i;
		}
	}
	if (len == 0 || len > UINT8_MAX)
		return NULL;
	for (unsigned h = op_hash(text, len); op_slot[h].len != 0; h = (h + 1) & (OP_SLOTS - 1)) {
		const op_entry *op = &ops[op_slot[h].row];

		if (op_slot[h].len == len && memcmp(op->name, text, len) == 0)
			return op;
	}
	return NULL;
}

/* Where op_call's members after its ctx begin. */
#define CALL_AFTER_CTX (offsetof(op_call, ctx) + sizeof(proto_ctx))
_Static_assert(CALL_AFTER_CTX <= offsetof(op_call, err.message), "op_call's order");

/* The checks every op shares, then the handler. False with call->err. */
static bool
op_run(op_call *call, const op_entry *op)
{
	if ((op->flags & OP_ADMIN) && !server_client_is_admin(call->client))
		return proto_fail(&call->err, PROTO_FORBIDDEN,
		    "%s is an admin op and uid %ld is not an admin (cbd's admin_users and "
		    "admin_groups name the admins; root and cbd's own user always are)",
		    op->name, (long)call->client->uid);
	for (uint32_t need = op->required; need != 0; need &= need - 1) {
		proto_member m = (proto_member)__builtin_ctz(need);

		if (!proto_req_has(&call->req, m))
			return proto_fail(&call->err, PROTO_BAD_REQUEST, "%s is required",
			    proto_member_name(m));
	}
	if ((op->flags & OP_NAME) &&
	    !proto_req_name(&call->req, PROTO_MEMBER_NAME, &call->name, &call->err))
		return false;
	call->clock = clock_realtime_ms();
	if (op->flags & OP_CTX) {
		if (!proto_req_ctx(&call->req, &call->ctx, &call->err))
			return false;
		call->now = proto_ctx_has(&call->ctx, PROTO_CTX_NOW)
		    ? call->ctx.value[PROTO_CTX_NOW]
		    : call->clock;
		if (proto_ctx_has(&call->ctx, PROTO_CTX_PRESET) &&
		    conf_preset_find(&cbd.conf, call->ctx.preset) == NULL)
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
		if (!proto_req_int(&call->req, PROTO_MEMBER_DURATION_MS, 0, CB_DURATION_MAX, false,
			&call->table.duration_ms, NULL, &call->err))
			return false;
	} else {
		memset(&call->ctx, 0, sizeof call->ctx); /* (op_dispatch leaves it) */
	}
	/* Fleet mode: the circuit script in Redis answers (op-fleet.c);
	 * while Redis is away, this host's copy does. */
	if (op->fleet != NULL && fleet_enabled()) {
		call->tail = enc_take();
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
	/* The reply straight into the connection's output, where the
	 * handler writes it in order (its conflicts are jansson members). */
	if ((op->flags & OP_DIRECT) && !call->noreply && call->conflicts == 0 && !fleet_enabled())
		op_reply_direct(call);
	else if (call->tail.buf == NULL && !call->noreply) /* (noreply: none is made) */
		call->tail = enc_take();
	/* A request answered later (a waiting allow) reports its conflicts
	 * then. */
	return op->handler(call) && (call->pending || op_reply_conflicts(call));
}

bool
op_conn_step(server_client *c, bool paced)
{
	return op_list_continue(c, paced) && op_watch_continue(c, paced);
}

void
op_conn_closed(server_client *c)
{
	op_wait_client_closed(c);
	if (c->slot == NULL)
		return;
	op_fleet_client_closed(c);
	op_list_client_closed(c);
	op_watch_client_closed(c);
	free(c->slot);
	c->slot = NULL;
}

void
op_dispatch(server_client *c, const char *line, size_t len)
{
	op_call call;
	const op_entry *op = NULL;
	json_t *request = NULL, *id = NULL;
	proto_flat flat;
	const char *opname;
	size_t oplen;
	bool ok = false, noreply = false;

	/* Zero but the error's message (written by proto_fail, read only
	 * after it): a fifth of the struct, and the ctx, a third of the rest
	 * (op_run clears it: proto_req_ctx does for the OP_CTX ops, and
	 * nothing reads it before). (Its tail is taken by op_run, or begun
	 * in c's output.) */
	memset(&call, 0, offsetof(op_call, ctx));
	memset((char *)&call + CALL_AFTER_CTX, 0, offsetof(op_call, err.message) - CALL_AFTER_CTX);
	call.client = c;
	stats.requests++;
	if (!proto_request_read(line, len, &flat, &call.req, &request, &call.err))
		goto reply;
	if (!proto_req_id(&call.req, &id, &call.err) ||
	    !proto_req_text(&call.req, PROTO_MEMBER_OP, true, &opname, &oplen, &call.err))
		goto reply;
	op = op_find(opname, oplen);
	/* noreply (protocol 2, §6): carried out, nothing written back, not
	 * even an error (counted as usual), except for the ops that exist to
	 * answer. */
	noreply = proto_req_true(&call.req, PROTO_MEMBER_NOREPLY) &&
	    (op == NULL || !(op->flags & OP_REPLIES));
	if (op == NULL) {
		proto_fail(&call.err, PROTO_UNKNOWN_OP, "unknown op \"%.64s\"", opname);
		goto reply;
	}
	if (!proto_req_bool(&call.req, PROTO_MEMBER_POLICY, (op->flags & OP_POLICY) != 0,
		&call.with_policy, &call.err))
		goto reply;
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
	if (cbd.state == DAEMON_STOPPING) {
		proto_fail(&call.err, PROTO_SHUTTING_DOWN, "cbd is shutting down");
		goto reply;
	}
	/* A request answered later (fleet mode) takes these along. */
	call.op = op;
	call.op_index = (unsigned)(op - ops);
	call.id = id;
	call.noreply = noreply;
	op_begin(c);
	ok = op_run(&call, op);
reply:
	call.op = op;
	call.op_index = op != NULL ? (unsigned)(op - ops) : 0;
	call.id = id;
	call.noreply = noreply;
	if (call.pending) {
		op_reply_direct_cancel(&call); /* (never direct: answered later) */
		/* op-fleet.c answers once Redis has; it holds its own references
		 * (to the request and the id). (Its events are held back again
		 * when it is answered.) */
		op_suspend(c);
		json_decref(id);
		json_decref(request);
		return;
	}
	op_finish(&call, ok);
	json_decref(id);
	json_decref(request);
}
