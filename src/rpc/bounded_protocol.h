/* bounded_protocol.h -- SfBoundedProtocol: Thrift's binary protocol with a limit on how
 * deeply structs, lists, sets and maps may nest, on how many elements a container may
 * claim, and on how long a string may claim to be (no more than its transport holds),
 * for every protocol the project reads with (server, peer checks, CLI). Thrift 0.17's
 * c_glib skip recurses without a limit and ignores errors, so one deeply nested frame
 * would otherwise overflow the stack; and its string reader allocates the claimed
 * length before reading, so a few bytes could ask for 2 GiB. */
#ifndef SF_BOUNDED_PROTOCOL_H
#define SF_BOUNDED_PROTOCOL_H

#include <glib-object.h>
#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/transport/thrift_transport.h>

G_BEGIN_DECLS

/* Nesting deeper than this is refused: our IDL nests 3 deep (message, result, list). */
#define SF_BOUNDED_PROTOCOL_MAX_DEPTH 64
/* No frame we accept or read holds more elements than bytes: 16 MiB. */
#define SF_BOUNDED_PROTOCOL_MAX_ELEMENTS 16777216u

#define SF_TYPE_BOUNDED_PROTOCOL (sf_bounded_protocol_get_type())

typedef struct _SfBoundedProtocol SfBoundedProtocol;
typedef struct _SfBoundedProtocolClass SfBoundedProtocolClass;

GType sf_bounded_protocol_get_type(void);

/* A binary protocol over transport (referenced as THRIFT_TYPE_BINARY_PROTOCOL's
 * "transport" property is). Past the limits every further read of the message fails,
 * with an error naming the limit, so that the library's skip unwinds at once. Each
 * read_message_begin starts afresh. */
ThriftProtocol *sf_bounded_protocol_new(ThriftTransport *transport);

G_END_DECLS

#endif /* SF_BOUNDED_PROTOCOL_H */
