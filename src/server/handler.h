/* handler.h -- SfHandler: the Snowflake Thrift service's methods over an sf_worker, with a serving gate and stats. */
#ifndef SF_HANDLER_H
#define SF_HANDLER_H

#include <glib-object.h>
#include <stdint.h>

#include "common/handler_options.h"
#include "latency.h"
#include "idsource.h"
#include "lib/snowflake.h"
#include "sf_thrift_snowflake.h"
#include "zk/snowflake_zk.h"

G_BEGIN_DECLS

#define SF_TYPE_HANDLER (sf_handler_get_type())
#define SF_HANDLER(obj) (G_TYPE_CHECK_INSTANCE_CAST((obj), SF_TYPE_HANDLER, SfHandler))
#define SF_IS_HANDLER(obj) (G_TYPE_CHECK_INSTANCE_TYPE((obj), SF_TYPE_HANDLER))

typedef struct _SfHandler SfHandler;
typedef struct _SfHandlerClass SfHandlerClass;

GType sf_handler_get_type(void);

/* Counters and gauges of one handler, summed over every thread that called it. */
/* The handler's counters, each named once: X(name, help). SF_HANDLER_COUNTERS are
 * counted per stripe and summed when read; SF_HANDLER_DERIVED_COUNTERS are read from
 * elsewhere (their sum, the current worker, the agent table). Each is a field of
 * sf_handler_stats and a counter of the admin endpoint under that name. */
#define SF_HANDLER_COUNTERS(X)                                                                 \
    X(ids_generated, "Ids handed out")                                                        \
    X(invalid_agent_errors, "Calls refused for a bad user agent")                             \
    X(invalid_request_errors, "get_ids calls refused for their count")                        \
    X(unavailable_errors, "Calls refused while not serving")                                  \
    X(clock_errors, "Calls refused with InvalidSystemClock")                                  \
    X(ids_discarded,                                                                          \
      "Ids made but not handed out: fenced or the lease ran out while they were made")
#define SF_HANDLER_DERIVED_COUNTERS(X)                                                         \
    X(exceptions, "Declared exceptions thrown to clients")                                    \
    X(sequence_waits, "Waits for the next millisecond after 4096 ids in one")                 \
    X(clock_backward_waits, "Small backward clock steps waited out")                          \
    X(clock_backward_errors, "Ids refused because the clock moved backwards")                 \
    X(ids_generated_other_agents, "Ids handed out to agents beyond max_tracked_useragents")

#define SF_HANDLER_PATH_MAX 512

/* Totals since start (the worker's: of the current worker, zero while none) and gauges. */
typedef struct sf_handler_stats {
#define SF_HANDLER_STATS_FIELD(name, help) uint64_t name;
    SF_HANDLER_COUNTERS(SF_HANDLER_STATS_FIELD)
    SF_HANDLER_DERIVED_COUNTERS(SF_HANDLER_STATS_FIELD)
#undef SF_HANDLER_STATS_FIELD
    int64_t worker_id;             /* -1 while no worker is held */
    int64_t datacenter_id;         /* -1 while no worker is held */
    gboolean serving;
    /* Per-agent counting, bounded by max_tracked_useragents: */
    uint64_t useragents_tracked;   /* agents counted by name */
    uint64_t useragents_untracked; /* distinct agents beyond the cap (estimated) */
    /* Registered: the worker ids held by anyone under the path claimed in (-1 standalone
     * or not counted yet), and that path. */
    int64_t worker_ids_taken;
    char worker_id_path[SF_HANDLER_PATH_MAX];
} sf_handler_stats;

/* Creates a handler with the limits of o (copied) that refuses ids ("starting") until it is
 * given a source. */
SfHandler *sf_handler_new(const sf_handler_options *o);

/* From now on ids come from src: a registration (sf_id_source_for_registration), a
 * standalone worker (standalone.h) or a test's. src, and what it points to, must outlive
 * every request that may use it. NULL takes the source away: ids are refused, "stopping"
 * (a daemon does so before it stops its registration, once its server stopped). */
void sf_handler_set_source(SfHandler *h, const sf_id_source *src);

/* Refuses ids from now on, saying reason: closes the source (a registration for good:
 * sfz_shut), keeping its worker (get_worker_id still answers it). To stop. */
void sf_handler_close(SfHandler *h, const char *reason);

/* TRUE when ids are being handed out; otherwise, when reason is non-NULL,
 * *reason receives a newly allocated explanation (free with g_free). */
gboolean sf_handler_is_serving(SfHandler *h, char **reason);

