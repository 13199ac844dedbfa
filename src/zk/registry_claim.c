/* registry_claim.c -- the claim: a worker id taken under worker_id_path and the checks made
 * before it. Followed from sf_reg_claim_once: the worker node a claim may have made without
 * hearing so is settled first (one session never holds two ids); then a static id is tried
 * (the original's ephemeral node, again while another holds it) or an automatic one taken
 * through the queue (ZooKeeper's lock recipe under lock_path, each claimant's place picking
 * its id); the claim's first write is stamped by the ensemble's leader, which checks our
 * clock; then the floor recorded for the id is waited past (registry_lease.c). Before every
 * claim the path's epoch record is checked in with (below) and the original's peer checks are
 * made (registry_peers.c).
 * Part of the registry (registry.h says where each part lives); knows nothing of sockets.
 * It tells the state machine (registry.c: sf_reg_step) that an id was claimed, the state
 * machine's one loop; everything else it calls lies below it. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME, strndup */
#include "registry_internal.h"
#include "zkbatch.h"
#include "registry_peers.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"
#include "common/zkpath.h"
#include "lib/snowflake.h"

char *sf_reg_rooted(const sf_registry *r, const char *s, const char *path, const char *suffix)
{
    const char *root = r->chroot != NULL ? r->chroot : "";
    size_t n = strlen(root) + (s != NULL ? strlen(s) : strlen(path) + strlen(suffix)) + 1;
    char *out = malloc(n);
    if (out != NULL)
        snprintf(out, n, "%s%s%s", root, s != NULL ? s : path, s != NULL ? "" : suffix);
    return out;
}

/* The worker node a claim creates, and a create whose answer was lost. */
/* Notes a worker node whose create's outcome is unknown (its answer lost, or its delete
 * failed): before the next claim on the session, sf_reg_settle_unsure takes it as its own or
 * deletes it, so that one session never holds two worker ids. */
static void sf_reg_note_unsure(sf_registry *r, const char *path)
{
    snprintf(r->unsure_worker, sizeof r->unsure_worker, "%s", path);
    r->unsure_session = sf_reg_session_id(r);
}

static int sf_reg_try_create_worker(sf_registry *r, int64_t id, char *holder, size_t holderlen,
                             sf_reg_stamp *stamp, char *err, size_t errlen)
{
    char path[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, path, sizeof path);
    const char *data = r->host_port ? r->host_port : "";
    struct Stat made;
    sf_reg_stamp s = {.valid = false, .sent = sf_clock_now_ms()};
    int rc = zoo_create2(r->zh, path, data, (int)strlen(data), sf_reg_acl(r), ZOO_EPHEMERAL,
                         NULL, 0, &made);
    s.answered = sf_clock_now_ms();
    if (stamp)
        *stamp = (sf_reg_stamp){.valid = false};
    if (rc == ZOK) {
        r->worker_version = 0;
        if (stamp) {
            s.valid = true;
            s.mtime = made.mtime;
            *stamp = s;
        }
        return 1;
    }
    if (rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT) {
        sf_reg_zk_error(r, rc);
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
    if (rc != ZNODEEXISTS)
        sf_reg_note_unsure(r, path);
    sf_reg_zk_error(r, rc != ZNODEEXISTS ? rc : grc);
    sf_registry_set_err(err, errlen, "cannot create %s: %s", path, zerror(rc));
    return -1;
}

/* Settles a worker node noted by sf_reg_note_unsure before a claim: a create whose answer
 * was lost may have been applied, and the node is then our session's. 1 (*id set) when it
 * is ours and the id this claim may take (we hold it: nothing more to claim); 0 when there
 * is nothing of ours (gone, another's, or ours elsewhere and now deleted); -1 on ZooKeeper's
 * error (err filled), the claim to be tried again. */
static int sf_reg_settle_unsure(sf_registry *r, int64_t *id, char *err, size_t errlen)
{
    if (r->unsure_worker[0] == '\0')
        return 0;
    char path[SF_REG_PATH_MAX];
    snprintf(path, sizeof path, "%s", r->unsure_worker);
    int64_t session = sf_reg_session_id(r);
    struct Stat st;
    int rc = r->unsure_session == session ? zoo_exists(r->zh, path, 0, &st) : ZNONODE;
    if (rc == ZNONODE || (rc == ZOK && st.ephemeralOwner != session)) {
        r->unsure_worker[0] = '\0'; /* never made, or gone with its session */
        return 0;
    }
    if (rc != ZOK) {
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot read %s, which our lost create may have made: "
                            "%s", path, zerror(rc));
        return -1;
    }
    const char *slash = strrchr(path, '/');
    size_t dirlen = (size_t)(slash - path);
    int64_t k;
    bool here = strlen(r->worker_id_path) == dirlen &&
                strncmp(path, r->worker_id_path, dirlen) == 0 &&
                sf_zkpath_parse_worker_id(slash + 1, &k) && (r->wanted_id < 0 || k == r->wanted_id);
    if (here) {
        r->unsure_worker[0] = '\0';
        r->worker_version = st.version;
        *id = k;
        sf_reg_log(r, "info", "worker id %" PRId64 " is ours already: the create of an earlier "
                   "claim was applied though its answer was lost", k);
        return 1;
    }
    rc = zoo_delete(r->zh, path, st.version);
    if (rc != ZOK && rc != ZNONODE) {
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot delete %s, made by our lost create: %s", path,
                            zerror(rc));
        return -1;
    }
    r->unsure_worker[0] = '\0';
    sf_reg_log(r, "info", "deleted %s, made by an earlier claim whose answer was lost", path);
    return 0;
}

