/* check_fencing.c -- the registry's promise under the faults that test it hardest, against
 * real ZooKeeper servers: a pause shorter than the session timeout followed by the failure of
 * the follower a holder talks to; a takeover by a node whose clock is behind; a last record
 * that could not be written; lock nodes that outlive their claim; a floor left far ahead by
 * a clock that ran ahead; a session timeout renegotiated on reconnecting. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME, prctl */
#include <check.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zk/registry.h"
#include "registry_harness.h"
#include "lib/snowflake.h"

static sf_test_zk zk; /* one standalone server for the tests that need no ensemble */

/* Registry options for one test on its own path. */
static void test_options(sf_registry_options *o, const char *hosts, const char *path,
                         int64_t worker_id, int session_timeout_ms)
{
    sf_registry_options_init(o);
    o->hosts = hosts;
    o->session_timeout_ms = session_timeout_ms;
    o->worker_id_path = path;
    o->worker_id = worker_id;
    o->host_port = "127.0.0.1:7609";
    o->skip_sanity_checks = true;
    o->claim_retries = 0;
}

/* One lease report of a registry running in a child process. */
typedef struct lease_event {
    int64_t until;       /* CLOCK_BOOTTIME ms */
    int64_t reported_at; /* CLOCK_BOOTTIME ms */
} lease_event;

/* The child's on_lease: one record down the pipe; a closed pipe ends the child. */
static void child_on_lease(void *ctx, int64_t valid_until_boot_ms, int64_t reserved_until_ms)
{
    (void)reserved_until_ms;
    int fd = *(int *)ctx;
    lease_event ev = {valid_until_boot_ms, sf_test_boot_ms()};
    if (write(fd, &ev, sizeof ev) != (ssize_t)sizeof ev)
        _exit(0);
}

/* Starts a process that claims worker_id under path through hosts and reports every lease
 * down a pipe, whose reading end goes to *fd. It dies with the test (PR_SET_PDEATHSIG), so
 * a failing assertion cannot leave it behind. */
static pid_t lease_child_start(const char *hosts, const char *path, int64_t worker_id,
                               int session_timeout_ms, int *fd)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[0]);
        sf_registry_options o;
        char err[SF_REGISTRY_ERR_MAX];
        int64_t id, floor;
        test_options(&o, hosts, path, worker_id, session_timeout_ms);
        o.on_lease = child_on_lease;
        o.lease_ctx = &p[1];
        sf_registry *r = sf_registry_new(&o, err, sizeof err);
        if (!r || sf_registry_claim(r, &id, &floor, err, sizeof err) != 0 ||
            sf_registry_watch(r, err, sizeof err) != 0) {
            fprintf(stderr, "lease child: %s\n", err);
            _exit(3);
        }
        for (;;)
            pause();
    }
    close(p[1]);
    *fd = p[0];
    return pid;
}

/* Reads the next lease event within ms; false when none came. */
static bool lease_child_next(int fd, int ms, lease_event *ev)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, ms) != 1)
        return false;
    return read(fd, ev, sizeof *ev) == (ssize_t)sizeof *ev;
}

/* What one pause scenario saw (CLOCK_BOOTTIME ms). */
typedef struct pause_outcome {
    bool served, gone;
    int64_t longest_until, woke_at, gone_at;
} pause_outcome;

/* Node A holds worker_id through follower F (member 3) and is paused for pause_ms, less than
 * its ZooKeeper client notices (SIGSTOP: in life a stall, swapping, a live migration). On
 * waking it renews through F, and right after its first lease report F is cut off from the
 * leader, so the leader never hears of A's activity after the pause and expires A's session
 * about one session timeout after A's last activity before it. */
