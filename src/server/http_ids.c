/* http_ids.c -- sf_http_ids: the HTTP ids port on libmicrohttpd. Its own thread accepts, as
 * the Thrift port's does, so that a connection past max_connections is refused and counted,
 * and descriptors running out rest the listener rather than spin it; libmicrohttpd's threads
 * read, parse and answer (http_answer.c makes each answer through the handler). The same
 * thread closes a connection whose request head has not come in whole within
 * request_timeout_ms of its first byte: libmicrohttpd's own timeout is one of inactivity,
 * which a sender of a byte now and then never meets. */
#define _GNU_SOURCE
#include "http_ids.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/tcp.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/bindaddr.h"
#include "common/clocks.h"
#include "http_answer.h"
#include "ratelog.h"

/* Counters are striped as the handler's are: each thread adds to its own cache line. */
#define SF_HTTP_STRIPES 16
/* The statuses answers have (sf_http_answer), in the order the figures list them. */
#define SF_HTTP_STATUSES 6
static const unsigned sf_http_statuses[SF_HTTP_STATUSES] = {200, 400, 404, 405, 500, 503};
/* The routes that hand out ids, timed under these names. */
#define SF_HTTP_TIMED 3
static const char *const sf_http_timed_names[SF_HTTP_TIMED] = {"http_id", "http_ids",
                                                               "http_leaf"};
#define SF_HTTP_BACKLOG 1024
/* How long the listener rests after accept() ran out of descriptors or memory. */
#define SF_HTTP_ACCEPT_BACKOFF_MS 100
/* The query's parameters looked at: any request with more than 3 is refused on its first 4. */
#define SF_HTTP_MAX_ARGS 8

typedef struct sf_http_stripe {
#define SF_HTTP_STRIPE_FIELD(name, help) atomic_uint_fast64_t name;
    SF_HTTP_IDS_COUNTERS(SF_HTTP_STRIPE_FIELD)
#undef SF_HTTP_STRIPE_FIELD
    atomic_uint_fast64_t requests[SF_HTTP_ROUTES][SF_HTTP_STATUSES];
    /* The alignment makes the whole stripe start on a cache line of its own. */
    _Alignas(64) sf_latency timings[SF_HTTP_TIMED];
} sf_http_stripe;

/* One connection, from libmicrohttpd's start to its close. */
typedef struct sf_http_conn {
    int fd;
    atomic_bool in_request;        /* its head is in, its answer not sent yet */
    atomic_uint_fast64_t consumed; /* bytes of the request heads read so far */
    size_t charged;                /* the budget its answer in flight holds */
    uint64_t request_ns;           /* when its request's head came in */
    /* The sweep's own: when bytes past `consumed` were first seen (0 = none), at which. */
    int64_t head_since_ms;
    uint64_t head_at;
    struct sf_http_conn *prev, *next;
} sf_http_conn;

struct sf_http_ids {
    sf_http_options opts;       /* max_connections as fitted to the descriptors */
    SfHandler *handler;
    struct MHD_Daemon *daemon;
    int listen_fd, wake_fd, port;
    GThread *acceptor;
    atomic_uint_fast64_t open;  /* connections counted from accept to close */
    GMutex conns_lock;          /* guards conns: started and closed connections */
    sf_http_conn *conns;
    sf_http_budget budget;
    sf_http_stripe *stripes;
    sf_ratelog refusal_log, accept_log, timeout_log, library_log;
};

G_DEFINE_QUARK(sf-http-ids-error-quark, sf_http_ids_error)

static atomic_uint sf_http_next_stripe;
static _Thread_local int sf_http_thread_stripe = -1;

/* The calling thread's stripe, given on first use, round robin. */
static sf_http_stripe *sf_http_my_stripe(sf_http_ids *s)
{
    if (sf_http_thread_stripe < 0)
        sf_http_thread_stripe =
            (int)(atomic_fetch_add(&sf_http_next_stripe, 1) % SF_HTTP_STRIPES);
    return &s->stripes[sf_http_thread_stripe];
}

/* libmicrohttpd's own error lines (a bad request it answers itself, say), at most one a
 * second. */
static void sf_http_library_log(void *cls, const char *fmt, va_list ap)
{
    sf_http_ids *s = cls;
    sf_ratelog_logv(&s->library_log, G_LOG_LEVEL_WARNING, "HTTP ids port: ", fmt, ap);
}

