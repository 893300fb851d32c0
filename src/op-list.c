/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-list.c — the ops answered with many snapshots (see op-list.h): list,
 * a page at a time, and watch/unwatch; long replies answered in steps
 * across turns of the event loop (a walk of the table for list and watch
 * all, of the request's names for a watch of names), each turn's step
 * bounded by time (OP_STEP_TURN_US) and by the output a turn writes
 * (OP_STEP_TURN_BYTES), not by a count.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "conf.h"
#include "daemon.h"
#include "log.h"
#include "op-list.h"
#include "server-client.h"
#include "stats.h"
#include "watch.h"

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
	const char *member; /* the reply's array: "circuits" (list), "snapshots" (watch) */
	bool pages; /* list: a cut reply keeps a cursor for the next page */
	bool filter;
	cb_state state;
	int64_t limit; /* circuits in this reply at most; 0: only the output bound */
	int64_t added;
	char resume[CT_NAME_MAX + 1]; /* the first circuit left for the next page */
} list_walk;

/* A step makes what a turn's flush writes (op-list.h). */
_Static_assert(OP_STEP_TURN_BYTES == SERVER_CLIENT_FLUSH_MAX,
    "OP_STEP_TURN_BYTES is a turn's flush");

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

	if (!op_snapshots_reply(&w->snapshots, call, w->member, w->pages)) {
		list_cursor_free(cursor);
		return false;
	}
	if (!more || !w->pages) {
		/* watch all: cut by the output bound, said by op_snapshots_reply. */
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
		ENC_LIT(&head, ",\"");
		enc_puts(&head, job->w.member);
		ENC_LIT(&head, "\":[");
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
	if (job->cut || (!w->pages && w->resume[0] != '\0')) {
		/* Circuits were left out with no way to go on: as a list cut by
		 * the output bound was in protocol 1 (and a watch of all). */
		list_cursor_free(job->cursor);
		len = snprintf(end, sizeof end, "],\"truncated\":true}");
	} else if (!w->pages) {
		list_cursor_free(job->cursor);
		len = snprintf(end, sizeof end, "]}");
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

/* A new walk from the first circuit, with w's filter; NULL with
 * call->err. */
static op_list_cursor *
list_cursor_open(op_call *call, const list_walk *w)
{
	op_list_cursor *cursor = calloc(1, sizeof *cursor);

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
	return list_cursor_open(call, w);
}

static bool list_job_run(op_call *call, op_list_job *job);

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
	job->w.member = "circuits";
	job->w.pages = true;
	job->cursor = list_cursor_take(call, &job->w);
	return list_job_run(call, job);
}

/* Answer call from job's walk: at once when one step is enough, else in
 * later turns (op_list_continue). Takes job. */
static bool
list_job_run(op_call *call, op_list_job *job)
{
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

/* The chunk of circuits this list walks at a time in a turn: each
 * listing connection steps once a turn (its turn event), so that the
 * least a turn walks stays OP_LIST_STEP_CIRCUITS however many lists are
 * in progress. Counting turns needed libevent's precise timer, which
 * rearms a timerfd every turn (a syscall per request at low load). */
static unsigned
list_share(void)
{
	unsigned n = lists_stepping > 0 ? lists_stepping : 1;

	return OP_LIST_STEP_CIRCUITS / n > 0 ? OP_LIST_STEP_CIRCUITS / n : 1;
}

/* When this turn's share of OP_STEP_TURN_US ends for one of `stepping`
 * jobs in steps (microseconds of the monotonic clock). */
static int64_t
step_until(unsigned stepping)
{
	return clock_monotonic_us() + OP_STEP_TURN_US / (stepping > 0 ? stepping : 1);
}

/* Has a step that began with `budget` bytes left in s made a turn's
 * worth of output (OP_STEP_TURN_BYTES)? */
static bool
step_made_enough(const op_snapshots *s, size_t budget)
{
	return budget - s->budget >= OP_STEP_TURN_BYTES;
}

/* This turn's step of job: chunks of list_share() circuits until the
 * list's share of the turn is spent, or a turn's output made (at least
 * one chunk); true when the reply is complete. Time and bytes, not a
 * count of circuits, bound it: steps of 8 circuits made a long reply
 * thousands of turns, each a write of 2.5 KB waking the reader. */
static bool
list_step_paced(op_list_job *job)
{
	int64_t until = step_until(lists_stepping);
	unsigned chunk = list_share();
	size_t budget = job->w.snapshots.budget;

	do {
		if (list_step(&job->w, job->cursor, job->call.now, chunk))
			return true;
	} while (!step_made_enough(&job->w.snapshots, budget) && clock_monotonic_us() < until);
	return false;
}

bool
op_list_continue(server_client *c, bool paced)
{
	op_conn *oc = op_conn_peek(c);
	op_list_job *job = oc != NULL ? oc->list_job : NULL;
	bool ok;

	if (job == NULL)
		return true;
	if (!(paced ? list_step_paced(job)
		    : list_step(&job->w, job->cursor, job->call.now, OP_LIST_STEP_CIRCUITS))) {
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

/* ---- watch and unwatch ---------------------------------------------- */

/* The request's names (an array of valid names) or all: true. */
static bool
watch_targets(op_call *call, const json_t **list, bool *all)
{
	const json_t *v = json_object_get(call->request, "all");
	char field[32];
	size_t i;
	json_t *n;

	*all = json_is_true(v);
	if (v != NULL && !json_is_null(v) && !json_is_boolean(v))
		return proto_fail(&call->err, PROTO_BAD_REQUEST, "all must be true or false");
	*list = json_object_get(call->request, "names");
	if (json_is_null(*list))
		*list = NULL;
	if (*list == NULL && !*all)
		return proto_fail(&call->err, PROTO_BAD_REQUEST, "names or all: true is required");
	if (*list != NULL && !json_is_array(*list))
		return proto_fail(&call->err, PROTO_BAD_REQUEST, "names must be an array of names");
	json_array_foreach (*list, i, n) {
		const char *why;

		snprintf(field, sizeof field, "names[%zu]", i);
		if (!json_is_string(n) ||
		    !proto_name_valid(json_string_value(n), json_string_length(n), &why))
			return proto_fail(&call->err, PROTO_BAD_REQUEST, "%s %s", field,
			    json_is_string(n) ? why : "must be a string");
	}
	return true;
}

/* Would w watching list's names stay within max_watch_names? Else a
 * capacity error (counted), and nothing of the watch is applied. A name
 * listed twice counts twice here (a client has no reason to). */
static bool
watch_fits(op_call *call, const watcher *w, const json_t *list)
{
	size_t i, fresh = 0, have = watch_names(w);
	json_t *n;

	json_array_foreach (list, i, n)
		fresh += !watch_has(w, json_string_value(n));
	if (have + fresh <= (uint64_t)cbd.conf.max_watch_names)
		return true;
	stats_limit_hit(STATS_LIMIT_WATCH_NAMES);
	return proto_fail(&call->err, PROTO_CAPACITY,
	    "max_watch_names (%lld) reached: this connection watches %zu names, the watch adds %zu",
	    (long long)cbd.conf.max_watch_names, have, fresh);
}

/* Watch list's names from index `from`, at most `step` of them, each
 * with its current snapshot; *next the first left. True when done (or
 * out of memory: snaps->nomem). */
static bool
watch_names_step(op_call *call, watcher *w, const json_t *list, size_t from, size_t step,
    op_snapshots *snaps, size_t *next)
{
	size_t i, size = json_array_size(list);

	for (i = from; i < size && i - from < step; i++) {
		const char *name = json_string_value(json_array_get(list, i));
		ct_view view;

		if (!watch_add(w, name)) {
			snaps->nomem = true;
			break;
		}
		/* A name that is not stored lists its initial snapshot. */
		circuit_table_get(cbd.table, name, call->now, &view, NULL);
		op_snapshots_add(snaps, name, &view);
	}
	*next = i;
	return i >= size || snaps->nomem;
}

/* A watch of more names than one step, answered across turns of the
 * event loop (its connection reads nothing meanwhile, and its events
 * wait for the reply), so that one long watch line does not stall every
 * other connection. */
typedef struct op_watch_job {
	op_call call;
	json_t *request; /* a reference: call's strings point into it */
	size_t next; /* the first name not yet watched */
	op_snapshots snaps;
} op_watch_job;

/* Connections with a watch in steps. */
static unsigned watches_stepping;

static bool
watch_job_begin(op_call *call, size_t next, op_snapshots *snaps)
{
	op_conn *oc = op_conn_of(call->client);
	op_watch_job *job = oc != NULL ? calloc(1, sizeof *job) : NULL;

	if (job == NULL) {
		op_snapshots_free(snaps);
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	}
	job->call = *call;
	job->request = json_incref((json_t *)call->request);
	job->next = next;
	job->snaps = *snaps;
	call->pending = true;
	oc->watch_job = job;
	server_client_block(call->client, SERVER_CLIENT_BLOCK_STEPS, true);
	watches_stepping++;
	return true;
}

static void
watch_job_free(op_watch_job *job)
{
	op_snapshots_free(&job->snaps);
	json_decref(job->call.reply);
	enc_free(&job->call.tail);
	enc_free(&job->call.tail_more);
	json_decref(job->request);
	free(job);
}

/* This turn's step of a watch of names: chunks of OP_WATCH_STEP_NAMES
 * / (watches in steps) names (at least one) until the watch's share of
 * OP_STEP_TURN_US is spent or a turn's output made, at least one chunk;
 * true when done. */
static bool
watch_step_paced(op_watch_job *job, watcher *w)
{
	const json_t *list = json_object_get(job->request, "names");
	unsigned share = watches_stepping > 0 ? watches_stepping : 1;
	size_t chunk = OP_WATCH_STEP_NAMES / share > 0 ? OP_WATCH_STEP_NAMES / share : 1;
	int64_t until = step_until(watches_stepping);
	size_t budget = job->snaps.budget;

	do {
		if (watch_names_step(&job->call, w, list, job->next, chunk, &job->snaps,
			&job->next))
			return true;
	} while (!step_made_enough(&job->snaps, budget) && clock_monotonic_us() < until);
	return false;
}

bool
op_watch_continue(server_client *c, bool paced)
{
	op_conn *oc = op_conn_peek(c);
	op_watch_job *job = oc != NULL ? oc->watch_job : NULL;
	watcher *w;
	bool ok;

	if (job == NULL)
		return true;
	job->call.now = clock_realtime_ms(); /* the snapshots of this step's turn */
	w = watch_watcher(c, true);
	if (w == NULL)
		job->snaps.nomem = true;
	else if (!(paced ? watch_step_paced(job, w)
			 : watch_names_step(&job->call, w, json_object_get(job->request, "names"),
			       job->next, SIZE_MAX, &job->snaps, &job->next)))
		return false;
	oc->watch_job = NULL;
	server_client_block(c, SERVER_CLIENT_BLOCK_STEPS, false);
	watches_stepping--;
	if (w != NULL)
		watch_trim(w);
	op_begin(c);
	ok = op_snapshots_reply(&job->snaps, &job->call, "snapshots", false);
	op_finish(&job->call, ok);
	json_decref(job->request);
	free(job);
	return true;
}

void
op_watch_client_closed(server_client *c)
{
	op_conn *oc = op_conn_peek(c);

	if (oc->watch_job == NULL)
		return;
	watches_stepping--;
	watch_job_free(oc->watch_job);
	oc->watch_job = NULL;
	server_client_block(c, SERVER_CLIENT_BLOCK_STEPS, false);
}

/* watch all's snapshots: every stored circuit, walked as a list without
 * pages is (in steps, cut by the output bound with "truncated": true). */
static bool
watch_all_snapshots(op_call *call)
{
	op_list_job *job = op_conn_of(call->client) != NULL ? calloc(1, sizeof *job) : NULL;

	if (job == NULL)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	job->w.member = "snapshots";
	job->cursor = list_cursor_open(call, &job->w);
	return list_job_run(call, job);
}

bool
op_watch(op_call *call)
{
	op_snapshots snaps;
	const json_t *list;
	watcher *w;
	size_t i;
	bool all;

	if (!watch_targets(call, &list, &all))
		return false;
	call->now = clock_realtime_ms();
	if (!op_snapshots_init(&snaps, call))
		return false;
	w = watch_watcher(call->client, true);
	if (w == NULL) {
		op_snapshots_free(&snaps);
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	}
	if (!watch_fits(call, w, list)) {
		op_snapshots_free(&snaps);
		watch_trim(w);
		return false;
	}
	if (all) {
		op_snapshots_free(&snaps);
		watch_add_all(w);
		return watch_all_snapshots(call);
	}
	if (watch_names_step(call, w, list, 0, OP_WATCH_STEP_NAMES, &snaps, &i)) {
		watch_trim(w);
		return op_snapshots_reply(&snaps, call, "snapshots", false);
	}
	return watch_job_begin(call, i, &snaps);
}

bool
op_unwatch(op_call *call)
{
	watcher *w = watch_watcher(call->client, false);
	const json_t *list;
	size_t i;
	json_t *n;
	bool all;

	if (!watch_targets(call, &list, &all))
		return false;
	if (w == NULL)
		return true;
	if (all)
		watch_drop(w, NULL);
	json_array_foreach (list, i, n)
		watch_drop(w, json_string_value(n));
	watch_trim(w);
	return true;
}
