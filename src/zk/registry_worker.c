/* registry_worker.c -- the worker node a claim creates: the create itself, a create whose answer
 * was lost (noted, then settled before the next claim so one session never holds two ids), and
 * what a claim says when every id is taken. Shared by the static claim (registry_claim.c) and
 * the queue (registry_queue.c), below both.
 * Part of the registry (registry.c says how the parts fit); knows nothing of sockets. */
#include "registry_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/zkpath.h"
#include "lib/snowflake.h"

int sf_reg_try_create_worker(sf_registry *r, int64_t id, char *holder, size_t holderlen,
                             sf_reg_stamp *stamp, char *err, size_t errlen)
{
    char path[SF_REG_PATH_MAX];
    sf_reg_worker_path(r, id, path, sizeof path);
    const char *data = r->host_port ? r->host_port : "";
    struct Stat made;
    sf_reg_stamp s = {.valid = false, .sent = sf_clock_now_ms()};
    int rc = zoo_create2(r->zh, path, data, (int)strlen(data), sf_reg_acl(r), ZOO_EPHEMERAL,
                         NULL, 0, &made);
    s.answered = sf_clock_now_ms();
    if (stamp)
        *stamp = (sf_reg_stamp){.valid = false};
    if (rc == ZOK) {
        r->worker_version = 0;
        if (stamp) {
            s.valid = true;
            s.mtime = made.mtime;
            *stamp = s;
        }
        return 1;
    }
    if (rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT) {
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot create %s: %s%s", path, zerror(rc),
                            rc == ZNOAUTH ? " (check zookeeper.auth)" : "");
        return -1;
    }
    /* Exists, or unknown after a lost connection: whose is it? */
    struct Stat st;
    int grc = sf_reg_get_string(r, path, holder, holderlen, &st);
    if (grc == ZOK && st.ephemeralOwner == sf_reg_session_id(r)) {
        r->worker_version = st.version;
        return 1;
    }
    if (grc == ZOK)
        return 0;
    if (grc == ZNONODE && rc == ZNODEEXISTS) {
        snprintf(holder, holderlen, "(a node that has just gone)");
        return 0;
    }
    if (rc != ZNODEEXISTS)
        sf_reg_note_unsure(r, path);
    sf_reg_zk_error(r, rc != ZNODEEXISTS ? rc : grc);
    sf_registry_set_err(err, errlen, "cannot create %s: %s", path, zerror(rc));
    return -1;
}

void sf_reg_note_unsure(sf_registry *r, const char *path)
{
    snprintf(r->unsure_worker, sizeof r->unsure_worker, "%s", path);
    r->unsure_session = sf_reg_session_id(r);
}

/* Settles a worker node noted by sf_reg_note_unsure before a claim: a create whose answer
 * was lost may have been applied, and the node is then our session's. 1 (*id set) when it
 * is ours and the id this claim may take (we hold it: nothing more to claim); 0 when there
 * is nothing of ours (gone, another's, or ours elsewhere and now deleted); -1 on ZooKeeper's
 * error (err filled), the claim to be tried again. */
