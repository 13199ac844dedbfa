/* check_fork.c -- libsnowflake-zk across fork(), through its public header only, against a
 * real ZooKeeper server: a child never gets an id under the parent's worker id, whenever
 * it asks (in a pthread_atfork handler registered before the library's too), and what the
 * child does leaves the parent serving with the same pair.
 *
 * Not built with AddressSanitizer: a child forked while another thread holds its
 * allocator's lock inherits the lock held, and hangs. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <spawn.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <snowflake_zk.h>

#include "registry_harness.h"

static sf_test_zk zk;

/* Options of a handle the whole test needs serving: a session a busy machine does not
 * fence. */
static void steady_options(sfz_options *o, const char *path)
{
    sfz_options_init(o);
    o->zookeeper = zk.hosts;
    o->worker_id_path = path;
    o->session_timeout_ms = 10000;
}

static sfz *start_steady(const char *path)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    steady_options(&o, path);
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    return h;
}

/* What the child's fork handler got, where the parent reads it. */
typedef struct early_report {
    int rc;
    int64_t id;
    char message[SFZ_ERROR_MAX];
} early_report;

static sfz *early_handle;
static early_report *early;

/* A program's own child handler, registered before the library's: it runs first in the
 * child, before anything the library does after a fork. */
static void early_child_handler(void)
{
    if (early_handle == NULL || early == NULL)
        return;
    sfz_error err;
    early->rc = sfz_next_id(early_handle, &early->id, &err);
    snprintf(early->message, sizeof early->message, "%s", early->rc == SFZ_OK ? "" : err.message);
}

