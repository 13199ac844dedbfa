/* client.h -- a Snowflake client connection as the peer checks and the CLI make it: a
 * connect bounded by a timeout, the framed transport, and the binary protocol with its
 * nesting bounded, so that no answer, a slow one or a hostile one cannot hang or crash
 * the caller. */
#ifndef SF_CLIENT_H
#define SF_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <thrift/c_glib/protocol/thrift_protocol.h>
#include <thrift/c_glib/transport/thrift_socket.h>

#include "sf_thrift_snowflake.h"

typedef struct sf_client {
    ThriftSocket *socket;
    ThriftTransport *transport;
    ThriftProtocol *protocol;
    SfThriftSnowflakeIf *api; /* call the service through this */
} sf_client;

/* Connects to host:port within timeout_ms, bounding each later read and write by it too.
 * False with err and errno as sf_connect_tcp leaves them (ECONNREFUSED when nothing
 * listens) and c empty. */
bool sf_client_open(sf_client *c, const char *host, int port, int timeout_ms, char *err,
                    size_t errlen);

/* Closes the connection and frees every part that exists; c is empty after. */
void sf_client_close(sf_client *c);

#endif
