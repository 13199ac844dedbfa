/* admin_prom.c -- the admin endpoint's /metrics in the Prometheus text format: snowflake_
 * prefix, counters ending in _total, figures kept in milliseconds shown in seconds (the base
 * unit Prometheus asks for: "x_ms" becomes "x_seconds"), per-agent counters as
 * snowflake_<name>_by_agent_total{agent=...}, and the figures of /metrics alone. */
#include "admin_internal.h"

#include <string.h>

/* The name /metrics gives a figure (newly allocated), and whether its value is in ms and is
 * shown in seconds. */
static char *sf_admin_prom_name(const char *name, gboolean *ms)
{
    *ms = g_str_has_suffix(name, "_ms");
    if (!*ms)
        return g_strdup(name);
    return g_strdup_printf("%.*s_seconds", (int)(strlen(name) - 3), name);
}

/* Appends a value, and a newline; one kept in ms (ms) in seconds. */
static void sf_admin_prom_value(GString *out, int64_t v, gboolean ms)
{
    if (!ms)
        g_string_append_printf(out, "%" G_GINT64_FORMAT "\n", v);
    else
        g_string_append_printf(out, "%s%" G_GINT64_FORMAT ".%03d\n", v < 0 ? "-" : "",
                               v < 0 ? -(v / 1000) : v / 1000,
                               (int)(v < 0 ? -(v % 1000) : v % 1000));
}

/* The counters and gauges of /stats.json too. */
static void sf_admin_prom_items(GString *out, const sf_admin_snapshot *snap)
{
    GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    for (guint i = 0; i < snap->items->len; i++) {
        const sf_admin_item *item = &g_array_index(snap->items, sf_admin_item, i);
        gboolean counter = item->kind == SF_ADMIN_COUNTER;
        gboolean by_agent = item->label && !item->label_name;
        gboolean ms;
        char *name = sf_admin_prom_name(item->name, &ms);
        char *metric = g_strdup_printf("snowflake_%s%s%s", name, by_agent ? "_by_agent" : "",
                                       counter ? "_total" : "");
        if (!g_hash_table_contains(seen, metric)) {
            g_string_append_printf(out, "# HELP %s %s\n# TYPE %s %s\n", metric,
                                   item->help ? item->help : item->name, metric,
                                   counter ? "counter" : "gauge");
            g_hash_table_add(seen, g_strdup(metric));
        }
        g_string_append(out, metric);
        if (item->label) {
            const char *labels[] = {by_agent ? "agent" : item->label_name, item->label, NULL};
            sf_admin_prom_labels(out, labels);
        }
        g_string_append_c(out, ' ');
        sf_admin_prom_value(out, item->value, ms);
        g_free(metric);
        g_free(name);
    }
    g_hash_table_unref(seen);
}

/* The timings as the histogram snowflake_request_duration_seconds, one bucket per power of
 * two of nanoseconds: exact sums of the latency histogram's rows. */
static void sf_admin_prom_timings(GString *out, const sf_admin_snapshot *snap)
{
    if (snap->timings->len > 0)
        g_string_append(out, "# HELP snowflake_request_duration_seconds Time from a call's entry "
                             "into the handler to its return, per method\n"
                             "# TYPE snowflake_request_duration_seconds histogram\n");
    for (guint i = 0; i < snap->timings->len; i++) {
        const sf_admin_timing *t = &g_array_index(snap->timings, sf_admin_timing, i);
        uint64_t cumulative = 0;
        for (size_t b = 0; b < SF_LATENCY_BUCKETS - SF_LATENCY_SUB; b++) {
            cumulative += t->figures->buckets[b];
            if ((b + 1) % SF_LATENCY_SUB != 0)
                continue;
            double le = (double)(sf_latency_bucket_upper_ns(b) + 1) / 1e9;
            g_string_append_printf(out,
                                   "snowflake_request_duration_seconds_bucket{method=\"%s\","
                                   "le=\"%g\"} %" G_GUINT64_FORMAT "\n",
                                   t->name, le, cumulative);
        }
        g_string_append_printf(out,
                               "snowflake_request_duration_seconds_bucket{method=\"%s\",le=\"+Inf\"} "
                               "%" G_GUINT64_FORMAT "\n"
                               "snowflake_request_duration_seconds_sum{method=\"%s\"} %.9f\n"
                               "snowflake_request_duration_seconds_count{method=\"%s\"} "
                               "%" G_GUINT64_FORMAT "\n",
                               t->name, t->figures->count, t->name,
                               (double)t->figures->sum_ns / 1e9, t->name, t->figures->count);
    }
}

/* One bucket row of a histogram; bounds in ms are shown in seconds. */
static void sf_admin_prom_bucket(GString *out, const sf_admin_histogram *h, const int64_t *le,
                                 uint64_t cumulative)
{
    gboolean ms;
    char *name = sf_admin_prom_name(h->name, &ms);
    g_string_append_printf(out, "snowflake_%s_bucket{le=\"", name);
    if (le == NULL)
        g_string_append(out, "+Inf");
    else if (ms)
        g_string_append_printf(out, "%g", (double)*le / 1000.0);
    else
        g_string_append_printf(out, "%" G_GINT64_FORMAT, *le);
    g_string_append_printf(out, "\"} %" G_GUINT64_FORMAT "\n", cumulative);
    if (le == NULL)
        g_string_append_printf(out, "snowflake_%s_count %" G_GUINT64_FORMAT "\n", name,
                               cumulative);
    g_free(name);
}

static void sf_admin_prom_histograms(GString *out, const sf_admin_snapshot *snap)
{
    for (guint i = 0; i < snap->histograms->len; i++) {
        const sf_admin_histogram *h = &g_array_index(snap->histograms, sf_admin_histogram, i);
        gboolean ms;
        char *name = sf_admin_prom_name(h->name, &ms);
        g_string_append_printf(out, "# HELP snowflake_%s %s\n# TYPE snowflake_%s histogram\n",
                               name, h->help, name);
        sf_admin_histogram_rows(out, h, sf_admin_prom_bucket);
        g_string_append_printf(out, "snowflake_%s_sum ", name);
        sf_admin_prom_value(out, h->sum, ms);
        g_free(name);
    }
}

/* The figures of /metrics alone: one HELP and TYPE per name, its series following. */
static void sf_admin_prom_metrics(GString *out, const sf_admin_snapshot *snap)
{
    for (guint i = 0; i < snap->metrics->len; i++) {
        const sf_admin_metric *m = &g_array_index(snap->metrics, sf_admin_metric, i);
        if (i == 0 || strcmp(m->name, g_array_index(snap->metrics, sf_admin_metric, i - 1).name))
            g_string_append_printf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help,
                                   m->name, m->kind == SF_ADMIN_COUNTER ? "counter" : "gauge");
        char v[G_ASCII_DTOSTR_BUF_SIZE]; /* 15 digits: Unix time to the ms, exactly */
        g_string_append_printf(out, "%s%s %s\n", m->name, m->labels,
                               g_ascii_formatd(v, sizeof v, "%.15g", m->value));
    }
}

char *sf_admin_render_prometheus(const sf_admin_snapshot *snap)
{
    GString *out = g_string_new(NULL);
    sf_admin_prom_items(out, snap);
    sf_admin_prom_timings(out, snap);
    sf_admin_prom_histograms(out, snap);
    g_string_append_printf(out,
                           "# HELP snowflake_serving 1 while ids are handed out\n"
                           "# TYPE snowflake_serving gauge\nsnowflake_serving %d\n",
                           snap->serving ? 1 : 0);
    sf_admin_prom_metrics(out, snap);
    return g_string_free(out, FALSE);
}
