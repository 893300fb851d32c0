/* SPDX-License-Identifier: Apache-2.0 */
/*
 * housekeeping.c — the periodic chores (see housekeeping.h) and the
 * state file's writers: the compaction's child process, the journal's
 * writer thread (persist-writer.h) and when each starts.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "clock.h"
#include "housekeeping.h"
#include "log-limit.h"
#include "log.h"
#include "events.h"
#include "persist.h"
#include "persist-writer.h"
#include "daemon.h"
#include "server-client.h"
#include "stats.h"

static struct event *tick_ev;
static struct event *child_ev;
/* The journal's writer thread says a batch is done; a change asks for an
 * append (activated, run once the loop's turn ends). */
static struct event *appended_ev, *append_ev;
/* The state file's writers: a compaction (a child) and an append (the
 * writer thread) may run at once (an append never waits for a
 * compaction: a change is durable within two batches, whatever the
 * number of circuits). */
static pid_t compactor = -1;
static int64_t compactor_started, appender_started; /* monotonic ms */
/* The last append failed: the next waits for the tick (no busy retry
 * against a failing disk). */
static bool append_failed;

/* A hold that ran out on the daemon's clock: logged like any change. */
static void
hold_ended(const char *name, const ct_change *change, void *arg)
{
	events_changed(name, change);
}

/* A writer's fork: the longest pause requests see; a failed one counted. */
static void
writer_started(pid_t pid, int64_t pause_start)
{
	int64_t pause = clock_monotonic_us() - pause_start;

	if ((uint64_t)pause > stats.state_write_pause_max_us)
		stats.state_write_pause_max_us = (uint64_t)pause;
	if (pid < 0) {
		log_limit_allow_kind(LOG_LIMIT_STATE_FILE, "");
		stats.state_write_failures++;
	}
}

/* Start an append when one is due and none is in flight. */
static void
append_maybe(void)
{
	int64_t pause_start = clock_monotonic_us(), pause;

	if (cbd.conf.state_file[0] == '\0' || cbd.state == DAEMON_STOPPING || append_failed ||
	    !persist_append_due())
		return;
	appender_started = clock_monotonic_ms();
	if (!persist_append_start(cbd.conf.state_file, cbd.table, PERSIST_APPEND_BATCH))
		return;
	/* Serializing the batch: the longest pause requests see. */
	pause = clock_monotonic_us() - pause_start;
	if ((uint64_t)pause > stats.state_write_pause_max_us)
		stats.state_write_pause_max_us = (uint64_t)pause;
}

/* Start the writes of the state file that are due and not running. */
static void
state_write_maybe(void)
{
	ct_stats ct;
	/* A full or read-only disk fails every write: its errors are logged
	 * within the log limit (the child logs them; the parent counts). */
	bool quiet = !log_limit_would_allow(LOG_LIMIT_STATE_FILE, "");

	/* Once stopping, housekeeping_stop() writes the file in process. */
	if (cbd.conf.state_file[0] == '\0' || cbd.state == DAEMON_STOPPING)
		return;
	circuit_table_stats(cbd.table, &ct);
	if (compactor <= 0 && persist_compaction_due(ct.circuits)) {
		int64_t pause_start = clock_monotonic_us();

		compactor_started = clock_monotonic_ms();
		compactor = persist_compact_async(cbd.conf.state_file, cbd.table,
		    clock_realtime_ms(), quiet);
		writer_started(compactor, pause_start);
		if (compactor < 0)
			persist_mark_dirty(); /* try again at the next tick */
	}
	append_failed = false;
	append_maybe();
}

/* A change was marked: append it once this turn of the loop ends. */
static void
append_wanted(void)
{
	if (append_ev != NULL)
		event_active(append_ev, EV_TIMEOUT, 1);
}

static void
housekeeping_append(evutil_socket_t fd, short what, void *arg)
{
	append_maybe();
}

/* The writer thread finished a batch: count it, start the next. */
static void
housekeeping_appended(evutil_socket_t fd, short what, void *arg)
{
	char why[4400];
	bool ok;

	if (!persist_writer_done(&ok, why, sizeof why))
		return;
	persist_appended(cbd.conf.state_file, ok);
	stats.state_writes += ok;
	if (ok) {
		stats.state_appends++;
		log_debug("state_file %s: changes appended in %lld ms", cbd.conf.state_file,
		    (long long)(clock_monotonic_ms() - appender_started));
		append_maybe();
		return;
	}
	stats.state_write_failures++;
	append_failed = true;
	if (log_limit_allow_kind(LOG_LIMIT_STATE_FILE, ""))
		log_error("state_file: %s", why);
}