/* Describes the holders of every id taken under worker_id_path into out: "N holders:
 * ID=DATA, ..." with as many whole entries as fit in outlen, then ", and M more" for the
 * rest, so that a message is never cut in the middle of a holder. */
static void sf_reg_describe_holders(sf_registry *r, char *out, size_t outlen)
{
    char entries[SF_REGISTRY_MAX_WORKERS][SF_REG_DATA_MAX + 24];
    int n = 0;
    for (int64_t id = 0; id < SF_REGISTRY_MAX_WORKERS; id++) {
        char path[SF_REG_PATH_MAX], data[SF_REG_DATA_MAX];
        sf_reg_worker_path(r, id, path, sizeof path);
        if (sf_reg_get_string(r, path, data, sizeof data, NULL) == ZOK)
            snprintf(entries[n++], sizeof entries[0], "%" PRId64 "=%s", id, data);
    }
    static const size_t more_room = sizeof ", and 32 more";
    int used = snprintf(out, outlen, "%d holder%s: ", n, n == 1 ? "" : "s");
    if (used < 0 || (size_t)used >= outlen) {
        out[0] = '\0';
        return;
    }
    int shown = 0;
    for (; shown < n; shown++) {
        size_t need = (shown ? 2 : 0) + strlen(entries[shown]) + (shown + 1 < n ? more_room : 1);
        if ((size_t)used + need > outlen)
            break;
        used += snprintf(out + used, outlen - (size_t)used, "%s%s", shown ? ", " : "",
                         entries[shown]);
    }
    if (shown < n)
        snprintf(out + used, outlen - (size_t)used, "%sand %d more", shown ? ", " : "",
                 n - shown);
}

static int sf_reg_all_taken(sf_registry *r, int skipped, bool describe, char *err, size_t errlen)
{
    char head[SF_REG_PATH_MAX + 256];
    if (skipped > 0)
        snprintf(head, sizeof head, "no worker id under %s can be claimed: %d free ones have "
                 "floors too far ahead of our clock (see the warnings above; `snowflake-zk "
                 "list` shows every floor), the others are taken", r->worker_id_path, skipped);
    else
        snprintf(head, sizeof head, "all %d worker ids under %s are taken",
                 SF_REGISTRY_MAX_WORKERS, r->worker_id_path);
    size_t len = strlen(head);
    if (!describe || len + 3 >= errlen) {
        sf_registry_set_err(err, errlen, "%s", head);
        return SF_REGISTRY_ALL_TAKEN;
    }
    char holders[SF_REGISTRY_ERR_MAX];
    size_t room = errlen - len - 2 < sizeof holders ? errlen - len - 2 : sizeof holders;
    sf_reg_describe_holders(r, holders, room);
    sf_registry_set_err(err, errlen, "%s; %s", head, holders);
    return SF_REGISTRY_ALL_TAKEN;
}

