/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto.c — protocol v1's shared codec pieces (see proto.h): validation
 * that names the member, the ctx key table, policy resolution, snapshots.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"
#include "proto-scan.h"

static const char *const code_names[PROTO_CODE_COUNT] = {
	[PROTO_OK] = "ok",
	[PROTO_PARSE_ERROR] = "parse_error",
	[PROTO_LINE_TOO_LONG] = "line_too_long",
	[PROTO_UNKNOWN_OP] = "unknown_op",
	[PROTO_BAD_REQUEST] = "bad_request",
	[PROTO_FORBIDDEN] = "forbidden",
	[PROTO_CAPACITY] = "capacity",
	[PROTO_SHUTTING_DOWN] = "shutting_down",
	[PROTO_INTERNAL] = "internal",
};

static const char *const trip_names[] = { "consecutive", "rate", NULL };
static const char *const window_names[] = { "count", "time", NULL };

#define INT_KEY(n, lo, hi)                                                                         \
	{                                                                                          \
		n, lo, hi, PROTO_CTX_INT, NULL                                                     \
	}

/* The ctx members, their types and bounds (spec: "Names, numbers, time"
 * and protocol 2, §3). window_size's bounds here are the union of both
 * windows'; proto_ctx_check_combination() narrows them. */
static const proto_ctx_def ctx_defs[PROTO_CTX_KEY_COUNT] = {
	[PROTO_CTX_FAILURE_THRESHOLD] = INT_KEY("failure_threshold", CB_COUNT_MIN, CB_COUNT_MAX),
	[PROTO_CTX_SUCCESS_THRESHOLD] = INT_KEY("success_threshold", CB_COUNT_MIN, CB_COUNT_MAX),
	[PROTO_CTX_BREAK_MS] = INT_KEY("break_ms", CB_DURATION_MIN, CB_DURATION_MAX),
	[PROTO_CTX_HALF_OPEN_MAX] = INT_KEY("half_open_max", CB_COUNT_MIN, CB_HALF_OPEN_MAX),
	[PROTO_CTX_SLOT_TTL_MS] = INT_KEY("slot_ttl_ms", CB_DURATION_MIN, CB_DURATION_MAX),
	[PROTO_CTX_MAX_GAP_MS] = INT_KEY("max_gap_ms", CB_DURATION_MIN, CB_DURATION_MAX),
	[PROTO_CTX_TRIP] = { "trip", 0, 1, PROTO_CTX_ENUM, trip_names },
	[PROTO_CTX_WINDOW] = { "window", 0, 1, PROTO_CTX_ENUM, window_names },
	[PROTO_CTX_WINDOW_SIZE] = INT_KEY("window_size", CB_WINDOW_COUNT_MIN, CB_WINDOW_TIME_MAX),
	[PROTO_CTX_MINIMUM_CALLS] = INT_KEY("minimum_calls", CB_COUNT_MIN, CB_COUNT_MAX),
	[PROTO_CTX_FAILURE_RATE] = INT_KEY("failure_rate", 1, CB_PERCENT_MAX),
	[PROTO_CTX_SLOW_CALL_MS] = INT_KEY("slow_call_ms", CB_DURATION_MIN, CB_DURATION_MAX),
	[PROTO_CTX_SLOW_CALL_RATE] = INT_KEY("slow_call_rate", 1, CB_PERCENT_MAX),
	[PROTO_CTX_MIN_REPORTERS] = INT_KEY("min_reporters", 1, CB_REPORTERS_MAX),
	[PROTO_CTX_REPORTER_WINDOW_MS] =
	    INT_KEY("reporter_window_ms", CB_DURATION_MIN, CB_DURATION_MAX),
	[PROTO_CTX_BREAK_BACKOFF] = INT_KEY("break_backoff", 1, CB_BREAK_BACKOFF_MAX),
	[PROTO_CTX_BREAK_MAX_MS] = INT_KEY("break_max_ms", CB_DURATION_MIN, CB_DURATION_MAX),
	[PROTO_CTX_MAX_CONCURRENT] = INT_KEY("max_concurrent", 1, CB_CONCURRENT_MAX),
	[PROTO_CTX_RETRY_BUDGET_PERCENT] =
	    INT_KEY("retry_budget_percent", 0, CB_RETRY_BUDGET_PERCENT_MAX),
	[PROTO_CTX_RETRY_MIN_PER_S] = INT_KEY("retry_min_per_s", 0, CB_RETRY_MIN_PER_S_MAX),
	[PROTO_CTX_PRESET] = { "preset", 1, PROTO_PRESET_NAME_MAX, PROTO_CTX_NAME, NULL },
	[PROTO_CTX_NOW] = INT_KEY("now", CB_TIME_MIN, CB_TIME_MAX),
};

/* The built-in presets (protocol 2, §3). */
typedef struct builtin_preset {
	const char *name;
	proto_ctx ctx;
} builtin_preset;

#define PRESET_BITS                                                                                \
	((UINT32_C(1) << PROTO_CTX_TRIP) | (UINT32_C(1) << PROTO_CTX_WINDOW) |                     \
	    (UINT32_C(1) << PROTO_CTX_WINDOW_SIZE) | (UINT32_C(1) << PROTO_CTX_MINIMUM_CALLS) |    \
	    (UINT32_C(1) << PROTO_CTX_FAILURE_RATE) | (UINT32_C(1) << PROTO_CTX_BREAK_MS))
#define PRESET(n, size, minimum, rate, brk)                                                        \
	{                                                                                          \
		n,                                                                                 \
		{                                                                                  \
			.present = PRESET_BITS,                                                    \
			.value = { [PROTO_CTX_TRIP] = CB_TRIP_RATE,                                \
				[PROTO_CTX_WINDOW] = CB_WINDOW_COUNT,                              \
				[PROTO_CTX_WINDOW_SIZE] = size,                                    \
				[PROTO_CTX_MINIMUM_CALLS] = minimum,                               \
				[PROTO_CTX_FAILURE_RATE] = rate,                                   \
				[PROTO_CTX_BREAK_MS] = brk },                                      \
		}                                                                                  \
	}

static const builtin_preset builtin_presets[] = {
	PRESET("http-external", 10, 5, 50, 30000),
	PRESET("service", 10, 5, 50, 30000),
	PRESET("database", 5, 3, 30, 15000),
};

