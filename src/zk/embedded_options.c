/* embedded_options.c -- libsnowflake-zk's options: the defaults, the check that names a bad
 * option and its range before anything connects, and the parsing of datacenter_paths.
 * Knows nothing of ZooKeeper or of a handle's life. */
#define _GNU_SOURCE
#include "embedded_options.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hostport.h"
#include "common/option_range.h"
#include "common/registry_options.h"
#include "common/zkpath.h"

void sfz_options_init(sfz_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->worker_id_path = "/snowflake-servers";
    opts->worker_id = -1;
    opts->epoch_ms = SF_TWITTER_EPOCH_MS;
#define SFZ_DEFAULT(field, lo, hi, dflt) opts->field = (dflt);
    SFZ_INT_OPTIONS(SFZ_DEFAULT)
#undef SFZ_DEFAULT
}

/* The generator's options for worker_id under opts. */
void sfz_worker_options(const sfz_options *opts, int64_t worker_id, sf_worker_options *wo)
{
    sf_worker_options_init(wo);
    wo->datacenter_id = opts->datacenter_id;
    wo->worker_id = worker_id;
    wo->epoch_ms = opts->epoch_ms;
    wo->max_clock_backward_wait_ms = opts->max_clock_backward_wait_ms;
    wo->random_first_sequence = opts->random_first_sequence;
}

/* True when holder describes an embedded holder, or is host:port with a port 1..65535
 * (peers then query it over Thrift), in fewer than SFZ_HOLDER_MAX bytes. */
static bool sfz_holder_valid(const char *holder)
{
    size_t n = strlen(holder);
    if (n == 0 || n >= SFZ_HOLDER_MAX)
        return false;
    if (strncmp(holder, SF_ZKPATH_EMBEDDED_PREFIX, strlen(SF_ZKPATH_EMBEDDED_PREFIX)) == 0)
        return true;
    char host[SF_HOSTPORT_HOST_MAX], why[400];
    int port;
    return sf_hostport_parse(holder, host, sizeof host, &port, why, sizeof why);
}

/* The nodes a worker path's holders make: the path, its lock path and its state path. */
#define SFZ_PATH_NODES 3
static const char *const sfz_node_suffixes[SFZ_PATH_NODES] = {"", "-locks", "-state"};

/* True when a is b or one of b's ancestors (a proper prefix of b ending at a '/'). */
static bool sfz_path_covers(const char *a, const char *b)
{
    size_t n = strlen(a);
    return strncmp(a, b, n) == 0 && (b[n] == '\0' || b[n] == '/');
}

/* True when entry i's nodes (its path, -locks, -state) meet entry j's: the same node, or
 * one under the other (each entry's holders would read or write the other's); *a and *b
 * name the two, in buffers of SF_ZKPATH_MAX + 8 bytes. */
static bool sfz_paths_collide(const char *pi, const char *pj, char *a, char *b)
{
    for (int x = 0; x < SFZ_PATH_NODES; x++)
        for (int y = 0; y < SFZ_PATH_NODES; y++) {
            snprintf(a, SF_ZKPATH_MAX + 8, "%s%s", pi, sfz_node_suffixes[x]);
            snprintf(b, SF_ZKPATH_MAX + 8, "%s%s", pj, sfz_node_suffixes[y]);
            if (sfz_path_covers(a, b) || sfz_path_covers(b, a))
                return true;
        }
    return false;
}

/* Parses datacenter_paths ("D=/path,D=/path") into out, ordered by datacenter id; false
 * with msg saying what is wrong, naming the entry. */
