/* check_gate.c -- libsnowflake-zk's gate against a real ZooKeeper server: every public call
 * that takes no id passes the gate once, and sfz_stop, run while such a call is held inside,
 * frees nothing until the call returned. Linked with the library's code itself, for its
 * hook inside the gate (the id path is held inside by a long batch in check_embedded). */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "embedded_internal.h"
#include "registry_harness.h"

static sf_test_zk zk;

/* What the hook saw, and the hold it puts the first call in. */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static const void *held_handle;
static int entries;   /* the gate passes seen for held_handle */
static bool holding;  /* a call waits in the hook */
static bool released; /* the hook lets calls go on */

/* Inside the gate: counts the pass, and holds the first until the test releases it. */
static void hold_inside(const void *handle)
{
    pthread_mutex_lock(&hold_mu);
    if (handle == held_handle) {
        entries++;
        if (entries == 1) {
            holding = true;
            pthread_cond_broadcast(&hold_cv);
            while (!released)
                pthread_cond_wait(&hold_cv, &hold_mu);
        }
    }
    pthread_mutex_unlock(&hold_mu);
}

/* The public calls that take no id, each made once on a handle. */
typedef enum gated_call {
    CALL_GET_STATE,
    CALL_GET_HEALTH,
    CALL_WORKER_ID,
    CALL_DATACENTER_ID,
    CALL_WORKER_IDS_TAKEN,
    CALL_GET_STATS,
    CALL_GET_RENEWALS,
    CALL_GET_SKEW,
    CALL_STATE_FD,
    CALL_READ_STATE_FD,
    CALL_SHUT,
    CALL_CANCEL,
    CALLS
} gated_call;

static const char *const call_names[CALLS] = {
    "sfz_get_state",  "sfz_get_health",     "sfz_worker_id", "sfz_datacenter_id",
    "sfz_worker_ids_taken", "sfz_get_stats", "sfz_get_renewals", "sfz_get_skew",
    "sfz_state_fd",   "sfz_read_state_fd",  "sfz_shut",      "sfz_cancel",
};

typedef struct job {
    sfz *h;
    gated_call call;
    atomic_bool done;
    int64_t result; /* what the call returned, where it returns something */
} job;

static void *make_call(void *arg)
{
    job *j = arg;
    sfz_state st;
    sfz_health health;
    sf_worker_stats stats;
    sfz_renewals rn;
    sfz_skew skew;
    char path[256];
    switch (j->call) {
    case CALL_GET_STATE:
        sfz_get_state(j->h, &st);
        j->result = st.worker_id;
        break;
    case CALL_GET_HEALTH:
        sfz_get_health(j->h, &health);
        j->result = health.reason;
        break;
    case CALL_WORKER_ID:
        j->result = sfz_worker_id(j->h);
        break;
    case CALL_DATACENTER_ID:
        j->result = sfz_datacenter_id(j->h);
        break;
    case CALL_WORKER_IDS_TAKEN:
        j->result = sfz_worker_ids_taken(j->h, path, sizeof path);
        break;
    case CALL_GET_STATS:
        sfz_get_stats(j->h, &stats);
        j->result = (int64_t)stats.ids_generated;
        break;
    case CALL_GET_RENEWALS:
        sfz_get_renewals(j->h, &rn);
        j->result = rn.session_timeout_ms;
        break;
    case CALL_GET_SKEW:
        sfz_get_skew(j->h, &skew);
        j->result = skew.known;
        break;
    case CALL_STATE_FD:
        j->result = sfz_state_fd(j->h);
        break;
    case CALL_READ_STATE_FD:
        sfz_read_state_fd(j->h);
        break;
    case CALL_SHUT:
        sfz_shut(j->h, "shut by the test");
        break;
    case CALL_CANCEL:
        sfz_cancel(j->h);
        break;
    case CALLS:
        break;
    }
    atomic_store(&j->done, true);
    return NULL;
}

static void *stop_handle(void *arg)
{
    job *j = arg;
    sfz_stop(j->h);
    atomic_store(&j->done, true);
    return NULL;
}

/* For each call: a serving handle, the call made on a thread of its own and held inside the
 * gate, sfz_stop on another; the stop does not return while the call is held (it would free
 * the handle under it), and returns once the call did; the call passed the gate once. */
START_TEST(each_call_passes_once_and_stop_waits_for_it)
{
    for (int c = 0; c < CALLS; c++) {
        sfz_options o;
        sfz_error err;
        sfz *h = NULL;
        sfz_options_init(&o);
        o.zookeeper = zk.hosts;
        o.worker_id_path = "/g-calls";
        o.session_timeout_ms = 10000;
        ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
        pthread_mutex_lock(&hold_mu);
        held_handle = h;
        entries = 0;
        holding = released = false;
        pthread_mutex_unlock(&hold_mu);
        atomic_store(&sfz_gate_inside_hook, hold_inside);
        job call = {.h = h, .call = (gated_call)c}, stop = {.h = h};
        pthread_t tc, ts;
        ck_assert_int_eq(pthread_create(&tc, NULL, make_call, &call), 0);
        bool held = false;
        for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;
             !held && sf_test_boot_ms() < end; sf_test_sleep_ms(5)) {
            pthread_mutex_lock(&hold_mu);
            held = holding;
            pthread_mutex_unlock(&hold_mu);
        }
        ck_assert_msg(held, "%s never passed the gate", call_names[c]);
        ck_assert_int_eq(pthread_create(&ts, NULL, stop_handle, &stop), 0);
        sf_test_sleep_ms(300); /* time to free the handle, were the stop not waiting */
        bool stopped_early = atomic_load(&stop.done);
        pthread_mutex_lock(&hold_mu);
        released = true;
        pthread_cond_broadcast(&hold_cv);
        pthread_mutex_unlock(&hold_mu);
        pthread_join(tc, NULL);
        pthread_join(ts, NULL);
        atomic_store(&sfz_gate_inside_hook, NULL);
        ck_assert_msg(!stopped_early, "sfz_stop returned while %s was inside the handle",
                      call_names[c]);
        ck_assert_msg(entries == 1, "%s passed the gate %d times", call_names[c], entries);
        if (c == CALL_WORKER_ID || c == CALL_GET_STATE)
            ck_assert_msg(call.result == 0, "%s answered %" PRId64 ", not the id held",
                          call_names[c], call.result);
    }
}
END_TEST

static Suite *gate_suite(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("gate");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, each_call_passes_once_and_stop_waits_for_it);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_test_registry_main("check_gate", gate_suite(), &zk);
}
