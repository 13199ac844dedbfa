/* check_idcodec.c -- decoding ids, composing them back, the ids of a time range, their string
 * forms, and printing their time. */
#include "lib/snowflake.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
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
    ck_assert_str_eq(err.message, "worker id 32 is out of range: allowed 0..31");
    f.worker_id = 0;
    f.sequence = 4096;
    ck_assert_int_eq(sf_compose(&f, SF_TWITTER_EPOCH_MS, &id, &err), SF_ERR_ARG);
    ck_assert_str_eq(err.message, "sequence 4096 is out of range: allowed 0..4095");
    f.sequence = 0;
    f.timestamp_ms = SF_TWITTER_EPOCH_MS - 1;
    ck_assert_int_eq(sf_compose(&f, SF_TWITTER_EPOCH_MS, &id, &err), SF_ERR_ARG);
}
END_TEST

/* The bounds of a range: the first id of from_ms, the last of to_ms, and every id made in
 * between falls inside them. */
START_TEST(test_id_range_bounds)
{
    const int64_t epoch = SF_TWITTER_EPOCH_MS, from = epoch + 5000, to = epoch + 9000;
    int64_t lo, hi;
    ck_assert_int_eq(sf_id_range(from, to, epoch, &lo, &hi, NULL), SF_OK);
    ck_assert_int_eq(lo, 5000LL << 22);
    ck_assert_int_eq(hi, (9000LL << 22) | 0x3FFFFF);
    sf_decoded first = { .timestamp_ms = from }, last = { .timestamp_ms = to,
        .datacenter_id = 31, .worker_id = 31, .sequence = 4095 };
    int64_t a, b;
    ck_assert_int_eq(sf_compose(&first, epoch, &a, NULL), SF_OK);
    ck_assert_int_eq(sf_compose(&last, epoch, &b, NULL), SF_OK);
    ck_assert_int_eq(a, lo);
    ck_assert_int_eq(b, hi);
    /* The last id of the ms before and the first of the ms after are outside. */
    first.timestamp_ms = to + 1;
    last.timestamp_ms = from - 1;
    ck_assert_int_eq(sf_compose(&first, epoch, &a, NULL), SF_OK);
    ck_assert_int_eq(sf_compose(&last, epoch, &b, NULL), SF_OK);
    ck_assert_int_eq(a, hi + 1);
    ck_assert_int_eq(b, lo - 1);
    /* One ms is 4,194,304 ids; the whole range ends at INT64_MAX. */
    ck_assert_int_eq(sf_id_range(from, from, epoch, &lo, &hi, NULL), SF_OK);
    ck_assert_int_eq(hi - lo + 1, 1LL << 22);
    ck_assert_int_eq(sf_id_range(epoch, epoch + SF_MAX_TIMESTAMP_DELTA, epoch, &lo, &hi, NULL),
                     SF_OK);
    ck_assert_int_eq(lo, 0);
    ck_assert_int_eq(hi, INT64_MAX);
}
END_TEST

START_TEST(test_id_range_refused)
{
    const int64_t epoch = SF_TWITTER_EPOCH_MS, end = epoch + SF_MAX_TIMESTAMP_DELTA;
    int64_t lo = -7, hi = -7;
    sf_error err;
    char want[SF_ERROR_MAX];
    ck_assert_int_eq(sf_id_range(epoch - 1, epoch, epoch, &lo, &hi, &err), SF_ERR_ARG);
    snprintf(want, sizeof want, "from %" PRId64 " ms is outside the ids' time range %" PRId64
             "..%" PRId64 " (epoch .. epoch + 2^41 - 1 ms)", epoch - 1, epoch, end);
    ck_assert_str_eq(err.message, want);
    ck_assert_int_eq(sf_id_range(epoch, end + 1, epoch, &lo, &hi, &err), SF_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "to 3487858230209 ms is outside"));
    ck_assert_int_eq(sf_id_range(epoch + 2, epoch + 1, epoch, &lo, &hi, &err), SF_ERR_ARG);
    snprintf(want, sizeof want, "from %" PRId64 " ms is after to %" PRId64 " ms: allowed from "
             "<= to", epoch + 2, epoch + 1);
    ck_assert_str_eq(err.message, want);
    ck_assert_int_eq(sf_id_range(0, 1, -1, &lo, &hi, &err), SF_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "epoch -1 ms is outside"));
    ck_assert_int_eq(sf_id_range(INT64_MIN, INT64_MAX, epoch, &lo, &hi, &err), SF_ERR_ARG);
    ck_assert_int_eq(lo, -7);
    ck_assert_int_eq(hi, -7);
}
END_TEST

