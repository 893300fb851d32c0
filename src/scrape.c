/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scrape.c — a text about many circuits made in steps (see scrape.h): the
 * names taken, then the passes over them, a share of a turn at a time.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "daemon.h"
#include "scrape.h"

/* Keep name for the passes (out of memory: s->nomem). */
static void
names_add(scrape *s, const char *name)
{
	size_t len = strlen(name) + 1;

	if (s->nomem)
		return;
	if (s->names_cap - s->names_len < len) {
		size_t cap = s->names_cap > 0 ? s->names_cap : 4096;
		char *grown;

		while (cap - s->names_len < len)
			cap *= 2;
		grown = realloc(s->names, cap);
		if (grown == NULL) {
			s->nomem = true;
			return;
		}
		s->names = grown;
		s->names_cap = cap;
	}
	if (s->count == s->offs_cap) {
		size_t cap = s->offs_cap > 0 ? s->offs_cap * 2 : 256;
		size_t *grown = realloc(s->offs, cap * sizeof *grown);

		if (grown == NULL) {
			s->nomem = true;
			return;
		}
		s->offs = grown;
		s->offs_cap = cap;
	}
	memcpy(s->names + s->names_len, name, len);
	s->offs[s->count++] = s->names_len;
	s->names_len += len;
}

static void
names_visit(const char *name, const ct_view *view, void *arg)
{
	(void)view;
	names_add(arg, name);
}

bool
scrape_init(scrape *s, const scrape_kind *kind, void *arg, uint64_t max, bool in_steps)
{
	ct_stats ct;

	memset(s, 0, sizeof *s);
	s->kind = kind;
	s->arg = arg;
	s->max = max;
	s->now = clock_realtime_ms();
	circuit_table_stats(cbd.table, &ct);
	s->total = ct.circuits;
	s->small = (ct.circuits < max ? ct.circuits : max) <= SCRAPE_AT_ONCE_CIRCUITS;
	if (in_steps && !s->small && ct.circuits <= max) {
		/* Every circuit: its names in steps, in creation order. */
		s->collecting = true;
		circuit_table_cursor_open(cbd.table, &s->cursor);
	} else {
		/* Some (the most recent first), or few: at once. */
		circuit_table_foreach_recent(cbd.table, s->now, max, names_visit, s);
	}
	if (s->nomem) {
		scrape_free(s);
		return false;
	}
	return true;
}

bool
scrape_small(const scrape *s)
{
	return s->small;
}

/* Take up to visits names with the cursor; returns how many visits. */
static uint64_t
collect_step(scrape *s, uint64_t visits)
{
	uint64_t room = s->max - s->count, n;

	n = circuit_table_cursor_next(cbd.table, &s->cursor, s->now, visits < room ? visits : room,
	    names_visit, s);
	if (s->cursor.at == NULL || s->count >= s->max || s->nomem) {
		circuit_table_cursor_close(cbd.table, &s->cursor);
		s->collecting = false;
	}
	return n > 0 ? n : 1;
}

/* Up to visits circuits of the pass that runs; returns how many visits. */
static uint64_t
pass_step(scrape *s, uint64_t visits)
{
	uint64_t n = 0;
	bool cut = false;

	if (!s->pass_begun) {
		if (s->kind->pass != NULL)
			s->kind->pass(s, s->pass);
		s->pass_begun = true;
		s->listed = 0;
		s->next = 0;
	}
	while (s->next < s->count && n < visits && !cut) {
		const char *name = s->names + s->offs[s->next++];
		ct_view view;

		n++;
		if (!circuit_table_peek_at(cbd.table, name, s->now, &view))
			continue; /* deleted meanwhile */
		if (s->kind->visit(s, s->pass, name, &view))
			s->listed++;
		else
			cut = true;
	}
	if (s->next >= s->count || cut) {
		s->pass++;
		s->pass_begun = false;
	}
	return n > 0 ? n : 1;
}

bool
scrape_step(scrape *s, uint64_t visits)
{
	if (!s->small)
		s->now = clock_realtime_ms(); /* a small one is read at one time */
	while (!s->done && visits > 0) {
		uint64_t n;

		if (s->nomem || s->out.nomem || (s->stop_after > 0 && s->out.len > s->stop_after)) {
			s->stopped = !s->nomem && !s->out.nomem;
			s->done = true;
			break;
		}
		if (s->collecting) {
			n = collect_step(s, visits);
		} else if (s->pass < s->kind->passes) {
			n = pass_step(s, visits);
		} else {
			if (s->kind->end != NULL)
				s->kind->end(s);
			s->done = true;
			break;
		}
		visits = n < visits ? visits - n : 0;
	}
	return s->done;
}

void
scrape_run(scrape *s)
{
	/* A step at a time: stop_after is looked at between them. */
	while (!scrape_step(s, SCRAPE_STEP_CIRCUITS))
		;
}

void
scrape_free(scrape *s)
{
	if (s->collecting)
		circuit_table_cursor_close(cbd.table, &s->cursor);
	s->collecting = false;
	if (s->kind != NULL && s->kind->free != NULL)
		s->kind->free(s->arg);
	s->arg = NULL;
	free(s->names);
	free(s->offs);
	enc_free(&s->out);
	s->names = NULL;
	s->offs = NULL;
}
