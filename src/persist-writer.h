/* SPDX-License-Identifier: Apache-2.0 */
/*
 * persist-writer.h — the state file journal's writer: one long-lived
 * thread that owns the journal's descriptor and appends the batches it is
 * handed (already serialized by the main thread), one fdatasync per batch.
 *
 * Why a thread (and not a fork per append, nor a long-lived child over a
 * pipe): a fork of a daemon holding 100,000 circuits copies its page
 * tables, and every page the loop then writes is copied again on fault;
 * on a loaded 2-core box that cost, the child's scheduling and its exit
 * put a hold's durability at ~400 ms. A child fed over a pipe would take
 * the same serialized bytes the thread takes (its own copy of the table
 * goes stale at once), plus a copy through the pipe and a process to
 * watch; its one gain, being killable, is moot: a writer stuck in
 * fdatasync is in uninterruptible sleep either way. The thread touches
 * nothing of the daemon's (no table, no libevent, no log, no jansson): it
 * gets a path and bytes under a mutex, and says it is done by a byte on a
 * pipe that the main loop watches (libevent stays the main thread's, its
 * locking off). A compaction's fork copies only the main thread: the
 * writer holds no lock its child could need (malloc's are reset by
 * glibc's fork; the child never touches the writer's mutex). The queue is bounded at one batch in
 * flight: while it syncs, changes gather (each circuit once) in
 * persist.c's set and go together in the next batch (group commit).
 */
#ifndef CBD_PERSIST_WRITER_H
#define CBD_PERSIST_WRITER_H

#include <stdbool.h>
#include <stddef.h>

/* Start the thread (all signals blocked in it). The descriptor that
 * becomes readable when a batch is done, or -1 (errno set). */
int persist_writer_start(void);

/* Hand over a batch: append buf[0..len) to the regular file at path
 * (created 0600 when missing; never through a symlink, never waiting on
 * a FIFO), then fdatasync it (and its directory when the file is new).
 * The writer owns buf from now on (it frees it). False, buf freed, when a
 * batch is in flight or the writer is not running. */
bool persist_writer_submit(const char *path, char *buf, size_t len);

/* Is a batch in flight (handed over, its result not yet taken)? */
bool persist_writer_busy(void);

/* After the descriptor said so: take the finished batch's result. False
 * when none is finished yet; else *ok and, when not ok, what failed in
 * why ("cannot write PATH: ERROR"). */
bool persist_writer_done(bool *ok, char *why, size_t why_size);

/* Wait for the batch in flight (its result dropped), end the thread and
 * close its descriptors. Nothing when it is not running. */
void persist_writer_stop(void);

/* Write all of buf to fd (short writes and EINTR retried); false on an
 * error (errno says which). Safe from any thread. */
bool persist_write_all(int fd, const char *buf, size_t len);

/* fsync the directory holding path, so a new or renamed file's name
 * survives a crash. Safe from any thread. */
void persist_sync_dir(const char *path);

#endif
