/* check_embedded.c -- libsnowflake-zk through its public header only, against a real ZooKeeper
 * server: options refused by name, a start that serves and a stop that releases, ZooKeeper
 * unreachable at start (tried again until it answers or the start's time is up), every slot
 * taken, another datacenter's embedded holder, a start stopped midway, an application that
 * keeps calling while fenced, a process frozen past its session timeout (a child of the
 * test's: not under AddressSanitizer, as check_fork), and the handle's threads blocking the
 * signals sent to the process. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME, prctl */
#include <check.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <snowflake_zk.h>

#include "registry_harness.h"

static sf_test_zk zk;

/* Options for one test on its own path, short session, quick retries. */
static void test_options(sfz_options *o, const char *hosts, const char *path)
{
    sfz_options_init(o);
    o->zookeeper = hosts;
    o->worker_id_path = path;
    o->session_timeout_ms = 2000;
    o->start_retry_wait_ms = 100;
    o->claim_retries = 0;
}

static int64_t worker_of(int64_t id)
{
    return (id >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID;
}

static int64_t timestamp_of(int64_t id)
{
    return (id >> SF_TIMESTAMP_SHIFT) + SF_TWITTER_EPOCH_MS;
}

/* The session of a handle a test needs serving from start to end, fenced on purpose by
 * nothing: on a busy machine a renewal a second late fences a handle with a 2 s session for
 * a moment, and a call right after the start is then refused although nothing is wrong. */
#define STEADY_SESSION_MS 10000

/* sfz_next_id, asked again while refused as fenced, up to SF_TEST_PATIENCE_MS: for a handle
 * with a short session, which a busy machine may fence for a moment after its start. */
static int next_id_within_patience(sfz *h, int64_t *id, sfz_error *err)
{
    int rc = sfz_next_id(h, id, err);
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;
         rc == SFZ_ERR_FENCED && sf_test_boot_ms() < end; rc = sfz_next_id(h, id, err))
        sf_test_sleep_ms(20);
    return rc;
}

/* Waits up to SF_TEST_PATIENCE_MS for n more renewals confirmed than now: a busy machine
 * may confirm none for seconds. Returns how many came. */
static uint64_t renewals_confirmed(sfz *h, uint64_t n)
{
    sfz_renewals before, now;
    sfz_get_renewals(h, &before);
    now = before;
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;
         now.confirmed < before.confirmed + n && sf_test_boot_ms() < end; sf_test_sleep_ms(20))
        sfz_get_renewals(h, &now);
    return now.confirmed - before.confirmed;
}

/* Every bad option is refused before connecting, naming the option and what is allowed. */
START_TEST(bad_options_name_the_option_and_range)
{
    static const struct {
        const char *field;
        const char *needle;
    } cases[] = {
        {"zookeeper", "zookeeper is empty"},
        {"zookeeper nohost", "zookeeper entry 'nohost' has no port: write host:port"},
        {"worker_id", "worker_id 32 is outside 0..31"},
        {"datacenter_id", "datacenter_id 32 is outside 0..31"},
        {"session_timeout_ms", "session_timeout_ms = 999 is outside 1000..600000"},
        {"start_timeout_ms", "start_timeout_ms = 86400001 is outside 0..86400000"},
        {"on_fork", "on_fork = 2 is outside 0..1"},
        {"holder", "is neither \"embedded ...\" nor the host:port"},
        {"worker_id_path", "worker_id_path 'relative' is not a valid ZooKeeper path"},
        {"epoch_ms", "epoch_ms 4102444800001 is outside 0..4102444800000"},
        {"future epoch_ms", "is in the future"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sfz_options o;
        sfz_error err;
        sfz *h = NULL;
        test_options(&o, zk.hosts, "/e-bad");
        const char *f = cases[i].field;
        if (strcmp(f, "zookeeper") == 0)
            o.zookeeper = "";
        else if (strcmp(f, "zookeeper nohost") == 0)
            o.zookeeper = "nohost";
        else if (strcmp(f, "worker_id") == 0)
            o.worker_id = 32;
        else if (strcmp(f, "datacenter_id") == 0)
            o.datacenter_id = 32;
        else if (strcmp(f, "session_timeout_ms") == 0)
            o.session_timeout_ms = 999;
        else if (strcmp(f, "start_timeout_ms") == 0)
            o.start_timeout_ms = 86400001;
        else if (strcmp(f, "on_fork") == 0)
            o.on_fork = 2;
        else if (strcmp(f, "holder") == 0)
            o.holder = "10.0.0.1";
        else if (strcmp(f, "worker_id_path") == 0)
            o.worker_id_path = "relative";
        else if (strcmp(f, "epoch_ms") == 0)
            o.epoch_ms = SF_MAX_EPOCH_MS + 1;
        else
            o.epoch_ms = sf_clock_now_ms() + 60000;
        int rc = sfz_start(&o, &h, &err);
        sfz_stop(h); /* NULL unless the start wrongly succeeded */
        ck_assert_msg(rc == SFZ_ERR_ARG && h == NULL, "%s: rc %d", f, rc);
        ck_assert_msg(strstr(err.message, cases[i].needle) != NULL, "%s: \"%s\" does not say \"%s\"",
                      f, err.message, cases[i].needle);
    }
}
END_TEST

/* A start claims the lowest free id and serves ids of it; the node says who holds it; the
 * descriptor turns readable on the transition; a stop deletes the node at once and leaves
 * the exact last timestamp for the next holder. */
START_TEST(start_serves_and_stop_releases)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, zk.hosts, "/e-start");
    o.session_timeout_ms = STEADY_SESSION_MS; /* no transition but the start's */
    o.datacenter_id = 7;
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    struct pollfd pfd = {sfz_state_fd(h), POLLIN, 0};
    ck_assert_int_eq(poll(&pfd, 1, SF_TEST_PATIENCE_MS), 1);
    sfz_state st;
    sfz_read_state_fd(h);
    sfz_get_state(h, &st);
    ck_assert_msg(st.serving && st.worker_id == 0 && st.datacenter_id == 7, "serving %d as %"
                  PRId64 " in %" PRId64 ": %s", st.serving, st.worker_id, st.datacenter_id,
                  st.reason);
    ck_assert_int_eq(poll(&pfd, 1, 0), 0);
    int64_t ids[1000], one;
    ck_assert_msg(sfz_next_ids(h, ids, 1000, &err) == SFZ_OK, "%s", err.message);
    for (int i = 1; i < 1000; i++)
        ck_assert(ids[i] > ids[i - 1]);
    ck_assert_msg(sfz_next_id(h, &one, &err) == SFZ_OK, "%s", err.message);
    ck_assert(one > ids[999]);
    ck_assert_int_eq(worker_of(one), 0);
    ck_assert_int_eq((one >> SF_DATACENTER_ID_SHIFT) & SF_MAX_DATACENTER_ID, 7);
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    char data[256];
    ck_assert_int_eq(sf_test_zk_get(zh, "/e-start/0", data, sizeof data, NULL), ZOK);
    char want[64];
    snprintf(want, sizeof want, "embedded pid=%ld host=", (long)getpid());
    ck_assert_msg(strncmp(data, want, strlen(want)) == 0 && strstr(data, " datacenter=7"),
                  "node data \"%s\"", data);
    ck_assert_int_eq(sfz_next_ids(h, ids, 0, &err), SFZ_ERR_ARG);
    int64_t *many = malloc((SFZ_MAX_IDS + 1) * sizeof *many);
    ck_assert(many != NULL);
    ck_assert_int_eq(sfz_next_ids(h, many, SFZ_MAX_IDS + 1, &err), SFZ_ERR_ARG);
    free(many);
    ck_assert_msg(strstr(err.message, "1..1000000 ids") != NULL, "%s", err.message);
    sfz_stop(h);
    ck_assert_int_eq(sf_test_zk_get(zh, "/e-start/0", data, sizeof data, NULL), ZNONODE);
    ck_assert_int_eq(sf_test_zk_get(zh, "/e-start-state/0", data, sizeof data, NULL), ZOK);
    char released[64];
    snprintf(released, sizeof released, "released %" PRId64, timestamp_of(one));
    ck_assert_msg(strcmp(data, released) == 0, "state \"%s\", last id at %" PRId64, data,
                  timestamp_of(one));
    zookeeper_close(zh);
}
END_TEST

