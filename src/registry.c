/* registry.c -- claims a worker id in ZooKeeper, guards it (fencing) and records its last timestamp. */
#define _POSIX_C_SOURCE 200809L
#include "registry.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* The synchronous API exists only in the multi-threaded client. */
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#include "snowflake.h"

#define PATH_MAX_LEN 1024
#define DATA_MAX_LEN 512
/* A peer answering worker id -1 is between creating its node and using the id: ask again. */
#define PEER_STARTING_TRIES 20
#define PEER_STARTING_WAIT_MS 50

struct sf_registry {
    sf_registry_options o;   /* strings below are our own copies */
    char *hosts, *worker_id_path, *lock_path, *state_path, *host_port, *auth;
    int64_t wanted_id;       /* the configured id, -1 = automatic */
    zhandle_t *zh;
    int negotiated_ms;
    struct ACL acl[2];       /* with a credential: its holders ALL, everyone READ */
    struct ACL_vector acl_vec;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool connected;          /* the session is established and the connection up */
    bool expired;            /* the session is gone: a new handle is needed */
    int64_t disconnected_since; /* monotonic ms, 0 while connected */
    uint64_t events;         /* bumped by every watch, so waiters see a change */
    int auth_rc;             /* result of zoo_add_auth, 1 while pending */

    int64_t held_id;         /* -1 while no id is held */
    bool serving;
    bool stop;
    bool thread_started;
    pthread_t thread;
    int64_t next_state_write;
    int64_t next_lease_renew; /* monotonic ms */
    int64_t lease_until;      /* CLOCK_BOOTTIME ms: the last lease reported */
};

/* Formats into a caller's buffer; every error path uses it so messages are never lost. */
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Sends a message to the caller's log, or to standard error without one. */
static void reg_log(sf_registry *r, const char *level, const char *fmt, ...)
{
    char msg[SF_REGISTRY_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->o.log)
        r->o.log(r->o.log_ctx, level, msg);
    else
        fprintf(stderr, "snowflaked: registry: %s: %s\n", level, msg);
}

/* Sleeps ms milliseconds; used for the waits between claim attempts. */
static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Milliseconds on the monotonic clock: intervals and timeouts must not move
 * when the wall clock is stepped, least of all the time spent disconnected,
 * which decides when to stop handing out ids. */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sf_registry_boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An absolute CLOCK_MONOTONIC deadline ms from now, for pthread_cond_timedwait
 * (r->cv waits on the monotonic clock). */
static struct timespec deadline_in(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Waits ms unless sf_registry_cancel() is called meanwhile: false when stopped. */
static bool wait_unless_stopped(sf_registry *r, int64_t ms)
{
    struct timespec until = deadline_in(ms);
    pthread_mutex_lock(&r->mu);
    while (!r->stop && pthread_cond_timedwait(&r->cv, &r->mu, &until) != ETIMEDOUT) {
    }
    bool stopped = r->stop;
    pthread_mutex_unlock(&r->mu);
    return !stopped;
}

/* The session watcher: records connection state; never calls back into ZooKeeper. */
static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    sf_registry *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (type == ZOO_SESSION_EVENT) {
        if (state == ZOO_CONNECTED_STATE) {
            r->connected = true;
            r->disconnected_since = 0;
        } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
            r->expired = true;
            if (r->connected || r->disconnected_since == 0)
                r->disconnected_since = mono_ms();
            r->connected = false;
        } else if (r->connected) {
            r->connected = false;
            r->disconnected_since = mono_ms();
        }
    }
    r->events++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Completion of zoo_add_auth: hands the result to the waiting thread. */
static void auth_done(int rc, const void *data)
{
    sf_registry *r = (sf_registry *)data;
    pthread_mutex_lock(&r->mu);
    r->auth_rc = rc;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Opens a new session and waits for it (a session exists only once CONNECTED is seen),
 * then adds the digest credential if one is configured. */
static int connect_session(sf_registry *r, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    r->connected = false;
    r->expired = false;
    r->disconnected_since = 0;
    pthread_mutex_unlock(&r->mu);

    r->zh = zookeeper_init(r->hosts, session_watcher, r->o.session_timeout_ms, NULL, r, 0);
    if (!r->zh) {
        set_err(err, errlen, "cannot start a ZooKeeper session with '%s' (zookeeper.hosts): %s",
                r->hosts, strerror(errno));
        return -1;
    }
    int64_t wait_ms = r->o.session_timeout_ms > 5000 ? r->o.session_timeout_ms : 5000;
    struct timespec until = deadline_in(wait_ms);
    pthread_mutex_lock(&r->mu);
    while (!r->connected && !r->expired && !r->stop) {
        if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT)
            break;
    }
    bool ok = r->connected;
    pthread_mutex_unlock(&r->mu);
    if (!ok) {
        set_err(err, errlen,
                "no ZooKeeper server at '%s' (zookeeper.hosts) answered within %" PRId64 " ms",
                r->hosts, wait_ms);
        zookeeper_close(r->zh);
        r->zh = NULL;
        return -1;
    }
    r->negotiated_ms = zoo_recv_timeout(r->zh);

    if (r->auth) {
        pthread_mutex_lock(&r->mu);
        r->auth_rc = 1;
        pthread_mutex_unlock(&r->mu);
        int rc = zoo_add_auth(r->zh, "digest", r->auth, (int)strlen(r->auth), auth_done, r);
        if (rc == ZOK) {
            until = deadline_in(wait_ms);
            pthread_mutex_lock(&r->mu);
            while (r->auth_rc == 1) {
                if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT)
                    break;
            }
            rc = r->auth_rc == 1 ? ZOPERATIONTIMEOUT : r->auth_rc;
            pthread_mutex_unlock(&r->mu);
        }
        if (rc != ZOK) {
            set_err(err, errlen, "ZooKeeper refused the credential in zookeeper.auth: %s",
                    zerror(rc));
            zookeeper_close(r->zh);
            r->zh = NULL;
            return -1;
        }
    }
    return 0;
}

