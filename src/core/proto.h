/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto.h — the pure pieces of protocol v1's codec, shared by cbd and
 * libcbclient: error codes, member validation with messages that name the
 * member, the ctx keys (a table), policy resolution, and snapshots to and
 * from JSON. No I/O and no clock reads: `now` always comes from the caller.
 */
#ifndef CBD_PROTO_H
#define CBD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "breaker.h"
#include "proto-scan.h"

#define PROTO_VERSION 3
/* Default and bounds of max_line_bytes (spec: default 65536). */
#define PROTO_MAX_LINE_DEFAULT 65536
/* Room for an error message; longer ones are cut. */
#define PROTO_MESSAGE_SIZE 256

/* The spec's error codes, in its order. */
typedef enum proto_code {
	PROTO_OK = 0,
	PROTO_PARSE_ERROR,
	PROTO_LINE_TOO_LONG,
	PROTO_UNKNOWN_OP,
	PROTO_BAD_REQUEST,
	PROTO_FORBIDDEN,
	PROTO_CAPACITY,
	PROTO_SHUTTING_DOWN,
	PROTO_INTERNAL,
} proto_code;

#define PROTO_CODE_COUNT 9

/* An error as a value: a code and a message a person can act on. */
typedef struct proto_error {
	proto_code code;
	char message[PROTO_MESSAGE_SIZE];
} proto_error;

/* Wire name of a code ("bad_request"); parse one back (false if unknown). */
const char *proto_code_name(proto_code code);
bool proto_code_parse(const char *text, proto_code *out);

/* Fill err with code and a printf-style message; returns false so callers
 * can `return proto_fail(...)`. */
