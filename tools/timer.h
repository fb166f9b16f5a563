/*
 * timer.h - wall-clock timing for `scaledmm bench`.
 *
 * clock_gettime(CLOCK_MONOTONIC): unaffected by changes of the system clock,
 * nanosecond resolution on Linux.
 */
#ifndef SMM_TOOL_TIMER_H
#define SMM_TOOL_TIMER_H

#include <time.h>

/* Seconds since an arbitrary fixed point in the past (monotonic). */
static inline double timer_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
