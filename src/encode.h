/*
 * encode.h — the hot path's encoder: a snapshot written straight as JSON
 * text into a buffer, without building a jansson object and dumping it
 * (that was two thirds of a request's instructions). The policy part,
 * identical for every circuit with the same effective policy, is encoded
 * once by jansson and cached. tests/check_encode.c checks the text equals
 * what op_snapshot_json() + json_dumps() write.
 */
#ifndef CBD_ENCODE_H
#define CBD_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "circuit-table.h"
#include "proto.h"

/* Distinct effective policies whose text is cached; past it the cache
 * starts over (the text is a pure function of its key, so nothing goes
 * stale, not even across reloads). */
#define ENCODE_POLICY_CACHE_MAX 256

/* A growing text buffer; nomem sticks once an allocation failed. */
typedef struct enc_buf {
	char *buf;
	size_t len;
	size_t cap;
	bool nomem;
} enc_buf;

void enc_put(enc_buf *b, const char *text, size_t len);
void enc_puts(enc_buf *b, const char *text);
void enc_int(enc_buf *b, int64_t v);
/* A circuit name as a JSON string: names are valid UTF-8 without control
 * characters (proto_name_valid), so only '"' and '\\' need escaping. */
void enc_name(enc_buf *b, const char *name);
/* A jansson value's compact text (nomem when it cannot be written). */
void enc_value(enc_buf *b, const json_t *v);
void enc_free(enc_buf *b);
/* A jansson value as json_dumpb(JSON_COMPACT | JSON_ENCODE_ANY) writes it,
 * without its allocations (it keeps a hash table of the objects it is in
 * and names each by printing its address). Keys in insertion order, as
 * jansson 2.14 dumps them. Reals go through enc_value. */
void enc_compact(enc_buf *b, const json_t *v);

/* The snapshot object of a circuit, as op_snapshot_json() builds it. */
void encode_snapshot(enc_buf *b, const char *name, const ct_view *view, const cb_policy *policy,
    const char *preset, const proto_policy_sources *sources, int64_t now);

/* Drop the cached policy texts (exit, tests). */
void encode_cache_clear(void);

#endif
