/* registry_peers.c -- the other holders of worker ids: the original's start-up sanity checks
 * against them and their list (registry_peers.h: only what the checks are handed, nothing of
 * the registry's state), then the watch that keeps them as last seen while we hold an id.
 * Part of the registry (registry.h says where each part lives); knows nothing of sockets:
 * peers are queried through the caller's callback. */
#define _GNU_SOURCE
#include "registry_internal.h"
#include "registry_peers.h"
#include "zkbatch.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"
#include "common/zkpath.h"
#include "lib/snowflake.h"

#define SF_REG_PEERS_PATH_MAX 1024
#define SF_REG_PEERS_DATA_MAX 512
/* A peer answering worker id -1 is between creating its node and using the id: ask again. */
#define SF_REG_PEERS_STARTING_TRIES 20
#define SF_REG_PEERS_STARTING_WAIT_MS 50

/* A line to the registry's log (the caller's, or standard error). */
#define sf_reg_peers_log(p, level, ...) \
    sf_registry_log_to((p)->log, (p)->log_ctx, level, __VA_ARGS__)

/* True when start-up is being cancelled: the checks stop at once. */
static bool sf_reg_peers_cancelled(const sf_registry_peers *p)
{
    return p->cancelled && p->cancelled(p->cancel_ctx);
}

/* Reads a node's data as a string. Returns a ZooKeeper code. */
static int sf_reg_peers_get_string(const sf_registry_peers *p, const char *path, char *out,
                               size_t outlen)
{
    int len = (int)outlen - 1;
    int rc = zoo_get(p->zh, path, 0, out, &len, NULL);
    out[rc == ZOK && len > 0 ? len : 0] = '\0';
    return rc;
}

/* True when worker_id_path/other exists and holds host_port: the peer at
 * host_port really holds that other id. */
static bool sf_reg_peers_holds_other_node(const sf_registry_peers *p, const char *host_port,
                                      int64_t other)
{
    char path[SF_REG_PEERS_PATH_MAX], data[SF_REG_PEERS_DATA_MAX];
    if (other < 0 || other > SF_MAX_WORKER_ID)
        return false;
    snprintf(path, sizeof path, "%s/%" PRId64, p->worker_id_path, other);
    return sf_reg_peers_get_string(p, path, data, sizeof data) == ZOK && strcmp(data, host_port) == 0;
}

/* Asks one peer, asking again for a while when it reports that it is still starting. */
static int sf_reg_peers_query(const sf_registry_peers *p, const char *peer, int64_t *pw, int64_t *pd,
                          int64_t *pt, char *perr, size_t perrlen)
{
    int qrc = p->query_peer(p->peer_ctx, peer, pw, pd, pt, perr, perrlen);
    for (int wait = 0; qrc == 0 && *pw == -1 && wait < SF_REG_PEERS_STARTING_TRIES; wait++) {
        if (sf_reg_peers_cancelled(p))
            break;
        sf_clocks_sleep_ms(SF_REG_PEERS_STARTING_WAIT_MS);
        qrc = p->query_peer(p->peer_ctx, peer, pw, pd, pt, perr, perrlen);
    }
    return qrc;
}

/* Told of each holder under worker_id_path but us: its id, node path and data. A non-zero
 * return ends the walk with that result. */
typedef int (*sf_reg_peers_visit_fn)(const sf_registry_peers *p, void *ctx, int64_t id,
                                     const char *path, const char *data, char *err,
                                     size_t errlen);

/* The one walk over the holders: lists worker_id_path and reads every holder's node data
 * (all at once: one round trip, not one per holder), leaving out names that are no worker id
 * (warned of when warn), nodes gone meanwhile and our own, and tells fn of each in id order.
 * Stops when cancelled. fn's non-zero result, 0, or -1 with err filled when the path cannot
 * be listed. */
