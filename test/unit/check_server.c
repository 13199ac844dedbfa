/* check_server.c -- sf_server + SfHandler end to end over loopback: the generated client, raw bad input, the gate. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/transport/thrift_framed_transport.h>
#include <thrift/c_glib/transport/thrift_socket.h>

#include "server/admin.h"
#include "hand_frames.h"
#include "server/handler.h"
#include "server/standalone.h"
#include "server/server.h"
#include "lib/snowflake.h"
#include "rpc/thrift_fix.h"

#define TEST_DATACENTER 3
#define TEST_WORKER 7
#define TEST_MAX_BATCH 1000
#define TEST_MAX_FRAME 1024
#define TEST_IDLE_MS 1500
#define TEST_FRAME_MS 300
/* How long a test waits for something that should happen (a reply, a close, the port
 * opening): generous, since the suite also runs on busy build machines, and a wait on an
 * event ends as soon as it comes. Well below the default idle timeout (300 s), so a close
 * that should not come is not mistaken for one that should. */
#define TEST_PATIENCE_MS 60000

static SfHandler *handler;
static sf_standalone *standalone; /* the worker and gate the test publishes: handler's source */
static sf_server *server;
static int port;
/* The loop every server of this run uses: main runs the suite once per loop, and asks
 * for each by name, so a loop that cannot start fails rather than falls back. */
static sf_server_loop test_loop;

/* A handler with the default limits and get_ids' count bounded by max_batch, whose ids
 * come from what the test publishes to standalone. */
static SfHandler *new_handler(int max_batch)
{
    sf_handler_options o;
    sf_handler_options_init(&o);
    o.max_batch_size = max_batch;
    SfHandler *h = sf_handler_new(&o);
    standalone = sf_standalone_new();
    ck_assert(standalone != NULL);
    sf_handler_set_source(h, sf_standalone_source(standalone));
    return h;
}

static void free_handler(void)
{
    g_object_unref(handler);
    sf_standalone_free(standalone);
    standalone = NULL;
}

/* A real client of the generated code over a framed socket. */
typedef struct client {
    ThriftSocket *socket;
    ThriftTransport *transport;
    ThriftProtocol *protocol;
    SfThriftSnowflakeIf *iface;
} client;

/* The daemon's withholding rule: no reply made while refusing as not serving. */
static bool withhold_refusals(void *ctx)
{
    (void)ctx;
    return sf_handler_take_unavailable();
}

/* Starts a server and handler on a free loopback port for one test; follow_gate = bound
 * only until asked to listen, and refusals withheld, as a registered daemon runs it. */
static void start_server_full(int max_connections, bool follow_gate)
{
    sf_worker_options wo;
    sf_error err;
    sf_worker_options_init(&wo);
    wo.datacenter_id = TEST_DATACENTER;
    wo.worker_id = TEST_WORKER;
    sf_worker *w = sf_worker_new(&wo, &err);
    ck_assert_msg(w != NULL, "%s", err.message);
    handler = new_handler(TEST_MAX_BATCH);
    sf_standalone_publish(standalone, w, TRUE, 0, 0, NULL);
    ThriftProcessor *proc =
        g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_PROCESSOR, "handler", handler, NULL);
    sf_server_options so;
    sf_server_options_init(&so);
    so.bind_address = "127.0.0.1";
    so.port = 0;
    so.threads = 2;
    so.max_frame_size = TEST_MAX_FRAME;
    so.max_connections = max_connections;
    so.idle_timeout_ms = TEST_IDLE_MS;
    so.frame_timeout_ms = TEST_FRAME_MS;
    so.event_loop = test_loop;
    if (follow_gate) {
        so.listen_at_start = false;
        so.withhold_replies = withhold_refusals;
    }
    GError *gerr = NULL;
    server = sf_server_new(&so, proc, &gerr);
    ck_assert_msg(server != NULL, "%s", gerr ? gerr->message : "?");
    g_object_unref(proc);
    ck_assert_msg(sf_server_start(server, &gerr), "%s", gerr ? gerr->message : "?");
    port = sf_server_port(server);
    ck_assert_int_gt(port, 0);
}

static void start_server_with(int max_connections)
{
    start_server_full(max_connections, false);
}

static void setup(void)
{
    start_server_with(1000);
}

static void teardown(void)
{
    sf_server_free(server);
    free_handler();
}

static client *client_open(void)
{
    client *c = g_new0(client, 1);
    c->socket = g_object_new(THRIFT_TYPE_SOCKET, "hostname", "127.0.0.1", "port", port, NULL);
    c->transport = g_object_new(THRIFT_TYPE_FRAMED_TRANSPORT, "transport", c->socket, NULL);
    c->protocol = g_object_new(THRIFT_TYPE_BINARY_PROTOCOL, "transport", c->transport, NULL);
    c->iface = g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_CLIENT, "input_protocol", c->protocol,
                            "output_protocol", c->protocol, NULL);
    GError *err = NULL;
    ck_assert_msg(thrift_transport_open(c->transport, &err), "open: %s",
                  err ? err->message : "?");
    return c;
}

