/* registry.c -- claims a worker id in ZooKeeper, guards it (fencing) and records its last
 * timestamp: the registry's state machine with the waits on it, its ZooKeeper session, its
 * public calls and its thread.
 *
 * The state machine (sf_reg_state): one function, sf_reg_step, takes every event (from the
 * session watcher, from a renewal's completion, from the thread and from the callers) and
 * moves the state, logging each transition once and queueing the reports the caller's
 * callbacks receive. The thread acts on the state it finds: opens a session while CONNECTING
 * (below), claims while CLAIMING (registry_claim.c), waits for the id's floor and the first
 * lease while WAITING_FLOOR, renews the lease while SERVING (registry_lease.c), and
 * schedules the next try while FENCED.
 *
 * The parts call down, never up into this file, but for the state machine's loop: the claim
 * and the lease give it the events their ZooKeeper answers bring (sf_reg_step) and wait on
 * it (sf_reg_wait_locked, sf_reg_sleep, sf_reg_stopped), so that a stop or any change of
 * state ends their waits at once. The registry knows nothing of sockets: peers are queried
 * through the caller's callback, and the client's descriptors are found by cloexec.h. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include "registry_internal.h"
#include "zkbatch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clocks.h"
#include "common/cloexec.h"
#include "common/jitter.h"
#include "common/threads.h"
#include "common/zkpath.h"
#include "lib/snowflake.h"

/* ---- the state machine ---- */

/* The state's name, for the log. */
static const char *sf_reg_state_name(sf_reg_state s)
{
    static const char *const names[] = {"connecting", "claiming", "waiting for the floor",
                                        "serving", "fenced", "stopping"};
    return names[s];
}

/* Queues a report for delivery outside the lock (lock held); the oldest gives way when
 * full. */
void sf_reg_queue(sf_registry *r, const sf_reg_report *rep)
{
    if (!r->watching)
        return;
    if (r->report_count == SF_REG_REPORTS) {
        r->report_head = (r->report_head + 1) % SF_REG_REPORTS;
        r->report_count--;
    }
    r->reports[(r->report_head + r->report_count) % SF_REG_REPORTS] = *rep;
    r->report_count++;
}

/* Queues "not serving" with reason, unless that very reason was the last one reported
 * (lock held). */
void sf_reg_queue_fenced(sf_registry *r, const char *reason, bool force)
{
    if (!force && strcmp(r->reason, reason) == 0)
        return;
    snprintf(r->reason, sizeof r->reason, "%s", reason);
    sf_reg_report rep = {.is_lease = false, .serving = false, .worker_id = r->held_id,
                         .floor_ms = -1, .until = 0};
    snprintf(rep.reason, sizeof rep.reason, "%s", reason);
    sf_reg_queue(r, &rep);
}

/* Moves to state next, logging the transition once. */
static void sf_reg_move(sf_registry *r, sf_reg_state next, const char *reason)
{
    if (r->state == next)
        return;
    sf_reg_log(r, next == SF_REG_FENCED ? "warning" : "info", "%s -> %s%s%s",
               sf_reg_state_name(r->state), sf_reg_state_name(next), reason ? ": " : "",
               reason ? reason : "");
    r->state = next;
}

/* Fences: stops serving at once (reported) and schedules the next try after the backoff,
 * drawn from its upper half: holders fenced together (every session lost at once) come back
 * spread out, not in one burst. cause is reason's kind, for sf_registry_get_health. */
static void sf_reg_fence(sf_registry *r, sf_registry_cause cause, const char *reason)
{
    bool was_serving = r->state == SF_REG_SERVING;
    r->cause = cause;
    sf_reg_move(r, SF_REG_FENCED, reason);
    r->lease_until = 0;
    sf_reg_queue_fenced(r, reason, was_serving);
    r->retry_at = sf_clocks_boot_ms() + sf_jitter_ms(r->backoff_ms);
    r->backoff_ms = r->backoff_ms * 2 > SF_REG_BACKOFF_MAX_MS ? SF_REG_BACKOFF_MAX_MS
                                                              : r->backoff_ms * 2;
}

/* The session's own state, from its events, whatever the state machine's (lock held): the
 * close of a stopped registry reads it too, and sends ZooKeeper nothing on a session that
 * is gone. */