#define BUILTIN_PRESET_COUNT (sizeof builtin_presets / sizeof builtin_presets[0])

static const char *builtin_preset_names[BUILTIN_PRESET_COUNT + 1];

const proto_ctx *
proto_preset_builtin(const char *name)
{
	for (size_t i = 0; i < BUILTIN_PRESET_COUNT; i++) {
		if (strcmp(builtin_presets[i].name, name) == 0)
			return &builtin_presets[i].ctx;
	}
	return NULL;
}

const char *const *
proto_preset_builtin_names(void)
{
	for (size_t i = 0; i < BUILTIN_PRESET_COUNT; i++)
		builtin_preset_names[i] = builtin_presets[i].name;
	builtin_preset_names[BUILTIN_PRESET_COUNT] = NULL;
	return builtin_preset_names;
}

const char *
proto_code_name(proto_code code)
{
	if ((unsigned)code >= PROTO_CODE_COUNT)
		return "internal";
	return code_names[code];
}

bool
proto_code_parse(const char *text, proto_code *out)
{
	for (int i = 0; i < PROTO_CODE_COUNT; i++) {
		if (strcmp(code_names[i], text) == 0) {
			*out = (proto_code)i;
			return true;
		}
	}
	return false;
}

bool
proto_fail(proto_error *err, proto_code code, const char *fmt, ...)
{
	va_list ap;

	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	return false;
}

const proto_ctx_def *
proto_ctx_def_get(proto_ctx_key key)
{
	return &ctx_defs[key];
}

bool
proto_ctx_key_parse(const char *name, proto_ctx_key *out)
{
	for (int i = 0; i < PROTO_CTX_KEY_COUNT; i++) {
		if (strcmp(ctx_defs[i].name, name) == 0) {
			*out = (proto_ctx_key)i;
			return true;
		}
	}
	return false;
}

bool
proto_ctx_check(proto_ctx_key key, int64_t v, const char *field, proto_error *err)
{
	const proto_ctx_def *def = &ctx_defs[key];

	if (v < def->min || v > def->max)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be an integer from %lld to %lld",
		    field, (long long)def->min, (long long)def->max);
	return true;
}

bool
proto_ctx_set_preset(proto_ctx *ctx, const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len > PROTO_PRESET_NAME_MAX)
		return false;
	memcpy(ctx->preset, name, len + 1);
	ctx->present |= UINT32_C(1) << PROTO_CTX_PRESET;
	return true;
}

/* The index of text among names, or -1. */
static int
enum_find(const char *const *names, const char *text)
{
	for (int i = 0; names[i] != NULL; i++) {
		if (strcmp(names[i], text) == 0)
			return i;
	}
	return -1;
}

/* "must be \"a\" or \"b\"" for an enum row. */
static bool
enum_fail(const proto_ctx_def *def, const char *field, proto_error *err)
{
	return proto_fail(err, PROTO_BAD_REQUEST, "%s must be \"%s\" or \"%s\"", field,
	    def->names[0], def->names[1]);
}

/* A preset name: 1..64 bytes of letters, digits, '-', '_' and '.'. */
static bool
preset_name_valid(const char *text)
{
	size_t len = strlen(text);

	if (len == 0 || len > PROTO_PRESET_NAME_MAX)
		return false;
	for (const char *p = text; *p != '\0'; p++) {
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			(*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
			return false;
	}
	return true;
}

bool
proto_ctx_parse_text(proto_ctx *ctx, proto_ctx_key key, const char *text, const char *field,
    proto_error *err)
{
	const proto_ctx_def *def = &ctx_defs[key];
	long long v;
	char *end;
	int i;

	switch (def->type) {
	case PROTO_CTX_ENUM:
		i = enum_find(def->names, text);
		if (i < 0)
			return enum_fail(def, field, err);
		proto_ctx_set(ctx, key, i);
		return true;
	case PROTO_CTX_NAME:
		if (!preset_name_valid(text))
			return proto_fail(err, PROTO_BAD_REQUEST,
			    "%s must be a preset name (1 to %d letters, digits, '-', '_', '.')",
			    field, PROTO_PRESET_NAME_MAX);
		return proto_ctx_set_preset(ctx, text);
	case PROTO_CTX_INT:
		break;
	}
	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || v < def->min || v > def->max)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be an integer from %lld to %lld",
		    field, (long long)def->min, (long long)def->max);
	proto_ctx_set(ctx, key, v);
	return true;
}

bool
proto_ctx_check_combination(const proto_ctx *ctx, const char *prefix, proto_error *err)
{
	if (proto_ctx_has(ctx, PROTO_CTX_WINDOW_SIZE)) {
		bool time = proto_ctx_has(ctx, PROTO_CTX_WINDOW) &&
		    ctx->value[PROTO_CTX_WINDOW] == CB_WINDOW_TIME;
		int64_t lo = time ? CB_WINDOW_TIME_MIN : CB_WINDOW_COUNT_MIN;
		int64_t hi = time ? CB_WINDOW_TIME_MAX : CB_WINDOW_COUNT_MAX;
		int64_t v = ctx->value[PROTO_CTX_WINDOW_SIZE];

		if (v < lo || v > hi)
			return proto_fail(err, PROTO_BAD_REQUEST,
			    "%swindow_size must be from %lld to %lld for a %s window", prefix,
			    (long long)lo, (long long)hi, time ? "time (ms)" : "count (calls)");
	}
	if (proto_ctx_has(ctx, PROTO_CTX_BREAK_MAX_MS) && proto_ctx_has(ctx, PROTO_CTX_BREAK_MS) &&
	    ctx->value[PROTO_CTX_BREAK_MAX_MS] < ctx->value[PROTO_CTX_BREAK_MS])
		return proto_fail(err, PROTO_BAD_REQUEST,
		    "%sbreak_max_ms must not be below %sbreak_ms", prefix, prefix);
	return true;
}

static const char *const source_names[PROTO_SOURCE_COUNT] = {
	[PROTO_SOURCE_BUILTIN] = "builtin",
	[PROTO_SOURCE_DEFAULTS] = "defaults",
	[PROTO_SOURCE_CLIENT] = "client",
	[PROTO_SOURCE_CONFIG] = "config",
};

