/* embedded_calls.c -- what a handle answers once made (snowflake_zk.h): ids through the
 * fence, the state, the figures, sfz_shut. Every call passes the gate first, once
 * (embedded_internal.h): in a process the handle does not belong to (a child by fork()) it
 * is refused at once or, for ids with on_fork = SFZ_ON_FORK_CLAIM, waits for the child's
 * own claim; and once sfz_stop began it touches nothing sfz_stop frees. */
#define _GNU_SOURCE
#include "embedded_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clocks.h"
#include "embedded_health.h"

/* Why a stopping handle refuses. */
static const char sfz_stopping_reason[] = "stopping: sfz_stop was called";

int sfz_next_ids(sfz *h, int64_t *ids, size_t count, sfz_error *err)
{
    if (__builtin_expect(ids == NULL || count == 0 || count > SFZ_MAX_IDS, 0))
        return sfz_fail(err, SFZ_ERR_ARG, "asked for %zu ids into %s: 1..%d ids, into a "
                        "buffer, are allowed", count, ids == NULL ? "NULL" : "a buffer",
                        SFZ_MAX_IDS);
    if (sfz_forked(h)) { /* a bad call claims nothing */
        int rc = sfz_claim_here(h, err);
        if (rc != SFZ_OK)
            return rc;
    }
    sfz_gate_slot *slot;
    if (!sfz_id_enter(h, &slot))
        return sfz_fail(err, SFZ_ERR_FENCED, "%s", sfz_stopping_reason);
    char why[SF_FENCE_REASON_MAX];
    sf_error e;
    int rc = sf_fence_next_ids(h->fence, ids, count, why, sizeof why, &e);
    sfz_id_leave(h, slot);
    if (__builtin_expect(rc == SF_OK, 1))
        return SFZ_OK;
    if (rc == SF_FENCE_CLOSED || rc == SF_FENCE_DISCARDED) {
        sfz_fail(err, SFZ_ERR_FENCED, "%s", why);
        if (err != NULL && rc == SF_FENCE_DISCARDED)
            err->discarded = count;
        return SFZ_ERR_FENCED;
    }
    if (err != NULL) {
        err->code = e.code;
        err->behind_ms = e.behind_ms;
        err->discarded = 0;
        snprintf(err->message, sizeof err->message, "%s", e.message);
    }
    return e.code;
}

int sfz_next_id(sfz *h, int64_t *id, sfz_error *err)
{
    return sfz_next_ids(h, id, 1, err);
}

/* The worker id or datacenter id held, behind the gate: -1 where the handle is not ours. */
static int64_t sfz_gated_id(sfz *h, bool datacenter)
{
    if (!sfz_enter_here(h))
        return -1;
    int64_t id = sfz_held_id(h, datacenter);
    sfz_leave(h);
    return id;
}

int64_t sfz_worker_id(sfz *h)
{
    return sfz_gated_id(h, false);
}

int64_t sfz_datacenter_id(sfz *h)
{
    return sfz_gated_id(h, true);
}

/* The state of a handle that is this process's, inside the gate. */
static void sfz_state_inside(sfz *h, sfz_state *out)
{
    pthread_mutex_lock(&h->lock);
    *out = h->state;
    pthread_mutex_unlock(&h->lock);
    out->worker_id = sfz_held_id(h, false);
    out->datacenter_id = h->o.datacenter_id;
    /* The fence knows first when a lease ran out (a process frozen past it). */
    if (out->serving && sf_fence_refusal(h->fence, out->reason, sizeof out->reason))
        out->serving = false;
}

/* What a handle that is not this process's (a fork() child's copy) says of its state. */
static void sfz_state_foreign(sfz *h, sfz_state *out)
{
    memset(out, 0, sizeof *out);
    out->worker_id = -1;
    out->datacenter_id = -1;
    sfz_error err;
    if (h->o.on_fork == SFZ_ON_FORK_CLAIM)
        sfz_fail(&err, SFZ_ERR_FORKED, "starting: this process (pid %ld) is a fork() of pid "
                 "%ld and claims a worker id of its own at its first id call",
                 (long)getpid(), (long)h->made_by);
    else
        sfz_fail_forked(h, &err);
    snprintf(out->reason, sizeof out->reason, "%s", err.message);
}

