/* thread.c -- one server thread: turns of its event loop (loop.h), whose listener and
 * wake-up handlers accept and hand over connections, then what is timed: the accept back-off
 * when descriptors run out, frame and write timeouts, dropping every connection when told, a
 * graceful drain, and (thread 0) giving up and taking back the port. Knows connections only
 * through conn.c. */
#define _GNU_SOURCE
#include "server_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clocks.h"

/* Counts a refused connection and logs refusals at most once a second, with how many
 * (thread 0 alone accepts, so its count is the total). */
static void sf_server_log_refusal(sf_thread *t)
{
    sf_server *s = t->server;
    uint64_t total = atomic_fetch_add(&t->stats.connections_refused, 1) + 1;
    sf_ratelog_log(&s->refusal_log, G_LOG_LEVEL_WARNING,
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
    sf_ratelog_log(&s->accept_log, G_LOG_LEVEL_WARNING,
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
    if (!sf_loop_remove_ready(&t->loop, &t->listener))
        g_warning("cannot pause the listener on port %d: %s", s->port, g_strerror(errno));
    s->listen_paused = true;
    s->accept_resume_ms = sf_clocks_coarse_ms() + SF_ACCEPT_BACKOFF_MS;
}

static void sf_thread_accept(void *owner);

/* Watches the listener again once its back-off is over (thread 0). */
static void sf_thread_resume_accept(sf_thread *t, int64_t now)
{
    sf_server *s = t->server;
    if (!s->listen_paused || now < s->accept_resume_ms || s->listen_fd < 0 || !s->listening)
        return;
    if (!sf_loop_add_ready(&t->loop, &t->listener, s->listen_fd, sf_thread_accept)) {
        g_warning("cannot watch the listener on port %d again: %s", s->port, g_strerror(errno));
        s->accept_resume_ms = now + SF_ACCEPT_BACKOFF_MS;
        return;
    }
    s->listen_paused = false;
}

/* The listener is ready: accepts waiting connections (thread 0 owns the listener) and deals
 * them round robin to the threads. */
static void sf_thread_accept(void *owner)
{
    sf_thread *t = owner;
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
                sf_ratelog_log(&s->accept_log, G_LOG_LEVEL_WARNING,
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
        if (write(target->wake.fd, &one, sizeof one) != sizeof one)
            g_warning("cannot wake server thread %d: %s", target->index, g_strerror(errno));
    }
}

/* The wake-up is ready: takes the connections other threads queued for this one. */
static void sf_thread_take_queue(void *owner)
{
    sf_thread *t = owner;
    uint64_t count;
    if (read(t->wake.fd, &count, sizeof count) < 0 && errno != EAGAIN)
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
            sf_ratelog_log(&t->server->frame_timeout_log, G_LOG_LEVEL_MESSAGE,
                                  "closing connection from %s: a frame stayed incomplete for "
                                  "%d ms (frame_timeout_ms; %zu bytes received)",
                                  c->peer, o->frame_timeout_ms, c->in_len);
            sf_bump(&t->stats.frame_timeouts, 1);
            sf_conn_close(t, c);
        } else if (c->out_since_ms > 0 && now - c->out_since_ms >= o->write_timeout_ms) {
            sf_ratelog_log(&t->server->write_timeout_log, G_LOG_LEVEL_MESSAGE,
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

/* Thread 0 closes the listening socket. The stats say it stopped before the close, so
 * that whoever finds connects refused (a check, a scrape of the `listening` gauge) never
 * reads that the port still listens. */
static void sf_thread_close_listener(sf_thread *t)
{
    sf_server *s = t->server;
    if (s->listening)
        sf_loop_remove_ready(&t->loop, &t->listener);
    s->listening = false;
    sf_server_note_listening(s, false);
    close(s->listen_fd);
    s->listen_fd = -1;
}

/* Begins a graceful stop on this thread: answers what has arrived and
 * leaves only connections with output still to send. */
static void sf_thread_begin_drain(sf_thread *t)
{
    sf_server *s = t->server;
    if (t->index == 0 && s->listen_fd >= 0) {
        sf_thread_close_listener(t);
    }
    sf_conn *next;
    for (sf_conn *c = t->conns; c != NULL; c = next) {
        next = c->next;
        c->draining = true;
        /* On io_uring, bytes may wait in the receive in flight: reading the socket now
         * could answer later bytes before them. Its completion (data, or cancelled)
         * serves the connection instead. */
        if (sf_loop_cancel_input(&t->loop, &c->io))
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
        sf_thread_close_listener(t);
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
    if (listen(s->listen_fd, SF_LISTEN_BACKLOG) != 0 ||
        !sf_loop_add_ready(&t->loop, &t->listener, s->listen_fd, sf_thread_accept)) {
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

/* Before the thread starts: its loop, its wake-up and (thread 0, when listening at start)
 * the listener, so that nothing arriving meanwhile is missed. */
gboolean sf_thread_open(sf_thread *t, GError **error)
{
    sf_server *s = t->server;
    int wake_fd = -1;
    if (!sf_loop_open(&t->loop) || (wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        g_set_error(error, SF_SERVER_ERROR, 0, "cannot create an event loop: %s",
                    g_strerror(errno));
        return FALSE;
    }
    if (!sf_loop_add_ready(&t->loop, &t->wake, wake_fd, sf_thread_take_queue) ||
        (t->index == 0 && s->listening &&
         !sf_loop_add_ready(&t->loop, &t->listener, s->listen_fd, sf_thread_accept))) {
        g_set_error(error, SF_SERVER_ERROR, 0, "epoll_ctl failed: %s", g_strerror(errno));
        if (t->wake.fd < 0)
            close(wake_fd);
        return FALSE;
    }
    return TRUE;
}

/* One event loop: accept (thread 0), read, answer, write, time out. */
void *sf_thread_main(void *arg)
{
    sf_thread *t = arg;
    sf_server *s = t->server;
    bool draining = false;
    sf_loop_start(&t->loop);
    t->last_tick_ms = sf_clocks_coarse_ms();
    for (;;) {
        if (!sf_loop_turn(&t->loop, SF_TICK_MS))
            break;
        if (t->dead != NULL)
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
    sf_loop_drop_ring(&t->loop);
    sf_thread_bury(t, true);
    return NULL;
}
