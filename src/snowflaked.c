/* snowflaked.c -- the Snowflake id server: load settings, listen, register, serve until SIGTERM or SIGINT. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "admin.h"
#include "config.h"
#include "handler.h"
#include "server.h"
#include "snowflake.h"

/* How long a stop may take to flush replies to slow readers. */
#define SF_STOP_TIMEOUT_MS 5000

typedef struct sf_daemon {
    sf_config cfg;
    SfHandler *handler;
    sf_server *server;
    sf_admin *admin;
    int signal_fd;
} sf_daemon;

/* Levels shown, from [snowflake] log_level. */
static GLogLevelFlags sf_log_shown = G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL |
                                     G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE |
                                     G_LOG_LEVEL_INFO;

/* Writes one line to stderr: UTC time, level, message; drops levels the
 * configuration hides. Installed for every domain, the Thrift library's too. */
static void sf_daemon_log(const gchar *domain, GLogLevelFlags level, const gchar *message,
                          gpointer data)
{
    (void)data;
    if (!(level & sf_log_shown))
        return;
    const char *name = (level & G_LOG_LEVEL_ERROR)      ? "ERROR"
                       : (level & G_LOG_LEVEL_CRITICAL) ? "CRITICAL"
                       : (level & G_LOG_LEVEL_WARNING)  ? "WARNING"
                       : (level & G_LOG_LEVEL_DEBUG)    ? "DEBUG"
                                                        : "INFO";
    char when[SF_ISO8601_MAX];
    sf_format_iso8601(sf_clock_now_ms(), when, sizeof when);
    fprintf(stderr, "%s %s %s%s%s\n", when, name, domain ? domain : "", domain ? ": " : "",
            message);
}

/* Maps log_level (error|warning|info|debug) to the levels shown. */
static void sf_daemon_set_log_level(const char *level)
{
    GLogLevelFlags shown = G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL;
    if (strcmp(level, "error") != 0)
        shown |= G_LOG_LEVEL_WARNING;
    if (strcmp(level, "info") == 0 || strcmp(level, "debug") == 0)
        shown |= G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO;
    if (strcmp(level, "debug") == 0)
        shown |= G_LOG_LEVEL_DEBUG;
    sf_log_shown = shown;
    g_log_set_default_handler(sf_daemon_log, NULL);
}

/* Remembers each agent's count in the admin snapshot. */
static void sf_daemon_add_agent(const char *agent, uint64_t count, void *ctx)
{
    sf_admin_snapshot_add(ctx, SF_ADMIN_COUNTER, "ids_generated", agent, (int64_t)count,
                          "Ids handed out, per user agent");
}

