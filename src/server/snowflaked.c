/* snowflaked.c -- the Snowflake id server: loads the settings, listens, registers in
 * ZooKeeper (or takes its static id), and serves until SIGTERM or SIGINT. It wires the parts
 * together through their headers and knows none of ZooKeeper's API or the wire format. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "admin.h"
#include "audit.h"
#include "config.h"
#include "direct_codec.h"
#include "fdlimit.h"
#include "handler.h"
#include "history.h"
#include "http_ids.h"
#include "metrics.h"
#include "notify.h"
#include "procstats.h"
#include "rpc/peer.h"
#include "commit.h" /* generated into gen/ of the build tree */
#include "server.h"
#include "standalone.h"
#include "zk/snowflake_zk.h"
#include "rpc/thrift_fix.h"
#include "lib/snowflake.h"

/* How long a stop may take to flush replies to slow readers. */
#define SF_STOP_TIMEOUT_MS 5000
/* How long a peer has to answer each call of the sanity checks, as the original. */
#define SF_PEER_TIMEOUT_MS 1000
/* How long "serving" waits for the port to accept (thread 0 listens within a loop turn). */
#define SF_LISTEN_WAIT_MS 2000

typedef struct sf_daemon {
    sf_config cfg;
    SfHandler *handler;
    sf_server *server;
    sf_admin *admin;
    sf_http_ids *http;       /* the HTTP ids port; NULL when [http] port = 0 */
    sf_history *history;     /* ids/s and serving over the last minutes, for the admin pages */
    sf_audit *audit;         /* NULL when [audit] sink = none */
    sfz *zk;                 /* the registration in ZooKeeper; NULL when standalone */
    sf_standalone *standalone; /* standalone: the configured worker id; NULL when registered */
    sf_id_source source;     /* registered: the handler's source of ids, over zk */
    int peer_timeout_ms;     /* what sf_peer_query reads through peer_ctx */
    GMutex stop_lock;        /* guards stopping and zk while starting up */
    gboolean stopping;       /* SIGTERM or SIGINT seen: never open the gate again */
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

/* Gathers the admin figures (metrics.c) from the daemon's parts. */
static void sf_daemon_collect(sf_admin_snapshot *snap, void *ctx)
{
    sf_daemon *d = ctx;
    sfz_skew skew;
    sfz_renewals renewals;
    g_mutex_lock(&d->stop_lock); /* d->zk is set and cleared under the lock */
    gboolean registered = d->zk != NULL;
    if (registered) {
        sfz_get_skew(d->zk, &skew);
        sfz_get_renewals(d->zk, &renewals);
    }
    g_mutex_unlock(&d->stop_lock);
    sf_metrics_collect(snap, d->handler, d->server, d->audit, registered ? &skew : NULL);
    sf_metrics_add_http(snap, d->http);
    if (registered)
        sf_metrics_add_renewals(snap, &renewals);
}

/* One sample of the history: ids handed out so far, and whether ids are served. */
static void sf_daemon_sample(void *ctx, uint64_t *ids, gboolean *serving)
{
    sf_daemon *d = ctx;
    sf_handler_stats hs;
    sf_handler_get_stats(d->handler, &hs);
    *ids = hs.ids_generated;
    *serving = hs.serving;
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

/* Hands the ids of each call to the audit log's queue (never waits for its sink). */
static void sf_daemon_audit(void *ctx, const int64_t *ids, size_t n, const char *agent)
{
    sf_audit_record(ctx, ids, n, agent);
}

/* Starts the audit log when [audit] sink is set, and hooks it to the handler. */
static gboolean sf_daemon_start_audit(sf_daemon *d)
{
    sf_audit_options ao = d->cfg.audit;
    if (!sf_audit_sink_from_name(d->cfg.audit_sink, &ao.sink) || ao.sink == SF_AUDIT_NONE)
        return TRUE; /* the settings check refused any other name */
    GError *err = NULL;
    d->audit = sf_audit_start(&ao, &err);
    if (d->audit == NULL) {
        g_critical("%s", err->message);
        g_error_free(err);
        return FALSE;
    }
    sf_handler_set_audit(d->handler, sf_daemon_audit, d->audit);
    if (ao.sink == SF_AUDIT_SCRIBE)
        g_message("audit log to scribe at %s:%d, category %s", ao.scribe_host, ao.scribe_port,
                  ao.category);
    else
        g_message("audit log appended to %s", ao.file);
    return TRUE;
}

/* Creates the service's handler: ids are refused until it has a source. */
static gboolean sf_daemon_new_handler(sf_daemon *d)
{
    d->handler = sf_handler_new(&d->cfg.handler);
    return TRUE;
}

/* With the port open only while serving, a reply made while not serving (a refusal
 * racing a fence, or a lease that ran out) is not sent: the connection is closed
 * instead, which a legacy client retries on another node; it cannot decode the
 * ServiceUnavailable this project's IDL added. Runs on the server's threads. */
static bool sf_daemon_withhold_replies(void *ctx)
{
    (void)ctx;
    return sf_handler_take_unavailable();
}

/* TRUE when the Thrift port follows the gate: registered, and not told to stay open. */
static gboolean sf_daemon_port_follows_gate(const sf_daemon *d)
{
    return d->cfg.registry.hosts[0] != '\0' && !d->cfg.listen_while_not_serving;
}

/* The node data peers and tools use to reach us: the bound address, or the host name
 * when bound to every interface. */
static char *sf_daemon_host_port(sf_daemon *d)
{
    const char *addr = d->cfg.server.bind_address;
    gboolean any = strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0 || addr[0] == '\0';
    return g_strdup_printf("%s:%d", any ? g_get_host_name() : addr, sf_server_port(d->server));
}

/* Starts the HTTP ids port when [http] port is set: open from now on, answering 503 while
 * the node does not serve. */
static gboolean sf_daemon_start_http(sf_daemon *d)
{
    GError *err = NULL;
    if (d->cfg.http.port == 0)
        return TRUE;
    d->http = sf_http_ids_start(&d->cfg.http, d->handler, &err);
    if (d->http == NULL) {
        g_critical("%s", err->message);
        g_error_free(err);
        return FALSE;
    }
    g_message("HTTP ids on http://%s:%d/ (GET /id, /ids?count=N, /api/snowflake/get/KEY)",
              d->cfg.http.bind_address, sf_http_ids_port(d->http));
    return TRUE;
}

/* Binds the Thrift port and starts answering (or, when the port follows the gate, only
 * binds it until the node serves), then starts the admin endpoint. */
static gboolean sf_daemon_listen(sf_daemon *d)
{
    GError *err = NULL;
    /* Both ports' connections fitted together, before either starts, so that the two full
     * leave ZooKeeper and the admin endpoint their descriptors. */
    sf_fdlimit_port ports[] = {
        {"max_connections", &d->cfg.server.max_connections,
         SF_SERVER_THREAD_FDS * d->cfg.server.threads},
        {"[http] max_connections", &d->cfg.http.max_connections,
         SF_HTTP_THREAD_FDS * d->cfg.http.threads},
    };
    sf_fdlimit_fit(ports, d->cfg.http.port != 0 ? 2 : 1);
    ThriftProcessor *proc =
        g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_PROCESSOR, "handler", d->handler, NULL);
    sf_server_options so = d->cfg.server; /* the settings, and how the port follows the gate */
    if (sf_daemon_port_follows_gate(d)) {
        so.listen_at_start = false;
        so.withhold_replies = sf_daemon_withhold_replies;
    }
    d->server = sf_server_new(&so, proc, &err);
    g_object_unref(proc);
    if (d->server != NULL)
        sf_server_set_direct(d->server, sf_direct_answer, d->handler);
    if (d->server == NULL || !sf_server_start(d->server, &err)) {
        g_critical("%s", err->message);
        g_error_free(err);
        return FALSE;
    }
    if (sf_daemon_port_follows_gate(d))
        g_message("bound %s:%d; listening on %s:%d only while serving ids "
                  "(listen_while_not_serving = false)", so.bind_address,
                  sf_server_port(d->server), so.bind_address, sf_server_port(d->server));
    else
        g_message("listening on %s:%d", so.bind_address, sf_server_port(d->server));
    if (!sf_daemon_start_http(d))
        return FALSE;
    if (d->cfg.registry.hosts[0] == '\0') { /* standalone: serving from now on */
        sf_notify_status("serving as worker id %" G_GINT64_FORMAT, d->cfg.worker_id);
        sf_notify_ready();
    }
    if (d->cfg.admin_port != 0) {
        d->admin = sf_admin_start(d->cfg.admin_bind_address, d->cfg.admin_port,
                                  sf_daemon_collect, d, &err);
        if (d->admin == NULL) {
            g_critical("%s", err->message);
            g_error_free(err);
            return FALSE;
        }
        char *node = sf_daemon_host_port(d);
        sf_admin_set_server_info(d->admin, PACKAGE_VERSION, SF_BUILD, SF_COMMIT, node);
        g_free(node);
        d->history = sf_history_start(sf_daemon_sample, d);
        sf_admin_set_history(d->admin, d->history);
        g_message("admin endpoint on http://%s:%d/ (status page; /stats.json, /stats.txt, "
                  "/metrics, /health, /ping, /server_info.json)", d->cfg.admin_bind_address,
                  sf_admin_port(d->admin));
    }
    return TRUE;
}

/* The worker for the configured (static) worker id, datacenter, epoch and clock options.
 * NULL after logging why. */
static sf_worker *sf_daemon_static_worker(sf_daemon *d)
{
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
        return NULL;
    }
    g_message("worker starting. timestamp left shift %d, datacenter id bits %d, worker id bits "
              "%d, sequence bits %d, workerid %" G_GINT64_FORMAT ", datacenterid %" G_GINT64_FORMAT,
              SF_TIMESTAMP_SHIFT, SF_DATACENTER_ID_BITS, SF_WORKER_ID_BITS, SF_SEQUENCE_BITS,
              sf_worker_worker_id(w), sf_worker_datacenter_id(w));
    return w;
}

