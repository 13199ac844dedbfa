/* peer.c -- asks another snowflaked over Thrift for its worker id, datacenter id and clock. */
#define _POSIX_C_SOURCE 200809L
#include "peer.h"

#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "common/hostport.h"
#include "common/registry_options.h"
#include "sf_thrift_snowflake.h"

/* The sanity checks' view of a peer: its ids and clock, every step bounded by the timeout
 * so one dead peer cannot stall start-up. */
int sf_peer_query(void *ctx, const char *host_port, int64_t *worker_id, int64_t *datacenter_id,
                  int64_t *timestamp_ms, char *err, size_t errlen)
{
    int timeout_ms = ctx ? *(const int *)ctx : 1000;
    char host[SF_HOSTPORT_HOST_MAX], why[400];
    int port = 0;
    if (!sf_hostport_parse(host_port, host, sizeof host, &port, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    char cerr[256];
    sf_client c;
    if (!sf_client_open(&c, host, port, timeout_ms, cerr, sizeof cerr)) {
        int refused = errno == ECONNREFUSED;
        snprintf(err, errlen, "cannot connect to %s: %s", host_port, cerr);
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
    if (rc == 0) {
        *worker_id = w;
        *datacenter_id = d;
        *timestamp_ms = t;
    }
    return rc;
}
