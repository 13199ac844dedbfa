/* bench_server.c -- a lean load generator for snowflaked: one thread, epoll, many
 * non-blocking connections with one request outstanding on each.
 *
 * Each request is encoded once with the generated Thrift client (binary protocol,
 * framed transport, into a memory buffer) and the same bytes are resent. The first
 * reply on each connection is decoded fully with the generated code; the rest are
 * checked by frame length, message header and result field, so the client costs
 * little next to the server it measures.
 *
 * Modes:
 *   get_id   C connections for T seconds: calls/s and p50/p99/p999 latency
 *   get_ids  the same with get_ids(--count): ids/s
 *   idle     open C connections, take one id on each, hold them for T seconds
 *
 * Closed loop (the default), each reply sends the next request at once; --calls N ends the
 * run once N requests have been answered, so that the server serves an exact number of
 * calls (to count its instructions per call under callgrind, say). Open loop
 * (--rate R), requests are due on a fixed schedule, R per second over all connections,
 * each sent on an idle connection; its latency counts from when it was due, so a slow
 * reply that holds up the requests behind it is counted in full (no coordinated
 * omission). A request due while every connection waits is sent when one frees.
 *
 * The last line printed is "bench_server: key=value ..." for scripts to parse. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <glib-object.h>
#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/transport/thrift_memory_buffer.h>

#include "load_clock.h"
#include "load_wire.h"
#include "sf_thrift_snowflake.h"

#define BENCH_AGENT "bench"
#define BENCH_MAX_FRAME (16 * 1024 * 1024)
#define BENCH_CONNECT_TIMEOUT_NS (10LL * 1000000000LL)
#define BENCH_DRAIN_TIMEOUT_NS (1LL * 1000000000LL)

/* Thrift binary protocol constants (strict header, field types). */
#define TB_VERSION_1 0x80010000u
#define TB_VERSION_MASK 0xffff0000u
#define TB_REPLY 2
#define TB_EXCEPTION 3
#define TB_TYPE_I64 10
#define TB_TYPE_LIST 15

typedef enum { MODE_GET_ID, MODE_GET_IDS, MODE_IDLE } bench_mode;

typedef struct bench_options {
    const char *host;
    int port;
    int connections;
    double seconds;
    bench_mode mode;
    int count; /* ids per get_ids call */
    long rate; /* open loop: requests due per second; 0 = closed loop */
    long calls; /* closed loop: requests to send in all, then stop; 0 = until the time is up */
} bench_options;

typedef enum { CONN_CONNECTING, CONN_READY, CONN_WAITING, CONN_CLOSED } conn_state;

typedef struct bench_conn {
    int fd;
    conn_state state;
    size_t sent;          /* bytes of the request written so far */
    uint8_t *in;          /* reply bytes: 4-byte frame length, then the payload */
    size_t in_len;
    size_t in_cap;
    int64_t sent_at_ns;   /* when the request's first byte was written */
    uint64_t replies;
    int64_t last_id;      /* get_id: ids on one connection must increase */
} bench_conn;

/* A log-linear latency histogram in nanoseconds: exact below 128 ns, then 64
 * buckets per power of two, so a reported quantile is within 1% of the truth. */
#define HIST_SUB_BITS 7
#define HIST_SUB (1 << HIST_SUB_BITS)
#define HIST_BUCKETS (HIST_SUB * 58)

typedef struct bench_hist {
    uint64_t counts[HIST_BUCKETS];
    uint64_t total;
    int64_t max_ns;
} bench_hist;

typedef struct bench_stats {
    uint64_t replies;
    uint64_t ids;
    uint64_t errors;
    uint64_t declared_exceptions;
    uint64_t app_exceptions;
    uint64_t closed_by_server;
    uint64_t bad_replies;
    char first_error[256];
} bench_stats;

typedef struct bench_state {
    bench_options opt;
    int epfd;
    bench_conn *conns;
    uint8_t *request; /* one encoded request, frame length included */
    size_t request_len;
    const char *method;
    /* decoding the first reply of each connection with the generated code */
    ThriftMemoryBuffer *decode_buf;
    ThriftProtocol *decode_proto;
    SfThriftSnowflakeClient *decode_client;
    bench_hist hist;
    bench_stats stats;
    bool sending; /* false once the measuring window has closed */
    uint64_t started; /* requests whose sending began */
    /* open loop */
    int64_t next_due_ns;  /* when the next request is due */
    int64_t interval_ns;  /* between two requests' due times */
    bench_conn **idle;    /* connections with no request in flight */
    int nidle;
    uint64_t sent_late;   /* requests that found every connection busy when due */
    int64_t waited_due_ns; /* the due time last counted in sent_late */
} bench_state;