static void sf_reg_track_session(sf_registry *r, sf_reg_event ev, int64_t now)
{
    switch (ev) {
    case SF_REG_EV_CONNECTED:
        r->reconnects += r->ever_connected;
        r->ever_connected = true;
        r->conn++;
        r->pending_count = 0;
        r->connected = true;
        r->disconnected_since = 0;
        break;
    case SF_REG_EV_DISCONNECTED:
    case SF_REG_EV_EXPIRED:
        r->conn++;
        r->pending_count = 0;
        if (r->connected || r->disconnected_since == 0)
            r->disconnected_since = now;
        r->connected = false;
        if (ev == SF_REG_EV_EXPIRED) {
            r->expired = true;
            r->expirations++;
        }
        break;
    default:
        break;
    }
}

/* The state machine: takes one event (lock held) and moves the state. reason is the
 * event's explanation (for FAILED, NODE_LOST, RENEW_FAILED), or NULL. Stopping, it moves no
 * more, but the session's state still follows its events. */
void sf_reg_step(sf_registry *r, sf_reg_event ev, const char *reason)
{
    int64_t now = sf_clocks_boot_ms();
    sf_reg_track_session(r, ev, now);
    if (r->state == SF_REG_STOPPING) {
        pthread_cond_broadcast(&r->cv);
        return;
    }
    switch (ev) {
    case SF_REG_EV_STOP:
        if (r->state == SF_REG_SERVING)
            sf_reg_queue_fenced(r, "the registry is stopping", true);
        sf_reg_move(r, SF_REG_STOPPING, NULL);
        break;
    case SF_REG_EV_CONNECTED:
        if (r->state == SF_REG_CONNECTING)
            sf_reg_move(r, SF_REG_CLAIMING, NULL);
        break;
    case SF_REG_EV_DISCONNECTED:
        /* Fenced (a renewal or a claim again got no answer), and now cut off from ZooKeeper
         * (a paused or partitioned server): say the latter, which is what to look at. */
        if (r->state != SF_REG_SERVING && r->cause != SF_REGISTRY_CAUSE_STARTING &&
            r->cause != SF_REGISTRY_CAUSE_NONE && r->cause != SF_REGISTRY_CAUSE_UNREACHABLE) {
            r->cause = SF_REGISTRY_CAUSE_UNREACHABLE;
            sf_reg_queue_fenced(r, "disconnected from ZooKeeper while fenced; the session may "
                                   "have expired and another node may hold our worker id",
                                false);
        }
        break;
    case SF_REG_EV_EXPIRED:
        if (r->state == SF_REG_SERVING)
            sf_reg_fence(r, SF_REGISTRY_CAUSE_EXPIRED,
                         "the ZooKeeper session expired; another node may hold our worker id");
        break;
    case SF_REG_EV_CLAIMED:
        if (r->state == SF_REG_CLAIMING)
            sf_reg_move(r, SF_REG_WAITING_FLOOR, NULL);
        sf_reg_slots_watch(r);
        break;
    case SF_REG_EV_RENEWED: {
        bool was_serving = r->state == SF_REG_SERVING;
        r->lease_failing = false;
        if (r->state != SF_REG_SERVING && r->state != SF_REG_WAITING_FLOOR)
            break;
        /* Confirmed, but the lease may not be certified yet (see registry.h): serving
         * begins only on a lease the lease's part found lasting (lease_lasts). */
        if (r->lease_until <= now || (!was_serving && !r->lease_lasts))
            break;
        sf_reg_report rep = {.is_lease = true, .until = r->lease_until,
                             .reserved = r->reserved_until};
        sf_reg_queue(r, &rep);
        if (!was_serving) {
            sf_reg_move(r, SF_REG_SERVING, r->serve_reason);
            r->cause = SF_REGISTRY_CAUSE_NONE;
            r->backoff_ms = SF_REG_BACKOFF_MIN_MS;
            r->reason[0] = '\0';
            sf_reg_report on = {.is_lease = false, .serving = true, .worker_id = r->held_id,
                                .floor_ms = r->floor_ms, .until = r->lease_until,
                                .reserved = r->reserved_until};
            snprintf(on.reason, sizeof on.reason, "%s",
                     r->serve_reason ? r->serve_reason : "worker id claimed");
            sf_reg_queue(r, &on);
        }
        break;
    }
    case SF_REG_EV_RENEW_FAILED:
        if (r->state == SF_REG_SERVING) {
            if (!r->lease_failing)
                sf_reg_log(r, "warning", "cannot renew the lease on worker id %" PRId64 ": %s; "
                           "ids stop when the lease runs out", r->held_id, reason);
            r->lease_failing = true;
        } else if (r->state == SF_REG_WAITING_FLOOR) {
            sf_reg_fence(r, SF_REGISTRY_CAUSE_LEASE, reason);
        }
        break;
    case SF_REG_EV_NODE_LOST:
        if (r->state == SF_REG_SERVING || r->state == SF_REG_WAITING_FLOOR)
            sf_reg_fence(r, SF_REGISTRY_CAUSE_NODE_LOST,
                         "our worker node in ZooKeeper is gone or held by another session; "
                         "another node may hold our worker id");
        r->held_id = r->state == SF_REG_FENCED ? -1 : r->held_id;
        break;
    case SF_REG_EV_FAILED:
        /* Already fenced: the event that fenced us has the more precise reason. */
        if (r->state != SF_REG_SERVING && r->state != SF_REG_FENCED && r->connected) {
            sf_reg_fence(r, SF_REGISTRY_CAUSE_CLAIM, reason);
        } else if (r->state != SF_REG_SERVING && r->state != SF_REG_FENCED) {
            char why[SF_REG_REASON_MAX + 64]; /* the step failed for want of ZooKeeper */
            snprintf(why, sizeof why, "disconnected from ZooKeeper while claiming again (%s)",
                     reason);
            sf_reg_fence(r, SF_REGISTRY_CAUSE_UNREACHABLE, why);
        }
        break;
    case SF_REG_EV_TIMER:
        if (r->state == SF_REG_SERVING) {
            /* A lease that ran out while disconnected is ZooKeeper out of reach, and said so:
             * the operator's first look is the path to the ensemble, not a conflict. */
            bool lease_out = r->lease_until > 0 && now >= r->lease_until;
            if (!r->connected &&
                (lease_out || now - r->disconnected_since >= r->grace_ms))
                sf_reg_fence(r, SF_REGISTRY_CAUSE_UNREACHABLE,
                             "disconnected from ZooKeeper too long; the session may have "
                             "expired and another node may hold our worker id");
            else if (lease_out)
                sf_reg_fence(r, SF_REGISTRY_CAUSE_LEASE,
                             "the lease ran out: ZooKeeper's leader confirmed no renewal in "
                             "time; another node may hold our worker id");
        } else if (r->state == SF_REG_FENCED && now >= r->retry_at) {
            if (r->expired || !r->zh)
                sf_reg_move(r, SF_REG_CONNECTING, "opening a new ZooKeeper session");
            else if (r->connected)
                sf_reg_move(r, SF_REG_CLAIMING, "claiming a worker id again");
        }
        break;
    }
    pthread_cond_broadcast(&r->cv);
}

