/* registry_internal.h -- what the registry's files share and nothing outside src/zk/ sees:
 * the state, the registry's struct, and the functions one file calls in another. The public
 * interface is registry.h; this header may change with any commit.
 * r->mu guards the struct's fields from `zh` on. The state machine (sf_reg_step and the
 * queueing it does) and the functions whose comment says "lock held" run with it held; the
 * others take it where they need it. */
#ifndef SF_REGISTRY_INTERNAL_H
#define SF_REGISTRY_INTERNAL_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
/* The synchronous API exists only in the multi-threaded client. */
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#include "common/clocks.h"
#include "registry.h"
#include "registry_log.h"

/* A line to the registry's log (the caller's, or standard error). */
#define sf_reg_log(r, level, ...) \
    sf_registry_log_to((r)->o.log, (r)->o.log_ctx, level, __VA_ARGS__)

#define SF_REG_PATH_MAX 1024
#define SF_REG_DATA_MAX 512
#define SF_REG_REASON_MAX SF_REGISTRY_ERR_MAX
#define SF_REG_REPORTS 8          /* reports queued between two deliveries */
#define SF_REG_BACKOFF_MIN_MS 100 /* the first retry after a failure */
#define SF_REG_BACKOFF_MAX_MS 5000
#define SF_REG_CONNECT_MIN_MS 5000 /* a new session gets at least this long to come up */
#define SF_REG_PENDING 16         /* confirmed renewals of one connection not yet certified */
#define SF_REG_IN_FLIGHT 16       /* renewals sent and not yet answered, at most */
#define SF_REG_RECENT 4           /* round trips the start of serving is judged by */
#define SF_REG_UNLOCK_TRIES 3     /* deletes of our lock node before leaving it to the thread */
#define SF_REG_UNLOCK_RETRY_MS 1000 /* the thread's later tries */
#define SF_REG_SLOTS_EVERY_MS 1000  /* the holders under the path are read at most this often */
/* An automatic claim that does not wait when ids are scarce (claim_waits false) returns this
 * when fewer are free than claimants queued ahead of it. */
#define SF_REGISTRY_SCARCE (-5)
_Static_assert(SF_REGISTRY_SCARCE != SF_REGISTRY_NOT_YET, "the registry's codes differ");

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

/* One renewal write: sent, its answer not yet taken. ZooKeeper fills results and stats when
 * it completes; the completion gets the slot, which holds its registry. */
