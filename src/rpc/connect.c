/* connect.c -- opens a Thrift client socket with a bound on the name's lookup and the connect
 * themselves, not only on reads. */
#define _POSIX_C_SOURCE 200809L
#include "connect.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/clocks.h"
#include "resolve.h"

/* Closes fd keeping errno at cause, so the caller can tell a refusal from a timeout. */
static int fail_with(int fd, int cause)
{
    if (fd >= 0)
        close(fd);
    errno = cause;
    return -1;
}

/* Starts a non-blocking connect to one address and waits for it at most wait_ms.
 * Returns the descriptor (back in blocking mode), or -1 with err filled and errno set. */
static int connect_one(const struct sockaddr_storage *addr, socklen_t addrlen, int wait_ms,
                       char *err, size_t errlen)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a socket: %s", strerror(errno));
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "cannot make the socket non-blocking: %s", strerror(errno));
        close(fd);
        return -1;
    }
    int rc = connect(fd, (const struct sockaddr *)addr, addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
        int cause = errno;
        snprintf(err, errlen, "%s", strerror(cause));
        return fail_with(fd, cause);
    }
    if (rc != 0) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n;
        do
            n = poll(&p, 1, wait_ms);
        while (n < 0 && errno == EINTR);
        if (n == 0) {
            snprintf(err, errlen, "no answer within %d ms", wait_ms);
            return fail_with(fd, ETIMEDOUT);
        }
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
            int cause = n < 0 ? errno : soerr != 0 ? soerr : errno;
            snprintf(err, errlen, "%s", strerror(cause));
            return fail_with(fd, cause);
        }
    }
    if (fcntl(fd, F_SETFL, flags) < 0) {
        snprintf(err, errlen, "cannot make the socket blocking again: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* ThriftSocket's own open blocks in getaddrinfo() and connect() for as long as the resolver
 * and the kernel retry; this bounds both, the lookup and then each address in turn within
 * one overall deadline. */
int sf_connect_tcp(const char *host, int port, int timeout_ms, char *err, size_t errlen)
{
    if (timeout_ms < 1 || port < 1 || port > 65535) {
        snprintf(err, errlen, "bad connect arguments: port %d (allowed 1..65535), timeout %d ms "
                 "(allowed >= 1)", port, timeout_ms);
        return fail_with(-1, EINVAL);
    }
    long long deadline = sf_clocks_mono_ms() + timeout_ms;
    sf_addrs addrs;
    if (sf_resolve(host, port, deadline, &addrs, err, errlen) != 0)
        return -1;
    int fd = -1;
    for (int i = 0; i < addrs.n && fd < 0; i++) {
        long long left = deadline - sf_clocks_mono_ms();
        if (left <= 0) {
            snprintf(err, errlen, "no answer within %d ms", timeout_ms);
            errno = ETIMEDOUT;
            break;
        }
        fd = connect_one(&addrs.addr[i], addrs.len[i], (int)left, err, errlen);
    }
    if (fd < 0 && errno == ETIMEDOUT) /* the caller's bound, not what the last address had */
        snprintf(err, errlen, "no answer within %d ms", timeout_ms);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
        snprintf(err, errlen, "setting a %d ms timeout failed: %s", timeout_ms, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Hands a connection made with a bounded connect to Thrift's socket transport. */
ThriftSocket *sf_connect_thrift_socket(const char *host, int port, int timeout_ms, char *err,
                                       size_t errlen)
{
    int fd = sf_connect_tcp(host, port, timeout_ms, err, errlen);
    if (fd < 0)
        return NULL;
    ThriftSocket *sock =
        g_object_new(THRIFT_TYPE_SOCKET, "hostname", host, "port", (guint)port, NULL);
    /* ThriftSocket counts as open while sd is valid, and closes sd when closed or freed. */
    sock->sd = fd;
    return sock;
}