/* Makes the queued calls of on_state and on_lease, in order, outside the lock. Only the
 * thread that owns the reports calls it (the caller of watch, then the registry's thread). */
static void sf_reg_deliver(sf_registry *r)
{
    for (;;) {
        pthread_mutex_lock(&r->mu);
        if (r->report_count == 0) {
            pthread_mutex_unlock(&r->mu);
            return;
        }
        sf_reg_report rep = r->reports[r->report_head];
        r->report_head = (r->report_head + 1) % SF_REG_REPORTS;
        r->report_count--;
        pthread_mutex_unlock(&r->mu);
        if (rep.is_lease) {
            if (r->o.on_lease)
                r->o.on_lease(r->o.lease_ctx, rep.until, rep.reserved);
        } else if (r->o.on_state) {
            r->o.on_state(r->o.state_ctx, rep.serving, rep.worker_id, rep.floor_ms, rep.until,
                          rep.reserved, rep.reason);
        }
    }
}

void sf_registry_get_health(sf_registry *r, sf_registry_health *out)
{
    pthread_mutex_lock(&r->mu);
    out->session = r->connected                      ? SF_REGISTRY_SESSION_CONNECTED
                   : r->expired                      ? SF_REGISTRY_SESSION_EXPIRED
                   : !r->zh || r->fresh_session      ? SF_REGISTRY_SESSION_CONNECTING
                                                     : SF_REGISTRY_SESSION_DISCONNECTED;
    /* The state now, then what fenced us: out of reach of ZooKeeper outweighs why the lease
     * was lost, since nothing comes back before it answers again. */
    out->cause = r->state == SF_REG_STOPPING  ? SF_REGISTRY_CAUSE_STOPPING
                 : r->state == SF_REG_SERVING ? SF_REGISTRY_CAUSE_NONE
                 : r->floor_wait              ? SF_REGISTRY_CAUSE_FLOOR
                 : !r->connected && r->cause != SF_REGISTRY_CAUSE_STARTING
                     ? SF_REGISTRY_CAUSE_UNREACHABLE
                     : r->cause;
    out->reconnects = r->reconnects;
    out->expirations = r->expirations;
    pthread_mutex_unlock(&r->mu);
}

