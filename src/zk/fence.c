/* fence.c -- the fenced generator (see fence.h): a view published under a sequence lock, read
 * without locking by every call, checked again after the ids were made. */
#define _POSIX_C_SOURCE 200809L
#include "fence.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"

/* One consistent copy of the published state. */
typedef struct sf_fence_view {
    sf_worker *worker;      /* NULL while none is held */
    bool serving;           /* the gate */
    uint64_t epoch;         /* bumped by every publish and close, never by a renewal */
    int64_t lease_until;    /* CLOCK_BOOTTIME ms; 0 = no lease */
    int64_t reserved_until; /* Unix ms; 0 = no reservation */
} sf_fence_view;

struct sf_fence {
    /* The view under a sequence lock: writers hold lock, readers retry while seq is odd or
     * moved, so worker, gate, epoch, lease and reservation are always seen together. */
    atomic_uint_fast64_t seq;
    _Atomic(sf_worker *) worker;
    atomic_bool serving;
    atomic_uint_fast64_t epoch;
    _Atomic int64_t lease_until;
    _Atomic int64_t reserved_until;
    pthread_mutex_t lock; /* guards writers, reason, the hold and workers */
    char *reason;
    bool published_serving; /* the gate the last publish asked for, hold aside */
    bool held;              /* sf_fence_hold: shut whatever is published */
    char hold[SF_FENCE_REASON_MAX]; /* ...and why */
    sf_worker **workers;  /* every worker ever published, freed with the fence */
    size_t nworkers;
    size_t capworkers;
};

sf_fence *sf_fence_new(void)
{
    sf_fence *f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    f->reason = strdup("starting");
    /* Room for a worker per worker id and one more: a registration that claims again and
     * again never allocates while publishing. */
    f->capworkers = SF_MAX_WORKER_ID + 2;
    f->workers = malloc(f->capworkers * sizeof *f->workers);
    if (f->reason == NULL || f->workers == NULL || pthread_mutex_init(&f->lock, NULL) != 0) {
        free(f->workers);
        free(f->reason);
        free(f);
        return NULL;
    }
    atomic_init(&f->seq, 0);
    atomic_init(&f->worker, NULL);
    atomic_init(&f->serving, false);
    atomic_init(&f->epoch, 0);
    atomic_init(&f->lease_until, 0);
    atomic_init(&f->reserved_until, 0);
    return f;
}

/* Frees the workers and the fence's memory, but not its lock. */
static void sf_fence_free_memory(sf_fence *f)
{
    for (size_t i = 0; i < f->nworkers; i++)
        sf_worker_free(f->workers[i]);
    free(f->workers);
    free(f->reason);
    free(f);
}

void sf_fence_free(sf_fence *f)
{
    if (f == NULL)
        return;
    pthread_mutex_destroy(&f->lock);
    sf_fence_free_memory(f);
}

void sf_fence_forget(sf_fence *f)
{
    if (f != NULL)
        sf_fence_free_memory(f);
}

/* Reads the view: a sequence-lock read, retried while a write is under way. */
static void sf_fence_read(sf_fence *f, sf_fence_view *v)
{
    for (;;) {
        uint64_t before = atomic_load_explicit(&f->seq, memory_order_acquire);
        if (before & 1)
            continue;
        v->worker = atomic_load_explicit(&f->worker, memory_order_relaxed);
        v->serving = atomic_load_explicit(&f->serving, memory_order_relaxed);
        v->epoch = atomic_load_explicit(&f->epoch, memory_order_relaxed);
        v->lease_until = atomic_load_explicit(&f->lease_until, memory_order_relaxed);
        v->reserved_until = atomic_load_explicit(&f->reserved_until, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&f->seq, memory_order_relaxed) == before)
            return;
    }
}

/* Writes the view; the caller holds f->lock. epoch_step: 1 for a publish or close, 0 for a
 * renewal. */
static void sf_fence_write(sf_fence *f, sf_worker *w, bool serving, int64_t lease_until,
                           int64_t reserved_until, uint64_t epoch_step)
{
    uint64_t seq = atomic_load_explicit(&f->seq, memory_order_relaxed);
    atomic_store_explicit(&f->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&f->worker, w, memory_order_relaxed);
    atomic_store_explicit(&f->serving, serving, memory_order_relaxed);
    atomic_store_explicit(&f->epoch,
                          atomic_load_explicit(&f->epoch, memory_order_relaxed) + epoch_step,
                          memory_order_relaxed);
    atomic_store_explicit(&f->lease_until, lease_until, memory_order_relaxed);
    atomic_store_explicit(&f->reserved_until, reserved_until, memory_order_relaxed);
    atomic_store_explicit(&f->seq, seq + 2, memory_order_release);
}

