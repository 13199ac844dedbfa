/* embedded.c -- libsnowflake-zk (snowflake_zk.h): the registry and the fence behind one handle
 * for programs that make ids in process. The registry claims and guards the worker id; its
 * callbacks publish the worker and the lease to the fence, which every call makes its ids
 * through. Knows nothing of sockets or Thrift. */
#define _GNU_SOURCE /* eventfd */
#include "embedded_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/clocks.h"
#include "common/jitter.h"
#include "common/registry_options.h"
#include "common/zkpath.h"
#include "embedded_health.h"
#include "embedded_notify.h"

#define SFZ_RETRY_WAIT_CAP_MS 30000
#define SFZ_DRAIN_POLL_MS 1 /* sfz_stop looks this often whether the calls inside are done */
#define SFZ_SESSION_POLL_MS 100 /* between tries: how often it looks whether the session is up */

/* sfz_peer_fn is the registry's peer callback under its public name: the same signature,
 * and "nothing listens" is 1 in both. */
_Static_assert(SF_REGISTRY_PEER_REFUSED == 1, "sfz_peer_fn's refused code is the registry's");
/* sfz_renewals is the registry's renewal figures under their public name. */
_Static_assert(sizeof(sfz_renewals) == sizeof(sf_registry_renewal_stats) &&
               offsetof(sfz_renewals, buckets) == offsetof(sf_registry_renewal_stats, buckets) &&
               SFZ_RENEWAL_BUCKETS == SF_REGISTRY_RENEWAL_BUCKETS, "the registry's figures");
_Static_assert(SFZ_CALLBACKS_QUEUED == SFZ_NOTIFY_QUEUE, "the callbacks' queue");

void sfz_set_client_logging(bool verbose)
{
    sf_registry_set_client_logging(verbose);
}

