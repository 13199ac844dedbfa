/* client_drive.c -- drives libsnowflake-client for the end-to-end tests: opens one client
 * with the options given, then answers commands read one per line on standard input, one
 * line each, so a test can make nodes fail between calls and see what the client did.
 *
 * Usage: client_drive [--servers L | --zookeeper Z [--path P]] [--timeout-ms T]
 *                     [--try-timeout-ms T] [--backoff-ms B] [--backoff-max-ms B]
 *                     [--prefetch N] [--batch N] [--max-age-ms A] [--threads N]
 * Commands and answers:
 *   id            ok ID server=S tries=N failovers=F ms=M | error CODE ms=M MESSAGE
 *   ids N         ok N FIRST LAST server=S ms=M | error ...
 *   locks N       (client_drive_counted only) N calls of sfc_next_id, then
 *                 locks calls=N ok=K taken=T first_try=F most=M   (T: the pool's lock
 *                 taken by those calls; M: the most one call that succeeded at its first
 *                 try took, F of them)
 *   agent A       agent A    (id and ids go out under agent A from now on, through
 *                 sfc_next_id_as and sfc_next_ids_as; `agent -`: the client's again)
 *   servers       servers N up=U NAME:up|NAME:down:FAILURES,...   (in the client's order)
 *   run S         calls sfc_next_id for S seconds on each of --threads threads (default 1)
 *                 and answers
 *                 run ids=N errors=E dups=D max_age_ms=A max_call_age_ms=C max_gap_ms=G
 *                 max_call_ms=M min_error_ms=E failovers=F prefetched=P stale=S
 *                 first_error=MESSAGE
 *                 (age: local clock minus the id's timestamp when the call returned; call
 *                 age: the local clock when the call began minus the id's timestamp, a
 *                 floor of its age when handed out; gap: the longest time a thread went
 *                 between two ids; max_call_ms: the slowest call; min_error_ms: the
 *                 quickest failed call, 0 with none; prefetched: ids handed out from the
 *                 buffer; stale: prefetched ids dropped as too old meanwhile)
 *   quit */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/snowflake_client.h"
#include "common/clocks.h"
#include "lib/snowflake.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#define DRIVE_MAX_THREADS 64

/* One thread of `run S`: its ids, and the worst of its calls. */
typedef struct drive_thread {
    sfc_client *c;
    int64_t epoch, end;
    int64_t *ids;
    size_t n, cap;
    uint64_t errors, failovers;
    int64_t max_age, max_call_age, max_gap, max_call_ms, min_error_ms;
    char first_error[SFC_ERROR_MAX];
    pthread_t thread;
} drive_thread;

static void *drive_loop(void *arg)
{
    drive_thread *t = arg;
    int64_t last_ok = sf_clocks_mono_ms();
    while (t->ids != NULL && sf_clocks_mono_ms() < t->end) {
        int64_t id;
        sfc_call call;
        sfc_error err;
        /* An id's age when handed out lies between the clock at the call and at its return:
         * the first is the bound that holds however long this thread waits for a core. */
        int64_t asked_wall = sf_clock_now_ms();
        int64_t asked = sf_clocks_mono_ms();
        int rc = sfc_next_id(t->c, &id, &call, &err);
        int64_t now = sf_clocks_mono_ms();
        t->max_call_ms = now - asked > t->max_call_ms ? now - asked : t->max_call_ms;
        if (rc != SFC_OK) {
            if (t->errors == 0 || now - asked < t->min_error_ms)
                t->min_error_ms = now - asked;
            if (t->errors++ == 0)
                snprintf(t->first_error, sizeof t->first_error, "%s", err.message);
            continue;
        }
        int64_t age = sf_clock_now_ms() - ((id >> SF_TIMESTAMP_SHIFT) + t->epoch);
        t->max_age = age > t->max_age ? age : t->max_age;
        int64_t call_age = asked_wall - ((id >> SF_TIMESTAMP_SHIFT) + t->epoch);
        t->max_call_age = call_age > t->max_call_age ? call_age : t->max_call_age;
        t->max_gap = now - last_ok > t->max_gap ? now - last_ok : t->max_gap;
        last_ok = now;
        t->failovers += (uint64_t)call.failovers;
        if (t->n == t->cap) {
            int64_t *more = realloc(t->ids, 2 * t->cap * sizeof *t->ids);
            if (more == NULL)
                break;
            t->ids = more;
            t->cap *= 2;
        }
        t->ids[t->n++] = id;
    }
    return NULL;
}