/* TRUE once SIGTERM or SIGINT was seen. */
static gboolean sf_daemon_stopping(sf_daemon *d)
{
    g_mutex_lock(&d->stop_lock);
    gboolean stopping = d->stopping;
    g_mutex_unlock(&d->stop_lock);
    return stopping;
}

/* Routes the registry's messages into our log. */
static void sf_daemon_registry_log(void *ctx, const char *level, const char *message)
{
    (void)ctx;
    if (strcmp(level, "error") == 0)
        g_critical("%s", message);
    else if (strcmp(level, "warning") == 0)
        g_warning("%s", message);
    else
        g_message("%s", message);
}

/* The port follows the registration: the registration has already shut its fence when it
 * says it does not serve (nothing may delay that), so this only closes the port (connects
 * refused, open connections closed unanswered: a refusal made meanwhile is withheld, see
 * sf_daemon_withhold_replies), or opens it once serving. Runs on the registration's callback
 * thread, never the one that renews the lease: its wait for the port delays no renewal;
 * once stopping, the port never opens again. */
static void sf_daemon_on_state(void *ctx, const sfz_state *st)
{
    sf_daemon *d = ctx;
    if (!st->serving) {
        if (sf_daemon_port_follows_gate(d))
            sf_server_set_listening(d->server, false);
        if (g_str_has_prefix(st->reason, "starting")) { /* the registration logged the try */
            sf_notify_status("%s", st->reason);
            return;
        }
        g_warning("fenced: refusing ids: %s", st->reason);
        sf_notify_status("fenced: %s", st->reason);
        return;
    }
    g_mutex_lock(&d->stop_lock);
    if (!d->stopping) {
        if (sf_daemon_port_follows_gate(d)) {
            sf_server_set_listening(d->server, true);
            /* Announce only what a client can use: tooling connects on this line. */
            if (!sf_server_wait_listening(d->server, SF_LISTEN_WAIT_MS))
                g_warning("port %d does not accept connections yet (retrying); ids are "
                          "served once it does", sf_server_port(d->server));
        }
        g_message("serving ids as worker id %" G_GINT64_FORMAT, (gint64)st->worker_id);
        sf_notify_status("serving as worker id %" G_GINT64_FORMAT, (gint64)st->worker_id);
        sf_notify_ready();
    }
    g_mutex_unlock(&d->stop_lock);
}