void sfz_log_line(sfz *h, const char *level, const char *fmt, ...)
{
    char line[SFZ_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sfz_notifier_log(h->notifier, level, line);
}

/* The worker for id in the datacenter tried now: the one made for it before (the fence
 * owns them all), so that a reclaim goes on from its last id; else a new one, adopted by
 * the fence at once. NULL with err filled when it cannot be made. Runs on the registry's
 * thread (or in sfz_run before that starts). */
static sf_worker *sfz_worker_for(sfz *h, int64_t id, sf_error *err)
{
    sf_worker *w = sf_fence_find(h->fence, h->o.datacenter_id, id);
    if (w != NULL)
        return w;
    sf_worker_options wo;
    sfz_worker_options(&h->o, id, &wo);
    w = sf_worker_new(&wo, err);
    if (w == NULL)
        return NULL;
    if (!sf_fence_adopt(h->fence, w)) {
        sf_worker_free(w);
        err->code = SF_ERR_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory keeping the worker");
        return NULL;
    }
    /* The original's line, which operators grep for. */
    sfz_log_line(h, "info", "worker starting. timestamp left shift %d, datacenter id bits %d, "
                 "worker id bits %d, sequence bits %d, workerid %" PRId64 ", datacenterid %"
                 PRId64, SF_TIMESTAMP_SHIFT, SF_DATACENTER_ID_BITS, SF_WORKER_ID_BITS,
                 SF_SEQUENCE_BITS, id, h->o.datacenter_id);
    return w;
}

/* Records a transition: the state, the descriptor made readable, the application told.
 * After sfz_shut there is none: its state and reason have the last word. */
static void sfz_set_state(sfz *h, bool serving, const char *reason)
{
    sfz_state copy;
    pthread_mutex_lock(&h->lock);
    if (h->shut) {
        pthread_mutex_unlock(&h->lock);
        return;
    }
    if (h->state.serving != serving)
        h->since_ms = sf_clock_now_ms();
    h->state.serving = serving;
    snprintf(h->state.reason, sizeof h->state.reason, "%s", serving ? "" : reason);
    copy = h->state;
    pthread_mutex_unlock(&h->lock);
    copy.worker_id = sfz_held_id(h, false);
    copy.datacenter_id = h->o.datacenter_id;
    uint64_t one = 1;
    if (write(h->event_fd, &one, sizeof one) != (ssize_t)sizeof one && errno != EAGAIN)
        sfz_log_line(h, "warning", "cannot signal the state descriptor: %s", strerror(errno));
    sfz_notifier_state(h->notifier, &copy);
}

/* The registry's transitions: serving publishes the worker for the id held (its floor
 * applied first) with the lease; anything else closes the fence with the reason. Runs on
 * the registry's thread. */
static void sfz_on_state(void *ctx, bool serving, int64_t worker_id, int64_t floor_ms,
                         int64_t valid_until_boot_ms, int64_t reserved_until_ms,
                         const char *reason)
{
    sfz *h = ctx;
    sf_error err;
    sf_worker *w = serving ? sfz_worker_for(h, worker_id, &err) : NULL;
    char why[SFZ_ERROR_MAX];
    if (w == NULL) {
        if (serving)
            snprintf(why, sizeof why, "cannot create the id worker: %s", err.message);
        const char *because = serving ? why : reason != NULL ? reason : "not serving";
        /* Shut at once: the skew check may hold the transition while the application
         * hears of its verdict, and nothing may delay a fence. After sfz_shut the fence is
         * closed already, with the reason the application gave, which stays. */
        pthread_mutex_lock(&h->lock);
        if (!h->shut)
            sf_fence_close(h->fence, because);
        pthread_mutex_unlock(&h->lock);
        pthread_mutex_lock(&h->transition);
        sfz_set_state(h, false, because);
        pthread_mutex_unlock(&h->transition);
        return;
    }
    pthread_mutex_lock(&h->transition);
    if (floor_ms >= 0)
        sf_worker_advance_last_timestamp(w, floor_ms);
    pthread_mutex_lock(&h->lock); /* sfz_shut cannot slip in between */
    bool shut = h->shut;
    /* Published either way: the fence owns (and frees) every worker made for us. */
    bool open = sf_fence_publish(h->fence, w, !shut, valid_until_boot_ms, reserved_until_ms,
                                 shut ? h->state.reason : NULL);
    pthread_mutex_unlock(&h->lock);
    if (open) {
        sfz_set_state(h, true, NULL);
    } else if (!shut) { /* the clock is out of line, or memory ran out */
        if (!sf_fence_held(h->fence, why, sizeof why))
            snprintf(why, sizeof why, "out of memory publishing a worker");
        sfz_set_state(h, false, why);
    }
    pthread_mutex_unlock(&h->transition);
}

/* The live clock check's verdict: out of line holds the fence shut (the worker id and its
 * lease kept), back in line opens it if the registry serves. From the check's thread. */
static void sfz_on_skew(void *ctx, bool out_of_line, const char *why)
{
    sfz *h = ctx;
    pthread_mutex_lock(&h->transition);
    if (out_of_line) {
        sfz_log_line(h, "warning", "%s", why);
        if (sf_fence_hold(h->fence, why))
            sfz_set_state(h, false, why);
    } else {
        sfz_log_line(h, "info", "our clock is back within max_peer_skew_ms = %d of the peers'",
                     h->o.max_peer_skew_ms);
        if (sf_fence_release(h->fence))
            sfz_set_state(h, true, NULL);
    }
    pthread_mutex_unlock(&h->transition);
}

/* Every renewal extends the fence's lease: ids stop when it runs out, even when the
 * registry's thread could not fence (the whole process was frozen). */
static void sfz_on_lease(void *ctx, int64_t valid_until_boot_ms, int64_t reserved_until_ms)
{
    sfz *h = ctx;
    sf_fence_renew(h->fence, valid_until_boot_ms, reserved_until_ms);
}

/* What the registry records as the held id's last timestamp. */
static int64_t sfz_last_timestamp(void *ctx)
{
    sfz *h = ctx;
    sf_worker *w = sf_fence_worker(h->fence);
    return w != NULL ? sf_worker_last_timestamp(w) : -1;
}

static void sfz_registry_log(void *ctx, const char *level, const char *message)
{
    sfz_log_line(ctx, level, "%s", message);
}

/* The node data for the datacenter tried now: an embedded holder's "embedded pid=<pid>
 * host=<host> datacenter=<id>" (a holder given in the options is kept). */
static void sfz_describe_holder(sfz *h)
{
    if (h->default_holder)
        sf_zkpath_format_embedded(h->holder, SFZ_HOLDER_MAX, h->o.datacenter_id);
}

/* With an automatic datacenter: the i-th of datacenter_paths is the one tried (or held). */
static void sfz_use_datacenter(sfz *h, int i)
{
    h->dc_index = i;
    h->o.datacenter_id = h->dcs->ids[i];
    h->o.worker_id_path = h->dcs->paths[i];
    sfz_describe_holder(h);
}

/* Copies s into *out (NULL stays NULL); false when out of memory. */
static bool sfz_copy(const char *s, char **out)
{
    *out = s != NULL ? strdup(s) : NULL;
    return s == NULL || *out != NULL;
}

/* Frees the handle's own memory: the copies of the options and the struct. */
static void sfz_free_memory(sfz *h)
{
    if (h->event_fd >= 0)
        close(h->event_fd); /* in a child, its copy: the parent's stays open */
    free(h->zookeeper);
    free(h->auth);
    free(h->worker_id_path);
    free(h->holder);
    free(h->dcs);
    free(h);
}

/* Makes the parts of h that belong to one process: its locks, the fence, the thread that
 * makes the callbacks, the state descriptor, the state "starting" with reason; and the
 * datacenter tried first (at random, so that a fleet spreads). For a new handle, and for a
 * fork() child's claim of its parent's handle (whose parts stay the parent's). */
static int sfz_make_parts(sfz *h, const char *reason, sfz_error *err)
{
    atomic_store_explicit(&h->calls, 0, memory_order_relaxed);
    h->gate_light = sfz_gate_register();
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_init(&h->transition, NULL);
    if (sf_clocks_cond_init(&h->wake) != 0) /* retry waits ignore clock steps */
        return sfz_fail(err, SFZ_ERR_NOMEM, "cannot make the handle's condition variable");
    h->registry = NULL;
    h->skew = NULL;
    h->cancelled = h->shut = h->started = false;
    h->start_tries = 0;
    h->next_try_ms = 0;
    memset(&h->state, 0, sizeof h->state);
    snprintf(h->state.reason, sizeof h->state.reason, "%s", reason);
    h->since_ms = sf_clock_now_ms();
    h->fence = sf_fence_new();
    h->notifier = h->fence != NULL ? sfz_notifier_start(h->o.log, h->o.log_ctx, h->o.on_state,
                                                        h->o.state_ctx) : NULL;
    if (h->notifier == NULL)
        return sfz_fail(err, SFZ_ERR_NOMEM, "out of memory making the fence or starting the "
                        "thread that makes the callbacks");
    h->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->event_fd < 0) {
        int e = errno;
        return sfz_fail(err, e == ENOMEM ? SFZ_ERR_NOMEM : SFZ_ERR_ARG,
                        "cannot create the state descriptor: %s", strerror(e));
    }
    if (h->dcs != NULL)
        sfz_use_datacenter(h, sf_jitter_below(h->dcs->count));
    else
        sfz_describe_holder(h);
    return SFZ_OK;
}

