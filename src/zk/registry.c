/* registry.c -- claims a worker id in ZooKeeper, guards it (fencing) and records its last timestamp.
 *
 * The registry is a state machine (sf_reg_state): one function, sf_reg_step, takes every event
 * (from the session watcher, from the renewal's completion, from the registry's thread and from
 * the callers) and moves the state, logging each transition once and queueing the reports the
 * caller's callbacks receive. The registry's thread acts on the state it finds: opens a session
 * while CONNECTING, claims while CLAIMING, waits for the recorded timestamp and the first lease
 * while WAITING_FLOOR, renews the lease while SERVING, and schedules the next try while FENCED. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
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

#include "common/clocks.h"
#include "registry_peers.h"
#include "lib/snowflake.h"

#define SF_REG_PATH_MAX 1024
#define SF_REG_DATA_MAX 512
#define SF_REG_REASON_MAX SF_REGISTRY_ERR_MAX
#define SF_REG_REPORTS 8          /* reports queued between two deliveries */
#define SF_REG_BACKOFF_MIN_MS 100 /* the first retry after a failure */
#define SF_REG_BACKOFF_MAX_MS 5000
#define SF_REG_CONNECT_MIN_MS 5000 /* a new session gets at least this long to come up */
#define SF_REG_PENDING 8          /* confirmed renewals of one connection not yet certified */
#define SF_REG_UNLOCK_TRIES 3     /* deletes of our lock node before leaving it to the thread */
#define SF_REG_UNLOCK_RETRY_MS 1000 /* the thread's later tries */

typedef enum sf_reg_state {
    SF_REG_CONNECTING,    /* waiting for a session (a new one after an expiry) */
    SF_REG_CLAIMING,      /* session up: claiming an id, or checking the one held */
    SF_REG_WAITING_FLOOR, /* id held: waiting for the clock to pass its floor and a first lease */
    SF_REG_SERVING,       /* id held and leased: ids may be handed out */
    SF_REG_FENCED,        /* not serving; the thread tries again after a backoff */
    SF_REG_STOPPING       /* cancelled or closing: nothing more happens */
} sf_reg_state;

typedef enum sf_reg_event {
    SF_REG_EV_CONNECTED,    /* the session is (again) established */
    SF_REG_EV_DISCONNECTED, /* the connection dropped; the session may live on */
    SF_REG_EV_EXPIRED,      /* the session is gone (or its credential refused) */
    SF_REG_EV_CLAIMED,      /* an id is held by our session */
    SF_REG_EV_RENEWED,      /* the leader confirmed a renewal: a fresh lease */
    SF_REG_EV_RENEW_FAILED, /* a renewal got no confirmation: the lease is not extended */
    SF_REG_EV_NODE_LOST,    /* ZooKeeper says our worker node is gone or another session's */
    SF_REG_EV_FAILED,       /* a step of connecting or claiming failed */
    SF_REG_EV_TIMER,        /* time passed: grace, lease or backoff may have run out */
    SF_REG_EV_STOP          /* cancelled or closing */
} sf_reg_event;

/* One call of on_state or on_lease waiting to be made outside the lock. */
typedef struct sf_reg_report {
    bool is_lease;
    bool serving;
    int64_t worker_id, floor_ms, until, reserved;
    char reason[SF_REG_REASON_MAX];
} sf_reg_report;

/* What a state node says: the floor a new holder must wait past, and whether it is the
 * exact last timestamp of a clean release (else a reservation). */
typedef struct sf_reg_record {
    int64_t floor;    /* Unix ms, -1 = none */
    bool released;
} sf_reg_record;

/* The renewal write in flight: ZooKeeper fills results and stats when it completes. */
typedef struct sf_reg_renewal {
    bool in_flight;
    bool done;            /* completed, outcome below not yet taken by a waiter */
    int rc;               /* the multi's own result */
    sf_reg_event outcome; /* what it told the state machine */
    uint64_t seq;
    int64_t t0;           /* boot ms taken before it was sent */
    uint64_t conn;        /* the connection it was sent on (r->conn when sent) */
    int64_t value;        /* the timestamp it records */
    bool release;         /* the last record of a clean stop: "released", not "reserved" */
    zhandle_t *zh;        /* the handle it was sent on */
    char data[48];
    zoo_op_t ops[2];
    zoo_op_result_t results[2];
    struct Stat worker_stat, state_stat;
} sf_reg_renewal;

struct sf_registry {
    sf_registry_options o;   /* strings below are our own copies */
    char *hosts, *worker_id_path, *lock_path, *state_path, *host_port, *auth;
    int64_t wanted_id;       /* the configured id, -1 = automatic */
    struct ACL acl[2];       /* with a credential: its holders ALL, everyone READ */
    struct ACL_vector acl_vec;

    pthread_mutex_t mu;      /* guards everything below */
    pthread_cond_t cv;       /* on CLOCK_MONOTONIC: only waits, never leases */
    zhandle_t *zh;           /* the current session's handle; NULL between sessions */
    int negotiated_ms;       /* the session timeout granted on the current connection */
    sf_reg_state state;
    bool connected;          /* the connection is up */
    bool expired;            /* the session is gone: a new handle is needed */
    bool stop;               /* cancelled or closing */
    bool watching;           /* sf_registry_watch ran: reports go to the callbacks */
    int64_t disconnected_since; /* boot ms, 0 while connected */
    uint64_t conn;           /* bumped by every change of the connection */
    bool fresh_session;      /* the session's first connection has not come up yet */
    int64_t session_started; /* boot ms just before the current session was asked for */
    uint64_t events;         /* bumped by every watch, so waiters see a change */
    int auth_rc;             /* result of zoo_add_auth, 1 while pending */

    int64_t held_id;         /* -1 while no id is held */
    int64_t floor_ms;        /* the floor found when the id was claimed */
    int32_t worker_version;  /* our worker node's version as last written */
    int32_t state_version;   /* the state node's version as last read or written; -1 = none */
    int64_t state_value;     /* the floor at state_version */
    bool state_released;     /* ...the exact last timestamp of a clean stop, not a reservation */
    int64_t base_floor;      /* the highest floor not of our making: found at the claim, or
                              * written meanwhile by another; a clean release never goes below */
    int64_t reserved_until;  /* Unix ms: the reservation of the last confirmed renewal */
    int64_t own_value;       /* the highest reservation we sent for the id held */
    int64_t anchor;          /* boot ms: the leader's expiry of our session is at least this + */
    int anchor_timeout_ms;   /* ...the session timeout then in force (see registry.h) */
    int64_t pending[SF_REG_PENDING]; /* send times of confirmed renewals on this connection */
    int pending_count;       /* ...not yet certified by a later one */
    char orphan_lock[SF_REG_PATH_MAX]; /* a lock node of ours whose delete failed; "" = none */
    int64_t orphan_retry_at; /* boot ms */
    bool resync;             /* a renewal met a changed version: re-read before the next */
    int64_t lease_until;     /* boot ms; 0 = no lease */
    int64_t next_renew;      /* boot ms */
    int64_t retry_at;        /* boot ms, while FENCED */
    int64_t backoff_ms;
    bool lease_failing;      /* warn once per run of failed renewals */
    const char *serve_reason; /* why serving begins at the next first lease */
    char reason[SF_REG_REASON_MAX]; /* why not serving, as last reported */
    sf_reg_renewal renewal;

