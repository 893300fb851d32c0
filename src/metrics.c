/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c — the Prometheus text of cbd (see metrics.h) and its HTTP
 * endpoint. Daemon-wide series come from the stats counters; per-circuit
 * series from the circuit table, at most metrics_max_circuits circuits:
 * those that are open, half_open, held or hold slots first, then the most
 * recently used closed ones (cbd_metrics_circuits_omitted says how many
 * were left out).
 */
#include "config.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fleet.h"
#include "log.h"
#include "daemon.h"
#include "metrics.h"
#include "stats.h"

/* Append printf's text to t (nomem sticks once an allocation failed). */
static void __attribute__((format(printf, 2, 3))) put(enc_buf *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (int round = 0; round < 2 && !t->nomem; round++) {
		va_start(ap, fmt);
		n = vsnprintf(t->buf != NULL ? t->buf + t->len : NULL,
		    t->buf != NULL ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->nomem = true;
			return;
		}
		if (t->buf != NULL && (size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		if (!enc_reserve(t, (size_t)n))
			return;
	}
}

/* A label value with '\\', '"' and newlines escaped (names hold no other
 * control characters). */
static const char *
label(const char *value, char *buf, size_t size)
{
	size_t o = 0;

	for (const char *p = value; *p != '\0' && o + 3 < size; p++) {
		if (*p == '\\' || *p == '"') {
			buf[o++] = '\\';
			buf[o++] = *p;
		} else if (*p == '\n') {
			buf[o++] = '\\';
			buf[o++] = 'n';
		} else {
			buf[o++] = *p;
		}
	}
	buf[o] = '\0';
	return buf;
}

static void
family(enc_buf *t, const char *name, const char *type, const char *help)
{
	put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Fewer bytes than a circuit's cbd_circuit_state lines take (three of
 * at least 37 bytes with a one-byte name). */
#define METRICS_STATE_BYTES_MIN 100

/* The per-circuit families, one pass each. */
enum { FAMILY_STATE, FAMILY_CALLS, FAMILY_TRANSITIONS, FAMILY_IN_FLIGHT, FAMILY_RETRIES, FAMILIES };

/* A family's head, before its circuits. */
static void
series_pass(scrape *s, unsigned f)
{
	enc_buf *t = &s->out;

	if (f == FAMILY_STATE)
		family(t, "cbd_circuit_state", "gauge",
		    "1 for a circuit's current state, 0 for the others.");
	else if (f == FAMILY_CALLS)
		family(t, "cbd_circuit_calls_total", "counter",
		    "Calls reported for a circuit, by outcome; rejected: allows the "
		    "breaker "
		    "refused; rejected_concurrency: allows refused for want of a ticket "
		    "(max_concurrent); rejected_retry: retries the retry budget refused.");
	else if (f == FAMILY_TRANSITIONS)
		family(t, "cbd_circuit_transitions_total", "counter",
		    "State changes of a circuit since it was created.");
	else if (f == FAMILY_IN_FLIGHT)
		family(t, "cbd_circuit_in_flight", "gauge",
		    "Tickets a circuit with max_concurrent has handed out and not had back "
		    "(this host's).");
	else
		family(t, "cbd_circuit_retries_total", "counter",
		    "Retries granted for a circuit (allow with retry: true).");
}

/* A circuit's series of family f. */
static bool
series_visit(scrape *s, unsigned f, const char *name, const ct_view *view)
{
	enc_buf *t = &s->out;
	char l[2 * CT_NAME_MAX + 1];

	label(name, l, sizeof l);
	switch (f) {
	case FAMILY_STATE:
		for (int st = 0; st < CB_STATE_COUNT; st++)
			put(t, "cbd_circuit_state{name=\"%s\",state=\"%s\"} %d\n", l,
			    breaker_state_name((cb_state)st), view->snap.state == (cb_state)st);
		break;
	case FAMILY_CALLS:
		put(t,
		    "cbd_circuit_calls_total{name=\"%s\",outcome=\"success\"} %llu\n"
		    "cbd_circuit_calls_total{name=\"%s\",outcome=\"failure\"} %llu\n"
		    "cbd_circuit_calls_total{name=\"%s\",outcome=\"ignored\"} %llu\n"
		    "cbd_circuit_calls_total{name=\"%s\",outcome=\"slow\"} %llu\n"
		    "cbd_circuit_calls_total{name=\"%s\",outcome=\"rejected\"} %llu\n"
		    "cbd_circuit_calls_total{name=\"%s\",outcome=\"rejected_concurrency\"} %llu\n"
		    "cbd_circuit_calls_total{name=\"%s\",outcome=\"rejected_retry\"} %llu\n",
		    l, (unsigned long long)view->totals.successes, l,
		    (unsigned long long)view->totals.failures, l,
		    (unsigned long long)view->totals.ignored, l,
		    (unsigned long long)view->totals.slow, l,
		    (unsigned long long)view->totals.rejected, l,
		    (unsigned long long)view->totals.rejected_concurrency, l,
		    (unsigned long long)view->totals.rejected_retry);
		break;
	case FAMILY_IN_FLIGHT: {
		/* Only circuits with a limit (max_concurrent) have tickets. */
		cb_policy policy;

		conf_policy(&cbd.conf, name, view->declared, &policy, NULL, NULL);
		if (policy.max_concurrent > 0)
			put(t, "cbd_circuit_in_flight{name=\"%s\"} %llu\n", l,
			    (unsigned long long)view->in_flight);
		break;
	}
	case FAMILY_RETRIES:
		put(t, "cbd_circuit_retries_total{name=\"%s\"} %llu\n", l,
		    (unsigned long long)view->totals.retries);
		break;
	case FAMILY_TRANSITIONS:
		for (int from = 0; view->transitions != NULL && from < CB_STATE_COUNT; from++) {
			for (int to = 0; to < CB_STATE_COUNT; to++) {
				uint32_t n = view->transitions[from * CB_STATE_COUNT + to];

				if (from != to && n > 0)
					put(t,
					    "cbd_circuit_transitions_total{name=\"%s\",from=\"%s\","
					    "to=\"%s\"} %u\n",
					    l, breaker_state_name((cb_state)from),
					    breaker_state_name((cb_state)to), n);
			}
		}
		break;
	}
	return true;
}

/* Counts of open and half_open circuits (the others are closed). */
static void
state_visit(const char *name, const ct_view *view, void *arg)
{
	uint64_t *count = arg;

	count[view->snap.state]++;
}

/* After the families: how many circuits they left out. */
static void
series_end(scrape *s)
{
	family(&s->out, "cbd_metrics_circuits_omitted", "gauge",
	    "Circuits left out of the per-circuit series (metrics_max_circuits).");
	put(&s->out, "cbd_metrics_circuits_omitted %llu\n",
	    (unsigned long long)(s->total > s->listed ? s->total - s->listed : 0));
}

static const scrape_kind metrics_kind = {
	.passes = FAMILIES,
	.pass = series_pass,
	.visit = series_visit,
	.end = series_end,
};

/* The daemon-wide series. */
static void
metrics_head(enc_buf *t)
{
	uint64_t by_state[CB_STATE_COUNT] = { 0 };
	size_t op_count;
	const char *const *names = stats_op_names(&op_count);
	ct_stats ct;

	circuit_table_stats(cbd.table, &ct);
	family(t, "cbd_up", "gauge", "1 while cbd answers.");
	put(t, "cbd_up 1\n");
	family(t, "cbd_build_info", "gauge", "cbd's version, as a label.");
	put(t, "cbd_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
	family(t, "cbd_uptime_seconds", "gauge", "Seconds since cbd started.");
	put(t, "cbd_uptime_seconds %.3f\n",
	    (double)(clock_monotonic_ms() - stats.started_mono) / 1000.0);
	/* Closed circuits are not pinned: count the pinned ones. */
	circuit_table_foreach_pinned(cbd.table, state_visit, by_state);
	by_state[CB_STATE_CLOSED] =
	    ct.circuits - by_state[CB_STATE_OPEN] - by_state[CB_STATE_HALF_OPEN];
	family(t, "cbd_circuits", "gauge", "Circuits stored, by state.");
	for (int s = 0; s < CB_STATE_COUNT; s++)
		put(t, "cbd_circuits{state=\"%s\"} %llu\n", breaker_state_name((cb_state)s),
		    (unsigned long long)by_state[s]);
	family(t, "cbd_circuits_held", "gauge", "Circuits held by an operator.");
	put(t, "cbd_circuits_held %llu\n", (unsigned long long)ct.held);
	family(t, "cbd_requests_total", "counter", "Requests, by op.");
	for (size_t i = 0; i < op_count; i++)
		put(t, "cbd_requests_total{op=\"%s\"} %llu\n", names[i],
		    (unsigned long long)stats.op_requests[i]);
	family(t, "cbd_errors_total", "counter", "Error replies, by code.");
	for (int c = PROTO_PARSE_ERROR; c < PROTO_CODE_COUNT; c++)
		put(t, "cbd_errors_total{code=\"%s\"} %llu\n", proto_code_name((proto_code)c),
		    (unsigned long long)stats.errors[c]);
	family(t, "cbd_connections", "gauge", "Client connections open now.");
	put(t, "cbd_connections %llu\n", (unsigned long long)stats.connections_current);
	family(t, "cbd_dashboard_clients", "gauge",
	    "Dashboard event streams (GET /events) open now.");
	put(t, "cbd_dashboard_clients %llu\n", (unsigned long long)stats.dashboard_clients);
	family(t, "cbd_slots", "gauge", "Half-open slots (permits) held now.");
	put(t, "cbd_slots %llu\n", (unsigned long long)(ct.slots + stats.fleet_slots));
	if (fleet_enabled()) {
		const fleet_stats *f = fleet_counters();

		family(t, "cbd_backend_health", "gauge",
		    "Fleet mode: 1 for the health the link to Redis has now.");
		for (int h = FLEET_CONNECTING; h <= FLEET_DEGRADED; h++)
			put(t, "cbd_backend_health{health=\"%s\"} %d\n",
			    fleet_health_name((fleet_health)h), fleet_state() == (fleet_health)h);
		family(t, "cbd_backend_calls_total", "counter",
		    "Fleet mode: circuit script calls sent to Redis.");
		put(t, "cbd_backend_calls_total %llu\n", (unsigned long long)f->calls);
		family(t, "cbd_backend_local_answers_total", "counter",
		    "Fleet mode: circuit requests answered from this host's copy (Redis away).");
		put(t, "cbd_backend_local_answers_total %llu\n",
		    (unsigned long long)(f->unavailable + f->timeouts));
		family(t, "cbd_backend_timeouts_total", "counter",
		    "Fleet mode: calls Redis did not answer within redis_timeout_ms.");
		put(t, "cbd_backend_timeouts_total %llu\n", (unsigned long long)f->timeouts);
		family(t, "cbd_backend_degraded_total", "counter",
		    "Fleet mode: times the link to Redis was lost.");
		put(t, "cbd_backend_degraded_total %llu\n", (unsigned long long)f->degraded);
		family(t, "cbd_backend_events_total", "counter",
		    "Fleet mode: events from other cbds applied here.");
		put(t, "cbd_backend_events_total %llu\n", (unsigned long long)f->events_in);
		family(t, "cbd_backend_writebacks_total", "counter",
		    "Fleet mode: operator releases, deletes and forced states made while Redis "
		    "was away: written back, skipped (the fleet's circuit changed meanwhile), "
		    "dropped (too many to remember).");
		put(t, "cbd_backend_writebacks_total{result=\"applied\"} %llu\n",
		    (unsigned long long)f->written_back);
		put(t, "cbd_backend_writebacks_total{result=\"skipped\"} %llu\n",
		    (unsigned long long)f->writeback_skipped);
		put(t, "cbd_backend_writebacks_total{result=\"dropped\"} %llu\n",
		    (unsigned long long)f->writeback_dropped);
		family(t, "cbd_backend_data_lost_total", "counter",
		    "Fleet mode: times Redis was found to have lost the fleet's data (its epoch "
		    "key gone or new).");
		put(t, "cbd_backend_data_lost_total %llu\n", (unsigned long long)f->data_lost);
		family(t, "cbd_backend_reseeds_total", "counter",
		    "Fleet mode: re-seeds of Redis from this host's copy (after lost data or a "
		    "failover), completed.");
		put(t, "cbd_backend_reseeds_total %llu\n", (unsigned long long)f->reseeds);
		family(t, "cbd_backend_reseeded_circuits_total", "counter",
		    "Fleet mode: held, open and half_open circuits written by re-seeds.");
		put(t, "cbd_backend_reseeded_circuits_total %llu\n",
		    (unsigned long long)f->reseeded);
		family(t, "cbd_backend_master_switches_total", "counter",
		    "Fleet mode: times Redis Sentinel named another master.");
		put(t, "cbd_backend_master_switches_total %llu\n",
		    (unsigned long long)f->master_switches);
		family(t, "cbd_backend_restored_total", "counter",
		    "Fleet mode: circuits written back because Redis held an older version than "
		    "this host's copy (a replica promoted before it had the last changes).");
		put(t, "cbd_backend_restored_total %llu\n", (unsigned long long)f->restored);
		family(t, "cbd_backend_copy_answers_total", "counter",
		    "Fleet mode: allow and get answered from this host's fresh copy of a closed "
		    "circuit, without a script call.");
		put(t, "cbd_backend_copy_answers_total %llu\n",
		    (unsigned long long)f->copy_answers);
		family(t, "cbd_backend_coalesced_outcomes_total", "counter",
		    "Fleet mode: outcomes that went to Redis folded with others of their circuit "
		    "into one script call.");
		put(t, "cbd_backend_coalesced_outcomes_total %llu\n",
		    (unsigned long long)f->coalesced);
		family(t, "cbd_backend_fold_full_total", "counter",
		    "Fleet mode: folds of outcomes sent because they held the most one call "
		    "carries (FLEET_FOLD_MAX).");
		put(t, "cbd_backend_fold_full_total %llu\n", (unsigned long long)f->fold_full);
	}
	family(t, "cbd_reloads_total", "counter",
	    "Configuration reloads (SIGHUP): ok, or failed (a file with errors: the old one "
	    "stays).");
	put(t, "cbd_reloads_total{result=\"ok\"} %llu\n", (unsigned long long)stats.reloads);
	put(t, "cbd_reloads_total{result=\"failed\"} %llu\n",
	    (unsigned long long)stats.reload_failures);
	family(t, "cbd_state_file_writes_total", "counter",
	    "Writes of the state file (state_file): ok, or failed (what changed is not kept).");
	put(t, "cbd_state_file_writes_total{result=\"ok\"} %llu\n",
	    (unsigned long long)stats.state_writes);
	put(t, "cbd_state_file_writes_total{result=\"failed\"} %llu\n",
	    (unsigned long long)stats.state_write_failures);
	family(t, "cbd_limit_hits_total", "counter",
	    "Times a limit was hit, by limit (the config key, or stats.limits' name).");
	for (int l = 0; l < STATS_LIMIT_COUNT; l++)
		put(t, "cbd_limit_hits_total{limit=\"%s\"} %llu\n",
		    stats_limit_name((stats_limit)l), (unsigned long long)stats.limits[l]);
	put(t, "cbd_limit_hits_total{limit=\"max_circuits\"} %llu\n",
	    (unsigned long long)ct.capacity_refusals);
	family(t, "cbd_transitions_total", "counter", "State changes of all circuits.");
	put(t, "cbd_transitions_total %llu\n", (unsigned long long)stats.transitions);
	family(t, "cbd_circuits_reclaimed_total", "counter", "Idle circuits dropped.");
	put(t, "cbd_circuits_reclaimed_total %llu\n",
	    (unsigned long long)(ct.reclaimed_idle + ct.reclaimed_capacity));
}

/* Begin s over at most max circuits. */
static bool
scrape_begin(scrape *s, uint64_t max, bool in_steps)
{
	if (!scrape_init(s, &metrics_kind, NULL, max, in_steps))
		return false;
	metrics_head(&s->out);
	return true;
}

bool
metrics_scrape(scrape *s, bool in_steps)
{
	return scrape_begin(s, (uint64_t)cbd.conf.metrics_max_circuits, in_steps);
}

char *
metrics_text(size_t most, size_t *len)
{
	uint64_t max = (uint64_t)cbd.conf.metrics_max_circuits;
	scrape s;
	char *text;

	/* Text cut at `most` bytes needs no more circuits than the first
	 * family's lines of them fill (its names taken at once: fewer is
	 * quicker, and the text to the cut the same). */
	if (most > 0 && max > most / METRICS_STATE_BYTES_MIN + 1)
		max = most / METRICS_STATE_BYTES_MIN + 1;
	if (!scrape_begin(&s, max, false))
		return NULL;
	s.stop_after = most;
	scrape_run(&s);
	if (s.nomem || s.out.nomem) {
		scrape_free(&s);
		return NULL;
	}
	text = s.out.buf;
	*len = s.out.len;
	s.out = (enc_buf){ 0 };
	scrape_free(&s);
	return text;
}
