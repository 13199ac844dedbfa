/* registry_epoch.c -- what a holder checks in with before every claim under a worker path:
 * the epoch its ids count from, recorded once for the path in the state path's own node
 * ("epoch_ms <Unix ms>"), since two holders of one worker id whose epochs differ by D make,
 * D apart, the same ids (the floors are kept in Unix ms, not in ids); and its clock against
 * the ensemble's, whose leader stamps every write with its clock (mtime), so that a host
 * whose clock is far off is refused before it serves, embedded holders too (nobody queries
 * them over Thrift).
 *
 * The record is written once, by the first holder (conditionally on the version it read,
 * so that of two first holders with different epochs one is refused); every later claim
 * only reads it. Holders starting together would otherwise queue on this one node, each
 * conditional write winning over all the others once: n(n+1)/2 writes for n holders. The
 * clock is checked by the stamp of the claim's own first node (its lock node, or the worker
 * node of a static claim), which no other holder writes; a claim that made neither (it
 * found one of its session's own) writes the record again for a stamp.
 *
 * A path without a record (made by an earlier version, whose state path node holds nothing)
 * is taken to be of the claimant's epoch, which it records; earlier versions neither record
 * nor check it, and read the per-id state nodes as before (nothing about them changes).
 * Part of the registry (registry.c says how the parts fit); knows nothing of sockets. */
#include "registry_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/snowflake.h"

#define SF_REG_EPOCH_PREFIX "epoch_ms "
/* Holders that write the record at once (the first holders of a path, or several claims
 * without a stamp of their own) write in turn: each round one write wins and the others
 * read again. */
#define SF_REG_EPOCH_TRIES (2 * SF_REGISTRY_MAX_WORKERS)

/* Reads a state path node's data: true with *epoch the recorded epoch, or -1 when nothing
 * is recorded (no data); false for anything else. */
static bool sf_reg_parse_epoch(const char *data, int64_t *epoch)
{
    *epoch = -1;
    if (data[0] == '\0')
        return true;
    size_t n = strlen(SF_REG_EPOCH_PREFIX);
    if (strncmp(data, SF_REG_EPOCH_PREFIX, n) != 0 || data[n] < '0' || data[n] > '9')
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(data + n, &end, 10);
    if (*end != '\0' || errno != 0 || v > SF_MAX_EPOCH_MS)
        return false;
    *epoch = v;
    return true;
}

/* Our clock against the one the ensemble's leader stamped our write of path with, read
 * when we sent the write and when its answer came: with both clocks right, the stamp lies
 * between the two. Further outside than max_clock_skew_ms, one of the two clocks is at least
 * that far off; the ids' order across nodes and the floors' waits assume less. */
static int sf_reg_check_clock(sf_registry *r, const sf_reg_stamp *s, const char *path,
                              char *err, size_t errlen)
{
    int64_t ahead = s->sent - s->mtime, behind = s->mtime - s->answered;
    if (ahead <= r->o.max_clock_skew_ms && behind <= r->o.max_clock_skew_ms)
        return 0;
    sf_registry_set_err(err, errlen,
                        "clock sanity check failed: our clock is at least %" PRId64 " ms %s "
                        "ZooKeeper's (its leader stamped our write of %s at %" PRId64 "; our "
                        "clock read %" PRId64 " when we sent it and %" PRId64 " when it was "
                        "confirmed), more than the %" PRId64 " ms allowed; fix this host's time "
                        "sync (or the ZooKeeper leader's)",
                        ahead > 0 ? ahead : behind, ahead > 0 ? "ahead of" : "behind", path,
                        s->mtime, s->sent, s->answered, r->o.max_clock_skew_ms);
    sf_reg_not_yet(r); /* a clock still settling (time sync after boot) comes into line */
    return -1;
}

/* Reads the path's epoch record and compares it with ours; writes ours when none is
 * recorded, or, with restamp, in any case (for its stamp), conditionally on the version
 * read, and then checks our clock by the write's stamp (clock_checked). */
static int sf_reg_epoch_record(sf_registry *r, bool restamp, char *err, size_t errlen)
{
    r->clock_checked = false;
    for (int tries = 0; tries < SF_REG_EPOCH_TRIES; tries++) {
        char data[64], mine[64];
        struct Stat st, written;
        int rc = sf_reg_get_string(r, r->state_path, data, sizeof data, &st);
        if (rc != ZOK) {
            sf_registry_set_err(err, errlen, "cannot read the epoch recorded in %s: %s",
                                r->state_path, zerror(rc));
            return -1;
        }
        int64_t recorded;
        if (!sf_reg_parse_epoch(data, &recorded)) {
            sf_registry_set_err(err, errlen,
                                "%s holds '%s', not 'epoch_ms MS' (the epoch the ids under %s "
                                "count from): was it written by another program?",
                                r->state_path, data, r->worker_id_path);
            return -1;
        }
        if (recorded >= 0 && recorded != r->o.epoch_ms) {
            sf_registry_set_err(err, errlen,
                                "the ids under %s count from epoch_ms %" PRId64 " (recorded in "
                                "%s), ours from epoch_ms %" PRId64 ": a holder of a worker id "
                                "with another epoch makes the ids another one made %" PRId64
                                " ms apart. Configure epoch_ms %" PRId64 ", or give this epoch "
                                "a worker_id_path of its own (`snowflake-zk epoch` shows the "
                                "record)",
                                r->worker_id_path, recorded, r->state_path, r->o.epoch_ms,
                                (int64_t)llabs(recorded - r->o.epoch_ms), recorded);
            return -1;
        }
        if (recorded >= 0 && !restamp)
            return 0; /* ours already: the claim's first node is stamped instead */
        int n = snprintf(mine, sizeof mine, SF_REG_EPOCH_PREFIX "%" PRId64, r->o.epoch_ms);
        sf_reg_stamp s = {.valid = true, .sent = sf_clock_now_ms()};
        rc = zoo_set2(r->zh, r->state_path, mine, n, st.version, &written);
        s.answered = sf_clock_now_ms();
        if (rc == ZBADVERSION)
            continue; /* written meanwhile, perhaps with another epoch: read it again */
        if (rc != ZOK) {
            sf_registry_set_err(err, errlen, "cannot record the epoch in %s: %s%s",
                                r->state_path, zerror(rc),
                                rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
            return -1;
        }
        if (r->o.skip_sanity_checks)
            return 0;
        s.mtime = written.mtime;
        if (sf_reg_check_clock(r, &s, r->state_path, err, errlen) != 0)
            return -1;
        r->clock_checked = true;
        return 0;
    }
    sf_registry_set_err(err, errlen, "the epoch recorded in %s changed under us %d times; is "
                        "another program writing it?", r->state_path, SF_REG_EPOCH_TRIES);
    return -1;
}

int sf_reg_check_in(sf_registry *r, char *err, size_t errlen)
{
    return sf_reg_epoch_record(r, false, err, errlen);
}

int sf_reg_check_stamp(sf_registry *r, const sf_reg_stamp *stamp, const char *path, char *err,
                       size_t errlen)
{
    if (r->clock_checked || r->o.skip_sanity_checks)
        return 0;
    if (!stamp->valid)
        return sf_reg_epoch_record(r, true, err, errlen);
    return sf_reg_check_clock(r, stamp, path, err, errlen);
}