/* Gathers the admin figures from the handler and the server. */
static void sf_daemon_collect(sf_admin_snapshot *snap, void *ctx)
{
    sf_daemon *d = ctx;
    sf_handler_stats hs;
    sf_server_stats ss;
    sf_handler_get_stats(d->handler, &hs);
    sf_server_get_stats(d->server, &ss);
    const sf_admin_kind C = SF_ADMIN_COUNTER, G = SF_ADMIN_GAUGE;
    sf_admin_snapshot_add(snap, C, "ids_generated", NULL, (int64_t)hs.ids_generated,
                          "Ids handed out");
    sf_admin_snapshot_add(snap, C, "exceptions", NULL, (int64_t)hs.exceptions,
                          "Declared exceptions thrown to clients");
    sf_admin_snapshot_add(snap, C, "invalid_agent_errors", NULL, (int64_t)hs.agent_errors,
                          "Calls refused for a bad user agent");
    sf_admin_snapshot_add(snap, C, "invalid_request_errors", NULL, (int64_t)hs.request_errors,
                          "get_ids calls refused for their count");
    sf_admin_snapshot_add(snap, C, "unavailable_errors", NULL, (int64_t)hs.unavailable_errors,
                          "Calls refused while not serving");
    sf_admin_snapshot_add(snap, C, "sequence_waits", NULL, (int64_t)hs.sequence_waits,
                          "Waits for the next millisecond after 4096 ids in one");
    sf_admin_snapshot_add(snap, C, "clock_backward_waits", NULL, (int64_t)hs.clock_backward_waits,
                          "Small backward clock steps waited out");
    sf_admin_snapshot_add(snap, C, "clock_backward_errors", NULL,
                          (int64_t)hs.clock_backward_errors,
                          "Ids refused because the clock moved backwards");
    sf_admin_snapshot_add(snap, C, "connections_accepted", NULL,
                          (int64_t)ss.connections_accepted, "Thrift connections accepted");
    sf_admin_snapshot_add(snap, C, "connections_refused", NULL, (int64_t)ss.connections_refused,
                          "Thrift connections refused over max_connections");
    sf_admin_snapshot_add(snap, C, "frames_processed", NULL, (int64_t)ss.frames_processed,
                          "Requests answered");
    sf_admin_snapshot_add(snap, C, "frames_refused", NULL, (int64_t)ss.frames_refused,
                          "Oversized, malformed or truncated frames");
    sf_admin_snapshot_add(snap, C, "idle_timeouts", NULL, (int64_t)ss.idle_timeouts,
                          "Connections closed after idle_timeout_ms");
    sf_admin_snapshot_add(snap, C, "frame_timeouts", NULL, (int64_t)ss.frame_timeouts,
                          "Connections closed after frame_timeout_ms");
    sf_handler_foreach_agent(d->handler, sf_daemon_add_agent, snap);
    sf_admin_snapshot_add(snap, G, "worker_id", NULL, hs.worker_id, "Worker id in use, -1 = none");
    sf_admin_snapshot_add(snap, G, "datacenter_id", NULL, hs.datacenter_id,
                          "Datacenter id in use, -1 = none");
    sf_admin_snapshot_add(snap, G, "connections", NULL, (int64_t)ss.connections_open,
                          "Thrift connections open");
    char *reason = NULL;
    gboolean serving = sf_handler_is_serving(d->handler, &reason);
    sf_admin_snapshot_set_health(snap, serving, reason);
    g_free(reason);
}

/* Routes SIGTERM and SIGINT to a signalfd read by the main loop, so no code
 * runs in a signal handler; must run before any thread starts. */
static gboolean sf_daemon_block_signals(sf_daemon *d)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        return FALSE;
    signal(SIGPIPE, SIG_IGN);
    d->signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
    if (d->signal_fd < 0) {
        g_critical("cannot create a signalfd: %s", g_strerror(errno));
        return FALSE;
    }
    return TRUE;
}

/* Binds the Thrift port and starts answering; ids stay refused (gate
 * closed) until registration opens it. Then starts the admin endpoint. */
static gboolean sf_daemon_listen(sf_daemon *d)
{
    GError *err = NULL;
    d->handler = sf_handler_new(d->cfg.max_batch_size);
    sf_handler_set_serving(d->handler, FALSE, "starting: no worker id registered yet");
    ThriftProcessor *proc =
        g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_PROCESSOR, "handler", d->handler, NULL);
    sf_server_options so;
    sf_server_options_init(&so);
    so.bind_address = d->cfg.bind_address;
    so.port = d->cfg.server_port;
    so.threads = d->cfg.thrift_server_threads;
    so.max_frame_size = d->cfg.max_frame_size;
    so.max_connections = d->cfg.max_connections;
    so.idle_timeout_ms = d->cfg.idle_timeout_ms;
    so.frame_timeout_ms = d->cfg.frame_timeout_ms;
    d->server = sf_server_new(&so, proc, &err);
    g_object_unref(proc);
    if (d->server == NULL || !sf_server_start(d->server, &err)) {
        g_critical("%s", err->message);
        g_error_free(err);
        return FALSE;
    }
    g_message("listening on %s:%d", d->cfg.bind_address, sf_server_port(d->server));
    if (d->cfg.admin_port != 0) {
        d->admin = sf_admin_start(d->cfg.admin_bind_address, d->cfg.admin_port,
                                  sf_daemon_collect, d, &err);
        if (d->admin == NULL) {
            g_critical("%s", err->message);
            g_error_free(err);
            return FALSE;
        }
        g_message("admin endpoint on http://%s:%d/ (/stats.json, /metrics, /health)",
                  d->cfg.admin_bind_address, sf_admin_port(d->admin));
    }
    return TRUE;
}