const char *
proto_source_name(proto_source source)
{
	return (unsigned)source < PROTO_SOURCE_COUNT ? source_names[source] : "builtin";
}

/* The value of key from the first layer that has it (its own member, then
 * its preset's), noting its source. */
static bool
layers_find(const proto_layer *layers, size_t n, proto_ctx_key key, int64_t *out,
    proto_policy_sources *sources)
{
	for (size_t i = 0; i < n; i++) {
		const proto_ctx *from = NULL;

		if (layers[i].ctx != NULL && proto_ctx_has(layers[i].ctx, key))
			from = layers[i].ctx;
		else if (layers[i].preset != NULL && proto_ctx_has(layers[i].preset, key))
			from = layers[i].preset;
		if (from == NULL)
			continue;
		*out = from->value[key];
		if (sources != NULL)
			sources->key[key] = (uint8_t)layers[i].source;
		return true;
	}
	if (sources != NULL)
		sources->key[key] = PROTO_SOURCE_BUILTIN;
	return false;
}

const char *
proto_policy_preset(const proto_layer *layers, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (layers[i].ctx != NULL && proto_ctx_has(layers[i].ctx, PROTO_CTX_PRESET))
			return layers[i].ctx->preset;
	}
	return NULL;
}

/* Clamp v into [lo, hi]. */
static int64_t
clamp(int64_t v, int64_t lo, int64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void
proto_policy_resolve(const proto_layer *layers, size_t n, cb_policy *out,
    proto_policy_sources *sources)
{
	int64_t v;

	/* Every key has a source, also those resolved without layers_find. */
	for (int k = 0; sources != NULL && k < PROTO_CTX_KEY_COUNT; k++)
		sources->key[k] = PROTO_SOURCE_BUILTIN;
	breaker_policy_default(out);
	layers_find(layers, n, PROTO_CTX_FAILURE_THRESHOLD, &out->failure_threshold, sources);
	layers_find(layers, n, PROTO_CTX_SUCCESS_THRESHOLD, &out->success_threshold, sources);
	layers_find(layers, n, PROTO_CTX_BREAK_MS, &out->break_ms, sources);
	layers_find(layers, n, PROTO_CTX_HALF_OPEN_MAX, &out->half_open_max, sources);
	if (!layers_find(layers, n, PROTO_CTX_SLOT_TTL_MS, &out->slot_ttl_ms, sources))
		out->slot_ttl_ms = out->break_ms;
	if (!layers_find(layers, n, PROTO_CTX_MAX_GAP_MS, &out->max_gap_ms, sources))
		out->max_gap_ms = 0;
	if (layers_find(layers, n, PROTO_CTX_TRIP, &v, sources))
		out->trip = (cb_trip_rule)v;
	if (layers_find(layers, n, PROTO_CTX_WINDOW, &v, sources))
		out->window = (cb_window_kind)v;
	/* A size from one layer and a window kind from another may not fit:
	 * the size is brought into the kind's range. */
	if (layers_find(layers, n, PROTO_CTX_WINDOW_SIZE, &out->window_size, sources))
		out->window_size = out->window == CB_WINDOW_TIME
		    ? clamp(out->window_size, CB_WINDOW_TIME_MIN, CB_WINDOW_TIME_MAX)
		    : clamp(out->window_size, CB_WINDOW_COUNT_MIN, CB_WINDOW_COUNT_MAX);
	else
		out->window_size = out->window == CB_WINDOW_TIME ? CB_DEFAULT_WINDOW_TIME_MS
								 : CB_DEFAULT_WINDOW_COUNT;
	layers_find(layers, n, PROTO_CTX_MINIMUM_CALLS, &out->minimum_calls, sources);
	layers_find(layers, n, PROTO_CTX_FAILURE_RATE, &out->failure_rate, sources);
	if (!layers_find(layers, n, PROTO_CTX_SLOW_CALL_MS, &out->slow_call_ms, sources))
		out->slow_call_ms = 0;
	layers_find(layers, n, PROTO_CTX_SLOW_CALL_RATE, &out->slow_call_rate, sources);
	layers_find(layers, n, PROTO_CTX_MIN_REPORTERS, &out->min_reporters, sources);
	layers_find(layers, n, PROTO_CTX_REPORTER_WINDOW_MS, &out->reporter_window_ms, sources);
	layers_find(layers, n, PROTO_CTX_BREAK_BACKOFF, &out->break_backoff, sources);
	if (!layers_find(layers, n, PROTO_CTX_BREAK_MAX_MS, &out->break_max_ms, sources))
		out->break_max_ms = 0;
	else if (out->break_max_ms < out->break_ms)
		out->break_max_ms = out->break_ms; /* from different layers: no growth */
	if (!layers_find(layers, n, PROTO_CTX_MAX_CONCURRENT, &out->max_concurrent, sources))
		out->max_concurrent = 0;
	if (!layers_find(layers, n, PROTO_CTX_RETRY_BUDGET_PERCENT, &out->retry_budget_percent,
		sources))
		out->retry_budget_percent = -1;
	layers_find(layers, n, PROTO_CTX_RETRY_MIN_PER_S, &out->retry_min_per_s, sources);
	/* preset: where the effective one was named. */
	if (sources != NULL) {
		sources->key[PROTO_CTX_PRESET] = PROTO_SOURCE_BUILTIN;
		for (size_t i = 0; i < n; i++) {
			if (layers[i].ctx != NULL &&
			    proto_ctx_has(layers[i].ctx, PROTO_CTX_PRESET)) {
				sources->key[PROTO_CTX_PRESET] = (uint8_t)layers[i].source;
				break;
			}
		}
	}
}

bool
proto_policy_value(const cb_policy *policy, proto_ctx_key key, int64_t *out)
{
	switch (key) {
	case PROTO_CTX_FAILURE_THRESHOLD:
		*out = policy->failure_threshold;
		return true;
	case PROTO_CTX_SUCCESS_THRESHOLD:
		*out = policy->success_threshold;
		return true;
	case PROTO_CTX_BREAK_MS:
		*out = policy->break_ms;
		return true;
	case PROTO_CTX_HALF_OPEN_MAX:
		*out = policy->half_open_max;
		return true;
	case PROTO_CTX_SLOT_TTL_MS:
		*out = policy->slot_ttl_ms;
		return true;
	case PROTO_CTX_MAX_GAP_MS:
		*out = policy->max_gap_ms;
		return policy->max_gap_ms > 0;
	case PROTO_CTX_TRIP:
		*out = policy->trip;
		return true;
	case PROTO_CTX_WINDOW:
		*out = policy->window;
		return true;
	case PROTO_CTX_WINDOW_SIZE:
		*out = policy->window_size;
		return true;
	case PROTO_CTX_MINIMUM_CALLS:
		*out = policy->minimum_calls;
		return true;
	case PROTO_CTX_FAILURE_RATE:
		*out = policy->failure_rate;
		return true;
	case PROTO_CTX_SLOW_CALL_MS:
		*out = policy->slow_call_ms;
		return policy->slow_call_ms > 0;
	case PROTO_CTX_SLOW_CALL_RATE:
		*out = policy->slow_call_rate;
		return true;
	case PROTO_CTX_MIN_REPORTERS:
		*out = policy->min_reporters;
		return true;
	case PROTO_CTX_REPORTER_WINDOW_MS:
		*out = policy->reporter_window_ms;
		return true;
	case PROTO_CTX_BREAK_BACKOFF:
		*out = policy->break_backoff;
		return true;
	case PROTO_CTX_BREAK_MAX_MS:
		*out = policy->break_max_ms;
		return policy->break_max_ms > 0;
	case PROTO_CTX_MAX_CONCURRENT:
		*out = policy->max_concurrent;
		return policy->max_concurrent > 0;
	case PROTO_CTX_RETRY_BUDGET_PERCENT:
		*out = policy->retry_budget_percent;
		return policy->retry_budget_percent >= 0;
	case PROTO_CTX_RETRY_MIN_PER_S:
		*out = policy->retry_min_per_s;
		return true;
	case PROTO_CTX_PRESET:
	case PROTO_CTX_NOW:
		break;
	}
	return false;
}

uint32_t
proto_policy_conflicts(const proto_ctx *request, const cb_policy *policy, const char *preset)
{
	uint32_t conflicts = 0;

	/* The policy members given only (a request gives a few, if any). */
	for (uint32_t left = request->present & PROTO_CTX_POLICY_MASK; left != 0;
	     left &= left - 1) {
		int k = __builtin_ctz(left);
		int64_t v;
		if (k == PROTO_CTX_PRESET) {
			if (preset == NULL || strcmp(preset, request->preset) != 0)
				conflicts |= UINT32_C(1) << k;
			continue;
		}
		if (!proto_policy_value(policy, (proto_ctx_key)k, &v) || v != request->value[k])
			conflicts |= UINT32_C(1) << k;
	}
	return conflicts;
}

/* A policy key's value as JSON: an integer, an enum's name, or null. */
static json_t *
value_json(proto_ctx_key key, bool has, int64_t v)
{
	if (!has)
		return json_null();
	if (ctx_defs[key].type == PROTO_CTX_ENUM)
		return json_string(ctx_defs[key].names[v]);
	return json_integer(v);
}

json_t *
proto_policy_to_json(const cb_policy *policy, const char *preset,
    const proto_policy_sources *sources)
{
	json_t *obj = json_object(), *src = json_object();
	bool ok = obj != NULL && src != NULL;

	for (int k = 0; ok && k < PROTO_CTX_KEY_COUNT; k++) {
		int64_t v = 0;
		json_t *value;

		if (!(PROTO_CTX_POLICY_MASK & (UINT32_C(1) << k)))
			continue;
		if (k == PROTO_CTX_PRESET) {
			value = preset != NULL ? json_string(preset) : json_null();
		} else {
			bool has = proto_policy_value(policy, (proto_ctx_key)k, &v);

			value = value_json((proto_ctx_key)k, has, v);
		}
		ok = json_object_set_new(obj, ctx_defs[k].name, value) == 0 &&
		    json_object_set_new(src, ctx_defs[k].name,
			json_string(
			    proto_source_name(sources != NULL ? (proto_source)sources->key[k]
							      : PROTO_SOURCE_BUILTIN))) == 0;
	}
	if (ok && json_object_set_new(obj, "source", src) == 0)
		return obj;
	if (!ok)
		json_decref(src);
	json_decref(obj);
	return NULL;
}

/* A ctx member as JSON (present members only). */
static json_t *
member_json(const proto_ctx *ctx, proto_ctx_key key)
{
	if (key == PROTO_CTX_PRESET)
		return json_string(ctx->preset);
	return value_json(key, true, ctx->value[key]);
}

json_t *
proto_ctx_members_to_json(const proto_ctx *ctx)
{
	json_t *obj = json_object();

	if (obj == NULL)
		return NULL;
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		if ((PROTO_CTX_POLICY_MASK & (UINT32_C(1) << k)) &&
		    proto_ctx_has(ctx, (proto_ctx_key)k) &&
		    json_object_set_new(obj, ctx_defs[k].name,
			member_json(ctx, (proto_ctx_key)k)) != 0) {
			json_decref(obj);
			return NULL;
		}
	}
	return obj;
}