static pause_outcome pause_scenario(sf_test_ensemble *e, zhandle_t *leader, const char *path,
                                    int64_t worker_id, int session_ms, int pause_ms)
{
    char node[64];
    snprintf(node, sizeof node, "%s/%" PRId64, path, worker_id);
    pause_outcome out = {false, false, 0, 0, 0};
    int fd = -1;
    pid_t child = lease_child_start(e->member3_hosts, path, worker_id, session_ms, &fd);
    lease_event ev;
    out.served = lease_child_next(fd, SF_TEST_PATIENCE_MS, &ev);
    if (out.served) {
        out.longest_until = ev.until;
        for (int64_t end = sf_test_boot_ms() + 1000; sf_test_boot_ms() < end;)
            if (lease_child_next(fd, 100, &ev) && ev.until > out.longest_until)
                out.longest_until = ev.until;
        /* Paused right after a renewal: the leader heard of that one. */
        out.served = lease_child_next(fd, SF_TEST_PATIENCE_MS, &ev);
        kill(child, SIGSTOP);
        if (ev.until > out.longest_until)
            out.longest_until = ev.until;
        sf_test_sleep_ms(pause_ms);
        kill(child, SIGCONT);
        out.woke_at = sf_test_boot_ms();
        bool renewed = lease_child_next(fd, 1500, &ev);
        sf_test_ensemble_cut_member3(e);
        if (renewed && ev.until > out.longest_until)
            out.longest_until = ev.until;
        out.gone = sf_test_wait_gone(leader, node, SF_TEST_PATIENCE_MS);
        out.gone_at = sf_test_boot_ms();
        while (lease_child_next(fd, 500, &ev))
            if (ev.until > out.longest_until)
                out.longest_until = ev.until;
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(fd);
    if (out.gone_at - out.woke_at >= session_ms)
        fprintf(stderr, "pause_then_follower_fails: %d ms pause: the leader heard of the "
                "holder after it (expired %" PRId64 " ms after waking): this one proves less\n",
                pause_ms, out.gone_at - out.woke_at);
    return out;
}

/* No lease outlives the moment the leader may expire the session, whether the pause left
 * the lease running (2400 ms: the renewal at waking must not extend it past the expiry) or
 * let it run out (3700 ms, longer than the old rule's margin of T/3). A tick of 1 s: the
 * follower reports its sessions' activity every 500 ms, so the cut comes before it reports
 * what happened at waking. */
START_TEST(pause_then_follower_fails)
{
    enum { SESSION_MS = 6000 };
    static const int pauses_ms[] = {2400, 3700};
    sf_test_ensemble e;
    bool started = sf_test_ensemble_start(&e, "tickTime=1000\n");
    if (!started)
        sf_test_ensemble_destroy(&e);
    ck_assert_msg(started, "the ensemble did not start");
    zhandle_t *zh = sf_test_zk_client(e.quorum_hosts); /* on the leader */
    pause_outcome seen[2];
    bool mended = true;
    for (int i = 0; i < 2 && mended; i++) {
        seen[i] = pause_scenario(&e, zh, "/t-pause", 8 + i, SESSION_MS, pauses_ms[i]);
        mended = i == 1 || sf_test_ensemble_mend_member3(&e);
    }
    zookeeper_close(zh);
    sf_test_ensemble_destroy(&e);
    ck_assert_msg(mended, "member 3 did not follow the leader again after the first cut");
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(seen[i].served, "%d ms pause: the holder did not serve", pauses_ms[i]);
        ck_assert_msg(seen[i].gone, "%d ms pause: the leader did not expire the paused "
                      "holder's session", pauses_ms[i]);
        ck_assert_msg(seen[i].longest_until < seen[i].gone_at, "%d ms pause: a lease until %"
                      PRId64 " ms (CLOCK_BOOTTIME), %" PRId64 " ms past the moment the leader "
                      "expired the session and another node could claim the id (woke %" PRId64
                      " ms before that)", pauses_ms[i], seen[i].longest_until,
                      seen[i].longest_until - seen[i].gone_at, seen[i].gone_at - seen[i].woke_at);
    }
}
END_TEST

typedef struct claim_job {
    sf_registry *r;
    int rc;
    int64_t id, floor;
    char err[SF_REGISTRY_ERR_MAX];
    atomic_bool done; /* the claim returned */
} claim_job;

/* Claims in a thread of its own. */
static void *claim_thread(void *arg)
{
    claim_job *job = arg;
    job->rc = sf_registry_claim(job->r, &job->id, &job->floor, job->err, sizeof job->err);
    atomic_store(&job->done, true);
    return NULL;
}

/* A registry made from o that claims its id and serves (state records its reports);
 * fails the test otherwise. */
