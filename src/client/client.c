/* client.c -- libsnowflake-client's handle: checks the options, wires the pool to its list
 * (fixed, or watched in ZooKeeper) and the prefetch buffer, and adds up the counters. */
#define _POSIX_C_SOURCE 200809L
#include "client_internal.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"
#include "common/hostport.h"
#include "common/option_range.h"
#include "common/zkpath.h"
#include "lib/snowflake.h"
#include "rpc/thrift_fix.h"

#define SFC_DEFAULT_PATH "/snowflake-servers"
#define SFC_DEFAULT_AGENT "snowflake-client"
#define SFC_MAX_IDS 1000000
/* The nodes' default max_batch_size: a refill asks no more than a node accepts unless
 * told otherwise. */
#define SFC_MAX_PREFETCH_BATCH 10000
/* The refusal of an agent outside the original's grammar, as an option or a call's. */
#define SFC_BAD_AGENT "agent '%s' is not valid: a letter, then letters, digits and '-'"

void sfc_options_init(sfc_options *o)
{
    memset(o, 0, sizeof *o);
    o->worker_id_path = SFC_DEFAULT_PATH;
    o->zookeeper_session_timeout_ms = 10000;
    o->agent = SFC_DEFAULT_AGENT;
    o->timeout_ms = 1000;
    o->try_timeout_ms = 250;
    o->connections_per_server = 4;
    o->backoff_ms = 100;
    o->backoff_max_ms = 5000;
    o->prefetch = 0;
    o->prefetch_batch = 1000;
    o->max_id_age_ms = 1000;
    o->epoch_ms = SF_TWITTER_EPOCH_MS;
}

/* One integer option within [min, max] (the check every module's settings go through), or
 * an error naming it and the range. */
static bool sfc_check_range(const char *name, int v, int min, int max, sfc_error *err)
{
    char why[200];
    if (sf_option_in_range("", name, v, min, max, why, sizeof why))
        return true;
    sfc_fail(err, SFC_ERR_ARG, "%s", why);
    return false;
}

/* Every option, as the header states them. */
static bool sfc_check_options(const sfc_options *o, sfc_error *err)
{
    bool list = o->servers != NULL, zk = o->zookeeper_hosts != NULL;
    char hwhy[600];
    if (list == zk) {
        sfc_fail(err, SFC_ERR_ARG, "give exactly one of servers (host:port,...) and "
                 "zookeeper_hosts; %s", list ? "both are set" : "neither is set");
        return false;
    }
    if (list && o->servers[0] == '\0') {
        sfc_fail(err, SFC_ERR_ARG, "servers is empty: name at least one host:port (or leave "
                 "servers NULL and set zookeeper_hosts)");
        return false;
    }
    if (zk && !sf_hostport_list_check("zookeeper_hosts", o->zookeeper_hosts, hwhy, sizeof hwhy)) {
        sfc_fail(err, SFC_ERR_ARG, "%s", hwhy);
        return false;
    }
    const char *why = NULL;
    if (zk && (o->worker_id_path == NULL || !sf_zkpath_valid(o->worker_id_path, &why))) {
        sfc_fail(err, SFC_ERR_ARG, "worker_id_path '%s' is not valid: %s",
                 o->worker_id_path != NULL ? o->worker_id_path : "(null)",
                 why != NULL ? why : "it is not set");
        return false;
    }
    if (o->agent == NULL || !sf_useragent_valid(o->agent)) {
        sfc_fail(err, SFC_ERR_ARG, SFC_BAD_AGENT, o->agent != NULL ? o->agent : "(null)");
        return false;
    }
    bool in_range =
        sfc_check_range("zookeeper_session_timeout_ms", o->zookeeper_session_timeout_ms, 1000,
                        600000, err) &&
        sfc_check_range("timeout_ms", o->timeout_ms, 1, 600000, err) &&
        sfc_check_range("try_timeout_ms", o->try_timeout_ms, 1, o->timeout_ms, err) &&
        sfc_check_range("connections_per_server", o->connections_per_server, 1, 1024, err) &&
        sfc_check_range("backoff_ms", o->backoff_ms, 1, 60000, err) &&
        sfc_check_range("backoff_max_ms", o->backoff_max_ms, o->backoff_ms, 600000, err) &&
        sfc_check_range("prefetch", o->prefetch, 0, 1000000, err) &&
        sfc_check_range("prefetch_batch", o->prefetch_batch, 1, SFC_MAX_PREFETCH_BATCH, err) &&
        sfc_check_range("max_id_age_ms", o->max_id_age_ms, 1, 60000, err);
    if (in_range && (o->epoch_ms < 0 || o->epoch_ms > SF_MAX_EPOCH_MS)) {
        sfc_fail(err, SFC_ERR_ARG, "epoch_ms %lld is outside 0..%lld", (long long)o->epoch_ms,
                 (long long)SF_MAX_EPOCH_MS);
        return false;
    }
    return in_range;
}

