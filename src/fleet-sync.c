/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-sync.c — fleet mode: keeping this host and the fleet in step (see
 * fleet-sync.h). Events from other cbds refresh this host's copy; after an
 * outage, an operator's release, delete or unheld set_state made here
 * while Redis was away is written back, then the circuits that opened or
 * were held here are merged. A Redis that lost the fleet's data (or is
 * another server after a failover) is re-seeded from this host's whole
 * copy: every hold, open and half_open circuit (the script's merge with
 * reseed decides between hosts re-seeding at once).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "circuit-json.h"
#include "clock.h"
#include "daemon.h"
#include "events.h"
#include "fleet-copy.h"
#include "fleet-sync.h"
#include "fleet.h"
#include "log.h"
#include "stats.h"

/* --- operator actions made while Redis is away --- */

/* What an operator did to one circuit on this host while Redis was away,
 * against the circuit as this host knew it before the first such action. */
typedef struct wb_entry {
	UT_hash_handle hh;
	fleet_wb_action action; /* the last action (see wb_note) */
	cb_state state; /* FLEET_WB_SET_STATE: the state forced */
	int64_t at; /* the action's decision clock */
	fleet_wb_known known;
	char name[];
} wb_entry;

static wb_entry *wb_entries;
static uint64_t wb_count;
static bool wb_full_logged; /* FLEET_SYNC_WRITEBACK_MAX reached: logged */

/* The circuit as this host knows it (view) into k. */
void
fleet_sync_known_read(fleet_wb_known *k, const ct_view *view)
{
	k->opened_at = view->stored ? view->snap.opened_at : CB_TIME_NONE;
	k->held = view->hold.held;
	k->hold_state = view->hold.state;
	k->hold_since = view->hold.since;
	k->hold_by_uid = view->hold.by_uid;
	snprintf(k->hold_by_user, sizeof k->hold_by_user, "%s",
	    view->hold.held && view->hold.by_user != NULL ? view->hold.by_user : "");
}

/* Keep e (a new entry) unless FLEET_SYNC_WRITEBACK_MAX are kept already. */
static void
wb_add(wb_entry *e)
{
	fleet_stats *counters = (fleet_stats *)fleet_counters();

	if (wb_count >= FLEET_SYNC_WRITEBACK_MAX) {
		counters->writeback_dropped++;
		if (!wb_full_logged)
			log_warning("fleet: an operator changed %d circuits while redis is away; "
				    "changes to more are not written back",
			    FLEET_SYNC_WRITEBACK_MAX);
		wb_full_logged = true;
		free(e);
		return;
	}
	HASH_ADD_KEYPTR(hh, wb_entries, e->name, strlen(e->name), e);
	wb_count++;
}

static void
wb_remove(wb_entry *e)
{
	HASH_DEL(wb_entries, e);
	wb_count--;
}

/* Remember an operator's action on name (before: the circuit before it).
 * hold_placed: a held set_state, which merge writes back; it is noted
 * only when it replaced a hold (as a release of that one). Every noted
 * action ends the hold the circuit had, so a later release ends a hold
 * placed here since, which the fleet never had: the earlier action stays.
 * A later delete or unheld set_state supersedes the earlier action; what
 * the fleet must match stays what this host knew before the first. */
void
fleet_sync_note(const char *name, fleet_wb_action action, cb_state state, int64_t at,
    const fleet_wb_known *before, bool hold_placed)
{
	size_t len = strlen(name);
	wb_entry *e;

	HASH_FIND(hh, wb_entries, name, len, e);
	if (hold_placed) {
		if (e != NULL || !before->held)
			return;
		action = FLEET_WB_RELEASE;
	}
	if (e != NULL) {
		if (action != FLEET_WB_RELEASE) {
			e->action = action;
			e->state = state;
			e->at = at;
		}
		return;
	}
	if (action == FLEET_WB_RELEASE && !before->held)
		return; /* nothing released */
	e = calloc(1, sizeof *e + len + 1);
	if (e == NULL)
		return; /* not written back */
	memcpy(e->name, name, len + 1);
	e->action = action;
	e->state = state;
	e->at = at;
	e->known = *before;
	wb_add(e);
}

static void reseed_drop(void);

void
fleet_sync_free(void)
{
	wb_entry *e, *tmp;

	reseed_drop();
	fleet_copy_free();
	HASH_ITER (hh, wb_entries, e, tmp) {
		wb_remove(e);
		free(e);
	}
	wb_full_logged = false;
}

