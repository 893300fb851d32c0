/*
 * proto-scan.c — the request decoder's fast path (see proto-scan.h). It
 * only ever says "this is the object" or "not mine": anything unusual is
 * left to json_loadb, so it needs no error messages of its own.
 */
#include <stdbool.h>
#include <string.h>

#include "proto-scan.h"

typedef struct scanner {
	const char *p;
	const char *end;
} scanner;

static void
skip_space(scanner *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n'))
		s->p++;
}

static bool
at(const scanner *s, char c)
{
	return s->p < s->end && *s->p == c;
}

/* A string of bytes 0x20..0x7e other than '"' and '\\': no escapes to
 * undo, nothing to check for UTF-8. */
static bool
scan_plain_string(scanner *s, const char **start, size_t *len)
{
	if (!at(s, '"'))
		return false;
	*start = ++s->p;
	for (; s->p < s->end; s->p++) {
		unsigned char c = (unsigned char)*s->p;

		if (c == '"') {
			*len = (size_t)(s->p++ - *start);
			return true;
		}
		if (c < 0x20 || c > 0x7e || c == '\\')
			return false;
	}
	return false;
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
static json_t *
scan_integer(scanner *s)
{
	bool negative = at(s, '-');
	const char *digits;
	json_int_t v = 0;

	if (negative)
		s->p++;
	digits = s->p;
	while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
		/* Counted before it is added: no overflow, ever. */
		if (s->p - digits >= PROTO_SCAN_DIGITS_MAX)
			return NULL;
		v = v * 10 + (*s->p - '0');
		s->p++;
	}
	if (s->p == digits || (digits[0] == '0' && s->p - digits > 1) || at(s, '.') || at(s, 'e') ||
	    at(s, 'E'))
		return NULL;
	return json_integer(negative ? -v : v);
}

static json_t *scan_object(scanner *s, int depth);

static json_t *
scan_value(scanner *s, int depth)
{
	const char *text;
	size_t len;

	if (s->p >= s->end)
		return NULL;
	switch (*s->p) {
	case '"':
		return scan_plain_string(s, &text, &len) ? json_stringn_nocheck(text, len) : NULL;
	case '{':
		return scan_object(s, depth + 1);
	case 't':
		return scan_word(s, "true", 4) ? json_true() : NULL;
	case 'f':
		return scan_word(s, "false", 5) ? json_false() : NULL;
	case 'n':
		return scan_word(s, "null", 4) ? json_null() : NULL;
	default:
		return scan_integer(s);
	}
}

/* An object starting at '{'. */
static json_t *
scan_object(scanner *s, int depth)
{
	json_t *obj;

	if (depth > PROTO_SCAN_DEPTH_MAX || (obj = json_object()) == NULL)
		return NULL;
	s->p++;
	skip_space(s);
	if (at(s, '}')) {
		s->p++;
		return obj;
	}
	for (;;) {
		char key[PROTO_SCAN_KEY_MAX + 1];
		const char *text;
		size_t len;
		json_t *value;

		skip_space(s);
		if (!scan_plain_string(s, &text, &len) || len > PROTO_SCAN_KEY_MAX)
			break;
		memcpy(key, text, len);
		key[len] = '\0';
		skip_space(s);
		if (!at(s, ':'))
			break;
		s->p++;
		skip_space(s);
		if ((value = scan_value(s, depth)) == NULL)
			break;
		/* A name twice: json_loadb's error (JSON_REJECT_DUPLICATES). */
		if (json_object_get(obj, key) != NULL) {
			json_decref(value);
			break;
		}
		/* Takes value even when it fails. */
		if (json_object_set_new_nocheck(obj, key, value) != 0)
			break;
		skip_space(s);
		if (at(s, ',')) {
			s->p++;
			continue;
		}
		if (at(s, '}')) {
			s->p++;
			return obj;
		}
		break;
	}
	json_decref(obj);
	return NULL;
}

json_t *
proto_scan_request(const char *line, size_t len)
{
	scanner s = { line, line + len };
	json_t *request;

	skip_space(&s);
	if (!at(&s, '{') || (request = scan_object(&s, 1)) == NULL)
		return NULL;
	skip_space(&s);
	if (s.p != s.end) {
		json_decref(request);
		return NULL;
	}
	return request;
}
