/* loop_floor.c -- the least a server can do per request on this machine: the service's
 * own request path (frames, the direct codec, the handler, a real worker) on the
 * smallest event loop, one thread, with none of snowflaked's limits, timeouts or gate.
 *
 * scripts/bench runs it beside snowflaked so that the server's CPU per call can be read
 * against a floor measured on the same kernel, and so that the two loops a server could
 * use can be compared on equal terms:
 *   epoll    epoll_wait, then recv and send per ready connection
 *   io_uring one io_uring_enter per loop turn: multishot accept and receive into a
 *            ring of provided buffers, sends queued as submissions (single issuer,
 *            deferred task work), when built with liburing
 *
 * Usage: loop_floor --mode epoll|io_uring [--port N]. Prints "loop_floor: listening on
 * 127.0.0.1:PORT (MODE)" once it accepts, then serves until killed. Exits 3 when the mode
 * is unavailable. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef SF_HAVE_URING
#include <liburing.h>
#endif

#include "rpc/bounded_protocol.h"
#include "server/direct_codec.h"
#include "server/frame_transport.h"
#include "server/handler.h"
#include "server/standalone.h"
#include "lib/snowflake.h"
#include "rpc/thrift_fix.h"

#define FLOOR_MAX_FRAME 65536
#define FLOOR_IN_CAP (FLOOR_MAX_FRAME + 4)
#define FLOOR_MAX_FD 65536

typedef struct floor_conn {
    int fd;
    uint8_t in[FLOOR_IN_CAP];
    size_t in_len;
    uint8_t *out;        /* a reply being sent (io_uring: owned until its completion) */
    size_t out_len, out_cap;
    bool sending;
} floor_conn;

/* The request path, as one snowflaked thread holds it. */
static SfHandler *floor_handler;
static ThriftProcessor *floor_processor;
static SfFrameTransport *floor_transport;
static ThriftProtocol *floor_protocol;
static floor_conn *floor_conns[FLOOR_MAX_FD];