/* Keeps a copy of reason (NULL = none) as the current one; the caller holds f->lock. Out of
 * memory leaves none, and "not serving" is said instead. */
static void sf_fence_set_reason(sf_fence *f, const char *reason)
{
    free(f->reason);
    f->reason = reason != NULL ? strdup(reason) : NULL;
}

/* Remembers w so that it is freed with the fence; the caller holds f->lock. Returns false
 * when out of memory (w is then not published). */
static bool sf_fence_keep(sf_fence *f, sf_worker *w)
{
    for (size_t i = 0; i < f->nworkers; i++)
        if (f->workers[i] == w)
            return true;
    if (f->nworkers == f->capworkers) {
        size_t cap = f->capworkers != 0 ? f->capworkers * 2 : 4;
        sf_worker **grown = realloc(f->workers, cap * sizeof *grown);
        if (grown == NULL)
            return false;
        f->workers = grown;
        f->capworkers = cap;
    }
    f->workers[f->nworkers++] = w;
    return true;
}

bool sf_fence_adopt(sf_fence *f, sf_worker *w)
{
    pthread_mutex_lock(&f->lock);
    bool kept = sf_fence_keep(f, w);
    pthread_mutex_unlock(&f->lock);
    return kept;
}

sf_worker *sf_fence_find(sf_fence *f, int64_t datacenter_id, int64_t worker_id)
{
    sf_worker *found = NULL;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->nworkers && found == NULL; i++)
        if (sf_worker_datacenter_id(f->workers[i]) == datacenter_id &&
            sf_worker_worker_id(f->workers[i]) == worker_id)
            found = f->workers[i];
    pthread_mutex_unlock(&f->lock);
    return found;
}

/* Writes the gate the last publish and the hold make, over the current worker and lease,
 * with reason; the caller holds f->lock. */
static void sf_fence_write_gate(sf_fence *f, const char *reason)
{
    sf_fence_set_reason(f, reason);
    sf_fence_write(f, atomic_load_explicit(&f->worker, memory_order_relaxed),
                   f->published_serving && !f->held,
                   atomic_load_explicit(&f->lease_until, memory_order_relaxed),
                   atomic_load_explicit(&f->reserved_until, memory_order_relaxed), 1);
}

bool sf_fence_publish(sf_fence *f, sf_worker *w, bool serving, int64_t lease_until_boot_ms,
                      int64_t reserved_until_ms, const char *reason)
{
    pthread_mutex_lock(&f->lock);
    if (w != NULL && !sf_fence_keep(f, w)) {
        /* Not freed: a caller may still refer to it (a leak beats a dangling worker). */
        w = NULL;
        reason = "out of memory publishing a worker";
        serving = false;
    }
    f->published_serving = serving && w != NULL;
    sf_fence_set_reason(f, f->published_serving && f->held ? f->hold : reason);
    bool open = f->published_serving && !f->held;
    sf_fence_write(f, w, open, lease_until_boot_ms, reserved_until_ms, 1);
    pthread_mutex_unlock(&f->lock);
    return open;
}

bool sf_fence_hold(sf_fence *f, const char *reason)
{
    pthread_mutex_lock(&f->lock);
    bool was_open = f->published_serving && !f->held;
    f->held = true;
    snprintf(f->hold, sizeof f->hold, "%s", reason);
    if (f->published_serving)
        sf_fence_write_gate(f, f->hold);
    pthread_mutex_unlock(&f->lock);
    return was_open;
}

bool sf_fence_release(sf_fence *f)
{
    pthread_mutex_lock(&f->lock);
    bool opens = f->held && f->published_serving;
    f->held = false;
    if (opens)
        sf_fence_write_gate(f, NULL);
    pthread_mutex_unlock(&f->lock);
    return opens;
}

bool sf_fence_held(sf_fence *f, char *why, size_t len)
{
    pthread_mutex_lock(&f->lock);
    bool held = f->held;
    if (held)
        snprintf(why, len, "%s", f->hold);
    pthread_mutex_unlock(&f->lock);
    return held;
}

