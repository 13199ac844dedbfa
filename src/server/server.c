/* server.c -- sf_server: a concurrent framed-binary Thrift server with a fixed pool of threads,
 * each running its own event loop on io_uring or epoll.
 *
 * Both loops share every rule of a connection (limits, timeouts, budgets, the gate); they
 * differ in how a thread learns that a socket has data. On epoll it is told the socket is
 * readable and reads it; on io_uring a receive is queued per connection and completes
 * with the bytes, so one system call per loop turn submits and reaps the receives of every
 * connection served in that turn. Replies are sent at once in both. On io_uring the
 * thread's epoll instance still holds the listener and the wake-up eventfd, and the ring
 * polls that instance: accepting and handing over connections is one code path. */
#define _GNU_SOURCE
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <thrift/c_glib/protocol/thrift_binary_protocol.h>

#include "common/bindaddr.h"
#include "rpc/bounded_protocol.h"
#include "common/clocks.h"
#include "frame_transport.h"
#include "ratelog.h"
#include "uring.h"

/* Pending output above which a connection is not read until it drains: a
 * client that pipelines without reading cannot make us buffer more. */
#define SF_OUT_HIGH_WATER (1024 * 1024)
/* Room for one read beyond the largest frame. */
#define SF_READ_SLACK (64 * 1024)
/* How often timeouts are checked, and the longest an idle loop sleeps. */
#define SF_TICK_MS 50
#define SF_MAX_EVENTS 128
#define SF_LISTEN_BACKLOG 1024
/* How often a failure to listen again (the port taken meanwhile) is retried and logged. */
#define SF_LISTEN_RETRY_LOG_MS 5000
/* Descriptors kept out of max_connections' reach: the listener, each thread's epoll and
 * eventfd, the admin endpoint (64 connections and its own), ZooKeeper, the log. */
#define SF_FD_RESERVE 96
/* How long the listener rests after accept() ran out of descriptors or memory. */
#define SF_ACCEPT_BACKOFF_MS 100

typedef struct sf_thread sf_thread;

/* What a thread's io_uring requests are for (sf_uring_event.kind). */
enum {
    SF_OP_RECV = 1,     /* a connection's receive */
    SF_OP_WRITABLE = 2, /* a poll for room to send a connection's replies */
    SF_OP_EVENTS = 3,   /* a poll of the thread's epoll instance: listener, wake-up */
};

/* One client connection, owned by one thread. Idle, it holds no buffers. */
typedef struct sf_conn {
    int fd;
    bool peer_closed;   /* the client sent FIN: answer what arrived, then close */
    bool draining;      /* the server is stopping: flush, then close */
    uint32_t events;    /* the epoll interest currently registered */
    bool recv_queued;   /* io_uring: a receive is in flight (c stays allocated until it ends) */
    bool poll_queued;   /* io_uring: a writability poll is in flight (likewise) */
    uint8_t *in;        /* input not processed yet: a partial frame, or frames held back */
    size_t in_len;
    uint8_t *out;       /* replies not written yet */
    size_t out_len, out_off;
    int64_t last_active_ms;
    int64_t frame_start_ms; /* when the incomplete frame in `in` began; 0 = none */
    uint64_t out_sent;      /* reply bytes sent so far */
    uint64_t out_mark;      /* out_sent once every byte waiting at out_since_ms is sent */
    int64_t out_since_ms;   /* since when the bytes up to out_mark have waited; 0 = none */
    struct sf_conn *prev, *next;
    char peer[INET6_ADDRSTRLEN + 8];
} sf_conn;

/* Counters written by their own thread only, read by anyone. */
typedef struct sf_thread_stats {
#define SF_THREAD_STATS_FIELD(name, help) atomic_uint_fast64_t name;
    SF_SERVER_COUNTERS(SF_THREAD_STATS_FIELD)
#undef SF_THREAD_STATS_FIELD
    atomic_uint_fast64_t output_buffered;
} sf_thread_stats;

struct sf_thread {
    sf_server *server;
    int index;
    pthread_t tid;
    bool started;
    int epfd;
    sf_uring *uring;       /* this thread's io_uring; NULL = it runs on epoll */
    int wake_fd;           /* eventfd: new connections queued, or stop */
    GMutex queue_lock;
    GArray *queue;         /* accepted fds handed to this thread */
    sf_conn *conns;
    sf_conn *dead;         /* closed, freed after the event batch (and, on io_uring, once
                            * no request of theirs is in flight) */
    uint8_t *scratch;      /* every read lands here first */
    size_t scratch_cap;
    SfFrameTransport *transport;
    ThriftProtocol *protocol;
    size_t out_total;      /* replies waiting unsent on this thread's connections */
    size_t out_budget;     /* this thread's share of max_output_buffer */
    int64_t last_tick_ms;
    unsigned seen_drop_epoch; /* the server's drop_epoch when this thread last dropped */
    sf_thread_stats stats;
};

struct sf_server {
    sf_server_options opts;
    char *bind_address;
    ThriftProcessor *processor;
    sf_frame_direct_fn direct; /* answers the calls it knows first; NULL = none */
    void *direct_ctx;
    int listen_fd;           /* bound; listening while `listening` (thread 0 owns both) */
    int port;
    bool listening;
    atomic_bool want_listening;
    atomic_bool listening_now; /* thread 0's `listening`, for the stats and waiters */
    GMutex listening_lock;     /* with listening_cond: sf_server_wait_listening */
    GCond listening_cond;
    atomic_uint drop_epoch;  /* bumped when listening stops: every thread drops its connections */
    int64_t last_listen_error_log_ms;
    sf_thread *threads;
    int nthreads;
    unsigned next_thread;  /* round robin for new connections (thread 0 only) */
    atomic_int open_connections;
    int reserve_fd;        /* /dev/null, given up to take one connection off the
                            * backlog when accept() runs out of descriptors */
    bool listen_paused;    /* the listener is out of epoll until accept_resume_ms */
    int64_t accept_resume_ms;
    sf_ratelog accept_log, refusal_log, bad_frame_log, frame_timeout_log, cut_frame_log,
        watch_log, write_timeout_log, budget_log;
    atomic_bool stopping;
    int64_t stop_deadline_ms;
    bool started, stopped;
};

static int sf_server_bind(sf_server *s, GError **error);

/* Publishes thread 0's listening state and wakes whoever waits for it. */
static void sf_server_note_listening(sf_server *s, bool listening)
{
    g_mutex_lock(&s->listening_lock);
    atomic_store(&s->listening_now, listening);
    g_cond_broadcast(&s->listening_cond);
    g_mutex_unlock(&s->listening_lock);
}