static sf_registry *serving_holder(sf_registry_options *o, sf_test_state_log *state)
{
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    o->on_state = sf_test_on_state;
    o->state_ctx = state;
    sf_registry *r = sf_registry_new(o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_msg(sf_registry_claim(r, &id, &floor, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(sf_registry_watch(r, err, sizeof err), 0);
    ck_assert(sf_test_wait_serving(state, true, SF_TEST_PATIENCE_MS));
    return r;
}

/* Holder A is cut off from ZooKeeper (its clients still reach it); B waits for A's id and
 * takes it when A's session expires. B must not hand out an id at or below any timestamp
 * A could still use under the lease it held, whatever B's clock says: the floor B waits
 * for covers the wall-clock end of A's last lease. */
START_TEST(takeover_floor_covers_old_lease)
{
    sf_registry_options o;
    char hosts[64];
    sf_test_state_log state = SF_TEST_STATE_LOG_INIT;
    sf_test_lease_log lease = SF_TEST_LEASE_LOG_INIT;
    int zk_port = atoi(strchr(zk.hosts, ':') + 1);
    sf_test_proxy *px = sf_test_proxy_start(zk_port);
    ck_assert_ptr_nonnull(px);
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", sf_test_proxy_port(px));
    test_options(&o, hosts, "/t-takeover", 6, 2000);
    o.on_lease = sf_test_on_lease;
    o.lease_ctx = &lease;
    sf_registry *a = serving_holder(&o, &state);
    test_options(&o, zk.hosts, "/t-takeover", 6, 2000);
    /* Tries for as long as the suite's patience (the most retries allowed, each after a
     * wait): a loaded ZooKeeper may take seconds more than the session timeout to expire
     * A's session. */
    o.claim_retries = 100;
    o.claim_retry_wait_ms = SF_TEST_PATIENCE_MS / o.claim_retries;
    claim_job job = {.r = sf_registry_new(&o, job.err, sizeof job.err)};
    ck_assert_msg(job.r != NULL, "%s", job.err);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, claim_thread, &job), 0);
    sf_test_sleep_ms(600);
    sf_test_proxy_set_mode(px, SF_PROXY_BLACKHOLE);
    pthread_join(t, NULL);
    sf_test_lease_log held = sf_test_lease_snapshot(&lease);
    sf_registry_close(job.r);
    sf_registry_close(a);
    sf_test_proxy_stop(px);
    ck_assert_msg(job.rc == 0, "the waiting node did not take the id: %s", job.err);
    /* The two wall-clock readings behind wall_until are a millisecond or two apart. */
    ck_assert_msg(job.floor + 2 >= held.wall_until, "the new holder may hand out ids from %"
                  PRId64 ", but the old holder's lease let it use timestamps up to %" PRId64
                  " (%" PRId64 " ms more): a clock that far behind repeats them",
                  job.floor + 1, held.wall_until, held.wall_until - job.floor);
}
END_TEST

static _Atomic int64_t fake_last_ts = -1;

/* The holder's "last id handed out", set by the test. */
static int64_t fake_last_timestamp(void *ctx)
{
    (void)ctx;
    return fake_last_ts;
}

/* Makes a node read-only for everyone (nobody may write it any more). */
static void make_read_only(zhandle_t *zh, const char *path)
{
    struct ACL read_only[] = {{ZOO_PERM_READ, {(char *)"world", (char *)"anyone"}}};
    struct ACL_vector acl = {1, read_only};
    ck_assert_int_eq(zoo_set_acl(zh, path, -1, &acl), ZOK);
}

/* The holder stops cleanly but cannot write its last record: it must not count as a clean
 * release with an exact timestamp, so the next holder waits as after a crash. */
START_TEST(failed_final_record_is_no_clean_release)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    sf_test_state_log state = SF_TEST_STATE_LOG_INIT;
    test_options(&o, zk.hosts, "/t-final", 4, 2000);
    o.last_timestamp = fake_last_timestamp;
    sf_registry *a = serving_holder(&o, &state);
    sf_test_sleep_ms(500); /* a few renewals */
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    make_read_only(zh, "/t-final-state/4");
    fake_last_ts = sf_clock_now_ms(); /* an id handed out after the last record landed */
    sf_test_sleep_ms(50);
    sf_registry_close(a); /* its last record is refused */
    test_options(&o, zk.hosts, "/t-final", 4, 2000);
    sf_registry *b = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    int rc = sf_registry_claim(b, &id, &floor, err, sizeof err);
    sf_registry_close(b);
    zookeeper_close(zh);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(floor >= fake_last_ts, "the next holder may hand out ids from %" PRId64
                  ", at or below the last one the former holder handed out (%" PRId64 ")",
                  floor + 1, (int64_t)fake_last_ts);
}
END_TEST