/* The session id of the current handle, to recognise our own ephemeral nodes. */
static int64_t session_id(sf_registry *r)
{
    const clientid_t *cid = zoo_client_id(r->zh);
    return cid ? cid->client_id : 0;
}

/* The ACL for every node we create: with a credential, only its holders may change
 * them and everyone may read; without, the original's open ACL. */
static struct ACL_vector *node_acl(sf_registry *r)
{
    if (!r->auth)
        return &ZOO_OPEN_ACL_UNSAFE;
    r->acl[0].perms = ZOO_PERM_ALL;
    r->acl[0].id.scheme = (char *)"auth";
    r->acl[0].id.id = (char *)"";
    r->acl[1].perms = ZOO_PERM_READ;
    r->acl[1].id.scheme = (char *)"world";
    r->acl[1].id.id = (char *)"anyone";
    r->acl_vec.count = 2;
    r->acl_vec.data = r->acl;
    return &r->acl_vec;
}

/* Creates path and its parents as persistent nodes; an existing node is fine. */
static int ensure_path(sf_registry *r, const char *path, char *err, size_t errlen)
{
    char buf[PATH_MAX_LEN];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        int rc = zoo_create(r->zh, buf, NULL, -1, node_acl(r), 0, NULL, 0);
        if (rc != ZOK && rc != ZNODEEXISTS) {
            set_err(err, errlen, "cannot create the ZooKeeper path %s: %s%s", buf, zerror(rc),
                    rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
            return -1;
        }
        *p = saved;
        if (saved == '\0')
            return 0;
    }
}

/* Reads a node's data as a string. Returns a ZooKeeper code. */
static int get_string(sf_registry *r, const char *path, char *out, size_t outlen,
                      struct Stat *stat)
{
    int len = (int)outlen - 1;
    int rc = zoo_get(r->zh, path, 0, out, &len, stat);
    if (rc == ZOK)
        out[len < 0 ? 0 : len] = '\0';
    else
        out[0] = '\0';
    return rc;
}

/* Parses a child name as a worker id 0..31; false for anything else. */
static bool parse_worker_id(const char *name, int64_t *id)
{
    char *end;
    errno = 0;
    long v = strtol(name, &end, 10);
    if (errno || end == name || *end || v < 0 || v > SF_MAX_WORKER_ID)
        return false;
    *id = v;
    return true;
}

/* True when worker_id_path/other exists and holds host_port: the peer at
 * host_port really holds that other id. */
static bool holds_other_node(sf_registry *r, const char *host_port, int64_t other)
{
    char path[PATH_MAX_LEN], data[DATA_MAX_LEN];
    if (other < 0 || other > SF_MAX_WORKER_ID)
        return false;
    snprintf(path, sizeof path, "%s/%" PRId64, r->worker_id_path, other);
    return get_string(r, path, data, sizeof data, NULL) == ZOK && strcmp(data, host_port) == 0;
}

/* The original's sanity checks: every peer must report the id it holds and our
 * datacenter, and the peers' mean clock must be near ours. */
