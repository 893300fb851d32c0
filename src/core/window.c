/* SPDX-License-Identifier: Apache-2.0 */
/*
 * window.c — the failure-rate rule's sliding window (see window.h).
 */
#include <string.h>

#include "window.h"

/* A call's two bits in a count window. */
#define OUTCOME_FAILURE 0x1u
#define OUTCOME_SLOW 0x2u

/* A time window's bucket: the calls of one second. */
typedef struct bucket {
	uint32_t calls;
	uint32_t failures;
	uint32_t slow;
} bucket;

/* "No bucket written yet." */
#define NO_SECOND INT64_MIN

static uint32_t
slots_for(cb_window_kind kind, int64_t window_size)
{
	if (kind == CB_WINDOW_COUNT)
		return (uint32_t)window_size;
	return (uint32_t)((window_size + CB_WINDOW_BUCKET_MS - 1) / CB_WINDOW_BUCKET_MS);
}

size_t
window_bytes(cb_window_kind kind, int64_t window_size)
{
	uint32_t slots = slots_for(kind, window_size);

	if (kind == CB_WINDOW_COUNT)
		return sizeof(cb_window) + (slots + 3) / 4;
	return sizeof(cb_window) + (size_t)slots * sizeof(bucket);
}

void
window_init(cb_window *w, cb_window_kind kind, int64_t window_size)
{
	w->kind = (uint8_t)kind;
	w->slots = slots_for(kind, window_size);
	window_reset(w);
}

bool
window_fits(const cb_window *w, cb_window_kind kind, int64_t window_size)
{
	return w->kind == kind && w->slots == slots_for(kind, window_size);
}

void
window_reset(cb_window *w)
{
	size_t data =
	    w->kind == CB_WINDOW_COUNT ? (w->slots + 3) / 4 : (size_t)w->slots * sizeof(bucket);

	memset(w->data, 0, data);
	w->next = 0;
	w->last_second = NO_SECOND;
	memset(&w->counts, 0, sizeof w->counts);
}

static unsigned
ring_get(const cb_window *w, uint32_t i)
{
	return (w->data[i / 4] >> ((i % 4) * 2)) & 0x3u;
}

static void
ring_set(cb_window *w, uint32_t i, unsigned v)
{
	unsigned shift = (i % 4) * 2;

	w->data[i / 4] = (unsigned char)((w->data[i / 4] & ~(0x3u << shift)) | (v << shift));
}

static void
count_add(cb_window *w, bool failure, bool slow)
{
	if (w->counts.calls == w->slots) {
		unsigned old = ring_get(w, w->next);

		w->counts.calls--;
		w->counts.failures -= (old & OUTCOME_FAILURE) != 0;
		w->counts.slow -= (old & OUTCOME_SLOW) != 0;
	}
	ring_set(w, w->next, (failure ? OUTCOME_FAILURE : 0) | (slow ? OUTCOME_SLOW : 0));
	w->next = (w->next + 1) % w->slots;
	w->counts.calls++;
	w->counts.failures += failure;
	w->counts.slow += slow;
}

/* The second of time t (floor, also for times before the epoch). */
static int64_t
second_of(int64_t t)
{
	return t >= 0 ? t / CB_WINDOW_BUCKET_MS
		      : -((-t + CB_WINDOW_BUCKET_MS - 1) / CB_WINDOW_BUCKET_MS);
}

static bucket *
bucket_at(cb_window *w, int64_t second)
{
	int64_t i = second % (int64_t)w->slots;

	return (bucket *)(void *)w->data + (i < 0 ? i + w->slots : i);
}

/* Move the window's head to `second`, emptying the buckets that fall out
 * (each at most once: at most `slots` of them). */
static void
time_advance(cb_window *w, int64_t second)
{
	int64_t from;

	if (w->last_second != NO_SECOND && second <= w->last_second)
		return;
	from = w->last_second == NO_SECOND || second - w->last_second > (int64_t)w->slots
	    ? second - (int64_t)w->slots + 1
	    : w->last_second + 1;
	for (int64_t s = from; s <= second; s++) {
		bucket *b = bucket_at(w, s);

		w->counts.calls -= b->calls;
		w->counts.failures -= b->failures;
		w->counts.slow -= b->slow;
		memset(b, 0, sizeof *b);
	}
	w->last_second = second;
}

/* Add n calls alike to the newest bucket of a time window (its head
 * moved to now already), up to CB_WINDOW_CALLS_MAX calls in all. */
static void
time_add(cb_window *w, bool failure, bool slow, uint64_t n)
{
	bucket *b = bucket_at(w, w->last_second);
	uint32_t k;

	if (n > (uint64_t)(CB_WINDOW_CALLS_MAX - w->counts.calls))
		n = (uint64_t)(CB_WINDOW_CALLS_MAX - w->counts.calls);
	k = (uint32_t)n;
	b->calls += k;
	b->failures += failure ? k : 0;
	b->slow += slow ? k : 0;
	w->counts.calls += k;
	w->counts.failures += failure ? k : 0;
	w->counts.slow += slow ? k : 0;
}

void
window_add(cb_window *w, bool failure, bool slow, int64_t now)
{
	if (w->kind == CB_WINDOW_COUNT) {
		count_add(w, failure, slow);
		return;
	}
	time_advance(w, second_of(now));
	/* A clock behind the newest bucket (another process's ctx.now)
	 * counts in the newest bucket. */
	time_add(w, failure, slow, 1);
}

void
window_add_run(cb_window *w, bool failure, bool slow, uint64_t n, int64_t now)
{
	unsigned bits;

	if (n == 0)
		return;
	if (w->kind == CB_WINDOW_TIME) {
		time_advance(w, second_of(now));
		time_add(w, failure, slow, n);
		return;
	}
	/* A count window: fewer calls than slots push out as many, one by
	 * one; as many or more leave the ring holding only these calls (every
	 * slot the same two bits: written at once), its start moved n on. */
	if (n < w->slots) {
		for (uint64_t i = 0; i < n; i++)
			count_add(w, failure, slow);
		return;
	}
	bits = (failure ? OUTCOME_FAILURE : 0) | (slow ? OUTCOME_SLOW : 0);
	memset(w->data, (int)(bits * 0x55u), (w->slots + 3) / 4);
	w->next = (uint32_t)((w->next + n % w->slots) % w->slots);
	w->counts.calls = w->slots;
	w->counts.failures = failure ? w->slots : 0;
	w->counts.slow = slow ? w->slots : 0;
}

cb_window_counts
window_counts(cb_window *w, int64_t now)
{
	if (w->kind == CB_WINDOW_TIME && w->last_second != NO_SECOND)
		time_advance(w, second_of(now));
	return w->counts;
}