/* A clean stop records the exact last timestamp: the next holder starts right after it,
 * without waiting out a reservation. */
START_TEST(clean_release_records_exact_timestamp)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    sf_test_state_log state = SF_TEST_STATE_LOG_INIT;
    test_options(&o, zk.hosts, "/t-clean", 4, 2000);
    o.last_timestamp = fake_last_timestamp;
    sf_registry *a = serving_holder(&o, &state);
    sf_test_sleep_ms(300);
    int64_t last = sf_clock_now_ms() - 100;
    fake_last_ts = last;
    sf_registry_close(a);
    /* Told by the registry itself whether it waited for the clock, not by a stopwatch. */
    sf_test_message_log waits = {PTHREAD_MUTEX_INITIALIZER, "for the clock to pass the floor", 0};
    o.log = sf_test_count_messages;
    o.log_ctx = &waits;
    sf_registry *b = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    int rc = sf_registry_claim(b, &id, &floor, err, sizeof err);
    sf_registry_close(b);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(floor == last, "floor %" PRId64 " after a clean release at %" PRId64, floor,
                  last);
    ck_assert_msg(waits.matching == 0, "the claim after a clean release waited for the clock");
}
END_TEST

/* Creates path with an ACL that lets everyone create children but delete none. */
static void create_no_delete(zhandle_t *zh, const char *path)
{
    struct ACL no_delete[] = {{ZOO_PERM_READ | ZOO_PERM_WRITE | ZOO_PERM_CREATE | ZOO_PERM_ADMIN,
                               {(char *)"world", (char *)"anyone"}}};
    struct ACL_vector acl = {1, no_delete};
    ck_assert_int_eq(zoo_create(zh, path, NULL, -1, &acl, 0, NULL, 0), ZOK);
}

static int count_children(zhandle_t *zh, const char *path)
{
    struct String_vector kids = {0, NULL};
    ck_assert_int_eq(zoo_get_children(zh, path, 0, &kids), ZOK);
    int n = kids.count;
    deallocate_String_vector(&kids);
    return n;
}

/* An automatic claim whose lock node could not be deleted (here: no delete permission,
 * given back a moment later; in life a connection lost at that moment) must not leave
 * every later automatic claim that finds ids scarce (here: one left) queued behind it for
 * as long as its session serves. */
START_TEST(orphaned_lock_node_is_deleted_later)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    sf_test_state_log state = SF_TEST_STATE_LOG_INIT;
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    create_no_delete(zh, "/t-orphan-locks");
    test_options(&o, zk.hosts, "/t-orphan", -1, 2000);
    o.on_state = sf_test_on_state;
    o.state_ctx = &state;
    sf_registry *a = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    ck_assert_msg(sf_registry_claim(a, &id, &floor, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(sf_registry_watch(a, err, sizeof err), 0);
    ck_assert_int_eq(id, 0);
    ck_assert_int_eq(count_children(zh, "/t-orphan-locks"), 1); /* the orphan */
    for (int i = 2; i < SF_REGISTRY_MAX_WORKERS; i++) {
        char node[64];
        snprintf(node, sizeof node, "/t-orphan/%d", i);
        ck_assert_int_eq(zoo_create(zh, node, "elsewhere:1", 11, &ZOO_OPEN_ACL_UNSAFE,
                                    ZOO_EPHEMERAL, NULL, 0), ZOK);
    }
    test_options(&o, zk.hosts, "/t-orphan", -1, 2000);
    claim_job job = {.r = sf_registry_new(&o, job.err, sizeof job.err)};
    ck_assert_msg(job.r != NULL, "%s", job.err);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, claim_thread, &job), 0);
    sf_test_sleep_ms(300);
    ck_assert_int_eq(zoo_set_acl(zh, "/t-orphan-locks", -1, &ZOO_OPEN_ACL_UNSAFE), ZOK);
    /* The claim ends once the orphan is deleted on a retry (every second) and the id's floor
     * is read: waited for, as a loaded machine may need; cancelled only past that. */
    for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;
         sf_test_boot_ms() < end && !atomic_load(&job.done);)
        sf_test_sleep_ms(50);
    sf_registry_cancel(job.r);
    pthread_join(t, NULL);
    sf_registry_close(job.r);
    sf_registry_close(a);
    zookeeper_close(zh);
    ck_assert_msg(job.rc == 0 && job.id == 1, "the second automatic claim did not get id 1 "
                  "within %d s of the lock node becoming deletable: %s",
                  SF_TEST_PATIENCE_MS / 1000, job.err);
}
END_TEST

