/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scrape.h — a text about many circuits (the metrics, the dashboard's
 * /api/circuits) made in steps across turns of the event loop, so that a
 * scrape of 200,000 circuits does not hold every other connection up for
 * a quarter of a second. The names of the circuits it covers are taken
 * first (in steps, in the table's creation order, when it covers every
 * circuit and its driver allows; else at once, the table's most recent
 * first as circuit_table_foreach_recent orders them); then each pass (a
 * metric family) visits them a few at a time, each looked up again: a
 * circuit deleted meanwhile is left out of the passes after. A scrape of
 * at most SCRAPE_AT_ONCE_CIRCUITS circuits is made at once, as before.
 */
#ifndef CBD_SCRAPE_H
#define CBD_SCRAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "circuit-table.h"
#include "encode.h"

/* A scrape covering at most this many circuits is made in one turn (about
 * a millisecond: metrics_max_circuits' default). */
#define SCRAPE_AT_ONCE_CIRCUITS 1000
/* Circuit visits (a name taken, or a circuit in one pass) a turn of the
 * loop makes, all scrapes in steps together: each makes its share. A
 * visit costs about half a microsecond (a metric family's lines of one
 * circuit, or one compact snapshot): a step takes a fraction of the ~2 ms
 * turn. (A big scrape's pace is its reader's: 4 times this made it no
 * faster, and the others' requests slower.) */
#define SCRAPE_STEP_CIRCUITS 256

typedef struct scrape scrape;

/* What a kind of scrape writes (into s->out). */
typedef struct scrape_kind {
	unsigned passes; /* walks over the circuits (metric families) */
	/* Before pass p's circuits (may be NULL). */
	void (*pass)(scrape *s, unsigned p);
	/* Circuit name in pass p; false: the pass ends here (cut short). */
	bool (*visit)(scrape *s, unsigned p, const char *name, const ct_view *view);
	/* After the last pass. */
	void (*end)(scrape *s);
	/* Free arg (may be NULL). */
	void (*free)(void *arg);
} scrape_kind;

struct scrape {
	const scrape_kind *kind;
	void *arg; /* the kind's */
	enc_buf out; /* text made, not yet taken by the driver */
	int64_t now; /* realtime clock of the step that runs */
	uint64_t total; /* circuits stored when it began */
	uint64_t listed; /* circuits the pass that runs (or the last) visited */
	bool done; /* the text is complete in what out held */
	bool stopped; /* stopped at stop_after: the end is not written */
	size_t stop_after; /* stop once out holds more (0: never) */
	bool nomem;
	/* The names to visit: NUL-ended, one after the other. */
	char *names;
	size_t names_len, names_cap;
	size_t *offs;
	size_t count, offs_cap;
	uint64_t max; /* circuits covered at most */
	bool small; /* made at once */
	bool collecting; /* names still being taken (cursor) */
	ct_cursor cursor;
	unsigned pass;
	size_t next; /* the pass's next name */
	bool pass_begun;
};

/* Begin a scrape of kind over at most max circuits (arg: the kind's, freed
 * by scrape_free). in_steps: the names may be taken in steps when every
 * circuit is covered. The kind's head goes into s->out after this. False
 * when out of memory (s is then freed). */
bool scrape_init(scrape *s, const scrape_kind *kind, void *arg, uint64_t max, bool in_steps);

/* Is it made at once (at most SCRAPE_AT_ONCE_CIRCUITS circuits)? */
bool scrape_small(const scrape *s);

/* Make up to `visits` circuit visits (UINT64_MAX: all); true when done
 * (or out of memory: s->nomem or s->out.nomem, or stopped). */
bool scrape_step(scrape *s, uint64_t visits);

/* Make it all (a small scrape, or the metrics op). */
void scrape_run(scrape *s);

void scrape_free(scrape *s);

#endif
