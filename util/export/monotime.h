/*
 * monotime.h - the monotonic clock, in the units ferry counts in.
 *
 * One helper for what five files each wrote for themselves.  All are
 * static inline over clock_gettime, which the vDSO answers without a
 * system call; the coarse clock is cheaper still (it reads the tick's
 * time, a few ms behind at most) and serves caches that keep an answer
 * for a second.
 */
#ifndef FERRY_UTIL_MONOTIME_H
#define FERRY_UTIL_MONOTIME_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t monotime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline uint64_t monotime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC_COARSE in milliseconds: for time-to-live checks. */
static inline uint64_t monotime_coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#endif /* FERRY_UTIL_MONOTIME_H */
