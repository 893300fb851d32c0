/*
 * proto.c — protocol v1's shared codec pieces (see proto.h): validation
 * that names the member, the ctx key table, policy resolution, snapshots.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "circuit-table.h"
#include "proto.h"

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

/* The ctx members and their bounds (spec: "Names, numbers, time"). */
static const proto_ctx_def ctx_defs[PROTO_CTX_KEY_COUNT] = {
	[PROTO_CTX_FAILURE_THRESHOLD] = { "failure_threshold", CB_COUNT_MIN, CB_COUNT_MAX },
	[PROTO_CTX_SUCCESS_THRESHOLD] = { "success_threshold", CB_COUNT_MIN, CB_COUNT_MAX },
	[PROTO_CTX_BREAK_MS] = { "break_ms", CB_DURATION_MIN, CB_DURATION_MAX },
	[PROTO_CTX_HALF_OPEN_MAX] = { "half_open_max", CB_COUNT_MIN, CB_HALF_OPEN_MAX },
	[PROTO_CTX_SLOT_TTL_MS] = { "slot_ttl_ms", CB_DURATION_MIN, CB_DURATION_MAX },
	[PROTO_CTX_MAX_GAP_MS] = { "max_gap_ms", CB_DURATION_MIN, CB_DURATION_MAX },
	[PROTO_CTX_NOW] = { "now", CB_TIME_MIN, CB_TIME_MAX },
};

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

void
proto_ctx_set(proto_ctx *ctx, proto_ctx_key key, int64_t v)
{
	ctx->present |= UINT32_C(1) << key;
	ctx->value[key] = v;
}

bool
proto_ctx_has(const proto_ctx *ctx, proto_ctx_key key)
{
	return (ctx->present & (UINT32_C(1) << key)) != 0;
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

/* The value of key from the first layer that has it, noting its source. */
static bool
layers_find(const proto_layer *layers, size_t n, proto_ctx_key key, int64_t *out,
    proto_policy_sources *sources)
{
	for (size_t i = 0; i < n; i++) {
		if (layers[i].ctx != NULL && proto_ctx_has(layers[i].ctx, key)) {
			*out = layers[i].ctx->value[key];
			if (sources != NULL)
				sources->key[key] = (uint8_t)layers[i].source;
			return true;
		}
	}
	if (sources != NULL)
		sources->key[key] = PROTO_SOURCE_BUILTIN;
	return false;
}

void
proto_policy_resolve(const proto_layer *layers, size_t n, cb_policy *out,
    proto_policy_sources *sources)
{
	breaker_policy_default(out);
	layers_find(layers, n, PROTO_CTX_FAILURE_THRESHOLD, &out->failure_threshold, sources);
	layers_find(layers, n, PROTO_CTX_SUCCESS_THRESHOLD, &out->success_threshold, sources);
	layers_find(layers, n, PROTO_CTX_BREAK_MS, &out->break_ms, sources);
	layers_find(layers, n, PROTO_CTX_HALF_OPEN_MAX, &out->half_open_max, sources);
	if (!layers_find(layers, n, PROTO_CTX_SLOT_TTL_MS, &out->slot_ttl_ms, sources))
		out->slot_ttl_ms = out->break_ms;
	if (!layers_find(layers, n, PROTO_CTX_MAX_GAP_MS, &out->max_gap_ms, sources))
		out->max_gap_ms = 0;
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
	case PROTO_CTX_NOW:
		break;
	}
	return false;
}

uint32_t
proto_policy_conflicts(const proto_ctx *request, const cb_policy *policy)
{
	uint32_t conflicts = 0;

	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		int64_t v;

		if (!(PROTO_CTX_POLICY_MASK & (UINT32_C(1) << k)) ||
		    !proto_ctx_has(request, (proto_ctx_key)k))
			continue;
		if (!proto_policy_value(policy, (proto_ctx_key)k, &v) || v != request->value[k])
			conflicts |= UINT32_C(1) << k;
	}
	return conflicts;
}

json_t *
proto_policy_to_json(const cb_policy *policy, const proto_policy_sources *sources)
{
	json_t *obj = json_object(), *src = json_object();
	bool ok = obj != NULL && src != NULL;

	for (int k = 0; ok && k < PROTO_CTX_KEY_COUNT; k++) {
		int64_t v;

		if (!(PROTO_CTX_POLICY_MASK & (UINT32_C(1) << k)))
			continue;
		ok = json_object_set_new(obj, ctx_defs[k].name,
			 proto_policy_value(policy, (proto_ctx_key)k, &v) ? json_integer(v)
									  : json_null()) == 0 &&
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

json_t *
proto_ctx_members_to_json(const proto_ctx *ctx)
{
	json_t *obj = json_object();

	if (obj == NULL)
		return NULL;
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		if ((PROTO_CTX_POLICY_MASK & (UINT32_C(1) << k)) &&
		    proto_ctx_has(ctx, (proto_ctx_key)k) &&
		    json_object_set_new(obj, ctx_defs[k].name, json_integer(ctx->value[k])) != 0) {
			json_decref(obj);
			return NULL;
		}
	}
	return obj;
}

/* A member, or NULL when absent or null. */
static const json_t *
member(const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);

	return json_is_null(v) ? NULL : v;
}

