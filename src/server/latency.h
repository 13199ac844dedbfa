/* latency.h -- sf_latency: a lock-free log-linear histogram of durations, for per-method timings.
 *
 * Plain C. A histogram keeps a count per bucket; buckets split every power of two of
 * nanoseconds into SF_LATENCY_SUB equal parts, so a percentile read from it is within
 * 1/SF_LATENCY_SUB of the true value (12.5%), and its memory is fixed whatever the load.
 * Writers record with relaxed atomic adds (a histogram is normally one thread's stripe,
 * so they are uncontended); readers add up stripes at any time without stopping them. */
#ifndef SF_LATENCY_H
#define SF_LATENCY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SF_LATENCY_SUB_BITS 3
#define SF_LATENCY_SUB (1 << SF_LATENCY_SUB_BITS)   /* 8 buckets per power of two */
#define SF_LATENCY_MIN_SHIFT 7                      /* one row for 0..127 ns */
#define SF_LATENCY_MAX_SHIFT 36                     /* the last row starts at 2^36 ns, 68.7 s */
#define SF_LATENCY_ROWS (SF_LATENCY_MAX_SHIFT - SF_LATENCY_MIN_SHIFT + 2)
#define SF_LATENCY_BUCKETS (SF_LATENCY_ROWS * SF_LATENCY_SUB)

typedef struct sf_latency {
    atomic_uint_fast64_t count, sum_ns, min_ns, max_ns;
    atomic_uint_fast64_t buckets[SF_LATENCY_BUCKETS];
} sf_latency;

/* The sum of one or more histograms at one moment. min_ns is UINT64_MAX while empty. */
typedef struct sf_latency_snapshot {
    uint64_t count, sum_ns, min_ns, max_ns;
    uint64_t buckets[SF_LATENCY_BUCKETS];
} sf_latency_snapshot;

/* Empties a histogram; call before any record. */
void sf_latency_init(sf_latency *l);

/* Records one duration. Thread-safe. */
void sf_latency_record(sf_latency *l, uint64_t ns);

/* Empties a snapshot, ready for sf_latency_add_to. */
void sf_latency_snapshot_init(sf_latency_snapshot *s);

/* Adds l's figures to s; safe while l's writer records. */
void sf_latency_add_to(const sf_latency *l, sf_latency_snapshot *s);

/* The bucket a duration falls in, and the largest duration (ns) bucket i holds. */
size_t sf_latency_bucket(uint64_t ns);
uint64_t sf_latency_bucket_upper_ns(size_t i);

/* The q-quantile (0 < q <= 1) in ns: the upper end of the bucket that holds it, never more
 * than the largest duration recorded; 0 while empty. */
uint64_t sf_latency_percentile(const sf_latency_snapshot *s, double q);

#endif /* SF_LATENCY_H */
