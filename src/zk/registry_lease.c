/* registry_lease.c -- the lease: the renewals (conditional writes sent on a beat of their own,
 * several in flight), the anchor each confirmation certifies, the lease it gives and when
 * serving may begin, the renewals' round trips, the last record of a clean stop, and the
 * arithmetic all of it rests on (the formulas below; registry.h says what they promise and
 * the manual's "The lease" derives them). Last, the floor record the renewals write: the
 * state node of each worker id, read back by a new holder, which waits until its clock is
 * past it.
 * Part of the registry (registry.h says where each part lives); knows nothing of sockets.
 * It reports to the state machine (registry.c: sf_reg_step) with what the renewals' answers
 * bring, and queues the report of a lease a new session timeout cut short (sf_reg_queue):
 * the state machine's one loop; everything else it calls lies below it. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include "registry_internal.h"
#include "zkbatch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"
#include "lib/snowflake.h"

/* The lease: when a node may still hand out ids, from what it can know of when ZooKeeper's
 * leader may expire its session, with T the session timeout granted now.
 *
 * What ZooKeeper does. The leader expires a session T after the last activity of it that the
 * leader has heard of (rounded up to its next tick, which only makes it later). A server
 * notes a session's activity when a request of the session arrives. The leader (or a
 * standalone server) hears at once of what arrives at itself; a follower does not tell the
 * leader of the activity when it forwards the session's write, but reports what arrived
 * since its last report in its answer to the leader's next ping. Those answers and the
 * forwarded writes go to the leader on one connection, in order; a session's requests reach
 * its server in the order sent, on one TCP connection. Assumed (REPORT = T/4): a follower
 * answers a ping at least every T/4. The leader pings every tickTime/2 and grants no session
 * shorter than minSessionTimeout, 2 tickTime by default, so this holds while the pings'
 * delay from the leader to the follower varies by less than T/4 - tickTime/2 (0 at the
 * minimum session timeout, 500 ms with the default tickTime of 2 s and T = 10 s). An
 * observer that reaches the leader through a follower (observerMasterPort) is two such
 * hops, each answered every tickTime/2: it needs tickTime + both variations <= T/4, e.g.
 * minSessionTimeout >= 5 tickTime on that observer. The registry cannot ask a server for
 * its role or tickTime (ZooKeeper tells those only to four-letter words and its admin
 * server, not to clients), so the manual says this where it lists the assumptions.
 *
 * Certification. Let renewal i be sent at s_i and its confirmation arrive at c_i, and a
 * confirmed renewal j of the same connection be sent at s_j >= c_i + REPORT. i arrived at
 * the server at a_i, s_i <= a_i <= c_i (it was answered after it arrived); j at a_j >= s_j,
 * so a_j - a_i >= REPORT: the server answered a ping in between, reporting i, before it
 * forwarded j, and the leader had heard of i when it applied j. From then on the leader
 * cannot expire the session before a_i + T >= s_i + T. The latest such s_i is the anchor.
 * Send times alone would not do: a renewal held in the socket (a stalled link, a TCP
 * retransmission) arrives with the ones sent after it, in one ping interval, and the leader
 * may apply them all before it hears of any (held T/4, it would count as certified by the
 * next one, sent T/4 after it but arriving right behind it).
 *   - a new session is created by the leader after zookeeper_init was called: that call is
 *     the session's first anchor;
 *   - a renewal certifies only confirmed renewals of its own connection (a reconnection
 *     starts over: what the old server saw may never reach the leader);
 *   - the lease lasts LEASE = 15T/16 from the anchor, never from the renewal that confirmed
 *     it. The leader expires the session no earlier than T after the anchor, measured on its
 *     monotonic clock, the lease on our boot clock: T/16 is the margin for their rates,
 *     which differ by far less than the 6 % that would eat it.
 * Renewals go out every RENEW = T/8 (or state_interval_ms if shorter), whether or not
 * earlier ones are still in flight: ZooKeeper answers a session's requests in order. With
 * every renewal confirmed, on one connection, within R of being sent, the lease holds
 * without a gap (from 2R + REPORT + 2 RENEW after the renewals began) if
 * 2R + REPORT + 2 RENEW <= LEASE, that is for R up to
 *     ROUND_TRIP_LIMIT = (LEASE - REPORT - 2 RENEW) / 2 = 7T/32
 * (656 ms with T = 3 s, 2.19 s with the default 10 s): at any moment t, the renewal j sent
 * last before t - R was sent after t - R - RENEW and is confirmed by t; the one sent last
 * before s_j - REPORT - R was sent after s_j - REPORT - R - RENEW and confirmed by
 * s_j - REPORT, so j certifies it, and its lease ends after t - 2R - REPORT - 2 RENEW +
 * LEASE >= t. (One renewal at a time, each certified only by one sent T/4 after it, broke
 * at R = T/6.) Beyond the limit the lease may run out between two confirmations, and the
 * node refuses ids until the next. The renewals' round trips are kept as a histogram
 * (sf_registry_get_renewal_stats) so that operators see the limit coming.
 * Serving begins only with a lease that reaches past the moment the next confirmation is
 * expected to lengthen it (at the last round trips' pace), so that a node starting on a
 * slow link does not serve a moment and refuse the next; a node that is not serving within
 * T + REPORT of the claim gives up and claims again. After a pause (a stalled or stopped
 * process, a slow link) or a reconnection, the lease rests on the anchors certified before
 * it, and a fresh anchor takes a renewal, its confirmation and a renewal sent REPORT after
 * that: REPORT and two round trips (T/4: 2.5 s with the default T of 10 s) is what a pause
 * longer than the lease costs.
 * Should the session timeout change on a reconnection (another server, other bounds), the
 * shorter of the two times the anchor is what counts.
 *
 * The same renewal records a reservation in the id's state node: the highest timestamp the
 * node may use under the lease it may get from that renewal (its wall clock when sending +
 * LEASE). Ids above the last confirmed reservation are never handed out, so the reservation
 * is a floor for the next holder whatever the clocks of the two nodes say. The state node
 * holds "reserved <unix ms>" while the id is held, "released <unix ms>" (the exact last
 * timestamp) after a clean stop whose last write ZooKeeper confirmed; a plain number, from an
 * earlier version, is read as a reservation that ends one LEASE later.
 * The reservation's length R is LEASE itself, not a setting: an id under a renewal is made
 * within its lease, so LEASE is as far as the node can use; a longer R would only hold the
 * next holder back, a shorter one would refuse ids while the lease holds (the lease ends
 * LEASE after its anchor, which was sent at least REPORT and a round trip before the last
 * confirmed renewal, whose reservation ends LEASE after it). A crash therefore loses
 * nothing: state_interval_ms, the session timeout and startup_sleep_ms bound only how long
 * the next holder waits, never whether it can repeat a (timestamp, worker) pair.
 *
 * GRACE = T/3: disconnected this long, the registry fences without waiting for the lease. */
