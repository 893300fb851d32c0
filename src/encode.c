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
#include "op.h"

bool
enc_reserve(enc_buf *b, size_t len)
{
	size_t cap = b->cap > 0 ? b->cap : 2048;
	char *grown;

	if (b->nomem)
		return false;
	if (b->cap - b->len >= len + 1)
		return true;
	while (cap - b->len < len + 1)
		cap *= 2;
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

void
enc_int(enc_buf *b, int64_t v)
{
	static const char pairs[] = "00010203040506070809101112131415161718192021222324"
				    "25262728293031323334353637383940414243444546474849"
				    "50515253545556575859606162636465666768697071727374"
				    "75767778798081828384858687888990919293949596979899";
	char digits[24], *p = digits + sizeof digits;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	size_t n;

	/* Counts are mostly 0 or a few. */
	if (v >= 0 && v < 10) {
		digits[0] = (char)('0' + v);
		enc_put(b, digits, 1);
		return;
	}
	/* Two digits a division: most numbers here are counts and times. */
	while (u >= 100) {
		unsigned pair = (unsigned)(u % 100) * 2;

		u /= 100;
		*--p = pairs[pair + 1];
		*--p = pairs[pair];
	}
	if (u >= 10) {
		*--p = pairs[u * 2 + 1];
		*--p = pairs[u * 2];
	} else {
		*--p = (char)('0' + u);
	}
	if (v < 0)
		*--p = '-';
	n = (size_t)(digits + sizeof digits - p);
	enc_put(b, p, n);
}

void
enc_name(enc_buf *b, const char *name)
{
	const char *run = name;

	enc_put(b, "\"", 1);
	for (const char *p = name; *p != '\0'; p++) {
		if (*p != '"' && *p != '\\')
			continue;
		enc_put(b, run, (size_t)(p - run));
		enc_put(b, "\\", 1);
		run = p;
	}
	enc_puts(b, run);
	enc_put(b, "\"", 1);
}

void
enc_free(enc_buf *b)
{
	free(b->buf);
	*b = (enc_buf){ 0 };
}

/* The buffers enc_recycle kept. */
static enc_buf spares[ENC_SPARES];
static int spare_count;

void
enc_recycle(enc_buf *b)
{
	if (spare_count < ENC_SPARES && b->buf != NULL && !b->nomem && b->cap <= ENC_SPARE_MAX) {
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

/* A time member: an integer, or null. */
static void
enc_time(enc_buf *b, int64_t t)
{
	if (t == CB_TIME_NONE)
		ENC_LIT(b, "null");
	else
		enc_int(b, t);
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

void
encode_snapshot(enc_buf *b, const char *name, const ct_view *view, const cb_policy *policy,
    const char *preset, const proto_policy_sources *sources, int64_t now)
{
	const cb_snapshot *s = &view->snap;
	const ct_totals *t = &view->totals;

	ENC_LIT(b, "{\"name\":");
	enc_name(b, name);
	ENC_LIT(b, ",\"state\":\"");
	enc_puts(b, breaker_state_name(s->state));
	ENC_LIT(b, "\",\"failure_count\":");
	enc_int(b, s->failure_count);
	ENC_LIT(b, ",\"success_count\":");
	enc_int(b, s->success_count);
	ENC_LIT(b, ",\"last_failure_at\":");
	enc_time(b, s->last_failure_at);
	ENC_LIT(b, ",\"opened_at\":");
	enc_time(b, s->opened_at);
	ENC_LIT(b, ",\"retry_after_ms\":");
	enc_int(b, circuit_table_retry_after(view, policy, now));
	ENC_LIT(b, ",\"policy\":");
	enc_policy(b, policy, preset, sources);
	ENC_LIT(b, ",\"hold\":");
	if (view->hold.held)
		enc_json(b, op_hold_json(&view->hold));
	else
		ENC_LIT(b, "null");
	ENC_LIT(b, ",\"totals\":{\"successes\":");
	enc_int(b, (int64_t)t->successes);
	ENC_LIT(b, ",\"failures\":");
	enc_int(b, (int64_t)t->failures);
	ENC_LIT(b, ",\"ignored\":");
	enc_int(b, (int64_t)t->ignored);
	ENC_LIT(b, ",\"slow\":");
	enc_int(b, (int64_t)t->slow);
	ENC_LIT(b, ",\"rejected\":");
	enc_int(b, (int64_t)t->rejected);
	ENC_LIT(b, "},\"current_break_ms\":");
	enc_int(b, breaker_break_ms(s, policy));
	if (policy->trip == CB_TRIP_RATE) {
		ENC_LIT(b, ",\"window\":");
		enc_json(b, op_window_json(view));
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