/* epoll tags that are not connections. */
static char sf_tag_listener, sf_tag_wake;

G_DEFINE_QUARK(sf-server-error-quark, sf_server_error)

/* Adds n to a counter only its own thread writes: no locked instruction. */
static void sf_bump(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* Replies waiting unsent on c. */
static size_t sf_conn_pending(const sf_conn *c)
{
    return c->out_len - c->out_off;
}

/* Books a change of c's unsent replies, from `before` bytes to what it holds now, in
 * the thread's total, and keeps the write-progress clock: once every byte that waited
 * at the last mark has been sent, a new mark starts with what waits now. So a reader
 * that keeps up never times out, even if its replies never drain to zero, and one that
 * takes a trickle does, however often it reads. */
static void sf_conn_account(sf_thread *t, sf_conn *c, size_t before)
{
    size_t after = sf_conn_pending(c);
    t->out_total = t->out_total - before + after;
    if (after == 0) {
        c->out_since_ms = 0;
    } else if (c->out_since_ms == 0 || c->out_sent >= c->out_mark) {
        c->out_since_ms = sf_clocks_coarse_ms();
        c->out_mark = c->out_sent + after;
    }
    atomic_store_explicit(&t->stats.output_buffered, t->out_total, memory_order_relaxed);
}

/* Writes a warning or message through a rate limiter: at most one line of its kind a
 * second, the next one saying how many were held back. */
static void sf_server_log_limited(sf_ratelog *rl, GLogLevelFlags level, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
static void sf_server_log_limited(sf_ratelog *rl, GLogLevelFlags level, const char *fmt, ...)
{
    uint64_t suppressed;
    if (!sf_ratelog_allow(rl, SF_RATELOG_INTERVAL_MS, &suppressed))
        return;
    va_list ap;
    va_start(ap, fmt);
    char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    char note[64];
    sf_ratelog_note(suppressed, note, sizeof note);
    g_log(NULL, level, "%s%s", msg, note);
    g_free(msg);
}

/* Registers or updates a connection's epoll interest when it changed. */
static void sf_conn_set_events(sf_thread *t, sf_conn *c, uint32_t events)
{
    if (c->events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(t->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        g_warning("epoll_ctl on connection from %s failed: %s", c->peer, g_strerror(errno));
    c->events = events;
}

/* Closes a connection and frees its buffers. The struct itself is freed at the end of
 * the event batch (sf_thread_bury), since a later event of the same batch may still
 * name it: the output budget closes connections other than the one being served. */
static void sf_conn_close(sf_thread *t, sf_conn *c)
{
    t->out_total -= sf_conn_pending(c);
    atomic_store_explicit(&t->stats.output_buffered, t->out_total, memory_order_relaxed);
    /* A request in flight holds the socket open past close(): cancel it, so that the
     * client sees its connection end now. */
    if ((c->recv_queued && !sf_uring_cancel(t->uring, c, SF_OP_RECV)) ||
        (c->poll_queued && !sf_uring_cancel(t->uring, c, SF_OP_WRITABLE)))
        g_warning("cannot cancel io_uring requests of connection from %s: %s; it closes when "
                  "they end", c->peer, g_strerror(errno));
    close(c->fd);
    c->fd = -1;
    if (c->prev)
        c->prev->next = c->next;
    else
        t->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    g_free(c->in);
    g_free(c->out);
    c->in = c->out = NULL;
    c->in_len = c->out_len = c->out_off = 0;
    c->prev = NULL;
    c->next = t->dead;
    t->dead = c;
    atomic_fetch_sub_explicit(&t->server->open_connections, 1, memory_order_relaxed);
}

/* Frees the connections closed during the last event batch, but on io_uring not those
 * with a request still in flight, whose completion names them; all of them when the ring
 * is gone (all = true). */
static void sf_thread_bury(sf_thread *t, bool all)
{
    sf_conn **link = &t->dead;
    while (*link != NULL) {
        sf_conn *c = *link;
        if (!all && (c->recv_queued || c->poll_queued)) {
            link = &c->next;
            continue;
        }
        *link = c->next;
        g_free(c);
    }
}

/* Closes a connection that broke a limit on its replies with a reset, so that what the
 * kernel still holds for it is dropped at once rather than trickled out. */
static void sf_conn_abort(sf_thread *t, sf_conn *c)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    if (setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0)
        g_debug("SO_LINGER on connection from %s failed: %s", c->peer, g_strerror(errno));
    sf_conn_close(t, c);
}

/* Takes over an accepted socket: non-blocking, no Nagle delay, watched for input. */
static void sf_conn_adopt(sf_thread *t, int fd)
{
    sf_conn *c = g_new0(sf_conn, 1);
    c->fd = fd;
    struct sockaddr_storage addr;
    socklen_t alen = sizeof addr;
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&addr, &alen) == 0) {
        if (addr.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&addr;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
            port = ntohs(a->sin_port);
        } else if (addr.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&addr;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
            port = ntohs(a->sin6_port);
        }
    }
    snprintf(c->peer, sizeof c->peer, "%s:%d", host, port);
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        g_debug("TCP_NODELAY on connection from %s failed: %s", c->peer, g_strerror(errno));
    c->last_active_ms = sf_clocks_coarse_ms();
    c->events = EPOLLIN | EPOLLRDHUP;
    struct epoll_event ev = {.events = c->events, .data.ptr = c};
    c->next = t->conns;
    if (t->conns)
        t->conns->prev = c;
    t->conns = c;
    bool watched = t->uring != NULL ? (c->recv_queued = sf_uring_recv(t->uring, fd, c, SF_OP_RECV))
                                    : epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
    if (!watched) {
        sf_server_log_limited(&t->server->watch_log, G_LOG_LEVEL_WARNING,
                              "cannot watch connection from %s: %s", c->peer, g_strerror(errno));
        sf_conn_close(t, c);
        return;
    }
    sf_bump(&t->stats.connections_accepted, 1);
}

/* Writes as much pending output as the socket takes. FALSE when the
 * connection is broken and must be closed. */
static bool sf_conn_write_pending(sf_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return true;
            g_debug("write to %s failed: %s", c->peer, g_strerror(errno));
            return false;
        }
        c->out_off += (size_t)n;
        c->out_sent += (uint64_t)n;
        c->last_active_ms = sf_clocks_coarse_ms();
    }
    g_free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    return true;
}

/* Sends the replies the thread produced for c in one write when possible;
 * what the socket does not take is kept on the connection. */
