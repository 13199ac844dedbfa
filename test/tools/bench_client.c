/* bench_client.c -- what libsnowflake-client costs per call, and what its prefetch gives, against
 * one running snowflaked.
 *
 * Per-call overhead: rounds of get_id on one connection through the bare generated c_glib
 * client, then through sfc_next_id without prefetch (one thread, one node), interleaved so both
 * see the same machine; prints the median ns per call of each and their ratio (target <= 1.10).
 * Prefetch: one thread calling sfc_next_id with prefetch on for SECONDS; prints ids/s (target
 * >= 1,000,000) and the oldest id handed out, each id's age taken against its own timestamp
 * when handed out (bound: max_id_age_ms, 1000).
 *
 * Usage: bench_client --port P [--seconds S] [--rounds N]. Exit 1 when a call fails or an id
 * older than the bound is handed out (a failure, not a missed speed target). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "client/snowflake_client.h"
#include "lib/snowflake.h"
#include "rpc/client.h"
#include "sf_thrift_snowflake.h"

#define BENCH_CALLS 5000 /* per round */

/* ns per get_id through the generated client alone. */
static double bench_bare(sf_client *c)
{
    GError *error = NULL;
    double t0 = bench_mono_ns();
    for (int i = 0; i < BENCH_CALLS; i++) {
        gint64 id;
        SfThriftInvalidSystemClock *ce = NULL;
        SfThriftInvalidUserAgentError *ae = NULL;
        SfThriftServiceUnavailable *ue = NULL;
        if (!sf_thrift_snowflake_if_get_id(c->api, &id, "bench", &ce, &ae, &ue, &error)) {
            fprintf(stderr, "bench_client: bare get_id failed: %s\n",
                    error != NULL ? error->message : "an exception");
            exit(1);
        }
    }
    return (bench_mono_ns() - t0) / BENCH_CALLS;
}

/* ns per sfc_next_id without prefetch. */
static double bench_library(sfc_client *c)
{
    double t0 = bench_mono_ns();
    for (int i = 0; i < BENCH_CALLS; i++) {
        int64_t id;
        sfc_error err;
        if (sfc_next_id(c, &id, NULL, &err) != SFC_OK) {
            fprintf(stderr, "bench_client: sfc_next_id failed: %s\n", err.message);
            exit(1);
        }
    }
    return (bench_mono_ns() - t0) / BENCH_CALLS;
}

static sfc_client *bench_open(const char *server, int prefetch)
{
    sfc_options o;
    sfc_options_init(&o);
    o.servers = server;
    o.agent = "bench";
    o.timeout_ms = 5000;
    o.prefetch = prefetch;
    o.prefetch_batch = 10000;
    sfc_error err;
    sfc_client *c = sfc_open(&o, &err);
    if (c == NULL) {
        fprintf(stderr, "bench_client: %s\n", err.message);
        exit(1);
    }
    return c;
}

int main(int argc, char **argv)
{
    int port = 0, seconds = 3, rounds = 9;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(argv[i + 1]);
    }
    if (port < 1 || port > 65535 || seconds < 1 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "usage: bench_client --port 1..65535 [--seconds S>=1] "
                        "[--rounds 1..1000]\n");
        return 2;
    }
    char server[64];
    snprintf(server, sizeof server, "127.0.0.1:%d", port);
    sf_client bare;
    char why[256];
    if (!sf_client_open(&bare, "127.0.0.1", port, 5000, why, sizeof why)) {
        fprintf(stderr, "bench_client: cannot connect to %s: %s\n", server, why);
        return 1;
    }
    sfc_client *lib = bench_open(server, 0);
    double *bare_ns = calloc((size_t)rounds, sizeof *bare_ns);
    double *lib_ns = calloc((size_t)rounds, sizeof *lib_ns);
    if (bare_ns == NULL || lib_ns == NULL)
        return 1;
    bench_bare(&bare); /* warm both */
    bench_library(lib);
    for (int r = 0; r < rounds; r++) {
        bare_ns[r] = bench_bare(&bare);
        lib_ns[r] = bench_library(lib);
    }
    double b = bench_median(bare_ns, (size_t)rounds), l = bench_median(lib_ns, (size_t)rounds);
    printf("client_bare_ns %.0f\nclient_library_ns %.0f\nclient_overhead_ratio %.3f\n", b, l,
           l / b);
    sfc_close(lib);
    sf_client_close(&bare);
    free(bare_ns);
    free(lib_ns);

    sfc_client *pf = bench_open(server, 100000);
    int64_t max_age = 0, n = 0;
    double t0 = bench_mono_ns(), end = t0 + seconds * 1e9, now = t0;
    while (now < end) {
        for (int i = 0; i < 1024; i++, n++) {
            int64_t id;
            sfc_error err;
            if (sfc_next_id(pf, &id, NULL, &err) != SFC_OK) {
                fprintf(stderr, "bench_client: prefetched sfc_next_id failed: %s\n", err.message);
                return 1;
            }
            int64_t age = sf_clock_now_ms() - ((id >> SF_TIMESTAMP_SHIFT) + SF_TWITTER_EPOCH_MS);
            max_age = age > max_age ? age : max_age;
        }
        now = bench_mono_ns();
    }
    sfc_stats st;
    sfc_get_stats(pf, &st);
    sfc_close(pf);
    printf("client_prefetch_ids_per_s %.0f\nclient_prefetch_max_age_ms %" PRId64 "\n"
           "client_prefetch_stale %" PRIu64 "\nclient_prefetch_misses %" PRIu64 "\n",
           (double)n / ((now - t0) / 1e9), max_age, st.prefetch_stale, st.prefetch_misses);
    if (max_age > 1000) {
        fprintf(stderr, "bench_client: an id %" PRId64 " ms old was handed out (bound 1000)\n",
                max_age);
        return 1;
    }
    return 0;
}