/* ---- connections ---------------------------------------------------------------------- */

/* Started: tracked for the sweep. Closed: untracked, its budget given back, uncounted. */
static void sf_http_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                                enum MHD_ConnectionNotificationCode what)
{
    sf_http_ids *s = cls;
    sf_http_conn *c = *socket_context;
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c = g_new0(sf_http_conn, 1);
        c->fd = fd != NULL ? fd->connect_fd : -1;
        g_mutex_lock(&s->conns_lock);
        c->next = s->conns;
        if (s->conns != NULL)
            s->conns->prev = c;
        s->conns = c;
        g_mutex_unlock(&s->conns_lock);
        *socket_context = c;
        return;
    }
    if (c == NULL)
        return;
    g_mutex_lock(&s->conns_lock); /* before libmicrohttpd closes the descriptor */
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    g_mutex_unlock(&s->conns_lock);
    sf_http_budget_give(&s->budget, c->charged);
    atomic_fetch_sub(&s->open, 1);
    g_free(c);
    *socket_context = NULL;
}

/* The connection's record, which sf_http_conn_notify made. */
static sf_http_conn *sf_http_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != NULL ? info->socket_context : NULL;
}

/* A request is over (answered, or its connection closed): the budget its answer held is
 * given back, and the connection waits for its next head. */
static void sf_http_request_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                                 enum MHD_RequestTerminationCode toe)
{
    (void)con_cls;
    (void)toe;
    sf_http_ids *s = cls;
    sf_http_conn *c = sf_http_conn_of(conn);
    if (c == NULL)
        return;
    sf_http_budget_give(&s->budget, c->charged);
    c->charged = 0;
    atomic_store(&c->in_request, false);
}

/* Bytes the connection's socket has received in all, or 0 when the kernel does not say. */
static uint64_t sf_http_bytes_received(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return 0;
    return ti.tcpi_bytes_received;
}

/* Closes the connections whose request head began (bytes came past the heads read) more
 * than request_timeout_ms ago and is still not in: shutdown() makes libmicrohttpd see the
 * end of the connection and close it, on its own thread. */
static void sf_http_sweep(sf_http_ids *s, int64_t now)
{
    g_mutex_lock(&s->conns_lock);
    for (sf_http_conn *c = s->conns; c != NULL; c = c->next) {
        uint64_t consumed = atomic_load(&c->consumed);
        bool waiting = !atomic_load(&c->in_request) && c->fd >= 0;
        if (!waiting || sf_http_bytes_received(c->fd) <= consumed) {
            c->head_since_ms = 0;
        } else if (c->head_since_ms == 0 || c->head_at != consumed) {
            c->head_since_ms = now;
            c->head_at = consumed;
        } else if (c->head_since_ms > 0 && now - c->head_since_ms >= s->opts.request_timeout_ms) {
            c->head_since_ms = -1; /* closing: counted once */
            atomic_fetch_add(&sf_http_my_stripe(s)->http_request_timeouts, 1);
            sf_ratelog_log(&s->timeout_log, G_LOG_LEVEL_WARNING, "closing an HTTP ids "
                           "connection: its request head took over %d ms ([http] "
                           "request_timeout_ms)", s->opts.request_timeout_ms);
            shutdown(c->fd, SHUT_RDWR);
        }
    }
    g_mutex_unlock(&s->conns_lock);
}

/* ---- accepting ------------------------------------------------------------------------ */

/* accept() ran out of descriptors or memory: the listener rests until *resume_ms instead
 * of spinning on a socket that stays readable (clients wait in the backlog meanwhile). */
static void sf_http_accept_exhausted(sf_http_ids *s, int err, int64_t *resume_ms)
{
    sf_ratelog_log(&s->accept_log, G_LOG_LEVEL_WARNING, "accept on HTTP ids port %d failed: %s; "
                   "%" PRIuFAST64 " connections open; not accepting for %d ms (raise `ulimit "
                   "-n` or lower max_connections)", s->port, g_strerror(err),
                   atomic_load(&s->open), SF_HTTP_ACCEPT_BACKOFF_MS);
    *resume_ms = sf_clocks_mono_ms() + SF_HTTP_ACCEPT_BACKOFF_MS;
}

/* Accepts what waits on the listener: each connection within max_connections goes to
 * libmicrohttpd, each past it is closed at once and counted. */