/* Every integer option at its maximum (but startup_sleep_ms, which would only make the test
 * wait ten minutes, and max_peer_skew_ms, refused without query_peer) starts and serves: the session timeout asked for is above what the
 * server grants, and the lease follows what it grants. */
START_TEST(options_at_their_maxima_serve)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    int64_t id;
    test_options(&o, zk.hosts, "/e-max");
#define SET_MAX(field, lo, hi, dflt) o.field = (hi);
    SFZ_INT_OPTIONS(SET_MAX)
#undef SET_MAX
    /* The live clock check asks the peers through query_peer, which this program lacks. */
    ck_assert_int_eq(sfz_options_check(&o, &err), SFZ_ERR_ARG);
    ck_assert_msg(strstr(err.message, "max_peer_skew_ms 600000 needs query_peer") != NULL, "%s",
                  err.message);
    o.max_peer_skew_ms = 0;
    o.startup_sleep_ms = 0;
    o.worker_id = SF_MAX_WORKER_ID;
    o.datacenter_id = SF_MAX_DATACENTER_ID;
    o.max_clock_backward_wait_ms = 60000;
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    ck_assert_msg(sfz_next_id(h, &id, &err) == SFZ_OK, "%s", err.message);
    ck_assert_int_eq((id >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID, SF_MAX_WORKER_ID);
    ck_assert_int_eq((id >> SF_DATACENTER_ID_SHIFT) & SF_MAX_DATACENTER_ID, SF_MAX_DATACENTER_ID);
    ck_assert_int_eq(sfz_worker_id(h), SF_MAX_WORKER_ID);
    ck_assert_int_eq(sfz_datacenter_id(h), SF_MAX_DATACENTER_ID);
    sfz_stop(h);
}
END_TEST

/* No server answers: the start tries again until start_timeout_ms is up (a try waits 5 s
 * for the session), then fails saying how often it tried. */
START_TEST(unreachable_zookeeper_fails_after_retries)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", sf_test_zk_free_port());
    test_options(&o, hosts, "/e-unreachable");
    o.session_timeout_ms = 1000;
    o.start_timeout_ms = 6000;
    int64_t t0 = sf_test_boot_ms();
    int rc = sfz_start(&o, &h, &err);
    int64_t took = sf_test_boot_ms() - t0;
    ck_assert_msg(rc == SFZ_ERR_UNREACHABLE && h == NULL, "rc %d: %s", rc, err.message);
    ck_assert_msg(strstr(err.message, "tried 2 times in") != NULL && strstr(err.message, hosts) &&
                  strstr(err.message, "start_timeout_ms = 6000"), "%s", err.message);
    ck_assert_msg(took >= 2 * 5000, "gave up after %" PRId64 " ms: two tries of 5 s each", took);
}
END_TEST

/* Fills path with 32 embedded holders of datacenter dc (ephemeral, of zh's session). */
static void fill_slots(zhandle_t *zh, const char *path, int dc, int count)
{
    ck_assert_int_eq(zoo_create(zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
    for (int i = 0; i < count; i++) {
        char node[128], data[128];
        snprintf(node, sizeof node, "%s/%d", path, i);
        snprintf(data, sizeof data, "embedded pid=%d host=elsewhere datacenter=%d", 1000 + i, dc);
        ck_assert_int_eq(zoo_create(zh, node, data, (int)strlen(data), &ZOO_OPEN_ACL_UNSAFE,
                                    ZOO_EPHEMERAL, NULL, 0), ZOK);
    }
}

/* All 32 ids taken: once start_timeout_ms is up, the start fails naming the holders,
 * rather than waiting for good. */
START_TEST(all_slots_taken_fails)
{
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    fill_slots(zh, "/e-full", 0, SF_MAX_WORKER_ID + 1);
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, zk.hosts, "/e-full");
    o.start_timeout_ms = 1; /* one try */
    int rc = sfz_start(&o, &h, &err);
    zookeeper_close(zh);
    ck_assert_msg(rc == SFZ_ERR_CLAIM && h == NULL, "rc %d: %s", rc, err.message);
    ck_assert_msg(strstr(err.message, "all 32 worker ids under /e-full are taken") != NULL, "%s",
                  err.message);
}
END_TEST

/* One start of a handle on a thread of its own: sfz_start with o, or sfz_run of h. */
typedef struct start_job {
    sfz_options o;
    sfz *h;
    sfz_error err;
    int rc;
} start_job;

static void *start_thread(void *arg)
{
    start_job *j = arg;
    j->rc = sfz_start(&j->o, &j->h, &j->err);
    return NULL;
}

static void *run_thread(void *arg)
{
    start_job *j = arg;
    j->rc = sfz_run(j->h, &j->err);
    return NULL;
}

/* Every id taken at the start: the start tries again (the health says how often, and when
 * next) until one comes free, then claims it and serves. */
START_TEST(start_waits_for_a_freed_id)
{
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    fill_slots(zh, "/e-wait", 0, SF_MAX_WORKER_ID + 1);
    sf_test_message_log msgs = {PTHREAD_MUTEX_INITIALIZER, "trying again in", 0};
    start_job job = {0};
    test_options(&job.o, zk.hosts, "/e-wait");
    job.o.session_timeout_ms = STEADY_SESSION_MS;
    job.o.start_timeout_ms = SF_TEST_PATIENCE_MS;
    job.o.log = sf_test_count_messages;
    job.o.log_ctx = &msgs;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, start_thread, &job), 0);
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;; sf_test_sleep_ms(20)) {
        pthread_mutex_lock(&msgs.mu);
        int retried = msgs.matching;
        pthread_mutex_unlock(&msgs.mu);
        if (retried >= 2)
            break;
        ck_assert_msg(sf_test_boot_ms() < end, "the start did not try again");
    }
    ck_assert_int_eq(zoo_delete(zh, "/e-wait/7", -1), ZOK);
    pthread_join(t, NULL);
    zookeeper_close(zh);
    ck_assert_msg(job.rc == SFZ_OK, "rc %d: %s", job.rc, job.err.message);
    ck_assert_int_eq(sfz_worker_id(job.h), 7);
    sfz_health health;
    sfz_get_health(job.h, &health);
    ck_assert_msg(health.start_tries == 0 && health.next_try_ms == 0, "a started handle's "
                  "health still counts tries: %d, next at %" PRId64, health.start_tries,
                  health.next_try_ms);
    sfz_stop(job.h);
}
END_TEST

/* While a start waits between tries, its health counts them and says when the next comes;
 * a start whose every try fails on ZooKeeper's absence comes up as soon as ZooKeeper does,
 * not at the next backoff. */
START_TEST(start_comes_up_with_zookeeper)
{
    sf_test_zk late = {0};
    ck_assert_int_eq(sf_test_zk_start(&late), 0);
    ck_assert_int_eq(sf_test_zk_stop(&late), 0); /* its port is kept for the restart */
    sfz_options o;
    test_options(&o, late.hosts, "/e-late");
    o.session_timeout_ms = STEADY_SESSION_MS;
    o.start_timeout_ms = 0;
    o.start_retry_wait_ms = 60000; /* a backoff far longer than the test waits */
    start_job job = {0};
    ck_assert_msg(sfz_prepare(&o, &job.h, &job.err) == SFZ_OK, "%s", job.err.message);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, run_thread, &job), 0);
    sfz_health health = {0};
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;; sf_test_sleep_ms(50)) {
        sfz_get_health(job.h, &health);
        if (health.start_tries >= 1 && health.next_try_ms > 0)
            break;
        ck_assert_msg(sf_test_boot_ms() < end, "no wait between tries seen (tries %d)",
                      health.start_tries);
    }
    ck_assert_int_eq(health.reason, SFZ_REASON_STARTING);
    ck_assert_msg(health.next_try_ms > sf_clock_now_ms() + 20000, "the next try at %" PRId64
                  ", now %" PRId64 ": not the long backoff", health.next_try_ms,
                  sf_clock_now_ms());
    sfz_state st;
    sfz_get_state(job.h, &st);
    ck_assert_msg(strstr(st.reason, "starting: ") == st.reason &&
                  strstr(st.reason, "try 1 failed, trying again in") != NULL, "%s", st.reason);
    ck_assert_int_eq(sf_test_zk_restart(&late), 0);
    int64_t up = sf_test_boot_ms();
    pthread_join(t, NULL);
    int64_t took = sf_test_boot_ms() - up;
    ck_assert_msg(job.rc == SFZ_OK, "rc %d: %s", job.rc, job.err.message);
    ck_assert_msg(took < 30000, "served %" PRId64 " ms after ZooKeeper came up: it waited out "
                  "the backoff", took);
    sfz_stop(job.h);
    sf_test_zk_destroy(&late);
}
END_TEST

