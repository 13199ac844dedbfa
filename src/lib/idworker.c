/* idworker.c -- the Snowflake id generator: the original IdWorker's algorithm,
 * thread-safe, with an injectable clock, batches and two opt-in extensions.
 *
 * Plain C: no GLib, no Thrift, no ZooKeeper. Every path that hands out an id
 * holds w->lock, as the original's nextId is synchronized. */
#define _POSIX_C_SOURCE 200809L
#include "snowflake.h"
#include "sf_error.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The first sequence of a millisecond when random_first_sequence is on is
 * drawn from 0..SF_RANDOM_SEQUENCE_MASK, leaving at least 2048 ids per ms. */
#define SF_RANDOM_SEQUENCE_MASK 2047

#if defined(__x86_64__) || defined(__i386__)
#define sf_cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define sf_cpu_relax() __asm__ __volatile__("yield")
#else
#define sf_cpu_relax() ((void)0)
#endif

/* A spin-then-yield lock. The critical section is a clock read and a few
 * arithmetic steps, shorter than a futex sleep and wake-up: spinning keeps
 * two threads near the sequence cap where a mutex lost a sixth of it. The
 * holder may spin up to a millisecond in til_next_millis, so waiters yield
 * the CPU after a short spin rather than burn it. */
typedef struct sf_lock {
    atomic_bool held;
} sf_lock;

static inline void sf_lock_acquire(sf_lock *l)
{
    for (;;) {
        if (!atomic_exchange_explicit(&l->held, true, memory_order_acquire))
            return;
        for (int spins = 0; atomic_load_explicit(&l->held, memory_order_relaxed); spins++) {
            if (spins < 200)
                sf_cpu_relax();
            else
                sched_yield();
        }
    }
}

static inline void sf_lock_release(sf_lock *l)
{
    atomic_store_explicit(&l->held, false, memory_order_release);
}

struct sf_worker {
    sf_lock lock;
    /* Guarded by lock for writing; last_timestamp and the counters are atomics so that
     * the registry's thread and the admin endpoint read them without waiting for a
     * holder that is making a batch. */
    _Atomic int64_t last_timestamp; /* Unix ms of the last id, -1 before the first */
    int64_t sequence;
    uint64_t rng;           /* xorshift64* state for random_first_sequence */
    atomic_uint_fast64_t ids_generated, sequence_waits, clock_backward_waits,
        clock_backward_errors;
    /* Immutable after sf_worker_new. */
    int64_t id_bits;        /* (datacenter << 17) | (worker << 12) */
    sf_worker_options opts;
};

/* Adds n to a counter only the lock holder writes: a plain load and store, no
 * locked instruction on the hot path. */
static inline void do_count(atomic_uint_fast64_t *counter, uint64_t n)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline int64_t do_last(const sf_worker *w)
{
    return atomic_load_explicit(&w->last_timestamp, memory_order_relaxed);
}

static inline void do_set_last(sf_worker *w, int64_t ts)
{
    atomic_store_explicit(&w->last_timestamp, ts, memory_order_relaxed);
}

int64_t sf_clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t sf_system_clock(void *ctx)
{
    (void)ctx;
    return sf_clock_now_ms();
}

/* Reads the worker's clock; the system clock is called directly rather than through the
 * pointer, which saves an indirect call on every id. */
static inline int64_t do_read_clock(const sf_worker *w)
{
    if (w->opts.clock == sf_system_clock)
        return sf_clock_now_ms();
    return w->opts.clock(w->opts.clock_ctx);
}

