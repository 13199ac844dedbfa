/* check_idcodec.c -- decoding ids, composing them back, and printing their time. */
#include "lib/snowflake.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_decode_known_id)
{
    /* 1000 ms after Twitter's epoch, datacenter 3, worker 7, sequence 42. */
    int64_t id = (1000LL << 22) | (3 << 17) | (7 << 12) | 42;
    ck_assert_int_eq(id, 4194725930LL);
    sf_decoded d;
    ck_assert_int_eq(sf_decode(id, SF_TWITTER_EPOCH_MS, &d, NULL), SF_OK);
    ck_assert_int_eq(d.timestamp_ms, SF_TWITTER_EPOCH_MS + 1000);
    ck_assert_int_eq(d.datacenter_id, 3);
    ck_assert_int_eq(d.worker_id, 7);
    ck_assert_int_eq(d.sequence, 42);
}
END_TEST

START_TEST(test_iso8601)
{
    char buf[SF_ISO8601_MAX];
    ck_assert_str_eq(sf_format_iso8601(SF_TWITTER_EPOCH_MS, buf, sizeof buf),
                     "2010-11-04T01:42:54.657Z");
    ck_assert_str_eq(sf_format_iso8601(0, buf, sizeof buf), "1970-01-01T00:00:00.000Z");
    ck_assert_str_eq(sf_format_iso8601(1700000000005LL, buf, sizeof buf),
                     "2023-11-14T22:13:20.005Z");
}
END_TEST

START_TEST(test_round_trip_generated)
{
    sf_worker_options o;
    sf_worker_options_init(&o);
    o.worker_id = _i % 32;
    o.datacenter_id = (_i * 7) % 32;
    sf_worker *w = sf_worker_new(&o, NULL);
    ck_assert_ptr_nonnull(w);
    for (int k = 0; k < 5000; k++) {
        int64_t id, back;
        sf_decoded d;
        ck_assert_int_eq(sf_worker_next_id(w, &id, NULL), SF_OK);
        ck_assert_int_eq(sf_decode(id, SF_TWITTER_EPOCH_MS, &d, NULL), SF_OK);
        ck_assert_int_eq(d.worker_id, o.worker_id);
        ck_assert_int_eq(d.datacenter_id, o.datacenter_id);
        ck_assert_int_eq(sf_compose(&d, SF_TWITTER_EPOCH_MS, &back, NULL), SF_OK);
        ck_assert_int_eq(back, id);
    }
    sf_worker_free(w);
}
END_TEST

START_TEST(test_round_trip_fields)
{
    /* Every field at its edges, with a custom epoch. */
    const int64_t epoch = 1600000000000LL;
    const int64_t stamps[] = { 0, 1, 4095, SF_MAX_TIMESTAMP_DELTA };
    for (size_t t = 0; t < 4; t++)
        for (int64_t dc = 0; dc <= 31; dc += 31)
            for (int64_t wk = 0; wk <= 31; wk += 31)
                for (int64_t seq = 0; seq <= 4095; seq += 4095) {
                    sf_decoded in = { .timestamp_ms = epoch + stamps[t], .datacenter_id = dc,
                                      .worker_id = wk, .sequence = seq }, out;
                    int64_t id;
                    ck_assert_int_eq(sf_compose(&in, epoch, &id, NULL), SF_OK);
                    ck_assert_int_ge(id, 0);
                    ck_assert_int_eq(sf_decode(id, epoch, &out, NULL), SF_OK);
                    ck_assert_int_eq(out.timestamp_ms, in.timestamp_ms);
                    ck_assert_int_eq(out.datacenter_id, dc);
                    ck_assert_int_eq(out.worker_id, wk);
                    ck_assert_int_eq(out.sequence, seq);
                }
}
END_TEST

START_TEST(test_decode_negative_refused)
{
    sf_decoded d;
    sf_error err;
    ck_assert_int_eq(sf_decode(-1, SF_TWITTER_EPOCH_MS, &d, &err), SF_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "negative"));
}
END_TEST

/* An epoch so late that epoch + the 41-bit timestamp overflows is refused, not wrapped. */
START_TEST(test_decode_huge_epoch_refused)
{
    sf_decoded d;
    sf_error err;
    ck_assert_int_eq(sf_decode(INT64_MAX, INT64_MAX, &d, &err), SF_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "epoch"));
    ck_assert_int_eq(sf_decode(INT64_MAX, -1, &d, &err), SF_ERR_ARG);
    ck_assert_int_eq(sf_decode(INT64_MAX, SF_MAX_EPOCH_MS, &d, &err), SF_OK);
    ck_assert_int_eq(d.timestamp_ms, SF_MAX_EPOCH_MS + SF_MAX_TIMESTAMP_DELTA);
}
END_TEST

START_TEST(test_compose_out_of_range)
{
    sf_decoded f = { .timestamp_ms = SF_TWITTER_EPOCH_MS, .worker_id = 32 };
    sf_error err;
    int64_t id;
    ck_assert_int_eq(sf_compose(&f, SF_TWITTER_EPOCH_MS, &id, &err), SF_ERR_ARG);
    ck_assert_str_eq(err.message, "worker id is out of range: allowed 0..31");
    f.worker_id = 0;
    f.sequence = 4096;
    ck_assert_int_eq(sf_compose(&f, SF_TWITTER_EPOCH_MS, &id, &err), SF_ERR_ARG);
    ck_assert_str_eq(err.message, "sequence is out of range: allowed 0..4095");
    f.sequence = 0;
    f.timestamp_ms = SF_TWITTER_EPOCH_MS - 1;
    ck_assert_int_eq(sf_compose(&f, SF_TWITTER_EPOCH_MS, &id, &err), SF_ERR_ARG);
}
END_TEST

static Suite *idcodec_suite(void)
{
    Suite *s = suite_create("idcodec");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_decode_known_id);
    tcase_add_test(tc, test_iso8601);
    tcase_add_loop_test(tc, test_round_trip_generated, 0, 8);
    tcase_add_test(tc, test_round_trip_fields);
    tcase_add_test(tc, test_decode_negative_refused);
    tcase_add_test(tc, test_decode_huge_epoch_refused);
    tcase_add_test(tc, test_compose_out_of_range);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(idcodec_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
