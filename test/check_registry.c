/* check_registry.c -- the registry against a real ZooKeeper server started by the harness. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define THREADED
#include <zookeeper/zookeeper.h>

#include "registry.h"
#include "snowflake.h"
#include "zk_harness.h"

static sf_test_zk zk; /* one server for the whole binary: the JVM takes a second to start */

/* Registry options for one test: its own path so tests do not see each other's nodes. */
static void test_options(sf_registry_options *o, const char *path, int64_t worker_id)
{
    sf_registry_options_init(o);
    o->hosts = zk.hosts;
    o->session_timeout_ms = 2000;
    o->worker_id_path = path;
    o->worker_id = worker_id;
    o->host_port = "127.0.0.1:7609";
    o->skip_sanity_checks = true;
    o->claim_retries = 1;
    o->claim_retry_wait_ms = 200;
}

/* A plain client for looking at the nodes the registry made. */
static zhandle_t *raw_client(void)
{
    zhandle_t *zh = zookeeper_init(zk.hosts, NULL, 4000, NULL, NULL, 0);
    ck_assert_ptr_nonnull(zh);
    for (int i = 0; i < 100 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    ck_assert_int_eq(zoo_state(zh), ZOO_CONNECTED_STATE);
    return zh;
}

/* Reads a node's data into buf; returns the ZooKeeper code. */
static int raw_get(zhandle_t *zh, const char *path, char *buf, int len, struct Stat *st)
{
    int n = len - 1;
    int rc = zoo_get(zh, path, 0, buf, &n, st);
    buf[rc == ZOK && n > 0 ? n : 0] = '\0';
    return rc;
}

START_TEST(static_claim_creates_ephemeral_node)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    test_options(&o, "/t-static", 7);
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    int64_t id, floor;
    ck_assert_msg(sf_registry_claim(r, &id, &floor, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(id, 7);
    ck_assert_int_eq(floor, -1);

    zhandle_t *zh = raw_client();
    char data[128];
    struct Stat st;
    ck_assert_int_eq(raw_get(zh, "/t-static/7", data, sizeof data, &st), ZOK);
    ck_assert_str_eq(data, "127.0.0.1:7609");
    ck_assert(st.ephemeralOwner != 0);
    sf_registry_close(r);
    /* The session closed: the node is gone at once, and the last timestamp recorded. */
    ck_assert_int_eq(raw_get(zh, "/t-static/7", data, sizeof data, NULL), ZNONODE);
    ck_assert_int_eq(raw_get(zh, "/t-static-state/7", data, sizeof data, NULL), ZOK);
    int64_t recorded = strtoll(data, NULL, 10);
    ck_assert(recorded > sf_clock_now_ms() - 10000 && recorded <= sf_clock_now_ms());
    zookeeper_close(zh);
}
END_TEST

START_TEST(static_conflict_names_holder)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    test_options(&o, "/t-conflict", 3);
    o.host_port = "127.0.0.1:1111";
    sf_registry *a = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    ck_assert_msg(sf_registry_claim(a, &id, &floor, err, sizeof err) == 0, "%s", err);

    o.host_port = "127.0.0.1:2222";
    sf_registry *b = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    err[0] = '\0';
    ck_assert_int_eq(sf_registry_claim(b, &id, &floor, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "127.0.0.1:1111") != NULL, "message: %s", err);
    sf_registry_close(b);

    /* Closing the holder frees the id at once for the next node. */
    sf_registry_close(a);
    sf_registry *c = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    ck_assert_msg(sf_registry_claim(c, &id, &floor, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(id, 3);
    sf_registry_close(c);
}
END_TEST

typedef struct claim_job {
    int64_t id;
    sf_registry *r;
    char err[SF_REGISTRY_ERR_MAX];
} claim_job;

/* One node starting with worker_id = auto. */
static void *auto_claim(void *arg)
{
    claim_job *job = arg;
    sf_registry_options o;
    int64_t floor;
    test_options(&o, "/t-auto", -1);
    job->id = -1;
    job->r = sf_registry_new(&o, job->err, sizeof job->err);
    if (job->r && sf_registry_claim(job->r, &job->id, &floor, job->err, sizeof job->err) != 0)
        job->id = -1;
    return NULL;
}

START_TEST(auto_ids_are_distinct_then_exhausted)
{
    enum { N = 8 };
    pthread_t t[N];
    claim_job jobs[SF_REGISTRY_MAX_WORKERS + 1];
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, auto_claim, &jobs[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    bool seen[SF_REGISTRY_MAX_WORKERS] = {false};
    for (int i = 0; i < N; i++) {
        ck_assert_msg(jobs[i].id >= 0, "node %d: %s", i, jobs[i].err);
        ck_assert_msg(!seen[jobs[i].id], "worker id %" PRId64 " given twice", jobs[i].id);
        seen[jobs[i].id] = true;
    }
    /* Fill the rest one by one, then the 33rd must fail naming the holders. */
    for (int i = N; i < SF_REGISTRY_MAX_WORKERS; i++) {
        auto_claim(&jobs[i]);
        ck_assert_msg(jobs[i].id >= 0, "node %d: %s", i, jobs[i].err);
        ck_assert(!seen[jobs[i].id]);
        seen[jobs[i].id] = true;
    }
    claim_job *last = &jobs[SF_REGISTRY_MAX_WORKERS];
    auto_claim(last);
    ck_assert_int_eq(last->id, -1);
    ck_assert_msg(strstr(last->err, "all 32 worker ids") && strstr(last->err, "31=127.0.0.1:7609"),
                  "message: %s", last->err);
    for (int i = 0; i <= SF_REGISTRY_MAX_WORKERS; i++)
        sf_registry_close(jobs[i].r);
    /* The lock nodes are gone: nothing waits behind a dead queue. */
    zhandle_t *zh = raw_client();
    struct String_vector kids = {0, NULL};
    ck_assert_int_eq(zoo_get_children(zh, "/t-auto-locks", 0, &kids), ZOK);
    ck_assert_int_eq(kids.count, 0);
    deallocate_String_vector(&kids);
    zookeeper_close(zh);
}
END_TEST

/* Writes a recorded timestamp for worker id 5 under path-state. */
static void record_floor(const char *path, int64_t ts)
{
    zhandle_t *zh = raw_client();
    char node[256], data[32];
    snprintf(node, sizeof node, "%s-state", path);
    zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    zoo_create(zh, node, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    snprintf(node, sizeof node, "%s-state/5", path);
    snprintf(data, sizeof data, "%" PRId64, ts);
    zoo_create(zh, node, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    ck_assert_int_eq(zoo_set(zh, node, data, (int)strlen(data), -1), ZOK);
    zookeeper_close(zh);
}

START_TEST(restart_safety_waits_for_recorded_timestamp)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor, ahead = sf_clock_now_ms() + 1500;
    record_floor("/t-floor-wait", ahead);
    test_options(&o, "/t-floor-wait", 5);
    o.max_clock_backward_wait_ms = 5000;
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_msg(sf_registry_claim(r, &id, &floor, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(floor, ahead);
    ck_assert(sf_clock_now_ms() > ahead);
    sf_registry_close(r);
}
END_TEST

START_TEST(restart_safety_refuses_far_recorded_timestamp)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    record_floor("/t-floor-refuse", sf_clock_now_ms() + 60000);
    test_options(&o, "/t-floor-refuse", 5);
    o.max_clock_backward_wait_ms = 1000;
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_int_eq(sf_registry_claim(r, &id, &floor, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "max_clock_backward_wait_ms"), "message: %s", err);
    /* It did not keep the id it cannot use. */
    zhandle_t *zh = raw_client();
    char data[64];
    ck_assert_int_eq(raw_get(zh, "/t-floor-refuse/5", data, sizeof data, NULL), ZNONODE);
    zookeeper_close(zh);
    sf_registry_close(r);
}
END_TEST

START_TEST(auth_protects_nodes)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    test_options(&o, "/t-auth", 9);
    o.auth = "snow:flake";
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_msg(sf_registry_claim(r, &id, &floor, err, sizeof err) == 0, "%s", err);
    zhandle_t *zh = raw_client();
    char data[64];
    ck_assert_int_eq(raw_get(zh, "/t-auth/9", data, sizeof data, NULL), ZOK); /* readable */
    ck_assert_int_eq(zoo_delete(zh, "/t-auth/9", -1), ZNOAUTH);
    ck_assert_int_eq(zoo_create(zh, "/t-auth/10", "x", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
                     ZNOAUTH);
    zookeeper_close(zh);
    sf_registry_close(r);
}
END_TEST

typedef struct state_log {
    pthread_mutex_t mu;
    int serving_reports, fenced_reports;
    bool serving;
} state_log;

/* Records what the registry reports, as the daemon's gate would. */
static void on_state(void *ctx, bool serving, int64_t worker_id, int64_t floor_ms,
                     int64_t valid_until_boot_ms, const char *reason)
{
    (void)valid_until_boot_ms;
    (void)worker_id;
    (void)floor_ms;
    (void)reason;
    state_log *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->serving = serving;
    if (serving)
        s->serving_reports++;
    else
        s->fenced_reports++;
    pthread_mutex_unlock(&s->mu);
}

/* Waits up to ms for the log to reach the given serving state. */
static bool wait_serving(state_log *s, bool want, int ms)
{
    for (int i = 0; i < ms / 50; i++) {
        pthread_mutex_lock(&s->mu);
        bool now = s->serving;
        pthread_mutex_unlock(&s->mu);
        if (now == want)
            return true;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return false;
}

/* Monotonic ms, the lease's clock. */
static int64_t test_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct lease_log {
    pthread_mutex_t mu;
    int renewals;
    int64_t until;          /* the last lease reported */
    int64_t reported_at;    /* when it was reported */
    int64_t longest;        /* the longest until - reported_at seen */
    int renewals_at_serving; /* renewals before the first serving report */
    bool serving;
} lease_log;

/* Records each lease the registry reports, as the daemon's handler would. */
static void on_lease(void *ctx, int64_t valid_until_mono_ms)
{
    lease_log *l = ctx;
    int64_t now = test_mono_ms();
    pthread_mutex_lock(&l->mu);
    l->renewals++;
    l->until = valid_until_mono_ms;
    l->reported_at = now;
    if (valid_until_mono_ms - now > l->longest)
        l->longest = valid_until_mono_ms - now;
    pthread_mutex_unlock(&l->mu);
}

/* Notes how many leases came before the gate would open. */
static void on_state_lease(void *ctx, bool serving, int64_t worker_id, int64_t floor_ms,
                           int64_t valid_until_boot_ms, const char *reason)
{
    (void)valid_until_boot_ms;
    (void)worker_id;
    (void)floor_ms;
    (void)reason;
    lease_log *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (serving && !l->serving && l->renewals_at_serving < 0)
        l->renewals_at_serving = l->renewals;
    l->serving = serving;
    pthread_mutex_unlock(&l->mu);
}

/* Reads one lease_log field under its lock. */
static lease_log lease_snapshot(lease_log *l)
{
    pthread_mutex_lock(&l->mu);
    lease_log copy = *l;
    pthread_mutex_unlock(&l->mu);
    return copy;
}

START_TEST(lease_renewed_while_serving)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    lease_log log = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, -1, false};
    test_options(&o, "/t-lease", 6);
    o.on_state = on_state_lease;
    o.state_ctx = &log;
    o.on_lease = on_lease;
    o.lease_ctx = &log;
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    int64_t length = sf_registry_session_timeout_ms(r) * 2 / 3;
    int64_t period = sf_registry_session_timeout_ms(r) / 6;
    ck_assert_msg(sf_registry_claim(r, &id, &floor, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(lease_snapshot(&log).renewals, 0);
    ck_assert_int_eq(sf_registry_watch(r, err, sizeof err), 0);
    lease_log at_start = lease_snapshot(&log);
    ck_assert(at_start.serving);
    ck_assert_msg(at_start.renewals_at_serving >= 1, "serving began before any lease");
    ck_assert_int_gt(at_start.until, test_mono_ms());
    /* Renewals every period: three of them take 1 s; a loaded ZooKeeper may be slower. */
    lease_log later = at_start;
    for (int i = 0; i < 50 && later.renewals - at_start.renewals < 3; i++) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        later = lease_snapshot(&log);
    }
    ck_assert_msg(later.renewals - at_start.renewals >= 3,
                  "%d renewals in 5 s, period %" PRId64 " ms",
                  later.renewals - at_start.renewals, period);
    ck_assert_int_gt(later.until, at_start.until);
    ck_assert_int_gt(later.until, test_mono_ms());
    ck_assert_msg(later.longest <= length && later.longest > length / 2,
                  "a lease of %" PRId64 " ms, expected %" PRId64 " (2/3 of the session)",
                  later.longest, length);
    sf_registry_close(r);
}
END_TEST

START_TEST(fencing_stops_and_resumes)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    state_log log = {PTHREAD_MUTEX_INITIALIZER, 0, 0, false};
    lease_log lease = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, -1, false};
    test_options(&o, "/t-fence", 4);
    o.session_timeout_ms = 1200;
    o.on_state = on_state;
    o.state_ctx = &log;
    o.on_lease = on_lease;
    o.lease_ctx = &lease;
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_msg(sf_registry_claim(r, &id, &floor, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(sf_registry_watch(r, err, sizeof err), 0);
    ck_assert(wait_serving(&log, true, 1000));
    ck_assert_int_eq(sf_test_zk_stop(&zk), 0);
    int64_t stopped_at = test_mono_ms();
    ck_assert_msg(wait_serving(&log, false, 3000), "still serving without ZooKeeper");
    /* A failed round trip renews nothing: the last lease predates the stop. */
    int64_t last_until = lease_snapshot(&lease).until;
    ck_assert_int_gt(last_until, 0);
    ck_assert_int_le(last_until, stopped_at + sf_registry_session_timeout_ms(r) * 2 / 3);
    ck_assert_int_eq(sf_registry_worker_id(r), -1);
    nanosleep(&(struct timespec){2, 0}, NULL); /* longer than the session timeout */
    ck_assert_int_eq(lease_snapshot(&lease).until, last_until);
    ck_assert_int_eq(sf_test_zk_restart(&zk), 0);
    ck_assert_msg(wait_serving(&log, true, 15000), "did not serve again after ZooKeeper came back");
    ck_assert_int_gt(lease_snapshot(&lease).until, test_mono_ms());
    ck_assert_int_eq(sf_registry_worker_id(r), 4);
    ck_assert_int_eq(log.fenced_reports, 1);
    ck_assert_int_eq(log.serving_reports, 2);
    sf_registry_close(r);
}
END_TEST

START_TEST(no_server_is_a_clear_error)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    test_options(&o, "/t-none", 1);
    o.hosts = "127.0.0.1:1";
    o.session_timeout_ms = 1000;
    ck_assert_ptr_null(sf_registry_new(&o, err, sizeof err));
    ck_assert_msg(strstr(err, "127.0.0.1:1") && strstr(err, "zookeeper.hosts"), "%s", err);
}
END_TEST

/* Builds the suite; fencing last, as it stops and restarts the shared server. */
static Suite *registry_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("zookeeper");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, static_claim_creates_ephemeral_node);
    tcase_add_test(tc, static_conflict_names_holder);
    tcase_add_test(tc, auto_ids_are_distinct_then_exhausted);
    tcase_add_test(tc, restart_safety_waits_for_recorded_timestamp);
    tcase_add_test(tc, restart_safety_refuses_far_recorded_timestamp);
    tcase_add_test(tc, auth_protects_nodes);
    tcase_add_test(tc, no_server_is_a_clear_error);
    tcase_add_test(tc, lease_renewed_while_serving);
    tcase_add_test(tc, fencing_stops_and_resumes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (sf_test_zk_start(&zk) != 0)
        return 1;
    zoo_set_debug_level(0); /* the client logs every refused reconnect */
    SRunner *sr = srunner_create(registry_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    sf_test_zk_destroy(&zk);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
