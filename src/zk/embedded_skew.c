/* embedded_skew.c -- the live clock check (embedded_skew.h): every SFZ_SKEW_INTERVAL_MS, asks
 * up to SFZ_SKEW_SAMPLE peers (in turn, from the registry's list) for their clock, keeps the
 * offsets' histogram and the skew estimate, and says when it crosses the bound. Never on a
 * request's path: ids only see the fence the verdict holds shut. */
#define _POSIX_C_SOURCE 200809L
#include "embedded_skew.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clocks.h"
#include "common/registry_options.h"
#include "common/threads.h"

#define SFZ_SKEW_PEERS_MAX (SF_MAX_WORKER_ID + 1)
#define SFZ_SKEW_STOP_SLICE_MS 100 /* a stop is seen within this, between rounds */

struct sfz_skew_watch {
    sf_registry *registry;
    sfz_peer_fn query;
    void *peer_ctx;
    int64_t max_ms;
    sfz_skew_verdict_fn verdict;
    void *ctx;
    pthread_t thread;
    pthread_mutex_t lock; /* guards stop and figures */
    bool stop;
    sfz_skew figures;
    size_t next;          /* where in the peer list the next round starts */
    char peers[SFZ_SKEW_PEERS_MAX][SF_REGISTRY_PEER_MAX];
};

static const int64_t sfz_skew_bounds[SFZ_SKEW_BUCKETS] = SFZ_SKEW_BOUNDS_MS;

/* The histogram bucket of an offset. */
static size_t sfz_skew_bucket(int64_t offset_ms)
{
    size_t b = 0;
    while (b < SFZ_SKEW_BUCKETS && offset_ms > sfz_skew_bounds[b])
        b++;
    return b;
}

static int sfz_skew_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t sfz_skew_abs(int64_t v)
{
    return v < 0 ? -v : v;
}

/* The median of the n offsets in v (room for n + 1) with our own, 0, among them; of two
 * middle values the one nearer 0, so that a tie never condemns our clock. */
static int64_t sfz_skew_estimate(int64_t *v, size_t n)
{
    v[n++] = 0;
    qsort(v, n, sizeof *v, sfz_skew_cmp);
    if (n % 2 == 1)
        return v[n / 2];
    int64_t lo = v[n / 2 - 1], hi = v[n / 2];
    return sfz_skew_abs(lo) <= sfz_skew_abs(hi) ? lo : hi;
}

/* True once stopped. */
static bool sfz_skew_stopped(sfz_skew_watch *w)
{
    pthread_mutex_lock(&w->lock);
    bool stop = w->stop;
    pthread_mutex_unlock(&w->lock);
    return stop;
}

/* Asks one peer: true with *offset_ms our clock minus its, corrected by half the round trip
 * (measured on the monotonic clock, so a step of ours during the call does not count). */
static bool sfz_skew_ask(sfz_skew_watch *w, const char *peer, int64_t *offset_ms)
{
    int64_t worker, datacenter, peer_ms;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t mono0 = sf_clocks_mono_ms(), ours = sf_clock_now_ms();
    if (w->query(w->peer_ctx, peer, &worker, &datacenter, &peer_ms, err, sizeof err) != 0)
        return false;
    int64_t rtt = sf_clocks_mono_ms() - mono0;
    *offset_ms = ours + rtt / 2 - peer_ms;
    return true;
}

/* One round: the peers listed now, up to SFZ_SKEW_SAMPLE of them asked, the figures and the
 * verdict updated; the verdict told when it changed. */
static void sfz_skew_round(sfz_skew_watch *w)
{
    char err[SF_REGISTRY_ERR_MAX];
    int n = sf_registry_list_peers(w->registry, w->peers, SFZ_SKEW_PEERS_MAX, err, sizeof err);
    if (n < 0)
        return; /* not connected: the registry fences on its own */
    int64_t offsets[SFZ_SKEW_SAMPLE + 1];
    size_t answered = 0, asked = (size_t)n < SFZ_SKEW_SAMPLE ? (size_t)n : SFZ_SKEW_SAMPLE;
    uint64_t failed = 0;
    for (size_t i = 0; i < asked; i++) {
        if (sfz_skew_stopped(w))
            return;
        if (sfz_skew_ask(w, w->peers[(w->next + i) % (size_t)n], &offsets[answered]))
            answered++;
        else
            failed++;
    }
    w->next = n > 0 ? (w->next + asked) % (size_t)n : 0;
    pthread_mutex_lock(&w->lock);
    sfz_skew *f = &w->figures;
    bool was = f->fenced;
    f->failures += failed;
    f->peers = (int64_t)answered;
    for (size_t i = 0; i < answered; i++) {
        f->samples++;
        f->sum_ms += offsets[i];
        f->buckets[sfz_skew_bucket(offsets[i])]++;
    }
    if (answered > 0) {
        f->known = true;
        f->skew_ms = sfz_skew_estimate(offsets, answered);
        f->fenced = w->max_ms > 0 && sfz_skew_abs(f->skew_ms) > w->max_ms;
    } else {
        f->fenced = false; /* nothing to compare with, as at start-up */
    }
    bool now = f->fenced;
    int64_t skew = f->skew_ms;
    pthread_mutex_unlock(&w->lock);
    if (now == was)
        return;
    char why[SF_REGISTRY_ERR_MAX];
    snprintf(why, sizeof why, "our clock is %" PRId64 " ms %s the peers' (the median of %zu "
             "peers' clocks and ours), more than max_peer_skew_ms = %" PRId64 ": refusing ids "
             "until it is back within it", sfz_skew_abs(skew), skew > 0 ? "ahead of" : "behind",
             answered, w->max_ms);
    w->verdict(w->ctx, now, now ? why : NULL);
}

/* The thread: a round, then a wait, until stopped. The wait is slices of a relative sleep
 * on the monotonic clock, checking for a stop between them: no condition variable, whose
 * timed wait some clock-faking tools break. */
static void *sfz_skew_thread(void *arg)
{
    sfz_skew_watch *w = arg;
    while (!sfz_skew_stopped(w)) {
        sfz_skew_round(w);
        int64_t until = sf_clocks_mono_ms() + SFZ_SKEW_INTERVAL_MS, left;
        while ((left = until - sf_clocks_mono_ms()) > 0 && !sfz_skew_stopped(w)) {
            int64_t ms = left < SFZ_SKEW_STOP_SLICE_MS ? left : SFZ_SKEW_STOP_SLICE_MS;
            struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

sfz_skew_watch *sfz_skew_start(sf_registry *r, sfz_peer_fn query, void *peer_ctx,
                               int64_t max_ms, sfz_skew_verdict_fn verdict, void *ctx,
                               char *msg, size_t len)
{
    sfz_skew_watch *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(msg, len, "out of memory starting the live clock check");
        return NULL;
    }
    *w = (sfz_skew_watch){.registry = r, .query = query, .peer_ctx = peer_ctx,
                          .max_ms = max_ms, .verdict = verdict, .ctx = ctx};
    pthread_mutex_init(&w->lock, NULL);
    int rc = sf_threads_start(&w->thread, NULL, sfz_skew_thread, w);
    if (rc != 0) {
        snprintf(msg, len, "cannot start the live clock check's thread: %s", strerror(rc));
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
    }
    return w;
}

void sfz_skew_read(sfz_skew_watch *w, sfz_skew *out)
{
    pthread_mutex_lock(&w->lock);
    *out = w->figures;
    pthread_mutex_unlock(&w->lock);
}

void sfz_skew_stop(sfz_skew_watch *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void sfz_skew_forget(sfz_skew_watch *w)
{
    free(w);
}