static void client_close(client *c)
{
    thrift_transport_close(c->transport, NULL);
    g_object_unref(c->iface);
    g_object_unref(c->protocol);
    g_object_unref(c->transport);
    g_object_unref(c->socket);
    g_free(c);
}

/* One get_id through the generated client; fails the test on any error. */
static int64_t client_get_id(client *c, const char *agent)
{
    gint64 id = 0;
    GError *err = NULL;
    SfThriftInvalidSystemClock *ce = NULL;
    SfThriftInvalidUserAgentError *ae = NULL;
    SfThriftServiceUnavailable *ue = NULL;
    gboolean ok = sf_thrift_snowflake_if_get_id(c->iface, &id, agent, &ce, &ae, &ue, &err);
    ck_assert_msg(ok, "get_id failed: %s", err ? err->message : "a declared exception");
    return id;
}

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        ck_assert_msg(n > 0, "send: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* True when the server closes fd within timeout_ms (EOF or reset). The idle timeout closes
 * any silent connection in 1.5 s, so each test tells which close it got by the server's
 * counters, not by how soon it came. */
static bool wait_closed(int fd, int timeout_ms)
{
    uint8_t buf[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, timeout_ms);
        if (rc <= 0)
            return false;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
        if (n < 0)
            return false;
    }
}

/* Reads exactly len bytes or fails the test. */
static void recv_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        ck_assert_msg(poll(&pf, 1, TEST_PATIENCE_MS) == 1, "no reply within %d s",
                      TEST_PATIENCE_MS / 1000);
        ssize_t n = recv(fd, p, len, 0);
        ck_assert_msg(n > 0, "connection closed while reading a reply");
        p += n;
        len -= (size_t)n;
    }
}

/* Appends one framed binary-protocol get_id call, written by hand. */
static void append_get_id_frame(GByteArray *b, int32_t seqid, const char *agent)
{
    GByteArray *args = g_byte_array_new();
    uint8_t field[3] = {11, 0, 1}; /* T_STRING, id 1 */
    g_byte_array_append(args, field, 3);
    hand_put32(args, (uint32_t)strlen(agent));
    g_byte_array_append(args, (const guint8 *)agent, (guint)strlen(agent));
    hand_append_call(b, "get_id", seqid, args->data, args->len);
    g_byte_array_free(args, TRUE);
}

START_TEST(test_four_methods)
{
    client *c = client_open();
    gint64 v = 0;
    GError *err = NULL;
    ck_assert(sf_thrift_snowflake_if_get_worker_id(c->iface, &v, &err));
    ck_assert_int_eq(v, TEST_WORKER);
    ck_assert(sf_thrift_snowflake_if_get_datacenter_id(c->iface, &v, &err));
    ck_assert_int_eq(v, TEST_DATACENTER);
    /* The times are checked against clock readings taken around the calls, so a test
     * thread that waits long for its reply still brackets the server's reading. */
    int64_t before = sf_clock_now_ms();
    ck_assert(sf_thrift_snowflake_if_get_timestamp(c->iface, &v, &err));
    int64_t after = sf_clock_now_ms();
    ck_assert_int_ge(v, before - 1000);
    ck_assert_int_le(v, after + 1000);
    before = sf_clock_now_ms();
    int64_t a = client_get_id(c, "check-server");
    int64_t b = client_get_id(c, "check-server");
    after = sf_clock_now_ms();
    ck_assert_int_gt(b, a);
    sf_decoded d;
    ck_assert_int_eq(sf_decode(b, SF_TWITTER_EPOCH_MS, &d, NULL), SF_OK);
    ck_assert_int_eq(d.worker_id, TEST_WORKER);
    ck_assert_int_eq(d.datacenter_id, TEST_DATACENTER);
    ck_assert_int_ge(d.timestamp_ms, before - 1000);
    ck_assert_int_le(d.timestamp_ms, after + 1000);
    client_close(c);
    sf_handler_stats hs;
    sf_handler_get_stats(handler, &hs);
    ck_assert_uint_eq(hs.ids_generated, 2);
}
END_TEST

