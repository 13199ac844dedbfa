/* handler.c -- SfHandler: the Snowflake Thrift service's methods over an sf_worker, with a serving gate and stats. */
#define _POSIX_C_SOURCE 200809L
#include "handler.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "thrift_fix.h"

/* Counters are striped: each calling thread adds to its own cache line, and
 * readers sum the stripes, so the hot path never shares a written line. */
#define SF_HANDLER_STRIPES 16
/* Distinct user agents counted per stripe; later new agents are counted only
 * in ids_generated, so a client inventing agents cannot grow memory. */
#define SF_HANDLER_MAX_AGENTS 1024

#define SF_AGENT_GRAMMAR "[a-zA-Z][a-zA-Z\\-0-9]*"

typedef struct sf_handler_stripe {
    _Alignas(64) atomic_uint_fast64_t ids_generated;
    atomic_uint_fast64_t agent_errors;
    atomic_uint_fast64_t request_errors;
    atomic_uint_fast64_t unavailable_errors;
    atomic_uint_fast64_t clock_errors;
    GMutex agents_lock;
    GHashTable *agents; /* char * agent -> uint64_t * count */
} sf_handler_stripe;

struct _SfHandler {
    SfThriftSnowflakeHandler parent;
    int max_batch_size;
    sf_worker *current;     /* read and swapped atomically */
    gint serving;           /* read and written atomically */
    _Atomic int64_t lease_until; /* CLOCK_MONOTONIC ms; 0 = no lease */
    GMutex lock;            /* guards retired and reason */
    GPtrArray *retired;     /* every worker ever set, freed at finalize */
    char *reason;
    sf_handler_stripe *stripes;
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

/* Counts n ids for agent in the calling thread's stripe. */
static void sf_handler_count_ids(SfHandler *h, const char *agent, uint64_t n)
{
    sf_handler_stripe *s = sf_handler_my_stripe(h);
    atomic_fetch_add_explicit(&s->ids_generated, n, memory_order_relaxed);
    g_mutex_lock(&s->agents_lock);
    uint64_t *count = g_hash_table_lookup(s->agents, agent);
    if (count != NULL) {
        *count += n;
    } else if (g_hash_table_size(s->agents) < SF_HANDLER_MAX_AGENTS) {
        count = g_new(uint64_t, 1);
        *count = n;
        g_hash_table_insert(s->agents, g_strdup(agent), count);
    }
    g_mutex_unlock(&s->agents_lock);
}

/* The coarse monotonic clock in ms: a few ms behind CLOCK_MONOTONIC at most, much
 * cheaper to read, and the lease's margin is seconds. */
static int64_t sf_handler_coarse_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How many ms ago the lease ran out: 0 while valid or when there is none. */
static int64_t sf_handler_lease_expired_ms(SfHandler *h)
{
    int64_t until = atomic_load_explicit(&h->lease_until, memory_order_acquire);
    if (until == 0)
        return 0;
    int64_t now = sf_handler_coarse_mono_ms();
    return now > until ? now - until : 0;
}

/* Fills *unavailable and returns TRUE when the gate is closed, no worker is
 * held or the lease ran out; otherwise stores the worker to use in *w. */
static gboolean sf_handler_refuse_if_closed(SfHandler *h, sf_worker **w,
                                            SfThriftServiceUnavailable **unavailable)
{
    *w = g_atomic_pointer_get(&h->current);
    if (G_LIKELY(*w != NULL && g_atomic_int_get(&h->serving) &&
                 sf_handler_lease_expired_ms(h) == 0))
        return FALSE;
    char *reason = NULL;
    sf_handler_is_serving(h, &reason);
    *unavailable = g_object_new(SF_THRIFT_TYPE_SERVICE_UNAVAILABLE, "message",
                                reason != NULL ? reason : "not serving", NULL);
    g_free(reason);
    atomic_fetch_add_explicit(&sf_handler_my_stripe(h)->unavailable_errors, 1,
                              memory_order_relaxed);
    return TRUE;
}

/* Fills *agent_error and returns TRUE when agent breaks the original's grammar. */
static gboolean sf_handler_refuse_bad_agent(SfHandler *h, const char *agent,
                                            SfThriftInvalidUserAgentError **agent_error)
{
    if (G_LIKELY(agent != NULL && sf_useragent_valid(agent)))
        return FALSE;
    char *msg = g_strdup_printf("invalid user agent \"%s\": it must match %s",
                                agent != NULL ? agent : "", SF_AGENT_GRAMMAR);
    *agent_error = g_object_new(SF_THRIFT_TYPE_INVALID_USER_AGENT_ERROR, "message", msg, NULL);
    g_free(msg);
    atomic_fetch_add_explicit(&sf_handler_my_stripe(h)->agent_errors, 1, memory_order_relaxed);
    return TRUE;
}

/* Turns a core failure into the declared InvalidSystemClock, keeping the core's message. */
static void sf_handler_clock_error(SfHandler *h, const sf_error *err,
                                   SfThriftInvalidSystemClock **clock_error)
{
    *clock_error = g_object_new(SF_THRIFT_TYPE_INVALID_SYSTEM_CLOCK, "message", err->message, NULL);
    atomic_fetch_add_explicit(&sf_handler_my_stripe(h)->clock_errors, 1, memory_order_relaxed);
}

/* get_worker_id: the worker id in use, -1 while none is held. */
static gboolean sf_handler_get_worker_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                         GError **error)
{
    (void)error;
    sf_worker *w = g_atomic_pointer_get(&((SfHandler *)iface)->current);
    *_return = w != NULL ? sf_worker_worker_id(w) : -1;
    return TRUE;
}

