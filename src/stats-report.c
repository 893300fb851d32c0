/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats-report.c — the stats op's report (see stats-report.h): the
 * counters, the circuit table's figures and fleet mode's backend.
 */
#include "daemon.h"
#include "fleet.h"
#include "persist.h"
#include "server-client.h"
#include "stats-report.h"

/* obj[key] = v; false when out of memory. */
static bool
set_uint(json_t *obj, const char *key, uint64_t v)
{
	return json_object_set_new(obj, key, json_integer((json_int_t)v)) == 0;
}

/* reply.backend: memory, or redis with its health and counters. */
static bool
set_backend(json_t *reply)
{
	const fleet_stats *f = fleet_counters();
	json_t *b;

	if (!fleet_enabled())
		b = json_pack("{s:s, s:s}", "type", "memory", "health", "up");
	else
		b = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
			      "s:I, "
			      "s:I, s:I}",
		    "type", "redis", "health", fleet_health_name(fleet_state()), "redis",
		    cbd.conf.redis, "calls", (json_int_t)f->calls, "timeouts",
		    (json_int_t)f->timeouts, "errors", (json_int_t)f->errors, "local_answers",
		    (json_int_t)f->unavailable, "degraded", (json_int_t)f->degraded, "merged",
		    (json_int_t)f->merged, "written_back", (json_int_t)f->written_back,
		    "writeback_skipped", (json_int_t)f->writeback_skipped, "writeback_dropped",
		    (json_int_t)f->writeback_dropped, "events_in", (json_int_t)f->events_in,
		    "events_bad", (json_int_t)f->events_bad, "noscript", (json_int_t)f->noscript,
		    "queued", (json_int_t)f->queued);
	/* Redis losing its data, re-seeds, Sentinel failovers; the server in
	 * use (Sentinel: the master it named). */
	if (b != NULL && fleet_enabled() &&
	    (!set_uint(b, "data_lost", f->data_lost) || !set_uint(b, "reseeds", f->reseeds) ||
		!set_uint(b, "reseeded", f->reseeded) ||
		!set_uint(b, "master_switches", f->master_switches) ||
		!set_uint(b, "switch_timeouts", f->switch_timeouts) ||
		!set_uint(b, "restored", f->restored) ||
		!set_uint(b, "copy_answers", f->copy_answers) || !set_uint(b, "folds", f->folds) ||
		!set_uint(b, "coalesced", f->coalesced) ||
		!set_uint(b, "fold_full", f->fold_full) ||
		json_object_set_new(b, "event_channel",
		    json_string(fleet_events_live() ? "live" : "down")) != 0 ||
		json_object_set_new(b, "server", json_string(fleet_address())) != 0)) {
		json_decref(b);
		b = NULL;
	}
	return b != NULL && json_object_set_new(reply, "backend", b) == 0;
}

bool
stats_to_json(json_t *reply, const char *const *op_names, size_t op_count,
    const circuit_table *table)
{
	json_t *conns = json_object(), *ops = json_object(), *errors = json_object();
	json_t *limits = json_object();
	ct_stats ct;
	bool ok = conns != NULL && ops != NULL && errors != NULL && limits != NULL;

	circuit_table_stats(table, &ct);
	ok = ok && set_uint(conns, "current", stats.connections_current) &&
	    set_uint(conns, "total", stats.connections_total);
	for (size_t i = 0; ok && i < op_count; i++) {
		json_t *op = json_pack("{s:I, s:I}", "requests", (json_int_t)stats.op_requests[i],
		    "errors", (json_int_t)stats.op_errors[i]);

		ok = op != NULL && json_object_set_new(ops, op_names[i], op) == 0;
	}
	for (int c = PROTO_PARSE_ERROR; ok && c < PROTO_CODE_COUNT; c++)
		ok = set_uint(errors, proto_code_name((proto_code)c), stats.errors[c]);
	for (int l = 0; ok && l < STATS_LIMIT_COUNT; l++)
		ok = set_uint(limits, stats_limit_name((stats_limit)l), stats.limits[l]);
	ok = ok && set_uint(limits, "max_circuits", ct.capacity_refusals);
	if (!ok) {
		json_decref(conns);
		json_decref(ops);
		json_decref(errors);
		json_decref(limits);
		return false;
	}
	/* Each container is handed over once whatever failed before it
	 * (json_object_set_new takes its value even when it fails). */
	ok = json_object_set_new(reply, "connections", conns) == 0;
	ok = json_object_set_new(reply, "ops", ops) == 0 && ok;
	ok = json_object_set_new(reply, "errors", errors) == 0 && ok;
	ok = json_object_set_new(reply, "limits", limits) == 0 && ok;
	ok = ok && set_backend(reply);
	return ok &&
	    json_object_set_new(reply, "uptime_ms",
		json_integer(clock_monotonic_ms() - stats.started_mono)) == 0 &&
	    json_object_set_new(reply, "started_at", json_integer(stats.started_at)) == 0 &&
	    set_uint(reply, "circuits", ct.circuits) &&
	    set_uint(reply, "slots", ct.slots + stats.fleet_slots) &&
	    set_uint(reply, "slots_expired", ct.slots_expired) &&
	    set_uint(reply, "waiters", stats.waiters) &&
	    set_uint(reply, "requests", stats.requests) &&
	    set_uint(reply, "transitions", stats.transitions) &&
	    set_uint(reply, "policy_conflicts", stats.policy_conflicts) &&
	    set_uint(reply, "noreply", stats.noreply) &&
	    set_uint(reply, "watch_events", stats.watch_events) &&
	    set_uint(reply, "metrics_scrapes", stats.metrics_scrapes) &&
	    set_uint(reply, "dashboard_clients", stats.dashboard_clients) &&
	    set_uint(reply, "dashboard_events", stats.dashboard_events) &&
	    set_uint(reply, "dashboard_history_circuits", stats.dashboard_history_circuits) &&
	    set_uint(reply, "dashboard_history_left_out", stats.dashboard_history_left_out) &&
	    set_uint(reply, "dashboard_tick_us", stats.dashboard_tick_us) &&
	    set_uint(reply, "held", ct.held) && set_uint(reply, "policies", ct.policies) &&
	    set_uint(reply, "reclaimed_idle", ct.reclaimed_idle) &&
	    set_uint(reply, "reclaimed_capacity", ct.reclaimed_capacity) &&
	    set_uint(reply, "output_bytes", server_client_output_bytes()) &&
	    set_uint(reply, "output_bytes_peak", server_client_output_bytes_peak()) &&
	    set_uint(reply, "state_writes", stats.state_writes) &&
	    set_uint(reply, "state_appends", stats.state_appends) &&
	    set_uint(reply, "state_pending", persist_pending()) &&
	    set_uint(reply, "state_write_failures", stats.state_write_failures) &&
	    set_uint(reply, "state_write_pause_max_us", stats.state_write_pause_max_us) &&
	    set_uint(reply, "reloads", stats.reloads) &&
	    set_uint(reply, "reload_failures", stats.reload_failures) &&
	    json_object_set_new(reply, "last_reload",
		stats.last_reload != NULL ? json_deep_copy(stats.last_reload) : json_null()) == 0;
}
