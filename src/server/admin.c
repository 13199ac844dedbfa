/* admin.c -- sf_admin: the HTTP stats and health endpoint on libmicrohttpd: the status page (/)
 * and its icon, /stats.json, /stats.txt (and /stats), /metrics (admin_prom.c), /health,
 * /state.json (admin_state.c), /history.json, /ping and /server_info.json. */
#define _GNU_SOURCE
#include "admin.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "admin_internal.h"
#include "common/bindaddr.h"
#include "ratelog.h"
#include "status_page.h"

struct sf_admin {
    struct MHD_Daemon *daemon;
    sf_admin_collect_fn collect;
    void *ctx;
    int port;
    gint64 start_unix_us;
    GMutex info_lock; /* guards the strings below: set while requests may be answered */
    char *version, *build, *commit, *node;
    sf_history *history;
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
    snap->metrics = g_array_new(FALSE, FALSE, sizeof(sf_admin_metric));
    g_array_set_clear_func(snap->metrics, sf_admin_metric_clear);
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
    g_array_free(snap->metrics, TRUE);
    g_free((char *)snap->state.reason_code);
    g_free((char *)snap->state.session);
    g_free((char *)snap->state.worker_id_path);
    g_free(snap->reason);
    g_free(snap);
}

void sf_admin_json_string(GString *out, const char *s)
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
    g_string_append(out, ",\"commit\":");
    sf_admin_json_string(out, a->commit != NULL ? a->commit : "unknown");
    g_string_append(out, ",\"node\":");
    sf_admin_json_string(out, a->node != NULL ? a->node : "");
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

/* The figures of a request for them, with what the endpoint itself knows: the build. */
static sf_admin_snapshot *sf_admin_collect_all(sf_admin *a)
{
    sf_admin_snapshot *snap = sf_admin_collect(a);
    g_mutex_lock(&a->info_lock);
    const char *labels[] = {"version", a->version ? a->version : "unknown",
                            "commit", a->commit ? a->commit : "unknown",
                            "build", a->build ? a->build : "unknown", NULL};
    sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "snowflake_build_info", labels, 1,
                                 "Always 1: the version, the commit and the build running");
    g_mutex_unlock(&a->info_lock);
    return snap;
}

/* Answers the paths made from one snapshot of the figures. */
static enum MHD_Result sf_admin_figures(sf_admin *a, struct MHD_Connection *conn,
                                        const char *url)
{
    sf_admin_snapshot *snap = sf_admin_collect_all(a);
    enum MHD_Result ret;
    if (strcmp(url, "/stats.txt") == 0 || strcmp(url, "/stats") == 0) {
        ret = sf_admin_reply(conn, MHD_HTTP_OK, "text/plain", sf_admin_render_text(snap));
    } else if (strcmp(url, "/stats.json") == 0) {
        ret = sf_admin_reply(conn, MHD_HTTP_OK, "application/json", sf_admin_render_json(snap));
    } else if (strcmp(url, "/metrics") == 0) {
        ret = sf_admin_reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4",
                             sf_admin_render_prometheus(snap));
    } else if (strcmp(url, "/state.json") == 0) {
        g_mutex_lock(&a->info_lock);
        char *body = sf_admin_render_state(snap, a->node, g_get_real_time() / 1000);
        g_mutex_unlock(&a->info_lock);
        ret = sf_admin_reply(conn, MHD_HTTP_OK, "application/json", body);
    } else if (snap->serving) {
        ret = sf_admin_reply(conn, MHD_HTTP_OK, "text/plain", g_strdup("serving\n"));
    } else {
        ret = sf_admin_reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                             g_strdup_printf("not serving: %s\n",
                                             snap->reason ? snap->reason : "unknown"));
    }
    sf_admin_snapshot_free(snap);
    return ret;
}

/* The status page's icon (binary, hence not sf_admin_reply). */
static enum MHD_Result sf_admin_icon(struct MHD_Connection *conn)
{
    gsize n;
    void *icon = sf_status_icon(&n);
    if (icon == NULL)
        return sf_admin_reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
                              g_strdup("the icon is missing from this build\n"));
    struct MHD_Response *r = MHD_create_response_from_buffer(n, icon, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        g_free(icon);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "image/x-icon");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "max-age=86400");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
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
    if (strcmp(url, "/favicon.ico") == 0)
        return sf_admin_icon(conn);
    if (strcmp(url, "/history.json") == 0) {
        g_mutex_lock(&a->info_lock);
        sf_history *h = a->history;
        g_mutex_unlock(&a->info_lock);
        if (h != NULL)
            return sf_admin_reply(conn, MHD_HTTP_OK, "application/json",
                                  sf_history_render_json(h));
    }
    static const char *const figures[] = {"/stats.txt", "/stats", "/stats.json", "/metrics",
                                          "/health", "/state.json"};
    for (size_t i = 0; i < G_N_ELEMENTS(figures); i++)
        if (strcmp(url, figures[i]) == 0)
            return sf_admin_figures(a, conn, url);
    return sf_admin_reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
                          g_strdup("not found; try /, /stats.json, /stats.txt, /metrics, /health, "
                                   "/state.json, /history.json, /ping or /server_info.json\n"));
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

void sf_admin_set_server_info(sf_admin *a, const char *version, const char *build,
                              const char *commit, const char *node)
{
    g_mutex_lock(&a->info_lock);
    g_free(a->version);
    g_free(a->build);
    g_free(a->commit);
    g_free(a->node);
    a->version = g_strdup(version);
    a->build = g_strdup(build);
    a->commit = g_strdup(commit);
    a->node = g_strdup(node);
    g_mutex_unlock(&a->info_lock);
}

void sf_admin_set_history(sf_admin *a, sf_history *h)
{
    g_mutex_lock(&a->info_lock);
    a->history = h;
    g_mutex_unlock(&a->info_lock);
}

void sf_admin_stop(sf_admin *a)
{
    if (a == NULL)
        return;
    MHD_stop_daemon(a->daemon);
    g_free(a->version);
    g_free(a->build);
    g_free(a->commit);
    g_free(a->node);
    g_mutex_clear(&a->info_lock);
    g_free(a);
}
