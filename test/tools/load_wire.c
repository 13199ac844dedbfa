/* load_wire.c -- encodes snowflaked requests once, as a real Thrift client would, for the load tools. */
#include "load_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib-object.h>
#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/transport/thrift_framed_transport.h>
#include <thrift/c_glib/transport/thrift_memory_buffer.h>

#include "sf_thrift_snowflake.h"

/* The generated client writes through a framed transport into a memory buffer,
 * so the bytes are exactly what any Thrift client sends; the load tools then
 * resend them without paying for encoding on every call. */
uint8_t *load_wire_encode(const char *agent, int count, size_t *len)
{
    GError *error = NULL;
    ThriftMemoryBuffer *mem = g_object_new(THRIFT_TYPE_MEMORY_BUFFER, "buf_size", 65536, NULL);
    ThriftTransport *framed = g_object_new(THRIFT_TYPE_FRAMED_TRANSPORT, "transport", mem, NULL);
    ThriftProtocol *proto = g_object_new(THRIFT_TYPE_BINARY_PROTOCOL, "transport", framed, NULL);
    SfThriftSnowflakeClient *client = g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_CLIENT,
                                                   "input_protocol", proto,
                                                   "output_protocol", proto, NULL);
    const char *method = count > 0 ? "get_ids" : "get_id";
    gboolean ok = count > 0
        ? sf_thrift_snowflake_client_send_get_ids(SF_THRIFT_SNOWFLAKE_IF(client), agent, count,
                                                  &error)
        : sf_thrift_snowflake_client_send_get_id(SF_THRIFT_SNOWFLAKE_IF(client), agent, &error);
    uint8_t *out = NULL;
    if (!ok) {
        fprintf(stderr, "cannot encode the %s request: %s\n", method,
                error ? error->message : "unknown error");
        g_clear_error(&error);
    } else if (mem->buf->len < 8 || load_wire_be32(mem->buf->data) != mem->buf->len - 4) {
        fprintf(stderr, "the encoded %s request (%u bytes) is not one frame\n", method,
                mem->buf->len);
    } else if ((out = malloc(mem->buf->len)) == NULL) {
        fprintf(stderr, "out of memory for a %u-byte request\n", mem->buf->len);
    } else {
        memcpy(out, mem->buf->data, mem->buf->len);
        *len = mem->buf->len;
    }
    g_object_unref(client);
    g_object_unref(proto);
    g_object_unref(framed);
    g_object_unref(mem);
    return out;
}

/* Network byte order, as the binary protocol and the frame header use. */
uint32_t load_wire_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