static void sf_system_sleep(void *ctx, int64_t ms)
{
    (void)ctx;
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void sf_worker_options_init(sf_worker_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->epoch_ms = SF_TWITTER_EPOCH_MS;
}

int sf_worker_options_check(const sf_worker_options *o, sf_error *err)
{
    if (o->worker_id < 0 || o->worker_id > SF_MAX_WORKER_ID)
        return sf_error_fail(err, SF_ERR_ARG, "worker id %" PRId64 " is out of range: allowed 0..%d",
                       o->worker_id, SF_MAX_WORKER_ID);
    if (o->datacenter_id < 0 || o->datacenter_id > SF_MAX_DATACENTER_ID)
        return sf_error_fail(err, SF_ERR_ARG, "datacenter id %" PRId64 " is out of range: allowed 0..%d",
                       o->datacenter_id, SF_MAX_DATACENTER_ID);
    if (o->epoch_ms < 0)
        return sf_error_fail(err, SF_ERR_ARG, "epoch %" PRId64 " ms is negative: allowed 0 or later",
                       o->epoch_ms);
    if (o->max_clock_backward_wait_ms < 0 || o->max_clock_backward_wait_ms > 60000)
        return sf_error_fail(err, SF_ERR_ARG,
                       "max_clock_backward_wait_ms %" PRId64 " is out of range: allowed 0..60000",
                       o->max_clock_backward_wait_ms);
    return SF_OK;
}

sf_worker *sf_worker_new(const sf_worker_options *opts, sf_error *err)
{
    if (sf_worker_options_check(opts, err) != SF_OK)
        return NULL;
    sf_worker *w = calloc(1, sizeof *w);
    if (w == NULL) {
        sf_error_fail(err, SF_ERR_NOMEM, "out of memory allocating a worker");
        return NULL;
    }
    atomic_init(&w->lock.held, false);
    atomic_init(&w->last_timestamp, -1);
    atomic_init(&w->ids_generated, 0);
    atomic_init(&w->sequence_waits, 0);
    atomic_init(&w->clock_backward_waits, 0);
    atomic_init(&w->clock_backward_errors, 0);
    w->opts = *opts;
    if (w->opts.clock == NULL)
        w->opts.clock = sf_system_clock;
    if (w->opts.sleep == NULL)
        w->opts.sleep = sf_system_sleep;
    w->sequence = 0;
    w->id_bits = (opts->datacenter_id << SF_DATACENTER_ID_SHIFT) |
                 (opts->worker_id << SF_WORKER_ID_SHIFT);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    w->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
             (uint64_t)(uintptr_t)w;
    if (w->rng == 0)
        w->rng = 0x9E3779B97F4A7C15ULL;
    return w;
}

void sf_worker_free(sf_worker *w)
{
    if (w == NULL)
        return;
    free(w);
}

/* The sequence a new millisecond starts at: 0, as the original, or random. */
static int64_t do_first_sequence(sf_worker *w)
{
    if (!w->opts.random_first_sequence)
        return 0;
    uint64_t x = w->rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return (int64_t)((x * 0x2545F4914F6CDD1DULL) >> 32) & SF_RANDOM_SEQUENCE_MASK;
}

/* Under the lock: picks the (timestamp, sequence) of the next id from one clock reading,
 * as the original nextId does, into *ts and w->sequence. When the clock is behind the
 * last id, returns SF_ERR_CLOCK_BACKWARDS with *behind_ms and changes nothing: the
 * caller waits without the lock, or refuses. The original's tilNextMillis spins only
 * while the clock stays on the exhausted millisecond; a step back during that spin is
 * a backward step like any other, never a spin through the whole step. */
static int do_next_slot(sf_worker *w, int64_t *ts_out, int64_t *behind_ms, sf_error *err)
{
    int64_t last = do_last(w);
    int64_t ts = do_read_clock(w);
    if (ts < last) {
        *behind_ms = last - ts;
        return SF_ERR_CLOCK_BACKWARDS;
    }
    if (ts == last && ((w->sequence + 1) & SF_SEQUENCE_MASK) == 0) {
        do_count(&w->sequence_waits, 1);
        while (ts == last)
            ts = do_read_clock(w);
        if (ts < last) {
            *behind_ms = last - ts;
            return SF_ERR_CLOCK_BACKWARDS;
        }
    }
    if (ts < w->opts.epoch_ms || ts - w->opts.epoch_ms > SF_MAX_TIMESTAMP_DELTA)
        return sf_error_fail(err, SF_ERR_CLOCK,
                       "clock reads %" PRId64 " ms, outside the 41-bit range after epoch %" PRId64,
                       ts, w->opts.epoch_ms);
    w->sequence = ts == last ? w->sequence + 1 : do_first_sequence(w);
    do_set_last(w, ts);
    *ts_out = ts;
    return SF_OK;
}

static inline int64_t do_make_id(const sf_worker *w, int64_t ts, int64_t sequence)
{
    return ((ts - w->opts.epoch_ms) << SF_TIMESTAMP_SHIFT) | w->id_bits | sequence;
}

/* Makes count ids, taking runs of sequence numbers per millisecond. A backward clock
 * step is waited out, with the lock released so that other readers of the worker go
 * on, while the waits of this call add up to at most the smaller of max_wait_ms and
 * max_clock_backward_wait_ms; beyond that it fails naming how far the clock is behind. */
static int do_generate(sf_worker *w, int64_t *ids, size_t count, int64_t max_wait_ms,
                       sf_error *err)
{
    int64_t allowed = w->opts.max_clock_backward_wait_ms;
    if (max_wait_ms < allowed)
        allowed = max_wait_ms > 0 ? max_wait_ms : 0;
    int64_t waited = 0;
    size_t done = 0;
    int rc = SF_OK;
    sf_lock_acquire(&w->lock);
    while (done < count) {
        int64_t ts = 0, behind = 0;
        rc = do_next_slot(w, &ts, &behind, err);
        if (rc == SF_ERR_CLOCK_BACKWARDS) {
            if (behind > allowed - waited) {
                do_count(&w->clock_backward_errors, 1);
                sf_error_fail(err, SF_ERR_CLOCK_BACKWARDS,
                        "Clock moved backwards.  Refusing to generate id for %" PRId64
                        " milliseconds", behind);
                if (err != NULL)
                    err->behind_ms = behind;
                break;
            }
            if (waited == 0)
                do_count(&w->clock_backward_waits, 1);
            sf_lock_release(&w->lock);
            w->opts.sleep(w->opts.clock_ctx, behind);
            waited += behind;
            sf_lock_acquire(&w->lock);
            continue;
        }
        if (rc != SF_OK)
            break;
        size_t run = (size_t)(SF_SEQUENCE_MASK - w->sequence) + 1;
        if (run > count - done)
            run = count - done;
        int64_t base = do_make_id(w, ts, w->sequence);
        for (size_t i = 0; i < run; i++)
            ids[done + i] = base + (int64_t)i;
        w->sequence += (int64_t)run - 1;
        done += run;
    }
    if (rc == SF_OK)
        do_count(&w->ids_generated, count);
    sf_lock_release(&w->lock);
    return rc;
}

int sf_worker_next_id(sf_worker *w, int64_t *id, sf_error *err)
{
    return do_generate(w, id, 1, INT64_MAX, err);
}

int sf_worker_next_ids(sf_worker *w, int64_t *ids, size_t count, sf_error *err)
{
    return do_generate(w, ids, count, INT64_MAX, err);
}

int sf_worker_next_ids_wait_max(sf_worker *w, int64_t *ids, size_t count, int64_t max_wait_ms,
                                sf_error *err)
{
    return do_generate(w, ids, count, max_wait_ms, err);
}

int64_t sf_worker_worker_id(const sf_worker *w)
{
    return w->opts.worker_id;
}

int64_t sf_worker_datacenter_id(const sf_worker *w)
{
    return w->opts.datacenter_id;
}

int64_t sf_worker_epoch(const sf_worker *w)
{
    return w->opts.epoch_ms;
}

int64_t sf_worker_max_clock_backward_wait_ms(const sf_worker *w)
{
    return w->opts.max_clock_backward_wait_ms;
}

int64_t sf_worker_last_timestamp(sf_worker *w)
{
    return do_last(w);
}

void sf_worker_advance_last_timestamp(sf_worker *w, int64_t ts)
{
    sf_lock_acquire(&w->lock);
    if (ts > do_last(w)) {
        do_set_last(w, ts);
        /* Any id in the millisecond ts may be taken: start after it. */
        w->sequence = SF_SEQUENCE_MASK;
    }
    sf_lock_release(&w->lock);
}

void sf_worker_get_stats(sf_worker *w, sf_worker_stats *out)
{
    out->ids_generated = atomic_load_explicit(&w->ids_generated, memory_order_relaxed);
    out->sequence_waits = atomic_load_explicit(&w->sequence_waits, memory_order_relaxed);
    out->clock_backward_waits =
        atomic_load_explicit(&w->clock_backward_waits, memory_order_relaxed);
    out->clock_backward_errors =
        atomic_load_explicit(&w->clock_backward_errors, memory_order_relaxed);
}

void sf_worker_set_sequence(sf_worker *w, int64_t sequence)
{
    sf_lock_acquire(&w->lock);
    w->sequence = sequence & SF_SEQUENCE_MASK;
    sf_lock_release(&w->lock);
}
