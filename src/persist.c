/* SPDX-License-Identifier: Apache-2.0 */
/*
 * persist.c — the state file (see persist.h): its JSON form, atomic
 * writes in a forked child or in process, and loading at start.
 *
 * Format (version 1):
 *   {"format": "cbd-state", "version": 1, "written_at": ms,
 *    "circuits": [{<a snapshot's members>, "ctx": {<declared policy>},
 *                  "totals": {...}, "hold": null | {...},
 *                  "grown_break_ms": <break_backoff's break, 0: none>}, ...]}
 * Each entry is read back with the same codec as requests and snapshots.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "circuit-json.h"
#include "persist.h"
#include "proto.h"

/* A change not yet written (the writer polls it, as Redis its dirty
 * counter). */
static bool dirty;

void
persist_mark_dirty(void)
{
	dirty = true;
}

bool
persist_dirty(void)
{
	return dirty;
}

void
persist_clean(void)
{
	dirty = false;
}

/* What the walk over pinned circuits builds. */
typedef struct persist_walk {
	json_t *circuits;
	bool nomem;
} persist_walk;

static void
persist_visit(const char *name, const ct_view *view, void *arg)
{
	persist_walk *w = arg;
	json_t *entry;

	/* Closed, unheld circuits with slots are pinned only for their
	 * slots, which are not kept. */
	if (w->nomem || (view->snap.state == CB_STATE_CLOSED && !view->hold.held))
		return;
	entry = proto_snapshot_to_json(name, &view->snap, 0);
	if (entry == NULL ||
	    json_object_set_new(entry, "ctx",
		view->declared != NULL ? proto_ctx_members_to_json(view->declared)
				       : json_object()) != 0 ||
	    json_object_set_new(entry, "totals", circuit_json_totals(&view->totals)) != 0 ||
	    json_object_set_new(entry, "hold", circuit_json_hold(&view->hold)) != 0 ||
	    json_object_set_new(entry, "grown_break_ms",
		json_integer(view->snap.current_break_ms)) != 0 ||
	    json_array_append_new(w->circuits, entry) != 0) {
		json_decref(entry);
		w->nomem = true;
	}
}

/* The whole file as JSON; NULL when out of memory. */
static json_t *
state_to_json(circuit_table *table, int64_t clock)
{
	persist_walk w = { .circuits = json_array() };
	json_t *doc;

	if (w.circuits == NULL)
		return NULL;
	circuit_table_foreach_pinned(table, persist_visit, &w);
	if (w.nomem) {
		json_decref(w.circuits);
		return NULL;
	}
	doc = json_pack("{s:s, s:i, s:I, s:o}", "format", "cbd-state", "version", PERSIST_VERSION,
	    "written_at", (json_int_t)clock, "circuits", w.circuits);
	return doc;
}

/* fsync the directory holding path, so the rename survives a crash. */
static void
sync_dir(const char *path)
{
	char *copy = strdup(path);
	int fd;

	if (copy == NULL)
		return;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(copy);
}

/* Write all of buf to fd. */
static bool
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		buf += n;
		len -= (size_t)n;
	}
	return true;
}

/* Write doc to path atomically: a temp file beside it, fsync, rename. */
static bool
write_atomic(const char *path, const json_t *doc)
{
	char tmp[4096], *text;
	int fd, n;
	bool ok;

	n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
	if (n < 0 || (size_t)n >= sizeof tmp) {
		log_error("state_file %s: path too long", path);
		return false;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		log_error("state_file: cannot create %s: %s", tmp, strerror(errno));
		return false;
	}
	/* One buffer, one write: json_dumpfd would make a syscall per token. */
	text = json_dumps(doc, JSON_COMPACT);
	ok = text != NULL && write_all(fd, text, strlen(text)) && write_all(fd, "\n", 1) &&
	    fsync(fd) == 0;
	free(text);
	if (!ok)
		log_error("state_file: cannot write %s: %s", tmp, strerror(errno));
	if (close(fd) != 0 && ok) {
		log_error("state_file: cannot write %s: %s", tmp, strerror(errno));
		ok = false;
	}
	if (ok && rename(tmp, path) != 0) {
		log_error("state_file: cannot rename %s to %s: %s", tmp, path, strerror(errno));
		ok = false;
	}
	if (!ok) {
		unlink(tmp);
		return false;
	}
	sync_dir(path);
	return true;
}

bool
persist_write_sync(const char *path, circuit_table *table, int64_t clock)
{
	json_t *doc = state_to_json(table, clock);
	bool ok;

	if (doc == NULL) {
		log_error("state_file %s: out of memory", path);
		return false;
	}
	ok = write_atomic(path, doc);
	json_decref(doc);
	return ok;
}

