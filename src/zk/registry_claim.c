/* registry_claim.c -- the two claim recipes: a static id (the original's ephemeral node,
 * retried while another holds it) and the lowest free id, taken in turn behind ZooKeeper's
 * lock queue; and the checks made before every claim (the peers, a standalone ensemble).
 * Part of the registry (registry.c says how the parts fit); knows nothing of sockets. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include "registry_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clocks.h"
#include "lib/snowflake.h"
#include "registry_peers.h"
#include "common/zkpath.h"

/* Tries once to create worker_id_path/id holding our host:port. Returns 1 when we hold it
 * (also when an ambiguous earlier attempt already made it ours), 0 when another session
 * holds it (holder filled), -1 on a ZooKeeper error (err filled). */
static int sf_reg_try_create_worker(sf_registry *r, int64_t id, char *holder, size_t holderlen,
                                    char *err, size_t errlen)
{
    char path[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, path, sizeof path);
    const char *data = r->host_port ? r->host_port : "";
    int rc = zoo_create(r->zh, path, data, (int)strlen(data), sf_reg_acl(r), ZOO_EPHEMERAL, NULL, 0);
    if (rc == ZOK) {
        r->worker_version = 0;
        return 1;
    }
    if (rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT) {
        sf_registry_set_err(err, errlen, "cannot create %s: %s%s", path, zerror(rc),
                            rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
        return -1;
    }
    /* Exists, or unknown after a lost connection: whose is it? */
    struct Stat st;
    int grc = sf_reg_get_string(r, path, holder, holderlen, &st);
    if (grc == ZOK && st.ephemeralOwner == sf_reg_session_id(r)) {
        r->worker_version = st.version;
        return 1;
    }
    if (grc == ZOK)
        return 0;
    if (grc == ZNONODE && rc == ZNODEEXISTS) {
        snprintf(holder, holderlen, "(a node that has just gone)");
        return 0;
    }
    sf_registry_set_err(err, errlen, "cannot create %s: %s", path, zerror(rc));
    return -1;
}

/* Claims the configured id, retrying while another session holds it (perhaps our own
 * previous one, not yet expired). The waits end at once when cancelled. */
static int sf_reg_claim_static(sf_registry *r, int64_t *id, char *err, size_t errlen, int retries)
{
    char holder[SF_REG_DATA_MAX] = "";
    for (int attempt = 0; attempt <= retries; attempt++) {
        if (attempt > 0) {
            sf_reg_log(r, "warning", "worker id %" PRId64 " is held by %s; retry %d of %d in %d ms",
                       r->wanted_id, holder, attempt, retries, r->o.claim_retry_wait_ms);
            if (!sf_reg_sleep(r, r->o.claim_retry_wait_ms)) {
                sf_registry_set_err(err, errlen, "stopped while waiting for worker id %" PRId64
                                    " (held by %s)", r->wanted_id, holder);
                return -1;
            }
        }
        int got = sf_reg_try_create_worker(r, r->wanted_id, holder, sizeof holder, err, errlen);
        if (got < 0)
            return -1;
        if (got == 1) {
            *id = r->wanted_id;
            return 0;
        }
    }
    sf_registry_set_err(err, errlen,
                        "worker id %" PRId64 " is already held by %s (%s/%" PRId64 "); "
                        "stop that node, release a stale one (snowflake-zk release %" PRId64
                        "), or configure another worker_id", r->wanted_id, holder,
                        r->worker_id_path, r->wanted_id, r->wanted_id);
    return -1;
}

/* Orders lock nodes by their sequence suffix (the part after the last '-'). */
static int sf_reg_cmp_lock(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    const char *sx = strrchr(x, '-'), *sy = strrchr(y, '-');
    return strcmp(sx ? sx : x, sy ? sy : y);
}

/* Finds the lock node our session created when the create's answer was lost. */
static bool sf_reg_find_own_lock(sf_registry *r, char *out, size_t outlen)
{
    struct String_vector kids = {0, NULL};
    bool found = false;
    if (zoo_get_children(r->zh, r->lock_path, 0, &kids) != ZOK)
        return false;
    for (int i = 0; i < kids.count && !found; i++) {
        char path[SF_REG_PATH_MAX];
        struct Stat st;
        snprintf(path, sizeof path, "%s/%s", r->lock_path, kids.data[i]);
        if (zoo_exists(r->zh, path, 0, &st) == ZOK && st.ephemeralOwner == sf_reg_session_id(r)) {
            snprintf(out, outlen, "%s", path);
            found = true;
        }
    }
    deallocate_String_vector(&kids);
    return found;
}

/* Takes the lock: our sequential node, then wait only for our predecessor to go. mine is
 * filled as soon as our node exists, so the caller can delete it on any failure. */
static int sf_reg_take_lock(sf_registry *r, char *mine, size_t minelen, char *err, size_t errlen)
{
    char prefix[SF_REG_PATH_MAX];
    int rc = ZOK;
    if (sf_reg_find_own_lock(r, mine, minelen)) {
        /* Left by an earlier claim whose delete failed: it is our place in the queue. A new
         * node behind it would wait for our own session to end. */
        sf_reg_log(r, "info", "queueing with our lock node %s, left by an earlier claim", mine);
        pthread_mutex_lock(&r->mu);
        if (strcmp(r->orphan_lock, mine) == 0)
            r->orphan_lock[0] = '\0';
        pthread_mutex_unlock(&r->mu);
    } else {
        snprintf(prefix, sizeof prefix, "%s/lock-", r->lock_path);
        rc = zoo_create(r->zh, prefix, NULL, -1, sf_reg_acl(r), ZOO_EPHEMERAL_SEQUENTIAL, mine,
                        (int)minelen);
        if ((rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) &&
            sf_reg_find_own_lock(r, mine, minelen))
            rc = ZOK;
    }
    if (rc != ZOK) {
        mine[0] = '\0';
        sf_registry_set_err(err, errlen, "cannot create a lock node under %s: %s", r->lock_path,
                            zerror(rc));
        return -1;
    }
    const char *my_name = strrchr(mine, '/') + 1;
    for (;;) {
        struct String_vector kids = {0, NULL};
        rc = zoo_get_children(r->zh, r->lock_path, 0, &kids);
        if (rc != ZOK) {
            sf_registry_set_err(err, errlen, "cannot list %s: %s", r->lock_path, zerror(rc));
            return -1;
        }
        qsort(kids.data, (size_t)kids.count, sizeof kids.data[0], sf_reg_cmp_lock);
        int idx = -1;
        for (int i = 0; i < kids.count; i++)
            if (strcmp(kids.data[i], my_name) == 0)
                idx = i;
        if (idx < 0) {
            deallocate_String_vector(&kids);
            sf_registry_set_err(err, errlen, "our lock node %s disappeared (session lost)", mine);
            return -1;
        }
        if (idx == 0) {
            deallocate_String_vector(&kids);
            return 0;
        }
        char pred[SF_REG_PATH_MAX];
        snprintf(pred, sizeof pred, "%s/%s", r->lock_path, kids.data[idx - 1]);
        deallocate_String_vector(&kids);
        pthread_mutex_lock(&r->mu);
        uint64_t seen = r->events;
        pthread_mutex_unlock(&r->mu);
        rc = zoo_wexists(r->zh, pred, sf_reg_session_watcher, r, NULL);
        if (rc == ZOK) { /* removed before the handle closes, if it has not fired */
            pthread_mutex_lock(&r->mu);
            snprintf(r->watched_lock, sizeof r->watched_lock, "%s", pred);
            pthread_mutex_unlock(&r->mu);
        }
        if (rc == ZNONODE)
            continue;
        if (rc != ZOK) {
            sf_registry_set_err(err, errlen, "cannot watch %s: %s", pred, zerror(rc));
            return -1;
        }
        pthread_mutex_lock(&r->mu);
        while (r->events == seen && !r->stop && !r->expired)
            sf_reg_wait_locked(r, 500);
        bool stop = r->stop, expired = r->expired;
        pthread_mutex_unlock(&r->mu);
        if (stop || expired) {
            sf_registry_set_err(err, errlen, "%s while waiting for the lock %s (behind %s)",
                                stop ? "stopped" : "session expired", mine, pred);
            return -1;
        }
    }
}

/* Lists every holder "id=host:port" into out, for the message when all ids are taken. */
static void sf_reg_list_holders(sf_registry *r, char *out, size_t outlen)
{
    size_t used = 0;
    out[0] = '\0';
    for (int64_t id = 0; id < SF_REGISTRY_MAX_WORKERS && used < outlen; id++) {
        char path[SF_REG_PATH_MAX], data[SF_REG_DATA_MAX];
        sf_reg_worker_path(r, id, path, sizeof path);
        if (sf_reg_get_string(r, path, data, sizeof data, NULL) != ZOK)
            continue;
        int n = snprintf(out + used, outlen - used, "%s%" PRId64 "=%s", used ? ", " : "", id, data);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* Under the lock, claims the lowest free id 0..31; SF_REGISTRY_ALL_TAKEN when none can be. */
static int sf_reg_claim_lowest_free(sf_registry *r, int64_t *id, char *err, size_t errlen)
{
    struct String_vector kids = {0, NULL};
    bool taken[SF_REGISTRY_MAX_WORKERS] = {false};
    int rc = zoo_get_children(r->zh, r->worker_id_path, 0, &kids);
    if (rc != ZOK) {
        sf_registry_set_err(err, errlen, "cannot list %s: %s", r->worker_id_path, zerror(rc));
        return -1;
    }
    for (int i = 0; i < kids.count; i++) {
        int64_t k;
        if (sf_zkpath_parse_worker_id(kids.data[i], &k))
            taken[k] = true;
    }
    deallocate_String_vector(&kids);
    int skipped = 0;
    for (int64_t k = 0; k < SF_REGISTRY_MAX_WORKERS; k++) {
        char holder[SF_REG_DATA_MAX];
        int64_t floor;
        if (taken[k])
            continue;
        if (sf_reg_floor_too_far(r, k, &floor)) {
            sf_reg_log(r, "warning", "skipping worker id %" PRId64 ": its floor (%s/%" PRId64
                       " = %" PRId64 ") is %" PRId64 " ms ahead of our clock, further than a "
                       "new holder waits; a holder's clock ran that far ahead. See it with "
                       "`snowflake-zk floor %" PRId64 "`; reset it with `snowflake-zk "
                       "reset-floor %" PRId64 "` once no id up to it can have been handed out",
                       k, r->state_path, k, floor, floor - sf_clock_now_ms(), k, k);
            skipped++;
            continue;
        }
        int got = sf_reg_try_create_worker(r, k, holder, sizeof holder, err, errlen);
        if (got < 0)
            return -1;
        if (got == 1) {
            *id = k;
            return 0;
        }
    }
    char holders[SF_REGISTRY_ERR_MAX - 512];
    sf_reg_list_holders(r, holders, sizeof holders);
    if (skipped > 0)
        sf_registry_set_err(err, errlen,
                            "no worker id under %s can be claimed: %d free ones have floors too "
                            "far ahead of our clock (see the warnings above; `snowflake-zk list` "
                            "shows every floor), the others are taken: %s", r->worker_id_path,
                            skipped, holders);
    else
        sf_registry_set_err(err, errlen, "all %d worker ids under %s are taken: %s",
                            SF_REGISTRY_MAX_WORKERS, r->worker_id_path, holders);
    return SF_REGISTRY_ALL_TAKEN;
}

/* Deletes our lock node. Failing that a few times (a lost connection), leaves it to the
 * registry's thread, which tries again while the session lives: until it goes, every other
 * automatic claim waits behind it (our own next claim queues with it instead). */
static void sf_reg_unlock(sf_registry *r, const char *mine)
{
    int rc = ZOK;
    for (int tries = 0; tries < SF_REG_UNLOCK_TRIES; tries++) {
        if (tries > 0 && !sf_reg_sleep(r, 50))
            break;
        rc = zoo_delete(r->zh, mine, -1);
        if (rc == ZOK || rc == ZNONODE)
            return;
    }
    sf_reg_log(r, "warning", "cannot delete the lock node %s: %s; other automatic claims wait "
               "behind it until it is gone (trying again every %d ms)", mine, zerror(rc),
               SF_REG_UNLOCK_RETRY_MS);
    pthread_mutex_lock(&r->mu);
    snprintf(r->orphan_lock, sizeof r->orphan_lock, "%s", mine);
    r->orphan_retry_at = sf_clocks_boot_ms() + SF_REG_UNLOCK_RETRY_MS;
    pthread_mutex_unlock(&r->mu);
}

/* The registry's thread: one more try at a lock node left by sf_reg_unlock. */
void sf_reg_retry_unlock(sf_registry *r)
{
    char path[SF_REG_PATH_MAX];
    pthread_mutex_lock(&r->mu);
    snprintf(path, sizeof path, "%s", r->orphan_lock);
    pthread_mutex_unlock(&r->mu);
    int rc = zoo_delete(r->zh, path, -1);
    pthread_mutex_lock(&r->mu);
    if (strcmp(r->orphan_lock, path) == 0) {
        if (rc == ZOK || rc == ZNONODE)
            r->orphan_lock[0] = '\0';
        else
            r->orphan_retry_at = sf_clocks_boot_ms() + SF_REG_UNLOCK_RETRY_MS;
    }
    pthread_mutex_unlock(&r->mu);
    if (rc == ZOK || rc == ZNONODE)
        sf_reg_log(r, "info", "deleted the lock node %s", path);
}

/* Automatic id: lock recipe, lowest free id, unlock. */
static int sf_reg_claim_auto(sf_registry *r, int64_t *id, char *err, size_t errlen)
{
    char mine[SF_REG_PATH_MAX] = "";
    int result = sf_reg_take_lock(r, mine, sizeof mine, err, errlen);
    if (result == 0)
        result = sf_reg_claim_lowest_free(r, id, err, errlen);
    if (mine[0])
        sf_reg_unlock(r, mine);
    return result;
}

/* One claim of an id (static: a single try unless retries > 0; auto: the lock recipe),
 * followed by the restart-safety wait. A node created for a claim that then fails is
 * deleted, so a failed or cancelled claim leaves nothing behind. 0, -1, or
 * SF_REGISTRY_ALL_TAKEN. */
int sf_reg_claim_once(sf_registry *r, int retries, int64_t *id, int64_t *floor_ms,
                      char *err, size_t errlen)
{
    int rc = r->wanted_id >= 0 ? sf_reg_claim_static(r, id, err, errlen, retries)
                               : sf_reg_claim_auto(r, id, err, errlen);
    if (rc != 0)
        return rc == SF_REGISTRY_ALL_TAKEN ? rc : -1;
    pthread_mutex_lock(&r->mu);
    r->held_id = *id;
    sf_reg_step(r, SF_REG_EV_CLAIMED, NULL);
    pthread_mutex_unlock(&r->mu);
    if (sf_reg_wait_for_floor(r, *id, false, floor_ms, err, errlen) != 0) {
        sf_reg_release_worker(r, *id);
        pthread_mutex_lock(&r->mu);
        r->held_id = -1;
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    pthread_mutex_lock(&r->mu);
    r->floor_ms = *floor_ms;
    r->base_floor = *floor_ms;
    r->reserved_until = 0;
    r->own_value = -1;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* The original's sanity checks against the peers (registry_peers.c), made before every
 * claim: a clock that drifted since start-up is seen before it takes an id. */
int sf_reg_check_peers(sf_registry *r, char *err, size_t errlen)
{
    if (r->o.skip_sanity_checks)
        return 0;
    sf_registry_peers peers = {
        .zh = r->zh, .worker_id_path = r->worker_id_path, .host_port = r->host_port,
        .datacenter_id = r->o.datacenter_id,
        .skip_unreachable_peers = r->o.skip_unreachable_peers,
        .max_clock_skew_ms = r->o.max_clock_skew_ms, .query_peer = r->o.query_peer,
        .peer_ctx = r->o.peer_ctx, .log = r->o.log, .log_ctx = r->o.log_ctx,
        .cancelled = sf_reg_cancelled, .cancel_ctx = r};
    return sf_registry_peers_check(&peers, err, errlen);
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
    sf_registry_peers peers = {.zh = zh, .worker_id_path = r->worker_id_path,
                               .host_port = r->host_port};
    int n = sf_registry_peers_list(&peers, out, max, err, errlen);
    pthread_mutex_lock(&r->mu);
    r->zh_users--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* A single standalone server has no quorum to keep a write once it is lost, nor a second
 * copy of the floors: warn once. An ensemble lists its members in /zookeeper/config. */
void sf_reg_warn_standalone(sf_registry *r)
{
    char cfg[SF_REG_DATA_MAX * 4];
    int rc = sf_reg_get_string(r, "/zookeeper/config", cfg, sizeof cfg, NULL);
    if (rc == ZOK && strstr(cfg, "server.") == NULL)
        sf_reg_log(r, "warning", "ZooKeeper at %s is a single standalone server, not an "
                   "ensemble: while it is down every node refuses ids, and if its data is lost, "
                   "so are the floors that keep ids from repeating; run three or five servers",
                   r->hosts);
}
