/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats-report.h — the stats op's report of the counters (stats.h).
 */
#ifndef CBD_STATS_REPORT_H
#define CBD_STATS_REPORT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "circuit-table.h"
#include "stats.h"

/* The stats op's result members, added to reply. op_names has op_count rows;
 * table adds circuits, slots and max_circuits refusals. */
bool stats_to_json(json_t *reply, const char *const *op_names, size_t op_count,
    const circuit_table *table);

#endif
