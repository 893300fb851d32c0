/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c — cbd's counters (see stats.h); their report is
 * stats-report.c.
 */
#include "clock.h"
#include "stats.h"

cbd_stats stats;

static const char *const limit_names[STATS_LIMIT_COUNT] = {
	[STATS_LIMIT_LINE] = "max_line_bytes",
	[STATS_LIMIT_CONNECTIONS] = "max_connections",
	[STATS_LIMIT_OUTPUT] = "max_output_bytes",
	[STATS_LIMIT_LIST] = "list_truncated",
	[STATS_LIMIT_SLOTS] = "max_slots",
	[STATS_LIMIT_IDLE] = "client_idle_ms",
	[STATS_LIMIT_DESCRIPTORS] = "descriptors",
	[STATS_LIMIT_NOMEM] = "out_of_memory",
	[STATS_LIMIT_LINGER] = "closing_stalled",
	[STATS_LIMIT_LOG] = "transition_logs_suppressed",
	[STATS_LIMIT_LOG_CONFLICT] = "policy_conflict_logs_suppressed",
	[STATS_LIMIT_LOG_STATE_FILE] = "state_file_logs_suppressed",
	[STATS_LIMIT_LOG_FLEET] = "fleet_script_logs_suppressed",
	[STATS_LIMIT_WATCH_NAMES] = "max_watch_names",
	[STATS_LIMIT_METRICS_CONNECTIONS] = "metrics_max_connections",
	[STATS_LIMIT_METRICS_CUT] = "metrics_truncated",
	[STATS_LIMIT_TOTAL_OUTPUT] = "max_total_output_bytes",
	[STATS_LIMIT_WAITERS] = "max_waiters",
	[STATS_LIMIT_DASHBOARD_CLIENTS] = "dashboard_max_clients",
};

void
stats_init(void)
{
	json_decref(stats.last_reload);
	stats = (cbd_stats){ 0 };
	stats.started_at = clock_realtime_ms();
	stats.started_mono = clock_monotonic_ms();
}

static const char *const *op_names;
static size_t op_count;

void
stats_name_ops(const char *const *names, size_t count)
{
	op_names = names;
	op_count = count;
}

const char *const *
stats_op_names(size_t *count)
{
	*count = op_count;
	return op_names;
}

const char *
stats_limit_name(stats_limit limit)
{
	return (unsigned)limit < STATS_LIMIT_COUNT ? limit_names[limit] : "unknown";
}

void
stats_limit_hit(stats_limit limit)
{
	stats.limits[limit]++;
}
