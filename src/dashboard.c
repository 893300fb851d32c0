/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dashboard.c — the dashboard's JSON and event texts (see dashboard.h).
 * Snapshots are encoded straight as text (encode.c), as list does. The
 * tick remembers each circuit's totals (a hash on the name; a circuit's
 * entry goes with its delete or reclaim event) to send what moved, and
 * visits only the DASHBOARD_TICK_CIRCUITS most recently used circuits (the
 * table keeps them in that order): a circuit further back had no calls.
 *
 * The history: what the tick found for at most DASHBOARD_HISTORY_CIRCUITS
 * circuits, kept for DASHBOARD_HISTORY_TICKS ticks in a ring per circuit
 * (hung on its rate entry), aligned with one ring of tick times. Only a
 * circuit with calls gets one; a ring written is zeroed lazily over the
 * ticks it had none; a ring that holds nothing (idle for the whole
 * window) goes at the end of a tick. When all are taken, the least
 * recently busy yields its ring to a newly busy circuit once it has had
 * no calls for DASHBOARD_HISTORY_YIELD_TICKS; else the newcomer is left
 * out: each tick counts them (stats: dashboard_history_left_out).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Out of memory in uthash must not exit cbd: the entry is dropped. */
#define HASH_NONFATAL_OOM 1
static int hash_oom;
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
#include <uthash.h>

#include "clock.h"
#include "daemon.h"
#include "dashboard.h"
#include "encode.h"
#include "stats.h"

struct rate_entry;

/* A circuit's last DASHBOARD_HISTORY_TICKS ticks: s[seq % TICKS] is tick
 * seq's counts when since_seq <= seq <= last_seq (else none, or 0). */
typedef struct history {
	struct history *prev, *next; /* by last calls, most recent first */
	struct rate_entry *owner;
	uint64_t since_seq, last_seq;
	uint32_t s[DASHBOARD_HISTORY_TICKS][DASHBOARD_HISTORY_FIELDS];
} history;

/* A circuit's totals at the last tick. */
typedef struct rate_entry {
	UT_hash_handle hh;
	uint64_t calls, failures, slow, rejected, refused;
	history *hist; /* NULL: none */
	char name[];
} rate_entry;

static rate_entry *rates;
static int64_t last_tick_ms; /* monotonic; 0: no tick yet */

/* The rings of ticks. */
static struct {
	uint64_t seq; /* the last tick's number (the first is 1) */
	int64_t at[DASHBOARD_HISTORY_TICKS]; /* realtime ms of tick seq % TICKS */
	history *head, *tail;
	uint64_t count;
} hs;

/* Take b's text (NULL when it ran out of memory). */
static char *
take(enc_buf *b, size_t *len)
{
	if (b->nomem) {
		enc_free(b);
		return NULL;
	}
	*len = b->len;
	return b->buf;
}

/* The compact snapshot of name (its own policy from cfg). */
static void
put_snapshot(enc_buf *b, const char *name, const ct_view *view, const cbd_conf *cfg, int64_t now,
    bool with_policy)
{
	proto_policy_sources sources;
	const char *preset;
	cb_policy policy;

	conf_policy(cfg, name, view->declared, &policy, &sources, &preset);
	encode_snapshot(b, name, view, &policy, preset, &sources, now, with_policy);
}

/* Whether the item b grew by since `before` fits *budget: kept (the
 * budget less), or cut off and *truncated set. */
static bool
item_fits(enc_buf *b, size_t before, size_t *budget, bool *truncated)
{
	if (b->len - before > *budget) {
		b->len = before;
		b->buf[before] = '\0';
		*truncated = true;
		return false;
	}
	*budget -= b->len - before;
	return true;
}

/* What /api/circuits' scrape keeps. */
typedef struct circuits_walk {
	size_t budget; /* bytes of circuits left */
	uint64_t count;
	bool truncated;
} circuits_walk;