pid_t
persist_write_async(const char *path, circuit_table *table, int64_t clock)
{
	pid_t pid = fork();

	if (pid < 0) {
		log_error("state_file: fork: %s", strerror(errno));
		return -1;
	}
	if (pid > 0)
		return pid;
	/* The child: the table as it was at fork, written, then gone
	 * without running the parent's exit handlers. */
	_exit(persist_write_sync(path, table, clock) ? 0 : 1);
}

/* Move a bad state file aside and say why. */
static void
move_aside(const char *path, int64_t clock, const char *why)
{
	char aside[4096];

	snprintf(aside, sizeof aside, "%s.bad-%lld", path, (long long)clock);
	if (rename(path, aside) == 0)
		log_error("state_file %s: %s; moved aside to %s, starting with no circuits", path,
		    why, aside);
	else
		log_error("state_file %s: %s; cannot move it aside (%s), starting with no circuits",
		    path, why, strerror(errno));
}

/* Read one entry into view (strings point into entry). False with why. */
static bool
entry_read(const json_t *entry, ct_view *view, proto_ctx *declared, const char **name,
    proto_error *err)
{
	proto_node totals = proto_node_json(json_object_get(entry, "totals"));
	proto_node hold = proto_node_json(json_object_get(entry, "hold"));
	unsigned found;

	memset(view, 0, sizeof *view);
	view->hold.until = CB_TIME_NONE;
	if (!proto_get_name(entry, "name", name, err) ||
	    !proto_snapshot_from_json(entry, &view->snap, NULL, err) ||
	    !proto_ctx_from_json(entry, declared, err))
		return false;
	view->declared = declared;
	/* break_backoff's grown break (0: none; absent in older files). */
	if (!proto_get_int(entry, "grown_break_ms", 0, CB_DURATION_MAX, false,
		&view->snap.current_break_ms, NULL, err))
		return false;
	return circuit_json_totals_read(&totals, "totals", CIRCUIT_JSON_STRICT, &view->totals,
		   &found, err) &&
	    circuit_json_hold_read(&hold, "hold", CIRCUIT_JSON_STRICT, &view->hold, err);
}

uint64_t
persist_load(const char *path, circuit_table *table, int64_t clock)
{
	json_error_t jerr;
	json_t *doc, *circuits;
	uint64_t loaded = 0;
	proto_error err;
	char why[512];
	size_t i;

	if (access(path, F_OK) != 0 && errno == ENOENT) {
		log_info("state_file %s does not exist yet; starting with no circuits", path);
		return 0;
	}
	doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (doc == NULL) {
		snprintf(why, sizeof why, "cannot read: %s (line %d)", jerr.text, jerr.line);
		move_aside(path, clock, why);
		return 0;
	}
	circuits = json_object_get(doc, "circuits");
	if (!json_is_object(doc) || !json_is_string(json_object_get(doc, "format")) ||
	    strcmp(json_string_value(json_object_get(doc, "format")), "cbd-state") != 0 ||
	    !json_is_integer(json_object_get(doc, "version")) ||
	    json_integer_value(json_object_get(doc, "version")) != PERSIST_VERSION ||
	    !json_is_array(circuits)) {
		json_decref(doc);
		move_aside(path, clock, "not a cbd state file of version 1");
		return 0;
	}
	/* Check every entry before restoring any: a file is used whole. */
	for (i = 0; i < json_array_size(circuits); i++) {
		const json_t *entry = json_array_get(circuits, i);
		proto_ctx declared;
		const char *name;
		ct_view view;

		if (!json_is_object(entry) || !entry_read(entry, &view, &declared, &name, &err)) {
			snprintf(why, sizeof why, "circuit %zu is invalid: %s", i,
			    json_is_object(entry) ? err.message : "not an object");
			json_decref(doc);
			move_aside(path, clock, why);
			return 0;
		}
	}
	for (i = 0; i < json_array_size(circuits); i++) {
		const json_t *entry = json_array_get(circuits, i);
		proto_ctx declared;
		const char *name;
		ct_view view;
		ct_status status;

		entry_read(entry, &view, &declared, &name, &err);
		status = circuit_table_restore(table, name, &view, clock);
		if (status != CT_OK) {
			log_warning("state_file %s: %s; %zu circuits not restored", path,
			    circuit_table_status_text(status), json_array_size(circuits) - i);
			break;
		}
		loaded++;
	}
	json_decref(doc);
	return loaded;
}
