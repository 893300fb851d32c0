/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto-scan.c — the request decoder's fast path (see proto-scan.h). It
 * only ever says "this is the object" or "not mine": anything unusual is
 * left to json_loadb, so it needs no error messages of its own.
 */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "proto-scan.h"

/* The scanner walks the view's own copy of the line, which ends in a NUL
 * (a byte no test below takes: every loop stops there without a bounds
 * test), and ends each string in place (its closing quote becomes its
 * NUL). A NUL inside the line stops the scan the same way: such a line is
 * json_loadb's. */
typedef struct scanner {
	char *p;
	const char *end;
	proto_flat *f;
} scanner;

static void
skip_some_space(scanner *s)
{
	while (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n')
		s->p++;
}

/* Lines cbd and libcbclient write have no spaces: one test, inline. */
static inline void
skip_space(scanner *s)
{
	if ((unsigned char)*s->p <= ' ')
		skip_some_space(s);
}

static bool
at(const scanner *s, char c)
{
	return *s->p == c;
}

#if !defined(__SSE2__)
/* Bytes a plain string holds: 0x20..0x7e other than '"' and '\\'. */
static const bool plain_byte[256] = {
	[0x20] = true,
	[0x21] = true,
	[0x23 ... 0x5b] = true,
	[0x5d ... 0x7e] = true,
};
#endif

/* A string of plain bytes (no escapes to undo, nothing to check for
 * UTF-8), ended in place. */
static bool
scan_plain_string(scanner *s, const char **out, size_t *len)
{
	char *p = s->p, *start;

	if (*p != '"')
		return false;
	start = ++p;
#if defined(__SSE2__)
	/* 16 bytes a step: the first that is not plain (below 0x20 or
	 * above 0x7e, '"', '\\'; the NUL at the end is one) ends the run.
	 * The view's text has PROTO_SCAN_READ_AHEAD zeroes after the line:
	 * no step reads past it, or reads a byte not set. */
	for (;;) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
		__m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
						_mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
		    _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)), /* and 0x80..0xff */
			_mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f))));
		unsigned mask = (unsigned)_mm_movemask_epi8(stop);

		if (mask != 0) {
			p += __builtin_ctz(mask);
			break;
		}
		p += 16;
	}
#else
	/* Four bytes a step (the NUL at the end stops it too), then one. */
	while (plain_byte[(unsigned char)p[0]] && plain_byte[(unsigned char)p[1]] &&
	    plain_byte[(unsigned char)p[2]] && plain_byte[(unsigned char)p[3]])
		p += 4;
	while (plain_byte[(unsigned char)*p])
		p++;
#endif
	/* Anything but the closing quote (an escape, a control or non-ASCII
	 * byte, the end) is json_loadb's to read. */
	if (*p != '"')
		return false;
	*p = '\0';
	*out = start;
	*len = (size_t)(p - start);
	s->p = p + 1;
	return true;
}

static bool
scan_word(scanner *s, const char *word, size_t len)
{
	if ((size_t)(s->end - s->p) < len || memcmp(s->p, word, len) != 0)
		return false;
	s->p += len;
	return true;
}

/* -?(0|[1-9][0-9]*) with no fraction or exponent after it. */
static bool
scan_integer(scanner *s, int64_t *out)
{
	bool negative = at(s, '-');
	const char *digits;
	int64_t v = 0;

	if (negative)
		s->p++;
	digits = s->p;
	while (*s->p >= '0' && *s->p <= '9') {
		/* Counted before it is added: no overflow, ever. */
		if (s->p - digits >= PROTO_SCAN_DIGITS_MAX)
			return false;
		v = v * 10 + (*s->p - '0');
		s->p++;
	}
	if (s->p == digits || (digits[0] == '0' && s->p - digits > 1) || at(s, '.') || at(s, 'e') ||
	    at(s, 'E'))
		return false;
	*out = negative ? -v : v;
	return true;
}

static bool scan_object(scanner *s, int obj, int depth);

_Static_assert(PROTO_FLAT_VALUES_MAX <= INT8_MAX + 1, "proto_flat.member holds an index");

static const char *const member_names[PROTO_MEMBER_MAX] = {
	[PROTO_MEMBER_ID] = "id",
	[PROTO_MEMBER_OP] = "op",
	[PROTO_MEMBER_NAME] = "name",
	[PROTO_MEMBER_FROM] = "from",
	[PROTO_MEMBER_TO] = "to",
	[PROTO_MEMBER_STATE] = "state",
	[PROTO_MEMBER_TOKEN] = "token",
	[PROTO_MEMBER_OUTCOME] = "outcome",
	[PROTO_MEMBER_NOREPLY] = "noreply",
	[PROTO_MEMBER_POLICY] = "policy",
	[PROTO_MEMBER_CTX] = "ctx",
	[PROTO_MEMBER_DURATION_MS] = "duration_ms",
	[PROTO_MEMBER_PERMIT] = "permit",
	[PROTO_MEMBER_COUNT] = "count",
	[PROTO_MEMBER_WAIT_MS] = "wait_ms",
	[PROTO_MEMBER_RETRY] = "retry",
};

