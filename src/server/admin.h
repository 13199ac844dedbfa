/* admin.h -- sf_admin: the HTTP stats and health endpoint on libmicrohttpd: /stats.json, /stats.txt
 * (and /stats), /metrics, /health, /state.json, /history.json, /ping and /server_info.json. */
#ifndef SF_ADMIN_H
#define SF_ADMIN_H

#include <glib.h>
#include <stdint.h>

#include "history.h"
#include "latency.h"

typedef struct sf_admin sf_admin;
typedef struct sf_admin_snapshot sf_admin_snapshot;

typedef enum { SF_ADMIN_COUNTER, SF_ADMIN_GAUGE } sf_admin_kind;

/* Fills snap with the current figures, on an HTTP thread, for each request.
 * The admin module knows nothing of where they come from. */
typedef void (*sf_admin_collect_fn)(sf_admin_snapshot *snap, void *ctx);

/* Adds one figure. name is [a-z_]+ (e.g. "ids_generated"); label, when not
 * NULL, is a user agent: /stats.json shows it as "<name>_<label>", /metrics
 * as snowflake_<name>{agent="<label>"}. help is one line for /metrics. A figure in
 * milliseconds, named <x>_ms, is snowflake_<x>_seconds in /metrics, in seconds. */
void sf_admin_snapshot_add(sf_admin_snapshot *snap, sf_admin_kind kind, const char *name,
                           const char *label, int64_t value, const char *help);

/* Adds one figure with a label of its own, e.g. "path": /metrics shows it as
 * snowflake_<name>{<label_name>="<label>"}, /stats.json and /stats.txt as <name>. */
void sf_admin_snapshot_add_labelled(sf_admin_snapshot *snap, sf_admin_kind kind,
                                    const char *name, const char *label_name,
                                    const char *label, int64_t value, const char *help);

/* Adds a figure of /metrics alone, under its whole name (e.g. "process_open_fds"), with the
 * labels given as name, value, ..., NULL (labels may be NULL). Series of one name are added
 * one after the other. */
void sf_admin_snapshot_add_metric(sf_admin_snapshot *snap, sf_admin_kind kind,
                                  const char *name, const char *const *labels, double value,
                                  const char *help);

/* What /state.json says beside the health: why not serving as a word, since when, the
 * ZooKeeper session, the worker ids left under the path and the clock skew. */
typedef struct sf_admin_state {
    const char *reason_code;    /* e.g. "zookeeper_unreachable"; "none" while serving */
    int64_t since_ms;           /* Unix ms: serving, or not, since then; 0 = unknown */
    const char *session;        /* the ZooKeeper session's state; NULL standalone */
    const char *worker_id_path; /* NULL standalone */
    int64_t worker_ids_taken;   /* -1 = not counted yet */
    int64_t worker_ids_total;   /* how many the path holds */
    gboolean worker_ids_current; /* FALSE while the count may be stale (no session) */
    gboolean skew_known;        /* the live clock check has an estimate: skew_ms */
    int64_t skew_ms;
    int start_tries;            /* while the start tries: the try under way or last failed;
                                 * 0 once it started (or before its first try) */
    int64_t next_try_ms;        /* Unix ms of its next try while it waits; 0 = none */
} sf_admin_state;

/* Sets what /state.json says (strings copied). */
void sf_admin_snapshot_set_state(sf_admin_snapshot *snap, const sf_admin_state *st);

/* Adds the timings of one method (name is [a-z_]+, e.g. "get_id"): /stats.json shows them
 * under "timings" and "metrics" as the original's admin service did (count, average,
 * minimum, maximum, p25 .. p9999, in microseconds rounded up), /metrics as the histogram
 * snowflake_request_duration_seconds{method="<name>"}. */
void sf_admin_snapshot_add_timing(sf_admin_snapshot *snap, const char *name,
                                  const sf_latency_snapshot *timing);

/* Adds a histogram (name is [a-z_]+, e.g. "peer_clock_offset_ms") of n buckets: counts[i]
 * values at most bounds[i] (and above bounds[i - 1]), counts[n] those above bounds[n - 1];
 * sum of them all. /metrics shows it as the Prometheus histogram snowflake_<name> (le in the
 * bounds' unit; a name ending in _ms ends in _seconds there, its bounds and sum in seconds),
 * /stats.txt as "<name>: (le_<bound>=<cumulative count>, ..., count=, sum=)". */
void sf_admin_snapshot_add_histogram(sf_admin_snapshot *snap, const char *name,
                                     const char *help, const int64_t *bounds,
                                     const uint64_t *counts, size_t n, int64_t sum);

/* Sets the health answer: serving, or not with a reason. */
void sf_admin_snapshot_set_health(sf_admin_snapshot *snap, gboolean serving,
                                  const char *reason);

/* Starts serving on bind_address:port (port 0 = any free port). Returns NULL
 * with *error set, naming the address, when it cannot listen. */
sf_admin *sf_admin_start(const char *bind_address, int port, sf_admin_collect_fn collect,
                         void *ctx, GError **error);

/* The port actually bound. */
int sf_admin_port(const sf_admin *a);

/* Sets what /server_info.json says besides the start time: the version, the build, the
 * commit built and the node's address (host:port of its Thrift port), which the status page
 * shows (strings copied); also snowflake_build_info in /metrics. */
void sf_admin_set_server_info(sf_admin *a, const char *version, const char *build,
                              const char *commit, const char *node);

/* Serves h (not owned; it must outlive the endpoint) at /history.json. */
void sf_admin_set_history(sf_admin *a, sf_history *h);

/* Stops the daemon and frees everything. NULL is allowed. */
void sf_admin_stop(sf_admin *a);

#define SF_ADMIN_ERROR (sf_admin_error_quark())
GQuark sf_admin_error_quark(void);

#endif /* SF_ADMIN_H */