static bool sf_conn_flush(sf_thread *t, sf_conn *c)
{
    size_t before = sf_conn_pending(c);
    size_t len;
    const uint8_t *reply = sf_frame_transport_output(t->transport, &len);
    size_t sent = 0;
    bool ok = true;
    if (len > 0 && c->out_len == 0) {
        while (sent < len) {
            ssize_t n = send(c->fd, reply + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK) {
                    g_debug("write to %s failed: %s", c->peer, g_strerror(errno));
                    ok = false;
                }
                break;
            }
            sent += (size_t)n;
        }
        c->out_sent += sent;
    }
    if (ok && sent < len) {
        /* Compact, then keep the rest for EPOLLOUT. */
        size_t pending = c->out_len - c->out_off;
        uint8_t *buf = g_malloc(pending + (len - sent));
        if (pending)
            memcpy(buf, c->out + c->out_off, pending);
        memcpy(buf + pending, reply + sent, len - sent);
        g_free(c->out);
        c->out = buf;
        c->out_off = 0;
        c->out_len = pending + (len - sent);
        ok = sf_conn_write_pending(c);
    }
    sf_conn_account(t, c, before);
    sf_frame_transport_reset_output(t->transport);
    return ok;
}

/* Answers every complete frame in buf[0..len) while output stays under the
 * high-water mark. Returns the bytes consumed, or -1 when the connection sent
 * a bad frame and must be closed (the reason is logged once). */
static ssize_t sf_conn_process(sf_thread *t, sf_conn *c, const uint8_t *buf, size_t len)
{
    size_t pending = c->out_len - c->out_off, frames = 0;
    size_t room = pending < SF_OUT_HIGH_WATER ? SF_OUT_HIGH_WATER - pending : 0;
    GError *err = NULL;
    sf_server *s = t->server;
    ssize_t used = sf_frame_transport_answer(t->transport, t->protocol, s->processor, s->direct,
                                             s->direct_ctx, buf, len,
                                             (size_t)s->opts.max_frame_size, room, &frames, &err);
    sf_bump(&t->stats.frames_processed, frames);
    if (used < 0) {
        sf_server_log_limited(&t->server->bad_frame_log, G_LOG_LEVEL_MESSAGE,
                              "closing connection from %s: %s", c->peer, err->message);
        g_clear_error(&err);
        sf_bump(&t->stats.frames_refused, 1);
    }
    return used;
}

/* Asks the owner whether the replies just made may be sent; when not, drops them and
 * closes the connection unanswered. Returns true when c was closed. */
static bool sf_conn_withhold(sf_thread *t, sf_conn *c)
{
    const sf_server_options *o = &t->server->opts;
    if (o->withhold_replies == NULL || !o->withhold_replies(o->withhold_ctx))
        return false;
    g_debug("closing connection from %s unanswered: not serving", c->peer);
    sf_frame_transport_reset_output(t->transport);
    sf_bump(&t->stats.replies_withheld, 1);
    sf_conn_close(t, c);
    return true;
}

/* io_uring: queues what c waits for and has not queued yet. A receive queued earlier and
 * no longer wanted (the output backed up meanwhile) is left to complete: its bytes are held
 * like any input held back, and no further receive is queued until the output drains.
 * Closes c and returns false when the ring cannot take a request. */
static bool sf_conn_queue(sf_thread *t, sf_conn *c, bool want_in, bool want_out)
{
    if (want_in && !c->recv_queued)
        c->recv_queued = sf_uring_recv(t->uring, c->fd, c, SF_OP_RECV);
    if (want_out && !c->poll_queued)
        c->poll_queued = sf_uring_poll(t->uring, c->fd, POLLOUT, c, SF_OP_WRITABLE);
    if ((want_in && !c->recv_queued) || (want_out && !c->poll_queued)) {
        sf_server_log_limited(&t->server->watch_log, G_LOG_LEVEL_WARNING,
                              "cannot watch connection from %s: io_uring: %s", c->peer,
                              g_strerror(errno));
        sf_conn_close(t, c);
        return false;
    }
    return true;
}

/* Chooses what to wait for from the connection's state: input unless output is backed up
 * or the client is gone; room to send while output is pending. Returns false when c
 * was closed. */
static bool sf_conn_update_interest(sf_thread *t, sf_conn *c)
{
    size_t pending = c->out_len - c->out_off;
    bool want_in = !c->peer_closed && !c->draining && pending < SF_OUT_HIGH_WATER;
    if (t->uring != NULL)
        return sf_conn_queue(t, c, want_in, pending > 0);
    uint32_t ev = 0;
    if (want_in)
        ev |= EPOLLIN | EPOLLRDHUP;
    if (pending > 0)
        ev |= EPOLLOUT;
    sf_conn_set_events(t, c, ev);
    return true;
}

/* Takes got[0..got_len) (bytes io_uring received) and reads once more (when do_read),
 * answers the complete frames buffered, sends the replies and keeps the remainder.
 * Closes the connection when it is finished or broken; returns false then. */
static bool sf_conn_serve(sf_thread *t, sf_conn *c, const uint8_t *got, size_t got_len,
                          bool do_read)
{
    int64_t now = sf_clocks_coarse_ms();
    for (;;) {
        size_t have = c->in_len;
        bool had_partial = have > 0;
        if (have + got_len > t->scratch_cap) {
            /* Input held back for backed-up output, and a receive queued before: rare. */
            t->scratch_cap = have + got_len;
            t->scratch = g_realloc(t->scratch, t->scratch_cap);
        }
        if (have > 0) {
            memcpy(t->scratch, c->in, have);
            g_free(c->in);
            c->in = NULL;
            c->in_len = 0;
        }
        if (got_len > 0) {
            memcpy(t->scratch + have, got, got_len);
            have += got_len;
            got_len = 0;
            c->last_active_ms = now;
        }
        if (do_read && !c->recv_queued && have < t->scratch_cap) {
            ssize_t n;
            do {
                n = recv(c->fd, t->scratch + have, t->scratch_cap - have, MSG_DONTWAIT);
            } while (n < 0 && errno == EINTR);
            if (n > 0) {
                have += (size_t)n;
                c->last_active_ms = now;
            } else if (n == 0) {
                c->peer_closed = true;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                g_debug("read from %s failed: %s", c->peer, g_strerror(errno));
                sf_conn_close(t, c);
                return false;
            }
        }
        do_read = false;
        ssize_t used = sf_conn_process(t, c, t->scratch, have);
        if (used != 0 && sf_conn_withhold(t, c))
            return false;
        if (used < 0) {
            sf_conn_flush(t, c); /* best effort: the replies to earlier frames */
            sf_conn_close(t, c);
            return false;
        }
        size_t left = have - (size_t)used;
        if (left > 0) {
            c->in = g_memdup2(t->scratch + used, left);
            c->in_len = left;
            if (used > 0 || !had_partial)
                c->frame_start_ms = now;
        } else {
            c->frame_start_ms = 0;
        }
        if (!sf_conn_flush(t, c)) {
            sf_conn_close(t, c);
            return false;
        }
        size_t pending = c->out_len - c->out_off;
        /* Frames held back for output that has now drained: answer them. */
        if (used > 0 && c->in_len >= 4 && pending < SF_OUT_HIGH_WATER)
            continue;
        if ((c->peer_closed || c->draining) && pending == 0) {
            if (c->peer_closed && c->in_len > 0) {
                sf_server_log_limited(&t->server->cut_frame_log, G_LOG_LEVEL_MESSAGE,
                                      "closing connection from %s: it closed in the middle "
                                      "of a frame (%zu bytes received)", c->peer, c->in_len);
                sf_bump(&t->stats.frames_refused, 1);
            }
            sf_conn_close(t, c);
            return false;
        }
        return sf_conn_update_interest(t, c);
    }
}