/* Why ids are refused now (a fixed set), since when, and the ZooKeeper session's figures:
 * the source's (TRUE when it has a session); with none, "starting" before a source was given
 * and "stopping" after, and no session figures (FALSE). */
gboolean sf_handler_get_health(SfHandler *h, sfz_health *out);

/* Told of the ids of every call that hands them out, once they passed the check after
 * generation, on the request's thread: it must not block. */
typedef void (*sf_handler_audit_fn)(void *ctx, const int64_t *ids, size_t n, const char *agent);

/* Sets the audit hook (NULL = none). Call before requests arrive. */
void sf_handler_set_audit(SfHandler *h, sf_handler_audit_fn fn, void *ctx);

/* TRUE when a call made on this thread since the last call to this function was refused
 * with ServiceUnavailable (not serving, or fenced while its ids were made); clears it. A
 * server that must not answer such calls (legacy clients cannot decode the exception)
 * asks after each batch and closes the connection instead. */
gboolean sf_handler_take_unavailable(void);

void sf_handler_get_stats(SfHandler *h, sf_handler_stats *out);

/* The service's methods, each timed from the handler's entry to its return. */
typedef enum {
    SF_HANDLER_GET_ID,
    SF_HANDLER_GET_IDS,
    SF_HANDLER_GET_WORKER_ID,
    SF_HANDLER_GET_DATACENTER_ID,
    SF_HANDLER_GET_TIMESTAMP,
    SF_HANDLER_METHODS
} sf_handler_method;

/* How a call ended: answered, or refused with one of the service's declared exceptions;
 * a refusal reaches the caller as a GError of SF_HANDLER_ERROR with the outcome as its
 * code and the exception's message as its own. */
typedef enum {
    SF_HANDLER_OK = 0,
    SF_HANDLER_INVALID_SYSTEM_CLOCK, /* the clock is behind the last id or out of range */
    SF_HANDLER_INVALID_USER_AGENT,   /* too long, or not [a-zA-Z][a-zA-Z\-0-9]* */
    SF_HANDLER_INVALID_REQUEST,      /* get_ids: count outside 1..max_batch_size */
    SF_HANDLER_SERVICE_UNAVAILABLE,  /* no worker id held, gate closed, lease out, fenced */
} sf_handler_outcome;

#define SF_HANDLER_ERROR (sf_handler_error_quark())
GQuark sf_handler_error_quark(void);

/* The service's methods as plain calls, for a caller that decodes the call and encodes
 * the reply itself; the Thrift processor reaches the same code through the handler's
 * vtable, so both are timed, counted and audited alike. A refusal returns FALSE with
 * *error set (SF_HANDLER_ERROR: the outcome and the exception's message; the caller frees
 * it, g_error_free). */
int64_t sf_handler_call_get_worker_id(SfHandler *h);
int64_t sf_handler_call_get_datacenter_id(SfHandler *h);
int64_t sf_handler_call_get_timestamp(SfHandler *h);
gboolean sf_handler_call_get_id(SfHandler *h, const char *agent, int64_t *id, GError **error);

/* ids must have room for count ids when count is within 1..sf_handler_max_batch_size(h);
 * any other count is refused before ids is touched (it may then be NULL). */
gboolean sf_handler_call_get_ids(SfHandler *h, const char *agent, int32_t count, int64_t *ids,
                                 GError **error);
int sf_handler_max_batch_size(const SfHandler *h);

/* The refusal a call by agent would meet now, get_ids for count ids when batch, else get_id,
 * found without making ids, counting or timing anything, for a caller that asks whether it
 * would be served (an HTTP HEAD): TRUE, or FALSE with *error the refusal the call would
 * give, but for a clock error, which only making an id can find. */
gboolean sf_handler_check_call(SfHandler *h, const char *agent, bool batch, int32_t count,
                               GError **error);

/* Calls fn once per method, in the order above, with its timings summed over threads. */
typedef void (*sf_handler_timing_fn)(const char *method, const sf_latency_snapshot *timing,
                                     void *ctx);
void sf_handler_foreach_timing(SfHandler *h, sf_handler_timing_fn fn, void *ctx);

/* Calls fn once per tracked user agent that has been given ids, with its count, in name
 * order (at most max_tracked_useragents calls). */
typedef void (*sf_handler_agent_fn)(const char *agent, uint64_t count, void *ctx);
void sf_handler_foreach_agent(SfHandler *h, sf_handler_agent_fn fn, void *ctx);

G_END_DECLS

#endif /* SF_HANDLER_H */
