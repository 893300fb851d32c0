/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.c — the watch and unwatch ops and their events (see watch.h).
 *
 * Two indexes: watched name -> the connections watching it, and
 * connection -> what it watches (its names, or everything). Both are small
 * compared with the circuit table: only names somebody watches have an
 * entry. Sending an event costs a table read and a snapshot per watcher.
 */
#include <stdlib.h>
#include <string.h>

/* Out of memory in uthash must not exit cbd: the add is undone. */
#define HASH_NONFATAL_OOM 1
static int hash_oom;
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
#include <uthash.h>

#include "circuit-json.h"
#include "daemon.h"
#include "log.h"
#include "stats.h"
#include "watch.h"

/* One (name, connection) pair: on its name's list, and in its
 * connection's set (a hash on the name: a watch or unwatch of n names
 * costs O(n) whatever the connection already watches). */
typedef struct watch_link {
	struct watch_link *next_of_name, *prev_of_name;
	UT_hash_handle hh; /* in the watcher's set, keyed by the name */
	struct watch_name *name;
	watcher *w;
} watch_link;

/* A watched name and its watchers. */
typedef struct watch_name {
	UT_hash_handle hh;
	watch_link *links;
	char name[];
} watch_name;

/* A watching connection. */
struct watcher {
	UT_hash_handle hh; /* keyed by the connection's pointer */
	server_client *conn;
	bool all;
	watch_link *links; /* the set of names watched by name */
	json_t *pending; /* events waiting for the current request's reply */
};

static watch_name *names;
static watcher *watchers;
static unsigned watcher_count;
static unsigned all_count; /* watchers of everything: looked at on every change */
static server_client *current; /* the connection whose request runs */

static watcher *
watcher_find(server_client *c)
{
	watcher *w;

	HASH_FIND_PTR(watchers, &c, w);
	return w;
}

static watcher *
watcher_need(server_client *c)
{
	watcher *w = watcher_find(c);

	if (w != NULL)
		return w;
	w = calloc(1, sizeof *w);
	if (w == NULL)
		return NULL;
	w->conn = c;
	hash_oom = 0;
	HASH_ADD_PTR(watchers, conn, w);
	if (hash_oom) {
		free(w);
		return NULL;
	}
	watcher_count++;
	return w;
}

static void
link_free(watch_link *l)
{
	watch_name *n = l->name;

	if (l->prev_of_name != NULL)
		l->prev_of_name->next_of_name = l->next_of_name;
	else
		n->links = l->next_of_name;
	if (l->next_of_name != NULL)
		l->next_of_name->prev_of_name = l->prev_of_name;
	if (n->links == NULL) {
		HASH_DEL(names, n);
		free(n);
	}
	free(l);
}

/* Drop w's watch of one name, or of everything (name NULL). */
void
watch_drop(watcher *w, const char *name)
{
	watch_link *l, *tmp;

	if (name == NULL) {
		if (w->all)
			all_count--;
		w->all = false;
		HASH_ITER (hh, w->links, l, tmp) {
			HASH_DEL(w->links, l);
			link_free(l);
		}
		return;
	}
	HASH_FIND(hh, w->links, name, strlen(name), l);
	if (l != NULL) {
		HASH_DEL(w->links, l);
		link_free(l);
	}
}

/* Names w watches by name. */
size_t
watch_names(const watcher *w)
{
	return HASH_COUNT(w->links);
}

/* Does w watch name by name? */
bool
watch_has(const watcher *w, const char *name)
{
	watch_link *l;

	HASH_FIND(hh, w->links, name, strlen(name), l);
	return l != NULL;
}

/* Forget w entirely once it watches nothing. */
void
watch_trim(watcher *w)
{
	if (w->all || w->links != NULL || w->pending != NULL)
		return;
	HASH_DEL(watchers, w);
	watcher_count--;
	free(w);
}

