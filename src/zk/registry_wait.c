/* registry_wait.c -- the waits every part of the registry uses, all on the registry's one
 * condition variable, so that a stop (or any change of state) ends them at once. It calls no
 * other part.
 * Part of the registry (registry.c says how the parts fit); knows nothing of sockets. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include "registry_internal.h"

#include <time.h>

#include "common/clocks.h"

/* An absolute CLOCK_MONOTONIC deadline ms from now, for pthread_cond_timedwait. */
static struct timespec sf_reg_deadline_in(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (ms < 0)
        ms = 0;
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Waits on the condition variable for at most ms (lock held). */
void sf_reg_wait_locked(sf_registry *r, int64_t ms)
{
    struct timespec until = sf_reg_deadline_in(ms);
    pthread_cond_timedwait(&r->cv, &r->mu, &until);
}

/* Sleeps ms unless stopped first (lock not held). False when stopped. */
bool sf_reg_sleep(sf_registry *r, int64_t ms)
{
    int64_t end = sf_clocks_boot_ms() + ms;
    pthread_mutex_lock(&r->mu);
    for (int64_t left = ms; !r->stop && left > 0; left = end - sf_clocks_boot_ms())
        sf_reg_wait_locked(r, left);
    bool stopped = r->stop;
    pthread_mutex_unlock(&r->mu);
    return !stopped;
}

/* True once cancelled or closing. */
bool sf_reg_stopped(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    return stop;
}

/* The peers module's view of cancellation. */
bool sf_reg_cancelled(void *ctx)
{
    return sf_reg_stopped(ctx);
}