/* get_datacenter_id: the datacenter id in use, -1 while no worker is held. */
static gboolean sf_handler_get_datacenter_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                             GError **error)
{
    (void)error;
    sf_worker *w = g_atomic_pointer_get(&((SfHandler *)iface)->current);
    *_return = w != NULL ? sf_worker_datacenter_id(w) : -1;
    return TRUE;
}

/* get_timestamp: the server's wall clock in Unix milliseconds, as the original. */
static gboolean sf_handler_get_timestamp(SfThriftSnowflakeIf *iface, gint64 *_return,
                                         GError **error)
{
    (void)iface;
    (void)error;
    *_return = sf_clock_now_ms();
    return TRUE;
}

/* get_id: checks the agent, then the gate, then generates one id. */
static gboolean sf_handler_get_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                  const gchar *useragent,
                                  SfThriftInvalidSystemClock **clock_error,
                                  SfThriftInvalidUserAgentError **agent_error,
                                  SfThriftServiceUnavailable **unavailable, GError **error)
{
    (void)error;
    SfHandler *h = (SfHandler *)iface;
    sf_worker *w;
    if (sf_handler_refuse_bad_agent(h, useragent, agent_error) ||
        sf_handler_refuse_if_closed(h, &w, unavailable))
        return FALSE;
    sf_error err;
    int64_t id;
    if (sf_worker_next_id(w, &id, &err) != SF_OK) {
        sf_handler_clock_error(h, &err, clock_error);
        return FALSE;
    }
    *_return = id;
    sf_handler_count_ids(h, useragent, 1);
    return TRUE;
}

