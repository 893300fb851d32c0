/* SPDX-License-Identifier: Apache-2.0 */
/*
 * encode.c — the hot path's snapshot encoder (see encode.h).
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* Out of memory in uthash must not exit cbd: the entry is just not cached. */
#define HASH_NONFATAL_OOM 1
static int hash_oom;
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
#include <uthash.h>

#include "encode.h"
#include "circuit-json.h"

/* Move b's borrowed text into cap bytes of its own. */
static bool
unborrow(enc_buf *b, size_t cap)
{
	char *own = malloc(cap);

	if (own == NULL) {
		*b = (enc_buf){ .nomem = true };
		return false;
	}
	memcpy(own, b->buf, b->len + 1);
	b->buf = own;
	b->cap = cap;
	b->borrowed = false;
	return true;
}

void
enc_unborrow(enc_buf *b)
{
	if (b->borrowed)
		unborrow(b, b->len + 1 > 2048 ? b->len + 1 : 2048);
}

bool
enc_reserve(enc_buf *b, size_t len)
{
	size_t cap = b->cap > 0 ? b->cap : 2048;
	char *grown;

	if (b->nomem)
		return false;
	if (b->cap - b->len >= len + 1)
		return true;
	if (b->borrowed && cap < 2048)
		cap = 2048;
	while (cap - b->len < len + 1)
		cap *= 2;
	if (b->borrowed)
		return unborrow(b, cap);
	grown = realloc(b->buf, cap);
	if (grown == NULL) {
		b->nomem = true;
		return false;
	}
	b->buf = grown;
	b->cap = cap;
	return true;
}

void
enc_puts(enc_buf *b, const char *text)
{
	enc_put(b, text, strlen(text));
}

static const char digit_pairs[] = "00010203040506070809101112131415161718192021222324"
				  "25262728293031323334353637383940414243444546474849"
				  "50515253545556575859606162636465666768697071727374"
				  "75767778798081828384858687888990919293949596979899";

/* v's digits ending at end, two a step (32-bit arithmetic: a division
 * by a constant is a multiply); as many as v has. */
static inline void
put_u32_back(char *end, uint32_t v)
{
	while (v >= 100) {
		uint32_t q = v / 100;

		end -= 2;
		memcpy(end, digit_pairs + (v - q * 100) * 2, 2);
		v = q;
	}
	if (v >= 10) {
		end -= 2;
		memcpy(end, digit_pairs + v * 2, 2);
	} else {
		*--end = (char)('0' + v);
	}
}

/* Exactly 8 digits of v (< 10^8), zero-padded, at p. */
static inline void
put_u32_8(char *p, uint32_t v)
{
	for (int i = 6; i >= 0; i -= 2) {
		uint32_t q = v / 100;

		memcpy(p + i, digit_pairs + (v - q * 100) * 2, 2);
		v = q;
	}
}

/* Write u (100 or more) at p; the end. Its length by comparisons (a
 * loop of divisions to count the digits, then another to write them, was
 * twice the work); times are 13 digits: their high digits, then 8 low
 * ones. */
static char *
put_uint_long(char *p, uint64_t u)
{
	uint32_t v;
	int n;

	if (u >= 100000000) {
		uint64_t high = u / 100000000;

		if (high < 10) {
			*p++ = (char)('0' + high);
		} else if (high < 100) {
			memcpy(p, digit_pairs + high * 2, 2);
			p += 2;
		} else {
			p = put_uint_long(p, high);
		}
		put_u32_8(p, (uint32_t)(u - high * 100000000));
		return p + 8;
	}
	v = (uint32_t)u;
	n = v < 10000     ? (v < 1000 ? 3 : 4)
	    : v < 1000000 ? (v < 100000 ? 5 : 6)
			  : (v < 10000000 ? 7 : 8);
	put_u32_back(p + n, v);
	return p + n;
}

/* Write u at p; the end. Most of a snapshot's integers are counts under
 * 100: written inline, without a call. */
static inline char *
put_uint(char *p, uint64_t u)
{
	if (u < 10) {
		*p = (char)('0' + u);
		return p + 1;
	}
	if (u < 100) {
		p[0] = digit_pairs[u * 2];
		p[1] = digit_pairs[u * 2 + 1];
		return p + 2;
	}
	return put_uint_long(p, u);
}