/* A holder whose own lock node is orphaned (it cannot delete it) and that then loses its
 * worker node must claim again, not queue behind its own old lock node for good. */
START_TEST(own_lock_node_does_not_block_claiming_again)
{
    sf_registry_options o;
    sf_test_state_log state = SF_TEST_STATE_LOG_INIT;
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    create_no_delete(zh, "/t-ownlock-locks");
    test_options(&o, zk.hosts, "/t-ownlock", -1, 2000);
    sf_registry *a = serving_holder(&o, &state);
    ck_assert_int_eq(zoo_delete(zh, "/t-ownlock/0", -1), ZOK);
    bool fenced = sf_test_wait_serving(&state, false, SF_TEST_PATIENCE_MS);
    bool back = fenced && sf_test_wait_serving(&state, true, SF_TEST_PATIENCE_MS);
    sf_registry_close(a);
    zookeeper_close(zh);
    ck_assert_msg(fenced, "still serving after losing the worker node");
    ck_assert_msg(back, "not serving again after losing the worker node: the claim waits "
                  "behind our own lock node (last reason: %s)", state.reason);
}
END_TEST

/* Writes a recorded timestamp for worker id under path-state, as an earlier version did. */
static void record_plain_floor(zhandle_t *zh, const char *path, int64_t id, int64_t ts)
{
    char node[256], data[32];
    snprintf(node, sizeof node, "%s-state", path);
    zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    zoo_create(zh, node, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    snprintf(node, sizeof node, "%s-state/%" PRId64, path, id);
    snprintf(data, sizeof data, "%" PRId64, ts);
    ck_assert_int_eq(zoo_create(zh, node, data, (int)strlen(data), &ZOO_OPEN_ACL_UNSAFE, 0,
                                NULL, 0), ZOK);
}

/* A holder whose clock once ran a day ahead left a floor a day ahead: an automatic claim
 * skips that id (saying so) instead of taking it and failing again and again; a static
 * claim of it names the tool that resets a floor. */
START_TEST(poisoned_floor_is_skipped)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX], static_err[SF_REGISTRY_ERR_MAX] = "";
    int64_t auto_id = -1, static_id = -1, floor;
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    record_plain_floor(zh, "/t-poison", 0, sf_clock_now_ms() + 86400000LL);
    sf_test_message_log msgs = {PTHREAD_MUTEX_INITIALIZER, "worker id 0", 0};
    test_options(&o, zk.hosts, "/t-poison", -1, 2000);
    o.log = sf_test_count_messages;
    o.log_ctx = &msgs;
    sf_registry *a = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    int auto_rc = sf_registry_claim(a, &auto_id, &floor, err, sizeof err);
    sf_registry_close(a);
    test_options(&o, zk.hosts, "/t-poison", 0, 2000);
    sf_registry *b = sf_registry_new(&o, static_err, sizeof static_err);
    ck_assert_msg(b != NULL, "%s", static_err);
    int static_rc = sf_registry_claim(b, &static_id, &floor, static_err, sizeof static_err);
    sf_registry_close(b);
    zookeeper_close(zh);
    ck_assert_msg(auto_rc == 0 && auto_id == 1, "the automatic claim did not skip id 0 for "
                  "id 1: %s", err);
    ck_assert_msg(msgs.matching >= 1, "no warning named the skipped worker id 0");
    ck_assert_int_eq(static_rc, -1);
    ck_assert_msg(strstr(static_err, "snowflake-zk reset-floor"), "the static claim's error "
                  "names no way out: %s", static_err);
}
END_TEST