/* get_ids: like get_id for count ids, count in 1..max_batch_size. */
static gboolean sf_handler_get_ids(SfThriftSnowflakeIf *iface, GArray **_return,
                                   const gchar *useragent, const gint32 count,
                                   SfThriftInvalidSystemClock **clock_error,
                                   SfThriftInvalidUserAgentError **agent_error,
                                   SfThriftInvalidRequestError **request_error,
                                   SfThriftServiceUnavailable **unavailable, GError **error)
{
    (void)error;
    SfHandler *h = (SfHandler *)iface;
    sf_worker *w;
    if (sf_handler_refuse_bad_agent(h, useragent, agent_error))
        return FALSE;
    if (count < 1 || count > h->max_batch_size) {
        char *msg = g_strdup_printf("count %d is outside the allowed range 1..%d (max_batch_size)",
                                    (int)count, h->max_batch_size);
        *request_error = g_object_new(SF_THRIFT_TYPE_INVALID_REQUEST_ERROR, "message", msg, NULL);
        g_free(msg);
        atomic_fetch_add_explicit(&sf_handler_my_stripe(h)->request_errors, 1,
                                  memory_order_relaxed);
        return FALSE;
    }
    if (sf_handler_refuse_if_closed(h, &w, unavailable))
        return FALSE;
    GArray *ids = *_return;
    g_array_set_size(ids, (guint)count);
    sf_error err;
    if (sf_worker_next_ids(w, (int64_t *)(void *)ids->data, (size_t)count, &err) != SF_OK) {
        g_array_set_size(ids, 0);
        sf_handler_clock_error(h, &err, clock_error);
        return FALSE;
    }
    sf_handler_count_ids(h, useragent, (uint64_t)count);
    return TRUE;
}

SfHandler *sf_handler_new(int max_batch_size)
{
    sf_thrift_fix_finalize();
    sf_thrift_fix_processor();
    SfHandler *h = g_object_new(SF_TYPE_HANDLER, NULL);
    h->max_batch_size = max_batch_size >= 1 ? max_batch_size : 1;
    return h;
}

void sf_handler_set_worker(SfHandler *h, sf_worker *w)
{
    g_mutex_lock(&h->lock);
    if (w != NULL)
        g_ptr_array_add(h->retired, w);
    g_atomic_pointer_set(&h->current, w);
    g_mutex_unlock(&h->lock);
}

void sf_handler_set_serving(SfHandler *h, gboolean serving, const char *reason)
{
    g_mutex_lock(&h->lock);
    g_free(h->reason);
    h->reason = g_strdup(reason);
    g_atomic_int_set(&h->serving, serving ? 1 : 0);
    g_mutex_unlock(&h->lock);
}

void sf_handler_set_lease(SfHandler *h, int64_t valid_until_mono_ms)
{
    atomic_store_explicit(&h->lease_until, valid_until_mono_ms, memory_order_release);
}

gboolean sf_handler_is_serving(SfHandler *h, char **reason)
{
    gboolean has_worker = g_atomic_pointer_get(&h->current) != NULL;
    gboolean open = g_atomic_int_get(&h->serving);
    int64_t expired_ms = sf_handler_lease_expired_ms(h);
    gboolean serving = open && has_worker && expired_ms == 0;
    if (!serving && reason != NULL) {
        g_mutex_lock(&h->lock);
        if (!has_worker)
            *reason = g_strdup("no worker id is held");
        else if (!open)
            *reason = g_strdup(h->reason != NULL ? h->reason : "not serving");
        else
            *reason = g_strdup_printf("the ZooKeeper lease expired %" G_GINT64_FORMAT " ms ago: "
                                      "the session may have expired and another node may "
                                      "hold our worker id; waiting for the lease to be renewed",
                                      (gint64)expired_ms);
        g_mutex_unlock(&h->lock);
    }
    return serving;
}

void sf_handler_get_stats(SfHandler *h, sf_handler_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < SF_HANDLER_STRIPES; i++) {
        sf_handler_stripe *s = &h->stripes[i];
        out->ids_generated += atomic_load_explicit(&s->ids_generated, memory_order_relaxed);
        out->agent_errors += atomic_load_explicit(&s->agent_errors, memory_order_relaxed);
        out->request_errors += atomic_load_explicit(&s->request_errors, memory_order_relaxed);
        out->unavailable_errors +=
            atomic_load_explicit(&s->unavailable_errors, memory_order_relaxed);
        out->clock_errors += atomic_load_explicit(&s->clock_errors, memory_order_relaxed);
    }
    out->exceptions =
        out->agent_errors + out->request_errors + out->unavailable_errors + out->clock_errors;
    sf_worker *w = g_atomic_pointer_get(&h->current);
    out->worker_id = w != NULL ? sf_worker_worker_id(w) : -1;
    out->datacenter_id = w != NULL ? sf_worker_datacenter_id(w) : -1;
    out->serving = sf_handler_is_serving(h, NULL);
    if (w != NULL) {
        sf_worker_stats ws;
        sf_worker_get_stats(w, &ws);
        out->sequence_waits = ws.sequence_waits;
        out->clock_backward_waits = ws.clock_backward_waits;
        out->clock_backward_errors = ws.clock_backward_errors;
    }
}

