/* handler.c -- SfHandler: the Snowflake service's calls, made with ids from the source it was
 * given (idsource.h: a registration, a standalone worker or a test's), with per-agent counts
 * and timings. The calls are plain (sf_handler_call_*), for the direct codec, the HTTP port
 * and the tests; the Thrift face at the end plugs them into the generated Thrift processor. */
#define _POSIX_C_SOURCE 200809L
#include "handler.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents.h"
#include "common/clocks.h"
#include "latency.h"

/* Counters are striped: each calling thread adds to its own cache line, and
 * readers sum the stripes, so the hot path never shares a written line. */
#define SF_HANDLER_STRIPES 16
#define SF_AGENT_GRAMMAR "[a-zA-Z][a-zA-Z\\-0-9]*"

/* Every get_ids count the settings allow, the registration's source of ids makes. */
_Static_assert(SF_HANDLER_MAX_max_batch_size <= SFZ_MAX_IDS,
               "max_batch_size may not exceed libsnowflake-zk's SFZ_MAX_IDS");

typedef struct sf_handler_stripe {
#define SF_STRIPE_FIELD(name, help) atomic_uint_fast64_t name;
    SF_HANDLER_COUNTERS(SF_STRIPE_FIELD)
#undef SF_STRIPE_FIELD
    /* The alignment makes the whole stripe start on a cache line of its own. */
    _Alignas(64) sf_latency timings[SF_HANDLER_METHODS];
} sf_handler_stripe;

struct _SfHandler {
    SfThriftSnowflakeHandler parent;
    int max_batch_size;
    int max_useragent_length;
    sf_agents *agents;      /* ids per agent, bounded by max_tracked_useragents */
    _Atomic(const sf_id_source *) source; /* where ids come from; NULL while none */
    atomic_bool stopping;     /* closed, or its source taken away: refusing "stopping" */
    _Atomic int64_t since_ms; /* with no source: Unix ms of the last change */
    sf_handler_stripe *stripes;
    sf_handler_audit_fn audit; /* told of every id handed out; set before serving */
    void *audit_ctx;
};

struct _SfHandlerClass {
    SfThriftSnowflakeHandlerClass parent;
};

G_DEFINE_TYPE(SfHandler, sf_handler, SF_THRIFT_TYPE_SNOWFLAKE_HANDLER)

static atomic_uint sf_handler_next_stripe;
static _Thread_local int sf_handler_thread_stripe = -1;

/* Gives each thread a stripe on first use, round robin, so a fixed pool of
 * server threads lands on distinct cache lines. */
static sf_handler_stripe *sf_handler_my_stripe(SfHandler *h)
{
    if (sf_handler_thread_stripe < 0)
        sf_handler_thread_stripe =
            (int)(atomic_fetch_add_explicit(&sf_handler_next_stripe, 1, memory_order_relaxed) %
                  SF_HANDLER_STRIPES);
    return &h->stripes[sf_handler_thread_stripe];
}

/* Counts n ids for agent in the calling thread's stripe: by name for the first
 * max_tracked_useragents agents, under "other" beyond. */
static void sf_handler_count_ids(SfHandler *h, const char *agent, uint64_t n)
{
    sf_handler_stripe *s = sf_handler_my_stripe(h);
    atomic_fetch_add_explicit(&s->ids_generated, n, memory_order_relaxed);
    sf_agents_count(h->agents, (unsigned)sf_handler_thread_stripe, agent, n);
}

static const char *const sf_handler_method_names[SF_HANDLER_METHODS] = {
    "get_id", "get_ids", "get_worker_id", "get_datacenter_id", "get_timestamp"};

/* Records how long a call that began at start_ns took, in the calling thread's stripe. */
static void sf_handler_time(SfHandler *h, sf_handler_method m, uint64_t start_ns)
{
    sf_latency_record(&sf_handler_my_stripe(h)->timings[m], sf_clocks_mono_ns() - start_ns);
}

/* Set on a thread whose call was refused ServiceUnavailable; read and cleared by
 * sf_handler_take_unavailable on the same thread, after the call's reply was made. */