static void sf_http_accept_all(sf_http_ids *s, int64_t *resume_ms)
{
    for (int i = 0; i < SF_HTTP_BACKLOG; i++) {
        struct sockaddr_storage addr;
        socklen_t alen = sizeof addr;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&addr, &alen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                sf_http_accept_exhausted(s, errno, resume_ms);
            else if (errno == EINTR || errno == ECONNABORTED)
                continue;
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                sf_ratelog_log(&s->accept_log, G_LOG_LEVEL_WARNING,
                               "accept on HTTP ids port %d failed: %s", s->port, g_strerror(errno));
            return;
        }
        if (atomic_load(&s->open) >= (uint64_t)s->opts.max_connections) {
            close(fd);
            atomic_uint_fast64_t *refused = &sf_http_my_stripe(s)->http_connections_refused;
            uint64_t n = atomic_fetch_add(refused, 1) + 1;
            sf_ratelog_log(&s->refusal_log, G_LOG_LEVEL_WARNING, "refusing HTTP ids connection: "
                           "%d connections open ([http] max_connections); %" G_GUINT64_FORMAT
                           " refused so far", s->opts.max_connections, n);
            continue;
        }
        atomic_fetch_add(&s->open, 1);
        atomic_fetch_add(&sf_http_my_stripe(s)->http_connections_accepted, 1);
        if (MHD_add_connection(s->daemon, fd, (struct sockaddr *)&addr, alen) != MHD_YES) {
            atomic_fetch_sub(&s->open, 1); /* libmicrohttpd closed it */
            sf_ratelog_log(&s->accept_log, G_LOG_LEVEL_WARNING, "HTTP ids port %d: a "
                           "connection could not be served: %s", s->port, g_strerror(errno));
        }
    }
}

/* The listener's thread: accepts, rests after running out, and sweeps the request heads
 * every eighth of request_timeout_ms (at least every 10 ms, at most every second) while
 * any connection is open; idle, it sleeps until a client or the stop comes. */
static gpointer sf_http_acceptor(gpointer data)
{
    sf_http_ids *s = data;
    int64_t resume_ms = 0, period = CLAMP(s->opts.request_timeout_ms / 8, 10, 1000);
    int64_t next_sweep = sf_clocks_mono_ms() + period;
    for (;;) {
        int64_t now = sf_clocks_mono_ms();
        bool resting = now < resume_ms, sweeping = atomic_load(&s->open) > 0;
        int timeout = -1;
        if (sweeping)
            timeout = (int)MAX(0, next_sweep - now);
        if (resting && (timeout < 0 || resume_ms - now < timeout))
            timeout = (int)(resume_ms - now);
        struct pollfd p[2] = {{.fd = s->wake_fd, .events = POLLIN},
                              {.fd = resting ? -1 : s->listen_fd, .events = POLLIN}};
        if (poll(p, 2, timeout) < 0 && errno != EINTR) {
            g_critical("HTTP ids port %d: poll failed: %s; no longer accepting", s->port,
                       g_strerror(errno));
            return NULL;
        }
        if (p[0].revents & POLLIN)
            return NULL;
        if (p[1].revents & POLLIN)
            sf_http_accept_all(s, &resume_ms);
        now = sf_clocks_mono_ms();
        if (now >= next_sweep) {
            sf_http_sweep(s, now);
            next_sweep = now + period;
        }
    }
}

/* ---- requests ------------------------------------------------------------------------- */

typedef struct sf_http_args {
    sf_http_arg arg[SF_HTTP_MAX_ARGS];
    size_t n;
} sf_http_args;

/* Collects the query's parameters, as many as are looked at. */
static enum MHD_Result sf_http_collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                           const char *value)
{
    (void)kind;
    sf_http_args *args = cls;
    if (args->n == SF_HTTP_MAX_ARGS)
        return MHD_NO;
    args->arg[args->n++] = (sf_http_arg){key, value};
    return MHD_YES;
}

/* The index of a status in sf_http_statuses (500's for any other). */
static int sf_http_status_index(unsigned status)
{
    for (int i = 0; i < SF_HTTP_STATUSES; i++)
        if (sf_http_statuses[i] == status)
            return i;
    return 4;
}

