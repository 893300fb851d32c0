/*
 * proto-scan.h — the request decoder's fast path: a line in a plain subset
 * of JSON is built into jansson values directly, without json_loadb's
 * general lexer (which cost a third of a request's instructions). Pure.
 */
#ifndef CBD_PROTO_SCAN_H
#define CBD_PROTO_SCAN_H

#include <stddef.h>

#include <jansson.h>

/* Deepest object nesting the fast path takes (a request, its ctx). */
#define PROTO_SCAN_DEPTH_MAX 4
/* Longest member name the fast path takes, in bytes. */
#define PROTO_SCAN_KEY_MAX 64
/* Most digits of an integer the fast path takes (fits int64_t). */
#define PROTO_SCAN_DIGITS_MAX 18

/* The object on line (len bytes, no LF) when the whole line is in the
 * subset: one object whose members are strings of printable ASCII without
 * escapes, integers of up to PROTO_SCAN_DIGITS_MAX digits, true, false,
 * null or such objects, no name twice in one object. NULL otherwise (and
 * when out of memory): the caller decodes the line with json_loadb, so
 * every error, and every text outside the subset, is decoded exactly as
 * json_loadb decodes it. Where it answers, the value equals json_loadb's
 * (tests/check_proto.c compares them). */
json_t *proto_scan_request(const char *line, size_t len);

#endif
