/* check_latency.c -- the timing histogram: bucket edges, percentiles, summing stripes. */
#include <check.h>
#include <stdlib.h>

#include "server/latency.h"

START_TEST(every_duration_lands_in_the_bucket_that_covers_it)
{
    /* Each bucket's range starts right after the previous one's upper end and holds the
     * values mapped to it, and is at most 1/8 of its lower end wide past the first row. */
    uint64_t values[] = {0, 1, 15, 16, 127, 128, 143, 144, 255, 256, 1000, 1023, 1024,
                         99999, 1000000, 123456789, (UINT64_C(1) << 36) - 1,
                         UINT64_C(1) << 36, (UINT64_C(1) << 37) + 5, UINT64_MAX};
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
        uint64_t ns = values[k];
        size_t i = sf_latency_bucket(ns);
        ck_assert_uint_lt(i, SF_LATENCY_BUCKETS);
        ck_assert_msg(sf_latency_bucket_upper_ns(i) >= ns, "%llu above bucket %zu",
                      (unsigned long long)ns, i);
        if (i > 0)
            ck_assert_msg(sf_latency_bucket_upper_ns(i - 1) < ns, "%llu below bucket %zu",
                          (unsigned long long)ns, i);
    }
    for (size_t i = 1; i < SF_LATENCY_BUCKETS; i++) {
        uint64_t lower = sf_latency_bucket_upper_ns(i - 1) + 1;
        ck_assert_uint_eq(sf_latency_bucket(lower), i);
        if (i >= SF_LATENCY_SUB && i < SF_LATENCY_BUCKETS - 1)
            ck_assert_uint_le(sf_latency_bucket_upper_ns(i) - lower + 1, lower / 8);
    }
}
END_TEST

START_TEST(percentiles_are_within_an_eighth)
{
    /* 1..10000 us, once each: the true p50 is 5000 us, p99 9900 us, p99.99 9999 us. */
    sf_latency *l = malloc(sizeof *l);
    ck_assert_ptr_nonnull(l);
    sf_latency_init(l);
    for (uint64_t us = 1; us <= 10000; us++)
        sf_latency_record(l, us * 1000);
    sf_latency_snapshot s;
    sf_latency_snapshot_init(&s);
    sf_latency_add_to(l, &s);
    ck_assert_uint_eq(s.count, 10000);
    ck_assert_uint_eq(s.min_ns, 1000);
    ck_assert_uint_eq(s.max_ns, 10000000);
    ck_assert_uint_eq(s.sum_ns, 10000ULL * 10001 / 2 * 1000);
    const struct { double q; double truth; } cases[] = {
        {0.25, 2500e3}, {0.5, 5000e3}, {0.9, 9000e3}, {0.99, 9900e3}, {0.9999, 9999e3}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double got = (double)sf_latency_percentile(&s, cases[k].q);
        ck_assert_msg(got >= cases[k].truth && got <= cases[k].truth * 1.125,
                      "p%g = %.0f ns, true value %.0f ns", cases[k].q * 100, got,
                      cases[k].truth);
    }
    ck_assert_uint_eq(sf_latency_percentile(&s, 1.0), 10000000);
    free(l);
}
END_TEST

START_TEST(stripes_add_up)
{
    sf_latency *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    ck_assert(a != NULL && b != NULL);
    sf_latency_init(a);
    sf_latency_init(b);
    sf_latency_snapshot s;
    sf_latency_snapshot_init(&s);
    sf_latency_add_to(a, &s);
    ck_assert_uint_eq(sf_latency_percentile(&s, 0.5), 0);
    sf_latency_record(a, 500);
    sf_latency_record(b, 70000);
    sf_latency_record(b, 90);
    sf_latency_snapshot_init(&s);
    sf_latency_add_to(a, &s);
    sf_latency_add_to(b, &s);
    ck_assert_uint_eq(s.count, 3);
    ck_assert_uint_eq(s.min_ns, 90);
    ck_assert_uint_eq(s.max_ns, 70000);
    ck_assert_uint_eq(s.sum_ns, 70590);
    uint64_t p50 = sf_latency_percentile(&s, 0.5);
    ck_assert_msg(p50 >= 500 && p50 < 563, "p50 %llu", (unsigned long long)p50);
    free(a);
    free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("latency");
    TCase *tc = tcase_create("histogram");
    tcase_add_test(tc, every_duration_lands_in_the_bucket_that_covers_it);
    tcase_add_test(tc, percentiles_are_within_an_eighth);
    tcase_add_test(tc, stripes_add_up);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