/* Every id taken by holders whose names fill more than a message holds: the message names
 * how many hold them and as many whole holders as fit, then how many more there are, never
 * a holder cut in the middle. */
START_TEST(all_taken_message_names_the_rest)
{
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    ck_assert_int_eq(zoo_create(zh, "/e-long", "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
    for (int i = 0; i <= SF_MAX_WORKER_ID; i++) {
        char node[64], data[128];
        snprintf(node, sizeof node, "/e-long/%d", i);
        snprintf(data, sizeof data, "embedded pid=%d host=a-rather-long-host-name-%02d.example."
                 "org datacenter=0", 10000 + i, i);
        ck_assert_int_eq(zoo_create(zh, node, data, (int)strlen(data), &ZOO_OPEN_ACL_UNSAFE,
                                    ZOO_EPHEMERAL, NULL, 0), ZOK);
    }
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, zk.hosts, "/e-long");
    o.start_timeout_ms = 1; /* one try */
    int rc = sfz_start(&o, &h, &err);
    zookeeper_close(zh);
    ck_assert_msg(rc == SFZ_ERR_CLAIM && h == NULL, "rc %d: %s", rc, err.message);
    const char *more = strstr(err.message, ", and ");
    ck_assert_msg(more != NULL && strstr(more, " more") != NULL, "the message names no rest: "
                  "\"%s\"", err.message);
    ck_assert_msg(strstr(err.message, "32 holders") != NULL, "no count: \"%s\"", err.message);
    /* Whole entries: the last one named ends with its datacenter, right before ", and N". */
    ck_assert_msg(more - err.message > 12 && strncmp(more - 12, "datacenter=0", 12) == 0,
                  "the last holder named is cut: \"%s\"", err.message);
    int named = 0, rest = -1;
    for (const char *p = err.message; (p = strstr(p, "embedded pid=")) != NULL; p++)
        named++;
    ck_assert_int_eq(sscanf(more, ", and %d more", &rest), 1);
    ck_assert_msg(named + rest == SF_MAX_WORKER_ID + 1, "%d named + %d more: \"%s\"", named, rest,
                  err.message);
}
END_TEST

/* A proxy in front of the test's ZooKeeper, and options that reach it through the proxy
 * (hosts holds its address), with a session of 6 s. */
static sf_test_proxy *proxied_options(sfz_options *o, char *hosts, size_t hostslen,
                                      const char *path)
{
    sf_test_proxy *px = sf_test_proxy_start(atoi(strchr(zk.hosts, ':') + 1));
    ck_assert_ptr_nonnull(px);
    snprintf(hosts, hostslen, "127.0.0.1:%d", sf_test_proxy_port(px));
    test_options(o, hosts, path);
    o->session_timeout_ms = 6000;
    return px;
}

/* ZooKeeper stops answering for 6 s right after the session came up, the claim's first
 * request held (the connection times out meanwhile): a start with retries left rides it out
 * as it rides out ZooKeeper being down, and does not report the worker ids as taken. */
START_TEST(claim_outlives_a_stalled_zookeeper)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    char hosts[64];
    sf_test_proxy *px = proxied_options(&o, hosts, sizeof hosts, "/e-stall");
    sf_test_proxy_hold_after_first(px, 6000);
    int rc = sfz_start(&o, &h, &err);
    int accepted = sf_test_proxy_accepted(px);
    sfz_stop(h);
    sf_test_proxy_stop(px);
    ck_assert_msg(rc == SFZ_OK, "the start failed (rc %d) on a stall of 6 s with 20 retries "
                  "left: %s", rc, err.message);
    ck_assert_msg(accepted >= 2, "the stall did not cost the connection (%d accepted): the "
                  "test proves nothing", accepted);
}
END_TEST

/* The claim's create reaches ZooKeeper but its answer is lost, and the read that would tell
 * whether it was applied times out too: the node is ours (our session's) all the same. The
 * start, trying again on the same session, takes that node as its own rather than claiming a
 * second id beside it (one process, two worker ids: the peers would see one as stale). */
START_TEST(lost_create_answer_leaves_one_node)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    char hosts[64];
    sf_test_proxy *px = proxied_options(&o, hosts, sizeof hosts, "/e-orphan");
    sf_test_proxy_cut_after(px, "/e-orphan/", 6000); /* the worker node's create */
    int rc = sfz_start(&o, &h, &err);
    int accepted = sf_test_proxy_accepted(px);
    int64_t held = rc == SFZ_OK ? sfz_worker_id(h) : -1;
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    struct String_vector kids = {0, NULL};
    int lrc = zoo_get_children(zh, "/e-orphan", 0, &kids);
    char names[256] = "";
    for (int i = 0; lrc == ZOK && i < kids.count; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), " %s", kids.data[i]);
    int nodes = lrc == ZOK ? kids.count : -1;
    deallocate_String_vector(&kids);
    zookeeper_close(zh);
    sfz_stop(h);
    sf_test_proxy_stop(px);
    ck_assert_msg(rc == SFZ_OK, "the start failed (rc %d) after a lost answer with 20 retries "
                  "left: %s", rc, err.message);
    ck_assert_msg(accepted >= 3, "the create's answer was not lost (%d connections): the test "
                  "proves nothing", accepted);
    ck_assert_msg(nodes == 1, "one holder has %d worker nodes under /e-orphan:%s (holds %" PRId64
                  ")", nodes, names, held);
}
END_TEST

/* An embedded holder of another datacenter under the same path: the datacenter rule holds
 * without querying it. */
START_TEST(other_datacenter_holder_is_refused)
{
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    fill_slots(zh, "/e-dc", 3, 1);
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, zk.hosts, "/e-dc");
    o.datacenter_id = 4;
    int rc = sfz_start(&o, &h, &err);
    zookeeper_close(zh);
    ck_assert_msg(rc == SFZ_ERR_CLAIM, "rc %d: %s", rc, err.message);
    ck_assert_msg(strstr(err.message, "datacenter id insanity") != NULL &&
                  strstr(err.message, "datacenter id 3, ours is 4") != NULL, "%s", err.message);
}
END_TEST

/* datacenter_id -1: the lowest free (datacenter, worker) pair over datacenter_paths, tried
 * in datacenter order; with every pair taken, a clear error. */
START_TEST(automatic_datacenter_takes_the_lowest_free_pair)
{
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    fill_slots(zh, "/e-adc0", 0, SF_MAX_WORKER_ID + 1);
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, zk.hosts, "/unused");
    o.session_timeout_ms = STEADY_SESSION_MS;
    o.datacenter_id = -1;
    o.datacenter_paths = "5=/e-adc5,0=/e-adc0";
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    sfz_state st;
    sfz_get_state(h, &st);
    ck_assert_msg(st.datacenter_id == 5 && st.worker_id == 0, "(%" PRId64 ", %" PRId64 ")",
                  st.datacenter_id, st.worker_id);
    int64_t id;
    ck_assert_msg(sfz_next_id(h, &id, &err) == SFZ_OK, "%s", err.message);
    ck_assert_int_eq((id >> SF_DATACENTER_ID_SHIFT) & SF_MAX_DATACENTER_ID, 5);
    char data[256];
    ck_assert_int_eq(sf_test_zk_get(zh, "/e-adc5/0", data, sizeof data, NULL), ZOK);
    ck_assert_msg(strstr(data, " datacenter=5") != NULL, "node data \"%s\"", data);
    fill_slots(zh, "/e-adc7", 7, SF_MAX_WORKER_ID + 1);
    sfz *full = NULL;
    o.datacenter_paths = "0=/e-adc0,7=/e-adc7";
    o.start_timeout_ms = 1; /* one try */
    int rc = sfz_start(&o, &full, &err);
    ck_assert_msg(rc == SFZ_ERR_CLAIM && full == NULL, "rc %d: %s", rc, err.message);
    ck_assert_msg(strstr(err.message, "each of the 2 datacenters in datacenter_paths are taken"),
                  "%s", err.message);
    sfz_stop(h);
    zookeeper_close(zh);
}
END_TEST