const char *
proto_member_name(proto_member m)
{
	return member_names[m];
}

/* The proto_member named key (len bytes), or -1: by its first byte, then
 * compared whole (memcmp of a literal's length: a few compares inline). */
static int
member_of(const char *key, size_t len)
{
#define MEMBER_IS(lit) (len == sizeof(lit) - 1 && memcmp(key, lit, sizeof(lit) - 1) == 0)
	switch (key[0]) {
	case 'c':
		return MEMBER_IS("ctx")  ? PROTO_MEMBER_CTX
		    : MEMBER_IS("count") ? PROTO_MEMBER_COUNT
					 : -1;
	case 'd':
		return MEMBER_IS("duration_ms") ? PROTO_MEMBER_DURATION_MS : -1;
	case 'f':
		return MEMBER_IS("from") ? PROTO_MEMBER_FROM : -1;
	case 'i':
		return MEMBER_IS("id") ? PROTO_MEMBER_ID : -1;
	case 'n':
		return MEMBER_IS("name")   ? PROTO_MEMBER_NAME
		    : MEMBER_IS("noreply") ? PROTO_MEMBER_NOREPLY
					   : -1;
	case 'o':
		return MEMBER_IS("op")     ? PROTO_MEMBER_OP
		    : MEMBER_IS("outcome") ? PROTO_MEMBER_OUTCOME
					   : -1;
	case 'p':
		return MEMBER_IS("policy") ? PROTO_MEMBER_POLICY
		    : MEMBER_IS("permit")  ? PROTO_MEMBER_PERMIT
					   : -1;
	case 'r':
		return MEMBER_IS("retry") ? PROTO_MEMBER_RETRY : -1;
	case 's':
		return MEMBER_IS("state") ? PROTO_MEMBER_STATE : -1;
	case 't':
		return MEMBER_IS("to")   ? PROTO_MEMBER_TO
		    : MEMBER_IS("token") ? PROTO_MEMBER_TOKEN
					 : -1;
	case 'w':
		return MEMBER_IS("wait_ms") ? PROTO_MEMBER_WAIT_MS : -1;
	default:
		return -1;
	}
#undef MEMBER_IS
}

/* One of 64 bits for a key, from its length and its first, middle and
 * last bytes (a snapshot's 19 policy keys share first and last bytes:
 * break_ms, break_max_ms; this spreads them over 18 bits). */
static uint64_t
key_bit(const char *key, size_t len)
{
	unsigned h = (unsigned)len * 31;

	if (len > 0)
		h += (unsigned char)key[0] * 7u + (unsigned char)key[len / 2] * 3u +
		    (unsigned char)key[len - 1];
	return UINT64_C(1) << (h & 63);
}

/* The value at s into v (its key set by the caller). */
static bool
scan_value(scanner *s, int i, int depth)
{
	proto_flat_value *v = &s->f->v[i];

	if (s->p >= s->end)
		return false;
	switch (*s->p) {
	case '"':
		v->type = PROTO_FLAT_STRING;
		return scan_plain_string(s, &v->text, &v->len);
	case '{':
		v->type = PROTO_FLAT_OBJECT;
		return scan_object(s, i, depth + 1);
	case 't':
		v->type = PROTO_FLAT_TRUE;
		return scan_word(s, "true", 4);
	case 'f':
		v->type = PROTO_FLAT_FALSE;
		return scan_word(s, "false", 5);
	case 'n':
		v->type = PROTO_FLAT_NULL;
		return scan_word(s, "null", 4);
	default:
		v->type = PROTO_FLAT_INT;
		return scan_integer(s, &v->integer);
	}
}