/* This host's copy of name becomes the fleet's circuit after a
 * write-back. The operator's action was logged and sent to watchers when
 * it was made here; a state the fleet's circuit has otherwise (the
 * write-back skipped, or the copy moved on since) is news here. A copy
 * the fleet no longer stores goes quietly: watchers saw the delete, and
 * a circuit that opened here since comes back by its merge. */
static void
wb_copy_refresh(const char *name, const json_t *circuit)
{
	const char *to = json_string_value(json_object_get(circuit, "state"));
	int64_t now = clock_realtime_ms();
	json_t *change = NULL;
	ct_change lapsed;
	ct_view local;

	circuit_table_get(cbd.table, name, now, &local, &lapsed);
	events_changed(name, &lapsed);
	if (to != NULL && strcmp(to, breaker_state_name(local.snap.state)) != 0)
		change = json_pack("{s:s, s:s, s:s}", "from", breaker_state_name(local.snap.state),
		    "to", to, "reason", "merged");
	fleet_copy_apply(name, circuit, change, now, false, NULL);
	json_decref(change);
}

/* The write-back of e answered (reply NULL: Redis went away again, e is
 * kept for the next recovery). */
static void
wb_done(const json_t *reply, void *arg)
{
	fleet_stats *counters = (fleet_stats *)fleet_counters();
	wb_entry *e = arg, *newer;

	if (reply == NULL) {
		HASH_FIND(hh, wb_entries, e->name, strlen(e->name), newer);
		if (newer == NULL) {
			wb_add(e);
			return;
		}
		/* e came first: as wb_note would have kept them, against what
		 * e knew (a release after e ended a hold placed since). */
		if (newer->action == FLEET_WB_RELEASE) {
			newer->action = e->action;
			newer->state = e->state;
			newer->at = e->at;
		}
		newer->known = e->known;
		free(e);
		return;
	}
	if (json_is_true(json_object_get(reply, "applied")))
		counters->written_back++;
	else {
		counters->writeback_skipped++;
		log_info("fleet: %s made on circuit \"%s\" while redis was away is not written "
			 "back: the fleet's circuit changed meanwhile",
		    e->action == FLEET_WB_RELEASE      ? "a release"
			: e->action == FLEET_WB_DELETE ? "a delete"
						       : "a forced state",
		    e->name);
	}
	wb_copy_refresh(e->name, json_object_get(reply, "circuit"));
	free(e);
}

/* The script call that writes e back. NULL: no memory. */
static json_t *
wb_args(const wb_entry *e)
{
	static const char *const actions[] = { [FLEET_WB_RELEASE] = "release",
		[FLEET_WB_DELETE] = "delete",
		[FLEET_WB_SET_STATE] = "set_state" };
	proto_policy_sources sources;
	const char *preset;
	cb_policy policy;
	ct_change change;
	ct_view view;
	json_t *known;
	const fleet_wb_known *k = &e->known;

	/* The policy only bounds how long Redis keeps a forced open circuit. */
	circuit_table_get(cbd.table, e->name, clock_realtime_ms(), &view, &change);
	events_changed(e->name, &change);
	conf_policy(&cbd.conf, e->name, view.declared, &policy, &sources, &preset);
	known = json_pack("{s:o, s:o}", "opened_at",
	    k->opened_at != CB_TIME_NONE ? json_integer(k->opened_at) : json_null(), "hold",
	    k->held ? json_pack("{s:s, s:I, s:I, s:s}", "state", breaker_state_name(k->hold_state),
			  "since", (json_int_t)k->hold_since, "by_uid", (json_int_t)k->hold_by_uid,
			  "by_user", k->hold_by_user)
		    : json_null());
	if (known == NULL)
		return NULL;
	return json_pack("{s:o, s:s, s:s, s:I, s:o}", "policy", proto_policy_flat_json(&policy),
	    "action", actions[e->action], "state", breaker_state_name(e->state), "at",
	    (json_int_t)e->at, "known", known);
}

/* Send every remembered action to Redis (recovery); those that cannot be
 * sent stay for the next. Returns how many were sent. */
static uint64_t
wb_send_all(void)
{
	wb_entry *e, *tmp;
	uint64_t sent = 0;

	HASH_ITER (hh, wb_entries, e, tmp) {
		json_t *args = wb_args(e);

		if (args != NULL &&
		    fleet_call_script("writeback", e->name, args, wb_done, e) != NULL) {
			wb_remove(e);
			sent++;
		}
		json_decref(args);
	}
	wb_full_logged = false;
	return sent;
}

