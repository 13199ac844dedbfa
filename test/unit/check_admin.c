/* check_admin.c -- the admin endpoint alone, over real HTTP on a loopback port: what each
 * path answers for the figures a collect function gives it (counters and gauges, per-agent
 * labels and labels of their own, timings, health), the status page, JSON and Prometheus
 * escaping of a hostile agent, and the answers to unknown paths and methods. */
#include <arpa/inet.h>
#include <check.h>
#include <glib.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/admin.h"
#include "server/latency.h"

/* What the collect function reports on the next request. */
static gboolean serving = TRUE;
static const char *agent = "rpc-client";

static void collect(sf_admin_snapshot *snap, void *ctx)
{
    (void)ctx;
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, "ids_generated", NULL, 42, "Ids handed out");
    sf_admin_snapshot_add(snap, SF_ADMIN_COUNTER, "ids_generated", agent, 40, "Ids per agent");
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "worker_id", NULL, 7, "Worker id in use");
    sf_admin_snapshot_add_labelled(snap, SF_ADMIN_GAUGE, "worker_ids_free", "path", "/dc\"1", 29,
                                   "Worker ids free");
    sf_latency lat;
    sf_latency_init(&lat);
    for (int i = 1; i <= 100; i++)
        sf_latency_record(&lat, (uint64_t)i * 1000); /* 1..100 us */
    sf_latency_snapshot timing;
    sf_latency_snapshot_init(&timing);
    sf_latency_add_to(&lat, &timing);
    sf_admin_snapshot_add_timing(snap, "get_id", &timing);
    sf_admin_snapshot_set_health(snap, serving, serving ? NULL : "fenced: ZooKeeper lost");
}

/* One HTTP/1.0 request; returns the whole answer (status line, headers, body). */
static char *http(int port, const char *method, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char *req = g_strdup_printf("%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
    ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    g_free(req);
    GString *out = g_string_new(NULL);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        g_string_append_len(out, buf, n);
    close(fd);
    return g_string_free(out, FALSE);
}

static sf_admin *admin;

static void start(void)
{
    GError *error = NULL;
    serving = TRUE;
    agent = "rpc-client";
    admin = sf_admin_start("127.0.0.1", 0, collect, NULL, &error);
    ck_assert_msg(admin != NULL, "%s", error ? error->message : "");
    sf_admin_set_server_info(admin, "9.9.9", "test build");
}

static void stop(void)
{
    sf_admin_stop(admin);
    admin = NULL;
}

#define ASSERT_HAS(text, part) ck_assert_msg(strstr((text), (part)) != NULL, "no %s in:\n%s", \
                                             (part), (text))

START_TEST(stats_json_in_the_original_shape)
{
    char *r = http(sf_admin_port(admin), "GET", "/stats.json");
    ASSERT_HAS(r, "200 OK");
    ASSERT_HAS(r, "\"counters\":{\"ids_generated\":42,\"ids_generated_rpc-client\":40}");
    ASSERT_HAS(r, "\"gauges\":{\"worker_id\":7,\"worker_ids_free\":29}");
    ASSERT_HAS(r, "\"timings\":{\"get_id\":{");
    ASSERT_HAS(r, "\"metrics\":{\"get_id\":{");
    ASSERT_HAS(r, "\"count\":100");
    ASSERT_HAS(r, "\"serving\":true");
    g_free(r);
    r = http(sf_admin_port(admin), "GET", "/stats.txt");
    ASSERT_HAS(r, "counters:\n  ids_generated: 42\n");
    ASSERT_HAS(r, "timings:\n  get_id: (");
    g_free(r);
}
END_TEST

