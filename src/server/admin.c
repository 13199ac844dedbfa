/* admin.c -- sf_admin: the HTTP stats and health endpoint on libmicrohttpd: the status page (/),
 * /stats.json, /stats.txt (and /stats), /metrics, /health, /ping and /server_info.json. */
#define _GNU_SOURCE
#include "admin.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "admin_value.h"
#include "common/bindaddr.h"
#include "ratelog.h"
#include "status_page.h"

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

struct sf_admin_snapshot {
    GArray *items;   /* sf_admin_item */
    GArray *timings; /* sf_admin_timing */
    GArray *histograms; /* sf_admin_histogram */
    gboolean serving;
    char *reason;
};

struct sf_admin {
    struct MHD_Daemon *daemon;
    sf_admin_collect_fn collect;
    void *ctx;
    int port;
    gint64 start_unix_us;
    GMutex info_lock; /* guards version and build: set while requests may be answered */
    char *version, *build;
    sf_ratelog log_limit; /* the library's error lines, e.g. accept() out of descriptors */
};

/* The percentiles of a timing, named as the original's admin service named them. */
static const struct {
    const char *name;
    double q;
} sf_admin_percentiles[] = {{"p25", 0.25}, {"p50", 0.5},   {"p75", 0.75},   {"p90", 0.9},
                            {"p95", 0.95}, {"p99", 0.99}, {"p999", 0.999}, {"p9999", 0.9999}};

G_DEFINE_QUARK(sf-admin-error-quark, sf_admin_error)

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
static void sf_admin_histogram_rows(GString *out, const sf_admin_histogram *h,
                                    void (*row)(GString *out, const sf_admin_histogram *h,
                                                const int64_t *le, uint64_t cumulative))
{
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= h->n; b++) {
        cumulative += h->counts[b];
        row(out, h, b < h->n ? &h->bounds[b] : NULL, cumulative);
    }
}

static void sf_admin_histogram_text_row(GString *out, const sf_admin_histogram *h,
                                        const int64_t *le, uint64_t cumulative)
{
    char v[SF_ADMIN_VALUE_MAX];
    if (le != NULL)
        g_string_append_printf(out, "le_%s=%" G_GUINT64_FORMAT ", ",
                               sf_admin_value(h->name, *le, v), cumulative);
    else
        g_string_append_printf(out, "count=%" G_GUINT64_FORMAT ", ", cumulative);
}

static void sf_admin_histogram_prom_row(GString *out, const sf_admin_histogram *h,
                                        const int64_t *le, uint64_t cumulative)
{
    char v[SF_ADMIN_VALUE_MAX];
    if (le != NULL)
        g_string_append_printf(out, "snowflake_%s_bucket{le=\"%s\"} %" G_GUINT64_FORMAT "\n",
                               h->name, sf_admin_value(h->name, *le, v), cumulative);
    else
        g_string_append_printf(out, "snowflake_%s_bucket{le=\"+Inf\"} %" G_GUINT64_FORMAT
                               "\nsnowflake_%s_count %" G_GUINT64_FORMAT "\n", h->name,
                               cumulative, h->name, cumulative);
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

/* Frees one timing (the array's clear function). */
static void sf_admin_timing_clear(gpointer p)
{
    sf_admin_timing *t = p;
    g_free(t->name);
    g_free(t->figures);
}

/* Asks the owner for the current figures. */
static sf_admin_snapshot *sf_admin_collect(sf_admin *a)
{
    sf_admin_snapshot *snap = g_new0(sf_admin_snapshot, 1);
    snap->items = g_array_new(FALSE, FALSE, sizeof(sf_admin_item));
    g_array_set_clear_func(snap->items, sf_admin_item_clear);
    snap->timings = g_array_new(FALSE, FALSE, sizeof(sf_admin_timing));
    g_array_set_clear_func(snap->timings, sf_admin_timing_clear);
    snap->histograms = g_array_new(FALSE, FALSE, sizeof(sf_admin_histogram));
    g_array_set_clear_func(snap->histograms, sf_admin_histogram_clear);
    snap->serving = TRUE;
    a->collect(snap, a->ctx);
    return snap;
}

/* Frees a snapshot. */
static void sf_admin_snapshot_free(sf_admin_snapshot *snap)
{
    g_array_free(snap->items, TRUE);
    g_array_free(snap->timings, TRUE);
    g_array_free(snap->histograms, TRUE);
    g_free(snap->reason);
    g_free(snap);
}

/* Appends s as a JSON string literal. */
static void sf_admin_json_string(GString *out, const char *s)
{
    g_string_append_c(out, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            g_string_append_printf(out, "\\%c", *p);
        else if (*p < 0x20)
            g_string_append_printf(out, "\\u%04x", *p);
        else
            g_string_append_c(out, (char)*p);
    }
    g_string_append_c(out, '"');
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
        sf_admin_json_string(out, t->name);
        g_string_append(out, ":{");
        sf_admin_timing_fields(t->figures, sf_admin_json_field, out);
        g_string_append_c(out, '}');
    }
    g_string_append_c(out, '}');
}

