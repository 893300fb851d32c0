/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbctl-top.c — `cbctl top`: the circuits as a live table in the
 * terminal, open and held first, then by traffic. Owns the command's
 * model (a row per circuit, filled from a watch of all circuits and from a
 * periodic list whose totals give calls per second and the failure and
 * slow rates of the last interval), its screen (the alternate screen with
 * plain termios and ANSI escapes: no curses), its keys (q quits, / edits a
 * substring filter, j/k and the arrows scroll) and the terminal's
 * restoration (on exit, SIGINT, SIGTERM, SIGHUP, errors, a crash; Ctrl-Z
 * suspends). When stdout is not a terminal, or with --once, it prints
 * plain tables instead: one each interval (--once: one, then exit).
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uthash.h>

#include "cbctl.h"

/* How often the list and stats are read (the rates' interval) unless
 * --interval says; the bounds of --interval. */
#define TOP_INTERVAL_MS 2000
#define TOP_INTERVAL_MIN_MS 100
#define TOP_INTERVAL_MAX_MS 3600000
/* How often the screen is redrawn while a retry time counts down. */
#define TOP_TICK_MS 250
/* Circuits asked for per list page. */
#define TOP_LIST_PAGE 10000
/* Longest filter, in bytes. */
#define TOP_FILTER_MAX 128
/* The smallest screen drawn (a smaller one says so). */
#define TOP_MIN_COLS 40
#define TOP_MIN_LINES 6
/* Lines of the screen that are not rows: title, totals, column heads,
 * status. */
#define TOP_CHROME_LINES 4
/* The name column: at least this wide, and leaves the hold column this
 * much on a narrow screen. */
#define TOP_NAME_MIN 8
#define TOP_HOLD_MIN 14
/* Retry times below this show with tenths ("59.9s"). */
#define TOP_RETRY_TENTHS_MAX_MS 60000

#define ESC "\033"

/* A circuit as the table shows it. */
typedef struct top_row {
	char name[CBC_NAME_MAX + 1];
	char state[16]; /* "open", "half_open", "closed" (or what cbd said) */
	bool held;
	char hold_user[CBC_USER_SIZE];
	int64_t hold_uid;
	int64_t hold_until; /* CBC_TIME_NONE: until released */
	char reason[CBC_REASON_MAX + 1]; /* "" when none */
	int64_t retry_after_ms; /* at got_at */
	int64_t got_at; /* monotonic ms the snapshot came */
	int64_t in_flight; /* -1: the snapshot does not say */
	/* Totals now, and at the previous list (the rates' base). */
	bool has_totals, has_base;
	int64_t successes, failures, ignored, slow, rejected;
	int64_t base_calls, base_outcomes, base_failures, base_slow, base_at;
	/* The last interval's rates; NAN when not known. */
	double calls_per_s, failure_pct, slow_pct;
	unsigned seen; /* the listing that last saw it */
	UT_hash_handle hh;
} top_row;

/* The daemon's counters shown in the header. */
typedef struct top_stats {
	bool known;
	int64_t uptime_ms, circuits, held, connections, requests;
	char backend[64];
	int64_t base_requests, base_at;
	double requests_per_s; /* NAN until two reads */
} top_stats;

typedef struct top {
	cbctl *ctl;
	int64_t interval_ms;
	bool once, tty;
	top_row *rows; /* by name */
	unsigned listing;
	top_stats stats;
	char version[64];
	char filter[TOP_FILTER_MAX + 1];
	bool editing; /* typing the filter */
	size_t scroll; /* the first row shown */
	int cols, lines;
	bool has_in_flight; /* a snapshot carried in_flight: its column shows */
	/* The watch connection (terminal mode). */
	int watch_fd;
	cbctl_line_buf watch_buf;
	bool watch_replied;
	/* Keys read but not yet whole (an escape sequence cut by a read). */
	char keys[64];
	size_t keys_len;
} top;

/* ------------------------------------------------------------------ */
/* Clocks and text                                                     */
/* ------------------------------------------------------------------ */

static int64_t
top_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Copy src (NULL: "") into dst (size bytes), control characters as '?';
 * a cut copy does not end inside a UTF-8 sequence. */
static void
top_copy_clean(char *dst, size_t size, const char *src)
{
	size_t i = 0;

	if (size == 0)
		return;
	for (; src != NULL && src[i] != '\0' && i + 1 < size; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	dst[i] = '\0';
	if (src != NULL && src[i] != '\0') {
		/* Cut: back to the start of the sequence cut short. */
		while (i > 0 && ((unsigned char)dst[i - 1] & 0xc0) == 0x80)
			i--;
		if (i > 0 && ((unsigned char)dst[i - 1] & 0x80) != 0)
			i--;
		dst[i] = '\0';
	}
}

/* Columns text takes (one per code point: names are mostly ASCII). */
static int
top_text_cols(const char *text)
{
	int n = 0;

	for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++)
		if ((*p & 0xc0) != 0x80)
			n++;
	return n;
}

/* Write text into f padded or cut to exactly width columns (cut text ends
 * in '~'); left-aligned. */
static void
top_put_col(FILE *f, const char *text, int width)
{
	int cols = top_text_cols(text);
	const unsigned char *p = (const unsigned char *)text;
	int used = 0;

	if (width <= 0)
		return;
	if (cols <= width) {
		fputs(text, f);
		for (int i = cols; i < width; i++)
			fputc(' ', f);
		return;
	}
	/* Cut: width - 1 code points, then '~'. */
	while (*p != '\0') {
		if ((*p & 0xc0) != 0x80) {
			if (used == width - 1)
				break;
			used++;
		}
		fputc(*p++, f);
	}
	fputc('~', f);
}