/* Maps a latency to its histogram bucket. */
static int hist_index(int64_t ns)
{
    uint64_t v = ns < 0 ? 0 : (uint64_t)ns;
    if (v < HIST_SUB)
        return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int shift = msb - HIST_SUB_BITS + 1;
    /* group `shift` holds [HIST_SUB/2 << shift, HIST_SUB << shift) in HIST_SUB/2 steps */
    int sub = (int)(v >> shift); /* HIST_SUB/2 .. HIST_SUB-1 */
    int index = HIST_SUB + (shift - 1) * (HIST_SUB / 2) + (sub - HIST_SUB / 2);
    return index < HIST_BUCKETS ? index : HIST_BUCKETS - 1;
}

/* The middle of a bucket's value range, the value reported for a quantile in it. */
static int64_t hist_value(int index)
{
    if (index < HIST_SUB)
        return index;
    int shift = (index - HIST_SUB) / (HIST_SUB / 2) + 1;
    int sub = (index - HIST_SUB) % (HIST_SUB / 2) + HIST_SUB / 2;
    int64_t low = (int64_t)sub << shift;
    return low + (((int64_t)1 << shift) / 2);
}

/* Records one latency sample. */
static void hist_add(bench_hist *h, int64_t ns)
{
    h->counts[hist_index(ns)]++;
    h->total++;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

/* The latency below which fraction q of the samples lie; 0 with no samples. */
static int64_t hist_quantile(const bench_hist *h, double q)
{
    if (h->total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->total);
    if (rank >= h->total)
        rank = h->total - 1;
    uint64_t seen = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen > rank) {
            int64_t v = hist_value(i);
            return v > h->max_ns ? h->max_ns : v;
        }
    }
    return h->max_ns;
}

/* Notes an error; the first one is kept word for word for the report. */
static void note_error(bench_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_error(bench_state *st, const char *fmt, ...)
{
    st->stats.errors++;
    if (st->stats.first_error[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->stats.first_error, sizeof st->stats.first_error, fmt, ap);
    va_end(ap);
}

/* Reads a big-endian 64-bit integer. */
static int64_t be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)load_wire_be32(p) << 32 | load_wire_be32(p + 4));
}

/* Encodes the mode's request once into st->request. */
static bool encode_request(bench_state *st)
{
    st->request = load_wire_encode(BENCH_AGENT, st->opt.mode == MODE_GET_IDS ? st->opt.count : 0,
                                    &st->request_len);
    return st->request != NULL;
}

/* Sets up the generated client that decodes each connection's first reply. */
static void decoder_init(bench_state *st)
{
    st->decode_buf = g_object_new(THRIFT_TYPE_MEMORY_BUFFER, "buf_size", BENCH_MAX_FRAME, NULL);
    st->decode_proto = g_object_new(THRIFT_TYPE_BINARY_PROTOCOL, "transport", st->decode_buf,
                                    NULL);
    st->decode_client = g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_CLIENT,
                                     "input_protocol", st->decode_proto,
                                     "output_protocol", st->decode_proto, NULL);
}

/* Frees the decoder. */
static void decoder_free(bench_state *st)
{
    g_clear_object(&st->decode_client);
    g_clear_object(&st->decode_proto);
    g_clear_object(&st->decode_buf);
}

/* Decodes one reply payload fully with the generated recv function, checking
 * that it carries a result (an id, or count ids in increasing order).
 * Returns false and notes the reason otherwise. */
