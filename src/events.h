/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.h — the fan-out of a circuit's changes: everything that changes
 * a circuit's state or hold, or drops it, reports it here, and this
 * module feeds the state file (persist), the watchers (watch), the stats
 * and the logs. Redis's notifications and dirty counter in one door.
 */
#ifndef CBD_EVENTS_H
#define CBD_EVENTS_H

#include "circuit-table.h"
#include "conf.h"

/* A change of name's state or hold (reason NONE: nothing happened): the
 * state file is due, watchers are told; a transition (from != to) is
 * counted and logged at info: circuit, old -> new, why. */
void events_changed(const char *name, const ct_change *change);

/* A hold placed or released on the same state: logged at info. */
void events_hold_logged(const char *name, const ct_change *change, const ct_view *view);

/* An operator deleted name: the state file is due, watchers are told. */
void events_deleted(const char *name);

/* The table reclaimed idle name: watchers are told. */
void events_reclaimed(const char *name);

/* A reload replaces old with fresh (before cbd.conf is fresh): the
 * circuits whose effective policy changed get a new policy_rev, and
 * their watchers a policy event (protocol 3, §1). */
void events_policies_reloaded(const cbd_conf *old, const cbd_conf *fresh);

#endif
