/* registry_floor.c -- the floor record: the state node of each worker id under state_path,
 * which says how far its holders may have gone ("reserved <unix ms>" while held, "released
 * <unix ms>" after a clean stop, an earlier version's plain number), and the wait of a new
 * holder until its clock is past it, so that no (timestamp, worker) pair is used twice
 * whatever the clocks say. The renewals write it (registry_lease.c); this file reads it.
 * Part of the registry (registry.h says where each part lives); knows nothing of sockets. */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include "registry_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"
#include "lib/snowflake.h"

/* Parses a state node's data (see registry.h): "reserved N", "released N", or an earlier
 * version's plain N, read as a reservation ending one lease later. False for anything else. */
static bool sf_reg_parse_record(const char *data, int64_t lease_ms, sf_reg_record *rec)
{
    static const char reserved[] = "reserved ", released[] = "released ";
    const char *num = data;
    bool legacy = false;
    rec->released = false;
    if (strncmp(data, reserved, sizeof reserved - 1) == 0) {
        num = data + sizeof reserved - 1;
    } else if (strncmp(data, released, sizeof released - 1) == 0) {
        num = data + sizeof released - 1;
        rec->released = true;
    } else {
        legacy = true;
    }
    if (!(*num == '-' || (*num >= '0' && *num <= '9')))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(num, &end, 10);
    if (*end || errno)
        return false;
    rec->floor = legacy && v >= 0 ? v + lease_ms : v;
    return true;
}

/* Reads the record of id with its version: 0 (floor -1 and version -1 when there is no
 * state node yet), or -1 on a ZooKeeper error (err filled). Data that is no record is
 * logged and read as no floor: the next write replaces it. */
static int sf_reg_read_state(sf_registry *r, int64_t id, sf_reg_record *rec, int32_t *version,
                             char *err, size_t errlen)
{
    char path[SF_REG_PATH_MAX], data[64];
    struct Stat st;
    sf_reg_state_node(r, id, path, sizeof path);
    rec->floor = -1;
    rec->released = false;
    *version = -1;
    int rc = sf_reg_get_string(r, path, data, sizeof data, &st);
    if (rc == ZNONODE)
        return 0;
    if (rc != ZOK) {
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot read the floor in %s: %s", path, zerror(rc));
        return -1;
    }
    *version = st.version;
    pthread_mutex_lock(&r->mu);
    int64_t lease = sf_registry_lease_ms(r->negotiated_ms);
    pthread_mutex_unlock(&r->mu);
    if (!sf_reg_parse_record(data, lease, rec)) {
        rec->floor = -1;
        sf_reg_log(r, "warning", "%s holds '%s', not a floor ('reserved MS' or 'released MS'); "
                   "ignored", path, data);
    }
    return 0;
}

/* Makes sure the state node of id exists, so every later write of it can be conditional
 * on its version; fills the registry's view of it. */
int sf_reg_load_state(sf_registry *r, int64_t id, char *err, size_t errlen)
{
    sf_reg_record rec;
    int32_t version;
    for (int tries = 0; tries < 3; tries++) {
        if (sf_reg_read_state(r, id, &rec, &version, err, errlen) != 0)
            return -1;
        if (version >= 0) {
            pthread_mutex_lock(&r->mu);
            r->state_value = rec.floor;
            r->state_released = rec.released;
            r->state_version = version;
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        char path[SF_REG_PATH_MAX];
        sf_reg_state_node(r, id, path, sizeof path);
        int rc = zoo_create(r->zh, path, "released -1", 11, sf_reg_acl(r), 0, NULL, 0);
        if (rc != ZOK && rc != ZNODEEXISTS) {
            sf_reg_zk_error(r, rc);
            sf_registry_set_err(err, errlen, "cannot create %s: %s%s", path, zerror(rc),
                                rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
            return -1;
        }
    }
    sf_registry_set_err(err, errlen, "the state node for worker id %" PRId64 " under %s keeps "
                        "vanishing; is another tool deleting it?", id, r->state_path);
    return -1;
}

/* How far ahead of our clock a floor may be for us to wait it out: the lease its holder
 * may have held plus the clock skew the peers' check tolerates, or
 * max_clock_backward_wait_ms if longer. A floor further ahead was left by a clock far off. */
static int64_t sf_reg_floor_wait_limit(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    int64_t limit = r->o.max_clock_skew_ms + sf_registry_lease_ms(r->negotiated_ms);
    pthread_mutex_unlock(&r->mu);
    return r->o.max_clock_backward_wait_ms > limit ? r->o.max_clock_backward_wait_ms : limit;
}

/* True when the floor recorded for id is further ahead of our clock than we wait
 * (*floor_ms filled); false also when it cannot be read (the claim reports that). */
bool sf_reg_floor_too_far(sf_registry *r, int64_t id, int64_t *floor_ms)
{
    sf_reg_record rec;
    int32_t version;
    char err[SF_REGISTRY_ERR_MAX];
    if (sf_reg_read_state(r, id, &rec, &version, err, sizeof err) != 0)
        return false;
    *floor_ms = rec.floor;
    return rec.floor - sf_clock_now_ms() + 1 > sf_reg_floor_wait_limit(r);
}

/* Restart safety: waits until our clock is past the floor recorded for id, if that is at
 * most sf_reg_floor_wait_limit away; otherwise fails. Cancellable. kept: the id was ours
 * all along (our session survived), so a reservation of our own is no floor for us: only
 * what others recorded is. */
int sf_reg_wait_for_floor(sf_registry *r, int64_t id, bool kept, int64_t *floor_ms,
                          char *err, size_t errlen)
{
    if (sf_reg_load_state(r, id, err, errlen) != 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    int64_t floor = r->state_value;
    bool released = r->state_released;
    if (kept && floor <= r->own_value)
        floor = r->base_floor;
    pthread_mutex_unlock(&r->mu);
    *floor_ms = floor;
    int64_t now = sf_clock_now_ms();
    if (floor < now)
        return 0;
    int64_t behind = floor - now + 1, limit = sf_reg_floor_wait_limit(r);
    if (behind > limit) {
        sf_registry_set_err(err, errlen,
                "our clock is %" PRId64 " ms behind the floor recorded for worker id %" PRId64
                " (%s/%" PRId64 " = %" PRId64 "), further than a new holder waits (%" PRId64
                " ms: the lease plus the peers' clock tolerance of %" PRId64 " ms, or "
                "max_clock_backward_wait_ms if longer); ids could repeat. Fix the clock; or, if "
                "the floor was left by a clock that ran ahead, see it with `snowflake-zk floor %"
                PRId64 "` and reset it with `snowflake-zk reset-floor %" PRId64 "`",
                behind, id, r->state_path, id, floor, limit, r->o.max_clock_skew_ms, id, id);
        return -1;
    }
    sf_reg_log(r, "warning", "waiting %" PRId64 " ms for the clock to pass the floor "
               "recorded for worker id %" PRId64 " (%s)", behind, id,
               released ? "the last timestamp of a holder that stopped cleanly: our clock is "
                          "behind its"
                        : "the reservation of a holder that did not stop cleanly: our clock is "
                          "behind its, or it stopped less than a lease ago");
    sf_reg_set_floor_wait(r, true);
    while ((now = sf_clock_now_ms()) <= floor) {
        if (!sf_reg_sleep(r, floor - now + 1)) {
            sf_reg_set_floor_wait(r, false);
            sf_registry_set_err(err, errlen,
                                "stopped while waiting for the clock to pass the floor "
                                "recorded for worker id %" PRId64, id);
            return -1;
        }
    }
    sf_reg_set_floor_wait(r, false);
    return 0;
}