/* w watches name; false when out of memory. */
bool
watch_add(watcher *w, const char *name)
{
	size_t len = strlen(name);
	watch_name *n;
	watch_link *l;

	HASH_FIND(hh, w->links, name, len, l);
	if (l != NULL)
		return true;
	HASH_FIND(hh, names, name, len, n);
	if (n == NULL) {
		n = calloc(1, sizeof *n + len + 1);
		if (n == NULL)
			return false;
		memcpy(n->name, name, len + 1);
		hash_oom = 0;
		HASH_ADD_KEYPTR(hh, names, n->name, len, n);
		if (hash_oom) {
			free(n);
			return false;
		}
	}
	l = calloc(1, sizeof *l);
	if (l == NULL) {
		if (n->links == NULL) {
			HASH_DEL(names, n);
			free(n);
		}
		return false;
	}
	l->name = n;
	l->w = w;
	l->next_of_name = n->links;
	if (n->links != NULL)
		n->links->prev_of_name = l;
	n->links = l;
	hash_oom = 0;
	HASH_ADD_KEYPTR(hh, w->links, n->name, len, l);
	if (hash_oom) {
		link_free(l);
		return false;
	}
	return true;
}

/* Send (or, for the current request's connection, hold back) an event;
 * text is its one encoding, shared by every watcher. */
static void
event_send(watcher *w, json_t *event, const char *text, size_t len)
{
	/* Held back for the request running on its connection, and while a
	 * long list is written to it piece by piece (an event must not land
	 * inside that line). */
	if (w->conn == current || (w->conn->blocked & SERVER_CLIENT_BLOCK_STEPS)) {
		if (w->pending == NULL)
			w->pending = json_array();
		if (w->pending != NULL && json_array_append(w->pending, event) == 0)
			return;
		if ((w->conn->blocked & SERVER_CLIENT_BLOCK_STEPS)) {
			/* Out of memory: the event cannot wait and cannot go now. */
			stats_limit_hit(STATS_LIMIT_NOMEM);
			log_warning("connection %llu: an event was lost: out of memory",
			    (unsigned long long)w->conn->id);
			return;
		}
	}
	server_client_reply_line(w->conn, text, len);
	stats.watch_events++;
	/* Its connection is idle: have the loop write it out (not here,
	 * where a failed write would close a watcher being walked). */
	server_client_write_soon(w->conn);
}

/* Send event to the watchers of name by name and, when to_all, to every
 * watcher of everything (who see stored circuits only). */
static void
event_fanout(const char *name, json_t *event, bool to_all)
{
	watch_name *n;
	watcher *w, *tmp;
	char *text;
	size_t len;

	if (event == NULL)
		return;
	text = json_dumps(event, JSON_COMPACT);
	if (text == NULL) {
		json_decref(event);
		return;
	}
	len = strlen(text);
	HASH_FIND(hh, names, name, strlen(name), n);
	for (watch_link *l = n != NULL ? n->links : NULL; l != NULL; l = l->next_of_name) {
		if (!l->w->all)
			event_send(l->w, event, text, len);
	}
	if (to_all && all_count > 0) {
		HASH_ITER (hh, watchers, w, tmp) {
			if (w->all)
				event_send(w, event, text, len);
		}
	}
	free(text);
	json_decref(event);
}

/* Send event to every watcher of name (by name, or watching everything). */
static void
event_broadcast(const char *name, json_t *event)
{
	event_fanout(name, event, true);
}

/* Is anybody watching name? */
static bool
watched(const char *name)
{
	watch_name *n;

	if (all_count > 0)
		return true;
	HASH_FIND(hh, names, name, strlen(name), n);
	return n != NULL;
}

/* A snapshot of name's circuit as view has it at now (its own policy
 * from cfg), with the policy or without. */
static json_t *
snapshot_of(const char *name, const ct_view *view, const cbd_conf *cfg, int64_t now,
    bool with_policy)
{
	proto_policy_sources sources;
	const char *preset;
	cb_policy policy;

	conf_policy(cfg, name, view->declared, &policy, &sources, &preset);
	return circuit_json_snapshot(name, view, &policy, preset, &sources, now, with_policy);
}