/* --- events and recovery --- */

/* An event applied from the fleet: the circuit as a get read it after
 * the event arrived (events and this host's own replies travel on two
 * connections; reading the circuit again on the script connection keeps
 * this host's copy from going back to an older state). */
/* The change an event reports, unless it is no news to this host: a merge
 * or a hold placed again (another host re-seeding, or writing back after
 * an outage) that leaves this host's copy in the state it had, with the
 * hold it had. */
static const json_t *
event_change_news(const char *name, const json_t *circuit, const json_t *change)
{
	const char *reason = json_string_value(json_object_get(change, "reason"));
	const char *to = json_string_value(json_object_get(change, "to"));
	const json_t *since = json_object_get(json_object_get(circuit, "hold"), "since");
	ct_change lapsed;
	ct_view local;

	if (reason == NULL || to == NULL ||
	    (strcmp(reason, "merged") != 0 && strcmp(reason, "held") != 0))
		return change;
	circuit_table_get(cbd.table, name, clock_realtime_ms(), &local, &lapsed);
	events_changed(name, &lapsed);
	if (!local.stored || strcmp(to, breaker_state_name(local.snap.state)) != 0)
		return change;
	if (strcmp(reason, "merged") == 0)
		return NULL;
	return local.hold.held && json_is_integer(since) &&
		local.hold.since == json_integer_value(since)
	    ? NULL
	    : change;
}

static void
event_apply_now(const json_t *event, const json_t *circuit)
{
	const char *name = json_string_value(json_object_get(event, "name"));

	fleet_copy_apply(name, circuit,
	    event_change_news(name, circuit, json_object_get(event, "change")),
	    json_is_integer(json_object_get(event, "now"))
		? json_integer_value(json_object_get(event, "now"))
		: clock_realtime_ms(),
	    true, NULL);
}

/* An event being read again (event_apply), and fleet_seq() before. */
typedef struct event_read {
	json_t *event;
	uint64_t stamp;
} event_read;

static void
event_read_done(const json_t *reply, void *arg)
{
	event_read *er = arg;
	const json_t *event = er->event;
	const char *name = json_string_value(json_object_get(event, "name"));

	/* Redis gone meanwhile (or the read failed): the event's own view. */
	if (reply == NULL || json_is_true(json_object_get(reply, "mismatch")))
		event_apply_now(event, json_object_get(event, "circuit"));
	else
		/* Read after the event arrived: fresh (fleet_copy_fresh). */
		fleet_copy_apply_fresh(name, json_object_get(reply, "circuit"),
		    event_change_news(name, json_object_get(reply, "circuit"),
			json_object_get(event, "change")),
		    json_is_integer(json_object_get(event, "now"))
			? json_integer_value(json_object_get(event, "now"))
			: clock_realtime_ms(),
		    true, NULL, er->stamp);
	json_decref(er->event);
	free(er);
}

static void
event_apply(const json_t *event)
{
	const char *name = json_string_value(json_object_get(event, "name"));
	const json_t *circuit = json_object_get(event, "circuit");
	proto_policy_sources sources;
	proto_ctx declared;
	const char *preset, *why;
	cb_policy policy;
	json_t *args, *kept;
	event_read *er;

	if (name == NULL || !proto_name_valid(name, strlen(name), &why))
		return;
	/* This host's copy is stale until the read below answers. */
	fleet_copy_event_arrived(name);
	/* A get never creates and, sent without "declared", never
	 * mismatches; the policy only shapes what it reads. */
	fleet_copy_declared_parse(json_string_value(json_object_get(circuit, "declared")),
	    &declared);
	conf_policy(&cbd.conf, name, &declared, &policy, &sources, &preset);
	/* At the event's own clock (ctx.now of the request that caused it,
	 * else Redis's then): a read at another time could end holds or
	 * slots early. */
	args = json_pack("{s:o, s:O}", "policy", proto_policy_flat_json(&policy), "now",
	    json_object_get(event, "now") != NULL ? json_object_get(event, "now") : json_null());
	kept = json_deep_copy(event);
	er = kept != NULL ? malloc(sizeof *er) : NULL;
	if (er != NULL) {
		er->event = kept;
		er->stamp = fleet_seq();
	}
	if (args != NULL && er != NULL &&
	    fleet_call_script("get", name, args, event_read_done, er) != NULL) {
		json_decref(args);
		return;
	}
	free(er);
	json_decref(args);
	json_decref(kept);
	event_apply_now(event, circuit);
}