/* TRUE when the request says a body follows (no route takes one). */
static bool sf_http_has_body(struct MHD_Connection *conn)
{
    const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    return (length != NULL && strcmp(length, "0") != 0) ||
           MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                       MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

/* Answers one request: its first call notes the head (and, for a request that says a body
 * follows, answers at once, so that libmicrohttpd reads none of it and closes the connection
 * after the answer); the second, once the request is whole, answers it, keeping the
 * connection. Times and counts each by route and status. */
static enum MHD_Result sf_http_on_request(void *cls, struct MHD_Connection *conn,
                                          const char *url, const char *method,
                                          const char *version, const char *upload_data,
                                          size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    sf_http_ids *s = cls;
    sf_http_conn *c = sf_http_conn_of(conn);
    if (*con_cls == NULL) {
        *con_cls = s;
        if (c != NULL) {
            const union MHD_ConnectionInfo *head =
                MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
            atomic_fetch_add(&c->consumed, head != NULL ? head->header_size : 0);
            atomic_store(&c->in_request, true);
            c->request_ns = sf_clocks_mono_ns();
        }
        if (!sf_http_has_body(conn))
            return MHD_YES;
    } else if (*upload_data_size != 0) {
        *upload_data_size = 0; /* not reached: a body is never read */
        return MHD_YES;
    }
    uint64_t t0 = c != NULL ? c->request_ns : sf_clocks_mono_ns();
    sf_http_args args = {.n = 0};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, sf_http_collect_arg, &args);
    sf_http_request req = {method, url, args.arg, args.n,
                           MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                       MHD_HTTP_HEADER_ACCEPT)};
    sf_http_answer a;
    sf_http_answer_make(s->handler, &req, &s->budget, &a);
    if (c != NULL)
        c->charged = a.len;
    struct MHD_Response *r = MHD_create_response_from_buffer(a.len, a.body, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        g_free(a.body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a.content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store"); /* ids are unique */
    if (a.status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (a.retry_after)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (!s->opts.keep_alive)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(conn, a.status, r);
    MHD_destroy_response(r);
    sf_http_stripe *st = sf_http_my_stripe(s);
    atomic_fetch_add_explicit(&st->requests[a.route][sf_http_status_index(a.status)], 1,
                              memory_order_relaxed);
    if (a.over_budget)
        atomic_fetch_add_explicit(&st->http_output_budget_refusals, 1, memory_order_relaxed);
    if (a.route < SF_HTTP_TIMED)
        sf_latency_record(&st->timings[a.route], sf_clocks_mono_ns() - t0);
    return ret;
}

/* ---- start and stop ------------------------------------------------------------------- */

/* A socket listening on address:port. -1 with *error naming them. */
static int sf_http_listen(const sf_http_options *o, GError **error)
{
    struct addrinfo *res = NULL;
    char why[256];
    if (sf_bindaddr_resolve(o->bind_address, o->port, &res, why, sizeof why) != 0) {
        g_set_error(error, SF_HTTP_IDS_ERROR, 0, "[http] bind_address %s", why);
        return -1;
    }
    int one = 1, fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, SF_HTTP_BACKLOG) != 0) {
        g_set_error(error, SF_HTTP_IDS_ERROR, 0, "cannot listen for HTTP ids on %s:%d: %s (is "
                    "another server using the port?)", o->bind_address, o->port,
                    g_strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* Starts libmicrohttpd without a listener of its own: connections come from ours. */
static struct MHD_Daemon *sf_http_start_daemon(sf_http_ids *s)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG | MHD_USE_TURBO;
    /* Each thread's share of libmicrohttpd's own limit is never reached: ours comes first. */
    unsigned limit = (unsigned)s->opts.max_connections * (unsigned)s->opts.threads;
    unsigned idle_s = (unsigned)((s->opts.idle_timeout_ms + 999) / 1000);
    struct MHD_OptionItem pool[] = {
        {s->opts.threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
         (intptr_t)s->opts.threads, NULL},
        {MHD_OPTION_END, 0, NULL}};
    return MHD_start_daemon(flags, 0, NULL, NULL, sf_http_on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, sf_http_library_log, s,
                            MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, idle_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)s->opts.max_request_size,
                            MHD_OPTION_NOTIFY_CONNECTION, sf_http_conn_notify, s,
                            MHD_OPTION_NOTIFY_COMPLETED, sf_http_request_done, s,
                            MHD_OPTION_ARRAY, pool, MHD_OPTION_END);
}

sf_http_ids *sf_http_ids_start(const sf_http_options *o, SfHandler *h, GError **error)
{
    char why[160];
    if (!sf_http_options_check(o, why, sizeof why) || o->port == 0) {
        g_set_error(error, SF_HTTP_IDS_ERROR, 0, "%s", o->port == 0 ? "[http] port is 0 (off)"
                                                                     : why);
        return NULL;
    }
    sf_http_ids *s = g_new0(sf_http_ids, 1);
    s->opts = *o;
    s->handler = h;
    s->port = o->port;
    s->budget.max = (size_t)o->max_output_buffer;
    s->wake_fd = -1;
    g_mutex_init(&s->conns_lock);
    s->stripes = aligned_alloc(64, sizeof(sf_http_stripe) * SF_HTTP_STRIPES);
    if (s->stripes == NULL)
        g_error("out of memory allocating the HTTP ids port's counters");
    memset(s->stripes, 0, sizeof(sf_http_stripe) * SF_HTTP_STRIPES);
    for (int i = 0; i < SF_HTTP_STRIPES; i++)
        for (int t = 0; t < SF_HTTP_TIMED; t++)
            sf_latency_init(&s->stripes[i].timings[t]);
    s->listen_fd = sf_http_listen(&s->opts, error);
    if (s->listen_fd < 0) {
        sf_http_ids_stop(s);
        return NULL;
    }
    s->daemon = sf_http_start_daemon(s);
    s->wake_fd = eventfd(0, EFD_CLOEXEC);
    if (s->daemon == NULL || s->wake_fd < 0) {
        g_set_error(error, SF_HTTP_IDS_ERROR, 0, "cannot start serving HTTP ids on %s:%d "
                    "(libmicrohttpd refused its settings, or no descriptor was left)",
                    o->bind_address, o->port);
        sf_http_ids_stop(s);
        return NULL;
    }
    s->acceptor = g_thread_new("http-accept", sf_http_acceptor, s);
    return s;
}

int sf_http_ids_port(const sf_http_ids *s)
{
    return s->port;
}

void sf_http_ids_stop(sf_http_ids *s)
{
    if (s == NULL)
        return;
    if (s->acceptor != NULL) {
        uint64_t one = 1;
        if (write(s->wake_fd, &one, sizeof one) != (ssize_t)sizeof one)
            g_critical("cannot stop the HTTP ids port's listener: %s", g_strerror(errno));
        g_thread_join(s->acceptor);
    }
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->daemon != NULL)
        MHD_stop_daemon(s->daemon); /* closes every connection: their records go with them */
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    g_mutex_clear(&s->conns_lock);
    free(s->stripes);
    g_free(s);
}

