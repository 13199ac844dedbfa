/* admin.c -- sf_admin: the HTTP stats and health endpoint on libmicrohttpd: the status page (/)
 * and its icon, /stats.json, /stats.txt (and /stats) (admin_render.c), /metrics
 * (admin_prom.c), /health, /state.json (admin_state.c), /history.json, /ping and
 * /server_info.json. The HTTP side: each request of figures gathers a snapshot
 * (admin_snapshot.c) and answers with one rendering of it. */
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

G_DEFINE_QUARK(sf-admin-error-quark, sf_admin_error)

/* Asks the owner for the current figures. */
static sf_admin_snapshot *sf_admin_collect(sf_admin *a)
{
    sf_admin_snapshot *snap = sf_admin_snapshot_new();
    a->collect(snap, a->ctx);
    return snap;
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
    sf_json_text(out, a->version != NULL ? a->version : "unknown");
    g_string_append(out, ",\"build\":");
    sf_json_text(out, a->build != NULL ? a->build : "unknown");
    g_string_append(out, ",\"commit\":");
    sf_json_text(out, a->commit != NULL ? a->commit : "unknown");
    g_string_append(out, ",\"node\":");
    sf_json_text(out, a->node != NULL ? a->node : "");
    g_mutex_unlock(&a->info_lock);
    GDateTime *start = g_date_time_new_from_unix_utc(a->start_unix_us / G_USEC_PER_SEC);
    char *when = start != NULL ? g_date_time_format_iso8601(start) : g_strdup("unknown");
    g_string_append(out, ",\"start_time\":");
    sf_json_text(out, when);
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
    sf_ratelog_logv(&a->log_limit, G_LOG_LEVEL_WARNING, "admin endpoint: ", fmt, ap);
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
