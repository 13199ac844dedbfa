/* clocks.c -- reads the kernel's clocks. clock_gettime cannot fail for these ids on Linux,
 * which is all this builds on (CLOCK_BOOTTIME and CLOCK_MONOTONIC_COARSE are Linux's). */
#define _GNU_SOURCE
#include "clocks.h"

#include <time.h>

static struct timespec sf_clocks_read(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts;
}

int64_t sf_clocks_mono_ms(void)
{
    struct timespec ts = sf_clocks_read(CLOCK_MONOTONIC);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sf_clocks_coarse_ms(void)
{
    struct timespec ts = sf_clocks_read(CLOCK_MONOTONIC_COARSE);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t sf_clocks_mono_ns(void)
{
    struct timespec ts = sf_clocks_read(CLOCK_MONOTONIC);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t sf_clocks_boot_ms(void)
{
    struct timespec ts = sf_clocks_read(CLOCK_BOOTTIME);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