/* Forks once: the child exits at once (its handler has run); waits for it. */
static void *fork_once(void *unused)
{
    (void)unused;
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    int status;
    return (void *)(intptr_t)(pid > 0 && waitpid(pid, &status, 0) == pid &&
                              WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Child handlers run in the order they were registered, so a program's own runs before the
 * library's: an id asked for there must be refused as for any call in the child. Several
 * forks, from a thread that made ids (the parent serving) and from threads that made none,
 * since a handler that lost a race would give an id only now and then. */
START_TEST(child_handler_registered_first_gets_no_id)
{
    ck_assert_int_eq(pthread_atfork(NULL, NULL, early_child_handler), 0);
    early = mmap(NULL, sizeof *early, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(early != MAP_FAILED);
    early_handle = start_steady("/f-early");
    int64_t id;
    sfz_error err;
    ck_assert_msg(sfz_next_id(early_handle, &id, &err) == SFZ_OK, "%s", err.message);
    int given = 0, forks = 20;
    char first[SFZ_ERROR_MAX + 32] = "";
    for (int i = 0; i < forks; i++) {
        memset(early, 0, sizeof *early);
        early->rc = 1; /* the handler did not run */
        void *forked = NULL;
        if (i % 2 == 0) {
            forked = fork_once(NULL);
        } else {
            pthread_t t;
            ck_assert_int_eq(pthread_create(&t, NULL, fork_once, NULL), 0);
            ck_assert_int_eq(pthread_join(t, &forked), 0);
        }
        ck_assert_msg(forked != NULL, "fork failed, or the child did not exit 0");
        ck_assert_msg(early->rc != 1, "the child handler did not run");
        given += early->rc == SFZ_OK;
        if (i == 0)
            snprintf(first, sizeof first, "rc %d: %s", early->rc, early->message);
    }
    sfz_stop(early_handle);
    early_handle = NULL;
    ck_assert_msg(given == 0, "%d of %d children got an id from the parent's handle in a fork "
                  "handler registered before the library's (first: %s)", given, forks, first);
    ck_assert_msg(strstr(first, "rc -24") != NULL && strstr(first, "is a fork() of it") != NULL,
                  "the refusal does not name the fork: %s", first);
}
END_TEST

/* What a child of a process holding a handle did with it, written where the parent sees it
 * (memory shared across the fork). */
typedef struct fork_report {
    int calls, refused_forked, first_rc;
    char message[SFZ_ERROR_MAX];
    int64_t state_worker_id, worker_id;
    int state_fd, state_serving;
    int stopped;                 /* sfz_stop on the parent's handle returned */
    int own_rc;                  /* its own handle, started after the fork */
    int64_t own_worker_id;
    char own_message[SFZ_ERROR_MAX];
    size_t count;                /* ids handed out, in ids[] */
    int64_t ids[];
} fork_report;

#define FORK_IDS_MAX (1u << 21)
#define FORK_BATCH 64

/* Takes ids from h in batches for ms milliseconds (or until cap), into ids; returns how
 * many; each call's code goes to *calls, *forked (SFZ_ERR_FORKED) and *first_rc. */
static size_t take_ids_for(sfz *h, int64_t ms, int64_t *ids, size_t cap, int *calls,
                           int *forked, int *first_rc, char *first_msg)
{
    size_t n = 0;
    for (int64_t end = sf_test_boot_ms() + ms; sf_test_boot_ms() < end && n + FORK_BATCH <= cap;) {
        sfz_error err;
        int rc = sfz_next_ids(h, ids + n, FORK_BATCH, &err);
        if (*calls == 0) {
            *first_rc = rc;
            if (first_msg != NULL)
                snprintf(first_msg, SFZ_ERROR_MAX, "%s", rc == SFZ_OK ? "" : err.message);
        }
        (*calls)++;
        *forked += rc == SFZ_ERR_FORKED;
        if (rc == SFZ_OK)
            n += FORK_BATCH;
    }
    return n;
}

/* A pre-fork server: a process starts a handle and forks; parent and child both ask it for
 * ids at once. The child shares the parent's worker id, lease and last timestamp, so what
 * it handed out would repeat the parent's ids: every call in the child is refused at once
 * (SFZ_ERR_FORKED, naming the parent), sfz_stop there frees only the child's copy (the
 * parent's session and worker node stay, it keeps serving), and a handle the child starts
 * itself claims another worker id and serves. */
START_TEST(fork_child_is_refused_and_starts_its_own)
{
    sfz_options o;
    sfz_error err;
    sfz *h = NULL;
    steady_options(&o, "/e-fork");
    ck_assert_msg(sfz_start(&o, &h, &err) == SFZ_OK, "%s", err.message);
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    char node[64], data[256];
    struct Stat before, after;
    snprintf(node, sizeof node, "/e-fork/%" PRId64, sfz_worker_id(h));
    ck_assert_int_eq(sf_test_zk_get(zh, node, data, sizeof data, &before), ZOK);
    /* Closed before the fork: a client thread inside getaddrinfo at the fork would leave
     * glibc's lock held in the child, whose own handle then hangs resolving (the handle's
     * own client does not resolve again while connected). */
    zookeeper_close(zh);
    size_t bytes = sizeof(fork_report) + FORK_IDS_MAX * sizeof(int64_t);
    fork_report *rep = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                            -1, 0);
    ck_assert(rep != MAP_FAILED);
    memset(rep, 0, sizeof *rep);
    int done[2];
    ck_assert_int_eq(pipe(done), 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(done[0]);
        rep->count = take_ids_for(h, 300, rep->ids, FORK_IDS_MAX, &rep->calls,
                                  &rep->refused_forked, &rep->first_rc, rep->message);
        sfz_state st;
        sfz_get_state(h, &st);
        rep->state_serving = st.serving;
        rep->state_worker_id = st.worker_id;
        rep->worker_id = sfz_worker_id(h);
        rep->state_fd = sfz_state_fd(h);
        char c = 'r'; /* the report so far is complete: sfz_stop comes next */
        if (write(done[1], &c, 1) != 1)
            _exit(1);
        sfz_stop(h);
        rep->stopped = 1;
        sfz *own = NULL;
        rep->own_rc = sfz_start(&o, &own, &err);
        if (rep->own_rc == SFZ_OK) {
            rep->own_worker_id = sfz_worker_id(own);
            size_t more = 0;
            int calls = 0, forked = 0, first = 0;
            more = take_ids_for(own, 100, rep->ids + rep->count, FORK_IDS_MAX - rep->count,
                                &calls, &forked, &first, NULL);
            rep->count += more;
            sfz_stop(own);
        } else {
            snprintf(rep->own_message, sizeof rep->own_message, "%s", err.message);
        }
        c = 's';
        if (write(done[1], &c, 1) != 1)
            _exit(1);
        _exit(0);
    }
    close(done[1]);
    int64_t *mine = malloc(FORK_IDS_MAX * sizeof *mine);
    ck_assert(mine != NULL);
    int calls = 0, forked = 0, first = 0;
    size_t n = take_ids_for(h, 300, mine, FORK_IDS_MAX, &calls, &forked, &first, NULL);
    char c = 0;
    struct pollfd pfd = {done[0], POLLIN, 0};
    bool reported = poll(&pfd, 1, 60000) == 1 && read(done[0], &c, 1) == 1 && c == 'r';
    bool stopped = reported && poll(&pfd, 1, SF_TEST_PATIENCE_MS) == 1 && read(done[0], &c, 1) == 1 &&
                   c == 's';
    if (!stopped)
        kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(done[0]);
    /* The parent's handle after the child's stop: the same session holds its node, and it
     * serves (within a claim, should a slow renewal have fenced it meanwhile). */
    zh = sf_test_zk_client(zk.hosts);
    int node_rc = sf_test_zk_get(zh, node, data, sizeof data, &after);
    zookeeper_close(zh);
    int64_t next;
    int after_rc = SFZ_ERR_FENCED;
    for (int64_t end = sf_test_boot_ms() + 60000; after_rc != SFZ_OK && sf_test_boot_ms() < end;
         sf_test_sleep_ms(20))
        after_rc = sfz_next_id(h, &next, &err);
    qsort(mine, n, sizeof *mine, sf_test_cmp_id);
    size_t repeated = 0;
    for (size_t i = 0; i < rep->count; i++)
        repeated += bsearch(&rep->ids[i], mine, n, sizeof *mine, sf_test_cmp_id) != NULL;
    char want[96];
    snprintf(want, sizeof want, "this handle was started by pid %ld", (long)parent);
    int64_t parent_worker = sfz_worker_id(h);
    sfz_stop(h);
    free(mine);
    ck_assert_msg(n > 0 && first == SFZ_OK, "the parent got no ids");
    ck_assert_msg(reported, "the child reported nothing within 60 s");
    ck_assert_msg(repeated == 0, "%zu of the child's %zu ids repeat the parent's (%zu ids)",
                  repeated, rep->count, n);
    ck_assert_msg(rep->refused_forked == rep->calls && rep->first_rc == SFZ_ERR_FORKED,
                  "the child's calls on the parent's handle: %d of %d refused as forked, the "
                  "first rc %d", rep->refused_forked, rep->calls, rep->first_rc);
    ck_assert_msg(strstr(rep->message, want) != NULL &&
                  strstr(rep->message, "start a handle of its own after fork()") != NULL,
                  "\"%s\" does not say \"%s\"", rep->message, want);
    ck_assert_msg(!rep->state_serving && rep->state_worker_id == -1 && rep->worker_id == -1 &&
                  rep->state_fd == -1, "the child's state: serving %d, worker %" PRId64 "/%"
                  PRId64 ", fd %d", rep->state_serving, rep->state_worker_id, rep->worker_id,
                  rep->state_fd);
    ck_assert_msg(stopped && rep->stopped && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the child did not stop the parent's handle and start its own within 30 s, "
                  "then exit 0 (sfz_stop returned: %d; its end: %s %d)", rep->stopped,
                  WIFSIGNALED(status) ? "signal" : "exit status",
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    ck_assert_msg(rep->own_rc == SFZ_OK, "the child's own handle: %s", rep->own_message);
    ck_assert_msg(rep->own_worker_id >= 0 && rep->own_worker_id != parent_worker,
                  "the child's own handle holds worker id %" PRId64 ", the parent's %" PRId64,
                  rep->own_worker_id, parent_worker);
    ck_assert_msg(after_rc == SFZ_OK, "the parent stopped serving after the child's stop: %s",
                  err.message);
    ck_assert_msg(node_rc == ZOK && after.ephemeralOwner == before.ephemeralOwner,
                  "the parent's worker node %s: rc %d, session 0x%" PRIx64 " before the child's "
                  "stop, 0x%" PRIx64 " after", node, node_rc, (uint64_t)before.ephemeralOwner,
                  (uint64_t)after.ephemeralOwner);
    munmap(rep, bytes);
}
END_TEST

/* What the children of a claiming handle did, where the parent reads it. */
typedef struct claim_report {
    int rc[3];
    int64_t worker[3];           /* the worker id of each child's ids */
    char message[3][SFZ_ERROR_MAX];
    size_t count[3];
    int64_t ids[3][4096];
} claim_report;

static sfz *claim_handle;
static claim_report *claims;

/* Child 0's atexit handler: the program stops its handle at exit, as many do. */
static void stop_at_exit(void)
{
    sfz_stop(claim_handle);
}

/* Child i: ids from the inherited handle (its first call claims a pair of its own), then
 * an exit of its kind: 0 exit() with an atexit handler that stops the handle, 1 _exit()
 * holding its pair, 2 no id at all but sfz_stop of the inherited handle and an exec. */
static void claiming_child(int i)
{
    if (i == 2) {
        sfz_stop(claim_handle);
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    sfz_error err;
    claims->rc[i] = sfz_next_ids(claim_handle, claims->ids[i], 4096, &err);
    if (claims->rc[i] == SFZ_OK) {
        claims->count[i] = 4096;
        claims->worker[i] = (claims->ids[i][0] >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID;
    } else {
        snprintf(claims->message[i], SFZ_ERROR_MAX, "%s", err.message);
    }
    if (i == 0) {
        atexit(stop_at_exit);
        exit(0);
    }
    _exit(0);
}

/* on_fork = SFZ_ON_FORK_CLAIM: each child's first id call claims a pair of its own (never
 * the parent's, never another child's), and whatever the children do after (exit with an
 * atexit handler that stops the handle, _exit holding their pair, stop the inherited
 * handle unclaimed and exec), the parent keeps its session, its worker node and its pair,
 * and serves on; no id repeats. */
START_TEST(claiming_children_hold_pairs_of_their_own)
{
    sfz_options o;
    sfz_error err;
    steady_options(&o, "/f-claim");
    o.on_fork = SFZ_ON_FORK_CLAIM;
    ck_assert_msg(sfz_start(&o, &claim_handle, &err) == SFZ_OK, "%s", err.message);
    int64_t parent_worker = sfz_worker_id(claim_handle);
    int64_t mine[4096];
    ck_assert_msg(sfz_next_ids(claim_handle, mine, 2048, &err) == SFZ_OK, "%s", err.message);
    zhandle_t *zh = sf_test_zk_client(zk.hosts);
    char node[64], data[256];
    struct Stat before, after;
    snprintf(node, sizeof node, "/f-claim/%" PRId64, parent_worker);
    ck_assert_int_eq(sf_test_zk_get(zh, node, data, sizeof data, &before), ZOK);
    zookeeper_close(zh); /* before the forks: no client thread of ours inside a lookup then */
    claims = mmap(NULL, sizeof *claims, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
    ck_assert(claims != MAP_FAILED);
    memset(claims, 0, sizeof *claims);
    pid_t pids[3];
    int status[3];
    for (int i = 0; i < 3; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            claiming_child(i);
        }
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(waitpid(pids[i], &status[i], 0), pids[i]);
    ck_assert_msg(sfz_next_ids(claim_handle, mine + 2048, 2048, &err) == SFZ_OK,
                  "the parent stopped serving after its children: %s", err.message);
    int64_t after_worker = sfz_worker_id(claim_handle);
    zh = sf_test_zk_client(zk.hosts);
    int node_rc = sf_test_zk_get(zh, node, data, sizeof data, &after);
    char child_node[64];
    snprintf(child_node, sizeof child_node, "/f-claim/%" PRId64, claims->worker[0]);
    bool released = sf_test_wait_gone(zh, child_node, SF_TEST_PATIENCE_MS);
    zookeeper_close(zh);
    sfz_stop(claim_handle);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(claims->rc[i] == SFZ_OK, "child %d: rc %d: %s", i, claims->rc[i],
                      claims->message[i]);
        ck_assert_msg(claims->worker[i] != parent_worker, "child %d made ids as the parent's "
                      "worker id %" PRId64, i, parent_worker);
        ck_assert_msg(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0, "child %d ended "
                      "with status %d", i, status[i]);
    }
    ck_assert_msg(claims->worker[0] != claims->worker[1], "two children on worker id %" PRId64,
                  claims->worker[0]);
    ck_assert_msg(WIFEXITED(status[2]) && WEXITSTATUS(status[2]) == 0, "the exec'd child "
                  "ended with status %d", status[2]);
    ck_assert_msg(released, "child 0 stopped its handle at exit, and its pair %s stays held",
                  child_node);
    ck_assert_msg(after_worker == parent_worker && node_rc == ZOK &&
                  after.ephemeralOwner == before.ephemeralOwner,
                  "the parent's pair after its children: worker %" PRId64 " (was %" PRId64
                  "), node %s rc %d, session 0x%" PRIx64 " (was 0x%" PRIx64 ")", after_worker,
                  parent_worker, node, node_rc, (uint64_t)after.ephemeralOwner,
                  (uint64_t)before.ephemeralOwner);
    static int64_t all[4096 + 2 * 4096];
    size_t n = 0;
    memcpy(all, mine, sizeof mine);
    n = 4096;
    for (int i = 0; i < 2; i++) {
        memcpy(all + n, claims->ids[i], claims->count[i] * sizeof all[0]);
        n += claims->count[i];
    }
    qsort(all, n, sizeof all[0], sf_test_cmp_id);
    for (size_t i = 1; i < n; i++)
        ck_assert_msg(all[i] != all[i - 1], "id %" PRId64 " handed out twice", all[i]);
    munmap(claims, sizeof *claims);
}
END_TEST

/* The descriptors above 2 that a program sees when exec'd from this process, by
 * posix_spawn (spawn) or by fork and exec: `ls -l /proc/self/fd` run so, its lines for
 * sockets and pipes but the one it writes to. */
static void inherited_descriptors(bool spawn, char *out, size_t outlen)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    char *argv[] = {"ls", "-l", "/proc/self/fd", NULL};
    pid_t pid;
    if (spawn) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        ck_assert_int_eq(posix_spawn(&pid, "/bin/ls", &fa, NULL, argv, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
    } else {
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            dup2(p[1], 1);
            execv("/bin/ls", argv);
            _exit(127);
        }
    }
    close(p[1]);
    char listing[8192];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof listing - 1 && (got = read(p[0], listing + n, sizeof listing - 1 - n)) > 0)
        n += (size_t)got;
    listing[n] = '\0';
    close(p[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ls of /proc/self/fd ended "
                  "with status %d", status);
    out[0] = '\0';
    for (char *line = strtok(listing, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *arrow = strstr(line, " -> ");
        if (arrow == NULL || (strstr(arrow, "socket:") == NULL && strstr(arrow, "pipe:") == NULL))
            continue;
        char *fd = arrow;
        while (fd > line && fd[-1] != ' ')
            fd--;
        if (atoi(fd) > 2)
            snprintf(out + strlen(out), outlen - strlen(out), "%s; ", fd);
    }
}

/* A program that holds a handle and runs another (posix_spawn, or fork and exec) passes it
 * none of the handle's descriptors: the ZooKeeper client's pipe and socket are marked
 * close-on-exec (the client does not), as the library's own are. */
START_TEST(exec_children_inherit_nothing_of_the_handle)
{
    char before[4096], spawned[4096], forked[4096];
    inherited_descriptors(true, before, sizeof before); /* the test harness's own */
    sfz *h = start_steady("/f-exec");
    int64_t id;
    sfz_error err;
    ck_assert_msg(sfz_next_id(h, &id, &err) == SFZ_OK, "%s", err.message);
    inherited_descriptors(true, spawned, sizeof spawned);
    inherited_descriptors(false, forked, sizeof forked);
    sfz_stop(h);
    ck_assert_msg(strcmp(spawned, before) == 0, "posix_spawn passed on: %s (before the handle: "
                  "%s)", spawned, before);
    ck_assert_msg(strcmp(forked, before) == 0, "fork and exec passed on: %s (before the "
                  "handle: %s)", forked, before);
}
END_TEST

static Suite *fork_suite(void)
{
    Suite *s = suite_create("fork");
    TCase *tc = tcase_create("fork");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, child_handler_registered_first_gets_no_id);
    tcase_add_test(tc, fork_child_is_refused_and_starts_its_own);
    tcase_add_test(tc, claiming_children_hold_pairs_of_their_own);
    tcase_add_test(tc, exec_children_inherit_nothing_of_the_handle);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
#if defined(__SANITIZE_ADDRESS__)
    (void)fork_suite;
    puts("check_fork: skipped under AddressSanitizer (a forked child can inherit its "
         "allocator's lock held by another thread)");
    return 77;
#else
    return sf_test_registry_main("check_fork", fork_suite(), &zk);
#endif
}
