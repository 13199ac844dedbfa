/* listen.c -- the server's port: the listening socket bound (not yet listening: connects are
 * refused until thread 0 listens on it), and thread 0's listening state published to the
 * callers, who set what they want and wait for it. Also the server's error domain
 * (SF_SERVER_ERROR), defined here, below every part that reports through it. */
#define _GNU_SOURCE
#include "server_internal.h"

#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/bindaddr.h"

G_DEFINE_QUARK(sf-server-error-quark, sf_server_error)

/* Publishes thread 0's listening state and wakes whoever waits for it. */
void sf_server_note_listening(sf_server *s, bool listening)
{
    g_mutex_lock(&s->listening_lock);
    atomic_store(&s->listening_now, listening);
    g_cond_broadcast(&s->listening_cond);
    g_mutex_unlock(&s->listening_lock);
}

void sf_server_set_listening(sf_server *s, bool listening)
{
    bool was = atomic_exchange(&s->want_listening, listening);
    if (!listening && was)
        atomic_fetch_add(&s->drop_epoch, 1);
    for (int i = 0; i < s->nthreads; i++) {
        uint64_t one = 1;
        sf_thread *t = &s->threads[i];
        if (t->wake.fd >= 0 && write(t->wake.fd, &one, sizeof one) != sizeof one)
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

/* Opens a non-blocking socket bound to address:port, not listening yet (connects are
 * refused); the first bind learns the port when opts.port is 0, later ones reuse it. */
int sf_server_bind(sf_server *s, GError **error)
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