bool proto_fail(proto_error *err, proto_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The ctx members, one row each in proto.c's table: every policy key,
 * then the clock. */
typedef enum proto_ctx_key {
	PROTO_CTX_FAILURE_THRESHOLD = 0,
	PROTO_CTX_SUCCESS_THRESHOLD,
	PROTO_CTX_BREAK_MS,
	PROTO_CTX_HALF_OPEN_MAX,
	PROTO_CTX_SLOT_TTL_MS,
	PROTO_CTX_MAX_GAP_MS,
	PROTO_CTX_TRIP,
	PROTO_CTX_WINDOW,
	PROTO_CTX_WINDOW_SIZE,
	PROTO_CTX_MINIMUM_CALLS,
	PROTO_CTX_FAILURE_RATE,
	PROTO_CTX_SLOW_CALL_MS,
	PROTO_CTX_SLOW_CALL_RATE,
	PROTO_CTX_MIN_REPORTERS,
	PROTO_CTX_REPORTER_WINDOW_MS,
	PROTO_CTX_BREAK_BACKOFF,
	PROTO_CTX_BREAK_MAX_MS,
	PROTO_CTX_MAX_CONCURRENT,
	PROTO_CTX_RETRY_BUDGET_PERCENT,
	PROTO_CTX_RETRY_MIN_PER_S,
	PROTO_CTX_PRESET,
	PROTO_CTX_NOW,
} proto_ctx_key;

#define PROTO_CTX_KEY_COUNT 22

/* How a ctx member is written. */
typedef enum proto_ctx_type {
	PROTO_CTX_INT = 0, /* an integer within [min, max] */
	PROTO_CTX_ENUM, /* one of `names`; value is its index */
	PROTO_CTX_NAME, /* a preset name (proto_ctx.preset) */
} proto_ctx_type;

/* Longest preset name in bytes. */
#define PROTO_PRESET_NAME_MAX 64
/* Longest circuit name in bytes (spec: 1..256). */
#define PROTO_NAME_MAX 256
/* Most refusals one `record` with outcome "rejected" reports (its `count`,
 * protocol 3, §6). */
#define PROTO_REJECTED_COUNT_MAX 1000000
/* Most successes one record_success (or `record` with outcome "success")
 * reports: its `count`, the same call that many times in a row. */
#define PROTO_SUCCESS_COUNT_MAX 1000000

/* A row of the ctx table: the member's name, type and bounds. */
typedef struct proto_ctx_def {
	const char *name;
	int64_t min;
	int64_t max;
	proto_ctx_type type;
	const char *const *names; /* PROTO_CTX_ENUM: the values, NULL-ended */
} proto_ctx_def;

/* A partial policy: the members given (bit 1 << key in `present`). Used for
 * a request's ctx and for each layer of the config file. */
typedef struct proto_ctx {
	uint32_t present;
	int64_t value[PROTO_CTX_KEY_COUNT];
	char preset[PROTO_PRESET_NAME_MAX + 1]; /* PROTO_CTX_PRESET */
} proto_ctx;

/* The ctx members that are policy keys (all but now). */
#define PROTO_CTX_POLICY_MASK ((UINT32_C(1) << PROTO_CTX_NOW) - 1)

/* Where an effective policy key came from, lowest precedence first. */
typedef enum proto_source {
	PROTO_SOURCE_BUILTIN = 0,
	PROTO_SOURCE_DEFAULTS, /* [defaults] */
	PROTO_SOURCE_CLIENT, /* the request that created the circuit */
	PROTO_SOURCE_CONFIG, /* the circuit's [circuit "NAME"] section */
} proto_source;

#define PROTO_SOURCE_COUNT 4

/* One layer of a policy resolution: a partial policy, the preset it names
 * (its keys apply at the same level, below the layer's own), and where it
 * is from. */
typedef struct proto_layer {
	const proto_ctx *ctx; /* NULL: skipped */
	const proto_ctx *preset; /* NULL: none */
	proto_source source;
} proto_layer;

/* The effective policy's origin, one entry per policy key. */
typedef struct proto_policy_sources {
	uint8_t key[PROTO_CTX_KEY_COUNT]; /* proto_source */
} proto_policy_sources;

/* The row of key k; the key of a member name (false when not a ctx key). */
const proto_ctx_def *proto_ctx_def_get(proto_ctx_key key);
bool proto_ctx_key_parse(const char *name, proto_ctx_key *out);

/* Validate v for key k (bounds of its row); message names `field`. */
bool proto_ctx_check(proto_ctx_key key, int64_t v, const char *field, proto_error *err);

/* Parse a member's text form (a config value) into ctx; message names
 * `field`. Integers are decimal; enums by name; presets by name. */
bool proto_ctx_parse_text(proto_ctx *ctx, proto_ctx_key key, const char *text, const char *field,
    proto_error *err);

/* Is the combination of members in ctx valid on its own (window_size in
 * its window's range, break_max_ms >= break_ms)? Message names `prefix`. */
bool proto_ctx_check_combination(const proto_ctx *ctx, const char *prefix, proto_error *err);

/* A built-in preset (http-external, service, database), or NULL. */
const proto_ctx *proto_preset_builtin(const char *name);
/* The built-in presets' names, NULL-ended. */
const char *const *proto_preset_builtin_names(void);

/* Set a preset name member. False when it is too long. */
bool proto_ctx_set_preset(proto_ctx *ctx, const char *name);

/* Set / test a member of a partial policy. */
static inline void
proto_ctx_set(proto_ctx *ctx, proto_ctx_key key, int64_t v)
{
	ctx->present |= UINT32_C(1) << key;
	ctx->value[key] = v;
}

static inline bool
proto_ctx_has(const proto_ctx *ctx, proto_ctx_key key)
{
	return (ctx->present & (UINT32_C(1) << key)) != 0;
}

/* Resolve a policy from layers, highest precedence first (protocol 2:
 * circuit section, the creating request, [defaults]); NULL layers are
 * skipped. A member comes from the first layer that has it, else the
 * built-in default; slot_ttl_ms defaults to the resolved break_ms.
 * sources (may be NULL) receives each key's origin. */
void proto_policy_resolve(const proto_layer *layers, size_t n, cb_policy *out,
    proto_policy_sources *sources);

/* The preset name of the first layer that names one (NULL: none). */
const char *proto_policy_preset(const proto_layer *layers, size_t n);

/* The effective value of policy key k as a ctx member would carry it;
 * false when the key has no value (max_gap_ms unset). Not for preset. */
bool proto_policy_value(const cb_policy *policy, proto_ctx_key key, int64_t *out);

/* The request's policy members that differ from the effective policy
 * (preset: from the effective preset's name, "" for none), as a bit set
 * (1 << key); 0 when none. */
uint32_t proto_policy_conflicts(const proto_ctx *request, const cb_policy *policy,
    const char *preset);

/* Wire name of a source ("config", "client", "defaults", "builtin"). */
const char *proto_source_name(proto_source source);

/* {"failure_threshold": .., ..., "source": {...}}: every policy key (null
 * when it has no value). NULL when out of memory. */
json_t *proto_policy_to_json(const cb_policy *policy, const char *preset,
    const proto_policy_sources *sources);
/* A ctx's policy members as a JSON object (the state file). */
json_t *proto_ctx_members_to_json(const proto_ctx *ctx);
/* A resolved policy with every key, as fleet mode's circuit script takes
 * it: enums by name, 0 for an unset max_gap_ms, slow_call_ms or
 * break_max_ms. NULL when out of memory. */
json_t *proto_policy_flat_json(const cb_policy *policy);

/* Read the "ctx" member of a request (absent or null: empty). */
bool proto_ctx_from_json(const json_t *request, proto_ctx *out, proto_error *err);
/* Add every present member of ctx to obj["ctx"]; false when out of memory. */
bool proto_ctx_to_json(const proto_ctx *ctx, json_t *obj);

/* Member readers. A member set to null reads as absent. Each fills *err
 * (bad_request, naming the member) and returns false when the member is
 * invalid, or missing while required. *present (may be NULL) says whether
 * an optional member was given. */
bool proto_get_int(const json_t *obj, const char *key, int64_t min, int64_t max, bool required,
    int64_t *out, bool *present, proto_error *err);
bool proto_get_string(const json_t *obj, const char *key, bool required, const char **out,
    size_t *len, proto_error *err);
bool proto_get_name(const json_t *obj, const char *key, const char **out, proto_error *err);
bool proto_get_state(const json_t *obj, const char *key, bool required, cb_state *out,
    bool *present, proto_error *err);

/* Is text (len bytes) a valid circuit name: 1..256 bytes of UTF-8 with no
 * control characters? On false, *why says what is wrong. */
bool proto_name_valid(const char *text, size_t len, const char **why);

typedef enum proto_node_type {
	PROTO_NODE_ABSENT = 0,
	PROTO_NODE_NULL,
	PROTO_NODE_STRING,
	PROTO_NODE_INT,
	PROTO_NODE_REAL, /* jansson only */
	PROTO_NODE_TRUE,
	PROTO_NODE_FALSE,
	PROTO_NODE_OBJECT,
	PROTO_NODE_ARRAY, /* jansson only */
} proto_node_type;

/* A value of a decoded line in either form lines are read in: jansson
 * values (json), or a value of a flat view (flat, index; proto-scan.h).
 * One set of readers serves both: the snapshot reader below and
 * libcbclient's reply and event readers; the request readers' pval
 * (proto.c) is a node with its value read out. A member that is not there
 * is a node of type PROTO_NODE_ABSENT. An object node remembers where its
 * last member was found (hint): members read in the order they were
 * written cost one comparison each in a flat view. */
typedef struct proto_node {
	proto_node_type type;
	int index; /* in flat; -1: absent */
	int hint; /* an object in flat: where the next lookup starts, -1: first */
	const json_t *json;
	const proto_flat *flat;
} proto_node;

/* A node of a jansson value (NULL: absent). */
proto_node proto_node_json(const json_t *v);
/* Member key of obj in jansson values, or of anything not a flat object
 * (absent). */
proto_node proto_node_json_get(const proto_node *obj, const char *key);
/* An array's size (0 for anything else) and item i (absent past it). */
size_t proto_node_array_size(const proto_node *n);
proto_node proto_node_array_get(const proto_node *n, size_t i);

/* A node of flat value i (-1: absent). Inline, with the lookups below:
 * a watching process reads ~60 members of every event through them. */
static inline proto_node
proto_node_flat(const proto_flat *f, int i)
{
	proto_node n = { .type = PROTO_NODE_ABSENT, .index = i, .hint = -1, .flat = f };

	if (i < 0)
		return n;
	switch (f->v[i].type) {
	case PROTO_FLAT_STRING:
		n.type = PROTO_NODE_STRING;
		break;
	case PROTO_FLAT_INT:
		n.type = PROTO_NODE_INT;
		break;
	case PROTO_FLAT_TRUE:
		n.type = PROTO_NODE_TRUE;
		break;
	case PROTO_FLAT_FALSE:
		n.type = PROTO_NODE_FALSE;
		break;
	case PROTO_FLAT_NULL:
		n.type = PROTO_NODE_NULL;
		break;
	case PROTO_FLAT_OBJECT:
		n.type = PROTO_NODE_OBJECT;
		break;
	}
	return n;
}

/* Member key (len bytes, NUL-ended) of obj: absent when obj is not an
 * object or has none. Moves obj's hint past it. */
static inline proto_node
proto_node_getn(proto_node *obj, const char *key, size_t len)
{
	const proto_flat *f = obj->flat;
	int i = obj->hint;

	if (f == NULL || obj->type != PROTO_NODE_OBJECT)
		return proto_node_json_get(obj, key);
	/* Most often the member after the last one read. */
	if (i < 0 || f->v[i].key_len != len || memcmp(f->v[i].key, key, len) != 0)
		i = proto_flat_find_from(f, obj->index, obj->hint, key, len);
	if (i >= 0)
		obj->hint = f->v[i].next;
	return proto_node_flat(f, i);
}

/* Member key of obj (a literal key's length is known at compile time). */
static inline proto_node
proto_node_get(proto_node *obj, const char *key)
{
	return proto_node_getn(obj, key, strlen(key));
}

/* The node's type, and tests of it. */
static inline proto_node_type
proto_node_typeof(const proto_node *n)
{
	return n->type;
}

static inline bool
proto_node_is_absent(const proto_node *n)
{
	return n->type == PROTO_NODE_ABSENT;
}

static inline bool
proto_node_is_null(const proto_node *n)
{
	return n->type == PROTO_NODE_NULL;
}

static inline bool
proto_node_is_object(const proto_node *n)
{
	return n->type == PROTO_NODE_OBJECT;
}

static inline bool
proto_node_is_true(const proto_node *n)
{
	return n->type == PROTO_NODE_TRUE;
}

/* An integer's value (0 for anything else). */
static inline int64_t
proto_node_int(const proto_node *n)
{
	if (n->type != PROTO_NODE_INT)
		return 0;
	return n->flat != NULL ? n->flat->v[n->index].integer : json_integer_value(n->json);
}

/* An integer's or a real's value as a double (0 for anything else). */
static inline double
proto_node_number(const proto_node *n)
{
	if (n->type == PROTO_NODE_INT)
		return (double)proto_node_int(n);
	return n->type == PROTO_NODE_REAL ? json_real_value(n->json) : 0;
}

/* A string's NUL-ended text and its length (len may be NULL); NULL for
 * anything else. */
static inline const char *
proto_node_string(const proto_node *n, size_t *len)
{
	if (n->type != PROTO_NODE_STRING)
		return NULL;
	if (n->flat != NULL) {
		if (len != NULL)
			*len = n->flat->v[n->index].len;
		return n->flat->v[n->index].text;
	}
	if (len != NULL)
		*len = json_string_length(n->json);
	return json_string_value(n->json);
}

/* A snapshot as the spec's JSON object (name, ..., retry_after_ms). */
json_t *proto_snapshot_to_json(const char *name, const cb_snapshot *snap, int64_t retry_after_ms);
/* Read a snapshot object back (client side); retry_after_ms may be NULL. */
bool proto_snapshot_from_json(const json_t *obj, cb_snapshot *out, int64_t *retry_after_ms,
    proto_error *err);
/* The same from a node (either form): the same answers, the same errors. */
bool proto_snapshot_from_node(proto_node *obj, cb_snapshot *out, int64_t *retry_after_ms,
    proto_error *err);

/* Decode one request line (no LF) with JSON_REJECT_DUPLICATES and
 * JSON_ALLOW_NUL (member readers reject NUL where it matters). NULL with
 * err filled when the line is not a JSON object (parse_error) or holds an
 * integer jansson cannot represent (bad_request naming the member when the
 * text shows it). Pure: the caller frames the line. */
json_t *proto_request_decode(const char *line, size_t len, proto_error *err);

/* The request's id for echoing: an integer or a string; *id NULL when
 * absent or null. False (bad_request) for any other type. */
bool proto_request_id(const json_t *request, const json_t **id, proto_error *err);

/* Like proto_get_string, and false (bad_request) when the string holds a
 * NUL byte. */
bool proto_get_text(const json_t *obj, const char *key, bool required, const char **out,
    size_t *len, proto_error *err);

/* A request as the dispatcher reads it: its jansson values, or the flat
 * view of the decoder's fast path (proto-scan.h). Exactly one is set. The
 * readers below take the member by its proto_member (found by index in a
 * flat view, by its name in jansson values) and check and word errors as
 * the proto_get_* readers do. */
typedef struct proto_req {
	const json_t *json;
	const proto_flat *flat;
} proto_req;

bool proto_req_int(const proto_req *r, proto_member m, int64_t min, int64_t max, bool required,
    int64_t *out, bool *present, proto_error *err);
bool proto_req_text(const proto_req *r, proto_member m, bool required, const char **out,
    size_t *len, proto_error *err);
bool proto_req_name(const proto_req *r, proto_member m, const char **out, proto_error *err);
/* The request's "ctx" (absent or null: empty), as proto_ctx_from_json. */
bool proto_req_ctx(const proto_req *r, proto_ctx *out, proto_error *err);
/* Is member m given, and not null? */
bool proto_req_has(const proto_req *r, proto_member m);

/* Is member m surely absent? An index read in a flat view (a hot path's
 * test for a rare member); false: ask proto_req_has. */
static inline bool
proto_req_surely_absent(const proto_req *r, proto_member m)
{
	return r->flat != NULL && r->flat->member[m] < 0;
}
/* Is member m true? */
bool proto_req_true(const proto_req *r, proto_member m);
/* Member m as a boolean (absent or null: `absent`); false (bad_request)
 * when it is of another type. */
bool proto_req_bool(const proto_req *r, proto_member m, bool absent, bool *out, proto_error *err);
/* The request's id for echoing (a new reference: an integer or a string);
 * *id NULL when absent or null. False (bad_request) for any other type. */
bool proto_req_id(const proto_req *r, json_t **id, proto_error *err);
/* The whole request as jansson values (a new reference); NULL when out of
 * memory. */
json_t *proto_req_json(const proto_req *r);
/* Decode a request line into *out: the flat view (in *flat) when the line
 * is plain, else jansson values (*owned, the caller's reference) as
 * proto_request_decode gives them. False with err filled, as there. */
bool proto_request_read(const char *line, size_t len, proto_flat *flat, proto_req *out,
    json_t **owned, proto_error *err);

/* {"id": id (when not NULL), "ok": true}; NULL when out of memory. */
json_t *proto_reply_ok(const json_t *id);
/* {"id": id (when not NULL), "ok": false, "error": {"code", "message"}}. */
json_t *proto_reply_error(const json_t *id, const proto_error *err);

#endif