/* "12.3", "1234", "12.3k", "-" (NAN). */
static void
top_format_rate(double v, char *buf, size_t size)
{
	if (isnan(v))
		snprintf(buf, size, "-");
	else if (v < 100.0)
		snprintf(buf, size, "%.1f", v);
	else if (v < 100000.0)
		snprintf(buf, size, "%.0f", v);
	else if (v < 100e6)
		snprintf(buf, size, "%.0fk", v / 1000.0);
	else
		snprintf(buf, size, "%.0fM", v / 1e6);
}

static void
top_format_pct(double v, char *buf, size_t size)
{
	if (isnan(v))
		snprintf(buf, size, "-");
	else
		snprintf(buf, size, "%.1f", v);
}

/* A span: "59.9s" under a minute, else "9m58s", "2h05m". */
static void
top_format_span(int64_t ms, char *buf, size_t size)
{
	int64_t secs = ms / 1000;

	if (ms < TOP_RETRY_TENTHS_MAX_MS)
		snprintf(buf, size, "%.1fs", (double)ms / 1000.0);
	else if (secs < 3600)
		snprintf(buf, size, "%lldm%02llds", (long long)(secs / 60), (long long)(secs % 60));
	else
		snprintf(buf, size, "%lldh%02lldm", (long long)(secs / 3600),
		    (long long)(secs % 3600 / 60));
}

/* A time of day, "10:10:00", or with the date when not today
 * ("12-03 10:10"). */
static void
top_format_clock(int64_t ms, char *buf, size_t size)
{
	time_t t = (time_t)(ms / 1000), now = time(NULL);
	struct tm tm, today;

	if (localtime_r(&t, &tm) == NULL || localtime_r(&now, &today) == NULL) {
		snprintf(buf, size, "%lld", (long long)ms);
		return;
	}
	if (tm.tm_year == today.tm_year && tm.tm_yday == today.tm_yday)
		strftime(buf, size, "%H:%M:%S", &tm);
	else
		strftime(buf, size, "%m-%d %H:%M", &tm);
}

/* ------------------------------------------------------------------ */
/* The model                                                          */
/* ------------------------------------------------------------------ */