/* ---- values of a line, from jansson or from a flat view --------------- */

proto_node
proto_node_json(const json_t *v)
{
	proto_node n = { .index = -1, .hint = -1, .json = v };

	switch (v != NULL ? json_typeof(v) : JSON_NULL) {
	case JSON_OBJECT:
		n.type = PROTO_NODE_OBJECT;
		break;
	case JSON_ARRAY:
		n.type = PROTO_NODE_ARRAY;
		break;
	case JSON_STRING:
		n.type = PROTO_NODE_STRING;
		break;
	case JSON_INTEGER:
		n.type = PROTO_NODE_INT;
		break;
	case JSON_REAL:
		n.type = PROTO_NODE_REAL;
		break;
	case JSON_TRUE:
		n.type = PROTO_NODE_TRUE;
		break;
	case JSON_FALSE:
		n.type = PROTO_NODE_FALSE;
		break;
	case JSON_NULL:
		n.type = v != NULL ? PROTO_NODE_NULL : PROTO_NODE_ABSENT;
		break;
	}
	return n;
}

proto_node
proto_node_json_get(const proto_node *obj, const char *key)
{
	if (obj->flat != NULL)
		return proto_node_flat(obj->flat, -1);
	return proto_node_json(json_object_get(obj->json, key));
}