static _Thread_local gboolean sf_handler_refused_here;

void sf_handler_set_audit(SfHandler *h, sf_handler_audit_fn fn, void *ctx)
{
    h->audit = fn;
    h->audit_ctx = ctx;
}

gboolean sf_handler_take_unavailable(void)
{
    gboolean refused = sf_handler_refused_here;
    sf_handler_refused_here = FALSE;
    return refused;
}

/* Why ids are refused while no source is set: none yet, or none any more. */
static void sf_handler_idle_reason(SfHandler *h, char *why, size_t len)
{
    g_strlcpy(why, atomic_load_explicit(&h->stopping, memory_order_relaxed)
                       ? "stopping"
                       : "starting: no worker id held yet",
              len);
}

/* Why agent is refused (newly allocated), or NULL: longer than max_useragent_length or
 * breaking the original's grammar. The message quotes at most max_useragent_length bytes
 * of it. */
static char *sf_handler_agent_problem(SfHandler *h, const char *agent)
{
    size_t max = (size_t)h->max_useragent_length;
    size_t len = agent != NULL ? strnlen(agent, max + 1) : 0;
    if (G_LIKELY(agent != NULL && len <= max && sf_useragent_valid(agent)))
        return NULL;
    return len > max ? g_strdup_printf("invalid user agent: longer than the %zu bytes allowed "
                                       "(max_useragent_length); it must match %s",
                                       max, SF_AGENT_GRAMMAR)
                     : g_strdup_printf("invalid user agent \"%s\": it must match %s",
                                       agent != NULL ? agent : "", SF_AGENT_GRAMMAR);
}

/* Sets *message and returns TRUE when agent is refused (sf_handler_agent_problem), counting
 * the refusal. */
static gboolean sf_handler_refuse_bad_agent(SfHandler *h, const char *agent, char **message)
{
    char *problem = sf_handler_agent_problem(h, agent);
    if (G_LIKELY(problem == NULL))
        return FALSE;
    *message = problem;
    atomic_fetch_add_explicit(&sf_handler_my_stripe(h)->invalid_agent_errors, 1, memory_order_relaxed);
    return TRUE;
}

/* Why get_ids refuses count (newly allocated), or NULL when it is within 1..max_batch_size. */
static char *sf_handler_count_problem(SfHandler *h, int32_t count)
{
    if (G_LIKELY(count >= 1 && count <= h->max_batch_size))
        return NULL;
    return g_strdup_printf("count %d is outside the allowed range 1..%d (max_batch_size)",
                           (int)count, h->max_batch_size);
}

/* Makes count ids from the source: a clock failure becomes InvalidSystemClock with the
 * source's message, a refusal ServiceUnavailable (ids made, then fenced, are counted as
 * discarded, never handed out). */
static sf_handler_outcome sf_handler_make_ids(SfHandler *h, int64_t *ids, size_t count,
                                              char **message)
{
    char why[SF_ID_SOURCE_REASON_MAX];
    size_t discarded = 0;
    sf_ids_outcome rc;
    const sf_id_source *src = atomic_load_explicit(&h->source, memory_order_acquire);
    if (G_LIKELY(src != NULL)) {
        rc = src->ops->next_ids(src->ctx, ids, count, why, sizeof why, &discarded);
        if (G_LIKELY(rc == SF_IDS_OK))
            return SF_HANDLER_OK;
    } else {
        rc = SF_IDS_REFUSED;
        sf_handler_idle_reason(h, why, sizeof why);
    }
    sf_handler_stripe *s = sf_handler_my_stripe(h);
    *message = g_strdup(why);
    if (rc == SF_IDS_CLOCK) {
        atomic_fetch_add_explicit(&s->clock_errors, 1, memory_order_relaxed);
        return SF_HANDLER_INVALID_SYSTEM_CLOCK;
    }
    atomic_fetch_add_explicit(&s->ids_discarded, discarded, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->unavailable_errors, 1, memory_order_relaxed);
    sf_handler_refused_here = TRUE;
    return SF_HANDLER_SERVICE_UNAVAILABLE;
}