void sf_http_ids_get_stats(sf_http_ids *s, sf_http_ids_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < SF_HTTP_STRIPES; i++) {
#define SF_HTTP_SUM(name, help) out->name += atomic_load(&s->stripes[i].name);
        SF_HTTP_IDS_COUNTERS(SF_HTTP_SUM)
#undef SF_HTTP_SUM
    }
    out->http_port = (uint64_t)s->port;
    out->http_connections = atomic_load(&s->open);
    out->http_max_connections = (uint64_t)s->opts.max_connections;
    out->http_output_buffered_bytes = atomic_load(&s->budget.used);
}

void sf_http_ids_foreach_requests(sf_http_ids *s, sf_http_ids_requests_fn fn, void *ctx)
{
    for (int r = 0; r < SF_HTTP_ROUTES; r++)
        for (int st = 0; st < SF_HTTP_STATUSES; st++) {
            uint64_t n = 0;
            for (int i = 0; i < SF_HTTP_STRIPES; i++)
                n += atomic_load(&s->stripes[i].requests[r][st]);
            if (n > 0)
                fn(sf_http_route_name((sf_http_route)r), sf_http_statuses[st], n, ctx);
        }
}

void sf_http_ids_foreach_timing(sf_http_ids *s, sf_http_ids_timing_fn fn, void *ctx)
{
    sf_latency_snapshot *sum = g_new(sf_latency_snapshot, SF_HTTP_TIMED);
    for (int t = 0; t < SF_HTTP_TIMED; t++)
        sf_latency_snapshot_init(&sum[t]);
    for (int i = 0; i < SF_HTTP_STRIPES; i++)
        for (int t = 0; t < SF_HTTP_TIMED; t++)
            sf_latency_add_to(&s->stripes[i].timings[t], &sum[t]);
    for (int t = 0; t < SF_HTTP_TIMED; t++)
        fn(sf_http_timed_names[t], &sum[t], ctx);
    g_free(sum);
}
