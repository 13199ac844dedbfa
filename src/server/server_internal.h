/* server_internal.h -- what the server's files share and nothing outside src/server/ sees:
 * the server, its threads and their connections, and the calls between the parts:
 *   server.c       start and stop: descriptor limits, threads, statistics;
 *   thread.c       a thread's loop: accepting and its back-off, timeouts, drain, taking
 *                  the port back;
 *   conn.c         a connection: its buffers and limits (the output budget among them),
 *                  reading, answering and sending, and the handlers its loop calls;
 *   listen.c       below the three: the port bound, the listening state published, the
 *                  error domain.
 * Below them, and knowing none of them, the loop (loop.h: its core loop.c, with two
 * backends, loop_epoll.c and loop_uring.c) calls the handlers it was given, and ratelog.h
 * keeps repeating lines to one a second. The public interface is server.h. */
#ifndef SF_SERVER_INTERNAL_H
#define SF_SERVER_INTERNAL_H

#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <thrift/c_glib/protocol/thrift_protocol.h>

#include "server.h"
#include "frame_transport.h"
#include "loop.h"
#include "ratelog.h"

/* Pending output above which a connection is not read until it drains: a
 * client that pipelines without reading cannot make us buffer more. */
#define SF_OUT_HIGH_WATER (1024 * 1024)
/* Room for one read beyond the largest frame. */
#define SF_READ_SLACK (64 * 1024)
/* How often timeouts are checked, and the longest an idle loop sleeps. */
#define SF_TICK_MS 50
#define SF_LISTEN_BACKLOG 1024
/* How often a failure to listen again (the port taken meanwhile) is retried and logged. */
#define SF_LISTEN_RETRY_LOG_MS 5000
/* How long the listener rests after accept() ran out of descriptors or memory. */
#define SF_ACCEPT_BACKOFF_MS 100

typedef struct sf_thread sf_thread;

/* One client connection, owned by one thread. Idle, it holds no buffers. */
typedef struct sf_conn {
    sf_loop_fd io;      /* the socket (io.fd) as its loop holds it */
    bool peer_closed;   /* the client sent FIN: answer what arrived, then close */
    bool draining;      /* the server is stopping: flush, then close */
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
    sf_loop loop;          /* on io_uring when it has a ring, else on epoll; first, so that
                            * &t->loop costs nothing on the per-call path */
    sf_server *server;
    int index;
    pthread_t tid;
    bool started;
    sf_loop_fd wake;       /* an eventfd (wake.fd): new connections queued, or stop */
    sf_loop_fd listener;   /* thread 0: the listening socket, while watched */
    GMutex queue_lock;
    GArray *queue;         /* accepted fds handed to this thread */
    sf_conn *conns;
    sf_conn *dead;         /* closed, freed after the event batch (and once no request of
                            * theirs is in flight: sf_loop_busy) */
    uint8_t *scratch;      /* input is gathered here (but a lone io_uring receive's bytes,
                            * answered in its buffer) */
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

/* Adds n to a counter only its own thread writes: no locked instruction. */
static inline void sf_bump(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* Replies waiting unsent on c. */
static inline size_t sf_conn_pending(const sf_conn *c)
{
    return c->out_len - c->out_off;
}

/* listen.c: thread 0 publishes its listening state; a socket bound to the server's address
 * and port, not listening yet (-1 with error set when it cannot be). */
void sf_server_note_listening(sf_server *s, bool listening);
int sf_server_bind(sf_server *s, GError **error);

/* thread.c */
/* Opens the thread's loop and its wake-up, and (thread 0) watches the listener. */
gboolean sf_thread_open(sf_thread *t, GError **error);
void *sf_thread_main(void *arg);

/* conn.c */
void sf_conn_close(sf_thread *t, sf_conn *c);
void sf_thread_bury(sf_thread *t, bool all);
void sf_conn_abort(sf_thread *t, sf_conn *c);
void sf_conn_adopt(sf_thread *t, int fd);
bool sf_conn_serve(sf_thread *t, sf_conn *c, const uint8_t *got, size_t got_len,
                   bool do_read);

#endif /* SF_SERVER_INTERNAL_H */
