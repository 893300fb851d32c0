/* SPDX-License-Identifier: Apache-2.0 */
/*
 * housekeeping.c — the periodic chores (see housekeeping.h) and the
 * state file's writer process.
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
#include "daemon.h"
#include "server-client.h"
#include "stats.h"

static struct event *tick_ev;
static struct event *child_ev;
/* The state file's writers: a compaction and an append may run at once
 * (an append never waits for a compaction: a change is durable within a
 * tick plus one append, whatever the number of circuits). */
static pid_t compactor = -1, appender = -1;
static int64_t compactor_started, appender_started; /* monotonic ms */

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
	if (appender <= 0 && persist_append_due()) {
		int64_t pause_start = clock_monotonic_us();

		appender_started = clock_monotonic_ms();
		appender = persist_append_async(cbd.conf.state_file, cbd.table, quiet);
		writer_started(appender, pause_start);
	}
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

/* Reap the writers that ended; count how they went. */
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
	if (writer_reap_one(&appender, block, &ok)) {
		persist_appended(ok);
		if (ok) {
			stats.state_appends++;
			log_debug("state_file %s: changes appended in %lld ms", cbd.conf.state_file,
			    (long long)(clock_monotonic_ms() - appender_started));
		}
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
}

void
housekeeping_stop(void)
{
	if (tick_ev != NULL)
		event_del(tick_ev);
	/* The file is written in process next, from the newest table: a
	 * writer still running (perhaps stuck on a slow disk) is not
	 * waited for. */
	for (int i = 0; i < 2; i++) {
		pid_t *pid = i == 0 ? &compactor : &appender;

		if (*pid <= 0)
			continue;
		kill(*pid, SIGKILL);
		while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
			;
		*pid = -1;
	}
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
	tick_ev = child_ev = NULL;
	persist_clean();
	compactor = appender = -1;
}
