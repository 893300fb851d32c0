/*
 * clock.c — reads the realtime and monotonic clocks in milliseconds, for
 * cbd and libcbclient alike.
 */
#include <time.h>

#include "clock.h"

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
	return clock_ms(CLOCK_REALTIME);
}

int64_t
clock_monotonic_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

int64_t
clock_monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