int64_t sf_registry_lease_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms * 15 / 16;
}

int64_t sf_registry_renew_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms / 8 > 0 ? session_timeout_ms / 8 : 1;
}

int64_t sf_registry_report_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms / 4;
}

int64_t sf_registry_grace_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms / 3;
}

/* ROUND_TRIP_LIMIT above, for renewals renew_ms apart (sf_registry_renew_ms, or a shorter
 * state_interval_ms). */
int64_t sf_registry_round_trip_limit_ms(int64_t session_timeout_ms, int64_t renew_ms)
{
    return (sf_registry_lease_ms(session_timeout_ms) -
            sf_registry_report_ms(session_timeout_ms) - 2 * renew_ms) / 2;
}

/* How long sf_registry_close waits for ZooKeeper to confirm its last record and to drop our
 * watches, together: the grace, T/3. A silent ensemble cannot hold a close longer (the next
 * holder then waits out the reservation instead of starting right after the last id). */
int64_t sf_registry_close_wait_ms(int64_t session_timeout_ms)
{
    return sf_registry_grace_ms(session_timeout_ms);
}
/* Sends one renewal (or the last record, release); re-reads our nodes after a renewal met
 * another writer. Both below. */
static uint64_t sf_reg_renew_send(sf_registry *r, int64_t id, bool release);
static bool sf_reg_resync(sf_registry *r, int64_t id);
/* When the next confirmation is expected to lengthen the lease (below). */
static int64_t sf_reg_next_extension(const sf_registry *r, int64_t now);
/* Reads the floor record of id into the registry's view (the floor record, at the end). */
static int sf_reg_load_state(sf_registry *r, int64_t id, char *err, size_t errlen);

