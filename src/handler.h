/* handler.h -- SfHandler: the Snowflake Thrift service's methods over an sf_worker, with a serving gate and stats. */
#ifndef SF_HANDLER_H
#define SF_HANDLER_H

#include <glib-object.h>
#include <stdint.h>

#include "snowflake.h"
#include "sf_thrift_snowflake.h"

G_BEGIN_DECLS

#define SF_TYPE_HANDLER (sf_handler_get_type())
#define SF_HANDLER(obj) (G_TYPE_CHECK_INSTANCE_CAST((obj), SF_TYPE_HANDLER, SfHandler))
#define SF_IS_HANDLER(obj) (G_TYPE_CHECK_INSTANCE_TYPE((obj), SF_TYPE_HANDLER))

typedef struct _SfHandler SfHandler;
typedef struct _SfHandlerClass SfHandlerClass;

GType sf_handler_get_type(void);

/* Counters and gauges of one handler, summed over every thread that called it. */
typedef struct sf_handler_stats {
    uint64_t ids_generated;        /* the original's ids_generated */
    uint64_t exceptions;           /* every declared exception thrown */
    uint64_t agent_errors;         /* InvalidUserAgentError */
    uint64_t request_errors;       /* InvalidRequestError (get_ids count) */
    uint64_t unavailable_errors;   /* ServiceUnavailable */
    uint64_t clock_errors;         /* InvalidSystemClock */
    int64_t worker_id;             /* -1 while no worker is held */
    int64_t datacenter_id;         /* -1 while no worker is held */
    gboolean serving;
    /* From the current worker (zero while none): */
    uint64_t sequence_waits;
    uint64_t clock_backward_waits;
    uint64_t clock_backward_errors;
} sf_handler_stats;

/* Creates a handler that refuses ids until a worker is set and the gate is
 * opened. max_batch_size (>= 1) bounds get_ids' count. */
SfHandler *sf_handler_new(int max_batch_size);

/* Makes w the worker ids come from (NULL = none held). The handler takes
 * ownership; replaced workers stay alive until the handler is finalized,
 * because a request on another thread may still be using one. */
void sf_handler_set_worker(SfHandler *h, sf_worker *w);

/* Opens (serving = TRUE) or closes the gate. While closed, get_id and get_ids
 * throw ServiceUnavailable carrying reason (copied; NULL = a generic text). */
void sf_handler_set_serving(SfHandler *h, gboolean serving, const char *reason);

/* Sets the lease: ids are handed out only while CLOCK_MONOTONIC (in ms) has not passed
 * valid_until_mono_ms; once past it, get_id, get_ids and /health refuse until a later
 * lease is set, even with the gate open. 0 = no lease (standalone: never expires).
 * The registry renews it; it fences a process that was frozen past its session. */
void sf_handler_set_lease(SfHandler *h, int64_t valid_until_mono_ms);

/* TRUE when ids are being handed out; otherwise, when reason is non-NULL,
 * *reason receives a newly allocated explanation (free with g_free). */
gboolean sf_handler_is_serving(SfHandler *h, char **reason);

void sf_handler_get_stats(SfHandler *h, sf_handler_stats *out);

/* Calls fn once per user agent that has been given ids, with its count. */
typedef void (*sf_handler_agent_fn)(const char *agent, uint64_t count, void *ctx);
void sf_handler_foreach_agent(SfHandler *h, sf_handler_agent_fn fn, void *ctx);

G_END_DECLS

#endif /* SF_HANDLER_H */