/* The automatic datacenter's options are refused by name. */
START_TEST(automatic_datacenter_options_are_checked)
{
    static const struct {
        int64_t worker_id;
        const char *paths;
        const char *needle;
    } cases[] = {
        {-1, NULL, "datacenter_paths is empty"},
        {3, "0=/a", "an automatic datacenter takes an automatic worker id"},
        {-1, "0=/a,0=/b", "a datacenter named twice"},
        {-1, "32=/a", "not a number in 0..31"},
        {-1, "0=/a,1=/a", "each datacenter needs its own path"},
        {-1, "0=relative", "not absolute"},
        {-1, "/a", "no '='"},
        /* Another entry's own nodes: its lock path, its state path, a node under it. */
        {-1, "0=/x,1=/x-locks", "'0=/x' and '1=/x-locks' meet: /x-locks and /x-locks are the same node"},
        {-1, "0=/y,1=/y-state", "'0=/y' and '1=/y-state' meet"},
        {-1, "0=/z,1=/z/sub", "'0=/z' and '1=/z/sub' meet: /z and /z/sub are one under the other"},
        {-1, "0=/w/sub,1=/w", "'0=/w/sub' and '1=/w' meet"},
        {-1, "0=/v-locks/a,1=/v", "'0=/v-locks/a' and '1=/v' meet"},
        /* Blanks and empty entries. */
        {-1, "0=/a, 1=/b", "entry ' 1=/b' is not D=/path"},
        {-1, "0=/a ,1=/b", "a blank in it"},
        {-1, "0 =/a", "a blank in it"},
        {-1, "0=/a,", "an empty entry (a comma too many)"},
        {-1, ",0=/a", "an empty entry"},
        {-1, "0=/a,,1=/b", "an empty entry"},
        {-1, "+0=/a", "not a number in 0..31"},
        {-1, "=/a", "not a number in 0..31"},
        {-1, "99999999999999999999=/a", "not a number in 0..31"},
        {-1, "-1=/a", "not a number in 0..31"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sfz_options o;
        sfz_error err;
        test_options(&o, zk.hosts, "/unused");
        o.datacenter_id = -1;
        o.worker_id = cases[i].worker_id;
        o.datacenter_paths = cases[i].paths;
        ck_assert_int_eq(sfz_options_check(&o, &err), SFZ_ERR_ARG);
        ck_assert_msg(strstr(err.message, cases[i].needle) != NULL, "\"%s\" does not say \"%s\"",
                      err.message, cases[i].needle);
    }
    sfz_options o;
    sfz_error err;
    test_options(&o, zk.hosts, "/unused");
    o.datacenter_paths = "0=/a";
    ck_assert_int_eq(sfz_options_check(&o, &err), SFZ_ERR_ARG);
    ck_assert_msg(strstr(err.message, "for datacenter_id -1 (automatic) only"), "%s", err.message);
}
END_TEST

/* A start waiting for an unreachable ZooKeeper is stopped from another thread at once:
 * its waits (for the session, between tries) are a minute each, so a cancel that waited
 * one out would take that long, far past the bound, while a loaded machine's slowness
 * stays far inside it. */
START_TEST(cancel_during_start)
{
    sfz_options o;
    char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", sf_test_zk_free_port());
    test_options(&o, hosts, "/e-cancel");
    o.start_timeout_ms = 0;
    o.session_timeout_ms = 60000;
    o.start_retry_wait_ms = 60000;
    start_job job = {0};
    ck_assert_msg(sfz_prepare(&o, &job.h, &job.err) == SFZ_OK, "%s", job.err.message);
    pthread_t t;
    pthread_create(&t, NULL, run_thread, &job);
    sf_test_sleep_ms(300);
    int64_t t0 = sf_test_boot_ms();
    sfz_cancel(job.h);
    pthread_join(t, NULL);
    int64_t took = sf_test_boot_ms() - t0;
    ck_assert_msg(job.rc == SFZ_ERR_STOPPED, "rc %d: %s", job.rc, job.err.message);
    ck_assert_msg(took < 15000, "stopped %" PRId64 " ms after the cancel, as if a wait of a "
                  "minute was not cut short", took);
    sfz_stop(job.h);
}
END_TEST

/* ZooKeeper goes away under a serving handle: calls keep failing with SFZ_ERR_FENCED, never
 * an id after the lease ran out; once ZooKeeper is back the handle serves again by itself,
 * with ids above every earlier one. */
START_TEST(keeps_refusing_while_fenced_then_serves_again)
{
    sf_test_zk own;
    ck_assert_int_eq(sf_test_zk_start(&own), 0);
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, own.hosts, "/e-fenced");
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    int64_t id = 0, last = 0;
    ck_assert_msg(next_id_within_patience(h, &last, &err) == SFZ_OK, "%s", err.message);
    /* Timed from when the server is surely gone: stopping it may take seconds on a busy
     * machine, and renewals it confirmed meanwhile count. */
    ck_assert_int_eq(sf_test_zk_stop(&own), 0);
    int64_t down_at = sf_test_boot_ms();
    int64_t last_ok_at = 0, fenced = 0;
    for (int64_t end = down_at + 4000; sf_test_boot_ms() < end; sf_test_sleep_ms(1)) {
        /* Timed before the call: the lease was checked after this, and a busy machine may
         * delay the test's thread between the call's return and any later reading. */
        int64_t asked_at = sf_test_boot_ms();
        int rc = sfz_next_id(h, &id, &err);
        if (rc == SFZ_OK) {
            ck_assert_msg(fenced == 0, "id handed out after %" PRId64 " refusals", fenced);
            ck_assert(id > last);
            last = id;
            last_ok_at = asked_at;
        } else {
            ck_assert_msg(rc == SFZ_ERR_FENCED, "rc %d: %s", rc, err.message);
            ck_assert_msg(err.message[0] != '\0', "a refusal without a reason");
            fenced++;
        }
    }
    ck_assert_msg(fenced > 0, "never fenced with ZooKeeper down for 4 s");
    ck_assert_msg(last_ok_at - down_at <= 2000 * 2 / 3, "an id asked %" PRId64 " ms after "
                  "ZooKeeper went down, past the longest lease (2T/3)", last_ok_at - down_at);
    sfz_state st;
    sfz_get_state(h, &st);
    ck_assert_msg(!st.serving && st.reason[0] != '\0', "state serving %d", st.serving);
    ck_assert_int_eq(sf_test_zk_restart(&own), 0);
    int rc = SFZ_ERR_FENCED;
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS; rc != SFZ_OK &&
         sf_test_boot_ms() < end; sf_test_sleep_ms(20))
        rc = sfz_next_id(h, &id, &err);
    ck_assert_msg(rc == SFZ_OK, "not serving long after ZooKeeper came back: %s", err.message);
    ck_assert(id > last);
    sfz_stop(h);
    sf_test_zk_destroy(&own);
}
END_TEST

/* The health figures say why in words a dashboard can group by: serving with a connected
 * session; ZooKeeper gone, "zookeeper_unreachable" (the words say so too, not a conflict)
 * since the moment serving stopped; back, serving again after one reconnect. */