/* Registers through libsnowflake-zk, as any program embedding it would: connects to
 * ZooKeeper, checks the peers (over Thrift, sf_peer_query), claims a worker id (waiting out
 * the timestamp recorded for it), waits startup_sleep_ms, and lets the registration drive
 * the port. False after logging why: start-up must stop. */
static gboolean sf_daemon_register_zookeeper(sf_daemon *d)
{
    const sf_registry_options *ro = &d->cfg.registry; /* the settings */
    char *host_port = sf_daemon_host_port(d);
    sfz_options o;
    sfz_error err;
    sfz_options_init(&o);
    o.zookeeper = ro->hosts;
    o.auth = ro->auth;
    o.worker_id_path = ro->worker_id_path;
    o.worker_id = d->cfg.worker_id_auto ? -1 : d->cfg.worker_id;
    o.datacenter_id = d->cfg.datacenter_id;
    o.epoch_ms = d->cfg.epoch_ms;
    o.max_clock_backward_wait_ms = d->cfg.max_clock_backward_wait_ms;
    o.random_first_sequence = d->cfg.random_first_sequence;
    o.holder = host_port;
    d->peer_timeout_ms = SF_PEER_TIMEOUT_MS;
    o.query_peer = sf_peer_query;
    o.peer_ctx = &d->peer_timeout_ms;
    o.skip_sanity_checks = ro->skip_sanity_checks;
    o.skip_unreachable_peers = ro->skip_unreachable_peers;
    o.session_timeout_ms = ro->session_timeout_ms;
    o.claim_retries = ro->claim_retries;
    o.claim_retry_wait_ms = ro->claim_retry_wait_ms;
    o.state_interval_ms = ro->state_interval_ms;
    o.startup_sleep_ms = (int)d->cfg.startup_sleep_ms;
    o.max_peer_skew_ms = ro->max_peer_skew_ms;
    o.start_timeout_ms = (int)(d->cfg.start_timeout_s * 1000);
    o.on_state = sf_daemon_on_state;
    o.state_ctx = d;
    o.log = sf_daemon_registry_log;
    g_message("registering as %s under %s in ZooKeeper %s", host_port, o.worker_id_path,
              o.zookeeper);
    sfz *zk;
    int rc = sfz_prepare(&o, &zk, &err);
    g_free(host_port);
    if (rc != SFZ_OK) {
        g_critical("cannot register in ZooKeeper: %s", err.message);
        return FALSE;
    }
    g_mutex_lock(&d->stop_lock);
    d->zk = zk;
    gboolean stopping = d->stopping;
    g_mutex_unlock(&d->stop_lock);
    d->source = sf_id_source_for_registration(zk);
    sf_handler_set_source(d->handler, &d->source);
    if (stopping)
        return FALSE;
    if (sfz_run(zk, &err) != SFZ_OK) {
        if (!sf_daemon_stopping(d))
            g_critical("cannot claim a worker id: %s", err.message);
        return FALSE;
    }
    return TRUE;
}

