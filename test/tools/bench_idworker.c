/* bench_idworker.c -- prints what the generator core costs and sustains.
 *
 * Figures, not assertions: machines are shared and noisy. Printed: the cost of
 * one call while the sequence is not exhausted (median over bursts inside a
 * millisecond), beside a bare clock read and the difference, the sustained single-thread and 2-thread rates against the
 * 4,096,000 ids/s cap of the 12-bit sequence, and the batch rate. */
#define _POSIX_C_SOURCE 200809L
#include "lib/snowflake.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_common.h"

static sf_worker *bench_worker(void)
{
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.worker_id = 1;
    o.datacenter_id = 1;
    sf_worker *w = sf_worker_new(&o, &err);
    if (w == NULL) {
        fprintf(stderr, "bench: %s\n", err.message);
        exit(1);
    }
    return w;
}

/* Median ns per call over bursts of `burst` calls, each starting on a fresh
 * millisecond so that no burst waits for the sequence to roll over. */
static double bench_call_cost(sf_worker *w, int bursts, int burst, bool clock_only)
{
    double *per_call = malloc((size_t)bursts * sizeof *per_call);
    if (per_call == NULL)
        exit(1);
    int64_t id = 0;
    for (int b = 0; b < bursts; b++) {
        int64_t start_ms = sf_clock_now_ms();
        while (sf_clock_now_ms() == start_ms)
            ;
        double t0 = bench_mono_ns();
        if (clock_only)
            for (int i = 0; i < burst; i++)
                id += sf_clock_now_ms();
        else
            for (int i = 0; i < burst; i++)
                sf_worker_next_id(w, &id, NULL);
        per_call[b] = (bench_mono_ns() - t0) / burst;
    }
    double median = bench_median(per_call, (size_t)bursts);
    if (id == 42) /* keep the clock-only loop from being optimised away */
        putchar(' ');
    free(per_call);
    return median;
}

typedef struct rate_job {
    sf_worker *w;
    double seconds;
    size_t batch; /* 0 = single calls */
    uint64_t ids;
} rate_job;

static void *rate_thread(void *arg)
{
    rate_job *job = arg;
    int64_t buf[1000];
    double end = bench_mono_ns() + job->seconds * 1e9;
    uint64_t n = 0;
    while (bench_mono_ns() < end) {
        for (int i = 0; i < 64; i++) {
            if (job->batch > 0) {
                sf_worker_next_ids(job->w, buf, job->batch, NULL);
                n += job->batch;
            } else {
                sf_worker_next_id(job->w, buf, NULL);
                n++;
            }
        }
    }
    job->ids = n;
    return NULL;
}

static double bench_rate(int threads, double seconds, size_t batch)
{
    sf_worker *w = bench_worker();
    pthread_t tid[8];
    rate_job jobs[8];
    double t0 = bench_mono_ns();
    for (int t = 0; t < threads; t++) {
        jobs[t] = (rate_job){ .w = w, .seconds = seconds, .batch = batch };
        pthread_create(&tid[t], NULL, rate_thread, &jobs[t]);
    }
    uint64_t total = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        total += jobs[t].ids;
    }
    double elapsed = (bench_mono_ns() - t0) / 1e9;
    sf_worker_free(w);
    return (double)total / elapsed;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    if (seconds <= 0)
        seconds = 3.0;
    sf_worker *w = bench_worker();
    /* Interleave the two measurements so that both see the same machine. */
    double cost = 0, clock_cost = 0;
    for (int round = 0; round < 4; round++) {
        cost += bench_call_cost(w, 500, 1000, false) / 4;
        clock_cost += bench_call_cost(w, 500, 1000, true) / 4;
    }
    sf_worker_free(w);
    printf("bench_idworker: one call, sequence not exhausted (median of bursts of 1000): %.1f ns\n",
           cost);
    printf("bench_idworker: of which the clock read alone (clock_gettime CLOCK_REALTIME): %.1f ns = %.0f%% of the call\n",
           clock_cost, 100.0 * clock_cost / cost);
    printf("bench_idworker: the call minus the clock read: %.1f ns (target <= 10 ns)\n",
           cost - clock_cost);
    double r1 = bench_rate(1, seconds, 0);
    printf("bench_idworker: sustained, 1 thread:  %.3f M ids/s = %.2f%% of the 4.096 M ids/s cap\n",
           r1 / 1e6, 100.0 * r1 / CAP_PER_SECOND);
    double r2 = bench_rate(2, seconds, 0);
    printf("bench_idworker: sustained, 2 threads: %.3f M ids/s = %.2f%% of the cap\n", r2 / 1e6,
           100.0 * r2 / CAP_PER_SECOND);
    double rb = bench_rate(1, seconds, 1000);
    printf("bench_idworker: batches of 1000, 1 thread: %.3f M ids/s = %.2f%% of the cap\n",
           rb / 1e6, 100.0 * rb / CAP_PER_SECOND);
    return 0;
}