/* /stats.json in the original admin service's shape: counters and gauges
 * objects, per-agent counters named <name>_<agent>, and the timings under both
 * the old name ("timings") and the newer one ("metrics"). */
static char *sf_admin_render_json(const sf_admin_snapshot *snap)
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
            sf_admin_json_string(out, key);
            char v[SF_ADMIN_VALUE_MAX];
            g_string_append_printf(out, ":%s", sf_admin_value(item->name, item->value, v));
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
static char *sf_admin_render_text(const sf_admin_snapshot *snap)
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
            char *key = sf_admin_item_key(item), v[SF_ADMIN_VALUE_MAX];
            g_string_append_printf(out, "  %s: %s\n", key,
                                   sf_admin_value(item->name, item->value, v));
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
        char v[SF_ADMIN_VALUE_MAX];
        g_string_append_printf(out, "sum=%s)\n", sf_admin_value(h->name, h->sum, v));
    }
    return g_string_free(out, FALSE);
}

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

/* /metrics in the Prometheus text format: snowflake_ prefix, counters end in
 * _total, per-agent counters become snowflake_<name>_by_agent_total{agent=...}. */
static char *sf_admin_render_prometheus(const sf_admin_snapshot *snap)
{
    GString *out = g_string_new(NULL);
    GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    for (guint i = 0; i < snap->items->len; i++) {
        const sf_admin_item *item = &g_array_index(snap->items, sf_admin_item, i);
        gboolean counter = item->kind == SF_ADMIN_COUNTER;
        gboolean by_agent = item->label && !item->label_name;
        char *metric = g_strdup_printf("snowflake_%s%s%s", item->name,
                                       by_agent ? "_by_agent" : "", counter ? "_total" : "");
        if (!g_hash_table_contains(seen, metric)) {
            g_string_append_printf(out, "# HELP %s %s\n# TYPE %s %s\n", metric,
                                   item->help ? item->help : item->name, metric,
                                   counter ? "counter" : "gauge");
            g_hash_table_add(seen, g_strdup(metric));
        }
        g_string_append(out, metric);
        if (item->label) {
            g_string_append_printf(out, "{%s=\"", by_agent ? "agent" : item->label_name);
            sf_admin_prom_label(out, item->label);
            g_string_append(out, "\"}");
        }
        char v[SF_ADMIN_VALUE_MAX];
        g_string_append_printf(out, " %s\n", sf_admin_value(item->name, item->value, v));
        g_free(metric);
    }
    if (snap->timings->len > 0)
        g_string_append(out, "# HELP snowflake_request_duration_seconds Time from a call's entry "
                             "into the handler to its return, per method\n"
                             "# TYPE snowflake_request_duration_seconds histogram\n");
    for (guint i = 0; i < snap->timings->len; i++) {
        const sf_admin_timing *t = &g_array_index(snap->timings, sf_admin_timing, i);
        /* One bucket per power of two of nanoseconds: exact sums of the histogram's rows. */
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
    for (guint i = 0; i < snap->histograms->len; i++) {
        const sf_admin_histogram *h = &g_array_index(snap->histograms, sf_admin_histogram, i);
        g_string_append_printf(out, "# HELP snowflake_%s %s\n# TYPE snowflake_%s histogram\n",
                               h->name, h->help, h->name);
        sf_admin_histogram_rows(out, h, sf_admin_histogram_prom_row);
        char v[SF_ADMIN_VALUE_MAX];
        g_string_append_printf(out, "snowflake_%s_sum %s\n", h->name,
                               sf_admin_value(h->name, h->sum, v));
    }
    g_string_append_printf(out,
                           "# HELP snowflake_serving 1 while ids are handed out\n"
                           "# TYPE snowflake_serving gauge\nsnowflake_serving %d\n",
                           snap->serving ? 1 : 0);
    g_hash_table_unref(seen);
    return g_string_free(out, FALSE);
}

/* Sends body (taken over) with a status and content type. */
static enum MHD_Result sf_admin_reply(struct MHD_Connection *conn, unsigned status,
                                      const char *type, char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        g_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* /server_info.json: what runs, since when. */
static char *sf_admin_render_info(sf_admin *a)
{
    GString *out = g_string_new("{\"name\":\"snowflaked\",\"version\":");
    g_mutex_lock(&a->info_lock);
    sf_admin_json_string(out, a->version != NULL ? a->version : "unknown");
    g_string_append(out, ",\"build\":");
    sf_admin_json_string(out, a->build != NULL ? a->build : "unknown");
    g_mutex_unlock(&a->info_lock);
    GDateTime *start = g_date_time_new_from_unix_utc(a->start_unix_us / G_USEC_PER_SEC);
    char *when = start != NULL ? g_date_time_format_iso8601(start) : g_strdup("unknown");
    g_string_append(out, ",\"start_time\":");
    sf_admin_json_string(out, when);
    g_string_append_printf(out, ",\"start_time_ms\":%" G_GINT64_FORMAT
                           ",\"uptime_ms\":%" G_GINT64_FORMAT "}\n",
                           a->start_unix_us / 1000, (g_get_real_time() - a->start_unix_us) / 1000);
    g_free(when);
    if (start != NULL)
        g_date_time_unref(start);
    return g_string_free(out, FALSE);
}

/* Routes a request: GET or HEAD of the known paths, 404 otherwise. */
static enum MHD_Result sf_admin_request(void *cls, struct MHD_Connection *conn, const char *url,
                                        const char *method, const char *version,
                                        const char *upload_data, size_t *upload_data_size,
                                        void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    sf_admin *a = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return sf_admin_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
                              g_strdup("only GET and HEAD are allowed\n"));
    if (strcmp(url, "/") == 0)
        return sf_admin_reply(conn, MHD_HTTP_OK, "text/html; charset=utf-8", sf_status_page());
    if (strcmp(url, "/ping") == 0)
        return sf_admin_reply(conn, MHD_HTTP_OK, "text/plain", g_strdup("pong\n"));
    if (strcmp(url, "/server_info.json") == 0)
        return sf_admin_reply(conn, MHD_HTTP_OK, "application/json", sf_admin_render_info(a));
    gboolean text = strcmp(url, "/stats.txt") == 0 || strcmp(url, "/stats") == 0;
    if (text || strcmp(url, "/stats.json") == 0 || strcmp(url, "/metrics") == 0 ||
        strcmp(url, "/health") == 0) {
        sf_admin_snapshot *snap = sf_admin_collect(a);
        enum MHD_Result ret;
        if (text)
            ret = sf_admin_reply(conn, MHD_HTTP_OK, "text/plain", sf_admin_render_text(snap));
        else if (strcmp(url, "/stats.json") == 0)
            ret = sf_admin_reply(conn, MHD_HTTP_OK, "application/json",
                                 sf_admin_render_json(snap));
        else if (strcmp(url, "/metrics") == 0)
            ret = sf_admin_reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4",
                                 sf_admin_render_prometheus(snap));
        else if (snap->serving)
            ret = sf_admin_reply(conn, MHD_HTTP_OK, "text/plain", g_strdup("serving\n"));
        else
            ret = sf_admin_reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                                 g_strdup_printf("not serving: %s\n",
                                                 snap->reason ? snap->reason : "unknown"));
        sf_admin_snapshot_free(snap);
        return ret;
    }
    return sf_admin_reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
                          g_strdup("not found; try /, /stats.json, /stats.txt, /metrics, /health, "
                                   "/ping or /server_info.json\n"));
}

