/* http_ids.h -- sf_http_ids: the HTTP ids port. Ids over plain GET for callers without a
 * Thrift client (/id, /ids?count=N, and Meituan Leaf's /api/snowflake/get/{key}), served
 * with libmicrohttpd through the same handler calls as the Thrift port, under the same kind
 * of limits: connections, idle and request-head timeouts, request size, unsent bodies. */
#ifndef SF_HTTP_IDS_H
#define SF_HTTP_IDS_H

#include <glib.h>
#include <stdint.h>

#include "common/http_options.h"
#include "handler.h"
#include "latency.h"

typedef struct sf_http_ids sf_http_ids;

/* The listener's counters, each named once: X(name, help). Each is a field of
 * sf_http_ids_stats and a counter of the admin endpoint under that name. */
#define SF_HTTP_IDS_COUNTERS(X)                                                                \
    X(http_connections_accepted, "HTTP ids connections accepted")                             \
    X(http_connections_refused, "HTTP ids connections refused over [http] max_connections")   \
    X(http_request_timeouts,                                                                  \
      "HTTP ids connections closed: a request head not in within request_timeout_ms")         \
    X(http_output_budget_refusals,                                                            \
      "HTTP ids requests answered 503: their ids would not fit max_output_buffer")

/* Its gauges, named the same way. */
#define SF_HTTP_IDS_GAUGES(X)                                                                  \
    X(http_port, "The HTTP ids port ([http] port)")                                           \
    X(http_connections, "HTTP ids connections open")                                          \
    X(http_max_connections,                                                                   \
      "HTTP ids connections open at most ([http] max_connections, as fitted)")                \
    X(http_output_buffered_bytes, "Bytes of HTTP ids answers made and not yet sent")

/* Totals since start, and the gauges now. */
typedef struct sf_http_ids_stats {
#define SF_HTTP_IDS_STATS_FIELD(name, help) uint64_t name;
    SF_HTTP_IDS_COUNTERS(SF_HTTP_IDS_STATS_FIELD)
    SF_HTTP_IDS_GAUGES(SF_HTTP_IDS_STATS_FIELD)
#undef SF_HTTP_IDS_STATS_FIELD
} sf_http_ids_stats;

/* Descriptors a thread holds beside its connections (its epoll and its wake-up): what
 * fdlimit.h counts for the port. */
#define SF_HTTP_THREAD_FDS 2

/* Binds o->bind_address:o->port (o->port must not be 0) and starts answering with ids from
 * h, which must outlive the listener. o->max_connections is taken as given: fit it to the
 * open-file limit first (fdlimit.h). NULL with *error set, naming the address or the
 * setting, when a setting is out of range or the port cannot be bound. */
sf_http_ids *sf_http_ids_start(const sf_http_options *o, SfHandler *h, GError **error);

/* The port bound. */
int sf_http_ids_port(const sf_http_ids *s);

/* Stops accepting, closes every connection (a reply being sent is cut) and frees
 * everything. NULL is allowed. */
void sf_http_ids_stop(sf_http_ids *s);

void sf_http_ids_get_stats(sf_http_ids *s, sf_http_ids_stats *out);

/* Calls fn for every route and status answered at least once, with how many times, in a
 * fixed order: route is "/id", "/ids", "/api/snowflake/get/", "/api/segment/get/" or
 * "other", status 200, 400, 404, 405, 500 or 503. */
typedef void (*sf_http_ids_requests_fn)(const char *route, unsigned status, uint64_t count,
                                        void *ctx);
void sf_http_ids_foreach_requests(sf_http_ids *s, sf_http_ids_requests_fn fn, void *ctx);

/* Calls fn for each route that hands out ids ("http_id", "http_ids", "http_leaf"), with the
 * time its requests took, from the request's arrival at the listener's callback to its
 * answer queued, summed over threads. */
typedef void (*sf_http_ids_timing_fn)(const char *name, const sf_latency_snapshot *timing,
                                      void *ctx);
void sf_http_ids_foreach_timing(sf_http_ids *s, sf_http_ids_timing_fn fn, void *ctx);

#define SF_HTTP_IDS_ERROR (sf_http_ids_error_quark())
GQuark sf_http_ids_error_quark(void);

#endif /* SF_HTTP_IDS_H */