/* Standalone mode (no ZooKeeper hosts): the configured worker id, serving from the
 * moment the port is bound. */
static gboolean sf_daemon_use_static_id(sf_daemon *d)
{
    sf_worker *w = sf_daemon_static_worker(d);
    if (w == NULL)
        return FALSE;
    d->standalone = sf_standalone_new_serving(w);
    if (d->standalone == NULL) {
        g_critical("out of memory setting up the worker");
        sf_worker_free(w);
        return FALSE;
    }
    sf_handler_set_source(d->handler, sf_standalone_source(d->standalone));
    return TRUE;
}

/* Marks the daemon stopping: the gate never opens again. During start-up (starting), the
 * start's waits end too and a claim under way gives up; a started registration is stopped
 * only by sfz_stop, which sf_daemon_shutdown makes after the requests in flight. */
static void sf_daemon_request_stop(sf_daemon *d, gboolean starting)
{
    g_mutex_lock(&d->stop_lock);
    d->stopping = TRUE;
    sfz *zk = d->zk;
    g_mutex_unlock(&d->stop_lock);
    if (starting && zk != NULL)
        sfz_cancel(zk);
}

/* Reads one signal from the signalfd: TRUE (after logging it) when it was SIGTERM or SIGINT. */
static gboolean sf_daemon_read_signal(sf_daemon *d, const char *when)
{
    struct signalfd_siginfo si;
    if (read(d->signal_fd, &si, sizeof si) != (ssize_t)sizeof si)
        return FALSE;
    g_message("received %s%s: stopping; answering requests in flight",
              si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", when);
    return TRUE;
}

/* Waits on the signalfd and, when given, on done_fd; TRUE when a signal came first. */
static gboolean sf_daemon_wait_signal(sf_daemon *d, int done_fd, const char *when)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = d->signal_fd, .events = POLLIN},
                              {.fd = done_fd, .events = POLLIN}};
        if (poll(p, done_fd >= 0 ? 2 : 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            g_critical("waiting for signals failed: %s", g_strerror(errno));
            return TRUE;
        }
        if ((p[0].revents & POLLIN) && sf_daemon_read_signal(d, when))
            return TRUE;
        if (done_fd >= 0 && (p[1].revents & POLLIN))
            return FALSE;
    }
}

typedef struct sf_daemon_start_up {
    sf_daemon *d;
    gboolean ok;
    int done_fd;   /* an eventfd written when start-up has ended */
} sf_daemon_start_up;

