/* chaos_client.c -- drives part of the chaos run's load through libsnowflake-client, with the
 * nodes found in ZooKeeper, and records what a program on the library would see.
 *
 * Once ZooKeeper gave a first list, each thread calls sfc_next_id and sfc_next_ids(10) in
 * turn until SECONDS pass or SIGTERM.
 * Every id is written as "n<PORT>-k<THREAD>-w<W>d<D> W D ID" to OUT_DIR/client-<THREAD>.ids
 * for idcheck: PORT is the node that made it (so handovers are told apart as for the other
 * load), W and D are decoded from the id. Every error the library returns is written to
 * OUT_DIR/client.errors as "START_MS END_MS MESSAGE" (wall clock ms), so the harness can tell
 * errors while no node served from errors while one did.
 *
 * Usage: chaos_client OUT_DIR SECONDS THREADS ZOOKEEPER_HOSTS WORKER_ID_PATH [PREFETCH]
 * With PREFETCH (ids, > 0) the client prefetches, and its files are client-p-<THREAD>.ids
 * and client-p.errors (ids handed out from the buffer are labelled with port 0).
 * Prints one line of key=value totals: ids, calls, errors, failovers, failover_calls,
 * p99_ms, p999_ms (of all calls), failover_p99_ms, failover_p999_ms (of calls that moved to
 * another node), max_gap_ms (the longest time a thread went without an id), max_call_ms
 * (the slowest call) and max_over_ms (how far the slowest call ran past its deadline, 0 if
 * none did). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/snowflake_client.h"
#include "common/clocks.h"
#include "lib/snowflake.h"

#define CHAOS_CLIENT_MAX_THREADS 64
#define CHAOS_CLIENT_SLOTS 4096 /* latency histogram: 1 ms slots, the last one open */

static atomic_bool chaos_client_stop;

typedef struct chaos_thread {
    int index;
    const char *out_dir;
    sfc_client *client;
    int64_t end_ms;
    FILE *errors; /* shared, written under errors_lock */
    pthread_mutex_t *errors_lock;
    uint64_t ids, calls, errors_n, failovers, failover_calls;
    uint64_t all_ms[CHAOS_CLIENT_SLOTS], failover_ms[CHAOS_CLIENT_SLOTS];
    int64_t max_gap_ms, max_call_ms;
    const char *label; /* "client" or "client-p" */
} chaos_thread;

static void chaos_client_on_term(int sig)
{
    (void)sig;
    atomic_store(&chaos_client_stop, true);
}

/* The node's port from "host:port". */
static int chaos_client_port(const char *server)
{
    const char *colon = strrchr(server, ':');
    return colon != NULL ? atoi(colon + 1) : 0;
}