/* The check-in before every claim: what a holder checks in with before every claim under a worker path:
 * the epoch its ids count from, recorded once for the path in the state path's own node
 * ("epoch_ms <Unix ms>"), since two holders of one worker id whose epochs differ by D make,
 * D apart, the same ids (the floors are kept in Unix ms, not in ids); and its clock against
 * the ensemble's, whose leader stamps every write with its clock (mtime), so that a host
 * whose clock is far off is refused before it serves, embedded holders too (nobody queries
 * them over Thrift).
 *
 * The record is written once, by the first holder (conditionally on the version it read,
 * so that of two first holders with different epochs one is refused); every later claim
 * only reads it. Holders starting together would otherwise queue on this one node, each
 * conditional write winning over all the others once: n(n+1)/2 writes for n holders. The
 * clock is checked by the stamp of the claim's own first node (its lock node, or the worker
 * node of a static claim), which no other holder writes; a claim that made neither (it
 * found one of its session's own) writes the record again for a stamp.
 *
 * A path without a record (made by an earlier version, whose state path node holds nothing)
 * is taken to be of the claimant's epoch, which it records; earlier versions neither record
 * nor check it, and read the per-id state nodes as before (nothing about them changes). */

#define SF_REG_EPOCH_PREFIX "epoch_ms "
/* Holders that write the record at once (the first holders of a path, or several claims
 * without a stamp of their own) write in turn: each round one write wins and the others
 * read again. */
#define SF_REG_EPOCH_TRIES (2 * SF_REGISTRY_MAX_WORKERS)

/* Reads a state path node's data: true with *epoch the recorded epoch, or -1 when nothing
 * is recorded (no data); false for anything else. */
static bool sf_reg_parse_epoch(const char *data, int64_t *epoch)
{
    *epoch = -1;
    if (data[0] == '\0')
        return true;
    size_t n = strlen(SF_REG_EPOCH_PREFIX);
    if (strncmp(data, SF_REG_EPOCH_PREFIX, n) != 0 || data[n] < '0' || data[n] > '9')
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(data + n, &end, 10);
    if (*end != '\0' || errno != 0 || v > SF_MAX_EPOCH_MS)
        return false;
    *epoch = v;
    return true;
}

/* Our clock against the one the ensemble's leader stamped our write of path with, read
 * when we sent the write and when its answer came: with both clocks right, the stamp lies
 * between the two. Further outside than max_clock_skew_ms, one of the two clocks is at least
 * that far off; the ids' order across nodes and the floors' waits assume less. */
static int sf_reg_check_clock(sf_registry *r, const sf_reg_stamp *s, const char *path,
                              char *err, size_t errlen)
{
    int64_t ahead = s->sent - s->mtime, behind = s->mtime - s->answered;
    if (ahead <= r->o.max_clock_skew_ms && behind <= r->o.max_clock_skew_ms)
        return 0;
    sf_registry_set_err(err, errlen,
                        "clock sanity check failed: our clock is at least %" PRId64 " ms %s "
                        "ZooKeeper's (its leader stamped our write of %s at %" PRId64 "; our "
                        "clock read %" PRId64 " when we sent it and %" PRId64 " when it was "
                        "confirmed), more than the %" PRId64 " ms allowed; fix this host's time "
                        "sync (or the ZooKeeper leader's)",
                        ahead > 0 ? ahead : behind, ahead > 0 ? "ahead of" : "behind", path,
                        s->mtime, s->sent, s->answered, r->o.max_clock_skew_ms);
    sf_reg_not_yet(r); /* a clock still settling (time sync after boot) comes into line */
    return -1;
}

/* Reads the path's epoch record and compares it with ours; writes ours when none is
 * recorded, or, with restamp, in any case (for its stamp), conditionally on the version
 * read, and then checks our clock by the write's stamp (clock_checked). */