/* The session timeout ZooKeeper grants is negotiated again on every reconnection (a server
 * with another maxSessionTimeout grants another): the lease, the renewals and the grace
 * follow the value granted now, not the one granted at the start. */
START_TEST(renegotiated_session_timeout_is_followed)
{
    sf_test_zk own;
    ck_assert_int_eq(sf_test_zk_start(&own), 0);
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    sf_test_state_log state = SF_TEST_STATE_LOG_INIT;
    sf_test_lease_log lease = SF_TEST_LEASE_LOG_INIT;
    test_options(&o, own.hosts, "/t-renegotiate", 3, 6000);
    o.on_state = sf_test_on_state;
    o.state_ctx = &state;
    o.on_lease = sf_test_on_lease;
    o.lease_ctx = &lease;
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    bool ok = r && sf_registry_claim(r, &id, &floor, err, sizeof err) == 0 &&
              sf_registry_watch(r, err, sizeof err) == 0;
    int before = ok ? sf_registry_session_timeout_ms(r) : -1, after = -1;
    int64_t longest_after = -1;
    if (ok) {
        ok = sf_test_zk_stop(&own) == 0 &&
             sf_test_zk_set_extra_cfg(&own, "maxSessionTimeout=2000\n") == 0 &&
             sf_test_zk_restart(&own) == 0;
        for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;
             ok && sf_test_boot_ms() < end && (after = sf_registry_session_timeout_ms(r)) != 2000;)
            sf_test_sleep_ms(100);
        /* The leases granted from now on: the first may come late (on a busy machine the
         * holder may be fenced and claim again first), then 2.5 s more of them. */
        pthread_mutex_lock(&lease.mu);
        lease.longest = 0;
        pthread_mutex_unlock(&lease.mu);
        for (int64_t end = sf_test_boot_ms() + SF_TEST_PATIENCE_MS;
             ok && sf_test_boot_ms() < end && sf_test_lease_snapshot(&lease).longest <= 0;)
            sf_test_sleep_ms(50);
        sf_test_sleep_ms(2500);
        longest_after = sf_test_lease_snapshot(&lease).longest;
    }
    sf_registry_close(r);
    sf_test_zk_destroy(&own);
    ck_assert_msg(ok, "%s", err);
    ck_assert_int_eq(before, 6000);
    ck_assert_msg(after == 2000, "the session timeout is still %d ms after the server granted "
                  "2000", after);
    ck_assert_msg(longest_after > 0, "no lease granted within %d s of the renegotiation",
                  SF_TEST_PATIENCE_MS / 1000);
    ck_assert_msg(longest_after <= sf_registry_lease_ms(2000),
                  "a lease of %" PRId64 " ms on a 2000 ms session", longest_after);
}
END_TEST

/* A single standalone server is no ensemble: when it is down, every node fences, and when
 * its disk is lost, every floor. The registry says so at start-up. */
