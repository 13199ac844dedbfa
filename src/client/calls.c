/* calls.c -- one call to the fleet: acquire a node and a connection from the pool, ask,
 * release them with how it went, and on a failure that another node may not share move on,
 * within the call's deadline. What each node said is kept, so a call that fails everywhere
 * says where and why. */
#define _POSIX_C_SOURCE 200809L
#include "client_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/clocks.h"
#include "lib/snowflake.h"
#include "sf_thrift_snowflake.h"

/* The pause before another round over nodes that all failed: doubling up to the max. */
#define SFC_ROUND_PAUSE_MS 10
#define SFC_ROUND_PAUSE_MAX_MS 200

/* What is asked: get_id (count 0), get_ids(count), or the node's identity (info). */
typedef struct sfc_request {
    const char *agent;
    int count;
    int64_t *ids;
    sfc_node_info *info;
    const char *method;
} sfc_request;

/* Turns the declared exceptions of a call into an outcome and a reason, freeing them. */
static sfc_outcome sfc_exceptions(SfThriftInvalidSystemClock *clock,
                                  SfThriftInvalidUserAgentError *agent,
                                  SfThriftInvalidRequestError *request,
                                  SfThriftServiceUnavailable *unavailable, const char *server,
                                  char *why, size_t len)
{
    sfc_outcome out = SFC_TRY_BROKEN;
    if (clock != NULL) {
        snprintf(why, len, "%s: InvalidSystemClock: %s", server, clock->message);
        out = SFC_TRY_CLOCK;
    } else if (agent != NULL) {
        snprintf(why, len, "InvalidUserAgentError: %s (from %s)", agent->message, server);
        out = SFC_TRY_REFUSED;
    } else if (request != NULL) {
        snprintf(why, len, "InvalidRequestError: %s (from %s)", request->message, server);
        out = SFC_TRY_REFUSED;
    } else if (unavailable != NULL) {
        snprintf(why, len, "%s is not serving: ServiceUnavailable: %s", server,
                 unavailable->message);
        out = SFC_TRY_UNAVAILABLE;
    }
    if (clock != NULL)
        g_object_unref(clock);
    if (agent != NULL)
        g_object_unref(agent);
    if (request != NULL)
        g_object_unref(request);
    if (unavailable != NULL)
        g_object_unref(unavailable);
    return out;
}

/* A call that failed with no declared exception: the transport. */
static sfc_outcome sfc_transport_failed(const char *server, const char *method, int timeout_ms,
                                        int64_t started, GError **error, char *why, size_t len)
{
    const char *msg = *error != NULL ? (*error)->message : "unknown error";
    sfc_outcome out = SFC_TRY_BROKEN;
    if (sf_clocks_mono_ms() - started >= timeout_ms) {
        snprintf(why, len, "%s did not answer %s within %d ms (%s)", server, method, timeout_ms,
                 msg);
        out = SFC_TRY_TIMEOUT;
    } else {
        snprintf(why, len, "%s to %s failed: %s", method, server, msg);
    }
    g_clear_error(error);
    return out;
}

/* Asks one node over conn. */
static sfc_outcome sfc_try(sfc_conn *conn, const char *server, sfc_request *r, char *why,
                           size_t len)
{
    SfThriftSnowflakeIf *api = conn->rpc.api;
    SfThriftInvalidSystemClock *clock = NULL;
    SfThriftInvalidUserAgentError *agent = NULL;
    SfThriftInvalidRequestError *request = NULL;
    SfThriftServiceUnavailable *unavailable = NULL;
    GError *error = NULL;
    int64_t started = sf_clocks_mono_ms();
    gboolean ok;
    if (r->info != NULL) {
        gint64 worker = 0, datacenter = 0, ts = 0;
        ok = sf_thrift_snowflake_if_get_worker_id(api, &worker, &error) &&
             sf_thrift_snowflake_if_get_datacenter_id(api, &datacenter, &error);
        int64_t before = sf_clocks_mono_ms(), wall_before = sf_clock_now_ms();
        ok = ok && sf_thrift_snowflake_if_get_timestamp(api, &ts, &error);
        if (ok) {
            int64_t rtt = sf_clocks_mono_ms() - before;
            r->info->worker_id = worker;
            r->info->datacenter_id = datacenter;
            r->info->timestamp_ms = ts;
            r->info->round_trip_ms = rtt;
            r->info->skew_ms = ts - (wall_before + rtt / 2);
        }
    } else if (r->count == 0) {
        gint64 id = 0;
        ok = sf_thrift_snowflake_if_get_id(api, &id, r->agent, &clock, &agent, &unavailable,
                                           &error);
        if (ok)
            r->ids[0] = id;
    } else {
        GArray *batch = g_array_sized_new(FALSE, FALSE, sizeof(gint64), (guint)r->count);
        ok = sf_thrift_snowflake_if_get_ids(api, &batch, r->agent, r->count, &clock, &agent,
                                            &request, &unavailable, &error);
        if (ok && batch->len != (guint)r->count) {
            snprintf(why, len, "%s answered get_ids(%d) with %u ids", server, r->count,
                     batch->len);
            g_array_unref(batch);
            return SFC_TRY_BROKEN;
        }
        if (ok)
            memcpy(r->ids, batch->data, (size_t)r->count * sizeof(int64_t));
        g_array_unref(batch);
    }
    if (ok)
        return SFC_TRY_OK;
    if (clock != NULL || agent != NULL || request != NULL || unavailable != NULL) {
        g_clear_error(&error);
        return sfc_exceptions(clock, agent, request, unavailable, server, why, len);
    }
    return sfc_transport_failed(server, r->method, conn->timeout_ms, started, &error, why, len);
}