/* Write v at p, which has room for ENC_INT_MAX bytes; the end. */
static inline char *
put_int(char *p, int64_t v)
{
	if (v >= 0)
		return put_uint(p, (uint64_t)v);
	*p++ = '-';
	return put_uint(p, (uint64_t)0 - (uint64_t)v);
}

void
enc_int(enc_buf *b, int64_t v)
{
	if (!enc_reserve(b, ENC_INT_MAX))
		return;
	b->len = (size_t)(put_int(b->buf + b->len, v) - b->buf);
	b->buf[b->len] = '\0';
}

/* The bytes a name's run stops at: the end, and those to escape. */
static const bool name_stop[256] = { ['\0'] = true, ['"'] = true, ['\\'] = true };

void
enc_name(enc_buf *b, const char *name)
{
	const char *run = name, *p = name;

	enc_put(b, "\"", 1);
	for (;;) {
		while (!name_stop[(unsigned char)*p])
			p++;
		enc_put(b, run, (size_t)(p - run));
		if (*p == '\0')
			break;
		enc_put(b, "\\", 1);
		run = p++; /* the byte itself starts the next run */
	}
	enc_put(b, "\"", 1);
}

void
enc_free(enc_buf *b)
{
	if (!b->borrowed)
		free(b->buf);
	*b = (enc_buf){ 0 };
}

/* The buffers enc_recycle kept. */
static enc_buf spares[ENC_SPARES];
static int spare_count;

void
enc_recycle(enc_buf *b)
{
	if (spare_count < ENC_SPARES && b->buf != NULL && !b->nomem && !b->borrowed &&
	    b->cap <= ENC_SPARE_MAX) {
		spares[spare_count] = *b;
		spares[spare_count++].len = 0;
		*b = (enc_buf){ 0 };
	} else {
		enc_free(b);
	}
}

enc_buf
enc_take(void)
{
	return spare_count > 0 ? spares[--spare_count] : (enc_buf){ 0 };
}

void
enc_spares_free(void)
{
	while (spare_count > 0)
		enc_free(&spares[--spare_count]);
}

void
enc_value(enc_buf *b, const json_t *v)
{
	size_t flags = JSON_COMPACT | JSON_ENCODE_ANY, size;

	/* json_dumpb into our own buffer: jansson 2.14's json_dumps can emit
	 * a key-less object when its buffer cannot grow (it does not check
	 * one of its writes); json_dumpb allocates nothing. */
	if (v == NULL || b->nomem || (size = json_dumpb(v, NULL, 0, flags)) == 0) {
		b->nomem = true;
		return;
	}
	enc_put(b, "", 0);
	if (b->borrowed && b->cap - b->len < size + 1)
		enc_reserve(b, size);
	if (!b->nomem && b->cap - b->len < size + 1) {
		char *grown = realloc(b->buf, b->len + size + 1);

		if (grown == NULL) {
			b->nomem = true;
			return;
		}
		b->buf = grown;
		b->cap = b->len + size + 1;
	}
	if (b->nomem || json_dumpb(v, b->buf + b->len, size, flags) != size) {
		b->nomem = true;
		return;
	}
	b->len += size;
	b->buf[b->len] = '\0';
}

/* A string as json_dumpb writes it: '"', '\\' and control bytes escaped,
 * everything else (UTF-8 included) as it is. */
static void
enc_string(enc_buf *b, const char *text, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	const char *run = text, *end = text + len;

	enc_put(b, "\"", 1);
	for (const char *p = text; p < end; p++) {
		unsigned char c = (unsigned char)*p;
		char esc[6] = { '\\', 0 };
		size_t n = 2;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		switch (c) {
		case '"':
			esc[1] = '"';
			break;
		case '\\':
			esc[1] = '\\';
			break;
		case '\b':
			esc[1] = 'b';
			break;
		case '\f':
			esc[1] = 'f';
			break;
		case '\n':
			esc[1] = 'n';
			break;
		case '\r':
			esc[1] = 'r';
			break;
		case '\t':
			esc[1] = 't';
			break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			n = 6;
		}
		enc_put(b, run, (size_t)(p - run));
		enc_put(b, esc, n);
		run = p + 1;
	}
	enc_put(b, run, (size_t)(end - run));
	enc_put(b, "\"", 1);
}