static int sf_reg_epoch_record(sf_registry *r, bool restamp, char *err, size_t errlen)
{
    r->clock_checked = false;
    for (int tries = 0; tries < SF_REG_EPOCH_TRIES; tries++) {
        char data[64], mine[64];
        struct Stat st, written;
        int rc = sf_reg_get_string(r, r->state_path, data, sizeof data, &st);
        if (rc != ZOK) {
            sf_reg_zk_error(r, rc);
            sf_registry_set_err(err, errlen, "cannot read the epoch recorded in %s: %s",
                                r->state_path, zerror(rc));
            return -1;
        }
        int64_t recorded;
        if (!sf_reg_parse_epoch(data, &recorded)) {
            sf_registry_set_err(err, errlen,
                                "%s holds '%s', not 'epoch_ms MS' (the epoch the ids under %s "
                                "count from): was it written by another program?",
                                r->state_path, data, r->worker_id_path);
            return -1;
        }
        if (recorded >= 0 && recorded != r->o.epoch_ms) {
            sf_registry_set_err(err, errlen,
                                "the ids under %s count from epoch_ms %" PRId64 " (recorded in "
                                "%s), ours from epoch_ms %" PRId64 ": a holder of a worker id "
                                "with another epoch makes the ids another one made %" PRId64
                                " ms apart. Configure epoch_ms %" PRId64 ", or give this epoch "
                                "a worker_id_path of its own (`snowflake-zk epoch` shows the "
                                "record)",
                                r->worker_id_path, recorded, r->state_path, r->o.epoch_ms,
                                (int64_t)llabs(recorded - r->o.epoch_ms), recorded);
            return -1;
        }
        if (recorded >= 0 && !restamp)
            return 0; /* ours already: the claim's first node is stamped instead */
        int n = snprintf(mine, sizeof mine, SF_REG_EPOCH_PREFIX "%" PRId64, r->o.epoch_ms);
        sf_reg_stamp s = {.valid = true, .sent = sf_clock_now_ms()};
        rc = zoo_set2(r->zh, r->state_path, mine, n, st.version, &written);
        s.answered = sf_clock_now_ms();
        if (rc == ZBADVERSION)
            continue; /* written meanwhile, perhaps with another epoch: read it again */
        if (rc != ZOK) {
            sf_reg_zk_error(r, rc);
            sf_registry_set_err(err, errlen, "cannot record the epoch in %s: %s%s",
                                r->state_path, zerror(rc),
                                rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
            return -1;
        }
        if (r->o.skip_sanity_checks)
            return 0;
        s.mtime = written.mtime;
        if (sf_reg_check_clock(r, &s, r->state_path, err, errlen) != 0)
            return -1;
        r->clock_checked = true;
        return 0;
    }
    sf_registry_set_err(err, errlen, "the epoch recorded in %s changed under us %d times; is "
                        "another program writing it?", r->state_path, SF_REG_EPOCH_TRIES);
    return -1;
}

static int sf_reg_check_in(sf_registry *r, char *err, size_t errlen)
{
    return sf_reg_epoch_record(r, false, err, errlen);
}

static int sf_reg_check_stamp(sf_registry *r, const sf_reg_stamp *stamp, const char *path, char *err,
                       size_t errlen)
{
    if (r->clock_checked || r->o.skip_sanity_checks)
        return 0;
    if (!stamp->valid)
        return sf_reg_epoch_record(r, true, err, errlen);
    return sf_reg_check_clock(r, stamp, path, err, errlen);
}

/* The automatic claim: the automatic claim: claimants queue with ZooKeeper's lock recipe under
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
 * claim: one holder per worker id whatever the queue says. */

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
    sf_zkbatch_req lists[] = { /* asked together: the server answers them in this order */
        {.kind = SF_ZKBATCH_CHILDREN, .path = r->lock_path},
        {.kind = SF_ZKBATCH_CHILDREN, .path = r->worker_id_path},
    };
    sf_zkbatch_send(r->zh, lists, 2);
    sf_zkbatch_req *locks = &lists[0], *workers = &lists[1];
    int result = -1;
    if (locks->rc != ZOK || workers->rc != ZOK) {
        bool lock_failed = locks->rc != ZOK;
        int rc = lock_failed ? locks->rc : workers->rc;
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot list %s: %s",
                            lock_failed ? r->lock_path : r->worker_id_path, zerror(rc));
        goto done;
    }
    struct String_vector *kids = &locks->kids;
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
    for (int i = 0; i < workers->kids.count; i++) {
        int64_t k;
        if (sf_zkpath_parse_worker_id(workers->kids.data[i], &k))
            taken[k] = true;
    }
    v->nfree = 0;
    for (int64_t k = 0; k < SF_REGISTRY_MAX_WORKERS; k++)
        if (!taken[k] && !skip[k])
            v->free[v->nfree++] = k;
    result = 0;