/* Makes h this process's (its owner and fork word), once its parts are. */
static void sfz_own(sfz *h)
{
    unsigned word;
    sfz_gate_owner_here(&h->owner, &word);
    h->made_by = h->owner.pid;
    atomic_store_explicit(&h->fork_word, word, memory_order_release);
}

int sfz_prepare(const sfz_options *opts, sfz **out, sfz_error *err)
{
    *out = NULL;
    int rc = sfz_options_check(opts, err);
    if (rc != SFZ_OK)
        return rc;
    if (!sfz_gate_watch_forks(&rc))
        return sfz_fail(err, SFZ_ERR_NOMEM, "cannot watch for fork() (pthread_atfork): %s",
                        strerror(rc));
    sfz *h = calloc(1, sizeof *h);
    if (h == NULL)
        return sfz_fail(err, SFZ_ERR_NOMEM, "out of memory allocating the handle");
    sfz_own(h);
    h->o = *opts;
    h->event_fd = -1;
    h->default_holder = opts->holder == NULL;
    bool ok = sfz_copy(opts->zookeeper, &h->zookeeper) && sfz_copy(opts->auth, &h->auth) &&
              sfz_copy(opts->worker_id_path, &h->worker_id_path) &&
              (h->default_holder ? (h->holder = malloc(SFZ_HOLDER_MAX)) != NULL
                                 : sfz_copy(opts->holder, &h->holder));
    if (ok && opts->datacenter_id == -1) {
        char msg[SFZ_ERROR_MAX];
        h->dcs = malloc(sizeof *h->dcs);
        ok = h->dcs != NULL &&
             sfz_parse_datacenters(opts->datacenter_paths, h->dcs, msg, sizeof msg);
    }
    if (ok) {
        h->o.zookeeper = h->zookeeper;
        h->o.auth = h->auth;
        h->o.worker_id_path = h->worker_id_path;
        h->o.holder = h->holder;
        h->o.datacenter_paths = NULL; /* parsed into h->dcs */
    }
    if (!ok) {
        sfz_free_memory(h);
        return sfz_fail(err, SFZ_ERR_NOMEM, "out of memory copying the options");
    }
    rc = sfz_make_parts(h, "starting", err);
    if (rc != SFZ_OK) {
        sfz_stop(h);
        return rc;
    }
    *out = h;
    return SFZ_OK;
}