void
enc_compact(enc_buf *b, const json_t *v)
{
	const char *key;
	json_t *member;
	size_t i = 0;

	switch (v != NULL ? json_typeof(v) : JSON_REAL) {
	case JSON_NULL:
		enc_put(b, "null", 4);
		return;
	case JSON_TRUE:
		enc_put(b, "true", 4);
		return;
	case JSON_FALSE:
		enc_put(b, "false", 5);
		return;
	case JSON_INTEGER:
		enc_int(b, json_integer_value(v));
		return;
	case JSON_STRING:
		enc_string(b, json_string_value(v), json_string_length(v));
		return;
	case JSON_OBJECT:
		enc_put(b, "{", 1);
		/* A name's length from jansson: it may hold a NUL. */
		for (void *it = json_object_iter((json_t *)v); it != NULL;
		     it = json_object_iter_next((json_t *)v, it)) {
			key = json_object_iter_key(it);
			if (i++ > 0)
				enc_put(b, ",", 1);
			enc_string(b, key, json_object_iter_key_len(it));
			enc_put(b, ":", 1);
			enc_compact(b, json_object_iter_value(it));
		}
		enc_put(b, "}", 1);
		return;
	case JSON_ARRAY:
		enc_put(b, "[", 1);
		json_array_foreach (v, i, member) {
			if (i > 0)
				enc_put(b, ",", 1);
			enc_compact(b, member);
		}
		enc_put(b, "]", 1);
		return;
	case JSON_REAL: /* and NULL: jansson's own formatting (and failure) */
		break;
	}
	enc_value(b, v);
}

/* enc_value of a value built for it (stolen). */
static void
enc_json(enc_buf *b, json_t *v)
{
	enc_compact(b, v);
	json_decref(v);
}

/* ---- the policy text cache -------------------------------------------- */

/* What the policy text depends on, with no padding to compare. */
typedef struct policy_key {
	int64_t value[PROTO_CTX_KEY_COUNT];
	int64_t has; /* bit k: key k has a value */
	uint8_t source[PROTO_CTX_KEY_COUNT];
	char preset[PROTO_PRESET_NAME_MAX + 1];
	uint8_t has_preset;
} policy_key;

typedef struct policy_text {
	UT_hash_handle hh;
	policy_key key;
	size_t len;
	char text[];
} policy_text;

static policy_text *cache;
static unsigned cache_count;

/* The last policy encoded, compared as it is given (no key to build, no
 * hash to compute): requests in a row mostly name circuits of one policy.
 * Bytes equal means the same policy; a difference in padding only misses. */
static struct {
	policy_text *text; /* NULL: none */
	cb_policy policy;
	proto_policy_sources sources;
} last;

/* Remember text as the encoding of (policy, sources); its key holds the
 * preset. */
static void
last_set(policy_text *text, const cb_policy *policy, const proto_policy_sources *sources)
{
	last.text = sources != NULL ? text : NULL;
	last.policy = *policy;
	if (sources != NULL)
		last.sources = *sources;
}

static bool
last_is(const cb_policy *policy, const char *preset, const proto_policy_sources *sources)
{
	const policy_key *key = last.text != NULL ? &last.text->key : NULL;

	return key != NULL && sources != NULL &&
	    memcmp(&last.policy, policy, sizeof *policy) == 0 &&
	    memcmp(&last.sources, sources, sizeof *sources) == 0 &&
	    (preset != NULL ? key->has_preset &&
			strncmp(key->preset, preset, PROTO_PRESET_NAME_MAX + 1) == 0
			    : !key->has_preset);
}

void
encode_cache_clear(void)
{
	policy_text *p, *tmp;

	HASH_ITER (hh, cache, p, tmp) {
		HASH_DEL(cache, p);
		free(p);
	}
	cache_count = 0;
	last.text = NULL;
}