/* Handles writability: sends pending output, then answers frames held back
 * while the output was backed up. Returns false when c was closed. */
static bool sf_conn_writable(sf_thread *t, sf_conn *c)
{
    size_t before = sf_conn_pending(c);
    bool ok = sf_conn_write_pending(c);
    sf_conn_account(t, c, before);
    if (!ok) {
        sf_conn_close(t, c);
        return false;
    }
    size_t pending = c->out_len - c->out_off;
    if (pending < SF_OUT_HIGH_WATER && c->in_len > 0)
        return sf_conn_serve(t, c, NULL, 0, false);
    if (pending == 0 && (c->peer_closed || c->draining)) {
        sf_conn_close(t, c);
        return false;
    }
    return sf_conn_update_interest(t, c);
}

/* Counts a refused connection and logs refusals at most once a second, with how many
 * (thread 0 alone accepts, so its count is the total). */
static void sf_server_log_refusal(sf_thread *t)
{
    sf_server *s = t->server;
    uint64_t total = atomic_fetch_add(&t->stats.connections_refused, 1) + 1;
    sf_server_log_limited(&s->refusal_log, G_LOG_LEVEL_WARNING,
                          "refusing connection: %d connections open (max_connections); "
                          "%" G_GUINT64_FORMAT " refused so far",
                          s->opts.max_connections, total);
}

/* accept() ran out of descriptors or memory: the listener stays readable, so polling it
 * again at once would spin. Takes one waiting client off the backlog with the reserve
 * descriptor (it sees its connection closed rather than hanging), then rests the
 * listener for SF_ACCEPT_BACKOFF_MS. */
static void sf_thread_accept_exhausted(sf_thread *t, int err)
{
    sf_server *s = t->server;
    sf_server_log_limited(&s->accept_log, G_LOG_LEVEL_WARNING,
                          "accept on port %d failed: %s; %d connections open; not accepting "
                          "for %d ms (raise `ulimit -n` or lower max_connections)",
                          s->port, g_strerror(err), atomic_load(&s->open_connections),
                          SF_ACCEPT_BACKOFF_MS);
    if (s->reserve_fd >= 0 && (err == EMFILE || err == ENFILE)) {
        close(s->reserve_fd);
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            close(fd);
        s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (epoll_ctl(t->epfd, EPOLL_CTL_DEL, s->listen_fd, NULL) != 0)
        g_warning("cannot pause the listener on port %d: %s", s->port, g_strerror(errno));
    s->listen_paused = true;
    s->accept_resume_ms = sf_clocks_coarse_ms() + SF_ACCEPT_BACKOFF_MS;
}

/* Puts the listener back into epoll once its back-off is over (thread 0). */
static void sf_thread_resume_accept(sf_thread *t, int64_t now)
{
    sf_server *s = t->server;
    if (!s->listen_paused || now < s->accept_resume_ms || s->listen_fd < 0 || !s->listening)
        return;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &sf_tag_listener};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, s->listen_fd, &ev) != 0) {
        g_warning("cannot watch the listener on port %d again: %s", s->port, g_strerror(errno));
        s->accept_resume_ms = now + SF_ACCEPT_BACKOFF_MS;
        return;
    }
    s->listen_paused = false;
}

/* Accepts waiting connections (thread 0 owns the listener) and deals them
 * round robin to the threads. */
static void sf_thread_accept(sf_thread *t)
{
    sf_server *s = t->server;
    for (int i = 0; i < 64 && atomic_load(&s->want_listening); i++) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EINTR || err == ECONNABORTED)
                continue;
            if (err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS)
                sf_thread_accept_exhausted(t, err);
            else if (err != EAGAIN && err != EWOULDBLOCK)
                sf_server_log_limited(&s->accept_log, G_LOG_LEVEL_WARNING,
                                      "accept on port %d failed: %s", s->port, g_strerror(err));
            return;
        }
        if (atomic_fetch_add(&s->open_connections, 1) >= s->opts.max_connections) {
            atomic_fetch_sub(&s->open_connections, 1);
            close(fd);
            sf_server_log_refusal(t);
            continue;
        }
        sf_thread *target = &s->threads[s->next_thread++ % (unsigned)s->nthreads];
        if (target == t) {
            sf_conn_adopt(t, fd);
            continue;
        }
        g_mutex_lock(&target->queue_lock);
        g_array_append_val(target->queue, fd);
        g_mutex_unlock(&target->queue_lock);
        uint64_t one = 1;
        if (write(target->wake_fd, &one, sizeof one) != sizeof one)
            g_warning("cannot wake server thread %d: %s", target->index, g_strerror(errno));
    }
}

/* Takes the connections other threads queued for this one. */
static void sf_thread_take_queue(sf_thread *t)
{
    uint64_t count;
    if (read(t->wake_fd, &count, sizeof count) < 0 && errno != EAGAIN)
        g_debug("reading the wake-up counter failed: %s", g_strerror(errno));
    g_mutex_lock(&t->queue_lock);
    GArray *q = t->queue;
    t->queue = g_array_new(FALSE, FALSE, sizeof(int));
    g_mutex_unlock(&t->queue_lock);
    /* A connection accepted just before the port closed is closed too: every thread may
     * have dropped its connections already. */
    bool closed_port = !atomic_load(&t->server->want_listening);
    bool stopping = atomic_load(&t->server->stopping) || closed_port;
    for (guint i = 0; i < q->len; i++) {
        int fd = g_array_index(q, int, i);
        if (stopping) {
            close(fd);
            atomic_fetch_sub(&t->server->open_connections, 1);
            if (closed_port)
                sf_bump(&t->stats.connections_dropped, 1);
        } else {
            sf_conn_adopt(t, fd);
        }
    }
    g_array_free(q, TRUE);
}