START_TEST(test_bad_user_agent)
{
    client *c = client_open();
    const char *bad[] = {"1abc", "", "has space", "under_score"};
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        gint64 id = 0;
        GError *err = NULL;
        SfThriftInvalidSystemClock *ce = NULL;
        SfThriftInvalidUserAgentError *ae = NULL;
        SfThriftServiceUnavailable *ue = NULL;
        ck_assert(!sf_thrift_snowflake_if_get_id(c->iface, &id, bad[i], &ce, &ae, &ue, &err));
        ck_assert_msg(ae != NULL, "agent \"%s\" was not refused as a bad agent", bad[i]);
        gchar *msg = NULL;
        g_object_get(ae, "message", &msg, NULL);
        ck_assert_msg(strstr(msg, bad[i]) != NULL && strstr(msg, "[a-zA-Z]") != NULL,
                      "message \"%s\" names neither the agent nor the grammar", msg);
        g_free(msg);
        g_object_unref(ae);
        g_clear_error(&err);
    }
    /* The connection is still usable after declared exceptions. */
    ck_assert_int_gt(client_get_id(c, "Good-Agent-9"), 0);
    client_close(c);
    sf_handler_stats hs;
    sf_handler_get_stats(handler, &hs);
    ck_assert_uint_eq(hs.exceptions, G_N_ELEMENTS(bad));
}
END_TEST

/* Calls get_ids and returns the request error's message (or NULL on success). */
static char *try_get_ids(client *c, int32_t count, GArray **ids)
{
    GError *err = NULL;
    SfThriftInvalidSystemClock *ce = NULL;
    SfThriftInvalidUserAgentError *ae = NULL;
    SfThriftInvalidRequestError *re = NULL;
    SfThriftServiceUnavailable *ue = NULL;
    *ids = g_array_new(FALSE, FALSE, sizeof(gint64));
    if (sf_thrift_snowflake_if_get_ids(c->iface, ids, "batch", count, &ce, &ae, &re, &ue, &err))
        return NULL;
    ck_assert_msg(re != NULL, "get_ids(%d) failed without InvalidRequestError: %s", count,
                  err ? err->message : "another exception");
    char *msg = NULL;
    g_object_get(re, "message", &msg, NULL);
    g_object_unref(re);
    g_clear_error(&err);
    return msg;
}

START_TEST(test_get_ids)
{
    client *c = client_open();
    GArray *ids;
    ck_assert_ptr_null(try_get_ids(c, TEST_MAX_BATCH, &ids));
    ck_assert_uint_eq(ids->len, TEST_MAX_BATCH);
    for (guint i = 1; i < ids->len; i++)
        ck_assert_int_gt(g_array_index(ids, gint64, i), g_array_index(ids, gint64, i - 1));
    g_array_unref(ids);
    int32_t bad[] = {0, -5, TEST_MAX_BATCH + 1};
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        char *msg = try_get_ids(c, bad[i], &ids);
        ck_assert_ptr_nonnull(msg);
        char *count = g_strdup_printf("%d", bad[i]);
        ck_assert_msg(strstr(msg, count) && strstr(msg, "1..1000"),
                      "message \"%s\" does not name the count and the range", msg);
        g_free(count);
        g_free(msg);
        g_array_unref(ids);
    }
    client_close(c);
}
END_TEST

START_TEST(test_pipelined_in_order)
{
    enum { N = 100 };
    int fd = raw_connect();
    GByteArray *req = g_byte_array_new();
    for (int i = 0; i < N; i++)
        append_get_id_frame(req, 1000 + i, "pipeline");
    send_all(fd, req->data, req->len); /* one write */
    g_byte_array_free(req, TRUE);
    int64_t last = 0;
    for (int i = 0; i < N; i++) {
        uint8_t hdr[4];
        recv_all(fd, hdr, 4);
        uint32_t len = hand_get32(hdr);
        ck_assert_uint_lt(len, 256);
        uint8_t body[256];
        recv_all(fd, body, len);
        ck_assert_uint_eq(hand_get32(body), 0x80010002u); /* T_REPLY */
        uint32_t nlen = hand_get32(body + 4);
        ck_assert_uint_eq(nlen, 6);
        ck_assert_int_eq((int32_t)hand_get32(body + 8 + nlen), 1000 + i);
        const uint8_t *f = body + 12 + nlen;
        ck_assert_uint_eq(f[0], 10); /* T_I64 success, field 0 */
        ck_assert_uint_eq(f[1] << 8 | f[2], 0);
        int64_t id = (int64_t)((uint64_t)hand_get32(f + 3) << 32 | hand_get32(f + 7));
        ck_assert_int_gt(id, last);
        last = id;
    }
    close(fd);
}
END_TEST

typedef struct worker_result {
    client *c;
    int64_t ids[50];
} worker_result;

