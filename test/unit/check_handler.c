/* check_handler.c -- the request path's fencing: an id is handed out only if the lease,
 * the reservation and the worker it was made under still hold after it was made. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/handler.h"
#include "server/standalone.h"
#include "rpc/thrift_fix.h"
#include "lib/snowflake.h"

/* The worker, lease and gate the test publishes (each test runs in a process of its own). */
static sf_standalone *standalone;

/* A handler with the default limits and get_ids' count bounded by max_batch, whose ids
 * come from what the test publishes to standalone. */
static SfHandler *new_handler(int max_batch)
{
    sf_handler_options o;
    sf_handler_options_init(&o);
    o.max_batch_size = max_batch;
    SfHandler *h = sf_handler_new(&o);
    standalone = sf_standalone_new();
    ck_assert(standalone != NULL);
    sf_handler_set_source(h, sf_standalone_source(standalone));
    return h;
}

static void free_handler(SfHandler *h)
{
    g_object_unref(h);
    sf_standalone_free(standalone);
    standalone = NULL;
}

static int64_t boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A worker clock that runs a hook on its first read: the hook stands for whatever
 * happens to the node while a request's id is being made (a freeze, a fence). */
typedef struct hooked_clock {
    SfHandler *h;
    void (*hook)(struct hooked_clock *c);
    bool fired;
    int64_t offset_ms;    /* added to the real clock after the first read */
    int64_t slept_ms;     /* what the worker asked to sleep, in all */
    sf_worker *replacement;
} hooked_clock;

static int64_t hooked_clock_read(void *ctx)
{
    hooked_clock *c = ctx;
    if (!c->fired && c->hook != NULL) {
        c->fired = true;
        c->hook(c);
    }
    return sf_clock_now_ms() + c->offset_ms;
}

static void hooked_clock_sleep(void *ctx, int64_t ms)
{
    hooked_clock *c = ctx;
    c->slept_ms += ms;
    c->offset_ms += ms;
}

static sf_worker *new_worker(int64_t worker_id, int64_t max_wait_ms, hooked_clock *clock)
{
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.worker_id = worker_id;
    o.max_clock_backward_wait_ms = max_wait_ms;
    if (clock != NULL) {
        o.clock = hooked_clock_read;
        o.sleep = hooked_clock_sleep;
        o.clock_ctx = clock;
    }
    sf_worker *w = sf_worker_new(&o, &err);
    ck_assert_msg(w != NULL, "%s", err.message);
    return w;
}

/* Calls get_id; returns TRUE with *id, or FALSE with *unavailable said or not. */
static gboolean call_get_id(SfHandler *h, int64_t *id, gboolean *unavailable)
{
    SfThriftInvalidSystemClock *clock_error = NULL;
    SfThriftInvalidUserAgentError *agent_error = NULL;
    SfThriftServiceUnavailable *unavail = NULL;
    GError *error = NULL;
    gint64 out = -1;
    gboolean ok = sf_thrift_snowflake_if_get_id(SF_THRIFT_SNOWFLAKE_IF(h), &out, "test",
                                                &clock_error, &agent_error, &unavail, &error);
    *id = out;
    *unavailable = unavail != NULL;
    if (clock_error != NULL)
        g_object_unref(clock_error);
    if (agent_error != NULL)
        g_object_unref(agent_error);
    if (unavail != NULL)
        g_object_unref(unavail);
    if (error != NULL)
        g_error_free(error);
    return ok;
}

static void expire_lease(hooked_clock *c)
{
    (void)c; /* the lease is the test's standalone's */
    sf_standalone_renew(standalone, boot_ms() - 1, 0);
}

START_TEST(lease_lapsing_while_the_id_is_made_refuses_it)
{
    /* The request passed the check, then the node froze past its lease: the id made
     * afterwards may collide with the next holder's, so it is never handed out. */
    hooked_clock clock = { .hook = expire_lease };
    SfHandler *h = new_handler(10);
    clock.h = h;
    sf_standalone_publish(standalone, new_worker(3, 0, &clock), TRUE, boot_ms() + 60000, 0, NULL);
    int64_t id;
    gboolean unavailable;
    ck_assert_msg(!call_get_id(h, &id, &unavailable), "id %" G_GINT64_FORMAT
                  " handed out after the lease ran out", (gint64)id);
    ck_assert(unavailable);
    free_handler(h);
}
END_TEST

static void replace_worker(hooked_clock *c)
{
    sf_handler_close(c->h, "fenced");
    sf_standalone_publish(standalone, c->replacement, TRUE, 0, 0, NULL);
}

