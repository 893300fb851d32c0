/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.c — reads the realtime and monotonic clocks in milliseconds, for
 * cbd and libcbclient alike.
 */
#include <time.h>

#include "clock.h"

/* Added to the realtime clock: only tests set it (a host whose clock is
 * off, for fleet mode). */
static int64_t realtime_skew_ms;

void
clock_set_realtime_skew_ms(int64_t skew_ms)
{
	realtime_skew_ms = skew_ms;
}

/* A clock in whole milliseconds. */
static int64_t
clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
clock_realtime_ms(void)
{
	return clock_ms(CLOCK_REALTIME) + realtime_skew_ms;
}

int64_t
clock_monotonic_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

int64_t
clock_monotonic_coarse_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC_COARSE);
}

int64_t
clock_monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