static bool
circuits_visit(scrape *s, unsigned pass, const char *name, const ct_view *view)
{
	circuits_walk *w = s->arg;
	size_t before = s->out.len;

	(void)pass;
	if (w->count > 0)
		ENC_LIT(&s->out, ",");
	put_snapshot(&s->out, name, view, &cbd.conf, s->now, false);
	if (!item_fits(&s->out, before, &w->budget, &w->truncated))
		return false;
	w->count++;
	return true;
}

static void
circuits_end(scrape *s)
{
	circuits_walk *w = s->arg;

	ENC_LIT(&s->out, "],\"count\":");
	enc_int(&s->out, (int64_t)w->count);
	ENC_LIT(&s->out, ",\"total\":");
	enc_int(&s->out, (int64_t)s->total);
	if (w->truncated) {
		stats_limit_hit(STATS_LIMIT_LIST);
		ENC_LIT(&s->out, ",\"truncated\":true}");
	} else {
		ENC_LIT(&s->out, ",\"truncated\":false}");
	}
}

static const scrape_kind circuits_kind = {
	.passes = 1,
	.visit = circuits_visit,
	.end = circuits_end,
	.free = free,
};

bool
dashboard_circuits_scrape(scrape *s)
{
	circuits_walk *w = calloc(1, sizeof *w);

	if (w == NULL)
		return false;
	w->budget = (size_t)cbd.conf.max_output_bytes;
	/* A snapshot takes more than DASHBOARD_SNAPSHOT_MIN bytes: the walk
	 * stops where the budget must have run out. The most recent first,
	 * taken at once: a cut list keeps the open, half_open and held. */
	if (!scrape_init(s, &circuits_kind, w,
		(uint64_t)cbd.conf.max_output_bytes / DASHBOARD_SNAPSHOT_MIN + 1, false))
		return false;
	ENC_LIT(&s->out, "{\"now\":");
	enc_int(&s->out, s->now);
	ENC_LIT(&s->out, ",\"tick_ms\":");
	enc_int(&s->out, DASHBOARD_TICK_MS);
	ENC_LIT(&s->out, ",\"circuits\":[");
	return true;
}

char *
dashboard_change_text(const char *name, const ct_change *change, size_t *len)
{
	enc_buf b = { 0 };
	ct_view view;
	int64_t now = clock_realtime_ms();

	circuit_table_get(cbd.table, name, now, &view, NULL);
	ENC_LIT(&b, "event: change\ndata: {\"event\":\"change\",\"from\":\"");
	enc_puts(&b, breaker_state_name(change->from));
	ENC_LIT(&b, "\",\"snapshot\":");
	put_snapshot(&b, name, &view, &cbd.conf, now, false);
	ENC_LIT(&b, ",\"reason\":\"");
	enc_puts(&b, breaker_reason_text(change->reason));
	ENC_LIT(&b, "\",\"at\":");
	enc_int(&b, now);
	ENC_LIT(&b, "}\n\n");
	return take(&b, len);
}

char *
dashboard_delete_text(const char *name, const char *reason, size_t *len)
{
	enc_buf b = { 0 };

	ENC_LIT(&b, "event: delete\ndata: {\"event\":\"delete\",\"name\":");
	enc_name(&b, name);
	ENC_LIT(&b, ",\"reason\":\"");
	enc_puts(&b, reason);
	ENC_LIT(&b, "\",\"at\":");
	enc_int(&b, clock_realtime_ms());
	ENC_LIT(&b, "}\n\n");
	return take(&b, len);
}

char *
dashboard_policy_text(const char *name, const ct_view *view, const cbd_conf *cfg, size_t *len)
{
	enc_buf b = { 0 };
	int64_t now = clock_realtime_ms();

	ENC_LIT(&b, "event: policy\ndata: {\"event\":\"policy\",\"snapshot\":");
	put_snapshot(&b, name, view, cfg, now, true);
	ENC_LIT(&b, ",\"at\":");
	enc_int(&b, now);
	ENC_LIT(&b, "}\n\n");
	return take(&b, len);
}