static int64_t
top_json_int(const json_t *obj, const char *key, int64_t absent)
{
	const json_t *v = json_object_get(obj, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : absent;
}

/* The row of name, made when missing; NULL when out of memory or the
 * name is too long. */
static top_row *
top_row_of(top *t, const char *name)
{
	top_row *row = NULL;

	if (strlen(name) > CBC_NAME_MAX)
		return NULL;
	HASH_FIND_STR(t->rows, name, row);
	if (row != NULL)
		return row;
	row = calloc(1, sizeof *row);
	if (row == NULL)
		return NULL;
	snprintf(row->name, sizeof row->name, "%s", name);
	row->calls_per_s = row->failure_pct = row->slow_pct = NAN;
	row->in_flight = -1;
	HASH_ADD_STR(t->rows, name, row);
	return row;
}

static void
top_row_drop(top *t, const char *name)
{
	top_row *row = NULL;

	HASH_FIND_STR(t->rows, name, row);
	if (row == NULL)
		return;
	HASH_DEL(t->rows, row);
	free(row);
}

/* The rates of the interval since the row's base, from the totals a
 * listing read at now; the totals become the next base. */
static void
top_row_rates(top_row *row, int64_t now)
{
	int64_t calls = row->successes + row->failures + row->ignored + row->rejected;
	int64_t outcomes = row->successes + row->failures;

	row->calls_per_s = row->failure_pct = row->slow_pct = NAN;
	if (row->has_base && now > row->base_at && calls >= row->base_calls &&
	    outcomes >= row->base_outcomes && row->failures >= row->base_failures &&
	    row->slow >= row->base_slow) {
		int64_t d_out = outcomes - row->base_outcomes;

		row->calls_per_s =
		    (double)(calls - row->base_calls) * 1000.0 / (double)(now - row->base_at);
		if (d_out > 0) {
			row->failure_pct =
			    (double)(row->failures - row->base_failures) * 100.0 / (double)d_out;
			row->slow_pct =
			    (double)(row->slow - row->base_slow) * 100.0 / (double)d_out;
		}
	}
	/* Totals that went down: the circuit was made again; start over. */
	row->has_base = true;
	row->base_calls = calls;
	row->base_outcomes = outcomes;
	row->base_failures = row->failures;
	row->base_slow = row->slow;
	row->base_at = now;
}

/* Apply a snapshot (from a listing, the watch reply or an event) to its
 * row; from_list: a listing read it (the rates move on). */
static void
top_apply(top *t, const json_t *snap, bool from_list, int64_t now)
{
	const char *name = json_string_value(json_object_get(snap, "name"));
	const char *state = json_string_value(json_object_get(snap, "state"));
	const json_t *hold = json_object_get(snap, "hold");
	const json_t *totals = json_object_get(snap, "totals");
	top_row *row;

	if (name == NULL || (row = top_row_of(t, name)) == NULL)
		return;
	snprintf(row->state, sizeof row->state, "%s", state != NULL ? state : "?");
	row->retry_after_ms = top_json_int(snap, "retry_after_ms", 0);
	row->got_at = now;
	row->in_flight = top_json_int(snap, "in_flight", -1);
	if (row->in_flight >= 0)
		t->has_in_flight = true;
	row->held = json_is_object(hold);
	if (row->held) {
		top_copy_clean(row->hold_user, sizeof row->hold_user,
		    json_string_value(json_object_get(hold, "by_user")));
		row->hold_uid = top_json_int(hold, "by_uid", -1);
		row->hold_until = top_json_int(hold, "until", CBC_TIME_NONE);
		top_copy_clean(row->reason, sizeof row->reason,
		    json_string_value(json_object_get(hold, "reason")));
	}
	if (json_is_object(totals)) {
		row->has_totals = true;
		row->successes = top_json_int(totals, "successes", 0);
		row->failures = top_json_int(totals, "failures", 0);
		row->ignored = top_json_int(totals, "ignored", 0);
		row->slow = top_json_int(totals, "slow", 0);
		row->rejected = top_json_int(totals, "rejected", 0);
	}
	if (from_list) {
		row->seen = t->listing;
		if (row->has_totals)
			top_row_rates(row, now);
	}
}

/* A watch event line: change and policy update the row, delete drops it;
 * others are ignored. */
static void
top_event(top *t, const char *line)
{
	json_t *ev = json_loads(line, 0, NULL);
	const char *kind = json_string_value(json_object_get(ev, "event"));

	if (kind != NULL && (strcmp(kind, "change") == 0 || strcmp(kind, "policy") == 0))
		top_apply(t, json_object_get(ev, "snapshot"), false, top_mono_ms());
	else if (kind != NULL && strcmp(kind, "delete") == 0 &&
	    json_is_string(json_object_get(ev, "name")))
		top_row_drop(t, json_string_value(json_object_get(ev, "name")));
	json_decref(ev);
}

/* A reply line from cbd, parsed; NULL (err set) when it is not ok. */
static json_t *
top_ask(top *t, const char *request, cbc_status *status, cbc_error *err)
{
	char *reply = NULL;
	json_t *obj;

	*status = cbc_request(t->ctl->conn, request, &reply, err);
	if (*status != CBC_OK) {
		cbc_free(reply);
		return NULL;
	}
	obj = reply != NULL ? json_loads(reply, 0, NULL) : NULL;
	cbc_free(reply);
	if (obj == NULL) {
		*status = CBC_EPROTO;
		snprintf(err->message, sizeof err->message, "cbd's reply is not JSON");
	}
	return obj;
}

/* Read every circuit (page by page) and the stats; rows the listing did
 * not see are dropped. CBC_OK or the failure (err set). */
static cbc_status
top_poll(top *t, cbc_error *err)
{
	char cursor[CBC_CURSOR_SIZE] = "";
	bool complete = false;
	cbc_status status = CBC_OK;
	int64_t now;
	json_t *obj;

	t->listing++;
	do {
		json_t *request = json_pack("{s:s, s:i}", "op", "list", "limit", TOP_LIST_PAGE);
		const json_t *circuits, *snap, *next;
		char *req;
		size_t i;

		if (request != NULL && cursor[0] != '\0')
			json_object_set_new(request, "cursor", json_string(cursor));
		req = request != NULL ? json_dumps(request, JSON_COMPACT) : NULL;
		json_decref(request);
		if (req == NULL) {
			snprintf(err->message, sizeof err->message, "top: out of memory");
			return CBC_ENOMEM;
		}
		obj = top_ask(t, req, &status, err);
		free(req);
		if (obj == NULL)
			return status;
		now = top_mono_ms();
		circuits = json_object_get(obj, "circuits");
		json_array_foreach (circuits, i, snap)
			top_apply(t, snap, true, now);
		next = json_object_get(obj, "cursor");
		cursor[0] = '\0';
		if (json_is_string(next) && strlen(json_string_value(next)) < sizeof cursor)
			snprintf(cursor, sizeof cursor, "%s", json_string_value(next));
		complete = !json_is_true(json_object_get(obj, "truncated"));
		json_decref(obj);
	} while (cursor[0] != '\0');
	if (complete) {
		top_row *row, *tmp;

		HASH_ITER (hh, t->rows, row, tmp) {
			if (row->seen != t->listing) {
				HASH_DEL(t->rows, row);
				free(row);
			}
		}
	}

	obj = top_ask(t, "{\"op\":\"stats\"}", &status, err);
	if (obj == NULL)
		return status;
	now = top_mono_ms();
	{
		top_stats *s = &t->stats;
		const json_t *backend = json_object_get(obj, "backend");
		const char *type = json_string_value(json_object_get(backend, "type"));
		const char *health = json_string_value(json_object_get(backend, "health"));

		s->uptime_ms = top_json_int(obj, "uptime_ms", 0);
		s->circuits = top_json_int(obj, "circuits", 0);
		s->held = top_json_int(obj, "held", 0);
		s->connections = top_json_int(json_object_get(obj, "connections"), "current", 0);
		s->requests = top_json_int(obj, "requests", 0);
		snprintf(s->backend, sizeof s->backend, "%s%s%s", type != NULL ? type : "?",
		    health != NULL ? " " : "", health != NULL ? health : "");
		top_copy_clean(s->backend, sizeof s->backend, s->backend);
		s->requests_per_s = NAN;
		if (s->known && now > s->base_at && s->requests >= s->base_requests)
			s->requests_per_s = (double)(s->requests - s->base_requests) * 1000.0 /
			    (double)(now - s->base_at);
		s->known = true;
		s->base_requests = s->requests;
		s->base_at = now;
	}
	json_decref(obj);
	return CBC_OK;
}

/* The rank of a row's state: open first, then held (closed), half_open,
 * closed. */
static int
top_rank(const top_row *row)
{
	if (strcmp(row->state, "open") == 0)
		return 0;
	if (row->held)
		return 1;
	if (strcmp(row->state, "half_open") == 0)
		return 2;
	if (strcmp(row->state, "closed") == 0)
		return 3;
	return 1; /* a state this cbctl does not know: up with the held ones */
}

static int
top_compare(const void *a, const void *b)
{
	const top_row *x = *(const top_row *const *)a, *y = *(const top_row *const *)b;
	double cx = isnan(x->calls_per_s) ? -1.0 : x->calls_per_s;
	double cy = isnan(y->calls_per_s) ? -1.0 : y->calls_per_s;

	if (top_rank(x) != top_rank(y))
		return top_rank(x) - top_rank(y);
	if (cx != cy)
		return cx > cy ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Whether the filter (ASCII case ignored) is in the row's name. */
static bool
top_matches(const top *t, const top_row *row)
{
	return t->filter[0] == '\0' || strcasestr(row->name, t->filter) != NULL;
}

/* The rows that pass the filter, sorted (an array to free); NULL when
 * out of memory (count 0). */
static top_row **
top_sorted(const top *t, size_t *count)
{
	size_t n = HASH_COUNT(t->rows), k = 0;
	top_row **out = malloc((n > 0 ? n : 1) * sizeof *out);
	top_row *row, *tmp;

	*count = 0;
	if (out == NULL)
		return NULL;
	HASH_ITER (hh, t->rows, row, tmp)
		if (top_matches(t, row))
			out[k++] = row;
	qsort(out, k, sizeof *out, top_compare);
	*count = k;
	return out;
}

/* ------------------------------------------------------------------ */
/* Rows as text                                                        */
/* ------------------------------------------------------------------ */

/* The retry column: time left in the break (counting down from when the
 * snapshot came), "held" while held open until released, "-" otherwise. */
static void
top_format_retry(const top_row *row, int64_t now, char *buf, size_t size)
{
	int64_t left;

	if (strcmp(row->state, "open") != 0) {
		snprintf(buf, size, "-");
		return;
	}
	if (row->held && row->hold_until == CBC_TIME_NONE) {
		snprintf(buf, size, "held");
		return;
	}
	left = row->retry_after_ms - (now - row->got_at);
	if (left <= 0)
		snprintf(buf, size, "now");
	else
		top_format_span(left, buf, size);
}

/* The hold column: "alice until 10:10:00: deploy", "" when not held. */
static void
top_format_hold(const top_row *row, char *buf, size_t size)
{
	char who[CBC_USER_SIZE + 32], until[48];

	buf[0] = '\0';
	if (!row->held)
		return;
	if (row->hold_user[0] != '\0')
		snprintf(who, sizeof who, "%s", row->hold_user);
	else
		snprintf(who, sizeof who, "uid %lld", (long long)row->hold_uid);
	if (row->hold_until == CBC_TIME_NONE)
		snprintf(until, sizeof until, "until released");
	else {
		char clock[32];

		top_format_clock(row->hold_until, clock, sizeof clock);
		snprintf(until, sizeof until, "until %s", clock);
	}
	snprintf(buf, size, "%s %s%s%s", who, until, row->reason[0] != '\0' ? ": " : "",
	    row->reason);
}

/* The colour of a state (terminal with colour only). */
static const char *
top_state_color(const top *t, const top_row *row)
{
	if (!t->ctl->color)
		return "";
	if (strcmp(row->state, "open") == 0)
		return ESC "[1;31m";
	if (strcmp(row->state, "half_open") == 0)
		return ESC "[33m";
	if (strcmp(row->state, "closed") == 0)
		return ESC "[32m";
	return "";
}

/* The widths of the columns after the name. */
enum {
	W_STATE = 9,
	W_CALLS = 8,
	W_PCT = 6,
	W_RETRY = 7,
	W_INFL = 6,
};

/* The column heads; name_w wide name column. */
static void
top_put_heads(FILE *f, const top *t, int name_w)
{
	top_put_col(f, "NAME", name_w);
	fprintf(f, "  %-*s %*s %*s %*s %-*s ", W_STATE, "STATE", W_CALLS, "CALLS/S", W_PCT, "FAIL%",
	    W_PCT, "SLOW%", W_RETRY, "RETRY");
	if (t->has_in_flight)
		fprintf(f, "%*s ", W_INFL, "INFL");
	fputs("HOLD", f);
}

/* One row; the hold column hold_w wide (-1: as long as it is). */
static void
top_put_row(FILE *f, const top *t, const top_row *row, int name_w, int hold_w, int64_t now)
{
	char calls[16], fail[16], slow[16], retry[32], infl[24];
	char hold[CBC_REASON_MAX + CBC_USER_SIZE + 128];
	const char *color = top_state_color(t, row);

	top_format_rate(row->calls_per_s, calls, sizeof calls);
	top_format_pct(row->failure_pct, fail, sizeof fail);
	top_format_pct(row->slow_pct, slow, sizeof slow);
	top_format_retry(row, now, retry, sizeof retry);
	top_format_hold(row, hold, sizeof hold);
	top_put_col(f, row->name, name_w);
	fputs("  ", f);
	fputs(color, f);
	top_put_col(f, row->state, W_STATE);
	if (color[0] != '\0')
		fputs(ESC "[0m", f);
	fprintf(f, " %*s %*s %*s %-*s ", W_CALLS, calls, W_PCT, fail, W_PCT, slow, W_RETRY, retry);
	if (t->has_in_flight) {
		if (row->in_flight >= 0)
			snprintf(infl, sizeof infl, "%lld", (long long)row->in_flight);
		else
			snprintf(infl, sizeof infl, "-");
		fprintf(f, "%*s ", W_INFL, infl);
	}
	if (hold_w < 0)
		fputs(hold, f);
	else
		top_put_col(f, hold, hold_w);
}

/* Columns the row takes besides the name and hold columns. */
static int
top_fixed_cols(const top *t)
{
	return 2 + W_STATE + 1 + W_CALLS + 1 + W_PCT + 1 + W_PCT + 1 + W_RETRY + 1 +
	    (t->has_in_flight ? W_INFL + 1 : 0);
}

/* "circuits 12  open 2  half_open 1  closed 9  held 1  req/s 120" */
static void
top_put_totals(FILE *f, const top *t)
{
	int64_t open = 0, half = 0, closed = 0, held = 0;
	top_row *row, *tmp;
	char rate[16];

	HASH_ITER (hh, t->rows, row, tmp) {
		open += strcmp(row->state, "open") == 0;
		half += strcmp(row->state, "half_open") == 0;
		closed += strcmp(row->state, "closed") == 0;
		held += row->held;
	}
	top_format_rate(t->stats.requests_per_s, rate, sizeof rate);
	fprintf(f, "circuits %lld  open %lld  half_open %lld  closed %lld  held %lld  req/s %s",
	    (long long)HASH_COUNT(t->rows), (long long)open, (long long)half, (long long)closed,
	    (long long)held, rate);
}

/* "cbctl top  cbd 1.2.0  up 2h05m  3 conns  memory up  SOCKET" */
static void
top_put_title(FILE *f, const top *t)
{
	char up[32];

	top_format_span(t->stats.uptime_ms, up, sizeof up);
	if (t->stats.uptime_ms < TOP_RETRY_TENTHS_MAX_MS)
		snprintf(up, sizeof up, "%llds", (long long)(t->stats.uptime_ms / 1000));
	fprintf(f, "cbctl top  cbd %s  up %s  %lld conns  %s  %s", t->version, up,
	    (long long)t->stats.connections, t->stats.backend, cbc_conn_socket_path(t->ctl->conn));
}

/* ------------------------------------------------------------------ */
/* Plain tables (not a terminal, --once)                               */
/* ------------------------------------------------------------------ */

static bool
top_print_plain(const top *t)
{
	size_t count;
	top_row **rows = top_sorted(t, &count);
	int64_t now = top_mono_ms();
	int name_w = 4;
	char when[32];

	if (rows == NULL) {
		cbctl_errorf("top: out of memory");
		return false;
	}
	for (size_t i = 0; i < count; i++)
		if (top_text_cols(rows[i]->name) > name_w)
			name_w = top_text_cols(rows[i]->name);
	cbctl_format_time(cbctl_now_ms(), when, sizeof when);
	printf("%s  ", when);
	top_put_title(stdout, t);
	putchar('\n');
	top_put_totals(stdout, t);
	if (t->filter[0] != '\0')
		printf("  filter \"%s\": %zu", t->filter, count);
	putchar('\n');
	top_put_heads(stdout, t, name_w);
	putchar('\n');
	for (size_t i = 0; i < count; i++) {
		char *line = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&line, &len);

		if (f == NULL)
			continue;
		top_put_row(f, t, rows[i], name_w, -1, now);
		fclose(f);
		while (len > 0 && line[len - 1] == ' ')
			line[--len] = '\0';
		puts(line);
		free(line);
	}
	putchar('\n');
	free(rows);
	fflush(stdout);
	if (ferror(stdout)) {
		cbctl_errorf("top: cannot write: %s", strerror(errno));
		return false;
	}
	return true;
}

/* ------------------------------------------------------------------ */
/* The terminal                                                        */
/* ------------------------------------------------------------------ */

/* The terminal as it was (restored on the way out, from a signal
 * handler too: only async-signal-safe calls). */
static struct termios top_saved_termios;
static volatile sig_atomic_t top_screen_on;
static volatile sig_atomic_t top_stop, top_winch, top_tstp;

static const char top_enter_seq[] = ESC "[?1049h" ESC "[?25l" ESC "[H" ESC "[2J";
static const char top_leave_seq[] = ESC "[0m" ESC "[?25h" ESC "[?1049l";

static void
top_write_all(const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		data += n;
		len -= (size_t)n;
	}
}

