/* registry_session.c -- the ZooKeeper session: opening it, waiting for it, the watcher that
 * turns its events into the state machine's, and the paths every claim needs made.
 * Part of the registry (registry.h says where each part lives); knows nothing of sockets. */
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
#include "lib/snowflake.h"

/* The session watcher: turns connection changes into events; never calls into ZooKeeper.
 * Events of a handle already replaced are ignored; other watches (the lock's) wake waiters. */
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
int sf_reg_open_session(sf_registry *r, char *err, size_t errlen)
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
    errno = 0;
    r->zh = zookeeper_init(r->servers, sf_reg_session_watcher, r->o.session_timeout_ms, NULL, r,
                           0);
    bool ok = r->zh != NULL;
    int init_errno = errno;
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
int sf_reg_wait_session(sf_registry *r, char *err, size_t errlen)
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
    sf_zkbatch_read found[N];
    sf_zkbatch batch;
    sf_zkbatch_init(&batch);
    for (int i = 0; i < N; i++)
        sf_zkbatch_exists(&batch, r->zh, paths[i], &found[i]);
    sf_zkbatch_wait(&batch);
    sf_zkbatch_free(&batch);
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

int sf_reg_session_ready(sf_registry *r, uint64_t *conn, char *err, size_t errlen)
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
