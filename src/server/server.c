/* server.c -- sf_server: a concurrent framed-binary Thrift server with a fixed pool of threads,
 * each running its own event loop on io_uring or epoll (loop.h). This file starts and stops
 * it: binds the port (listen.c), fits max_connections to the descriptors there are, makes the
 * threads and their rings, and sums their statistics. What a thread does is thread.c and
 * conn.c. */
#define _GNU_SOURCE
#include "server_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/bindaddr.h"
#include "common/clocks.h"
#include "rpc/bounded_protocol.h"

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
        sf_loop_init(&t->loop, t, i);
        t->wake.fd = -1;
        t->listener.fd = -1;
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
        if (sf_loop_make_ring(&s->threads[i].loop, why, sizeof why))
            continue;
        for (int j = 0; j < i; j++)
            sf_loop_drop_ring(&s->threads[j].loop);
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
        if (!sf_thread_open(t, error))
            return FALSE;
        t->scratch = g_malloc(t->scratch_cap);
    }
    s->started = true;
    const char *loop = sf_loop_backend(&s->threads[0].loop);
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
        if (t->wake.fd >= 0 && write(t->wake.fd, &one, sizeof one) != sizeof one)
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
        sf_loop_free(&t->loop); /* and a ring made for a thread never started */
        if (t->wake.fd >= 0)
            close(t->wake.fd);
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
    out->max_connections = (uint64_t)s->opts.max_connections;
}