/* What a call refused at the gate because sfz_stop began says (h is not read again). */
static void sfz_state_stopping(sfz_state *out)
{
    memset(out, 0, sizeof *out);
    out->worker_id = -1;
    out->datacenter_id = -1;
    snprintf(out->reason, sizeof out->reason, "%s", sfz_stopping_reason);
}

void sfz_get_state(sfz *h, sfz_state *out)
{
    if (sfz_forked(h)) {
        sfz_state_foreign(h, out);
        return;
    }
    if (!sfz_enter(h)) {
        sfz_state_stopping(out);
        return;
    }
    sfz_state_inside(h, out);
    sfz_leave(h);
}

void sfz_get_health(sfz *h, sfz_health *out)
{
    if (sfz_forked(h)) {
        sfz_health_fill(out, false, h->o.on_fork != SFZ_ON_FORK_CLAIM, NULL, NULL, 0);
        return;
    }
    if (!sfz_enter(h)) {
        sfz_health_fill(out, false, true, NULL, NULL, 0);
        return;
    }
    sfz_state st;
    sfz_state_inside(h, &st);
    pthread_mutex_lock(&h->lock); /* a start between two paths may drop the registry */
    sfz_health_fill(out, st.serving, h->shut, h->registry, h->fence, h->since_ms);
    out->start_tries = h->start_tries;
    out->next_try_ms = h->next_try_ms;
    pthread_mutex_unlock(&h->lock);
    sfz_leave(h);
}

void sfz_read_state_fd(sfz *h)
{
    /* A child's descriptor is the parent's eventfd: reading it would take its news. */
    if (!sfz_enter_here(h))
        return;
    uint64_t n;
    /* Unreadable until the next transition; nothing to read is fine (EAGAIN). */
    if (read(h->event_fd, &n, sizeof n) < 0 && errno != EAGAIN)
        sfz_log_line(h, "warning", "cannot reset the state descriptor: %s", strerror(errno));
    sfz_leave(h);
}

int sfz_worker_ids_taken(sfz *h, char *path, size_t pathlen)
{
    if (path != NULL && pathlen > 0)
        path[0] = '\0';
    if (!sfz_enter_here(h))
        return -1;
    pthread_mutex_lock(&h->lock); /* a start between two paths may drop the registry */
    int taken = h->registry != NULL ? sf_registry_worker_ids_taken(h->registry) : -1;
    if (path != NULL && pathlen > 0 && h->registry != NULL)
        sf_registry_worker_id_path(h->registry, path, pathlen);
    pthread_mutex_unlock(&h->lock);
    sfz_leave(h);
    return taken;
}

void sfz_get_stats(sfz *h, sf_worker_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!sfz_enter_here(h))
        return;
    sf_worker *w = sf_fence_worker(h->fence);
    if (w != NULL)
        sf_worker_get_stats(w, out);
    sfz_leave(h);
}

void sfz_get_renewals(sfz *h, sfz_renewals *out)
{
    sf_registry_renewal_stats rs = {.last_ms = -1}; /* sfz_renewals's fields (asserted) */
    if (sfz_enter_here(h)) {
        pthread_mutex_lock(&h->lock); /* a start between two paths may drop the registry */
        if (h->registry != NULL)
            sf_registry_get_renewal_stats(h->registry, &rs);
        pthread_mutex_unlock(&h->lock);
        sfz_leave(h);
    }
    memcpy(out, &rs, sizeof *out);
}

void sfz_get_skew(sfz *h, sfz_skew *out)
{
    memset(out, 0, sizeof *out);
    if (!sfz_enter_here(h))
        return;
    pthread_mutex_lock(&h->lock);
    if (h->skew != NULL)
        sfz_skew_read(h->skew, out);
    pthread_mutex_unlock(&h->lock);
    sfz_leave(h);
}

int sfz_state_fd(sfz *h)
{
    if (!sfz_enter_here(h))
        return -1;
    int fd = h->event_fd;
    sfz_leave(h);
    return fd;
}

void sfz_shut(sfz *h, const char *reason)
{
    if (!sfz_enter_here(h))
        return;
    pthread_mutex_lock(&h->lock);
    h->shut = true;
    sf_fence_close(h->fence, reason);
    if (h->state.serving)
        h->since_ms = sf_clock_now_ms();
    h->state.serving = false;
    snprintf(h->state.reason, sizeof h->state.reason, "%s", reason);
    pthread_mutex_unlock(&h->lock);
    sfz_leave(h);
}