START_TEST(health_names_zookeeper_unreachable)
{
    sf_test_zk own;
    ck_assert_int_eq(sf_test_zk_start(&own), 0);
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    sfz_health hh;
    test_options(&o, own.hosts, "/e-health");
    /* Serving and connected from the start until ZooKeeper stops: a short session may lose
     * its lease, or its connection, for a moment on a busy machine. */
    o.session_timeout_ms = STEADY_SESSION_MS;
    int64_t before = sf_clock_now_ms();
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    /* Seen serving at a clock reading later than the start's: a since_ms the stop did not
     * move is then earlier. The stop is then checked against that reading, not against
     * ZooKeeper's stop: a lease late for a moment on a busy machine may end serving just
     * before ZooKeeper stops, and it stays ended. */
    sf_test_sleep_ms(5);
    int64_t seen_serving = sf_clock_now_ms();
    sfz_get_health(h, &hh);
    ck_assert_str_eq(sfz_reason_name(hh.reason), "none");
    ck_assert_str_eq(sfz_session_name(hh.session), "connected");
    ck_assert_msg(hh.since_ms >= before && hh.since_ms <= sf_clock_now_ms(), "since %" PRId64,
                  hh.since_ms);
    ck_assert_int_eq(hh.reconnects, 0);
    ck_assert_int_eq(sf_test_zk_stop(&own), 0);
    for (int64_t end = sf_test_boot_ms() + 60000;
         hh.reason != SFZ_REASON_ZOOKEEPER_UNREACHABLE && sf_test_boot_ms() < end;
         sf_test_sleep_ms(20))
        sfz_get_health(h, &hh);
    ck_assert_msg(hh.reason == SFZ_REASON_ZOOKEEPER_UNREACHABLE, "reason %s",
                  sfz_reason_name(hh.reason));
    ck_assert_msg(hh.session == SFZ_SESSION_DISCONNECTED || hh.session == SFZ_SESSION_CONNECTING,
                  "session %s", sfz_session_name(hh.session));
    ck_assert_msg(hh.since_ms >= seen_serving, "not serving since %" PRId64 ", yet serving at %"
                  PRId64, hh.since_ms, seen_serving);
    sfz_state st;
    sfz_get_state(h, &st);
    ck_assert_msg(strstr(st.reason, "disconnected from ZooKeeper") != NULL, "reason: %s",
                  st.reason);
    ck_assert_int_eq(sf_test_zk_restart(&own), 0);
    for (int64_t end = sf_test_boot_ms() + 60000;
         hh.reason != SFZ_REASON_NONE && sf_test_boot_ms() < end; sf_test_sleep_ms(20))
        sfz_get_health(h, &hh);
    ck_assert_msg(hh.reason == SFZ_REASON_NONE, "reason %s", sfz_reason_name(hh.reason));
    ck_assert_str_eq(sfz_session_name(hh.session), "connected");
    ck_assert_msg(hh.reconnects + hh.sessions_expired >= 1, "no reconnect counted");
    sfz_shut(h, "draining");
    sfz_get_health(h, &hh);
    ck_assert_str_eq(sfz_reason_name(hh.reason), "stopping");
    ck_assert_str_eq(sfz_reason_name(SFZ_REASONS), "unknown");
    sfz_stop(h);
    sf_test_zk_destroy(&own);
}
END_TEST

/* A ZooKeeper server that stops answering (SIGSTOP: paused, or cut off) first costs the lease,
 * then the connection: the reason ends up naming ZooKeeper out of reach, not the lease alone,
 * which would point at a conflict. */
START_TEST(health_names_a_paused_zookeeper)
{
    sf_test_zk own;
    ck_assert_int_eq(sf_test_zk_start(&own), 0);
    char path[512];
    long pid = 0;
    snprintf(path, sizeof path, "%s/pid", own.dir);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL && fscanf(f, "%ld", &pid) == 1 && pid > 0, "no pid in %s", path);
    fclose(f);
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    sfz_health hh = {0};
    sfz_state st = {0};
    test_options(&o, own.hosts, "/e-paused");
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    ck_assert_int_eq(kill((pid_t)pid, SIGSTOP), 0);
    for (int64_t end = sf_test_boot_ms() + 45000; /* within the test's 60 s */ sf_test_boot_ms() < end; sf_test_sleep_ms(20)) {
        sfz_get_health(h, &hh);
        sfz_get_state(h, &st);
        if (hh.reason == SFZ_REASON_ZOOKEEPER_UNREACHABLE &&
            strstr(st.reason, "disconnected from ZooKeeper") != NULL)
            break;
    }
    kill((pid_t)pid, SIGCONT);
    ck_assert_msg(hh.reason == SFZ_REASON_ZOOKEEPER_UNREACHABLE, "reason %s",
                  sfz_reason_name(hh.reason));
    ck_assert_msg(strstr(st.reason, "disconnected from ZooKeeper") != NULL, "reason: %s",
                  st.reason);
    sfz_stop(h);
    sf_test_zk_destroy(&own);
}
END_TEST

/* sfz_shut refuses every id from then on, also after the lease was renewed since. */
START_TEST(shut_refuses_for_good)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    int64_t id;
    test_options(&o, zk.hosts, "/e-shut");
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    ck_assert_msg(next_id_within_patience(h, &id, &err) == SFZ_OK, "%s", err.message);
    sfz_shut(h, "draining for a stop");
    uint64_t renewed = renewals_confirmed(h, 4); /* counted rather than slept for */
    ck_assert_msg(renewed >= 4, "%" PRIu64 " renewals confirmed since sfz_shut", renewed);
    ck_assert_int_eq(sfz_next_id(h, &id, &err), SFZ_ERR_FENCED);
    ck_assert_str_eq(err.message, "draining for a stop");
    sfz_state st;
    sfz_get_state(h, &st);
    ck_assert(!st.serving);
    ck_assert_str_eq(st.reason, "draining for a stop");
    sfz_stop(h);
}
END_TEST

/* The refusal's reason and the state's after sfz_shut while the handle then loses
 * ZooKeeper (a fence of its own) and gets it back (a claim again): still the shut's, as the
 * header promises ("refuses every id from now on with reason"). */
static void assert_still_shut(sfz *h, const char *when)
{
    int64_t id;
    sfz_error err;
    sfz_state st;
    ck_assert_int_eq(sfz_next_id(h, &id, &err), SFZ_ERR_FENCED);
    ck_assert_msg(strcmp(err.message, "draining for a stop") == 0, "%s: refused with \"%s\"",
                  when, err.message);
    sfz_get_state(h, &st);
    ck_assert_msg(!st.serving && strcmp(st.reason, "draining for a stop") == 0,
                  "%s: state serving %d, reason \"%s\"", when, st.serving, st.reason);
}

START_TEST(shut_outlives_a_fence_and_a_new_claim)
{
    sf_test_proxy *px = sf_test_proxy_start(atoi(strchr(zk.hosts, ':') + 1));
    ck_assert_ptr_nonnull(px);
    char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", sf_test_proxy_port(px));
    /* Every fence logs "<state> -> fenced: <why>" once, whichever comes first without
     * ZooKeeper (the connection, the lease). */
    sf_test_message_log fenced = {PTHREAD_MUTEX_INITIALIZER, "-> fenced", 0};
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, hosts, "/e-shut-fence");
    o.log = sf_test_count_messages;
    o.log_ctx = &fenced;
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    sfz_shut(h, "draining for a stop");
    assert_still_shut(h, "shut");
    pthread_mutex_lock(&fenced.mu);
    int before_cut = fenced.matching, matching = before_cut;
    pthread_mutex_unlock(&fenced.mu);
    sf_test_proxy_set_mode(px, SF_PROXY_BLACKHOLE); /* until the handle fences */
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;
         matching == before_cut && sf_test_boot_ms() < end; sf_test_sleep_ms(50)) {
        pthread_mutex_lock(&fenced.mu);
        matching = fenced.matching;
        pthread_mutex_unlock(&fenced.mu);
    }
    ck_assert_msg(matching > before_cut, "the handle never fenced without ZooKeeper");
    assert_still_shut(h, "fenced");
    sf_test_proxy_set_mode(px, SF_PROXY_FORWARD); /* a session again, the id claimed again */
    ck_assert_msg(renewals_confirmed(h, 2) >= 2, "no renewal after ZooKeeper came back");
    assert_still_shut(h, "ZooKeeper back");
    sfz_stop(h);
    sf_test_proxy_stop(px);
}
END_TEST

