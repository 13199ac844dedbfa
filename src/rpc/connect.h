/* connect.h -- opens a Thrift client socket with a bound on the name's lookup and the connect
 * themselves, not only on reads. */
#ifndef SF_CONNECT_H
#define SF_CONNECT_H

#include <stddef.h>
#include <thrift/c_glib/transport/thrift_socket.h>

/* Connects a TCP socket to host:port (a name or an address; the name is looked up as
 * sf_resolve does and every address it has is tried) within timeout_ms in all, the lookup
 * included, and bounds each later read and write by timeout_ms. Returns the connected,
 * blocking descriptor, or -1 with err saying why ("connection refused", "no answer within
 * 1000 ms", "cannot resolve 'x' within 250 ms", ...) and errno set to the cause (ECONNREFUSED
 * when nothing listens there, ETIMEDOUT when nothing answered in time, EHOSTUNREACH when the
 * name has no address). */
int sf_connect_tcp(const char *host, int port, int timeout_ms, char *err, size_t errlen);

/* A ThriftSocket already open on a connection made by sf_connect_tcp(): wrap it in a
 * transport and use it without calling thrift_transport_open(). Returns NULL with err
 * filled and errno set as sf_connect_tcp does when the connection fails. Free with g_object_unref(), which closes it. */
ThriftSocket *sf_connect_thrift_socket(const char *host, int port, int timeout_ms, char *err,
                                       size_t errlen);

#endif /* SF_CONNECT_H */
