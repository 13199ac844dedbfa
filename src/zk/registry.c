/* registry.c -- claims a worker id in ZooKeeper, guards it (fencing) and records its last timestamp.
 *
 * The registry is a state machine (sf_reg_state, registry_state.c): one function, sf_reg_step,
 * takes every event (from the session watcher, from the renewal's completion, from the
 * registry's thread and from the callers) and moves the state, logging each transition once
 * and queueing the reports the caller's callbacks receive. This file holds the public calls
 * and the registry's thread, which acts on the state it finds: opens a session while
 * CONNECTING (registry_session.c), claims while CLAIMING (registry_claim.c), waits for the
 * recorded timestamp (registry_lease.c) and the first lease while WAITING_FLOOR, renews the
 * lease while SERVING (registry_renew.c), and schedules the next try while FENCED.
 *
 * The parts call down, never up into this file: what they all share sits below them and calls
 * none of them (registry_nodes.c: names, ACL, reads; registry_wait.c: the waits; registry_log.c;
 * registry_batch.c), the worker node below both kinds of claim (registry_worker.c), and the
 * parts reach the state machine only through its input, sf_reg_step, with the events their
 * ZooKeeper completions bring. registry_paths.c, the claim over several paths, sits above the
 * registry and uses only its public calls.
 * The registry knows nothing of sockets: peers are queried through the caller's callback. */
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

/* Level 0 turns the client library's logging off entirely. */
void sf_registry_set_client_logging(bool verbose)
{
    zoo_set_debug_level(verbose ? ZOO_LOG_LEVEL_WARN : (ZooLogLevel)0);
}

sf_registry *sf_registry_new(const sf_registry_options *opts, char *err, size_t errlen)
{
    char why[SF_REGISTRY_ERR_MAX];
    if (!sf_registry_options_check(opts, why, sizeof why)) {
        sf_registry_set_err(err, errlen, "%s", why);
        return NULL;
    }
    sf_registry *r = calloc(1, sizeof *r);
    if (!r) {
        sf_registry_set_err(err, errlen, "out of memory");
        return NULL;
    }
    r->o = *opts;
    r->hosts = strdup(opts->hosts);
    /* The chroot ends the last entry: "h1:2181,h2:2181/app" (the hosts were checked). */
    const char *root = strchr(opts->hosts, '/');
    r->servers = root != NULL ? strndup(opts->hosts, (size_t)(root - opts->hosts))
                              : strdup(opts->hosts);
    r->chroot = strdup(root != NULL && strcmp(root, "/") != 0 ? root : "");
    if (r->chroot != NULL) {
        r->worker_id_path = sf_reg_rooted(r, opts->worker_id_path, NULL, NULL);
        r->lock_path = sf_reg_rooted(r, opts->lock_path, opts->worker_id_path, "-locks");
        r->state_path = sf_reg_rooted(r, opts->state_path, opts->worker_id_path, "-state");
    }
    r->host_port = opts->host_port ? strdup(opts->host_port) : NULL;
    r->auth = opts->auth && *opts->auth ? strdup(opts->auth) : NULL;
    r->wanted_id = opts->worker_id;
    r->held_id = -1;
    sf_reg_slots_init(r);
    r->floor_ms = -1;
    r->state_version = -1;
    r->state_value = -1;
    r->own_value = -1;
    r->base_floor = -1;
    r->stats.last_ms = -1;
    r->negotiated_ms = opts->session_timeout_ms;
    r->backoff_ms = SF_REG_BACKOFF_MIN_MS;
    r->state = SF_REG_CONNECTING;
    r->claim_waits = true;
    pthread_mutex_init(&r->mu, NULL);
    if (sf_clocks_cond_init(&r->cv) != 0 || !r->hosts || !r->servers || !r->chroot ||
        !r->worker_id_path || !r->lock_path || !r->state_path ||
        (opts->host_port && !r->host_port) || (opts->auth && *opts->auth && !r->auth)) {
        sf_registry_set_err(err, errlen, "out of memory");
        sf_registry_close(r);
        return NULL;
    }
    if (sf_reg_open_session(r, err, errlen) != 0) {
        sf_registry_close(r);
        return NULL;
    }
    return r;
}

