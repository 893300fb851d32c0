/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-list.c — the list op (see op-list.h): the circuits' snapshots a page
 * at a time, long lists answered in steps across turns of the event loop.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "conf.h"
#include "daemon.h"
#include "log.h"
#include "op-list.h"
#include "stats.h"

/* A listing that goes on in a later request: one per connection, its walk
 * linked into the table (so it survives changes between pages). */
typedef struct op_list_cursor {
	ct_cursor walk;
	uint64_t id; /* "lN" on the wire */
	bool filter;
	cb_state state;
} op_list_cursor;

/* What list's visitor needs. */
typedef struct list_walk {
	op_snapshots snapshots;
	bool filter;
	cb_state state;
	int64_t limit; /* circuits in this reply at most; 0: only the output bound */
	int64_t added;
	char resume[CT_NAME_MAX + 1]; /* the first circuit left for the next page */
} list_walk;

/* Lists answered in steps now (connections with a list_job). */
static unsigned lists_stepping;
static uint64_t list_cursor_ids;

static void
list_visit(const char *name, const ct_view *view, void *arg)
{
	list_walk *w = arg;
	bool was_cut = w->snapshots.truncated;

	if (w->resume[0] != '\0' || (w->filter && view->snap.state != w->state))
		return;
	if (w->limit > 0 && w->added >= w->limit) {
		snprintf(w->resume, sizeof w->resume, "%s", name);
		return;
	}
	op_snapshots_add(&w->snapshots, name, view);
	if (!was_cut && w->snapshots.truncated)
		snprintf(w->resume, sizeof w->resume, "%s", name); /* did not fit */
	else if (!w->snapshots.truncated)
		w->added++;
}

/* A list longer than one step, answered across turns of the event loop
 * so that other connections are served in between (its connection reads
 * nothing meanwhile). */
typedef struct op_list_job {
	op_call call;
	json_t *request; /* a reference: call's strings point into it */
	list_walk w;
	op_list_cursor *cursor;
	bool streaming; /* the reply is written as the steps are done */
	bool cut; /* streaming: a piece found no room; the line ends now */
} op_list_job;

/* Output room kept for a list written in pieces when it begins (its
 * budget, up to this): more is taken as it grows. */
#define OP_LIST_RESERVE_MAX (8u << 20)

/* Room for the end of a list written in pieces:
 * `],"truncated":true,"cursor":"l<digits>"}`. */
#define OP_LIST_END_BYTES 64

/* One step of a walk; true when this reply is complete. */
static bool
list_step(list_walk *w, op_list_cursor *cursor, int64_t now, unsigned circuits)
{
	circuit_table_cursor_next(cbd.table, &cursor->walk, now, circuits, list_visit, w);
	return cursor->walk.at == NULL || w->resume[0] != '\0' || w->snapshots.nomem;
}

static void
list_cursor_free(op_list_cursor *cursor)
{
	if (cursor == NULL)
		return;
	circuit_table_cursor_close(cbd.table, &cursor->walk);
	free(cursor);
}

/* A complete walk with circuits left: the connection keeps the cursor,
 * standing on the first circuit left out; its name in id. Takes it. */
static void
list_keep_cursor(op_call *call, list_walk *w, op_list_cursor *cursor, char id[24])
{
	op_conn *oc = op_conn_peek(call->client);

	circuit_table_cursor_seek(cbd.table, &cursor->walk, w->resume);
	snprintf(id, 24, "l%llu", (unsigned long long)cursor->id);
	list_cursor_free(oc->list_cursor);
	oc->list_cursor = cursor;
}

/* The reply of a complete step: the circuits, truncated, and a cursor
 * kept by the connection when circuits are left. Takes the cursor. */