/* get_id: checks the agent, then the gate; makes one id, and hands it out only if the
 * check still holds after it was made. */
static sf_handler_outcome sf_handler_do_get_id(SfHandler *h, const char *agent, int64_t *id,
                                               char **message)
{
    if (sf_handler_refuse_bad_agent(h, agent, message))
        return SF_HANDLER_INVALID_USER_AGENT;
    sf_handler_outcome o = sf_handler_make_ids(h, id, 1, message);
    if (o != SF_HANDLER_OK)
        return o;
    sf_handler_count_ids(h, agent, 1);
    if (h->audit != NULL)
        h->audit(h->audit_ctx, id, 1, agent);
    return SF_HANDLER_OK;
}

/* get_ids: like get_id for count ids, count in 1..max_batch_size. */
static sf_handler_outcome sf_handler_do_get_ids(SfHandler *h, const char *agent, int32_t count,
                                                int64_t *ids, char **message)
{
    if (sf_handler_refuse_bad_agent(h, agent, message))
        return SF_HANDLER_INVALID_USER_AGENT;
    char *problem = sf_handler_count_problem(h, count);
    if (problem != NULL) {
        *message = problem;
        atomic_fetch_add_explicit(&sf_handler_my_stripe(h)->invalid_request_errors, 1,
                                  memory_order_relaxed);
        return SF_HANDLER_INVALID_REQUEST;
    }
    sf_handler_outcome o = sf_handler_make_ids(h, ids, (size_t)count, message);
    if (o != SF_HANDLER_OK)
        return o;
    sf_handler_count_ids(h, agent, (uint64_t)count);
    if (h->audit != NULL)
        h->audit(h->audit_ctx, ids, (size_t)count, agent);
    return SF_HANDLER_OK;
}

/* get_worker_id and get_datacenter_id (m): a field of the worker in use, -1 while none is
 * held. */
static int64_t sf_handler_worker_value(SfHandler *h, sf_handler_method m)
{
    int64_t datacenter_id = -1, worker_id = -1;
    const sf_id_source *src = atomic_load_explicit(&h->source, memory_order_acquire);
    if (src != NULL)
        src->ops->ids(src->ctx, &datacenter_id, &worker_id);
    return m == SF_HANDLER_GET_WORKER_ID ? worker_id : datacenter_id;
}

/* The same, timed as method m. */
static int64_t sf_handler_worker_field(SfHandler *h, sf_handler_method m)
{
    uint64_t t0 = sf_clocks_mono_ns();
    int64_t id = sf_handler_worker_value(h, m);
    sf_handler_time(h, m, t0);
    return id;
}

/* The service's methods as plain calls, each timed from entry to return. */
int64_t sf_handler_call_get_worker_id(SfHandler *h)
{
    return sf_handler_worker_field(h, SF_HANDLER_GET_WORKER_ID);
}

int64_t sf_handler_call_get_datacenter_id(SfHandler *h)
{
    return sf_handler_worker_field(h, SF_HANDLER_GET_DATACENTER_ID);
}

int64_t sf_handler_call_get_timestamp(SfHandler *h)
{
    uint64_t t0 = sf_clocks_mono_ns();
    int64_t now = sf_clock_now_ms();
    sf_handler_time(h, SF_HANDLER_GET_TIMESTAMP, t0);
    return now;
}

G_DEFINE_QUARK(sf-handler-error-quark, sf_handler_error)

/* A call's end as its caller gets it: TRUE when answered, else FALSE with the refusal in
 * *error (SF_HANDLER_ERROR, o its code), taking message. */
static gboolean sf_handler_answer(sf_handler_outcome o, char *message, GError **error)
{
    if (G_LIKELY(o == SF_HANDLER_OK))
        return TRUE;
    g_set_error_literal(error, SF_HANDLER_ERROR, (gint)o, message);
    g_free(message);
    return FALSE;
}

gboolean sf_handler_call_get_id(SfHandler *h, const char *agent, int64_t *id, GError **error)
{
    uint64_t t0 = sf_clocks_mono_ns();
    char *message = NULL;
    sf_handler_outcome o = sf_handler_do_get_id(h, agent, id, &message);
    sf_handler_time(h, SF_HANDLER_GET_ID, t0);
    return sf_handler_answer(o, message, error);
}