void
watch_changed(const char *name, const ct_change *change)
{
	int64_t now;
	json_t *snap;
	ct_view view;

	if (change->reason == CB_REASON_NONE || watchers == NULL || !watched(name))
		return;
	now = clock_realtime_ms();
	circuit_table_get(cbd.table, name, now, &view, NULL);
	/* Protocol 3: change events are compact (no policy). */
	snap = snapshot_of(name, &view, &cbd.conf, now, false);
	if (snap == NULL)
		return;
	event_broadcast(name,
	    json_pack("{s:s, s:s, s:o, s:s}", "event", "change", "from",
		breaker_state_name(change->from), "snapshot", snap, "reason",
		breaker_reason_text(change->reason)));
}

void
watch_deleted(const char *name, const char *reason)
{
	if (watchers == NULL || !watched(name))
		return;
	event_broadcast(name,
	    json_pack("{s:s, s:s, s:s}", "event", "delete", "name", name, "reason", reason));
}

/* A policy event (protocol 3) for name when a watcher watches it. */
static void
policy_event(const char *name, const ct_view *view, const cbd_conf *fresh, int64_t now)
{
	json_t *snap;

	if (!watched(name))
		return;
	snap = snapshot_of(name, view, fresh, now, true);
	if (snap != NULL)
		event_broadcast(name, json_pack("{s:s, s:o}", "event", "policy", "snapshot", snap));
}

void
watch_policy_renewed(const char *name, const ct_view *view, const cbd_conf *fresh, int64_t now)
{
	if (watchers != NULL)
		policy_event(name, view, fresh, now);
}

void
watch_policies_unstored(const cbd_conf *old, const cbd_conf *fresh, int64_t now)
{
	watch_name *n, *tmp;

	/* The table's walk told the watchers of stored circuits; the names
	 * watched are walked here for those not stored (a reload need not
	 * walk a million circuits for them), told to their watchers by name
	 * only: watchers of everything see stored circuits only. */
	if (watchers == NULL)
		return;
	HASH_ITER (hh, names, n, tmp) {
		ct_view view;

		/* peek, not get: nothing may change while names is walked. */
		if (circuit_table_peek(cbd.table, n->name, &view))
			continue;
		circuit_table_get(cbd.table, n->name, now, &view, NULL);
		if (conf_policy_changed(old, fresh, n->name, view.declared)) {
			json_t *snap = snapshot_of(n->name, &view, fresh, now, true);

			if (snap != NULL)
				event_fanout(n->name,
				    json_pack("{s:s, s:o}", "event", "policy", "snapshot", snap),
				    false);
		}
	}
}

void
watch_request_begin(server_client *c)
{
	current = c;
}

server_client *
watch_request_current(void)
{
	return current;
}

void
watch_request_end(server_client *c)
{
	watcher *w = watcher_find(c);
	json_t *pending;
	size_t i;
	json_t *event;

	current = NULL;
	if (w == NULL || w->pending == NULL)
		return;
	pending = w->pending;
	w->pending = NULL;
	json_array_foreach (pending, i, event) {
		json_incref(event);
		server_client_reply(c, event);
		stats.watch_events++;
	}
	json_decref(pending);
	watch_trim(w);
}

void
watch_forget(server_client *c)
{
	watcher *w = watcher_find(c);

	if (w == NULL)
		return;
	watch_drop(w, NULL);
	json_decref(w->pending);
	w->pending = NULL;
	watch_trim(w);
}

unsigned
watch_watchers(void)
{
	return watcher_count;
}

void
watch_free(void)
{
	watcher *w, *tmp;

	HASH_ITER (hh, watchers, w, tmp)
		watch_forget(w->conn);
	current = NULL;
}

watcher *
watch_watcher(server_client *c, bool need)
{
	return need ? watcher_need(c) : watcher_find(c);
}

void
watch_add_all(watcher *w)
{
	if (!w->all)
		all_count++;
	w->all = true;
}
