/* admin_render.c -- /stats.json and /stats.txt (and /stats) in the original admin service's
 * shapes, rendered from a snapshot (admin_snapshot.c). */
#include "admin_internal.h"

/* The percentiles of a timing, named as the original's admin service named them. */
static const struct {
    const char *name;
    double q;
} sf_admin_percentiles[] = {{"p25", 0.25}, {"p50", 0.5},   {"p75", 0.75},   {"p90", 0.9},
                            {"p95", 0.95}, {"p99", 0.99}, {"p999", 0.999}, {"p9999", 0.9999}};

/* One cumulative bucket of a histogram in /stats.txt. */
static void sf_admin_histogram_text_row(GString *out, const sf_admin_histogram *h,
                                        const int64_t *le, uint64_t cumulative)
{
    (void)h;
    if (le != NULL)
        g_string_append_printf(out, "le_%" G_GINT64_FORMAT "=%" G_GUINT64_FORMAT ", ", *le,
                               cumulative);
    else
        g_string_append_printf(out, "count=%" G_GUINT64_FORMAT ", ", cumulative);
}

/* The key of an item as /stats.json and /stats.txt show it, newly allocated. */
static char *sf_admin_item_key(const sf_admin_item *item)
{
    return item->label && !item->label_name ? g_strdup_printf("%s_%s", item->name, item->label)
                                            : g_strdup(item->name);
}

/* Nanoseconds as whole microseconds, rounded up so that a call that took any time
 * never reads 0. */
static uint64_t sf_admin_us(uint64_t ns)
{
    return ns / 1000 + (ns % 1000 != 0);
}

/* The figures of one timing as name=value pairs in the original's order (keys sorted),
 * each through emit. */
static void sf_admin_timing_fields(const sf_latency_snapshot *f,
                                   void (*emit)(GString *, const char *, uint64_t, gboolean),
                                   GString *out)
{
    emit(out, "average", f->count ? sf_admin_us(f->sum_ns / f->count) : 0, TRUE);
    emit(out, "count", f->count, FALSE);
    emit(out, "maximum", sf_admin_us(f->max_ns), FALSE);
    emit(out, "minimum", f->count ? sf_admin_us(f->min_ns) : 0, FALSE);
    for (size_t i = 0; i < G_N_ELEMENTS(sf_admin_percentiles); i++)
        emit(out, sf_admin_percentiles[i].name,
             sf_admin_us(sf_latency_percentile(f, sf_admin_percentiles[i].q)), FALSE);
}

static void sf_admin_json_field(GString *out, const char *key, uint64_t v, gboolean first)
{
    g_string_append_printf(out, "%s\"%s\":%" G_GUINT64_FORMAT, first ? "" : ",", key, v);
}

static void sf_admin_text_field(GString *out, const char *key, uint64_t v, gboolean first)
{
    g_string_append_printf(out, "%s%s=%" G_GUINT64_FORMAT, first ? "" : ", ", key, v);
}

/* The timings as a JSON object, {"get_id":{"average":..,...},...}. */
static void sf_admin_json_timings(GString *out, const sf_admin_snapshot *snap)
{
    g_string_append_c(out, '{');
    for (guint i = 0; i < snap->timings->len; i++) {
        const sf_admin_timing *t = &g_array_index(snap->timings, sf_admin_timing, i);
        if (i > 0)
            g_string_append_c(out, ',');
        sf_json_text(out, t->name);
        g_string_append(out, ":{");
        sf_admin_timing_fields(t->figures, sf_admin_json_field, out);
        g_string_append_c(out, '}');
    }
    g_string_append_c(out, '}');
}

/* /stats.json in the original admin service's shape: counters and gauges
 * objects, per-agent counters named <name>_<agent>, and the timings under both
 * the old name ("timings") and the newer one ("metrics"). */
char *sf_admin_render_json(const sf_admin_snapshot *snap)
{
    GString *out = g_string_new("{");
    const sf_admin_kind kinds[2] = {SF_ADMIN_COUNTER, SF_ADMIN_GAUGE};
    const char *titles[2] = {"counters", "gauges"};
    for (int k = 0; k < 2; k++) {
        g_string_append_printf(out, "%s\"%s\":{", k ? "," : "", titles[k]);
        gboolean first = TRUE;
        for (guint i = 0; i < snap->items->len; i++) {
            const sf_admin_item *item = &g_array_index(snap->items, sf_admin_item, i);
            if (item->kind != kinds[k])
                continue;
            char *key = sf_admin_item_key(item);
            if (!first)
                g_string_append_c(out, ',');
            first = FALSE;
            sf_json_text(out, key);
            g_string_append_printf(out, ":%" G_GINT64_FORMAT, item->value);
            g_free(key);
        }
        g_string_append_c(out, '}');
    }
    g_string_append(out, ",\"timings\":");
    sf_admin_json_timings(out, snap);
    g_string_append(out, ",\"metrics\":");
    sf_admin_json_timings(out, snap);
    g_string_append(out, ",\"serving\":");
    g_string_append(out, snap->serving ? "true" : "false");
    g_string_append(out, "}\n");
    return g_string_free(out, FALSE);
}

/* /stats.txt (and /stats) in the original admin service's text shape:
 *   counters:
 *     ids_generated: 5
 *   timings:
 *     get_id: (average=3, count=5, ...) */
char *sf_admin_render_text(const sf_admin_snapshot *snap)
{
    GString *out = g_string_new(NULL);
    const sf_admin_kind kinds[2] = {SF_ADMIN_COUNTER, SF_ADMIN_GAUGE};
    const char *titles[2] = {"counters", "gauges"};
    for (int k = 0; k < 2; k++) {
        g_string_append_printf(out, "%s:\n", titles[k]);
        for (guint i = 0; i < snap->items->len; i++) {
            const sf_admin_item *item = &g_array_index(snap->items, sf_admin_item, i);
            if (item->kind != kinds[k])
                continue;
            char *key = sf_admin_item_key(item);
            g_string_append_printf(out, "  %s: %" G_GINT64_FORMAT "\n", key, item->value);
            g_free(key);
        }
    }
    g_string_append(out, "timings:\n");
    for (guint i = 0; i < snap->timings->len; i++) {
        const sf_admin_timing *t = &g_array_index(snap->timings, sf_admin_timing, i);
        g_string_append_printf(out, "  %s: (", t->name);
        sf_admin_timing_fields(t->figures, sf_admin_text_field, out);
        g_string_append(out, ")\n");
    }
    g_string_append(out, "histograms:\n");
    for (guint i = 0; i < snap->histograms->len; i++) {
        const sf_admin_histogram *h = &g_array_index(snap->histograms, sf_admin_histogram, i);
        g_string_append_printf(out, "  %s: (", h->name);
        sf_admin_histogram_rows(out, h, sf_admin_histogram_text_row);
        g_string_append_printf(out, "sum=%" G_GINT64_FORMAT ")\n", h->sum);
    }
    return g_string_free(out, FALSE);
}