/* Closes connections whose client went silent or whose frame stalled. */
static void sf_thread_check_timeouts(sf_thread *t, int64_t now)
{
    const sf_server_options *o = &t->server->opts;
    sf_conn *next;
    for (sf_conn *c = t->conns; c != NULL; c = next) {
        next = c->next;
        bool held_back = (c->out_len - c->out_off) >= SF_OUT_HIGH_WATER;
        if (c->in_len > 0 && c->frame_start_ms > 0 && !held_back &&
            now - c->frame_start_ms >= o->frame_timeout_ms) {
            sf_server_log_limited(&t->server->frame_timeout_log, G_LOG_LEVEL_MESSAGE,
                                  "closing connection from %s: a frame stayed incomplete for "
                                  "%d ms (frame_timeout_ms; %zu bytes received)",
                                  c->peer, o->frame_timeout_ms, c->in_len);
            sf_bump(&t->stats.frame_timeouts, 1);
            sf_conn_close(t, c);
        } else if (c->out_since_ms > 0 && now - c->out_since_ms >= o->write_timeout_ms) {
            sf_server_log_limited(&t->server->write_timeout_log, G_LOG_LEVEL_MESSAGE,
                                  "closing connection from %s: %zu bytes of replies waited "
                                  "unsent for %d ms (write_timeout_ms): it reads too slowly",
                                  c->peer, sf_conn_pending(c), o->write_timeout_ms);
            sf_bump(&t->stats.write_timeouts, 1);
            sf_conn_abort(t, c);
        } else if (o->idle_timeout_ms > 0 && now - c->last_active_ms >= o->idle_timeout_ms) {
            g_debug("closing connection from %s: idle for %d ms (idle_timeout_ms)", c->peer,
                    o->idle_timeout_ms);
            sf_bump(&t->stats.idle_timeouts, 1);
            sf_conn_close(t, c);
        }
    }
}

/* Keeps this thread's unsent replies within its share of max_output_buffer by closing
 * the connections holding the most (the slowest readers), one rate-limited line. */
static void sf_thread_enforce_budget(sf_thread *t)
{
    unsigned closed = 0;
    size_t freed = 0;
    while (t->out_total > t->out_budget) {
        sf_conn *worst = NULL;
        for (sf_conn *c = t->conns; c != NULL; c = c->next)
            if (worst == NULL || sf_conn_pending(c) > sf_conn_pending(worst))
                worst = c;
        if (worst == NULL || sf_conn_pending(worst) == 0)
            break;
        freed += sf_conn_pending(worst);
        sf_conn_abort(t, worst);
        closed++;
    }
    if (closed == 0)
        return;
    sf_bump(&t->stats.output_budget_closes, closed);
    sf_server_log_limited(&t->server->budget_log, G_LOG_LEVEL_WARNING,
                          "replies waiting unsent passed max_output_buffer = %d bytes: closed "
                          "the %u slowest reader(s), freeing %zu bytes",
                          t->server->opts.max_output_buffer, closed, freed);
}

/* Begins a graceful stop on this thread: answers what has arrived and
 * leaves only connections with output still to send. */
static void sf_thread_begin_drain(sf_thread *t)
{
    sf_server *s = t->server;
    if (t->index == 0 && s->listen_fd >= 0) {
        if (s->listening)
            epoll_ctl(t->epfd, EPOLL_CTL_DEL, s->listen_fd, NULL);
        close(s->listen_fd);
        s->listen_fd = -1;
        s->listening = false;
        sf_server_note_listening(s, false);
    }
    sf_conn *next;
    for (sf_conn *c = t->conns; c != NULL; c = next) {
        next = c->next;
        c->draining = true;
        /* On io_uring, bytes may wait in the receive in flight: reading the socket now
         * could answer later bytes before them. Its completion (data, or cancelled)
         * serves the connection instead. */
        if (c->recv_queued && sf_uring_cancel(t->uring, c, SF_OP_RECV))
            continue;
        sf_conn_serve(t, c, NULL, 0, true);
    }
}

/* Closes every connection of this thread, unanswered, once after each time listening
 * stopped: what they sent was read while the node served, or not at all. */
static void sf_thread_drop_if_asked(sf_thread *t)
{
    unsigned epoch = atomic_load(&t->server->drop_epoch);
    if (epoch == t->seen_drop_epoch)
        return;
    t->seen_drop_epoch = epoch;
    uint64_t dropped = 0;
    while (t->conns != NULL) {
        sf_conn_close(t, t->conns);
        dropped++;
    }
    sf_bump(&t->stats.connections_dropped, dropped);
}

/* Logs a failure to take the port back, at most every SF_LISTEN_RETRY_LOG_MS: it is
 * retried every loop turn meanwhile. */
static void sf_server_log_listen_error(sf_server *s, int64_t now, const char *message)
{
    if (now - s->last_listen_error_log_ms < SF_LISTEN_RETRY_LOG_MS)
        return;
    s->last_listen_error_log_ms = now;
    g_warning("%s; retrying until it works", message);
}

/* Thread 0 makes the listener what the owner asked for: listening (and watched), or
 * closed and replaced by a socket only bound, which keeps the port ours. */
static void sf_thread_sync_listener(sf_thread *t, int64_t now)
{
    sf_server *s = t->server;
    bool want = atomic_load(&s->want_listening);
    if (want == s->listening && (want || s->listen_fd >= 0))
        return;
    if (!want && s->listening) {
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, s->listen_fd, NULL);
        close(s->listen_fd);
        s->listen_fd = -1;
        s->listening = false;
        sf_server_note_listening(s, false);
        s->listen_paused = false; /* an accept back-off ends with the listener */
        g_message("stopped accepting connections on port %d", s->port);
    }
    if (s->listen_fd < 0) {
        GError *err = NULL;
        s->listen_fd = sf_server_bind(s, &err);
        if (s->listen_fd < 0) {
            sf_server_log_listen_error(s, now, err->message);
            g_error_free(err);
            return;
        }
    }
    if (!want)
        return;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &sf_tag_listener};
    if (listen(s->listen_fd, SF_LISTEN_BACKLOG) != 0 ||
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, s->listen_fd, &ev) != 0) {
        char *msg = g_strdup_printf("cannot listen on %s:%d again: %s (has another process "
                                    "taken the port?)", s->bind_address, s->port,
                                    g_strerror(errno));
        sf_server_log_listen_error(s, now, msg);
        g_free(msg);
        close(s->listen_fd); /* a fresh bind next turn */
        s->listen_fd = -1;
        return;
    }
    s->listening = true;
    g_message("accepting connections on port %d", s->port);
    sf_server_note_listening(s, true);
}

