/* registry_slots.c -- how many of the 32 worker ids under worker_id_path are taken, for the
 * operators' figures: a children watch on the path, armed when an id is claimed and again
 * by every change ZooKeeper reports, so the count costs one read per change of the fleet
 * and nothing per id. Part of the registry (registry.c says how the parts fit). */
#include "registry_internal.h"

#include <stdio.h>

#include "common/zkpath.h"

static void sf_reg_slots_watcher(zhandle_t *zh, int type, int state, const char *path,
                                 void *ctx);

/* Completion of the children read: counts the children named as worker ids. */
static void sf_reg_slots_done(int rc, const struct String_vector *kids, const void *data)
{
    sf_registry *r = (sf_registry *)data;
    if (rc != ZOK || kids == NULL)
        return; /* the count stays as last seen; the next claim reads it again */
    int taken = 0;
    for (int i = 0; i < kids->count; i++) {
        int64_t id;
        if (sf_zkpath_parse_worker_id(kids->data[i], &id))
            taken++;
    }
    atomic_store_explicit(&r->slots_taken, taken, memory_order_relaxed);
}

/* Reads the children of worker_id_path on zh and leaves a watch on them. Only queues the
 * request: safe with r->mu held and from the client's own callbacks. */
static void sf_reg_slots_read(sf_registry *r, zhandle_t *zh)
{
    int rc = zoo_awget_children(zh, r->worker_id_path, sf_reg_slots_watcher, r,
                                sf_reg_slots_done, r);
    if (rc != ZOK && rc != ZINVALIDSTATE && rc != ZCLOSING)
        sf_reg_log(r, "warning", "cannot count the worker ids taken under %s: %s",
                   r->worker_id_path, zerror(rc));
}

/* The watch fires once per change: read again, which sets the next one. Session events
 * need nothing: the client keeps the watch over a reconnection, and a new session's claim
 * sets a new one. */
static void sf_reg_slots_watcher(zhandle_t *zh, int type, int state, const char *path,
                                 void *ctx)
{
    (void)state;
    (void)path;
    sf_registry *r = ctx;
    if (type == ZOO_CHILD_EVENT && !atomic_load(&r->slots_off))
        sf_reg_slots_read(r, zh);
}

void sf_reg_slots_watch(sf_registry *r)
{
    if (r->zh != NULL)
        sf_reg_slots_read(r, r->zh);
}

int sf_registry_worker_ids_taken(sf_registry *r)
{
    return atomic_load_explicit(&r->slots_taken, memory_order_relaxed);
}

void sf_registry_worker_id_path(sf_registry *r, char *out, size_t outlen)
{
    pthread_mutex_lock(&r->mu);
    snprintf(out, outlen, "%s", r->worker_id_path);
    pthread_mutex_unlock(&r->mu);
}
