/* metrics.c -- every figure the admin endpoint shows (/metrics, /stats, /health), gathered
 * from the handler, the server and the audit log into one snapshot. The names and help
 * texts are the ones operators' dashboards and rules use: change them only with those. */
#include "metrics.h"

#include "procstats.h"

/* Remembers each agent's count in the admin snapshot. */
static void sf_metrics_add_agent(const char *agent, uint64_t count, void *ctx)
{
    sf_admin_snapshot_add(ctx, SF_ADMIN_COUNTER, "ids_generated", agent, (int64_t)count,
                          "Ids handed out, per user agent");
}

/* Hands each method's timings to the admin snapshot. */
static void sf_metrics_add_timing(const char *method, const sf_latency_snapshot *timing, void *ctx)
{
    sf_admin_snapshot_add_timing(ctx, method, timing);
}

/* The live clock check's figures: the skew estimate, its inputs, and the offsets' histogram. */
static void sf_metrics_add_skew(sf_admin_snapshot *snap, const sfz_skew *skew)
{
    static const int64_t bounds[SFZ_SKEW_BUCKETS] = SFZ_SKEW_BOUNDS_MS;
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "peer_clock_skew_ms", NULL, skew->skew_ms,
                          "Our clock minus the peers' (median of the last round, ours "
                          "included), in seconds");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "peer_clock_known", NULL, skew->known,
                          "1 once a peer answered the live clock check");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "peer_clock_peers", NULL, skew->peers,
                          "Peers that answered the last round of the live clock check");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "peer_clock_fenced", NULL, skew->fenced,
                          "1 while ids are refused: the skew is past max_peer_skew_ms");
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, "peer_clock_samples", NULL,
                          (int64_t)skew->samples, "Peers' clocks read by the live clock check");
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, "peer_clock_failures", NULL,
                          (int64_t)skew->failures, "Peers that did not answer the live clock "
                          "check");
    sf_admin_snapshot_add_histogram(snap, "peer_clock_offset_ms", "Our clock minus a peer's, "
                                    "corrected by half the round trip, in seconds", bounds,
                                    skew->buckets, SFZ_SKEW_BUCKETS, skew->sum_ms);
}

/* The process's own figures, as every Prometheus client names them. */
static void sf_metrics_add_process(sf_admin_snapshot *snap)
{
    sf_procstats ps;
    sf_procstats_read(&ps);
    sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "process_start_time_seconds", NULL,
                                 ps.start_time_s, "Start time of the process since the Unix "
                                 "epoch in seconds");
    sf_admin_snapshot_add_metric(snap, SF_ADMIN_COUNTER, "process_cpu_seconds_total", NULL,
                                 ps.cpu_seconds, "Total user and system CPU time spent in "
                                 "seconds");
    if (ps.open_fds >= 0)
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "process_open_fds", NULL,
                                     (double)ps.open_fds, "Number of open file descriptors");
    if (ps.max_fds >= 0)
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "process_max_fds", NULL,
                                     (double)ps.max_fds, "Maximum number of open file "
                                     "descriptors");
    if (ps.resident_bytes >= 0) {
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "process_resident_memory_bytes",
                                     NULL, (double)ps.resident_bytes,
                                     "Resident memory size in bytes");
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "process_virtual_memory_bytes",
                                     NULL, (double)ps.virtual_bytes,
                                     "Virtual memory size in bytes");
    }
}

/* Why not serving, as a state set of every reason (1 for the one in force, none while
 * serving), since when, and the ZooKeeper session's figures when registered; and what
 * /state.json says. */