/* Appends one node's reason to the call's list of them. */
static void sfc_add_reason(char *reasons, size_t len, const char *why)
{
    size_t used = strlen(reasons);
    if (used + 1 >= len)
        return;
    snprintf(reasons + used, len - used, "%s%s", used > 0 ? "; " : "", why);
}

/* Sleeps before another round over the nodes: *pause_ms, never past deadline; doubles
 * *pause_ms up to SFC_ROUND_PAUSE_MAX_MS. False when the deadline leaves no time. */
static bool sfc_round_pause(int64_t deadline, int64_t *pause_ms)
{
    int64_t left = deadline - sf_clocks_mono_ms();
    if (left <= 0)
        return false;
    sf_clocks_sleep_ms(*pause_ms < left ? *pause_ms : left);
    *pause_ms = *pause_ms * 2 < SFC_ROUND_PAUSE_MAX_MS ? *pause_ms * 2 : SFC_ROUND_PAUSE_MAX_MS;
    return deadline > sf_clocks_mono_ms();
}

/* The failover loop: rounds over the nodes, each node at most once per round (a broken
 * pooled connection gets one fresh one on the same node first: a node that closed an idle
 * connection is not down). A round in which every node failed is followed by another after
 * a short pause, until the deadline: a moment in which no node serves (an election in
 * ZooKeeper can fence a whole fleet for a few hundred ms) costs the caller time, not an
 * error. The pool is entered through acquire and release alone: which node, which
 * connection and what a failure does to a node are its business; when to move on, what to
 * retry and what to tell the caller are this loop's. */
