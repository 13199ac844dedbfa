/* latency.c -- sf_latency: a lock-free log-linear histogram of durations, for per-method timings. */
#include "latency.h"

/* Adds n to a counter; a stripe is normally one thread's, so this is uncontended. */
static inline void sf_latency_bump(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

void sf_latency_init(sf_latency *l)
{
    atomic_init(&l->count, 0);
    atomic_init(&l->sum_ns, 0);
    atomic_init(&l->min_ns, UINT64_MAX);
    atomic_init(&l->max_ns, 0);
    for (size_t i = 0; i < SF_LATENCY_BUCKETS; i++)
        atomic_init(&l->buckets[i], 0);
}

size_t sf_latency_bucket(uint64_t ns)
{
    if (ns < (UINT64_C(1) << SF_LATENCY_MIN_SHIFT))
        return (size_t)(ns >> (SF_LATENCY_MIN_SHIFT - SF_LATENCY_SUB_BITS));
    int e = 63 - __builtin_clzll(ns); /* ns is in [2^e, 2^(e+1)) */
    if (e > SF_LATENCY_MAX_SHIFT)
        return SF_LATENCY_BUCKETS - 1;
    size_t row = (size_t)(e - SF_LATENCY_MIN_SHIFT + 1);
    size_t sub = (size_t)(ns >> (e - SF_LATENCY_SUB_BITS)) & (SF_LATENCY_SUB - 1);
    return row * SF_LATENCY_SUB + sub;
}

uint64_t sf_latency_bucket_upper_ns(size_t i)
{
    size_t row = i / SF_LATENCY_SUB, sub = i % SF_LATENCY_SUB;
    if (row == 0)
        return ((uint64_t)(sub + 1) << (SF_LATENCY_MIN_SHIFT - SF_LATENCY_SUB_BITS)) - 1;
    if (i == SF_LATENCY_BUCKETS - 1)
        return UINT64_MAX;
    int e = (int)row + SF_LATENCY_MIN_SHIFT - 1;
    uint64_t width = UINT64_C(1) << (e - SF_LATENCY_SUB_BITS);
    return (UINT64_C(1) << e) + (uint64_t)(sub + 1) * width - 1;
}

void sf_latency_record(sf_latency *l, uint64_t ns)
{
    sf_latency_bump(&l->buckets[sf_latency_bucket(ns)], 1);
    sf_latency_bump(&l->count, 1);
    sf_latency_bump(&l->sum_ns, ns);
    uint_fast64_t seen = atomic_load_explicit(&l->min_ns, memory_order_relaxed);
    while (ns < seen && !atomic_compare_exchange_weak_explicit(&l->min_ns, &seen, ns,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed)) {
    }
    seen = atomic_load_explicit(&l->max_ns, memory_order_relaxed);
    while (ns > seen && !atomic_compare_exchange_weak_explicit(&l->max_ns, &seen, ns,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed)) {
    }
}

void sf_latency_snapshot_init(sf_latency_snapshot *s)
{
    *s = (sf_latency_snapshot){.min_ns = UINT64_MAX};
}

void sf_latency_add_to(const sf_latency *l, sf_latency_snapshot *s)
{
    uint64_t n = 0;
    for (size_t i = 0; i < SF_LATENCY_BUCKETS; i++) {
        uint64_t b = atomic_load_explicit(&l->buckets[i], memory_order_relaxed);
        s->buckets[i] += b;
        n += b;
    }
    /* The count is the buckets' sum, so percentiles always agree with it even while
     * the writer is between its stores. */
    s->count += n;
    s->sum_ns += atomic_load_explicit(&l->sum_ns, memory_order_relaxed);
    uint64_t min = atomic_load_explicit(&l->min_ns, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&l->max_ns, memory_order_relaxed);
    if (min < s->min_ns)
        s->min_ns = min;
    if (max > s->max_ns)
        s->max_ns = max;
}

uint64_t sf_latency_percentile(const sf_latency_snapshot *s, double q)
{
    if (s->count == 0)
        return 0;
    /* The rank of the q-quantile, 1-based, rounded up: p50 of 3 values is the 2nd. */
    double want = q * (double)s->count;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want || rank == 0)
        rank++;
    uint64_t seen = 0;
    for (size_t i = 0; i < SF_LATENCY_BUCKETS; i++) {
        seen += s->buckets[i];
        if (seen >= rank) {
            uint64_t upper = sf_latency_bucket_upper_ns(i);
            return upper < s->max_ns ? upper : s->max_ns;
        }
    }
    return s->max_ns;
}
