/* SPDX-License-Identifier: Apache-2.0 */
/*
 * persist.h — durable state (protocol 2, §7): the circuits that are open,
 * half_open or held, with the policy their creating request declared and
 * their hold, kept in `state_file` across restarts.
 *
 * Two kinds of write, neither of which makes the daemon wait on the disk:
 *  - an append: the circuits changed since the last one, one JSON line
 *    each, serialized by the main thread (at most PERSIST_APPEND_BATCH a
 *    batch) and handed to the journal's writer thread (persist-writer.c),
 *    which appends them to the journal (`state_file.journal-<generation>`)
 *    and fdatasyncs. A batch starts as soon as the loop's turn that made
 *    the first change ends, or the batch in flight is done; changes made
 *    meanwhile go together in the next (group commit). Its cost is the
 *    changes', whatever the number of circuits: a change is durable once
 *    the batch in flight and its own are synced (two fdatasyncs, while
 *    fewer than PERSIST_APPEND_BATCH circuits change meanwhile).
 *  - a compaction: the whole file (write, fsync, rename, fsync of the
 *    directory), of a new generation, in a forked child working on the
 *    copy-on-write image of the table; the journals of older generations
 *    are removed once it is in place. Due when the journal holds as many
 *    records as there are circuits (at least PERSIST_JOURNAL_MIN_RECORDS),
 *    after journals were replayed at start, and after a failed one.
 * At shutdown the whole file is written in process. At start the file is
 * read and the journals of its generation and later ones are replayed; a
 * file that cannot be read or is invalid is moved aside (FILE.bad-<ms>)
 * with its journals, and cbd starts empty.
 */
#ifndef CBD_PERSIST_H
#define CBD_PERSIST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "circuit-table.h"

/* Records in one append at most: the loop pauses to serialize them
 * (stats.state_write_pause_max_us: 7 ms on a shared 2-core box while
 * 100,000 holds were placed at once; 9 ms with batches of 1,024). */
#define PERSIST_APPEND_BATCH 256
/* The file's format version (the "version" member). */
#define PERSIST_VERSION 1

/* A compaction is due when the journal holds this many records, or as
 * many as there are circuits if more. */
#define PERSIST_JOURNAL_MIN_RECORDS 4096

/* Circuit name changed (state, hold, deleted): its record is due. */
void persist_mark_changed(const char *name);
/* fn is called (in persist_mark_changed) when a record becomes due and
 * none was: the caller starts an append soon (NULL: none). */
void persist_on_change(void (*fn)(void));
/* A compaction (the whole file) is due. */
void persist_mark_dirty(void);
/* Changes are remembered for the journal only when cbd has a state file
 * (without one, the set of changed names would only grow). */
void persist_track(bool on);
/* Is an append due (changed circuits not yet written)? */
bool persist_append_due(void);
/* Changed circuits not yet in the journal: waiting for a batch, or in
 * the batch being written (stats.state_pending). */
uint64_t persist_pending(void);
/* Is a compaction due, with this many circuits stored? */
bool persist_compaction_due(uint64_t circuits);
/* Forget what is due (the daemon starts over). */
void persist_clean(void);

/* Read path (and its journals) into table at start (clock: the daemon's).
 * Never fails the start: a bad file is moved aside and logged. Returns
 * circuits loaded. */
uint64_t persist_load(const char *path, circuit_table *table, int64_t clock);

/* Write table's pinned circuits to path now, in this process (shutdown),
 * as a new generation; older journals are removed. */
bool persist_write_sync(const char *path, circuit_table *table, int64_t clock);

/* Start a compaction in a child; the pid, or -1 (logged) when fork
 * failed. quiet_errors: the write's errors are not logged (the caller's
 * log limit counts them). persist_compacted(pid's result) after it ends. */
pid_t persist_compact_async(const char *path, circuit_table *table, int64_t clock,
    bool quiet_errors);
/* The compaction ended (ok: it is in place). */
void persist_compacted(const char *path, bool ok);

/* Start an append: serialize the records of at most budget changed
 * circuits and hand them to the writer thread (persist-writer.h, started
 * by the caller). False when none is due, one is in flight, or it could
 * not start (logged; its circuits stay due). persist_appended(result)
 * once the writer says it is done. */
bool persist_append_start(const char *path, circuit_table *table, size_t budget);
/* The append in flight ended (not ok: its circuits are due again). */
void persist_appended(const char *path, bool ok);

#endif
