/* SPDX-License-Identifier: Apache-2.0 */
/*
 * persist.c — the state file (see persist.h): its JSON form, atomic
 * whole writes in a forked child or in process, the journal's batches
 * (handed to persist-writer.c's thread), and loading at start.
 *
 * Format (version 1):
 *   {"format": "cbd-state", "version": 1, "written_at": ms,
 *    "circuits": [{<a snapshot's members>, "ctx": {<declared policy>},
 *                  "totals": {...}, "hold": null | {...},
 *                  "grown_break_ms": <break_backoff's break, 0: none>}, ...]}
 * Each entry is read back with the same codec as requests and snapshots.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
/* Out of memory in uthash must not exit cbd: the add is undone. */
#define HASH_NONFATAL_OOM 1
static int hash_oom;
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
#include <uthash.h>

#include "json-alloc.h"
#include "log.h"
#include "circuit-json.h"
#include "persist.h"
#include "persist-writer.h"
#include "proto.h"

/* A circuit whose change is not yet appended (or being appended). */
typedef struct changed_name {
	UT_hash_handle hh;
	char name[];
} changed_name;

/* Changed circuits not yet appended, and those the batch in flight
 * writes (due again if it fails). */
static changed_name *changed, *in_flight;
/* The generation whose journal the batch in flight goes to. */
static uint64_t in_flight_generation;
/* A state file is kept: changes are remembered (persist_track). */
static bool tracking;
/* Told when the first change since the last batch is marked. */
static void (*on_change)(void);
/* A compaction is due (after a failed one, or journals replayed). */
static bool compaction_due;
/* The generation new records go to, and the oldest one whose journal a
 * restart needs (the state file's own). */
static uint64_t generation, base_generation;
/* Records appended since the last compaction began. */
static uint64_t journal_records;
/* The generation the running compaction writes. */
static uint64_t compacting;
/* This write logs no error (the parent's log limit said so, §10). */
static bool quiet;

/* log_error unless this write is quiet. */
#define persist_error(...)                                                                         \
	do {                                                                                       \
		if (!quiet)                                                                        \
			log_error(__VA_ARGS__);                                                    \
	} while (0)

/* Add name to *set (nothing when it is there, or out of memory: then a
 * compaction is due instead). */
static void
set_add(changed_name **set, const char *name)
{
	size_t len = strlen(name);
	changed_name *n;

	HASH_FIND(hh, *set, name, len, n);
	if (n != NULL)
		return;
	n = malloc(sizeof *n + len + 1);
	if (n == NULL) {
		compaction_due = true;
		return;
	}
	memcpy(n->name, name, len + 1);
	hash_oom = 0;
	HASH_ADD_KEYPTR(hh, *set, n->name, len, n);
	if (hash_oom) {
		free(n);
		compaction_due = true;
	}
}

static void
set_free(changed_name **set)
{
	changed_name *n, *tmp;

	HASH_ITER (hh, *set, n, tmp) {
		HASH_DEL(*set, n);
		free(n);
	}
}

void
persist_track(bool on)
{
	tracking = on;
}

void
persist_mark_changed(const char *name)
{
	bool first = changed == NULL;

	if (!tracking)
		return;
	set_add(&changed, name);
	if (first && changed != NULL && on_change != NULL)
		on_change();
}

void
persist_on_change(void (*fn)(void))
{
	on_change = fn;
}

void
persist_mark_dirty(void)
{
	compaction_due = true;
}

bool
persist_append_due(void)
{
	return changed != NULL;
}

uint64_t
persist_pending(void)
{
	return (uint64_t)HASH_COUNT(changed) + (uint64_t)HASH_COUNT(in_flight);
}

bool
persist_compaction_due(uint64_t circuits)
{
	uint64_t most =
	    circuits > PERSIST_JOURNAL_MIN_RECORDS ? circuits : PERSIST_JOURNAL_MIN_RECORDS;

	return compaction_due || journal_records >= most;
}

void
persist_clean(void)
{
	set_free(&changed);
	set_free(&in_flight);
	compaction_due = false;
	journal_records = 0;
}

