/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-args.h — the circuit script's positional arguments (src/fleet.lua's
 * header: ARGV[3] .. ARGV[11], after op and channel) made from the request
 * object op-fleet.c builds. Pure (jansson values in, strings out): cbd's
 * fleet.c sends them, check_fleet_script sends the same to the script.
 */
#ifndef CBD_FLEET_ARGS_H
#define CBD_FLEET_ARGS_H

#include <stdbool.h>

#include <jansson.h>

/* The arguments, in order. */
enum {
	FLEET_ARG_NAME,
	FLEET_ARG_ORIGIN,
	FLEET_ARG_NOW, /* "": Redis TIME */
	FLEET_ARG_DECLARED, /* "-": not given */
	FLEET_ARG_POLICY, /* 17 members, one space apart; "": not given */
	FLEET_ARG_REPORTER,
	FLEET_ARG_DURATION, /* duration_ms; "": not given */
	FLEET_ARG_TOKEN, /* "": none */
	FLEET_ARG_EXTRA, /* a JSON object of the op's own members; "": none */
	FLEET_ARGS
};

/* Room for the policy argument: 17 members of at most 20 characters. */
#define FLEET_POLICY_TEXT_MAX 512

/* The arguments for a call on circuit `name` from cbd `origin` with the
 * request members in args (borrowed): the hot members each in its place,
 * every other member in the extra object. False (argv all NULL) when a
 * member has the wrong type, or out of memory; else each argv[i] is
 * malloc'd: to fleet_args_free. */
bool fleet_args_make(const char *name, const char *origin, const json_t *args,
    char *argv[FLEET_ARGS]);
/* Free the arguments (NULL each). */
void fleet_args_free(char *argv[FLEET_ARGS]);

#endif