/* The registry's options for this handle. */
static void sfz_registry_options(sfz *h, sf_registry_options *ro)
{
    sf_registry_options_init(ro);
    ro->hosts = h->o.zookeeper;
    ro->auth = h->o.auth;
    ro->worker_id_path = h->o.worker_id_path;
    ro->worker_id = h->o.worker_id;
    ro->datacenter_id = h->o.datacenter_id;
    ro->epoch_ms = h->o.epoch_ms;
    ro->host_port = h->o.holder;
    ro->session_timeout_ms = h->o.session_timeout_ms;
    ro->claim_retries = h->o.claim_retries;
    ro->claim_retry_wait_ms = h->o.claim_retry_wait_ms;
    ro->state_interval_ms = h->o.state_interval_ms;
    ro->max_clock_backward_wait_ms = h->o.max_clock_backward_wait_ms;
    ro->query_peer = (sf_registry_peer_fn)h->o.query_peer; /* the same contract */
    ro->peer_ctx = h->o.peer_ctx;
    ro->skip_sanity_checks = h->o.skip_sanity_checks;
    ro->skip_unreachable_peers = h->o.skip_unreachable_peers;
    ro->on_state = sfz_on_state;
    ro->state_ctx = h;
    ro->on_lease = sfz_on_lease;
    ro->lease_ctx = h;
    ro->last_timestamp = sfz_last_timestamp;
    ro->last_ts_ctx = h;
    ro->log = sfz_registry_log;
    ro->log_ctx = h;
}

/* Waits ms, or less when cancelled; true when not cancelled. */
static bool sfz_wait(sfz *h, int64_t ms)
{
    struct timespec until = sf_clocks_mono_timespec(sf_clocks_mono_ms() + ms);
    pthread_mutex_lock(&h->lock);
    while (!h->cancelled && pthread_cond_timedwait(&h->wake, &h->lock, &until) == 0) {
    }
    bool go_on = !h->cancelled;
    pthread_mutex_unlock(&h->lock);
    return go_on;
}

/* Drops the registry of a failed try (under the lock, so that a cancel never reaches a
 * freed one), then closes it. */
static void sfz_drop_registry(sfz *h)
{
    pthread_mutex_lock(&h->lock);
    sf_registry *r = h->registry;
    h->registry = NULL;
    pthread_mutex_unlock(&h->lock);
    sf_registry_close(r);
}

/* With an automatic datacenter: the claim over every datacenter of datacenter_paths, on
 * one session, from the one tried now (registry.h, sf_registry_claim_any); the datacenter
 * claimed under is the one the handle uses from then on. */