void sf_server_set_listening(sf_server *s, bool listening)
{
    bool was = atomic_exchange(&s->want_listening, listening);
    if (!listening && was)
        atomic_fetch_add(&s->drop_epoch, 1);
    for (int i = 0; i < s->nthreads; i++) {
        uint64_t one = 1;
        sf_thread *t = &s->threads[i];
        if (t->wake_fd >= 0 && write(t->wake_fd, &one, sizeof one) != sizeof one)
            g_warning("cannot wake server thread %d: %s", i, g_strerror(errno));
    }
}

bool sf_server_wait_listening(sf_server *s, int timeout_ms)
{
    gint64 until = g_get_monotonic_time() + (gint64)timeout_ms * G_TIME_SPAN_MILLISECOND;
    g_mutex_lock(&s->listening_lock);
    while (!atomic_load(&s->listening_now) &&
           g_cond_wait_until(&s->listening_cond, &s->listening_lock, until)) {
    }
    bool listening = atomic_load(&s->listening_now);
    g_mutex_unlock(&s->listening_lock);
    return listening;
}

/* Handles what the thread's epoll instance reports, waiting up to timeout_ms: on epoll
 * everything, on io_uring the listener and the wake-up. False when the loop must end. */
static bool sf_thread_turn_epoll(sf_thread *t, bool draining, int timeout_ms)
{
    struct epoll_event events[SF_MAX_EVENTS];
    int n = epoll_wait(t->epfd, events, SF_MAX_EVENTS, timeout_ms);
    if (n < 0 && errno != EINTR) {
        g_critical("epoll_wait in server thread %d failed: %s", t->index, g_strerror(errno));
        return false;
    }
    for (int i = 0; i < n; i++) {
        void *tag = events[i].data.ptr;
        uint32_t ev = events[i].events;
        if (tag == &sf_tag_listener) {
            if (!draining)
                sf_thread_accept(t);
        } else if (tag == &sf_tag_wake) {
            sf_thread_take_queue(t);
        } else {
            sf_conn *c = tag;
            if (c->fd < 0)
                continue; /* closed earlier in this batch */
            if (ev & EPOLLERR) {
                sf_conn_close(t, c);
                continue;
            }
            if ((ev & EPOLLOUT) && !sf_conn_writable(t, c))
                continue;
            if ((ev & EPOLLHUP) && !(c->events & EPOLLIN)) {
                sf_conn_close(t, c); /* gone both ways: nothing can be sent */
                continue;
            }
            if ((ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) && (c->events & EPOLLIN))
                sf_conn_serve(t, c, NULL, 0, true);
            if (t->out_total > t->out_budget)
                sf_thread_enforce_budget(t);
        }
    }
    return true;
}

/* A connection's receive completed: serve what it brought (reading on when it filled its
 * buffer, or when the connection drains and nothing else is in flight), or note the
 * client's FIN, or close on an error. */
static void sf_conn_received(sf_thread *t, sf_conn *c, const sf_uring_event *e)
{
    c->recv_queued = false;
    if (c->fd < 0)
        return; /* closed meanwhile: the bytes are not ours to answer */
    if (e->res > 0) {
        bool more = e->res == SF_URING_BUFFER_SIZE || c->draining;
        sf_conn_serve(t, c, e->data, (size_t)e->res, more);
    } else if (e->res == 0) {
        c->peer_closed = true;
        sf_conn_serve(t, c, NULL, 0, false);
    } else if (e->res == -ECANCELED) {
        sf_conn_serve(t, c, NULL, 0, c->draining); /* only a drain cancels a live one */
    } else if (e->res == -ENOBUFS) {
        /* Data came when every buffer was taken: read it now, as epoll would, rather
         * than queue again behind the connections that took them. */
        sf_conn_serve(t, c, NULL, 0, true);
    } else if (e->res == -EINTR || e->res == -EAGAIN) {
        sf_conn_update_interest(t, c);
    } else {
        g_debug("read from %s failed: %s", c->peer, g_strerror(-e->res));
        sf_conn_close(t, c);
    }
}

/* The listener or the wake-up is ready: handles them and watches again. False when the
 * loop must end. */
static bool sf_thread_take_events(sf_thread *t, bool draining)
{
    bool ok = sf_thread_turn_epoll(t, draining, 0);
    if (!sf_uring_poll(t->uring, t->epfd, POLLIN, t, SF_OP_EVENTS)) {
        g_critical("server thread %d cannot watch its listener and wake-up on io_uring: %s",
                   t->index, g_strerror(errno));
        ok = false;
    }
    return ok;
}

/* Handles one connection's io_uring completion. */
static void sf_thread_complete(sf_thread *t, sf_uring_event *e)
{
    sf_conn *c = e->owner;
    if (e->kind == SF_OP_RECV) {
        sf_conn_received(t, c, e);
    } else {
        c->poll_queued = false;
        if (c->fd >= 0 && e->res != -ECANCELED)
            sf_conn_writable(t, c); /* an error shows in the send */
    }
    sf_uring_release(t->uring, e);
    if (t->out_total > t->out_budget)
        sf_thread_enforce_budget(t);
}

/* One turn of the io_uring loop: submits what was queued, waits for completions (at most
 * SF_TICK_MS) and handles every one that has arrived, in order, before waiting again:
 * left in the ring, older ones would wait behind those the next wait brings. The listener
 * comes last, as on epoll, so that a client gone in the same turn frees its slot before
 * new connections are counted against max_connections. False when the loop must end. */
static bool sf_thread_turn_uring(sf_thread *t, bool draining)
{
    sf_uring_event events[SF_MAX_EVENTS];
    int n = sf_uring_wait(t->uring, SF_TICK_MS, events, SF_MAX_EVENTS);
    if (n < 0) {
        g_critical("io_uring wait in server thread %d failed: %s", t->index, g_strerror(-n));
        return false;
    }
    bool events_ready = false;
    while (n > 0) {
        for (int i = 0; i < n; i++) {
            if (events[i].kind == SF_OP_EVENTS)
                events_ready = true;
            else
                sf_thread_complete(t, &events[i]);
        }
        n = n == SF_MAX_EVENTS ? sf_uring_harvest(t->uring, events, SF_MAX_EVENTS) : 0;
    }
    return !events_ready || sf_thread_take_events(t, draining);
}

/* Moves this thread onto its io_uring, made by sf_server_start; on failure it runs on
 * epoll, and says so. */