static bool decode_reply_fully(bench_state *st, const uint8_t *payload, size_t len)
{
    GError *error = NULL;
    SfThriftSnowflakeIf *iface = SF_THRIFT_SNOWFLAKE_IF(st->decode_client);
    ThriftTransport *t = THRIFT_TRANSPORT(st->decode_buf);
    g_byte_array_set_size(st->decode_buf->buf, 0);
    if (!thrift_transport_write(t, (gpointer)payload, (guint32)len, &error)) {
        note_error(st, "cannot buffer a %zu-byte reply: %s", len, error->message);
        g_error_free(error);
        return false;
    }
    SfThriftInvalidSystemClock *clock_error = NULL;
    SfThriftInvalidUserAgentError *agent_error = NULL;
    SfThriftInvalidRequestError *request_error = NULL;
    SfThriftServiceUnavailable *unavailable = NULL;
    bool ok;
    if (st->opt.mode == MODE_GET_IDS) {
        /* the generated client appends into a container the caller allocates */
        GArray *ids = g_array_new(FALSE, FALSE, sizeof(gint64));
        ok = sf_thrift_snowflake_client_recv_get_ids(iface, &ids, &clock_error, &agent_error,
                                                     &request_error, &unavailable, &error);
        if (ok && (ids == NULL || ids->len != (guint)st->opt.count)) {
            note_error(st, "get_ids(%d) returned %u ids", st->opt.count, ids ? ids->len : 0);
            ok = false;
        }
        for (guint i = 1; ok && i < ids->len; i++) {
            if (g_array_index(ids, gint64, i) <= g_array_index(ids, gint64, i - 1)) {
                note_error(st, "get_ids returned id %" PRId64 " after %" PRId64,
                           (int64_t)g_array_index(ids, gint64, i),
                           (int64_t)g_array_index(ids, gint64, i - 1));
                ok = false;
            }
        }
        if (ids != NULL)
            g_array_unref(ids);
    } else {
        gint64 id = 0;
        ok = sf_thrift_snowflake_client_recv_get_id(iface, &id, &clock_error, &agent_error,
                                                    &unavailable, &error);
        if (ok && id <= 0) {
            note_error(st, "get_id returned the non-positive id %" PRId64, (int64_t)id);
            ok = false;
        }
    }
    if (!ok && (error != NULL || clock_error || agent_error || request_error || unavailable)) {
        const char *what = error ? error->message
                           : clock_error ? "InvalidSystemClock"
                           : agent_error ? "InvalidUserAgentError"
                           : request_error ? "InvalidRequestError"
                           : "ServiceUnavailable";
        note_error(st, "%s reply did not decode to a result: %s", st->method, what);
    }
    g_clear_error(&error);
    g_clear_object(&clock_error);
    g_clear_object(&agent_error);
    g_clear_object(&request_error);
    g_clear_object(&unavailable);
    if (ok && st->decode_buf->buf->len != 0) {
        note_error(st, "%u bytes left over after decoding a %s reply", st->decode_buf->buf->len,
                   st->method);
        ok = false;
    }
    return ok;
}

/* The fast check of a reply: a strict-binary REPLY message for our method whose
 * struct starts with field 0 (success) of the right type. For get_id also the id,
 * which must be larger than the last one on this connection. */
static bool check_reply_header(bench_state *st, bench_conn *c, const uint8_t *p, size_t len)
{
    if (len < 8) {
        note_error(st, "a %zu-byte reply is too short for a message header", len);
        return false;
    }
    uint32_t word = load_wire_be32(p);
    if ((word & TB_VERSION_MASK) != TB_VERSION_1) {
        note_error(st, "reply does not start with a binary protocol version (0x%08x)", word);
        return false;
    }
    int type = (int)(word & 0xff);
    if (type == TB_EXCEPTION) {
        st->stats.app_exceptions++;
        note_error(st, "the server answered %s with a TApplicationException", st->method);
        return false;
    }
    if (type != TB_REPLY) {
        note_error(st, "reply has message type %d, expected %d (REPLY)", type, TB_REPLY);
        return false;
    }
    uint32_t name_len = load_wire_be32(p + 4);
    size_t method_len = strlen(st->method);
    size_t off = 8 + (size_t)name_len + 4; /* name, seqid */
    if (name_len != method_len || len < off + 3 || memcmp(p + 8, st->method, method_len) != 0) {
        note_error(st, "reply names a method other than %s", st->method);
        return false;
    }
    int field_type = p[off];
    int field_id = (int)((unsigned)p[off + 1] << 8 | p[off + 2]);
    int want_type = st->opt.mode == MODE_GET_IDS ? TB_TYPE_LIST : TB_TYPE_I64;
    if (field_id != 0 || field_type != want_type) {
        st->stats.declared_exceptions++;
        note_error(st, "%s reply carries field %d (type %d), not a result: a declared exception",
                   st->method, field_id, field_type);
        return false;
    }
    off += 3;
    if (st->opt.mode == MODE_GET_IDS) {
        if (len < off + 5 || p[off] != TB_TYPE_I64 || load_wire_be32(p + off + 1) != (uint32_t)st->opt.count) {
            note_error(st, "get_ids(%d) reply does not hold %d i64 values", st->opt.count,
                       st->opt.count);
            return false;
        }
    } else {
        if (len < off + 8) {
            note_error(st, "get_id reply is cut short");
            return false;
        }
        int64_t id = be64(p + off);
        if (id <= c->last_id) {
            note_error(st, "get_id returned %" PRId64 " after %" PRId64 " on one connection", id,
                       c->last_id);
            return false;
        }
        c->last_id = id;
    }
    return true;
}