bool
proto_get_int(const json_t *obj, const char *key, int64_t min, int64_t max, bool required,
    int64_t *out, bool *present, proto_error *err)
{
	const json_t *v = member(obj, key);

	if (present != NULL)
		*present = v != NULL;
	if (v == NULL) {
		if (required)
			return proto_fail(err, PROTO_BAD_REQUEST, "%s is required", key);
		return true;
	}
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be an integer from %lld to %lld",
		    key, (long long)min, (long long)max);
	*out = json_integer_value(v);
	return true;
}

bool
proto_get_string(const json_t *obj, const char *key, bool required, const char **out, size_t *len,
    proto_error *err)
{
	const json_t *v = member(obj, key);

	if (v == NULL) {
		*out = NULL;
		if (required)
			return proto_fail(err, PROTO_BAD_REQUEST, "%s is required", key);
		return true;
	}
	if (!json_is_string(v))
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must be a string", key);
	*out = json_string_value(v);
	if (len != NULL)
		*len = json_string_length(v);
	return true;
}

bool
proto_name_valid(const char *text, size_t len, const char **why)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t i = 0;

	if (len == 0 || len > CT_NAME_MAX) {
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
	const char *why;
	size_t len;

	if (!proto_get_string(obj, key, true, out, &len, err))
		return false;
	if (!proto_name_valid(*out, len, &why))
		return proto_fail(err, PROTO_BAD_REQUEST, "%s %s", key, why);
	return true;
}

bool
proto_get_state(const json_t *obj, const char *key, bool required, cb_state *out, bool *present,
    proto_error *err)
{
	const char *text;
	size_t len;

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

bool
proto_ctx_from_json(const json_t *request, proto_ctx *out, proto_error *err)
{
	const json_t *ctx = member(request, "ctx");
	char field[64];

	memset(out, 0, sizeof *out);
	if (ctx == NULL)
		return true;
	if (!json_is_object(ctx))
		return proto_fail(err, PROTO_BAD_REQUEST, "ctx must be an object");
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		const json_t *v = member(ctx, ctx_defs[k].name);

		if (v == NULL)
			continue;
		snprintf(field, sizeof field, "ctx.%s", ctx_defs[k].name);
		if (!json_is_integer(v))
			return proto_fail(err, PROTO_BAD_REQUEST,
			    "%s must be an integer from %lld to %lld", field,
			    (long long)ctx_defs[k].min, (long long)ctx_defs[k].max);
		if (!proto_ctx_check((proto_ctx_key)k, json_integer_value(v), field, err))
			return false;
		proto_ctx_set(out, (proto_ctx_key)k, json_integer_value(v));
	}
	return true;
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
		    json_object_set_new(members, ctx_defs[k].name, json_integer(ctx->value[k])) !=
			0) {
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
time_from_json(const json_t *obj, const char *key, int64_t *out, proto_error *err)
{
	bool present;

	*out = CB_TIME_NONE;
	return proto_get_int(obj, key, CB_TIME_MIN, CB_TIME_MAX, false, out, &present, err);
}

bool
proto_snapshot_from_json(const json_t *obj, cb_snapshot *out, int64_t *retry_after_ms,
    proto_error *err)
{
	int64_t retry = 0;

	if (!json_is_object(obj))
		return proto_fail(err, PROTO_INTERNAL, "snapshot must be an object");
	breaker_snapshot_init(out);
	if (!proto_get_state(obj, "state", true, &out->state, NULL, err) ||
	    !proto_get_int(obj, "failure_count", 0, INT64_MAX, true, &out->failure_count, NULL,
		err) ||
	    !proto_get_int(obj, "success_count", 0, INT64_MAX, true, &out->success_count, NULL,
		err) ||
	    !time_from_json(obj, "last_failure_at", &out->last_failure_at, err) ||
	    !time_from_json(obj, "opened_at", &out->opened_at, err) ||
	    !proto_get_int(obj, "retry_after_ms", 0, INT64_MAX, false, &retry, NULL, err))
		return false;
	if (retry_after_ms != NULL)
		*retry_after_ms = retry;
	return true;
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

json_t *
proto_request_decode(const char *line, size_t len, proto_error *err)
{
	json_error_t jerr;
	json_t *request;
	char key[64];

	request = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
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

bool
proto_request_id(const json_t *request, const json_t **id, proto_error *err)
{
	const json_t *v = member(request, "id");

	*id = NULL;
	if (v == NULL)
		return true;
	if (!json_is_integer(v) && !json_is_string(v))
		return proto_fail(err, PROTO_BAD_REQUEST, "id must be an integer or a string");
	*id = v;
	return true;
}

bool
proto_get_text(const json_t *obj, const char *key, bool required, const char **out, size_t *len,
    proto_error *err)
{
	size_t n;

	if (!proto_get_string(obj, key, required, out, &n, err))
		return false;
	if (*out != NULL && strlen(*out) != n)
		return proto_fail(err, PROTO_BAD_REQUEST, "%s must not contain NUL bytes", key);
	if (len != NULL)
		*len = *out != NULL ? n : 0;
	return true;
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
	if ((id != NULL && json_object_set(reply, "id", (json_t *)id) != 0) ||
	    json_object_set_new(reply, "ok", json_false()) != 0 ||
	    json_object_set_new(reply, "error",
		json_pack("{s:s, s:o}", "code", proto_code_name(err->code), "message", message)) !=
		0) {
		json_decref(reply);
		return NULL;
	}
	return reply;
}