#define DRIVE_MAX(field) all.field = t->field > all.field ? t->field : all.field

/* `run S`: ids for S seconds on each of threads threads, every one checked for its age;
 * duplicates counted over all of them after. */
static void drive_run(sfc_client *c, int seconds, int threads, int64_t epoch)
{
    static drive_thread ts[DRIVE_MAX_THREADS];
    drive_thread all = {0};
    sfc_stats before, after;
    sfc_get_stats(c, &before);
    int64_t end = sf_clocks_mono_ms() + (int64_t)seconds * 1000;
    for (int i = 0; i < threads; i++) {
        ts[i] = (drive_thread){.c = c, .epoch = epoch, .end = end, .cap = 1 << 16};
        ts[i].ids = malloc(ts[i].cap * sizeof *ts[i].ids);
        if (pthread_create(&ts[i].thread, NULL, drive_loop, &ts[i]) != 0) {
            fprintf(stderr, "client_drive: cannot start thread %d\n", i);
            exit(1);
        }
    }
    for (int i = 0; i < threads; i++) {
        drive_thread *t = &ts[i];
        pthread_join(t->thread, NULL);
        all.n += t->n;
        if (t->errors > 0 && (all.errors == 0 || t->min_error_ms < all.min_error_ms))
            all.min_error_ms = t->min_error_ms;
        all.errors += t->errors;
        all.failovers += t->failovers;
        DRIVE_MAX(max_age);
        DRIVE_MAX(max_call_age);
        DRIVE_MAX(max_gap);
        DRIVE_MAX(max_call_ms);
        if (all.first_error[0] == '\0')
            memcpy(all.first_error, t->first_error, sizeof all.first_error);
    }
    int64_t *ids = malloc((all.n > 0 ? all.n : 1) * sizeof *ids);
    size_t n = 0, dups = 0;
    for (int i = 0; i < threads; i++) {
        if (ids != NULL && ts[i].ids != NULL)
            memcpy(ids + n, ts[i].ids, ts[i].n * sizeof *ids);
        n += ts[i].n;
        free(ts[i].ids);
    }
    if (ids != NULL) {
        qsort(ids, n, sizeof *ids, cmp_i64);
        for (size_t i = 1; i < n; i++)
            dups += ids[i] == ids[i - 1];
    }
    free(ids);
    sfc_get_stats(c, &after);
    printf("run ids=%zu errors=%" PRIu64 " dups=%zu max_age_ms=%" PRId64 " max_call_age_ms=%" PRId64
           " max_gap_ms=%" PRId64 " max_call_ms=%" PRId64 " min_error_ms=%" PRId64
           " failovers=%" PRIu64 " prefetched=%" PRIu64 " stale=%" PRIu64 " first_error=%s\n", n,
           all.errors, dups, all.max_age, all.max_call_age, all.max_gap, all.max_call_ms,
           all.min_error_ms, all.failovers, after.prefetched - before.prefetched, after.prefetch_stale - before.prefetch_stale,
           all.first_error);
}

#ifdef SFC_COUNT_POOL_LOCKS
#include "pool.h"

/* `locks N`: how often N calls on this thread took the pool's lock, and the most one call
 * took among those that succeeded at their first try (a call that had to try again, on a
 * busy machine or a failing node, takes more by design). */
static void drive_locks(sfc_client *c, int calls)
{
    int ok = 0, first_try = 0;
    uint64_t before = sfc_pool_locks_taken(), most = 0;
    for (int i = 0; i < calls; i++) {
        int64_t id;
        sfc_call call;
        uint64_t start = sfc_pool_locks_taken();
        if (sfc_next_id(c, &id, &call, NULL) != SFC_OK)
            continue;
        ok++;
        if (call.tries == 1) {
            first_try++;
            uint64_t taken = sfc_pool_locks_taken() - start;
            most = taken > most ? taken : most;
        }
    }
    printf("locks calls=%d ok=%d taken=%" PRIu64 " first_try=%d most=%" PRIu64 "\n", calls,
           ok, sfc_pool_locks_taken() - before, first_try, most);
}
#endif