static int sfz_claim_any(sfz *h, sf_registry *r, int64_t *worker_id, int64_t *floor_ms,
                         char *msg, size_t len)
{
    int n = h->dcs->count, chosen = h->dc_index;
    sf_registry_place places[SF_MAX_DATACENTER_ID + 1];
    char holders[SF_MAX_DATACENTER_ID + 1][SFZ_HOLDER_MAX];
    for (int i = 0; i < n; i++) {
        if (h->default_holder)
            sf_zkpath_format_embedded(holders[i], SFZ_HOLDER_MAX, h->dcs->ids[i]);
        else
            snprintf(holders[i], SFZ_HOLDER_MAX, "%s", h->holder);
        places[i] = (sf_registry_place){.worker_id_path = h->dcs->paths[i],
                                        .datacenter_id = h->dcs->ids[i], .host_port = holders[i]};
    }
    int rc = sf_registry_claim_any(r, places, n, h->dc_index, &chosen, worker_id, floor_ms,
                                   msg, len);
    pthread_mutex_lock(&h->lock);
    sfz_use_datacenter(h, chosen);
    pthread_mutex_unlock(&h->lock);
    if (rc == SF_REGISTRY_ALL_TAKEN)
        snprintf(msg, len, "all %d worker ids of each of the %d datacenters in "
                 "datacenter_paths are taken (`snowflake-zk list --path PATH` names the "
                 "holders under a path)", SF_MAX_WORKER_ID + 1, n);
    return rc;
}

/* One try: the claim (over the datacenters, with an automatic one) on the handle's registry,
 * made at the first try and kept for the next ones, so that a try after a slow or lost
 * connection goes on with the session the client library is still bringing up (a new one
 * only when it expired) instead of adding another to a busy ensemble. 0,
 * SF_REGISTRY_UNREACHABLE, SF_REGISTRY_ZK_FAILED, or another failure, with msg filled. */
static int sfz_claim(sfz *h, int64_t *worker_id, int64_t *floor_ms, char *msg, size_t len)
{
    pthread_mutex_lock(&h->lock);
    sf_registry *r = h->registry;
    pthread_mutex_unlock(&h->lock);
    if (r == NULL) {
        sf_registry_options ro;
        sfz_registry_options(h, &ro);
        if ((r = sf_registry_new(&ro, msg, len)) == NULL)
            return -1;
    }
    pthread_mutex_lock(&h->lock);
    bool cancelled = h->cancelled;
    h->registry = r;
    pthread_mutex_unlock(&h->lock);
    if (cancelled) {
        snprintf(msg, len, "stopped");
        return -1;
    }
    return h->dcs != NULL ? sfz_claim_any(h, r, worker_id, floor_ms, msg, len)
                          : sf_registry_claim(r, worker_id, floor_ms, msg, len);
}

/* What a claim may say in an sfz_error, leaving room for what the start adds around it: a
 * message is never cut. */
#define SFZ_CLAIM_MSG_MAX (SFZ_ERROR_MAX - 200)

/* A try's failure that can pass, so that the start tries again: ZooKeeper did not answer or
 * failed a request of the claim, every worker id (or the static one) was taken, a clock or
 * peer check failed. Any other (a refused credential, another epoch, a peer of another
 * datacenter) would fail the same way again. */
static bool sfz_can_pass(int rc)
{
    return rc == SF_REGISTRY_UNREACHABLE || rc == SF_REGISTRY_ZK_FAILED ||
           rc == SF_REGISTRY_ALL_TAKEN || rc == SF_REGISTRY_NOT_YET;
}

/* The start's progress, for sfz_get_health: the try under way (0 once the start returned)
 * and, while waiting for the next, when it comes (Unix ms, else 0). */
static void sfz_set_tries(sfz *h, int tries, int64_t next_try_ms)
{
    pthread_mutex_lock(&h->lock);
    h->start_tries = tries;
    h->next_try_ms = next_try_ms;
    pthread_mutex_unlock(&h->lock);
}

/* True once the session the client kept trying for the handle's registry is up. */
static bool sfz_session_up(sfz *h)
{
    sf_registry_health rh = {.session = SF_REGISTRY_SESSION_CONNECTING};
    pthread_mutex_lock(&h->lock);
    if (h->registry != NULL)
        sf_registry_get_health(h->registry, &rh);
    pthread_mutex_unlock(&h->lock);
    return rh.session == SF_REGISTRY_SESSION_CONNECTED;
}

/* Waits ms between two tries: false when cancelled. After a try no ZooKeeper server answered
 * (for_session), it ends as soon as the session comes up, which the client goes on trying
 * for meanwhile: a node comes back within moments of ZooKeeper, not at the next backoff. */