START_TEST(worker_replaced_while_the_id_is_made_refuses_it)
{
    /* The node was fenced and claimed another worker id while a request was making an
     * id with the old one: that id belongs to a worker id another node may now hold. */
    hooked_clock clock = { .hook = replace_worker };
    SfHandler *h = new_handler(10);
    clock.h = h;
    clock.replacement = new_worker(9, 0, NULL);
    sf_standalone_publish(standalone, new_worker(3, 0, &clock), TRUE, 0, 0, NULL);
    int64_t id;
    gboolean unavailable;
    gboolean ok = call_get_id(h, &id, &unavailable);
    ck_assert_msg(!ok, "id %" G_GINT64_FORMAT " of worker %" G_GINT64_FORMAT
                  " handed out after worker 9 replaced it", (gint64)id,
                  (gint64)((id >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID));
    ck_assert(unavailable);
    ck_assert(call_get_id(h, &id, &unavailable));
    ck_assert_int_eq((id >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID, 9);
    free_handler(h);
}
END_TEST

static void step_clock_back(hooked_clock *c)
{
    c->offset_ms = -5000;
}

START_TEST(backward_wait_never_outlasts_the_lease)
{
    /* A 5 s backward step may be waited out (max 60 s), but the lease ends in 300 ms:
     * waiting longer only makes an id that must be refused, with the lock held. */
    hooked_clock clock = { 0 };
    SfHandler *h = new_handler(10);
    clock.h = h;
    sf_worker *w = new_worker(3, 60000, &clock);
    sf_standalone_publish(standalone, w, TRUE, boot_ms() + 300, 0, NULL);
    int64_t id;
    gboolean unavailable;
    ck_assert(call_get_id(h, &id, &unavailable));
    clock.hook = step_clock_back;
    gboolean ok = call_get_id(h, &id, &unavailable);
    ck_assert_msg(clock.slept_ms <= 300, "waited %" G_GINT64_FORMAT " ms for the clock, past "
                  "a lease that ended in 300 ms", (gint64)clock.slept_ms);
    ck_assert(!ok);
    free_handler(h);
}
END_TEST

START_TEST(lease_runs_on_the_boot_clock)
{
    /* The lease is kept on CLOCK_BOOTTIME, which goes on counting while the machine
     * is suspended (CLOCK_MONOTONIC stops): a lease that ended a second ago on the boot
     * clock is over, whatever the monotonic clock says. test_handler_timens.sh runs
     * this in a time namespace where the two clocks are 100 s apart. */
    SfHandler *h = new_handler(10);
    sf_standalone_publish(standalone, new_worker(3, 0, NULL), TRUE, boot_ms() - 1000, 0, NULL);
    int64_t id;
    gboolean unavailable;
    ck_assert_msg(!call_get_id(h, &id, &unavailable), "id handed out on a lease that ended "
                  "1 s ago on the boot clock");
    ck_assert(unavailable);
    ck_assert(!sf_handler_is_serving(h, NULL));
    free_handler(h);
}
END_TEST

/* A hook that steps the worker's clock a minute ahead, as a wall clock set forward while
 * the node holds its lease. */
static void step_clock_ahead(hooked_clock *c)
{
    c->offset_ms += 60000;
}

START_TEST(ids_past_the_reservation_are_refused)
{
    /* The reservation recorded in ZooKeeper is the last timestamp a successor leaves to us:
     * an id made after the wall clock jumped past it is discarded, lease or not; within
     * it, ids flow. */
    hooked_clock clock = { 0 };
    SfHandler *h = new_handler(10);
    clock.h = h;
    sf_standalone_publish(standalone, new_worker(3, 0, &clock), TRUE, boot_ms() + 60000,
                       sf_clock_now_ms() + 5000, NULL);
    int64_t id;
    gboolean unavailable;
    ck_assert(call_get_id(h, &id, &unavailable));
    clock.fired = false;
    clock.hook = step_clock_ahead;
    ck_assert_msg(!call_get_id(h, &id, &unavailable), "an id at %" G_GINT64_FORMAT " handed out "
                  "past the reservation", (gint64)((id >> SF_TIMESTAMP_SHIFT) + SF_TWITTER_EPOCH_MS));
    ck_assert(unavailable);
    sf_handler_stats st;
    sf_handler_get_stats(h, &st);
    ck_assert_uint_eq(st.ids_discarded, 1);
    sf_standalone_renew(standalone, boot_ms() + 60000, sf_clock_now_ms() + 120000);
    ck_assert(call_get_id(h, &id, &unavailable));
    free_handler(h);
}
END_TEST

/* Adds every method's call count to ctx's. */
static void sum_counts(const char *method, const sf_latency_snapshot *timing, void *ctx)
{
    (void)method;
    ((sf_latency_snapshot *)ctx)->count += timing->count;
}

/* Without a source, ids are refused: "starting" until one is given; once it is taken away
 * (a daemon stopping its registration), "stopping". Health says the same, with no session. */
START_TEST(no_source_refuses_starting_then_stopping)
{
    sf_handler_options o;
    sf_handler_options_init(&o);
    SfHandler *h = sf_handler_new(&o);
    int64_t id;
    gboolean unavailable;
    char *reason = NULL;
    sfz_health health;
    ck_assert(!call_get_id(h, &id, &unavailable));
    ck_assert(unavailable);
    ck_assert(!sf_handler_is_serving(h, &reason));
    ck_assert_msg(strstr(reason, "starting") != NULL, "%s", reason);
    g_free(reason);
    ck_assert(!sf_handler_get_health(h, &health));
    ck_assert_int_eq(health.reason, SFZ_REASON_STARTING);
    ck_assert_int_eq(sf_handler_call_get_worker_id(h), -1);

    sf_standalone *s = sf_standalone_new_serving(new_worker(7, 0, NULL));
    ck_assert_ptr_nonnull(s);
    sf_handler_set_source(h, sf_standalone_source(s));
    ck_assert(call_get_id(h, &id, &unavailable));
    ck_assert_int_eq(sf_handler_call_get_worker_id(h), 7);
    ck_assert(sf_handler_get_health(h, &health) == FALSE && health.reason == SFZ_REASON_NONE);

    sf_handler_set_source(h, NULL);
    ck_assert(!call_get_id(h, &id, &unavailable));
    ck_assert(unavailable);
    ck_assert(!sf_handler_is_serving(h, &reason));
    ck_assert_str_eq(reason, "stopping");
    g_free(reason);
    ck_assert(!sf_handler_get_health(h, &health));
    ck_assert_int_eq(health.reason, SFZ_REASON_STOPPING);
    g_object_unref(h);
    sf_standalone_free(s);
}
END_TEST

/* The check of a call without the call (an HTTP HEAD): the same refusals and messages the
 * call would meet, in the call's order (agent, count, serving), with nothing made, counted
 * or timed. */
START_TEST(check_call_makes_and_counts_nothing)
{
    sf_handler_options o;
    sf_handler_options_init(&o);
    o.max_batch_size = 10;
    SfHandler *h = sf_handler_new(&o);
    GError *refusal = NULL;
    ck_assert(!sf_handler_check_call(h, "probe", FALSE, 0, &refusal));
    ck_assert(g_error_matches(refusal, SF_HANDLER_ERROR, SF_HANDLER_SERVICE_UNAVAILABLE));
    ck_assert_msg(strstr(refusal->message, "starting") != NULL, "%s", refusal->message);
    g_clear_error(&refusal);
    sf_standalone *s = sf_standalone_new_serving(new_worker(7, 0, NULL));
    ck_assert_ptr_nonnull(s);
    sf_handler_set_source(h, sf_standalone_source(s));
    ck_assert(sf_handler_check_call(h, "probe", FALSE, 0, &refusal));
    ck_assert(sf_handler_check_call(h, "probe", TRUE, 10, &refusal));
    ck_assert_ptr_null(refusal);
    ck_assert(!sf_handler_check_call(h, "1probe", TRUE, 0, &refusal));
    ck_assert(g_error_matches(refusal, SF_HANDLER_ERROR, SF_HANDLER_INVALID_USER_AGENT));
    ck_assert_str_eq(refusal->message, "invalid user agent \"1probe\": it must match "
                                       "[a-zA-Z][a-zA-Z\\-0-9]*");
    g_clear_error(&refusal);
    ck_assert(!sf_handler_check_call(h, "probe", TRUE, 11, &refusal));
    ck_assert(g_error_matches(refusal, SF_HANDLER_ERROR, SF_HANDLER_INVALID_REQUEST));
    ck_assert_str_eq(refusal->message,
                     "count 11 is outside the allowed range 1..10 (max_batch_size)");
    g_clear_error(&refusal);
    sf_handler_stats st;
    sf_handler_get_stats(h, &st);
    ck_assert_uint_eq(st.ids_generated, 0);
    ck_assert_uint_eq(st.exceptions, 0);
    sf_latency_snapshot *timed = g_new0(sf_latency_snapshot, 1);
    sf_handler_foreach_timing(h, sum_counts, timed);
    ck_assert_uint_eq(timed->count, 0);
    g_free(timed);
    int64_t id;
    ck_assert(sf_handler_call_get_id(h, "probe", &id, &refusal));
    sf_handler_get_stats(h, &st);
    ck_assert_uint_eq(st.ids_generated, 1);
    g_object_unref(h);
    sf_standalone_free(s);
}
END_TEST

static Suite *handler_suite(void)
{
    Suite *s = suite_create("handler");
    TCase *fence = tcase_create("fencing");
    tcase_set_timeout(fence, 30);
    tcase_add_test(fence, lease_lapsing_while_the_id_is_made_refuses_it);
    tcase_add_test(fence, worker_replaced_while_the_id_is_made_refuses_it);
    tcase_add_test(fence, backward_wait_never_outlasts_the_lease);
    tcase_add_test(fence, lease_runs_on_the_boot_clock);
    tcase_add_test(fence, ids_past_the_reservation_are_refused);
    tcase_add_test(fence, no_source_refuses_starting_then_stopping);
    tcase_add_test(fence, check_call_makes_and_counts_nothing);
    suite_add_tcase(s, fence);
    return s;
}

int main(void)
{
    sf_thrift_fix_finalize();
    sf_thrift_fix_processor();
    SRunner *sr = srunner_create(handler_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