gboolean sf_handler_call_get_ids(SfHandler *h, const char *agent, int32_t count, int64_t *ids,
                                 GError **error)
{
    uint64_t t0 = sf_clocks_mono_ns();
    char *message = NULL;
    sf_handler_outcome o = sf_handler_do_get_ids(h, agent, count, ids, &message);
    sf_handler_time(h, SF_HANDLER_GET_IDS, t0);
    return sf_handler_answer(o, message, error);
}

gboolean sf_handler_check_call(SfHandler *h, const char *agent, bool batch, int32_t count,
                               GError **error)
{
    char *problem = sf_handler_agent_problem(h, agent);
    sf_handler_outcome o = SF_HANDLER_INVALID_USER_AGENT;
    if (problem == NULL && batch && (problem = sf_handler_count_problem(h, count)) != NULL)
        o = SF_HANDLER_INVALID_REQUEST;
    if (problem == NULL && !sf_handler_is_serving(h, &problem))
        o = SF_HANDLER_SERVICE_UNAVAILABLE;
    return sf_handler_answer(problem == NULL ? SF_HANDLER_OK : o, problem, error);
}

int sf_handler_max_batch_size(const SfHandler *h)
{
    return h->max_batch_size;
}

SfHandler *sf_handler_new(const sf_handler_options *o)
{
    SfHandler *h = g_object_new(SF_TYPE_HANDLER, NULL);
    h->max_batch_size = o->max_batch_size >= 1 ? o->max_batch_size : 1;
    h->max_useragent_length = o->max_useragent_length >= 1 ? o->max_useragent_length : 1;
    h->agents = sf_agents_new(o->max_tracked_useragents);
    return h;
}

void sf_handler_set_source(SfHandler *h, const sf_id_source *src)
{
    if (src == NULL)
        atomic_store_explicit(&h->stopping, true, memory_order_relaxed);
    atomic_store_explicit(&h->since_ms, sf_clock_now_ms(), memory_order_relaxed);
    atomic_store_explicit(&h->source, src, memory_order_release);
}

void sf_handler_close(SfHandler *h, const char *reason)
{
    atomic_store_explicit(&h->stopping, true, memory_order_relaxed);
    atomic_store_explicit(&h->since_ms, sf_clock_now_ms(), memory_order_relaxed);
    const sf_id_source *src = atomic_load_explicit(&h->source, memory_order_acquire);
    if (src != NULL)
        src->ops->close(src->ctx, reason);
}

gboolean sf_handler_is_serving(SfHandler *h, char **reason)
{
    char why[SF_ID_SOURCE_REASON_MAX];
    gboolean refused = TRUE;
    const sf_id_source *src = atomic_load_explicit(&h->source, memory_order_acquire);
    if (src != NULL)
        refused = src->ops->refusal(src->ctx, why, sizeof why);
    else
        sf_handler_idle_reason(h, why, sizeof why);
    if (reason != NULL)
        *reason = refused ? g_strdup(why) : NULL;
    return !refused;
}

gboolean sf_handler_get_health(SfHandler *h, sfz_health *out)
{
    const sf_id_source *src = atomic_load_explicit(&h->source, memory_order_acquire);
    if (src != NULL)
        return src->ops->health(src->ctx, out);
    memset(out, 0, sizeof *out);
    out->since_ms = atomic_load_explicit(&h->since_ms, memory_order_relaxed);
    out->reason = atomic_load_explicit(&h->stopping, memory_order_relaxed) ? SFZ_REASON_STOPPING
                                                                           : SFZ_REASON_STARTING;
    return FALSE;
}

