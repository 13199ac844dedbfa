/* client.c -- builds and tears down a Snowflake client connection in one place, so the
 * peer checks and the CLI get the same bounds. */
#include "client.h"

#include <errno.h>
#include <string.h>
#include <thrift/c_glib/transport/thrift_framed_transport.h>

#include "bounded_protocol.h"
#include "connect.h"

bool sf_client_open(sf_client *c, const char *host, int port, int timeout_ms, char *err,
                    size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->socket = sf_connect_thrift_socket(host, port, timeout_ms, err, errlen);
    if (c->socket == NULL)
        return false;
    c->transport = g_object_new(THRIFT_TYPE_FRAMED_TRANSPORT, "transport", c->socket, NULL);
    c->protocol = sf_bounded_protocol_new(c->transport);
    c->api = g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_CLIENT, "input_protocol", c->protocol,
                          "output_protocol", c->protocol, NULL);
    return true;
}

void sf_client_close(sf_client *c)
{
    int saved = errno; /* callers report the error that ended the call */
    if (c->transport != NULL)
        thrift_transport_close(c->transport, NULL);
    if (c->api != NULL)
        g_object_unref(c->api);
    if (c->protocol != NULL)
        g_object_unref(c->protocol);
    if (c->transport != NULL)
        g_object_unref(c->transport);
    if (c->socket != NULL)
        g_object_unref(c->socket);
    memset(c, 0, sizeof *c);
    errno = saved;
}