static int sf_reg_peers_visit(const sf_registry_peers *p, bool warn, sf_reg_peers_visit_fn fn,
                              void *ctx, char *err, size_t errlen)
{
    struct String_vector kids = {0, NULL};
    int rc = zoo_get_children(p->zh, p->worker_id_path, 0, &kids);
    if (rc != ZOK) {
        sf_registry_set_err(err, errlen, "cannot list %s: %s", p->worker_id_path, zerror(rc));
        return SF_REGISTRY_NOT_YET; /* ZooKeeper's failure, which can pass */
    }
    bool present[SF_MAX_WORKER_ID + 1] = {false};
    for (int i = 0; i < kids.count; i++) {
        int64_t id;
        if (sf_zkpath_parse_worker_id(kids.data[i], &id))
            present[id] = true;
        else if (warn)
            sf_reg_peers_log(p, "warning", "ignoring %s/%s: not a worker id (canonical "
                             "decimal 0..31)", p->worker_id_path, kids.data[i]);
    }
    deallocate_String_vector(&kids);
    /* One read per holder, indexed by id: an id nobody holds is no request. */
    sf_zkbatch_req *reads = calloc(SF_MAX_WORKER_ID + 1, sizeof *reads);
    char (*paths)[SF_REG_PEERS_PATH_MAX] = calloc(SF_MAX_WORKER_ID + 1, sizeof *paths);
    if (reads == NULL || paths == NULL) {
        free(reads);
        free(paths);
        sf_registry_set_err(err, errlen, "out of memory reading the holders under %s",
                            p->worker_id_path);
        return -1;
    }
    for (int id = 0; id <= SF_MAX_WORKER_ID; id++) {
        if (!present[id])
            continue;
        snprintf(paths[id], sizeof paths[id], "%s/%d", p->worker_id_path, id);
        reads[id] = (sf_zkbatch_req){.kind = SF_ZKBATCH_GET, .path = paths[id]};
    }
    sf_zkbatch_send(p->zh, reads, SF_MAX_WORKER_ID + 1);
    int result = 0;
    for (int id = 0; id <= SF_MAX_WORKER_ID && result == 0; id++) {
        if (sf_reg_peers_cancelled(p)) {
            sf_registry_set_err(err, errlen, "stopped while checking the peers under %s",
                                p->worker_id_path);
            result = -1;
        } else if (present[id] && reads[id].rc == ZOK && /* not gone meanwhile, not ours */
                   !(p->host_port && strcmp(reads[id].data, p->host_port) == 0)) {
            result = fn(p, ctx, id, paths[id], reads[id].data, err, errlen);
        }
    }
    free(reads);
    free(paths);
    return result;
}

/* What the start-up check gathers over the walk. */
typedef struct sf_reg_peers_tally {
    int64_t sum, count, unqueried;
} sf_reg_peers_tally;

/* The start-up check of one holder: an embedded one by its node's datacenter, one that
 * serves Thrift by asking it. */
static int sf_reg_peers_check_one(const sf_registry_peers *p, void *ctx, int64_t id,
                                  const char *path, const char *peer, char *err, size_t errlen)
{
    sf_reg_peers_tally *t = ctx;
    int64_t pw = -1, pd = -1, pt = 0;
    char perr[SF_REGISTRY_ERR_MAX];
    if (sf_zkpath_parse_embedded(peer, &pd)) {
        /* An embedded holder serves no Thrift: its node says its datacenter. */
        if (pd >= 0 && pd != p->datacenter_id) {
            sf_registry_set_err(err, errlen,
                    "datacenter id insanity: %s (%s) has datacenter id %" PRId64 ", ours is %"
                    PRId64 " (each datacenter needs its own worker_id_path)",
                    path, peer, pd, p->datacenter_id);
            return -1;
        }
        return 0;
    }
    if (!p->query_peer) {
        t->unqueried++;
        return 0;
    }
    sf_reg_peers_log(p, "info", "checking peer %s (worker id %" PRId64 ")", peer, id);
    int qrc = sf_reg_peers_query(p, peer, &pw, &pd, &pt, perr, sizeof perr);
    if (qrc == SF_REGISTRY_PEER_REFUSED) {
        /* Its port is closed: a node closes it while it does not serve (starting, or
         * fenced), and a process that is gone has none. Either way it hands out no
         * ids, and ZooKeeper, not this check, keeps its worker id from us. */
        sf_reg_peers_log(p, "warning", "peer %s (worker id %" PRId64 ") refuses "
                         "connections: not serving (starting, fenced or gone), skipped: %s",
                         peer, id, perr);
        return 0;
    }
    if (qrc != 0) {
        if (p->skip_unreachable_peers) {
            sf_reg_peers_log(p, "warning", "peer %s (worker id %" PRId64 ") is unreachable, "
                             "skipped: %s", peer, id, perr);
            return 0;
        }
        sf_registry_set_err(err, errlen,
                "peer %s holding worker id %" PRId64 " under %s is unreachable: %s; start it, "
                "release its stale node (snowflake-zk release %" PRId64 "), or set "
                "skip_unreachable_peers = true",
                peer, id, p->worker_id_path, perr, id);
        return SF_REGISTRY_NOT_YET;
    }
    if (pw != id && sf_reg_peers_holds_other_node(p, peer, pw)) {
        /* A process restarted at the same address took another id while
         * the node of its previous session waits to expire. */
        if (p->skip_unreachable_peers) {
            sf_reg_peers_log(p, "warning", "%s is stale, skipped: %s now holds worker id %" PRId64
                             " (a restarted node; the old session has not expired yet)",
                             path, peer, pw);
            return 0;
        }
        sf_registry_set_err(err, errlen,
                "%s is stale: %s now holds worker id %" PRId64 " under its own node; it "
                "disappears when its session expires, or release it (snowflake-zk release %"
                PRId64 "), or set skip_unreachable_peers = true",
                path, peer, pw, id);
        return SF_REGISTRY_NOT_YET;
    }
    if (pw != id) {
        sf_registry_set_err(err, errlen,
                "worker id insanity: %s holds %s in ZooKeeper but says its worker id is %" PRId64,
                peer, path, pw);
        return -1;
    }
    if (pd != p->datacenter_id) {
        sf_registry_set_err(err, errlen,
                "datacenter id insanity: %s under %s has datacenter id %" PRId64
                ", ours is %" PRId64 " (each datacenter needs its own worker_id_path)",
                peer, p->worker_id_path, pd, p->datacenter_id);
        return -1;
    }
    t->sum += pt;
    t->count++;
    return 0;
}

