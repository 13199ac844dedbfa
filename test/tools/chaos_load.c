/* chaos_load.c -- keeps asking several snowflaked nodes for ids while they are
 * being killed, fenced and clock-stepped, and records every id it is given.
 *
 * One thread per connection, each with the generated Thrift client. Every id
 * is written as "CONNECTION WORKER DATACENTER ID" to OUT_DIR/conn-N.ids, for
 * idcheck; WORKER and DATACENTER are what the issuing node last reported for
 * itself. A node's worker id can change only across a period in which it
 * refuses ids (fenced) or a reconnection, so after each the client asks
 * again right after the first id it then gets. A broken connection is replaced by a new one with a new name, since
 * only ids on one connection must increase.
 *
 * Usage: chaos_load [--batch N] OUT_DIR SECONDS CONNECTIONS HOST:PORT...
 * With --batch N (2..1000), every other call is get_ids(N) instead of get_id, so both
 * paths are under the faults. It stops after SECONDS, or earlier on SIGTERM (the caller
 * knows when its faults have played out), finishing the calls under way.
 * Prints one line of key=value totals: ids, clock_errors, unavailable_errors,
 * transport_errors, other_errors, reconnects, and unrecorded (ids received
 * whose node broke before it could say which worker id made them). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <glib-object.h>

#include "rpc/client.h"
#include "sf_thrift_snowflake.h"
#include "rpc/thrift_fix.h"

#define CHAOS_TIMEOUT_MS 2000

/* Set by SIGTERM: every thread ends after its call under way. */
static atomic_bool chaos_stop;

static void chaos_on_term(int sig)
{
    (void)sig;
    atomic_store(&chaos_stop, true);
}

typedef struct chaos_totals {
    atomic_uint_fast64_t ids, clock_errors, unavailable_errors, transport_errors, other_errors,
        reconnects, unrecorded;
} chaos_totals;

typedef struct chaos_job {
    int index;
    char host[256];
    int port;
    const char *out_dir;
    double end;
    int batch;     /* > 1: every other call is get_ids(batch) */
    chaos_totals *totals;
} chaos_job;

