/*
 * error.c — libcbclient's small shared pieces: status strings, error
 * values, state names, clocks, ctx and snapshot conversions.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

_Static_assert((int)CBC_STATE_CLOSED == (int)CB_STATE_CLOSED, "state values");
_Static_assert((int)CBC_STATE_OPEN == (int)CB_STATE_OPEN, "state values");
_Static_assert((int)CBC_STATE_HALF_OPEN == (int)CB_STATE_HALF_OPEN, "state values");
_Static_assert(CBC_TIME_NONE == CB_TIME_NONE, "time none");
_Static_assert(CBC_NAME_MAX == 256, "name max");

static const char *const status_text[CBC_STATUS_COUNT] = {
	[CBC_OK] = "success",
	[CBC_EINVAL] = "invalid argument",
	[CBC_ENOMEM] = "out of memory",
	[CBC_ECONNECT] = "cannot connect to cbd",
	[CBC_ETIMEOUT] = "timed out waiting for cbd",
	[CBC_EIO] = "connection to cbd broken",
	[CBC_EPROTO] = "invalid reply from cbd",
	[CBC_EREFUSED] = "request refused by cbd",
	[CBC_ECAPACITY] = "max_circuits reached: no new circuit created",
	[CBC_EOPEN] = "circuit open: call not permitted",
	[CBC_ESTATE] = "permit not granted or already reported",
};

const char *
cbc_strerror(cbc_status status)
{
	if ((unsigned)status >= CBC_STATUS_COUNT || status_text[status] == NULL)
		return "unknown status";
	return status_text[status];
}

void
cbc_free(void *p)
{
	free(p);
}

cbc_status
cbci_fail(cbc_error *err, cbc_status status, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return status;
	err->status = status;
	err->code[0] = '\0';
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	return status;
}

void
cbci_error_clear(cbc_error *err)
{
	if (err == NULL)
		return;
	err->status = CBC_OK;
	err->code[0] = '\0';
	err->message[0] = '\0';
}

cbc_status
cbci_error_copy(cbc_error *err, const cbc_error *src)
{
	if (err != NULL && err != src)
		*err = *src;
	return src->status;
}

const char *
cbc_state_name(cbc_state state)
{
	return breaker_state_name((cb_state)state);
}

bool
cbc_state_parse(const char *text, cbc_state *out)
{
	cb_state s;

	if (text == NULL || !breaker_state_parse(text, strlen(text), &s))
		return false;
	*out = (cbc_state)s;
	return true;
}

void
cbci_ctx_to_proto(const cbc_ctx *ctx, proto_ctx *out)
{
	memset(out, 0, sizeof *out);
	if (ctx == NULL)
		return;
	if (ctx->failure_threshold != 0)
		proto_ctx_set(out, PROTO_CTX_FAILURE_THRESHOLD, ctx->failure_threshold);
	if (ctx->success_threshold != 0)
		proto_ctx_set(out, PROTO_CTX_SUCCESS_THRESHOLD, ctx->success_threshold);
	if (ctx->break_ms != 0)
		proto_ctx_set(out, PROTO_CTX_BREAK_MS, ctx->break_ms);
	if (ctx->half_open_max != 0)
		proto_ctx_set(out, PROTO_CTX_HALF_OPEN_MAX, ctx->half_open_max);
	if (ctx->slot_ttl_ms != 0)
		proto_ctx_set(out, PROTO_CTX_SLOT_TTL_MS, ctx->slot_ttl_ms);
	if (ctx->max_gap_ms != 0)
		proto_ctx_set(out, PROTO_CTX_MAX_GAP_MS, ctx->max_gap_ms);
	if (ctx->has_now)
		proto_ctx_set(out, PROTO_CTX_NOW, ctx->now);
}

void
cbci_ctx_policy(const cbc_ctx *ctx, cb_policy *out)
{
	proto_ctx partial;
	proto_layer layers[1] = { { &partial, NULL, PROTO_SOURCE_CLIENT } };

	cbci_ctx_to_proto(ctx, &partial);
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
	char field[64];

	if (ctx == NULL)
		return CBC_OK;
	/* A member is given when nonzero (now: has_now); the core's ctx table
	 * holds the bounds. */
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		const int64_t *v;

		switch ((proto_ctx_key)k) {
		case PROTO_CTX_FAILURE_THRESHOLD:
			v = &ctx->failure_threshold;
			break;
		case PROTO_CTX_SUCCESS_THRESHOLD:
			v = &ctx->success_threshold;
			break;
		case PROTO_CTX_BREAK_MS:
			v = &ctx->break_ms;
			break;
		case PROTO_CTX_HALF_OPEN_MAX:
			v = &ctx->half_open_max;
			break;
		case PROTO_CTX_SLOT_TTL_MS:
			v = &ctx->slot_ttl_ms;
			break;
		case PROTO_CTX_MAX_GAP_MS:
			v = &ctx->max_gap_ms;
			break;
		case PROTO_CTX_NOW:
			v = &ctx->now;
			break;
		default:
			continue;
		}
		if (k == PROTO_CTX_NOW ? !ctx->has_now : *v == 0)
			continue;
		snprintf(field, sizeof field, "%s%s", prefix,
		    proto_ctx_def_get((proto_ctx_key)k)->name);
		if (!proto_ctx_check((proto_ctx_key)k, *v, field, &perr))
			return cbci_fail(err, CBC_EINVAL, "%s", perr.message);
	}
	return CBC_OK;
}

cbc_status
cbci_name_check(const char *name, const char *field, cbc_error *err)
{
	const char *why;

	if (name == NULL)
		return cbci_fail(err, CBC_EINVAL, "%s is required", field);
	if (!proto_name_valid(name, strlen(name), &why))
		return cbci_fail(err, CBC_EINVAL, "%s %s", field, why);
	return CBC_OK;
}

void
cbci_snapshot_fill(cbc_snapshot *out, const char *name, const cb_snapshot *snap,
    int64_t retry_after_ms)
{
	size_t len = strlen(name);

	if (len > CBC_NAME_MAX)
		len = CBC_NAME_MAX;
	memcpy(out->name, name, len);
	out->name[len] = '\0';
	out->state = (cbc_state)snap->state;
	out->failure_count = snap->failure_count;
	out->success_count = snap->success_count;
	out->last_failure_at = snap->last_failure_at;
	out->opened_at = snap->opened_at;
	out->retry_after_ms = retry_after_ms;
	cbci_snapshot_v2_clear(out);
}

void
cbci_snapshot_to_core(const cbc_snapshot *in, cb_snapshot *out)
{
	out->state = (cb_state)in->state;
	out->failure_count = in->failure_count;
	out->success_count = in->success_count;
	out->last_failure_at = in->last_failure_at;
	out->opened_at = in->opened_at;
}

bool
cbci_store_failed(const cbc_error *err)
{
	switch (err->status) {
	case CBC_ENOMEM:
	case CBC_ECONNECT:
	case CBC_ETIMEOUT:
	case CBC_EIO:
	case CBC_EPROTO:
		return true;
	case CBC_EREFUSED:
		return strcmp(err->code, "shutting_down") == 0 ||
		    strcmp(err->code, "internal") == 0;
	default:
		return false;
	}
}
