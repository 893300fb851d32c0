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

/* A snapshot's size in a list reply (policy, sources, totals and a hold
 * with its reason included), less its name: a generous guess. */
#define OP_LIST_ENTRY_BYTES 1400

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
	cb_policy policy;
	size_t cost;
	json_t *obj;

	if (w->truncated || w->nomem || (w->filter && view->snap.state != w->state))
		return;
	/* JSON escapes at most double a name without control characters. */
	cost = OP_LIST_ENTRY_BYTES + 2 * strlen(name);
	if (cost > w->budget) {
		w->truncated = true;
		return;
	}
	w->budget -= cost;
	conf_policy(&srv.conf, name, view->declared, &policy, &sources);
	obj = op_snapshot_json(name, view, &policy, &sources, w->call->now);
	if (obj == NULL || json_array_append_new(w->circuits, obj) != 0)
		w->nomem = true;
}

bool
op_list(op_call *call)
{
	list_walk w = { .call = call };
	bool present;

	if (!proto_get_state(call->request, "state", false, &w.state, &present, &call->err))
		return false;
	w.filter = present;
	/* Half of max_output_bytes, so the reply never gets its reader dropped. */
	w.budget = (size_t)srv.conf.max_output_bytes / 2;
	w.circuits = json_array();
	if (w.circuits == NULL)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	circuit_table_foreach(srv.table, list_visit, &w);
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
