/* SPDX-License-Identifier: Apache-2.0 */
/*
 * error.c — libcbclient's bottom layer: status strings, error values,
 * state names and name checks. It calls nothing else of the library (the
 * ctx is in ctx.c, snapshots in snapshot.c).
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
	[CBC_EBULKHEAD] = "bulkhead full: too many calls in flight",
	[CBC_EBUDGET] = "retry refused by the retry budget",
};

static const char *const reason_text[] = {
	[CBC_REASON_NONE] = "none",
	[CBC_REASON_OPEN] = "open",
	[CBC_REASON_HELD] = "held",
	[CBC_REASON_HALF_OPEN_FULL] = "half_open_full",
	[CBC_REASON_CONCURRENCY] = "concurrency",
	[CBC_REASON_RETRY_BUDGET] = "retry_budget",
	[CBC_REASON_OTHER] = "other",
};

const char *
cbc_reason_name(cbc_reason reason)
{
	if ((unsigned)reason > CBC_REASON_OTHER)
		return "other";
	return reason_text[reason];
}

const char *
cbc_version(void)
{
	/* Built from the macros, so the header and the library agree. */
#define CBC_STR2(x) #x
#define CBC_STR(x) CBC_STR2(x)
	return CBC_STR(CBC_VERSION_MAJOR) "." CBC_STR(CBC_VERSION_MINOR) "." CBC_STR(
	    CBC_VERSION_PATCH);
}

int
cbc_version_number(void)
{
	return CBC_VERSION;
}

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