static bool sfz_wait_to_retry(sfz *h, int64_t ms, bool for_session)
{
    int64_t end = sf_clocks_mono_ms() + ms;
    for (int64_t now = sf_clocks_mono_ms(); now < end; now = sf_clocks_mono_ms()) {
        int64_t step = end - now;
        if (for_session && step > SFZ_SESSION_POLL_MS)
            step = SFZ_SESSION_POLL_MS;
        if (!sfz_wait(h, step))
            return false;
        if (for_session && sfz_session_up(h))
            return true;
    }
    return sfz_wait(h, 0);
}

/* The tries of a start (sfz_start says how they go), then the worker, startup_sleep_ms and
 * the registry's thread: what sfz_run does, and a fork() child's claim of its parent's
 * handle, once the handle has parts of the child's own. */
static int sfz_start_here(sfz *h, sfz_error *err)
{
    char msg[SFZ_CLAIM_MSG_MAX], why[SFZ_ERROR_MAX];
    int64_t worker_id = -1, floor_ms = -1, wait_ms = h->o.start_retry_wait_ms;
    int64_t began = sf_clocks_mono_ms();
    for (int tries = 1;; tries++) {
        sfz_set_tries(h, tries, 0);
        int rc = sfz_claim(h, &worker_id, &floor_ms, msg, sizeof msg);
        if (rc == 0)
            break;
        pthread_mutex_lock(&h->lock);
        bool cancelled = h->cancelled;
        pthread_mutex_unlock(&h->lock);
        bool again = sfz_can_pass(rc);
        int64_t now = sf_clocks_mono_ms();
        int64_t left = h->o.start_timeout_ms == 0 ? INT64_MAX
                                                  : began + h->o.start_timeout_ms - now;
        if (cancelled || !again || left <= 0) {
            sfz_drop_registry(h); /* the session goes now, not at sfz_stop */
            sfz_set_tries(h, 0, 0);
        }
        if (cancelled)
            return sfz_fail(err, SFZ_ERR_STOPPED, "stopped while starting: %s", msg);
        if (!again)
            return sfz_fail(err, SFZ_ERR_CLAIM, "%s", msg);
        if (left <= 0)
            return sfz_fail(err, rc == SF_REGISTRY_UNREACHABLE || rc == SF_REGISTRY_ZK_FAILED
                                     ? SFZ_ERR_UNREACHABLE : SFZ_ERR_CLAIM,
                            "%s (tried %d time%s in %" PRId64 " s; start_timeout_ms = %d)", msg,
                            tries, tries == 1 ? "" : "s", (now - began + 500) / 1000,
                            h->o.start_timeout_ms);
        int64_t wait = sf_jitter_ms(wait_ms); /* a fleet that failed together spreads out */
        if (wait > left)
            wait = left;
        snprintf(why, sizeof why, "starting: %s; try %d failed, trying again in %" PRId64
                 " ms", msg, tries, wait);
        sfz_log_line(h, "warning", "%s; trying again in %" PRId64 " ms (try %d; the start "
                     "gives up %s)", msg, wait, tries, h->o.start_timeout_ms == 0
                     ? "never: start_timeout_ms = 0" : "after start_timeout_ms");
        sfz_set_tries(h, tries, sf_clock_now_ms() + wait);
        sfz_set_state(h, false, why);
        if (!sfz_wait_to_retry(h, wait, rc == SF_REGISTRY_UNREACHABLE)) {
            sfz_drop_registry(h);
            sfz_set_tries(h, 0, 0);
            return sfz_fail(err, SFZ_ERR_STOPPED, "stopped while waiting to try again: %s",
                            msg);
        }
        wait_ms = wait_ms * 2 < SFZ_RETRY_WAIT_CAP_MS ? wait_ms * 2 : SFZ_RETRY_WAIT_CAP_MS;
    }
    sfz_set_tries(h, 0, 0);
    sf_error werr;
    sf_worker *w = sfz_worker_for(h, worker_id, &werr);
    if (w == NULL)
        return sfz_fail(err, werr.code, "cannot create the id worker: %s", werr.message);
    if (floor_ms >= 0)
        sf_worker_advance_last_timestamp(w, floor_ms);
    const char *wait_why = h->o.startup_sleep_ms > 0 ? "starting: waiting startup_sleep_ms"
                                                     : "starting: renewing the lease";
    sf_fence_publish(h->fence, w, false, 0, 0, wait_why);
    pthread_mutex_lock(&h->lock); /* the id is ours (the fence says which), not served yet */
    snprintf(h->state.reason, sizeof h->state.reason, "%s", wait_why);
    pthread_mutex_unlock(&h->lock);
    if (h->o.startup_sleep_ms > 0) {
        sfz_log_line(h, "info", "waiting startup_sleep_ms = %d ms before serving",
                     h->o.startup_sleep_ms);
        if (!sfz_wait(h, h->o.startup_sleep_ms))
            return sfz_fail(err, SFZ_ERR_STOPPED, "stopped while waiting startup_sleep_ms");
    }
    if (sf_registry_watch(h->registry, msg, sizeof msg) != 0)
        return sfz_fail(err, SFZ_ERR_CLAIM, "%s", msg);
    if (h->o.query_peer != NULL && !h->o.skip_sanity_checks) {
        sfz_skew_watch *skew = sfz_skew_start(h->registry, h->o.query_peer, h->o.peer_ctx,
                                              h->o.max_peer_skew_ms, sfz_on_skew, h, msg,
                                              sizeof msg);
        if (skew == NULL)
            return sfz_fail(err, SFZ_ERR_NOMEM, "%s", msg);
        pthread_mutex_lock(&h->lock); /* sfz_get_skew may be asked from any thread */
        h->skew = skew;
        pthread_mutex_unlock(&h->lock);
    }
    pthread_mutex_lock(&h->lock);
    h->started = true;
    pthread_mutex_unlock(&h->lock);
    return SFZ_OK;
}