static void
housekeeping_tick(evutil_socket_t fd, short what, void *arg)
{
	int64_t now = clock_realtime_ms();

	circuit_table_expire_holds(cbd.table, now, hold_ended, NULL);
	circuit_table_reclaim_idle(cbd.table, now, HOUSEKEEPING_RECLAIM_BUDGET);
	state_write_maybe();
	server_client_trim(); /* freed output buffers go back to the system */
}

/* Reap *pid (a writer) when it ended; true and its success in *ok. */
static bool
writer_reap_one(pid_t *pid, bool block, bool *ok)
{
	int status;
	pid_t got;

	if (*pid <= 0)
		return false;
	do
		got = waitpid(*pid, &status, block ? 0 : WNOHANG);
	while (got < 0 && errno == EINTR);
	if (got == 0)
		return false;
	*pid = -1;
	*ok = got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
	if (*ok) {
		stats.state_writes++;
		return true;
	}
	stats.state_write_failures++;
	/* The child logged its error when the limit allowed it: count it. */
	if (log_limit_allow_kind(LOG_LIMIT_STATE_FILE, "") && got > 0 && WIFSIGNALED(status))
		log_error("state_file: the writer process died of signal %d", WTERMSIG(status));
	return true;
}

/* Reap the compaction when it ended; count how it went. */
static void
writer_reap(bool block)
{
	bool ok;

	if (writer_reap_one(&compactor, block, &ok)) {
		persist_compacted(cbd.conf.state_file, ok);
		if (ok)
			log_debug("state_file %s written whole in %lld ms", cbd.conf.state_file,
			    (long long)(clock_monotonic_ms() - compactor_started));
	}
}

static void
housekeeping_sigchld(evutil_socket_t sig, short what, void *arg)
{
	writer_reap(false);
	state_write_maybe();
}

void
housekeeping_start(void)
{
	struct timeval tv = { 0, HOUSEKEEPING_INTERVAL_MS * 1000 };
	int64_t now = clock_realtime_ms();

	persist_track(cbd.conf.state_file[0] != '\0');
	if (cbd.conf.state_file[0] != '\0') {
		uint64_t n = persist_load(cbd.conf.state_file, cbd.table, now);

		if (n > 0)
			log_info("state_file %s: %llu circuits restored", cbd.conf.state_file,
			    (unsigned long long)n);
		/* Holds whose ttl passed while cbd was down end now. */
		circuit_table_expire_holds(cbd.table, now, hold_ended, NULL);
	}
	tick_ev = event_new(cbd.base, -1, EV_PERSIST, housekeeping_tick, NULL);
	child_ev = evsignal_new(cbd.base, SIGCHLD, housekeeping_sigchld, NULL);
	if (tick_ev == NULL || child_ev == NULL || event_add(tick_ev, &tv) != 0 ||
	    event_add(child_ev, NULL) != 0)
		fatal("cannot start the housekeeping timer");
	if (cbd.conf.state_file[0] != '\0') {
		int done_fd = persist_writer_start();

		if (done_fd < 0)
			fatal("cannot start the state file's writer thread: %s", strerror(errno));
		appended_ev =
		    event_new(cbd.base, done_fd, EV_READ | EV_PERSIST, housekeeping_appended, NULL);
		append_ev = event_new(cbd.base, -1, 0, housekeeping_append, NULL);
		if (appended_ev == NULL || append_ev == NULL || event_add(appended_ev, NULL) != 0)
			fatal("cannot start the state file's writer thread");
		persist_on_change(append_wanted);
	}
}

void
housekeeping_stop(void)
{
	if (tick_ev != NULL)
		event_del(tick_ev);
	/* The file is written in process next, from the newest table: a
	 * compaction still running (perhaps stuck on a slow disk) is not
	 * waited for. The journal's writer finishes its batch (small; the
	 * whole write next waits on the same disk anyway) and ends, so that
	 * no journal is appended to after the whole write removes them. */
	if (compactor > 0) {
		kill(compactor, SIGKILL);
		while (waitpid(compactor, NULL, 0) < 0 && errno == EINTR)
			;
		compactor = -1;
	}
	persist_on_change(NULL);
	persist_writer_stop();
	if (appended_ev != NULL)
		event_del(appended_ev);
	if (cbd.conf.state_file[0] == '\0' || cbd.table == NULL)
		return;
	if (persist_write_sync(cbd.conf.state_file, cbd.table, clock_realtime_ms()))
		stats.state_writes++;
	else
		stats.state_write_failures++;
}

void
housekeeping_free(void)
{
	if (tick_ev != NULL)
		event_free(tick_ev);
	if (child_ev != NULL)
		event_free(child_ev);
	if (appended_ev != NULL)
		event_free(appended_ev);
	if (append_ev != NULL)
		event_free(append_ev);
	tick_ev = child_ev = appended_ev = append_ev = NULL;
	persist_on_change(NULL);
	persist_writer_stop();
	persist_clean();
	compactor = -1;
	append_failed = false;
}
