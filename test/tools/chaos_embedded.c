/* chaos_embedded.c -- an embedded node for the chaos run: a process that makes ids in process
 * with libsnowflake-zk, under the same faults as the daemons, until SIGTERM.
 *
 * It asks for ids about once a millisecond, alternating sfz_next_id and sfz_next_ids(BATCH),
 * and writes every id it is handed as "LABEL-pPID-gGEN WORKER DATACENTER ID" to
 * OUT_DIR/embedded-LABEL-PID.ids, for idcheck (LABEL names the node in handovers; a new
 * generation starts after every refusal, since the worker id may change across a fence and
 * only ids of one generation must increase; WORKER and DATACENTER are the id's own fields:
 * the process has no other voice to report them with). Each transition is written to
 * OUT_DIR/state-LABEL ("serving" or "fenced: why"), which the harness reads as a daemon's
 * /health. SIGTERM stops it cleanly (sfz_stop: the last timestamp recorded, the id released).
 *
 * Usage: chaos_embedded OUT_DIR LABEL HOSTS WORKER_ID_PATH WORKER|auto DATACENTER
 *        SESSION_TIMEOUT_MS CLAIM_RETRIES CLAIM_RETRY_WAIT_MS STATE_INTERVAL_MS
 *        [START_TIMEOUT_MS]
 * START_TIMEOUT_MS bounds how long its start tries (0, the default: for ever, as the
 * ensemble may be down when a restart comes).
 * Prints "chaos_embedded: ids=N fenced=N clock_errors=N" at the end. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <snowflake_zk.h>

#define BATCH 10
#define CALL_EVERY_NS 1000000L

static atomic_bool stop_asked;
static char state_path[512];

static void on_term(int sig)
{
    (void)sig;
    atomic_store(&stop_asked, true);
}

/* Writes the state file anew (a rename, so the harness never reads half of it). */
static void on_state(void *ctx, const sfz_state *st)
{
    (void)ctx;
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", state_path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        fprintf(stderr, "chaos_embedded: cannot write %s: %s\n", tmp, strerror(errno));
        return;
    }
    if (st->serving)
        fprintf(f, "serving %lld\n", (long long)st->worker_id);
    else
        fprintf(f, "fenced: %s\n", st->reason);
    if (fclose(f) != 0 || rename(tmp, state_path) != 0)
        fprintf(stderr, "chaos_embedded: cannot replace %s: %s\n", state_path, strerror(errno));
}

static int parse_int(const char *s, const char *what, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s || v < lo || v > hi) {
        fprintf(stderr, "chaos_embedded: %s '%s' is not a number in %ld..%ld\n", what, s, lo, hi);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    if (argc != 11 && argc != 12) {
        fprintf(stderr, "usage: chaos_embedded OUT_DIR LABEL HOSTS WORKER_ID_PATH WORKER|auto "
                        "DATACENTER SESSION_TIMEOUT_MS CLAIM_RETRIES CLAIM_RETRY_WAIT_MS "
                        "STATE_INTERVAL_MS [START_TIMEOUT_MS]\n");
        return 2;
    }
    const char *dir = argv[1], *label = argv[2];
    sfz_options o;
    sfz_options_init(&o);
    o.zookeeper = argv[3];
    o.worker_id_path = argv[4];
    o.worker_id = strcmp(argv[5], "auto") == 0 ? -1 : parse_int(argv[5], "WORKER", 0, 31);
    o.datacenter_id = parse_int(argv[6], "DATACENTER", 0, 31);
    o.session_timeout_ms = parse_int(argv[7], "SESSION_TIMEOUT_MS", 1000, 600000);
    o.claim_retries = parse_int(argv[8], "CLAIM_RETRIES", 0, 100);
    o.claim_retry_wait_ms = parse_int(argv[9], "CLAIM_RETRY_WAIT_MS", 0, 600000);
    o.state_interval_ms = parse_int(argv[10], "STATE_INTERVAL_MS", 100, 60000);
    o.start_timeout_ms = argc == 12 ? parse_int(argv[11], "START_TIMEOUT_MS", 0, 86400000) : 0;
    o.on_state = on_state;
    snprintf(state_path, sizeof state_path, "%s/state-%s", dir, label);
    char ids_path[512];
    snprintf(ids_path, sizeof ids_path, "%s/embedded-%s-%ld.ids", dir, label, (long)getpid());
    FILE *out = fopen(ids_path, "w");
    if (out == NULL) {
        fprintf(stderr, "chaos_embedded: cannot write %s: %s\n", ids_path, strerror(errno));
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    sfz *h;
    sfz_error err;
    int rc = sfz_prepare(&o, &h, &err);
    if (rc == SFZ_OK && (rc = sfz_run(h, &err)) != SFZ_OK)
        sfz_stop(h);
    if (rc != SFZ_OK) {
        fprintf(stderr, "chaos_embedded: cannot start: %s\n", err.message);
        return 1;
    }
    unsigned long long ids = 0, fenced = 0, clock_errors = 0, gen = 0;
    bool refused = false;
    int64_t batch[BATCH];
    for (unsigned long call = 0; !atomic_load(&stop_asked); call++) {
        size_t n = call % 2 ? BATCH : 1;
        rc = sfz_next_ids(h, batch, n, &err);
        if (rc == SFZ_OK) {
            if (refused)
                gen++;
            refused = false;
            for (size_t i = 0; i < n; i++)
                fprintf(out, "%s-p%ld-g%llu %lld %lld %lld\n", label, (long)getpid(), gen,
                        (long long)((batch[i] >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID),
                        (long long)((batch[i] >> SF_DATACENTER_ID_SHIFT) & SF_MAX_DATACENTER_ID),
                        (long long)batch[i]);
            fflush(out); /* a kill -9 loses no id already handed out */
            ids += n;
        } else {
            refused = true;
            if (rc == SFZ_ERR_FENCED)
                fenced++;
            else
                clock_errors++;
        }
        struct timespec ts = {0, CALL_EVERY_NS};
        nanosleep(&ts, NULL);
    }
    sfz_stop(h);
    if (fclose(out) != 0)
        fprintf(stderr, "chaos_embedded: writing %s failed: %s\n", ids_path, strerror(errno));
    printf("chaos_embedded: ids=%llu fenced=%llu clock_errors=%llu\n", ids, fenced, clock_errors);
    return 0;
}
