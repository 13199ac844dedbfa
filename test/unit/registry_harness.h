/* registry_harness.h -- what the registry's suites share: a plain ZooKeeper client to look at
 * the nodes a registry made, recorders for the registry's callbacks, and a three-server
 * ensemble whose third member can be cut off from the others. */
#ifndef SF_TEST_REGISTRY_HARNESS_H
#define SF_TEST_REGISTRY_HARNESS_H

/* How long a test waits for something that should happen (serving, fenced, a node gone):
 * generous, since the suite also runs on busy build machines, and a wait on an event ends
 * as soon as it comes. How fast the registry reacts is the benchmarks' and chaos run's to
 * measure, not a test's to race. */
#define SF_TEST_PATIENCE_MS 60000

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#include "tcp_proxy.h"
#include "zk_harness.h"

/* A plain client of the server at hosts, connected (fails the test otherwise). */
zhandle_t *sf_test_zk_client(const char *hosts);

/* Reads a node's data into buf as a string; returns the ZooKeeper code. */
int sf_test_zk_get(zhandle_t *zh, const char *path, char *buf, int len, struct Stat *st);

/* The timestamp a state node holds ("reserved N", "released N" or an earlier version's plain
 * N); -1 when the node is missing. */
int64_t sf_test_zk_get_floor(zhandle_t *zh, const char *path);

/* Waits up to ms for path to disappear, as seen by zh. */
bool sf_test_wait_gone(zhandle_t *zh, const char *path, int ms);

void sf_test_sleep_ms(int64_t ms);

/* Orders two int64_t ids, for qsort and bsearch. */
int sf_test_cmp_id(const void *a, const void *b);

/* CLOCK_BOOTTIME ms, the lease's clock, read here independently of the registry. */
int64_t sf_test_boot_ms(void);

/* What on_state reported, as the daemon's gate would see it. */
typedef struct sf_test_state_log {
    pthread_mutex_t mu;
    int serving_reports, fenced_reports;
    bool serving;
    char reason[512]; /* the last reason reported */
} sf_test_state_log;
#define SF_TEST_STATE_LOG_INIT {PTHREAD_MUTEX_INITIALIZER, 0, 0, false, ""}

void sf_test_on_state(void *ctx, bool serving, int64_t worker_id, int64_t floor_ms,
                      int64_t valid_until_boot_ms, int64_t reserved_until_ms, const char *reason);

/* Waits up to ms for the log to reach the given serving state. */
bool sf_test_wait_serving(sf_test_state_log *s, bool want, int ms);

/* Every lease on_lease reported. */
typedef struct sf_test_lease_log {
    pthread_mutex_t mu;
    int renewals;
    int64_t until;           /* the last lease reported */
    int64_t reported_at;     /* when it was reported (CLOCK_BOOTTIME) */
    int64_t longest;         /* the longest until - reported_at seen */
    int renewals_at_serving; /* renewals before the first serving report */
    bool serving;
    int64_t serving_until;   /* the lease the first serving report carried */
    int64_t serving_at;      /* when it came */
    int64_t wall_until;      /* the highest lease end seen, on the wall clock (Unix ms) */
    int64_t reserved_until;  /* the highest reservation reported (Unix ms) */
} sf_test_lease_log;
#define SF_TEST_LEASE_LOG_INIT {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, -1, false, 0, 0, 0, 0}

void sf_test_on_lease(void *ctx, int64_t valid_until_boot_ms, int64_t reserved_until_ms);

/* An on_state for a lease log: notes how many leases came before the gate would open. */
void sf_test_on_state_lease(void *ctx, bool serving, int64_t worker_id, int64_t floor_ms,
                            int64_t valid_until_boot_ms, int64_t reserved_until_ms,
                            const char *reason);

/* A copy of the log taken under its lock. */
sf_test_lease_log sf_test_lease_snapshot(sf_test_lease_log *l);

/* Counts the registry's warnings and errors that contain needle (and prints every message). */
typedef struct sf_test_message_log {
    pthread_mutex_t mu;
    const char *needle;
    int matching;
} sf_test_message_log;

void sf_test_count_messages(void *ctx, const char *level, const char *message);

/* How long a member may take to take its role (leader, follower): two JVMs starting and
 * electing on a loaded build machine took over 30 s. */
#define SF_TEST_ENSEMBLE_WAIT_MS 90000

/* A three-server ensemble whose third member reaches the other two only through proxies,
 * so a test can cut that member off from the leader while its clients still reach it. */
typedef struct sf_test_ensemble {
    sf_test_zk zk[3];
    sf_test_proxy *px[4]; /* member 3's links: quorum 1, election 1, quorum 2, election 2 */
    char member3_hosts[64];
    char quorum_hosts[64];
} sf_test_ensemble;

/* Starts members 1 and 2 (2 leads), then member 3 as a follower; extra_cfg (or NULL) is
 * added to every member's settings (e.g. "tickTime=500\n"). syncLimit x tickTime is long
 * (25 ticks): a cut-off follower goes on answering reads well past the moment the leader
 * expires a session. False (after printing why) when it did not form. */
bool sf_test_ensemble_start(sf_test_ensemble *e, const char *extra_cfg);

/* Cuts member 3 off from 1 and 2 (its sockets stay open, nothing passes). */
void sf_test_ensemble_cut_member3(sf_test_ensemble *e);

/* Lets member 3 reach the others again and waits until it follows the leader; false (after
 * printing why) when it does not within 30 s. */
bool sf_test_ensemble_mend_member3(sf_test_ensemble *e);

/* Stops every member and proxy; safe on a half-started ensemble. */
void sf_test_ensemble_destroy(sf_test_ensemble *e);

/* A registry suite's main: starts *zk (one standalone server for the suite; the JVM takes a
 * second to start) in a temporary directory under which every server the tests start lives,
 * runs the suite, and stops every server there, also those of a test killed by its timeout.
 * Returns the exit status. */
int sf_test_registry_main(const char *name, Suite *suite, sf_test_zk *zk);

#endif /* SF_TEST_REGISTRY_HARNESS_H */
