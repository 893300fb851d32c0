/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.h — the clocks, read in one place. The pure modules (breaker,
 * circuit-table, proto) never call these: their callers pass `now`.
 */
#ifndef CBD_CLOCK_H
#define CBD_CLOCK_H

#include <stdint.h>

/* Milliseconds since the Unix epoch (the protocol's time). */
int64_t clock_realtime_ms(void);
/* Milliseconds of a clock that never jumps (timeouts, uptime). */
int64_t clock_monotonic_ms(void);
/* The same clock as of the last kernel tick (a few ms behind at most;
 * cheaper: no timestamp counter read), for idleness. */
int64_t clock_monotonic_coarse_ms(void);
/* The same clock in microseconds (short pauses). */
int64_t clock_monotonic_us(void);

/* Shift the realtime clock by skew_ms (tests only: cbd reads
 * CBD_TEST_CLOCK_SKEW_MS to play a host whose clock is off). */
void clock_set_realtime_skew_ms(int64_t skew_ms);

#endif