START_TEST(standalone_server_is_warned_about)
{
    sf_registry_options o;
    char err[SF_REGISTRY_ERR_MAX];
    int64_t id, floor;
    sf_test_message_log msgs = {PTHREAD_MUTEX_INITIALIZER, "standalone", 0};
    test_options(&o, zk.hosts, "/t-standalone", 2, 2000);
    o.log = sf_test_count_messages;
    o.log_ctx = &msgs;
    sf_registry *r = sf_registry_new(&o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    int rc = sf_registry_claim(r, &id, &floor, err, sizeof err);
    sf_registry_close(r);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(msgs.matching == 1, "%d warnings about a standalone ZooKeeper", msgs.matching);
}
END_TEST

/* Creates and deletes a node under a path as fast as ZooKeeper answers, so that every
 * children watch on the path fires again and again, until told to stop. */
typedef struct churn {
    const char *path;
    atomic_bool stop;
    long rounds;
} churn;

static void *churn_thread(void *arg)
{
    churn *c = arg;
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    char node[256];
    snprintf(node, sizeof node, "%s/churn", c->path);
    while (!atomic_load(&c->stop)) {
        zoo_create(zh, node, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0);
        zoo_delete(zh, node, -1);
        c->rounds++;
    }
    zookeeper_close(zh);
    return NULL;
}

/* Counts the registry's messages that say a request met a closing handle, quietly. */
typedef struct closing_log {
    pthread_mutex_t mu;
    int count;
    char first[512];
} closing_log;

static void closing_log_message(void *ctx, const char *level, const char *message)
{
    closing_log *l = ctx;
    (void)level;
    if (strstr(message, "cannot count") == NULL && strstr(message, "marshalling") == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    if (l->count++ == 0)
        snprintf(l->first, sizeof l->first, "%s", message);
    pthread_mutex_unlock(&l->mu);
}

/* A registry closes while its children watch keeps firing (another session adds and removes
 * a node under its path all the time): no request may be queued on the handle once its
 * close began, where the client library refuses it ("marshalling error") and leaks it. Two
 * hundred closes, each racing the watch; the sanitizer pass reports any leak. */
START_TEST(close_while_watches_fire)
{
    enum { CLOSES = 200 };
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    zoo_create(zh, "/t-closing", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    zookeeper_close(zh);
    churn c = {.path = "/t-closing"};
    atomic_init(&c.stop, false);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, churn_thread, &c), 0);
    closing_log log = {PTHREAD_MUTEX_INITIALIZER, 0, ""};
    char err[SF_REGISTRY_ERR_MAX] = "";
    int claimed = 0;
    for (int i = 0; i < CLOSES; i++) {
        sf_registry_options o;
        int64_t id, floor;
        /* Each id again only 32 closes later: a session the server ends late holds no
         * node by then. */
        test_options(&o, zk.hosts, "/t-closing", i % 32, 2000);
        o.log = closing_log_message;
        o.log_ctx = &log;
        sf_registry *r = sf_registry_new(&o, err, sizeof err);
        /* ZooKeeper's failure (a request timed out on a loaded machine) is tried again,
         * as snowflaked does: the close is what is tested, not the ensemble's pace. */
        int rc = SF_REGISTRY_ZK_FAILED;
        for (int try = 0; r != NULL && rc == SF_REGISTRY_ZK_FAILED && try < 5; try++)
            rc = sf_registry_claim(r, &id, &floor, err, sizeof err);
        claimed += rc == 0;
        sf_registry_close(r);
    }
    atomic_store(&c.stop, true);
    pthread_join(t, NULL);
    ck_assert_msg(claimed == CLOSES, "%d of %d claims: %s", claimed, CLOSES, err);
    ck_assert_msg(c.rounds > CLOSES, "the watch fired only %ld times", c.rounds);
    ck_assert_msg(log.count == 0, "%d requests met a closing handle, the first: %s", log.count,
                  log.first);
}
END_TEST

static Suite *fencing_suite(void)
{
    Suite *s = suite_create("fencing");
    TCase *tc = tcase_create("standalone");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, takeover_floor_covers_old_lease);
    tcase_add_test(tc, failed_final_record_is_no_clean_release);
    tcase_add_test(tc, clean_release_records_exact_timestamp);
    tcase_add_test(tc, orphaned_lock_node_is_deleted_later);
    tcase_add_test(tc, own_lock_node_does_not_block_claiming_again);
    tcase_add_test(tc, poisoned_floor_is_skipped);
    tcase_add_test(tc, renegotiated_session_timeout_is_followed);
    tcase_add_test(tc, standalone_server_is_warned_about);
    suite_add_tcase(s, tc);
    TCase *closing = tcase_create("closing");
    tcase_set_timeout(closing, 120);
    tcase_add_test(closing, close_while_watches_fire);
    suite_add_tcase(s, closing);
    TCase *ens = tcase_create("ensemble");
    tcase_set_timeout(ens, 90);
    tcase_add_test(ens, pause_then_follower_fails);
    suite_add_tcase(s, ens);
    return s;
}

int main(void)
{
    return sf_test_registry_main("check_fencing", fencing_suite(), &zk);
}
