/* prefetch.c -- the prefetch buffer: a ring of ids under one lock, filled by a fetcher
 * thread that sleeps while the buffer is more than half full or nobody asks. Checks the
 * age of every id it hands out against the local clock, so no id older than the limit
 * leaves it whatever the fetcher did. A take never waits: a caller that finds it empty asks
 * the nodes itself, so a failed refill never becomes a caller's error. */
#define _POSIX_C_SOURCE 200809L
#include "prefetch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clocks.h"
#include "common/threads.h"
#include "lib/snowflake.h"

struct sfc_prefetch {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the fetcher: ids are wanted, or stop */
    int64_t *ring;
    int capacity, head, count;
    int batch;
    int64_t max_age_ms, epoch_ms;
    sfc_fetch_fn fetch;
    void *ctx;
    bool demand;      /* ids were taken since the last fill */
    bool stopping;
    uint64_t handed, stale, misses;
    pthread_t thread;
};

static void *sfc_prefetch_run(void *arg)
{
    sfc_prefetch *pf = arg;
    int64_t *got = malloc((size_t)pf->batch * sizeof *got);
    pthread_mutex_lock(&pf->lock);
    while (!pf->stopping) {
        if (got == NULL || pf->count > pf->capacity / 2 || !pf->demand) {
            pthread_cond_wait(&pf->wake, &pf->lock);
            continue;
        }
        int n = pf->capacity - pf->count < pf->batch ? pf->capacity - pf->count : pf->batch;
        pf->demand = false;
        pthread_mutex_unlock(&pf->lock);
        sfc_error err = {0};
        int rc = pf->fetch(pf->ctx, got, n, &err);
        pthread_mutex_lock(&pf->lock);
        if (rc == SFC_OK) {
            for (int i = 0; i < n; i++)
                pf->ring[(pf->head + pf->count + i) % pf->capacity] = got[i];
            pf->count += n;
        } else {
            pf->demand = true; /* still wanted: the next try follows a short pause */
        }
        if (rc != SFC_OK && !pf->stopping) {
            struct timespec pause = sf_clocks_mono_timespec(sf_clocks_mono_ms() + 20);
            pthread_cond_timedwait(&pf->wake, &pf->lock, &pause);
        }
    }
    pthread_mutex_unlock(&pf->lock);
    free(got);
    return NULL;
}

sfc_prefetch *sfc_prefetch_start(int capacity, int batch, int max_age_ms, int64_t epoch_ms,
                                 sfc_fetch_fn fetch, void *ctx, char *why, size_t whylen)
{
    sfc_prefetch *pf = calloc(1, sizeof *pf);
    if (pf == NULL || (pf->ring = malloc((size_t)capacity * sizeof *pf->ring)) == NULL) {
        snprintf(why, whylen, "out of memory for a prefetch buffer of %d ids", capacity);
        free(pf);
        return NULL;
    }
    pf->capacity = capacity;
    pf->batch = batch;
    pf->max_age_ms = max_age_ms;
    pf->epoch_ms = epoch_ms;
    pf->fetch = fetch;
    pf->ctx = ctx;
    pthread_mutex_init(&pf->lock, NULL);
    int rc = sf_clocks_cond_init(&pf->wake);
    if (rc == 0)
        rc = sf_threads_start(&pf->thread, NULL, sfc_prefetch_run, pf);
    if (rc != 0) {
        snprintf(why, whylen, "cannot set up the prefetch thread: %s", strerror(rc));
        pthread_cond_destroy(&pf->wake);
        pthread_mutex_destroy(&pf->lock);
        free(pf->ring);
        free(pf);
        return NULL;
    }
    return pf;
}

/* Pops the next id that is young enough, dropping older ones. Lock held. */
static bool sfc_prefetch_pop(sfc_prefetch *pf, int64_t *id)
{
    int64_t now = sf_clock_now_ms();
    while (pf->count > 0) {
        int64_t candidate = pf->ring[pf->head];
        pf->head = (pf->head + 1) % pf->capacity;
        pf->count--;
        int64_t made = (candidate >> SF_TIMESTAMP_SHIFT) + pf->epoch_ms;
        if (now - made > pf->max_age_ms) {
            pf->stale++;
            continue;
        }
        *id = candidate;
        return true;
    }
    return false;
}

bool sfc_prefetch_take(sfc_prefetch *pf, int64_t *id)
{
    pthread_mutex_lock(&pf->lock);
    bool got = sfc_prefetch_pop(pf, id);
    if (got)
        pf->handed++;
    else
        pf->misses++;
    pf->demand = true;
    if (pf->count <= pf->capacity / 2)
        pthread_cond_signal(&pf->wake);
    pthread_mutex_unlock(&pf->lock);
    return got;
}

void sfc_prefetch_counts(sfc_prefetch *pf, uint64_t *handed, uint64_t *stale, uint64_t *misses)
{
    pthread_mutex_lock(&pf->lock);
    *handed = pf->handed;
    *stale = pf->stale;
    *misses = pf->misses;
    pthread_mutex_unlock(&pf->lock);
}

void sfc_prefetch_stop(sfc_prefetch *pf)
{
    pthread_mutex_lock(&pf->lock);
    pf->stopping = true;
    pthread_cond_broadcast(&pf->wake);
    pthread_mutex_unlock(&pf->lock);
    pthread_join(pf->thread, NULL);
    pthread_cond_destroy(&pf->wake);
    pthread_mutex_destroy(&pf->lock);
    free(pf->ring);
    free(pf);
}
