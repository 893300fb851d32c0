/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check-run.h — the main() of every check unit suite: run the suites given,
 * exit status 0 only when every test passed.
 */
#ifndef CBD_CHECK_RUN_H
#define CBD_CHECK_RUN_H

#include <check.h>

/* Run the NULL-terminated list of suites; EXIT_SUCCESS or EXIT_FAILURE. */
int check_run(Suite *first, ...);

#endif