/* A merge's circuit name, and whether it re-seeds. */
typedef struct merge_arg {
	bool reseed;
	char name[];
} merge_arg;

/* A re-seed's merge waiting to be sent. */
typedef struct reseed_job {
	struct reseed_job *next;
	json_t *args;
	merge_arg *m;
} reseed_job;

/* A re-seed under way (see recover): its merges are sent at most
 * FLEET_SYNC_RESEED_WINDOW at a time (thousands sent at once would wait
 * in Redis past redis_timeout_ms, taking it for away again and again),
 * and requests wait for room until the last is answered. */
static struct {
	bool owed; /* not completed (Redis went again): done at the next recovery */
	uint64_t pending; /* merges to send or answer */
	unsigned inflight; /* merges sent, not answered */
	reseed_job *head, *tail; /* merges to send */
	uint64_t held, open; /* circuits to re-seed */
	bool failed; /* a merge was not answered */
	char why[FLEET_WHY_MAX];
} reseed;

static void merge_done(const json_t *reply, void *arg);

/* Forget the re-seed's merges not yet sent. */
static void
reseed_drop(void)
{
	while (reseed.head != NULL) {
		reseed_job *j = reseed.head;

		reseed.head = j->next;
		json_decref(j->args);
		free(j->m);
		free(j);
	}
	reseed.tail = NULL;
}

/* Every merge of a re-seed was answered (or none was needed). */
static void
reseed_finish(void)
{
	fleet_stats *counters = (fleet_stats *)fleet_counters();

	fleet_hold_requests(false);
	if (reseed.failed) {
		reseed.owed = true; /* sent again when Redis answers again */
		return;
	}
	reseed.owed = false;
	counters->reseeds++;
	counters->reseeded += reseed.held + reseed.open;
	log_warning("fleet: redis %s %s; re-seeded %llu circuits from this host's copy (%llu "
		    "held, %llu open or half_open)",
	    fleet_address(), reseed.why, (unsigned long long)(reseed.held + reseed.open),
	    (unsigned long long)reseed.held, (unsigned long long)reseed.open);
}

/* Send the re-seed's next merges while fewer than the window are in
 * Redis; a merge that cannot be sent (Redis gone) fails the re-seed. */
static void
reseed_pump(void)
{
	while (reseed.head != NULL && reseed.inflight < FLEET_SYNC_RESEED_WINDOW) {
		reseed_job *j = reseed.head;

		reseed.head = j->next;
		if (reseed.head == NULL)
			reseed.tail = NULL;
		if (fleet_call_script("merge", j->m->name, j->args, merge_done, j->m) != NULL) {
			reseed.inflight++;
		} else {
			reseed.failed = true;
			free(j->m);
			if (--reseed.pending == 0)
				reseed_finish();
		}
		json_decref(j->args);
		free(j);
	}
}

static void
merge_done(const json_t *reply, void *arg)
{
	merge_arg *m = arg;

	if (m->reseed) {
		/* The fleet's circuit may be another host's (a newer hold, a
		 * later trip): news here when its state differs. */
		if (reply != NULL)
			wb_copy_refresh(m->name, json_object_get(reply, "circuit"));
		else
			reseed.failed = true;
		reseed.inflight--;
		free(m);
		if (--reseed.pending == 0)
			reseed_finish();
		else
			reseed_pump();
		return;
	} else if (reply != NULL) {
		/* This host's copy was in that state already (it opened or was
		 * held here): refreshed, not logged or sent to watchers a
		 * second time. */
		fleet_copy_apply(m->name, json_object_get(reply, "circuit"), NULL,
		    clock_realtime_ms(), false, NULL);
	}
	free(m);
}

typedef struct merge_walk {
	int64_t since;
	int64_t now;
	bool reseed; /* every hold, open and half_open circuit */
	uint64_t sent;
	uint64_t held, open;
} merge_walk;

/* Write back one circuit that opened here during the outage, or that an
 * operator held here then. */