static bool
list_reply(op_call *call, list_walk *w, op_list_cursor *cursor)
{
	bool more = w->resume[0] != '\0';
	char id[24];

	if (!op_snapshots_reply(&w->snapshots, call, "circuits", true)) {
		list_cursor_free(cursor);
		return false;
	}
	if (!more) {
		list_cursor_free(cursor);
		return true;
	}
	/* The next page starts at the circuit that was left out. */
	list_keep_cursor(call, w, cursor, id);
	if (json_object_set_new(op_reply(call), "truncated", json_true()) != 0 ||
	    json_object_set_new(op_reply(call), "cursor", json_string(id)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

/* ---- a list written as its steps are done ----------------------------- */

/* A long list's reply goes out piece by piece: each step's circuits are
 * appended to the connection's output as they are encoded, instead of
 * the whole (up to half of max_output_bytes) being copied into it at the
 * end, a pause of milliseconds for every other connection. The line is
 * {"id":..,"ok":true,"circuits":[...],"truncated":..,"cursor":..}: the
 * members known only at the end come after the array. */

/* The circuits encoded since the last piece. */
static void
list_stream_items(op_list_job *job)
{
	op_snapshots *s = &job->w.snapshots;

	/* Each piece keeps room for the line's end: when one finds no room
	 * (out of memory), the line ends there, cut short. */
	if (s->items.len > 0 && !job->cut &&
	    !server_client_write_piece(job->call.client, s->items.buf, s->items.len,
		OP_LIST_END_BYTES)) {
		stats_limit_hit(STATS_LIMIT_NOMEM);
		job->cut = true;
	}
	s->items.len = 0;
}

/* Begin the line: its head and the circuits so far, with room kept for
 * the whole budget. False when there is no room: the reply is then made
 * whole at the end, as a short list's is. */
static bool
list_stream_begin(op_list_job *job)
{
	op_snapshots *s = &job->w.snapshots;
	enc_buf head = enc_take();
	bool ok;

	op_reply_head(&head, job->call.id);
	if (!head.nomem) {
		head.len--; /* the '}' */
		ENC_LIT(&head, ",\"circuits\":[");
	}
	ok = !head.nomem &&
	    server_client_write_piece(job->call.client, head.buf, head.len,
		(s->items.len + s->budget < OP_LIST_RESERVE_MAX ? s->items.len + s->budget
								: OP_LIST_RESERVE_MAX) +
		    OP_LIST_END_BYTES);
	enc_recycle(&head);
	if (!ok)
		return false;
	job->streaming = true;
	list_stream_items(job);
	return true;
}

/* End the line: the last circuits, truncated and the cursor. */
static void
list_stream_end(op_list_job *job)
{
	list_walk *w = &job->w;
	char end[OP_LIST_END_BYTES], id[24];
	int len;

	list_stream_items(job);
	if (w->snapshots.truncated)
		stats_limit_hit(STATS_LIMIT_LIST);
	if (job->cut) {
		/* Circuits were left out with no way to go on: as a list cut by
		 * the output bound was in protocol 1. */
		list_cursor_free(job->cursor);
		len = snprintf(end, sizeof end, "],\"truncated\":true}");
	} else if (w->resume[0] != '\0') {
		list_keep_cursor(&job->call, w, job->cursor, id);
		len = snprintf(end, sizeof end, "],\"truncated\":true,\"cursor\":\"%s\"}", id);
	} else {
		list_cursor_free(job->cursor);
		len = snprintf(end, sizeof end, "],\"truncated\":false}");
	}
	job->cursor = NULL;
	op_snapshots_free(&w->snapshots);
	server_client_write_end(job->call.client, end, (size_t)len);
	job->call.written = true;
}

/* The walk a list request goes on with: the connection's cursor when it
 * names it, else a new one from the first circuit. NULL with call->err. */
static op_list_cursor *
list_cursor_take(op_call *call, list_walk *w)
{
	op_conn *oc = op_conn_peek(call->client);
	op_list_cursor *cursor = oc->list_cursor;
	const char *given;
	char id[24];

	if (!proto_get_text(call->request, "cursor", false, &given, NULL, &call->err))
		return NULL;
	oc->list_cursor = NULL;
	if (given != NULL) {
		if (cursor != NULL)
			snprintf(id, sizeof id, "l%llu", (unsigned long long)cursor->id);
		if (cursor == NULL || strcmp(given, id) != 0) {
			list_cursor_free(cursor);
			proto_fail(&call->err, PROTO_BAD_REQUEST,
			    "cursor \"%.40s\" is not this connection's: a cursor lasts until the "
			    "connection's next list or its end",
			    given);
			return NULL;
		}
		/* The listing goes on with the filter it started with. */
		w->filter = cursor->filter;
		w->state = cursor->state;
		return cursor;
	}
	list_cursor_free(cursor);
	cursor = calloc(1, sizeof *cursor);
	if (cursor == NULL) {
		proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
		return NULL;
	}
	cursor->id = ++list_cursor_ids;
	cursor->filter = w->filter;
	cursor->state = w->state;
	circuit_table_cursor_open(cbd.table, &cursor->walk);
	return cursor;
}

bool
op_list(op_call *call)
{
	op_list_job *job;
	bool present;

	/* The connection keeps the listing's cursor, and the list answered
	 * in steps. */
	job = op_conn_of(call->client) != NULL ? calloc(1, sizeof *job) : NULL;
	if (job == NULL)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	if (!proto_get_state(call->request, "state", false, &job->w.state, &present, &call->err) ||
	    !proto_get_int(call->request, "limit", 1, OP_LIST_LIMIT_MAX, false, &job->w.limit, NULL,
		&call->err)) {
		free(job);
		return false;
	}
	job->w.filter = present;
	job->cursor = list_cursor_take(call, &job->w);
	if (job->cursor == NULL || !op_snapshots_init(&job->w.snapshots, call)) {
		list_cursor_free(job->cursor);
		free(job);
		return false;
	}
	if (list_step(&job->w, job->cursor, call->now, OP_LIST_STEP_CIRCUITS)) {
		bool ok = list_reply(call, &job->w, job->cursor);

		free(job);
		return ok;
	}
	/* The rest in later turns (op_list_continue); the call lives in job
	 * (the dispatcher neither answers nor frees it while pending). */
	job->call = *call;
	job->request = json_incref((json_t *)call->request);
	call->pending = true;
	op_conn_peek(call->client)->list_job = job;
	server_client_block(call->client, SERVER_CLIENT_BLOCK_STEPS, true);
	lists_stepping++;
	list_stream_begin(job);
	return true;
}

/* This list's share of a turn: each listing connection steps once a turn
 * (its turn event), so the turn's list work stays OP_LIST_STEP_CIRCUITS
 * however many lists are in progress. Counting turns needed libevent's
 * precise timer, which rearms a timerfd every turn (a syscall per request
 * at low load). */
static unsigned
list_share(void)
{
	unsigned n = lists_stepping > 0 ? lists_stepping : 1;

	return OP_LIST_STEP_CIRCUITS / n > 0 ? OP_LIST_STEP_CIRCUITS / n : 1;
}

bool
op_list_continue(server_client *c, bool paced)
{
	op_conn *oc = op_conn_peek(c);
	op_list_job *job = oc != NULL ? oc->list_job : NULL;
	bool ok;

	if (job == NULL)
		return true;
	if (!list_step(&job->w, job->cursor, job->call.now,
		paced ? list_share() : OP_LIST_STEP_CIRCUITS)) {
		if (job->streaming)
			list_stream_items(job);
		if (!job->cut)
			return false;
	}
	if (job->streaming)
		list_stream_end(job);
	oc->list_job = NULL;
	server_client_block(c, SERVER_CLIENT_BLOCK_STEPS, false);
	lists_stepping--;
	op_begin(c);
	ok = job->streaming ||
	    (list_reply(&job->call, &job->w, job->cursor) && op_reply_conflicts(&job->call));
	op_finish(&job->call, ok);
	json_decref(job->request);
	free(job);
	return true;
}

void
op_list_client_closed(server_client *c)
{
	op_conn *oc = op_conn_peek(c);
	op_list_job *job = oc->list_job;

	list_cursor_free(oc->list_cursor);
	oc->list_cursor = NULL;
	if (job == NULL)
		return;
	lists_stepping--;
	list_cursor_free(job->cursor);
	op_snapshots_free(&job->w.snapshots);
	json_decref(job->call.reply);
	enc_free(&job->call.tail);
	enc_free(&job->call.tail_more);
	json_decref(job->request);
	free(job);
	oc->list_job = NULL;
	server_client_block(c, SERVER_CLIENT_BLOCK_STEPS, false);
}