static void sf_metrics_add_health(sf_admin_snapshot *snap, SfHandler *handler,
                                  const sf_handler_stats *hs, const sfz_skew *skew)
{
    sfz_health health;
    gboolean registered = sf_handler_get_health(handler, &health);
    for (int r = SFZ_REASON_NONE + 1; r < SFZ_REASONS; r++) {
        const char *labels[] = {"reason", sfz_reason_name(r), NULL};
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "snowflake_not_serving_reason",
                                     labels, health.reason == r,
                                     "1 for the reason ids are refused now (all 0 while "
                                     "serving)");
    }
    if (health.since_ms > 0)
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE,
                                     "snowflake_state_since_timestamp_seconds", NULL,
                                     (double)health.since_ms / 1000.0,
                                     "Unix time the node last began or stopped serving");
    if (registered) {
        for (int st = 0; st < SFZ_SESSIONS; st++) {
            const char *labels[] = {"state", sfz_session_name(st), NULL};
            sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE,
                                         "snowflake_zookeeper_session_state", labels,
                                         health.session == st, "1 for the ZooKeeper "
                                         "session's state now");
        }
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_COUNTER,
                                     "snowflake_zookeeper_reconnects_total", NULL,
                                     (double)health.reconnects, "Connections to ZooKeeper "
                                     "that came up again after the first");
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_COUNTER,
                                     "snowflake_zookeeper_sessions_expired_total", NULL,
                                     (double)health.sessions_expired, "ZooKeeper sessions "
                                     "expired (or whose credential was refused)");
        sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "snowflake_start_tries", NULL,
                                     (double)health.start_tries, "Tries of the start so far "
                                     "while it tries again (ZooKeeper unreachable, every "
                                     "worker id taken, ...); 0 once started");
    }
    sf_admin_state st = {
        .reason_code = sfz_reason_name(health.reason),
        .since_ms = health.since_ms,
        .session = registered ? sfz_session_name(health.session) : NULL,
        .worker_id_path = hs->worker_ids_taken >= 0 ? hs->worker_id_path : NULL,
        .worker_ids_taken = hs->worker_ids_taken,
        .worker_ids_total = SF_MAX_WORKER_ID + 1,
        .worker_ids_current = registered && health.session == SFZ_SESSION_CONNECTED,
        .skew_known = skew != NULL && skew->known,
        .skew_ms = skew != NULL ? skew->skew_ms : 0,
        .start_tries = health.start_tries,
        .next_try_ms = health.next_try_ms,
    };
    sf_admin_snapshot_set_state(snap, &st);
}

void sf_metrics_add_renewals(sf_admin_snapshot *snap, const sfz_renewals *rn)
{
    static const int64_t bounds[SFZ_RENEWAL_BUCKETS] = SFZ_RENEWAL_BOUNDS_MS;
    sf_admin_snapshot_add_histogram(snap, "zookeeper_renewal_ms", "Round trip of each lease "
                                    "renewal, from sending it to the confirmation of "
                                    "ZooKeeper's leader", bounds, rn->buckets,
                                    SFZ_RENEWAL_BUCKETS, rn->sum_ms);
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, "zookeeper_renewal_failures", NULL,
                          (int64_t)rn->failed, "Lease renewals that got no confirmation");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "zookeeper_session_timeout_ms", NULL,
                          rn->session_timeout_ms, "Session timeout T ZooKeeper granted: the "
                          "lease holds through renewal round trips up to 7T/32");
}