/* What the tick's walk needs. */
typedef struct tick_walk {
	enc_buf *b; /* NULL: nothing sent */
	bool baseline; /* remember the totals only */
	size_t budget;
	uint64_t count, left_out;
	bool truncated;
} tick_walk;

static void
history_unlink(history *h)
{
	if (h->prev != NULL)
		h->prev->next = h->next;
	else
		hs.head = h->next;
	if (h->next != NULL)
		h->next->prev = h->prev;
	else
		hs.tail = h->prev;
	h->prev = h->next = NULL;
}

static void
history_free(history *h)
{
	history_unlink(h);
	h->owner->hist = NULL;
	free(h);
	hs.count--;
	stats.dashboard_history_circuits = hs.count;
}

static uint32_t
clamp32(uint64_t v)
{
	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* e had calls (or refusals) in tick hs.seq: keep them (false: no room). */
static bool
history_put(rate_entry *e, const uint64_t v[DASHBOARD_HISTORY_FIELDS])
{
	history *h = e->hist;
	uint32_t *slot;

	if (h == NULL && hs.count >= DASHBOARD_HISTORY_CIRCUITS) {
		/* Full: the least recently busy circuit yields its ring when
		 * it had no calls for DASHBOARD_HISTORY_YIELD_TICKS. */
		h = hs.tail;
		if (h == NULL || h->last_seq + DASHBOARD_HISTORY_YIELD_TICKS > hs.seq)
			return false;
		history_unlink(h);
		h->owner->hist = NULL;
		memset(h, 0, sizeof *h);
		h->owner = e;
		h->since_seq = hs.seq;
		h->last_seq = hs.seq;
		e->hist = h;
	} else if (h == NULL) {
		h = calloc(1, sizeof *h);
		if (h == NULL)
			return false;
		h->owner = e;
		h->since_seq = hs.seq;
		h->last_seq = hs.seq;
		e->hist = h;
		hs.count++;
		stats.dashboard_history_circuits = hs.count;
	} else {
		/* The ticks since the last write had none. */
		for (uint64_t q = h->last_seq + 1;
		     q < hs.seq && q + DASHBOARD_HISTORY_TICKS > hs.seq; q++)
			memset(h->s[q % DASHBOARD_HISTORY_TICKS], 0, sizeof h->s[0]);
		history_unlink(h);
	}
	slot = h->s[hs.seq % DASHBOARD_HISTORY_TICKS];
	for (int i = 0; i < DASHBOARD_HISTORY_FIELDS; i++)
		slot[i] = clamp32(v[i]);
	h->last_seq = hs.seq;
	h->next = hs.head;
	if (hs.head != NULL)
		hs.head->prev = h;
	hs.head = h;
	if (hs.tail == NULL)
		hs.tail = h;
	return true;
}

/* Append one rates row: [name, calls, failures, slow, rejected]. */
static void
put_rates(tick_walk *w, const char *name, uint64_t calls, uint64_t failures, uint64_t slow,
    uint64_t rejected)
{
	size_t before = w->b->len;

	if (w->truncated)
		return;
	if (w->count > 0)
		ENC_LIT(w->b, ",");
	ENC_LIT(w->b, "[");
	enc_name(w->b, name);
	ENC_LIT(w->b, ",");
	enc_int(w->b, (int64_t)calls);
	ENC_LIT(w->b, ",");
	enc_int(w->b, (int64_t)failures);
	ENC_LIT(w->b, ",");
	enc_int(w->b, (int64_t)slow);
	ENC_LIT(w->b, ",");
	enc_int(w->b, (int64_t)rejected);
	ENC_LIT(w->b, "]");
	if (item_fits(w->b, before, &w->budget, &w->truncated))
		w->count++;
}

static void
tick_visit(const char *name, const ct_view *view, void *arg)
{
	tick_walk *w = arg;
	const ct_totals *t = &view->totals;
	uint64_t calls = t->successes + t->failures + t->ignored;
	size_t len = strlen(name);
	rate_entry *e;

	HASH_FIND(hh, rates, name, len, e);
	if (e == NULL) {
		if (HASH_COUNT(rates) >= DASHBOARD_RATES_MAX)
			return;
		e = calloc(1, sizeof *e + len + 1);
		if (e == NULL)
			return;
		memcpy(e->name, name, len + 1);
		hash_oom = 0;
		HASH_ADD_KEYPTR(hh, rates, e->name, len, e);
		if (hash_oom) {
			free(e);
			return;
		}
		/* New since the last tick (created by its first calls: those
		 * are this interval's), unless this is the baseline. */
		if (w->baseline)
			goto keep;
	} else if (calls < e->calls || t->rejected < e->rejected ||
	    t->rejected_concurrency < e->refused) {
		/* Deleted and made again between two ticks: counts from 0. */
		e->calls = e->failures = e->slow = e->rejected = e->refused = 0;
	}
	if (!w->baseline &&
	    (calls != e->calls || t->rejected != e->rejected ||
		t->rejected_concurrency != e->refused)) {
		const uint64_t v[DASHBOARD_HISTORY_FIELDS] = { calls - e->calls,
			t->failures - e->failures, t->slow - e->slow, t->rejected - e->rejected,
			t->rejected_concurrency - e->refused };

		if (w->b != NULL && (calls != e->calls || t->rejected != e->rejected))
			put_rates(w, name, v[0], v[1], v[2], v[3]);
		if (!history_put(e, v))
			w->left_out++;
	}
keep:
	e->calls = calls;
	e->failures = t->failures;
	e->slow = t->slow;
	e->rejected = t->rejected;
	e->refused = t->rejected_concurrency;
}

void
dashboard_rates_begin(void)
{
	tick_walk w = { NULL, true, 0, 0, 0, false };

	dashboard_forget();
	circuit_table_foreach_recent(cbd.table, clock_realtime_ms(), DASHBOARD_TICK_CIRCUITS,
	    tick_visit, &w);
	last_tick_ms = clock_monotonic_ms();
}

void
dashboard_rates_drop(const char *name)
{
	rate_entry *e;

	HASH_FIND(hh, rates, name, strlen(name), e);
	if (e != NULL) {
		if (e->hist != NULL)
			history_free(e->hist);
		HASH_DEL(rates, e);
		free(e);
	}
}

char *
dashboard_tick(bool send, size_t *len)
{
	enc_buf b = { 0 };
	int64_t mono = clock_monotonic_ms(), now = clock_realtime_ms();
	int64_t t0 = clock_monotonic_us();
	tick_walk w = { send ? &b : NULL, false, (size_t)cbd.conf.max_output_bytes / 4, 0, 0,
		false };
	ct_stats ct;
	char *text = NULL;

	hs.seq++;
	hs.at[hs.seq % DASHBOARD_HISTORY_TICKS] = now;
	if (send) {
		circuit_table_stats(cbd.table, &ct);
		ENC_LIT(&b, "event: stats\ndata: {\"event\":\"stats\",\"now\":");
		enc_int(&b, now);
		ENC_LIT(&b, ",\"interval_ms\":");
		enc_int(&b, last_tick_ms > 0 ? mono - last_tick_ms : DASHBOARD_TICK_MS);
		ENC_LIT(&b, ",\"circuits\":");
		enc_int(&b, (int64_t)ct.circuits);
		ENC_LIT(&b, ",\"rates\":[");
	}
	circuit_table_foreach_recent(cbd.table, now, DASHBOARD_TICK_CIRCUITS, tick_visit, &w);
	/* Rings that hold nothing now (no calls for the whole window) go. */
	while (hs.tail != NULL && hs.tail->last_seq + DASHBOARD_HISTORY_TICKS <= hs.seq)
		history_free(hs.tail);
	stats.dashboard_history_left_out += w.left_out;
	if (send) {
		if (w.truncated)
			ENC_LIT(&b, "],\"truncated\":true}\n\n");
		else
			ENC_LIT(&b, "],\"truncated\":false}\n\n");
		text = take(&b, len);
	}
	last_tick_ms = mono;
	stats.dashboard_tick_us = (uint64_t)(clock_monotonic_us() - t0);
	return text;
}

/* Append h's samples: {"name", "since", "samples": [[t, calls, failures,
 * slow, rejected, refused], ...]} (ticks without any left out). */
static void
put_history(enc_buf *b, const history *h)
{
	uint64_t first =
	    hs.seq >= DASHBOARD_HISTORY_TICKS ? hs.seq - DASHBOARD_HISTORY_TICKS + 1 : 1;
	bool any = false;

	if (h->since_seq > first)
		first = h->since_seq;
	ENC_LIT(b, "{\"name\":");
	enc_name(b, h->owner->name);
	ENC_LIT(b, ",\"since\":");
	enc_int(b, hs.at[first % DASHBOARD_HISTORY_TICKS]);
	ENC_LIT(b, ",\"samples\":[");
	for (uint64_t q = first; q <= h->last_seq; q++) {
		const uint32_t *s = h->s[q % DASHBOARD_HISTORY_TICKS];

		if ((s[0] | s[1] | s[2] | s[3] | s[4]) == 0)
			continue;
		if (any)
			ENC_LIT(b, ",");
		ENC_LIT(b, "[");
		enc_int(b, hs.at[q % DASHBOARD_HISTORY_TICKS]);
		for (int i = 0; i < DASHBOARD_HISTORY_FIELDS; i++) {
			ENC_LIT(b, ",");
			enc_int(b, s[i]);
		}
		ENC_LIT(b, "]");
		any = true;
	}
	ENC_LIT(b, "]}");
}

char *
dashboard_history_text(size_t *len)
{
	enc_buf b = { 0 };
	size_t budget = (size_t)cbd.conf.max_output_bytes;
	uint64_t count = 0;
	bool truncated = false;

	ENC_LIT(&b, "{\"now\":");
	enc_int(&b, clock_realtime_ms());
	ENC_LIT(&b, ",\"tick_ms\":");
	enc_int(&b, DASHBOARD_TICK_MS);
	ENC_LIT(&b, ",\"ticks\":");
	enc_int(&b, DASHBOARD_HISTORY_TICKS);
	ENC_LIT(&b, ",\"last\":");
	enc_int(&b, hs.seq > 0 ? hs.at[hs.seq % DASHBOARD_HISTORY_TICKS] : 0);
	ENC_LIT(&b, ",\"circuits\":[");
	for (const history *h = hs.head; h != NULL; h = h->next) {
		size_t before = b.len;

		if (count > 0)
			ENC_LIT(&b, ",");
		put_history(&b, h);
		if (b.nomem)
			break;
		if (b.len - before > budget) {
			b.len = before;
			b.buf[before] = '\0';
			truncated = true;
			break;
		}
		budget -= b.len - before;
		count++;
	}
	ENC_LIT(&b, "],\"count\":");
	enc_int(&b, (int64_t)count);
	ENC_LIT(&b, ",\"total\":");
	enc_int(&b, (int64_t)hs.count);
	ENC_LIT(&b, ",\"left_out\":");
	enc_int(&b, (int64_t)stats.dashboard_history_left_out);
	if (truncated) {
		stats_limit_hit(STATS_LIMIT_LIST);
		ENC_LIT(&b, ",\"truncated\":true}");
	} else {
		ENC_LIT(&b, ",\"truncated\":false}");
	}
	return take(&b, len);
}

void
dashboard_forget(void)
{
	rate_entry *e, *tmp;

	HASH_ITER (hh, rates, e, tmp) {
		if (e->hist != NULL)
			history_free(e->hist);
		HASH_DEL(rates, e);
		free(e);
	}
	last_tick_ms = 0;
}