/* The journal of generation gen: path.journal-<gen> into buf; false when
 * it does not fit. */
static bool
journal_path(const char *path, uint64_t gen, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s.journal-%llu", path, (unsigned long long)gen);

	return n > 0 && (size_t)n < size;
}

/* Remove the journals of generations from..to-1. */
static void
journals_remove(const char *path, uint64_t from, uint64_t to)
{
	char jp[4096];

	for (uint64_t g = from; g < to; g++) {
		if (journal_path(path, g, jp, sizeof jp))
			unlink(jp);
	}
}

/* What the walk over pinned circuits builds. */
typedef struct persist_walk {
	json_t *circuits;
	bool nomem;
} persist_walk;

/* Is this circuit kept in the state file? Closed, unheld circuits with
 * slots are pinned only for their slots, which are not kept. */
static bool
kept(const ct_view *view)
{
	return view->snap.state != CB_STATE_CLOSED || view->hold.held;
}

/* A circuit's entry in the file (and in a journal's "set"); NULL when
 * out of memory. */
static json_t *
entry_json(const char *name, const ct_view *view)
{
	json_t *entry = proto_snapshot_to_json(name, &view->snap, 0);

	if (entry == NULL ||
	    json_object_set_new(entry, "ctx",
		view->declared != NULL ? proto_ctx_members_to_json(view->declared)
				       : json_object()) != 0 ||
	    json_object_set_new(entry, "totals", circuit_json_totals(&view->totals)) != 0 ||
	    json_object_set_new(entry, "hold", circuit_json_hold(&view->hold)) != 0 ||
	    json_object_set_new(entry, "grown_break_ms",
		json_integer(view->snap.current_break_ms)) != 0) {
		json_decref(entry);
		return NULL;
	}
	return entry;
}

static void
persist_visit(const char *name, const ct_view *view, void *arg)
{
	persist_walk *w = arg;
	json_t *entry;

	if (w->nomem || !kept(view))
		return;
	entry = entry_json(name, view);
	if (entry == NULL || json_array_append_new(w->circuits, entry) != 0) {
		w->nomem = true;
	}
}

/* The whole file as JSON; NULL when out of memory. */
static json_t *
state_to_json(circuit_table *table, int64_t clock, uint64_t gen)
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
	doc = json_pack("{s:s, s:i, s:I, s:I, s:o}", "format", "cbd-state", "version",
	    PERSIST_VERSION, "written_at", (json_int_t)clock, "generation", (json_int_t)gen,
	    "circuits", w.circuits);
	return doc;
}

