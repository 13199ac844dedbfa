/* registry_lease.c -- the lease and the floor record: the renewal write, the anchor that
 * confirmed renewals certify, the lease it gives, and the state node (reservation or release)
 * that a new holder of the id waits past.
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
void sf_reg_granted(sf_registry *r, int granted_ms)
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
        sf_registry_set_err(err, errlen, "cannot read the floor in %s: %s", path, zerror(rc));
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
            sf_registry_set_err(err, errlen, "cannot create %s: %s%s", path, zerror(rc),
                                rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
            return -1;
        }
    }
    sf_registry_set_err(err, errlen, "the state node for worker id %" PRId64 " under %s keeps "
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
bool sf_reg_floor_too_far(sf_registry *r, int64_t id, int64_t *floor_ms)
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
int sf_reg_wait_for_floor(sf_registry *r, int64_t id, bool kept, int64_t *floor_ms,
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
        sf_registry_set_err(err, errlen,
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
            sf_registry_set_err(err, errlen,
                                "stopped while waiting for the clock to pass the floor "
                                "recorded for worker id %" PRId64, id);
            return -1;
        }
    }
    return 0;
}

/* Deletes our worker node, e.g. when we must not serve after claiming it. */
void sf_reg_release_worker(sf_registry *r, int64_t id)
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
bool sf_reg_resync(sf_registry *r, int64_t id)
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
void sf_reg_renew_send(sf_registry *r, int64_t id, bool release)
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
bool sf_reg_renew_and_wait(sf_registry *r, int64_t id, const char *why)
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

/* Waits (lock held) while a renewal is in flight, until boot-clock time until; true when
 * none is in flight. */
static bool sf_reg_wait_renewal(sf_registry *r, int64_t until)
{
    int64_t now;
    while (r->renewal.in_flight && (now = sf_clocks_boot_ms()) < until)
        sf_reg_wait_locked(r, until - now < 100 ? until - now : 100);
    return !r->renewal.in_flight;
}

/* The last record at shutdown: the same conditional write as a renewal, sent only while the
 * worker node is ours (a lost node must not be written after), and waited for until
 * boot-clock time until at most: unconfirmed, the next holder waits out the reservation. */
void sf_reg_final_record(sf_registry *r, int64_t until)
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
    bool idle = sf_reg_wait_renewal(r, until);
    pthread_mutex_unlock(&r->mu);
    for (int tries = 0; idle && tries < 2; tries++) {
        sf_reg_renew_send(r, id, true);
        pthread_mutex_lock(&r->mu);
        if (!sf_reg_wait_renewal(r, until)) {
            pthread_mutex_unlock(&r->mu);
            break;
        }
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
               "the node is not ours any more or ZooKeeper did not confirm the write%s", id,
               r->state_path, sf_clocks_boot_ms() >= until ? " in time (it waits at most "
               "a third of the session timeout)" : "");
}