void sf_handler_get_stats(SfHandler *h, sf_handler_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < SF_HANDLER_STRIPES; i++) {
        sf_handler_stripe *s = &h->stripes[i];
#define SF_SUM_COUNTER(name, help) \
    out->name += atomic_load_explicit(&s->name, memory_order_relaxed);
        SF_HANDLER_COUNTERS(SF_SUM_COUNTER)
#undef SF_SUM_COUNTER
    }
    sf_agents_stats as;
    sf_agents_get_stats(h->agents, &as);
    out->useragents_tracked = as.tracked;
    out->useragents_untracked = as.untracked;
    out->ids_generated_other_agents = as.other_ids;
    out->exceptions = out->invalid_agent_errors + out->invalid_request_errors +
                      out->unavailable_errors + out->clock_errors;
    out->worker_id = sf_handler_worker_value(h, SF_HANDLER_GET_WORKER_ID);
    out->datacenter_id = sf_handler_worker_value(h, SF_HANDLER_GET_DATACENTER_ID);
    out->serving = sf_handler_is_serving(h, NULL);
    sf_worker_stats ws = {0};
    out->worker_ids_taken = -1;
    const sf_id_source *src = atomic_load_explicit(&h->source, memory_order_acquire);
    if (src != NULL)
        out->worker_ids_taken = src->ops->stats(src->ctx, &ws, out->worker_id_path,
                                                sizeof out->worker_id_path);
    out->sequence_waits = ws.sequence_waits;
    out->clock_backward_waits = ws.clock_backward_waits;
    out->clock_backward_errors = ws.clock_backward_errors;
}

void sf_handler_foreach_timing(SfHandler *h, sf_handler_timing_fn fn, void *ctx)
{
    sf_latency_snapshot *snap = g_new(sf_latency_snapshot, 1);
    for (int m = 0; m < SF_HANDLER_METHODS; m++) {
        sf_latency_snapshot_init(snap);
        for (int i = 0; i < SF_HANDLER_STRIPES; i++)
            sf_latency_add_to(&h->stripes[i].timings[m], snap);
        fn(sf_handler_method_names[m], snap, ctx);
    }
    g_free(snap);
}

void sf_handler_foreach_agent(SfHandler *h, sf_handler_agent_fn fn, void *ctx)
{
    sf_agents_foreach(h->agents, fn, ctx);
}

/* ---- The Thrift face: the service's methods as the generated processor calls them, each
 * forwarding to the plain call above and turning a refusal into the exception the method
 * declares. ---- */

/* Turns a refusal into the declared exception the generated processor writes, taking
 * refusal; request is NULL for a method that does not declare InvalidRequestError. */
static void sf_handler_thrift_raise(GError *refusal,
                                    SfThriftInvalidSystemClock **clock_error,
                                    SfThriftInvalidUserAgentError **agent_error,
                                    SfThriftInvalidRequestError **request_error,
                                    SfThriftServiceUnavailable **unavailable)
{
    const char *message = refusal->message;
    switch ((sf_handler_outcome)refusal->code) {
    case SF_HANDLER_INVALID_SYSTEM_CLOCK:
        *clock_error = g_object_new(SF_THRIFT_TYPE_INVALID_SYSTEM_CLOCK, "message", message, NULL);
        break;
    case SF_HANDLER_INVALID_USER_AGENT:
        *agent_error =
            g_object_new(SF_THRIFT_TYPE_INVALID_USER_AGENT_ERROR, "message", message, NULL);
        break;
    case SF_HANDLER_INVALID_REQUEST:
        *request_error =
            g_object_new(SF_THRIFT_TYPE_INVALID_REQUEST_ERROR, "message", message, NULL);
        break;
    case SF_HANDLER_SERVICE_UNAVAILABLE:
        *unavailable = g_object_new(SF_THRIFT_TYPE_SERVICE_UNAVAILABLE, "message", message, NULL);
        break;
    case SF_HANDLER_OK:
        break;
    }
    g_error_free(refusal);
}

/* The service's methods as the generated processor calls them, through the vtable. */
static gboolean sf_handler_thrift_get_worker_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                                GError **error)
{
    (void)error;
    *_return = sf_handler_call_get_worker_id(SF_HANDLER(iface));
    return TRUE;
}

static gboolean sf_handler_thrift_get_datacenter_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                                    GError **error)
{
    (void)error;
    *_return = sf_handler_call_get_datacenter_id(SF_HANDLER(iface));
    return TRUE;
}