static gpointer concurrent_worker(gpointer data)
{
    worker_result *r = data;
    for (int i = 0; i < 50; i++)
        r->ids[i] = client_get_id(r->c, "concurrent");
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

START_TEST(test_concurrent_unique)
{
    enum { CONNS = 100 };
    worker_result *r = g_new0(worker_result, CONNS);
    GThread *threads[CONNS];
    for (int i = 0; i < CONNS; i++)
        r[i].c = client_open(); /* all 100 open at once */
    for (int i = 0; i < CONNS; i++)
        threads[i] = g_thread_new("client", concurrent_worker, &r[i]);
    for (int i = 0; i < CONNS; i++)
        g_thread_join(threads[i]);
    int64_t *all = g_new(int64_t, CONNS * 50);
    for (int i = 0; i < CONNS; i++) {
        memcpy(all + i * 50, r[i].ids, sizeof r[i].ids);
        client_close(r[i].c);
    }
    qsort(all, CONNS * 50, sizeof *all, cmp_i64);
    for (int i = 1; i < CONNS * 50; i++)
        ck_assert_msg(all[i] != all[i - 1], "duplicate id %" G_GINT64_FORMAT, all[i]);
    g_free(all);
    g_free(r);
    sf_server_stats ss;
    sf_server_get_stats(server, &ss);
    ck_assert_uint_ge(ss.connections_accepted, CONNS);
}
END_TEST

/* After bad input on one connection, a new client still gets ids. */
static void assert_fresh_client_served(void)
{
    client *c = client_open();
    ck_assert_int_gt(client_get_id(c, "fresh"), 0);
    client_close(c);
}

START_TEST(test_oversized_frame)
{
    client *bystander = client_open();
    int fd = raw_connect();
    uint8_t hdr[4] = {0x00, 0x10, 0x00, 0x00}; /* 1 MiB > max_frame_size */
    send_all(fd, hdr, 4);
    ck_assert_msg(wait_closed(fd, TEST_PATIENCE_MS),
                  "an oversized frame did not close the connection");
    close(fd);
    ck_assert_int_gt(client_get_id(bystander, "bystander"), 0);
    client_close(bystander);
    assert_fresh_client_served();
    sf_server_stats ss;
    sf_server_get_stats(server, &ss);
    ck_assert_uint_eq(ss.frames_refused, 1);
}
END_TEST

START_TEST(test_garbage_frame)
{
    int fd = raw_connect();
    uint8_t junk[24] = {0, 0, 0, 20, 0xde, 0xad, 0xbe, 0xef, 0x12, 0x34, 0x56, 0x78,
                        0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8};
    send_all(fd, junk, sizeof junk);
    ck_assert_msg(wait_closed(fd, TEST_PATIENCE_MS),
                  "a garbage frame did not close the connection");
    close(fd);
    /* Plain text, as from a confused HTTP client: the header is a huge length. */
    fd = raw_connect();
    send_all(fd, "GET / HTTP/1.0\r\n\r\n", 18);
    ck_assert(wait_closed(fd, TEST_PATIENCE_MS));
    close(fd);
    assert_fresh_client_served();
    sf_server_stats ss;
    sf_server_get_stats(server, &ss);
    ck_assert_uint_eq(ss.frames_refused, 2);
}
END_TEST

START_TEST(test_frame_cut_short)
{
    GByteArray *req = g_byte_array_new();
    append_get_id_frame(req, 1, "short");
    /* Stalls mid-frame: the frame timeout closes it. */
    int fd = raw_connect();
    send_all(fd, req->data, req->len - 5);
    ck_assert_msg(wait_closed(fd, TEST_PATIENCE_MS), "a stalled frame was never timed out");
    close(fd);
    /* Closes mid-frame: the server closes too, with no reply. */
    fd = raw_connect();
    send_all(fd, req->data, 10);
    shutdown(fd, SHUT_WR);
    ck_assert(wait_closed(fd, TEST_PATIENCE_MS));
    close(fd);
    g_byte_array_free(req, TRUE);
    assert_fresh_client_served();
    sf_server_stats ss;
    sf_server_get_stats(server, &ss);
    ck_assert_uint_eq(ss.frame_timeouts, 1);
    ck_assert_uint_eq(ss.frames_refused, 1);
}
END_TEST

START_TEST(test_idle_timeout)
{
    /* The clock is read before connecting: the server may accept, and start the idle
     * clock, before a busy test thread returns from connect. */
    int64_t start = sf_clock_now_ms();
    int fd = raw_connect();
    ck_assert_msg(wait_closed(fd, TEST_PATIENCE_MS), "an idle connection was never closed");
    ck_assert_int_ge(sf_clock_now_ms() - start, TEST_IDLE_MS - 100);
    close(fd);
    assert_fresh_client_served();
    sf_server_stats ss;
    sf_server_get_stats(server, &ss);
    ck_assert_uint_eq(ss.idle_timeouts, 1);
}
END_TEST

START_TEST(test_gate)
{
    client *c = client_open();
    ck_assert_int_gt(client_get_id(c, "gate"), 0);
    sf_handler_close(handler, "lost the ZooKeeper session");
    gint64 v = 0;
    GError *err = NULL;
    SfThriftInvalidSystemClock *ce = NULL;
    SfThriftInvalidUserAgentError *ae = NULL;
    SfThriftServiceUnavailable *ue = NULL;
    ck_assert(!sf_thrift_snowflake_if_get_id(c->iface, &v, "gate", &ce, &ae, &ue, &err));
    ck_assert_ptr_nonnull(ue);
    gchar *msg = NULL;
    g_object_get(ue, "message", &msg, NULL);
    ck_assert_str_eq(msg, "lost the ZooKeeper session");
    g_free(msg);
    g_clear_object(&ue);
    g_clear_error(&err);
    GArray *ids = g_array_new(FALSE, FALSE, sizeof(gint64));
    SfThriftInvalidRequestError *re = NULL;
    ck_assert(!sf_thrift_snowflake_if_get_ids(c->iface, &ids, "gate", 5, &ce, &ae, &re, &ue,
                                              &err));
    ck_assert_msg(ue != NULL, "get_ids was not refused with ServiceUnavailable: %s",
                  re ? "InvalidRequestError" : "another exception");
    g_clear_object(&ue);
    g_clear_error(&err);
    g_array_unref(ids);
    /* The getters still answer while closed. */
    ck_assert(sf_thrift_snowflake_if_get_worker_id(c->iface, &v, &err));
    ck_assert_int_eq(v, TEST_WORKER);
    ck_assert(sf_thrift_snowflake_if_get_timestamp(c->iface, &v, &err));
    ck_assert_int_gt(v, 0);
    /* No worker held: get_worker_id is -1 and ids stay refused even if open. */
    sf_standalone_publish(standalone, NULL, TRUE, 0, 0, NULL);
    ck_assert(sf_thrift_snowflake_if_get_worker_id(c->iface, &v, &err));
    ck_assert_int_eq(v, -1);
    ck_assert(!sf_thrift_snowflake_if_get_id(c->iface, &v, "gate", &ce, &ae, &ue, &err));
    ck_assert_ptr_nonnull(ue);
    g_clear_object(&ue);
    g_clear_error(&err);
    char *reason = NULL;
    ck_assert(!sf_handler_is_serving(handler, &reason));
    ck_assert_ptr_nonnull(reason);
    g_free(reason);
    /* A new worker: ids flow again, from the new worker id. */
    sf_worker_options wo;
    sf_worker_options_init(&wo);
    wo.datacenter_id = TEST_DATACENTER;
    wo.worker_id = 9;
    sf_standalone_publish(standalone, sf_worker_new(&wo, NULL), TRUE, 0, 0, NULL);
    sf_decoded d;
    ck_assert_int_eq(sf_decode(client_get_id(c, "gate"), SF_TWITTER_EPOCH_MS, &d, NULL), SF_OK);
    ck_assert_int_eq(d.worker_id, 9);
    client_close(c);
    sf_handler_stats hs;
    sf_handler_get_stats(handler, &hs);
    ck_assert_uint_eq(hs.unavailable_errors, 3);
}
END_TEST

/* Boot-clock ms, the lease's clock. */
static int64_t test_boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

START_TEST(test_lease)
{
    client *c = client_open();
    gint64 v = 0;
    GError *err = NULL;
    SfThriftInvalidSystemClock *ce = NULL;
    SfThriftInvalidUserAgentError *ae = NULL;
    SfThriftServiceUnavailable *ue = NULL;
    /* No lease (standalone) serves. */
    sf_standalone_renew(standalone, 0, 0);
    ck_assert(sf_handler_is_serving(handler, NULL));
    ck_assert_int_gt(client_get_id(c, "lease"), 0);
    /* A lease in the future serves. */
    sf_standalone_renew(standalone, test_boot_ms() + 60000, 0);
    ck_assert(sf_handler_is_serving(handler, NULL));
    ck_assert_int_gt(client_get_id(c, "lease"), 0);
    /* A lease in the past refuses get_id, get_ids and the health check, with the gate open. */
    sf_standalone_renew(standalone, test_boot_ms() - 5000, 0);
    ck_assert(!sf_thrift_snowflake_if_get_id(c->iface, &v, "lease", &ce, &ae, &ue, &err));
    ck_assert_ptr_nonnull(ue);
    gchar *msg = NULL;
    g_object_get(ue, "message", &msg, NULL);
    ck_assert_msg(strstr(msg, "lease expired") != NULL && strstr(msg, "ms ago") != NULL, "%s",
                  msg);
    g_free(msg);
    g_clear_object(&ue);
    g_clear_error(&err);
    GArray *ids = g_array_new(FALSE, FALSE, sizeof(gint64));
    SfThriftInvalidRequestError *re = NULL;
    ck_assert(!sf_thrift_snowflake_if_get_ids(c->iface, &ids, "lease", 5, &ce, &ae, &re, &ue,
                                              &err));
    ck_assert_ptr_nonnull(ue);
    ck_assert_uint_eq(ids->len, 0);
    g_clear_object(&ue);
    g_clear_error(&err);
    g_array_unref(ids);
    char *reason = NULL;
    ck_assert(!sf_handler_is_serving(handler, &reason));
    ck_assert_ptr_nonnull(reason);
    ck_assert_msg(strstr(reason, "lease expired") != NULL, "%s", reason);
    g_free(reason);
    /* A renewed lease serves again. */
    sf_standalone_renew(standalone, test_boot_ms() + 60000, 0);
    ck_assert_int_gt(client_get_id(c, "lease"), 0);
    client_close(c);
    sf_handler_stats hs;
    sf_handler_get_stats(handler, &hs);
    ck_assert_uint_eq(hs.unavailable_errors, 2);
    ck_assert(hs.serving);
}
END_TEST

static void count_agent(const char *agent, uint64_t count, void *ctx)
{
    GHashTable *seen = ctx;
    g_hash_table_insert(seen, g_strdup(agent), GSIZE_TO_POINTER((gsize)count));
}

START_TEST(test_per_agent_counts)
{
    client *c = client_open();
    for (int i = 0; i < 3; i++)
        client_get_id(c, "alpha");
    client_get_id(c, "beta");
    GArray *ids;
    ck_assert_ptr_null(try_get_ids(c, 10, &ids)); /* agent "batch" */
    g_array_unref(ids);
    client_close(c);
    GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    sf_handler_foreach_agent(handler, count_agent, seen);
    ck_assert_uint_eq(GPOINTER_TO_SIZE(g_hash_table_lookup(seen, "alpha")), 3);
    ck_assert_uint_eq(GPOINTER_TO_SIZE(g_hash_table_lookup(seen, "beta")), 1);
    ck_assert_uint_eq(GPOINTER_TO_SIZE(g_hash_table_lookup(seen, "batch")), 10);
    ck_assert_uint_eq(g_hash_table_size(seen), 3);
    g_hash_table_unref(seen);
}
END_TEST

START_TEST(test_max_connections)
{
    sf_server_free(server);
    free_handler();
    start_server_with(2);
    client *a = client_open();
    client *b = client_open();
    ck_assert_int_gt(client_get_id(a, "a"), 0);
    ck_assert_int_gt(client_get_id(b, "b"), 0);
    int fd = raw_connect(); /* the kernel accepts; the server closes it */
    ck_assert_msg(wait_closed(fd, TEST_PATIENCE_MS),
                  "a connection beyond max_connections was kept");
    close(fd);
    client_close(a);
    /* Capacity frees up once a client leaves: the server has seen a's close before c
     * connects, or c would be refused too. */
    sf_server_stats ss;
    gint64 until = g_get_monotonic_time() + TEST_PATIENCE_MS * G_TIME_SPAN_MILLISECOND;
    for (;;) {
        sf_server_get_stats(server, &ss);
        if (ss.connections_open < 2)
            break;
        ck_assert_msg(g_get_monotonic_time() < until, "a's close never freed its place");
        g_usleep(20000);
    }
    client *c = client_open();
    ck_assert_int_gt(client_get_id(c, "c"), 0);
    client_close(c);
    client_close(b);
    sf_server_get_stats(server, &ss);
    ck_assert_uint_eq(ss.connections_refused, 1);
}
END_TEST

START_TEST(test_graceful_stop_answers_received_frames)
{
    enum { N = 20 };
    int fd = raw_connect();
    GByteArray *req = g_byte_array_new();
    for (int i = 0; i < N; i++)
        append_get_id_frame(req, i, "stop");
    /* Make sure the server has the connection, then send and stop at once. */
    client *c = client_open();
    client_get_id(c, "stop");
    client_close(c);
    send_all(fd, req->data, req->len);
    g_byte_array_free(req, TRUE);
    /* The stop returns once the replies are sent, and the server closes fd after them,
     * so long limits cost nothing; short ones could cut off a thread that runs late. */
    sf_server_stop(server, TEST_PATIENCE_MS);
    int replies = 0;
    uint8_t hdr[4], body[256];
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, TEST_PATIENCE_MS) != 1 || recv(fd, hdr, 4, MSG_WAITALL) != 4)
            break;
        uint32_t len = hand_get32(hdr);
        ck_assert_uint_lt(len, sizeof body);
        ck_assert_int_eq(recv(fd, body, len, MSG_WAITALL), (ssize_t)len);
        replies++;
    }
    ck_assert_int_eq(replies, N);
    close(fd);
}
END_TEST