static const sf_id_base sf_bases[] = { SF_BASE10, SF_BASE32, SF_BASE58, SF_BASE62 };

/* splitmix64: a seeded, repeatable stream of random 64-bit values. */
static uint64_t random_state;

static uint64_t random_next(void)
{
    uint64_t z = (random_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A random id 0..INT64_MAX, spread over every magnitude. */
static int64_t random_id(void)
{
    uint64_t v = random_next() & (uint64_t)INT64_MAX;
    return (int64_t)(v >> (random_next() % 63));
}

static void assert_round_trip(int64_t id)
{
    for (size_t b = 0; b < sizeof sf_bases / sizeof sf_bases[0]; b++) {
        char text[SF_ID_TEXT_MAX];
        int64_t back = -1;
        ck_assert_int_eq(sf_id_encode(id, sf_bases[b], text, sizeof text, NULL), SF_OK);
        ck_assert_int_eq(sf_id_parse(text, sf_bases[b], &back, NULL), SF_OK);
        ck_assert_int_eq(back, id);
    }
}

START_TEST(test_text_known_forms)
{
    /* What bwmarrin/snowflake's Base58() writes: 0 is "1", 57 is "Z", 58 is "21". */
    const struct { int64_t id; sf_id_base base; const char *text; } known[] = {
        { 0, SF_BASE58, "1" }, { 57, SF_BASE58, "Z" }, { 58, SF_BASE58, "21" },
        { INT64_MAX, SF_BASE58, "npL6MjP8Qfc" },
        { 0, SF_BASE62, "00000000000" }, { INT64_MAX, SF_BASE62, "AzL8n0Y58m7" },
        { 0, SF_BASE32, "0000000000000" }, { INT64_MAX, SF_BASE32, "7ZZZZZZZZZZZZ" },
        { 4194725930LL, SF_BASE32, "0000003X0CW1A" }, { 4194725930LL, SF_BASE10, "4194725930" },
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        char text[SF_ID_TEXT_MAX];
        int64_t back;
        ck_assert_int_eq(sf_id_encode(known[i].id, known[i].base, text, sizeof text, NULL),
                         SF_OK);
        ck_assert_str_eq(text, known[i].text);
        ck_assert_int_eq(sf_id_parse(known[i].text, known[i].base, &back, NULL), SF_OK);
        ck_assert_int_eq(back, known[i].id);
    }
}
END_TEST

START_TEST(test_text_round_trip)
{
    const int64_t edges[] = { 0, 1, 57, 58, 61, 62, 4095, 4096, (1LL << 22) - 1, 1LL << 22,
                              (1LL << 53) - 1, 1LL << 53, INT64_MAX - 1, INT64_MAX };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        assert_round_trip(edges[i]);
    random_state = 24;
    for (int i = 0; i < 100000; i++)
        assert_round_trip(random_id());
}
END_TEST

/* Base 32 and base 62 keep the ids' order as strings (strcmp); base 58 does not. */
START_TEST(test_text_order)
{
    random_state = 58;
    int base58_inversions = 0;
    for (int i = 0; i < 100000; i++) {
        int64_t a = random_id(), b = random_id();
        for (size_t k = 0; k < sizeof sf_bases / sizeof sf_bases[0]; k++) {
            char ta[SF_ID_TEXT_MAX], tb[SF_ID_TEXT_MAX];
            ck_assert_int_eq(sf_id_encode(a, sf_bases[k], ta, sizeof ta, NULL), SF_OK);
            ck_assert_int_eq(sf_id_encode(b, sf_bases[k], tb, sizeof tb, NULL), SF_OK);
            int by_text = strcmp(ta, tb), by_id = (a > b) - (a < b);
            by_text = (by_text > 0) - (by_text < 0);
            if (sf_bases[k] == SF_BASE32 || sf_bases[k] == SF_BASE62)
                ck_assert_msg(by_text == by_id, "base %d: %" PRId64 " '%s' vs %" PRId64
                              " '%s'", (int)sf_bases[k], a, ta, b, tb);
            else if (sf_bases[k] == SF_BASE58)
                base58_inversions += by_text != by_id;
        }
    }
    ck_assert_int_gt(base58_inversions, 0);
}
END_TEST

START_TEST(test_text_refused)
{
    int64_t id = -7;
    sf_error err;
    ck_assert_int_eq(sf_id_parse("12l0", SF_BASE58, &id, &err), SF_ERR_ARG);
    ck_assert_str_eq(err.message, "'12l0' is not an id in base 58: 'l' at position 3 is not one "
                     "of \"123456789abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ\"");
    ck_assert_int_eq(sf_id_parse("7ZU", SF_BASE32, &id, &err), SF_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "'U' at position 3"));
    ck_assert_int_eq(sf_id_parse("abc-", SF_BASE62, &id, &err), SF_ERR_ARG);
    ck_assert_int_eq(sf_id_parse("", SF_BASE62, &id, &err), SF_ERR_ARG);
    ck_assert_str_eq(err.message, "'' is not an id in base 62: it is empty");
    /* One past INT64_MAX in each base. */
    ck_assert_int_eq(sf_id_parse("8000000000000", SF_BASE32, &id, &err), SF_ERR_ARG);
    ck_assert_str_eq(err.message, "'8000000000000' in base 32 is past the largest id: allowed "
                     "0..9223372036854775807");
    ck_assert_int_eq(sf_id_parse("AzL8n0Y58m8", SF_BASE62, &id, &err), SF_ERR_ARG);
    ck_assert_int_eq(sf_id_parse("npL6MjP8Qfd", SF_BASE58, &id, &err), SF_ERR_ARG);
    ck_assert_int_eq(sf_id_parse("9223372036854775808", SF_BASE10, &id, &err), SF_ERR_ARG);
    ck_assert_int_eq(sf_id_parse("ZZZZZZZZZZZZZZZZZZZZ", SF_BASE62, &id, &err), SF_ERR_ARG);
    ck_assert_int_eq(id, -7);
    /* Crockford's aliases and lower case, and leading zeros. */
    ck_assert_int_eq(sf_id_parse("oIl", SF_BASE32, &id, &err), SF_OK);
    ck_assert_int_eq(id, 33);
    ck_assert_int_eq(sf_id_parse("0000z", SF_BASE62, &id, &err), SF_OK);
    ck_assert_int_eq(id, 61);
    char small[4];
    ck_assert_int_eq(sf_id_encode(0, SF_BASE62, small, sizeof small, &err), SF_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "too small"));
    ck_assert_int_eq(sf_id_encode(-1, SF_BASE58, small, sizeof small, &err), SF_ERR_ARG);
    ck_assert_int_eq(sf_id_encode(1, (sf_id_base)16, small, sizeof small, &err), SF_ERR_ARG);
    ck_assert_str_eq(err.message, "base 16 is not one of 10, 32, 58, 62");
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
    tcase_add_test(tc, test_id_range_bounds);
    tcase_add_test(tc, test_id_range_refused);
    tcase_add_test(tc, test_text_known_forms);
    tcase_add_test(tc, test_text_round_trip);
    tcase_add_test(tc, test_text_order);
    tcase_add_test(tc, test_text_refused);
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