done:
    sf_zkbatch_req_free(locks);
    sf_zkbatch_req_free(workers);
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
    sf_zkbatch_req sent = {.kind = SF_ZKBATCH_MULTI, .count = 2, .ops = ops,
                           .results = results};
    sf_zkbatch_send(r->zh, &sent, 1);
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

static int sf_reg_claim_auto(sf_registry *r, bool wait_when_scarce, int64_t *id, char *err,
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

/* Deletes our worker node, e.g. when we must not serve after claiming it. */
void sf_reg_release_worker(sf_registry *r, int64_t id)
{
    char path[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, path, sizeof path);
    int rc = zoo_delete(r->zh, path, -1);
    if (rc != ZOK && rc != ZNONODE) {
        sf_reg_log(r, "warning", "cannot delete %s: %s (it goes when the session closes)", path,
                   zerror(rc));
        sf_reg_note_unsure(r, path); /* still ours, perhaps: the next claim settles it */
    }
}

/* Claims the configured id, retrying while another session holds it (perhaps our own
 * previous one, not yet expired). The waits end at once when cancelled. The worker node's
 * create is the claim's first write: our clock is checked by its stamp, and a host whose
 * clock is off lets the id go again before it serves. */
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
        sf_reg_stamp stamp;
        int got = sf_reg_try_create_worker(r, r->wanted_id, holder, sizeof holder, &stamp, err,
                                           errlen);
        if (got < 0)
            return -1;
        if (got == 1) {
            char path[SF_REG_PATH_MAX];
            sf_reg_worker_path(r, r->wanted_id, path, sizeof path);
            if (sf_reg_check_stamp(r, &stamp, path, err, errlen) != 0) {
                sf_reg_release_worker(r, r->wanted_id);
                return -1;
            }
            *id = r->wanted_id;
            return 0;
        }
    }
    sf_registry_set_err(err, errlen,
                        "worker id %" PRId64 " is already held by %s (%s/%" PRId64 "); "
                        "stop that node, release a stale one (snowflake-zk release %" PRId64
                        "), or configure another worker_id", r->wanted_id, holder,
                        r->worker_id_path, r->wanted_id, r->wanted_id);
    sf_reg_not_yet(r); /* its holder may stop, or its session end */
    return -1;
}

int sf_reg_claim_once(sf_registry *r, int retries, bool wait_when_scarce, int64_t *id,
                      int64_t *floor_ms, char *err, size_t errlen)
{
    int rc = sf_reg_settle_unsure(r, id, err, errlen);
    if (rc == 0)
        rc = r->wanted_id >= 0 ? sf_reg_claim_static(r, id, err, errlen, retries)
                               : sf_reg_claim_auto(r, wait_when_scarce, id, err, errlen);
    else if (rc > 0) { /* ours from an earlier create: its stamp is unknown */
        rc = sf_reg_check_stamp(r, &(sf_reg_stamp){.valid = false}, NULL, err, errlen);
        if (rc != 0)
            sf_reg_release_worker(r, *id);
    } else
        rc = -1;
    if (rc != 0)
        return rc == SF_REGISTRY_ALL_TAKEN || rc == SF_REGISTRY_SCARCE ? rc : -1;
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
static int sf_reg_check_peers(sf_registry *r, char *err, size_t errlen)
{
    if (r->o.skip_sanity_checks)
        return 0;
    int rc;
    sf_registry_peers peers = {
        .zh = r->zh, .worker_id_path = r->worker_id_path, .host_port = r->host_port,
        .datacenter_id = r->o.datacenter_id,
        .skip_unreachable_peers = r->o.skip_unreachable_peers,
        .max_clock_skew_ms = r->o.max_clock_skew_ms, .query_peer = r->o.query_peer,
        .peer_ctx = r->o.peer_ctx, .log = r->o.log, .log_ctx = r->o.log_ctx,
        .cancelled = sf_reg_cancelled, .cancel_ctx = r};
    rc = sf_registry_peers_check(&peers, err, errlen);
    if (rc == SF_REGISTRY_NOT_YET)
        sf_reg_not_yet(r);
    return rc == 0 ? 0 : -1;
}

int sf_reg_claim_checks(sf_registry *r, char *err, size_t errlen)
{
    if (sf_reg_check_peers(r, err, errlen) != 0)
        return -1;
    return sf_reg_check_in(r, err, errlen);
}