/* Closes a connection and forgets it. */
static void conn_close(bench_state *st, bench_conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(st->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->state = CONN_CLOSED;
}

/* Changes the events a connection waits for. */
static bool conn_watch(bench_state *st, bench_conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(st->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
        note_error(st, "epoll_ctl: %s", strerror(errno));
        conn_close(st, c);
        return false;
    }
    return true;
}

/* Writes (the rest of) the request. Waits for EPOLLOUT only on a partial write,
 * which loopback almost never produces for a request this small. */
static void conn_send(bench_state *st, bench_conn *c)
{
    if (c->sent == 0) {
        c->sent_at_ns = load_now_ns();
        st->started++;
    }
    while (c->sent < st->request_len) {
        ssize_t n = send(c->fd, st->request + c->sent, st->request_len - c->sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_watch(st, c, EPOLLIN | EPOLLOUT);
            return;
        }
        if (n < 0) {
            note_error(st, "send: %s", strerror(errno));
            conn_close(st, c);
            return;
        }
        c->sent += (size_t)n;
    }
    c->state = CONN_WAITING;
    c->in_len = 0;
}

/* Open loop: sends every request now due, each on an idle connection, its latency
 * counted from when it was due; what finds no idle connection waits for one. */
static void open_loop_dispatch(bench_state *st, int64_t now)
{
    while (st->sending && st->next_due_ns <= now && st->nidle > 0) {
        bench_conn *c = st->idle[--st->nidle];
        if (c->state != CONN_READY)
            continue;
        conn_send(st, c);
        c->sent_at_ns = st->next_due_ns;
        st->next_due_ns += st->interval_ns;
    }
    if (st->sending && st->next_due_ns <= now && st->nidle == 0 &&
        st->waited_due_ns != st->next_due_ns) {
        st->waited_due_ns = st->next_due_ns;
        st->sent_late++;
    }
}

/* Handles one complete reply frame: validates it, records the latency and, while
 * the window is open, sends the next request (closed loop) or frees the connection
 * for the next one due (open loop). */
static void conn_reply(bench_state *st, bench_conn *c, int64_t now)
{
    const uint8_t *payload = c->in + 4;
    size_t len = c->in_len - 4;
    bool ok = c->replies == 0 ? decode_reply_fully(st, payload, len)
                              : check_reply_header(st, c, payload, len);
    if (ok && c->replies == 0 && st->opt.mode == MODE_GET_ID)
        ok = check_reply_header(st, c, payload, len); /* also seeds last_id */
    if (!ok) {
        st->stats.bad_replies++;
        conn_close(st, c);
        return;
    }
    c->replies++;
    st->stats.replies++;
    st->stats.ids += st->opt.mode == MODE_GET_IDS ? (uint64_t)st->opt.count : 1;
    hist_add(&st->hist, now - c->sent_at_ns);
    c->state = CONN_READY;
    c->sent = 0;
    c->in_len = 0;
    if (st->sending && st->opt.rate == 0) {
        if (st->opt.calls == 0 || st->started < (uint64_t)st->opt.calls)
            conn_send(st, c);
    } else if (st->sending) {
        st->idle[st->nidle++] = c;
        open_loop_dispatch(st, load_now_ns());
    }
}

/* Reads what the socket holds; a connection has at most one reply in flight, so
 * bytes beyond the reply's frame are a protocol error. */
static void conn_read(bench_state *st, bench_conn *c, int64_t now)
{
    for (;;) {
        if (c->in_len == c->in_cap) {
            size_t cap = c->in_cap * 2;
            uint8_t *grown = realloc(c->in, cap);
            if (grown == NULL) {
                note_error(st, "out of memory for a %zu-byte reply buffer", cap);
                conn_close(st, c);
                return;
            }
            c->in = grown;
            c->in_cap = cap;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            st->stats.closed_by_server++;
            note_error(st, "the server closed a connection%s%s", n < 0 ? ": " : "",
                       n < 0 ? strerror(errno) : "");
            conn_close(st, c);
            return;
        }
        c->in_len += (size_t)n;
        if (c->state != CONN_WAITING) {
            note_error(st, "the server sent %zd bytes nobody asked for", n);
            conn_close(st, c);
            return;
        }
        if (c->in_len < 4)
            continue;
        uint32_t frame = load_wire_be32(c->in);
        if (frame == 0 || frame > BENCH_MAX_FRAME) {
            note_error(st, "reply frame length %u is outside 1..%d", frame, BENCH_MAX_FRAME);
            conn_close(st, c);
            return;
        }
        if (c->in_len < 4 + (size_t)frame)
            continue;
        if (c->in_len > 4 + (size_t)frame) {
            note_error(st, "the server sent %zu bytes after a reply nobody asked for",
                       c->in_len - 4 - frame);
            conn_close(st, c);
            return;
        }
        conn_reply(st, c, now);
        return;
    }
}

/* Completes a non-blocking connect; false if it failed. */
static bool conn_finish_connect(bench_state *st, bench_conn *c)
{
    int soerr = 0;
    socklen_t slen = sizeof soerr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &slen) != 0 || soerr != 0) {
        note_error(st, "cannot connect to %s:%d: %s", st->opt.host, st->opt.port,
                   strerror(soerr ? soerr : errno));
        conn_close(st, c);
        return false;
    }
    c->state = CONN_READY;
    return conn_watch(st, c, EPOLLIN);
}