/* errno of one connect to the test's port: 0 when it connected. */
static int connect_errno(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

/* Waits up to TEST_PATIENCE_MS for connects to give want (0 = connected, or an errno). */
static bool wait_connect_errno(int want)
{
    gint64 until = g_get_monotonic_time() + TEST_PATIENCE_MS * G_TIME_SPAN_MILLISECOND;
    for (;;) {
        if (connect_errno() == want)
            return true;
        if (g_get_monotonic_time() >= until)
            return false;
        g_usleep(20000);
    }
}

START_TEST(test_port_follows_listening)
{
    sf_server_free(server);
    free_handler();
    start_server_full(1000, true);
    /* Bound, not listening: the port is ours and refuses connects. */
    ck_assert_int_eq(connect_errno(), ECONNREFUSED);
    sf_server_set_listening(server, true);
    ck_assert_msg(wait_connect_errno(0), "the port never opened");
    int fd = raw_connect();
    client *c = client_open();
    ck_assert_int_gt(client_get_id(c, "open"), 0);
    /* Closing: open connections are closed unanswered, and connects refused. */
    sf_server_set_listening(server, false);
    ck_assert_msg(wait_closed(fd, TEST_PATIENCE_MS),
                  "an open connection outlived the closed port");
    close(fd);
    ck_assert_msg(wait_connect_errno(ECONNREFUSED), "connects still accepted");
    client_close(c);
    /* Each thread drops its own connections on its next loop turn: c's may not be on
     * the thread that closed fd. */
    sf_server_stats ss;
    gint64 until = g_get_monotonic_time() + TEST_PATIENCE_MS * G_TIME_SPAN_MILLISECOND;
    for (;;) {
        sf_server_get_stats(server, &ss);
        if (ss.connections_dropped >= 2 || g_get_monotonic_time() >= until)
            break;
        g_usleep(20000);
    }
    ck_assert_uint_ge(ss.connections_dropped, 2);
    ck_assert(!ss.listening);
    /* Open again on the same port. */
    sf_server_set_listening(server, true);
    ck_assert_msg(wait_connect_errno(0), "the port never opened again");
    c = client_open();
    ck_assert_int_gt(client_get_id(c, "again"), 0);
    client_close(c);
    /* A refusal is never sent: the connection is closed instead. */
    sf_handler_close(handler, "test: not serving");
    fd = raw_connect();
    GByteArray *req = g_byte_array_new();
    append_get_id_frame(req, 1, "refused");
    send_all(fd, req->data, req->len);
    g_byte_array_free(req, TRUE);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, TEST_PATIENCE_MS), 1);
    uint8_t byte;
    ssize_t n = recv(fd, &byte, 1, 0);
    ck_assert_msg(n == 0 || (n < 0 && errno == ECONNRESET),
                  "a refusal was answered (%zd bytes) instead of closing", n);
    close(fd);
    sf_server_get_stats(server, &ss);
    ck_assert_uint_eq(ss.replies_withheld, 1);
}
END_TEST

