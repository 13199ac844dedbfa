/* metrics.h -- gathers the daemon's figures for the admin endpoint. */
#ifndef SF_METRICS_H
#define SF_METRICS_H

#include "admin.h"
#include "audit.h"
#include "handler.h"
#include "http_ids.h"
#include "server.h"
#include "zk/snowflake_zk.h"

/* Adds every counter and gauge of the handler, the server and the audit log (which may be
 * NULL when there is none) to snap, the live clock check's figures (skew: NULL when
 * standalone), and the health the handler's gate says. */
void sf_metrics_collect(sf_admin_snapshot *snap, SfHandler *handler, sf_server *server,
                        sf_audit *audit, const sfz_skew *skew);

/* Adds the lease renewals' figures of a registered node: their round trips as the histogram
 * snowflake_zookeeper_renewal_seconds, the failed ones, and the session timeout they are
 * judged by, snowflake_zookeeper_session_timeout_seconds (the lease holds through round trips
 * up to 7/32 of it). */
void sf_metrics_add_renewals(sf_admin_snapshot *snap, const sfz_renewals *renewals);

/* Adds the HTTP ids port's figures, none while it is off (http NULL): its counters and
 * gauges (http_port among them), snowflake_http_requests_total{route,status} in /metrics,
 * and its id routes' timings beside the Thrift methods'. */
void sf_metrics_add_http(sf_admin_snapshot *snap, sf_http_ids *http);

#endif /* SF_METRICS_H */