void sf_metrics_collect(sf_admin_snapshot *snap, SfHandler *handler, sf_server *server,
                        sf_audit *audit, const sfz_skew *skew)
{
    sf_handler_stats hs;
    sf_server_stats ss;
    sf_audit_stats as;
    sf_handler_get_stats(handler, &hs);
    sf_server_get_stats(server, &ss);
    sf_audit_get_stats(audit, &as);
    const struct {
        const char *name;
        uint64_t value;
        const char *help;
    } counters[] = {
#define SF_HANDLER_ROW(name, help) { #name, hs.name, help },
#define SF_SERVER_ROW(name, help) { #name, ss.name, help },
        SF_HANDLER_COUNTERS(SF_HANDLER_ROW)
        SF_HANDLER_DERIVED_COUNTERS(SF_HANDLER_ROW)
        SF_SERVER_COUNTERS(SF_SERVER_ROW)
#undef SF_HANDLER_ROW
#undef SF_SERVER_ROW
#define SF_AUDIT_ROW(name, help) { #name, as.name, help },
        SF_AUDIT_COUNTERS(SF_AUDIT_ROW)
#undef SF_AUDIT_ROW
        { "scribe_enqueue_failures", as.audit_dropped, "The original's name for audit_dropped" },
    };
    for (size_t i = 0; i < G_N_ELEMENTS(counters); i++)
        sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, counters[i].name, NULL,
                              (int64_t)counters[i].value, counters[i].help);
    sf_handler_foreach_agent(handler, sf_metrics_add_agent, snap);
    sf_handler_foreach_timing(handler, sf_metrics_add_timing, snap);
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "worker_id", NULL, hs.worker_id,
                          "Worker id in use, -1 = none");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "datacenter_id", NULL, hs.datacenter_id,
                          "Datacenter id in use, -1 = none");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "connections", NULL, (int64_t)ss.connections_open,
                          "Thrift connections open");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "listening", NULL, ss.listening ? 1 : 0,
                          "1 while the Thrift port accepts connections");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "audit_queue_length", NULL, (int64_t)as.queued,
                          "Audit entries waiting for the sink");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "output_buffered_bytes", NULL,
                          (int64_t)ss.output_buffered, "Bytes of replies waiting unsent");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "useragents_tracked", NULL,
                          (int64_t)hs.useragents_tracked,
                          "User agents counted by name (at most max_tracked_useragents)");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "useragents_untracked", NULL,
                          (int64_t)hs.useragents_untracked,
                          "Distinct user agents beyond max_tracked_useragents, estimated");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "max_connections", NULL,
                          (int64_t)ss.max_connections,
                          "Thrift connections open at most (max_connections, as fitted)");
    if (audit != NULL)
        sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "audit_queue_size", NULL,
                              (int64_t)as.queue_size, "Audit entries that may wait at most");
    if (hs.worker_ids_taken >= 0) {
        sf_admin_snapshot_add_labelled(snap, SF_ADMIN_GAUGE, "worker_ids_taken", "path",
                                       hs.worker_id_path, hs.worker_ids_taken,
                                       "Worker ids held by any holder under the path");
        sf_admin_snapshot_add_labelled(snap, SF_ADMIN_GAUGE, "worker_ids_free", "path",
                                       hs.worker_id_path, SF_MAX_WORKER_ID + 1 - hs.worker_ids_taken,
                                       "Worker ids free under the path");
    }
    if (skew != NULL)
        sf_metrics_add_skew(snap, skew);
    sf_metrics_add_health(snap, handler, &hs, skew);
    sf_metrics_add_process(snap);
    char *reason = NULL;
    gboolean serving = sf_handler_is_serving(handler, &reason);
    sf_admin_snapshot_set_health(snap, serving, reason);
    g_free(reason);
}

/* Adds one route and status's count of HTTP requests to the snapshot. */
static void sf_metrics_add_http_requests(const char *route, unsigned status, uint64_t count,
                                         void *ctx)
{
    char code[8];
    g_snprintf(code, sizeof code, "%u", status);
    const char *labels[] = {"route", route, "status", code, NULL};
    sf_admin_snapshot_add_metric(ctx, SF_ADMIN_COUNTER, "snowflake_http_requests_total", labels,
                                 (double)count, "HTTP ids requests answered, by route and status");
}

void sf_metrics_add_http(sf_admin_snapshot *snap, sf_http_ids *http)
{
    sf_http_ids_stats hs;
    if (http == NULL)
        return;
    sf_http_ids_get_stats(http, &hs);
#define SF_HTTP_COUNTER(name, help) \
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, #name, NULL, (int64_t)hs.name, help);
#define SF_HTTP_GAUGE(name, help) \
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, #name, NULL, (int64_t)hs.name, help);
    SF_HTTP_IDS_GAUGES(SF_HTTP_GAUGE)
    SF_HTTP_IDS_COUNTERS(SF_HTTP_COUNTER)
#undef SF_HTTP_COUNTER
#undef SF_HTTP_GAUGE
    sf_http_ids_foreach_timing(http, sf_metrics_add_timing, snap);
    sf_http_ids_foreach_requests(http, sf_metrics_add_http_requests, snap);
}
