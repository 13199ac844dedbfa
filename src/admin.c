/* admin.c -- sf_admin: the HTTP stats and health endpoint (/stats.json, /metrics, /health) on libmicrohttpd. */
#define _GNU_SOURCE
#include "admin.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

typedef struct sf_admin_item {
    sf_admin_kind kind;
    char *name;
    char *label;
    int64_t value;
    char *help;
} sf_admin_item;

struct sf_admin_snapshot {
    GArray *items; /* sf_admin_item */
    gboolean serving;
    char *reason;
};

struct sf_admin {
    struct MHD_Daemon *daemon;
    sf_admin_collect_fn collect;
    void *ctx;
    int port;
};

G_DEFINE_QUARK(sf-admin-error-quark, sf_admin_error)

void sf_admin_snapshot_add(sf_admin_snapshot *snap, sf_admin_kind kind, const char *name,
                           const char *label, int64_t value, const char *help)
{
    sf_admin_item item = {kind, g_strdup(name), g_strdup(label), value, g_strdup(help)};
    g_array_append_val(snap->items, item);
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
    g_free(item->help);
}

/* Asks the owner for the current figures. */
static sf_admin_snapshot *sf_admin_collect(sf_admin *a)
{
    sf_admin_snapshot *snap = g_new0(sf_admin_snapshot, 1);
    snap->items = g_array_new(FALSE, FALSE, sizeof(sf_admin_item));
    g_array_set_clear_func(snap->items, sf_admin_item_clear);
    snap->serving = TRUE;
    a->collect(snap, a->ctx);
    return snap;
}

/* Frees a snapshot. */
static void sf_admin_snapshot_free(sf_admin_snapshot *snap)
{
    g_array_free(snap->items, TRUE);
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

/* /stats.json in the original admin service's shape: counters and gauges
 * objects, per-agent counters named <name>_<agent>. */
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
            char *key = item->label ? g_strdup_printf("%s_%s", item->name, item->label)
                                    : g_strdup(item->name);
            if (!first)
                g_string_append_c(out, ',');
            first = FALSE;
            sf_admin_json_string(out, key);
            g_string_append_printf(out, ":%" G_GINT64_FORMAT, item->value);
            g_free(key);
        }
        g_string_append_c(out, '}');
    }
    g_string_append(out, ",\"serving\":");
    g_string_append(out, snap->serving ? "true" : "false");
    g_string_append(out, "}\n");
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
        char *metric = g_strdup_printf("snowflake_%s%s%s", item->name,
                                       item->label ? "_by_agent" : "", counter ? "_total" : "");
        if (!g_hash_table_contains(seen, metric)) {
            g_string_append_printf(out, "# HELP %s %s\n# TYPE %s %s\n", metric,
                                   item->help ? item->help : item->name, metric,
                                   counter ? "counter" : "gauge");
            g_hash_table_add(seen, g_strdup(metric));
        }
        g_string_append(out, metric);
        if (item->label) {
            g_string_append(out, "{agent=\"");
            sf_admin_prom_label(out, item->label);
            g_string_append(out, "\"}");
        }
        g_string_append_printf(out, " %" G_GINT64_FORMAT "\n", item->value);
        g_free(metric);
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

/* Routes a request: GET or HEAD of the three paths, 404 otherwise. */
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
    if (strcmp(url, "/stats.json") == 0 || strcmp(url, "/metrics") == 0 ||
        strcmp(url, "/health") == 0) {
        sf_admin_snapshot *snap = sf_admin_collect(a);
        enum MHD_Result ret;
        if (strcmp(url, "/stats.json") == 0)
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
                          g_strdup("not found; try /stats.json, /metrics or /health\n"));
}

sf_admin *sf_admin_start(const char *bind_address, int port, sf_admin_collect_fn collect,
                         void *ctx, GError **error)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(bind_address, service, &hints, &res);
    if (rc != 0) {
        g_set_error(error, SF_ADMIN_ERROR, 0,
                    "admin bind address \"%s\" is not a numeric IPv4 or IPv6 address: %s",
                    bind_address, gai_strerror(rc));
        return NULL;
    }
    sf_admin *a = g_new0(sf_admin, 1);
    a->collect = collect;
    a->ctx = ctx;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (res->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    a->daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, sf_admin_request, a,
                                 MHD_OPTION_SOCK_ADDR, res->ai_addr,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    freeaddrinfo(res);
    if (a->daemon == NULL) {
        g_set_error(error, SF_ADMIN_ERROR, 0,
                    "cannot serve the admin endpoint on %s:%d (is the port in use?)",
                    bind_address, port);
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

void sf_admin_stop(sf_admin *a)
{
    if (a == NULL)
        return;
    MHD_stop_daemon(a->daemon);
    g_free(a);
}