/* Write doc to path atomically: a temp file beside it, fsync, rename. */
static bool
write_atomic(const char *path, const json_t *doc)
{
	char tmp[4096], *text;
	struct stat st;
	int fd, n;
	bool ok;

	n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
	if (n < 0 || (size_t)n >= sizeof tmp) {
		persist_error("state_file %s: path too long", path);
		return false;
	}
	/* The temp file is always created anew, never opened: whatever is
	 * at its path (a crashed writer's file, a FIFO that would block the
	 * open, a symlink that would be followed as root) is removed first,
	 * and O_EXCL | O_NOFOLLOW | O_NONBLOCK refuse anything put back in
	 * between without waiting or following. */
	if (unlink(tmp) != 0 && errno != ENOENT) {
		persist_error("state_file: cannot remove the stale %s: %s", tmp, strerror(errno));
		return false;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
	if (fd < 0) {
		persist_error("state_file: cannot create %s: %s", tmp, strerror(errno));
		return false;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		persist_error("state_file: %s is not a regular file", tmp);
		close(fd);
		return false;
	}
	/* One buffer, one write: json_dumpfd would make a syscall per token. */
	text = json_dumps(doc, JSON_COMPACT);
	ok = text != NULL && persist_write_all(fd, text, strlen(text)) &&
	    persist_write_all(fd, "\n", 1) && fsync(fd) == 0;
	free(text);
	if (!ok)
		persist_error("state_file: cannot write %s: %s", tmp, strerror(errno));
	if (close(fd) != 0 && ok) {
		persist_error("state_file: cannot write %s: %s", tmp, strerror(errno));
		ok = false;
	}
	if (ok && rename(tmp, path) != 0) {
		persist_error("state_file: cannot rename %s to %s: %s", tmp, path, strerror(errno));
		ok = false;
	}
	if (!ok) {
		unlink(tmp);
		return false;
	}
	persist_sync_dir(path); /* the rename survives a crash */
	return true;
}

/* Write the whole file as generation gen (in this process). */
static bool
write_whole(const char *path, circuit_table *table, int64_t clock, uint64_t gen)
{
	json_t *doc = state_to_json(table, clock, gen);
	bool ok;

	if (doc == NULL) {
		persist_error("state_file %s: out of memory", path);
		return false;
	}
	ok = write_atomic(path, doc);
	json_decref(doc);
	return ok;
}

bool
persist_write_sync(const char *path, circuit_table *table, int64_t clock)
{
	uint64_t gen = generation + 1;

	if (!write_whole(path, table, clock, gen))
		return false;
	/* The whole state is in the file: the journals are history. */
	journals_remove(path, base_generation, gen);
	generation = base_generation = gen;
	journal_records = 0;
	return true;
}

/* The writer child's signals as a new process has them: default
 * actions, nothing blocked. */
static void
persist_child_signals(void)
{
	static const int reset[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD };
	sigset_t none;

	for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
		signal(reset[i], SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* fork() for a writer: the pid in the parent (-1: failed, logged), 0 in
 * the child (its signals reset). */
static pid_t
writer_fork(bool quiet_errors)
{
	pid_t pid;

	quiet = quiet_errors;
	pid = fork();
	if (pid < 0)
		persist_error("state_file: fork: %s", strerror(errno));
	if (pid != 0) {
		quiet = false;
		return pid;
	}
	/* The child: the table as it was at fork, written, then gone
	 * without running the parent's exit handlers. cbd's handlers only
	 * tell cbd's loop, which does not run here: the signals that stop a
	 * process stop this one. */
	persist_child_signals();
	return 0;
}

pid_t
persist_compact_async(const char *path, circuit_table *table, int64_t clock, bool quiet_errors)
{
	uint64_t gen = generation + 1;
	pid_t pid = writer_fork(quiet_errors);

	if (pid == 0)
		_exit(write_whole(path, table, clock, gen) ? 0 : 1);
	if (pid < 0)
		return -1;
	/* Records from now on go to the new generation's journal: the file
	 * being written holds everything before. Changes not yet appended
	 * stay due: should this write fail, the new journal has them. */
	compacting = generation = gen;
	compaction_due = false;
	journal_records = 0;
	return pid;
}

void
persist_compacted(const char *path, bool ok)
{
	if (!ok) {
		compaction_due = true;
		return;
	}
	journals_remove(path, base_generation, compacting);
	base_generation = compacting;
}

/* A batch's records into *out (malloc'd, *len bytes): a "set" or "del"
 * line for each of at most budget names of changed, which move to
 * in_flight. False when out of memory (changed as it was). */
static bool
batch_records(const char *path, circuit_table *table, size_t budget, char **out, size_t *len)
{
	size_t cap = 65536, n_taken = 0;
	char *buf = malloc(cap), *text;
	changed_name *n, *tmp;

	*len = 0;
	if (buf == NULL)
		goto nomem;
	/* A line of its own even after a torn one (replay skips empty lines). */
	buf[(*len)++] = '\n';
	HASH_ITER (hh, changed, n, tmp) {
		ct_view view;
		json_t *rec;
		size_t tlen;

		if (n_taken == budget)
			break;
		if (circuit_table_peek(table, n->name, &view) && kept(&view)) {
			json_t *entry = entry_json(n->name, &view);

			rec = entry != NULL ? json_pack("{s:o}", "set", entry) : NULL;
		} else
			rec = json_pack("{s:s}", "del", n->name);
		text = rec != NULL ? json_dumps(rec, JSON_COMPACT) : NULL;
		json_decref(rec);
		if (text == NULL)
			goto nomem;
		tlen = strlen(text);
		while (cap - *len < tlen + 1) {
			char *grown = realloc(buf, cap * 2);

			if (grown == NULL) {
				free(text);
				goto nomem;
			}
			buf = grown;
			cap *= 2;
		}
		memcpy(buf + *len, text, tlen);
		*len += tlen;
		buf[(*len)++] = '\n';
		free(text);
		n_taken++;
	}
	/* The names written move to in_flight (the same nodes). */
	HASH_ITER (hh, changed, n, tmp) {
		if (n_taken-- == 0)
			break;
		HASH_DEL(changed, n);
		hash_oom = 0;
		HASH_ADD_KEYPTR(hh, in_flight, n->name, strlen(n->name), n);
		if (hash_oom) {
			free(n); /* its record is in the batch: if that fails, a compaction */
			compaction_due = true;
		}
	}
	*out = buf;
	return true;
nomem:
	persist_error("state_file %s: out of memory", path);
	free(buf);
	return false;
}

bool
persist_append_start(const char *path, circuit_table *table, size_t budget)
{
	char jp[4096], *buf;
	size_t len;

	if (changed == NULL || in_flight != NULL || persist_writer_busy())
		return false;
	if (!journal_path(path, generation, jp, sizeof jp)) {
		persist_error("state_file %s: path too long", path);
		return false;
	}
	if (!batch_records(path, table, budget, &buf, &len))
		return false;
	in_flight_generation = generation;
	if (!persist_writer_submit(jp, buf, len)) {
		persist_appended(path, false);
		return false;
	}
	journal_records += HASH_COUNT(in_flight);
	return true;
}

void
persist_appended(const char *path, bool ok)
{
	changed_name *n, *tmp;

	/* A batch for a generation a compaction has made history since may
	 * have created its journal anew after the compaction removed it. */
	if (in_flight != NULL && in_flight_generation < base_generation)
		journals_remove(path, in_flight_generation, in_flight_generation + 1);
	if (ok) {
		set_free(&in_flight);
		return;
	}
	/* Due again (a name changed since stays once). */
	HASH_ITER (hh, in_flight, n, tmp)
		set_add(&changed, n->name);
	set_free(&in_flight);
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

/* Move every journal of path aside (its state file was bad: they
 * cannot be replayed on it). */
static void
journals_aside(const char *path, int64_t clock)
{
	char *copy = strdup(path), *copy2 = strdup(path), from[4096], to[4200];
	const char *dir, *base;
	struct dirent *e;
	size_t blen;
	DIR *d;

	if (copy == NULL || copy2 == NULL) {
		free(copy);
		free(copy2);
		return;
	}
	dir = dirname(copy);
	base = basename(copy2);
	blen = strlen(base);
	d = opendir(dir);
	while (d != NULL && (e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, base, blen) != 0 ||
		    strncmp(e->d_name + blen, ".journal-", 9) != 0 ||
		    strstr(e->d_name, ".bad-") != NULL)
			continue;
		snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
		snprintf(to, sizeof to, "%s.bad-%lld", from, (long long)clock);
		if (rename(from, to) == 0)
			log_error("state_file %s: its journal moved aside to %s", path, to);
	}
	if (d != NULL)
		closedir(d);
	free(copy);
	free(copy2);
}

/* Open path for reading without following a symlink into a FIFO's wait:
 * the fd of a regular file, -1 with errno (ENOENT: none), -2: not a
 * regular file. */
static int
open_regular(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -2;
	}
	return fd;
}

/* Parse the JSON document in fd (closed by the caller). Read whole into
 * memory first: jansson's json_loadfd reads a byte per read(2), which
 * was most of a restart's time (27 MB: 27 million system calls). */
static json_t *
load_fd(int fd, json_error_t *jerr)
{
	struct stat st;
	size_t cap, len = 0;
	char *buf;
	json_t *doc;

	if (fstat(fd, &st) != 0)
		return json_loadfd(fd, JSON_REJECT_DUPLICATES, jerr);
	cap = (size_t)st.st_size + 1;
	buf = malloc(cap);
	if (buf == NULL)
		return json_loadfd(fd, JSON_REJECT_DUPLICATES, jerr);
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *grown = realloc(buf, cap * 2);

			if (grown == NULL) {
				free(buf);
				snprintf(jerr->text, sizeof jerr->text, "out of memory");
				jerr->line = 0;
				return NULL;
			}
			buf = grown;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(jerr->text, sizeof jerr->text, "%s", strerror(errno));
			jerr->line = 0;
			free(buf);
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	doc = json_loadb(buf, len, JSON_REJECT_DUPLICATES, jerr);
	free(buf);
	return doc;
}

/* Read the state file into map (name -> entry) and its generation into
 * *gen: 1 read, 0 none there, -1 bad (moved aside). */
static int
snapshot_read(const char *path, int64_t clock, json_t *map, uint64_t *gen)
{
	json_error_t jerr;
	json_t *doc, *circuits, *g;
	proto_error err;
	char why[512];
	size_t i;
	/* O_NONBLOCK: a FIFO at path must not stop cbd from starting (it
	 * never refuses to start over its state file). */
	int fd = open_regular(path);

	if (fd == -1 && errno == ENOENT)
		return 0;
	if (fd < 0) {
		if (fd == -2)
			snprintf(why, sizeof why, "not a regular file");
		else
			snprintf(why, sizeof why, "cannot open: %s", strerror(errno));
		move_aside(path, clock, why);
		return -1;
	}
	doc = load_fd(fd, &jerr);
	close(fd);
	if (doc == NULL) {
		snprintf(why, sizeof why, "cannot read: %s (line %d)", jerr.text, jerr.line);
		move_aside(path, clock, why);
		return -1;
	}
	circuits = json_object_get(doc, "circuits");
	g = json_object_get(doc, "generation");
	if (!json_is_object(doc) || !json_is_string(json_object_get(doc, "format")) ||
	    strcmp(json_string_value(json_object_get(doc, "format")), "cbd-state") != 0 ||
	    !json_is_integer(json_object_get(doc, "version")) ||
	    json_integer_value(json_object_get(doc, "version")) != PERSIST_VERSION ||
	    !json_is_array(circuits) ||
	    (g != NULL && (!json_is_integer(g) || json_integer_value(g) < 0))) {
		json_decref(doc);
		move_aside(path, clock, "not a cbd state file of version 1");
		return -1;
	}
	*gen = g != NULL ? (uint64_t)json_integer_value(g) : 0;
	/* Check every entry before using any: a file is used whole. */
	for (i = 0; i < json_array_size(circuits); i++) {
		json_t *entry = json_array_get(circuits, i);
		proto_ctx declared;
		const char *name;
		ct_view view;

		if (!json_is_object(entry) || !entry_read(entry, &view, &declared, &name, &err)) {
			snprintf(why, sizeof why, "circuit %zu is invalid: %s", i,
			    json_is_object(entry) ? err.message : "not an object");
			json_decref(doc);
			json_object_clear(map);
			move_aside(path, clock, why);
			return -1;
		}
		json_object_set(map, name, entry);
	}
	json_decref(doc);
	return 1;
}

static int
gen_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* The generations (at least from) of path's journals, sorted, into
 * *gens (malloc'd); how many. */
static size_t
journals_list(const char *path, uint64_t from, uint64_t **gens)
{
	char *copy = strdup(path), *copy2 = strdup(path);
	size_t count = 0, cap = 0, blen;
	const char *dir, *base;
	struct dirent *e;
	DIR *d;

	*gens = NULL;
	if (copy == NULL || copy2 == NULL) {
		free(copy);
		free(copy2);
		return 0;
	}
	dir = dirname(copy);
	base = basename(copy2);
	blen = strlen(base);
	d = opendir(dir);
	while (d != NULL && (e = readdir(d)) != NULL) {
		const char *digits = e->d_name + blen + 9;
		char *end;
		unsigned long long g;

		if (strncmp(e->d_name, base, blen) != 0 ||
		    strncmp(e->d_name + blen, ".journal-", 9) != 0 || *digits < '0' ||
		    *digits > '9')
			continue;
		g = strtoull(digits, &end, 10);
		if (*end != '\0' || g < from)
			continue;
		if (count == cap) {
			uint64_t *grown = realloc(*gens, (cap ? cap * 2 : 8) * sizeof **gens);

			if (grown == NULL)
				break;
			*gens = grown;
			cap = cap ? cap * 2 : 8;
		}
		(*gens)[count++] = g;
	}
	if (d != NULL)
		closedir(d);
	free(copy);
	free(copy2);
	if (count > 0)
		qsort(*gens, count, sizeof **gens, gen_cmp);
	return count;
}

/* Replay the journal of gen onto map; false when there is none. Its
 * invalid lines (a torn last one after a crash) are skipped, counted. */
static bool
journal_replay(const char *path, uint64_t gen, json_t *map)
{
	char jp[4096], *line = NULL;
	uint64_t records = 0, bad = 0;
	size_t cap = 0;
	ssize_t n;
	FILE *f;
	int fd;

	if (!journal_path(path, gen, jp, sizeof jp))
		return false;
	fd = open_regular(jp);
	if (fd < 0)
		return false;
	f = fdopen(fd, "r");
	if (f == NULL) {
		close(fd);
		return false;
	}
	while ((n = getline(&line, &cap, f)) > 0) {
		json_t *rec, *set, *del;
		proto_ctx declared;
		proto_error err;
		const char *name;
		ct_view view;

		if (n == 1 && line[0] == '\n')
			continue;
		rec = json_loadb(line, (size_t)n, JSON_REJECT_DUPLICATES, NULL);
		set = json_object_get(rec, "set");
		del = json_object_get(rec, "del");
		if (json_is_object(set) && entry_read(set, &view, &declared, &name, &err)) {
			json_object_set(map, name, set);
			records++;
		} else if (json_is_string(del)) {
			json_object_del(map, json_string_value(del));
			records++;
		} else {
			bad++;
		}
		json_decref(rec);
	}
	free(line);
	fclose(f);
	if (bad > 0)
		log_warning("state_file %s: %llu invalid lines of %s skipped", path,
		    (unsigned long long)bad, jp);
	log_info("state_file %s: %llu changes replayed from %s", path, (unsigned long long)records,
	    jp);
	return true;
}

uint64_t
persist_load(const char *path, circuit_table *table, int64_t clock)
{
	/* The file's and the journals' values are made in bulk and given
	 * back at once below (json-alloc.h: millions of small values). */
	bool bulk = json_alloc_bulk_begin();
	json_t *map = json_object(), *entry;
	uint64_t loaded = 0, gen = 0, total;
	const char *key;
	int read;

	if (map == NULL) {
		log_error("state_file %s: out of memory; starting with no circuits", path);
		if (bulk)
			json_alloc_bulk_end();
		return 0;
	}
	read = snapshot_read(path, clock, map, &gen);
	if (read < 0)
		journals_aside(path, clock);
	generation = base_generation = gen;
	journal_records = 0;
	if (read >= 0) {
		/* The journals of its generation and the later ones, in order
		 * (there may be gaps: a generation whose compaction failed
		 * before anything was appended has none). */
		uint64_t *gens = NULL;
		size_t count = journals_list(path, gen, &gens);

		for (size_t i = 0; i < count; i++) {
			if (journal_replay(path, gens[i], map)) {
				compaction_due = true; /* start a fresh generation */
				generation = gens[i];
			}
		}
		free(gens);
	}
	if (read == 0 && !compaction_due)
		log_info("state_file %s does not exist yet; starting with no circuits", path);
	total = json_object_size(map);
	json_object_foreach (map, key, entry) {
		proto_ctx declared;
		proto_error err;
		const char *name;
		ct_view view;
		ct_status status;

		entry_read(entry, &view, &declared, &name, &err);
		status = circuit_table_restore(table, name, &view, clock);
		if (status != CT_OK) {
			log_warning("state_file %s: %s; %llu circuits not restored", path,
			    circuit_table_status_text(status),
			    (unsigned long long)(total - loaded));
			break;
		}
		loaded++;
	}
	/* In bulk, the blocks go back whole: no walk over every value. */
	if (bulk)
		json_alloc_bulk_end();
	else
		json_decref(map);
	return loaded;
}
