/* check_slow.c -- libsnowflake-zk, through its public header only, against a real ZooKeeper
 * server that answers slowly (a proxy delays every byte each way) and under application
 * callbacks that take their time: the lease is kept through round trips up to the limit the
 * session timeout allows, no slow callback delays a renewal, and the renewals' round trips
 * are measured, beside a probe of ZooKeeper's own pace. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include <check.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <snowflake_zk.h>

#include "registry_harness.h"

static sf_test_zk zk;

/* Options for one test on its own path, reaching ZooKeeper through hosts. */
static void test_options(sfz_options *o, const char *hosts, const char *path, int session_ms)
{
    sfz_options_init(o);
    o->zookeeper = hosts;
    o->worker_id_path = path;
    o->session_timeout_ms = session_ms;
    o->start_retry_wait_ms = 100;
    o->claim_retries = 0;
}

/* A proxy in front of the suite's server, and the hosts string that goes through it. */
static sf_test_proxy *proxy_to_zk(char *hosts, size_t len)
{
    const char *colon = strrchr(zk.hosts, ':');
    ck_assert_ptr_nonnull(colon);
    sf_test_proxy *p = sf_test_proxy_start(atoi(colon + 1));
    ck_assert_ptr_nonnull(p);
    snprintf(hosts, len, "127.0.0.1:%d", sf_test_proxy_port(p));
    return p;
}

/* A thread that asks for an id about once a millisecond and counts what it got; it also
 * notes how the machine treated the run: the longest round trip of a renewal it saw, and the
 * longest this thread itself was held up between two calls. */
typedef struct caller {
    sfz *h;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu;
    uint64_t ok, refused;
    int64_t first_ok_at;       /* boot ms of the first id, 0 = none yet */
    int64_t first_refused_at;  /* boot ms of the first refusal after the first id, 0 = none */
    int64_t last_refused_at;
    char reason[SFZ_ERROR_MAX]; /* the first refusal's */
    int64_t longest_trip_ms;   /* the longest renewal round trip seen (sampled) */
    int64_t longest_stall_ms;  /* the longest gap between two calls */
    int64_t longest_write_ms;  /* the longest write of the probe (zk_probe) */
    int one_way;               /* the proxy's delay each way during the run */
} caller;

static void *caller_run(void *arg)
{
    caller *c = arg;
    int64_t before = sf_test_boot_ms();
    while (!atomic_load(&c->stop)) {
        int64_t id;
        sfz_error err;
        sfz_renewals rn;
        int rc = sfz_next_id(c->h, &id, &err);
        sfz_get_renewals(c->h, &rn);
        int64_t now = sf_test_boot_ms();
        pthread_mutex_lock(&c->mu);
        if (rn.last_ms > c->longest_trip_ms)
            c->longest_trip_ms = rn.last_ms;
        if (now - before > c->longest_stall_ms)
            c->longest_stall_ms = now - before;
        if (rc == SFZ_OK) {
            c->ok++;
            if (c->first_ok_at == 0)
                c->first_ok_at = now;
        } else if (c->first_ok_at != 0) {
            c->refused++;
            if (c->first_refused_at == 0) {
                c->first_refused_at = now;
                snprintf(c->reason, sizeof c->reason, "%s", err.message);
            }
            c->last_refused_at = now;
        }
        pthread_mutex_unlock(&c->mu);
        sf_test_sleep_ms(1);
        before = sf_test_boot_ms();
    }
    return NULL;
}

static void caller_start(caller *c, sfz *h)
{
    memset(c, 0, sizeof *c);
    c->h = h;
    atomic_init(&c->stop, false);
    pthread_mutex_init(&c->mu, NULL);
    ck_assert_int_eq(pthread_create(&c->thread, NULL, caller_run, c), 0);
}

/* Stops the thread; *out is what it saw. */
static void caller_stop(caller *c, caller *out)
{
    atomic_store(&c->stop, true);
    pthread_join(c->thread, NULL);
    pthread_mutex_lock(&c->mu);
    *out = *c;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_destroy(&c->mu);
}

/* Waits up to ms for the handle to serve. */
static bool wait_serving(sfz *h, int ms)
{
    for (int64_t end = sf_test_boot_ms() + ms; sf_test_boot_ms() < end; sf_test_sleep_ms(20)) {
        sfz_state st;
        sfz_get_state(h, &st);
        if (st.serving)
            return true;
    }
    return false;
}

/* The machine stalls now and then (shared, busy): a renewal that took longer than the limit,
 * or this process held up for 100 ms, is outside what the lease promises to ride out. */
#define STALL_MS 100

/* What one run of calls saw, and whether it proves anything: refusals count only when no
 * round trip went past the limit and the process was never held up. A renewal that is never
 * answered shows in no round trip, so ZooKeeper's own pace is measured beside the holder: a
 * probe's write that took longer than the limit less the proxy's delay both ways (a disk
 * that stalled its fsync, a starved server) counts as a round trip past the limit too. */
