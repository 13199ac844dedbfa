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
#include "server/history.h"
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
    sf_admin_snapshot_add(snap, SF_ADMIN_GAUGE, "peer_clock_skew_ms", NULL, -1500, "Skew");
    static const int64_t bounds[] = {-10, 0, 250};
    static const uint64_t counts[] = {1, 2, 3, 4};
    sf_admin_snapshot_add_histogram(snap, "offset_ms", "Offsets", bounds, counts, 3, 1234);
    const char *labels[] = {"reason", "zookeeper_unreachable", "note", "a\"b", NULL};
    sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "snowflake_not_serving_reason", labels,
                                 serving ? 0 : 1, "Why");
    sf_admin_snapshot_add_metric(snap, SF_ADMIN_GAUGE, "process_start_time_seconds", NULL,
                                 1795659804.668, "Start");
    sf_admin_state st = {.reason_code = serving ? "none" : "zookeeper_unreachable",
                         .since_ms = 1795659804668, .session = "disconnected",
                         .worker_id_path = "/dc\"1", .worker_ids_taken = 3,
                         .worker_ids_total = 32, .worker_ids_current = FALSE,
                         .start_tries = serving ? 0 : 4,
                         .next_try_ms = serving ? 0 : 1795659805668};
    sf_admin_snapshot_set_state(snap, &st);
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
    sf_admin_set_server_info(admin, "9.9.9", "test build", "0123abcd", "node-1:7609");
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
    ASSERT_HAS(r, "\"gauges\":{\"worker_id\":7,\"worker_ids_free\":29,\"peer_clock_skew_ms\":-1500}");
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

START_TEST(metrics_in_base_units_and_alone)
{
    char *r = http(sf_admin_port(admin), "GET", "/metrics");
    /* Figures kept in ms are in seconds, under a name that says so. */
    ASSERT_HAS(r, "# TYPE snowflake_peer_clock_skew_seconds gauge\n"
                  "snowflake_peer_clock_skew_seconds -1.500\n");
    ck_assert_msg(strstr(r, "_ms") == NULL, "a name in ms:\n%s", r);
    ASSERT_HAS(r, "# TYPE snowflake_offset_seconds histogram\n"
                  "snowflake_offset_seconds_bucket{le=\"-0.01\"} 1\n"
                  "snowflake_offset_seconds_bucket{le=\"0\"} 3\n"
                  "snowflake_offset_seconds_bucket{le=\"0.25\"} 6\n"
                  "snowflake_offset_seconds_bucket{le=\"+Inf\"} 10\n"
                  "snowflake_offset_seconds_count 10\nsnowflake_offset_seconds_sum 1.234\n");
    ASSERT_HAS(r, "# TYPE snowflake_not_serving_reason gauge\n"
                  "snowflake_not_serving_reason{reason=\"zookeeper_unreachable\",note=\"a\\\"b\"} 0\n");
    ASSERT_HAS(r, "process_start_time_seconds 1795659804.668\n");
    ASSERT_HAS(r, "snowflake_build_info{version=\"9.9.9\",commit=\"0123abcd\","
                  "build=\"test build\"} 1\n");
    g_free(r);
    r = http(sf_admin_port(admin), "GET", "/stats.txt");
    ASSERT_HAS(r, "  peer_clock_skew_ms: -1500\n");
    ASSERT_HAS(r, "  offset_ms: (le_-10=1, le_0=3, le_250=6, count=10, sum=1234)\n");
    g_free(r);
}
END_TEST

START_TEST(state_json_names_the_node_and_reason)
{
    serving = FALSE;
    char *r = http(sf_admin_port(admin), "GET", "/state.json");
    ASSERT_HAS(r, "200 OK");
    ASSERT_HAS(r, "{\"node\":\"node-1:7609\",\"serving\":false,"
                  "\"reason\":\"fenced: ZooKeeper lost\","
                  "\"reason_code\":\"zookeeper_unreachable\",\"since_ms\":1795659804668,");
    ASSERT_HAS(r, ",\"zookeeper_session\":\"disconnected\",\"worker_ids\":{\"path\":\"/dc\\\"1\","
                  "\"taken\":3,\"free\":29,\"current\":false},\"clock_skew_ms\":null,"
                  "\"start\":{\"tries\":4,\"next_try_ms\":1795659805668}}\n");
    g_free(r);
    r = http(sf_admin_port(admin), "GET", "/favicon.ico");
    ASSERT_HAS(r, "200 OK");
    ASSERT_HAS(r, "Content-Type: image/x-icon");
    g_free(r);
    /* No history given: not found. */
    r = http(sf_admin_port(admin), "GET", "/history.json");
    ASSERT_HAS(r, "404 Not Found");
    g_free(r);
}
END_TEST

/* Counts up by 7 on each sample. */
static void sample(void *ctx, uint64_t *ids, gboolean *serving_now)
{
    uint64_t *n = ctx;
    *ids = (*n += 7);
    *serving_now = TRUE;
}

START_TEST(history_json_keeps_the_samples)
{
    uint64_t n = 0;
    sf_history *h = sf_history_start(sample, &n);
    sf_admin_set_history(admin, h);
    char *r = NULL;
    /* The first sample is taken at once, the next a second later: wait for two. */
    for (int i = 0; i < 600; i++) {
        g_free(r);
        r = http(sf_admin_port(admin), "GET", "/history.json");
        if (strstr(r, ",14,1]") != NULL)
            break;
        g_usleep(100000);
    }
    ASSERT_HAS(r, "{\"interval_ms\":1000,\"now_ms\":");
    ASSERT_HAS(r, ",7,1],[");
    ASSERT_HAS(r, ",14,1]");
    g_free(r);
    sf_admin_set_history(admin, NULL);
    sf_history_stop(h);
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
    ASSERT_HAS(r, "\"build\":\"test build\",\"commit\":\"0123abcd\",\"node\":\"node-1:7609\"");
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
    ASSERT_HAS(r, "get(\"/state.json\", \"json\")");
    ASSERT_HAS(r, "get(\"/history.json\", \"json\")");
    ASSERT_HAS(r, "<link id=\"icon\" rel=\"icon\" href=\"/favicon.ico\">");
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
    tcase_set_timeout(tc, 90); /* the history test waits for samples a second apart */
    tcase_add_test(tc, stats_json_in_the_original_shape);
    tcase_add_test(tc, metrics_in_prometheus_text);
    tcase_add_test(tc, metrics_in_base_units_and_alone);
    tcase_add_test(tc, state_json_names_the_node_and_reason);
    tcase_add_test(tc, history_json_keeps_the_samples);
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