/* Starts a non-blocking connect for every connection. */
static bool open_connections(bench_state *st, const struct sockaddr_in *addr)
{
    for (int i = 0; i < st->opt.connections; i++) {
        bench_conn *c = &st->conns[i];
        c->in_cap = st->opt.mode == MODE_GET_IDS ? 16384 : 256;
        c->in = malloc(c->in_cap);
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->in == NULL || c->fd < 0) {
            fprintf(stderr, "bench_server: cannot open connection %d of %d: %s\n", i + 1,
                    st->opt.connections, c->in ? strerror(errno) : "out of memory");
            return false;
        }
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->state = CONN_CONNECTING;
        c->last_id = 0;
        if (connect(c->fd, (const struct sockaddr *)addr, sizeof *addr) != 0 &&
            errno != EINPROGRESS) {
            fprintf(stderr, "bench_server: cannot connect to %s:%d: %s\n", st->opt.host,
                    st->opt.port, strerror(errno));
            return false;
        }
        struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
        if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
            fprintf(stderr, "bench_server: epoll_ctl: %s\n", strerror(errno));
            return false;
        }
    }
    return true;
}

/* Counts connections in a state. */
static int count_state(const bench_state *st, conn_state s)
{
    int n = 0;
    for (int i = 0; i < st->opt.connections; i++)
        n += st->conns[i].state == s;
    return n;
}

/* One round of the event loop: waits up to timeout_ns and dispatches events. The wait
 * is to the nanosecond (epoll_pwait2), so an open loop sends on time. */
static void loop_once(bench_state *st, int64_t timeout_ns)
{
    struct epoll_event events[256];
    struct timespec timeout = {.tv_sec = timeout_ns / 1000000000,
                               .tv_nsec = timeout_ns % 1000000000};
    int n = epoll_pwait2(st->epfd, events, 256, &timeout, NULL);
    if (n < 0) {
        if (errno != EINTR)
            note_error(st, "epoll_wait: %s", strerror(errno));
        return;
    }
    int64_t now = load_now_ns();
    for (int i = 0; i < n; i++) {
        bench_conn *c = events[i].data.ptr;
        if (c->state == CONN_CLOSED)
            continue;
        if (c->state == CONN_CONNECTING) {
            conn_finish_connect(st, c);
            continue;
        }
        if ((events[i].events & EPOLLOUT) && c->state == CONN_READY && c->sent > 0) {
            if (conn_watch(st, c, EPOLLIN))
                conn_send(st, c);
            if (c->state == CONN_CLOSED)
                continue;
        }
        if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
            conn_read(st, c, now);
    }
}

/* Nanoseconds until deadline_ns, at least 0. */
static int64_t ns_until(int64_t deadline_ns)
{
    int64_t left = deadline_ns - load_now_ns();
    return left > 0 ? left : 0;
}

/* Connects every connection, giving up after a timeout. */
static bool connect_all(bench_state *st, const struct sockaddr_in *addr)
{
    if (!open_connections(st, addr))
        return false;
    int64_t deadline = load_now_ns() + BENCH_CONNECT_TIMEOUT_NS;
    while (count_state(st, CONN_CONNECTING) > 0 && !load_stop_requested) {
        if (load_now_ns() >= deadline) {
            fprintf(stderr, "bench_server: %d of %d connections to %s:%d still pending after 10 s\n",
                    count_state(st, CONN_CONNECTING), st->opt.connections, st->opt.host,
                    st->opt.port);
            return false;
        }
        loop_once(st, ns_until(deadline));
    }
    if (st->stats.errors > 0) {
        fprintf(stderr, "bench_server: %s\n", st->stats.first_error);
        return false;
    }
    return !load_stop_requested;
}

