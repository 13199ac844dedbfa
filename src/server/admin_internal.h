/* admin_internal.h -- what the admin endpoint's files share and nothing else sees: the
 * snapshot of figures a request renders (admin_snapshot.c), its renderers (admin_render.c:
 * /stats.json and /stats.txt; admin_prom.c: /metrics; admin_state.c: /state.json) and, above
 * them, the HTTP side (admin.c), which gathers a snapshot per request and answers with one
 * rendering of it. Calls go one way: HTTP to renderers to the snapshot. */
#ifndef SF_ADMIN_INTERNAL_H
#define SF_ADMIN_INTERNAL_H

#include <glib.h>
#include <stdint.h>

#include "admin.h"
#include "json_text.h"
#include "latency.h"

typedef struct sf_admin_item {
    sf_admin_kind kind;
    char *name;
    char *label;
    char *label_name; /* NULL: label is a user agent (see sf_admin_snapshot_add) */
    int64_t value;
    char *help;
} sf_admin_item;

typedef struct sf_admin_timing {
    char *name;
    sf_latency_snapshot *figures;
} sf_admin_timing;

/* A histogram: its buckets' bounds and counts (not cumulative; one more count than bounds). */
typedef struct sf_admin_histogram {
    char *name, *help;
    int64_t *bounds;
    uint64_t *counts;
    size_t n;
    int64_t sum;
} sf_admin_histogram;

/* A figure of /metrics alone (sf_admin_snapshot_add_metric). */
typedef struct sf_admin_metric {
    sf_admin_kind kind;
    char *name, *help;
    char *labels; /* rendered: {a="b",...}, or "" */
    double value;
} sf_admin_metric;

struct sf_admin_snapshot {
    GArray *items;   /* sf_admin_item */
    GArray *timings; /* sf_admin_timing */
    GArray *histograms; /* sf_admin_histogram */
    GArray *metrics; /* sf_admin_metric */
    gboolean serving;
    char *reason;
    gboolean has_state;
    sf_admin_state state; /* its strings our own copies */
};

/* ---- admin_snapshot.c */

/* An empty snapshot (serving until told otherwise), and its end. */
sf_admin_snapshot *sf_admin_snapshot_new(void);
void sf_admin_snapshot_free(sf_admin_snapshot *snap);

/* Writes a histogram's cumulative buckets, each as row(out, le or NULL for +Inf, count). */
void sf_admin_histogram_rows(GString *out, const sf_admin_histogram *h,
                             void (*row)(GString *out, const sf_admin_histogram *h,
                                         const int64_t *le, uint64_t cumulative));

/* Appends name="value" pairs (ending in NULL) as {a="b",...} with the values escaped, as
 * Prometheus writes labels. */
void sf_admin_prom_labels(GString *out, const char *const *labels);

/* ---- the renderers: each returns the body, newly allocated. */

/* admin_render.c: /stats.json and /stats.txt in the original's shapes. */
char *sf_admin_render_json(const sf_admin_snapshot *snap);
char *sf_admin_render_text(const sf_admin_snapshot *snap);

/* /metrics in the Prometheus text format (admin_prom.c). */
char *sf_admin_render_prometheus(const sf_admin_snapshot *snap);

/* /state.json (admin_state.c): the node, the state and its reason, since when, the session,
 * the worker ids left and whether that count is current, the clock skew; now_ms the node's
 * clock when rendered. */
char *sf_admin_render_state(const sf_admin_snapshot *snap, const char *node, int64_t now_ms);

#endif /* SF_ADMIN_INTERNAL_H */