static const int64_t sf_reg_rtt_bounds[SF_REGISTRY_RENEWAL_BUCKETS] =
    SF_REGISTRY_RENEWAL_BOUNDS_MS;

/* The beat renewals go out on: RENEW, or state_interval_ms if shorter. Lock held. */
static int64_t sf_reg_renew_interval(const sf_registry *r)
{
    int64_t renew = sf_registry_renew_ms(r->negotiated_ms);
    return r->o.state_interval_ms < renew ? r->o.state_interval_ms : renew;
}

/* When the lease certified so far ends (see registry.h): LEASE of the shorter of the
 * session timeouts granted then and now, after the anchor; 0 without one. Lock held. */
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
        r->grace_ms = sf_registry_grace_ms(granted_ms);
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
    r->grace_ms = sf_registry_grace_ms(granted_ms);
    int64_t end = sf_reg_lease_end(r);
    if (r->lease_until > end) {
        r->lease_until = end;
        sf_reg_report rep = {.is_lease = true, .until = end, .reserved = r->reserved_until};
        if (r->state == SF_REG_SERVING)
            sf_reg_queue(r, &rep);
    }
}

/* The confirmed renewal w (its confirmation ran at now) certifies the confirmed renewals of
 * its connection whose confirmation came at least REPORT before w was sent (registry.h): the
 * latest of their send times becomes the anchor. It then waits to be certified itself. A
 * renewal whose connection changed while it was out certifies nothing, and is not kept:
 * which server carried it is unknown. Lock held. */
static void sf_reg_certify(sf_registry *r, const sf_reg_renewal *w, int64_t now)
{
    if (w->conn != r->conn)
        return;
    int64_t cutoff = w->t0 - sf_registry_report_ms(r->negotiated_ms);
    int kept = 0;
    for (int i = 0; i < r->pending_count; i++) {
        if (r->pending[i].confirmed > cutoff) {
            r->pending[kept++] = r->pending[i];
        } else if (r->pending[i].sent > r->anchor) {
            r->anchor = r->pending[i].sent;
            r->anchor_timeout_ms = r->negotiated_ms;
        }
    }
    r->pending_count = kept;
    if (r->pending_count == SF_REG_PENDING) { /* the oldest gives way: a later one certifies */
        memmove(r->pending, r->pending + 1, (SF_REG_PENDING - 1) * sizeof r->pending[0]);
        r->pending_count--;
    }
    r->pending[r->pending_count++] = (sf_reg_confirmed){w->t0, now};
}

/* A confirmed round trip of ms, into the histogram and the recent ones. Lock held. */
static void sf_reg_count_round_trip(sf_registry *r, int64_t ms)
{
    int b = 0;
    while (b < SF_REGISTRY_RENEWAL_BUCKETS && ms > sf_reg_rtt_bounds[b])
        b++;
    r->stats.buckets[b]++;
    r->stats.confirmed++;
    r->stats.sum_ms += ms;
    r->stats.last_ms = ms;
    r->recent_rtt[r->recent_count++ % SF_REG_RECENT] = ms;
}