static void sf_thread_start_uring(sf_thread *t)
{
    char why[160];
    bool started = sf_uring_start(t->uring, why, sizeof why);
    if (started && sf_uring_poll(t->uring, t->epfd, POLLIN, t, SF_OP_EVENTS))
        return;
    if (started)
        snprintf(why, sizeof why, "%s", g_strerror(errno));
    g_warning("server thread %d cannot use io_uring (%s): it serves on epoll", t->index, why);
    sf_uring_free(t->uring);
    t->uring = NULL;
}

/* One event loop: accept (thread 0), read, answer, write, time out. */
static void *sf_thread_main(void *arg)
{
    sf_thread *t = arg;
    sf_server *s = t->server;
    bool draining = false;
    if (t->uring != NULL)
        sf_thread_start_uring(t);
    t->last_tick_ms = sf_clocks_coarse_ms();
    for (;;) {
        bool ok = t->uring != NULL ? sf_thread_turn_uring(t, draining)
                                   : sf_thread_turn_epoll(t, draining, SF_TICK_MS);
        if (!ok)
            break;
        sf_thread_bury(t, false);
        int64_t now = sf_clocks_coarse_ms();
        if (!draining && atomic_load(&s->stopping)) {
            draining = true;
            sf_thread_begin_drain(t);
        }
        if (!draining) {
            sf_thread_drop_if_asked(t);
            if (t->index == 0)
                sf_thread_sync_listener(t, now);
        }
        if (draining && (t->conns == NULL || now >= s->stop_deadline_ms))
            break;
        if (t->index == 0 && !draining)
            sf_thread_resume_accept(t, now);
        if (now - t->last_tick_ms >= SF_TICK_MS) {
            t->last_tick_ms = now;
            sf_thread_check_timeouts(t, now);
        }
    }
    while (t->conns != NULL)
        sf_conn_close(t, t->conns);
    sf_uring_free(t->uring); /* ends every request in flight */
    t->uring = NULL;
    sf_thread_bury(t, true);
    return NULL;
}

/* Opens a non-blocking socket bound to address:port, not listening yet (connects are
 * refused); the first bind learns the port when opts.port is 0, later ones reuse it. */
static int sf_server_bind(sf_server *s, GError **error)
{
    struct addrinfo *res = NULL;
    char why[256];
    int port = s->port > 0 ? s->port : s->opts.port;
    if (sf_bindaddr_resolve(s->bind_address, port, &res, why, sizeof why) != 0) {
        g_set_error(error, SF_SERVER_ERROR, 0, "bind address %s", why);
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        g_set_error(error, SF_SERVER_ERROR, 0, "cannot create a socket: %s", g_strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    int one = 1;
    /* Connections we closed linger in TIME_WAIT; they must not keep us off our own port. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        g_warning("SO_REUSEADDR on %s failed: %s", s->bind_address, g_strerror(errno));
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
        g_set_error(error, SF_SERVER_ERROR, 0,
                    "cannot bind %s:%d: %s (is another server using the port?)",
                    s->bind_address, port, g_strerror(errno));
        close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_storage addr;
    socklen_t alen = sizeof addr;
    if (getsockname(fd, (struct sockaddr *)&addr, &alen) != 0) {
        g_set_error(error, SF_SERVER_ERROR, 0, "getsockname failed: %s", g_strerror(errno));
        close(fd);
        return -1;
    }
    s->port = addr.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&addr)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&addr)->sin_port);
    return fd;
}

/* Raises the soft open-file limit toward the hard one, so that an operator's default
 * `ulimit -n` of 1024 does not cap a server configured for more, then clamps
 * max_connections to the descriptors left after SF_FD_RESERVE, logging the clamp once:
 * past that, accept() would fail with EMFILE, and the admin endpoint and ZooKeeper would
 * have none left either. */
static void sf_server_fit_descriptors(sf_server_options *o)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        g_warning("cannot read the open-file limit: %s; max_connections = %d is not checked "
                  "against it", g_strerror(errno), o->max_connections);
        return;
    }
    rlim_t want = (rlim_t)o->max_connections + SF_FD_RESERVE + 4 * (rlim_t)o->threads;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = rl;
        raised.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            rl = raised;
        else
            g_warning("cannot raise the open-file limit from %lu to %lu: %s",
                      (unsigned long)rl.rlim_cur, (unsigned long)raised.rlim_cur,
                      g_strerror(errno));
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return;
    rlim_t kept = SF_FD_RESERVE + 4 * (rlim_t)o->threads;
    int fit = rl.rlim_cur > kept + 16 ? (int)(rl.rlim_cur - kept) : 16;
    g_warning("max_connections = %d does not fit the open-file limit of %lu (ulimit -n; hard "
              "limit %lu) less %lu descriptors kept for the listener, the admin endpoint and "
              "ZooKeeper: serving at most %d connections; raise the hard limit (ulimit -Hn, "
              "systemd LimitNOFILE=) to serve more",
              o->max_connections, (unsigned long)rl.rlim_cur,
              rl.rlim_max == RLIM_INFINITY ? 0ul : (unsigned long)rl.rlim_max,
              (unsigned long)kept, fit);
    o->max_connections = fit;
}

sf_server *sf_server_new(const sf_server_options *opts, ThriftProcessor *processor,
                         GError **error)
{
    char why[160];
    if (!sf_server_options_check(opts, why, sizeof why)) {
        g_set_error(error, SF_SERVER_ERROR, 0, "%s", why);
        return NULL;
    }
    sf_server *s = g_new0(sf_server, 1);
    s->opts = *opts;
    sf_server_fit_descriptors(&s->opts);
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (s->reserve_fd < 0)
        g_warning("cannot open /dev/null for a reserve descriptor: %s", g_strerror(errno));
    s->bind_address = g_strdup(opts->bind_address);
    s->opts.bind_address = s->bind_address;
    s->processor = g_object_ref(processor);
    s->nthreads = opts->threads;
    atomic_init(&s->open_connections, 0);
    atomic_init(&s->stopping, false);
    atomic_init(&s->want_listening, opts->listen_at_start);
    atomic_init(&s->listening_now, false);
    g_mutex_init(&s->listening_lock);
    g_cond_init(&s->listening_cond);
    atomic_init(&s->drop_epoch, 0);
    s->listen_fd = sf_server_bind(s, error);
    if (s->listen_fd >= 0 && opts->listen_at_start) {
        if (listen(s->listen_fd, SF_LISTEN_BACKLOG) != 0) {
            g_set_error(error, SF_SERVER_ERROR, 0,
                        "cannot listen on %s:%d: %s (is another server using the port?)",
                        s->bind_address, s->port, g_strerror(errno));
            close(s->listen_fd);
            s->listen_fd = -1;
        } else {
            s->listening = true;
            atomic_store(&s->listening_now, true);
        }
    }
    if (s->listen_fd < 0) {
        if (s->reserve_fd >= 0)
            close(s->reserve_fd);
        g_mutex_clear(&s->listening_lock);
        g_cond_clear(&s->listening_cond);
        g_object_unref(s->processor);
        g_free(s->bind_address);
        g_free(s);
        return NULL;
    }
    s->threads = g_new0(sf_thread, s->nthreads);
    for (int i = 0; i < s->nthreads; i++) {
        sf_thread *t = &s->threads[i];
        t->server = s;
        t->index = i;
        t->epfd = -1;
        t->wake_fd = -1;
        g_mutex_init(&t->queue_lock);
        t->queue = g_array_new(FALSE, FALSE, sizeof(int));
        t->scratch_cap = (size_t)opts->max_frame_size + 4 + SF_READ_SLACK;
        t->out_budget = (size_t)opts->max_output_buffer / (size_t)s->nthreads;
        t->transport = sf_frame_transport_new();
        t->protocol = sf_bounded_protocol_new(THRIFT_TRANSPORT(t->transport));
    }
    return s;
}

void sf_server_set_direct(sf_server *s, sf_frame_direct_fn direct, void *ctx)
{
    s->direct = direct;
    s->direct_ctx = ctx;
}

int sf_server_port(const sf_server *s)
{
    return s->port;
}

/* Gives each thread an io_uring when the loop asked for allows it. auto settles for epoll
 * when io_uring is unavailable, saying why; io_uring refuses to start instead. */
static gboolean sf_server_make_rings(sf_server *s, GError **error)
{
    if (s->opts.event_loop == SF_SERVER_LOOP_EPOLL)
        return TRUE;
    char why[160];
    for (int i = 0; i < s->nthreads; i++) {
        s->threads[i].uring = sf_uring_new(why, sizeof why);
        if (s->threads[i].uring != NULL)
            continue;
        for (int j = 0; j < i; j++) {
            sf_uring_free(s->threads[j].uring);
            s->threads[j].uring = NULL;
        }
        if (s->opts.event_loop == SF_SERVER_LOOP_IO_URING) {
            g_set_error(error, SF_SERVER_ERROR, 0,
                        "event_loop = io_uring, but io_uring is unavailable: %s (set "
                        "event_loop = epoll or auto)", why);
            return FALSE;
        }
        g_message("io_uring is unavailable (%s): serving on epoll", why);
        return TRUE;
    }
    return TRUE;
}

gboolean sf_server_start(sf_server *s, GError **error)
{
    if (s->started) {
        g_set_error(error, SF_SERVER_ERROR, 0, "the server is already started");
        return FALSE;
    }
    if (!sf_server_make_rings(s, error))
        return FALSE;
    for (int i = 0; i < s->nthreads; i++) {
        sf_thread *t = &s->threads[i];
        t->epfd = epoll_create1(EPOLL_CLOEXEC);
        t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (t->epfd < 0 || t->wake_fd < 0) {
            g_set_error(error, SF_SERVER_ERROR, 0, "cannot create an event loop: %s",
                        g_strerror(errno));
            return FALSE;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &sf_tag_wake};
        if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->wake_fd, &ev) != 0 ||
            (i == 0 && s->listening && (ev.data.ptr = &sf_tag_listener,
                        epoll_ctl(t->epfd, EPOLL_CTL_ADD, s->listen_fd, &ev) != 0))) {
            g_set_error(error, SF_SERVER_ERROR, 0, "epoll_ctl failed: %s", g_strerror(errno));
            return FALSE;
        }
        t->scratch = g_malloc(t->scratch_cap);
    }
    s->started = true;
    const char *loop = s->threads[0].uring != NULL ? "io_uring" : "epoll";
    for (int i = 0; i < s->nthreads; i++) {
        sf_thread *t = &s->threads[i];
        int rc = pthread_create(&t->tid, NULL, sf_thread_main, t);
        if (rc != 0) {
            g_set_error(error, SF_SERVER_ERROR, 0, "cannot start server thread %d: %s", i,
                        g_strerror(rc));
            sf_server_stop(s, 0);
            return FALSE;
        }
        t->started = true;
    }
    g_message("answering on %d threads, each its own %s loop", s->nthreads, loop);
    return TRUE;
}

