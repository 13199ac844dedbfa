/* registry_queue.c -- the automatic claim: claimants queue with ZooKeeper's lock recipe under
 * lock_path, and each one's place in the queue picks the id it tries, so that claimants run
 * in parallel while ids are plentiful and take their turns when they are scarce.
 *
 * A claimant creates its ephemeral sequential lock node, then reads the queue (the lock
 * nodes ahead of its own: `ahead`) and the free ids (ascending, those whose floor is too far
 * ahead left out), both in one round trip. With more free ids than claimants ahead, it
 * takes the free id at its place, free[ahead], at once: the claimants ahead take the lower ones, so claimants that
 * came together spread over the ids instead of all trying the lowest, and a lone claimant
 * takes the lowest free id, as the lock recipe always did. The worker node is created and
 * the lock node deleted in one transaction (multi), so a claimant is always either queued or
 * holding, never both: a view read while others finish leaves at worst an id unused for a
 * moment, and two claimants that still meet at an id are told apart by the create itself
 * (ZNODEEXISTS: the loser reads the queue and the ids again). With fewer free ids than
 * claimants ahead (scarce), it waits for the lock node right before its own to go, as the
 * lock recipe does, so ids go to claimants in the order they came; or, for a caller with
 * other paths to try, gives up at once (SF_REGISTRY_SCARCE). With no free id at all it gives
 * up at once (SF_REGISTRY_ALL_TAKEN). Either way ZooKeeper's ephemeral create remains the
 * claim: one holder per worker id whatever the queue says.
 * Part of the registry (registry.c says how the parts fit); knows nothing of sockets. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include "registry_internal.h"
#include "registry_batch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"
#include "common/zkpath.h"
#include "lib/snowflake.h"

/* What a claimant sees of the queue and the ids. */
typedef struct sf_reg_view {
    int ahead;                        /* lock nodes ahead of ours */
    char pred[SF_REG_PATH_MAX];       /* the one right before ours; "" when none */
    int64_t free[SF_REGISTRY_MAX_WORKERS]; /* the free ids, ascending, skipped ones left out */
    int nfree;
} sf_reg_view;

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

/* Our place in the queue: a new lock node, or one our session left (its delete failed),
 * which is our place already (a new node behind it would wait for our own session to end).
 * mine is filled once the node exists, so the caller can delete it on any failure; stamp is
 * the new node's (not valid for one found). */
static int sf_reg_enqueue(sf_registry *r, char *mine, size_t minelen, sf_reg_stamp *stamp,
                          char *err, size_t errlen)
{
    *stamp = (sf_reg_stamp){.valid = false};
    pthread_mutex_lock(&r->mu);
    bool orphan = r->orphan_lock[0] != '\0';
    pthread_mutex_unlock(&r->mu);
    orphan |= r->lock_unsure_session != 0 && r->lock_unsure_session == sf_reg_session_id(r);
    if (orphan && sf_reg_find_own_lock(r, mine, minelen)) {
        sf_reg_log(r, "info", "queueing with our lock node %s, left by an earlier claim", mine);
        pthread_mutex_lock(&r->mu);
        if (strcmp(r->orphan_lock, mine) == 0)
            r->orphan_lock[0] = '\0';
        pthread_mutex_unlock(&r->mu);
        r->lock_unsure_session = 0;
        return 0;
    }
    char prefix[SF_REG_PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/lock-", r->lock_path);
    struct Stat made;
    int64_t sent = sf_clock_now_ms();
    int rc = zoo_create2(r->zh, prefix, NULL, -1, sf_reg_acl(r), ZOO_EPHEMERAL_SEQUENTIAL, mine,
                         (int)minelen, &made);
    if (rc == ZOK)
        *stamp = (sf_reg_stamp){.valid = true, .mtime = made.mtime, .sent = sent,
                                .answered = sf_clock_now_ms()};
    if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
        if (sf_reg_find_own_lock(r, mine, minelen))
            rc = ZOK;
        else /* made perhaps, and not found yet: the next claim of this session looks again */
            r->lock_unsure_session = sf_reg_session_id(r);
    }
    if (rc != ZOK) {
        mine[0] = '\0';
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot create a lock node under %s: %s", r->lock_path,
                            zerror(rc));
        return -1;
    }
    return 0;
}

/* Reads the queue, then the ids: in that order, so that a claimant finishing in between
 * (its lock node gone and its worker node there, at once) counts as ahead of us and its id
 * as taken (an id left unused for a moment), never as neither (an id two of us try). */
