/* SPDX-License-Identifier: Apache-2.0 */
/*
 * persist.h — durable state (protocol 2, §7): the circuits that are open,
 * half_open or held, with the policy their creating request declared and
 * their hold, kept in `state_file` across restarts.
 *
 * A change marks the state dirty; within PERSIST_DELAY_MS a forked child
 * writes the file (write, fsync, rename, fsync of the directory) from its
 * copy-on-write image of the table, so the daemon never waits on the disk
 * and pauses only for fork(). At shutdown the file is written in process.
 * At start the file is read; one that cannot be read or is invalid is moved
 * aside (FILE.bad-<ms>) and cbd starts empty.
 */
#ifndef CBD_PERSIST_H
#define CBD_PERSIST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "circuit-table.h"

/* A change is written at most this long after it happened. */
#define PERSIST_DELAY_MS 50
/* The file's format version (the "version" member). */
#define PERSIST_VERSION 1

/* Something the state file holds changed: a write is due. */
void persist_mark_dirty(void);
/* Is a write due? */
bool persist_dirty(void);
/* A write began (or the daemon starts over): none is due. */
void persist_clean(void);

/* Read path into table at start (clock: the daemon's). Never fails the
 * start: a bad file is moved aside and logged. Returns circuits loaded. */
uint64_t persist_load(const char *path, circuit_table *table, int64_t clock);

/* Write table's pinned circuits to path now, in this process (shutdown). */
bool persist_write_sync(const char *path, circuit_table *table, int64_t clock);

/* Start writing in a child; the pid, or -1 (logged) when fork failed. */
pid_t persist_write_async(const char *path, circuit_table *table, int64_t clock);

#endif
