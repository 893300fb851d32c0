/*
 * op-admin.c — the read and service ops: hello, list (long ones answered
 * in steps across turns of the event loop), stats.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "log.h"
#include "op.h"
#include "server.h"
#include "stats.h"
#include "watch.h"

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

/* A list longer than one step, answered across turns of the event loop
 * so that other connections are served in between (its connection reads
 * nothing meanwhile). */
typedef struct op_list_job {
	op_call call;
	json_t *request; /* a reference: call's strings point into it */
	list_walk w;
	ct_cursor cursor;
} op_list_job;

/* One step of a walk; true when the listing is complete. */
static bool
list_step(list_walk *w, ct_cursor *cursor, int64_t now)
{
	circuit_table_cursor_next(srv.table, cursor, now, OP_LIST_STEP_CIRCUITS, list_visit, w);
	return cursor->at == NULL || w->snapshots.truncated || w->snapshots.nomem;
}

bool
op_list(op_call *call)
{
	op_list_job *job;
	bool present;

	job = calloc(1, sizeof *job);
	if (job == NULL)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	if (!proto_get_state(call->request, "state", false, &job->w.state, &present, &call->err)) {
		free(job);
		return false;
	}
	job->w.filter = present;
	if (!op_snapshots_init(&job->w.snapshots, call)) {
		free(job);
		return false;
	}
	circuit_table_cursor_open(srv.table, &job->cursor);
	if (list_step(&job->w, &job->cursor, call->now)) {
		bool ok;

		circuit_table_cursor_close(srv.table, &job->cursor);
		ok = op_snapshots_reply(&job->w.snapshots, call, "circuits", true);
		free(job);
		return ok;
	}
	/* The rest in later turns (op_list_continue); the call lives in job
	 * (the dispatcher neither answers nor frees it while pending). */
	job->call = *call;
	job->request = json_incref((json_t *)call->request);
	call->pending = true;
	call->client->list_job = job;
	return true;
}

bool
op_list_continue(server_client *c)
{
	op_list_job *job = c->list_job;
	bool ok;

	if (job == NULL)
		return true;
	if (!list_step(&job->w, &job->cursor, job->call.now))
		return false;
	circuit_table_cursor_close(srv.table, &job->cursor);
	c->list_job = NULL;
	watch_request_begin(c);
	ok = op_snapshots_reply(&job->w.snapshots, &job->call, "circuits", true) &&
	    op_reply_conflicts(&job->call);
	op_finish(&job->call, ok);
	json_decref(job->request);
	free(job);
	return true;
}

void
op_list_client_closed(server_client *c)
{
	op_list_job *job = c->list_job;

	if (job == NULL)
		return;
	circuit_table_cursor_close(srv.table, &job->cursor);
	op_snapshots_free(&job->w.snapshots);
	json_decref(job->call.reply);
	enc_free(&job->call.tail);
	enc_free(&job->call.tail_more);
	json_decref(job->request);
	free(job);
	c->list_job = NULL;
}

bool
op_stats(op_call *call)
{
	if (!stats_to_json(call->reply, op_names(), op_count(), srv.table))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}