typedef struct sf_reg_renewal {
    sf_registry *r;
    bool used;            /* sent; free again once its completion ran */
    uint64_t seq;         /* bumped by every send, so a waiter can tell its answer */
    uint64_t gen;         /* the run of renewals it belongs to (see sf_registry.pipe_gen) */
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

/* A confirmed renewal of the current connection, waiting to be certified (registry.h). */
typedef struct sf_reg_confirmed {
    int64_t sent, confirmed; /* boot ms: before it was sent, when its confirmation ran */
} sf_reg_confirmed;

/* The holders under worker_id_path as the slots watch last saw them (registry_peers.c). */
typedef struct sf_reg_holders {
    pthread_mutex_t mu;      /* guards the fields below */
    bool known;              /* a listing of the path arrived */
    int32_t cversion;        /* the path's child version at that listing */
    uint32_t present;        /* a bit per worker id held */
    uint32_t gen[SF_REGISTRY_MAX_WORKERS]; /* bumped when the id's holder may have changed */
    char *data[SF_REGISTRY_MAX_WORKERS];   /* each holder's node data once read; NULL = not */
} sf_reg_holders;

struct sf_registry {
    sf_registry_options o;   /* strings below are our own copies */
    char *hosts, *worker_id_path, *lock_path, *state_path, *host_port, *auth;
    char *servers, *chroot;  /* hosts without its chroot, which the session is opened with;
                              * the chroot ("" = none), which every path above begins with */
    int64_t wanted_id;       /* the configured id, -1 = automatic */
    struct ACL acl[2];       /* with a credential: its holders ALL, everyone READ */
    struct ACL_vector acl_vec;

    pthread_mutex_t mu;      /* guards everything below */
    pthread_cond_t cv;       /* on CLOCK_MONOTONIC: only waits, never leases */
    zhandle_t *zh;           /* the current session's handle; NULL between sessions */
    int negotiated_ms;       /* the session timeout granted on the current connection */
    int64_t grace_ms;        /* GRACE of negotiated_ms (sf_registry_grace_ms), set with it */
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
    int zh_users;            /* other threads reading through zh: it is not closed meanwhile */
    bool session_checked;    /* sf_registry_claim found this session up (and warned once) */
    bool claim_waits;        /* the caller's automatic claim waits its turn when ids are
                              * scarce (else SF_REGISTRY_SCARCE); the thread's always waits */
    bool zk_failed;          /* a request of the claim now under way failed for ZooKeeper's
                              * reasons (connection, timeout, session), not for a holder's */
    bool not_yet;            /* the claim now under way failed for a reason that can pass
                              * (SF_REGISTRY_NOT_YET): an id held, a clock, a peer */
    bool clock_checked;      /* the claim now under way wrote the path's epoch record, and
                              * its stamp passed the clock check: no other write need */

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
    sf_reg_confirmed pending[SF_REG_PENDING]; /* oldest first */
    int pending_count;
    char orphan_lock[SF_REG_PATH_MAX]; /* a lock node of ours whose delete failed; "" = none */
    char unsure_worker[SF_REG_PATH_MAX]; /* a worker node a create of ours may have made (its
                              * answer lost, not read since); "" = none. The claiming thread's */
    int64_t unsure_session;  /* ...the session that sent that create */
    int64_t lock_unsure_session; /* a lock node's create of this session lost its answer and
                              * the node was not found: it may exist, behind which our next
                              * claim would queue; that claim looks for it first. The
                              * claiming thread's; 0 = none */
    char watched_lock[SF_REG_PATH_MAX]; /* the lock node a claim last watched; "" = none */
    int64_t orphan_retry_at; /* boot ms */
    bool resync;             /* a renewal met a changed version: re-read before the next */
    int64_t lease_until;     /* boot ms; 0 = no lease */
    bool lease_lasts;        /* with a RENEWED event: lease_until is past the next extension
                              * expected, so serving may begin on it (registry_lease.c) */
    int64_t next_renew;      /* boot ms */
    int64_t retry_at;        /* boot ms, while FENCED */
    int64_t backoff_ms;
    bool lease_failing;      /* warn once per run of failed renewals */
    const char *serve_reason; /* why serving begins at the next first lease */
    char reason[SF_REG_REASON_MAX]; /* why not serving, as last reported */
    sf_registry_cause cause; /* what fenced us last (STARTING until the first lease) */
    bool floor_wait;         /* waiting for the clock to pass the floor of the id held */
    bool ever_connected;     /* a connection came up once: any later one is a reconnect */
    uint64_t reconnects, expirations; /* for sf_registry_get_health */
    sf_reg_renewal renewals[SF_REG_IN_FLIGHT]; /* those in flight are used */
    uint64_t renew_seq;      /* the last renewal sent */
    uint64_t answered_seq;   /* the last renewal answered, and what it told: */
    sf_reg_event answered;
    uint64_t pipe_gen;       /* bumped by the first failure of a run: the renewals behind a
                              * failed one fail too, and are not sent until it drained */
    bool pipe_broken;        /* ...renewals of the failed run are still in flight */
    int32_t send_worker_version, send_state_version; /* what the next renewal expects */
    int64_t recent_rtt[SF_REG_RECENT]; /* the last round trips, ms */
    int recent_count;
    sf_registry_renewal_stats stats;

    sf_reg_report reports[SF_REG_REPORTS];
    int report_head, report_count;

    bool thread_started;
    pthread_t thread;
    atomic_int slots_taken;  /* worker ids taken under worker_id_path as last read; -1 = not yet */
    atomic_bool slots_off;   /* closing: a change (our own node going) reads no more */
    atomic_bool slots_dirty; /* the watch fired: the thread reads the holders again */
    atomic_bool cloexec_warned; /* the client's descriptors could not be marked: said once */
    int64_t slots_read_at;   /* boot ms of the last read the watch was armed with */
    sf_reg_holders holders;  /* who holds them, for the live peer list */
    int slots_reading;       /* reads of worker_id_path's children not yet answered */
    int unwatching;          /* requests to drop our watches not yet answered */
};

/* A write of ours that ZooKeeper's leader stamped with its clock (mtime, Unix ms), and our
 * clock when we sent it and when its answer came; valid false when there was none (a node
 * of ours found, not made). */
typedef struct sf_reg_stamp {
    bool valid;
    int64_t mtime, sent, answered;
} sf_reg_stamp;

/* ---- What every part names and reads the same way, defined here (no part calls another
 * for them): our session's id, the ACL of every node we create, the paths of an id's worker
 * node and state node, a node read as a string, and the notes that a request of the claim
 * under way failed for ZooKeeper's reasons (a lost or timed-out connection, an expired
 * session: the caller may try again) or for a reason that can pass (SF_REGISTRY_NOT_YET). */

/* The session id of the current handle, to recognise our own ephemeral nodes. */
static inline int64_t sf_reg_session_id(sf_registry *r)
{
    const clientid_t *cid = zoo_client_id(r->zh);
    return cid ? cid->client_id : 0;
}

/* The ACL for every node we create: with a credential, only its holders may change
 * them and everyone may read; without, the original's open ACL. */
static inline struct ACL_vector *sf_reg_acl(sf_registry *r)
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

static inline void sf_reg_worker_path(sf_registry *r, int64_t id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%" PRId64, r->worker_id_path, id);
}

static inline void sf_reg_state_node(sf_registry *r, int64_t id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%" PRId64, r->state_path, id);
}

/* Reads a node's data as a string. Returns a ZooKeeper code. */
static inline int sf_reg_get_string(sf_registry *r, const char *path, char *out, size_t outlen,
                                    struct Stat *stat)
{
    int len = (int)outlen - 1;
    int rc = zoo_get(r->zh, path, 0, out, &len, stat);
    out[rc == ZOK && len > 0 ? len : 0] = '\0';
    return rc;
}

static inline void sf_reg_zk_error(sf_registry *r, int rc)
{
    switch (rc) {
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZSESSIONEXPIRED:
    case ZSESSIONMOVED:
    case ZINVALIDSTATE:
    case ZCLOSING:
    case ZNEWCONFIGNOQUORUM:
    case ZRECONFIGINPROGRESS:
    case ZTHROTTLEDOP:
        pthread_mutex_lock(&r->mu);
        r->zk_failed = true;
        pthread_mutex_unlock(&r->mu);
        break;
    default:
        break;
    }
}

static inline void sf_reg_not_yet(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    r->not_yet = true;
    pthread_mutex_unlock(&r->mu);
}

/* The waits every part makes, all on the registry's one condition variable, so that a stop
 * (or any change of state) ends them at once: at most ms (lock held); a sleep that a stop
 * ends (lock not held; false when stopped); whether we are stopping (and the peers module's
 * view of it); and the mark that we wait for the clock to pass the id's floor, which
 * sf_registry_get_health names (lock not held). */
static inline void sf_reg_wait_locked(sf_registry *r, int64_t ms)
{
    struct timespec until = sf_clocks_mono_timespec(sf_clocks_mono_ms() + (ms > 0 ? ms : 0));
    pthread_cond_timedwait(&r->cv, &r->mu, &until);
}

static inline bool sf_reg_sleep(sf_registry *r, int64_t ms)
{
    int64_t end = sf_clocks_boot_ms() + ms;
    pthread_mutex_lock(&r->mu);
    for (int64_t left = ms; !r->stop && left > 0; left = end - sf_clocks_boot_ms())
        sf_reg_wait_locked(r, left);
    bool stopped = r->stop;
    pthread_mutex_unlock(&r->mu);
    return !stopped;
}

static inline bool sf_reg_stopped(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    return stop;
}

static inline bool sf_reg_cancelled(void *ctx)
{
    return sf_reg_stopped(ctx);
}

static inline void sf_reg_set_floor_wait(sf_registry *r, bool waiting)
{
    pthread_mutex_lock(&r->mu);
    r->floor_wait = waiting;
    pthread_mutex_unlock(&r->mu);
}

/* ---- registry.c: the state machine and its reports. The parts reach it only through its
 * input, sf_reg_step, with the events their ZooKeeper answers bring, and its report queue
 * (the state machine's loop); everything else they call lies below them. */
void sf_reg_step(sf_registry *r, sf_reg_event ev, const char *reason);
void sf_reg_queue(sf_registry *r, const sf_reg_report *rep);
void sf_reg_queue_fenced(sf_registry *r, const char *reason, bool force);

/* ---- registry.c, the session: its watcher, which the claim's lock wait sets too. */
void sf_reg_session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* ---- registry_claim.c: the claim.
 * sf_reg_rooted: a path of ours as the ensemble names it: "<chroot><s>", or
 * "<chroot><path><suffix>" when s is NULL (NULL when out of memory); the registry puts the
 * hosts' chroot into its paths itself and opens its sessions without it (zkbatch.h
 * says why).
 * sf_reg_claim_checks, before every claim: the original's peer checks (unless skipped) and
 * the path's epoch record checked in with; 0 or -1 with err filled.
 * sf_reg_claim_once makes one claim (static: a single try unless retries > 0; automatic:
 * the queue, waiting its turn when ids are scarce or not) and the restart-safety wait that
 * follows; a node created for a claim that then fails is deleted, so a failed or cancelled
 * claim leaves nothing behind. 0, -1, SF_REGISTRY_ALL_TAKEN or SF_REGISTRY_SCARCE.
 * sf_reg_release_worker deletes our worker node (noted as unsure when that fails: the next
 * claim settles it); sf_reg_retry_unlock is the thread's retry of a lock node whose delete
 * failed. */