/* The statistics (and the `listening` gauge built on them) never say the port listens once
 * connects are refused: thread 0 publishes that it stopped before it closes the socket.
 * Many rounds, each asking at the first refusal, so a window between the two is found;
 * TEST_PATIENCE_MS for thread 0 to act, as a loaded machine may need. */
START_TEST(test_stats_never_claim_a_closed_port)
{
    sf_server_free(server);
    free_handler();
    start_server_full(1000, true);
    for (int round = 0; round < 300; round++) {
        sf_server_set_listening(server, true);
        ck_assert_msg(sf_server_wait_listening(server, TEST_PATIENCE_MS),
                      "round %d: never listening", round);
        ck_assert_msg(connect_errno() == 0, "round %d: the stats say listening, connects fail",
                      round);
        sf_server_set_listening(server, false);
        gint64 until = g_get_monotonic_time() + TEST_PATIENCE_MS * G_TIME_SPAN_MILLISECOND;
        while (connect_errno() != ECONNREFUSED)
            ck_assert_msg(g_get_monotonic_time() < until, "round %d: connects still accepted",
                          round);
        sf_server_stats ss;
        sf_server_get_stats(server, &ss);
        ck_assert_msg(!ss.listening, "round %d: connects refused, the stats still say listening",
                      round);
    }
}
END_TEST