static void floor_die(const char *what)
{
    fprintf(stderr, "loop_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void floor_init_service(void)
{
    sf_thrift_fix_finalize();
    sf_thrift_fix_processor();
    sf_handler_options ho;
    sf_handler_options_init(&ho);
    floor_handler = sf_handler_new(&ho);
    sf_worker_options wo;
    sf_worker_options_init(&wo);
    wo.worker_id = 1;
    wo.datacenter_id = 1;
    sf_error err;
    sf_worker *w = sf_worker_new(&wo, &err);
    if (w == NULL) {
        fprintf(stderr, "loop_floor: %s\n", err.message);
        exit(1);
    }
    sf_standalone *standalone = sf_standalone_new_serving(w); /* kept for the whole run */
    if (standalone == NULL) {
        fprintf(stderr, "loop_floor: out of memory\n");
        exit(1);
    }
    sf_handler_set_source(floor_handler, sf_standalone_source(standalone));
    floor_processor =
        g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_PROCESSOR, "handler", floor_handler, NULL);
    floor_transport = sf_frame_transport_new();
    floor_protocol = sf_bounded_protocol_new(THRIFT_TRANSPORT(floor_transport));
}

/* Answers the complete frames in c->in; the replies are left in the transport's output.
 * False when the connection sent a bad frame. */
static bool floor_answer(floor_conn *c)
{
    size_t frames = 0;
    GError *error = NULL;
    ssize_t used = sf_frame_transport_answer(floor_transport, floor_protocol, floor_processor,
                                             sf_direct_answer, floor_handler, c->in,
                                             c->in_len, FLOOR_MAX_FRAME, SIZE_MAX, &frames,
                                             &error);
    if (used < 0) {
        g_clear_error(&error);
        return false;
    }
    memmove(c->in, c->in + used, c->in_len - (size_t)used);
    c->in_len -= (size_t)used;
    return true;
}

static floor_conn *floor_conn_new(int fd)
{
    if (fd >= FLOOR_MAX_FD) {
        close(fd);
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    floor_conn *c = g_new0(floor_conn, 1);
    c->fd = fd;
    floor_conns[fd] = c;
    return c;
}

static void floor_conn_free(floor_conn *c)
{
    floor_conns[c->fd] = NULL;
    close(c->fd);
    g_free(c->out);
    g_free(c);
}

/* Appends the replies just made to c's pending output. */
static void floor_take_output(floor_conn *c)
{
    size_t len;
    const uint8_t *out = sf_frame_transport_output(floor_transport, &len);
    if (c->out_len + len > c->out_cap) {
        c->out_cap = c->out_len + len;
        c->out = g_realloc(c->out, c->out_cap);
    }
    memcpy(c->out + c->out_len, out, len);
    c->out_len += len;
    sf_frame_transport_reset_output(floor_transport);
}

static int floor_listen(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        floor_die("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0)
        floor_die("bind 127.0.0.1");
    return fd;
}

/* epoll: the loop every readiness-based server runs. A reply the socket does not take at
 * once is written blocking: a benchmark client reads its replies. */
static void floor_run_epoll(int lfd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0)
        floor_die("epoll");
    struct epoll_event events[128];
    for (;;) {
        int n = epoll_wait(ep, events, 128, -1);
        if (n < 0 && errno != EINTR)
            floor_die("epoll_wait");
        for (int i = 0; i < n; i++) {
            floor_conn *c = events[i].data.ptr;
            if (c == NULL) {
                floor_conn *nc = floor_conn_new(accept4(lfd, NULL, NULL, SOCK_NONBLOCK));
                struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
                if (nc != NULL && epoll_ctl(ep, EPOLL_CTL_ADD, nc->fd, &cev) != 0)
                    floor_conn_free(nc);
                continue;
            }
            ssize_t r = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r <= 0 || (c->in_len += (size_t)r, !floor_answer(c))) {
                floor_conn_free(c);
                continue;
            }
            floor_take_output(c);
            size_t off = 0;
            while (off < c->out_len) {
                ssize_t w = send(c->fd, c->out + off, c->out_len - off, MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN && errno != EINTR)
                    break;
                off += w > 0 ? (size_t)w : 0;
            }
            c->out_len = 0;
        }
    }
}

#ifdef SF_HAVE_URING
#define FLOOR_RING_ENTRIES 4096
#define FLOOR_NBUF 1024
#define FLOOR_BUF_SIZE 4096
#define FLOOR_BGID 0
enum { FLOOR_ACCEPT = 0, FLOOR_RECV = 1, FLOOR_SEND = 2 };

static struct io_uring floor_ring;
static struct io_uring_buf_ring *floor_bufs;
static uint8_t *floor_buf_mem;

static struct io_uring_sqe *floor_sqe(void)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&floor_ring);
    if (sqe == NULL) {
        io_uring_submit(&floor_ring);
        sqe = io_uring_get_sqe(&floor_ring);
    }
    if (sqe == NULL)
        floor_die("io_uring_get_sqe");
    return sqe;
}

static void floor_arm_recv(int fd)
{
    struct io_uring_sqe *sqe = floor_sqe();
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = FLOOR_BGID;
    io_uring_sqe_set_data64(sqe, (uint64_t)fd << 2 | FLOOR_RECV);
}

static void floor_send(floor_conn *c)
{
    if (c->sending || c->out_len == 0)
        return;
    struct io_uring_sqe *sqe = floor_sqe();
    io_uring_prep_send(sqe, c->fd, c->out, c->out_len, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, (uint64_t)c->fd << 2 | FLOOR_SEND);
    c->sending = true;
}

/* A receive completion: the bytes are in a provided buffer, given back at once. */
static void floor_received(floor_conn *c, const struct io_uring_cqe *cqe)
{
    int bid = (int)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
    uint8_t *buf = floor_buf_mem + (size_t)bid * FLOOR_BUF_SIZE;
    size_t n = (size_t)cqe->res;
    bool ok = n <= sizeof c->in - c->in_len;
    if (ok) {
        memcpy(c->in + c->in_len, buf, n);
        c->in_len += n;
    }
    io_uring_buf_ring_add(floor_bufs, buf, FLOOR_BUF_SIZE, (unsigned short)bid,
                          io_uring_buf_ring_mask(FLOOR_NBUF), 0);
    io_uring_buf_ring_advance(floor_bufs, 1);
    if (!ok || !floor_answer(c)) {
        shutdown(c->fd, SHUT_RDWR); /* the receive ends, and its last completion frees c */
        return;
    }
    floor_take_output(c);
    floor_send(c);
    if (!(cqe->flags & IORING_CQE_F_MORE))
        floor_arm_recv(c->fd);
}

