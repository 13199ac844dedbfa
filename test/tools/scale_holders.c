/* scale_holders.c -- many libsnowflake-zk handles in one process, for scripts/scale: a fleet's
 * share started all at once, its transitions reported, stopped on demand.
 *
 * Usage: scale_holders HOSTS DATACENTER_PATHS COUNT THREADS SESSION_TIMEOUT_MS [OPTION...]
 *   DATACENTER_PATHS  "D=/path,D=/path" (an automatic datacenter), or "D:/path" for one
 *                     datacenter D under one path
 *   COUNT handles are started from THREADS threads (each starts its share one after another)
 *   --skew            give a query_peer function, so that each handle runs the live clock
 *                     check (which lists its path's holders every second) as snowflaked does
 *   --label L         prefix of each handle's name in the output (default "h")
 *   --verbose         every log line of every handle, "info" ones too
 *   --bare            bare ZooKeeper sessions instead of handles (no claim, no id): the
 *                     floor the client library and the ensemble set for a start here;
 *                     "started" comes when the session is up (DC and WORKER are -1)
 *
 * It connects nothing until it reads "go" on standard input; then every line it prints is
 * "EVENT NAME MS ..." with MS the time of the event on CLOCK_MONOTONIC in ms (the clock
 * Python's time.monotonic() reads), so that the harness can set events of several processes
 * against its own:
 *   started NAME MS START_MS DC WORKER   sfz_start returned, after START_MS of its own
 *   failed NAME MS START_MS CODE MESSAGE sfz_start failed
 *   serving NAME MS DC WORKER            the handle serves (again)
 *   fenced NAME MS REASON                it stopped serving
 *   log NAME MS LEVEL: MESSAGE           a warning or error it logged (any, with --verbose)
 *   ready MS                             every start has returned
 * "stop" on standard input (or its end) stops every handle (in parallel), then it prints
 * "stopped MS" and exits. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <snowflake_zk.h>
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

typedef struct holder {
    char name[32];
    sfz *h;
    zhandle_t *zh;           /* --bare: the session */
    pthread_mutex_t mu;      /* --bare: guards up */
    pthread_cond_t cv;
    bool up;
} holder;

static const char *hosts, *paths, *label = "h";
static int count, threads, session_ms;
static bool skew, verbose, bare;
static holder *holders;
static atomic_int next_index;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One line of output, whole. */
static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&out_lock);
    vprintf(fmt, ap);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    va_end(ap);
}

static void on_state(void *ctx, const sfz_state *st)
{
    holder *hd = ctx;
    if (st->serving)
        emit("serving %s %" PRId64 " %" PRId64 " %" PRId64 "\n", hd->name, mono_ms(),
             st->datacenter_id, st->worker_id);
    else
        emit("fenced %s %" PRId64 " %s\n", hd->name, mono_ms(), st->reason);
}

/* Nothing answers over Thrift here: every holder is embedded, so the live check only lists. */
static int no_peer(void *ctx, const char *host_port, int64_t *worker_id, int64_t *datacenter_id,
                   int64_t *timestamp_ms, char *err, size_t errlen)
{
    (void)ctx;
    (void)worker_id;
    (void)datacenter_id;
    (void)timestamp_ms;
    snprintf(err, errlen, "%s: nothing listens there", host_port);
    return 1;
}

static void quiet_log(void *ctx, const char *level, const char *message)
{
    holder *hd = ctx;
    if (verbose || strcmp(level, "info") != 0)
        emit("log %s %" PRId64 " %s: %s\n", hd->name, mono_ms(), level, message);
}

static void bare_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    holder *hd = ctx;
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
        pthread_mutex_lock(&hd->mu);
        hd->up = true;
        pthread_cond_broadcast(&hd->cv);
        pthread_mutex_unlock(&hd->mu);
    }
}