int sfz_run(sfz *h, sfz_error *err)
{
    if (sfz_forked(h))
        return sfz_fail_forked(h, err);
    return sfz_start_here(h, err);
}

int sfz_start(const sfz_options *opts, sfz **out, sfz_error *err)
{
    sfz *h;
    int rc = sfz_prepare(opts, &h, err);
    if (rc == SFZ_OK && (rc = sfz_run(h, err)) != SFZ_OK) {
        sfz_stop(h);
        h = NULL;
    }
    *out = h;
    return rc;
}

/* In a fork() child: gives h parts of this process's own. The parent's are left as they are
 * here: their memory stays (a lock in them may have been held at the fork, and the ZooKeeper
 * client's memory cannot be freed without a call on the parent's session), their threads do
 * not exist here, and of their descriptors only this process's copy of the state descriptor
 * is closed (the client's stay open, never written, until exec or exit: closing them would
 * need a call on the parent's session). */
static int sfz_adopt(sfz *h, sfz_error *err)
{
    sfz_skew_forget(h->skew);
    sf_registry_forget(h->registry);
    sf_fence_forget(h->fence);
    sfz_notifier_stop(h->notifier); /* the parent's: frees its memory, joins nothing */
    if (h->event_fd >= 0)
        close(h->event_fd);
    h->skew = NULL;
    h->registry = NULL;
    h->fence = NULL;
    h->notifier = NULL;
    h->event_fd = -1;
    char reason[160];
    snprintf(reason, sizeof reason, "starting: claiming a worker id of this process's own "
             "(pid %ld, a fork() of pid %ld)", (long)getpid(), (long)h->made_by);
    int rc = sfz_make_parts(h, reason, err);
    if (rc == SFZ_OK)
        h->adopted_by = getpid();
    return rc;
}