int sf_registry_peers_check(const sf_registry_peers *p, char *err, size_t errlen)
{
    sf_reg_peers_tally t = {0, 0, 0};
    int result = sf_reg_peers_visit(p, true, sf_reg_peers_check_one, &t, err, errlen);
    if (t.unqueried > 0)
        sf_reg_peers_log(p, "info", "%" PRId64 " peers under %s not queried: an embedded "
                         "holder checks only what the peers' nodes say", t.unqueried,
                         p->worker_id_path);
    if (result == 0 && t.count > 0) {
        int64_t mean = t.sum / t.count, now = sf_clock_now_ms();
        int64_t diff = now > mean ? now - mean : mean - now;
        if (diff > p->max_clock_skew_ms) {
            sf_registry_set_err(err, errlen,
                    "timestamp sanity check failed: the mean of %" PRId64 " peers' clocks is %" PRId64
                    " ms, ours is %" PRId64 " ms, %" PRId64 " ms apart (at most %" PRId64 " allowed)",
                    t.count, mean, now, diff, p->max_clock_skew_ms);
            result = SF_REGISTRY_NOT_YET;
        }
    }
    return result;
}

/* Where the list of peers goes. */
typedef struct sf_reg_peers_out {
    char (*out)[SF_REGISTRY_PEER_MAX];
    int max, n;
} sf_reg_peers_out;

static int sf_reg_peers_add(const sf_registry_peers *p, void *ctx, int64_t id, const char *path,
                            const char *data, char *err, size_t errlen)
{
    (void)p;
    (void)id;
    (void)path;
    (void)err;
    (void)errlen;
    sf_reg_peers_out *o = ctx;
    int64_t dc;
    if (!sf_zkpath_parse_embedded(data, &dc) && o->n < o->max) /* serving Thrift */
        snprintf(o->out[o->n++], SF_REGISTRY_PEER_MAX, "%s", data);
    return 0;
}

int sf_registry_peers_list(const sf_registry_peers *p, char (*out)[SF_REGISTRY_PEER_MAX],
                           int max, char *err, size_t errlen)
{
    sf_reg_peers_out o = {out, max, 0};
    return sf_reg_peers_visit(p, false, sf_reg_peers_add, &o, err, errlen) < 0 ? -1 : o.n;
}

/* ---- The holders under worker_id_path as last seen (the slots): a children watch on the
 * path, armed when an id is claimed and again after every change ZooKeeper reports, keeps
 * which of the 32 ids are taken (the operators' count) and each holder's node data, read
 * once per new holder (the peers the live clock check asks). The watch is armed again by
 * the registry's thread, at most once a second: the 32 holders of a path starting together
 * read it a few times each, not once per holder that came. So both cost a read per change
 * of the fleet (or per second, while it changes) and nothing per id or in steady state.
 *
 * A holder's node data never changes while its node lives (renewals write the same data),
 * so it is read again only when its node may have been replaced: when the listing shows the
 * id gone or new, or when the path's child version moved by more than the names that came
 * and went (a node deleted and created again between two listings moves it by two and
 * changes no name). A read that a change overtook is not kept (the id's generation). */

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