size_t
proto_node_array_size(const proto_node *n)
{
	return n->type == PROTO_NODE_ARRAY ? json_array_size(n->json) : 0;
}

proto_node
proto_node_array_get(const proto_node *n, size_t i)
{
	return proto_node_json(n->type == PROTO_NODE_ARRAY ? json_array_get(n->json, i) : NULL);
}

/* ---- member values, from jansson or from a flat view ------------------ */

/* What the member readers check, whichever form the request is in. */
typedef enum pval_type {
	PVAL_ABSENT = 0, /* missing or null */
	PVAL_STRING,
	PVAL_INT,
	PVAL_TRUE,
	PVAL_FALSE,
	PVAL_OBJECT,
	PVAL_OTHER, /* a real or an array */
} pval_type;

typedef struct pval {
	pval_type type;
	int64_t integer;
	const char *text; /* PVAL_STRING: NUL-ended */
	size_t len;
	const json_t *json; /* the jansson value, when the request is one */
	int flat; /* its index in the flat view, when the request is one */
} pval;

/* A node as the member readers check it: nodes tell the two forms'
 * types apart once (proto_node_json, proto_node_flat); a pval adds the
 * value itself. Inline, so a request's lookups build no node in memory. */
static inline pval
pval_node(const proto_node *n)
{
	pval p = { .json = n->json, .flat = n->flat != NULL ? n->index : -1 };

	switch (n->type) {
	case PROTO_NODE_ABSENT:
	case PROTO_NODE_NULL:
		p.type = PVAL_ABSENT;
		break;
	case PROTO_NODE_STRING:
		p.type = PVAL_STRING;
		p.text = proto_node_string(n, &p.len);
		break;
	case PROTO_NODE_INT:
		p.type = PVAL_INT;
		p.integer = proto_node_int(n);
		break;
	case PROTO_NODE_TRUE:
		p.type = PVAL_TRUE;
		break;
	case PROTO_NODE_FALSE:
		p.type = PVAL_FALSE;
		break;
	case PROTO_NODE_OBJECT:
		p.type = PVAL_OBJECT;
		break;
	case PROTO_NODE_REAL:
	case PROTO_NODE_ARRAY:
		p.type = PVAL_OTHER;
		break;
	}
	return p;
}

static inline pval
pval_json(const json_t *v)
{
	proto_node n = proto_node_json(v);

	return pval_node(&n);
}

static inline pval
pval_flat(const proto_flat *f, int i)
{
	proto_node n = proto_node_flat(f, i);

	return pval_node(&n);
}

/* Member key of object obj. */
static pval
node_member(proto_node *obj, const char *key)
{
	proto_node v = proto_node_get(obj, key);

	return pval_node(&v);
}

/* Member m of the request's top object: where the scanner noted it in a
 * flat view. */
static inline pval
req_member(const proto_req *r, proto_member m)
{
	return r->flat != NULL ? pval_flat(r->flat, r->flat->member[m])
			       : pval_json(json_object_get(r->json, proto_member_name(m)));
}

/* Member key of obj, an object member of request r. */
static pval
req_member_of(const proto_req *r, const pval *obj, const char *key)
{
	return r->flat != NULL ? pval_flat(r->flat, proto_flat_find(r->flat, obj->flat, key))
			       : pval_json(json_object_get(obj->json, key));
}

static inline bool
pval_int(const pval *v, const char *key, int64_t min, int64_t max, bool required, int64_t *out,
    bool *present, proto_error *err)
{
	if (present != NULL)
		*present = v->type != PVAL_ABSENT;
	if (v->type == PVAL_ABSENT) {
		if (required)
			return proto_fail(err, PROTO_BAD_REQUEST, "%s is required", key);
		return true;
	}
	if (v->type != PVAL_INT || v->integer < min || v->integer > max)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be an integer from %lld to %lld",
		    key, (long long)min, (long long)max);
	*out = v->integer;
	return true;
}

static inline bool
pval_string(const pval *v, const char *key, bool required, const char **out, size_t *len,
    proto_error *err)
{
	if (v->type == PVAL_ABSENT) {
		*out = NULL;
		if (required)
			return proto_fail(err, PROTO_BAD_REQUEST, "%s is required", key);
		return true;
	}
	if (v->type != PVAL_STRING)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be a string", key);
	*out = v->text;
	if (len != NULL)
		*len = v->len;
	return true;
}

static inline bool
pval_text(const pval *v, const char *key, bool required, const char **out, size_t *len,
    proto_error *err)
{
	size_t n = 0;

	if (!pval_string(v, key, required, out, &n, err))
		return false;
	/* (A flat view's strings are printable ASCII: no NUL.) */
	if (*out != NULL && v->flat < 0 && strlen(*out) != n)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must not contain NUL bytes", key);
	if (len != NULL)
		*len = *out != NULL ? n : 0;
	return true;
}

static inline bool
pval_name(const pval *v, const char *key, const char **out, proto_error *err)
{
	const char *why;
	size_t len = 0;

	if (!pval_string(v, key, true, out, &len, err))
		return false;
	/* A string from the flat view is printable ASCII (proto-scan.h): of
	 * the rules, only its length is left to check. */
	if ((v->flat < 0 || len == 0 || len > PROTO_NAME_MAX) && !proto_name_valid(*out, len, &why))
		return proto_fail(err, PROTO_BAD_REQUEST, "%s %s", key, why);
	return true;
}

bool
proto_get_int(const json_t *obj, const char *key, int64_t min, int64_t max, bool required,
    int64_t *out, bool *present, proto_error *err)
{
	pval v = pval_json(json_object_get(obj, key));

	return pval_int(&v, key, min, max, required, out, present, err);
}

bool
proto_get_string(const json_t *obj, const char *key, bool required, const char **out, size_t *len,
    proto_error *err)
{
	pval v = pval_json(json_object_get(obj, key));

	return pval_string(&v, key, required, out, len, err);
}