static int sf_reg_read_view(sf_registry *r, const char *my_name, const bool *skip,
                            sf_reg_view *v, char *err, size_t errlen)
{
    sf_reg_read locks, workers; /* asked together: the server answers them in this order */
    sf_reg_batch batch;
    sf_reg_batch_init(&batch);
    sf_reg_batch_children(&batch, r->zh, r->lock_path, &locks);
    sf_reg_batch_children(&batch, r->zh, r->worker_id_path, &workers);
    sf_reg_batch_wait(&batch);
    sf_reg_batch_free(&batch);
    int result = -1;
    if (locks.rc != ZOK || workers.rc != ZOK) {
        bool lock_failed = locks.rc != ZOK;
        int rc = lock_failed ? locks.rc : workers.rc;
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot list %s: %s",
                            lock_failed ? r->lock_path : r->worker_id_path, zerror(rc));
        goto done;
    }
    struct String_vector *kids = &locks.kids;
    qsort(kids->data, (size_t)kids->count, sizeof kids->data[0], sf_reg_cmp_lock);
    int idx = -1;
    for (int i = 0; i < kids->count && idx < 0; i++)
        if (strcmp(kids->data[i], my_name) == 0)
            idx = i;
    v->ahead = idx;
    v->pred[0] = '\0';
    if (idx > 0)
        snprintf(v->pred, sizeof v->pred, "%s/%s", r->lock_path, kids->data[idx - 1]);
    if (idx < 0) {
        sf_reg_zk_error(r, ZSESSIONEXPIRED);
        sf_registry_set_err(err, errlen, "our lock node %s/%s disappeared (session lost)",
                            r->lock_path, my_name);
        goto done;
    }
    bool taken[SF_REGISTRY_MAX_WORKERS] = {false};
    for (int i = 0; i < workers.kids.count; i++) {
        int64_t k;
        if (sf_zkpath_parse_worker_id(workers.kids.data[i], &k))
            taken[k] = true;
    }
    v->nfree = 0;
    for (int64_t k = 0; k < SF_REGISTRY_MAX_WORKERS; k++)
        if (!taken[k] && !skip[k])
            v->free[v->nfree++] = k;
    result = 0;
done:
    sf_reg_read_free(&locks);
    sf_reg_read_free(&workers);
    return result;
}

/* Waits until pred (the lock node before ours) is gone, or anything else happened that a
 * watch reports. Cancellable. */
static int sf_reg_wait_turn(sf_registry *r, const char *pred, const char *mine, char *err,
                            size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    uint64_t seen = r->events;
    pthread_mutex_unlock(&r->mu);
    int rc = zoo_wexists(r->zh, pred, sf_reg_session_watcher, r, NULL);
    if (rc == ZOK) { /* removed before the handle closes, if it has not fired */
        pthread_mutex_lock(&r->mu);
        snprintf(r->watched_lock, sizeof r->watched_lock, "%s", pred);
        pthread_mutex_unlock(&r->mu);
    }
    if (rc == ZNONODE)
        return 0;
    if (rc != ZOK) {
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot watch %s: %s", pred, zerror(rc));
        return -1;
    }
    pthread_mutex_lock(&r->mu);
    while (r->events == seen && !r->stop && !r->expired)
        sf_reg_wait_locked(r, 500);
    bool stop = r->stop, expired = r->expired;
    pthread_mutex_unlock(&r->mu);
    if (stop || expired) {
        if (expired)
            sf_reg_zk_error(r, ZSESSIONEXPIRED);
        sf_registry_set_err(err, errlen, "%s while waiting for the lock %s (behind %s)",
                            stop ? "stopped" : "session expired", mine, pred);
        return -1;
    }
    return 0;
}

/* Creates worker_id_path/id and deletes our lock node in one transaction. 1 when we hold the
 * id (our lock node gone with it, or left for the caller to delete when the transaction
 * could create but not delete: mine is then kept), 0 when another holds it, -1 on a
 * ZooKeeper error. */