/* Claims the worker id and opens the gate. Standalone mode (no ZooKeeper
 * hosts) uses the configured ids as they are. */
static gboolean sf_daemon_register(sf_daemon *d)
{
    if (d->cfg.zk_hosts != NULL && d->cfg.zk_hosts[0] != '\0') {
        g_critical("[zookeeper] hosts = '%s': ZooKeeper registration is not available in this "
                   "build; leave hosts empty to run standalone with the configured worker_id",
                   d->cfg.zk_hosts);
        return FALSE;
    }
    sf_worker_options wo;
    sf_error err;
    sf_worker_options_init(&wo);
    wo.datacenter_id = d->cfg.datacenter_id;
    wo.worker_id = d->cfg.worker_id;
    wo.epoch_ms = d->cfg.epoch_ms;
    wo.max_clock_backward_wait_ms = d->cfg.max_clock_backward_wait_ms;
    wo.random_first_sequence = d->cfg.random_first_sequence;
    sf_worker *w = sf_worker_new(&wo, &err);
    if (w == NULL) {
        g_critical("cannot create the id worker: %s", err.message);
        return FALSE;
    }
    g_message("worker starting. timestamp left shift %d, datacenter id bits %d, worker id bits "
              "%d, sequence bits %d, workerid %" G_GINT64_FORMAT ", datacenterid %" G_GINT64_FORMAT,
              SF_TIMESTAMP_SHIFT, SF_DATACENTER_ID_BITS, SF_WORKER_ID_BITS, SF_SEQUENCE_BITS,
              sf_worker_worker_id(w), sf_worker_datacenter_id(w));
    sf_handler_set_worker(d->handler, w);
    sf_handler_set_serving(d->handler, TRUE, NULL);
    return TRUE;
}

/* Serves until SIGTERM or SIGINT arrives. */
static void sf_daemon_serve(sf_daemon *d)
{
    for (;;) {
        struct pollfd p = {.fd = d->signal_fd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            g_critical("waiting for signals failed: %s", g_strerror(errno));
            return;
        }
        struct signalfd_siginfo si;
        if (read(d->signal_fd, &si, sizeof si) == (ssize_t)sizeof si) {
            g_message("received %s: stopping; answering requests in flight",
                      si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
            return;
        }
    }
}

/* Stops accepting, answers what has arrived, and frees everything. */
static void sf_daemon_shutdown(sf_daemon *d)
{
    if (d->server != NULL) {
        sf_server_stop(d->server, SF_STOP_TIMEOUT_MS);
        sf_server_stats ss;
        sf_server_get_stats(d->server, &ss);
        g_message("stopped after %" G_GUINT64_FORMAT " requests", ss.frames_processed);
    }
    sf_admin_stop(d->admin);
    sf_server_free(d->server);
    if (d->handler != NULL)
        g_object_unref(d->handler);
    if (d->signal_fd >= 0)
        close(d->signal_fd);
    sf_config_clear(&d->cfg);
}

int main(int argc, char **argv)
{
    sf_daemon d = {.signal_fd = -1};
    GError *err = NULL;
    gboolean help = FALSE;
    sf_config_init(&d.cfg);
    if (!sf_config_load(&d.cfg, &argc, &argv, &help, &err)) {
        fprintf(stderr, "snowflaked: %s\n", err->message);
        g_error_free(err);
        sf_config_clear(&d.cfg);
        return 2;
    }
    if (help) {
        sf_config_clear(&d.cfg);
        return 0;
    }
    sf_daemon_set_log_level(d.cfg.log_level);
    int status = 1;
    if (sf_daemon_block_signals(&d) && sf_daemon_listen(&d) && sf_daemon_register(&d)) {
        sf_daemon_serve(&d);
        status = 0;
    }
    sf_daemon_shutdown(&d);
    return status;
}