/* The members of object obj, starting at its '{'. */
static bool
scan_object(scanner *s, int obj, int depth)
{
	proto_flat *f = s->f;
	int last = -1;
	/* A bit per key seen, by key_bit: a key whose bit is clear is not a
	 * repeat, and only the others are compared with the object's keys
	 * (a snapshot's policy has 19 members). */
	uint64_t seen = 0;

	f->v[obj].first = -1;
	if (depth > PROTO_SCAN_DEPTH_MAX)
		return false;
	s->p++;
	skip_space(s);
	if (at(s, '}')) {
		s->p++;
		return true;
	}
	for (;;) {
		const char *key;
		size_t len;
		uint64_t bit;
		int i;

		skip_space(s);
		if (f->count >= PROTO_FLAT_VALUES_MAX || !scan_plain_string(s, &key, &len) ||
		    len > PROTO_SCAN_KEY_MAX)
			return false;
		/* A name twice: json_loadb's error (JSON_REJECT_DUPLICATES). */
		bit = key_bit(key, len);
		if ((seen & bit) != 0 && proto_flat_find(f, obj, key) >= 0)
			return false;
		seen |= bit;
		i = f->count++;
		f->v[i] = (proto_flat_value){ .key = key, .key_len = len, .first = -1, .next = -1 };
		/* The request's own members: noted for proto_flat.member. */
		if (obj == 0) {
			int m = member_of(key, len);

			if (m >= 0)
				f->member[m] = (int8_t)i;
		}
		if (last < 0)
			f->v[obj].first = i;
		else
			f->v[last].next = i;
		last = i;
		skip_space(s);
		if (!at(s, ':'))
			return false;
		s->p++;
		skip_space(s);
		if (!scan_value(s, i, depth))
			return false;
		skip_space(s);
		if (at(s, ',')) {
			s->p++;
			continue;
		}
		if (at(s, '}')) {
			s->p++;
			return true;
		}
		return false;
	}
}

bool
proto_scan_flat(const char *line, size_t len, proto_flat *out)
{
	scanner s;

	/* The copy the scan walks and ends strings in: one copy of the line
	 * instead of one a string. Checked before any pointer into the copy
	 * is formed: out->text + len past the array is undefined. */
	if (len >= PROTO_FLAT_TEXT_MAX)
		return false;
	s = (scanner){ out->text, out->text + len, out };
	memcpy(out->text, line, len);
	memset(out->text + len, 0, PROTO_SCAN_READ_AHEAD); /* its NUL, and more */
	out->text_len = len + 1;
	out->count = 1;
	memset(out->member, -1, sizeof out->member);
	out->v[0] =
	    (proto_flat_value){ .key = "", .type = PROTO_FLAT_OBJECT, .first = -1, .next = -1 };
	skip_space(&s);
	if (!at(&s, '{') || !scan_object(&s, 0, 1))
		return false;
	skip_space(&s);
	return s.p == s.end;
}

int
proto_flat_find(const proto_flat *f, int obj, const char *key)
{
	/* Compared in place, byte by byte: keys are short and most differ
	 * in their first byte (a strlen and a memcmp call per member were a
	 * tenth of a request's work). */
	for (int i = f->v[obj].first; i >= 0; i = f->v[i].next) {
		const char *a = f->v[i].key, *b = key;

		while (*a == *b && *a != '\0') {
			a++;
			b++;
		}
		if (*a == *b)
			return i;
	}
	return -1;
}

json_t *
proto_flat_to_json(const proto_flat *f, int i)
{
	const proto_flat_value *v = &f->v[i];
	json_t *obj;

	switch (v->type) {
	case PROTO_FLAT_STRING:
		return json_stringn_nocheck(v->text, v->len);
	case PROTO_FLAT_INT:
		return json_integer(v->integer);
	case PROTO_FLAT_TRUE:
		return json_true();
	case PROTO_FLAT_FALSE:
		return json_false();
	case PROTO_FLAT_NULL:
		return json_null();
	case PROTO_FLAT_OBJECT:
		break;
	}
	if ((obj = json_object()) == NULL)
		return NULL;
	for (int m = v->first; m >= 0; m = f->v[m].next) {
		/* Takes the value even when it fails. */
		if (json_object_set_new_nocheck(obj, f->v[m].key, proto_flat_to_json(f, m)) != 0) {
			json_decref(obj);
			return NULL;
		}
	}
	return obj;
}

json_t *
proto_scan_request(const char *line, size_t len)
{
	proto_flat f;

	return proto_scan_flat(line, len, &f) ? proto_flat_to_json(&f, 0) : NULL;
}

int
proto_flat_find_from(const proto_flat *f, int obj, int from, const char *key, size_t len)
{
	/* From `from` to the last member, then from the first up to `from`. */
	for (int i = from >= 0 ? from : f->v[obj].first; i >= 0; i = f->v[i].next) {
		if (f->v[i].key_len == len && memcmp(f->v[i].key, key, len) == 0)
			return i;
	}
	for (int i = f->v[obj].first; from >= 0 && i >= 0 && i != from; i = f->v[i].next) {
		if (f->v[i].key_len == len && memcmp(f->v[i].key, key, len) == 0)
			return i;
	}
	return -1;
}