bool
proto_name_valid(const char *text, size_t len, const char **why)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t i = 0;

	if (len == 0 || len > PROTO_NAME_MAX) {
		*why = "must be 1 to 256 bytes";
		return false;
	}
	while (i < len) {
		unsigned c = s[i];
		size_t extra;
		unsigned cp;

		if (c < 0x80) {
			if (c < 0x20 || c == 0x7f) {
				*why = "must not contain control characters";
				return false;
			}
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			extra = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			extra = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			extra = 3;
			cp = c & 0x07;
		} else {
			*why = "must be valid UTF-8";
			return false;
		}
		if (i + extra >= len) { /* truncated sequence */
			*why = "must be valid UTF-8";
			return false;
		}
		for (size_t k = 1; k <= extra; k++) {
			if ((s[i + k] & 0xc0) != 0x80) {
				*why = "must be valid UTF-8";
				return false;
			}
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		/* Overlong forms, surrogates and values past U+10FFFF. */
		if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff)) {
			*why = "must be valid UTF-8";
			return false;
		}
		if (cp >= 0x80 && cp <= 0x9f) {
			*why = "must not contain control characters";
			return false;
		}
		i += extra + 1;
	}
	return true;
}

bool
proto_get_name(const json_t *obj, const char *key, const char **out, proto_error *err)
{
	pval v = pval_json(json_object_get(obj, key));

	return pval_name(&v, key, out, err);
}

bool
proto_get_state(const json_t *obj, const char *key, bool required, cb_state *out, bool *present,
    proto_error *err)
{
	const char *text = NULL;
	size_t len = 0;

	if (present != NULL)
		*present = false;
	if (!proto_get_string(obj, key, required, &text, &len, err))
		return false;
	if (text == NULL)
		return true;
	if (!breaker_state_parse(text, len, out))
		return proto_fail(err, PROTO_BAD_REQUEST,
		    "%s must be \"closed\", \"open\" or \"half_open\"", key);
	if (present != NULL)
		*present = true;
	return true;
}

/* "ctx.<name>", the field an error about ctx member def names. */
static const char *
ctx_field(const proto_ctx_def *def, char *buf, size_t size)
{
	snprintf(buf, size, "ctx.%s", def->name);
	return buf;
}

/* The row of ctx member key (NUL-ended), or -1: the first byte, then the
 * rest (most rows differ in the first). */
static int
ctx_key_find(const char *key)
{
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		if (ctx_defs[k].name[0] == key[0] && strcmp(ctx_defs[k].name, key) == 0)
			return k;
	}
	return -1;
}

/* Member def (row k) of request r's ctx, given as v, into out. The
 * field's name is made only for an error: the checks run again with it
 * (they are pure), so that a good member costs no formatting. */
static bool
ctx_member(const pval *v, int k, proto_ctx *out, proto_error *err)
{
	const proto_ctx_def *def = &ctx_defs[k];
	char field[64];

	if (def->type != PROTO_CTX_INT) {
		if (v->type != PVAL_STRING || strlen(v->text) != v->len) {
			ctx_field(def, field, sizeof field);
			return def->type == PROTO_CTX_ENUM
			    ? enum_fail(def, field, err)
			    : proto_fail(err, PROTO_BAD_REQUEST, "%s must be a string", field);
		}
		if (proto_ctx_parse_text(out, (proto_ctx_key)k, v->text, def->name, err))
			return true;
		return proto_ctx_parse_text(out, (proto_ctx_key)k, v->text,
		    ctx_field(def, field, sizeof field), err);
	}
	if (v->type != PVAL_INT || v->integer < def->min || v->integer > def->max)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be an integer from %lld to %lld",
		    ctx_field(def, field, sizeof field), (long long)def->min, (long long)def->max);
	proto_ctx_set(out, (proto_ctx_key)k, v->integer);
	return true;
}

_Static_assert(PROTO_CTX_KEY_COUNT <= 32, "ctx rows are bits of a uint32_t");

/* The "ctx" member of request r into out. */
static bool
req_ctx(const proto_req *r, proto_ctx *out, proto_error *err)
{
	pval ctx = req_member(r, PROTO_MEMBER_CTX);

	memset(out, 0, sizeof *out);
	if (ctx.type == PVAL_ABSENT)
		return true;
	if (ctx.type != PVAL_OBJECT)
		return proto_fail(err, PROTO_BAD_REQUEST, "ctx must be an object");
	if (r->flat != NULL) {
		/* A flat view: its members read once, each row's found by
		 * name (a search of the ctx for each of the table's rows was
		 * most of a request's lookups); then checked in the table's
		 * order, as below. */
		int at[PROTO_CTX_KEY_COUNT];
		uint32_t given = 0;

		for (int i = r->flat->v[ctx.flat].first; i >= 0; i = r->flat->v[i].next) {
			int k = ctx_key_find(r->flat->v[i].key);

			if (k >= 0) {
				at[k] = i;
				given |= UINT32_C(1) << k;
			}
		}
		for (uint32_t left = given; left != 0; left &= left - 1) {
			int k = __builtin_ctz(left);
			pval v = pval_flat(r->flat, at[k]);

			if (v.type != PVAL_ABSENT && !ctx_member(&v, k, out, err))
				return false;
		}
		return proto_ctx_check_combination(out, "ctx.", err);
	}
	/* In the table's order, so that of two bad members the same one is
	 * named whichever form the request is in. */
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		pval v = req_member_of(r, &ctx, ctx_defs[k].name);

		if (v.type != PVAL_ABSENT && !ctx_member(&v, k, out, err))
			return false;
	}
	return proto_ctx_check_combination(out, "ctx.", err);
}

bool
proto_ctx_from_json(const json_t *request, proto_ctx *out, proto_error *err)
{
	proto_req r = { .json = request };

	return req_ctx(&r, out, err);
}

bool
proto_ctx_to_json(const proto_ctx *ctx, json_t *obj)
{
	json_t *members;

	if (ctx->present == 0)
		return true;
	members = json_object();
	if (members == NULL)
		return false;
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		if (proto_ctx_has(ctx, (proto_ctx_key)k) &&
		    json_object_set_new(members, ctx_defs[k].name,
			member_json(ctx, (proto_ctx_key)k)) != 0) {
			json_decref(members);
			return false;
		}
	}
	return json_object_set_new(obj, "ctx", members) == 0;
}

/* A time member: an integer, or null for CB_TIME_NONE. */
static json_t *
time_to_json(int64_t t)
{
	return t == CB_TIME_NONE ? json_null() : json_integer(t);
}

