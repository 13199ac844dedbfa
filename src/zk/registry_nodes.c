/* registry_nodes.c -- what every part of the registry names and reads the same way: the paths
 * derived from the settings, the worker and state nodes' paths, the ACL, our session's id, a
 * node read as a string, and the note that a request failed for ZooKeeper's reasons. It calls
 * no other part, so that each part can use it without calling back up.
 * Part of the registry (registry.c says how the parts fit); knows nothing of sockets. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "registry_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sf_reg_rooted(const sf_registry *r, const char *s, const char *path, const char *suffix)
{
    const char *root = r->chroot != NULL ? r->chroot : "";
    size_t n = strlen(root) + (s != NULL ? strlen(s) : strlen(path) + strlen(suffix)) + 1;
    char *out = malloc(n);
    if (out != NULL)
        snprintf(out, n, "%s%s%s", root, s != NULL ? s : path, s != NULL ? "" : suffix);
    return out;
}

/* The session id of the current handle, to recognise our own ephemeral nodes. */
int64_t sf_reg_session_id(sf_registry *r)
{
    const clientid_t *cid = zoo_client_id(r->zh);
    return cid ? cid->client_id : 0;
}

/* The ACL for every node we create: with a credential, only its holders may change
 * them and everyone may read; without, the original's open ACL. */
struct ACL_vector *sf_reg_acl(sf_registry *r)
{
    if (!r->auth)
        return &ZOO_OPEN_ACL_UNSAFE;
    r->acl[0].perms = ZOO_PERM_ALL;
    r->acl[0].id.scheme = (char *)"auth";
    r->acl[0].id.id = (char *)"";
    r->acl[1].perms = ZOO_PERM_READ;
    r->acl[1].id.scheme = (char *)"world";
    r->acl[1].id.id = (char *)"anyone";
    r->acl_vec.count = 2;
    r->acl_vec.data = r->acl;
    return &r->acl_vec;
}

/* The paths of id's worker node and state node. */
void sf_reg_worker_path(sf_registry *r, int64_t id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%" PRId64, r->worker_id_path, id);
}

void sf_reg_state_node(sf_registry *r, int64_t id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%" PRId64, r->state_path, id);
}

/* Reads a node's data as a string. Returns a ZooKeeper code. */
int sf_reg_get_string(sf_registry *r, const char *path, char *out, size_t outlen,
                      struct Stat *stat)
{
    int len = (int)outlen - 1;
    int rc = zoo_get(r->zh, path, 0, out, &len, stat);
    out[rc == ZOK && len > 0 ? len : 0] = '\0';
    return rc;
}

void sf_reg_zk_error(sf_registry *r, int rc)
{
    switch (rc) {
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZSESSIONEXPIRED:
    case ZSESSIONMOVED:
    case ZINVALIDSTATE:
    case ZCLOSING:
    case ZNEWCONFIGNOQUORUM:
    case ZRECONFIGINPROGRESS:
    case ZTHROTTLEDOP:
        pthread_mutex_lock(&r->mu);
        r->zk_failed = true;
        pthread_mutex_unlock(&r->mu);
        break;
    default:
        break;
    }
}

void sf_reg_not_yet(sf_registry *r)
{
    pthread_mutex_lock(&r->mu);
    r->not_yet = true;
    pthread_mutex_unlock(&r->mu);
}