static int check_peers(sf_registry *r, char *err, size_t errlen)
{
    if (r->o.skip_sanity_checks) {
        reg_log(r, "warning", "peer sanity checks skipped (skip_sanity_checks = true)");
        return 0;
    }
    if (!r->o.query_peer) {
        set_err(err, errlen, "no way to query peers was given for the sanity checks");
        return -1;
    }
    struct String_vector kids = {0, NULL};
    int rc = zoo_get_children(r->zh, r->worker_id_path, 0, &kids);
    if (rc != ZOK) {
        set_err(err, errlen, "cannot list %s: %s", r->worker_id_path, zerror(rc));
        return -1;
    }
    int result = 0;
    int64_t sum = 0, count = 0;
    for (int i = 0; i < kids.count && result == 0; i++) {
        int64_t id;
        char path[PATH_MAX_LEN], peer[DATA_MAX_LEN], perr[SF_REGISTRY_ERR_MAX];
        if (!parse_worker_id(kids.data[i], &id)) {
            reg_log(r, "warning", "ignoring %s/%s: not a worker id 0..31", r->worker_id_path,
                    kids.data[i]);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", r->worker_id_path, kids.data[i]);
        if (get_string(r, path, peer, sizeof peer, NULL) != ZOK)
            continue; /* gone meanwhile */
        if (r->host_port && strcmp(peer, r->host_port) == 0)
            continue;
        int64_t pw = -1, pd = -1, pt = 0;
        reg_log(r, "info", "checking peer %s (worker id %" PRId64 ")", peer, id);
        int qrc = r->o.query_peer(r->o.peer_ctx, peer, &pw, &pd, &pt, perr, sizeof perr);
        /* A peer that has just created its node may not have taken the id yet. */
        for (int wait = 0; qrc == 0 && pw == -1 && wait < PEER_STARTING_TRIES; wait++) {
            sleep_ms(PEER_STARTING_WAIT_MS);
            qrc = r->o.query_peer(r->o.peer_ctx, peer, &pw, &pd, &pt, perr, sizeof perr);
        }
        if (qrc != 0) {
            if (r->o.skip_unreachable_peers) {
                reg_log(r, "warning", "peer %s (worker id %" PRId64 ") is unreachable, skipped: %s",
                        peer, id, perr);
                continue;
            }
            set_err(err, errlen,
                    "peer %s holding worker id %" PRId64 " under %s is unreachable: %s; start it, "
                    "release its stale node (snowflake-zk release %" PRId64 "), or set "
                    "skip_unreachable_peers = true",
                    peer, id, r->worker_id_path, perr, id);
            result = -1;
        } else if (pw != id && holds_other_node(r, peer, pw)) {
            /* A process restarted at the same address took another id while
             * the node of its previous session waits to expire. */
            if (r->o.skip_unreachable_peers) {
                reg_log(r, "warning", "%s is stale, skipped: %s now holds worker id %" PRId64
                        " (a restarted node; the old session has not expired yet)",
                        path, peer, pw);
                continue;
            }
            set_err(err, errlen,
                    "%s is stale: %s now holds worker id %" PRId64 " under its own node; it "
                    "disappears when its session expires, or release it (snowflake-zk release %"
                    PRId64 "), or set skip_unreachable_peers = true",
                    path, peer, pw, id);
            result = -1;
        } else if (pw != id) {
            set_err(err, errlen,
                    "worker id insanity: %s holds %s in ZooKeeper but says its worker id is %" PRId64,
                    peer, path, pw);
            result = -1;
        } else if (pd != r->o.datacenter_id) {
            set_err(err, errlen,
                    "datacenter id insanity: %s under %s has datacenter id %" PRId64
                    ", ours is %" PRId64 " (each datacenter needs its own worker_id_path)",
                    peer, r->worker_id_path, pd, r->o.datacenter_id);
            result = -1;
        } else {
            sum += pt;
            count++;
        }
    }
    deallocate_String_vector(&kids);
    if (result == 0 && count > 0) {
        int64_t mean = sum / count, now = sf_clock_now_ms();
        int64_t diff = now > mean ? now - mean : mean - now;
        if (diff > r->o.max_clock_skew_ms) {
            set_err(err, errlen,
                    "timestamp sanity check failed: the mean of %" PRId64 " peers' clocks is %" PRId64
                    " ms, ours is %" PRId64 " ms, %" PRId64 " ms apart (at most %" PRId64 " allowed)",
                    count, mean, now, diff, r->o.max_clock_skew_ms);
            result = -1;
        }
    }
    return result;
}

/* Tries once to create worker_id_path/id holding our host:port. Returns 1 when we hold it
 * (also when an ambiguous earlier attempt already made it ours), 0 when another session
 * holds it (holder filled), -1 on a ZooKeeper error (err filled). */
static int try_create_worker(sf_registry *r, int64_t id, char *holder, size_t holderlen,
                             char *err, size_t errlen)
{
    char path[PATH_MAX_LEN];
    snprintf(path, sizeof path, "%s/%" PRId64, r->worker_id_path, id);
    const char *data = r->host_port ? r->host_port : "";
    int rc = zoo_create(r->zh, path, data, (int)strlen(data), node_acl(r), ZOO_EPHEMERAL, NULL, 0);
    if (rc == ZOK)
        return 1;
    if (rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT) {
        set_err(err, errlen, "cannot create %s: %s%s", path, zerror(rc),
                rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
        return -1;
    }
    /* Exists, or unknown after a lost connection: whose is it? */
    struct Stat st;
    int grc = get_string(r, path, holder, holderlen, &st);
    if (grc == ZOK && st.ephemeralOwner == session_id(r))
        return 1;
    if (grc == ZOK)
        return 0;
    if (grc == ZNONODE && rc == ZNODEEXISTS) {
        snprintf(holder, holderlen, "(a node that has just gone)");
        return 0;
    }
    set_err(err, errlen, "cannot create %s: %s", path, zerror(rc));
    return -1;
}

/* Claims the configured id, retrying while another session holds it (perhaps our own
 * previous one, not yet expired). */
static int claim_static(sf_registry *r, int64_t *id, char *err, size_t errlen, int retries)
{
    char holder[DATA_MAX_LEN] = "";
    for (int attempt = 0; attempt <= retries; attempt++) {
        if (attempt > 0) {
            reg_log(r, "warning", "worker id %" PRId64 " is held by %s; retry %d of %d in %d ms",
                    r->wanted_id, holder, attempt, retries, r->o.claim_retry_wait_ms);
            if (!wait_unless_stopped(r, r->o.claim_retry_wait_ms)) {
                set_err(err, errlen, "stopped");
                return -1;
            }
        }
        int got = try_create_worker(r, r->wanted_id, holder, sizeof holder, err, errlen);
        if (got < 0)
            return -1;
        if (got == 1) {
            *id = r->wanted_id;
            return 0;
        }
    }
    set_err(err, errlen, "worker id %" PRId64 " is already held by %s (%s/%" PRId64 ")",
            r->wanted_id, holder, r->worker_id_path, r->wanted_id);
    return -1;
}

/* Orders lock nodes by their sequence suffix (the part after the last '-'). */
static int cmp_lock(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    const char *sx = strrchr(x, '-'), *sy = strrchr(y, '-');
    return strcmp(sx ? sx : x, sy ? sy : y);
}

/* Finds the lock node our session created when the create's answer was lost. */
static bool find_own_lock(sf_registry *r, char *out, size_t outlen)
{
    struct String_vector kids = {0, NULL};
    bool found = false;
    if (zoo_get_children(r->zh, r->lock_path, 0, &kids) != ZOK)
        return false;
    for (int i = 0; i < kids.count && !found; i++) {
        char path[PATH_MAX_LEN];
        struct Stat st;
        snprintf(path, sizeof path, "%s/%s", r->lock_path, kids.data[i]);
        if (zoo_exists(r->zh, path, 0, &st) == ZOK && st.ephemeralOwner == session_id(r)) {
            snprintf(out, outlen, "%s", path);
            found = true;
        }
    }
    deallocate_String_vector(&kids);
    return found;
}

/* Takes the lock: our sequential node, then wait only for our predecessor to go. */
static int take_lock(sf_registry *r, char *mine, size_t minelen, char *err, size_t errlen)
{
    char prefix[PATH_MAX_LEN];
    snprintf(prefix, sizeof prefix, "%s/lock-", r->lock_path);
    int rc = zoo_create(r->zh, prefix, NULL, -1, node_acl(r), ZOO_EPHEMERAL_SEQUENTIAL, mine,
                        (int)minelen);
    if ((rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) && find_own_lock(r, mine, minelen))
        rc = ZOK;
    if (rc != ZOK) {
        set_err(err, errlen, "cannot create a lock node under %s: %s", r->lock_path, zerror(rc));
        return -1;
    }
    const char *my_name = strrchr(mine, '/') + 1;
    for (;;) {
        struct String_vector kids = {0, NULL};
        rc = zoo_get_children(r->zh, r->lock_path, 0, &kids);
        if (rc != ZOK) {
            set_err(err, errlen, "cannot list %s: %s", r->lock_path, zerror(rc));
            return -1;
        }
        qsort(kids.data, (size_t)kids.count, sizeof kids.data[0], cmp_lock);
        int idx = -1;
        for (int i = 0; i < kids.count; i++)
            if (strcmp(kids.data[i], my_name) == 0)
                idx = i;
        if (idx < 0) {
            deallocate_String_vector(&kids);
            set_err(err, errlen, "our lock node %s disappeared (session lost)", mine);
            return -1;
        }
        if (idx == 0) {
            deallocate_String_vector(&kids);
            return 0;
        }
        char pred[PATH_MAX_LEN];
        snprintf(pred, sizeof pred, "%s/%s", r->lock_path, kids.data[idx - 1]);
        deallocate_String_vector(&kids);
        pthread_mutex_lock(&r->mu);
        uint64_t seen = r->events;
        pthread_mutex_unlock(&r->mu);
        rc = zoo_wexists(r->zh, pred, session_watcher, r, NULL);
        if (rc == ZNONODE)
            continue;
        if (rc != ZOK) {
            set_err(err, errlen, "cannot watch %s: %s", pred, zerror(rc));
            return -1;
        }
        pthread_mutex_lock(&r->mu);
        while (r->events == seen && !r->stop && !r->expired) {
            struct timespec until = deadline_in(500);
            pthread_cond_timedwait(&r->cv, &r->mu, &until);
        }
        bool give_up = r->stop || r->expired;
        pthread_mutex_unlock(&r->mu);
        if (give_up) {
            set_err(err, errlen, "stopped while waiting for the lock %s", mine);
            return -1;
        }
    }
}

/* Lists every holder "id=host:port" into out, for the message when all ids are taken. */
static void list_holders(sf_registry *r, char *out, size_t outlen)
{
    size_t used = 0;
    out[0] = '\0';
    for (int64_t id = 0; id < SF_REGISTRY_MAX_WORKERS && used < outlen; id++) {
        char path[PATH_MAX_LEN], data[DATA_MAX_LEN];
        snprintf(path, sizeof path, "%s/%" PRId64, r->worker_id_path, id);
        if (get_string(r, path, data, sizeof data, NULL) != ZOK)
            continue;
        int n = snprintf(out + used, outlen - used, "%s%" PRId64 "=%s", used ? ", " : "", id, data);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* Under the lock, claims the lowest free id 0..31. */
static int claim_lowest_free(sf_registry *r, int64_t *id, char *err, size_t errlen)
{
    struct String_vector kids = {0, NULL};
    bool taken[SF_REGISTRY_MAX_WORKERS] = {false};
    int rc = zoo_get_children(r->zh, r->worker_id_path, 0, &kids);
    if (rc != ZOK) {
        set_err(err, errlen, "cannot list %s: %s", r->worker_id_path, zerror(rc));
        return -1;
    }
    for (int i = 0; i < kids.count; i++) {
        int64_t k;
        if (parse_worker_id(kids.data[i], &k))
            taken[k] = true;
    }
    deallocate_String_vector(&kids);
    for (int64_t k = 0; k < SF_REGISTRY_MAX_WORKERS; k++) {
        char holder[DATA_MAX_LEN];
        if (taken[k])
            continue;
        int got = try_create_worker(r, k, holder, sizeof holder, err, errlen);
        if (got < 0)
            return -1;
        if (got == 1) {
            *id = k;
            return 0;
        }
    }
    char holders[SF_REGISTRY_ERR_MAX - 256];
    list_holders(r, holders, sizeof holders);
    set_err(err, errlen, "all %d worker ids under %s are taken: %s", SF_REGISTRY_MAX_WORKERS,
            r->worker_id_path, holders);
    return -1;
}

/* Automatic id: lock recipe, lowest free id, unlock. */
static int claim_auto(sf_registry *r, int64_t *id, char *err, size_t errlen)
{
    char mine[PATH_MAX_LEN];
    if (take_lock(r, mine, sizeof mine, err, errlen) != 0)
        return -1;
    int result = claim_lowest_free(r, id, err, errlen);
    int rc = zoo_delete(r->zh, mine, -1);
    if (rc != ZOK && rc != ZNONODE)
        reg_log(r, "warning", "cannot delete the lock node %s: %s (it goes with the session)",
                mine, zerror(rc));
    return result;
}

/* Deletes our worker node, e.g. when we must not serve after claiming it. */
static void release_worker(sf_registry *r, int64_t id)
{
    char path[PATH_MAX_LEN];
    snprintf(path, sizeof path, "%s/%" PRId64, r->worker_id_path, id);
    int rc = zoo_delete(r->zh, path, -1);
    if (rc != ZOK && rc != ZNONODE)
        reg_log(r, "warning", "cannot delete %s: %s", path, zerror(rc));
}

/* Reads the last timestamp recorded for id; -1 if none. */
static int64_t read_floor(sf_registry *r, int64_t id)
{
    char path[PATH_MAX_LEN], data[64];
    snprintf(path, sizeof path, "%s/%" PRId64, r->state_path, id);
    if (get_string(r, path, data, sizeof data, NULL) != ZOK)
        return -1;
    char *end;
    long long v = strtoll(data, &end, 10);
    if (end == data || *end) {
        reg_log(r, "warning", "%s holds '%s', not a timestamp in ms; ignored", path, data);
        return -1;
    }
    return v;
}

/* Restart safety: waits until our clock is past the recorded timestamp for id, if that is
 * at most max_clock_backward_wait_ms away; otherwise fails. */
static int wait_for_floor(sf_registry *r, int64_t id, int64_t *floor_ms, char *err, size_t errlen)
{
    int64_t floor = read_floor(r, id);
    *floor_ms = floor;
    int64_t now = sf_clock_now_ms();
    if (floor < now)
        return 0;
    int64_t behind = floor - now + 1;
    if (behind > r->o.max_clock_backward_wait_ms) {
        set_err(err, errlen,
                "our clock is %" PRId64 " ms behind the last timestamp recorded for worker id %"
                PRId64 " (%s/%" PRId64 " = %" PRId64 "); ids could repeat. Fix the clock, or allow "
                "waiting with max_clock_backward_wait_ms >= %" PRId64 " (0..60000)",
                behind, id, r->state_path, id, floor, behind);
        return -1;
    }
    reg_log(r, "warning", "waiting %" PRId64 " ms for the clock to pass the last timestamp "
            "recorded for worker id %" PRId64, behind, id);
    while (sf_clock_now_ms() <= floor) {
        if (!wait_unless_stopped(r, floor - sf_clock_now_ms() + 1)) {
            set_err(err, errlen, "stopped");
            return -1;
        }
    }
    return 0;
}

/* Writes max(now, last id's timestamp) as the last timestamp of the held id. */
static void record_timestamp(sf_registry *r, int64_t id)
{
    char path[PATH_MAX_LEN], data[32];
    int64_t ts = sf_clock_now_ms();
    if (r->o.last_timestamp) {
        int64_t last = r->o.last_timestamp(r->o.last_ts_ctx);
        if (last > ts)
            ts = last;
    }
    snprintf(path, sizeof path, "%s/%" PRId64, r->state_path, id);
    snprintf(data, sizeof data, "%" PRId64, ts);
    int rc = zoo_set(r->zh, path, data, (int)strlen(data), -1);
    if (rc == ZNONODE)
        rc = zoo_create(r->zh, path, data, (int)strlen(data), node_acl(r), 0, NULL, 0);
    if (rc == ZNODEEXISTS)
        rc = zoo_set(r->zh, path, data, (int)strlen(data), -1);
    if (rc != ZOK)
        reg_log(r, "warning", "cannot record the last timestamp in %s: %s", path, zerror(rc));
}

/* One claim of an id (static: a single try unless retries > 0; auto: the lock recipe),
 * followed by the restart-safety wait. */
static int claim_once(sf_registry *r, int retries, int64_t *id, int64_t *floor_ms, char *err,
                      size_t errlen)
{
    int rc = r->wanted_id >= 0 ? claim_static(r, id, err, errlen, retries)
                               : claim_auto(r, id, err, errlen);
    if (rc != 0)
        return -1;
    if (wait_for_floor(r, *id, floor_ms, err, errlen) != 0) {
        release_worker(r, *id);
        return -1;
    }
    return 0;
}

/* Level 0 turns the client library's logging off entirely. */
void sf_registry_set_client_logging(bool verbose)
{
    zoo_set_debug_level(verbose ? ZOO_LOG_LEVEL_WARN : (ZooLogLevel)0);
}

void sf_registry_options_init(sf_registry_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->session_timeout_ms = 10000;
    opts->worker_id_path = "/snowflake-servers";
    opts->worker_id = -1;
    opts->claim_retries = 2;
    opts->claim_retry_wait_ms = -1;
    opts->max_clock_skew_ms = 10000;
    opts->state_interval_ms = 2000;
}

/* Duplicates a string, or makes "<path><suffix>" when s is NULL. */
static char *dup_or_derive(const char *s, const char *path, const char *suffix)
{
    if (s)
        return strdup(s);
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s%s", path, suffix);
    return out;
}

/* Checks that a ZooKeeper path is absolute and has no trailing or double slash. */
static bool valid_path(const char *p)
{
    size_t n = strlen(p);
    return n > 1 && n < PATH_MAX_LEN / 2 && p[0] == '/' && p[n - 1] != '/' && !strstr(p, "//");
}

sf_registry *sf_registry_new(const sf_registry_options *opts, char *err, size_t errlen)
{
    if (!opts->hosts || !*opts->hosts) {
        set_err(err, errlen, "zookeeper.hosts is empty: name at least one host:port");
        return NULL;
    }
    if (!opts->worker_id_path || !valid_path(opts->worker_id_path) ||
        (opts->lock_path && !valid_path(opts->lock_path)) ||
        (opts->state_path && !valid_path(opts->state_path))) {
        set_err(err, errlen, "worker_id_path '%s' must be an absolute ZooKeeper path like "
                "/snowflake-servers, without a trailing slash",
                opts->worker_id_path ? opts->worker_id_path : "");
        return NULL;
    }
    if (opts->worker_id < -1 || opts->worker_id > SF_MAX_WORKER_ID) {
        set_err(err, errlen, "worker_id %" PRId64 " is out of range (0..31, or auto)",
                opts->worker_id);
        return NULL;
    }
    if (opts->auth && !strchr(opts->auth, ':')) {
        set_err(err, errlen, "zookeeper.auth must be user:password");
        return NULL;
    }
    sf_registry *r = calloc(1, sizeof *r);
    if (!r) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    r->o = *opts;
    if (r->o.claim_retry_wait_ms < 0)
        r->o.claim_retry_wait_ms = r->o.session_timeout_ms;
    if (r->o.state_interval_ms <= 0)
        r->o.state_interval_ms = 2000;
    r->hosts = strdup(opts->hosts);
    r->worker_id_path = strdup(opts->worker_id_path);
    r->lock_path = dup_or_derive(opts->lock_path, opts->worker_id_path, "-locks");
    r->state_path = dup_or_derive(opts->state_path, opts->worker_id_path, "-state");
    r->host_port = opts->host_port ? strdup(opts->host_port) : NULL;
    r->auth = opts->auth && *opts->auth ? strdup(opts->auth) : NULL;
    r->wanted_id = opts->worker_id;
    r->held_id = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &cattr);
    pthread_condattr_destroy(&cattr);
    if (!r->hosts || !r->worker_id_path || !r->lock_path || !r->state_path ||
        (opts->host_port && !r->host_port) || (opts->auth && *opts->auth && !r->auth)) {
        set_err(err, errlen, "out of memory");
        sf_registry_close(r);
        return NULL;
    }
    if (connect_session(r, err, errlen) != 0) {
        sf_registry_close(r);
        return NULL;
    }
    reg_log(r, "info", "ZooKeeper session 0x%" PRIx64 " with %s, timeout %d ms",
            (uint64_t)session_id(r), r->hosts, r->negotiated_ms);
    return r;
}

int sf_registry_claim(sf_registry *r, int64_t *worker_id, int64_t *floor_ms, char *err,
                      size_t errlen)
{
    if (ensure_path(r, r->worker_id_path, err, errlen) != 0 ||
        ensure_path(r, r->lock_path, err, errlen) != 0 ||
        ensure_path(r, r->state_path, err, errlen) != 0)
        return -1;
    if (check_peers(r, err, errlen) != 0)
        return -1;
    int64_t id = -1, floor = -1;
    if (claim_once(r, r->o.claim_retries, &id, &floor, err, errlen) != 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    r->held_id = id;
    pthread_mutex_unlock(&r->mu);
    reg_log(r, "info", "claimed worker id %" PRId64 " (%s/%" PRId64 " = %s)", id,
            r->worker_id_path, id, r->host_port ? r->host_port : "");
    *worker_id = id;
    *floor_ms = floor;
    return 0;
}

/* Calls on_state outside the lock; without one, logs the transition itself
 * (with one, the caller logs it, once). */
static void report(sf_registry *r, bool serving, int64_t id, int64_t floor, const char *reason)
{
    if (r->o.on_state)
        r->o.on_state(r->o.state_ctx, serving, id, floor, serving ? r->lease_until : 0, reason);
    else if (serving)
        reg_log(r, "info", "serving as worker id %" PRId64, id);
    else
        reg_log(r, "error", "not serving: %s", reason);
}

/* Asks ZooKeeper whether worker_id_path/id exists and belongs to our current session:
 * 1 = yes, 0 = no answer (connection lost, timeout), -1 = ZooKeeper says it is not ours. */
static int check_own(sf_registry *r, int64_t id)
{
    char path[PATH_MAX_LEN];
    struct Stat st;
    snprintf(path, sizeof path, "%s/%" PRId64, r->worker_id_path, id);
    int rc = zoo_exists(r->zh, path, 0, &st);
    if (rc == ZOK)
        return st.ephemeralOwner == session_id(r) ? 1 : -1;
    return rc == ZNONODE ? -1 : 0;
}

/* True if worker_id_path/id exists and belongs to our current session. */
static bool still_own(sf_registry *r, int64_t id)
{
    return check_own(r, id) == 1;
}

/* The lease's length and renewal period: a session is alive for at least the negotiated
 * timeout after a round trip was sent; 2/3 of it leaves a margin for clock-rate
 * differences and for the next holder's claim, and renewing every 1/6 keeps the lease
 * valid through a few slow or failed round trips in a row. */
static int64_t lease_length_ms(sf_registry *r)
{
    return (int64_t)r->negotiated_ms * 2 / 3;
}

static int64_t lease_period_ms(sf_registry *r)
{
    int64_t period = r->negotiated_ms / 6;
    return period > 0 ? period : 1;
}

/* Renews the lease by evidence that the session is alive: a synchronous round trip that
 * finds our worker node owned by our session. t0 is taken before the request goes out,
 * so the lease never outlasts what ZooKeeper promised. On success reports the lease
 * through on_lease and returns 1; a failed round trip renews nothing and returns 0, or
 * -1 when ZooKeeper answered that the node is gone or another session's. */
static int renew_lease(sf_registry *r, int64_t id)
{
    int64_t t0 = mono_ms(), boot0 = sf_registry_boot_ms();
    int own = check_own(r, id);
    if (own != 1)
        return own;
    r->lease_until = boot0 + lease_length_ms(r);
    if (r->o.on_lease)
        r->o.on_lease(r->o.lease_ctx, r->lease_until);
    pthread_mutex_lock(&r->mu);
    r->next_lease_renew = t0 + lease_period_ms(r);
    pthread_mutex_unlock(&r->mu);
    return 1;
}

/* While not serving: re-opens an expired session and claims an id again. Returns true
 * once serving again. */
static bool try_reclaim(sf_registry *r)
{
    char err[SF_REGISTRY_ERR_MAX];
    pthread_mutex_lock(&r->mu);
    bool expired = r->expired, connected = r->connected;
    pthread_mutex_unlock(&r->mu);
    if (expired) {
        reg_log(r, "warning", "ZooKeeper session expired; opening a new one");
        zookeeper_close(r->zh);
        r->zh = NULL;
        if (connect_session(r, err, sizeof err) != 0) {
            reg_log(r, "error", "%s", err);
            return false;
        }
        connected = true;
    }
    if (!connected)
        return false;
    int64_t id = -1, floor = -1;
    pthread_mutex_lock(&r->mu);
    int64_t last = r->held_id;
    pthread_mutex_unlock(&r->mu);
    if (last >= 0 && still_own(r, last)) {
        id = last; /* the session survived: our node is still there */
        floor = read_floor(r, id);
    } else if (claim_once(r, 0, &id, &floor, err, sizeof err) != 0) {
        reg_log(r, "warning", "claiming a worker id again failed, will retry: %s", err);
        return false;
    }
    if (renew_lease(r, id) != 1) {
        reg_log(r, "warning", "worker node %s/%" PRId64 " is not ours right after claiming it; "
                "will claim again", r->worker_id_path, id);
        return false;
    }
    pthread_mutex_lock(&r->mu);
    bool still = r->connected && !r->expired;
    if (still) {
        r->held_id = id;
        r->serving = true;
        r->next_state_write = 0;
    }
    pthread_mutex_unlock(&r->mu);
    if (still)
        report(r, true, id, floor, "claimed again");
    return still;
}

/* The registry's thread: fences on session loss, claims again, records timestamps. */
static void *watch_loop(void *arg)
{
    sf_registry *r = arg;
    int64_t next_retry = 0;
    bool lease_failing = false; /* warn once per run of failed renewals */
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        int64_t now = mono_ms();
        int64_t fence_ms = r->negotiated_ms / 3;
        if (r->serving) {
            const char *reason = NULL;
            if (r->expired)
                reason = "the ZooKeeper session expired; another node may hold our worker id";
            else if (!r->connected && now - r->disconnected_since >= fence_ms)
                reason = "disconnected from ZooKeeper too long; the session may have expired "
                         "and another node may hold our worker id";
            if (reason) {
                r->serving = false;
                int64_t id = r->held_id;
                pthread_mutex_unlock(&r->mu);
                report(r, false, id, -1, reason);
                pthread_mutex_lock(&r->mu);
                continue;
            }
            if (r->connected && now >= r->next_lease_renew) {
                int64_t id = r->held_id;
                pthread_mutex_unlock(&r->mu);
                int renewed = renew_lease(r, id);
                if (renewed == 0 && !lease_failing)
                    reg_log(r, "warning", "cannot renew the lease on worker id %" PRId64
                            ": no answer from ZooKeeper; ids stop when the lease runs out",
                            id);
                lease_failing = renewed != 1;
                pthread_mutex_lock(&r->mu);
                if (renewed == 0) {
                    r->next_lease_renew = mono_ms() + 100;
                } else if (renewed < 0 && r->serving) {
                    r->serving = false;
                    pthread_mutex_unlock(&r->mu);
                    report(r, false, id, -1, "our worker node in ZooKeeper is gone or held by "
                           "another session; another node may hold our worker id");
                    pthread_mutex_lock(&r->mu);
                }
                continue;
            }
            if (r->connected && now >= r->next_state_write) {
                r->next_state_write = now + r->o.state_interval_ms;
                int64_t id = r->held_id;
                pthread_mutex_unlock(&r->mu);
                record_timestamp(r, id);
                pthread_mutex_lock(&r->mu);
                continue;
            }
        } else if ((r->connected || r->expired) && now >= next_retry) {
            pthread_mutex_unlock(&r->mu);
            bool ok = try_reclaim(r);
            pthread_mutex_lock(&r->mu);
            if (!ok)
                next_retry = mono_ms() + 1000;
            continue;
        }
        struct timespec until = deadline_in(100);
        pthread_cond_timedwait(&r->cv, &r->mu, &until);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int sf_registry_watch(sf_registry *r, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    bool ok = r->held_id >= 0 && r->connected && !r->expired;
    int64_t id = r->held_id;
    pthread_mutex_unlock(&r->mu);
    /* The round trip runs outside the lock: its completion may wait behind a session
     * event, and the session watcher takes the lock. */
    ok = ok && renew_lease(r, id) == 1;
    pthread_mutex_lock(&r->mu);
    r->serving = ok;
    pthread_mutex_unlock(&r->mu);
    if (ok)
        report(r, true, id, read_floor(r, id), "worker id claimed");
    else
        report(r, false, id, -1, "the ZooKeeper session was lost before serving began");
    int rc = pthread_create(&r->thread, NULL, watch_loop, r);
    if (rc != 0) {
        set_err(err, errlen, "cannot start the registry thread: %s", strerror(rc));
        return -1;
    }
    r->thread_started = true;
    return 0;
}

int64_t sf_registry_worker_id(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    int64_t id = r->serving ? r->held_id : -1;
    pthread_mutex_unlock(&r->mu);
    return id;
}

int sf_registry_session_timeout_ms(sf_registry *r)
{
    return r->negotiated_ms;
}

void sf_registry_cancel(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void sf_registry_close(sf_registry *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->thread_started)
        pthread_join(r->thread, NULL);
    if (r->zh) {
        if (r->held_id >= 0 && r->connected && still_own(r, r->held_id)) {
            record_timestamp(r, r->held_id);
            reg_log(r, "info", "released worker id %" PRId64, r->held_id);
        }
        zookeeper_close(r->zh);
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->hosts);
    free(r->worker_id_path);
    free(r->lock_path);
    free(r->state_path);
    free(r->host_port);
    free(r->auth);
    free(r);
}