/* Leave the alternate screen and give the terminal its modes back. */
static void
top_screen_leave(void)
{
	if (!top_screen_on)
		return;
	top_screen_on = 0;
	top_write_all(top_leave_seq, sizeof top_leave_seq - 1);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &top_saved_termios);
}

/* Raw keys (no echo, no line editing; Ctrl-C still signals) on the
 * alternate screen. False when the terminal refuses. */
static bool
top_screen_enter(void)
{
	struct termios raw;

	if (tcgetattr(STDIN_FILENO, &top_saved_termios) != 0)
		return false;
	raw = top_saved_termios;
	raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	raw.c_iflag &= ~(tcflag_t)(IXON | ICRNL);
	raw.c_cc[VMIN] = 0;
	raw.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) != 0)
		return false;
	top_screen_on = 1;
	top_write_all(top_enter_seq, sizeof top_enter_seq - 1);
	return true;
}

static void
top_on_signal(int sig)
{
	if (sig == SIGWINCH)
		top_winch = 1;
	else if (sig == SIGTSTP)
		top_tstp = 1;
	else
		top_stop = 1;
}

/* A crash: the terminal back as it was, then the default action. */
static void
top_on_fatal(int sig)
{
	top_screen_leave();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void
top_size(top *t)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
		t->cols = ws.ws_col;
		t->lines = ws.ws_row;
	} else {
		t->cols = 80;
		t->lines = 24;
	}
}

