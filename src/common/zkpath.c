/* zkpath.c -- checks a ZooKeeper path against ZooKeeper's own rules (absolute, no empty,
 * "." or ".." component) and ours (not the root, bounded length), so that a bad
 * worker_id_path is refused by the settings check instead of after the port is bound; and
 * reads a worker node's name, which must be the id's one canonical spelling, and writes and
 * reads an embedded holder's description. */
#define _GNU_SOURCE /* HOST_NAME_MAX */
#include "zkpath.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostport.h"
#include "lib/snowflake.h"

bool sf_zkpath_valid(const char *path, const char **why)
{
    const char *reason = NULL;
    size_t n = path != NULL ? strlen(path) : 0;
    if (n == 0 || path[0] != '/')
        reason = "not absolute";
    else if (n == 1)
        reason = "the root";
    else if (n > SF_ZKPATH_MAX)
        reason = "too long";
    else if (path[n - 1] == '/')
        reason = "a trailing slash";
    else {
        /* Each component, after its leading slash, up to the next one. */
        for (const char *c = path + 1; reason == NULL; ) {
            const char *end = strchr(c, '/');
            size_t len = end != NULL ? (size_t)(end - c) : strlen(c);
            if (len == 0)
                reason = "an empty component (//)";
            else if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
                reason = "a . or .. component";
            if (end == NULL)
                break;
            c = end + 1;
        }
    }
    if (why != NULL)
        *why = reason;
    return reason == NULL;
}

bool sf_zkpath_parse_worker_id(const char *name, int64_t *id)
{
    size_t n = strlen(name);
    if (n == 0 || n > 2 || (n == 2 && name[0] == '0'))
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        v = v * 10 + (name[i] - '0');
    }
    if (v > SF_MAX_WORKER_ID)
        return false;
    *id = v;
    return true;
}

bool sf_zkpath_parse_embedded(const char *data, int64_t *datacenter_id)
{
    size_t prefix = strlen(SF_ZKPATH_EMBEDDED_PREFIX);
    if (strncmp(data, SF_ZKPATH_EMBEDDED_PREFIX, prefix) != 0)
        return false;
    *datacenter_id = -1;
    const char *dc = strstr(data + prefix, "datacenter=");
    if (dc != NULL) {
        const char *v = dc + strlen("datacenter=");
        char num[24], why[160];
        size_t n = strcspn(v, " ");
        int64_t id;
        if (n < sizeof num) {
            memcpy(num, v, n);
            num[n] = '\0';
            if (sf_decimal_parse("datacenter", num, 0, SF_MAX_DATACENTER_ID, &id, why,
                                 sizeof why))
                *datacenter_id = id;
        }
    }
    return true;
}

void sf_zkpath_format_embedded(char *out, size_t outlen, int64_t datacenter_id)
{
    char host[HOST_NAME_MAX + 1];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[HOST_NAME_MAX] = '\0';
    snprintf(out, outlen, SF_ZKPATH_EMBEDDED_PREFIX "pid=%ld host=%s datacenter=%" PRId64,
             (long)getpid(), host, datacenter_id);
}