int sf_reg_settle_unsure(sf_registry *r, int64_t *id, char *err, size_t errlen)
{
    if (r->unsure_worker[0] == '\0')
        return 0;
    char path[SF_REG_PATH_MAX];
    snprintf(path, sizeof path, "%s", r->unsure_worker);
    int64_t session = sf_reg_session_id(r);
    struct Stat st;
    int rc = r->unsure_session == session ? zoo_exists(r->zh, path, 0, &st) : ZNONODE;
    if (rc == ZNONODE || (rc == ZOK && st.ephemeralOwner != session)) {
        r->unsure_worker[0] = '\0'; /* never made, or gone with its session */
        return 0;
    }
    if (rc != ZOK) {
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot read %s, which our lost create may have made: "
                            "%s", path, zerror(rc));
        return -1;
    }
    const char *slash = strrchr(path, '/');
    size_t dirlen = (size_t)(slash - path);
    int64_t k;
    bool here = strlen(r->worker_id_path) == dirlen &&
                strncmp(path, r->worker_id_path, dirlen) == 0 &&
                sf_zkpath_parse_worker_id(slash + 1, &k) && (r->wanted_id < 0 || k == r->wanted_id);
    if (here) {
        r->unsure_worker[0] = '\0';
        r->worker_version = st.version;
        *id = k;
        sf_reg_log(r, "info", "worker id %" PRId64 " is ours already: the create of an earlier "
                   "claim was applied though its answer was lost", k);
        return 1;
    }
    rc = zoo_delete(r->zh, path, st.version);
    if (rc != ZOK && rc != ZNONODE) {
        sf_reg_zk_error(r, rc);
        sf_registry_set_err(err, errlen, "cannot delete %s, made by our lost create: %s", path,
                            zerror(rc));
        return -1;
    }
    r->unsure_worker[0] = '\0';
    sf_reg_log(r, "info", "deleted %s, made by an earlier claim whose answer was lost", path);
    return 0;
}

/* Describes the holders of every id taken under worker_id_path into out: "N holders:
 * ID=DATA, ..." with as many whole entries as fit in outlen, then ", and M more" for the
 * rest, so that a message is never cut in the middle of a holder. */
static void sf_reg_describe_holders(sf_registry *r, char *out, size_t outlen)
{
    char entries[SF_REGISTRY_MAX_WORKERS][SF_REG_DATA_MAX + 24];
    int n = 0;
    for (int64_t id = 0; id < SF_REGISTRY_MAX_WORKERS; id++) {
        char path[SF_REG_PATH_MAX], data[SF_REG_DATA_MAX];
        sf_reg_worker_path(r, id, path, sizeof path);
        if (sf_reg_get_string(r, path, data, sizeof data, NULL) == ZOK)
            snprintf(entries[n++], sizeof entries[0], "%" PRId64 "=%s", id, data);
    }
    static const size_t more_room = sizeof ", and 32 more";
    int used = snprintf(out, outlen, "%d holder%s: ", n, n == 1 ? "" : "s");
    if (used < 0 || (size_t)used >= outlen) {
        out[0] = '\0';
        return;
    }
    int shown = 0;
    for (; shown < n; shown++) {
        size_t need = (shown ? 2 : 0) + strlen(entries[shown]) + (shown + 1 < n ? more_room : 1);
        if ((size_t)used + need > outlen)
            break;
        used += snprintf(out + used, outlen - (size_t)used, "%s%s", shown ? ", " : "",
                         entries[shown]);
    }
    if (shown < n)
        snprintf(out + used, outlen - (size_t)used, "%sand %d more", shown ? ", " : "",
                 n - shown);
}

int sf_reg_all_taken(sf_registry *r, int skipped, bool describe, char *err, size_t errlen)
{
    char head[SF_REG_PATH_MAX + 256];
    if (skipped > 0)
        snprintf(head, sizeof head, "no worker id under %s can be claimed: %d free ones have "
                 "floors too far ahead of our clock (see the warnings above; `snowflake-zk "
                 "list` shows every floor), the others are taken", r->worker_id_path, skipped);
    else
        snprintf(head, sizeof head, "all %d worker ids under %s are taken",
                 SF_REGISTRY_MAX_WORKERS, r->worker_id_path);
    size_t len = strlen(head);
    if (!describe || len + 3 >= errlen) {
        sf_registry_set_err(err, errlen, "%s", head);
        return SF_REGISTRY_ALL_TAKEN;
    }
    char holders[SF_REGISTRY_ERR_MAX];
    size_t room = errlen - len - 2 < sizeof holders ? errlen - len - 2 : sizeof holders;
    sf_reg_describe_holders(r, holders, room);
    sf_registry_set_err(err, errlen, "%s; %s", head, holders);
    return SF_REGISTRY_ALL_TAKEN;
}