void sf_server_stop(sf_server *s, int timeout_ms)
{
    if (s->stopped)
        return;
    s->stopped = true;
    s->stop_deadline_ms = sf_clocks_coarse_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    atomic_store(&s->stopping, true);
    for (int i = 0; i < s->nthreads; i++) {
        uint64_t one = 1;
        sf_thread *t = &s->threads[i];
        if (t->wake_fd >= 0 && write(t->wake_fd, &one, sizeof one) != sizeof one)
            g_warning("cannot wake server thread %d: %s", i, g_strerror(errno));
    }
    for (int i = 0; i < s->nthreads; i++) {
        sf_thread *t = &s->threads[i];
        if (t->started) {
            pthread_join(t->tid, NULL);
            t->started = false;
        }
    }
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
        s->listen_fd = -1;
    }
}

void sf_server_free(sf_server *s)
{
    if (s == NULL)
        return;
    sf_server_stop(s, 0);
    for (int i = 0; i < s->nthreads; i++) {
        sf_thread *t = &s->threads[i];
        for (guint j = 0; j < t->queue->len; j++) {
            close(g_array_index(t->queue, int, j));
            atomic_fetch_sub(&s->open_connections, 1);
        }
        g_array_free(t->queue, TRUE);
        g_mutex_clear(&t->queue_lock);
        sf_uring_free(t->uring); /* made, but its thread never started */
        if (t->epfd >= 0)
            close(t->epfd);
        if (t->wake_fd >= 0)
            close(t->wake_fd);
        g_free(t->scratch);
        g_object_unref(t->protocol);
        g_object_unref(t->transport);
    }
    g_free(s->threads);
    g_mutex_clear(&s->listening_lock);
    g_cond_clear(&s->listening_cond);
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
    g_object_unref(s->processor);
    g_free(s->bind_address);
    g_free(s);
}

void sf_server_get_stats(sf_server *s, sf_server_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < s->nthreads; i++) {
        sf_thread_stats *ts = &s->threads[i].stats;
#define SF_SUM_COUNTER(name, help) \
    out->name += atomic_load_explicit(&ts->name, memory_order_relaxed);
        SF_SERVER_COUNTERS(SF_SUM_COUNTER)
#undef SF_SUM_COUNTER
        out->output_buffered += atomic_load_explicit(&ts->output_buffered, memory_order_relaxed);
    }
    out->listening = atomic_load(&s->listening_now);
    int open = atomic_load(&s->open_connections);
    out->connections_open = open > 0 ? (uint64_t)open : 0;
}