json_t *
proto_snapshot_to_json(const char *name, const cb_snapshot *snap, int64_t retry_after_ms)
{
	return json_pack("{s:s, s:s, s:I, s:I, s:o, s:o, s:I}", "name", name, "state",
	    breaker_state_name(snap->state), "failure_count", (json_int_t)snap->failure_count,
	    "success_count", (json_int_t)snap->success_count, "last_failure_at",
	    time_to_json(snap->last_failure_at), "opened_at", time_to_json(snap->opened_at),
	    "retry_after_ms", (json_int_t)retry_after_ms);
}

/* Read a time member that may be null. */
static bool
time_from_node(proto_node *obj, const char *key, int64_t *out, proto_error *err)
{
	pval v = node_member(obj, key);
	bool present;

	*out = CB_TIME_NONE;
	return pval_int(&v, key, CB_TIME_MIN, CB_TIME_MAX, false, out, &present, err);
}

/* A required integer member from 0. */
static bool
count_from_node(proto_node *obj, const char *key, int64_t *out, proto_error *err)
{
	pval v = node_member(obj, key);

	return pval_int(&v, key, 0, INT64_MAX, true, out, NULL, err);
}

bool
proto_snapshot_from_node(proto_node *obj, cb_snapshot *out, int64_t *retry_after_ms,
    proto_error *err)
{
	int64_t retry = 0;
	const char *state = NULL;
	size_t len = 0;
	pval v;

	if (!proto_node_is_object(obj))
		return proto_fail(err, PROTO_INTERNAL, "snapshot must be an object");
	breaker_snapshot_init(out);
	/* In the order cbd writes them (a flat view finds each at once). */
	v = node_member(obj, "state");
	if (!pval_string(&v, "state", true, &state, &len, err))
		return false;
	if (!breaker_state_parse(state, len, &out->state))
		return proto_fail(err, PROTO_BAD_REQUEST,
		    "%s must be \"closed\", \"open\" or \"half_open\"", "state");
	if (!count_from_node(obj, "failure_count", &out->failure_count, err) ||
	    !count_from_node(obj, "success_count", &out->success_count, err) ||
	    !time_from_node(obj, "last_failure_at", &out->last_failure_at, err) ||
	    !time_from_node(obj, "opened_at", &out->opened_at, err))
		return false;
	v = node_member(obj, "retry_after_ms");
	if (!pval_int(&v, "retry_after_ms", 0, INT64_MAX, false, &retry, NULL, err))
		return false;
	if (retry_after_ms != NULL)
		*retry_after_ms = retry;
	return true;
}

bool
proto_snapshot_from_json(const json_t *obj, cb_snapshot *out, int64_t *retry_after_ms,
    proto_error *err)
{
	proto_node n = proto_node_json(obj);

	return proto_snapshot_from_node(&n, out, retry_after_ms, err);
}

/* The member whose value ends near byte pos of line: the last `"key":`
 * before it. False when the text does not show one (e.g. in an array). */
static bool
member_before(const char *line, size_t len, size_t pos, char *out, size_t size)
{
	size_t i = pos < len ? pos : len;
	size_t end, start;

	/* Back over the number itself. */
	while (i > 0 && line[i - 1] != '\0' && strchr("0123456789+-.eE", line[i - 1]) != NULL)
		i--;
	while (i > 0 && line[i - 1] != '\0' && strchr(" \t\r\n", line[i - 1]) != NULL)
		i--;
	if (i == 0 || line[i - 1] != ':')
		return false;
	i--;
	while (i > 0 && line[i - 1] != '\0' && strchr(" \t\r\n", line[i - 1]) != NULL)
		i--;
	if (i == 0 || line[i - 1] != '"')
		return false;
	end = --i;
	while (i > 0 && !(line[i - 1] == '"' && (i < 2 || line[i - 2] != '\\')))
		i--;
	if (i == 0)
		return false;
	start = i;
	if (end - start + 1 > size)
		return false;
	memcpy(out, line + start, end - start);
	out[end - start] = '\0';
	return true;
}

/* Does the number token ending near byte pos of line hold a fraction or
 * an exponent (a real, not an integer)? */
static bool
number_is_real(const char *line, size_t len, size_t pos)
{
	for (size_t i = pos < len ? pos : len;
	     i > 0 && line[i - 1] != '\0' && strchr("0123456789+-.eE", line[i - 1]) != NULL; i--) {
		if (strchr(".eE", line[i - 1]) != NULL)
			return true;
	}
	return false;
}

/* The line by json_loadb, with the spec's errors (no fast path). */
static json_t *
request_decode_jansson(const char *line, size_t len, proto_error *err)
{
	json_error_t jerr;
	json_t *request;
	char key[64];

	request = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	/* jansson leaves no error text when it runs out of memory. */
	if (request == NULL &&
	    (jerr.text[0] == '\0' || json_error_code(&jerr) == json_error_out_of_memory)) {
		proto_fail(err, PROTO_INTERNAL, "out of memory decoding the request");
		return NULL;
	}
	if (request == NULL) {
		/* jansson holds integers in int64 and reals in doubles and refuses
		 * larger ones as a syntax error; the spec calls an out-of-range
		 * number bad_request. Told by the error code, never by the error
		 * text, which quotes the client's input. */
		if (json_error_code(&jerr) == json_error_numeric_overflow) {
			bool real = number_is_real(line, len, (size_t)jerr.position);

			if (member_before(line, len, (size_t)jerr.position, key, sizeof key))
				proto_fail(err, PROTO_BAD_REQUEST, "%s is %s out of range", key,
				    real ? "a number" : "an integer");
			else
				proto_fail(err, PROTO_BAD_REQUEST,
				    "%s is out of range (near byte %d)",
				    real ? "a number" : "an integer", jerr.position);
			return NULL;
		}
		proto_fail(err, PROTO_PARSE_ERROR, "not JSON: %s (near byte %d)", jerr.text,
		    jerr.position);
		return NULL;
	}
	if (!json_is_object(request)) {
		json_decref(request);
		proto_fail(err, PROTO_PARSE_ERROR, "a request must be a JSON object");
		return NULL;
	}
	return request;
}

json_t *
proto_request_decode(const char *line, size_t len, proto_error *err)
{
	/* Most requests are plain: built without jansson's lexer. */
	json_t *request = proto_scan_request(line, len);

	return request != NULL ? request : request_decode_jansson(line, len, err);
}

