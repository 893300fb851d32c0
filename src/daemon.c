/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.c — the daemon's context (see daemon.h).
 */
#include "daemon.h"
#include "log.h"

_Static_assert(CT_NAME_MAX <= LOG_QUOTE_TEXT_MAX, "a circuit name is quoted whole");

daemon_ctx cbd;

static const char *const state_names[] = {
	[DAEMON_STARTING] = "starting",
	[DAEMON_RUNNING] = "running",
	[DAEMON_RELOADING] = "reloading",
	[DAEMON_STOPPING] = "stopping",
};

const char *
daemon_state_name(daemon_state state)
{
	return state_names[state];
}
