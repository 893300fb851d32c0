/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto-scan.h — the request decoder's fast path: a line in a plain subset
 * of JSON is read into a flat view (no allocation, no hashing), which the
 * dispatcher reads through proto_req (proto.h) and turns into jansson
 * values only for the ops that want them: jansson's general lexer and a
 * jansson object per request would be most of a request's work. Pure.
 */
#ifndef CBD_PROTO_SCAN_H
#define CBD_PROTO_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Deepest object nesting the fast path takes (a request, its ctx). */
#define PROTO_SCAN_DEPTH_MAX 4
/* Longest member name the fast path takes, in bytes. */
#define PROTO_SCAN_KEY_MAX 64
/* Most digits of an integer the fast path takes (fits int64_t). */
#define PROTO_SCAN_DIGITS_MAX 18
/* Most values in one flat view (every object and member counts one; a
 * snapshot with its policy, sources, hold and totals is ~70). */
#define PROTO_FLAT_VALUES_MAX 128
/* Room for the view's copy of the line and a NUL: longer lines are
 * json_loadb's (a snapshot event is ~1.1 KB, a request ~50-300 bytes). */
#define PROTO_FLAT_TEXT_MAX 4096
/* Bytes the scanner reads at once (a string's bytes, 16 a step). */
#define PROTO_SCAN_READ_AHEAD 16

typedef enum proto_flat_type {
	PROTO_FLAT_STRING,
	PROTO_FLAT_INT,
	PROTO_FLAT_TRUE,
	PROTO_FLAT_FALSE,
	PROTO_FLAT_NULL,
	PROTO_FLAT_OBJECT,
} proto_flat_type;

/* One value: a member of its object (key), or the top object (index 0).
 * The fields of a type other than its own are not set: read a value by
 * its type (proto_node does). */
typedef struct proto_flat_value {
	const char *key; /* NUL-ended, in the view's text */
	size_t key_len;
	const char *text; /* PROTO_FLAT_STRING: NUL-ended, in the view's text */
	size_t len; /* PROTO_FLAT_STRING: bytes */
	int64_t integer; /* PROTO_FLAT_INT */
	int first; /* PROTO_FLAT_OBJECT: its first member's index, -1 when empty */
	int next; /* the next member of the same object, -1 when last */
	proto_flat_type type;
} proto_flat_value;

/* The members of a request the dispatcher and the ops read by name: the
 * scanner notes where each one is in the top object as it reads its key
 * (proto_flat.member), so that reading one is an index, not a search
 * (several searches a request were a tenth of its work). In the order
 * the op table's required members are checked: name first. */
typedef enum proto_member {
	PROTO_MEMBER_ID,
	PROTO_MEMBER_OP,
	PROTO_MEMBER_NAME,
	PROTO_MEMBER_FROM,
	PROTO_MEMBER_TO,
	PROTO_MEMBER_STATE,
	PROTO_MEMBER_TOKEN,
	PROTO_MEMBER_OUTCOME,
	PROTO_MEMBER_NOREPLY,
	PROTO_MEMBER_POLICY,
	PROTO_MEMBER_CTX,
	PROTO_MEMBER_DURATION_MS,
	PROTO_MEMBER_PERMIT,
	PROTO_MEMBER_COUNT,
	PROTO_MEMBER_WAIT_MS,
	PROTO_MEMBER_RETRY,
	PROTO_MEMBER_MAX /* (how many) */
} proto_member;

/* Member m's name in a request ("duration_ms"). */
const char *proto_member_name(proto_member m);

typedef struct proto_flat {
	proto_flat_value v[PROTO_FLAT_VALUES_MAX];
	int count;
	/* Where each proto_member is among the top object's members (an
	 * index into v), -1 when absent. */
	int8_t member[PROTO_MEMBER_MAX];
	size_t text_len;
	/* The line, its strings ended in place, and zeroes after it: a scan
	 * may read PROTO_SCAN_READ_AHEAD bytes from any byte of the line. */
	char text[PROTO_FLAT_TEXT_MAX + PROTO_SCAN_READ_AHEAD];
} proto_flat;

/* Read line (len bytes, no LF) into *out when the whole line is in the
 * subset: one object whose members are strings of printable ASCII without
 * escapes, integers of up to PROTO_SCAN_DIGITS_MAX digits, true, false,
 * null or such objects (nested up to PROTO_SCAN_DEPTH_MAX), no name twice
 * in one object, shorter than PROTO_FLAT_TEXT_MAX. False otherwise: the caller
 * decodes the line with json_loadb, so every error, and every text outside
 * the subset, is decoded exactly as json_loadb decodes it. Where it
 * answers, proto_flat_to_json gives the value json_loadb gives
 * (tests/check_proto.c compares them). */
bool proto_scan_flat(const char *line, size_t len, proto_flat *out);

/* Member key of object obj (an index), or -1. */
int proto_flat_find(const proto_flat *f, int obj, const char *key);

/* Value i as jansson values (a new reference); NULL when out of memory. */
json_t *proto_flat_to_json(const proto_flat *f, int i);

/* proto_scan_flat then proto_flat_to_json: the line's object, or NULL when
 * it is outside the subset (or out of memory). */
json_t *proto_scan_request(const char *line, size_t len);

/* proto_flat_find for a key of len bytes, starting at member `from` of obj
 * (-1: its first) and wrapping around: members read in the order they were
 * written are found at once. */
int proto_flat_find_from(const proto_flat *f, int obj, int from, const char *key, size_t len);

#endif