/* Runs the measuring window: every connection sends, and each reply triggers the
 * next request until the window closes; late replies are drained, not counted. */
static void run_load(bench_state *st, int64_t *elapsed_ns)
{
    st->sending = true;
    int64_t start = load_now_ns();
    int64_t end = start + (int64_t)(st->opt.seconds * 1e9);
    if (st->opt.rate == 0) {
        for (int i = 0; i < st->opt.connections; i++)
            if (st->opt.calls == 0 || st->started < (uint64_t)st->opt.calls)
                conn_send(st, &st->conns[i]);
    } else {
        st->interval_ns = 1000000000LL / st->opt.rate;
        st->next_due_ns = start;
        for (int i = st->opt.connections - 1; i >= 0; i--)
            st->idle[st->nidle++] = &st->conns[i];
    }
    while (!load_stop_requested && load_now_ns() < end && count_state(st, CONN_CLOSED) < st->opt.connections &&
           (st->opt.calls == 0 || st->stats.replies < (uint64_t)st->opt.calls)) {
        int64_t wait = ns_until(end);
        if (st->opt.rate != 0) {
            open_loop_dispatch(st, load_now_ns());
            int64_t due = st->nidle > 0 ? ns_until(st->next_due_ns) : wait;
            wait = due < wait ? due : wait;
        }
        loop_once(st, wait);
    }
    int64_t stop = load_now_ns();
    *elapsed_ns = (stop < end ? stop : end) - start;
    st->sending = false;
    bench_stats counted = st->stats;
    bench_hist *counted_hist = malloc(sizeof *counted_hist);
    if (counted_hist != NULL)
        memcpy(counted_hist, &st->hist, sizeof *counted_hist);
    int64_t drain_end = load_now_ns() + BENCH_DRAIN_TIMEOUT_NS;
    while (count_state(st, CONN_WAITING) > 0 && load_now_ns() < drain_end)
        loop_once(st, ns_until(drain_end));
    /* Replies that arrive after the window are checked, not counted. */
    uint64_t late_errors = st->stats.errors - counted.errors;
    char first_error[sizeof st->stats.first_error];
    memcpy(first_error, st->stats.first_error, sizeof first_error);
    st->stats = counted;
    st->stats.errors += late_errors;
    memcpy(st->stats.first_error, first_error, sizeof first_error);
    if (counted_hist != NULL) {
        memcpy(&st->hist, counted_hist, sizeof st->hist);
        free(counted_hist);
    }
}

/* Idle mode: takes one id on every connection (decoded fully), reports that the
 * connections are open, then holds them until the time is up or a signal comes. */
static void run_idle(bench_state *st)
{
    st->sending = false;
    for (int i = 0; i < st->opt.connections; i++)
        conn_send(st, &st->conns[i]);
    int64_t deadline = load_now_ns() + BENCH_CONNECT_TIMEOUT_NS;
    while (count_state(st, CONN_WAITING) > 0 && load_now_ns() < deadline && !load_stop_requested)
        loop_once(st, ns_until(deadline));
    int open = count_state(st, CONN_READY);
    printf("bench_server: holding %d idle connections\n", open);
    fflush(stdout);
    int64_t end = load_now_ns() + (int64_t)(st->opt.seconds * 1e9);
    while (!load_stop_requested && load_now_ns() < end)
        loop_once(st, ns_until(end) > 1000000000 ? 1000000000 : ns_until(end));
}

/* Raises the open-file limit to what the connections need, if the hard limit allows. */
static void raise_fd_limit(int connections)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)connections + 64;
    if (rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
        fprintf(stderr, "bench_server: warning: open-file limit %llu is below the %llu that %d "
                        "connections need (raise it with ulimit -n)\n",
                (unsigned long long)rl.rlim_cur, (unsigned long long)want, connections);
}

