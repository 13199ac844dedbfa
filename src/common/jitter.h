/* jitter.h -- random spreads for retries and first choices, so that holders that fail or
 * start together (an ensemble restart, every session lost at once, a datacenter powered on)
 * do not all come back at the same moment or to the same place. Plain C, header only: a
 * per-thread xorshift seeded from the clock, the process and the thread; good for spreading
 * load, never for secrets. */
#ifndef SF_JITTER_H
#define SF_JITTER_H

#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* The next of this thread's pseudo-random numbers. */
static inline uint64_t sf_jitter_next(void)
{
    static _Thread_local uint64_t state;
    if (state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                ((uint64_t)getpid() << 32) ^ ((uint64_t)(uintptr_t)&state * 0x9E3779B97F4A7C15u);
        if (state == 0)
            state = 1;
    }
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1Du;
}

/* A wait drawn from [ms/2, ms]: at most the backoff asked for, and never so short that a
 * herd's retries pile up at its start. */
static inline int64_t sf_jitter_ms(int64_t ms)
{
    if (ms <= 1)
        return ms;
    return ms - (int64_t)(sf_jitter_next() % (uint64_t)(ms / 2 + 1));
}

/* A number drawn from 0..n-1 (0 when n <= 1). */
static inline int sf_jitter_below(int n)
{
    return n <= 1 ? 0 : (int)(sf_jitter_next() % (uint64_t)n);
}

#endif /* SF_JITTER_H */