static void floor_run_uring(int lfd)
{
    struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN};
    int rc = io_uring_queue_init_params(FLOOR_RING_ENTRIES, &floor_ring, &p);
    if (rc < 0) {
        fprintf(stderr, "loop_floor: io_uring unavailable: %s\n", strerror(-rc));
        exit(3);
    }
    floor_buf_mem = g_malloc((size_t)FLOOR_NBUF * FLOOR_BUF_SIZE);
    if (posix_memalign((void **)&floor_bufs, 4096, FLOOR_NBUF * sizeof(struct io_uring_buf)))
        floor_die("posix_memalign");
    struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)floor_bufs,
                                   .ring_entries = FLOOR_NBUF, .bgid = FLOOR_BGID};
    rc = io_uring_register_buf_ring(&floor_ring, &reg, 0);
    if (rc < 0) {
        fprintf(stderr, "loop_floor: io_uring provided buffers unavailable: %s\n", strerror(-rc));
        exit(3);
    }
    io_uring_buf_ring_init(floor_bufs);
    for (int i = 0; i < FLOOR_NBUF; i++)
        io_uring_buf_ring_add(floor_bufs, floor_buf_mem + (size_t)i * FLOOR_BUF_SIZE,
                              FLOOR_BUF_SIZE, (unsigned short)i, io_uring_buf_ring_mask(FLOOR_NBUF),
                              i);
    io_uring_buf_ring_advance(floor_bufs, FLOOR_NBUF);
    struct io_uring_sqe *sqe = floor_sqe();
    io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, 0);
    io_uring_sqe_set_data64(sqe, FLOOR_ACCEPT);
    for (;;) {
        rc = io_uring_submit_and_wait(&floor_ring, 1);
        if (rc < 0 && rc != -EINTR) {
            errno = -rc;
            floor_die("io_uring_submit_and_wait");
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&floor_ring, head, cqe) {
            seen++;
            int kind = (int)(cqe->user_data & 3), fd = (int)(cqe->user_data >> 2);
            if (kind == FLOOR_ACCEPT) {
                floor_conn *c = cqe->res >= 0 ? floor_conn_new(cqe->res) : NULL;
                if (c != NULL)
                    floor_arm_recv(c->fd);
                if (!(cqe->flags & IORING_CQE_F_MORE)) {
                    sqe = floor_sqe();
                    io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, 0);
                    io_uring_sqe_set_data64(sqe, FLOOR_ACCEPT);
                }
                continue;
            }
            floor_conn *c = floor_conns[fd];
            if (c == NULL)
                continue;
            if (kind == FLOOR_SEND) {
                c->sending = false;
                size_t sent = cqe->res > 0 ? (size_t)cqe->res : 0;
                memmove(c->out, c->out + sent, c->out_len - sent);
                c->out_len -= sent;
                if (cqe->res > 0)
                    floor_send(c);
                continue;
            }
            if (cqe->res == -ENOBUFS) { /* every buffer in use: receive again */
                floor_arm_recv(fd);
                continue;
            }
            if (cqe->res <= 0) {
                if (!(cqe->flags & IORING_CQE_F_MORE) && !c->sending)
                    floor_conn_free(c);
                continue;
            }
            floor_received(c, cqe);
        }
        io_uring_cq_advance(&floor_ring, seen);
    }
}
#endif

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"mode", required_argument, NULL, 'm'},
                                             {"port", required_argument, NULL, 'p'},
                                             {NULL, 0, NULL, 0}};
    const char *mode = "epoll";
    int port = 0, ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (ch == 'm')
            mode = optarg;
        else if (ch == 'p')
            port = atoi(optarg);
        else
            return 2;
    }
    bool uring = strcmp(mode, "io_uring") == 0;
    if (!uring && strcmp(mode, "epoll") != 0) {
        fprintf(stderr, "loop_floor: --mode %s: expected epoll or io_uring\n", mode);
        return 2;
    }
#ifndef SF_HAVE_URING
    if (uring) {
        fprintf(stderr, "loop_floor: built without liburing: io_uring unavailable\n");
        return 3;
    }
#endif
    floor_init_service();
    int lfd = floor_listen(port);
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &alen);
    printf("loop_floor: listening on 127.0.0.1:%d (%s)\n", ntohs(a.sin_port), mode);
    fflush(stdout);
#ifdef SF_HAVE_URING
    if (uring)
        floor_run_uring(lfd);
#endif
    floor_run_epoll(lfd);
    return 0;
}