static void
enc_policy(enc_buf *b, const cb_policy *policy, const char *preset,
    const proto_policy_sources *sources)
{
	policy_key key;
	policy_text *p;
	json_t *obj;
	char *text;
	size_t len;

	if (last_is(policy, preset, sources)) {
		enc_put(b, last.text->text, last.text->len);
		return;
	}
	memset(&key, 0, sizeof key);
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		if (proto_policy_value(policy, (proto_ctx_key)k, &key.value[k]))
			key.has |= INT64_C(1) << k;
		key.source[k] = sources != NULL ? sources->key[k] : PROTO_SOURCE_BUILTIN;
	}
	if (preset != NULL) {
		key.has_preset = 1;
		strncpy(key.preset, preset, PROTO_PRESET_NAME_MAX);
	}
	HASH_FIND(hh, cache, &key, sizeof key, p);
	if (p != NULL) {
		last_set(p, policy, sources);
		enc_put(b, p->text, p->len);
		return;
	}
	{
		enc_buf one = { 0 };

		obj = proto_policy_to_json(policy, preset, sources);
		enc_json(&one, obj);
		if (one.nomem) {
			enc_free(&one);
			b->nomem = true;
			return;
		}
		text = one.buf;
		len = one.len;
	}
	enc_put(b, text, len);
	if (cache_count >= ENCODE_POLICY_CACHE_MAX)
		encode_cache_clear();
	p = malloc(sizeof *p + len + 1);
	if (p != NULL) {
		p->key = key;
		p->len = len;
		memcpy(p->text, text, len + 1);
		hash_oom = 0;
		HASH_ADD(hh, cache, key, sizeof p->key, p);
		if (hash_oom) {
			free(p);
		} else {
			cache_count++;
			last_set(p, policy, sources);
		}
	}
	free(text);
}

/* Unchecked writers for the snapshot's fixed parts, into room reserved
 * once per part: a check and a copy call per piece were a third of the
 * encoder's work. */
#define PUT_LIT(p, lit) ((p) = (char *)memcpy((p), "" lit, sizeof(lit) - 1) + sizeof(lit) - 1)

/* A time member's last value and text: every request in the same
 * millisecond writes the same last_failure_at (at 300k requests a second,
 * ~300 of them). */
typedef struct time_memo {
	int64_t t;
	uint32_t high; /* text's first 5 digits are this time's / 10^8 (0: not) */
	size_t len;
	char text[ENC_INT_MAX];
} time_memo;

/* t (an integer, or null for CB_TIME_NONE) at p, in room for ENC_INT_MAX
 * bytes. */
static char *
put_time(char *p, int64_t t, time_memo *memo)
{
	if (t == CB_TIME_NONE) {
		PUT_LIT(p, "null");
		return p;
	}
	if (t != memo->t || memo->len == 0) {
		if (t >= INT64_C(1000000000000) && t < INT64_C(10000000000000)) {
			/* A time of these years, 13 digits: its 5 high ones
			 * change every 100 s, kept; the 8 low ones unrolled. */
			uint32_t high = (uint32_t)((uint64_t)t / 100000000);

			if (high != memo->high) {
				put_u32_back(memo->text + 5, high);
				memo->high = high;
			}
			put_u32_8(memo->text + 5,
			    (uint32_t)((uint64_t)t - (uint64_t)high * 100000000));
			memo->len = 13;
		} else {
			memo->len = (size_t)(put_int(memo->text, t) - memo->text);
			memo->high = 0;
		}
		memo->t = t;
	}
	/* A fixed size (the room is there): a few moves, not a call. */
	memcpy(p, memo->text, ENC_INT_MAX);
	return p + memo->len;
}

/* Room for a part: its literals and up to SNAPSHOT_PART_INTS integers. */
#define SNAPSHOT_PART_TEXT 200
#define SNAPSHOT_PART_INTS 10
#define SNAPSHOT_PART_MAX (SNAPSHOT_PART_TEXT + SNAPSHOT_PART_INTS * ENC_INT_MAX)

/* Start an unchecked part at b's end; NULL when there is no room. */
static inline char *
part_begin(enc_buf *b)
{
	/* (Mostly the room is there: no call.) */
	if (!b->nomem && b->cap - b->len >= SNAPSHOT_PART_MAX + 1)
		return b->buf + b->len;
	return enc_reserve(b, SNAPSHOT_PART_MAX) ? b->buf + b->len : NULL;
}

static void
part_end(enc_buf *b, char *p)
{
	b->len = (size_t)(p - b->buf);
	b->buf[b->len] = '\0';
}

static time_memo last_failure_text, opened_text;

