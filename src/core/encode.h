/* SPDX-License-Identifier: Apache-2.0 */
/*
 * encode.h — the hot path's encoder: a snapshot written straight as JSON
 * text into a buffer, without building a jansson object and dumping it
 * (most of a request's work when it was done that way). The policy part,
 * identical for every circuit with the same effective policy, is encoded
 * once by jansson and cached. tests/check_encode.c checks the text equals
 * what circuit_json_snapshot() + json_dumps() write.
 */
#ifndef CBD_ENCODE_H
#define CBD_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "circuit-table.h"
#include "proto.h"

/* Distinct effective policies whose text is cached; past it the cache
 * starts over (the text is a pure function of its key, so nothing goes
 * stale, not even across reloads). */
#define ENCODE_POLICY_CACHE_MAX 256

/* A growing text buffer; nomem sticks once an allocation failed. A
 * borrowed buffer writes into room that is another's (a connection's
 * output, server-client.h): it is never grown, moved or freed there;
 * when its room runs out (or its owner calls enc_unborrow) its text moves
 * to memory of its own and it goes on there. */
typedef struct enc_buf {
	char *buf;
	size_t len;
	size_t cap;
	bool nomem;
	bool borrowed;
} enc_buf;

/* Room for len more bytes and a NUL; false (nomem) when there is none. */
bool enc_reserve(enc_buf *b, size_t len);
/* A buffer writing into the cap bytes at room (cap >= 1: a NUL at least). */
static inline enc_buf
enc_borrow(char *room, size_t cap)
{
	room[0] = '\0';
	return (enc_buf){ .buf = room, .cap = cap, .borrowed = true };
}
/* Move a borrowed buffer's text to memory of its own (nomem when there is
 * none: the text is lost); nothing for another buffer. */
void enc_unborrow(enc_buf *b);

/* Append len bytes (inline: the encoder's every piece goes through it). */
static inline void
enc_put(enc_buf *b, const char *text, size_t len)
{
	if ((b->nomem || b->cap - b->len < len + 1) && !enc_reserve(b, len))
		return;
	if (len > 0) /* text may be NULL then (an empty buffer's) */
		memcpy(b->buf + b->len, text, len);
	b->len += len;
	b->buf[b->len] = '\0';
}

/* Append a string literal (its length known at compile time). */
#define ENC_LIT(b, lit) enc_put((b), "" lit, sizeof(lit) - 1)

/* Most bytes an int64_t takes in decimal ("-9223372036854775808"). */
#define ENC_INT_MAX 20

void enc_puts(enc_buf *b, const char *text);
void enc_int(enc_buf *b, int64_t v);
/* A circuit name as a JSON string: names are valid UTF-8 without control
 * characters (proto_name_valid), so only '"' and '\\' need escaping. */
void enc_name(enc_buf *b, const char *name);
/* A jansson value's compact text (nomem when it cannot be written). */
void enc_value(enc_buf *b, const json_t *v);
void enc_free(enc_buf *b);
/* Buffers enc_recycle keeps for the next request, and the largest. */
#define ENC_SPARES 2
#define ENC_SPARE_MAX 65536

/* Done with b: keep its memory for enc_take (up to ENC_SPARES buffers of
 * at most ENC_SPARE_MAX bytes) or free it, so that a request does not
 * allocate and free its reply's buffers. */
void enc_recycle(enc_buf *b);
/* An empty buffer, with memory enc_recycle kept when there is some. */
enc_buf enc_take(void);
/* Free the kept buffers (exit). */
void enc_spares_free(void);

/* A jansson value as json_dumpb(JSON_COMPACT | JSON_ENCODE_ANY) writes it,
 * without its allocations (it keeps a hash table of the objects it is in
 * and names each by printing its address). Keys in insertion order, as
 * jansson 2.14 dumps them. Reals go through enc_value. */
void enc_compact(enc_buf *b, const json_t *v);

/* The snapshot object of a circuit, as circuit_json_snapshot() builds it
 * (protocol 3: policy_rev, and the policy only with_policy). */
void encode_snapshot(enc_buf *b, const char *name, const ct_view *view, const cb_policy *policy,
    const char *preset, const proto_policy_sources *sources, int64_t now, bool with_policy);

/* Drop the cached policy texts (exit, tests). */
void encode_cache_clear(void);

#endif