bool sfz_parse_datacenters(const char *spec, sfz_datacenters *out, char *msg, size_t len)
{
    memset(out, 0, sizeof *out);
    const char *p = spec;
    bool seen[SF_MAX_DATACENTER_ID + 1] = {false};
    while (p != NULL && (*p != '\0' || p != spec)) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        char num[24];
        size_t numlen = eq != NULL ? (size_t)(eq - p) : 0;
        int64_t dc = -1;
        bool dc_ok = false;
        if (eq != NULL && numlen < sizeof num) {
            memcpy(num, p, numlen);
            num[numlen] = '\0';
            dc_ok = sf_decimal_parse("datacenter", num, 0, SF_MAX_DATACENTER_ID, &dc, NULL, 0);
        }
        size_t plen = eq != NULL ? n - (size_t)(eq + 1 - p) : 0;
        char path[SF_ZKPATH_MAX + 2];
        const char *why = n == 0 ? "an empty entry (a comma too many)" : "no '='";
        if (eq != NULL && plen < sizeof path) {
            memcpy(path, eq + 1, plen);
            path[plen] = '\0';
        }
        if (n > 0 && (memchr(p, ' ', n) != NULL || memchr(p, '\t', n) != NULL))
            why = "a blank in it (none is allowed around '=' or ',')";
        else if (eq != NULL && !dc_ok)
            why = "the datacenter is not a number in 0..31";
        else if (eq != NULL && seen[dc])
            why = "a datacenter named twice";
        else if (eq != NULL && plen >= sizeof path)
            why = "the path is too long";
        else if (eq != NULL && sf_zkpath_valid(path, &why))
            why = NULL;
        if (why != NULL) {
            snprintf(msg, len, "datacenter_paths entry '%.*s' is not D=/path with D 0..%d, each "
                     "once, and a valid ZooKeeper path: %s", (int)(n < 80 ? n : 80), p,
                     SF_MAX_DATACENTER_ID, why);
            return false;
        }
        seen[dc] = true;
        int at = out->count++;
        while (at > 0 && out->ids[at - 1] > dc) { /* insertion: ordered by datacenter */
            out->ids[at] = out->ids[at - 1];
            memcpy(out->paths[at], out->paths[at - 1], sizeof out->paths[at]);
            at--;
        }
        out->ids[at] = dc;
        memcpy(out->paths[at], path, plen + 1); /* plen <= SF_ZKPATH_MAX: a valid path */
        p = end != NULL ? end + 1 : NULL;
    }
    for (int i = 0; i < out->count; i++)
        for (int j = i + 1; j < out->count; j++) {
            char a[SF_ZKPATH_MAX + 8], b[SF_ZKPATH_MAX + 8];
            if (strcmp(out->paths[i], out->paths[j]) == 0) {
                snprintf(msg, len, "datacenter_paths names %s for datacenters %" PRId64 " and %"
                         PRId64 ": each datacenter needs its own path", out->paths[i],
                         out->ids[i], out->ids[j]);
                return false;
            }
            if (sfz_paths_collide(out->paths[i], out->paths[j], a, b)) {
                snprintf(msg, len, "datacenter_paths entries '%" PRId64 "=%s' and '%" PRId64
                         "=%s' meet: %s and %s are %s, and each path's holders use the path, "
                         "path-locks and path-state; give each datacenter a path apart",
                         out->ids[i], out->paths[i], out->ids[j], out->paths[j], a, b,
                         strcmp(a, b) == 0 ? "the same node" : "one under the other");
                return false;
            }
        }
    if (out->count == 0) {
        snprintf(msg, len, "datacenter_paths is empty: with datacenter_id -1 (automatic) name "
                 "at least one D=/path");
        return false;
    }
    return true;
}

