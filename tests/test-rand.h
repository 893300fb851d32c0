/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-rand.h — the tests' random numbers: splitmix64 from a fixed seed,
 * so generated cases are the same on every machine and every run.
 */
#ifndef CBD_TEST_RAND_H
#define CBD_TEST_RAND_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t
test_rand(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* A number below n (0 when n is 0). */
static inline size_t
test_below(uint64_t *state, size_t n)
{
	return n > 0 ? (size_t)(test_rand(state) % n) : 0;
}

#endif