static gboolean sf_handler_thrift_get_timestamp(SfThriftSnowflakeIf *iface, gint64 *_return,
                                                GError **error)
{
    (void)error;
    *_return = sf_handler_call_get_timestamp(SF_HANDLER(iface));
    return TRUE;
}

static gboolean sf_handler_thrift_get_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                         const gchar *useragent,
                                         SfThriftInvalidSystemClock **clock_error,
                                         SfThriftInvalidUserAgentError **agent_error,
                                         SfThriftServiceUnavailable **unavailable, GError **error)
{
    (void)error;
    GError *refusal = NULL;
    int64_t id;
    if (sf_handler_call_get_id(SF_HANDLER(iface), useragent, &id, &refusal)) {
        *_return = id;
        return TRUE;
    }
    sf_handler_thrift_raise(refusal, clock_error, agent_error, NULL, unavailable);
    return FALSE;
}

static gboolean sf_handler_thrift_get_ids(SfThriftSnowflakeIf *iface, GArray **_return,
                                          const gchar *useragent, const gint32 count,
                                          SfThriftInvalidSystemClock **clock_error,
                                          SfThriftInvalidUserAgentError **agent_error,
                                          SfThriftInvalidRequestError **request_error,
                                          SfThriftServiceUnavailable **unavailable, GError **error)
{
    (void)error;
    SfHandler *h = SF_HANDLER(iface);
    GArray *ids = *_return;
    gboolean fits = count >= 1 && count <= sf_handler_max_batch_size(h);
    if (fits)
        g_array_set_size(ids, (guint)count);
    GError *refusal = NULL;
    if (sf_handler_call_get_ids(h, useragent, count, fits ? (int64_t *)(void *)ids->data : NULL,
                                &refusal))
        return TRUE;
    g_array_set_size(ids, 0);
    sf_handler_thrift_raise(refusal, clock_error, agent_error, request_error, unavailable);
    return FALSE;
}

static void sf_handler_thrift_install(SfThriftSnowflakeHandlerClass *base)
{
    base->get_worker_id = sf_handler_thrift_get_worker_id;
    base->get_timestamp = sf_handler_thrift_get_timestamp;
    base->get_id = sf_handler_thrift_get_id;
    base->get_datacenter_id = sf_handler_thrift_get_datacenter_id;
    base->get_ids = sf_handler_thrift_get_ids;
}

/* No request can be running once the last reference to the handler is gone; the source is
 * its owner's. */
static void sf_handler_finalize(GObject *object)
{
    SfHandler *h = SF_HANDLER(object);
    sf_agents_free(h->agents);
    free(h->stripes);
    G_OBJECT_CLASS(sf_handler_parent_class)->finalize(object);
}

/* Starts closed: no worker, gate shut, counters zero. */
static void sf_handler_init(SfHandler *h)
{
    h->max_batch_size = 1;
    h->max_useragent_length = 255;
    atomic_init(&h->source, NULL);
    atomic_init(&h->stopping, false);
    atomic_init(&h->since_ms, sf_clock_now_ms());
    h->stripes = aligned_alloc(64, sizeof(sf_handler_stripe) * SF_HANDLER_STRIPES);
    if (h->stripes == NULL)
        g_error("out of memory allocating handler counters");
    for (int i = 0; i < SF_HANDLER_STRIPES; i++) {
        sf_handler_stripe *s = &h->stripes[i];
#define SF_INIT_COUNTER(name, help) atomic_init(&s->name, 0);
        SF_HANDLER_COUNTERS(SF_INIT_COUNTER)
#undef SF_INIT_COUNTER
        for (int m = 0; m < SF_HANDLER_METHODS; m++)
            sf_latency_init(&s->timings[m]);
    }
}

/* Plugs our methods into the generated handler's vtable. */
static void sf_handler_class_init(SfHandlerClass *klass)
{
    SfThriftSnowflakeHandlerClass *base = SF_THRIFT_SNOWFLAKE_HANDLER_CLASS(klass);
    G_OBJECT_CLASS(klass)->finalize = sf_handler_finalize;
    sf_handler_thrift_install(base);
}