/* Rows the screen shows. */
static size_t
top_page(const top *t)
{
	return t->lines > TOP_CHROME_LINES ? (size_t)(t->lines - TOP_CHROME_LINES) : 1;
}

/* Draw the whole screen in one write, line by line from the top. */
static void
top_draw(top *t)
{
	char *frame = NULL;
	size_t frame_len = 0, count, page = top_page(t);
	FILE *f = open_memstream(&frame, &frame_len);
	top_row **rows;
	int64_t now = top_mono_ms();
	int name_w, hold_w, longest = TOP_NAME_MIN;
	char line[512];

	if (f == NULL)
		return;
	/* Each line is cleared before it is written (clearing after would
	 * erase the last column of a full line on some terminals). */
	fputs(ESC "[H" ESC "[2K", f);
	if (t->cols < TOP_MIN_COLS || t->lines < TOP_MIN_LINES) {
		/* One line, cut to the width: the screen must not scroll. */
		snprintf(line, sizeof line, "%dx%d: too small (%dx%d at least)", t->cols, t->lines,
		    TOP_MIN_COLS, TOP_MIN_LINES);
		fputs(ESC "[2J", f);
		top_put_col(f, line, t->cols > 1 ? t->cols - 1 : 1);
		goto out;
	}
	rows = top_sorted(t, &count);
	if (count <= page)
		t->scroll = 0;
	else if (t->scroll > count - page)
		t->scroll = count - page;
	for (size_t i = 0; i < count; i++)
		if (top_text_cols(rows[i]->name) > longest)
			longest = top_text_cols(rows[i]->name);
	name_w = t->cols - top_fixed_cols(t) - TOP_HOLD_MIN;
	if (name_w > longest)
		name_w = longest;
	if (name_w < TOP_NAME_MIN)
		name_w = TOP_NAME_MIN;
	hold_w = t->cols - top_fixed_cols(t) - name_w;
	if (hold_w < 0)
		hold_w = 0;

	/* Title and totals: cut to the width (through a line buffer). */
	{
		FILE *l = fmemopen(line, sizeof line, "w");

		if (l != NULL) {
			top_put_title(l, t);
			fputc('\0', l);
			fclose(l);
			line[sizeof line - 1] = '\0';
			fputs(ESC "[1m", f);
			top_put_col(f, line, t->cols);
			fputs(ESC "[0m\r\n" ESC "[2K", f);
		}
		l = fmemopen(line, sizeof line, "w");
		if (l != NULL) {
			top_put_totals(l, t);
			fputc('\0', l);
			fclose(l);
			line[sizeof line - 1] = '\0';
			top_put_col(f, line, t->cols);
			fputs("\r\n" ESC "[2K", f);
		}
	}
	fputs(ESC "[7m", f);
	{
		char *heads = NULL;
		size_t heads_len = 0;
		FILE *h = open_memstream(&heads, &heads_len);

		if (h != NULL) {
			top_put_heads(h, t, name_w);
			fclose(h);
			top_put_col(f, heads, t->cols);
			free(heads);
		}
	}
	fputs(ESC "[0m\r\n" ESC "[2K", f);
	for (size_t i = 0; i < page; i++) {
		size_t k = t->scroll + i;

		if (rows != NULL && k < count)
			top_put_row(f, t, rows[k], name_w, hold_w, now);
		else if (i == 0 && count == 0)
			fputs(t->filter[0] != '\0' ? "no circuit matches the filter"
						   : "no circuits",
			    f);
		fputs("\r\n" ESC "[2K", f);
	}
	/* The status line, without a newline (the screen must not scroll). */
	if (t->editing) {
		snprintf(line, sizeof line, "filter: %s", t->filter);
		top_put_col(f, line, t->cols - 1);
	} else {
		char where[64];

		if (count == 0)
			snprintf(where, sizeof where, "0 rows");
		else
			snprintf(where, sizeof where, "rows %zu-%zu of %zu", t->scroll + 1,
			    t->scroll + page < count ? t->scroll + page : count, count);
		snprintf(line, sizeof line, "q quit  / filter  j/k scroll  %s%s%s%s", where,
		    t->filter[0] != '\0' ? "  filter \"" : "", t->filter,
		    t->filter[0] != '\0' ? "\"" : "");
		top_put_col(f, line, t->cols - 1);
	}
	if (t->editing)
		fprintf(f, ESC "[%d;%dH" ESC "[?25h", t->lines,
		    (int)strlen("filter: ") + top_text_cols(t->filter) + 1);
	else
		fputs(ESC "[?25l", f);
	free(rows);
out:
	fclose(f);
	if (frame != NULL)
		top_write_all(frame, frame_len);
	free(frame);
}

