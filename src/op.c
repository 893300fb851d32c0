/*
 * op.c — the op table and the dispatcher: decode the line, check the
 * envelope, the op, admin rights, required members, name and ctx, then
 * call the op's handler and append its reply. Counts requests and errors.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"
#include "log-limit.h"
#include "log.h"
#include "op.h"
#include "server.h"
#include "stats.h"

static const char *const need_name[] = { "name", NULL };
static const char *const need_cas[] = { "name", "from", "to", NULL };
static const char *const need_state[] = { "name", "state", NULL };
static const char *const need_token[] = { "name", "token", NULL };
static const char *const need_outcome[] = { "name", "outcome", NULL };

/* Every op of protocol v1. */
static const op_entry ops[] = {
	{ "hello", op_hello, 0, NULL },
	{ "get", op_get, OP_NAME | OP_CTX, need_name },
	{ "record_success", op_record_success, OP_WRITE | OP_NAME | OP_CTX, need_name },
	{ "record_failure", op_record_failure, OP_WRITE | OP_NAME | OP_CTX, need_name },
	{ "cas", op_cas, OP_WRITE | OP_NAME | OP_CTX, need_cas },
	{ "set_state", op_set_state, OP_ADMIN | OP_WRITE | OP_NAME | OP_CTX, need_state },
	{ "acquire_slot", op_acquire_slot, OP_WRITE | OP_NAME | OP_CTX, need_name },
	{ "release_slot", op_release_slot, OP_NAME | OP_CTX, need_token },
	{ "delete", op_delete, OP_ADMIN | OP_NAME, need_name },
	{ "allow", op_allow, OP_WRITE | OP_NAME | OP_CTX, need_name },
	{ "record", op_record, OP_WRITE | OP_NAME | OP_CTX, need_outcome },
	{ "list", op_list, OP_CTX, NULL },
	{ "stats", op_stats, 0, NULL },
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
		if (strlen(ops[i].name) == len && memcmp(ops[i].name, text, len) == 0)
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

	if (change->reason == CB_REASON_NONE || change->from == change->to)
		return;
	stats.transitions++;
	if (!log_limit_allow(name))
		return;
	log_info("circuit %s: %s -> %s (%s)", log_quote(name, quoted, sizeof quoted),
	    breaker_state_name(change->from), breaker_state_name(change->to),
	    breaker_reason_text(change->reason));
}

bool
op_status(op_call *call, ct_status status)
{
	switch (status) {
	case CT_OK:
		return true;
	case CT_CAPACITY:
		return proto_fail(&call->err, PROTO_CAPACITY,
		    "max_circuits (%lld) reached: no new circuit can be created",
		    (long long)srv.conf.max_circuits);
	case CT_NOMEM:
		break;
	}
	return proto_fail(&call->err, PROTO_INTERNAL, "%s", circuit_table_status_text(status));
}

/* The checks every op shares, then the handler. False with call->err. */
static bool
op_run(op_call *call, const op_entry *op)
{
	if ((op->flags & OP_ADMIN) && !server_client_is_admin(call->client))
		return proto_fail(&call->err, PROTO_FORBIDDEN,
		    "%s is an admin op and uid %ld is not an admin", op->name,
		    (long)call->client->uid);
	for (const char *const *m = op->required; m != NULL && *m != NULL; m++) {
		const json_t *v = json_object_get(call->request, *m);

		if (v == NULL || json_is_null(v))
			return proto_fail(&call->err, PROTO_BAD_REQUEST, "%s is required", *m);
	}
	if ((op->flags & OP_NAME) &&
	    !proto_get_name(call->request, "name", &call->name, &call->err))
		return false;
	if (op->flags & OP_CTX) {
		if (!proto_ctx_from_json(call->request, &call->ctx, &call->err))
			return false;
		call->now = proto_ctx_has(&call->ctx, PROTO_CTX_NOW)
		    ? call->ctx.value[PROTO_CTX_NOW]
		    : clock_realtime_ms();
		if (call->name != NULL)
			conf_policy(&srv.conf, call->name, &call->ctx, &call->policy);
	}
	return op->handler(call);
}

void
op_dispatch(server_client *c, const char *line, size_t len)
{
	op_call call = { .client = c };
	const op_entry *op = NULL;
	const json_t *id = NULL;
	json_t *request;
	const char *opname;
	size_t oplen;
	bool ok = false;

	stats.requests++;
	request = proto_request_decode(line, len, &call.err);
	if (request == NULL)
		goto reply;
	call.request = request;
	if (!proto_request_id(request, &id, &call.err))
		goto reply;
	if (!proto_get_text(request, "op", true, &opname, &oplen, &call.err))
		goto reply;
	op = op_find(opname, oplen);
	if (op == NULL) {
		proto_fail(&call.err, PROTO_UNKNOWN_OP, "unknown op \"%.64s\"", opname);
		goto reply;
	}
	stats.op_requests[op - ops]++;
	if (srv.state == SERVER_STOPPING) {
		proto_fail(&call.err, PROTO_SHUTTING_DOWN, "cbd is shutting down");
		goto reply;
	}
	call.reply = proto_reply_ok(id);
	if (call.reply == NULL)
		fatal("out of memory building a reply");
	ok = op_run(&call, op);
reply:
	if (ok) {
		server_client_reply(c, call.reply);
	} else {
		json_decref(call.reply);
		stats.errors[call.err.code]++;
		if (op != NULL)
			stats.op_errors[op - ops]++;
		log_debug("connection %llu: %s: %s", (unsigned long long)c->id,
		    proto_code_name(call.err.code), call.err.message);
		server_client_reply(c, proto_reply_error(id, &call.err));
	}
	json_decref(request);
}