int sfz_claim_here(sfz *h, sfz_error *err)
{
    if (h->o.on_fork != SFZ_ON_FORK_CLAIM)
        return sfz_fail_forked(h, err);
    sfz_error local;
    if (err == NULL)
        err = &local;
    pid_t me = getpid();
    bool waited = false;
    sfz_gate_lock_claims();
    while (h->claiming == me) { /* another thread of ours claims it: its outcome is ours */
        waited = true;
        sfz_gate_wait_claims();
    }
    if (sfz_gate_owned_here(&h->owner)) {
        sfz_gate_unlock_claims();
        return SFZ_OK;
    }
    if (waited) {
        int rc = sfz_fail(err, h->claim_rc, "%s", h->claim_msg);
        sfz_gate_unlock_claims();
        return rc;
    }
    h->claiming = me;
    bool adopted = h->adopted_by == me; /* an earlier claim here failed: its parts are ours */
    sfz_gate_unlock_claims();
    pid_t parent = h->made_by;
    int rc = adopted ? SFZ_OK : sfz_adopt(h, err);
    if (rc == SFZ_OK) {
        sfz_log_line(h, "info", "this process (pid %ld) is a fork() of pid %ld, whose handle it "
                     "has: claiming a worker id of its own (on_fork = SFZ_ON_FORK_CLAIM)",
                     (long)me, (long)parent);
        rc = sfz_start_here(h, err);
    }
    if (rc != SFZ_OK) /* what a try left held goes now; the next id call starts over */
        sfz_drop_registry(h);
    sfz_gate_lock_claims();
    h->claiming = 0;
    if (rc == SFZ_OK) {
        h->adopted_by = 0;
        sfz_own(h);
    } else {
        h->claim_rc = rc;
        snprintf(h->claim_msg, sizeof h->claim_msg, "%s", err->message);
    }
    sfz_gate_claims_changed();
    sfz_gate_unlock_claims();
    return rc;
}

int sfz_claim_after_fork(sfz *h, sfz_error *err)
{
    return sfz_forked(h) ? sfz_claim_here(h, err) : SFZ_OK;
}

void sfz_cancel(sfz *h)
{
    if (!sfz_enter_here(h))
        return;
    pthread_mutex_lock(&h->lock);
    if (!h->started) { /* a started handle is stopped with sfz_stop, never cancelled */
        h->cancelled = true;
        if (h->registry != NULL)
            sf_registry_cancel(h->registry);
        pthread_cond_broadcast(&h->wake);
    }
    pthread_mutex_unlock(&h->lock);
    sfz_leave(h);
}

/* Waits until no public call is inside h (new ones are refused from now on). Calls are
 * short: a batch takes count / 4096 ms, a backward clock step is waited out for no longer
 * than the lease has left. False when it cannot tell: what the id path reads must then stay. */
static bool sfz_drain(sfz *h)
{
    atomic_fetch_or_explicit(&h->calls, SFZ_STOPPING, memory_order_acq_rel);
    while ((atomic_load_explicit(&h->calls, memory_order_acquire) & ~SFZ_STOPPING) != 0)
        sf_clocks_sleep_ms(SFZ_DRAIN_POLL_MS);
    int rc = h->gate_light ? sfz_gate_drain(h) : 0;
    if (rc != 0)
        sfz_log_line(h, "error", "cannot tell whether a call is still inside the handle "
                     "(membarrier: %s): its generator's memory is left allocated", strerror(rc));
    return rc == 0;
}

void sfz_stop(sfz *h)
{
    if (h == NULL)
        return;
    if (sfz_forked(h) && h->adopted_by != getpid()) {
        /* A child's copy: the session and the threads are the parent's (closing the session
         * here would end the parent's, joining a thread would wait for one that does not
         * exist here), and a lock a thread of the parent held at the fork stays held here,
         * so none is taken. The client library's memory for the session stays: no call of
         * the client is safe here. (A child whose claim of it failed stops its own parts
         * below, as any handle's.) */
        sfz_skew_forget(h->skew);
        sf_registry_forget(h->registry);
        sf_fence_forget(h->fence);
        sfz_notifier_stop(h->notifier); /* here: frees its memory, joins nothing */
        sfz_free_memory(h);
        return;
    }
    if (h->fence != NULL)
        sf_fence_close(h->fence, "stopping: sfz_stop was called");
    bool drained = sfz_drain(h);
    sfz_skew_stop(h->skew); /* first: it reads through the registry */
    if (h->registry != NULL)
        sf_registry_close(h->registry); /* fences first, then records the last timestamp */
    sfz_notifier_stop(h->notifier); /* the calls still queued are made first */
    if (drained)
        sf_fence_free(h->fence); /* and every worker: each was adopted when made */
    pthread_mutex_destroy(&h->lock);
    pthread_mutex_destroy(&h->transition);
    pthread_cond_destroy(&h->wake);
    sfz_free_memory(h);
}
