/* conn.c -- one client connection: adopting the socket, its input and output buffers and
 * their limits (a connection whose output backs up is not read; a thread's replies waiting
 * unsent stay within its output budget), answering the frames that arrived, sending the
 * replies, and closing. The thread's loop (loop.h) calls it through the handlers it adds
 * the socket with, and it tells the loop what to wait for; it never waits itself. */
#define _GNU_SOURCE
#include "server_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/tcp.h>

#include "common/clocks.h"

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

/* Closes a connection and frees its buffers. The struct itself is freed at the end of
 * the event batch (sf_thread_bury), since a later event of the same batch may still
 * name it: the output budget closes connections other than the one being served. */
void sf_conn_close(sf_thread *t, sf_conn *c)
{
    t->out_total -= sf_conn_pending(c);
    atomic_store_explicit(&t->stats.output_buffered, t->out_total, memory_order_relaxed);
    if (!sf_loop_remove(&t->loop, &c->io))
        g_warning("cannot cancel io_uring requests of connection from %s: %s; it closes when "
                  "they end", c->peer, g_strerror(errno));
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

/* Frees the connections closed during the last event batch, but not those with a request
 * still in flight (io_uring), whose completion names them; all of them when the ring is
 * gone (all = true). */
void sf_thread_bury(sf_thread *t, bool all)
{
    sf_conn **link = &t->dead;
    while (*link != NULL) {
        sf_conn *c = *link;
        if (!all && sf_loop_busy(&c->io)) {
            link = &c->next;
            continue;
        }
        *link = c->next;
        g_free(c);
    }
}

/* Closes a connection that broke a limit on its replies with a reset, so that what the
 * kernel still holds for it is dropped at once rather than trickled out. */
void sf_conn_abort(sf_thread *t, sf_conn *c)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    if (setsockopt(c->io.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0)
        g_debug("SO_LINGER on connection from %s failed: %s", c->peer, g_strerror(errno));
    sf_conn_close(t, c);
}

/* Keeps this thread's unsent replies within its share of max_output_buffer by closing
 * the connections holding the most (the slowest readers), one rate-limited line. */
static void sf_conn_enforce_budget(sf_thread *t)
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
    sf_ratelog_log(&t->server->budget_log, G_LOG_LEVEL_WARNING,
                          "replies waiting unsent passed max_output_buffer = %d bytes: closed "
                          "the %u slowest reader(s), freeing %zu bytes",
                          t->server->opts.max_output_buffer, closed, freed);
}

static const sf_loop_handlers sf_conn_handlers;

/* Takes over an accepted socket: non-blocking, no Nagle delay, watched for input. */
void sf_conn_adopt(sf_thread *t, int fd)
{
    sf_conn *c = g_new0(sf_conn, 1);
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
    c->next = t->conns;
    if (t->conns)
        t->conns->prev = c;
    t->conns = c;
    if (!sf_loop_add(&t->loop, &c->io, fd, &sf_conn_handlers, c)) {
        sf_ratelog_log(&t->server->watch_log, G_LOG_LEVEL_WARNING,
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
        ssize_t n = send(c->io.fd, c->out + c->out_off, c->out_len - c->out_off,
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
            ssize_t n = send(c->io.fd, reply + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
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
        sf_ratelog_log(&t->server->bad_frame_log, G_LOG_LEVEL_MESSAGE,
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

/* Chooses what to wait for from the connection's state: input unless output is backed up
 * or the client is gone; room to send while output is pending. Returns false when c
 * was closed (the loop could not wait for it: see sf_conn_on_failed). */
static bool sf_conn_update_interest(sf_thread *t, sf_conn *c)
{
    size_t pending = c->out_len - c->out_off;
    bool want_in = !c->peer_closed && !c->draining && pending < SF_OUT_HIGH_WATER;
    return sf_loop_want(&t->loop, &c->io, want_in, pending > 0);
}

/* Takes got[0..got_len) (bytes io_uring received) and reads once more (when do_read),
 * answers the complete frames buffered, sends the replies and keeps the remainder. Bytes
 * that are all there is (nothing held, nothing more to read) are answered in place, not
 * copied to the scratch buffer first: the common io_uring call.
 * Closes the connection when it is finished or broken; returns false then. */
bool sf_conn_serve(sf_thread *t, sf_conn *c, const uint8_t *got, size_t got_len,
                   bool do_read)
{
    int64_t now = sf_clocks_coarse_ms();
    for (;;) {
        size_t have = c->in_len;
        bool had_partial = have > 0;
        const uint8_t *buf;
        if (got_len > 0 && have == 0 && !do_read) {
            /* All there is came in one receive (io_uring): answered where it landed. */
            buf = got;
            have = got_len;
            got_len = 0;
            c->last_active_ms = now;
        } else {
            if (have + got_len > t->scratch_cap) {
                /* Input held back for backed-up output, and a receive queued before: rare. */
                t->scratch_cap = have + got_len;
                t->scratch = g_realloc(t->scratch, t->scratch_cap);
            }
            buf = t->scratch;
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
        }
        if (do_read && !sf_loop_receiving(&c->io) && have < t->scratch_cap) {
            ssize_t n;
            do {
                n = recv(c->io.fd, t->scratch + have, t->scratch_cap - have, MSG_DONTWAIT);
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
        ssize_t used = sf_conn_process(t, c, buf, have);
        if (used != 0 && sf_conn_withhold(t, c))
            return false;
        if (used < 0) {
            sf_conn_flush(t, c); /* best effort: the replies to earlier frames */
            sf_conn_close(t, c);
            return false;
        }
        size_t left = have - (size_t)used;
        if (left > 0) {
            c->in = g_memdup2(buf + used, left);
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
        /* Replies left unsent count against the thread's budget: past it the slowest
         * readers go, c perhaps among them. */
        if (t->out_total > t->out_budget) {
            sf_conn_enforce_budget(t);
            if (c->io.fd < 0)
                return false;
        }
        if ((c->peer_closed || c->draining) && pending == 0) {
            if (c->peer_closed && c->in_len > 0) {
                sf_ratelog_log(&t->server->cut_frame_log, G_LOG_LEVEL_MESSAGE,
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

/* The loop's handlers for a connection's socket (owner: its thread; ctx: the connection).
 * Input is answered, reading the socket on when the loop says more may wait there, or
 * while the server drains (every byte that arrived is answered before the close). */
static void sf_conn_on_input(void *owner, void *ctx, const uint8_t *got, size_t len,
                             unsigned flags)
{
    sf_conn *c = ctx;
    if (flags & SF_LOOP_EOF)
        c->peer_closed = true;
    sf_conn_serve(owner, c, got, len, (flags & SF_LOOP_READ) || c->draining);
}

static void sf_conn_on_writable(void *owner, void *ctx)
{
    sf_conn_writable(owner, ctx);
}

static void sf_conn_on_failed(void *owner, void *ctx, sf_loop_failure why, int err)
{
    sf_thread *t = owner;
    sf_conn *c = ctx;
    if (why == SF_LOOP_WANT_FAILED)
        sf_ratelog_log(&t->server->watch_log, G_LOG_LEVEL_WARNING,
                              "cannot watch connection from %s: %s: %s", c->peer,
                              sf_loop_backend(&t->loop), g_strerror(err));
    else if (why == SF_LOOP_RECV_FAILED)
        g_debug("read from %s failed: %s", c->peer, g_strerror(err));
    sf_conn_close(t, c);
}

static const sf_loop_handlers sf_conn_handlers = {
    .input = sf_conn_on_input,
    .writable = sf_conn_on_writable,
    .failed = sf_conn_on_failed,
};
