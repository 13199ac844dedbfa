/* bench_common.h -- what the in-process benchmarks share: the monotonic clock they time by,
 * the median of per-call costs, and the cap of the 12-bit sequence they compare rates to. */
#ifndef SF_BENCH_COMMON_H
#define SF_BENCH_COMMON_H

#include <stdlib.h>
#include <time.h>

/* 4,096 ids per millisecond: the most one worker id can make. */
#define CAP_PER_SECOND 4096000.0

static inline double bench_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of values[0..n-1] (sorted in place). */
static inline double bench_median(double *values, size_t n)
{
    qsort(values, n, sizeof *values, bench_cmp_double);
    return values[n / 2];
}

#endif /* SF_BENCH_COMMON_H */