void sf_handler_foreach_agent(SfHandler *h, sf_handler_agent_fn fn, void *ctx)
{
    /* Merge the stripes first so each agent is reported once, in name order. */
    GHashTable *merged = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    for (int i = 0; i < SF_HANDLER_STRIPES; i++) {
        sf_handler_stripe *s = &h->stripes[i];
        GHashTableIter it;
        gpointer key, value;
        g_mutex_lock(&s->agents_lock);
        g_hash_table_iter_init(&it, s->agents);
        while (g_hash_table_iter_next(&it, &key, &value)) {
            uint64_t *sum = g_hash_table_lookup(merged, key);
            if (sum == NULL) {
                sum = g_new0(uint64_t, 1);
                g_hash_table_insert(merged, g_strdup(key), sum);
            }
            *sum += *(uint64_t *)value;
        }
        g_mutex_unlock(&s->agents_lock);
    }
    GList *keys = g_list_sort(g_hash_table_get_keys(merged), (GCompareFunc)strcmp);
    for (GList *k = keys; k != NULL; k = k->next)
        fn(k->data, *(uint64_t *)g_hash_table_lookup(merged, k->data), ctx);
    g_list_free(keys);
    g_hash_table_unref(merged);
}

/* Frees every worker ever set: no request can be running once the last
 * reference to the handler is gone. */
static void sf_handler_finalize(GObject *object)
{
    SfHandler *h = SF_HANDLER(object);
    for (int i = 0; i < SF_HANDLER_STRIPES; i++) {
        g_hash_table_unref(h->stripes[i].agents);
        g_mutex_clear(&h->stripes[i].agents_lock);
    }
    free(h->stripes);
    g_ptr_array_free(h->retired, TRUE);
    g_free(h->reason);
    g_mutex_clear(&h->lock);
    G_OBJECT_CLASS(sf_handler_parent_class)->finalize(object);
}

/* Starts closed: no worker, gate shut, counters zero. */
static void sf_handler_init(SfHandler *h)
{
    h->max_batch_size = 1;
    h->current = NULL;
    h->serving = 0;
    atomic_init(&h->lease_until, 0);
    g_mutex_init(&h->lock);
    h->retired = g_ptr_array_new_with_free_func((GDestroyNotify)sf_worker_free);
    h->reason = g_strdup("starting");
    h->stripes = aligned_alloc(64, sizeof(sf_handler_stripe) * SF_HANDLER_STRIPES);
    if (h->stripes == NULL)
        g_error("out of memory allocating handler counters");
    for (int i = 0; i < SF_HANDLER_STRIPES; i++) {
        sf_handler_stripe *s = &h->stripes[i];
        atomic_init(&s->ids_generated, 0);
        atomic_init(&s->agent_errors, 0);
        atomic_init(&s->request_errors, 0);
        atomic_init(&s->unavailable_errors, 0);
        atomic_init(&s->clock_errors, 0);
        g_mutex_init(&s->agents_lock);
        s->agents = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    }
}

/* Plugs our methods into the generated handler's vtable. */
static void sf_handler_class_init(SfHandlerClass *klass)
{
    SfThriftSnowflakeHandlerClass *base = SF_THRIFT_SNOWFLAKE_HANDLER_CLASS(klass);
    G_OBJECT_CLASS(klass)->finalize = sf_handler_finalize;
    base->get_worker_id = sf_handler_get_worker_id;
    base->get_timestamp = sf_handler_get_timestamp;
    base->get_id = sf_handler_get_id;
    base->get_datacenter_id = sf_handler_get_datacenter_id;
    base->get_ids = sf_handler_get_ids;
}