/* Feeds the admin endpoint from the test's handler and server. */
static void collect_for_test(sf_admin_snapshot *snap, void *ctx)
{
    (void)ctx;
    sf_handler_stats hs;
    sf_server_stats ss;
    sf_handler_get_stats(handler, &hs);
    sf_server_get_stats(server, &ss);
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, "ids_generated", NULL,
                          (int64_t)hs.ids_generated, "Ids handed out");
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, "ids_generated", "web-1", 2, "Per agent");
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, "frames_refused", NULL,
                          (int64_t)ss.frames_refused, "Bad frames");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "worker_id", NULL, hs.worker_id, "Worker id");
    char *reason = NULL;
    gboolean serving = sf_handler_is_serving(handler, &reason);
    sf_admin_snapshot_set_health(snap, serving, reason);
    g_free(reason);
}

/* Sends a GET over a raw socket and returns the whole response. */
static char *http_get(int admin_port, const char *path)
{
    int saved = port;
    port = admin_port;
    int fd = raw_connect();
    port = saved;
    char *req = g_strdup_printf("GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    send_all(fd, req, strlen(req));
    g_free(req);
    GString *resp = g_string_new(NULL);
    char buf[4096];
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        ck_assert_msg(poll(&pf, 1, TEST_PATIENCE_MS) == 1, "no HTTP response within %d s",
                      TEST_PATIENCE_MS / 1000);
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            break;
        g_string_append_len(resp, buf, n);
    }
    close(fd);
    return g_string_free(resp, FALSE);
}