/* During startup_sleep_ms the id is held (the state says which) but no id is handed out. */
START_TEST(startup_sleep_holds_without_serving)
{
    sfz_options o;
    test_options(&o, zk.hosts, "/e-sleep");
    o.startup_sleep_ms = 8000; /* long enough that a loaded machine still finds it asleep */
    /* A lease lost meanwhile would refuse with a reason other than startup_sleep_ms. */
    o.session_timeout_ms = STEADY_SESSION_MS;
    start_job job = {0};
    ck_assert_msg(sfz_prepare(&o, &job.h, &job.err) == SFZ_OK, "%s", job.err.message);
    pthread_t t;
    pthread_create(&t, NULL, run_thread, &job);
    sfz_state st = {0};
    int64_t id;
    sfz_error err;
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS; sf_test_boot_ms() < end;
         sf_test_sleep_ms(20)) {
        sfz_get_state(job.h, &st);
        if (st.worker_id >= 0)
            break;
    }
    ck_assert_msg(st.worker_id == 0 && !st.serving, "worker %" PRId64 ", serving %d",
                  st.worker_id, st.serving);
    ck_assert_int_eq(sfz_next_id(job.h, &id, &err), SFZ_ERR_FENCED);
    ck_assert_msg(strstr(err.message, "startup_sleep_ms") != NULL, "%s", err.message);
    pthread_join(t, NULL);
    ck_assert_msg(job.rc == SFZ_OK, "%s", job.err.message);
    ck_assert_msg(sfz_next_id(job.h, &id, &err) == SFZ_OK, "%s", err.message);
    sfz_stop(job.h);
}
END_TEST

/* A child that starts a handle, says "r" when serving, then answers every byte it reads with
 * the code of one sfz_next_id; stops the handle and exits 0 once its input closes. Dies with
 * the test. */
static pid_t frozen_child_start(const char *hosts, int *to_child, int *from_child)
{
    int down[2], up[2];
    ck_assert_int_eq(pipe(down), 0);
    ck_assert_int_eq(pipe(up), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(down[1]);
        close(up[0]);
        sfz_options o;
        sfz_error err;
        sfz *h;
        test_options(&o, hosts, "/e-frozen");
        if (sfz_start(&o, &h, &err) != SFZ_OK) {
            fprintf(stderr, "child: %s\n", err.message);
            _exit(1);
        }
        char c = 'r';
        if (write(up[1], &c, 1) != 1)
            _exit(1);
        while (read(down[0], &c, 1) == 1) {
            int64_t id;
            int rc = sfz_next_id(h, &id, &err);
            if (write(up[1], &rc, sizeof rc) != (ssize_t)sizeof rc)
                break;
        }
        sfz_stop(h); /* after the freeze: the session it stops may be long gone */
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    *to_child = down[1];
    *from_child = up[0];
    return pid;
}

/* Asks the child for one id; returns its code. */
static int child_next_id(int to, int from)
{
    char c = 'n';
    int rc = 1;
    ck_assert_int_eq(write(to, &c, 1), 1);
    ck_assert_int_eq(read(from, &rc, sizeof rc), (ssize_t)sizeof rc);
    return rc;
}

/* The whole process is frozen (SIGSTOP) past its session timeout: the first call after it
 * wakes is refused, before any thread of its own could notice the session is gone. */
START_TEST(frozen_past_the_session_refuses_on_waking)
{
    int to, from;
    pid_t pid = frozen_child_start(zk.hosts, &to, &from);
    char c = 0;
    ck_assert_int_eq(read(from, &c, 1), 1);
    ck_assert_int_eq(c, 'r');
    /* Asked again while refused: a busy machine may fence a 2 s session for a moment. */
    int rc = child_next_id(to, from);
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;
         rc == SFZ_ERR_FENCED && sf_test_boot_ms() < end; rc = child_next_id(to, from))
        sf_test_sleep_ms(20);
    ck_assert_int_eq(rc, SFZ_OK);
    kill(pid, SIGSTOP);
    sf_test_sleep_ms(2000 + 1500);
    /* The request waits in the pipe before the process wakes: on a busy machine, a request
     * sent after would leave its threads time to notice the lost session and claim again. */
    c = 'n';
    ck_assert_int_eq(write(to, &c, 1), 1);
    kill((pid_t)pid, SIGCONT);
    rc = 1;
    ck_assert_int_eq(read(from, &rc, sizeof rc), (ssize_t)sizeof rc);
    close(to);
    close(from);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(rc == SFZ_ERR_FENCED, "an id (rc %d) handed out right after a 3.5 s freeze "
                  "on a 2 s session", rc);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the frozen child's stop "
                  "ended with status %#x", status);
}
END_TEST

/* One holder of the fleet below: its handle, how its start ended, and what it logged while
 * starting: the sessions it opened and the tries it made again. */
typedef struct fleet_holder {
    sfz_options o;
    sfz *h;
    int rc;
    int started; /* set once sfz_start returned: later lines are not the start's */
    int sessions;
    int retries;
    int64_t took_ms;
    sfz_error err;
} fleet_holder;

/* Counts a start's sessions and retries. A session lost on a busy machine is replaced
 * (a retry, or once serving, a new session); a path full is passed over on the same one. */
static void fleet_log(void *ctx, const char *level, const char *message)
{
    fleet_holder *f = ctx;
    (void)level;
    if (__atomic_load_n(&f->started, __ATOMIC_ACQUIRE))
        return;
    if (strstr(message, "ZooKeeper session 0x") != NULL)
        __atomic_add_fetch(&f->sessions, 1, __ATOMIC_RELAXED);
    if (strstr(message, "trying again in") != NULL)
        __atomic_add_fetch(&f->retries, 1, __ATOMIC_RELAXED);
}