int sfz_options_check(const sfz_options *opts, sfz_error *err)
{
    char msg[SFZ_ERROR_MAX];
    const char *why = NULL;
    if (!sf_hostport_list_check("zookeeper", opts->zookeeper, msg, sizeof msg))
        return sfz_fail(err, SFZ_ERR_ARG, "%s", msg);
    if (!sf_zkpath_valid(opts->worker_id_path, &why))
        return sfz_fail(err, SFZ_ERR_ARG, "worker_id_path '%s' is not a valid ZooKeeper path "
                        "(%s): allowed an absolute path of at most %d bytes like "
                        "/snowflake-servers", opts->worker_id_path ? opts->worker_id_path : "",
                        why, SF_ZKPATH_MAX);
    if (opts->worker_id < -1 || opts->worker_id > SF_MAX_WORKER_ID)
        return sfz_fail(err, SFZ_ERR_ARG, "worker_id %" PRId64 " is outside 0..%d (or -1 for "
                        "the lowest free one)", opts->worker_id, SF_MAX_WORKER_ID);
    if (opts->datacenter_id < -1 || opts->datacenter_id > SF_MAX_DATACENTER_ID)
        return sfz_fail(err, SFZ_ERR_ARG, "datacenter_id %" PRId64 " is outside 0..%d (or -1 "
                        "with datacenter_paths)", opts->datacenter_id, SF_MAX_DATACENTER_ID);
    if (opts->datacenter_id == -1) {
        sfz_datacenters dcs;
        if (opts->worker_id != -1)
            return sfz_fail(err, SFZ_ERR_ARG, "worker_id %" PRId64 " with datacenter_id -1: an "
                            "automatic datacenter takes an automatic worker id (-1)",
                            opts->worker_id);
        if (!sfz_parse_datacenters(opts->datacenter_paths != NULL ? opts->datacenter_paths : "",
                                   &dcs, msg, sizeof msg))
            return sfz_fail(err, SFZ_ERR_ARG, "%s", msg);
    } else if (opts->datacenter_paths != NULL) {
        return sfz_fail(err, SFZ_ERR_ARG, "datacenter_paths is set with datacenter_id %" PRId64
                        ": it is for datacenter_id -1 (automatic) only", opts->datacenter_id);
    }
    if (opts->epoch_ms < 0 || opts->epoch_ms > SF_MAX_EPOCH_MS)
        return sfz_fail(err, SFZ_ERR_ARG, "epoch_ms %" PRId64 " is outside 0..%lld (Unix ms up "
                        "to 2100-01-01)", opts->epoch_ms, (long long)SF_MAX_EPOCH_MS);
    if (opts->epoch_ms > sf_clock_now_ms())
        return sfz_fail(err, SFZ_ERR_ARG, "epoch_ms %" PRId64 " is in the future: allowed a "
                        "moment in the past, e.g. Twitter's %lld", opts->epoch_ms,
                        (long long)SF_TWITTER_EPOCH_MS);
    if (!sf_registry_auth_valid(opts->auth))
        return sfz_fail(err, SFZ_ERR_ARG, "auth must be user:password");
    if (opts->holder != NULL && !sfz_holder_valid(opts->holder))
        return sfz_fail(err, SFZ_ERR_ARG, "holder '%.64s' is neither \"%s...\" nor the "
                        "host:port where this program serves Thrift (at most %d bytes)",
                        opts->holder, SF_ZKPATH_EMBEDDED_PREFIX, SFZ_HOLDER_MAX - 1);
    if (opts->max_peer_skew_ms > 0 && (opts->query_peer == NULL || opts->skip_sanity_checks))
        return sfz_fail(err, SFZ_ERR_ARG, "max_peer_skew_ms %d needs query_peer and the peer "
                        "checks (skip_sanity_checks false), to ask the peers' clocks: allowed "
                        "0 (off) without them", opts->max_peer_skew_ms);
#define SFZ_CHECK(field, lo, hi, dflt) \
    if (!sf_option_in_range("", #field, opts->field, (lo), (hi), msg, sizeof msg)) \
        return sfz_fail(err, SFZ_ERR_ARG, "%s", msg);
    SFZ_INT_OPTIONS(SFZ_CHECK)
#undef SFZ_CHECK
    sf_worker_options wo;
    sfz_worker_options(opts, 0, &wo);
    wo.datacenter_id = 0; /* checked above, automatic or not */
    sf_error werr;
    if (sf_worker_options_check(&wo, &werr) != SF_OK)
        return sfz_fail(err, SFZ_ERR_ARG, "%s", werr.message);
    return SFZ_OK;
}
