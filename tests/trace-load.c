/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace-load.c — loads the shared state-machine trace (see trace-load.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include <check.h>

#include "trace-load.h"

json_t *
trace_load(void)
{
	char path[1024];
	json_error_t err;
	json_t *doc;

	snprintf(path, sizeof path, "%s/proto/traces/state-machine.json", getenv("CBD_SRCDIR"));
	doc = json_load_file(path, 0, &err);
	ck_assert_msg(doc != NULL, "%s: %s", path, err.text);
	ck_assert_int_eq(json_integer_value(json_object_get(doc, "version")), 1);
	ck_assert_int_gt(json_array_size(json_object_get(doc, "cases")), 10);
	return doc;
}
