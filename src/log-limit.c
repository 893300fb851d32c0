/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log-limit.c — keeps circuit transitions from flooding the log: at most
 * LOG_LIMIT_BURST lines per circuit per window, the rest counted and
 * summarized in one line per circuit when the window ends. Memory is
 * bounded: LOG_LIMIT_NAMES_MAX circuits per window, then one shared count.
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
#include "stats.h"

/* One circuit that changed state in the current window. */
typedef struct limit_entry {
	UT_hash_handle hh;
	uint64_t logged;
	uint64_t suppressed;
	char name[];
} limit_entry;

static limit_entry *entries;
static size_t entry_count;
static uint64_t others_suppressed; /* circuits past LOG_LIMIT_NAMES_MAX */
static int64_t window_start; /* monotonic ms; 0: not yet known */

/* Count one suppressed line. */
static bool
suppress(uint64_t *counter)
{
	(*counter)++;
	stats_limit_hit(STATS_LIMIT_LOG);
	return false;
}

bool
log_limit_allow(const char *name)
{
	limit_entry *e;
	size_t len = strlen(name);

	HASH_FIND(hh, entries, name, len, e);
	if (e == NULL) {
		if (entry_count >= LOG_LIMIT_NAMES_MAX)
			return suppress(&others_suppressed);
		e = malloc(sizeof *e + len + 1);
		if (e == NULL)
			return true; /* not tracked: logged */
		memcpy(e->name, name, len + 1);
		e->logged = e->suppressed = 0;
		hash_oom = 0;
		HASH_ADD_KEYPTR(hh, entries, e->name, len, e);
		if (hash_oom) {
			free(e);
			return true;
		}
		entry_count++;
	}
	if (e->logged >= LOG_LIMIT_BURST)
		return suppress(&e->suppressed);
	e->logged++;
	return true;
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
		char quoted[LOG_QUOTE_SIZE];

		if (e->suppressed > 0)
			log_info("suppressed %llu transitions of %s in the last %lld s",
			    (unsigned long long)e->suppressed,
			    log_quote(e->name, quoted, sizeof quoted), (long long)secs);
	}
	if (others_suppressed > 0)
		log_info("suppressed %llu transitions of other circuits (more than %d changed) in "
			 "the last %lld s",
		    (unsigned long long)others_suppressed, LOG_LIMIT_NAMES_MAX, (long long)secs);
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
	others_suppressed = 0;
}