char *sf_reg_rooted(const sf_registry *r, const char *s, const char *path, const char *suffix);
int sf_reg_claim_checks(sf_registry *r, char *err, size_t errlen);
int sf_reg_claim_once(sf_registry *r, int retries, bool wait_when_scarce, int64_t *id,
                      int64_t *floor_ms, char *err, size_t errlen);
void sf_reg_release_worker(sf_registry *r, int64_t id);
void sf_reg_retry_unlock(sf_registry *r);

/* ---- registry_lease.c: the renewals, the lease they certify and the floor record they
 * write. sf_reg_floor_too_far: the floor recorded for id is further ahead of our clock than
 * a new holder waits (*floor_ms filled). sf_reg_wait_for_floor: waits until our clock is
 * past it (kept: the id was ours all along, so a reservation of our own is no floor for
 * us). */
void sf_reg_granted(sf_registry *r, int granted_ms);
int64_t sf_reg_renew_wake(const sf_registry *r);
bool sf_reg_renew_if_due(sf_registry *r, int64_t id);
bool sf_reg_renew_and_wait(sf_registry *r, int64_t id, const char *why, char *err,
                           size_t errlen);
void sf_reg_final_record(sf_registry *r, int64_t until);
bool sf_reg_floor_too_far(sf_registry *r, int64_t id, int64_t *floor_ms);
int sf_reg_wait_for_floor(sf_registry *r, int64_t id, bool kept, int64_t *floor_ms,
                          char *err, size_t errlen);

/* ---- registry_peers.c: the holders under worker_id_path, watched. sf_reg_slots_watch (lock
 * held) only queues a request; sf_reg_slots_refresh (lock held, the registry's thread) arms
 * the watch again after a change, returning 0 or, when it is too soon, the boot ms to try
 * at; init and free bracket the registry's life. sf_reg_unwatch, before zh (no longer r->zh)
 * is closed: the server drops every watch of ours, so that no notification arrives while the
 * handle closes; waited for until boot-clock time until at most. Lock not held. */
void sf_reg_slots_watch(sf_registry *r);
int64_t sf_reg_slots_refresh(sf_registry *r);
void sf_reg_slots_init(sf_registry *r);
void sf_reg_slots_free(sf_registry *r);
void sf_reg_unwatch(sf_registry *r, zhandle_t *zh, int64_t until);

#endif /* SF_REGISTRY_INTERNAL_H */