static void chaos_client_record(chaos_thread *t, FILE *out, const sfc_call *call,
                                const int64_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        int64_t w = (ids[i] >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID;
        int64_t d = (ids[i] >> SF_DATACENTER_ID_SHIFT) & SF_MAX_DATACENTER_ID;
        if (call->server[0] == '\0') /* from the prefetch buffer: its node is not known */
            fprintf(out, "buffer-k%d-w%" PRId64 "d%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                    "\n", t->index, w, d, w, d, ids[i]);
        else
            fprintf(out, "n%d-k%d-w%" PRId64 "d%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                    "\n", chaos_client_port(call->server), t->index, w, d, w, d, ids[i]);
    }
}

static void *chaos_client_run(void *arg)
{
    chaos_thread *t = arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-%d.ids", t->out_dir, t->label, t->index);
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        fprintf(stderr, "chaos_client: cannot write %s: %s\n", path, strerror(errno));
        exit(2);
    }
    int64_t last_id_at = sf_clocks_mono_ms();
    int64_t ids[10];
    for (uint64_t k = 0; !atomic_load(&chaos_client_stop) && sf_clocks_mono_ms() < t->end_ms;
         k++) {
        sfc_call call;
        sfc_error err;
        int n = (k & 1) ? 10 : 1;
        int64_t wall0 = sf_clock_now_ms(), t0 = sf_clocks_mono_ms();
        int rc = n == 1 ? sfc_next_id(t->client, ids, &call, &err)
                        : sfc_next_ids(t->client, ids, n, &call, &err);
        int64_t t1 = sf_clocks_mono_ms();
        int64_t slot = t1 - t0 < CHAOS_CLIENT_SLOTS ? t1 - t0 : CHAOS_CLIENT_SLOTS - 1;
        t->calls++;
        t->all_ms[slot]++;
        t->max_call_ms = t1 - t0 > t->max_call_ms ? t1 - t0 : t->max_call_ms;
        t->failovers += (uint64_t)call.failovers;
        if (call.failovers > 0) {
            t->failover_calls++;
            t->failover_ms[slot]++;
        }
        if (rc != SFC_OK) {
            t->errors_n++;
            pthread_mutex_lock(t->errors_lock);
            fprintf(t->errors, "%" PRId64 " %" PRId64 " %s\n", wall0, sf_clock_now_ms(),
                    err.message);
            fflush(t->errors);
            pthread_mutex_unlock(t->errors_lock);
            continue;
        }
        if (t1 - last_id_at > t->max_gap_ms)
            t->max_gap_ms = t1 - last_id_at;
        last_id_at = t1;
        t->ids += (uint64_t)n;
        chaos_client_record(t, out, &call, ids, n);
    }
    if (fclose(out) != 0) {
        fprintf(stderr, "chaos_client: writing %s failed: %s\n", path, strerror(errno));
        exit(2);
    }
    return NULL;
}

/* The q-quantile (0..1) of a 1 ms histogram, in ms. */
static int64_t chaos_client_quantile(const uint64_t *slots, double q)
{
    uint64_t total = 0, seen = 0;
    for (int i = 0; i < CHAOS_CLIENT_SLOTS; i++)
        total += slots[i];
    if (total == 0)
        return 0;
    for (int i = 0; i < CHAOS_CLIENT_SLOTS; i++) {
        seen += slots[i];
        if ((double)seen >= q * (double)total)
            return i;
    }
    return CHAOS_CLIENT_SLOTS - 1;
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 7 || atoi(argv[2]) < 1 || atoi(argv[3]) < 1 ||
        atoi(argv[3]) > CHAOS_CLIENT_MAX_THREADS || (argc == 7 && atoi(argv[6]) < 1)) {
        fprintf(stderr, "usage: chaos_client OUT_DIR SECONDS THREADS(1..%d) ZOOKEEPER_HOSTS "
                        "WORKER_ID_PATH [PREFETCH]\n", CHAOS_CLIENT_MAX_THREADS);
        return 2;
    }
    int prefetch = argc == 7 ? atoi(argv[6]) : 0;
    const char *label = prefetch > 0 ? "client-p" : "client";
    int threads = atoi(argv[3]);
    struct sigaction sa = {.sa_handler = chaos_client_on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sfc_options o;
    sfc_options_init(&o);
    o.zookeeper_hosts = argv[4];
    o.worker_id_path = argv[5];
    o.zookeeper_session_timeout_ms = 3000;
    o.agent = "chaos-client";
    o.timeout_ms = 3000;
    o.try_timeout_ms = 300;
    o.backoff_max_ms = 1000;
    o.prefetch = prefetch;
    o.prefetch_batch = 100;
    sfc_set_zookeeper_logging(false);
    sfc_error err;
    sfc_client *c = sfc_open(&o, &err);
    if (c == NULL) {
        fprintf(stderr, "chaos_client: %s\n", err.message);
        return 2;
    }
    /* The load starts once ZooKeeper gave a first list: a client that has not heard from it
     * yet has no node to fail over between, which is not what the run measures. */
    for (int64_t until = sf_clocks_mono_ms() + 60000;
         sfc_list_servers(c, NULL, 0) == 0 && sf_clocks_mono_ms() < until &&
         !atomic_load(&chaos_client_stop);)
        sf_clocks_sleep_ms(20);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.errors", argv[1], label);
    FILE *errors = fopen(path, "w");
    chaos_thread *t = calloc((size_t)threads, sizeof *t);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    if (errors == NULL || t == NULL || tid == NULL) {
        fprintf(stderr, "chaos_client: cannot set up (%s): %s\n", path, strerror(errno));
        return 2;
    }
    int64_t end = sf_clocks_mono_ms() + (int64_t)atoi(argv[2]) * 1000;
    for (int i = 0; i < threads; i++) {
        /* Thread indexes of the two clients a run starts differ, so do their connections. */
        t[i] = (chaos_thread){.index = i + (prefetch > 0 ? 100 : 0), .out_dir = argv[1], .client = c, .end_ms = end,
                              .errors = errors, .errors_lock = &lock, .label = label};
        if (pthread_create(&tid[i], NULL, chaos_client_run, &t[i]) != 0) {
            fprintf(stderr, "chaos_client: cannot start thread %d\n", i);
            return 2;
        }
    }
    static uint64_t all[CHAOS_CLIENT_SLOTS], moved[CHAOS_CLIENT_SLOTS];
    uint64_t ids = 0, calls = 0, errs = 0, failovers = 0, failover_calls = 0;
    int64_t gap = 0, slowest = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        ids += t[i].ids;
        calls += t[i].calls;
        errs += t[i].errors_n;
        failovers += t[i].failovers;
        failover_calls += t[i].failover_calls;
        gap = t[i].max_gap_ms > gap ? t[i].max_gap_ms : gap;
        slowest = t[i].max_call_ms > slowest ? t[i].max_call_ms : slowest;
        for (int s = 0; s < CHAOS_CLIENT_SLOTS; s++) {
            all[s] += t[i].all_ms[s];
            moved[s] += t[i].failover_ms[s];
        }
    }
    sfc_close(c);
    if (fclose(errors) != 0) {
        fprintf(stderr, "chaos_client: writing %s failed: %s\n", path, strerror(errno));
        return 2;
    }
    printf("chaos_client: ids=%" PRIu64 " calls=%" PRIu64 " errors=%" PRIu64 " failovers=%" PRIu64
           " failover_calls=%" PRIu64 " p99_ms=%" PRId64 " p999_ms=%" PRId64
           " failover_p99_ms=%" PRId64 " failover_p999_ms=%" PRId64 " max_gap_ms=%" PRId64
           " max_call_ms=%" PRId64 " max_over_ms=%" PRId64 "\n",
           ids, calls, errs, failovers, failover_calls, chaos_client_quantile(all, 0.99),
           chaos_client_quantile(all, 0.999), chaos_client_quantile(moved, 0.99),
           chaos_client_quantile(moved, 0.999), gap, slowest,
           slowest > o.timeout_ms ? slowest - o.timeout_ms : 0);
    free(t);
    free(tid);
    return 0;
}
