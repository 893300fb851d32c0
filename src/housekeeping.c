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
#include "log.h"
#include "events.h"
#include "persist.h"
#include "daemon.h"
#include "stats.h"

static struct event *tick_ev;
static struct event *child_ev;
static pid_t writer = -1;
static int64_t writer_started; /* monotonic ms */

/* A hold that ran out on the daemon's clock: logged like any change. */
static void
hold_ended(const char *name, const ct_change *change, void *arg)
{
	events_changed(name, change);
}

/* Start a write of the state file when one is due and none runs. */
static void
state_write_maybe(void)
{
	int64_t pause_start, pause;

	/* Once stopping, housekeeping_stop() writes the file in process. */
	if (!persist_dirty() || writer > 0 || cbd.conf.state_file[0] == '\0' ||
	    cbd.state == DAEMON_STOPPING)
		return;
	persist_clean();
	writer_started = clock_monotonic_ms();
	pause_start = clock_monotonic_us();
	writer = persist_write_async(cbd.conf.state_file, cbd.table, clock_realtime_ms());
	/* fork() is the only pause requests see; keep the longest. */
	pause = clock_monotonic_us() - pause_start;
	if ((uint64_t)pause > stats.state_write_pause_max_us)
		stats.state_write_pause_max_us = (uint64_t)pause;
	if (writer < 0) {
		stats.state_write_failures++;
		persist_mark_dirty(); /* try again at the next tick */
	}
}

static void
housekeeping_tick(evutil_socket_t fd, short what, void *arg)
{
	int64_t now = clock_realtime_ms();

	circuit_table_expire_holds(cbd.table, now, hold_ended, NULL);
	circuit_table_reclaim_idle(cbd.table, now, HOUSEKEEPING_RECLAIM_BUDGET);
	state_write_maybe();
}

/* Reap the writer; count how it went. */
static void
writer_reap(bool block)
{
	int status;
	pid_t pid;

	if (writer <= 0)
		return;
	do
		pid = waitpid(writer, &status, block ? 0 : WNOHANG);
	while (pid < 0 && errno == EINTR);
	if (pid == 0)
		return;
	writer = -1;
	if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		stats.state_writes++;
		log_debug("state_file %s written in %lld ms", cbd.conf.state_file,
		    (long long)(clock_monotonic_ms() - writer_started));
		return;
	}
	stats.state_write_failures++;
	persist_mark_dirty(); /* the next tick tries again */
	if (pid > 0 && WIFSIGNALED(status))
		log_error("state_file: the writer process died of signal %d", WTERMSIG(status));
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
	writer_reap(true);
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
	writer = -1;
}
