/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx.c — the public cbc_ctx against the core's ctx table (src/core/proto.c):
 * which cbc_ctx member is which ctx key, conversion to the core's partial
 * policy, resolution for the local store (built-in presets included), and
 * the checks, whose bounds and messages are the core's, so cbclient and
 * cbd refuse the same values with the same words.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

_Static_assert(CBC_PRESET_MAX == PROTO_PRESET_NAME_MAX, "preset name max");
_Static_assert((int)CBC_TRIP_CONSECUTIVE - 1 == (int)CB_TRIP_CONSECUTIVE, "trip values");
_Static_assert((int)CBC_TRIP_RATE - 1 == (int)CB_TRIP_RATE, "trip values");
_Static_assert((int)CBC_WINDOW_COUNT - 1 == (int)CB_WINDOW_COUNT, "window values");
_Static_assert((int)CBC_WINDOW_TIME - 1 == (int)CB_WINDOW_TIME, "window values");

/* The integer policy members of cbc_ctx: the ctx key and the member's
 * offset. A member is given when nonzero. */
typedef struct ctx_int_row {
	proto_ctx_key key;
	size_t offset; /* in cbc_ctx */
	size_t policy_offset; /* in cbc_policy */
} ctx_int_row;

#define CTX_INT(k, m)                                                                              \
	{                                                                                          \
		k, offsetof(cbc_ctx, m), offsetof(cbc_policy, m)                                   \
	}

static const ctx_int_row ctx_int_rows[] = {
	CTX_INT(PROTO_CTX_FAILURE_THRESHOLD, failure_threshold),
	CTX_INT(PROTO_CTX_SUCCESS_THRESHOLD, success_threshold),
	CTX_INT(PROTO_CTX_BREAK_MS, break_ms),
	CTX_INT(PROTO_CTX_HALF_OPEN_MAX, half_open_max),
	CTX_INT(PROTO_CTX_SLOT_TTL_MS, slot_ttl_ms),
	CTX_INT(PROTO_CTX_MAX_GAP_MS, max_gap_ms),
	CTX_INT(PROTO_CTX_WINDOW_SIZE, window_size),
	CTX_INT(PROTO_CTX_MINIMUM_CALLS, minimum_calls),
	CTX_INT(PROTO_CTX_FAILURE_RATE, failure_rate),
	CTX_INT(PROTO_CTX_SLOW_CALL_MS, slow_call_ms),
	CTX_INT(PROTO_CTX_SLOW_CALL_RATE, slow_call_rate),
	CTX_INT(PROTO_CTX_MIN_REPORTERS, min_reporters),
	CTX_INT(PROTO_CTX_REPORTER_WINDOW_MS, reporter_window_ms),
	CTX_INT(PROTO_CTX_BREAK_BACKOFF, break_backoff),
	CTX_INT(PROTO_CTX_BREAK_MAX_MS, break_max_ms),
	CTX_INT(PROTO_CTX_MAX_CONCURRENT, max_concurrent),
	CTX_INT(PROTO_CTX_RETRY_BUDGET_PERCENT, retry_budget_percent),
	CTX_INT(PROTO_CTX_RETRY_MIN_PER_S, retry_min_per_s),
};

#define CTX_INT_ROW_COUNT (sizeof ctx_int_rows / sizeof ctx_int_rows[0])

/* Bounds of duration_ms (protocol 2, record). */
#define CTX_DURATION_MAX CB_TIME_MAX

static const char *const trip_names[] = {
	[CBC_TRIP_CONSECUTIVE] = "consecutive",
	[CBC_TRIP_RATE] = "rate",
};

static const char *const window_names[] = {
	[CBC_WINDOW_COUNT] = "count",
	[CBC_WINDOW_TIME] = "time",
};

const char *
cbc_trip_name(cbc_trip trip)
{
	if (trip != CBC_TRIP_CONSECUTIVE && trip != CBC_TRIP_RATE)
		return "unset";
	return trip_names[trip];
}

const char *
cbc_window_name(cbc_window window)
{
	if (window != CBC_WINDOW_COUNT && window != CBC_WINDOW_TIME)
		return "unset";
	return window_names[window];
}

/* The value of an integer row in ctx. */
static int64_t
ctx_int(const cbc_ctx *ctx, const ctx_int_row *row)
{
	return *(const int64_t *)(const void *)((const char *)ctx + row->offset);
}

/* The member of an integer row in ctx, to write. */
static int64_t *
ctx_int_at(cbc_ctx *ctx, const ctx_int_row *row)
{
	return (int64_t *)(void *)((char *)ctx + row->offset);
}

void
cbci_ctx_from_policy(const cbc_policy *policy, cbc_ctx *out)
{
	memset(out, 0, sizeof *out);
	if (!policy->known)
		return;
	for (size_t i = 0; i < CTX_INT_ROW_COUNT; i++) {
		int64_t v = *(const int64_t *)(const void *)((const char *)policy +
		    ctx_int_rows[i].policy_offset);

		/* null (CBC_POLICY_NULL) and not reported (0): not given. */
		*ctx_int_at(out, &ctx_int_rows[i]) = v > 0 ? v : 0;
	}
	out->trip = policy->trip;
	out->window = policy->window;
}