/* The claim after the session is up: the paths, the peers, the claim itself. */
static int sf_reg_claim_here(sf_registry *r, int64_t *id, int64_t *floor, char *err,
                             size_t errlen)
{
    if (sf_reg_ensure_paths(r, err, errlen) != 0)
        return -1;
    if (sf_reg_check_peers(r, err, errlen) != 0)
        return -1;
    if (sf_reg_check_in(r, err, errlen) != 0)
        return -1;
    return sf_reg_claim_once(r, r->o.claim_retries, r->claim_waits, id, floor, err, errlen);
}

int sf_registry_claim(sf_registry *r, int64_t *worker_id, int64_t *floor_ms, char *err,
                      size_t errlen)
{
    int rc;
    pthread_mutex_lock(&r->mu);
    bool expired = r->expired || r->zh == NULL;
    pthread_mutex_unlock(&r->mu);
    if (expired) { /* a claim tried again after its session expired: a new one */
        if (sf_reg_open_session(r, err, errlen) != 0)
            return -1;
        r->session_checked = false;
    }
    if (!r->session_checked) {
        if ((rc = sf_reg_wait_session(r, err, errlen)) != 0)
            return rc;
        r->session_checked = true;
        sf_reg_log(r, "info", "ZooKeeper session 0x%" PRIx64 " with %s, timeout %d ms",
                   (uint64_t)sf_reg_session_id(r), r->hosts, r->negotiated_ms);
        sf_reg_warn_standalone(r);
        if (r->o.skip_sanity_checks)
            sf_reg_log(r, "warning", "peer sanity checks skipped (skip_sanity_checks = true)");
    }
    pthread_mutex_lock(&r->mu);
    uint64_t conn = r->conn;
    bool up = r->connected && !r->expired;
    r->zk_failed = false;
    r->not_yet = false;
    pthread_mutex_unlock(&r->mu);
    if (!up) {
        sf_registry_set_err(err, errlen, "the ZooKeeper session with '%s' was lost before "
                            "claiming under %s", r->hosts, r->worker_id_path);
        return SF_REGISTRY_ZK_FAILED;
    }
    int64_t id = -1, floor = -1;
    rc = sf_reg_claim_here(r, &id, &floor, err, errlen);
    if (rc == -1) {
        /* ZooKeeper's failure (a request lost or timed out, the session gone), not a
         * holder's or a check's: the caller may try again. */
        pthread_mutex_lock(&r->mu);
        if (r->zk_failed || r->conn != conn || r->expired)
            rc = SF_REGISTRY_ZK_FAILED;
        else if (r->not_yet)
            rc = SF_REGISTRY_NOT_YET;
        pthread_mutex_unlock(&r->mu);
        if (sf_reg_stopped(r))
            rc = -1;
    }
    if (rc != 0)
        return rc;
    if (sf_reg_stopped(r)) {
        sf_reg_release_worker(r, id);
        sf_registry_set_err(err, errlen, "stopped right after claiming worker id %" PRId64
                            " (released)", id);
        return -1;
    }
    sf_reg_log(r, "info", "claimed worker id %" PRId64 " (%s/%" PRId64 " = %s)", id,
               r->worker_id_path, id, r->host_port ? r->host_port : "");
    *worker_id = id;
    *floor_ms = floor;
    return 0;
}

/* While FENCED or CONNECTING/CLAIMING in the thread: does what the state asks, one step.
 * Failures become FAILED events, whose reason is the current one reported. */