static int sfc_run(sfc_client *c, sfc_request *r, int64_t deadline, sfc_call *call,
                   sfc_error *err)
{
    enum { MAX_TRIES = 64 };
    sfc_pool *p = &c->pool;
    sfc_server *tried[MAX_TRIES], *again = NULL;
    int ntried = 0, clock_errors = 0, other_errors = 0, tries = 0, rounds = 1, last_n = 0;
    int64_t pause_ms = SFC_ROUND_PAUSE_MS;
    bool fresh_used = false, partial = false, clock_twice = false;
    char clock_from[SFC_SERVER_MAX]; /* the node whose InvalidSystemClock the last try met */
    /* What the nodes said this round, and in the last whole round before it (only their
     * first bytes are set: a call that succeeds at once should not clear 2 KB). */
    char reasons[SFC_ERROR_MAX - 100], last[sizeof reasons];
    char why[512], server[SFC_SERVER_MAX];
    clock_from[0] = reasons[0] = last[0] = '\0';
    for (;;) {
        sfc_lease l;
        int got = again != NULL || ntried < MAX_TRIES
                      ? sfc_pool_acquire(p, tried, ntried, again, deadline, &l, why, sizeof why)
                      : SFC_POOL_NONE;
        if (got == SFC_POOL_NONE) {
            /* Every node failed this round (or none is listed by the deadline). */
            if (ntried == 0) {
                sfc_add_reason(reasons, sizeof reasons, why);
                break;
            }
            if (!sfc_round_pause(deadline, &pause_ms))
                break;
            memcpy(last, reasons, strlen(reasons) + 1);
            last_n = ntried;
            reasons[0] = '\0';
            ntried = 0;
            rounds++;
            continue;
        }
        if (again == NULL) {
            tried[ntried++] = l.server;
            tries++;
        }
        again = NULL;
        snprintf(server, sizeof server, "%s", l.server->name);
        sfc_outcome out = got == SFC_POOL_CONN ? sfc_try(l.conn, server, r, why, sizeof why)
                                               : l.failed_as;
        if (out == SFC_TRY_BROKEN && l.reused && !fresh_used) {
            fresh_used = true;
            again = l.server; /* the lease keeps it held for the fresh try */
            sfc_pool_release(p, &l, SFC_TRY_STALE, why);
            continue;
        }
        sfc_pool_release(p, &l, out, why); /* the node may go with it: not used after */
        if (out == SFC_TRY_OK || out == SFC_TRY_REFUSED) {
            if (call != NULL) {
                memcpy(call->server, server, sizeof call->server);
                call->tries = tries;
                call->failovers = tries - 1;
            }
            if (tries > 1)
                atomic_fetch_add(&c->failovers, (uint_fast64_t)(tries - 1));
            if (out == SFC_TRY_REFUSED)
                return sfc_fail(err, SFC_ERR_REFUSED, "%s", why);
            return SFC_OK;
        }
        sfc_add_reason(reasons, sizeof reasons, why);
        if (out == SFC_TRY_SKIPPED && sf_clocks_mono_ms() >= deadline) {
            partial = true;
            break;
        }
        if (out == SFC_TRY_CLOCK) {
            clock_errors++;
            /* Two nodes' clocks in a row: a clock step across hosts, which the caller should
             * hear of rather than wait out. */
            clock_twice = clock_from[0] != '\0' && strcmp(clock_from, server) != 0;
            snprintf(clock_from, sizeof clock_from, "%s", server);
            if (clock_twice)
                break;
        } else {
            clock_from[0] = '\0';
            other_errors++;
            /* A try the deadline ended says only that time ran out: the round is cut short. */
            partial = partial || (out == SFC_TRY_TIMEOUT && sf_clocks_mono_ms() >= deadline);
        }
    }
    if (call != NULL) {
        call->server[0] = '\0';
        call->tries = tries;
        call->failovers = tries > 0 ? tries - 1 : 0;
    }
    if (clock_twice || (clock_errors > 0 && other_errors == 0))
        return sfc_fail(err, SFC_ERR_CLOCK, "%s", reasons);
    if (partial && last_n > 0) { /* the deadline cut a round short: the whole one says more */
        memcpy(reasons, last, strlen(last) + 1);
        ntried = last_n;
    }
    char in_rounds[32] = "";
    if (rounds > 1)
        snprintf(in_rounds, sizeof in_rounds, ", in %d rounds", rounds);
    return sfc_fail(err, SFC_ERR_UNAVAILABLE, "no node gave %s within %d ms (%d tried%s): %s",
                    r->method, c->o.timeout_ms, ntried, in_rounds, reasons);
}

sfc_outcome sfc_call_probe(void *ctx, sfc_conn *conn, const char *server, char *why,
                           size_t whylen)
{
    sfc_client *c = ctx;
    int64_t id;
    sfc_request r = {.agent = c->agent, .count = 0, .ids = &id, .method = "get_id"};
    return sfc_try(conn, server, &r, why, whylen);
}

int sfc_call_ids(sfc_client *c, const char *agent, int64_t *ids, int count, int64_t deadline,
                 bool counted, sfc_call *call, sfc_error *err)
{
    sfc_request r = {.agent = agent, .count = count, .ids = ids,
                     .method = count == 0 ? "get_id" : "get_ids"};
    int rc = sfc_run(c, &r, deadline, call, err);
    if (counted && rc == SFC_OK) {
        atomic_fetch_add(&c->calls, 1);
        atomic_fetch_add(&c->ids, (uint_fast64_t)(count == 0 ? 1 : count));
    } else if (counted) {
        atomic_fetch_add(&c->errors, 1);
    }
    return rc;
}

int sfc_node_info_get(sfc_client *c, sfc_node_info *info, sfc_error *err)
{
    if (c == NULL || info == NULL)
        return sfc_fail(err, SFC_ERR_ARG, "sfc_node_info_get: the client and info must be given");
    memset(info, 0, sizeof *info);
    sfc_request r = {.info = info, .method = "get_timestamp"};
    sfc_call call;
    int rc = sfc_run(c, &r, sf_clocks_mono_ms() + c->o.timeout_ms, &call, err);
    if (rc == SFC_OK)
        snprintf(info->server, sizeof info->server, "%s", call.server);
    else
        atomic_fetch_add(&c->errors, 1);
    return rc;
}