/* Writes libmicrohttpd's error lines to our log at most once a second, with the count
 * held back: out of descriptors it would repeat one for every connection tried. */
static void sf_admin_log(void *cls, const char *fmt, va_list ap)
{
    sf_admin *a = cls;
    uint64_t suppressed;
    if (!sf_ratelog_allow(&a->log_limit, SF_RATELOG_INTERVAL_MS, &suppressed))
        return;
    char *msg = g_strdup_vprintf(fmt, ap);
    g_strchomp(msg);
    char note[64];
    sf_ratelog_note(suppressed, note, sizeof note);
    g_warning("admin endpoint: %s%s", msg, note);
    g_free(msg);
}

sf_admin *sf_admin_start(const char *bind_address, int port, sf_admin_collect_fn collect,
                         void *ctx, GError **error)
{
    struct addrinfo *res = NULL;
    char why[256];
    if (sf_bindaddr_resolve(bind_address, port, &res, why, sizeof why) != 0) {
        g_set_error(error, SF_ADMIN_ERROR, 0, "admin bind address %s", why);
        return NULL;
    }
    sf_admin *a = g_new0(sf_admin, 1);
    a->collect = collect;
    a->ctx = ctx;
    a->start_unix_us = g_get_real_time();
    g_mutex_init(&a->info_lock);
    /* epoll (or poll) chosen by the library: select() cannot watch a socket numbered
     * 1024 or above, which every admin connection is once the Thrift port holds that many. */
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (res->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    a->daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, sf_admin_request, a,
                                 /* the logger first: libmicrohttpd warns otherwise */
                                 MHD_OPTION_EXTERNAL_LOGGER, sf_admin_log, a,
                                 MHD_OPTION_SOCK_ADDR, res->ai_addr,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    freeaddrinfo(res);
    if (a->daemon == NULL) {
        g_set_error(error, SF_ADMIN_ERROR, 0,
                    "cannot serve the admin endpoint on %s:%d (is the port in use?)",
                    bind_address, port);
        g_mutex_clear(&a->info_lock);
        g_free(a);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->daemon, MHD_DAEMON_INFO_BIND_PORT);
    a->port = info != NULL ? info->port : port;
    return a;
}

int sf_admin_port(const sf_admin *a)
{
    return a->port;
}

void sf_admin_set_server_info(sf_admin *a, const char *version, const char *build)
{
    g_mutex_lock(&a->info_lock);
    g_free(a->version);
    g_free(a->build);
    a->version = g_strdup(version);
    a->build = g_strdup(build);
    g_mutex_unlock(&a->info_lock);
}

void sf_admin_stop(sf_admin *a)
{
    if (a == NULL)
        return;
    MHD_stop_daemon(a->daemon);
    g_free(a->version);
    g_free(a->build);
    g_mutex_clear(&a->info_lock);
    g_free(a);
}
