/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-sync.h — fleet mode: keeping this host and the fleet in step.
 * Events from other cbds reach this host's copy and watchers; an
 * operator's action made here while Redis is away is remembered and
 * written back when it returns, then what opened or was held here meanwhile
 * is merged.
 */
#ifndef CBD_FLEET_SYNC_H
#define CBD_FLEET_SYNC_H

#include <stdbool.h>
#include <stdint.h>

#include "circuit-table.h"

/* Circuits whose operator actions are remembered while Redis is away;
 * past it an action is not written back (counted, logged once). */
#define FLEET_SYNC_WRITEBACK_MAX 4096
/* A re-seed's merges in Redis at once (the rest wait in cbd, and so do
 * requests until the re-seed is done). */
#define FLEET_SYNC_RESEED_WINDOW 16

typedef enum fleet_wb_action {
	FLEET_WB_NONE = 0, /* not an operator's action */
	FLEET_WB_RELEASE, /* ends the hold the circuit had */
	FLEET_WB_DELETE,
	FLEET_WB_SET_STATE, /* unheld: forces state, clears a hold */
} fleet_wb_action;

/* A circuit as this host knew it (a hold is identified by its state,
 * since, by_uid and by_user). */
typedef struct fleet_wb_known {
	int64_t opened_at; /* CB_TIME_NONE: none */
	bool held;
	cb_state hold_state;
	int64_t hold_since;
	int64_t hold_by_uid;
	char hold_by_user[CT_USER_MAX + 1];
} fleet_wb_known;

/* The circuit as this host knows it (view) into k. */
void fleet_sync_known_read(fleet_wb_known *k, const ct_view *view);

/* Remember an operator's action on name made while Redis is away (at:
 * its clock; before: the circuit before it; hold_placed: a set_state
 * that held it), to write back when Redis returns. */
void fleet_sync_note(const char *name, fleet_wb_action action, cb_state state, int64_t at,
    const fleet_wb_known *before, bool hold_placed);

/* Start fleet mode's link with its event and recovery handlers (server
 * start); false (logged) on failure. */
bool fleet_sync_start(void);
/* Forget the remembered actions (shutdown). */
void fleet_sync_free(void);

#endif
