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
 * and PROTO_SCAN_READ_AHEAD zeroes (a byte no test below takes: every
 * loop stops there without a bounds test), and ends each string in place
 * (its closing quote becomes its NUL). A NUL inside the line stops the
 * scan the same way: such a line is json_loadb's. Every step takes the
 * position and gives the one after what it read, NULL when the line is
 * not in the subset: the position stays in a register. */

static char *
skip_some_space(char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	return p;
}

/* Past the space before byte c, which must come next; NULL when it does
 * not. Lines cbd and libcbclient write have no spaces: one test when c is
 * there. */
static inline char *
expect(char *p, char c)
{
	if (*p != c) {
		p = skip_some_space(p);
		if (*p != c)
			return NULL;
	}
	return p;
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

/* The first byte at or after p that a plain string does not hold (no
 * escapes to undo, nothing to check for UTF-8): its closing quote when
 * it is plain. */
static inline char *
plain_end(char *p)
{
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

		if (mask != 0)
			return p + __builtin_ctz(mask);
		p += 16;
	}
#else
	/* Four bytes a step (the NUL at the end stops it too), then one. */
	while (plain_byte[(unsigned char)p[0]] && plain_byte[(unsigned char)p[1]] &&
	    plain_byte[(unsigned char)p[2]] && plain_byte[(unsigned char)p[3]])
		p += 4;
	while (plain_byte[(unsigned char)*p])
		p++;
	return p;
#endif
}

/* The 4 bytes at p are word's (a literal of 4 bytes or more): one
 * compare. The view's text has zeroes after the line: 4 bytes can be
 * read from any byte of it. */
static inline bool
is_word4(const char *p, const char *word)
{
	uint32_t a, b;

	memcpy(&a, p, 4);
	memcpy(&b, word, 4);
	return a == b;
}

/* -?(0|[1-9][0-9]*) with no fraction or exponent after it, of up to
 * PROTO_SCAN_DIGITS_MAX digits: one pass (unsigned, so a longer run may
 * wrap before it is refused). */
static inline char *
scan_integer(char *p, int64_t *out)
{
	bool negative = *p == '-';
	const char *digits;
	uint64_t v = 0;
	unsigned d;
	size_t n;

	p += negative;
	digits = p;
	while ((d = (unsigned)(unsigned char)*p - '0') <= 9) {
		v = v * 10 + d;
		p++;
	}
	n = (size_t)(p - digits);
	if (n == 0 || n > PROTO_SCAN_DIGITS_MAX || (digits[0] == '0' && n > 1) || *p == '.' ||
	    (*p | 0x20) == 'e')
		return NULL;
	*out = negative ? -(int64_t)v : (int64_t)v;
	return p;
}

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

/* The members of object obj, starting at its '{'. */
static char *
scan_object(proto_flat *f, char *p, int obj, int depth)
{
	/* Where the next member's index goes: the object's first, then
	 * the last member's next. */
	int *link = &f->v[obj].first;
	/* A bit per key seen, by key_bit: a key whose bit is clear is not a
	 * repeat, and only the others are compared with the object's keys
	 * (a snapshot's policy has 19 members). The request's own members
	 * need none: proto_flat.member says whether one came before. */
	uint64_t seen = 0;

	f->v[obj].first = -1;
	if (depth > PROTO_SCAN_DEPTH_MAX)
		return NULL;
	p = skip_some_space(p + 1);
	if (*p == '}')
		return p + 1;
	for (;;) {
		proto_flat_value *v;
		char *key;
		size_t len;
		int i, m;

		if ((p = expect(p, '"')) == NULL || f->count >= PROTO_FLAT_VALUES_MAX)
			return NULL;
		key = p + 1;
		p = plain_end(key);
		len = (size_t)(p - key);
		if (*p != '"' || len > PROTO_SCAN_KEY_MAX)
			return NULL;
		*p++ = '\0';
		i = f->count++;
		v = &f->v[i];
		/* The fields of other types are not read (proto_node reads
		 * a value by its type): not set. */
		v->key = key;
		v->key_len = len;
		v->first = -1;
		v->next = -1;
		/* A name twice: json_loadb's error (JSON_REJECT_DUPLICATES).
		 * The request's own members are noted for proto_flat.member. */
		if (obj == 0 && (m = member_of(key, len)) >= 0) {
			if (f->member[m] >= 0)
				return NULL;
			f->member[m] = (int8_t)i;
		} else {
			uint64_t bit = key_bit(key, len);

			if ((seen & bit) != 0 && proto_flat_find(f, obj, key) >= 0)
				return NULL;
			seen |= bit;
		}
		*link = i;
		link = &v->next;
		if ((p = expect(p, ':')) == NULL)
			return NULL;
		p++;
		if ((unsigned char)*p <= ' ')
			p = skip_some_space(p);
		switch (*p) {
		case '"': {
			char *text = p + 1;

			p = plain_end(text);
			if (*p != '"')
				return NULL;
			*p++ = '\0';
			v->type = PROTO_FLAT_STRING;
			v->text = text;
			v->len = (size_t)(p - 1 - text);
			break;
		}
		case '{':
			v->type = PROTO_FLAT_OBJECT;
			if ((p = scan_object(f, p, i, depth + 1)) == NULL)
				return NULL;
			break;
		case 't':
			if (!is_word4(p, "true"))
				return NULL;
			v->type = PROTO_FLAT_TRUE;
			p += 4;
			break;
		case 'f':
			if (!is_word4(p + 1, "alse"))
				return NULL;
			v->type = PROTO_FLAT_FALSE;
			p += 5;
			break;
		case 'n':
			if (!is_word4(p, "null"))
				return NULL;
			v->type = PROTO_FLAT_NULL;
			p += 4;
			break;
		default:
			v->type = PROTO_FLAT_INT;
			if ((p = scan_integer(p, &v->integer)) == NULL)
				return NULL;
			break;
		}
		if ((unsigned char)*p <= ' ')
			p = skip_some_space(p);
		if (*p == ',') {
			p++;
			continue;
		}
		if (*p == '}')
			return p + 1;
		return NULL;
	}
}

bool
proto_scan_flat(const char *line, size_t len, proto_flat *out)
{
	char *p;

	/* The copy the scan walks and ends strings in: one copy of the line
	 * instead of one a string. Checked before any pointer into the copy
	 * is formed: out->text + len past the array is undefined. */
	if (len >= PROTO_FLAT_TEXT_MAX)
		return false;
	memcpy(out->text, line, len);
	memset(out->text + len, 0, PROTO_SCAN_READ_AHEAD); /* its NUL, and more */
	out->text_len = len + 1;
	out->count = 1;
	memset(out->member, -1, sizeof out->member);
	out->v[0] =
	    (proto_flat_value){ .key = "", .type = PROTO_FLAT_OBJECT, .first = -1, .next = -1 };
	if ((p = expect(out->text, '{')) == NULL || (p = scan_object(out, p, 0, 1)) == NULL)
		return false;
	if ((unsigned char)*p <= ' ')
		p = skip_some_space(p);
	return p == out->text + len;
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