static void
merge_visit(const char *name, const ct_view *view, void *arg)
{
	merge_walk *w = arg;
	proto_policy_sources sources;
	const char *preset;
	cb_policy policy;
	bool held_here = view->hold.held && view->hold.since >= w->since;
	char *text;
	merge_arg *copy;
	json_t *args, *circuit;

	if (w->reseed) {
		/* Every live hold, open and half_open circuit. */
		held_here = view->hold.held &&
		    (view->hold.until == CB_TIME_NONE || view->hold.until > w->now);
		if (!held_here && view->snap.state != CB_STATE_OPEN &&
		    view->snap.state != CB_STATE_HALF_OPEN)
			return;
	} else if (!held_here &&
	    (view->snap.state != CB_STATE_OPEN || view->hold.held ||
		view->snap.opened_at < w->since)) {
		/* Neither opened here during the outage nor held here then. */
		return;
	}
	conf_policy(&cbd.conf, name, view->declared, &policy, &sources, &preset);
	text = fleet_copy_declared_text(view->declared);
	copy = malloc(sizeof *copy + strlen(name) + 1);
	if (copy != NULL) {
		copy->reseed = w->reseed;
		strcpy(copy->name, name);
	}
	/* The copy's snapshot, its raw current_break_ms and, when an operator
	 * held it here, the hold. */
	circuit = proto_snapshot_to_json(name, &view->snap, 0);
	if (circuit != NULL &&
	    (json_object_set_new(circuit, "current_break_ms",
		 json_integer(view->snap.current_break_ms)) != 0 ||
		(held_here &&
		    json_object_set_new(circuit, "hold", circuit_json_hold(&view->hold)) != 0))) {
		json_decref(circuit);
		circuit = NULL;
	}
	args = text != NULL && circuit != NULL
	    ? json_pack("{s:o, s:s, s:O, s:b}", "policy", proto_policy_flat_json(&policy),
		  "declared", text, "circuit", circuit, "reseed", w->reseed)
	    : NULL;
	json_decref(circuit);
	if (w->reseed && args != NULL && copy != NULL) {
		/* Sent by reseed_pump. */
		reseed_job *j = malloc(sizeof *j);

		if (j != NULL) {
			*j = (reseed_job){ .args = args, .m = copy };
			if (reseed.tail != NULL)
				reseed.tail->next = j;
			else
				reseed.head = j;
			reseed.tail = j;
			args = NULL;
			copy = NULL;
			w->sent++;
			if (held_here)
				w->held++;
			else
				w->open++;
		}
	} else if (args != NULL && copy != NULL &&
	    fleet_call_script("merge", name, args, merge_done, copy) != NULL) {
		copy = NULL;
		w->sent++;
		if (held_here)
			w->held++;
		else
			w->open++;
	}
	free(copy);
	free(text);
	json_decref(args);
}

static void
recover(int64_t outage_since, const char *reseed_why)
{
	merge_walk w = { .since = outage_since, .now = clock_realtime_ms() };
	fleet_stats *counters = (fleet_stats *)fleet_counters();
	uint64_t actions;

	/* A re-seed Redis did not answer whole is owed. */
	if (reseed_why != NULL)
		snprintf(reseed.why, sizeof reseed.why, "%s", reseed_why);
	w.reseed = reseed_why != NULL || reseed.owed;
	/* Merges of an earlier re-seed never sent: dropped (sent anew). */
	reseed_drop();
	/* An operator's actions first: a hold placed here after a release
	 * must find the released one gone, a circuit opened here after a
	 * delete must find the deleted one gone. */
	actions = wb_send_all();
	circuit_table_foreach_pinned(cbd.table, merge_visit, &w);
	counters->merged += w.sent;
	if (w.reseed) {
		/* Logged and counted once every merge is answered; requests
		 * wait until then. */
		reseed.pending = w.sent;
		reseed.inflight = 0;
		reseed.held = w.held;
		reseed.open = w.open;
		reseed.failed = false;
		if (w.sent == 0) {
			reseed_finish();
		} else {
			fleet_hold_requests(true);
			reseed_pump();
		}
		if (actions > 0)
			log_info("fleet: wrote back %llu releases, deletes or forced states made "
				 "while redis was away",
			    (unsigned long long)actions);
		return;
	}
	if (w.sent > 0 || actions > 0)
		log_info("fleet: wrote back %llu circuits that opened or were held and %llu "
			 "releases, deletes or forced states made while redis was away",
		    (unsigned long long)w.sent, (unsigned long long)actions);
}

bool
fleet_sync_start(void)
{
	return fleet_start(event_apply, recover);
}
