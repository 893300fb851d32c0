/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log-limit.c — keeps repeated lines (circuit transitions, policy
 * conflicts, state file and fleet script errors) from flooding the log:
 * at most LOG_LIMIT_BURST lines per kind and name per window, the rest
 * counted and summarized in one line per name when the window ends.
 * Memory is bounded: LOG_LIMIT_NAMES_MAX names per window, then one
 * shared count per kind.
 */
#include <stdlib.h>
#include <string.h>

/* Out of memory in uthash must not exit cbd: the add is undone. */
#define HASH_NONFATAL_OOM 1
static int hash_oom;
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
#include <uthash.h>

#include "log-limit.h"
#include "log.h"
#include "proto.h"
#include "stats.h"

/* The longest name tracked (a circuit's); longer ones are logged. */
#define LOG_LIMIT_NAME_MAX PROTO_NAME_MAX

/* One kind and name that logged in the current window. */
typedef struct limit_entry {
	UT_hash_handle hh;
	uint64_t logged;
	uint64_t suppressed;
	char key[]; /* the kind as one byte, then the name */
} limit_entry;

/* What each kind counts and says when it suppressed lines. */
static const struct {
	stats_limit limit;
	const char *what; /* "transitions of NAME" */
	bool named; /* the summary names the name */
} kinds[LOG_LIMIT_KIND_COUNT] = {
	[LOG_LIMIT_TRANSITION] = { STATS_LIMIT_LOG, "transitions", true },
	[LOG_LIMIT_POLICY_CONFLICT] = { STATS_LIMIT_LOG_CONFLICT, "policy_conflict warnings",
	    true },
	[LOG_LIMIT_STATE_FILE] = { STATS_LIMIT_LOG_STATE_FILE, "state_file errors", false },
	[LOG_LIMIT_FLEET_SCRIPT] = { STATS_LIMIT_LOG_FLEET, "circuit script errors", false },
};

static limit_entry *entries;
static size_t entry_count;
/* Lines of names past LOG_LIMIT_NAMES_MAX, per kind. */
static uint64_t others_suppressed[LOG_LIMIT_KIND_COUNT];
static int64_t window_start; /* monotonic ms; 0: not yet known */

/* Count one suppressed line. */
static bool
suppress(log_limit_kind kind, uint64_t *counter)
{
	(*counter)++;
	stats_limit_hit(kinds[kind].limit);
	return false;
}

/* The entry of kind and name into *e (NULL: none yet); key receives the
 * hash key, its length returned (0: the name is too long to track). */
static size_t
entry_find(log_limit_kind kind, const char *name, char *key, size_t key_size, limit_entry **e)
{
	size_t len = strlen(name);

	*e = NULL;
	if (len + 1 > key_size)
		return 0;
	key[0] = (char)('a' + kind);
	memcpy(key + 1, name, len);
	HASH_FIND(hh, entries, key, len + 1, *e);
	return len + 1;
}

bool
log_limit_would_allow(log_limit_kind kind, const char *name)
{
	char key[1 + LOG_LIMIT_NAME_MAX];
	limit_entry *e;

	if (entry_find(kind, name, key, sizeof key, &e) == 0)
		return true;
	if (e == NULL)
		return entry_count < LOG_LIMIT_NAMES_MAX;
	return e->logged < LOG_LIMIT_BURST;
}

bool
log_limit_allow_kind(log_limit_kind kind, const char *name)
{
	char key[1 + LOG_LIMIT_NAME_MAX];
	limit_entry *e;
	size_t len = entry_find(kind, name, key, sizeof key, &e);

	if (len == 0)
		return true; /* not tracked: logged */
	if (e == NULL) {
		if (entry_count >= LOG_LIMIT_NAMES_MAX)
			return suppress(kind, &others_suppressed[kind]);
		e = malloc(sizeof *e + len + 1);
		if (e == NULL)
			return true; /* not tracked: logged */
		memcpy(e->key, key, len);
		e->key[len] = '\0';
		e->logged = e->suppressed = 0;
		hash_oom = 0;
		HASH_ADD_KEYPTR(hh, entries, e->key, len, e);
		if (hash_oom) {
			free(e);
			return true;
		}
		entry_count++;
	}
	if (e->logged >= LOG_LIMIT_BURST)
		return suppress(kind, &e->suppressed);
	e->logged++;
	return true;
}

bool
log_limit_allow(const char *name)
{
	return log_limit_allow_kind(LOG_LIMIT_TRANSITION, name);
}

void
log_limit_flush(int64_t now)
{
	int64_t secs = window_start > 0 && now > window_start ? (now - window_start + 999) / 1000
							      : LOG_LIMIT_WINDOW_MS / 1000;
	limit_entry *e, *tmp;

	if (secs < 1)
		secs = 1;
	HASH_ITER (hh, entries, e, tmp) {
		log_limit_kind kind = (log_limit_kind)(e->key[0] - 'a');
		char quoted[LOG_QUOTE_SIZE];

		if (e->suppressed == 0)
			continue;
		if (kinds[kind].named)
			log_info("suppressed %llu %s of %s in the last %lld s",
			    (unsigned long long)e->suppressed, kinds[kind].what,
			    log_quote(e->key + 1, quoted, sizeof quoted), (long long)secs);
		else
			log_info("suppressed %llu %s in the last %lld s",
			    (unsigned long long)e->suppressed, kinds[kind].what, (long long)secs);
	}
	for (int k = 0; k < LOG_LIMIT_KIND_COUNT; k++)
		if (others_suppressed[k] > 0)
			log_info("suppressed %llu %s of other circuits (more than %d named) in "
				 "the last %lld s",
			    (unsigned long long)others_suppressed[k], kinds[k].what,
			    LOG_LIMIT_NAMES_MAX, (long long)secs);
	log_limit_free();
	window_start = now;
}

void
log_limit_free(void)
{
	limit_entry *e, *tmp;

	HASH_ITER (hh, entries, e, tmp) {
		HASH_DEL(entries, e);
		free(e);
	}
	entry_count = 0;
	memset(others_suppressed, 0, sizeof others_suppressed);
}