/* Scroll by delta rows (clamped when drawn). */
static void
top_scroll(top *t, long delta)
{
	if (delta < 0 && (size_t)-delta > t->scroll)
		t->scroll = 0;
	else
		t->scroll = (size_t)((long)t->scroll + delta);
}

/* One key (or escape sequence) at keys[0..len); how many bytes it took,
 * 0 when incomplete. *quit set by q. */
static size_t
top_key(top *t, const char *keys, size_t len, bool *quit)
{
	long page = (long)top_page(t);
	unsigned char c = (unsigned char)keys[0];

	if (c == 0x1b) {
		/* ESC [ X, ESC O X, ESC [ n ~; a lone escape is the Esc key. */
		if (len == 1) {
			if (t->editing) {
				t->editing = false;
				t->filter[0] = '\0';
			}
			return 1;
		}
		if (keys[1] == '[' || keys[1] == 'O') {
			size_t n = 2;

			while (n < len && ((unsigned char)keys[n] < 0x40 || keys[n] > 0x7e))
				n++;
			if (n >= len)
				return 0;
			switch (keys[n]) {
			case 'A':
				top_scroll(t, -1);
				break;
			case 'B':
				top_scroll(t, 1);
				break;
			case 'H':
				t->scroll = 0;
				break;
			case 'F':
				t->scroll = (size_t)-1 / 2;
				break;
			case '~':
				if (keys[2] == '5')
					top_scroll(t, -page);
				else if (keys[2] == '6')
					top_scroll(t, page);
				break;
			}
			return n + 1;
		}
		return 1;
	}
	if (t->editing) {
		size_t flen = strlen(t->filter);

		if (c == '\r' || c == '\n') {
			t->editing = false;
		} else if (c == 0x7f || c == 0x08) {
			while (flen > 0 && ((unsigned char)t->filter[flen - 1] & 0xc0) == 0x80)
				flen--;
			if (flen > 0)
				flen--;
			t->filter[flen] = '\0';
		} else if (c == 0x15) {
			t->filter[0] = '\0'; /* Ctrl-U */
		} else if (c >= 0x20 && flen < TOP_FILTER_MAX) {
			t->filter[flen] = (char)c;
			t->filter[flen + 1] = '\0';
		}
		t->scroll = 0;
		return 1;
	}
	switch (c) {
	case 'q':
	case 'Q':
		*quit = true;
		break;
	case '/':
		t->editing = true;
		break;
	case 'j':
		top_scroll(t, 1);
		break;
	case 'k':
		top_scroll(t, -1);
		break;
	case ' ':
	case 0x06: /* Ctrl-F */
		top_scroll(t, page);
		break;
	case 'b':
	case 0x02: /* Ctrl-B */
		top_scroll(t, -page);
		break;
	case 'g':
		t->scroll = 0;
		break;
	case 'G':
		t->scroll = (size_t)-1 / 2;
		break;
	case 0x0c: /* Ctrl-L: draw everything again */
		top_write_all(ESC "[2J", 4);
		break;
	}
	return 1;
}

