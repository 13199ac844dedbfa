/* registry_options.c -- the registry's defaults and the check of its settings, the integer
 * ones read off SF_REGISTRY_INT_OPTIONS. */
#include "registry_options.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "hostport.h"
#include "option_range.h"
#include "lib/snowflake.h"
#include "zkpath.h"

void sf_registry_options_init(sf_registry_options *opts)
{
    memset(opts, 0, sizeof *opts);
#define SF_REGISTRY_DEFAULT(field, lo, hi, dflt) opts->field = (dflt);
    SF_REGISTRY_INT_OPTIONS(SF_REGISTRY_DEFAULT)
#undef SF_REGISTRY_DEFAULT
    opts->worker_id_path = "/snowflake-servers";
    opts->worker_id = -1;
    opts->epoch_ms = SF_TWITTER_EPOCH_MS;
    opts->max_clock_skew_ms = 10000;
}

bool sf_registry_auth_valid(const char *auth)
{
    return auth == NULL || auth[0] == '\0' || (auth[0] != ':' && strchr(auth, ':') != NULL);
}

bool sf_registry_options_check(const sf_registry_options *opts, char *err, size_t errlen)
{
    if (!sf_hostport_list_check("zookeeper.hosts", opts->hosts, err, errlen))
        return false;
    const char *const paths[] = {opts->worker_id_path, opts->lock_path, opts->state_path};
    const char *const names[] = {"worker_id_path", "lock_path", "state_path"};
    for (int i = 0; i < 3; i++) {
        const char *why = NULL;
        if ((i == 0 || paths[i] != NULL) && !sf_zkpath_valid(paths[i], &why)) {
            snprintf(err, errlen, "%s '%s' is not a valid ZooKeeper path (%s): allowed an "
                     "absolute path of at most %d bytes like /snowflake-servers",
                     names[i], paths[i] ? paths[i] : "", why, SF_ZKPATH_MAX);
            return false;
        }
    }
    if (opts->worker_id < -1 || opts->worker_id > SF_MAX_WORKER_ID) {
        snprintf(err, errlen, "worker_id %" PRId64 " is out of range (0..%d, or auto)",
                 opts->worker_id, SF_MAX_WORKER_ID);
        return false;
    }
    if (opts->epoch_ms < 0 || opts->epoch_ms > SF_MAX_EPOCH_MS) {
        snprintf(err, errlen, "epoch_ms %" PRId64 " is out of range (0..%lld)", opts->epoch_ms,
                 (long long)SF_MAX_EPOCH_MS);
        return false;
    }
    if (!sf_registry_auth_valid(opts->auth)) {
        snprintf(err, errlen, "zookeeper.auth must be user:password");
        return false;
    }
#define SF_REGISTRY_CHECK(field, lo, hi, dflt) \
    if (!sf_option_in_range("zookeeper.", #field, opts->field, (lo), (hi), err, errlen)) \
        return false;
    SF_REGISTRY_INT_OPTIONS(SF_REGISTRY_CHECK)
#undef SF_REGISTRY_CHECK
    return true;
}