/* --bare: a session and nothing else, reported once it is up (or after 120 s). */
static void bare_start(holder *hd)
{
    int64_t t0 = mono_ms();
    pthread_mutex_init(&hd->mu, NULL);
    pthread_cond_init(&hd->cv, NULL);
    hd->zh = zookeeper_init(hosts, bare_watcher, session_ms, NULL, hd, 0);
    pthread_mutex_lock(&hd->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 120;
    while (hd->zh != NULL && !hd->up &&
           pthread_cond_timedwait(&hd->cv, &hd->mu, &until) == 0) {
    }
    bool up = hd->up;
    pthread_mutex_unlock(&hd->mu);
    int64_t t1 = mono_ms();
    if (up)
        emit("started %s %" PRId64 " %" PRId64 " -1 -1\n", hd->name, t1, t1 - t0);
    else
        emit("failed %s %" PRId64 " %" PRId64 " -1 no session within 120 s\n", hd->name, t1,
             t1 - t0);
}

/* Starts handles until none is left to start. */
static void *starter(void *arg)
{
    (void)arg;
    for (;;) {
        int i = atomic_fetch_add(&next_index, 1);
        if (i >= count)
            return NULL;
        holder *hd = &holders[i];
        if (bare) {
            bare_start(hd);
            continue;
        }
        sfz_options o;
        sfz_options_init(&o);
        o.zookeeper = hosts;
        o.session_timeout_ms = session_ms;
        char path[256];
        int dc;
        if (sscanf(paths, "%d:%255s", &dc, path) == 2) {
            o.datacenter_id = dc;
            o.worker_id_path = path;
        } else {
            o.datacenter_id = -1;
            o.datacenter_paths = paths;
        }
        o.on_state = on_state;
        o.state_ctx = hd;
        o.log = quiet_log;
        o.log_ctx = hd;
        if (skew)
            o.query_peer = no_peer;
        sfz_error err;
        int64_t t0 = mono_ms();
        int rc = sfz_start(&o, &hd->h, &err);
        int64_t t1 = mono_ms();
        if (rc == SFZ_OK)
            emit("started %s %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", hd->name,
                 t1, t1 - t0, sfz_datacenter_id(hd->h), sfz_worker_id(hd->h));
        else
            emit("failed %s %" PRId64 " %" PRId64 " %d %s\n", hd->name, t1, t1 - t0, rc,
                 err.message);
    }
}

static void *stopper(void *arg)
{
    (void)arg;
    for (;;) {
        int i = atomic_fetch_add(&next_index, 1);
        if (i >= count)
            return NULL;
        sfz_stop(holders[i].h);
        holders[i].h = NULL;
        if (holders[i].zh != NULL)
            zookeeper_close(holders[i].zh);
        holders[i].zh = NULL;
    }
}

/* Runs fn on n threads over every handle. */
static void run_all(void *(*fn)(void *), int n)
{
    pthread_t *t = calloc((size_t)n, sizeof *t);
    if (t == NULL) {
        fprintf(stderr, "scale_holders: out of memory\n");
        exit(1);
    }
    atomic_store(&next_index, 0);
    for (int i = 0; i < n; i++) {
        int rc = pthread_create(&t[i], NULL, fn, NULL);
        if (rc != 0) {
            fprintf(stderr, "scale_holders: cannot start thread %d: %s\n", i, strerror(rc));
            exit(1);
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
}

static int parse_int(const char *s, const char *what, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s || v < lo || v > hi) {
        fprintf(stderr, "scale_holders: %s '%s' is not a number in %ld..%ld\n", what, s, lo, hi);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: scale_holders HOSTS DATACENTER_PATHS COUNT THREADS "
                        "SESSION_TIMEOUT_MS [--skew] [--bare] [--verbose] [--label L]\n");
        return 2;
    }
    hosts = argv[1];
    paths = argv[2];
    count = parse_int(argv[3], "COUNT", 1, 100000);
    threads = parse_int(argv[4], "THREADS", 1, 100000);
    session_ms = parse_int(argv[5], "SESSION_TIMEOUT_MS", 1000, 600000);
    for (int i = 6; i < argc; i++) {
        if (strcmp(argv[i], "--skew") == 0) {
            skew = true;
        } else if (strcmp(argv[i], "--bare") == 0) {
            bare = true;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
        } else if (strcmp(argv[i], "--label") == 0 && i + 1 < argc) {
            label = argv[++i];
        } else {
            fprintf(stderr, "scale_holders: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (threads > count)
        threads = count;
    /* A handle holds a few descriptors (its ZooKeeper socket and the client's pipe, its
     * state descriptor): raise the soft limit as far as the hard one allows. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    holders = calloc((size_t)count, sizeof *holders);
    if (holders == NULL) {
        fprintf(stderr, "scale_holders: out of memory\n");
        return 1;
    }
    for (int i = 0; i < count; i++)
        snprintf(holders[i].name, sizeof holders[i].name, "%s%d", label, i);
    sfz_set_client_logging(false);
    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL && strcmp(line, "go\n") != 0) {
    }
    run_all(starter, threads);
    emit("ready %" PRId64 "\n", mono_ms());
    while (fgets(line, sizeof line, stdin) != NULL && strcmp(line, "stop\n") != 0) {
    }
    run_all(stopper, threads);
    emit("stopped %" PRId64 "\n", mono_ms());
    free(holders);
    return 0;
}
