/*
 * op-admin.c — the read and service ops: hello, list, stats.
 */
#include "config.h"

#include <string.h>

#include "conf.h"
#include "log.h"
#include "op.h"
#include "server.h"
#include "stats.h"

/* Room kept in a list reply for its envelope ("id", "ok", "truncated"). */
#define OP_LIST_ENVELOPE_BYTES 256

bool
op_hello(op_call *call)
{
	const char *client;

	if (!proto_get_text(call->request, "client", false, &client, NULL, &call->err))
		return false;
	if (client != NULL && log_enabled(LOG_LEVEL_DEBUG)) {
		char quoted[LOG_QUOTE_SIZE];

		log_debug("connection %llu: hello from %s", (unsigned long long)call->client->id,
		    log_quote(client, quoted, sizeof quoted));
	}
	if (json_object_set_new(call->reply, "server", json_string(PACKAGE_NAME)) != 0 ||
	    json_object_set_new(call->reply, "version", json_string(PACKAGE_VERSION)) != 0 ||
	    json_object_set_new(call->reply, "protocol", json_integer(PROTO_VERSION)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

/* What list's visitor needs. */
typedef struct list_walk {
	op_call *call;
	json_t *circuits;
	bool filter;
	cb_state state;
	size_t budget; /* bytes the reply may still take */
	bool truncated;
	bool nomem;
} list_walk;

static void
list_visit(const char *name, const ct_view *view, void *arg)
{
	list_walk *w = arg;
	proto_policy_sources sources;
	const char *preset;
	cb_policy policy;
	size_t cost;
	json_t *obj;

	if (w->truncated || w->nomem || (w->filter && view->snap.state != w->state))
		return;
	conf_policy(&srv.conf, name, view->declared, &policy, &sources, &preset);
	obj = op_snapshot_json(name, view, &policy, preset, &sources, w->call->now);
	if (obj == NULL) {
		w->nomem = true;
		return;
	}
	/* The entry's exact size, and a comma. */
	cost = json_dumpb(obj, NULL, 0, JSON_COMPACT) + 1;
	if (cost > w->budget) {
		w->truncated = true;
		json_decref(obj);
		return;
	}
	w->budget -= cost;
	if (json_array_append_new(w->circuits, obj) != 0)
		w->nomem = true;
}

bool
op_list(op_call *call)
{
	list_walk w = { .call = call };
	size_t queued;
	bool present;

	if (!proto_get_state(call->request, "state", false, &w.state, &present, &call->err))
		return false;
	w.filter = present;
	/* Half of max_output_bytes less what is already queued for this
	 * connection, so a list reply never gets its reader dropped. */
	queued = call->client->out_len - call->client->out_off;
	w.budget = (size_t)srv.conf.max_output_bytes / 2;
	w.budget = w.budget > queued + OP_LIST_ENVELOPE_BYTES
	    ? w.budget - queued - OP_LIST_ENVELOPE_BYTES
	    : 0;
	w.circuits = json_array();
	if (w.circuits == NULL)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	circuit_table_foreach(srv.table, call->now, list_visit, &w);
	if (w.nomem) {
		json_decref(w.circuits);
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	}
	if (w.truncated)
		stats_limit_hit(STATS_LIMIT_LIST);
	if (json_object_set_new(call->reply, "circuits", w.circuits) != 0 ||
	    json_object_set_new(call->reply, "truncated", json_boolean(w.truncated)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_stats(op_call *call)
{
	if (!stats_to_json(call->reply, op_names(), op_count(), srv.table))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}
