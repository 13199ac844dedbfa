/* registry_peers.c -- the start-up sanity checks against the peers holding worker ids, and
 * their list. */
#define _POSIX_C_SOURCE 200809L
#include "registry_peers.h"
#include "zkbatch.h"
#include "registry_log.h"

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
    sf_zkbatch_read *reads = calloc(SF_MAX_WORKER_ID + 1, sizeof *reads);
    if (reads == NULL) {
        sf_registry_set_err(err, errlen, "out of memory reading the holders under %s",
                            p->worker_id_path);
        return -1;
    }
    sf_zkbatch batch;
    sf_zkbatch_init(&batch);
    char path[SF_REG_PEERS_PATH_MAX];
    for (int id = 0; id <= SF_MAX_WORKER_ID; id++) {
        snprintf(path, sizeof path, "%s/%d", p->worker_id_path, id);
        if (present[id]) /* the request carries its own copy of the path */
            sf_zkbatch_get(&batch, p->zh, path, &reads[id]);
    }
    sf_zkbatch_wait(&batch);
    sf_zkbatch_free(&batch);
    int result = 0;
    for (int id = 0; id <= SF_MAX_WORKER_ID && result == 0; id++) {
        if (sf_reg_peers_cancelled(p)) {
            sf_registry_set_err(err, errlen, "stopped while checking the peers under %s",
                                p->worker_id_path);
            result = -1;
        } else if (present[id] && reads[id].rc == ZOK && /* not gone meanwhile, not ours */
                   !(p->host_port && strcmp(reads[id].data, p->host_port) == 0)) {
            snprintf(path, sizeof path, "%s/%d", p->worker_id_path, id);
            result = fn(p, ctx, id, path, reads[id].data, err, errlen);
        }
    }
    free(reads);
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