static void sf_reg_recover(sf_registry *r, sf_reg_state state)
{
    char err[SF_REGISTRY_ERR_MAX];
    if (state == SF_REG_CONNECTING) {
        if (sf_reg_open_session(r, err, sizeof err) != 0 ||
            sf_reg_wait_session(r, err, sizeof err) != 0) {
            pthread_mutex_lock(&r->mu);
            sf_reg_step(r, SF_REG_EV_FAILED, err);
            pthread_mutex_unlock(&r->mu);
            return;
        }
        sf_reg_log(r, "info", "new ZooKeeper session 0x%" PRIx64 " with %s, timeout %d ms",
                   (uint64_t)sf_reg_session_id(r), r->hosts, r->negotiated_ms);
        return; /* CONNECTED moved us to CLAIMING */
    }
    /* CLAIMING: keep the id if our node survived (the session did), else claim anew. */
    pthread_mutex_lock(&r->mu);
    int64_t last = r->held_id;
    pthread_mutex_unlock(&r->mu);
    int64_t id = -1, floor = -1;
    bool kept = false;
    if (last >= 0) {
        char path[SF_REG_PATH_MAX], data[SF_REG_DATA_MAX];
        struct Stat st;
        sf_reg_worker_path(r, last, path, sizeof path);
        int rc = sf_reg_get_string(r, path, data, sizeof data, &st);
        if (rc != ZOK && rc != ZNONODE) {
            /* Unknown (the answer lost, the connection down): the node may still be ours,
             * and claiming another id now would leave this session holding two, one of
             * them unknown to the registry, whose peers then find it stale. Ask again. */
            snprintf(err, sizeof err, "cannot read our worker node %s to tell whether it "
                     "survived: %s; will retry", path, zerror(rc));
            pthread_mutex_lock(&r->mu);
            sf_reg_step(r, SF_REG_EV_FAILED, err);
            pthread_mutex_unlock(&r->mu);
            return;
        }
        if (rc == ZOK && st.ephemeralOwner == sf_reg_session_id(r)) {
            kept = true;
            id = last;
            pthread_mutex_lock(&r->mu);
            r->worker_version = st.version;
            sf_reg_step(r, SF_REG_EV_CLAIMED, NULL);
            pthread_mutex_unlock(&r->mu);
            if (sf_reg_wait_for_floor(r, id, true, &floor, err, sizeof err) != 0) {
                pthread_mutex_lock(&r->mu);
                sf_reg_step(r, SF_REG_EV_FAILED, err);
                pthread_mutex_unlock(&r->mu);
                return;
            }
            pthread_mutex_lock(&r->mu);
            r->floor_ms = floor;
            if (floor > r->base_floor)
                r->base_floor = floor;
            pthread_mutex_unlock(&r->mu);
        }
    }
    if (!kept && (sf_reg_check_peers(r, err, sizeof err) != 0 ||
                  sf_reg_check_in(r, err, sizeof err) != 0)) {
        char reason[SF_REGISTRY_ERR_MAX + 128];
        snprintf(reason, sizeof reason, "the sanity checks before claiming again failed, "
                 "will retry: %s", err);
        pthread_mutex_lock(&r->mu);
        sf_reg_step(r, SF_REG_EV_FAILED, reason);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (!kept && sf_reg_claim_once(r, 0, true, &id, &floor, err, sizeof err) != 0) {
        char reason[SF_REGISTRY_ERR_MAX + 64];
        snprintf(reason, sizeof reason, "claiming a worker id again failed, will retry: %s", err);
        pthread_mutex_lock(&r->mu);
        sf_reg_step(r, SF_REG_EV_FAILED, reason);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (!sf_reg_renew_and_wait(r, id, kept ? "claimed again (the session survived)"
                                            : "claimed again", err, sizeof err)) {
        pthread_mutex_lock(&r->mu);
        sf_reg_step(r, SF_REG_EV_FAILED, err);
        pthread_mutex_unlock(&r->mu);
    }
}

/* The registry's thread: acts on the state, delivers reports, and sleeps until the next
 * deadline (renewal, grace, lease end, retry) or event. */
static void *sf_reg_thread(void *arg)
{
    sf_registry *r = arg;
    for (;;) {
        sf_reg_deliver(r);
        pthread_mutex_lock(&r->mu);
        sf_reg_step(r, SF_REG_EV_TIMER, NULL);
        if (r->stop) {
            pthread_mutex_unlock(&r->mu);
            break;
        }
        sf_reg_state state = r->state;
        int64_t now = sf_clocks_boot_ms();
        if (state == SF_REG_CONNECTING || state == SF_REG_CLAIMING ||
            state == SF_REG_WAITING_FLOOR) {
            pthread_mutex_unlock(&r->mu);
            sf_reg_deliver(r);
            sf_reg_recover(r, state == SF_REG_WAITING_FLOOR ? SF_REG_CLAIMING : state);
            continue;
        }
        if (r->orphan_lock[0] && r->connected && now >= r->orphan_retry_at) {
            pthread_mutex_unlock(&r->mu);
            sf_reg_retry_unlock(r);
            continue;
        }
        if (state == SF_REG_SERVING && sf_reg_renew_if_due(r, r->held_id)) {
            pthread_mutex_unlock(&r->mu);
            continue;
        }
        int64_t wake = now + 1000, slots = sf_reg_slots_refresh(r);
        if (slots > 0 && slots < wake)
            wake = slots;
        if (state == SF_REG_SERVING) {
            if (sf_reg_renew_wake(r) < wake)
                wake = sf_reg_renew_wake(r);
            if (!r->connected && r->disconnected_since + sf_registry_grace_ms(r->negotiated_ms) < wake)
                wake = r->disconnected_since + sf_registry_grace_ms(r->negotiated_ms);
            if (r->lease_until > 0 && r->lease_until < wake)
                wake = r->lease_until;
        } else if (state == SF_REG_FENCED && r->retry_at > now && r->retry_at < wake) {
            wake = r->retry_at;
        }
        if (r->orphan_lock[0] && r->connected && r->orphan_retry_at < wake)
            wake = r->orphan_retry_at;
        if (r->report_count == 0)
            sf_reg_wait_locked(r, wake - now > 0 ? wake - now : 0);
        pthread_mutex_unlock(&r->mu);
    }
    sf_reg_deliver(r);
    return NULL;
}

int sf_registry_watch(sf_registry *r, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    r->watching = true;
    bool held = r->held_id >= 0 && r->state == SF_REG_WAITING_FLOOR && r->connected;
    int64_t id = r->held_id;
    pthread_mutex_unlock(&r->mu);
    /* The first lease comes before serving is reported: on_state(serving) carries it. */
    char why[SF_REGISTRY_ERR_MAX] = "the ZooKeeper session was lost before serving began";
    if (!held || !sf_reg_renew_and_wait(r, id, "worker id claimed", why, sizeof why)) {
        pthread_mutex_lock(&r->mu);
        if (r->state != SF_REG_FENCED)
            sf_reg_step(r, SF_REG_EV_FAILED, why);
        else
            sf_reg_queue_fenced(r, r->reason, true);
        pthread_mutex_unlock(&r->mu);
    }
    sf_reg_deliver(r);
    int rc = pthread_create(&r->thread, NULL, sf_reg_thread, r);
    if (rc != 0) {
        sf_registry_set_err(err, errlen, "cannot start the registry thread: %s", strerror(rc));
        return -1;
    }
    r->thread_started = true;
    return 0;
}

int64_t sf_registry_worker_id(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    int64_t id = r->state == SF_REG_SERVING ? r->held_id : -1;
    pthread_mutex_unlock(&r->mu);
    return id;
}

int sf_registry_session_timeout_ms(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    int ms = r->negotiated_ms;
    pthread_mutex_unlock(&r->mu);
    return ms;
}

void sf_registry_cancel(sf_registry *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    sf_reg_step(r, SF_REG_EV_STOP, NULL);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void sf_registry_close(sf_registry *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    int64_t until = sf_clocks_boot_ms() + sf_registry_close_wait_ms(r->negotiated_ms);
    pthread_mutex_unlock(&r->mu);
    sf_registry_cancel(r);
    if (r->thread_started)
        pthread_join(r->thread, NULL);
    pthread_mutex_lock(&r->mu);
    while (r->zh_users > 0) /* a peer list read through zh ends within its timeout */
        sf_reg_wait_locked(r, 100);
    pthread_mutex_unlock(&r->mu);
    if (r->zh)
        sf_reg_final_record(r, until);
    /* Nothing may reach the handle once its close began: the client library refuses a
     * request queued then ("marshalling error") and drops a notification that arrives then,
     * leaking both. The callbacks queue requests only on r->zh, under the lock, and it is
     * NULL from here on (requests queued before are answered "closing" by the close); the
     * server forgets our watches before the close, so it notifies us of nothing more. */
    pthread_mutex_lock(&r->mu);
    zhandle_t *zh = r->zh;
    r->zh = NULL;
    pthread_mutex_unlock(&r->mu);
    if (zh) {
        sf_reg_unwatch(r, zh, until);
        zookeeper_close(zh);
    }
    sf_reg_slots_free(r);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    sf_registry_forget(r);
}

void sf_registry_forget(sf_registry *r)
{
    if (!r)
        return;
    free(r->hosts);
    free(r->servers);
    free(r->chroot);
    free(r->worker_id_path);
    free(r->lock_path);
    free(r->state_path);
    free(r->host_port);
    free(r->auth);
    free(r);
}