/* Splits the servers option into the pool's list, refusing a bad entry by name. */
static bool sfc_set_fixed_list(sfc_client *c, sfc_error *err)
{
    char *copy = strdup(c->servers);
    int cap = 1;
    for (const char *s = c->servers; *s != '\0'; s++)
        cap += *s == ',';
    const char **names = calloc((size_t)cap, sizeof *names);
    if (copy == NULL || names == NULL) {
        free(copy);
        free(names);
        sfc_fail(err, SFC_ERR_NOMEM, "out of memory for the server list");
        return false;
    }
    int n = 0;
    bool ok = true;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL && ok;
         tok = strtok_r(NULL, ",", &save)) {
        char host[SFC_SERVER_MAX], why[400];
        int port;
        if (!sf_hostport_parse(tok, host, sizeof host, &port, why, sizeof why)) {
            sfc_fail(err, SFC_ERR_ARG, "servers: %s", why);
            ok = false;
        }
        names[n++] = tok;
    }
    if (ok && n == 0) {
        sfc_fail(err, SFC_ERR_ARG, "servers '%s' names no host:port", c->servers);
        ok = false;
    }
    if (ok && !sfc_pool_set_servers(&c->pool, names, n)) {
        sfc_fail(err, SFC_ERR_NOMEM, "out of memory for the server list");
        ok = false;
    }
    free(names);
    free(copy);
    return ok;
}

static void sfc_on_list(void *ctx, const char *const *servers, int n)
{
    sfc_client *c = ctx;
    sfc_pool_set_servers(&c->pool, servers, n);
}

static void sfc_on_why(void *ctx, const char *why)
{
    sfc_client *c = ctx;
    sfc_pool_set_why_no_list(&c->pool, why);
}

static int sfc_fetch(void *ctx, int64_t *ids, int count, sfc_error *err)
{
    sfc_client *c = ctx;
    return sfc_call_ids(c, c->agent, ids, count, sf_clocks_mono_ms() + c->o.timeout_ms, false,
                        NULL, err);
}

sfc_client *sfc_open(const sfc_options *o, sfc_error *err)
{
    if (o == NULL) {
        sfc_fail(err, SFC_ERR_ARG, "sfc_open: no options given (see sfc_options_init)");
        return NULL;
    }
    if (!sfc_check_options(o, err))
        return NULL;
    sfc_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        sfc_fail(err, SFC_ERR_NOMEM, "out of memory for a client");
        return NULL;
    }
    c->o = *o;
    c->agent = strdup(o->agent);
    c->worker_id_path = strdup(o->worker_id_path != NULL ? o->worker_id_path : SFC_DEFAULT_PATH);
    c->servers = o->servers != NULL ? strdup(o->servers) : NULL;
    c->zookeeper_hosts = o->zookeeper_hosts != NULL ? strdup(o->zookeeper_hosts) : NULL;
    if (c->agent == NULL || c->worker_id_path == NULL ||
        (o->servers != NULL && c->servers == NULL) ||
        (o->zookeeper_hosts != NULL && c->zookeeper_hosts == NULL)) {
        sfc_fail(err, SFC_ERR_NOMEM, "out of memory for a client");
        goto fail_strings;
    }
    /* A node that closes a connection must fail the call, not kill the program (Thrift's
     * socket writes without MSG_NOSIGNAL); a handler the program set is left alone. A reset
     * must report the send's error. */
    struct sigaction pipe_action;
    if (sigaction(SIGPIPE, NULL, &pipe_action) == 0 && pipe_action.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    /* Thrift 0.17's socket and framed transport (and the generated structs) leak what GLib
     * attaches in g_object_unref unless their finalize chains up: some 100 bytes for every
     * connection the pool drops. */
    sf_thrift_fix_finalize();
    sf_thrift_fix_transport();
    char why[400];
    if (!sfc_pool_init(&c->pool, o, sfc_call_probe, c, why, sizeof why)) {
        sfc_fail(err, SFC_ERR_NOMEM, "%s", why);
        goto fail_strings;
    }
    if (c->servers != NULL && c->servers[0] != '\0') {
        if (!sfc_set_fixed_list(c, err))
            goto fail_pool;
    } else {
        c->discover = sfc_discover_start(c->zookeeper_hosts, c->worker_id_path,
                                         o->zookeeper_session_timeout_ms, sfc_on_list,
                                         sfc_on_why, c, why, sizeof why);
        if (c->discover == NULL) {
            sfc_fail(err, SFC_ERR_ARG, "%s", why);
            goto fail_pool;
        }
    }
    if (o->prefetch > 0) {
        int batch = o->prefetch_batch < o->prefetch ? o->prefetch_batch : o->prefetch;
        c->prefetch = sfc_prefetch_start(o->prefetch, batch, o->max_id_age_ms, o->epoch_ms,
                                         sfc_fetch, c, why, sizeof why);
        if (c->prefetch == NULL) {
            sfc_fail(err, SFC_ERR_NOMEM, "%s", why);
            goto fail_discover;
        }
    }
    return c;
fail_discover:
    if (c->discover != NULL)
        sfc_discover_stop(c->discover);
fail_pool:
    sfc_pool_destroy(&c->pool);
fail_strings:
    free(c->agent);
    free(c->worker_id_path);
    free(c->servers);
    free(c->zookeeper_hosts);
    free(c);
    return NULL;
}