bool
proto_request_read(const char *line, size_t len, proto_flat *flat, proto_req *out, json_t **owned,
    proto_error *err)
{
	*out = (proto_req){ 0 };
	*owned = NULL;
	if (proto_scan_flat(line, len, flat)) {
		out->flat = flat;
		return true;
	}
	*owned = request_decode_jansson(line, len, err);
	out->json = *owned;
	return *owned != NULL;
}

/* An id is an integer or a string (absent or null: none). */
static bool
pval_id(const pval *v, proto_error *err)
{
	if (v->type != PVAL_ABSENT && v->type != PVAL_INT && v->type != PVAL_STRING)
		return proto_fail(err, PROTO_BAD_REQUEST, "id must be an integer or a string");
	return true;
}

bool
proto_request_id(const json_t *request, const json_t **id, proto_error *err)
{
	pval v = pval_json(json_object_get(request, "id"));

	*id = NULL;
	if (!pval_id(&v, err))
		return false;
	if (v.type != PVAL_ABSENT)
		*id = v.json;
	return true;
}

bool
proto_get_text(const json_t *obj, const char *key, bool required, const char **out, size_t *len,
    proto_error *err)
{
	pval v = pval_json(json_object_get(obj, key));

	return pval_text(&v, key, required, out, len, err);
}

/* ---- requests, in either form ----------------------------------------- */

bool
proto_req_int(const proto_req *r, proto_member m, int64_t min, int64_t max, bool required,
    int64_t *out, bool *present, proto_error *err)
{
	pval v = req_member(r, m);

	return pval_int(&v, proto_member_name(m), min, max, required, out, present, err);
}

bool
proto_req_text(const proto_req *r, proto_member m, bool required, const char **out, size_t *len,
    proto_error *err)
{
	pval v = req_member(r, m);

	return pval_text(&v, proto_member_name(m), required, out, len, err);
}

bool
proto_req_name(const proto_req *r, proto_member m, const char **out, proto_error *err)
{
	pval v = req_member(r, m);

	return pval_name(&v, proto_member_name(m), out, err);
}

bool
proto_req_ctx(const proto_req *r, proto_ctx *out, proto_error *err)
{
	return req_ctx(r, out, err);
}

bool
proto_req_has(const proto_req *r, proto_member m)
{
	return req_member(r, m).type != PVAL_ABSENT;
}

bool
proto_req_true(const proto_req *r, proto_member m)
{
	return req_member(r, m).type == PVAL_TRUE;
}

bool
proto_req_bool(const proto_req *r, proto_member m, bool absent, bool *out, proto_error *err)
{
	switch (req_member(r, m).type) {
	case PVAL_ABSENT:
		*out = absent;
		return true;
	case PVAL_TRUE:
		*out = true;
		return true;
	case PVAL_FALSE:
		*out = false;
		return true;
	default:
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be true or false",
		    proto_member_name(m));
	}
}

bool
proto_req_id(const proto_req *r, json_t **id, proto_error *err)
{
	pval v = req_member(r, PROTO_MEMBER_ID);

	*id = NULL;
	if (!pval_id(&v, err))
		return false;
	if (v.type == PVAL_ABSENT)
		return true;
	*id = v.json != NULL ? json_incref((json_t *)v.json) : proto_flat_to_json(r->flat, v.flat);
	/* As if jansson had run out while decoding it: no id to echo. */
	if (*id == NULL)
		return proto_fail(err, PROTO_INTERNAL, "out of memory decoding the request");
	return true;
}

json_t *
proto_req_json(const proto_req *r)
{
	return r->json != NULL ? json_incref((json_t *)r->json) : proto_flat_to_json(r->flat, 0);
}

json_t *
proto_reply_ok(const json_t *id)
{
	json_t *reply = json_object();

	if (reply == NULL)
		return NULL;
	if ((id != NULL && json_object_set(reply, "id", (json_t *)id) != 0) ||
	    json_object_set_new(reply, "ok", json_true()) != 0) {
		json_decref(reply);
		return NULL;
	}
	return reply;
}

json_t *
proto_reply_error(const json_t *id, const proto_error *err)
{
	json_t *reply = json_object();

	if (reply == NULL)
		return NULL;
	size_t len = strlen(err->message);
	json_t *message = json_stringn(err->message, len);

	/* A message cut to PROTO_MESSAGE_SIZE may end inside a UTF-8
	 * sequence: shorten it until it is valid. */
	while (message == NULL && len > 0)
		message = json_stringn(err->message, --len);
	/* json_pack takes message ("o") even when it fails. */
	json_t *error = message != NULL
	    ? json_pack("{s:s, s:o}", "code", proto_code_name(err->code), "message", message)
	    : NULL;

	if (error == NULL || (id != NULL && json_object_set(reply, "id", (json_t *)id) != 0) ||
	    json_object_set_new(reply, "ok", json_false()) != 0) {
		json_decref(error);
		json_decref(reply);
		return NULL;
	}
	/* json_object_set_new takes error even when it fails. */
	if (json_object_set_new(reply, "error", error) != 0) {
		json_decref(reply);
		return NULL;
	}
	return reply;
}

json_t *
proto_policy_flat_json(const cb_policy *p)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, "
			 "s:I, s:I, s:I}",
	    "trip", p->trip == CB_TRIP_RATE ? "rate" : "consecutive", "failure_threshold",
	    (json_int_t)p->failure_threshold, "success_threshold", (json_int_t)p->success_threshold,
	    "break_ms", (json_int_t)p->break_ms, "half_open_max", (json_int_t)p->half_open_max,
	    "slot_ttl_ms", (json_int_t)p->slot_ttl_ms, "max_gap_ms", (json_int_t)p->max_gap_ms,
	    "window", p->window == CB_WINDOW_TIME ? "time" : "count", "window_size",
	    (json_int_t)p->window_size, "minimum_calls", (json_int_t)p->minimum_calls,
	    "failure_rate", (json_int_t)p->failure_rate, "slow_call_ms",
	    (json_int_t)p->slow_call_ms, "slow_call_rate", (json_int_t)p->slow_call_rate,
	    "min_reporters", (json_int_t)p->min_reporters, "reporter_window_ms",
	    (json_int_t)p->reporter_window_ms, "break_backoff", (json_int_t)p->break_backoff,
	    "break_max_ms", (json_int_t)p->break_max_ms);
}
