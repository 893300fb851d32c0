/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-copy.h — fleet mode: this host's copy of the fleet's circuits,
 * refreshed from what the circuit script reports (replies, events,
 * write-backs), its version (a circuit older than the copy is written
 * back), and the declared policy's canonical text the script stores.
 */
#ifndef CBD_FLEET_COPY_H
#define CBD_FLEET_COPY_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "circuit-table.h"
#include "proto.h"

/* Make this host's copy of name what the script reports (circuit NULL
 * or null: not stored), log and broadcast its change (through events; a
 * circuit gone is a deleted event when deleted_event). *view (may be
 * NULL) receives the script's view. Returns whether circuit was read. */
bool fleet_copy_apply(const char *name, const json_t *circuit, const json_t *change_json,
    int64_t now, bool deleted_event, ct_view *view);

/* As fleet_copy_apply, for the reply of a script call made when
 * fleet_seq() was stamp: the copy is fresh (fleet_copy_fresh) while the
 * event channel stays live and no event of name arrives. Every other
 * apply leaves the copy stale until such a reply. */
bool fleet_copy_apply_fresh(const char *name, const json_t *circuit, const json_t *change_json,
    int64_t now, bool deleted_event, ct_view *view, uint64_t stamp);

/* An event of name from another host arrived: the copy is stale until a
 * reply to a script call made from now on is applied. */
void fleet_copy_event_arrived(const char *name);

/* May this host answer from its copy of name without asking Redis? Its
 * last refresh was the reply of a script call made after the event
 * channel's subscription was confirmed (and it has not dropped since),
 * no event of name arrived after that call was made, and Redis is up. */
bool fleet_copy_fresh(const char *name);

/* Forget what this host knows of name's version (its copy reclaimed). A
 * reply reporting a circuit at a lower version than this host's copy of
 * the same circuit (Redis lost changes: a lagging replica promoted) is
 * not taken: the copy is written back (the script's restore). */
void fleet_copy_forget(const char *name);
/* Forget every version (shutdown). */
void fleet_copy_free(void);

/* The canonical text of a declared policy: "" for none. NULL: no memory. */
char *fleet_copy_declared_text(const proto_ctx *declared);
/* Parse the canonical text of a declared policy ("" = none). */
bool fleet_copy_declared_parse(const char *text, proto_ctx *out);

#endif
