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
	op_snapshots snapshots;
	bool filter;
	cb_state state;
} list_walk;

static void
list_visit(const char *name, const ct_view *view, void *arg)
{
	list_walk *w = arg;

	if (!w->filter || view->snap.state == w->state)
		op_snapshots_add(&w->snapshots, name, view);
}

bool
op_list(op_call *call)
{
	list_walk w = { .filter = false };
	bool present;

	if (!proto_get_state(call->request, "state", false, &w.state, &present, &call->err))
		return false;
	w.filter = present;
	if (!op_snapshots_init(&w.snapshots, call))
		return false;
	circuit_table_foreach(srv.table, call->now, list_visit, &w);
	return op_snapshots_reply(&w.snapshots, call, "circuits", true);
}

bool
op_stats(op_call *call)
{
	if (!stats_to_json(call->reply, op_names(), op_count(), srv.table))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}