static void *fleet_start(void *arg)
{
    fleet_holder *f = arg;
    int64_t t0 = sf_test_boot_ms();
    f->rc = sfz_start(&f->o, &f->h, &f->err);
    f->took_ms = sf_test_boot_ms() - t0;
    __atomic_store_n(&f->started, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* 128 holders started at once over 4 datacenter paths of 32 ids: every (datacenter, worker)
 * pair taken, none twice, each holder serving ids of its own pair; each start on one
 * ZooKeeper session, whichever datacenter it ends in (a full one is passed over, not
 * reconnected for), but for one more per retry (a busy machine may let a session expire
 * while it starts); all serving within a generous bound. ZooKeeper takes every connection
 * from this one address (maxClientCnxns = 0: its default of 60 would refuse the 61st). */
START_TEST(fleet_of_128_claims_in_parallel)
{
    enum { N = 128, PATHS = 4 };
    sf_test_zk fz;
    ck_assert_int_eq(sf_test_zk_start(&fz), 0);
    ck_assert_int_eq(sf_test_zk_set_extra_cfg(&fz, "maxClientCnxns=0\n"), 0);
    ck_assert_int_eq(sf_test_zk_stop(&fz), 0);
    ck_assert_int_eq(sf_test_zk_restart(&fz), 0);
    static fleet_holder fleet[N];
    pthread_t t[N];
    const char *paths = "0=/f-dc0,1=/f-dc1,2=/f-dc2,3=/f-dc3";
    int64_t t0 = sf_test_boot_ms();
    for (int i = 0; i < N; i++) {
        fleet_holder *f = &fleet[i];
        memset(f, 0, sizeof *f);
        test_options(&f->o, fz.hosts, "/unused");
        f->o.session_timeout_ms = 10000;
        f->o.datacenter_id = -1;
        f->o.datacenter_paths = paths;
        f->o.log = fleet_log;
        f->o.log_ctx = f;
        ck_assert_int_eq(pthread_create(&t[i], NULL, fleet_start, f), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    int64_t all_ms = sf_test_boot_ms() - t0, slowest = 0;
    bool held[PATHS][SF_MAX_WORKER_ID + 1] = {{false}};
    int failed = 0, twice = 0, reconnected = 0, wrong = 0;
    for (int i = 0; i < N; i++) {
        fleet_holder *f = &fleet[i];
        if (f->rc != SFZ_OK) {
            if (failed++ == 0)
                fprintf(stderr, "fleet: holder %d: %s\n", i, f->err.message);
            continue;
        }
        slowest = f->took_ms > slowest ? f->took_ms : slowest;
        int64_t dc = sfz_datacenter_id(f->h), w = sfz_worker_id(f->h), id;
        twice += held[dc][w];
        held[dc][w] = true;
        if (f->sessions < 1 || f->sessions > 1 + f->retries) {
            if (reconnected++ == 0)
                fprintf(stderr, "fleet: holder %d: %d sessions, %d retries while starting\n",
                        i, f->sessions, f->retries);
        }
        sfz_error err;
        if (sfz_next_id(f->h, &id, &err) != SFZ_OK || worker_of(id) != w ||
            ((id >> SF_DATACENTER_ID_SHIFT) & SF_MAX_DATACENTER_ID) != dc)
            wrong++;
    }
    for (int i = 0; i < N; i++)
        sfz_stop(fleet[i].h);
    sf_test_zk_destroy(&fz);
    fprintf(stderr, "fleet: %d holders all serving after %" PRId64 " ms, the slowest start %"
            PRId64 " ms\n", N, all_ms, slowest);
    ck_assert_msg(failed == 0, "%d of %d starts failed", failed, N);
    ck_assert_msg(twice == 0, "%d pairs held twice", twice);
    ck_assert_msg(wrong == 0, "%d holders made no id of their own pair", wrong);
    ck_assert_msg(reconnected == 0, "%d starts opened more ZooKeeper sessions than one and one "
                  "per retry", reconnected);
    ck_assert_msg(all_ms < 90000, "%d holders took %" PRId64 " ms to serve", N, all_ms);
}
END_TEST

/* The requests the suite's server has received so far, from its mntr. */
static int64_t server_packets(void)
{
    int port = atoi(strchr(zk.hosts, ':') + 1), fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(write(fd, "mntr", 4), 4);
    char buf[65536];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)n;
    close(fd);
    buf[got] = '\0';
    const char *line = strstr(buf, "zk_packets_received\t");
    ck_assert_msg(line != NULL, "no zk_packets_received in mntr: %s", buf);
    return strtoll(line + strlen("zk_packets_received\t"), NULL, 10);
}

static int peer_refuses(void *ctx, const char *host_port, int64_t *worker_id,
                        int64_t *datacenter_id, int64_t *timestamp_ms, char *err, size_t errlen)
{
    (void)ctx;
    (void)worker_id;
    (void)datacenter_id;
    (void)timestamp_ms;
    snprintf(err, errlen, "nothing listens at %s", host_port);
    return 1;
}

/* The live clock check needs the holders under the path each second; a full path of 31
 * others must not cost a listing and 31 reads a second (32 requests, 40 times a handle's
 * renewals): the holders' watch keeps them, and a read goes out only when they change.
 * The first rounds read each holder once, slower on a loaded machine: the rate is taken
 * over 5 s windows until one is quiet, and reading every second never is. */
START_TEST(live_peer_list_reads_only_changes)
{
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    fill_slots(zh, "/e-live", 0, SF_MAX_WORKER_ID);
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, zk.hosts, "/e-live");
    o.session_timeout_ms = 10000; /* a renewal every 1.25 s */
    o.query_peer = peer_refuses;
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    int64_t per_s = -1;
    for (int waited = 0; waited < SF_TEST_PATIENCE_MS && (per_s < 0 || per_s > 8);
         waited += 5000) {
        int64_t p0 = server_packets();
        sf_test_sleep_ms(5000);
        per_s = (server_packets() - p0) / 5;
    }
    sfz_skew skew;
    sfz_get_skew(h, &skew);
    sfz_stop(h);
    zookeeper_close(zh);
    fprintf(stderr, "live: %" PRId64 " ZooKeeper requests a second, one holder beside 31\n",
            per_s);
    ck_assert_msg(per_s <= 8, "%" PRId64 " ZooKeeper requests a second for one holder beside 31 "
                  "others (its renewals are about 1 a second)", per_s);
    ck_assert_msg(skew.failures == 0, "the live check asked %" PRIu64 " embedded holders",
                  skew.failures);
}
END_TEST

/* One long call on a handle, from a thread of its own. */
typedef struct long_call {
    sfz *h;
    int64_t *ids;
    int rc;
    size_t discarded;
    int64_t returned_at; /* CLOCK_BOOTTIME ms, taken as soon as the call returned */
} long_call;

static void *long_call_thread(void *arg)
{
    long_call *c = arg;
    sfz_error err;
    c->rc = sfz_next_ids(c->h, c->ids, SFZ_MAX_IDS, &err);
    c->returned_at = sf_test_boot_ms();
    c->discarded = c->rc == SFZ_ERR_FENCED ? err.discarded : 0;
    return NULL;
}

/* sfz_stop while another thread is inside sfz_next_ids (a batch of SFZ_MAX_IDS, a quarter
 * of a second at 4,096 ids per ms): it frees nothing under the call, but waits for it to
 * return; the ids that call made once the stop began are discarded, never handed out. */
START_TEST(stop_waits_for_a_call_inside)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, zk.hosts, "/e-stop-inside");
    o.session_timeout_ms = STEADY_SESSION_MS; /* the call is refused by the stop alone */
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    long_call c = {.h = h, .ids = malloc(SFZ_MAX_IDS * sizeof(int64_t))};
    ck_assert(c.ids != NULL);
    sf_worker_stats before, now;
    sfz_get_stats(h, &before);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, long_call_thread, &c), 0);
    /* Inside for sure: the batch has waited out a few exhausted milliseconds already. */
    now = before;
    for (int64_t end = sf_test_boot_ms() + 60000;
         now.sequence_waits < before.sequence_waits + 5 && sf_test_boot_ms() < end;
         sf_test_sleep_ms(1))
        sfz_get_stats(h, &now);
    ck_assert_msg(now.sequence_waits >= before.sequence_waits + 5, "the call never started");
    int64_t stop_at = sf_test_boot_ms();
    sfz_stop(h);
    int64_t stopped_at = sf_test_boot_ms();
    pthread_join(t, NULL);
    free(c.ids);
    ck_assert_msg(c.returned_at <= stopped_at + 100, "sfz_stop returned %" PRId64 " ms after "
                  "it began, %" PRId64 " ms before the call inside the handle returned",
                  stopped_at - stop_at, c.returned_at - stopped_at);
    ck_assert_msg(c.rc == SFZ_ERR_FENCED && c.discarded == SFZ_MAX_IDS, "the call inside "
                  "returned %d with %zu ids discarded: ids made after the stop began",
                  c.rc, c.discarded);
}
END_TEST

/* One id per millisecond from h for ms milliseconds, into ids (room for ms + 1); returns
 * how many. */
static size_t one_id_per_ms(sfz *h, int64_t ms, int64_t *ids)
{
    size_t n = 0;
    for (int64_t end = sf_test_boot_ms() + ms; sf_test_boot_ms() < end && n < (size_t)ms;) {
        sfz_error err;
        int64_t at = sf_clock_now_ms();
        if (sfz_next_id(h, &ids[n], &err) == SFZ_OK)
            n++;
        while (sf_clock_now_ms() == at)
            ;
    }
    return n;
}

/* Two holders of one worker id whose epochs are 2 s apart: the second, taking over from the
 * first, would make at Unix time t the ids the first made at t - 2 s (the floor is kept in
 * Unix ms). The path keeps one epoch: the second is refused before it claims, naming both. */
