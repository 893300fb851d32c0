/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.h — cbd's counters: connections, requests and errors by op and
 * by code, and one counter per limit hit: what everyone bumps. Reported
 * by stats-report.c (the stats op) and metrics.c.
 */
#ifndef CBD_STATS_H
#define CBD_STATS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "circuit-table.h"
#include "clock.h"
#include "proto.h"

/* Most ops the table may hold (checked when the table is built). */
#define STATS_OP_MAX 32

/* The named limits; each hit counts once. */
typedef enum stats_limit {
	STATS_LIMIT_LINE = 0, /* max_line_bytes: line_too_long */
	STATS_LIMIT_CONNECTIONS, /* max_connections: a client refused */
	STATS_LIMIT_OUTPUT, /* max_output_bytes: a client dropped */
	STATS_LIMIT_LIST, /* a list reply cut to fit max_output_bytes */
	STATS_LIMIT_SLOTS, /* max_slots: a slot refused */
	STATS_LIMIT_IDLE, /* client_idle_ms: an idle client closed */
	STATS_LIMIT_DESCRIPTORS, /* accept out of descriptors: a client refused */
	STATS_LIMIT_NOMEM, /* out of memory for a connection: it was dropped */
	STATS_LIMIT_LINGER, /* a closing client read nothing for linger: closed */
	STATS_LIMIT_LOG, /* a transition log line suppressed (rate limit) */
	STATS_LIMIT_LOG_CONFLICT, /* a policy_conflict warning suppressed */
	STATS_LIMIT_LOG_STATE_FILE, /* a state file error line suppressed */
	STATS_LIMIT_LOG_FLEET, /* a circuit script error line suppressed */
	STATS_LIMIT_WATCH_NAMES, /* max_watch_names: a watch refused */
	STATS_LIMIT_METRICS_CONNECTIONS, /* metrics_max_connections: a scraper closed */
	STATS_LIMIT_METRICS_CUT, /* a metrics op's text cut to fit max_output_bytes */
	STATS_LIMIT_TOTAL_OUTPUT, /* max_total_output_bytes: a client dropped */
	STATS_LIMIT_WAITERS, /* max_waiters: an allow answered at once, not waiting */
	STATS_LIMIT_DASHBOARD_CLIENTS, /* dashboard_max_clients: an event stream refused */
	STATS_LIMIT_COUNT,
} stats_limit;

typedef struct cbd_stats {
	int64_t started_at; /* ms since the epoch */
	int64_t started_mono; /* ms, monotonic */
	uint64_t connections_total;
	uint64_t connections_current;
	uint64_t requests;
	uint64_t op_requests[STATS_OP_MAX];
	uint64_t op_errors[STATS_OP_MAX];
	uint64_t errors[PROTO_CODE_COUNT];
	uint64_t limits[STATS_LIMIT_COUNT];
	uint64_t transitions;
	uint64_t policy_conflicts; /* requests whose ctx disagreed with the circuit */
	uint64_t noreply; /* requests answered with nothing (noreply: true) */
	uint64_t watch_events; /* event lines queued for watchers */
	uint64_t metrics_scrapes; /* GET /metrics answered */
	uint64_t dashboard_clients; /* dashboard event streams open now */
	uint64_t dashboard_events; /* event frames queued for dashboard streams */
	uint64_t dashboard_history_circuits; /* circuits with a history now */
	uint64_t dashboard_history_left_out; /* circuit-ticks with calls, no room in the history */
	uint64_t dashboard_tick_us; /* the last stats tick's cost */
	uint64_t state_writes; /* state file written (whole or appended to) */
	uint64_t state_appends; /* of which appends of changes to its journal */
	uint64_t state_write_failures;
	uint64_t state_write_pause_max_us; /* longest fork() for a state write */
	uint64_t fleet_slots; /* slots this cbd's connections hold in Redis now */
	uint64_t waiters; /* allows waiting for a ticket now (op-wait.c) */
	uint64_t reloads;
	uint64_t reload_failures;
	/* The last reload's result, stats' last_reload (NULL: none yet). */
	json_t *last_reload;
} cbd_stats;

/* The daemon's counters (cbd is single-threaded). */
extern cbd_stats stats;

/* Start counting: uptime is measured from now. */
void stats_init(void);

/* Count a limit hit. */
void stats_limit_hit(stats_limit limit);

/* The op table's names, for the reports (op_requests[i] is names[i]'s). */
void stats_name_ops(const char *const *names, size_t count);
const char *const *stats_op_names(size_t *count);

/* A limit's name in stats.limits and cbd_limit_hits_total ("max_slots"). */
const char *stats_limit_name(stats_limit limit);

#endif