void
cbci_ctx_overlay(cbc_ctx *out, const cbc_ctx *over)
{
	for (size_t i = 0; i < CTX_INT_ROW_COUNT; i++) {
		int64_t v = ctx_int(over, &ctx_int_rows[i]);

		if (v != 0)
			*ctx_int_at(out, &ctx_int_rows[i]) = v;
	}
	if (over->trip != CBC_TRIP_UNSET)
		out->trip = over->trip;
	if (over->window != CBC_WINDOW_UNSET)
		out->window = over->window;
	if (over->preset != NULL)
		out->preset = over->preset;
}

void
cbci_ctx_to_proto(const cbc_ctx *ctx, proto_ctx *out)
{
	memset(out, 0, sizeof *out);
	if (ctx == NULL)
		return;
	for (size_t i = 0; i < CTX_INT_ROW_COUNT; i++) {
		int64_t v = ctx_int(ctx, &ctx_int_rows[i]);

		if (v != 0)
			proto_ctx_set(out, ctx_int_rows[i].key, v);
	}
	if (ctx->trip != CBC_TRIP_UNSET)
		proto_ctx_set(out, PROTO_CTX_TRIP, (int64_t)ctx->trip - 1);
	if (ctx->window != CBC_WINDOW_UNSET)
		proto_ctx_set(out, PROTO_CTX_WINDOW, (int64_t)ctx->window - 1);
	if (ctx->preset != NULL)
		proto_ctx_set_preset(out, ctx->preset);
	if (ctx->has_now)
		proto_ctx_set(out, PROTO_CTX_NOW, ctx->now);
}

void
cbci_ctx_policy(const cbc_ctx *ctx, cb_policy *out)
{
	proto_ctx partial;
	proto_layer layers[1] = { { &partial, NULL, PROTO_SOURCE_CLIENT } };

	cbci_ctx_to_proto(ctx, &partial);
	/* A local store knows the built-in presets only; an unknown name
	 * resolves as no preset (cbci_ctx_check_local refuses it first). */
	if (proto_ctx_has(&partial, PROTO_CTX_PRESET))
		layers[0].preset = proto_preset_builtin(partial.preset);
	proto_policy_resolve(layers, 1, out, NULL);
}

int64_t
cbci_ctx_now(const cbc_ctx *ctx)
{
	if (ctx != NULL && ctx->has_now)
		return ctx->now;
	return clock_realtime_ms();
}

cbc_status
cbci_ctx_check(const cbc_ctx *ctx, const char *prefix, cbc_error *err)
{
	proto_error perr;
	proto_ctx partial;
	char field[64];

	if (ctx == NULL)
		return CBC_OK;
	/* The core's ctx table holds the bounds. */
	for (size_t i = 0; i < CTX_INT_ROW_COUNT; i++) {
		const ctx_int_row *row = &ctx_int_rows[i];
		int64_t v = ctx_int(ctx, row);

		if (v == 0)
			continue;
		snprintf(field, sizeof field, "%s%s", prefix, proto_ctx_def_get(row->key)->name);
		if (!proto_ctx_check(row->key, v, field, &perr))
			return cbci_fail(err, CBC_EINVAL, "%s", perr.message);
	}
	if ((unsigned)ctx->trip > CBC_TRIP_RATE)
		return cbci_fail(err, CBC_EINVAL,
		    "%strip must be CBC_TRIP_UNSET, CBC_TRIP_CONSECUTIVE or CBC_TRIP_RATE", prefix);
	if ((unsigned)ctx->window > CBC_WINDOW_TIME)
		return cbci_fail(err, CBC_EINVAL,
		    "%swindow must be CBC_WINDOW_UNSET, CBC_WINDOW_COUNT or CBC_WINDOW_TIME",
		    prefix);
	if (ctx->preset != NULL) {
		snprintf(field, sizeof field, "%spreset", prefix);
		memset(&partial, 0, sizeof partial);
		if (!proto_ctx_parse_text(&partial, PROTO_CTX_PRESET, ctx->preset, field, &perr))
			return cbci_fail(err, CBC_EINVAL, "%s", perr.message);
	}
	if (ctx->has_now) {
		snprintf(field, sizeof field, "%snow", prefix);
		if (!proto_ctx_check(PROTO_CTX_NOW, ctx->now, field, &perr))
			return cbci_fail(err, CBC_EINVAL, "%s", perr.message);
	}
	if (ctx->has_duration && (ctx->duration_ms < 0 || ctx->duration_ms > CTX_DURATION_MAX))
		return cbci_fail(err, CBC_EINVAL, "%sduration_ms must be an integer from 0 to %lld",
		    prefix, (long long)CTX_DURATION_MAX);
	cbci_ctx_to_proto(ctx, &partial);
	if (!proto_ctx_check_combination(&partial, prefix, &perr))
		return cbci_fail(err, CBC_EINVAL, "%s", perr.message);
	return CBC_OK;
}

cbc_status
cbci_ctx_check_local(const cbc_ctx *ctx, const char *prefix, cbc_error *err)
{
	const char *const *names;
	char known[128];
	size_t used = 0;

	if (ctx == NULL || ctx->preset == NULL || proto_preset_builtin(ctx->preset) != NULL)
		return CBC_OK;
	known[0] = '\0';
	names = proto_preset_builtin_names();
	for (size_t i = 0; names[i] != NULL && used < sizeof known; i++) {
		int w = snprintf(known + used, sizeof known - used, "%s%s", i > 0 ? ", " : "",
		    names[i]);

		if (w > 0)
			used += (size_t)w;
	}
	return cbci_fail(err, CBC_EINVAL,
	    "%spreset: no built-in preset named \"%s\" (a local store knows %s; presets of "
	    "cbd's config need a remote store)",
	    prefix, ctx->preset, known);
}
