/* registry_paths.c -- an automatic claim over several worker id paths (an automatic
 * datacenter), on one session: a walk from a first path, passing over the full ones at the
 * cost of a listing each, leaving the scarce ones for last (registry.h, sf_registry_claim_any).
 * Part of the registry (registry.c says how the parts fit); knows nothing of sockets. */
#define _GNU_SOURCE
#include "registry_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/zkpath.h"

/* Walks over every place before an automatic claim over several gives up (each walk after
 * the first only while one showed a free id that a race took). */
#define SF_REG_WALK_ROUNDS 16

/* How many of the ids under place (a worker id path, without the chroot) are free now (all
 * when it does not exist yet), or SF_REGISTRY_ZK_FAILED with err filled. */
static int sf_reg_free_ids(sf_registry *r, const char *place, char *err, size_t errlen)
{
    struct String_vector kids = {0, NULL};
    char *path = sf_reg_rooted(r, place, NULL, NULL);
    if (path == NULL) {
        sf_registry_set_err(err, errlen, "out of memory");
        return -1;
    }
    int rc = zoo_get_children(r->zh, path, 0, &kids);
    free(path);
    if (rc == ZNONODE)
        return SF_REGISTRY_MAX_WORKERS;
    if (rc != ZOK) {
        sf_registry_set_err(err, errlen, "cannot list %s: %s", place, zerror(rc));
        return SF_REGISTRY_ZK_FAILED;
    }
    int taken = 0;
    for (int i = 0; i < kids.count; i++) {
        int64_t k;
        taken += sf_zkpath_parse_worker_id(kids.data[i], &k);
    }
    deallocate_String_vector(&kids);
    return SF_REGISTRY_MAX_WORKERS - taken;
}

/* Makes the next claim go under place p (no id is held yet). */
static int sf_reg_move(sf_registry *r, const sf_registry_place *p, char *err, size_t errlen)
{
    char *path = sf_reg_rooted(r, p->worker_id_path, NULL, NULL);
    char *lock = sf_reg_rooted(r, NULL, p->worker_id_path, "-locks");
    char *state = sf_reg_rooted(r, NULL, p->worker_id_path, "-state");
    char *data = p->host_port != NULL ? strdup(p->host_port) : NULL;
    if (path == NULL || lock == NULL || state == NULL || (p->host_port != NULL && data == NULL)) {
        free(path);
        free(lock);
        free(state);
        free(data);
        sf_registry_set_err(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&r->mu); /* sf_registry_worker_id_path reads them from any thread */
    free(r->worker_id_path);
    free(r->lock_path);
    free(r->state_path);
    free(r->host_port);
    r->worker_id_path = path;
    r->lock_path = lock;
    r->state_path = state;
    r->host_port = data;
    r->o.datacenter_id = p->datacenter_id;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* One claim under place i, waiting its turn when ids are scarce or not. */
static int sf_reg_claim_at(sf_registry *r, const sf_registry_place *places, int i, bool wait,
                           int *chosen, int64_t *worker_id, int64_t *floor_ms, char *err,
                           size_t errlen)
{
    if (sf_reg_move(r, &places[i], err, errlen) != 0)
        return -1;
    *chosen = i;
    r->claim_waits = wait;
    int rc = sf_registry_claim(r, worker_id, floor_ms, err, errlen);
    r->claim_waits = true;
    return rc;
}

int sf_registry_claim_any(sf_registry *r, const sf_registry_place *places, int n, int first,
                          int *chosen, int64_t *worker_id, int64_t *floor_ms, char *err,
                          size_t errlen)
{
    if (r->wanted_id >= 0 || r->o.lock_path != NULL || r->o.state_path != NULL || n < 1 ||
        first < 0 || first >= n) {
        sf_registry_set_err(err, errlen, "a claim over several paths takes an automatic "
                            "worker id and derives the lock and state paths from each");
        return -1;
    }
    /* Rounds over every place, while one shows a free id: an id a claimant queued ahead of
     * us left behind (it went on to another place) may come free where we have been. */
    for (int round = 0; round < SF_REG_WALK_ROUNDS; round++) {
        int scarce = -1, rc;
        bool seen_free = false;
        for (int k = 0; k < n; k++) {
            int i = (first + k) % n;
            if (round > 0 || k > 0) { /* the session is up: look before going there */
                int free_ids = sf_reg_free_ids(r, places[i].worker_id_path, err, errlen);
                if (free_ids < 0)
                    return free_ids;
                if (free_ids == 0)
                    continue;
            }
            rc = sf_reg_claim_at(r, places, i, false, chosen, worker_id, floor_ms, err, errlen);
            if (rc != SF_REGISTRY_ALL_TAKEN && rc != SF_REGISTRY_SCARCE)
                return rc;
            seen_free |= rc == SF_REGISTRY_SCARCE || round > 0 || k > 0;
            if (rc == SF_REGISTRY_SCARCE && scarce < 0)
                scarce = i;
            sf_reg_log(r, "info", "%s; trying the next path", err);
        }
        if (scarce >= 0) {
            rc = sf_reg_claim_at(r, places, scarce, true, chosen, worker_id, floor_ms, err,
                                 errlen);
            if (rc != SF_REGISTRY_ALL_TAKEN)
                return rc;
        }
        if (!seen_free)
            break;
    }
    sf_registry_set_err(err, errlen, "all %d worker ids under each of the %d paths are taken "
                        "(`snowflake-zk list --path PATH` names the holders under one)",
                        SF_REGISTRY_MAX_WORKERS, n);
    return SF_REGISTRY_ALL_TAKEN;
}
