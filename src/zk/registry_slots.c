/* registry_slots.c -- the holders under worker_id_path as last seen: a children watch on the
 * path, armed when an id is claimed and again after every change ZooKeeper reports, keeps
 * which of the 32 ids are taken (the operators' count) and each holder's node data, read
 * once per new holder (the peers the live clock check asks). The watch is armed again by
 * the registry's thread, at most once a second: the 32 holders of a path starting together
 * read it a few times each, not once per holder that came. So both cost a read per change
 * of the fleet (or per second, while it changes) and nothing per id or in steady state.
 * Part of the registry (registry.h says where each part lives).
 *
 * A holder's node data never changes while its node lives (renewals write the same data),
 * so it is read again only when its node may have been replaced: when the listing shows the
 * id gone or new, or when the path's child version moved by more than the names that came
 * and went (a node deleted and created again between two listings moves it by two and
 * changes no name). A read that a change overtook is not kept (the id's generation). */
#define _GNU_SOURCE
#include "registry_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"
#include "common/zkpath.h"
#include "registry_peers.h"

static void sf_reg_slots_watcher(zhandle_t *zh, int type, int state, const char *path,
                                 void *ctx);

/* Bits set in x. */
static int sf_reg_bits(uint32_t x)
{
    return __builtin_popcount(x);
}

/* Completion of the children read: the ids taken, and which holders' data to read again. */
static void sf_reg_slots_done(int rc, const struct String_vector *kids, const struct Stat *stat,
                              const void *data)
{
    sf_registry *r = (sf_registry *)data;
    pthread_mutex_lock(&r->mu);
    r->slots_reading--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (rc != ZOK || kids == NULL || stat == NULL)
        return; /* the view stays as last seen; the next claim reads it again */
    uint32_t present = 0;
    for (int i = 0; i < kids->count; i++) {
        int64_t id;
        if (sf_zkpath_parse_worker_id(kids->data[i], &id))
            present |= 1u << id;
    }
    sf_reg_holders *v = &r->holders;
    pthread_mutex_lock(&v->mu);
    uint32_t changed = present ^ v->present;
    if (!v->known || (uint32_t)(stat->cversion - v->cversion) != (uint32_t)sf_reg_bits(changed))
        changed = ~0u; /* something came and went unseen: every holder's data may be stale */
    for (int id = 0; id < SF_REGISTRY_MAX_WORKERS; id++) {
        if (!(changed & (1u << id)))
            continue;
        v->gen[id]++;
        free(v->data[id]);
        v->data[id] = NULL;
    }
    v->present = present;
    v->cversion = stat->cversion;
    v->known = true;
    pthread_mutex_unlock(&v->mu);
    atomic_store_explicit(&r->slots_taken, sf_reg_bits(present), memory_order_relaxed);
}

/* Reads the children of worker_id_path on zh and leaves a watch on them. Only queues the
 * request. r->mu held, and zh is r->zh: a handle being replaced or closed is NULL there
 * before its close begins, so no request is queued on a closing handle (the client
 * library refuses it then, as a "marshalling error", and leaks it). */
static void sf_reg_slots_read(sf_registry *r, zhandle_t *zh)
{
    int rc = zoo_awget_children2(zh, r->worker_id_path, sf_reg_slots_watcher, r,
                                 sf_reg_slots_done, r);
    r->slots_reading += rc == ZOK;
    if (rc != ZOK && rc != ZINVALIDSTATE && rc != ZCLOSING)
        sf_reg_log(r, "warning", "cannot count the worker ids taken under %s: %s",
                   r->worker_id_path, zerror(rc));
}

/* The watch fires once per change: the registry's thread reads again, which sets the next
 * one (sf_reg_slots_refresh). Session events need nothing: the client keeps the watch over
 * a reconnection, and a new session's claim sets a new one. */
static void sf_reg_slots_watcher(zhandle_t *zh, int type, int state, const char *path,
                                 void *ctx)
{
    (void)zh;
    (void)state;
    (void)path;
    sf_registry *r = ctx;
    if (type == ZOO_CHILD_EVENT)
        atomic_store(&r->slots_dirty, true);
}