START_TEST(test_admin_endpoints)
{
    GError *err = NULL;
    sf_admin *admin = sf_admin_start("127.0.0.1", 0, collect_for_test, NULL, &err);
    ck_assert_msg(admin != NULL, "%s", err ? err->message : "?");
    int aport = sf_admin_port(admin);
    ck_assert_int_gt(aport, 0);
    client *c = client_open();
    client_get_id(c, "web-1");
    client_get_id(c, "web-1");
    client_close(c);

    char *r = http_get(aport, "/stats.json");
    ck_assert_msg(g_str_has_prefix(r, "HTTP/1.0 200") || g_str_has_prefix(r, "HTTP/1.1 200"), "%s", r);
    ck_assert_msg(strstr(r, "\"counters\":{\"ids_generated\":2,\"ids_generated_web-1\":2,"
                            "\"frames_refused\":0}") != NULL, "%s", r);
    ck_assert_msg(strstr(r, "\"gauges\":{\"worker_id\":7}") != NULL, "%s", r);
    g_free(r);

    r = http_get(aport, "/metrics");
    ck_assert_msg(strstr(r, "# TYPE snowflake_ids_generated_total counter\n"
                            "snowflake_ids_generated_total 2\n") != NULL, "%s", r);
    ck_assert_msg(strstr(r, "snowflake_ids_generated_by_agent_total{agent=\"web-1\"} 2\n"), "%s", r);
    ck_assert_msg(strstr(r, "# TYPE snowflake_worker_id gauge\nsnowflake_worker_id 7\n"), "%s", r);
    g_free(r);

    r = http_get(aport, "/health");
    ck_assert_msg(strstr(r, " 200 ") && strstr(r, "serving"), "%s", r);
    g_free(r);
    sf_handler_close(handler, "fenced: ZooKeeper session lost");
    r = http_get(aport, "/health");
    ck_assert_msg(strstr(r, " 503 ") && strstr(r, "fenced: ZooKeeper session lost"), "%s", r);
    g_free(r);

    r = http_get(aport, "/nothing-here");
    ck_assert_msg(strstr(r, " 404 ") != NULL, "%s", r);
    g_free(r);
    sf_admin_stop(admin);
}
END_TEST

static Suite *server_suite(void)
{
    Suite *s = suite_create("server");
    TCase *tc = tcase_create("loopback");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_four_methods);
    tcase_add_test(tc, test_bad_user_agent);
    tcase_add_test(tc, test_get_ids);
    tcase_add_test(tc, test_pipelined_in_order);
    tcase_add_test(tc, test_concurrent_unique);
    tcase_add_test(tc, test_oversized_frame);
    tcase_add_test(tc, test_garbage_frame);
    tcase_add_test(tc, test_frame_cut_short);
    tcase_add_test(tc, test_idle_timeout);
    tcase_add_test(tc, test_gate);
    tcase_add_test(tc, test_lease);
    tcase_add_test(tc, test_per_agent_counts);
    tcase_add_test(tc, test_max_connections);
    tcase_add_test(tc, test_graceful_stop_answers_received_frames);
    tcase_add_test(tc, test_port_follows_listening);
    tcase_add_test(tc, test_stats_never_claim_a_closed_port);
    tcase_add_test(tc, test_admin_endpoints);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    sf_thrift_fix_finalize(); /* the client's structs too */
    sf_thrift_fix_processor();
    int failed = 0;
    const sf_server_loop loops[] = {SF_SERVER_LOOP_EPOLL, SF_SERVER_LOOP_IO_URING};
    for (size_t i = 0; i < G_N_ELEMENTS(loops); i++) {
        test_loop = loops[i];
        printf("event loop: %s\n", sf_server_loop_name(test_loop));
        fflush(stdout);
        SRunner *sr = srunner_create(server_suite());
        srunner_run_all(sr, CK_NORMAL);
        failed += srunner_ntests_failed(sr);
        srunner_free(sr);
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
