/* server.h -- sf_server: a concurrent framed-binary Thrift server on epoll with a fixed pool of threads. */
#ifndef SF_SERVER_H
#define SF_SERVER_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <thrift/c_glib/processor/thrift_processor.h>

#include "frame_transport.h"
#include "common/server_options.h"

typedef struct sf_server sf_server;

/* Descriptors a thread holds beside its connections (its loop, its wake-up, spares for
 * accept()'s reserve): what fdlimit.h counts for the port. */
#define SF_SERVER_THREAD_FDS 4

/* The server's counters, each named once: X(name, help). Each is a field of
 * sf_server_stats, a per-thread atomic inside the server, and a counter of the admin
 * endpoint under that name. */
#define SF_SERVER_COUNTERS(X)                                                                  \
    X(connections_accepted, "Thrift connections accepted")                                    \
    X(connections_refused, "Thrift connections refused over max_connections")                 \
    X(frames_processed, "Requests answered")                                                  \
    X(frames_refused, "Oversized, malformed or truncated frames")                             \
    X(idle_timeouts, "Connections closed after idle_timeout_ms")                              \
    X(frame_timeouts, "Connections closed after frame_timeout_ms")                            \
    X(replies_withheld,                                                                       \
      "Connections closed unanswered: a refusal made while the port should be closed")        \
    X(connections_dropped, "Connections closed when the port closed (fenced)")                \
    X(write_timeouts,                                                                         \
      "Connections closed after their replies waited unsent for write_timeout_ms")            \
    X(output_budget_closes, "Slowest readers closed past max_output_buffer")

/* Totals since start, summed over the threads when read, and the gauges. */
typedef struct sf_server_stats {
#define SF_SERVER_STATS_FIELD(name, help) uint64_t name;
    SF_SERVER_COUNTERS(SF_SERVER_STATS_FIELD)
#undef SF_SERVER_STATS_FIELD
    uint64_t connections_open;
    bool listening;
    uint64_t output_buffered;      /* bytes of replies waiting unsent now */
    uint64_t max_connections;      /* the limit in force (after fitting to the descriptors) */
} sf_server_stats;

/* Binds, and listens when listen_at_start (nothing is served yet). processor is referenced and
 * shared by the threads. max_connections is taken as given: fit it to the open-file limit
 * first (fdlimit.h). Returns NULL with *error set, naming the address and
 * the reason, when the options are out of range or the bind fails. */
sf_server *sf_server_new(const sf_server_options *opts, ThriftProcessor *processor,
                         GError **error);

/* Lets direct answer the calls it knows without the processor (see sf_frame_direct_fn);
 * the processor answers the rest. Call before sf_server_start. */
void sf_server_set_direct(sf_server *s, sf_frame_direct_fn direct, void *ctx);

/* The port actually bound (the chosen one when opts.port was 0). */
int sf_server_port(const sf_server *s);

/* Starts the threads that accept and answer. FALSE with *error on failure. */
gboolean sf_server_start(sf_server *s, GError **error);

/* Starts or stops accepting connections, from any thread; takes effect within one loop
 * turn. Stopping closes the listening socket (connects are refused: pooled clients fail
 * over) and closes every open connection without answering what it sent; the port stays
 * bound (a fresh socket, not listening) so that listening can resume on the same port. */
void sf_server_set_listening(sf_server *s, bool listening);

/* Waits up to timeout_ms for the port to accept connections (listening asked for with
 * sf_server_set_listening takes effect on thread 0); true once it does. Lets the owner
 * announce "serving" only when a client can connect. */
bool sf_server_wait_listening(sf_server *s, int timeout_ms);

/* Stops gracefully: closes the listener, answers the complete frames already
 * received, flushes replies, closes every connection, and joins the threads,
 * waiting at most timeout_ms for slow readers. Safe to call twice. */
void sf_server_stop(sf_server *s, int timeout_ms);

/* Stops if still running, then frees everything. NULL is allowed. */
void sf_server_free(sf_server *s);

void sf_server_get_stats(sf_server *s, sf_server_stats *out);

#define SF_SERVER_ERROR (sf_server_error_quark())
GQuark sf_server_error_quark(void);

#endif /* SF_SERVER_H */
