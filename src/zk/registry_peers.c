/* registry_peers.c -- the start-up sanity checks against the peers holding worker ids, and
 * their list. */
#define _POSIX_C_SOURCE 200809L
#include "registry_peers.h"
#include "registry_log.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
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

int sf_registry_peers_check(const sf_registry_peers *p, char *err, size_t errlen)
{
    struct String_vector kids = {0, NULL};
    int rc = zoo_get_children(p->zh, p->worker_id_path, 0, &kids);
    if (rc != ZOK) {
        sf_registry_set_err(err, errlen, "cannot list %s: %s", p->worker_id_path, zerror(rc));
        return -1;
    }
    int result = 0;
    int64_t sum = 0, count = 0, unqueried = 0;
    for (int i = 0; i < kids.count && result == 0; i++) {
        int64_t id;
        char path[SF_REG_PEERS_PATH_MAX], peer[SF_REG_PEERS_DATA_MAX], perr[SF_REGISTRY_ERR_MAX];
        if (sf_reg_peers_cancelled(p)) {
            sf_registry_set_err(err, errlen, "stopped while checking the peers under %s",
                             p->worker_id_path);
            result = -1;
            break;
        }
        if (!sf_zkpath_parse_worker_id(kids.data[i], &id)) {
            sf_reg_peers_log(p, "warning", "ignoring %s/%s: not a worker id (canonical decimal 0..31)",
                         p->worker_id_path, kids.data[i]);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", p->worker_id_path, kids.data[i]);
        if (sf_reg_peers_get_string(p, path, peer, sizeof peer) != ZOK)
            continue; /* gone meanwhile */
        if (p->host_port && strcmp(peer, p->host_port) == 0)
            continue;
        int64_t pw = -1, pd = -1, pt = 0;
        if (sf_zkpath_parse_embedded(peer, &pd)) {
            /* An embedded holder serves no Thrift: its node says its datacenter. */
            if (pd >= 0 && pd != p->datacenter_id) {
                sf_registry_set_err(err, errlen,
                        "datacenter id insanity: %s (%s) has datacenter id %" PRId64 ", ours is %"
                        PRId64 " (each datacenter needs its own worker_id_path)",
                        path, peer, pd, p->datacenter_id);
                result = -1;
            }
            continue;
        }
        if (!p->query_peer) {
            unqueried++;
            continue;
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
            continue;
        }
        if (qrc != 0) {
            if (p->skip_unreachable_peers) {
                sf_reg_peers_log(p, "warning", "peer %s (worker id %" PRId64 ") is unreachable, "
                             "skipped: %s", peer, id, perr);
                continue;
            }
            sf_registry_set_err(err, errlen,
                    "peer %s holding worker id %" PRId64 " under %s is unreachable: %s; start it, "
                    "release its stale node (snowflake-zk release %" PRId64 "), or set "
                    "skip_unreachable_peers = true",
                    peer, id, p->worker_id_path, perr, id);
            result = -1;
        } else if (pw != id && sf_reg_peers_holds_other_node(p, peer, pw)) {
            /* A process restarted at the same address took another id while
             * the node of its previous session waits to expire. */
            if (p->skip_unreachable_peers) {
                sf_reg_peers_log(p, "warning", "%s is stale, skipped: %s now holds worker id %" PRId64
                             " (a restarted node; the old session has not expired yet)",
                             path, peer, pw);
                continue;
            }
            sf_registry_set_err(err, errlen,
                    "%s is stale: %s now holds worker id %" PRId64 " under its own node; it "
                    "disappears when its session expires, or release it (snowflake-zk release %"
                    PRId64 "), or set skip_unreachable_peers = true",
                    path, peer, pw, id);
            result = -1;
        } else if (pw != id) {
            sf_registry_set_err(err, errlen,
                    "worker id insanity: %s holds %s in ZooKeeper but says its worker id is %" PRId64,
                    peer, path, pw);
            result = -1;
        } else if (pd != p->datacenter_id) {
            sf_registry_set_err(err, errlen,
                    "datacenter id insanity: %s under %s has datacenter id %" PRId64
                    ", ours is %" PRId64 " (each datacenter needs its own worker_id_path)",
                    peer, p->worker_id_path, pd, p->datacenter_id);
            result = -1;
        } else {
            sum += pt;
            count++;
        }
    }
    deallocate_String_vector(&kids);
    if (unqueried > 0)
        sf_reg_peers_log(p, "info", "%" PRId64 " peers under %s not queried: an embedded "
                         "holder checks only what the peers' nodes say", unqueried,
                         p->worker_id_path);
    if (result == 0 && count > 0) {
        int64_t mean = sum / count, now = sf_clock_now_ms();
        int64_t diff = now > mean ? now - mean : mean - now;
        if (diff > p->max_clock_skew_ms) {
            sf_registry_set_err(err, errlen,
                    "timestamp sanity check failed: the mean of %" PRId64 " peers' clocks is %" PRId64
                    " ms, ours is %" PRId64 " ms, %" PRId64 " ms apart (at most %" PRId64 " allowed)",
                    count, mean, now, diff, p->max_clock_skew_ms);
            result = -1;
        }
    }
    return result;
}

int sf_registry_peers_list(const sf_registry_peers *p, char (*out)[SF_REGISTRY_PEER_MAX],
                           int max, char *err, size_t errlen)
{
    struct String_vector kids = {0, NULL};
    int rc = zoo_get_children(p->zh, p->worker_id_path, 0, &kids);
    if (rc != ZOK) {
        sf_registry_set_err(err, errlen, "cannot list %s: %s", p->worker_id_path, zerror(rc));
        return -1;
    }
    int n = 0;
    for (int i = 0; i < kids.count && n < max; i++) {
        int64_t id, dc;
        char path[SF_REG_PEERS_PATH_MAX];
        if (!sf_zkpath_parse_worker_id(kids.data[i], &id))
            continue;
        snprintf(path, sizeof path, "%s/%s", p->worker_id_path, kids.data[i]);
        if (sf_reg_peers_get_string(p, path, out[n], SF_REGISTRY_PEER_MAX) != ZOK ||
            (p->host_port && strcmp(out[n], p->host_port) == 0) ||
            sf_zkpath_parse_embedded(out[n], &dc))
            continue; /* gone meanwhile, ours, or serving no Thrift */
        n++;
    }
    deallocate_String_vector(&kids);
    return n;
}
