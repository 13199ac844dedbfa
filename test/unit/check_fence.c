/* check_fence.c -- the fence's hold (sf_fence_hold): shut whatever the registry publishes,
 * saying why, and open again on release only if the last publish serves. */
#include "zk/fence.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* A worker with the system clock, for the fence to own. */
static sf_worker *new_worker(void)
{
    sf_worker_options o;
    sf_worker_options_init(&o);
    o.worker_id = 3;
    sf_worker *w = sf_worker_new(&o, NULL);
    ck_assert_ptr_nonnull(w);
    return w;
}

/* One id through the fence: its result, with why filled when refused. */
static int take(sf_fence *f, char *why, size_t len)
{
    int64_t id;
    why[0] = '\0';
    return sf_fence_next_ids(f, &id, 1, why, len, NULL);
}

START_TEST(hold_shuts_and_release_opens)
{
    sf_fence *f = sf_fence_new();
    char why[SF_FENCE_REASON_MAX];
    ck_assert_ptr_nonnull(f);
    ck_assert(sf_fence_publish(f, new_worker(), true, 0, 0, NULL));
    ck_assert_int_eq(take(f, why, sizeof why), SF_OK);
    ck_assert(!sf_fence_held(f, why, sizeof why));
    ck_assert(sf_fence_hold(f, "clock too far"));   /* it shut an open gate */
    ck_assert(!sf_fence_hold(f, "clock too far"));  /* shut already */
    ck_assert_int_eq(take(f, why, sizeof why), SF_FENCE_CLOSED);
    ck_assert_str_eq(why, "clock too far");
    ck_assert(sf_fence_held(f, why, sizeof why));
    ck_assert(sf_fence_refusal(f, why, sizeof why));
    /* A publish (the registry claimed again) keeps the hold. */
    ck_assert(!sf_fence_publish(f, sf_fence_worker(f), true, 0, 0, NULL));
    ck_assert_int_eq(take(f, why, sizeof why), SF_FENCE_CLOSED);
    ck_assert_str_eq(why, "clock too far");
    ck_assert(sf_fence_release(f)); /* it opened the gate */
    ck_assert_int_eq(take(f, why, sizeof why), SF_OK);
    ck_assert(!sf_fence_held(f, why, sizeof why));
    sf_fence_free(f);
}
END_TEST

/* Released while the registry does not serve: still shut, for the registry's reason. */
START_TEST(release_keeps_registry_reason)
{
    sf_fence *f = sf_fence_new();
    char why[SF_FENCE_REASON_MAX];
    ck_assert_ptr_nonnull(f);
    sf_fence_publish(f, new_worker(), true, 0, 0, NULL);
    sf_fence_hold(f, "clock too far");
    sf_fence_close(f, "session expired");
    ck_assert_int_eq(take(f, why, sizeof why), SF_FENCE_CLOSED);
    ck_assert_str_eq(why, "session expired");
    ck_assert(!sf_fence_release(f)); /* nothing to open */
    ck_assert_int_eq(take(f, why, sizeof why), SF_FENCE_CLOSED);
    ck_assert_str_eq(why, "session expired");
    sf_fence_publish(f, sf_fence_worker(f), true, 0, 0, NULL);
    ck_assert_int_eq(take(f, why, sizeof why), SF_OK);
    sf_fence_free(f);
}
END_TEST

static Suite *fence_suite(void)
{
    Suite *s = suite_create("fence");
    TCase *tc = tcase_create("hold");
    tcase_add_test(tc, hold_shuts_and_release_opens);
    tcase_add_test(tc, release_keeps_registry_reason);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fence_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