START_TEST(another_epoch_is_refused_naming_both)
{
    enum { A_MS = 2000, B_MS = 1000, D_MS = 2000 };
    sfz_options o;
    sfz_error err;
    sfz *a = NULL, *b = NULL;
    test_options(&o, zk.hosts, "/e-epoch");
    o.worker_id = 0;
    ck_assert_msg(sfz_start(&o, &a, &err) == SFZ_OK, "%s", err.message);
    int64_t *ids_a = malloc((A_MS + 1) * sizeof *ids_a), *ids_b = malloc((B_MS + 1) * sizeof *ids_b);
    ck_assert(ids_a != NULL && ids_b != NULL);
    size_t na = one_id_per_ms(a, A_MS, ids_a), nb = 0;
    sfz_stop(a);
    o.epoch_ms = SF_TWITTER_EPOCH_MS + D_MS;
    int rc = sfz_start(&o, &b, &err);
    if (rc == SFZ_OK) {
        nb = one_id_per_ms(b, B_MS, ids_b);
        sfz_stop(b);
    }
    qsort(ids_a, na, sizeof *ids_a, sf_test_cmp_id);
    size_t repeated = 0;
    for (size_t i = 0; i < nb; i++)
        repeated += bsearch(&ids_b[i], ids_a, na, sizeof *ids_a, sf_test_cmp_id) != NULL;
    free(ids_a);
    free(ids_b);
    ck_assert_msg(rc == SFZ_ERR_CLAIM, "a holder with epoch_ms %lld took over from one with "
                  "%lld: %zu of its %zu ids repeat the first holder's (rc %d)",
                  (long long)SF_TWITTER_EPOCH_MS + D_MS, (long long)SF_TWITTER_EPOCH_MS,
                  repeated, nb, rc);
    char first[64], second[64];
    snprintf(first, sizeof first, "epoch_ms %lld", (long long)SF_TWITTER_EPOCH_MS);
    snprintf(second, sizeof second, "epoch_ms %lld", (long long)SF_TWITTER_EPOCH_MS + D_MS);
    ck_assert_msg(strstr(err.message, first) != NULL && strstr(err.message, second) != NULL,
                  "\"%s\" does not name both epochs", err.message);
}
END_TEST

/* ZooKeeper stops answering (a black hole: the connection stays open, nothing passes) under
 * a serving handle, a renewal in flight: sfz_stop gives up on the last record after a
 * third of the session timeout (the next holder waits out the reservation instead), and
 * the ZooKeeper client then waits up to 1.5 s for the server to close the session. Without
 * the bound it took the session and more (4.5 to 6 s on a 4 s session); a 12 s session
 * leaves room for a busy machine's slack between the bound (5.5 s) and that. */
START_TEST(stop_is_bounded_while_zookeeper_is_silent)
{
    enum { T_MS = 12000, BOUND_MS = T_MS / 3 + 1500, SLACK_MS = 5000 };
    int zk_port = atoi(strchr(zk.hosts, ':') + 1);
    sf_test_proxy *px = sf_test_proxy_start(zk_port);
    ck_assert_ptr_nonnull(px);
    char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", sf_test_proxy_port(px));
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, hosts, "/e-silent");
    o.session_timeout_ms = T_MS;
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    int64_t id;
    ck_assert_msg(sfz_next_id(h, &id, &err) == SFZ_OK, "%s", err.message);
    sf_test_proxy_set_mode(px, SF_PROXY_BLACKHOLE);
    sf_test_sleep_ms(T_MS / 8 + 100); /* a renewal sent into the silence */
    int64_t t0 = sf_test_boot_ms();
    sfz_stop(h);
    int64_t took = sf_test_boot_ms() - t0;
    sf_test_proxy_stop(px);
    fprintf(stderr, "sfz_stop took %" PRId64 " ms with ZooKeeper silent\n", took);
    ck_assert_msg(took <= BOUND_MS + SLACK_MS, "sfz_stop took %" PRId64 " ms with ZooKeeper "
                  "silent (bound %d ms)", took, BOUND_MS);
}
END_TEST

/* The thread ids of this process (/proc/self/task), up to max: how many. */
static int task_ids(long *ids, int max)
{
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < max;)
        if (e->d_name[0] != '.')
            ids[n++] = atol(e->d_name);
    closedir(d);
    return n;
}

/* The signals thread tid blocks (SigBlk of its status: bit n-1 for signal n); false when
 * the thread is gone. */
static bool task_blocked(long tid, uint64_t *mask)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = sscanf(line, "SigBlk: %" SCNx64, mask) == 1;
    fclose(f);
    return found;
}

/* A signal sent to the process is handled on one of the program's threads, never on one the
 * handle started (its notifier, its registry, the ZooKeeper client's): a program's handler
 * may need what only its own threads hold. They block every signal but the faults, which
 * belong to the thread that caused them. */
START_TEST(threads_take_no_process_signal)
{
    enum { MAX_TASKS = 64 };
    long before[MAX_TASKS], after[MAX_TASKS];
    int n_before = task_ids(before, MAX_TASKS);
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    test_options(&o, zk.hosts, "/e-signals");
    o.session_timeout_ms = STEADY_SESSION_MS;
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    int n_after = task_ids(after, MAX_TASKS), started = 0;
    for (int i = 0; i < n_after; i++) {
        bool old = false;
        for (int j = 0; j < n_before && !old; j++)
            old = after[i] == before[j];
        uint64_t mask;
        if (old || !task_blocked(after[i], &mask))
            continue;
        started++;
        for (int sig = 1; sig <= SIGRTMAX; sig++) {
            if ((sig >= 32 && sig < SIGRTMIN) || sig == SIGKILL || sig == SIGSTOP ||
                sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL ||
                sig == SIGTRAP || sig == SIGSYS)
                continue;
            ck_assert_msg(mask >> (sig - 1) & 1, "thread %ld (one of the handle's) takes "
                          "signal %d (%s) sent to the process (SigBlk %016" PRIx64 ")",
                          after[i], sig, sig < 32 ? strsignal(sig) : "real-time", mask);
        }
    }
    /* The notifier, the registry's thread, the ZooKeeper client's two. */
    ck_assert_msg(started >= 4, "the handle started %d threads", started);
    sfz_stop(h);
}
END_TEST

static Suite *embedded_suite(void)
{
    Suite *s = suite_create("embedded");
    TCase *tc = tcase_create("embedded");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bad_options_name_the_option_and_range);
    tcase_add_test(tc, start_serves_and_stop_releases);
    tcase_add_test(tc, options_at_their_maxima_serve);
    tcase_add_test(tc, unreachable_zookeeper_fails_after_retries);
    tcase_add_test(tc, all_slots_taken_fails);
    tcase_add_test(tc, start_waits_for_a_freed_id);
    tcase_add_test(tc, start_comes_up_with_zookeeper);
    tcase_add_test(tc, all_taken_message_names_the_rest);
    tcase_add_test(tc, claim_outlives_a_stalled_zookeeper);
    tcase_add_test(tc, lost_create_answer_leaves_one_node);
    tcase_add_test(tc, other_datacenter_holder_is_refused);
    tcase_add_test(tc, cancel_during_start);
    tcase_add_test(tc, keeps_refusing_while_fenced_then_serves_again);
    tcase_add_test(tc, health_names_zookeeper_unreachable);
    tcase_add_test(tc, health_names_a_paused_zookeeper);
#if !defined(__SANITIZE_ADDRESS__) /* it forks: a child may inherit the sanitizer's locks held */
    tcase_add_test(tc, frozen_past_the_session_refuses_on_waking);
#else
    (void)frozen_past_the_session_refuses_on_waking;
#endif
    tcase_add_test(tc, shut_refuses_for_good);
    tcase_add_test(tc, shut_outlives_a_fence_and_a_new_claim);
    tcase_add_test(tc, automatic_datacenter_takes_the_lowest_free_pair);
    tcase_add_test(tc, automatic_datacenter_options_are_checked);
    tcase_add_test(tc, startup_sleep_holds_without_serving);
    tcase_add_test(tc, live_peer_list_reads_only_changes);
    tcase_add_test(tc, stop_waits_for_a_call_inside);
    tcase_add_test(tc, another_epoch_is_refused_naming_both);
    tcase_add_test(tc, stop_is_bounded_while_zookeeper_is_silent);
    tcase_add_test(tc, threads_take_no_process_signal);
    suite_add_tcase(s, tc);
    TCase *fleet = tcase_create("fleet");
    tcase_set_timeout(fleet, 120);
    tcase_add_test(fleet, fleet_of_128_claims_in_parallel);
    suite_add_tcase(s, fleet);
    return s;
}

int main(void)
{
    return sf_test_registry_main("check_embedded", embedded_suite(), &zk);
}
