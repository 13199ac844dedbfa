/* clocks.h -- the clocks snowflaked times things by, read (and waited on) in one place so
 * that every module agrees on which clock a deadline or a lease is on. Plain C; inline, because the server
 * reads them on every request. (The ids themselves are on the wall clock, which the
 * generator reads through its own clock hook.) clock_gettime cannot fail for these clock
 * ids on Linux, which is all this builds on (CLOCK_BOOTTIME and CLOCK_MONOTONIC_COARSE are
 * Linux's). */
#ifndef SF_CLOCKS_H
#define SF_CLOCKS_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC: deadlines that must not jump with the wall clock. */
static inline int64_t sf_clocks_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds on CLOCK_MONOTONIC_COARSE: as above, cheap enough for every event of a loop,
 * a tick (a few ms) coarse. */
static inline int64_t sf_clocks_coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Nanoseconds on CLOCK_MONOTONIC: timing calls. */
static inline uint64_t sf_clocks_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A CLOCK_MONOTONIC time in ms as the timespec pthread_cond_timedwait takes (for conditions
 * set to CLOCK_MONOTONIC, so waits do not jump with the wall clock). */
static inline struct timespec sf_clocks_mono_timespec(int64_t mono_ms)
{
    struct timespec ts = {.tv_sec = mono_ms / 1000, .tv_nsec = (mono_ms % 1000) * 1000000};
    return ts;
}

/* Initialises cond on CLOCK_MONOTONIC, for waits until an sf_clocks_mono_timespec deadline.
 * 0, or the error number of the step that failed. */
static inline int sf_clocks_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

/* Sleeps ms milliseconds, on through signals. */
static inline void sf_clocks_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

/* Milliseconds on CLOCK_BOOTTIME: the clock of every lease. Unlike CLOCK_MONOTONIC it runs on
 * while the machine is suspended, and ZooKeeper's session clock runs on meanwhile too. */
static inline int64_t sf_clocks_boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
