/* registry_claim.c -- the claims: a static id (the original's ephemeral node, retried while
 * another holds it) and an automatic one (registry_queue.c), each followed by the wait for
 * the id's floor (the worker node itself: registry_worker.c); and the checks made before
 * every claim (the peers, a standalone ensemble).
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
int sf_reg_check_peers(sf_registry *r, char *err, size_t errlen)
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
