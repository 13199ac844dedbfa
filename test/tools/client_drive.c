/* client_drive.c -- drives libsnowflake-client for the end-to-end tests: opens one client
 * with the options given, then answers commands read one per line on standard input, one
 * line each, so a test can make nodes fail between calls and see what the client did.
 *
 * Usage: client_drive [--servers L | --zookeeper Z [--path P]] [--timeout-ms T]
 *                     [--try-timeout-ms T] [--backoff-ms B] [--prefetch N] [--batch N]
 *                     [--max-age-ms A]
 * Commands and answers:
 *   id            ok ID server=S tries=N failovers=F ms=M | error CODE ms=M MESSAGE
 *   ids N         ok N FIRST LAST server=S ms=M | error ...
 *   servers       servers N up=U NAME:up|down,...   (in the client's order)
 *   run S         calls sfc_next_id for S seconds and answers
 *                 run ids=N errors=E dups=D max_age_ms=A max_call_age_ms=C max_gap_ms=G
 *                 failovers=F stale=S first_error=MESSAGE   (age: local clock minus the
 *                 id's timestamp when the call returned; call age: the local clock when the
 *                 call began minus the id's timestamp, a floor of its age when handed out;
 *                 gap: the longest time between two ids; stale: prefetched ids dropped as
 *                 too old meanwhile)
 *   quit */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
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

/* `run S`: ids for S seconds, every one checked for its age; duplicates counted after. */
static void drive_run(sfc_client *c, int seconds, int64_t epoch)
{
    size_t cap = 1 << 20, n = 0;
    int64_t *ids = malloc(cap * sizeof *ids);
    uint64_t errors = 0, failovers = 0;
    int64_t max_age = 0, max_call_age = 0, max_gap = 0, last_ok = sf_clocks_mono_ms();
    sfc_stats before, after;
    sfc_get_stats(c, &before);
    int64_t end = last_ok + (int64_t)seconds * 1000;
    char first_error[SFC_ERROR_MAX] = "";
    while (ids != NULL && sf_clocks_mono_ms() < end) {
        int64_t id;
        sfc_call call;
        sfc_error err;
        /* An id's age when handed out lies between the clock at the call and at its return:
         * the first is the bound that holds however long this thread waits for a core. */
        int64_t asked_wall = sf_clock_now_ms();
        if (sfc_next_id(c, &id, &call, &err) != SFC_OK) {
            if (errors++ == 0)
                snprintf(first_error, sizeof first_error, "%s", err.message);
            continue;
        }
        int64_t now = sf_clocks_mono_ms();
        int64_t age = sf_clock_now_ms() - ((id >> SF_TIMESTAMP_SHIFT) + epoch);
        max_age = age > max_age ? age : max_age;
        int64_t call_age = asked_wall - ((id >> SF_TIMESTAMP_SHIFT) + epoch);
        max_call_age = call_age > max_call_age ? call_age : max_call_age;
        max_gap = now - last_ok > max_gap ? now - last_ok : max_gap;
        last_ok = now;
        failovers += (uint64_t)call.failovers;
        if (n == cap) {
            int64_t *more = realloc(ids, 2 * cap * sizeof *ids);
            if (more == NULL)
                break;
            ids = more;
            cap *= 2;
        }
        ids[n++] = id;
    }
    size_t dups = 0;
    if (ids != NULL) {
        qsort(ids, n, sizeof *ids, cmp_i64);
        for (size_t i = 1; i < n; i++)
            dups += ids[i] == ids[i - 1];
    }
    free(ids);
    sfc_get_stats(c, &after);
    printf("run ids=%zu errors=%" PRIu64 " dups=%zu max_age_ms=%" PRId64 " max_call_age_ms=%" PRId64
           " max_gap_ms=%" PRId64 " failovers=%" PRIu64 " stale=%" PRIu64 " first_error=%s\n", n,
           errors, dups, max_age, max_call_age, max_gap, failovers,
           after.prefetch_stale - before.prefetch_stale, first_error);
}

static void drive_servers(sfc_client *c)
{
    sfc_server_state st[64];
    int n = sfc_list_servers(c, st, 64), up = 0;
    for (int i = 0; i < n && i < 64; i++)
        up += st[i].up;
    printf("servers %d up=%d ", n, up);
    for (int i = 0; i < n && i < 64; i++)
        printf("%s%s:%s", i > 0 ? "," : "", st[i].server, st[i].up ? "up" : "down");
    printf("\n");
}

int main(int argc, char **argv)
{
    sfc_options o;
    sfc_options_init(&o);
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
        else if (strcmp(k, "--prefetch") == 0)
            o.prefetch = atoi(v);
        else if (strcmp(k, "--batch") == 0)
            o.prefetch_batch = atoi(v);
        else if (strcmp(k, "--max-age-ms") == 0)
            o.max_id_age_ms = atoi(v);
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
    char line[256];
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        int64_t started = sf_clocks_mono_ms();
        sfc_call call;
        if (strcmp(line, "quit") == 0)
            break;
        if (strcmp(line, "id") == 0) {
            int64_t id;
            if (sfc_next_id(c, &id, &call, &err) == SFC_OK)
                printf("ok %" PRId64 " server=%s tries=%d failovers=%d ms=%" PRId64 "\n", id,
                       call.server, call.tries, call.failovers, sf_clocks_mono_ms() - started);
            else
                printf("error %d ms=%" PRId64 " %s\n", err.code, sf_clocks_mono_ms() - started,
                       err.message);
        } else if (strncmp(line, "ids ", 4) == 0) {
            int count = atoi(line + 4);
            int64_t *ids = malloc((size_t)(count > 0 ? count : 1) * sizeof *ids);
            if (ids != NULL && sfc_next_ids(c, ids, count, &call, &err) == SFC_OK)
                printf("ok %d %" PRId64 " %" PRId64 " server=%s ms=%" PRId64 "\n", count, ids[0],
                       ids[count - 1], call.server, sf_clocks_mono_ms() - started);
            else
                printf("error %d ms=%" PRId64 " %s\n", ids != NULL ? err.code : SFC_ERR_NOMEM,
                       sf_clocks_mono_ms() - started, ids != NULL ? err.message : "no memory");
            free(ids);
        } else if (strcmp(line, "servers") == 0) {
            drive_servers(c);
        } else if (strncmp(line, "run ", 4) == 0) {
            drive_run(c, atoi(line + 4), o.epoch_ms);
        } else {
            printf("unknown %s\n", line);
        }
        fflush(stdout);
    }
    sfc_close(c);
    return 0;
}