/* Read and act on the keys waiting; false on end of input. */
static bool
top_read_keys(top *t, bool *quit)
{
	ssize_t n = read(STDIN_FILENO, t->keys + t->keys_len, sizeof t->keys - t->keys_len);
	size_t used = 0;

	if (n < 0)
		return errno == EINTR || errno == EAGAIN;
	if (n == 0)
		return false;
	t->keys_len += (size_t)n;
	while (used < t->keys_len && !*quit) {
		size_t took = top_key(t, t->keys + used, t->keys_len - used, quit);

		if (took == 0) {
			/* An escape sequence cut short: keep it for the next read,
			 * unless the buffer is full of it. */
			if (t->keys_len - used == sizeof t->keys)
				used = t->keys_len;
			break;
		}
		used += took;
	}
	memmove(t->keys, t->keys + used, t->keys_len - used);
	t->keys_len -= used;
	return true;
}

/* Handle the watch lines read. False when cbd refused the watch. */
static bool
top_watch_lines(top *t)
{
	cbctl_line_buf *buf = &t->watch_buf;
	char *nl;

	while (buf->len > 0 && (nl = memchr(buf->data, '\n', buf->len)) != NULL) {
		size_t line_len = (size_t)(nl - buf->data);

		*nl = '\0';
		if (!t->watch_replied) {
			json_t *reply = json_loads(buf->data, 0, NULL);
			const json_t *snap;
			int64_t now = top_mono_ms();
			size_t i;

			t->watch_replied = true;
			if (!json_is_true(json_object_get(reply, "ok"))) {
				json_decref(reply);
				return false;
			}
			json_array_foreach (json_object_get(reply, "snapshots"), i, snap)
				top_apply(t, snap, false, now);
			json_decref(reply);
		} else {
			top_event(t, buf->data);
		}
		memmove(buf->data, nl + 1, buf->len - line_len - 1);
		buf->len -= line_len + 1;
	}
	return true;
}

/* Whether an open circuit's retry time is counting down (a redraw each
 * tick shows it). */
static bool
top_counting(const top *t)
{
	top_row *row, *tmp;

	HASH_ITER (hh, t->rows, row, tmp)
		if (strcmp(row->state, "open") == 0 &&
		    !(row->held && row->hold_until == CBC_TIME_NONE))
			return true;
	return false;
}

/* Signals: the handlers, and SIGINT, SIGTERM, SIGHUP, SIGWINCH and SIGTSTP
 * blocked but while waiting (none is lost between a check and the wait).
 * *unblocked receives the mask to wait with. */
static void
top_signals(bool screen, sigset_t *unblocked)
{
	static const int stops[] = { SIGINT, SIGTERM, SIGHUP };
	static const int fatal[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
	struct sigaction sa = { .sa_handler = top_on_signal };
	sigset_t block;

	sigemptyset(&sa.sa_mask);
	sigemptyset(&block);
	for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) {
		sigaddset(&block, stops[i]);
		sigaction(stops[i], &sa, NULL);
	}
	if (screen) {
		sigaddset(&block, SIGWINCH);
		sigaddset(&block, SIGTSTP);
		sigaction(SIGWINCH, &sa, NULL);
		sigaction(SIGTSTP, &sa, NULL);
		sa.sa_handler = top_on_fatal;
		sa.sa_flags = SA_RESETHAND;
		for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
			sigaction(fatal[i], &sa, NULL);
	}
	sigprocmask(SIG_BLOCK, &block, unblocked);
	for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++)
		sigdelset(unblocked, stops[i]);
	sigdelset(unblocked, SIGWINCH);
	sigdelset(unblocked, SIGTSTP);
}

/* Wait up to ms (or for a signal); false when a signal stopped it. */
static bool
top_sleep(int64_t ms, const sigset_t *unblocked)
{
	struct timespec wait = { .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 };

	ppoll(NULL, 0, &wait, unblocked);
	return !top_stop;
}

/* Plain tables: one each interval; with --once one. */
static int
top_run_plain(top *t, const sigset_t *unblocked)
{
	cbc_error err;
	cbc_status status = top_poll(t, &err);

	setvbuf(stdout, NULL, _IOFBF, 0);
	while (status == CBC_OK) {
		if (!top_sleep(t->interval_ms, unblocked))
			return EXIT_OK;
		status = top_poll(t, &err);
		if (status != CBC_OK)
			break;
		if (!top_print_plain(t))
			return EXIT_REFUSED;
		if (t->once)
			return EXIT_OK;
	}
	return cbctl_fail_status(t->ctl, status, &err);
}

/* Suspended by Ctrl-Z: the terminal back, stop, and on return the screen
 * again. */
