/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-service.c — the service ops (see op-service.h): hello, stats,
 * metrics, watch and unwatch.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "daemon.h"
#include "log.h"
#include "metrics.h"
#include "op-service.h"
#include "stats-report.h"
#include "stats.h"
#include "watch.h"

/* A metrics op's text is cut to 1/this of max_output_bytes. */
#define OP_METRICS_CUT_DIVISOR 2

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
	if (json_object_set_new(op_reply(call), "server", json_string(PACKAGE_NAME)) != 0 ||
	    json_object_set_new(op_reply(call), "version", json_string(PACKAGE_VERSION)) != 0 ||
	    json_object_set_new(op_reply(call), "protocol", json_integer(PROTO_VERSION)) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_stats(op_call *call)
{
	size_t count;
	const char *const *names = stats_op_names(&count);

	if (!stats_to_json(op_reply(call), names, count, cbd.table))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_metrics(op_call *call)
{
	size_t len, fit = (size_t)cbd.conf.max_output_bytes / OP_METRICS_CUT_DIVISOR;
	char *buf = metrics_text(&len);
	bool cut = buf != NULL && len > fit;
	json_t *body;

	/* Cut like list (§10): at a line's end, within half of
	 * max_output_bytes (escaped in JSON the text grows, at most
	 * twofold), so that the client is answered, not dropped. */
	if (cut) {
		while (fit > 0 && buf[fit - 1] != '\n')
			fit--;
		len = fit;
		stats_limit_hit(STATS_LIMIT_METRICS_CUT);
	}
	body = buf != NULL ? json_stringn(buf, len) : NULL;
	free(buf);
	if (body == NULL || json_object_set_new(op_reply(call), "text", body) != 0 ||
	    (cut && json_object_set_new(op_reply(call), "truncated", json_true()) != 0))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

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

bool
op_watch_continue(server_client *c, bool paced)
{
	op_conn *oc = op_conn_peek(c);
	op_watch_job *job = oc != NULL ? oc->watch_job : NULL;
	unsigned share = watches_stepping > 0 ? watches_stepping : 1;
	watcher *w;
	bool ok;

	if (job == NULL)
		return true;
	job->call.now = clock_realtime_ms(); /* the snapshots of this step's turn */
	w = watch_watcher(c, true);
	if (w == NULL)
		job->snaps.nomem = true;
	else if (!watch_names_step(&job->call, w, json_object_get(job->request, "names"), job->next,
		     paced ? (OP_WATCH_STEP_NAMES / share > 0 ? OP_WATCH_STEP_NAMES / share : 1)
			   : SIZE_MAX,
		     &job->snaps, &job->next))
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

static void
snap_visit(const char *name, const ct_view *view, void *arg)
{
	op_snapshots_add(arg, name, view);
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
		watch_add_all(w);
		circuit_table_foreach(cbd.table, call->now, snap_visit, &snaps);
		watch_trim(w);
		return op_snapshots_reply(&snaps, call, "snapshots", false);
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