static int sf_reg_take_id(sf_registry *r, int64_t id, char *mine, char *err, size_t errlen)
{
    char path[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, path, sizeof path);
    const char *data = r->host_port ? r->host_port : "";
    zoo_op_t ops[2];
    zoo_op_result_t results[2];
    zoo_create_op_init(&ops[0], path, data, (int)strlen(data), sf_reg_acl(r), ZOO_EPHEMERAL,
                       NULL, 0);
    zoo_delete_op_init(&ops[1], mine, -1);
    memset(results, 0, sizeof results);
    sf_reg_batch batch;
    sf_reg_read sent;
    sf_reg_batch_init(&batch);
    sf_reg_batch_multi(&batch, r->zh, 2, ops, results, &sent);
    sf_reg_batch_wait(&batch);
    sf_reg_batch_free(&batch);
    int rc = sent.rc;
    if (rc == ZOK) {
        r->worker_version = 0;
        mine[0] = '\0';
        return 1;
    }
    if (rc == ZNODEEXISTS && results[0].err == ZNODEEXISTS)
        return 0;
    if (results[0].err == ZOK && results[1].err != ZOK && rc != ZCONNECTIONLOSS &&
        rc != ZOPERATIONTIMEOUT) {
        /* Our lock node cannot be deleted (no permission, or gone): claim without it; the
         * caller deletes it (or leaves it to the thread) as after any claim. */
        char holder[SF_REG_DATA_MAX];
        return sf_reg_try_create_worker(r, id, holder, sizeof holder, NULL, err, errlen);
    }
    if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
        /* Applied or not, whole: the worker node tells which. Unknown still (that read failed
         * too, or the transaction is yet to land), the next claim settles it first. */
        struct Stat st;
        if (zoo_exists(r->zh, path, 0, &st) == ZOK && st.ephemeralOwner == sf_reg_session_id(r)) {
            r->worker_version = st.version;
            mine[0] = '\0';
            return 1;
        }
        sf_reg_note_unsure(r, path);
    }
    sf_reg_zk_error(r, rc);
    sf_registry_set_err(err, errlen, "cannot create %s: %s%s", path, zerror(rc),
                        rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
    return -1;
}

/* Deletes our lock node. Failing that a few times (a lost connection), leaves it to the
 * registry's thread, which tries again while the session lives: until it goes, claimants
 * behind it that find ids scarce wait (our own next claim queues with it instead). */
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
    sf_reg_log(r, "warning", "cannot delete the lock node %s: %s; other automatic claims that "
               "find ids scarce wait behind it until it is gone (trying again every %d ms)",
               mine, zerror(rc), SF_REG_UNLOCK_RETRY_MS);
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

int sf_reg_claim_auto(sf_registry *r, bool wait_when_scarce, int64_t *id, char *err,
                      size_t errlen)
{
    char mine[SF_REG_PATH_MAX] = "";
    bool skip[SF_REGISTRY_MAX_WORKERS] = {false};
    int skipped = 0, result;
    sf_reg_stamp stamp;
    if (sf_reg_enqueue(r, mine, sizeof mine, &stamp, err, errlen) != 0)
        return -1;
    /* Refused here, a host whose clock is off leaves the queue before it takes an id. */
    if (sf_reg_check_stamp(r, &stamp, mine, err, errlen) != 0) {
        sf_reg_unlock(r, mine);
        return -1;
    }
    const char *my_name = strrchr(mine, '/') + 1;
    for (;;) {
        sf_reg_view v;
        if (sf_reg_read_view(r, my_name, skip, &v, err, errlen) != 0) {
            result = -1;
            break;
        }
        if (v.nfree == 0) {
            result = sf_reg_all_taken(r, skipped, wait_when_scarce, err, errlen);
            break;
        }
        if (v.ahead >= v.nfree) { /* scarce: the ids go to the claimants ahead first */
            if (!wait_when_scarce) {
                sf_registry_set_err(err, errlen, "%d worker ids under %s are free, fewer than "
                                    "the %d claimants queued ahead of us", v.nfree,
                                    r->worker_id_path, v.ahead);
                result = SF_REGISTRY_SCARCE;
                break;
            }
            if (sf_reg_wait_turn(r, v.pred, mine, err, errlen) != 0) {
                result = -1;
                break;
            }
            continue;
        }
        int64_t k = v.free[v.ahead], floor;
        if (sf_reg_floor_too_far(r, k, &floor)) {
            sf_reg_log(r, "warning", "skipping worker id %" PRId64 ": its floor (%s/%" PRId64
                       " = %" PRId64 ") is %" PRId64 " ms ahead of our clock, further than a "
                       "new holder waits; a holder's clock ran that far ahead. See it with "
                       "`snowflake-zk floor %" PRId64 "`; reset it with `snowflake-zk "
                       "reset-floor %" PRId64 "` once no id up to it can have been handed out",
                       k, r->state_path, k, floor, floor - sf_clock_now_ms(), k, k);
            skip[k] = true;
            skipped++;
            continue;
        }
        int got = sf_reg_take_id(r, k, mine, err, errlen);
        if (got < 0) {
            result = -1;
            break;
        }
        if (got == 1) {
            *id = k;
            result = 0;
            break;
        }
    }
    if (mine[0])
        sf_reg_unlock(r, mine);
    return result;
}
