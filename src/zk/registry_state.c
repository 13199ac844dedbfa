/* registry_state.c -- the state machine: every event goes through sf_reg_step, which moves
 * the state, logs each transition once and queues the reports for the caller's callbacks.
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
#include "common/jitter.h"
#include "lib/snowflake.h"

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
         * begins with a lease that lasts until the renewals to come are expected to
         * lengthen it, so that it does not run out right after. */
        if (r->lease_until <= now ||
            (!was_serving && r->lease_until <= sf_reg_next_extension(r, now)))
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
                (lease_out || now - r->disconnected_since >= sf_registry_grace_ms(r->negotiated_ms)))
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
void sf_reg_deliver(sf_registry *r)
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

/* Marks the wait for the floor, which sf_registry_get_health names (lock not held). */
void sf_reg_set_floor_wait(sf_registry *r, bool waiting)
{
    pthread_mutex_lock(&r->mu);
    r->floor_wait = waiting;
    pthread_mutex_unlock(&r->mu);
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