/* Prints usage. */
static void usage(FILE *out)
{
    fprintf(out,
            "usage: bench_server --port N [--host ADDR] [--connections C] [--seconds T]\n"
            "                    [--mode get_id|get_ids|idle] [--count N] [--rate R | --calls N]\n"
            "  --host         server address (default 127.0.0.1)\n"
            "  --port         server port, 1..65535 (required)\n"
            "  --connections  concurrent connections, 1..1000000 (default 1)\n"
            "  --seconds      length of the run or of the idle hold, >0 (default 5)\n"
            "  --mode         get_id (calls/s, latency), get_ids (ids/s) or idle (default get_id)\n"
            "  --count        ids per get_ids call, 1..1000000 (default 1000)\n"
            "  --rate         open loop: R requests due per second over all connections,\n"
            "                 latency counted from when each was due, 1..100000000\n"
            "                 (default: closed loop, each reply sends the next request)\n"
            "  --calls        closed loop: stop once N requests are answered, or the time is\n"
            "                 up, whichever comes first, 1..1000000000 (default: the time)\n");
}

/* Parses a whole decimal integer in [min, max]; false otherwise. */
static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* Fills opt from argv; exits with a message naming the bad flag on error. */
static void parse_options(int argc, char **argv, bench_options *opt)
{
    static const struct option longopts[] = {
        {"host", required_argument, NULL, 'h'},  {"port", required_argument, NULL, 'p'},
        {"connections", required_argument, NULL, 'c'},
        {"seconds", required_argument, NULL, 's'}, {"mode", required_argument, NULL, 'm'},
        {"count", required_argument, NULL, 'n'}, {"rate", required_argument, NULL, 'r'},
        {"calls", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'H'},
        {NULL, 0, NULL, 0}};
    *opt = (bench_options){.host = "127.0.0.1", .port = 0, .connections = 1, .seconds = 5,
                           .mode = MODE_GET_ID, .count = 1000};
    int ch;
    long v;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            opt->host = optarg;
            break;
        case 'p':
            if (!parse_long(optarg, 1, 65535, &v)) {
                fprintf(stderr, "bench_server: --port %s: expected 1..65535\n", optarg);
                exit(2);
            }
            opt->port = (int)v;
            break;
        case 'c':
            if (!parse_long(optarg, 1, 1000000, &v)) {
                fprintf(stderr, "bench_server: --connections %s: expected 1..1000000\n", optarg);
                exit(2);
            }
            opt->connections = (int)v;
            break;
        case 's': {
            char *end;
            opt->seconds = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(opt->seconds > 0 && opt->seconds <= 86400)) {
                fprintf(stderr, "bench_server: --seconds %s: expected a number in (0, 86400]\n",
                        optarg);
                exit(2);
            }
            break;
        }
        case 'm':
            if (strcmp(optarg, "get_id") == 0)
                opt->mode = MODE_GET_ID;
            else if (strcmp(optarg, "get_ids") == 0)
                opt->mode = MODE_GET_IDS;
            else if (strcmp(optarg, "idle") == 0)
                opt->mode = MODE_IDLE;
            else {
                fprintf(stderr, "bench_server: --mode %s: expected get_id, get_ids or idle\n",
                        optarg);
                exit(2);
            }
            break;
        case 'n':
            if (!parse_long(optarg, 1, 1000000, &v)) {
                fprintf(stderr, "bench_server: --count %s: expected 1..1000000\n", optarg);
                exit(2);
            }
            opt->count = (int)v;
            break;
        case 'r':
            if (!parse_long(optarg, 1, 100000000, &opt->rate)) {
                fprintf(stderr, "bench_server: --rate %s: expected 1..100000000\n", optarg);
                exit(2);
            }
            break;
        case 'C':
            if (!parse_long(optarg, 1, 1000000000, &opt->calls)) {
                fprintf(stderr, "bench_server: --calls %s: expected 1..1000000000\n", optarg);
                exit(2);
            }
            break;
        case 'H':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (opt->calls != 0 && opt->rate != 0) {
        fprintf(stderr, "bench_server: --calls counts a closed loop's requests; it cannot go "
                        "with --rate\n");
        exit(2);
    }
    if (optind != argc || opt->port == 0) {
        fprintf(stderr, "bench_server: %s\n",
                opt->port == 0 ? "--port is required" : "unexpected argument");
        usage(stderr);
        exit(2);
    }
}

/* Resolves the host to an IPv4 address; exits with a message if it cannot. */
static void resolve(const bench_options *opt, struct sockaddr_in *addr)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(opt->host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        fprintf(stderr, "bench_server: cannot resolve --host %s: %s\n", opt->host,
                gai_strerror(rc));
        exit(2);
    }
    memcpy(addr, res->ai_addr, sizeof *addr);
    addr->sin_port = htons((uint16_t)opt->port);
    freeaddrinfo(res);
}