void
encode_snapshot(enc_buf *b, const char *name, const ct_view *view, const cb_policy *policy,
    const char *preset, const proto_policy_sources *sources, int64_t now, bool with_policy)
{
	const cb_snapshot *s = &view->snap;
	const ct_totals *t = &view->totals;
	const char *state;
	char *p;

	const char *end = name;

	/* A name with nothing to escape (every name a client sends): one
	 * reservation for it and the first part, one copy. */
	while (!name_stop[(unsigned char)*end])
		end++;
	if (*end == '\0') {
		size_t n = (size_t)(end - name);

		if ((b->nomem ||
			b->cap - b->len < n + SNAPSHOT_PART_MAX + sizeof "{\"name\":\"\"" + 1) &&
		    !enc_reserve(b, n + SNAPSHOT_PART_MAX + sizeof "{\"name\":\"\""))
			return;
		p = b->buf + b->len;
		PUT_LIT(p, "{\"name\":\"");
		p = (char *)memcpy(p, name, n) + n;
		*p++ = '"';
	} else {
		ENC_LIT(b, "{\"name\":");
		enc_name(b, name);
		if ((p = part_begin(b)) == NULL)
			return;
	}
	/* 6 integers, 138 bytes of text. */
	switch (s->state) {
	case CB_STATE_CLOSED:
		PUT_LIT(p, ",\"state\":\"closed\",\"failure_count\":");
		break;
	case CB_STATE_OPEN:
		PUT_LIT(p, ",\"state\":\"open\",\"failure_count\":");
		break;
	case CB_STATE_HALF_OPEN:
		PUT_LIT(p, ",\"state\":\"half_open\",\"failure_count\":");
		break;
	default:
		PUT_LIT(p, ",\"state\":\"");
		state = breaker_state_name(s->state);
		p = (char *)memcpy(p, state, strlen(state)) + strlen(state);
		PUT_LIT(p, "\",\"failure_count\":");
	}
	p = put_int(p, s->failure_count);
	PUT_LIT(p, ",\"success_count\":");
	p = put_int(p, s->success_count);
	PUT_LIT(p, ",\"last_failure_at\":");
	p = put_time(p, s->last_failure_at, &last_failure_text);
	PUT_LIT(p, ",\"opened_at\":");
	p = put_time(p, s->opened_at, &opened_text);
	PUT_LIT(p, ",\"retry_after_ms\":");
	p = put_int(p, circuit_table_retry_after(view, policy, now));
	PUT_LIT(p, ",\"policy_rev\":");
	p = put_int(p, view->policy_rev);
	part_end(b, p);
	if (with_policy) {
		ENC_LIT(b, ",\"policy\":");
		enc_policy(b, policy, preset, sources);
	}
	ENC_LIT(b, ",\"hold\":");
	if (view->hold.held)
		enc_json(b, circuit_json_hold(&view->hold));
	else
		ENC_LIT(b, "null");
	if ((p = part_begin(b)) == NULL)
		return;
	/* 10 integers, 167 bytes of text. */
	PUT_LIT(p, ",\"totals\":{\"successes\":");
	p = put_int(p, (int64_t)t->successes);
	PUT_LIT(p, ",\"failures\":");
	p = put_int(p, (int64_t)t->failures);
	PUT_LIT(p, ",\"ignored\":");
	p = put_int(p, (int64_t)t->ignored);
	PUT_LIT(p, ",\"slow\":");
	p = put_int(p, (int64_t)t->slow);
	PUT_LIT(p, ",\"rejected\":");
	p = put_int(p, (int64_t)t->rejected);
	PUT_LIT(p, ",\"rejected_concurrency\":");
	p = put_int(p, (int64_t)t->rejected_concurrency);
	PUT_LIT(p, ",\"retries\":");
	p = put_int(p, (int64_t)t->retries);
	PUT_LIT(p, ",\"rejected_retry\":");
	p = put_int(p, (int64_t)t->rejected_retry);
	PUT_LIT(p, "},\"current_break_ms\":");
	p = put_int(p, breaker_break_ms(s, policy));
	if (policy->max_concurrent > 0) {
		PUT_LIT(p, ",\"in_flight\":");
		p = put_int(p, (int64_t)view->in_flight);
	}
	part_end(b, p);
	if (policy->trip == CB_TRIP_RATE) {
		ENC_LIT(b, ",\"window\":");
		enc_json(b, circuit_json_window(view));
	}
	if (policy->min_reporters > 1) {
		ENC_LIT(b, ",\"reporters\":");
		enc_int(b,
		    view->reporters != NULL
			? breaker_reporters_count(view->reporters, now, policy->reporter_window_ms)
			: 0);
	}
	ENC_LIT(b, "}");
}