static void drive_servers(sfc_client *c)
{
    sfc_server_state st[64];
    int n = sfc_list_servers(c, st, 64), up = 0;
    for (int i = 0; i < n && i < 64; i++)
        up += st[i].up;
    printf("servers %d up=%d ", n, up);
    for (int i = 0; i < n && i < 64; i++)
        if (st[i].up)
            printf("%s%s:up", i > 0 ? "," : "", st[i].server);
        else
            printf("%s%s:down:%d", i > 0 ? "," : "", st[i].server, st[i].failures);
    printf("\n");
}

int main(int argc, char **argv)
{
    sfc_options o;
    sfc_options_init(&o);
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--servers") == 0)
            o.servers = v;
        else if (strcmp(k, "--zookeeper") == 0)
            o.zookeeper_hosts = v;
        else if (strcmp(k, "--path") == 0)
            o.worker_id_path = v;
        else if (strcmp(k, "--timeout-ms") == 0)
            o.timeout_ms = atoi(v);
        else if (strcmp(k, "--try-timeout-ms") == 0)
            o.try_timeout_ms = atoi(v);
        else if (strcmp(k, "--backoff-ms") == 0)
            o.backoff_ms = atoi(v);
        else if (strcmp(k, "--backoff-max-ms") == 0)
            o.backoff_max_ms = atoi(v);
        else if (strcmp(k, "--prefetch") == 0)
            o.prefetch = atoi(v);
        else if (strcmp(k, "--batch") == 0)
            o.prefetch_batch = atoi(v);
        else if (strcmp(k, "--max-age-ms") == 0)
            o.max_id_age_ms = atoi(v);
        else if (strcmp(k, "--threads") == 0 && atoi(v) >= 1 && atoi(v) <= DRIVE_MAX_THREADS)
            threads = atoi(v);
        else {
            fprintf(stderr, "client_drive: unknown option %s\n", k);
            return 2;
        }
    }
    sfc_set_zookeeper_logging(false);
    sfc_error err;
    sfc_client *c = sfc_open(&o, &err);
    if (c == NULL) {
        printf("error %d %s\n", err.code, err.message);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    char line[256], agent_buf[256];
    const char *agent = NULL; /* the client's */
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        int64_t started = sf_clocks_mono_ms();
        sfc_call call;
        if (strcmp(line, "quit") == 0)
            break;
        if (strcmp(line, "id") == 0) {
            int64_t id;
            if (sfc_next_id_as(c, agent, &id, &call, &err) == SFC_OK)
                printf("ok %" PRId64 " server=%s tries=%d failovers=%d ms=%" PRId64 "\n", id,
                       call.server, call.tries, call.failovers, sf_clocks_mono_ms() - started);
            else
                printf("error %d ms=%" PRId64 " %s\n", err.code, sf_clocks_mono_ms() - started,
                       err.message);
        } else if (strncmp(line, "ids ", 4) == 0) {
            int count = atoi(line + 4);
            int64_t *ids = malloc((size_t)(count > 0 ? count : 1) * sizeof *ids);
            if (ids != NULL && sfc_next_ids_as(c, agent, ids, count, &call, &err) == SFC_OK)
                printf("ok %d %" PRId64 " %" PRId64 " server=%s ms=%" PRId64 "\n", count, ids[0],
                       ids[count - 1], call.server, sf_clocks_mono_ms() - started);
            else
                printf("error %d ms=%" PRId64 " %s\n", ids != NULL ? err.code : SFC_ERR_NOMEM,
                       sf_clocks_mono_ms() - started, ids != NULL ? err.message : "no memory");
            free(ids);
#ifdef SFC_COUNT_POOL_LOCKS
        } else if (strncmp(line, "locks ", 6) == 0) {
            drive_locks(c, atoi(line + 6));
#endif
        } else if (strncmp(line, "agent ", 6) == 0) {
            snprintf(agent_buf, sizeof agent_buf, "%s", line + 6);
            agent = strcmp(agent_buf, "-") == 0 ? NULL : agent_buf;
            printf("agent %s\n", agent_buf);
        } else if (strcmp(line, "servers") == 0) {
            drive_servers(c);
        } else if (strncmp(line, "run ", 4) == 0) {
            drive_run(c, atoi(line + 4), threads, o.epoch_ms);
        } else {
            printf("unknown %s\n", line);
        }
        fflush(stdout);
    }
    sfc_close(c);
    return 0;
}