/* The renewals sent on the current handle and not answered yet. Lock held. */
static int sf_reg_in_flight(const sf_registry *r)
{
    int n = 0;
    for (int i = 0; i < SF_REG_IN_FLIGHT; i++)
        n += r->renewals[i].used && r->renewals[i].zh == r->zh;
    return n;
}

/* Completion of a renewal: takes its outcome into the lease and the state machine. Runs on
 * the client library's completion thread (or in zookeeper_close); never calls into
 * ZooKeeper. The renewals behind a failed one fail too (their versions follow it): only the
 * first failure of a run is told to the state machine. */
static void sf_reg_renew_done(int rc, const void *data)
{
    sf_reg_renewal *w = (sf_reg_renewal *)data;
    sf_registry *r = w->r;
    pthread_mutex_lock(&r->mu);
    int64_t now = sf_clocks_boot_ms();
    w->used = false;
    bool current = w->zh == r->zh && r->zh != NULL;
    int64_t session = current ? sf_reg_session_id(r) : -1;
    int werr = w->results[0].err, serr = w->results[1].err;
    char why[128] = "";
    bool tell = true; /* not another handle's, nor behind a failure already told */
    sf_reg_event outcome = SF_REG_EV_RENEW_FAILED;
    if (current && rc == ZOK && w->worker_stat.ephemeralOwner == session) {
        r->worker_version = w->worker_stat.version;
        r->state_version = w->state_stat.version;
        r->state_value = w->value;
        if (!w->release)
            r->reserved_until = w->value;
        sf_reg_count_round_trip(r, now - w->t0);
        sf_reg_certify(r, w, now);
        int64_t until = sf_reg_lease_end(r);
        if (until > r->lease_until)
            r->lease_until = until;
        /* Serving begins on a lease that lasts until the renewals to come are expected to
         * lengthen it, so that it does not run out right after (registry.h). */
        r->lease_lasts = r->lease_until > sf_reg_next_extension(r, now);
        outcome = SF_REG_EV_RENEWED;
    } else if (!current || w->gen != r->pipe_gen) {
        tell = false;
    } else if (rc == ZOK || werr == ZNONODE) {
        outcome = SF_REG_EV_NODE_LOST;
    } else if (rc == ZSESSIONEXPIRED || rc == ZAUTHFAILED) {
        outcome = SF_REG_EV_EXPIRED;
    } else if (werr == ZBADVERSION || serr == ZBADVERSION || serr == ZNONODE) {
        /* Someone else changed a node: read both again and retry at once. */
        r->resync = true;
        r->next_renew = 0;
        snprintf(why, sizeof why, "another session changed our nodes (%s); checking them",
                 zerror(rc));
    } else {
        r->next_renew = now + SF_REG_BACKOFF_MIN_MS;
        snprintf(why, sizeof why, "no confirmation from ZooKeeper's leader (%s)", zerror(rc));
    }
    if (outcome != SF_REG_EV_RENEWED) {
        r->stats.failed += current;
        if (tell) {
            r->pipe_gen++;
            r->pipe_broken = true;
        }
    }
    if (r->pipe_broken && sf_reg_in_flight(r) == 0)
        r->pipe_broken = false;
    r->answered_seq = w->seq;
    r->answered = outcome;
    if (tell)
        sf_reg_step(r, outcome, why[0] ? why : NULL);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* The renewal slots in use, whatever handle they were sent on. Lock held. */
static int sf_reg_slots_used(const sf_registry *r)
{
    int n = 0;
    for (int i = 0; i < SF_REG_IN_FLIGHT; i++)
        n += r->renewals[i].used;
    return n;
}

/* When the next renewal may go out (boot ms): on its beat, while connected, a slot free, no
 * failed run still draining and no re-read of our nodes waiting for the renewals in flight;
 * INT64_MAX while one of those holds it back (the answer that frees the way wakes the
 * waiters). Lock held. */
int64_t sf_reg_renew_wake(const sf_registry *r)
{
    if (!r->zh || !r->connected || sf_reg_slots_used(r) == SF_REG_IN_FLIGHT)
        return INT64_MAX;
    if ((r->pipe_broken || r->resync) && sf_reg_in_flight(r) > 0)
        return INT64_MAX;
    return r->next_renew;
}

/* True when a renewal may go out now. Lock held. */
static bool sf_reg_renew_due(const sf_registry *r, int64_t now)
{
    return sf_reg_renew_wake(r) <= now;
}

/* Sends the renewal that is due, re-reading our nodes first when a renewal met a changed
 * version. Lock held, released meanwhile. True when it did something. */
bool sf_reg_renew_if_due(sf_registry *r, int64_t id)
{
    if (!sf_reg_renew_due(r, sf_clocks_boot_ms()))
        return false;
    bool resync = r->resync;
    pthread_mutex_unlock(&r->mu);
    if (!resync || sf_reg_resync(r, id))
        sf_reg_renew_send(r, id, false);
    pthread_mutex_lock(&r->mu);
    return true;
}

/* The most a round trip took lately, ms (0 before the first). Lock held. */
static int64_t sf_reg_recent_rtt(const sf_registry *r)
{
    int64_t rtt = 0;
    for (int i = 0; i < r->recent_count && i < SF_REG_RECENT; i++)
        if (r->recent_rtt[i] > rtt)
            rtt = r->recent_rtt[i];
    return rtt;
}

/* When the next confirmation is expected to lengthen the lease, at the pace of the last
 * round trips: that of the first renewal sent at least REPORT after the confirmation of the
 * oldest one waiting to be certified (in flight, or the next due at or after that moment).
 * INT64_MAX when none waits. Lock held. */
static int64_t sf_reg_next_extension(const sf_registry *r, int64_t now)
{
    if (r->pending_count == 0)
        return INT64_MAX;
    int64_t rtt = sf_reg_recent_rtt(r);
    int64_t target = r->pending[0].confirmed + sf_registry_report_ms(r->negotiated_ms);
    int64_t first = INT64_MAX;
    for (int i = 0; i < SF_REG_IN_FLIGHT; i++) {
        const sf_reg_renewal *w = &r->renewals[i];
        if (w->used && w->zh == r->zh && w->conn == r->conn && w->t0 >= target && w->t0 < first)
            first = w->t0;
    }
    if (first == INT64_MAX) {
        int64_t beat = sf_reg_renew_interval(r);
        first = r->next_renew > now ? r->next_renew : now;
        if (first < target)
            first += (target - first + beat - 1) / beat * beat;
    }
    return first + rtt;
}

/* Sends one renewal: the conditional write described in registry.h, expecting the versions
 * the renewals in flight will leave. t0 is taken before sending, so the lease never outlasts
 * what ZooKeeper promised. A renewal records the reservation, max(recorded, base floor, last
 * id's timestamp, now + lease): never lower than what is there. The last record of a clean
 * stop (release) records the exact last timestamp, max(base floor, last id's timestamp),
 * which the next holder may start right after. Returns its sequence number, 0 when none
 * could be sent. */
static uint64_t sf_reg_renew_send(sf_registry *r, int64_t id, bool release)
{
    int64_t last = r->o.last_timestamp ? r->o.last_timestamp(r->o.last_ts_ctx) : -1;
    char wpath[SF_REG_PATH_MAX], spath[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, wpath, sizeof wpath);
    sf_reg_state_node(r, id, spath, sizeof spath);
    const char *wdata = r->host_port ? r->host_port : "";
    pthread_mutex_lock(&r->mu);
    sf_reg_renewal *w = NULL;
    for (int i = 0; i < SF_REG_IN_FLIGHT && w == NULL; i++)
        if (!r->renewals[i].used)
            w = &r->renewals[i];
    int in_flight = sf_reg_in_flight(r);
    if (w == NULL || !r->zh || (r->pipe_broken && in_flight > 0)) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    if (in_flight == 0) { /* nothing in flight: the versions last confirmed are the truth */
        r->send_worker_version = r->worker_version;
        r->send_state_version = r->state_version;
    }
    int64_t value = last > r->base_floor ? last : r->base_floor;
    if (!release) {
        int64_t reserve = sf_clock_now_ms() + sf_registry_lease_ms(r->negotiated_ms);
        if (reserve > value)
            value = reserve;
        if (r->state_value > value)
            value = r->state_value;
    }
    w->r = r;
    w->value = value;
    w->release = release;
    if (!release && value > r->own_value)
        r->own_value = value;
    w->conn = r->conn;
    w->gen = r->pipe_gen;
    snprintf(w->data, sizeof w->data, "%s %" PRId64, release ? "released" : "reserved", value);
    memset(&w->worker_stat, 0, sizeof w->worker_stat);
    memset(&w->state_stat, 0, sizeof w->state_stat);
    memset(w->results, 0, sizeof w->results);
    zoo_set_op_init(&w->ops[0], wpath, wdata, (int)strlen(wdata), r->send_worker_version,
                    &w->worker_stat);
    zoo_set_op_init(&w->ops[1], spath, w->data, (int)strlen(w->data), r->send_state_version,
                    &w->state_stat);
    w->used = true;
    w->seq = ++r->renew_seq;
    w->zh = r->zh;
    w->t0 = sf_clocks_boot_ms();
    r->next_renew = w->t0 + sf_reg_renew_interval(r);
    /* Sent under the lock: the completion takes it, so it cannot run before w is complete;
     * the multi is only queued. */
    int rc = sf_zkbatch_amulti(r->zh, 2, w->ops, w->results, sf_reg_renew_done, w);
    if (rc != ZOK) {
        w->used = false; /* not sent: the renewals in flight expect no version of it */
        r->stats.failed++;
        r->answered_seq = w->seq;
        r->answered = SF_REG_EV_RENEW_FAILED;
        char why[128];
        snprintf(why, sizeof why, "the renewal could not be sent (%s)", zerror(rc));
        r->next_renew = sf_clocks_boot_ms() + SF_REG_BACKOFF_MIN_MS;
        sf_reg_step(r, SF_REG_EV_RENEW_FAILED, why);
    } else {
        r->send_worker_version++;
        r->send_state_version++;
    }
    uint64_t seq = rc == ZOK ? w->seq : 0;
    pthread_mutex_unlock(&r->mu);
    return seq;
}

/* Renews until serving may begin (why is the reason it begins): true when serving now;
 * false, with err saying why, when a renewal failed, the session went, or no lease long
 * enough came within T + REPORT. */
bool sf_reg_renew_and_wait(sf_registry *r, int64_t id, const char *why, char *err,
                           size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    r->serve_reason = why;
    r->next_renew = 0; /* the first goes at once */
    uint64_t first = r->renew_seq;
    int64_t limit = sf_clocks_boot_ms() + r->negotiated_ms +
                    sf_registry_report_ms(r->negotiated_ms);
    bool serving = false;
    snprintf(err, errlen, "the ZooKeeper session was lost before serving began");
    for (;;) {
        int64_t now = sf_clocks_boot_ms();
        serving = r->state == SF_REG_SERVING;
        if (serving || r->stop || r->expired || r->state != SF_REG_WAITING_FLOOR)
            break;
        if (r->answered_seq > first && r->answered != SF_REG_EV_RENEWED) {
            snprintf(err, errlen, "the first lease on the claimed worker id was not confirmed "
                     "by ZooKeeper's leader; will claim again");
            break;
        }
        if (now >= limit) {
            snprintf(err, errlen, "no lease long enough to serve on came within %" PRId64 " ms "
                     "of the claim: ZooKeeper's round trips took up to %" PRId64 " ms lately, "
                     "and with a session timeout of %d ms the lease holds through round trips "
                     "of at most %" PRId64 " ms; will claim again", now - (limit -
                     r->negotiated_ms - sf_registry_report_ms(r->negotiated_ms)),
                     sf_reg_recent_rtt(r), r->negotiated_ms,
                     sf_registry_round_trip_limit_ms(r->negotiated_ms, sf_reg_renew_interval(r)));
            break;
        }
        if (sf_reg_renew_if_due(r, id))
            continue;
        int64_t wake = sf_reg_renew_wake(r);
        sf_reg_wait_locked(r, (wake < limit ? wake : limit) - now);
    }
    pthread_mutex_unlock(&r->mu);
    return serving;
}

/* Waits (lock held) for cond(r) until boot-clock time until; true when it holds. */
static bool sf_reg_wait_until(sf_registry *r, bool (*cond)(sf_registry *, uint64_t),
                              uint64_t arg, int64_t until)
{
    int64_t now;
    while (!cond(r, arg) && (now = sf_clocks_boot_ms()) < until)
        sf_reg_wait_locked(r, until - now < 100 ? until - now : 100);
    return cond(r, arg);
}

/* None in flight. */
static bool sf_reg_none_in_flight(sf_registry *r, uint64_t unused)
{
    (void)unused;
    return sf_reg_in_flight(r) == 0;
}

/* Renewal seq answered. */
static bool sf_reg_seq_answered(sf_registry *r, uint64_t seq)
{
    return r->answered_seq >= seq;
}

/* The last record at shutdown: the same conditional write as a renewal, sent once the
 * renewals in flight were answered, and only while the worker node is ours (a lost node
 * must not be written after); waited for until boot-clock time until at most: unconfirmed,
 * the next holder waits out the reservation. */
void sf_reg_final_record(sf_registry *r, int64_t until)
{
    pthread_mutex_lock(&r->mu);
    int64_t id = r->held_id;
    bool live = id >= 0 && r->zh && r->connected && !r->expired;
    /* The state machine is stopped (events change nothing now): send directly and take the
     * outcome from the completion. */
    bool idle = live && sf_reg_wait_until(r, sf_reg_none_in_flight, 0, until);
    pthread_mutex_unlock(&r->mu);
    if (!live)
        return;
    for (int tries = 0; idle && tries < 2; tries++) {
        uint64_t seq = sf_reg_renew_send(r, id, true);
        pthread_mutex_lock(&r->mu);
        bool answered = seq != 0 && sf_reg_wait_until(r, sf_reg_seq_answered, seq, until);
        bool ok = answered && r->answered == SF_REG_EV_RENEWED;
        bool again = r->resync && answered && r->answered == SF_REG_EV_RENEW_FAILED;
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

void sf_registry_get_renewal_stats(sf_registry *r, sf_registry_renewal_stats *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->stats;
    out->session_timeout_ms = r->negotiated_ms;
    out->round_trip_limit_ms = sf_registry_round_trip_limit_ms(r->negotiated_ms,
                                                               sf_reg_renew_interval(r));
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

/* ---- The floor record: the state node of each worker id under state_path, which says how
 * far its holders may have gone ("reserved <unix ms>" while held, "released <unix ms>"
 * after a clean stop, an earlier version's plain number), and the wait of a new holder until
 * its clock is past it, so that no (timestamp, worker) pair is used twice whatever the
 * clocks say. The renewals above write it; what follows reads it. */

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
        sf_reg_zk_error(r, rc);
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
            sf_reg_zk_error(r, rc);
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
    sf_reg_set_floor_wait(r, true);
    while ((now = sf_clock_now_ms()) <= floor) {
        if (!sf_reg_sleep(r, floor - now + 1)) {
            sf_reg_set_floor_wait(r, false);
            sf_registry_set_err(err, errlen,
                                "stopped while waiting for the clock to pass the floor "
                                "recorded for worker id %" PRId64, id);
            return -1;
        }
    }
    sf_reg_set_floor_wait(r, false);
    return 0;
}