/* ---- the session: opening it, waiting for it, the watcher that turns its events into the
 * state machine's, and the paths every claim needs made ---- */

/* The client opens its descriptors without close-on-exec: a program's exec'd child would
 * keep a copy of each (cloexec.h says why that matters). Its wake-up pipe is made by
 * zookeeper_init (so a pipe another thread of the program makes meanwhile is marked too),
 * its socket anew on every connection: each is marked once made, the socket when the
 * connection is up. A failure to look is logged once. */
static void sf_reg_cloexec_done(sf_registry *r, int marked)
{
    if (marked >= 0 || atomic_exchange(&r->cloexec_warned, true))
        return;
    sf_reg_log(r, "warning", "cannot mark the ZooKeeper client's descriptors close-on-exec "
               "(/proc/self/fd: %s): a program's exec'd children may inherit them",
               strerror(errno));
}

/* The session watcher: turns connection changes into events; never calls into ZooKeeper.
 * Events of a handle already replaced are ignored; other watches (the lock's) wake waiters. */
void sf_reg_session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)path;
    sf_registry *r = ctx;
    char server[128] = "";
    pthread_mutex_lock(&r->mu);
    if (type == ZOO_SESSION_EVENT && zh == r->zh) {
        if (state == ZOO_CONNECTED_STATE) {
            sf_reg_granted(r, zoo_recv_timeout(zh));
            sf_reg_step(r, SF_REG_EV_CONNECTED, NULL);
            snprintf(server, sizeof server, "%s", zoo_get_current_server(zh));
        }
        else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
            sf_reg_step(r, SF_REG_EV_EXPIRED, NULL);
        else
            sf_reg_step(r, SF_REG_EV_DISCONNECTED, NULL);
    }
    r->events++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (server[0] != '\0')
        sf_reg_cloexec_done(r, sf_cloexec_sockets_to(server));
}

