/* peer.c -- asks another snowflaked over Thrift for its worker id, datacenter id and clock. */
#define _POSIX_C_SOURCE 200809L
#include "peer.h"

#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "common/registry_options.h"
#include "sf_thrift_snowflake.h"

/* Splits "host:port" (the original's node data); false if the port is not 1..65535. */
static gboolean split_host_port(const char *host_port, char **host, int *port)
{
    const char *colon = strrchr(host_port, ':');
    if (!colon || colon == host_port)
        return FALSE;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 1 || p > 65535)
        return FALSE;
    *host = g_strndup(host_port, (gsize)(colon - host_port));
    *port = (int)p;
    return TRUE;
}

/* The sanity checks' view of a peer: its ids and clock, every step bounded by the timeout
 * so one dead peer cannot stall start-up. */
int sf_peer_query(void *ctx, const char *host_port, int64_t *worker_id, int64_t *datacenter_id,
                  int64_t *timestamp_ms, char *err, size_t errlen)
{
    int timeout_ms = ctx ? *(const int *)ctx : 1000;
    char *host = NULL;
    int port = 0;
    if (!split_host_port(host_port, &host, &port)) {
        snprintf(err, errlen, "'%s' is not host:port with a port 1..65535", host_port);
        return -1;
    }
    char cerr[256];
    sf_client c;
    if (!sf_client_open(&c, host, port, timeout_ms, cerr, sizeof cerr)) {
        int refused = errno == ECONNREFUSED;
        snprintf(err, errlen, "cannot connect to %s: %s", host_port, cerr);
        g_free(host);
        return refused ? SF_REGISTRY_PEER_REFUSED : -1;
    }
    SfThriftSnowflakeIf *client = c.api;
    GError *error = NULL;
    gint64 w = -1, d = -1, t = 0;
    int rc = -1;
    if (!sf_thrift_snowflake_if_get_worker_id(client, &w, &error) ||
        !sf_thrift_snowflake_if_get_datacenter_id(client, &d, &error) ||
        !sf_thrift_snowflake_if_get_timestamp(client, &t, &error))
        snprintf(err, errlen, "%s did not answer within %d ms: %s", host_port, timeout_ms,
                 error ? error->message : "unknown error");
    else
        rc = 0;
    if (error)
        g_error_free(error);
    sf_client_close(&c);
    g_free(host);
    if (rc == 0) {
        *worker_id = w;
        *datacenter_id = d;
        *timestamp_ms = t;
    }
    return rc;
}
