/* check_hostport.c -- the one reading of host:port, of lists of them, and of decimals: the
 * forms accepted and each kind of bad input refused with the value and the range named. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/hostport.h"

START_TEST(test_hostport_forms)
{
    char host[SF_HOSTPORT_HOST_MAX], why[400];
    int port = 0;
    ck_assert(sf_hostport_parse("example.org:7609", host, sizeof host, &port, why, sizeof why));
    ck_assert_str_eq(host, "example.org");
    ck_assert_int_eq(port, 7609);
    ck_assert(sf_hostport_parse("[::1]:1", host, sizeof host, &port, why, sizeof why));
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(port, 1);
    /* what snowflaked registers for an IPv6 bind address: split at the last colon */
    ck_assert(sf_hostport_parse("fe80::2:65535", host, sizeof host, &port, why, sizeof why));
    ck_assert_str_eq(host, "fe80::2");
    ck_assert_int_eq(port, 65535);
}
END_TEST

START_TEST(test_hostport_refused)
{
    static const struct {
        const char *text, *said;
    } bad[] = {
        {"nohost", "'nohost' has no port"},
        {":7609", "is not host:port with a host of 1..279"},
        {"h:", "the port '' is not a number 1..65535"},
        {"h:0", "the port 0 is outside 1..65535"},
        {"h:65536", "the port 65536 is outside 1..65535"},
        {"h: 80", "the port ' 80' is not a number 1..65535"},
        {"h:+80", "the port '+80' is not a number 1..65535"},
        {"h:-80", "the port '-80' is not a number 1..65535"},
        {"h:80x", "the port '80x' is not a number 1..65535"},
        {"[::1]7609", "'[::1]7609' is not [address]:port"},
        {"[::1", "'[::1' is not [address]:port"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char host[SF_HOSTPORT_HOST_MAX], why[400];
        int port;
        ck_assert_msg(!sf_hostport_parse(bad[i].text, host, sizeof host, &port, why, sizeof why),
                      "'%s' accepted", bad[i].text);
        ck_assert_msg(strstr(why, bad[i].said) != NULL, "'%s': %s", bad[i].text, why);
    }
}
END_TEST

START_TEST(test_hostport_lists)
{
    char why[600];
    ck_assert(sf_hostport_list_check("zookeeper", "a:1,[::1]:2,b:3/chroot/app", why, sizeof why));
    ck_assert(!sf_hostport_list_check("zookeeper", "a:1,nohost", why, sizeof why));
    ck_assert_str_eq(why, "zookeeper entry 'nohost' has no port: write host:port, port 1..65535");
    ck_assert(!sf_hostport_list_check("zookeeper", "", why, sizeof why));
    ck_assert_str_eq(why, "zookeeper is empty: name at least one host:port");
    ck_assert(!sf_hostport_list_check("zookeeper", "a:1,", why, sizeof why));
    ck_assert(!sf_hostport_list_check("zookeeper", "a:1/x,b:2", why, sizeof why));
}
END_TEST

START_TEST(test_decimal)
{
    int64_t v = -1;
    char why[200];
    ck_assert(sf_decimal_parse("n", "0", 0, 10, &v, why, sizeof why) && v == 0);
    ck_assert(sf_decimal_parse("n", "007", 0, 10, &v, why, sizeof why) && v == 7);
    ck_assert(sf_decimal_parse("n", "9223372036854775807", 0, INT64_MAX, &v, why, sizeof why));
    ck_assert(v == INT64_MAX);
    static const char *const bad[] = {"", " 1", "1 ", "+1", "-1", "1e3", "0x10", "1.0",
                                      "9223372036854775808", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(!sf_decimal_parse("n", bad[i], 0, INT64_MAX, &v, why, sizeof why),
                      "'%s' accepted", bad[i]);
        ck_assert_msg(strstr(why, "is not a number 0..9223372036854775807") != NULL, "%s", why);
    }
    ck_assert(!sf_decimal_parse("n", "11", 0, 10, &v, why, sizeof why));
    ck_assert_str_eq(why, "n 11 is outside 0..10");
}
END_TEST

static Suite *hostport_suite(void)
{
    Suite *s = suite_create("hostport");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_hostport_forms);
    tcase_add_test(tc, test_hostport_refused);
    tcase_add_test(tc, test_hostport_lists);
    tcase_add_test(tc, test_decimal);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(hostport_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