    sf_reg_report reports[SF_REG_REPORTS];
    int report_head, report_count;

    bool thread_started;
    pthread_t thread;
};

/* Formats into a caller's buffer; every error path uses it so messages are never lost. */
static void sf_reg_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Sends a message to the caller's log, or to standard error without one. */
static void sf_reg_log(sf_registry *r, const char *level, const char *fmt, ...)
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

/* An absolute CLOCK_MONOTONIC deadline ms from now, for pthread_cond_timedwait. */
static struct timespec sf_reg_deadline_in(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (ms < 0)
        ms = 0;
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Waits on the condition variable for at most ms (lock held). */
static void sf_reg_wait_locked(sf_registry *r, int64_t ms)
{
    struct timespec until = sf_reg_deadline_in(ms);
    pthread_cond_timedwait(&r->cv, &r->mu, &until);
}

/* Sleeps ms unless stopped first (lock not held). False when stopped. */
static bool sf_reg_sleep(sf_registry *r, int64_t ms)
{
    int64_t end = sf_clocks_boot_ms() + ms;
    pthread_mutex_lock(&r->mu);
    for (int64_t left = ms; !r->stop && left > 0; left = end - sf_clocks_boot_ms())
        sf_reg_wait_locked(r, left);
    bool stopped = r->stop;
    pthread_mutex_unlock(&r->mu);
    return !stopped;
}

/* True once cancelled or closing. */
static bool sf_reg_stopped(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    return stop;
}

/* The peers module's view of cancellation. */
static bool sf_reg_cancelled(void *ctx)
{
    return sf_reg_stopped(ctx);
}

/* The state's name, for the log. */
static const char *sf_reg_state_name(sf_reg_state s)
{
    static const char *const names[] = {"connecting", "claiming", "waiting for the floor",
                                        "serving", "fenced", "stopping"};
    return names[s];
}

/* Queues a report for delivery outside the lock; the oldest gives way when full. */
static void sf_reg_queue(sf_registry *r, const sf_reg_report *rep)
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

/* Queues "not serving" with reason, unless that very reason was the last one reported. */
static void sf_reg_queue_fenced(sf_registry *r, const char *reason, bool force)
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

/* Fences: stops serving at once (reported) and schedules the next try after the backoff. */
static void sf_reg_fence(sf_registry *r, const char *reason)
{
    bool was_serving = r->state == SF_REG_SERVING;
    sf_reg_move(r, SF_REG_FENCED, reason);
    r->lease_until = 0;
    sf_reg_queue_fenced(r, reason, was_serving);
    r->retry_at = sf_clocks_boot_ms() + r->backoff_ms;
    r->backoff_ms = r->backoff_ms * 2 > SF_REG_BACKOFF_MAX_MS ? SF_REG_BACKOFF_MAX_MS
                                                              : r->backoff_ms * 2;
}

/* The state machine: takes one event (lock held) and moves the state. reason is the
 * event's explanation (for FAILED, NODE_LOST, RENEW_FAILED), or NULL. */
static void sf_reg_step(sf_registry *r, sf_reg_event ev, const char *reason)
{
    int64_t now = sf_clocks_boot_ms();
    if (r->state == SF_REG_STOPPING)
        return;
    switch (ev) {
    case SF_REG_EV_STOP:
        if (r->state == SF_REG_SERVING)
            sf_reg_queue_fenced(r, "the registry is stopping", true);
        sf_reg_move(r, SF_REG_STOPPING, NULL);
        break;
    case SF_REG_EV_CONNECTED:
        r->conn++;
        r->pending_count = 0;
        r->connected = true;
        r->disconnected_since = 0;
        if (r->state == SF_REG_CONNECTING)
            sf_reg_move(r, SF_REG_CLAIMING, NULL);
        break;
    case SF_REG_EV_DISCONNECTED:
        r->conn++;
        r->pending_count = 0;
        if (r->connected || r->disconnected_since == 0)
            r->disconnected_since = now;
        r->connected = false;
        break;
    case SF_REG_EV_EXPIRED:
        r->conn++;
        r->pending_count = 0;
        if (r->connected || r->disconnected_since == 0)
            r->disconnected_since = now;
        r->connected = false;
        r->expired = true;
        if (r->state == SF_REG_SERVING)
            sf_reg_fence(r, "the ZooKeeper session expired; another node may hold our worker id");
        break;
    case SF_REG_EV_CLAIMED:
        if (r->state == SF_REG_CLAIMING)
            sf_reg_move(r, SF_REG_WAITING_FLOOR, NULL);
        break;
    case SF_REG_EV_RENEWED: {
        bool was_serving = r->state == SF_REG_SERVING;
        r->lease_failing = false;
        if (r->state != SF_REG_SERVING && r->state != SF_REG_WAITING_FLOOR)
            break;
        /* Confirmed, but the lease may not be certified yet (see registry.h): serving
         * begins with a lease that has a report interval left, so that the renewals to
         * come can certify the next one before it runs out. */
        if (r->lease_until <= now ||
            (!was_serving && r->lease_until - now < sf_registry_report_ms(r->negotiated_ms)))
            break;
        sf_reg_report rep = {.is_lease = true, .until = r->lease_until,
                             .reserved = r->reserved_until};
        sf_reg_queue(r, &rep);
        if (!was_serving) {
            sf_reg_move(r, SF_REG_SERVING, r->serve_reason);
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
            sf_reg_fence(r, reason);
        }
        break;
    case SF_REG_EV_NODE_LOST:
        if (r->state == SF_REG_SERVING || r->state == SF_REG_WAITING_FLOOR)
            sf_reg_fence(r, "our worker node in ZooKeeper is gone or held by another session; "
                            "another node may hold our worker id");
        r->held_id = r->state == SF_REG_FENCED ? -1 : r->held_id;
        break;
    case SF_REG_EV_FAILED:
        /* Already fenced: the event that fenced us has the more precise reason. */
        if (r->state != SF_REG_SERVING && r->state != SF_REG_FENCED)
            sf_reg_fence(r, reason);
        break;
    case SF_REG_EV_TIMER:
        if (r->state == SF_REG_SERVING) {
            if (!r->connected && now - r->disconnected_since >= sf_registry_grace_ms(r->negotiated_ms))
                sf_reg_fence(r, "disconnected from ZooKeeper too long; the session may have "
                                "expired and another node may hold our worker id");
            else if (r->lease_until > 0 && now >= r->lease_until)
                sf_reg_fence(r, "the lease ran out: ZooKeeper's leader confirmed no renewal in "
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

/* When the lease certified so far ends (see registry.h): 2/3 of the shorter of the session
 * timeouts granted then and now, after the anchor; 0 without one. Lock held. */
static int64_t sf_reg_lease_end(const sf_registry *r)
{
    if (r->anchor <= 0)
        return 0;
    int timeout = r->anchor_timeout_ms < r->negotiated_ms ? r->anchor_timeout_ms : r->negotiated_ms;
    return r->anchor + sf_registry_lease_ms(timeout);
}

/* A connection came up with the session timeout granted_ms (lock held). A new session's
 * first connection makes the moment the session was asked for its first anchor; a later one
 * may come with another timeout, which everything is timed by from now on (a shorter one
 * shortens the lease at once). */
static void sf_reg_granted(sf_registry *r, int granted_ms)
{
    if (r->fresh_session) {
        r->fresh_session = false;
        r->negotiated_ms = granted_ms;
        r->anchor = r->session_started;
        r->anchor_timeout_ms = granted_ms;
        return;
    }
    if (granted_ms == r->negotiated_ms || granted_ms <= 0)
        return;
    sf_reg_log(r, "warning", "ZooKeeper granted a session timeout of %d ms on reconnecting "
               "(%d ms before): the lease, the renewals and the grace follow it",
               granted_ms, r->negotiated_ms);
    r->negotiated_ms = granted_ms;
    int64_t end = sf_reg_lease_end(r);
    if (r->lease_until > end) {
        r->lease_until = end;
        sf_reg_report rep = {.is_lease = true, .until = end, .reserved = r->reserved_until};
        if (r->state == SF_REG_SERVING)
            sf_reg_queue(r, &rep);
    }
}

/* A confirmed renewal w certifies the confirmed renewals sent on its connection at least
 * one report interval before it (see registry.h): the latest of them becomes the anchor.
 * It then waits to be certified itself. A renewal whose connection changed while it was
 * out certifies nothing: which follower carried it is unknown. Lock held. */
static void sf_reg_certify(sf_registry *r, const sf_reg_renewal *w)
{
    if (w->conn != r->conn)
        return;
    int64_t cutoff = w->t0 - sf_registry_report_ms(r->negotiated_ms);
    int kept = 0;
    for (int i = 0; i < r->pending_count; i++) {
        if (r->pending[i] > cutoff) {
            r->pending[kept++] = r->pending[i];
        } else if (r->pending[i] > r->anchor) {
            r->anchor = r->pending[i];
            r->anchor_timeout_ms = r->negotiated_ms;
        }
    }
    r->pending_count = kept;
    if (r->pending_count == SF_REG_PENDING) {
        memmove(r->pending, r->pending + 1, (SF_REG_PENDING - 1) * sizeof r->pending[0]);
        r->pending_count--;
    }
    r->pending[r->pending_count++] = w->t0;
}

/* The session watcher: turns connection changes into events; never calls into ZooKeeper.
 * Events of a handle already replaced are ignored; other watches (the lock's) wake waiters. */
static void sf_reg_session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)path;
    sf_registry *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (type == ZOO_SESSION_EVENT && zh == r->zh) {
        if (state == ZOO_CONNECTED_STATE) {
            sf_reg_granted(r, zoo_recv_timeout(zh));
            sf_reg_step(r, SF_REG_EV_CONNECTED, NULL);
        }
        else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
            sf_reg_step(r, SF_REG_EV_EXPIRED, NULL);
        else
            sf_reg_step(r, SF_REG_EV_DISCONNECTED, NULL);
    }
    r->events++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
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

/* Replaces the session's handle with a new one that starts connecting (the old one, if any,
 * is closed: its session is gone). Does not wait. */
static int sf_reg_open_session(sf_registry *r, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
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
    errno = 0;
    r->session_started = sf_clocks_boot_ms();
    r->zh = zookeeper_init(r->hosts, sf_reg_session_watcher, r->o.session_timeout_ms, NULL, r, 0);
    bool ok = r->zh != NULL;
    pthread_mutex_unlock(&r->mu);
    if (!ok) {
        sf_reg_set_err(err, errlen,
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
        sf_reg_set_err(err, errlen, "stopped while connecting to ZooKeeper at '%s'", r->hosts);
        return -1;
    }
    if (!ok) {
        sf_reg_set_err(err, errlen, expired
                           ? "ZooKeeper at '%s' (zookeeper.hosts) ended the new session at once "
                             "(a refused credential in zookeeper.auth?)"
                           : "no ZooKeeper server at '%s' (zookeeper.hosts) answered within %" PRId64
                             " ms; check that it runs and that this host can reach it",
                       r->hosts, wait_ms);
        return -1;
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
        sf_reg_set_err(err, errlen, "ZooKeeper at '%s' refused the credential in zookeeper.auth "
                       "(user:password): %s", r->hosts, zerror(rc));
        return -1;
    }
    return 0;
}

/* The session id of the current handle, to recognise our own ephemeral nodes. */
static int64_t sf_reg_session_id(sf_registry *r)
{
    const clientid_t *cid = zoo_client_id(r->zh);
    return cid ? cid->client_id : 0;
}

/* The ACL for every node we create: with a credential, only its holders may change
 * them and everyone may read; without, the original's open ACL. */
static struct ACL_vector *sf_reg_acl(sf_registry *r)
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

/* The paths of id's worker node and state node. */
static void sf_reg_worker_path(sf_registry *r, int64_t id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%" PRId64, r->worker_id_path, id);
}

static void sf_reg_state_node(sf_registry *r, int64_t id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%" PRId64, r->state_path, id);
}

/* Creates path and its parents as persistent nodes; an existing node is fine. */
static int sf_reg_ensure_path(sf_registry *r, const char *path, char *err, size_t errlen)
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
            sf_reg_set_err(err, errlen, "cannot create the ZooKeeper path %s: %s%s", buf,
                           zerror(rc), rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
            return -1;
        }
        *p = saved;
        if (saved == '\0')
            return 0;
    }
}

/* Reads a node's data as a string. Returns a ZooKeeper code. */
static int sf_reg_get_string(sf_registry *r, const char *path, char *out, size_t outlen,
                             struct Stat *stat)
{
    int len = (int)outlen - 1;
    int rc = zoo_get(r->zh, path, 0, out, &len, stat);
    out[rc == ZOK && len > 0 ? len : 0] = '\0';
    return rc;
}

bool sf_registry_parse_worker_id(const char *name, int64_t *id)
{
    size_t n = strlen(name);
    if (n == 0 || n > 2 || (n == 2 && name[0] == '0'))
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        v = v * 10 + (name[i] - '0');
    }
    if (v > SF_MAX_WORKER_ID)
        return false;
    *id = v;
    return true;
}

/* Parses a state node's data (see registry.h): "reserved N", "released N", or an earlier
 * version's plain N, read as a reservation ending one lease later. False for anything else. */
static bool sf_reg_parse_record(const char *data, int64_t lease_ms, sf_reg_record *rec)
{
    static const char reserved[] = "reserved ", released[] = "released ";
    const char *num = data;
    bool legacy = false;
    rec->released = false;
    if (strncmp(data, reserved, sizeof reserved - 1) == 0) {
        num = data + sizeof reserved - 1;
    } else if (strncmp(data, released, sizeof released - 1) == 0) {
        num = data + sizeof released - 1;
        rec->released = true;
    } else {
        legacy = true;
    }
    if (!(*num == '-' || (*num >= '0' && *num <= '9')))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(num, &end, 10);
    if (*end || errno)
        return false;
    rec->floor = legacy && v >= 0 ? v + lease_ms : v;
    return true;
}

/* Reads the record of id with its version: 0 (floor -1 and version -1 when there is no
 * state node yet), or -1 on a ZooKeeper error (err filled). Data that is no record is
 * logged and read as no floor: the next write replaces it. */
static int sf_reg_read_state(sf_registry *r, int64_t id, sf_reg_record *rec, int32_t *version,
                             char *err, size_t errlen)
{
    char path[SF_REG_PATH_MAX], data[64];
    struct Stat st;
    sf_reg_state_node(r, id, path, sizeof path);
    rec->floor = -1;
    rec->released = false;
    *version = -1;
    int rc = sf_reg_get_string(r, path, data, sizeof data, &st);
    if (rc == ZNONODE)
        return 0;
    if (rc != ZOK) {
        sf_reg_set_err(err, errlen, "cannot read the floor in %s: %s", path, zerror(rc));
        return -1;
    }
    *version = st.version;
    pthread_mutex_lock(&r->mu);
    int64_t lease = sf_registry_lease_ms(r->negotiated_ms);
    pthread_mutex_unlock(&r->mu);
    if (!sf_reg_parse_record(data, lease, rec)) {
        rec->floor = -1;
        sf_reg_log(r, "warning", "%s holds '%s', not a floor ('reserved MS' or 'released MS'); "
                   "ignored", path, data);
    }
    return 0;
}

/* Makes sure the state node of id exists, so every later write of it can be conditional
 * on its version; fills the registry's view of it. */
static int sf_reg_load_state(sf_registry *r, int64_t id, char *err, size_t errlen)
{
    sf_reg_record rec;
    int32_t version;
    for (int tries = 0; tries < 3; tries++) {
        if (sf_reg_read_state(r, id, &rec, &version, err, errlen) != 0)
            return -1;
        if (version >= 0) {
            pthread_mutex_lock(&r->mu);
            r->state_value = rec.floor;
            r->state_released = rec.released;
            r->state_version = version;
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        char path[SF_REG_PATH_MAX];
        sf_reg_state_node(r, id, path, sizeof path);
        int rc = zoo_create(r->zh, path, "released -1", 11, sf_reg_acl(r), 0, NULL, 0);
        if (rc != ZOK && rc != ZNODEEXISTS) {
            sf_reg_set_err(err, errlen, "cannot create %s: %s%s", path, zerror(rc),
                           rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
            return -1;
        }
    }
    sf_reg_set_err(err, errlen, "the state node for worker id %" PRId64 " under %s keeps "
                   "vanishing; is another tool deleting it?", id, r->state_path);
    return -1;
}

/* How far ahead of our clock a floor may be for us to wait it out: the lease its holder
 * may have held plus the clock skew the peers' check tolerates, or
 * max_clock_backward_wait_ms if longer. A floor further ahead was left by a clock far off. */
static int64_t sf_reg_floor_wait_limit(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    int64_t limit = r->o.max_clock_skew_ms + sf_registry_lease_ms(r->negotiated_ms);
    pthread_mutex_unlock(&r->mu);
    return r->o.max_clock_backward_wait_ms > limit ? r->o.max_clock_backward_wait_ms : limit;
}

/* True when the floor recorded for id is further ahead of our clock than we wait
 * (*floor_ms filled); false also when it cannot be read (the claim reports that). */
static bool sf_reg_floor_too_far(sf_registry *r, int64_t id, int64_t *floor_ms)
{
    sf_reg_record rec;
    int32_t version;
    char err[SF_REGISTRY_ERR_MAX];
    if (sf_reg_read_state(r, id, &rec, &version, err, sizeof err) != 0)
        return false;
    *floor_ms = rec.floor;
    return rec.floor - sf_clock_now_ms() + 1 > sf_reg_floor_wait_limit(r);
}

/* Restart safety: waits until our clock is past the floor recorded for id, if that is at
 * most sf_reg_floor_wait_limit away; otherwise fails. Cancellable. kept: the id was ours
 * all along (our session survived), so a reservation of our own is no floor for us: only
 * what others recorded is. */
static int sf_reg_wait_for_floor(sf_registry *r, int64_t id, bool kept, int64_t *floor_ms,
                                 char *err, size_t errlen)
{
    if (sf_reg_load_state(r, id, err, errlen) != 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    int64_t floor = r->state_value;
    bool released = r->state_released;
    if (kept && floor <= r->own_value)
        floor = r->base_floor;
    pthread_mutex_unlock(&r->mu);
    *floor_ms = floor;
    int64_t now = sf_clock_now_ms();
    if (floor < now)
        return 0;
    int64_t behind = floor - now + 1, limit = sf_reg_floor_wait_limit(r);
    if (behind > limit) {
        sf_reg_set_err(err, errlen,
                "our clock is %" PRId64 " ms behind the floor recorded for worker id %" PRId64
                " (%s/%" PRId64 " = %" PRId64 "), further than a new holder waits (%" PRId64
                " ms: the lease plus the peers' clock tolerance of %" PRId64 " ms, or "
                "max_clock_backward_wait_ms if longer); ids could repeat. Fix the clock; or, if "
                "the floor was left by a clock that ran ahead, see it with `snowflake-zk floor %"
                PRId64 "` and reset it with `snowflake-zk reset-floor %" PRId64 "`",
                behind, id, r->state_path, id, floor, limit, r->o.max_clock_skew_ms, id, id);
        return -1;
    }
    sf_reg_log(r, "warning", "waiting %" PRId64 " ms for the clock to pass the floor "
               "recorded for worker id %" PRId64 " (%s)", behind, id,
               released ? "the last timestamp of a holder that stopped cleanly: our clock is "
                          "behind its"
                        : "the reservation of a holder that did not stop cleanly: our clock is "
                          "behind its, or it stopped less than a lease ago");
    while ((now = sf_clock_now_ms()) <= floor) {
        if (!sf_reg_sleep(r, floor - now + 1)) {
            sf_reg_set_err(err, errlen, "stopped while waiting for the clock to pass the floor "
                           "recorded for worker id %" PRId64, id);
            return -1;
        }
    }
    return 0;
}

/* Tries once to create worker_id_path/id holding our host:port. Returns 1 when we hold it
 * (also when an ambiguous earlier attempt already made it ours), 0 when another session
 * holds it (holder filled), -1 on a ZooKeeper error (err filled). */
static int sf_reg_try_create_worker(sf_registry *r, int64_t id, char *holder, size_t holderlen,
                                    char *err, size_t errlen)
{
    char path[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, path, sizeof path);
    const char *data = r->host_port ? r->host_port : "";
    int rc = zoo_create(r->zh, path, data, (int)strlen(data), sf_reg_acl(r), ZOO_EPHEMERAL, NULL, 0);
    if (rc == ZOK) {
        r->worker_version = 0;
        return 1;
    }
    if (rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT) {
        sf_reg_set_err(err, errlen, "cannot create %s: %s%s", path, zerror(rc),
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
    sf_reg_set_err(err, errlen, "cannot create %s: %s", path, zerror(rc));
    return -1;
}

/* Claims the configured id, retrying while another session holds it (perhaps our own
 * previous one, not yet expired). The waits end at once when cancelled. */
static int sf_reg_claim_static(sf_registry *r, int64_t *id, char *err, size_t errlen, int retries)
{
    char holder[SF_REG_DATA_MAX] = "";
    for (int attempt = 0; attempt <= retries; attempt++) {
        if (attempt > 0) {
            sf_reg_log(r, "warning", "worker id %" PRId64 " is held by %s; retry %d of %d in %d ms",
                       r->wanted_id, holder, attempt, retries, r->o.claim_retry_wait_ms);
            if (!sf_reg_sleep(r, r->o.claim_retry_wait_ms)) {
                sf_reg_set_err(err, errlen, "stopped while waiting for worker id %" PRId64
                               " (held by %s)", r->wanted_id, holder);
                return -1;
            }
        }
        int got = sf_reg_try_create_worker(r, r->wanted_id, holder, sizeof holder, err, errlen);
        if (got < 0)
            return -1;
        if (got == 1) {
            *id = r->wanted_id;
            return 0;
        }
    }
    sf_reg_set_err(err, errlen, "worker id %" PRId64 " is already held by %s (%s/%" PRId64 "); "
                   "stop that node, release a stale one (snowflake-zk release %" PRId64 "), or "
                   "configure another worker_id", r->wanted_id, holder, r->worker_id_path,
                   r->wanted_id, r->wanted_id);
    return -1;
}

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

/* Takes the lock: our sequential node, then wait only for our predecessor to go. mine is
 * filled as soon as our node exists, so the caller can delete it on any failure. */
static int sf_reg_take_lock(sf_registry *r, char *mine, size_t minelen, char *err, size_t errlen)
{
    char prefix[SF_REG_PATH_MAX];
    int rc = ZOK;
    if (sf_reg_find_own_lock(r, mine, minelen)) {
        /* Left by an earlier claim whose delete failed: it is our place in the queue. A new
         * node behind it would wait for our own session to end. */
        sf_reg_log(r, "info", "queueing with our lock node %s, left by an earlier claim", mine);
        pthread_mutex_lock(&r->mu);
        if (strcmp(r->orphan_lock, mine) == 0)
            r->orphan_lock[0] = '\0';
        pthread_mutex_unlock(&r->mu);
    } else {
        snprintf(prefix, sizeof prefix, "%s/lock-", r->lock_path);
        rc = zoo_create(r->zh, prefix, NULL, -1, sf_reg_acl(r), ZOO_EPHEMERAL_SEQUENTIAL, mine,
                        (int)minelen);
        if ((rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) &&
            sf_reg_find_own_lock(r, mine, minelen))
            rc = ZOK;
    }
    if (rc != ZOK) {
        mine[0] = '\0';
        sf_reg_set_err(err, errlen, "cannot create a lock node under %s: %s", r->lock_path,
                       zerror(rc));
        return -1;
    }
    const char *my_name = strrchr(mine, '/') + 1;
    for (;;) {
        struct String_vector kids = {0, NULL};
        rc = zoo_get_children(r->zh, r->lock_path, 0, &kids);
        if (rc != ZOK) {
            sf_reg_set_err(err, errlen, "cannot list %s: %s", r->lock_path, zerror(rc));
            return -1;
        }
        qsort(kids.data, (size_t)kids.count, sizeof kids.data[0], sf_reg_cmp_lock);
        int idx = -1;
        for (int i = 0; i < kids.count; i++)
            if (strcmp(kids.data[i], my_name) == 0)
                idx = i;
        if (idx < 0) {
            deallocate_String_vector(&kids);
            sf_reg_set_err(err, errlen, "our lock node %s disappeared (session lost)", mine);
            return -1;
        }
        if (idx == 0) {
            deallocate_String_vector(&kids);
            return 0;
        }
        char pred[SF_REG_PATH_MAX];
        snprintf(pred, sizeof pred, "%s/%s", r->lock_path, kids.data[idx - 1]);
        deallocate_String_vector(&kids);
        pthread_mutex_lock(&r->mu);
        uint64_t seen = r->events;
        pthread_mutex_unlock(&r->mu);
        rc = zoo_wexists(r->zh, pred, sf_reg_session_watcher, r, NULL);
        if (rc == ZNONODE)
            continue;
        if (rc != ZOK) {
            sf_reg_set_err(err, errlen, "cannot watch %s: %s", pred, zerror(rc));
            return -1;
        }
        pthread_mutex_lock(&r->mu);
        while (r->events == seen && !r->stop && !r->expired)
            sf_reg_wait_locked(r, 500);
        bool stop = r->stop, expired = r->expired;
        pthread_mutex_unlock(&r->mu);
        if (stop || expired) {
            sf_reg_set_err(err, errlen, "%s while waiting for the lock %s (behind %s)",
                           stop ? "stopped" : "session expired", mine, pred);
            return -1;
        }
    }
}

/* Lists every holder "id=host:port" into out, for the message when all ids are taken. */
static void sf_reg_list_holders(sf_registry *r, char *out, size_t outlen)
{
    size_t used = 0;
    out[0] = '\0';
    for (int64_t id = 0; id < SF_REGISTRY_MAX_WORKERS && used < outlen; id++) {
        char path[SF_REG_PATH_MAX], data[SF_REG_DATA_MAX];
        sf_reg_worker_path(r, id, path, sizeof path);
        if (sf_reg_get_string(r, path, data, sizeof data, NULL) != ZOK)
            continue;
        int n = snprintf(out + used, outlen - used, "%s%" PRId64 "=%s", used ? ", " : "", id, data);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* Under the lock, claims the lowest free id 0..31. */
static int sf_reg_claim_lowest_free(sf_registry *r, int64_t *id, char *err, size_t errlen)
{
    struct String_vector kids = {0, NULL};
    bool taken[SF_REGISTRY_MAX_WORKERS] = {false};
    int rc = zoo_get_children(r->zh, r->worker_id_path, 0, &kids);
    if (rc != ZOK) {
        sf_reg_set_err(err, errlen, "cannot list %s: %s", r->worker_id_path, zerror(rc));
        return -1;
    }
    for (int i = 0; i < kids.count; i++) {
        int64_t k;
        if (sf_registry_parse_worker_id(kids.data[i], &k))
            taken[k] = true;
    }
    deallocate_String_vector(&kids);
    int skipped = 0;
    for (int64_t k = 0; k < SF_REGISTRY_MAX_WORKERS; k++) {
        char holder[SF_REG_DATA_MAX];
        int64_t floor;
        if (taken[k])
            continue;
        if (sf_reg_floor_too_far(r, k, &floor)) {
            sf_reg_log(r, "warning", "skipping worker id %" PRId64 ": its floor (%s/%" PRId64
                       " = %" PRId64 ") is %" PRId64 " ms ahead of our clock, further than a "
                       "new holder waits; a holder's clock ran that far ahead. See it with "
                       "`snowflake-zk floor %" PRId64 "`; reset it with `snowflake-zk "
                       "reset-floor %" PRId64 "` once no id up to it can have been handed out",
                       k, r->state_path, k, floor, floor - sf_clock_now_ms(), k, k);
            skipped++;
            continue;
        }
        int got = sf_reg_try_create_worker(r, k, holder, sizeof holder, err, errlen);
        if (got < 0)
            return -1;
        if (got == 1) {
            *id = k;
            return 0;
        }
    }
    char holders[SF_REGISTRY_ERR_MAX - 512];
    sf_reg_list_holders(r, holders, sizeof holders);
    if (skipped > 0)
        sf_reg_set_err(err, errlen, "no worker id under %s can be claimed: %d free ones have "
                       "floors too far ahead of our clock (see the warnings above; `snowflake-zk "
                       "list` shows every floor), the others are taken: %s", r->worker_id_path,
                       skipped, holders);
    else
        sf_reg_set_err(err, errlen, "all %d worker ids under %s are taken: %s",
                       SF_REGISTRY_MAX_WORKERS, r->worker_id_path, holders);
    return -1;
}

/* Deletes our lock node. Failing that a few times (a lost connection), leaves it to the
 * registry's thread, which tries again while the session lives: until it goes, every other
 * automatic claim waits behind it (our own next claim queues with it instead). */
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
    sf_reg_log(r, "warning", "cannot delete the lock node %s: %s; other automatic claims wait "
               "behind it until it is gone (trying again every %d ms)", mine, zerror(rc),
               SF_REG_UNLOCK_RETRY_MS);
    pthread_mutex_lock(&r->mu);
    snprintf(r->orphan_lock, sizeof r->orphan_lock, "%s", mine);
    r->orphan_retry_at = sf_clocks_boot_ms() + SF_REG_UNLOCK_RETRY_MS;
    pthread_mutex_unlock(&r->mu);
}

/* The registry's thread: one more try at a lock node left by sf_reg_unlock. */
static void sf_reg_retry_unlock(sf_registry *r)
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

/* Automatic id: lock recipe, lowest free id, unlock. */
static int sf_reg_claim_auto(sf_registry *r, int64_t *id, char *err, size_t errlen)
{
    char mine[SF_REG_PATH_MAX] = "";
    int result = sf_reg_take_lock(r, mine, sizeof mine, err, errlen);
    if (result == 0)
        result = sf_reg_claim_lowest_free(r, id, err, errlen);
    if (mine[0])
        sf_reg_unlock(r, mine);
    return result;
}

/* Deletes our worker node, e.g. when we must not serve after claiming it. */
static void sf_reg_release_worker(sf_registry *r, int64_t id)
{
    char path[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, path, sizeof path);
    int rc = zoo_delete(r->zh, path, -1);
    if (rc != ZOK && rc != ZNONODE)
        sf_reg_log(r, "warning", "cannot delete %s: %s (it goes when the session closes)", path,
                   zerror(rc));
}

/* Completion of a renewal: takes the outcome into the state machine. Runs on the client
 * library's completion thread; never calls into ZooKeeper. */
static void sf_reg_renew_done(int rc, const void *data)
{
    sf_registry *r = (sf_registry *)data;
    pthread_mutex_lock(&r->mu);
    sf_reg_renewal *w = &r->renewal;
    w->in_flight = false;
    w->done = true;
    w->rc = rc;
    int64_t session = w->zh == r->zh && r->zh ? sf_reg_session_id(r) : -1;
    int werr = w->results[0].err, serr = w->results[1].err;
    char why[128] = "";
    if (rc == ZOK && w->worker_stat.ephemeralOwner == session) {
        r->worker_version = w->worker_stat.version;
        r->state_version = w->state_stat.version;
        r->state_value = w->value;
        if (!w->release)
            r->reserved_until = w->value;
        sf_reg_certify(r, w);
        int64_t until = sf_reg_lease_end(r);
        if (until > r->lease_until)
            r->lease_until = until;
        w->outcome = SF_REG_EV_RENEWED;
    } else if (rc == ZOK || werr == ZNONODE) {
        w->outcome = SF_REG_EV_NODE_LOST;
    } else if (rc == ZSESSIONEXPIRED || rc == ZAUTHFAILED) {
        w->outcome = SF_REG_EV_EXPIRED;
    } else if (werr == ZBADVERSION || serr == ZBADVERSION || serr == ZNONODE) {
        /* Someone else changed a node: read both again and retry at once. */
        r->resync = true;
        r->next_renew = 0;
        w->outcome = SF_REG_EV_RENEW_FAILED;
        snprintf(why, sizeof why, "another session changed our nodes (%s); checking them",
                 zerror(rc));
    } else {
        r->next_renew = sf_clocks_boot_ms() + SF_REG_BACKOFF_MIN_MS;
        w->outcome = SF_REG_EV_RENEW_FAILED;
        snprintf(why, sizeof why, "no confirmation from ZooKeeper's leader (%s)", zerror(rc));
    }
    sf_reg_step(r, w->outcome, why[0] ? why : NULL);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Re-reads our worker node and the state node after a renewal met a changed version.
 * Returns false when the worker node is not ours any more (NODE_LOST taken). */
static bool sf_reg_resync(sf_registry *r, int64_t id)
{
    char path[SF_REG_PATH_MAX], data[SF_REG_DATA_MAX], err[SF_REGISTRY_ERR_MAX];
    struct Stat st;
    sf_reg_worker_path(r, id, path, sizeof path);
    int rc = sf_reg_get_string(r, path, data, sizeof data, &st);
    pthread_mutex_lock(&r->mu);
    bool lost = rc == ZNONODE || (rc == ZOK && st.ephemeralOwner != sf_reg_session_id(r));
    if (rc == ZOK && !lost)
        r->worker_version = st.version;
    if (lost)
        sf_reg_step(r, SF_REG_EV_NODE_LOST, NULL);
    pthread_mutex_unlock(&r->mu);
    if (rc != ZOK)
        return !lost;
    if (sf_reg_load_state(r, id, err, sizeof err) != 0)
        sf_reg_log(r, "warning", "%s", err);
    else {
        /* Another writer's floor: even a clean release stays above it. */
        pthread_mutex_lock(&r->mu);
        r->resync = false;
        if (r->state_value > r->base_floor)
            r->base_floor = r->state_value;
        pthread_mutex_unlock(&r->mu);
    }
    return true;
}

/* Sends one renewal: the conditional write described in registry.h. t0 is taken before
 * sending, so the lease never outlasts what ZooKeeper promised. A renewal records the
 * reservation, max(recorded, base floor, last id's timestamp, now + lease): never lower than
 * what is there. The last record of a clean stop (release) records the exact last timestamp,
 * max(base floor, last id's timestamp), which the next holder may start right after. */
static void sf_reg_renew_send(sf_registry *r, int64_t id, bool release)
{
    int64_t last = r->o.last_timestamp ? r->o.last_timestamp(r->o.last_ts_ctx) : -1;
    char wpath[SF_REG_PATH_MAX], spath[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, wpath, sizeof wpath);
    sf_reg_state_node(r, id, spath, sizeof spath);
    const char *wdata = r->host_port ? r->host_port : "";
    pthread_mutex_lock(&r->mu);
    sf_reg_renewal *w = &r->renewal;
    if (w->in_flight || !r->zh) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    int64_t value = last > r->base_floor ? last : r->base_floor;
    if (!release) {
        int64_t reserve = sf_clock_now_ms() + sf_registry_lease_ms(r->negotiated_ms);
        if (reserve > value)
            value = reserve;
        if (r->state_value > value)
            value = r->state_value;
    }
    w->value = value;
    w->release = release;
    if (!release && value > r->own_value)
        r->own_value = value;
    w->conn = r->conn;
    snprintf(w->data, sizeof w->data, "%s %" PRId64, release ? "released" : "reserved", value);
    memset(&w->worker_stat, 0, sizeof w->worker_stat);
    memset(&w->state_stat, 0, sizeof w->state_stat);
    memset(w->results, 0, sizeof w->results);
    zoo_set_op_init(&w->ops[0], wpath, wdata, (int)strlen(wdata), r->worker_version,
                    &w->worker_stat);
    zoo_set_op_init(&w->ops[1], spath, w->data, (int)strlen(w->data), r->state_version,
                    &w->state_stat);
    w->in_flight = true;
    w->done = false;
    w->seq++;
    w->zh = r->zh;
    w->t0 = sf_clocks_boot_ms();
    r->next_renew = w->t0 + (sf_registry_renew_ms(r->negotiated_ms) < r->o.state_interval_ms
                                 ? sf_registry_renew_ms(r->negotiated_ms)
                                 : r->o.state_interval_ms);
    /* Sent under the lock: the completion takes it, so it cannot run before w is complete;
     * zoo_amulti only queues the request. */
    int rc = zoo_amulti(r->zh, 2, w->ops, w->results, sf_reg_renew_done, r);
    if (rc != ZOK) {
        w->in_flight = false;
        w->done = true;
        w->rc = rc;
        w->outcome = SF_REG_EV_RENEW_FAILED;
        char why[128];
        snprintf(why, sizeof why, "the renewal could not be sent (%s)", zerror(rc));
        r->next_renew = sf_clocks_boot_ms() + SF_REG_BACKOFF_MIN_MS;
        sf_reg_step(r, SF_REG_EV_RENEW_FAILED, why);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Renews until the first lease, before serving (why is the reason serving begins): a
 * confirmed renewal whose lease is not certified yet (see registry.h) is followed by a
 * second one report interval later. Returns true when serving now. */
static bool sf_reg_renew_and_wait(sf_registry *r, int64_t id, const char *why)
{
    for (int tries = 0; tries < 3; tries++) {
        pthread_mutex_lock(&r->mu);
        r->serve_reason = why;
        bool resync = r->resync;
        pthread_mutex_unlock(&r->mu);
        if (resync && !sf_reg_resync(r, id))
            return false;
        sf_reg_renew_send(r, id, false);
        pthread_mutex_lock(&r->mu);
        while (r->renewal.in_flight && !r->stop)
            sf_reg_wait_locked(r, 100);
        bool serving = r->state == SF_REG_SERVING;
        bool confirmed = r->renewal.done && r->renewal.outcome == SF_REG_EV_RENEWED &&
                         r->state == SF_REG_WAITING_FLOOR;
        int64_t next = r->renewal.t0 + sf_registry_report_ms(r->negotiated_ms);
        pthread_mutex_unlock(&r->mu);
        if (serving || !confirmed)
            return serving;
        int64_t wait = next - sf_clocks_boot_ms();
        if (wait > 0 && !sf_reg_sleep(r, wait))
            return false;
    }
    return false;
}

/* One claim of an id (static: a single try unless retries > 0; auto: the lock recipe),
 * followed by the restart-safety wait. A node created for a claim that then fails is
 * deleted, so a failed or cancelled claim leaves nothing behind. */
static int sf_reg_claim_once(sf_registry *r, int retries, int64_t *id, int64_t *floor_ms,
                             char *err, size_t errlen)
{
    int rc = r->wanted_id >= 0 ? sf_reg_claim_static(r, id, err, errlen, retries)
                               : sf_reg_claim_auto(r, id, err, errlen);
    if (rc != 0)
        return -1;
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

/* Level 0 turns the client library's logging off entirely. */
void sf_registry_set_client_logging(bool verbose)
{
    zoo_set_debug_level(verbose ? ZOO_LOG_LEVEL_WARN : (ZooLogLevel)0);
}

/* Duplicates a string, or makes "<path><suffix>" when s is NULL. */
static char *sf_reg_dup_or_derive(const char *s, const char *path, const char *suffix)
{
    if (s)
        return strdup(s);
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s%s", path, suffix);
    return out;
}

sf_registry *sf_registry_new(const sf_registry_options *opts, char *err, size_t errlen)
{
    char why[SF_REGISTRY_ERR_MAX];
    if (!sf_registry_options_check(opts, why, sizeof why)) {
        sf_reg_set_err(err, errlen, "%s", why);
        return NULL;
    }
    sf_registry *r = calloc(1, sizeof *r);
    if (!r) {
        sf_reg_set_err(err, errlen, "out of memory");
        return NULL;
    }
    r->o = *opts;
    r->hosts = strdup(opts->hosts);
    r->worker_id_path = strdup(opts->worker_id_path);
    r->lock_path = sf_reg_dup_or_derive(opts->lock_path, opts->worker_id_path, "-locks");
    r->state_path = sf_reg_dup_or_derive(opts->state_path, opts->worker_id_path, "-state");
    r->host_port = opts->host_port ? strdup(opts->host_port) : NULL;
    r->auth = opts->auth && *opts->auth ? strdup(opts->auth) : NULL;
    r->wanted_id = opts->worker_id;
    r->held_id = -1;
    r->floor_ms = -1;
    r->state_version = -1;
    r->state_value = -1;
    r->own_value = -1;
    r->base_floor = -1;
    r->negotiated_ms = opts->session_timeout_ms;
    r->backoff_ms = SF_REG_BACKOFF_MIN_MS;
    r->state = SF_REG_CONNECTING;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &cattr);
    pthread_condattr_destroy(&cattr);
    if (!r->hosts || !r->worker_id_path || !r->lock_path || !r->state_path ||
        (opts->host_port && !r->host_port) || (opts->auth && *opts->auth && !r->auth)) {
        sf_reg_set_err(err, errlen, "out of memory");
        sf_registry_close(r);
        return NULL;
    }
    if (sf_reg_open_session(r, err, errlen) != 0) {
        sf_registry_close(r);
        return NULL;
    }
    return r;
}

/* The original's sanity checks against the peers (registry_peers.c), made before every
 * claim: a clock that drifted since start-up is seen before it takes an id. */
static int sf_reg_check_peers(sf_registry *r, char *err, size_t errlen)
{
    if (r->o.skip_sanity_checks)
        return 0;
    sf_registry_peers peers = {
        .zh = r->zh, .worker_id_path = r->worker_id_path, .host_port = r->host_port,
        .datacenter_id = r->o.datacenter_id,
        .skip_unreachable_peers = r->o.skip_unreachable_peers,
        .max_clock_skew_ms = r->o.max_clock_skew_ms, .query_peer = r->o.query_peer,
        .peer_ctx = r->o.peer_ctx, .log = r->o.log, .log_ctx = r->o.log_ctx,
        .cancelled = sf_reg_cancelled, .cancel_ctx = r};
    return sf_registry_peers_check(&peers, err, errlen);
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

int sf_registry_claim(sf_registry *r, int64_t *worker_id, int64_t *floor_ms, char *err,
                      size_t errlen)
{
    if (sf_reg_wait_session(r, err, errlen) != 0)
        return -1;
    sf_reg_log(r, "info", "ZooKeeper session 0x%" PRIx64 " with %s, timeout %d ms",
               (uint64_t)sf_reg_session_id(r), r->hosts, r->negotiated_ms);
    if (sf_reg_ensure_path(r, r->worker_id_path, err, errlen) != 0 ||
        sf_reg_ensure_path(r, r->lock_path, err, errlen) != 0 ||
        sf_reg_ensure_path(r, r->state_path, err, errlen) != 0)
        return -1;
    sf_reg_warn_standalone(r);
    if (r->o.skip_sanity_checks)
        sf_reg_log(r, "warning", "peer sanity checks skipped (skip_sanity_checks = true)");
    else if (sf_reg_check_peers(r, err, errlen) != 0)
        return -1;
    int64_t id = -1, floor = -1;
    if (sf_reg_claim_once(r, r->o.claim_retries, &id, &floor, err, errlen) != 0)
        return -1;
    if (sf_reg_stopped(r)) {
        sf_reg_release_worker(r, id);
        sf_reg_set_err(err, errlen, "stopped right after claiming worker id %" PRId64
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
        if (sf_reg_get_string(r, path, data, sizeof data, &st) == ZOK &&
            st.ephemeralOwner == sf_reg_session_id(r)) {
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
    if (!kept && sf_reg_check_peers(r, err, sizeof err) != 0) {
        char reason[SF_REGISTRY_ERR_MAX + 128];
        snprintf(reason, sizeof reason, "the peer sanity checks before claiming again failed, "
                 "will retry: %s", err);
        pthread_mutex_lock(&r->mu);
        sf_reg_step(r, SF_REG_EV_FAILED, reason);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (!kept && sf_reg_claim_once(r, 0, &id, &floor, err, sizeof err) != 0) {
        char reason[SF_REGISTRY_ERR_MAX + 64];
        snprintf(reason, sizeof reason, "claiming a worker id again failed, will retry: %s", err);
        pthread_mutex_lock(&r->mu);
        sf_reg_step(r, SF_REG_EV_FAILED, reason);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (!sf_reg_renew_and_wait(r, id, kept ? "claimed again (the session survived)"
                                            : "claimed again")) {
        pthread_mutex_lock(&r->mu);
        sf_reg_step(r, SF_REG_EV_FAILED, "the first lease on the claimed worker id was not "
                    "confirmed by ZooKeeper's leader; will claim again");
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
        if (state == SF_REG_SERVING && r->connected && !r->renewal.in_flight &&
            now >= r->next_renew) {
            int64_t id = r->held_id;
            bool resync = r->resync;
            pthread_mutex_unlock(&r->mu);
            if (!resync || sf_reg_resync(r, id))
                sf_reg_renew_send(r, id, false);
            continue;
        }
        int64_t wake = now + 1000;
        if (state == SF_REG_SERVING) {
            if (r->connected && !r->renewal.in_flight && r->next_renew < wake)
                wake = r->next_renew;
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
    if (!held || !sf_reg_renew_and_wait(r, id, "worker id claimed")) {
        pthread_mutex_lock(&r->mu);
        if (r->state != SF_REG_FENCED)
            sf_reg_step(r, SF_REG_EV_FAILED, "the ZooKeeper session was lost before serving began");
        else
            sf_reg_queue_fenced(r, r->reason, true);
        pthread_mutex_unlock(&r->mu);
    }
    sf_reg_deliver(r);
    int rc = pthread_create(&r->thread, NULL, sf_reg_thread, r);
    if (rc != 0) {
        sf_reg_set_err(err, errlen, "cannot start the registry thread: %s", strerror(rc));
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

/* The last record at shutdown: the same conditional write as a renewal, sent only while the
 * worker node is ours (a lost node must not be written after). */
static void sf_reg_final_record(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    int64_t id = r->held_id;
    bool live = id >= 0 && r->zh && r->connected && !r->expired;
    pthread_mutex_unlock(&r->mu);
    if (!live)
        return;
    /* The state machine is stopped (events change nothing now): send directly and take the
     * outcome from the completion. */
    pthread_mutex_lock(&r->mu);
    while (r->renewal.in_flight)
        sf_reg_wait_locked(r, 100);
    pthread_mutex_unlock(&r->mu);
    for (int tries = 0; tries < 2; tries++) {
        sf_reg_renew_send(r, id, true);
        pthread_mutex_lock(&r->mu);
        while (r->renewal.in_flight)
            sf_reg_wait_locked(r, 100);
        bool ok = r->renewal.outcome == SF_REG_EV_RENEWED;
        bool again = r->resync && r->renewal.outcome == SF_REG_EV_RENEW_FAILED;
        pthread_mutex_unlock(&r->mu);
        if (ok) {
            sf_reg_log(r, "info", "released worker id %" PRId64, id);
            return;
        }
        if (!again || !sf_reg_resync(r, id))
            break;
    }
    sf_reg_log(r, "warning", "cannot record the last timestamp of worker id %" PRId64 " in %s: "
               "the node is not ours any more or ZooKeeper did not confirm the write", id,
               r->state_path);
}

void sf_registry_close(sf_registry *r)
{
    if (!r)
        return;
    sf_registry_cancel(r);
    if (r->thread_started)
        pthread_join(r->thread, NULL);
    if (r->zh) {
        sf_reg_final_record(r);
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
