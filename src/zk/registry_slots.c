/* registry_slots.c -- how many of the 32 worker ids under worker_id_path are taken, for the
 * operators' figures: a children watch on the path, armed when an id is claimed and again
 * by every change ZooKeeper reports, so the count costs one read per change of the fleet
 * and nothing per id. Part of the registry (registry.c says how the parts fit). */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include "registry_internal.h"

#include "common/clocks.h"
#include "common/zkpath.h"

static void sf_reg_slots_watcher(zhandle_t *zh, int type, int state, const char *path,
                                 void *ctx);

/* Completion of the children read: counts the children named as worker ids. */
static void sf_reg_slots_done(int rc, const struct String_vector *kids, const void *data)
{
    sf_registry *r = (sf_registry *)data;
    pthread_mutex_lock(&r->mu);
    r->slots_reading--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
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
 * request. r->mu held, and zh is r->zh: a handle being replaced or closed is NULL there
 * before its close begins, so no request is queued on a closing handle (the client
 * library refuses it then, as a "marshalling error", and leaks it). */
static void sf_reg_slots_read(sf_registry *r, zhandle_t *zh)
{
    int rc = zoo_awget_children(zh, r->worker_id_path, sf_reg_slots_watcher, r,
                                sf_reg_slots_done, r);
    r->slots_reading += rc == ZOK;
    if (rc != ZOK && rc != ZINVALIDSTATE && rc != ZCLOSING)
        sf_reg_log(r, "warning", "cannot count the worker ids taken under %s: %s",
                   r->worker_id_path, zerror(rc));
}

/* The watch fires once per change: read again, which sets the next one, unless the handle
 * is no longer the registry's (closed, or replaced by a new session's). Session events need
 * nothing: the client keeps the watch over a reconnection, and a new session's claim sets
 * a new one. */
static void sf_reg_slots_watcher(zhandle_t *zh, int type, int state, const char *path,
                                 void *ctx)
{
    (void)state;
    (void)path;
    sf_registry *r = ctx;
    if (type != ZOO_CHILD_EVENT)
        return;
    pthread_mutex_lock(&r->mu);
    if (zh == r->zh)
        sf_reg_slots_read(r, zh);
    pthread_mutex_unlock(&r->mu);
}

void sf_reg_slots_watch(sf_registry *r)
{
    if (r->zh != NULL)
        sf_reg_slots_read(r, r->zh);
}

/* Completion of a request to drop watches: one fewer to wait for. */
static void sf_reg_unwatched(int rc, const void *data)
{
    (void)rc; /* none left to drop (ZNOWATCHER) is as good as dropped */
    sf_registry *r = (sf_registry *)data;
    pthread_mutex_lock(&r->mu);
    r->unwatching--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Asks the server to drop our watches of path, if the client knows of one (lock held). */
static void sf_reg_unwatch_path(sf_registry *r, zhandle_t *zh, const char *path,
                                ZooWatcherType type)
{
    /* The client declares the completion a void_completion_t *, but stores and calls what it
     * is given as the void_completion_t itself. */
    int rc = zoo_aremove_all_watches(zh, path, type, 0, (void_completion_t *)sf_reg_unwatched, r);
    r->unwatching += rc == ZOK;
    if (rc != ZOK && rc != ZNOWATCHER && rc != ZNONODE)
        sf_reg_log(r, "warning", "cannot drop our watch of %s before closing the session: %s",
                   path, zerror(rc));
}

/* Waits (lock held) while count is above 0 and the connection is up, until until. */
static void sf_reg_wait_zero(sf_registry *r, const int *count, int64_t until)
{
    int64_t now;
    while (*count > 0 && r->connected && (now = sf_clocks_boot_ms()) < until)
        sf_reg_wait_locked(r, until - now < 100 ? until - now : 100);
}

void sf_reg_unwatch(sf_registry *r, zhandle_t *zh, int64_t until)
{
    pthread_mutex_lock(&r->mu);
    /* A read in flight sets its watch when answered: wait for it (no new one starts, r->zh
     * is NULL), or the server would keep a watch the client does not know of yet. */
    sf_reg_wait_zero(r, &r->slots_reading, until);
    if (r->connected && !r->expired) { /* else no server sends us anything */
        sf_reg_unwatch_path(r, zh, r->worker_id_path, ZWATCHTYPE_CHILD);
        if (r->watched_lock[0] != '\0')
            sf_reg_unwatch_path(r, zh, r->watched_lock, ZWATCHTYPE_ANY);
        sf_reg_wait_zero(r, &r->unwatching, until);
    }
    pthread_mutex_unlock(&r->mu);
}

int sf_registry_worker_ids_taken(sf_registry *r)
{
    return atomic_load_explicit(&r->slots_taken, memory_order_relaxed);
}

const char *sf_registry_worker_id_path(sf_registry *r)
{
    return r->worker_id_path;
}