START_TEST(metrics_in_prometheus_text)
{
    char *r = http(sf_admin_port(admin), "GET", "/metrics");
    ASSERT_HAS(r, "# TYPE snowflake_ids_generated_total counter\nsnowflake_ids_generated_total 42\n");
    ASSERT_HAS(r, "snowflake_ids_generated_by_agent_total{agent=\"rpc-client\"} 40\n");
    ASSERT_HAS(r, "snowflake_worker_id 7\n");
    ASSERT_HAS(r, "# TYPE snowflake_worker_ids_free gauge\n"
                  "snowflake_worker_ids_free{path=\"/dc\\\"1\"} 29\n");
    ASSERT_HAS(r, "snowflake_request_duration_seconds_count{method=\"get_id\"} 100\n");
    ASSERT_HAS(r, "snowflake_serving 1\n");
    g_free(r);
}
END_TEST

START_TEST(hostile_agent_is_escaped)
{
    agent = "a\"b\\c\nd";
    char *r = http(sf_admin_port(admin), "GET", "/metrics");
    ASSERT_HAS(r, "{agent=\"a\\\"b\\\\c\\nd\"} 40\n");
    g_free(r);
    r = http(sf_admin_port(admin), "GET", "/stats.json");
    ASSERT_HAS(r, "\"ids_generated_a\\\"b\\\\c\\u000ad\":40");
    g_free(r);
}
END_TEST

START_TEST(health_follows_serving)
{
    char *r = http(sf_admin_port(admin), "GET", "/health");
    ASSERT_HAS(r, "200 OK");
    ASSERT_HAS(r, "\r\n\r\nserving\n");
    g_free(r);
    serving = FALSE;
    r = http(sf_admin_port(admin), "GET", "/health");
    ASSERT_HAS(r, "503 Service Unavailable");
    ASSERT_HAS(r, "not serving: fenced: ZooKeeper lost\n");
    g_free(r);
}
END_TEST

START_TEST(ping_info_and_refusals)
{
    char *r = http(sf_admin_port(admin), "GET", "/ping");
    ASSERT_HAS(r, "\r\n\r\npong\n");
    g_free(r);
    r = http(sf_admin_port(admin), "GET", "/server_info.json");
    ASSERT_HAS(r, "\"version\":\"9.9.9\"");
    ASSERT_HAS(r, "\"build\":\"test build\"");
    ASSERT_HAS(r, "\"start_time\":\"");
    g_free(r);
    r = http(sf_admin_port(admin), "GET", "/nope");
    ASSERT_HAS(r, "404 Not Found");
    ASSERT_HAS(r, "try /, /stats.json");
    g_free(r);
    r = http(sf_admin_port(admin), "POST", "/stats.json");
    ASSERT_HAS(r, "405 Method Not Allowed");
    g_free(r);
}
END_TEST

START_TEST(status_page_is_served_whole)
{
    char *r = http(sf_admin_port(admin), "GET", "/");
    ASSERT_HAS(r, "200 OK");
    ASSERT_HAS(r, "Content-Type: text/html; charset=utf-8");
    ASSERT_HAS(r, "<title>snowflaked status</title>");
    ASSERT_HAS(r, "fetch(\"/stats.json\")");
    ASSERT_HAS(r, "</html>\n");
    ck_assert_msg(strstr(r, "src=\"http") == NULL && strstr(r, "href=\"http") == NULL,
                  "the page loads something from elsewhere:\n%s", r);
    g_free(r);
}
END_TEST

START_TEST(bad_bind_address_is_named)
{
    GError *error = NULL;
    sf_admin *a = sf_admin_start("localhost", 0, collect, NULL, &error);
    ck_assert(a == NULL);
    ck_assert_msg(error != NULL && strstr(error->message, "\"localhost\" is not a numeric") != NULL,
                  "%s", error ? error->message : "no error");
    g_clear_error(&error);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("admin");
    TCase *tc = tcase_create("http");
    tcase_add_checked_fixture(tc, start, stop);
    tcase_add_test(tc, stats_json_in_the_original_shape);
    tcase_add_test(tc, metrics_in_prometheus_text);
    tcase_add_test(tc, hostile_agent_is_escaped);
    tcase_add_test(tc, health_follows_serving);
    tcase_add_test(tc, ping_info_and_refusals);
    tcase_add_test(tc, status_page_is_served_whole);
    tcase_add_test(tc, bad_bind_address_is_named);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