static void
top_suspend(top *t)
{
	sigset_t tstp;

	top_screen_leave();
	signal(SIGTSTP, SIG_DFL);
	sigemptyset(&tstp);
	sigaddset(&tstp, SIGTSTP);
	sigprocmask(SIG_UNBLOCK, &tstp, NULL);
	raise(SIGTSTP);
	/* Continued. */
	sigprocmask(SIG_BLOCK, &tstp, NULL);
	{
		struct sigaction sa = { .sa_handler = top_on_signal };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGTSTP, &sa, NULL);
	}
	top_screen_enter();
	top_size(t);
}

/* The live screen. */
static int
top_run_screen(top *t, const sigset_t *unblocked)
{
	cbc_error err;
	cbc_status status;
	int64_t next_poll;
	int rc = EXIT_OK;
	bool quit = false;
	const char *why = NULL;

	t->watch_fd = cbctl_connect(t->ctl);
	if (t->watch_fd < 0)
		return EXIT_UNREACHABLE;
	if (!cbctl_watch_send(t->ctl, t->watch_fd))
		return EXIT_UNREACHABLE;
	status = top_poll(t, &err);
	if (status != CBC_OK)
		return cbctl_fail_status(t->ctl, status, &err);
	next_poll = top_mono_ms() + t->interval_ms;
	if (!top_screen_enter()) {
		cbctl_errorf("top: cannot set up the terminal: %s", strerror(errno));
		return EXIT_REFUSED;
	}
	atexit(top_screen_leave);
	top_size(t);
	while (!quit && !top_stop) {
		struct pollfd pfd[2] = { { .fd = STDIN_FILENO, .events = POLLIN },
			{ .fd = t->watch_fd, .events = POLLIN } };
		int64_t now = top_mono_ms(), wait_ms = next_poll - now;
		struct timespec wait;
		int r;

		top_draw(t);
		if (top_counting(t) && wait_ms > TOP_TICK_MS)
			wait_ms = TOP_TICK_MS;
		if (wait_ms < 0)
			wait_ms = 0;
		wait.tv_sec = wait_ms / 1000;
		wait.tv_nsec = wait_ms % 1000 * 1000000;
		r = ppoll(pfd, 2, &wait, unblocked);
		if (r < 0 && errno != EINTR) {
			why = "poll failed";
			rc = EXIT_REFUSED;
			break;
		}
		if (top_winch) {
			top_winch = 0;
			top_size(t);
			top_write_all(ESC "[2J", 4);
		}
		if (top_tstp) {
			top_tstp = 0;
			top_suspend(t);
		}
		if (r > 0 && (pfd[0].revents & (POLLIN | POLLHUP)) != 0 &&
		    !top_read_keys(t, &quit)) {
			why = "the terminal closed";
			break;
		}
		if (r > 0 && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
			int got = cbctl_watch_read(t->ctl, t->watch_fd, &t->watch_buf);

			if (got <= 0) {
				why = "cbd closed the watch connection (stopped, restarted, or "
				      "this cbctl read too slowly)";
				rc = EXIT_UNREACHABLE;
				break;
			}
			if (!top_watch_lines(t)) {
				why = "cbd refused the watch";
				rc = EXIT_REFUSED;
				break;
			}
		}
		if (top_mono_ms() >= next_poll) {
			status = top_poll(t, &err);
			if (status != CBC_OK)
				break;
			next_poll = top_mono_ms() + t->interval_ms;
		}
	}
	top_screen_leave();
	if (status != CBC_OK)
		return cbctl_fail_status(t->ctl, status, &err);
	if (why != NULL)
		cbctl_errorf("top: %s", why);
	return rc;
}

int
cbctl_cmd_top(cbctl *ctl)
{
	top t = { .ctl = ctl, .interval_ms = TOP_INTERVAL_MS, .watch_fd = -1 };
	const char *v;
	bool given;
	sigset_t unblocked;
	cbc_hello_info hello;
	cbc_error err;
	cbc_status status;
	top_row *row, *tmp;
	int rc;

	v = cbctl_option_get(ctl, "--interval", &given);
	if (given &&
	    (!cbctl_parse_duration(v, &t.interval_ms) || t.interval_ms < TOP_INTERVAL_MIN_MS ||
		t.interval_ms > TOP_INTERVAL_MAX_MS)) {
		cbctl_errorf("top: --interval takes a duration from %dms to 1h: milliseconds, or "
			     "a number with ms, s, m or h such as 500ms, 2s (got \"%s\")",
		    TOP_INTERVAL_MIN_MS, v);
		return EXIT_USAGE;
	}
	v = cbctl_option_get(ctl, "--filter", &given);
	if (given) {
		if (strlen(v) > TOP_FILTER_MAX) {
			cbctl_errorf("top: --filter takes at most %d bytes (got %zu)",
			    TOP_FILTER_MAX, strlen(v));
			return EXIT_USAGE;
		}
		snprintf(t.filter, sizeof t.filter, "%s", v);
	}
	cbctl_option_get(ctl, "--once", &t.once);
	if (ctl->json) {
		cbctl_errorf("top: no --json (cbctl --json list and cbctl --json stats are "
			     "the data)");
		return EXIT_USAGE;
	}
	t.tty = !t.once && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
	status = cbc_hello(ctl->conn, &hello, &err);
	if (status != CBC_OK)
		return cbctl_fail_status(ctl, status, &err);
	top_copy_clean(t.version, sizeof t.version, hello.version);
	if (!t.tty)
		ctl->color = false;
	top_signals(t.tty, &unblocked);
	rc = t.tty ? top_run_screen(&t, &unblocked) : top_run_plain(&t, &unblocked);
	if (t.watch_fd >= 0)
		close(t.watch_fd);
	free(t.watch_buf.data);
	HASH_ITER (hh, t.rows, row, tmp) {
		HASH_DEL(t.rows, row);
		free(row);
	}
	return rc;
}
