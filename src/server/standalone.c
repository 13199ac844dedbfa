/* standalone.c -- a fence the process publishes to itself, as a source of ids (standalone.h).
 * The fence does the work; this adds what a health check asks of a source without a
 * registry: since when the state holds, and "starting" or "stopping" while closed. */
#include "standalone.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zk/fence.h"

/* A fence's reasons fit the handler's buffer whole. */
_Static_assert(SF_ID_SOURCE_REASON_MAX >= SF_FENCE_REASON_MAX,
               "SF_ID_SOURCE_REASON_MAX below SF_FENCE_REASON_MAX");

struct sf_standalone {
    sf_fence *fence;
    sf_id_source source;      /* the handler's view of this, set once */
    _Atomic int64_t since_ms; /* Unix ms of the last publish or close */
};

static const sf_id_source_ops sf_standalone_ops;

sf_standalone *sf_standalone_new(void)
{
    sf_standalone *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->fence = sf_fence_new();
    if (s->fence == NULL) {
        free(s);
        return NULL;
    }
    atomic_init(&s->since_ms, sf_clock_now_ms());
    s->source = (sf_id_source){.ops = &sf_standalone_ops, .ctx = s};
    return s;
}

sf_standalone *sf_standalone_new_serving(sf_worker *w)
{
    sf_standalone *s = sf_standalone_new();
    if (s != NULL)
        sf_standalone_publish(s, w, true, 0, 0, NULL);
    return s;
}

void sf_standalone_free(sf_standalone *s)
{
    if (s == NULL)
        return;
    sf_fence_free(s->fence);
    free(s);
}

void sf_standalone_publish(sf_standalone *s, sf_worker *w, bool serving,
                           int64_t lease_until_boot_ms, int64_t reserved_until_ms,
                           const char *reason)
{
    sf_fence_publish(s->fence, w, serving, lease_until_boot_ms, reserved_until_ms, reason);
    atomic_store_explicit(&s->since_ms, sf_clock_now_ms(), memory_order_relaxed);
}

void sf_standalone_renew(sf_standalone *s, int64_t lease_until_boot_ms, int64_t reserved_until_ms)
{
    sf_fence_renew(s->fence, lease_until_boot_ms, reserved_until_ms);
}

/* A refusal of the fence (closed, or ids made then fenced) or the generator's clock error. */
static sf_ids_outcome sf_standalone_next_ids(void *ctx, int64_t *ids, size_t count, char *why,
                                             size_t len, size_t *discarded)
{
    sf_standalone *s = ctx;
    sf_error e;
    int rc = sf_fence_next_ids(s->fence, ids, count, why, len, &e);
    if (rc == SF_OK)
        return SF_IDS_OK;
    *discarded = rc == SF_FENCE_DISCARDED ? count : 0;
    if (rc == SF_FENCE_CLOSED || rc == SF_FENCE_DISCARDED)
        return SF_IDS_REFUSED;
    snprintf(why, len, "%s", e.message);
    return SF_IDS_CLOCK;
}

static void sf_standalone_ids(void *ctx, int64_t *datacenter_id, int64_t *worker_id)
{
    sf_standalone *s = ctx;
    sf_worker *w = sf_fence_worker(s->fence);
    *datacenter_id = w != NULL ? sf_worker_datacenter_id(w) : -1;
    *worker_id = w != NULL ? sf_worker_worker_id(w) : -1;
}

static bool sf_standalone_refusal(void *ctx, char *why, size_t len)
{
    sf_standalone *s = ctx;
    return sf_fence_refusal(s->fence, why, len);
}

/* No session: closed before the first worker was published is "starting", after it (closed
 * to stop) "stopping". */
static bool sf_standalone_health(void *ctx, sfz_health *out)
{
    sf_standalone *s = ctx;
    char why[8];
    memset(out, 0, sizeof *out);
    out->since_ms = atomic_load_explicit(&s->since_ms, memory_order_relaxed);
    if (sf_fence_refusal(s->fence, why, sizeof why))
        out->reason = sf_fence_worker(s->fence) != NULL ? SFZ_REASON_STOPPING : SFZ_REASON_STARTING;
    return false;
}

static int64_t sf_standalone_stats(void *ctx, sf_worker_stats *out, char *path, size_t len)
{
    sf_standalone *s = ctx;
    sf_worker *w = sf_fence_worker(s->fence);
    memset(out, 0, sizeof *out);
    if (w != NULL)
        sf_worker_get_stats(w, out);
    if (len > 0)
        path[0] = '\0';
    return -1;
}

static void sf_standalone_close(void *ctx, const char *reason)
{
    sf_standalone *s = ctx;
    sf_fence_close(s->fence, reason);
    atomic_store_explicit(&s->since_ms, sf_clock_now_ms(), memory_order_relaxed);
}

const sf_id_source *sf_standalone_source(sf_standalone *s)
{
    return &s->source;
}

static const sf_id_source_ops sf_standalone_ops = {
    .next_ids = sf_standalone_next_ids,
    .ids = sf_standalone_ids,
    .refusal = sf_standalone_refusal,
    .health = sf_standalone_health,
    .stats = sf_standalone_stats,
    .close = sf_standalone_close,
};
