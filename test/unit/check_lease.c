/* check_lease.c -- how the registry certifies its lease, against a real ZooKeeper server, seen
 * through its own reports: renewals held on the way (a link that stalls, then delivers
 * everything at once, as TCP does after a retransmission) certify nothing sent with them; the
 * renewals' round trips are counted in the histogram whose bounds the public header names. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zk/registry.h"
#include "zk/snowflake_zk.h"
#include "registry_harness.h"

static sf_test_zk zk;

/* Every lease the registry reported, and when. */
#define LEASES_MAX 4096
typedef struct lease_record {
    pthread_mutex_t mu;
    int count;
    int64_t at[LEASES_MAX], until[LEASES_MAX]; /* CLOCK_BOOTTIME ms */
} lease_record;

static void record_lease(void *ctx, int64_t valid_until_boot_ms, int64_t reserved_until_ms)
{
    (void)reserved_until_ms;
    lease_record *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (l->count < LEASES_MAX) {
        l->at[l->count] = sf_test_boot_ms();
        l->until[l->count++] = valid_until_boot_ms;
    }
    pthread_mutex_unlock(&l->mu);
}

/* The furthest end of a lease reported at or after since (0 when none was). */
static int64_t furthest_lease_since(lease_record *l, int64_t since)
{
    int64_t furthest = 0;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->count; i++)
        if (l->at[i] >= since && l->until[i] > furthest)
            furthest = l->until[i];
    pthread_mutex_unlock(&l->mu);
    return furthest;
}

/* The histogram's bounds are the ones libsnowflake-zk's header promises. */
START_TEST(renewal_bounds_are_the_public_ones)
{
    static const int64_t registry[] = SF_REGISTRY_RENEWAL_BOUNDS_MS, public[] = SFZ_RENEWAL_BOUNDS_MS;
    ck_assert_int_eq(sizeof registry, sizeof public);
    ck_assert_int_eq(sizeof registry / sizeof registry[0], SF_REGISTRY_RENEWAL_BUCKETS);
    for (size_t i = 0; i < SF_REGISTRY_RENEWAL_BUCKETS; i++) {
        ck_assert_int_eq(registry[i], public[i]);
        ck_assert(i == 0 || registry[i] > registry[i - 1]);
    }
    /* Each T from 1 s to 60 s has bounds between T/8 and T/2. */
    for (int64_t t = 1000; t <= 60000; t += 1000) {
        int within = 0;
        for (size_t i = 0; i < SF_REGISTRY_RENEWAL_BUCKETS; i++)
            within += registry[i] >= t / 8 && registry[i] <= t / 2;
        ck_assert_msg(within >= 5, "T = %" PRId64 " ms: %d bounds within T/8..T/2", t, within);
    }
}
END_TEST

/* A holder renews through a link that holds everything it sends for 1.8 s (more than REPORT
 * plus a renewal interval), then lets it through at once. The renewals sent during the hold
 * arrive together with the ones that would certify them by their send times, in one ping
 * interval, so none of them may count: until REPORT after they are confirmed, no lease
 * reaches past the last anchor sent before the hold, plus the lease. */
START_TEST(held_renewals_certify_nothing_sent_with_them)
{
    enum { SESSION_MS = 4000, HOLD_MS = 1800 };
    const char *colon = strrchr(zk.hosts, ':');
    sf_test_proxy *p = sf_test_proxy_start(atoi(colon + 1));
    ck_assert_ptr_nonnull(p);
    char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", sf_test_proxy_port(p));
    static lease_record leases = {.mu = PTHREAD_MUTEX_INITIALIZER};
    sf_test_state_log states = SF_TEST_STATE_LOG_INIT;
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    sf_registry_options_init(&o);
    o.hosts = hosts;
    o.session_timeout_ms = SESSION_MS;
    o.worker_id_path = "/l-held";
    o.host_port = "127.0.0.1:7609";
    o.skip_sanity_checks = true;
    o.on_lease = record_lease;
    o.lease_ctx = &leases;
    o.on_state = sf_test_on_state;
    o.state_ctx = &states;
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_msg(sf_registry_claim(r, &id, &floor, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(sf_registry_watch(r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(sf_test_wait_serving(&states, true, 60000), "never served");
    sf_test_sleep_ms(2000);
    int64_t held_at = sf_test_boot_ms();
    sf_test_proxy_hold_up(p, true);
    sf_test_sleep_ms(HOLD_MS);
    sf_test_proxy_hold_up(p, false);
    int64_t released_at = sf_test_boot_ms();
    int64_t lease = sf_registry_lease_ms(SESSION_MS), report = sf_registry_report_ms(SESSION_MS);
    int64_t bound = held_at + lease, worst = 0;
    /* Renewals go on for 4 s after the release, and until one reported REPORT after it
     * reaches past the bound, which a loaded machine may take longer to show. */
    sf_test_sleep_ms(4000);
    for (int waited = 4000; waited < SF_TEST_PATIENCE_MS &&
         furthest_lease_since(&leases, released_at + report) <= bound; waited += 100)
        sf_test_sleep_ms(100);
    sf_registry_renewal_stats rs;
    sf_registry_get_renewal_stats(r, &rs);
    sf_registry_close(r);
    sf_test_proxy_stop(p);
    pthread_mutex_lock(&leases.mu);
    for (int i = 0; i < leases.count; i++)
        if (leases.at[i] < released_at + report && leases.until[i] > bound + worst)
            worst = leases.until[i] - bound;
    pthread_mutex_unlock(&leases.mu);
    int64_t later = furthest_lease_since(&leases, released_at + report);
    ck_assert_msg(worst == 0, "a lease reported within REPORT of the held renewals' release "
                  "ends %" PRId64 " ms past the hold's start plus the lease: a renewal sent "
                  "during the hold was certified by one that arrived with it", worst);
    ck_assert_msg(later > bound, "no lease past the hold's start plus the lease came after the "
                  "release: the renewals did not resume (the test proves nothing)");
    /* The figures: every renewal counted, in the histogram, timed by the session. */
    uint64_t in_buckets = 0;
    for (int b = 0; b <= SF_REGISTRY_RENEWAL_BUCKETS; b++)
        in_buckets += rs.buckets[b];
    ck_assert_msg(rs.confirmed > 10 && in_buckets == rs.confirmed && rs.sum_ms >= HOLD_MS,
                  "%" PRIu64 " confirmed, %" PRIu64 " in the buckets, sum %" PRId64 " ms",
                  rs.confirmed, in_buckets, rs.sum_ms);
    ck_assert_int_eq(rs.session_timeout_ms, SESSION_MS);
    ck_assert_int_eq(rs.round_trip_limit_ms, SESSION_MS * 7 / 32);
}
END_TEST

static Suite *lease_suite(void)
{
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("lease");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, renewal_bounds_are_the_public_ones);
    tcase_add_test(tc, held_renewals_certify_nothing_sent_with_them);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_test_registry_main("check_lease", lease_suite(), &zk);
}