void sf_fence_close(sf_fence *f, const char *reason)
{
    pthread_mutex_lock(&f->lock);
    f->published_serving = false;
    sf_fence_set_reason(f, reason);
    sf_fence_write(f, atomic_load_explicit(&f->worker, memory_order_relaxed), false, 0, 0, 1);
    pthread_mutex_unlock(&f->lock);
}

void sf_fence_renew(sf_fence *f, int64_t lease_until_boot_ms, int64_t reserved_until_ms)
{
    pthread_mutex_lock(&f->lock);
    sf_fence_write(f, atomic_load_explicit(&f->worker, memory_order_relaxed),
                   atomic_load_explicit(&f->serving, memory_order_relaxed), lease_until_boot_ms,
                   reserved_until_ms, 0);
    pthread_mutex_unlock(&f->lock);
}

sf_worker *sf_fence_worker(sf_fence *f)
{
    sf_fence_view v;
    sf_fence_read(f, &v);
    return v.worker;
}

int64_t sf_fence_lease_until(sf_fence *f)
{
    sf_fence_view v;
    sf_fence_read(f, &v);
    return v.lease_until;
}

/* Fills why (len bytes) with why the view v does not serve at boot-clock time now an id made
 * at made_ts (Unix ms; -1 = none made) and returns true; false when it serves. */
static bool sf_fence_why(sf_fence *f, const sf_fence_view *v, int64_t now, int64_t made_ts,
                         char *why, size_t len)
{
    if (v->worker == NULL) {
        snprintf(why, len, "no worker id is held");
    } else if (!v->serving) {
        pthread_mutex_lock(&f->lock);
        snprintf(why, len, "%s", f->reason != NULL ? f->reason : "not serving");
        pthread_mutex_unlock(&f->lock);
    } else if (v->lease_until != 0 && now >= v->lease_until) {
        snprintf(why, len, "the ZooKeeper lease expired %" PRId64 " ms ago: the session may "
                 "have expired and another node may hold our worker id; waiting for the "
                 "lease to be renewed", now - v->lease_until);
    } else if (v->reserved_until != 0 && made_ts > v->reserved_until) {
        snprintf(why, len, "the clock is past the timestamps reserved in ZooKeeper (up to %"
                 PRId64 "): another node may take our worker id from there; waiting for the "
                 "next renewal to reserve more", v->reserved_until);
    } else {
        return false;
    }
    return true;
}

bool sf_fence_refusal(sf_fence *f, char *why, size_t len)
{
    sf_fence_view v;
    sf_fence_read(f, &v);
    return sf_fence_why(f, &v, sf_clocks_boot_ms(),
                        v.reserved_until != 0 ? sf_clock_now_ms() : -1, why, len);
}

/* How long a backward clock step may be waited out: never past the lease. Reads the boot
 * clock only for a worker that waits at all. */
static int64_t sf_fence_wait_budget_ms(const sf_fence_view *v)
{
    if (v->lease_until == 0 || sf_worker_max_clock_backward_wait_ms(v->worker) == 0)
        return INT64_MAX;
    int64_t left = v->lease_until - sf_clocks_boot_ms();
    return left > 0 ? left : 0;
}

int sf_fence_next_ids(sf_fence *f, int64_t *ids, size_t count, char *why, size_t len,
                      sf_error *err)
{
    sf_fence_view before, after;
    sf_fence_read(f, &before);
    if (__builtin_expect(before.worker == NULL || !before.serving, 0)) {
        sf_fence_why(f, &before, 0, -1, why, len);
        return SF_FENCE_CLOSED;
    }
    int rc = sf_worker_next_ids_wait_max(before.worker, ids, count,
                                         sf_fence_wait_budget_ms(&before), err);
    if (rc != SF_OK)
        return rc;
    int64_t made_ts = (ids[count - 1] >> SF_TIMESTAMP_SHIFT) + sf_worker_epoch(before.worker);
    sf_fence_read(f, &after);
    int64_t now = after.lease_until != 0 ? sf_clocks_boot_ms() : 0;
    bool same = after.epoch == before.epoch && after.worker == before.worker;
    if (__builtin_expect(same && after.serving &&
                         (after.lease_until == 0 || now < after.lease_until) &&
                         (after.reserved_until == 0 || made_ts <= after.reserved_until), 1))
        return SF_OK;
    if (!same || !sf_fence_why(f, &after, now, made_ts, why, len))
        snprintf(why, len, "fenced while the id was being made: the worker id may have "
                 "changed hands; retry");
    return SF_FENCE_DISCARDED;
}