/* Prints the figures, human-readable and as one key=value line. */
static void report(const bench_state *st, int64_t elapsed_ns)
{
    double secs = (double)elapsed_ns / 1e9;
    double calls = secs > 0 ? (double)st->stats.replies / secs : 0;
    double ids = secs > 0 ? (double)st->stats.ids / secs : 0;
    double p50 = (double)hist_quantile(&st->hist, 0.50) / 1000.0;
    double p99 = (double)hist_quantile(&st->hist, 0.99) / 1000.0;
    double p999 = (double)hist_quantile(&st->hist, 0.999) / 1000.0;
    double max = (double)st->hist.max_ns / 1000.0;
    const char *mode = st->opt.mode == MODE_GET_IDS ? "get_ids" : "get_id";
    printf("%s: %d connections, %.2f s: %" PRIu64 " calls, %.0f calls/s, %.0f ids/s\n", mode,
           st->opt.connections, secs, st->stats.replies, calls, ids);
    printf("latency us: p50 %.1f  p99 %.1f  p999 %.1f  max %.1f\n", p50, p99, p999, max);
    if (st->opt.rate != 0)
        printf("open loop: %ld requests due per second; %" PRIu64 " found every connection "
               "busy when due\n", st->opt.rate, st->sent_late);
    if (st->stats.errors > 0)
        printf("errors: %" PRIu64 " (first: %s)\n", st->stats.errors, st->stats.first_error);
    printf("bench_server: mode=%s connections=%d count=%d seconds=%.3f calls=%" PRIu64
           " calls_per_s=%.0f ids_per_s=%.0f p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f"
           " rate=%ld sent_late=%" PRIu64 " errors=%" PRIu64 "\n",
           mode, st->opt.connections, st->opt.mode == MODE_GET_IDS ? st->opt.count : 1, secs,
           st->stats.replies, calls, ids, p50, p99, p999, max, st->opt.rate, st->sent_late,
           st->stats.errors);
}

int main(int argc, char **argv)
{
    bench_state *st = calloc(1, sizeof *st);
    if (st == NULL) {
        fprintf(stderr, "bench_server: out of memory\n");
        return 1;
    }
    parse_options(argc, argv, &st->opt);
    st->method = st->opt.mode == MODE_GET_IDS ? "get_ids" : "get_id";
    struct sockaddr_in addr;
    resolve(&st->opt, &addr);
    raise_fd_limit(st->opt.connections);
    /* Open loop: wake on the due time, not up to the default 50 us timer slack after it,
     * which would be counted as the server's latency. */
    if (st->opt.rate != 0 && prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) != 0)
        fprintf(stderr, "bench_server: warning: cannot set the timer slack: %s\n",
                strerror(errno));
    load_catch_signals();

    if (!encode_request(st))
        return 1;
    decoder_init(st);
    st->conns = calloc((size_t)st->opt.connections, sizeof *st->conns);
    st->idle = calloc((size_t)st->opt.connections, sizeof *st->idle);
    st->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (st->conns == NULL || st->idle == NULL || st->epfd < 0) {
        fprintf(stderr, "bench_server: cannot set up %d connections: %s\n", st->opt.connections,
                st->conns ? strerror(errno) : "out of memory");
        return 1;
    }
    for (int i = 0; i < st->opt.connections; i++)
        st->conns[i].fd = -1;

    int status = 0;
    if (!connect_all(st, &addr)) {
        status = 1;
    } else if (st->opt.mode == MODE_IDLE) {
        run_idle(st);
        int open = count_state(st, CONN_READY);
        printf("bench_server: mode=idle connections=%d open=%d errors=%" PRIu64 "\n",
               st->opt.connections, open, st->stats.errors);
        if (st->stats.errors > 0 || open != st->opt.connections) {
            fprintf(stderr, "bench_server: %d of %d connections lost%s%s\n",
                    st->opt.connections - open, st->opt.connections,
                    st->stats.errors ? ": " : "", st->stats.first_error);
            status = 1;
        }
    } else {
        int64_t elapsed_ns = 0;
        run_load(st, &elapsed_ns);
        report(st, elapsed_ns);
        if (st->stats.errors > 0 || st->stats.replies == 0) {
            fprintf(stderr, "bench_server: %s\n",
                    st->stats.errors ? st->stats.first_error : "no reply within the run");
            status = 1;
        }
    }

    for (int i = 0; i < st->opt.connections; i++) {
        conn_close(st, &st->conns[i]);
        free(st->conns[i].in);
    }
    close(st->epfd);
    free(st->conns);
    free(st->idle);
    free(st->request);
    decoder_free(st);
    free(st);
    return status;
}
