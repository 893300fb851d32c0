/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check-run.c — runs check suites for a test program's main().
 */
#include <stdarg.h>
#include <stdlib.h>

#include "check-run.h"

int
check_run(Suite *first, ...)
{
	SRunner *runner = srunner_create(first);
	va_list ap;
	Suite *more;
	int failed;

	va_start(ap, first);
	while ((more = va_arg(ap, Suite *)) != NULL)
		srunner_add_suite(runner, more);
	va_end(ap);
	srunner_run_all(runner, CK_NORMAL);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