void sf_reg_slots_watch(sf_registry *r)
{
    if (r->zh != NULL) {
        r->slots_read_at = sf_clocks_boot_ms();
        sf_reg_slots_read(r, r->zh);
    }
}

int64_t sf_reg_slots_refresh(sf_registry *r)
{
    if (!atomic_load(&r->slots_dirty))
        return 0;
    int64_t due = r->slots_read_at + SF_REG_SLOTS_EVERY_MS;
    if (sf_clocks_boot_ms() < due)
        return due;
    if (r->zh != NULL && r->connected && !atomic_load(&r->slots_off)) {
        atomic_store(&r->slots_dirty, false);
        sf_reg_slots_watch(r);
    }
    return 0;
}

void sf_reg_slots_init(sf_registry *r)
{
    memset(&r->holders, 0, sizeof r->holders);
    pthread_mutex_init(&r->holders.mu, NULL);
    atomic_init(&r->slots_taken, -1);
    atomic_init(&r->slots_off, false);
    atomic_init(&r->slots_dirty, false);
}

void sf_reg_slots_free(sf_registry *r)
{
    for (int id = 0; id < SF_REGISTRY_MAX_WORKERS; id++)
        free(r->holders.data[id]);
    pthread_mutex_destroy(&r->holders.mu);
}

/* Copies holder id's node data into out, reading it through zh when not known yet (kept
 * unless a change overtook the read). False when the holder is gone or cannot be read. */
static bool sf_reg_holder_data(sf_registry *r, zhandle_t *zh, int id, char *out, size_t outlen)
{
    sf_reg_holders *v = &r->holders;
    pthread_mutex_lock(&v->mu);
    bool present = v->present & (1u << id), known = v->data[id] != NULL;
    uint32_t gen = v->gen[id];
    if (known)
        snprintf(out, outlen, "%s", v->data[id]);
    pthread_mutex_unlock(&v->mu);
    if (!present || known)
        return present;
    char path[SF_REG_PATH_MAX];
    int len = (int)outlen - 1;
    snprintf(path, sizeof path, "%s/%d", r->worker_id_path, id);
    if (zoo_get(zh, path, 0, out, &len, NULL) != ZOK)
        return false;
    out[len > 0 ? len : 0] = '\0';
    pthread_mutex_lock(&v->mu);
    if (v->gen[id] == gen && v->data[id] == NULL)
        v->data[id] = strdup(out); /* not kept when out of memory: read again next time */
    pthread_mutex_unlock(&v->mu);
    return true;
}

int sf_registry_list_peers(sf_registry *r, char (*out)[SF_REGISTRY_PEER_MAX], int max,
                           char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    zhandle_t *zh = r->connected && !r->stop ? r->zh : NULL;
    r->zh_users += zh != NULL;
    pthread_mutex_unlock(&r->mu);
    if (zh == NULL) {
        sf_registry_set_err(err, errlen, "not connected to ZooKeeper");
        return -1;
    }
    pthread_mutex_lock(&r->holders.mu);
    bool known = r->holders.known;
    pthread_mutex_unlock(&r->holders.mu);
    int n = 0;
    if (!known) { /* before the watch's first listing: list now */
        sf_registry_peers peers = {.zh = zh, .worker_id_path = r->worker_id_path,
                                   .host_port = r->host_port};
        n = sf_registry_peers_list(&peers, out, max, err, errlen);
    } else {
        for (int id = 0; id < SF_REGISTRY_MAX_WORKERS && n < max; id++) {
            int64_t dc;
            if (sf_reg_holder_data(r, zh, id, out[n], SF_REGISTRY_PEER_MAX) &&
                (r->host_port == NULL || strcmp(out[n], r->host_port) != 0) &&
                !sf_zkpath_parse_embedded(out[n], &dc))
                n++; /* serving Thrift, not us */
        }
    }
    pthread_mutex_lock(&r->mu);
    r->zh_users--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return n;
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

void sf_registry_worker_id_path(sf_registry *r, char *out, size_t outlen)
{
    pthread_mutex_lock(&r->mu); /* as configured: under the chroot, without it */
    snprintf(out, outlen, "%s", r->worker_id_path + strlen(r->chroot));
    pthread_mutex_unlock(&r->mu);
}