/* The agent of a call: the client's when NULL (checked when the client was opened); false
 * with err naming one not in the original's grammar. */
static bool sfc_call_agent(sfc_client *c, const char **agent, sfc_error *err)
{
    if (*agent == NULL) {
        *agent = c->agent;
        return true;
    }
    if (sf_useragent_valid(*agent))
        return true;
    sfc_fail(err, SFC_ERR_ARG, SFC_BAD_AGENT, *agent);
    return false;
}

/* One id under agent, a valid one: from the prefetch buffer when it is the client's own
 * agent and the buffer holds one young enough, else from the nodes. */
static int sfc_next_id_under(sfc_client *c, const char *agent, int64_t *id, sfc_call *call,
                             sfc_error *err)
{
    int64_t deadline = sf_clocks_mono_ms() + c->o.timeout_ms;
    if (c->prefetch != NULL && strcmp(agent, c->agent) == 0 &&
        sfc_prefetch_take(c->prefetch, id)) {
        if (call != NULL) {
            call->server[0] = '\0';
            call->tries = call->failovers = 0;
        }
        atomic_fetch_add(&c->calls, 1);
        atomic_fetch_add(&c->ids, 1);
        return SFC_OK;
    }
    /* Nothing young enough in the buffer: the call asks the nodes itself, as an unbuffered
     * one does, until its own deadline; how the refill fares is no answer to it. */
    return sfc_call_ids(c, agent, id, 0, deadline, true, call, err);
}

int sfc_next_id_as(sfc_client *c, const char *agent, int64_t *id, sfc_call *call,
                   sfc_error *err)
{
    if (c == NULL || id == NULL)
        return sfc_fail(err, SFC_ERR_ARG, "sfc_next_id: the client and id must be given");
    if (!sfc_call_agent(c, &agent, err))
        return SFC_ERR_ARG;
    return sfc_next_id_under(c, agent, id, call, err);
}

int sfc_next_id(sfc_client *c, int64_t *id, sfc_call *call, sfc_error *err)
{
    if (c == NULL || id == NULL)
        return sfc_fail(err, SFC_ERR_ARG, "sfc_next_id: the client and id must be given");
    return sfc_next_id_under(c, c->agent, id, call, err);
}

int sfc_next_ids_as(sfc_client *c, const char *agent, int64_t *ids, int count, sfc_call *call,
                    sfc_error *err)
{
    if (c == NULL || ids == NULL)
        return sfc_fail(err, SFC_ERR_ARG, "sfc_next_ids: the client and ids must be given");
    if (count < 1 || count > SFC_MAX_IDS)
        return sfc_fail(err, SFC_ERR_ARG, "sfc_next_ids: count %d is out of range: allowed "
                        "1..%d", count, SFC_MAX_IDS);
    if (!sfc_call_agent(c, &agent, err))
        return SFC_ERR_ARG;
    return sfc_call_ids(c, agent, ids, count, sf_clocks_mono_ms() + c->o.timeout_ms, true, call,
                        err);
}

int sfc_next_ids(sfc_client *c, int64_t *ids, int count, sfc_call *call, sfc_error *err)
{
    return sfc_next_ids_as(c, NULL, ids, count, call, err);
}

void sfc_get_stats(sfc_client *c, sfc_stats *s)
{
    memset(s, 0, sizeof *s);
    s->calls = atomic_load(&c->calls);
    s->ids = atomic_load(&c->ids);
    s->failovers = atomic_load(&c->failovers);
    s->errors = atomic_load(&c->errors);
    if (c->prefetch != NULL)
        sfc_prefetch_counts(c->prefetch, &s->prefetched, &s->prefetch_stale, &s->prefetch_misses);
    s->servers = sfc_pool_list(&c->pool, NULL, 0, &s->servers_up);
}

int sfc_list_servers(sfc_client *c, sfc_server_state *out, int max)
{
    int up;
    return sfc_pool_list(&c->pool, out, out != NULL && max > 0 ? max : 0, &up);
}

void sfc_close(sfc_client *c)
{
    if (c == NULL)
        return;
    if (c->prefetch != NULL)
        sfc_prefetch_stop(c->prefetch);
    if (c->discover != NULL)
        sfc_discover_stop(c->discover);
    sfc_pool_destroy(&c->pool);
    free(c->agent);
    free(c->worker_id_path);
    free(c->servers);
    free(c->zookeeper_hosts);
    free(c);
}

void sfc_set_zookeeper_logging(bool verbose)
{
    sfc_discover_set_logging(verbose);
}