static double chaos_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void chaos_sleep_ms(int ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Connects with connect, read and write timeouts, so a stopped node cannot hang us. */
static gboolean chaos_open(sf_client *c, const chaos_job *job)
{
    char why[256];
    return sf_client_open(c, job->host, job->port, CHAOS_TIMEOUT_MS, why, sizeof why);
}

/* Asks the node which ids it uses now. FALSE on a transport error. */
static gboolean chaos_identify(sf_client *c, gint64 *worker, gint64 *datacenter)
{
    GError *error = NULL;
    gboolean ok = sf_thrift_snowflake_if_get_worker_id(c->api, worker, &error) &&
                  sf_thrift_snowflake_if_get_datacenter_id(c->api, datacenter, &error);
    g_clear_error(&error);
    return ok;
}

static void *chaos_thread(void *arg)
{
    chaos_job *job = arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/conn-%d.ids", job->out_dir, job->index);
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        fprintf(stderr, "chaos_load: cannot write %s: %s\n", path, strerror(errno));
        exit(2);
    }
    sf_client c = { 0 };
    int generation = 0;
    /* verify: the node refused ids, so it may come back with another worker
     * id; it switches the id before it serves again, so the identity read
     * right after the first id it gives is the one that id was made with. */
    gboolean connected = FALSE, identify = TRUE, verify = FALSE;
    gint64 worker = -1, datacenter = -1;
    GArray *batch = g_array_new(FALSE, FALSE, sizeof(gint64));
    unsigned calls = 0;
    while (chaos_now() < job->end && !atomic_load_explicit(&chaos_stop, memory_order_relaxed)) {
        if (!connected) {
            if (!chaos_open(&c, job)) {
                chaos_sleep_ms(100);
                continue;
            }
            connected = TRUE;
            identify = verify = TRUE;
            generation++;
            atomic_fetch_add(&job->totals->reconnects, 1);
        }
        if (identify) {
            if (!chaos_identify(&c, &worker, &datacenter)) {
                atomic_fetch_add(&job->totals->transport_errors, 1);
                sf_client_close(&c);
                connected = FALSE;
                continue;
            }
            identify = worker < 0;
            if (identify) { /* no worker id held yet */
                chaos_sleep_ms(50);
                continue;
            }
        }
        gint64 id = 0;
        GError *error = NULL;
        SfThriftInvalidSystemClock *clock_error = NULL;
        SfThriftInvalidUserAgentError *agent_error = NULL;
        SfThriftInvalidRequestError *request_error = NULL;
        SfThriftServiceUnavailable *unavailable = NULL;
        gboolean batched = job->batch > 1 && (++calls & 1);
        gboolean ok;
        if (batched) {
            g_array_set_size(batch, 0);
            ok = sf_thrift_snowflake_if_get_ids(c.api, &batch, "chaos", job->batch,
                                                &clock_error, &agent_error, &request_error,
                                                &unavailable, &error);
        } else {
            ok = sf_thrift_snowflake_if_get_id(c.api, &id, "chaos", &clock_error,
                                               &agent_error, &unavailable, &error);
        }
        if (ok) {
            if (verify && !chaos_identify(&c, &worker, &datacenter)) {
                atomic_fetch_add(&job->totals->transport_errors, 1);
                sf_client_close(&c);
                connected = FALSE;
                atomic_fetch_add(&job->totals->unrecorded, 1);
                continue;
            }
            verify = FALSE;
            guint n = batched ? batch->len : 1;
            for (guint i = 0; i < n; i++)
                fprintf(out, "n%d-c%d-g%d %" G_GINT64_FORMAT " %" G_GINT64_FORMAT " %"
                        G_GINT64_FORMAT "\n", job->port, job->index, generation, worker,
                        datacenter, batched ? g_array_index(batch, gint64, i) : id);
            atomic_fetch_add(&job->totals->ids, n);
            continue;
        }
        if (clock_error != NULL) {
            atomic_fetch_add(&job->totals->clock_errors, 1);
            chaos_sleep_ms(10);
        } else if (unavailable != NULL) {
            atomic_fetch_add(&job->totals->unavailable_errors, 1);
            identify = verify = TRUE; /* it may come back with another worker id */
            chaos_sleep_ms(20);
        } else if (agent_error != NULL || request_error != NULL) {
            atomic_fetch_add(&job->totals->other_errors, 1);
        } else {
            atomic_fetch_add(&job->totals->transport_errors, 1);
            sf_client_close(&c);
            connected = FALSE;
        }
        if (clock_error != NULL)
            g_object_unref(clock_error);
        if (agent_error != NULL)
            g_object_unref(agent_error);
        if (request_error != NULL)
            g_object_unref(request_error);
        if (unavailable != NULL)
            g_object_unref(unavailable);
        g_clear_error(&error);
    }
    if (connected)
        sf_client_close(&c);
    g_array_free(batch, TRUE);
    if (fclose(out) != 0) {
        fprintf(stderr, "chaos_load: writing %s failed: %s\n", path, strerror(errno));
        exit(2);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int batch = 1;
    if (argc > 2 && strcmp(argv[1], "--batch") == 0) {
        batch = atoi(argv[2]);
        if (batch < 2 || batch > 1000) {
            fprintf(stderr, "chaos_load: --batch %s is outside 2..1000\n", argv[2]);
            return 2;
        }
        argv += 2;
        argc -= 2;
    }
    if (argc < 5) {
        fprintf(stderr, "usage: chaos_load [--batch N] OUT_DIR SECONDS CONNECTIONS HOST:PORT...\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    int conns = atoi(argv[3]);
    int nodes = argc - 4;
    if (seconds <= 0 || conns < 1 || conns > 4096) {
        fprintf(stderr, "chaos_load: SECONDS must be > 0 and CONNECTIONS 1..4096\n");
        return 2;
    }
    /* The generated types register themselves on first use, which is not
     * thread-safe: register them all before the threads start. */
    sf_thrift_fix_finalize();
    sf_thrift_fix_transport();
    struct sigaction sa = { .sa_handler = chaos_on_term };
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0) {
        perror("chaos_load: sigaction");
        return 2;
    }
    chaos_totals totals = { 0 };
    chaos_job *jobs = g_new0(chaos_job, conns);
    GThread **threads = g_new0(GThread *, conns);
    double end = chaos_now() + seconds;
    for (int i = 0; i < conns; i++) {
        const char *node = argv[4 + i % nodes];
        const char *colon = strrchr(node, ':');
        if (colon == NULL || colon == node) {
            fprintf(stderr, "chaos_load: '%s' is not HOST:PORT\n", node);
            return 2;
        }
        jobs[i] = (chaos_job){ .index = i, .port = atoi(colon + 1), .out_dir = argv[1],
                               .end = end, .batch = batch, .totals = &totals };
        snprintf(jobs[i].host, sizeof jobs[i].host, "%.*s", (int)(colon - node), node);
        threads[i] = g_thread_new("chaos", (GThreadFunc)chaos_thread, &jobs[i]);
    }
    for (int i = 0; i < conns; i++)
        g_thread_join(threads[i]);
    printf("chaos_load: ids=%" PRIuFAST64 " clock_errors=%" PRIuFAST64
           " unavailable_errors=%" PRIuFAST64 " transport_errors=%" PRIuFAST64
           " other_errors=%" PRIuFAST64 " reconnects=%" PRIuFAST64 " unrecorded=%" PRIuFAST64 "\n",
           atomic_load(&totals.ids), atomic_load(&totals.clock_errors),
           atomic_load(&totals.unavailable_errors), atomic_load(&totals.transport_errors),
           atomic_load(&totals.other_errors), atomic_load(&totals.reconnects),
           atomic_load(&totals.unrecorded));
    g_free(jobs);
    g_free(threads);
    return 0;
}
