/* admin_snapshot.c -- the figures one request of the admin endpoint renders, as the daemon
 * hands them over (admin.h: sf_admin_snapshot_*): counters and gauges, timings, histograms,
 * the figures of /metrics alone with their labels kept as Prometheus writes them, the
 * health and the registration's state. Below the renderers and the HTTP side, which only
 * read it. */
#include "admin_internal.h"

/* Appends a Prometheus label value with \, " and newline escaped. */
static void sf_admin_prom_label(GString *out, const char *s)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\' || *p == '"')
            g_string_append_printf(out, "\\%c", *p);
        else if (*p == '\n')
            g_string_append(out, "\\n");
        else
            g_string_append_c(out, *p);
    }
}

void sf_admin_prom_labels(GString *out, const char *const *labels)
{
    if (labels == NULL || labels[0] == NULL)
        return;
    g_string_append_c(out, '{');
    for (size_t i = 0; labels[i] != NULL && labels[i + 1] != NULL; i += 2) {
        g_string_append_printf(out, "%s%s=\"", i ? "," : "", labels[i]);
        sf_admin_prom_label(out, labels[i + 1]);
        g_string_append_c(out, '"');
    }
    g_string_append_c(out, '}');
}

void sf_admin_snapshot_add(sf_admin_snapshot *snap, sf_admin_kind kind, const char *name,
                           const char *label, int64_t value, const char *help)
{
    sf_admin_item item = {kind, g_strdup(name), g_strdup(label), NULL, value, g_strdup(help)};
    g_array_append_val(snap->items, item);
}

void sf_admin_snapshot_add_labelled(sf_admin_snapshot *snap, sf_admin_kind kind,
                                    const char *name, const char *label_name,
                                    const char *label, int64_t value, const char *help)
{
    sf_admin_item item = {kind, g_strdup(name), g_strdup(label), g_strdup(label_name), value,
                          g_strdup(help)};
    g_array_append_val(snap->items, item);
}

void sf_admin_snapshot_add_metric(sf_admin_snapshot *snap, sf_admin_kind kind,
                                  const char *name, const char *const *labels, double value,
                                  const char *help)
{
    GString *l = g_string_new(NULL);
    sf_admin_prom_labels(l, labels);
    sf_admin_metric m = {kind, g_strdup(name), g_strdup(help), g_string_free(l, FALSE), value};
    g_array_append_val(snap->metrics, m);
}

void sf_admin_snapshot_set_state(sf_admin_snapshot *snap, const sf_admin_state *st)
{
    snap->has_state = TRUE;
    snap->state = *st;
    snap->state.reason_code = g_strdup(st->reason_code);
    snap->state.session = g_strdup(st->session);
    snap->state.worker_id_path = g_strdup(st->worker_id_path);
}

void sf_admin_snapshot_add_timing(sf_admin_snapshot *snap, const char *name,
                                  const sf_latency_snapshot *timing)
{
    sf_admin_timing t = {g_strdup(name), g_memdup2(timing, sizeof *timing)};
    g_array_append_val(snap->timings, t);
}

void sf_admin_snapshot_add_histogram(sf_admin_snapshot *snap, const char *name,
                                     const char *help, const int64_t *bounds,
                                     const uint64_t *counts, size_t n, int64_t sum)
{
    sf_admin_histogram h = {g_strdup(name), g_strdup(help), g_memdup2(bounds, n * sizeof *bounds),
                            g_memdup2(counts, (n + 1) * sizeof *counts), n, sum};
    g_array_append_val(snap->histograms, h);
}

/* Frees one histogram (the array's clear function). */
static void sf_admin_histogram_clear(gpointer p)
{
    sf_admin_histogram *h = p;
    g_free(h->name);
    g_free(h->help);
    g_free(h->bounds);
    g_free(h->counts);
}

/* Writes a histogram's cumulative buckets, each as row(out, le or NULL for +Inf, count). */
void sf_admin_histogram_rows(GString *out, const sf_admin_histogram *h,
                             void (*row)(GString *out, const sf_admin_histogram *h,
                                         const int64_t *le, uint64_t cumulative))
{
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= h->n; b++) {
        cumulative += h->counts[b];
        row(out, h, b < h->n ? &h->bounds[b] : NULL, cumulative);
    }
}

void sf_admin_snapshot_set_health(sf_admin_snapshot *snap, gboolean serving, const char *reason)
{
    snap->serving = serving;
    g_free(snap->reason);
    snap->reason = g_strdup(reason);
}

/* Frees one item's strings (the array's clear function). */
static void sf_admin_item_clear(gpointer p)
{
    sf_admin_item *item = p;
    g_free(item->name);
    g_free(item->label);
    g_free(item->label_name);
    g_free(item->help);
}

/* Frees one figure of /metrics alone (the array's clear function). */
static void sf_admin_metric_clear(gpointer p)
{
    sf_admin_metric *m = p;
    g_free(m->name);
    g_free(m->help);
    g_free(m->labels);
}

/* Frees one timing (the array's clear function). */
static void sf_admin_timing_clear(gpointer p)
{
    sf_admin_timing *t = p;
    g_free(t->name);
    g_free(t->figures);
}

sf_admin_snapshot *sf_admin_snapshot_new(void)
{
    sf_admin_snapshot *snap = g_new0(sf_admin_snapshot, 1);
    snap->items = g_array_new(FALSE, FALSE, sizeof(sf_admin_item));
    g_array_set_clear_func(snap->items, sf_admin_item_clear);
    snap->timings = g_array_new(FALSE, FALSE, sizeof(sf_admin_timing));
    g_array_set_clear_func(snap->timings, sf_admin_timing_clear);
    snap->histograms = g_array_new(FALSE, FALSE, sizeof(sf_admin_histogram));
    g_array_set_clear_func(snap->histograms, sf_admin_histogram_clear);
    snap->metrics = g_array_new(FALSE, FALSE, sizeof(sf_admin_metric));
    g_array_set_clear_func(snap->metrics, sf_admin_metric_clear);
    snap->serving = TRUE;
    return snap;
}

void sf_admin_snapshot_free(sf_admin_snapshot *snap)
{
    g_array_free(snap->items, TRUE);
    g_array_free(snap->timings, TRUE);
    g_array_free(snap->histograms, TRUE);
    g_array_free(snap->metrics, TRUE);
    g_free((char *)snap->state.reason_code);
    g_free((char *)snap->state.session);
    g_free((char *)snap->state.worker_id_path);
    g_free(snap->reason);
    g_free(snap);
}