/* The start-up thread: registers, then says it is done. */
static gpointer sf_daemon_start_up_thread(gpointer data)
{
    sf_daemon_start_up *su = data;
    su->ok = sf_daemon_register_zookeeper(su->d);
    uint64_t one = 1;
    if (write(su->done_fd, &one, sizeof one) != (ssize_t)sizeof one)
        g_critical("cannot signal the end of start-up: %s", g_strerror(errno));
    return NULL;
}

/* Registers in ZooKeeper (claim, floor wait, startup_sleep_ms: seconds to minutes) on a
 * thread of its own while this one watches for SIGTERM and SIGINT, so a stop asked for
 * during start-up is honoured at once and leaves no worker node behind. TRUE once the
 * registration drives the port; FALSE when start-up failed or was stopped (d->stopping). */
static gboolean sf_daemon_start_up_registered(sf_daemon *d)
{
    sf_daemon_start_up su = {.d = d, .ok = FALSE};
    su.done_fd = eventfd(0, EFD_CLOEXEC);
    if (su.done_fd < 0) {
        g_critical("cannot create an eventfd: %s", g_strerror(errno));
        return FALSE;
    }
    GThread *t = g_thread_new("start-up", sf_daemon_start_up_thread, &su);
    if (sf_daemon_wait_signal(d, su.done_fd, " during start-up"))
        sf_daemon_request_stop(d, TRUE);
    g_thread_join(t);
    close(su.done_fd);
    return su.ok && !sf_daemon_stopping(d);
}

/* Stops taking requests and closes the gate, then answers what has arrived (ids made
 * after the gate closed are refused), and only then records the last timestamp and
 * deletes our worker node, so that no other node can claim our id while one of our
 * requests may still hand out an id. Frees everything. */
static void sf_daemon_shutdown(sf_daemon *d)
{
    sf_daemon_request_stop(d, FALSE);
    sf_notify_stopping();
    if (d->handler != NULL)
        sf_handler_close(d->handler, "stopping");
    if (d->server != NULL) {
        sf_server_stop(d->server, SF_STOP_TIMEOUT_MS);
        sf_server_stats ss;
        sf_server_get_stats(d->server, &ss);
        g_message("stopped after %" G_GUINT64_FORMAT " requests", ss.frames_processed);
    }
    sf_http_ids_stop(d->http); /* its requests are refused "stopping" since the close */
    d->http = NULL;
    /* Before the registration and the audit log go: its requests read both. */
    sf_admin_stop(d->admin);
    d->admin = NULL;
    sf_history_stop(d->history); /* after the endpoint that serves it, before the handler */
    d->history = NULL;
    g_mutex_lock(&d->stop_lock);
    sfz *zk = d->zk;
    d->zk = NULL;
    g_mutex_unlock(&d->stop_lock);
    /* Records the last timestamp and ends the session: our node goes at once. */
    if (d->handler != NULL)
        sf_handler_set_source(d->handler, NULL);
    sfz_stop(zk);
    /* Last: the node is gone from ZooKeeper, so a slow sink delays no other node. */
    sf_audit_stop(d->audit, d->cfg.audit.socket_timeout_ms);
    d->audit = NULL;
    sf_server_free(d->server);
    if (d->handler != NULL)
        g_object_unref(d->handler);
    sf_standalone_free(d->standalone); /* after the handler: it was the handler's source */
    if (d->signal_fd >= 0)
        close(d->signal_fd);
    g_mutex_clear(&d->stop_lock);
    sf_config_clear(&d->cfg);
}

int main(int argc, char **argv)
{
    sf_daemon d = {.signal_fd = -1};
    GError *err = NULL;
    gboolean help = FALSE;
    sf_procstats_mark_start();
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
    sf_thrift_fix_finalize();
    sf_thrift_fix_processor();
    sf_thrift_fix_transport();
    sfz_set_client_logging(strcmp(d.cfg.log_level, "debug") == 0);
    g_mutex_init(&d.stop_lock);
    int status = 1;
    /* With ZooKeeper: listen first, so peers starting now can check us, then register. */
    gboolean registered = d.cfg.registry.hosts[0] != '\0';
    if (sf_daemon_block_signals(&d) && sf_daemon_new_handler(&d) && sf_daemon_start_audit(&d) &&
        (registered || sf_daemon_use_static_id(&d)) && sf_daemon_listen(&d)) {
        if (!registered || sf_daemon_start_up_registered(&d)) {
            sf_daemon_wait_signal(&d, -1, "");
            status = 0;
        } else if (sf_daemon_stopping(&d)) {
            status = 0; /* stopped during start-up: a clean exit */
        }
    }
    sf_daemon_shutdown(&d);
    return status;
}