/* Completion of zoo_add_auth: hands the result to the waiting thread. */
static void sf_reg_auth_done(int rc, const void *data)
{
    sf_registry *r = (sf_registry *)data;
    pthread_mutex_lock(&r->mu);
    r->auth_rc = rc;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Frees the slots of renewals sent on a handle now closed: zookeeper_close has run every
 * completion it will (with ZCLOSING), so none comes for them any more. Lock held. */
static void sf_reg_renewals_forget(sf_registry *r, const zhandle_t *closed)
{
    for (int i = 0; i < SF_REG_IN_FLIGHT; i++)
        if (r->renewals[i].zh == closed)
            r->renewals[i].used = false;
}

/* Replaces the session's handle with a new one that starts connecting (the old one, if any,
 * is closed: its session is gone). Does not wait. */
static int sf_reg_open_session(sf_registry *r, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    while (r->zh_users > 0) /* a peer list read through it ends within its timeout */
        sf_reg_wait_locked(r, 100);
    zhandle_t *old = r->zh;
    r->zh = NULL;
    r->connected = false;
    r->expired = false;
    r->fresh_session = true;
    r->anchor = 0;
    r->pending_count = 0;
    pthread_mutex_unlock(&r->mu);
    if (old)
        zookeeper_close(old);
    /* The watcher may run before zookeeper_init returns: it must find the new handle. */
    pthread_mutex_lock(&r->mu);
    sf_reg_renewals_forget(r, old);
    r->session_started = sf_clocks_boot_ms();
    sf_fdset before;
    int listed = sf_cloexec_snapshot(&before);
    sigset_t mask; /* the client's two threads are started inside, with the caller's mask */
    sf_threads_block(&mask);
    errno = 0;
    r->zh = zookeeper_init(r->servers, sf_reg_session_watcher, r->o.session_timeout_ms, NULL, r,
                           0);
    bool ok = r->zh != NULL;
    int init_errno = errno;
    sf_threads_unblock(&mask);
    if (ok)
        sf_reg_cloexec_done(r, listed == 0 ? sf_cloexec_new_pipes(&before) : -1);
    free(before.bits);
    errno = init_errno;
    /* The client resolves the host names again on every turn of its loop unless told not
     * to: once per connection is enough, and a thread inside getaddrinfo when the program
     * forks leaves a lock held in the child (glibc's), where the next resolution hangs. */
    if (ok && zoo_set_servers_resolution_delay(r->zh, -1) != ZOK)
        sf_reg_log(r, "warning", "cannot turn off the ZooKeeper client's routine host name "
                   "resolutions: it resolves '%s' on every turn of its loop", r->hosts);
    pthread_mutex_unlock(&r->mu);
    if (!ok) {
        sf_registry_set_err(err, errlen,
                            "cannot start a ZooKeeper session with '%s' (zookeeper.hosts, a "
                            "comma-separated list of host:port): %s",
                            r->hosts, errno ? strerror(errno) : "refused by the client library");
        return -1;
    }
    return 0;
}

/* Waits for the session to come up (and for the credential, if any). Cancellable. */
static int sf_reg_wait_session(sf_registry *r, char *err, size_t errlen)
{
    int64_t wait_ms = r->o.session_timeout_ms > SF_REG_CONNECT_MIN_MS ? r->o.session_timeout_ms
                                                                      : SF_REG_CONNECT_MIN_MS;
    int64_t end = sf_clocks_boot_ms() + wait_ms;
    pthread_mutex_lock(&r->mu);
    while (!r->connected && !r->expired && !r->stop && sf_clocks_boot_ms() < end)
        sf_reg_wait_locked(r, end - sf_clocks_boot_ms());
    bool ok = r->connected, stop = r->stop, expired = r->expired;
    zhandle_t *zh = r->zh;
    pthread_mutex_unlock(&r->mu);
    if (stop) {
        sf_registry_set_err(err, errlen, "stopped while connecting to ZooKeeper at '%s'", r->hosts);
        return -1;
    }
    if (!ok) {
        sf_registry_set_err(err, errlen, expired
                           ? "ZooKeeper at '%s' (zookeeper.hosts) ended the new session at once "
                             "(a refused credential in zookeeper.auth?)"
                           : "no ZooKeeper server at '%s' (zookeeper.hosts) answered within %" PRId64
                             " ms; check that it runs and that this host can reach it",
                            r->hosts, wait_ms);
        return expired ? -1 : SF_REGISTRY_UNREACHABLE;
    }
    if (!r->auth)
        return 0;
    pthread_mutex_lock(&r->mu);
    r->auth_rc = 1;
    pthread_mutex_unlock(&r->mu);
    int rc = zoo_add_auth(zh, "digest", r->auth, (int)strlen(r->auth), sf_reg_auth_done, r);
    if (rc == ZOK) {
        end = sf_clocks_boot_ms() + wait_ms;
        pthread_mutex_lock(&r->mu);
        while (r->auth_rc == 1 && !r->stop && sf_clocks_boot_ms() < end)
            sf_reg_wait_locked(r, end - sf_clocks_boot_ms());
        rc = r->stop ? ZCLOSING : r->auth_rc == 1 ? ZOPERATIONTIMEOUT : r->auth_rc;
        pthread_mutex_unlock(&r->mu);
    }
    if (rc != ZOK) {
        sf_registry_set_err(err, errlen,
                            "ZooKeeper at '%s' refused the credential in zookeeper.auth "
                            "(user:password): %s", r->hosts, zerror(rc));
        return -1;
    }
    return 0;
}

/* Creates path and its parents as persistent nodes; an existing node is fine. */
static int sf_reg_create_path(sf_registry *r, const char *path, char *err, size_t errlen)
{
    char buf[SF_REG_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        int rc = zoo_create(r->zh, buf, NULL, -1, sf_reg_acl(r), 0, NULL, 0);
        if (rc != ZOK && rc != ZNODEEXISTS) {
            sf_reg_zk_error(r, rc);
            sf_registry_set_err(err, errlen, "cannot create the ZooKeeper path %s: %s%s", buf,
                                zerror(rc), rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
            return -1;
        }
        *p = saved;
        if (saved == '\0')
            return 0;
    }
}

/* Makes sure worker_id_path, lock_path and state_path exist (looked up at once: a read
 * each, where a create of a node that exists would still be a write through the leader). */
static int sf_reg_ensure_paths(sf_registry *r, char *err, size_t errlen)
{
    const char *paths[] = {r->worker_id_path, r->lock_path, r->state_path};
    enum { N = sizeof paths / sizeof paths[0] };
    sf_zkbatch_req found[N];
    for (int i = 0; i < N; i++)
        found[i] = (sf_zkbatch_req){.kind = SF_ZKBATCH_EXISTS, .path = paths[i]};
    sf_zkbatch_send(r->zh, found, N);
    for (int i = 0; i < N; i++) {
        if (found[i].rc == ZOK)
            continue;
        if (found[i].rc != ZNONODE) {
            sf_reg_zk_error(r, found[i].rc);
            sf_registry_set_err(err, errlen, "cannot look up the ZooKeeper path %s: %s",
                                paths[i], zerror(found[i].rc));
            return -1;
        }
        if (sf_reg_create_path(r, paths[i], err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* A single standalone server has no quorum to keep a write once it is lost, nor a second
 * copy of the floors: warn once. An ensemble lists its members in /zookeeper/config. */
static void sf_reg_warn_standalone(sf_registry *r)
{
    char cfg[SF_REG_DATA_MAX * 4];
    int rc = sf_reg_get_string(r, "/zookeeper/config", cfg, sizeof cfg, NULL);
    if (rc == ZOK && strstr(cfg, "server.") == NULL)
        sf_reg_log(r, "warning", "ZooKeeper at %s is a single standalone server, not an "
                   "ensemble: while it is down every node refuses ids, and if its data is lost, "
                   "so are the floors that keep ids from repeating; run three or five servers",
                   r->hosts);
}

static int sf_reg_session_ready(sf_registry *r, uint64_t *conn, char *err, size_t errlen)
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
    *conn = r->conn;
    bool up = r->connected && !r->expired;
    r->zk_failed = false;
    r->not_yet = false;
    pthread_mutex_unlock(&r->mu);
    if (!up) {
        sf_registry_set_err(err, errlen, "the ZooKeeper session with '%s' was lost before "
                            "claiming under %s", r->hosts, r->worker_id_path);
        return SF_REGISTRY_ZK_FAILED;
    }
    if (sf_reg_ensure_paths(r, err, errlen) == 0)
        return 0;
    pthread_mutex_lock(&r->mu);
    rc = r->zk_failed ? SF_REGISTRY_ZK_FAILED : -1; /* ZooKeeper's failure: try again */
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ---- the public calls and the thread ---- */

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
    r->grace_ms = sf_registry_grace_ms(r->negotiated_ms);
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

int sf_registry_claim(sf_registry *r, int64_t *worker_id, int64_t *floor_ms, char *err,
                      size_t errlen)
{
    uint64_t conn;
    int rc = sf_reg_session_ready(r, &conn, err, errlen);
    if (rc != 0)
        return rc;
    int64_t id = -1, floor = -1;
    rc = sf_reg_claim_checks(r, err, errlen);
    if (rc == 0)
        rc = sf_reg_claim_once(r, r->o.claim_retries, r->claim_waits, &id, &floor, err, errlen);
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

/* The claim over several paths: which path the next claim goes under, then the claim
 * above. */

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
static int sf_reg_use_place(sf_registry *r, const sf_registry_place *p, char *err, size_t errlen)
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
    if (sf_reg_use_place(r, &places[i], err, errlen) != 0)
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
    if (!kept && sf_reg_claim_checks(r, err, sizeof err) != 0) {
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
            int64_t renew = sf_reg_renew_wake(r);
            if (renew < wake)
                wake = renew;
            if (!r->connected && r->disconnected_since + r->grace_ms < wake)
                wake = r->disconnected_since + r->grace_ms;
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
    int rc = sf_threads_start(&r->thread, NULL, sf_reg_thread, r);
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