static bool run_undisturbed(const caller *seen, int64_t limit_ms)
{
    return seen->longest_trip_ms <= limit_ms && seen->longest_stall_ms < STALL_MS &&
           seen->longest_write_ms + 2 * seen->one_way <= limit_ms;
}

/* A thread that writes a node of its own directly (not through the proxy) every 50 ms and
 * notes the longest write: how long ZooKeeper itself took over the run. */
#define PROBE_PATH "/s-probe"

typedef struct zk_probe {
    zhandle_t *zh;
    pthread_t thread;
    atomic_bool stop;
    atomic_llong longest_ms;
} zk_probe;

static void *zk_probe_run(void *arg)
{
    zk_probe *z = arg;
    while (!atomic_load(&z->stop)) {
        int64_t t0 = sf_test_boot_ms();
        zoo_set(z->zh, PROBE_PATH, "x", 1, -1); /* a failed write took its time too */
        int64_t took = sf_test_boot_ms() - t0;
        if (took > atomic_load(&z->longest_ms))
            atomic_store(&z->longest_ms, took);
        sf_test_sleep_ms(50);
    }
    return NULL;
}

static void zk_probe_start(zk_probe *z)
{
    z->zh = sf_test_zk_client(zk.hosts);
    int rc = zoo_create(z->zh, PROBE_PATH, "x", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    ck_assert_msg(rc == ZOK || rc == ZNODEEXISTS, "cannot create %s: %s", PROBE_PATH,
                  zerror(rc));
    atomic_init(&z->stop, false);
    atomic_init(&z->longest_ms, 0);
    ck_assert_int_eq(pthread_create(&z->thread, NULL, zk_probe_run, z), 0);
}

/* Stops the probe; the longest write it saw. */
static int64_t zk_probe_stop(zk_probe *z)
{
    atomic_store(&z->stop, true);
    pthread_join(z->thread, NULL);
    zookeeper_close(z->zh);
    return atomic_load(&z->longest_ms);
}

/* Asks for ids for ms while the proxy adds one_way ms each way; *seen is what the calls got.
 * The delay goes back to 0 after. */
static void slow_run(sfz *h, sf_test_proxy *p, int one_way, int ms, caller *seen)
{
    caller c;
    zk_probe z;
    zk_probe_start(&z);
    caller_start(&c, h);
    sf_test_sleep_ms(20);
    if (p != NULL)
        sf_test_proxy_set_delay(p, one_way, one_way);
    sf_test_sleep_ms(ms);
    caller_stop(&c, seen);
    seen->longest_write_ms = zk_probe_stop(&z);
    seen->one_way = p != NULL ? one_way : 0;
    if (p != NULL)
        sf_test_proxy_set_delay(p, 0, 0);
}

/* Fails on refusals in an undisturbed run; a disturbed one is retried (at most 3 runs), and
 * when every run was disturbed the machine was too busy to tell: said, not failed. */
#define RUNS 3
#define CHECK_RUNS(what, limit_ms, run_once)                                                 \
    do {                                                                                     \
        caller seen_;                                                                        \
        for (int run_ = 1;; run_++) {                                                        \
            run_once(&seen_);                                                                \
            bool calm_ = run_undisturbed(&seen_, (limit_ms));                                \
            ck_assert_msg(seen_.first_ok_at > 0, "%s: no id at all", (what));                \
            ck_assert_msg(seen_.refused == 0 || !calm_, "%s: %" PRIu64 " calls refused (%"   \
                          PRIu64 " served), the first %" PRId64 " ms after the first id, "  \
                          "with every renewal within %" PRId64 " ms (the longest %" PRId64  \
                          " ms; ZooKeeper's longest write %" PRId64 " ms): %s", (what),     \
                          seen_.refused, seen_.ok,                                           \
                          seen_.first_refused_at - seen_.first_ok_at, (int64_t)(limit_ms),  \
                          seen_.longest_trip_ms, seen_.longest_write_ms, seen_.reason);      \
            if (seen_.refused == 0)                                                          \
                break;                                                                       \
            fprintf(stderr, "%s: run %d refused %" PRIu64 " calls, but the machine stalled " \
                    "(longest round trip %" PRId64 " ms, limit %" PRId64 "; held up %"      \
                    PRId64 " ms; ZooKeeper's longest write %" PRId64 " ms)%s\n", (what),   \
                    run_, seen_.refused, seen_.longest_trip_ms, (int64_t)(limit_ms),         \
                    seen_.longest_stall_ms, seen_.longest_write_ms,                          \
                    run_ < RUNS ? ": again" : ": too busy to tell, every run disturbed");    \
            if (run_ == RUNS)                                                                \
                break;                                                                       \
        }                                                                                    \
    } while (0)

/* A holder with a 3 s session serves, then every ZooKeeper round trip takes 600 ms (T/5, above
 * the T/6 that one renewal in flight at a time could bear) for 12 s: it keeps serving, never
 * refusing. */
static sfz *slow_h;
static sf_test_proxy *slow_p;

static void slow_600(caller *seen)
{
    ck_assert_msg(wait_serving(slow_h, 60000), "the holder never served");
    sf_test_sleep_ms(3000); /* a lease certified on the fast link first */
    slow_run(slow_h, slow_p, 300, 12000, seen);
}

START_TEST(slow_round_trips_keep_serving)
{
    char hosts[64];
    slow_p = proxy_to_zk(hosts, sizeof hosts);
    sfz_options o;
    sfz_error err;
    sfz_renewals rn;
    test_options(&o, hosts, "/s-slow", 3000);
    ck_assert_msg(sfz_start(&o, &slow_h, &err) == SFZ_OK, "%s", err.message);
    sfz_get_renewals(slow_h, &rn);
    CHECK_RUNS("600 ms round trips", rn.round_trip_limit_ms, slow_600);
    sfz_stop(slow_h);
    sf_test_proxy_stop(slow_p);
}
END_TEST

/* The holder starts with every round trip near the limit its session timeout allows
 * (sfz_renewals says which; 7T/32), and from its first id on it never refuses one. */
static sfz_options limit_o;
static int limit_one_way;

static void start_slow(caller *seen)
{
    sfz_error err;
    sf_test_proxy_set_delay(slow_p, limit_one_way, limit_one_way);
    ck_assert_msg(sfz_start(&limit_o, &slow_h, &err) == SFZ_OK, "%s", err.message);
    slow_run(slow_h, slow_p, limit_one_way, 10000, seen);
    sfz_stop(slow_h);
}

START_TEST(start_near_the_round_trip_limit)
{
    char hosts[64];
    slow_p = proxy_to_zk(hosts, sizeof hosts);
    sfz_error err;
    sfz_renewals rn;
    test_options(&limit_o, hosts, "/s-limit", 3000);
    /* The limit for this timeout, and what the server itself adds to a round trip. */
    ck_assert_msg(sfz_start(&limit_o, &slow_h, &err) == SFZ_OK, "%s", err.message);
    ck_assert_msg(wait_serving(slow_h, 60000), "the holder never served");
    sf_test_sleep_ms(1000);
    sfz_get_renewals(slow_h, &rn);
    sfz_stop(slow_h);
    int64_t limit = rn.round_trip_limit_ms, own = rn.last_ms;
    ck_assert_msg(rn.session_timeout_ms == 3000 && limit == 3000 * 7 / 32 && own >= 0,
                  "timeout %" PRId64 ", limit %" PRId64 ", last %" PRId64, rn.session_timeout_ms,
                  limit, own);
    limit_one_way = (int)(limit - own - 30) / 2; /* 30 ms below it, for the machine's own */
    CHECK_RUNS("round trips near the limit", limit, start_slow);
    sf_test_proxy_stop(slow_p);
}
END_TEST

/* An on_state that sleeps 2 s (two thirds of the session timeout) on every call. */
static void slow_on_state(void *ctx, const sfz_state *state)
{
    (void)ctx;
    (void)state;
    sf_test_sleep_ms(2000);
}

/* A log sink that sleeps 2 s on the line that says serving began. */
static void slow_log(void *ctx, const char *level, const char *message)
{
    (void)ctx;
    fprintf(stderr, "slow sink %s: %s\n", level, message);
    if (strstr(message, "-> serving") != NULL)
        sf_test_sleep_ms(2000);
}

/* Starts a holder with a 3 s session and the given callbacks and asks for ids for 6 s: no
 * refusal after the first id, since no callback may delay a renewal. */
static sfz_options callback_o;

static void serve_with_callbacks(caller *seen)
{
    sfz_error err;
    ck_assert_msg(sfz_start(&callback_o, &slow_h, &err) == SFZ_OK, "%s", err.message);
    slow_run(slow_h, NULL, 0, 6000, seen);
    sfz_stop(slow_h);
}

START_TEST(slow_on_state_delays_no_renewal)
{
    test_options(&callback_o, zk.hosts, "/s-on-state", 3000);
    callback_o.on_state = slow_on_state;
    CHECK_RUNS("an on_state that sleeps 2 s", 3000 * 7 / 32, serve_with_callbacks);
}
END_TEST

START_TEST(slow_log_sink_delays_no_renewal)
{
    test_options(&callback_o, zk.hosts, "/s-log", 3000);
    callback_o.log = slow_log;
    CHECK_RUNS("a log sink that sleeps 2 s", 3000 * 7 / 32, serve_with_callbacks);
}
END_TEST

static Suite *slow_suite(void)
{
    Suite *s = suite_create("slow");
    TCase *tc = tcase_create("slow");
    tcase_set_timeout(tc, 150); /* a run takes under 30 s; three when the machine stalls */
    tcase_add_test(tc, slow_round_trips_keep_serving);
    tcase_add_test(tc, start_near_the_round_trip_limit);
    tcase_add_test(tc, slow_on_state_delays_no_renewal);
    tcase_add_test(tc, slow_log_sink_delays_no_renewal);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_test_registry_main("check_slow", slow_suite(), &zk);
}
