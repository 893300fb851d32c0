/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.c — the one way a circuit's change goes out (see events.h): the
 * state file is marked due, watchers are told, a transition is counted and
 * logged (rate-limited). The ops and the chores report here and name none
 * of those.
 */
#include "clock.h"
#include "daemon.h"
#include "dashboard-sse.h"
#include "events.h"
#include "log-limit.h"
#include "log.h"
#include "persist.h"
#include "stats.h"
#include "watch.h"

void
events_changed(const char *name, const ct_change *change)
{
	char quoted[LOG_QUOTE_SIZE];

	if (change->reason == CB_REASON_NONE)
		return;
	/* States and holds are what the state file keeps and watchers see. */
	persist_mark_changed(name);
	watch_changed(name, change);
	dashboard_sse_changed(name, change);
	if (change->from == change->to)
		return;
	stats.transitions++;
	if (!log_limit_allow(name))
		return;
	{
		const log_field fields[] = { { "circuit", name, false },
			{ "from", breaker_state_name(change->from), false },
			{ "to", breaker_state_name(change->to), false },
			{ "reason", breaker_reason_text(change->reason), false } };

		log_fields(LOG_LEVEL_INFO, fields, 4, "circuit %s: %s -> %s (%s)",
		    log_quote(name, quoted, sizeof quoted), fields[1].value, fields[2].value,
		    fields[3].value);
	}
}

void
events_hold_logged(const char *name, const ct_change *change, const ct_view *view)
{
	char quoted[LOG_QUOTE_SIZE];

	if (change->reason == CB_REASON_NONE || change->from != change->to)
		return;
	{
		const log_field fields[] = { { "circuit", name, false },
			{ "hold", view->hold.held ? "held" : "hold ended", false },
			{ "reason", breaker_reason_text(change->reason), false } };

		log_fields(LOG_LEVEL_INFO, fields, 3, "circuit %s: %s (%s)",
		    log_quote(name, quoted, sizeof quoted), fields[1].value, fields[2].value);
	}
}

void
events_deleted(const char *name)
{
	persist_mark_changed(name);
	watch_deleted(name, "deleted");
	dashboard_sse_deleted(name, "deleted");
}

void
events_reclaimed(const char *name)
{
	/* An idle closed circuit: not in the state file. */
	watch_deleted(name, "reclaimed");
	dashboard_sse_deleted(name, "reclaimed");
}

/* What policy_changed compares; the walk's clock. */
typedef struct reload_confs {
	const cbd_conf *old, *fresh;
	int64_t now;
} reload_confs;

static bool
policy_changed(const char *name, const ct_view *view, void *arg)
{
	const reload_confs *rc = arg;

	return conf_policy_changed(rc->old, rc->fresh, name, view->declared);
}

/* A circuit the walk renewed: its watchers and the dashboard's browsers
 * get a policy event. */
static void
policy_renewed(const char *name, const ct_view *view, void *arg)
{
	const reload_confs *rc = arg;

	watch_policy_renewed(name, view, rc->fresh, rc->now);
	dashboard_sse_policy_renewed(name, view, rc->fresh);
}

void
events_policies_reloaded(const cbd_conf *old, const cbd_conf *fresh)
{
	reload_confs rc = { old, fresh, clock_realtime_ms() };
	bool told = watch_watchers() > 0 || dashboard_sse_clients() > 0;

	/* One walk of the table: renew, and tell whoever listens. */
	circuit_table_renew_policies(cbd.table, rc.now, policy_changed,
	    told ? policy_renewed : NULL, &rc);
	watch_policies_unstored(old, fresh, rc.now);
}
